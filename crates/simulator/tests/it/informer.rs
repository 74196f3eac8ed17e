//! The control-plane client's streaming informer against sbsim's streams: the cache gate,
//! snapshot then events, reconnects with a fresh snapshot, and scopes closed when their
//! object is deleted or nobody follows them.

use std::time::Duration;

use serde_json::json;
use simplyblock_controlplane::*;

use crate::common::*;

/// How long a frame or change may take: the workspace's one patience.
const WAIT: Duration = simplyblock_testenv::wait::PATIENCE;

fn quick() -> InformerConfig {
    InformerConfig {
        min_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        idle_timeout: Duration::from_secs(45),
    }
}

fn pool_named(name: &str) -> PoolCreate {
    PoolCreate {
        name: name.into(),
        ..Default::default()
    }
}

async fn changed(sub: &mut Subscription) -> Option<Changes> {
    tokio::time::timeout(WAIT, sub.changed())
        .await
        .expect("a change within the wait")
}

/// Read changes until `f` holds for the informer.
async fn until(sub: &mut Subscription, what: &str, f: impl Fn() -> bool) {
    while !f() {
        assert!(
            changed(sub).await.is_some(),
            "the scope closed waiting for {what}"
        );
    }
}

async fn admin(env: &Env, method: reqwest::Method, path: &str, body: serde_json::Value) {
    let r = reqwest::Client::new()
        .request(method, format!("{}{path}", env.server.url))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .expect("admin call");
    assert!(r.status().is_success(), "{path}: {}", r.status());
}

fn calls_to(env: &Env, method: &str, path: &str, query: &str) -> usize {
    env.server
        .sim
        .calls
        .lock()
        .expect("log")
        .since(0)
        .iter()
        .filter(|c| c.method == method && c.path == path && c.query.contains(query))
        .count()
}

async fn cluster_with_pool(c: &Client) -> (Uuid, Uuid) {
    let cluster = c
        .create_cluster(&ClusterCreate::new("i1", 10, 4))
        .await
        .expect("cluster")
        .id;
    let pool = c
        .create_pool(cluster, &pool_named("p1"))
        .await
        .expect("pool")
        .id;
    (cluster, pool)
}

#[tokio::test]
async fn the_cache_is_read_only_once_synced_and_a_plain_get_answers_before() {
    let env = start(1, 1).await;
    let c = &env.client;
    let (cluster, pool) = cluster_with_pool(c).await;
    // The database is down: streams answer 503, so the scope cannot sync.
    admin(
        &env,
        reqwest::Method::PUT,
        "/_sim/faults",
        json!({"spec": "unready:for=120s"}),
    )
    .await;
    let informer = Informer::new(c.clone(), quick());
    let scope = Scope::Pools { cluster };
    let mut sub = informer.subscribe(scope);
    let detail = format!("/api/v2/clusters/{cluster}/storage-pools/{pool}/");
    eventually("a refused connect", || async {
        (calls_to(
            &env,
            "GET",
            &format!("/api/v2/clusters/{cluster}/storage-pools/"),
            "watch=true",
        ) > 0)
            .then_some(())
    })
    .await;
    assert!(!informer.is_synced(scope));
    assert_eq!(informer.get::<Pool>(scope, pool), None, "the gate holds");
    let read = informer.pool(cluster, pool).await.expect("read by GET");
    assert_eq!(read.id, pool);
    assert_eq!(
        calls_to(&env, "GET", &detail, ""),
        1,
        "the fallback is a plain GET"
    );

    admin(&env, reqwest::Method::DELETE, "/_sim/faults", json!({})).await;
    let first = changed(&mut sub).await.expect("open");
    assert!(first.synced, "{first:?}");
    assert!(first.ids.contains(&pool), "{first:?}");
    let cached: Pool = informer
        .get(scope, pool)
        .expect("synced")
        .expect("the pool is listed");
    assert_eq!(cached.name, "p1");
    informer
        .pool(cluster, pool)
        .await
        .expect("read from the cache");
    assert_eq!(calls_to(&env, "GET", &detail, ""), 1, "no GET once synced");
}

#[tokio::test]
async fn events_after_the_snapshot_update_the_cache_and_name_what_changed() {
    let env = start(1, 1).await;
    let c = &env.client;
    let (cluster, first) = cluster_with_pool(c).await;
    let informer = Informer::new(c.clone(), quick());
    let scope = Scope::Pools { cluster };
    let mut sub = informer.subscribe(scope);
    let snap = changed(&mut sub).await.expect("open");
    assert_eq!(snap.ids.into_iter().collect::<Vec<_>>(), vec![first]);

    let second = c
        .create_pool(cluster, &pool_named("p2"))
        .await
        .expect("pool")
        .id;
    until(&mut sub, "the new pool", || {
        informer
            .get::<Pool>(scope, second)
            .is_some_and(|p| p.is_some())
    })
    .await;
    c.update_pool(
        cluster,
        first,
        &PoolUpdate {
            max_rw_iops: Some(777),
            ..Default::default()
        },
    )
    .await
    .expect("update");
    until(&mut sub, "the update", || {
        informer
            .get::<Pool>(scope, first)
            .flatten()
            .is_some_and(|p| p.max_rw_iops == 777)
    })
    .await;

    // Removed outright, the pool's `deleted` carries no id: the scope resynchronises and
    // the fresh snapshot leaves the pool out.
    let connects = calls_to(
        &env,
        "GET",
        &format!("/api/v2/clusters/{cluster}/storage-pools/"),
        "watch=true",
    );
    c.delete_pool(cluster, second).await.expect("delete");
    until(&mut sub, "the deletion", || {
        informer.get::<Pool>(scope, second) == Some(None)
    })
    .await;
    let listed: Vec<Pool> = informer.list(scope).expect("synced");
    assert_eq!(listed.iter().map(|p| p.id).collect::<Vec<_>>(), vec![first]);
    assert_eq!(
        calls_to(
            &env,
            "GET",
            &format!("/api/v2/clusters/{cluster}/storage-pools/"),
            "watch=true"
        ),
        connects + 1,
        "one reconnect for the fresh snapshot"
    );
}

#[tokio::test]
async fn a_stream_the_server_ends_is_reopened_with_a_fresh_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = frozen_config(dir.path());
    let env = start_with(dir, cfg).await;
    let c = &env.client;
    let (cluster, pool) = cluster_with_pool(c).await;
    let informer = Informer::new(c.clone(), quick());
    let scope = Scope::Pools { cluster };
    let mut sub = informer.subscribe(scope);
    assert!(changed(&mut sub).await.expect("open").synced);
    let list = format!("/api/v2/clusters/{cluster}/storage-pools/");

    // The stream's hour runs out; while it is closed the pool changes.
    c.update_pool(
        cluster,
        pool,
        &PoolUpdate {
            max_rw_iops: Some(5),
            ..Default::default()
        },
    )
    .await
    .expect("update");
    admin(
        &env,
        reqwest::Method::POST,
        "/_sim/clock/advance",
        json!({"seconds": 3601}),
    )
    .await;
    until(&mut sub, "a second connect", || {
        calls_to(&env, "GET", &list, "watch=true") >= 2
    })
    .await;
    until(&mut sub, "the resync", || informer.is_synced(scope)).await;
    assert_eq!(
        informer
            .get::<Pool>(scope, pool)
            .flatten()
            .map(|p| p.max_rw_iops),
        Some(5)
    );

    // The backend fails: an `error` event, refused reconnects, then a fresh snapshot.
    admin(
        &env,
        reqwest::Method::PUT,
        "/_sim/faults",
        json!({"spec": "unready:for=120s"}),
    )
    .await;
    eventually("a refused reconnect", || async {
        let refused = env
            .server
            .sim
            .calls
            .lock()
            .expect("log")
            .since(0)
            .iter()
            .any(|c| c.path == list && c.status == 503);
        refused.then_some(())
    })
    .await;
    assert!(
        !informer.is_synced(scope),
        "no cache is read while the stream is down"
    );
    admin(&env, reqwest::Method::DELETE, "/_sim/faults", json!({})).await;
    let back = changed(&mut sub).await.expect("open");
    assert!(back.synced, "{back:?}");
    assert!(informer.is_synced(scope));
}

#[tokio::test]
async fn a_scope_closes_when_its_object_is_deleted_and_when_nobody_follows_it() {
    let env = start(1, 1).await;
    let c = &env.client;
    let (cluster, pool) = cluster_with_pool(c).await;
    let informer = Informer::new(c.clone(), quick());
    let pools = Scope::Pools { cluster };
    let volumes = Scope::Volumes { cluster, pool };
    let mut pools_sub = informer.subscribe(pools);
    let mut volumes_sub = informer.subscribe(volumes);
    assert!(changed(&mut pools_sub).await.expect("open").synced);
    assert!(changed(&mut volumes_sub).await.expect("open").synced);
    assert_eq!(env.server.streams.open_total(), 2);

    c.delete_pool(cluster, pool).await.expect("delete");
    assert_eq!(
        changed(&mut volumes_sub).await,
        None,
        "the pool's scope closed"
    );
    assert!(informer.is_gone(volumes));
    assert_eq!(informer.streaming(), vec![pools]);
    eventually("only the pools stream open", || async {
        (env.server.streams.open_total() == 1).then_some(())
    })
    .await;

    drop(pools_sub);
    assert!(informer.streaming().is_empty());
    eventually("no stream open", || async {
        (env.server.streams.open_total() == 0).then_some(())
    })
    .await;
}

//! `?watch=true`: the event streams as the control plane serves them (framing, the first
//! snapshot, events, suppression, `error`, lifetime, parents closing their children) and
//! the count of open streams a test reads.

use std::time::Duration;

use serde_json::{Value, json};
use simplyblock_controlplane::sse::{EventStream, Frame};
use simplyblock_controlplane::*;

use crate::common::*;

/// How long a frame or change may take: the workspace's one patience.
const WAIT: Duration = simplyblock_testenv::wait::PATIENCE;

/// The next event (pings skipped), or `None` at the end of the stream.
pub(crate) async fn next_event(s: &mut EventStream) -> Option<(String, Value)> {
    loop {
        let frame = tokio::time::timeout(WAIT, s.next())
            .await
            .expect("a frame within the wait")
            .expect("the stream reads");
        match frame? {
            Frame::Comment(_) => continue,
            Frame::Event { event, data } => {
                let v = serde_json::from_str(&data).expect("event data is JSON");
                return Some((event, v));
            }
        }
    }
}

pub(crate) async fn expect_event(s: &mut EventStream, want: &str) -> Value {
    match next_event(s).await {
        Some((event, v)) if event == want => v,
        other => panic!("expected a {want} event, got {other:?}"),
    }
}

fn pool_named(name: &str) -> PoolCreate {
    PoolCreate {
        name: name.into(),
        ..Default::default()
    }
}

async fn open_streams(env: &Env) -> Value {
    let url = format!("{}/_sim/streams", env.server.url);
    reqwest::Client::new()
        .get(url)
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("admin call")
        .json()
        .await
        .expect("JSON")
}

async fn no_stream_open(env: &Env) {
    eventually("no stream open", || async {
        let v = open_streams(env).await;
        (v["total"] == json!(0)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_stream_opens_with_the_headers_and_crlf_framing_of_the_control_plane() {
    let env = start(1, 1).await;
    let c = &env.client;
    let cluster = c
        .create_cluster(&ClusterCreate::new("s1", 10, 4))
        .await
        .expect("cluster");
    let http = reqwest::Client::new();
    let url = format!(
        "{}/api/v2/clusters/{}/storage-pools/",
        env.server.url, cluster.id
    );
    let mut resp = http
        .get(&url)
        .query(&[("watch", "true")])
        .bearer_auth(TOKEN)
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("stream");
    assert_eq!(resp.status(), 200);
    let header = |n: &str| {
        resp.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(
        header("content-type").as_deref(),
        Some("text/event-stream; charset=utf-8")
    );
    assert_eq!(header("cache-control").as_deref(), Some("no-store"));
    assert_eq!(header("x-accel-buffering").as_deref(), Some("no"));
    let mut text = String::new();
    while !text.contains("\r\n\r\n") {
        let chunk = tokio::time::timeout(WAIT, resp.chunk())
            .await
            .expect("a chunk")
            .expect("read")
            .expect("not the end");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        text.starts_with("event: snapshot\r\ndata: []\r\nretry: 3000\r\n\r\n"),
        "{text:?}"
    );

    // The parent lookups run first: an unknown cluster is the REST 404.
    let missing = format!(
        "{}/api/v2/clusters/{}/storage-pools/",
        env.server.url,
        Uuid::nil()
    );
    let r = http
        .get(&missing)
        .query(&[("watch", "true")])
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status(), 404);
    let body: Value = r.json().await.expect("JSON");
    assert_eq!(
        body,
        json!({"detail": format!("'Cluster {} not found'", Uuid::nil())})
    );
    let r = http
        .get(&url)
        .query(&[("watch", "true")])
        .send()
        .await
        .expect("answer");
    assert_eq!(
        r.status(),
        401,
        "a stream needs the token as every call does"
    );

    // Each connect is one call in the log, under its route.
    let calls = env.server.sim.calls.lock().expect("log").since(0);
    let streams = calls
        .iter()
        .filter(|c| c.query.contains("watch=true") && c.status == 200)
        .count();
    assert_eq!(streams, 1, "{calls:#?}");
}

#[tokio::test]
async fn a_list_stream_sends_created_updated_and_deleted_and_suppresses_no_op_updates() {
    let env = start(1, 1).await;
    let c = &env.client;
    let cluster = c
        .create_cluster(&ClusterCreate::new("s1", 10, 4))
        .await
        .expect("cluster")
        .id;
    let first = c
        .create_pool(cluster, &pool_named("p1"))
        .await
        .expect("pool");
    let mut s = c
        .watch(&format!("/clusters/{cluster}/storage-pools/"))
        .await
        .expect("stream");
    let snapshot = expect_event(&mut s, "snapshot").await;
    assert_eq!(snapshot.as_array().map(Vec::len), Some(1), "{snapshot}");
    assert_eq!(snapshot[0]["id"], json!(first.id));
    assert_eq!(s.retry_ms(), Some(3000));

    // A change outside the scope renders it again; nothing of it differs, so nothing is
    // sent: the next event is the pool created after it.
    c.create_cluster(&ClusterCreate::new("elsewhere", 10, 4))
        .await
        .expect("other cluster");
    let second = c
        .create_pool(cluster, &pool_named("p2"))
        .await
        .expect("second pool");
    let created = expect_event(&mut s, "created").await;
    assert_eq!(created["id"], json!(second.id));
    assert_eq!(created["name"], json!("p2"));

    c.update_pool(
        cluster,
        first.id,
        &PoolUpdate {
            max_rw_iops: Some(1000),
            ..Default::default()
        },
    )
    .await
    .expect("update");
    let updated = expect_event(&mut s, "updated").await;
    assert_eq!(updated["id"], json!(first.id));
    assert_eq!(updated["max_rw_iops"], json!(1000));

    c.delete_pool(cluster, second.id).await.expect("delete");
    let deleted = expect_event(&mut s, "deleted").await;
    assert_eq!(
        deleted,
        json!({}),
        "a pool removed outright leaves nothing to read"
    );
}

#[tokio::test]
async fn a_detail_stream_ends_after_deleted_and_its_reconnect_gets_404() {
    let env = start(1, 1).await;
    let c = &env.client;
    let cluster = c
        .create_cluster(&ClusterCreate::new("s1", 10, 4))
        .await
        .expect("cluster")
        .id;
    let pool = c
        .create_pool(cluster, &pool_named("p1"))
        .await
        .expect("pool")
        .id;
    let path = format!("/clusters/{cluster}/storage-pools/{pool}/");
    let mut s = c.watch(&path).await.expect("stream");
    let snapshot = expect_event(&mut s, "snapshot").await;
    assert_eq!(snapshot["id"], json!(pool), "a detail snapshot is one DTO");
    c.delete_pool(cluster, pool).await.expect("delete");
    assert_eq!(expect_event(&mut s, "deleted").await, json!({}));
    assert_eq!(
        next_event(&mut s).await,
        None,
        "the stream ends after deleted"
    );
    let again = c.watch(&path).await.expect_err("the pool is gone");
    assert!(matches!(again, Error::NotFound { .. }), "{again}");
    no_stream_open(&env).await;
}

#[tokio::test]
async fn deleting_a_parent_closes_its_child_streams_and_the_open_count_follows() {
    let env = start(1, 1).await;
    let c = &env.client;
    let cluster = c
        .create_cluster(&ClusterCreate::new("s1", 10, 4))
        .await
        .expect("cluster")
        .id;
    let pool = c
        .create_pool(cluster, &pool_named("p1"))
        .await
        .expect("pool")
        .id;
    let path = format!("/clusters/{cluster}/storage-pools/{pool}/volumes/");
    let mut s = c.watch(&path).await.expect("stream");
    expect_event(&mut s, "snapshot").await;
    let open = open_streams(&env).await;
    assert_eq!(open["open"][format!("/api/v2{path}")], json!(1), "{open}");
    assert_eq!(env.server.streams.open_total(), 1);
    c.delete_pool(cluster, pool).await.expect("delete");
    assert_eq!(next_event(&mut s).await, None, "the child stream ends");
    no_stream_open(&env).await;
}

#[tokio::test]
async fn a_stream_reports_the_backend_down_then_closes_and_a_connect_meanwhile_gets_503() {
    let env = start(1, 1).await;
    let c = &env.client;
    let mut s = c.watch("/clusters/").await.expect("stream");
    expect_event(&mut s, "snapshot").await;
    let http = reqwest::Client::new();
    let r = http
        .put(format!("{}/_sim/faults", env.server.url))
        .bearer_auth(TOKEN)
        .json(&json!({"spec": "unready:for=60s"}))
        .send()
        .await
        .expect("faults");
    assert!(r.status().is_success());
    assert_eq!(
        expect_event(&mut s, "error").await,
        json!({"detail": "backend unavailable"})
    );
    assert_eq!(
        next_event(&mut s).await,
        None,
        "the stream ends after error"
    );
    let r = http
        .get(format!("{}/api/v2/clusters/", env.server.url))
        .query(&[("watch", "true")])
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status(), 503);
    assert_eq!(
        r.json::<Value>().await.expect("JSON"),
        json!({"detail": "Database unavailable"})
    );
}

async fn advance(env: &Env, seconds: f64) {
    let r = reqwest::Client::new()
        .post(format!("{}/_sim/clock/advance", env.server.url))
        .bearer_auth(TOKEN)
        .json(&json!({ "seconds": seconds }))
        .send()
        .await
        .expect("advance");
    assert!(r.status().is_success());
}

/// On a frozen clock: one ping per 15 sim seconds, with the sim time in it, and the end
/// of the stream when its hour is up.
#[tokio::test]
async fn a_stream_pings_on_the_sim_clock_and_ends_after_its_hour() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = frozen_config(dir.path());
    let env = start_with(dir, cfg).await;
    let mut s = env.client.watch("/clusters/").await.expect("stream");
    expect_event(&mut s, "snapshot").await;
    let opened = env.server.sim.clock.now_ms();
    advance(&env, 16.0).await;
    let frame = tokio::time::timeout(WAIT, s.next())
        .await
        .expect("a frame within the wait")
        .expect("read");
    let at = jiff::Timestamp::from_millisecond(opened + 16_000)
        .expect("time")
        .strftime("%Y-%m-%d %H:%M:%S")
        .to_string();
    match frame {
        Some(Frame::Comment(text)) => {
            assert!(text.starts_with(&format!("ping - {at}")), "{text} at {at}")
        }
        other => panic!("a ping was due: {other:?}"),
    }
    advance(&env, 3600.0).await;
    loop {
        let frame = tokio::time::timeout(WAIT, s.next())
            .await
            .expect("a frame within the wait")
            .expect("read");
        match frame {
            Some(Frame::Comment(_)) => continue,
            Some(other) => panic!("nothing but pings was due: {other:?}"),
            None => break,
        }
    }
    no_stream_open(&env).await;
}

//! Faults scripted from a test through `/_sim/faults`, and the call log that counts calls.

use crate::common::*;
use serde_json::{Value, json};
use simplyblock_controlplane::*;

async fn admin(env: &Env, method: reqwest_like::M, path: &str, body: Option<Value>) -> Value {
    reqwest_like::send(&env.server.url, method, path, body).await
}

/// A tiny admin caller over the client's raw request (admin routes live outside /api/v2).
mod reqwest_like {
    use serde_json::Value;
    use simplyblock_controlplane::{Client, ClientConfig, Method, Url};

    pub type M = Method;

    pub async fn send(base: &str, method: Method, path: &str, body: Option<Value>) -> Value {
        // The client appends /api/v2 to its base; step back out of it.
        let mut cfg = ClientConfig::new(Url::parse(base).expect("url"), super::TOKEN);
        cfg.read_retries = 0;
        let c = Client::new(cfg).expect("client");
        let r = c
            .raw(method, &format!("/../..{path}"), &[], body.as_ref())
            .await
            .expect("admin call");
        assert!(
            r.status < 300,
            "{path}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        r.json().unwrap_or(Value::Null)
    }
}

async fn set_faults(env: &Env, spec: &str) {
    admin(
        env,
        Method::PUT,
        "/_sim/faults",
        Some(json!({ "spec": spec })),
    )
    .await;
}

#[tokio::test]
async fn error_rate_is_deterministic_for_a_seed_and_reads_are_retried() {
    let run = || async {
        let env = start(1, 1).await;
        set_faults(
            &env,
            "error:method=GET,path=/api/v2/clusters/,rate=0.5,status=503",
        )
        .await;
        // No read retries here: each outcome is one call.
        let mut cfg = ClientConfig::new(Url::parse(&env.server.url).expect("url"), TOKEN);
        cfg.read_retries = 0;
        let c = Client::new(cfg).expect("client");
        let mut outcomes = Vec::new();
        for _ in 0..40 {
            outcomes.push(c.list_clusters().await.is_ok());
        }
        outcomes
    };
    let a = run().await;
    let b = run().await;
    assert_eq!(a, b, "same seed, same faults");
    let failed = a.iter().filter(|ok| !**ok).count();
    assert!((8..=32).contains(&failed), "{failed} of 40 failed");

    // With retries, a 503 on a read is retried until it gets through.
    let env = start(1, 1).await;
    set_faults(
        &env,
        "error:method=GET,path=/api/v2/clusters/,count=2,status=503",
    )
    .await;
    env.client
        .list_clusters()
        .await
        .expect("retried past two 503s");
    let calls: Vec<Value> =
        serde_json::from_value(admin(&env, Method::GET, "/_sim/calls", None).await).expect("calls");
    let lists = calls
        .iter()
        .filter(|c| c["path"] == "/api/v2/clusters/" && c["method"] == "GET")
        .count();
    assert_eq!(lists, 3, "two failures and the success");
}

#[tokio::test]
async fn writes_are_not_retried_and_errors_are_classified() {
    let env = start(1, 1).await;
    set_faults(&env, "error:method=POST,path=/api/v2/clusters/,count=1").await;
    let e = env
        .client
        .create_cluster(&ClusterCreate::new("x", 10, 4))
        .await
        .expect_err("injected 500");
    assert!(
        matches!(
            e,
            Error::Refused {
                status: 500,
                opaque: true,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.is_retryable());
    set_faults(&env, "conflict:method=POST,count=1").await;
    let e = env
        .client
        .create_cluster(&ClusterCreate::new("x", 10, 4))
        .await
        .expect_err("409");
    assert!(e.is_conflict(), "{e}");
    env.client
        .create_cluster(&ClusterCreate::new("x", 10, 4))
        .await
        .expect("faults spent");
    let calls: Vec<Value> =
        serde_json::from_value(admin(&env, Method::GET, "/_sim/calls", None).await).expect("calls");
    let posts = calls.iter().filter(|c| c["method"] == "POST").count();
    assert_eq!(posts, 3, "each write sent exactly once");
}

#[tokio::test]
async fn drop_commits_then_loses_the_answer() {
    let env = start(1, 1).await;
    set_faults(&env, "drop:method=POST,path=/api/v2/clusters/,count=1").await;
    let e = env
        .client
        .create_cluster(&ClusterCreate::new("dropped", 10, 4))
        .await
        .expect_err("no answer");
    assert!(matches!(e, Error::Unavailable { .. }), "{e}");
    // The create happened: a caller that retries sees the conflict and adopts by name.
    let again = env
        .client
        .create_cluster(&ClusterCreate::new("dropped", 10, 4))
        .await
        .expect_err("exists");
    assert!(again.is_conflict());
    let list = env.client.list_clusters().await.expect("list");
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].name.as_deref(), Some("dropped"));
    let calls: Vec<Value> =
        serde_json::from_value(admin(&env, Method::GET, "/_sim/calls", None).await).expect("calls");
    let first_post = calls
        .iter()
        .find(|c| c["method"] == "POST" && c["path"] == "/api/v2/clusters/")
        .expect("the dropped create");
    assert_eq!(
        first_post["status"], 0,
        "a dropped answer is logged with status 0"
    );
    assert_eq!(
        first_post["faults"][0],
        "drop:method=POST,path=/api/v2/clusters/,count=1"
    );
}

#[tokio::test]
async fn commiterror_commits_then_answers_500() {
    let env = start(1, 1).await;
    set_faults(
        &env,
        "commiterror:method=POST,path=/api/v2/clusters/,count=1",
    )
    .await;
    let e = env
        .client
        .create_cluster(&ClusterCreate::new("committed", 10, 4))
        .await
        .expect_err("answered 500");
    assert!(e.is_retryable(), "an opaque 500: {e}");
    // The create happened all the same.
    let list = env.client.list_clusters().await.expect("list");
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].name.as_deref(), Some("committed"));
    let calls: Vec<Value> =
        serde_json::from_value(admin(&env, Method::GET, "/_sim/calls", None).await).expect("calls");
    let post = calls
        .iter()
        .find(|c| c["method"] == "POST" && c["path"] == "/api/v2/clusters/")
        .expect("the create");
    assert_eq!(post["status"], 500);
    assert!(
        post["note"]
            .as_str()
            .is_some_and(|n| n.contains("after the request committed")),
        "{post}"
    );
}

#[tokio::test]
async fn latency_and_unready_windows() {
    let env = start(1, 1).await;
    set_faults(&env, "latency:ms=120,path=/api/v2/_meta/health").await;
    env.client.health().await.expect("health");
    // The call log names the fault that delayed the call.
    let calls: Vec<Value> =
        serde_json::from_value(admin(&env, Method::GET, "/_sim/calls", None).await).expect("calls");
    let health = calls
        .iter()
        .rfind(|c| c["path"] == "/api/v2/_meta/health")
        .expect("the health call");
    assert_eq!(
        health["faults"],
        serde_json::json!(["latency:ms=120,path=/api/v2/_meta/health"]),
        "{health}"
    );
    set_faults(&env, "unready:for=400ms").await;
    let e = env.client.ready().await.expect_err("unready");
    assert!(matches!(e, Error::Unavailable { .. }), "{e}");
    assert_eq!(e.message(), "FDB not ready");
    eventually("ready again", || async { env.client.ready().await.ok() }).await;
    // Faults can also come from the command-line spec; a bad one is refused.
    let dir = tempfile::tempdir().expect("dir");
    let mut cfg = config(dir.path(), &fleet_yaml(1, 1));
    cfg.faults = "explode:rate=1".into();
    assert!(simplyblock_simulator::Sim::open(cfg).is_err());
}

#[tokio::test]
async fn node_add_failures_retry_to_max_retry_with_the_real_result() {
    let env = start(2, 2).await;
    let c = &env.client;
    let cluster = c
        .create_cluster(&ClusterCreate::new("retry", 10, 4))
        .await
        .expect("create");
    // Two failed attempts, then success: retry counts 2.
    set_faults(&env, "taskfail:name=node_add,count=2").await;
    let t1 = c
        .add_storage_node(
            cluster.id,
            &StorageNodeAdd::new(snode_address("w1"), "eth0"),
        )
        .await
        .expect("add");
    let task = eventually("done", || async {
        let t = c.get_task(cluster.id, t1).await.ok()?;
        (t.status == TaskStatus::Done).then_some(t)
    })
    .await;
    assert_eq!(task.function_result, "Node add result: Success");
    assert_eq!(task.retry, 2);
    // Every attempt failing: it ends at max_retry with "max retry reached".
    set_faults(&env, "taskfail:name=node_add").await;
    let t2 = c
        .add_storage_node(
            cluster.id,
            &StorageNodeAdd::new(snode_address("w2"), "eth0"),
        )
        .await
        .expect("add");
    let task = eventually("given up", || async {
        let t = c.get_task(cluster.id, t2).await.ok()?;
        (t.status == TaskStatus::Done).then_some(t)
    })
    .await;
    assert_eq!(task.function_result, "max retry reached");
    assert_eq!(task.max_retry, Some(11));
    assert_eq!(task.retry, 11);
    // The call log counts node adds per worker.
    let calls: Vec<Value> =
        serde_json::from_value(admin(&env, Method::GET, "/_sim/calls", None).await).expect("calls");
    let adds_for = |w: &str| {
        calls
            .iter()
            .filter(|c| {
                c["method"] == "POST"
                    && c["route"] == "/api/v2/clusters/{cluster_id}/storage-nodes/"
                    && c["body"]["node_address"]
                        .as_str()
                        .is_some_and(|a| a.starts_with(&format!("{w}.")))
            })
            .count()
    };
    assert_eq!((adds_for("w1"), adds_for("w2")), (1, 1));
    let rules = admin(&env, Method::GET, "/_sim/faults", None).await;
    assert_eq!(rules["rules"][0]["fired"], 11);
}

#[tokio::test]
async fn the_reported_version_is_scripted_and_ready_fails_on_an_error_fault() {
    let env = start(1, 1).await;
    // No version at start: the route answers 404, as a control plane without it does.
    assert_eq!(env.client.version().await.expect("version"), None);
    admin(
        &env,
        Method::PUT,
        "/_sim/version",
        Some(json!({"version": "25.10.1"})),
    )
    .await;
    assert_eq!(
        env.client.version().await.expect("version").as_deref(),
        Some("25.10.1")
    );
    admin(
        &env,
        Method::PUT,
        "/_sim/version",
        Some(json!({"version": null})),
    )
    .await;
    assert_eq!(env.client.version().await.expect("version"), None);

    // `/_meta/ready` passes the fault script like any route.
    set_faults(&env, "error:path=/api/v2/_meta/ready,status=503").await;
    let e = env.client.ready().await.expect_err("refused");
    assert!(matches!(e, Error::Unavailable { .. }), "{e}");
    admin(&env, Method::DELETE, "/_sim/faults", None).await;
    env.client.ready().await.expect("ready again");
}

//! Control-plane requests per minute of a converged cluster, with the controllers woken by
//! the control plane's event streams and with the same controllers polling (no stream
//! opened, every read a GET). Each mode deploys `WORKERS` workers from approval to an
//! Online cluster with every StorageNode Online, on its own real API server and sbsim,
//! with the whole operator in this process; then sbsim's clock is set to real time, the
//! operator is left to settle, and the `/api/v2` requests sbsim logs in a window are
//! counted (stream connects included). Prints figures; asserts nothing about time.
//!
//! `cargo bench -p simplyblock-operator --bench control_plane_rate`
//! (`WORKERS=50`, `SETTLE_SECS=45`, `WINDOW_SECS=330`, `MODES=polling,streaming`). The
//! window is longer than the 5 minutes between two reads of a node's device statistics,
//! so each mode's steady reads are all in it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use simplyblock_api::cluster_deployment_config::ClusterDeploymentConfig;
use simplyblock_api::storage_cluster::ClusterPhase;
use simplyblock_api::storage_node::NodePhase;
use simplyblock_api::{StorageCluster, StorageNode};
use simplyblock_controlplane::{Client, ClientConfig, Method, Url};
use simplyblock_operator::runtime::context::Context;
use simplyblock_operator::runtime::streams::Streams;
use simplyblock_simulator::{Server, Sim, SimConfig, labels};
use simplyblock_testenv::TestEnv;

const NS: &str = "bench";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What one mode measured.
struct Measured {
    mode: String,
    converge: Duration,
    per_minute: f64,
    by_route: Vec<(u64, String)>,
    streams_open: usize,
}

async fn admin(cp: &Client, method: Method, path: &str, body: Option<Value>) -> Value {
    let r = cp
        .raw(method, &format!("/../..{path}"), &[], body.as_ref())
        .await
        .expect("sbsim admin call");
    assert!(r.status < 300, "{path}: {}", r.status);
    r.json().unwrap_or(Value::Null)
}

async fn run_mode(mode: &str, workers: u64, settle: Duration, window: Duration) -> Measured {
    let env = TestEnv::start().await.expect("API server");
    env.install_crds(&simplyblock_api::crds())
        .await
        .expect("CRDs");
    let kube = env.client().await.expect("client");
    simplyblock_testenv::create_namespace(&kube, NS)
        .await
        .expect("namespace");
    let names: Vec<String> = (1..=workers).map(|i| format!("rw{i}")).collect();
    let nodes: Api<Node> = Api::all(kube.clone());
    let mut fleet = String::from("workers:\n");
    for (i, w) in names.iter().enumerate() {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": w}})).expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("node");
        let address = format!("10.70.{}.{}", i / 200, i % 200 + 1);
        let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": address}], "conditions": [{"type": "Ready", "status": "True"}]}});
        nodes
            .patch_status(w, &PatchParams::default(), &Patch::Merge(status))
            .await
            .expect("status");
        fleet.push_str(&format!("  - hostname: {w}\n    addresses: [{address}]\n"));
    }
    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("fleet.yaml"), fleet).expect("fleet");
    let config = SimConfig {
        tokens: vec!["bench".into()],
        // The deployment in sim hours per real second; the measurement at real time.
        time_scale: 10_000.0,
        fleet: Some(dir.path().join("fleet.yaml")),
        ..SimConfig::new(dir.path().join("state"))
    };
    let sim = Server::start(Sim::open(config).expect("sim"), "127.0.0.1:0", None)
        .await
        .expect("sbsim");
    // The storage nodes serve the certificate their pods would mount.
    let mounted_by = sim.named_tls.clone();
    let _mounted = simplyblock_testenv::standin::storage_node_pods(
        kube.clone(),
        NS.into(),
        move |ns, worker, files| {
            let _ = match worker {
                None => mounted_by.serve_storage_nodes(ns, files),
                Some(worker) => mounted_by.serve_storage_node(ns, worker, files),
            };
        },
    );
    tokio::spawn(labels::watch(sim.sim.clone(), kube.clone()));
    let cp = Client::new(ClientConfig::new(
        Url::parse(&sim.url).expect("url"),
        "bench",
    ))
    .expect("client");
    let context = Context::new(kube.clone(), cp.clone(), sim.url.clone(), NS.into())
        .watching(NS)
        .with_snode_proxy(sim.addr);
    let context = Context {
        streams: Arc::new(if mode == "polling" {
            Streams::polling()
        } else {
            Streams::default()
        }),
        ..context
    };
    let shutdown = context.shutdown.clone();
    let operator = tokio::spawn(simplyblock_operator::run(
        simplyblock_operator::Config::local(context),
    ));

    let mut doc: ClusterDeploymentConfig = serde_saphyr::from_str(include_str!(
        "../../../deploy/samples/clusterdeploymentconfig.yaml"
    ))
    .expect("sample");
    doc.spec.approved = true;
    doc.spec.node_sets[0].groups[0].workers = names.clone();
    let started = Instant::now();
    Api::<ClusterDeploymentConfig>::namespaced(kube.clone(), NS)
        .create(&PostParams::default(), &doc)
        .await
        .expect("document");
    let clusters: Api<StorageCluster> = Api::namespaced(kube.clone(), NS);
    let storage_nodes: Api<StorageNode> = Api::namespaced(kube.clone(), NS);
    loop {
        let online = clusters
            .get_opt("simplyblock")
            .await
            .ok()
            .flatten()
            .and_then(|c| c.status)
            .map(|s| s.phase)
            == Some(ClusterPhase::Online);
        let nodes_online = storage_nodes
            .list(&Default::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|n| {
                        n.status
                            .as_ref()
                            .is_some_and(|s| s.phase == NodePhase::Online)
                    })
                    .count() as u64
            })
            .unwrap_or(0);
        if online && nodes_online == workers {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "{mode}: not converged after 30 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let converge = started.elapsed();

    // Real time from here: streams opened on the fast clock run out of their hour and
    // reconnect once during the settling, and the resyncs re-enter on the new clock.
    admin(&cp, Method::PUT, "/_sim/clock", Some(json!({"scale": 1.0}))).await;
    tokio::time::sleep(settle).await;
    admin(&cp, Method::DELETE, "/_sim/calls", None).await;
    let began = Instant::now();
    tokio::time::sleep(window).await;
    let calls = admin(&cp, Method::GET, "/_sim/calls", None).await;
    let elapsed = began.elapsed();
    let calls: Vec<Value> = serde_json::from_value(calls).expect("calls");
    let mut routes: BTreeMap<String, u64> = BTreeMap::new();
    let mut total = 0u64;
    for call in &calls {
        let path = call["path"].as_str().unwrap_or("");
        if !path.starts_with("/api/v2/") {
            continue;
        }
        total += 1;
        let watch = call["query"]
            .as_str()
            .is_some_and(|q| q.contains("watch=true"));
        let route = format!(
            "{} {}{}",
            call["method"].as_str().unwrap_or("?"),
            call["route"].as_str().unwrap_or(path),
            if watch { "?watch=true" } else { "" }
        );
        *routes.entry(route).or_default() += 1;
    }
    let mut by_route: Vec<(u64, String)> = routes.into_iter().map(|(k, v)| (v, k)).collect();
    by_route.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let streams_open = sim.streams.open_total();

    shutdown.fire();
    match operator.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("the operator stopped with an error: {e}"),
        Err(e) => panic!("the operator task failed: {e}"),
    }
    sim.shutdown().await;
    drop(env);
    Measured {
        mode: mode.to_string(),
        converge,
        per_minute: total as f64 * 60.0 / elapsed.as_secs_f64(),
        by_route,
        streams_open,
    }
}

#[tokio::main]
async fn main() {
    let workers = env_u64("WORKERS", 50);
    let settle = Duration::from_secs(env_u64("SETTLE_SECS", 45));
    let window = Duration::from_secs(env_u64("WINDOW_SECS", 330));
    let modes = std::env::var("MODES").unwrap_or_else(|_| "polling,streaming".into());
    let mut results = Vec::new();
    for mode in modes.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        let m = run_mode(mode, workers, settle, window).await;
        println!(
            "{}: converged in {:.1} s; {:.1} control-plane requests per minute over {} s ({} streams open at the end)",
            m.mode,
            m.converge.as_secs_f64(),
            m.per_minute,
            window.as_secs(),
            m.streams_open
        );
        for (n, route) in &m.by_route {
            println!("  {route}: {n}");
        }
        results.push(m);
    }
    println!("workers: {workers}");
    if let (Some(p), Some(s)) = (
        results.iter().find(|m| m.mode == "polling"),
        results.iter().find(|m| m.mode == "streaming"),
    ) {
        println!(
            "streaming / polling: {:.1} / {:.1} requests per minute = {:.3}",
            s.per_minute,
            p.per_minute,
            s.per_minute / p.per_minute.max(f64::MIN_POSITIVE)
        );
    }
}

//! A deployment of many workers from approval to Online, against a zero-latency sbsim
//! and a real API server, with the controllers in this process. Prints figures; asserts
//! nothing about time.
//!
//! `cargo bench -p simplyblock-operator --bench deployment` (`WORKERS=N`, `BUDGET=N`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use simplyblock_api::StorageCluster;
use simplyblock_api::cluster_deployment_config::ClusterDeploymentConfig;
use simplyblock_api::storage_cluster::ClusterPhase;
use simplyblock_controlplane::{Client, ClientConfig, Method, Url};
use simplyblock_operator::runtime::context::Context;
use simplyblock_simulator::{Server, Sim, SimConfig, labels};
use simplyblock_testenv::TestEnv;

const NS: &str = "bench";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Peak resident set of this process (the controllers run in it), from /proc.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The API server's count of mutating requests so far by `verb resource`, less Leases: the
/// API server renews its own identity Lease every few seconds, and this operator holds none
/// yet.
async fn apiserver_writes_by_resource(kube: &kube::Client) -> BTreeMap<String, u64> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = kube.request_text(req).await.unwrap_or_default();
    let label = |line: &str, name: &str| -> Option<String> {
        let start = line.find(&format!("{name}=\""))? + name.len() + 2;
        let len = line[start..].find('"')?;
        Some(line[start..start + len].to_string())
    };
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if !line.starts_with("apiserver_request_total{") {
            continue;
        }
        let (Some(verb), Some(mut resource)) = (label(line, "verb"), label(line, "resource"))
        else {
            continue;
        };
        if resource == "leases"
            || !["POST", "PUT", "PATCH", "APPLY", "DELETE"].contains(&verb.as_str())
        {
            continue;
        }
        let Some(count) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        if let Some(sub) = label(line, "subresource").filter(|s| !s.is_empty()) {
            resource = format!("{resource}/{sub}");
        }
        *out.entry(format!("{verb} {resource}")).or_default() += count as u64;
    }
    out
}

/// `after - before`, largest first, as `key: n` items.
fn largest_differences(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> Vec<String> {
    let mut by: Vec<(u64, &String)> = after
        .iter()
        .map(|(k, v)| (v - before.get(k).copied().unwrap_or(0), k))
        .filter(|(d, _)| *d > 0)
        .collect();
    by.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    by.iter().map(|(d, k)| format!("{k}: {d}")).collect()
}

/// A recorded control-plane call as `METHOD route`, the route as sbsim matched it (ids
/// as placeholders), so calls group by what they do rather than to which object.
fn call_route(call: &Value) -> String {
    let method = call["method"].as_str().unwrap_or("?");
    let route = call["route"].as_str().unwrap_or("?");
    format!("{method} {route}")
}

#[tokio::main]
async fn main() {
    let workers = env_usize("WORKERS", 50);
    let budget = env_usize("BUDGET", 1);
    let env = TestEnv::start().await.expect("API server");
    env.install_crds(&simplyblock_api::crds())
        .await
        .expect("CRDs");
    let kube = env.client().await.expect("client");
    simplyblock_testenv::create_namespace(&kube, NS)
        .await
        .expect("namespace");
    let names: Vec<String> = (1..=workers).map(|i| format!("bw{i}")).collect();
    let nodes: Api<Node> = Api::all(kube.clone());
    let mut fleet = String::from("workers:\n");
    for (i, w) in names.iter().enumerate() {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": w}})).expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("node");
        let address = format!("10.60.{}.{}", i / 200, i % 200 + 1);
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
        // Zero latency in practice: a node add's reboot and creation take milliseconds.
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
    if let Some(t) = doc.spec.cluster.as_mut() {
        t.node_provisioning_budget = Some(budget as i32);
    }
    let writes_before = apiserver_writes_by_resource(&kube).await;
    let started = Instant::now();
    Api::<ClusterDeploymentConfig>::namespaced(kube.clone(), NS)
        .create(&PostParams::default(), &doc)
        .await
        .expect("document");
    let clusters: Api<StorageCluster> = Api::namespaced(kube.clone(), NS);
    loop {
        let online = clusters
            .get_opt("simplyblock")
            .await
            .ok()
            .flatten()
            .and_then(|c| c.status)
            .map(|s| s.phase)
            == Some(ClusterPhase::Online);
        if online {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "no Online cluster after 30 minutes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let wall = started.elapsed();
    let writes_after = apiserver_writes_by_resource(&kube).await;
    let writes = writes_after.values().sum::<u64>() - writes_before.values().sum::<u64>();
    let writes_by = largest_differences(&writes_before, &writes_after);
    let r = cp
        .raw(Method::GET, "/../../_sim/calls", &[], None)
        .await
        .expect("calls");
    let calls: Vec<Value> = serde_json::from_value(r.json().unwrap_or(Value::Null)).expect("calls");

    // Converged: what the operator still writes in a minute with nothing to do, for two
    // minutes, so a write that trails the phase change shows apart from a steady one.
    let mut idle_minutes = Vec::new();
    for _ in 0..2 {
        let before = apiserver_writes_by_resource(&kube).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        let after = apiserver_writes_by_resource(&kube).await;
        let by = largest_differences(&before, &after);
        let total: u64 = after.values().sum::<u64>() - before.values().sum::<u64>();
        idle_minutes.push(format!(
            "{total} ({})",
            if by.is_empty() {
                "none".to_string()
            } else {
                by.join(", ")
            }
        ));
    }

    println!("workers: {workers}, node-add budget: {budget}");
    println!("approval to Online: {:.1} s", wall.as_secs_f64());
    println!(
        "API-server writes during the deployment: {writes} ({:.1} per node)",
        writes as f64 / workers as f64
    );
    for line in &writes_by {
        println!("  {line}");
    }
    println!(
        "control-plane calls: {} ({:.1} per node)",
        calls.len(),
        calls.len() as f64 / workers as f64
    );
    let mut routes: BTreeMap<String, u64> = BTreeMap::new();
    for call in &calls {
        *routes.entry(call_route(call)).or_default() += 1;
    }
    for line in largest_differences(&BTreeMap::new(), &routes) {
        println!("  {line}");
    }
    println!(
        "API-server writes once Online, first minute: {}; second minute: {}",
        idle_minutes[0], idle_minutes[1]
    );
    println!(
        "peak RSS of the process (controllers, sbsim, clients): {:.1} MiB",
        peak_rss_kib() as f64 / 1024.0
    );
    shutdown.fire();
    match operator.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("the operator stopped with an error: {e}"),
        Err(e) => panic!("the operator task failed: {e}"),
    }
}

//! RollingRestart with `refreshSNodeAPI` against a real API server and sbsim: each node's
//! storage-node pod is replaced between its shutdown and its restart, exactly once, also
//! when the controller is replaced in the middle of the pod steps.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use simplyblock_api::common::OpsPhase;
use simplyblock_api::{StorageCluster, StorageClusterOps};
use simplyblock_controlplane::{
    Client, ClientConfig, ClusterCreate, Method, NodeStatus, StorageNodeAdd, Url, Uuid,
};
use simplyblock_operator::cluster::ops::POD_CLUSTER_LABEL;
use simplyblock_operator::context::Context;
use simplyblock_operator::webhooks::{
    self, Endpoint, WebhookContext, WebhookServer, tls::ServingCertificates,
};
use simplyblock_simulator::{Server, Sim, SimConfig};
use simplyblock_testenv::TestEnv;
use tokio::sync::OnceCell;

const TOKEN: &str = "operator-test-token";
const LABEL: &str = "io.simplyblock.storagenodeset";

struct Harness {
    kube: kube::Client,
    ns: String,
    _sim: Server,
    cp: Client,
    uuid: Uuid,
    ctx: Arc<Context>,
    _dir: tempfile::TempDir,
}

/// The webhooks, served from a thread of their own and registered once per binary.
async fn webhooks_registered() {
    static SERVED: OnceCell<()> = OnceCell::const_new();
    SERVED
        .get_or_init(|| async {
            let env = TestEnv::shared().expect("API server");
            let authority = simplyblock_certs::Authority::new("ops-webhook-ca").expect("ca");
            let certs = ServingCertificates::new(
                authority,
                vec!["localhost".into()],
                vec![Ipv4Addr::LOCALHOST.into()],
                Duration::from_secs(3600),
            )
            .expect("certificates");
            let (tx, rx) = tokio::sync::oneshot::channel();
            let served = certs.clone();
            let config = env.config().clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Runtime::new().expect("runtime");
                rt.block_on(async move {
                    let ctx = WebhookContext {
                        client: kube::Client::try_from(config).expect("client"),
                        operator_namespace: "simplyblock-system".into(),
                    };
                    let server = WebhookServer::bind(
                        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
                        served,
                        webhooks::router(ctx),
                    )
                    .await
                    .expect("bind");
                    let _ = tx.send(server.local_addr().expect("addr"));
                    server.run().await;
                });
            });
            let addr = rx.await.expect("webhook server");
            let client = env.client().await.expect("client");
            webhooks::register(
                &client,
                &Endpoint::Url(format!("https://{addr}")),
                &certs.ca_bundle(),
            )
            .await
            .expect("webhook configuration");
        })
        .await;
}

fn fleet(n: usize) -> String {
    let mut s = String::from("workers:\n");
    for i in 1..=n {
        s.push_str(&format!(
            "  - hostname: w{i}\n    addresses: [10.10.0.{i}]\n    devices: {{count: 2, size: 2T}}\n    labels: {{{LABEL}: c1}}\n"
        ));
    }
    s
}

fn cp_client(url: &str) -> Client {
    let mut cfg = ClientConfig::new(Url::parse(url).expect("url"), TOKEN);
    cfg.timeout = Duration::from_secs(5);
    cfg.retry_backoff = Duration::from_millis(20);
    Client::new(cfg).expect("client")
}

async fn until<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A namespace, an sbsim with three online storage nodes in an unready 1+1 cluster, and a
/// StorageCluster `sb` (stripe `stripe`) carrying its control-plane id. The controller is
/// not started: [`Harness::start`].
async fn harness(ns: &str, faults: &str, stripe: (i32, i32)) -> Harness {
    let env = TestEnv::shared().expect("API server");
    env.install_crds(&simplyblock_api::crds())
        .await
        .expect("CRDs");
    webhooks_registered().await;
    let kube = env.client().await.expect("client");
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns");
    Api::<Namespace>::all(kube.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace");

    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    let fleet_path = dir.path().join("fleet.yaml");
    std::fs::write(&fleet_path, fleet(3)).expect("fleet");
    let config = SimConfig {
        tokens: vec![TOKEN.into()],
        time_scale: 1000.0,
        faults: faults.into(),
        fleet: Some(fleet_path),
        ..SimConfig::new(dir.path().join("state"))
    };
    let sim = Server::start(Sim::open(config).expect("sim"), "127.0.0.1:0", None)
        .await
        .expect("sbsim");
    let cp = cp_client(&sim.url);
    let cluster = cp
        .create_cluster(&ClusterCreate::new("sb", 10, 4))
        .await
        .expect("cluster");
    for i in 1..=3 {
        cp.add_storage_node(
            cluster.id,
            &StorageNodeAdd::new(
                format!("w{i}.simplyblock-storage-node-api.simplyblock.svc.cluster.local:5000"),
                "eth0",
            ),
        )
        .await
        .expect("node add");
    }
    until("three online nodes", async || {
        let nodes = cp.list_storage_nodes(cluster.id).await.ok()?;
        (nodes.len() == 3 && nodes.iter().all(|n| n.status == NodeStatus::Online)).then_some(())
    })
    .await;

    let sc: StorageCluster = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
        "metadata": {"name": "sb"},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 4,
                 "stripe": {"dataChunks": stripe.0, "parityChunks": stripe.1}}
    }))
    .expect("cluster");
    let clusters: Api<StorageCluster> = Api::namespaced(kube.clone(), ns);
    clusters
        .create(&PostParams::default(), &sc)
        .await
        .expect("StorageCluster");
    clusters
        .patch_status(
            "sb",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"uuid": cluster.id.to_string()}})),
        )
        .await
        .expect("uuid");
    let ctx = Arc::new(Context::new(
        kube.clone(),
        cp.clone(),
        sim.url.clone(),
        ns.to_string(),
    ));
    Harness {
        kube,
        ns: ns.into(),
        _sim: sim,
        cp,
        uuid: cluster.id,
        ctx,
        _dir: dir,
    }
}

impl Harness {
    fn start(&self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(simplyblock_operator::cluster::ops::run(
            self.ctx.clone(),
            Some(self.ns.clone()),
        ))
    }

    fn ops(&self) -> Api<StorageClusterOps> {
        Api::namespaced(self.kube.clone(), &self.ns)
    }

    async fn create_refresh(&self, name: &str) {
        let op: StorageClusterOps = serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageClusterOps",
            "metadata": {"name": name},
            "spec": {"clusterRef": "sb", "action": "RollingRestart",
                     "rollingRestart": {"refreshSNodeAPI": true}}
        }))
        .expect("op");
        self.ops()
            .create(&PostParams::default(), &op)
            .await
            .expect("created");
    }

    async fn phase_is(&self, name: &str, phase: OpsPhase) -> StorageClusterOps {
        until(&format!("{name} {phase:?}"), async || {
            let op = self.ops().get(name).await.ok()?;
            (op.status.as_ref()?.phase == phase).then_some(op)
        })
        .await
    }

    async fn calls(&self, method: &str, path: &str) -> usize {
        let r = self
            .cp
            .raw(Method::GET, "/../../_sim/calls", &[], None)
            .await
            .expect("call log");
        let calls: Vec<Value> =
            serde_json::from_value(r.json().unwrap_or(Value::Null)).expect("calls");
        calls
            .iter()
            .filter(|c| c["method"] == method && c["path"] == path)
            .count()
    }
}

/// Brings the harness's cluster to active through the control plane itself.
async fn activated(h: &Harness) {
    h.cp.activate_cluster(h.uuid).await.expect("activate");
    until("the cluster active", async || {
        (h.cp.get_cluster(h.uuid).await.ok()?.status
            == simplyblock_controlplane::ClusterStatus::Active)
            .then_some(())
    })
    .await;
}

/// Stands in for the storage-node DaemonSet and the kubelet: one Ready pod of cluster `sb`
/// per worker, and a replacement on the same worker for every pod deleted, Ready shortly
/// after. Records which pods were deleted and which were created as replacements.
#[derive(Clone, Default)]
struct Workload {
    deleted: Arc<Mutex<BTreeSet<String>>>,
    replacements: Arc<Mutex<BTreeSet<String>>>,
}

fn storage_node_pod(name: &str, worker: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {POD_CLUSTER_LABEL: "sb"}},
        "spec": {"nodeName": worker,
                 "containers": [{"name": "storage-node-api", "image": "simplyblock/snode:test"}]}
    }))
    .expect("pod")
}

async fn mark_ready(pods: &Api<Pod>, name: &str) {
    let status = json!({"status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}]}});
    // A pod deleted before it got Ready is gone: nothing to mark.
    match pods
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("marking {name} Ready: {e}"),
    }
}

impl Workload {
    /// Creates the original pods, Ready, and starts replacing deleted ones.
    async fn start(h: &Harness, workers: &[String]) -> (Self, Vec<String>) {
        let pods: Api<Pod> = Api::namespaced(h.kube.clone(), &h.ns);
        let mut originals = Vec::new();
        for worker in workers {
            let name = format!("snode-{worker}");
            pods.create(&PostParams::default(), &storage_node_pod(&name, worker))
                .await
                .expect("pod");
            mark_ready(&pods, &name).await;
            originals.push(name);
        }
        let w = Workload::default();
        let me = w.clone();
        tokio::spawn(async move {
            let force = DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            };
            let mut generation = 0;
            loop {
                let listed = pods
                    .list(&ListParams::default().labels(&format!("{POD_CLUSTER_LABEL}=sb")))
                    .await;
                for pod in listed.map(|l| l.items).unwrap_or_default() {
                    if pod.metadata.deletion_timestamp.is_none() {
                        continue;
                    }
                    let name = pod.name_any();
                    let worker = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.node_name.clone())
                        .unwrap_or_default();
                    if !me.deleted.lock().expect("lock").insert(name.clone()) {
                        continue;
                    }
                    let _ = pods.delete(&name, &force).await;
                    generation += 1;
                    let next = format!("snode-{worker}-{generation}");
                    pods.create(&PostParams::default(), &storage_node_pod(&next, &worker))
                        .await
                        .expect("replacement");
                    me.replacements.lock().expect("lock").insert(next.clone());
                    let ready = pods.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(700)).await;
                        mark_ready(&ready, &next).await;
                    });
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        (w, originals)
    }
}

/// Every distinct (step, message) the operation showed, in order, until it left Running.
fn record_steps(h: &Harness, name: &str) -> Arc<Mutex<Vec<(String, String)>>> {
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let out = seen.clone();
    let ops = h.ops();
    let name = name.to_string();
    tokio::spawn(async move {
        loop {
            if let Ok(op) = ops.get(&name).await
                && let Some(s) = op.status
            {
                let entry = (
                    s.step.state.clone().unwrap_or_default(),
                    s.message.clone().unwrap_or_default(),
                );
                let mut seen = seen.lock().expect("lock");
                if seen.last() != Some(&entry) {
                    seen.push(entry);
                }
                if s.phase.is_terminal() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    out
}

/// The harness with an active cluster and the stand-in workload on every node's worker.
async fn refresh_harness(ns: &str) -> (Harness, Workload, Vec<String>) {
    let h = harness(ns, "", (1, 1)).await;
    activated(&h).await;
    let workers: Vec<String> =
        h.cp.list_storage_nodes(h.uuid)
            .await
            .expect("nodes")
            .into_iter()
            .map(|n| n.hostname)
            .collect();
    assert_eq!(workers.len(), 3, "{workers:?}");
    let (w, originals) = Workload::start(&h, &workers).await;
    (h, w, originals)
}

/// The end state both tests expect: succeeded, every node through both pod steps and in
/// order, each original pod deleted once and no replacement deleted, one shutdown and one
/// restart per node.
async fn assert_refreshed(
    h: &Harness,
    name: &str,
    w: &Workload,
    originals: &[String],
    seen: &Mutex<Vec<(String, String)>>,
) {
    let op = h.phase_is(name, OpsPhase::Succeeded).await;
    let rr = op
        .status
        .and_then(|s| s.rolling_restart)
        .expect("rollingRestart");
    assert_eq!(rr.node_index, 3);
    let listed: Vec<String> =
        h.cp.list_storage_nodes(h.uuid)
            .await
            .expect("nodes")
            .iter()
            .map(|n| n.id.to_string())
            .collect();
    assert_eq!(rr.nodes, listed);

    // The recorder stops at the terminal phase; give it a moment to see it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = seen.lock().expect("lock").clone();
    let mut order: Vec<String> = Vec::new();
    let mut steps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (step, message) in &seen {
        let Some(rest) = message.strip_prefix("Node ") else {
            continue;
        };
        let Some((_, rest)) = rest.split_once(" (") else {
            continue;
        };
        let Some((node, _)) = rest.split_once("): ") else {
            continue;
        };
        if order.last().map(String::as_str) != Some(node) {
            order.push(node.to_string());
        }
        steps
            .entry(node.to_string())
            .or_default()
            .insert(step.clone());
    }
    assert_eq!(order, rr.nodes, "nodes in status order: {seen:#?}");
    for node in &rr.nodes {
        let node_steps = &steps[node];
        for step in ["RefreshingPod", "AwaitingPod", "RestartingNode"] {
            assert!(
                node_steps.contains(step),
                "{node} skipped {step}: {seen:#?}"
            );
        }
        let base = format!("/api/v2/clusters/{}/storage-nodes/{node}", h.uuid);
        assert_eq!(
            h.calls("POST", &format!("{base}/shutdown")).await,
            1,
            "{node}"
        );
        assert_eq!(
            h.calls("POST", &format!("{base}/restart")).await,
            1,
            "{node}"
        );
    }

    let deleted = w.deleted.lock().expect("lock").clone();
    let replacements = w.replacements.lock().expect("lock").clone();
    let expected: BTreeSet<String> = originals.iter().cloned().collect();
    assert_eq!(
        deleted, expected,
        "each original pod deleted, no replacement deleted (replacements {replacements:?})"
    );
    assert_eq!(replacements.len(), 3, "{replacements:?}");
}

#[tokio::test]
async fn rolling_refresh_replaces_each_pod_once_between_shutdown_and_restart() {
    let (h, w, originals) = refresh_harness("scops-refresh").await;
    let _c = h.start();
    h.create_refresh("sb-refresh").await;
    let seen = record_steps(&h, "sb-refresh");
    assert_refreshed(&h, "sb-refresh", &w, &originals, &seen).await;
}

#[tokio::test]
async fn a_controller_replaced_during_the_pod_steps_deletes_and_calls_once() {
    let (h, w, originals) = refresh_harness("scops-refresh-restart").await;
    let mut controller = h.start();
    h.create_refresh("sb-refresh").await;
    let seen = record_steps(&h, "sb-refresh");
    // Replace the controller every time the operation reaches a pod step, so each node
    // has its pod steps resumed by a fresh controller.
    let mut replaced = 0;
    let start = Instant::now();
    let mut last = String::new();
    loop {
        let op = h.ops().get("sb-refresh").await.expect("op");
        let status = op.status.unwrap_or_default();
        if status.phase.is_terminal() {
            break;
        }
        let at = format!(
            "{}|{}",
            status.step.state.clone().unwrap_or_default(),
            status.message.clone().unwrap_or_default()
        );
        let pod_step = matches!(
            status.step.state.as_deref(),
            Some("RefreshingPod" | "AwaitingPod")
        );
        if pod_step && at != last {
            controller.abort();
            let _ = controller.await;
            replaced += 1;
            controller = h.start();
            last = at;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "timed out: {:#?}",
            seen.lock().expect("lock")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        replaced >= 3,
        "the controller was replaced {replaced} times"
    );
    assert_refreshed(&h, "sb-refresh", &w, &originals, &seen).await;
}

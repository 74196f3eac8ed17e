//! The operator process killed in the middle of its work, restarted each time.
//!
//! - At every kill point ([`simplyblock_operator::runtime::crash`]): the process aborts right after
//!   each non-idempotent side effect of a deployment (the cluster create, each node add,
//!   the activation, the default pool's create) and of each StorageClusterOps action
//!   (Shutdown, Start, Restart, Expand, RollingRestart, CancelTask), of the single-call
//!   StorageNodeOps actions and of each calling step of StorageDeviceOps (Restart, Fail's
//!   remove and fail), before its record is written. Restarted, it finds the effect and does not repeat it.
//! - `kill -9` at 20 random moments of a deployment (each timed from the restarted
//!   process's first control-plane call), also with faults scripted in the
//!   control plane (409s, 5xx answers, creates, adds and activations whose answers are lost,
//!   latency); where the kills landed is asserted too.
//!
//! Each ends the same way: every node Online, the cluster Online with its default pool and
//! class, nothing orphaned, and every control-plane call counted, refused ones included:
//! each route saw exactly the calls that take effect once, plus one for each refusal the
//! script made.

use std::collections::BTreeMap;
use std::process::Child;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use simplyblock_api::cluster_deployment_config::{ClusterDeploymentConfig, DeploymentPhase};
use simplyblock_api::common::OpsPhase;
use simplyblock_api::storage_cluster::ClusterPhase;
use simplyblock_api::storage_node::NodePhase;
use simplyblock_api::storage_pool::PoolPhase;
use simplyblock_api::{OperatorOps, StorageCluster, StorageClusterOps, StorageNode, StoragePool};
use simplyblock_controlplane::{Client, Method};
use simplyblock_operator::runtime::crash;
use simplyblock_simulator::{Server, Sim, SimConfig, labels};
use simplyblock_testenv::TestEnv;

const TOKEN: &str = "crash-test-token";
pub(crate) const WORKERS: [&str; 3] = ["cw1", "cw2", "cw3"];
const KILLS: usize = 20;
/// The Secrets a deployment of the sample document leaves in its namespace.
const EXPECTED_SECRETS: [&str; 6] = [
    // The test's own: the CA its ControlPlane verifies the control plane against.
    "cp-ca",
    "simplyblock-cluster-simplyblock",
    "simplyblock-csi-secret-v2",
    "simplyblock-operator-webhook-ca",
    "simplyblock-storage-node-ca-simplyblock",
    "simplyblock-storage-node-tls-simplyblock",
];

/// A small deterministic generator: the kill moments are the same on every run.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn operator(
    env: &TestEnv,
    sim: &Server,
    token_file: &std::path::Path,
    ns: &str,
    crash_after: Option<&str>,
) -> Child {
    crate::support::operator_command(env, sim.addr, token_file, ns)
        // Two runs share the machine: the metrics port is whatever is free.
        .arg("--metrics-addr=127.0.0.1:0")
        .arg(format!("--storage-node-proxy={}", sim.addr))
        .env(crash::ENV, crash_after.unwrap_or_default())
        .spawn()
        .expect("the operator starts")
}

pub(crate) async fn calls(cp: &Client) -> Vec<Value> {
    let r = cp
        .raw(Method::GET, "/../../_sim/calls", &[], None)
        .await
        .expect("call log");
    serde_json::from_value(r.json().unwrap_or(Value::Null)).unwrap_or_else(|e| {
        panic!(
            "calls: {e}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        )
    })
}

/// `METHOD route`, the route as sbsim matched it (ids as placeholders).
pub(crate) fn route(call: &Value) -> String {
    format!(
        "{} {}",
        call["method"].as_str().unwrap_or_default(),
        call["route"].as_str().unwrap_or_default()
    )
}

/// A scripted refusal that answered before the request touched any state.
fn refused_by_script(call: &Value) -> bool {
    call["faults"].as_array().is_some_and(|f| {
        f.iter()
            .filter_map(Value::as_str)
            .any(|rule| rule.starts_with("error") || rule.starts_with("conflict"))
    })
}

/// The request took effect (a dropped answer is status 0 after the commit; a
/// `commiterror` answers 5xx after the commit).
fn committed(call: &Value) -> bool {
    !refused_by_script(call)
        && call["status"]
            .as_u64()
            .is_some_and(|s| s < 300 || call["faults"].as_array().is_some_and(|f| !f.is_empty()))
}

/// Every call on `route` is counted, refused ones included: exactly `effective` took
/// effect, and each other one was refused by a fault the script made.
pub(crate) fn exactly(log: &[Value], on: &str, effective: usize) {
    let all: Vec<&Value> = log.iter().filter(|c| route(c) == on).collect();
    let refused = all.iter().filter(|c| refused_by_script(c)).count();
    let statuses: Vec<String> = all
        .iter()
        .map(|c| format!("{} {}", c["status"], c["faults"]))
        .collect();
    assert_eq!(
        all.len(),
        effective + refused,
        "{on}: {effective} call(s) taking effect and {refused} scripted refusal(s) expected; answers {statuses:?}"
    );
}

/// An approved deployment document, its workers, an sbsim, on an API server of its own.
pub(crate) struct Deployment {
    env: TestEnv,
    pub(crate) kube: kube::Client,
    pub(crate) ns: String,
    sim: Server,
    pub(crate) cp: Client,
    token_file: std::path::PathBuf,
    name: String,
    /// The control plane's CA (PEM).
    ca_pem: String,
    _mounted: simplyblock_testenv::standin::StandIn,
    _dir: tempfile::TempDir,
}

impl Deployment {
    fn docs(&self) -> Api<ClusterDeploymentConfig> {
        Api::namespaced(self.kube.clone(), &self.ns)
    }

    pub(crate) fn storage_nodes(&self) -> Api<StorageNode> {
        Api::namespaced(self.kube.clone(), &self.ns)
    }

    /// The operator's command as [`Deployment::operator`] runs it, without a metrics
    /// address: for a test that adds its own flags.
    pub(crate) fn operator_command(&self) -> std::process::Command {
        let mut command =
            crate::support::operator_command(&self.env, self.sim.addr, &self.token_file, &self.ns);
        command.arg(format!("--storage-node-proxy={}", self.sim.addr));
        command
    }

    pub(crate) fn env(&self) -> &TestEnv {
        &self.env
    }

    pub(crate) fn operator(&self, crash_after: Option<&str>) -> Child {
        operator(
            &self.env,
            &self.sim,
            &self.token_file,
            &self.ns,
            crash_after,
        )
    }
}

async fn deployment(ns: &str, faults: &str, seed: u64) -> Deployment {
    deployment_with_spares(ns, faults, seed, &[]).await
}

/// [`deployment`] with `spares`: workers beside [`WORKERS`], Nodes and simulated hosts
/// alike, that the document does not name.
pub(crate) async fn deployment_with_spares(
    ns: &str,
    faults: &str,
    seed: u64,
    spares: &[&str],
) -> Deployment {
    deployment_of(ns, faults, seed, spares, |_| {}).await
}

/// [`deployment_with_spares`] of the sample document as `edit` leaves it.
pub(crate) async fn deployment_of(
    ns: &str,
    faults: &str,
    seed: u64,
    spares: &[&str],
    edit: impl FnOnce(&mut ClusterDeploymentConfig),
) -> Deployment {
    let (env, kube) = crate::support::own_api_server(ns).await;
    let nodes: Api<Node> = Api::all(kube.clone());
    let mut fleet = String::from("workers:\n");
    for (i, w) in WORKERS.iter().chain(spares).enumerate() {
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": w, "labels": {"kubernetes.io/hostname": w}}}),
        )
        .expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("node");
        let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": format!("10.50.0.{}", i + 1)}],
                                       "conditions": [{"type": "Ready", "status": "True"}]}});
        nodes
            .patch_status(w, &PatchParams::default(), &Patch::Merge(status))
            .await
            .expect("status");
        fleet.push_str(&format!(
            "  - hostname: {w}\n    addresses: [10.50.0.{}]\n",
            i + 1
        ));
    }

    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("fleet.yaml"), fleet).expect("fleet");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).expect("token");
    let config = SimConfig {
        tokens: vec![TOKEN.into()],
        time_scale: 4.0,
        fleet: Some(dir.path().join("fleet.yaml")),
        faults: faults.into(),
        seed,
        ..SimConfig::new(dir.path().join("state"))
    };
    let (tls, ca_pem) = crate::support::sbsim_tls_material();
    let sim = Server::start(Sim::open(config).expect("sim"), "127.0.0.1:0", Some(tls))
        .await
        .expect("sbsim");
    let mounted = crate::support::storage_nodes_mount(&kube, ns, &sim);
    tokio::spawn(labels::watch(sim.sim.clone(), kube.clone()));
    let cp = crate::support::tls_cp_client(sim.addr, &ca_pem, TOKEN);

    let mut doc: ClusterDeploymentConfig = serde_saphyr::from_str(include_str!(
        "../../../../deploy/samples/clusterdeploymentconfig.yaml"
    ))
    .expect("sample");
    crate::support::managed_control_plane(&kube, ns, &ca_pem).await;
    doc.spec.approved = true;
    doc.spec.node_sets[0].groups[0].workers = WORKERS.iter().map(|w| w.to_string()).collect();
    edit(&mut doc);
    let docs: Api<ClusterDeploymentConfig> = Api::namespaced(kube.clone(), ns);
    docs.create(&PostParams::default(), &doc)
        .await
        .expect("document");
    let name = doc.metadata.name.clone().expect("name");
    Deployment {
        env,
        kube,
        ns: ns.into(),
        sim,
        cp,
        token_file,
        name,
        ca_pem,
        _mounted: mounted,
        _dir: dir,
    }
}

/// Waits until the document is Expanded, every node Online, the default pool Ready, and the
/// cluster's lock and node-add slots given back: the runtime releases a lock after the
/// terminal write of the operation that held it, so Online alone does not say it is free.
pub(crate) async fn until_deployed(d: &Deployment) {
    let start = Instant::now();
    loop {
        let doc = d
            .docs()
            .get(&d.name)
            .await
            .expect("document")
            .status
            .unwrap_or_default();
        let items = d
            .storage_nodes()
            .list(&Default::default())
            .await
            .expect("nodes")
            .items;
        let online = items
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .is_some_and(|s| s.phase == NodePhase::Online)
            })
            .count();
        // The last step of the path: the Online cluster's default pool with its class.
        let pool_ready = Api::<StoragePool>::namespaced(d.kube.clone(), &d.ns)
            .list(&Default::default())
            .await
            .expect("pools")
            .items
            .iter()
            .any(|p| {
                p.status.as_ref().is_some_and(|s| {
                    s.phase == PoolPhase::Ready && !s.storage_class_names.is_empty()
                })
            });
        let held = Api::<StorageCluster>::namespaced(d.kube.clone(), &d.ns)
            .get_opt("simplyblock")
            .await
            .expect("the cluster")
            .and_then(|c| c.status)
            .map(|s| (s.active_ops_ref, s.provisioning_slots));
        let settled = held
            .as_ref()
            .is_some_and(|(lock, slots)| lock.is_none() && slots.is_empty());
        if doc.phase == DeploymentPhase::Expanded
            && online == WORKERS.len()
            && pool_ready
            && settled
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(150),
            "the deployment did not finish after the kills: document {:?}/{:?} ({:?}), {online} node(s) Online, pool ready {pool_ready}, lock and slots held {held:?}",
            doc.phase,
            doc.step.state,
            doc.message
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The end state of one deployment of the sample document, with each call counted.
async fn assert_deployed_once(d: &Deployment) {
    // Every fault scripted with a count fired in full, so the run met each of them.
    let r =
        d.cp.raw(Method::GET, "/../../_sim/faults", &[], None)
            .await
            .expect("faults");
    let rules: Value = r.json().unwrap_or(Value::Null);
    for rule in rules["rules"].as_array().into_iter().flatten() {
        if let Some(count) = rule["count"].as_u64() {
            assert_eq!(rule["fired"].as_u64(), Some(count), "{rule}");
        }
    }

    let log = calls(&d.cp).await;
    exactly(&log, "POST /api/v2/clusters/", 1);
    exactly(
        &log,
        "POST /api/v2/clusters/{cluster_id}/storage-nodes/",
        WORKERS.len(),
    );
    exactly(&log, "POST /api/v2/clusters/{cluster_id}/activate", 1);
    exactly(&log, "POST /api/v2/clusters/{cluster_id}/storage-pools/", 1);
    let clusters = d.cp.list_clusters().await.expect("clusters");
    assert_eq!(clusters.len(), 1);
    assert_eq!(
        d.cp.list_storage_nodes(clusters[0].id)
            .await
            .expect("nodes")
            .len(),
        WORKERS.len()
    );
    let items = d
        .storage_nodes()
        .list(&Default::default())
        .await
        .expect("nodes")
        .items;
    assert_eq!(
        items.len(),
        WORKERS.len(),
        "no duplicate or orphaned StorageNode"
    );
    // Each worker's slot was added once: the answered adds name every worker once.
    let mut added: Vec<&str> = log
        .iter()
        .filter(|c| route(c) == "POST /api/v2/clusters/{cluster_id}/storage-nodes/" && committed(c))
        .filter_map(|c| c["body"]["node_address"].as_str())
        .filter_map(|a| a.split('.').next())
        .collect();
    added.sort();
    assert_eq!(added, WORKERS, "one node add per slot");
    let cluster = Api::<StorageCluster>::namespaced(d.kube.clone(), &d.ns)
        .get("simplyblock")
        .await
        .expect("the cluster");
    assert_eq!(
        cluster.status.as_ref().map(|s| s.phase),
        Some(ClusterPhase::Online),
        "{:?}",
        cluster.status
    );
    assert!(
        cluster
            .status
            .as_ref()
            .is_some_and(|s| s.active_ops_ref.is_none() && s.provisioning_slots.is_empty()),
        "no lock or node-add slot left behind: {:?}",
        cluster.status
    );

    // Nothing orphaned: exactly the objects a deployment of this document makes.
    let ops: Vec<String> = Api::<StorageClusterOps>::namespaced(d.kube.clone(), &d.ns)
        .list(&Default::default())
        .await
        .expect("ops")
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    assert_eq!(ops, ["simplyblock-activate"], "one activation request");
    let operator_ops = Api::<OperatorOps>::namespaced(d.kube.clone(), &d.ns)
        .list(&Default::default())
        .await
        .expect("operator ops")
        .items;
    assert!(operator_ops.is_empty(), "{operator_ops:?}");
    let mut config_maps: Vec<String> = Api::<ConfigMap>::namespaced(d.kube.clone(), &d.ns)
        .list(&Default::default())
        .await
        .expect("config maps")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    config_maps.sort();
    assert_eq!(config_maps, ["simplyblock-storage-node-config-simplyblock"]);
    let mut secrets: Vec<String> = Api::<Secret>::namespaced(d.kube.clone(), &d.ns)
        .list(&Default::default())
        .await
        .expect("secrets")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    secrets.sort();
    assert_eq!(secrets, EXPECTED_SECRETS);
    // The storage nodes trust the control plane's CA beside their cluster's, and were
    // reached over mutual TLS only.
    let serving = Api::<Secret>::namespaced(d.kube.clone(), &d.ns)
        .get("simplyblock-storage-node-tls-simplyblock")
        .await
        .expect("serving Secret");
    let trusted = serving.data.unwrap_or_default()["ca.crt"].0.clone();
    let trusted = String::from_utf8(trusted).expect("PEM");
    assert!(trusted.contains(d.ca_pem.trim()), "{trusted}");
    let node_calls: Vec<&Value> = log
        .iter()
        .filter(|c| c["path"].as_str().is_some_and(|p| p.starts_with("/snode/")))
        .collect();
    assert!(
        node_calls
            .iter()
            .all(|c| c["client"] == "simplyblock-operator"),
        "{node_calls:#?}"
    );

    assert_eq!(
        d.cp.list_pools(clusters[0].id).await.expect("pools").len(),
        1
    );
    let pools = Api::<StoragePool>::namespaced(d.kube.clone(), &d.ns)
        .list(&Default::default())
        .await
        .expect("pools")
        .items;
    assert_eq!(pools.len(), 1, "one default pool");
    let classes = Api::<StorageClass>::all(d.kube.clone())
        .list(&ListParams::default().labels(&format!(
            "storage.simplyblock.io/namespace={},storage.simplyblock.io/pool={}",
            d.ns,
            pools[0].metadata.name.as_deref().unwrap_or_default()
        )))
        .await
        .expect("classes")
        .items;
    assert_eq!(classes.len(), 1, "one StorageClass for the pool");
}

/// The signal `std::process::abort` ends a process with on Linux.
pub(crate) const SIGABRT: i32 = 6;

/// Runs the operator armed at `point` until it aborts there. `false` when the work ended
/// without passing the point (the effect was already there).
pub(crate) async fn abort_at(d: &Deployment, point: &str, done: impl AsyncFn() -> bool) -> bool {
    use std::os::unix::process::ExitStatusExt;
    let mut child = d.operator(Some(point));
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("the operator process") {
            assert_eq!(
                status.signal(),
                Some(SIGABRT),
                "the operator armed at {point} ended otherwise: {status}"
            );
            return true;
        }
        if done().await {
            child.kill().expect("kill");
            child.wait().expect("reaped");
            return false;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the operator never reached {point}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How many StorageNodes have their control-plane node recorded.
async fn recorded(d: &Deployment) -> usize {
    d.storage_nodes()
        .list(&Default::default())
        .await
        .expect("nodes")
        .items
        .iter()
        .filter(|n| n.status.as_ref().is_some_and(|s| s.uuid.is_some()))
        .count()
}

/// Every worker's StorageNode has its control-plane node recorded.
async fn all_recorded(d: &Deployment) -> bool {
    let nodes = d
        .storage_nodes()
        .list(&Default::default())
        .await
        .expect("nodes")
        .items;
    nodes.len() == WORKERS.len()
        && nodes
            .iter()
            .all(|n| n.status.as_ref().is_some_and(|s| s.uuid.is_some()))
}

/// The cluster holds no provisioning slot: every node that took one gave it back.
async fn no_slot_held(d: &Deployment) -> bool {
    Api::<StorageCluster>::namespaced(d.kube.clone(), &d.ns)
        .get_opt("simplyblock")
        .await
        .expect("the cluster")
        .and_then(|c| c.status)
        .is_some_and(|s| s.provisioning_slots.is_empty())
}

async fn answered_on(d: &Deployment, on: &str) -> usize {
    calls(&d.cp)
        .await
        .iter()
        .filter(|c| route(c) == on && committed(c))
        .count()
}

#[tokio::test]
async fn a_kill_after_every_non_idempotent_step_of_a_deployment_changes_nothing() {
    let d = deployment("crash-points", "", 5).await;
    let add = "POST /api/v2/clusters/{cluster_id}/storage-nodes/";
    let mut fired: Vec<String> = Vec::new();
    for point in [
        crash::CLUSTER_CREATE,
        crash::NODE_ADD,
        crash::NODE_ADD,
        crash::NODE_ADD,
        // The last node recorded, its slot not yet given back: no later add takes a slot
        // and drops it as stale.
        crash::NODE_RECORDED,
        "StorageClusterOps/Activate/Requesting",
        crash::POOL_CREATE,
    ] {
        // Adds run side by side: the point is armed only while a worker is still to add.
        if point == crash::NODE_ADD && answered_on(&d, add).await >= WORKERS.len() {
            continue;
        }
        // Each predicate says the operator is past the point without stopping there, never
        // that it is at it: an add answered is the add point about to fire, the last node
        // recorded the recorded point about to fire.
        let recorded_before = recorded(&d).await;
        let all_added = async || match point {
            crash::NODE_ADD => recorded(&d).await > recorded_before,
            crash::NODE_RECORDED => all_recorded(&d).await && no_slot_held(&d).await,
            _ => false,
        };
        if abort_at(&d, point, all_added).await {
            fired.push(point.to_string());
        }
    }
    for point in [
        crash::CLUSTER_CREATE,
        crash::NODE_RECORDED,
        crash::NODE_ADD,
        "StorageClusterOps/Activate/Requesting",
        crash::POOL_CREATE,
    ] {
        assert!(
            fired.iter().any(|f| f == point),
            "{point} never fired: {fired:?}"
        );
    }
    let mut child = d.operator(None);
    until_deployed(&d).await;
    child.kill().expect("kill");
    child.wait().expect("reaped");
    assert_deployed_once(&d).await;

    // Each StorageClusterOps action on the Online cluster, killed right after each of its
    // calls, then finished by an operator that is not armed.
    let nodes = WORKERS.len();
    let node_route = |verb: &str| {
        format!("POST /api/v2/clusters/{{cluster_id}}/storage-nodes/{{storage_node_id}}/{verb}")
    };
    let cluster_route = |verb: &str| format!("POST /api/v2/clusters/{{cluster_id}}/{verb}");
    // (action, the steps that call, the calls each route takes effect with)
    type Expected = Vec<(String, usize)>;
    let actions: [(&str, &[&str], Expected); 5] = [
        (
            "Shutdown",
            &["Requesting"],
            vec![(cluster_route("shutdown"), 1)],
        ),
        ("Start", &["Requesting"], vec![(cluster_route("start"), 1)]),
        (
            "Restart",
            &["ShuttingDown", "Starting"],
            vec![(cluster_route("shutdown"), 1), (cluster_route("start"), 1)],
        ),
        (
            "Expand",
            &["Requesting"],
            vec![(cluster_route("expand"), 1)],
        ),
        (
            "RollingRestart",
            &["ShuttingDownNode", "RestartingNode"],
            vec![
                (node_route("shutdown"), nodes),
                (node_route("restart"), nodes),
            ],
        ),
    ];
    let admin = |path: &str, body: Value| {
        let cp = d.cp.clone();
        let path = format!("/../../_sim/{path}");
        async move {
            let r = cp
                .raw(Method::PUT, &path, &[], Some(&body))
                .await
                .expect("sbsim admin");
            assert!(r.status < 300, "{path}: {}", r.status);
        }
    };
    let ops: Api<StorageClusterOps> = Api::namespaced(d.kube.clone(), &d.ns);
    for (action, steps, expected) in actions {
        let name = format!("crash-{}", action.to_lowercase());
        // An expansion killed after its call is judged by the restarted operator seeing
        // the cluster still expanding (the record alone cannot say the call went out): the
        // simulated clock holds the expansion until that operator has looked, however long
        // its start takes.
        let held_at = if action == "Expand" {
            let clock =
                d.cp.raw(Method::GET, "/../../_sim/clock", &[], None)
                    .await
                    .expect("the simulated clock");
            let scale = clock.json().and_then(|c| c["scale"].as_f64());
            admin("clock", json!({"scale": 0.0})).await;
            Some(scale.expect("the clock's scale"))
        } else {
            None
        };
        let from = calls(&d.cp).await.len();
        let op: StorageClusterOps = serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageClusterOps",
            "metadata": {"name": name},
            "spec": {"clusterRef": "simplyblock", "action": action}
        }))
        .expect("op");
        ops.create(&PostParams::default(), &op)
            .await
            .expect("op created");
        let finished = async || {
            ops.get(&name)
                .await
                .ok()
                .and_then(|o| o.status)
                .is_some_and(|s| s.phase.is_terminal())
        };
        for step in steps {
            let point = crash::ops_point("StorageClusterOps", action, step);
            assert!(abort_at(&d, &point, finished).await, "{point} never fired");
        }
        let mut child = d.operator(None);
        if let Some(scale) = held_at {
            crate::support::until("the restarted operator to see the expansion", async || {
                let message = ops.get(&name).await.ok()?.status?.message?;
                message.contains("the cluster is expanding").then_some(())
            })
            .await;
            admin("clock", json!({"scale": scale})).await;
        }
        let done = crate::support::until(&format!("{name} to finish"), async || {
            ops.get(&name)
                .await
                .ok()?
                .status
                .filter(|s| s.phase.is_terminal())
        })
        .await;
        child.kill().expect("kill");
        child.wait().expect("reaped");
        assert_eq!(
            done.phase,
            OpsPhase::Succeeded,
            "{name}: {:?}",
            done.message
        );
        let log = calls(&d.cp).await;
        for (on, effective) in &expected {
            exactly(&log[from..], on, *effective);
        }
    }

    // CancelTask on a node add held open: every attempt fails and the frozen clock keeps
    // the task in the queue until the cancel has been sent, killed after, and awaited.
    admin("faults", json!({"spec": "taskfail:name=node_add"})).await;
    admin("clock", json!({"scale": 0.0})).await;
    let cluster = d.cp.list_clusters().await.expect("clusters")[0].id;
    let task =
        d.cp.add_storage_node(
            cluster,
            &simplyblock_controlplane::StorageNodeAdd::new(
                "cw9.simplyblock-storage-node-api.simplyblock.svc.cluster.local:5000",
                "eth0",
            ),
        )
        .await
        .expect("a node add to cancel");
    let from = calls(&d.cp).await.len();
    let op: StorageClusterOps = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageClusterOps",
        "metadata": {"name": "crash-canceltask"},
        "spec": {"clusterRef": "simplyblock", "action": "CancelTask",
                 "cancelTask": {"taskID": task.to_string()}}
    }))
    .expect("op");
    ops.create(&PostParams::default(), &op)
        .await
        .expect("op created");
    let point = crash::ops_point("StorageClusterOps", "CancelTask", "Requesting");
    let finished = async || {
        ops.get("crash-canceltask")
            .await
            .ok()
            .and_then(|o| o.status)
            .is_some_and(|s| s.phase.is_terminal())
    };
    assert!(abort_at(&d, &point, finished).await, "{point} never fired");
    let mut child = d.operator(None);
    crate::support::until("the cancel to be awaited", async || {
        let s = ops.get("crash-canceltask").await.ok()?.status?;
        (s.step.state.as_deref() == Some("Awaiting")).then_some(())
    })
    .await;
    admin("clock", json!({"scale": 1000.0})).await;
    let done = crate::support::until("crash-canceltask to finish", async || {
        ops.get("crash-canceltask")
            .await
            .ok()?
            .status
            .filter(|s| s.phase.is_terminal())
    })
    .await;
    child.kill().expect("kill");
    child.wait().expect("reaped");
    assert_eq!(done.phase, OpsPhase::Succeeded, "{:?}", done.message);
    let cancel = format!("/api/v2/clusters/{cluster}/tasks/{task}/cancel");
    let cancels = calls(&d.cp).await[from..]
        .iter()
        .filter(|c| c["method"] == "POST" && c["path"] == cancel.as_str())
        .count();
    assert_eq!(cancels, 1, "one cancel reached the control plane");

    // Each single-call StorageNodeOps action on one node, killed right after its call,
    // then finished by an operator that is not armed: each call takes effect once.
    let node = d
        .storage_nodes()
        .list(&Default::default())
        .await
        .expect("storage nodes")
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .min()
        .expect("a storage node");
    let node_ops: Api<simplyblock_api::StorageNodeOps> = Api::namespaced(d.kube.clone(), &d.ns);
    for (action, verb) in [
        ("Shutdown", "shutdown"),
        ("Restart", "restart"),
        ("Suspend", "suspend"),
        ("Resume", "resume"),
    ] {
        let name = format!("crash-node-{}", action.to_lowercase());
        let from = calls(&d.cp).await.len();
        let op: simplyblock_api::StorageNodeOps = serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNodeOps",
            "metadata": {"name": name},
            "spec": {"nodeRef": node, "action": action}
        }))
        .expect("op");
        // The operation is admitted by the webhook the armed operator serves.
        let point = crash::ops_point("StorageNodeOps", action, "Requesting");
        let mut armed = d.operator(Some(&point));
        crate::support::until(&format!("{name} admitted"), async || {
            match node_ops.create(&PostParams::default(), &op).await {
                Ok(_) => Some(()),
                Err(kube::Error::Api(e)) if e.code == 409 => Some(()),
                Err(_) => None,
            }
        })
        .await;
        let ended = crate::support::until(&format!("the abort at {point}"), async || {
            armed.try_wait().expect("the operator process")
        })
        .await;
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(ended.signal(), Some(SIGABRT), "armed at {point}: {ended}");
        }
        let mut child = d.operator(None);
        let done = crate::support::until(&format!("{name} to finish"), async || {
            node_ops
                .get(&name)
                .await
                .ok()?
                .status
                .filter(|s| s.phase.is_terminal())
        })
        .await;
        child.kill().expect("kill");
        child.wait().expect("reaped");
        assert_eq!(
            done.phase,
            OpsPhase::Succeeded,
            "{name}: {:?}",
            done.message
        );
        exactly(&calls(&d.cp).await[from..], &node_route(verb), 1);
    }

    // Each StorageDeviceOps step that calls, on one drive of that node, killed right after
    // its call, then finished by an operator that is not armed: Fail killed after its
    // remove, Restart after its restart, Fail again killed after its fail.
    let devices: Api<simplyblock_api::StorageDevice> = Api::namespaced(d.kube.clone(), &d.ns);
    let mut mirror = d.operator(None);
    let device = crate::support::until("a serving StorageDevice of the node", async || {
        devices
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|o| o.spec.node_ref == node)
            .filter(|o| {
                o.status.as_ref().and_then(|s| s.device_status.as_deref()) == Some("online")
            })
            .filter_map(|o| o.metadata.name)
            .min()
    })
    .await;
    mirror.kill().expect("kill");
    mirror.wait().expect("reaped");
    let device_ops: Api<simplyblock_api::StorageDeviceOps> = Api::namespaced(d.kube.clone(), &d.ns);
    let device_route = |verb: &str| {
        format!(
            "POST /api/v2/clusters/{{cluster_id}}/storage-nodes/{{storage_node_id}}/devices/{{device_id}}/{verb}"
        )
    };
    for (name, action, step, verbs) in [
        (
            "crash-device-fail",
            "Fail",
            "Removing",
            &["remove", "fail"][..],
        ),
        (
            "crash-device-restart",
            "Restart",
            "Requesting",
            &["restart"][..],
        ),
        (
            "crash-device-fail-again",
            "Fail",
            "Failing",
            &["remove", "fail"][..],
        ),
    ] {
        let from = calls(&d.cp).await.len();
        let op: simplyblock_api::StorageDeviceOps = serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageDeviceOps",
            "metadata": {"name": name},
            "spec": {"deviceRef": device, "action": action}
        }))
        .expect("op");
        let point = crash::ops_point("StorageDeviceOps", action, step);
        let mut armed = d.operator(Some(&point));
        crate::support::until(&format!("{name} admitted"), async || {
            match device_ops.create(&PostParams::default(), &op).await {
                Ok(_) => Some(()),
                Err(kube::Error::Api(e)) if e.code == 409 => Some(()),
                Err(_) => None,
            }
        })
        .await;
        let ended = crate::support::until(&format!("the abort at {point}"), async || {
            armed.try_wait().expect("the operator process")
        })
        .await;
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(ended.signal(), Some(SIGABRT), "armed at {point}: {ended}");
        }
        let mut child = d.operator(None);
        let done = crate::support::until(&format!("{name} to finish"), async || {
            device_ops
                .get(name)
                .await
                .ok()?
                .status
                .filter(|s| s.phase.is_terminal())
        })
        .await;
        child.kill().expect("kill");
        child.wait().expect("reaped");
        assert_eq!(
            done.phase,
            OpsPhase::Succeeded,
            "{name}: {:?}",
            done.message
        );
        let log = calls(&d.cp).await;
        for verb in verbs {
            exactly(&log[from..], &device_route(verb), 1);
        }
    }
}

async fn deploy_through_kills(ns: &str, faults: &str, seed: u64) {
    let d = deployment(ns, faults, seed).await;
    let mut rng = Lcg(seed);
    let mut from = calls(&d.cp).await.len();
    let mut child = d.operator(None);
    let mut landed: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..KILLS {
        // Each moment is timed from the restarted process's first calls to the control
        // plane, not from its spawn: a loaded machine can spend the whole delay just
        // starting the process, and the kills would then land before any step. A few
        // calls, not one: on a loaded machine a process that made its first call can
        // still make no more in the whole delay, and the deployment would never move.
        until_calls(&d, from, 1 + rng.below(3) as usize).await;
        tokio::time::sleep(Duration::from_millis(300 + rng.below(900))).await;
        child.kill().expect("kill -9");
        child.wait().expect("reaped");
        let doc = d
            .docs()
            .get(&d.name)
            .await
            .expect("document")
            .status
            .unwrap_or_default();
        let steps: Vec<String> = d
            .storage_nodes()
            .list(&Default::default())
            .await
            .expect("nodes")
            .items
            .into_iter()
            .map(|n| {
                n.status
                    .map(|s| s.step.state.unwrap_or_else(|| format!("{:?}", s.phase)))
                    .unwrap_or_default()
            })
            .collect();
        println!(
            "kill {i:>2}: document {:?}/{}, nodes {steps:?}",
            doc.phase,
            doc.step.state.as_deref().unwrap_or("-")
        );
        let at = if doc.phase == DeploymentPhase::Expanded {
            "after the deployment".to_string()
        } else if let Some(step) = steps.iter().find(|s| ADD_STEPS.contains(&s.as_str())) {
            format!("node {step}")
        } else {
            format!("document {}", doc.step.state.as_deref().unwrap_or("-"))
        };
        *landed.entry(at).or_default() += 1;
        from = calls(&d.cp).await.len();
        child = d.operator(None);
    }
    println!("the kills landed: {landed:?}");
    // The harness proves something only if the kills land inside the deployment, and
    // inside the node adds, where the steps that call the control plane are.
    let after = landed.get("after the deployment").copied().unwrap_or(0);
    assert!(
        KILLS - after >= KILLS / 2,
        "only {} of {KILLS} kills landed before the deployment ended: {landed:?}",
        KILLS - after
    );
    assert!(
        landed.keys().any(|k| k.starts_with("node ")),
        "no kill landed inside a node add: {landed:?}"
    );
    until_deployed(&d).await;
    child.kill().expect("kill");
    child.wait().expect("reaped");
    assert_deployed_once(&d).await;
}

/// Waits until the control plane has seen `count` more calls than the `from` it had: the
/// process started since has got that far into its work.
async fn until_calls(d: &Deployment, from: usize, count: usize) {
    crate::support::until("the restarted operator's calls", async || {
        (calls(&d.cp).await.len() >= from + count).then_some(())
    })
    .await;
}

/// The StorageNode steps of an add that a kill can interrupt.
const ADD_STEPS: [&str; 5] = [
    "AwaitingSlot",
    "Posting",
    "Resolving",
    "Adopting",
    "AwaitingWorker",
];

#[tokio::test]
async fn kills_at_random_moments_change_nothing() {
    deploy_through_kills("crash", "", 7).await;
}

#[tokio::test]
async fn kills_under_control_plane_faults_change_nothing() {
    deploy_through_kills(
        "crash-faults",
        concat!(
            "error:method=GET,rate=0.05,status=503;",
            "drop:method=POST,path=/api/v2/clusters/,count=1;",
            "drop:method=POST,path=/api/v2/clusters/*/storage-pools/,count=1;",
            // Node adds: a 409, two 5xx answers before anything is done, one add
            // committed whose answer is lost,
            "conflict:method=POST,path=/api/v2/clusters/*/storage-nodes/,count=1;",
            "error:method=POST,path=/api/v2/clusters/*/storage-nodes/,status=500,after=1,count=2;",
            "drop:method=POST,path=/api/v2/clusters/*/storage-nodes/,after=3,count=1;",
            // And one committed whose answer says it failed.
            "commiterror:method=POST,path=/api/v2/clusters/*/storage-nodes/,after=4,count=1;",
            // The storage-node API of the workers: two answers refused.
            "error:method=GET,path=/snode/check,status=503,count=2;",
            // Activation: a 503, then one committed whose answer is lost.
            "error:method=POST,path=/api/v2/clusters/*/activate,status=503,count=1;",
            "drop:method=POST,path=/api/v2/clusters/*/activate,after=1,count=1;",
            "latency:ms=20,rate=0.2",
        ),
        11,
    )
    .await;
}

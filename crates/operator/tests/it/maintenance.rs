//! Host maintenance end to end on the real API server and sbsim: a cordon opens a window
//! that runs to its end once the worker is back, windows of a cluster that allows one at a
//! time are serialised, and an uncordon before a window opened withdraws it.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use simplyblock_api::common::OpsPhase;
use simplyblock_api::keys::{CLUSTER_LABEL, ENROLLMENT_LABEL, NAMESPACE_LABEL};
use simplyblock_api::storage_node_ops::StorageNodeOps;
use simplyblock_api::{StorageCluster, StorageNode};
use simplyblock_controlplane::{
    Client, ClusterCreate, ClusterStatus, Method, NodeStatus, StorageNodeAdd, Uuid,
};
use simplyblock_operator::node::maintenance_trigger::window_name;
use simplyblock_operator::node::ops::maintenance::{MAINTENANCE_LABEL, budget_name};
use simplyblock_operator::runtime::context::Context;
use simplyblock_simulator::{Server, Sim, SimConfig, Timings, labels};

use crate::support::{self, PATIENCE, TOKEN, until, until_explained};

/// Workers as Kubernetes Nodes and as sbsim's fleet, a storage node on each of the first
/// `served`, an active cluster `sb` with their StorageNodes, and the operator's
/// StorageNodeOps controller, the maintenance trigger and the storage-node workload.
pub struct Fleet {
    pub kube: kube::Client,
    pub ns: String,
    pub cp: Client,
    pub uuid: Uuid,
    pub workers: Vec<String>,
    /// StorageNode name and control-plane id of each served worker, in order.
    pub nodes: Vec<(String, Uuid)>,
    pub ctx: Arc<Context>,
    _sim: Server,
    _mounted: simplyblock_testenv::standin::StandIn,
    _dir: tempfile::TempDir,
}

pub async fn fleet(ns: &str, workers: usize, served: usize, windows: i32) -> Fleet {
    let kube = support::api_server().await.client().await.expect("client");
    support::namespace(&kube, ns).await;
    let names: Vec<String> = (1..=workers).map(|i| format!("{ns}-w{i}")).collect();
    let octet = ns.bytes().fold(7u32, |a, b| (a * 31 + b as u32) % 250) + 1;
    let nodes_api: Api<Node> = Api::all(kube.clone());
    let mut yaml = String::from("workers:\n");
    for (i, w) in names.iter().enumerate() {
        let address = format!("10.{octet}.0.{}", i + 1);
        yaml.push_str(&format!(
            "  - hostname: {w}\n    addresses: [{address}]\n    devices: {{count: 2, size: 2T}}\n"
        ));
        let mut labels = json!({"kubernetes.io/hostname": w});
        if i < served {
            labels[ENROLLMENT_LABEL] = json!("sb");
            labels[NAMESPACE_LABEL] = json!(ns);
        }
        let node: Node = serde_json::from_value(json!({"metadata": {"name": w, "labels": labels}}))
            .expect("node");
        nodes_api
            .create(&PostParams::default(), &node)
            .await
            .expect("worker Node");
        let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": address}],
                                       "conditions": [{"type": "Ready", "status": "True"}]}});
        nodes_api
            .patch_status(w, &PatchParams::default(), &Patch::Merge(status))
            .await
            .expect("worker status");
    }
    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("fleet.yaml"), yaml).expect("fleet");
    let config = SimConfig {
        tokens: vec![TOKEN.into()],
        time_scale: 1000.0,
        fleet: Some(dir.path().join("fleet.yaml")),
        // Slow enough that a look sees the node shutting down and restarting.
        timings: Timings {
            node_shutdown_ms: 1_000_000,
            node_restart_ms: 1_000_000,
            ..Timings::default()
        },
        ..SimConfig::new(dir.path().join("state"))
    };
    let (tls, ca_pem) = support::sbsim_tls_material();
    let sim = Server::start(Sim::open(config).expect("sim"), "127.0.0.1:0", Some(tls))
        .await
        .expect("sbsim");
    let mounted = support::storage_nodes_mount(&kube, ns, &sim);
    tokio::spawn(labels::watch(sim.sim.clone(), kube.clone()));
    let cp = support::tls_cp_client(sim.addr, &ca_pem, TOKEN);
    let cluster = cp
        .create_cluster(&ClusterCreate::new("sb", 10, 4))
        .await
        .expect("cluster");
    // The workers' labels reach sbsim through its watch, in real time, while an add's
    // retries run on sbsim's clock (1000× faster): an add made before its worker is seen
    // enrolled spends them all in milliseconds. Each worker is awaited reachable first.
    for w in &names[..served] {
        until(&format!("sbsim sees {w} enrolled"), async || {
            let r = cp
                .raw(Method::GET, &format!("/../../_sim/workers/{w}"), &[], None)
                .await
                .ok()?;
            (r.json()?["reachable"] == json!(true)).then_some(())
        })
        .await;
    }
    for w in &names[..served] {
        let add = StorageNodeAdd::new(
            format!("{w}.simplyblock-storage-node-api.{ns}.svc.cluster.local:5000"),
            "eth0",
        );
        until("the node add accepted", async || {
            cp.add_storage_node(cluster.id, &add).await.ok()
        })
        .await;
    }
    // What was last seen, for the failure to say: the nodes' statuses and the add tasks'.
    let seen = Mutex::new(String::new());
    let online = until_explained(
        "the nodes online",
        PATIENCE,
        async || {
            let nodes = cp.list_storage_nodes(cluster.id).await.ok()?;
            let tasks = cp.list_tasks(cluster.id).await.unwrap_or_default();
            *seen.lock().expect("seen") = format!(
                "nodes {:?}, tasks {:?}",
                nodes
                    .iter()
                    .map(|n| (&n.hostname, n.status))
                    .collect::<Vec<_>>(),
                tasks
                    .iter()
                    .map(|t| (&t.function_name, &t.status, &t.function_result))
                    .collect::<Vec<_>>()
            );
            (nodes.len() == served && nodes.iter().all(|n| n.status == NodeStatus::Online))
                .then_some(nodes)
        },
        || seen.lock().expect("seen").clone(),
    )
    .await;
    cp.activate_cluster(cluster.id).await.expect("activate");
    until("the cluster active", async || {
        (cp.get_cluster(cluster.id).await.ok()?.status == ClusterStatus::Active).then_some(())
    })
    .await;
    let sc: StorageCluster = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
        "metadata": {"name": "sb"},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 4, "maxConcurrentWorkerRestarts": windows,
                 "stripe": {"dataChunks": 1, "parityChunks": 1}}
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
            &Patch::Merge(json!({"status": {"uuid": cluster.id.to_string(),
                                            "maxConcurrentWorkerRestarts": windows}})),
        )
        .await
        .expect("cluster status");
    let storage_nodes: Api<StorageNode> = Api::namespaced(kube.clone(), ns);
    let mut nodes = Vec::new();
    for w in &names[..served] {
        let id = online
            .iter()
            .find(|n| &n.hostname == w)
            .expect("node of worker")
            .id;
        let name = simplyblock_api::names::storage_node_name("sb", w, 0);
        let sn: StorageNode = serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNode",
            "metadata": {"name": name, "labels": {simplyblock_api::keys::WORKER_LABEL: w}},
            "spec": {"clusterRef": "sb", "workerNode": w, "slot": 0,
                     "config": {"sizing": {"vcpuCount": 4, "minHugePagesSize": "4G"}}},
        }))
        .expect("storage node");
        storage_nodes
            .create(&PostParams::default(), &sn)
            .await
            .expect("StorageNode");
        storage_nodes
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"uuid": id.to_string()}})),
            )
            .await
            .expect("uuid");
        nodes.push((name, id));
    }
    let ctx = Arc::new(
        Context::new(
            support::operator_kube().await,
            cp.clone(),
            support::MANAGED_TLS_ENDPOINT.into(),
            ns.into(),
        )
        .watching(ns)
        .with_snode_proxy(sim.addr),
    );
    tokio::spawn(simplyblock_operator::workload::run(ctx.clone()));
    tokio::spawn(simplyblock_operator::node::ops::run(ctx.clone()));
    tokio::spawn(simplyblock_operator::node::maintenance_trigger::run(
        ctx.clone(),
    ));
    Fleet {
        kube,
        ns: ns.into(),
        cp,
        uuid: cluster.id,
        workers: names,
        nodes,
        ctx,
        _sim: sim,
        _mounted: mounted,
        _dir: dir,
    }
}

impl Fleet {
    pub fn ops(&self) -> Api<StorageNodeOps> {
        Api::namespaced(self.kube.clone(), &self.ns)
    }

    pub async fn cordon(&self, worker: &str, cordoned: bool) {
        Api::<Node>::all(self.kube.clone())
            .patch(
                worker,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": cordoned}})),
            )
            .await
            .expect("cordon");
    }

    /// Waits for operation `name` to be at `step` (Running) or to end in `phase`.
    pub async fn reaches(&self, name: &str, phase: OpsPhase, step: Option<&str>) -> StorageNodeOps {
        let last = Mutex::new(None);
        until_explained(
            &format!("{name} {phase:?} {step:?}"),
            PATIENCE,
            async || {
                let op = self.ops().get(name).await.ok()?;
                *last.lock().expect("lock") = op.status.clone();
                let s = op.status.as_ref()?;
                (s.phase == phase && (step.is_none() || s.step.state.as_deref() == step))
                    .then_some(op)
            },
            || format!("last seen {:?}", last.lock().expect("lock")),
        )
        .await
    }

    pub async fn node_status(&self, id: Uuid) -> NodeStatus {
        self.cp
            .get_storage_node(self.uuid, id)
            .await
            .expect("node")
            .status
    }

    pub async fn calls(&self, verb: &str, id: Uuid) -> usize {
        support::calls(
            &self.cp,
            "POST",
            &format!("/api/v2/clusters/{}/storage-nodes/{id}/{verb}", self.uuid),
        )
        .await
    }

    /// Records every (operation, phase, step) the API server shows, in order.
    pub fn history(&self) -> History {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = seen.clone();
        let stream = watcher::watcher(self.ops(), watcher::Config::default());
        tokio::spawn(async move {
            use kube::runtime::WatchStreamExt;
            let mut stream = std::pin::pin!(stream.default_backoff().applied_objects());
            while let Some(item) = stream.next().await {
                // A watch the API server ends (410 Expired: a new watch cache starting after
                // the list's resourceVersion) is listed and watched again.
                let Ok(op) = item else { continue };
                let Some(s) = op.status else { continue };
                let entry = (op.metadata.name.unwrap_or_default(), s.phase, s.step.state);
                let mut seen = into.lock().expect("lock");
                if seen.last() != Some(&entry) {
                    seen.push(entry);
                }
            }
        });
        seen
    }
}

/// Every (operation, phase, step) seen, in order.
pub type History = Arc<Mutex<Vec<(String, OpsPhase, Option<String>)>>>;

/// A storage-node pod of cluster `sb` on `worker`, as the DaemonSet would run it.
async fn storage_node_pod(f: &Fleet, worker: &str) -> String {
    let name = format!("storage-node-{worker}");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {CLUSTER_LABEL: "sb"}},
        "spec": {"nodeName": worker, "automountServiceAccountToken": false,
                 "containers": [{"name": "storage-node", "image": "quay.io/simplyblock-io/simplyblock:latest"}]},
    }))
    .expect("pod");
    Api::<Pod>::namespaced(f.kube.clone(), &f.ns)
        .create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    name
}

async fn pod_label(f: &Fleet, pod: &str) -> Option<String> {
    Api::<Pod>::namespaced(f.kube.clone(), &f.ns)
        .get(pod)
        .await
        .expect("pod")
        .metadata
        .labels
        .unwrap_or_default()
        .get(MAINTENANCE_LABEL)
        .cloned()
}

#[tokio::test]
async fn a_cordon_runs_a_window_that_ends_with_the_node_back_and_its_markers_gone() {
    let f = fleet("maint-one", 3, 3, 1).await;
    let worker = f.workers[0].clone();
    let (node, id) = f.nodes[0].clone();
    let window = window_name(&node);
    let pod = storage_node_pod(&f, &worker).await;
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(f.kube.clone(), &f.ns);

    f.cordon(&worker, true).await;
    // The node shuts down behind a budget that allows no disruption of the marked pods.
    f.reaches(&window, OpsPhase::Running, Some("ShuttingDown"))
        .await;
    let budget = until("the window's budget", async || {
        budgets.get_opt(&budget_name(&worker)).await.ok().flatten()
    })
    .await;
    let spec = budget.spec.expect("spec");
    assert_eq!(
        spec.max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(0))
    );
    assert_eq!(pod_label(&f, &pod).await.as_deref(), Some(worker.as_str()));

    // Offline, the worker is released to its drain and the window waits for its return.
    f.reaches(&window, OpsPhase::Running, Some("AwaitingHost"))
        .await;
    assert_eq!(f.node_status(id).await, NodeStatus::Offline);
    assert!(
        budgets
            .get_opt(&budget_name(&worker))
            .await
            .expect("read")
            .is_none()
    );

    f.cordon(&worker, false).await;
    let done = f.reaches(&window, OpsPhase::Succeeded, None).await;
    let message = done.status.and_then(|s| s.message).unwrap_or_default();
    assert!(message.contains("is over"), "{message}");
    assert_eq!(f.node_status(id).await, NodeStatus::Online);
    assert_eq!(pod_label(&f, &pod).await, None);
    assert!(
        budgets
            .get_opt(&budget_name(&worker))
            .await
            .expect("read")
            .is_none()
    );
    assert_eq!(f.calls("shutdown", id).await, 1);
    assert_eq!(f.calls("restart", id).await, 1);
    support::raised(&f.kube, &f.ns, Some(&window), "MaintenanceReleased").await;
    // Uncordoned, the finished window goes: the next cordon gets a fresh one.
    until("the finished window deleted", async || {
        f.ops().get_opt(&window).await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(
        f.ctx
            .metrics
            .sample(
                "simplyblock_storagenode_maintenance_hold_seconds_count",
                &[("node", node.as_str())]
            )
            .is_some_and(|n| n >= 1.0)
    );
}

#[tokio::test]
async fn windows_beyond_the_limit_wait_their_turn_and_an_uncordon_withdraws_a_waiting_one() {
    let f = fleet("maint-queue", 3, 3, 1).await;
    let history = f.history();
    let windows: Vec<String> = f.nodes.iter().map(|(n, _)| window_name(n)).collect();
    for w in &f.workers {
        f.cordon(w, true).await;
    }
    // One window opens; the other two wait in Holding, saying so.
    let first = until("one window open", async || {
        for w in &windows {
            let op = f.ops().get(w).await.ok()?;
            if op.status.as_ref()?.step.state.as_deref() == Some("AwaitingHost") {
                return Some(w.clone());
            }
        }
        None
    })
    .await;
    let waiting: Vec<String> = windows.iter().filter(|w| **w != first).cloned().collect();
    for w in &waiting {
        f.reaches(w, OpsPhase::Running, Some("Holding")).await;
        support::raised(&f.kube, &f.ns, Some(w), "MaintenanceQueued").await;
    }
    // An uncordon withdraws a waiting window, which calls nothing and is deleted.
    let withdrawn = &waiting[1];
    let index = windows.iter().position(|w| w == withdrawn).expect("index");
    f.cordon(&f.workers[index], false).await;
    until("the withdrawn window deleted", async || {
        f.ops()
            .get_opt(withdrawn)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(f.calls("shutdown", f.nodes[index].1).await, 0);

    // The first ends when its worker is back; only then does the second open.
    let first_index = windows.iter().position(|w| *w == first).expect("index");
    f.cordon(&f.workers[first_index], false).await;
    let second = &waiting[0];
    let second_index = windows.iter().position(|w| w == second).expect("index");
    f.reaches(second, OpsPhase::Running, Some("AwaitingHost"))
        .await;
    f.cordon(&f.workers[second_index], false).await;
    until("the second window ended and deleted", async || {
        f.ops().get_opt(second).await.ok()?.is_none().then_some(())
    })
    .await;

    let seen = history.lock().expect("lock").clone();
    let at = |name: &str, phase: OpsPhase, step: Option<&str>| {
        seen.iter()
            .position(|(n, p, s)| {
                n == name && *p == phase && (step.is_none() || s.as_deref() == step)
            })
            .unwrap_or_else(|| panic!("{name} {phase:?} {step:?} in {seen:#?}"))
    };
    assert!(
        at(&first, OpsPhase::Succeeded, None) < at(second, OpsPhase::Running, Some("ShuttingDown")),
        "{seen:#?}"
    );
    at(withdrawn, OpsPhase::Aborted, None);
    assert!(
        !seen
            .iter()
            .any(|(n, _, s)| n == withdrawn && s.as_deref() == Some("ShuttingDown")),
        "{seen:#?}"
    );
}

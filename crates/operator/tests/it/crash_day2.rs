//! The day-2 operations of a deployed cluster, the operator killed right after each of
//! their non-idempotent calls ([`simplyblock_operator::runtime::crash`]), before the call is on
//! record:
//!
//! - HostMaintenance, opened by a cordon: after each ShuttingDown call (the pods' label,
//!   the disruption budget, the shutdown) and after the restart;
//! - Migrate to a spare worker: after the restart at the target, after each Promoting
//!   call (the promote, the StorageNode re-pointed, the source unenrolled);
//! - Remove of a node holding a volume behind a PersistentVolume: after the
//!   PersistentVolumeOps is created, after the backend migration is created, after it is
//!   continued, and after the node's removal.
//!
//! A step with several calls is armed again until a pass leaves it without firing; a
//! call made once (each restart, the continue) fires once. Then an operator that is not
//! armed finishes the operation. Every control-plane call on the routes these
//! actions use is counted: each took effect exactly once.

use std::fmt::Debug;
use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use simplyblock_api::common::OpsPhase;
use simplyblock_api::keys::{CLUSTER_LABEL, ENROLLMENT_LABEL};
use simplyblock_api::persistent_volume_ops::PersistentVolumeOps;
use simplyblock_api::storage_backup_ops::StorageBackupOps;
use simplyblock_api::storage_node_ops::StorageNodeOps;
use simplyblock_controlplane::{
    ClusterStatus, DeviceStatus, Method, NodeStatus, Uuid, VolumeCreate,
};
use simplyblock_operator::node::maintenance_trigger::window_name;
use simplyblock_operator::node::ops::maintenance::{MAINTENANCE_LABEL, budget_name};
use simplyblock_operator::runtime::crash;

use crate::crash::{
    Deployment, SIGABRT, WORKERS, abort_at, calls, deployment_with_spares, exactly, route,
    until_deployed,
};
use crate::support::{until, until_explained};

/// A worker in the fleet that the document leaves out: the target of the Migrate.
const SPARE: &str = "cw4";
/// How often one step may fire before the test calls it a loop: more than the calls the
/// step makes.
pub(crate) const MOST_FIRES: usize = 5;

const NODE_ROUTE: &str = "/api/v2/clusters/{cluster_id}/storage-nodes/{storage_node_id}";
const MIGRATIONS: &str = "/api/v2/clusters/{cluster_id}/subsystems/{nqn}/migrations/";

const MAINTENANCE_PATH: [&str; 6] = [
    "Holding",
    "ShuttingDown",
    "Releasing",
    "AwaitingHost",
    "Restarting",
    "Cleanup",
];

/// Where an operation stands: its phase and step.
pub(crate) type Standing = (OpsPhase, Option<String>);

/// Every (operation, phase, step) the API server showed of one kind, in order.
#[derive(Clone)]
pub(crate) struct Seen(Arc<Mutex<Vec<(String, Standing)>>>);

impl Seen {
    pub(crate) fn record<K>(api: Api<K>, status: fn(&K) -> Option<Standing>) -> Seen
    where
        K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        let seen = Seen(Arc::default());
        let into = seen.clone();
        tokio::spawn(async move {
            let stream = watcher::watcher(api, watcher::Config::default());
            let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::applied_objects(stream));
            while let Some(Ok(op)) = stream.next().await {
                let Some((phase, state)) = status(&op) else {
                    continue;
                };
                let entry = (op.meta().name.clone().unwrap_or_default(), (phase, state));
                let mut seen = into.0.lock().expect("lock");
                if seen.last() != Some(&entry) {
                    seen.push(entry);
                }
            }
        });
        seen
    }

    /// Operation `name` was seen beyond `step` of `path`, or ended.
    pub(crate) fn past(&self, name: &str, path: &[&str], step: &str) -> bool {
        let at = path
            .iter()
            .position(|s| *s == step)
            .expect("a step of the path");
        self.0
            .lock()
            .expect("lock")
            .iter()
            .any(|(n, (phase, state))| {
                n == name
                    && (phase.is_terminal()
                        || state
                            .as_deref()
                            .and_then(|s| path.iter().position(|p| *p == s))
                            .is_some_and(|i| i > at))
            })
    }

    /// The phase operation `name` ended in, if it was seen ending.
    pub(crate) fn ended(&self, name: &str) -> Option<OpsPhase> {
        self.0
            .lock()
            .expect("lock")
            .iter()
            .find(|(n, (phase, _))| n == name && phase.is_terminal())
            .map(|(_, (phase, _))| *phase)
    }

    pub(crate) fn of(&self, name: &str) -> Vec<Standing> {
        self.0
            .lock()
            .expect("lock")
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, standing)| standing.clone())
            .collect()
    }
}

/// Arms `point` again and again until a pass leaves its step without firing; how often
/// it fired.
pub(crate) async fn fire_until_past(
    d: &Deployment,
    point: &str,
    past: impl AsyncFn() -> bool,
) -> usize {
    let from = calls(&d.cp).await.len();
    let mut fired = 0;
    while abort_at(d, point, &past).await {
        fired += 1;
        if fired > MOST_FIRES {
            let answers: Vec<String> = calls(&d.cp).await[from..]
                .iter()
                .filter(|c| c["method"] != "GET")
                .map(|c| format!("{} {}", route(c), c["status"]))
                .collect();
            panic!(
                "{point} fired {fired} times: a call at this step is repeated; the calls that change something: {answers:#?}; the operations say: {:#?}",
                said(d).await
            );
        }
    }
    fired
}

/// The message of every StorageNodeOps, PersistentVolumeOps and StorageBackupOps.
async fn said(d: &Deployment) -> Vec<String> {
    let nodes: Api<StorageNodeOps> = Api::namespaced(d.kube.clone(), &d.ns);
    let moves: Api<PersistentVolumeOps> = Api::all(d.kube.clone());
    let restores: Api<StorageBackupOps> = Api::namespaced(d.kube.clone(), &d.ns);
    let mut out: Vec<String> = nodes
        .list(&Default::default())
        .await
        .expect("operations")
        .items
        .into_iter()
        .map(|o| {
            format!(
                "{:?}: {:?}",
                o.metadata.name,
                o.status.and_then(|s| s.message)
            )
        })
        .collect();
    out.extend(
        moves
            .list(&Default::default())
            .await
            .expect("moves")
            .items
            .into_iter()
            .map(|o| {
                format!(
                    "{:?}: {:?}",
                    o.metadata.name,
                    o.status.and_then(|s| s.message)
                )
            }),
    );
    out.extend(
        restores
            .list(&Default::default())
            .await
            .expect("restores")
            .items
            .into_iter()
            .map(|o| {
                format!(
                    "{:?}: {:?}",
                    o.metadata.name,
                    o.status.and_then(|s| s.message)
                )
            }),
    );
    out
}

/// Creates `op` through the admission webhook of an operator armed at `point`, and waits
/// for that operator to abort there.
pub(crate) async fn create_armed<K>(d: &Deployment, point: &str, api: &Api<K>, op: &K)
where
    K: kube::Resource + Clone + serde::Serialize + DeserializeOwned + Debug,
{
    let mut armed = d.operator(Some(point));
    let last = Mutex::new(String::new());
    until_explained(
        &format!("the operation admitted for {point}"),
        crate::support::PATIENCE,
        async || match api.create(&PostParams::default(), op).await {
            Ok(_) => Some(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Some(()),
            Err(e) => {
                *last.lock().expect("lock") = e.to_string();
                None
            }
        },
        || last.lock().expect("lock").clone(),
    )
    .await;
    let ended = until(&format!("the abort at {point}"), async || {
        armed.try_wait().expect("the operator process")
    })
    .await;
    assert_eq!(ended.signal(), Some(SIGABRT), "armed at {point}: {ended}");
}

/// Runs an operator that is not armed until `finished`.
pub(crate) async fn finish_unarmed(d: &Deployment, what: &str, finished: impl AsyncFn() -> bool) {
    let mut child = d.operator(None);
    until(what, async || finished().await.then_some(())).await;
    child.kill().expect("kill");
    child.wait().expect("reaped");
}

/// Each call on `on` in `log` addressed node `id`.
fn all_on_node(log: &[Value], on: &str, id: Uuid) {
    for c in log.iter().filter(|c| route(c) == on) {
        let path = c["path"].as_str().unwrap_or_default();
        assert!(path.contains(&id.to_string()), "{on} reached {path}");
    }
}

fn node_ops_status(op: &StorageNodeOps) -> Option<Standing> {
    op.status.as_ref().map(|s| (s.phase, s.step.state.clone()))
}

fn volume_ops_status(op: &PersistentVolumeOps) -> Option<Standing> {
    op.status.as_ref().map(|s| (s.phase, s.step.state.clone()))
}

#[tokio::test]
async fn a_kill_after_every_non_idempotent_step_of_a_day_two_operation_changes_nothing() {
    let d = deployment_with_spares("crash-day2", "", 13, &[SPARE]).await;
    let mut child = d.operator(None);
    until_deployed(&d).await;
    child.kill().expect("kill");
    child.wait().expect("reaped");
    let cluster = d.cp.list_clusters().await.expect("clusters")[0].id;
    // The StorageNode and control-plane id on each worker.
    let node_on = async |worker: &str| -> (String, Uuid) {
        let n = d
            .storage_nodes()
            .list(&Default::default())
            .await
            .expect("storage nodes")
            .items
            .into_iter()
            .find(|n| n.spec.worker_node == worker)
            .expect("a StorageNode on the worker");
        let id = n
            .status
            .and_then(|s| s.uuid)
            .and_then(|u| u.parse().ok())
            .expect("a control-plane id");
        (n.metadata.name.expect("name"), id)
    };
    let node_ops: Api<StorageNodeOps> = Api::namespaced(d.kube.clone(), &d.ns);
    let seen = Seen::record(node_ops.clone(), node_ops_status);

    host_maintenance(&d, &seen, node_on(WORKERS[0]).await).await;
    migrate(&d, &seen, node_on(WORKERS[1]).await).await;
    remove(&d, &seen, cluster, node_on(WORKERS[2]).await).await;
}

/// A cordon opens the window; it is killed after each ShuttingDown call and after the
/// restart, and the uncordon lets it run to its end.
async fn host_maintenance(d: &Deployment, seen: &Seen, (node, id): (String, Uuid)) {
    let worker = WORKERS[0];
    let window = window_name(&node);
    let from = calls(&d.cp).await.len();
    // A storage-node pod on the worker, as the DaemonSet would run it: the window marks it.
    let pods: Api<Pod> = Api::namespaced(d.kube.clone(), &d.ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "storage-node-cw1", "labels": {CLUSTER_LABEL: "simplyblock"}},
        "spec": {"nodeName": worker, "automountServiceAccountToken": false,
                 "containers": [{"name": "storage-node", "image": "quay.io/simplyblock-io/simplyblock:latest"}]},
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    let cordon = async |cordoned: bool| {
        Api::<Node>::all(d.kube.clone())
            .patch(
                worker,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": cordoned}})),
            )
            .await
            .expect("cordon");
    };
    cordon(true).await;

    let point = crash::ops_point("StorageNodeOps", "HostMaintenance", "ShuttingDown");
    let fired = fire_until_past(d, &point, async || {
        seen.past(&window, &MAINTENANCE_PATH, "ShuttingDown")
    })
    .await;
    // The pods' label, the budget and the shutdown: each a call of its own.
    assert!(fired >= 1, "{point} never fired: {:?}", seen.of(&window));
    println!("{point} fired {fired} time(s)");

    cordon(false).await;
    // A call once: the record moves on before the restart, so the point fires once.
    let point = crash::ops_point("StorageNodeOps", "HostMaintenance", "Restarting");
    let fired = abort_at(d, &point, async || seen.ended(&window).is_some()).await;
    assert!(fired, "{point} never fired: {:?}", seen.of(&window));

    // Finished and uncordoned, the window is deleted: its end is read from the record.
    finish_unarmed(d, &format!("{window} to finish"), async || {
        seen.ended(&window).is_some()
    })
    .await;
    assert_eq!(
        seen.ended(&window),
        Some(OpsPhase::Succeeded),
        "{:?}",
        seen.of(&window)
    );
    assert_eq!(
        d.cp.get_storage_node(d.cp.list_clusters().await.expect("clusters")[0].id, id)
            .await
            .expect("node")
            .status,
        NodeStatus::Online
    );
    let budget = Api::<PodDisruptionBudget>::namespaced(d.kube.clone(), &d.ns)
        .get_opt(&budget_name(worker))
        .await
        .expect("read the budget");
    assert!(budget.is_none(), "the window's budget is left: {budget:?}");
    let labels = pods
        .get(&pod.metadata.name.clone().expect("name"))
        .await
        .expect("pod")
        .metadata
        .labels
        .unwrap_or_default();
    assert!(!labels.contains_key(MAINTENANCE_LABEL), "{labels:?}");

    let log = calls(&d.cp).await;
    for verb in ["shutdown", "restart"] {
        let on = format!("POST {NODE_ROUTE}/{verb}");
        exactly(&log[from..], &on, 1);
        all_on_node(&log[from..], &on, id);
    }
}

/// The node moves to the spare worker; killed after the restart there and after each
/// Promoting call.
async fn migrate(d: &Deployment, seen: &Seen, (node, id): (String, Uuid)) {
    let name = "crash-migrate";
    // The spare's drives take the place of the node's, which stay behind on the source.
    let spare =
        d.cp.raw(
            Method::GET,
            &format!("/../../_sim/workers/{SPARE}"),
            &[],
            None,
        )
        .await
        .expect("the spare worker");
    let drives: Vec<String> = spare.json().expect("worker")["devices"]
        .as_array()
        .expect("the spare's drives")
        .iter()
        .filter_map(|d| d["pcie"].as_str().map(str::to_owned))
        .collect();
    assert!(!drives.is_empty(), "the spare has drives");
    let from = calls(&d.cp).await.len();
    let ops: Api<StorageNodeOps> = Api::namespaced(d.kube.clone(), &d.ns);
    let op: StorageNodeOps = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNodeOps",
        "metadata": {"name": name},
        "spec": {"nodeRef": node, "action": "Migrate",
                 "migrate": {"targetWorkerNode": SPARE, "newSsdPcie": drives}},
    }))
    .expect("op");
    // A call once: it fires once.
    let point = crash::ops_point("StorageNodeOps", "Migrate", "Relocating");
    create_armed(d, &point, &ops, &op).await;

    let point = crash::ops_point("StorageNodeOps", "Migrate", "Promoting");
    let fired = fire_until_past(d, &point, async || seen.ended(name).is_some()).await;
    // The promote, the re-point and the unenrollment: each a call of its own.
    assert!(fired >= 1, "{point} never fired: {:?}", seen.of(name));
    println!("{point} fired {fired} time(s)");

    finish_unarmed(d, &format!("{name} to finish"), async || {
        seen.ended(name).is_some()
    })
    .await;
    let done = ops.get(name).await.expect("op").status.expect("status");
    assert_eq!(done.phase, OpsPhase::Succeeded, "{:?}", done.message);
    let cluster = d.cp.list_clusters().await.expect("clusters")[0].id;
    let moved = d.cp.get_storage_node(cluster, id).await.expect("node");
    assert_eq!(
        (moved.hostname.as_str(), moved.status),
        (SPARE, NodeStatus::Online)
    );
    // Promoted: the new drives serve, the ones left behind are failed.
    let devices = d.cp.list_devices(cluster, id).await.expect("devices");
    let online = devices
        .iter()
        .filter(|d| d.status == DeviceStatus::Online)
        .count();
    assert_eq!(online, drives.len(), "{devices:?}");
    let sn = d.storage_nodes().get(&node).await.expect("StorageNode");
    assert_eq!(sn.spec.worker_node, SPARE);
    let source = Api::<Node>::all(d.kube.clone())
        .get(WORKERS[1])
        .await
        .expect("the source worker");
    let labels = source.metadata.labels.unwrap_or_default();
    assert!(!labels.contains_key(ENROLLMENT_LABEL), "{labels:?}");

    let log = calls(&d.cp).await;
    for verb in ["restart", "promote"] {
        let on = format!("POST {NODE_ROUTE}/{verb}");
        exactly(&log[from..], &on, 1);
        all_on_node(&log[from..], &on, id);
    }
}

/// The node's volume moves off through a PersistentVolumeOps, then the control plane
/// removes the node; killed after every call of both.
async fn remove(d: &Deployment, seen: &Seen, cluster: Uuid, (node, id): (String, Uuid)) {
    let name = "crash-remove";
    // The control plane migrates only in an active cluster: the window and the move
    // before have settled.
    until("the cluster active", async || {
        let c = d.cp.get_cluster(cluster).await.ok()?;
        (c.status == ClusterStatus::Active).then_some(())
    })
    .await;
    let pool = d.cp.list_pools(cluster).await.expect("pools")[0].id;
    let mut create = VolumeCreate::new("crash-data", 1 << 30);
    create.host_id = Some(id.to_string());
    let volume =
        d.cp.create_volume(cluster, pool, &create)
            .await
            .expect("volume");
    let nqn =
        d.cp.get_volume(cluster, pool, volume)
            .await
            .expect("volume")
            .nqn;
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "crash-data"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "claimRef": {"namespace": d.ns, "name": "claim-data"},
                 "csi": {"driver": "csi.simplyblock.io",
                         "volumeHandle": format!("{cluster}:{pool}:{volume}")}},
    }))
    .expect("pv");
    Api::<PersistentVolume>::all(d.kube.clone())
        .create(&PostParams::default(), &pv)
        .await
        .expect("PersistentVolume");
    let from = calls(&d.cp).await.len();
    let ops: Api<StorageNodeOps> = Api::namespaced(d.kube.clone(), &d.ns);
    let op: StorageNodeOps = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNodeOps",
        "metadata": {"name": name},
        "spec": {"nodeRef": node, "action": "Remove"},
    }))
    .expect("op");
    // The first call of MigratingVolumes creates the move.
    let point = crash::ops_point("StorageNodeOps", "Remove", "MigratingVolumes");
    create_armed(d, &point, &ops, &op).await;
    let moves: Api<PersistentVolumeOps> = Api::all(d.kube.clone());
    let created = moves.list(&Default::default()).await.expect("moves").items;
    assert_eq!(created.len(), 1, "one move: {created:?}");
    let mv = created[0].metadata.name.clone().expect("name");
    let moved = Seen::record(moves.clone(), volume_ops_status);

    // Then each point once, armed in the order the calls come, so that no pass runs on
    // into the next call unarmed: the backend migration's create (a retry adopts it),
    // its continue (a call once), the node's removal (a retry finds it asked for). A
    // call made again shows in the counts below.
    for step in ["Validating", "Migrating"] {
        let point = crash::ops_point("PersistentVolumeOps", "Migrate", step);
        let fired = abort_at(d, &point, async || moved.ended(&mv).is_some()).await;
        assert!(fired, "{point} never fired: {:?}", moved.of(&mv));
    }
    let point = crash::ops_point("StorageNodeOps", "Remove", "Removing");
    let fired = abort_at(d, &point, async || seen.ended(name).is_some()).await;
    assert!(fired, "{point} never fired: {:?}", seen.of(name));

    finish_unarmed(d, &format!("{name} to finish"), async || {
        seen.ended(name).is_some()
    })
    .await;
    let done = ops.get(name).await.expect("op").status.expect("status");
    assert_eq!(done.phase, OpsPhase::Succeeded, "{:?}", done.message);
    assert_eq!(
        moved.ended(&mv),
        Some(OpsPhase::Succeeded),
        "{:?}",
        moved.of(&mv)
    );
    let left = moves.list(&Default::default()).await.expect("moves").items;
    assert!(left.is_empty(), "the finished move was deleted: {left:?}");
    let removed = d.cp.get_storage_node(cluster, id).await.expect("node");
    assert_eq!(removed.status, NodeStatus::Removed);
    let now_on =
        d.cp.get_volume(cluster, pool, volume)
            .await
            .expect("volume")
            .storage_node_id;
    assert_ne!(now_on, id, "the volume moved off the node");

    // One migration of the subsystem took effect: one create, one record, one continue.
    let log = calls(&d.cp).await;
    exactly(&log[from..], &format!("POST {MIGRATIONS}"), 1);
    let records =
        d.cp.list_migrations(cluster, &nqn)
            .await
            .expect("migrations");
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].target_node_id, now_on.to_string());
    exactly(
        &log[from..],
        &format!("POST {MIGRATIONS}{{migration_id}}/continue"),
        1,
    );
    let delete = format!("DELETE {NODE_ROUTE}/");
    exactly(&log[from..], &delete, 1);
    all_on_node(&log[from..], &delete, id);
}

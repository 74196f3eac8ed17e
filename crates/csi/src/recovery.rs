//! Path recovery on the node: two loops over the volumes staged here.
//!
//! - The **reconnect monitor** (every `--reconnect-interval`, 3 s): a volume that still
//!   has a live path, but lacks one the control plane publishes for it
//!   (`GET …/volumes/{v}/connect`), gets that path connected again. A volume left with no
//!   live path is not reconnected: on NVMe/TCP the kernel has given its namespace up and
//!   the filesystem over it is dead, which only a new stage mends. The monitor marks it
//!   broken instead.
//! - The **guardian** (every `--guardian-interval`, 5 min): the pods using a volume broken
//!   for `--path-loss-grace` (90 s) are deleted, so their controllers recreate them and the
//!   kubelet stages the volume anew, once the volume's cluster is active or degraded (a
//!   new stage of a suspended cluster's volume fails the same way). Only pods that opt in
//!   (label or annotation `simplyblock.io/auto-restart-on-pathloss: "true"`) and that a
//!   controller owns, each at most once per `--restart-backoff` (10 min); an Event on the
//!   pod says why. A pod none of whose volumes lost every path is never touched.
//!
//! Which pods use a volume comes from the stage record: NodePublishVolume records each
//! target, and the kubelet names targets after their pod's UID.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use simplyblock_controlplane::{ClusterStatus, ConnectEntry};
use tokio::sync::watch;
use uuid::Uuid;

use crate::attach::PathState;
use crate::handle::VolumeHandle;
use crate::node::NodeService;
use crate::record::{self, StageRecord};

/// The label (or annotation) by which a pod agrees to be restarted on path loss.
pub const OPT_IN: &str = "simplyblock.io/auto-restart-on-pathloss";
/// The reason of the Event on a restarted pod.
pub const RESTART_REASON: &str = "VolumePathsLost";
/// The longest wait between monitor passes while passes fail.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The loops' timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryConfig {
    pub reconnect_interval: Duration,
    pub guardian_interval: Duration,
    pub path_loss_grace: Duration,
    pub restart_backoff: Duration,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        Self {
            reconnect_interval: Duration::from_secs(3),
            guardian_interval: Duration::from_secs(300),
            path_loss_grace: Duration::from_secs(90),
            restart_backoff: Duration::from_secs(600),
        }
    }
}

/// The paths the control plane publishes that this node does not hold (pure).
pub fn missing_paths(published: &[ConnectEntry], held: &[PathState]) -> Vec<ConnectEntry> {
    published
        .iter()
        .filter(|e| !held.iter().any(|h| h.is(e)))
        .cloned()
        .collect()
}

/// The UID of the pod a publish target belongs to: the kubelet's targets are
/// `<kubelet>/pods/<uid>/volumes/…` for a filesystem and
/// `<kubelet>/plugins/kubernetes.io/csi/volumeDevices/publish/<pv>/<uid>` for a block
/// device.
pub fn pod_uid_of(target: &Path) -> Option<String> {
    let parts: Vec<String> = target
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(i) = parts.iter().position(|p| p == "volumeDevices")
        && parts.get(i + 1).is_some_and(|p| p == "publish")
        && parts.len() == i + 4
    {
        return parts.last().cloned();
    }
    let i = parts.iter().rposition(|p| p == "pods")?;
    parts.get(i + 2)?;
    parts.get(i + 1).cloned()
}

fn opted_in(pod: &Pod) -> bool {
    let m = &pod.metadata;
    [&m.labels, &m.annotations]
        .iter()
        .any(|map| map.as_ref().and_then(|x| x.get(OPT_IN)).map(String::as_str) == Some("true"))
}

fn controller_owned(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true))
}

/// Why a pod on a broken volume is left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keep {
    /// It does not carry the opt-in label or annotation.
    NotOptedIn,
    /// No controller owns it: deleted, it would not come back.
    Unowned,
    /// It is already being deleted.
    Terminating,
    /// It was restarted less than the backoff ago.
    RecentlyRestarted,
}

/// What the guardian does with one pod that uses a broken volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The broken volume (its CSI volume id).
    pub volume: String,
    pub keep: Option<Keep>,
}

/// Decide for each pod that uses a broken volume (pure). `broken` maps pod UIDs to the
/// broken volume they use; `restarted` holds when each pod was last restarted.
pub fn plan_restarts(
    pods: &[Pod],
    broken: &BTreeMap<String, String>,
    restarted: &HashMap<String, Instant>,
    now: Instant,
    backoff: Duration,
) -> Vec<Decision> {
    pods.iter()
        .filter_map(|p| {
            let uid = p.metadata.uid.clone()?;
            let volume = broken.get(&uid)?.clone();
            let keep = if p.metadata.deletion_timestamp.is_some() {
                Some(Keep::Terminating)
            } else if !opted_in(p) {
                Some(Keep::NotOptedIn)
            } else if !controller_owned(p) {
                Some(Keep::Unowned)
            } else if restarted
                .get(&uid)
                .is_some_and(|at| now.saturating_duration_since(*at) < backoff)
            {
                Some(Keep::RecentlyRestarted)
            } else {
                None
            };
            Some(Decision {
                namespace: p.metadata.namespace.clone().unwrap_or_default(),
                name: p.metadata.name.clone().unwrap_or_default(),
                uid,
                volume,
                keep,
            })
        })
        .collect()
}

/// The running loops, with a count of each one's finished passes (what a caller waits on
/// to know a pass has looked at the node since some change).
#[derive(Debug)]
pub struct Recovery {
    monitor_passes: watch::Receiver<u64>,
    guardian_passes: Option<watch::Receiver<u64>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Recovery {
    pub fn monitor_passes(&self) -> watch::Receiver<u64> {
        self.monitor_passes.clone()
    }

    /// None without Kubernetes, where the guardian does not run.
    pub fn guardian_passes(&self) -> Option<watch::Receiver<u64>> {
        self.guardian_passes.clone()
    }

    /// Start both loops for `node` (the guardian only with a Kubernetes client).
    pub fn start(node: Arc<NodeService>, kube: Option<kube::Client>, cfg: RecoveryConfig) -> Self {
        let broken: Broken = Arc::default();
        let (monitor_tx, monitor_passes) = watch::channel(0);
        let mut tasks = vec![tokio::spawn(monitor(
            node.clone(),
            broken.clone(),
            cfg,
            monitor_tx,
        ))];
        let guardian_passes = kube.map(|client| {
            let (tx, rx) = watch::channel(0);
            tasks.push(tokio::spawn(guardian(node, client, broken, cfg, tx)));
            rx
        });
        tracing::info!(
            reconnect_interval = ?cfg.reconnect_interval,
            guardian = guardian_passes.is_some(),
            guardian_interval = ?cfg.guardian_interval,
            path_loss_grace = ?cfg.path_loss_grace,
            restart_backoff = ?cfg.restart_backoff,
            "path recovery started"
        );
        Self {
            monitor_passes,
            guardian_passes,
            tasks,
        }
    }
}

impl Drop for Recovery {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Volumes (CSI volume ids) with no live path, and since when the monitor has seen so.
type Broken = Arc<Mutex<BTreeMap<String, Instant>>>;

fn broken_set(b: &Broken) -> std::sync::MutexGuard<'_, BTreeMap<String, Instant>> {
    b.lock().unwrap_or_else(|p| p.into_inner())
}

async fn monitor(
    node: Arc<NodeService>,
    broken: Broken,
    cfg: RecoveryConfig,
    passes: watch::Sender<u64>,
) {
    let mut wait = cfg.reconnect_interval;
    loop {
        tokio::time::sleep(wait).await;
        match monitor_pass(&node, &broken).await {
            Ok(()) => wait = cfg.reconnect_interval,
            Err(e) => {
                // A node that cannot read its own records is not helped by asking often.
                wait = (wait * 2).min(MAX_BACKOFF);
                tracing::error!(error = %e, retry_in = ?wait, "reconnect monitor pass failed");
            }
        }
        passes.send_modify(|n| *n += 1);
    }
}

async fn monitor_pass(node: &NodeService, broken: &Broken) -> crate::Result<()> {
    let records = record::all(&node.state_dir)?;
    let staged: BTreeSet<&str> = records.iter().map(|r| r.volume_id.as_str()).collect();
    broken_set(broken).retain(|v, _| staged.contains(v.as_str()));
    for rec in &records {
        if rec.device.is_none() {
            continue;
        }
        if let Err(e) = check_volume(node, broken, rec).await {
            tracing::warn!(volume = %rec.volume_id, error = %e, "reconnect monitor: volume not checked");
        }
    }
    Ok(())
}

/// One volume: reconnect what is missing while a path lives; mark it broken when none does.
async fn check_volume(node: &NodeService, broken: &Broken, rec: &StageRecord) -> crate::Result<()> {
    let h = VolumeHandle::parse(&rec.volume_id)?;
    let published = node.target(&h, &rec.volume_id).await?;
    // The lock keeps a stage or unstage of the volume from running meanwhile.
    let _g = node.locks.lock(&rec.volume_id).await;
    let Some(rec) = record::load(&node.state_dir, &rec.volume_id)? else {
        return Ok(());
    };
    if rec.device.is_none() {
        return Ok(());
    }
    if published.volume != rec.volume {
        // It failed over since it was staged: the next stage attaches the active end.
        return Ok(());
    }
    let mut target = node.target_of(&rec);
    target.paths = published.paths.clone();
    let held = node.attacher.paths(&target).await?;
    if !held.iter().any(|p| p.live) {
        let mut b = broken_set(broken);
        if !b.contains_key(&rec.volume_id) {
            tracing::warn!(volume = %rec.volume_id, "the volume lost every path; the pods using it are restarted when its cluster is active");
            b.insert(rec.volume_id.clone(), Instant::now());
        }
        return Ok(());
    }
    if broken_set(broken).remove(&rec.volume_id).is_some() {
        tracing::info!(volume = %rec.volume_id, "the volume has a live path again");
    }
    let missing = missing_paths(&published.paths, &held);
    if missing.is_empty() {
        return Ok(());
    }
    let addrs: Vec<String> = missing
        .iter()
        .map(|p| format!("{}:{}", p.ip, p.port))
        .collect();
    node.attacher.connect_paths(&target, &missing).await?;
    tracing::info!(volume = %rec.volume_id, paths = ?addrs, "reconnected the paths the control plane publishes");
    Ok(())
}

async fn guardian(
    node: Arc<NodeService>,
    client: kube::Client,
    broken: Broken,
    cfg: RecoveryConfig,
    passes: watch::Sender<u64>,
) {
    let mut restarted: HashMap<String, Instant> = HashMap::new();
    loop {
        tokio::time::sleep(cfg.guardian_interval).await;
        if let Err(e) = guardian_pass(&node, &client, &broken, cfg, &mut restarted).await {
            tracing::error!(error = %e, "guardian pass failed");
        }
        passes.send_modify(|n| *n += 1);
    }
}

async fn guardian_pass(
    node: &NodeService,
    client: &kube::Client,
    broken: &Broken,
    cfg: RecoveryConfig,
    restarted: &mut HashMap<String, Instant>,
) -> anyhow::Result<()> {
    let now = Instant::now();
    restarted.retain(|_, at| now.saturating_duration_since(*at) < cfg.restart_backoff);
    let due: Vec<String> = broken_set(broken)
        .iter()
        .filter(|(_, since)| now.saturating_duration_since(**since) >= cfg.path_loss_grace)
        .map(|(v, _)| v.clone())
        .collect();
    if due.is_empty() {
        return Ok(());
    }
    // Pod UID -> a broken volume it uses, over the volumes whose cluster serves again
    // and that still have no live path now.
    let mut by_pod: BTreeMap<String, String> = BTreeMap::new();
    let mut cluster_ready: HashMap<Uuid, bool> = HashMap::new();
    for volume_id in due {
        let Some(rec) = record::load(&node.state_dir, &volume_id)? else {
            continue;
        };
        let ready = match cluster_ready.get(&rec.cluster) {
            Some(r) => *r,
            None => {
                let r = cluster_serves(node, rec.cluster).await;
                cluster_ready.insert(rec.cluster, r);
                r
            }
        };
        if !ready {
            tracing::info!(volume = %volume_id, cluster = %rec.cluster, "the volume lost every path; its pods wait for the cluster to be active");
            continue;
        }
        let held = node.attacher.paths(&node.target_of(&rec)).await?;
        if held.iter().any(|p| p.live) {
            continue;
        }
        for t in &rec.published {
            if let Some(uid) = pod_uid_of(t) {
                by_pod.insert(uid, volume_id.clone());
            }
        }
    }
    if by_pod.is_empty() {
        return Ok(());
    }
    let pods: Api<Pod> = Api::all(client.clone());
    let on_node = pods
        .list(&ListParams::default().fields(&format!(
            "spec.nodeName={},status.phase=Running",
            node.node_id
        )))
        .await?;
    for d in plan_restarts(&on_node.items, &by_pod, restarted, now, cfg.restart_backoff) {
        match &d.keep {
            Some(why) => {
                tracing::warn!(pod = %format!("{}/{}", d.namespace, d.name), volume = %d.volume, reason = ?why, "a pod's volume lost every path; the pod is left running");
            }
            None => {
                restart(client, node, &d).await?;
                restarted.insert(d.uid.clone(), now);
            }
        }
    }
    Ok(())
}

/// Whether the cluster serves volumes again (active or degraded), as a new stage needs.
async fn cluster_serves(node: &NodeService, cluster: Uuid) -> bool {
    let Ok(c) = node.clusters.client(cluster) else {
        return false;
    };
    match c.get_cluster(cluster).await {
        Ok(c) => matches!(c.status, ClusterStatus::Active | ClusterStatus::Degraded),
        Err(e) => {
            tracing::warn!(%cluster, error = %e, "cluster status unknown; treated as not active");
            false
        }
    }
}

/// Say why on the pod, then delete it (only that very pod: the UID is a precondition).
async fn restart(client: &kube::Client, node: &NodeService, d: &Decision) -> anyhow::Result<()> {
    let pod_name = format!("{}/{}", d.namespace, d.name);
    tracing::warn!(pod = %pod_name, volume = %d.volume, "restarting a pod whose volume lost every path");
    let now = Time(jiff::Timestamp::now());
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", d.name)),
            namespace: Some(d.namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(d.namespace.clone()),
            name: Some(d.name.clone()),
            uid: Some(d.uid.clone()),
            ..ObjectReference::default()
        },
        reason: Some(RESTART_REASON.into()),
        message: Some(format!(
            "volume {} lost every path to its storage cluster on node {}; the pod is deleted so \
             its controller recreates it and the volume is attached anew",
            d.volume, node.node_id
        )),
        type_: Some("Warning".into()),
        count: Some(1),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        source: Some(k8s_openapi::api::core::v1::EventSource {
            component: Some("simplyblock-csi-node".into()),
            host: Some(node.node_id.clone()),
        }),
        reporting_component: Some("simplyblock-csi-node".into()),
        reporting_instance: Some(node.node_id.clone()),
        ..Event::default()
    };
    let events: Api<Event> = Api::namespaced(client.clone(), &d.namespace);
    if let Err(e) = events.create(&PostParams::default(), &event).await {
        // The restart matters more than its record.
        tracing::warn!(pod = %pod_name, error = %e, "the restart's Event was not recorded");
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &d.namespace);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(d.uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match pods.delete(&d.name, &params).await {
        Ok(_) => Ok(()),
        // Gone already, or replaced by a pod of the same name: nothing of ours to restart.
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use std::path::PathBuf;

    fn entry(ip: &str, port: u16) -> ConnectEntry {
        ConnectEntry {
            ip: ip.into(),
            port,
            ..ConnectEntry::default()
        }
    }

    fn held(ip: &str, port: u16, live: bool) -> PathState {
        PathState {
            ip: ip.into(),
            port,
            live,
        }
    }

    #[test]
    fn only_paths_not_held_are_missing() {
        let published = [entry("10.0.0.1", 4420), entry("10.0.0.2", 4420)];
        assert_eq!(
            missing_paths(&published, &[held("10.0.0.1", 4420, true)]),
            vec![entry("10.0.0.2", 4420)]
        );
        // A path the kernel is reconnecting is held: connecting it again would add a
        // second controller for the same address.
        assert!(
            missing_paths(
                &published,
                &[held("10.0.0.1", 4420, true), held("10.0.0.2", 4420, false)]
            )
            .is_empty()
        );
        // Same address, another port: another path.
        assert_eq!(
            missing_paths(&published, &[held("10.0.0.1", 4421, true)]).len(),
            2
        );
    }

    #[test]
    fn pods_are_found_from_their_publish_targets() {
        let uid = "0b4d2c7e-6a59-4f0e-9d3f-2f1b0c9a8e71";
        let fs = PathBuf::from(format!(
            "/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~csi/pvc-1/mount"
        ));
        assert_eq!(pod_uid_of(&fs).as_deref(), Some(uid));
        let block = PathBuf::from(format!(
            "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pvc-1/{uid}"
        ));
        assert_eq!(pod_uid_of(&block).as_deref(), Some(uid));
        assert_eq!(pod_uid_of(Path::new("/mnt/somewhere")), None);
        assert_eq!(pod_uid_of(Path::new("/var/lib/kubelet/pods")), None);
    }

    fn pod(uid: &str, labels: &[(&str, &str)], owned: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("pod-{uid}")),
                namespace: Some("apps".into()),
                uid: Some(uid.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).into(), (*v).into()))
                        .collect(),
                ),
                owner_references: owned.then(|| {
                    vec![OwnerReference {
                        api_version: "apps/v1".into(),
                        kind: "ReplicaSet".into(),
                        name: "rs".into(),
                        uid: "rs-uid".into(),
                        controller: Some(true),
                        ..OwnerReference::default()
                    }]
                }),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    #[test]
    fn only_opted_in_owned_pods_on_broken_volumes_are_restarted_once_per_backoff() {
        let opt = [(OPT_IN, "true")];
        let pods = vec![
            pod("a", &opt, true),
            pod("b", &opt, true),
            pod("c", &[], true),
            pod("d", &opt, false),
            pod("e", &opt, true),
            pod("f", &[(OPT_IN, "yes")], true),
        ];
        let broken: BTreeMap<String, String> = ["a", "c", "d", "e", "f"]
            .iter()
            .map(|u| ((*u).to_owned(), "vol".to_owned()))
            .collect();
        let now = Instant::now();
        let restarted = HashMap::from([("e".to_owned(), now)]);
        let d = plan_restarts(&pods, &broken, &restarted, now, Duration::from_secs(600));
        let got: Vec<(&str, Option<Keep>)> =
            d.iter().map(|d| (d.uid.as_str(), d.keep.clone())).collect();
        assert_eq!(
            got,
            vec![
                ("a", None),
                ("c", Some(Keep::NotOptedIn)),
                ("d", Some(Keep::Unowned)),
                ("e", Some(Keep::RecentlyRestarted)),
                ("f", Some(Keep::NotOptedIn)),
            ],
            "b uses no broken volume and is not considered at all"
        );
        // After the backoff, e may be restarted again.
        let later = now + Duration::from_secs(601);
        let d = plan_restarts(&pods, &broken, &restarted, later, Duration::from_secs(600));
        assert!(d.iter().any(|d| d.uid == "e" && d.keep.is_none()));
        // A pod being deleted is left to finish.
        let mut terminating = pod("a", &opt, true);
        terminating.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
        let d = plan_restarts(
            &[terminating],
            &broken,
            &HashMap::new(),
            now,
            Duration::ZERO,
        );
        assert_eq!(d[0].keep, Some(Keep::Terminating));
    }
}

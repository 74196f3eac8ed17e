//! StorageNodeOps Remove: drain the node of its volumes, then have the control plane
//! remove it.
//!
//! | step | does | done when |
//! |---|---|---|
//! | Validating | classifies the node's volumes: a PersistentVolume's moves, a pinned claim's or one without a PersistentVolume blocks (`DrainBlocked`), a system volume (named by `spec.remove.systemVolumeFilterRegex`, in the node's cluster, on the node, made for no claim) is deleted later | nothing blocks; `drain.volumesTotal` written |
//! | ShuttingDown | nothing: the control plane shuts the node down itself as the first act of its removal, and removes only an online or suspended node (`RemovalDeferred` otherwise) | the node is online or suspended |
//! | MigratingDevices | nothing: the removal moves the devices' data; `drain.devicesTotal` written | at once |
//! | MigratingVolumes | one PersistentVolumeOps per NVMe-oF subsystem still on the node, targets round-robin over online peers that hold no replica of it, a failed target ruled out (`NoMigrationTarget` when none is left) | no volume to move is left on the node |
//! | Verifying | deletes the remaining system volumes | the node holds no volume |
//! | Removing | the control plane's removal (DELETE), deferred while a peer is not online (`RemovalDeferred`) | the node has left online and suspended |
//! | AwaitingRemoval | nothing; `status.removal` follows the node and its devices | the node is removed, or the control plane no longer knows it |
//!
//! The served control plane (sbcli) removes a node in one call that shuts it down, moves
//! its devices' data and marks it removed, and refuses it while the node holds volumes; so
//! the volumes move first, from a serving node, and the shutdown is the removal's own.
//!
//! A node the control plane no longer knows (or that it never had) is removed already: the
//! operation succeeds at whatever step finds that, without a call. The answer comes from
//! the control plane, never from a cache.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Resource, ResourceExt};
use regex::Regex;
use serde_json::json;
use simplyblock_api::StorageNode;
use simplyblock_api::common::OpsPhase;
use simplyblock_api::keys::{MANAGED_BY_LABEL, MANAGED_BY_STORAGE_NODE_OPS};
use simplyblock_api::persistent_volume_ops::{
    CreatorReference, MigrateVolumeSpec, PersistentVolumeOps, PersistentVolumeOpsSpec,
    StorageNodeReference, VolumeAction,
};
use simplyblock_api::storage_node_ops::{
    DEFAULT_SYSTEM_VOLUME_FILTER, DrainStatus, NodeOpsStep, RemovalStatus, StorageNodeOps,
};
use simplyblock_controlplane::{
    Device, NodeRemoveOptions, NodeStatus, StorageNode as CpNode, TaskStatus,
};
use simplyblock_controlplane::{Uuid, Volume};

use super::step::{At, Fields, advance, call, succeed, wait};
use super::system_filter;
use crate::runtime::context::Context;
use crate::runtime::ops::{self, Note, Noted, Plan};

/// A claim with this annotation is pinned to its storage node: its volume cannot move.
pub const PIN_ANNOTATION: &str = "storage.simplyblock.io/selected-storage-node";
/// The label on a failed move naming the StorageNode it failed to reach (ruled out).
pub const TARGET_NODE_LABEL: &str = "storage.simplyblock.io/target-node";
/// The CSI driver whose PersistentVolumes the operator moves.
pub const CSI_DRIVER: &str = "csi.simplyblock.io";

/// How often a blocked drain, a deferred removal, or a move looks again.
const BLOCKED_RECHECK: Duration = Duration::from_secs(30);
const DEFERRED_RECHECK: Duration = Duration::from_secs(60);
const MOVE_RECHECK: Duration = Duration::from_secs(2);

pub mod reason {
    pub const DRAIN_BLOCKED: &str = "DrainBlocked";
    pub const NO_MIGRATION_TARGET: &str = "NoMigrationTarget";
    pub const MIGRATION_RETRIED: &str = "MigrationRetried";
    pub const REMOVAL_DEFERRED: &str = "RemovalDeferred";
    pub const DRAIN_COMPLETED: &str = "DrainCompleted";
}

/// A PersistentVolume of the simplyblock driver, as the drain needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The PersistentVolume's name.
    pub pv: String,
    /// The control plane's volume behind it (the last part of its handle).
    pub volume: Uuid,
    /// Its claim pins it to its storage node.
    pub pinned: bool,
}

/// A StorageNode of the same namespace with a control-plane node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub uuid: Uuid,
}

/// A move this operation created, as the drain tracks it.
#[derive(Clone, Debug, PartialEq)]
pub struct Move {
    pub name: String,
    pub pv: String,
    pub target: String,
    pub phase: OpsPhase,
    /// Its target was ruled out (label written on failure).
    pub ruled_out: bool,
}

/// What Remove reads beside the node (each step reads only what it decides from).
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The volumes the node serves (its primary), across the cluster's pools.
    pub volumes: Vec<Volume>,
    /// The PersistentVolumes of the simplyblock driver.
    pub claimed: Vec<Claimed>,
    /// Every node of the cluster, as the control plane reports them.
    pub peers: Vec<CpNode>,
    /// StorageNodes of the namespace with a control-plane id.
    pub members: Vec<Member>,
    /// The moves this operation created.
    pub moves: Vec<Move>,
    /// The node's devices.
    pub devices: Vec<Device>,
    /// The control plane has an open removal task for the node: the removal was asked for.
    pub removal_open: bool,
}

/// The calls Remove makes.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    /// Create a PersistentVolumeOps that moves `pv` (and its subsystem) to `target`.
    CreateMove {
        name: String,
        pv: String,
        target: String,
    },
    /// Delete a finished move.
    DeleteMove(String),
    /// Mark a failed move's target as ruled out.
    RuleOut { name: String, target: String },
    /// Delete a system volume.
    DeleteVolume {
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
    },
    /// The control plane's removal of the node.
    RemoveNode { cluster: Uuid, node: Uuid },
}

/// How a volume on the node is drained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// A PersistentVolume's: moved with a PersistentVolumeOps.
    Move,
    /// A pinned claim's: blocks the drain.
    Pinned,
    /// The system's own (a benchmark volume): deleted.
    System,
    /// No PersistentVolume, and not the system's own: blocks the drain (nobody could say
    /// where it may go).
    Unmanaged,
}

/// The volumes the drain may delete. The control plane marks no volume as the system's
/// own: the cluster id, the primary node and the claim name (which the CSI driver gives
/// every volume it makes, for whichever Kubernetes cluster) are all it says of whose a
/// volume is, so a system volume is one named by the filter, in the node's cluster, on the
/// node, made for no claim. On a control plane shared with other clusters, or with another
/// Kubernetes cluster whose PersistentVolumes are not visible here, the rest is theirs.
#[derive(Clone, Debug)]
pub struct SystemVolumes {
    /// `spec.remove.systemVolumeFilterRegex`, as [`system_filter::compile`] admits it.
    pub filter: Regex,
    /// The control-plane cluster of the node being removed.
    pub cluster: Uuid,
    /// The control-plane node being removed.
    pub node: Uuid,
}

impl SystemVolumes {
    /// The operation's filter, checked as the webhook checks it (an operation admitted
    /// before the check, or past it, fails here rather than deleting what it names).
    pub fn of(op: &StorageNodeOps, cluster: Uuid, node: Uuid) -> Result<SystemVolumes, String> {
        let pattern = op
            .spec
            .remove
            .as_ref()
            .map(|r| r.system_volume_filter_regex.as_str())
            .unwrap_or(DEFAULT_SYSTEM_VOLUME_FILTER);
        let filter = system_filter::compile(pattern)
            .map_err(|e| format!("{e}; nothing was deleted: create the operation again"))?;
        Ok(SystemVolumes {
            filter,
            cluster,
            node,
        })
    }

    /// Whether `volume` is the system's own on the node being removed. Pure.
    pub fn owns(&self, volume: &Volume) -> bool {
        volume.cluster_id == self.cluster
            && volume.storage_node_id == self.node
            && volume.pvc_name.is_empty()
            && self.filter.is_match(&volume.name)
    }
}

/// How `volume` is drained. Pure.
pub fn classify(volume: &Volume, claimed: &[Claimed], system: &SystemVolumes) -> Class {
    match claimed.iter().find(|c| c.volume == volume.id) {
        Some(c) if c.pinned => Class::Pinned,
        Some(_) => Class::Move,
        None if system.owns(volume) => Class::System,
        None => Class::Unmanaged,
    }
}

/// Why a volume with no PersistentVolume here blocks the drain, from what the control
/// plane says of it.
fn unmanaged(volume: &Volume, system: &SystemVolumes) -> String {
    let name = &volume.name;
    if volume.cluster_id != system.cluster || volume.storage_node_id != system.node {
        format!(
            "{name} (the control plane puts it in cluster {} on node {}: not this node's to delete or move)",
            volume.cluster_id, volume.storage_node_id
        )
    } else if !volume.pvc_name.is_empty() {
        format!(
            "{name} (made for claim {}, but no PersistentVolume here names it)",
            volume.pvc_name
        )
    } else {
        format!("{name} (no PersistentVolume names it)")
    }
}

pub async fn observe(at: At<'_>, ctx: &Context) -> Result<Observed, ops::Error> {
    let (op, node, step, seen) = (at.op, at.node, at.step, at.seen);
    use NodeOpsStep::*;
    let mut obs = Observed::default();
    let (Some(cluster), Some(id), Some(_)) = (seen.cluster, seen.node, seen.found.as_ref()) else {
        return Ok(obs);
    };
    let cp = ctx.control_plane()?;
    if matches!(step, Validating | MigratingVolumes | Verifying) {
        for pool in cp.list_pools(cluster).await? {
            obs.volumes.extend(
                cp.list_volumes(cluster, pool.id)
                    .await?
                    .into_iter()
                    .filter(|v| v.storage_node_id == id),
            );
        }
        obs.claimed = claimed(ctx).await?;
        if step == Validating
            && let Ok(system) = SystemVolumes::of(op, cluster, id)
        {
            let blocked = obs
                .volumes
                .iter()
                .filter(|v| {
                    matches!(
                        classify(v, &obs.claimed, &system),
                        Class::Pinned | Class::Unmanaged
                    )
                })
                .count();
            ctx.metrics
                .set(DRAIN_BLOCKED, labels(&node.name_any()), blocked as f64);
        }
    }
    if matches!(step, MigratingVolumes | Removing) {
        obs.peers = cp.list_storage_nodes(cluster).await?;
    }
    if step == Removing {
        obs.removal_open = cp.list_tasks(cluster).await?.iter().any(|t| {
            t.function_name == "node_removal"
                && t.storage_node_id == Some(id)
                && t.status != TaskStatus::Done
        });
    }
    if step == MigratingVolumes {
        let namespace = node.namespace().unwrap_or_default();
        let nodes: Api<StorageNode> = Api::namespaced(ctx.kube.clone(), &namespace);
        obs.members = nodes
            .list(&ListParams::default())
            .await?
            .into_iter()
            .filter(|n| n.spec.cluster_ref == node.spec.cluster_ref)
            .filter_map(|n| {
                let uuid = n.status.as_ref()?.uuid.as_ref()?.parse().ok()?;
                Some(Member {
                    name: n.name_any(),
                    uuid,
                })
            })
            .collect();
        obs.moves = moves(op, ctx).await?;
    }
    if matches!(step, MigratingDevices | AwaitingRemoval) {
        obs.devices = match cp.list_devices(cluster, id).await {
            Ok(d) => d,
            Err(e) if e.is_not_found() => Vec::new(),
            Err(e) => return Err(e.into()),
        };
    }
    Ok(obs)
}

/// Volumes a drain cannot move, per StorageNode; the series goes with the StorageNode.
pub const DRAIN_BLOCKED: &str = "simplyblock_storagenode_drain_blocked_volumes_count";

/// The labels of the drain's metrics: the StorageNode drained.
pub fn labels(node: &str) -> Vec<(&'static str, String)> {
    vec![("node", node.to_owned())]
}

/// The drain's counters once its status was written: the volumes moved since the last
/// write.
pub fn kind_status_written(ctx: &Context, op: &StorageNodeOps, kind: &Fields) {
    let before = drain_of(op).volumes_migrated;
    let after = kind.drain.as_ref().map_or(0, |d| d.volumes_migrated);
    if after > before {
        ctx.metrics.add(
            "simplyblock_storagenode_drain_volumes_migrated_total",
            labels(&op.spec.node_ref),
            f64::from(after - before),
        );
    }
}

/// The simplyblock PersistentVolumes and whether their claims are pinned.
async fn claimed(ctx: &Context) -> Result<Vec<Claimed>, ops::Error> {
    let pvs: Api<PersistentVolume> = Api::all(ctx.kube.clone());
    let mut out = Vec::new();
    for pv in pvs.list(&ListParams::default()).await? {
        let Some(csi) = pv.spec.as_ref().and_then(|s| s.csi.as_ref()) else {
            continue;
        };
        if csi.driver != CSI_DRIVER {
            continue;
        }
        let Some(volume) = handle_volume(&csi.volume_handle) else {
            continue;
        };
        let mut pinned = false;
        if let Some(claim) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref())
            && let (Some(ns), Some(name)) = (&claim.namespace, &claim.name)
        {
            let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.kube.clone(), ns);
            pinned = pvcs
                .get_opt(name)
                .await?
                .is_some_and(|c| c.annotations().contains_key(PIN_ANNOTATION));
        }
        out.push(Claimed {
            pv: pv.name_any(),
            volume,
            pinned,
        });
    }
    Ok(out)
}

/// The volume of a CSI handle `<cluster>:<pool>:<volume>`.
pub fn handle_volume(handle: &str) -> Option<Uuid> {
    simplyblock_api::volume_handle::VolumeHandle::parse(handle)
        .ok()
        .map(|h| h.volume)
}

/// The moves `op` created: its label, and its UID in `spec.creatorRef`.
async fn moves(op: &StorageNodeOps, ctx: &Context) -> Result<Vec<Move>, ops::Error> {
    let api: Api<PersistentVolumeOps> = Api::all(ctx.kube.clone());
    let uid = op.uid().unwrap_or_default();
    let selector = format!("{MANAGED_BY_LABEL}={MANAGED_BY_STORAGE_NODE_OPS}");
    Ok(api
        .list(&ListParams::default().labels(&selector))
        .await?
        .into_iter()
        .filter(|m| m.spec.creator_ref.as_ref().is_some_and(|c| c.uid == uid))
        .map(|m| Move {
            name: m.name_any(),
            pv: m.spec.persistent_volume_name.clone(),
            target: m
                .spec
                .migrate
                .as_ref()
                .map(|t| t.target_node_ref.name.clone())
                .unwrap_or_default(),
            phase: m.status.as_ref().map(|s| s.phase).unwrap_or_default(),
            ruled_out: m.labels().contains_key(TARGET_NODE_LABEL),
        })
        .collect())
}

/// The kind's status with `drain` and `removal` as given (the write replaces both).
fn kind(drain: Option<DrainStatus>, removal: Option<RemovalStatus>) -> Fields {
    Fields { drain, removal }
}

fn drain_of(op: &StorageNodeOps) -> DrainStatus {
    op.status
        .as_ref()
        .and_then(|s| s.drain.clone())
        .unwrap_or_default()
}

fn removal_of(op: &StorageNodeOps) -> Option<RemovalStatus> {
    op.status.as_ref().and_then(|s| s.removal.clone())
}

fn noted(
    plan: Plan<NodeOpsStep, Call, Fields>,
    warning: bool,
    reason: &'static str,
) -> Noted<NodeOpsStep, Call, Fields> {
    let message = match &plan {
        Plan::Wait { message, .. } | Plan::Advance { message, .. } => message.clone(),
        _ => String::new(),
    };
    Noted {
        plan,
        notes: vec![Note {
            warning,
            reason,
            message,
        }],
    }
}

fn hold(message: String, after: Duration, reason: &'static str) -> Plan<NodeOpsStep, Call, Fields> {
    Plan::Wait {
        message,
        after,
        event: Some(reason),
    }
}

/// The next thing Remove does, from one observation. Pure.
pub fn plan(at: At<'_>, obs: &Observed, now: Timestamp) -> Noted<NodeOpsStep, Call, Fields> {
    let (op, node, step, seen) = (at.op, at.node, at.step, at.seen);
    use NodeOpsStep::*;
    let name = node.name_any();
    let Some(id) = seen.node else {
        return succeed(format!(
            "StorageNode {name} has no control-plane node: there is nothing to remove"
        ))
        .into();
    };
    let Some(cluster) = seen.cluster else {
        return wait(format!(
            "the cluster of StorageNode {name} has no control-plane id; waiting for it"
        ))
        .into();
    };
    let Some(found) = &seen.found else {
        return succeed(format!(
            "the control plane no longer knows node {id}: it is removed"
        ))
        .into();
    };
    if found.status == NodeStatus::Removed {
        let message = format!("node {id} is removed");
        if !matches!(step, Removing | AwaitingRemoval) {
            return succeed(message).into();
        }
        // The removal this operation asked for: its last state stays on the record.
        let removal = RemovalStatus {
            node_status: Some(NodeStatus::Removed.to_string()),
            devices: device_statuses(&name, &obs.devices),
            last_progress_time: Some(Time(now)),
            ..removal_of(op).unwrap_or_default()
        };
        return Plan::Succeed {
            message,
            kind_status: Some(kind(Some(drain_of(op)), Some(removal))),
        }
        .into();
    }
    let status = found.status;
    match step {
        Validating => {
            let system = match SystemVolumes::of(op, cluster, id) {
                Ok(s) => s,
                Err(e) => return Plan::Fail(e).into(),
            };
            let mut blocked = Vec::new();
            let mut moving = 0;
            for v in &obs.volumes {
                match classify(v, &obs.claimed, &system) {
                    Class::Move => moving += 1,
                    Class::System => {}
                    Class::Pinned => blocked.push(format!(
                        "{} (its claim is pinned with {PIN_ANNOTATION})",
                        v.name
                    )),
                    Class::Unmanaged => blocked.push(unmanaged(v, &system)),
                }
            }
            if !blocked.is_empty() {
                blocked.sort();
                let message = format!(
                    "the drain is blocked by {} volume(s) that cannot be moved: {}; remove the pin annotation from the claim, or move or delete the volume, and the drain goes on (or set spec.abort)",
                    blocked.len(),
                    blocked.join(", ")
                );
                return hold(message, BLOCKED_RECHECK, reason::DRAIN_BLOCKED).into();
            }
            Plan::Advance {
                to: ops::Move::To(ShuttingDown),
                message: format!("{moving} volume(s) to move off the node"),
                kind_status: Some(kind(
                    Some(DrainStatus {
                        volumes_total: moving,
                        volumes_migrated: 0,
                        devices_total: None,
                    }),
                    removal_of(op),
                )),
            }
            .into()
        }
        ShuttingDown => {
            if matches!(status, NodeStatus::Online | NodeStatus::Suspended) {
                advance(
                    MigratingDevices,
                    format!(
                        "the node is {status}; the control plane shuts it down itself when it removes it"
                    ),
                )
                .into()
            } else {
                hold(
                    format!(
                        "the node is {status}; the control plane removes only an online or suspended node — restart it (StorageNodeOps Restart) and the removal goes on"
                    ),
                    DEFERRED_RECHECK,
                    reason::REMOVAL_DEFERRED,
                )
                .into()
            }
        }
        MigratingDevices => {
            let mut drain = drain_of(op);
            drain.devices_total = Some(obs.devices.len() as i32);
            Plan::Advance {
                to: ops::Move::To(MigratingVolumes),
                message: format!(
                    "the control plane moves the data of the node's {} device(s) as part of its removal",
                    obs.devices.len()
                ),
                kind_status: Some(kind(Some(drain), removal_of(op))),
            }
            .into()
        }
        MigratingVolumes => migrating_volumes(op, id, obs),
        Verifying => {
            let system = match SystemVolumes::of(op, cluster, id) {
                Ok(s) => s,
                Err(e) => return Plan::Fail(e).into(),
            };
            let mut rest = Vec::new();
            for v in &obs.volumes {
                if classify(v, &obs.claimed, &system) == Class::System {
                    let Ok(pool) = v.pool_uuid.parse() else {
                        return Plan::Fail(format!(
                            "system volume {} has no pool id the control plane gave; delete it by hand and create the operation again",
                            v.name
                        ))
                        .into();
                    };
                    return call(
                        Call::DeleteVolume {
                            cluster,
                            pool,
                            volume: v.id,
                        },
                        format!("deleting system volume {}", v.name),
                    )
                    .into();
                }
                rest.push(v.name.clone());
            }
            if !rest.is_empty() {
                rest.sort();
                return hold(
                    format!(
                        "volume(s) {} arrived on the node after it was drained; move or delete them and the removal goes on",
                        rest.join(", ")
                    ),
                    BLOCKED_RECHECK,
                    reason::DRAIN_BLOCKED,
                )
                .into();
            }
            noted(
                advance(Removing, "the node holds no volume; removing it"),
                false,
                reason::DRAIN_COMPLETED,
            )
        }
        Removing => {
            // Asked already (a pass that died after the call): the task is its record.
            if obs.removal_open || !matches!(status, NodeStatus::Online | NodeStatus::Suspended) {
                return advance(
                    AwaitingRemoval,
                    format!("the control plane is removing the node (it is {status})"),
                )
                .into();
            }
            let mut waiting: Vec<String> = obs
                .peers
                .iter()
                .filter(|p| p.id != id)
                .filter(|p| !matches!(p.status, NodeStatus::Online | NodeStatus::Removed))
                .map(|p| format!("{} is {}", p.id, p.status))
                .collect();
            if !waiting.is_empty() {
                waiting.sort();
                return hold(
                    format!(
                        "the removal waits: the control plane removes a node only while every other node is online ({})",
                        waiting.join(", ")
                    ),
                    DEFERRED_RECHECK,
                    reason::REMOVAL_DEFERRED,
                )
                .into();
            }
            call(
                Call::RemoveNode { cluster, node: id },
                format!("asking the control plane to remove node {id}"),
            )
            .into()
        }
        AwaitingRemoval => {
            let devices = device_statuses(&name, &obs.devices);
            let before = removal_of(op).unwrap_or_default();
            let node_status = Some(status.to_string());
            if before.node_status != node_status || before.devices != devices {
                let removal = RemovalStatus {
                    node_status,
                    devices,
                    last_progress_time: Some(Time(now)),
                    ..before
                };
                // Any change is progress: the step's budget starts again.
                return Plan::Progress {
                    kind_status: kind(Some(drain_of(op)), Some(removal)),
                    message: format!("the control plane is removing the node (it is {status})"),
                }
                .into();
            }
            wait(format!(
                "the control plane is removing the node (it is {status})"
            ))
            .into()
        }
        other => Plan::Fail(format!("step {other:?} is not one of action Remove")).into(),
    }
}

/// Each device's status by its StorageDevice name (`<node>-<first 8 of its id>`).
fn device_statuses(node: &str, devices: &[Device]) -> BTreeMap<String, String> {
    devices
        .iter()
        .map(|d| {
            let short: String = d.id.to_string().chars().take(8).collect();
            (format!("{node}-{short}"), d.status.to_string())
        })
        .collect()
}

/// MigratingVolumes: one move per subsystem still on the node, one call per pass.
fn migrating_volumes(
    op: &StorageNodeOps,
    id: Uuid,
    obs: &Observed,
) -> Noted<NodeOpsStep, Call, Fields> {
    let total = drain_of(op).volumes_total;
    let movable: Vec<&Volume> = obs
        .volumes
        .iter()
        .filter(|v| obs.claimed.iter().any(|c| c.volume == v.id && !c.pinned))
        .collect();
    let migrated = (total - movable.len() as i32).max(0);
    let drain = DrainStatus {
        volumes_migrated: migrated,
        ..drain_of(op)
    };
    // The counter first, from the volumes still there: it survives any crash. A volume
    // moved is progress: the step's budget starts again.
    if drain != drain_of(op) {
        return Plan::Progress {
            kind_status: kind(Some(drain), removal_of(op)),
            message: format!("{migrated} of {total} volume(s) moved off the node"),
        }
        .into();
    }
    // Finished moves go (Succeeded, Aborted); a failed one stays, its target ruled out.
    for m in &obs.moves {
        match m.phase {
            OpsPhase::Succeeded | OpsPhase::Aborted => {
                return call(
                    Call::DeleteMove(m.name.clone()),
                    format!("move {} ended {:?}; deleting it", m.name, m.phase),
                )
                .into();
            }
            OpsPhase::Failed if !m.ruled_out => {
                return noted(
                    call(
                        Call::RuleOut {
                            name: m.name.clone(),
                            target: m.target.clone(),
                        },
                        format!(
                            "move {} to {} failed; that target is ruled out and the volume moves elsewhere",
                            m.name, m.target
                        ),
                    ),
                    true,
                    reason::MIGRATION_RETRIED,
                );
            }
            _ => {}
        }
    }
    if movable.is_empty() {
        let message = format!("{total} volume(s) moved off the node");
        // The control plane shows a volume on its target before its move has verified
        // it: a move still running finishes first, since deleting it would abort it.
        if let Some(m) = obs
            .moves
            .iter()
            .find(|m| matches!(m.phase, OpsPhase::Pending | OpsPhase::Running))
        {
            return wait_after(
                format!("{message}; waiting for move {} to finish", m.name),
                MOVE_RECHECK,
            )
            .into();
        }
        // Failed moves were kept for the record until the step ended.
        if let Some(m) = obs.moves.first() {
            return call(
                Call::DeleteMove(m.name.clone()),
                format!("{message}; deleting move {}", m.name),
            )
            .into();
        }
        return advance(NodeOpsStep::Verifying, message).into();
    }
    // Subsystems in name order, each named after its first PersistentVolume.
    let mut subsystems: BTreeMap<&str, Vec<&Volume>> = BTreeMap::new();
    for v in &movable {
        subsystems.entry(v.nqn.as_str()).or_default().push(v);
    }
    let pv_of = |v: &Volume| {
        obs.claimed
            .iter()
            .find(|c| c.volume == v.id)
            .map(|c| c.pv.clone())
            .unwrap_or_default()
    };
    let mut order: Vec<(String, Vec<&Volume>)> = subsystems
        .into_values()
        .map(|vols| {
            let first = vols.iter().map(|v| pv_of(v)).min().unwrap_or_default();
            (first, vols)
        })
        .collect();
    order.sort_by(|a, b| a.0.cmp(&b.0));
    let mut waiting = Vec::new();
    for (index, (first, vols)) in order.iter().enumerate() {
        let pvs: BTreeSet<String> = vols.iter().map(|v| pv_of(v)).collect();
        let mine: Vec<&Move> = obs.moves.iter().filter(|m| pvs.contains(&m.pv)).collect();
        if mine
            .iter()
            .any(|m| matches!(m.phase, OpsPhase::Pending | OpsPhase::Running))
        {
            waiting.push(first.clone());
            continue;
        }
        let ruled_out: BTreeSet<&str> = mine
            .iter()
            .filter(|m| m.phase == OpsPhase::Failed)
            .map(|m| m.target.as_str())
            .collect();
        let holders: BTreeSet<String> = vols
            .iter()
            .flat_map(|v| v.nodes.iter())
            .filter_map(|url| {
                url.trim_end_matches('/')
                    .rsplit('/')
                    .next()
                    .map(String::from)
            })
            .collect();
        let online: BTreeSet<Uuid> = obs
            .peers
            .iter()
            .filter(|p| p.status == NodeStatus::Online)
            .map(|p| p.id)
            .collect();
        let eligible: Vec<&Member> = obs
            .members
            .iter()
            .filter(|m| m.uuid != id && online.contains(&m.uuid))
            .filter(|m| !holders.contains(&m.uuid.to_string()))
            .filter(|m| !ruled_out.contains(m.name.as_str()))
            .collect();
        let Some(target) = eligible.get(index % eligible.len().max(1)) else {
            return hold(
                format!(
                    "no storage node can take volume {first} and its subsystem: every online peer holds a replica of it or was ruled out ({}); add a node, or bring one back online",
                    ruled_out.iter().copied().collect::<Vec<_>>().join(", ")
                ),
                BLOCKED_RECHECK,
                reason::NO_MIGRATION_TARGET,
            )
            .into();
        };
        let attempt = mine.len() + 1;
        return call(
            Call::CreateMove {
                name: move_name(op, first, attempt),
                pv: first.clone(),
                target: target.name.clone(),
            },
            format!(
                "moving volume {first} (and its subsystem) to StorageNode {} (attempt {attempt})",
                target.name
            ),
        )
        .into();
    }
    wait_after(
        format!(
            "{migrated} of {total} volume(s) moved off the node; waiting for the moves of {}",
            waiting.join(", ")
        ),
        MOVE_RECHECK,
    )
    .into()
}

fn wait_after(message: String, after: Duration) -> Plan<NodeOpsStep, Call, Fields> {
    Plan::Wait {
        message,
        after,
        event: None,
    }
}

/// The name of the move of the subsystem whose first PersistentVolume is `pv`: bounded,
/// unique per operation (PersistentVolumeOps are cluster-scoped), one per attempt.
pub fn move_name(op: &StorageNodeOps, pv: &str, attempt: usize) -> String {
    let namespace = op.namespace().unwrap_or_default();
    let name = op.name_any();
    let attempt = attempt.to_string();
    let mut parts = vec![namespace.as_str(), name.as_str(), pv];
    if attempt != "1" {
        parts.push(&attempt);
    }
    simplyblock_api::names::derived_name(&parts, 253)
}

/// The deleted operation's moves: those still running are asked to abort, and once all
/// have ended they are deleted. `None` when none is left.
pub async fn dependents_gone(
    op: &StorageNodeOps,
    ctx: &Context,
) -> Result<Option<String>, ops::Error> {
    let api: Api<PersistentVolumeOps> = Api::all(ctx.kube.clone());
    let uid = op.uid().unwrap_or_default();
    let selector = format!("{MANAGED_BY_LABEL}={MANAGED_BY_STORAGE_NODE_OPS}");
    let mine: Vec<PersistentVolumeOps> = api
        .list(&ListParams::default().labels(&selector))
        .await?
        .into_iter()
        .filter(|m| m.spec.creator_ref.as_ref().is_some_and(|c| c.uid == uid))
        .collect();
    if mine.is_empty() {
        return Ok(None);
    }
    let mut running = Vec::new();
    let mut going = Vec::new();
    for m in &mine {
        let name = m.name_any();
        let ended = m.status.as_ref().is_some_and(|s| s.phase.is_terminal());
        if ended {
            // Deleted, a move is still there until its own finalizer goes: the removal
            // holds until it is gone, as it says.
            if m.metadata.deletion_timestamp.is_none() {
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            going.push(name);
        } else {
            if !m.spec.abort {
                let abort = json!({"spec": {"abort": true}});
                api.patch(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&abort),
                )
                .await?;
            }
            running.push(name);
        }
    }
    if !running.is_empty() {
        return Ok(Some(format!(
            "waiting for the moves {} to stop (abort asked)",
            running.join(", ")
        )));
    }
    Ok((!going.is_empty()).then(|| format!("waiting for the moves {} to go", going.join(", "))))
}

pub async fn execute(
    op: &StorageNodeOps,
    _node: &StorageNode,
    call: &Call,
    ctx: &Context,
) -> Result<(), String> {
    let moves: Api<PersistentVolumeOps> = Api::all(ctx.kube.clone());
    match call {
        Call::CreateMove { name, pv, target } => {
            let mut m = PersistentVolumeOps::new(
                name,
                PersistentVolumeOpsSpec {
                    persistent_volume_name: pv.clone(),
                    action: VolumeAction::Migrate,
                    abort: false,
                    migrate: Some(MigrateVolumeSpec {
                        target_node_ref: StorageNodeReference {
                            namespace: op.namespace().unwrap_or_default(),
                            name: target.clone(),
                        },
                    }),
                    creator_ref: Some(CreatorReference {
                        kind: StorageNodeOps::kind(&()).into_owned(),
                        namespace: op.namespace().unwrap_or_default(),
                        name: op.name_any(),
                        uid: op.uid().unwrap_or_default(),
                    }),
                },
            );
            m.metadata.labels = Some(
                [(
                    MANAGED_BY_LABEL.to_string(),
                    MANAGED_BY_STORAGE_NODE_OPS.to_string(),
                )]
                .into(),
            );
            match moves.create(&PostParams::default(), &m).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                Err(e) => Err(format!("creating PersistentVolumeOps {name}: {e}")),
            }
        }
        Call::DeleteMove(name) => match moves.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(format!("deleting PersistentVolumeOps {name}: {e}")),
        },
        Call::RuleOut { name, target } => {
            let patch = json!({"metadata": {"labels": {TARGET_NODE_LABEL: simplyblock_api::names::label_value(target)}}});
            moves
                .patch(
                    name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
                .map(|_| ())
                .map_err(|e| format!("labelling PersistentVolumeOps {name}: {e}"))
        }
        Call::DeleteVolume {
            cluster,
            pool,
            volume,
        } => {
            let cp = ctx.control_plane().map_err(|e| e.to_string())?;
            match cp.delete_volume(*cluster, *pool, *volume).await {
                Ok(()) => Ok(()),
                Err(e) if e.is_not_found() => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        }
        Call::RemoveNode { cluster, node } => {
            let cp = ctx.control_plane().map_err(|e| e.to_string())?;
            let options = NodeRemoveOptions::default();
            match cp.remove_storage_node(*cluster, *node, options).await {
                Ok(()) => Ok(()),
                Err(e) if e.is_not_found() => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::ops::step::Seen;
    use NodeOpsStep::*;
    use simplyblock_api::storage_node_ops::GRAPHS;

    fn op() -> StorageNodeOps {
        serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNodeOps",
            "metadata": {"name": "drain", "namespace": "ns", "uid": "u-1"},
            "spec": {"nodeRef": "sb-w1-0", "action": "Remove"},
        }))
        .expect("op")
    }

    fn node() -> StorageNode {
        serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNode",
            "metadata": {"name": "sb-w1-0", "namespace": "ns"},
            "spec": {"clusterRef": "sb", "workerNode": "w1", "config": {"sizing": {"vcpuCount": 4}}},
        }))
        .expect("node")
    }

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn volume(n: u128, name: &str, nqn: &str) -> Volume {
        Volume {
            id: id(n),
            cluster_id: id(1),
            storage_node_id: id(2),
            name: name.into(),
            nqn: nqn.into(),
            pool_uuid: id(9).to_string(),
            nodes: vec![format!(
                "https://cp/api/v2/clusters/{}/storage-nodes/{}/",
                id(1),
                id(2)
            )],
            ..Volume::default()
        }
    }

    fn claimed(n: u128, pv: &str, pinned: bool) -> Claimed {
        Claimed {
            pv: pv.into(),
            volume: id(n),
            pinned,
        }
    }

    fn peer(n: u128, status: NodeStatus) -> CpNode {
        CpNode {
            id: id(n),
            status,
            ..CpNode::default()
        }
    }

    /// What a Remove step is planned from: the node, and what Remove reads beside it.
    #[derive(Clone, Debug, Default)]
    struct Looked {
        seen: Seen,
        remove: Observed,
    }

    fn seen(status: NodeStatus, remove: Observed) -> Looked {
        Looked {
            seen: Seen {
                cluster: Some(id(1)),
                node: Some(id(2)),
                found: Some(peer(2, status)),
            },
            remove,
        }
    }

    fn at(
        step: NodeOpsStep,
        op: &StorageNodeOps,
        obs: &Looked,
    ) -> Noted<NodeOpsStep, Call, Fields> {
        let mut machine = GRAPHS
            .start(op.spec.action, Timestamp::now())
            .expect("graph");
        let path = [
            Validating,
            ShuttingDown,
            MigratingDevices,
            MigratingVolumes,
            Verifying,
            Removing,
            AwaitingRemoval,
        ];
        for s in path.iter().skip(1) {
            if machine.state() == step {
                break;
            }
            machine.transition_to(*s, Timestamp::now()).expect("edge");
        }
        assert_eq!(machine.state(), step);
        let node = node();
        let at = At {
            op,
            node: &node,
            step: machine.state(),
            seen: &obs.seen,
        };
        plan(at, &obs.remove, Timestamp::now())
    }

    fn system() -> SystemVolumes {
        SystemVolumes::of(&op(), id(1), id(2)).expect("the default filter")
    }

    #[test]
    fn volumes_are_classified_by_their_claim_and_name() {
        let system = system();
        let claims = [claimed(10, "pv-a", false), claimed(11, "pv-b", true)];
        let table = [
            (volume(10, "a", "n1"), Class::Move),
            (volume(11, "b", "n1"), Class::Pinned),
            (volume(12, "sb-fio-baseline-1", "n2"), Class::System),
            (volume(13, "stray", "n3"), Class::Unmanaged),
        ];
        for (v, want) in table {
            assert_eq!(classify(&v, &claims, &system), want, "{}", v.name);
        }
    }

    #[test]
    fn only_a_system_volume_of_this_cluster_and_node_made_for_no_claim_is_deleted() {
        // Regression: every volume the filter named and no PersistentVolume here claimed
        // was deleted, whichever cluster, node or claim the control plane gave it.
        let mut other_cluster = volume(20, "sb-fio-baseline-c", "n2");
        other_cluster.cluster_id = id(7);
        let mut other_node = volume(21, "sb-fio-baseline-n", "n2");
        other_node.storage_node_id = id(3);
        let mut a_claims = volume(22, "sb-fio-baseline-p", "n2");
        a_claims.pvc_name = "data-0".into();
        let system = system();
        for v in [&other_cluster, &other_node, &a_claims] {
            assert_eq!(classify(v, &[], &system), Class::Unmanaged, "{}", v.name);
        }
        let own = volume(23, "sb-fio-baseline-1", "n2");
        assert_eq!(classify(&own, &[], &system), Class::System);

        let mut wide = op();
        wide.spec.remove = Some(simplyblock_api::storage_node_ops::RemoveSpec {
            system_volume_filter_regex: "^sb-fio-baseline-[a-z0-9]+$".into(),
        });
        let obs = seen(
            NodeStatus::Online,
            Observed {
                volumes: vec![other_cluster, other_node, a_claims],
                ..Observed::default()
            },
        );
        // Validating holds the drain, saying whose each one is.
        let got = at(Validating, &wide, &obs);
        let Plan::Wait { message, event, .. } = &got.plan else {
            panic!("{got:?}")
        };
        assert_eq!(*event, Some(reason::DRAIN_BLOCKED));
        assert!(
            message.contains(&format!(
                "sb-fio-baseline-c (the control plane puts it in cluster {}",
                id(7)
            )) && message.contains(&format!(
                "sb-fio-baseline-n (the control plane puts it in cluster {} on node {}",
                id(1),
                id(3)
            )) && message.contains("sb-fio-baseline-p (made for claim data-0"),
            "{message}"
        );
        // Verifying, with the node's own system volume among them, deletes that one only,
        // and then holds.
        let mut with_own = obs.clone();
        with_own.remove.volumes.push(own);
        let got = at(Verifying, &with_total(0), &with_own);
        let Plan::Call {
            call: Call::DeleteVolume {
                cluster, volume, ..
            },
            ..
        } = &got.plan
        else {
            panic!("{got:?}")
        };
        assert_eq!((*cluster, *volume), (id(1), id(23)));
        let got = at(Verifying, &with_total(0), &obs);
        assert!(
            matches!(
                &got.plan,
                Plan::Wait {
                    event: Some(reason::DRAIN_BLOCKED),
                    ..
                }
            ),
            "{got:?}"
        );
    }

    #[test]
    fn a_filter_admitted_before_it_was_checked_fails_the_operation_before_any_deletion() {
        let mut wide = op();
        wide.spec.remove = Some(simplyblock_api::storage_node_ops::RemoveSpec {
            system_volume_filter_regex: ".*".into(),
        });
        let obs = seen(
            NodeStatus::Online,
            Observed {
                volumes: vec![volume(23, "sb-fio-baseline-1", "n2")],
                ..Observed::default()
            },
        );
        for step in [Validating, Verifying] {
            let got = at(step, &wide, &obs);
            let Plan::Fail(message) = &got.plan else {
                panic!("{step:?}: {got:?}")
            };
            assert!(
                message.contains("does not start with ^")
                    && message.contains("nothing was deleted"),
                "{message}"
            );
        }
    }

    #[test]
    fn a_pinned_or_unmanaged_volume_blocks_the_drain_and_says_which() {
        let obs = seen(
            NodeStatus::Online,
            Observed {
                volumes: vec![
                    volume(10, "a", "n1"),
                    volume(11, "b", "n1"),
                    volume(13, "stray", "n3"),
                ],
                claimed: vec![claimed(10, "pv-a", false), claimed(11, "pv-b", true)],
                ..Observed::default()
            },
        );
        let got = at(Validating, &op(), &obs);
        let Plan::Wait { message, event, .. } = &got.plan else {
            panic!("{got:?}")
        };
        assert_eq!(*event, Some(reason::DRAIN_BLOCKED));
        assert!(
            message.contains("b (its claim is pinned")
                && message.contains("stray (no PersistentVolume"),
            "{message}"
        );
        assert!(!message.contains("a ("));
    }

    #[test]
    fn an_unblocked_drain_counts_the_volumes_to_move_once() {
        let obs = seen(
            NodeStatus::Online,
            Observed {
                volumes: vec![volume(10, "a", "n1"), volume(12, "sb-fio-baseline-1", "n2")],
                claimed: vec![claimed(10, "pv-a", false)],
                ..Observed::default()
            },
        );
        let got = at(Validating, &op(), &obs);
        let Plan::Advance {
            to,
            kind_status: Some(k),
            ..
        } = &got.plan
        else {
            panic!("{got:?}")
        };
        assert_eq!(*to, ops::Move::To(ShuttingDown));
        assert_eq!(k.drain.as_ref().map(|d| d.volumes_total), Some(1));
    }

    #[test]
    fn a_node_the_control_plane_lost_or_never_had_is_removed_at_any_step() {
        for step in [Validating, MigratingVolumes, Removing, AwaitingRemoval] {
            let mut gone = seen(NodeStatus::Online, Observed::default());
            gone.seen.found = None;
            assert!(
                matches!(at(step, &op(), &gone).plan, Plan::Succeed { .. }),
                "{step:?}"
            );
            let removed = seen(NodeStatus::Removed, Observed::default());
            assert!(
                matches!(at(step, &op(), &removed).plan, Plan::Succeed { .. }),
                "{step:?}"
            );
        }
        let never = Looked::default();
        assert!(matches!(
            at(Validating, &op(), &never).plan,
            Plan::Succeed { .. }
        ));
    }

    fn members() -> Vec<Member> {
        [(2, "sb-w1-0"), (3, "sb-w2-0"), (4, "sb-w3-0")]
            .into_iter()
            .map(|(n, name)| Member {
                name: name.into(),
                uuid: id(n),
            })
            .collect()
    }

    fn with_total(total: i32) -> StorageNodeOps {
        let mut o = op();
        o.status = Some(simplyblock_api::storage_node_ops::StorageNodeOpsStatus {
            drain: Some(DrainStatus {
                volumes_total: total,
                volumes_migrated: 0,
                devices_total: None,
            }),
            ..Default::default()
        });
        o
    }

    #[test]
    fn each_subsystem_moves_round_robin_to_a_peer_without_a_replica() {
        let mut second = volume(20, "c", "n2");
        // The second subsystem has a replica on w2: only w3 may take it.
        second.nodes.push(format!(
            "https://cp/api/v2/clusters/{}/storage-nodes/{}/",
            id(1),
            id(3)
        ));
        let obs = seen(
            NodeStatus::Online,
            Observed {
                volumes: vec![volume(10, "a", "n1"), volume(11, "b", "n1"), second],
                claimed: vec![
                    claimed(10, "pv-b", false),
                    claimed(11, "pv-a", false),
                    claimed(20, "pv-c", false),
                ],
                peers: vec![
                    peer(2, NodeStatus::Online),
                    peer(3, NodeStatus::Online),
                    peer(4, NodeStatus::Online),
                ],
                members: members(),
                ..Observed::default()
            },
        );
        let got = at(MigratingVolumes, &with_total(3), &obs);
        let Plan::Call {
            call: Call::CreateMove { pv, target, name },
            ..
        } = &got.plan
        else {
            panic!("{got:?}")
        };
        // Named after the subsystem's first PersistentVolume.
        assert_eq!((pv.as_str(), target.as_str()), ("pv-a", "sb-w2-0"));
        assert_eq!(name, "ns-drain-pv-a");
        // With the first subsystem's move running, the second goes to w3.
        let mut obs = obs;
        obs.remove.moves.push(Move {
            name: name.clone(),
            pv: "pv-a".into(),
            target: "sb-w2-0".into(),
            phase: OpsPhase::Running,
            ruled_out: false,
        });
        let got = at(MigratingVolumes, &with_total(3), &obs);
        let Plan::Call {
            call: Call::CreateMove { pv, target, .. },
            ..
        } = &got.plan
        else {
            panic!("{got:?}")
        };
        assert_eq!((pv.as_str(), target.as_str()), ("pv-c", "sb-w3-0"));
    }

    #[test]
    fn a_failed_target_is_ruled_out_and_none_left_holds_the_drain() {
        let mut obs = seen(
            NodeStatus::Online,
            Observed {
                volumes: vec![volume(10, "a", "n1")],
                claimed: vec![claimed(10, "pv-a", false)],
                peers: vec![
                    peer(2, NodeStatus::Online),
                    peer(3, NodeStatus::Online),
                    peer(4, NodeStatus::Offline),
                ],
                members: members(),
                moves: vec![Move {
                    name: "ns-drain-pv-a".into(),
                    pv: "pv-a".into(),
                    target: "sb-w2-0".into(),
                    phase: OpsPhase::Failed,
                    ruled_out: false,
                }],
                ..Observed::default()
            },
        );
        let got = at(MigratingVolumes, &with_total(1), &obs);
        assert!(
            matches!(
                &got.plan,
                Plan::Call {
                    call: Call::RuleOut { .. },
                    ..
                }
            ),
            "{got:?}"
        );
        assert_eq!(got.notes[0].reason, reason::MIGRATION_RETRIED);
        obs.remove.moves[0].ruled_out = true;
        // w2 failed, w3 is offline: nowhere to go.
        let got = at(MigratingVolumes, &with_total(1), &obs);
        let Plan::Wait { event, .. } = &got.plan else {
            panic!("{got:?}")
        };
        assert_eq!(*event, Some(reason::NO_MIGRATION_TARGET));
    }

    #[test]
    fn the_counter_follows_the_volumes_left_and_finished_moves_go() {
        let obs = seen(
            NodeStatus::Online,
            Observed {
                claimed: vec![claimed(10, "pv-a", false)],
                moves: vec![Move {
                    name: "m".into(),
                    pv: "pv-a".into(),
                    target: "sb-w2-0".into(),
                    phase: OpsPhase::Succeeded,
                    ruled_out: false,
                }],
                ..Observed::default()
            },
        );
        let got = at(MigratingVolumes, &with_total(1), &obs);
        let Plan::Progress { kind_status, .. } = &got.plan else {
            panic!("{got:?}")
        };
        assert_eq!(
            kind_status.drain.as_ref().map(|d| d.volumes_migrated),
            Some(1)
        );
        let mut done = with_total(1);
        done.status
            .as_mut()
            .and_then(|s| s.drain.as_mut())
            .expect("drain")
            .volumes_migrated = 1;
        let got = at(MigratingVolumes, &done, &obs);
        assert!(
            matches!(&got.plan, Plan::Call { call: Call::DeleteMove(m), .. } if m == "m"),
            "{got:?}"
        );
        let mut empty = obs.clone();
        empty.remove.moves.clear();
        assert!(matches!(
            at(MigratingVolumes, &done, &empty).plan,
            Plan::Advance { .. }
        ));
    }

    #[test]
    fn a_move_whose_volume_already_left_the_node_finishes_before_it_is_deleted() {
        // Regression: the drain deleted a running move as soon as the control plane showed
        // its volume on the target, which aborted the move before it had verified it.
        let running = |phase| Move {
            name: "m".into(),
            pv: "pv-a".into(),
            target: "sb-w2-0".into(),
            phase,
            ruled_out: false,
        };
        let mut obs = seen(
            NodeStatus::Online,
            Observed {
                claimed: vec![claimed(10, "pv-a", false)],
                moves: vec![running(OpsPhase::Running)],
                ..Observed::default()
            },
        );
        let mut done = with_total(1);
        done.status
            .as_mut()
            .and_then(|s| s.drain.as_mut())
            .expect("drain")
            .volumes_migrated = 1;
        let got = at(MigratingVolumes, &done, &obs);
        let Plan::Wait { message, .. } = &got.plan else {
            panic!("{got:?}")
        };
        assert!(message.contains("waiting for move m"), "{message}");
        obs.remove.moves[0] = running(OpsPhase::Succeeded);
        assert!(
            matches!(&at(MigratingVolumes, &done, &obs).plan, Plan::Call { call: Call::DeleteMove(m), .. } if m == "m"),
        );
    }

    #[test]
    fn the_removal_waits_for_every_peer_and_is_skipped_once_under_way() {
        let mut obs = seen(
            NodeStatus::Online,
            Observed {
                peers: vec![peer(2, NodeStatus::Online), peer(3, NodeStatus::InRestart)],
                ..Observed::default()
            },
        );
        let got = at(Removing, &op(), &obs);
        let Plan::Wait { event, .. } = &got.plan else {
            panic!("{got:?}")
        };
        assert_eq!(*event, Some(reason::REMOVAL_DEFERRED));
        obs.remove.peers[1].status = NodeStatus::Online;
        assert!(matches!(
            at(Removing, &op(), &obs).plan,
            Plan::Call {
                call: Call::RemoveNode { .. },
                ..
            }
        ));
        let under_way = seen(NodeStatus::InShutdown, Observed::default());
        assert!(matches!(
            at(Removing, &op(), &under_way).plan,
            Plan::Advance { .. }
        ));
        // Asked for by a pass that died after the call: the open task says so.
        let asked = seen(
            NodeStatus::Online,
            Observed {
                removal_open: true,
                ..Observed::default()
            },
        );
        assert!(matches!(
            at(Removing, &op(), &asked).plan,
            Plan::Advance { .. }
        ));
    }

    #[test]
    fn handles_yield_their_volume() {
        let v = id(7);
        assert_eq!(handle_volume(&format!("{}:pool1:{v}", id(1))), Some(v));
        assert_eq!(handle_volume("a:b"), None);
        assert_eq!(handle_volume(&format!("a:b:{v}:d")), None);
    }
}

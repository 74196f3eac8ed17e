//! StorageNodeOps Migrate: the node, with its control-plane identity, moves to another
//! worker.
//!
//! | step | call, skipped when | done when |
//! |---|---|---|
//! | Preparing | enroll the target worker in the cluster's storage plane; enrolled | the target's storage-node API answers and the target is in the cluster's EndpointSlice (read uncached) |
//! | Relocating | restart at the target's address, once (AwaitingNode is written first); the node is already at the target | the call is on record |
//! | AwaitingNode | none | the node is online at the target |
//! | Promoting | promote (the node has no new or removed devices left), then the StorageNode re-pointed (`spec.workerNode`, the worker label, the new drives in `pcieAllowList`), then the source's enrollment removed if no other node is left on it | all three there |
//!
//! While a Migrate is unfinished, the storage-node workload counts its target as a worker
//! of the cluster ([`crate::workload::with_targets`]), so the DaemonSet runs there, the target is in the
//! EndpointSlice and has its configuration, and the enrollment written here is kept.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use simplyblock_api::keys::{
    ENROLLMENT_LABEL, LEGACY_ENROLLMENT_LABEL, NAMESPACE_LABEL, WORKER_LABEL,
};
use simplyblock_api::names::label_value;
use simplyblock_api::storage_node_ops::{NodeOpsStep, StorageNodeOps};
use simplyblock_api::{StorageCluster, StorageNode};
use simplyblock_controlplane::{DeviceStatus, NodeRestart, NodeStatus};

use super::step::{At, Fields, NodeCall, advance, call, succeed, wait};
use crate::runtime::context::Context;
use crate::runtime::ops::{self, Noted, Plan};
use crate::workload::{SERVICE_NAME, enrolled_elsewhere, topology_label};

/// What Migrate reads beside the node.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The target's enrollment: `None` when its Node does not exist.
    pub target_labels: Option<std::collections::BTreeMap<String, String>>,
    /// Preparing: whether the target's storage-node API answered (why not, if not).
    pub target_answers: Option<Result<(), String>>,
    /// Preparing: whether the target is an endpoint of the cluster's EndpointSlice.
    pub target_published: bool,
    /// The storage-node address of the target, as the control plane is given it.
    pub target_address: Option<String>,
    /// Promoting: devices of the node still waiting for the promotion (new or removed).
    pub unpromoted_devices: Option<usize>,
    /// Promoting: the source worker's labels, and whether another node is left on it.
    pub source_labels: Option<std::collections::BTreeMap<String, String>>,
    pub source_shared: bool,
    /// The cluster's name, namespace and control-plane id (for the topology label).
    pub cluster_uuid: Option<String>,
}

/// The calls Migrate makes.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    /// The restart at the target's address.
    Node(NodeCall),
    /// Enroll the target worker in the cluster's storage plane.
    Enroll {
        worker: String,
    },
    Promote,
    /// Point the StorageNode at the target.
    RePoint,
    /// Remove the source's enrollment and this node's topology label from it.
    Unenroll {
        worker: String,
        topology: Option<String>,
    },
}

fn target(op: &StorageNodeOps) -> Option<&str> {
    op.spec
        .migrate
        .as_ref()
        .map(|m| m.target_worker_node.as_str())
}

/// The worker the node moves from: the one the StorageNode named when the operation
/// started, kept in its record by Preparing's messages; before the re-point, its spec.
fn source<'a>(op: &'a StorageNodeOps, node: &'a StorageNode) -> &'a str {
    op.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SOURCE_ANNOTATION))
        .map(String::as_str)
        .unwrap_or(&node.spec.worker_node)
}

/// Annotation on a Migrate: the worker its node moved from, written with the re-point.
pub const SOURCE_ANNOTATION: &str = "storage.simplyblock.io/migrated-from";

pub async fn observe(at: At<'_>, ctx: &Context) -> Result<Observed, ops::Error> {
    let (op, node, step, seen) = (at.op, at.node, at.step, at.seen);
    use NodeOpsStep::*;
    let mut obs = Observed::default();
    let Some(target) = target(op) else {
        return Ok(obs);
    };
    let ns = node.namespace().unwrap_or_default();
    let nodes: Api<Node> = Api::all(ctx.kube.clone());
    obs.target_labels = nodes
        .get_metadata_opt(target)
        .await?
        .map(|n| n.metadata.labels.unwrap_or_default());
    obs.target_address = ctx.snode.address(target, &ns).ok();
    let cluster = Api::<StorageCluster>::namespaced(ctx.kube.clone(), &ns)
        .get_opt(&node.spec.cluster_ref)
        .await?;
    obs.cluster_uuid = cluster
        .as_ref()
        .and_then(|c| c.status.as_ref()?.uuid.clone());
    match step {
        Preparing => {
            if let Some(cluster) = &cluster {
                obs.target_answers = Some(
                    match crate::workload::snode::snode(ctx, cluster, target).await {
                        Ok(client) => client.check().await.map(|_| ()).map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    },
                );
                let slice = format!("{SERVICE_NAME}-{}", cluster.name_any());
                obs.target_published = Api::<EndpointSlice>::namespaced(ctx.kube.clone(), &ns)
                    .get_opt(&slice)
                    .await?
                    .is_some_and(|s| {
                        s.endpoints
                            .unwrap_or_default()
                            .iter()
                            .any(|e| e.hostname.as_deref() == Some(target))
                    });
            }
        }
        Promoting => {
            if let (Some(c), Some(n)) = (seen.cluster, seen.node) {
                let devices = ctx.control_plane()?.list_devices(c, n).await?;
                obs.unpromoted_devices = Some(
                    devices
                        .iter()
                        .filter(|d| matches!(d.status, DeviceStatus::New | DeviceStatus::Removed))
                        .count(),
                );
            }
            let from = source(op, node);
            obs.source_labels = nodes
                .get_metadata_opt(from)
                .await?
                .map(|n| n.metadata.labels.unwrap_or_default());
            obs.source_shared = Api::<StorageNode>::namespaced(ctx.kube.clone(), &ns)
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .any(|n| n.name_any() != node.name_any() && n.spec.worker_node == from);
        }
        _ => {}
    }
    Ok(obs)
}

pub fn plan(at: At<'_>, obs: &Observed, _now: Timestamp) -> Noted<NodeOpsStep, Call, Fields> {
    let (op, node, step, seen) = (at.op, at.node, at.step, at.seen);
    use NodeOpsStep::*;
    use NodeStatus as S;
    let name = node.name_any();
    let Some(target) = target(op) else {
        return Plan::Fail("spec.migrate is missing; nothing was done".into()).into();
    };
    let (Some(cluster), Some(id)) = (seen.cluster, seen.node) else {
        return wait(format!(
            "StorageNode {name} or its cluster has no control-plane id; waiting for it"
        ))
        .into();
    };
    let Some(found) = &seen.found else {
        return Plan::Fail(format!(
            "the control plane does not know node {id} (StorageNode {name}); the move stopped at step {step}"
        ))
        .into();
    };
    let status = found.status;
    let at_target = found.hostname == target;
    let ns = node.namespace().unwrap_or_default();
    let plan = match step {
        Preparing => {
            let Some(labels) = &obs.target_labels else {
                return Plan::Fail(format!(
                    "worker {target} is not a Node of this cluster; nothing was changed — create the operation naming an existing Node"
                ))
                .into();
            };
            if let Some(other) = enrolled_elsewhere(labels, &node.spec.cluster_ref, &ns) {
                return Plan::Fail(format!(
                    "worker {target} serves StorageCluster {other}, and a worker serves one storage cluster; nothing was changed — choose another worker"
                ))
                .into();
            }
            let enrolled = labels.get(ENROLLMENT_LABEL) == Some(&node.spec.cluster_ref)
                && labels.get(NAMESPACE_LABEL) == Some(&ns);
            if at_target {
                advance(
                    Relocating,
                    format!("the node is already at worker {target}"),
                )
            } else if !enrolled {
                call(
                    Call::Enroll {
                        worker: target.to_owned(),
                    },
                    format!(
                        "enrolling worker {target} in the storage plane of StorageCluster {}",
                        node.spec.cluster_ref
                    ),
                )
            } else if let Some(Err(e)) = &obs.target_answers {
                wait(format!(
                    "waiting for the storage node on worker {target} to answer ({e})"
                ))
            } else if !obs.target_published {
                wait(format!(
                    "waiting for worker {target} to be published in the storage-node Service's endpoints"
                ))
            } else if obs.target_answers.is_none() {
                wait(format!("waiting for worker {target} to answer"))
            } else {
                advance(
                    Relocating,
                    format!("the storage node on worker {target} answers; moving the node there"),
                )
            }
        }
        Relocating => {
            if at_target {
                advance(
                    AwaitingNode,
                    format!("the node is already at worker {target}; no restart call needed"),
                )
            } else if status == S::InRestart {
                wait(format!(
                    "the node is restarting at its present worker; waiting before it is moved to {target}"
                ))
            } else {
                let Some(address) = obs.target_address.clone() else {
                    return Plan::Fail(format!(
                        "worker {target} has no storage-node address (not a Node name); nothing was called"
                    ))
                    .into();
                };
                let m = op.spec.migrate.as_ref();
                // The node may be back before a look could see it leave: AwaitingNode is
                // written first and never calls.
                Plan::CallOnce {
                    to: AwaitingNode,
                    call: Call::Node(NodeCall::Restart(
                        cluster,
                        id,
                        NodeRestart {
                            force: op.spec.force.unwrap_or(true),
                            reattach_volume: op.spec.reattach_volume.unwrap_or(false),
                            node_address: Some(address),
                            new_ssd_pcie: m.map(|m| m.new_ssd_pcie.clone()).unwrap_or_default(),
                        },
                    )),
                    message: format!("restarting the node at worker {target} (it is {status})"),
                    accepted: format!(
                        "the control plane accepted the move of the node to worker {target}; waiting for it to be online there"
                    ),
                }
            }
        }
        AwaitingNode => {
            if status == S::Online && at_target {
                advance(
                    Promoting,
                    format!("the node is online at worker {target}; promoting it"),
                )
            } else if status == S::Offline {
                Plan::Fail(format!(
                    "the node is offline at worker {}: the control plane did not move it to {target} (it refuses a move it cannot reach and says so nowhere); look at the node and create a new Migrate",
                    found.hostname
                ))
            } else {
                wait(format!(
                    "the control plane reports the node {status} at worker {}; waiting for it to be online at {target}",
                    found.hostname
                ))
            }
        }
        Promoting => {
            let from = source(op, node).to_owned();
            let repointed = node.spec.worker_node == target
                && node.labels().get(WORKER_LABEL) == Some(&label_value(target));
            let topology = obs
                .cluster_uuid
                .as_deref()
                .map(|u| topology_label(u, node.spec.slot.unwrap_or(0)));
            let source_enrolled = !obs.source_shared
                && from != target
                && obs.source_labels.as_ref().is_some_and(|l| {
                    l.contains_key(ENROLLMENT_LABEL)
                        || l.contains_key(LEGACY_ENROLLMENT_LABEL)
                        || topology.as_ref().is_some_and(|t| l.contains_key(t))
                });
            if obs.unpromoted_devices.is_none_or(|n| n > 0) {
                call(
                    Call::Promote,
                    format!(
                        "promoting the node at worker {target}: its new drives join, its old ones are failed"
                    ),
                )
            } else if !repointed {
                call(
                    Call::RePoint,
                    format!("pointing StorageNode {name} at worker {target}"),
                )
            } else if source_enrolled {
                call(
                    Call::Unenroll {
                        worker: from.clone(),
                        topology,
                    },
                    format!("removing worker {from} from the storage plane: no node is left on it"),
                )
            } else {
                succeed(format!(
                    "the node moved from worker {from} to worker {target} and is online there"
                ))
            }
        }
        other => Plan::Fail(format!("step {other} is not one of action Migrate")),
    };
    plan.into()
}

pub async fn execute(
    op: &StorageNodeOps,
    node: &StorageNode,
    call: &Call,
    ctx: &Context,
) -> Result<(), String> {
    let said = |e: kube::Error| e.to_string();
    let ns = node.namespace().unwrap_or_default();
    let nodes: Api<Node> = Api::all(ctx.kube.clone());
    match call {
        Call::Node(call) => call.execute(ctx).await,
        Call::Enroll { worker } => {
            let patch = json!({"metadata": {"labels": {
                ENROLLMENT_LABEL: node.spec.cluster_ref,
                NAMESPACE_LABEL: ns,
            }}});
            nodes
                .patch(worker, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map(|_| ())
                .map_err(said)
        }
        Call::Promote => {
            let id = |s: Option<&String>| s.and_then(|u| u.parse().ok());
            let node_id = id(node.status.as_ref().and_then(|s| s.uuid.as_ref()));
            let cluster = Api::<StorageCluster>::namespaced(ctx.kube.clone(), &ns)
                .get_opt(&node.spec.cluster_ref)
                .await
                .map_err(said)?;
            let cluster_id = id(cluster
                .as_ref()
                .and_then(|c| c.status.as_ref()?.uuid.as_ref()));
            let (Some(c), Some(n)) = (cluster_id, node_id) else {
                return Err("the node or its cluster has no control-plane id".into());
            };
            let cp = ctx.control_plane().map_err(|e| e.to_string())?;
            cp.promote_storage_node(c, n)
                .await
                .map_err(|e| e.to_string())
        }
        Call::RePoint => {
            let Some(m) = op.spec.migrate.as_ref() else {
                return Err("spec.migrate is missing".into());
            };
            let from = node.spec.worker_node.clone();
            // The source is kept on the operation first: once the node names the target,
            // the operation is where it is still known.
            if from != m.target_worker_node {
                let patch = json!({"metadata": {"annotations": {SOURCE_ANNOTATION: from}}});
                Api::<StorageNodeOps>::namespaced(ctx.kube.clone(), &ns)
                    .patch(
                        &op.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await
                    .map_err(said)?;
            }
            let mut allow = node.spec.config.pcie_allow_list.clone();
            for p in &m.new_ssd_pcie {
                if !allow.contains(p) {
                    allow.push(p.clone());
                }
            }
            let mut patch = json!({
                "metadata": {
                    "resourceVersion": node.resource_version(),
                    "labels": {WORKER_LABEL: label_value(&m.target_worker_node)},
                },
                "spec": {"workerNode": m.target_worker_node},
            });
            if !m.new_ssd_pcie.is_empty() {
                patch["spec"]["config"] = json!({"pcieAllowList": allow});
            }
            Api::<StorageNode>::namespaced(ctx.kube.clone(), &ns)
                .patch(
                    &node.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await
                .map(|_| ())
                .map_err(said)
        }
        Call::Unenroll { worker, topology } => {
            let mut labels = serde_json::Map::new();
            labels.insert(ENROLLMENT_LABEL.into(), serde_json::Value::Null);
            labels.insert(LEGACY_ENROLLMENT_LABEL.into(), serde_json::Value::Null);
            labels.insert(NAMESPACE_LABEL.into(), serde_json::Value::Null);
            if let Some(t) = topology {
                labels.insert(t.clone(), serde_json::Value::Null);
            }
            let patch = json!({"metadata": {"labels": labels}});
            match nodes
                .patch(worker, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(said(e)),
            }
        }
    }
}

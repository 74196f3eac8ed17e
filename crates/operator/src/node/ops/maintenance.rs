//! StorageNodeOps HostMaintenance: the maintenance window of one node's worker, opened
//! when the worker is cordoned ([`crate::node::maintenance_trigger`]).
//!
//! | step | call, skipped when | done when |
//! |---|---|---|
//! | Holding | claim a window on the StorageCluster; the claim is there | claimed: fewer workers in windows than `status.maxConcurrentWorkerRestarts`, or a sibling node of the same worker holds one |
//! | ShuttingDown | label the worker's storage-node pods, create the worker's PodDisruptionBudget (no disruption allowed), shut the node down; each when not there yet (shutdown: offline, in_shutdown, in_restart) | offline |
//! | Releasing | delete the budget, once no sibling is still shutting down | the budget is gone |
//! | AwaitingHost | none | the worker is uncordoned, Ready, and its storage-node API answers |
//! | Restarting | restart, once (Cleanup is written first); online or in_restart | the call is on record |
//! | Cleanup | remove the pods' label and the budget, unless a sibling still shuts down | the node online, the markers gone |
//!
//! The claims are the annotation [`WINDOWS_ANNOTATION`] on the StorageCluster, written
//! under its resourceVersion, so two windows deciding at once cannot both take the last
//! one. A claim counts while its operation has not finished; the next claimer drops the
//! others. The budget blocks a drain's evictions from the pods the label marks until the
//! node is offline; whatever a window leaves behind when it ends otherwise is removed by
//! [`teardown`].

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_api::StorageCluster;
use simplyblock_api::StorageNode;
use simplyblock_api::names::{derived_name, label_value};
use simplyblock_api::storage_node_ops::{NodeAction, NodeOpsStep, StorageNodeOps};
use simplyblock_controlplane::{NodeRestart, NodeStatus};

use super::step::{At, Fields, NodeCall, advance, call, succeed, wait};
use crate::runtime::context::Context;
use crate::runtime::ops::{self, Noted, Plan};

/// Label on the pods a window protects: the worker (a label value of its name).
pub const MAINTENANCE_LABEL: &str = "storage.simplyblock.io/maintenance";
/// Annotation on a StorageCluster: the HostMaintenance operations holding a window,
/// comma-separated.
pub const WINDOWS_ANNOTATION: &str = "storage.simplyblock.io/maintenance-windows";
/// The event of a window waiting for its turn.
pub const QUEUED: &str = "MaintenanceQueued";
/// The event of markers a finished window could not remove.
pub const MARKERS_LEFT: &str = "MaintenanceMarkersLeft";
/// How long Holding waits between looks at the windows.
const HOLD_POLL: std::time::Duration = std::time::Duration::from_secs(2);

/// The PodDisruptionBudget of `worker`'s window.
pub fn budget_name(worker: &str) -> String {
    derived_name(&["simplyblock-maintenance", worker], 253)
}

/// What HostMaintenance reads beside the node.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The node's StorageCluster (name) and the windows claimed on it.
    pub windows: Windows,
    /// The worker's Node: `None` when it does not exist.
    pub worker: Option<Worker>,
    /// The worker's storage-node pods and whether each carries the label, and any other
    /// pod still carrying it.
    pub pods: BTreeMap<String, bool>,
    /// Whether the worker's budget exists.
    pub budget: bool,
    /// Sibling windows (other nodes of the same worker) that hold a claim and are still
    /// shutting their node down.
    pub siblings_shutting_down: Vec<String>,
    /// AwaitingHost: whether the worker's storage-node API answered (why not, if not).
    pub host: Option<Result<(), String>>,
}

/// The windows of one StorageCluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Windows {
    pub cluster: String,
    /// The cluster's resourceVersion the claims were read at.
    pub resource_version: Option<String>,
    /// How many workers may be in a window at once.
    pub limit: i32,
    /// The claims of unfinished operations, with their workers, this one's included.
    pub live: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Worker {
    pub name: String,
    pub cordoned: bool,
    pub ready: bool,
}

/// The calls HostMaintenance makes.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    /// The node's shutdown and restart.
    Node(NodeCall),
    /// Writes `claims` as the cluster's windows, if it is still at `resource_version`.
    Claim {
        cluster: String,
        resource_version: String,
        claims: Vec<String>,
    },
    /// Sets the label to `value` on `pods` (`None`: removes it).
    Label {
        pods: Vec<String>,
        value: Option<String>,
    },
    CreateBudget {
        worker: String,
    },
    DeleteBudget {
        worker: String,
    },
}

/// How many workers may be in a window at once: the cluster's effective value, else the
/// smaller of its spec and its fault tolerance, at least one.
pub fn window_limit(cluster: &StorageCluster) -> i32 {
    let status = cluster.status.as_ref();
    status
        .and_then(|s| s.max_concurrent_worker_restarts)
        .unwrap_or_else(|| {
            let ftt = status.and_then(|s| s.max_fault_tolerance).unwrap_or(1);
            cluster.spec.max_concurrent_worker_restarts.min(ftt)
        })
        .max(1)
}

fn claims_of(cluster: &StorageCluster) -> Vec<String> {
    cluster
        .annotations()
        .get(WINDOWS_ANNOTATION)
        .map(|v| {
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn is_window(op: &StorageNodeOps) -> bool {
    op.spec.action == NodeAction::HostMaintenance
        && !op.status.as_ref().is_some_and(|s| s.phase.is_terminal())
}

fn step_of(op: &StorageNodeOps) -> Option<&str> {
    op.status.as_ref()?.step.state.as_deref()
}

pub async fn observe(at: At<'_>, ctx: &Context) -> Result<Observed, ops::Error> {
    let (op, node, step) = (at.op, at.node, at.step);
    use NodeOpsStep::*;
    let ns = node.namespace().unwrap_or_default();
    let worker = &node.spec.worker_node;
    let mut obs = Observed::default();
    let cluster = Api::<StorageCluster>::namespaced(ctx.kube.clone(), &ns)
        .get_opt(&node.spec.cluster_ref)
        .await?;
    let ops_api: Api<StorageNodeOps> = Api::namespaced(ctx.kube.clone(), &ns);
    let windows: Vec<StorageNodeOps> = ops_api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(is_window)
        .collect();
    let workers: BTreeMap<String, String> = Api::<StorageNode>::namespaced(ctx.kube.clone(), &ns)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|n| (n.name_any(), n.spec.worker_node))
        .collect();
    if let Some(cluster) = &cluster {
        let claims = claims_of(cluster);
        obs.windows = Windows {
            cluster: cluster.name_any(),
            resource_version: cluster.resource_version(),
            limit: window_limit(cluster),
            live: windows
                .iter()
                .filter(|o| claims.contains(&o.name_any()))
                .filter_map(|o| Some((o.name_any(), workers.get(&o.spec.node_ref)?.clone())))
                .collect(),
        };
    }
    obs.siblings_shutting_down = windows
        .iter()
        .filter(|o| o.name_any() != op.name_any())
        .filter(|o| workers.get(&o.spec.node_ref) == Some(worker))
        .filter(|o| obs.windows.live.contains_key(&o.name_any()))
        .filter(|o| matches!(step_of(o), Some("Holding" | "ShuttingDown")))
        .map(|o| o.name_any())
        .collect();
    if matches!(step, Holding) {
        return Ok(obs);
    }
    let value = label_value(worker);
    let pods: Api<Pod> = Api::namespaced(ctx.kube.clone(), &ns);
    let on_worker = ListParams::default()
        .labels(&format!(
            "{}={}",
            simplyblock_api::keys::CLUSTER_LABEL,
            label_value(&node.spec.cluster_ref)
        ))
        .fields(&format!("spec.nodeName={worker}"));
    for p in pods.list_metadata(&on_worker).await?.items {
        let labelled = p.labels().get(MAINTENANCE_LABEL) == Some(&value);
        obs.pods.insert(p.name_any(), labelled);
    }
    let marked = ListParams::default().labels(&format!("{MAINTENANCE_LABEL}={value}"));
    for p in pods.list_metadata(&marked).await?.items {
        obs.pods.insert(p.name_any(), true);
    }
    obs.budget = Api::<PodDisruptionBudget>::namespaced(ctx.kube.clone(), &ns)
        .get_metadata_opt(&budget_name(worker))
        .await?
        .is_some();
    obs.worker = Api::<Node>::all(ctx.kube.clone())
        .get_opt(worker)
        .await?
        .map(|n| Worker {
            name: worker.clone(),
            cordoned: n.spec.and_then(|s| s.unschedulable).unwrap_or(false),
            ready: n
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True"),
        });
    if step == AwaitingHost
        && let (Some(w), Some(cluster)) = (&obs.worker, &cluster)
        && !w.cordoned
        && w.ready
    {
        obs.host = Some(
            match crate::workload::snode::snode(ctx, cluster, worker).await {
                Ok(client) => client.check().await.map(|_| ()).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            },
        );
    }
    Ok(obs)
}

pub fn plan(at: At<'_>, obs: &Observed, _now: Timestamp) -> Noted<NodeOpsStep, Call, Fields> {
    let (op, node, step, seen) = (at.op, at.node, at.step, at.seen);
    use NodeOpsStep::*;
    use NodeStatus as S;
    let me = op.name_any();
    let worker = &node.spec.worker_node;
    if step == Holding {
        return hold(&me, worker, &obs.windows).into();
    }
    let (Some(cluster), Some(id)) = (seen.cluster, seen.node) else {
        return wait(format!(
            "StorageNode {} or its cluster has no control-plane id; waiting for it",
            node.name_any()
        ))
        .into();
    };
    let Some(found) = &seen.found else {
        return Plan::Fail(format!(
            "the control plane does not know node {id} (StorageNode {}); the window stopped at step {step}, and the worker's pods may still carry label {MAINTENANCE_LABEL}",
            node.name_any()
        ))
        .into();
    };
    let status = found.status;
    let unlabelled: Vec<String> = obs
        .pods
        .iter()
        .filter(|(_, l)| !**l)
        .map(|(p, _)| p.clone())
        .collect();
    let labelled: Vec<String> = obs
        .pods
        .iter()
        .filter(|(_, l)| **l)
        .map(|(p, _)| p.clone())
        .collect();
    let plan = match step {
        ShuttingDown => {
            if !unlabelled.is_empty() {
                call(
                    Call::Label {
                        pods: unlabelled.clone(),
                        value: Some(label_value(worker)),
                    },
                    format!(
                        "marking the storage-node pods of worker {worker} ({}) for the window's disruption budget",
                        unlabelled.join(", ")
                    ),
                )
            } else if !obs.budget {
                call(
                    Call::CreateBudget {
                        worker: worker.clone(),
                    },
                    format!(
                        "creating PodDisruptionBudget {} so a drain of worker {worker} waits for the node to shut down",
                        budget_name(worker)
                    ),
                )
            } else if status == S::Offline {
                advance(
                    Releasing,
                    format!("the node is offline; releasing worker {worker} to its drain"),
                )
            } else if matches!(status, S::InShutdown | S::InRestart) {
                wait(format!(
                    "the node is {status}; waiting for it to be offline before worker {worker} is released"
                ))
            } else {
                Plan::Call {
                    call: Call::Node(NodeCall::Shutdown(cluster, id)),
                    message: format!(
                        "shutting the node down for the maintenance of worker {worker} (it is {status})"
                    ),
                }
            }
        }
        Releasing => {
            if !obs.siblings_shutting_down.is_empty() {
                wait(format!(
                    "the budget of worker {worker} stays while the window of its other node is still shutting it down ({})",
                    obs.siblings_shutting_down.join(", ")
                ))
            } else if obs.budget {
                call(
                    Call::DeleteBudget {
                        worker: worker.clone(),
                    },
                    format!(
                        "deleting PodDisruptionBudget {}: worker {worker} may be drained",
                        budget_name(worker)
                    ),
                )
            } else {
                advance(
                    AwaitingHost,
                    format!(
                        "worker {worker} is released: drain it, do its maintenance, then uncordon it"
                    ),
                )
            }
        }
        AwaitingHost => match (&obs.worker, &obs.host) {
            (None, _) => wait(format!(
                "worker {worker} is not a Node of this cluster; waiting for it to come back"
            )),
            (Some(w), _) if w.cordoned => wait(format!(
                "worker {worker} is in maintenance; uncordon it when the maintenance is done and the node restarts"
            )),
            (Some(w), _) if !w.ready => wait(format!(
                "worker {worker} is uncordoned but not Ready; waiting for it"
            )),
            (_, Some(Err(e))) => wait(format!(
                "the storage-node API of worker {worker} does not answer yet ({e}); waiting for it"
            )),
            (_, Some(Ok(()))) => advance(
                Restarting,
                format!(
                    "worker {worker} is back and its storage-node API answers; restarting the node"
                ),
            ),
            (_, None) => wait(format!("waiting for worker {worker} to answer")),
        },
        Restarting => {
            if matches!(status, S::Online | S::InRestart) {
                advance(
                    Cleanup,
                    format!("the node is {status}; no restart call needed"),
                )
            } else {
                // A restart may be back before a look could see it: Cleanup is written
                // first and never calls it again.
                Plan::CallOnce {
                    to: Cleanup,
                    call: Call::Node(NodeCall::Restart(
                        cluster,
                        id,
                        NodeRestart {
                            force: status != S::Offline,
                            reattach_volume: op.spec.reattach_volume.unwrap_or(false),
                            ..NodeRestart::default()
                        },
                    )),
                    message: format!(
                        "restarting the node after the maintenance of worker {worker} (it is {status})"
                    ),
                    accepted: "the control plane accepted the restart of the node; waiting for it to be online".into(),
                }
            }
        }
        Cleanup => {
            if status != S::Online {
                wait(format!(
                    "the control plane reports the node {status}; waiting for it to be online"
                ))
            } else if !obs.siblings_shutting_down.is_empty() {
                succeed_leaving(worker, &obs.siblings_shutting_down)
            } else if !labelled.is_empty() {
                call(
                    Call::Label {
                        pods: labelled.clone(),
                        value: None,
                    },
                    format!(
                        "removing label {MAINTENANCE_LABEL} from the pods of worker {worker} ({})",
                        labelled.join(", ")
                    ),
                )
            } else if obs.budget {
                call(
                    Call::DeleteBudget {
                        worker: worker.clone(),
                    },
                    format!("deleting PodDisruptionBudget {}", budget_name(worker)),
                )
            } else {
                succeed(format!(
                    "the maintenance of worker {worker} is over: the node is online"
                ))
            }
        }
        other => Plan::Fail(format!("step {other} is not one of action HostMaintenance")),
    };
    plan.into()
}

fn succeed_leaving(worker: &str, siblings: &[String]) -> Plan<NodeOpsStep, Call, Fields> {
    succeed(format!(
        "the maintenance of worker {worker} is over for this node: it is online; the pods' label and budget stay for the window of its other node ({})",
        siblings.join(", ")
    ))
}

/// Holding: admitted when this window holds a claim, claims one when there is room (or
/// a sibling of the same worker holds one), waits otherwise. Pure.
pub fn hold(me: &str, worker: &str, w: &Windows) -> Plan<NodeOpsStep, Call, Fields> {
    if w.live.contains_key(me) {
        return advance(
            NodeOpsStep::ShuttingDown,
            format!("the maintenance window of worker {worker} is open"),
        );
    }
    let Some(resource_version) = w.resource_version.clone() else {
        return wait(format!(
            "the StorageCluster of worker {worker}'s node does not exist; waiting for it"
        ));
    };
    let others: BTreeSet<&str> = w.live.values().map(String::as_str).collect();
    if others.contains(worker) || (others.len() as i32) < w.limit {
        let mut claims: Vec<String> = w.live.keys().cloned().collect();
        claims.push(me.to_owned());
        return call(
            Call::Claim {
                cluster: w.cluster.clone(),
                resource_version,
                claims,
            },
            format!(
                "claiming a maintenance window for worker {worker} ({} of {} in use)",
                others.len(),
                w.limit
            ),
        );
    }
    Plan::Wait {
        message: format!(
            "queued: {} of {} maintenance windows are in use (workers {}); worker {worker} waits for one to end",
            others.len(),
            w.limit,
            others.into_iter().collect::<Vec<_>>().join(", ")
        ),
        after: HOLD_POLL,
        event: Some(QUEUED),
    }
}

pub async fn execute(
    _op: &StorageNodeOps,
    node: &StorageNode,
    call: &Call,
    ctx: &Context,
) -> Result<(), String> {
    let ns = node.namespace().unwrap_or_default();
    let said = |e: kube::Error| e.to_string();
    match call {
        Call::Node(call) => call.execute(ctx).await,
        Call::Claim {
            cluster,
            resource_version,
            claims,
        } => {
            let patch = json!({"metadata": {
                "resourceVersion": resource_version,
                "annotations": {WINDOWS_ANNOTATION: claims.join(",")},
            }});
            match Api::<StorageCluster>::namespaced(ctx.kube.clone(), &ns)
                .patch(cluster, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Err(format!(
                    "StorageCluster {cluster} changed while the window was claimed; it is claimed again from a fresh look"
                )),
                Err(e) => Err(said(e)),
            }
        }
        Call::Label { pods, value } => {
            let api: Api<Pod> = Api::namespaced(ctx.kube.clone(), &ns);
            let patch = Patch::Merge(json!({"metadata": {"labels": {MAINTENANCE_LABEL: value}}}));
            for pod in pods {
                match api
                    .patch_metadata(pod, &PatchParams::default(), &patch)
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(said(e)),
                }
            }
            Ok(())
        }
        Call::CreateBudget { worker } => {
            let budget: PodDisruptionBudget = serde_json::from_value(json!({
                "metadata": {
                    "name": budget_name(worker),
                    "labels": {simplyblock_api::keys::MANAGED_BY_LABEL: simplyblock_api::keys::MANAGED_BY_STORAGE_NODE_OPS},
                },
                "spec": {
                    "maxUnavailable": 0,
                    "selector": {"matchLabels": {MAINTENANCE_LABEL: label_value(worker)}},
                },
            }))
            .map_err(|e| e.to_string())?;
            match Api::<PodDisruptionBudget>::namespaced(ctx.kube.clone(), &ns)
                .create(&PostParams::default(), &budget)
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(said(e)),
            }
        }
        Call::DeleteBudget { worker } => delete_budget(ctx, &ns, worker).await.map_err(said),
    }
}

async fn delete_budget(ctx: &Context, ns: &str, worker: &str) -> Result<(), kube::Error> {
    match Api::<PodDisruptionBudget>::namespaced(ctx.kube.clone(), ns)
        .delete(&budget_name(worker), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes what a window leaves on `worker` (the pods' label, the budget) in `ns`. The
/// markers stay while another window of the worker has not ended. Returns what could not
/// be removed, as a sentence, if anything.
pub async fn teardown(ctx: &Context, ns: &str, worker: &str) -> Result<Option<String>, ops::Error> {
    let ops_api: Api<StorageNodeOps> = Api::namespaced(ctx.kube.clone(), ns);
    let nodes: Api<StorageNode> = Api::namespaced(ctx.kube.clone(), ns);
    let workers: BTreeMap<String, String> = nodes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|n| (n.name_any(), n.spec.worker_node))
        .collect();
    let open = ops_api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(is_window)
        .any(|o| workers.get(&o.spec.node_ref).map(String::as_str) == Some(worker));
    if open {
        return Ok(None);
    }
    let mut left = Vec::new();
    let pods: Api<Pod> = Api::namespaced(ctx.kube.clone(), ns);
    let marked =
        ListParams::default().labels(&format!("{MAINTENANCE_LABEL}={}", label_value(worker)));
    let unlabel = Patch::Merge(json!({"metadata": {"labels": {MAINTENANCE_LABEL: null}}}));
    for p in pods.list_metadata(&marked).await?.items {
        if let Err(e) = pods
            .patch_metadata(&p.name_any(), &PatchParams::default(), &unlabel)
            .await
        {
            left.push(format!(
                "label {MAINTENANCE_LABEL} on pod {} ({e})",
                p.name_any()
            ));
        }
    }
    if let Err(e) = delete_budget(ctx, ns, worker).await {
        left.push(format!("PodDisruptionBudget {} ({e})", budget_name(worker)));
    }
    Ok((!left.is_empty()).then(|| {
        format!(
            "the finished maintenance window of worker {worker} left {}; remove them by hand, or they keep blocking the worker's drains",
            left.join(" and ")
        )
    }))
}

/// The operation left `step` after `seconds`: how long a window waited for its turn.
pub fn step_left(ctx: &Context, op: &StorageNodeOps, step: NodeOpsStep, seconds: f64) {
    if step == NodeOpsStep::Holding {
        ctx.metrics.observe(
            "simplyblock_storagenode_maintenance_hold_seconds",
            vec![("node", op.spec.node_ref.clone())],
            seconds,
        );
    }
}

/// The window's own events as it moves on.
pub fn advance_event(
    op: &StorageNodeOps,
    from: NodeOpsStep,
    to: NodeOpsStep,
) -> Option<(&'static str, String)> {
    let node = &op.spec.node_ref;
    match (from, to) {
        (NodeOpsStep::Holding, NodeOpsStep::ShuttingDown) => Some((
            "MaintenanceStarted",
            format!("the maintenance window of StorageNode {node} is open: the node is shut down"),
        )),
        (NodeOpsStep::Releasing, NodeOpsStep::AwaitingHost) => Some((
            "MaintenanceReleased",
            format!(
                "StorageNode {node} is offline and its worker released: drain it, do its maintenance, then uncordon it"
            ),
        )),
        (NodeOpsStep::AwaitingHost, NodeOpsStep::Restarting) => Some((
            "MaintenanceHostReturned",
            format!("the worker of StorageNode {node} is back; the node is restarted"),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(limit: i32, live: &[(&str, &str)]) -> Windows {
        Windows {
            cluster: "sb".into(),
            resource_version: Some("7".into()),
            limit,
            live: live
                .iter()
                .map(|(o, w)| (o.to_string(), w.to_string()))
                .collect(),
        }
    }

    fn claimed(plan: &Plan<NodeOpsStep, Call, Fields>) -> Option<Vec<String>> {
        match plan {
            Plan::Call {
                call: Call::Claim { claims, .. },
                ..
            } => Some(claims.clone()),
            _ => None,
        }
    }

    #[test]
    fn a_window_opens_while_fewer_workers_than_the_limit_hold_one() {
        assert_eq!(
            claimed(&hold("b", "w2", &windows(2, &[("a", "w1")]))),
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
        let full = hold("b", "w2", &windows(1, &[("a", "w1")]));
        let Plan::Wait { message, event, .. } = &full else {
            panic!("{full:?}")
        };
        assert_eq!(*event, Some(QUEUED));
        assert!(
            message.contains("1 of 1") && message.contains("w1"),
            "{message}"
        );
        let open = hold("a", "w1", &windows(1, &[("a", "w1")]));
        assert!(matches!(
            open,
            Plan::Advance {
                to: ops::Move::To(NodeOpsStep::ShuttingDown),
                ..
            }
        ));
    }

    #[test]
    fn sibling_windows_of_one_worker_count_as_one() {
        // The worker's other node holds a window: this one joins it even at the limit.
        assert_eq!(
            claimed(&hold("a1", "w1", &windows(1, &[("a0", "w1")]))),
            Some(vec!["a0".to_owned(), "a1".to_owned()])
        );
        // Two nodes of w1 in windows use one of two: w2 still gets the other.
        assert!(claimed(&hold("b", "w2", &windows(2, &[("a0", "w1"), ("a1", "w1")]))).is_some());
    }

    #[test]
    fn the_limit_is_the_clusters_effective_value_else_derived_and_never_below_one() {
        let mut c: StorageCluster = serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
            "metadata": {"name": "sb"},
            "spec": {"maxSubsystemCount": 10, "vcpuCount": 4, "maxConcurrentWorkerRestarts": 3,
                     "stripe": {"dataChunks": 1, "parityChunks": 1}},
        }))
        .expect("cluster");
        assert_eq!(window_limit(&c), 1, "no fault tolerance known: one");
        c.status = Some(Default::default());
        c.status.as_mut().expect("status").max_fault_tolerance = Some(2);
        assert_eq!(window_limit(&c), 2);
        c.status
            .as_mut()
            .expect("status")
            .max_concurrent_worker_restarts = Some(0);
        assert_eq!(window_limit(&c), 1);
    }

    #[test]
    fn budget_names_stay_within_an_object_name() {
        let long = "w".repeat(300);
        assert!(budget_name(&long).len() <= 253);
        assert_eq!(budget_name("w1"), "simplyblock-maintenance-w1");
    }
}

//! The StorageClusterOps controller: every action as its step graph, each step a
//! predicate over the control plane's current state and at most one guarded call.
//!
//! The phase machine, the cluster lock (`StorageCluster.status.activeOpsRef`), queueing,
//! abort, deadlines and the standard events are the shared [`crate::runtime::ops`] runtime; this
//! file is what the steps observe ([`observe`]), decide ([`plan`], pure) and call.
//!
//! | action | steps | call, skipped when | done when |
//! |---|---|---|---|
//! | Activate | Requesting → Awaiting | activate; active or in_activation. Gate: enough online nodes for the stripe | active |
//! | Expand | Requesting → Awaiting | expand, at most once (Awaiting is written first); in_expansion | active |
//! | Shutdown | Requesting → Awaiting | shutdown; every node in_shutdown/offline | every node offline, cluster not active |
//! | Start | Requesting → Awaiting | start; active, or every node in_restart/online | active |
//! | Restart | ShuttingDown → Starting | shutdown, then start, as above | not active, then active |
//! | CancelTask | Requesting → Awaiting | cancel once (404 is success); task no longer open | task no longer open |
//! | RollingRestart | per node, see [`plan_rolling`] | | nodeIndex = len(nodes) |

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use serde::Serialize;
use simplyblock_api::StorageCluster;
use simplyblock_api::common::Stripe;
use simplyblock_api::storage_cluster_ops::{
    ClusterAction, ClusterOpsStep, RollingRestartStatus, StorageClusterOps,
};
use simplyblock_controlplane::{
    ClusterStatus, Method, NodeRestart, NodeStatus, StorageNode as CpNode, Task, TaskStatus, Uuid,
};
use simplyblock_statemachine::{Machine, State};

use crate::runtime::context::Context;
use crate::runtime::ops::{self, Move, OpsResource, Plan, Steps};

pub const FINALIZER: &str = "storage.simplyblock.io/storageclusterops-finalizer";
const MANAGER: &str = "storageclusterops-controller";
/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "storageclusterops";
const METRIC_PREFIX: &str = "simplyblock_storagecluster_";
/// The label every storage-node pod of a cluster carries (the workload's selector).
pub const POD_CLUSTER_LABEL: &str = "storage.simplyblock.io/cluster";

/// The message written before the expand call; still there in Awaiting, nothing was
/// recorded after it.
const EXPAND_PENDING: &str = "calling expand: the cluster grows onto its new storage nodes";

/// Seconds after entering Awaiting before an expand record without its answer counts as
/// an operator stopped between the two.
const EXPAND_RECORD_GRACE: f64 = 10.0;

/// How often an awaited step looks at the control plane.
const AWAIT_POLL: Duration = Duration::from_secs(1);

/// StorageClusterOps' own status fields, beside the common ones.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fields {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolling_restart: Option<RollingRestartStatus>,
}

impl OpsResource for StorageClusterOps {
    type Target = StorageCluster;
    const FINALIZER: &'static str = FINALIZER;
    const MANAGER: &'static str = MANAGER;
    const METRIC_PREFIX: &'static str = METRIC_PREFIX;
    const TARGET_LABEL: &'static str = "cluster";
    // The cluster's steady state records them in `status.recentOperations`, then prunes.
    const RUNTIME_PRUNES_HISTORY: bool = false;

    fn target_name(&self) -> &str {
        &self.spec.cluster_ref
    }
    type Fields = Fields;
    fn kind_status(&self) -> Fields {
        Fields {
            rolling_restart: self.status.as_ref().and_then(|s| s.rolling_restart.clone()),
        }
    }
    fn lock_holder(target: &StorageCluster) -> Option<&str> {
        target.status.as_ref()?.active_ops_ref.as_deref()
    }
}

/// What the steps read: the control plane's view of the cluster, its nodes and tasks, and
/// (for RollingRestart's pod steps) the storage-node pods on one worker.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The control plane's id of the cluster, from StorageCluster.status.uuid.
    pub uuid: Option<Uuid>,
    /// `None` with a uuid: the control plane does not know the cluster.
    pub cluster: Option<simplyblock_controlplane::Cluster>,
    pub nodes: Vec<CpNode>,
    pub tasks: Vec<Task>,
    pub pods: Vec<PodView>,
}

/// A storage-node pod, as the pod steps need it.
#[derive(Clone, Debug, PartialEq)]
pub struct PodView {
    pub name: String,
    pub created: Option<Timestamp>,
    pub ready: bool,
    pub deleting: bool,
}

/// The one side effect a step may issue.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    Activate(Uuid),
    Expand(Uuid),
    Shutdown(Uuid),
    Start(Uuid),
    CancelTask(Uuid, Uuid),
    ShutdownNode(Uuid, Uuid),
    RestartNode(Uuid, Uuid),
    /// Delete these pods (the node's storage-node pod, replaced by its DaemonSet).
    DeletePods(Vec<String>),
}

/// The steps of every action (the runtime restores the machine from the kind's graphs).
#[derive(Clone, Copy, Default)]
pub struct ClusterSteps;

impl Steps<StorageClusterOps> for ClusterSteps {
    type Obs = Observed;
    type Call = Call;

    async fn observe(
        &self,
        op: &StorageClusterOps,
        target: &StorageCluster,
        machine: &Machine<'static, ClusterOpsStep>,
        ctx: &Context,
    ) -> Result<Observed, ops::Error> {
        observe(op, target, machine.state(), ctx).await
    }

    fn plan(
        &self,
        op: &StorageClusterOps,
        target: &StorageCluster,
        machine: &Machine<'static, ClusterOpsStep>,
        obs: &Observed,
        now: Timestamp,
    ) -> ops::Noted<ClusterOpsStep, Call, Fields> {
        plan(op, target, machine, obs, now).into()
    }

    async fn execute(
        &self,
        op: &StorageClusterOps,
        _target: &StorageCluster,
        call: &Call,
        ctx: &Context,
    ) -> Result<(), String> {
        execute(op, call, ctx).await
    }

    fn advance_event(
        &self,
        op: &StorageClusterOps,
        from: ClusterOpsStep,
        to: Move<ClusterOpsStep>,
    ) -> Option<(&'static str, String)> {
        if from == ClusterOpsStep::Rebalancing && to == Move::To(ClusterOpsStep::CheckingPeers) {
            let rr = op.status.as_ref()?.rolling_restart.as_ref()?;
            let node = rr.nodes.get(usize::try_from(rr.node_index).ok()?)?;
            return Some((
                "NodeRestarted",
                format!("storage node {node} restarted and the cluster rebalanced"),
            ));
        }
        None
    }

    fn step_left(&self, ctx: &Context, op: &StorageClusterOps, step: ClusterOpsStep, seconds: f64) {
        if step == ClusterOpsStep::CheckingPeers {
            ctx.metrics.observe(
                &format!("{METRIC_PREFIX}rolling_restart_peer_hold_seconds"),
                vec![("cluster", op.spec.cluster_ref.clone())],
                seconds,
            );
        }
    }

    fn kind_status_written(&self, ctx: &Context, op: &StorageClusterOps, kind: &Fields) {
        let Some(rr) = &kind.rolling_restart else {
            return;
        };
        let labels = || vec![("cluster", op.spec.cluster_ref.clone())];
        ctx.metrics.set(
            &format!("{METRIC_PREFIX}rolling_restart_node_count"),
            labels(),
            rr.nodes.len() as f64,
        );
        ctx.metrics.set(
            &format!("{METRIC_PREFIX}rolling_restart_node_index_count"),
            labels(),
            f64::from(rr.node_index),
        );
    }

    fn succeed_event(&self, op: &StorageClusterOps) -> Option<(&'static str, String)> {
        if op.spec.action == ClusterAction::RollingRestart {
            // The last node's restart ends the operation instead of advancing it.
            let rr = op.status.as_ref()?.rolling_restart.as_ref()?;
            let node = rr.nodes.last()?;
            return Some((
                "NodeRestarted",
                format!("storage node {node} restarted and the cluster rebalanced"),
            ));
        }
        let task = &op.spec.cancel_task.as_ref()?.task_id;
        (op.spec.action == ClusterAction::CancelTask).then(|| {
            (
                "TaskCanceled",
                format!("control-plane task {task} is no longer pending or running"),
            )
        })
    }
}

/// Runs the controller until the operator stops.
pub async fn run(ctx: Arc<Context>) {
    let steps = ClusterSteps;
    ops::run(CONTROLLER, ops::controller(&ctx), steps, ctx).await
}

fn rolling(op: &StorageClusterOps) -> Option<&RollingRestartStatus> {
    op.status.as_ref()?.rolling_restart.as_ref()
}

/// The node RollingRestart is at, and its worker's name in the control plane.
fn current_node<'a>(op: &StorageClusterOps, obs: &'a Observed) -> Option<&'a CpNode> {
    let rr = rolling(op)?;
    let id = rr.nodes.get(usize::try_from(rr.node_index).ok()?)?;
    obs.nodes.iter().find(|n| n.id.to_string() == *id)
}

async fn observe(
    op: &StorageClusterOps,
    target: &StorageCluster,
    step: ClusterOpsStep,
    ctx: &Context,
) -> Result<Observed, ops::Error> {
    let mut obs = Observed {
        uuid: target
            .status
            .as_ref()
            .and_then(|s| s.uuid.as_deref())
            .and_then(|u| u.parse().ok()),
        ..Observed::default()
    };
    let Some(uuid) = obs.uuid else {
        return Ok(obs);
    };
    let cp = ctx.control_plane()?;
    obs.cluster = match cp.get_cluster(uuid).await {
        Ok(c) => Some(c),
        Err(e) if e.is_not_found() => return Ok(obs),
        Err(e) => return Err(e.into()),
    };
    match op.spec.action {
        ClusterAction::Expand => {}
        ClusterAction::CancelTask => obs.tasks = cp.list_tasks(uuid).await?,
        _ => obs.nodes = cp.list_storage_nodes(uuid).await?,
    }
    if matches!(
        step,
        ClusterOpsStep::RefreshingPod | ClusterOpsStep::AwaitingPod
    ) && let Some(node) = current_node(op, &obs)
    {
        obs.pods = storage_node_pods(ctx, op, &node.hostname).await?;
    }
    Ok(obs)
}

/// The storage-node pods of the operation's cluster on `worker`.
async fn storage_node_pods(
    ctx: &Context,
    op: &StorageClusterOps,
    worker: &str,
) -> Result<Vec<PodView>, ops::Error> {
    let pods: Api<Pod> = Api::namespaced(ctx.kube.clone(), &op.namespace().unwrap_or_default());
    let params = ListParams::default()
        .labels(&format!("{POD_CLUSTER_LABEL}={}", op.spec.cluster_ref))
        .fields(&format!("spec.nodeName={worker}"));
    Ok(pods
        .list(&params)
        .await?
        .items
        .into_iter()
        .map(|p| PodView {
            name: p.name_any(),
            created: p.metadata.creation_timestamp.as_ref().map(|t| t.0),
            deleting: p.metadata.deletion_timestamp.is_some(),
            ready: p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        })
        .collect())
}

async fn execute(op: &StorageClusterOps, call: &Call, ctx: &Context) -> Result<(), String> {
    let cp = ctx.control_plane().map_err(|e| e.to_string())?;
    let result = match call {
        Call::Activate(c) => cp.activate_cluster(*c).await,
        Call::Expand(c) => cp.expand_cluster(*c).await,
        Call::Shutdown(c) => cp.shutdown_cluster(*c).await,
        Call::Start(c) => cp.start_cluster(*c).await,
        Call::ShutdownNode(c, n) => cp.shutdown_storage_node(*c, *n, false).await,
        Call::RestartNode(c, n) => {
            cp.restart_storage_node(*c, *n, &NodeRestart::default())
                .await
        }
        Call::CancelTask(c, t) => {
            // The control plane has no cancel route yet: a 404 means there is nothing to
            // cancel through it, and the task's own state decides the step.
            let path = format!("/clusters/{c}/tasks/{t}/cancel");
            return match cp.raw(Method::POST, &path, &[], None).await {
                Ok(r) if r.status < 300 || r.status == 404 => Ok(()),
                Ok(r) => Err(format!(
                    "POST {path} answered {}: {}",
                    r.status,
                    String::from_utf8_lossy(&r.body)
                )),
                Err(e) => Err(e.to_string()),
            };
        }
        Call::DeletePods(names) => {
            let pods: Api<Pod> =
                Api::namespaced(ctx.kube.clone(), &op.namespace().unwrap_or_default());
            for name in names {
                match pods.delete(name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(format!("deleting pod {name}: {e}")),
                }
            }
            return Ok(());
        }
    };
    result.map_err(|e| e.to_string())
}

fn wait(message: String) -> Plan<ClusterOpsStep, Call, Fields> {
    Plan::Wait {
        message,
        after: AWAIT_POLL,
        event: None,
    }
}

fn advance(to: ClusterOpsStep, message: impl Into<String>) -> Plan<ClusterOpsStep, Call, Fields> {
    Plan::Advance {
        to: Move::To(to),
        message: message.into(),
        kind_status: None,
    }
}

fn succeed(message: impl Into<String>) -> Plan<ClusterOpsStep, Call, Fields> {
    Plan::Succeed {
        message: message.into(),
        kind_status: None,
    }
}

fn live(nodes: &[CpNode]) -> impl Iterator<Item = &CpNode> {
    nodes.iter().filter(|n| n.status != NodeStatus::Removed)
}

fn all_nodes_in(nodes: &[CpNode], states: &[NodeStatus]) -> bool {
    live(nodes).all(|n| states.contains(&n.status))
}

/// The next thing a step does, from one observation. Pure.
pub fn plan(
    op: &StorageClusterOps,
    target: &StorageCluster,
    machine: &Machine<'_, ClusterOpsStep>,
    obs: &Observed,
    now: Timestamp,
) -> Plan<ClusterOpsStep, Call, Fields> {
    use ClusterOpsStep::*;
    let name = &op.spec.cluster_ref;
    let Some(uuid) = obs.uuid else {
        return wait(format!(
            "StorageCluster {name} has no control-plane id yet; waiting for it to be created"
        ));
    };
    let Some(cluster) = &obs.cluster else {
        return wait(format!(
            "the control plane does not know cluster {uuid} (StorageCluster {name}); waiting for it to reappear"
        ));
    };
    let status = cluster.status;
    let step = machine.state();
    match (op.spec.action, step) {
        (ClusterAction::Activate, Requesting) => {
            if matches!(status, ClusterStatus::Active | ClusterStatus::InActivation) {
                return advance(
                    Awaiting,
                    format!("cluster is {status}; no activate call needed"),
                );
            }
            let stripe = target.spec.stripe.clone().unwrap_or_default();
            let need = stripe.minimum_nodes().unwrap_or(1) as usize;
            let online = live(&obs.nodes)
                .filter(|n| n.status == NodeStatus::Online)
                .count();
            if online < need {
                return Plan::Wait {
                    message: stripe_refusal(&stripe, online, need),
                    after: Duration::from_secs(5),
                    event: Some("StripeNodesNotReady"),
                };
            }
            Plan::Call {
                call: Call::Activate(uuid),
                message: format!("activating: {online} storage nodes online"),
            }
        }
        (ClusterAction::Expand, Requesting) => {
            if status == ClusterStatus::InExpansion {
                return advance(Awaiting, "the cluster is already expanding");
            }
            // The cluster reads active before the expansion starts and after it ends, so
            // no look can tell whether a call went out: Awaiting is written first and
            // never calls.
            Plan::CallOnce {
                to: Awaiting,
                call: Call::Expand(uuid),
                message: EXPAND_PENDING.into(),
                accepted: "the control plane accepted the expansion; waiting for active".into(),
            }
        }
        (ClusterAction::Expand, Awaiting) => {
            let pending = op
                .status
                .as_ref()
                .and_then(|s| s.message.as_deref())
                .is_some_and(|m| m.ends_with(EXPAND_PENDING));
            // A read from a cache may still show the record written just before the call
            // while the answer's record is on its way: give it time to arrive.
            let settled = ops::step_entered(machine)
                .is_none_or(|e| now.duration_since(e).as_secs_f64() >= EXPAND_RECORD_GRACE);
            match status {
                // Seen expanding: the call arrived, whatever the record says.
                ClusterStatus::InExpansion => {
                    wait("the cluster is expanding; waiting for active".into())
                }
                // Waits keep the record's words, so a later look still knows.
                _ if pending && !settled => wait(format!(
                    "cluster {status}, no answer on record yet — {EXPAND_PENDING}"
                )),
                ClusterStatus::Active if pending => Plan::Fail(format!(
                    "the operator stopped between recording the expand call and its answer, and the cluster reads {status}: whether the control plane received the call is unknown, and it is not repeated; if the new storage nodes did not join, create a new Expand"
                )),
                ClusterStatus::Active => succeed("the cluster is active"),
                _ if pending => wait(format!(
                    "cluster {status}, no answer on record — {EXPAND_PENDING}"
                )),
                _ => wait(format!(
                    "the control plane reports the cluster {status}; waiting for active"
                )),
            }
        }
        (ClusterAction::Shutdown, Requesting) | (ClusterAction::Restart, ShuttingDown)
            if all_nodes_in(&obs.nodes, &[NodeStatus::InShutdown, NodeStatus::Offline]) =>
        {
            if step == ShuttingDown {
                return shut_down_or_wait(status, &obs.nodes);
            }
            advance(
                Awaiting,
                "every node is shutting down or offline; no shutdown call needed",
            )
        }
        (ClusterAction::Shutdown, Requesting) | (ClusterAction::Restart, ShuttingDown) => {
            Plan::Call {
                call: Call::Shutdown(uuid),
                message: "shutting the cluster down".into(),
            }
        }
        (ClusterAction::Shutdown, Awaiting) => match shut_down_or_wait(status, &obs.nodes) {
            Plan::Advance { .. } => succeed("the cluster is shut down: every node is offline"),
            other => other,
        },
        (ClusterAction::Start, Requesting) => {
            if status == ClusterStatus::Active
                || all_nodes_in(&obs.nodes, &[NodeStatus::InRestart, NodeStatus::Online])
            {
                return advance(
                    Awaiting,
                    format!(
                        "the cluster is {status} and its nodes are starting or online; no start call needed"
                    ),
                );
            }
            Plan::Call {
                call: Call::Start(uuid),
                message: "starting the cluster".into(),
            }
        }
        (ClusterAction::Restart, Starting) => {
            if status == ClusterStatus::Active {
                succeed("the cluster is active again")
            } else if all_nodes_in(&obs.nodes, &[NodeStatus::InRestart, NodeStatus::Online]) {
                wait(format!(
                    "starting: the cluster is {status}; waiting for active"
                ))
            } else {
                Plan::Call {
                    call: Call::Start(uuid),
                    message: "starting the cluster".into(),
                }
            }
        }
        (ClusterAction::Activate | ClusterAction::Start, Awaiting) => {
            if status == ClusterStatus::Active {
                succeed("the cluster is active")
            } else {
                wait(format!(
                    "the control plane reports the cluster {status}; waiting for active"
                ))
            }
        }
        (ClusterAction::CancelTask, _) => plan_cancel(op, uuid, step, &obs.tasks),
        (ClusterAction::RollingRestart, _) => plan_rolling(op, machine, uuid, cluster, obs, now),
        (action, step) => Plan::Fail(format!(
            "step {step} is not part of action {}; the stored status was edited by hand",
            simplyblock_statemachine::Action::name(action)
        )),
    }
}

fn stripe_refusal(stripe: &Stripe, online: usize, need: usize) -> String {
    let (d, p) = stripe.scheme();
    format!(
        "StripeNodesNotReady: the stripe {d}+{p} needs at least {need} online storage nodes and {online} are online; activation waits for the others"
    )
}

fn shut_down_or_wait(
    status: ClusterStatus,
    nodes: &[CpNode],
) -> Plan<ClusterOpsStep, Call, Fields> {
    let offline = all_nodes_in(nodes, &[NodeStatus::Offline]);
    if offline && status != ClusterStatus::Active {
        return advance(
            ClusterOpsStep::Starting,
            "the cluster is shut down; starting it",
        );
    }
    let waiting = live(nodes)
        .filter(|n| n.status != NodeStatus::Offline)
        .count();
    wait(format!(
        "shutting down: {waiting} node(s) not offline yet, cluster {status}"
    ))
}

fn task_open(tasks: &[Task], task: Uuid) -> bool {
    tasks.iter().any(|t| {
        t.id == task
            && !t.canceled
            && matches!(
                t.status,
                TaskStatus::New | TaskStatus::Running | TaskStatus::Suspended
            )
    })
}

fn plan_cancel(
    op: &StorageClusterOps,
    cluster: Uuid,
    step: ClusterOpsStep,
    tasks: &[Task],
) -> Plan<ClusterOpsStep, Call, Fields> {
    let text = op
        .spec
        .cancel_task
        .as_ref()
        .map(|c| c.task_id.as_str())
        .unwrap_or("");
    let Ok(task) = text.parse::<Uuid>() else {
        return Plan::Fail(format!(
            "spec.cancelTask.taskID {text:?} is not a control-plane task id (a UUID); create a new operation with the id from the StorageCluster's status.tasks"
        ));
    };
    let open = task_open(tasks, task);
    match (step, open) {
        // The task stays open after a cancel that the control plane answers 404 (it has
        // no such route): one call, then Awaiting waits for the task to leave the queue.
        (ClusterOpsStep::Requesting, true) => Plan::CallOnce {
            to: ClusterOpsStep::Awaiting,
            call: Call::CancelTask(cluster, task),
            message: format!("canceling task {task}"),
            accepted: format!("cancel of task {task} sent; waiting for it to leave the queue"),
        },
        (ClusterOpsStep::Requesting, false) => advance(
            ClusterOpsStep::Awaiting,
            format!("task {task} is not pending or running; nothing to cancel"),
        ),
        (_, false) => succeed(format!("task {task} is no longer pending or running")),
        (_, true) => wait(format!("waiting for task {task} to leave the queue")),
    }
}

/// RollingRestart, per node of `status.rollingRestart.nodes` (written once, at the first
/// CheckingPeers):
///
/// | step | call, skipped when | done when |
/// |---|---|---|
/// | CheckingPeers | — | every other node online (else hold, `PeerNodeNotOnline`) |
/// | ShuttingDownNode | node shutdown; in_shutdown or offline | offline |
/// | RefreshingPod | delete the pods older than the step; none left | no pod older than the step |
/// | AwaitingPod | — | a replacement pod Ready |
/// | RestartingNode | node restart; in_restart or online | online |
/// | Rebalancing | — | the cluster is not rebalancing: nodeIndex + 1, next node |
pub fn plan_rolling(
    op: &StorageClusterOps,
    machine: &Machine<'_, ClusterOpsStep>,
    cluster_id: Uuid,
    cluster: &simplyblock_controlplane::Cluster,
    obs: &Observed,
    now: Timestamp,
) -> Plan<ClusterOpsStep, Call, Fields> {
    use ClusterOpsStep::*;
    let step = machine.state();
    let rr = match rolling(op) {
        Some(rr) if !rr.nodes.is_empty() => rr.clone(),
        _ => {
            let nodes: Vec<String> = live(&obs.nodes).map(|n| n.id.to_string()).collect();
            if nodes.is_empty() {
                return Plan::Fail("the cluster has no storage nodes to restart".into());
            }
            let count = nodes.len();
            return Plan::Record {
                kind_status: rr_status(&RollingRestartStatus {
                    nodes,
                    node_index: 0,
                }),
                message: format!("restarting {count} storage node(s) one at a time"),
            };
        }
    };
    let total = rr.nodes.len();
    let index = usize::try_from(rr.node_index).unwrap_or(0);
    let Some(id) = rr.nodes.get(index) else {
        return Plan::Succeed {
            message: format!("all {total} storage nodes restarted"),
            kind_status: None,
        };
    };
    let prefix = format!("Node {}/{total} ({id})", index + 1);
    let Some(node) = obs.nodes.iter().find(|n| n.id.to_string() == *id) else {
        // Removed since the list was written: nothing to restart there.
        let next = RollingRestartStatus {
            node_index: rr.node_index + 1,
            ..rr
        };
        return Plan::Record {
            kind_status: rr_status(&next),
            message: format!("{prefix}: no longer in the cluster; skipped"),
        };
    };
    let refresh = op
        .spec
        .rolling_restart
        .as_ref()
        .is_some_and(|r| r.refresh_snode_api);
    let msg = |what: &str| format!("{prefix}: {what}");
    match step {
        CheckingPeers => {
            let down: Vec<String> = live(&obs.nodes)
                .filter(|n| n.id != node.id && n.status != NodeStatus::Online)
                .map(|n| format!("{} {}", n.id, n.status))
                .collect();
            if down.is_empty() {
                advance(ShuttingDownNode, msg("ShuttingDownNode"))
            } else {
                Plan::Wait {
                    message: msg(&format!("waiting for peer nodes ({})", down.join(", "))),
                    after: Duration::from_secs(5),
                    event: Some("PeerNodeNotOnline"),
                }
            }
        }
        ShuttingDownNode => match node.status {
            NodeStatus::Offline => advance(
                if refresh {
                    RefreshingPod
                } else {
                    RestartingNode
                },
                msg(if refresh {
                    "RefreshingPod"
                } else {
                    "RestartingNode"
                }),
            ),
            NodeStatus::InShutdown => wait(msg("ShuttingDownNode (in_shutdown)")),
            _ => Plan::Call {
                call: Call::ShutdownNode(cluster_id, node.id),
                message: msg("ShuttingDownNode"),
            },
        },
        RefreshingPod => {
            // "Old" is older than this step: a replacement the DaemonSet made after the
            // delete is never deleted again, with no flag to remember the delete.
            let entered = ops::step_entered(machine);
            let old: Vec<&PodView> = obs
                .pods
                .iter()
                .filter(|p| p.created.is_none_or(|c| entered.is_none_or(|e| c < e)))
                .collect();
            if old.is_empty() {
                return advance(AwaitingPod, msg("AwaitingPod"));
            }
            let live: Vec<String> = old
                .iter()
                .filter(|p| !p.deleting)
                .map(|p| p.name.clone())
                .collect();
            if live.is_empty() {
                return wait(msg("RefreshingPod (the old pod is terminating)"));
            }
            // The entry time is rounded up to the second and pod creation times down: a
            // replacement made within the entry's second would look older than the step.
            // Deleting only from the entry's next second on keeps every replacement newer.
            if let Some(e) = entered
                && now < e
            {
                return Plan::Wait {
                    message: msg("RefreshingPod"),
                    after: Duration::try_from(now.duration_until(e)).unwrap_or(AWAIT_POLL),
                    event: None,
                };
            }
            Plan::Call {
                call: Call::DeletePods(live),
                message: msg("RefreshingPod"),
            }
        }
        AwaitingPod => {
            if obs.pods.iter().any(|p| p.ready && !p.deleting) {
                advance(RestartingNode, msg("RestartingNode"))
            } else {
                wait(msg(&format!(
                    "AwaitingPod (no Ready storage-node pod of cluster {} on worker {} yet; is the DaemonSet scheduling there?)",
                    op.spec.cluster_ref, node.hostname
                )))
            }
        }
        RestartingNode => match node.status {
            NodeStatus::Online => advance(Rebalancing, msg("Rebalancing")),
            NodeStatus::InRestart => wait(msg("RestartingNode (in_restart)")),
            _ => Plan::Call {
                call: Call::RestartNode(cluster_id, node.id),
                message: msg("RestartingNode"),
            },
        },
        Rebalancing => {
            if cluster.is_re_balancing {
                return wait(msg("Rebalancing"));
            }
            let next = RollingRestartStatus {
                node_index: rr.node_index + 1,
                nodes: rr.nodes.clone(),
            };
            if index + 1 >= total {
                Plan::Succeed {
                    message: format!("all {total} storage nodes restarted"),
                    kind_status: Some(rr_status(&next)),
                }
            } else {
                Plan::Advance {
                    to: Move::To(CheckingPeers),
                    message: format!(
                        "Node {}/{total} ({}): CheckingPeers",
                        index + 2,
                        next.nodes[index + 1]
                    ),
                    kind_status: Some(rr_status(&next)),
                }
            }
        }
        other => Plan::Fail(format!(
            "step {} is not part of RollingRestart; the stored status was edited by hand",
            other.name()
        )),
    }
}

fn rr_status(rr: &RollingRestartStatus) -> Fields {
    Fields {
        rolling_restart: Some(rr.clone()),
    }
}

#[cfg(test)]
#[path = "ops_tests.rs"]
mod tests;

//! The StorageNodeOps controller: each action as its step graph, each step a predicate
//! over the control plane's view of the node and at most one guarded call.
//!
//! The phase machine, the node lock (`StorageNode.status.activeOpsRef`), queueing, abort,
//! deadlines and the standard events are the shared [`crate::runtime::ops`] runtime; this file is
//! what the steps observe ([`observe`]), decide ([`plan`], pure) and call.
//!
//! | action | steps | call, skipped when | done when |
//! |---|---|---|---|
//! | Shutdown | Requesting → Awaiting | shutdown; offline, in_shutdown or in_restart | offline |
//! | Suspend | Requesting → Awaiting | suspend; suspended | suspended |
//! | Resume | Requesting → Awaiting | resume; online | online |
//! | Restart | Requesting → Departing → Awaiting | restart, once (Departing is written first); in_restart. Unforced only from offline | left online, then online |
//!
//! | Migrate | Preparing → Relocating → AwaitingNode → Promoting | enroll the target; restart at the target's address, once; promote, re-point the StorageNode, unenroll the source | target answers and is published; online at the target; promoted and re-pointed |
//! | HostMaintenance | Holding → ShuttingDown → Releasing → AwaitingHost → Restarting → Cleanup | claim a window; label pods, budget, shutdown; delete the budget; none; restart, once; unmark | claimed; offline; budget gone; worker back and answering; on record; online and unmarked |
//!
//! Migrate and HostMaintenance are admitted only while the node's cluster is active in
//! the control plane and not rebalancing (`ClusterNotReady` keeps them Pending); the
//! others are not gated. Remove ([`remove`]), Migrate ([`migrate`]) and HostMaintenance
//! ([`maintenance`]) have a module each: what they observe beside the node, their pure
//! plan and their calls.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Map, Value};
use simplyblock_api::storage_node_ops::{NodeAction, NodeOpsStep, StorageNodeOps};
use simplyblock_api::{StorageCluster, StorageNode};
use simplyblock_controlplane::{
    ClusterStatus, NodeRestart, NodeStatus, StorageNode as CpNode, Uuid,
};
use simplyblock_statemachine::Machine;

use crate::runtime::context::Context;
use crate::runtime::ops::{self, Move, OpsResource, Plan, Steps};

pub mod maintenance;
pub mod migrate;
pub mod remove;
pub mod system_filter;

pub const FINALIZER: &str = "storage.simplyblock.io/storagenodeops-finalizer";
const MANAGER: &str = "storagenodeops-controller";
/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "storagenodeops";
const METRIC_PREFIX: &str = "simplyblock_storagenode_";
/// Words of a restart's record naming the node's status when the call went out.
const FROM: &str = "from status";
/// How often an awaited step looks at the control plane.
const AWAIT_POLL: Duration = Duration::from_secs(1);

impl OpsResource for StorageNodeOps {
    type Target = StorageNode;
    const FINALIZER: &'static str = FINALIZER;
    const MANAGER: &'static str = MANAGER;
    const METRIC_PREFIX: &'static str = METRIC_PREFIX;
    const TARGET_LABEL: &'static str = "node";

    fn target_name(&self) -> &str {
        &self.spec.node_ref
    }
    fn kind_status(&self) -> Map<String, Value> {
        let mut m = Map::new();
        let Some(s) = self.status.as_ref() else {
            return m;
        };
        if let Some(drain) = &s.drain {
            m.insert("drain".into(), serde_json::json!(drain));
        }
        if let Some(removal) = &s.removal {
            m.insert("removal".into(), serde_json::json!(removal));
        }
        m
    }
    fn lock_holder(target: &StorageNode) -> Option<&str> {
        target.status.as_ref()?.active_ops_ref.as_deref()
    }
}

/// What the steps read: the control plane's ids of the node and its cluster, and its view
/// of the node.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// From the node's StorageCluster's status.uuid.
    pub cluster: Option<Uuid>,
    /// From the StorageNode's status.uuid.
    pub node: Option<Uuid>,
    /// `None` with both ids: the control plane does not know the node.
    pub found: Option<CpNode>,
    /// What Remove reads beside the node.
    pub remove: remove::Observed,
    /// What HostMaintenance reads beside the node.
    pub maintenance: maintenance::Observed,
    /// What Migrate reads beside the node.
    pub migrate: migrate::Observed,
}

/// The one side effect a step may issue.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    Shutdown(Uuid, Uuid),
    Suspend(Uuid, Uuid),
    Resume(Uuid, Uuid),
    Restart(Uuid, Uuid, NodeRestart),
    Remove(remove::Call),
    Maintenance(maintenance::Call),
    Migrate(migrate::Call),
}

/// The steps of every action (the runtime restores the machine from the kind's graphs).
#[derive(Clone, Copy, Default)]
pub struct NodeSteps;

impl Steps<StorageNodeOps> for NodeSteps {
    type Obs = Observed;
    type Call = Call;

    async fn observe(
        &self,
        op: &StorageNodeOps,
        target: &StorageNode,
        machine: &Machine<'static, NodeOpsStep>,
        ctx: &Context,
    ) -> Result<Observed, ops::Error> {
        let mut obs = observe(target, ctx).await?;
        let step = machine.state();
        match op.spec.action {
            NodeAction::Remove => obs.remove = remove::observe(op, target, step, &obs, ctx).await?,
            NodeAction::HostMaintenance => {
                obs.maintenance = maintenance::observe(op, target, step, &obs, ctx).await?
            }
            NodeAction::Migrate => {
                obs.migrate = migrate::observe(op, target, step, &obs, ctx).await?
            }
            _ => {}
        }
        Ok(obs)
    }

    fn plan(
        &self,
        op: &StorageNodeOps,
        target: &StorageNode,
        machine: &Machine<'static, NodeOpsStep>,
        obs: &Observed,
        now: Timestamp,
    ) -> ops::Noted<NodeOpsStep, Call> {
        let step = machine.state();
        match op.spec.action {
            NodeAction::Remove => remove::plan(op, target, machine, obs, now),
            NodeAction::HostMaintenance => maintenance::plan(op, target, step, obs, now),
            NodeAction::Migrate => migrate::plan(op, target, step, obs, now),
            _ => plan(op, step, obs).into(),
        }
    }

    async fn admission(
        &self,
        op: &StorageNodeOps,
        target: &StorageNode,
        ctx: &Context,
    ) -> Result<Option<ops::Hold>, ops::Error> {
        if !matches!(
            op.spec.action,
            NodeAction::Migrate | NodeAction::HostMaintenance
        ) {
            return Ok(None);
        }
        cluster_gate(target, ctx).await
    }

    async fn dependents_gone(
        &self,
        op: &StorageNodeOps,
        ctx: &Context,
    ) -> Result<Option<String>, ops::Error> {
        match op.spec.action {
            NodeAction::Remove => remove::dependents_gone(op, ctx).await,
            _ => Ok(None),
        }
    }

    fn kind_status_written(&self, ctx: &Context, op: &StorageNodeOps, kind: &Map<String, Value>) {
        if op.spec.action == NodeAction::Remove {
            remove::kind_status_written(ctx, op, kind);
        }
    }

    fn step_left(&self, ctx: &Context, op: &StorageNodeOps, step: NodeOpsStep, seconds: f64) {
        if op.spec.action == NodeAction::HostMaintenance {
            maintenance::step_left(ctx, op, step, seconds);
        }
    }

    fn advance_event(
        &self,
        op: &StorageNodeOps,
        from: NodeOpsStep,
        to: Move<NodeOpsStep>,
    ) -> Option<(&'static str, String)> {
        match (op.spec.action, to) {
            (NodeAction::HostMaintenance, Move::To(to)) => maintenance::advance_event(op, from, to),
            _ => None,
        }
    }

    async fn execute(
        &self,
        op: &StorageNodeOps,
        target: &StorageNode,
        call: &Call,
        ctx: &Context,
    ) -> Result<(), String> {
        let cp = ctx.control_plane().map_err(|e| e.to_string())?;
        let result = match call {
            Call::Shutdown(c, n) => cp.shutdown_storage_node(*c, *n, false).await,
            Call::Suspend(c, n) => cp.suspend_storage_node(*c, *n, false).await,
            Call::Resume(c, n) => cp.resume_storage_node(*c, *n).await,
            Call::Restart(c, n, params) => cp.restart_storage_node(*c, *n, params).await,
            Call::Remove(call) => return remove::execute(op, target, call, ctx).await,
            Call::Maintenance(call) => return maintenance::execute(op, target, call, ctx).await,
            Call::Migrate(call) => return migrate::execute(op, target, call, ctx).await,
        };
        result.map_err(|e| e.to_string())
    }
}

/// Runs the controller until the operator stops.
pub async fn run(ctx: Arc<Context>) {
    let steps = NodeSteps;
    let controller = ops::controller::<StorageNodeOps>(&ctx);
    // A node or task stream event wakes the operations in flight; the resync stays.
    let woken = ctx
        .streams
        .triggers(controller.store(), |op: &StorageNodeOps, change| {
            !op.ops_status().phase.is_terminal() && change.nodes_or_tasks()
        });
    ops::run(CONTROLLER, controller.reconcile_on(woken), steps, ctx).await
}

async fn observe(node: &StorageNode, ctx: &Context) -> Result<Observed, ops::Error> {
    let uuid = |s: Option<&String>| s.and_then(|u| u.parse::<Uuid>().ok());
    let mut obs = Observed {
        node: uuid(node.status.as_ref().and_then(|s| s.uuid.as_ref())),
        ..Observed::default()
    };
    let clusters: Api<StorageCluster> =
        Api::namespaced(ctx.kube.clone(), &node.namespace().unwrap_or_default());
    if let Some(cluster) = clusters.get_opt(&node.spec.cluster_ref).await? {
        obs.cluster = uuid(cluster.status.as_ref().and_then(|s| s.uuid.as_ref()));
    }
    let (Some(cluster), Some(id)) = (obs.cluster, obs.node) else {
        return Ok(obs);
    };
    // From the cluster's node stream once synced; a node it lacks is asked by GET.
    let informer = ctx.follow(simplyblock_controlplane::Scope::Nodes { cluster })?;
    obs.found = match informer.node(cluster, id).await {
        Ok(n) => Some(n),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    Ok(obs)
}

/// The cluster gate of Migrate and HostMaintenance, asked once before the lock: the
/// node's cluster exists in the control plane, is active and is not rebalancing.
async fn cluster_gate(node: &StorageNode, ctx: &Context) -> Result<Option<ops::Hold>, ops::Error> {
    let name = &node.spec.cluster_ref;
    let hold = |message: String| {
        Ok(Some(ops::Hold {
            reason: "ClusterNotReady",
            message,
        }))
    };
    let clusters: Api<StorageCluster> =
        Api::namespaced(ctx.kube.clone(), &node.namespace().unwrap_or_default());
    let id = clusters
        .get_opt(name)
        .await?
        .and_then(|c| c.status?.uuid?.parse::<Uuid>().ok());
    let Some(id) = id else {
        return hold(format!(
            "StorageCluster {name} does not exist in the control plane yet; the operation starts once it does"
        ));
    };
    let cluster = ctx.control_plane()?.get_cluster(id).await?;
    if cluster.status != ClusterStatus::Active {
        return hold(format!(
            "StorageCluster {name} is {} in the control plane, not active; the operation starts once it is active",
            cluster.status
        ));
    }
    if cluster.is_re_balancing {
        return hold(format!(
            "StorageCluster {name} is rebalancing; the operation starts once the rebalance is over"
        ));
    }
    Ok(None)
}

/// What an operation of an action this operator does not run yet says when it ends.
pub fn unsupported(action: NodeAction) -> String {
    format!(
        "{} is not supported by this operator yet; nothing was changed, and this record can be deleted",
        simplyblock_statemachine::Action::name(action)
    )
}

pub(crate) fn wait(message: String) -> Plan<NodeOpsStep, Call> {
    Plan::Wait {
        message,
        after: AWAIT_POLL,
        event: None,
    }
}

pub(crate) fn advance(to: NodeOpsStep, message: impl Into<String>) -> Plan<NodeOpsStep, Call> {
    Plan::Advance {
        to: Move::To(to),
        message: message.into(),
        kind_status: None,
    }
}

pub(crate) fn succeed(message: impl Into<String>) -> Plan<NodeOpsStep, Call> {
    Plan::Succeed {
        message: message.into(),
        kind_status: None,
    }
}

/// The next thing a step does, from one observation. Pure.
pub fn plan(op: &StorageNodeOps, step: NodeOpsStep, obs: &Observed) -> Plan<NodeOpsStep, Call> {
    use NodeAction as A;
    use NodeOpsStep::*;
    use NodeStatus as S;
    let action = op.spec.action;
    let name = &op.spec.node_ref;
    let Some(id) = obs.node else {
        return wait(format!(
            "StorageNode {name} has no control-plane id yet; waiting for it to be provisioned"
        ));
    };
    let Some(cluster) = obs.cluster else {
        return wait(format!(
            "the cluster of StorageNode {name} has no control-plane id; waiting for it"
        ));
    };
    let Some(node) = &obs.found else {
        return Plan::Fail(format!(
            "the control plane does not know node {id} (StorageNode {name}); nothing was called"
        ));
    };
    let status = node.status;
    match (action, step) {
        (A::Shutdown, Requesting) => {
            if matches!(status, S::Offline | S::InShutdown | S::InRestart) {
                return advance(
                    Awaiting,
                    format!("the node is {status}; no shutdown call needed"),
                );
            }
            Plan::Call {
                call: Call::Shutdown(cluster, id),
                message: format!("shutting the node down (it is {status})"),
            }
        }
        (A::Shutdown, Awaiting) => settle(status, S::Offline, "shut down: the node is offline"),
        (A::Suspend, Requesting) => {
            if status == S::Suspended {
                return advance(Awaiting, "the node is suspended; no suspend call needed");
            }
            Plan::Call {
                call: Call::Suspend(cluster, id),
                message: format!("suspending the node (it is {status})"),
            }
        }
        (A::Suspend, Awaiting) => settle(status, S::Suspended, "the node is suspended"),
        (A::Resume, Requesting) => {
            if status == S::Online {
                return advance(Awaiting, "the node is online; no resume call needed");
            }
            Plan::Call {
                call: Call::Resume(cluster, id),
                message: format!("resuming the node (it is {status})"),
            }
        }
        (A::Resume, Awaiting) => settle(status, S::Online, "the node is online"),
        (A::Restart, Requesting) => {
            if status == S::InRestart {
                return advance(Departing, "the node is already restarting");
            }
            let force = op.spec.force.unwrap_or(false);
            if status != S::Offline && !force {
                return Plan::Fail(format!(
                    "the node is {status}: a restart without spec.force needs it offline (the control plane would accept the call and drop it); shut it down first, or create a Restart with force: true"
                ));
            }
            // The node may be back online before a look could see it leave, so no look can
            // tell whether the call went out: Departing is written first and never calls.
            Plan::CallOnce {
                to: Departing,
                call: Call::Restart(
                    cluster,
                    id,
                    NodeRestart {
                        force,
                        reattach_volume: op.spec.reattach_volume.unwrap_or(false),
                        ..NodeRestart::default()
                    },
                ),
                message: format!("restarting the node {FROM} {status}"),
                accepted: format!(
                    "the control plane accepted the restart of the node {FROM} {status}; waiting for it to leave online"
                ),
            }
        }
        (A::Restart, Departing) => {
            // A node restarted from offline has nothing to leave: the record of the call
            // (written before it, kept by every wait) says where it started.
            let from_offline = op
                .status
                .as_ref()
                .and_then(|s| s.message.as_deref())
                .is_some_and(|m| m.contains(&format!("{FROM} {}", S::Offline)));
            if status == S::Online && !from_offline {
                return wait(format!(
                    "waiting for the node to leave online ({FROM} online)"
                ));
            }
            advance(
                Awaiting,
                format!("the node is {status}; waiting for it to come back online"),
            )
        }
        (A::Restart, Awaiting) => settle(status, S::Online, "restarted: the node is online"),
        (action, step) => Plan::Fail(format!(
            "step {step:?} is not one of action {}",
            simplyblock_statemachine::Action::name(action)
        )),
    }
}

/// Succeeds once the node is `wanted`, and waits otherwise.
pub(crate) fn settle(
    status: NodeStatus,
    wanted: NodeStatus,
    done: &str,
) -> Plan<NodeOpsStep, Call> {
    if status == wanted {
        succeed(done)
    } else {
        wait(format!(
            "the control plane reports the node {status}; waiting for {wanted}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use NodeOpsStep::*;

    fn op(action: &str, force: Option<bool>) -> StorageNodeOps {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNodeOps",
            "metadata": {"name": "op", "namespace": "ns"},
            "spec": {"nodeRef": "sb-w1-0", "action": action, "force": force},
        }))
        .expect("op")
    }

    fn seen(status: NodeStatus) -> Observed {
        Observed {
            cluster: Some(Uuid::from_u128(1)),
            node: Some(Uuid::from_u128(2)),
            found: Some(CpNode {
                status,
                ..CpNode::default()
            }),
            ..Observed::default()
        }
    }

    fn kind(plan: &Plan<NodeOpsStep, Call>) -> &'static str {
        match plan {
            Plan::Advance { .. } => "advance",
            Plan::Record { .. } => "record",
            Plan::Progress { .. } => "progress",
            Plan::Succeed { .. } => "succeed",
            Plan::Fail(_) => "fail",
            Plan::Call { .. } => "call",
            Plan::CallOnce { .. } => "call once",
            Plan::Wait { .. } => "wait",
        }
    }

    #[test]
    fn each_single_call_action_calls_unless_the_node_is_there_and_ends_when_it_is() {
        use NodeStatus::*;
        let table = [
            ("Shutdown", Online, Requesting, "call"),
            ("Shutdown", InShutdown, Requesting, "advance"),
            ("Shutdown", InRestart, Requesting, "advance"),
            ("Shutdown", InShutdown, Awaiting, "wait"),
            ("Shutdown", Offline, Awaiting, "succeed"),
            ("Suspend", Online, Requesting, "call"),
            ("Suspend", Suspended, Requesting, "advance"),
            ("Suspend", Suspended, Awaiting, "succeed"),
            ("Resume", Suspended, Requesting, "call"),
            ("Resume", Online, Requesting, "advance"),
            ("Resume", Suspended, Awaiting, "wait"),
            ("Resume", Online, Awaiting, "succeed"),
        ];
        for (action, status, step, want) in table {
            let got = plan(&op(action, None), step, &seen(status));
            assert_eq!(kind(&got), want, "{action} {status} {step:?}: {got:?}");
        }
    }

    #[test]
    fn a_restart_is_called_once_and_only_forced_from_anything_but_offline() {
        use NodeStatus::*;
        let unforced = plan(&op("Restart", None), Requesting, &seen(Online));
        let Plan::Fail(why) = unforced else {
            panic!("{unforced:?}")
        };
        assert!(why.contains("force"), "{why}");
        for (force, status) in [(None, Offline), (Some(true), Online)] {
            let got = plan(&op("Restart", force), Requesting, &seen(status));
            assert_eq!(kind(&got), "call once", "{force:?} {status}");
        }
        assert_eq!(
            kind(&plan(&op("Restart", None), Requesting, &seen(InRestart))),
            "advance"
        );
        assert_eq!(
            kind(&plan(&op("Restart", None), Departing, &seen(Online))),
            "wait"
        );
        assert_eq!(
            kind(&plan(&op("Restart", None), Departing, &seen(InRestart))),
            "advance"
        );
        assert_eq!(
            kind(&plan(&op("Restart", None), Awaiting, &seen(Online))),
            "succeed"
        );
    }

    #[test]
    fn a_node_restarted_from_offline_has_nothing_to_leave() {
        let Plan::CallOnce { accepted, .. } =
            plan(&op("Restart", None), Requesting, &seen(NodeStatus::Offline))
        else {
            panic!("a restart from offline is called")
        };
        let mut recorded = op("Restart", None);
        recorded.status = Some(simplyblock_api::storage_node_ops::StorageNodeOpsStatus {
            message: Some(accepted),
            ..Default::default()
        });
        // Back online before a look saw it go: it restarted.
        let got = plan(&recorded, Departing, &seen(NodeStatus::Online));
        assert_eq!(kind(&got), "advance", "{got:?}");
    }

    #[test]
    fn a_node_without_an_id_waits_and_one_the_control_plane_lost_fails() {
        let waiting = plan(&op("Shutdown", None), Requesting, &Observed::default());
        assert_eq!(kind(&waiting), "wait");
        let lost = Observed {
            found: None,
            ..seen(NodeStatus::Online)
        };
        assert_eq!(
            kind(&plan(&op("Shutdown", None), Requesting, &lost)),
            "fail"
        );
    }
}

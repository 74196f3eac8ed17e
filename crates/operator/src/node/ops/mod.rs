//! The StorageNodeOps controller: the registry of its actions. Each action is a module of
//! its own: what it reads beside the node, its pure plan over that and what every action
//! reads ([`step::Seen`]), and its calls. This module picks the action's module by
//! `spec.action` and lifts its plan into the kind's [`Call`].
//!
//! The phase machine, the node lock (`StorageNode.status.activeOpsRef`), queueing, abort,
//! deadlines and the standard events are the shared [`crate::runtime::ops`] runtime.
//!
//! | action | module | steps |
//! |---|---|---|
//! | Shutdown, Suspend, Resume | [`single`] | Requesting → Awaiting |
//! | Restart | [`single`] | Requesting → Departing → Awaiting |
//! | Remove | [`remove`] | Validating → ShuttingDown → MigratingDevices → MigratingVolumes → Verifying → Removing → AwaitingRemoval |
//! | Migrate | [`migrate`] | Preparing → Relocating → AwaitingNode → Promoting |
//! | HostMaintenance | [`maintenance`] | Holding → ShuttingDown → Releasing → AwaitingHost → Restarting → Cleanup |
//!
//! Migrate and HostMaintenance are admitted only while the node's cluster is active in
//! the control plane and not rebalancing (`ClusterNotReady` keeps them Pending,
//! [`step::cluster_gate`]); the others are not gated.

use std::sync::Arc;

use jiff::Timestamp;
use simplyblock_api::StorageNode;
use simplyblock_api::storage_node_ops::{NodeAction, NodeOpsStep, StorageNodeOps};
use simplyblock_statemachine::Machine;

use crate::runtime::context::Context;
use crate::runtime::ops::{self, Move, OpsResource, Steps};

pub mod maintenance;
pub mod migrate;
pub mod remove;
pub mod single;
pub mod step;
pub mod system_filter;

pub use step::Fields;

pub const FINALIZER: &str = "storage.simplyblock.io/storagenodeops-finalizer";
const MANAGER: &str = "storagenodeops-controller";
/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "storagenodeops";
const METRIC_PREFIX: &str = "simplyblock_storagenode_";

impl OpsResource for StorageNodeOps {
    type Target = StorageNode;
    const FINALIZER: &'static str = FINALIZER;
    const MANAGER: &'static str = MANAGER;
    const METRIC_PREFIX: &'static str = METRIC_PREFIX;
    const TARGET_LABEL: &'static str = "node";

    fn target_name(&self) -> &str {
        &self.spec.node_ref
    }
    type Fields = Fields;
    fn kind_status(&self) -> Fields {
        let Some(s) = self.status.as_ref() else {
            return Fields::default();
        };
        Fields {
            drain: s.drain.clone(),
            removal: s.removal.clone(),
        }
    }
    fn lock_holder(target: &StorageNode) -> Option<&str> {
        target.status.as_ref()?.active_ops_ref.as_deref()
    }
}

/// What the steps read: what every action reads, and what the operation's action reads
/// beside it (the others' stay empty).
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub seen: step::Seen,
    /// What Remove reads beside the node.
    pub remove: remove::Observed,
    /// What HostMaintenance reads beside the node.
    pub maintenance: maintenance::Observed,
    /// What Migrate reads beside the node.
    pub migrate: migrate::Observed,
}

/// The one side effect a step may issue: a call of the operation's action.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    /// Of Shutdown, Suspend, Resume or Restart.
    Single(single::Call),
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
        let seen = step::observe(target, ctx).await?;
        let at = step::At {
            op,
            node: target,
            step: machine.state(),
            seen: &seen,
        };
        let mut obs = Observed::default();
        match op.spec.action {
            NodeAction::Remove => obs.remove = remove::observe(at, ctx).await?,
            NodeAction::HostMaintenance => obs.maintenance = maintenance::observe(at, ctx).await?,
            NodeAction::Migrate => obs.migrate = migrate::observe(at, ctx).await?,
            _ => {}
        }
        obs.seen = seen;
        Ok(obs)
    }

    fn plan(
        &self,
        op: &StorageNodeOps,
        target: &StorageNode,
        machine: &Machine<'static, NodeOpsStep>,
        obs: &Observed,
        now: Timestamp,
    ) -> ops::Noted<NodeOpsStep, Call, Fields> {
        let step = machine.state();
        let seen = &obs.seen;
        let at = step::At {
            op,
            node: target,
            step,
            seen,
        };
        match op.spec.action {
            NodeAction::Remove => remove::plan(at, &obs.remove, now).map_call(Call::Remove),
            NodeAction::HostMaintenance => {
                maintenance::plan(at, &obs.maintenance, now).map_call(Call::Maintenance)
            }
            NodeAction::Migrate => migrate::plan(at, &obs.migrate, now).map_call(Call::Migrate),
            _ => single::plan(op, step, seen).map_call(Call::Single).into(),
        }
    }

    async fn admission(
        &self,
        op: &StorageNodeOps,
        target: &StorageNode,
        ctx: &Context,
    ) -> Result<Option<ops::Hold>, ops::Error> {
        match op.spec.action {
            NodeAction::Migrate | NodeAction::HostMaintenance => {
                step::cluster_gate(target, ctx).await
            }
            _ => Ok(None),
        }
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

    fn kind_status_written(&self, ctx: &Context, op: &StorageNodeOps, kind: &Fields) {
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
        match call {
            Call::Single(call) => call.execute(ctx).await,
            Call::Remove(call) => remove::execute(op, target, call, ctx).await,
            Call::Maintenance(call) => maintenance::execute(op, target, call, ctx).await,
            Call::Migrate(call) => migrate::execute(op, target, call, ctx).await,
        }
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

/// What an operation of an action this operator does not run yet says when it ends.
pub fn unsupported(action: NodeAction) -> String {
    format!(
        "{} is not supported by this operator yet; nothing was changed, and this record can be deleted",
        simplyblock_statemachine::Action::name(action)
    )
}

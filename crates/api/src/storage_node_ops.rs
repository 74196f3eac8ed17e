//! StorageNodeOps (`snops`): one audited operation on one StorageNode: shut it down,
//! restart, suspend or resume it, remove it (draining its volumes first), move it to another
//! worker, or take its worker through host maintenance.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use simplyblock_statemachine::{Action, GraphDef, MultiGraph, StateDef, StepSnapshot, state_enum};

use crate::common::OpsPhase;

/// One operation on one StorageNode. Only `spec.abort` may change after creation;
/// operations on one node run one at a time, in creation order.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "StorageNodeOps",
    plural = "storagenodeops",
    namespaced,
    status = "StorageNodeOpsStatus",
    shortname = "snops",
    category = "simplyblock",
    doc = "One operation on a StorageNode (shut down, restart, suspend, resume, remove with a drain, migrate to another worker, host maintenance), kept as an audit record once it has finished.",
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.nodeRef"),
    printcolumn(name = "Action", type_ = "string", json_path = ".spec.action"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Step", type_ = "string", json_path = ".status.step.state"),
    printcolumn(name = "Started", type_ = "date", json_path = ".status.startedAt"),
    printcolumn(name = "Completed", type_ = "date", json_path = ".status.completedAt"),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.message",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    selectable = ".spec.nodeRef"
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.action == 'Migrate' ? has(self.migrate) : !has(self.migrate)").message(
    "spec.migrate is given with action Migrate, and only then: it names the worker the node moves to"
))]
#[x_kube(validation = Rule::new("self.action == 'Remove' || !has(self.remove)").message(
    "spec.remove is given only with action Remove"
))]
#[x_kube(validation = Rule::new("!has(self.force) || self.action in ['Restart', 'Migrate']").message(
    "spec.force applies to actions Restart and Migrate only"
))]
#[x_kube(validation = Rule::new("!has(self.reattachVolume) || self.action in ['Restart', 'Migrate', 'HostMaintenance']").message(
    "spec.reattachVolume applies to actions Restart, Migrate and HostMaintenance only"
))]
#[x_kube(validation = Rule::new("has(self.migrate) == has(oldSelf.migrate)").message("spec.migrate is immutable"))]
#[x_kube(validation = Rule::new("has(self.remove) == has(oldSelf.remove)").message("spec.remove is immutable"))]
#[x_kube(validation = Rule::new("has(self.force) == has(oldSelf.force)").message("spec.force is immutable"))]
#[x_kube(validation = Rule::new("has(self.reattachVolume) == has(oldSelf.reattachVolume)").message("spec.reattachVolume is immutable"))]
pub struct StorageNodeOpsSpec {
    /// The StorageNode, in this namespace, the operation acts on. Immutable. Selectable:
    /// `kubectl get snops --field-selector spec.nodeRef=<node>`.
    #[schemars(length(max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.nodeRef is immutable: an operation acts on one node; create another operation for another node"
    ))]
    pub node_ref: String,

    /// The operation. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.action is immutable: an operation performs one action; create another operation for another action"
    ))]
    pub action: NodeAction,

    /// Ask a running operation to stop. Honoured on the steps the action's graph declares
    /// abortable; elsewhere the operation keeps running and says so in status.message.
    #[serde(default)]
    pub abort: bool,

    /// Restart: restart a node that is not offline (the control plane shuts it down
    /// first). Migrate: move it even if the control plane counts it as serving; true when
    /// not given. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.force is immutable"))]
    pub force: Option<bool>,

    /// Restart, Migrate, HostMaintenance: reconnect the node's volumes on their clients
    /// when it is back. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.reattachVolume is immutable"))]
    pub reattach_volume: Option<bool>,

    /// Parameters of action Migrate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.migrate is immutable"))]
    pub migrate: Option<MigrateSpec>,

    /// Parameters of action Remove.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.remove is immutable"))]
    pub remove: Option<RemoveSpec>,
}

/// The operations a StorageNodeOps can perform.
#[derive(
    Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
pub enum NodeAction {
    /// Shut the node down (it goes offline; its volumes are served by their replicas).
    Shutdown,
    /// Restart the node: it leaves online and comes back.
    Restart,
    /// Suspend the node: it stays up but takes no new I/O.
    Suspend,
    /// Resume a suspended node.
    Resume,
    /// Drain the node's volumes onto its peers, then remove it from the cluster.
    Remove,
    /// Move the node, with its identity, to another worker.
    Migrate,
    /// Take the node's worker out for maintenance (shut down, let the host go, restart).
    HostMaintenance,
}

impl NodeAction {
    pub const ALL: &'static [NodeAction] = &[
        NodeAction::Shutdown,
        NodeAction::Restart,
        NodeAction::Suspend,
        NodeAction::Resume,
        NodeAction::Remove,
        NodeAction::Migrate,
        NodeAction::HostMaintenance,
    ];
}

impl Action for NodeAction {
    fn name(self) -> &'static str {
        match self {
            NodeAction::Shutdown => "Shutdown",
            NodeAction::Restart => "Restart",
            NodeAction::Suspend => "Suspend",
            NodeAction::Resume => "Resume",
            NodeAction::Remove => "Remove",
            NodeAction::Migrate => "Migrate",
            NodeAction::HostMaintenance => "HostMaintenance",
        }
    }
}

/// Where Migrate moves the node.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MigrateSpec {
    /// The Kubernetes Node the storage node moves to, by its name (a DNS-1123 subdomain).
    #[schemars(length(max = 253), regex(pattern = crate::names::DNS_SUBDOMAIN_PATTERN))]
    pub target_worker_node: String,
    /// The PCI addresses of the drives on the target worker that take the place of the
    /// node's drives, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub new_ssd_pcie: Vec<String>,
}

/// How Remove drains the node. Fixed at creation, like the rest of the spec.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RemoveSpec {
    /// Volumes whose name matches this regular expression (Rust `regex` syntax) are the
    /// system's own (benchmark volumes): they are deleted rather than moved, and only those
    /// the control plane puts in this node's cluster, on this node, made for no claim.
    /// Admitted only if it is at most 256 characters, starts with `^` and is anchored there
    /// in every alternative, and matches neither the empty name nor an ordinary one such as
    /// `data` or `pvc-<uid>`.
    #[serde(default = "default_system_volume_filter")]
    pub system_volume_filter_regex: String,
}

/// The system-volume filter when none is given: the benchmark volumes of the control plane.
pub const DEFAULT_SYSTEM_VOLUME_FILTER: &str = "^sb-fio-baseline-.*";

fn default_system_volume_filter() -> String {
    DEFAULT_SYSTEM_VOLUME_FILTER.into()
}

state_enum! {
    /// Every step of every StorageNodeOps action.
    pub enum NodeOpsStep {
        Requesting,
        Departing,
        Awaiting,
        Validating,
        ShuttingDown,
        MigratingDevices,
        MigratingVolumes,
        Verifying,
        Removing,
        AwaitingRemoval,
        Preparing,
        Relocating,
        AwaitingNode,
        Promoting,
        Holding,
        Releasing,
        AwaitingHost,
        Restarting,
        Cleanup,
    }
}

const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;

/// Requesting -> Awaiting: one call, then the wait for the node's status.
const REQUEST_AND_AWAIT: GraphDef<'static, NodeOpsStep> = GraphDef::new(
    NodeOpsStep::Requesting,
    &[
        StateDef::new(NodeOpsStep::Requesting)
            .to(&[NodeOpsStep::Awaiting])
            .abortable()
            .deadline(Duration::from_secs(2 * MINUTE)),
        StateDef::new(NodeOpsStep::Awaiting).deadline(Duration::from_secs(30 * MINUTE)),
    ],
);

/// The restart call, the node leaving online, and its return.
const RESTART: GraphDef<'static, NodeOpsStep> = GraphDef::new(
    NodeOpsStep::Requesting,
    &[
        StateDef::new(NodeOpsStep::Requesting)
            .to(&[NodeOpsStep::Departing])
            .abortable()
            .deadline(Duration::from_secs(2 * MINUTE)),
        StateDef::new(NodeOpsStep::Departing)
            .to(&[NodeOpsStep::Awaiting])
            .deadline(Duration::from_secs(10 * MINUTE)),
        StateDef::new(NodeOpsStep::Awaiting).deadline(Duration::from_secs(30 * MINUTE)),
    ],
);

/// The drain and the removal; only Validating (nothing done yet) may be aborted.
const REMOVE: GraphDef<'static, NodeOpsStep> = GraphDef::new(
    NodeOpsStep::Validating,
    &[
        StateDef::new(NodeOpsStep::Validating)
            .to(&[NodeOpsStep::ShuttingDown])
            .abortable()
            .deadline(Duration::from_secs(24 * HOUR)),
        StateDef::new(NodeOpsStep::ShuttingDown)
            .to(&[NodeOpsStep::MigratingDevices])
            .deadline(Duration::from_secs(30 * MINUTE)),
        StateDef::new(NodeOpsStep::MigratingDevices)
            .to(&[NodeOpsStep::MigratingVolumes])
            .deadline(Duration::from_secs(7 * HOUR)),
        StateDef::new(NodeOpsStep::MigratingVolumes)
            .to(&[NodeOpsStep::Verifying])
            .deadline(Duration::from_secs(24 * HOUR)),
        StateDef::new(NodeOpsStep::Verifying)
            .to(&[NodeOpsStep::Removing])
            .deadline(Duration::from_secs(30 * MINUTE)),
        StateDef::new(NodeOpsStep::Removing)
            .to(&[NodeOpsStep::AwaitingRemoval])
            .deadline(Duration::from_secs(30 * MINUTE)),
        StateDef::new(NodeOpsStep::AwaitingRemoval).deadline(Duration::from_secs(7 * HOUR)),
    ],
);

/// The relocation: the target prepared, the restart there, the node's return, the
/// promotion and the Kubernetes re-point (which must not be withdrawn).
const MIGRATE: GraphDef<'static, NodeOpsStep> = GraphDef::new(
    NodeOpsStep::Preparing,
    &[
        StateDef::new(NodeOpsStep::Preparing)
            .to(&[NodeOpsStep::Relocating])
            .abortable()
            .deadline(Duration::from_secs(30 * MINUTE)),
        StateDef::new(NodeOpsStep::Relocating)
            .to(&[NodeOpsStep::AwaitingNode])
            .deadline(Duration::from_secs(30 * MINUTE)),
        StateDef::new(NodeOpsStep::AwaitingNode)
            .to(&[NodeOpsStep::Promoting])
            .deadline(Duration::from_secs(HOUR)),
        StateDef::new(NodeOpsStep::Promoting).deadline(Duration::from_secs(10 * MINUTE)),
    ],
);

/// The maintenance window of one worker; only Holding (waiting for a window) may be
/// aborted, which an uncordon does.
const HOST_MAINTENANCE: GraphDef<'static, NodeOpsStep> = GraphDef::new(
    NodeOpsStep::Holding,
    &[
        StateDef::new(NodeOpsStep::Holding)
            .to(&[NodeOpsStep::ShuttingDown])
            .abortable()
            .deadline(Duration::from_secs(24 * HOUR)),
        StateDef::new(NodeOpsStep::ShuttingDown)
            .to(&[NodeOpsStep::Releasing])
            .deadline(Duration::from_secs(30 * MINUTE)),
        StateDef::new(NodeOpsStep::Releasing)
            .to(&[NodeOpsStep::AwaitingHost])
            .deadline(Duration::from_secs(30 * MINUTE)),
        StateDef::new(NodeOpsStep::AwaitingHost)
            .to(&[NodeOpsStep::Restarting])
            .deadline(Duration::from_secs(24 * HOUR)),
        StateDef::new(NodeOpsStep::Restarting)
            .to(&[NodeOpsStep::Cleanup])
            .deadline(Duration::from_secs(HOUR)),
        StateDef::new(NodeOpsStep::Cleanup).deadline(Duration::from_secs(10 * MINUTE)),
    ],
);

/// The step graph of every action.
pub static GRAPHS: LazyLock<MultiGraph<NodeAction, NodeOpsStep>> = LazyLock::new(|| {
    MultiGraph::new(&[
        (NodeAction::Shutdown, REQUEST_AND_AWAIT),
        (NodeAction::Suspend, REQUEST_AND_AWAIT),
        (NodeAction::Resume, REQUEST_AND_AWAIT),
        (NodeAction::Restart, RESTART),
        (NodeAction::Remove, REMOVE),
        (NodeAction::Migrate, MIGRATE),
        (NodeAction::HostMaintenance, HOST_MAINTENANCE),
    ])
    .expect("the StorageNodeOps graphs are valid")
});

crate::common::ops_kind!(StorageNodeOps: NodeAction, NodeOpsStep, GRAPHS);

fn step_schema(_: &mut SchemaGenerator) -> Schema {
    StepSnapshot::schema_for_steps(&GRAPHS.declared_state_names())
}

/// The progress of the operation.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageNodeOpsStatus {
    /// Pending, Running, Succeeded, Failed or Aborted.
    #[serde(default)]
    pub phase: OpsPhase,
    /// The current step of the action's graph and its deadline.
    #[serde(default, skip_serializing_if = "StepSnapshot::is_empty")]
    #[schemars(schema_with = "step_schema")]
    pub step: StepSnapshot,
    /// Why the phase is what it is, in one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the operation took the node's lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it reached a terminal phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// Ready (True once the operation succeeded; Failed or Aborted are False with that
    /// reason) and Progressing (True while it runs). `kubectl wait --for=condition=Ready`
    /// waits for success.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Remove: how many of the node's volumes are moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainStatus>,
    /// Remove: what the control plane last reported of the node and its devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removal: Option<RemovalStatus>,
}

/// How far a drain has got.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DrainStatus {
    /// The volumes to move, counted once at the end of Validating. Always written.
    #[schemars(range(min = 0))]
    pub volumes_total: i32,
    /// The volumes moved so far. Always written.
    #[schemars(range(min = 0))]
    pub volumes_migrated: i32,
    /// The node's devices to migrate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub devices_total: Option<i32>,
}

/// The control plane's view of a node being removed.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RemovalStatus {
    /// The node's status in the control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_status: Option<String>,
    /// Each device's status, by StorageDevice name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub devices: BTreeMap<String, String>,
    /// When any of these last changed: each change extends the step's deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_progress_time: Option<Time>,
    /// How many times the removal was prepared (at most three).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub prepare_attempts: i32,
    /// When it was last prepared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_prepare_time: Option<Time>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use NodeOpsStep::*;

    #[test]
    fn every_action_has_a_graph() {
        let mut actions = GRAPHS.actions();
        actions.sort();
        assert_eq!(actions, NodeAction::ALL.to_vec());
    }

    #[test]
    fn abortable_steps_are_exactly_the_declared_ones() {
        let mut abortable: Vec<NodeOpsStep> = GRAPHS
            .iter()
            .flat_map(|(_, g)| g.abortable_states())
            .collect();
        abortable.sort();
        abortable.dedup();
        assert_eq!(abortable, vec![Requesting, Validating, Preparing, Holding]);
        // Promoting re-points the node in Kubernetes: it is never withdrawn.
        assert!(GRAPHS.unabortable_states().contains(&Promoting));
    }

    #[test]
    fn a_restart_waits_for_the_node_to_leave_before_it_waits_for_its_return() {
        let g = GRAPHS.graph(NodeAction::Restart).expect("graph");
        assert!(g.allows(Requesting, Departing));
        assert!(g.allows(Departing, Awaiting));
        assert!(!g.allows(Requesting, Awaiting));
    }
}

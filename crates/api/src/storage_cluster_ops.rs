//! StorageClusterOps (`scops`): one audited operation on one StorageCluster.

use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use simplyblock_statemachine::{Action, GraphDef, MultiGraph, StateDef, StepSnapshot, state_enum};

use crate::common::OpsPhase;

/// One operation on one StorageCluster. Only `spec.abort` may change after creation;
/// operations on one cluster run one at a time, in creation order.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "StorageClusterOps",
    plural = "storageclusterops",
    namespaced,
    status = "StorageClusterOpsStatus",
    shortname = "scops",
    category = "simplyblock",
    doc = "One operation on a StorageCluster (activate, expand, shut down, start, restart, rolling restart, cancel a task), kept as an audit record once it has finished; the cluster's spec.opsHistoryLimit says how many are kept.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterRef"),
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
    selectable = ".spec.clusterRef"
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.action != 'CancelTask' || has(self.cancelTask)").message(
    "action CancelTask needs spec.cancelTask.taskID, the id of the control-plane task to cancel"
))]
#[x_kube(validation = Rule::new("has(self.cancelTask) == has(oldSelf.cancelTask)").message("spec.cancelTask is immutable"))]
#[x_kube(validation = Rule::new("has(self.rollingRestart) == has(oldSelf.rollingRestart)").message("spec.rollingRestart is immutable"))]
pub struct StorageClusterOpsSpec {
    /// The StorageCluster, in this namespace, the operation acts on. Immutable. Selectable:
    /// `kubectl get scops --field-selector spec.clusterRef=<cluster>`.
    #[schemars(length(max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.clusterRef is immutable: an operation acts on one cluster; create another operation for another cluster"
    ))]
    pub cluster_ref: String,

    /// The operation. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.action is immutable: an operation performs one action; create another operation for another action"
    ))]
    pub action: ClusterAction,

    /// Ask a running operation to stop. Honoured on the steps the action's graph declares
    /// abortable; elsewhere the operation keeps running and says so in status.message.
    #[serde(default)]
    pub abort: bool,

    /// Parameters of action CancelTask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.cancelTask is immutable"))]
    pub cancel_task: Option<CancelTask>,

    /// Parameters of action RollingRestart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.rollingRestart is immutable"))]
    pub rolling_restart: Option<RollingRestartSpec>,
}

/// The operations a StorageClusterOps can perform.
#[derive(
    Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
pub enum ClusterAction {
    /// Activate a cluster whose nodes are online (the stripe's minimum node count applies).
    Activate,
    /// Expand the cluster onto nodes added since activation.
    Expand,
    /// Shut the cluster down.
    Shutdown,
    /// Start a shut-down cluster.
    Start,
    /// Shut down, then start.
    Restart,
    /// Restart the storage nodes one at a time, waiting for each rebalance.
    RollingRestart,
    /// Cancel a control-plane task.
    CancelTask,
}

impl ClusterAction {
    pub const ALL: &'static [ClusterAction] = &[
        ClusterAction::Activate,
        ClusterAction::Expand,
        ClusterAction::Shutdown,
        ClusterAction::Start,
        ClusterAction::Restart,
        ClusterAction::RollingRestart,
        ClusterAction::CancelTask,
    ];
}

impl Action for ClusterAction {
    fn name(self) -> &'static str {
        match self {
            ClusterAction::Activate => "Activate",
            ClusterAction::Expand => "Expand",
            ClusterAction::Shutdown => "Shutdown",
            ClusterAction::Start => "Start",
            ClusterAction::Restart => "Restart",
            ClusterAction::RollingRestart => "RollingRestart",
            ClusterAction::CancelTask => "CancelTask",
        }
    }
}

/// Which task CancelTask cancels.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
pub struct CancelTask {
    /// The control plane's task id, as listed in the cluster's status.tasks.
    #[serde(rename = "taskID")]
    #[schemars(length(min = 1))]
    pub task_id: String,
}

/// How RollingRestart restarts each node.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
pub struct RollingRestartSpec {
    /// Replace each node's storage-node pod between shutdown and restart, so the node
    /// comes back on the current image.
    #[serde(default, rename = "refreshSNodeAPI")]
    pub refresh_snode_api: bool,
}

state_enum! {
    /// Every step of every StorageClusterOps action.
    pub enum ClusterOpsStep {
        Requesting,
        Awaiting,
        ShuttingDown,
        Starting,
        CheckingPeers,
        ShuttingDownNode,
        RefreshingPod,
        AwaitingPod,
        RestartingNode,
        Rebalancing,
    }
}

const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;

/// Requesting -> Awaiting, for the actions that are one call and one wait.
const REQUEST_AND_AWAIT: GraphDef<'static, ClusterOpsStep> = GraphDef::new(
    ClusterOpsStep::Requesting,
    &[
        StateDef::new(ClusterOpsStep::Requesting)
            .to(&[ClusterOpsStep::Awaiting])
            .abortable()
            .deadline(Duration::from_secs(2 * MINUTE)),
        StateDef::new(ClusterOpsStep::Awaiting).deadline(Duration::from_secs(30 * MINUTE)),
    ],
);

const RESTART: GraphDef<'static, ClusterOpsStep> = GraphDef::new(
    ClusterOpsStep::ShuttingDown,
    &[
        StateDef::new(ClusterOpsStep::ShuttingDown)
            .to(&[ClusterOpsStep::Starting])
            .deadline(Duration::from_secs(30 * MINUTE)),
        StateDef::new(ClusterOpsStep::Starting).deadline(Duration::from_secs(30 * MINUTE)),
    ],
);

/// Per node; Rebalancing loops back to CheckingPeers for the next node, and the operation
/// ends when status.rollingRestart.nodeIndex reaches the node count.
const ROLLING_RESTART: GraphDef<'static, ClusterOpsStep> = GraphDef::new(
    ClusterOpsStep::CheckingPeers,
    &[
        StateDef::new(ClusterOpsStep::CheckingPeers)
            .to(&[ClusterOpsStep::ShuttingDownNode])
            .abortable()
            .deadline(Duration::from_secs(2 * HOUR)),
        StateDef::new(ClusterOpsStep::ShuttingDownNode)
            .to(&[
                ClusterOpsStep::RefreshingPod,
                ClusterOpsStep::RestartingNode,
            ])
            .deadline(Duration::from_secs(30 * MINUTE)),
        StateDef::new(ClusterOpsStep::RefreshingPod)
            .to(&[ClusterOpsStep::AwaitingPod])
            .deadline(Duration::from_secs(10 * MINUTE)),
        StateDef::new(ClusterOpsStep::AwaitingPod)
            .to(&[ClusterOpsStep::RestartingNode])
            .deadline(Duration::from_secs(10 * MINUTE)),
        StateDef::new(ClusterOpsStep::RestartingNode)
            .to(&[ClusterOpsStep::Rebalancing])
            .deadline(Duration::from_secs(45 * MINUTE)),
        StateDef::new(ClusterOpsStep::Rebalancing)
            .to(&[ClusterOpsStep::CheckingPeers])
            .abortable()
            .deadline(Duration::from_secs(4 * HOUR)),
    ],
);

/// The step graph of every action.
pub static GRAPHS: LazyLock<MultiGraph<ClusterAction, ClusterOpsStep>> = LazyLock::new(|| {
    MultiGraph::new(&[
        (ClusterAction::Activate, REQUEST_AND_AWAIT),
        (ClusterAction::Expand, REQUEST_AND_AWAIT),
        (ClusterAction::Shutdown, REQUEST_AND_AWAIT),
        (ClusterAction::Start, REQUEST_AND_AWAIT),
        (ClusterAction::CancelTask, REQUEST_AND_AWAIT),
        (ClusterAction::Restart, RESTART),
        (ClusterAction::RollingRestart, ROLLING_RESTART),
    ])
    .expect("the StorageClusterOps graphs are valid")
});

crate::common::ops_kind!(StorageClusterOps: ClusterAction, ClusterOpsStep, GRAPHS);

fn step_schema(_: &mut SchemaGenerator) -> Schema {
    StepSnapshot::schema_for_steps(&GRAPHS.declared_state_names())
}

/// The progress of the operation.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageClusterOpsStatus {
    /// Pending, Running, Succeeded, Failed or Aborted.
    #[serde(default)]
    pub phase: OpsPhase,
    /// The current step of the action's graph and its deadline.
    #[serde(default, skip_serializing_if = "StepSnapshot::is_empty")]
    #[schemars(schema_with = "step_schema")]
    pub step: StepSnapshot,
    /// Why the phase is what it is, in one sentence; for RollingRestart,
    /// `Node i/N (uuid): <step>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the operation took the cluster's lock.
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
    /// RollingRestart's progress over the cluster's nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_restart: Option<RollingRestartStatus>,
}

/// The nodes a RollingRestart walks and how far it has got.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RollingRestartStatus {
    /// The control-plane ids of the nodes to restart, in order; written once.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// How many of them have been restarted and rebalanced. Always written, also when 0.
    #[schemars(range(min = 0))]
    pub node_index: i32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use ClusterOpsStep::*;

    #[test]
    fn every_action_has_a_graph() {
        assert_eq!(GRAPHS.actions(), ClusterAction::ALL.to_vec());
    }

    #[test]
    fn abortable_steps_are_exactly_the_declared_ones() {
        let mut abortable: Vec<ClusterOpsStep> = GRAPHS
            .iter()
            .flat_map(|(_, g)| g.abortable_states())
            .collect();
        abortable.sort();
        abortable.dedup();
        assert_eq!(abortable, vec![Requesting, CheckingPeers, Rebalancing]);
        assert_eq!(
            GRAPHS.unabortable_states(),
            vec![
                Awaiting,
                ShuttingDown,
                Starting,
                ShuttingDownNode,
                RefreshingPod,
                AwaitingPod,
                RestartingNode
            ]
        );
    }

    #[test]
    fn refreshing_the_pod_is_optional() {
        let g = GRAPHS.graph(ClusterAction::RollingRestart).expect("graph");
        assert!(g.allows(ShuttingDownNode, RestartingNode));
        assert!(g.allows(ShuttingDownNode, RefreshingPod));
        assert!(g.allows(Rebalancing, CheckingPeers));
        assert!(!g.allows(CheckingPeers, RestartingNode));
    }
}

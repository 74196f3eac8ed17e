//! StoragePoolOps (`spops`): one audited operation on one StoragePool.
//!
//! Declared so the API is whole; its one action, Rebalance (move the volumes of nodes a
//! pool no longer allows), is refused at runtime until volume migration exists.

use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use simplyblock_statemachine::{Action, GraphDef, MultiGraph, StateDef, StepSnapshot, state_enum};

use crate::common::OpsPhase;

/// One operation on one StoragePool, kept as an audit record.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "StoragePoolOps",
    plural = "storagepoolops",
    namespaced,
    status = "StoragePoolOpsStatus",
    shortname = "spops",
    category = "simplyblock",
    doc = "One operation on a StoragePool (rebalance its volumes onto the nodes it allows), kept as an audit record.",
    printcolumn(name = "Pool", type_ = "string", json_path = ".spec.poolRef"),
    printcolumn(name = "Action", type_ = "string", json_path = ".spec.action"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Step", type_ = "string", json_path = ".status.step.state"),
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
    )
)]
#[serde(rename_all = "camelCase")]
pub struct StoragePoolOpsSpec {
    /// The StoragePool, in this namespace, the operation acts on. Immutable.
    #[schemars(length(max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.poolRef is immutable: an operation acts on one pool; create another operation for another pool"
    ))]
    pub pool_ref: String,

    /// The operation. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.action is immutable: an operation performs one action; create another operation for another action"
    ))]
    pub action: PoolAction,

    /// Ask a running operation to stop, honoured on abortable steps.
    #[serde(default)]
    pub abort: bool,
}

/// The operations a StoragePoolOps can perform.
#[derive(
    Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
pub enum PoolAction {
    /// Move the volumes on nodes the pool no longer allows onto allowed nodes.
    /// Not supported yet: such an operation ends Failed.
    Rebalance,
}

impl Action for PoolAction {
    fn name(self) -> &'static str {
        match self {
            PoolAction::Rebalance => "Rebalance",
        }
    }
}

state_enum! {
    /// Every step of every StoragePoolOps action.
    pub enum PoolOpsStep {
        Validating,
        Migrating,
    }
}

const REBALANCE: GraphDef<'static, PoolOpsStep> = GraphDef::new(
    PoolOpsStep::Validating,
    &[
        StateDef::new(PoolOpsStep::Validating)
            .to(&[PoolOpsStep::Migrating])
            .abortable()
            .deadline(Duration::from_secs(5 * 60)),
        StateDef::new(PoolOpsStep::Migrating)
            .abortable()
            .deadline(Duration::from_secs(24 * 60 * 60)),
    ],
);

/// The step graph of every action.
pub static GRAPHS: LazyLock<MultiGraph<PoolAction, PoolOpsStep>> = LazyLock::new(|| {
    MultiGraph::new(&[(PoolAction::Rebalance, REBALANCE)])
        .expect("the StoragePoolOps graphs are valid")
});

crate::common::ops_kind!(StoragePoolOps: PoolAction, PoolOpsStep, GRAPHS);

fn step_schema(_: &mut SchemaGenerator) -> Schema {
    StepSnapshot::schema_for_steps(&GRAPHS.declared_state_names())
}

/// The progress of the operation.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StoragePoolOpsStatus {
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
    /// When the operation took the pool's lock.
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
}

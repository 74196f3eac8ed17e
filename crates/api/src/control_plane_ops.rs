//! ControlPlaneOps (`cpops`): one audited operation on the local ControlPlane.

use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use simplyblock_statemachine::{Action, GraphDef, MultiGraph, StateDef, StepSnapshot, state_enum};

use crate::common::OpsPhase;
use crate::control_plane::IMAGE_PATTERN;

/// One operation on a ControlPlane the operator installed. Only `spec.abort` may change
/// after creation; operations on the control plane run one at a time, in creation order.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "ControlPlaneOps",
    plural = "controlplaneops",
    namespaced,
    status = "ControlPlaneOpsStatus",
    shortname = "cpops",
    category = "simplyblock",
    doc = "One operation on the local ControlPlane (restart its workloads, upgrade its image, back up its database), kept as an audit record once it has finished.",
    printcolumn(
        name = "ControlPlane",
        type_ = "string",
        json_path = ".spec.controlPlaneRef"
    ),
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
#[x_kube(validation = Rule::new("self.action != 'Upgrade' || has(self.upgrade)").message(
    "action Upgrade needs spec.upgrade.image, the management API image to move to"
))]
#[x_kube(validation = Rule::new("self.action != 'Backup' || has(self.backup)").message(
    "action Backup needs spec.backup.blobStore, where the backup is written"
))]
#[x_kube(validation = Rule::new("has(self.upgrade) == has(oldSelf.upgrade) && (!has(self.upgrade) || self.upgrade == oldSelf.upgrade)").message("spec.upgrade is immutable"))]
#[x_kube(validation = Rule::new("has(self.restart) == has(oldSelf.restart) && (!has(self.restart) || self.restart == oldSelf.restart)").message("spec.restart is immutable"))]
#[x_kube(validation = Rule::new("has(self.backup) == has(oldSelf.backup) && (!has(self.backup) || self.backup == oldSelf.backup)").message("spec.backup is immutable"))]
pub struct ControlPlaneOpsSpec {
    /// The ControlPlane, in this namespace, the operation acts on (`simplyblock`).
    /// Immutable.
    #[schemars(length(max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.controlPlaneRef is immutable: create another operation for another control plane"
    ))]
    pub control_plane_ref: String,

    /// The operation. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.action is immutable: an operation performs one action; create another operation for another action"
    ))]
    pub action: ControlPlaneAction,

    /// Ask a running operation to stop. Honoured on the steps the action's graph declares
    /// abortable; elsewhere the operation keeps running and says so in status.message.
    #[serde(default)]
    pub abort: bool,

    /// Parameters of action Upgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeSpec>,

    /// Parameters of action Restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartSpec>,

    /// Parameters of action Backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupSpec>,
}

/// The operations a ControlPlaneOps can perform.
#[derive(
    Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
pub enum ControlPlaneAction {
    /// Restart the control plane's workloads (all of them, or the components named).
    Restart,
    /// Move the management API to another image, after the operations in flight end.
    Upgrade,
    /// Back up the control plane's FoundationDB database to a blob store.
    Backup,
}

impl ControlPlaneAction {
    pub const ALL: &'static [ControlPlaneAction] = &[
        ControlPlaneAction::Restart,
        ControlPlaneAction::Upgrade,
        ControlPlaneAction::Backup,
    ];
}

impl Action for ControlPlaneAction {
    fn name(self) -> &'static str {
        match self {
            ControlPlaneAction::Restart => "Restart",
            ControlPlaneAction::Upgrade => "Upgrade",
            ControlPlaneAction::Backup => "Backup",
        }
    }
}

/// What Upgrade moves to.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
pub struct UpgradeSpec {
    /// The management API image to run, from a simplyblock registry.
    #[schemars(regex(pattern = IMAGE_PATTERN))]
    pub image: String,
}

/// What Restart restarts.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
pub struct RestartSpec {
    /// The components (workload names, as in the ControlPlane's status.components) to
    /// restart; empty restarts the whole control plane.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub components: Vec<String>,
}

/// Where Backup writes.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// The blob store URL FoundationDB's backup agents write to.
    #[schemars(length(min = 1))]
    pub blob_store: String,
    /// The name of the FoundationDBBackup to create or trigger; `simplyblock` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_name: Option<String>,
}

state_enum! {
    /// Every step of every ControlPlaneOps action.
    pub enum ControlPlaneOpsStep {
        Draining,
        Restarting,
        Awaiting,
        Preflight,
        Applying,
        Verifying,
        Requesting,
    }
}

const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;

/// Draining is skipped when the components restarted are all non-essential.
const RESTART: GraphDef<'static, ControlPlaneOpsStep> = GraphDef::new(
    ControlPlaneOpsStep::Draining,
    &[
        StateDef::new(ControlPlaneOpsStep::Draining)
            .to(&[ControlPlaneOpsStep::Restarting])
            .abortable()
            .deadline(Duration::from_secs(2 * HOUR)),
        StateDef::new(ControlPlaneOpsStep::Restarting)
            .to(&[ControlPlaneOpsStep::Awaiting])
            .deadline(Duration::from_secs(5 * MINUTE)),
        StateDef::new(ControlPlaneOpsStep::Awaiting).deadline(Duration::from_secs(30 * MINUTE)),
    ],
);

const UPGRADE: GraphDef<'static, ControlPlaneOpsStep> = GraphDef::new(
    ControlPlaneOpsStep::Preflight,
    &[
        StateDef::new(ControlPlaneOpsStep::Preflight)
            .to(&[ControlPlaneOpsStep::Draining])
            .abortable()
            .deadline(Duration::from_secs(10 * MINUTE)),
        StateDef::new(ControlPlaneOpsStep::Draining)
            .to(&[ControlPlaneOpsStep::Applying])
            .abortable()
            .deadline(Duration::from_secs(2 * HOUR)),
        StateDef::new(ControlPlaneOpsStep::Applying)
            .to(&[ControlPlaneOpsStep::Awaiting])
            .deadline(Duration::from_secs(5 * MINUTE)),
        StateDef::new(ControlPlaneOpsStep::Awaiting)
            .to(&[ControlPlaneOpsStep::Verifying])
            .deadline(Duration::from_secs(30 * MINUTE)),
        StateDef::new(ControlPlaneOpsStep::Verifying).deadline(Duration::from_secs(30 * MINUTE)),
    ],
);

const BACKUP: GraphDef<'static, ControlPlaneOpsStep> = GraphDef::new(
    ControlPlaneOpsStep::Requesting,
    &[
        StateDef::new(ControlPlaneOpsStep::Requesting)
            .to(&[ControlPlaneOpsStep::Awaiting])
            .abortable()
            .deadline(Duration::from_secs(5 * MINUTE)),
        StateDef::new(ControlPlaneOpsStep::Awaiting).deadline(Duration::from_secs(30 * MINUTE)),
    ],
);

/// The step graph of every action.
pub static GRAPHS: LazyLock<MultiGraph<ControlPlaneAction, ControlPlaneOpsStep>> =
    LazyLock::new(|| {
        MultiGraph::new(&[
            (ControlPlaneAction::Restart, RESTART),
            (ControlPlaneAction::Upgrade, UPGRADE),
            (ControlPlaneAction::Backup, BACKUP),
        ])
        .expect("the ControlPlaneOps graphs are valid")
    });

crate::common::ops_kind!(ControlPlaneOps: ControlPlaneAction, ControlPlaneOpsStep, GRAPHS);

fn step_schema(_: &mut SchemaGenerator) -> Schema {
    StepSnapshot::schema_for_steps(&GRAPHS.declared_state_names())
}

/// The progress of the operation.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneOpsStatus {
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
    /// When the operation took the control plane's lock.
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
    /// The FoundationDBBackup a Backup requested or triggered (not owned by the
    /// operation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_ref: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use ControlPlaneOpsStep::*;

    #[test]
    fn the_unabortable_steps_are_those_with_a_side_effect_in_flight() {
        let mut unabortable = GRAPHS.unabortable_states();
        unabortable.sort();
        assert_eq!(unabortable, [Restarting, Awaiting, Applying, Verifying]);
    }
}

//! PersistentVolumeOps (`pvops`): one audited operation on one PersistentVolume, which
//! today means moving the volume's backing logical volume (and the other volumes of its
//! NVMe-oF subsystem) to another storage node.
//!
//! The one cluster-scoped Ops kind, because its target, a PersistentVolume, is. Its target
//! is a core type with no status of ours, so the lock is the annotation
//! [`crate::keys::ACTIVE_OPS_ANNOTATION`] on every PersistentVolume of the subsystem
//! rather than a `status.activeOpsRef`; and a namespaced creator cannot own it, so the
//! creator is named in `spec.creatorRef`. The cluster, pool and volume come from the
//! volume's CSI handle, not from the spec.

use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use simplyblock_statemachine::{Action, GraphDef, MultiGraph, StateDef, StepSnapshot, state_enum};

use crate::common::OpsPhase;

/// One operation on one PersistentVolume. Only `spec.abort` may change after creation;
/// operations on the volumes of one NVMe-oF subsystem run one at a time.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "PersistentVolumeOps",
    plural = "persistentvolumeops",
    status = "PersistentVolumeOpsStatus",
    shortname = "pvops",
    category = "simplyblock",
    doc = "One operation on a PersistentVolume (migrate its logical volume, with the other volumes of its NVMe-oF subsystem, to another storage node), kept as an audit record once it has finished.",
    printcolumn(
        name = "Volume",
        type_ = "string",
        json_path = ".spec.persistentVolumeName"
    ),
    printcolumn(name = "Action", type_ = "string", json_path = ".spec.action"),
    printcolumn(
        name = "Target",
        type_ = "string",
        json_path = ".spec.migrate.targetNodeRef.name"
    ),
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
    ),
    selectable = ".spec.persistentVolumeName"
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.action == 'Migrate' ? has(self.migrate) : !has(self.migrate)").message(
    "migrate is required for action Migrate and must be absent otherwise"
))]
#[x_kube(validation = Rule::new("has(self.migrate) == has(oldSelf.migrate)").message("spec.migrate is immutable"))]
#[x_kube(validation = Rule::new("has(self.creatorRef) == has(oldSelf.creatorRef)").message("spec.creatorRef is immutable"))]
pub struct PersistentVolumeOpsSpec {
    /// The PersistentVolume the operation acts on, by name. A volume rather than its claim:
    /// a volume kept under a Retain policy outlives its claim and still occupies a node.
    /// Immutable. Selectable: `kubectl get pvops --field-selector
    /// spec.persistentVolumeName=<pv>`.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.persistentVolumeName is immutable: an operation acts on one volume; create another operation for another volume"
    ))]
    pub persistent_volume_name: String,

    /// The operation. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.action is immutable: an operation performs one action; create another operation for another action"
    ))]
    pub action: VolumeAction,

    /// Ask a running operation to stop and unwind (the backend migration is cancelled).
    /// Honoured in Validating and Migrating; in Verifying the volume has already moved.
    #[serde(default)]
    pub abort: bool,

    /// Parameters of action Migrate. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.migrate is immutable"))]
    pub migrate: Option<MigrateVolumeSpec>,

    /// The object that created this operation (a StorageNodeOps draining its node); its
    /// finalizer aborts and deletes the operations it created. Absent on an operation
    /// written by hand. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.creatorRef is immutable"))]
    pub creator_ref: Option<CreatorReference>,
}

/// The operations a PersistentVolumeOps can perform.
#[derive(
    Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
pub enum VolumeAction {
    /// Move the volume's logical volume, with the other volumes of its NVMe-oF subsystem,
    /// to another storage node.
    Migrate,
}

impl VolumeAction {
    pub const ALL: &'static [VolumeAction] = &[VolumeAction::Migrate];
}

impl Action for VolumeAction {
    fn name(self) -> &'static str {
        match self {
            VolumeAction::Migrate => "Migrate",
        }
    }
}

/// Where Migrate moves the volume.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MigrateVolumeSpec {
    /// The StorageNode the volume moves to. It must belong to the volume's cluster (checked
    /// at admission). The controller reads its backend id from `status.uuid`.
    pub target_node_ref: StorageNodeReference,
}

/// A StorageNode, named from a cluster-scoped object: its namespace and name.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StorageNodeReference {
    /// The StorageNode's namespace (its StorageCluster's).
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// The StorageNode's name.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
}

/// The object that created an operation. A cluster-scoped object cannot be owned by a
/// namespaced one, so the creator is named here, with its UID: a creator deleted and made
/// again under the same name is not the same creator.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CreatorReference {
    /// The creator's kind, e.g. `StorageNodeOps`.
    pub kind: String,
    /// The creator's namespace.
    pub namespace: String,
    /// The creator's name.
    pub name: String,
    /// The creator's UID.
    pub uid: String,
}

state_enum! {
    /// Every step of every PersistentVolumeOps action.
    pub enum VolumeOpsStep {
        Validating,
        Migrating,
        Verifying,
    }
}

/// Migrating's budget before the per-member term: the control plane's own default
/// deadline for a migration.
pub const MIGRATING_BASE: Duration = Duration::from_secs(4 * 60 * 60);
/// Migrating's budget grows by this for every volume of the subsystem.
pub const MIGRATING_PER_MEMBER: Duration = Duration::from_secs(30 * 60);

/// Validating (the backend migration pre-created, every consuming node checked), the copy,
/// and the cleanup; the copy can still be cancelled, the cleanup cannot be withdrawn.
const MIGRATE: GraphDef<'static, VolumeOpsStep> = GraphDef::new(
    VolumeOpsStep::Validating,
    &[
        StateDef::new(VolumeOpsStep::Validating)
            .to(&[VolumeOpsStep::Migrating])
            .abortable()
            .deadline(Duration::from_secs(30 * 60)),
        StateDef::new(VolumeOpsStep::Migrating)
            .to(&[VolumeOpsStep::Verifying])
            .abortable()
            .deadline(MIGRATING_BASE),
        StateDef::new(VolumeOpsStep::Verifying).deadline(Duration::from_secs(10 * 60)),
    ],
);

/// The step graph of every action.
pub static GRAPHS: LazyLock<MultiGraph<VolumeAction, VolumeOpsStep>> = LazyLock::new(|| {
    MultiGraph::new(&[(VolumeAction::Migrate, MIGRATE)])
        .expect("the PersistentVolumeOps graphs are valid")
});

crate::common::ops_kind!(PersistentVolumeOps: VolumeAction, VolumeOpsStep, GRAPHS);

/// Migrating's deadline budget for a subsystem of `members` volumes.
pub fn migrating_budget(members: u32) -> Duration {
    MIGRATING_BASE + MIGRATING_PER_MEMBER * members.max(1)
}

fn step_schema(_: &mut SchemaGenerator) -> Schema {
    StepSnapshot::schema_for_steps(&GRAPHS.declared_state_names())
}

/// The progress of the operation.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PersistentVolumeOpsStatus {
    /// Pending, Running, Succeeded, Failed or Aborted.
    #[serde(default)]
    pub phase: OpsPhase,
    /// The current step of the action's graph and its deadline.
    #[serde(default, skip_serializing_if = "StepSnapshot::is_empty")]
    #[schemars(schema_with = "step_schema")]
    pub step: StepSnapshot,
    /// The migration's working record: what a restarted controller reads to find the
    /// backend migration and the Jobs it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<MigrationStatus>,
    /// When the operation was first held (behind another operation's lock, or by a control
    /// plane not yet accepting migrations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred_since: Option<Time>,
    /// Why the phase is what it is, in one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the operation took the subsystem's lock.
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

/// Everything about the migration, as opposed to the operation.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MigrationStatus {
    /// The control plane's id of the migration.
    #[serde(
        default,
        rename = "migrationUUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub migration_uuid: Option<String>,
    /// The cluster part of the volume's CSI handle.
    #[serde(
        default,
        rename = "clusterUUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_uuid: Option<String>,
    /// The pool part of the volume's CSI handle (a legacy handle may carry a pool name).
    #[serde(default, rename = "poolUUID", skip_serializing_if = "Option::is_none")]
    pub pool_uuid: Option<String>,
    /// The volume part of the volume's CSI handle.
    #[serde(
        default,
        rename = "volumeUUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub volume_uuid: Option<String>,
    /// The volume's NVMe-oF subsystem: the control plane migrates a subsystem, with every
    /// volume in it.
    #[serde(
        default,
        rename = "subsystemNQN",
        skip_serializing_if = "Option::is_none"
    )]
    pub subsystem_nqn: Option<String>,
    /// The storage node the volume was on.
    #[serde(
        default,
        rename = "sourceNodeUUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub source_node_uuid: Option<String>,
    /// The storage node it moves to (the target StorageNode's `status.uuid`).
    #[serde(
        default,
        rename = "targetNodeUUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub target_node_uuid: Option<String>,
    /// When the operator asked the control plane to start the copy, written before the
    /// call: a recorded continue is never sent again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_at: Option<Time>,
    /// When the operator asked the control plane to cancel the copy, written before the
    /// call: the control plane reports a cancelled migration active until its runner ends
    /// it, so a pass after a lost answer finds the cancel asked and does not send it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_at: Option<Time>,
    /// How many volumes the subsystem holds (the control plane's count): they all move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub member_count: Option<i32>,
    /// The NVMe-oF paths the migration published on the target.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<MigrationConnection>,
    /// The Jobs that check the consuming nodes reach those paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validation_jobs: Vec<ValidationJob>,
}

/// One NVMe-oF path on the target, with the parameters a consuming host connects it with.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MigrationConnection {
    /// The subsystem the path serves.
    #[serde(default, rename = "nqn", skip_serializing_if = "Option::is_none")]
    pub nqn: Option<String>,
    /// Where the target answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The port it answers on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// The fabric (tcp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// I/O queues.
    #[serde(
        default,
        rename = "nrIOQueues",
        skip_serializing_if = "Option::is_none"
    )]
    pub nr_io_queues: Option<i32>,
    /// Seconds between reconnect attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconnect_delay_seconds: Option<i32>,
    /// Seconds before a lost controller is given up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ctrl_loss_timeout_seconds: Option<i32>,
    /// Seconds before I/O on a lost path fails (0 is a choice: at once).
    #[serde(
        default,
        rename = "fastIOFailTimeoutSeconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub fast_io_fail_timeout_seconds: Option<i32>,
    /// The keep-alive timeout in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_alive_timeout_seconds: Option<i32>,
}

/// One validation Job: it checks one consuming node reaches the target's paths.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ValidationJob {
    /// The Job's namespace.
    pub namespace: String,
    /// The Job's name.
    pub name: String,
    /// The Kubernetes node the Job runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The check passed on that node (kept when the Job itself is gone).
    #[serde(default)]
    pub succeeded: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use VolumeOpsStep::*;

    #[test]
    fn every_action_has_a_graph() {
        assert_eq!(GRAPHS.actions(), VolumeAction::ALL.to_vec());
    }

    #[test]
    fn only_verifying_cannot_be_aborted() {
        // Verifying starts once the copy finished: the volume has moved, nothing to undo.
        assert_eq!(GRAPHS.unabortable_states(), vec![Verifying]);
        let g = GRAPHS.graph(VolumeAction::Migrate).expect("graph");
        assert!(g.allows(Validating, Migrating));
        assert!(g.allows(Migrating, Verifying));
        assert!(!g.allows(Validating, Verifying));
    }

    #[test]
    fn the_copy_budget_grows_with_the_subsystem() {
        assert_eq!(migrating_budget(0), migrating_budget(1));
        assert_eq!(
            migrating_budget(3) - migrating_budget(1),
            MIGRATING_PER_MEMBER * 2
        );
    }

    #[test]
    fn status_keys_are_the_reference_spelling() {
        let status = MigrationStatus {
            migration_uuid: Some("m".into()),
            cluster_uuid: Some("c".into()),
            pool_uuid: Some("p".into()),
            volume_uuid: Some("v".into()),
            subsystem_nqn: Some("n".into()),
            source_node_uuid: Some("s".into()),
            target_node_uuid: Some("t".into()),
            member_count: Some(1),
            connections: vec![MigrationConnection {
                nqn: Some("n".into()),
                nr_io_queues: Some(2),
                fast_io_fail_timeout_seconds: Some(0),
                ..MigrationConnection::default()
            }],
            ..MigrationStatus::default()
        };
        let json = serde_json::to_value(&status).expect("json");
        let mut keys: Vec<&str> = json
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "clusterUUID",
                "connections",
                "memberCount",
                "migrationUUID",
                "poolUUID",
                "sourceNodeUUID",
                "subsystemNQN",
                "targetNodeUUID",
                "volumeUUID"
            ]
        );
        let path = &json["connections"][0];
        assert_eq!(path["nrIOQueues"], 2);
        assert_eq!(path["fastIOFailTimeoutSeconds"], 0);
    }
}

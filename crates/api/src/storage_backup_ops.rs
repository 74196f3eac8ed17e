//! StorageBackupOps (`sbops`): one audited operation on one StorageBackup. Its one action,
//! Restore, fills a new volume from the backup and binds it to a new claim.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use simplyblock_statemachine::{Action, GraphDef, MultiGraph, StateDef, StepSnapshot, state_enum};

use crate::common::OpsPhase;

/// The finalizer that holds an operation until a volume it created and abandoned is gone.
pub const BACKUP_OPS_FINALIZER: &str = "storage.simplyblock.io/storagebackupops-finalizer";

/// One operation on one StorageBackup, kept as an audit record.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "StorageBackupOps",
    plural = "storagebackupops",
    namespaced,
    status = "StorageBackupOpsStatus",
    shortname = "sbops",
    category = "simplyblock",
    doc = "One operation on a StorageBackup (restore it into a new claim), kept as an audit record.",
    printcolumn(name = "Backup", type_ = "string", json_path = ".spec.backupRef"),
    printcolumn(name = "Action", type_ = "string", json_path = ".spec.action"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Step", type_ = "string", json_path = ".status.step.state"),
    printcolumn(
        name = "Claim",
        type_ = "string",
        json_path = ".status.claimName",
        priority = 1
    ),
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
#[x_kube(validation = Rule::new("self.action != 'Restore' || has(self.restore)").message(
    "action Restore needs spec.restore: the claim to create and, optionally, the pool to restore into"
))]
pub struct StorageBackupOpsSpec {
    /// The StorageBackup, in this namespace, the operation acts on. Immutable.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.backupRef is immutable: an operation acts on one backup; create another operation for another backup"
    ))]
    pub backup_ref: String,

    /// The operation. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.action is immutable: an operation performs one action; create another operation for another action"
    ))]
    pub action: BackupAction,

    /// Parameters of action Restore. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.restore is immutable: a restore creates the claim it was created for; create another operation"
    ))]
    pub restore: Option<RestoreSpec>,

    /// Ask a running operation to stop, honoured at Validating and Restoring (a volume
    /// the restore created is deleted).
    #[serde(default)]
    pub abort: bool,
}

/// Where a restore puts the backup's data.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSpec {
    /// The PersistentVolumeClaim to create, bound to the restored volume. It must not
    /// exist: a restore never adopts a claim, since that would replace a workload's data.
    #[schemars(length(min = 1, max = 253))]
    pub claim_name: String,
    /// The claim's namespace; this operation's when empty. The requester must be allowed
    /// to create claims there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub claim_namespace: Option<String>,
    /// The StoragePool, of the backup's cluster, the volume is restored into; the pool the
    /// backup was taken from when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub target_pool: Option<String>,
    /// Labels of the claim.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub claim_labels: BTreeMap<String, String>,
    /// Annotations of the claim.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub claim_annotations: BTreeMap<String, String>,
}

/// The operations a StorageBackupOps can perform.
#[derive(
    Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
pub enum BackupAction {
    /// Fill a new volume from the backup and bind it to a new claim.
    Restore,
}

impl Action for BackupAction {
    fn name(self) -> &'static str {
        match self {
            BackupAction::Restore => "Restore",
        }
    }
}

state_enum! {
    /// Every step of every StorageBackupOps action.
    pub enum BackupOpsStep {
        Validating,
        Restoring,
        AwaitingVolume,
        Binding,
    }
}

const RESTORE: GraphDef<'static, BackupOpsStep> = GraphDef::new(
    BackupOpsStep::Validating,
    &[
        StateDef::new(BackupOpsStep::Validating)
            .to(&[BackupOpsStep::Restoring])
            .abortable()
            .deadline(Duration::from_secs(2 * 60)),
        StateDef::new(BackupOpsStep::Restoring)
            .to(&[BackupOpsStep::AwaitingVolume])
            .abortable()
            .deadline(Duration::from_secs(10 * 60)),
        StateDef::new(BackupOpsStep::AwaitingVolume)
            .to(&[BackupOpsStep::Binding])
            .deadline(Duration::from_secs(24 * 60 * 60)),
        StateDef::new(BackupOpsStep::Binding).deadline(Duration::from_secs(15 * 60)),
    ],
);

/// The step graph of every action.
pub static GRAPHS: LazyLock<MultiGraph<BackupAction, BackupOpsStep>> = LazyLock::new(|| {
    MultiGraph::new(&[(BackupAction::Restore, RESTORE)])
        .expect("the StorageBackupOps graphs are valid")
});

crate::common::ops_kind!(StorageBackupOps: BackupAction, BackupOpsStep, GRAPHS);

/// The steps at which deleting an unfinished operation is refused: from the restore call
/// on, the operation is the only record of the volume the control plane makes. Restoring
/// can still be aborted (the volume is deleted), but not by deleting the record.
pub const UNDELETABLE_STEPS: [BackupOpsStep; 3] = [
    BackupOpsStep::Restoring,
    BackupOpsStep::AwaitingVolume,
    BackupOpsStep::Binding,
];

fn step_schema(_: &mut SchemaGenerator) -> Schema {
    StepSnapshot::schema_for_steps(&GRAPHS.declared_state_names())
}

/// The progress of the operation.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageBackupOpsStatus {
    /// Pending, Running, Succeeded, Failed or Aborted.
    #[serde(default)]
    pub phase: OpsPhase,
    /// The current step of the action's graph and its deadline.
    #[serde(default, skip_serializing_if = "StepSnapshot::is_empty")]
    #[schemars(schema_with = "step_schema")]
    pub step: StepSnapshot,
    /// The control plane's cluster UUID the backup is restored in.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "clusterID")]
    pub cluster_id: Option<String>,
    /// The control plane's id of the backup restored.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "backupID")]
    pub backup_id: Option<String>,
    /// The pool restored into.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "poolUUID")]
    pub pool_uuid: Option<String>,
    /// The volume the control plane filled from the backup.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "restoredLvolID"
    )]
    pub restored_lvol_id: Option<String>,
    /// The PersistentVolume of the restored volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_name: Option<String>,
    /// The claim created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// Its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_namespace: Option<String>,
    /// Why the phase is what it is, in one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the operation took the backup's lock.
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

impl StorageBackupOps {
    /// The namespace of the claim a restore creates.
    pub fn claim_namespace(&self) -> Option<String> {
        use kube::ResourceExt;
        self.spec
            .restore
            .as_ref()
            .and_then(|r| r.claim_namespace.clone())
            .or_else(|| self.namespace())
    }

    /// Whether the operation was carried over from the Go operator as a record only.
    pub fn is_historical_record(&self) -> bool {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::keys::HISTORICAL_RECORD_ANNOTATION))
            .is_some_and(|v| v == "true")
    }
}

//! StorageBackup (`sb`): one backup in a cluster's backup store.
//!
//! Two forms, one kind. A *record* (`spec.clusterRef`) is written by the operator for every
//! backup the control plane reports, and removed when the backup leaves the store; it is
//! never written by hand. A *request* (`spec.source`) is written by a user to take one
//! backup of a claim now, the way a VolumeSnapshot is, and then reports that backup.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The finalizer that holds a request with `deletionPolicy: Delete` until its backups are
/// deleted.
pub const BACKUP_FINALIZER: &str = "storage.simplyblock.io/storagebackup-finalizer";

/// One backup in a cluster's backup store: a record the operator keeps, or a request for
/// one backup of a claim.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "StorageBackup",
    plural = "storagebackups",
    namespaced,
    status = "StorageBackupStatus",
    shortname = "sb",
    category = "simplyblock",
    doc = "One backup of a volume in a cluster's backup store: a record the operator keeps of what the store holds, or a request for one backup of a claim now.",
    printcolumn(
        name = "Claim",
        type_ = "string",
        json_path = ".status.source.claimName"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Size", type_ = "integer", json_path = ".status.backup.size"),
    printcolumn(
        name = "Pool",
        type_ = "string",
        json_path = ".status.source.poolName",
        priority = 1
    ),
    printcolumn(
        name = "BackupID",
        type_ = "string",
        json_path = ".status.backup.backupID",
        priority = 1
    ),
    printcolumn(
        name = "Completed",
        type_ = "date",
        json_path = ".status.backup.completedAt"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.source) != has(self.clusterRef)").message(
    "set exactly one of source (to request a backup of a claim) or clusterRef (a record the operator keeps of a backup the store holds)"
))]
#[x_kube(validation = Rule::new("!has(self.deletionPolicy) || self.deletionPolicy == 'Retain' || has(self.source)").message(
    "deletionPolicy Delete is for requests (spec.source): a record goes when its backup leaves the store, by the policy that took it"
))]
pub struct StorageBackupSpec {
    /// A record's cluster: the StorageCluster whose control plane reports the backup.
    /// Written by the operator. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.clusterRef is immutable"))]
    pub cluster_ref: Option<BackupClusterRef>,

    /// A request: take one backup of this claim now. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.source is immutable: a request takes one backup of one claim; create another request"
    ))]
    pub source: Option<BackupRequest>,

    /// What deleting a request does to its backup. `Retain` (the default) leaves it in
    /// the store, where it stays restorable and is recorded as a record. `Delete` deletes
    /// the backups of the claim's volume: the control plane deletes a volume's chain
    /// together, since each backup builds on the one before, and refuses while a policy
    /// still covers the claim (those backups expire by the policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<BackupDeletionPolicy>,
}

/// The StorageCluster a record's backup is in.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BackupClusterRef {
    /// The StorageCluster's name.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// Its namespace; this object's when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
}

/// A request for one backup of a claim.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BackupRequest {
    /// The PersistentVolumeClaim to back up.
    #[schemars(length(min = 1, max = 253))]
    pub claim_name: String,
    /// The claim's namespace; this object's when empty. The requester must be allowed to
    /// read claims there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub claim_namespace: Option<String>,
}

/// What deleting a request does to its backup.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BackupDeletionPolicy {
    /// The backup stays in the store.
    #[default]
    Retain,
    /// The claim's volume's backups are deleted.
    Delete,
}

/// Where a backup stands.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BackupPhase {
    /// Not started yet, or waiting for what it needs.
    #[default]
    Pending,
    /// Being written to the store (or merged, or removed).
    Creating,
    /// Complete and restorable.
    Available,
    /// The control plane gave up on it.
    Failed,
}

/// The state of the backup.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageBackupStatus {
    /// Pending, Creating, Available or Failed.
    #[serde(default)]
    pub phase: BackupPhase,
    /// The control plane's word for the backup's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_status: Option<String>,
    /// The control plane's cluster UUID that reports the backup.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "clusterID")]
    pub cluster_id: Option<String>,
    /// The copy in the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupCopy>,
    /// What was backed up, written once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<BackupSource>,
    /// The StorageBackupOps that holds this backup (one restore at a time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_ops_ref: Option<String>,
    /// Why the phase is what it is, in one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready (the backup is complete and restorable), Progressing (being taken) and Degraded (it failed). `kubectl wait --for=condition=Ready` waits for the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A copy in the store.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct BackupCopy {
    /// The control plane's id of the backup.
    #[serde(rename = "backupID")]
    pub backup_id: String,
    /// Its number in the store.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "s3ID")]
    pub s3_id: Option<i64>,
    /// Bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub size: Option<i64>,
    /// The backup this one builds on; none for the first of a chain.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "previousBackupID"
    )]
    pub previous_backup_id: Option<String>,
    /// When the backup was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
}

/// What a backup is a copy of.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct BackupSource {
    /// The claim, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// The claim's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_namespace: Option<String>,
    /// The claim's PersistentVolume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_name: Option<String>,
    /// The pool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_name: Option<String>,
    /// The pool's UUID.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "poolUUID")]
    pub pool_uuid: Option<String>,
    /// The volume's id.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "lvolID")]
    pub lvol_id: Option<String>,
    /// The volume's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lvol_name: Option<String>,
    /// The volume's filesystem, restored with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_type: Option<String>,
    /// The snapshot backed up.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "snapshotID"
    )]
    pub snapshot_id: Option<String>,
    /// Its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_name: Option<String>,
    /// The storage node that held the volume.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "nodeID")]
    pub node_id: Option<String>,
    /// The cluster the volume was in (another one's, for a backup another cluster wrote
    /// to the same store).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "clusterUUID"
    )]
    pub cluster_uuid: Option<String>,
}

impl StorageBackup {
    /// Whether this is a request for a backup rather than a record of one.
    pub fn is_request(&self) -> bool {
        self.spec.source.is_some()
    }

    /// The backup's id in the control plane, once known.
    pub fn backup_id(&self) -> Option<&str> {
        self.status
            .as_ref()?
            .backup
            .as_ref()
            .map(|b| b.backup_id.as_str())
    }

    /// The phase; Pending before any status.
    pub fn phase(&self) -> BackupPhase {
        self.status.as_ref().map(|s| s.phase).unwrap_or_default()
    }
}

/// The phase a backup's control-plane state maps to; `None` for `merged`, which counts as
/// gone (its data was folded into the next of its chain).
pub fn phase_of(api_status: &str) -> Option<BackupPhase> {
    Some(match api_status {
        "completed" => BackupPhase::Available,
        "failed" => BackupPhase::Failed,
        "in_progress" | "merging" | "deleting" => BackupPhase::Creating,
        "merged" => return None,
        _ => BackupPhase::Pending,
    })
}

/// The sentence a person reads for a control-plane state.
pub fn message_of(api_status: &str) -> String {
    match api_status {
        "completed" => "The copy is complete and can be restored".into(),
        "failed" => "The control plane reported the backup as failed".into(),
        "merging" => "The control plane is merging this copy into its chain".into(),
        "deleting" => "The control plane is removing this copy".into(),
        "in_progress" => "The copy is being written to the store".into(),
        other => format!("The control plane reports the backup as {other:?}"),
    }
}

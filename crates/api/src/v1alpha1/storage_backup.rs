//! StorageBackup at v1alpha1: one backup the Go operator both requested (from a claim) and
//! recorded (its control-plane state, flat in the status). Imported backups name no claim
//! and carry the cluster that wrote them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One backup of a claim's volume (v1alpha1).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha1",
    kind = "StorageBackup",
    plural = "storagebackups",
    namespaced,
    status = "StorageBackupStatus",
    doc = "One backup of a volume (v1alpha1, as the Go operator stored it; v1alpha2 is the current version).",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "PVC", type_ = "string", json_path = ".spec.pvcRef.name"),
    printcolumn(name = "BackupID", type_ = "string", json_path = ".status.backupID"),
    printcolumn(
        name = "Snapshot",
        type_ = "string",
        json_path = ".status.snapshotName"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct StorageBackupSpec {
    /// The target storage cluster's name. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("field is immutable"))]
    pub cluster_name: String,
    /// The claim whose volume is snapshotted and backed up; none on an imported backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_ref: Option<PersistentVolumeClaimRef>,
    /// Reserved: retired; v1alpha1 keeps it for the round trip and nothing acts on it.
    /// The snapshot's name, when not the one the operator chooses.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub snapshot_name: String,
    /// Reserved: retired with BackupImport; v1alpha1 keeps it for the round trip and
    /// nothing acts on it. The cluster an imported backup came from.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        rename = "sourceClusterUUID"
    )]
    pub source_cluster_uuid: String,
}

/// A claim, in the backup's namespace unless named.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
pub struct PersistentVolumeClaimRef {
    /// The claim's name.
    pub name: String,
    /// The claim's namespace, when not the backup's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// The state of the backup (v1alpha1): the control plane's record of it, flat.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageBackupStatus {
    /// Pending, InProgress, Done, Failed, Merging or Deleting.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// The control plane's word for the backup's state.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_status: String,
    /// The latest reconciliation detail or error.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The control plane's cluster UUID.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        rename = "clusterUUID"
    )]
    pub cluster_uuid: String,
    /// The claim's namespace, resolved.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pvc_namespace: String,
    /// The claim's PersistentVolume.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pv_name: String,
    /// The pool's name, from the volume handle.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pool_name: String,
    /// The pool's UUID.
    #[serde(default, skip_serializing_if = "String::is_empty", rename = "poolUUID")]
    pub pool_uuid: String,
    /// The volume's id.
    #[serde(default, skip_serializing_if = "String::is_empty", rename = "lvolID")]
    pub lvol_id: String,
    /// The volume's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lvol_name: String,
    /// The volume's filesystem.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fs_type: String,
    /// The snapshot backed up.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        rename = "snapshotID"
    )]
    pub snapshot_id: String,
    /// Its name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub snapshot_name: String,
    /// The cluster that wrote an imported backup.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        rename = "sourceClusterUUID"
    )]
    pub source_cluster_uuid: String,
    /// The control plane's id of the backup.
    #[serde(default, skip_serializing_if = "String::is_empty", rename = "backupID")]
    pub backup_id: String,
    /// Its number in the store.
    #[serde(default, skip_serializing_if = "is_zero", rename = "s3ID")]
    pub s3_id: i64,
    /// The storage node that held the volume.
    #[serde(default, skip_serializing_if = "String::is_empty", rename = "nodeID")]
    pub node_id: String,
    /// The backup this one builds on.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        rename = "prevBackupID"
    )]
    pub prev_backup_id: String,
    /// Bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub size: i64,
    /// The hosts the volume allowed, as the control plane reported them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<BTreeMap<String, String>>,
    /// When the backup was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Time>,
    /// When it completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

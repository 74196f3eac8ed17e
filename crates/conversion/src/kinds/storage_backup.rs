//! StorageBackup: v1alpha1 both requested a backup (`pvcRef`) and recorded it; the hub says
//! one or the other (exactly one of `source` and `clusterRef`). A v1alpha1 backup that names
//! a claim is a hub request (`source`), its `clusterName` stashed; one that names none (an
//! imported backup) is a record (`clusterRef`). The flat status goes into `backup` and
//! `source`; the phase is folded into the hub's four (the v1alpha1 one stashed where it does
//! not come back).
//!
//! Stashed going up: `clusterName` of a request, `snapshotName`, `sourceClusterUUID`,
//! `allowedHosts` and a phase the hub cannot say. Going down: `clusterRef.namespace`, a
//! `clusterRef` beside a `source`, `deletionPolicy`, `activeOpsRef`, `observedGeneration`
//! and `source.claimName` of the status.

use kube::CustomResourceExt;
use serde_json::Value;
use simplyblock_api::{StorageBackup, v1alpha1};

use crate::{DOWN_STASH, Kind, Mapping, Rule, SPOKE, path};

pub const KIND: Kind = Kind {
    kind: "StorageBackup",
    rules: &[
        Rule::same("spec.pvcRef.name", "spec.source.claimName"),
        Rule::same("spec.pvcRef.namespace", "spec.source.claimNamespace"),
        Rule::with(
            "spec.clusterName",
            "spec.clusterRef.name",
            Mapping::Code {
                up: |value, object| (!requests(object)).then(|| value.clone()),
                down: |value, _| Some(value.clone()),
            },
        ),
        Rule::with(
            "status.phase",
            "status.phase",
            Mapping::Code {
                up: |value, _| {
                    let phase = value.as_str()?;
                    PHASES
                        .iter()
                        .find(|(v1, _)| *v1 == phase)
                        .map(|(_, hub)| Value::from(*hub))
                },
                down: |value, _| {
                    let phase = value.as_str()?;
                    Some(Value::from(
                        PHASES
                            .iter()
                            .find(|(_, hub)| *hub == phase)
                            .map_or(phase, |(v1, _)| *v1),
                    ))
                },
            },
        ),
        Rule::same("status.clusterUUID", "status.clusterID"),
        Rule::same("status.backupID", "status.backup.backupID"),
        Rule::same("status.s3ID", "status.backup.s3ID"),
        Rule::same("status.prevBackupID", "status.backup.previousBackupID"),
        Rule::same("status.size", "status.backup.size"),
        Rule::same("status.createdAt", "status.backup.startedAt"),
        Rule::same("status.completedAt", "status.backup.completedAt"),
        Rule::same("status.pvcNamespace", "status.source.claimNamespace"),
        Rule::same("status.pvName", "status.source.persistentVolumeName"),
        Rule::same("status.poolName", "status.source.poolName"),
        Rule::same("status.poolUUID", "status.source.poolUUID"),
        Rule::same("status.lvolID", "status.source.lvolID"),
        Rule::same("status.lvolName", "status.source.lvolName"),
        Rule::same("status.fsType", "status.source.fsType"),
        Rule::same("status.snapshotID", "status.source.snapshotID"),
        Rule::same("status.snapshotName", "status.source.snapshotName"),
        Rule::same("status.nodeID", "status.source.nodeID"),
        Rule::same("status.sourceClusterUUID", "status.source.clusterUUID"),
    ],
    v1alpha1: v1alpha1::StorageBackup::crd,
    hub: StorageBackup::crd,
};

/// (v1alpha1, hub): the first pair of a hub phase is what it reads as at v1alpha1, so
/// `Creating` reads `InProgress` and `Merging`/`Deleting` come back from their stash.
const PHASES: &[(&str, &str)] = &[
    ("Pending", "Pending"),
    ("InProgress", "Creating"),
    ("Done", "Available"),
    ("Failed", "Failed"),
    ("Merging", "Creating"),
    ("Deleting", "Creating"),
];

/// Whether `object` (either version) is a hub request: it names a claim, and its cluster
/// does not also come back as the hub's `clusterRef` (a hub object saying both, which the
/// hub's rules refuse but a conversion still carries, stashes it going down).
fn requests(object: &Value) -> bool {
    let claim = if object.get("apiVersion").and_then(Value::as_str) == Some(SPOKE) {
        "spec.pvcRef.name"
    } else {
        "spec.source.claimName"
    };
    let both = object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(format!("{DOWN_STASH}spec.clusterRef.name")))
        .is_some();
    path::get(object, claim).is_some_and(|v| !path::is_empty(v)) && !both
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{HUB, SPOKE, convert};

    /// A backup the Go operator took of a claim and saw complete.
    fn go_backup() -> Value {
        json!({
            "apiVersion": SPOKE,
            "kind": "StorageBackup",
            "metadata": {"name": "db-nightly", "namespace": "simplyblock"},
            "spec": {
                "clusterName": "prod",
                "pvcRef": {"name": "db", "namespace": "apps"},
                "snapshotName": "backup-db-nightly"
            },
            "status": {
                "phase": "Done",
                "apiStatus": "completed",
                "message": "Backup status: completed",
                "clusterUUID": "c-1",
                "pvcNamespace": "apps",
                "pvName": "pvc-1",
                "poolName": "gold",
                "poolUUID": "p-1",
                "lvolID": "l-1",
                "lvolName": "lvol-db",
                "fsType": "ext4",
                "snapshotID": "s-1",
                "snapshotName": "backup-db-nightly",
                "backupID": "b-2",
                "s3ID": 7,
                "nodeID": "n-1",
                "prevBackupID": "b-1",
                "size": 1_073_741_824_i64,
                "allowedHosts": [{"nqn": "nqn.host-1"}],
                "createdAt": "2026-01-02T03:04:05Z",
                "completedAt": "2026-01-02T03:05:05Z"
            }
        })
    }

    #[test]
    fn a_go_backup_of_a_claim_is_a_hub_request_and_comes_back_whole() {
        let hub = convert(&go_backup(), HUB);
        assert_eq!(
            hub["spec"],
            json!({"source": {"claimName": "db", "claimNamespace": "apps"}})
        );
        assert_eq!(
            hub["status"],
            json!({
                "phase": "Available",
                "apiStatus": "completed",
                "message": "Backup status: completed",
                "clusterID": "c-1",
                "backup": {"backupID": "b-2", "s3ID": 7, "previousBackupID": "b-1",
                           "size": 1_073_741_824_i64, "startedAt": "2026-01-02T03:04:05Z",
                           "completedAt": "2026-01-02T03:05:05Z"},
                "source": {"claimNamespace": "apps", "persistentVolumeName": "pvc-1",
                           "poolName": "gold", "poolUUID": "p-1", "lvolID": "l-1",
                           "lvolName": "lvol-db", "fsType": "ext4", "snapshotID": "s-1",
                           "snapshotName": "backup-db-nightly", "nodeID": "n-1"}
            })
        );
        assert_eq!(
            hub["metadata"]["annotations"],
            json!({
                "storage.simplyblock.io/v1alpha1-spec.clusterName": "\"prod\"",
                "storage.simplyblock.io/v1alpha1-spec.snapshotName": "\"backup-db-nightly\"",
                "storage.simplyblock.io/v1alpha1-status.allowedHosts": "[{\"nqn\":\"nqn.host-1\"}]"
            })
        );
        assert_eq!(convert(&hub, SPOKE), go_backup());
    }

    #[test]
    fn an_imported_go_backup_is_a_hub_record() {
        let mut imported = go_backup();
        imported["spec"] = json!({"clusterName": "prod", "sourceClusterUUID": "c-0"});
        imported["status"] =
            json!({"phase": "Merging", "backupID": "b-2", "sourceClusterUUID": "c-0"});
        let hub = convert(&imported, HUB);
        assert_eq!(hub["spec"], json!({"clusterRef": {"name": "prod"}}));
        assert_eq!(
            hub["status"],
            json!({"phase": "Creating", "backup": {"backupID": "b-2"}, "source": {"clusterUUID": "c-0"}})
        );
        assert_eq!(
            hub["metadata"]["annotations"]["storage.simplyblock.io/v1alpha1-status.phase"],
            json!("\"Merging\"")
        );
        assert_eq!(convert(&hub, SPOKE), imported);
    }

    #[test]
    fn a_hub_phase_the_operator_moved_on_drops_the_stashed_one() {
        let mut imported = go_backup();
        imported["spec"] = json!({"clusterName": "prod"});
        imported["status"] = json!({"phase": "Merging"});
        let mut hub = convert(&imported, HUB);
        hub["status"]["phase"] = json!("Available");
        assert_eq!(convert(&hub, SPOKE)["status"], json!({"phase": "Done"}));
    }

    #[test]
    fn a_hub_record_reads_with_its_cluster_and_keeps_what_v1alpha1_cannot_say() {
        let hub = json!({
            "apiVersion": HUB,
            "kind": "StorageBackup",
            "metadata": {"name": "b-3", "namespace": "simplyblock"},
            "spec": {"clusterRef": {"name": "prod", "namespace": "storage"}},
            "status": {"phase": "Creating", "activeOpsRef": "restore-1", "observedGeneration": 1,
                       "source": {"claimName": "db"}}
        });
        let down = convert(&hub, SPOKE);
        assert_eq!(down["spec"], json!({"clusterName": "prod"}));
        assert_eq!(down["status"], json!({"phase": "InProgress"}));
        assert_eq!(convert(&down, HUB), hub);
    }
}

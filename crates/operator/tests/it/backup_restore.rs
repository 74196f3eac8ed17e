//! StorageBackupOps Restore on the real API server and sbsim: a backup of a volume restored
//! into a new claim in another namespace (a pre-bound PersistentVolume of the restored
//! volume, the claim bound to it), a claim that exists refused, an abort at Restoring that
//! deletes the volume the restore created, and the DELETE guard. The PersistentVolume
//! binder of kube-controller-manager, which this API server runs without, is played by
//! [`simplyblock_testenv::standin::prebound_claims`].

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use simplyblock_api::StoragePool;
use simplyblock_api::common::OpsPhase;
use simplyblock_api::keys::RESTORED_BY_LABEL;
use simplyblock_api::storage_backup::StorageBackup;
use simplyblock_api::storage_backup_ops::StorageBackupOps;
use simplyblock_api::storage_pool::PoolPhase;
use simplyblock_controlplane::{Uuid, VolumeCreate, VolumeStatus};
use simplyblock_operator::backup::restore::restored_name;

use crate::support::{Harness, PATIENCE, harness_with_store, raised, until, until_explained};

/// A harness whose backups and restores take a moment, not seconds.
async fn backup_harness(ns: &str, restore_ms: i64) -> Harness {
    let timings = simplyblock_simulator::Timings {
        backup_ms: 200,
        restore_ms,
        ..Default::default()
    };
    let h = harness_with_store(ns, timings, ns).await;
    h.activated().await;
    crate::support::webhooks().await;
    h
}

/// Pool `data` made by the pool controller (its StorageClass too); its control-plane id.
async fn pool(h: &Harness) -> Uuid {
    let pools: Api<StoragePool> = Api::namespaced(h.kube.clone(), &h.ns);
    let pool: StoragePool = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StoragePool",
        "metadata": {"name": "data"}, "spec": {"clusterRef": "sb"},
    }))
    .expect("pool");
    pools
        .create(&PostParams::default(), &pool)
        .await
        .expect("pool");
    let ready = until("pool data Ready", async || {
        let p = pools.get("data").await.ok()?;
        let s = p.status.as_ref()?;
        (s.phase == PoolPhase::Ready && !s.storage_class_names.is_empty()).then_some(p)
    })
    .await;
    ready
        .status
        .and_then(|s| s.uuid)
        .expect("uuid")
        .parse()
        .expect("uuid")
}

/// A volume of `pool`, a snapshot of it and that snapshot's completed backup, and the
/// StorageBackup record the operator keeps of it (written as the operator); the record.
async fn backed_up_volume(h: &Harness, pool: Uuid) -> (Uuid, String) {
    let volume =
        h.cp.create_volume(
            h.uuid,
            pool,
            &VolumeCreate::new(format!("{}-data", h.ns), 1 << 30),
        )
        .await
        .expect("volume");
    let snapshot =
        h.cp.create_snapshot(h.uuid, pool, volume, "before")
            .await
            .expect("snapshot");
    let backup = h.cp.create_backup(h.uuid, snapshot).await.expect("backup");
    until("the backup completed", async || {
        (h.cp.get_backup(h.uuid, backup).await.ok()?.status.as_str() == "completed").then_some(())
    })
    .await;
    let name = backup.to_string();
    let record: StorageBackup = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageBackup",
        "metadata": {"name": name},
        "spec": {"clusterRef": {"name": "sb"}},
    }))
    .expect("record");
    let records: Api<StorageBackup> = Api::namespaced(h.ctx.kube.clone(), &h.ns);
    records
        .create(&PostParams::default(), &record)
        .await
        .expect("the operator records the backup");
    records
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "phase": "Available", "apiStatus": "completed", "clusterID": h.uuid.to_string(),
                "backup": {"backupID": name, "size": 1u64 << 30},
                "source": {"poolUUID": pool.to_string(), "poolName": "data", "lvolID": volume.to_string(), "fsType": "ext4"},
            }})),
        )
        .await
        .expect("the record's status");
    (volume, name)
}

fn restore_path(h: &Harness) -> String {
    format!("/api/v2/clusters/{}/backups/restore", h.uuid)
}

fn restore(name: &str, backup: &str, claim_ns: &str, claim: &str) -> StorageBackupOps {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageBackupOps",
        "metadata": {"name": name},
        "spec": {"backupRef": backup, "action": "Restore",
                 "restore": {"claimName": claim, "claimNamespace": claim_ns,
                             "claimLabels": {"app": "orders"}}},
    }))
    .expect("restore")
}

async fn ended(h: &Harness, name: &str) -> StorageBackupOps {
    let ops: Api<StorageBackupOps> = Api::namespaced(h.kube.clone(), &h.ns);
    let last = std::sync::Mutex::new(None::<Value>);
    until_explained(
        &format!("{name} terminal"),
        PATIENCE,
        async || {
            let op = ops.get(name).await.ok()?;
            *last.lock().expect("lock") = serde_json::to_value(&op.status).ok();
            op.status.as_ref()?.phase.is_terminal().then_some(op)
        },
        || format!("last seen {:?}", last.lock().expect("lock")),
    )
    .await
}

#[tokio::test]
async fn a_backup_is_restored_into_a_new_claim_of_another_namespace() {
    let h = backup_harness("sbops-restore", 300).await;
    let apps = format!("{}-apps", h.ns);
    crate::support::namespace(&h.kube, &apps).await;
    let _pools = tokio::spawn(simplyblock_operator::pool::controller::run(h.ctx.clone()));
    let pool = pool(&h).await;
    let (_, backup) = backed_up_volume(&h, pool).await;
    let _binder = simplyblock_testenv::standin::prebound_claims(h.kube.clone());
    let _restores = tokio::spawn(simplyblock_operator::backup::restore::run(h.ctx.clone()));
    let before = h
        .calls("POST", "/api/v2/clusters/{cluster_id}/backups/restore")
        .await;

    let ops: Api<StorageBackupOps> = Api::namespaced(h.kube.clone(), &h.ns);
    let op = ops
        .create(
            &PostParams::default(),
            &restore("restore-orders", &backup, &apps, "orders"),
        )
        .await
        .expect("admitted");
    let done = ended(&h, "restore-orders").await;
    let status = done.status.clone().expect("status");
    assert_eq!(status.phase, OpsPhase::Succeeded, "{:?}", status.message);
    crate::kubectl::ready(
        &ops,
        "storagebackupops.storage.simplyblock.io",
        "restore-orders",
    )
    .await;
    assert_eq!(status.step.state.as_deref(), Some("Binding"));
    assert_eq!(status.backup_id.as_deref(), Some(backup.as_str()));
    assert_eq!(status.claim_namespace.as_deref(), Some(apps.as_str()));
    let lvol: Uuid = status
        .restored_lvol_id
        .clone()
        .expect("the volume")
        .parse()
        .expect("uuid");

    // One restore call, into the volume named after the operation, now online.
    assert_eq!(h.calls("POST", &restore_path(&h)).await - before, 1);
    let volume =
        h.cp.get_volume(h.uuid, pool, lvol)
            .await
            .expect("restored volume");
    assert_eq!(volume.name, restored_name(&op));
    assert_eq!(volume.status, VolumeStatus::Online);

    // The claim: new, labelled, bound to a PersistentVolume of that volume in the pool's class.
    let claim = Api::<PersistentVolumeClaim>::namespaced(h.kube.clone(), &apps)
        .get("orders")
        .await
        .expect("claim");
    assert_eq!(
        claim.labels().get(RESTORED_BY_LABEL),
        Some(&"restore-orders".to_owned())
    );
    assert_eq!(claim.labels().get("app"), Some(&"orders".to_owned()));
    assert!(
        claim.owner_references().is_empty(),
        "the claim outlives the operation"
    );
    let pv = Api::<PersistentVolume>::all(h.kube.clone())
        .get(&restored_name(&op))
        .await
        .expect("volume");
    let spec = pv.spec.expect("spec");
    let csi = spec.csi.expect("csi");
    assert_eq!(csi.volume_handle, format!("{}:{pool}:{lvol}", h.uuid));
    assert_eq!(csi.fs_type.as_deref(), Some("ext4"));
    assert_eq!(
        spec.persistent_volume_reclaim_policy.as_deref(),
        Some("Delete")
    );
    assert!(
        spec.storage_class_name
            .as_deref()
            .is_some_and(|c| !c.is_empty()),
        "in the pool's class: {:?}",
        spec.storage_class_name
    );
    assert_eq!(
        claim.spec.and_then(|s| s.storage_class_name),
        spec.storage_class_name
    );

    // The lock went with the end.
    let record: Api<StorageBackup> = Api::namespaced(h.kube.clone(), &h.ns);
    until("the backup unlocked", async || {
        record
            .get(&backup)
            .await
            .ok()?
            .status?
            .active_ops_ref
            .is_none()
            .then_some(())
    })
    .await;
    let succeeded = raised(&h.kube, &h.ns, Some("restore-orders"), "OperationSucceeded").await;
    assert_eq!(succeeded.len(), 1, "{succeeded:?}");
}

#[tokio::test]
async fn a_claim_that_exists_is_never_adopted() {
    let h = backup_harness("sbops-adopt", 300).await;
    let _pools = tokio::spawn(simplyblock_operator::pool::controller::run(h.ctx.clone()));
    let pool = pool(&h).await;
    let (_, backup) = backed_up_volume(&h, pool).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(h.kube.clone(), &h.ns);
    let taken: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "orders"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .expect("claim");
    claims
        .create(&PostParams::default(), &taken)
        .await
        .expect("a workload's claim");
    let ops: Api<StorageBackupOps> = Api::namespaced(h.kube.clone(), &h.ns);
    let refused = ops
        .create(
            &PostParams::default(),
            &restore("over", &backup, &h.ns, "orders"),
        )
        .await
        .expect_err("refused at admission");
    assert!(
        refused
            .to_string()
            .contains("a PersistentVolumeClaim named \"orders\" already exists"),
        "{refused}"
    );
    assert_eq!(h.calls("POST", &restore_path(&h)).await, 0);
}

#[tokio::test]
async fn an_abort_at_restoring_deletes_the_volume_and_deletion_waits_for_the_end() {
    // The restore takes ten seconds: long enough to be caught at AwaitingVolume, and the
    // control plane refuses to delete the volume while it fills.
    let h = backup_harness("sbops-abort", 10_000_000).await;
    let _pools = tokio::spawn(simplyblock_operator::pool::controller::run(h.ctx.clone()));
    let pool = pool(&h).await;
    let (_, backup) = backed_up_volume(&h, pool).await;
    let ops: Api<StorageBackupOps> = Api::namespaced(h.kube.clone(), &h.ns);
    ops.create(
        &PostParams::default(),
        &restore("slow", &backup, &h.ns, "slow"),
    )
    .await
    .expect("admitted");
    let restores = tokio::spawn(simplyblock_operator::backup::restore::run(h.ctx.clone()));
    let at = until("slow at AwaitingVolume", async || {
        let op = ops.get("slow").await.ok()?;
        (op.status.as_ref()?.step.state.as_deref() == Some("AwaitingVolume")).then_some(op)
    })
    .await;
    // Past the restore call the record is the only account of the volume: kept.
    let kept = ops
        .delete("slow", &DeleteParams::default())
        .await
        .expect_err("kept");
    assert!(
        kept.to_string().contains("is at step AwaitingVolume"),
        "{kept}"
    );
    // AwaitingVolume cannot be aborted; stop the operator, put the operation back at
    // Restoring as a crash right after the call would leave it, and abort there.
    restores.abort();
    let lvol = at
        .status
        .clone()
        .and_then(|s| s.restored_lvol_id)
        .expect("volume");
    ops.patch_status(
        "slow",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"step": {"state": "Restoring"}, "restoredLvolID": null}})),
    )
    .await
    .expect("back at Restoring");
    ops.patch(
        "slow",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"abort": true}})),
    )
    .await
    .expect("abort");
    let _restores = tokio::spawn(simplyblock_operator::backup::restore::run(h.ctx.clone()));
    let done = ended(&h, "slow").await;
    assert_eq!(
        done.status.as_ref().map(|s| s.phase),
        Some(OpsPhase::Aborted)
    );
    let lvol: Uuid = lvol.parse().expect("uuid");
    let gone = h.cp.get_volume(h.uuid, pool, lvol).await;
    assert!(
        gone.as_ref().is_err_and(|e| e.is_not_found())
            || gone
                .as_ref()
                .is_ok_and(|v| v.status == VolumeStatus::InDeletion),
        "the volume the restore created is deleted: {gone:?}"
    );
    ops.delete("slow", &DeleteParams::default())
        .await
        .expect("a terminal operation may go");
}

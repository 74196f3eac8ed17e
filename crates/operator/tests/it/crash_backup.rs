//! A StorageBackupOps Restore of a deployed cluster's backup, the operator killed right
//! after each of its non-idempotent calls ([`simplyblock_operator::runtime::crash`]),
//! before the call's answer is on record:
//!
//! - after the restore call (Restoring): the record says nothing of the volume, which the
//!   restarted operator must find by its name, `restore-<uid>`, and not ask for again;
//! - after each create of Binding, the PersistentVolume's and then the claim's: armed
//!   again until a pass leaves Binding without firing, so a create made twice (refused as
//!   existing, which fires too) shows as one fire too many.
//!
//! Then an operator that is not armed finishes. Every control-plane call that changes
//! something from the restore on is counted: the restore took effect once, nothing else
//! was asked. The claim is in a namespace other than the operation's. The test's API
//! server runs no kube-controller-manager, so its PersistentVolume binder, which binds the
//! pre-bound claim, is played by [`simplyblock_testenv::standin::prebound_claims`].
//!
//! On the same deployment: a request for one backup of the restored claim, killed after
//! its snapshot and after its backup, and a policy, killed after the control plane made
//! it. Each is found again (the snapshot by its name, the backup by its snapshot, the
//! policy by its name) and never made twice.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use simplyblock_api::StoragePool;
use simplyblock_api::common::OpsPhase;
use simplyblock_api::keys::RESTORED_BY_LABEL;
use simplyblock_api::storage_backup::{BackupPhase, StorageBackup};
use simplyblock_api::storage_backup_ops::StorageBackupOps;
use simplyblock_api::storage_backup_policy::{BackupPolicyPhase, StorageBackupPolicy};
use simplyblock_controlplane::{Method, VolumeCreate, VolumeStatus};
use simplyblock_operator::backup::restore::restored_name;
use simplyblock_operator::runtime::crash;

use crate::crash::{abort_at, calls, deployment_of, exactly, route, until_deployed};
use crate::crash_day2::{Seen, Standing, create_armed, finish_unarmed, fire_until_past};
use crate::support::until;

/// The operation, and the claim it restores into.
const NAME: &str = "crash-restore";
const CLAIM: &str = "orders";
/// The object store of the cluster's backups, set up in sbsim as a user sets up MinIO.
const STORE: &str = "http://minio.test:9000";
const BUCKET: &str = "backups";
const KEY: (&str, &str) = ("AKIDCRASH", "crash-secret");
const CREDENTIALS: &str = "backup-store";

const RESTORE: &str = "POST /api/v2/clusters/{cluster_id}/backups/restore";
const SNAPSHOT: &str =
    "POST /api/v2/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/snapshots";
const BACKUP: &str = "POST /api/v2/clusters/{cluster_id}/backups/";
const POLICIES: &str = "POST /api/v2/clusters/{cluster_id}/backups/backup-policies/";
/// The request for one backup of the restored claim, and the policy.
const REQUEST: &str = "crash-request";
const POLICY: &str = "crash-policy";

fn standing(op: &StorageBackupOps) -> Option<Standing> {
    op.status.as_ref().map(|s| (s.phase, s.step.state.clone()))
}

#[tokio::test]
async fn a_kill_after_every_non_idempotent_call_of_a_restore_changes_nothing() {
    let d = deployment_of("crash-backup", "", 17, &[], |doc| {
        let cluster = doc
            .spec
            .cluster
            .as_mut()
            .expect("the sample names its cluster");
        cluster.backup = Some(
            serde_json::from_value(json!({
                "endpoint": STORE, "bucket": BUCKET, "prefix": "crash-backup",
                "credentialsSecretRef": {"name": CREDENTIALS},
            }))
            .expect("backup store"),
        );
    })
    .await;
    // sbsim refuses backups to a cluster without a store, and the operator names the store
    // when it creates the cluster: both are there before the first operator starts.
    let bucket = json!({"endpoint": STORE, "bucket": BUCKET,
                        "access_key_id": KEY.0, "secret_access_key": KEY.1});
    let made =
        d.cp.raw(
            Method::POST,
            "/../../_sim/object-stores",
            &[],
            Some(&bucket),
        )
        .await
        .expect("the object store");
    assert!(made.status < 300, "the object store: {}", made.status);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": CREDENTIALS},
        "stringData": {"access_key_id": KEY.0, "secret_access_key": KEY.1},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(d.kube.clone(), &d.ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("the store's credentials");
    let mut child = d.operator(None);
    until_deployed(&d).await;
    child.kill().expect("kill");
    child.wait().expect("reaped");

    // A completed backup before any operator runs again: the mirror of the next one
    // records it Available on its first pass.
    let cluster = d.cp.list_clusters().await.expect("clusters")[0].id;
    let pool = d.cp.list_pools(cluster).await.expect("pools")[0].id;
    let volume =
        d.cp.create_volume(cluster, pool, &VolumeCreate::new("crash-orders", 1 << 30))
            .await
            .expect("volume");
    let snapshot =
        d.cp.create_snapshot(cluster, pool, volume, "before")
            .await
            .expect("snapshot");
    let backup = d.cp.create_backup(cluster, snapshot).await.expect("backup");
    until("the backup completed", async || {
        (d.cp.get_backup(cluster, backup).await.ok()?.status.as_str() == "completed").then_some(())
    })
    .await;
    // The volume has no PersistentVolume, so the record cannot say its pool: named here.
    let pools = Api::<StoragePool>::namespaced(d.kube.clone(), &d.ns)
        .list(&Default::default())
        .await
        .expect("pools")
        .items;
    let target = pools
        .iter()
        .find(|p| p.status.as_ref().and_then(|s| s.uuid.as_deref()) == Some(&pool.to_string()))
        .map(|p| p.name_any())
        .expect("the StoragePool of the default pool");
    let apps = format!("{}-apps", d.ns);
    crate::support::namespace(&d.kube, &apps).await;
    let _binder = simplyblock_testenv::standin::prebound_claims(d.kube.clone());
    let from = calls(&d.cp).await.len();

    let ops: Api<StorageBackupOps> = Api::namespaced(d.kube.clone(), &d.ns);
    let seen = Seen::record(ops.clone(), standing);
    let op: StorageBackupOps = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageBackupOps",
        "metadata": {"name": NAME},
        "spec": {"backupRef": backup.to_string(), "action": "Restore",
                 "restore": {"claimName": CLAIM, "claimNamespace": apps, "targetPool": target}},
    }))
    .expect("op");
    let point = crash::ops_point("StorageBackupOps", "Restore", "Restoring");
    create_armed(&d, &point, &ops, &op).await;
    // The kill landed between the call and its answer's record.
    let killed = ops.get(NAME).await.expect("op");
    let status = killed.status.clone().expect("status");
    assert_eq!(
        (
            status.step.state.as_deref(),
            status.restored_lvol_id.as_deref()
        ),
        (Some("Restoring"), None),
        "{:?}",
        status.message
    );
    exactly(&calls(&d.cp).await[from..], RESTORE, 1);

    // Two creates, each a call of its own; a third fire would be a create made again. A
    // restore asked again ends the wait too, to be said by the count below.
    let point = crash::ops_point("StorageBackupOps", "Restore", "Binding");
    let asked_again = async || {
        let log = calls(&d.cp).await;
        log[from..].iter().filter(|c| route(c) == RESTORE).count() > 1
    };
    let fired = fire_until_past(&d, &point, async || {
        seen.ended(NAME).is_some() || asked_again().await
    })
    .await;
    exactly(&calls(&d.cp).await[from..], RESTORE, 1);
    assert_eq!(fired, 2, "{point}: {:?}", seen.of(NAME));

    let records: Api<StorageBackup> = Api::namespaced(d.kube.clone(), &d.ns);
    let unlocked = async || {
        records
            .get(&backup.to_string())
            .await
            .ok()
            .and_then(|b| b.status)
            .is_some_and(|s| s.active_ops_ref.is_none())
    };
    // The lock goes after the terminal write: the end is awaited with it.
    finish_unarmed(&d, &format!("{NAME} to finish"), async || {
        seen.ended(NAME).is_some() && unlocked().await
    })
    .await;
    let done = ops.get(NAME).await.expect("op");
    let status = done.status.clone().expect("status");
    assert_eq!(status.phase, OpsPhase::Succeeded, "{:?}", status.message);
    assert_eq!(status.step.state.as_deref(), Some("Binding"));
    let named = restored_name(&done);

    // One restore took effect, and nothing else from the restore on changed the control
    // plane: no second volume, none deleted.
    let log = calls(&d.cp).await;
    exactly(&log[from..], RESTORE, 1);
    let changes: Vec<String> = log[from..]
        .iter()
        .filter(|c| c["method"] != "GET")
        .filter(|c| c["path"].as_str().is_some_and(|p| p.starts_with("/api/")))
        .map(route)
        .collect();
    assert_eq!(changes, [RESTORE], "the calls that change something");
    let restored: Vec<_> =
        d.cp.list_volumes(cluster, pool)
            .await
            .expect("volumes")
            .into_iter()
            .filter(|v| v.name == named)
            .collect();
    assert_eq!(restored.len(), 1, "{restored:?}");
    assert_eq!(restored[0].status, VolumeStatus::Online);
    assert_eq!(
        status.restored_lvol_id,
        Some(restored[0].id.to_string()),
        "the record names the volume"
    );

    // One PersistentVolume and one claim, bound to each other.
    let mine = ListParams::default().labels(&format!("{RESTORED_BY_LABEL}={NAME}"));
    let pvs = Api::<PersistentVolume>::all(d.kube.clone())
        .list(&mine)
        .await
        .expect("PersistentVolumes")
        .items;
    let claims = Api::<PersistentVolumeClaim>::all(d.kube.clone())
        .list(&mine)
        .await
        .expect("claims")
        .items;
    assert_eq!(pvs.len(), 1, "{pvs:?}");
    assert_eq!(claims.len(), 1, "{claims:?}");
    let (pv, claim) = (&pvs[0], &claims[0]);
    assert_eq!(pv.name_any(), named);
    assert_eq!(
        (claim.namespace().as_deref(), claim.name_any().as_str()),
        (Some(apps.as_str()), CLAIM)
    );
    assert_eq!(
        (
            pv.status.as_ref().and_then(|s| s.phase.as_deref()),
            claim.status.as_ref().and_then(|s| s.phase.as_deref())
        ),
        (Some("Bound"), Some("Bound"))
    );
    assert_eq!(
        claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
        Some(named.as_str())
    );
    let reserved = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    assert_eq!(
        (
            reserved.and_then(|r| r.namespace.as_deref()),
            reserved.and_then(|r| r.name.as_deref())
        ),
        (Some(apps.as_str()), Some(CLAIM))
    );
    assert_eq!(
        pv.spec
            .as_ref()
            .and_then(|s| s.csi.as_ref())
            .map(|c| c.volume_handle.clone()),
        Some(format!("{cluster}:{pool}:{}", restored[0].id))
    );

    // A request for one backup of the restored claim: killed right after its snapshot,
    // then right after its backup, before the backup's id is written down. The snapshot
    // is found by its name and the backup by its snapshot: each was taken once.
    let from = calls(&d.cp).await.len();
    let requests: Api<StorageBackup> = Api::namespaced(d.kube.clone(), &d.ns);
    let request: StorageBackup = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageBackup",
        "metadata": {"name": REQUEST},
        "spec": {"source": {"claimName": CLAIM, "claimNamespace": apps}},
    }))
    .expect("request");
    requests
        .create(&PostParams::default(), &request)
        .await
        .expect("the request");
    let available = async || {
        requests
            .get(REQUEST)
            .await
            .is_ok_and(|b| b.phase() == BackupPhase::Available)
    };
    for point in [crash::BACKUP_SNAPSHOT, crash::BACKUP_CREATE] {
        assert!(abort_at(&d, point, &available).await, "{point} fired");
    }
    finish_unarmed(&d, "the request Available", available).await;
    let log = calls(&d.cp).await;
    exactly(&log[from..], SNAPSHOT, 1);
    exactly(&log[from..], BACKUP, 1);

    // A policy: killed right after the control plane made it, before its id is on
    // record. The restarted operator finds it by its name and makes no second one.
    let from = calls(&d.cp).await.len();
    let cluster_name = Api::<simplyblock_api::StorageCluster>::namespaced(d.kube.clone(), &d.ns)
        .list(&Default::default())
        .await
        .expect("clusters")
        .items[0]
        .name_any();
    let policies: Api<StorageBackupPolicy> = Api::namespaced(d.kube.clone(), &d.ns);
    let policy: StorageBackupPolicy = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageBackupPolicy",
        "metadata": {"name": POLICY},
        "spec": {"clusterRef": cluster_name, "maxVersions": 3,
                 "claimSelector": {}, "namespaceSelector": {}},
    }))
    .expect("policy");
    // The policy's webhook fails closed: it is created through the armed operator's.
    create_armed(&d, crash::BACKUP_POLICY_CREATE, &policies, &policy).await;
    let active = async || {
        policies.get(POLICY).await.is_ok_and(|p| {
            p.status
                .is_some_and(|s| s.phase == BackupPolicyPhase::Active && s.policy_id.is_some())
        })
    };
    finish_unarmed(&d, "the policy Active", active).await;
    exactly(&calls(&d.cp).await[from..], POLICIES, 1);
    let named: Vec<_> =
        d.cp.list_backup_policies(cluster)
            .await
            .expect("policies")
            .into_iter()
            .filter(|p| p.name == POLICY)
            .collect();
    assert_eq!(named.len(), 1, "{named:?}");
    let recorded = policies.get(POLICY).await.expect("policy").status;
    assert_eq!(
        recorded.and_then(|s| s.policy_id),
        Some(named[0].id.to_string()),
        "the record names the policy the control plane made"
    );
}

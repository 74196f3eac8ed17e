//! Backups on the real API server and sbsim: a policy's claims across namespaces, its
//! adoption, refusal and removal; the mirror's records of a cluster's backups; requests
//! for one backup of a claim and what deleting them does; the admission of both kinds.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use simplyblock_api::storage_backup::{BackupPhase, StorageBackup};
use simplyblock_api::storage_backup_policy::{BackupPolicyPhase, StorageBackupPolicy};
use simplyblock_controlplane::{
    BackupPolicyCreate, BackupPolicyTarget, Method, PoolCreate, Uuid, VolumeCreate,
};
use simplyblock_operator::backup;

use crate::support::{Harness, harness, harness_with_store, raised, until};

/// A pool and the volumes of `claims` in it, each with its PersistentVolume and a bound
/// claim labelled `app=<label>`: `(namespace, claim)` pairs.
struct Volumes {
    pool: Uuid,
    ids: Vec<Uuid>,
}

async fn volumes(h: &Harness, label: &str, claims: &[(&str, &str)]) -> Volumes {
    h.activated().await;
    let pool =
        h.cp.create_pool(
            h.uuid,
            &PoolCreate {
                name: format!("{}-pool", h.ns),
                ..Default::default()
            },
        )
        .await
        .expect("pool")
        .id;
    let mut ids = Vec::new();
    for (ns, claim) in claims {
        let mut create = VolumeCreate::new(format!("{ns}-{claim}"), 1 << 30);
        create.ndcs = 1;
        create.npcs = 1;
        let id =
            h.cp.create_volume(h.uuid, pool, &create)
                .await
                .expect("volume");
        let pv_name = format!("{ns}-{claim}-pv");
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": pv_name},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "claimRef": {"namespace": ns, "name": claim},
                     "csi": {"driver": "csi.simplyblock.io", "fsType": "ext4",
                             "volumeHandle": format!("{}:{pool}:{id}", h.uuid)}},
        }))
        .expect("pv");
        Api::<PersistentVolume>::all(h.kube.clone())
            .create(&PostParams::default(), &pv)
            .await
            .expect("PersistentVolume");
        let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": claim, "labels": {"app": label}},
            "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": pv_name,
                     "resources": {"requests": {"storage": "1Gi"}}},
        }))
        .expect("pvc");
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(h.kube.clone(), ns);
        claims
            .create(&PostParams::default(), &pvc)
            .await
            .expect("claim");
        claims
            .patch_status(
                claim,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Bound"}})),
            )
            .await
            .expect("bound");
        ids.push(id);
    }
    Volumes { pool, ids }
}

fn policies(h: &Harness) -> Api<StorageBackupPolicy> {
    Api::namespaced(h.kube.clone(), &h.ns)
}

fn backups(h: &Harness) -> Api<StorageBackup> {
    Api::namespaced(h.kube.clone(), &h.ns)
}

async fn create_policy(
    h: &Harness,
    name: &str,
    spec: Value,
) -> Result<StorageBackupPolicy, kube::Error> {
    let policy: StorageBackupPolicy = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageBackupPolicy",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("policy");
    policies(h).create(&PostParams::default(), &policy).await
}

async fn policy_where(
    h: &Harness,
    name: &str,
    what: &str,
    test: impl Fn(&StorageBackupPolicy) -> bool,
) -> StorageBackupPolicy {
    until(&format!("policy {name} {what}"), async || {
        let p = policies(h).get(name).await.ok()?;
        test(&p).then_some(p)
    })
    .await
}

fn phase_of(p: &StorageBackupPolicy) -> Option<BackupPolicyPhase> {
    p.status.as_ref().map(|s| s.phase)
}

fn policies_path(h: &Harness) -> String {
    format!("/api/v2/clusters/{}/backups/backup-policies/", h.uuid)
}

#[tokio::test]
async fn a_policy_covers_the_claims_both_selectors_pick_and_lets_go_of_them() {
    let h = harness("sbp-members", "", (1, 1)).await;
    let apps = "sbp-members-apps";
    crate::support::namespace(&h.kube, apps).await;
    let label = "sbp-members-db";
    let v = volumes(&h, label, &[(&h.ns, "data"), (apps, "logs")]).await;
    let _controller = tokio::spawn(backup::policy::run(h.ctx.clone()));
    create_policy(
        &h,
        "nightly",
        json!({"clusterRef": "sb", "maxVersions": 3,
               "claimSelector": {"matchLabels": {"app": label}}, "namespaceSelector": {}}),
    )
    .await
    .expect("policy");
    let active = policy_where(&h, "nightly", "covers two claims", |p| {
        phase_of(p) == Some(BackupPolicyPhase::Active)
            && p.status
                .as_ref()
                .is_some_and(|s| s.attached_claim_count == 2)
    })
    .await;
    crate::kubectl::ready(
        &policies(&h),
        "storagebackuppolicies.storage.simplyblock.io",
        "nightly",
    )
    .await;
    let status = active.status.expect("status");
    assert_eq!(
        status.message.as_deref(),
        Some("The policy is active and covers 2 claim(s)")
    );
    let covered: Vec<(&str, Option<&str>)> = status
        .attached_claims
        .iter()
        .map(|a| (a.namespace.as_str(), a.lvol_id.as_deref()))
        .collect();
    let (first, second) = (v.ids[0].to_string(), v.ids[1].to_string());
    assert_eq!(
        covered,
        [
            (h.ns.as_str(), Some(first.as_str())),
            (apps, Some(second.as_str()))
        ]
    );
    let policy_id: Uuid = status.policy_id.expect("policy id").parse().expect("uuid");
    let attach = format!("{}{policy_id}/attach", policies_path(&h));
    assert_eq!(h.calls("POST", &attach).await, 2);
    raised(&h.kube, &h.ns, Some("nightly"), "ClaimAttached").await;
    let attached = until("both ClaimAttached events", async || {
        let notes = crate::support::events(&h.kube, &h.ns, Some("nightly"), "ClaimAttached").await;
        (notes.len() == 2).then_some(notes)
    })
    .await;
    assert!(
        attached.contains(&format!(
            "Claim {apps}/logs started matching and is now backed up under this policy"
        )),
        "{attached:?}"
    );

    // The claim in the other namespace loses its label: it is detached.
    Api::<PersistentVolumeClaim>::namespaced(h.kube.clone(), apps)
        .patch(
            "logs",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": null}}})),
        )
        .await
        .expect("unlabel");
    policy_where(&h, "nightly", "covers one claim", |p| {
        p.status
            .as_ref()
            .is_some_and(|s| s.attached_claim_count == 1)
    })
    .await;
    let detached = h.events("nightly", "ClaimDetached").await;
    assert_eq!(
        detached,
        [format!(
            "Claim {apps}/logs stopped matching and is no longer backed up under this policy; the backups already taken are kept"
        )]
    );
    let detach = format!("{}{policy_id}/detach", policies_path(&h));
    assert_eq!(h.calls("POST", &detach).await, 1);

    // Deleting it detaches the claim left and deletes the control-plane policy, once.
    policies(&h)
        .delete("nightly", &DeleteParams::default())
        .await
        .expect("delete");
    until("the policy gone", async || {
        policies(&h)
            .get_opt("nightly")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(h.calls("POST", &detach).await, 2);
    assert_eq!(
        h.calls("DELETE", &format!("{}{policy_id}", policies_path(&h)))
            .await,
        1
    );
    assert!(
        h.cp.list_backup_policies(h.uuid)
            .await
            .expect("policies")
            .is_empty()
    );
}

#[tokio::test]
async fn a_policy_adopts_its_namesake_and_a_refused_one_fails_with_the_control_planes_words() {
    let h = harness("sbp-adopt", "", (1, 1)).await;
    h.activated().await;
    let existing =
        h.cp.create_backup_policy(
            h.uuid,
            &BackupPolicyCreate {
                name: "carried".into(),
                versions: Some(2),
                ..Default::default()
            },
        )
        .await
        .expect("the Go operator's policy");
    let _controller = tokio::spawn(backup::policy::run(h.ctx.clone()));
    create_policy(&h, "carried", json!({"clusterRef": "sb", "maxVersions": 2, "claimSelector": {"matchLabels": {"app": "none"}}}))
        .await
        .expect("policy");
    let adopted = policy_where(&h, "carried", "Active", |p| {
        phase_of(p) == Some(BackupPolicyPhase::Active)
    })
    .await;
    assert_eq!(
        adopted.status.and_then(|s| s.policy_id),
        Some(existing.to_string())
    );
    assert_eq!(
        h.calls("POST", &policies_path(&h)).await,
        1,
        "only the test's own create"
    );

    // Tiers whose intervals do not increase pass the schema and not the control plane.
    create_policy(
        &h,
        "tiers",
        json!({"clusterRef": "sb", "schedule": "15m,4 15m,2"}),
    )
    .await
    .expect("policy");
    let failed = policy_where(&h, "tiers", "Failed", |p| {
        phase_of(p) == Some(BackupPolicyPhase::Failed)
    })
    .await;
    let message = failed.status.and_then(|s| s.message).unwrap_or_default();
    assert!(
        message.starts_with("the control plane refused the policy: ")
            && message.contains("Schedule tier intervals must be strictly increasing"),
        "{message}"
    );

    // Without a claimSelector it covers nothing, and says so.
    create_policy(&h, "bare", json!({"clusterRef": "sb", "maxAge": "7d"}))
        .await
        .expect("policy");
    let notes = h.events("bare", "SelectorEmpty").await;
    assert_eq!(
        notes[0],
        "The policy has no claimSelector, so it covers nothing and no backup will be taken under it"
    );
}

async fn completed(h: &Harness, backup: Uuid) {
    until("the backup completed", async || {
        let b = h.cp.get_backup(h.uuid, backup).await.ok()?;
        (b.status == simplyblock_controlplane::BackupStatus::Completed).then_some(())
    })
    .await
}

async fn record_where(
    h: &Harness,
    name: &str,
    what: &str,
    test: impl Fn(&StorageBackup) -> bool,
) -> StorageBackup {
    until(&format!("StorageBackup {name} {what}"), async || {
        let b = backups(h).get(name).await.ok()?;
        test(&b).then_some(b)
    })
    .await
}

#[tokio::test]
async fn the_mirror_records_a_backup_and_removes_it_once_merged_away() {
    let h = harness_with_store("sb-mirror", Default::default(), "sb-mirror").await;
    let v = volumes(&h, "sb-mirror-db", &[(&h.ns, "data")]).await;
    let volume = v.ids[0];
    let _mirror = tokio::spawn(backup::mirror::run_every(
        h.ctx.clone(),
        std::time::Duration::from_millis(300),
    ));
    let s1 =
        h.cp.create_snapshot(h.uuid, v.pool, volume, "s1")
            .await
            .expect("snapshot");
    let first = h.cp.create_backup(h.uuid, s1).await.expect("backup");
    let name = first.to_string();
    let record = record_where(&h, &name, "Available", |b| {
        b.phase() == BackupPhase::Available
    })
    .await;
    crate::kubectl::ready(&backups(&h), "storagebackups.storage.simplyblock.io", &name).await;
    let source = record
        .status
        .as_ref()
        .and_then(|s| s.source.clone())
        .expect("source");
    assert_eq!(
        (
            source.claim_name.as_deref(),
            source.claim_namespace.as_deref(),
            source.persistent_volume_name.as_deref()
        ),
        (Some("data"), Some(h.ns.as_str()), Some("sb-mirror-data-pv"))
    );
    assert_eq!(source.lvol_id, Some(volume.to_string()));
    assert_eq!(source.pool_uuid, Some(v.pool.to_string()));
    assert_eq!(source.fs_type.as_deref(), Some("ext4"));
    assert_eq!(
        record
            .labels()
            .get("storage.simplyblock.io/claim")
            .map(String::as_str),
        Some("data")
    );
    assert_eq!(
        record
            .labels()
            .get("storage.simplyblock.io/cluster")
            .map(String::as_str),
        Some("sb")
    );
    assert_eq!(
        h.events("sb", "BackupDiscovered").await,
        [format!(
            "Backup {name} was found in the store and recorded as StorageBackup {name}"
        )]
    );
    assert_eq!(
        h.events(&name, "BackupAvailable").await,
        [format!("Backup {name} completed and is restorable")]
    );

    // A policy keeping one version folds the first backup into the second.
    let keep_one =
        h.cp.create_backup_policy(
            h.uuid,
            &BackupPolicyCreate {
                name: "keep-one".into(),
                versions: Some(1),
                ..Default::default()
            },
        )
        .await
        .expect("policy");
    h.cp.attach_backup_policy(
        h.uuid,
        keep_one,
        &BackupPolicyTarget {
            target_type: "lvol".into(),
            target_id: volume.to_string(),
        },
    )
    .await
    .expect("attach");
    let s2 =
        h.cp.create_snapshot(h.uuid, v.pool, volume, "s2")
            .await
            .expect("snapshot");
    let second = h.cp.create_backup(h.uuid, s2).await.expect("backup");
    completed(&h, second).await;
    h.cp.raw(
        Method::POST,
        "/../../_sim/clock/advance",
        &[],
        Some(&json!({"seconds": 180})),
    )
    .await
    .expect("advance the clock");
    let gone = h.events("sb", "BackupGone").await;
    assert_eq!(
        gone,
        [format!(
            "Backup {name} left the store, so StorageBackup {name} was removed"
        )]
    );
    assert!(backups(&h).get_opt(&name).await.expect("read").is_none());
    record_where(&h, &second.to_string(), "Available", |b| {
        b.phase() == BackupPhase::Available
    })
    .await;
}

async fn request(h: &Harness, name: &str, claim: &str, deletion: &str) {
    let request: StorageBackup = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageBackup",
        "metadata": {"name": name},
        "spec": {"source": {"claimName": claim}, "deletionPolicy": deletion},
    }))
    .expect("request");
    backups(h)
        .create(&PostParams::default(), &request)
        .await
        .expect("request");
}

#[tokio::test]
async fn a_request_takes_one_snapshot_and_one_backup_and_deletes_them_unless_a_policy_covers_the_claim()
 {
    let h = harness_with_store("sb-request", Default::default(), "sb-request").await;
    let v = volumes(&h, "sb-request-db", &[(&h.ns, "data"), (&h.ns, "kept")]).await;
    h.clusters()
        .patch(
            "sb",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"backup": {"endpoint": "https://s3.example.com", "bucket": "b",
                "credentialsSecretRef": {"name": "s3"}}}}),
            ),
        )
        .await
        .expect("a backup store");
    let mut controller = tokio::spawn(backup::request::run(h.ctx.clone()));
    request(&h, "now", "data", "Delete").await;
    let done = record_where(&h, "now", "Available", |b| {
        b.phase() == BackupPhase::Available
    })
    .await;
    let id = done.backup_id().expect("backup id").to_owned();
    assert_eq!(
        h.events("now", "BackupAvailable").await,
        [format!("Backup {id} of claim {}/data is complete", h.ns)]
    );
    let snapshots = format!(
        "/api/v2/clusters/{}/storage-pools/{}/volumes/{}/snapshots",
        h.uuid, v.pool, v.ids[0]
    );
    let backups_path = format!("/api/v2/clusters/{}/backups/", h.uuid);
    assert_eq!(h.calls("POST", &snapshots).await, 1);
    assert_eq!(h.calls("POST", &backups_path).await, 1);
    let snaps =
        h.cp.list_volume_snapshots(h.uuid, v.pool, v.ids[0])
            .await
            .expect("snapshots");
    let uid = done.metadata.uid.clone().expect("uid");
    assert!(
        snaps.iter().any(|s| s.name == format!("sbk-{uid}")),
        "{snaps:?}"
    );

    // A restarted controller takes neither again.
    controller.abort();
    controller = tokio::spawn(backup::request::run(h.ctx.clone()));
    crate::support::nudged(
        &h.ctx.metrics,
        &backups(&h),
        backup::request::CONTROLLER,
        "now",
    )
    .await;
    assert_eq!(h.calls("POST", &snapshots).await, 1);
    assert_eq!(h.calls("POST", &backups_path).await, 1);

    // No policy covers the claim: deleting the request deletes the volume's backups.
    backups(&h)
        .delete("now", &DeleteParams::default())
        .await
        .expect("delete");
    until("the request gone", async || {
        backups(&h)
            .get_opt("now")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let volume_backups = format!(
        "/api/v2/clusters/{}/storage-pools/{}/volumes/{}/backups",
        h.uuid, v.pool, v.ids[0]
    );
    assert_eq!(h.calls("DELETE", &volume_backups).await, 1);
    assert!(
        h.cp.list_volume_backups(h.uuid, v.pool, v.ids[0])
            .await
            .expect("list")
            .is_empty()
    );

    // A policy covers the other claim: its backups are kept, and the request says why.
    request(&h, "covered", "kept", "Delete").await;
    record_where(&h, "covered", "Available", |b| {
        b.phase() == BackupPhase::Available
    })
    .await;
    create_policy(&h, "owner", json!({"clusterRef": "sb", "maxVersions": 5, "claimSelector": {"matchLabels": {"app": "sb-request-db"}}}))
        .await
        .expect("policy");
    policies(&h)
        .patch_status(
            "owner",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Active", "attachedClaims": [{"name": "kept", "namespace": h.ns}]}})),
        )
        .await
        .expect("the policy covers the claim");
    backups(&h)
        .delete("covered", &DeleteParams::default())
        .await
        .expect("delete");
    let kept = h.events("covered", "BackupKept").await;
    assert!(
        kept[0].contains(&format!(
            "StorageBackupPolicy {}/owner covers the claim",
            h.ns
        )),
        "{kept:?}"
    );
    until("the request gone", async || {
        backups(&h)
            .get_opt("covered")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let other = format!(
        "/api/v2/clusters/{}/storage-pools/{}/volumes/{}/backups",
        h.uuid, v.pool, v.ids[1]
    );
    assert_eq!(h.calls("DELETE", &other).await, 0);
    assert_eq!(
        h.cp.list_volume_backups(h.uuid, v.pool, v.ids[1])
            .await
            .expect("list")
            .len(),
        1
    );
    controller.abort();
}

/// The message of an admission refusal.
fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(s)) if s.code == 403 => s.message,
        other => panic!("not refused: {other:?}"),
    }
}

#[tokio::test]
async fn records_are_the_operators_and_requests_need_the_right_to_read_the_claim() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let h = harness("sb-admission", "", (1, 1)).await;
    let ns = h.ns.clone();

    // A policy needs its cluster.
    let missing = refusal(
        create_policy(
            &h,
            "lost",
            json!({"clusterRef": "nowhere", "maxVersions": 1}),
        )
        .await,
    );
    assert!(
        missing.contains(&format!(
            "spec.clusterRef \"nowhere\" does not name a StorageCluster in namespace \"{ns}\""
        )),
        "{missing}"
    );

    // A record is written and deleted by the operator only.
    let record: StorageBackup = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageBackup",
        "metadata": {"name": "hand-made"}, "spec": {"clusterRef": {"name": "sb"}},
    }))
    .expect("record");
    let by_hand = refusal(backups(&h).create(&PostParams::default(), &record).await);
    assert!(by_hand.contains("cannot be created by hand"), "{by_hand}");
    let as_operator: Api<StorageBackup> = Api::namespaced(h.ctx.kube.clone(), &ns);
    as_operator
        .create(&PostParams::default(), &record)
        .await
        .expect("the operator records");
    let deleted = refusal(
        backups(&h)
            .delete("hand-made", &DeleteParams::default())
            .await,
    );
    assert!(
        deleted.contains("is a record of a copy in the cluster's store"),
        "{deleted}"
    );
    as_operator
        .delete("hand-made", &DeleteParams::default())
        .await
        .expect("the operator removes");

    // A requester who may create requests but not read the claim is refused.
    let env = crate::support::api_server().await;
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "requester"}})).expect("sa");
    Api::<ServiceAccount>::namespaced(h.kube.clone(), &ns)
        .create(&PostParams::default(), &account)
        .await
        .expect("sa");
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "requester"},
        "rules": [{"apiGroups": ["storage.simplyblock.io"], "resources": ["storagebackups"], "verbs": ["create", "get"]}],
    }))
    .expect("role");
    Api::<Role>::namespaced(h.kube.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "requester"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "requester"},
        "subjects": [{"kind": "ServiceAccount", "name": "requester", "namespace": ns}],
    }))
    .expect("binding");
    Api::<RoleBinding>::namespaced(h.kube.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding");
    let requester = env
        .service_account_client(&ns, "requester")
        .await
        .expect("client");
    crate::support::until_allowed(
        &requester,
        "create",
        "storage.simplyblock.io",
        "storagebackups",
        &ns,
    )
    .await;
    let asked: StorageBackup = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageBackup",
        "metadata": {"name": "sneaky"}, "spec": {"source": {"claimName": "secret", "claimNamespace": "kube-system"}},
    }))
    .expect("request");
    let forbidden = refusal(
        Api::<StorageBackup>::namespaced(requester, &ns)
            .create(&PostParams::default(), &asked)
            .await,
    );
    assert!(
        forbidden.contains(&format!("system:serviceaccount:{ns}:requester may not get persistentvolumeclaims in namespace \"kube-system\"")),
        "{forbidden}"
    );
    // One who may read it (the admin) may ask.
    backups(&h)
        .create(&PostParams::default(), &asked)
        .await
        .expect("the admin may request");
}

//! Backups kept for real: a volume's snapshots backed up as a chain into the store, the
//! data kept, a restore into a new volume that reads the backup's data back, and the
//! refusals the control plane answers with.

use std::io::{Seek, SeekFrom, Write};

use crate::common::*;
use simplyblock_controlplane::*;

fn write_at(file: &std::path::Path, offset: u64, data: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .expect("open");
    f.seek(SeekFrom::Start(offset)).expect("seek");
    f.write_all(data).expect("write");
}

fn read_at(file: &std::path::Path, offset: usize, len: usize) -> Vec<u8> {
    std::fs::read(file).expect("read")[offset..offset + len].to_vec()
}

const BUCKET: &str = "backups";
const REGION: &str = "eu-central-1";
const KEY: &str = "AKIDSBSIM";
const SECRET: &str = "sbsim-secret";

/// A bucket in the store and an active cluster of two nodes backing up into it.
async fn backed_up_cluster(env: &Env, name: &str) -> Uuid {
    add_bucket(env, BUCKET, REGION, KEY, SECRET).await;
    cluster_with(env, name, backup_config(BUCKET, KEY, SECRET, REGION)).await
}

async fn cluster_with(env: &Env, name: &str, config: BackupConfig) -> Uuid {
    let mut create = ClusterCreate::new(name, 10, 4);
    create.backup_config = Some(config);
    active_cluster_from(&env.client, create, 2).await
}

/// Where backup `s3_id`'s objects are (the prefix is [`backup_config`]'s).
fn objects_of(env: &Env, s3_id: i64) -> std::path::PathBuf {
    env.dir
        .path()
        .join("state/object-stores/http___minio.test_9000")
        .join(BUCKET)
        .join("clusters/sb")
        .join(s3_id.to_string())
}

/// The messages of the cluster's event log, newest first.
async fn cluster_log(env: &Env, cluster: Uuid) -> Vec<String> {
    let r = reqwest::Client::new()
        .get(format!("{}/api/v2/clusters/{cluster}/logs", env.server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("logs");
    let v: serde_json::Value = r.json().await.expect("logs JSON");
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e["message"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

async fn failed(c: &Client, cluster: Uuid, backup: Uuid) -> Backup {
    eventually("the backup failed", || async {
        let b = c.get_backup(cluster, backup).await.ok()?;
        (b.status == BackupStatus::Failed).then_some(b)
    })
    .await
}

async fn completed(c: &Client, cluster: Uuid, backup: Uuid) -> Backup {
    eventually("the backup completed", || async {
        let b = c.get_backup(cluster, backup).await.ok()?;
        (b.status == BackupStatus::Completed).then_some(b)
    })
    .await
}

#[tokio::test]
async fn a_volume_backed_up_and_overwritten_is_restored_from_its_backup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = dir.path().join("volumes");
    let mut cfg = config(dir.path(), &fleet_yaml(2, 2));
    cfg.volume_files = Some(files.clone());
    let env = start_with(dir, cfg).await;
    let c = &env.client;
    let cid = backed_up_cluster(&env, "bk").await;
    let (pool, v) = volume_in_pool(c, cid, "p", "v", 1 << 30).await;
    let vf = files.join(format!("{v}.img"));

    // Two snapshots, each with its own data; backing up the second backs up the first
    // too, as the chain's root.
    write_at(&vf, 4096, b"first");
    let s1 = c.create_snapshot(cid, pool, v, "s1").await.expect("s1");
    write_at(&vf, 4096, b"secnd");
    let s2 = c.create_snapshot(cid, pool, v, "s2").await.expect("s2");
    let b2 = c.create_backup(cid, s2).await.expect("backup");
    let newest = completed(c, cid, b2).await;
    assert_eq!(newest.snapshot_id, s2.to_string());
    assert_eq!(
        (newest.lvol_id.as_str(), newest.size),
        (v.to_string().as_str(), 1 << 30)
    );
    assert!(newest.completed_at >= newest.created_at && newest.completed_at > 0);
    let listed = c.list_volume_backups(cid, pool, v).await.expect("list");
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0].id, b2, "newest first");
    let root = &listed[1];
    assert_eq!(root.snapshot_id, s1.to_string());
    assert_eq!(root.prev_backup_id, "");
    assert_eq!(newest.prev_backup_id, root.id.to_string());
    assert!(root.s3_id < newest.s3_id);
    assert_eq!(c.list_backups(cid).await.expect("all").len(), 2);

    // Each backup is its data and manifest in the bucket, under the cluster's prefix.
    let objects = objects_of(&env, newest.s3_id);
    assert_eq!(
        read_at(&objects.join("data.img"), 4096, 5),
        b"secnd",
        "the snapshot's data went to the store"
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(objects.join("manifest.json")).expect("manifest"))
            .expect("manifest JSON");
    assert_eq!(manifest["backup_id"], b2.to_string());
    assert_eq!(manifest["prev_backup_id"], root.id.to_string());
    assert_eq!(manifest["lvol_name"], "v");
    assert_eq!(manifest["size"], 1u64 << 30);
    assert_eq!(
        read_at(&objects_of(&env, root.s3_id).join("data.img"), 4096, 5),
        b"first"
    );

    // A snapshot backed up already is refused, as the control plane refuses it.
    let again = c.create_backup(cid, s2).await.expect_err("twice");
    assert_eq!(again.status(), Some(400));
    assert!(
        again.to_string().contains("already has a backup"),
        "{again}"
    );

    // The volume is overwritten; the restore of the second backup reads it back.
    write_at(&vf, 4096, b"wrong");
    let restored = c
        .restore_backup(
            cid,
            &BackupRestore {
                backup_id: b2.to_string(),
                lvol_name: "v-restored".into(),
                pool: "p".into(),
                target_node_id: None,
            },
        )
        .await
        .expect("restore");
    let during = c.get_volume(cid, pool, restored).await.expect("volume");
    assert_eq!(during.status, VolumeStatus::Restoring);
    // While its data comes in, the new volume cannot be deleted.
    let refused = c
        .delete_volume(cid, pool, restored)
        .await
        .expect_err("restoring");
    assert!(
        refused.to_string().contains("backup restore in progress"),
        "{refused}"
    );
    eventually("the restored volume online", || async {
        let v = c.get_volume(cid, pool, restored).await.ok()?;
        (v.status == VolumeStatus::Online).then_some(())
    })
    .await;
    let rf = files.join(format!("{restored}.img"));
    assert_eq!(std::fs::metadata(&rf).expect("file").len(), 1 << 30);
    assert_eq!(read_at(&rf, 4096, 5), b"secnd");
    assert_eq!(
        read_at(&vf, 4096, 5),
        b"wrong",
        "the source is left as it is"
    );

    // A restore under a name in use is refused, and nothing is created.
    let taken = c
        .restore_backup(
            cid,
            &BackupRestore {
                backup_id: b2.to_string(),
                lvol_name: "v".into(),
                pool: pool.to_string(),
                target_node_id: None,
            },
        )
        .await
        .expect_err("name in use");
    assert_eq!(taken.status(), Some(500), "{taken}");

    // Deleting the volume's backups deletes them all, and their data.
    c.delete_volume_backups(cid, pool, v)
        .await
        .expect("delete backups");
    assert!(c.list_backups(cid).await.expect("all").is_empty());
    let gone = c.get_backup(cid, b2).await.expect_err("gone");
    assert_eq!(gone.status(), Some(404));
    let none = c
        .delete_volume_backups(cid, pool, v)
        .await
        .expect_err("none left");
    assert_eq!(none.status(), Some(400));
}

#[tokio::test]
async fn policies_are_checked_kept_and_attached_to_pools_and_volumes() {
    let env = start(2, 2).await;
    let c = &env.client;
    let cid = active_cluster(c, "bp", 2).await;
    let (pool, v) = volume_in_pool(c, cid, "p", "v", 1 << 30).await;

    // Refused as the control plane refuses them, each with its own message.
    for (params, says) in [
        (
            BackupPolicyCreate {
                name: "none".into(),
                ..Default::default()
            },
            "At least one of --versions, --age, or --schedule must be specified",
        ),
        (
            BackupPolicyCreate {
                name: "age".into(),
                age: Some("2 days".into()),
                ..Default::default()
            },
            "Invalid age format: 2 days.",
        ),
        (
            BackupPolicyCreate {
                name: "tiers".into(),
                schedule: Some("15m,0".into()),
                ..Default::default()
            },
            "Keep count must be >= 1 in tier: 15m,0",
        ),
    ] {
        let e = c
            .create_backup_policy(cid, &params)
            .await
            .expect_err("refused");
        assert_eq!(e.status(), Some(400), "{e}");
        assert!(e.to_string().contains(says), "{e}");
    }
    assert!(c.list_backup_policies(cid).await.expect("list").is_empty());

    let daily = BackupPolicyCreate {
        name: "daily".into(),
        versions: Some(7),
        age: Some("2w".into()),
        schedule: Some("1h,24 1d,7".into()),
    };
    let id = c.create_backup_policy(cid, &daily).await.expect("policy");
    let listed = c.list_backup_policies(cid).await.expect("list");
    assert_eq!(listed.len(), 1);
    let p = &listed[0];
    assert_eq!(
        (
            p.id,
            p.max_versions,
            p.max_age.as_str(),
            p.backup_schedule.as_str()
        ),
        (id, 7, "2w", "1h,24 1d,7")
    );
    assert_eq!(p.status, ActiveStatus::Active);
    let twice = c.create_backup_policy(cid, &daily).await.expect_err("name");
    assert!(
        twice
            .to_string()
            .contains("Policy name already exists: daily"),
        "{twice}"
    );

    // Attaching is idempotent; detaching what is not attached is refused.
    let on_volume = BackupPolicyTarget {
        target_type: "lvol".into(),
        target_id: v.to_string(),
    };
    let on_pool = BackupPolicyTarget {
        target_type: "pool".into(),
        target_id: pool.to_string(),
    };
    let a = c
        .attach_backup_policy(cid, id, &on_volume)
        .await
        .expect("attach");
    assert_eq!(
        c.attach_backup_policy(cid, id, &on_volume)
            .await
            .expect("again"),
        a
    );
    let b = c
        .attach_backup_policy(cid, id, &on_pool)
        .await
        .expect("pool");
    assert_ne!(a, b);
    let wrong = BackupPolicyTarget {
        target_type: "node".into(),
        target_id: v.to_string(),
    };
    let e = c
        .attach_backup_policy(cid, id, &wrong)
        .await
        .expect_err("kind");
    assert!(e.to_string().contains("Invalid target_type: node"), "{e}");
    c.detach_backup_policy(cid, id, &on_volume)
        .await
        .expect("detach");
    let e = c
        .detach_backup_policy(cid, id, &on_volume)
        .await
        .expect_err("detached already");
    assert_eq!(e.status(), Some(400));
    assert!(e.to_string().contains("Attachment not found"), "{e}");

    // Deleting the policy takes its attachments with it.
    c.delete_backup_policy(cid, id).await.expect("delete");
    assert!(c.list_backup_policies(cid).await.expect("list").is_empty());
    let e = c.delete_backup_policy(cid, id).await.expect_err("gone");
    assert_eq!(e.status(), Some(404));
    let again = c
        .create_backup_policy(cid, &daily)
        .await
        .expect("recreated");
    let e = c
        .detach_backup_policy(cid, again, &on_pool)
        .await
        .expect_err("the old attachment went with its policy");
    assert!(e.to_string().contains("Attachment not found"), "{e}");
}

#[tokio::test]
async fn a_policy_takes_backups_on_its_schedule_and_folds_those_past_its_versions() {
    let env = start(2, 2).await;
    let c = &env.client;
    let cid = backed_up_cluster(&env, "bs").await;
    let (pool, v) = volume_in_pool(c, cid, "p", "v", 1 << 30).await;
    let policy = c
        .create_backup_policy(
            cid,
            &BackupPolicyCreate {
                name: "minutely".into(),
                versions: Some(2),
                schedule: Some("1m,5".into()),
                ..Default::default()
            },
        )
        .await
        .expect("policy");
    // Attached to the pool, it is the volume's policy.
    c.attach_backup_policy(
        cid,
        policy,
        &BackupPolicyTarget {
            target_type: "pool".into(),
            target_id: pool.to_string(),
        },
    )
    .await
    .expect("attach");

    // Backups come on the schedule; past two versions the oldest is folded into the next.
    let backups = eventually("scheduled backups, the oldest merged", || async {
        let all = c.list_volume_backups(cid, pool, v).await.ok()?;
        let merged = all
            .iter()
            .filter(|b| b.status == BackupStatus::Merged)
            .count();
        let kept = all
            .iter()
            .filter(|b| b.status == BackupStatus::Completed)
            .count();
        (merged >= 1 && kept <= 2 && all.len() >= 3).then_some(all)
    })
    .await;
    for b in &backups {
        assert!(b.snapshot_name.starts_with("auto_v_"), "{b:?}");
    }
    // The policy detached, the schedule stops; once what was under way settles, the
    // newest's chain holds no merged backup, and it restores. (While the schedule runs,
    // a restore may meet a merge in flight and be refused, as the control plane does.)
    c.detach_backup_policy(
        cid,
        policy,
        &BackupPolicyTarget {
            target_type: "pool".into(),
            target_id: pool.to_string(),
        },
    )
    .await
    .expect("detach");
    let backups = eventually("nothing under way", || async {
        let all = c.list_volume_backups(cid, pool, v).await.ok()?;
        all.iter()
            .all(|b| matches!(b.status, BackupStatus::Completed | BackupStatus::Merged))
            .then_some(all)
    })
    .await;
    let newest = backups
        .iter()
        .find(|b| b.status == BackupStatus::Completed)
        .expect("a completed backup");
    let by_id: std::collections::BTreeMap<String, &Backup> =
        backups.iter().map(|b| (b.id.to_string(), b)).collect();
    let mut at = Some(newest);
    while let Some(b) = at {
        assert_ne!(b.status, BackupStatus::Merged, "{b:?} in the chain");
        at = by_id.get(&b.prev_backup_id).copied();
    }
    let restored = c
        .restore_backup(
            cid,
            &BackupRestore {
                backup_id: newest.id.to_string(),
                lvol_name: "from-schedule".into(),
                pool: "p".into(),
                target_node_id: None,
            },
        )
        .await
        .expect("restore");
    eventually("the restored volume online", || async {
        let r = c.get_volume(cid, pool, restored).await.ok()?;
        (r.status == VolumeStatus::Online).then_some(())
    })
    .await;
}

/// Takes a snapshot of `v` and backs it up; the backup's id.
async fn snapshot_and_back_up(c: &Client, cid: Uuid, pool: Uuid, v: Uuid, name: &str) -> Uuid {
    let s = c
        .create_snapshot(cid, pool, v, name)
        .await
        .expect("snapshot");
    c.create_backup(cid, s).await.expect("backup")
}

#[tokio::test]
async fn the_store_refuses_what_s3_refuses_with_s3s_words() {
    let env = start(2, 2).await;
    let c = &env.client;
    add_bucket(&env, BUCKET, REGION, KEY, SECRET).await;

    // Without backup_config a cluster takes no backup.
    let bare = active_cluster(c, "bare", 2).await;
    let (pool, v) = volume_in_pool(c, bare, "p", "v0", 1 << 30).await;
    let s = c
        .create_snapshot(bare, pool, v, "s0")
        .await
        .expect("snapshot");
    let e = c.create_backup(bare, s).await.expect_err("no store");
    assert_eq!(e.status(), Some(400), "{e}");
    assert!(e.to_string().contains("no backup configuration"), "{e}");

    let cases = [
        (
            "badkey",
            backup_config(BUCKET, "NOSUCHKEY", SECRET, REGION),
            "InvalidAccessKeyId: The AWS Access Key Id you provided does not exist in our records."
                .to_string(),
        ),
        (
            "badsecret",
            backup_config(BUCKET, KEY, "not-the-secret", REGION),
            "SignatureDoesNotMatch: The request signature we calculated does not match".to_string(),
        ),
        (
            "nobucket",
            backup_config("no-such-bucket", KEY, SECRET, REGION),
            "NoSuchBucket: The specified bucket does not exist".to_string(),
        ),
        (
            "badregion",
            backup_config(BUCKET, KEY, SECRET, "us-west-2"),
            format!(
                "AuthorizationHeaderMalformed: The authorization header is malformed; the region 'us-west-2' is wrong; expecting '{REGION}'"
            ),
        ),
    ];
    for (name, config, says) in cases {
        let cid = cluster_with(&env, name, config).await;
        let (pool, v) = volume_in_pool(c, cid, "p", &format!("v-{name}"), 1 << 30).await;
        let b = snapshot_and_back_up(c, cid, pool, v, &format!("s-{name}")).await;
        failed(c, cid, b).await;
        let log = cluster_log(&env, cid).await;
        assert!(
            log.iter()
                .any(|m| m.starts_with(&format!("Backup failed: {b}: {says}"))),
            "{name}: {log:?}"
        );
    }
}

#[tokio::test]
async fn an_unreachable_store_and_an_upload_broken_off_midway_fail_the_backup() {
    let env = start(2, 2).await;
    let c = &env.client;
    let cid = backed_up_cluster(&env, "down").await;
    let (pool, v) = volume_in_pool(c, cid, "p", "v", 1 << 30).await;

    let (status, _) = sim_admin(
        &env,
        reqwest::Method::PATCH,
        "/_sim/object-stores",
        serde_json::json!({"endpoint": STORE, "reachable": false}),
    )
    .await;
    assert_eq!(status, 200);
    let b = snapshot_and_back_up(c, cid, pool, v, "s1").await;
    failed(c, cid, b).await;
    let says =
        format!("Backup failed: {b}: Could not connect to the endpoint URL: \"{STORE}/{BUCKET}\"");
    let log = cluster_log(&env, cid).await;
    assert!(log.contains(&says), "{log:?}");

    // Back on the network, and the next upload of this volume breaks off midway.
    sim_admin(
        &env,
        reqwest::Method::PATCH,
        "/_sim/object-stores",
        serde_json::json!({"endpoint": STORE, "reachable": true}),
    )
    .await;
    let (status, _) = sim_admin(
        &env,
        reqwest::Method::POST,
        "/_sim/faults",
        serde_json::json!({"spec": "backupfail:volume=w,count=1"}),
    )
    .await;
    assert_eq!(status, 200);
    // Another volume, so its chain holds no failed backup to take again.
    let (_, w) = volume_in_pool(c, cid, "p", "w", 1 << 30).await;
    let b2 = snapshot_and_back_up(c, cid, pool, w, "w1").await;
    failed(c, cid, b2).await;
    let log = cluster_log(&env, cid).await;
    assert!(
        log.iter()
            .any(|m| m.starts_with(&format!("Backup failed: {b2}: bdev_lvol_transfer_stat"))),
        "{log:?}"
    );
    // The fault is spent: the next backup completes, the failed one's snapshot backed up
    // again as its chain's root.
    let b3 = snapshot_and_back_up(c, cid, pool, w, "w2").await;
    let done = completed(c, cid, b3).await;
    let root = c
        .get_backup(cid, done.prev_backup_id.parse().expect("a chain"))
        .await
        .expect("root");
    assert_ne!(root.id, b2);
    assert_eq!(
        (root.snapshot_name.as_str(), root.status),
        ("w1", BackupStatus::Completed)
    );
}

#[tokio::test]
async fn a_policy_folds_backups_past_its_age_on_the_sim_clock() {
    let env = start(2, 2).await;
    let c = &env.client;
    let cid = backed_up_cluster(&env, "age").await;
    let (pool, v) = volume_in_pool(c, cid, "p", "v", 1 << 30).await;
    let first = snapshot_and_back_up(c, cid, pool, v, "s1").await;
    let first = completed(c, cid, first).await;
    let second = snapshot_and_back_up(c, cid, pool, v, "s2").await;
    let second = completed(c, cid, second).await;
    assert_eq!(second.prev_backup_id, first.id.to_string());

    // From here sim time moves only when the test moves it.
    let (status, _) = sim_admin(
        &env,
        reqwest::Method::PUT,
        "/_sim/clock",
        serde_json::json!({"scale": 0.0}),
    )
    .await;
    assert_eq!(status, 200);
    let policy = c
        .create_backup_policy(
            cid,
            &BackupPolicyCreate {
                name: "hourly-age".into(),
                age: Some("1h".into()),
                ..Default::default()
            },
        )
        .await
        .expect("policy");
    c.attach_backup_policy(
        cid,
        policy,
        &BackupPolicyTarget {
            target_type: "lvol".into(),
            target_id: v.to_string(),
        },
    )
    .await
    .expect("attach");
    let status_of = |id: Uuid| async move { c.get_backup(cid, id).await.expect("backup").status };
    advance(&env, 30.0 * 60.0).await;
    assert_eq!(
        status_of(first.id).await,
        BackupStatus::Completed,
        "younger than its age"
    );
    advance(&env, 31.0 * 60.0 + 10.0).await;
    assert_eq!(
        status_of(first.id).await,
        BackupStatus::Merged,
        "past its age"
    );
    assert!(
        !objects_of(&env, first.s3_id).exists(),
        "its objects folded away"
    );
    let kept = c.get_backup(cid, second.id).await.expect("kept");
    assert_eq!(
        (kept.status, kept.prev_backup_id.as_str()),
        (BackupStatus::Completed, "")
    );
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(objects_of(&env, second.s3_id).join("manifest.json")).expect("manifest"),
    )
    .expect("JSON");
    assert_eq!(
        manifest["prev_backup_id"], "",
        "the bucket's chain follows the merge"
    );
}

#[tokio::test]
async fn a_restore_fails_when_the_store_no_longer_holds_the_objects() {
    let env = start(2, 2).await;
    let c = &env.client;
    let cid = backed_up_cluster(&env, "lost").await;
    let (pool, v) = volume_in_pool(c, cid, "p", "v", 1 << 30).await;
    let b = snapshot_and_back_up(c, cid, pool, v, "s1").await;
    completed(c, cid, b).await;
    let (status, _) = sim_admin(
        &env,
        reqwest::Method::DELETE,
        "/_sim/object-stores",
        serde_json::json!({"endpoint": STORE, "bucket": BUCKET}),
    )
    .await;
    assert_eq!(status, 204);
    let r = c
        .restore_backup(
            cid,
            &BackupRestore {
                backup_id: b.to_string(),
                lvol_name: "v-lost".into(),
                pool: "p".into(),
                target_node_id: None,
            },
        )
        .await
        .expect("the restore starts");
    eventually("the restore failed", || async {
        let x = c.get_volume(cid, pool, r).await.ok()?;
        (x.status == VolumeStatus::RestoreFailed).then_some(())
    })
    .await;
    let log = cluster_log(&env, cid).await;
    assert!(
        log.iter().any(|m| m.starts_with(&format!(
            "Backup restore failed: {b} -> v-lost: NoSuchBucket"
        ))),
        "{log:?}"
    );
}

#[tokio::test]
async fn backups_and_policies_stream_their_lists() {
    let env = start(2, 2).await;
    let c = &env.client;
    let cid = backed_up_cluster(&env, "watch").await;
    let (pool, v) = volume_in_pool(c, cid, "p", "v", 1 << 30).await;
    let mut backups = c
        .watch(&format!("/clusters/{cid}/backups/"))
        .await
        .expect("backups stream");
    let mut policies = c
        .watch(&format!("/clusters/{cid}/backups/backup-policies/"))
        .await
        .expect("policies stream");
    use crate::stream::expect_event;
    assert_eq!(
        expect_event(&mut backups, "snapshot").await,
        serde_json::json!([])
    );
    assert_eq!(
        expect_event(&mut policies, "snapshot").await,
        serde_json::json!([])
    );

    let b = snapshot_and_back_up(c, cid, pool, v, "s1").await;
    let mut last = expect_event(&mut backups, "created").await;
    assert_eq!(last["id"], b.to_string());
    assert_eq!(last["lvol_name"], "v");
    // Then its progress, each change the full DTO, until it completes.
    while last["status"] != "completed" {
        last = expect_event(&mut backups, "updated").await;
        assert_eq!(last["id"], b.to_string());
        assert_eq!(last["lvol_name"], "v");
    }
    assert!(last["completed_at"].as_i64() > Some(0));

    let p = c
        .create_backup_policy(
            cid,
            &BackupPolicyCreate {
                name: "keep3".into(),
                versions: Some(3),
                ..Default::default()
            },
        )
        .await
        .expect("policy");
    let created = expect_event(&mut policies, "created").await;
    assert_eq!(
        (created["id"].as_str(), created["max_versions"].as_i64()),
        (Some(p.to_string().as_str()), Some(3))
    );
    c.delete_backup_policy(cid, p).await.expect("delete");
    expect_event(&mut policies, "deleted").await;
}

#[tokio::test]
async fn an_export_imported_into_a_cluster_sharing_the_bucket_restores_there() {
    // Two control planes (two sbsims), their stores' objects in one place, as two
    // control planes share a bucket.
    let shared = tempfile::tempdir().expect("tempdir");
    let site = || {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cfg = config(dir.path(), &fleet_yaml(2, 2));
        cfg.volume_files = Some(dir.path().join("volumes"));
        cfg.object_store_dir = Some(shared.path().to_path_buf());
        (dir, cfg)
    };
    let (dir_a, cfg_a) = site();
    let files = dir_a.path().join("volumes");
    let env = start_with(dir_a, cfg_a).await;
    let (dir_b, cfg_b) = site();
    let files_b = dir_b.path().join("volumes");
    let env_b = start_with(dir_b, cfg_b).await;
    let c = &env.client;
    let cb = &env_b.client;
    let a = backed_up_cluster(&env, "site-a").await;
    let b = backed_up_cluster(&env_b, "site-b").await;
    let (pool_a, v) = volume_in_pool(c, a, "p", "v", 1 << 30).await;
    let vf = files.join(format!("{v}.img"));
    write_at(&vf, 1 << 20, b"one");
    let b1 = snapshot_and_back_up(c, a, pool_a, v, "s1").await;
    completed(c, a, b1).await;
    write_at(&vf, 1 << 20, b"two");
    let b2 = snapshot_and_back_up(c, a, pool_a, v, "s2").await;
    completed(c, a, b2).await;

    // Unknown ids are refused as the control plane refuses them.
    let unknown = Uuid::from_u128(7);
    let e = c
        .export_backups(a, Some(unknown), None)
        .await
        .expect_err("unknown");
    assert_eq!(e.status(), Some(404), "{e}");
    let exported = c.export_backups(a, Some(b2), None).await.expect("export");
    assert_eq!(exported.len(), 2, "the volume's backups: {exported:?}");
    assert_eq!(exported[0].backup_id, b1.to_string());
    assert_eq!(exported[1].prev_backup_id, b1.to_string());
    assert_eq!(exported[1].cluster_id, a.to_string());
    assert_eq!(
        c.export_backups(a, None, Some("other"))
            .await
            .expect("none")
            .len(),
        0
    );

    assert_eq!(cb.import_backups(b, &exported).await.expect("import"), 2);
    let again = cb.import_backups(b, &exported).await.expect_err("twice");
    assert_eq!(again.status(), Some(400), "{again}");
    assert!(
        again
            .to_string()
            .contains(&format!("Backup {b1} already exists in cluster {b}")),
        "{again}"
    );
    let seen = cb.get_backup(b, b2).await.expect("imported");
    assert_eq!(
        (seen.status, seen.source_cluster_id.as_str()),
        (BackupStatus::Completed, a.to_string().as_str())
    );

    // Restored on the second cluster, from the shared bucket.
    let (pool_b, _) = volume_in_pool(cb, b, "pb", "scratch", 1 << 30).await;
    let r = cb
        .restore_backup(
            b,
            &BackupRestore {
                backup_id: b2.to_string(),
                lvol_name: "v-at-b".into(),
                pool: "pb".into(),
                target_node_id: None,
            },
        )
        .await
        .expect("restore");
    eventually("restored at b", || async {
        let x = cb.get_volume(b, pool_b, r).await.ok()?;
        (x.status == VolumeStatus::Online).then_some(())
    })
    .await;
    assert_eq!(
        read_at(&files_b.join(format!("{r}.img")), 1 << 20, 3),
        b"two"
    );
    // The second cluster's own backups are numbered past the shared prefix's.
    let own = snapshot_and_back_up(cb, b, pool_b, r, "sb1").await;
    let own = completed(cb, b, own).await;
    assert!(own.s3_id > seen.s3_id, "{} after {}", own.s3_id, seen.s3_id);
}

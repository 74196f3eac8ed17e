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
    let cid = active_cluster(c, "bk", 2).await;
    let pool = c
        .create_pool(
            cid,
            &PoolCreate {
                name: "p".into(),
                ..Default::default()
            },
        )
        .await
        .expect("pool");
    let mut body = VolumeCreate::new("v", 1 << 30);
    body.ndcs = 1;
    body.npcs = 1;
    let v = c.create_volume(cid, pool.id, &body).await.expect("volume");
    let vf = files.join(format!("{v}.img"));

    // Two snapshots, each with its own data; backing up the second backs up the first
    // too, as the chain's root.
    write_at(&vf, 4096, b"first");
    let s1 = c.create_snapshot(cid, pool.id, v, "s1").await.expect("s1");
    write_at(&vf, 4096, b"secnd");
    let s2 = c.create_snapshot(cid, pool.id, v, "s2").await.expect("s2");
    let b2 = c.create_backup(cid, s2).await.expect("backup");
    let newest = completed(c, cid, b2).await;
    assert_eq!(newest.snapshot_id, s2.to_string());
    assert_eq!(
        (newest.lvol_id.as_str(), newest.size),
        (v.to_string().as_str(), 1 << 30)
    );
    assert!(newest.completed_at >= newest.created_at && newest.completed_at > 0);
    let listed = c.list_volume_backups(cid, pool.id, v).await.expect("list");
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0].id, b2, "newest first");
    let root = &listed[1];
    assert_eq!(root.snapshot_id, s1.to_string());
    assert_eq!(root.prev_backup_id, "");
    assert_eq!(newest.prev_backup_id, root.id.to_string());
    assert!(root.s3_id < newest.s3_id);
    assert_eq!(c.list_backups(cid).await.expect("all").len(), 2);

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
    let during = c.get_volume(cid, pool.id, restored).await.expect("volume");
    assert_eq!(during.status, VolumeStatus::Restoring);
    // While its data comes in, the new volume cannot be deleted.
    let refused = c
        .delete_volume(cid, pool.id, restored)
        .await
        .expect_err("restoring");
    assert!(
        refused.to_string().contains("backup restore in progress"),
        "{refused}"
    );
    eventually("the restored volume online", || async {
        let v = c.get_volume(cid, pool.id, restored).await.ok()?;
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
                pool: pool.id.to_string(),
                target_node_id: None,
            },
        )
        .await
        .expect_err("name in use");
    assert_eq!(taken.status(), Some(500), "{taken}");

    // Deleting the volume's backups deletes them all, and their data.
    c.delete_volume_backups(cid, pool.id, v)
        .await
        .expect("delete backups");
    assert!(c.list_backups(cid).await.expect("all").is_empty());
    let gone = c.get_backup(cid, b2).await.expect_err("gone");
    assert_eq!(gone.status(), Some(404));
    let none = c
        .delete_volume_backups(cid, pool.id, v)
        .await
        .expect_err("none left");
    assert_eq!(none.status(), Some(400));
}

#[tokio::test]
async fn policies_are_checked_kept_and_attached_to_pools_and_volumes() {
    let env = start(2, 2).await;
    let c = &env.client;
    let cid = active_cluster(c, "bp", 2).await;
    let pool = c
        .create_pool(
            cid,
            &PoolCreate {
                name: "p".into(),
                ..Default::default()
            },
        )
        .await
        .expect("pool");
    let mut body = VolumeCreate::new("v", 1 << 30);
    body.ndcs = 1;
    body.npcs = 1;
    let v = c.create_volume(cid, pool.id, &body).await.expect("volume");

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
        target_id: pool.id.to_string(),
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
    let cid = active_cluster(c, "bs", 2).await;
    let pool = c
        .create_pool(
            cid,
            &PoolCreate {
                name: "p".into(),
                ..Default::default()
            },
        )
        .await
        .expect("pool");
    let mut body = VolumeCreate::new("v", 1 << 30);
    body.ndcs = 1;
    body.npcs = 1;
    let v = c.create_volume(cid, pool.id, &body).await.expect("volume");
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
            target_id: pool.id.to_string(),
        },
    )
    .await
    .expect("attach");

    // Backups come on the schedule; past two versions the oldest is folded into the next.
    let backups = eventually("scheduled backups, the oldest merged", || async {
        let all = c.list_volume_backups(cid, pool.id, v).await.ok()?;
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
            target_id: pool.id.to_string(),
        },
    )
    .await
    .expect("detach");
    let backups = eventually("nothing under way", || async {
        let all = c.list_volume_backups(cid, pool.id, v).await.ok()?;
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
        let r = c.get_volume(cid, pool.id, restored).await.ok()?;
        (r.status == VolumeStatus::Online).then_some(())
    })
    .await;
}

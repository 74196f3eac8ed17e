//! The backup service below the routes and the runner: a backup of a snapshot queued for
//! its upload, the policies' ages and schedules, and the minute's pass over a cluster's
//! policies (scheduled backups, merges past a policy's versions or age). Route handlers
//! take backups and start the service; the runner's jobs run its passes.

use simplyblock_controlplane::types::*;
use uuid::Uuid;

use crate::model::*;
use crate::objstore;
use crate::sim::St;
use crate::store::Tables;

/// Whether `b` holds (or will hold) its snapshot's data.
pub fn live(b: &BackupRec) -> bool {
    b.status != BackupStatus::Failed
}

pub fn backup_one(st: &mut St<'_>, vol: &VolumeRec, snap: &SnapshotRec) -> Uuid {
    let id = st.uuid();
    let seq = st.seq();
    // Numbers already in the bucket count too: another cluster may write under the same
    // prefix.
    let in_store = objstore::target_of(st.t, vol.cluster_id)
        .map(|t| objstore::highest_s3_id(&objstore::root(&st.sim.config), &t))
        .unwrap_or(0);
    let s3_id =
        st.t.backups
            .values()
            .filter(|b| b.cluster_id == vol.cluster_id)
            .map(|b| b.s3_id)
            .max()
            .unwrap_or(0)
            .max(in_store)
            + 1;
    let prev =
        st.t.backups
            .values()
            .filter(|b| b.volume_id == vol.id && live(b))
            .max_by_key(|b| (b.created_ms, b.seq))
            .map(|b| b.id);
    st.t.backups.insert(
        id.to_string(),
        BackupRec {
            id,
            seq,
            cluster_id: vol.cluster_id,
            s3_id,
            volume_id: vol.id,
            volume_name: vol.name.clone(),
            snapshot_id: snap.id,
            snapshot_name: snap.name.clone(),
            node_id: vol.node_id,
            status: BackupStatus::Pending,
            prev,
            size: snap.size,
            allowed_hosts: vol.allowed_hosts.clone(),
            created_ms: st.now,
            completed_ms: None,
            error: String::new(),
            source_cluster_id: String::new(),
        },
    );
    let pickup = st.sim.timings().task_pickup_ms;
    st.job(JobKind::Backup { backup: id }, pickup);
    id
}

/// The end of backup `id`'s upload: its snapshot's data and manifest written to the
/// cluster's store, or the backup failed with what the store (or a scripted fault) said.
pub fn upload(st: &mut St<'_>, id: Uuid) {
    let Some(b) = st.t.backups.get(&id.to_string()).cloned() else {
        return;
    };
    let vol_id = b.volume_id.to_string();
    if crate::sim::lock(&st.sim.faults).backup_fails(&vol_id, &b.volume_name) {
        return fail(
            st,
            id,
            "bdev_lvol_transfer_stat: transfer Failed (the upload broke off midway)".into(),
        );
    }
    let target = match objstore::target_of(st.t, b.cluster_id) {
        Ok(t) => t,
        Err(e) => return fail(st, id, e),
    };
    let data = st
        .sim
        .config
        .volume_files
        .as_ref()
        .map(|dir| crate::volfiles::path(dir, b.snapshot_id));
    let now = st.now;
    match objstore::put(
        &objstore::root(&st.sim.config),
        st.t,
        &target,
        &b,
        data.as_deref(),
        now,
    ) {
        Ok(()) => {
            if let Some(x) = st.t.backups.get_mut(&id.to_string()) {
                x.status = BackupStatus::Completed;
                x.completed_ms = Some(now);
            }
            st.event(b.cluster_id, "backup", format!("Backup completed: {id}"));
        }
        Err(e) => fail(st, id, e),
    }
}

fn fail(st: &mut St<'_>, id: Uuid, why: String) {
    let Some(b) = st.t.backups.get_mut(&id.to_string()) else {
        return;
    };
    b.status = BackupStatus::Failed;
    b.error = why.clone();
    let cluster = b.cluster_id;
    st.event(cluster, "backup", format!("Backup failed: {id}: {why}"));
}

/// The backups `id`'s restore reads, newest first: it and the ones it is incremental to.
pub fn chain(t: &Tables, id: Uuid) -> Vec<BackupRec> {
    let mut out = Vec::new();
    let mut at = t.backups.get(&id.to_string()).cloned();
    while let Some(b) = at {
        at = b.prev.and_then(|p| t.backups.get(&p.to_string()).cloned());
        out.push(b);
        if out.len() > t.backups.len() {
            break;
        }
    }
    out
}

/// The end of a restore of backup `id` into `volume`: every object of the chain read
/// from the store, the data written into the volume, which goes online; or, when the
/// store does not give them, the volume is `restore_failed`.
pub fn download(st: &mut St<'_>, id: Uuid, volume: Uuid) {
    let Some(v) = st.t.volumes.get(&volume.to_string()).cloned() else {
        return;
    };
    let read = || -> Result<std::path::PathBuf, String> {
        let target = objstore::target_of(st.t, v.cluster_id)?;
        let mut newest = None;
        for b in chain(st.t, id) {
            let data = objstore::data(&objstore::root(&st.sim.config), st.t, &target, b.s3_id)?;
            newest.get_or_insert(data);
        }
        newest.ok_or_else(|| format!("'Backup {id} not found'"))
    };
    let outcome = read();
    let status = match &outcome {
        // Each object holds its snapshot's whole image, so the newest is the chain's data.
        Ok(data) => {
            if let Some(dir) = &st.sim.config.volume_files
                && let Err(e) =
                    crate::volfiles::copy_file(data, &crate::volfiles::path(dir, volume), v.size)
            {
                tracing::warn!(%volume, error = %e, "volume file: restore failed");
            }
            st.event(
                v.cluster_id,
                "backup",
                format!("Backup restored: {id} -> {}", v.name),
            );
            VolumeStatus::Online
        }
        Err(why) => {
            st.event(
                v.cluster_id,
                "backup",
                format!("Backup restore failed: {id} -> {}: {why}", v.name),
            );
            VolumeStatus::RestoreFailed
        }
    };
    if let Some(x) = st.t.volumes.get_mut(&volume.to_string())
        && x.status == VolumeStatus::Restoring
    {
        x.status = status;
    }
}

/// Folds backup `id` into the next of its chain, which takes its place: the next one's
/// manifest follows what `id` followed, and `id`'s objects go.
pub fn merge(st: &mut St<'_>, id: Uuid) {
    let Some(old) = st.t.backups.get(&id.to_string()).cloned() else {
        return;
    };
    let next =
        st.t.backups
            .values()
            .find(|b| b.prev == Some(id))
            .map(|b| (b.id.to_string(), b.s3_id));
    let target = objstore::target_of(st.t, old.cluster_id).ok();
    if let Some((n, s3_id)) = &next {
        if let Some(b) = st.t.backups.get_mut(n) {
            b.prev = old.prev;
        }
        if let Some(target) = &target {
            objstore::relink(
                &objstore::root(&st.sim.config),
                st.t,
                target,
                *s3_id,
                old.prev,
            );
        }
    }
    if let Some(target) = &target {
        objstore::delete(&objstore::root(&st.sim.config), st.t, target, old.s3_id);
    }
    if let Some(b) = st.t.backups.get_mut(&id.to_string()) {
        b.status = BackupStatus::Merged;
    }
    if let Some((n, _)) = next {
        st.event(
            old.cluster_id,
            "backup",
            format!("Backup merged: {id} into {n}"),
        );
    }
}

/// Deletes backup `b`'s record and its objects.
pub fn delete(st: &mut St<'_>, b: &BackupRec) {
    st.t.backups.remove(&b.id.to_string());
    if let Ok(target) = objstore::target_of(st.t, b.cluster_id) {
        objstore::delete(&objstore::root(&st.sim.config), st.t, &target, b.s3_id);
    }
}

/// How often the backup service looks at a cluster's policies.
pub const SERVICE_INTERVAL_MS: i64 = 60_000;

/// The policy in force for volume `v`: one attached to it, else one attached to its pool.
fn policy_for(t: &Tables, v: &VolumeRec) -> Option<BackupPolicyRec> {
    let attached = |kind: &str, target: Uuid| {
        t.backup_attachments
            .values()
            .filter(|a| a.target_type == kind && a.target_id == target)
            .filter_map(|a| t.backup_policies.get(&a.policy_id.to_string()))
            .min_by_key(|p| p.seq)
            .cloned()
    };
    attached("lvol", v.id).or_else(|| attached("pool", v.pool_id))
}

/// One pass of the backup service over cluster `c`'s volumes; whether the cluster still
/// has policies (the service goes on).
pub fn service_pass(st: &mut St<'_>, c: Uuid) -> bool {
    if !st.t.backup_policies.values().any(|p| p.cluster_id == c) {
        return false;
    }
    let volumes: Vec<VolumeRec> =
        st.t.volumes
            .values()
            .filter(|v| v.cluster_id == c && v.status == VolumeStatus::Online)
            .cloned()
            .collect();
    // At most one merge a pass, none while one runs.
    let mut merging =
        st.t.backups
            .values()
            .any(|b| b.cluster_id == c && b.status == BackupStatus::Merging);
    for v in volumes {
        let Some(policy) = policy_for(st.t, &v) else {
            continue;
        };
        if !merging && let Some(oldest) = to_merge(st.t, &v, &policy, st.now) {
            if let Some(b) = st.t.backups.get_mut(&oldest.to_string()) {
                b.status = BackupStatus::Merging;
            }
            let d = st.sim.timings().backup_ms;
            st.job(JobKind::BackupMerge { backup: oldest }, d);
            merging = true;
        }
        scheduled_backup(st, &v, &policy);
    }
    true
}

/// The oldest completed backup of `v` to fold into the next, when `policy` keeps fewer
/// versions than there are or the oldest is past its age.
fn to_merge(t: &Tables, v: &VolumeRec, policy: &BackupPolicyRec, now: i64) -> Option<Uuid> {
    let mut done: Vec<&BackupRec> = t
        .backups
        .values()
        .filter(|b| b.volume_id == v.id && b.status == BackupStatus::Completed)
        .collect();
    if done.len() < 2 {
        return None;
    }
    done.sort_by_key(|b| (b.created_ms, b.seq));
    let too_many = policy.max_versions > 0 && done.len() as i64 > policy.max_versions;
    let too_old =
        age_seconds(&policy.max_age).is_some_and(|age| now - done[0].created_ms > age * 1000);
    (too_many || too_old).then(|| done[0].id)
}

/// A backup of `v` on `policy`'s schedule: a snapshot and its backup once the newest
/// completed backup is older than the shortest tier, and none is under way.
fn scheduled_backup(st: &mut St<'_>, v: &VolumeRec, policy: &BackupPolicyRec) {
    let Some(&(every, _)) = schedule_tiers(&policy.schedule)
        .ok()
        .and_then(|t| t.first().cloned())
        .as_ref()
    else {
        return;
    };
    let mine: Vec<&BackupRec> =
        st.t.backups
            .values()
            .filter(|b| b.volume_id == v.id)
            .collect();
    let under_way = mine
        .iter()
        .any(|b| matches!(b.status, BackupStatus::Pending | BackupStatus::InProgress));
    let newest = mine
        .iter()
        .filter(|b| b.status == BackupStatus::Completed)
        .map(|b| b.created_ms)
        .max();
    if under_way || newest.is_some_and(|t| st.now - t < every * 1000) {
        return;
    }
    let name = format!("auto_{}_{}", v.name, st.now / 1000);
    match crate::clones::snapshot_create(st, v.cluster_id, v, &name) {
        Ok(sid) => {
            if let Some(snap) = st.t.snapshots.get(&sid.to_string()).cloned() {
                backup_one(st, v, &snap);
            }
        }
        Err(e) => {
            tracing::info!(volume = %v.id, error = %e.note(), "a scheduled backup's snapshot failed")
        }
    }
}

/// `<number><m|h|d|w>` in seconds.
pub fn age_seconds(age: &str) -> Option<i64> {
    let unit = age.chars().last()?;
    let digits = &age[..age.len() - unit.len_utf8()];
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let number: i64 = digits.parse().ok()?;
    let scale = match unit {
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        'w' => 604_800,
        _ => return None,
    };
    Some(number * scale)
}

/// The schedule's tiers (interval in seconds, backups kept), checked as the control
/// plane checks them: each `<interval>,<count>`, a count of at least 1, the intervals
/// strictly increasing.
pub fn schedule_tiers(schedule: &str) -> Result<Vec<(i64, i64)>, String> {
    let mut tiers = Vec::new();
    for tier in schedule.split_whitespace() {
        let Some((interval, count)) = tier.split_once(',') else {
            return Err(format!(
                "Invalid schedule tier: {tier}. Expected format: <interval>,<count> e.g. 15m,4"
            ));
        };
        let seconds = age_seconds(interval).ok_or_else(|| {
            format!("Invalid schedule tier: {tier}. Expected format: <interval>,<count> e.g. 15m,4")
        })?;
        let count: i64 = count
            .parse()
            .map_err(|_| format!("Invalid keep count in tier: {tier}. Must be an integer."))?;
        if count < 1 {
            return Err(format!("Keep count must be >= 1 in tier: {tier}"));
        }
        tiers.push((seconds, count));
    }
    tiers.sort();
    if tiers.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err("Schedule tier intervals must be strictly increasing".into());
    }
    Ok(tiers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_a_number_and_a_unit() {
        assert_eq!(age_seconds("2d"), Some(2 * 86_400));
        assert_eq!(age_seconds("15m"), Some(900));
        assert_eq!(age_seconds("1w"), Some(604_800));
        for bad in ["", "d", "2", "2s", "-2d", "+2d", "2.5h", "2dé", "é"] {
            assert_eq!(age_seconds(bad), None, "{bad}");
        }
    }

    #[test]
    fn schedules_are_checked_as_the_control_plane_checks_them() {
        assert_eq!(schedule_tiers(""), Ok(Vec::new()));
        assert_eq!(
            schedule_tiers("1d,7 15m,4"),
            Ok(vec![(900, 4), (86_400, 7)]),
            "sorted by interval"
        );
        assert!(
            schedule_tiers("15m")
                .expect_err("refused")
                .starts_with("Invalid schedule tier: 15m.")
        );
        assert!(
            schedule_tiers("15x,4")
                .expect_err("refused")
                .starts_with("Invalid schedule tier")
        );
        assert_eq!(
            schedule_tiers("15m,a").expect_err("refused"),
            "Invalid keep count in tier: 15m,a. Must be an integer."
        );
        assert_eq!(
            schedule_tiers("15m,0").expect_err("refused"),
            "Keep count must be >= 1 in tier: 15m,0"
        );
        assert_eq!(
            schedule_tiers("15m,2 15m,3").expect_err("refused"),
            "Schedule tier intervals must be strictly increasing"
        );
    }
}

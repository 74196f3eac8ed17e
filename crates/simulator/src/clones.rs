//! Snapshots that clones refer to: one is deleted softly while a clone still refers to it,
//! and reaped once the last clone lets go (the clone is deleted or inflated); and taking
//! one. Route handlers, the runner's jobs, landed replication cycles and the backup
//! service all take or delete snapshots, so this sits below them.

use simplyblock_controlplane::types::{ClusterStatus, SnapshotStatus, VolumeStatus};
use uuid::Uuid;

use crate::model::{SnapshotRec, VolumeRec};
use crate::render;
use crate::reply::ApiError;
use crate::sim::St;
use crate::store::Tables;

/// Delete a landed snapshot, softly while a clone still refers to it.
pub fn drop_snapshot(st: &mut St<'_>, s: Uuid) {
    let cloned =
        st.t.volumes
            .values()
            .any(|v| v.cloned_from == Some(s) && v.status != VolumeStatus::Deleted);
    if cloned {
        if let Some(x) = st.t.snapshots.get_mut(&s.to_string()) {
            x.soft_deleted = true;
            x.status = SnapshotStatus::InDeletion;
        }
        return;
    }
    st.t.snapshots.remove(&s.to_string());
    if let Some(dir) = &st.sim.config.volume_files {
        crate::volfiles::remove(dir, s);
    }
}

/// Remove a soft-deleted snapshot once no clone refers to it any more (a clone's deletion
/// or inflation lets go of it).
pub fn reap_snapshot(t: &mut Tables, snap: Uuid) {
    let referenced = t
        .volumes
        .values()
        .any(|v| v.cloned_from == Some(snap) && v.status != VolumeStatus::Deleted);
    if !referenced
        && t.snapshots
            .get(&snap.to_string())
            .is_some_and(|s| s.soft_deleted)
    {
        t.snapshots.remove(&snap.to_string());
    }
}

/// Take a snapshot of a volume (the snapshot route, and the clone route before it clones).
pub fn snapshot_create(
    st: &mut St<'_>,
    c: Uuid,
    v: &VolumeRec,
    name: &str,
) -> Result<Uuid, ApiError> {
    if st
        .t
        .snapshots
        .values()
        .any(|s| s.cluster_id == c && s.name == name && !s.soft_deleted)
    {
        return Err(ApiError::conflict(format!(
            "Snapshot {name} already exists (snapshot names must be unique)"
        )));
    }
    // The cluster must take writes (the routes' `mutable_cluster`).
    let status =
        st.t.clusters
            .get(&c.to_string())
            .ok_or_else(|| ApiError::key_error(format!("Cluster {c} not found")))?
            .status;
    if !matches!(status, ClusterStatus::Active | ClusterStatus::Degraded) {
        return Err(ApiError::opaque(format!(
            "Cluster is not active, status: {status}"
        )));
    }
    if v.status != VolumeStatus::Online {
        return Err(ApiError::opaque(format!("volume is {}", v.status)));
    }
    let id = st.uuid();
    let seq = st.seq();
    st.t.snapshots.insert(
        id.to_string(),
        SnapshotRec {
            id,
            seq,
            cluster_id: c,
            pool_id: v.pool_id,
            volume_id: v.id,
            name: name.to_string(),
            size: v.size,
            used_size: render::volume_used(v),
            status: SnapshotStatus::Online,
            created_ms: st.now,
            soft_deleted: false,
        },
    );
    if let Some(dir) = &st.sim.config.volume_files {
        crate::volfiles::copy(dir, v.id, id, v.size);
    }
    Ok(id)
}

//! Snapshots that clones refer to: one is deleted softly while a clone still refers to it,
//! and reaped once the last clone lets go (the clone is deleted or inflated). Route
//! handlers, the runner's jobs and landed replication cycles all delete snapshots, so this
//! sits below them.

use simplyblock_controlplane::types::{SnapshotStatus, VolumeStatus};
use uuid::Uuid;

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

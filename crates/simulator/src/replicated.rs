//! What a replication cycle carries: the snapshot it takes of the sending volume, which
//! lands on the receiving side as a snapshot of the replica, and (with `--volume-files`)
//! the data itself. The sending volume is the source while the relationship points at
//! its target, and the replica once it is failed back (`direction = to_source`).

use uuid::Uuid;

use crate::model::*;
use crate::sim::St;
use crate::store::Tables;
use simplyblock_controlplane::types::{ReplicationDirection, SnapshotStatus, VolumeStatus};

/// How many landed snapshots a relationship keeps when its policy does not say.
const KEEP_DEFAULT: usize = 3;

/// `(sending, receiving)` volume of a relationship, as its direction says.
fn ends(r: &ReplicationRec) -> (Option<Uuid>, Option<Uuid>) {
    match r.direction {
        ReplicationDirection::ToSource => (r.target_lvol, Some(r.source_lvol)),
        _ => (Some(r.source_lvol), r.target_lvol),
    }
}

/// The cycle takes its snapshot now: reserve the id it lands under and stage the sending
/// volume's data there, so what is written afterwards waits for the next cycle.
pub fn take(st: &mut St<'_>, key: Uuid) {
    let Some(r) = st.t.replications.get(&key.to_string()).cloned() else {
        return;
    };
    let id = st.uuid();
    if let Some(x) = st.t.replications.get_mut(&key.to_string()) {
        x.pending_snapshot = Some(id);
    }
    let sending = ends(&r)
        .0
        .and_then(|v| st.t.volumes.get(&v.to_string()))
        .map(|v| (v.id, v.size));
    if let (Some(dir), Some((v, size))) = (&st.sim.config.volume_files, sending) {
        crate::volfiles::copy(dir, v, id, size);
    }
}

/// The cycle's snapshot arrives: it becomes a snapshot of the receiving volume on that
/// volume's cluster and pool, the receiving volume takes its data, and the oldest landed
/// snapshots beyond the policy's `keep_replicated` go. A cycle of a consistency group's
/// generation `group_seq` records its snapshot there.
pub fn land(st: &mut St<'_>, key: Uuid, group_seq: Option<u64>) {
    let Some(r) = st.t.replications.get(&key.to_string()).cloned() else {
        return;
    };
    let Some(id) = r.pending_snapshot else {
        return;
    };
    // A reaped receiving volume takes nothing: its relationship only still resolves.
    let Some(recv) = ends(&r)
        .1
        .and_then(|v| st.t.volumes.get(&v.to_string()))
        .filter(|v| v.status != VolumeStatus::Deleted)
        .cloned()
    else {
        if let Some(x) = st.t.replications.get_mut(&key.to_string()) {
            x.pending_snapshot = None;
        }
        if let (Some(dir), Some(id)) = (&st.sim.config.volume_files, r.pending_snapshot) {
            crate::volfiles::remove(dir, id);
        }
        return;
    };
    let seq = st.seq();
    st.t.snapshots.insert(
        id.to_string(),
        SnapshotRec {
            id,
            seq,
            cluster_id: recv.cluster_id,
            pool_id: recv.pool_id,
            volume_id: recv.id,
            name: format!("{}-replicated-{seq}", recv.name),
            size: recv.size,
            used_size: 0,
            status: SnapshotStatus::Online,
            created_ms: st.now,
            soft_deleted: false,
        },
    );
    if let Some(dir) = &st.sim.config.volume_files {
        crate::volfiles::copy(dir, id, recv.id, recv.size);
    }
    let keep =
        st.t.volumes
            .get(&r.source_lvol.to_string())
            .and_then(|v| v.replication_policy)
            .and_then(|p| st.t.policies.get(&p.to_string()))
            .map_or(KEEP_DEFAULT, |p| (p.keep_replicated as usize).max(1));
    let mut landed = r.replicated_snapshots.clone();
    landed.push(id);
    let cut = landed.len().saturating_sub(keep);
    let gone: Vec<Uuid> = landed.drain(..cut).collect();
    if let Some(x) = st.t.replications.get_mut(&key.to_string()) {
        x.pending_snapshot = None;
        x.replicated_snapshots = landed;
    }
    if let (Some(seq), Some(g)) = (group_seq, r.group) {
        crate::cycles::group_landed(st, g, seq, r.source_lvol, id);
    }
    for s in gone {
        crate::clones::drop_snapshot(st, s);
    }
}

/// The newest landed snapshot of a relationship that is still there.
pub fn latest<'t>(t: &'t Tables, r: &ReplicationRec) -> Option<&'t SnapshotRec> {
    r.replicated_snapshots
        .iter()
        .rev()
        .filter_map(|s| t.snapshots.get(&s.to_string()))
        .find(|s| !s.soft_deleted)
}

//! Replication cycles, queued as `snapshot_replication` tasks for the engine's runner: a
//! volume's own, on its relationship's schedule or on demand, and a consistency group's
//! generations, a cycle of every member at once, whose landed snapshots are recorded here.
//! Route handlers (a triggered cycle) and the runner's step both queue cycles, so this
//! sits below them both and calls neither.

use serde_json::{Map, json};
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use crate::model::*;
use crate::sim::St;
use crate::store::Tables;

/// Generations a group remembers; older ones were pruned on the target long before.
const GENERATIONS_KEPT: usize = 16;

/// Queue the cycles of the volumes whose schedule is due; true when one was queued.
pub fn schedule_replication(st: &mut St<'_>) -> bool {
    let due: Vec<ReplicationRec> =
        st.t.replications
            .values()
            .filter(|r| r.running && r.group.is_none() && r.next_ms <= st.now)
            .cloned()
            .collect();
    let progressed = !due.is_empty();
    for r in due {
        queue_replication(st, r.cluster_id, r.source_lvol);
        let next = st.now + (r.interval_min.max(1) as i64) * 60_000;
        if let Some(x) = st.t.replications.get_mut(&r.source_lvol.to_string()) {
            x.next_ms = next;
        }
    }
    progressed
}

/// Queue one `snapshot_replication` task for a volume unless one is open (the schedule and
/// the trigger route both ask).
pub fn queue_replication(st: &mut St<'_>, c: Uuid, vid: Uuid) {
    let open = st.t.tasks.values().any(|t| {
        t.function_name == "snapshot_replication"
            && t.params.get("lvol_id") == Some(&json!(vid))
            && t.status != TaskStatus::Done
    });
    if open {
        return;
    }
    let node = st.t.volumes.get(&vid.to_string()).map(|v| v.node_id);
    let mut params = Map::new();
    params.insert("lvol_id".into(), json!(vid));
    st.task(c, "snapshot_replication", node, None, params, 8);
}

/// The open members whose volumes still live, in the order they joined.
pub fn group_members(t: &Tables, g: &GroupRec) -> Vec<Uuid> {
    g.members
        .iter()
        .filter(|m| m.removed_seq == 0)
        .map(|m| m.lvol_id)
        .filter(|v| {
            t.volumes
                .get(&v.to_string())
                .is_some_and(|v| v.status != VolumeStatus::Deleted)
        })
        .collect()
}

/// Start the generations that are due; true when one started.
pub fn schedule_groups(st: &mut St<'_>) -> bool {
    let due: Vec<Uuid> =
        st.t.groups
            .values()
            .filter(|g| g.policy_id.is_some() && g.next_ms <= st.now)
            .map(|g| g.id)
            .collect();
    let mut progressed = false;
    for id in due {
        progressed |= generation(st, id);
    }
    progressed
}

/// One replication generation of a group: a cycle of every member's relationship, each
/// task carrying the generation's `group_seq`. It waits while a member's cycle is still
/// open, so a generation never mixes snapshots of different moments.
fn generation(st: &mut St<'_>, id: Uuid) -> bool {
    let Some(mut g) = st.t.groups.get(&id.to_string()).cloned() else {
        return false;
    };
    let vols: Vec<Uuid> = group_members(st.t, &g)
        .into_iter()
        .filter(|v| {
            st.t.replications
                .get(&v.to_string())
                .is_some_and(|r| r.running && r.group == Some(id))
        })
        .collect();
    let interval = g
        .policy_id
        .and_then(|p| st.t.policies.get(&p.to_string()))
        .map_or(1, |p| p.interval_min.max(1));
    if vols.is_empty() {
        g.next_ms = st.now + interval as i64 * 60_000;
        st.t.groups.insert(g.id.to_string(), g);
        return false;
    }
    let busy = st.t.tasks.values().any(|t| {
        t.function_name == "snapshot_replication"
            && t.status != TaskStatus::Done
            && vols
                .iter()
                .any(|v| t.params.get("lvol_id") == Some(&json!(v)))
    });
    if busy {
        return false;
    }
    let seq = g.group_seq + 1;
    for v in &vols {
        let mut params = Map::new();
        params.insert("lvol_id".into(), json!(v));
        params.insert("group_seq".into(), json!(seq));
        st.task(
            g.cluster_id,
            "snapshot_replication",
            Some(g.node_id),
            None,
            params,
            8,
        );
    }
    g.group_seq = seq;
    g.generations.push(GenerationRec {
        group_seq: seq,
        expected: vols,
        landed: Vec::new(),
    });
    let cut = g.generations.len().saturating_sub(GENERATIONS_KEPT);
    g.generations.drain(..cut);
    g.next_ms = st.now + interval as i64 * 60_000;
    st.t.groups.insert(g.id.to_string(), g);
    true
}

/// A member's snapshot of generation `seq` landed.
pub fn group_landed(st: &mut St<'_>, group: Uuid, seq: u64, member: Uuid, snapshot: Uuid) {
    if let Some(g) = st.t.groups.get_mut(&group.to_string())
        && let Some(gen_) = g.generations.iter_mut().find(|x| x.group_seq == seq)
    {
        gen_.landed.push((member, snapshot));
    }
}

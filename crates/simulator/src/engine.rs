//! The runner: advances tasks, background jobs, migrations and replication on the sim
//! clock, and derives cluster statuses the way the real monitor does. Every step runs
//! inside [`Sim::mutate`], so it is committed before anyone sees it, and a restarted
//! sbsim continues each piece of work from its last committed step.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use crate::clones::reap_snapshot;
use crate::cycles::{schedule_groups, schedule_replication};
use crate::model::*;
use crate::render;
use crate::reply::ApiError;
use crate::sim::{Sim, St};

/// Run until `stop` flips.
pub async fn run(sim: Arc<Sim>, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        let next = sim.mutate(|st| Ok(step(st))).ok().flatten();
        sim.engine_passes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let now = sim.clock.now_ms();
        // Poll at least every 100 ms: reboots end and faults expire without an event.
        let wait = next
            .and_then(|due| sim.clock.real_delay(due - now))
            .unwrap_or(Duration::from_millis(100))
            .clamp(Duration::from_millis(1), Duration::from_millis(100));
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = sim.wake.notified() => {}
            _ = stop.changed() => return,
        }
    }
}

/// Let `ms` of sim time pass as it would at any speed: the clock moves from one due
/// moment to the next, and everything due at each is carried out at that moment, before
/// this returns. A jump of an hour runs each retry, phase and schedule of that hour at its
/// own time, so what a caller reads afterwards does not depend on how often the background
/// runner happened to look.
pub fn pass_time(sim: &Sim, ms: i64) -> Result<(), ApiError> {
    let target = sim.clock.now_ms() + ms.max(0);
    // Each round either carries out what is due or moves the clock forward; the bound
    // only guards against work that keeps making itself due at the same moment.
    for _ in 0..100_000 {
        let next = sim.mutate(|st| Ok(step(st)))?;
        let now = sim.clock.now_ms();
        match next {
            Some(due) if due <= now => continue,
            Some(due) if due < target => sim.clock.advance(due - now),
            _ => {
                if now < target {
                    sim.clock.advance(target - now);
                    sim.mutate(|st| Ok(step(st)))?;
                }
                break;
            }
        }
    }
    sim.engine_passes
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// Process everything due; return when the next thing is due (sim ms).
pub fn step(st: &mut St<'_>) -> Option<i64> {
    // Work that finishes can make other work due at once; bound the passes.
    for _ in 0..64 {
        let mut progressed = false;
        let mut jobs: Vec<(i64, u64, String)> =
            st.t.jobs
                .values()
                .filter(|j| j.due_ms <= st.now)
                .map(|j| (j.due_ms, j.seq, j.id.to_string()))
                .collect();
        jobs.sort();
        for (_, _, id) in jobs {
            run_job(st, &id);
            progressed = true;
        }
        let mut tasks: Vec<(u64, String)> =
            st.t.tasks
                .values()
                .filter(|t| t.status != TaskStatus::Done && t.next_ms <= st.now)
                .map(|t| (t.seq, t.id.to_string()))
                .collect();
        tasks.sort();
        for (_, id) in tasks {
            run_task(st, &id);
            progressed = true;
        }
        progressed |= advance_migrations(st);
        progressed |= schedule_replication(st);
        progressed |= schedule_groups(st);
        if !progressed {
            break;
        }
    }
    monitor(st);
    let mut next: Option<i64> = None;
    let mut consider = |t: i64| next = Some(next.map_or(t, |n: i64| n.min(t)));
    for j in st.t.jobs.values() {
        consider(j.due_ms);
    }
    for t in st.t.tasks.values().filter(|t| t.status != TaskStatus::Done) {
        consider(t.next_ms);
    }
    for m in
        st.t.migrations
            .values()
            .filter(|m| m.active() && m.phase != "pre_created")
    {
        consider(m.next_ms);
    }
    for r in st.t.replications.values().filter(|r| r.running) {
        consider(r.next_ms);
    }
    next
}

fn set_devices(st: &mut St<'_>, node: Uuid, from: &[DeviceStatus], to: DeviceStatus) {
    st.t.devices.update_where(
        |d| d.node_id == node && from.contains(&d.status),
        |d| d.status = to,
    );
}

fn set_node(st: &mut St<'_>, node: Uuid, status: NodeStatus) {
    let now = st.now;
    if let Some(n) = st.t.nodes.get_mut(&node.to_string()) {
        n.status = status;
        if status == NodeStatus::Online {
            n.online_since_ms = Some(now);
        }
    }
    match status {
        NodeStatus::Online => set_devices(
            st,
            node,
            &[DeviceStatus::Unavailable, DeviceStatus::New],
            DeviceStatus::Online,
        ),
        NodeStatus::Offline | NodeStatus::InShutdown | NodeStatus::InRestart => {
            set_devices(st, node, &[DeviceStatus::Online], DeviceStatus::Unavailable)
        }
        _ => {}
    }
}

fn cluster_nodes(st: &St<'_>, c: Uuid) -> Vec<NodeRec> {
    let mut v: Vec<NodeRec> =
        st.t.nodes
            .values()
            .filter(|n| n.cluster_id == c)
            .cloned()
            .collect();
    v.sort_by_key(|n| n.seq);
    v
}

fn set_cluster(st: &mut St<'_>, c: Uuid, status: ClusterStatus) {
    let changed =
        st.t.clusters
            .get(&c.to_string())
            .is_some_and(|x| x.status != status);
    if changed {
        if let Some(x) = st.t.clusters.get_mut(&c.to_string()) {
            x.status = status;
        }
        st.event(
            c,
            "cluster_status",
            format!("cluster status is now {status}"),
        );
    }
}

fn set_backup(st: &mut St<'_>, id: Uuid, status: BackupStatus) {
    if let Some(b) = st.t.backups.get_mut(&id.to_string()) {
        b.status = status;
    }
}

fn finish_job(st: &mut St<'_>, id: &str) {
    st.t.jobs.remove(id);
}

fn reschedule(st: &mut St<'_>, id: &str, delay: i64) {
    let due = st.now + delay;
    if let Some(j) = st.t.jobs.get_mut(id) {
        j.step += 1;
        j.due_ms = due;
    }
}

fn run_job(st: &mut St<'_>, id: &str) {
    let Some(job) = st.t.jobs.get(id).cloned() else {
        return;
    };
    let tm = st.sim.timings().clone();
    match job.kind {
        JobKind::ClusterActivate { cluster, prev } => {
            let Some(c) = st.t.clusters.get(&cluster.to_string()).cloned() else {
                return finish_job(st, id);
            };
            if job.step == 0 {
                set_cluster(st, cluster, ClusterStatus::InActivation);
                return reschedule(st, id, tm.activate_ms);
            }
            let nodes = cluster_nodes(st, cluster);
            let online: Vec<&NodeRec> = nodes
                .iter()
                .filter(|n| n.status == NodeStatus::Online)
                .collect();
            let need = (c.params.distr_ndcs + c.params.distr_npcs).max(1) as usize;
            let new_nodes = online.iter().any(|n| !n.lvstore);
            let restore = if prev == ClusterStatus::InActivation {
                ClusterStatus::Unready
            } else {
                prev
            };
            if online.len() < need {
                st.event(
                    cluster,
                    "cluster_activate",
                    format!(
                        "activation failed: {} online nodes, {need} needed",
                        online.len()
                    ),
                );
                set_cluster(st, cluster, restore);
            } else if c.activated && new_nodes {
                st.event(
                    cluster,
                    "cluster_activate",
                    "activation refused: new nodes join through expansion".into(),
                );
                set_cluster(st, cluster, restore);
            } else {
                let ids: Vec<Uuid> = online.iter().map(|n| n.id).collect();
                let ha = c.params.ha_type == HaType::Ha && ids.len() > 1;
                for (i, nid) in ids.iter().enumerate() {
                    let sec = ha.then(|| ids[(i + 1) % ids.len()]);
                    if let Some(n) = st.t.nodes.get_mut(&nid.to_string()) {
                        n.lvstore = true;
                        n.secondary_node_id = sec;
                    }
                }
                if let Some(x) = st.t.clusters.get_mut(&cluster.to_string()) {
                    x.activated = true;
                }
                set_cluster(st, cluster, ClusterStatus::Active);
            }
            finish_job(st, id)
        }
        JobKind::ClusterExpand { cluster, prev } => {
            if job.step == 0 {
                set_cluster(st, cluster, ClusterStatus::InExpansion);
                return reschedule(st, id, tm.expand_ms);
            }
            let ok = expand(st, cluster);
            set_cluster(st, cluster, if ok { ClusterStatus::Active } else { prev });
            finish_job(st, id)
        }
        JobKind::ClusterShutdown { cluster } => {
            let nodes = cluster_nodes(st, cluster);
            if job.step == 0 {
                for n in nodes.iter().filter(|n| {
                    matches!(
                        n.status,
                        NodeStatus::Online | NodeStatus::Suspended | NodeStatus::Down
                    )
                }) {
                    set_node(st, n.id, NodeStatus::InShutdown);
                }
                return reschedule(st, id, tm.node_shutdown_ms);
            }
            for n in nodes.iter().filter(|n| n.status == NodeStatus::InShutdown) {
                set_node(st, n.id, NodeStatus::Offline);
            }
            finish_job(st, id)
        }
        JobKind::ClusterStart { cluster } => {
            let nodes = cluster_nodes(st, cluster);
            if job.step == 0 {
                for n in nodes.iter().filter(|n| n.status != NodeStatus::Removed) {
                    set_node(st, n.id, NodeStatus::InRestart);
                }
                return reschedule(st, id, tm.node_restart_ms);
            }
            for n in nodes.iter().filter(|n| n.status == NodeStatus::InRestart) {
                set_node(st, n.id, NodeStatus::Online);
            }
            finish_job(st, id)
        }
        JobKind::NodeShutdown { node } => {
            let Some(n) = st.t.nodes.get(&node.to_string()).cloned() else {
                return finish_job(st, id);
            };
            if job.step == 0 {
                let c = st.t.clusters.get(&n.cluster_id.to_string()).cloned();
                let busy = c.is_some_and(|c| c.status == ClusterStatus::InExpansion)
                    || st.t.migrations.values().any(|m| {
                        m.cluster_id == n.cluster_id && m.active() && m.phase != "pre_created"
                    });
                if busy || n.status == NodeStatus::Removed {
                    // Refused inside the background thread: invisible to the caller.
                    return finish_job(st, id);
                }
                set_node(st, node, NodeStatus::InShutdown);
                return reschedule(st, id, tm.node_shutdown_ms);
            }
            set_node(st, node, NodeStatus::Offline);
            if let Some(n) = st.t.nodes.get_mut(&node.to_string()) {
                n.auto_restart_disabled = true;
            }
            finish_job(st, id)
        }
        JobKind::NodeRestart { node, ref params } => {
            let Some(n) = st.t.nodes.get(&node.to_string()).cloned() else {
                return finish_job(st, id);
            };
            if job.step == 0 {
                let cluster = st.t.clusters.get(&n.cluster_id.to_string()).cloned();
                let other_busy = st.t.nodes.values().any(|o| {
                    o.cluster_id == n.cluster_id
                        && o.id != node
                        && matches!(o.status, NodeStatus::InRestart | NodeStatus::InShutdown)
                });
                let target_worker = match &params.node_address {
                    Some(a) => st.worker_for_address(a),
                    None => Some(n.worker.clone()),
                };
                let reachable = target_worker
                    .as_deref()
                    .is_some_and(|w| st.worker_reachable(w).is_ok());
                let refused = n.status == NodeStatus::Removed
                    || (n.status != NodeStatus::Offline && !params.force)
                    || cluster.is_none_or(|c| c.status == ClusterStatus::InActivation)
                    || other_busy
                    || !reachable;
                if refused {
                    return finish_job(st, id);
                }
                if let Some(w) = target_worker.filter(|w| *w != n.worker) {
                    relocate(st, node, &w, &params.new_ssd_pcie);
                }
                set_node(st, node, NodeStatus::InRestart);
                return reschedule(st, id, tm.node_restart_ms);
            }
            set_node(st, node, NodeStatus::Online);
            if let Some(n) = st.t.nodes.get_mut(&node.to_string()) {
                n.auto_restart_disabled = false;
            }
            finish_job(st, id)
        }
        JobKind::Backup { backup } => {
            if !st.t.backups.contains(&backup.to_string()) {
                return finish_job(st, id);
            }
            if job.step == 0 {
                set_backup(st, backup, BackupStatus::InProgress);
                return reschedule(st, id, tm.backup_ms);
            }
            crate::backups::upload(st, backup);
            finish_job(st, id)
        }
        JobKind::Restore { backup, volume } => {
            if !st.t.volumes.contains(&volume.to_string()) {
                // Deleted before its data came in: nothing to write.
                return finish_job(st, id);
            }
            if job.step == 0 {
                return reschedule(st, id, tm.restore_ms);
            }
            crate::backups::download(st, backup, volume);
            finish_job(st, id)
        }
        JobKind::BackupPolicies { cluster } => {
            if crate::backups::service_pass(st, cluster) {
                reschedule(st, id, crate::backups::SERVICE_INTERVAL_MS);
            } else {
                finish_job(st, id);
            }
        }
        JobKind::BackupMerge { backup } => {
            crate::backups::merge(st, backup);
            finish_job(st, id)
        }
        JobKind::VolumeDelete { volume } => {
            // A replication source is reaped, not removed: it stays `deleted` (left out of
            // lists, still readable) so its relationship keeps resolving.
            if st.t.replications.contains(&volume.to_string()) {
                if let Some(v) = st.t.volumes.get_mut(&volume.to_string()) {
                    v.status = VolumeStatus::Deleted;
                }
                if let Some(r) = st.t.replications.get_mut(&volume.to_string()) {
                    r.running = false;
                }
                return finish_job(st, id);
            }
            if let Some(v) = st.t.volumes.remove(&volume.to_string()) {
                if let Some(snap) = v.cloned_from {
                    if v.delete_snap_on_delete
                        && let Some(s) = st.t.snapshots.get_mut(&snap.to_string())
                    {
                        s.soft_deleted = true;
                    }
                    reap_snapshot(st.t, snap);
                    if let Some(dir) = &st.sim.config.volume_files
                        && !st.t.snapshots.contains(&snap.to_string())
                    {
                        crate::volfiles::remove(dir, snap);
                    }
                }
                if let Some(dir) = &st.sim.config.volume_files {
                    crate::volfiles::remove(dir, volume);
                }
                st.t.replications.remove(&volume.to_string());
            }
            finish_job(st, id)
        }
    }
}

/// A node restarted on another worker (node migration): it takes that worker's
/// addresses; its old drives are left `removed` and the named new drives join as `new`
/// until promote.
fn relocate(st: &mut St<'_>, node: Uuid, worker: &str, new_pcie: &[String]) {
    let Some(w) = st.t.workers.get(worker).cloned() else {
        return;
    };
    let cluster = st.t.nodes.get(&node.to_string()).map(|n| n.cluster_id);
    if let Some(n) = st.t.nodes.get_mut(&node.to_string()) {
        n.worker = w.hostname.clone();
        n.mgmt_ip = w.mgmt_ip().to_string();
        n.data_ips = data_ips(&w, &[]);
        n.node_address = w.hostname.clone();
    }
    set_devices(
        st,
        node,
        &[DeviceStatus::Online, DeviceStatus::Unavailable],
        DeviceStatus::Removed,
    );
    let Some(cluster) = cluster else { return };
    for d in w.devices.iter().filter(|d| new_pcie.contains(&d.pcie)) {
        let id = st.uuid();
        let seq = st.seq();
        let order = st.t.devices.len() as u32;
        st.t.devices.insert(
            id.to_string(),
            DeviceRec {
                id,
                seq,
                cluster_id: cluster,
                node_id: node,
                model: d.model.clone(),
                serial: d.serial.clone(),
                pcie: d.pcie.clone(),
                size: d.size,
                status: DeviceStatus::New,
                io_error: false,
                order,
            },
        );
    }
}

fn expand(st: &mut St<'_>, cluster: Uuid) -> bool {
    let Some(c) = st.t.clusters.get(&cluster.to_string()).cloned() else {
        return false;
    };
    let nodes = cluster_nodes(st, cluster);
    let new: Vec<Uuid> = nodes
        .iter()
        .filter(|n| n.status == NodeStatus::Online && !n.lvstore)
        .map(|n| n.id)
        .collect();
    let ha = c.params.ha_type == HaType::Ha;
    let min = if c.params.distr_npcs >= 2 { 3 } else { 2 };
    if ha && !new.is_empty() && new.len() < min {
        st.event(
            cluster,
            "cluster_expand",
            format!("A minimum of {min} new nodes is required to expand an HA cluster"),
        );
        return false;
    }
    let online: Vec<Uuid> = nodes
        .iter()
        .filter(|n| n.status == NodeStatus::Online)
        .map(|n| n.id)
        .collect();
    for (i, nid) in new.iter().enumerate() {
        let sec = (ha && online.len() > 1).then(|| new[(i + 1) % new.len()]);
        if let Some(n) = st.t.nodes.get_mut(&nid.to_string()) {
            n.lvstore = true;
            n.secondary_node_id = sec.filter(|s| s != nid);
        }
    }
    true
}

fn data_ips(w: &WorkerRec, names: &[String]) -> Vec<(String, String)> {
    let named: Vec<(String, String)> = w
        .nics
        .iter()
        .filter(|(n, _)| names.contains(n))
        .cloned()
        .collect();
    if !named.is_empty() {
        named
    } else if w.nics.len() > 1 {
        w.nics[1..].to_vec()
    } else {
        w.nics.clone()
    }
}

fn task_mut<'a>(st: &'a mut St<'_>, id: &str) -> Option<&'a mut TaskRec> {
    st.t.tasks.get_mut(id)
}

fn done(st: &mut St<'_>, id: &str, result: &str) {
    if let Some(t) = task_mut(st, id) {
        t.status = TaskStatus::Done;
        t.result = result.into();
    }
}

/// A failed attempt: charge a retry, or finish with "max retry reached".
fn charge(st: &mut St<'_>, id: &str, why: &str) {
    let now = st.now;
    let interval = st.sim.timings().retry_interval_ms;
    let Some(t) = task_mut(st, id) else { return };
    t.retry += 1;
    tracing::debug!(task = %t.id, function = %t.function_name, retry = t.retry, why, "task attempt failed");
    if t.max_retry >= 0 && t.retry >= t.max_retry as u32 {
        t.status = TaskStatus::Done;
        t.result = "max retry reached".into();
        // The cluster log says how an add ended, failed as well as succeeded.
        if t.function_name == "node_add" {
            let (cluster, retries) = (t.cluster_id, t.retry);
            let addr = t
                .params
                .get("node_addr")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            st.event(
                cluster,
                "node_add",
                format!("node add for {addr} failed after {retries} attempts: {why}"),
            );
        }
    } else {
        t.status = TaskStatus::Suspended;
        t.step = 1;
        t.next_ms = now + interval;
    }
}

fn wait(st: &mut St<'_>, id: &str, delay: i64, step: u32) {
    let now = st.now;
    if let Some(t) = task_mut(st, id) {
        t.next_ms = now + delay;
        t.step = step;
    }
}

fn run_task(st: &mut St<'_>, id: &str) {
    let Some(task) = st.t.tasks.get(id).cloned() else {
        return;
    };
    if task.canceled {
        return done(st, id, "canceled");
    }
    // A new task starts running; scripted failures apply per attempt.
    if matches!(task.status, TaskStatus::New | TaskStatus::Suspended) && task.step <= 1 {
        let in_activation =
            st.t.clusters
                .get(&task.cluster_id.to_string())
                .is_some_and(|c| c.status == ClusterStatus::InActivation);
        if task.function_name == "node_add" && in_activation {
            let interval = st.sim.timings().retry_interval_ms;
            if let Some(t) = task_mut(st, id) {
                t.result = "Cluster is in_activation, waiting".into();
                t.next_ms += interval;
            }
            return;
        }
        if let Some(t) = task_mut(st, id) {
            t.status = TaskStatus::Running;
            if t.step == 0 {
                t.step = 1;
            }
        }
        let fails = crate::sim::lock(&st.sim.faults).task_attempt_fails(&task.function_name);
        if fails {
            let result = if task.function_name == "node_add" {
                "Node add result: False"
            } else {
                "failed"
            };
            if let Some(t) = task_mut(st, id) {
                t.result = result.into();
            }
            return charge(st, id, "scripted failure");
        }
    }
    let step = st.t.tasks.get(id).map(|t| t.step).unwrap_or(1);
    match task.function_name.as_str() {
        "node_add" => node_add(st, id, &task, step),
        "node_removal" => node_removal(st, id, &task, step),
        "cluster_expand" => {
            if step == 1 {
                let c = st.t.clusters.get(&task.cluster_id.to_string()).cloned();
                match c {
                    Some(c) if c.activated => {
                        if let Some(t) = task_mut(st, id) {
                            t.params.insert("prev_status".into(), json!(c.status));
                        }
                        set_cluster(st, c.id, ClusterStatus::InExpansion);
                        let d = st.sim.timings().expand_ms;
                        wait(st, id, d, 2);
                    }
                    _ => done(st, id, "Done"),
                }
            } else {
                let prev: ClusterStatus = task
                    .params
                    .get("prev_status")
                    .and_then(|v| serde_json::from_value(v.clone()).ok())
                    .unwrap_or(ClusterStatus::Active);
                let ok = expand(st, task.cluster_id);
                set_cluster(
                    st,
                    task.cluster_id,
                    if ok { ClusterStatus::Active } else { prev },
                );
                if ok {
                    done(st, id, "Done")
                } else {
                    charge(st, id, "expansion failed")
                }
            }
        }
        "lvol_migration" | "lvol_batch_migration" => {
            // Progress is driven by the migration record; the task mirrors its end.
            let mid = task
                .params
                .get("migration_id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            match st
                .t
                .migrations
                .get(&mid)
                .map(|m| (m.active(), m.status.clone()))
            {
                Some((false, status)) => {
                    done(st, id, if status == "done" { "Done" } else { &status })
                }
                None => done(st, id, "migration gone"),
                Some((true, _)) => {
                    let d = st.sim.timings().migration_phase_ms;
                    wait(st, id, d, 1)
                }
            }
        }
        "snapshot_replication" => {
            let vid = task
                .params
                .get("lvol_id")
                .and_then(Value::as_str)
                .and_then(|s| Uuid::parse_str(s).ok())
                .unwrap_or_default();
            if step == 1 {
                // The snapshot is taken now; what is written later waits for the next one.
                let taken = st.seq();
                if let Some(r) = st.t.replications.get_mut(&vid.to_string()) {
                    r.snapshot_seq = Some(taken);
                }
                crate::replicated::take(st, vid);
                let d = st.sim.timings().replication_ms;
                return wait(st, id, d, 2);
            }
            match ensure_replica(st, vid) {
                Ok(_) => {
                    let group_seq = task.params.get("group_seq").and_then(Value::as_u64);
                    crate::replicated::land(st, vid, group_seq);
                    let now = st.now;
                    if let Some(r) = st.t.replications.get_mut(&vid.to_string()) {
                        r.last_snapshot_ms = Some(now);
                        r.replicated_seq = r.snapshot_seq;
                    }
                    done(st, id, "Done")
                }
                Err(e) => charge(st, id, &e),
            }
        }
        "replication_final" => {
            if step == 1 {
                let d = st.sim.timings().replication_ms;
                return wait(st, id, d, 2);
            }
            let vid = task
                .params
                .get("lvol_id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            if let Some(r) = st.t.replications.get_mut(&vid) {
                r.state = ReplicationState::CutoverDone;
                r.running = false;
            }
            done(st, id, "Done")
        }
        _ => done(st, id, "Done"),
    }
}

fn node_add(st: &mut St<'_>, id: &str, task: &TaskRec, step: u32) {
    let tm = st.sim.timings().clone();
    let addr = task
        .params
        .get("node_addr")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let expansion = task
        .params
        .get("expansion")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let Some(cluster) = st.t.clusters.get(&task.cluster_id.to_string()).cloned() else {
        return done(st, id, "Node add result: False");
    };
    match step {
        // Waiting for a rebooting worker: no retry is charged for the reboot itself.
        2 => {
            let worker = st.worker_for_address(&addr);
            let up = worker
                .as_deref()
                .is_some_and(|w| st.worker_reachable(w).is_ok());
            if up {
                if let Some(t) = task_mut(st, id) {
                    t.status = TaskStatus::Running;
                    t.step = 1;
                }
                node_add(st, id, task, 1)
            } else if st.now - task.wait_since_ms > tm.reboot_wait_max_ms {
                charge(st, id, "worker did not come back after its reboot")
            } else {
                wait(st, id, 1_000, 2)
            }
        }
        // Node records exist (in_creation): bring them online.
        3 => {
            let ids: Vec<Uuid> = task
                .params
                .get("created_nodes")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().and_then(|s| Uuid::parse_str(s).ok()))
                        .collect()
                })
                .unwrap_or_default();
            for n in &ids {
                set_node(st, *n, NodeStatus::Online);
            }
            if expansion && cluster.activated {
                let mut p = serde_json::Map::new();
                p.insert("cluster_id".into(), json!(cluster.id));
                let open = st.t.tasks.values().any(|t| {
                    t.cluster_id == cluster.id
                        && t.function_name == "cluster_expand"
                        && t.status != TaskStatus::Done
                });
                if !open {
                    st.task(cluster.id, "cluster_expand", None, None, p, 8);
                }
            }
            st.event(
                cluster.id,
                "node_add",
                format!("node add for {addr} succeeded"),
            );
            done(st, id, "Node add result: Success")
        }
        _ => {
            if cluster.activated && !expansion {
                if let Some(t) = task_mut(st, id) {
                    t.result = "Node add result: False".into();
                }
                return charge(st, id, "the cluster is activated; add with expand=true");
            }
            let Some(worker) = st.worker_for_address(&addr) else {
                return charge(st, id, "no worker answers at that address");
            };
            if let Err(why) = st.worker_reachable(&worker) {
                let rebooting =
                    st.t.workers
                        .get(&worker)
                        .and_then(|w| w.reboot_until_ms)
                        .is_some_and(|u| st.now < u);
                if rebooting {
                    let now = st.now;
                    if let Some(t) = task_mut(st, id) {
                        t.status = TaskStatus::Suspended;
                        t.wait_since_ms = now;
                    }
                    return wait(st, id, 1_000, 2);
                }
                return charge(st, id, &why);
            }
            let Some(w) = st.t.workers.get(&worker).cloned() else {
                return charge(st, id, "worker vanished");
            };
            if st.t.nodes.values().any(|n| {
                n.cluster_id == cluster.id
                    && n.worker == w.hostname
                    && n.status != NodeStatus::Removed
            }) {
                return done(st, id, "Node add result: False");
            }
            if !w.topology_applied {
                // Applying the CPU topology reboots the worker; this attempt is lost.
                let now = st.now;
                if let Some(wr) = st.t.workers.get_mut(&worker) {
                    wr.topology_applied = true;
                    wr.reboot_until_ms = Some(now + tm.reboot_ms);
                }
                if let Some(t) = task_mut(st, id) {
                    t.status = TaskStatus::Suspended;
                    t.wait_since_ms = now;
                }
                return wait(st, id, tm.reboot_ms, 2);
            }
            let created = create_nodes(st, &cluster, &w, task);
            if let Some(t) = task_mut(st, id) {
                t.params.insert(
                    "created_nodes".into(),
                    json!(created.iter().map(|u| u.to_string()).collect::<Vec<_>>()),
                );
            }
            wait(st, id, tm.node_add_ms, 3)
        }
    }
}

fn create_nodes(st: &mut St<'_>, c: &ClusterRec, w: &WorkerRec, task: &TaskRec) -> Vec<Uuid> {
    let p = &task.params;
    let names: Vec<String> = p
        .get("data_nics")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let failure_domain = p.get("failure_domain").and_then(Value::as_i64).unwrap_or(0);
    let max_snapshots = p
        .get("max_snapshots")
        .and_then(Value::as_u64)
        .unwrap_or(500) as u32;
    let per = w.storage_nodes.max(1);
    let existing = st.t.nodes.values().filter(|n| n.cluster_id == c.id).count() as u32;
    let mut ids = Vec::new();
    for socket in 0..per {
        let id = st.uuid();
        let seq = st.seq();
        let hugepages = if c.params.hugepages_mem > 0 {
            c.params.hugepages_mem
        } else {
            4 << 30
        };
        st.t.nodes.insert(
            id.to_string(),
            NodeRec {
                id,
                seq,
                cluster_id: c.id,
                status: NodeStatus::InCreation,
                worker: w.hostname.clone(),
                node_address: p
                    .get("node_addr")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                mgmt_ip: w.mgmt_ip().to_string(),
                data_ips: data_ips(w, &names),
                socket,
                rpc_port: c.params.rpc_base_port + socket as u16,
                lvol_subsys_port: 9090 + socket as u16,
                hublvol_port: 9030 + socket as u16,
                nvmf_port: c.params.nvmf_base_port + socket as u16,
                host_nqn: format!("nqn.2014-08.org.nvmexpress:uuid:{id}"),
                cpu_total: w.cpus,
                cpu_spdk: c.params.spdk_vcpu_count.min(w.cpus / per).max(1),
                memory: w.memory / per as u64,
                hugepage_memory: hugepages,
                lvols_max: c.params.max_subsys.max(1),
                snapshots_max: max_snapshots,
                online_since_ms: None,
                failure_domain,
                secondary_node_id: None,
                auto_restart_disabled: false,
                lvstore: false,
                seq_in_cluster: existing + socket,
                site: p
                    .get("site")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            },
        );
        ids.push(id);
    }
    for (i, d) in w.devices.iter().enumerate() {
        let node = ids[i % ids.len()];
        let did = st.uuid();
        let seq = st.seq();
        let order =
            st.t.devices
                .values()
                .filter(|x| x.cluster_id == c.id)
                .count() as u32;
        st.t.devices.insert(
            did.to_string(),
            DeviceRec {
                id: did,
                seq,
                cluster_id: c.id,
                node_id: node,
                model: d.model.clone(),
                serial: d.serial.clone(),
                pcie: d.pcie.clone(),
                size: d.size,
                status: DeviceStatus::New,
                io_error: false,
                order,
            },
        );
    }
    ids
}

fn node_removal(st: &mut St<'_>, id: &str, task: &TaskRec, step: u32) {
    let tm = st.sim.timings().clone();
    let Some(node) = task.node_id else {
        return done(st, id, "Done");
    };
    match step {
        1 => {
            set_node(st, node, NodeStatus::InShutdown);
            wait(st, id, tm.node_shutdown_ms, 2)
        }
        2 => {
            set_node(st, node, NodeStatus::Offline);
            wait(st, id, tm.node_removal_ms, 3)
        }
        _ => {
            set_devices(
                st,
                node,
                &[
                    DeviceStatus::Online,
                    DeviceStatus::Unavailable,
                    DeviceStatus::New,
                ],
                DeviceStatus::Removed,
            );
            set_node(st, node, NodeStatus::Removed);
            done(st, id, "Done")
        }
    }
}

fn advance_migrations(st: &mut St<'_>) -> bool {
    let due: Vec<MigrationRec> =
        st.t.migrations
            .values()
            .filter(|m| m.active() && m.phase != "pre_created" && m.next_ms <= st.now)
            .cloned()
            .collect();
    let phase_ms = st.sim.timings().migration_phase_ms;
    let progressed = !due.is_empty();
    for m in due {
        let target_up =
            st.t.nodes
                .get(&m.target_node.to_string())
                .is_some_and(|n| n.status == NodeStatus::Online);
        let key = m.id.to_string();
        let now = st.now;
        let next_phase = if m.phase == "cleanup_target" {
            None
        } else if m.canceled || !target_up {
            Some("cleanup_target")
        } else {
            match (m.batch, m.phase.as_str()) {
                (false, "snap_copy") => Some("lvol_migrate"),
                (false, "lvol_migrate") => Some("cleanup_source"),
                (true, "snap_copy") => Some("intermediate"),
                (true, "intermediate") => Some("batch_migrate"),
                (true, "batch_migrate") => Some("cleanup_source"),
                (_, "cleanup_source") => Some("completed"),
                _ => Some("completed"),
            }
        };
        match next_phase {
            Some("completed") => {
                for v in &m.members {
                    if let Some(x) = st.t.volumes.get_mut(&v.to_string()) {
                        x.node_id = m.target_node;
                        x.secondary_ids.retain(|s| *s != m.target_node);
                    }
                }
                if let Some(x) = st.t.migrations.get_mut(&key) {
                    x.phase = "completed".into();
                    x.status = "done".into();
                    x.snaps_migrated = x.snaps_total;
                    x.completed_at = now / 1000;
                }
            }
            Some(p) => {
                if let Some(x) = st.t.migrations.get_mut(&key) {
                    if p == "cleanup_target" && !m.canceled {
                        x.error_message = "target node is not online".into();
                    }
                    x.phase = p.into();
                    x.next_ms = now + phase_ms;
                }
            }
            None => {
                if let Some(x) = st.t.migrations.get_mut(&key) {
                    x.status = if m.canceled { "cancelled" } else { "failed" }.into();
                    x.completed_at = now / 1000;
                }
            }
        }
        // Let the mirroring task notice the new phase at once.
        if let Some(t) = m.task_id
            && let Some(tk) = st.t.tasks.get_mut(&t.to_string())
        {
            tk.next_ms = now;
        }
    }
    progressed
}

/// Make sure the volume's replica exists on the target cluster.
fn ensure_replica(st: &mut St<'_>, vid: Uuid) -> Result<Uuid, String> {
    let r =
        st.t.replications
            .get(&vid.to_string())
            .cloned()
            .ok_or("no relationship")?;
    if let Some(t) = r.target_lvol
        && st.t.volumes.contains(&t.to_string())
    {
        return Ok(t);
    }
    let src =
        st.t.volumes
            .get(&vid.to_string())
            .cloned()
            .ok_or("source volume gone")?;
    let tc =
        st.t.clusters
            .get(&r.target_cluster.to_string())
            .cloned()
            .ok_or("target cluster gone")?;
    let tpool = r
        .target_pool
        .or_else(|| {
            render::sorted(st.t.pools.values().filter(|p| p.cluster_id == tc.id), |p| {
                p.seq
            })
            .first()
            .map(|p| p.id)
        })
        .ok_or("the target cluster has no pool")?;
    let node = render::sorted(
        st.t.nodes
            .values()
            .filter(|n| n.cluster_id == tc.id && n.status == NodeStatus::Online && n.lvstore),
        |n| n.seq,
    )
    .first()
    .map(|n| n.id)
    .ok_or("the target cluster has no online node")?;
    let id = st.uuid();
    let seq = st.seq();
    let blobid = st.below(1 << 20);
    let mut rec = src.clone();
    rec.id = id;
    rec.seq = seq;
    rec.cluster_id = tc.id;
    rec.pool_id = tpool;
    rec.node_id = node;
    rec.secondary_ids = Vec::new();
    rec.nqn = format!("{}:lvol:{id}", tc.nqn);
    rec.ns_id = 1;
    rec.blobid = blobid;
    rec.allowed_hosts = Vec::new();
    rec.cloned_from = None;
    rec.replication_policy = None;
    rec.do_replicate = false;
    rec.created_ms = st.now;
    st.t.volumes.insert(id.to_string(), rec);
    if let Some(x) = st.t.replications.get_mut(&vid.to_string()) {
        x.target_lvol = Some(id);
    }
    Ok(id)
}

/// The cluster-status monitor (§6.1): derive active / degraded / suspended from how many
/// hosts are affected, against the fault tolerance `distr_npcs`.
fn monitor(st: &mut St<'_>) {
    let clusters: Vec<ClusterRec> = st.t.clusters.values().cloned().collect();
    for c in clusters {
        if !matches!(
            c.status,
            ClusterStatus::Active | ClusterStatus::Degraded | ClusterStatus::Suspended
        ) {
            continue;
        }
        let nodes: Vec<NodeRec> = cluster_nodes(st, c.id)
            .into_iter()
            .filter(|n| n.status != NodeStatus::Removed)
            .collect();
        if nodes.is_empty() {
            continue;
        }
        let k = c.params.distr_npcs as usize;
        let n = c.params.distr_ndcs as usize;
        let mut affected = std::collections::BTreeSet::new();
        let mut online_devices = 0usize;
        for node in &nodes {
            let devs: Vec<&DeviceRec> =
                st.t.devices
                    .values()
                    .filter(|d| d.node_id == node.id)
                    .collect();
            let online = devs
                .iter()
                .filter(|d| d.status == DeviceStatus::Online)
                .count();
            online_devices += online;
            let exempt = matches!(node.status, NodeStatus::Down | NodeStatus::Suspended);
            if exempt {
                continue;
            }
            if node.status != NodeStatus::Online
                || online == 0
                || devs.iter().any(|d| d.status == DeviceStatus::Unavailable)
            {
                affected.insert(node.mgmt_ip.clone());
            }
        }
        let all_online = nodes.iter().all(|n| n.status == NodeStatus::Online);
        let derived = if affected.len() > k || online_devices < n + k {
            ClusterStatus::Suspended
        } else if !affected.is_empty() {
            ClusterStatus::Degraded
        } else {
            ClusterStatus::Active
        };
        let next = match (c.status, derived) {
            // Back from suspended only by re-activation, once every node is online.
            (ClusterStatus::Suspended, ClusterStatus::Active | ClusterStatus::Degraded) => {
                if all_online && c.activated {
                    ClusterStatus::Active
                } else {
                    ClusterStatus::Suspended
                }
            }
            (_, d) => d,
        };
        set_cluster(st, c.id, next);
    }
}

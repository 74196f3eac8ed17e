//! Records → the DTOs the control plane answers with.

use serde::Serialize;
use serde_json::{Map, Value, json};
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use crate::model::*;
use crate::store::Tables;

fn iso_duration(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    let (d, h, m, sec) = (s / 86400, (s % 86400) / 3600, (s % 3600) / 60, s % 60);
    if d > 0 {
        format!("P{d}DT{h}H{m}M{sec}S")
    } else {
        format!("PT{h}H{m}M{sec}S")
    }
}

pub fn iso_time(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

pub fn sorted<'a, T: 'a>(it: impl Iterator<Item = &'a T>, seq: impl Fn(&T) -> u64) -> Vec<&'a T> {
    let mut v: Vec<&T> = it.collect();
    v.sort_by_key(|r| seq(r));
    v
}

/// Records in creation order, each rendered: what a list route answers.
pub fn list<'a, T: 'a, D: Serialize>(
    records: impl Iterator<Item = &'a T>,
    seq: impl Fn(&T) -> u64,
    dto: impl FnMut(&'a T) -> D,
) -> Value {
    json!(
        sorted(records, seq)
            .into_iter()
            .map(dto)
            .collect::<Vec<_>>()
    )
}

fn cap(total: u64, prov: u64, used: u64, now: i64) -> CapacityStat {
    let free = total.saturating_sub(used);
    CapacityStat {
        date: now / 1000,
        size_total: total as i64,
        size_prov: prov as i64,
        size_used: used as i64,
        size_free: free as i64,
        size_util: if total == 0 {
            0
        } else {
            ((used as f64 / total as f64) * 100.0) as i64
        },
    }
}

/// One I/O statistics sample: sbsim moves no data, so every figure is 0.
pub fn iostat_sample(now: i64) -> Value {
    json!({
        "date": now / 1000,
        "read_bytes": 0, "read_bytes_ps": 0, "read_io_ps": 0, "read_latency_ps": 0,
        "write_bytes": 0, "write_bytes_ps": 0, "write_io_ps": 0, "write_latency_ps": 0,
        "size_total": 0, "size_used": 0,
    })
}

pub fn volume_used(v: &VolumeRec) -> u64 {
    crate::stats::volume_used(v)
}

/// A node's devices, in no particular order.
pub fn node_devices(t: &Tables, node: Uuid) -> impl Iterator<Item = &DeviceRec> {
    t.devices.values().filter(move |d| d.node_id == node)
}

pub fn is_re_balancing(t: &Tables, c: &ClusterRec, now: i64) -> bool {
    now < c.rebalancing_until_ms
        || t.tasks.values().any(|tk| {
            tk.cluster_id == c.id
                && !tk.canceled
                && tk.status != TaskStatus::Done
                && (tk.function_name.contains("device_migration")
                    || tk.function_name.starts_with("balancing_on")
                    || tk.function_name.starts_with("lvol_")
                        && tk.function_name.ends_with("migration"))
        })
}

pub fn cluster_capacity(t: &Tables, c: &ClusterRec, now: i64) -> CapacityStat {
    let total: u64 = t
        .devices
        .values()
        .filter(|d| d.cluster_id == c.id && d.status == DeviceStatus::Online)
        .map(|d| d.size)
        .sum();
    let vols = t
        .volumes
        .values()
        .filter(|v| v.cluster_id == c.id && v.status != VolumeStatus::Deleted);
    let (prov, used) = vols.fold((0, 0), |(p, u), v| (p + v.size, u + volume_used(v)));
    cap(total, prov, used, now)
}

pub fn cluster(t: &Tables, c: &ClusterRec, now: i64) -> Cluster {
    let p = &c.params;
    Cluster {
        id: c.id,
        name: Some(p.name.clone()),
        nqn: c.nqn.clone(),
        status: c.status,
        is_re_balancing: is_re_balancing(t, c, now),
        block_size: p.blk_size,
        distr_ndcs: p.distr_ndcs,
        distr_npcs: p.distr_npcs,
        ha: p.ha_type == HaType::Ha,
        utilization_critical: p.cap_crit,
        utilization_warning: p.cap_warn,
        provisioned_capacity_critical: p.prov_cap_crit,
        provisioned_capacity_warning: p.prov_cap_warn,
        node_affinity: p.enable_node_affinity,
        anti_affinity: p.strict_node_anti_affinity,
        enable_failure_domain: p.enable_failure_domain,
        secret: c.secret.clone().into(),
        tls_enabled: false,
        max_fault_tolerance: p.distr_npcs,
        backup_enabled: p.backup_config.is_some(),
        sync_replication: p.sync_replication,
        capacity: cluster_capacity(t, c, now),
    }
}

pub fn node(t: &Tables, n: &NodeRec, now: i64) -> StorageNode {
    let devs: Vec<&DeviceRec> = node_devices(t, n.id).collect();
    let online = devs
        .iter()
        .filter(|d| d.status == DeviceStatus::Online)
        .count() as u32;
    let total: u64 = devs
        .iter()
        .filter(|d| d.status == DeviceStatus::Online)
        .map(|d| d.size)
        .sum();
    let vols: Vec<&VolumeRec> = t
        .volumes
        .values()
        .filter(|v| v.node_id == n.id && v.status != VolumeStatus::Deleted)
        .collect();
    let prov = vols.iter().map(|v| v.size).sum();
    let used = vols.iter().map(|v| volume_used(v)).sum();
    let up = matches!(n.status, NodeStatus::Online | NodeStatus::Down);
    StorageNode {
        id: n.id,
        cluster_id: n.cluster_id,
        secondary_node_id: n.secondary_node_id,
        status: n.status,
        uptime: match (up, n.online_since_ms) {
            (true, Some(s)) => Some(iso_duration(now - s)),
            _ => None,
        },
        hostname: n.worker.clone(),
        host_nqn: n.host_nqn.clone(),
        cpu_total_count: n.cpu_total,
        cpu_spdk_count: n.cpu_spdk,
        cpu_poller_count: n.cpu_spdk.saturating_sub(1).max(1),
        memory: n.memory,
        hugepage_memory: n.hugepage_memory,
        spdk_mem: n.hugepage_memory,
        lvols: vols.len() as u32,
        lvols_max: n.lvols_max,
        snapshots_max: n.snapshots_max,
        rpc_port: n.rpc_port,
        lvol_subsys_port: n.lvol_subsys_port,
        hublvol_port: n.hublvol_port,
        nvmf_port: n.nvmf_port,
        mgmt_ip: n.mgmt_ip.clone(),
        health_check: up.then_some(true),
        device_count: devs.len() as u32,
        online_device_count: online,
        failure_domain: n.failure_domain,
        site: Some(n.site.clone()).filter(|s| !s.is_empty()),
        capacity: cap(total, prov, used, now),
    }
}

pub fn device(t: &Tables, d: &DeviceRec, now: i64) -> Device {
    let node = t.nodes.get(&d.node_id.to_string());
    let up = node.is_some_and(|n| matches!(n.status, NodeStatus::Online | NodeStatus::Down));
    Device {
        id: d.id,
        cluster_id: d.cluster_id,
        storage_node_id: d.node_id,
        model: d.model.clone(),
        serial_number: d.serial.clone(),
        nvme_controller: format!("nvme_{}", d.order),
        pcie_address: d.pcie.clone(),
        status: d.status,
        health_check: up.then_some(d.status == DeviceStatus::Online && !d.io_error),
        retries_exhausted: false,
        size: d.size,
        cluster_device_order: d.order,
        io_error: d.io_error,
        is_partition: false,
        nvmf_ips: node
            .map(|n| n.data_ips.iter().map(|(_, ip)| ip.clone()).collect())
            .unwrap_or_default(),
        nvmf_nqn: String::new(),
        nvmf_port: 0,
        capacity: cap(
            if d.status == DeviceStatus::Online {
                d.size
            } else {
                0
            },
            0,
            crate::stats::device_used(t, d),
            now,
        ),
    }
}

pub fn task(tk: &TaskRec) -> Task {
    Task {
        id: tk.id,
        cluster_id: tk.cluster_id,
        device_id: tk.device_id,
        storage_node_id: tk.node_id,
        status: tk.status,
        canceled: tk.canceled,
        function_name: tk.function_name.clone(),
        function_params: tk.params.clone(),
        function_result: tk.result.clone(),
        max_retry: (tk.max_retry >= 0).then_some(tk.max_retry as u32),
        retry: tk.retry,
    }
}

pub fn pool(t: &Tables, p: &PoolRec, now: i64) -> Pool {
    let vols = t
        .volumes
        .values()
        .filter(|v| v.pool_id == p.id && v.status != VolumeStatus::Deleted);
    let (prov, used) = vols.fold((0, 0), |(a, b), v| (a + v.size, b + volume_used(v)));
    Pool {
        id: p.id,
        cluster_id: p.cluster_id,
        name: p.name.clone(),
        status: p.status,
        max_size: p.max_size,
        volume_max_size: p.volume_max_size,
        max_rw_iops: p.max_rw_iops,
        max_rw_mbytes: p.max_rw_mbytes,
        max_r_mbytes: p.max_r_mbytes,
        max_w_mbytes: p.max_w_mbytes,
        capacity: Some(cap(p.max_size, prov, used, now)),
        dhchap: p.dhchap,
        allowed_hosts: p.allowed_hosts.clone(),
    }
}

pub fn node_url(base: &str, cluster: Uuid, node: Uuid) -> String {
    format!("{base}/api/v2/clusters/{cluster}/storage-nodes/{node}/")
}

pub fn volume(t: &Tables, v: &VolumeRec, base: &str, detail: bool, now: i64) -> Volume {
    let pool = t.pools.get(&v.pool_id.to_string());
    let node = t.nodes.get(&v.node_id.to_string());
    let migrating = t
        .migrations
        .values()
        .any(|m| m.active() && (m.lvol_id == v.id || m.members.contains(&v.id)));
    let mut nodes = vec![node_url(base, v.cluster_id, v.node_id)];
    nodes.extend(
        v.secondary_ids
            .iter()
            .map(|s| node_url(base, v.cluster_id, *s)),
    );
    let rep_info = detail.then(|| {
        let mut m = Map::new();
        if let Some(r) = t.replications.get(&v.id.to_string()) {
            m.insert("replication_id".into(), json!(r.id));
            m.insert("state".into(), json!(r.state));
            m.insert("target_cluster_id".into(), json!(r.target_cluster));
        }
        m
    });
    Volume {
        id: v.id,
        cluster_id: v.cluster_id,
        storage_node_id: v.node_id,
        name: v.name.clone(),
        status: v.status,
        health_check: v.status == VolumeStatus::Online,
        io_error: false,
        migrating,
        nqn: v.nqn.clone(),
        hostname: node.map(|n| n.worker.clone()).unwrap_or_default(),
        priority_class: v.priority_class,
        namespace: v.namespace.clone(),
        fabric: v.fabric.clone(),
        nodes,
        port: node.map(|n| n.lvol_subsys_port).unwrap_or(0),
        size: v.size,
        ndcs: v.ndcs,
        npcs: v.npcs,
        pool_uuid: v.pool_id.to_string(),
        pool_name: pool.map(|p| p.name.clone()).unwrap_or_default(),
        pvc_name: v.pvc_name.clone(),
        snapshot_name: v.snapshot_name.clone(),
        blobid: v.blobid,
        ns_id: if v.status == VolumeStatus::InCreation {
            0
        } else {
            v.ns_id
        },
        cloned_from: v.cloned_from.and_then(|s| {
            t.snapshots.get(&s.to_string()).map(|sr| {
                format!(
                    "{base}/api/v2/clusters/{}/storage-pools/{}/snapshots/{}/",
                    sr.cluster_id, sr.pool_id, sr.id
                )
            })
        }),
        high_availability: v.ha,
        do_replicate: v.do_replicate,
        max_namespace_per_subsys: v.max_namespace_per_subsys,
        max_rw_iops: v.max_rw_iops,
        max_rw_mbytes: v.max_rw_mbytes,
        max_r_mbytes: v.max_r_mbytes,
        max_w_mbytes: v.max_w_mbytes,
        allowed_hosts: v.allowed_hosts.iter().map(|h| h.nqn.clone()).collect(),
        policy: String::new(),
        capacity: if detail {
            cap(v.size, v.size, volume_used(v), now)
        } else {
            CapacityStat::default()
        },
        rep_info,
        from_source: true,
    }
}

pub fn snapshot(t: &Tables, s: &SnapshotRec, base: &str) -> Snapshot {
    let lvol = t.volumes.get(&s.volume_id.to_string()).map(|v| {
        format!(
            "{base}/api/v2/clusters/{}/storage-pools/{}/volumes/{}/",
            v.cluster_id, v.pool_id, v.id
        )
    });
    Snapshot {
        id: s.id,
        name: s.name.clone(),
        status: s.status,
        health_check: s.status == SnapshotStatus::Online,
        size: s.size,
        used_size: s.used_size,
        migrating: false,
        lvol,
        created_at: iso_time(s.created_ms),
    }
}

/// The NVMe/TCP paths of a volume on its nodes (primary first), one per data NIC.
pub fn connect_entries(
    t: &Tables,
    v: &VolumeRec,
    host: Option<&HostEntry>,
    nodes: &[Uuid],
    ctrl_loss_tmo: i64,
    with_ns: bool,
) -> Vec<ConnectEntry> {
    let qpairs = 3;
    let mut out = Vec::new();
    for node_id in nodes {
        let Some(n) = t.nodes.get(&node_id.to_string()) else {
            continue;
        };
        for (iface, ip) in &n.data_ips {
            let _ = iface;
            let mut cmd = format!(
                "sudo nvme connect --reconnect-delay=2 --ctrl-loss-tmo={ctrl_loss_tmo} --nr-io-queues={qpairs} --keep-alive-tmo=4 --transport=tcp --traddr={ip} --trsvcid={} --nqn={}",
                n.lvol_subsys_port, v.nqn
            );
            if let Some(h) = host {
                cmd.push_str(&format!(
                    " --hostnqn={} --dhchap-secret={} --dhchap-ctrl-secret={}",
                    h.nqn, h.dhchap_key, h.dhchap_ctrlr_key
                ));
            }
            out.push(ConnectEntry {
                transport: v.fabric.clone(),
                ip: ip.clone(),
                port: n.lvol_subsys_port,
                nqn: v.nqn.clone(),
                reconnect_delay: 2,
                ctrl_loss_tmo,
                fast_io_fail_tmo: 8,
                nr_io_queues: qpairs,
                keep_alive_tmo: if v.fabric == "tcp" { 4 } else { 7 },
                host_iface: String::new(),
                tls: false,
                connect: cmd,
                ns_id: with_ns.then_some(v.ns_id),
                allowed_hosts: v.allowed_hosts.iter().map(|h| h.nqn.clone()).collect(),
                target_lvol_id: None,
            });
        }
    }
    out
}

pub fn migration(t: &Tables, m: &MigrationRec) -> Value {
    let connect = t
        .volumes
        .get(&m.lvol_id.to_string())
        .map(|v| {
            if m.phase == "pre_created" {
                connect_entries(t, v, None, &[m.target_node], m.ctrl_loss_tmo, false)
            } else {
                Vec::new()
            }
        })
        .unwrap_or_default();
    if m.batch {
        json!({
            "id": m.id,
            "cluster_id": m.cluster_id.to_string(),
            "source_node_id": m.source_node.to_string(),
            "target_node_id": m.target_node.to_string(),
            "target_nqn": m.nqn,
            "phase": m.phase,
            "status": m.status,
            "member_count": m.members.len(),
            "error_message": m.error_message,
            "connect_strings": connect,
        })
    } else {
        json!({
            "id": m.id,
            "lvol_id": m.lvol_id.to_string(),
            "source_node_id": m.source_node.to_string(),
            "target_node_id": m.target_node.to_string(),
            "phase": m.phase,
            "status": m.status,
            "snaps_total": m.snaps_total,
            "snaps_migrated": m.snaps_migrated,
            "intermediate_snap_rounds": 0,
            "max_intermediate_snap_rounds": 3,
            "retry_count": m.retry_count,
            "max_retries": m.max_retries,
            "error_message": m.error_message,
            "started_at": m.started_at,
            "completed_at": m.completed_at,
            "connect_strings": connect,
        })
    }
}

pub fn target(r: &TargetRec) -> ReplicationTarget {
    ReplicationTarget {
        id: r.id,
        cluster_id: r.cluster_id,
        target_name: r.target_name.clone(),
        target_cluster_id: r.target_cluster_id,
        target_pool_uuid: r.target_pool,
        timeout_sec: r.timeout_sec,
        status: r.status,
    }
}

pub fn policy(t: &Tables, r: &PolicyRec) -> ReplicationPolicy {
    let group = t
        .groups
        .values()
        .filter(|g| g.policy_id == Some(r.id))
        .min_by_key(|g| g.seq);
    ReplicationPolicy {
        consistency_group: group.is_some(),
        group_lvs_name: group.map(|g| g.lvs_name.clone()),
        group_node_id: group.map(|g| g.node_id),
        id: r.id,
        cluster_id: r.cluster_id,
        policy_name: r.policy_name.clone(),
        target_id: r.target_id,
        interval_min: r.interval_min,
        mode: r.mode,
        keep_replicated: r.keep_replicated,
        status: r.status,
    }
}

pub fn relationship(t: &Tables, r: &ReplicationRec, viewer: Uuid) -> ReplicationRelationship {
    let target = r.target_lvol.and_then(|id| t.volumes.get(&id.to_string()));
    ReplicationRelationship {
        replication_id: r.id,
        source_lvol_id: Some(r.source_lvol),
        target_lvol_id: r.target_lvol,
        source_cluster_id: Some(r.cluster_id),
        target_cluster_id: Some(r.target_cluster),
        mode: r.mode,
        state: r.state,
        direction: r.direction,
        target_nqn: target.map(|v| v.nqn.clone()).unwrap_or_default(),
        target_ns_id: target.map(|v| v.ns_id).unwrap_or(0),
        is_source: viewer == r.source_lvol,
        target_pool_id: None,
        active_lvol_id: None,
    }
}

/// The relationship as the cluster-scoped lookup answers it: with the target's pool and
/// the volume serving its chain.
pub fn relationship_lookup(
    t: &Tables,
    r: &ReplicationRec,
    viewer: Uuid,
) -> ReplicationRelationship {
    let mut dto = relationship(t, r, viewer);
    dto.target_pool_id = r
        .target_lvol
        .and_then(|id| t.volumes.get(&id.to_string()))
        .map(|v| v.pool_id)
        .or(r.target_pool);
    dto.active_lvol_id = Some(active_lvol(t, r));
    dto
}

/// Whether the target side of a relationship is the one serving: failed over, fed back to
/// the source, or a finished migration cutover towards the target.
pub fn target_serves(r: &ReplicationRec) -> bool {
    r.target_lvol.is_some()
        && match (r.state, r.direction) {
            (ReplicationState::FailedOver, _) => true,
            (ReplicationState::CutoverDone, d) => d == ReplicationDirection::ToTarget,
            (_, d) => d == ReplicationDirection::ToSource,
        }
}

/// The volume serving the chain of relationships `r` belongs to: follow each serving
/// target into the relationship it is the source of. On a loop the walk stops before
/// revisiting a relationship and answers the last volume it reached.
pub fn active_lvol(t: &Tables, r: &ReplicationRec) -> Uuid {
    let mut seen = std::collections::HashSet::new();
    let mut cur = r.clone();
    loop {
        seen.insert(cur.id);
        let Some(tv) = r_target(&cur) else {
            return cur.source_lvol;
        };
        match t.replications.get(&tv.to_string()) {
            Some(next) if !seen.contains(&next.id) => cur = next.clone(),
            _ => return tv,
        }
    }
}

fn r_target(r: &ReplicationRec) -> Option<Uuid> {
    target_serves(r).then_some(r.target_lvol).flatten()
}

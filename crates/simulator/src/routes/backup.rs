//! Backups of a cluster's volumes into its object store: take one of a snapshot (and of
//! every older snapshot of its volume not yet backed up, so the chain is whole), list and
//! read them, restore one into a new volume, delete a volume's. The upload and the
//! restore run in the background on sbsim's clock (`Timings::backup_ms`, `restore_ms`);
//! with volume files, a backup keeps its snapshot's data and a restore writes it into
//! the new volume. Policies are kept and attached to pools and volumes, with the
//! control plane's checks; they do not yet schedule or expire backups. Export, import and
//! source switching keep nothing yet: their lists are empty.

use serde_json::json;
use simplyblock_controlplane::routes as api;
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use super::lookup::{cluster, volume};
use super::request::{ApiReq, body};
use super::volume_create::name_taken;
use crate::backups::{SERVICE_INTERVAL_MS, age_seconds, backup_one, live, schedule_tiers};
use crate::model::*;
use crate::render;
use crate::reply::{ApiError, ApiResult, Reply};
use crate::sim::St;

pub fn handle(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let c = req.id("cluster_id");
    match (req.method.as_str(), req.route.as_str()) {
        ("GET", api::BACKUPS) => Ok(Reply::ok(listed(st, |b| b.cluster_id == c))),
        ("POST", api::BACKUPS) => {
            let b: BackupCreate = body(st.sim, req)?;
            let id = take(st, c, &b.snapshot_id)?;
            Ok(Reply::empty(201).with_location(format!("/api/v2{}", api::backup(c, id))))
        }
        ("GET", api::BACKUP) => {
            let b = backup_of(st.t, c, req.id("backup_id"))?;
            Ok(Reply::ok(json!(dto(b))))
        }
        ("POST", api::BACKUP_RESTORE) => {
            let b: BackupRestore = body(st.sim, req)?;
            let volume = restore(st, c, &b)?;
            Ok(Reply::json(202, json!(RestoreStarted { lvol_id: volume })))
        }
        ("GET", api::VOLUME_BACKUPS) => {
            let v = req.id("volume_id");
            Ok(Reply::ok(listed(st, |b| {
                b.cluster_id == c && b.volume_id == v
            })))
        }
        ("DELETE", api::VOLUME_BACKUPS) => {
            volume(st.t, req.id("pool_id"), req.id("volume_id"))?;
            delete_all(st, c, req.id("volume_id"))
        }
        // Deprecated: every backup of a volume, by the volume's id alone.
        ("DELETE", "/clusters/{cluster_id}/backups/{volume_id}") => {
            let v = req.id("volume_id");
            match st.t.volumes.get(&v.to_string()) {
                Some(rec) if rec.cluster_id == c => delete_all(st, c, v),
                _ => Err(ApiError::not_found(format!("LVol {v} not found"))),
            }
        }
        ("GET", api::BACKUP_POLICIES) => Ok(Reply::ok(render::list(
            st.t.backup_policies.values().filter(|p| p.cluster_id == c),
            |p| p.seq,
            policy_dto,
        ))),
        ("POST", api::BACKUP_POLICIES) => {
            let b: BackupPolicyCreate = body(st.sim, req)?;
            let id = create_policy(st, c, &b)?;
            Ok(Reply::empty(201).with_header("x-policy-id", id.to_string()))
        }
        ("DELETE", api::BACKUP_POLICY) => {
            let id = policy_of(st.t, c, req.id("policy_id"))?.id;
            st.t.backup_policies.remove(&id.to_string());
            let attached: Vec<String> =
                st.t.backup_attachments
                    .values()
                    .filter(|a| a.policy_id == id)
                    .map(|a| a.id.to_string())
                    .collect();
            for a in attached {
                st.t.backup_attachments.remove(&a);
            }
            Ok(Reply::empty(204))
        }
        ("POST", api::BACKUP_POLICY_ATTACH) => {
            let policy = policy_of(st.t, c, req.id("policy_id"))?.id;
            let b: BackupPolicyTarget = body(st.sim, req)?;
            let target = attach_target(st.t, c, &b)?;
            let existing = st.t.backup_attachments.values().find(|a| {
                a.policy_id == policy && a.target_type == b.target_type && a.target_id == target
            });
            let id = match existing {
                Some(a) => a.id,
                None => {
                    let id = st.uuid();
                    let seq = st.seq();
                    st.t.backup_attachments.insert(
                        id.to_string(),
                        BackupAttachmentRec {
                            id,
                            seq,
                            policy_id: policy,
                            target_type: b.target_type.clone(),
                            target_id: target,
                        },
                    );
                    id
                }
            };
            Ok(Reply::json(
                201,
                json!(PolicyAttached { attachment_id: id }),
            ))
        }
        ("POST", api::BACKUP_POLICY_DETACH) => {
            let policy = policy_of(st.t, c, req.id("policy_id"))?.id;
            let b: BackupPolicyTarget = body(st.sim, req)?;
            let target = attach_target(st.t, c, &b)?;
            let found = st
                .t
                .backup_attachments
                .values()
                .find(|a| {
                    a.policy_id == policy && a.target_type == b.target_type && a.target_id == target
                })
                .map(|a| a.id.to_string())
                .ok_or_else(|| ApiError::bad_request("Attachment not found"))?;
            st.t.backup_attachments.remove(&found);
            Ok(Reply::empty(204))
        }
        // Kept nothing of yet: sources, export.
        ("GET", "/clusters/{cluster_id}/backups/sources") => Ok(Reply::ok(json!([]))),
        ("GET", "/clusters/{cluster_id}/backups/export") => match req.query.get("backup_id") {
            Some(b) => Err(ApiError::not_found(format!("Backup {b} not found"))),
            None => Ok(Reply::ok(json!([]))),
        },
        _ => Err(req.unsimulated()),
    }
}

/// The backups `keep` selects, newest first.
fn listed(st: &St<'_>, keep: impl Fn(&BackupRec) -> bool) -> serde_json::Value {
    let mut found: Vec<&BackupRec> = st.t.backups.values().filter(|b| keep(b)).collect();
    found.sort_by_key(|b| std::cmp::Reverse((b.created_ms, b.seq)));
    json!(found.into_iter().map(dto).collect::<Vec<_>>())
}

/// A backup of cluster `c`: 404 as the lookup answers it, quoted when unknown, bare when
/// it is another cluster's.
fn backup_of(t: &crate::store::Tables, c: Uuid, id: Uuid) -> Result<&BackupRec, ApiError> {
    match t.backups.get(&id.to_string()) {
        Some(b) if b.cluster_id == c => Ok(b),
        Some(_) => Err(ApiError::not_found(format!("Backup {id} not found"))),
        None => Err(ApiError::key_error(format!("Backup {id} not found"))),
    }
}

pub fn dto(b: &BackupRec) -> Backup {
    Backup {
        id: b.id,
        s3_id: b.s3_id,
        lvol_id: b.volume_id.to_string(),
        lvol_name: b.volume_name.clone(),
        snapshot_id: b.snapshot_id.to_string(),
        snapshot_name: b.snapshot_name.clone(),
        node_id: b.node_id.to_string(),
        status: b.status,
        prev_backup_id: b.prev.map(|p| p.to_string()).unwrap_or_default(),
        size: b.size,
        allowed_hosts: b
            .allowed_hosts
            .iter()
            .map(|h| {
                let mut m = serde_json::Map::new();
                m.insert("nqn".into(), json!(h.nqn));
                m.insert("dhchap_key".into(), json!(h.dhchap_key));
                m.insert("dhchap_ctrlr_key".into(), json!(h.dhchap_ctrlr_key));
                m
            })
            .collect(),
        created_at: b.created_ms / 1000,
        completed_at: b.completed_ms.map_or(0, |t| t / 1000),
        source_cluster_id: String::new(),
    }
}

fn policy_dto(p: &BackupPolicyRec) -> BackupPolicy {
    BackupPolicy {
        id: p.id,
        name: p.name.clone(),
        max_versions: p.max_versions,
        max_age: p.max_age.clone(),
        backup_schedule: p.schedule.clone(),
        status: ActiveStatus::Active,
    }
}

fn policy_of(t: &crate::store::Tables, c: Uuid, id: Uuid) -> Result<&BackupPolicyRec, ApiError> {
    match t.backup_policies.get(&id.to_string()) {
        Some(p) if p.cluster_id == c => Ok(p),
        Some(_) => Err(ApiError::not_found(format!("BackupPolicy {id} not found"))),
        None => Err(ApiError::key_error(format!("BackupPolicy {id} not found"))),
    }
}

/// The pool or volume of cluster `c` an attachment names.
fn attach_target(
    t: &crate::store::Tables,
    c: Uuid,
    b: &BackupPolicyTarget,
) -> Result<Uuid, ApiError> {
    let kind = match b.target_type.as_str() {
        "pool" => "Pool",
        "lvol" => "LVol",
        other => {
            return Err(ApiError::bad_request(format!(
                "Invalid target_type: {other}. Use 'pool' or 'lvol'"
            )));
        }
    };
    let cluster_of = |id: Uuid| match kind {
        "Pool" => t.pools.get(&id.to_string()).map(|p| p.cluster_id),
        _ => t.volumes.get(&id.to_string()).map(|v| v.cluster_id),
    };
    let unknown = || ApiError::key_error(format!("{kind} {} not found", b.target_id));
    let id: Uuid = b.target_id.parse().map_err(|_| unknown())?;
    match cluster_of(id) {
        Some(owner) if owner == c => Ok(id),
        Some(_) => Err(ApiError::not_found(format!("{kind} {id} not found"))),
        None => Err(unknown()),
    }
}

/// Creates a policy after the control plane's checks, every message as it words it.
fn create_policy(st: &mut St<'_>, c: Uuid, b: &BackupPolicyCreate) -> Result<Uuid, ApiError> {
    cluster(st.t, c)?;
    let age = b.age.clone().unwrap_or_default();
    let schedule = b.schedule.clone().unwrap_or_default();
    let versions = b.versions.unwrap_or(0);
    if !age.is_empty() && age_seconds(&age).is_none() {
        return Err(ApiError::bad_request(format!(
            "Invalid age format: {age}. Use <number><m|h|d|w> e.g. 2d, 12h, 1w"
        )));
    }
    schedule_tiers(&schedule).map_err(ApiError::bad_request)?;
    if versions <= 0 && age.is_empty() && schedule.trim().is_empty() {
        return Err(ApiError::bad_request(
            "At least one of --versions, --age, or --schedule must be specified",
        ));
    }
    if st
        .t
        .backup_policies
        .values()
        .any(|p| p.cluster_id == c && p.name == b.name)
    {
        return Err(ApiError::bad_request(format!(
            "Policy name already exists: {}",
            b.name
        )));
    }
    let id = st.uuid();
    let seq = st.seq();
    st.t.backup_policies.insert(
        id.to_string(),
        BackupPolicyRec {
            id,
            seq,
            cluster_id: c,
            name: b.name.clone(),
            max_versions: versions.max(0),
            max_age: age,
            schedule,
        },
    );
    let running =
        st.t.jobs
            .values()
            .any(|j| matches!(j.kind, JobKind::BackupPolicies { cluster } if cluster == c));
    if !running {
        st.job(JobKind::BackupPolicies { cluster: c }, SERVICE_INTERVAL_MS);
    }
    Ok(id)
}

/// Backs up snapshot `snapshot` of cluster `c`, and first every older snapshot of its
/// volume without a backup; returns the requested snapshot's backup.
fn take(st: &mut St<'_>, c: Uuid, snapshot: &str) -> Result<Uuid, ApiError> {
    let missing = || ApiError::bad_request(format!("'Snapshot {snapshot} not found'"));
    let sid: Uuid = snapshot.parse().map_err(|_| missing())?;
    let snap = match st.t.snapshots.get(&sid.to_string()) {
        Some(s) if s.cluster_id == c && !s.soft_deleted => s.clone(),
        _ => return Err(missing()),
    };
    cluster(st.t, c)?;
    let vol =
        st.t.volumes
            .get(&snap.volume_id.to_string())
            .cloned()
            .ok_or_else(|| ApiError::bad_request("Snapshot has no associated lvol"))?;
    if let Some(node) = st.t.nodes.get(&vol.node_id.to_string())
        && node.status != NodeStatus::Online
    {
        return Err(ApiError::bad_request(format!(
            "Node {} is not online (status: {})",
            node.id, node.status
        )));
    }
    let backed_up = |t: &crate::store::Tables, s: Uuid| {
        t.backups.values().any(|b| b.snapshot_id == s && live(b))
    };
    if backed_up(st.t, sid) {
        return Err(ApiError::bad_request(format!(
            "Snapshot {sid} already has a backup"
        )));
    }
    // The chain: the volume's snapshots up to this one, oldest first.
    let mut chain: Vec<SnapshotRec> =
        st.t.snapshots
            .values()
            .filter(|s| s.volume_id == vol.id && !s.soft_deleted && s.created_ms <= snap.created_ms)
            .cloned()
            .collect();
    chain.sort_by_key(|s| (s.created_ms, s.seq));
    let pending: Vec<&SnapshotRec> = chain.iter().filter(|s| !backed_up(st.t, s.id)).collect();
    let mut last = None;
    for s in pending {
        last = Some(backup_one(st, &vol, s));
    }
    last.ok_or_else(missing)
}

/// Starts a restore of `b.backup_id` into a new volume; returns it.
fn restore(st: &mut St<'_>, c: Uuid, b: &BackupRestore) -> Result<Uuid, ApiError> {
    let precondition = |m: String| ApiError::Precondition(m);
    let bid: Uuid = b
        .backup_id
        .parse()
        .map_err(|_| precondition(format!("'Backup {} not found'", b.backup_id)))?;
    let backup = match st.t.backups.get(&bid.to_string()) {
        Some(x) if x.cluster_id == c => x.clone(),
        _ => return Err(precondition(format!("'Backup {bid} not found'"))),
    };
    // Every backup of the chain must be complete.
    let mut incomplete = Vec::new();
    let mut at = Some(backup.clone());
    while let Some(x) = at {
        if x.status != BackupStatus::Completed {
            incomplete.push(x.id.to_string());
        }
        at = x
            .prev
            .and_then(|p| st.t.backups.get(&p.to_string()).cloned());
    }
    if !incomplete.is_empty() {
        incomplete.reverse();
        return Err(precondition(format!(
            "Incomplete backups in chain: {}",
            incomplete.join(", ")
        )));
    }
    let pool =
        st.t.pools
            .values()
            .find(|p| p.cluster_id == c && (p.id.to_string() == b.pool || p.name == b.pool))
            .cloned()
            .ok_or_else(|| precondition(format!("'Pool {} not found'", b.pool)))?;
    if name_taken(st.t, &b.lvol_name) {
        return Err(ApiError::Runtime(format!(
            "Failed to create restore volume: Volume {} exists",
            b.lvol_name
        )));
    }
    let node = match &b.target_node_id {
        Some(n) => {
            let nid: Uuid = n
                .parse()
                .map_err(|_| precondition(format!("'StorageNode {n} not found'")))?;
            let node =
                st.t.nodes
                    .get(&nid.to_string())
                    .cloned()
                    .ok_or_else(|| precondition(format!("'StorageNode {n} not found'")))?;
            if node.status != NodeStatus::Online {
                return Err(precondition(format!(
                    "Target node {nid} is not online (status: {})",
                    node.status
                )));
            }
            node.id
        }
        None => backup.node_id,
    };
    let template = st.t.volumes.values().find(|v| v.cluster_id == c).cloned();
    let id = st.uuid();
    let seq = st.seq();
    let blobid = st.below(1 << 20);
    let cl = cluster(st.t, c)?.clone();
    let rec = VolumeRec {
        id,
        seq,
        cluster_id: c,
        pool_id: pool.id,
        name: b.lvol_name.clone(),
        status: VolumeStatus::Restoring,
        size: backup.size,
        node_id: node,
        secondary_ids: template
            .as_ref()
            .map(|v| v.secondary_ids.clone())
            .unwrap_or_default(),
        nqn: format!("{}:lvol:{id}", cl.nqn),
        ns_id: 1,
        ha: template.as_ref().is_some_and(|v| v.ha),
        ndcs: template.as_ref().map_or(1, |v| v.ndcs),
        npcs: template.as_ref().map_or(1, |v| v.npcs),
        pvc_name: String::new(),
        namespace: String::new(),
        priority_class: 0,
        fabric: "tcp".into(),
        blobid,
        max_namespace_per_subsys: 1,
        max_rw_iops: 0,
        max_rw_mbytes: 0,
        max_r_mbytes: 0,
        max_w_mbytes: 0,
        allowed_hosts: backup.allowed_hosts.clone(),
        cloned_from: None,
        snapshot_name: String::new(),
        delete_snap_on_delete: false,
        replication_policy: None,
        do_replicate: false,
        created_ms: st.now,
        fenced: false,
    };
    st.t.volumes.insert(id.to_string(), rec);
    let pickup = st.sim.timings().task_pickup_ms;
    st.job(
        JobKind::Restore {
            backup: bid,
            volume: id,
        },
        pickup,
    );
    Ok(id)
}

/// Deletes every backup of volume `v`, and their data.
fn delete_all(st: &mut St<'_>, c: Uuid, v: Uuid) -> ApiResult {
    let gone: Vec<Uuid> =
        st.t.backups
            .values()
            .filter(|b| b.cluster_id == c && b.volume_id == v)
            .map(|b| b.id)
            .collect();
    if gone.is_empty() {
        return Err(ApiError::bad_request(format!(
            "No backups found for lvol {v}"
        )));
    }
    for id in gone {
        st.t.backups.remove(&id.to_string());
        if let Some(dir) = &st.sim.config.volume_files {
            crate::volfiles::remove_backup(dir, id);
        }
    }
    Ok(Reply::empty(204))
}

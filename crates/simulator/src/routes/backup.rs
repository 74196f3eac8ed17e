//! Backups of a cluster's volumes into its object store ([`crate::objstore`], the
//! cluster's `backup_config`): take one of a snapshot (and of every older snapshot of its
//! volume not yet backed up, so the chain is whole), list and read them, restore one into
//! a new volume, delete a volume's, export them and import another cluster's. The upload
//! and the restore run in the background on sbsim's clock (`Timings::backup_ms`,
//! `restore_ms`) and fail as the store answers. Policies are kept and attached to pools
//! and volumes, with the control plane's checks; the backup service runs them. Source
//! switching keeps nothing: only the local source exists.

use serde_json::json;
use simplyblock_controlplane::routes as api;
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use super::lookup::{cluster, volume};
use super::request::{ApiReq, body};
use super::volume_create::{Placement, derived_volume, name_taken};
use crate::backups::{SERVICE_INTERVAL_MS, age_seconds, backup_one, live, schedule_tiers};
use crate::model::*;
use crate::objstore::Target;
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
            Ok(Reply::empty(201)
                .with_location(format!("/api/v2{}", api::backup(c, id)))
                .with_header("x-backup-id", id.to_string()))
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
        // Source switching keeps nothing: only the local source exists.
        ("GET", "/clusters/{cluster_id}/backups/sources") => Ok(Reply::ok(json!([]))),
        ("GET", "/clusters/{cluster_id}/backups/export") => {
            cluster(st.t, c)?;
            let name = match req.query.get("backup_id") {
                Some(b) => {
                    let found = b
                        .parse::<Uuid>()
                        .ok()
                        .and_then(|id| st.t.backups.get(&id.to_string()))
                        .filter(|x| x.cluster_id == c)
                        .ok_or_else(|| ApiError::not_found(format!("Backup {b} not found")))?;
                    // The whole volume's backups, not only the chain: the control plane
                    // filters by the backup's volume name.
                    Some(found.volume_name.clone())
                }
                None => req.query.get("lvol_name").cloned(),
            };
            Ok(Reply::ok(export(st.t, c, name.as_deref())))
        }
        ("POST", "/clusters/{cluster_id}/backups/import") => {
            cluster(st.t, c)?;
            let body = req.body.clone().unwrap_or(serde_json::Value::Null);
            let items = body
                .get("metadata")
                .and_then(serde_json::Value::as_array)
                .cloned()
                .ok_or_else(|| ApiError::bad_request("metadata must be a list"))?;
            let n = import(st, c, &items)?;
            Ok(Reply::ok(json!({ "imported": n })))
        }
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
        source_cluster_id: b.source_cluster_id.clone(),
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
    // The control plane does not look (the node's upload then fails); refused here, so
    // the caller learns why at once.
    if Target::of(cluster(st.t, c)?).is_none() {
        return Err(ApiError::bad_request(crate::objstore::no_config(c)));
    }
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
    // Laid out as the cluster's volumes are; on the backup's node unless told otherwise.
    let template = st.t.volumes.values().find(|v| v.cluster_id == c).cloned();
    let placement = Placement {
        node_id: node,
        secondary_ids: template
            .as_ref()
            .map(|v| v.secondary_ids.clone())
            .unwrap_or_default(),
        ha: template.as_ref().is_some_and(|v| v.ha),
        ndcs: template.as_ref().map_or(1, |v| v.ndcs),
        npcs: template.as_ref().map_or(1, |v| v.npcs),
        priority_class: 0,
        fabric: "tcp".into(),
    };
    let cl = cluster(st.t, c)?.clone();
    let mut rec = derived_volume(
        st,
        &cl,
        pool.id,
        &b.lvol_name,
        backup.size,
        VolumeStatus::Restoring,
        placement,
    );
    rec.allowed_hosts = backup.allowed_hosts.clone();
    let id = rec.id;
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
    let gone: Vec<BackupRec> =
        st.t.backups
            .values()
            .filter(|b| b.cluster_id == c && b.volume_id == v)
            .cloned()
            .collect();
    if gone.is_empty() {
        return Err(ApiError::bad_request(format!(
            "No backups found for lvol {v}"
        )));
    }
    for b in gone {
        crate::backups::delete(st, &b);
    }
    Ok(Reply::empty(204))
}

/// The completed backups of cluster `c` (of volume `name`, when given), as the control
/// plane exports them, oldest first.
fn export(t: &crate::store::Tables, c: Uuid, name: Option<&str>) -> serde_json::Value {
    let mut found: Vec<&BackupRec> = t
        .backups
        .values()
        .filter(|b| b.cluster_id == c && b.status == BackupStatus::Completed)
        .filter(|b| name.is_none_or(|n| b.volume_name == n))
        .collect();
    found.sort_by_key(|b| (b.created_ms, b.seq));
    json!(
        found
            .into_iter()
            .map(|b| {
                let d = dto(b);
                json!({
                    "backup_id": b.id,
                    "s3_id": b.s3_id,
                    "cluster_id": c,
                    "lvol_id": d.lvol_id,
                    "lvol_name": d.lvol_name,
                    "snapshot_id": d.snapshot_id,
                    "snapshot_name": d.snapshot_name,
                    "node_id": d.node_id,
                    "prev_backup_id": d.prev_backup_id,
                    "size": d.size,
                    "allowed_hosts": d.allowed_hosts,
                    "created_at": d.created_at,
                })
            })
            .collect::<Vec<_>>()
    )
}

/// Records another cluster's exported backups as completed backups of cluster `c`
/// (their objects are read from `c`'s store when restored); the number recorded. Every
/// item is checked before any is written.
fn import(st: &mut St<'_>, c: Uuid, items: &[serde_json::Value]) -> Result<usize, ApiError> {
    use serde_json::Value;
    let text = |v: &Value, k: &str| match v.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let uuid = |s: String| s.parse::<Uuid>().unwrap_or_default();
    let mut seen = std::collections::BTreeSet::new();
    let mut ids = Vec::new();
    for item in items {
        let id = text(item, "backup_id");
        if id.is_empty() {
            continue;
        }
        if !seen.insert(id.clone()) {
            return Err(ApiError::Precondition(format!(
                "Backup {id} is listed more than once"
            )));
        }
        let Ok(bid) = id.parse::<Uuid>() else {
            return Err(ApiError::Precondition(format!(
                "Backup {id} is not a valid backup id"
            )));
        };
        if let Some(known) = st.t.backups.get(&bid.to_string()) {
            return Err(ApiError::Precondition(format!(
                "Backup {id} already exists in cluster {}",
                known.cluster_id
            )));
        }
        ids.push((bid, item));
    }
    for (bid, item) in &ids {
        let hosts: Vec<HostEntry> = item
            .get("allowed_hosts")
            .and_then(|h| serde_json::from_value(h.clone()).ok())
            .unwrap_or_default();
        let prev = text(item, "prev_backup_id");
        let created = item.get("created_at").and_then(Value::as_i64).unwrap_or(0);
        let seq = st.seq();
        st.t.backups.insert(
            bid.to_string(),
            BackupRec {
                id: *bid,
                seq,
                cluster_id: c,
                s3_id: item.get("s3_id").and_then(Value::as_i64).unwrap_or(0),
                volume_id: uuid(text(item, "lvol_id")),
                volume_name: text(item, "lvol_name"),
                snapshot_id: uuid(text(item, "snapshot_id")),
                snapshot_name: text(item, "snapshot_name"),
                node_id: uuid(text(item, "node_id")),
                status: BackupStatus::Completed,
                prev: prev.parse().ok(),
                size: item.get("size").and_then(Value::as_u64).unwrap_or(0),
                allowed_hosts: hosts,
                created_ms: created * 1000,
                completed_ms: Some(created * 1000),
                error: String::new(),
                source_cluster_id: text(item, "cluster_id"),
            },
        );
    }
    Ok(ids.len())
}

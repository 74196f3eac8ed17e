//! Volume migrations in the subsystem form of sbcli main: every volume of a subsystem
//! (NQN) moves to another node, in phases the engine advances.

use serde_json::{Map, json};
use simplyblock_controlplane::routes as api;
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use super::lookup::cluster;
use super::request::{ApiReq, body};
use crate::model::*;
use crate::render;
use crate::reply::{ApiError, ApiResult, Reply};
use crate::sim::St;

const NQN_PATTERN_HINT: &str = "nqn.";

fn members(st: &St<'_>, c: Uuid, nqn: &str) -> Vec<VolumeRec> {
    let mut v: Vec<VolumeRec> =
        st.t.volumes
            .values()
            .filter(|v| v.cluster_id == c && v.nqn == nqn && v.status != VolumeStatus::Deleted)
            .cloned()
            .collect();
    v.sort_by_key(|v| v.ns_id);
    v
}

pub fn handle(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let c = req.id("cluster_id");
    let nqn = req.params.get("nqn").cloned().unwrap_or_default();
    if !nqn.starts_with(NQN_PATTERN_HINT) || !nqn.contains(':') {
        return Err(ApiError::invalid(
            "value_error",
            vec![json!("path"), json!("nqn")],
            &format!("Invalid NQN: '{nqn}'"),
            json!(nqn),
        ));
    }
    let find = |st: &St<'_>, id: Uuid| -> Result<MigrationRec, ApiError> {
        match st.t.migrations.get(&id.to_string()) {
            None => Err(ApiError::key_error(format!("Migration {id} not found"))),
            Some(m) if m.cluster_id != c || m.nqn != nqn => {
                Err(ApiError::not_found(format!("Migration {id} not found")))
            }
            Some(m) => Ok(m.clone()),
        }
    };
    match (req.method.as_str(), req.route.as_str()) {
        ("GET", api::MIGRATIONS) => {
            let mut list: Vec<&MigrationRec> =
                st.t.migrations
                    .values()
                    .filter(|m| m.cluster_id == c && m.nqn == nqn)
                    .collect();
            list.sort_by_key(|m| std::cmp::Reverse(m.seq));
            Ok(Reply::ok(json!(
                list.into_iter()
                    .map(|m| render::migration(st.t, m))
                    .collect::<Vec<_>>()
            )))
        }
        ("POST", api::MIGRATIONS) => {
            let format = req.format("full")?;
            let p: MigrationCreate = body(st.sim, req)?;
            let mem = members(st, c, &nqn);
            let Some(first) = mem.first().cloned() else {
                return Err(ApiError::not_found(format!("Subsystem {nqn} not found")));
            };
            let cl = cluster(st.t, c)?;
            if cl.status != ClusterStatus::Active {
                return Err(ApiError::bad_request(format!(
                    "Cluster {c} is not active (status={})",
                    cl.status
                )));
            }
            if render::is_re_balancing(st.t, cl, st.now) {
                return Err(ApiError::bad_request(format!(
                    "Cluster {c} is rebalancing; wait for it to finish before migrating"
                )));
            }
            let target = match st.t.nodes.get(&p.target_node_id.to_string()) {
                Some(n) if n.cluster_id == c => n.clone(),
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "Target node {} not found",
                        p.target_node_id
                    )));
                }
            };
            if !target.lvstore {
                return Err(ApiError::bad_request(format!(
                    "Target node {} has no lvstore",
                    target.id
                )));
            }
            if first.node_id == target.id {
                return Err(ApiError::bad_request(format!(
                    "LVol {} is already on node {}; cannot migrate to the same node",
                    first.id, target.id
                )));
            }
            if st.t.tasks.values().any(|t| {
                t.node_id == Some(first.node_id)
                    && t.function_name.contains("device_migration")
                    && t.status != TaskStatus::Done
            }) {
                return Err(ApiError::bad_request(format!(
                    "Node {} has a data migration in progress; wait for it to finish",
                    first.node_id
                )));
            }
            if let Some(existing) =
                st.t.migrations
                    .values()
                    .find(|m| m.active() && m.lvol_id == first.id)
                    .cloned()
            {
                if existing.target_node != target.id {
                    return Err(ApiError::bad_request(format!(
                        "An active migration for {} already exists targeting a different node ({}). Cancel it first.",
                        first.id, existing.id
                    )));
                }
                if existing.phase != "pre_created" {
                    return Err(ApiError::bad_request(format!(
                        "Migration {} is already past pre-create (phase={}). Use /continue or cancel it.",
                        existing.id, existing.phase
                    )));
                }
                let dto = render::migration(st.t, &existing);
                return Ok(Reply::created(
                    format!(
                        "/api/v2/clusters/{c}/subsystems/{nqn}/migrations/{}/",
                        existing.id
                    ),
                    &existing.id.to_string(),
                    dto,
                    &format,
                ));
            }
            let id = st.uuid();
            let seq = st.seq();
            let batch = first.max_namespace_per_subsys > 1;
            let snaps =
                st.t.snapshots
                    .values()
                    .filter(|s| mem.iter().any(|m| m.id == s.volume_id))
                    .count() as u32;
            let rec = MigrationRec {
                id,
                seq,
                cluster_id: c,
                nqn: nqn.clone(),
                lvol_id: first.id,
                members: mem.iter().map(|m| m.id).collect(),
                batch,
                source_node: first.node_id,
                target_node: target.id,
                phase: "pre_created".into(),
                status: if batch { "running" } else { "new" }.into(),
                retry_count: 0,
                max_retries: 5,
                error_message: String::new(),
                started_at: st.now / 1000,
                completed_at: 0,
                canceled: false,
                ctrl_loss_tmo: p.ctrl_loss_tmo,
                host_nqn: p.host_nqn,
                task_id: None,
                next_ms: 0,
                snaps_total: snaps,
                snaps_migrated: 0,
            };
            let dto = render::migration(st.t, &rec);
            st.t.migrations.insert(id.to_string(), rec);
            let location = format!("/api/v2/clusters/{c}/subsystems/{nqn}/migrations/{id}/");
            Ok(Reply::created(location, &id.to_string(), dto, &format))
        }
        ("GET", api::MIGRATION) => {
            let m = find(st, req.id("migration_id"))?;
            Ok(Reply::ok(render::migration(st.t, &m)))
        }
        ("DELETE", api::MIGRATION) => {
            let m = find(st, req.id("migration_id"))?;
            if !m.active() {
                return Err(ApiError::bad_request(format!(
                    "Migration is not active (status={})",
                    m.status
                )));
            }
            let key = m.id.to_string();
            if m.phase == "pre_created" {
                if let Some(x) = st.t.migrations.get_mut(&key) {
                    x.status = "cancelled".into();
                    x.phase = "cleanup_target".into();
                    x.completed_at = st.now / 1000;
                }
            } else if let Some(x) = st.t.migrations.get_mut(&key) {
                x.canceled = true;
            }
            st.sim.wake.notify_one();
            Ok(Reply::ok(json!({"status": "cancelled"})))
        }
        ("POST", api::MIGRATION_CONTINUE) => {
            let p: MigrationContinue = body(st.sim, req)?;
            let m = find(st, req.id("migration_id"))?;
            if m.phase != "pre_created" {
                return Err(ApiError::bad_request(format!(
                    "Migration {} is not in PHASE_PRE_CREATED (phase={})",
                    m.id, m.phase
                )));
            }
            let cl = cluster(st.t, c)?;
            if cl.status != ClusterStatus::Active {
                return Err(ApiError::bad_request(format!(
                    "Cluster {c} is not active (status={})",
                    cl.status
                )));
            }
            let mut params = Map::new();
            params.insert("migration_id".into(), json!(m.id));
            params.insert("lvol_id".into(), json!(m.lvol_id));
            let name = if m.batch {
                "lvol_batch_migration"
            } else {
                "lvol_migration"
            };
            let task = st.task(c, name, Some(m.source_node), None, params, -1);
            let next = st.now + st.sim.timings().migration_phase_ms;
            if let Some(x) = st.t.migrations.get_mut(&m.id.to_string()) {
                x.phase = "snap_copy".into();
                x.status = "running".into();
                x.max_retries = p.max_retries;
                x.task_id = Some(task);
                x.next_ms = next;
            }
            Ok(Reply::ok(json!({"migration_id": m.id})))
        }
        ("POST", api::MIGRATION_CLEANUP_TARGET) => {
            let m = find(st, req.id("migration_id"))?;
            if m.batch {
                return Err(ApiError::bad_request(
                    "cleanup-target is not supported for a batch migration group",
                ));
            }
            Ok(Reply::ok(
                json!({"deleted": [], "not_found": [], "skipped": [], "errors": []}),
            ))
        }
        _ => Err(ApiError::opaque("unsupported migration route")),
    }
}

//! Volume migrations (subsystem form of sbcli main) and replication: targets, policies,
//! and the per-volume relationship.

use serde_json::{Map, json};
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use crate::api::{ApiReq, body, cluster, node, pool, volume};
use crate::engine::queue_replication;
use crate::model::*;
use crate::render;
use crate::reply::{ApiError, ApiResult, Reply};
use crate::sim::St;

const NQN_PATTERN_HINT: &str = "nqn.";

pub fn handle(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let r = req.route.as_str();
    if let Some(rest) = r.strip_prefix("/clusters/{cluster_id}/subsystems/{nqn}/migrations/") {
        return migrations(st, req, rest);
    }
    if let Some(rest) = r.strip_prefix("/clusters/{cluster_id}/replication/") {
        return targets_policies(st, req, rest);
    }
    if let Some(rest) = r.strip_prefix(
        "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/replication/",
    ) {
        return volume_replication(st, req, rest);
    }
    Err(ApiError::opaque(format!(
        "sbsim does not simulate {} {r}",
        req.method
    )))
}

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

fn migrations(st: &mut St<'_>, req: &ApiReq, rest: &str) -> ApiResult {
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
    match (req.method.as_str(), rest) {
        ("GET", "") => {
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
        ("POST", "") => {
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
            Ok(Reply::created(
                format!("/api/v2/clusters/{c}/subsystems/{nqn}/migrations/{id}/"),
                &id.to_string(),
                dto,
                &format,
            ))
        }
        ("GET", "{migration_id}/") => {
            let m = find(st, req.id("migration_id"))?;
            Ok(Reply::ok(render::migration(st.t, &m)))
        }
        ("DELETE", "{migration_id}/") => {
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
        ("POST", "{migration_id}/continue") => {
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
        ("POST", "{migration_id}/cleanup-target") => {
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

fn targets_policies(st: &mut St<'_>, req: &ApiReq, rest: &str) -> ApiResult {
    let c = req.id("cluster_id");
    let target_of = |st: &St<'_>, id: Uuid| -> Result<TargetRec, ApiError> {
        match st.t.targets.get(&id.to_string()) {
            Some(t) if t.cluster_id == c => Ok(t.clone()),
            _ => Err(ApiError::key_error(format!(
                "ReplicationTarget {id} not found"
            ))),
        }
    };
    let policy_of = |st: &St<'_>, id: Uuid| -> Result<PolicyRec, ApiError> {
        match st.t.policies.get(&id.to_string()) {
            Some(p) if p.cluster_id == c => Ok(p.clone()),
            _ => Err(ApiError::key_error(format!(
                "ReplicationPolicy {id} not found"
            ))),
        }
    };
    match (req.method.as_str(), rest) {
        ("GET", "targets/") => {
            let list: Vec<ReplicationTarget> =
                render::sorted(st.t.targets.values().filter(|t| t.cluster_id == c), |t| {
                    t.seq
                })
                .into_iter()
                .map(render::target)
                .collect();
            Ok(Reply::ok(json!(list)))
        }
        ("POST", "targets/") => {
            let format = req.format("full")?;
            let p: ReplicationTargetCreate = body(st.sim, req)?;
            cluster(st.t, p.target_cluster_id)?;
            if let Some(tp) = p.target_pool_id {
                pool(st.t, p.target_cluster_id, tp)?;
            }
            if p.target_cluster_id == c {
                return Err(ApiError::bad_request(
                    "A cluster cannot replicate to itself",
                ));
            }
            let id = st.uuid();
            let seq = st.seq();
            let rec = TargetRec {
                id,
                seq,
                cluster_id: c,
                target_name: p.target_name,
                target_cluster_id: p.target_cluster_id,
                target_pool: p.target_pool_id,
                timeout_sec: p.timeout_sec.unwrap_or(0),
                status: ActiveStatus::Active,
            };
            let dto = json!(render::target(&rec));
            st.t.targets.insert(id.to_string(), rec);
            Ok(Reply::created(
                format!("/api/v2/clusters/{c}/replication/targets/{id}/"),
                &id.to_string(),
                dto,
                &format,
            ))
        }
        ("GET", "targets/{target_id}/") => {
            let t = target_of(st, req.id("target_id"))?;
            Ok(Reply::ok(json!(render::target(&t))))
        }
        ("DELETE", "targets/{target_id}/") => {
            let t = target_of(st, req.id("target_id"))?;
            if st.t.policies.values().any(|p| p.target_id == t.id) {
                return Err(ApiError::bad_request(
                    "Replication target is in use by a policy",
                ));
            }
            st.t.targets.remove(&t.id.to_string());
            Ok(Reply::empty(204))
        }
        ("POST", "targets/{target_id}/failover") => {
            let t = target_of(st, req.id("target_id"))?;
            let vols: Vec<Uuid> =
                st.t.replications
                    .values()
                    .filter(|r| r.cluster_id == c && r.target_cluster == t.target_cluster_id)
                    .map(|r| r.source_lvol)
                    .collect();
            Ok(Reply::ok(json!(failover_all(st, &vols))))
        }
        ("GET", "policies/") => {
            let list: Vec<ReplicationPolicy> =
                render::sorted(st.t.policies.values().filter(|p| p.cluster_id == c), |p| {
                    p.seq
                })
                .into_iter()
                .map(render::policy)
                .collect();
            Ok(Reply::ok(json!(list)))
        }
        ("POST", "policies/") => {
            let format = req.format("full")?;
            let p: ReplicationPolicyCreate = body(st.sim, req)?;
            target_of(st, p.target_id)?;
            if st
                .t
                .policies
                .values()
                .any(|x| x.cluster_id == c && x.policy_name == p.policy_name)
            {
                return Err(ApiError::bad_request(format!(
                    "Policy name already exists: {}",
                    p.policy_name
                )));
            }
            let id = st.uuid();
            let seq = st.seq();
            let rec = PolicyRec {
                id,
                seq,
                cluster_id: c,
                policy_name: p.policy_name,
                target_id: p.target_id,
                interval_min: p.interval_min,
                mode: p.mode.unwrap_or(ReplicationMode::Failover),
                keep_replicated: p.keep_replicated.unwrap_or(3),
                status: ActiveStatus::Active,
            };
            let dto = json!(render::policy(&rec));
            st.t.policies.insert(id.to_string(), rec);
            Ok(Reply::created(
                format!("/api/v2/clusters/{c}/replication/policies/{id}/"),
                &id.to_string(),
                dto,
                &format,
            ))
        }
        ("GET", "policies/{policy_id}/") => {
            let p = policy_of(st, req.id("policy_id"))?;
            Ok(Reply::ok(json!(render::policy(&p))))
        }
        ("DELETE", "policies/{policy_id}/") => {
            let p = policy_of(st, req.id("policy_id"))?;
            if st
                .t
                .volumes
                .values()
                .any(|v| v.replication_policy == Some(p.id))
            {
                return Err(ApiError::bad_request(
                    "Replication policy is attached to volumes",
                ));
            }
            st.t.policies.remove(&p.id.to_string());
            Ok(Reply::empty(204))
        }
        ("POST", "policies/{policy_id}/failover") => {
            let p = policy_of(st, req.id("policy_id"))?;
            let vols: Vec<Uuid> =
                st.t.volumes
                    .values()
                    .filter(|v| v.replication_policy == Some(p.id))
                    .map(|v| v.id)
                    .collect();
            Ok(Reply::ok(json!(failover_all(st, &vols))))
        }
        _ => Err(ApiError::opaque("unsupported replication route")),
    }
}

fn failover_all(st: &mut St<'_>, vols: &[Uuid]) -> Vec<FailoverResult> {
    vols.iter()
        .map(|v| match failover(st, *v) {
            Ok((tv, already)) => FailoverResult {
                lvol_id: *v,
                status: if already {
                    FailoverStatus::Skipped
                } else {
                    FailoverStatus::FailedOver
                },
                detail: already.then(|| "already failed over".to_string()),
                target_lvol_id: Some(tv),
                connection_strings: target_connect(st, tv),
            },
            Err(e) => FailoverResult {
                lvol_id: *v,
                status: FailoverStatus::Failed,
                detail: Some(e),
                target_lvol_id: None,
                connection_strings: Vec::new(),
            },
        })
        .collect()
}

fn target_connect(st: &St<'_>, tv: Uuid) -> Vec<ConnectEntry> {
    st.t.volumes
        .get(&tv.to_string())
        .map(|v| {
            let mut nodes = vec![v.node_id];
            nodes.extend(v.secondary_ids.iter().copied());
            let mut e = render::connect_entries(st.t, v, None, &nodes, 3600, true);
            for x in &mut e {
                x.target_lvol_id = Some(tv.to_string());
            }
            e
        })
        .unwrap_or_default()
}

/// Fail a volume over to its replica: `(target volume, was already failed over)`.
fn failover(st: &mut St<'_>, v: Uuid) -> Result<(Uuid, bool), String> {
    let Some(r) = st.t.replications.get(&v.to_string()).cloned() else {
        return Err("Volume has no replication relationship".into());
    };
    let Some(tv) = r.target_lvol else {
        return Err("No replicated snapshot exists yet; cannot fail over".into());
    };
    if r.state == ReplicationState::FailedOver {
        return Ok((tv, true));
    }
    if let Some(x) = st.t.replications.get_mut(&v.to_string()) {
        x.state = ReplicationState::FailedOver;
        x.running = false;
    }
    Ok((tv, false))
}

fn volume_replication(st: &mut St<'_>, req: &ApiReq, rest: &str) -> ApiResult {
    let c = req.id("cluster_id");
    let p = req.id("pool_id");
    let vid = req.id("volume_id");
    let v = volume(st.t, p, vid)?.clone();
    let rel = st.t.replications.get(&vid.to_string()).cloned();
    let no_rel = || ApiError::not_found("Volume has no replication relationship");
    match (req.method.as_str(), rest) {
        ("GET", "") => {
            let r = rel.ok_or_else(no_rel)?;
            Ok(Reply::ok(json!(render::relationship(st.t, &r, vid))))
        }
        ("POST", "start") => {
            let b: Option<ReplicationStart> = body(st.sim, req)?;
            let b = b.unwrap_or_default();
            let fail = || ApiError::Http(500, "Failed to start volume snapshot replication".into());
            let policy = v
                .replication_policy
                .and_then(|id| st.t.policies.get(&id.to_string()).cloned());
            let target_cluster = b
                .replication_cluster_id
                .or_else(|| {
                    policy.as_ref().and_then(|p| {
                        st.t.targets
                            .get(&p.target_id.to_string())
                            .map(|t| t.target_cluster_id)
                    })
                })
                .or_else(|| {
                    st.t.targets
                        .values()
                        .find(|t| t.cluster_id == c)
                        .map(|t| t.target_cluster_id)
                })
                .ok_or_else(fail)?;
            if !st.t.clusters.contains(&target_cluster.to_string()) || target_cluster == c {
                return Err(fail());
            }
            let target_pool =
                st.t.targets
                    .values()
                    .find(|t| t.cluster_id == c && t.target_cluster_id == target_cluster)
                    .and_then(|t| t.target_pool);
            let mode = b
                .mode
                .or(policy.as_ref().map(|p| p.mode))
                .unwrap_or(ReplicationMode::Failover);
            let interval = b
                .interval_min
                .or(policy.as_ref().map(|p| p.interval_min))
                .unwrap_or(1);
            match rel {
                Some(_) => {
                    if let Some(r) = st.t.replications.get_mut(&vid.to_string()) {
                        r.running = true;
                    }
                }
                None => {
                    let id = st.uuid();
                    let seq = st.seq();
                    let now = st.now;
                    st.t.replications.insert(
                        vid.to_string(),
                        ReplicationRec {
                            id,
                            seq,
                            cluster_id: c,
                            source_lvol: vid,
                            target_lvol: None,
                            target_cluster,
                            target_pool,
                            mode,
                            state: ReplicationState::Replicating,
                            direction: ReplicationDirection::ToTarget,
                            running: true,
                            interval_min: interval,
                            last_snapshot_ms: None,
                            next_ms: now,
                        },
                    );
                }
            }
            if let Some(x) = st.t.volumes.get_mut(&vid.to_string()) {
                x.do_replicate = true;
            }
            st.sim.wake.notify_one();
            Ok(Reply::empty(204))
        }
        ("POST", "stop") => {
            if rel.is_none() {
                return Err(ApiError::Http(
                    500,
                    "Failed to stop volume snapshot replication".into(),
                ));
            }
            if let Some(r) = st.t.replications.get_mut(&vid.to_string()) {
                r.running = false;
            }
            Ok(Reply::empty(204))
        }
        ("POST", "trigger") => {
            if rel.is_none() {
                return Err(ApiError::Http(
                    500,
                    "Failed to trigger volume snapshot replication".into(),
                ));
            }
            queue_replication(st, c, vid);
            Ok(Reply::empty(204))
        }
        ("POST", "failover") => match failover(st, vid) {
            Ok(_) => Ok(Reply::empty(204)),
            Err(e) => Err(ApiError::Http(500, e)),
        },
        ("POST", "commit") => {
            let r = rel.ok_or_else(no_rel)?;
            if let Some(t) = st.t.tasks.values().find(|t| {
                t.function_name == "replication_final"
                    && t.params.get("lvol_id") == Some(&json!(vid))
                    && t.status != TaskStatus::Done
            }) {
                return Ok(Reply::empty(202)
                    .with_location(format!("/api/v2/clusters/{c}/tasks/{}/", t.id)));
            }
            if r.target_lvol.is_none() {
                return Err(ApiError::Http(
                    500,
                    "No replicated snapshot exists yet".into(),
                ));
            }
            let mut params = Map::new();
            params.insert("lvol_id".into(), json!(vid));
            let task = st.task(c, "replication_final", Some(v.node_id), None, params, 8);
            if let Some(x) = st.t.replications.get_mut(&vid.to_string()) {
                x.state = ReplicationState::CutoverPending;
            }
            Ok(Reply::empty(202).with_location(format!("/api/v2/clusters/{c}/tasks/{task}/")))
        }
        ("POST", "failback") => {
            let _b: Failback = body(st.sim, req)?;
            rel.ok_or_else(no_rel)?;
            if let Some(x) = st.t.replications.get_mut(&vid.to_string()) {
                x.direction = ReplicationDirection::ToSource;
                x.state = ReplicationState::Replicating;
                x.running = true;
            }
            Ok(Reply::empty(204))
        }
        ("GET", "tasks") => {
            let list: Vec<Task> = render::sorted(
                st.t.tasks.values().filter(|t| {
                    matches!(
                        t.function_name.as_str(),
                        "snapshot_replication" | "replication_final"
                    ) && t.params.get("lvol_id") == Some(&json!(vid))
                }),
                |t| t.seq,
            )
            .into_iter()
            .map(render::task)
            .collect();
            Ok(Reply::ok(json!(list)))
        }
        _ => {
            let _ = node(st.t, c, v.node_id);
            Err(ApiError::opaque("unsupported volume replication route"))
        }
    }
}

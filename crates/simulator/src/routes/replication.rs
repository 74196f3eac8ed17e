//! Replication: a cluster's targets and policies, and each volume's relationship with its
//! replica on the target cluster.

use serde_json::{Map, json};
use simplyblock_controlplane::routes as api;
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use super::lookup::{cluster, pool, volume};
use super::request::{ApiReq, body};
use crate::cycles::queue_replication;
use crate::model::*;
use crate::render;
use crate::reply::{ApiError, ApiResult, Reply};
use crate::sim::St;
use crate::store::Tables;

/// A cluster's replication targets and policies, and failing over all they cover.
pub fn targets_and_policies(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
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
    // `api` has the routes the client calls; the literals are routes only sbsim serves.
    match (req.method.as_str(), req.route.as_str()) {
        ("GET", api::REPLICATION_TARGETS) => Ok(Reply::ok(render::list(
            st.t.targets.values().filter(|t| t.cluster_id == c),
            |t| t.seq,
            render::target,
        ))),
        ("POST", api::REPLICATION_TARGETS) => {
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
            let location = format!("/api/v2{}", api::replication_target(c, id));
            Ok(Reply::created(location, &id.to_string(), dto, &format))
        }
        ("GET", api::REPLICATION_TARGET) => {
            let t = target_of(st, req.id("target_id"))?;
            Ok(Reply::ok(json!(render::target(&t))))
        }
        ("DELETE", api::REPLICATION_TARGET) => {
            let t = target_of(st, req.id("target_id"))?;
            if st.t.policies.values().any(|p| p.target_id == t.id) {
                return Err(ApiError::bad_request(
                    "Replication target is in use by a policy",
                ));
            }
            st.t.targets.remove(&t.id.to_string());
            Ok(Reply::empty(204))
        }
        ("POST", api::REPLICATION_TARGET_FAILOVER) => {
            let t = target_of(st, req.id("target_id"))?;
            let vols: Vec<Uuid> =
                st.t.replications
                    .values()
                    .filter(|r| r.cluster_id == c && r.target_cluster == t.target_cluster_id)
                    .map(|r| r.source_lvol)
                    .collect();
            Ok(Reply::ok(json!(failover_all(st, &vols))))
        }
        ("GET", api::REPLICATION_RELATIONSHIP) => {
            let lvol = req.id("lvol_id");
            let r = lookup(st.t, c, lvol)?;
            Ok(Reply::ok(json!(render::relationship_lookup(
                st.t, &r, lvol
            ))))
        }
        ("GET", api::REPLICATION_RELATIONSHIP_LATEST_SNAPSHOT) => {
            let r = lookup(st.t, c, req.id("lvol_id"))?;
            let s = crate::replicated::latest(st.t, &r).ok_or_else(|| {
                ApiError::not_found("No snapshot of this relationship was replicated yet")
            })?;
            Ok(Reply::ok(json!(ReplicatedSnapshot {
                snapshot_id: s.id,
                cluster_id: s.cluster_id,
                pool_id: s.pool_id,
                lvol_id: s.volume_id,
                source_lvol_id: if s.volume_id == r.source_lvol {
                    r.target_lvol.unwrap_or(r.source_lvol)
                } else {
                    r.source_lvol
                },
                size: s.size,
                created_at: Some(render::iso_time(s.created_ms)),
            })))
        }
        ("GET", api::REPLICATION_POLICIES) => Ok(Reply::ok(render::list(
            st.t.policies.values().filter(|p| p.cluster_id == c),
            |p| p.seq,
            |p| render::policy(st.t, p),
        ))),
        ("POST", api::REPLICATION_POLICIES) => {
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
            let dto = json!(render::policy(st.t, &rec));
            st.t.policies.insert(id.to_string(), rec);
            let location = format!("/api/v2{}", api::replication_policy(c, id));
            Ok(Reply::created(location, &id.to_string(), dto, &format))
        }
        ("GET", api::REPLICATION_POLICY) => {
            let p = policy_of(st, req.id("policy_id"))?;
            Ok(Reply::ok(json!(render::policy(st.t, &p))))
        }
        ("DELETE", api::REPLICATION_POLICY) => {
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
        ("GET", api::REPLICATION_POLICY_LATEST_GENERATION) => {
            let p = policy_of(st, req.id("policy_id"))?;
            latest_generation(st.t, c, p.id)
        }
        ("POST", "/clusters/{cluster_id}/replication/policies/{policy_id}/failover") => {
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

/// One volume's replication relationship: start, stop, trigger, fail over (planned or
/// not), demote, commit the cutover, fail back, its tasks and its typed status. A volume's
/// relationship is the one it is the source of, else the one it is the replica of; the
/// failover of a volume that is both acts on the one it is the replica of, unless that one
/// failed over already and the volume, serving, is the source of a newer one.
pub fn volume_relationship(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let c = req.id("cluster_id");
    let p = req.id("pool_id");
    let vid = req.id("volume_id");
    let v = volume(st.t, p, vid)?.clone();
    if v.status == VolumeStatus::Deleted {
        return Err(ApiError::not_found("Volume deleted"));
    }
    let own = st.t.replications.get(&vid.to_string()).cloned();
    let replica_of = replica_relationship(st.t, vid);
    let rel = own.clone().or_else(|| replica_of.clone());
    let no_rel = || ApiError::not_found("Volume has no replication relationship");
    match (req.method.as_str(), req.route.as_str()) {
        ("GET", api::VOLUME_REPLICATION) => {
            let r = rel.ok_or_else(no_rel)?;
            Ok(Reply::ok(json!(render::relationship(st.t, &r, vid))))
        }
        ("GET", api::VOLUME_REPLICATION_STATUS) => {
            Ok(Reply::ok(json!(status(st, &v, own, replica_of))))
        }
        ("POST", api::VOLUME_REPLICATION_START) => {
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
            match own {
                Some(_) => {
                    if let Some(r) = st.t.replications.get_mut(&vid.to_string()) {
                        r.running = true;
                    }
                }
                None => {
                    // A failed-over replica protected back towards its old source's cluster
                    // reuses that source as its replica while it lives (a resync, not a new
                    // copy): the two relationships then point at each other.
                    let old_source = replica_of
                        .as_ref()
                        .filter(|r| r.cluster_id == target_cluster)
                        .and_then(|r| st.t.volumes.get(&r.source_lvol.to_string()))
                        .filter(|x| x.status != VolumeStatus::Deleted)
                        .map(|x| (x.id, x.pool_id));
                    let (target_lvol, target_pool) = match old_source {
                        Some((id, pool)) => (Some(id), Some(pool)),
                        None => (None, target_pool),
                    };
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
                            target_lvol,
                            target_cluster,
                            target_pool,
                            mode,
                            state: ReplicationState::Replicating,
                            direction: ReplicationDirection::ToTarget,
                            running: true,
                            interval_min: interval,
                            last_snapshot_ms: None,
                            next_ms: now,
                            demoted_seq: None,
                            snapshot_seq: None,
                            replicated_seq: None,
                            pending_snapshot: None,
                            replicated_snapshots: Vec::new(),
                            group: None,
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
        ("POST", api::VOLUME_REPLICATION_STOP) => {
            let Some(r) = rel else {
                return Err(ApiError::Http(
                    500,
                    "Failed to stop volume snapshot replication".into(),
                ));
            };
            if let Some(r) = st.t.replications.get_mut(&r.source_lvol.to_string()) {
                r.running = false;
            }
            Ok(Reply::empty(204))
        }
        ("POST", api::VOLUME_REPLICATION_TRIGGER) => {
            let Some(r) = rel else {
                return Err(ApiError::Http(
                    500,
                    "Failed to trigger volume snapshot replication".into(),
                ));
            };
            queue_replication(st, r.cluster_id, r.source_lvol);
            st.sim.wake.notify_one();
            Ok(Reply::empty(204))
        }
        ("POST", api::VOLUME_REPLICATION_FAILOVER) if req.q("site").is_some() => {
            let planned = req.q_bool("planned")?;
            super::sync::failover(st, vid, req.q("site"), planned)
        }
        ("POST", api::VOLUME_REPLICATION_DEMOTE) if req.q("site").is_some() => {
            super::sync::demote(st, vid, req.q("site"))
        }
        ("POST", api::VOLUME_REPLICATION_FAILOVER) => {
            // A replica that already serves and was protected again moves on: its own
            // relationship is the one to fail over (a failback to the other site).
            let r = match (replica_of, own) {
                (Some(of), Some(own)) if of.state == ReplicationState::FailedOver => own,
                (of, own) => of.or(own).ok_or_else(no_rel)?,
            };
            if req.q("planned").is_some()
                && req.q_bool("planned")?
                && r.state != ReplicationState::FailedOver
            {
                let Some(demoted) = r.demoted_seq else {
                    return Err(ApiError::Http(
                        412,
                        format!(
                            "No demote was requested for source volume {}; demote it first, \
                             or fail over unplanned",
                            r.source_lvol
                        ),
                    ));
                };
                if r.replicated_seq.is_none_or(|at| at < demoted) {
                    return Err(ApiError::conflict(format!(
                        "The demote of source volume {} is still converging; retry when it is done",
                        r.source_lvol
                    )));
                }
            }
            match failover(st, r.source_lvol) {
                Ok(_) => Ok(Reply::empty(204)),
                Err(e) => Err(ApiError::Http(500, e)),
            }
        }
        ("POST", api::VOLUME_REPLICATION_DEMOTE) => demote(st, vid, own, replica_of),
        ("POST", api::VOLUME_REPLICATION_COMMIT) => {
            let r = rel.ok_or_else(no_rel)?;
            let key = r.source_lvol;
            if let Some(t) = st.t.tasks.values().find(|t| {
                t.function_name == "replication_final"
                    && t.params.get("lvol_id") == Some(&json!(key))
                    && t.status != TaskStatus::Done
            }) {
                return Ok(Reply::empty(202)
                    .with_location(format!("/api/v2{}", api::task(r.cluster_id, t.id))));
            }
            if r.target_lvol.is_none() {
                return Err(ApiError::Http(
                    500,
                    "No replicated snapshot exists yet".into(),
                ));
            }
            let mut params = Map::new();
            params.insert("lvol_id".into(), json!(key));
            let node =
                st.t.volumes
                    .get(&key.to_string())
                    .map_or(v.node_id, |x| x.node_id);
            let task = st.task(
                r.cluster_id,
                "replication_final",
                Some(node),
                None,
                params,
                8,
            );
            if let Some(x) = st.t.replications.get_mut(&key.to_string()) {
                x.state = ReplicationState::CutoverPending;
            }
            Ok(
                Reply::empty(202)
                    .with_location(format!("/api/v2{}", api::task(r.cluster_id, task))),
            )
        }
        ("POST", api::VOLUME_REPLICATION_FAILBACK) => {
            let b: Failback = body(st.sim, req)?;
            let r = replica_of.or(own).ok_or_else(no_rel)?;
            if let Some(sc) = b.source_cluster_id
                && sc != r.cluster_id
            {
                return Err(ApiError::bad_request(format!(
                    "Cluster {sc} is not the source cluster {} of this relationship",
                    r.cluster_id
                )));
            }
            if let Some(x) = st.t.replications.get_mut(&r.source_lvol.to_string()) {
                x.direction = ReplicationDirection::ToSource;
                x.state = ReplicationState::Replicating;
                x.running = true;
            }
            st.sim.wake.notify_one();
            Ok(Reply::empty(204))
        }
        ("GET", api::VOLUME_REPLICATION_TASKS) => {
            let key = rel.map_or(vid, |r| r.source_lvol);
            Ok(Reply::ok(render::list(
                st.t.tasks.values().filter(|t| {
                    matches!(
                        t.function_name.as_str(),
                        "snapshot_replication" | "replication_final"
                    ) && t.params.get("lvol_id") == Some(&json!(key))
                }),
                |t| t.seq,
                render::task,
            )))
        }
        _ => Err(ApiError::opaque("unsupported volume replication route")),
    }
}

/// The relationship a volume belongs to as cluster `c` sees it: the one it is the source
/// of there, else the one it is the replica of there. It resolves after the source is
/// reaped.
fn lookup(t: &Tables, c: Uuid, lvol: Uuid) -> Result<ReplicationRec, ApiError> {
    t.replications
        .get(&lvol.to_string())
        .filter(|r| r.cluster_id == c)
        .cloned()
        .or_else(|| replica_relationship(t, lvol).filter(|r| r.target_cluster == c))
        .ok_or_else(|| ApiError::not_found("Volume has no replication relationship"))
}

/// The relationship whose replica `v` is (the newest, should there be several).
pub(super) fn replica_relationship(t: &Tables, v: Uuid) -> Option<ReplicationRec> {
    t.replications
        .values()
        .filter(|r| r.target_lvol == Some(v))
        .max_by_key(|r| r.seq)
        .cloned()
}

/// Demote a volume: it stops serving and its last writes go to the target. 204 once a
/// snapshot taken after the demote was asked is replicated (or the target serves already),
/// 202 while it converges.
pub(super) fn demote(
    st: &mut St<'_>,
    vid: Uuid,
    own: Option<ReplicationRec>,
    replica_of: Option<ReplicationRec>,
) -> ApiResult {
    let Some(r) = own else {
        return match replica_of {
            None => Err(ApiError::not_found(
                "Volume has no replication relationship",
            )),
            // A replica that does not serve is demoted already.
            Some(r) if !render::target_serves(&r) => Ok(Reply::empty(204)),
            Some(_) => Err(ApiError::bad_request(format!(
                "Volume {vid} serves its chain and replicates nowhere; start its replication \
                 before demoting it"
            ))),
        };
    };
    let demoted = match r.demoted_seq {
        Some(at) => at,
        None => {
            let at = st.seq();
            if let Some(x) = st.t.replications.get_mut(&vid.to_string()) {
                x.demoted_seq = Some(at);
            }
            at
        }
    };
    if render::target_serves(&r) || r.replicated_seq.is_some_and(|at| at > demoted) {
        return Ok(Reply::empty(204));
    }
    queue_replication(st, r.cluster_id, vid);
    st.sim.wake.notify_one();
    Ok(Reply::empty(202))
}

/// The typed status of a volume's replication as this volume sees it.
pub(super) fn status(
    st: &St<'_>,
    v: &VolumeRec,
    own: Option<ReplicationRec>,
    replica_of: Option<ReplicationRec>,
) -> ReplicationStatus {
    let (r, role) = match (own, replica_of) {
        (Some(r), _) => {
            let role = if render::target_serves(&r) {
                "secondary"
            } else {
                "source"
            };
            (r, role)
        }
        (None, Some(r)) => {
            let role = match (render::target_serves(&r), r.state) {
                (true, ReplicationState::FailedOver) => "failed_over",
                (true, _) => "source",
                (false, _) => "secondary",
            };
            (r, role)
        }
        (None, None) => {
            if let Some(s) = super::sync::status(st.t, v, st.now) {
                return s;
            }
            return ReplicationStatus {
                role: "none".into(),
                state: "not_replicating".into(),
                ..Default::default()
            };
        }
    };
    let lag = r
        .last_snapshot_ms
        .map(|at| (st.now - at).max(0) as f64 / 1000.0);
    let budget = (2 * r.interval_min.max(1) * 60) as f64;
    let state = match lag {
        _ if !r.running => "not_replicating",
        None => "replicating",
        Some(l) if l <= budget => "in_sync",
        Some(_) => "lagging",
    };
    let outstanding =
        st.t.tasks
            .values()
            .filter(|t| {
                t.function_name == "snapshot_replication"
                    && t.params.get("lvol_id") == Some(&json!(r.source_lvol))
                    && t.status != TaskStatus::Done
            })
            .count() as u64;
    let replicated = r.last_snapshot_ms.is_some();
    ReplicationStatus {
        role: role.into(),
        state: state.into(),
        last_replicated_at: r.last_snapshot_ms.map(render::iso_time),
        lag_seconds: lag,
        lag_budget_seconds: Some(budget),
        outstanding_count: outstanding,
        outstanding_bytes: outstanding * v.size,
        failing_count: 0,
        max_retry_reached: false,
        last_cycle_bytes: if replicated { v.size } else { 0 },
        last_cycle_seconds: if replicated {
            st.sim.timings().replication_ms as f64 / 1000.0
        } else {
            0.0
        },
        resyncing: r.running && r.direction == ReplicationDirection::ToSource,
    }
}

pub(super) fn failover_all(st: &mut St<'_>, vols: &[Uuid]) -> Vec<FailoverResult> {
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

/// `GET …/replication/policies/{id}/latest-generation`: the newest generation every
/// member's snapshot of reached the target and is still there. 404 without a group or a
/// generation, 400 while none is complete.
fn latest_generation(t: &Tables, c: Uuid, policy: Uuid) -> ApiResult {
    let g = t
        .groups
        .values()
        .filter(|g| g.cluster_id == c && g.policy_id == Some(policy))
        .min_by_key(|g| g.seq)
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "No consistency group replicates with policy {policy}"
            ))
        })?;
    if g.generations.is_empty() {
        return Err(ApiError::not_found(format!(
            "No generation of consistency group {} was replicated yet",
            g.name
        )));
    }
    for gen_ in g.generations.iter().rev() {
        let members: Option<Vec<GenerationMember>> = gen_
            .expected
            .iter()
            .map(|m| {
                let (_, snap) = gen_.landed.iter().find(|(l, _)| l == m)?;
                let s = t
                    .snapshots
                    .get(&snap.to_string())
                    .filter(|s| !s.soft_deleted)?;
                Some(GenerationMember {
                    snapshot_id: s.id,
                    cluster_id: s.cluster_id,
                    pool_id: s.pool_id,
                    lvol_id: s.volume_id,
                    source_lvol_id: *m,
                    size: s.size,
                    group_seq: gen_.group_seq,
                })
            })
            .collect();
        if let Some(members) = members {
            return Ok(Reply::ok(json!(LatestGeneration {
                group_seq: gen_.group_seq,
                members,
            })));
        }
    }
    Err(ApiError::bad_request(format!(
        "No generation of consistency group {} reached the target for every member; \
         retry after the next cycle",
        g.name
    )))
}

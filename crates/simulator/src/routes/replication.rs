//! Replication: a cluster's targets and policies, and each volume's relationship with its
//! replica on the target cluster.

use serde_json::{Map, json};
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use super::lookup::{cluster, pool, volume};
use super::request::{ApiReq, body};
use crate::engine::queue_replication;
use crate::model::*;
use crate::render;
use crate::reply::{ApiError, ApiResult, Reply};
use crate::sim::St;

/// A cluster's replication targets and policies, and failing over all they cover.
pub fn targets_and_policies(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let rest = req.route_below("/clusters/{cluster_id}/replication/");
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
        ("GET", "targets/") => Ok(Reply::ok(render::list(
            st.t.targets.values().filter(|t| t.cluster_id == c),
            |t| t.seq,
            render::target,
        ))),
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
            let location = format!("/api/v2/clusters/{c}/replication/targets/{id}/");
            Ok(Reply::created(location, &id.to_string(), dto, &format))
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
        ("GET", "policies/") => Ok(Reply::ok(render::list(
            st.t.policies.values().filter(|p| p.cluster_id == c),
            |p| p.seq,
            render::policy,
        ))),
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
            let location = format!("/api/v2/clusters/{c}/replication/policies/{id}/");
            Ok(Reply::created(location, &id.to_string(), dto, &format))
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

/// One volume's replication relationship: start, stop, trigger, fail over, commit the
/// cutover, fail back.
pub fn volume_relationship(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let rest = req.route_below(
        "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/replication/",
    );
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
        ("GET", "tasks") => Ok(Reply::ok(render::list(
            st.t.tasks.values().filter(|t| {
                matches!(
                    t.function_name.as_str(),
                    "snapshot_replication" | "replication_final"
                ) && t.params.get("lvol_id") == Some(&json!(vid))
            }),
            |t| t.seq,
            render::task,
        ))),
        _ => Err(ApiError::opaque("unsupported volume replication route")),
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

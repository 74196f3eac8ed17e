//! Consistency groups (a newer control plane): volumes created with `consistency_group`
//! join a group pinned to its first member's node; group snapshots take every member at
//! once; group replication attaches one policy to every member, whose cycles then run
//! together, one generation at a time ([`crate::cycles`] starts them); failover, demote,
//! failback and status act on every member; a group's resolution names the group serving
//! after failovers.

use std::collections::HashSet;

use serde_json::json;
use simplyblock_controlplane::routes as api;
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use super::replication;
use super::request::{ApiReq, body};
use crate::cycles::group_members;
use crate::model::*;
use crate::render;
use crate::reply::{ApiError, ApiResult, Reply};
use crate::sim::St;
use crate::store::Tables;

/// The most members a group holds.
pub const MAX_MEMBERS: usize = 20;

pub fn dto(t: &Tables, g: &GroupRec) -> ConsistencyGroup {
    ConsistencyGroup {
        id: g.id,
        cluster_id: g.cluster_id,
        name: g.name.clone(),
        member_count: group_members(t, g).len() as u32,
        lvs_name: g.lvs_name.clone(),
        node_id: g.node_id,
        policy_id: g.policy_id,
    }
}

fn by_name<'t>(t: &'t Tables, c: Uuid, name: &str) -> Option<&'t GroupRec> {
    t.groups
        .values()
        .find(|g| g.cluster_id == c && g.name == name)
}

/// The node a new member of group `name` of cluster `c` must be placed on; `None` when the
/// group does not exist yet. Refused when the group is full.
pub fn pinned_node(t: &Tables, c: Uuid, name: &str) -> Result<Option<Uuid>, ApiError> {
    let Some(g) = by_name(t, c, name) else {
        return Ok(None);
    };
    if group_members(t, g).len() >= MAX_MEMBERS {
        return Err(ApiError::opaque(format!(
            "Consistency group {name} is full: it holds {MAX_MEMBERS} volumes"
        )));
    }
    Ok(Some(g.node_id))
}

/// Add volume `vid` (on `node`) to group `name` of cluster `c`, creating the group pinned
/// to that node when it is the first.
pub fn join(st: &mut St<'_>, c: Uuid, name: &str, vid: Uuid, node: Uuid) -> Uuid {
    let seq = st.seq();
    let member = GroupMember {
        lvol_id: vid,
        added_seq: seq,
        removed_seq: 0,
    };
    if let Some(id) = by_name(st.t, c, name).map(|g| g.id) {
        if let Some(g) = st.t.groups.get_mut(&id.to_string()) {
            g.members.push(member);
        }
        return id;
    }
    let id = st.uuid();
    let now = st.now;
    st.t.groups.insert(
        id.to_string(),
        GroupRec {
            id,
            seq,
            cluster_id: c,
            name: name.to_string(),
            node_id: node,
            lvs_name: format!("LVS_{}", &node.simple().to_string()[..8]),
            members: vec![member],
            policy_id: None,
            group_seq: 0,
            snapshots: Vec::new(),
            generations: Vec::new(),
            next_ms: now,
            active: None,
        },
    );
    id
}

fn group(t: &Tables, c: Uuid, id: Uuid) -> Result<GroupRec, ApiError> {
    match t.groups.get(&id.to_string()) {
        Some(g) if g.cluster_id == c => Ok(g.clone()),
        _ => Err(ApiError::not_found(format!(
            "Consistency group {id} not found"
        ))),
    }
}

fn group_seq(req: &ApiReq) -> Result<u64, ApiError> {
    let raw = req.params.get("group_seq").cloned().unwrap_or_default();
    raw.parse().map_err(|_| {
        ApiError::invalid(
            "int_parsing",
            vec![json!("path"), json!("group_seq")],
            "Input should be a valid integer, unable to parse string as an integer",
            json!(raw),
        )
    })
}

fn snapshot_dto(g: &GroupSnapRec) -> GroupSnapshot {
    GroupSnapshot {
        group_seq: g.group_seq,
        members: g
            .members
            .iter()
            .map(|(l, s)| GroupSnapshotMember {
                lvol_id: *l,
                snapshot_id: *s,
            })
            .collect(),
        created_at: Some(render::iso_time(g.created_ms)),
        name: g.name.clone(),
    }
}

fn save(st: &mut St<'_>, g: GroupRec) {
    st.t.groups.insert(g.id.to_string(), g);
}

pub fn handle(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let c = req.id("cluster_id");
    if (req.method.as_str(), req.route.as_str()) == ("GET", api::CONSISTENCY_GROUPS) {
        let name = req.q("name");
        return Ok(Reply::ok(render::list(
            st.t.groups
                .values()
                .filter(|g| g.cluster_id == c && name.is_none_or(|n| g.name == n)),
            |g| g.seq,
            |g| dto(st.t, g),
        )));
    }
    let mut g = group(st.t, c, req.id("group_id"))?;
    match (req.method.as_str(), req.route.as_str()) {
        ("GET", api::GROUP_MEMBERS) => Ok(Reply::ok(json!(
            g.members
                .iter()
                .map(|m| ConsistencyGroupMember {
                    lvol_id: m.lvol_id,
                    added_seq: m.added_seq,
                    removed_seq: m.removed_seq,
                })
                .collect::<Vec<_>>()
        ))),
        ("DELETE", api::GROUP_MEMBER) => {
            let lvol = req.id("lvol_id");
            let seq = st.seq();
            let Some(m) = g
                .members
                .iter_mut()
                .find(|m| m.lvol_id == lvol && m.removed_seq == 0)
            else {
                return Err(ApiError::not_found(format!(
                    "Volume {lvol} is not a member of consistency group {}",
                    g.name
                )));
            };
            m.removed_seq = seq;
            save(st, g);
            Ok(Reply::empty(204))
        }
        ("GET", api::GROUP_SNAPSHOTS) => Ok(Reply::ok(json!(
            g.snapshots.iter().map(snapshot_dto).collect::<Vec<_>>()
        ))),
        ("POST", api::GROUP_SNAPSHOTS) => {
            let b: GroupSnapshotCreate = match req.body {
                Some(_) => body(st.sim, req)?,
                None => GroupSnapshotCreate::default(),
            };
            let vols = group_members(st.t, &g);
            if vols.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "Consistency group {} has no members to snapshot",
                    g.name
                )));
            }
            let seq = g.group_seq + 1;
            let mut taken = Vec::new();
            for v in vols {
                let Some(rec) = st.t.volumes.get(&v.to_string()).cloned() else {
                    continue;
                };
                let name = format!("{}-{seq}-{}", g.name, rec.name);
                let s = super::snapshot::snapshot_create(st, c, &rec, &name)?;
                taken.push((v, s));
            }
            let snap = GroupSnapRec {
                group_seq: seq,
                members: taken,
                created_ms: st.now,
                name: b.name,
            };
            let out = snapshot_dto(&snap);
            g.group_seq = seq;
            g.snapshots.push(snap);
            let location = format!("/api/v2{}", api::group_snapshot(c, g.id, seq));
            save(st, g);
            Ok(Reply::json(201, json!(out)).with_location(location))
        }
        ("GET", api::GROUP_SNAPSHOT) => {
            let seq = group_seq(req)?;
            let s = g
                .snapshots
                .iter()
                .find(|s| s.group_seq == seq)
                .ok_or_else(|| no_snapshot(&g, seq))?;
            Ok(Reply::ok(json!(snapshot_dto(s))))
        }
        ("DELETE", api::GROUP_SNAPSHOT) => {
            let seq = group_seq(req)?;
            let Some(at) = g.snapshots.iter().position(|s| s.group_seq == seq) else {
                return Err(no_snapshot(&g, seq));
            };
            let s = g.snapshots.remove(at);
            for (_, snap) in s.members {
                crate::clones::drop_snapshot(st, snap);
            }
            save(st, g);
            Ok(Reply::empty(204))
        }
        ("PUT", api::GROUP_REPLICATION) => {
            let b: GroupReplicationUpdate = body(st.sim, req)?;
            attach(st, g, b.replication_policy_id)
        }
        ("POST", api::GROUP_REPLICATION_FAILOVER) if req.q("site").is_some() => {
            let planned = req.q_bool("planned")?;
            let vols = group_members(st.t, &g);
            super::sync::failover_group(st, &vols, req.q("site"), planned)
        }
        ("POST", api::GROUP_REPLICATION_DEMOTE) if req.q("site").is_some() => {
            let vols = group_members(st.t, &g);
            super::sync::demote_group(st, &vols, req.q("site"))
        }
        ("POST", api::GROUP_REPLICATION_FAILOVER) => {
            let results = failover(st, &g);
            Ok(Reply::ok(json!(results)))
        }
        ("POST", api::GROUP_REPLICATION_DEMOTE) => {
            let mut converging = false;
            for v in group_members(st.t, &g) {
                let own = st.t.replications.get(&v.to_string()).cloned();
                let replica_of = replication::replica_relationship(st.t, v);
                converging |= replication::demote(st, v, own, replica_of)?.status == 202;
            }
            Ok(Reply::empty(if converging { 202 } else { 204 }))
        }
        ("POST", api::GROUP_REPLICATION_FAILBACK) => {
            let b: Failback = body(st.sim, req)?;
            let mut rels = Vec::new();
            for v in group_members(st.t, &g) {
                let r = replication::replica_relationship(st.t, v)
                    .or_else(|| st.t.replications.get(&v.to_string()).cloned())
                    .ok_or_else(|| {
                        ApiError::not_found(format!(
                            "Volume {v} of consistency group {} has no replication relationship",
                            g.name
                        ))
                    })?;
                if let Some(sc) = b.source_cluster_id
                    && sc != r.cluster_id
                {
                    return Err(ApiError::bad_request(format!(
                        "Cluster {sc} is not the source cluster {} of volume {v}'s relationship",
                        r.cluster_id
                    )));
                }
                rels.push(r.source_lvol);
            }
            for key in rels {
                if let Some(x) = st.t.replications.get_mut(&key.to_string()) {
                    x.direction = ReplicationDirection::ToSource;
                    x.state = ReplicationState::Replicating;
                    x.running = true;
                }
            }
            st.sim.wake.notify_one();
            Ok(Reply::empty(204))
        }
        ("GET", api::GROUP_REPLICATION_STATUS) => Ok(Reply::ok(json!(status(st, &g)))),
        ("GET", api::GROUP_RESOLUTION) => {
            let active = active(st.t, &g);
            Ok(Reply::ok(json!(GroupResolution {
                named: dto(st.t, &g),
                active: dto(st.t, &active),
            })))
        }
        _ => Err(req.unsimulated()),
    }
}

fn no_snapshot(g: &GroupRec, seq: u64) -> ApiError {
    ApiError::not_found(format!(
        "Consistency group {} has no snapshot {seq}",
        g.name
    ))
}

/// Attach a policy to every member (their relationships then follow the group's
/// schedule), or detach it with `None`. Another policy while one is attached is 412.
fn attach(st: &mut St<'_>, mut g: GroupRec, policy: Option<Uuid>) -> ApiResult {
    let c = g.cluster_id;
    let vols = group_members(st.t, &g);
    let Some(pid) = policy else {
        for v in &vols {
            if let Some(x) = st.t.volumes.get_mut(&v.to_string()) {
                x.replication_policy = None;
            }
            if let Some(r) = st.t.replications.get_mut(&v.to_string())
                && r.group == Some(g.id)
            {
                r.running = false;
                r.group = None;
            }
        }
        g.policy_id = None;
        save(st, g);
        return Ok(Reply::empty(204));
    };
    if let Some(other) = g.policy_id.filter(|p| *p != pid) {
        return Err(ApiError::Http(
            412,
            format!(
                "Consistency group {} replicates with policy {other}; detach it before \
                 attaching policy {pid}",
                g.name
            ),
        ));
    }
    let p = match st.t.policies.get(&pid.to_string()) {
        Some(p) if p.cluster_id == c => p.clone(),
        _ => {
            return Err(ApiError::not_found(format!(
                "ReplicationPolicy {pid} not found"
            )));
        }
    };
    let Some(target) = st.t.targets.get(&p.target_id.to_string()).cloned() else {
        return Err(ApiError::not_found(format!(
            "ReplicationTarget {} of policy {pid} not found",
            p.target_id
        )));
    };
    for v in &vols {
        if let Some(x) = st.t.volumes.get_mut(&v.to_string()) {
            x.replication_policy = Some(pid);
            x.do_replicate = true;
        }
        if let Some(r) = st.t.replications.get_mut(&v.to_string()) {
            r.running = true;
            r.group = Some(g.id);
            r.interval_min = p.interval_min;
            continue;
        }
        let id = st.uuid();
        let seq = st.seq();
        let now = st.now;
        st.t.replications.insert(
            v.to_string(),
            ReplicationRec {
                id,
                seq,
                cluster_id: c,
                source_lvol: *v,
                target_lvol: None,
                target_cluster: target.target_cluster_id,
                target_pool: target.target_pool,
                mode: p.mode,
                state: ReplicationState::Replicating,
                direction: ReplicationDirection::ToTarget,
                running: true,
                interval_min: p.interval_min,
                last_snapshot_ms: None,
                next_ms: now,
                demoted_seq: None,
                snapshot_seq: None,
                replicated_seq: None,
                pending_snapshot: None,
                replicated_snapshots: Vec::new(),
                group: Some(g.id),
            },
        );
    }
    g.policy_id = Some(pid);
    g.next_ms = st.now;
    save(st, g);
    st.sim.wake.notify_one();
    Ok(Reply::empty(204))
}

/// Fail every member over to its replica. When the members are sources, their replicas
/// form the group of the same name on the target cluster (created pinned to the first
/// replica's node), which then serves in this group's stead; when they are replicas, this
/// group serves in its source group's stead.
fn failover(st: &mut St<'_>, g: &GroupRec) -> Vec<FailoverResult> {
    let vols = group_members(st.t, g);
    let mut results = Vec::new();
    let mut sources = Vec::new();
    let mut as_replica = None;
    for v in &vols {
        let replica_of = replication::replica_relationship(st.t, *v);
        let own = st.t.replications.get(&v.to_string()).cloned();
        match (replica_of, own) {
            (Some(r), _) => {
                as_replica = Some(r.cluster_id);
                sources.push(r.source_lvol);
            }
            (None, Some(r)) => sources.push(r.source_lvol),
            (None, None) => results.push(FailoverResult {
                lvol_id: *v,
                status: FailoverStatus::Failed,
                detail: Some("Volume has no replication relationship".into()),
                target_lvol_id: None,
                connection_strings: Vec::new(),
            }),
        }
    }
    let done = replication::failover_all(st, &sources);
    let replicas: Vec<Uuid> = done.iter().filter_map(|r| r.target_lvol_id).collect();
    results.extend(done);
    match as_replica {
        Some(source_cluster) => {
            let source_group = sources.iter().find_map(|s| {
                st.t.groups
                    .values()
                    .find(|x| {
                        x.cluster_id == source_cluster && x.members.iter().any(|m| m.lvol_id == *s)
                    })
                    .map(|x| x.id)
            });
            if let Some(sg) = source_group {
                serve_instead(st, sg, g.id);
            }
        }
        None => {
            let target = replicas
                .first()
                .and_then(|r| st.t.volumes.get(&r.to_string()))
                .map(|v| (v.cluster_id, v.node_id));
            if let Some((tc, node)) = target {
                let mut tg = None;
                for r in &replicas {
                    let known = by_name(st.t, tc, &g.name)
                        .is_some_and(|x| x.members.iter().any(|m| m.lvol_id == *r));
                    if !known {
                        tg = Some(join(st, tc, &g.name, *r, node));
                    } else {
                        tg = by_name(st.t, tc, &g.name).map(|x| x.id);
                    }
                }
                if let Some(tg) = tg {
                    serve_instead(st, g.id, tg);
                }
            }
        }
    }
    results
}

/// Group `live` serves in group `named`'s stead.
fn serve_instead(st: &mut St<'_>, named: Uuid, live: Uuid) {
    if named == live {
        return;
    }
    if let Some(x) = st.t.groups.get_mut(&named.to_string()) {
        x.active = Some(live);
    }
    if let Some(x) = st.t.groups.get_mut(&live.to_string()) {
        x.active = None;
    }
}

/// The group serving for `g`: follow each group's successor until one has none (or,
/// on a loop, the last before a repeat).
fn active(t: &Tables, g: &GroupRec) -> GroupRec {
    let mut cur = g.clone();
    let mut seen = HashSet::from([cur.id]);
    while let Some(next) = cur.active.and_then(|n| t.groups.get(&n.to_string())) {
        if !seen.insert(next.id) {
            break;
        }
        cur = next.clone();
    }
    cur
}

/// The group's replication status: its members' statuses taken together (the worst
/// state, the oldest replication, the largest lag, the sums of what is outstanding).
fn status(st: &St<'_>, g: &GroupRec) -> ReplicationStatus {
    let all: Vec<ReplicationStatus> = group_members(st.t, g)
        .into_iter()
        .filter_map(|v| st.t.volumes.get(&v.to_string()).cloned())
        .map(|v| {
            let own = st.t.replications.get(&v.id.to_string()).cloned();
            let replica_of = replication::replica_relationship(st.t, v.id);
            replication::status(st, &v, own, replica_of)
        })
        .collect();
    let Some(first) = all.first() else {
        return ReplicationStatus {
            role: "none".into(),
            state: "not_replicating".into(),
            ..Default::default()
        };
    };
    let rank = |s: &str| match s {
        "in_sync" => 0,
        "replicating" => 1,
        "lagging" => 2,
        _ => 3,
    };
    let role = if all.iter().all(|s| s.role == first.role) {
        first.role.clone()
    } else {
        "mixed".into()
    };
    let state = all
        .iter()
        .map(|s| s.state.clone())
        .max_by_key(|s| rank(s))
        .unwrap_or_default();
    let last = if all.iter().all(|s| s.last_replicated_at.is_some()) {
        all.iter()
            .filter_map(|s| s.last_replicated_at.clone())
            .min()
    } else {
        None
    };
    ReplicationStatus {
        role,
        state,
        last_replicated_at: last,
        lag_seconds: all.iter().filter_map(|s| s.lag_seconds).reduce(f64::max),
        lag_budget_seconds: first.lag_budget_seconds,
        outstanding_count: all.iter().map(|s| s.outstanding_count).sum(),
        outstanding_bytes: all.iter().map(|s| s.outstanding_bytes).sum(),
        failing_count: all.iter().map(|s| s.failing_count).sum(),
        max_retry_reached: all.iter().any(|s| s.max_retry_reached),
        last_cycle_bytes: all.iter().map(|s| s.last_cycle_bytes).sum(),
        last_cycle_seconds: all.iter().map(|s| s.last_cycle_seconds).fold(0.0, f64::max),
        resyncing: all.iter().any(|s| s.resyncing),
    }
}

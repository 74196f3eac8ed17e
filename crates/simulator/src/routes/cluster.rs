//! Clusters: create, read, rename, delete, their lifecycle (activate, expand, shutdown,
//! start, rebalance), capacity, I/O statistics and event log.

use serde_json::{Value, json};
use simplyblock_controlplane::routes as api;
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use super::lookup::cluster;
use super::request::{ApiReq, body};
use crate::model::*;
use crate::render;
use crate::reply::{ApiError, ApiResult, Reply};
use crate::sim::St;
use crate::store::Tables;

fn samples(t: &Tables, c: &ClusterRec, now: i64) -> Vec<Value> {
    let cap = render::cluster_capacity(t, c, now);
    vec![json!(cap)]
}

fn ec_valid(ndcs: u32, npcs: u32) -> bool {
    matches!(
        (ndcs, npcs),
        (1, 0) | (1, 1) | (2, 1) | (4, 1) | (1, 2) | (2, 2) | (4, 2)
    )
}

pub fn handle(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    // `api` has the routes the client calls; the literals are routes only sbsim serves.
    match (req.method.as_str(), req.route.as_str()) {
        ("GET", api::CLUSTERS) => Ok(Reply::ok(render::list(
            st.t.clusters.values(),
            |c| c.seq,
            |c| render::cluster(st.t, c, st.now),
        ))),
        ("POST", api::CLUSTERS) => cluster_create(st, req),
        ("GET", api::CLUSTER) => {
            let c = cluster(st.t, req.id("cluster_id"))?;
            Ok(Reply::ok(json!(render::cluster(st.t, c, st.now))))
        }
        ("PUT", api::CLUSTER) => {
            let u: ClusterUpdate = body(st.sim, req)?;
            let id = req.id("cluster_id");
            if let Some(name) = u.name {
                if st
                    .t
                    .clusters
                    .values()
                    .any(|c| c.id != id && c.params.name == name)
                {
                    return Err(ApiError::opaque(format!("cluster name {name} is taken")));
                }
                if let Some(c) = st.t.clusters.get_mut(&id.to_string()) {
                    c.params.name = name;
                }
            }
            Ok(Reply::empty(204))
        }
        ("DELETE", api::CLUSTER) => {
            let id = req.id("cluster_id");
            if st.t.nodes.values().any(|n| n.cluster_id == id) {
                return Err(ApiError::conflict(
                    "Can only remove Empty cluster, Storage nodes found",
                ));
            }
            if st.t.pools.values().any(|p| p.cluster_id == id) {
                return Err(ApiError::conflict(
                    "Can only remove Empty cluster, Pools found",
                ));
            }
            st.t.clusters.remove(&id.to_string());
            st.t.tasks.remove_where(|t| t.cluster_id == id);
            Ok(Reply::empty(204))
        }
        ("GET", api::CLUSTER_CAPACITY) => {
            let c = cluster(st.t, req.id("cluster_id"))?;
            if !st.t.nodes.values().any(|n| n.cluster_id == c.id) {
                return Err(ApiError::opaque("no capacity samples yet"));
            }
            Ok(Reply::ok(json!(samples(st.t, c, st.now))))
        }
        ("GET", "/clusters/{cluster_id}/iostats") => {
            let id = req.id("cluster_id");
            if !st.t.nodes.values().any(|n| n.cluster_id == id) {
                return Err(ApiError::opaque("no I/O samples yet"));
            }
            let sample = crate::stats::iostat(st.t, st.now, |v| v.cluster_id == id);
            Ok(Reply::ok(json!([sample])))
        }
        ("GET", "/clusters/{cluster_id}/logs") => {
            let c = cluster(st.t, req.id("cluster_id"))?;
            let limit: usize = req.q("limit").and_then(|l| l.parse().ok()).unwrap_or(50);
            if c.events.is_empty() {
                return Err(ApiError::opaque("no events"));
            }
            let ev: Vec<Value> = c
                .events
                .iter()
                .rev()
                .take(limit)
                .map(|e| json!({"date": e.date, "event": e.event, "message": e.message, "status": "info"}))
                .collect();
            Ok(Reply::ok(json!(ev)))
        }
        ("POST", api::CLUSTER_ACTIVATE) | ("POST", api::CLUSTER_EXPAND) => {
            let c = cluster(st.t, req.id("cluster_id"))?;
            if let Some(job) = lifecycle_job(&req.route, c.id, c.status) {
                st.job(job, 0);
            }
            Ok(Reply::empty(202))
        }
        ("POST", api::CLUSTER_SHUTDOWN) => {
            st.job(
                JobKind::ClusterShutdown {
                    cluster: req.id("cluster_id"),
                },
                0,
            );
            Ok(Reply::empty(202))
        }
        ("POST", api::CLUSTER_START) => {
            st.job(
                JobKind::ClusterStart {
                    cluster: req.id("cluster_id"),
                },
                0,
            );
            Ok(Reply::empty(202))
        }
        ("POST", "/clusters/{cluster_id}/update") => {
            let _: Value = body(st.sim, req)?;
            Ok(Reply::empty(204))
        }
        ("POST", api::CLUSTER_REBALANCE) => {
            let until = st.now + st.sim.timings().rebalance_ms;
            if let Some(c) = st.t.clusters.get_mut(&req.id("cluster_id").to_string()) {
                c.rebalancing_until_ms = until;
            }
            Ok(Reply::empty(204))
        }
        ("POST", "/clusters/{cluster_id}/addreplication") => {
            let b: Value = body(st.sim, req)?;
            let target = b["snapshot_replication_target_cluster"]
                .as_str()
                .and_then(|s| Uuid::parse_str(s).ok());
            match target {
                Some(t) if st.t.clusters.contains(&t.to_string()) => Ok(Reply::empty(202)),
                _ => Err(ApiError::opaque("unknown replication target cluster")),
            }
        }
        _ => Err(req.unsimulated()),
    }
}

/// The job an activation or expansion queues, if the cluster's status allows one.
fn lifecycle_job(route: &str, cluster: Uuid, prev: ClusterStatus) -> Option<JobKind> {
    if route == api::CLUSTER_ACTIVATE {
        matches!(
            prev,
            ClusterStatus::Unready
                | ClusterStatus::Suspended
                | ClusterStatus::Degraded
                | ClusterStatus::ReadOnly
        )
        .then_some(JobKind::ClusterActivate { cluster, prev })
    } else {
        matches!(
            prev,
            ClusterStatus::Active
                | ClusterStatus::InExpansion
                | ClusterStatus::ReadOnly
                | ClusterStatus::Degraded
        )
        .then_some(JobKind::ClusterExpand { cluster, prev })
    }
}

fn cluster_create(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let format = req.format("full")?;
    let p: ClusterCreate = body(st.sim, req)?;
    if !ec_valid(p.distr_ndcs, p.distr_npcs) {
        return Err(ApiError::invalid(
            "value_error",
            vec![json!("body")],
            "Value error, Invalid erasure coding scheme selected",
            req.body.clone().unwrap_or(Value::Null),
        ));
    }
    if !p.name.is_empty() && st.t.clusters.values().any(|c| c.params.name == p.name) {
        return Err(ApiError::conflict(format!(
            "A cluster with the name '{}' already exists",
            p.name
        )));
    }
    if p.distr_npcs > 1 && p.ha_type != HaType::Ha {
        return Err(ApiError::conflict(
            "max_fault_tolerance > 1 requires ha_type='ha'",
        ));
    }
    let id = st.uuid();
    let seq = st.seq();
    let secret = st.alnum(20);
    let now = st.now;
    let rec = ClusterRec {
        id,
        seq,
        nqn: format!("nqn.2023-02.io.simplyblock:{id}"),
        secret,
        status: ClusterStatus::Unready,
        params: p,
        activated: false,
        created_ms: now,
        rebalancing_until_ms: 0,
        events: vec![Event {
            date: now / 1000,
            event: "cluster_create".into(),
            message: format!("Cluster {id} created"),
        }],
    };
    let dto = json!(render::cluster(st.t, &rec, now));
    st.t.clusters.insert(id.to_string(), rec);
    let location = format!("/api/v2{}", api::cluster(id));
    Ok(Reply::created(location, &id.to_string(), dto, &format))
}

//! `/api/v2` handlers: clusters, storage nodes, devices, tasks, pools, management nodes.
//! Volumes and snapshots are in [`crate::api_vol`], migrations and replication in
//! [`crate::api_repl`].

use std::collections::HashMap;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use crate::model::*;
use crate::render;
use crate::reply::{ApiError, ApiResult, Reply};
use crate::sim::{Sim, St};
use crate::store::Tables;

/// One API request after routing.
#[derive(Debug)]
pub struct ApiReq {
    pub method: String,
    /// The OpenAPI template without the `/api/v2` prefix.
    pub route: String,
    pub ids: HashMap<String, Uuid>,
    pub params: HashMap<String, String>,
    pub query: HashMap<String, String>,
    pub body: Option<Value>,
    /// `scheme://host` the client used, for absolute URLs in answers.
    pub base: String,
}

impl ApiReq {
    pub fn id(&self, name: &str) -> Uuid {
        self.ids.get(name).copied().unwrap_or_default()
    }

    pub fn q(&self, name: &str) -> Option<&str> {
        self.query.get(name).map(String::as_str)
    }

    pub fn q_bool(&self, name: &str) -> Result<bool, ApiError> {
        match self.q(name) {
            None => Ok(false),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                _ => Err(ApiError::invalid(
                    "bool_parsing",
                    vec![json!("query"), json!(name)],
                    "Input should be a valid boolean, unable to interpret input",
                    json!(v),
                )),
            },
        }
    }

    pub fn format(&self, default: &str) -> Result<String, ApiError> {
        match self.q("response-format") {
            None => Ok(default.into()),
            Some(f @ ("empty" | "full" | "identifier")) => Ok(f.into()),
            Some(other) => Err(ApiError::invalid(
                "enum",
                vec![json!("query"), json!("response-format")],
                "Input should be 'empty', 'full' or 'identifier'",
                json!(other),
            )),
        }
    }

    pub fn has_key(&self, key: &str) -> bool {
        self.body
            .as_ref()
            .and_then(Value::as_object)
            .is_some_and(|o| o.contains_key(key))
    }

    /// The full template, for spec lookups.
    pub fn template(&self) -> String {
        format!("/api/v2{}", self.route)
    }
}

/// Check the body against the route's request schema (FastAPI's 422) and decode it.
pub fn body<T: DeserializeOwned>(sim: &Sim, req: &ApiReq) -> Result<T, ApiError> {
    let Some((schema, required)) = sim.spec.request_schema(&req.method, &req.template()) else {
        return serde_json::from_value(req.body.clone().unwrap_or(Value::Null)).map_err(|e| {
            ApiError::invalid(
                "value_error",
                vec![json!("body")],
                &e.to_string(),
                Value::Null,
            )
        });
    };
    let instance = match &req.body {
        Some(v) => v.clone(),
        None if required => {
            return Err(ApiError::invalid(
                "missing",
                vec![json!("body")],
                "Field required",
                Value::Null,
            ));
        }
        None => Value::Null,
    };
    let issues = sim.spec.validate(&schema, &instance);
    if !issues.is_empty() {
        return Err(ApiError::Validation(
            issues
                .into_iter()
                .map(|i| {
                    let mut loc = vec![json!("body")];
                    loc.extend(i.loc);
                    json!({"type": i.kind, "loc": loc, "msg": i.msg, "input": i.input})
                })
                .collect(),
        ));
    }
    serde_json::from_value(instance).map_err(|e| {
        ApiError::invalid(
            "value_error",
            vec![json!("body")],
            &e.to_string(),
            Value::Null,
        )
    })
}

// ---- lookups (the dependency layer: a KeyError message keeps its quotes) --------------

pub fn cluster(t: &Tables, id: Uuid) -> Result<&ClusterRec, ApiError> {
    t.clusters
        .get(&id.to_string())
        .ok_or_else(|| ApiError::key_error(format!("Cluster {id} not found")))
}

pub fn node(t: &Tables, c: Uuid, n: Uuid) -> Result<&NodeRec, ApiError> {
    match t.nodes.get(&n.to_string()) {
        None => Err(ApiError::key_error(format!("StorageNode {n} not found"))),
        Some(r) if r.cluster_id != c => {
            Err(ApiError::not_found(format!("StorageNode {n} not found")))
        }
        Some(r) => Ok(r),
    }
}

pub fn pool(t: &Tables, c: Uuid, p: Uuid) -> Result<&PoolRec, ApiError> {
    match t.pools.get(&p.to_string()) {
        None => Err(ApiError::key_error(format!("Pool {p} not found"))),
        Some(r) if r.cluster_id != c => Err(ApiError::not_found(format!("Pool {p} not found"))),
        Some(r) => Ok(r),
    }
}

pub fn volume(t: &Tables, p: Uuid, v: Uuid) -> Result<&VolumeRec, ApiError> {
    match t.volumes.get(&v.to_string()) {
        None => Err(ApiError::key_error(format!("LVol {v} not found"))),
        Some(r) if r.pool_id != p => Err(ApiError::not_found(format!("LVol {v} not found"))),
        Some(r) => Ok(r),
    }
}

pub fn snapshot(t: &Tables, p: Uuid, s: Uuid) -> Result<&SnapshotRec, ApiError> {
    match t.snapshots.get(&s.to_string()) {
        None => Err(ApiError::key_error(format!("Snapshot {s} not found"))),
        Some(r) if r.pool_id != p => Err(ApiError::not_found(format!("Snapshot {s} not found"))),
        Some(r) => Ok(r),
    }
}

/// Resolve every parent the path names, in path order, before any body is looked at.
pub fn resolve_parents(t: &Tables, req: &ApiReq) -> Result<(), ApiError> {
    let c = req.ids.get("cluster_id").copied();
    if let Some(c) = c {
        cluster(t, c)?;
        if let Some(n) = req.ids.get("storage_node_id") {
            node(t, c, *n)?;
        }
        if let Some(p) = req.ids.get("pool_id") {
            pool(t, c, *p)?;
            if let Some(v) = req.ids.get("volume_id")
                && req.route.contains("/volumes/{volume_id}")
            {
                volume(t, *p, *v)?;
            }
            if let Some(s) = req.ids.get("snapshot_id") {
                snapshot(t, *p, *s)?;
            }
        }
    }
    Ok(())
}

fn samples(t: &Tables, c: &ClusterRec, now: i64) -> Vec<Value> {
    let cap = render::cluster_capacity(t, c, now);
    vec![json!(cap)]
}

fn iostat_sample(now: i64) -> Value {
    json!({
        "date": now / 1000,
        "read_bytes": 0, "read_bytes_ps": 0, "read_io_ps": 0, "read_latency_ps": 0,
        "write_bytes": 0, "write_bytes_ps": 0, "write_io_ps": 0, "write_latency_ps": 0,
        "size_total": 0, "size_used": 0,
    })
}

fn ec_valid(ndcs: u32, npcs: u32) -> bool {
    matches!(
        (ndcs, npcs),
        (1, 0) | (1, 1) | (2, 1) | (4, 1) | (1, 2) | (2, 2) | (4, 2)
    )
}

/// The management node sbsim pretends to run on.
pub fn management_node(sim: &Sim) -> ManagementNode {
    ManagementNode {
        id: Uuid::from_u64_pair(
            0x5b51_4d00_0000_4000,
            0x8000_0000_0000_0000 | sim.config.seed,
        ),
        status: "online".into(),
        hostname: "sbsim".into(),
        ip: "127.0.0.1".into(),
    }
}

/// Dispatch one routed, authenticated request.
pub fn handle(sim: &Sim, req: &ApiReq) -> ApiResult {
    sim.mutate(|st| {
        resolve_parents(st.t, req)?;
        let r = req.route.as_str();
        let m = req.method.as_str();
        if r.contains("/storage-pools/{pool_id}/volumes")
            || r.contains("/storage-pools/{pool_id}/snapshots")
        {
            return crate::api_vol::handle(st, req);
        }
        if r.contains("/subsystems/") || r.contains("/replication/") {
            return crate::api_repl::handle(st, req);
        }
        match (m, r) {
            ("GET", "/clusters/") => {
                let now = st.now;
                let list: Vec<Cluster> = render::sorted(st.t.clusters.values(), |c| c.seq)
                    .into_iter()
                    .map(|c| render::cluster(st.t, c, now))
                    .collect();
                Ok(Reply::ok(json!(list)))
            }
            ("POST", "/clusters/") => cluster_create(st, req),
            ("GET", "/clusters/{cluster_id}/") => {
                let c = cluster(st.t, req.id("cluster_id"))?;
                Ok(Reply::ok(json!(render::cluster(st.t, c, st.now))))
            }
            ("PUT", "/clusters/{cluster_id}/") => {
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
            ("DELETE", "/clusters/{cluster_id}/") => {
                let id = req.id("cluster_id");
                if st.t.nodes.values().any(|n| n.cluster_id == id) {
                    return Err(ApiError::conflict(
                        "Can only remove Empty cluster, Storage nodes found",
                    ));
                }
                if st.t.pools.values().any(|p| p.cluster_id == id) {
                    return Err(ApiError::conflict("Can only remove Empty cluster, Pools found"));
                }
                st.t.clusters.remove(&id.to_string());
                let tasks: Vec<String> = st
                    .t
                    .tasks
                    .values()
                    .filter(|t| t.cluster_id == id)
                    .map(|t| t.id.to_string())
                    .collect();
                for k in tasks {
                    st.t.tasks.remove(&k);
                }
                Ok(Reply::empty(204))
            }
            ("GET", "/clusters/{cluster_id}/capacity") => {
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
                Ok(Reply::ok(json!([iostat_sample(st.now)])))
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
            ("POST", "/clusters/{cluster_id}/activate") => {
                let c = cluster(st.t, req.id("cluster_id"))?;
                let prev = c.status;
                if matches!(
                    prev,
                    ClusterStatus::Unready
                        | ClusterStatus::Suspended
                        | ClusterStatus::Degraded
                        | ClusterStatus::ReadOnly
                ) {
                    st.job(JobKind::ClusterActivate { cluster: c.id, prev }, 0);
                }
                Ok(Reply::empty(202))
            }
            ("POST", "/clusters/{cluster_id}/expand") => {
                let c = cluster(st.t, req.id("cluster_id"))?;
                let prev = c.status;
                if matches!(
                    prev,
                    ClusterStatus::Active
                        | ClusterStatus::InExpansion
                        | ClusterStatus::ReadOnly
                        | ClusterStatus::Degraded
                ) {
                    st.job(JobKind::ClusterExpand { cluster: c.id, prev }, 0);
                }
                Ok(Reply::empty(202))
            }
            ("POST", "/clusters/{cluster_id}/shutdown") => {
                st.job(
                    JobKind::ClusterShutdown {
                        cluster: req.id("cluster_id"),
                    },
                    0,
                );
                Ok(Reply::empty(202))
            }
            ("POST", "/clusters/{cluster_id}/start") => {
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
            ("POST", "/clusters/{cluster_id}/rebalance") => {
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
            ("GET", "/clusters/{cluster_id}/storage-nodes/") => {
                let id = req.id("cluster_id");
                let now = st.now;
                let list: Vec<StorageNode> = render::sorted(
                    st.t.nodes.values().filter(|n| n.cluster_id == id),
                    |n| n.seq,
                )
                .into_iter()
                .map(|n| render::node(st.t, n, now))
                .collect();
                Ok(Reply::ok(json!(list)))
            }
            ("POST", "/clusters/{cluster_id}/storage-nodes/") => node_add(st, req),
            ("GET", "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/") => {
                let n = node(st.t, req.id("cluster_id"), req.id("storage_node_id"))?;
                Ok(Reply::ok(json!(render::node(st.t, n, st.now))))
            }
            ("DELETE", "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/") => {
                node_remove(st, req)
            }
            ("GET", "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/capacity")
            | ("GET", "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/iostats") => {
                // The real capacity route returns iostats history too.
                Ok(Reply::ok(json!([iostat_sample(st.now)])))
            }
            ("GET", "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/nics") => {
                let n = node(st.t, req.id("cluster_id"), req.id("storage_node_id"))?;
                let nics: Vec<Nic> = n
                    .data_ips
                    .iter()
                    .enumerate()
                    .map(|(i, (name, ip))| Nic {
                        id: format!("{}-nic{i}", n.id),
                        device_name: name.clone(),
                        address: ip.clone(),
                        net_type: "ether".into(),
                        status: if n.status == NodeStatus::Online { "online" } else { "offline" }
                            .into(),
                    })
                    .collect();
                Ok(Reply::ok(json!(nics)))
            }
            ("GET", "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/nics/{nic_id}/iostats") => {
                let n = node(st.t, req.id("cluster_id"), req.id("storage_node_id"))?;
                let nic = req.params.get("nic_id").cloned().unwrap_or_default();
                let known = (0..n.data_ips.len()).any(|i| format!("{}-nic{i}", n.id) == nic);
                if !known {
                    return Err(ApiError::not_found(format!("NIC {nic} not found")));
                }
                Ok(Reply::ok(json!([iostat_sample(st.now)])))
            }
            ("POST", "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/suspend") => {
                let _force = req.q_bool("force")?;
                let key = req.id("storage_node_id").to_string();
                let n = node(st.t, req.id("cluster_id"), req.id("storage_node_id"))?;
                if n.status != NodeStatus::Online {
                    return Err(ApiError::opaque(format!("node is {}, not online", n.status)));
                }
                if let Some(n) = st.t.nodes.get_mut(&key) {
                    n.status = NodeStatus::Suspended;
                    n.auto_restart_disabled = true;
                }
                Ok(Reply::empty(204))
            }
            ("POST", "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/resume") => {
                let key = req.id("storage_node_id").to_string();
                let n = node(st.t, req.id("cluster_id"), req.id("storage_node_id"))?;
                if n.status != NodeStatus::Suspended {
                    return Err(ApiError::opaque(format!("node is {}, not suspended", n.status)));
                }
                if let Some(n) = st.t.nodes.get_mut(&key) {
                    n.status = NodeStatus::Online;
                    n.auto_restart_disabled = false;
                }
                Ok(Reply::empty(204))
            }
            ("POST", "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/shutdown") => {
                node_shutdown(st, req)
            }
            ("POST", "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/restart")
            | ("POST", "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/start") => {
                let params: NodeRestart = body(st.sim, req)?;
                st.job(
                    JobKind::NodeRestart {
                        node: req.id("storage_node_id"),
                        params,
                    },
                    0,
                );
                Ok(Reply::empty(202))
            }
            ("POST", "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/promote") => {
                let nid = req.id("storage_node_id");
                st.t.devices.update_where(
                    |d| d.node_id == nid && matches!(d.status, DeviceStatus::New | DeviceStatus::Removed),
                    |d| {
                        d.status = if d.status == DeviceStatus::New {
                            DeviceStatus::Online
                        } else {
                            DeviceStatus::Failed
                        }
                    },
                );
                Ok(Reply::empty(204))
            }
            ("GET", "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/devices/") => {
                let nid = req.id("storage_node_id");
                let now = st.now;
                let list: Vec<Device> = render::sorted(
                    st.t.devices.values().filter(|d| d.node_id == nid),
                    |d| d.seq,
                )
                .into_iter()
                .map(|d| render::device(st.t, d, now))
                .collect();
                Ok(Reply::ok(json!(list)))
            }
            (_, r) if r.starts_with("/clusters/{cluster_id}/storage-nodes/{storage_node_id}/devices/{device_id}/") => {
                device_route(st, req)
            }
            ("GET", "/clusters/{cluster_id}/tasks/") => {
                let id = req.id("cluster_id");
                let list: Vec<Task> = render::sorted(
                    st.t.tasks
                        .values()
                        .filter(|t| t.cluster_id == id && t.function_name != "device_migration"),
                    |t| t.seq,
                )
                .into_iter()
                .map(render::task)
                .collect();
                Ok(Reply::ok(json!(list)))
            }
            ("GET", "/clusters/{cluster_id}/tasks/{task_id}/") => {
                // The real lookup raises KeyError past its None check: 500, not 404.
                match st.t.tasks.get(&req.id("task_id").to_string()) {
                    Some(t) if t.cluster_id == req.id("cluster_id") => {
                        Ok(Reply::ok(json!(render::task(t))))
                    }
                    _ => Err(ApiError::opaque("task not found (a KeyError on the real server)")),
                }
            }
            ("GET", "/clusters/{cluster_id}/storage-pools/") => {
                let id = req.id("cluster_id");
                let now = st.now;
                let list: Vec<Pool> = render::sorted(
                    st.t.pools.values().filter(|p| p.cluster_id == id),
                    |p| p.seq,
                )
                .into_iter()
                .map(|p| render::pool(st.t, p, now))
                .collect();
                Ok(Reply::ok(json!(list)))
            }
            ("POST", "/clusters/{cluster_id}/storage-pools/") => pool_create(st, req),
            ("GET", "/clusters/{cluster_id}/storage-pools/{pool_id}/") => {
                let p = pool(st.t, req.id("cluster_id"), req.id("pool_id"))?;
                Ok(Reply::ok(json!(render::pool(st.t, p, st.now))))
            }
            ("PUT", "/clusters/{cluster_id}/storage-pools/{pool_id}/") => {
                let u: PoolUpdate = body(st.sim, req)?;
                if let Some(p) = st.t.pools.get_mut(&req.id("pool_id").to_string()) {
                    if let Some(v) = u.name {
                        p.name = v;
                    }
                    if let Some(v) = u.max_size {
                        p.max_size = v;
                    }
                    if let Some(v) = u.volume_max_size {
                        p.volume_max_size = v;
                    }
                    if let Some(v) = u.max_rw_iops {
                        p.max_rw_iops = v;
                    }
                    if let Some(v) = u.max_rw_mbytes {
                        p.max_rw_mbytes = v;
                    }
                    if let Some(v) = u.max_r_mbytes {
                        p.max_r_mbytes = v;
                    }
                    if let Some(v) = u.max_w_mbytes {
                        p.max_w_mbytes = v;
                    }
                }
                Ok(Reply::empty(204))
            }
            ("DELETE", "/clusters/{cluster_id}/storage-pools/{pool_id}/") => {
                let p = pool(st.t, req.id("cluster_id"), req.id("pool_id"))?;
                if p.status == ActiveStatus::Inactive {
                    return Err(ApiError::bad_request("Pool is inactive"));
                }
                let pid = p.id;
                if st
                    .t
                    .volumes
                    .values()
                    .any(|v| v.pool_id == pid && v.status != VolumeStatus::Deleted)
                {
                    return Err(ApiError::opaque("lvols found"));
                }
                st.t.pools.remove(&pid.to_string());
                Ok(Reply::empty(204))
            }
            ("GET", "/clusters/{cluster_id}/storage-pools/{pool_id}/iostats") => {
                Ok(Reply::ok(json!([iostat_sample(st.now)])))
            }
            ("POST", "/clusters/{cluster_id}/storage-pools/{pool_id}/host") => {
                let h: HostNqn = body(st.sim, req)?;
                let p = pool(st.t, req.id("cluster_id"), req.id("pool_id"))?;
                if !p.dhchap {
                    return Err(ApiError::bad_request("Pool does not have DHCHAP enabled"));
                }
                if p.allowed_hosts.contains(&h.host_nqn) {
                    return Err(ApiError::bad_request(format!(
                        "Host {} is already in the pool's allowed list",
                        h.host_nqn
                    )));
                }
                if let Some(p) = st.t.pools.get_mut(&req.id("pool_id").to_string()) {
                    p.allowed_hosts.push(h.host_nqn);
                }
                Ok(Reply::empty(204))
            }
            ("DELETE", "/clusters/{cluster_id}/storage-pools/{pool_id}/host") => {
                let h: HostNqn = body(st.sim, req)?;
                let p = pool(st.t, req.id("cluster_id"), req.id("pool_id"))?;
                if !p.allowed_hosts.contains(&h.host_nqn) {
                    return Err(ApiError::bad_request(format!(
                        "Host {} is not in the pool's allowed list",
                        h.host_nqn
                    )));
                }
                if let Some(p) = st.t.pools.get_mut(&req.id("pool_id").to_string()) {
                    p.allowed_hosts.retain(|x| *x != h.host_nqn);
                }
                Ok(Reply::empty(204))
            }
            ("GET", "/management-nodes/") | ("GET", "/management-nodes/{management_node_id}/") => {
                let Some(c) = req.q("cluster_id") else {
                    return Err(ApiError::invalid(
                        "missing",
                        vec![json!("query"), json!("cluster_id")],
                        "Field required",
                        Value::Null,
                    ));
                };
                if Uuid::parse_str(c).is_err() {
                    return Err(ApiError::invalid(
                        "uuid_parsing",
                        vec![json!("query"), json!("cluster_id")],
                        "Input should be a valid UUID",
                        json!(c),
                    ));
                }
                let mn = management_node(st.sim);
                if r == "/management-nodes/" {
                    Ok(Reply::ok(json!([mn])))
                } else if req.id("management_node_id") == mn.id {
                    Ok(Reply::ok(json!(mn)))
                } else {
                    Err(ApiError::opaque("management node not found (a KeyError on the real server)"))
                }
            }
            ("GET", "/clusters/{cluster_id}/backups/")
            | ("GET", "/clusters/{cluster_id}/backups/backup-policies/")
            | ("GET", "/clusters/{cluster_id}/backups/sources") => Ok(Reply::ok(json!([]))),
            // sbsim keeps no backups, so every backup id is unknown: the lookup's 404.
            ("GET", "/clusters/{cluster_id}/backups/{backup_id}/") => Err(ApiError::not_found(
                format!("Backup {} not found", req.id("backup_id")),
            )),
            ("GET", "/clusters/{cluster_id}/backups/export") => match req.query.get("backup_id") {
                Some(b) => Err(ApiError::not_found(format!("Backup {b} not found"))),
                None => Ok(Reply::ok(json!([]))),
            },
            ("DELETE", "/clusters/{cluster_id}/backups/{volume_id}") => Err(ApiError::bad_request(
                format!("No backups found for lvol {}", req.id("volume_id")),
            )),
            _ => Err(ApiError::opaque(format!(
                "sbsim does not simulate {m} {r}"
            ))),
        }
    })
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
    let dto = render::cluster(st.t, &rec, now);
    st.t.clusters.insert(id.to_string(), rec);
    Ok(Reply::created(
        format!("/api/v2/clusters/{id}/"),
        &id.to_string(),
        json!(dto),
        &format,
    ))
}

fn node_add(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let format = req.format("identifier")?;
    let c = req.id("cluster_id");
    let raw: Map<String, Value> = body(st.sim, req)?;
    let p: StorageNodeAdd = serde_json::from_value(Value::Object(raw.clone())).map_err(|e| {
        ApiError::invalid(
            "value_error",
            vec![json!("body")],
            &e.to_string(),
            Value::Null,
        )
    })?;
    let open = st.t.tasks.values().any(|t| {
        t.cluster_id == c
            && t.function_name == "node_add"
            && t.status != TaskStatus::Done
            && t.params.get("node_addr").and_then(Value::as_str) == Some(p.node_address.as_str())
    });
    if open {
        return Err(ApiError::opaque("Failed to create add-node task"));
    }
    let mut params = raw;
    params.insert("node_addr".into(), json!(p.node_address));
    params.insert("iface_name".into(), json!(p.interface_name));
    params.insert("expansion".into(), json!(p.expand));
    params.insert("cluster_id".into(), json!(c));
    params.remove("node_address");
    params.remove("interface_name");
    params.remove("expand");
    let task = st.task(c, "node_add", None, None, params, 11);
    st.event(
        c,
        "node_add",
        format!("node add queued for {}", p.node_address),
    );
    let loc = format!("/api/v2/clusters/{c}/tasks/{task}/");
    let full =
        st.t.tasks
            .get(&task.to_string())
            .map(|t| json!(render::task(t)))
            .unwrap_or(Value::Null);
    Ok(Reply::created(loc, &task.to_string(), full, &format))
}

fn node_remove(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let _force_remove = req.q_bool("force_remove")?;
    let _force_migrate = req.q_bool("force_migrate")?;
    let force_delete = req.q_bool("force_delete")?;
    let c = req.id("cluster_id");
    let nid = req.id("storage_node_id");
    let n = node(st.t, c, nid)?;
    let open = st.t.tasks.values().find(|t| {
        t.function_name == "node_removal" && t.node_id == Some(nid) && t.status != TaskStatus::Done
    });
    if n.status == NodeStatus::Removed {
        if force_delete {
            let devs: Vec<String> =
                st.t.devices
                    .values()
                    .filter(|d| d.node_id == nid)
                    .map(|d| d.id.to_string())
                    .collect();
            for d in devs {
                st.t.devices.remove(&d);
            }
            st.t.nodes.remove(&nid.to_string());
            return Ok(Reply::empty(204));
        }
        return Err(ApiError::opaque("node is already removed"));
    }
    if open.is_some() {
        return Ok(Reply::empty(204));
    }
    if !matches!(n.status, NodeStatus::Online | NodeStatus::Suspended) {
        return Err(ApiError::opaque(format!("node is {}", n.status)));
    }
    let others_ok =
        st.t.nodes
            .values()
            .filter(|o| o.cluster_id == c && o.id != nid)
            .all(|o| matches!(o.status, NodeStatus::Online | NodeStatus::Removed));
    if !others_ok {
        return Err(ApiError::opaque(
            "another node of the cluster is not online",
        ));
    }
    let has_data =
        st.t.volumes
            .values()
            .any(|v| v.node_id == nid && v.status != VolumeStatus::Deleted)
            || st.t.snapshots.values().any(|s| {
                st.t.volumes
                    .get(&s.volume_id.to_string())
                    .is_some_and(|v| v.node_id == nid)
            });
    if has_data {
        return Err(ApiError::opaque(
            "the node still holds volumes or snapshots",
        ));
    }
    let mut params = Map::new();
    params.insert("node_id".into(), json!(nid));
    st.task(c, "node_removal", Some(nid), None, params, -1);
    Ok(Reply::empty(204))
}

fn node_shutdown(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let force = req.q_bool("force")?;
    let c = req.id("cluster_id");
    let nid = req.id("storage_node_id");
    let n = node(st.t, c, nid)?;
    if !force {
        let status = n.status;
        if let Some(other) = st.t.nodes.values().find(|o| {
            o.cluster_id == c
                && o.id != nid
                && matches!(o.status, NodeStatus::InRestart | NodeStatus::InShutdown)
        }) {
            return Err(ApiError::conflict(format!(
                "Node {} is restarting in this cluster, cannot shutdown {nid} concurrently",
                other.id
            )));
        }
        if status == NodeStatus::InShutdown {
            return Err(ApiError::conflict(format!(
                "Node {nid} is already shutting down"
            )));
        }
        if let Some(t) = st.t.tasks.values().find(|t| {
            t.node_id == Some(nid)
                && t.function_name == "node_restart"
                && t.status != TaskStatus::Done
        }) {
            return Err(ApiError::conflict(format!("Restart task found: {}", t.id)));
        }
        let migrations =
            st.t.tasks
                .values()
                .filter(|t| {
                    t.cluster_id == c
                        && t.function_name.contains("migration")
                        && t.status != TaskStatus::Done
                })
                .count();
        if migrations > 0
            && st
                .t
                .clusters
                .get(&c.to_string())
                .is_some_and(|c| c.params.distr_npcs < 2)
        {
            return Err(ApiError::conflict(format!(
                "Migration task found: {migrations} (data migration in progress), can not shutdown storage node or use --force"
            )));
        }
        if !matches!(
            status,
            NodeStatus::Online | NodeStatus::Suspended | NodeStatus::Down
        ) {
            return Err(ApiError::conflict(format!(
                "Node is in {status} state; only online/suspended/down can be gracefully shut down. Use --force."
            )));
        }
    }
    st.job(JobKind::NodeShutdown { node: nid }, 0);
    Ok(Reply::empty(202))
}

fn device_route(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let nid = req.id("storage_node_id");
    let did = req.id("device_id");
    let key = did.to_string();
    let d = match st.t.devices.get(&key) {
        Some(d) if d.node_id == nid => d.clone(),
        _ => return Err(ApiError::not_found(format!("Device {did} not found"))),
    };
    let restart_task = st.t.tasks.values().any(|t| {
        t.device_id == Some(did)
            && t.function_name == "device_restart"
            && t.status != TaskStatus::Done
    });
    let tail = req.route.rsplit('/').next().unwrap_or("");
    match (req.method.as_str(), tail) {
        ("GET", "") => Ok(Reply::ok(json!(render::device(st.t, &d, st.now)))),
        ("POST", "remove") => {
            let _ = req.q_bool("force")?;
            if matches!(
                d.status,
                DeviceStatus::Removed
                    | DeviceStatus::Failed
                    | DeviceStatus::FailedAndMigrated
                    | DeviceStatus::New
            ) || restart_task
            {
                return Err(ApiError::opaque(format!("device is {}", d.status)));
            }
            if let Some(d) = st.t.devices.get_mut(&key) {
                d.status = DeviceStatus::Removed;
            }
            Ok(Reply::empty(204))
        }
        ("POST", "restart") => {
            let _ = req.q_bool("force")?;
            if !matches!(d.status, DeviceStatus::Removed | DeviceStatus::Failed) {
                return Err(ApiError::opaque(format!("device is {}", d.status)));
            }
            if let Some(d) = st.t.devices.get_mut(&key) {
                d.status = DeviceStatus::Online;
                d.io_error = false;
            }
            Ok(Reply::empty(204))
        }
        ("POST", "reset") => {
            if matches!(
                d.status,
                DeviceStatus::Removed | DeviceStatus::FailedAndMigrated
            ) || restart_task
            {
                return Err(ApiError::opaque(format!("device is {}", d.status)));
            }
            if let Some(d) = st.t.devices.get_mut(&key) {
                d.io_error = false;
            }
            Ok(Reply::empty(204))
        }
        ("GET", "capacity") | ("GET", "iostats") => Ok(Reply::ok(json!([iostat_sample(st.now)]))),
        ("GET", "health-info") => Ok(Reply::ok(json!({
            "id": d.id, "model_number": d.model, "serial_number": d.serial,
            "firmware_revision": "SIM1", "traddr": d.pcie, "critical_warning": 0,
            "temperature_celsius": 38, "available_spare_percentage": 100,
            "available_spare_threshold_percentage": 10, "percentage_used": 1,
            "data_units_read": 0, "data_units_written": 0, "host_read_commands": 0,
            "host_write_commands": 0, "controller_busy_time": 0, "power_cycles": 3,
            "power_on_hours": 100, "unsafe_shutdowns": 0, "media_errors": 0,
            "num_err_log_entries": 0, "warning_temperature_time_minutes": 0,
            "critical_composite_temperature_time_minutes": 0
        }))),
        _ => Err(ApiError::opaque("unsupported device route")),
    }
}

fn pool_create(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let format = req.format("full")?;
    let p: PoolCreate = body(st.sim, req)?;
    let c = req.id("cluster_id");
    if st
        .t
        .pools
        .values()
        .any(|x| x.cluster_id == c && x.name == p.name)
    {
        return Err(ApiError::conflict(format!(
            "Pool {} already exists",
            p.name
        )));
    }
    let id = st.uuid();
    let seq = st.seq();
    let rec = PoolRec {
        id,
        seq,
        cluster_id: c,
        name: p.name,
        status: ActiveStatus::Active,
        max_size: p.pool_max,
        volume_max_size: p.volume_max_size,
        max_rw_iops: p.max_rw_iops,
        max_rw_mbytes: p.max_rw_mbytes,
        max_r_mbytes: p.max_r_mbytes,
        max_w_mbytes: p.max_w_mbytes,
        dhchap: p.dhchap,
        allowed_hosts: Vec::new(),
    };
    let dto = render::pool(st.t, &rec, st.now);
    st.t.pools.insert(id.to_string(), rec);
    Ok(Reply::created(
        format!("/api/v2/clusters/{c}/storage-pools/{id}/"),
        &id.to_string(),
        json!(dto),
        &format,
    ))
}

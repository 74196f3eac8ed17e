//! Volumes (lvols), their connect strings and hosts, snapshots and clones.

use serde_json::{Value, json};
use simplyblock_api::quantity;
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use crate::api::{ApiReq, body, cluster, pool, snapshot, volume};
use crate::model::*;
use crate::render;
use crate::reply::{ApiError, ApiResult, Reply};
use crate::sim::St;
use crate::store::Tables;

const MIN_VOLUME: u64 = 100_000_000;

fn mutable_cluster(t: &Tables, c: Uuid) -> Result<(), ApiError> {
    let cl = cluster(t, c)?;
    if !matches!(cl.status, ClusterStatus::Active | ClusterStatus::Degraded) {
        return Err(ApiError::opaque(format!(
            "Cluster is not active, status: {}",
            cl.status
        )));
    }
    Ok(())
}

fn name_taken(t: &Tables, name: &str) -> bool {
    t.volumes
        .values()
        .any(|v| v.name == name && v.status != VolumeStatus::Deleted)
}

fn dhchap_key(st: &mut St<'_>) -> String {
    format!("DHHC-1:01:{}:", st.alnum(48))
}

/// Online nodes with an lvstore, least loaded first.
fn placement(t: &Tables, c: Uuid) -> Vec<Uuid> {
    let mut nodes: Vec<&NodeRec> = t
        .nodes
        .values()
        .filter(|n| n.cluster_id == c && n.status == NodeStatus::Online && n.lvstore)
        .collect();
    let load = |id: Uuid| {
        t.volumes
            .values()
            .filter(|v| v.node_id == id && v.status != VolumeStatus::Deleted)
            .count()
    };
    nodes.sort_by_key(|n| (load(n.id), n.seq));
    nodes.into_iter().map(|n| n.id).collect()
}

fn secondaries(t: &Tables, c: Uuid, primary: Uuid, ha: bool, npcs: u32) -> Vec<Uuid> {
    if !ha {
        return Vec::new();
    }
    let mut out = Vec::new();
    if let Some(s) = t
        .nodes
        .get(&primary.to_string())
        .and_then(|n| n.secondary_node_id)
        && t.nodes
            .get(&s.to_string())
            .is_some_and(|n| n.status == NodeStatus::Online)
    {
        out.push(s);
    }
    for id in placement(t, c) {
        if out.len() >= npcs.max(1) as usize {
            break;
        }
        if id != primary && !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

fn location(c: Uuid, p: Uuid, v: Uuid) -> String {
    format!("/api/v2/clusters/{c}/storage-pools/{p}/volumes/{v}/")
}

fn count_fields(v: &Value, schema: &Value) -> usize {
    let props = schema["properties"].as_object();
    v.as_object()
        .map(|o| {
            o.keys()
                .filter(|k| props.is_some_and(|p| p.contains_key(*k)))
                .count()
        })
        .unwrap_or(0)
}

/// The volume-create union: `_CreateParams` or `_CloneParams`. Like pydantic's smart
/// union, the valid variant with more fields present wins; with none valid, the 422
/// lists the errors of both.
fn create_or_clone(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let format = req.format("empty")?;
    let mut b = match &req.body {
        Some(b) => b.clone(),
        None => {
            return Err(ApiError::invalid(
                "missing",
                vec![json!("body")],
                "Field required",
                Value::Null,
            ));
        }
    };
    // `size` may be a size string ("10G", "10Gi"); the validator turns it into bytes.
    if let Some(s) = b.get("size").and_then(Value::as_str) {
        match quantity::parse(s) {
            Ok(n) => b["size"] = json!(n),
            Err(_) => {
                return Err(ApiError::invalid(
                    "value_error",
                    vec![json!("body"), json!("_CreateParams"), json!("size")],
                    "Value error, invalid size",
                    json!(s),
                ));
            }
        }
    }
    let spec = &st.sim.spec;
    let doc = spec.doc();
    let create_schema = &doc["components"]["schemas"]["_CreateParams"];
    let clone_schema = &doc["components"]["schemas"]["_CloneParams"];
    let e1 = spec.validate(&spec.component("_CreateParams"), &b);
    let e2 = spec.validate(&spec.component("_CloneParams"), &b);
    let as_clone = match (e1.is_empty(), e2.is_empty()) {
        (true, true) => count_fields(&b, clone_schema) > count_fields(&b, create_schema),
        (true, false) => false,
        (false, true) => true,
        (false, false) => {
            let mut d = Vec::new();
            for (name, issues) in [("_CreateParams", e1), ("_CloneParams", e2)] {
                for i in issues {
                    let mut loc = vec![json!("body"), json!(name)];
                    loc.extend(i.loc);
                    d.push(json!({"type": i.kind, "loc": loc, "msg": i.msg, "input": i.input}));
                }
            }
            return Err(ApiError::Validation(d));
        }
    };
    let c = req.id("cluster_id");
    let p = req.id("pool_id");
    let id = if as_clone {
        let params: VolumeClone = serde_json::from_value(b).map_err(|e| {
            ApiError::invalid(
                "value_error",
                vec![json!("body")],
                &e.to_string(),
                Value::Null,
            )
        })?;
        let Some(snap) = params.snapshot_id else {
            return Err(ApiError::opaque("snapshot_id is null"));
        };
        clone_from_snapshot(
            st,
            c,
            p,
            snap,
            &params.name,
            params.size,
            params.pvc_name,
            params.delete_snap_on_lvol_delete,
        )?
    } else {
        let params: VolumeCreate = serde_json::from_value(b).map_err(|e| {
            ApiError::invalid(
                "value_error",
                vec![json!("body")],
                &e.to_string(),
                Value::Null,
            )
        })?;
        create_volume(st, c, p, params)?
    };
    let full =
        st.t.volumes
            .get(&id.to_string())
            .map(|v| json!(render::volume(st.t, v, &req.base, true, st.now)))
            .unwrap_or(Value::Null);
    Ok(Reply::created(
        location(c, p, id),
        &id.to_string(),
        full,
        &format,
    ))
}

fn create_volume(st: &mut St<'_>, c: Uuid, p: Uuid, v: VolumeCreate) -> Result<Uuid, ApiError> {
    let pl = pool(st.t, c, p)?.clone();
    if pl.status != ActiveStatus::Active {
        return Err(ApiError::opaque("Pool is disabled"));
    }
    if name_taken(st.t, &v.name) {
        return Err(ApiError::conflict(format!("Volume {} exists", v.name)));
    }
    mutable_cluster(st.t, c)?;
    if v.size < MIN_VOLUME {
        return Err(ApiError::opaque("Size must be larger than 100M"));
    }
    if pl.volume_max_size > 0 && v.size > pl.volume_max_size {
        return Err(ApiError::opaque(
            "Volume size exceeds the pool's volume_max_size",
        ));
    }
    let used: u64 =
        st.t.volumes
            .values()
            .filter(|x| x.pool_id == p && x.status != VolumeStatus::Deleted)
            .map(|x| x.size)
            .sum();
    if pl.max_size > 0 && used + v.size > pl.max_size {
        return Err(ApiError::opaque("Pool capacity would be exceeded"));
    }
    let max_ns = v
        .max_namespace_per_subsys
        .unwrap_or(if v.namespaced { 32 } else { 1 });
    if max_ns > 50 {
        return Err(ApiError::opaque(format!(
            "max_namespace_per_subsys={max_ns} exceeds the hard limit of 50"
        )));
    }
    let cl = cluster(st.t, c)?.clone();
    let candidates = placement(st.t, c);
    if candidates.is_empty() {
        return Err(ApiError::opaque("No online Storage nodes found"));
    }
    let ndcs = if v.ndcs == 0 {
        cl.params.distr_ndcs
    } else {
        v.ndcs
    };
    let npcs = if v.npcs == 0 {
        cl.params.distr_npcs
    } else {
        v.npcs
    };
    let online = candidates.len() as u32;
    if online < ndcs + npcs {
        return Err(ApiError::opaque(format!(
            "Online storage nodes: {online} are less than the required LVol geometry: {}",
            ndcs + npcs
        )));
    }
    let primary = match &v.host_id {
        Some(h) => {
            st.t.nodes
                .values()
                .find(|n| {
                    n.cluster_id == c
                        && n.status == NodeStatus::Online
                        && (n.id.to_string() == *h || n.worker == *h)
                })
                .map(|n| n.id)
                .ok_or_else(|| ApiError::opaque(format!("host {h} is not an online node")))?
        }
        None => candidates[0],
    };
    let ha = match v.ha_type {
        Some(h) => h == HaType::Ha,
        None => cl.params.ha_type == HaType::Ha,
    };
    let id = st.uuid();
    let seq = st.seq();
    // Namespaced volumes share a subsystem on the node until it is full.
    let shared = (max_ns > 1)
        .then(|| {
            let mut groups: std::collections::BTreeMap<&str, u32> = Default::default();
            for x in st.t.volumes.values().filter(|x| {
                x.node_id == primary
                    && x.max_namespace_per_subsys == max_ns
                    && x.status != VolumeStatus::Deleted
            }) {
                *groups.entry(x.nqn.as_str()).or_default() += 1;
            }
            groups
                .into_iter()
                .find(|(_, n)| *n < max_ns)
                .map(|(nqn, n)| (nqn.to_string(), n + 1))
        })
        .flatten();
    let (nqn, ns_id) = shared.unwrap_or_else(|| (format!("{}:lvol:{id}", cl.nqn), 1));
    let mut hosts = Vec::new();
    for h in v.allowed_hosts.clone().unwrap_or_default() {
        let k1 = dhchap_key(st);
        let k2 = dhchap_key(st);
        hosts.push(HostEntry {
            nqn: h,
            dhchap_key: k1,
            dhchap_ctrlr_key: k2,
        });
    }
    let blobid = st.below(1 << 20);
    let secondary_ids = secondaries(st.t, c, primary, ha, npcs);
    let rec = VolumeRec {
        id,
        seq,
        cluster_id: c,
        pool_id: p,
        name: v.name,
        status: VolumeStatus::Online,
        size: v.size,
        node_id: primary,
        secondary_ids,
        nqn,
        ns_id,
        ha,
        ndcs,
        npcs,
        pvc_name: v.pvc_name.unwrap_or_default(),
        namespace: String::new(),
        priority_class: v.priority_class,
        fabric: v.fabric,
        blobid,
        max_namespace_per_subsys: max_ns,
        max_rw_iops: v.max_rw_iops,
        max_rw_mbytes: v.max_rw_mbytes,
        max_r_mbytes: v.max_r_mbytes,
        max_w_mbytes: v.max_w_mbytes,
        allowed_hosts: hosts,
        cloned_from: None,
        snapshot_name: String::new(),
        delete_snap_on_delete: false,
        replication_policy: None,
        do_replicate: v.do_replicate,
        created_ms: st.now,
    };
    if let Some(dir) = &st.sim.config.volume_files {
        crate::volfiles::create(dir, id, rec.size);
    }
    st.t.volumes.insert(id.to_string(), rec);
    Ok(id)
}

#[allow(clippy::too_many_arguments)]
fn clone_from_snapshot(
    st: &mut St<'_>,
    c: Uuid,
    p: Uuid,
    snap: Uuid,
    name: &str,
    size: u64,
    pvc_name: Option<String>,
    delete_snap: bool,
) -> Result<Uuid, ApiError> {
    let s = match st.t.snapshots.get(&snap.to_string()) {
        Some(s) if s.cluster_id == c && !s.soft_deleted => s.clone(),
        _ => return Err(ApiError::opaque(format!("Snapshot {snap} not found"))),
    };
    if name_taken(st.t, name) {
        return Err(ApiError::conflict(format!("Volume {name} exists")));
    }
    mutable_cluster(st.t, c)?;
    let size = if size == 0 { s.size } else { size };
    if size < s.size {
        return Err(ApiError::opaque("clone size is smaller than the snapshot"));
    }
    let parent =
        st.t.volumes
            .get(&s.volume_id.to_string())
            .cloned()
            .ok_or_else(|| ApiError::opaque("the snapshot's volume is gone"))?;
    let id = st.uuid();
    let seq = st.seq();
    let blobid = st.below(1 << 20);
    let cl = cluster(st.t, c)?.clone();
    let rec = VolumeRec {
        id,
        seq,
        cluster_id: c,
        pool_id: p,
        name: name.to_string(),
        status: VolumeStatus::Online,
        size,
        node_id: parent.node_id,
        secondary_ids: parent.secondary_ids.clone(),
        nqn: format!("{}:lvol:{id}", cl.nqn),
        ns_id: 1,
        ha: parent.ha,
        ndcs: parent.ndcs,
        npcs: parent.npcs,
        pvc_name: pvc_name.unwrap_or_default(),
        namespace: String::new(),
        priority_class: parent.priority_class,
        fabric: parent.fabric.clone(),
        blobid,
        max_namespace_per_subsys: 1,
        max_rw_iops: 0,
        max_rw_mbytes: 0,
        max_r_mbytes: 0,
        max_w_mbytes: 0,
        allowed_hosts: Vec::new(),
        cloned_from: Some(s.id),
        snapshot_name: s.name.clone(),
        delete_snap_on_delete: delete_snap,
        replication_policy: None,
        do_replicate: false,
        created_ms: st.now,
    };
    if let Some(dir) = &st.sim.config.volume_files {
        crate::volfiles::copy(dir, s.id, id, size);
    }
    st.t.volumes.insert(id.to_string(), rec);
    Ok(id)
}

fn snapshot_create(st: &mut St<'_>, c: Uuid, v: &VolumeRec, name: &str) -> Result<Uuid, ApiError> {
    if st
        .t
        .snapshots
        .values()
        .any(|s| s.cluster_id == c && s.name == name && !s.soft_deleted)
    {
        return Err(ApiError::conflict(format!(
            "Snapshot {name} already exists (snapshot names must be unique)"
        )));
    }
    mutable_cluster(st.t, c)?;
    if v.status != VolumeStatus::Online {
        return Err(ApiError::opaque(format!("volume is {}", v.status)));
    }
    let id = st.uuid();
    let seq = st.seq();
    st.t.snapshots.insert(
        id.to_string(),
        SnapshotRec {
            id,
            seq,
            cluster_id: c,
            pool_id: v.pool_id,
            volume_id: v.id,
            name: name.to_string(),
            size: v.size,
            used_size: render::volume_used(v),
            status: SnapshotStatus::Online,
            created_ms: st.now,
            soft_deleted: false,
        },
    );
    if let Some(dir) = &st.sim.config.volume_files {
        crate::volfiles::copy(dir, v.id, id, v.size);
    }
    Ok(id)
}

/// Which volumes' paths `/connect` returns, per the replication state.
fn connect(
    st: &St<'_>,
    v: &VolumeRec,
    host_nqn: Option<&str>,
) -> Result<Vec<ConnectEntry>, ApiError> {
    let host = match (v.allowed_hosts.is_empty(), host_nqn) {
        (true, _) => None,
        (false, None) => {
            return Err(ApiError::Plain(
                404,
                format!(
                    "Volume {} has allowed hosts configured; --host-nqn is required",
                    v.id
                ),
            ));
        }
        (false, Some(h)) => Some(v.allowed_hosts.iter().find(|e| e.nqn == h).ok_or_else(|| {
            ApiError::Plain(
                404,
                format!(
                    "Host NQN {h} not found in allowed hosts for volume {}",
                    v.id
                ),
            )
        })?),
    };
    let mut nodes = vec![v.node_id];
    nodes.extend(v.secondary_ids.iter().copied());
    let own = render::connect_entries(st.t, v, host, &nodes, 3600, true);
    let rel = st.t.replications.get(&v.id.to_string());
    let target = rel
        .and_then(|r| r.target_lvol)
        .and_then(|t| st.t.volumes.get(&t.to_string()));
    let target_paths = |tv: &VolumeRec| {
        let mut tn = vec![tv.node_id];
        tn.extend(tv.secondary_ids.iter().copied());
        let mut e = render::connect_entries(st.t, tv, None, &tn, 3600, true);
        for x in &mut e {
            x.target_lvol_id = Some(tv.id.to_string());
        }
        e
    };
    Ok(match (rel.map(|r| r.state), target) {
        (Some(ReplicationState::FailedOver), Some(tv)) => target_paths(tv),
        (Some(ReplicationState::CutoverPending), Some(tv)) => {
            let mut all = own;
            all.extend(target_paths(tv));
            all
        }
        (Some(ReplicationState::CutoverDone), Some(tv)) => target_paths(tv),
        _ => own,
    })
}

/// Remove a soft-deleted snapshot once no clone refers to it any more.
pub fn reap_snapshot(t: &mut Tables, snap: Uuid) {
    let referenced = t
        .volumes
        .values()
        .any(|v| v.cloned_from == Some(snap) && v.status != VolumeStatus::Deleted);
    if !referenced
        && t.snapshots
            .get(&snap.to_string())
            .is_some_and(|s| s.soft_deleted)
    {
        t.snapshots.remove(&snap.to_string());
    }
}

pub fn handle(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let c = req.id("cluster_id");
    let p = req.id("pool_id");
    let vid = req.id("volume_id");
    let base = req.base.clone();
    let now = st.now;
    let route = req
        .route
        .strip_prefix("/clusters/{cluster_id}/storage-pools/{pool_id}")
        .unwrap_or("");
    match (req.method.as_str(), route) {
        ("GET", "/volumes/") => {
            let list: Vec<Volume> = render::sorted(
                st.t.volumes
                    .values()
                    .filter(|v| v.pool_id == p && v.status != VolumeStatus::Deleted),
                |v| v.seq,
            )
            .into_iter()
            .map(|v| render::volume(st.t, v, &base, false, now))
            .collect();
            Ok(Reply::ok(json!(list)))
        }
        ("POST", "/volumes/") => create_or_clone(st, req),
        ("POST", "/volumes/replicate_lvol_on_source_cluster") => {
            let b: Value = body(st.sim, req)?;
            let id = b["lvol_id"]
                .as_str()
                .and_then(|s| Uuid::parse_str(s).ok())
                .unwrap_or_default();
            if let Some(r) = st.t.replications.get_mut(&id.to_string()) {
                r.direction = ReplicationDirection::ToTarget;
            }
            Ok(Reply::empty(204))
        }
        ("GET", "/volumes/{volume_id}/") => {
            let v = volume(st.t, p, vid)?;
            Ok(Reply::ok(json!(render::volume(st.t, v, &base, true, now))))
        }
        ("PUT", "/volumes/{volume_id}/") => volume_update(st, req),
        ("DELETE", "/volumes/{volume_id}/") => {
            let v = volume(st.t, p, vid)?.clone();
            match v.status {
                VolumeStatus::Deleted => return Err(ApiError::not_found("Volume deleted")),
                VolumeStatus::InDeletion => return Ok(Reply::empty(204)),
                _ => {}
            }
            let cl = cluster(st.t, c)?;
            if matches!(
                cl.status,
                ClusterStatus::Suspended
                    | ClusterStatus::InActivation
                    | ClusterStatus::Unready
                    | ClusterStatus::Inactive
            ) {
                return Err(ApiError::Precondition(format!(
                    "Cluster is {}; volumes cannot be deleted now",
                    cl.status
                )));
            }
            if let Some(m) =
                st.t.migrations
                    .values()
                    .find(|m| m.active() && (m.lvol_id == vid || m.members.contains(&vid)))
            {
                return Err(ApiError::Precondition(format!("active migration {}", m.id)));
            }
            if pool(st.t, c, p)?.status != ActiveStatus::Active {
                return Err(ApiError::Precondition("Pool is disabled".into()));
            }
            if let Some(v) = st.t.volumes.get_mut(&vid.to_string()) {
                v.status = VolumeStatus::InDeletion;
            }
            let delay = st.sim.timings().volume_delete_ms;
            st.job(JobKind::VolumeDelete { volume: vid }, delay);
            Ok(Reply::empty(204))
        }
        ("GET", "/volumes/{volume_id}/connect") => {
            let v = match st.t.volumes.get(&vid.to_string()) {
                Some(v) if v.status != VolumeStatus::Deleted => v.clone(),
                _ => return Err(ApiError::Plain(404, "Failed to find volume".into())),
            };
            Ok(Reply::ok(json!(connect(st, &v, req.q("host_nqn"))?)))
        }
        ("POST", "/volumes/{volume_id}/hosts") => {
            let h: HostNqn = body(st.sim, req)?;
            let v = volume(st.t, p, vid)?;
            if v.allowed_hosts.iter().any(|e| e.nqn == h.host_nqn) {
                return Err(ApiError::bad_request(format!(
                    "Host {} is already allowed",
                    h.host_nqn
                )));
            }
            let entry = HostEntry {
                nqn: h.host_nqn,
                dhchap_key: dhchap_key(st),
                dhchap_ctrlr_key: dhchap_key(st),
            };
            let out = json!(entry);
            if let Some(v) = st.t.volumes.get_mut(&vid.to_string()) {
                v.allowed_hosts.push(entry);
            }
            Ok(Reply::json(201, out))
        }
        ("GET", "/volumes/{volume_id}/hosts/{host_nqn}/secret") => {
            let v = volume(st.t, p, vid)?;
            let h = req.params.get("host_nqn").cloned().unwrap_or_default();
            v.allowed_hosts
                .iter()
                .find(|e| e.nqn == h)
                .map(|e| Reply::ok(json!(e)))
                .ok_or_else(|| {
                    ApiError::not_found(format!(
                        "Host {h} is not in the allowed list for volume {vid}"
                    ))
                })
        }
        ("DELETE", "/volumes/{volume_id}/hosts/{host_nqn}") => {
            let h = req.params.get("host_nqn").cloned().unwrap_or_default();
            let v = volume(st.t, p, vid)?;
            if !v.allowed_hosts.iter().any(|e| e.nqn == h) {
                return Err(ApiError::bad_request(format!(
                    "Host {h} is not in the allowed list"
                )));
            }
            if let Some(v) = st.t.volumes.get_mut(&vid.to_string()) {
                v.allowed_hosts.retain(|e| e.nqn != h);
            }
            Ok(Reply::empty(204))
        }
        ("POST", "/volumes/{volume_id}/inflate") => {
            let v = volume(st.t, p, vid)?;
            let Some(snap) = v.cloned_from else {
                return Err(ApiError::bad_request("Volume must be cloned"));
            };
            if let Some(v) = st.t.volumes.get_mut(&vid.to_string()) {
                v.cloned_from = None;
            }
            reap_snapshot(st.t, snap);
            Ok(Reply::empty(204))
        }
        ("GET", "/volumes/{volume_id}/capacity") | ("GET", "/volumes/{volume_id}/iostats") => {
            let v = volume(st.t, p, vid)?;
            Ok(Reply::ok(json!([{
                "date": now / 1000, "size_total": v.size, "size_prov": v.size,
                "size_used": render::volume_used(v), "size_free": v.size - render::volume_used(v),
                "size_util": 1
            }])))
        }
        ("GET", "/volumes/{volume_id}/snapshots") => {
            let list: Vec<Snapshot> = render::sorted(
                st.t.snapshots.values().filter(|s| s.volume_id == vid),
                |s| s.seq,
            )
            .into_iter()
            .map(|s| render::snapshot(st.t, s, &base))
            .collect();
            Ok(Reply::ok(json!(list)))
        }
        ("POST", "/volumes/{volume_id}/snapshots") => {
            let b: SnapshotCreate = body(st.sim, req)?;
            let v = volume(st.t, p, vid)?.clone();
            let id = snapshot_create(st, c, &v, &b.name)?;
            Ok(Reply::empty(201).with_location(format!(
                "/api/v2/clusters/{c}/storage-pools/{p}/snapshots/{id}/"
            )))
        }
        ("POST", "/volumes/{volume_id}/clone") => {
            let Some(name) = req.q("clone_name").map(str::to_string) else {
                return Err(ApiError::invalid(
                    "missing",
                    vec![json!("query"), json!("clone_name")],
                    "Field required",
                    Value::Null,
                ));
            };
            let new_size = match req.q("new_size") {
                None => 0,
                Some(s) => quantity::parse(s)
                    .map_err(|_| ApiError::bad_request(format!("Invalid new_size value: '{s}'")))?,
            };
            let v = volume(st.t, p, vid)?.clone();
            if new_size != 0 && new_size < v.size {
                return Err(ApiError::opaque("new size is smaller than the volume"));
            }
            if name_taken(st.t, &name) {
                return Err(ApiError::conflict(format!("Volume {name} exists")));
            }
            // The route snapshots the volume and clones the snapshot; the snapshot goes
            // with the clone.
            let snap = snapshot_create(st, c, &v, &format!("{name}-snapshot"))?;
            let id = clone_from_snapshot(
                st,
                c,
                p,
                snap,
                &name,
                new_size,
                req.q("pvc_name").map(str::to_string),
                true,
            )?;
            Ok(Reply::empty(201).with_location(location(c, p, id)))
        }
        ("GET", "/volumes/{volume_id}/backups") => Ok(Reply::ok(json!([]))),
        ("DELETE", "/volumes/{volume_id}/backups") => Err(ApiError::bad_request(format!(
            "No backups found for lvol {vid}"
        ))),
        ("GET", "/snapshots/") => {
            let list: Vec<Snapshot> =
                render::sorted(st.t.snapshots.values().filter(|s| s.pool_id == p), |s| {
                    s.seq
                })
                .into_iter()
                .map(|s| render::snapshot(st.t, s, &base))
                .collect();
            Ok(Reply::ok(json!(list)))
        }
        ("GET", "/snapshots/{snapshot_id}/") => {
            let s = snapshot(st.t, p, req.id("snapshot_id"))?;
            Ok(Reply::ok(json!(render::snapshot(st.t, s, &base))))
        }
        ("DELETE", "/snapshots/{snapshot_id}/") => {
            let sid = req.id("snapshot_id");
            snapshot(st.t, p, sid)?;
            let has_clones =
                st.t.volumes
                    .values()
                    .any(|v| v.cloned_from == Some(sid) && v.status != VolumeStatus::Deleted);
            if has_clones {
                if let Some(s) = st.t.snapshots.get_mut(&sid.to_string()) {
                    s.soft_deleted = true;
                    s.status = SnapshotStatus::InDeletion;
                }
            } else {
                st.t.snapshots.remove(&sid.to_string());
                if let Some(dir) = &st.sim.config.volume_files {
                    crate::volfiles::remove(dir, sid);
                }
            }
            Ok(Reply::empty(204))
        }
        _ => crate::api_repl::handle(st, req),
    }
}

fn volume_update(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let c = req.id("cluster_id");
    let p = req.id("pool_id");
    let vid = req.id("volume_id");
    let u: VolumeUpdate = body(st.sim, req)?;
    let v = volume(st.t, p, vid)?.clone();
    let qos_keys = [
        "max_rw_iops",
        "max_rw_mbytes",
        "max_r_mbytes",
        "max_w_mbytes",
    ];
    if req.has_key("name") || qos_keys.iter().any(|k| req.has_key(k)) {
        // set_lvol gets the name and all four QoS values; those not sent are 0.
        if let Some(x) = st.t.volumes.get_mut(&vid.to_string()) {
            if let Some(n) = &u.name {
                x.name = n.clone();
            }
            x.max_rw_iops = u.max_rw_iops.unwrap_or(0);
            x.max_rw_mbytes = u.max_rw_mbytes.unwrap_or(0);
            x.max_r_mbytes = u.max_r_mbytes.unwrap_or(0);
            x.max_w_mbytes = u.max_w_mbytes.unwrap_or(0);
        }
    }
    if let Some(size) = u.size {
        // The resize result is ignored by the route: grow when allowed, answer 204 anyway.
        if size > v.size
            && mutable_cluster(st.t, c).is_ok()
            && let Some(x) = st.t.volumes.get_mut(&vid.to_string())
        {
            x.size = size;
            if let Some(dir) = &st.sim.config.volume_files {
                crate::volfiles::grow(dir, vid, size);
            }
        }
    }
    if let Some(policy) = u.replication_policy_id {
        match policy {
            Some(pid) => {
                if !st.t.policies.contains(&pid.to_string()) {
                    return Err(ApiError::key_error(format!(
                        "ReplicationPolicy {pid} not found"
                    )));
                }
                if let Some(old) = v.replication_policy
                    && old != pid
                {
                    return Err(ApiError::bad_request(format!(
                        "Volume already has replication policy {old}"
                    )));
                }
                if let Some(x) = st.t.volumes.get_mut(&vid.to_string()) {
                    x.replication_policy = Some(pid);
                    x.do_replicate = true;
                }
            }
            None => {
                let Some(old) = v.replication_policy else {
                    return Err(ApiError::not_found("Volume has no replication policy"));
                };
                if st
                    .t
                    .replications
                    .get(&vid.to_string())
                    .is_some_and(|r| r.state == ReplicationState::CutoverPending)
                {
                    return Err(ApiError::conflict("Replication cutover in progress"));
                }
                let _ = old;
                if let Some(x) = st.t.volumes.get_mut(&vid.to_string()) {
                    x.replication_policy = None;
                }
            }
        }
    }
    Ok(Reply::empty(204))
}

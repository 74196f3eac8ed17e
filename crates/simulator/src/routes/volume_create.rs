//! Creating volumes: a new one placed on the least loaded online nodes, or a clone of a
//! snapshot, and the create-or-clone union the volume route takes.

use serde_json::{Value, json};
use simplyblock_api::quantity;
use simplyblock_controlplane::routes as api;
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use super::lookup::{cluster, mutable_cluster, pool};
use super::pool_hosts::dhchap_key;
use super::request::ApiReq;
use crate::model::*;
use crate::render;
use crate::reply::{ApiError, ApiResult, Reply};
use crate::sim::St;
use crate::store::Tables;

const MIN_VOLUME: u64 = 100_000_000;

pub fn name_taken(t: &Tables, name: &str) -> bool {
    t.volumes
        .values()
        .any(|v| v.name == name && v.status != VolumeStatus::Deleted)
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

/// The `Location` of a new volume.
pub fn volume_location(c: Uuid, p: Uuid, v: Uuid) -> String {
    format!("/api/v2{}", api::volume(c, p, v))
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
pub fn create_or_clone(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
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
        volume_location(c, p, id),
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
    let pinned = match &v.consistency_group {
        Some(name) => super::group::pinned_node(st.t, c, name)?,
        None => None,
    };
    let primary = match (&v.host_id, pinned) {
        // A consistency group's members share its node and lvstore.
        (_, Some(node)) => {
            if !candidates.contains(&node) {
                return Err(ApiError::opaque(format!(
                    "Consistency group {} is on node {node}, which is not online",
                    v.consistency_group.as_deref().unwrap_or_default()
                )));
            }
            node
        }
        (Some(h), None) => {
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
        (None, None) => candidates[0],
    };
    let ha = match v.ha_type {
        Some(h) => h == HaType::Ha,
        None => cl.params.ha_type == HaType::Ha,
    };
    let id = match v.lvol_id {
        Some(wanted) if st.t.volumes.get(&wanted.to_string()).is_some() => {
            return Err(ApiError::opaque(format!(
                "LVol id {wanted} is already taken"
            )));
        }
        Some(wanted) => wanted,
        None => st.uuid(),
    };
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
    // A volume of a host-authenticating pool takes the pool's hosts; a namespace of a
    // shared subsystem takes none.
    let mut hosts = if v.namespaced {
        Vec::new()
    } else {
        super::pool_hosts::inherited(st, p)
    };
    for h in v.allowed_hosts.clone().unwrap_or_default() {
        if hosts.iter().any(|e: &HostEntry| e.nqn == h) {
            continue;
        }
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
        fenced: false,
        written: None,
    };
    if let Some(dir) = &st.sim.config.volume_files {
        crate::volfiles::create(dir, id, rec.size);
    }
    st.t.volumes.insert(id.to_string(), rec);
    if let Some(name) = &v.consistency_group {
        super::group::join(st, c, name, id, primary);
    }
    Ok(id)
}

#[allow(clippy::too_many_arguments)]
pub fn clone_from_snapshot(
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
    let cl = cluster(st.t, c)?.clone();
    let mut rec = derived_volume(
        st,
        &cl,
        p,
        name,
        size,
        VolumeStatus::Online,
        Placement::of(&parent),
    );
    let id = rec.id;
    rec.pvc_name = pvc_name.unwrap_or_default();
    rec.cloned_from = Some(s.id);
    rec.snapshot_name = s.name.clone();
    rec.delete_snap_on_delete = delete_snap;
    rec.allowed_hosts = super::pool_hosts::inherited(st, p);
    if let Some(dir) = &st.sim.config.volume_files {
        crate::volfiles::copy(dir, s.id, id, size);
    }
    st.t.volumes.insert(id.to_string(), rec);
    Ok(id)
}

/// Where a volume made from another's data lives and how it is laid out: its source's.
pub struct Placement {
    pub node_id: Uuid,
    pub secondary_ids: Vec<Uuid>,
    pub ha: bool,
    pub ndcs: u32,
    pub npcs: u32,
    pub priority_class: u32,
    pub fabric: String,
}

impl Placement {
    pub fn of(v: &VolumeRec) -> Placement {
        Placement {
            node_id: v.node_id,
            secondary_ids: v.secondary_ids.clone(),
            ha: v.ha,
            ndcs: v.ndcs,
            npcs: v.npcs,
            priority_class: v.priority_class,
            fabric: v.fabric.clone(),
        }
    }
}

/// A new volume made from existing data (a clone of a snapshot, a restore of a backup),
/// without limits or hosts; the caller says where its data comes from.
pub fn derived_volume(
    st: &mut St<'_>,
    cl: &ClusterRec,
    pool: Uuid,
    name: &str,
    size: u64,
    status: VolumeStatus,
    at: Placement,
) -> VolumeRec {
    let id = st.uuid();
    let seq = st.seq();
    let blobid = st.below(1 << 20);
    VolumeRec {
        id,
        seq,
        cluster_id: cl.id,
        pool_id: pool,
        name: name.to_string(),
        status,
        size,
        node_id: at.node_id,
        secondary_ids: at.secondary_ids,
        nqn: format!("{}:lvol:{id}", cl.nqn),
        ns_id: 1,
        ha: at.ha,
        ndcs: at.ndcs,
        npcs: at.npcs,
        pvc_name: String::new(),
        namespace: String::new(),
        priority_class: at.priority_class,
        fabric: at.fabric,
        blobid,
        max_namespace_per_subsys: 1,
        max_rw_iops: 0,
        max_rw_mbytes: 0,
        max_r_mbytes: 0,
        max_w_mbytes: 0,
        allowed_hosts: Vec::new(),
        cloned_from: None,
        snapshot_name: String::new(),
        delete_snap_on_delete: false,
        replication_policy: None,
        do_replicate: false,
        created_ms: st.now,
        fenced: false,
        written: None,
    }
}

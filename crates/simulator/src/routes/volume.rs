//! Volumes (lvols): list, read, update, delete, their connect strings, allowed hosts,
//! inflation, statistics and the clone route. Creating one is in
//! [`super::volume_create`]; its snapshots are in [`super::snapshot`].

use serde_json::{Value, json};
use simplyblock_api::quantity;
use simplyblock_controlplane::routes as api;
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use super::lookup::{cluster, mutable_cluster, pool, volume};
use super::pool_hosts::dhchap_key;
use super::request::{ApiReq, body};
use super::snapshot::snapshot_create;
use super::volume_create::{clone_from_snapshot, create_or_clone, name_taken, volume_location};
use crate::clones::reap_snapshot;
use crate::model::*;
use crate::render;
use crate::reply::{ApiError, ApiResult, Reply};
use crate::sim::St;

pub fn handle(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let c = req.id("cluster_id");
    let p = req.id("pool_id");
    let vid = req.id("volume_id");
    let base = req.base.clone();
    let now = st.now;
    // `api` has the routes the client calls; the literals are routes only sbsim serves.
    match (req.method.as_str(), req.route.as_str()) {
        ("GET", api::VOLUMES) => Ok(Reply::ok(render::list(
            st.t.volumes
                .values()
                .filter(|v| v.pool_id == p && v.status != VolumeStatus::Deleted),
            |v| v.seq,
            |v| render::volume(st.t, v, &base, false, now),
        ))),
        ("POST", api::VOLUMES) => create_or_clone(st, req),
        (
            "POST",
            "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/replicate_lvol_on_source_cluster",
        ) => {
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
        ("GET", api::VOLUME) => {
            let v = volume(st.t, p, vid)?;
            Ok(Reply::ok(json!(render::volume(st.t, v, &base, true, now))))
        }
        ("PUT", api::VOLUME) => volume_update(st, req),
        ("DELETE", api::VOLUME) => {
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
            if st
                .t
                .volumes
                .get(&vid.to_string())
                .is_some_and(|v| v.status == VolumeStatus::Restoring)
            {
                return Err(ApiError::bad_request(format!(
                    "Cannot delete lvol {vid}: backup restore in progress"
                )));
            }
            if let Some(v) = st.t.volumes.get_mut(&vid.to_string()) {
                v.status = VolumeStatus::InDeletion;
            }
            let delay = st.sim.timings().volume_delete_ms;
            st.job(JobKind::VolumeDelete { volume: vid }, delay);
            Ok(Reply::empty(204))
        }
        ("GET", api::VOLUME_CONNECT) => {
            let v = match st.t.volumes.get(&vid.to_string()) {
                Some(v) if v.status != VolumeStatus::Deleted => v.clone(),
                _ => return Err(ApiError::Plain(404, "Failed to find volume".into())),
            };
            Ok(Reply::ok(json!(connect(st, &v, req.q("host_nqn"))?)))
        }
        ("POST", api::VOLUME_HOSTS) => {
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
        (
            "GET",
            "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/hosts/{host_nqn}/secret",
        ) => {
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
        ("DELETE", api::VOLUME_HOST) => {
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
        ("POST", "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/inflate") => {
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
        ("GET", "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/iostats") => {
            let id = volume(st.t, p, vid)?.id;
            let sample = crate::stats::iostat(st.t, now, |v| v.id == id);
            Ok(Reply::ok(json!([sample])))
        }
        ("GET", "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/capacity") => {
            let v = volume(st.t, p, vid)?;
            Ok(Reply::ok(json!([{
                "date": now / 1000, "size_total": v.size, "size_prov": v.size,
                "size_used": render::volume_used(v), "size_free": v.size - render::volume_used(v),
                "size_util": 1
            }])))
        }
        ("POST", api::VOLUME_CLONE) => {
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
            Ok(Reply::empty(201).with_location(volume_location(c, p, id)))
        }
        _ => Err(req.unsimulated()),
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

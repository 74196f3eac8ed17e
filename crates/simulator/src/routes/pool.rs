//! Storage pools: create, read, update, delete, their statistics and the hosts a DHCHAP
//! pool allows.

use serde_json::json;
use simplyblock_controlplane::routes as api;
use simplyblock_controlplane::types::*;

use super::lookup::pool;
use super::pool_hosts;
use super::request::{ApiReq, body};
use crate::model::*;
use crate::render;
use crate::reply::{ApiError, ApiResult, Reply};
use crate::sim::St;

pub fn handle(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    // `api` has the routes the client calls; the literals are routes only sbsim serves.
    match (req.method.as_str(), req.route.as_str()) {
        ("GET", api::POOLS) => {
            let id = req.id("cluster_id");
            Ok(Reply::ok(render::list(
                st.t.pools.values().filter(|p| p.cluster_id == id),
                |p| p.seq,
                |p| render::pool(st.t, p, st.now),
            )))
        }
        ("POST", api::POOLS) => pool_create(st, req),
        ("GET", api::POOL) => {
            let p = pool(st.t, req.id("cluster_id"), req.id("pool_id"))?;
            Ok(Reply::ok(json!(render::pool(st.t, p, st.now))))
        }
        ("PUT", api::POOL) => {
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
        ("DELETE", api::POOL) => {
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
            let id = req.id("pool_id");
            let sample = crate::stats::iostat(st.t, st.now, |v| v.pool_id == id);
            Ok(Reply::ok(json!([sample])))
        }
        ("POST", api::POOL_HOST) => {
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
                p.allowed_hosts.push(h.host_nqn.clone());
            }
            pool_hosts::add_to_volumes(st, req.id("pool_id"), &h.host_nqn);
            Ok(Reply::empty(204))
        }
        ("DELETE", api::POOL_HOST) => {
            let h: HostNqn = body(st.sim, req)?;
            let p = pool(st.t, req.id("cluster_id"), req.id("pool_id"))?;
            if !p.dhchap {
                return Err(ApiError::bad_request("Pool does not have DHCHAP enabled"));
            }
            if !p.allowed_hosts.contains(&h.host_nqn) {
                return Err(ApiError::bad_request(format!(
                    "Host {} is not in the pool's allowed list",
                    h.host_nqn
                )));
            }
            if let Some(p) = st.t.pools.get_mut(&req.id("pool_id").to_string()) {
                p.allowed_hosts.retain(|x| *x != h.host_nqn);
            }
            pool_hosts::remove_from_volumes(st, req.id("pool_id"), &h.host_nqn);
            Ok(Reply::empty(204))
        }
        _ => Err(req.unsimulated()),
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
    let dto = json!(render::pool(st.t, &rec, st.now));
    st.t.pools.insert(id.to_string(), rec);
    let location = format!("/api/v2{}", api::pool(c, id));
    Ok(Reply::created(location, &id.to_string(), dto, &format))
}

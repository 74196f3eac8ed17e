//! Records by the ids a path names. A missing one is the dependency layer's 404, whose
//! KeyError message keeps its quotes; one under another parent is a plain 404.

use simplyblock_controlplane::types::*;
use uuid::Uuid;

use super::request::ApiReq;
use crate::model::*;
use crate::reply::ApiError;
use crate::store::Tables;

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

/// Refuse changes to volumes and snapshots unless the cluster is active or degraded.
pub fn mutable_cluster(t: &Tables, c: Uuid) -> Result<(), ApiError> {
    let cl = cluster(t, c)?;
    if !matches!(cl.status, ClusterStatus::Active | ClusterStatus::Degraded) {
        return Err(ApiError::opaque(format!(
            "Cluster is not active, status: {}",
            cl.status
        )));
    }
    Ok(())
}

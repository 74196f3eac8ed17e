//! Snapshots: of a volume (list, take) and of a pool (list, read, delete).

use serde_json::json;
use simplyblock_controlplane::routes as api;
use simplyblock_controlplane::types::*;

use super::lookup::{snapshot, volume};
use super::request::{ApiReq, body};
pub use crate::clones::snapshot_create;
use crate::render;
use crate::reply::{ApiResult, Reply};
use crate::sim::St;

pub fn handle(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let c = req.id("cluster_id");
    let p = req.id("pool_id");
    let vid = req.id("volume_id");
    let base = req.base.clone();
    match (req.method.as_str(), req.route.as_str()) {
        ("GET", api::VOLUME_SNAPSHOTS) => Ok(Reply::ok(render::list(
            st.t.snapshots.values().filter(|s| s.volume_id == vid),
            |s| s.seq,
            |s| render::snapshot(st.t, s, &base),
        ))),
        ("POST", api::VOLUME_SNAPSHOTS) => {
            let b: SnapshotCreate = body(st.sim, req)?;
            let v = volume(st.t, p, vid)?.clone();
            let id = snapshot_create(st, c, &v, &b.name)?;
            Ok(Reply::empty(201).with_location(format!("/api/v2{}", api::pool_snapshot(c, p, id))))
        }
        ("GET", api::POOL_SNAPSHOTS) => Ok(Reply::ok(render::list(
            st.t.snapshots.values().filter(|s| s.pool_id == p),
            |s| s.seq,
            |s| render::snapshot(st.t, s, &base),
        ))),
        ("GET", api::POOL_SNAPSHOT) => {
            let s = snapshot(st.t, p, req.id("snapshot_id"))?;
            Ok(Reply::ok(json!(render::snapshot(st.t, s, &base))))
        }
        ("DELETE", api::POOL_SNAPSHOT) => {
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
        _ => Err(req.unsimulated()),
    }
}

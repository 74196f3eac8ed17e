//! Backups, of clusters and of volumes. sbsim keeps none: lists are empty and every backup
//! is unknown.

use serde_json::json;

use super::request::ApiReq;
use crate::reply::{ApiError, ApiResult, Reply};
use crate::sim::St;

pub fn handle(_: &mut St<'_>, req: &ApiReq) -> ApiResult {
    // The client calls none of these routes, so they are spelt here, not in `api`.
    match (req.method.as_str(), req.route.as_str()) {
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
        ("GET", "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/backups") => {
            Ok(Reply::ok(json!([])))
        }
        (
            "DELETE",
            "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/backups",
        ) => Err(ApiError::bad_request(format!(
            "No backups found for lvol {}",
            req.id("volume_id")
        ))),
        _ => Err(req.unsimulated()),
    }
}

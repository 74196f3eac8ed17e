//! A cluster's tasks, as the task runner keeps them.

use serde_json::json;

use simplyblock_controlplane::routes as api;

use super::request::ApiReq;
use crate::render;
use crate::reply::{ApiError, ApiResult, Reply};
use crate::sim::St;

pub fn handle(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    match (req.method.as_str(), req.route.as_str()) {
        ("GET", api::TASKS) => {
            let id = req.id("cluster_id");
            Ok(Reply::ok(render::list(
                st.t.tasks
                    .values()
                    .filter(|t| t.cluster_id == id && t.function_name != "device_migration"),
                |t| t.seq,
                render::task,
            )))
        }
        ("GET", api::TASK) => {
            // The real lookup raises KeyError past its None check: 500, not 404.
            match st.t.tasks.get(&req.id("task_id").to_string()) {
                Some(t) if t.cluster_id == req.id("cluster_id") => {
                    Ok(Reply::ok(json!(render::task(t))))
                }
                _ => Err(ApiError::opaque(
                    "task not found (a KeyError on the real server)",
                )),
            }
        }
        _ => Err(req.unsimulated()),
    }
}

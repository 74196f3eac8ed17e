//! Management nodes: the one sbsim pretends to run on.

use serde_json::{Value, json};
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use super::request::ApiReq;
use crate::reply::{ApiError, ApiResult, Reply};
use crate::sim::{Sim, St};

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

pub fn handle(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let r = req.route.as_str();
    // The client calls none of these routes, so they are spelt here, not in `api`.
    match (req.method.as_str(), r) {
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
                Err(ApiError::opaque(
                    "management node not found (a KeyError on the real server)",
                ))
            }
        }
        _ => Err(req.unsimulated()),
    }
}

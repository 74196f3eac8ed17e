//! Storage nodes: add, remove, read, suspend, resume, shut down, restart, promote, and
//! their NICs and statistics. Their devices are in [`super::device`].

use serde_json::{Map, Value, json};
use simplyblock_controlplane::routes as api;
use simplyblock_controlplane::types::*;

use super::lookup::node;
use super::request::{ApiReq, body};
use crate::model::*;
use crate::render;
use crate::reply::{ApiError, ApiResult, Reply};
use crate::sim::St;

pub fn handle(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    // `api` has the routes the client calls; the literals are routes only sbsim serves.
    match (req.method.as_str(), req.route.as_str()) {
        ("GET", api::STORAGE_NODES) => {
            let id = req.id("cluster_id");
            Ok(Reply::ok(render::list(
                st.t.nodes.values().filter(|n| n.cluster_id == id),
                |n| n.seq,
                |n| render::node(st.t, n, st.now),
            )))
        }
        ("POST", api::STORAGE_NODES) => node_add(st, req),
        ("GET", api::STORAGE_NODE) => {
            let n = node(st.t, req.id("cluster_id"), req.id("storage_node_id"))?;
            Ok(Reply::ok(json!(render::node(st.t, n, st.now))))
        }
        ("DELETE", api::STORAGE_NODE) => node_remove(st, req),
        ("GET", "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/capacity")
        | ("GET", "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/iostats") => {
            // The real capacity route returns iostats history too.
            let id = req.id("storage_node_id");
            let sample = crate::stats::iostat(st.t, st.now, |v| v.node_id == id);
            Ok(Reply::ok(json!([sample])))
        }
        ("GET", api::STORAGE_NODE_NICS) => {
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
                    status: if n.status == NodeStatus::Online {
                        "online"
                    } else {
                        "offline"
                    }
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
            Ok(Reply::ok(json!([render::iostat_sample(st.now)])))
        }
        ("POST", api::STORAGE_NODE_SUSPEND) => {
            let _force = req.q_bool("force")?;
            suspend_or_resume(st, req, NodeStatus::Online, NodeStatus::Suspended)
        }
        ("POST", api::STORAGE_NODE_RESUME) => {
            suspend_or_resume(st, req, NodeStatus::Suspended, NodeStatus::Online)
        }
        ("POST", api::STORAGE_NODE_SHUTDOWN) => node_shutdown(st, req),
        ("POST", api::STORAGE_NODE_RESTART)
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
        ("POST", api::STORAGE_NODE_PROMOTE) => {
            let nid = req.id("storage_node_id");
            st.t.devices.update_where(
                |d| {
                    d.node_id == nid
                        && matches!(d.status, DeviceStatus::New | DeviceStatus::Removed)
                },
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
        _ => Err(req.unsimulated()),
    }
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
    let loc = format!("/api/v2{}", api::task(c, task));
    let full =
        st.t.tasks
            .get(&task.to_string())
            .map(|t| json!(render::task(t)))
            .unwrap_or(Value::Null);
    Ok(Reply::created(loc, &task.to_string(), full, &format))
}

/// Move a node from online to suspended or back. A suspended node is not restarted
/// automatically.
fn suspend_or_resume(st: &mut St<'_>, req: &ApiReq, from: NodeStatus, to: NodeStatus) -> ApiResult {
    let n = node(st.t, req.id("cluster_id"), req.id("storage_node_id"))?;
    if n.status != from {
        return Err(ApiError::opaque(format!(
            "node is {}, not {from}",
            n.status
        )));
    }
    if let Some(n) = st.t.nodes.get_mut(&req.id("storage_node_id").to_string()) {
        n.status = to;
        n.auto_restart_disabled = to == NodeStatus::Suspended;
    }
    Ok(Reply::empty(204))
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
            st.t.devices.remove_where(|d| d.node_id == nid);
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

//! A storage node's devices: list, read, remove, restart, reset, fail, statistics and
//! health.

use serde_json::json;
use simplyblock_controlplane::routes as api;
use simplyblock_controlplane::types::*;

use super::request::ApiReq;
use crate::render;
use crate::reply::{ApiError, ApiResult, Reply};
use crate::sim::St;

pub fn handle(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    match (req.method.as_str(), req.route.as_str()) {
        ("GET", api::DEVICES) => Ok(Reply::ok(render::list(
            render::node_devices(st.t, req.id("storage_node_id")),
            |d| d.seq,
            |d| render::device(st.t, d, st.now),
        ))),
        (_, r) if r.starts_with(api::DEVICE) => device_route(st, req),
        _ => Err(req.unsimulated()),
    }
}

fn device_route(st: &mut St<'_>, req: &ApiReq) -> ApiResult {
    let nid = req.id("storage_node_id");
    let did = req.id("device_id");
    let key = did.to_string();
    let d = match st.t.devices.get(&key) {
        Some(d) if d.node_id == nid => d.clone(),
        _ => return Err(ApiError::not_found(format!("Device {did} not found"))),
    };
    let restart_task = st.t.tasks.values().any(|t| {
        t.device_id == Some(did)
            && t.function_name == "device_restart"
            && t.status != TaskStatus::Done
    });
    // `api` has the routes the client calls; the literals are routes only sbsim serves.
    match (req.method.as_str(), req.route.as_str()) {
        ("GET", api::DEVICE) => Ok(Reply::ok(json!(render::device(st.t, &d, st.now)))),
        ("POST", api::DEVICE_REMOVE) => {
            let _ = req.q_bool("force")?;
            if matches!(
                d.status,
                DeviceStatus::Removed
                    | DeviceStatus::Failed
                    | DeviceStatus::FailedAndMigrated
                    | DeviceStatus::New
            ) || restart_task
            {
                return Err(ApiError::opaque(format!("device is {}", d.status)));
            }
            if let Some(d) = st.t.devices.get_mut(&key) {
                d.status = DeviceStatus::Removed;
            }
            Ok(Reply::empty(204))
        }
        ("POST", api::DEVICE_RESTART) => {
            let _ = req.q_bool("force")?;
            if !matches!(d.status, DeviceStatus::Removed | DeviceStatus::Failed) {
                return Err(ApiError::opaque(format!("device is {}", d.status)));
            }
            if let Some(d) = st.t.devices.get_mut(&key) {
                d.status = DeviceStatus::Online;
                d.io_error = false;
            }
            Ok(Reply::empty(204))
        }
        // A newer control plane's call: a removed device is failed for good.
        ("POST", api::DEVICE_FAIL) => {
            if d.status != DeviceStatus::Removed {
                return Err(ApiError::opaque(format!(
                    "device is {}; only a removed device can be failed",
                    d.status
                )));
            }
            let migrating = st.t.migrations.values().any(|m| {
                m.cluster_id == d.cluster_id && matches!(m.status.as_str(), "new" | "running")
            });
            if migrating {
                return Err(ApiError::opaque("a volume migration is in progress"));
            }
            if let Some(d) = st.t.devices.get_mut(&key) {
                d.status = DeviceStatus::Failed;
            }
            Ok(Reply::empty(204))
        }
        ("POST", api::DEVICE_RESET) => {
            if matches!(
                d.status,
                DeviceStatus::Removed | DeviceStatus::FailedAndMigrated
            ) || restart_task
            {
                return Err(ApiError::opaque(format!("device is {}", d.status)));
            }
            if let Some(d) = st.t.devices.get_mut(&key) {
                d.io_error = false;
            }
            Ok(Reply::empty(204))
        }
        (
            "GET",
            "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/devices/{device_id}/capacity",
        )
        | (
            "GET",
            "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/devices/{device_id}/iostats",
        ) => Ok(Reply::ok(json!([render::iostat_sample(st.now)]))),
        (
            "GET",
            "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/devices/{device_id}/health-info",
        ) => Ok(Reply::ok(json!({
            "id": d.id, "model_number": d.model, "serial_number": d.serial,
            "firmware_revision": "SIM1", "traddr": d.pcie, "critical_warning": 0,
            "temperature_celsius": 38, "available_spare_percentage": 100,
            "available_spare_threshold_percentage": 10, "percentage_used": 1,
            "data_units_read": 0, "data_units_written": 0, "host_read_commands": 0,
            "host_write_commands": 0, "controller_busy_time": 0, "power_cycles": 3,
            "power_on_hours": 100, "unsafe_shutdowns": 0, "media_errors": 0,
            "num_err_log_entries": 0, "warning_temperature_time_minutes": 0,
            "critical_composite_temperature_time_minutes": 0
        }))),
        _ => Err(ApiError::opaque("unsupported device route")),
    }
}

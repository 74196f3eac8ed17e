//! The statistics sbsim reports: bytes used and I/O rates. sbsim moves no data, so every
//! figure here is simulated, as a deterministic function of the model that tests can
//! predict:
//!
//! - a volume's used bytes are what a workload wrote to it
//!   (`PUT /_sim/volumes/{id}/written` `{"bytes": N}`), else 1 % of its size;
//! - a device holds its node's used bytes in proportion to its size among the node's
//!   online devices (what the capacity monitor reports per device);
//! - I/O: a volume's latest sample writes its used bytes once an hour and reads half as
//!   much, in 4 KiB operations at 100 µs (reads) and 200 µs (writes); a pool, node or
//!   cluster reports the sum of its volumes' rates and their latencies.

use serde_json::{Value, json};
use uuid::Uuid;

use crate::model::{DeviceRec, VolumeRec};
use crate::reply::ApiError;
use crate::sim::{Sim, St};
use crate::store::Tables;
use simplyblock_controlplane::types::{DeviceStatus, VolumeStatus};

/// The block size of the simulated operations.
const OPERATION_BYTES: u64 = 4096;
/// The simulated latencies, in microseconds (sbcli's `*_latency_ps`).
const READ_LATENCY_US: u64 = 100;
const WRITE_LATENCY_US: u64 = 200;

/// The bytes of `v` holding data.
pub fn volume_used(v: &VolumeRec) -> u64 {
    v.written.unwrap_or(v.size / 100).min(v.size)
}

/// The bytes of device `d` holding data: its share of its node's volumes' used bytes.
pub fn device_used(t: &Tables, d: &DeviceRec) -> u64 {
    if d.status != DeviceStatus::Online {
        return 0;
    }
    let online: u64 = t
        .devices
        .values()
        .filter(|o| o.node_id == d.node_id && o.status == DeviceStatus::Online)
        .map(|o| o.size)
        .sum();
    let used: u64 = t
        .volumes
        .values()
        .filter(|v| v.node_id == d.node_id && v.status != VolumeStatus::Deleted)
        .map(volume_used)
        .sum();
    if online == 0 {
        return 0;
    }
    ((used as u128 * d.size as u128) / online as u128).min(d.size as u128) as u64
}

/// The latest I/O sample of the volumes `scope` picks, with sbcli's field names.
pub fn iostat(t: &Tables, now: i64, scope: impl Fn(&VolumeRec) -> bool) -> Value {
    let written: u64 = t
        .volumes
        .values()
        .filter(|v| v.status == VolumeStatus::Online && scope(v))
        .map(volume_used)
        .sum();
    let write_bps = written / 3600;
    let read_bps = write_bps / 2;
    let busy = |bps: u64, us: u64| if bps == 0 { 0 } else { us };
    json!({
        "date": now / 1000,
        "read_bytes": read_bps, "read_bytes_ps": read_bps,
        "read_io_ps": read_bps / OPERATION_BYTES,
        "read_latency_ps": busy(read_bps, READ_LATENCY_US),
        "write_bytes": write_bps, "write_bytes_ps": write_bps,
        "write_io_ps": write_bps / OPERATION_BYTES,
        "write_latency_ps": busy(write_bps, WRITE_LATENCY_US),
        "size_total": 0, "size_used": written,
    })
}

/// `PUT /_sim/volumes/{id}/written` `{"bytes": N}`: a workload wrote N bytes to the volume.
pub fn set_written(sim: &Sim, id: &str, body: Option<&Value>) -> Result<(), ApiError> {
    let bytes = body
        .and_then(|b| b.get("bytes"))
        .and_then(Value::as_u64)
        .ok_or_else(|| ApiError::bad_request("body must be {\"bytes\": <unsigned integer>}"))?;
    let id: Uuid = id
        .parse()
        .map_err(|_| ApiError::bad_request(format!("{id:?} is not a volume id")))?;
    sim.mutate(
        |st: &mut St<'_>| match st.t.volumes.get_mut(&id.to_string()) {
            Some(v) => {
                v.written = Some(bytes);
                Ok(())
            }
            None => Err(ApiError::not_found(format!("no volume {id}"))),
        },
    )
}

//! Cutting a volume's paths to a node (`POST /_sim/paths/cut`), for the CSI driver's loop
//! attacher. That attacher stands in for the kernel's NVMe/TCP initiator: connecting path
//! `ip:port` of a volume creates the file `<volume files>/<volume>.paths/<ip>:<port>`, as
//! the kernel adds a controller. A cut removes the file, as the kernel deletes a
//! controller whose target stayed away past its loss timeout. The control plane keeps
//! publishing the path, so the node's reconnect monitor can bring it back.
//!
//! Body: `{"volume": "<uuid>", "paths": ["10.10.0.1:4420", …]}`; without `paths`, every
//! path of the volume is cut. The answer lists the paths that were held and are now cut.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use uuid::Uuid;

use crate::reply::{ApiError, Reply};
use crate::sim::Sim;

/// Where the node marks the connected paths of `volume`.
pub fn dir(volume_files: &Path, volume: Uuid) -> PathBuf {
    volume_files.join(format!("{volume}.paths"))
}

pub fn cut(sim: &Sim, body: Option<&Value>) -> Result<Reply, ApiError> {
    let Some(files) = &sim.config.volume_files else {
        return Err(ApiError::bad_request(
            "paths exist only for volume files: start sbsim with --volume-files and attach with the CSI driver's loop attacher",
        ));
    };
    let volume = body
        .and_then(|b| b.get("volume"))
        .and_then(Value::as_str)
        .and_then(|v| Uuid::parse_str(v).ok())
        .ok_or_else(|| ApiError::bad_request("body needs \"volume\": the volume's UUID"))?;
    let wanted: Option<Vec<String>> = match body.and_then(|b| b.get("paths")) {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|p| {
                    p.as_str().map(str::to_owned).ok_or_else(|| {
                        ApiError::bad_request("\"paths\" lists paths as \"ip:port\" strings")
                    })
                })
                .collect::<Result<_, _>>()?,
        ),
        Some(_) => {
            return Err(ApiError::bad_request(
                "\"paths\" lists paths as \"ip:port\" strings",
            ));
        }
    };
    let dir = dir(files, volume);
    let mut held: Vec<String> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    held.sort();
    let mut cut = Vec::new();
    for path in held {
        if wanted.as_ref().is_some_and(|w| !w.contains(&path)) {
            continue;
        }
        match std::fs::remove_file(dir.join(&path)) {
            Ok(()) => cut.push(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(ApiError::Http(
                    500,
                    format!("cutting path {path} of volume {volume}: {e}"),
                ));
            }
        }
    }
    Ok(Reply::ok(json!({ "cut": cut })))
}

//! Deterministic kill points. A crash test names one point in [`ENV`]; the process aborts
//! the moment it passes that point: right after a side effect the control plane cannot
//! undo, before the operator has recorded it. Restarted without it, the operator must
//! find the effect already there and not cause it again. Unset (always, outside such a
//! test), a point is one comparison with `None`.

use std::sync::LazyLock;

/// `<point>`: abort right after that side effect.
pub const ENV: &str = "SIMPLYBLOCK_CRASH_AFTER";

/// A StorageCluster's create call.
pub const CLUSTER_CREATE: &str = "StorageCluster/create";
/// A StorageNode's add call.
pub const NODE_ADD: &str = "StorageNode/add";
/// A StorageNode's control-plane node recorded in its status, before its provisioning
/// slot is given back.
pub const NODE_RECORDED: &str = "StorageNode/recorded";
/// A StoragePool's create call.
pub const POOL_CREATE: &str = "StoragePool/create";
/// A StoragePool's delete call.
pub const POOL_DELETE: &str = "StoragePool/delete";
/// A StoragePool's call adding an allowed Node's host to the control plane's pool.
pub const POOL_HOST_ADD: &str = "StoragePool/host-add";
/// A StorageBackupPolicy's create call.
pub const BACKUP_POLICY_CREATE: &str = "StorageBackupPolicy/create";
/// A StorageBackup request's snapshot call.
pub const BACKUP_SNAPSHOT: &str = "StorageBackup/snapshot";
/// A StorageBackup request's backup call, before its id is written down.
pub const BACKUP_CREATE: &str = "StorageBackup/backup";
/// An object of a SimplyblockDriver applied: the first of a pass, so the process stops
/// in the middle of an install.
pub const DRIVER_APPLY: &str = "SimplyblockDriver/apply";

static ARMED: LazyLock<Option<String>> =
    LazyLock::new(|| std::env::var(ENV).ok().filter(|p| !p.is_empty()));

/// The point of an Ops step's call: `<Kind>/<Action>/<Step>`, the step the call was
/// decided in (e.g. `StorageClusterOps/Expand/Requesting`).
pub fn ops_point(kind: &str, action: &str, step: &str) -> String {
    format!("{kind}/{action}/{step}")
}

/// The point of a ControlPlane install step: `ControlPlane/<step>`, right after the
/// step's objects are applied (or its wait is over) and before the next step is recorded.
pub fn control_plane_point(step: &str) -> String {
    format!("ControlPlane/{step}")
}

/// Aborts the process when `point` is the one armed.
pub fn point(point: &str) {
    if ARMED.as_deref() == Some(point) {
        // stderr, not tracing: the process ends before a subscriber could flush.
        eprintln!("{ENV}={point}: aborting right after this side effect");
        std::process::abort();
    }
}

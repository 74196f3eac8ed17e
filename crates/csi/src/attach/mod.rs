//! Attachers: how a volume becomes a block device on this node. One trait, two kinds:
//! [`nvmeof`] for production (NVMe/TCP through `/dev/nvme-fabrics`) and [`loopdev`] for
//! tests and the demo (a loop device over the simulator's sparse file of the volume).

use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use simplyblock_controlplane::ConnectEntry;
use uuid::Uuid;

use crate::error::Result;

pub mod loopdev;
pub mod nvmeof;

/// Everything an attacher needs to find or attach one volume.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub cluster: Uuid,
    pub volume: Uuid,
    /// Subsystem NQN.
    pub nqn: String,
    /// Namespace id; 0 means the subsystem's only namespace.
    pub ns_id: u32,
    /// The control plane's paths, primary first.
    pub paths: Vec<ConnectEntry>,
    pub host_nqn: String,
}

/// One path of an attached volume as this node sees it: the storage node's address and
/// whether I/O can flow over it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathState {
    pub ip: String,
    pub port: u16,
    pub live: bool,
}

impl PathState {
    /// Whether this is the node's side of the control plane's path `e`.
    pub fn is(&self, e: &ConnectEntry) -> bool {
        self.ip == e.ip && self.port == e.port
    }
}

/// Attach, find and detach a volume's block device. Every verb is idempotent: attaching
/// an attached volume returns its device, detaching a gone device succeeds.
pub trait Attacher: Send + Sync + std::fmt::Debug {
    /// `nvmeof` or `loop`; recorded with each staged volume.
    fn kind(&self) -> &'static str;
    /// Attach (or find) the volume and return its device node.
    fn attach<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, Result<PathBuf>>;
    /// The device of an attached volume, if it is attached.
    fn find<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, Result<Option<PathBuf>>>;
    /// Detach the device; a device already gone counts as success.
    fn detach<'a>(&'a self, target: &'a Target, device: &'a Path) -> BoxFuture<'a, Result<()>>;
    /// The paths of an attached volume this node holds, live or not (a path being
    /// reconnected by the kernel is held but not live). None when nothing is attached.
    fn paths<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, Result<Vec<PathState>>>;
    /// Connect these of the control plane's paths of an attached volume; a path already
    /// held counts as connected.
    fn connect_paths<'a>(
        &'a self,
        target: &'a Target,
        paths: &'a [ConnectEntry],
    ) -> BoxFuture<'a, Result<()>>;
    /// Make the kernel see a grown volume.
    fn refresh_size<'a>(
        &'a self,
        target: &'a Target,
        device: &'a Path,
    ) -> BoxFuture<'a, Result<()>>;
}

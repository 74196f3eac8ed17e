//! The CSI Node service: stage (attach, then the filesystem layer), publish (bind mounts),
//! stats and expansion. Every call is idempotent and safe to repeat after a crash between
//! its steps: the stage record says what was done, the mount table says what is mounted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::attach::{Attacher, Target};
use crate::caps::{self, Access};
use crate::chain;
use crate::clusters::Clusters;
use crate::error::{CsiError, Result};
use crate::fs::{self, Probe};
use crate::handle::{self, VolumeHandle};
use crate::locks::KeyLocks;
use crate::metrics::{Step, note_step};
use crate::params::{FormatParams, PathTunables};
use crate::proto::csi::v1 as csi;
use crate::proto::csi::v1::node_server::Node;
use crate::record::{self, StageRecord};
use csi::node_service_capability::rpc::Type as Cap;

/// The Node service.
#[derive(Debug)]
pub struct NodeService {
    pub node_id: String,
    pub host_nqn: String,
    pub segments: BTreeMap<String, String>,
    pub state_dir: PathBuf,
    pub(crate) clusters: Arc<Clusters>,
    pub(crate) attacher: Arc<dyn Attacher>,
    pub(crate) locks: KeyLocks,
}

/// What the Node advertises.
pub const CAPABILITIES: &[Cap] = &[
    Cap::StageUnstageVolume,
    Cap::ExpandVolume,
    Cap::VolumeCondition,
    Cap::GetVolumeStats,
];

fn required(v: &str, what: &str) -> Result<()> {
    if v.is_empty() {
        Err(CsiError::InvalidArgument(format!("{what} is required")))
    } else {
        Ok(())
    }
}

/// Decide what to do with a probed device for a requested fsType and the fsType on record
/// (pure). `Ok(Some(fs))` formats with `fs` first, `Ok(None)` mounts `found` as is.
pub fn plan_filesystem(
    probe: &Probe,
    requested: &str,
    recorded: Option<&str>,
) -> Result<(String, bool)> {
    match probe {
        Probe::Filesystem(found) => {
            let wanted = recorded.unwrap_or(requested);
            if !wanted.is_empty() && wanted != found {
                return Err(CsiError::FailedPrecondition(format!(
                    "the device carries a {found} filesystem, but the volume asks for {wanted}; refusing to mount or reformat it (set fsType to {found} or leave it empty)"
                )));
            }
            Ok((found.clone(), false))
        }
        Probe::Blank => {
            if let Some(r) = recorded {
                return Err(CsiError::FailedPrecondition(format!(
                    "the device reads blank, but {r} was staged on it before; refusing to format a volume that held data"
                )));
            }
            Ok((fs::format_as(requested).to_string(), true))
        }
        Probe::Foreign(what) => Err(CsiError::FailedPrecondition(format!(
            "the device carries {what}, not a filesystem this driver mounts; refusing to format it"
        ))),
        Probe::Unknown => Err(CsiError::FailedPrecondition(
            "the device holds data without a known signature; refusing to format it".into(),
        )),
        Probe::Unreadable(why) => Err(CsiError::FailedPrecondition(format!(
            "the device could not be read ({why}); it is not formatted or mounted until it answers"
        ))),
    }
}

fn device_size(dev: &Path) -> Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = std::fs::File::open(dev)
        .map_err(|e| CsiError::io(format!("opening {}", dev.display()), e))?;
    f.seek(SeekFrom::End(0))
        .map_err(|e| CsiError::io(format!("sizing {}", dev.display()), e))
}

/// Whether a `/connect` 404 is the control plane refusing this host rather than a
/// missing volume: a volume with allowed hosts answers so for every other host.
fn refuses_host(message: &str) -> bool {
    message.contains("not found in allowed hosts")
        || message.contains("has allowed hosts configured")
}

impl NodeService {
    pub fn new(
        node_id: String,
        host_nqn: String,
        segments: BTreeMap<String, String>,
        state_dir: PathBuf,
        clusters: Arc<Clusters>,
        attacher: Arc<dyn Attacher>,
    ) -> Self {
        Self {
            node_id,
            host_nqn,
            segments,
            state_dir,
            clusters,
            attacher,
            locks: KeyLocks::default(),
        }
    }

    pub(crate) fn target_of(&self, r: &StageRecord) -> Target {
        Target {
            cluster: r.cluster,
            volume: r.volume,
            nqn: r.nqn.clone(),
            ns_id: r.ns_id,
            paths: vec![],
            host_nqn: self.host_nqn.clone(),
        }
    }

    /// Fresh connection info from the control plane (always asked: pools with allowed
    /// hosts and failed-over volumes change it).
    pub(crate) async fn target(&self, h: &VolumeHandle, volume_id: &str) -> Result<Target> {
        // A volume that failed over is served by the active end of its replication chain;
        // the demoted members must not be attached. The relationships outlive a reaped
        // member, so the handle of the original PersistentVolume still leads there.
        let chain = chain::resolve(self.clusters.as_ref(), h).await?;
        let h = chain.active_end();
        if chain.hops().len() > 1 {
            tracing::info!(volume = %volume_id, serving = %h, "the volume failed over; attaching the active end of its replication chain");
        }
        let client = self.clusters.client(h.cluster)?;
        let pool = self.clusters.pool_id(h.cluster, &h.pool).await?;
        let paths = match client
            .connect_volume(h.cluster, pool, h.volume, Some(&self.host_nqn))
            .await
        {
            Ok(p) => p,
            Err(e) if e.is_not_found() && refuses_host(e.message()) => {
                return Err(CsiError::FailedPrecondition(format!(
                    "Node {} may not attach volume {volume_id}: the volume's StoragePool restricts which Nodes attach its volumes (spec.allowedNodes) and the control plane refused this Node's host {} ({}); add {} to the StoragePool's spec.allowedNodes, or run the workload on a Node it lists",
                    self.node_id,
                    self.host_nqn,
                    e.message(),
                    self.node_id
                )));
            }
            Err(e) if e.is_not_found() => {
                return Err(CsiError::NotFound(format!("volume {volume_id}")));
            }
            Err(e) => return Err(e.into()),
        };
        let nqn = paths
            .iter()
            .map(|p| p.nqn.clone())
            .find(|n| !n.is_empty())
            .unwrap_or_else(|| handle::subsystem_nqn(h.cluster, h.volume));
        let ns_id = paths.iter().find_map(|p| p.ns_id).unwrap_or(0);
        Ok(Target {
            cluster: h.cluster,
            volume: h.volume,
            nqn,
            ns_id,
            paths,
            host_nqn: self.host_nqn.clone(),
        })
    }

    async fn stage(&self, req: csi::NodeStageVolumeRequest) -> Result<()> {
        required(&req.volume_id, "volume_id")?;
        required(&req.staging_target_path, "staging_target_path")?;
        let cap = req
            .volume_capability
            .as_ref()
            .ok_or_else(|| CsiError::InvalidArgument("volume_capability is required".into()))?;
        let (access, read_only) = caps::check(cap)?;
        let h = VolumeHandle::parse(&req.volume_id)?;
        let format_params = FormatParams::parse(&req.volume_context)?;
        if let Access::Mount { fs_type, .. } = &access {
            format_params.check_for(fs::format_as(fs_type))?;
        }
        let tunables = PathTunables::from_context(&req.volume_context)?;
        let staging = PathBuf::from(&req.staging_target_path);
        let _g = self.locks.lock(&req.volume_id).await;

        let old = record::load(&self.state_dir, &req.volume_id)?;
        if let Some(r) = &old
            && r.staging_path != staging
        {
            return Err(CsiError::AlreadyExists(format!(
                "volume {} is already staged at {}, not {}",
                req.volume_id,
                r.staging_path.display(),
                staging.display()
            )));
        }
        let block = matches!(access, Access::Block);
        let mounts = fs::mounts()?;
        if let (Some(r), Some(m)) = (&old, fs::mount_at(&mounts, &staging))
            && !block
            && r.device.as_ref().is_some_and(|d| Path::new(&m.source) == d)
        {
            // Mounted and ours. A dead mount (all paths lost, the filesystem shut down) is
            // restaged: unmounted lazily, reattached, and what was recorded remounted,
            // never formatted.
            if !fs::is_dead(&staging) {
                return Ok(());
            }
            tracing::warn!(volume = %req.volume_id, "staged mount is dead; restaging");
            fs::run(&fs::lazy_umount_cmd(&staging)).await?;
        }

        note_step(Step::Connect);
        let mut target = self.target(&h, &req.volume_id).await?;
        for p in &mut target.paths {
            tunables.fill(p);
        }
        let mut rec = old.clone().unwrap_or(StageRecord {
            volume_id: req.volume_id.clone(),
            cluster: target.cluster,
            volume: target.volume,
            nqn: target.nqn.clone(),
            ns_id: target.ns_id,
            staging_path: staging.clone(),
            attacher: self.attacher.kind().into(),
            block,
            device: None,
            fs_type: None,
            mount_flags: vec![],
            published: Default::default(),
        });
        rec.cluster = target.cluster;
        rec.volume = target.volume;
        rec.nqn = target.nqn.clone();
        rec.ns_id = target.ns_id;
        // Written before the attach, so an unstage after a crash knows what to detach.
        record::save(&self.state_dir, &rec)?;
        note_step(Step::Attach);
        let device = self.attacher.attach(&target).await?;
        rec.device = Some(device.clone());
        record::save(&self.state_dir, &rec)?;
        let Access::Mount { fs_type, flags } = access else {
            return Ok(());
        };
        std::fs::create_dir_all(&staging)
            .map_err(|e| CsiError::io(format!("creating {}", staging.display()), e))?;
        if let Some(m) = fs::mount_at(&fs::mounts()?, &staging) {
            if Path::new(&m.source) == device {
                rec.fs_type = Some(m.fs_type);
                return record::save(&self.state_dir, &rec);
            }
            return Err(CsiError::AlreadyExists(format!(
                "{} already has {} mounted, not this volume's {}",
                staging.display(),
                m.source,
                device.display()
            )));
        }
        note_step(Step::Format);
        let probe = fs::probe(&device).await;
        let (fs_name, format) = plan_filesystem(&probe, &fs_type, rec.fs_type.as_deref())?;
        if format {
            tracing::info!(volume = %req.volume_id, device = %device.display(), fs = %fs_name, "formatting a blank volume");
            fs::run(&fs::mkfs_cmd(&fs_name, &device, &format_params)?).await?;
            // Prove the format took before mounting it.
            match fs::probe(&device).await {
                Probe::Filesystem(f) if f == fs_name => {}
                other => {
                    return Err(CsiError::Internal(format!(
                        "mkfs.{fs_name} ran but the device probes as {other:?}"
                    )));
                }
            }
            if let Some(c) = fs::tune2fs_cmd(&fs_name, &device, &format_params) {
                fs::run(&c).await?;
            }
        }
        let opts = fs::mount_options(&fs_name, &flags, read_only);
        note_step(Step::Mount);
        fs::run(&fs::mount_cmd(&device, &staging, &fs_name, &opts)).await?;
        rec.fs_type = Some(fs_name);
        rec.mount_flags = flags;
        record::save(&self.state_dir, &rec)
    }

    async fn unstage(&self, req: csi::NodeUnstageVolumeRequest) -> Result<()> {
        required(&req.volume_id, "volume_id")?;
        required(&req.staging_target_path, "staging_target_path")?;
        let staging = PathBuf::from(&req.staging_target_path);
        let _g = self.locks.lock(&req.volume_id).await;
        fs::unmount_all(&staging).await?;
        let rec = record::load(&self.state_dir, &req.volume_id)?;
        let target = match &rec {
            Some(r) => Some(self.target_of(r)),
            // No record (it never got past validation, or was removed): find the device
            // from the handle.
            None => VolumeHandle::parse(&req.volume_id).ok().map(|h| Target {
                cluster: h.cluster,
                volume: h.volume,
                nqn: handle::subsystem_nqn(h.cluster, h.volume),
                ns_id: 0,
                paths: vec![],
                host_nqn: self.host_nqn.clone(),
            }),
        };
        if let Some(t) = target {
            let device = match rec.as_ref().and_then(|r| r.device.clone()) {
                Some(d) => Some(d),
                None => self.attacher.find(&t).await?,
            };
            if let Some(d) = device {
                self.attacher.detach(&t, &d).await?;
            }
        }
        record::remove(&self.state_dir, &req.volume_id)
    }

    async fn publish(&self, req: csi::NodePublishVolumeRequest) -> Result<()> {
        required(&req.volume_id, "volume_id")?;
        required(&req.staging_target_path, "staging_target_path")?;
        required(&req.target_path, "target_path")?;
        let cap = req
            .volume_capability
            .as_ref()
            .ok_or_else(|| CsiError::InvalidArgument("volume_capability is required".into()))?;
        let (access, ro_mode) = caps::check(cap)?;
        let read_only = req.readonly || ro_mode;
        let target = PathBuf::from(&req.target_path);
        let _g = self.locks.lock(&req.volume_id).await;
        let rec = record::load(&self.state_dir, &req.volume_id)?.ok_or_else(|| {
            CsiError::FailedPrecondition(format!(
                "volume {} is not staged on this node; NodeStageVolume must succeed first",
                req.volume_id
            ))
        })?;
        let Some(device) = rec.device.clone() else {
            return Err(CsiError::FailedPrecondition(format!(
                "volume {} is not attached yet; repeat NodeStageVolume",
                req.volume_id
            )));
        };
        let (source, flags) = match &access {
            Access::Block => (device.clone(), vec![]),
            Access::Mount { flags, .. } => (PathBuf::from(&req.staging_target_path), flags.clone()),
        };
        if let Some(m) = fs::mount_at(&fs::mounts()?, &target) {
            // A bind of a device node shows devtmpfs as its source and the node as its root.
            let dev_name = device
                .file_name()
                .map(|n| format!("/{}", n.to_string_lossy()));
            let ours =
                Path::new(&m.source) == device || dev_name.as_deref() == Some(m.root.as_str());
            if ours && m.read_only() == read_only {
                return self.note_published(rec, target);
            }
            return Err(CsiError::AlreadyExists(format!(
                "{} is already published from {} ({}), which this request does not match",
                target.display(),
                m.source,
                if m.read_only() {
                    "read-only"
                } else {
                    "read-write"
                }
            )));
        }
        note_step(Step::Publish);
        match access {
            Access::Block => {
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent)
                        .map_err(|e| CsiError::io(format!("creating {}", parent.display()), e))?;
                }
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&target)
                    .map_err(|e| CsiError::io(format!("creating {}", target.display()), e))?;
            }
            Access::Mount { .. } => {
                if rec.block {
                    return Err(CsiError::FailedPrecondition(format!(
                        "volume {} was staged as a block device and cannot be published as a filesystem",
                        req.volume_id
                    )));
                }
                std::fs::create_dir_all(&target)
                    .map_err(|e| CsiError::io(format!("creating {}", target.display()), e))?;
            }
        }
        fs::run(&fs::bind_cmd(&source, &target, read_only, &flags)).await?;
        self.note_published(rec, target)
    }

    /// Remember that the volume is published at `target` (which pod uses it).
    fn note_published(&self, mut rec: StageRecord, target: PathBuf) -> Result<()> {
        if rec.published.insert(target) {
            record::save(&self.state_dir, &rec)?;
        }
        Ok(())
    }

    async fn unpublish(&self, req: csi::NodeUnpublishVolumeRequest) -> Result<()> {
        required(&req.volume_id, "volume_id")?;
        required(&req.target_path, "target_path")?;
        let target = PathBuf::from(&req.target_path);
        let _g = self.locks.lock(&req.volume_id).await;
        fs::unmount_all(&target).await?;
        if let Some(mut rec) = record::load(&self.state_dir, &req.volume_id)?
            && rec.published.remove(&target)
        {
            record::save(&self.state_dir, &rec)?;
        }
        let gone = match std::fs::symlink_metadata(&target) {
            Ok(m) if m.is_dir() => std::fs::remove_dir(&target),
            Ok(_) => std::fs::remove_file(&target),
            Err(e) => Err(e),
        };
        match gone {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(CsiError::io(format!("removing {}", target.display()), e)),
        }
    }

    fn staged(&self, volume_id: &str, path: &Path) -> Result<StageRecord> {
        let rec = record::load(&self.state_dir, volume_id)?
            .ok_or_else(|| CsiError::NotFound(format!("volume {volume_id} on this node")))?;
        if !path.exists() {
            return Err(CsiError::NotFound(format!("path {}", path.display())));
        }
        Ok(rec)
    }

    async fn stats(
        &self,
        req: csi::NodeGetVolumeStatsRequest,
    ) -> Result<csi::NodeGetVolumeStatsResponse> {
        required(&req.volume_id, "volume_id")?;
        required(&req.volume_path, "volume_path")?;
        let path = PathBuf::from(&req.volume_path);
        let rec = self.staged(&req.volume_id, &path)?;
        let mounts = fs::mounts()?;
        let Some(m) = fs::mount_at(&mounts, &path) else {
            return Err(CsiError::NotFound(format!(
                "volume {} at {} (nothing is mounted there)",
                req.volume_id,
                path.display()
            )));
        };
        if rec.block || std::fs::metadata(&path).is_ok_and(|x| x.is_file()) {
            let dev = rec
                .device
                .clone()
                .unwrap_or_else(|| PathBuf::from(&m.source));
            let (size, cond) = match device_size(&dev) {
                Ok(s) => (s, None),
                Err(e) => (0, Some(e.to_string())),
            };
            return Ok(csi::NodeGetVolumeStatsResponse {
                usage: vec![csi::VolumeUsage {
                    total: size as i64,
                    unit: csi::volume_usage::Unit::Bytes as i32,
                    ..Default::default()
                }],
                volume_condition: Some(condition(cond)),
            });
        }
        match fs::usage(&path) {
            Ok(u) => Ok(csi::NodeGetVolumeStatsResponse {
                usage: vec![
                    csi::VolumeUsage {
                        available: u.available_bytes as i64,
                        total: u.total_bytes as i64,
                        used: u.used_bytes as i64,
                        unit: csi::volume_usage::Unit::Bytes as i32,
                    },
                    csi::VolumeUsage {
                        available: u.free_inodes as i64,
                        total: u.total_inodes as i64,
                        used: u.total_inodes.saturating_sub(u.free_inodes) as i64,
                        unit: csi::volume_usage::Unit::Inodes as i32,
                    },
                ],
                volume_condition: Some(condition(None)),
            }),
            // The mount exists but does not answer: report it abnormal rather than fail.
            Err(e) => Ok(csi::NodeGetVolumeStatsResponse {
                usage: vec![],
                volume_condition: Some(condition(Some(e.to_string()))),
            }),
        }
    }

    async fn expand(
        &self,
        req: csi::NodeExpandVolumeRequest,
    ) -> Result<csi::NodeExpandVolumeResponse> {
        required(&req.volume_id, "volume_id")?;
        required(&req.volume_path, "volume_path")?;
        let path = PathBuf::from(&req.volume_path);
        let rec = self.staged(&req.volume_id, &path)?;
        let _g = self.locks.lock(&req.volume_id).await;
        let device = rec.device.clone().ok_or_else(|| {
            CsiError::FailedPrecondition(format!("volume {} is not attached", req.volume_id))
        })?;
        let t = self.target_of(&rec);
        self.attacher.refresh_size(&t, &device).await?;
        let block = rec.block
            || matches!(
                req.volume_capability
                    .as_ref()
                    .and_then(|c| c.access_type.as_ref()),
                Some(csi::volume_capability::AccessType::Block(_))
            );
        if !block {
            let fs_type = rec.fs_type.clone().unwrap_or_else(|| fs::DEFAULT_FS.into());
            // xfs_growfs needs the mount point; the staging path is the one we own.
            fs::run(&fs::grow_cmd(&fs_type, &device, &rec.staging_path)?).await?;
        }
        Ok(csi::NodeExpandVolumeResponse {
            capacity_bytes: device_size(&device)? as i64,
        })
    }
}

fn condition(err: Option<String>) -> csi::VolumeCondition {
    match err {
        None => csi::VolumeCondition {
            abnormal: false,
            message: "volume is healthy".into(),
        },
        Some(e) => csi::VolumeCondition {
            abnormal: true,
            message: e,
        },
    }
}

type R<T> = std::result::Result<Response<T>, Status>;

#[tonic::async_trait]
impl Node for NodeService {
    async fn node_stage_volume(
        &self,
        r: Request<csi::NodeStageVolumeRequest>,
    ) -> R<csi::NodeStageVolumeResponse> {
        self.stage(r.into_inner()).await?;
        Ok(Response::new(csi::NodeStageVolumeResponse {}))
    }

    async fn node_unstage_volume(
        &self,
        r: Request<csi::NodeUnstageVolumeRequest>,
    ) -> R<csi::NodeUnstageVolumeResponse> {
        self.unstage(r.into_inner()).await?;
        Ok(Response::new(csi::NodeUnstageVolumeResponse {}))
    }

    async fn node_publish_volume(
        &self,
        r: Request<csi::NodePublishVolumeRequest>,
    ) -> R<csi::NodePublishVolumeResponse> {
        self.publish(r.into_inner()).await?;
        Ok(Response::new(csi::NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        r: Request<csi::NodeUnpublishVolumeRequest>,
    ) -> R<csi::NodeUnpublishVolumeResponse> {
        self.unpublish(r.into_inner()).await?;
        Ok(Response::new(csi::NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_volume_stats(
        &self,
        r: Request<csi::NodeGetVolumeStatsRequest>,
    ) -> R<csi::NodeGetVolumeStatsResponse> {
        Ok(Response::new(self.stats(r.into_inner()).await?))
    }

    async fn node_expand_volume(
        &self,
        r: Request<csi::NodeExpandVolumeRequest>,
    ) -> R<csi::NodeExpandVolumeResponse> {
        Ok(Response::new(self.expand(r.into_inner()).await?))
    }

    async fn node_get_capabilities(
        &self,
        _r: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> R<csi::NodeGetCapabilitiesResponse> {
        Ok(Response::new(csi::NodeGetCapabilitiesResponse {
            capabilities: CAPABILITIES
                .iter()
                .map(|t| csi::NodeServiceCapability {
                    r#type: Some(csi::node_service_capability::Type::Rpc(
                        csi::node_service_capability::Rpc { r#type: *t as i32 },
                    )),
                })
                .collect(),
        }))
    }

    async fn node_get_info(
        &self,
        _r: Request<csi::NodeGetInfoRequest>,
    ) -> R<csi::NodeGetInfoResponse> {
        Ok(Response::new(csi::NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            max_volumes_per_node: 0,
            accessible_topology: Some(csi::Topology {
                segments: self
                    .segments
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            }),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filesystem_plan_never_formats_data() {
        let xfs = Probe::Filesystem("xfs".into());
        assert_eq!(
            plan_filesystem(&xfs, "", None).expect("mount"),
            ("xfs".into(), false)
        );
        assert_eq!(
            plan_filesystem(&xfs, "xfs", None).expect("match"),
            ("xfs".into(), false)
        );
        let e = plan_filesystem(&xfs, "ext4", None).expect_err("mismatch");
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
        assert!(
            e.to_string().contains("xfs") && e.to_string().contains("ext4"),
            "{e}"
        );
        // The record wins over the capability on a restage.
        assert_eq!(
            plan_filesystem(&xfs, "ext4", Some("xfs")).expect("restage"),
            ("xfs".into(), false)
        );
        assert_eq!(
            plan_filesystem(&Probe::Blank, "", None).expect("default"),
            ("ext4".into(), true)
        );
        assert_eq!(
            plan_filesystem(&Probe::Blank, "xfs", None).expect("xfs"),
            ("xfs".into(), true)
        );
        assert!(plan_filesystem(&Probe::Blank, "", Some("ext4")).is_err());
        assert!(plan_filesystem(&Probe::Unknown, "ext4", None).is_err());
        assert!(plan_filesystem(&Probe::Foreign("crypto_LUKS".into()), "", None).is_err());
        assert!(plan_filesystem(&Probe::Unreadable("EIO".into()), "", None).is_err());
    }
}

//! A volume served to a "pod": the CSI driver in-process (controller and node, with the
//! loop attacher over sbsim's volume files), reading the cluster list from the CSI secret
//! the operator wrote and the parameters from the StorageClass the pool controller wrote,
//! as the external provisioner and the kubelet would.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::Api;
use simplyblock_api::csi_secret;
use simplyblock_csi::attach::loopdev::LoopAttacher;
use simplyblock_csi::clusters::{Clusters, parse_secret};
use simplyblock_csi::proto::csi::v1 as csi;
use simplyblock_csi::proto::csi::v1::controller_client::ControllerClient;
use simplyblock_csi::proto::csi::v1::node_client::NodeClient;
use simplyblock_csi::{Driver, Mode, NodeConfig};
use tonic::transport::Channel;

/// The provisioner's prefix for parameters meant for it rather than the driver.
const PROVISIONER_PREFIX: &str = "csi.storage.k8s.io/";
const FSTYPE: &str = "csi.storage.k8s.io/fstype";
const NODE: &str = "worker-1";

/// The driver serving on a socket, a volume staged and published through it.
pub struct Served {
    pub volume: csi::Volume,
    pub fs_type: String,
    pub note: Option<String>,
    /// Whether the volume is staged (and then published) on this machine.
    pub mounted: bool,
    pub target: PathBuf,
    staging: PathBuf,
    node: NodeClient<Channel>,
    driver: Option<Running>,
}

fn capability(fs_type: &str) -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_mode: Some(csi::volume_capability::AccessMode {
            mode: csi::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
        }),
        access_type: Some(csi::volume_capability::AccessType::Mount(
            csi::volume_capability::MountVolume {
                fs_type: fs_type.into(),
                ..Default::default()
            },
        )),
    }
}

fn has_tool(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(name).is_file()))
}

/// Why this machine cannot attach a volume, if it cannot: loop devices need root.
pub fn cannot_attach() -> Option<String> {
    // It opens read-write only for root, on a kernel with loop devices.
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")
    {
        Ok(_) => None,
        Err(e) => Some(format!(
            "the volume is created but not mounted: attaching it needs loop devices (/dev/loop-control: {e}); run the demo as root to see it mounted"
        )),
    }
}

async fn connect(socket: &Path) -> anyhow::Result<Channel> {
    let path = socket.to_path_buf();
    Ok(tonic::transport::Endpoint::try_from("http://localhost")?
        .connect_with_connector(tower::service_fn(move |_| {
            let p = path.clone();
            async move {
                tokio::net::UnixStream::connect(p)
                    .await
                    .map(hyper_util::rt::TokioIo::new)
            }
        }))
        .await?)
}

/// A CSI driver serving on a socket in this process, as one site's driver pods would.
pub struct Running {
    pub channel: Channel,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Stops serving and waits for the server to end.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

/// Starts the driver (controller and node) under `dir`, with the cluster list of the CSI
/// secret as it is now. `local` names the site's own cluster when it is not the one the
/// secret marks (a second site's driver reads its own site's secret).
#[allow(clippy::too_many_arguments)]
pub async fn start(
    kube: &kube::Client,
    node_plugin: &kube::Client,
    namespace: &str,
    dir: &Path,
    volume_files: &Path,
    control_plane: &str,
    local: Option<simplyblock_controlplane::Uuid>,
) -> anyhow::Result<Running> {
    let secret = Api::<Secret>::namespaced(kube.clone(), namespace)
        .get(csi_secret::NAME)
        .await?;
    let text = secret
        .data
        .as_ref()
        .and_then(|d| d.get(csi_secret::KEY))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .ok_or_else(|| anyhow::anyhow!("the CSI secret holds no cluster list"))?;
    let mut entries = parse_secret(&text)?;
    for entry in &mut entries {
        entry.cluster_endpoint = control_plane.to_owned();
        if let Some(site) = local {
            entry.local = entry.cluster_id == site;
        }
    }
    let clusters = Arc::new(Clusters::new(&entries, None)?);
    let facts = simplyblock_csi::topology::read_node(node_plugin.clone(), NODE).await?;
    let socket = dir.join("csi.sock");
    let driver = Driver {
        name: simplyblock_csi::handle::DRIVER_NAME.into(),
        mode: Mode::Both,
        clusters,
        node: Some(NodeConfig {
            node_id: NODE.into(),
            host_nqn: simplyblock_csi::handle::host_nqn(facts.uid.as_deref().unwrap_or(NODE)),
            segments: simplyblock_csi::topology::segments(&facts.labels, NODE),
            state_dir: dir.join("node-state"),
            attacher: Arc::new(LoopAttacher::new(volume_files)),
        }),
    };
    let routes = driver.routes()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let s = socket.clone();
    let task = tokio::spawn(async move {
        if let Err(e) = simplyblock_csi::serve(&s, routes, async {
            let _ = rx.await;
        })
        .await
        {
            eprintln!("the CSI driver stopped: {e}");
        }
    });
    let mut tries = 0;
    while tokio::net::UnixStream::connect(&socket).await.is_err() {
        tries += 1;
        anyhow::ensure!(tries < 100, "the CSI driver did not start listening");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let channel = connect(&socket).await?;
    Ok(Running {
        channel,
        stop: Some(tx),
        task: Some(task),
    })
}

/// Starts the driver under `dir` and creates `name` (1 GiB) from `class`; stages and
/// publishes it when this machine can attach volumes. The driver runs on this machine,
/// outside the cluster: it reaches the control plane at `control_plane` rather than at
/// the in-cluster endpoint the CSI secret names. The node plugin reads its Node through
/// `node_plugin` (its own ServiceAccount); the CSI secret, which the kubelet would mount,
/// is read through `kube`.
#[allow(clippy::too_many_arguments)]
pub async fn serve(
    kube: &kube::Client,
    node_plugin: &kube::Client,
    namespace: &str,
    class: &str,
    name: &str,
    dir: &Path,
    volume_files: &Path,
    control_plane: &str,
) -> anyhow::Result<Served> {
    let running = start(
        kube,
        node_plugin,
        namespace,
        dir,
        volume_files,
        control_plane,
        None,
    )
    .await?;
    let channel = running.channel.clone();
    let mut controller = ControllerClient::new(channel.clone());
    let node = NodeClient::new(channel);

    // What the external provisioner does with a class: the fsType goes into the
    // capability, its own keys are dropped, the rest are the driver's parameters.
    let sc = Api::<StorageClass>::all(kube.clone()).get(class).await?;
    let params = sc.parameters.unwrap_or_default();
    let mut fs_type = params.get(FSTYPE).cloned().unwrap_or_else(|| "ext4".into());
    let mut note = None;
    if !has_tool(&format!("mkfs.{fs_type}")) {
        note = Some(format!(
            "mkfs.{fs_type} is not installed here, so the volume is formatted ext4 instead"
        ));
        fs_type = "ext4".into();
    }
    let parameters: HashMap<String, String> = params
        .into_iter()
        .filter(|(k, _)| !k.starts_with(PROVISIONER_PREFIX))
        .chain([("csi.storage.k8s.io/pvc/name".to_owned(), name.to_owned())])
        .collect();
    let volume = controller
        .create_volume(csi::CreateVolumeRequest {
            name: name.into(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: 1 << 30,
                limit_bytes: 0,
            }),
            volume_capabilities: vec![capability(&fs_type)],
            parameters,
            ..Default::default()
        })
        .await?
        .into_inner()
        .volume
        .ok_or_else(|| anyhow::anyhow!("CreateVolume answered without a volume"))?;

    let staging = dir.join("staging").join(name);
    let target = dir.join("pods/demo/volumes").join(name);
    let mut served = Served {
        volume,
        fs_type,
        note,
        mounted: false,
        target,
        staging,
        node,
        driver: Some(running),
    };
    if let Some(why) = cannot_attach() {
        served.note = Some(match served.note.take() {
            Some(earlier) => format!("{earlier}; {why}"),
            None => why,
        });
        return Ok(served);
    }
    served.mount().await?;
    Ok(served)
}

impl Served {
    /// Used and total bytes of the mounted filesystem, as the kubelet reads them.
    pub async fn usage(&mut self) -> anyhow::Result<(i64, i64)> {
        let stats = self
            .node
            .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
                volume_id: self.volume.volume_id.clone(),
                volume_path: self.target.display().to_string(),
                staging_target_path: self.staging.display().to_string(),
            })
            .await?
            .into_inner();
        let bytes = stats
            .usage
            .iter()
            .find(|u| u.unit == csi::volume_usage::Unit::Bytes as i32)
            .ok_or_else(|| anyhow::anyhow!("no byte usage in the volume's stats"))?;
        Ok((bytes.used, bytes.total))
    }

    /// Stages and publishes the volume at its target, as the kubelet does for a pod.
    pub async fn mount(&mut self) -> anyhow::Result<()> {
        attach(
            &mut self.node,
            &self.volume,
            &self.fs_type,
            &self.staging,
            &self.target,
        )
        .await?;
        // From here on, release() undoes it (unpublish of an unpublished target is a no-op).
        self.mounted = true;
        Ok(())
    }

    /// Unpublishes and unstages: the pod is gone, nothing stays mounted or attached.
    pub async fn unmount(&mut self) -> anyhow::Result<()> {
        if self.mounted {
            detach(
                &mut self.node,
                &self.volume.volume_id,
                &self.staging,
                &self.target,
            )
            .await?;
            self.mounted = false;
        }
        Ok(())
    }

    /// Unmounts, then stops the driver.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let result = self.unmount().await;
        if let Some(driver) = self.driver.take() {
            driver.stop().await;
        }
        result
    }
}

/// Stages `volume` at `staging` and publishes it at `target` through `node`.
pub async fn attach(
    node: &mut NodeClient<Channel>,
    volume: &csi::Volume,
    fs_type: &str,
    staging: &Path,
    target: &Path,
) -> anyhow::Result<()> {
    node.node_stage_volume(csi::NodeStageVolumeRequest {
        volume_id: volume.volume_id.clone(),
        staging_target_path: staging.display().to_string(),
        volume_capability: Some(capability(fs_type)),
        volume_context: volume.volume_context.clone(),
        ..Default::default()
    })
    .await?;
    node.node_publish_volume(csi::NodePublishVolumeRequest {
        volume_id: volume.volume_id.clone(),
        staging_target_path: staging.display().to_string(),
        target_path: target.display().to_string(),
        volume_capability: Some(capability(fs_type)),
        volume_context: volume.volume_context.clone(),
        ..Default::default()
    })
    .await?;
    Ok(())
}

/// Unpublishes `target` and unstages `staging`.
pub async fn detach(
    node: &mut NodeClient<Channel>,
    volume_id: &str,
    staging: &Path,
    target: &Path,
) -> anyhow::Result<()> {
    let unpublished = node
        .node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
            volume_id: volume_id.into(),
            target_path: target.display().to_string(),
        })
        .await;
    let unstaged = node
        .node_unstage_volume(csi::NodeUnstageVolumeRequest {
            volume_id: volume_id.into(),
            staging_target_path: staging.display().to_string(),
        })
        .await;
    unpublished
        .and(unstaged)
        .map(|_| ())
        .map_err(|e| anyhow::anyhow!("releasing volume {volume_id}: {e}"))
}

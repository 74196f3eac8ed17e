//! A volume served to a "pod": the CSI driver's controller and node plugins as the
//! operator's StatefulSet and DaemonSet run them, each in this process with its
//! container's arguments and environment and its volumes (the CSI secret the operator
//! wrote, the control plane's CA, the driver's client certificate) written as its kubelet
//! would mount them; the parameters come from the StorageClass the pool controller wrote,
//! as the external provisioner and the kubelet would pass them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::Api;
use simplyblock_api::csi_secret;
use simplyblock_csi::cli::Args;
use simplyblock_csi::proto::csi::v1 as csi;
use simplyblock_csi::proto::csi::v1::controller_client::ControllerClient;
use simplyblock_csi::proto::csi::v1::node_client::NodeClient;
use simplyblock_operator::driver::names::{CONTROLLER_STATEFULSET, NODE_DAEMONSET};
use simplyblock_testenv::kubelet;
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

/// One plugin serving on its socket in this process.
struct Plugin {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// The node plugin's path recovery, as the binary starts it; its loops end when
    /// this is dropped.
    _recovery: Option<simplyblock_csi::recovery::Recovery>,
}

impl Plugin {
    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

/// A site's CSI driver as its pods would run it: the controller plugin (provisioning,
/// snapshots, csi-addons replication) and the node plugin (staging, publishing), each on
/// its own socket.
pub struct Running {
    pub controller: Channel,
    pub node: Channel,
    plugins: Vec<Plugin>,
}

impl Running {
    /// Stops serving and waits for the plugins to end.
    pub async fn stop(self) {
        for plugin in self.plugins {
            plugin.stop().await;
        }
    }
}

/// What a machine outside the cluster lacks, given to the plugins as flags: the
/// connection to the control plane goes through sbsim at `proxy`, which answers at the
/// control plane's in-cluster name (the endpoint the CSI secret names does not resolve
/// here; its URL and the certificate check stay as they are), and the node plugin
/// attaches sbsim's volume files as loop devices instead of connecting NVMe/TCP.
#[derive(Clone, Copy)]
pub struct StandIns<'a> {
    pub proxy: SocketAddr,
    pub volume_files: &'a Path,
}

/// Starts the container `container` of `pod` in this process: its volumes mounted under
/// `root`, its arguments and environment as written plus `extra`; `local` rewrites the
/// mounted CSI secret's marks to that cluster, as the secret a second site's operator
/// writes would say; `pod_account` is the client of the pod's ServiceAccount, with which
/// the node plugin reads its Node.
#[allow(clippy::too_many_arguments)]
async fn start_plugin(
    kube: &kube::Client,
    pod_account: Option<&kube::Client>,
    namespace: &str,
    pod: &PodSpec,
    container: &str,
    root: &Path,
    extra: &[String],
    local: Option<simplyblock_controlplane::Uuid>,
) -> anyhow::Result<(Plugin, Channel)> {
    let mounted = kubelet::mount(kube, namespace, pod, container, NODE, root).await?;
    let mut args = mounted.args.clone();
    args.extend(extra.iter().cloned());
    let args = Args::from_container(&args, &mounted.env)?;
    if let Some(site) = local {
        let text = std::fs::read(&args.secret_file)?;
        let mut contents = csi_secret::decode(&text)?;
        contents.local = [site.to_string()].into();
        std::fs::write(&args.secret_file, csi_secret::encode(&contents))?;
    }
    let driver = args.driver(pod_account.cloned()).await?;
    let socket = args.socket()?;
    let routes = driver.routes()?;
    let recovery = driver.start_recovery()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let s = socket.clone();
    let name = container.to_owned();
    let task = tokio::spawn(async move {
        if let Err(e) = simplyblock_csi::serve(&s, routes, async {
            let _ = rx.await;
        })
        .await
        {
            eprintln!("the CSI driver's {name} stopped: {e}");
        }
    });
    let mut tries = 0;
    while tokio::net::UnixStream::connect(&socket).await.is_err() {
        tries += 1;
        anyhow::ensure!(
            tries < 100,
            "the CSI driver's {container} did not start listening"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let channel = connect(&socket).await?;
    Ok((
        Plugin {
            stop: Some(tx),
            task: Some(task),
            _recovery: recovery,
        },
        channel,
    ))
}

/// Starts a site's driver under `dir` from the StatefulSet and DaemonSet the operator
/// wrote, with `stand_ins`. `local` names the site's own cluster when it is not the one the
/// secret marks (a second site's driver reads its own site's secret). The node plugin reads
/// its Node through `node_plugin` (its own ServiceAccount); the pods' Secrets and
/// ConfigMaps, which their kubelet would mount, are read through `kube`.
pub async fn start(
    kube: &kube::Client,
    node_plugin: &kube::Client,
    namespace: &str,
    dir: &Path,
    stand_ins: StandIns<'_>,
    local: Option<simplyblock_controlplane::Uuid>,
) -> anyhow::Result<Running> {
    let controller_pod = Api::<StatefulSet>::namespaced(kube.clone(), namespace)
        .get(CONTROLLER_STATEFULSET)
        .await?
        .spec
        .template
        .spec
        .ok_or_else(|| anyhow::anyhow!("the controller plugin's StatefulSet has no pod"))?;
    let node_pod = Api::<DaemonSet>::namespaced(kube.clone(), namespace)
        .get(NODE_DAEMONSET)
        .await?
        .spec
        .template
        .spec
        .ok_or_else(|| anyhow::anyhow!("the node plugin's DaemonSet has no pod"))?;
    let proxy = format!("--control-plane-proxy={}", stand_ins.proxy);
    let (controller, controller_channel) = start_plugin(
        kube,
        None,
        namespace,
        &controller_pod,
        "csi-controller",
        &dir.join("controller"),
        std::slice::from_ref(&proxy),
        local,
    )
    .await?;
    let node_extra = [
        proxy.clone(),
        "--attacher=loop".to_owned(),
        format!("--loop-dir={}", stand_ins.volume_files.display()),
        // Set in every pod, so the plugin reads its Node.
        "--kubernetes=true".to_owned(),
    ];
    let (node, node_channel) = match start_plugin(
        kube,
        Some(node_plugin),
        namespace,
        &node_pod,
        "csi-node",
        &dir.join("node"),
        &node_extra,
        local,
    )
    .await
    {
        Ok(started) => started,
        Err(e) => {
            controller.stop().await;
            return Err(e);
        }
    };
    Ok(Running {
        controller: controller_channel,
        node: node_channel,
        plugins: vec![controller, node],
    })
}

/// Starts the driver under `dir` ([`start`]) and creates `name` (1 GiB) from `class`;
/// stages and publishes it when this machine can attach volumes.
#[allow(clippy::too_many_arguments)]
pub async fn serve(
    kube: &kube::Client,
    node_plugin: &kube::Client,
    namespace: &str,
    class: &str,
    name: &str,
    dir: &Path,
    stand_ins: StandIns<'_>,
) -> anyhow::Result<Served> {
    let running = start(kube, node_plugin, namespace, dir, stand_ins, None).await?;
    let mut controller = ControllerClient::new(running.controller.clone());
    let node = NodeClient::new(running.node.clone());

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

    /// Reads `file` from another volume of this driver, mounted beside this one under
    /// `name` for the read and released after it, as a second pod would.
    pub async fn read_from(
        &mut self,
        other: &csi::Volume,
        name: &str,
        file: &str,
    ) -> anyhow::Result<String> {
        let root = self
            .staging
            .parent()
            .and_then(Path::parent)
            .ok_or_else(|| anyhow::anyhow!("the staging path has no root"))?
            .to_path_buf();
        let staging = root.join("staging").join(name);
        let target = root.join("pods/reader/volumes").join(name);
        attach(&mut self.node, other, &self.fs_type, &staging, &target).await?;
        let read = std::fs::read_to_string(target.join(file));
        detach(&mut self.node, &other.volume_id, &staging, &target).await?;
        Ok(read?)
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

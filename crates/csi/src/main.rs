//! `simplyblock-csi`: the CSI driver binary.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use simplyblock_csi::attach::Attacher;
use simplyblock_csi::attach::loopdev::LoopAttacher;
use simplyblock_csi::attach::nvmeof::NvmeofAttacher;
use simplyblock_csi::clusters::{ClusterEntry, Clusters, DEFAULT_SECRET_PATH};
use simplyblock_csi::{Driver, Mode, NodeConfig, handle, topology};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum AttacherKind {
    /// NVMe/TCP through /dev/nvme-fabrics (production).
    Nvmeof,
    /// Loop devices over the simulator's volume files (tests, demo).
    Loop,
}

#[derive(Parser, Debug)]
#[command(
    name = "simplyblock-csi",
    about = "The simplyblock CSI driver (csi.simplyblock.io)"
)]
struct Args {
    /// The CSI endpoint the sidecars connect to.
    #[arg(long, env = "CSI_ENDPOINT", default_value = "unix:///csi/csi.sock")]
    endpoint: String,
    /// Which services to serve.
    #[arg(long, value_enum, default_value = "both")]
    mode: Mode,
    #[arg(long, default_value = handle::DRIVER_NAME)]
    driver_name: String,
    /// This node's name (the Kubernetes node name); required in node mode.
    #[arg(long, env = "NODE_ID")]
    node_id: Option<String>,
    /// The CSI secret (Secret simplyblock-csi-secret-v2, key secret.json).
    #[arg(long, env = "SPDKCSI_SECRET", default_value = DEFAULT_SECRET_PATH)]
    secret_file: PathBuf,
    /// A bearer token file that replaces every cluster_secret when non-empty.
    #[arg(long, env = "SPDKCSI_API_TOKEN_PATH")]
    api_token_file: Option<PathBuf>,
    /// A cluster to serve in addition to the secret's (with --cluster-endpoint and
    /// --cluster-secret-file).
    #[arg(long, requires = "cluster_endpoint")]
    cluster_id: Option<uuid::Uuid>,
    /// The control plane's address for --cluster-id, e.g. http://simplyblock-webappapi:5000.
    #[arg(long, requires = "cluster_id")]
    cluster_endpoint: Option<String>,
    /// A file holding the bearer secret for --cluster-id: a secret is never a flag, which
    /// every user of the machine reads in /proc/<pid>/cmdline.
    #[arg(long, env = "SIMPLYBLOCK_CLUSTER_SECRET_FILE", requires = "cluster_id")]
    cluster_secret_file: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "nvmeof")]
    attacher: AttacherKind,
    /// Directory of the volume files (loop attacher).
    #[arg(long, required_if_eq("attacher", "loop"))]
    loop_dir: Option<PathBuf>,
    /// Where the node keeps its stage records.
    #[arg(long, default_value = "/var/lib/simplyblock-csi")]
    state_dir: PathBuf,
    /// The host NQN; by default derived from the Node's UID (or the node name without Kubernetes).
    #[arg(long)]
    host_nqn: Option<String>,
    /// The NVMe host id sent with the host NQN; by default the UUID the host NQN carries
    /// (the Node's UID), or one derived from the NQN's text.
    #[arg(long)]
    host_id: Option<uuid::Uuid>,
    /// Read the Node's labels and UID from Kubernetes (in-cluster config or $KUBECONFIG).
    /// `--kubernetes=false` skips it: topology is then the hostname segment only. The
    /// default is true inside a pod (KUBERNETES_SERVICE_HOST set), else false.
    #[arg(long, action = clap::ArgAction::Set, default_value_t = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some())]
    kubernetes: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    simplyblock_csi::install_crypto_provider();
    let a = Args::parse();

    let cluster_secret = match &a.cluster_secret_file {
        None => String::new(),
        Some(path) => std::fs::read_to_string(path)
            .map(|s| s.trim().to_owned())
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot read the cluster secret file {} ({e}); mount it there or pass another --cluster-secret-file",
                    path.display()
                )
            })?,
    };
    let extra = match (a.cluster_id, &a.cluster_endpoint) {
        (Some(id), Some(ep)) => Some(ClusterEntry {
            cluster_id: id,
            cluster_endpoint: ep.clone(),
            cluster_secret,
            local: true,
        }),
        _ => None,
    };
    // Unreadable or malformed files stop the driver here, where it is seen; later changes
    // are followed, and a bad one is logged while the last good list is kept.
    let clusters = Arc::new(Clusters::from_files(
        &a.secret_file,
        a.api_token_file.as_deref(),
        extra,
    )?);

    let node = if a.mode.node() {
        let Some(node_id) = a.node_id.clone() else {
            anyhow::bail!("node mode needs --node-id (or NODE_ID), the Kubernetes node name");
        };
        let facts = if a.kubernetes {
            let client = kube::Client::try_default().await?;
            // Registering without topology breaks provisioning: exit instead.
            topology::read_node(client, &node_id).await?
        } else {
            topology::NodeFacts::default()
        };
        let host_nqn = a.host_nqn.clone().unwrap_or_else(|| {
            handle::host_nqn(
                &facts
                    .uid
                    .clone()
                    .unwrap_or_else(|| handle::uuid_for_name(&node_id).to_string()),
            )
        });
        let attacher: Arc<dyn Attacher> = match a.attacher {
            AttacherKind::Nvmeof => Arc::new(NvmeofAttacher {
                host_id: a.host_id,
                ..NvmeofAttacher::default()
            }),
            AttacherKind::Loop => {
                Arc::new(LoopAttacher::new(a.loop_dir.clone().unwrap_or_default()))
            }
        };
        Some(NodeConfig {
            segments: topology::segments(&facts.labels, &node_id),
            node_id,
            host_nqn,
            state_dir: a.state_dir.clone(),
            attacher,
        })
    } else {
        None
    };
    let driver = Driver {
        name: a.driver_name.clone(),
        mode: a.mode,
        clusters,
        node,
    };
    let socket = simplyblock_csi::socket_path(&a.endpoint)?;
    tracing::info!(endpoint = %a.endpoint, mode = ?a.mode, "simplyblock-csi serving");
    let routes = driver.routes()?;
    let shutdown = async {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    simplyblock_csi::serve(&socket, routes, shutdown).await?;
    Ok(())
}

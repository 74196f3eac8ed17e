//! Shared harness: sbsim in-process with volume files, an active cluster with a pool, and
//! the driver in-process on a unix socket with the loop attacher.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use simplyblock_controlplane::{
    Client, ClientConfig, ClusterCreate, ClusterStatus, NodeStatus, PoolCreate, StorageNodeAdd,
    Url, Uuid,
};
use simplyblock_csi::attach::loopdev::LoopAttacher;
use simplyblock_csi::clusters::{ClusterEntry, Clusters};
use simplyblock_csi::proto::csi::v1::controller_client::ControllerClient;
use simplyblock_csi::proto::csi::v1::identity_client::IdentityClient;
use simplyblock_csi::proto::csi::v1::node_client::NodeClient;
use simplyblock_csi::{Driver, Mode, NodeConfig};
use simplyblock_simulator::{Server, Sim, SimConfig};
use tonic::transport::Channel;

pub const TOKEN: &str = "csi-test-admin";

pub struct Sbsim {
    pub server: Server,
    pub client: Client,
    pub cluster: Uuid,
    pub cluster_secret: String,
    pub pool: Uuid,
    pub pool_name: String,
    pub files: PathBuf,
    pub dir: tempfile::TempDir,
}

pub fn client_for(url: &str) -> Client {
    let mut cfg = ClientConfig::new(Url::parse(url).expect("url"), TOKEN);
    cfg.timeout = Duration::from_secs(30);
    cfg.retry_backoff = Duration::from_millis(20);
    Client::new(cfg).expect("client")
}

/// Polls `f` until it yields a value. The limit is the workspace's one patience: it only
/// says how long a failing test takes to fail, and a shorter one fails a loaded machine.
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    simplyblock_testenv::wait::until(what, async || f().await).await
}

/// sbsim with `workers` enrolled workers, an active cluster over all of them and a pool.
pub async fn sbsim(workers: usize) -> Sbsim {
    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut fleet = String::from("workers:\n");
    for i in 1..=workers {
        fleet.push_str(&format!(
            "  - hostname: w{i}\n    addresses: [10.10.0.{i}]\n    devices: {{count: 2, size: 2T}}\n    labels: {{node-restriction.kubernetes.io/simplyblock-storage-node: c1}}\n"
        ));
    }
    let fleet_path = dir.path().join("fleet.yaml");
    std::fs::write(&fleet_path, fleet).expect("fleet");
    let files = dir.path().join("volumes");
    let config = SimConfig {
        tokens: vec![TOKEN.into()],
        time_scale: 1000.0,
        fleet: Some(fleet_path),
        seed: 7,
        volume_files: Some(files.clone()),
        ..SimConfig::new(dir.path().join("state"))
    };
    let server = Server::start(Sim::open(config).expect("sim"), "127.0.0.1:0", None)
        .await
        .expect("sbsim");
    let c = client_for(&server.url);
    let cluster = c
        .create_cluster(&ClusterCreate::new("csi", 10, 4))
        .await
        .expect("cluster");
    for i in 1..=workers {
        c.add_storage_node(
            cluster.id,
            &StorageNodeAdd::new(
                format!("w{i}.simplyblock-storage-node-api.simplyblock.svc.cluster.local:5000"),
                "eth0",
            ),
        )
        .await
        .expect("node add");
    }
    eventually("nodes online", || async {
        let n = c.list_storage_nodes(cluster.id).await.ok()?;
        (n.len() == workers && n.iter().all(|x| x.status == NodeStatus::Online)).then_some(())
    })
    .await;
    c.activate_cluster(cluster.id).await.expect("activate");
    eventually("cluster active", || async {
        (c.get_cluster(cluster.id).await.ok()?.status == ClusterStatus::Active).then_some(())
    })
    .await;
    let pool = c
        .create_pool(
            cluster.id,
            &PoolCreate {
                name: "pool1".into(),
                ..Default::default()
            },
        )
        .await
        .expect("pool");
    Sbsim {
        cluster: cluster.id,
        cluster_secret: cluster.secret.expose().to_owned(),
        pool: pool.id,
        pool_name: pool.name,
        client: c,
        server,
        files,
        dir,
    }
}

impl Sbsim {
    pub fn entry(&self) -> ClusterEntry {
        ClusterEntry {
            cluster_id: self.cluster,
            cluster_endpoint: self.server.url.clone(),
            cluster_secret: self.cluster_secret.clone(),
            local: true,
        }
    }

    pub fn params(&self) -> std::collections::HashMap<String, String> {
        [
            ("cluster_id".to_string(), self.cluster.to_string()),
            ("pool_name".to_string(), self.pool_name.clone()),
        ]
        .into_iter()
        .collect()
    }
}

/// The driver serving on a socket in `dir`, and `/metrics` on a local port.
pub struct DriverProc {
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    /// `http://127.0.0.1:PORT/metrics`, served as the binary serves it.
    pub metrics_url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl DriverProc {
    pub async fn start(
        dir: &Path,
        entries: &[ClusterEntry],
        files: &Path,
        segments: std::collections::BTreeMap<String, String>,
    ) -> DriverProc {
        let clusters = Clusters::new(entries, None).expect("clusters");
        Self::start_serving(dir, clusters, files, segments).await
    }

    /// The driver serving these clusters (one that follows a secret file, say).
    pub async fn start_serving(
        dir: &Path,
        clusters: Clusters,
        files: &Path,
        segments: std::collections::BTreeMap<String, String>,
    ) -> DriverProc {
        Self::start_with_kube(dir, clusters, files, segments, None).await
    }

    /// The driver serving these clusters, reading claims through `kube`.
    pub async fn start_with_kube(
        dir: &Path,
        clusters: Clusters,
        files: &Path,
        segments: std::collections::BTreeMap<String, String>,
        kube: Option<kube::Client>,
    ) -> DriverProc {
        let socket = dir.join("csi.sock");
        // A socket left by a stopped driver would answer "connection refused".
        let _ = std::fs::remove_file(&socket);
        let state_dir = dir.join("node-state");
        let clusters = Arc::new(clusters);
        let driver = Driver::new(
            simplyblock_csi::handle::DRIVER_NAME.into(),
            Mode::Both,
            clusters,
            Some(NodeConfig {
                node_id: "node-1".into(),
                host_nqn: simplyblock_csi::handle::host_nqn("node-1-uid"),
                segments: if segments.is_empty() {
                    simplyblock_csi::topology::segments(&Default::default(), "node-1")
                } else {
                    segments
                },
                state_dir: state_dir.clone(),
                attacher: Arc::new(LoopAttacher::new(files)),
                recovery: Default::default(),
                kube: None,
            }),
            kube.map(simplyblock_csi::pvc::ApiServer),
        );
        let routes = driver.routes().expect("routes");
        let metrics = Arc::new(simplyblock_telemetry::metrics::Metrics::new());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("metrics port");
        let metrics_url = format!(
            "http://{}/metrics",
            listener.local_addr().expect("metrics address")
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (stop_metrics, metrics_stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(simplyblock_csi::metrics_http::serve(
            listener,
            metrics.clone(),
            driver.metrics_refresh(),
            async {
                let _ = metrics_stopped.await;
            },
        ));
        let s = socket.clone();
        let task = tokio::spawn(async move {
            simplyblock_csi::serve_measured(&s, routes, metrics, async {
                let _ = rx.await;
            })
            .await
            .expect("serve");
            let _ = stop_metrics.send(());
        });
        eventually("driver socket", || async {
            tokio::net::UnixStream::connect(&socket)
                .await
                .ok()
                .map(|_| ())
        })
        .await;
        DriverProc {
            socket,
            state_dir,
            metrics_url,
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// Stop serving, as a restarted node plugin does (mounts and devices stay).
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    }

    pub async fn channel(&self) -> Channel {
        let path = self.socket.clone();
        tonic::transport::Endpoint::try_from("http://localhost")
            .expect("endpoint")
            .connect_with_connector(tower::service_fn(move |_| {
                let p = path.clone();
                async move {
                    tokio::net::UnixStream::connect(p)
                        .await
                        .map(hyper_util::rt::TokioIo::new)
                }
            }))
            .await
            .expect("connect")
    }

    pub async fn clients(
        &self,
    ) -> (
        IdentityClient<Channel>,
        ControllerClient<Channel>,
        NodeClient<Channel>,
    ) {
        let ch = self.channel().await;
        (
            IdentityClient::new(ch.clone()),
            ControllerClient::new(ch.clone()),
            NodeClient::new(ch),
        )
    }
}

/// Unmounts what a test left under `dir` and detaches loop devices over files in
/// `files`, also when the test panicked, so a failure does not leak into the next run.
pub struct Cleanup {
    pub dir: PathBuf,
    pub files: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let mut points: Vec<PathBuf> = simplyblock_csi::fs::mounts()
            .unwrap_or_default()
            .into_iter()
            .map(|m| m.mount_point)
            .filter(|p| p.starts_with(&self.dir))
            .collect();
        points.sort();
        for p in points.iter().rev() {
            let _ = std::process::Command::new("umount").arg(p).status();
        }
        if let Ok(rd) = std::fs::read_dir("/sys/block") {
            for e in rd.flatten() {
                let backing =
                    std::fs::read_to_string(e.path().join("loop/backing_file")).unwrap_or_default();
                if Path::new(backing.trim().trim_end_matches(" (deleted)")).starts_with(&self.files)
                {
                    let dev = format!("/dev/{}", e.file_name().to_string_lossy());
                    let _ = std::process::Command::new("losetup")
                        .args(["-d", &dev])
                        .status();
                }
            }
        }
    }
}

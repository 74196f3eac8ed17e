//! Shared test harness: an in-process sbsim on a temporary state directory with a fleet,
//! and a client pointed at it.
#![allow(dead_code)]

use std::time::Duration;

use simplyblock_controlplane::{Client, ClientConfig, ClusterCreate, StorageNodeAdd, Url, Uuid};
use simplyblock_simulator::{Server, Sim, SimConfig};

pub const TOKEN: &str = "test-admin-token";
pub const LABEL: &str = "node-restriction.kubernetes.io/simplyblock-storage-node";

pub struct Env {
    pub server: Server,
    pub client: Client,
    pub dir: tempfile::TempDir,
}

/// A fleet of `n` workers `w1..wn`; the first `labeled` carry the enrollment label.
pub fn fleet_yaml(n: usize, labeled: usize) -> String {
    let mut s = String::from("workers:\n");
    for i in 1..=n {
        s.push_str(&format!(
            "  - hostname: w{i}\n    addresses: [10.10.0.{i}, 10.20.0.{i}]\n    devices: {{count: 2, size: 2T}}\n"
        ));
        if i <= labeled {
            s.push_str(&format!("    labels: {{{LABEL}: c1}}\n"));
        }
    }
    s
}

pub fn config(dir: &std::path::Path, fleet: &str) -> SimConfig {
    let fleet_path = dir.join("fleet.yaml");
    std::fs::write(&fleet_path, fleet).expect("write fleet");
    SimConfig {
        tokens: vec![TOKEN.into()],
        time_scale: 1000.0,
        fleet: Some(fleet_path),
        record_bodies: true,
        seed: 42,
        ..SimConfig::new(dir.join("state"))
    }
}

/// [`config`] with one labelled worker and the clock frozen: sim time moves only by
/// `POST /_sim/clock/advance`.
pub fn frozen_config(dir: &std::path::Path) -> SimConfig {
    SimConfig {
        time_scale: 0.0,
        ..config(dir, &fleet_yaml(1, 1))
    }
}

pub async fn start_with(dir: tempfile::TempDir, config: SimConfig) -> Env {
    simplyblock_simulator::install_crypto_provider();
    let sim = Sim::open(config).expect("open sim");
    let server = Server::start(sim, "127.0.0.1:0", None)
        .await
        .expect("start sim");
    let client = client_for(&server.url);
    Env {
        server,
        client,
        dir,
    }
}

pub async fn start(workers: usize, labeled: usize) -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), &fleet_yaml(workers, labeled));
    start_with(dir, cfg).await
}

pub fn client_for(url: &str) -> Client {
    let mut cfg = ClientConfig::new(Url::parse(url).expect("url"), TOKEN);
    cfg.timeout = Duration::from_secs(10);
    cfg.retry_backoff = Duration::from_millis(20);
    Client::new(cfg).expect("client")
}

pub fn snode_address(worker: &str) -> String {
    format!("{worker}.simplyblock-storage-node-api.simplyblock.svc.cluster.local:5000")
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

/// Create a cluster, add `n` nodes on `w1..wn`, activate it; returns the cluster id.
pub async fn active_cluster(c: &Client, name: &str, n: usize) -> Uuid {
    let cluster = c
        .create_cluster(&ClusterCreate::new(name, 10, 4))
        .await
        .expect("create cluster");
    for i in 1..=n {
        c.add_storage_node(
            cluster.id,
            &StorageNodeAdd::new(snode_address(&format!("w{i}")), "eth0"),
        )
        .await
        .expect("node add");
    }
    eventually("nodes online", || async {
        let nodes = c.list_storage_nodes(cluster.id).await.ok()?;
        (nodes.len() == n
            && nodes
                .iter()
                .all(|x| x.status == simplyblock_controlplane::NodeStatus::Online))
        .then_some(())
    })
    .await;
    c.activate_cluster(cluster.id).await.expect("activate");
    eventually("cluster active", || async {
        (c.get_cluster(cluster.id).await.ok()?.status
            == simplyblock_controlplane::ClusterStatus::Active)
            .then_some(())
    })
    .await;
    cluster.id
}

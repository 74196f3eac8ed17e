//! Shared test harness: an in-process sbsim on a temporary state directory with a fleet,
//! and a client pointed at it.
#![allow(dead_code)]

use std::time::Duration;

use simplyblock_controlplane::{
    BackupConfig, Client, ClientConfig, ClusterCreate, StorageNodeAdd, Url, Uuid,
};
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

/// The endpoint of the object store the backup tests set up.
pub const STORE: &str = "http://minio.test:9000";

/// An admin call (`/_sim/...`): the status and the JSON answer (null when none).
pub async fn sim_admin(
    env: &Env,
    method: reqwest::Method,
    path: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let r = reqwest::Client::new()
        .request(method, format!("{}{path}", env.server.url))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .expect("admin call");
    let status = r.status().as_u16();
    let v = r.json().await.unwrap_or(serde_json::Value::Null);
    (status, v)
}

/// A bucket in the store at [`STORE`], in `region`, open to `key`/`secret`.
pub async fn add_bucket(env: &Env, bucket: &str, region: &str, key: &str, secret: &str) {
    let (status, v) = sim_admin(
        env,
        reqwest::Method::POST,
        "/_sim/object-stores",
        serde_json::json!({"endpoint": STORE, "bucket": bucket, "region": region,
            "access_key_id": key, "secret_access_key": secret}),
    )
    .await;
    assert_eq!(status, 201, "{v}");
}

/// A cluster's `backup_config` for the store at [`STORE`].
pub fn backup_config(bucket: &str, key: &str, secret: &str, region: &str) -> BackupConfig {
    BackupConfig {
        access_key_id: Some(key.into()),
        secret_access_key: Some(secret.into()),
        local_endpoint: Some(STORE.into()),
        bucket_name: Some(bucket.into()),
        prefix: Some("clusters/sb".into()),
        region: Some(region.into()),
    }
}

/// Let `seconds` of sim time pass (`POST /_sim/clock/advance`).
pub async fn advance(env: &Env, seconds: f64) {
    let (status, v) = sim_admin(
        env,
        reqwest::Method::POST,
        "/_sim/clock/advance",
        serde_json::json!({ "seconds": seconds }),
    )
    .await;
    assert_eq!(status, 200, "{v}");
}

/// A pool `pool` and in it a volume `name` of `size` bytes (one data, one parity chunk);
/// returns the pool's id and the volume's.
pub async fn volume_in_pool(
    c: &Client,
    cluster: Uuid,
    pool: &str,
    name: &str,
    size: u64,
) -> (Uuid, Uuid) {
    let p = match c
        .list_pools(cluster)
        .await
        .expect("pools")
        .into_iter()
        .find(|p| p.name == pool)
    {
        Some(p) => p,
        None => c
            .create_pool(
                cluster,
                &simplyblock_controlplane::PoolCreate {
                    name: pool.into(),
                    ..Default::default()
                },
            )
            .await
            .expect("pool"),
    };
    let mut body = simplyblock_controlplane::VolumeCreate::new(name, size);
    body.ndcs = 1;
    body.npcs = 1;
    let v = c.create_volume(cluster, p.id, &body).await.expect("volume");
    (p.id, v)
}

/// Create a cluster, add `n` nodes on `w1..wn`, activate it; returns the cluster id.
pub async fn active_cluster(c: &Client, name: &str, n: usize) -> Uuid {
    active_cluster_from(c, ClusterCreate::new(name, 10, 4), n).await
}

/// [`active_cluster`] created with `create`.
pub async fn active_cluster_from(c: &Client, create: ClusterCreate, n: usize) -> Uuid {
    let cluster = c.create_cluster(&create).await.expect("create cluster");
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

//! Throughput and latency of sbsim on this machine: a cluster read and a volume create
//! (which commits to the state database before answering), each from 8 concurrent
//! clients over loopback. Prints figures; asserts nothing about time.
//!
//! `cargo bench -p simplyblock-simulator --bench sbsim_throughput`

use std::time::{Duration, Instant};

use simplyblock_controlplane::*;
use simplyblock_simulator::{Server, Sim, SimConfig};

const CONCURRENCY: usize = 8;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn measure<F, Fut>(name: &str, total: usize, f: F)
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let start = Instant::now();
    let mut handles = Vec::new();
    for w in 0..CONCURRENCY {
        let f = f.clone();
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut i = w;
            while i < total {
                let t = Instant::now();
                f(i).await;
                lat.push(t.elapsed());
                i += CONCURRENCY;
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for h in handles {
        lat.extend(h.await.expect("worker"));
    }
    let wall = start.elapsed();
    lat.sort();
    println!(
        "{name:<16} {total:>6} requests  {:>8.0} req/s  p50 {:>7.2} ms  p99 {:>7.2} ms  (concurrency {CONCURRENCY})",
        total as f64 / wall.as_secs_f64(),
        percentile(&lat, 0.50).as_secs_f64() * 1000.0,
        percentile(&lat, 0.99).as_secs_f64() * 1000.0,
    );
}

#[tokio::main]
async fn main() {
    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    let fleet = dir.path().join("fleet.yaml");
    let mut yaml = String::from("workers:\n");
    for i in 1..=3 {
        yaml.push_str(&format!(
            "  - hostname: w{i}\n    addresses: [10.0.0.{i}, 10.1.0.{i}]\n    labels: {{node-restriction.kubernetes.io/simplyblock-storage-node: bench}}\n"
        ));
    }
    std::fs::write(&fleet, yaml).expect("fleet");
    let config = SimConfig {
        tokens: vec!["bench".into()],
        time_scale: 1000.0,
        fleet: Some(fleet),
        ..SimConfig::new(dir.path().join("state"))
    };
    let sim = Sim::open(config).expect("sim");
    let server = Server::start(sim, "127.0.0.1:0", None)
        .await
        .expect("server");
    let client = Client::new(ClientConfig::new(
        Url::parse(&server.url).expect("url"),
        "bench",
    ))
    .expect("client");
    let cluster = client
        .create_cluster(&ClusterCreate::new("bench", 10, 4))
        .await
        .expect("cluster");
    for w in ["w1", "w2", "w3"] {
        client
            .add_storage_node(
                cluster.id,
                &StorageNodeAdd::new(
                    format!("{w}.simplyblock-storage-node-api.bench.svc.cluster.local:5000"),
                    "eth0",
                ),
            )
            .await
            .expect("add");
    }
    while client
        .list_storage_nodes(cluster.id)
        .await
        .map(|n| n.len() < 3 || n.iter().any(|n| n.status != NodeStatus::Online))
        .unwrap_or(true)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client.activate_cluster(cluster.id).await.expect("activate");
    while client.get_cluster(cluster.id).await.ok().map(|c| c.status) != Some(ClusterStatus::Active)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pool = client
        .create_pool(
            cluster.id,
            &PoolCreate {
                name: "p".into(),
                ..Default::default()
            },
        )
        .await
        .expect("pool");

    let (c, id) = (client.clone(), cluster.id);
    measure("cluster read", 5000, move |_| {
        let c = c.clone();
        async move {
            c.get_cluster(id).await.expect("read");
        }
    })
    .await;
    let (c, pid) = (client.clone(), pool.id);
    measure("volume create", 1000, move |i| {
        let c = c.clone();
        async move {
            c.create_volume(
                id,
                pid,
                &VolumeCreate::new(format!("bench-{i}"), 1_000_000_000),
            )
            .await
            .expect("create");
        }
    })
    .await;
    let (c2, pid2) = (client.clone(), pool.id);
    measure("volume list(1k)", 500, move |_| {
        let c = c2.clone();
        async move {
            c.list_volumes(id, pid2).await.expect("list");
        }
    })
    .await;
    server.shutdown().await;
}

//! Backup and restore of a 1 GiB volume on sbsim, with volume files and the simulated
//! object store: a sparse volume with 64 MiB written in 16 places, snapshotted, backed up
//! into the store and restored into a new volume. Prints the wall time of each (from the
//! request to `completed` / `online`, polled every 5 ms, at 1000 sim seconds a second so
//! the simulated transfer times are negligible) and the control-plane calls a backup
//! took, from sbsim's call log. Asserts nothing about time.
//!
//! `cargo bench -p simplyblock-simulator --bench sbsim_backup`

use std::io::{Seek, SeekFrom, Write};
use std::time::{Duration, Instant};

use simplyblock_controlplane::*;
use simplyblock_simulator::{Server, Sim, SimConfig};

const GIB: u64 = 1 << 30;
const ROUNDS: usize = 3;

#[tokio::main]
async fn main() {
    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    let fleet = dir.path().join("fleet.yaml");
    let mut yaml = String::from("workers:\n");
    for i in 1..=2 {
        yaml.push_str(&format!(
            "  - hostname: w{i}\n    addresses: [10.0.0.{i}, 10.1.0.{i}]\n    labels: {{node-restriction.kubernetes.io/simplyblock-storage-node: bench}}\n"
        ));
    }
    std::fs::write(&fleet, yaml).expect("fleet");
    let files = dir.path().join("volumes");
    let config = SimConfig {
        tokens: vec!["bench".into()],
        time_scale: 1000.0,
        fleet: Some(fleet),
        volume_files: Some(files.clone()),
        ..SimConfig::new(dir.path().join("state"))
    };
    let sim = Sim::open(config).expect("sim");
    let server = Server::start(sim.clone(), "127.0.0.1:0", None)
        .await
        .expect("server");
    let admin = reqwest::Client::new();
    let r = admin
        .post(format!("{}/_sim/object-stores", server.url))
        .bearer_auth("bench")
        .json(
            &serde_json::json!({"endpoint": "http://minio.bench:9000", "bucket": "bench",
            "access_key_id": "AKBENCH", "secret_access_key": "bench-secret"}),
        )
        .send()
        .await
        .expect("store");
    assert!(r.status().is_success(), "{}", r.status());
    let c = Client::new(ClientConfig::new(
        Url::parse(&server.url).expect("url"),
        "bench",
    ))
    .expect("client");
    let mut create = ClusterCreate::new("bench", 10, 4);
    create.backup_config = Some(BackupConfig {
        access_key_id: Some("AKBENCH".into()),
        secret_access_key: Some("bench-secret".into()),
        local_endpoint: Some("http://minio.bench:9000".into()),
        bucket_name: Some("bench".into()),
        ..Default::default()
    });
    let cluster = c.create_cluster(&create).await.expect("cluster").id;
    for w in ["w1", "w2"] {
        c.add_storage_node(
            cluster,
            &StorageNodeAdd::new(
                format!("{w}.simplyblock-storage-node-api.bench.svc.cluster.local:5000"),
                "eth0",
            ),
        )
        .await
        .expect("add");
    }
    while c
        .list_storage_nodes(cluster)
        .await
        .map(|n| n.len() < 2 || n.iter().any(|n| n.status != NodeStatus::Online))
        .unwrap_or(true)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.activate_cluster(cluster).await.expect("activate");
    while c.get_cluster(cluster).await.ok().map(|x| x.status) != Some(ClusterStatus::Active) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pool = c
        .create_pool(
            cluster,
            &PoolCreate {
                name: "p".into(),
                ..Default::default()
            },
        )
        .await
        .expect("pool")
        .id;
    let mut body = VolumeCreate::new("bench-v", GIB);
    body.ndcs = 1;
    body.npcs = 1;
    let v = c.create_volume(cluster, pool, &body).await.expect("volume");

    let chunk = vec![0xA5u8; 4 << 20];
    for round in 0..ROUNDS {
        // New data in 16 places of the volume, then its snapshot.
        {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(files.join(format!("{v}.img")))
                .expect("volume file");
            for i in 0..16u64 {
                f.seek(SeekFrom::Start(i * (GIB / 16) + round as u64 * 4096))
                    .expect("seek");
                f.write_all(&chunk).expect("write");
            }
            f.sync_all().expect("sync");
        }
        let snap = c
            .create_snapshot(cluster, pool, v, &format!("s{round}"))
            .await
            .expect("snapshot");

        let before = sim
            .calls
            .lock()
            .expect("calls")
            .since(0)
            .last()
            .map_or(0, |x| x.seq);
        let t = Instant::now();
        let b = c.create_backup(cluster, snap).await.expect("backup");
        loop {
            match c.get_backup(cluster, b).await.expect("get").status {
                BackupStatus::Completed => break,
                BackupStatus::Failed => panic!("backup {b} failed"),
                _ => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
        let backup_wall = t.elapsed();
        let calls = sim.calls.lock().expect("calls").since(before);
        let posts = calls.iter().filter(|x| x.method == "POST").count();
        let gets = calls.iter().filter(|x| x.method == "GET").count();

        let t = Instant::now();
        let r = c
            .restore_backup(
                cluster,
                &BackupRestore {
                    backup_id: b.to_string(),
                    lvol_name: format!("bench-r{round}"),
                    pool: "p".into(),
                    target_node_id: None,
                },
            )
            .await
            .expect("restore");
        loop {
            match c.get_volume(cluster, pool, r).await.expect("get").status {
                VolumeStatus::Online => break,
                VolumeStatus::RestoreFailed => panic!("restore of {b} failed"),
                _ => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
        let restore_wall = t.elapsed();
        println!(
            "round {round}: 1 GiB volume, 64 MiB of data: backup {:>7.1} ms ({} calls: {posts} POST, {gets} GET polls), restore {:>7.1} ms",
            backup_wall.as_secs_f64() * 1000.0,
            calls.len(),
            restore_wall.as_secs_f64() * 1000.0,
        );
    }
}

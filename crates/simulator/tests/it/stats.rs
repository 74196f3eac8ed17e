//! The statistics sbsim simulates: a volume's used bytes are what a workload wrote, a
//! device holds its node's share, and every `iostats` route reports rates derived from
//! them, on the list DTOs and routes sbcli serves them on.

use serde_json::json;

use crate::common::{active_cluster, sim_admin, start, volume_in_pool};

#[tokio::test]
async fn written_bytes_drive_used_capacity_and_io_on_every_scope() {
    let env = start(3, 3).await;
    let c = &env.client;
    let cluster = active_cluster(c, "stats", 3).await;
    let size = 400_000_000_000u64;
    let (pool, volume) = volume_in_pool(c, cluster, "p", "v", size).await;
    let before = c.get_volume(cluster, pool, volume).await.expect("volume");
    assert_eq!(
        before.capacity.size_used as u64,
        size / 100,
        "the default share"
    );

    let bytes = 36_000_000_000u64;
    let (status, _) = sim_admin(
        &env,
        reqwest::Method::PUT,
        &format!("/_sim/volumes/{volume}/written"),
        json!({"bytes": bytes}),
    )
    .await;
    assert_eq!(status, 204);
    let (status, answer) = sim_admin(
        &env,
        reqwest::Method::PUT,
        &format!("/_sim/volumes/{volume}/written"),
        json!({"bytes": "many"}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");

    let v = c.get_volume(cluster, pool, volume).await.expect("volume");
    assert_eq!(v.capacity.size_used as u64, bytes);
    // Lists carry no volume statistics.
    let listed = c.list_volumes(cluster, pool).await.expect("volumes");
    assert_eq!(listed[0].capacity.size_used, 0);

    // The node's online drives hold the volume's bytes in proportion to their size.
    let node = v.storage_node_id;
    let devices = c.list_devices(cluster, node).await.expect("devices");
    let held: i64 = devices.iter().map(|d| d.capacity.size_used).sum();
    assert!(
        (bytes as i64 - held).abs() <= devices.len() as i64,
        "{held} of {bytes}"
    );
    let n = c.get_storage_node(cluster, node).await.expect("node");
    assert_eq!(n.capacity.size_used as u64, bytes);
    let pools = c.list_pools(cluster).await.expect("pools");
    assert_eq!(
        pools[0].capacity.as_ref().map(|p| p.size_used as u64),
        Some(bytes)
    );

    // The same rates on each scope holding only this volume: its bytes once an hour.
    let want = bytes / 3600;
    for sample in [
        c.volume_iostats(cluster, pool, volume)
            .await
            .expect("volume"),
        c.pool_iostats(cluster, pool).await.expect("pool"),
        c.node_iostats(cluster, node).await.expect("node"),
        c.cluster_iostats(cluster).await.expect("cluster"),
    ] {
        let s = simplyblock_controlplane::latest_iostat(sample).expect("a sample");
        assert_eq!(s.write_bytes_ps, want as f64);
        assert_eq!(s.read_bytes_ps, (want / 2) as f64);
        assert_eq!(s.write_io_ps, (want / 4096) as f64);
        assert_eq!((s.read_latency_ps, s.write_latency_ps), (100.0, 200.0));
    }
}

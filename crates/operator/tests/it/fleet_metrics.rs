//! The fleet's capacity, health and I/O at the operator's `/metrics`, scraped as the
//! chart's reader would, against what sbsim reports (the stand-in for the control plane;
//! its figures are simulated from what a workload wrote, see its `stats` module): a
//! deployment of the sample document by the operator binary, a volume with its
//! PersistentVolume, and the collector at a 1 s interval.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use simplyblock_api::storage_device::storage_device_name;
use simplyblock_api::{StorageCluster, StorageNode, StoragePool};
use simplyblock_controlplane::{Client, Method, Uuid, VolumeCreate};

use crate::crash::{Deployment, deployment_with_spares, until_deployed};
use crate::support::{call_log, free_port, occurrences, occurrences_reaching, scrape, until};

const NS: &str = "fleet-metrics";
const PV: &str = "pv-fleet";

/// The value of `family{labels}` in an OpenMetrics text, labels in their rendered order.
fn value(text: &str, family: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let head = format!(
        "{family}{{{}}} ",
        labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .collect::<Vec<_>>()
            .join(",")
    );
    text.lines()
        .find_map(|l| l.strip_prefix(&head))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

async fn get(cp: &Client, path: &str) -> Value {
    cp.raw(Method::GET, path, &[], None)
        .await
        .expect(path)
        .json()
        .expect("json")
}

async fn written(cp: &Client, volume: Uuid, bytes: u64) {
    cp.raw(
        Method::PUT,
        &format!("/../../_sim/volumes/{volume}/written"),
        &[],
        Some(&json!({"bytes": bytes})),
    )
    .await
    .expect("a workload's writes");
}

/// The collector's passes over `cluster` so far: each reads the cluster's iostats once
/// (nothing else does).
async fn passes(cp: &Client, cluster: Uuid) -> Vec<u64> {
    let path = format!("/api/v2/clusters/{cluster}/iostats");
    call_log(cp)
        .await
        .iter()
        .filter(|c| c["method"] == "GET" && c["path"] == path.as_str())
        .filter_map(|c| c["seq"].as_u64())
        .collect()
}

async fn passes_after(cp: &Client, cluster: Uuid, n: usize) -> Vec<u64> {
    until(&format!("{n} more collector passes"), async || {
        let seen = passes(cp, cluster).await;
        let before = seen.len();
        (before >= n).then_some(seen)
    })
    .await
}

struct Fleet {
    d: Deployment,
    cluster: Uuid,
    pool: (Uuid, String),
    /// Control-plane node id → StorageNode name.
    nodes: BTreeMap<Uuid, String>,
    port: u16,
}

impl Fleet {
    async fn scrape(&self) -> Option<String> {
        scrape(self.d.env(), NS, self.port).await
    }
}

fn uuid_of(s: Option<&str>) -> Option<Uuid> {
    s?.parse().ok()
}

async fn fleet() -> (Fleet, std::process::Child) {
    let d = deployment_with_spares(NS, "", 11, &[]).await;
    let port = free_port();
    let operator = d
        .operator_command()
        .arg(format!("--metrics-addr=127.0.0.1:{port}"))
        .arg("--fleet-interval=1s")
        .spawn()
        .expect("the operator starts");
    until_deployed(&d).await;
    let sc = Api::<StorageCluster>::namespaced(d.kube.clone(), NS)
        .get("simplyblock")
        .await
        .expect("the cluster");
    let cluster = uuid_of(sc.status.as_ref().and_then(|s| s.uuid.as_deref())).expect("its id");
    let pool = Api::<StoragePool>::namespaced(d.kube.clone(), NS)
        .list(&Default::default())
        .await
        .expect("pools")
        .items
        .into_iter()
        .find_map(|p| Some((uuid_of(p.status.as_ref()?.uuid.as_deref())?, p.name_any())))
        .expect("the default pool");
    let nodes = Api::<StorageNode>::namespaced(d.kube.clone(), NS)
        .list(&Default::default())
        .await
        .expect("nodes")
        .items
        .into_iter()
        .filter_map(|n| Some((uuid_of(n.status.as_ref()?.uuid.as_deref())?, n.name_any())))
        .collect();
    (
        Fleet {
            d,
            cluster,
            pool,
            nodes,
            port,
        },
        operator,
    )
}

#[tokio::test]
async fn the_fleet_is_exported_as_the_control_plane_reports_it_and_its_series_go_with_it() {
    let (f, mut operator) = fleet().await;
    let cp = &f.d.cp;
    let (c, (pool_id, pool)) = (f.cluster, f.pool.clone());
    let size = 1_800_000_000_000u64;
    let volume = cp
        .create_volume(c, pool_id, &VolumeCreate::new("fleet-data", size))
        .await
        .expect("a volume");
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": PV},
        "spec": {
            "capacity": {"storage": "1800G"},
            "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": "csi.simplyblock.io", "volumeHandle": format!("{c}:{pool_id}:{volume}")},
            "claimRef": {"namespace": "apps", "name": "data"},
        },
    }))
    .expect("pv");
    Api::<PersistentVolume>::all(f.d.kube.clone())
        .create(&PostParams::default(), &pv)
        .await
        .expect("its PersistentVolume");
    let bytes = 36_000_000_000u64;
    written(cp, volume, bytes).await;

    let cl = [("namespace", NS), ("cluster", "simplyblock")];
    let pv_labels = [
        ("namespace", NS),
        ("cluster", "simplyblock"),
        ("pool", pool.as_str()),
        ("persistentvolume", PV),
        ("claim_namespace", "apps"),
        ("claim", "data"),
    ];
    // Once the volume was visited with what was written, every family is there.
    let text = until("the written bytes at /metrics", async || {
        let text = f.scrape().await?;
        (value(&text, "simplyblock_persistentvolume_used_bytes", &pv_labels) == Some(bytes as f64))
            .then_some(text)
    })
    .await;

    // Volume: its size, used bytes and I/O as sbsim reports them.
    let detail = get(
        cp,
        &format!("/clusters/{c}/storage-pools/{pool_id}/volumes/{volume}/"),
    )
    .await;
    assert_eq!(
        value(
            &text,
            "simplyblock_persistentvolume_capacity_bytes",
            &pv_labels
        ),
        detail["size"].as_f64()
    );
    let io = get(
        cp,
        &format!("/clusters/{c}/storage-pools/{pool_id}/volumes/{volume}/iostats"),
    )
    .await;
    assert_eq!(
        value(
            &text,
            "simplyblock_persistentvolume_write_bytes_per_second",
            &pv_labels
        ),
        io[0]["write_bytes_ps"].as_f64()
    );
    assert_eq!(
        value(
            &text,
            "simplyblock_persistentvolume_write_latency_seconds",
            &pv_labels
        ),
        io[0]["write_latency_ps"].as_f64().map(|us| us / 1e6)
    );
    assert!(io[0]["write_bytes_ps"].as_f64() > Some(0.0), "{io}");

    // Cluster: capacity, status, I/O.
    let cluster = get(cp, &format!("/clusters/{c}/")).await;
    for (family, field) in [
        ("simplyblock_storagecluster_capacity_bytes", "size_total"),
        ("simplyblock_storagecluster_used_bytes", "size_used"),
        ("simplyblock_storagecluster_provisioned_bytes", "size_prov"),
    ] {
        assert_eq!(
            value(&text, family, &cl),
            cluster["capacity"][field].as_f64(),
            "{family}"
        );
    }
    let status = cluster["status"].as_str().expect("status");
    assert_eq!(
        value(
            &text,
            "simplyblock_storagecluster_status_state",
            &[cl[0], cl[1], ("status", status)]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            "simplyblock_storagecluster_status_state",
            &[cl[0], cl[1], ("status", "read_only")]
        ),
        Some(0.0)
    );
    let cio = get(cp, &format!("/clusters/{c}/iostats")).await;
    assert_eq!(
        value(
            &text,
            "simplyblock_storagecluster_write_bytes_per_second",
            &cl
        ),
        cio[0]["write_bytes_ps"].as_f64()
    );
    assert!(value(&text, "simplyblock_storagecluster_rebalancing_state", &cl).is_some());
    assert!(
        text.lines()
            .any(|l| l.starts_with("simplyblock_storagecluster_tasks_count{")
                && l.contains("task=\"")),
        "{text}"
    );

    // Pool: its limit, used and provisioned bytes.
    let pools = get(cp, &format!("/clusters/{c}/storage-pools/")).await;
    let p = pools
        .as_array()
        .and_then(|a| a.iter().find(|p| p["id"] == pool_id.to_string()))
        .expect("the pool");
    let pl = [cl[0], cl[1], ("pool", pool.as_str())];
    assert_eq!(
        value(&text, "simplyblock_storagepool_capacity_bytes", &pl),
        p["max_size"].as_f64()
    );
    assert_eq!(
        value(&text, "simplyblock_storagepool_used_bytes", &pl),
        p["capacity"]["size_used"].as_f64()
    );
    assert_eq!(
        value(&text, "simplyblock_storagepool_provisioned_bytes", &pl),
        p["capacity"]["size_prov"].as_f64()
    );

    // Nodes: capacity, used bytes and status, under their StorageNode names.
    let nodes = get(cp, &format!("/clusters/{c}/storage-nodes/")).await;
    for n in nodes.as_array().expect("nodes") {
        let id: Uuid = n["id"].as_str().and_then(|s| s.parse().ok()).expect("id");
        let name = f.nodes.get(&id).expect("a StorageNode");
        let nl = [cl[0], cl[1], ("node", name.as_str())];
        assert_eq!(
            value(&text, "simplyblock_storagenode_capacity_bytes", &nl),
            n["capacity"]["size_total"].as_f64(),
            "{name}"
        );
        assert_eq!(
            value(&text, "simplyblock_storagenode_used_bytes", &nl),
            n["capacity"]["size_used"].as_f64(),
            "{name}"
        );
        let status = n["status"].as_str().expect("status");
        assert_eq!(
            value(
                &text,
                "simplyblock_storagenode_status_state",
                &[nl[0], nl[1], nl[2], ("status", status)]
            ),
            Some(1.0),
            "{name}"
        );
    }

    // The cost of a pass: the iostats calls between two passes' first are the cluster's,
    // each pool's, each node's and the one volume's (the budget is 8).
    let seen = passes_after(cp, c, passes(cp, c).await.len() + 2).await;
    let (from, to) = (seen[seen.len() - 2], seen[seen.len() - 1]);
    let iostats = call_log(cp)
        .await
        .iter()
        .filter(|x| {
            let seq = x["seq"].as_u64().unwrap_or(0);
            seq >= from
                && seq < to
                && x["path"].as_str().is_some_and(|p| {
                    p.starts_with(&format!("/api/v2/clusters/{c}/")) && p.ends_with("/iostats")
                })
        })
        .count();
    let node_count = nodes.as_array().map_or(0, Vec::len);
    let pool_count = pools.as_array().map_or(0, Vec::len);
    assert_eq!(iostats, 1 + pool_count + node_count + 1);

    // The volume deleted in the control plane (its PersistentVolume stays): its series go.
    cp.delete_volume(c, pool_id, volume).await.expect("delete");
    until("the deleted volume's series gone", async || {
        let text = f.scrape().await?;
        (!text.contains(&format!("persistentvolume=\"{PV}\""))
            && text.contains("simplyblock_storagecluster_capacity_bytes"))
        .then_some(())
    })
    .await;

    operator.kill().expect("kill");
    operator.wait().expect("reaped");
}

#[tokio::test]
async fn a_device_filling_past_the_warning_threshold_is_announced_once_per_crossing() {
    let (f, mut operator) = fleet().await;
    let cp = &f.d.cp;
    let (c, (pool_id, _)) = (f.cluster, f.pool.clone());
    // Larger than a node's drives: thin provisioned, it can fill them.
    let size = 8_000_000_000_000u64;
    let volume = cp
        .create_volume(c, pool_id, &VolumeCreate::new("fleet-full", size))
        .await
        .expect("a volume");
    let detail = get(
        cp,
        &format!("/clusters/{c}/storage-pools/{pool_id}/volumes/{volume}/"),
    )
    .await;
    let node: Uuid = detail["storage_node_id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("its node");
    let node_name = f.nodes.get(&node).expect("its StorageNode").clone();
    let devices = get(cp, &format!("/clusters/{c}/storage-nodes/{node}/devices/")).await;
    let online: Vec<String> = devices
        .as_array()
        .expect("devices")
        .iter()
        .filter(|d| d["status"] == "online")
        .filter_map(|d| d["id"].as_str())
        .map(|id| storage_device_name(&node_name, id))
        .collect();
    assert!(!online.is_empty(), "{devices}");
    let node_size: u64 = devices
        .as_array()
        .expect("devices")
        .iter()
        .filter(|d| d["status"] == "online")
        .filter_map(|d| d["size"].as_u64())
        .sum();

    // Filled to 90 % of the node's online drives: each of them crosses the default 80 %.
    written(cp, volume, node_size / 10 * 9).await;
    for device in &online {
        occurrences_reaching(&f.d.kube, NS, device, "DeviceNearlyFull", 1).await;
    }
    // Two more passes with the devices still full: no second event.
    let n = passes(cp, c).await.len();
    passes_after(cp, c, n + 2).await;
    for device in &online {
        assert_eq!(
            occurrences(&f.d.kube, NS, device, "DeviceNearlyFull").await,
            1,
            "{device}"
        );
    }
    // Freed below the threshold and filled again: announced again.
    written(cp, volume, node_size / 10).await;
    let n = passes(cp, c).await.len();
    passes_after(cp, c, n + 2).await;
    written(cp, volume, node_size / 10 * 9).await;
    for device in &online {
        occurrences_reaching(&f.d.kube, NS, device, "DeviceNearlyFull", 2).await;
    }

    operator.kill().expect("kill");
    operator.wait().expect("reaped");
}

//! What a pass exports, from what it observed: pure, so every figure is tested without a
//! control plane.

use std::collections::{BTreeMap, BTreeSet};

use simplyblock_controlplane::{ClusterStatus, IoStat, NodeStatus, Task, Uuid};

use crate::runtime::metrics::Labels;

/// One gauge sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub family: &'static str,
    pub labels: Labels,
    pub value: f64,
}

/// A PersistentVolume of the driver and its claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub persistent_volume: String,
    pub claim_namespace: String,
    pub claim: String,
}

/// What the last visit of a volume read (lists carry no statistics).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VolumeFigures {
    pub used_bytes: u64,
    pub io: Option<IoStat>,
    /// Seconds between the newest snapshot the remote site holds and the control plane's
    /// clock; `None` when the volume does not replicate or nothing arrived yet.
    pub replication_lag_seconds: Option<f64>,
}

/// A volume as its pool's list shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeSeen {
    pub id: Uuid,
    pub size: u64,
    pub claim: Option<Claim>,
}

/// A pool with its label (the StoragePool's name) and volumes.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSeen {
    pub label: String,
    pub max_size: u64,
    pub provisioned_bytes: u64,
    pub used_bytes: u64,
    pub io: Option<IoStat>,
    pub volumes: Vec<VolumeSeen>,
}

/// A storage node with its label (the StorageNode's name).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSeen {
    pub label: String,
    pub status: NodeStatus,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub io: Option<IoStat>,
    pub devices: Vec<DeviceSeen>,
}

/// A drive with the StorageDevice name it is mirrored under.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceSeen {
    pub name: String,
    pub size: u64,
    pub used_bytes: u64,
}

/// One StorageCluster's fleet as a pass read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub namespace: String,
    pub cluster: String,
    pub status: ClusterStatus,
    pub rebalancing: bool,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub provisioned_bytes: u64,
    pub io: Option<IoStat>,
    pub nodes: Vec<NodeSeen>,
    pub pools: Vec<PoolSeen>,
    pub tasks: Vec<Task>,
    /// Volume id → the figures of its last visit (this pass's or an earlier one's).
    pub figures: BTreeMap<Uuid, VolumeFigures>,
}

pub const CLUSTER_STATUS: &str = "simplyblock_storagecluster_status_state";
pub const NODE_STATUS: &str = "simplyblock_storagenode_status_state";
pub const DEVICE_USED: &str = "simplyblock_storagedevice_used_bytes";

/// The six I/O families of `kind`, in the order of [`io_values`].
fn io_families(kind: &str) -> [&'static str; 6] {
    match kind {
        "storagecluster" => [
            "simplyblock_storagecluster_read_bytes_per_second",
            "simplyblock_storagecluster_write_bytes_per_second",
            "simplyblock_storagecluster_read_operations_per_second",
            "simplyblock_storagecluster_write_operations_per_second",
            "simplyblock_storagecluster_read_latency_seconds",
            "simplyblock_storagecluster_write_latency_seconds",
        ],
        "storagepool" => [
            "simplyblock_storagepool_read_bytes_per_second",
            "simplyblock_storagepool_write_bytes_per_second",
            "simplyblock_storagepool_read_operations_per_second",
            "simplyblock_storagepool_write_operations_per_second",
            "simplyblock_storagepool_read_latency_seconds",
            "simplyblock_storagepool_write_latency_seconds",
        ],
        "storagenode" => [
            "simplyblock_storagenode_read_bytes_per_second",
            "simplyblock_storagenode_write_bytes_per_second",
            "simplyblock_storagenode_read_operations_per_second",
            "simplyblock_storagenode_write_operations_per_second",
            "simplyblock_storagenode_read_latency_seconds",
            "simplyblock_storagenode_write_latency_seconds",
        ],
        _ => [
            "simplyblock_persistentvolume_read_bytes_per_second",
            "simplyblock_persistentvolume_write_bytes_per_second",
            "simplyblock_persistentvolume_read_operations_per_second",
            "simplyblock_persistentvolume_write_operations_per_second",
            "simplyblock_persistentvolume_read_latency_seconds",
            "simplyblock_persistentvolume_write_latency_seconds",
        ],
    }
}

/// A sample's figures in the families' units: the control plane reports latency in
/// microseconds.
fn io_values(s: &IoStat) -> [f64; 6] {
    [
        s.read_bytes_ps,
        s.write_bytes_ps,
        s.read_io_ps,
        s.write_io_ps,
        s.read_latency_ps / 1e6,
        s.write_latency_ps / 1e6,
    ]
}

fn io(out: &mut Vec<Sample>, kind: &str, labels: &Labels, sample: Option<&IoStat>) {
    let Some(sample) = sample else { return };
    for (family, value) in io_families(kind).into_iter().zip(io_values(sample)) {
        out.push(Sample {
            family,
            labels: labels.clone(),
            value,
        });
    }
}

fn gauge(out: &mut Vec<Sample>, family: &'static str, labels: &Labels, value: f64) {
    out.push(Sample {
        family,
        labels: labels.clone(),
        value,
    });
}

fn with(labels: &Labels, key: &'static str, value: &str) -> Labels {
    let mut l = labels.clone();
    l.push((key, value.to_owned()));
    l
}

/// Every sample of one cluster's pass.
pub fn samples(o: &Observation) -> Vec<Sample> {
    let mut out = Vec::new();
    let cluster: Labels = vec![
        ("namespace", o.namespace.clone()),
        ("cluster", o.cluster.clone()),
    ];
    for status in ClusterStatus::ALL {
        let current = if *status == o.status { 1.0 } else { 0.0 };
        gauge(
            &mut out,
            CLUSTER_STATUS,
            &with(&cluster, "status", status.as_str()),
            current,
        );
    }
    gauge(
        &mut out,
        "simplyblock_storagecluster_capacity_bytes",
        &cluster,
        o.capacity_bytes as f64,
    );
    gauge(
        &mut out,
        "simplyblock_storagecluster_used_bytes",
        &cluster,
        o.used_bytes as f64,
    );
    gauge(
        &mut out,
        "simplyblock_storagecluster_provisioned_bytes",
        &cluster,
        o.provisioned_bytes as f64,
    );
    gauge(
        &mut out,
        "simplyblock_storagecluster_rebalancing_state",
        &cluster,
        if o.rebalancing { 1.0 } else { 0.0 },
    );
    io(&mut out, "storagecluster", &cluster, o.io.as_ref());
    let mut tasks: BTreeMap<(&str, &str), u32> = BTreeMap::new();
    for t in &o.tasks {
        let status = if t.canceled {
            "canceled"
        } else {
            t.status.as_str()
        };
        *tasks.entry((t.function_name.as_str(), status)).or_default() += 1;
    }
    for ((task, status), n) in tasks {
        let labels = with(&with(&cluster, "task", task), "status", status);
        gauge(
            &mut out,
            "simplyblock_storagecluster_tasks_count",
            &labels,
            f64::from(n),
        );
    }

    for n in &o.nodes {
        let node = with(&cluster, "node", &n.label);
        gauge(
            &mut out,
            "simplyblock_storagenode_capacity_bytes",
            &node,
            n.capacity_bytes as f64,
        );
        gauge(
            &mut out,
            "simplyblock_storagenode_used_bytes",
            &node,
            n.used_bytes as f64,
        );
        for status in NodeStatus::ALL {
            let current = if *status == n.status { 1.0 } else { 0.0 };
            gauge(
                &mut out,
                NODE_STATUS,
                &with(&node, "status", status.as_str()),
                current,
            );
        }
        io(&mut out, "storagenode", &node, n.io.as_ref());
        for d in &n.devices {
            // The device mirror's labels: namespace, node, device.
            let device = vec![
                ("namespace", o.namespace.clone()),
                ("node", n.label.clone()),
                ("device", d.name.clone()),
            ];
            gauge(&mut out, DEVICE_USED, &device, d.used_bytes as f64);
        }
    }

    for p in &o.pools {
        let pool = with(&cluster, "pool", &p.label);
        gauge(
            &mut out,
            "simplyblock_storagepool_capacity_bytes",
            &pool,
            p.max_size as f64,
        );
        gauge(
            &mut out,
            "simplyblock_storagepool_used_bytes",
            &pool,
            p.used_bytes as f64,
        );
        gauge(
            &mut out,
            "simplyblock_storagepool_provisioned_bytes",
            &pool,
            p.provisioned_bytes as f64,
        );
        io(&mut out, "storagepool", &pool, p.io.as_ref());
        for v in &p.volumes {
            let Some(claim) = &v.claim else { continue };
            let volume = vec![
                ("namespace", o.namespace.clone()),
                ("cluster", o.cluster.clone()),
                ("pool", p.label.clone()),
                ("persistentvolume", claim.persistent_volume.clone()),
                ("claim_namespace", claim.claim_namespace.clone()),
                ("claim", claim.claim.clone()),
            ];
            gauge(
                &mut out,
                "simplyblock_persistentvolume_capacity_bytes",
                &volume,
                v.size as f64,
            );
            // Until its first visit a volume has no used figure: no sample rather than 0.
            let Some(f) = o.figures.get(&v.id) else {
                continue;
            };
            gauge(
                &mut out,
                "simplyblock_persistentvolume_used_bytes",
                &volume,
                f.used_bytes as f64,
            );
            io(&mut out, "persistentvolume", &volume, f.io.as_ref());
            if let Some(lag) = f.replication_lag_seconds {
                gauge(
                    &mut out,
                    "simplyblock_persistentvolume_replication_lag_seconds",
                    &volume,
                    lag,
                );
            }
        }
    }
    out
}

/// The volumes a pass visits: up to `budget` of `ids` (sorted) after `after`, wrapping
/// around, so every volume is visited once every `ceil(len / budget)` passes.
pub fn visits(ids: &[Uuid], after: Option<Uuid>, budget: usize) -> Vec<Uuid> {
    let mut sorted: Vec<Uuid> = ids.to_vec();
    sorted.sort();
    sorted.dedup();
    let start = after.map_or(0, |a| sorted.partition_point(|id| *id <= a));
    sorted
        .iter()
        .cycle()
        .skip(start)
        .take(budget.min(sorted.len()))
        .copied()
        .collect()
}

/// The devices at or above `threshold_percent` of their size now, and those of them that
/// crossed since the last pass (`full` held then): each crossing is announced once, and
/// again only after the device dropped below.
pub fn crossings(
    devices: &[&DeviceSeen],
    full: &BTreeSet<String>,
    threshold_percent: i64,
) -> (BTreeSet<String>, Vec<String>) {
    let over = |d: &DeviceSeen| {
        d.size > 0 && (d.used_bytes as u128) * 100 >= (d.size as u128) * threshold_percent as u128
    };
    let now: BTreeSet<String> = devices
        .iter()
        .filter(|d| over(d))
        .map(|d| d.name.clone())
        .collect();
    let crossed = now.difference(full).cloned().collect();
    (now, crossed)
}

#[cfg(test)]
mod tests;

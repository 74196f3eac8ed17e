//! StoragePool (`sp`): one pool of a StorageCluster, the unit volumes are carved from and
//! the unit StorageClasses name.
//!
//! The pool's name is its name in the control plane, so it is unique per cluster there and
//! per namespace here. The operator creates one default pool for every new cluster;
//! people create the others.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A pool of a StorageCluster: capacity limits, the defaults of the volumes carved from
/// it, and the StorageClasses that provision from it.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "StoragePool",
    namespaced,
    status = "StoragePoolStatus",
    shortname = "sp",
    category = "simplyblock",
    doc = "A pool of a StorageCluster: volumes are created in pools, and every pool has StorageClasses that provision from it.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterRef"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Capacity", type_ = "string", json_path = ".spec.limits.capacity"),
    printcolumn(name = "Classes", type_ = "string", json_path = ".status.storageClassNames"),
    printcolumn(name = "UUID", type_ = "string", json_path = ".status.uuid", priority = 1),
    printcolumn(name = "Message", type_ = "string", json_path = ".status.message", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("size(self.metadata.name) <= 63").message(
        "a StoragePool name is at most 63 characters, because it is written into label values; choose a shorter name"
    ),
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(oldSelf.volumeDefaults) || has(self.volumeDefaults)").message(
    "volumeDefaults cannot be removed once set: volumes were created with them"
))]
pub struct StoragePoolSpec {
    /// The StorageCluster, in this namespace, the pool belongs to. Immutable.
    #[schemars(length(max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "clusterRef is immutable: a pool belongs to one cluster for its life; create another pool for another cluster"
    ))]
    pub cluster_ref: String,

    /// The Kubernetes Nodes whose workloads may attach this pool's volumes; absent means
    /// every Node. Enforced by the control plane: the operator registers each Node's host
    /// NQN (derived from the Node's UID) with the pool, labels the Node
    /// `simplyblock.io/pool.<pool uuid>=allowed`, and the control plane refuses to connect
    /// the pool's volumes to any other host. A name that matches no Node is ignored (with
    /// an `AllowedNodeMissing` event) and kept, so the Node regains access when it
    /// returns. A pool created without allowedNodes and without enableDHCHAP cannot be
    /// restricted later; create a new pool instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub allowed_nodes: Vec<String>,

    /// How much the pool may hold and how large one volume may be. Mutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<PoolLimits>,

    /// What every volume of the pool is created with. Set once: volumes already carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "volumeDefaults is immutable once set: the pool's volumes were created with them"
    ))]
    pub volume_defaults: Option<VolumeDefaults>,
}

/// A pool's limits.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.iops) && !has(self.throughput)").message(
    "pool-wide iops and throughput limits are not supported yet; set per-volume limits in volumeDefaults"
))]
pub struct PoolLimits {
    /// The pool's capacity, e.g. `10T` (10^12 bytes) or `10Ti` (2^40 bytes); a bare number
    /// is bytes; absent or `0` means unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?([KMGTP]i?[B]?)?$"))]
    pub capacity: Option<String>,
    /// The largest volume the pool admits, e.g. `2T` (10^12 bytes each) or `2Ti` (2^40);
    /// absent means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?([KMGTP]i?[B]?)?$"))]
    pub max_volume_size: Option<String>,
    /// Pool-wide I/O operations per second; 0 means unlimited. Not supported yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub iops: Option<i32>,
    /// Pool-wide throughput in MB/s. Not supported yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<Throughput>,
}

/// Throughput limits in MB/s; 0 means unlimited.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Throughput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub read: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub write: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub read_write: Option<i32>,
}

/// The filesystem a volume is formatted with when it is mounted blank.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Filesystem {
    #[serde(rename = "ext4")]
    Ext4,
    #[default]
    #[serde(rename = "xfs")]
    Xfs,
}

impl Filesystem {
    pub fn as_str(self) -> &'static str {
        match self {
            Filesystem::Ext4 => "ext4",
            Filesystem::Xfs => "xfs",
        }
    }
}

/// The defaults of the pool's volumes, written into its StorageClasses' parameters.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct VolumeDefaults {
    /// Per-volume I/O operations per second; 0 means unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub iops: Option<i32>,
    /// Per-volume throughput limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<Throughput>,
    /// The filesystem a blank volume is formatted with.
    #[serde(default)]
    pub filesystem: Filesystem,
    /// Reserved: the control plane's volume API has no compression setting, so nothing
    /// could act on it and a pool that sets it is refused. Meant to compress volumes in
    /// the storage nodes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[x_kube(validation = Rule::new("!self").message(
        "enableCompression is not supported by the CSI driver of this release: the control plane's volume API has no compression setting, so no volume of this pool's StorageClass could be provisioned; remove enableCompression"
    ))]
    pub enable_compression: bool,
    /// Encrypt volumes at rest.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enable_encryption: bool,
    /// Replicate volumes to the cluster's replication target.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enable_replication: bool,
    /// Reserved: the CSI driver of this release has no VDO layer on the consuming node,
    /// so a pool that sets it is refused. Meant to compress volumes on the consuming node.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[x_kube(validation = Rule::new("!self").message(
        "enableClientCompression is not supported by the CSI driver of this release: it has no VDO layer on the consuming node, so the volumes would be written uncompressed; remove enableClientCompression"
    ))]
    pub enable_client_compression: bool,
    /// Reserved: the CSI driver of this release has no VDO layer on the consuming node,
    /// so a pool that sets it is refused. Meant to deduplicate volumes on the consuming
    /// node.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[x_kube(validation = Rule::new("!self").message(
        "enableClientDeduplication is not supported by the CSI driver of this release: it has no VDO layer on the consuming node, so the volumes would be written without deduplication; remove enableClientDeduplication"
    ))]
    pub enable_client_deduplication: bool,
    /// Authenticate hosts with DH-HMAC-CHAP; enforced only when allowedNodes is set.
    #[serde(
        default,
        skip_serializing_if = "std::ops::Not::not",
        rename = "enableDHCHAP"
    )]
    pub enable_dhchap: bool,
    /// The volumes' priority class in the storage nodes (0 is the default class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub priority_class: Option<i32>,
    /// At most this many namespaces share one NVMe subsystem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_namespaces_per_subsystem: Option<i32>,
    /// The NVMe-oF transport the volumes are attached over, `tcp` or `rdma`; absent or
    /// empty means `tcp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(|tcp|rdma|TCP|RDMA)$"))]
    pub fabric: Option<String>,
    /// The percentage of an ext4 filesystem's blocks reserved for root, set with
    /// `tune2fs -m` after formatting (`"0"` reserves none); absent or empty leaves
    /// mke2fs's default. Ignored for xfs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]|[1-4][0-9]|50)?$"))]
    pub tune2fs_reserved_blocks: Option<String>,
}

/// The operator's reading of a pool.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PoolPhase {
    /// Not yet in the control plane (its cluster may not be ready).
    #[default]
    Pending,
    /// In the control plane, with its StorageClasses.
    Ready,
    /// Being removed; held while volumes remain.
    Deleting,
}

/// What the operator knows of a pool.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StoragePoolStatus {
    /// Pending, Ready or Deleting.
    #[serde(default)]
    pub phase: PoolPhase,
    /// The control plane's id of the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The control plane's own status word (`active`, `inactive`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The StorageClasses that provision from the pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub storage_class_names: Vec<String>,
    /// The StorageClass the operator created for the pool; recorded once, so a class a
    /// person deleted is not created again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_storage_class_name: Option<String>,
    /// Bytes used, as the control plane last reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<i64>,
    /// The Nodes of spec.allowedNodes that exist: those whose hosts the control plane lets
    /// attach the pool's volumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub allowed_nodes: Vec<String>,
    /// The per-volume QoS ceilings the control plane applies to the pool, as it reports
    /// them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<PoolLimitsStatus>,
    /// The StoragePoolOps that holds the pool's lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_ops_ref: Option<String>,
    /// Why the phase is what it is, in one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready (the pool is in the control plane with its StorageClasses) and Progressing (being created or removed). `kubectl wait --for=condition=Ready` waits for the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A pool's QoS ceilings as the control plane reports them; 0 means unlimited.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PoolLimitsStatus {
    /// I/O operations per second.
    #[serde(default)]
    pub iops: i64,
    /// Throughput in MB/s.
    #[serde(default)]
    pub throughput: Throughput64,
}

/// Throughput in MB/s as the control plane reports it; 0 means unlimited.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Throughput64 {
    #[serde(default)]
    pub read: i64,
    #[serde(default)]
    pub write: i64,
    #[serde(default)]
    pub read_write: i64,
}

//! StorageNode at v1alpha1: one backend storage node of a StorageNodeSet, with the per-node
//! overrides the set copied onto it and what the backend reported of it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One backend storage node, per (worker, socket index) pair of a StorageNodeSet (v1alpha1).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha1",
    kind = "StorageNode",
    namespaced,
    status = "StorageNodeStatus",
    shortname = "sn",
    doc = "One backend storage node of a StorageNodeSet (v1alpha1, as the Go operator stored it; v1alpha2 is the current version).",
    printcolumn(name = "Worker", type_ = "string", json_path = ".spec.workerNode"),
    printcolumn(name = "Socket", type_ = "string", json_path = ".spec.socketId"),
    printcolumn(name = "NodeIdx", type_ = "integer", json_path = ".spec.nodeIndex"),
    printcolumn(
        name = "FD",
        type_ = "integer",
        json_path = ".status.failureDomain",
        priority = 1
    ),
    printcolumn(name = "UUID", type_ = "string", json_path = ".status.uuid"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.status"),
    printcolumn(name = "Health", type_ = "boolean", json_path = ".status.health"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(oldSelf.socketId) || has(self.socketId)").message("field socketId is immutable once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.nodeIndex) || has(self.nodeIndex)").message("field nodeIndex is immutable once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.socketIndex) || has(self.socketIndex)").message("field socketIndex is immutable once set"))]
pub struct StorageNodeSpec {
    /// The owning StorageNodeSet. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("field is immutable"))]
    pub storage_node_set_ref: String,
    /// The Kubernetes node the storage node runs on; changed only by a migration.
    pub worker_node: String,
    /// The NUMA socket, e.g. `"0"`. Immutable.
    #[serde(default, skip_serializing_if = "String::is_empty", rename = "socketId")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("field is immutable"))]
    pub socket_id: String,
    /// The node's index on its socket. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("field is immutable"))]
    pub node_index: Option<i32>,
    /// The global ordinal: socket position × nodes per socket + node index. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("field is immutable"))]
    pub socket_index: Option<i32>,
    /// The per-node configuration the set copied from its `nodeConfigs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<StorageNodeOverrides>,
}

/// Per-node configuration overriding the set's defaults.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageNodeOverrides {
    /// The SPDK image of this node.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub spdk_image: String,
    /// The SPDK proxy image of this node.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub spdk_proxy_image: String,
    /// The SPDK huge-page memory, e.g. `4G`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(regex(pattern = r"^[0-9]+(G|GI|GB|GiB|M|MI|MB|MiB|g|gi|gb|gib|m|mi|mb|mib)?$"))]
    pub spdk_system_memory: String,
    /// Journal manager tuning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_manager: Option<JournalManagerSpec>,
    /// PCI addresses the node may use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pcie_allow_list: Vec<String>,
    /// PCI addresses the node never uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pcie_deny_list: Vec<String>,
    /// Only devices of this PCI model.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pcie_model: String,
    /// Only devices of this size range.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub drive_size_range: String,
    /// The NVMe namespace names to use, e.g. `nvme0n1`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_names: Vec<String>,
    /// Reserved: per node no longer; set StorageCluster spec.storageNodes.enableCpuTopology.
    /// Topology-aware CPU handling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_cpu_topology: Option<bool>,
    /// CPUs reserved for system workloads.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        rename = "reservedSystemCPU"
    )]
    pub reserved_system_cpu: String,
    /// Reserved: per node no longer; set StorageCluster spec.storageNodes.ubuntuHost. The
    /// host runs Ubuntu.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ubuntu_host: Option<bool>,
    /// Reserved: per node no longer; set StorageCluster
    /// spec.storageNodes.enableKubeletConfiguration (false). Leave the kubelet
    /// configuration alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_kubelet_configuration: Option<bool>,
    /// The failure-domain group index of the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub failure_domain: Option<i32>,
    /// The node is added to a running cluster (an expansion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expand: Option<bool>,
}

/// Journal manager tuning.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct JournalManagerSpec {
    /// The number of journal managers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    /// The journal's share of each device, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent_per_device: Option<i32>,
}

/// The observed state of a storage node (v1alpha1).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageNodeStatus {
    /// The backend node UUID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uuid: String,
    /// The backend node status, e.g. `online`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// The backend health flag.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub health: bool,
    /// The hostname the backend reports.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    /// The uptime the backend reports.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uptime: String,
    /// Compute and storage resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<StorageNodeResources>,
    /// Addresses and ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<StorageNodePorts>,
    /// When the node-add request was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub posted_at: Option<Time>,
    /// The StorageNodeOps holding the node.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub active_ops_ref: String,
    /// The measured baseline latency of the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_metrics: Option<NodeLatencyMetrics>,
    /// The failure-domain group index the backend assigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<i32>,
}

/// Resources the backend reports.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageNodeResources {
    /// SPDK CPU cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<i32>,
    /// SPDK memory.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub memory: String,
    /// Logical volumes on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<i32>,
    /// The device summary, written `total/online`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub devices: String,
}

/// Addresses and ports the backend reports.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageNodePorts {
    /// The management IP address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub management: String,
    /// The NVMe-oF port.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "nvmeof")]
    pub nvme_of: Option<i32>,
    /// The logical-volume subsystem port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lvol: Option<i32>,
    /// The RPC port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpc: Option<i32>,
}

/// The measured 4K NVMe-oF latency of one backend node.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeLatencyMetrics {
    /// The backend node UUID.
    #[serde(rename = "nodeUUID")]
    pub node_uuid: String,
    /// The p50 write latency of the baseline, in nanoseconds.
    #[serde(default, skip_serializing_if = "is_zero", rename = "baselineP50NS")]
    pub baseline_p50_ns: i64,
    /// The p99 write latency of the baseline, in nanoseconds.
    #[serde(default, skip_serializing_if = "is_zero", rename = "baselineP99NS")]
    pub baseline_p99_ns: i64,
    /// When the baseline was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_measured_at: Option<Time>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

//! StorageNodeSet at v1alpha1: the Go operator's set of storage nodes on a list of workers,
//! with its workload (DaemonSet, Services, certificates) and its drain coordination. The
//! kind is retired: v1alpha2 has no StorageNodeSet, and the upgrade moves its nodes and
//! workload to their StorageCluster. It is here so an installation can be described as the
//! Go operator left it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::storage_node::{JournalManagerSpec, NodeLatencyMetrics, StorageNodeOverrides};

/// A set of storage nodes (v1alpha1, retired).
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha1",
    kind = "StorageNodeSet",
    namespaced,
    status = "StorageNodeSetStatus",
    doc = "A set of storage nodes (v1alpha1, as the Go operator stored it; retired by the upgrade).",
    printcolumn(name = "Total", type_ = "integer", json_path = ".status.totalNodes"),
    printcolumn(name = "Online", type_ = "integer", json_path = ".status.onlineNodes"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Offline",
        type_ = "integer",
        json_path = ".status.offlineNodes",
        priority = 1
    ),
    printcolumn(
        name = "Suspended",
        type_ = "integer",
        json_path = ".status.suspendedNodes",
        priority = 1
    ),
    printcolumn(
        name = "Creating",
        type_ = "integer",
        json_path = ".status.creatingNodes",
        priority = 1
    ),
    printcolumn(
        name = "Removed",
        type_ = "integer",
        json_path = ".status.removedNodes",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct StorageNodeSetSpec {
    /// The StorageCluster the set's nodes join.
    pub cluster_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_image: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub spdk_image: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub spdk_proxy_image: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mgmt_ifname: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_journal_device: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_manager: Option<JournalManagerSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pcie_allow_list: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pcie_deny_list: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pcie_model: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub drive_size_range: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sockets_to_use: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_per_socket: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data_ifname: Vec<String>,
    /// The workers the set runs a storage node on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worker_nodes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_shift_cluster: Option<bool>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub open_shift_machine_config_pool: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ubuntu_host: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_kubelet_configuration: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "forceFormat4K"
    )]
    pub force_format_4k: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_cpu_topology: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        rename = "reservedSystemCPU"
    )]
    pub reserved_system_cpu: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub spdk_system_memory: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel_node_adds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_container_resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_pull_policy: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_failure_domains: BTreeMap<String, i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expand: Option<bool>,
    /// Per-worker overrides, copied into each StorageNode's `spec.overrides`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_configs: BTreeMap<String, StorageNodeOverrides>,
}

/// The drain the set coordinates on one worker.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeDrainState {
    pub hostname: String,
    /// `detected`, `shutdown_called`, `draining`, `restart_called`, `complete` or `failed`.
    pub phase: String,
    /// Required in the Go type; optional here so a zero time reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        rename = "activeNodeUUID"
    )]
    pub active_node_uuid: String,
}

/// One node as the set reports it.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uuid: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub health: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<i32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub memory: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpc_port: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lvol_port: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvmf_port: Option<i32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub devices: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uptime: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mgmt_ip: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub posted_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<i32>,
}

/// What the set observed of its nodes.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageNodeSetStatus {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub total_nodes: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub online_nodes: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub offline_nodes: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub suspended_nodes: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub creating_nodes: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub removed_nodes: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeStatus>,
    /// The drains in progress, one per worker.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drain_coordination: Vec<NodeDrainState>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pending_node_adds: BTreeMap<String, Time>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scheduling_failed_workers: BTreeMap<String, bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency_metrics: Vec<NodeLatencyMetrics>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

//! StoragePool at v1alpha1: the pool, its QoS, and the parameters of its StorageClass as
//! strings, the way the CSI driver's StorageClass parameters are written.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A pool of a StorageCluster (v1alpha1).
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha1",
    kind = "StoragePool",
    namespaced,
    status = "StoragePoolStatus",
    doc = "A pool of a StorageCluster (v1alpha1, as the Go operator stored it; v1alpha2 is the current version).",
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.status",
        description = "Backend pool status"
    ),
    printcolumn(
        name = "UUID",
        type_ = "string",
        json_path = ".status.uuid",
        description = "Backend pool UUID"
    ),
    printcolumn(
        name = "Capacity",
        type_ = "string",
        json_path = ".spec.capacityLimit",
        description = "Configured capacity limit"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct StoragePoolSpec {
    /// The target storage cluster's name.
    pub cluster_name: String,
    /// Reserved: retired; v1alpha1 keeps it for the round trip and nothing acts on it. A desired-status hint.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// The most the pool may hold, e.g. `20G`; `0` is unlimited.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub capacity_limit: String,
    /// The largest volume of the pool, e.g. `20G`; `0` is unlimited.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub logical_volume_max_size: String,
    /// DH-HMAC-CHAP keys for the pool's volumes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[schemars(extend("default" = false))]
    pub dhchap: bool,
    /// The Kubernetes nodes allowed to attach the pool's volumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_nodes: Vec<String>,
    /// The pool's QoS limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<QosSpec>,
    /// Reserved: retired (StoragePoolOps carries pool operations); v1alpha1 keeps it for
    /// the round trip and nothing acts on it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub action: String,
    /// The parameters of the pool's StorageClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {}))]
    pub storage_class_parameters: Option<StorageClassParameters>,
}

/// Pool QoS limits.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct QosSpec {
    /// The IOPS limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i32>,
    /// Throughput limits in MiB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<QosThroughput>,
}

/// Throughput limits or values in MiB/s.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct QosThroughput {
    /// Read throughput.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<i32>,
    /// Combined read/write throughput.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_write: Option<i32>,
    /// Write throughput.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<i32>,
}

/// The StorageClass parameters of the pool's volumes, as text.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageClassParameters {
    /// Read/write IOPS limit (`0` unlimited).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("default" = "0"))]
    pub qos_rw_iops: String,
    /// Read/write throughput limit in MB/s.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("default" = "0"))]
    pub qos_rw_mbytes: String,
    /// Read throughput limit in MB/s.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        rename = "qosRMbytes"
    )]
    #[schemars(extend("default" = "0"))]
    pub qos_r_mbytes: String,
    /// Write throughput limit in MB/s.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        rename = "qosWMbytes"
    )]
    #[schemars(extend("default" = "0"))]
    pub qos_w_mbytes: String,
    /// Compression of the volumes (`True` or `False`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("default" = "False"))]
    pub compression: String,
    /// Encryption of the volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub encryption: Option<bool>,
    /// Replication of the volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub replicate: Option<bool>,
    /// The volumes' priority class.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("default" = "0"))]
    pub lvol_priority_class: String,
    /// Reserved: retired; v1alpha1 keeps it for the round trip and nothing acts on it. The transport fabric
    /// (e.g. `tcp`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("default" = "tcp"))]
    pub fabric: String,
    /// Namespaces per NVMe-oF subsystem.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("default" = "1"))]
    pub max_namespace_per_subsys: String,
    /// Reserved: retired; v1alpha1 keeps it for the round trip and nothing acts on it. The ext4
    /// reserved-blocks percentage (`tune2fs -m`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tune2fs_reserved_blocks: String,
    /// The filesystem of the volumes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["ext4", "xfs"], "default" = "xfs"))]
    pub filesystem: String,
}

/// The observed state of a pool (v1alpha1).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StoragePoolStatus {
    /// The backend pool UUID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uuid: String,
    /// The backend lifecycle status.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// Observed QoS values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<QosStatus>,
    /// The node names registered on the backend.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_nodes: Vec<String>,
}

/// Observed pool QoS values.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct QosStatus {
    /// The backend host enforcing the pool's QoS.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
    /// Observed IOPS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i32>,
    /// Observed throughput.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<QosThroughput>,
}

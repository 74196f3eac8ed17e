//! StorageClusterOps at v1alpha1: one cluster operation, its actions in lower case, and the
//! rolling restart's progress as the lists of pending and processed nodes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One operation on one StorageCluster (v1alpha1).
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha1",
    kind = "StorageClusterOps",
    plural = "storageclusterops",
    namespaced,
    status = "StorageClusterOpsStatus",
    shortname = "scops",
    doc = "One operation on a StorageCluster (v1alpha1, as the Go operator stored it; v1alpha2 is the current version).",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterRef"),
    printcolumn(name = "Action", type_ = "string", json_path = ".spec.action"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Message", type_ = "string", json_path = ".status.message"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct StorageClusterOpsSpec {
    /// The target StorageCluster's name.
    pub cluster_ref: String,
    /// The operation to perform.
    #[schemars(extend("enum" = ["activate", "expand", "shutdown", "start", "restart", "node-rolling-restart"]))]
    pub action: String,
    /// How node-rolling-restart restarts each node; ignored by the other actions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_rolling_restart: Option<NodeRollingRestartSpec>,
}

/// How node-rolling-restart restarts each node.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
pub struct NodeRollingRestartSpec {
    /// Restart each node's storage-node pod between shutdown and restart.
    #[serde(
        default,
        rename = "refreshSNodeAPI",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub refresh_snode_api: bool,
}

/// The progress of the operation (v1alpha1).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageClusterOpsStatus {
    /// The lifecycle phase.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["Pending", "Running", "Succeeded", "Failed"]))]
    pub phase: String,
    /// Whether the backend call has been sent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub triggered: bool,
    /// The current state or the failure, in words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When the operation began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// node-rolling-restart's progress over the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_rolling_restart_status: Option<NodeRollingRestartStatus>,
}

/// The nodes a node-rolling-restart walks and where it stands on the current one.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeRollingRestartStatus {
    /// The node UUIDs still to restart, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_nodes: Vec<String>,
    /// The node UUIDs already restarted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processed_nodes: Vec<String>,
    /// The step on the current node: `snode-refresh`, `snode-refresh-wait`,
    /// `shutting-down`, `restarting` or `rebalancing`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_phase: String,
    /// Whether the call of the current step has been sent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub phase_triggered: bool,
}

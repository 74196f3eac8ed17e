//! StorageNodeOps at v1alpha1: one operation on one StorageNode, with its action spelled in
//! lower case and its progress as a sub-phase.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One operation on one StorageNode (v1alpha1).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha1",
    kind = "StorageNodeOps",
    plural = "storagenodeops",
    namespaced,
    status = "StorageNodeOpsStatus",
    shortname = "snops",
    doc = "One operation on a StorageNode (v1alpha1, as the Go operator stored it; v1alpha2 is the current version).",
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.storageNodeRef"),
    printcolumn(name = "Action", type_ = "string", json_path = ".spec.action"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "SubPhase", type_ = "string", json_path = ".status.subPhase"),
    printcolumn(name = "Message", type_ = "string", json_path = ".status.message"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(oldSelf.targetWorkerNode) || has(self.targetWorkerNode)").message("field targetWorkerNode is immutable once set"))]
pub struct StorageNodeOpsSpec {
    /// The target StorageNode. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("field is immutable"))]
    pub storage_node_ref: String,
    /// The operation. Immutable.
    #[schemars(extend("enum" = ["shutdown", "restart", "suspend", "resume", "remove", "migrate"]))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("field is immutable"))]
    pub action: String,
    /// The worker a migration moves the node to. Immutable.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("field is immutable"))]
    pub target_worker_node: String,
    /// Forced execution where the backend supports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    /// Reattach the volumes when the node restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reattach_volume: Option<bool>,
    /// The NVMe PCIe addresses to bind on the target host of a migration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub new_ssd_pcie: Vec<String>,
    /// The drain of action `remove`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainOpsSpec>,
}

/// The drain of action `remove`.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DrainOpsSpec {
    /// Volumes whose name matches are the system's own: deleted, not moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_volume_filter_regex: Option<String>,
}

/// The progress of an operation (v1alpha1).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageNodeOpsStatus {
    /// The lifecycle phase.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["Pending", "Running", "Succeeded", "Failed"]))]
    pub phase: String,
    /// The step of a running remove or migrate.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = [
        "Validating", "Suspending", "Migrating", "Verifying", "Removing",
        "Preparing", "Restarting", "Promoting"
    ]))]
    pub sub_phase: String,
    /// Why the phase is what it is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Volumes moved so far (remove).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub volumes_migrated: i64,
    /// Volumes still to move (remove).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub volumes_pending: i64,
    /// The backend request was sent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub triggered: bool,
    /// When the operation began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

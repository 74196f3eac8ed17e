//! ControlPlane at v1alpha1: the image of the control plane the operator installs, and
//! whether it is ready.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The simplyblock control plane (v1alpha1).
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha1",
    kind = "ControlPlane",
    plural = "controlplanes",
    namespaced,
    status = "ControlPlaneStatus",
    doc = "The simplyblock control plane, one per namespace, named simplyblock (v1alpha1, as the Go operator stored it; v1alpha2 is the current version).",
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Initializing while FDB is not ready; Ready once the control plane is operational"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.message",
        description = "Human-readable status detail"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneSpec {
    /// The image of the control-plane and storage-node workloads, from a simplyblock
    /// registry.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(regex(pattern = crate::control_plane::OPTIONAL_IMAGE_PATTERN))]
    pub image: String,
}

/// The readiness of the control plane (v1alpha1).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneStatus {
    /// Initializing until the FoundationDB health check passes, then Ready.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["Initializing", "Ready"]))]
    pub phase: String,
    /// The current phase in words, e.g. FoundationDB's error.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When FoundationDB's health was last probed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checked: Option<Time>,
}

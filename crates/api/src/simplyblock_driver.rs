//! SimplyblockDriver (`sbd`): the simplyblock CSI driver installed in this Kubernetes
//! cluster: its controller StatefulSet, node DaemonSet, their service accounts (the roles are the chart's),
//! the `CSIDriver` object and, where snapshots are served, a `VolumeSnapshotClass`.
//!
//! One per Kubernetes cluster: a second one anywhere is held at Installing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::control_plane::{IMAGE_PATTERN, TlsProvider};

/// The simplyblock CSI driver.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "SimplyblockDriver",
    plural = "simplyblockdrivers",
    namespaced,
    status = "SimplyblockDriverStatus",
    shortname = "sbd",
    category = "simplyblock",
    doc = "The simplyblock CSI driver: its controller and node plugins with their sidecars and service accounts, and the CSIDriver object (the roles are the chart's). One per Kubernetes cluster.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),
    printcolumn(
        name = "NodesReady",
        type_ = "integer",
        json_path = ".status.nodesReady"
    ),
    printcolumn(
        name = "NodesTotal",
        type_ = "integer",
        json_path = ".status.nodesTotal"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.message",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SimplyblockDriverSpec {
    /// The CSI driver's image (controller and node plugin). When unset, the operator's
    /// own registry and tag with the CSI driver's repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = IMAGE_PATTERN))]
    pub image: Option<String>,
    /// When the kubelet pulls the images.
    #[serde(default = "always")]
    pub image_pull_policy: String,
    /// Secrets (in this namespace) the kubelet pulls the driver's and its sidecars'
    /// images with: a private registry or mirror.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<k8s_openapi::api::core::v1::LocalObjectReference>,
    /// The name the driver registers under and StorageClasses name as provisioner.
    /// Immutable: volumes record it.
    #[serde(default = "driver_name")]
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.driverName is immutable: every volume records the driver that provisioned it"
    ))]
    pub driver_name: String,
    /// How many controller plugins run (one is active; the others stand by).
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub controller_replicas: i32,
    /// Where the node plugin runs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the node plugin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Where the controller plugin runs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub controller_node_selector: BTreeMap<String, String>,
    /// Tolerations of the controller plugin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub controller_tolerations: Vec<Toleration>,
    /// Resources of the controller plugin's container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_resources: Option<ResourceRequirements>,
    /// Resources of the node plugin's container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_resources: Option<ResourceRequirements>,
    /// The kubelet's root directory on the workers, where the node plugin registers and
    /// mounts (k0s, microk8s and some distributions move it).
    #[serde(default = "kubelet_dir")]
    #[schemars(length(min = 1), regex(pattern = r"^/[^\s]*[^/\s]$"))]
    pub kubelet_dir: String,
    /// The node plugin pods' PriorityClass; `system-node-critical` when unset (mounted
    /// volumes stall when the plugin is evicted), none when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_priority_class_name: Option<String>,
    /// The controller plugin pods' PriorityClass; `system-cluster-critical` when unset,
    /// none when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_priority_class_name: Option<String>,
    /// The plugins' log format: `text` (for a person at a terminal) or `json` (one object
    /// a line, for a log pipeline).
    #[serde(default = "text")]
    #[schemars(regex(pattern = "^(json|text)$"))]
    pub log_format: String,
    /// The CSI sidecars' images; each has a default.
    #[serde(default)]
    pub sidecar_images: SidecarImages,
    /// Authenticate volume requests to the control plane with the requesting
    /// ServiceAccount's token (the control plane must list the accounts it accepts).
    #[serde(default, rename = "enableServiceAccountAuth")]
    pub enable_service_account_auth: bool,
    /// Install a VolumeSnapshotClass and the snapshotter sidecar, when the cluster serves
    /// the snapshot API.
    #[serde(default = "yes")]
    pub enable_volume_snapshots: bool,
    /// Run the csi-addons sidecar (volume replication).
    #[serde(default, rename = "enableCSIAddons")]
    pub enable_csi_addons: bool,
    /// TLS between the driver and the control plane.
    #[serde(default)]
    pub tls: DriverTls,
}

fn text() -> String {
    "text".into()
}

fn kubelet_dir() -> String {
    "/var/lib/kubelet".into()
}

fn always() -> String {
    "Always".into()
}

fn driver_name() -> String {
    crate::keys::CSI_DRIVER_NAME.into()
}

fn one() -> i32 {
    1
}

fn yes() -> bool {
    true
}

/// The CSI sidecars' images.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SidecarImages {
    #[serde(default = "provisioner")]
    #[schemars(regex(pattern = IMAGE_PATTERN))]
    pub provisioner: String,
    #[serde(default = "attacher")]
    #[schemars(regex(pattern = IMAGE_PATTERN))]
    pub attacher: String,
    #[serde(default = "resizer")]
    #[schemars(regex(pattern = IMAGE_PATTERN))]
    pub resizer: String,
    #[serde(default = "snapshotter")]
    #[schemars(regex(pattern = IMAGE_PATTERN))]
    pub snapshotter: String,
    #[serde(default = "health_monitor")]
    #[schemars(regex(pattern = IMAGE_PATTERN))]
    pub health_monitor: String,
    #[serde(default = "node_driver_registrar")]
    #[schemars(regex(pattern = IMAGE_PATTERN))]
    pub node_driver_registrar: String,
}

fn provisioner() -> String {
    "registry.k8s.io/sig-storage/csi-provisioner:v5.2.0".into()
}
fn attacher() -> String {
    "registry.k8s.io/sig-storage/csi-attacher:v4.8.1".into()
}
fn resizer() -> String {
    "registry.k8s.io/sig-storage/csi-resizer:v1.13.2".into()
}
fn snapshotter() -> String {
    "registry.k8s.io/sig-storage/csi-snapshotter:v8.2.1".into()
}
fn health_monitor() -> String {
    "registry.k8s.io/sig-storage/csi-external-health-monitor-controller:v0.14.0".into()
}
fn node_driver_registrar() -> String {
    "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.13.0".into()
}

impl Default for SidecarImages {
    fn default() -> Self {
        SidecarImages {
            provisioner: provisioner(),
            attacher: attacher(),
            resizer: resizer(),
            snapshotter: snapshotter(),
            health_monitor: health_monitor(),
            node_driver_registrar: node_driver_registrar(),
        }
    }
}

/// TLS between the driver and the control plane. Off unless asked for.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DriverTls {
    /// Connect to the control plane over TLS.
    #[serde(default, rename = "enableTLS")]
    pub enable_tls: bool,
    /// Also present a client certificate.
    #[serde(default, rename = "enableMutualTLS")]
    pub enable_mutual_tls: bool,
    /// Who issues the client certificates.
    #[serde(default)]
    pub provider: TlsProvider,
}

/// How the driver is doing.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DriverPhase {
    /// Being installed, or held (a second driver, an adoption refused).
    #[default]
    Installing,
    /// The controller plugin and every node plugin are ready.
    Ready,
    /// The controller plugin is ready, a node plugin is not.
    Degraded,
    /// The controller plugin is not ready: no volume can be provisioned.
    Unavailable,
}

/// Whether volume snapshots can be taken.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotSupport {
    /// The cluster serves `snapshot.storage.k8s.io/v1`: the VolumeSnapshotClass is installed.
    Detected,
    /// The snapshot API is not served; install the external-snapshotter's CRDs and
    /// controller to take snapshots.
    Missing,
}

/// Whether the driver's objects were created by the operator or taken over from an
/// earlier installation.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Created,
    Adopted,
}

/// What the operator last saw of the driver.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SimplyblockDriverStatus {
    /// Installing, Ready, Degraded or Unavailable.
    #[serde(default)]
    pub phase: DriverPhase,
    /// The node plugins ready.
    #[serde(default)]
    pub nodes_ready: i32,
    /// The node plugins scheduled.
    #[serde(default)]
    pub nodes_total: i32,
    /// Whether a controller plugin is ready.
    #[serde(default)]
    pub controller_ready: bool,
    /// Whether snapshots can be taken here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_support: Option<SnapshotSupport>,
    /// Created or Adopted; set once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// The driver's version: its image's tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Why the phase is what it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready (the CSI driver is rolled out and available), Progressing (rolling out) and Degraded (some of its pods are unavailable). `kubectl wait --for=condition=Ready` waits for the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

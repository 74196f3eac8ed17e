//! StorageDevice (`sd`): one drive of one StorageNode, as the control plane reports it.
//!
//! The operator creates, updates and deletes these objects (a mirror of each node's
//! device list); people read them and name them in a StorageDeviceOps. The spec is the
//! device's identity only.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::names::{MAX_LABEL_VALUE, derived_name};

/// One drive of a storage node. Written by the operator only.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "StorageDevice",
    namespaced,
    status = "StorageDeviceStatus",
    shortname = "sd",
    category = "simplyblock",
    doc = "One drive of a StorageNode as the control plane reports it; the operator keeps it in step and deletes it when the drive is gone.",
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.nodeRef"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Role", type_ = "string", json_path = ".status.role"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.deviceStatus"),
    printcolumn(
        name = "Total",
        type_ = "integer",
        json_path = ".status.capacity.totalBytes"
    ),
    printcolumn(
        name = "PCI",
        type_ = "string",
        json_path = ".status.hardware.pciAddress",
        priority = 1
    ),
    printcolumn(
        name = "Serial",
        type_ = "string",
        json_path = ".status.hardware.serialNumber",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    selectable = ".spec.nodeRef"
)]
#[serde(rename_all = "camelCase")]
pub struct StorageDeviceSpec {
    /// The StorageNode, in this namespace, the drive belongs to. Immutable. Selectable:
    /// `kubectl get sd --field-selector spec.nodeRef=<node>`.
    #[schemars(length(max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.nodeRef is immutable: a device belongs to one node for its life"
    ))]
    pub node_ref: String,

    /// The control plane's id of the drive. Immutable.
    #[serde(rename = "deviceID")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.deviceID is immutable: it is the identity of the drive this object mirrors"
    ))]
    pub device_id: String,
}

/// The state of a drive, from the control plane's status word.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum DevicePhase {
    /// In the data path and serving.
    Online,
    /// In the data path but impaired: unreachable, read-only or full.
    Degraded,
    /// Its node cannot be asked (not online, suspended or removed), or the control plane
    /// reports a status this operator does not know.
    #[default]
    Unknown,
    /// Taken out of the data path (a remove); a restart can bring it back.
    Removed,
    /// Failed for good; its data is rebuilt elsewhere.
    Failed,
}

impl DevicePhase {
    /// Every phase, for gauges that say which one a device is in.
    pub const ALL: &'static [DevicePhase] = &[
        DevicePhase::Online,
        DevicePhase::Degraded,
        DevicePhase::Unknown,
        DevicePhase::Removed,
        DevicePhase::Failed,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            DevicePhase::Online => "Online",
            DevicePhase::Degraded => "Degraded",
            DevicePhase::Unknown => "Unknown",
            DevicePhase::Removed => "Removed",
            DevicePhase::Failed => "Failed",
        }
    }

    /// The phase for the control plane's device status word (`online`, `JM_DEV`, …).
    ///
    /// Contract: `new` (not yet in the data path) and any word this operator does not know
    /// are Unknown; a journal device (`JM_DEV`) is serving, so Online.
    pub fn from_control_plane(status: &str) -> DevicePhase {
        match status {
            "online" | "JM_DEV" => DevicePhase::Online,
            "unavailable" | "read_only" | "cannot_allocate" => DevicePhase::Degraded,
            "removed" => DevicePhase::Removed,
            "failed" | "failed_and_migrated" => DevicePhase::Failed,
            _ => DevicePhase::Unknown,
        }
    }
}

/// What a drive holds.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeviceRole {
    /// Volume data.
    #[default]
    Storage,
    /// The node's journal (the control plane reports it as `JM_DEV`).
    Journal,
}

/// What the control plane last reported of the drive.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageDeviceStatus {
    /// Online, Degraded, Unknown, Removed or Failed.
    #[serde(default)]
    pub phase: DevicePhase,
    /// The control plane's own status word (`online`, `removed`, `JM_DEV`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_status: Option<String>,
    /// Storage, or Journal for the node's journal device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<DeviceRole>,
    /// The drive's size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<DeviceCapacity>,
    /// What the drive is; every field is optional (a PCI address means NVMe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<DeviceHardware>,
    /// The control plane's id of the cluster, from the last report.
    #[serde(default, rename = "clusterID", skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// The control plane's id of the node, from the last report.
    #[serde(default, rename = "nodeID", skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// The StorageDeviceOps holding the device's lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_ops_ref: Option<String>,
    /// Why the phase is what it is, in one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready (the device is online), Progressing (being added, restarted or removed) and Degraded (unavailable or failed). `kubectl wait --for=condition=Ready` waits for the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A drive's size; fixed for the life of the drive (usage is a metric, not status).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DeviceCapacity {
    /// Bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub total_bytes: Option<i64>,
}

/// What a drive is.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DeviceHardware {
    /// The PCI address of an NVMe drive (absent for a logical block device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The NVMe controller the drive is attached through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvme_controller: Option<String>,
}

/// The name of the StorageDevice for drive `device_id` of StorageNode `node`:
/// `<node>-<first 8 characters of the id>`. A node name is at most 63 bytes, so the name
/// fits a label value as it is; should it not, it is cut with a digest of both parts.
pub fn storage_device_name(node: &str, device_id: &str) -> String {
    let short: String = device_id.chars().take(8).collect();
    derived_name(&[node, &short], MAX_LABEL_VALUE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_is_the_node_and_the_head_of_the_id() {
        assert_eq!(
            storage_device_name("sb-w1-0", "0b0c9d2e-5c1a-4b6e-9d44-2f8a1c3e7b10"),
            "sb-w1-0-0b0c9d2e"
        );
    }

    #[test]
    fn a_name_at_the_node_limit_stays_a_label_value() {
        let node = "n".repeat(63);
        let a = storage_device_name(&node, "0b0c9d2e-aaaa");
        let b = storage_device_name(&node, "1b0c9d2e-aaaa");
        assert!(a.len() <= 63 && b.len() <= 63, "{a} {b}");
        assert_ne!(a, b);
    }

    #[test]
    fn each_control_plane_status_has_its_phase() {
        use DevicePhase::*;
        for (word, phase) in [
            ("online", Online),
            ("JM_DEV", Online),
            ("unavailable", Degraded),
            ("read_only", Degraded),
            ("cannot_allocate", Degraded),
            ("removed", Removed),
            ("failed", Failed),
            ("failed_and_migrated", Failed),
            ("new", Unknown),
            ("something_newer", Unknown),
        ] {
            assert_eq!(DevicePhase::from_control_plane(word), phase, "{word}");
        }
    }
}

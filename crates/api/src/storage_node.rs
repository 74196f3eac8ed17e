//! StorageNode (`sn`): one simplyblock storage node, i.e. one slot of one worker.
//!
//! A node is identified by its cluster, its worker and its slot. The operator writes it
//! (a deployment document's expansion does); the fields with one legitimate writer are
//! guarded by the admission webhook rather than made immutable, so the operator can still
//! change them during a migration.

use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use simplyblock_statemachine::{Graph, GraphDef, StateDef, StepSnapshot, state_enum};

use crate::cluster_deployment_config::JournalManager;
use crate::storage_cluster::PullPolicy;

/// One storage node: a slot of a worker, in one cluster.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "StorageNode",
    namespaced,
    status = "StorageNodeStatus",
    shortname = "sn",
    category = "simplyblock",
    doc = "One simplyblock storage node: one slot of one worker, serving that worker's devices to its cluster.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterRef"),
    printcolumn(name = "Worker", type_ = "string", json_path = ".spec.workerNode"),
    printcolumn(name = "Socket", type_ = "string", json_path = ".spec.socketId"),
    printcolumn(name = "Slot", type_ = "integer", json_path = ".spec.slot"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Step", type_ = "string", json_path = ".status.step.state"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.status"),
    printcolumn(name = "Health", type_ = "boolean", json_path = ".status.health"),
    printcolumn(name = "Devices", type_ = "integer", json_path = ".status.resources.devices.total", priority = 1),
    printcolumn(name = "Online", type_ = "integer", json_path = ".status.resources.devices.online", priority = 1),
    printcolumn(name = "UUID", type_ = "string", json_path = ".status.uuid", priority = 1),
    printcolumn(name = "FD", type_ = "string", json_path = ".status.failureDomain", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("size(self.metadata.name) <= 63").message(
        "a StorageNode name is at most 63 characters, because it is written into label values; choose a shorter name"
    ),
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(oldSelf.nodeSet) || has(self.nodeSet)").message("nodeSet cannot be removed once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.slot) || has(self.slot)").message("slot cannot be removed once set"))]
pub struct StorageNodeSpec {
    /// The StorageCluster, in this namespace, the node belongs to. Immutable.
    #[schemars(length(max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "clusterRef is immutable: a node belongs to one cluster for its life; delete it and create one naming the other cluster"
    ))]
    pub cluster_ref: String,

    /// Reserved: a record, for people, of the deployment document's node set that produced
    /// the node; nothing acts on it. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("nodeSet is immutable"))]
    pub node_set: Option<String>,

    /// The Kubernetes node (worker) the storage node runs on, by its name (a DNS-1123
    /// subdomain). Only the operator changes it.
    #[schemars(length(max = 253), regex(pattern = crate::names::DNS_SUBDOMAIN_PATTERN))]
    pub worker_node: String,

    /// The NUMA socket, `"0"` or `"1"`. Only the operator changes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_id: Option<String>,

    /// The node's index on its socket (0 to nodesPerSocket-1). Only the operator changes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_index: Option<i32>,

    /// The node's slot on its worker: part of its identity and of its topology label key.
    /// Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("slot is immutable: it is part of the node's identity"))]
    pub slot: Option<i32>,

    /// The node's configuration. Only the operator changes it.
    pub config: StorageNodeConfig,
}

/// A node's own configuration; what is uniform across the cluster lives on the cluster.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(oldSelf.journalManager) || has(self.journalManager)").message("journalManager cannot be removed once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.failureDomain) || has(self.failureDomain)").message("failureDomain cannot be removed once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.expand) || has(self.expand)").message("expand cannot be removed once set"))]
#[x_kube(validation = Rule::new("has(oldSelf.site) == has(self.site)").message(
    "site is fixed when the node is created: the control plane takes it with the node add; remove the node and add it again to move it"
))]
pub struct StorageNodeConfig {
    /// The host resources SPDK gets on this node; copied from the cluster at creation.
    pub sizing: Sizing,

    /// The SPDK image of this node, from a simplyblock registry: the node runs it
    /// privileged on its worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::control_plane::IMAGE_PATTERN))]
    pub spdk_image: Option<String>,
    /// The SPDK proxy image of this node, from a simplyblock registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::control_plane::IMAGE_PATTERN))]
    pub spdk_proxy_image: Option<String>,
    /// Reserved: recorded, not yet honoured by the control plane, whose node add takes no
    /// pull policy. Meant for when the SPDK image is pulled.
    #[serde(default)]
    pub spdk_image_pull_policy: PullPolicy,
    /// Reserved: recorded, not yet honoured by the control plane, whose node add takes no
    /// pull policy. Meant for when the SPDK proxy image is pulled.
    #[serde(default)]
    pub spdk_proxy_image_pull_policy: PullPolicy,

    /// The memory SPDK starts with, e.g. `4G`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(G|GI|GB|GiB|M|MI|MB|MiB|g|gi|gb|gib|m|mi|mb|mib)?$"))]
    pub spdk_system_memory: Option<String>,

    /// CPUs held back from SPDK on this node, e.g. `0-1,8`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "reservedSystemCPU"
    )]
    #[schemars(
        length(max = 63),
        regex(pattern = r"^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$")
    )]
    pub reserved_system_cpu: Option<String>,

    /// Journal tuning. Immutable: it is the on-disk layout of the node's devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("journalManager is immutable"))]
    pub journal_manager: Option<JournalManager>,

    /// The devices the node takes: PCI addresses (NVMe) or device paths (logical block),
    /// never both. Immutable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(regex(
        pattern = r"^([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]|/dev/[a-zA-Z0-9._/-]+|[a-zA-Z0-9._-]+)$"
    )))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("deviceNames is immutable: the node's data lives on these devices"))]
    pub device_names: Vec<String>,

    /// PCI addresses the node may take (a migration adds the target host's). Only the
    /// operator changes it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pcie_allow_list: Vec<String>,
    /// PCI addresses the node never takes. Immutable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("pcieDenyList is immutable"))]
    pub pcie_deny_list: Vec<String>,
    /// Only devices of this PCI model. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("pcieModel is immutable"))]
    pub pcie_model: Option<String>,
    /// Only devices of this size range. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("driveSizeRange is immutable"))]
    pub drive_size_range: Option<String>,

    /// The fault group of the node, e.g. its rack. Set once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 63),
        regex(pattern = r"^[a-zA-Z0-9]([-_.a-zA-Z0-9]*[a-zA-Z0-9])?$")
    )]
    #[x_kube(validation = Rule::new("self == oldSelf").message("failureDomain is immutable once set"))]
    pub failure_domain: Option<String>,

    /// The node joins a running cluster (a growth document's node): the control plane
    /// rebalances onto it. Set once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("expand is immutable once set"))]
    pub expand: Option<bool>,

    /// The site the node stands in, for a cluster with `enableSyncReplication`: volumes
    /// are mirrored between sites and served on one at a time. Letters, digits, `.`, `_`
    /// and `-`, starting with a letter or digit, at most 63. Set at creation; immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 63),
        regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
    )]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "site is immutable: the control plane takes it with the node add"
    ))]
    pub site: Option<String>,
}

/// What SPDK gets on a node.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Sizing {
    /// vCPUs for SPDK (at least 4).
    #[schemars(range(min = 4))]
    pub vcpu_count: i32,
    /// The smallest huge-page allocation, e.g. `100G` (10^9 bytes each) or `96Gi` (2^30
    /// each); a bare number means gigabytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_huge_pages_size: Option<String>,
}

/// The operator's reading of a node.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum NodePhase {
    #[default]
    Pending,
    Provisioning,
    Online,
    Removing,
    Removed,
    Offline,
    Degraded,
    Failed,
}

impl NodePhase {
    /// The phase for the control plane's node status; an online node missing devices is
    /// Degraded.
    pub fn from_control_plane(status: &str, devices_missing: bool) -> NodePhase {
        match status {
            "online" | "active" if devices_missing => NodePhase::Degraded,
            "online" | "active" => NodePhase::Online,
            "suspended" | "offline" | "in_shutdown" => NodePhase::Offline,
            "in_creation" | "in_restart" => NodePhase::Provisioning,
            "pending_removal" | "migrating_devices" | "migrating_lvols" | "in_removal" => {
                NodePhase::Removing
            }
            "removed" => NodePhase::Removed,
            _ => NodePhase::Failed,
        }
    }
}

state_enum! {
    /// Steps of a node's provisioning.
    pub enum ProvisioningStep {
        CheckingHost,
        CheckingConfig,
        AwaitingSlot,
        Posting,
        Resolving,
        Adopting,
        AwaitingWorker,
    }
}

const MINUTE: u64 = 60;

const PROVISIONING: GraphDef<'static, ProvisioningStep> = GraphDef::new(
    ProvisioningStep::CheckingHost,
    &[
        StateDef::new(ProvisioningStep::CheckingHost)
            .to(&[ProvisioningStep::CheckingConfig, ProvisioningStep::Adopting])
            .deadline(Duration::from_secs(30 * MINUTE)),
        StateDef::new(ProvisioningStep::CheckingConfig)
            .to(&[ProvisioningStep::AwaitingSlot])
            .deadline(Duration::from_secs(30 * MINUTE)),
        StateDef::new(ProvisioningStep::AwaitingSlot)
            .to(&[ProvisioningStep::Posting, ProvisioningStep::Adopting])
            .deadline(Duration::from_secs(60 * MINUTE)),
        StateDef::new(ProvisioningStep::Posting)
            .to(&[
                ProvisioningStep::Resolving,
                ProvisioningStep::AwaitingWorker,
            ])
            .deadline(Duration::from_secs(10 * MINUTE)),
        StateDef::new(ProvisioningStep::Resolving)
            .to(&[ProvisioningStep::Posting, ProvisioningStep::AwaitingWorker])
            .deadline(Duration::from_secs(30 * MINUTE)),
        StateDef::new(ProvisioningStep::AwaitingWorker)
            .to(&[ProvisioningStep::CheckingHost])
            .deadline(Duration::from_secs(60 * MINUTE)),
        StateDef::new(ProvisioningStep::Adopting).deadline(Duration::from_secs(10 * MINUTE)),
    ],
);

/// The provisioning machine. Resolving may go back to Posting: an add that finished
/// without producing the node is asked again.
pub static PROVISIONING_GRAPH: LazyLock<Graph<ProvisioningStep>> =
    LazyLock::new(|| Graph::new(PROVISIONING).expect("the provisioning graph is valid"));

fn provisioning_step_schema(_: &mut SchemaGenerator) -> Schema {
    StepSnapshot::schema_for_steps(&PROVISIONING_GRAPH.declared_state_names())
}

/// What the operator and the control plane report about a node.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageNodeStatus {
    #[serde(default)]
    pub phase: NodePhase,
    /// The step of the provisioning machine while the node is being added.
    #[serde(default, skip_serializing_if = "StepSnapshot::is_empty")]
    #[schemars(schema_with = "provisioning_step_schema")]
    pub step: StepSnapshot,
    /// The control plane's id of the node; empty while it is being provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The control plane's own status word (`online`, `in_restart`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The control plane's health check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uptime: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<NodeResources>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<NodePorts>,
    /// The failure domain the control plane assigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<String>,
    /// The StorageNodeOps holding the node's lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_ops_ref: Option<String>,
    /// Why the phase is what it is, in one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready (the node is online), Progressing (being provisioned, restarted or removed) and Degraded (offline, missing devices, failed, or its worker Node is away). `kubectl wait --for=condition=Ready` waits for the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The node's resources as the control plane reports them.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeResources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<i32>,
    /// Devices online and in all: two counts, not a string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<DeviceCounts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Capacity>,
}

/// Devices online and in all.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DeviceCounts {
    pub online: i32,
    pub total: i32,
}

/// Capacity of the node.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Capacity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled_at: Option<Time>,
}

/// The node's ports.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodePorts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub management: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvmeof: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lvol: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpc: Option<i32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_map_reads_the_control_plane() {
        use NodePhase::*;
        for (status, missing, phase) in [
            ("online", false, Online),
            ("active", false, Online),
            ("online", true, Degraded),
            ("suspended", false, Offline),
            ("offline", false, Offline),
            ("in_shutdown", false, Offline),
            ("in_creation", false, Provisioning),
            ("in_restart", false, Provisioning),
            ("pending_removal", false, Removing),
            ("migrating_devices", false, Removing),
            ("migrating_lvols", false, Removing),
            ("in_removal", false, Removing),
            ("removed", false, Removed),
            ("unreachable", false, Failed),
            ("timeout", false, Failed),
            ("something-new", false, Failed),
        ] {
            assert_eq!(
                NodePhase::from_control_plane(status, missing),
                phase,
                "{status}"
            );
        }
    }

    #[test]
    fn a_lost_worker_restarts_at_the_host_check() {
        use ProvisioningStep::*;
        let g = &*PROVISIONING_GRAPH;
        assert!(g.allows(Posting, AwaitingWorker));
        assert!(g.allows(Resolving, AwaitingWorker));
        assert_eq!(g.targets(AwaitingWorker), &[CheckingHost]);
        assert!(g.allows(Resolving, Posting));
        assert!(g.is_terminal(Adopting));
    }
}

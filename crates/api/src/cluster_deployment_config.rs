//! ClusterDeploymentConfig (`cdc`): a whole deployment as one reviewable document.
//!
//! A draft is validated on every reconcile and expanded on none. Setting `spec.approved`
//! is the one-way gate: from then on the spec is frozen and the operator expands it into a
//! StorageCluster and its StorageNodes. The document owns nothing it creates, so deleting
//! it deletes a document and nothing else.

use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use simplyblock_statemachine::{Graph, GraphDef, StateDef, StepSnapshot, state_enum};

use crate::common::Stripe;
use crate::storage_cluster::{DeviceClass, Kms};

/// A deployment: the environment, the cluster to create (or grow), and the node sets with
/// their workers, interfaces and devices.
// The approval rules read oldSelf.approved behind has(): documents stored before the field
// was defaulted lack the key, and an unguarded read fails every approval.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "ClusterDeploymentConfig",
    namespaced,
    status = "ClusterDeploymentConfigStatus",
    shortname = "cdc",
    category = "simplyblock",
    doc = "A simplyblock deployment written down as one document: review it, correct it, set spec.approved, and the operator creates the cluster and its storage nodes.",
    printcolumn(name = "Approved", type_ = "boolean", json_path = ".spec.approved"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Step", type_ = "string", json_path = ".status.step.state"),
    printcolumn(name = "Cluster", type_ = "string", json_path = ".status.clusterRef"),
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
#[x_kube(validation = Rule::new("!has(oldSelf.approved) || !oldSelf.approved || self == oldSelf").message(
    "an approved deployment config is immutable"
))]
#[x_kube(validation = Rule::new("!has(oldSelf.approved) || !oldSelf.approved || self.approved").message(
    "approval cannot be withdrawn"
))]
#[x_kube(validation = Rule::new(
    "self.nodeSets.all(s, s.groups.all(g, !has(g.devices) || !has(g.devices.block))) || self.nodeSets.all(s, s.groups.all(g, !has(g.devices) || !has(g.devices.nvme)))"
).message("every group must name the same device class: all nvme or all block"))]
pub struct ClusterDeploymentConfigSpec {
    /// The review gate. Nothing is created until it is true, and it cannot be set back.
    /// Always written, so a reviewer sees the gate they are asked to open.
    #[serde(default)]
    pub approved: bool,

    /// The Kubernetes distribution; it decides the kubelet, CPU-topology and OpenShift
    /// settings of the storage nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<Environment>,

    /// Reserved: recorded as a fact about the fleet; nothing in the expansion depends on it
    /// yet. Marks an edge deployment: the same cluster with fewer, smaller nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edge_cluster: Option<bool>,

    /// An existing StorageCluster this document adds nodes to. Absent, the document
    /// creates the cluster described in `cluster`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub cluster_ref: Option<String>,

    /// The StorageCluster to create; ignored when clusterRef is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterTemplate>,

    /// The nodes the deployment is made of, usually one set per rack.
    #[schemars(length(min = 1, max = 64))]
    pub node_sets: Vec<NodeSet>,

    /// Images for the cluster's components, where they differ from the ControlPlane's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Images>,

    /// Tolerations of the storage-node pods, e.g. for workers tainted for storage; the
    /// expansion writes them to the cluster's spec.storageNodes. Discovery copies the
    /// tolerations its probes ran with, since those are the taints the cluster lives with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub tolerations: Vec<k8s_openapi::api::core::v1::Toleration>,
}

/// A Kubernetes distribution, by its own name.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Environment {
    Vanilla,
    OpenShift,
    Rancher,
    K3s,
    Talos,
}

/// The StorageCluster the expansion creates. It carries the layout a cluster cannot
/// change later, so a reviewer sees it before the cluster exists.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "!(has(self.enableAtomicity4K) && self.enableAtomicity4K) || (has(self.enableChecksumValidation) && self.enableChecksumValidation)"
).message("enableAtomicity4K requires enableChecksumValidation to be true"))]
pub struct ClusterTemplate {
    /// The StorageCluster's name (at most 63 characters, as a cluster name must be).
    #[schemars(length(max = 63))]
    pub name: String,
    /// The most NVMe-oF subsystems per storage node (10 to 75).
    #[schemars(range(min = 10, max = 75))]
    pub max_subsystem_count: i32,
    /// vCPUs given to SPDK on each storage node (at least 4); copied into every node.
    #[schemars(range(min = 4))]
    pub vcpu_count: i32,
    /// The smallest huge-page allocation per node, e.g. `100G` (10^9 bytes each) or
    /// `96Gi` (2^30 each); a bare number is gigabytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub min_huge_pages_size: Option<String>,
    /// Format every listed device before a storage node takes it: NVMe devices to a 4K
    /// block size, block devices by wiping their signatures. Destructive, and stated here
    /// so the reviewer sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_drive_format: Option<bool>,
    /// NUMA sockets to use; empty means socket 0 alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(max = 16)))]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub sockets_to_use: Vec<String>,
    /// Storage nodes per socket (1 to 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 8))]
    pub nodes_per_socket: Option<i32>,
    /// The erasure-coding layout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stripe: Option<Stripe>,
    /// The storage fabric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub fabric_type: Option<String>,
    /// Failure-domain mode: every group must name its failureDomain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_failure_domains: Option<bool>,
    /// Synchronous replication between sites: every group must name its site, and the
    /// groups must stand in at least two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_sync_replication: Option<bool>,
    /// Inline checksums.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_checksum_validation: Option<bool>,
    /// Atomic 4K writes (needs enableChecksumValidation).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "enableAtomicity4K"
    )]
    pub enable_atomicity_4k: Option<bool>,
    /// Where volume encryption keys are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms: Option<Kms>,
    /// Where the cluster's backups go: the control plane is told its store when the
    /// cluster is created, so it is named here, before the cluster exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<crate::storage_cluster::BackupStore>,
    /// How many workers may be in node add at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub node_provisioning_budget: Option<i32>,
    /// Dedicate each node's smallest device to the journal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_journal_device: Option<bool>,
}

/// A set of workers added together, usually a rack.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
pub struct NodeSet {
    /// The set's name; copied to each StorageNode's spec.nodeSet.
    #[schemars(length(max = 253))]
    pub name: String,
    /// Groups of workers that share one configuration.
    #[schemars(length(min = 1, max = 64))]
    pub groups: Vec<NodeGroup>,
}

/// Workers that share one configuration: ten identical machines are one entry.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroup {
    /// The group's name within its node set.
    #[schemars(length(max = 253))]
    pub name: String,
    /// Kubernetes node names of the workers.
    #[schemars(length(min = 1, max = 200), inner(length(max = 253)))]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub workers: Vec<String>,
    /// The management interface the storage nodes bind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub mgmt_interface: Option<String>,
    /// The data-plane interfaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(max = 63)))]
    pub data_interfaces: Vec<String>,
    /// The devices every worker of the group hands to simplyblock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<DeviceSelection>,
    /// The fault group the workers share, e.g. their rack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 63),
        regex(pattern = r"^[a-zA-Z0-9]([-_.a-zA-Z0-9]*[a-zA-Z0-9])?$")
    )]
    pub failure_domain: Option<String>,
    /// The site the workers stand in, for a cluster with enableSyncReplication; copied to
    /// each StorageNode's config.site.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 63),
        regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
    )]
    pub site: Option<String>,
    /// The memory SPDK is started with on these nodes, e.g. `4G`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 32),
        regex(pattern = r"^[0-9]+(G|GI|GB|GiB|M|MI|MB|MiB|g|gi|gb|gib|m|mi|mb|mib)?$")
    )]
    pub spdk_system_memory: Option<String>,
    /// Journal tuning of these nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_manager: Option<JournalManager>,
}

/// The explicit list of devices a group uses: NVMe devices by PCI address, or block
/// devices by path, never both. No filters: a reviewer approves a list, not a rule.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("has(self.nvme) != has(self.block)").message(
    "a device selection names NVMe addresses or block devices, not both"
))]
pub struct DeviceSelection {
    /// NVMe devices by PCI address, e.g. `0000:5e:00.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 128),
        inner(
            length(max = 32),
            regex(pattern = r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]$")
        )
    )]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub nvme: Option<Vec<String>>,
    /// Logical block devices by path, e.g. `/dev/sdb`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 128),
        inner(length(max = 255), regex(pattern = r"^/dev/[a-zA-Z0-9._/-]+$"))
    )]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub block: Option<Vec<String>>,
}

impl DeviceSelection {
    pub fn class(&self) -> Option<DeviceClass> {
        match (&self.nvme, &self.block) {
            (Some(_), None) => Some(DeviceClass::NVMe),
            (None, Some(_)) => Some(DeviceClass::LogicalBlock),
            _ => None,
        }
    }
}

/// Journal managers of a node: how many, and what share of each device they take.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JournalManager {
    /// Number of journal managers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub count: Option<i32>,
    /// Percent of each device given to the journal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub percent_per_device: Option<i32>,
}

/// Images of the cluster's components.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Images {
    /// The storage-node image the cluster's nodes run (the StorageCluster's
    /// spec.storageNodes.image); without it, the ControlPlane's image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ImageRef>,
    /// The SPDK image of every storage node (each StorageNode's spec.config.spdkImage);
    /// without it, the control plane's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spdk: Option<ImageRef>,
    /// The SPDK proxy image of every storage node (spec.config.spdkProxyImage); without
    /// it, the control plane's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spdk_proxy: Option<ImageRef>,
}

/// An image and its pull policy.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImageRef {
    /// The image reference, `registry/repository:tag` or `…@sha256:digest`, from a
    /// simplyblock registry: the storage nodes run it privileged on their workers.
    #[schemars(regex(pattern = crate::control_plane::IMAGE_PATTERN))]
    pub image: String,
    /// When the image is pulled: Always, Never or IfNotPresent. The expansion does not
    /// carry it into the objects it writes yet, so the nodes pull Always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<crate::storage_cluster::PullPolicy>,
}

/// Where the operator has got to with the document.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum DeploymentPhase {
    /// Not approved: validated on every reconcile, expanded on none.
    #[default]
    Draft,
    /// Approved and being turned into a cluster and its nodes.
    Expanding,
    /// Everything the document describes exists.
    Expanded,
    /// The expansion refused the document or could not finish; status.message says why.
    Failed,
}

impl DeploymentPhase {
    /// Every phase, in the order of the declaration.
    pub const ALL: [DeploymentPhase; 4] = [
        DeploymentPhase::Draft,
        DeploymentPhase::Expanding,
        DeploymentPhase::Expanded,
        DeploymentPhase::Failed,
    ];
}

state_enum! {
    /// Steps of the expansion.
    pub enum ExpansionStep {
        Validating,
        CreatingCluster,
        AwaitingCluster,
        CreatingNodes,
        Activating,
    }
}

const MINUTE: u64 = 60;

const EXPANSION: GraphDef<'static, ExpansionStep> = GraphDef::new(
    ExpansionStep::Validating,
    &[
        StateDef::new(ExpansionStep::Validating)
            .to(&[ExpansionStep::CreatingCluster])
            .deadline(Duration::from_secs(5 * MINUTE)),
        StateDef::new(ExpansionStep::CreatingCluster)
            .to(&[ExpansionStep::AwaitingCluster])
            .deadline(Duration::from_secs(5 * MINUTE)),
        StateDef::new(ExpansionStep::AwaitingCluster)
            .to(&[ExpansionStep::CreatingNodes])
            .deadline(Duration::from_secs(30 * MINUTE)),
        StateDef::new(ExpansionStep::CreatingNodes)
            .to(&[ExpansionStep::Activating])
            .deadline(Duration::from_secs(10 * MINUTE)),
        StateDef::new(ExpansionStep::Activating).deadline(Duration::from_secs(60 * MINUTE)),
    ],
);

/// The expansion machine.
pub static EXPANSION_GRAPH: LazyLock<Graph<ExpansionStep>> =
    LazyLock::new(|| Graph::new(EXPANSION).expect("the expansion graph is valid"));

fn expansion_step_schema(_: &mut SchemaGenerator) -> Schema {
    StepSnapshot::schema_for_steps(&EXPANSION_GRAPH.declared_state_names())
}

/// What the operator did with the document.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDeploymentConfigStatus {
    /// Draft, Expanding, Expanded or Failed.
    #[serde(default)]
    pub phase: DeploymentPhase,
    /// The step of the expansion.
    #[serde(default, skip_serializing_if = "StepSnapshot::is_empty")]
    #[schemars(schema_with = "expansion_step_schema")]
    pub step: StepSnapshot,
    /// The StorageCluster the expansion created or grew. A record only: nothing
    /// resolves it later, which keeps the document safe to delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ref: Option<String>,
    /// The StorageNodes the expansion created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub node_refs: Vec<String>,
    /// Why the phase is what it is; on a draft, what validation found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the expansion started: the first reconcile after approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expansion_started_at: Option<Time>,
    /// Ready (the deployment is done), Progressing (discovering, waiting for approval or creating its objects) and Degraded (it failed). `kubectl wait --for=condition=Ready` waits for the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_class_is_read_off_the_selection() {
        let nvme = DeviceSelection {
            nvme: Some(vec!["0000:01:00.0".into()]),
            block: None,
        };
        let block = DeviceSelection {
            nvme: None,
            block: Some(vec!["/dev/sdb".into()]),
        };
        assert_eq!(nvme.class(), Some(DeviceClass::NVMe));
        assert_eq!(block.class(), Some(DeviceClass::LogicalBlock));
    }

    #[test]
    fn expansion_runs_in_one_line() {
        use ExpansionStep::*;
        let g = &*EXPANSION_GRAPH;
        let order = [
            Validating,
            CreatingCluster,
            AwaitingCluster,
            CreatingNodes,
            Activating,
        ];
        for pair in order.windows(2) {
            assert!(g.allows(pair[0], pair[1]));
            assert_eq!(g.targets(pair[0]), &[pair[1]]);
        }
        assert!(g.is_terminal(Activating));
    }

    #[test]
    fn every_deployment_phase_is_listed_once() {
        // No wildcard: a new phase does not compile until it has a place in ALL.
        let index = |p: DeploymentPhase| match p {
            DeploymentPhase::Draft => 0,
            DeploymentPhase::Expanding => 1,
            DeploymentPhase::Expanded => 2,
            DeploymentPhase::Failed => 3,
        };
        for (i, p) in DeploymentPhase::ALL.iter().enumerate() {
            assert_eq!(index(*p), i, "{p:?}");
        }
    }
}

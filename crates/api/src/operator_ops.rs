//! OperatorOps (`oops`): one operation on the operator itself. Today that is Discover,
//! which inspects the workers and writes a ClusterDeploymentConfig in Draft.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use simplyblock_statemachine::{Action, GraphDef, MultiGraph, StateDef, StepSnapshot, state_enum};

use crate::cluster_deployment_config::Environment;
use crate::common::OpsPhase;

/// One operation on the operator. It names no target (the operator is not a resource of
/// this API) and takes no lock, so runs may proceed side by side.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "OperatorOps",
    plural = "operatorops",
    namespaced,
    status = "OperatorOpsStatus",
    shortname = "oops",
    category = "simplyblock",
    doc = "One operation on the simplyblock operator itself; Discover inspects the workers' disks and writes a ClusterDeploymentConfig draft for review.",
    printcolumn(name = "Action", type_ = "string", json_path = ".spec.action"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Step", type_ = "string", json_path = ".status.step.state"),
    printcolumn(name = "Config", type_ = "string", json_path = ".status.configRef"),
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
#[x_kube(validation = Rule::new("has(self.discover) == has(oldSelf.discover)").message("spec.discover is immutable"))]
pub struct OperatorOpsSpec {
    /// The operation. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.action is immutable: an operation performs one action; create another operation for another action"
    ))]
    pub action: OperatorAction,

    /// Ask a running operation to stop. Every Discover step can be aborted; a run leaves
    /// behind at most the draft it already wrote.
    #[serde(default)]
    pub abort: bool,

    /// Parameters of action Discover. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.discover is immutable"))]
    pub discover: Option<DiscoverSpec>,
}

/// The operations an OperatorOps can perform.
#[derive(
    Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
pub enum OperatorAction {
    /// Inspect the workers and write a ClusterDeploymentConfig in Draft.
    Discover,
}

impl OperatorAction {
    pub const ALL: &'static [OperatorAction] = &[OperatorAction::Discover];
}

impl Action for OperatorAction {
    fn name(self) -> &'static str {
        match self {
            OperatorAction::Discover => "Discover",
        }
    }
}

/// What a discovery run inspects and which devices it reports. Workers are chosen by
/// name or by label, never both.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "!(has(self.workers) && size(self.workers) > 0 && has(self.nodeSelector) && size(self.nodeSelector) > 0)"
).message("spec.discover names workers and also carries a nodeSelector; state one or the other"))]
pub struct DiscoverSpec {
    /// The ClusterDeploymentConfig to write; by default `discovered-<run>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub config_name: Option<String>,
    /// The StorageCluster the draft proposes; by default the run's (the OperatorOps's)
    /// name. Ignored with `clusterRef`, which grows an existing cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub cluster_name: Option<String>,
    /// The workers to inspect, by node name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128), inner(length(max = 253)))]
    pub workers: Vec<String>,
    /// Inspect the workers with these labels; empty inspects every schedulable worker.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// What the probe pods tolerate; copied into the draft for its storage nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub tolerations: Vec<Toleration>,
    /// Also consider control-plane nodes (for combined or single-node clusters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_control_plane_nodes: Option<bool>,
    /// Which devices of an inspected worker reach the draft.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_filter: Option<DeviceFilter>,
    /// An existing StorageCluster the draft grows instead of creating one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub cluster_ref: Option<String>,
}

/// Narrows which devices a run reports. A run scans one class: NVMe (the default) or
/// logical block devices; each class has its own filters and the other class's are refused.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "!(has(self.enableLogicalBlockDevices) && self.enableLogicalBlockDevices) || !(has(self.pcieAllowList) || has(self.pcieDenyList) || has(self.pcieModel))"
).message("the PCI filters select NVMe devices and cannot be combined with enableLogicalBlockDevices; use blockAllowList and blockDenyList"))]
#[x_kube(validation = Rule::new(
    "(has(self.enableLogicalBlockDevices) && self.enableLogicalBlockDevices) || !(has(self.blockAllowList) || has(self.blockDenyList))"
).message("blockAllowList and blockDenyList select logical block devices and require enableLogicalBlockDevices"))]
#[x_kube(validation = Rule::new(
    "(has(self.enableLogicalBlockDevices) && self.enableLogicalBlockDevices) || !has(self.disableReclaimUserspaceDevices)"
).message("disableReclaimUserspaceDevices keeps userspace-bound controllers out of a logical block-device run and requires enableLogicalBlockDevices"))]
pub struct DeviceFilter {
    /// Scan logical block devices instead of NVMe devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_logical_block_devices: Option<bool>,
    /// Also report devices that carry a partition table (mounted or busy devices never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_partitioned_devices: Option<bool>,
    /// Reserved: discovery never hands userspace-bound NVMe controllers back to the kernel
    /// (it reports them, idle or not, and leaves them bound), so there is nothing to turn
    /// off. Meant to leave such controllers where they are (block runs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_reclaim_userspace_devices: Option<bool>,
    /// Only these PCI addresses (NVMe runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub pcie_allow_list: Option<Vec<String>>,
    /// Never these PCI addresses (NVMe runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub pcie_deny_list: Option<Vec<String>>,
    /// Only devices whose PCI model matches (NVMe runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_model: Option<String>,
    /// Only these device paths (block runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(inner(regex(pattern = r"^/dev/[a-zA-Z0-9._/-]+$")))]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub block_allow_list: Option<Vec<String>>,
    /// Never these device paths (block runs), e.g. the boot disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(inner(regex(pattern = r"^/dev/[a-zA-Z0-9._/-]+$")))]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub block_deny_list: Option<Vec<String>>,
    /// Only devices of this size: `100G-2T`, `500G-`, `-2T`, or `1T` for one exact size.
    /// K, M, G, T and P are powers of 1024 here, the units discovery names groups in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drive_size_range: Option<String>,
}

state_enum! {
    /// Steps of every OperatorOps action.
    pub enum OperatorOpsStep {
        Inspecting,
        Probing,
        Writing,
    }
}

const MINUTE: u64 = 60;

/// Every step is abortable: discovery changes nothing on the workers.
const DISCOVER: GraphDef<'static, OperatorOpsStep> = GraphDef::new(
    OperatorOpsStep::Inspecting,
    &[
        StateDef::new(OperatorOpsStep::Inspecting)
            .to(&[OperatorOpsStep::Probing])
            .abortable()
            .deadline(Duration::from_secs(5 * MINUTE)),
        StateDef::new(OperatorOpsStep::Probing)
            .to(&[OperatorOpsStep::Writing])
            .abortable()
            .deadline(Duration::from_secs(15 * MINUTE)),
        StateDef::new(OperatorOpsStep::Writing)
            .abortable()
            .deadline(Duration::from_secs(5 * MINUTE)),
    ],
);

/// The step graph of every action.
pub static GRAPHS: LazyLock<MultiGraph<OperatorAction, OperatorOpsStep>> = LazyLock::new(|| {
    MultiGraph::new(&[(OperatorAction::Discover, DISCOVER)])
        .expect("the OperatorOps graphs are valid")
});

crate::common::ops_kind!(OperatorOps: OperatorAction, OperatorOpsStep, GRAPHS);

fn step_schema(_: &mut SchemaGenerator) -> Schema {
    StepSnapshot::schema_for_steps(&GRAPHS.declared_state_names())
}

/// The progress of the operation and what it found.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct OperatorOpsStatus {
    /// Pending, Running, Succeeded, Failed or Aborted.
    #[serde(default)]
    pub phase: OpsPhase,
    /// The current step and its deadline.
    #[serde(default, skip_serializing_if = "StepSnapshot::is_empty")]
    #[schemars(schema_with = "step_schema")]
    pub step: StepSnapshot,
    /// The ClusterDeploymentConfig the run wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_ref: Option<String>,
    /// The workers the run inspects, fixed in Inspecting.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub workers: Vec<String>,
    /// The distribution Inspecting concluded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<Environment>,
    /// Why the phase is what it is, in one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it reached a terminal phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// Ready (True once the operation succeeded; Failed or Aborted are False with that
    /// reason) and Progressing (True while it runs). `kubectl wait --for=condition=Ready`
    /// waits for success.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_has_no_unabortable_step() {
        assert_eq!(GRAPHS.actions(), OperatorAction::ALL.to_vec());
        assert!(GRAPHS.unabortable_states().is_empty());
    }
}

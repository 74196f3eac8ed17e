//! TestFailover (`tfo`): a disaster-recovery drill. The latest recovery point of a volume
//! (or of every member of a consistency group) is cloned into an isolated bubble namespace
//! as statically bound PersistentVolumes and claims, without touching the source; deleting
//! the drill removes the clones and the bubble objects.
//!
//! A hub kind: the operator serves it only where the API server serves the OCM
//! `manifestworks` resource itself.

use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use simplyblock_statemachine::{GraphDef, MultiGraph, StateDef, StepSnapshot, state_enum};

/// The finalizer that holds a drill until its clones and bubble objects are gone.
pub const TEST_FAILOVER_FINALIZER: &str = "storage.simplyblock.io/testfailover-teardown";
/// The label every object a drill creates carries, with the drill's UID as its value.
pub const TEST_ID_LABEL: &str = "storage.simplyblock.io/test-id";
/// The prefix of a drill's own bubble namespace when `spec.bubbleNamespace` is not given.
pub const DEFAULT_BUBBLE_PREFIX: &str = "bubble";

/// A disaster-recovery drill: clone the latest recovery point of `sourceRef` into
/// `bubbleNamespace` on `bubbleCluster`. The whole spec is fixed at creation.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "TestFailover",
    plural = "testfailovers",
    namespaced,
    status = "TestFailoverStatus",
    shortname = "tfo",
    category = "simplyblock",
    doc = "A disaster-recovery drill: the latest recovery point of a volume or consistency group cloned into an isolated bubble namespace, torn down when the drill is deleted.",
    printcolumn(name = "Scope", type_ = "string", json_path = ".spec.scope"),
    printcolumn(name = "Source", type_ = "string", json_path = ".spec.sourceRef"),
    printcolumn(name = "On", type_ = "string", json_path = ".spec.sourceCluster"),
    printcolumn(name = "Bubble", type_ = "string", json_path = ".spec.bubbleCluster"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Step", type_ = "string", json_path = ".status.step.state"),
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
#[x_kube(validation = Rule::new("self == oldSelf").message(
    "the spec of a TestFailover is immutable: a drill runs once as written; delete it and create another drill"
))]
#[x_kube(validation = Rule::new("self.scope != 'Volume' || has(self.sourceNamespace)").message(
    "sourceNamespace is required for scope Volume: it is the namespace of the source PersistentVolumeClaim"
))]
pub struct TestFailoverSpec {
    /// What the drill clones: one volume (a PersistentVolumeClaim) or every member of a
    /// consistency group.
    pub scope: FailoverScope,

    /// The cluster the source lives on, by name (an OCM ManagedCluster on a hub).
    #[schemars(length(min = 1, max = 63))]
    pub source_cluster: String,

    /// The namespace of the source PersistentVolumeClaim. Required for scope Volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub source_namespace: Option<String>,

    /// The source: a PersistentVolumeClaim's name (scope Volume) or a consistency group's
    /// name (scope Group).
    #[schemars(length(min = 1, max = 253))]
    pub source_ref: String,

    /// The cluster the clones are placed on, by name. It may be the source's own cluster:
    /// the bubble namespace keeps the clones apart from the workload.
    #[schemars(length(min = 1, max = 63))]
    pub bubble_cluster: String,

    /// A pinned recovery point: the control plane's id of a snapshot of the source. Absent,
    /// the drill uses the latest recovery point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub recovery_point: Option<String>,

    /// The namespace the clones' claims are placed in, created by the drill: a namespace
    /// that already exists on the bubble cluster is refused, not adopted. Absent, each
    /// drill gets its own, `bubble-<drill name>-<digest of its namespace and name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub bubble_namespace: Option<String>,

    /// Reserved: advisory only, as the controller does not delete a drill by itself. How
    /// long the drill should live once Ready, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds: Option<i64>,
}

impl TestFailover {
    /// The namespace the drill places its claims in: `spec.bubbleNamespace`, else one of
    /// the drill's own, so two drills never share (and tear down) one bubble.
    pub fn bubble_namespace(&self) -> String {
        if let Some(ns) = &self.spec.bubble_namespace {
            return ns.clone();
        }
        default_bubble_namespace(
            self.metadata.namespace.as_deref().unwrap_or_default(),
            self.metadata.name.as_deref().unwrap_or_default(),
        )
    }
}

/// `bubble-<name>-<digest>`: a DNS-1123 label of at most 63 characters. The digest of the
/// drill's namespace and name keeps same-named drills of two namespaces apart.
pub fn default_bubble_namespace(drill_namespace: &str, drill_name: &str) -> String {
    let digest = crate::names::digest8(format!("{drill_namespace}/{drill_name}").as_bytes());
    // A drill's name is a DNS subdomain: its dots are not allowed in a label.
    let name: String = drill_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(63 - DEFAULT_BUBBLE_PREFIX.len() - digest.len() - 2)
        .collect();
    let name = name.trim_matches('-');
    if name.is_empty() {
        format!("{DEFAULT_BUBBLE_PREFIX}-{digest}")
    } else {
        format!("{DEFAULT_BUBBLE_PREFIX}-{name}-{digest}")
    }
}

/// What a drill clones.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailoverScope {
    /// One PersistentVolumeClaim's volume.
    Volume,
    /// Every member of a consistency group, from one group generation.
    Group,
}

/// The life of a drill.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum FailoverPhase {
    /// Not looked at yet.
    #[default]
    Pending,
    /// Resolving the source and the recovery point, cloning, placing.
    Provisioning,
    /// Every clone is bound to its claim in the bubble namespace.
    Ready,
    /// The drill stopped; `status.message` says why. Deleting it still tears it down.
    Failed,
    /// Deleted; the clones and bubble objects are being removed.
    TearingDown,
}

state_enum! {
    /// Every step of a drill.
    pub enum FailoverStep {
        ResolvingSource,
        ResolvingPoint,
        Cloning,
        Placing,
        Releasing,
    }
}

simplyblock_statemachine::action_enum! {
    /// The two stages of a drill: bringing it up, and tearing it down once deleted.
    pub enum FailoverStage {
        Drill,
        Teardown,
    }
}

/// A step's budget (the reference controller's step timeout).
pub const STEP_DEADLINE: Duration = Duration::from_secs(15 * 60);

const DRILL: GraphDef<'static, FailoverStep> = GraphDef::new(
    FailoverStep::ResolvingSource,
    &[
        StateDef::new(FailoverStep::ResolvingSource)
            .to(&[FailoverStep::ResolvingPoint])
            .deadline(STEP_DEADLINE),
        StateDef::new(FailoverStep::ResolvingPoint)
            .to(&[FailoverStep::Cloning])
            .deadline(STEP_DEADLINE),
        // Back to ResolvingPoint when retention removed the point before it was cloned.
        StateDef::new(FailoverStep::Cloning)
            .to(&[FailoverStep::Placing, FailoverStep::ResolvingPoint])
            .deadline(STEP_DEADLINE),
        StateDef::new(FailoverStep::Placing).deadline(STEP_DEADLINE),
    ],
);

const TEARDOWN: GraphDef<'static, FailoverStep> = GraphDef::new(
    FailoverStep::Releasing,
    &[StateDef::new(FailoverStep::Releasing).deadline(STEP_DEADLINE)],
);

/// The step graphs of a drill.
pub static GRAPHS: LazyLock<MultiGraph<FailoverStage, FailoverStep>> = LazyLock::new(|| {
    MultiGraph::new(&[
        (FailoverStage::Drill, DRILL),
        (FailoverStage::Teardown, TEARDOWN),
    ])
    .expect("the TestFailover graphs are valid")
});

fn step_schema(_: &mut SchemaGenerator) -> Schema {
    StepSnapshot::schema_for_steps(&GRAPHS.declared_state_names())
}

/// The progress of a drill.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TestFailoverStatus {
    /// Pending, Provisioning, Ready, Failed or TearingDown.
    #[serde(default)]
    pub phase: FailoverPhase,
    /// The current step and its deadline.
    #[serde(default, skip_serializing_if = "StepSnapshot::is_empty")]
    #[schemars(schema_with = "step_schema")]
    pub step: StepSnapshot,
    /// Why the phase is what it is, in one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// One entry per source volume: what it was cloned from and into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["sourceRef"]))]
    pub clones: Vec<CloneStatus>,
    /// The drill's findings, once Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<FailoverReport>,
    /// When the drill started provisioning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When every clone was bound in the bubble.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_at: Option<Time>,
    /// When the drill reached Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// Ready (the drill's bubble is up and verified), Progressing (setting up or tearing down) and Degraded (the drill failed). `kubectl wait --for=condition=Ready` waits for the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// One source volume of a drill and its clone.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CloneStatus {
    /// The source: the claim's name (scope Volume) or the member volume's id (scope Group).
    pub source_ref: String,
    /// The source volume's CSI handle, `cluster:pool:volume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_handle: Option<String>,
    /// The recovery point: the control plane's id of the snapshot cloned.
    #[serde(
        default,
        rename = "snapshotID",
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    /// Whether the drill took that snapshot itself (and so deletes it on teardown).
    #[serde(default)]
    pub snapshot_taken: bool,
    /// The control plane's id of the clone.
    #[serde(default, rename = "cloneID", skip_serializing_if = "Option::is_none")]
    pub clone_id: Option<String>,
    /// The claim bound to the clone in the bubble namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_name: Option<String>,
    /// The clone's size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,
    /// The source volume's CSI attributes, without the keys that name the source itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_volume_context: Option<std::collections::BTreeMap<String, String>>,
    /// The source volume's filesystem type; the clone's PersistentVolume carries it.
    #[serde(
        default,
        rename = "sourceFSType",
        skip_serializing_if = "Option::is_none"
    )]
    pub source_fs_type: Option<String>,
    /// The source volume's mode (Filesystem or Block); the clone's claim carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_volume_mode: Option<String>,
}

/// What a Ready drill found.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct FailoverReport {
    /// The cluster the clones were placed on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bubble_cluster: Option<String>,
    /// The snapshot (or group generation) the clones were made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_point: Option<String>,
    /// When that recovery point was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_point_time: Option<Time>,
    /// Its age when the drill became Ready, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_point_age_seconds: Option<i64>,
    /// Whether the source was untouched by the drill (its volume handle unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invariants_held: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_drill_gets_its_own_bubble_namespace_fit_for_a_label() {
        let a = default_bubble_namespace("dr", "drill");
        assert!(a.starts_with("bubble-drill-"), "{a}");
        assert_ne!(a, default_bubble_namespace("dr", "drill-2"));
        assert_ne!(a, default_bubble_namespace("other", "drill"));
        let long = default_bubble_namespace("dr", &format!("x.{}", "y".repeat(250)));
        assert!(long.len() <= 63, "{long}");
        assert!(
            long.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !long.ends_with('-'),
            "{long}"
        );
    }

    #[test]
    fn the_step_list_is_the_graphs() {
        assert_eq!(
            GRAPHS.declared_state_names(),
            [
                "ResolvingSource",
                "ResolvingPoint",
                "Cloning",
                "Placing",
                "Releasing"
            ]
        );
    }
}

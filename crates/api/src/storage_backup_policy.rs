//! StorageBackupPolicy (`sbp`): backups on a schedule for the claims a selector picks.
//!
//! The control plane keeps the policy (its schedule, how many versions and how old) and
//! attaches it to volumes; the operator creates it, attaches the volume of every claim the
//! selector matches as claims come and go, and detaches those that stop matching. The
//! control plane cannot change a policy, so its limits are fixed at creation.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The finalizer that holds a policy until its claims are detached and the control plane's
/// policy is deleted.
pub const BACKUP_POLICY_FINALIZER: &str = "storage.simplyblock.io/storagebackuppolicy-finalizer";

/// The tiers of a schedule: `<interval>,<keep>` separated by spaces.
pub const SCHEDULE_PATTERN: &str = r"^([1-9]\d*[mhdw],[1-9]\d*)( +[1-9]\d*[mhdw],[1-9]\d*)*$";
/// An age: a positive number and a unit (minutes, hours, days, weeks).
pub const AGE_PATTERN: &str = r"^[1-9]\d*[mhdw]$";

/// Backups of the claims `claimSelector` picks, on a schedule, kept by count and age.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "StorageBackupPolicy",
    plural = "storagebackuppolicies",
    namespaced,
    status = "StorageBackupPolicyStatus",
    shortname = "sbp",
    category = "simplyblock",
    doc = "Backups of the claims a selector picks, taken on a schedule into the cluster's backup store and kept by count and age.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterRef"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.schedule"),
    printcolumn(
        name = "Claims",
        type_ = "integer",
        json_path = ".status.attachedClaimCount"
    ),
    printcolumn(
        name = "LastBackup",
        type_ = "date",
        json_path = ".status.lastBackupAt"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.schedule) || (has(self.maxVersions) && self.maxVersions > 0) || has(self.maxAge)").message(
    "set at least one of schedule, maxVersions (above 0) or maxAge: the control plane refuses a policy that neither takes nor limits backups"
))]
pub struct StorageBackupPolicySpec {
    /// The StorageCluster, in this namespace, whose control plane keeps the policy and
    /// whose backup store (`spec.backup`) holds the backups. Immutable.
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.clusterRef is immutable: a policy lives in one cluster's control plane; create another policy for another cluster"
    ))]
    pub cluster_ref: String,

    /// The PersistentVolumeClaims the policy covers, in the namespaces
    /// `namespaceSelector` picks. Absent selects nothing; `{}` selects every claim.
    /// Claims join and leave as their labels change; a claim that leaves keeps the
    /// backups already taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_selector: Option<LabelSelector>,

    /// The namespaces whose claims `claimSelector` picks from, as a NetworkPolicy's peer
    /// reads it: absent, this policy's namespace only; `{}`, every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,

    /// When backups are taken and how many of each age are kept: tiers
    /// `<interval>,<keep>` with intervals in m, h, d or w, e.g. `15m,4 1h,24 1d,7` (a
    /// backup every 15 minutes; four of the last hour, 24 of the last day, seven of the
    /// last week). Immutable: the control plane cannot change a policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SCHEDULE_PATTERN))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.schedule is immutable: the control plane cannot change a policy; create another policy"
    ))]
    pub schedule: Option<String>,

    /// The most backups kept of a claim; past it the oldest is merged into the next. 0
    /// sets no limit. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.maxVersions is immutable: the control plane cannot change a policy; create another policy"
    ))]
    pub max_versions: Option<i32>,

    /// The oldest a backup may grow before it is merged into the next, e.g. `7d`.
    /// Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = AGE_PATTERN))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.maxAge is immutable: the control plane cannot change a policy; create another policy"
    ))]
    pub max_age: Option<String>,
}

/// Whether the policy is in force.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BackupPolicyPhase {
    /// Waiting on the cluster, or on claims not yet attached.
    #[default]
    Pending,
    /// The control plane keeps the policy and every eligible claim is attached.
    Active,
    /// The control plane refused the policy.
    Failed,
}

/// The state of the policy.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageBackupPolicyStatus {
    /// Pending, Active or Failed.
    #[serde(default)]
    pub phase: BackupPolicyPhase,
    /// The control plane's cluster UUID the policy lives in.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "clusterID")]
    pub cluster_id: Option<String>,
    /// The control plane's id of the policy.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "policyID")]
    pub policy_id: Option<String>,
    /// The claims whose volumes the policy is attached to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attached_claims: Vec<AttachedClaim>,
    /// How many claims are attached (a column).
    #[serde(default)]
    pub attached_claim_count: i32,
    /// When the newest backup of an attached claim completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup_at: Option<Time>,
    /// Why the phase is what it is, in one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready (the policy is in force on the control plane) and Degraded (it could not be applied). `kubectl wait --for=condition=Ready` waits for the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A claim whose volume the policy is attached to.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AttachedClaim {
    /// The claim's name.
    pub name: String,
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's PersistentVolume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_name: Option<String>,
    /// The control plane's volume id.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "lvolID")]
    pub lvol_id: Option<String>,
    /// When the policy was attached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attached_at: Option<Time>,
}

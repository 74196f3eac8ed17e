//! StorageSiteDeployment (`sbsd`): a request, on the hub, to deploy simplyblock on one
//! managed cluster (a site). It discovers the site's workers, shows the drafted deployment
//! for review, applies the sizing and the approval to the draft, and reports the site's
//! StorageCluster until it is Online.
//!
//! Deleting the request leaves everything on the site as it is: the draft, the cluster
//! and its nodes belong to the site once they exist.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cluster_deployment_config::DeploymentPhase;
use crate::common::Stripe;

/// The finalizer that deletes the request's work on the site with its resources orphaned.
pub const FINALIZER: &str = "storage.simplyblock.io/storagesitedeployment-release";

/// The condition types, in the order a deployment reaches them.
pub const DELIVERED: &str = "Delivered";
pub const DISCOVERED: &str = "Discovered";
pub const APPROVED: &str = "Approved";
pub const READY: &str = "Ready";

/// Deploy simplyblock on one managed cluster: discover, draft, approve, deploy.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "StorageSiteDeployment",
    plural = "storagesitedeployments",
    namespaced,
    status = "StorageSiteDeploymentStatus",
    shortname = "sbsd",
    category = "simplyblock",
    doc = "A request on the hub to deploy simplyblock on one managed cluster: its workers are discovered, the drafted deployment is shown for review, and once approved the site's StorageCluster is deployed and reported.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.cluster"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Approved", type_ = "boolean", json_path = ".spec.approved"),
    printcolumn(
        name = "Storage",
        type_ = "string",
        json_path = ".status.storageCluster.phase"
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
#[x_kube(validation = Rule::new("!has(oldSelf.approved) || !oldSelf.approved || self.approved").message(
    "approval cannot be withdrawn: the site is being deployed; delete the request to stop following it (the site keeps what was deployed)"
))]
pub struct StorageSiteDeploymentSpec {
    /// The managed cluster (site) to deploy on. Immutable.
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.cluster is immutable: a request deploys one site; create another request for another site"
    ))]
    pub cluster: String,

    /// The namespace on the site that the operator runs in and the draft is written to.
    #[serde(default = "default_site_namespace")]
    #[schemars(length(min = 1, max = 63))]
    pub site_namespace: String,

    /// The name of the ClusterDeploymentConfig the discovery drafts on the site. Immutable.
    #[serde(default = "default_draft_name")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.draftName is immutable: the site's draft keeps its name"
    ))]
    pub draft_name: String,

    /// Which workers the discovery inspects; a changed discovery is a new run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discover: Option<SiteDiscover>,

    /// The sizing applied to the draft.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizing: Option<SiteSizing>,

    /// The review gate: the draft is approved, and the site deployed, once this is true.
    /// It cannot be set back.
    #[serde(default)]
    pub approved: bool,
}

fn default_site_namespace() -> String {
    "simplyblock".into()
}

fn default_draft_name() -> String {
    "site-draft".into()
}

/// The workers of the site the discovery inspects.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SiteDiscover {
    /// Also consider control-plane nodes (for combined or single-node clusters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_control_plane_nodes: Option<bool>,
    /// The workers to inspect, by node name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128), inner(length(max = 253)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub workers: Vec<String>,
    /// Inspect the workers with these labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
}

/// The cluster the site's draft creates.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SiteSizing {
    /// The StorageCluster's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub name: Option<String>,
    /// vCPUs given to SPDK on each storage node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub vcpu_count: Option<i32>,
    /// The smallest huge-page allocation per node, e.g. `100G` or `96Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub min_huge_pages_size: Option<String>,
    /// The most NVMe-oF subsystems per storage node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_subsystem_count: Option<i32>,
    /// Format every listed device before a storage node takes it. Destructive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_drive_format: Option<bool>,
    /// Give every storage node a journal device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_journal_device: Option<bool>,
    /// The erasure-coding scheme.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stripe: Option<Stripe>,
}

/// Where the deployment of the site has got to.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SitePhase {
    /// Not looked at yet.
    #[default]
    Pending,
    /// The discovery runs, or drafted no nodes yet.
    Discovering,
    /// The draft has nodes and waits for approval.
    Drafted,
    /// Approved; the site's draft is not Expanded or its StorageCluster not Online yet.
    Deploying,
    /// The site's draft is Expanded and its StorageCluster Online.
    Online,
    /// The site refused the request, the draft failed, or the deployed cluster is
    /// unavailable; status.message says which.
    Failed,
}

impl SitePhase {
    /// Every phase, in the order of the declaration.
    pub const ALL: [SitePhase; 6] = [
        SitePhase::Pending,
        SitePhase::Discovering,
        SitePhase::Drafted,
        SitePhase::Deploying,
        SitePhase::Online,
        SitePhase::Failed,
    ];
}

/// What the site reports.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageSiteDeploymentStatus {
    #[serde(default)]
    pub phase: SitePhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The work that carries the request to the site.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_name: Option<String>,
    /// The site's draft, as read back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft: Option<SiteDraft>,
    /// The site's StorageCluster, as read back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_cluster: Option<SiteStorageCluster>,
    /// Delivered, Discovered, Approved and Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The site's ClusterDeploymentConfig.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SiteDraft {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<DeploymentPhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default)]
    pub approved: bool,
    /// The name of the StorageCluster the draft creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The names of its node sets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_sets: Vec<String>,
    /// The StorageNodes it created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_refs: Vec<String>,
}

/// The site's StorageCluster.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SiteStorageCluster {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub nodes: Vec<SiteNode>,
}

/// One storage node of the site.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SiteNode {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
}

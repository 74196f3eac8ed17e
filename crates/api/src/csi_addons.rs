//! The csi-addons kinds (`replication.storage.openshift.io` and `csiaddons.openshift.io`,
//! v1alpha1): the objects the csi-addons controller manager reconciles into the calls its
//! sidecar makes to the CSI driver, and that Ramen writes to fail volumes over and back.
//!
//! Not this project's API: their schemas, written here from the kinds' documented fields,
//! are what the chart installs beside the manager (`csiAddons.controllerManager.enabled`),
//! so they are generated into a template of their own ([`CHART_TEMPLATE`]), not into the
//! chart's `crds/`. The manager watches every kind, so all of them are installed, also the
//! ones simplyblock's driver does not serve (space reclaim, fencing, key rotation).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    LocalObjectReference, ObjectReference, TypedLocalObjectReference,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The group of the replication kinds.
pub const REPLICATION_GROUP: &str = "replication.storage.openshift.io";
/// The group of the manager's other kinds.
pub const CSIADDONS_GROUP: &str = "csiaddons.openshift.io";
/// The chart template the CRDs are generated into, rendered only with
/// `csiAddons.controllerManager.enabled`.
pub const CHART_TEMPLATE: &str =
    "deploy/charts/simplyblock-operator/templates/csi-addons-crds.yaml";

// replication.storage.openshift.io

/// What a VolumeReplication or VolumeGroupReplication asks of its volume.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReplicationState {
    /// Replicate from this site: enable replication and promote the volume here.
    Primary,
    /// Receive from the peer: demote the volume here.
    Secondary,
    /// Bring this site's copy back in line with the peer's primary.
    Resync,
}

/// A VolumeReplication: one claim's replication role at this site.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "replication.storage.openshift.io",
    version = "v1alpha1",
    kind = "VolumeReplication",
    plural = "volumereplications",
    namespaced,
    status = "VolumeReplicationStatus",
    shortname = "vr",
    doc = "The replication role (primary or secondary) of one PersistentVolumeClaim's volume at this site.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "VolumeReplicationClass",
        type_ = "string",
        json_path = ".spec.volumeReplicationClass"
    ),
    printcolumn(
        name = "SourceKind",
        type_ = "string",
        json_path = ".spec.dataSource.kind"
    ),
    printcolumn(
        name = "SourceName",
        type_ = "string",
        json_path = ".spec.dataSource.name"
    ),
    printcolumn(
        name = "DesiredState",
        type_ = "string",
        json_path = ".spec.replicationState"
    ),
    printcolumn(name = "CurrentState", type_ = "string", json_path = ".status.state")
)]
#[serde(rename_all = "camelCase")]
pub struct VolumeReplicationSpec {
    /// The VolumeReplicationClass whose provisioner and parameters replicate the volume.
    #[x_kube(validation = Rule::new("self == oldSelf").message("volumeReplicationClass is immutable"))]
    pub volume_replication_class: String,
    /// The operation asked for: `primary`, `secondary` or `resync`.
    pub replication_state: ReplicationState,
    /// The object whose volume is replicated: a PersistentVolumeClaim (or a
    /// VolumeGroupReplication, for the one the manager makes for a group).
    #[x_kube(validation = Rule::new("self == oldSelf").message("dataSource is immutable"))]
    pub data_source: TypedLocalObjectReference,
    /// Resync the volume by itself when it is secondary and out of sync.
    #[serde(default)]
    pub auto_resync: bool,
    /// An existing replication's id, for a volume whose replication was made elsewhere.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub replication_handle: String,
}

/// What the manager last saw of a replication.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeReplicationStatus {
    /// `Primary`, `Secondary` or `Unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Completed, Degraded, Resyncing, Validated, Replicating, DestinationInfoAvailable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_completion_time: Option<Time>,
    /// When the peer last held a complete copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_bytes: Option<i64>,
    /// A duration, such as `1m30s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_duration: Option<String>,
    /// The volume's id at the peer, when the driver reports one that differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_volume_id: Option<String>,
}

/// A provisioner and its parameters, as a replication class names them.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationClassSpec {
    /// The CSI driver that replicates (for simplyblock, `csi.simplyblock.io`).
    #[x_kube(validation = Rule::new("self == oldSelf").message("provisioner is immutable"))]
    pub provisioner: String,
    /// Passed to the driver with every call; keys under `replication.storage.openshift.io/`
    /// are the manager's own (secrets) and are not passed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("parameters are immutable"))]
    pub parameters: BTreeMap<String, String>,
}

/// A VolumeReplicationClass: how a driver replicates volumes (cluster-scoped).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "replication.storage.openshift.io",
    version = "v1alpha1",
    kind = "VolumeReplicationClass",
    plural = "volumereplicationclasses",
    shortname = "vrc",
    doc = "How a CSI driver replicates volumes: its name and the parameters of every replication call.",
    printcolumn(
        name = "Provisioner",
        type_ = "string",
        json_path = ".spec.provisioner"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct VolumeReplicationClassSpec {
    #[serde(flatten)]
    pub class: ReplicationClassSpec,
}

/// A VolumeGroupReplication: the replication role of a group of claims, replicated
/// together (crash-consistent across them).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "replication.storage.openshift.io",
    version = "v1alpha1",
    kind = "VolumeGroupReplication",
    plural = "volumegroupreplications",
    namespaced,
    status = "VolumeGroupReplicationStatus",
    shortname = "vgr",
    doc = "The replication role (primary or secondary) of a group of PersistentVolumeClaims, replicated together.",
    printcolumn(
        name = "VolumeGroupReplicationClass",
        type_ = "string",
        json_path = ".spec.volumeGroupReplicationClassName"
    ),
    printcolumn(
        name = "VolumeGroupReplicationContent",
        type_ = "string",
        json_path = ".spec.volumeGroupReplicationContentName"
    ),
    printcolumn(
        name = "DesiredState",
        type_ = "string",
        json_path = ".spec.replicationState"
    ),
    printcolumn(name = "CurrentState", type_ = "string", json_path = ".status.state"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct VolumeGroupReplicationSpec {
    /// The VolumeGroupReplicationClass that forms and replicates the group.
    #[x_kube(validation = Rule::new("self == oldSelf").message("volumeGroupReplicationClassName is immutable"))]
    pub volume_group_replication_class_name: String,
    /// The VolumeReplicationClass of the VolumeReplication the manager makes for the group.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("volumeReplicationClassName is immutable"))]
    pub volume_replication_class_name: String,
    /// The VolumeReplication the manager made for the group.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("volumeReplicationName is immutable"))]
    pub volume_replication_name: String,
    /// The VolumeGroupReplicationContent bound to the group.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("volumeGroupReplicationContentName is immutable"))]
    pub volume_group_replication_content_name: String,
    /// Which claims form the group.
    #[x_kube(validation = Rule::new("self == oldSelf").message("source is immutable"))]
    pub source: VolumeGroupReplicationSource,
    /// The operation asked for: `primary`, `secondary` or `resync`.
    pub replication_state: ReplicationState,
    /// Resync the group by itself when it is secondary and out of sync.
    #[serde(default)]
    pub auto_resync: bool,
    /// Reconciled by a controller of the storage vendor's instead of the manager.
    /// simplyblock's groups are the manager's (`false`).
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == oldSelf").message("external is immutable"))]
    pub external: bool,
}

/// The claims of a group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeGroupReplicationSource {
    /// The labels of the claims, in the group's namespace, that form the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// What the manager last saw of a group's replication.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeGroupReplicationStatus {
    #[serde(flatten)]
    pub replication: VolumeReplicationStatus,
    /// The claims in the group (at most 100).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub persistent_volume_claims_ref_list: Vec<LocalObjectReference>,
}

/// A VolumeGroupReplicationClass: how a driver replicates groups (cluster-scoped).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "replication.storage.openshift.io",
    version = "v1alpha1",
    kind = "VolumeGroupReplicationClass",
    plural = "volumegroupreplicationclasses",
    shortname = "vgrc",
    doc = "How a CSI driver forms and replicates volume groups: its name and the parameters of every group call.",
    printcolumn(
        name = "Provisioner",
        type_ = "string",
        json_path = ".spec.provisioner"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct VolumeGroupReplicationClassSpec {
    #[serde(flatten)]
    pub class: ReplicationClassSpec,
}

/// A VolumeGroupReplicationContent: the driver's group behind a VolumeGroupReplication
/// (cluster-scoped, as a PersistentVolume is to its claim).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "replication.storage.openshift.io",
    version = "v1alpha1",
    kind = "VolumeGroupReplicationContent",
    plural = "volumegroupreplicationcontents",
    status = "VolumeGroupReplicationContentStatus",
    shortname = "vgrcontent",
    doc = "The CSI driver's volume group behind a VolumeGroupReplication.",
    printcolumn(
        name = "VolumeGroupReplicationClass",
        type_ = "string",
        json_path = ".spec.volumeGroupReplicationClassName"
    ),
    printcolumn(
        name = "VolumeGroupReplication",
        type_ = "string",
        json_path = ".spec.volumeGroupReplicationRef.name"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct VolumeGroupReplicationContentSpec {
    /// The VolumeGroupReplication bound to this content; empty for one made in advance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("has(self.name) && has(self.__namespace__) && has(self.uid)").message(
        "volumeGroupReplicationRef.name, volumeGroupReplicationRef.namespace and volumeGroupReplicationRef.uid must be set if volumeGroupReplicationRef is defined"
    ))]
    pub volume_group_replication_ref: Option<ObjectReference>,
    /// The driver's id of the group (for simplyblock, `cg:<cluster>:<group>`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub volume_group_replication_handle: String,
    /// The CSI driver of the group.
    pub provisioner: String,
    /// The class the group was made with.
    pub volume_group_replication_class_name: String,
    /// What the driver said of the group when it made it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("volumeGroupAttributes is immutable"))]
    pub volume_group_attributes: BTreeMap<String, String>,
    /// The volumes of the group.
    pub source: VolumeGroupReplicationContentSource,
}

/// The volumes of a group, by their CSI handles.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeGroupReplicationContentSource {
    pub volume_handles: Vec<String>,
}

/// The volumes of a group as the manager last saw them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeGroupReplicationContentStatus {
    /// The PersistentVolumes of the group (deprecated for the mapping list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub persistent_volume_ref_list: Vec<LocalObjectReference>,
    /// Each PersistentVolume of the group with its handle here and at the peer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub persistent_volume_mapping_list: Vec<PersistentVolumeMapping>,
    /// The group's id at the peer, as the driver reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_volume_group_id: Option<String>,
}

/// A PersistentVolume of a group and its handles.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PersistentVolumeMapping {
    pub name: String,
    pub volume_handle: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_volume_handle: Option<String>,
}

// csiaddons.openshift.io

/// A CSIAddonsNode: a csi-addons sidecar announcing where the manager reaches it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "csiaddons.openshift.io",
    version = "v1alpha1",
    kind = "CSIAddonsNode",
    plural = "csiaddonsnodes",
    namespaced,
    status = "CsiAddonsNodeStatus",
    doc = "A csi-addons sidecar of a CSI driver's pod, and the endpoint the controller manager reaches it at.",
    printcolumn(
        name = "Namespace",
        type_ = "string",
        json_path = ".metadata.namespace"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "DriverName", type_ = "string", json_path = ".spec.driver.name"),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".spec.driver.endpoint"
    ),
    printcolumn(name = "NodeID", type_ = "string", json_path = ".spec.driver.nodeID")
)]
pub struct CSIAddonsNodeSpec {
    pub driver: CsiAddonsNodeDriver,
}

/// The driver a sidecar serves.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CsiAddonsNodeDriver {
    /// The CSI driver's name.
    #[x_kube(validation = Rule::new("self == oldSelf").message("name is immutable"))]
    pub name: String,
    /// Where the sidecar listens, such as `pod://<pod>.<namespace>:9070`.
    pub endpoint: String,
    /// The node (or the controller) the sidecar runs for.
    #[serde(rename = "nodeID")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("nodeID is immutable"))]
    pub node_id: String,
}

/// What the manager found at a sidecar.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CsiAddonsNodeStatus {
    /// `Connected` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The capabilities the sidecar advertised.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_fence_client_status: Vec<NetworkFenceClientStatus>,
}

/// The fencing clients of a NetworkFenceClass, as a sidecar reported them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct NetworkFenceClientStatus {
    #[serde(rename = "networkFenceClassName")]
    pub network_fence_class_name: String,
    #[serde(rename = "ClientDetails")]
    pub client_details: Vec<ClientDetail>,
}

/// One fencing client.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ClientDetail {
    pub id: String,
    pub cidrs: Vec<String>,
}

/// The claim a job acts on.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobTarget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("persistentVolumeClaim is immutable"))]
    pub persistent_volume_claim: Option<String>,
}

/// The retries and time limits of a one-off volume job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeJobSpec {
    /// The claim to act on.
    pub target: JobTarget,
    /// Retries before the job fails.
    #[serde(rename = "backOffLimit", default = "default_back_off")]
    #[schemars(range(min = 0, max = 60))]
    pub back_off_limit: i32,
    /// Seconds within which retries may start.
    #[serde(default = "default_retry_deadline")]
    #[schemars(range(min = 0, max = 1800))]
    pub retry_deadline_seconds: i64,
    /// Seconds a single call may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60))]
    pub timeout: Option<i64>,
}

fn default_back_off() -> i32 {
    6
}

fn default_retry_deadline() -> i64 {
    600
}

/// How a one-off volume job ended.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeJobStatus {
    /// `Succeeded` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
}

/// How a ReclaimSpaceJob ended: a volume job's status and the space given back.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimSpaceJobStatus {
    #[serde(flatten)]
    pub job: VolumeJobStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaimed_space: Option<Quantity>,
}

/// A ReclaimSpaceJob: give a volume's unused blocks back to the storage, once.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "csiaddons.openshift.io",
    version = "v1alpha1",
    kind = "ReclaimSpaceJob",
    plural = "reclaimspacejobs",
    namespaced,
    status = "ReclaimSpaceJobStatus",
    doc = "Gives a claim's unused blocks back to the storage, once.",
    printcolumn(
        name = "Namespace",
        type_ = "string",
        json_path = ".metadata.namespace"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "Retries", type_ = "integer", json_path = ".status.retries"),
    printcolumn(name = "Result", type_ = "string", json_path = ".status.result")
)]
pub struct ReclaimSpaceJobSpec {
    #[serde(flatten)]
    pub job: VolumeJobSpec,
}

/// An EncryptionKeyRotationJob: rotate a volume's encryption key, once.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "csiaddons.openshift.io",
    version = "v1alpha1",
    kind = "EncryptionKeyRotationJob",
    plural = "encryptionkeyrotationjobs",
    namespaced,
    status = "VolumeJobStatus",
    doc = "Rotates the encryption key of a claim's volume, once.",
    printcolumn(
        name = "Namespace",
        type_ = "string",
        json_path = ".metadata.namespace"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "Retries", type_ = "integer", json_path = ".status.retries"),
    printcolumn(name = "Result", type_ = "string", json_path = ".status.result")
)]
pub struct EncryptionKeyRotationJobSpec {
    #[serde(flatten)]
    pub job: VolumeJobSpec,
}

/// Labels and annotations of the jobs a schedule creates.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct JobTemplateMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The job a schedule creates each time.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct JobTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JobTemplateMetadata>,
    pub spec: VolumeJobSpec,
}

/// What a schedule does when a run is due while the last one still runs.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ConcurrencyPolicy {
    /// Skip the new run.
    #[default]
    Forbid,
    /// Cancel the running one and start the new one.
    Replace,
}

/// A schedule of volume jobs, as a CronJob's.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CronJobSpec {
    /// When to run, in cron syntax.
    #[schemars(regex(pattern = r".+"))]
    pub schedule: String,
    /// Seconds after a missed time within which the run may still start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting_deadline_seconds: Option<i64>,
    #[serde(default)]
    pub concurrency_policy: ConcurrencyPolicy,
    /// Start no new runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// The job each run creates.
    pub job_template: JobTemplate,
    /// Finished jobs kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 60))]
    pub successful_jobs_history_limit: Option<i32>,
    /// Failed jobs kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 60))]
    pub failed_jobs_history_limit: Option<i32>,
}

/// Where a schedule stands.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CronJobStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<ObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<Time>,
}

/// A ReclaimSpaceCronJob: reclaim a volume's space on a schedule.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "csiaddons.openshift.io",
    version = "v1alpha1",
    kind = "ReclaimSpaceCronJob",
    plural = "reclaimspacecronjobs",
    namespaced,
    status = "CronJobStatus",
    doc = "Gives a claim's unused blocks back to the storage on a schedule.",
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.schedule"),
    printcolumn(name = "Suspend", type_ = "boolean", json_path = ".spec.suspend"),
    printcolumn(name = "Active", type_ = "string", json_path = ".status.active.name"),
    printcolumn(
        name = "LastSchedule",
        type_ = "date",
        json_path = ".status.lastScheduleTime"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct ReclaimSpaceCronJobSpec {
    #[serde(flatten)]
    pub schedule: CronJobSpec,
}

/// An EncryptionKeyRotationCronJob: rotate a volume's key on a schedule.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "csiaddons.openshift.io",
    version = "v1alpha1",
    kind = "EncryptionKeyRotationCronJob",
    plural = "encryptionkeyrotationcronjobs",
    namespaced,
    status = "CronJobStatus",
    doc = "Rotates the encryption key of a claim's volume on a schedule.",
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.schedule"),
    printcolumn(name = "Suspend", type_ = "boolean", json_path = ".spec.suspend"),
    printcolumn(name = "Active", type_ = "string", json_path = ".status.active.name"),
    printcolumn(
        name = "LastSchedule",
        type_ = "date",
        json_path = ".status.lastScheduleTime"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct EncryptionKeyRotationCronJobSpec {
    #[serde(flatten)]
    pub schedule: CronJobSpec,
}

/// Whether clients are cut off.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum FenceState {
    #[default]
    Fenced,
    Unfenced,
}

/// A secret by name and namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SecretRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A NetworkFence: cut clients (by address) off a driver's storage, or let them back.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "csiaddons.openshift.io",
    version = "v1alpha1",
    kind = "NetworkFence",
    plural = "networkfences",
    status = "NetworkFenceStatus",
    doc = "Cuts clients, by address range, off a CSI driver's storage, or lets them back.",
    printcolumn(name = "Driver", type_ = "string", json_path = ".spec.driver"),
    printcolumn(name = "Cidrs", type_ = "string", json_path = ".spec.cidrs"),
    printcolumn(name = "FenceState", type_ = "string", json_path = ".spec.fenceState"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "Result", type_ = "string", json_path = ".status.result")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.driver) || has(self.networkFenceClassName)").message(
    "one of driver or networkFenceClassName must be present"
))]
#[x_kube(validation = Rule::new("has(self.networkFenceClassName) || has(self.secret)").message(
    "secret must be present when networkFenceClassName is not specified"
))]
pub struct NetworkFenceSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("networkFenceClassName is immutable"))]
    pub network_fence_class_name: Option<String>,
    /// Deprecated for `networkFenceClassName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("driver is immutable"))]
    pub driver: Option<String>,
    pub fence_state: FenceState,
    /// The clients' address ranges.
    pub cidrs: Vec<String>,
    /// Deprecated for `networkFenceClassName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretRef>,
    /// Deprecated for `networkFenceClassName`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("parameters are immutable"))]
    pub parameters: BTreeMap<String, String>,
}

/// How a fence ended.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct NetworkFenceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A NetworkFenceClass: how a driver fences (cluster-scoped).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "csiaddons.openshift.io",
    version = "v1alpha1",
    kind = "NetworkFenceClass",
    plural = "networkfenceclasses",
    doc = "How a CSI driver fences clients: its name and the parameters of every fencing call."
)]
pub struct NetworkFenceClassSpec {
    #[serde(flatten)]
    pub class: ReplicationClassSpec,
}

/// Every csi-addons CRD the controller manager needs, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        VolumeReplication::crd(),
        VolumeReplicationClass::crd(),
        VolumeGroupReplication::crd(),
        VolumeGroupReplicationClass::crd(),
        VolumeGroupReplicationContent::crd(),
        CSIAddonsNode::crd(),
        ReclaimSpaceJob::crd(),
        ReclaimSpaceCronJob::crd(),
        EncryptionKeyRotationJob::crd(),
        EncryptionKeyRotationCronJob::crd(),
        NetworkFence::crd(),
        NetworkFenceClass::crd(),
    ]
}

/// The chart template holding [`crds`]: rendered only with the value on, and kept when a
/// release goes or the value is turned off (`helm.sh/resource-policy: keep`), since deleting
/// a CRD deletes every replication of its kind.
pub fn chart_template() -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::from(
        "# Generated by `cargo run -p simplyblock-api --bin crds`; do not edit.\n\
         # The csi-addons kinds the controller manager watches, with it.\n\
         {{- if .Values.csiAddons.controllerManager.enabled }}\n",
    );
    for crd in crds() {
        let mut crd = crd;
        crd.metadata.annotations = Some(BTreeMap::from([(
            "helm.sh/resource-policy".to_owned(),
            "keep".to_owned(),
        )]));
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    out.push_str("{{- end }}\n");
    Ok(out)
}

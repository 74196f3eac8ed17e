//! StorageCluster (`stc`): one simplyblock backend cluster, its layout, its policy, and
//! what the control plane reports back about it.

use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::{LocalObjectReference, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use simplyblock_statemachine::{Graph, GraphDef, StateDef, StepSnapshot, state_enum};

use crate::common::{self, OpsPhase, Stripe};
use crate::storage_cluster_ops::ClusterAction;

/// The desired state of one simplyblock backend cluster.
///
/// The layout fields (stripe, fabric, ports, checksums, device class, KMS, failure domains)
/// describe data on disk and on the wire, so they are fixed once the cluster exists.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "StorageCluster",
    namespaced,
    status = "StorageClusterStatus",
    shortname = "stc",
    category = "simplyblock",
    doc = "One simplyblock storage cluster: a distributed NVMe/TCP block store built from storage nodes on the workers.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Step", type_ = "string", json_path = ".status.step.state"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.status"),
    printcolumn(name = "EC", type_ = "string", json_path = ".status.erasureCodingScheme"),
    printcolumn(name = "FTT", type_ = "integer", json_path = ".status.maxFaultTolerance", priority = 1),
    printcolumn(name = "UUID", type_ = "string", json_path = ".status.uuid"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("size(self.metadata.name) <= 63").message(
        "a StorageCluster name is at most 63 characters, because it is written into label values; choose a shorter name"
    ),
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(oldSelf.kms) || self.kms == oldSelf.kms").message("kms is immutable once set"))]
#[x_kube(validation = Rule::new(
    "!(has(self.enableAtomicity4K) && self.enableAtomicity4K) || (has(self.enableChecksumValidation) && self.enableChecksumValidation)"
).message("enableAtomicity4K requires enableChecksumValidation to be true"))]
#[x_kube(validation = Rule::new("!has(oldSelf.stripe) || has(self.stripe)").message("stripe cannot be removed once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.fabricType) || has(self.fabricType)").message("fabricType cannot be removed once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.enableFailureDomains) || has(self.enableFailureDomains)").message("enableFailureDomains cannot be removed once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.enableNodeAffinity) || has(self.enableNodeAffinity)").message("enableNodeAffinity cannot be removed once set"))]
#[x_kube(validation = Rule::new("has(oldSelf.enableSyncReplication) == has(self.enableSyncReplication)").message(
    "enableSyncReplication is fixed when the cluster is created: the control plane takes it only then; create a new cluster to change it"
))]
pub struct StorageClusterSpec {
    /// The most NVMe-oF subsystems each storage node serves (10 to 75). It sizes huge
    /// pages; nodes keep no copy, so a change reaches each node at its next restart.
    #[schemars(range(min = 10, max = 75))]
    pub max_subsystem_count: i32,

    /// vCPUs given to SPDK on each storage node (at least 4: one core beyond the budget
    /// stays with the system, and a 2-vCPU layout has no NVMe-oF poller). Copied into each
    /// StorageNode when it is created.
    #[schemars(range(min = 4))]
    pub vcpu_count: i32,

    /// The smallest huge-page allocation per storage node, e.g. `100G` or `1T` (powers of
    /// 1000, as the control plane reads them; `96Gi` for powers of 1024); a bare number
    /// means gigabytes. A floor: a node takes more when its devices need more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub min_huge_pages_size: Option<String>,

    /// The erasure-coding layout of every volume. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("stripe is immutable: it describes how data is laid out on disk"))]
    pub stripe: Option<Stripe>,

    /// The storage fabric volumes are served over. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("fabricType is immutable"))]
    pub fabric_type: Option<String>,

    /// First NVMe-oF port on each storage node. Immutable.
    #[serde(default = "default_nvmf_base_port")]
    #[schemars(range(min = 1024, max = 65535))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("nvmfBasePort is immutable"))]
    pub nvmf_base_port: i32,

    /// First SPDK RPC port on each storage node. Immutable.
    #[serde(default = "default_rpc_base_port")]
    #[schemars(range(min = 1024, max = 65535))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("rpcBasePort is immutable"))]
    pub rpc_base_port: i32,

    /// Port of the storage-node API on each worker. Immutable.
    #[serde(default = "default_snode_api_port")]
    #[schemars(range(min = 1024, max = 65535))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("snodeApiPort is immutable"))]
    pub snode_api_port: i32,

    /// Place stripes across failure domains (each node's `failureDomain`). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("enableFailureDomains is immutable"))]
    pub enable_failure_domains: Option<bool>,

    /// Data-plane node affinity: serve reads from the node local to the client where
    /// possible. Not Kubernetes pod affinity. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("enableNodeAffinity is immutable"))]
    pub enable_node_affinity: Option<bool>,

    /// Synchronous replication between the sites of the cluster's nodes (each
    /// StorageNode's `config.site`): a volume is mirrored to a second site and can be
    /// moved there with the CSI replication calls of a class whose method is `sync`. Set
    /// when the cluster is created; immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "enableSyncReplication is immutable: the control plane takes it only when the cluster is created"
    ))]
    pub enable_sync_replication: Option<bool>,

    /// Inline checksums on every block. Immutable.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == oldSelf").message("enableChecksumValidation is immutable"))]
    pub enable_checksum_validation: bool,

    /// Atomic 4K writes; requires enableChecksumValidation. Immutable.
    #[serde(default, rename = "enableAtomicity4K")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("enableAtomicity4K is immutable"))]
    pub enable_atomicity_4k: bool,

    /// The class of backend storage the cluster is built from: NVMe devices by PCI address
    /// or logical block devices by path (needs control plane 26.4 or newer). Immutable.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == oldSelf").message("deviceClass is immutable"))]
    pub device_class: DeviceClass,

    /// Where volume encryption keys are kept. Can be set once, never changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms: Option<Kms>,

    /// The interface clients use for the data path (`nvme connect --host-iface`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_data_ifname: Option<String>,

    /// Capacity levels that raise a warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning_threshold: Option<CapacityThreshold>,

    /// Capacity levels that raise a critical alarm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critical_threshold: Option<CapacityThreshold>,

    /// How many workers a rolling operation restarts at once. The effective value is the
    /// smaller of this and `status.maxFaultTolerance`.
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub max_concurrent_worker_restarts: i32,

    /// How many finished operations (Succeeded, Failed or Aborted) are kept per target:
    /// StorageClusterOps of this cluster, and the operations of every other Ops kind in
    /// this namespace per node, device, pool, volume, backup or control plane (the
    /// smallest limit wins when the namespace holds several clusters). Beyond that the
    /// operator deletes the oldest, by completion time; an operation that has not finished
    /// is never deleted. The newest five StorageClusterOps stay listed in
    /// `status.recentOperations` after their objects are gone. 0 keeps none.
    #[serde(default = "default_ops_history_limit")]
    #[schemars(range(min = 0))]
    pub ops_history_limit: i32,

    /// How long a finished operation of any Ops kind in this namespace is kept, e.g.
    /// `168h` (the default, 7 days): older ones are deleted even within
    /// `opsHistoryLimit`. An operation that has not finished is never deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops_retention: Option<common::Duration>,

    /// The S3 location backups are written to, and its credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupStore>,

    /// Reserved: the operator does not yet ask the control plane to realign data after
    /// volume moves, so there is nothing to turn off. Meant to turn off that realignment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_data_realignment: Option<bool>,

    /// Reserved: the operator has no automatic rebalancer yet, so this changes nothing.
    /// Meant to turn on latency-driven automatic volume placement (see volumeAutoPlacement).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_volume_auto_placement: Option<bool>,

    /// Reserved: the operator neither runs migration Jobs nor requests realignment after
    /// volume moves yet, so these settings change nothing. Meant to tune how volume
    /// migration and the realignment after it behave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_migration_settings: Option<VolumeMigrationSettings>,

    /// Reserved: the operator has no automatic rebalancer yet, so this tuning changes
    /// nothing. Meant to tune automatic volume placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_auto_placement: Option<VolumeAutoPlacement>,

    /// The Kubernetes workload every storage node of this cluster runs as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_nodes: Option<StorageNodesSpec>,
}

fn default_nvmf_base_port() -> i32 {
    4420
}
fn default_rpc_base_port() -> i32 {
    8080
}
fn default_snode_api_port() -> i32 {
    50001
}
fn one() -> i32 {
    1
}

/// The default of `spec.opsHistoryLimit`.
pub const DEFAULT_OPS_HISTORY_LIMIT: i32 = 20;

/// How long a finished operation is kept when `spec.opsRetention` is unset: 7 days.
pub const DEFAULT_OPS_RETENTION: &str = "168h";

fn default_ops_history_limit() -> i32 {
    DEFAULT_OPS_HISTORY_LIMIT
}

/// The class of backend storage a cluster is built from.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum DeviceClass {
    /// NVMe devices, named by PCI address.
    #[default]
    NVMe,
    /// Logical block devices, named by path.
    LogicalBlock,
}

impl DeviceClass {
    /// The control plane's word for the class.
    pub fn control_plane_name(self) -> &'static str {
        match self {
            DeviceClass::NVMe => "nvme",
            DeviceClass::LogicalBlock => "lblk",
        }
    }
}

/// Where the cluster keeps volume encryption keys: one member per provider.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
pub struct Kms {
    /// HashiCorp Vault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vault: Option<VaultKms>,
}

/// A HashiCorp Vault key store.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
pub struct VaultKms {
    /// The Vault endpoint, e.g. `https://vault.example.com:8200`; an external address.
    #[schemars(regex(pattern = r"^https?://[a-zA-Z0-9.-]+(:[0-9]{1,5})?(/.*)?$"))]
    pub endpoint: String,
}

/// One alarm level, for used and for provisioned capacity.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CapacityThreshold {
    /// Used-capacity threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<i64>,
    /// Provisioned-capacity threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned_capacity: Option<i64>,
}

/// An S3 location for backups. The whole block may change: which backups exist as objects
/// follows the location.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupStore {
    /// The S3 endpoint, e.g. `https://s3.example.com`.
    #[schemars(regex(pattern = r"^https?://[a-zA-Z0-9.-]+(:[0-9]{1,5})?(/.*)?$"))]
    pub endpoint: String,
    /// The bucket backups are written to and read from.
    pub bucket: String,
    /// A key prefix inside the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// The bucket's region, for endpoints that do not imply one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The Secret holding `access_key_id` and `secret_access_key`.
    pub credentials_secret_ref: LocalObjectReference,
}

/// How volume migration and the realignment after it behave; migration itself cannot be
/// turned off, since drains and rebalances are volume moves.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMigrationSettings {
    /// Image of the migration and benchmark Jobs (carries nvme-cli, fio and jq), from a
    /// simplyblock registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::control_plane::IMAGE_PATTERN))]
    pub rebalancer_image: Option<String>,
    /// Tuning of the realignment after volume moves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_realignment: Option<DataRealignment>,
}

/// When a realignment is requested. The annotation
/// `storage.simplyblock.io/trigger-realignment` bypasses both settings.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DataRealignment {
    /// The least time between two realignment requests.
    #[serde(default = "ten_minutes")]
    pub interval: common::Duration,
    /// How many volume moves accumulate before a realignment is requested.
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub min_moves: i32,
}

fn ten_minutes() -> common::Duration {
    common::Duration("10m".into())
}

/// Tuning of latency-driven volume placement. The API server fills in every default named
/// here, so a stored object shows the values in force.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeAutoPlacement {
    /// Dry run: evaluate and report, but create no migrations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_migration: Option<bool>,
    /// How often load is evaluated. Default 60s.
    #[serde(default = "sixty_seconds")]
    pub evaluation_interval: common::Duration,
    /// Latency deviation from baseline, in percent, that makes a node a source. Default 80.
    #[serde(default = "eighty")]
    pub imbalance_threshold: i32,
    /// How many points of deviation below the source a target must be. Default 20.
    #[serde(default = "twenty")]
    pub min_hot_cold_difference_pct: i32,
    /// Seconds a migrated volume is left alone. Default 600.
    #[serde(default = "six_hundred")]
    pub default_cool_down_seconds: i32,
    /// Most volumes moved in one cycle. Default 10.
    #[serde(default = "ten")]
    pub max_volume_migrations_per_cycle: i32,
    /// How many of the most loaded nodes are considered as sources. Default 3.
    #[serde(default = "three")]
    pub storage_node_candidate_count: i32,
    /// Where node I/O load is read from. Default Prometheus.
    #[serde(default = "prometheus")]
    pub metrics_backend: MetricsBackend,
    /// The Prometheus to query when metricsBackend is Prometheus.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "prometheusURL"
    )]
    pub prometheus_url: Option<String>,
    /// Measure NVMe-oF latency with fio Jobs (needs a rebalancer image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_latency_benchmark: Option<bool>,
    /// How often the latency Jobs run. Default 5m.
    #[serde(default = "five_minutes")]
    pub latency_benchmark_interval: common::Duration,
    /// How the per-node latency baseline is derived. Default RollingWindow.
    #[serde(default = "rolling_window")]
    pub baseline_strategy: BaselineStrategy,
    /// The look-back of the rolling-window baseline. Default 6h.
    #[serde(default = "six_hours")]
    pub baseline_window: common::Duration,
    /// What to do with a node that has too few samples. Default PartialWindow.
    #[serde(default = "partial_window")]
    pub baseline_cold_start: BaselineColdStart,
    /// Samples below which a node counts as under-sampled. Default 6.
    #[serde(default = "six")]
    pub baseline_min_samples: i32,
    /// Outlier threshold k of the Hampel filter. Default 3.0.
    #[serde(default = "three_f", rename = "baselineOutlierK")]
    pub baseline_outlier_k: f64,
    /// Weight of per-volume IOPS in the I/O score. Default 1.0.
    #[serde(default = "one_f")]
    pub iops_weight: f64,
    /// Weight of per-volume MB/s in the I/O score. Default 0.1.
    #[serde(default = "one_tenth")]
    pub throughput_weight: f64,
}

impl Default for VolumeAutoPlacement {
    fn default() -> Self {
        Self {
            disable_migration: None,
            evaluation_interval: sixty_seconds(),
            imbalance_threshold: eighty(),
            min_hot_cold_difference_pct: twenty(),
            default_cool_down_seconds: six_hundred(),
            max_volume_migrations_per_cycle: ten(),
            storage_node_candidate_count: three(),
            metrics_backend: prometheus(),
            prometheus_url: None,
            enable_latency_benchmark: None,
            latency_benchmark_interval: five_minutes(),
            baseline_strategy: rolling_window(),
            baseline_window: six_hours(),
            baseline_cold_start: partial_window(),
            baseline_min_samples: six(),
            baseline_outlier_k: three_f(),
            iops_weight: one_f(),
            throughput_weight: one_tenth(),
        }
    }
}

// The defaults of volumeAutoPlacement, as the reference gives them.
fn sixty_seconds() -> common::Duration {
    common::Duration("60s".into())
}
fn five_minutes() -> common::Duration {
    common::Duration("5m".into())
}
fn six_hours() -> common::Duration {
    common::Duration("6h".into())
}
fn three() -> i32 {
    3
}
fn six() -> i32 {
    6
}
fn ten() -> i32 {
    10
}
fn twenty() -> i32 {
    20
}
fn eighty() -> i32 {
    80
}
fn six_hundred() -> i32 {
    600
}
fn three_f() -> f64 {
    3.0
}
fn one_f() -> f64 {
    1.0
}
fn one_tenth() -> f64 {
    0.1
}
fn prometheus() -> MetricsBackend {
    MetricsBackend::Prometheus
}
fn rolling_window() -> BaselineStrategy {
    BaselineStrategy::RollingWindow
}
fn partial_window() -> BaselineColdStart {
    BaselineColdStart::PartialWindow
}

/// Where the rebalancer reads node I/O load from.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsBackend {
    ControlPlane,
    Prometheus,
    /// Every node reports the same load: balances capacity and volume counts only.
    Uniform,
}

/// How the latency baseline is derived.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaselineStrategy {
    /// A one-shot fio measurement on the fresh cluster.
    Benchmark,
    /// A rolling window of recent samples, outliers rejected.
    RollingWindow,
}

/// What happens to a node with too few baseline samples.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaselineColdStart {
    /// Leave the node out of the cycle until it has enough samples.
    Defer,
    /// Use whatever samples exist.
    PartialWindow,
}

/// The workload every storage node of the cluster runs as: one DaemonSet, its Services,
/// certificates and per-node configuration. Everything here is uniform across the cluster.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(oldSelf.mgmtInterface) || has(self.mgmtInterface)").message("mgmtInterface cannot be removed once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.dataInterfaces) || has(self.dataInterfaces)").message("dataInterfaces cannot be removed once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.enableJournalDevice) || has(self.enableJournalDevice)").message("enableJournalDevice cannot be removed once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.enableFormat4K) || has(self.enableFormat4K)").message("enableFormat4K cannot be removed once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.enableBlockFormat) || has(self.enableBlockFormat)").message("enableBlockFormat cannot be removed once set"))]
pub struct StorageNodesSpec {
    /// The storage-node image; defaults to the ControlPlane's image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::control_plane::OPTIONAL_IMAGE_PATTERN))]
    pub image: Option<String>,

    /// When the image is pulled. Always by default: released images are moving tags.
    #[serde(default)]
    pub image_pull_policy: PullPolicy,

    /// Secrets (in this namespace) the kubelet pulls the storage nodes' image with; when
    /// empty, the operator's own (the chart's `imagePullSecrets`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,

    /// The storage nodes' PriorityClass; `system-node-critical` when unset (an evicted
    /// storage node takes its volumes' paths with it), none when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,

    /// The management interface storage nodes bind. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("mgmtInterface is immutable"))]
    pub mgmt_interface: Option<String>,

    /// The data-plane interfaces. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("dataInterfaces is immutable"))]
    pub data_interfaces: Option<Vec<String>>,

    /// NUMA sockets to run storage nodes on; empty means socket 0 alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sockets_to_use: Vec<String>,

    /// Storage nodes per NUMA socket. Immutable.
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("nodesPerSocket is immutable"))]
    pub nodes_per_socket: i32,

    /// How many workers may be in the node-add process at once, counted by worker.
    /// Workers hosting FoundationDB are always added one at a time.
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub node_provisioning_budget: i32,

    /// Dedicate the smallest device of each node to the journal. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("enableJournalDevice is immutable"))]
    pub enable_journal_device: Option<bool>,

    /// Format NVMe devices to a 4K block size at node add. Destructive. Immutable.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "enableFormat4K"
    )]
    #[x_kube(validation = Rule::new("self == oldSelf").message("enableFormat4K is immutable"))]
    pub enable_format_4k: Option<bool>,

    /// Reserved: the control plane's node add has no parameter that wipes logical block
    /// devices, so this changes nothing; a partitioned device stays refused by discovery.
    /// Meant to wipe partition tables and signatures before node add. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("enableBlockFormat is immutable"))]
    pub enable_block_format: Option<bool>,

    /// Topology-aware CPU assignment: the storage node configures it at start
    /// (`CPU_TOPOLOGY_ENABLED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_cpu_topology: Option<bool>,

    /// CPUs held back from SPDK for the system.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "reservedSystemCPU"
    )]
    pub reserved_system_cpu: Option<String>,

    /// Let the storage node apply the kubelet configuration it needs; true when unset,
    /// false tells it to leave the kubelet alone (`SKIP_KUBELET_CONFIGURATION`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_kubelet_configuration: Option<bool>,

    /// The workers run Ubuntu: the storage node installs the NVMe-oF kernel modules
    /// Ubuntu's base install lacks before it starts (`UBUNTU_HOST`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ubuntu_host: Option<bool>,

    /// Present when the cluster runs on OpenShift; the storage node is told so
    /// (`OPENSHIFT_CLUSTER`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openshift: Option<OpenShift>,

    /// Tolerations of the storage-node pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,

    /// Requests and limits of the storage-node container; unset enforces none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_resources: Option<ResourceRequirements>,

    /// Requests and limits of the storage-node pods' init container, which prepares the
    /// worker (`node_configure.py`: huge pages, cores, devices); unset enforces none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_container_resources: Option<ResourceRequirements>,
}

/// A container image pull policy.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PullPolicy {
    #[default]
    Always,
    Never,
    IfNotPresent,
}

/// What an OpenShift deployment states beyond every other.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OpenShift {
    /// Reserved: the operator does not create a MachineConfigPool for the storage nodes
    /// yet, so this changes nothing. Meant to name a machine-config role the storage nodes'
    /// own pool inherits besides `worker`.
    #[serde(default = "worker")]
    #[schemars(length(max = 253), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub machine_config_pool: String,
}

fn worker() -> String {
    "worker".into()
}

/// Where the operator has got to with a cluster: the first two phases are its own creation
/// path, the rest its reading of the control plane's status.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ClusterPhase {
    #[default]
    Pending,
    Creating,
    Provisioning,
    Activating,
    Online,
    Rebalancing,
    Degraded,
    Unavailable,
    Suspended,
}

impl ClusterPhase {
    /// Every phase, in the order of the declaration.
    pub const ALL: [ClusterPhase; 9] = [
        ClusterPhase::Pending,
        ClusterPhase::Creating,
        ClusterPhase::Provisioning,
        ClusterPhase::Activating,
        ClusterPhase::Online,
        ClusterPhase::Rebalancing,
        ClusterPhase::Degraded,
        ClusterPhase::Unavailable,
        ClusterPhase::Suspended,
    ];

    /// The phase for what the control plane reports: its status string and whether it
    /// says a rebalance is running.
    pub fn from_control_plane(status: Option<&str>, rebalancing: bool) -> ClusterPhase {
        match status {
            None | Some("") => ClusterPhase::Pending,
            Some("active" | "degraded" | "read_only") if rebalancing => ClusterPhase::Rebalancing,
            Some("in_creation" | "in_expansion" | "unready") => ClusterPhase::Provisioning,
            Some("in_activation") => ClusterPhase::Activating,
            Some("active") => ClusterPhase::Online,
            Some("degraded" | "read_only") => ClusterPhase::Degraded,
            Some("suspended") => ClusterPhase::Suspended,
            // Shut down, or a status this operator does not know: not serving.
            Some("inactive") | Some(_) => ClusterPhase::Unavailable,
        }
    }
}

state_enum! {
    /// Steps of the cluster's creation path.
    pub enum CreationStep {
        Claiming,
        CheckingControlPlane,
        ResolvingConfig,
        Creating,
        Adopting,
        Persisting,
    }
}

const STEP: Duration = Duration::from_secs(10 * 60);

const CREATION: GraphDef<'static, CreationStep> = GraphDef::new(
    CreationStep::Claiming,
    &[
        StateDef::new(CreationStep::Claiming)
            .to(&[CreationStep::CheckingControlPlane])
            .deadline(STEP),
        StateDef::new(CreationStep::CheckingControlPlane)
            .to(&[CreationStep::ResolvingConfig, CreationStep::Adopting])
            .deadline(STEP),
        StateDef::new(CreationStep::ResolvingConfig)
            .to(&[CreationStep::Creating])
            .deadline(STEP),
        StateDef::new(CreationStep::Creating)
            .to(&[CreationStep::Persisting, CreationStep::Adopting])
            .deadline(STEP),
        StateDef::new(CreationStep::Adopting)
            .to(&[CreationStep::Persisting])
            .deadline(STEP),
        StateDef::new(CreationStep::Persisting).deadline(STEP),
    ],
);

/// The creation machine: each step has ten minutes.
pub static CREATION_GRAPH: LazyLock<Graph<CreationStep>> =
    LazyLock::new(|| Graph::new(CREATION).expect("the StorageCluster creation graph is valid"));

fn creation_step_schema(_: &mut SchemaGenerator) -> Schema {
    StepSnapshot::schema_for_steps(&CREATION_GRAPH.declared_state_names())
}

/// What the operator and the control plane report about the cluster.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageClusterStatus {
    /// The operator's reading of the cluster.
    #[serde(default)]
    pub phase: ClusterPhase,
    /// The step of the creation machine while the cluster is being created.
    #[serde(default, skip_serializing_if = "StepSnapshot::is_empty")]
    #[schemars(schema_with = "creation_step_schema")]
    pub step: StepSnapshot,
    /// The control plane's id of the cluster; empty until it has been created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The cluster's name in the control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    /// The cluster's NVMe qualified name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nqn: Option<String>,
    /// The stripe as the control plane reports it, `<ndcs>x<npcs>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub erasure_coding_scheme: Option<String>,
    /// The control plane's own status word (`active`, `degraded`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Whether the control plane reports the cluster configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configured: Option<bool>,
    /// Whether the control plane reports a rebalance running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalancing: Option<bool>,
    /// How many node failures the cluster tolerates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_fault_tolerance: Option<i32>,
    /// The effective number of workers restarted at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_worker_restarts: Option<i32>,
    /// Reserved: not written yet (see spec.disableDataRealignment). Meant to grow by one
    /// per volume move; a realignment is due while realignedGeneration is below it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_move_generation: Option<i64>,
    /// Reserved: not written yet. Meant for the volumeMoveGeneration the last
    /// realignment covered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realigned_generation: Option<i64>,
    /// Reserved: not written yet. Meant for when the last realignment was requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_data_realignment_at: Option<Time>,
    /// The control plane's unfinished tasks, in its order (at most 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub tasks: Vec<ClusterTask>,
    /// Node-add slots in use: a mutex taken with an optimistic-lock patch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub provisioning_slots: Vec<ProvisioningSlot>,
    /// The StorageClusterOps that holds the cluster's lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_ops_ref: Option<String>,
    /// The cluster's last finished operations, newest first (at most 5). An entry stays
    /// after its StorageClusterOps is deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 5))]
    pub recent_operations: Vec<OperationRecord>,
    /// Reserved: not written yet, as there is no automatic rebalancer (see
    /// spec.enableVolumeAutoPlacement). Meant for what it measured last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalancing_metrics: Option<RebalancingMetrics>,
    /// Why the phase is what it is, in one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready (the cluster is active), Progressing (being created, activated, expanded, rebalancing or updated) and Degraded (the control plane reports it degraded, suspended or failed). `kubectl wait --for=condition=Ready` waits for the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// One unfinished control-plane task.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
pub struct ClusterTask {
    /// The control plane's task id; CancelTask names a task by it.
    pub id: String,
    /// The kind of task, in the control plane's words.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub type_: Option<String>,
    /// `new`, `running` or `suspended`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// How often the control plane has restarted the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub retry: Option<i32>,
}

/// One finished StorageClusterOps, as the cluster remembers it.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OperationRecord {
    /// The name of the StorageClusterOps.
    pub name: String,
    /// What it did.
    pub action: ClusterAction,
    /// How it ended: Succeeded, Failed or Aborted.
    pub phase: OpsPhase,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// Its last status message: what it did, or why it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A worker in the node-add process.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningSlot {
    /// The worker being added.
    pub worker: String,
    /// The StorageNode that took the slot.
    pub node: String,
    /// When it was taken.
    pub taken_at: Time,
}

/// The rebalancer's last evaluation.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RebalancingMetrics {
    /// The mean over the storage nodes of their latency deviation from baseline, in percent.
    pub avg_deviation_pct: f64,
    /// The largest latency deviation from baseline of any storage node, in percent.
    pub max_deviation_pct: f64,
    /// The control-plane id of the storage node with the largest deviation: the first
    /// node volumes are moved away from.
    #[serde(rename = "hottestNodeUUID")]
    pub hottest_node_uuid: String,
    /// The control-plane id of the storage node with the smallest deviation: the first
    /// candidate to receive moved volumes.
    #[serde(rename = "coolestNodeUUID")]
    pub coolest_node_uuid: String,
    /// How far apart the hottest and the coolest node are, in percent; volumes move when
    /// it passes volumeAutoPlacement.imbalanceThreshold.
    pub imbalance_percent: f64,
    /// When the rebalancer last evaluated the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_evaluated_at: Option<Time>,
    /// When the rebalancer last started a volume migration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_migration_at: Option<Time>,
    /// Each storage node's load in the last evaluation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_metrics: Vec<NodeLoad>,
}

/// One node's latency deviation in the last cycle.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeLoad {
    /// The storage node's control-plane id.
    #[serde(rename = "nodeUUID")]
    pub node_uuid: String,
    /// Its latency deviation from its baseline, in percent; positive is slower.
    pub latency_deviation_pct: f64,
    /// How many volumes it serves as primary.
    pub volume_count: i32,
    /// When these figures were measured.
    pub last_updated: Time,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_map_reads_the_control_plane() {
        use ClusterPhase::*;
        let cases = [
            (None, false, Pending),
            (Some("in_creation"), false, Provisioning),
            (Some("in_expansion"), false, Provisioning),
            (Some("unready"), false, Provisioning),
            (Some("in_activation"), false, Activating),
            (Some("active"), false, Online),
            (Some("active"), true, Rebalancing),
            (Some("degraded"), true, Rebalancing),
            (Some("read_only"), true, Rebalancing),
            (Some("degraded"), false, Degraded),
            (Some("read_only"), false, Degraded),
            (Some("suspended"), false, Suspended),
            // A rebalance never makes a non-serving cluster look serving.
            (Some("suspended"), true, Suspended),
            (Some("inactive"), false, Unavailable),
            (Some("inactive"), true, Unavailable),
            (Some("in_shutdown"), false, Unavailable),
        ];
        for (status, rebalancing, phase) in cases {
            assert_eq!(
                ClusterPhase::from_control_plane(status, rebalancing),
                phase,
                "{status:?} rebalancing={rebalancing}"
            );
        }
    }

    #[test]
    fn every_phase_is_listed_once() {
        // No wildcard: a new phase does not compile until it has a place in ALL.
        let index = |p: ClusterPhase| match p {
            ClusterPhase::Pending => 0,
            ClusterPhase::Creating => 1,
            ClusterPhase::Provisioning => 2,
            ClusterPhase::Activating => 3,
            ClusterPhase::Online => 4,
            ClusterPhase::Rebalancing => 5,
            ClusterPhase::Degraded => 6,
            ClusterPhase::Unavailable => 7,
            ClusterPhase::Suspended => 8,
        };
        for (i, p) in ClusterPhase::ALL.iter().enumerate() {
            assert_eq!(index(*p), i, "{p:?}");
        }
    }

    #[test]
    fn creation_graph_matches_the_design() {
        use CreationStep::*;
        use simplyblock_statemachine::State;
        let g = &*CREATION_GRAPH;
        assert_eq!(g.initial(), Claiming);
        assert!(g.allows(CheckingControlPlane, Adopting));
        assert!(g.allows(Creating, Adopting));
        assert!(!g.allows(ResolvingConfig, Persisting));
        assert!(g.is_terminal(Persisting));
        for s in CreationStep::ALL {
            assert_eq!(g.deadline(*s), Some(STEP), "{s}");
        }
    }
}

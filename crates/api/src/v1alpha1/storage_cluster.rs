//! StorageCluster at v1alpha1: one backend cluster with its layout, its Vault and S3
//! settings, volume migration and automatic placement, and what the backend reports back.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The desired state of one backend cluster (v1alpha1).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha1",
    kind = "StorageCluster",
    namespaced,
    status = "StorageClusterStatus",
    doc = "One simplyblock storage cluster (v1alpha1, as the Go operator stored it; v1alpha2 is the current version).",
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.status",
        description = "Backend-reported cluster lifecycle status"
    ),
    printcolumn(
        name = "UUID",
        type_ = "string",
        json_path = ".status.uuid",
        description = "Backend cluster UUID"
    ),
    printcolumn(
        name = "Configured",
        type_ = "boolean",
        json_path = ".status.configured",
        description = "Whether initial cluster setup has completed"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(oldSelf.fabricType) || self.fabricType == oldSelf.fabricType").message("fabricType is immutable once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.hashicorpVaultSettings) || self.hashicorpVaultSettings == oldSelf.hashicorpVaultSettings").message("hashicorpVaultSettings is immutable once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.stripe) || self.stripe == oldSelf.stripe").message("stripe is immutable once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.nvmfBasePort) || self.nvmfBasePort == oldSelf.nvmfBasePort").message("nvmfBasePort is immutable once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.rpcBasePort) || self.rpcBasePort == oldSelf.rpcBasePort").message("rpcBasePort is immutable once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.snodeApiPort) || self.snodeApiPort == oldSelf.snodeApiPort").message("snodeApiPort is immutable once set"))]
pub struct StorageClusterSpec {
    /// Node-affinity placement of storage components.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_node_affinity: Option<bool>,
    /// The erasure-coding chunk counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stripe: Option<StripeSpec>,
    /// The storage fabric type.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fabric_type: String,
    /// The client data network interface.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub client_data_ifname: String,
    /// The base NVMe-oF service port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvmf_base_port: Option<i32>,
    /// The base RPC service port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpc_base_port: Option<i32>,
    /// The storage-node API port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snode_api_port: Option<i32>,
    /// How many workers may be drained and restarted at once; 1 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_concurrent_worker_restarts: Option<i32>,
    /// The most NVMe-oF subsystems per storage node.
    #[schemars(range(min = 10, max = 75))]
    pub max_subsystem_count: i32,
    /// The huge-page allocation per storage node, e.g. `100G` (a floor, despite the name).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub max_huge_pages_size: String,
    /// vCPUs given to SPDK on each storage node.
    #[schemars(range(min = 6))]
    pub vcpu_count: i32,
    /// Warning-level capacity thresholds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning_threshold: Option<CapacityThresholdSpec>,
    /// Critical-level capacity thresholds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critical_threshold: Option<CapacityThresholdSpec>,
    /// Backup to S3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupSpec>,
    /// The Vault endpoint keys are stored in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hashicorp_vault_settings: Option<HashicorpVaultSettings>,
    /// Volume migration of this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_migration_settings: Option<VolumeMigrationSettings>,
    /// Automatic, latency-driven volume rebalancing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_auto_placement: Option<VolumeAutoPlacementSettings>,
    /// Failure-domain mode: every storage node declares a failure-domain group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_failure_domains: Option<bool>,
}

/// Capacity thresholds.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CapacityThresholdSpec {
    /// The absolute capacity threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<i32>,
    /// The provisioned-capacity threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned_capacity: Option<i32>,
}

/// The erasure-coding layout.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StripeSpec {
    /// Data chunks per stripe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_chunks: Option<i32>,
    /// Parity chunks per stripe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parity_chunks: Option<i32>,
}

/// Cluster-level volume migration settings.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMigrationSettings {
    /// Reserved: retired (migration cannot be turned off: drains and rebalances are volume
    /// moves); v1alpha1 keeps it for the round trip and nothing acts on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Image of the migration and latency Jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalancer_image: Option<String>,
    /// The realignment after volume moves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_realignment: Option<DataRealignmentSettings>,
}

/// The control-plane data realignment after volume moves.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DataRealignmentSettings {
    /// Whether realignment runs; true when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// The least time between two realignment requests; 10m when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Volume moves that accumulate before a realignment; 1 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_moves: Option<i32>,
}

/// Automatic, latency-driven volume rebalancing; the defaults named are the operator's.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct VolumeAutoPlacementSettings {
    /// Rebalancing on; false when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Migrations are created (false is a dry run); true when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_enabled: Option<bool>,
    /// How often load is evaluated; 60s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation_interval: Option<String>,
    /// Latency deviation, in percent, that makes a node a source; 80.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imbalance_threshold: Option<i32>,
    /// Points of deviation a target must be below the source; 20.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_hot_cold_difference_pct: Option<i32>,
    /// Seconds a migrated volume is left alone; 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_cool_down_seconds: Option<i32>,
    /// Most volumes moved per cycle; 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_volume_migrations_per_cycle: Option<i32>,
    /// Most loaded nodes considered as sources; 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_node_candidate_count: Option<i32>,
    /// Where I/O metrics come from; prometheus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["controlplane", "prometheus", "uniform"]))]
    pub metrics_backend: Option<String>,
    /// The Prometheus queried when metricsBackend is prometheus.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "prometheusURL"
    )]
    pub prometheus_url: Option<String>,
    /// fio-based NVMe-oF latency measurement; false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_benchmark_enabled: Option<bool>,
    /// How often the latency Jobs run; 5m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_benchmark_interval: Option<String>,
    /// Weight of per-volume IOPS in the I/O score; 1.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops_weight: Option<f64>,
    /// Weight of per-volume MB/s in the I/O score; 0.1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput_weight: Option<f64>,
}

/// The Secret of the backup credentials.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
pub struct BackupCredentialsSecretRef {
    /// The Secret's name, in the cluster's namespace.
    pub name: String,
}

/// The HashiCorp Vault endpoint.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
pub struct HashicorpVaultSettings {
    /// The Vault endpoint, e.g. `https://vault.example.com:8200`.
    #[serde(default, skip_serializing_if = "String::is_empty", rename = "baseURL")]
    #[schemars(regex(pattern = r"^https?://[a-zA-Z0-9.-]+(:[0-9]{1,5})?(/.*)?$"))]
    pub base_url: String,
}

/// Backup to S3.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// The S3 endpoint.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(regex(pattern = r"^https?://[a-zA-Z0-9.-]+(:[0-9]{1,5})?(/.*)?$"))]
    pub local_endpoint: String,
    /// Reserved: retired; v1alpha1 keeps it for the round trip and nothing acts on it. Snapshot backups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_backups: Option<bool>,
    /// Reserved: retired; v1alpha1 keeps it for the round trip and nothing acts on it. Compressed backups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with_compression: Option<bool>,
    /// Reserved: retired; v1alpha1 keeps it for the round trip and nothing acts on it. A secondary backup target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secondary_target: Option<i32>,
    /// Reserved: retired; v1alpha1 keeps it for the round trip and nothing acts on it. Local testing mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_testing: Option<bool>,
    /// The Secret holding `access_key_id` and `secret_access_key`.
    pub credentials_secret_ref: BackupCredentialsSecretRef,
}

/// The observed state of a cluster (v1alpha1).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageClusterStatus {
    /// The backend cluster UUID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uuid: String,
    /// `creation` while a creation is in progress.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// The step within the phase; only `creating` is written.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sub_phase: String,
    /// The backend cluster name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_name: String,
    /// Management nodes (never written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mgmt_nodes: Option<i32>,
    /// Storage nodes (never written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_nodes: Option<i32>,
    /// The cluster's NVMe qualified name.
    #[serde(default, skip_serializing_if = "String::is_empty", rename = "nqn")]
    pub nqn: String,
    /// The backend-reported lifecycle status.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// Whether a rebalance is running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalancing: Option<bool>,
    /// Completed volume moves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_move_generation: Option<i64>,
    /// The volumeMoveGeneration the last realignment covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realigned_generation: Option<i64>,
    /// When the last realignment succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_data_realignment_at: Option<Time>,
    /// The active erasure-coding layout, e.g. `2x1`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub erasure_coding_scheme: String,
    /// The last backend update (never written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,
    /// The backend creation time (never written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<Time>,
    /// Whether initial cluster setup completed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub configured: bool,
    /// How many nodes may be offline at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_fault_tolerance: Option<i32>,
    /// The effective number of workers restarted at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_worker_restarts: Option<i32>,
    /// The active StorageClusterOps.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub active_ops_ref: String,
    /// The auto-rebalancer's last evaluation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalancing_metrics: Option<RebalancingMetrics>,
}

/// The auto-rebalancer's last evaluation.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RebalancingMetrics {
    /// The mean latency deviation over the nodes.
    pub avg_deviation_pct: f64,
    /// The highest latency deviation of a node.
    pub max_deviation_pct: f64,
    /// The backend UUID of the node with the highest deviation.
    #[serde(rename = "hottestNodeUUID")]
    pub hottest_node_uuid: String,
    /// The backend UUID of the node with the lowest deviation.
    #[serde(rename = "coolestNodeUUID")]
    pub coolest_node_uuid: String,
    /// How far apart the hottest and the coolest node are, in percent.
    pub imbalance_percent: f64,
    /// When the cluster was last evaluated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_evaluated_at: Option<Time>,
    /// When a migration was last started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_migration_at: Option<Time>,
    /// Each node's load in the last evaluation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_metrics: Vec<NodeLoadMetrics>,
}

/// One node's latency deviation.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeLoadMetrics {
    /// The node's backend UUID.
    #[serde(rename = "nodeUUID")]
    pub node_uuid: String,
    /// Its latency deviation from baseline, in percent.
    pub latency_deviation_pct: f64,
    /// Volumes it serves as primary (a Go `int`: 64 bits wide).
    pub volume_count: i64,
    /// When these figures were measured.
    pub last_updated: Time,
}

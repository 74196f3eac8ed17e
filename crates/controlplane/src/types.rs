//! Wire types of the control plane's `/api/v2`, shaped after its OpenAPI document.
//!
//! Field names follow the wire exactly. Status enums carry an `Unknown` variant so a
//! newer control plane that grows a status does not break decoding of everything else.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $wire:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
        pub enum $name {
            $(#[serde(rename = $wire)] $variant,)+
            /// A value this client does not know.
            #[default]
            #[serde(other, rename = "unknown")]
            Unknown,
        }

        impl $name {
            /// Every known value, `Unknown` last: a table over them cannot skip a new one.
            pub const ALL: &'static [Self] = &[$(Self::$variant,)+ Self::Unknown];

            /// The wire spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $wire,)+
                    Self::Unknown => "unknown",
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

wire_enum!(
    /// `ClusterDTO.status`.
    ClusterStatus {
        Active => "active",
        ReadOnly => "read_only",
        Inactive => "inactive",
        Suspended => "suspended",
        Degraded => "degraded",
        Unready => "unready",
        InActivation => "in_activation",
        InExpansion => "in_expansion",
    }
);

wire_enum!(
    /// `StorageNodeDTO.status`.
    NodeStatus {
        Online => "online",
        Offline => "offline",
        Suspended => "suspended",
        InShutdown => "in_shutdown",
        Removed => "removed",
        InRestart => "in_restart",
        InCreation => "in_creation",
        Unreachable => "unreachable",
        Schedulable => "schedulable",
        Down => "down",
    }
);

wire_enum!(
    /// `DeviceDTO.status` (a free string on the wire; these are the values the model uses).
    DeviceStatus {
        New => "new",
        Online => "online",
        Unavailable => "unavailable",
        Removed => "removed",
        Failed => "failed",
        FailedAndMigrated => "failed_and_migrated",
        ReadOnly => "read_only",
        CannotAllocate => "cannot_allocate",
        JmDev => "JM_DEV",
    }
);

wire_enum!(
    /// `TaskDTO.status`.
    TaskStatus {
        New => "new",
        Running => "running",
        Suspended => "suspended",
        Done => "done",
    }
);

wire_enum!(
    /// `StoragePoolDTO.status`, also used by replication targets and policies.
    ActiveStatus {
        Active => "active",
        Inactive => "inactive",
    }
);

wire_enum!(
    /// `VolumeDTO.status` (a free string on the wire).
    VolumeStatus {
        InCreation => "in_creation",
        Online => "online",
        Offline => "offline",
        InDeletion => "in_deletion",
        Restoring => "restoring",
        Deleted => "deleted",
        RestoreFailed => "restore_failed",
    }
);

wire_enum!(
    /// `SnapshotDTO.status`.
    SnapshotStatus {
        Online => "online",
        Offline => "offline",
        InDeletion => "in_deletion",
        InReplication => "in_replication",
    }
);

wire_enum!(
    /// `BackupDTO.status`: a backup is taken (pending, in progress), kept (completed), or
    /// folded into a newer one of its chain by a policy (merging, merged).
    BackupStatus {
        Pending => "pending",
        InProgress => "in_progress",
        Completed => "completed",
        Failed => "failed",
        Merging => "merging",
        Merged => "merged",
        Deleting => "deleting",
    }
);

wire_enum!(
    /// Replication mode.
    ReplicationMode {
        Failover => "failover",
        Migration => "migration",
    }
);

wire_enum!(
    /// `ReplicationRelationshipDTO.state`.
    ReplicationState {
        Replicating => "replicating",
        CutoverPending => "cutover_pending",
        CutoverDone => "cutover_done",
        FailedOver => "failed_over",
    }
);

wire_enum!(
    /// `ReplicationRelationshipDTO.direction`.
    ReplicationDirection {
        ToTarget => "to_target",
        ToSource => "to_source",
    }
);

wire_enum!(
    /// `FailoverResultDTO.status`.
    FailoverStatus {
        FailedOver => "failed_over",
        Skipped => "skipped",
        Failed => "failed",
    }
);

wire_enum!(
    /// High-availability type of a cluster or volume.
    HaType {
        Single => "single",
        Ha => "ha",
    }
);

/// `CapacityStatDTO`: the latest capacity sample, all zero when none exists.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityStat {
    pub date: i64,
    pub size_total: i64,
    pub size_prov: i64,
    pub size_used: i64,
    pub size_free: i64,
    pub size_util: i64,
}

/// `ClusterDTO`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Cluster {
    pub id: Uuid,
    pub name: Option<String>,
    pub nqn: String,
    pub status: ClusterStatus,
    pub is_re_balancing: bool,
    pub block_size: u32,
    pub distr_ndcs: u32,
    pub distr_npcs: u32,
    pub ha: bool,
    pub utilization_critical: u32,
    pub utilization_warning: u32,
    pub provisioned_capacity_critical: u32,
    pub provisioned_capacity_warning: u32,
    pub node_affinity: bool,
    pub anti_affinity: bool,
    pub enable_failure_domain: bool,
    pub secret: crate::Redacted,
    pub tls_enabled: bool,
    pub max_fault_tolerance: u32,
    pub backup_enabled: bool,
    /// Created for synchronous replication between the sites of its nodes (a newer control
    /// plane; false where the key is absent).
    pub sync_replication: bool,
    pub capacity: CapacityStat,
}

/// `BackupConfigParams` inside a cluster create.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BackupConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_key_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_access_key: Option<crate::Redacted>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_endpoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bucket_name: Option<String>,
    /// Not a control-plane key (it ignores unknown keys): where under the bucket the
    /// cluster's backups go. sbsim honours it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Not a control-plane key either: the region the client signs for (S3's default,
    /// `us-east-1`, when absent). sbsim checks it against the bucket's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

/// `HashicorpVaultSettings` inside a cluster create.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VaultSettings {
    pub base_url: String,
}

fn d_512() -> u32 {
    512
}
fn d_page() -> u64 {
    2_097_152
}
fn d_1() -> u32 {
    1
}
fn d_4096() -> u32 {
    4096
}
fn d_ha() -> HaType {
    HaType::Ha
}
fn d_256() -> u32 {
    256
}
fn d_128() -> u32 {
    128
}
fn d_4() -> u32 {
    4
}
fn d_tcp() -> String {
    "tcp".into()
}
fn d_4420() -> u16 {
    4420
}
fn d_8080() -> u16 {
    8080
}
fn d_50001() -> u16 {
    50001
}
fn d_true() -> bool {
    true
}
fn d_500() -> u32 {
    500
}
fn d_3() -> u32 {
    3
}
fn d_default_ns() -> String {
    "default".into()
}

/// `ClusterParams`: the body of `POST /clusters/`. Defaults are the server's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterCreate {
    #[serde(default)]
    pub name: String,
    #[serde(default = "d_512")]
    pub blk_size: u32,
    #[serde(default = "d_page")]
    pub page_size_in_blocks: u64,
    #[serde(default)]
    pub cap_warn: u32,
    #[serde(default)]
    pub cap_crit: u32,
    #[serde(default)]
    pub prov_cap_warn: u32,
    #[serde(default)]
    pub prov_cap_crit: u32,
    #[serde(default = "d_1")]
    pub distr_ndcs: u32,
    #[serde(default = "d_1")]
    pub distr_npcs: u32,
    #[serde(default = "d_4096")]
    pub distr_bs: u32,
    #[serde(default = "d_4096")]
    pub distr_chunk_bs: u32,
    #[serde(default = "d_ha")]
    pub ha_type: HaType,
    #[serde(default = "d_256")]
    pub qpair_count: u32,
    #[serde(default = "d_128")]
    pub max_queue_size: u32,
    #[serde(default = "d_4")]
    pub inflight_io_threshold: u32,
    #[serde(default)]
    pub enable_node_affinity: bool,
    #[serde(default)]
    pub strict_node_anti_affinity: bool,
    #[serde(default)]
    pub is_single_node: bool,
    #[serde(default = "d_tcp")]
    pub fabric: String,
    #[serde(default)]
    pub cr_name: String,
    #[serde(default)]
    pub cr_namespace: String,
    #[serde(default)]
    pub cr_plural: String,
    #[serde(default)]
    pub client_data_nic: String,
    #[serde(default = "d_4420")]
    pub nvmf_base_port: u16,
    #[serde(default = "d_8080")]
    pub rpc_base_port: u16,
    #[serde(default = "d_50001")]
    pub snode_api_port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_config: Option<BackupConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hashicorp_vault_settings: Option<VaultSettings>,
    #[serde(default)]
    pub enable_failure_domain: bool,
    /// Synchronous replication between the sites of the cluster's nodes (each node's
    /// `site`); fixed at create. A newer control plane's key, left out while false so an
    /// older one sees the body it knows.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sync_replication: bool,
    /// Required by the server.
    pub max_subsys: u32,
    #[serde(default)]
    pub hugepages_mem: u64,
    /// Required by the server.
    pub spdk_vcpu_count: u32,
}

impl ClusterCreate {
    /// A create body with the server's defaults and the two required sizing fields.
    pub fn new(name: impl Into<String>, max_subsys: u32, spdk_vcpu_count: u32) -> Self {
        Self {
            name: name.into(),
            blk_size: d_512(),
            page_size_in_blocks: d_page(),
            cap_warn: 0,
            cap_crit: 0,
            prov_cap_warn: 0,
            prov_cap_crit: 0,
            distr_ndcs: 1,
            distr_npcs: 1,
            distr_bs: 4096,
            distr_chunk_bs: 4096,
            ha_type: HaType::Ha,
            qpair_count: 256,
            max_queue_size: 128,
            inflight_io_threshold: 4,
            enable_node_affinity: false,
            strict_node_anti_affinity: false,
            is_single_node: false,
            fabric: d_tcp(),
            cr_name: String::new(),
            cr_namespace: String::new(),
            cr_plural: String::new(),
            client_data_nic: String::new(),
            nvmf_base_port: 4420,
            rpc_base_port: 8080,
            snode_api_port: 50001,
            backup_config: None,
            hashicorp_vault_settings: None,
            enable_failure_domain: false,
            sync_replication: false,
            max_subsys,
            hugepages_mem: 0,
            spdk_vcpu_count,
        }
    }
}

/// `UpdatableClusterParameters`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `StorageNodeDTO`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StorageNode {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub secondary_node_id: Option<Uuid>,
    pub status: NodeStatus,
    /// ISO-8601 duration, null when the node is not up.
    pub uptime: Option<String>,
    pub hostname: String,
    pub host_nqn: String,
    pub cpu_total_count: u32,
    pub cpu_spdk_count: u32,
    pub cpu_poller_count: u32,
    pub memory: u64,
    pub hugepage_memory: u64,
    pub spdk_mem: u64,
    pub lvols: u32,
    pub lvols_max: u32,
    pub snapshots_max: u32,
    pub rpc_port: u16,
    pub lvol_subsys_port: u16,
    pub hublvol_port: u16,
    pub nvmf_port: u16,
    pub mgmt_ip: String,
    pub health_check: Option<bool>,
    pub device_count: u32,
    pub online_device_count: u32,
    pub failure_domain: i64,
    /// The site the node was added in (a newer control plane; absent when none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    pub capacity: CapacityStat,
}

/// `StorageNodeParams`: the body of `POST /clusters/{c}/storage-nodes/`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StorageNodeAdd {
    pub node_address: String,
    pub interface_name: String,
    #[serde(default = "d_500")]
    pub max_snapshots: u32,
    #[serde(default = "d_true")]
    pub ha_jm: bool,
    #[serde(default)]
    pub test_device: bool,
    #[serde(default)]
    pub spdk_image: String,
    #[serde(default)]
    pub spdk_debug: bool,
    #[serde(default)]
    pub data_nics: Vec<String>,
    #[serde(default = "d_default_ns")]
    pub namespace: String,
    #[serde(default)]
    pub id_device_by_nqn: bool,
    #[serde(default = "d_3")]
    pub jm_percent: u32,
    #[serde(default = "d_1")]
    pub partitions: u32,
    #[serde(default)]
    pub iobuf_small_pool_count: u32,
    #[serde(default)]
    pub iobuf_large_pool_count: u32,
    #[serde(default)]
    pub cr_name: String,
    #[serde(default)]
    pub cr_namespace: String,
    #[serde(default)]
    pub cr_plural: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ha_jm_count: Option<u32>,
    #[serde(default)]
    pub format_4k: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spdk_proxy_image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spdk_sys_mem: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<i64>,
    #[serde(default)]
    pub expand: bool,
    /// The site the node stands in, for synchronous replication between the sites of one
    /// cluster (a newer control plane).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
}

impl StorageNodeAdd {
    /// A node-add body with the server's defaults.
    pub fn new(node_address: impl Into<String>, interface_name: impl Into<String>) -> Self {
        Self {
            node_address: node_address.into(),
            interface_name: interface_name.into(),
            max_snapshots: 500,
            ha_jm: true,
            test_device: false,
            spdk_image: String::new(),
            spdk_debug: false,
            data_nics: Vec::new(),
            namespace: d_default_ns(),
            id_device_by_nqn: false,
            jm_percent: 3,
            partitions: 1,
            iobuf_small_pool_count: 0,
            iobuf_large_pool_count: 0,
            cr_name: String::new(),
            cr_namespace: String::new(),
            cr_plural: String::new(),
            ha_jm_count: None,
            format_4k: false,
            spdk_proxy_image: None,
            spdk_sys_mem: None,
            site: None,
            failure_domain: None,
            expand: false,
        }
    }
}

/// `_RestartParams`: the (required) body of node restart/start.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeRestart {
    #[serde(default)]
    pub force: bool,
    #[serde(default)]
    pub reattach_volume: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_address: Option<String>,
    #[serde(default)]
    pub new_ssd_pcie: Vec<String>,
}

/// One entry of `GET …/storage-nodes/{n}/nics` (capitalised keys with spaces, as served).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Nic {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Device name")]
    pub device_name: String,
    #[serde(rename = "Address")]
    pub address: String,
    #[serde(rename = "Net type")]
    pub net_type: String,
    #[serde(rename = "Status")]
    pub status: String,
}

/// `DeviceDTO`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Device {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub storage_node_id: Uuid,
    pub model: String,
    pub serial_number: String,
    pub nvme_controller: String,
    pub pcie_address: String,
    pub status: DeviceStatus,
    pub health_check: Option<bool>,
    pub retries_exhausted: bool,
    pub size: u64,
    pub cluster_device_order: u32,
    pub io_error: bool,
    pub is_partition: bool,
    pub nvmf_ips: Vec<String>,
    pub nvmf_nqn: String,
    pub nvmf_port: u16,
    pub capacity: CapacityStat,
}

/// `TaskDTO`. `function_name` stays a string: the server's model has names its own DTO
/// does not list (`node_removal`, `cluster_expand`, …).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Task {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub device_id: Option<Uuid>,
    pub storage_node_id: Option<Uuid>,
    pub status: TaskStatus,
    pub canceled: bool,
    pub function_name: String,
    pub function_params: serde_json::Map<String, Value>,
    pub function_result: String,
    /// `None` means unlimited.
    pub max_retry: Option<u32>,
    pub retry: u32,
}

impl Task {
    /// Done without being canceled and without a failure result.
    pub fn succeeded(&self) -> bool {
        self.status == TaskStatus::Done
            && !self.canceled
            && self
                .function_result
                .to_ascii_lowercase()
                .contains("success")
    }
}

/// `StoragePoolDTO`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Pool {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub name: String,
    pub status: ActiveStatus,
    pub max_size: u64,
    pub volume_max_size: u64,
    pub max_rw_iops: u64,
    pub max_rw_mbytes: u64,
    pub max_r_mbytes: u64,
    pub max_w_mbytes: u64,
    pub capacity: Option<CapacityStat>,
    pub dhchap: bool,
    pub allowed_hosts: Vec<String>,
}

/// `StoragePoolParams`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolCreate {
    pub name: String,
    #[serde(default)]
    pub pool_max: u64,
    #[serde(default)]
    pub volume_max_size: u64,
    #[serde(default)]
    pub max_rw_iops: u64,
    #[serde(default)]
    pub max_rw_mbytes: u64,
    #[serde(default)]
    pub max_r_mbytes: u64,
    #[serde(default)]
    pub max_w_mbytes: u64,
    #[serde(default)]
    pub dhchap: bool,
    #[serde(default)]
    pub cr_name: String,
    #[serde(default)]
    pub cr_namespace: String,
    #[serde(default)]
    pub cr_plural: String,
}

/// `UpdatableStoragePoolParams`: only the fields sent are applied.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_max_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rw_iops: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rw_mbytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_r_mbytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_w_mbytes: Option<u64>,
}

/// `PoolHostParams` / `_AddHostParams`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostNqn {
    pub host_nqn: String,
}

/// `VolumeDTO`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Volume {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub storage_node_id: Uuid,
    pub name: String,
    pub status: VolumeStatus,
    pub health_check: bool,
    pub io_error: bool,
    pub migrating: bool,
    pub nqn: String,
    pub hostname: String,
    pub priority_class: u32,
    pub namespace: String,
    pub fabric: String,
    /// Absolute URLs of the storage-node detail routes.
    pub nodes: Vec<String>,
    pub port: u16,
    pub size: u64,
    pub ndcs: u32,
    pub npcs: u32,
    pub pool_uuid: String,
    pub pool_name: String,
    pub pvc_name: String,
    pub snapshot_name: String,
    pub blobid: u64,
    pub ns_id: u32,
    /// Absolute URL of the snapshot this volume was cloned from.
    pub cloned_from: Option<String>,
    pub high_availability: bool,
    pub do_replicate: bool,
    pub max_namespace_per_subsys: u32,
    pub max_rw_iops: u64,
    pub max_rw_mbytes: u64,
    pub max_r_mbytes: u64,
    pub max_w_mbytes: u64,
    pub allowed_hosts: Vec<String>,
    pub policy: String,
    pub capacity: CapacityStat,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rep_info: Option<serde_json::Map<String, Value>>,
    pub from_source: bool,
}

/// `_CreateParams`: a new volume.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VolumeCreate {
    pub name: String,
    /// Bytes.
    pub size: u64,
    #[serde(default)]
    pub max_rw_iops: u64,
    #[serde(default)]
    pub max_rw_mbytes: u64,
    #[serde(default)]
    pub max_r_mbytes: u64,
    #[serde(default)]
    pub max_w_mbytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ha_type: Option<HaType>,
    /// Node id or hostname to place the primary on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
    #[serde(default)]
    pub priority_class: u32,
    #[serde(default)]
    pub namespaced: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_name: Option<String>,
    #[serde(default)]
    pub ndcs: u32,
    #[serde(default)]
    pub npcs: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_hosts: Option<Vec<String>>,
    #[serde(default = "d_tcp")]
    pub fabric: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_namespace_per_subsys: Option<u32>,
    #[serde(default)]
    pub do_replicate: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_cluster_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_policy: Option<String>,
    #[serde(default)]
    pub encrypt: bool,
    /// The consistency group to join (a newer control plane): created with its first
    /// member and pinned to that member's node; at most 20 members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency_group: Option<String>,
    /// The id the new volume takes instead of a generated one (the claim's
    /// `simplyblock.io/lvol-id` annotation); `uid` on the wire.
    #[serde(default, rename = "uid", skip_serializing_if = "Option::is_none")]
    pub lvol_id: Option<Uuid>,
}

impl VolumeCreate {
    /// A create body with the defaults the operator sends (one namespace per subsystem).
    pub fn new(name: impl Into<String>, size: u64) -> Self {
        Self {
            name: name.into(),
            size,
            fabric: d_tcp(),
            max_namespace_per_subsys: Some(1),
            ..Self::default()
        }
    }
}

/// `_CloneParams`: a volume cloned from a snapshot through the volume-create route.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VolumeClone {
    pub name: String,
    pub snapshot_id: Option<Uuid>,
    /// 0 = the snapshot's size. Left out when 0: the server's union picks the variant
    /// by the fields present, and a clone body must not look like a plain create.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_namespace: Option<String>,
    #[serde(default)]
    pub delete_snap_on_lvol_delete: bool,
}

/// `UpdatableLVolParams`. `replication_policy_id` distinguishes "leave alone" (`None`)
/// from "detach" (`Some(None)`), as the server does.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VolumeUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rw_iops: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rw_mbytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_r_mbytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_w_mbytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "double_option"
    )]
    pub replication_policy_id: Option<Option<Uuid>>,
}

mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer, T: Serialize>(
        v: &Option<Option<T>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(inner) => inner.serialize(s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        Option::<T>::deserialize(d).map(Some)
    }
}

/// `NvmeConnectEntry`: one NVMe/TCP path of a volume (hyphenated keys on the wire).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConnectEntry {
    pub transport: String,
    pub ip: String,
    pub port: u16,
    pub nqn: String,
    #[serde(rename = "reconnect-delay")]
    pub reconnect_delay: u32,
    #[serde(rename = "ctrl-loss-tmo")]
    pub ctrl_loss_tmo: i64,
    #[serde(rename = "fast-io-fail-tmo")]
    pub fast_io_fail_tmo: u32,
    #[serde(rename = "nr-io-queues")]
    pub nr_io_queues: u32,
    #[serde(rename = "keep-alive-tmo")]
    pub keep_alive_tmo: u32,
    #[serde(rename = "host-iface")]
    pub host_iface: String,
    pub tls: bool,
    /// A full `nvme connect` command line; DH-HMAC-CHAP secrets are only carried here.
    pub connect: String,
    #[serde(rename = "ns-id")]
    pub ns_id: Option<u32>,
    #[serde(rename = "allowed-hosts")]
    pub allowed_hosts: Vec<String>,
    #[serde(rename = "target-lvol-id", skip_serializing_if = "Option::is_none")]
    pub target_lvol_id: Option<String>,
}

impl ConnectEntry {
    /// The value of `--flag=value` in the connect command line, if present.
    pub fn connect_arg(&self, flag: &str) -> Option<&str> {
        let prefix = format!("--{flag}=");
        self.connect
            .split_whitespace()
            .find_map(|w| w.strip_prefix(prefix.as_str()))
    }
}

/// `SnapshotDTO`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Snapshot {
    pub id: Uuid,
    pub name: String,
    pub status: SnapshotStatus,
    pub health_check: bool,
    pub size: u64,
    pub used_size: u64,
    pub migrating: bool,
    /// Absolute URL of the parent volume.
    pub lvol: Option<String>,
    /// ISO-8601 date-time.
    pub created_at: String,
}

/// `_SnapshotParams`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SnapshotCreate {
    pub name: String,
    #[serde(default)]
    pub backup: bool,
}

/// `BackupDTO`: one backup of a snapshot in the cluster's object store. Backups of a
/// volume form a chain: each names the one before it (`prev_backup_id`, empty for the
/// first), and a restore reads the whole chain up to the backup asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Backup {
    pub id: Uuid,
    /// The backup's number in the object store, unique in the cluster.
    pub s3_id: i64,
    pub lvol_id: String,
    pub lvol_name: String,
    pub snapshot_id: String,
    pub snapshot_name: String,
    pub node_id: String,
    pub status: BackupStatus,
    /// The backup this one is incremental to; empty for a chain's first.
    pub prev_backup_id: String,
    /// The volume's size in bytes, which a restore creates.
    pub size: u64,
    /// The volume's hosts when it was backed up (their keys included: never logged).
    pub allowed_hosts: Vec<serde_json::Map<String, Value>>,
    /// Epoch seconds.
    pub created_at: i64,
    /// Epoch seconds; 0 while unfinished.
    pub completed_at: i64,
    /// The cluster whose store holds it when imported from another; empty for its own.
    pub source_cluster_id: String,
}

/// `_BackupSnapshotParams`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BackupCreate {
    pub snapshot_id: String,
}

/// `_RestoreParams`: a new volume named `lvol_name` in `pool` (its id or name), holding
/// the backup's data.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BackupRestore {
    pub backup_id: String,
    pub lvol_name: String,
    pub pool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_node_id: Option<String>,
}

/// `BackupPolicyDTO`: when a volume's backups are taken and how many are kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BackupPolicy {
    pub id: Uuid,
    pub name: String,
    /// Backups kept at most; 0: no limit.
    pub max_versions: i64,
    /// The oldest backup kept, as given (`7d`); empty: no limit.
    pub max_age: String,
    /// Tiers `<interval>,<count>` separated by spaces (`15m,4 1d,7`); empty: none.
    pub backup_schedule: String,
    pub status: ActiveStatus,
}

/// `_PolicyCreateParams`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BackupPolicyCreate {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
}

/// `_AttachParams`: a pool or a volume a policy applies to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BackupPolicyTarget {
    /// `pool` or `lvol`.
    pub target_type: String,
    pub target_id: String,
}

/// One backup as `GET /backups/export` lists it and `POST /backups/import` takes it:
/// enough for another cluster to restore it from the same bucket.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BackupMetadata {
    pub backup_id: String,
    pub s3_id: i64,
    /// The cluster that took it.
    pub cluster_id: String,
    pub lvol_id: String,
    pub lvol_name: String,
    pub snapshot_id: String,
    pub snapshot_name: String,
    pub node_id: String,
    /// Empty for a chain's first.
    pub prev_backup_id: String,
    pub size: u64,
    /// The volume's hosts (their keys included: never logged).
    pub allowed_hosts: Vec<serde_json::Map<String, Value>>,
    /// Epoch seconds.
    pub created_at: i64,
}

/// `POST /backups/import`'s body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BackupImport {
    pub metadata: Vec<BackupMetadata>,
}

/// `POST /backups/import`'s answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BackupsImported {
    pub imported: i64,
}

/// The attach's 201 answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PolicyAttached {
    pub attachment_id: Uuid,
}

/// The restore's 202 answer: the new volume, `restoring` until the data is in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RestoreStarted {
    pub lvol_id: Uuid,
}

/// `_MigrationParams`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MigrationCreate {
    pub target_node_id: Uuid,
    #[serde(default = "d_ctrl_loss")]
    pub ctrl_loss_tmo: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_nqn: Option<String>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn d_ctrl_loss() -> i64 {
    3600
}

/// `_ContinueParams`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigrationContinue {
    #[serde(default = "d_10")]
    pub max_retries: u32,
    #[serde(default = "d_deadline")]
    pub deadline_seconds: u64,
}

fn d_10() -> u32 {
    10
}
fn d_deadline() -> u64 {
    14400
}

impl Default for MigrationContinue {
    fn default() -> Self {
        Self {
            max_retries: 10,
            deadline_seconds: 14400,
        }
    }
}

/// `MigrationDTO` and `BatchMigrationDTO` folded into one shape: the batch-only fields
/// (`cluster_id`, `target_nqn`, `member_count`) and the single-only ones are optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Migration {
    pub id: Uuid,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lvol_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    pub source_node_id: String,
    pub target_node_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_nqn: Option<String>,
    pub phase: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member_count: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snaps_total: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snaps_migrated: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intermediate_snap_rounds: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_intermediate_snap_rounds: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_count: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    pub error_message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<i64>,
    pub connect_strings: Vec<ConnectEntry>,
}

impl Migration {
    /// done, failed or cancelled: the operator's terminal set.
    pub fn is_terminal(&self) -> bool {
        matches!(self.status.as_str(), "done" | "failed" | "cancelled")
    }
}

/// `TargetParams`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicationTargetCreate {
    pub target_name: String,
    pub target_cluster_id: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_pool_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_sec: Option<u64>,
}

/// `ReplicationTargetDTO`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReplicationTarget {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub target_name: String,
    pub target_cluster_id: Uuid,
    pub target_pool_uuid: Option<Uuid>,
    pub timeout_sec: u64,
    pub status: ActiveStatus,
}

/// `PolicyParams`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicationPolicyCreate {
    pub policy_name: String,
    pub target_id: Uuid,
    #[serde(default = "d_interval")]
    pub interval_min: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ReplicationMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_replicated: Option<u32>,
}

fn d_interval() -> u64 {
    1
}

/// `ReplicationPolicyDTO`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReplicationPolicy {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub policy_name: String,
    pub target_id: Uuid,
    pub interval_min: u64,
    pub mode: ReplicationMode,
    pub keep_replicated: u32,
    pub status: ActiveStatus,
    /// Whether a consistency group replicates with this policy (a newer control plane),
    /// and that group's placement: the policy DTO does not name the group.
    pub consistency_group: bool,
    pub group_lvs_name: Option<String>,
    pub group_node_id: Option<Uuid>,
}

/// `ReplicationStartParams`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicationStart {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_cluster_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ReplicationMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_min: Option<u64>,
}

/// `FailbackParams`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Failback {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_cluster_id: Option<Uuid>,
}

/// `ReplicationRelationshipDTO`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReplicationRelationship {
    pub replication_id: Uuid,
    pub source_lvol_id: Option<Uuid>,
    pub target_lvol_id: Option<Uuid>,
    pub source_cluster_id: Option<Uuid>,
    pub target_cluster_id: Option<Uuid>,
    pub mode: ReplicationMode,
    pub state: ReplicationState,
    pub direction: ReplicationDirection,
    pub target_nqn: String,
    pub target_ns_id: u32,
    pub is_source: bool,
    /// The target volume's pool: sent only by the cluster-scoped lookup
    /// (`GET /clusters/{c}/replication/relationships/{lvol_id}`) of a newer control plane.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_pool_id: Option<Uuid>,
    /// The volume serving the chain this relationship belongs to, as the control plane sees
    /// it: sent only by the cluster-scoped lookup. A chain walk stops where it equals the
    /// relationship's `target_lvol_id`, or where it is absent (an older control plane).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_lvol_id: Option<Uuid>,
}

/// `ReplicatedSnapshotDTO`: the newest snapshot a relationship's cycles landed on the
/// receiving side (`GET /clusters/{c}/replication/relationships/{lvol}/latest-snapshot`, a
/// newer control plane). It lives on `cluster_id`/`pool_id` as a snapshot of `lvol_id`
/// (the replica), so a clone of it is made there.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReplicatedSnapshot {
    pub snapshot_id: Uuid,
    pub cluster_id: Uuid,
    pub pool_id: Uuid,
    /// The volume it is a snapshot of, on the receiving side.
    pub lvol_id: Uuid,
    /// The volume whose data it carries.
    pub source_lvol_id: Uuid,
    /// Bytes.
    pub size: u64,
    pub created_at: Option<String>,
}

/// `ReplicationStatusDTO`: `GET …/volumes/{v}/replication/status` of a newer control plane.
/// A volume that never replicated answers role `none`, state `not_replicating`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReplicationStatus {
    /// `source`, `secondary` (a replica being written), `failed_over` or `none`.
    pub role: String,
    /// `in_sync`, `replicating`, `lagging`, `degraded`, `error` or `not_replicating`.
    pub state: String,
    pub last_replicated_at: Option<String>,
    pub lag_seconds: Option<f64>,
    pub lag_budget_seconds: Option<f64>,
    pub outstanding_count: u64,
    pub outstanding_bytes: u64,
    pub failing_count: u64,
    pub max_retry_reached: bool,
    pub last_cycle_bytes: u64,
    pub last_cycle_seconds: f64,
    pub resyncing: bool,
}

/// What `POST …/replication/demote` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoteOutcome {
    /// 204: the volume is demoted and its last writes reached the target.
    Done,
    /// 202: the final sync is still running; ask again.
    Converging,
}

/// `FailoverResultDTO`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FailoverResult {
    pub lvol_id: Uuid,
    pub status: FailoverStatus,
    pub detail: Option<String>,
    pub target_lvol_id: Option<Uuid>,
    pub connection_strings: Vec<ConnectEntry>,
}

/// `ManagementNodeDTO`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ManagementNode {
    pub id: Uuid,
    pub status: String,
    pub hostname: String,
    pub ip: String,
}

/// A consistency group (`GET /clusters/{c}/consistency-groups/`, a newer control plane):
/// volumes snapshotted and replicated as one, all on one node and lvstore.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConsistencyGroup {
    pub id: Uuid,
    pub cluster_id: Uuid,
    pub name: String,
    /// Open members only.
    pub member_count: u32,
    pub lvs_name: String,
    pub node_id: Uuid,
    pub policy_id: Option<Uuid>,
}

/// One member of a consistency group; `removed_seq` is 0 while it is a member.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConsistencyGroupMember {
    pub lvol_id: Uuid,
    pub added_seq: u64,
    pub removed_seq: u64,
}

impl ConsistencyGroupMember {
    pub fn is_open(&self) -> bool {
        self.removed_seq == 0
    }
}

/// One member's snapshot in a group snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GroupSnapshotMember {
    pub lvol_id: Uuid,
    pub snapshot_id: Uuid,
}

/// A group snapshot: one generation of every open member, taken together.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GroupSnapshot {
    pub group_seq: u64,
    pub members: Vec<GroupSnapshotMember>,
    pub created_at: Option<String>,
    /// The name it was taken under, if any: what makes a retried create find it.
    pub name: Option<String>,
}

/// `POST …/consistency-groups/{g}/snapshots`: the body is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GroupSnapshotCreate {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `PUT …/consistency-groups/{g}/replication`: attach a policy, or detach with `None`
/// (sent as an explicit `null`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupReplicationUpdate {
    pub replication_policy_id: Option<Uuid>,
}

/// The group a handle names and the group serving now, after failovers
/// (`GET …/consistency-groups/{g}/resolution`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GroupResolution {
    pub named: ConsistencyGroup,
    pub active: ConsistencyGroup,
}

/// One member's replicated snapshot in a generation, on the target.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GenerationMember {
    pub snapshot_id: Uuid,
    pub cluster_id: Uuid,
    pub pool_id: Uuid,
    /// The replica the snapshot is of.
    pub lvol_id: Uuid,
    /// The group member whose data it carries.
    pub source_lvol_id: Uuid,
    pub size: u64,
    pub group_seq: u64,
}

/// `GET …/replication/policies/{id}/latest-generation`: the newest generation that reached
/// the target for every member.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LatestGeneration {
    pub group_seq: u64,
    pub members: Vec<GenerationMember>,
}

/// What a synchronous promote answers (`POST …/replication/failover?site=`, 200): the
/// volume and how to reach it on the promoted site.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SyncPromoteResult {
    pub lvol_id: Uuid,
    /// One `nvme connect` argument line per path.
    pub connection_strings: Vec<String>,
}

/// What a synchronous group promote answers: one entry per member.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SyncGroupPromoteResult {
    pub members: Vec<SyncPromoteResult>,
}

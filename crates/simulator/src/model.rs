//! The simulator's records: what the control plane keeps in its database, plus the
//! internal progress of background work. DTOs are rendered from these on each answer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use crate::rng::SimRng;

/// Singleton bookkeeping (key `"meta"`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub rng: SimRng,
    /// Creation order across all records.
    pub seq: u64,
    /// Sim time at the last commit, so a restart resumes the clock where it stopped.
    pub sim_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    pub date: i64,
    pub event: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterRec {
    pub id: Uuid,
    pub seq: u64,
    pub nqn: String,
    pub secret: String,
    pub status: ClusterStatus,
    pub params: ClusterCreate,
    /// Activated once; later growth goes through expansion.
    pub activated: bool,
    pub created_ms: i64,
    /// `POST /rebalance` keeps `is_re_balancing` up until then.
    pub rebalancing_until_ms: i64,
    pub events: Vec<Event>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeRec {
    pub id: Uuid,
    pub seq: u64,
    pub cluster_id: Uuid,
    pub status: NodeStatus,
    /// Fleet hostname of the worker the node's SPDK runs on.
    pub worker: String,
    pub node_address: String,
    pub mgmt_ip: String,
    pub data_ips: Vec<(String, String)>,
    pub socket: u32,
    pub rpc_port: u16,
    pub lvol_subsys_port: u16,
    pub hublvol_port: u16,
    pub nvmf_port: u16,
    pub host_nqn: String,
    pub cpu_total: u32,
    pub cpu_spdk: u32,
    pub memory: u64,
    pub hugepage_memory: u64,
    pub lvols_max: u32,
    pub snapshots_max: u32,
    pub online_since_ms: Option<i64>,
    pub failure_domain: i64,
    pub secondary_node_id: Option<Uuid>,
    pub auto_restart_disabled: bool,
    pub lvstore: bool,
    pub seq_in_cluster: u32,
    /// The site the node stands in (synchronous replication); empty when none was given.
    #[serde(default)]
    pub site: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeviceRec {
    pub id: Uuid,
    pub seq: u64,
    pub cluster_id: Uuid,
    pub node_id: Uuid,
    pub model: String,
    pub serial: String,
    pub pcie: String,
    pub size: u64,
    pub status: DeviceStatus,
    pub io_error: bool,
    pub order: u32,
}

/// A task in the control plane's task list (`JobSchedule`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskRec {
    pub id: Uuid,
    pub seq: u64,
    pub cluster_id: Uuid,
    pub node_id: Option<Uuid>,
    pub device_id: Option<Uuid>,
    pub function_name: String,
    pub params: Map<String, Value>,
    pub result: String,
    pub status: TaskStatus,
    pub canceled: bool,
    /// -1 = unlimited.
    pub max_retry: i32,
    pub retry: u32,
    /// When the runner looks at it next (sim ms).
    pub next_ms: i64,
    /// Internal progress within an attempt.
    pub step: u32,
    /// Sim time the current wait started (reboot waits are bounded).
    pub wait_since_ms: i64,
}

/// Background work the API starts with a bare 202 (no task record on the real server).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum JobKind {
    ClusterActivate {
        cluster: Uuid,
        prev: ClusterStatus,
    },
    ClusterExpand {
        cluster: Uuid,
        prev: ClusterStatus,
    },
    ClusterShutdown {
        cluster: Uuid,
    },
    ClusterStart {
        cluster: Uuid,
    },
    NodeShutdown {
        node: Uuid,
    },
    NodeRestart {
        node: Uuid,
        params: NodeRestart,
    },
    VolumeDelete {
        volume: Uuid,
    },
    /// A backup's upload: in progress after the pickup, completed after the transfer.
    Backup {
        backup: Uuid,
    },
    /// A restore's download into its new volume, online once the data is in.
    Restore {
        backup: Uuid,
        volume: Uuid,
    },
    /// The backup service's pass over a cluster's policies, every minute while it has
    /// any: scheduled backups, and merges past a policy's versions or age.
    BackupPolicies {
        cluster: Uuid,
    },
    /// A backup folded into the next of its chain: merged once the transfer is done.
    BackupMerge {
        backup: Uuid,
    },
}

/// A backup of a snapshot in the cluster's object store (sbsim keeps its data, with
/// volume files, as `<volume files>/backups/<id>.img`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BackupRec {
    pub id: Uuid,
    pub seq: u64,
    pub cluster_id: Uuid,
    /// Its number in the store, unique in the cluster.
    pub s3_id: i64,
    pub volume_id: Uuid,
    pub volume_name: String,
    pub snapshot_id: Uuid,
    pub snapshot_name: String,
    pub node_id: Uuid,
    pub status: BackupStatus,
    /// The backup this one is incremental to.
    pub prev: Option<Uuid>,
    pub size: u64,
    pub allowed_hosts: Vec<HostEntry>,
    pub created_ms: i64,
    pub completed_ms: Option<i64>,
    /// Why it failed, as the store or the transfer said (the DTO has no field for it; the
    /// cluster's event log carries it, as the control plane's does).
    #[serde(default)]
    pub error: String,
    /// The cluster that took it, when it was imported from another's export.
    #[serde(default)]
    pub source_cluster_id: String,
}

/// An S3-compatible object store, as a user sets up MinIO: reached at `endpoint`, with
/// buckets. Its objects are files under the state directory ([`crate::objstore`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObjectStoreRec {
    pub endpoint: String,
    pub buckets: BTreeMap<String, BucketRec>,
    /// Switched off by the admin route: every request fails to connect.
    pub unreachable: bool,
    /// Access key id to secret, for every user of the store.
    #[serde(default)]
    pub users: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BucketRec {
    pub region: String,
    /// The access keys allowed on the bucket.
    pub keys: std::collections::BTreeSet<String>,
}

/// A backup policy: how many backups of a volume are kept, for how long, and on what
/// schedule.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BackupPolicyRec {
    pub id: Uuid,
    pub seq: u64,
    pub cluster_id: Uuid,
    pub name: String,
    pub max_versions: i64,
    pub max_age: String,
    pub schedule: String,
}

/// A policy applied to a pool (`pool`) or a volume (`lvol`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BackupAttachmentRec {
    pub id: Uuid,
    pub seq: u64,
    pub policy_id: Uuid,
    pub target_type: String,
    pub target_id: Uuid,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRec {
    pub id: Uuid,
    pub seq: u64,
    pub kind: JobKind,
    pub due_ms: i64,
    pub step: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolRec {
    pub id: Uuid,
    pub seq: u64,
    pub cluster_id: Uuid,
    pub name: String,
    pub status: ActiveStatus,
    pub max_size: u64,
    pub volume_max_size: u64,
    pub max_rw_iops: u64,
    pub max_rw_mbytes: u64,
    pub max_r_mbytes: u64,
    pub max_w_mbytes: u64,
    pub dhchap: bool,
    pub allowed_hosts: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostEntry {
    pub nqn: String,
    pub dhchap_key: String,
    pub dhchap_ctrlr_key: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VolumeRec {
    pub id: Uuid,
    pub seq: u64,
    pub cluster_id: Uuid,
    pub pool_id: Uuid,
    pub name: String,
    pub status: VolumeStatus,
    pub size: u64,
    pub node_id: Uuid,
    pub secondary_ids: Vec<Uuid>,
    pub nqn: String,
    pub ns_id: u32,
    pub ha: bool,
    pub ndcs: u32,
    pub npcs: u32,
    pub pvc_name: String,
    pub namespace: String,
    pub priority_class: u32,
    pub fabric: String,
    pub blobid: u64,
    pub max_namespace_per_subsys: u32,
    pub max_rw_iops: u64,
    pub max_rw_mbytes: u64,
    pub max_r_mbytes: u64,
    pub max_w_mbytes: u64,
    pub allowed_hosts: Vec<HostEntry>,
    pub cloned_from: Option<Uuid>,
    pub snapshot_name: String,
    pub delete_snap_on_delete: bool,
    pub replication_policy: Option<Uuid>,
    pub do_replicate: bool,
    pub created_ms: i64,
    /// Demoted on its site by a synchronous demote: it serves nowhere until promoted.
    #[serde(default)]
    pub fenced: bool,
    /// The bytes a workload wrote (`PUT /_sim/volumes/{id}/written`); `None`: the
    /// simulated default of [`crate::stats::volume_used`].
    #[serde(default)]
    pub written: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotRec {
    pub id: Uuid,
    pub seq: u64,
    pub cluster_id: Uuid,
    pub pool_id: Uuid,
    pub volume_id: Uuid,
    pub name: String,
    pub size: u64,
    pub used_size: u64,
    pub status: SnapshotStatus,
    pub created_ms: i64,
    /// Deleted while clones still referenced it; it goes with the last clone.
    pub soft_deleted: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MigrationRec {
    pub id: Uuid,
    pub seq: u64,
    pub cluster_id: Uuid,
    pub nqn: String,
    pub lvol_id: Uuid,
    pub members: Vec<Uuid>,
    pub batch: bool,
    pub source_node: Uuid,
    pub target_node: Uuid,
    pub phase: String,
    pub status: String,
    pub retry_count: u32,
    pub max_retries: u32,
    pub error_message: String,
    pub started_at: i64,
    pub completed_at: i64,
    pub canceled: bool,
    pub ctrl_loss_tmo: i64,
    pub host_nqn: Option<String>,
    pub task_id: Option<Uuid>,
    pub next_ms: i64,
    pub snaps_total: u32,
    pub snaps_migrated: u32,
}

impl MigrationRec {
    pub fn active(&self) -> bool {
        !matches!(self.status.as_str(), "done" | "failed" | "cancelled")
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetRec {
    pub id: Uuid,
    pub seq: u64,
    pub cluster_id: Uuid,
    pub target_name: String,
    pub target_cluster_id: Uuid,
    pub target_pool: Option<Uuid>,
    pub timeout_sec: u64,
    pub status: ActiveStatus,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PolicyRec {
    pub id: Uuid,
    pub seq: u64,
    pub cluster_id: Uuid,
    pub policy_name: String,
    pub target_id: Uuid,
    pub interval_min: u64,
    pub mode: ReplicationMode,
    pub keep_replicated: u32,
    pub status: ActiveStatus,
}

/// A volume's replication relationship (key: the source volume id).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplicationRec {
    pub id: Uuid,
    pub seq: u64,
    pub cluster_id: Uuid,
    pub source_lvol: Uuid,
    pub target_lvol: Option<Uuid>,
    pub target_cluster: Uuid,
    pub target_pool: Option<Uuid>,
    pub mode: ReplicationMode,
    pub state: ReplicationState,
    pub direction: ReplicationDirection,
    pub running: bool,
    pub interval_min: u64,
    pub last_snapshot_ms: Option<i64>,
    pub next_ms: i64,
    /// Sequence number of the source's demote (a newer control plane's
    /// `…/replication/demote`); the demote is done once a snapshot taken after it is
    /// replicated.
    #[serde(default)]
    pub demoted_seq: Option<u64>,
    /// Sequence number of the snapshot the open replication task took.
    #[serde(default)]
    pub snapshot_seq: Option<u64>,
    /// Sequence number of the last snapshot replicated.
    #[serde(default)]
    pub replicated_seq: Option<u64>,
    /// The id the open cycle's snapshot will have once it lands (its data is staged
    /// under that id as soon as it is taken).
    #[serde(default)]
    pub pending_snapshot: Option<Uuid>,
    /// The snapshots the cycles landed on the receiving side, oldest first.
    #[serde(default)]
    pub replicated_snapshots: Vec<Uuid>,
    /// The consistency group whose schedule drives this relationship's cycles (then it
    /// has none of its own).
    #[serde(default)]
    pub group: Option<Uuid>,
}

/// A consistency group: volumes of one node snapshotted and replicated together.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupRec {
    pub id: Uuid,
    pub seq: u64,
    pub cluster_id: Uuid,
    pub name: String,
    pub node_id: Uuid,
    pub lvs_name: String,
    pub members: Vec<GroupMember>,
    pub policy_id: Option<Uuid>,
    /// Numbers group snapshots and replication generations alike.
    pub group_seq: u64,
    pub snapshots: Vec<GroupSnapRec>,
    pub generations: Vec<GenerationRec>,
    /// When the next replication generation is due (sim ms).
    pub next_ms: i64,
    /// The group serving in this group's stead since a failover.
    pub active: Option<Uuid>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupMember {
    pub lvol_id: Uuid,
    pub added_seq: u64,
    /// 0 while a member.
    pub removed_seq: u64,
}

/// A group snapshot: `(member, snapshot)` pairs taken together.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupSnapRec {
    pub group_seq: u64,
    pub members: Vec<(Uuid, Uuid)>,
    pub created_ms: i64,
    #[serde(default)]
    pub name: Option<String>,
}

/// A replication generation: the members whose cycles it started, and the
/// `(member, landed snapshot)` pairs so far.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GenerationRec {
    pub group_seq: u64,
    pub expected: Vec<Uuid>,
    pub landed: Vec<(Uuid, Uuid)>,
}

/// A synthetic NVMe device of a worker.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WorkerDevice {
    pub model: String,
    pub serial: String,
    pub pcie: String,
    pub size: u64,
}

/// A simulated Kubernetes worker that can host storage nodes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerRec {
    pub hostname: String,
    /// First = management address; the rest are data-plane addresses.
    pub addresses: Vec<String>,
    pub nics: Vec<(String, String)>,
    pub profile: Option<String>,
    pub cpus: u32,
    pub memory: u64,
    pub storage_nodes: u32,
    pub devices: Vec<WorkerDevice>,
    pub labels: BTreeMap<String, String>,
    /// Rebooting until then (sim ms): its storage-node API does not answer.
    pub reboot_until_ms: Option<i64>,
    /// The CPU topology was applied (the one reboot a node add causes happened).
    pub topology_applied: bool,
}

impl WorkerRec {
    pub fn mgmt_ip(&self) -> &str {
        self.addresses
            .first()
            .map(String::as_str)
            .unwrap_or("0.0.0.0")
    }
}

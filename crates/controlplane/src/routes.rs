//! The control plane's `/api/v2` routes, in one place: each as the OpenAPI document writes
//! it (a template with `{cluster_id}`-style placeholders, without the `/api/v2` prefix),
//! and a function filling it for one request. The client builds every path here; a
//! server of the same API (the simulator) can match requests against the same templates.

use std::fmt::Display;

use uuid::Uuid;

/// `template` with its placeholders replaced, in order, by `values`, each percent-encoded
/// as one path segment (an NQN carries `:`).
fn fill(template: &str, values: &[&dyn Display]) -> String {
    let mut out = String::with_capacity(template.len() + 40 * values.len());
    let mut values = values.iter();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        out.push_str(&rest[..open]);
        match values.next() {
            Some(value) => out.push_str(&seg(&value.to_string())),
            None => out.push_str(&rest[open..=open + close]),
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

/// Percent-encode one path segment (an NQN carries `:`; hosts carry nothing odd, but be safe).
fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

// The control plane's own state (`/_meta`).
pub const READY: &str = "/_meta/ready";

pub const VERSION: &str = "/_meta/version";

pub const HEALTH: &str = "/_meta/health";

// Clusters.
pub const CLUSTERS: &str = "/clusters/";

pub const CLUSTER: &str = "/clusters/{cluster_id}/";
pub fn cluster(cluster: Uuid) -> String {
    fill(CLUSTER, &[&cluster])
}

pub const CLUSTER_ACTIVATE: &str = "/clusters/{cluster_id}/activate";
pub fn cluster_activate(cluster: Uuid) -> String {
    fill(CLUSTER_ACTIVATE, &[&cluster])
}

pub const CLUSTER_EXPAND: &str = "/clusters/{cluster_id}/expand";
pub fn cluster_expand(cluster: Uuid) -> String {
    fill(CLUSTER_EXPAND, &[&cluster])
}

pub const CLUSTER_SHUTDOWN: &str = "/clusters/{cluster_id}/shutdown";
pub fn cluster_shutdown(cluster: Uuid) -> String {
    fill(CLUSTER_SHUTDOWN, &[&cluster])
}

pub const CLUSTER_START: &str = "/clusters/{cluster_id}/start";
pub fn cluster_start(cluster: Uuid) -> String {
    fill(CLUSTER_START, &[&cluster])
}

pub const CLUSTER_REBALANCE: &str = "/clusters/{cluster_id}/rebalance";
pub fn cluster_rebalance(cluster: Uuid) -> String {
    fill(CLUSTER_REBALANCE, &[&cluster])
}

pub const CLUSTER_CAPACITY: &str = "/clusters/{cluster_id}/capacity";
pub fn cluster_capacity(cluster: Uuid) -> String {
    fill(CLUSTER_CAPACITY, &[&cluster])
}

// Storage nodes.
pub const STORAGE_NODES: &str = "/clusters/{cluster_id}/storage-nodes/";
pub fn storage_nodes(cluster: Uuid) -> String {
    fill(STORAGE_NODES, &[&cluster])
}

pub const STORAGE_NODE: &str = "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/";
pub fn storage_node(cluster: Uuid, node: Uuid) -> String {
    fill(STORAGE_NODE, &[&cluster, &node])
}

pub const STORAGE_NODE_SUSPEND: &str =
    "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/suspend";
pub fn storage_node_suspend(cluster: Uuid, node: Uuid) -> String {
    fill(STORAGE_NODE_SUSPEND, &[&cluster, &node])
}

pub const STORAGE_NODE_RESUME: &str =
    "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/resume";
pub fn storage_node_resume(cluster: Uuid, node: Uuid) -> String {
    fill(STORAGE_NODE_RESUME, &[&cluster, &node])
}

pub const STORAGE_NODE_SHUTDOWN: &str =
    "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/shutdown";
pub fn storage_node_shutdown(cluster: Uuid, node: Uuid) -> String {
    fill(STORAGE_NODE_SHUTDOWN, &[&cluster, &node])
}

pub const STORAGE_NODE_RESTART: &str =
    "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/restart";
pub fn storage_node_restart(cluster: Uuid, node: Uuid) -> String {
    fill(STORAGE_NODE_RESTART, &[&cluster, &node])
}

pub const STORAGE_NODE_PROMOTE: &str =
    "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/promote";
pub fn storage_node_promote(cluster: Uuid, node: Uuid) -> String {
    fill(STORAGE_NODE_PROMOTE, &[&cluster, &node])
}

pub const STORAGE_NODE_NICS: &str = "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/nics";
pub fn storage_node_nics(cluster: Uuid, node: Uuid) -> String {
    fill(STORAGE_NODE_NICS, &[&cluster, &node])
}

// A storage node's devices.
pub const DEVICES: &str = "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/devices/";
pub fn devices(cluster: Uuid, node: Uuid) -> String {
    fill(DEVICES, &[&cluster, &node])
}

pub const DEVICE: &str =
    "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/devices/{device_id}/";
pub fn device(cluster: Uuid, node: Uuid, device: Uuid) -> String {
    fill(DEVICE, &[&cluster, &node, &device])
}

pub const DEVICE_REMOVE: &str =
    "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/devices/{device_id}/remove";
pub fn device_remove(cluster: Uuid, node: Uuid, device: Uuid) -> String {
    fill(DEVICE_REMOVE, &[&cluster, &node, &device])
}

pub const DEVICE_RESTART: &str =
    "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/devices/{device_id}/restart";
pub fn device_restart(cluster: Uuid, node: Uuid, device: Uuid) -> String {
    fill(DEVICE_RESTART, &[&cluster, &node, &device])
}

pub const DEVICE_FAIL: &str =
    "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/devices/{device_id}/fail";
pub fn device_fail(cluster: Uuid, node: Uuid, device: Uuid) -> String {
    fill(DEVICE_FAIL, &[&cluster, &node, &device])
}

pub const DEVICE_RESET: &str =
    "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/devices/{device_id}/reset";
pub fn device_reset(cluster: Uuid, node: Uuid, device: Uuid) -> String {
    fill(DEVICE_RESET, &[&cluster, &node, &device])
}

// Tasks.
pub const TASKS: &str = "/clusters/{cluster_id}/tasks/";
pub fn tasks(cluster: Uuid) -> String {
    fill(TASKS, &[&cluster])
}

pub const TASK: &str = "/clusters/{cluster_id}/tasks/{task_id}/";
pub fn task(cluster: Uuid, task: Uuid) -> String {
    fill(TASK, &[&cluster, &task])
}

// Storage pools.
pub const POOLS: &str = "/clusters/{cluster_id}/storage-pools/";
pub fn pools(cluster: Uuid) -> String {
    fill(POOLS, &[&cluster])
}

pub const POOL: &str = "/clusters/{cluster_id}/storage-pools/{pool_id}/";
pub fn pool(cluster: Uuid, pool: Uuid) -> String {
    fill(POOL, &[&cluster, &pool])
}

pub const POOL_HOST: &str = "/clusters/{cluster_id}/storage-pools/{pool_id}/host";
pub fn pool_host(cluster: Uuid, pool: Uuid) -> String {
    fill(POOL_HOST, &[&cluster, &pool])
}

// Volumes.
pub const VOLUMES: &str = "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/";
pub fn volumes(cluster: Uuid, pool: Uuid) -> String {
    fill(VOLUMES, &[&cluster, &pool])
}

pub const VOLUME: &str = "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/";
pub fn volume(cluster: Uuid, pool: Uuid, volume: Uuid) -> String {
    fill(VOLUME, &[&cluster, &pool, &volume])
}

pub const VOLUME_CONNECT: &str =
    "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/connect";
pub fn volume_connect(cluster: Uuid, pool: Uuid, volume: Uuid) -> String {
    fill(VOLUME_CONNECT, &[&cluster, &pool, &volume])
}

pub const VOLUME_HOSTS: &str =
    "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/hosts";
pub fn volume_hosts(cluster: Uuid, pool: Uuid, volume: Uuid) -> String {
    fill(VOLUME_HOSTS, &[&cluster, &pool, &volume])
}

pub const VOLUME_HOST: &str =
    "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/hosts/{host_nqn}";
pub fn volume_host(cluster: Uuid, pool: Uuid, volume: Uuid, host_nqn: &str) -> String {
    fill(VOLUME_HOST, &[&cluster, &pool, &volume, &host_nqn])
}

pub const VOLUME_CLONE: &str =
    "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/clone";
pub fn volume_clone(cluster: Uuid, pool: Uuid, volume: Uuid) -> String {
    fill(VOLUME_CLONE, &[&cluster, &pool, &volume])
}

// Snapshots, of a volume and of a pool.
pub const VOLUME_SNAPSHOTS: &str =
    "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/snapshots";
pub fn volume_snapshots(cluster: Uuid, pool: Uuid, volume: Uuid) -> String {
    fill(VOLUME_SNAPSHOTS, &[&cluster, &pool, &volume])
}

pub const POOL_SNAPSHOTS: &str = "/clusters/{cluster_id}/storage-pools/{pool_id}/snapshots/";
pub fn pool_snapshots(cluster: Uuid, pool: Uuid) -> String {
    fill(POOL_SNAPSHOTS, &[&cluster, &pool])
}

pub const POOL_SNAPSHOT: &str =
    "/clusters/{cluster_id}/storage-pools/{pool_id}/snapshots/{snapshot_id}/";
pub fn pool_snapshot(cluster: Uuid, pool: Uuid, snapshot: Uuid) -> String {
    fill(POOL_SNAPSHOT, &[&cluster, &pool, &snapshot])
}

// Backups of a cluster's volumes into its object store.
pub const BACKUPS: &str = "/clusters/{cluster_id}/backups/";
pub fn backups(cluster: Uuid) -> String {
    fill(BACKUPS, &[&cluster])
}

pub const BACKUP: &str = "/clusters/{cluster_id}/backups/{backup_id}/";
pub fn backup(cluster: Uuid, backup: Uuid) -> String {
    fill(BACKUP, &[&cluster, &backup])
}

pub const BACKUP_RESTORE: &str = "/clusters/{cluster_id}/backups/restore";
pub fn backup_restore(cluster: Uuid) -> String {
    fill(BACKUP_RESTORE, &[&cluster])
}

/// `?backup_id=` (every completed backup of its volume) or `?lvol_name=`.
pub const BACKUP_EXPORT: &str = "/clusters/{cluster_id}/backups/export";
pub fn backup_export(cluster: Uuid) -> String {
    fill(BACKUP_EXPORT, &[&cluster])
}

pub const BACKUP_IMPORT: &str = "/clusters/{cluster_id}/backups/import";
pub fn backup_import(cluster: Uuid) -> String {
    fill(BACKUP_IMPORT, &[&cluster])
}

pub const BACKUP_POLICIES: &str = "/clusters/{cluster_id}/backups/backup-policies/";
pub fn backup_policies(cluster: Uuid) -> String {
    fill(BACKUP_POLICIES, &[&cluster])
}

pub const BACKUP_POLICY: &str = "/clusters/{cluster_id}/backups/backup-policies/{policy_id}";
pub fn backup_policy(cluster: Uuid, policy: Uuid) -> String {
    fill(BACKUP_POLICY, &[&cluster, &policy])
}

pub const BACKUP_POLICY_ATTACH: &str =
    "/clusters/{cluster_id}/backups/backup-policies/{policy_id}/attach";
pub fn backup_policy_attach(cluster: Uuid, policy: Uuid) -> String {
    fill(BACKUP_POLICY_ATTACH, &[&cluster, &policy])
}

pub const BACKUP_POLICY_DETACH: &str =
    "/clusters/{cluster_id}/backups/backup-policies/{policy_id}/detach";
pub fn backup_policy_detach(cluster: Uuid, policy: Uuid) -> String {
    fill(BACKUP_POLICY_DETACH, &[&cluster, &policy])
}

pub const VOLUME_BACKUPS: &str =
    "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/backups";
pub fn volume_backups(cluster: Uuid, pool: Uuid, volume: Uuid) -> String {
    fill(VOLUME_BACKUPS, &[&cluster, &pool, &volume])
}

// Migrations of a subsystem (named by its NQN).
pub const MIGRATIONS: &str = "/clusters/{cluster_id}/subsystems/{nqn}/migrations/";
pub fn migrations(cluster: Uuid, nqn: &str) -> String {
    fill(MIGRATIONS, &[&cluster, &nqn])
}

pub const MIGRATION: &str = "/clusters/{cluster_id}/subsystems/{nqn}/migrations/{migration_id}/";
pub fn migration(cluster: Uuid, nqn: &str, migration: Uuid) -> String {
    fill(MIGRATION, &[&cluster, &nqn, &migration])
}

pub const MIGRATION_CONTINUE: &str =
    "/clusters/{cluster_id}/subsystems/{nqn}/migrations/{migration_id}/continue";
pub fn migration_continue(cluster: Uuid, nqn: &str, migration: Uuid) -> String {
    fill(MIGRATION_CONTINUE, &[&cluster, &nqn, &migration])
}

pub const MIGRATION_CLEANUP_TARGET: &str =
    "/clusters/{cluster_id}/subsystems/{nqn}/migrations/{migration_id}/cleanup-target";
pub fn migration_cleanup_target(cluster: Uuid, nqn: &str, migration: Uuid) -> String {
    fill(MIGRATION_CLEANUP_TARGET, &[&cluster, &nqn, &migration])
}

// A cluster's replication targets, policies and relationships.
pub const REPLICATION_TARGETS: &str = "/clusters/{cluster_id}/replication/targets/";
pub fn replication_targets(cluster: Uuid) -> String {
    fill(REPLICATION_TARGETS, &[&cluster])
}

pub const REPLICATION_TARGET: &str = "/clusters/{cluster_id}/replication/targets/{target_id}/";
pub fn replication_target(cluster: Uuid, target: Uuid) -> String {
    fill(REPLICATION_TARGET, &[&cluster, &target])
}

pub const REPLICATION_TARGET_FAILOVER: &str =
    "/clusters/{cluster_id}/replication/targets/{target_id}/failover";
pub fn replication_target_failover(cluster: Uuid, target: Uuid) -> String {
    fill(REPLICATION_TARGET_FAILOVER, &[&cluster, &target])
}

pub const REPLICATION_POLICIES: &str = "/clusters/{cluster_id}/replication/policies/";
pub fn replication_policies(cluster: Uuid) -> String {
    fill(REPLICATION_POLICIES, &[&cluster])
}

pub const REPLICATION_POLICY: &str = "/clusters/{cluster_id}/replication/policies/{policy_id}/";
pub fn replication_policy(cluster: Uuid, policy: Uuid) -> String {
    fill(REPLICATION_POLICY, &[&cluster, &policy])
}

pub const REPLICATION_POLICY_LATEST_GENERATION: &str =
    "/clusters/{cluster_id}/replication/policies/{policy_id}/latest-generation";
pub fn replication_policy_latest_generation(cluster: Uuid, policy: Uuid) -> String {
    fill(REPLICATION_POLICY_LATEST_GENERATION, &[&cluster, &policy])
}

pub const REPLICATION_RELATIONSHIP: &str =
    "/clusters/{cluster_id}/replication/relationships/{lvol_id}";
pub fn replication_relationship(cluster: Uuid, lvol: Uuid) -> String {
    fill(REPLICATION_RELATIONSHIP, &[&cluster, &lvol])
}

pub const REPLICATION_RELATIONSHIP_LATEST_SNAPSHOT: &str =
    "/clusters/{cluster_id}/replication/relationships/{lvol_id}/latest-snapshot";
pub fn replication_relationship_latest_snapshot(cluster: Uuid, lvol: Uuid) -> String {
    fill(REPLICATION_RELATIONSHIP_LATEST_SNAPSHOT, &[&cluster, &lvol])
}

// A volume's replication. The bodyless verbs (`stop`, `trigger`, `failover`) are the last
// segment after `VOLUME_REPLICATION`: a caller names the verb.
pub const VOLUME_REPLICATION: &str =
    "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/replication/";
pub fn volume_replication(cluster: Uuid, pool: Uuid, volume: Uuid) -> String {
    fill(VOLUME_REPLICATION, &[&cluster, &pool, &volume])
}

pub const VOLUME_REPLICATION_START: &str =
    "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/replication/start";
pub fn volume_replication_start(cluster: Uuid, pool: Uuid, volume: Uuid) -> String {
    fill(VOLUME_REPLICATION_START, &[&cluster, &pool, &volume])
}

pub const VOLUME_REPLICATION_STOP: &str =
    "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/replication/stop";

pub const VOLUME_REPLICATION_TRIGGER: &str =
    "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/replication/trigger";

pub const VOLUME_REPLICATION_FAILOVER: &str =
    "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/replication/failover";
pub fn volume_replication_failover(cluster: Uuid, pool: Uuid, volume: Uuid) -> String {
    fill(VOLUME_REPLICATION_FAILOVER, &[&cluster, &pool, &volume])
}

pub const VOLUME_REPLICATION_COMMIT: &str =
    "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/replication/commit";
pub fn volume_replication_commit(cluster: Uuid, pool: Uuid, volume: Uuid) -> String {
    fill(VOLUME_REPLICATION_COMMIT, &[&cluster, &pool, &volume])
}

pub const VOLUME_REPLICATION_FAILBACK: &str =
    "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/replication/failback";
pub fn volume_replication_failback(cluster: Uuid, pool: Uuid, volume: Uuid) -> String {
    fill(VOLUME_REPLICATION_FAILBACK, &[&cluster, &pool, &volume])
}

pub const VOLUME_REPLICATION_DEMOTE: &str =
    "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/replication/demote";
pub fn volume_replication_demote(cluster: Uuid, pool: Uuid, volume: Uuid) -> String {
    fill(VOLUME_REPLICATION_DEMOTE, &[&cluster, &pool, &volume])
}

pub const VOLUME_REPLICATION_STATUS: &str =
    "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/replication/status";
pub fn volume_replication_status(cluster: Uuid, pool: Uuid, volume: Uuid) -> String {
    fill(VOLUME_REPLICATION_STATUS, &[&cluster, &pool, &volume])
}

pub const VOLUME_REPLICATION_TASKS: &str =
    "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/replication/tasks";
pub fn volume_replication_tasks(cluster: Uuid, pool: Uuid, volume: Uuid) -> String {
    fill(VOLUME_REPLICATION_TASKS, &[&cluster, &pool, &volume])
}

// Consistency groups: their members, snapshots and replication.
pub const CONSISTENCY_GROUPS: &str = "/clusters/{cluster_id}/consistency-groups/";
pub fn consistency_groups(cluster: Uuid) -> String {
    fill(CONSISTENCY_GROUPS, &[&cluster])
}

pub const GROUP_MEMBERS: &str = "/clusters/{cluster_id}/consistency-groups/{group_id}/members";
pub fn group_members(cluster: Uuid, group: Uuid) -> String {
    fill(GROUP_MEMBERS, &[&cluster, &group])
}

pub const GROUP_MEMBER: &str =
    "/clusters/{cluster_id}/consistency-groups/{group_id}/members/{lvol_id}";
pub fn group_member(cluster: Uuid, group: Uuid, lvol: Uuid) -> String {
    fill(GROUP_MEMBER, &[&cluster, &group, &lvol])
}

pub const GROUP_SNAPSHOTS: &str = "/clusters/{cluster_id}/consistency-groups/{group_id}/snapshots";
pub fn group_snapshots(cluster: Uuid, group: Uuid) -> String {
    fill(GROUP_SNAPSHOTS, &[&cluster, &group])
}

pub const GROUP_SNAPSHOT: &str =
    "/clusters/{cluster_id}/consistency-groups/{group_id}/snapshots/{group_seq}";
pub fn group_snapshot(cluster: Uuid, group: Uuid, group_seq: u64) -> String {
    fill(GROUP_SNAPSHOT, &[&cluster, &group, &group_seq])
}

pub const GROUP_REPLICATION: &str =
    "/clusters/{cluster_id}/consistency-groups/{group_id}/replication";
pub fn group_replication(cluster: Uuid, group: Uuid) -> String {
    fill(GROUP_REPLICATION, &[&cluster, &group])
}

pub const GROUP_REPLICATION_FAILOVER: &str =
    "/clusters/{cluster_id}/consistency-groups/{group_id}/replication/failover";
pub fn group_replication_failover(cluster: Uuid, group: Uuid) -> String {
    fill(GROUP_REPLICATION_FAILOVER, &[&cluster, &group])
}

pub const GROUP_REPLICATION_DEMOTE: &str =
    "/clusters/{cluster_id}/consistency-groups/{group_id}/replication/demote";
pub fn group_replication_demote(cluster: Uuid, group: Uuid) -> String {
    fill(GROUP_REPLICATION_DEMOTE, &[&cluster, &group])
}

pub const GROUP_REPLICATION_FAILBACK: &str =
    "/clusters/{cluster_id}/consistency-groups/{group_id}/replication/failback";
pub fn group_replication_failback(cluster: Uuid, group: Uuid) -> String {
    fill(GROUP_REPLICATION_FAILBACK, &[&cluster, &group])
}

pub const GROUP_REPLICATION_STATUS: &str =
    "/clusters/{cluster_id}/consistency-groups/{group_id}/replication/status";
pub fn group_replication_status(cluster: Uuid, group: Uuid) -> String {
    fill(GROUP_REPLICATION_STATUS, &[&cluster, &group])
}

pub const GROUP_RESOLUTION: &str =
    "/clusters/{cluster_id}/consistency-groups/{group_id}/resolution";
pub fn group_resolution(cluster: Uuid, group: Uuid) -> String {
    fill(GROUP_RESOLUTION, &[&cluster, &group])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    /// Whether `path` is `template` with each placeholder filled by one segment.
    fn fills(template: &str, path: &str) -> bool {
        let (t, p): (Vec<&str>, Vec<&str>) =
            (template.split('/').collect(), path.split('/').collect());
        t.len() == p.len()
            && t.iter().zip(&p).all(|(t, p)| {
                let placeholder = t.starts_with('{') && t.ends_with('}');
                if placeholder {
                    !p.is_empty() && !p.contains('{')
                } else {
                    t == p
                }
            })
    }

    #[test]
    fn every_route_fills_its_own_template() {
        let routes = [
            (CLUSTER, cluster(id(1))),
            (CLUSTER_ACTIVATE, cluster_activate(id(1))),
            (CLUSTER_EXPAND, cluster_expand(id(1))),
            (CLUSTER_SHUTDOWN, cluster_shutdown(id(1))),
            (CLUSTER_START, cluster_start(id(1))),
            (CLUSTER_REBALANCE, cluster_rebalance(id(1))),
            (CLUSTER_CAPACITY, cluster_capacity(id(1))),
            (STORAGE_NODES, storage_nodes(id(1))),
            (STORAGE_NODE, storage_node(id(1), id(2))),
            (STORAGE_NODE_SUSPEND, storage_node_suspend(id(1), id(2))),
            (STORAGE_NODE_RESUME, storage_node_resume(id(1), id(2))),
            (STORAGE_NODE_SHUTDOWN, storage_node_shutdown(id(1), id(2))),
            (STORAGE_NODE_RESTART, storage_node_restart(id(1), id(2))),
            (STORAGE_NODE_PROMOTE, storage_node_promote(id(1), id(2))),
            (STORAGE_NODE_NICS, storage_node_nics(id(1), id(2))),
            (DEVICES, devices(id(1), id(2))),
            (DEVICE, device(id(1), id(2), id(3))),
            (DEVICE_REMOVE, device_remove(id(1), id(2), id(3))),
            (DEVICE_RESTART, device_restart(id(1), id(2), id(3))),
            (DEVICE_FAIL, device_fail(id(1), id(2), id(3))),
            (DEVICE_RESET, device_reset(id(1), id(2), id(3))),
            (TASKS, tasks(id(1))),
            (TASK, task(id(1), id(4))),
            (POOLS, pools(id(1))),
            (POOL, pool(id(1), id(5))),
            (POOL_HOST, pool_host(id(1), id(5))),
            (VOLUMES, volumes(id(1), id(5))),
            (VOLUME, volume(id(1), id(5), id(6))),
            (VOLUME_CONNECT, volume_connect(id(1), id(5), id(6))),
            (VOLUME_HOSTS, volume_hosts(id(1), id(5), id(6))),
            (
                VOLUME_HOST,
                volume_host(id(1), id(5), id(6), "nqn.2014-08.org:host"),
            ),
            (VOLUME_CLONE, volume_clone(id(1), id(5), id(6))),
            (VOLUME_SNAPSHOTS, volume_snapshots(id(1), id(5), id(6))),
            (POOL_SNAPSHOTS, pool_snapshots(id(1), id(5))),
            (POOL_SNAPSHOT, pool_snapshot(id(1), id(5), id(7))),
            (MIGRATIONS, migrations(id(1), "nqn.2023-02.io:a")),
            (MIGRATION, migration(id(1), "nqn.2023-02.io:a", id(8))),
            (
                MIGRATION_CONTINUE,
                migration_continue(id(1), "nqn.2023-02.io:a", id(8)),
            ),
            (
                MIGRATION_CLEANUP_TARGET,
                migration_cleanup_target(id(1), "nqn.2023-02.io:a", id(8)),
            ),
            (REPLICATION_TARGETS, replication_targets(id(1))),
            (REPLICATION_TARGET, replication_target(id(1), id(9))),
            (
                REPLICATION_TARGET_FAILOVER,
                replication_target_failover(id(1), id(9)),
            ),
            (REPLICATION_POLICIES, replication_policies(id(1))),
            (REPLICATION_POLICY, replication_policy(id(1), id(10))),
            (
                REPLICATION_POLICY_LATEST_GENERATION,
                replication_policy_latest_generation(id(1), id(10)),
            ),
            (
                REPLICATION_RELATIONSHIP,
                replication_relationship(id(1), id(11)),
            ),
            (
                REPLICATION_RELATIONSHIP_LATEST_SNAPSHOT,
                replication_relationship_latest_snapshot(id(1), id(11)),
            ),
            (VOLUME_REPLICATION, volume_replication(id(1), id(5), id(6))),
            (
                VOLUME_REPLICATION_START,
                volume_replication_start(id(1), id(5), id(6)),
            ),
            (
                VOLUME_REPLICATION_FAILOVER,
                volume_replication_failover(id(1), id(5), id(6)),
            ),
            (
                VOLUME_REPLICATION_COMMIT,
                volume_replication_commit(id(1), id(5), id(6)),
            ),
            (
                VOLUME_REPLICATION_FAILBACK,
                volume_replication_failback(id(1), id(5), id(6)),
            ),
            (
                VOLUME_REPLICATION_DEMOTE,
                volume_replication_demote(id(1), id(5), id(6)),
            ),
            (
                VOLUME_REPLICATION_STATUS,
                volume_replication_status(id(1), id(5), id(6)),
            ),
            (
                VOLUME_REPLICATION_TASKS,
                volume_replication_tasks(id(1), id(5), id(6)),
            ),
            (CONSISTENCY_GROUPS, consistency_groups(id(1))),
            (GROUP_MEMBERS, group_members(id(1), id(12))),
            (GROUP_MEMBER, group_member(id(1), id(12), id(11))),
            (GROUP_SNAPSHOTS, group_snapshots(id(1), id(12))),
            (GROUP_SNAPSHOT, group_snapshot(id(1), id(12), 13)),
            (GROUP_REPLICATION, group_replication(id(1), id(12))),
            (
                GROUP_REPLICATION_FAILOVER,
                group_replication_failover(id(1), id(12)),
            ),
            (
                GROUP_REPLICATION_DEMOTE,
                group_replication_demote(id(1), id(12)),
            ),
            (
                GROUP_REPLICATION_FAILBACK,
                group_replication_failback(id(1), id(12)),
            ),
            (
                GROUP_REPLICATION_STATUS,
                group_replication_status(id(1), id(12)),
            ),
            (GROUP_RESOLUTION, group_resolution(id(1), id(12))),
            (BACKUPS, backups(id(1))),
            (BACKUP, backup(id(1), id(14))),
            (BACKUP_RESTORE, backup_restore(id(1))),
            (BACKUP_EXPORT, backup_export(id(1))),
            (BACKUP_IMPORT, backup_import(id(1))),
            (VOLUME_BACKUPS, volume_backups(id(1), id(5), id(6))),
            (BACKUP_POLICIES, backup_policies(id(1))),
            (BACKUP_POLICY, backup_policy(id(1), id(15))),
            (BACKUP_POLICY_ATTACH, backup_policy_attach(id(1), id(15))),
            (BACKUP_POLICY_DETACH, backup_policy_detach(id(1), id(15))),
        ];
        for (template, path) in routes {
            assert!(fills(template, &path), "{path} does not fill {template}");
        }
    }

    #[test]
    fn nqn_segment_is_escaped() {
        assert_eq!(seg("nqn.2023-02.io:a"), "nqn.2023-02.io%3Aa");
        assert_eq!(
            migrations(id(1), "nqn.2023-02.io:a"),
            "/clusters/00000000-0000-0000-0000-000000000001/subsystems/nqn.2023-02.io%3Aa/migrations/"
        );
    }
}

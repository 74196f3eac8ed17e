//! Consistency groups (a newer control plane): their members, group snapshots and group
//! replication.

use reqwest::Method;
use uuid::Uuid;

use super::transport::Client;
use crate::error::Result;
use crate::response::decode;
use crate::routes;
use crate::types::*;

impl Client {
    /// The cluster's consistency groups, those named `name` when given.
    pub async fn list_consistency_groups(
        &self,
        cluster: Uuid,
        name: Option<&str>,
    ) -> Result<Vec<ConsistencyGroup>> {
        let path = routes::consistency_groups(cluster);
        let query: Vec<(&str, String)> = name
            .map(|n| vec![("name", n.to_string())])
            .unwrap_or_default();
        let r = self.call(Method::GET, &path, &query, None).await?;
        decode(&Method::GET, &path, &r)
    }

    /// The group named `name` in the cluster, if any.
    pub async fn find_consistency_group(
        &self,
        cluster: Uuid,
        name: &str,
    ) -> Result<Option<ConsistencyGroup>> {
        Ok(self
            .list_consistency_groups(cluster, Some(name))
            .await?
            .into_iter()
            .find(|g| g.name == name))
    }

    /// Every member the group had, open ones with `removed_seq == 0`.
    pub async fn consistency_group_members(
        &self,
        cluster: Uuid,
        group: Uuid,
    ) -> Result<Vec<ConsistencyGroupMember>> {
        self.get(&routes::group_members(cluster, group)).await
    }

    /// Take a volume out of its group (one way: it does not rejoin).
    pub async fn remove_consistency_group_member(
        &self,
        cluster: Uuid,
        group: Uuid,
        lvol: Uuid,
    ) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &routes::group_member(cluster, group, lvol),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    /// Snapshot every open member at once: one generation, numbered `group_seq`.
    pub async fn create_group_snapshot(&self, cluster: Uuid, group: Uuid) -> Result<GroupSnapshot> {
        let path = routes::group_snapshots(cluster, group);
        let r = self.send::<()>(Method::POST, &path, &[], None).await?;
        decode(&Method::POST, &path, &r)
    }

    /// [`Client::create_group_snapshot`] under `name`, which the snapshot then carries.
    pub async fn create_named_group_snapshot(
        &self,
        cluster: Uuid,
        group: Uuid,
        name: &str,
    ) -> Result<GroupSnapshot> {
        let path = routes::group_snapshots(cluster, group);
        let body = GroupSnapshotCreate {
            name: Some(name.to_owned()),
        };
        let r = self.send(Method::POST, &path, &[], Some(&body)).await?;
        decode(&Method::POST, &path, &r)
    }

    pub async fn list_group_snapshots(
        &self,
        cluster: Uuid,
        group: Uuid,
    ) -> Result<Vec<GroupSnapshot>> {
        self.get(&routes::group_snapshots(cluster, group)).await
    }

    pub async fn get_group_snapshot(
        &self,
        cluster: Uuid,
        group: Uuid,
        group_seq: u64,
    ) -> Result<GroupSnapshot> {
        self.get(&routes::group_snapshot(cluster, group, group_seq))
            .await
    }

    /// Delete a group snapshot (each member's snapshot; softly while cloned).
    pub async fn delete_group_snapshot(
        &self,
        cluster: Uuid,
        group: Uuid,
        group_seq: u64,
    ) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &routes::group_snapshot(cluster, group, group_seq),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    /// Attach a replication policy to the group (every member replicates with it, one
    /// generation at a time), or detach it with `None` (an explicit `null`). Attaching
    /// another policy while one is attached is refused with 412.
    pub async fn set_group_replication(
        &self,
        cluster: Uuid,
        group: Uuid,
        policy: Option<Uuid>,
    ) -> Result<()> {
        self.send(
            Method::PUT,
            &routes::group_replication(cluster, group),
            &[],
            Some(&GroupReplicationUpdate {
                replication_policy_id: policy,
            }),
        )
        .await
        .map(|_| ())
    }

    /// Fail every member over to its replica; one result per member.
    pub async fn failover_group_replication(
        &self,
        cluster: Uuid,
        group: Uuid,
    ) -> Result<Vec<FailoverResult>> {
        let path = routes::group_replication_failover(cluster, group);
        let r = self.send::<()>(Method::POST, &path, &[], None).await?;
        decode(&Method::POST, &path, &r)
    }

    /// Demote every member: done (204) once each member's last writes reached its target,
    /// converging (202) before.
    pub async fn demote_group_replication(
        &self,
        cluster: Uuid,
        group: Uuid,
    ) -> Result<DemoteOutcome> {
        let path = routes::group_replication_demote(cluster, group);
        let r = self.send::<()>(Method::POST, &path, &[], None).await?;
        Ok(if r.status == 202 {
            DemoteOutcome::Converging
        } else {
            DemoteOutcome::Done
        })
    }

    /// Point every member's replication back at its source cluster.
    pub async fn failback_group_replication(
        &self,
        cluster: Uuid,
        group: Uuid,
        params: &Failback,
    ) -> Result<()> {
        self.send(
            Method::POST,
            &routes::group_replication_failback(cluster, group),
            &[],
            Some(params),
        )
        .await
        .map(|_| ())
    }

    /// The group's replication status: its members' taken together.
    pub async fn group_replication_status(
        &self,
        cluster: Uuid,
        group: Uuid,
    ) -> Result<ReplicationStatus> {
        self.get(&routes::group_replication_status(cluster, group))
            .await
    }

    /// The group a handle names and the group serving now (after failovers, possibly on
    /// another cluster).
    pub async fn resolve_consistency_group(
        &self,
        cluster: Uuid,
        group: Uuid,
    ) -> Result<GroupResolution> {
        self.get(&routes::group_resolution(cluster, group)).await
    }
}

//! Replication between clusters: targets, policies, a volume's relationship and its verbs,
//! and what was replicated last.

use reqwest::Method;
use uuid::Uuid;

use super::transport::Client;
use crate::error::Result;
use crate::response::decode;
use crate::routes;
use crate::types::*;

impl Client {
    pub async fn list_replication_targets(&self, cluster: Uuid) -> Result<Vec<ReplicationTarget>> {
        self.get(&routes::replication_targets(cluster)).await
    }

    pub async fn create_replication_target(
        &self,
        cluster: Uuid,
        params: &ReplicationTargetCreate,
    ) -> Result<ReplicationTarget> {
        let path = routes::replication_targets(cluster);
        let r = self
            .send(
                Method::POST,
                &path,
                &[("response-format", "full".into())],
                Some(params),
            )
            .await?;
        decode(&Method::POST, &path, &r)
    }

    pub async fn delete_replication_target(&self, cluster: Uuid, target: Uuid) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &routes::replication_target(cluster, target),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    pub async fn failover_replication_target(
        &self,
        cluster: Uuid,
        target: Uuid,
    ) -> Result<Vec<FailoverResult>> {
        let path = routes::replication_target_failover(cluster, target);
        let r = self.send::<()>(Method::POST, &path, &[], None).await?;
        decode(&Method::POST, &path, &r)
    }

    pub async fn list_replication_policies(&self, cluster: Uuid) -> Result<Vec<ReplicationPolicy>> {
        self.get(&routes::replication_policies(cluster)).await
    }

    pub async fn create_replication_policy(
        &self,
        cluster: Uuid,
        params: &ReplicationPolicyCreate,
    ) -> Result<ReplicationPolicy> {
        let path = routes::replication_policies(cluster);
        let r = self
            .send(
                Method::POST,
                &path,
                &[("response-format", "full".into())],
                Some(params),
            )
            .await?;
        decode(&Method::POST, &path, &r)
    }

    pub async fn delete_replication_policy(&self, cluster: Uuid, policy: Uuid) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &routes::replication_policy(cluster, policy),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    /// The newest generation of the group replicating with `policy` that reached the
    /// target for every member; `None` when there is no such group or nothing replicated
    /// yet (404). A 400 means generations exist but none is complete yet.
    pub async fn latest_replicated_generation(
        &self,
        cluster: Uuid,
        policy: Uuid,
    ) -> Result<Option<LatestGeneration>> {
        match self
            .get(&routes::replication_policy_latest_generation(
                cluster, policy,
            ))
            .await
        {
            Ok(g) => Ok(Some(g)),
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The volume's replication relationship; 404 when it has none.
    pub async fn volume_replication(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
    ) -> Result<ReplicationRelationship> {
        self.get(&routes::volume_replication(cluster, pool, volume))
            .await
    }

    pub async fn start_volume_replication(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        params: &ReplicationStart,
    ) -> Result<()> {
        self.send(
            Method::POST,
            &routes::volume_replication_start(cluster, pool, volume),
            &[],
            Some(params),
        )
        .await
        .map(|_| ())
    }

    /// One of `stop`, `trigger`, `failover` (bodyless verbs answering 204).
    pub async fn volume_replication_action(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        verb: &str,
    ) -> Result<()> {
        self.post_empty(
            // The verb is the route's last segment: see routes::VOLUME_REPLICATION_STOP and
            // its neighbours.
            &format!(
                "{}{verb}",
                routes::volume_replication(cluster, pool, volume)
            ),
            &[],
        )
        .await
    }

    /// Planned cutover; returns the `replication_final` task id.
    pub async fn commit_volume_replication(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
    ) -> Result<Uuid> {
        let path = routes::volume_replication_commit(cluster, pool, volume);
        let r = self.send::<()>(Method::POST, &path, &[], None).await?;
        Self::created_id(&Method::POST, &path, &r)
    }

    pub async fn failback_volume_replication(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        params: &Failback,
    ) -> Result<()> {
        self.send(
            Method::POST,
            &routes::volume_replication_failback(cluster, pool, volume),
            &[],
            Some(params),
        )
        .await
        .map(|_| ())
    }

    /// Bring the volume up on its replica (`POST …/replication/failover`). `planned` adds
    /// `?planned=` (a newer control plane): a planned failover needs a finished demote of the
    /// source, and is refused with 409 while the demote converges and 412 when none was asked.
    pub async fn failover_volume_replication(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        planned: Option<bool>,
    ) -> Result<()> {
        let query: Vec<(&str, String)> = planned
            .map(|p| vec![("planned", p.to_string())])
            .unwrap_or_default();
        self.post_empty(
            &routes::volume_replication_failover(cluster, pool, volume),
            &query,
        )
        .await
    }

    /// Demote the volume (`POST …/replication/demote`, a newer control plane): it stops
    /// serving and its last writes are sent to the target.
    pub async fn demote_volume_replication(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
    ) -> Result<DemoteOutcome> {
        let path = routes::volume_replication_demote(cluster, pool, volume);
        let r = self.send::<()>(Method::POST, &path, &[], None).await?;
        Ok(if r.status == 202 {
            DemoteOutcome::Converging
        } else {
            DemoteOutcome::Done
        })
    }

    /// The volume's typed replication status (`GET …/replication/status`, a newer control
    /// plane); a volume without replication answers role `none`.
    pub async fn volume_replication_status(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
    ) -> Result<ReplicationStatus> {
        self.get(&routes::volume_replication_status(cluster, pool, volume))
            .await
    }

    pub async fn volume_replication_tasks(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
    ) -> Result<Vec<Task>> {
        self.get(&routes::volume_replication_tasks(cluster, pool, volume))
            .await
    }

    /// The relationship a volume belongs to, looked up by volume id alone
    /// (`GET /clusters/{c}/replication/relationships/{lvol_id}`, a newer control plane): the
    /// one it is the source of, else the one it is the target of. It still answers after the
    /// source volume was deleted; 404 when the volume has none.
    pub async fn replication_relationship(
        &self,
        cluster: Uuid,
        lvol: Uuid,
    ) -> Result<ReplicationRelationship> {
        self.get(&routes::replication_relationship(cluster, lvol))
            .await
    }

    /// The newest snapshot the relationship of `lvol` replicated, on the receiving side
    /// (`GET /clusters/{c}/replication/relationships/{lvol}/latest-snapshot`, a newer control
    /// plane): the recovery point a DR drill clones. `lvol` is the source volume (asked on
    /// its cluster) or the replica (asked on the target cluster); `None` when nothing was
    /// replicated yet (404).
    pub async fn latest_replicated_snapshot(
        &self,
        cluster: Uuid,
        lvol: Uuid,
    ) -> Result<Option<ReplicatedSnapshot>> {
        match self
            .get(&routes::replication_relationship_latest_snapshot(
                cluster, lvol,
            ))
            .await
        {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

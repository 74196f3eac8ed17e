//! Synchronous replication between a cluster's sites (a newer control plane): fence a volume or
//! a consistency group on one site, serve it on another.

use reqwest::Method;
use uuid::Uuid;

use super::transport::Client;
use crate::error::Result;
use crate::response::decode;
use crate::routes;
use crate::types::*;

impl Client {
    /// Fence the volume on `site` (`POST …/replication/demote?site=`): done also when it is
    /// not served there. Refusals keep the control plane's status: 400 for a site the
    /// cluster does not have, 409 for a gate (retry).
    pub async fn sync_demote_volume(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        site: &str,
    ) -> Result<()> {
        self.post_empty(
            &routes::volume_replication_demote(cluster, pool, volume),
            &[("site", site.to_string())],
        )
        .await
    }

    /// Serve the volume on `site` (`POST …/replication/failover?site=&planned=`); `planned`
    /// is false for a forced takeover. 409 means retry (in progress, or the serving site is
    /// not demoted yet), 412 that the serving site is offline (only an unplanned promote
    /// proceeds), 400 a site the cluster does not have.
    pub async fn sync_promote_volume(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        site: &str,
        planned: bool,
    ) -> Result<SyncPromoteResult> {
        let path = routes::volume_replication_failover(cluster, pool, volume);
        let query = [("site", site.to_string()), ("planned", planned.to_string())];
        let r = self.send::<()>(Method::POST, &path, &query, None).await?;
        decode(&Method::POST, &path, &r)
    }

    /// [`Client::sync_demote_volume`] for every member of a consistency group.
    pub async fn sync_demote_group(&self, cluster: Uuid, group: Uuid, site: &str) -> Result<()> {
        self.post_empty(
            &routes::group_replication_demote(cluster, group),
            &[("site", site.to_string())],
        )
        .await
    }

    /// [`Client::sync_promote_volume`] for every member of a consistency group: one entry
    /// per member.
    pub async fn sync_promote_group(
        &self,
        cluster: Uuid,
        group: Uuid,
        site: &str,
        planned: bool,
    ) -> Result<SyncGroupPromoteResult> {
        let path = routes::group_replication_failover(cluster, group);
        let query = [("site", site.to_string()), ("planned", planned.to_string())];
        let r = self.send::<()>(Method::POST, &path, &query, None).await?;
        decode(&Method::POST, &path, &r)
    }
}

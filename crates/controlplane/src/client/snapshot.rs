//! Snapshots: of a volume, and a pool's.

use reqwest::Method;
use uuid::Uuid;

use super::transport::Client;
use crate::error::Result;
use crate::routes;
use crate::types::*;

impl Client {
    /// Snapshot a volume; returns the snapshot id (from `Location`).
    pub async fn create_snapshot(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        name: &str,
    ) -> Result<Uuid> {
        let path = routes::volume_snapshots(cluster, pool, volume);
        let r = self
            .send(
                Method::POST,
                &path,
                &[],
                Some(&SnapshotCreate {
                    name: name.into(),
                    backup: false,
                }),
            )
            .await?;
        Self::created_id(&Method::POST, &path, &r)
    }

    pub async fn list_volume_snapshots(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
    ) -> Result<Vec<Snapshot>> {
        self.get(&routes::volume_snapshots(cluster, pool, volume))
            .await
    }

    pub async fn list_snapshots(&self, cluster: Uuid, pool: Uuid) -> Result<Vec<Snapshot>> {
        self.get(&routes::pool_snapshots(cluster, pool)).await
    }

    pub async fn get_snapshot(
        &self,
        cluster: Uuid,
        pool: Uuid,
        snapshot: Uuid,
    ) -> Result<Snapshot> {
        self.get(&routes::pool_snapshot(cluster, pool, snapshot))
            .await
    }

    pub async fn delete_snapshot(&self, cluster: Uuid, pool: Uuid, snapshot: Uuid) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &routes::pool_snapshot(cluster, pool, snapshot),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }
}

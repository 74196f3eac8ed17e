//! Volumes: create (also from a snapshot), read, update, resize, delete, clone, their connect
//! paths and the hosts allowed on them.

use reqwest::Method;
use uuid::Uuid;

use super::transport::Client;
use crate::error::Result;
use crate::response::decode;
use crate::routes;
use crate::types::*;

impl Client {
    pub async fn list_volumes(&self, cluster: Uuid, pool: Uuid) -> Result<Vec<Volume>> {
        self.get(&routes::volumes(cluster, pool)).await
    }

    pub async fn get_volume(&self, cluster: Uuid, pool: Uuid, volume: Uuid) -> Result<Volume> {
        self.get(&routes::volume(cluster, pool, volume)).await
    }

    /// Create a volume; returns its id (taken from `Location`). A duplicate name in any
    /// cluster is a [`Error::Conflict`](crate::Error::Conflict).
    pub async fn create_volume(
        &self,
        cluster: Uuid,
        pool: Uuid,
        params: &VolumeCreate,
    ) -> Result<Uuid> {
        let path = routes::volumes(cluster, pool);
        let r = self.send(Method::POST, &path, &[], Some(params)).await?;
        Self::created_id(&Method::POST, &path, &r)
    }

    /// Create a volume from a snapshot through the volume-create route.
    pub async fn create_volume_from_snapshot(
        &self,
        cluster: Uuid,
        pool: Uuid,
        params: &VolumeClone,
    ) -> Result<Uuid> {
        let path = routes::volumes(cluster, pool);
        let r = self.send(Method::POST, &path, &[], Some(params)).await?;
        Self::created_id(&Method::POST, &path, &r)
    }

    pub async fn update_volume(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        update: &VolumeUpdate,
    ) -> Result<()> {
        self.send(
            Method::PUT,
            &routes::volume(cluster, pool, volume),
            &[],
            Some(update),
        )
        .await
        .map(|_| ())
    }

    /// Grow a volume. The server ignores the resize's own result and answers 204, so
    /// read the volume back to know whether it took.
    pub async fn resize_volume(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        size: u64,
    ) -> Result<()> {
        self.update_volume(
            cluster,
            pool,
            volume,
            &VolumeUpdate {
                size: Some(size),
                ..VolumeUpdate::default()
            },
        )
        .await
    }

    pub async fn delete_volume(&self, cluster: Uuid, pool: Uuid, volume: Uuid) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &routes::volume(cluster, pool, volume),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    /// NVMe/TCP paths of a volume, primary first. Errors arrive as plain-text 404s.
    pub async fn connect_volume(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        host_nqn: Option<&str>,
    ) -> Result<Vec<ConnectEntry>> {
        let path = routes::volume_connect(cluster, pool, volume);
        let query: Vec<(&str, String)> = host_nqn
            .map(|h| vec![("host_nqn", h.to_string())])
            .unwrap_or_default();
        let r = self.call(Method::GET, &path, &query, None).await?;
        decode(&Method::GET, &path, &r)
    }

    /// Allow a host NQN on a volume; returns the entry with its keys.
    pub async fn add_volume_host(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        host_nqn: &str,
    ) -> Result<serde_json::Value> {
        let path = routes::volume_hosts(cluster, pool, volume);
        let r = self
            .send(
                Method::POST,
                &path,
                &[],
                Some(&HostNqn {
                    host_nqn: host_nqn.into(),
                }),
            )
            .await?;
        decode(&Method::POST, &path, &r)
    }

    pub async fn remove_volume_host(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        host_nqn: &str,
    ) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &routes::volume_host(cluster, pool, volume, host_nqn),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    /// Clone a volume (snapshot and clone in one call); returns the new volume's id.
    /// `new_size` is a size string such as `"20G"`.
    pub async fn clone_volume(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        clone_name: &str,
        new_size: Option<&str>,
    ) -> Result<Uuid> {
        let path = routes::volume_clone(cluster, pool, volume);
        let mut query = vec![("clone_name", clone_name.to_string())];
        if let Some(s) = new_size {
            query.push(("new_size", s.to_string()));
        }
        let r = self.send::<()>(Method::POST, &path, &query, None).await?;
        Self::created_id(&Method::POST, &path, &r)
    }
}

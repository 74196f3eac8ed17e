//! Clusters: create, read, update, delete, and the lifecycle verbs (activate, expand, shutdown,
//! start, rebalance).

use reqwest::Method;
use uuid::Uuid;

use super::transport::Client;
use crate::error::Result;
use crate::response::decode;
use crate::routes;
use crate::types::*;

impl Client {
    pub async fn list_clusters(&self) -> Result<Vec<Cluster>> {
        self.get(routes::CLUSTERS).await
    }

    pub async fn get_cluster(&self, cluster: Uuid) -> Result<Cluster> {
        self.get(&routes::cluster(cluster)).await
    }

    /// `POST /clusters/` with `response-format=full`.
    pub async fn create_cluster(&self, params: &ClusterCreate) -> Result<Cluster> {
        let path = routes::CLUSTERS;
        let r = self
            .send(
                Method::POST,
                path,
                &[("response-format", "full".into())],
                Some(params),
            )
            .await?;
        decode(&Method::POST, path, &r)
    }

    pub async fn update_cluster(&self, cluster: Uuid, update: &ClusterUpdate) -> Result<()> {
        self.send(Method::PUT, &routes::cluster(cluster), &[], Some(update))
            .await
            .map(|_| ())
    }

    pub async fn delete_cluster(&self, cluster: Uuid) -> Result<()> {
        self.send::<()>(Method::DELETE, &routes::cluster(cluster), &[], None)
            .await
            .map(|_| ())
    }

    /// Starts activation in the background (202); poll the cluster's status.
    pub async fn activate_cluster(&self, cluster: Uuid) -> Result<()> {
        self.post_empty(&routes::cluster_activate(cluster), &[])
            .await
    }

    pub async fn expand_cluster(&self, cluster: Uuid) -> Result<()> {
        self.post_empty(&routes::cluster_expand(cluster), &[]).await
    }

    pub async fn shutdown_cluster(&self, cluster: Uuid) -> Result<()> {
        self.post_empty(&routes::cluster_shutdown(cluster), &[])
            .await
    }

    pub async fn start_cluster(&self, cluster: Uuid) -> Result<()> {
        self.post_empty(&routes::cluster_start(cluster), &[]).await
    }

    pub async fn rebalance_cluster(&self, cluster: Uuid) -> Result<()> {
        self.post_empty(&routes::cluster_rebalance(cluster), &[])
            .await
    }

    /// Capacity history (untyped samples).
    pub async fn cluster_capacity(&self, cluster: Uuid) -> Result<Vec<serde_json::Value>> {
        self.get(&routes::cluster_capacity(cluster)).await
    }
}

//! Storage nodes: add, read, remove, and the verbs that suspend, resume, shut down, restart and
//! promote one.

use reqwest::Method;
use uuid::Uuid;

use super::transport::Client;
use crate::error::Result;
use crate::routes;
use crate::types::*;

/// Options of `DELETE …/storage-nodes/{n}/`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeRemoveOptions {
    pub force_remove: bool,
    pub force_delete: bool,
}

impl Client {
    pub async fn list_storage_nodes(&self, cluster: Uuid) -> Result<Vec<StorageNode>> {
        self.get(&routes::storage_nodes(cluster)).await
    }

    pub async fn get_storage_node(&self, cluster: Uuid, node: Uuid) -> Result<StorageNode> {
        self.get(&routes::storage_node(cluster, node)).await
    }

    /// Queue a `node_add` task; returns the task id. Not idempotent: a second add for the
    /// same address while the first is open is refused (opaque 500).
    pub async fn add_storage_node(&self, cluster: Uuid, params: &StorageNodeAdd) -> Result<Uuid> {
        let path = routes::storage_nodes(cluster);
        let r = self
            .send(
                Method::POST,
                &path,
                &[("response-format", "identifier".into())],
                Some(params),
            )
            .await?;
        Self::created_id(&Method::POST, &path, &r)
    }

    pub async fn remove_storage_node(
        &self,
        cluster: Uuid,
        node: Uuid,
        options: NodeRemoveOptions,
    ) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &routes::storage_node(cluster, node),
            &[
                ("force_remove", options.force_remove.to_string()),
                ("force_delete", options.force_delete.to_string()),
            ],
            None,
        )
        .await
        .map(|_| ())
    }

    /// `force` is a query parameter on the server (a JSON `force` is silently ignored).
    pub async fn suspend_storage_node(&self, cluster: Uuid, node: Uuid, force: bool) -> Result<()> {
        self.post_empty(
            &routes::storage_node_suspend(cluster, node),
            &[("force", force.to_string())],
        )
        .await
    }

    pub async fn resume_storage_node(&self, cluster: Uuid, node: Uuid) -> Result<()> {
        self.post_empty(&routes::storage_node_resume(cluster, node), &[])
            .await
    }

    /// 202 and a background shutdown; a 409 names what blocks a graceful one.
    pub async fn shutdown_storage_node(
        &self,
        cluster: Uuid,
        node: Uuid,
        force: bool,
    ) -> Result<()> {
        self.post_empty(
            &routes::storage_node_shutdown(cluster, node),
            &[("force", force.to_string())],
        )
        .await
    }

    /// 202 and a background restart; refusals are invisible, so poll the status.
    pub async fn restart_storage_node(
        &self,
        cluster: Uuid,
        node: Uuid,
        params: &NodeRestart,
    ) -> Result<()> {
        self.send(
            Method::POST,
            &routes::storage_node_restart(cluster, node),
            &[],
            Some(params),
        )
        .await
        .map(|_| ())
    }

    pub async fn promote_storage_node(&self, cluster: Uuid, node: Uuid) -> Result<()> {
        self.post_empty(&routes::storage_node_promote(cluster, node), &[])
            .await
    }

    pub async fn storage_node_nics(&self, cluster: Uuid, node: Uuid) -> Result<Vec<Nic>> {
        self.get(&routes::storage_node_nics(cluster, node)).await
    }
}

//! A storage node's devices: read, and remove, restart, fail or reset one.

use uuid::Uuid;

use super::transport::Client;
use crate::error::Result;
use crate::routes;
use crate::types::*;

impl Client {
    pub async fn list_devices(&self, cluster: Uuid, node: Uuid) -> Result<Vec<Device>> {
        self.get(&routes::devices(cluster, node)).await
    }

    pub async fn get_device(&self, cluster: Uuid, node: Uuid, device: Uuid) -> Result<Device> {
        self.get(&routes::device(cluster, node, device)).await
    }

    pub async fn remove_device(
        &self,
        cluster: Uuid,
        node: Uuid,
        device: Uuid,
        force: bool,
    ) -> Result<()> {
        self.post_empty(
            &routes::device_remove(cluster, node, device),
            &[("force", force.to_string())],
        )
        .await
    }

    pub async fn restart_device(
        &self,
        cluster: Uuid,
        node: Uuid,
        device: Uuid,
        force: bool,
    ) -> Result<()> {
        self.post_empty(
            &routes::device_restart(cluster, node, device),
            &[("force", force.to_string())],
        )
        .await
    }

    /// Marks a removed device failed for good (its data is rebuilt elsewhere). A newer
    /// control plane's call: refused unless the device is removed, and while any node has
    /// a volume migration.
    pub async fn fail_device(&self, cluster: Uuid, node: Uuid, device: Uuid) -> Result<()> {
        self.post_empty(&routes::device_fail(cluster, node, device), &[])
            .await
    }

    pub async fn reset_device(&self, cluster: Uuid, node: Uuid, device: Uuid) -> Result<()> {
        self.post_empty(&routes::device_reset(cluster, node, device), &[])
            .await
    }
}

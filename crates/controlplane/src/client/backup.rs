//! Backups of a cluster's volumes: take one of a snapshot, list and read them, restore
//! one into a new volume, delete a volume's.

use reqwest::Method;
use uuid::Uuid;

use super::transport::Client;
use crate::error::Result;
use crate::response::decode;
use crate::routes;
use crate::types::*;

impl Client {
    /// Backs up `snapshot` (and, first, every older snapshot of its volume without a
    /// backup, so the chain is whole); returns the backup's id.
    pub async fn create_backup(&self, cluster: Uuid, snapshot: Uuid) -> Result<Uuid> {
        let path = routes::backups(cluster);
        let r = self
            .send(
                Method::POST,
                &path,
                &[],
                Some(&BackupCreate {
                    snapshot_id: snapshot.to_string(),
                }),
            )
            .await?;
        Self::created_id(&Method::POST, &path, &r)
    }

    /// Every backup of the cluster, newest first.
    pub async fn list_backups(&self, cluster: Uuid) -> Result<Vec<Backup>> {
        self.get(&routes::backups(cluster)).await
    }

    pub async fn get_backup(&self, cluster: Uuid, backup: Uuid) -> Result<Backup> {
        self.get(&routes::backup(cluster, backup)).await
    }

    /// A volume's backups, newest first.
    pub async fn list_volume_backups(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
    ) -> Result<Vec<Backup>> {
        self.get(&routes::volume_backups(cluster, pool, volume))
            .await
    }

    /// Deletes every backup of a volume.
    pub async fn delete_volume_backups(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
    ) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &routes::volume_backups(cluster, pool, volume),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    /// Restores a backup into a new volume; returns it, `restoring` until its data is in.
    pub async fn restore_backup(&self, cluster: Uuid, params: &BackupRestore) -> Result<Uuid> {
        let path = routes::backup_restore(cluster);
        let r = self.send(Method::POST, &path, &[], Some(params)).await?;
        let started: RestoreStarted = decode(&Method::POST, &path, &r)?;
        Ok(started.lvol_id)
    }

    /// Creates a backup policy; returns its id (the control plane names it in a header
    /// only, so it is read back by name).
    pub async fn create_backup_policy(
        &self,
        cluster: Uuid,
        params: &BackupPolicyCreate,
    ) -> Result<Uuid> {
        self.send(
            Method::POST,
            &routes::backup_policies(cluster),
            &[],
            Some(params),
        )
        .await?;
        let created = self.list_backup_policies(cluster).await?;
        match created.into_iter().find(|p| p.name == params.name) {
            Some(p) => Ok(p.id),
            None => Err(crate::error::Error::Protocol {
                method: Method::POST.to_string(),
                path: routes::backup_policies(cluster),
                status: 201,
                message: format!(
                    "backup policy {} is not listed after its creation",
                    params.name
                ),
            }),
        }
    }

    pub async fn list_backup_policies(&self, cluster: Uuid) -> Result<Vec<BackupPolicy>> {
        self.get(&routes::backup_policies(cluster)).await
    }

    pub async fn delete_backup_policy(&self, cluster: Uuid, policy: Uuid) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &routes::backup_policy(cluster, policy),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    /// Applies a policy to a pool or a volume; idempotent: an existing attachment's id.
    pub async fn attach_backup_policy(
        &self,
        cluster: Uuid,
        policy: Uuid,
        target: &BackupPolicyTarget,
    ) -> Result<Uuid> {
        let path = routes::backup_policy_attach(cluster, policy);
        let r = self.send(Method::POST, &path, &[], Some(target)).await?;
        let attached: PolicyAttached = decode(&Method::POST, &path, &r)?;
        Ok(attached.attachment_id)
    }

    /// Removes a policy from a pool or a volume. 400 `Attachment not found` when it was
    /// not attached.
    pub async fn detach_backup_policy(
        &self,
        cluster: Uuid,
        policy: Uuid,
        target: &BackupPolicyTarget,
    ) -> Result<()> {
        self.send(
            Method::POST,
            &routes::backup_policy_detach(cluster, policy),
            &[],
            Some(target),
        )
        .await
        .map(|_| ())
    }
}

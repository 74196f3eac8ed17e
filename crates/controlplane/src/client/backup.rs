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
        match header_id(&r, "x-backup-id") {
            Some(id) => Ok(id),
            None => Self::created_id(&Method::POST, &path, &r),
        }
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

    /// Creates a backup policy; returns its id, which the control plane names only in the
    /// `X-Policy-Id` header.
    pub async fn create_backup_policy(
        &self,
        cluster: Uuid,
        params: &BackupPolicyCreate,
    ) -> Result<Uuid> {
        let path = routes::backup_policies(cluster);
        let r = self.send(Method::POST, &path, &[], Some(params)).await?;
        header_id(&r, "x-policy-id").ok_or_else(|| crate::error::Error::Protocol {
            method: Method::POST.to_string(),
            path,
            status: r.status,
            message: "the policy's creation answered without an X-Policy-Id".into(),
        })
    }

    /// The completed backups a restore elsewhere needs: those of `backup`'s volume (every
    /// one of that name, not only its chain), or of the volume named `lvol_name`, or all.
    pub async fn export_backups(
        &self,
        cluster: Uuid,
        backup: Option<Uuid>,
        lvol_name: Option<&str>,
    ) -> Result<Vec<BackupMetadata>> {
        let mut query = Vec::new();
        if let Some(b) = backup {
            query.push(("backup_id", b.to_string()));
        }
        if let Some(n) = lvol_name {
            query.push(("lvol_name", n.to_string()));
        }
        let path = routes::backup_export(cluster);
        let r = self.send::<()>(Method::GET, &path, &query, None).await?;
        decode(&Method::GET, &path, &r)
    }

    /// Records another cluster's exported backups in this one, restorable from the
    /// bucket they share; returns how many were recorded. Refused whole (400) when one is
    /// listed twice or already known.
    pub async fn import_backups(&self, cluster: Uuid, metadata: &[BackupMetadata]) -> Result<i64> {
        let path = routes::backup_import(cluster);
        let body = BackupImport {
            metadata: metadata.to_vec(),
        };
        let r = self.send(Method::POST, &path, &[], Some(&body)).await?;
        let done: BackupsImported = decode(&Method::POST, &path, &r)?;
        Ok(done.imported)
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

/// The id an answer names in header `name`.
fn header_id(r: &crate::response::RawResponse, name: &str) -> Option<Uuid> {
    r.header(name).and_then(|v| Uuid::parse_str(v.trim()).ok())
}

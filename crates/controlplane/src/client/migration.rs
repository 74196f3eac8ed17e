//! Migrations of a subsystem (named by its NQN) between storage nodes.

use reqwest::Method;
use uuid::Uuid;

use super::transport::Client;
use crate::error::Result;
use crate::response::decode;
use crate::routes;
use crate::types::*;

impl Client {
    /// Newest first.
    pub async fn list_migrations(&self, cluster: Uuid, nqn: &str) -> Result<Vec<Migration>> {
        self.get(&routes::migrations(cluster, nqn)).await
    }

    /// Pre-create a migration (phase `pre_created`); the answer carries target-side
    /// `connect_strings` to connect before [`Client::continue_migration`].
    pub async fn create_migration(
        &self,
        cluster: Uuid,
        nqn: &str,
        params: &MigrationCreate,
    ) -> Result<Migration> {
        let path = routes::migrations(cluster, nqn);
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

    pub async fn get_migration(
        &self,
        cluster: Uuid,
        nqn: &str,
        migration: Uuid,
    ) -> Result<Migration> {
        self.get(&routes::migration(cluster, nqn, migration)).await
    }

    pub async fn continue_migration(
        &self,
        cluster: Uuid,
        nqn: &str,
        migration: Uuid,
        params: &MigrationContinue,
    ) -> Result<()> {
        self.send(
            Method::POST,
            &routes::migration_continue(cluster, nqn, migration),
            &[],
            Some(params),
        )
        .await
        .map(|_| ())
    }

    pub async fn cancel_migration(&self, cluster: Uuid, nqn: &str, migration: Uuid) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &routes::migration(cluster, nqn, migration),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    pub async fn cleanup_migration_target(
        &self,
        cluster: Uuid,
        nqn: &str,
        migration: Uuid,
    ) -> Result<serde_json::Value> {
        let path = routes::migration_cleanup_target(cluster, nqn, migration);
        let r = self.send::<()>(Method::POST, &path, &[], None).await?;
        decode(&Method::POST, &path, &r)
    }
}

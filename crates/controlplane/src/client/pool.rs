//! Storage pools and the hosts allowed on them.

use reqwest::Method;
use uuid::Uuid;

use super::transport::Client;
use crate::error::Result;
use crate::response::decode;
use crate::routes;
use crate::types::*;

impl Client {
    pub async fn list_pools(&self, cluster: Uuid) -> Result<Vec<Pool>> {
        self.get(&routes::pools(cluster)).await
    }

    pub async fn get_pool(&self, cluster: Uuid, pool: Uuid) -> Result<Pool> {
        self.get(&routes::pool(cluster, pool)).await
    }

    /// The pool with this name, if any.
    pub async fn find_pool(&self, cluster: Uuid, name: &str) -> Result<Option<Pool>> {
        Ok(self
            .list_pools(cluster)
            .await?
            .into_iter()
            .find(|p| p.name == name))
    }

    pub async fn create_pool(&self, cluster: Uuid, params: &PoolCreate) -> Result<Pool> {
        let path = routes::pools(cluster);
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

    pub async fn update_pool(&self, cluster: Uuid, pool: Uuid, update: &PoolUpdate) -> Result<()> {
        self.send(Method::PUT, &routes::pool(cluster, pool), &[], Some(update))
            .await
            .map(|_| ())
    }

    pub async fn delete_pool(&self, cluster: Uuid, pool: Uuid) -> Result<()> {
        self.send::<()>(Method::DELETE, &routes::pool(cluster, pool), &[], None)
            .await
            .map(|_| ())
    }

    pub async fn add_pool_host(&self, cluster: Uuid, pool: Uuid, host_nqn: &str) -> Result<()> {
        self.send(
            Method::POST,
            &routes::pool_host(cluster, pool),
            &[],
            Some(&HostNqn {
                host_nqn: host_nqn.into(),
            }),
        )
        .await
        .map(|_| ())
    }

    /// A DELETE with a JSON body, as the server requires.
    pub async fn remove_pool_host(&self, cluster: Uuid, pool: Uuid, host_nqn: &str) -> Result<()> {
        self.send(
            Method::DELETE,
            &routes::pool_host(cluster, pool),
            &[],
            Some(&HostNqn {
                host_nqn: host_nqn.into(),
            }),
        )
        .await
        .map(|_| ())
    }
}

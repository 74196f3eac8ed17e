//! The CSI secret (`simplyblock-csi-secret-v2`, key `secret.json`) and one control-plane
//! client per cluster it names.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use simplyblock_controlplane::{Client, ClientConfig, Url};
use uuid::Uuid;

use crate::error::{CsiError, Result};
use crate::handle::PoolRef;

/// Where the secret is mounted by default.
pub const DEFAULT_SECRET_PATH: &str = "/etc/spdkcsi-secret/secret.json";

/// One entry of the secret.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ClusterEntry {
    pub cluster_id: Uuid,
    pub cluster_endpoint: String,
    #[serde(default)]
    pub cluster_secret: String,
    /// Marks the site's own clusters (replication picks the local member by it).
    #[serde(default)]
    pub local: bool,
}

#[derive(Debug, Deserialize)]
struct SecretFile {
    #[serde(default)]
    clusters: Vec<ClusterEntry>,
}

/// Parse `secret.json`.
pub fn parse_secret(text: &str) -> Result<Vec<ClusterEntry>> {
    let f: SecretFile = serde_json::from_str(text).map_err(|e| {
        CsiError::InvalidArgument(format!(
            "the CSI secret is not {{\"clusters\":[{{\"cluster_id\",\"cluster_endpoint\",\"cluster_secret\"}}]}}: {e}"
        ))
    })?;
    for c in &f.clusters {
        if c.cluster_endpoint.trim().is_empty() {
            return Err(CsiError::InvalidArgument(format!(
                "the CSI secret gives cluster {} no cluster_endpoint",
                c.cluster_id
            )));
        }
    }
    Ok(f.clusters)
}

/// Clients for every cluster the driver may serve.
#[derive(Debug, Clone, Default)]
pub struct Clusters {
    clients: BTreeMap<Uuid, Arc<Client>>,
    local: BTreeMap<Uuid, bool>,
}

impl Clusters {
    /// Build from entries; a non-empty `token` (a service-account token file) replaces
    /// every entry's `cluster_secret` as the bearer.
    pub fn new(entries: &[ClusterEntry], token: Option<&str>) -> Result<Self> {
        let mut out = Clusters::default();
        for e in entries {
            let bearer = match token.filter(|t| !t.trim().is_empty()) {
                Some(t) => t.trim().to_string(),
                None => e.cluster_secret.clone(),
            };
            if bearer.is_empty() {
                return Err(CsiError::InvalidArgument(format!(
                    "cluster {} has no credential: set cluster_secret in the CSI secret or give an API token file",
                    e.cluster_id
                )));
            }
            let url = Url::parse(&e.cluster_endpoint).map_err(|err| {
                CsiError::InvalidArgument(format!(
                    "cluster {}: endpoint {:?} is not a URL: {err}",
                    e.cluster_id, e.cluster_endpoint
                ))
            })?;
            let mut cfg = ClientConfig::new(url, bearer);
            cfg.timeout = Duration::from_secs(60);
            let client = Client::new(cfg)?;
            out.clients.insert(e.cluster_id, Arc::new(client));
            out.local.insert(e.cluster_id, e.local);
        }
        Ok(out)
    }

    /// Read the secret file (and the optional token file).
    pub fn load(secret: &Path, token_file: Option<&Path>) -> Result<Self> {
        let text = std::fs::read_to_string(secret)
            .map_err(|e| CsiError::io(format!("reading the CSI secret {}", secret.display()), e))?;
        let token = match token_file {
            Some(p) => std::fs::read_to_string(p).ok(),
            None => None,
        };
        Self::new(&parse_secret(&text)?, token.as_deref())
    }

    pub fn client(&self, cluster: Uuid) -> Result<Arc<Client>> {
        self.clients
            .get(&cluster)
            .cloned()
            .ok_or_else(|| CsiError::UnknownCluster(cluster.to_string()))
    }

    pub fn ids(&self) -> impl Iterator<Item = Uuid> + '_ {
        self.clients.keys().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    /// The pool's UUID; a name (legacy handles, StorageClass `pool_name`) is looked up.
    pub async fn pool_id(&self, cluster: Uuid, pool: &PoolRef) -> Result<Uuid> {
        match pool {
            PoolRef::Id(id) => Ok(*id),
            PoolRef::Name(name) => {
                let c = self.client(cluster)?;
                c.find_pool(cluster, name)
                    .await?
                    .map(|p| p.id)
                    .ok_or_else(|| {
                        CsiError::NotFound(format!("pool {name:?} in cluster {cluster}"))
                    })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_parses_and_builds_clients() {
        let text = r#"{"clusters":[{"cluster_id":"11111111-1111-4111-8111-111111111111",
            "cluster_endpoint":"http://cp:5000","cluster_secret":"s3cret"}]}"#;
        let entries = parse_secret(text).expect("parse");
        assert_eq!(entries.len(), 1);
        assert!(!entries[0].local);
        let c = Clusters::new(&entries, None).expect("clients");
        assert!(c.client(entries[0].cluster_id).is_ok());
        let other = Uuid::from_u128(7);
        let e = c.client(other).expect_err("unknown");
        assert!(e.to_string().contains("simplyblock-csi-secret-v2"), "{e}");
    }

    #[test]
    fn missing_endpoint_or_credential_is_an_error() {
        let no_ep = r#"{"clusters":[{"cluster_id":"11111111-1111-4111-8111-111111111111","cluster_endpoint":""}]}"#;
        assert!(parse_secret(no_ep).is_err());
        let no_secret = r#"{"clusters":[{"cluster_id":"11111111-1111-4111-8111-111111111111","cluster_endpoint":"http://cp"}]}"#;
        let entries = parse_secret(no_secret).expect("parse");
        assert!(Clusters::new(&entries, None).is_err());
        assert!(Clusters::new(&entries, Some("token\n")).is_ok());
        assert!(parse_secret("not json").is_err());
    }
}

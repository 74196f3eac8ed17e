//! The CSI secret (`simplyblock-csi-secret-v2`, key `secret.json`, as
//! [`simplyblock_api::csi_secret`] defines it) and one control-plane client per cluster it
//! names.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use simplyblock_api::csi_secret;
use simplyblock_controlplane::{Client, ClientConfig, Url};
use uuid::Uuid;

use crate::error::{CsiError, Result};
use crate::handle::PoolRef;

/// Where the secret is mounted by default.
pub const DEFAULT_SECRET_PATH: &str = "/etc/spdkcsi-secret/secret.json";

/// One cluster of the secret, as the driver serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterEntry {
    pub cluster_id: Uuid,
    pub cluster_endpoint: String,
    pub cluster_secret: String,
    /// Marks the site's own clusters (replication picks the local member by it).
    pub local: bool,
}

/// Parse `secret.json`, whose format [`simplyblock_api::csi_secret`] defines.
pub fn parse_secret(text: &str) -> Result<Vec<ClusterEntry>> {
    let contents = csi_secret::decode(text.as_bytes())
        .map_err(|e| CsiError::InvalidArgument(e.to_string()))?;
    contents
        .clusters
        .iter()
        .map(|c| {
            let cluster_id = Uuid::parse_str(c.cluster_id.trim()).map_err(|_| {
                CsiError::InvalidArgument(format!(
                    "the CSI secret names cluster {:?}, which is not a cluster UUID",
                    c.cluster_id
                ))
            })?;
            if c.cluster_endpoint.trim().is_empty() {
                return Err(CsiError::InvalidArgument(format!(
                    "the CSI secret gives cluster {cluster_id} no cluster_endpoint"
                )));
            }
            Ok(ClusterEntry {
                cluster_id,
                cluster_endpoint: c.cluster_endpoint.clone(),
                cluster_secret: c.cluster_secret.clone(),
                local: contents.local.contains(&c.cluster_id),
            })
        })
        .collect()
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
        let not_a_uuid = r#"{"clusters":[{"cluster_id":"prod","cluster_endpoint":"http://cp"}]}"#;
        let e = parse_secret(not_a_uuid).expect_err("not a UUID");
        assert!(e.to_string().contains("\"prod\""), "{e}");
    }

    #[test]
    fn the_driver_reads_exactly_what_the_operator_writes() {
        let a = "11111111-1111-4111-8111-111111111111";
        let b = "22222222-2222-4222-8222-222222222222";
        let written = csi_secret::Contents {
            clusters: vec![
                csi_secret::Entry {
                    cluster_id: a.into(),
                    cluster_endpoint: "http://cp-a:5000".into(),
                    cluster_secret: "secret-a".into(),
                    extra: Default::default(),
                },
                csi_secret::Entry {
                    cluster_id: b.into(),
                    cluster_endpoint: "https://cp-b".into(),
                    cluster_secret: "secret-b".into(),
                    extra: Default::default(),
                },
            ],
            local: [b.to_string()].into(),
            extra: Default::default(),
        };
        // The bytes the operator stores under the Secret's key, as the driver's mount
        // shows them.
        let data = csi_secret::secret_data(&written);
        let text = String::from_utf8(data[csi_secret::KEY].0.clone()).expect("utf-8");
        let read = parse_secret(&text).expect("the driver reads it");
        assert_eq!(
            read,
            vec![
                ClusterEntry {
                    cluster_id: Uuid::parse_str(a).expect("a"),
                    cluster_endpoint: "http://cp-a:5000".into(),
                    cluster_secret: "secret-a".into(),
                    local: false,
                },
                ClusterEntry {
                    cluster_id: Uuid::parse_str(b).expect("b"),
                    cluster_endpoint: "https://cp-b".into(),
                    cluster_secret: "secret-b".into(),
                    local: true,
                },
            ]
        );
    }
}

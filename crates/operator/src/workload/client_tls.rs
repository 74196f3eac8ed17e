//! The operator's TLS toward a cluster's storage-node APIs. The nodes serve a certificate
//! from the cluster's own CA and require a client certificate from it
//! (`SB_TLS_CLIENT_AUTH=required`); the operator verifies them against that CA and
//! presents a certificate it issues itself from the CA Secret the StorageCluster
//! controller keeps ([`crate::runtime::ca`]).
//!
//! The client certificate lives only in the operator's memory: it is never written, so no
//! reader of Secrets can present it. It is issued again when a third of its life is left
//! or when the cluster's CA changed.

use std::collections::HashMap;
use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use simplyblock_certs::{Authority, Pair};
use simplyblock_controlplane::TlsConfig;

use crate::runtime::ca::Stored;
use crate::runtime::kit::Error;
use crate::workload::serving;

/// The subject of the operator's client certificate.
pub const COMMON_NAME: &str = "simplyblock-operator";
/// How long a client certificate is valid.
pub const VALIDITY: SignedDuration = SignedDuration::from_hours(24);

/// The client certificates issued so far, per cluster (namespace, name).
#[derive(Default)]
pub struct ClientCertificates(Mutex<HashMap<(String, String), Issued>>);

impl std::fmt::Debug for ClientCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys stay out of logs.
        f.write_str("ClientCertificates")
    }
}

#[derive(Clone)]
struct Issued {
    /// The CA certificate it chains to.
    ca: String,
    tls: TlsConfig,
    renew_at: Timestamp,
}

/// Whether `issued` may still be presented at `now` to nodes of the CA `ca`. Pure.
fn reusable(issued: &Issued, ca: &str, now: Timestamp) -> bool {
    issued.ca == ca && now < issued.renew_at
}

impl ClientCertificates {
    /// The TLS to reach the storage nodes of cluster `name` in `namespace` with; held
    /// while the cluster's CA Secret does not exist yet.
    pub async fn tls(
        &self,
        kube: &kube::Client,
        namespace: &str,
        name: &str,
    ) -> Result<TlsConfig, Error> {
        let secret_name = serving::ca_secret_name(name);
        let secret = Api::<Secret>::namespaced(kube.clone(), namespace)
            .get_opt(&secret_name)
            .await?
            .ok_or_else(|| {
                Error::Held(format!(
                    "Secret {secret_name}, the storage-node CA of cluster {name}, does not exist yet: the StorageCluster controller writes it with the storage-node workload"
                ))
            })?;
        let stored = Stored::from_secret(&secret).map_err(|e| {
            Error::Invalid(format!(
                "Secret {secret_name} holds no usable storage-node CA ({e}); delete it and the StorageCluster controller makes a new one"
            ))
        })?;
        let now = Timestamp::now();
        let key = (namespace.to_owned(), name.to_owned());
        if let Some(issued) = self.lock().get(&key)
            && reusable(issued, &stored.cert, now)
        {
            return Ok(issued.tls.clone());
        }
        let authority = Authority::from_pair(
            serving::CA_POLICY.common_name,
            &Pair {
                cert: stored.cert.clone(),
                key: stored.key.clone(),
            },
        )?;
        let not_after = now + VALIDITY;
        let pair = authority.client_until(COMMON_NAME, None, Some(not_after.as_second()))?;
        let tls = TlsConfig {
            ca_pem: stored.bundle(now).into_bytes(),
            client_identity: Some((pair.cert.into_bytes(), pair.key.into_bytes())),
            server_name: None,
        };
        tracing::info!(cluster = %name, %namespace, not_after = %not_after, "issued the operator's storage-node client certificate");
        let issued = Issued {
            ca: stored.cert,
            tls: tls.clone(),
            renew_at: not_after - VALIDITY / 3,
        };
        self.lock().insert(key, issued);
        Ok(tls)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Issued>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issued(ca: &str, renew_at: Timestamp) -> Issued {
        Issued {
            ca: ca.into(),
            tls: TlsConfig::default(),
            renew_at,
        }
    }

    #[test]
    fn a_certificate_is_reused_until_it_is_due_or_the_ca_changed() {
        let now: Timestamp = "2026-12-05T12:00:00Z".parse().expect("time");
        let due = now + SignedDuration::from_hours(1);
        assert!(reusable(&issued("CA1", due), "CA1", now));
        assert!(!reusable(&issued("CA1", due), "CA2", now));
        assert!(!reusable(&issued("CA1", now), "CA1", now));
    }
}

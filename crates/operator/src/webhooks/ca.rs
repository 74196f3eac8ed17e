//! The webhook server's CA: kept in a Secret of the operator's namespace so every start
//! (and every replica) serves from the same one, valid for a year, and replaced a third of
//! its life before its end. The caBundle the API server trusts carries the new CA and the
//! previous one until that expires, so a certificate issued from either verifies while
//! the change reaches every replica. The keeping and replacing is [`crate::runtime::ca`]'s.

use std::time::Duration;

use jiff::SignedDuration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta};

pub use crate::runtime::ca::{Ca, NOT_AFTER};

use super::tls::ServingCertificates;
use super::{Endpoint, register};
use crate::runtime::error::ServerError as Error;

/// The Secret holding the CA (`ca.crt`, `ca.key`) and the previous CA's certificate
/// (`previous.crt`).
pub const SECRET: &str = "simplyblock-operator-webhook-ca";
/// How long a CA is valid.
pub const VALIDITY: SignedDuration = SignedDuration::from_hours(365 * 24);
/// The webhook CA: a CA with less than a third of its life left is replaced.
pub const POLICY: crate::runtime::ca::Policy = crate::runtime::ca::Policy {
    common_name: "simplyblock-operator-webhook-ca",
    validity: VALIDITY,
    rotate_before: SignedDuration::from_hours(365 * 8),
};

/// Reads the stored CA, creating or replacing it as [`crate::runtime::ca::plan`] says.
pub async fn ensure(client: &kube::Client, namespace: &str) -> Result<Ca, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let metadata = ObjectMeta {
        name: Some(SECRET.into()),
        namespace: Some(namespace.into()),
        ..ObjectMeta::default()
    };
    crate::runtime::ca::ensure(&api, &metadata, &POLICY)
        .await
        .map_err(|e| match e {
            crate::runtime::ca::Error::Kube { secret, source } => Error::Kube {
                what: format!("Secret {secret}"),
                source,
            },
            other => Error::Tls(other.to_string()),
        })
}

/// Looks at the stored CA every `period`: when it was replaced (here or by another
/// replica), the webhook configurations get the new bundle first, then the server
/// issues from the new CA.
pub async fn keep_fresh(
    client: kube::Client,
    namespace: String,
    endpoint: Endpoint,
    certs: std::sync::Arc<ServingCertificates>,
    period: Duration,
) {
    loop {
        tokio::time::sleep(period).await;
        let ca = match ensure(&client, &namespace).await {
            Ok(ca) => ca,
            Err(e) => {
                tracing::error!(error = %e, "checking the webhook CA failed; the current one stays in use");
                continue;
            }
        };
        if ca.bundle == certs.ca_bundle() {
            continue;
        }
        if let Err(e) = register(&client, &endpoint, &ca.bundle).await {
            tracing::error!(error = %e, "publishing the new webhook CA bundle failed; retrying at the next check");
            continue;
        }
        if let Err(e) = super::conversion::register(&client, &endpoint, &ca.bundle).await {
            tracing::error!(error = %e, "publishing the new CA bundle to the converting CRDs failed; retrying at the next check");
            continue;
        }
        if let Err(e) = crate::metricsapi::server::register(&client, &ca.bundle).await {
            tracing::error!(error = %e, "publishing the new CA bundle to the metrics APIService failed; retrying at the next check");
            continue;
        }
        if let Err(e) = certs.replace_authority(ca.authority, ca.bundle) {
            tracing::error!(error = %e, "issuing from the new webhook CA failed");
        } else {
            tracing::info!("the webhook server issues from a new CA");
        }
    }
}

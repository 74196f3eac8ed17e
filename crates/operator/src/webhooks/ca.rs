//! The webhook server's CA: kept in a Secret of the operator's namespace so every start
//! (and every replica) serves from the same one, valid for a year, and replaced a third of
//! its life before its end. The caBundle the API server trusts carries the new CA and the
//! previous one until that expires, so a certificate issued from either verifies while
//! the change reaches every replica.
//!
//! What to do with the stored CA is a pure decision ([`plan`]); the Secret is written
//! under its resourceVersion, so two replicas never both replace it.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use simplyblock_certs::{Authority, Pair};

use super::tls::ServingCertificates;
use super::{Endpoint, register};
use crate::Error;

/// The Secret holding the CA (`ca.crt`, `ca.key`) and the previous CA's certificate
/// (`previous.crt`).
pub const SECRET: &str = "simplyblock-operator-webhook-ca";
/// The CA's common name; a stored CA is reloaded under it.
pub const COMMON_NAME: &str = "simplyblock-operator-webhook-ca";
/// How long a CA is valid.
pub const VALIDITY: SignedDuration = SignedDuration::from_hours(365 * 24);
/// A CA with less than this left is replaced: a third of its life.
pub const ROTATE_BEFORE: SignedDuration = SignedDuration::from_hours(365 * 8);
/// Annotation: when the CA stops being valid (RFC 3339).
pub const NOT_AFTER: &str = simplyblock_api::keys::NOT_AFTER_ANNOTATION;
/// Annotation: when the previous CA stops being valid (RFC 3339).
pub const PREVIOUS_NOT_AFTER: &str = simplyblock_api::keys::PREVIOUS_NOT_AFTER_ANNOTATION;

/// What the Secret records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub cert: String,
    pub key: String,
    pub not_after: Option<Timestamp>,
    pub previous: Option<(String, Option<Timestamp>)>,
}

impl Stored {
    fn from_secret(s: &Secret) -> Option<Stored> {
        let data = s.data.clone().unwrap_or_default();
        let text = |k: &str| {
            data.get(k)
                .and_then(|v| String::from_utf8(v.0.clone()).ok())
                .filter(|t| !t.is_empty())
        };
        let notes = s.metadata.annotations.clone().unwrap_or_default();
        let at = |k: &str| notes.get(k).and_then(|t| t.parse::<Timestamp>().ok());
        Some(Stored {
            cert: text("ca.crt")?,
            key: text("ca.key")?,
            not_after: at(NOT_AFTER),
            previous: text("previous.crt").map(|c| (c, at(PREVIOUS_NOT_AFTER))),
        })
    }

    /// The caBundle: this CA, and the previous one while it is still valid.
    pub fn bundle(&self, now: Timestamp) -> String {
        let mut bundle = self.cert.clone();
        if let Some((prev, end)) = &self.previous
            && end.is_some_and(|e| e > now)
        {
            if !bundle.ends_with('\n') {
                bundle.push('\n');
            }
            bundle.push_str(prev);
        }
        bundle
    }
}

/// What to do with the stored CA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    Keep,
    /// No usable CA is stored: make the first.
    Create,
    /// The CA is near its end (or its end is not recorded): make a new one and keep this
    /// one's certificate in the bundle.
    Rotate,
}

/// Decides over the stored CA. Pure.
pub fn plan(now: Timestamp, stored: Option<&Stored>) -> Plan {
    match stored {
        None => Plan::Create,
        Some(s) => match s.not_after {
            Some(end) if end.duration_since(now) > ROTATE_BEFORE => Plan::Keep,
            _ => Plan::Rotate,
        },
    }
}

/// The CA in force after [`ensure`]: what to issue from and what to trust.
pub struct Ca {
    pub authority: Authority,
    pub bundle: String,
}

/// Reads the stored CA, creating or replacing it as [`plan`] says.
pub async fn ensure(client: &kube::Client, namespace: &str) -> Result<Ca, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let kube_err = |source| Error::Kube {
        what: format!("Secret {namespace}/{SECRET}"),
        source,
    };
    for _ in 0..5 {
        let now = Timestamp::now();
        let found = api.get_opt(SECRET).await.map_err(kube_err)?;
        let stored = found.as_ref().and_then(Stored::from_secret);
        let decided = plan(now, stored.as_ref());
        let next = match (decided, &stored) {
            (Plan::Keep, Some(s)) => {
                let pair = Pair {
                    cert: s.cert.clone(),
                    key: s.key.clone(),
                };
                let authority = Authority::from_pair(COMMON_NAME, &pair)
                    .map_err(|e| Error::Tls(format!("the stored webhook CA in Secret {namespace}/{SECRET} cannot be used ({e}); delete the Secret and the operator makes a new CA")))?;
                return Ok(Ca {
                    authority,
                    bundle: s.bundle(now),
                });
            }
            _ => {
                let end = now
                    .saturating_add(VALIDITY)
                    .map_err(|e| Error::Tls(e.to_string()))?;
                let authority = Authority::new_until(COMMON_NAME, end.as_second())
                    .map_err(|e| Error::Tls(e.to_string()))?;
                let pair = authority.pair();
                let previous = stored
                    .as_ref()
                    .filter(|_| decided == Plan::Rotate)
                    .map(|s| (s.cert.clone(), s.not_after));
                let next = Stored {
                    cert: pair.cert,
                    key: pair.key,
                    not_after: Some(end),
                    previous,
                };
                (authority, next)
            }
        };
        let (authority, record) = next;
        let secret = to_secret(namespace, &record, found.as_ref());
        let written = match found {
            Some(_) => api.replace(SECRET, &PostParams::default(), &secret).await,
            None => api.create(&PostParams::default(), &secret).await,
        };
        match written {
            Ok(_) => {
                tracing::info!(rotated = decided == Plan::Rotate, "stored a new webhook CA");
                return Ok(Ca {
                    authority,
                    bundle: record.bundle(now),
                });
            }
            // Another replica wrote it first: use theirs.
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(kube_err(e)),
        }
    }
    Err(Error::Tls(format!(
        "Secret {namespace}/{SECRET} kept changing while the webhook CA was being stored; the operator retries at its next start"
    )))
}

fn to_secret(namespace: &str, s: &Stored, found: Option<&Secret>) -> Secret {
    let mut data = BTreeMap::new();
    data.insert(
        "ca.crt".to_string(),
        ByteString(s.cert.clone().into_bytes()),
    );
    data.insert("ca.key".to_string(), ByteString(s.key.clone().into_bytes()));
    let mut notes = BTreeMap::new();
    if let Some(end) = s.not_after {
        notes.insert(NOT_AFTER.to_string(), end.to_string());
    }
    if let Some((cert, end)) = &s.previous {
        data.insert(
            "previous.crt".to_string(),
            ByteString(cert.clone().into_bytes()),
        );
        if let Some(end) = end {
            notes.insert(PREVIOUS_NOT_AFTER.to_string(), end.to_string());
        }
    }
    let mut secret = Secret {
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Secret::default()
    };
    secret.metadata.name = Some(SECRET.into());
    secret.metadata.namespace = Some(namespace.into());
    secret.metadata.annotations = Some(notes);
    secret.metadata.resource_version = found.and_then(|f| f.metadata.resource_version.clone());
    secret
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
        if let Err(e) = certs.replace_authority(ca.authority, ca.bundle) {
            tracing::error!(error = %e, "issuing from the new webhook CA failed");
        } else {
            tracing::info!("the webhook server issues from a new CA");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(end: Option<Timestamp>) -> Stored {
        Stored {
            cert: "CA2\n".into(),
            key: "k".into(),
            not_after: end,
            previous: Some(("CA1\n".into(), None)),
        }
    }

    #[test]
    fn a_ca_is_kept_until_its_last_third_then_rotated() {
        let now: Timestamp = "2026-06-01T00:00:00Z".parse().expect("time");
        assert_eq!(plan(now, None), Plan::Create);
        let fresh = now.saturating_add(VALIDITY).expect("end");
        assert_eq!(plan(now, Some(&stored(Some(fresh)))), Plan::Keep);
        let late = now
            .saturating_add(ROTATE_BEFORE - SignedDuration::from_hours(1))
            .expect("end");
        assert_eq!(plan(now, Some(&stored(Some(late)))), Plan::Rotate);
        // An end nobody recorded is treated as due: the CA gets one that is known.
        assert_eq!(plan(now, Some(&stored(None))), Plan::Rotate);
    }

    #[test]
    fn the_bundle_keeps_the_previous_ca_until_it_expires() {
        let now: Timestamp = "2026-06-01T00:00:00Z".parse().expect("time");
        let mut s = stored(Some(now));
        let later = now
            .saturating_add(SignedDuration::from_hours(1))
            .expect("t");
        s.previous = Some(("CA1\n".into(), Some(later)));
        assert_eq!(s.bundle(now), "CA2\nCA1\n");
        let after = later
            .saturating_add(SignedDuration::from_secs(1))
            .expect("t");
        assert_eq!(s.bundle(after), "CA2\n");
        s.previous = None;
        assert_eq!(s.bundle(now), "CA2\n");
    }
}

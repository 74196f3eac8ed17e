//! A CA kept in a Secret, so that every start and every replica issues from the same one:
//! made when the Secret is missing, replaced before its end, and the replaced CA trusted
//! beside the new one until its own end, so that what it issued keeps verifying while the
//! change spreads. The webhook server's CA and each cluster's storage-node CA are both one.
//!
//! What to do with the stored CA is a pure decision ([`plan`]); the Secret is written under
//! the resourceVersion it was read at ([`create_or_swap`]), so two writers never both
//! replace it, and the one that loses reads the CA of the one that won.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use simplyblock_certs::{Authority, Pair};

/// Annotation: when the CA stops being valid (RFC 3339).
pub const NOT_AFTER: &str = simplyblock_api::keys::NOT_AFTER_ANNOTATION;
/// Annotation: when the previous CA stops being valid (RFC 3339).
pub const PREVIOUS_NOT_AFTER: &str = simplyblock_api::keys::PREVIOUS_NOT_AFTER_ANNOTATION;
const CERT: &str = "ca.crt";
const KEY: &str = "ca.key";
const PREVIOUS_CERT: &str = "previous.crt";
/// Writes lost to another writer before giving up.
const ATTEMPTS: usize = 5;

/// What a CA is called and how long it lives.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// The CA's common name. A stored CA is reloaded under it, so it never changes.
    pub common_name: &'static str,
    /// How long a new CA is valid.
    pub validity: SignedDuration,
    /// A CA with less than this left is replaced. A replaced CA whose end was never
    /// recorded stays trusted this long: the overlap a timely replacement gives.
    pub rotate_before: SignedDuration,
}

/// What the Secret records: the CA, and the certificate of the one it replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub cert: String,
    pub key: String,
    pub not_after: Option<Timestamp>,
    pub previous: Option<(String, Option<Timestamp>)>,
}

impl Stored {
    /// Reads the record; a Secret without a CA certificate and key is an error, never
    /// overwritten, since it may hold something else under the same name.
    pub fn from_secret(secret: &Secret) -> Result<Stored, String> {
        let data = secret.data.clone().unwrap_or_default();
        let text = |k: &str| {
            data.get(k)
                .and_then(|v| String::from_utf8(v.0.clone()).ok())
                .filter(|t| !t.is_empty())
        };
        let notes = secret.metadata.annotations.clone().unwrap_or_default();
        let at = |k: &str| notes.get(k).and_then(|t| t.parse::<Timestamp>().ok());
        let required = |k: &str| text(k).ok_or_else(|| format!("{k} is missing"));
        Ok(Stored {
            cert: required(CERT)?,
            key: required(KEY)?,
            not_after: at(NOT_AFTER),
            previous: text(PREVIOUS_CERT).map(|c| (c, at(PREVIOUS_NOT_AFTER))),
        })
    }

    /// The Secret recording this, named and labelled by `metadata`.
    pub fn to_secret(&self, metadata: ObjectMeta) -> Secret {
        let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
        let mut data = BTreeMap::from([
            (CERT.to_string(), bytes(&self.cert)),
            (KEY.to_string(), bytes(&self.key)),
        ]);
        let mut notes = BTreeMap::new();
        if let Some(end) = self.not_after {
            notes.insert(NOT_AFTER.to_string(), end.to_string());
        }
        if let Some((cert, end)) = &self.previous {
            data.insert(PREVIOUS_CERT.to_string(), bytes(cert));
            if let Some(end) = end {
                notes.insert(PREVIOUS_NOT_AFTER.to_string(), end.to_string());
            }
        }
        Secret {
            metadata: ObjectMeta {
                annotations: Some(notes),
                ..metadata
            },
            type_: Some("Opaque".into()),
            data: Some(data),
            ..Secret::default()
        }
    }

    /// What to trust: this CA, and the previous one while it is still valid.
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
    /// No CA is stored: make the first.
    Create,
    /// The CA is near its end (or its end is not recorded): make a new one and keep this
    /// one's certificate in the bundle.
    Rotate,
}

/// Decides over the stored CA. Pure.
pub fn plan(now: Timestamp, stored: Option<&Stored>, policy: &Policy) -> Plan {
    match stored {
        None => Plan::Create,
        Some(s) => match s.not_after {
            Some(end) if end.duration_since(now) > policy.rotate_before => Plan::Keep,
            _ => Plan::Rotate,
        },
    }
}

/// The record after a new CA (`made`, valid until `not_after`) takes the place of
/// `stored`: the replaced one is trusted until its end, or for the overlap of `policy`
/// when its end was never recorded. Pure.
pub fn successor(
    now: Timestamp,
    stored: Option<&Stored>,
    made: Pair,
    not_after: Timestamp,
    policy: &Policy,
) -> Stored {
    Stored {
        cert: made.cert,
        key: made.key,
        not_after: Some(not_after),
        previous: stored.map(|s| {
            let end = s.not_after.unwrap_or_else(|| {
                now.saturating_add(policy.rotate_before)
                    .unwrap_or(Timestamp::MAX)
            });
            (s.cert.clone(), Some(end))
        }),
    }
}

/// The CA in force: what to issue from and what to trust.
pub struct Ca {
    pub authority: Authority,
    pub bundle: String,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading or writing Secret {secret} failed: {source}")]
    Kube {
        secret: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "the CA in Secret {secret} cannot be used ({reason}); delete the Secret and a new CA is made"
    )]
    Unusable { secret: String, reason: String },
    #[error("making a new CA failed: {0}")]
    Make(#[from] simplyblock_certs::Error),
    #[error("Secret {secret} kept changing while its CA was being stored")]
    Contended { secret: String },
}

impl From<Error> for crate::runtime::kit::Error {
    fn from(e: Error) -> crate::runtime::kit::Error {
        match e {
            Error::Kube { source, .. } => crate::runtime::kit::Error::Kube(source),
            Error::Contended { secret } => {
                crate::runtime::kit::Error::Stale(format!("Secret {secret}"))
            }
            other => crate::runtime::kit::Error::Certificate(other.to_string()),
        }
    }
}

/// Reads the CA from the Secret `metadata` names, creating or replacing it as [`plan`]
/// says; what is written carries `metadata` (labels, owners).
pub async fn ensure(
    api: &Api<Secret>,
    metadata: &ObjectMeta,
    policy: &Policy,
) -> Result<Ca, Error> {
    let name = metadata.name.clone().unwrap_or_default();
    let secret = format!(
        "{}/{name}",
        metadata.namespace.as_deref().unwrap_or_default()
    );
    let kube_error = |source| Error::Kube {
        secret: secret.clone(),
        source,
    };
    let unusable = |reason: String| Error::Unusable {
        secret: secret.clone(),
        reason,
    };
    for _ in 0..ATTEMPTS {
        let now = Timestamp::now();
        let found = api.get_opt(&name).await.map_err(kube_error)?;
        let stored = found
            .as_ref()
            .map(Stored::from_secret)
            .transpose()
            .map_err(unusable)?;
        // A stored CA must load even when it is being replaced: its certificate stays in
        // the bundle, and a bundle with something unreadable in it may be refused whole.
        let loaded = match &stored {
            Some(s) => {
                let pair = Pair {
                    cert: s.cert.clone(),
                    key: s.key.clone(),
                };
                let authority = Authority::from_pair(policy.common_name, &pair)
                    .map_err(|e| unusable(e.to_string()))?;
                Some((authority, s.bundle(now)))
            }
            None => None,
        };
        let decided = plan(now, stored.as_ref(), policy);
        if let (Plan::Keep, Some((authority, bundle))) = (decided, loaded) {
            return Ok(Ca { authority, bundle });
        }
        let end = now
            .saturating_add(policy.validity)
            .unwrap_or(Timestamp::MAX);
        let authority = Authority::new_until(policy.common_name, end.as_second())?;
        let record = successor(now, stored.as_ref(), authority.pair(), end, policy);
        let next = record.to_secret(metadata.clone());
        if create_or_swap(api, found.as_ref(), next)
            .await
            .map_err(kube_error)?
            .is_some()
        {
            tracing::info!(%secret, rotated = decided == Plan::Rotate, not_after = %end, "stored a new CA");
            return Ok(Ca {
                authority,
                bundle: record.bundle(now),
            });
        }
    }
    Err(Error::Contended { secret })
}

/// Writes `next` in place of `found`: a create when nothing was found, otherwise a replace
/// under the resourceVersion `found` was read at. `None` when another writer came first;
/// the caller reads again.
pub async fn create_or_swap(
    api: &Api<Secret>,
    found: Option<&Secret>,
    mut next: Secret,
) -> Result<Option<Secret>, kube::Error> {
    let name = next.metadata.name.clone().unwrap_or_default();
    let written = match found {
        None => api.create(&PostParams::default(), &next).await,
        Some(old) => {
            next.metadata.resource_version = old.metadata.resource_version.clone();
            api.replace(&name, &PostParams::default(), &next).await
        }
    };
    match written {
        Ok(s) => Ok(Some(s)),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: Policy = Policy {
        common_name: "test-ca",
        validity: SignedDuration::from_hours(365 * 24),
        rotate_before: SignedDuration::from_hours(365 * 8),
    };

    fn now() -> Timestamp {
        "2026-06-01T00:00:00Z".parse().expect("time")
    }

    fn at(offset: SignedDuration) -> Timestamp {
        now().saturating_add(offset).expect("time")
    }

    fn stored(end: Option<Timestamp>) -> Stored {
        Stored {
            cert: "CA2\n".into(),
            key: "k".into(),
            not_after: end,
            previous: Some(("CA1\n".into(), None)),
        }
    }

    #[test]
    fn a_ca_is_made_kept_until_its_last_stretch_then_rotated() {
        let hour = SignedDuration::from_hours(1);
        let table = [
            ("nothing stored", None, Plan::Create),
            ("fresh", Some(stored(Some(at(POLICY.validity)))), Plan::Keep),
            (
                "an hour before the line",
                Some(stored(Some(at(POLICY.rotate_before + hour)))),
                Plan::Keep,
            ),
            (
                "on the line",
                Some(stored(Some(at(POLICY.rotate_before)))),
                Plan::Rotate,
            ),
            (
                "past the line",
                Some(stored(Some(at(POLICY.rotate_before - hour)))),
                Plan::Rotate,
            ),
            ("expired", Some(stored(Some(at(-hour)))), Plan::Rotate),
            // An end nobody recorded is treated as due: the CA gets one that is known.
            ("end not recorded", Some(stored(None)), Plan::Rotate),
        ];
        for (case, s, want) in table {
            assert_eq!(plan(now(), s.as_ref(), &POLICY), want, "{case}");
        }
    }

    #[test]
    fn the_replaced_ca_is_trusted_until_its_end() {
        let made = || Pair {
            cert: "CA3\n".into(),
            key: "k3".into(),
        };
        let end = at(POLICY.validity);
        let first = successor(now(), None, made(), end, &POLICY);
        assert_eq!(first.previous, None, "a first CA replaces nothing");
        assert_eq!(first.not_after, Some(end));

        let old_end = at(SignedDuration::from_hours(24));
        let rotated = successor(now(), Some(&stored(Some(old_end))), made(), end, &POLICY);
        assert_eq!(rotated.previous, Some(("CA2\n".into(), Some(old_end))));
        assert_eq!(rotated.bundle(now()), "CA3\nCA2\n");

        let unknown = successor(now(), Some(&stored(None)), made(), end, &POLICY);
        assert_eq!(
            unknown.previous,
            Some(("CA2\n".into(), Some(at(POLICY.rotate_before)))),
            "a CA of unknown end is trusted for the overlap"
        );
    }

    #[test]
    fn the_bundle_keeps_the_previous_ca_until_it_expires() {
        let mut s = stored(Some(now()));
        let later = at(SignedDuration::from_hours(1));
        s.previous = Some(("CA1\n".into(), Some(later)));
        assert_eq!(s.bundle(now()), "CA2\nCA1\n");
        let after = later
            .saturating_add(SignedDuration::from_secs(1))
            .expect("t");
        assert_eq!(s.bundle(after), "CA2\n");
        s.previous = None;
        assert_eq!(s.bundle(now()), "CA2\n");
    }

    #[test]
    fn the_record_survives_its_secret() {
        let mut s = stored(Some(at(POLICY.validity)));
        s.previous = Some(("CA1\n".into(), Some(at(POLICY.rotate_before))));
        let metadata = ObjectMeta {
            name: Some("ca".into()),
            labels: Some(BTreeMap::from([("a".into(), "b".into())])),
            ..ObjectMeta::default()
        };
        let secret = s.to_secret(metadata);
        assert_eq!(Stored::from_secret(&secret), Ok(s));
        assert_eq!(secret.metadata.name.as_deref(), Some("ca"));
        assert_eq!(
            secret.metadata.labels.unwrap_or_default().get("a"),
            Some(&"b".to_string())
        );

        let mut keyless = stored(None).to_secret(ObjectMeta::default());
        if let Some(data) = keyless.data.as_mut() {
            data.remove(KEY);
        }
        assert_eq!(
            Stored::from_secret(&keyless),
            Err("ca.key is missing".to_string())
        );
    }
}

//! The storage-node API's serving certificate: a CA per cluster, stored in a Secret of its
//! own so that it survives operator restarts, and a serving certificate issued from it for
//! every name the control plane reaches a node by.
//!
//! Whether to issue is a pure decision over what the Secret records ([`decide`]); the
//! caller writes the Secret with an optimistic lock, so two writers never both issue.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use super::names::SERVICE_NAME;

/// The CA's common name. A stored CA is reloaded under it, so it never changes.
pub const CA_COMMON_NAME: &str = "simplyblock-storage-node-ca";
/// How long a serving certificate is valid.
pub const VALIDITY: SignedDuration = SignedDuration::from_hours(365 * 24);
/// How long before its end a serving certificate is replaced: a month of outage of the
/// operator is survived without a node presenting an expired certificate.
pub const RENEW_BEFORE: SignedDuration = SignedDuration::from_hours(30 * 24);

/// Annotation on the serving Secret: when its certificate stops being valid (RFC 3339).
pub const NOT_AFTER_ANNOTATION: &str = "storage.simplyblock.io/not-after";
/// Annotation on the serving Secret: the DNS names its certificate holds, comma-separated.
pub const NAMES_ANNOTATION: &str = "storage.simplyblock.io/dns-names";
/// Annotation on the pod template: the serving Secret's resourceVersion, so a pod
/// created after a reissue is visibly of the new certificate.
pub const TEMPLATE_ANNOTATION: &str = "storage.simplyblock.io/serving-certificate-version";

/// The Secret holding the cluster's CA certificate and key.
pub fn ca_secret_name(cluster: &str) -> String {
    format!("simplyblock-storage-node-ca-{cluster}")
}

/// The `kubernetes.io/tls` Secret the storage-node pods mount.
pub fn tls_secret_name(cluster: &str) -> String {
    format!("simplyblock-storage-node-tls-{cluster}")
}

/// Every name a storage node is reached by: `<worker>.simplyblock-storage-node-api.<ns>.svc`
/// with and without the cluster domain, and the Service itself.
pub fn dns_names(namespace: &str) -> Vec<String> {
    let service = format!("{SERVICE_NAME}.{namespace}.svc");
    vec![
        service.clone(),
        format!("{service}.cluster.local"),
        format!("*.{service}"),
        format!("*.{service}.cluster.local"),
    ]
}

/// What a serving Secret records about the certificate it holds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recorded {
    /// Both `tls.crt` and `tls.key` are present.
    pub complete: bool,
    /// The `ca.crt` it carries.
    pub ca: Option<String>,
    pub not_after: Option<Timestamp>,
    pub names: Option<String>,
}

impl Recorded {
    /// Reads the record from a Secret's annotations and data (decoded).
    pub fn from_parts(
        annotations: &BTreeMap<String, String>,
        data: &BTreeMap<String, Vec<u8>>,
    ) -> Recorded {
        let text = |k: &str| {
            data.get(k)
                .and_then(|v| String::from_utf8(v.clone()).ok())
                .filter(|s| !s.is_empty())
        };
        Recorded {
            complete: text("tls.crt").is_some() && text("tls.key").is_some(),
            ca: text("ca.crt"),
            not_after: annotations
                .get(NOT_AFTER_ANNOTATION)
                .and_then(|t| t.parse().ok()),
            names: annotations.get(NAMES_ANNOTATION).cloned(),
        }
    }
}

/// Whether the serving certificate stands, and if not why a new one is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Keep,
    Issue(&'static str),
}

/// Decides over the recorded certificate, the CA in force and the names wanted. Pure.
pub fn decide(
    now: Timestamp,
    recorded: Option<&Recorded>,
    ca_pem: &str,
    names: &[String],
) -> Decision {
    let Some(r) = recorded else {
        return Decision::Issue("there is no serving certificate yet");
    };
    if !r.complete {
        return Decision::Issue("the serving Secret lacks its certificate or key");
    }
    if r.ca.as_deref() != Some(ca_pem) {
        return Decision::Issue("the certificate is not from the cluster's CA");
    }
    if r.names.as_deref() != Some(names.join(",").as_str()) {
        return Decision::Issue("the certificate does not hold the names the nodes are reached by");
    }
    match r.not_after {
        None => Decision::Issue("the certificate's end of validity is not recorded"),
        Some(end) if end.duration_since(now) <= RENEW_BEFORE => {
            Decision::Issue("the certificate is due for renewal")
        }
        Some(_) => Decision::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-06-01T00:00:00Z".parse().expect("time")
    }

    fn fresh(names: &[String]) -> Recorded {
        Recorded {
            complete: true,
            ca: Some("CA".into()),
            not_after: Some(now() + VALIDITY),
            names: Some(names.join(",")),
        }
    }

    #[test]
    fn a_fresh_certificate_from_the_same_ca_for_the_same_names_stands() {
        let names = dns_names("storage");
        assert_eq!(
            decide(now(), Some(&fresh(&names)), "CA", &names),
            Decision::Keep
        );
    }

    #[test]
    fn each_defect_is_a_reason_to_issue() {
        let names = dns_names("storage");
        let issue = |r: Recorded| decide(now(), Some(&r), "CA", &names);
        assert!(matches!(
            decide(now(), None, "CA", &names),
            Decision::Issue(_)
        ));
        let cases = [
            Recorded {
                complete: false,
                ..fresh(&names)
            },
            Recorded {
                ca: Some("OTHER".into()),
                ..fresh(&names)
            },
            Recorded {
                names: Some(dns_names("elsewhere").join(",")),
                ..fresh(&names)
            },
            Recorded {
                not_after: None,
                ..fresh(&names)
            },
            Recorded {
                not_after: Some(now() + RENEW_BEFORE),
                ..fresh(&names)
            },
        ];
        let reasons: Vec<Decision> = cases.into_iter().map(issue).collect();
        for r in &reasons {
            assert!(matches!(r, Decision::Issue(_)), "{reasons:?}");
        }
        let mut distinct: Vec<_> = reasons.iter().map(|r| format!("{r:?}")).collect();
        distinct.dedup();
        assert_eq!(distinct.len(), reasons.len(), "one reason per defect");
        // A day past the renewal line it still stands.
        let later = Recorded {
            not_after: Some(now() + RENEW_BEFORE + SignedDuration::from_hours(24)),
            ..fresh(&names)
        };
        assert_eq!(issue(later), Decision::Keep);
    }

    #[test]
    fn the_record_is_read_from_annotations_and_data() {
        let names = dns_names("ns");
        let end = now() + VALIDITY;
        let annotations = BTreeMap::from([
            (NOT_AFTER_ANNOTATION.to_string(), end.to_string()),
            (NAMES_ANNOTATION.to_string(), names.join(",")),
        ]);
        let data = BTreeMap::from([
            ("tls.crt".to_string(), b"CERT".to_vec()),
            ("tls.key".to_string(), b"KEY".to_vec()),
            ("ca.crt".to_string(), b"CA".to_vec()),
        ]);
        let r = Recorded::from_parts(&annotations, &data);
        assert_eq!(
            r,
            Recorded {
                complete: true,
                ca: Some("CA".into()),
                not_after: Some(end),
                names: Some(names.join(",")),
            }
        );
        let empty_key = BTreeMap::from([("tls.crt".to_string(), b"CERT".to_vec())]);
        assert!(!Recorded::from_parts(&annotations, &empty_key).complete);
    }

    #[test]
    fn the_names_cover_every_worker_of_the_namespace() {
        let names = dns_names("sb");
        assert!(names.contains(&"*.simplyblock-storage-node-api.sb.svc.cluster.local".into()));
        assert!(names.contains(&"*.simplyblock-storage-node-api.sb.svc".into()));
    }
}

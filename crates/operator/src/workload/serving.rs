//! The storage-node API's serving certificate: a CA per cluster, kept in a Secret of its
//! own by [`crate::runtime::ca`] (so that it survives operator restarts, and is replaced before its
//! end with the previous one still trusted), and a serving certificate issued from it for
//! every name the control plane reaches a node by.
//!
//! Whether to issue is a pure decision over what the Secret records ([`decide`]); the
//! caller writes the Secret with an optimistic lock, so two writers never both issue.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use simplyblock_api::StorageCluster;
use simplyblock_certs::Pair;

use super::names::{CLUSTER_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME};

/// The cluster's CA: valid ten years and replaced with a third of its life left, so a
/// serving certificate (a year) never outlives the CA it chains to, and one issued just
/// before the replacement still verifies against the previous CA, trusted until its end.
pub const CA_POLICY: crate::runtime::ca::Policy = crate::runtime::ca::Policy {
    // A stored CA is reloaded under its common name, so it never changes.
    common_name: "simplyblock-storage-node-ca",
    validity: SignedDuration::from_hours(10 * 365 * 24),
    rotate_before: SignedDuration::from_hours(10 * 365 * 24 / 3),
};
/// How long a serving certificate is valid.
pub const VALIDITY: SignedDuration = SignedDuration::from_hours(365 * 24);
/// How long before its end a serving certificate is replaced: a month of outage of the
/// operator is survived without a node presenting an expired certificate.
pub const RENEW_BEFORE: SignedDuration = SignedDuration::from_hours(30 * 24);

/// Annotation on the serving Secret: when its certificate stops being valid (RFC 3339).
pub const NOT_AFTER_ANNOTATION: &str = simplyblock_api::keys::NOT_AFTER_ANNOTATION;
/// Annotation on the serving Secret: the DNS names its certificate holds, comma-separated.
pub const NAMES_ANNOTATION: &str = simplyblock_api::keys::DNS_NAMES_ANNOTATION;
/// Annotation on the serving Secret: what its certificate is for.
pub const USAGES_ANNOTATION: &str = simplyblock_api::keys::CERTIFICATE_USAGES_ANNOTATION;
/// What a node's certificate is for: it serves with it and calls out with it.
pub const USAGES: &str = "server,client";
/// Annotation on the pod template: the serving Secret's resourceVersion, so a pod
/// created after a reissue is visibly of the new certificate.
pub const TEMPLATE_ANNOTATION: &str = simplyblock_api::keys::SERVING_CERTIFICATE_VERSION_ANNOTATION;

/// How the Secret of every cluster's CA is named: this, then the cluster's name.
pub const CA_SECRET_PREFIX: &str = "simplyblock-storage-node-ca-";

/// The Secret holding the cluster's CA certificate and key.
pub fn ca_secret_name(cluster: &str) -> String {
    format!("{CA_SECRET_PREFIX}{cluster}")
}

/// The `kubernetes.io/tls` Secret the storage-node pods mount.
pub fn tls_secret_name(cluster: &str) -> String {
    format!("simplyblock-storage-node-tls-{cluster}")
}

/// The metadata of the cluster's Secrets: the controller watches them by their label, and
/// they go with the cluster.
pub fn secret_metadata(cluster: &StorageCluster, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: cluster.namespace(),
        labels: Some(BTreeMap::from([
            (CLUSTER_LABEL.to_string(), cluster.name_any()),
            (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
        ])),
        owner_references: cluster.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// The `kubernetes.io/tls` Secret of a certificate `issued` for `names`, valid until
/// `not_after`, with the CAs to trust (`bundle`) as `ca.crt`.
pub fn tls_secret(
    cluster: &StorageCluster,
    issued: Pair,
    bundle: &str,
    not_after: Timestamp,
    names: &[String],
) -> Secret {
    let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
    let metadata = secret_metadata(cluster, &tls_secret_name(&cluster.name_any()));
    Secret {
        metadata: ObjectMeta {
            annotations: Some(BTreeMap::from([
                (NOT_AFTER_ANNOTATION.to_string(), not_after.to_string()),
                (NAMES_ANNOTATION.to_string(), names.join(",")),
                (USAGES_ANNOTATION.to_string(), USAGES.to_string()),
            ])),
            ..metadata
        },
        type_: Some("kubernetes.io/tls".to_string()),
        data: Some(BTreeMap::from([
            ("tls.crt".to_string(), bytes(&issued.cert)),
            ("tls.key".to_string(), bytes(&issued.key)),
            ("ca.crt".to_string(), bytes(bundle)),
        ])),
        ..Secret::default()
    }
}

/// What the storage nodes trust (`ca.crt`): their cluster's CAs, which sign the
/// operator's client certificate and the nodes' own, and the control plane's CAs when
/// they are known, so that the control plane's client certificate verifies and the nodes
/// verify the control plane. Pure.
pub fn trust_bundle(cluster_cas: &str, control_plane_cas: Option<&str>) -> String {
    let mut bundle = cluster_cas.trim_end().to_string();
    bundle.push('\n');
    if let Some(cp) = control_plane_cas.map(str::trim).filter(|c| !c.is_empty()) {
        bundle.push_str(cp);
        bundle.push('\n');
    }
    bundle
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
    /// The `ca.crt` it carries: the bundle of CAs it was written with.
    pub ca: Option<String>,
    pub not_after: Option<Timestamp>,
    pub names: Option<String>,
    pub usages: Option<String>,
}

impl Recorded {
    /// Reads the record of a serving Secret.
    pub fn from_secret(secret: &Secret) -> Recorded {
        let data: BTreeMap<String, Vec<u8>> = secret
            .data
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        Recorded::from_parts(secret.annotations(), &data)
    }

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
            usages: annotations.get(USAGES_ANNOTATION).cloned(),
        }
    }
}

/// Whether the serving certificate stands, and if not why a new one is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Keep,
    Issue(&'static str),
}

/// Decides over the recorded certificate, the bundle of the CAs in force (the first of
/// which issues) and the names wanted. Pure.
pub fn decide(
    now: Timestamp,
    recorded: Option<&Recorded>,
    bundle: &str,
    names: &[String],
) -> Decision {
    let Some(r) = recorded else {
        return Decision::Issue("there is no serving certificate yet");
    };
    if !r.complete {
        return Decision::Issue("the serving Secret lacks its certificate or key");
    }
    if r.ca.as_deref() != Some(bundle) {
        return Decision::Issue(
            "the CAs the nodes trust changed (the cluster's, or the control plane's)",
        );
    }
    if r.names.as_deref() != Some(names.join(",").as_str()) {
        return Decision::Issue("the certificate does not hold the names the nodes are reached by");
    }
    if r.usages.as_deref() != Some(USAGES) {
        return Decision::Issue(
            "the certificate is not also for client auth, which the nodes call out with",
        );
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

    #[test]
    fn the_nodes_trust_their_clusters_cas_and_the_control_planes() {
        assert_eq!(trust_bundle("CA2\nCA1\n", None), "CA2\nCA1\n");
        assert_eq!(trust_bundle("CA2\nCA1", Some(" ")), "CA2\nCA1\n");
        assert_eq!(trust_bundle("CA2\nCA1\n", Some("CP\n")), "CA2\nCA1\nCP\n");
    }

    fn now() -> Timestamp {
        "2026-06-01T00:00:00Z".parse().expect("time")
    }

    fn fresh(names: &[String]) -> Recorded {
        Recorded {
            complete: true,
            ca: Some("CA".into()),
            not_after: Some(now() + VALIDITY),
            names: Some(names.join(",")),
            usages: Some(USAGES.into()),
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
            // Issued before the nodes called out with it: server auth only.
            Recorded {
                usages: None,
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
            (USAGES_ANNOTATION.to_string(), USAGES.to_string()),
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
                usages: Some(USAGES.into()),
            }
        );
        let empty_key = BTreeMap::from([("tls.crt".to_string(), b"CERT".to_vec())]);
        assert!(!Recorded::from_parts(&annotations, &empty_key).complete);
    }

    #[test]
    fn a_written_certificate_reads_back_as_one_that_stands() {
        let cluster: StorageCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
            "metadata": {"name": "sb", "namespace": "storage", "uid": "u-1"},
            "spec": {"maxSubsystemCount": 10, "vcpuCount": 4},
        }))
        .expect("cluster");
        let names = dns_names("storage");
        let issued = Pair {
            cert: "CERT".into(),
            key: "KEY".into(),
        };
        let secret = tls_secret(&cluster, issued, "CA2\nCA1\n", now() + VALIDITY, &names);
        assert_eq!(
            secret.metadata.name.as_deref(),
            Some("simplyblock-storage-node-tls-sb")
        );
        assert_eq!(
            secret.metadata.labels.clone().unwrap_or_default()[MANAGED_BY_LABEL],
            MANAGED_BY,
            "the controller watches its Secrets by this label"
        );
        let recorded = Recorded::from_secret(&secret);
        assert_eq!(
            decide(now(), Some(&recorded), "CA2\nCA1\n", &names),
            Decision::Keep
        );
        assert!(
            matches!(
                decide(now(), Some(&recorded), "CA2\n", &names),
                Decision::Issue(_)
            ),
            "a bundle that changed is written again"
        );
    }

    #[test]
    fn the_names_cover_every_worker_of_the_namespace() {
        let names = dns_names("sb");
        assert!(names.contains(&"*.simplyblock-storage-node-api.sb.svc.cluster.local".into()));
        assert!(names.contains(&"*.simplyblock-storage-node-api.sb.svc".into()));
    }
}

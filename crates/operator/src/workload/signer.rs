//! The signer of the storage nodes' own certificates ([`STORAGE_NODE_SIGNER`]).
//!
//! A storage-node pod asks for its certificate through a `podCertificate` projected
//! volume: its kubelet makes a key and a PodCertificateRequest naming the pod, its
//! ServiceAccount and its Node, which the API server checks against the pod (and, under
//! the Node authorizer and NodeRestriction, lets only that Node's kubelet make). The
//! operator issues it from the cluster's CA for that worker's name alone
//! (`<worker>.simplyblock-storage-node-api.<ns>.svc`), with server and client auth, when
//! the pod runs as the storage-node account of a cluster of its namespace and the worker
//! is enrolled in that cluster. A compromised worker so holds only its own node's key:
//! it can serve or call as no other storage node.
//!
//! Whether to issue is decided purely ([`decide`]) from what the request says and what
//! the cluster's objects say; the status write is guarded by the resourceVersion read,
//! and the API server keeps an issued or denied request as it is.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::certificates::v1::PodCertificateRequest;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde_json::json;
use simplyblock_api::StorageCluster;
use simplyblock_api::keys::STORAGE_NODE_SIGNER;

pub use super::names::account;
use super::names::{ENROLLMENT_LABEL, NAMESPACE_LABEL, SERVICE_NAME};
use super::serving;
use crate::runtime::context::Context;
use crate::runtime::kit::{self, Error};

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "storagenode-certificates";

/// The longest a storage node's certificate is valid, whatever the pod asks: the kubelet
/// asks for a new one at two thirds of it.
pub const MAX_LIFETIME: SignedDuration =
    SignedDuration::from_secs(super::manifests::POD_CERTIFICATE_MAX_EXPIRATION_SECONDS as i64);

/// How soon a request whose cluster has no CA yet is looked at again (the workload
/// controller writes the CA with the cluster's first pass).
const CA_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The names a storage node on `worker` is reached by, and no other's.
pub fn names(worker: &str, namespace: &str) -> Vec<String> {
    let host = format!("{worker}.{SERVICE_NAME}.{namespace}.svc");
    vec![host.clone(), format!("{host}.cluster.local")]
}

/// What a request asks, as the signer reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    pub account: String,
    pub node: String,
    pub max_lifetime: Option<SignedDuration>,
}

/// What the cluster's objects say about the request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// The StorageClusters of the request's namespace, by name.
    pub clusters: Vec<String>,
    /// The labels of the request's Node, when it exists.
    pub node_labels: Option<BTreeMap<String, String>>,
    /// The pod named, when it exists: its uid, its Node and its account.
    pub pod: Option<(String, String, String)>,
}

/// What to do with a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Issue from `cluster`'s CA for `names`, valid for `lifetime`.
    Issue {
        cluster: String,
        names: Vec<String>,
        lifetime: SignedDuration,
    },
    /// Refuse for good, saying why.
    Deny {
        reason: &'static str,
        message: String,
    },
}

/// Decides over a request. Pure.
pub fn decide(request: &Request, facts: &Facts) -> Verdict {
    let deny = |reason, message| Verdict::Deny { reason, message };
    let Some(cluster) = facts
        .clusters
        .iter()
        .find(|c| account(c) == request.account)
    else {
        return deny(
            "NotAStorageNode",
            format!(
                "pod {}/{} runs as ServiceAccount {}, which is no StorageCluster's storage-node account in namespace {}: only storage-node pods get a certificate of this signer",
                request.namespace, request.pod, request.account, request.namespace
            ),
        );
    };
    match &facts.pod {
        Some((uid, node, pod_account))
            if *uid == request.pod_uid
                && *node == request.node
                && *pod_account == request.account => {}
        _ => {
            return deny(
                "PodMismatch",
                format!(
                    "pod {}/{} with uid {} running on {} as {} does not exist: the request does not describe a pod of this cluster",
                    request.namespace, request.pod, request.pod_uid, request.node, request.account
                ),
            );
        }
    }
    let labels = facts.node_labels.clone().unwrap_or_default();
    let enrolled = labels.get(ENROLLMENT_LABEL) == Some(cluster)
        && labels
            .get(NAMESPACE_LABEL)
            .is_none_or(|ns| *ns == request.namespace);
    if !enrolled {
        return deny(
            "WorkerNotEnrolled",
            format!(
                "worker {} is not enrolled in StorageCluster {}/{} (label {ENROLLMENT_LABEL}): no storage node of that cluster runs there",
                request.node, request.namespace, cluster
            ),
        );
    }
    let lifetime = request
        .max_lifetime
        .map_or(MAX_LIFETIME, |asked| asked.min(MAX_LIFETIME));
    Verdict::Issue {
        cluster: cluster.clone(),
        names: names(&request.node, &request.namespace),
        lifetime,
    }
}

/// Whether the request is one of this signer's that nobody has answered yet.
fn open(pcr: &PodCertificateRequest) -> bool {
    pcr.spec.signer_name == STORAGE_NODE_SIGNER
        && !pcr
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| matches!(c.type_.as_str(), "Issued" | "Denied" | "Failed"))
            })
}

/// How often the signer asks again whether PodCertificateRequests are served, while they
/// are not (an API server upgraded in place starts serving them).
const DISCOVERY_RETRY: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs the signer until the operator stops. Where the API server serves no
/// PodCertificateRequests there is nothing to sign (the workload mounts the cluster's
/// shared certificate instead, [`pod_certificates_api`]): it waits until they are.
pub async fn run(ctx: Arc<Context>) {
    let shutdown = ctx.shutdown.clone();
    loop {
        match pod_certificates_api(&ctx.kube).await {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, "could not tell whether PodCertificateRequests are served")
            }
        }
        tokio::select! {
            () = tokio::time::sleep(DISCOVERY_RETRY) => {}
            () = shutdown.clone().wait() => return,
        }
    }
    let controller = Controller::new(
        ctx.scope.api::<PodCertificateRequest>(&ctx.kube),
        watcher::Config::default(),
    );
    kit::run(CONTROLLER, controller, reconcile, ctx).await
}

pub async fn reconcile(
    pcr: Arc<PodCertificateRequest>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    if !open(&pcr) {
        return Ok(Action::await_change());
    }
    let ns = pcr.namespace().unwrap_or_default();
    let spec = &pcr.spec;
    let request = Request {
        namespace: ns.clone(),
        pod: spec.pod_name.clone(),
        pod_uid: spec.pod_uid.clone(),
        account: spec.service_account_name.clone(),
        node: spec.node_name.clone(),
        max_lifetime: spec
            .max_expiration_seconds
            .map(|s| SignedDuration::from_secs(i64::from(s))),
    };
    let facts = Facts {
        clusters: Api::<StorageCluster>::namespaced(ctx.kube.clone(), &ns)
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(|c| c.name_any())
            .collect(),
        node_labels: Api::<Node>::all(ctx.kube.clone())
            .get_opt(&spec.node_name)
            .await?
            .map(|n| n.labels().clone()),
        pod: Api::<Pod>::namespaced(ctx.kube.clone(), &ns)
            .get_opt(&spec.pod_name)
            .await?
            .map(|p| {
                let spec = p.spec.clone().unwrap_or_default();
                (
                    p.uid().unwrap_or_default(),
                    spec.node_name.unwrap_or_default(),
                    spec.service_account_name.unwrap_or_default(),
                )
            }),
    };
    let now = Timestamp::now();
    let status = match decide(&request, &facts) {
        Verdict::Deny { reason, message } => {
            tracing::warn!(request = %pcr.name_any(), namespace = %ns, reason, %message, "denied a storage-node certificate");
            json!({"conditions": [condition("Denied", reason, &message, now)]})
        }
        Verdict::Issue {
            cluster,
            names,
            lifetime,
        } => {
            // The CA is the workload controller's to make; until it exists, wait.
            let ca_secret = serving::ca_secret_name(&cluster);
            let Some(secret) = Api::<Secret>::namespaced(ctx.kube.clone(), &ns)
                .get_opt(&ca_secret)
                .await?
            else {
                return Ok(Action::requeue(CA_WAIT));
            };
            let stored = crate::runtime::ca::Stored::from_secret(&secret)
                .map_err(|why| Error::Held(format!("Secret {ns}/{ca_secret}: {why}")))?;
            let authority = simplyblock_certs::Authority::from_pair(
                serving::CA_POLICY.common_name,
                &simplyblock_certs::Pair {
                    cert: stored.cert.clone(),
                    key: stored.key.clone(),
                },
            )?;
            // A minute back: the API server wants notBefore within five minutes of its
            // clock, and a node whose clock is a little behind still accepts it.
            let not_before = Timestamp::from_second(now.as_second() - 60)
                .map_err(|e| Error::Held(format!("the clock: {e}")))?;
            let not_after = not_before + lifetime;
            let dns: Vec<&str> = names.iter().map(String::as_str).collect();
            let leaf = authority.peer_for_request(
                &spec.stub_pkc_s10_request.0,
                &request.node,
                &dns,
                not_before.as_second(),
                not_after.as_second(),
            )?;
            let refresh_at = not_before + SignedDuration::from_secs(lifetime.as_secs() * 2 / 3);
            tracing::info!(request = %pcr.name_any(), namespace = %ns, worker = %request.node, %cluster, not_after = %not_after, "issued a storage-node certificate");
            json!({
                "conditions": [condition(
                    "Issued",
                    "Issued",
                    &format!("issued by StorageCluster {cluster}'s CA for worker {}", request.node),
                    now,
                )],
                "certificateChain": leaf,
                "notBefore": Time(not_before),
                "notAfter": Time(not_after),
                "beginRefreshAt": Time(refresh_at),
            })
        }
    };
    // Guarded: a request another replica answered meanwhile is not answered again.
    let patch = json!({
        "metadata": {"resourceVersion": pcr.resource_version()},
        "status": status,
    });
    Api::<PodCertificateRequest>::namespaced(ctx.kube.clone(), &ns)
        .patch_status(
            &pcr.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    Ok(Action::await_change())
}

fn condition(type_: &str, reason: &str, message: &str, now: Timestamp) -> Condition {
    Condition {
        type_: type_.into(),
        status: "True".into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: Time(now),
        observed_generation: None,
    }
}

/// The API group and version of PodCertificateRequests.
const POD_CERTIFICATES_API: &str = "certificates.k8s.io/v1";

/// Whether the API server serves PodCertificateRequests ([`POD_CERTIFICATES_API`]): then
/// each storage-node pod gets a certificate of its own through a `podCertificate` projected
/// volume, issued by the operator's signer, rather than the cluster's shared one. Asked of
/// API discovery on every pass, so an upgraded API server is noticed without a restart; a
/// group version it does not serve (404) is `false`, any other error is an error.
pub async fn pod_certificates_api(client: &kube::Client) -> Result<bool, Error> {
    match client.list_api_group_resources(POD_CERTIFICATES_API).await {
        Ok(list) => Ok(list
            .resources
            .iter()
            .any(|r| r.name == "podcertificaterequests")),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            namespace: "ns".into(),
            pod: "simplyblock-storage-node-sb-w1".into(),
            pod_uid: "uid-1".into(),
            account: account("sb"),
            node: "w1".into(),
            max_lifetime: Some(SignedDuration::from_hours(24)),
        }
    }

    fn facts() -> Facts {
        Facts {
            clusters: vec!["other".into(), "sb".into()],
            node_labels: Some(BTreeMap::from([
                (ENROLLMENT_LABEL.to_string(), "sb".to_string()),
                (NAMESPACE_LABEL.to_string(), "ns".to_string()),
            ])),
            pod: Some(("uid-1".into(), "w1".into(), account("sb"))),
        }
    }

    #[test]
    fn a_storage_node_on_its_enrolled_worker_gets_that_workers_names_alone() {
        assert_eq!(
            decide(&request(), &facts()),
            Verdict::Issue {
                cluster: "sb".into(),
                names: vec![
                    "w1.simplyblock-storage-node-api.ns.svc".into(),
                    "w1.simplyblock-storage-node-api.ns.svc.cluster.local".into(),
                ],
                lifetime: SignedDuration::from_hours(24),
            }
        );
        // No wildcard, no other worker's name.
        let Verdict::Issue { names, .. } = decide(&request(), &facts()) else {
            panic!("denied");
        };
        assert!(names.iter().all(|n| n.starts_with("w1.")), "{names:?}");
    }

    #[test]
    fn the_lifetime_is_what_the_pod_asks_up_to_thirty_days() {
        let mut long = request();
        long.max_lifetime = Some(SignedDuration::from_hours(91 * 24));
        let mut unsaid = request();
        unsaid.max_lifetime = None;
        for r in [long, unsaid] {
            let Verdict::Issue { lifetime, .. } = decide(&r, &facts()) else {
                panic!("denied");
            };
            assert_eq!(lifetime, MAX_LIFETIME);
        }
    }

    #[test]
    fn anything_but_a_storage_node_of_an_enrolled_worker_is_denied_saying_why() {
        let deny_reason = |r: &Request, f: &Facts| match decide(r, f) {
            Verdict::Deny { reason, message } => {
                assert!(
                    message.contains(&r.node) || message.contains(&r.account),
                    "{message}"
                );
                reason
            }
            issued => panic!("issued: {issued:?}"),
        };
        // Another account of the namespace (the CSI driver's, say).
        let mut r = request();
        r.account = "simplyblock-csi-node-sa".into();
        assert_eq!(deny_reason(&r, &facts()), "NotAStorageNode");
        // A worker of another cluster, of the same cluster in another namespace, or of none.
        for labels in [
            BTreeMap::from([(ENROLLMENT_LABEL.to_string(), "other".to_string())]),
            BTreeMap::from([
                (ENROLLMENT_LABEL.to_string(), "sb".to_string()),
                (NAMESPACE_LABEL.to_string(), "elsewhere".to_string()),
            ]),
            BTreeMap::new(),
        ] {
            let f = Facts {
                node_labels: Some(labels),
                ..facts()
            };
            assert_eq!(deny_reason(&request(), &f), "WorkerNotEnrolled");
        }
        let f = Facts {
            node_labels: None,
            ..facts()
        };
        assert_eq!(deny_reason(&request(), &f), "WorkerNotEnrolled");
        // A request that names a pod that is not there, or another one.
        for pod in [
            None,
            Some(("uid-2".into(), "w1".into(), account("sb"))),
            Some(("uid-1".into(), "w2".into(), account("sb"))),
        ] {
            let f = Facts { pod, ..facts() };
            assert_eq!(deny_reason(&request(), &f), "PodMismatch");
        }
    }
}

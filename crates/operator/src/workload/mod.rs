//! The storage-node workload of a cluster: worker enrollment, the DaemonSet, the headless
//! Service with the cluster's EndpointSlice, the pods' ServiceAccount and Role, the serving
//! certificate of the storage-node API ([`serving`]), and the per-node
//! configuration. A second controller on StorageCluster that writes none of its status.
//!
//! The objects are built by a pure function ([`manifests()`]); this module reads what they
//! are built from and applies each of them.
//!
//! Enrollment comes first: the DaemonSet only schedules on workers carrying the
//! enrollment label, and a node waits at CheckingHost for the pod that DaemonSet runs, so
//! a label nobody writes is a deadlock in which neither side reports anything wrong.
//!
//! The enrollment label is one a kubelet may not set on its own Node. Earlier releases
//! used one it may ([`LEGACY_ENROLLMENT_LABEL`]): the new label is written before the
//! DaemonSet selects on it, and the old one removed only after, so no pod is evicted.

pub mod client_tls;
pub mod manifests;
pub mod names;
pub mod serving;
pub mod signer;
pub mod snode;

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use simplyblock_api::storage_node_ops::{NodeAction, StorageNodeOps};
use simplyblock_api::{StorageCluster, StorageNode};

pub use manifests::{Manifests, Worker, manifests};
pub use names::{
    DEFAULT_IMAGE, ENROLLMENT_LABEL, LEGACY_ENROLLMENT_LABEL, NAMESPACE_LABEL, SERVICE_NAME,
    topology_label,
};
use serving::{Decision, Recorded};

use crate::runtime::context::{Context, requeue};
use crate::runtime::kit::{self, Error};

const MANAGER: &str = "storagenode-workload";

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "storagenode-workload";

/// Runs the controller until the operator stops.
pub async fn run(ctx: Arc<Context>) {
    let controller = Controller::new(
        ctx.scope.api::<StorageCluster>(&ctx.kube),
        watcher::Config::default(),
    );
    let clusters_store = controller.store();
    let controller = controller
        // A lost or edited serving Secret is issued again at once, not at the next resync.
        .owns(
            ctx.scope.api::<Secret>(&ctx.kube),
            watcher::Config::default().labels(&format!(
                "{}={}",
                names::MANAGED_BY_LABEL,
                names::MANAGED_BY
            )),
        )
        // A Migrate's target joins the workload when the operation appears, and leaves it
        // when the operation ends.
        .watches(
            ctx.scope
                .api::<simplyblock_api::storage_node_ops::StorageNodeOps>(&ctx.kube),
            watcher::Config::default(),
            move |op: simplyblock_api::storage_node_ops::StorageNodeOps| {
                let migrating =
                    op.spec.action == simplyblock_api::storage_node_ops::NodeAction::Migrate;
                clusters_store
                    .state()
                    .into_iter()
                    .filter(|_| migrating)
                    .filter(|c| c.namespace() == op.namespace())
                    .map(|c| ObjectRef::from_obj(&*c))
                    .collect::<Vec<_>>()
            },
        )
        .watches(
            ctx.scope.api::<StorageNode>(&ctx.kube),
            watcher::Config::default(),
            |n: StorageNode| {
                Some(
                    ObjectRef::<StorageCluster>::new(&n.spec.cluster_ref)
                        .within(&n.namespace().unwrap_or_default()),
                )
            },
        );
    // The storage nodes' own certificates are signed beside the workload that asks for
    // them.
    tokio::join!(
        kit::run(CONTROLLER, controller, reconcile, ctx.clone()),
        signer::run(ctx)
    );
}

pub async fn reconcile(cluster: Arc<StorageCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    if cluster.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let nodes: Vec<StorageNode> = Api::<StorageNode>::namespaced(ctx.kube.clone(), &ns)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|n| n.spec.cluster_ref == name)
        .collect();
    // A node moving to another worker is served there too until it has moved.
    let nodes = with_targets(&ctx.kube, &ns, nodes).await?;
    enroll(&ctx, &cluster, &nodes).await?;
    render(&ctx, &cluster, &nodes).await?;
    retire_legacy_label(&ctx, &cluster, &nodes).await?;
    Ok(Action::requeue(requeue::RESYNC))
}

/// Labels every worker with a node of this cluster, and its slots' topology labels;
/// removes the label from workers that no longer have one. Any read error aborts the
/// whole rebuild, so a failed list never strips the fleet of its labels.
async fn enroll(
    ctx: &Context,
    cluster: &StorageCluster,
    nodes: &[StorageNode],
) -> Result<(), Error> {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let wanted = manifests::enrollment(cluster, nodes);
    let workers: Api<Node> = Api::all(ctx.kube.clone());
    // Enrolled by this cluster: its name, and its namespace or none (a label written
    // before workers carried the namespace).
    let enrolled: BTreeSet<String> = workers
        .list_metadata(&ListParams::default().labels(&format!("{ENROLLMENT_LABEL}={name}")))
        .await?
        .items
        .into_iter()
        .filter(|n| enrolled_elsewhere(n.labels(), &name, &ns).is_none())
        .filter_map(|n| n.metadata.name)
        .collect();
    for (worker, labels) in &wanted {
        let Some(current) = workers.get_metadata_opt(worker).await? else {
            continue;
        };
        let have = current.metadata.labels.unwrap_or_default();
        if let Some(other) = enrolled_elsewhere(&have, &name, &ns) {
            ctx.event(
                cluster,
                true,
                "WorkerEnrolledElsewhere",
                format!(
                    "worker {worker} serves StorageCluster {other}, and a worker serves one storage cluster: remove its StorageNode from this cluster or from {other}"
                ),
            )
            .await;
            continue;
        }
        let missing = labels.iter().any(|(k, v)| have.get(k) != Some(v));
        if missing {
            let patch = json!({"metadata": {"labels": labels}});
            workers
                .patch(worker, &PatchParams::default(), &Patch::Merge(patch))
                .await?;
        }
    }
    for worker in enrolled.iter().filter(|w| !wanted.contains_key(*w)) {
        let patch =
            json!({"metadata": {"labels": {ENROLLMENT_LABEL: null, NAMESPACE_LABEL: null}}});
        workers
            .patch(worker, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    Ok(())
}

/// Removes the enrollment label of earlier releases from this cluster's workers, once the
/// DaemonSet selects on [`ENROLLMENT_LABEL`] (it was applied just before). A worker whose
/// storage-node pod was scheduled by the old selector keeps the label until that pod is
/// gone: a kubelet admits its pods again when it restarts, and would refuse the pod on a
/// worker without the label. A worker that left the cluster loses the namespace label too.
async fn retire_legacy_label(
    ctx: &Context,
    cluster: &StorageCluster,
    nodes: &[StorageNode],
) -> Result<(), Error> {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let workers: Api<Node> = Api::all(ctx.kube.clone());
    let labelled: Vec<_> = workers
        .list_metadata(&ListParams::default().labels(&format!("{LEGACY_ENROLLMENT_LABEL}={name}")))
        .await?
        .items
        .into_iter()
        .filter(|n| enrolled_elsewhere(n.labels(), &name, &ns).is_none())
        .collect();
    if labelled.is_empty() {
        return Ok(());
    }
    // Every pod of the namespace, not only this workload's: an earlier release's DaemonSet
    // may have labelled its pods otherwise.
    let pods: Api<Pod> = Api::namespaced(ctx.kube.clone(), &ns);
    let held: BTreeSet<String> = pods
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.spec)
        .filter(|s| {
            s.node_selector
                .as_ref()
                .and_then(|sel| sel.get(LEGACY_ENROLLMENT_LABEL))
                == Some(&name)
        })
        .filter_map(|s| s.node_name)
        .collect();
    let wanted = manifests::enrollment(cluster, nodes);
    for worker in labelled {
        let Some(worker_name) = worker.metadata.name.as_deref() else {
            continue;
        };
        if held.contains(worker_name) {
            continue;
        }
        let mut labels = serde_json::Map::new();
        labels.insert(LEGACY_ENROLLMENT_LABEL.into(), serde_json::Value::Null);
        if !wanted.contains_key(worker_name) && !worker.labels().contains_key(ENROLLMENT_LABEL) {
            labels.insert(NAMESPACE_LABEL.into(), serde_json::Value::Null);
        }
        let patch = json!({"metadata": {"labels": labels}});
        workers
            .patch(worker_name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    Ok(())
}

/// The StorageCluster (`namespace/name`) a worker with `labels` is enrolled in when it is
/// not the cluster `name` of `ns`; `None` when it is free or this cluster's. A worker not
/// yet carrying the enrollment label is judged by the label of earlier releases.
pub fn enrolled_elsewhere(
    labels: &std::collections::BTreeMap<String, String>,
    name: &str,
    ns: &str,
) -> Option<String> {
    let cluster = labels
        .get(ENROLLMENT_LABEL)
        .or_else(|| labels.get(LEGACY_ENROLLMENT_LABEL))?;
    let namespace = labels.get(NAMESPACE_LABEL);
    if cluster == name && namespace.is_none_or(|n| n == ns) {
        return None;
    }
    Some(format!(
        "{}/{cluster}",
        namespace.map_or("(a namespace not recorded)", String::as_str)
    ))
}

/// Applies the cluster's [`manifests()`]: the configuration, the shared headless Service and
/// the cluster's endpoints of it, the pods' identity, and the DaemonSet.
async fn render(
    ctx: &Context,
    cluster: &StorageCluster,
    nodes: &[StorageNode],
) -> Result<(), Error> {
    let workers = workers(ctx, nodes).await?;
    // Only the DaemonSet names the certificate and says how its pods get theirs: when
    // either cannot be told, everything else is still brought up to date (the endpoints
    // above all) before the error is reported.
    let certificate = serving_certificate(ctx, cluster).await;
    let pod_certificates = signer::pod_certificates_api(&ctx.kube).await;
    let cluster = &with_default_pull_secrets(cluster, &ctx.image_pull_secrets);
    let objects = manifests(
        cluster,
        nodes,
        &workers,
        ctx.snode.port,
        certificate.as_deref().unwrap_or_default(),
        pod_certificates.as_ref().is_ok_and(|served| *served),
    );
    apply_changed(ctx, MANAGER, &objects.config).await?;
    let service_manager = format!("{MANAGER}-{}", cluster.name_any());
    apply_changed(ctx, &service_manager, &objects.service).await?;
    apply_changed(ctx, MANAGER, &objects.endpoints).await?;
    apply_changed(ctx, MANAGER, &objects.account).await?;
    apply_changed(ctx, MANAGER, &objects.role).await?;
    apply_changed(ctx, MANAGER, &objects.binding).await?;
    certificate?;
    pod_certificates?;
    apply_changed(ctx, MANAGER, &objects.daemonset).await
}

/// `cluster` with the operator's pull secrets for its storage nodes when it names none:
/// whoever installed the operator from a private registry mirrors the storage nodes'
/// image there too.
fn with_default_pull_secrets(
    cluster: &StorageCluster,
    defaults: &[k8s_openapi::api::core::v1::LocalObjectReference],
) -> StorageCluster {
    let mut cluster = cluster.clone();
    let storage = cluster.spec.storage_nodes.get_or_insert_default();
    if storage.image_pull_secrets.is_empty() {
        storage.image_pull_secrets = defaults.to_vec();
    }
    cluster
}

/// Makes sure the serving Secret holds a current certificate from the cluster's CA (kept
/// by [`crate::runtime::ca`]); returns the Secret's resourceVersion. A new certificate is written
/// with the resourceVersion read, so a concurrent issuer's certificate is never
/// overwritten by a second one.
async fn serving_certificate(ctx: &Context, cluster: &StorageCluster) -> Result<String, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let api: Api<Secret> = Api::namespaced(ctx.kube.clone(), &ns);
    let ca_secret = serving::secret_metadata(cluster, &serving::ca_secret_name(&name));
    let ca = crate::runtime::ca::ensure(&api, &ca_secret, &serving::CA_POLICY).await?;
    let secret_name = serving::tls_secret_name(&name);
    let current = api.get_opt(&secret_name).await?;
    let recorded = current.as_ref().map(Recorded::from_secret);
    let names = serving::dns_names(&ns);
    let now = jiff::Timestamp::now();
    let bundle = serving::trust_bundle(&ca.bundle, ctx.link.trust().as_deref());
    let reason = match serving::decide(now, recorded.as_ref(), &bundle, &names) {
        Decision::Keep => {
            let rv = current.and_then(|s| s.metadata.resource_version);
            return Ok(rv.unwrap_or_default());
        }
        Decision::Issue(reason) => reason,
    };
    let not_after = now + serving::VALIDITY;
    let dns: Vec<&str> = names.iter().map(String::as_str).collect();
    // Server and client auth: a node calls the control plane with it too.
    let issued = ca
        .authority
        .peer_until(SERVICE_NAME, &dns, not_after.as_second())?;
    let secret = serving::tls_secret(cluster, issued, &bundle, not_after, &names);
    let written = crate::runtime::ca::create_or_swap(&api, current.as_ref(), secret)
        .await?
        .ok_or_else(|| Error::Stale(format!("Secret {secret_name}")))?;
    tracing::info!(cluster = %name, secret = %secret_name, reason, not_after = %not_after, "issued the storage-node serving certificate");
    ctx.event(
        cluster,
        false,
        "ServingCertificateIssued",
        format!(
            "Issued the storage-node API's serving certificate in Secret {secret_name}, valid until {not_after}: {reason}."
        ),
    )
    .await;
    Ok(written.metadata.resource_version.unwrap_or_default())
}

/// The cluster's workers, read from their Nodes; a worker whose Node is gone is left out.
async fn workers(ctx: &Context, nodes: &[StorageNode]) -> Result<Vec<Worker>, Error> {
    let names: BTreeSet<&str> = nodes.iter().map(|n| n.spec.worker_node.as_str()).collect();
    let api: Api<Node> = Api::all(ctx.kube.clone());
    let mut out = Vec::new();
    for name in names {
        let Some(node) = api.get_opt(name).await? else {
            continue;
        };
        let status = node.status.unwrap_or_default();
        let address = status
            .addresses
            .unwrap_or_default()
            .into_iter()
            .find(|a| a.type_ == "InternalIP")
            .map(|a| a.address);
        let ready = status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        out.push(Worker {
            name: name.to_owned(),
            address,
            ready,
        });
    }
    Ok(out)
}

/// What this process last applied to an object, by (kind, namespace, name, manager): the
/// body and the resourceVersion the apply produced.
type Applied = std::collections::HashMap<(String, String, String, String), (String, String)>;

static APPLIED: std::sync::LazyLock<std::sync::Mutex<Applied>> =
    std::sync::LazyLock::new(Default::default);

/// Applies `object` (server-side, forced: a concurrent writer's fields are taken over
/// rather than raced, and a conflict cannot leave half an object) unless the live object is
/// still exactly what this process last applied: the same body, and nobody has written the
/// object since (same resourceVersion). A no-op apply is still a write, and a converged
/// cluster should write nothing; any other writer's change moves the resourceVersion and is
/// overwritten again.
async fn apply_changed<K>(ctx: &Context, manager: &str, object: &K) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let ns = object.meta().namespace.clone().unwrap_or_default();
    let name = object.name_any();
    let api: Api<K> = Api::namespaced(ctx.kube.clone(), &ns);
    let text = serde_json::to_string(object).map_err(kube::Error::SerdeError)?;
    let key = (
        K::kind(&()).to_string(),
        ns,
        name.clone(),
        manager.to_string(),
    );
    let remembered = APPLIED.lock().ok().and_then(|m| m.get(&key).cloned());
    if let Some((last, rv)) = remembered
        && last == text
        && api
            .get_metadata_opt(&name)
            .await?
            .and_then(|o| o.metadata.resource_version)
            == Some(rv)
    {
        return Ok(());
    }
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(object),
        )
        .await?;
    if let (Ok(mut m), Some(rv)) = (APPLIED.lock(), applied.meta().resource_version.clone()) {
        m.insert(key, (text, rv));
    }
    Ok(())
}

/// `nodes` with, for every unfinished Migrate of one of them, a copy of its node at the
/// target worker: the storage-node workload then enrolls the target, publishes it and
/// writes its configuration while the node moves.
pub async fn with_targets(
    kube: &kube::Client,
    ns: &str,
    mut nodes: Vec<StorageNode>,
) -> Result<Vec<StorageNode>, kube::Error> {
    let moves = Api::<StorageNodeOps>::namespaced(kube.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items;
    let copies: Vec<StorageNode> = moves
        .iter()
        .filter(|o| o.spec.action == NodeAction::Migrate)
        .filter(|o| !o.status.as_ref().is_some_and(|s| s.phase.is_terminal()))
        .filter_map(|o| {
            let to = o.spec.migrate.as_ref()?.target_worker_node.as_str();
            let n = nodes.iter().find(|n| n.name_any() == o.spec.node_ref)?;
            (n.spec.worker_node != to).then(|| {
                let mut copy = n.clone();
                copy.spec.worker_node = to.to_owned();
                // No id: the target has no topology label before the node is there.
                copy.status = None;
                copy
            })
        })
        .collect();
    nodes.extend(copies);
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_worker_belongs_to_the_cluster_of_its_name_and_namespace() {
        let free = labels(&[("kubernetes.io/hostname", "w1")]);
        assert_eq!(enrolled_elsewhere(&free, "sb", "a"), None);
        let ours = labels(&[(ENROLLMENT_LABEL, "sb"), (NAMESPACE_LABEL, "a")]);
        assert_eq!(enrolled_elsewhere(&ours, "sb", "a"), None);
        // Enrolled before workers carried the namespace: the name decides.
        let unrecorded = labels(&[(ENROLLMENT_LABEL, "sb")]);
        assert_eq!(enrolled_elsewhere(&unrecorded, "sb", "a"), None);
        assert_eq!(
            enrolled_elsewhere(&ours, "sb", "b"),
            Some("a/sb".into()),
            "a same-named cluster of another namespace"
        );
        assert_eq!(
            enrolled_elsewhere(&unrecorded, "other", "a"),
            Some("(a namespace not recorded)/sb".into())
        );
        // An installation of an earlier release: the old label decides until the new one
        // is written, and the new one decides after.
        let legacy = labels(&[(LEGACY_ENROLLMENT_LABEL, "sb"), (NAMESPACE_LABEL, "a")]);
        assert_eq!(enrolled_elsewhere(&legacy, "sb", "a"), None);
        assert_eq!(
            enrolled_elsewhere(&legacy, "other", "a"),
            Some("a/sb".into())
        );
        let both = labels(&[
            (ENROLLMENT_LABEL, "sb"),
            (LEGACY_ENROLLMENT_LABEL, "old"),
            (NAMESPACE_LABEL, "a"),
        ]);
        assert_eq!(enrolled_elsewhere(&both, "sb", "a"), None);
    }
}

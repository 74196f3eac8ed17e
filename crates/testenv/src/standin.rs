//! What a real cluster's kubelets and workload controllers would report, for an API server
//! that has neither: the status of Deployments, StatefulSets and DaemonSets (their pods
//! ready), of FoundationDB clusters (available) and of FoundationDB backups (a snapshot
//! taken), so that controllers waiting on them can be run here.
//!
//! A workload reports every replica ready unless it carries [`READY_ANNOTATION`], whose
//! number of ready replicas is reported instead: how a test or the demo makes a component
//! fail. A DaemonSet schedules one pod per Node its node selector matches.
//!
//! What kubelets mount into pods is handed to the caller: a Secret's files
//! ([`mount_secrets`]), and the storage-node pods' certificates, shared or each pod's own
//! from a PodCertificateRequest ([`storage_node_pods`]).
//!
//! ```no_run
//! # async fn example(client: kube::Client) {
//! let standin = simplyblock_testenv::standin::StandIn::start(client, Some("ns".into()));
//! // ... the workloads of `ns` now become ready as they are created ...
//! drop(standin);
//! # }
//! ```

mod storage_nodes;

pub use storage_nodes::{DAEMONSET_LABEL, storage_node_pods};

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// Annotation on a workload: report this many ready replicas instead of all of them.
pub const READY_ANNOTATION: &str = "standin.simplyblock.io/ready-replicas";
/// Annotation on a FoundationDBCluster: `"false"` reports it unavailable.
pub const AVAILABLE_ANNOTATION: &str = "standin.simplyblock.io/available";
/// Annotation on a FoundationDBBackup: `"false"` takes no snapshot.
pub const SNAPSHOT_ANNOTATION: &str = "standin.simplyblock.io/snapshot";

/// How often the stand-in looks.
const INTERVAL: Duration = Duration::from_millis(100);

/// A running stand-in; dropping it stops it.
pub struct StandIn {
    task: JoinHandle<()>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandIn {
    /// Runs `pass` every [`INTERVAL`] until dropped.
    pub fn every_pass<F, Fut>(pass: F) -> StandIn
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let task = tokio::spawn(async move {
            loop {
                pass().await;
                tokio::time::sleep(INTERVAL).await;
            }
        });
        StandIn { task }
    }

    /// Reports the workloads of `namespace` (of every namespace when `None`) ready, until
    /// dropped.
    pub fn start(client: kube::Client, namespace: Option<String>) -> StandIn {
        StandIn::every_pass(move || {
            let client = client.clone();
            let namespace = namespace.clone();
            async move {
                // A failed pass (an object deleted mid-write, a CRD not installed) is
                // tried again on the next.
                let _ = pass(&client, namespace.as_deref()).await;
            }
        })
    }
}

/// What runs in place of a Deployment's pod (see [`pod`]): its task, and how to stop it
/// gracefully, which dropping it does.
pub struct Pod {
    task: Option<JoinHandle<()>>,
    stop: Option<Box<dyn FnOnce() + Send>>,
}

impl Pod {
    /// `task`, stopped by `stop` (which must make it end).
    pub fn new(task: JoinHandle<()>, stop: impl FnOnce() + Send + 'static) -> Pod {
        Pod {
            task: Some(task),
            stop: Some(Box::new(stop)),
        }
    }

    /// Stops the pod and waits for its task to end.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            stop();
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop();
        }
    }
}

/// What a kubelet and a Deployment's rollouts do for one pod of Deployment `name` in
/// `namespace`: once the Deployment exists, `start` runs the pod; when its pod template
/// changes (a restart, a new image), the pod is stopped and started again. Until dropped,
/// which stops the pod.
pub fn pod<F, Fut>(client: kube::Client, namespace: String, name: String, start: F) -> StandIn
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Pod> + Send,
{
    let task = tokio::spawn(async move {
        let deployments: Api<Deployment> = Api::namespaced(client, &namespace);
        let template = async || -> Option<Value> {
            let deployment = deployments.get_opt(&name).await.ok()??;
            serde_json::to_value(deployment.spec.template.metadata).ok()
        };
        loop {
            let started_from = loop {
                if let Some(t) = template().await {
                    break t;
                }
                tokio::time::sleep(INTERVAL).await;
            };
            let pod = start().await;
            loop {
                tokio::time::sleep(INTERVAL).await;
                if template().await.is_some_and(|t| t != started_from) {
                    break;
                }
            }
            pod.stop().await;
        }
    });
    StandIn { task }
}

/// A Secret's files as a pod that mounts it sees them: key to content. (A pod's storage-node
/// certificate is mounted by [`storage_node_pods`].)
pub type Files = BTreeMap<String, Vec<u8>>;

/// What a kubelet does for a pod that mounts a Secret: hands `on_change` the files of
/// every Secret of `namespace` whose name starts with `prefix` (its namespace and files),
/// when it first appears and after each change, until dropped.
pub fn mount_secrets<F>(
    client: kube::Client,
    namespace: String,
    prefix: &'static str,
    on_change: F,
) -> StandIn
where
    F: Fn(&str, &Files) + Send + Sync + 'static,
{
    let task = tokio::spawn(async move {
        let api: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client, &namespace);
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        loop {
            if let Ok(list) = api.list(&ListParams::default()).await {
                for secret in list {
                    let name = secret.metadata.name.clone().unwrap_or_default();
                    let version = secret.metadata.resource_version.clone().unwrap_or_default();
                    if !name.starts_with(prefix) || seen.get(&name) == Some(&version) {
                        continue;
                    }
                    let files: Files = secret
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0))
                        .collect();
                    on_change(&namespace, &files);
                    seen.insert(name, version);
                }
            }
            tokio::time::sleep(INTERVAL).await;
        }
    });
    StandIn { task }
}

fn api<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The replicas a workload reports ready: all of `desired`, or what its annotation says.
fn ready(annotations: Option<&BTreeMap<String, String>>, desired: i32) -> i32 {
    annotations
        .and_then(|a| a.get(READY_ANNOTATION))
        .and_then(|v| v.parse().ok())
        .map_or(desired, |n: i32| n.clamp(0, desired))
}

async fn write_status<K>(api: &Api<K>, name: &str, current: Option<Value>, status: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    // The API server drops zero counts: a missing count reads as 0.
    let zero = json!(0);
    let differs = current.is_none_or(|c| {
        status.as_object().is_some_and(|want| {
            want.iter().any(|(k, v)| {
                c.get(k).unwrap_or(&zero) != v && !(v.is_null() && c.get(k).is_none())
            })
        })
    });
    if differs {
        let _ = api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await;
    }
}

async fn pass(client: &kube::Client, namespace: Option<&str>) -> Result<(), kube::Error> {
    let deployments = api::<Deployment>(client, namespace);
    for d in deployments.list(&ListParams::default()).await? {
        let desired = d.spec.replicas.unwrap_or(1);
        let n = ready(d.metadata.annotations.as_ref(), desired);
        let status = json!({
            "observedGeneration": d.metadata.generation,
            "replicas": desired, "updatedReplicas": desired,
            "readyReplicas": n, "availableReplicas": n,
        });
        let api = Api::<Deployment>::namespaced(
            client.clone(),
            d.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let current = d.status.as_ref().and_then(|s| serde_json::to_value(s).ok());
        write_status(&api, &d.metadata.name.unwrap_or_default(), current, status).await;
    }

    let sets = api::<StatefulSet>(client, namespace);
    for s in sets.list(&ListParams::default()).await? {
        let desired = s.spec.replicas.unwrap_or(1);
        let n = ready(s.metadata.annotations.as_ref(), desired);
        let status = json!({
            "observedGeneration": s.metadata.generation,
            "replicas": desired, "currentReplicas": desired, "updatedReplicas": desired,
            "readyReplicas": n, "availableReplicas": n,
        });
        let api = Api::<StatefulSet>::namespaced(
            client.clone(),
            s.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let current = s.status.as_ref().and_then(|s| serde_json::to_value(s).ok());
        write_status(&api, &s.metadata.name.unwrap_or_default(), current, status).await;
    }

    let nodes: Vec<Node> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let daemon_sets = api::<DaemonSet>(client, namespace);
    for ds in daemon_sets.list(&ListParams::default()).await? {
        let selector = ds
            .spec
            .template
            .spec
            .as_ref()
            .and_then(|p| p.node_selector.clone())
            .unwrap_or_default();
        let desired = nodes
            .iter()
            .filter(|node| {
                let labels = node.metadata.labels.clone().unwrap_or_default();
                selector.iter().all(|(k, v)| labels.get(k) == Some(v))
            })
            .count() as i32;
        let n = ready(ds.metadata.annotations.as_ref(), desired);
        let status = json!({
            "observedGeneration": ds.metadata.generation,
            "desiredNumberScheduled": desired, "currentNumberScheduled": desired,
            "updatedNumberScheduled": desired, "numberMisscheduled": 0,
            "numberReady": n, "numberAvailable": n,
        });
        let api = Api::<DaemonSet>::namespaced(
            client.clone(),
            ds.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let current = ds
            .status
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok());
        write_status(&api, &ds.metadata.name.unwrap_or_default(), current, status).await;
    }

    // Either CRD may be missing; each kind is reported on its own.
    let clusters = foundationdb(client, namespace).await;
    let backups = foundationdb_backups(client, namespace).await;
    clusters.and(backups)
}

/// The FoundationDB operator's `FoundationDBCluster`, when its CRD is installed.
pub fn foundationdb_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apps.foundationdb.org", "v1beta2", "FoundationDBCluster"),
        "foundationdbclusters",
    )
}

async fn foundationdb(client: &kube::Client, namespace: Option<&str>) -> Result<(), kube::Error> {
    let resource = foundationdb_resource();
    let all: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    for fdb in all.list(&ListParams::default()).await? {
        let available = fdb
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(AVAILABLE_ANNOTATION))
            .is_none_or(|v| v != "false");
        let status = json!({
            "generations": {"reconciled": fdb.metadata.generation},
            "health": {"available": available, "healthy": available},
        });
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            fdb.metadata.namespace.as_deref().unwrap_or_default(),
            &resource,
        );
        let current = fdb.data.get("status").cloned();
        write_status(
            &api,
            &fdb.metadata.name.unwrap_or_default(),
            current,
            status,
        )
        .await;
    }
    Ok(())
}

/// The FoundationDB operator's `FoundationDBBackup`, when its CRD is installed.
pub fn foundationdb_backup_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apps.foundationdb.org", "v1beta2", "FoundationDBBackup"),
        "foundationdbbackups",
    )
}

/// A backup reports a snapshot taken at the moment its spec was first seen at a new
/// generation (a create, a changed spec), as the backup agents' next snapshot would be.
async fn foundationdb_backups(
    client: &kube::Client,
    namespace: Option<&str>,
) -> Result<(), kube::Error> {
    let resource = foundationdb_backup_resource();
    let all: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    for backup in all.list(&ListParams::default()).await? {
        let generation = backup.metadata.generation;
        let current = backup.data.get("status").cloned();
        let reconciled = current
            .as_ref()
            .and_then(|s| s["generations"]["reconciled"].as_i64());
        if reconciled == generation {
            continue;
        }
        let snapshot = backup
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SNAPSHOT_ANNOTATION))
            .is_none_or(|v| v != "false");
        let state = backup.data["spec"]["backupState"]
            .as_str()
            .unwrap_or("Running")
            .to_owned();
        let mut details = json!({
            "url": backup.data["spec"]["blobStoreConfiguration"]["accountName"],
            "running": state == "Running",
            "paused": state == "Paused",
        });
        if snapshot && state == "Running" {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            details["snapshotTime"] = json!(now);
        }
        let status = json!({
            "generations": {"reconciled": generation},
            "backupDetails": details,
        });
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            backup.metadata.namespace.as_deref().unwrap_or_default(),
            &resource,
        );
        write_status(
            &api,
            &backup.metadata.name.unwrap_or_default(),
            current,
            status,
        )
        .await;
    }
    Ok(())
}

/// A minimal `FoundationDBBackup` CRD (`apps.foundationdb.org/v1beta2`, any fields, a
/// status subresource), beside [`foundationdb_crd`].
pub fn foundationdb_backup_crd() -> CustomResourceDefinition {
    minimal_crd(
        "apps.foundationdb.org",
        "v1beta2",
        "FoundationDBBackup",
        "foundationdbbackups",
        &[],
    )
}

/// A minimal `FoundationDBCluster` CRD (`apps.foundationdb.org/v1beta2`, any fields, a
/// status subresource): what tests and the demo install in place of the FoundationDB
/// operator's.
pub fn foundationdb_crd() -> CustomResourceDefinition {
    minimal_crd(
        "apps.foundationdb.org",
        "v1beta2",
        "FoundationDBCluster",
        "foundationdbclusters",
        &["fdb"],
    )
}

/// A namespaced CRD of any fields with a status subresource: the API of a component that
/// a stand-in plays.
pub fn minimal_crd(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    short_names: &[&str],
) -> CustomResourceDefinition {
    let singular = kind.to_ascii_lowercase();
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": {
                "kind": kind, "listKind": format!("{kind}List"),
                "plural": plural, "singular": singular,
                "shortNames": short_names,
            },
            "scope": "Namespaced",
            "versions": [{
                "name": version, "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true
                }}
            }]
        }
    }))
    .expect("a minimal CRD is well-formed")
}

/// What kube-controller-manager's volume binder does for a claim pre-bound to a
/// PersistentVolume (its `volumeName` set, the volume's `claimRef` naming it): reports both
/// Bound, in every namespace, until dropped. Dynamic provisioning and claims without a
/// volume name are left alone.
pub fn prebound_claims(client: kube::Client) -> StandIn {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    StandIn::every_pass(move || {
        let client = client.clone();
        async move {
            let claims: Api<PersistentVolumeClaim> = Api::all(client.clone());
            let volumes: Api<PersistentVolume> = Api::all(client.clone());
            let Ok(list) = claims.list(&ListParams::default()).await else {
                return;
            };
            for claim in list {
                let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
                let (Some(volume), Some(ns), Some(name)) = (
                    claim.spec.as_ref().and_then(|s| s.volume_name.clone()),
                    claim.metadata.namespace.clone(),
                    claim.metadata.name.clone(),
                ) else {
                    continue;
                };
                if bound {
                    continue;
                }
                let Ok(Some(pv)) = volumes.get_opt(&volume).await else {
                    continue;
                };
                let reserved = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
                if reserved.and_then(|r| r.name.as_deref()) != Some(name.as_str())
                    || reserved.and_then(|r| r.namespace.as_deref()) != Some(ns.as_str())
                {
                    continue;
                }
                let _ = crate::ocm::bind(&client, &ns, &name).await;
            }
        }
    })
}

//! The storage-node workload of a cluster: worker enrollment, the DaemonSet, the headless
//! Service with the cluster's EndpointSlice, the pods' ServiceAccount and Role, the serving
//! certificate of the storage-node API ([`serving`]), and the per-node
//! configuration. A second controller on StorageCluster that writes none of its status.
//!
//! Enrollment comes first: the DaemonSet only schedules on workers carrying the
//! enrollment label, and a node waits at CheckingHost for the pod that DaemonSet runs, so
//! a label nobody writes is a deadlock in which neither side reports anything wrong.

pub mod names;
pub mod serving;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use simplyblock_api::{StorageCluster, StorageNode};
use simplyblock_certs::{Authority, Pair};

pub use names::{DEFAULT_IMAGE, ENROLLMENT_LABEL, SERVICE_NAME, topology_label};
use serving::{Decision, Recorded};

use crate::context::{Context, requeue};

const MANAGER: &str = "storagenode-workload";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error(
        "the storage-node CA in Secret {secret} is unusable ({reason}); delete the Secret and a new CA is made, after which every storage node gets a new serving certificate"
    )]
    BrokenCa { secret: String, reason: String },
    #[error("issuing the storage-node serving certificate failed: {0}")]
    Issue(#[from] simplyblock_certs::Error),
    #[error("Secret {0} changed while it was being written; retrying with a fresh read")]
    Conflict(String),
}

pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let (clusters, nodes, secrets): (Api<StorageCluster>, Api<StorageNode>, Api<Secret>) =
        match &namespace {
            Some(ns) => (
                Api::namespaced(ctx.kube.clone(), ns),
                Api::namespaced(ctx.kube.clone(), ns),
                Api::namespaced(ctx.kube.clone(), ns),
            ),
            None => (
                Api::all(ctx.kube.clone()),
                Api::all(ctx.kube.clone()),
                Api::all(ctx.kube.clone()),
            ),
        };
    Controller::new(clusters, watcher::Config::default())
        // A lost or edited serving Secret is issued again at once, not at the next resync.
        .owns(
            secrets,
            watcher::Config::default().labels("storage.simplyblock.io/managed-by=storagecluster"),
        )
        .watches(nodes, watcher::Config::default(), |n: StorageNode| {
            Some(
                ObjectRef::<StorageCluster>::new(&n.spec.cluster_ref)
                    .within(&n.namespace().unwrap_or_default()),
            )
        })
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            crate::ops::metrics::reconciled("storagenode-workload", &result);
            if let Err(e) = result {
                tracing::debug!(error = %e, "workload reconcile");
            }
        })
        .await;
}

fn error_policy(cluster: Arc<StorageCluster>, error: &Error, _: Arc<Context>) -> Action {
    if let Error::Conflict(_) = error {
        return Action::requeue(requeue::CONFLICT);
    }
    tracing::warn!(cluster = %cluster.name_any(), error = %error, "rendering the storage-node workload failed; retrying");
    Action::requeue(requeue::RETRY)
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
    enroll(&ctx, &cluster, &nodes).await?;
    render(&ctx, &cluster, &nodes).await?;
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
    let cluster_uuid = cluster.status.as_ref().and_then(|s| s.uuid.clone());
    let mut wanted: BTreeMap<String, BTreeMap<String, Option<String>>> = BTreeMap::new();
    for n in nodes {
        let labels = wanted.entry(n.spec.worker_node.clone()).or_default();
        labels.insert(ENROLLMENT_LABEL.to_string(), Some(name.clone()));
        if let (Some(cu), Some(uuid)) = (
            &cluster_uuid,
            n.status.as_ref().and_then(|s| s.uuid.clone()),
        ) {
            labels.insert(topology_label(cu, n.spec.slot.unwrap_or(0)), Some(uuid));
        }
    }
    let workers: Api<Node> = Api::all(ctx.kube.clone());
    let enrolled: BTreeSet<String> = workers
        .list_metadata(&ListParams::default().labels(&format!("{ENROLLMENT_LABEL}={name}")))
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    for (worker, labels) in &wanted {
        let Some(current) = workers.get_metadata_opt(worker).await? else {
            continue;
        };
        let have = current.metadata.labels.unwrap_or_default();
        let missing = labels.iter().any(|(k, v)| have.get(k) != v.as_ref());
        if missing {
            let patch = json!({"metadata": {"labels": labels}});
            workers
                .patch(worker, &PatchParams::default(), &Patch::Merge(patch))
                .await?;
        }
    }
    for worker in enrolled.iter().filter(|w| !wanted.contains_key(*w)) {
        let patch = json!({"metadata": {"labels": {ENROLLMENT_LABEL: null}}});
        workers
            .patch(worker, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    Ok(())
}

fn owner(cluster: &StorageCluster, controller: bool) -> serde_json::Value {
    let mut o = cluster
        .controller_owner_ref(&())
        .map(|o| serde_json::to_value(o).unwrap_or_default())
        .unwrap_or_default();
    o["controller"] = json!(controller);
    o
}

/// The DaemonSet, the per-cluster configuration and the shared headless Service.
async fn render(
    ctx: &Context,
    cluster: &StorageCluster,
    nodes: &[StorageNode],
) -> Result<(), Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let storage = cluster.spec.storage_nodes.clone().unwrap_or_default();
    let config_name = format!("simplyblock-storage-node-config-{name}");
    let labels = json!({
        "app.kubernetes.io/name": "simplyblock-storage-node",
        "storage.simplyblock.io/cluster": name,
        "storage.simplyblock.io/managed-by": "storagecluster",
    });

    // One env file per worker: the config the init container reads.
    let mut data = BTreeMap::new();
    for n in nodes {
        let c = &n.spec.config;
        let mut env = vec![
            format!("MAX_SUBSYS_COUNT={}", cluster.spec.max_subsystem_count),
            format!("VCPU_COUNT={}", c.sizing.vcpu_count),
        ];
        if let Some(h) = c
            .sizing
            .min_huge_pages_size
            .as_ref()
            .or(cluster.spec.min_huge_pages_size.as_ref())
        {
            env.push(format!("MAX_HUGE_PAGES_SIZE={h}"));
        }
        if !c.device_names.is_empty() {
            env.push(format!("NVME_DEVICES={}", c.device_names.join(",")));
        }
        if !c.pcie_allow_list.is_empty() {
            env.push(format!("PCI_ALLOWED={}", c.pcie_allow_list.join(",")));
        }
        if !c.pcie_deny_list.is_empty() {
            env.push(format!("PCI_BLOCKED={}", c.pcie_deny_list.join(",")));
        }
        if let Some(jm) = &c.journal_manager {
            if let Some(p) = jm.percent_per_device {
                env.push(format!("JM_PERCENT={p}"));
            }
            if let Some(count) = jm.count {
                env.push(format!("HA_JM_COUNT={count}"));
            }
        }
        if let Some(cpu) = c
            .reserved_system_cpu
            .as_ref()
            .or(storage.reserved_system_cpu.as_ref())
        {
            env.push(format!("RESERVED_SYSTEM_CPU={cpu}"));
        }
        data.insert(n.spec.worker_node.clone(), env.join("\n") + "\n");
    }
    let config = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": config_name, "namespace": ns, "labels": labels, "ownerReferences": [owner(cluster, true)]},
        "data": data,
    });
    apply_changed(
        &Api::<ConfigMap>::namespaced(ctx.kube.clone(), &ns),
        &config_name,
        MANAGER,
        config,
    )
    .await?;

    // Each cluster of the namespace adds its owner reference under a field manager of its
    // own, so the Service goes when the last cluster does.
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": SERVICE_NAME, "namespace": ns, "ownerReferences": [owner(cluster, false)],
                     "labels": {"app.kubernetes.io/name": "simplyblock-storage-node"}},
        // No selector: the pods run on the host network, so the endpoint controller
        // would publish bare addresses; the slices below give each worker its own name,
        // `<worker>.simplyblock-storage-node-api.<namespace>.svc`, which is how the control
        // plane reaches a node.
        "spec": {
            "clusterIP": "None",
            "ports": [{"name": "api", "port": ctx.snode.port, "targetPort": ctx.snode.port}],
        },
    });
    apply_changed(
        &Api::<Service>::namespaced(ctx.kube.clone(), &ns),
        SERVICE_NAME,
        &format!("{MANAGER}-{name}"),
        service,
    )
    .await?;

    let slice_name = format!("{SERVICE_NAME}-{name}");
    let slice = endpoint_slice(
        &ns,
        &slice_name,
        &name,
        owner(cluster, true),
        ctx.snode.port,
        &workers(ctx, nodes).await?,
    );
    apply_changed(
        &Api::<EndpointSlice>::namespaced(ctx.kube.clone(), &ns),
        &slice_name,
        MANAGER,
        slice,
    )
    .await?;

    // The pods' identity: a ServiceAccount of the cluster, allowed to read its own
    // configuration and nothing else.
    let account = format!("simplyblock-storage-node-{name}");
    let owned = json!({"name": account, "namespace": ns, "labels": labels, "ownerReferences": [owner(cluster, true)]});
    apply_changed(
        &Api::<ServiceAccount>::namespaced(ctx.kube.clone(), &ns),
        &account,
        MANAGER,
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": owned, "automountServiceAccountToken": true}),
    )
    .await?;
    apply_changed(
        &Api::<Role>::namespaced(ctx.kube.clone(), &ns),
        &account,
        MANAGER,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": owned,
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [config_name], "verbs": ["get", "watch"]}],
        }),
    )
    .await?;
    apply_changed(
        &Api::<RoleBinding>::namespaced(ctx.kube.clone(), &ns),
        &account,
        MANAGER,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": owned,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
        }),
    )
    .await?;

    let certificate_version = serving_certificate(ctx, cluster).await?;
    let tls_secret = serving::tls_secret_name(&name);

    let image = storage
        .image
        .clone()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| DEFAULT_IMAGE.to_string());
    let daemonset_name = format!("simplyblock-storage-node-{name}");
    let daemonset = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": daemonset_name, "namespace": ns, "labels": labels, "ownerReferences": [owner(cluster, true)]},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "simplyblock-storage-node", "storage.simplyblock.io/cluster": name}},
            // A storage node restarts only through the control plane (Restart,
            // RollingRestart): a changed template, a new image or certificate, reaches a
            // node when that operation recreates its pod, never by the DaemonSet alone.
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {serving::TEMPLATE_ANNOTATION: certificate_version},
                },
                "spec": {
                    "nodeSelector": {ENROLLMENT_LABEL: name},
                    "serviceAccountName": account,
                    "hostNetwork": true,
                    "tolerations": storage.tolerations,
                    "containers": [{
                        "name": "storage-node-api",
                        "image": image,
                        "imagePullPolicy": storage.image_pull_policy,
                        "ports": [{"name": "api", "containerPort": ctx.snode.port}],
                        "securityContext": {"privileged": true},
                        "env": [
                            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                            {"name": "SB_TLS_SERVE", "value": "1"},
                        ],
                        "volumeMounts": [
                            {"name": "config", "mountPath": "/etc/simplyblock/node"},
                            {"name": "tls", "mountPath": "/etc/simplyblock/tls", "readOnly": true},
                        ],
                        "resources": storage.container_resources,
                    }],
                    "volumes": [
                        {"name": "config", "configMap": {"name": config_name}},
                        {"name": "tls", "secret": {"secretName": tls_secret, "defaultMode": 0o400}},
                    ],
                },
            },
        },
    });
    // Server-side apply with force: a concurrent writer's fields are taken over rather
    // than raced, and a conflict cannot leave half a DaemonSet.
    apply_changed(
        &Api::<DaemonSet>::namespaced(ctx.kube.clone(), &ns),
        &daemonset_name,
        MANAGER,
        daemonset,
    )
    .await?;
    Ok(())
}

/// The cluster's CA, made once and stored in its Secret; a concurrent maker's CA wins.
async fn cluster_ca(ctx: &Context, cluster: &StorageCluster) -> Result<Authority, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let secret_name = serving::ca_secret_name(&cluster.name_any());
    let api: Api<Secret> = Api::namespaced(ctx.kube.clone(), &ns);
    let stored = match api.get_opt(&secret_name).await? {
        Some(s) => s,
        None => {
            let ca = Authority::new(serving::CA_COMMON_NAME)?;
            let pair = ca.pair();
            let secret: Secret = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {
                    "name": secret_name, "namespace": ns,
                    "labels": {"storage.simplyblock.io/cluster": cluster.name_any(), "storage.simplyblock.io/managed-by": "storagecluster"},
                    "ownerReferences": [owner(cluster, true)],
                },
                "type": "Opaque",
                "stringData": {"ca.crt": pair.cert, "ca.key": pair.key},
            }))
            .map_err(|e| Error::BrokenCa {
                secret: secret_name.clone(),
                reason: e.to_string(),
            })?;
            match api.create(&PostParams::default(), &secret).await {
                Ok(_) => return Ok(ca),
                Err(kube::Error::Api(e)) if e.code == 409 => api.get(&secret_name).await?,
                Err(e) => return Err(e.into()),
            }
        }
    };
    let data = stored.data.unwrap_or_default();
    let text = |k: &str| {
        data.get(k)
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .ok_or_else(|| Error::BrokenCa {
                secret: secret_name.clone(),
                reason: format!("{k} is missing"),
            })
    };
    let pair = Pair {
        cert: text("ca.crt")?,
        key: text("ca.key")?,
    };
    Authority::from_pair(serving::CA_COMMON_NAME, &pair).map_err(|e| Error::BrokenCa {
        secret: secret_name.clone(),
        reason: e.to_string(),
    })
}

/// Makes sure the serving Secret holds a current certificate from the cluster's CA; returns
/// the Secret's resourceVersion. A new certificate is written with the resourceVersion
/// read, so a concurrent issuer's certificate is never overwritten by a second one.
async fn serving_certificate(ctx: &Context, cluster: &StorageCluster) -> Result<String, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let secret_name = serving::tls_secret_name(&name);
    let ca = cluster_ca(ctx, cluster).await?;
    let api: Api<Secret> = Api::namespaced(ctx.kube.clone(), &ns);
    let current = api.get_opt(&secret_name).await?;
    let recorded = current.as_ref().map(|s| {
        let data: BTreeMap<String, Vec<u8>> = s
            .data
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        Recorded::from_parts(&s.annotations().clone(), &data)
    });
    let names = serving::dns_names(&ns);
    let now = jiff::Timestamp::now();
    let reason = match serving::decide(now, recorded.as_ref(), &ca.cert_pem(), &names) {
        Decision::Keep => {
            let rv = current.and_then(|s| s.metadata.resource_version);
            return Ok(rv.unwrap_or_default());
        }
        Decision::Issue(reason) => reason,
    };
    let not_after = now + serving::VALIDITY;
    let dns: Vec<&str> = names.iter().map(String::as_str).collect();
    let issued = ca.serving_until(SERVICE_NAME, &dns, &[], Some(not_after.as_second()))?;
    let bytes = |s: String| ByteString(s.into_bytes());
    let mut secret = Secret {
        metadata: ObjectMeta {
            name: Some(secret_name.clone()),
            namespace: Some(ns.clone()),
            labels: Some(BTreeMap::from([
                ("storage.simplyblock.io/cluster".to_string(), name.clone()),
                (
                    "storage.simplyblock.io/managed-by".to_string(),
                    "storagecluster".to_string(),
                ),
            ])),
            annotations: Some(BTreeMap::from([
                (
                    serving::NOT_AFTER_ANNOTATION.to_string(),
                    not_after.to_string(),
                ),
                (serving::NAMES_ANNOTATION.to_string(), names.join(",")),
            ])),
            owner_references: cluster.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".to_string()),
        data: Some(BTreeMap::from([
            ("tls.crt".to_string(), bytes(issued.cert)),
            ("tls.key".to_string(), bytes(issued.key)),
            ("ca.crt".to_string(), bytes(ca.cert_pem())),
        ])),
        ..Secret::default()
    };
    let written = match current {
        None => api.create(&PostParams::default(), &secret).await,
        Some(old) => {
            secret.metadata.resource_version = old.metadata.resource_version;
            api.replace(&secret_name, &PostParams::default(), &secret)
                .await
        }
    };
    let written = match written {
        Ok(s) => s,
        Err(kube::Error::Api(e)) if e.code == 409 => return Err(Error::Conflict(secret_name)),
        Err(e) => return Err(e.into()),
    };
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

/// A worker as its endpoint: name, first internal address, readiness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worker {
    pub name: String,
    pub address: Option<String>,
    pub ready: bool,
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

/// The cluster's EndpointSlice of the storage-node Service: one endpoint per worker with
/// an address, named after the worker so each gets its own DNS name. Pure.
pub fn endpoint_slice(
    namespace: &str,
    name: &str,
    cluster: &str,
    owner: serde_json::Value,
    port: u16,
    workers: &[Worker],
) -> serde_json::Value {
    let endpoints: Vec<serde_json::Value> = workers
        .iter()
        .filter_map(|w| {
            let address = w.address.as_ref()?;
            Some(json!({
                "addresses": [address],
                "hostname": w.name,
                "nodeName": w.name,
                "conditions": {"ready": w.ready},
            }))
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": name, "namespace": namespace,
            "labels": {
                "kubernetes.io/service-name": SERVICE_NAME,
                "endpointslice.kubernetes.io/managed-by": "storage.simplyblock.io",
                "storage.simplyblock.io/cluster": cluster,
                "storage.simplyblock.io/managed-by": "storagecluster",
            },
            "ownerReferences": [owner],
        },
        "addressType": "IPv4",
        "ports": [{"name": "api", "port": port, "protocol": "TCP"}],
        "endpoints": endpoints,
    })
}

/// What this process last applied to an object, by (kind, namespace, name, manager): the
/// body and the resourceVersion the apply produced.
type Applied = std::collections::HashMap<(String, String, String, String), (String, String)>;

static APPLIED: std::sync::LazyLock<std::sync::Mutex<Applied>> =
    std::sync::LazyLock::new(Default::default);

/// Applies `body` (server-side, forced) unless the live object is still exactly what this
/// process last applied: the same body, and nobody has written the object since (same
/// resourceVersion). A no-op apply is still a write, and a converged cluster should write
/// nothing; any other writer's change moves the resourceVersion and is overwritten again.
async fn apply_changed<K>(
    api: &Api<K>,
    name: &str,
    manager: &str,
    body: serde_json::Value,
) -> Result<(), Error>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let ns = body["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let key = (
        K::kind(&()).to_string(),
        ns,
        name.to_string(),
        manager.to_string(),
    );
    let text = body.to_string();
    let remembered = APPLIED.lock().ok().and_then(|m| m.get(&key).cloned());
    if let Some((last, rv)) = remembered
        && last == text
        && api
            .get_metadata_opt(name)
            .await?
            .and_then(|o| o.metadata.resource_version)
            == Some(rv)
    {
        return Ok(());
    }
    let applied = api
        .patch(
            name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(body),
        )
        .await?;
    if let (Ok(mut m), Some(rv)) = (APPLIED.lock(), applied.meta().resource_version.clone()) {
        m.insert(key, (text, rv));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_with_an_address_is_a_named_endpoint() {
        let workers = [
            Worker {
                name: "worker-1".into(),
                address: Some("10.0.0.11".into()),
                ready: true,
            },
            Worker {
                name: "worker-2".into(),
                address: None,
                ready: true,
            },
            Worker {
                name: "worker-3".into(),
                address: Some("10.0.0.13".into()),
                ready: false,
            },
        ];
        let slice = endpoint_slice("ns", "s", "sb", json!({}), 5000, &workers);
        let endpoints = slice["endpoints"].as_array().expect("endpoints");
        assert_eq!(
            endpoints.len(),
            2,
            "a worker without an address is left out"
        );
        assert_eq!(endpoints[0]["hostname"], "worker-1");
        assert_eq!(endpoints[0]["addresses"], json!(["10.0.0.11"]));
        assert_eq!(endpoints[1]["conditions"]["ready"], false);
        assert_eq!(
            slice["metadata"]["labels"]["kubernetes.io/service-name"],
            SERVICE_NAME
        );
        assert_eq!(slice["ports"][0]["port"], 5000);
    }
}

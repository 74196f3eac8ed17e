//! What one read of the cluster found: the only input of planning.
//!
//! [`observe`] does the reading; everything else in the crate is a pure function of the
//! [`World`] it returns, so a plan can be computed (and tested) without an API server.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Secret, Service, ServiceAccount,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

/// The group every simplyblock kind lives in.
pub const GROUP: &str = simplyblock_api::GROUP;
/// The version the Go operator stored.
pub const V1ALPHA1: &str = "v1alpha1";
/// The hub version.
pub const V1ALPHA2: &str = "v1alpha2";

/// One CRD of the group, as far as the steps care.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Crd {
    pub kind: String,
    pub plural: String,
    /// `(version, served, storage)` for every declared version.
    pub versions: Vec<(String, bool, bool)>,
    /// `status.storedVersions`.
    pub stored_versions: Vec<String>,
    /// `spec.conversion.strategy` (`None` or `Webhook`).
    pub conversion: String,
    /// Whether the conversion webhook's client config carries a CA bundle.
    pub conversion_ca_bundle: bool,
    pub annotations: std::collections::BTreeMap<String, String>,
}

impl Crd {
    /// Whether `version` is served.
    pub fn serves(&self, version: &str) -> bool {
        self.versions
            .iter()
            .any(|(v, served, _)| v == version && *served)
    }
    /// This kind at `version`.
    pub fn resource(&self, version: &str) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(GROUP, version, &self.kind),
            &self.plural,
        )
    }
    /// The API of this kind's objects at `version` in `namespace`.
    pub fn api(&self, client: &kube::Client, namespace: &str, version: &str) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), namespace, &self.resource(version))
    }
    /// The version objects are stored at.
    pub fn storage(&self) -> Option<&str> {
        self.versions
            .iter()
            .find(|(_, _, storage)| *storage)
            .map(|(v, _, _)| v.as_str())
    }
}

/// What one read of the cluster found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct World {
    /// The namespace the simplyblock objects live in.
    pub namespace: String,
    /// Every CRD of the group.
    pub crds: Vec<Crd>,
    /// Every object of the group in the namespace, read at v1alpha1 from each CRD that
    /// serves it, as JSON with `apiVersion` and `kind`.
    pub objects: Vec<Value>,
    /// Objects of the kinds only v1alpha2 has (ClusterDeploymentConfig, StorageBackupPolicy,
    /// PersistentVolumeOps, StorageBackupOps), read at v1alpha2.
    pub hub_objects: Vec<Value>,
    /// The namespace's DaemonSets, Services, ServiceAccounts, ConfigMaps and Secrets,
    /// metadata only (`kind` and `metadata`): the workload a StorageNodeSet owned.
    pub workload: Vec<Value>,
    /// Kubernetes objects the moved annotation keys appear on: PersistentVolumes (with
    /// `spec.csi`), PersistentVolumeClaims of every namespace and Nodes; `kind`, `metadata`
    /// and, for volumes, `spec.csi`.
    pub kubernetes: Vec<Value>,
    /// The namespace's Deployments: `kind`, `metadata` and `spec.replicas`.
    pub deployments: Vec<Value>,
    /// The operator's leader Lease, if it exists.
    pub lease: Option<LeaseHeld>,
    /// What the person named: the releases and the Go operator's Deployment.
    pub target: Target,
}

/// The Helm releases and the Deployment the upgrade moves between.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// This release's Helm release.
    pub release: String,
    /// The Go operator's Helm release; empty: every other release.
    pub from_release: String,
    /// The Go operator's Deployment.
    pub old_operator: String,
}

impl Default for Target {
    fn default() -> Target {
        Target {
            release: DEFAULT_RELEASE.into(),
            from_release: String::new(),
            old_operator: DEFAULT_OLD_OPERATOR.into(),
        }
    }
}

/// This release's Helm release unless named.
pub const DEFAULT_RELEASE: &str = "simplyblock-operator";
/// The Go operator's Deployment unless named.
pub const DEFAULT_OLD_OPERATOR: &str = "simplyblock-operator-controller-manager";
/// The Deployment this release's chart runs the operator in.
pub const OPERATOR_DEPLOYMENT: &str = "simplyblock-operator";

/// Who holds the operator's leader Lease.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseHeld {
    /// The holder's identity; empty when released.
    pub holder: String,
    /// Whether the holder's term has not run out.
    pub current: bool,
}

/// The kind of an object.
pub fn kind(object: &Value) -> &str {
    object.get("kind").and_then(Value::as_str).unwrap_or("")
}

/// The name of an object.
pub fn name(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// A string at `pointer`, empty when absent.
pub fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `Kind/name`, how objects are named to a person.
pub fn display(object: &Value) -> String {
    format!("{}/{}", kind(object), name(object))
}

impl World {
    /// The group's CRD of `kind`.
    pub fn crd(&self, kind: &str) -> Option<&Crd> {
        self.crds.iter().find(|c| c.kind == kind)
    }
    /// The v1alpha1 objects of `kind`.
    pub fn of_kind<'a>(&'a self, kind_: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.iter().filter(move |o| kind(o) == kind_)
    }
    /// The v1alpha1 object `kind/name`.
    pub fn find(&self, kind_: &str, name_: &str) -> Option<&Value> {
        self.objects
            .iter()
            .find(|o| kind(o) == kind_ && name(o) == name_)
    }
    /// Whether a v1alpha2-only object `kind/name` exists.
    pub fn hub_has(&self, kind_: &str, name_: &str) -> bool {
        self.hub_objects
            .iter()
            .any(|o| kind(o) == kind_ && name(o) == name_)
    }
    /// Every object read, of every kind, for checks that look at metadata.
    pub fn everything(&self) -> impl Iterator<Item = &Value> {
        self.objects
            .iter()
            .chain(&self.hub_objects)
            .chain(&self.workload)
            .chain(&self.deployments)
            .chain(&self.kubernetes)
    }
    /// The namespace's workload and Deployments: what a Helm release or a StorageNodeSet
    /// may own.
    pub fn release_objects(&self) -> impl Iterator<Item = &Value> {
        self.workload.iter().chain(&self.deployments)
    }
}

fn not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Lists every object of one kind of the group at `version` in `namespace`, as JSON; a kind
/// whose CRD does not serve that version lists nothing.
pub async fn list_group(
    client: &kube::Client,
    namespace: &str,
    crd: &Crd,
    version: &str,
) -> anyhow::Result<Vec<Value>> {
    match crd
        .api(client, namespace, version)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list
            .items
            .into_iter()
            .map(|mut o| {
                o.types = Some(kube::core::TypeMeta {
                    api_version: format!("{GROUP}/{version}"),
                    kind: crd.kind.clone(),
                });
                Ok(serde_json::to_value(o)?)
            })
            .collect(),
        Err(e) if not_found(&e) => Ok(Vec::new()),
        Err(e) => Err(anyhow::anyhow!("listing {} at {version}: {e}", crd.plural)),
    }
}

/// `kind` and `metadata` of a typed object (and `spec.csi` of a volume).
fn meta_of<K: serde::Serialize>(kind: &str, object: &K) -> anyhow::Result<Value> {
    let full = serde_json::to_value(object)?;
    let mut out = serde_json::json!({
        "kind": kind,
        "metadata": full.get("metadata").cloned().unwrap_or(Value::Null),
    });
    if let Some(csi) = full.pointer("/spec/csi") {
        out["spec"] = serde_json::json!({ "csi": csi });
    }
    Ok(out)
}

/// `kind` and `metadata` of every object `api` lists, read as metadata only.
async fn list_meta<K>(api: Api<K>, kind: &str) -> anyhow::Result<Vec<Value>>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let items = api
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| anyhow::anyhow!("listing {kind}s: {e}"))?;
    items
        .items
        .iter()
        .map(|o| {
            Ok(serde_json::json!({"kind": kind, "metadata": serde_json::to_value(&o.metadata)?}))
        })
        .collect()
}

async fn list_typed<K>(api: Api<K>, kind: &str) -> anyhow::Result<Vec<Value>>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    let items = api
        .list(&ListParams::default())
        .await
        .map_err(|e| anyhow::anyhow!("listing {kind}s: {e}"))?;
    items.items.iter().map(|o| meta_of(kind, o)).collect()
}

fn crd_of(crd: &CustomResourceDefinition) -> Crd {
    let webhook = crd.spec.conversion.as_ref();
    Crd {
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
        versions: crd
            .spec
            .versions
            .iter()
            .map(|v| (v.name.clone(), v.served, v.storage))
            .collect(),
        stored_versions: crd
            .status
            .as_ref()
            .and_then(|s| s.stored_versions.clone())
            .unwrap_or_default(),
        conversion: webhook
            .map(|c| c.strategy.clone())
            .unwrap_or_else(|| "None".into()),
        conversion_ca_bundle: webhook
            .and_then(|c| c.webhook.as_ref())
            .and_then(|w| w.client_config.as_ref())
            .and_then(|c| c.ca_bundle.as_ref())
            .is_some_and(|b| !b.0.is_empty()),
        annotations: crd.metadata.annotations.clone().unwrap_or_default(),
    }
}

/// Reads what the steps and checks look at. Reads only.
pub async fn observe(client: &kube::Client, namespace: &str) -> anyhow::Result<World> {
    let crds: Vec<Crd> = Api::<CustomResourceDefinition>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| anyhow::anyhow!("listing CustomResourceDefinitions: {e}"))?
        .items
        .iter()
        .filter(|c| c.spec.group == GROUP)
        .map(crd_of)
        .collect();
    let mut world = World {
        namespace: namespace.to_owned(),
        ..World::default()
    };
    for crd in &crds {
        if crd.serves(V1ALPHA1) {
            world
                .objects
                .extend(list_group(client, namespace, crd, V1ALPHA1).await?);
        } else if crd.serves(V1ALPHA2) {
            world
                .hub_objects
                .extend(list_group(client, namespace, crd, V1ALPHA2).await?);
        }
    }
    world.crds = crds;
    world.workload.extend(
        list_meta(
            Api::<DaemonSet>::namespaced(client.clone(), namespace),
            "DaemonSet",
        )
        .await?,
    );
    world.workload.extend(
        list_meta(
            Api::<Service>::namespaced(client.clone(), namespace),
            "Service",
        )
        .await?,
    );
    world.workload.extend(
        list_meta(
            Api::<ServiceAccount>::namespaced(client.clone(), namespace),
            "ServiceAccount",
        )
        .await?,
    );
    world.workload.extend(
        list_meta(
            Api::<ConfigMap>::namespaced(client.clone(), namespace),
            "ConfigMap",
        )
        .await?,
    );
    world.workload.extend(
        list_meta(
            Api::<Secret>::namespaced(client.clone(), namespace),
            "Secret",
        )
        .await?,
    );
    // Volumes in full: their CSI handle is what normalize-volume-handles reads.
    world.kubernetes.extend(
        list_typed(
            Api::<PersistentVolume>::all(client.clone()),
            "PersistentVolume",
        )
        .await?,
    );
    world.kubernetes.extend(
        list_meta(
            Api::<PersistentVolumeClaim>::all(client.clone()),
            "PersistentVolumeClaim",
        )
        .await?,
    );
    world
        .kubernetes
        .extend(list_meta(Api::<Node>::all(client.clone()), "Node").await?);
    for deployment in Api::<Deployment>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(|e| anyhow::anyhow!("listing Deployments: {e}"))?
    {
        let mut seen = meta_of("Deployment", &deployment)?;
        seen["spec"] = serde_json::json!({
            "replicas": deployment.spec.replicas.unwrap_or(1)
        });
        world.deployments.push(seen);
    }
    world.lease = Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(simplyblock_api::LEADER_LEASE)
        .await
        .map_err(|e| anyhow::anyhow!("reading Lease {}: {e}", simplyblock_api::LEADER_LEASE))?
        .map(|lease| lease_held(&lease, jiff::Timestamp::now()));
    Ok(world)
}

/// Who holds `lease` at `now`.
pub fn lease_held(lease: &Lease, now: jiff::Timestamp) -> LeaseHeld {
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.unwrap_or_default();
    let renewed = spec.renew_time.or(spec.acquire_time).map(|t| t.0);
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(0));
    let current = !holder.is_empty()
        && renewed.is_some_and(|t| t + jiff::SignedDuration::from_secs(duration) > now);
    LeaseHeld { holder, current }
}

//! Open Cluster Management for an API server that plays a hub and every managed cluster at
//! once: the OCM CustomResourceDefinitions a hub serves, and a work agent that does what
//! each managed cluster's agents would.
//!
//! [`hub_crds`] installs `manifestworks` and `appliedmanifestworks`
//! (`work.open-cluster-management.io/v1`), `managedclusterviews`
//! (`view.open-cluster-management.io/v1beta1`) and `managedclusters`
//! (`cluster.open-cluster-management.io/v1`) in their real shapes; the parts of a schema this
//! module does not read preserve unknown fields. [`managed_cluster_crds`] is what a managed
//! cluster alone serves: `appliedmanifestworks` and nothing a hub controller could use.
//!
//! A managed cluster is a ManagedCluster object plus the namespace of the same name
//! ([`add_managed_cluster`]). [`work_agent`] serves the ManifestWorks and
//! ManagedClusterViews in the namespaces of the ManagedClusters it finds, on this same API
//! server:
//!
//! - a ManifestWork gets the finalizer [`WORK_FINALIZER`], then each manifest of
//!   `spec.workload.manifests` is applied with server-side apply (field manager
//!   [`FIELD_MANAGER`]) whenever the work's generation is new or an object is missing. The
//!   status is what the OCM agent writes: conditions Applied and Available, and per manifest
//!   `resourceStatus.manifests[]` with its `resourceMeta`, its own conditions, and the
//!   `statusFeedback.values` of each JSONPaths feedback rule of `spec.manifestConfigs` (paths
//!   of dotted field names, such as `.status.phase`).
//! - a deleted ManifestWork has its objects deleted (propagation `Foreground`, the default),
//!   left in place (`Orphan`), or deleted except those named in
//!   `selectivelyOrphans.orphaningRules` (`SelectivelyOrphan`); the finalizer is removed once
//!   every object it deletes is gone.
//! - a ManagedClusterView gets the object its `spec.scope` names in `status.result`, with the
//!   condition Processing (True with reason GetResourceProcessing, False with
//!   GetResourceFailed when the object cannot be read).
//!
//! The API server has no controller manager, so the agent also plays three of its
//! controllers, for the objects of its works only: it binds a statically pre-bound
//! PersistentVolume and claim (the PV's `claimRef` names the claim, the claim's `volumeName`
//! names the PV) by writing phase Bound on both, as the PV controller would; it removes the
//! `kubernetes.io/pv-protection` and `kubernetes.io/pvc-protection` finalizers of a PV or
//! claim it deleted, as the protection controllers would for an unused volume; and it
//! finalizes a Namespace it deleted once no claim is left in it, as the namespace
//! controller would. It writes no AppliedManifestWork objects.
//!
//! ```no_run
//! # async fn example(env: &simplyblock_testenv::TestEnv) -> anyhow::Result<()> {
//! use simplyblock_testenv::ocm;
//! env.install_crds(&ocm::hub_crds()).await?;
//! let client = env.client().await?;
//! ocm::add_managed_cluster(&client, "site-b").await?;
//! let agent = ocm::work_agent(client);
//! // ... ManifestWorks in namespace site-b are now applied on this API server ...
//! drop(agent);
//! # Ok(()) }
//! ```

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use crate::standin::StandIn;

/// The finalizer the work agent puts on each ManifestWork it serves, as OCM's does.
pub const WORK_FINALIZER: &str = "cluster.open-cluster-management.io/manifest-work-cleanup";
/// The field manager of the agent's server-side applies.
pub const FIELD_MANAGER: &str = "work-agent";

const WORK_GROUP: &str = "work.open-cluster-management.io";
const VIEW_GROUP: &str = "view.open-cluster-management.io";
const CLUSTER_GROUP: &str = "cluster.open-cluster-management.io";
const PROTECTION_FINALIZERS: &[&str] = &[
    "kubernetes.io/pv-protection",
    "kubernetes.io/pvc-protection",
];

/// `manifestworks` of `work.open-cluster-management.io/v1` (namespaced: the namespace is the
/// managed cluster's name).
pub fn manifest_work_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(WORK_GROUP, "v1", "ManifestWork"),
        "manifestworks",
    )
}

/// `managedclusterviews` of `view.open-cluster-management.io/v1beta1` (namespaced like
/// ManifestWorks).
pub fn managed_cluster_view_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(VIEW_GROUP, "v1beta1", "ManagedClusterView"),
        "managedclusterviews",
    )
}

/// `managedclusters` of `cluster.open-cluster-management.io/v1` (cluster-scoped).
pub fn managed_cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(CLUSTER_GROUP, "v1", "ManagedCluster"),
        "managedclusters",
    )
}

/// The OCM CRDs a hub serves: ManifestWork, AppliedManifestWork, ManagedClusterView and
/// ManagedCluster.
pub fn hub_crds() -> Vec<CustomResourceDefinition> {
    vec![
        manifest_work_crd(),
        applied_manifest_work_crd(),
        managed_cluster_view_crd(),
        managed_cluster_crd(),
    ]
}

/// What a managed cluster alone serves of OCM's work API: AppliedManifestWork.
pub fn managed_cluster_crds() -> Vec<CustomResourceDefinition> {
    vec![applied_manifest_work_crd()]
}

/// Creates the ManagedCluster `name` (accepted by the hub) and its namespace on the hub,
/// where its ManifestWorks and ManagedClusterViews live. Either may exist already.
pub async fn add_managed_cluster(client: &kube::Client, name: &str) -> Result<(), kube::Error> {
    crate::create_namespace(client, name).await?;
    let clusters: Api<DynamicObject> = Api::all_with(client.clone(), &managed_cluster_resource());
    let cluster = json!({
        "apiVersion": format!("{CLUSTER_GROUP}/v1"),
        "kind": "ManagedCluster",
        "metadata": {"name": name},
        "spec": {"hubAcceptsClient": true},
    });
    clusters
        .patch(
            name,
            &PatchParams::apply("ocm-test-hub").force(),
            &Patch::Apply(&cluster),
        )
        .await?;
    Ok(())
}

/// Starts the work agent of every managed cluster; dropping the result stops it.
pub fn work_agent(client: kube::Client) -> StandIn {
    StandIn::every_pass(move || {
        let client = client.clone();
        async move {
            // A failed pass (a CRD not installed yet, an object changed mid-pass) is tried
            // again on the next.
            if let Err(e) = pass(&client).await {
                tracing::debug!(error = %e, "an OCM work agent pass failed");
            }
        }
    })
}

async fn pass(client: &kube::Client) -> Result<(), kube::Error> {
    let clusters: Api<DynamicObject> = Api::all_with(client.clone(), &managed_cluster_resource());
    let mut resolver = Resolver::new(client);
    for cluster in clusters.list(&ListParams::default()).await? {
        let Some(name) = cluster.metadata.name else {
            continue;
        };
        let works: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &name, &manifest_work_resource());
        for work in works.list(&ListParams::default()).await? {
            if let Err(e) = serve_work(client, &works, work, &mut resolver).await {
                tracing::debug!(error = %e, "serving a ManifestWork failed");
            }
        }
        let views: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &name, &managed_cluster_view_resource());
        for view in views.list(&ListParams::default()).await? {
            serve_view(client, &views, view, &mut resolver).await?;
        }
    }
    Ok(())
}

/// One manifest of a work, located.
struct Placed {
    ordinal: usize,
    resource: ApiResource,
    namespaced: bool,
    name: String,
    namespace: Option<String>,
    manifest: Value,
}

impl Placed {
    fn api(&self, client: &kube::Client) -> Api<DynamicObject> {
        match (&self.namespace, self.namespaced) {
            (Some(ns), true) => Api::namespaced_with(client.clone(), ns, &self.resource),
            _ => Api::all_with(client.clone(), &self.resource),
        }
    }

    fn meta(&self) -> Value {
        json!({
            "ordinal": self.ordinal,
            "group": self.resource.group,
            "version": self.resource.version,
            "kind": self.resource.kind,
            "resource": self.resource.plural,
            "name": self.name,
            "namespace": self.namespace.clone().unwrap_or_default(),
        })
    }

    /// Whether `identifier` (a `resourceIdentifier` of the work's spec) names this object.
    fn is(&self, identifier: &Value) -> bool {
        let field = |k: &str| identifier[k].as_str().unwrap_or_default().to_owned();
        field("group") == self.resource.group
            && field("resource") == self.resource.plural
            && field("name") == self.name
            && field("namespace") == self.namespace.clone().unwrap_or_default()
    }
}

async fn placed(work: &DynamicObject, resolver: &mut Resolver<'_>) -> Result<Vec<Placed>, String> {
    let manifests = work.data["spec"]["workload"]["manifests"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::with_capacity(manifests.len());
    for (ordinal, manifest) in manifests.into_iter().enumerate() {
        let api_version = manifest["apiVersion"].as_str().unwrap_or_default();
        let kind = manifest["kind"].as_str().unwrap_or_default();
        let name = manifest["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let (resource, namespaced) = resolver
            .by_kind(api_version, kind)
            .await
            .ok_or_else(|| format!("manifest {ordinal}: {api_version} {kind} is not served"))?;
        let namespace = manifest["metadata"]["namespace"]
            .as_str()
            .map(str::to_owned)
            .filter(|_| namespaced);
        out.push(Placed {
            ordinal,
            resource,
            namespaced,
            name,
            namespace,
            manifest,
        });
    }
    Ok(out)
}

async fn serve_work(
    client: &kube::Client,
    works: &Api<DynamicObject>,
    work: DynamicObject,
    resolver: &mut Resolver<'_>,
) -> Result<(), kube::Error> {
    let name = work.metadata.name.clone().unwrap_or_default();
    let finalizers = work.metadata.finalizers.clone().unwrap_or_default();
    let has_finalizer = finalizers.iter().any(|f| f == WORK_FINALIZER);
    let objects = match placed(&work, resolver).await {
        Ok(objects) => objects,
        Err(reason) => {
            if work.metadata.deletion_timestamp.is_some() {
                return remove_finalizer(works, &name, finalizers).await;
            }
            let status = json!({
                "conditions": conditions(&work, false, false, "AppliedManifestWorkFailed", &reason),
            });
            return write_status(works, &work, status).await;
        }
    };

    if work.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(());
        }
        if delete_objects(client, &work, &objects).await? {
            remove_finalizer(works, &name, finalizers).await?;
        }
        return Ok(());
    }
    if !has_finalizer {
        let mut with = finalizers;
        with.push(WORK_FINALIZER.to_owned());
        works
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": with}})),
            )
            .await?;
        return Ok(());
    }

    let applied_generation = work.data["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Applied"))
        .filter(|c| c["status"] == "True")
        .and_then(|c| c["observedGeneration"].as_i64());
    let fresh = applied_generation != work.metadata.generation;
    let configs = work.data["spec"]["manifestConfigs"]
        .as_array()
        .cloned()
        .unwrap_or_default();

    let mut all_applied = true;
    let mut all_available = true;
    let mut first_error = None;
    let mut manifest_status = Vec::with_capacity(objects.len());
    for object in &objects {
        let api = object.api(client);
        let mut current = api.get_opt(&object.name).await?;
        let mut applied = true;
        let mut message = "Apply manifest complete".to_owned();
        if fresh || current.is_none() {
            match api
                .patch(
                    &object.name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&object.manifest),
                )
                .await
            {
                Ok(now) => current = Some(now),
                Err(e) => {
                    applied = false;
                    message = format!("Failed to apply manifest: {e}");
                    first_error.get_or_insert_with(|| message.clone());
                }
            }
        }
        if let Some(now) = &current {
            bind_static_pair(client, object, now).await?;
            current = api.get_opt(&object.name).await?;
        }
        let available = current.is_some();
        all_applied &= applied;
        all_available &= available;
        let values = current
            .as_ref()
            .map(|now| feedback(object, &configs, now))
            .unwrap_or_default();
        let mut entry = json!({
            "resourceMeta": object.meta(),
            "conditions": [
                condition("Applied", applied, if applied { "AppliedManifestComplete" } else { "AppliedManifestFailed" }, &message, work.metadata.generation),
                condition("Available", available, if available { "ResourceAvailable" } else { "ResourceNotAvailable" }, if available { "Resource is available" } else { "Resource is not available" }, work.metadata.generation),
            ],
        });
        if !values.is_empty() {
            entry["statusFeedback"] = json!({"values": values});
            entry["conditions"]
                .as_array_mut()
                .expect("an array")
                .push(condition(
                    "StatusFeedbackSynced",
                    true,
                    "StatusFeedbackSynced",
                    "",
                    work.metadata.generation,
                ));
        }
        manifest_status.push(entry);
    }
    let (reason, message) = match &first_error {
        None => (
            "AppliedManifestWorkComplete",
            "Apply manifest work complete",
        ),
        Some(e) => ("AppliedManifestWorkFailed", e.as_str()),
    };
    let status = json!({
        "conditions": conditions(&work, all_applied, all_available, reason, message),
        "resourceStatus": {"manifests": manifest_status},
    });
    write_status(works, &work, status).await
}

/// Deletes a deleted work's objects as its `deleteOption` says; true once every object to
/// delete is gone.
async fn delete_objects(
    client: &kube::Client,
    work: &DynamicObject,
    objects: &[Placed],
) -> Result<bool, kube::Error> {
    let option = &work.data["spec"]["deleteOption"];
    let policy = option["propagationPolicy"].as_str().unwrap_or("Foreground");
    if policy == "Orphan" {
        return Ok(true);
    }
    let orphaned: Vec<Value> = if policy == "SelectivelyOrphan" {
        option["selectivelyOrphans"]["orphaningRules"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let mut all_gone = true;
    // Claims before volumes before namespaces, as a namespace is finalized only once its
    // claims are gone.
    let mut order: Vec<&Placed> = objects
        .iter()
        .filter(|o| !orphaned.iter().any(|rule| o.is(rule)))
        .collect();
    order.sort_by_key(|o| match o.resource.kind.as_str() {
        "Namespace" => 2,
        "PersistentVolume" => 1,
        _ => 0,
    });
    for object in order {
        let api = object.api(client);
        let Some(current) = api.get_opt(&object.name).await? else {
            continue;
        };
        all_gone = false;
        if current.metadata.deletion_timestamp.is_none() {
            match api.delete(&object.name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
            continue;
        }
        let finalizers = current.metadata.finalizers.clone().unwrap_or_default();
        if finalizers
            .iter()
            .any(|f| PROTECTION_FINALIZERS.contains(&f.as_str()))
        {
            let kept: Vec<&String> = finalizers
                .iter()
                .filter(|f| !PROTECTION_FINALIZERS.contains(&f.as_str()))
                .collect();
            api.patch(
                &object.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": kept}})),
            )
            .await?;
        }
        if object.resource.kind == "Namespace" && object.resource.group.is_empty() {
            finalize_namespace(client, &object.name).await?;
        }
    }
    Ok(all_gone)
}

/// What the namespace controller does for a namespace being deleted, once its claims are
/// gone: clears `spec.finalizers`, after which the API server removes it.
async fn finalize_namespace(client: &kube::Client, name: &str) -> Result<(), kube::Error> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), name);
    if !claims.list(&ListParams::default()).await?.items.is_empty() {
        return Ok(());
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let Some(mut namespace) = namespaces.get_opt(name).await? else {
        return Ok(());
    };
    if let Some(spec) = namespace.spec.as_mut() {
        spec.finalizers = None;
    }
    namespaces
        .replace_subresource("finalize", name, &PostParams::default(), &namespace)
        .await?;
    Ok(())
}

async fn remove_finalizer(
    works: &Api<DynamicObject>,
    name: &str,
    finalizers: Vec<String>,
) -> Result<(), kube::Error> {
    let kept: Vec<String> = finalizers
        .into_iter()
        .filter(|f| f != WORK_FINALIZER)
        .collect();
    works
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": kept}})),
        )
        .await?;
    Ok(())
}

/// What the PV controller does for a claim created bound to a volume that is reserved for
/// it: both report phase Bound.
async fn bind_static_pair(
    client: &kube::Client,
    object: &Placed,
    current: &DynamicObject,
) -> Result<(), kube::Error> {
    if object.resource.kind != "PersistentVolumeClaim" || !object.resource.group.is_empty() {
        return Ok(());
    }
    let Some(namespace) = object.namespace.as_deref() else {
        return Ok(());
    };
    if current.data["status"]["phase"] == "Bound" {
        return Ok(());
    }
    let Some(volume) = current.data["spec"]["volumeName"].as_str() else {
        return Ok(());
    };
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let Some(pv) = volumes.get_opt(volume).await? else {
        return Ok(());
    };
    let reserved = pv
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .is_some_and(|r| {
            r.namespace.as_deref() == Some(namespace) && r.name.as_deref() == Some(&object.name)
        });
    if !reserved {
        return Ok(());
    }
    bind(client, namespace, &object.name).await
}

/// Writes phase Bound on the claim `namespace/name` and on the PersistentVolume its
/// `spec.volumeName` names (with the claim's UID in the volume's `claimRef`), as the PV
/// controller does once it binds them. For claims a test creates itself.
pub async fn bind(client: &kube::Client, namespace: &str, name: &str) -> Result<(), kube::Error> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let claim = claims.get(name).await?;
    let spec = claim.spec.clone().unwrap_or_default();
    let Some(volume) = spec.volume_name.clone() else {
        return Ok(());
    };
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let pv = volumes.get(&volume).await?;
    let pv_spec = pv.spec.clone().unwrap_or_default();
    volumes
        .patch(
            &volume,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"claimRef": {"uid": claim.metadata.uid}}})),
        )
        .await?;
    volumes
        .patch_status(
            &volume,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Bound"}})),
        )
        .await?;
    let capacity = pv_spec
        .capacity
        .clone()
        .or_else(|| spec.resources.as_ref().and_then(|r| r.requests.clone()));
    claims
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "phase": "Bound",
                "accessModes": pv_spec.access_modes.or(spec.access_modes),
                "capacity": capacity,
            }})),
        )
        .await?;
    Ok(())
}

/// The values of the JSONPaths feedback rules of `configs` that name `object`.
fn feedback(object: &Placed, configs: &[Value], current: &DynamicObject) -> Vec<Value> {
    let Ok(whole) = serde_json::to_value(current) else {
        return Vec::new();
    };
    let mut values = Vec::new();
    for config in configs
        .iter()
        .filter(|c| object.is(&c["resourceIdentifier"]))
    {
        let rules = config["feedbackRules"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for rule in rules.iter().filter(|r| r["type"] == "JSONPaths") {
            let paths = rule["jsonPaths"].as_array().cloned().unwrap_or_default();
            for path in paths {
                let name = path["name"].as_str().unwrap_or_default();
                let at = path["path"].as_str().unwrap_or_default();
                let found = at
                    .trim_start_matches('.')
                    .split('.')
                    .filter(|s| !s.is_empty())
                    .try_fold(&whole, |v, key| v.get(key));
                let field = match found {
                    Some(Value::String(s)) => json!({"type": "String", "string": s}),
                    Some(Value::Bool(b)) => json!({"type": "Boolean", "boolean": b}),
                    Some(Value::Number(n)) if n.is_i64() => {
                        json!({"type": "Integer", "integer": n})
                    }
                    Some(Value::Null) | None => continue,
                    Some(other) => json!({"type": "JsonRaw", "jsonRaw": other.to_string()}),
                };
                values.push(json!({"name": name, "fieldValue": field}));
            }
        }
    }
    values
}

fn conditions(
    work: &DynamicObject,
    applied: bool,
    available: bool,
    reason: &str,
    message: &str,
) -> Value {
    let generation = work.metadata.generation;
    json!([
        condition("Applied", applied, reason, message, generation),
        condition(
            "Available",
            available,
            if available {
                "ResourcesAvailable"
            } else {
                "ResourcesNotAvailable"
            },
            if available {
                "All resources are available"
            } else {
                "Not all resources are available"
            },
            generation,
        ),
    ])
}

fn condition(
    kind: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Value {
    json!({
        "type": kind,
        "status": if status { "True" } else { "False" },
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": now(),
    })
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// Writes `status` unless the object's status already says the same: conditions compare
/// without their transition times, and an unchanged condition keeps its old time.
async fn write_status(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    mut status: Value,
) -> Result<(), kube::Error> {
    let current = object.data.get("status").cloned().unwrap_or(Value::Null);
    keep_transition_times(&mut status, &current);
    if status == current || same_status(&status, &current) {
        return Ok(());
    }
    let name = object.metadata.name.clone().unwrap_or_default();
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await?;
    Ok(())
}

fn same_status(want: &Value, current: &Value) -> bool {
    want.as_object().is_some_and(|w| {
        w.iter()
            .all(|(k, v)| current.get(k).unwrap_or(&Value::Null) == v)
    })
}

/// Gives each condition of `status` (also nested in `resourceStatus.manifests`) the
/// transition time of the same condition in `current` when its status did not change.
fn keep_transition_times(status: &mut Value, current: &Value) {
    fn carry(want: &mut Value, had: &Value) {
        let (Some(want), Some(had)) = (want.as_array_mut(), had.as_array()) else {
            return;
        };
        for c in want {
            if let Some(old) = had
                .iter()
                .find(|o| o["type"] == c["type"] && o["status"] == c["status"])
            {
                c["lastTransitionTime"] = old["lastTransitionTime"].clone();
            }
        }
    }
    carry(&mut status["conditions"], &current["conditions"]);
    if let Some(manifests) = status["resourceStatus"]["manifests"].as_array_mut() {
        let had = current["resourceStatus"]["manifests"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for m in manifests {
            if let Some(old) = had.iter().find(|o| o["resourceMeta"] == m["resourceMeta"]) {
                carry(&mut m["conditions"], &old["conditions"]);
            }
        }
    }
}

async fn serve_view(
    client: &kube::Client,
    views: &Api<DynamicObject>,
    view: DynamicObject,
    resolver: &mut Resolver<'_>,
) -> Result<(), kube::Error> {
    let scope = &view.data["spec"]["scope"];
    let group = scope["apiGroup"].as_str().unwrap_or_default();
    let version = scope["version"].as_str();
    let name = scope["name"].as_str().unwrap_or_default();
    let namespace = scope["namespace"].as_str().filter(|n| !n.is_empty());
    let target = match (scope["resource"].as_str(), scope["kind"].as_str()) {
        (Some(resource), _) if !resource.is_empty() => {
            resolver.by_resource(group, version, resource).await
        }
        (_, Some(kind)) if !kind.is_empty() => {
            let api_version = match (group, version) {
                ("", v) => v.unwrap_or("v1").to_owned(),
                (g, Some(v)) => format!("{g}/{v}"),
                (g, None) => resolver.preferred(g).await.unwrap_or_default(),
            };
            resolver.by_kind(&api_version, kind).await
        }
        _ => None,
    };
    let result = match target {
        None => Err("the scope names no resource this cluster serves".to_owned()),
        Some((resource, namespaced)) => {
            let api: Api<DynamicObject> = match (namespaced, namespace) {
                (true, Some(ns)) => Api::namespaced_with(client.clone(), ns, &resource),
                _ => Api::all_with(client.clone(), &resource),
            };
            match api.get_opt(name).await {
                Ok(Some(object)) => serde_json::to_value(&object).map_err(|e| e.to_string()),
                Ok(None) => Err(format!("{} {name} not found", resource.plural)),
                Err(e) => Err(e.to_string()),
            }
        }
    };
    let status = match result {
        Ok(object) => json!({
            "conditions": [condition("Processing", true, "GetResourceProcessing", "Watching resources successfully", view.metadata.generation)],
            "result": object,
        }),
        Err(message) => json!({
            "conditions": [condition("Processing", false, "GetResourceFailed", &message, view.metadata.generation)],
            "result": null,
        }),
    };
    write_status(views, &view, status).await
}

/// Discovery, asked once per pass and group version.
struct Resolver<'a> {
    client: &'a kube::Client,
    served: HashMap<String, Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource>>,
}

impl<'a> Resolver<'a> {
    fn new(client: &'a kube::Client) -> Self {
        Resolver {
            client,
            served: HashMap::new(),
        }
    }

    async fn resources(
        &mut self,
        api_version: &str,
    ) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource] {
        if !self.served.contains_key(api_version) {
            let list = if api_version.contains('/') {
                self.client.list_api_group_resources(api_version).await
            } else {
                self.client.list_core_api_resources(api_version).await
            };
            let resources = list
                .map(|l| {
                    l.resources
                        .into_iter()
                        .filter(|r| !r.name.contains('/'))
                        .collect()
                })
                .unwrap_or_default();
            self.served.insert(api_version.to_owned(), resources);
        }
        &self.served[api_version]
    }

    async fn preferred(&mut self, group: &str) -> Option<String> {
        let groups = self.client.list_api_groups().await.ok()?;
        groups
            .groups
            .into_iter()
            .find(|g| g.name == group)
            .and_then(|g| g.preferred_version.map(|v| v.group_version))
    }

    async fn by_kind(&mut self, api_version: &str, kind: &str) -> Option<(ApiResource, bool)> {
        let found = self
            .resources(api_version)
            .await
            .iter()
            .find(|r| r.kind == kind)?
            .clone();
        let gvk = GroupVersionKind::try_from(&kube::core::TypeMeta {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        })
        .ok()?;
        Some((
            ApiResource::from_gvk_with_plural(&gvk, &found.name),
            found.namespaced,
        ))
    }

    async fn by_resource(
        &mut self,
        group: &str,
        version: Option<&str>,
        resource: &str,
    ) -> Option<(ApiResource, bool)> {
        let api_version = match (group, version) {
            ("", v) => v.unwrap_or("v1").to_owned(),
            (g, Some(v)) => format!("{g}/{v}"),
            (g, None) => self.preferred(g).await?,
        };
        let kind = self
            .resources(&api_version)
            .await
            .iter()
            .find(|r| r.name == resource)?
            .kind
            .clone();
        self.by_kind(&api_version, &kind).await
    }
}

fn crd(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    short_names: &[&str],
    properties: Value,
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
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "versions": [{
                "name": version, "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": properties,
                }}
            }]
        }
    }))
    .expect("an OCM CRD is well-formed")
}

fn open() -> Value {
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

fn conditions_schema() -> Value {
    json!({"type": "array", "items": {
        "type": "object",
        "required": ["type", "status", "lastTransitionTime", "reason", "message"],
        "properties": {
            "type": {"type": "string"},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "observedGeneration": {"type": "integer", "format": "int64"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
        },
    }})
}

fn resource_identifier_schema() -> Value {
    json!({"type": "object", "required": ["resource", "name"], "properties": {
        "group": {"type": "string"},
        "resource": {"type": "string"},
        "name": {"type": "string"},
        "namespace": {"type": "string"},
    }})
}

fn manifest_work_crd() -> CustomResourceDefinition {
    let embedded = json!({
        "type": "object",
        "x-kubernetes-embedded-resource": true,
        "x-kubernetes-preserve-unknown-fields": true,
    });
    crd(
        WORK_GROUP,
        "v1",
        "ManifestWork",
        "manifestworks",
        true,
        &["mw"],
        json!({
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "workload": {"type": "object", "properties": {
                    "manifests": {"type": "array", "items": embedded},
                }},
                "deleteOption": {"type": "object", "properties": {
                    "propagationPolicy": {"type": "string", "default": "Foreground",
                        "enum": ["Foreground", "Orphan", "SelectivelyOrphan"]},
                    "selectivelyOrphans": {"type": "object", "properties": {
                        "orphaningRules": {"type": "array", "items": resource_identifier_schema()},
                    }},
                    "ttlSecondsAfterFinished": {"type": "integer", "format": "int64"},
                }},
                "manifestConfigs": manifest_configs_schema(),
                "executor": open(),
            }},
            "status": manifest_work_status_schema(),
        }),
    )
}

fn manifest_configs_schema() -> Value {
    json!({"type": "array", "items": {
        "type": "object",
        "required": ["resourceIdentifier"],
        "properties": {
            "resourceIdentifier": resource_identifier_schema(),
            "feedbackRules": {"type": "array", "items": {
                "type": "object",
                "required": ["type"],
                "properties": {
                    "type": {"type": "string", "enum": ["WellKnownStatus", "JSONPaths"]},
                    "jsonPaths": {"type": "array", "items": {
                        "type": "object",
                        "required": ["name", "path"],
                        "properties": {
                            "name": {"type": "string"},
                            "path": {"type": "string"},
                            "version": {"type": "string"},
                        },
                    }},
                },
            }},
            "updateStrategy": open(),
        },
    }})
}

fn manifest_work_status_schema() -> Value {
    json!({"type": "object", "properties": {
        "conditions": conditions_schema(),
        "resourceStatus": {"type": "object", "properties": {
            "manifests": {"type": "array", "items": {
                "type": "object",
                "properties": {
                    "resourceMeta": {"type": "object", "properties": {
                        "ordinal": {"type": "integer", "format": "int32"},
                        "group": {"type": "string"},
                        "version": {"type": "string"},
                        "kind": {"type": "string"},
                        "resource": {"type": "string"},
                        "name": {"type": "string"},
                        "namespace": {"type": "string"},
                    }},
                    "statusFeedback": {"type": "object", "properties": {
                        "values": {"type": "array", "items": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {
                                "name": {"type": "string"},
                                "fieldValue": {"type": "object", "required": ["type"], "properties": {
                                    "type": {"type": "string", "enum": ["Integer", "String", "Boolean", "JsonRaw"]},
                                    "integer": {"type": "integer", "format": "int64"},
                                    "string": {"type": "string"},
                                    "boolean": {"type": "boolean"},
                                    "jsonRaw": {"type": "string"},
                                }},
                            },
                        }},
                    }},
                    "conditions": conditions_schema(),
                },
            }},
        }},
    }})
}

fn applied_manifest_work_crd() -> CustomResourceDefinition {
    crd(
        WORK_GROUP,
        "v1",
        "AppliedManifestWork",
        "appliedmanifestworks",
        false,
        &[],
        json!({
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "hubHash": {"type": "string"},
                "agentID": {"type": "string"},
                "manifestWorkName": {"type": "string"},
            }},
            "status": {"type": "object", "properties": {
                "appliedResources": {"type": "array", "items": open()},
                "evictionStartTime": {"type": "string", "format": "date-time"},
            }},
        }),
    )
}

fn managed_cluster_view_crd() -> CustomResourceDefinition {
    crd(
        VIEW_GROUP,
        "v1beta1",
        "ManagedClusterView",
        "managedclusterviews",
        true,
        &["mcv"],
        json!({
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "scope": {"type": "object", "required": ["name"], "properties": {
                    "apiGroup": {"type": "string"},
                    "kind": {"type": "string"},
                    "version": {"type": "string"},
                    "resource": {"type": "string"},
                    "name": {"type": "string"},
                    "namespace": {"type": "string"},
                    "updateIntervalSeconds": {"type": "integer", "format": "int32"},
                }},
            }},
            "status": {"type": "object", "properties": {
                "conditions": conditions_schema(),
                "result": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
            }},
        }),
    )
}

fn managed_cluster_crd() -> CustomResourceDefinition {
    crd(
        CLUSTER_GROUP,
        "v1",
        "ManagedCluster",
        "managedclusters",
        false,
        &["mcl", "mcls"],
        json!({
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {
                "hubAcceptsClient": {"type": "boolean"},
                "managedClusterClientConfigs": {"type": "array", "items": open()},
                "leaseDurationSeconds": {"type": "integer", "format": "int32"},
            }},
            "status": open(),
        }),
    )
}

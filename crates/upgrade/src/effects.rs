//! What the steps change. Each effect reads the [`World`] it is given, writes through the
//! client, and is safe to run again: a rerun after a kill finds part of its work done and
//! does the rest (every write is a merge of the wanted values or guarded by the object's
//! resourceVersion).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams,
    PostParams, Preconditions, PropagationPolicy,
};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use simplyblock_api::cluster_deployment_config::{
    ClusterDeploymentConfig, ClusterDeploymentConfigSpec, NodeGroup, NodeSet,
};

use crate::step::{Context, StepError};
use crate::steps::{self, HANDLE_ANNOTATION, SIZING_ANNOTATION};
use crate::world::{
    GROUP, OPERATOR_DEPLOYMENT, V1ALPHA1, V1ALPHA2, World, display, kind, name, text,
};
use crate::{checks, world};

/// The identity the tool holds the operator's Lease under.
pub const HOLDER: &str = "simplyblock-upgrade";
/// How long the tool's hold on the Lease lasts without a rerun renewing it.
pub const HOLD_SECONDS: i32 = 3600;
/// The field manager of the tool's writes.
pub const MANAGER: &str = "simplyblock-upgrade";
/// The pod-template annotation that restarts the operator's replicas at the swap.
pub const RESTARTED_ANNOTATION: &str = "storage.simplyblock.io/restarted-at";
/// The annotation the operator smoke test writes at v1alpha2.
pub const SMOKE_ANNOTATION: &str = "storage.simplyblock.io/upgraded-by";

fn failed(e: impl Into<anyhow::Error>) -> StepError {
    StepError::Failed(e.into())
}

fn kube_failed(what: impl std::fmt::Display) -> impl FnOnce(kube::Error) -> StepError {
    move |e| StepError::Failed(anyhow::anyhow!("{what}: {e}"))
}

/// The API of `object`'s kind: the group's kinds at the version the object was read at,
/// the Kubernetes kinds the steps touch by their own resource.
fn api_of(ctx: &Context, world: &World, object: &Value) -> Result<Api<DynamicObject>, StepError> {
    let kind_ = kind(object);
    let namespace = match text(object, "/metadata/namespace") {
        "" => ctx.namespace.as_str(),
        ns => ns,
    };
    let (group, plural, namespaced) = match kind_ {
        "DaemonSet" => ("apps", "daemonsets", true),
        "Deployment" => ("apps", "deployments", true),
        "Service" => ("", "services", true),
        "ServiceAccount" => ("", "serviceaccounts", true),
        "ConfigMap" => ("", "configmaps", true),
        "Secret" => ("", "secrets", true),
        "PersistentVolumeClaim" => ("", "persistentvolumeclaims", true),
        "PersistentVolume" => ("", "persistentvolumes", false),
        "Node" => ("", "nodes", false),
        _ => {
            let crd = world.crd(kind_).ok_or_else(|| {
                failed(anyhow::anyhow!(
                    "{}: no CRD of kind {kind_}",
                    display(object)
                ))
            })?;
            let version = if text(object, "/apiVersion").ends_with(V1ALPHA2) {
                V1ALPHA2
            } else {
                V1ALPHA1
            };
            return Ok(crd.api(&ctx.client, namespace, version));
        }
    };
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind_), plural);
    Ok(if namespaced {
        Api::namespaced_with(ctx.client.clone(), namespace, &resource)
    } else {
        Api::all_with(ctx.client.clone(), &resource)
    })
}

/// Merges `patch` into `object`, guarded by the resourceVersion it was read at: a change
/// since is a conflict, and the step's next run reads again.
async fn merge(
    ctx: &Context,
    world: &World,
    object: &Value,
    mut patch: Value,
) -> Result<(), StepError> {
    let version = text(object, "/metadata/resourceVersion");
    if !version.is_empty() {
        patch["metadata"]["resourceVersion"] = Value::String(version.into());
    }
    api_of(ctx, world, object)?
        .patch(name(object), &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(kube_failed(format!("updating {}", display(object))))?;
    Ok(())
}

// ---- upgrade ----

/// The tool's hold on the operator's Lease: taken (or renewed) so the new operator, once
/// deployed, serves its webhooks but runs no controller until the swap.
pub fn hold_controllers<'a>(
    ctx: &'a Context,
    _: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move { hold(ctx).await }.boxed()
}

/// Takes or renews the hold; refuses a Lease another holder keeps current.
pub async fn hold(ctx: &Context) -> Result<(), StepError> {
    let api: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let now = MicroTime(jiff::Timestamp::now());
    let lease_name = simplyblock_api::LEADER_LEASE;
    let existing = api
        .get_opt(lease_name)
        .await
        .map_err(kube_failed(format!("reading Lease {lease_name}")))?;
    let mut spec = LeaseSpec {
        holder_identity: Some(HOLDER.into()),
        lease_duration_seconds: Some(HOLD_SECONDS),
        acquire_time: Some(now.clone()),
        renew_time: Some(now),
        ..LeaseSpec::default()
    };
    match existing {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(lease_name.into()),
                    namespace: Some(ctx.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec),
            };
            api.create(&PostParams::default(), &lease)
                .await
                .map_err(kube_failed(format!("creating Lease {lease_name}")))?;
        }
        Some(mut lease) => {
            let held = world::lease_held(&lease, jiff::Timestamp::now());
            if held.current && held.holder != HOLDER {
                return Err(failed(anyhow::anyhow!(
                    "Lease {lease_name} is held by {:?}: an operator of this release already runs its controllers; stop it (scale its Deployment to 0) and run again",
                    held.holder
                )));
            }
            if held.holder == HOLDER {
                spec.acquire_time = lease.spec.as_ref().and_then(|s| s.acquire_time.clone());
            }
            lease.spec = Some(spec);
            // Replace, guarded by the resourceVersion just read.
            api.replace(lease_name, &PostParams::default(), &lease)
                .await
                .map_err(kube_failed(format!("holding Lease {lease_name}")))?;
        }
    }
    Ok(())
}

/// Installs this release's chart beside the Go operator: `helm upgrade --install`, the
/// operator's profile `empty` (the installation's control plane and driver are adopted,
/// not installed again), without its CRDs.
pub fn deploy_operator<'a>(ctx: &'a Context, _: &'a World) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let Some(chart) = &ctx.helm.chart else {
            return Err(failed(anyhow::anyhow!(
                "no chart given: pass --chart with this release's simplyblock-operator chart (a directory, an archive or a repository reference)"
            )));
        };
        let mut args: Vec<String> = vec![
            "upgrade".into(),
            "--install".into(),
            ctx.helm.release.clone(),
            chart.clone(),
            "--namespace".into(),
            ctx.namespace.clone(),
            "--take-ownership".into(),
            // The CRDs are the apply-crds step's: storage held at v1alpha1 until migrate
            // (the chart's crds/ store v1alpha2), so neither Helm's crds/ nor the chart's
            // pre-upgrade hook applies them.
            "--skip-crds".into(),
            "--set".into(),
            "crds.upgrade=false".into(),
            // This tool's preflight checked the installation; the chart's hook Job would
            // hold the install on node prerequisites the running storage already meets.
            "--set".into(),
            "preflight.enabled=false".into(),
            "--set".into(),
            "deployment.profile=empty".into(),
        ];
        if let Some(kubeconfig) = &ctx.helm.kubeconfig {
            args.push("--kubeconfig".into());
            args.push(kubeconfig.clone());
        }
        for values in &ctx.helm.values {
            args.push("--values".into());
            args.push(values.clone());
        }
        println!("    running: {} {}", ctx.helm.binary, args.join(" "));
        let out = tokio::process::Command::new(&ctx.helm.binary)
            .args(&args)
            .output()
            .await
            .map_err(|e| failed(anyhow::anyhow!("running {}: {e}", ctx.helm.binary)))?;
        if !out.status.success() {
            return Err(failed(anyhow::anyhow!(
                "helm refused the install: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }
    .boxed()
}

/// Nothing to change: the step waits for its `done`.
pub fn wait_only<'a>(_: &'a Context, _: &'a World) -> BoxFuture<'a, Result<(), StepError>> {
    async { Ok(()) }.boxed()
}

/// Whether `crd`'s `status.storedVersions` lists v1alpha1: objects may be stored there.
fn stores_v1alpha1(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.stored_versions.as_ref())
        .is_some_and(|v| v.iter().any(|v| v == V1ALPHA1))
}

/// This release's CRDs applied, each converting kind's storage held at v1alpha1 and its
/// conversion (the operator's webhook, written when it started) kept as it is.
pub fn apply_crds<'a>(ctx: &'a Context, _: &'a World) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let api: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
        for mut crd in simplyblock_api::crds() {
            let crd_name = crd.metadata.name.clone().unwrap_or_default();
            let live = api
                .get_opt(&crd_name)
                .await
                .map_err(kube_failed(format!("reading CRD {crd_name}")))?;
            let stored_v1alpha1 = live.as_ref().is_some_and(stores_v1alpha1);
            let converting = crd.spec.versions.iter().any(|v| v.name == V1ALPHA1);
            if converting && stored_v1alpha1 {
                for version in &mut crd.spec.versions {
                    version.storage = version.name == V1ALPHA1;
                }
                crd.spec.conversion = live.and_then(|l| l.spec.conversion);
            }
            crd.metadata.managed_fields = None;
            api.patch(
                &crd_name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&crd),
            )
            .await
            .map_err(kube_failed(format!("applying CRD {crd_name}")))?;
        }
        Ok(())
    }
    .boxed()
}

/// Every CRD of this release Established with its names accepted, each converting kind
/// serving both versions with storage still at v1alpha1 where objects are stored there.
pub fn verify_crd_versions<'a>(
    ctx: &'a Context,
    _: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let api: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
        let deadline = tokio::time::Instant::now() + ctx.wait;
        loop {
            let mut problems = Vec::new();
            for crd in simplyblock_api::crds() {
                let crd_name = crd.metadata.name.clone().unwrap_or_default();
                let Some(live) = api
                    .get_opt(&crd_name)
                    .await
                    .map_err(kube_failed(format!("reading CRD {crd_name}")))?
                else {
                    problems.push(format!("{crd_name}: not installed"));
                    continue;
                };
                let conditions = live
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.clone())
                    .unwrap_or_default();
                for wanted in ["Established", "NamesAccepted"] {
                    if !conditions
                        .iter()
                        .any(|c| c.type_ == wanted && c.status == "True")
                    {
                        problems.push(format!("{crd_name}: not {wanted}"));
                    }
                }
                let served = |v: &str| live.spec.versions.iter().any(|x| x.name == v && x.served);
                if !served(V1ALPHA2) {
                    problems.push(format!("{crd_name}: v1alpha2 not served"));
                }
                if crd.spec.versions.iter().any(|v| v.name == V1ALPHA1) {
                    if !served(V1ALPHA1) {
                        problems.push(format!("{crd_name}: v1alpha1 not served"));
                    }
                    let storage = live.spec.versions.iter().find(|v| v.storage);
                    if stores_v1alpha1(&live) && storage.is_none_or(|v| v.name != V1ALPHA1) {
                        problems.push(format!(
                            "{crd_name}: storage is not held at v1alpha1 while objects are stored there"
                        ));
                    }
                }
            }
            if problems.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(failed(anyhow::anyhow!(
                    "the CRDs did not settle within {:?}: {}",
                    ctx.wait,
                    problems.join("; ")
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    .boxed()
}

/// Every object of `crd` at `version`, by name.
async fn read_all(
    ctx: &Context,
    crd: &world::Crd,
    version: &str,
) -> Result<BTreeMap<String, Value>, StepError> {
    Ok(world::list_group(&ctx.client, &ctx.namespace, crd, version)
        .await
        .map_err(failed)?
        .into_iter()
        .map(|o| (name(&o).to_owned(), o))
        .collect())
}

/// Every object of every converting kind read through v1alpha2 (converted by the webhook)
/// and through v1alpha1: the same objects, and what v1alpha2 says converts back to what
/// v1alpha1 says.
pub fn smoke_test_conversion<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let kinds = checks::converting_kinds();
        let mut problems = Vec::new();
        for crd in world.crds.iter().filter(|c| kinds.contains(&c.kind.as_str())) {
            let old = read_all(ctx, crd, V1ALPHA1).await?;
            let hub = read_all(ctx, crd, V1ALPHA2).await?;
            if old.keys().ne(hub.keys()) {
                problems.push(format!(
                    "{}: v1alpha1 lists {:?}, v1alpha2 lists {:?}",
                    crd.kind,
                    old.keys().collect::<Vec<_>>(),
                    hub.keys().collect::<Vec<_>>()
                ));
                continue;
            }
            for (object_name, read_at_hub) in &hub {
                let back = simplyblock_conversion::convert(read_at_hub, &format!("{GROUP}/{V1ALPHA1}"));
                for part in ["spec", "status"] {
                    let said = |o: &Value| {
                        simplyblock_conversion::path::said(o.get(part).unwrap_or(&Value::Null))
                    };
                    if said(&back) != said(&old[object_name]) {
                        problems.push(format!(
                            "{}/{object_name}: its {part} read through v1alpha2 does not convert back to what v1alpha1 reads",
                            crd.kind
                        ));
                    }
                }
            }
            println!(
                "    {}: {} object(s) read at both versions",
                crd.kind,
                hub.len()
            );
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(failed(anyhow::anyhow!(
                "the conversion smoke test failed:\n  {}",
                problems.join("\n  ")
            )))
        }
    }
    .boxed()
}

/// Marks what the old release owns `helm.sh/resource-policy: keep`, so uninstalling it
/// leaves them for this operator (its own operator Deployment excepted: that one goes).
pub fn hand_over_release<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let patch = json!({"metadata": {"annotations": {steps::KEEP_ANNOTATION: "keep"}}});
        let crds: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
        for crd in steps::crds_to_keep(world) {
            let crd_name = format!("{}.{GROUP}", crd.plural);
            crds.patch(&crd_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube_failed(format!("annotating CRD {crd_name}")))?;
        }
        for object in steps::objects_to_keep(world) {
            merge(ctx, world, object, patch.clone()).await?;
        }
        Ok(())
    }
    .boxed()
}

/// The swap: the Go operator scaled to nothing, the hold on the Lease released, and this
/// release's operator restarted, so it leads now: a replica waiting on the Lease sleeps
/// until the term it last read ends, which for the tool's hold is an hour away.
pub fn swap_operator<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
        for old in steps::old_operators(world) {
            deployments
                .patch(
                    name(old),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": 0}})),
                )
                .await
                .map_err(kube_failed(format!("scaling {} to 0", display(old))))?;
        }
        release(ctx).await?;
        let restart = json!({"spec": {"template": {"metadata": {"annotations": {
            RESTARTED_ANNOTATION: jiff::Timestamp::now().to_string()
        }}}}});
        deployments
            .patch(
                OPERATOR_DEPLOYMENT,
                &PatchParams::default(),
                &Patch::Merge(restart),
            )
            .await
            .map_err(kube_failed(format!(
                "restarting Deployment/{OPERATOR_DEPLOYMENT}"
            )))?;
        Ok(())
    }
    .boxed()
}

/// Gives the Lease up if the tool holds it, guarded by the version read.
async fn release(ctx: &Context) -> Result<(), StepError> {
    let api: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let lease_name = simplyblock_api::LEADER_LEASE;
    let Some(lease) = api
        .get_opt(lease_name)
        .await
        .map_err(kube_failed(format!("reading Lease {lease_name}")))?
    else {
        return Ok(());
    };
    if world::lease_held(&lease, jiff::Timestamp::now()).holder != HOLDER {
        return Ok(());
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: lease.metadata.resource_version.clone(),
            uid: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(lease_name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(kube_failed(format!("releasing Lease {lease_name}"))(e)),
    }
}

/// A write at v1alpha2 on every StorageCluster (an annotation, through the admission
/// webhooks and the conversion), read back at v1alpha1.
pub fn smoke_test_operator<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let Some(crd) = world.crd("StorageCluster") else {
            return Ok(());
        };
        let stamp = jiff::Timestamp::now().to_string();
        for cluster in world.of_kind("StorageCluster") {
            let at = |version: &str| crd.api(&ctx.client, &ctx.namespace, version);
            at(V1ALPHA2)
                .patch(
                    name(cluster),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {SMOKE_ANNOTATION: stamp}}})),
                )
                .await
                .map_err(kube_failed(format!(
                    "writing {} at v1alpha2",
                    display(cluster)
                )))?;
            let back = at(V1ALPHA1)
                .get(name(cluster))
                .await
                .map_err(kube_failed(format!(
                    "reading {} at v1alpha1",
                    display(cluster)
                )))?;
            let seen = back
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SMOKE_ANNOTATION))
                .cloned();
            if seen.as_deref() != Some(stamp.as_str()) {
                return Err(failed(anyhow::anyhow!(
                    "{}: the write at v1alpha2 does not read back at v1alpha1 (saw {seen:?})",
                    display(cluster)
                )));
            }
            println!(
                "    {} written at v1alpha2, read back at v1alpha1",
                display(cluster)
            );
        }
        Ok(())
    }
    .boxed()
}

// ---- migrate ----

/// The controller ownerReference to StorageCluster `cluster`, in place of the node set's.
fn reparented(world: &World, object: &Value) -> Result<Option<Value>, StepError> {
    let Some(set) = steps::owning_set(object) else {
        return Ok(None);
    };
    let cluster_name = world
        .find("StorageNodeSet", set)
        .map(|s| text(s, "/spec/clusterName"))
        .filter(|c| !c.is_empty())
        .or_else(|| steps::node_cluster(world, object))
        .ok_or_else(|| {
            failed(anyhow::anyhow!(
                "{}: its StorageNodeSet {set} is gone and names no cluster",
                display(object)
            ))
        })?;
    let cluster = world.find("StorageCluster", cluster_name).ok_or_else(|| {
        failed(anyhow::anyhow!(
            "{}: StorageCluster {cluster_name} does not exist",
            display(object)
        ))
    })?;
    let mut refs: Vec<Value> = object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| text(r, "/kind") != "StorageNodeSet" && text(r, "/kind") != "StorageCluster")
        .collect();
    refs.push(json!({
        "apiVersion": format!("{GROUP}/{V1ALPHA2}"),
        "kind": "StorageCluster",
        "name": cluster_name,
        "uid": text(cluster, "/metadata/uid"),
        "controller": true,
        "blockOwnerDeletion": true,
    }));
    Ok(Some(json!({"metadata": {"ownerReferences": refs}})))
}

/// The annotations that stamp a node's `sizing`.
fn stamp(sizing: &Value) -> Value {
    json!({SIZING_ANNOTATION: sizing.to_string()})
}

/// Each StorageNode of a set moves to the set's cluster in one update, which stamps its
/// sizing too when it has none: v1alpha2 requires both, and a node with one but not the
/// other could not be written through v1alpha2 in between.
pub fn reparent_nodes<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        for node in world.of_kind("StorageNode") {
            let Some(mut patch) = reparented(world, node)? else {
                continue;
            };
            if !steps::stamped(node)
                && let Some(sizing) = steps::sizing(world, node)
            {
                patch["metadata"]["annotations"] = stamp(&sizing);
            }
            merge(ctx, world, node, patch).await?;
        }
        Ok(())
    }
    .boxed()
}

/// Each object of a set's workload moves to the set's StorageCluster, one guarded update
/// each.
pub fn reparent_workload<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        for object in world.release_objects() {
            if let Some(patch) = reparented(world, object)? {
                merge(ctx, world, object, patch).await?;
            }
        }
        Ok(())
    }
    .boxed()
}

/// One unapproved ClusterDeploymentConfig per cluster the node sets name, its node sets
/// the retired sets with the workers their storage nodes run on: the cluster's layout
/// kept as a document; nothing runs from it until a person approves it.
pub fn create_deployment_configs<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let api: Api<ClusterDeploymentConfig> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
        for (cluster, sets) in steps::sets_by_cluster(world) {
            if world.hub_has("ClusterDeploymentConfig", cluster) {
                continue;
            }
            let node_sets = sets
                .iter()
                .map(|set_name| NodeSet {
                    name: (*set_name).to_owned(),
                    groups: vec![node_group(world, set_name)],
                })
                .collect();
            let mut document = ClusterDeploymentConfig::new(
                cluster,
                ClusterDeploymentConfigSpec {
                    approved: false,
                    environment: None,
                    edge_cluster: None,
                    cluster_ref: Some(cluster.to_owned()),
                    cluster: None,
                    node_sets,
                    images: None,
                    tolerations: Vec::new(),
                },
            );
            document.metadata.annotations = Some(BTreeMap::from([(
                "storage.simplyblock.io/migrated-from".to_owned(),
                sets.iter()
                    .map(|s| format!("StorageNodeSet/{s}"))
                    .collect::<Vec<_>>()
                    .join(","),
            )]));
            match api.create(&PostParams::default(), &document).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => {
                    return Err(kube_failed(format!(
                        "creating ClusterDeploymentConfig/{cluster}"
                    ))(e));
                }
            }
        }
        Ok(())
    }
    .boxed()
}

/// The one group of a retired set: the workers its storage nodes run on, its interfaces.
fn node_group(world: &World, set_name: &str) -> NodeGroup {
    let mut workers: Vec<String> = world
        .of_kind("StorageNode")
        .filter(|n| text(n, "/spec/storageNodeSetRef") == set_name)
        .map(|n| text(n, "/spec/workerNode").to_owned())
        .filter(|w| !w.is_empty())
        .collect();
    workers.sort_unstable();
    workers.dedup();
    let set = world.find("StorageNodeSet", set_name);
    let field = |pointer: &str| set.map(|s| text(s, pointer)).filter(|v| !v.is_empty());
    NodeGroup {
        name: "default".into(),
        workers,
        mgmt_interface: field("/spec/mgmtIfname").map(str::to_owned),
        data_interfaces: set
            .and_then(|s| s.pointer("/spec/dataIfname"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        devices: None,
        failure_domain: None,
        spdk_system_memory: None,
        journal_manager: None,
    }
}

/// The StorageNodeSets deleted, once nothing this tool moves names them, orphaning
/// anything else still theirs (the garbage collector's part).
pub fn retire_node_sets<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let still: Vec<String> = world
            .of_kind("StorageNode")
            .chain(world.release_objects())
            .filter(|o| steps::owning_set(o).is_some())
            .map(display)
            .collect();
        if !still.is_empty() {
            return Err(failed(anyhow::anyhow!(
                "still owned by a StorageNodeSet: {}",
                still.join(", ")
            )));
        }
        for set in world
            .of_kind("StorageNodeSet")
            .filter(|s| !steps::retired(s))
        {
            let api = api_of(ctx, world, set)?;
            // The Go operator's finalizers would hold the delete forever now it is gone; the
            // garbage collector's stay, so anything still the set's is orphaned, not deleted.
            let finalizers: Vec<&Value> = set
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .collect();
            let kept: Vec<&Value> = finalizers
                .iter()
                .copied()
                .filter(|f| {
                    f.as_str()
                        .is_some_and(|f| steps::COLLECTOR_FINALIZERS.contains(&f))
                })
                .collect();
            if kept.len() != finalizers.len() {
                merge(ctx, world, set, json!({"metadata": {"finalizers": kept}})).await?;
            }
            let params = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Orphan),
                ..DeleteParams::default()
            };
            match api.delete(name(set), &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(kube_failed(format!("deleting {}", display(set)))(e)),
            }
        }
        Ok(())
    }
    .boxed()
}

/// What retiring the sets must leave: every StorageNode and every workload object the sets'
/// clusters own, as `before` (the world the sets were deleted from) had them, still there
/// and not being deleted.
pub fn survivors_remain<'a>(
    ctx: &'a Context,
    before: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let owned_by_cluster = |o: &&Value| {
            o.pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| refs.iter().any(|r| text(r, "/kind") == "StorageCluster"))
        };
        let mut lost = Vec::new();
        for object in before
            .of_kind("StorageNode")
            .chain(before.release_objects().filter(owned_by_cluster))
        {
            let now = api_of(ctx, before, object)?
                .get_opt(name(object))
                .await
                .map_err(kube_failed(format!("reading {}", display(object))))?;
            if now.is_none_or(|o| o.metadata.deletion_timestamp.is_some()) {
                lost.push(display(object));
            }
        }
        if lost.is_empty() {
            Ok(())
        } else {
            Err(failed(anyhow::anyhow!(
                "retiring the node sets took what they owned with them: {} are gone or being deleted",
                lost.join(", ")
            )))
        }
    }
    .boxed()
}

pub fn stamp_sizing<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        for node in world.of_kind("StorageNode").filter(|n| !steps::stamped(n)) {
            let sizing = steps::sizing(world, node).ok_or_else(|| {
                failed(anyhow::anyhow!(
                    "{}: its cluster's sizing is unknown",
                    display(node)
                ))
            })?;
            merge(
                ctx,
                world,
                node,
                json!({"metadata": {"annotations": stamp(&sizing)}}),
            )
            .await?;
        }
        Ok(())
    }
    .boxed()
}

pub fn rewrite_keys<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        for object in world.everything() {
            let mut patch = json!({"metadata": {}});
            for (map, old, new) in steps::unmoved_keys(object) {
                let value = object
                    .pointer(&format!("/metadata/{map}"))
                    .and_then(|m| m.get(&old))
                    .cloned()
                    .unwrap_or(Value::Null);
                patch["metadata"][map][new] = value;
            }
            if patch["metadata"].as_object().is_some_and(|m| !m.is_empty()) {
                merge(ctx, world, object, patch).await?;
            }
        }
        Ok(())
    }
    .boxed()
}

pub fn normalize_handles<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        for (pv, handle) in steps::normalized_handles(world) {
            let handle = handle.ok_or_else(|| {
                failed(anyhow::anyhow!(
                    "{}: the pool its handle names is not found",
                    display(pv)
                ))
            })?;
            merge(
                ctx,
                world,
                pv,
                json!({"metadata": {"annotations": {HANDLE_ANNOTATION: handle}}}),
            )
            .await?;
        }
        Ok(())
    }
    .boxed()
}

/// The storage rewrite of each converting CRD: storage switched to v1alpha2, every object
/// written back unchanged (so etcd holds it at v1alpha2), then `status.storedVersions`
/// narrowed to `[v1alpha2]`. Each part is safe to repeat.
pub fn rewrite_storage<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let api: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
        let kinds = checks::converting_kinds();
        for crd in world
            .crds
            .iter()
            .filter(|c| kinds.contains(&c.kind.as_str()) && !steps::rewritten(c))
        {
            let crd_name = format!("{}.{GROUP}", crd.plural);
            let live = api
                .get(&crd_name)
                .await
                .map_err(kube_failed(format!("reading CRD {crd_name}")))?;
            if live
                .spec
                .versions
                .iter()
                .any(|v| v.name == V1ALPHA1 && v.storage)
            {
                let versions: Vec<Value> = live
                    .spec
                    .versions
                    .iter()
                    .map(|v| {
                        let mut v = serde_json::to_value(v).unwrap_or(Value::Null);
                        v["storage"] = json!(v["name"] == V1ALPHA2);
                        v
                    })
                    .collect();
                api.patch(
                    &crd_name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({
                        "metadata": {"resourceVersion": live.metadata.resource_version},
                        "spec": {"versions": versions},
                    })),
                )
                .await
                .map_err(kube_failed(format!(
                    "switching CRD {crd_name}'s storage to v1alpha2"
                )))?;
            }
            let resource = crd.resource(V1ALPHA2);
            let objects: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
            let all = objects
                .list(&ListParams::default())
                .await
                .map_err(kube_failed(format!("listing {} at v1alpha2", crd.plural)))?;
            let rewritten = all.items.len();
            for object in all.items {
                write_back(ctx, &resource, object).await?;
            }
            api.patch_status(
                &crd_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"storedVersions": [V1ALPHA2]}})),
            )
            .await
            .map_err(kube_failed(format!(
                "narrowing CRD {crd_name}'s storedVersions"
            )))?;
            println!(
                "    {}: {rewritten} object(s) rewritten at v1alpha2",
                crd.kind
            );
        }
        Ok(())
    }
    .boxed()
}

/// Writes `object` back as read; a conflict reads it again.
async fn write_back(
    ctx: &Context,
    resource: &ApiResource,
    mut object: DynamicObject,
) -> Result<(), StepError> {
    let object_name = object.metadata.name.clone().unwrap_or_default();
    let ns = object.metadata.namespace.clone().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, resource);
    for _ in 0..5 {
        match api
            .replace(&object_name, &PostParams::default(), &object)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                object = api.get(&object_name).await.map_err(kube_failed(format!(
                    "re-reading {}/{object_name}",
                    resource.kind
                )))?;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => {
                return Err(kube_failed(format!(
                    "writing {}/{object_name} back at v1alpha2",
                    resource.kind
                ))(e));
            }
        }
    }
    Err(failed(anyhow::anyhow!(
        "{}/{object_name} kept changing while it was written back; run again",
        resource.kind
    )))
}

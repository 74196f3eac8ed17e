//! The StoragePool controller: the pool in the control plane, its StorageClass, its status,
//! and its removal behind the finalizer.
//!
//! A create is preceded by a look-up by name, so a pool whose create answer was lost is
//! adopted, never created twice; its id is written to status at once. The controller's
//! own StorageClass is written once and recorded in `status.defaultStorageClassName`, so a
//! class a person deleted stays deleted. Its classes carry the storage id Ramen pairs
//! them by (the cluster's UUID), added to one written before it was labelled.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use simplyblock_api::storage_pool::{PoolPhase, StoragePoolStatus};
use simplyblock_api::{StorageCluster, StoragePool};
use simplyblock_controlplane::Uuid;

use super::{access, class};
use crate::runtime::context::{Context, requeue};
use crate::runtime::kit::{self, Error, Guard};

pub const FINALIZER: &str = "storage.simplyblock.io/storagepool-finalizer";
const MANAGER: &str = "storagepool-controller";

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "storagepool";

/// Runs the controller until the operator stops.
pub async fn run(ctx: Arc<Context>) {
    let controller = Controller::new(
        ctx.scope.api::<StoragePool>(&ctx.kube),
        watcher::Config::default(),
    );
    let store = controller.store();
    // A cluster getting its uuid moves its pools on.
    let of_cluster = move |c: StorageCluster| {
        store
            .state()
            .into_iter()
            .filter(|p| p.namespace() == c.namespace() && p.spec.cluster_ref == c.name_any())
            .map(|p| ObjectRef::from_obj(&*p))
            .collect::<Vec<_>>()
    };
    // A class appearing or going changes the pool's list of classes.
    let of_class = |c: StorageClass| {
        let labels = c.labels();
        match (
            labels.get(class::LABEL_NAMESPACE),
            labels.get(class::LABEL_POOL),
        ) {
            (Some(ns), Some(pool)) => Some(ObjectRef::<StoragePool>::new(pool).within(ns)),
            _ => None,
        }
    };
    // A Node joining or leaving changes who may attach the pools that name it.
    let pools = controller.store();
    let of_node = move |n: Node| {
        let name = n.name_any();
        pools
            .state()
            .into_iter()
            .filter(|p| access::names_node(p, &name))
            .map(|p| ObjectRef::from_obj(&*p))
            .collect::<Vec<_>>()
    };
    let controller = controller
        .watches(
            Api::<Node>::all(ctx.kube.clone()),
            watcher::Config::default(),
            of_node,
        )
        .watches(
            ctx.scope.api::<StorageCluster>(&ctx.kube),
            watcher::Config::default(),
            of_cluster,
        )
        .watches(
            Api::<StorageClass>::all(ctx.kube.clone()),
            watcher::Config::default().labels(class::LABEL_POOL),
            of_class,
        );
    // A stream event about a pool's control-plane object wakes it; the resync stays.
    let woken = ctx
        .streams
        .triggers(controller.store(), |p: &StoragePool, change| {
            let uuid = p.status.as_ref().and_then(|s| s.uuid.as_deref());
            crate::runtime::streams::status_uuid(uuid).is_some_and(|id| change.touches(id))
        });
    let controller = controller.reconcile_on(woken);
    kit::run(CONTROLLER, controller, reconcile, ctx).await
}

pub async fn reconcile(pool: Arc<StoragePool>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ctx = &*ctx;
    kit::finalized(
        &ctx.kube,
        FINALIZER,
        pool,
        |p| async move { apply(&p, ctx).await },
        |p| async move { cleanup(&p, ctx).await },
    )
    .await
}

fn cluster_uuid(cluster: &StorageCluster) -> Option<Uuid> {
    cluster.status.as_ref()?.uuid.as_deref()?.parse().ok()
}

/// Writes `next` as the pool's status when it differs from what is stored, only onto the
/// version read (a 409 is [`Error::Stale`]). Returns the pool as stored when it wrote: a
/// later write in the same pass goes onto that version.
async fn write_status(
    ctx: &Context,
    pool: &StoragePool,
    next: &StoragePoolStatus,
) -> Result<Option<StoragePool>, Error> {
    let mut next = next.clone();
    next.observed_generation = pool.metadata.generation;
    next.conditions = crate::runtime::conditions::for_phase(
        pool.status.as_ref().map(|s| &s.conditions[..]),
        next.phase,
        next.message.as_deref(),
        next.observed_generation,
    );
    if pool.status.as_ref() == Some(&next) {
        return Ok(None);
    }
    let written =
        kit::apply_status(&ctx.kube, pool, MANAGER, &next, Guard::ResourceVersion).await?;
    Ok(Some(written))
}

/// Records why the pool waits, with one event when the reason is new.
async fn hold(
    ctx: &Context,
    pool: &StoragePool,
    mut status: StoragePoolStatus,
    reason: &str,
    message: String,
) -> Result<(), Error> {
    if status.message.as_deref() != Some(message.as_str()) {
        ctx.event(pool, true, reason, message.clone()).await;
    }
    status.message = Some(message);
    write_status(ctx, pool, &status).await.map(drop)
}

async fn apply(pool: &StoragePool, ctx: &Context) -> Result<Action, Error> {
    let ns = pool.namespace().unwrap_or_default();
    let name = pool.name_any();
    let status = pool.status.clone().unwrap_or_default();
    let clusters: Api<StorageCluster> = Api::namespaced(ctx.kube.clone(), &ns);
    let Some(cluster) = clusters.get_opt(&pool.spec.cluster_ref).await? else {
        let message = format!(
            "StorageCluster {} does not exist in namespace {ns}; create it or correct spec.clusterRef",
            pool.spec.cluster_ref
        );
        hold(ctx, pool, status, "ClusterNotFound", message).await?;
        return Ok(Action::requeue(requeue::RESYNC));
    };
    let Some(cluster_id) = cluster_uuid(&cluster) else {
        let message = format!(
            "waiting for StorageCluster {} to be created in the control plane",
            pool.spec.cluster_ref
        );
        hold(ctx, pool, status, "ClusterNotReady", message).await?;
        return Ok(Action::requeue(requeue::RESYNC));
    };
    let errors = class::limit_errors(pool.spec.limits.as_ref());
    if !errors.is_empty() {
        let message = format!("the pool's limits cannot be applied: {}", errors.join("; "));
        hold(ctx, pool, status, "InvalidLimits", message).await?;
        return Ok(Action::await_change());
    }

    let cp = ctx.control_plane()?;
    // Its changes wake the pool; the pool itself is read by GET, because its used bytes
    // are a statistic the streams do not carry.
    ctx.follow(simplyblock_controlplane::Scope::Pools {
        cluster: cluster_id,
    })?;
    let mut next = status.clone();
    let mut written = None;
    let found = match status.uuid.as_deref().and_then(|u| u.parse::<Uuid>().ok()) {
        Some(uuid) => match cp.get_pool(cluster_id, uuid).await {
            Ok(found) => found,
            Err(e) if e.is_not_found() => {
                next.phase = PoolPhase::Pending;
                let message = format!(
                    "the control plane no longer knows pool {uuid}; it was removed outside Kubernetes, so delete this StoragePool and create it again"
                );
                hold(ctx, pool, next, "PoolMissing", message).await?;
                return Ok(Action::requeue(requeue::RESYNC));
            }
            Err(e) => return Err(e.into()),
        },
        None => {
            let found = match cp.find_pool(cluster_id, &name).await? {
                Some(existing) => existing,
                None => {
                    let created = cp
                        .create_pool(cluster_id, &class::create_params(pool))
                        .await;
                    crate::runtime::crash::point(crate::runtime::crash::POOL_CREATE);
                    let created = created?;
                    ctx.event(
                        pool,
                        false,
                        "PoolCreated",
                        format!("created pool {name} ({}) in the control plane", created.id),
                    )
                    .await;
                    created
                }
            };
            // The durable record first: everything after it is re-entrant.
            next.uuid = Some(found.id.to_string());
            written = write_status(ctx, pool, &next).await?;
            found
        }
    };
    let pool = written.as_ref().unwrap_or(pool);
    if let Some(update) = class::limits_update(pool, &found) {
        cp.update_pool(cluster_id, found.id, &update).await?;
    }

    let classes: Api<StorageClass> = Api::all(ctx.kube.clone());
    if next.default_storage_class_name.is_none() {
        let cluster = &pool.spec.cluster_ref;
        let candidates = class::storage_class_names(&ns, cluster, &name);
        let mut existing = Vec::with_capacity(candidates.len());
        for candidate in &candidates {
            existing.push(classes.get_opt(candidate).await?);
        }
        let Some((class_name, exists)) =
            class::pick_class_name(&candidates, &existing, &ns, cluster, &name)
        else {
            let message = format!(
                "StorageClasses {} exist and belong to something else; the pool gets no class of its own until one is renamed or removed",
                candidates.join(" and ")
            );
            hold(ctx, pool, next, "StorageClassNameTaken", message).await?;
            return Ok(Action::requeue(requeue::RESYNC));
        };
        if !exists {
            let default = ctx.default_storage_class.as_deref() == Some(class_name.as_str());
            let want = class::storage_class(pool, &cluster_id.to_string(), class_name, default);
            classes.create(&PostParams::default(), &want).await?;
            ctx.event(
                pool,
                false,
                "StorageClassCreated",
                format!("created StorageClass {class_name} for the pool"),
            )
            .await;
        }
        next.default_storage_class_name = Some(class_name.clone());
    }

    // Who may attach the pool's volumes.
    let resolved = access::resolve(ctx, pool).await?;
    access::announce_missing(ctx, pool, &resolved).await;
    next.allowed_nodes = resolved.names();
    if let Some(why) = access::unenforceable(&found, pool) {
        next.phase = PoolPhase::Pending;
        hold(ctx, pool, next, "AllowedNodesNotEnforced", why).await?;
        return Ok(Action::requeue(requeue::RESYNC));
    }
    access::sync_labels(ctx, &found.id.to_string(), &resolved).await?;
    let hosts = access::wanted_hosts(pool, &resolved);
    if access::sync_hosts(ctx, cluster_id, &found, &hosts).await? {
        let names = resolved.names();
        ctx.event(
            pool,
            false,
            "AllowedNodesUpdated",
            if pool.spec.allowed_nodes.is_empty() {
                "the control plane lets every host attach the pool's volumes".to_owned()
            } else if names.is_empty() {
                "the control plane lets no host attach the pool's volumes: no Node of spec.allowedNodes exists".to_owned()
            } else {
                format!(
                    "the control plane lets only Nodes {} attach the pool's volumes",
                    names.join(", ")
                )
            },
        )
        .await;
    }

    let assigned = classes
        .list(&ListParams::default().labels(&class::assignment_selector(
            &ns,
            &pool.spec.cluster_ref,
            &name,
        )))
        .await?;
    // A class this controller wrote before it labelled classes for Ramen gets the labels;
    // one that has them is not written again.
    let storage_id = cluster_id.to_string();
    for written in assigned.items.iter().filter(|c| class::is_managed(c)) {
        if let Some(labels) = class::missing_dr_labels(written, &storage_id) {
            classes
                .patch(
                    &written.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": labels}})),
                )
                .await?;
        }
    }
    let mut names: Vec<String> = assigned.items.iter().map(|c| c.name_any()).collect();
    names.sort();

    next.phase = PoolPhase::Ready;
    next.status = Some(found.status.to_string());
    next.storage_class_names = names;
    next.used_bytes = found.capacity.as_ref().map(|c| c.size_used);
    next.limits = Some(class::limits_status(&found));
    next.message = None;
    // A list that names only absent Nodes admits no host at all: unlike an empty list.
    if !pool.spec.allowed_nodes.is_empty() && resolved.nodes.is_empty() {
        next.phase = PoolPhase::Pending;
        next.message = Some(format!(
            "no Node of spec.allowedNodes ({}) exists, so no workload can attach the pool's volumes; add an existing Node to spec.allowedNodes",
            pool.spec.allowed_nodes.join(", ")
        ));
    }
    write_status(ctx, pool, &next).await?;
    Ok(Action::requeue(requeue::RESYNC))
}

async fn cleanup(pool: &StoragePool, ctx: &Context) -> Result<Action, Error> {
    let ns = pool.namespace().unwrap_or_default();
    let name = pool.name_any();
    let mut status = pool.status.clone().unwrap_or_default();
    status.phase = PoolPhase::Deleting;

    let classes: Api<StorageClass> = Api::all(ctx.kube.clone());
    let assigned = classes
        .list(&ListParams::default().labels(&class::assignment_selector(
            &ns,
            &pool.spec.cluster_ref,
            &name,
        )))
        .await?;
    let authored: Vec<String> = assigned
        .items
        .iter()
        .filter(|c| !class::is_managed(c))
        .map(|c| c.name_any())
        .collect();
    if !authored.is_empty() {
        let message = format!(
            "StorageClasses {} still provision from the pool; delete them or move their {} label to another pool",
            authored.join(", "),
            class::LABEL_POOL
        );
        hold(
            ctx,
            pool,
            status,
            "StorageClassStillAssigned",
            message.clone(),
        )
        .await?;
        return Err(Error::Held(message));
    }

    let uuid = status.uuid.as_deref().and_then(|u| u.parse::<Uuid>().ok());
    let cluster = Api::<StorageCluster>::namespaced(ctx.kube.clone(), &ns)
        .get_opt(&pool.spec.cluster_ref)
        .await?;
    let cluster_id = cluster.as_ref().and_then(cluster_uuid);
    // The control-plane pool still to delete. A pass that reads a stale copy of a pool whose
    // finalizer was just removed finds it already gone and sends no second delete.
    let mut on_control_plane = None;
    if let (Some(cluster_id), Some(uuid)) = (cluster_id, uuid) {
        let volumes = match ctx.control_plane()?.list_volumes(cluster_id, uuid).await {
            Ok(v) => {
                on_control_plane = Some((cluster_id, uuid));
                v
            }
            Err(e) if e.is_not_found() => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        if !volumes.is_empty() {
            let shown: Vec<&str> = volumes.iter().take(3).map(|v| v.name.as_str()).collect();
            let message = format!(
                "the pool still holds {} volume(s) ({}{}); delete their PersistentVolumeClaims first, the control plane does not delete a pool with volumes",
                volumes.len(),
                shown.join(", "),
                if volumes.len() > shown.len() {
                    ", …"
                } else {
                    ""
                }
            );
            hold(ctx, pool, status, "VolumesStillBound", message.clone()).await?;
            return Err(Error::Held(message));
        }
    }

    // Nothing provisions from the pool once its own class is gone.
    for own in assigned.items.iter().filter(|c| class::is_managed(c)) {
        match classes
            .delete(&own.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    if let Some((cluster_id, uuid)) = on_control_plane {
        let deleted = ctx.control_plane()?.delete_pool(cluster_id, uuid).await;
        crate::runtime::crash::point(crate::runtime::crash::POOL_DELETE);
        match deleted {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                let message = format!("the control plane refused to delete the pool: {e}");
                hold(ctx, pool, status, "PoolDeletionFailed", message.clone()).await?;
                return Err(Error::Held(message));
            }
        }
        ctx.event(
            pool,
            false,
            "PoolDeleted",
            format!("deleted pool {name} ({uuid}) from the control plane"),
        )
        .await;
    }
    if let Some(uuid) = uuid {
        access::remove_labels(ctx, &uuid.to_string()).await?;
    }
    Ok(Action::await_change())
}

/// The annotation on a StorageCluster naming the default pool the operator created for
/// it; once there, the pool is never created again (a person may have deleted it).
pub const DEFAULT_POOL_ANNOTATION: &str = "storage.simplyblock.io/default-pool";

/// Creates the cluster's default pool once: the StoragePool `<cluster>-default`, owned by
/// the cluster, then the annotation that records it. A crash between the two finds the
/// pool on the next pass and only writes the annotation.
pub async fn ensure_default_pool(
    ctx: &Context,
    cluster: &StorageCluster,
) -> Result<(), kube::Error> {
    if cluster.annotations().contains_key(DEFAULT_POOL_ANNOTATION) {
        return Ok(());
    }
    let ns = cluster.namespace().unwrap_or_default();
    let name = super::class::default_pool_name(&cluster.name_any());
    let pools: Api<StoragePool> = Api::namespaced(ctx.kube.clone(), &ns);
    if pools.get_opt(&name).await?.is_none() {
        let mut pool = StoragePool::new(
            &name,
            simplyblock_api::storage_pool::StoragePoolSpec {
                cluster_ref: cluster.name_any(),
                allowed_nodes: Vec::new(),
                limits: None,
                volume_defaults: None,
            },
        );
        pool.metadata.namespace = Some(ns.clone());
        pool.metadata.labels = Some(
            [(class::LABEL_CLUSTER.to_owned(), cluster.name_any())]
                .into_iter()
                .collect(),
        );
        pool.metadata.owner_references = cluster.controller_owner_ref(&()).map(|o| vec![o]);
        match pools.create(&PostParams::default(), &pool).await {
            Ok(_) => {
                ctx.event(
                    cluster,
                    false,
                    "DefaultPoolCreated",
                    format!("created StoragePool {name}, the cluster's default pool"),
                )
                .await;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    let patch = json!({"metadata": {"annotations": {DEFAULT_POOL_ANNOTATION: name}}});
    Api::<StorageCluster>::namespaced(ctx.kube.clone(), &ns)
        .patch(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    Ok(())
}

/// Deletes the cluster's pools (their finalizers remove them from the control plane) and
/// says how many remain; the cluster is deleted in the control plane only when none do.
pub async fn delete_cluster_pools(
    ctx: &Context,
    cluster: &StorageCluster,
) -> Result<Vec<String>, kube::Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let pools: Api<StoragePool> = Api::namespaced(ctx.kube.clone(), &ns);
    let mut remaining = Vec::new();
    for pool in pools.list(&ListParams::default()).await? {
        if pool.spec.cluster_ref != cluster.name_any() {
            continue;
        }
        if pool.metadata.deletion_timestamp.is_none() {
            match pools
                .delete(&pool.name_any(), &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => continue,
                Err(e) => return Err(e),
            }
        }
        remaining.push(pool.name_any());
    }
    Ok(remaining)
}

//! The StorageCluster controller: the creation machine ([`super::creation`]) until the
//! control plane has the cluster, then the steady state that reports what the control
//! plane says and keeps the history of the cluster's operations ([`super::history`]), and
//! the teardown behind the finalizer.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use serde_json::json;
use simplyblock_api::storage_cluster::{ClusterPhase, StorageClusterStatus};
use simplyblock_api::{StorageCluster, StorageClusterOps};
use simplyblock_controlplane::Uuid;

use super::creation;
use super::history::History;
use super::identity::{self, MANAGED_BY_LABEL, cluster_secret_name};
use super::observe;
use super::status::write_steady;
use crate::csi_secret;
use crate::pool;
use crate::runtime::context::{Context, requeue};
use crate::runtime::kit::{self, Error};
use crate::runtime::metrics::Metrics;

pub const FINALIZER: &str = "storage.simplyblock.io/storagecluster-finalizer";
/// The finalizer older operators set; read and removed on delete.
pub const LEGACY_FINALIZER: &str = "storage.simplyblock.io/cluster-finalizer";

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "storagecluster";

/// Runs the controller until the operator stops.
pub async fn run(ctx: Arc<Context>) {
    let controller = Controller::new(
        ctx.scope.api::<StorageCluster>(&ctx.kube),
        watcher::Config::default(),
    )
    .owns(
        ctx.scope.api::<Secret>(&ctx.kube),
        watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}=storagecluster")),
    )
    // A finished operation is history for its cluster to record, and perhaps to prune.
    .watches(
        ctx.scope.api::<StorageClusterOps>(&ctx.kube),
        watcher::Config::default(),
        |op| {
            let ns = op.namespace()?;
            let finished = op.status.as_ref().is_some_and(|s| s.phase.is_terminal());
            finished.then(|| ObjectRef::new(&op.spec.cluster_ref).within(&ns))
        },
    );
    // A stream event about the cluster or its tasks wakes it; the resync stays.
    let woken = ctx
        .streams
        .triggers(controller.store(), |c: &StorageCluster, change| {
            let uuid = c.status.as_ref().and_then(|s| s.uuid.as_deref());
            crate::runtime::streams::status_uuid(uuid)
                .is_some_and(|id| change.touches(id) || change.tasks_of(id))
        });
    let controller = controller.reconcile_on(woken);
    kit::run(CONTROLLER, controller, reconcile, ctx).await
}

pub async fn reconcile(cluster: Arc<StorageCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ctx = &*ctx;
    let apply = |c: Arc<StorageCluster>| async move { apply(&c, ctx).await };
    let cleanup = |c: Arc<StorageCluster>| async move {
        let done = cleanup(&c, ctx).await;
        // Done: the finalizer goes next, and the cluster's series with it.
        if done.is_ok() {
            forget_phase(
                &ctx.metrics,
                &c.namespace().unwrap_or_default(),
                &c.name_any(),
            );
        }
        done
    };
    kit::finalized(&ctx.kube, FINALIZER, cluster, apply, cleanup).await
}

/// `simplyblock_storagecluster_phase_state{namespace,cluster,phase}`: 1 for the phase the
/// cluster is in, 0 for the others; all 0 once it is gone.
pub fn record_phase(m: &Metrics, namespace: &str, cluster: &str, phase: Option<ClusterPhase>) {
    let name = |p: ClusterPhase| {
        serde_json::to_value(p)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    };
    let names = ClusterPhase::ALL.map(name);
    m.one_hot(
        "simplyblock_storagecluster_phase_state",
        &vec![
            ("namespace", namespace.to_owned()),
            ("cluster", cluster.to_owned()),
        ],
        names.iter().map(String::as_str),
        phase.map(name).as_deref(),
    );
}

/// The cluster is gone: its `phase_state` series are no longer rendered.
pub fn forget_phase(m: &Metrics, namespace: &str, cluster: &str) {
    let names = ClusterPhase::ALL.map(|p| {
        serde_json::to_value(p)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    });
    m.forget_one_hot(
        "simplyblock_storagecluster_phase_state",
        &vec![
            ("namespace", namespace.to_owned()),
            ("cluster", cluster.to_owned()),
        ],
        names.iter().map(String::as_str),
    );
}

async fn apply(cluster: &StorageCluster, ctx: &Context) -> Result<Action, Error> {
    let status = cluster.status.clone().unwrap_or_default();
    record_phase(
        &ctx.metrics,
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
        Some(status.phase),
    );
    if status.uuid.as_deref().is_some_and(|u| !u.is_empty()) {
        return steady(cluster, &status, ctx).await;
    }
    creation::create(cluster, &status, ctx).await
}

async fn steady(
    cluster: &StorageCluster,
    status: &StorageClusterStatus,
    ctx: &Context,
) -> Result<Action, Error> {
    let Some(uuid) = status.uuid.as_deref().and_then(|u| u.parse::<Uuid>().ok()) else {
        return Ok(Action::await_change());
    };
    let ns = cluster.namespace().unwrap_or_default();
    let cp = ctx.control_plane()?;
    // The cluster and its tasks from their streams (plain GETs until they are synced).
    ctx.follow(simplyblock_controlplane::Scope::Tasks { cluster: uuid })?;
    let informer = ctx.follow(simplyblock_controlplane::Scope::Clusters)?;
    let found = match informer.cluster(uuid).await {
        Ok(c) => c,
        Err(e) if e.is_not_found() => {
            let mut next = status.clone();
            next.phase = ClusterPhase::Unavailable;
            next.message = Some(format!(
                "the control plane no longer knows cluster {uuid}; it was removed outside Kubernetes"
            ));
            write_steady(ctx, cluster, &next).await?;
            return Ok(Action::requeue(requeue::RESYNC));
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(id) = identity::read(ctx, &ns, &cluster_secret_name(&cluster.name_any())).await? {
        identity::publish_csi_entry(ctx, cluster, &id).await?;
    }
    let tasks = informer.tasks(uuid).await?;
    let history = History::read(&ctx.kube, cluster).await?;
    let mut next = observe::steady_status(status, &found, &tasks);
    next.recent_operations = history.recent(&status.recent_operations);
    if next
        .message
        .as_deref()
        .is_some_and(|m| m.starts_with("created in the control plane"))
        && next.phase != status.phase
    {
        next.message = None;
    }
    for (seen, listed) in observe::finished_tasks(status, &next, &tasks) {
        // Not in the list any more: its own read is the last word (the control plane
        // answers an unknown id with a 500, which leaves the ending unknown).
        let read = match listed {
            Some(_) => None,
            None => match seen.id.parse::<Uuid>() {
                Ok(id) => cp.get_task(uuid, id).await.ok(),
                Err(_) => None,
            },
        };
        let verdict = observe::task_verdict(seen, listed.or(read.as_ref()));
        ctx.event(cluster, verdict.warning, verdict.reason, verdict.note)
            .await;
    }
    if !write_steady(ctx, cluster, &next).await? {
        return Ok(Action::requeue(requeue::CONFLICT));
    }
    if next.phase == ClusterPhase::Online {
        pool::controller::ensure_default_pool(ctx, cluster).await?;
    }
    // Only now that their records are stored.
    history.prune(&ctx.kube, cluster).await?;
    Ok(Action::requeue(requeue::RESYNC))
}

async fn cleanup(cluster: &StorageCluster, ctx: &Context) -> Result<Action, Error> {
    let status = cluster.status.clone().unwrap_or_default();
    // Deleting: no phase of a serving cluster applies any longer.
    record_phase(
        &ctx.metrics,
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
        None,
    );
    // The control plane deletes only an empty cluster: its pools go first.
    let pools = pool::controller::delete_cluster_pools(ctx, cluster).await?;
    if !pools.is_empty() {
        let message = format!(
            "waiting for the cluster's StoragePools to be deleted: {}",
            pools.join(", ")
        );
        if status.message.as_deref() != Some(message.as_str()) {
            ctx.event(cluster, false, "WaitingForPools", message.clone())
                .await;
            let patch = json!({"status": {"message": &message}});
            Api::<StorageCluster>::namespaced(
                ctx.kube.clone(),
                &cluster.namespace().unwrap_or_default(),
            )
            .patch_status(
                &cluster.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await?;
        }
        return Err(Error::Held(message));
    }
    if let Some(uuid) = status.uuid.as_deref().and_then(|u| u.parse::<Uuid>().ok()) {
        // Gone already (an earlier pass deleted it and failed later): nothing to call.
        let cp = ctx.control_plane()?;
        let present = match cp.get_cluster(uuid).await {
            Ok(_) => true,
            Err(e) if e.is_not_found() => false,
            Err(e) => return Err(e.into()),
        };
        match if present {
            cp.delete_cluster(uuid).await
        } else {
            Ok(())
        } {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                let message = format!(
                    "the control plane refused to delete the cluster ({e}); the StorageCluster stays until it can"
                );
                ctx.event(cluster, true, "ClusterDeletionRefused", message.clone())
                    .await;
                return Err(Error::Held(message));
            }
        }
        identity::change_csi_secret(ctx, cluster, |c| {
            csi_secret::without_entry(c, &uuid.to_string())
        })
        .await?;
    }
    let ns = cluster.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.kube.clone(), &ns);
    match secrets
        .delete(
            &cluster_secret_name(&cluster.name_any()),
            &Default::default(),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    kit::remove_finalizer(&ctx.kube, cluster, LEGACY_FINALIZER).await?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn the_phase_gauge_names_one_phase_and_none_when_gone() {
        let m = Metrics::new();
        let of = |p: &str| {
            m.sample(
                "simplyblock_storagecluster_phase_state",
                &[("namespace", "m"), ("cluster", "sb"), ("phase", p)],
            )
        };
        record_phase(&m, "m", "sb", Some(ClusterPhase::Provisioning));
        record_phase(&m, "m", "sb", Some(ClusterPhase::Online));
        assert_eq!(of("Online"), Some(1.0));
        assert_eq!(of("Provisioning"), Some(0.0));
        let ones: f64 = ClusterPhase::ALL
            .iter()
            .filter_map(|p| of(&format!("{p:?}")))
            .sum();
        assert_eq!(ones, 1.0, "one phase at a time, every phase present");
        record_phase(&m, "m", "sb", None);
        assert_eq!(of("Online"), Some(0.0));
        forget_phase(&m, "m", "sb");
        assert!(
            ClusterPhase::ALL
                .iter()
                .all(|p| of(&format!("{p:?}")).is_none())
        );
    }
}

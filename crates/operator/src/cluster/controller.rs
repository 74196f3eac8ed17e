//! The StorageCluster controller: the creation machine until the control plane has the
//! cluster, then the steady state that reports what the control plane says and keeps the
//! history of the cluster's operations ([`super::history`]), and the teardown behind the
//! finalizer.
//!
//! Every creation step is written to `status.step` before its side effect, and every side
//! effect is preceded by a look at whether it already happened: a cluster created by a
//! request whose answer was lost is found by name and adopted, never created twice.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde_json::json;
use simplyblock_api::storage_cluster::{
    CREATION_GRAPH, ClusterPhase, ClusterTask, CreationStep, OperationRecord, StorageClusterStatus,
};
use simplyblock_api::{StorageCluster, StorageClusterOps};
use simplyblock_controlplane::Uuid;
use simplyblock_statemachine::{Machine, State, StepSnapshot};

use super::history::History;
use super::observe;
use super::params::{self, BackupCredentials};
use crate::context::{Context, requeue};
use crate::csi_secret;
use crate::kit::{self, Error, Guard};
use crate::metrics::Metrics;
use crate::pool;

pub const FINALIZER: &str = "storage.simplyblock.io/storagecluster-finalizer";
/// The finalizer older operators set; read and removed on delete.
pub const LEGACY_FINALIZER: &str = "storage.simplyblock.io/cluster-finalizer";
const MANAGER: &str = "storagecluster-controller";
const MANAGED_BY_LABEL: &str = "storage.simplyblock.io/managed-by";

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
    kit::run(CONTROLLER, controller, reconcile, ctx).await
}

pub async fn reconcile(cluster: Arc<StorageCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ctx = &*ctx;
    kit::finalized(
        &ctx.kube,
        FINALIZER,
        cluster,
        |c| async move { apply(&c, ctx).await },
        |c| async move { cleanup(&c, ctx).await },
    )
    .await
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
    create(cluster, &status, ctx).await
}

/// The Secret `simplyblock-cluster-<name>` holding the control plane's id and secret of
/// the cluster: the durable record between Creating and Persisting.
fn cluster_secret_name(cluster: &str) -> String {
    format!("simplyblock-cluster-{cluster}")
}

/// An upgrade leaves `simplyblock-<name>-upgrade` (`uuid`, `secret`) for adoption.
fn upgrade_secret_name(cluster: &str) -> String {
    format!("simplyblock-{cluster}-upgrade")
}

/// The control plane's id and secret of a cluster.
#[derive(Clone, PartialEq, Eq)]
struct Identity {
    uuid: Uuid,
    secret: String,
}

async fn read_identity(ctx: &Context, ns: &str, secret: &str) -> Result<Option<Identity>, Error> {
    let api: Api<Secret> = Api::namespaced(ctx.kube.clone(), ns);
    let Some(s) = api.get_opt(secret).await? else {
        return Ok(None);
    };
    let field = |k: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(k))
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
    };
    Ok(
        match (field("uuid").and_then(|u| u.parse().ok()), field("secret")) {
            (Some(uuid), Some(secret)) => Some(Identity { uuid, secret }),
            _ => None,
        },
    )
}

async fn write_identity(
    ctx: &Context,
    cluster: &StorageCluster,
    id: &Identity,
) -> Result<(), Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster_secret_name(&cluster.name_any());
    let owner = cluster.controller_owner_ref(&());
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.clone()),
            owner_references: owner.map(|o| vec![o]),
            labels: Some(BTreeMap::from([
                (
                    "storage.simplyblock.io/managed-by".into(),
                    "storagecluster".into(),
                ),
                ("storage.simplyblock.io/cluster".into(), cluster.name_any()),
            ])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("uuid".into(), ByteString(id.uuid.to_string().into_bytes())),
            ("secret".into(), ByteString(id.secret.clone().into_bytes())),
        ])),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(ctx.kube.clone(), &ns)
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await?;
    Ok(())
}

/// The fields of StorageCluster status this controller owns while it creates the cluster.
#[derive(Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct CreationStatus {
    phase: ClusterPhase,
    #[serde(skip_serializing_if = "StepSnapshot::is_empty")]
    step: StepSnapshot,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    observed_generation: Option<i64>,
}

/// Writes the creation machine's position (and phase and message), before the step's
/// side effect. With `lock`, the write only succeeds on the resourceVersion read.
async fn write_step(
    ctx: &Context,
    cluster: &StorageCluster,
    phase: ClusterPhase,
    machine: Option<&Machine<'_, CreationStep>>,
    message: Option<String>,
    lock: bool,
) -> Result<bool, Error> {
    let status = CreationStatus {
        phase,
        step: machine.map(|m| m.snapshot()).unwrap_or_default(),
        message,
        observed_generation: cluster.metadata.generation,
    };
    let guard = if lock {
        Guard::ResourceVersion
    } else {
        Guard::None
    };
    match kit::apply_status(&ctx.kube, cluster, MANAGER, &status, guard).await {
        Ok(_) => Ok(true),
        Err(Error::Stale(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

async fn create(
    cluster: &StorageCluster,
    status: &StorageClusterStatus,
    ctx: &Context,
) -> Result<Action, Error> {
    let now = jiff::Timestamp::now();
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let mut machine = match CREATION_GRAPH.restore(&status.step, now) {
        Ok(m) => m,
        Err(e) => {
            let message = format!("the stored creation step cannot be resumed: {e}");
            write_step(
                ctx,
                cluster,
                ClusterPhase::Unavailable,
                None,
                Some(message),
                false,
            )
            .await?;
            return Ok(Action::await_change());
        }
    };
    if machine.timed_out(now) {
        let message = format!(
            "creation step {} outlived its deadline; it is still being retried",
            machine.state()
        );
        if status.message.as_deref() != Some(message.as_str()) {
            ctx.event(cluster, true, "StepDeadlineExceeded", message.clone())
                .await;
            write_step(
                ctx,
                cluster,
                ClusterPhase::Unavailable,
                Some(&machine),
                Some(message),
                false,
            )
            .await?;
        }
    }

    match machine.state() {
        CreationStep::Claiming => {
            // The claim: only the writer whose read is still current moves the cluster on.
            let _ = machine.transition_to(CreationStep::CheckingControlPlane, now);
            if !write_step(
                ctx,
                cluster,
                ClusterPhase::Creating,
                Some(&machine),
                Some("claimed; checking the control plane".into()),
                true,
            )
            .await?
            {
                return Ok(Action::requeue(requeue::CONFLICT));
            }
            Ok(Action::requeue(requeue::NEXT_STEP))
        }
        CreationStep::CheckingControlPlane => {
            if let Err(e) = ctx.cp.ready().await {
                let message = format!(
                    "the control plane is not ready ({e}); the cluster is created once it is"
                );
                ctx.event(cluster, true, "FDBNotReady", message.clone())
                    .await;
                write_step(
                    ctx,
                    cluster,
                    ClusterPhase::Creating,
                    Some(&machine),
                    Some(message),
                    false,
                )
                .await?;
                return Ok(Action::requeue(requeue::RETRY));
            }
            let next = if read_identity(ctx, &ns, &upgrade_secret_name(&name))
                .await?
                .is_some()
            {
                CreationStep::Adopting
            } else {
                CreationStep::ResolvingConfig
            };
            advance(ctx, cluster, &mut machine, next, now).await
        }
        CreationStep::ResolvingConfig => match resolve(cluster, ctx).await? {
            Ok(_) => advance(ctx, cluster, &mut machine, CreationStep::Creating, now).await,
            Err(e) => hold_on_config(ctx, cluster, &machine, e).await,
        },
        CreationStep::Creating => {
            // Already there (an earlier create whose answer was lost, or another writer)?
            if let Some(existing) = ctx
                .cp
                .list_clusters()
                .await?
                .into_iter()
                .find(|c| c.name.as_deref() == Some(name.as_str()))
            {
                write_identity(
                    ctx,
                    cluster,
                    &Identity {
                        uuid: existing.id,
                        secret: existing.secret.clone(),
                    },
                )
                .await?;
                return advance(ctx, cluster, &mut machine, CreationStep::Adopting, now).await;
            }
            let body = match resolve(cluster, ctx).await? {
                Ok(body) => body,
                Err(e) => return hold_on_config(ctx, cluster, &machine, e).await,
            };
            let created = ctx.cp.create_cluster(&body).await;
            crate::crash::point(crate::crash::CLUSTER_CREATE);
            match created {
                Ok(created) => {
                    // The secret exists nowhere else we can read it back from reliably:
                    // record it before anything else can fail.
                    write_identity(
                        ctx,
                        cluster,
                        &Identity {
                            uuid: created.id,
                            secret: created.secret.clone(),
                        },
                    )
                    .await?;
                    advance(ctx, cluster, &mut machine, CreationStep::Persisting, now).await
                }
                Err(e) => {
                    if ctx
                        .cp
                        .list_clusters()
                        .await?
                        .iter()
                        .any(|c| c.name.as_deref() == Some(name.as_str()))
                    {
                        return advance(ctx, cluster, &mut machine, CreationStep::Adopting, now)
                            .await;
                    }
                    let message = format!("creating the cluster in the control plane failed: {e}");
                    ctx.event(cluster, true, "ClusterCreationFailed", message.clone())
                        .await;
                    write_step(
                        ctx,
                        cluster,
                        ClusterPhase::Creating,
                        Some(&machine),
                        Some(message),
                        false,
                    )
                    .await?;
                    Ok(Action::requeue(requeue::RETRY))
                }
            }
        }
        CreationStep::Adopting => {
            let found = match read_identity(ctx, &ns, &upgrade_secret_name(&name)).await? {
                Some(id) => Some(id),
                None => ctx
                    .cp
                    .list_clusters()
                    .await?
                    .into_iter()
                    .find(|c| c.name.as_deref() == Some(name.as_str()))
                    .map(|c| Identity {
                        uuid: c.id,
                        secret: c.secret,
                    }),
            };
            match found {
                Some(id) => {
                    write_identity(ctx, cluster, &id).await?;
                    ctx.event(
                        cluster,
                        false,
                        "ClusterAdopted",
                        format!(
                            "adopted control-plane cluster {} instead of creating one",
                            id.uuid
                        ),
                    )
                    .await;
                    advance(ctx, cluster, &mut machine, CreationStep::Persisting, now).await
                }
                None => {
                    machine.reset(now);
                    write_step(
                        ctx,
                        cluster,
                        ClusterPhase::Creating,
                        Some(&machine),
                        Some("nothing to adopt was found; creating the cluster afresh".into()),
                        false,
                    )
                    .await?;
                    Ok(Action::requeue(requeue::NEXT_STEP))
                }
            }
        }
        CreationStep::Persisting => {
            let Some(id) = read_identity(ctx, &ns, &cluster_secret_name(&name)).await? else {
                // The record is gone; find the cluster again.
                machine.reset(now);
                write_step(
                    ctx,
                    cluster,
                    ClusterPhase::Creating,
                    Some(&machine),
                    Some("the cluster's Secret is missing; looking the cluster up again".into()),
                    false,
                )
                .await?;
                return Ok(Action::requeue(requeue::NEXT_STEP));
            };
            publish_csi_entry(ctx, &id).await?;
            let found = ctx.cp.get_cluster(id.uuid).await?;
            let tasks = ctx.cp.list_tasks(id.uuid).await.unwrap_or_default();
            let mut next = observe::steady_status(status, &found, &tasks);
            next.step = Default::default();
            next.message = Some(format!("created in the control plane as {}", id.uuid));
            write_steady(ctx, cluster, &next).await?;
            Ok(Action::requeue(requeue::NEXT_STEP))
        }
    }
}

async fn advance(
    ctx: &Context,
    cluster: &StorageCluster,
    machine: &mut Machine<'_, CreationStep>,
    next: CreationStep,
    now: jiff::Timestamp,
) -> Result<Action, Error> {
    if let Err(e) = machine.transition_to(next, now) {
        // A controller bug, not a user's: say so and stop rather than loop.
        tracing::error!(error = %e, "illegal creation transition");
        return Ok(Action::await_change());
    }
    write_step(
        ctx,
        cluster,
        ClusterPhase::Creating,
        Some(machine),
        Some(format!("creation step {}", next.name())),
        false,
    )
    .await?;
    Ok(Action::requeue(requeue::NEXT_STEP))
}

async fn hold_on_config(
    ctx: &Context,
    cluster: &StorageCluster,
    machine: &Machine<'_, CreationStep>,
    e: params::ConfigError,
) -> Result<Action, Error> {
    let message = e.to_string();
    let current = cluster.status.as_ref().and_then(|s| s.message.clone());
    if current.as_deref() != Some(message.as_str()) {
        ctx.event(cluster, true, e.reason(), message.clone()).await;
        write_step(
            ctx,
            cluster,
            ClusterPhase::Creating,
            Some(machine),
            Some(message),
            false,
        )
        .await?;
    }
    // A spec or Secret change triggers the next pass; the requeue is a backstop.
    Ok(Action::requeue(requeue::RESYNC))
}

/// The create body, with the backup credentials read from their Secret.
async fn resolve(
    cluster: &StorageCluster,
    ctx: &Context,
) -> Result<Result<simplyblock_controlplane::ClusterCreate, params::ConfigError>, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let creds = match &cluster.spec.backup {
        None => None,
        Some(store) => {
            let secret_name = &store.credentials_secret_ref.name;
            let api: Api<Secret> = Api::namespaced(ctx.kube.clone(), &ns);
            let secret = api.get_opt(secret_name).await?;
            let key = |k: &str| {
                secret
                    .as_ref()
                    .and_then(|s| s.data.as_ref())
                    .and_then(|d| d.get(k))
                    .and_then(|b| String::from_utf8(b.0.clone()).ok())
            };
            match (key("access_key_id"), key("secret_access_key")) {
                (Some(access_key_id), Some(secret_access_key)) => Some(BackupCredentials {
                    access_key_id,
                    secret_access_key,
                }),
                _ => {
                    return Ok(Err(params::ConfigError::BackupCredentials(format!(
                        "Secret {secret_name} in namespace {ns} must exist and hold the keys access_key_id and secret_access_key"
                    ))));
                }
            }
        }
    };
    Ok(params::cluster_create(
        &cluster.name_any(),
        &ns,
        &cluster.spec,
        creds.as_ref(),
    ))
}

async fn publish_csi_entry(ctx: &Context, id: &Identity) -> Result<(), Error> {
    let entry = csi_secret::Entry {
        cluster_id: id.uuid.to_string(),
        cluster_endpoint: ctx.cp_endpoint.clone(),
        cluster_secret: id.secret.clone(),
    };
    csi_secret::update(&ctx.kube, &ctx.namespace, |c| {
        csi_secret::with_entry(c, &entry)
    })
    .await?;
    Ok(())
}

/// The fields of StorageCluster status this controller owns once the cluster exists:
/// what the control plane reports, and the history of its operations.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SteadyStatus {
    phase: ClusterPhase,
    #[serde(skip_serializing_if = "Option::is_none")]
    uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nqn: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    erasure_coding_scheme: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rebalancing: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_fault_tolerance: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_concurrent_worker_restarts: Option<i32>,
    tasks: Vec<ClusterTask>,
    recent_operations: Vec<OperationRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    observed_generation: Option<i64>,
}

/// Writes the steady-state status, only when it differs from what is stored. `false`: the
/// history changed and the object moved since it was read (409); nothing was written.
async fn write_steady(
    ctx: &Context,
    cluster: &StorageCluster,
    next: &StorageClusterStatus,
) -> Result<bool, Error> {
    let current = cluster.status.clone().unwrap_or_default();
    let mut next = next.clone();
    next.observed_generation = cluster.metadata.generation;
    if current == next {
        return Ok(true);
    }
    let status = SteadyStatus {
        phase: next.phase,
        uuid: next.uuid.clone(),
        cluster_name: next.cluster_name.clone(),
        nqn: next.nqn.clone(),
        erasure_coding_scheme: next.erasure_coding_scheme.clone(),
        status: next.status.clone(),
        rebalancing: next.rebalancing,
        max_fault_tolerance: next.max_fault_tolerance,
        max_concurrent_worker_restarts: next
            .max_fault_tolerance
            .map(|ftt| cluster.spec.max_concurrent_worker_restarts.min(ftt.max(1))),
        tasks: next.tasks.clone(),
        recent_operations: next.recent_operations.clone(),
        message: next.message.clone(),
        observed_generation: next.observed_generation,
    };
    // The history is merged into what was read: a stale read must not overwrite entries a
    // newer write recorded.
    let guard = if current.recent_operations != next.recent_operations {
        Guard::ResourceVersion
    } else {
        Guard::None
    };
    match kit::apply_status(&ctx.kube, cluster, MANAGER, &status, guard).await {
        Ok(_) => Ok(true),
        Err(Error::Stale(_)) => Ok(false),
        Err(e) => Err(e),
    }
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
    let found = match ctx.cp.get_cluster(uuid).await {
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
    if let Some(id) = read_identity(ctx, &ns, &cluster_secret_name(&cluster.name_any())).await? {
        publish_csi_entry(ctx, &id).await?;
    }
    let tasks = ctx.cp.list_tasks(uuid).await?;
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
                Ok(id) => ctx.cp.get_task(uuid, id).await.ok(),
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
        let present = match ctx.cp.get_cluster(uuid).await {
            Ok(_) => true,
            Err(e) if e.is_not_found() => false,
            Err(e) => return Err(e.into()),
        };
        match if present {
            ctx.cp.delete_cluster(uuid).await
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
        csi_secret::update(&ctx.kube, &ctx.namespace, |c| {
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
    remove_legacy_finalizer(cluster, ctx).await?;
    Ok(Action::await_change())
}

async fn remove_legacy_finalizer(cluster: &StorageCluster, ctx: &Context) -> Result<(), Error> {
    let finalizers = cluster.finalizers();
    if !finalizers.iter().any(|f| f == LEGACY_FINALIZER) {
        return Ok(());
    }
    let kept: Vec<&String> = finalizers
        .iter()
        .filter(|f| *f != LEGACY_FINALIZER)
        .collect();
    // The resourceVersion makes this a compare-and-swap on the finalizer list.
    let patch =
        json!({"metadata": {"finalizers": kept, "resourceVersion": cluster.resource_version()}});
    Api::<StorageCluster>::namespaced(ctx.kube.clone(), &cluster.namespace().unwrap_or_default())
        .patch(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    Ok(())
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
    }
}

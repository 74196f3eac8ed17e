//! The PersistentVolumeOps controller: Migrate moves a volume's NVMe-oF subsystem to
//! another storage node.
//!
//! Built on [`simplyblock_statemachine`] directly rather than the shared [`crate::runtime::ops`]
//! runtime: the kind is cluster-scoped, its lock is an annotation on every volume of the
//! subsystem rather than a target's `status.activeOpsRef`, and its finalizer cancels a
//! backend migration and deletes Jobs. The shape is the same: [`observe`] reads,
//! [`plan`] decides (pure), [`execute`] does one thing.
//!
//! | step | call, skipped when | done when |
//! |---|---|---|
//! | Validating | the migration pre-created (skipped when an active one to the target exists); a validation Job per consuming node (skipped when there) | every Job succeeded |
//! | Migrating | continue, once: `status.migration.continuedAt` is written first | the control plane reports the migration done |
//! | Verifying | the Jobs deleted | no Job left |

pub mod jobs;
pub mod lock;
pub mod plan;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use simplyblock_api::StorageNode;
use simplyblock_api::common::OpsPhase;
use simplyblock_api::conditions;
use simplyblock_api::keys::{CSI_DRIVER_NAME, PERSISTENT_VOLUME_OPS_FINALIZER};
use simplyblock_api::persistent_volume_ops::{
    GRAPHS, MigrationConnection, MigrationStatus, PersistentVolumeOps, PersistentVolumeOpsStatus,
    VolumeAction, VolumeOpsStep, migrating_budget,
};
use simplyblock_api::volume_handle::{PoolRef, VolumeHandle};
use simplyblock_controlplane::{Migration, MigrationContinue, MigrationCreate, Uuid};
use simplyblock_statemachine::{Machine, MultiGraph, State};

use self::lock::{Holder, LockPlan};
use self::plan::{Backend, Call, Decision, JobState, Observation};
use crate::runtime::context::{Context, requeue};
use crate::runtime::kit::{self, Error, Guard};
use crate::runtime::ops::reason;

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "persistentvolumeops";
const MANAGER: &str = "persistentvolumeops-controller";
const METRIC_PREFIX: &str = "simplyblock_persistentvolume_";
/// The control plane's controller-loss timeout for the target's paths.
const CTRL_LOSS_TMO: i64 = 3600;

/// The controller's graphs, deadlines scaled by the context's factor.
struct Graphs(MultiGraph<VolumeAction, VolumeOpsStep>);

/// Runs the controller until the operator stops. `image` runs the validation Jobs (the
/// operator's own, which carries the `reach` check).
pub async fn run(ctx: Arc<Context>, image: String) {
    let graphs = Arc::new(Graphs(GRAPHS.scaled(ctx.step_deadline_scale)));
    let image = Arc::new(image);
    let ops: Api<PersistentVolumeOps> = Api::all(ctx.kube.clone());
    let controller = Controller::new(ops, watcher::Config::default())
        // A volume's lock changing wakes the operation it names.
        .watches(
            Api::<PersistentVolume>::all(ctx.kube.clone()),
            watcher::Config::default(),
            |pv| {
                lock::holder_of(&pv)
                    .map(|h| ObjectRef::<PersistentVolumeOps>::new(&h))
                    .into_iter()
                    .collect::<Vec<_>>()
            },
        )
        .owns(
            Api::<Job>::namespaced(ctx.kube.clone(), &ctx.namespace),
            watcher::Config::default().labels(&format!(
                "{}={}",
                simplyblock_api::keys::MANAGED_BY_LABEL,
                simplyblock_api::keys::MANAGED_BY_PERSISTENT_VOLUME_OPS
            )),
        );
    crate::runtime::kit::run(
        CONTROLLER,
        controller,
        move |op, ctx| {
            let graphs = graphs.clone();
            let image = image.clone();
            async move { reconcile(op, ctx, &graphs, &image).await }
        },
        ctx,
    )
    .await
}

/// Whether the operator serves this operation: its target StorageNode is in a namespace it
/// watches (an operation without a target is served by every operator).
fn in_scope(op: &PersistentVolumeOps, ctx: &Context) -> bool {
    match (&ctx.scope.0, &op.spec.migrate) {
        (Some(ns), Some(m)) => m.target_node_ref.namespace == *ns,
        _ => true,
    }
}

fn status_of(op: &PersistentVolumeOps) -> PersistentVolumeOpsStatus {
    op.status.clone().unwrap_or_default()
}

async fn reconcile(
    op: Arc<PersistentVolumeOps>,
    ctx: Arc<Context>,
    graphs: &Graphs,
    image: &str,
) -> Result<Action, Error> {
    let ctx = &*ctx;
    if !in_scope(&op, ctx) {
        return Ok(Action::await_change());
    }
    let has_finalizer = op
        .finalizers()
        .iter()
        .any(|f| f == PERSISTENT_VOLUME_OPS_FINALIZER);
    if op.meta().deletion_timestamp.is_some() {
        if has_finalizer {
            cleanup(&op, ctx).await?;
        }
        return Ok(Action::await_change());
    }
    let status = status_of(&op);
    if status.phase.is_terminal() {
        // Terminal: the lock and the Jobs go (again, idempotently), the record stays.
        lock::release(
            &ctx.kube,
            &op.name_any(),
            &lock::held_by(&ctx.kube, &op.name_any()).await?,
        )
        .await?;
        delete_jobs(ctx, &recorded_jobs(&op)).await?;
        // The bounded history every Ops kind keeps, per volume.
        // Stored outside namespaces: bounded by every cluster this operator serves.
        let next = crate::runtime::ops::history::prune::<PersistentVolumeOps>(
            &Api::all(ctx.kube.clone()),
            &ctx.scope.api::<simplyblock_api::StorageCluster>(&ctx.kube),
            &op.spec.persistent_volume_name,
            |o| o.spec.persistent_volume_name.as_str(),
            None,
        )
        .await?;
        return Ok(match next {
            Some(wait) => Action::requeue(wait.max(std::time::Duration::from_secs(1))),
            None => Action::await_change(),
        });
    }
    if !has_finalizer {
        set_finalizers(ctx, &op, true).await?;
        return Ok(Action::requeue(requeue::NEXT_STEP));
    }
    let now = Timestamp::now();
    let machine = match status.phase {
        OpsPhase::Running => match graphs.0.restore(op.spec.action, &status.step, now) {
            Ok(m) => Some(m),
            Err(e) => {
                return finish(ctx, &op, OpsPhase::Failed, e.to_string(), None, false).await;
            }
        },
        _ => None,
    };
    let obs = observe(&op, machine.as_ref().map(|m| m.state()), ctx).await?;
    let now = Timestamp::now();
    let mut refused = None;
    let decision = match plan::gate(&op, &obs) {
        Some(d) => d,
        None => {
            let machine = machine.as_ref().expect("a running operation has a machine");
            let active = obs.backend.as_ref().is_some_and(|b| !b.terminal());
            if op.spec.abort {
                if machine.can_abort() {
                    return finish(
                        ctx,
                        &op,
                        OpsPhase::Aborted,
                        format!("aborted on request at step {}", machine.state().name()),
                        None,
                        active,
                    )
                    .await;
                }
                refused = Some(format!(
                    "spec.abort is refused: step {} cannot be aborted, the volume has already moved",
                    machine.state().name()
                ));
            }
            let d = plan::step(&op, machine.state(), &obs);
            let waits = matches!(
                d,
                Decision::Wait { .. } | Decision::Call { .. } | Decision::ContinueOnce { .. }
            );
            if waits && machine.timed_out(now) {
                let step = machine.state().name();
                let message = format!(
                    "step {step} exceeded its deadline{}; the backend migration, if any, was cancelled",
                    machine
                        .deadline()
                        .map(|d| format!(" ({d})"))
                        .unwrap_or_default()
                );
                ctx.metrics.count(
                    &format!("{METRIC_PREFIX}operation_step_deadline_exceeded_total"),
                    vec![("action", "Migrate".into()), ("step", step.into())],
                );
                let cancel = active && machine.can_abort();
                return finish(
                    ctx,
                    &op,
                    OpsPhase::Failed,
                    message,
                    Some(reason::DEADLINE),
                    cancel,
                )
                .await;
            }
            d
        }
    };
    execute(ctx, graphs, &op, machine, &obs, decision, refused, image).await
}

/// Reads everything the plan needs. The control plane is read only once the volume
/// resolves.
async fn observe(
    op: &PersistentVolumeOps,
    at: Option<VolumeOpsStep>,
    ctx: &Context,
) -> Result<Observation, Error> {
    let me = op.name_any();
    let stored = status_of(op).migration.unwrap_or_default();
    let mut obs = Observation {
        volume_present: false,
        unresolvable: None,
        target: Err(String::new()),
        record: stored.clone(),
        member_nodes: Vec::new(),
        lock: LockPlan::Held,
        backend: None,
        foreign: None,
        consumers: Vec::new(),
        jobs: BTreeMap::new(),
        job_names: BTreeMap::new(),
        job_namespace: ctx.namespace.clone(),
    };
    for job in &stored.validation_jobs {
        obs.jobs
            .insert(job.name.clone(), job_state(ctx, job).await?);
    }
    let pvs: Api<PersistentVolume> = Api::all(ctx.kube.clone());
    let Some(pv) = pvs.get_opt(&op.spec.persistent_volume_name).await? else {
        return Ok(obs);
    };
    if pv.meta().deletion_timestamp.is_some() {
        return Ok(obs);
    }
    obs.volume_present = true;
    let handle = match handle_of(&pv) {
        Ok(h) => h,
        Err(why) => {
            obs.unresolvable = Some(why);
            return Ok(obs);
        }
    };
    obs.target = target_uuid(op, ctx).await?;
    let cp = ctx.control_plane()?;
    let cluster = handle.cluster;
    let pool = match &handle.pool {
        PoolRef::Id(id) => Some(*id),
        PoolRef::Name(name) => cp.find_pool(cluster, name).await?.map(|p| p.id),
    };
    let Some(pool) = pool else {
        obs.unresolvable = Some(format!(
            "the pool {} of volume handle {handle} is not in cluster {cluster}",
            handle.pool
        ));
        return Ok(obs);
    };
    let volume = match cp.get_volume(cluster, pool, handle.volume).await {
        Ok(v) => v,
        Err(e) if e.is_not_found() => {
            obs.unresolvable = Some(format!(
                "volume {} of handle {handle} is not in the control plane",
                handle.volume
            ));
            return Ok(obs);
        }
        Err(e) => return Err(e.into()),
    };
    let members: Vec<_> = cp
        .list_volumes(cluster, pool)
        .await?
        .into_iter()
        .filter(|v| v.nqn == volume.nqn)
        .collect();
    obs.member_nodes = members
        .iter()
        .map(|v| v.storage_node_id.to_string())
        .collect();
    let member_ids: BTreeSet<Uuid> = members.iter().map(|v| v.id).collect();

    // The subsystem's PersistentVolumes and their lock.
    let all = pvs.list(&ListParams::default()).await?.items;
    let subsystem: Vec<&PersistentVolume> = all
        .iter()
        .filter(|p| {
            handle_of(p).is_ok_and(|h| h.cluster == cluster && member_ids.contains(&h.volume))
        })
        .collect();
    let volumes: Vec<(String, Option<String>)> = subsystem
        .iter()
        .map(|p| (p.name_any(), lock::holder_of(p)))
        .collect();
    let mut holders = BTreeMap::new();
    let ops: Api<PersistentVolumeOps> = Api::all(ctx.kube.clone());
    for h in volumes.iter().filter_map(|(_, h)| h.as_deref()) {
        if h == me || holders.contains_key(h) {
            continue;
        }
        let state = match ops.get_opt(h).await? {
            None => Holder::Missing,
            Some(o) if status_of(&o).phase.is_terminal() => Holder::Ended,
            Some(_) => Holder::Live,
        };
        holders.insert(h.to_owned(), state);
    }
    obs.lock = lock::plan(&me, &volumes, |h| {
        holders.get(h).copied().unwrap_or(Holder::Missing)
    });

    // The record, as far as it is known.
    let record = &mut obs.record;
    record.cluster_uuid = Some(cluster.to_string());
    record.pool_uuid = Some(pool.to_string());
    record.volume_uuid = Some(handle.volume.to_string());
    record.subsystem_nqn = Some(volume.nqn.clone());
    if record.source_node_uuid.is_none() {
        record.source_node_uuid = Some(volume.storage_node_id.to_string());
    }
    if let Ok(t) = &obs.target {
        record.target_node_uuid = Some(t.clone());
    }
    record.member_count = Some(members.len() as i32);

    // The backend migration: the recorded one, or an active one to the target to adopt.
    if at.is_some() {
        let found = match &stored.migration_uuid {
            Some(id) => match id.parse::<Uuid>() {
                Ok(id) => match cp.get_migration(cluster, &volume.nqn, id).await {
                    Ok(m) => Some(m),
                    Err(e) if e.is_not_found() => None,
                    Err(e) => return Err(e.into()),
                },
                Err(_) => None,
            },
            None => {
                let list = cp.list_migrations(cluster, &volume.nqn).await?;
                let target = obs.target.clone().unwrap_or_default();
                obs.foreign = list
                    .iter()
                    .find(|m| !m.is_terminal() && m.target_node_id != target)
                    .map(backend);
                list.into_iter()
                    .find(|m| !m.is_terminal() && m.target_node_id == target)
            }
        };
        if let Some(m) = &found {
            obs.record.migration_uuid = Some(m.id.to_string());
            if obs.record.connections.is_empty() {
                obs.record.connections = connections(m);
            }
        }
        obs.backend = found.as_ref().map(backend);
    }

    // Who consumes the subsystem, while it is being validated.
    if at == Some(VolumeOpsStep::Validating) {
        let names: BTreeSet<String> = subsystem.iter().map(|p| p.name_any()).collect();
        let mut nodes = BTreeSet::new();
        for va in Api::<VolumeAttachment>::all(ctx.kube.clone())
            .list(&ListParams::default())
            .await?
        {
            if va.spec.attacher == CSI_DRIVER_NAME
                && va
                    .spec
                    .source
                    .persistent_volume_name
                    .as_ref()
                    .is_some_and(|n| names.contains(n))
            {
                nodes.insert(va.spec.node_name.clone());
            }
        }
        for p in &subsystem {
            let Some(claim) = p.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
                continue;
            };
            let (Some(ns), Some(name)) = (&claim.namespace, &claim.name) else {
                continue;
            };
            for pod in Api::<Pod>::namespaced(ctx.kube.clone(), ns)
                .list(&ListParams::default())
                .await?
            {
                if uses_claim(&pod, name)
                    && let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone())
                {
                    nodes.insert(node);
                }
            }
        }
        obs.consumers = nodes.into_iter().collect();
        obs.job_names = obs
            .consumers
            .iter()
            .map(|n| (n.clone(), jobs::name(&me, n)))
            .collect();
    }
    Ok(obs)
}

fn uses_claim(pod: &Pod, claim: &str) -> bool {
    let done = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    !done
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .is_some_and(|v| {
                v.iter().any(|v| {
                    v.persistent_volume_claim
                        .as_ref()
                        .is_some_and(|c| c.claim_name == claim)
                })
            })
}

fn backend(m: &Migration) -> Backend {
    Backend {
        id: m.id.to_string(),
        phase: m.phase.clone(),
        status: m.status.clone(),
        error: m.error_message.clone(),
    }
}

fn connections(m: &Migration) -> Vec<MigrationConnection> {
    m.connect_strings
        .iter()
        .map(|c| MigrationConnection {
            nqn: Some(c.nqn.clone()),
            address: Some(c.ip.clone()),
            port: Some(i32::from(c.port)),
            transport: Some(c.transport.clone()),
            nr_io_queues: i32::try_from(c.nr_io_queues).ok(),
            reconnect_delay_seconds: i32::try_from(c.reconnect_delay).ok(),
            ctrl_loss_timeout_seconds: i32::try_from(c.ctrl_loss_tmo).ok(),
            fast_io_fail_timeout_seconds: i32::try_from(c.fast_io_fail_tmo).ok(),
            keep_alive_timeout_seconds: i32::try_from(c.keep_alive_tmo).ok(),
        })
        .collect()
}

/// The volume handle of a simplyblock PersistentVolume, or why it has none.
pub fn handle_of(pv: &PersistentVolume) -> Result<VolumeHandle, String> {
    let name = pv.name_any();
    let Some(csi) = pv.spec.as_ref().and_then(|s| s.csi.as_ref()) else {
        return Err(format!(
            "PersistentVolume {name} is not a CSI volume (no spec.csi)"
        ));
    };
    if csi.driver != CSI_DRIVER_NAME {
        return Err(format!(
            "PersistentVolume {name} belongs to CSI driver {}, not {CSI_DRIVER_NAME}",
            csi.driver
        ));
    }
    VolumeHandle::parse(&csi.volume_handle).map_err(|_| {
        format!(
            "the volume handle {:?} of PersistentVolume {name} is not <cluster>:<pool>:<volume>",
            csi.volume_handle
        )
    })
}

/// The target StorageNode's backend id, or why there is none yet.
async fn target_uuid(
    op: &PersistentVolumeOps,
    ctx: &Context,
) -> Result<Result<String, String>, Error> {
    let Some(m) = &op.spec.migrate else {
        return Ok(Err("the operation names no target".into()));
    };
    let r = &m.target_node_ref;
    let node = Api::<StorageNode>::namespaced(ctx.kube.clone(), &r.namespace)
        .get_opt(&r.name)
        .await?;
    Ok(match node.and_then(|n| n.status).and_then(|s| s.uuid) {
        Some(uuid) if !uuid.is_empty() => Ok(uuid),
        _ => Err(format!(
            "the target StorageNode {}/{} does not exist or has no control-plane id yet; waiting for it",
            r.namespace, r.name
        )),
    })
}

async fn job_state(
    ctx: &Context,
    job: &simplyblock_api::persistent_volume_ops::ValidationJob,
) -> Result<JobState, Error> {
    let ns = if job.namespace.is_empty() {
        &ctx.namespace
    } else {
        &job.namespace
    };
    let Some(j) = Api::<Job>::namespaced(ctx.kube.clone(), ns)
        .get_opt(&job.name)
        .await?
    else {
        return Ok(JobState::Missing);
    };
    let s = j.status.unwrap_or_default();
    let condition = |t: &str| {
        s.conditions
            .as_ref()
            .is_some_and(|c| c.iter().any(|c| c.type_ == t && c.status == "True"))
    };
    Ok(if s.succeeded.unwrap_or(0) > 0 || condition("Complete") {
        JobState::Succeeded
    } else if condition("Failed") {
        JobState::Failed
    } else {
        JobState::Running
    })
}

fn recorded_jobs(op: &PersistentVolumeOps) -> Vec<(String, String)> {
    status_of(op)
        .migration
        .map(|m| {
            m.validation_jobs
                .into_iter()
                .map(|j| (j.namespace, j.name))
                .collect()
        })
        .unwrap_or_default()
}

async fn delete_jobs(ctx: &Context, jobs: &[(String, String)]) -> Result<(), Error> {
    for (ns, name) in jobs {
        let ns = if ns.is_empty() { &ctx.namespace } else { ns };
        match Api::<Job>::namespaced(ctx.kube.clone(), ns)
            .delete(name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn execute(
    ctx: &Context,
    graphs: &Graphs,
    op: &PersistentVolumeOps,
    machine: Option<Machine<'_, VolumeOpsStep>>,
    obs: &Observation,
    decision: Decision,
    refused: Option<String>,
    image: &str,
) -> Result<Action, Error> {
    let status = status_of(op);
    let noted = |message: String| match &refused {
        Some(note) => format!("{note} — {message}"),
        None => message,
    };
    let now = Timestamp::now();
    match decision {
        Decision::Finish {
            phase,
            message,
            reason,
            cancel,
        } => finish(ctx, op, phase, message, reason, cancel).await,
        Decision::Start => {
            let machine = graphs
                .0
                .start(op.spec.action, now)
                .map_err(|e| Error::Invalid(e.to_string()))?;
            let message = format!("started at step {}", machine.state().name());
            let next = PersistentVolumeOpsStatus {
                phase: OpsPhase::Running,
                step: machine.snapshot(),
                message: Some(message.clone()),
                started_at: Some(Time(now)),
                completed_at: None,
                ..status
            };
            write_status(ctx, op, &next).await?;
            ctx.event(op, false, reason::STARTED, message).await;
            if let Some(created) = op.meta().creation_timestamp.as_ref() {
                ctx.metrics.observe(
                    &format!("{METRIC_PREFIX}operation_queued_seconds"),
                    vec![("action", "Migrate".into())],
                    now.duration_since(created.0).as_secs_f64().max(0.0),
                );
            }
            Ok(Action::requeue(requeue::NEXT_STEP))
        }
        Decision::Wait {
            message,
            after,
            deferred,
        } => {
            let message = noted(message);
            if deferred && status.message.as_deref() != Some(message.as_str()) {
                ctx.event(op, false, reason::QUEUED, message.clone()).await;
            }
            let next = PersistentVolumeOpsStatus {
                message: Some(message),
                deferred_since: match deferred {
                    true => status.deferred_since.clone().or(Some(Time(now))),
                    false => status.deferred_since.clone(),
                },
                migration: Some(obs.record.clone()).filter(|_| status.migration.is_some()),
                ..status.clone()
            };
            write_status(ctx, op, &next).await?;
            let after = machine
                .as_ref()
                .and_then(|m| m.requeue_after(now))
                .map_or(after, |left| after.min(left));
            Ok(Action::requeue(after.max(Duration::from_millis(100))))
        }
        Decision::Record { record, message } => {
            let next = PersistentVolumeOpsStatus {
                message: Some(noted(message)),
                migration: Some(record),
                ..status
            };
            write_status(ctx, op, &next).await?;
            Ok(Action::requeue(requeue::NEXT_STEP))
        }
        Decision::Advance {
            to,
            record,
            message,
        } => {
            let mut machine = machine.expect("a running operation has a machine");
            let from = machine.state();
            let entered = step_entered(&machine);
            machine
                .transition_to(to, now)
                .map_err(|e| Error::Invalid(e.to_string()))?;
            let mut step = machine.snapshot();
            if to == VolumeOpsStep::Migrating {
                // The copy's budget grows with the subsystem.
                let members = record.member_count.unwrap_or(1).max(1) as u32;
                let budget = migrating_budget(members).mul_f64(scale(ctx));
                step.deadline = now.checked_add(budget).ok();
            }
            let next = PersistentVolumeOpsStatus {
                step,
                message: Some(message),
                migration: Some(record),
                ..status
            };
            write_status(ctx, op, &next).await?;
            if let Some(entered) = entered {
                ctx.metrics.observe(
                    &format!("{METRIC_PREFIX}operation_step_duration_seconds"),
                    vec![("action", "Migrate".into()), ("step", from.name().into())],
                    now.duration_since(entered).as_secs_f64().max(0.0),
                );
            }
            Ok(Action::requeue(requeue::NEXT_STEP))
        }
        Decision::Call { call, message } => {
            let message = noted(message);
            let recorded = write_status(
                ctx,
                op,
                &PersistentVolumeOpsStatus {
                    message: Some(message.clone()),
                    ..status.clone()
                },
            )
            .await?;
            let step = machine
                .as_ref()
                .map(|m| m.state().name())
                .unwrap_or("Pending");
            match call_once(ctx, op, &recorded, obs, &call, image, step).await {
                Ok(action) => {
                    ctx.call_failures.clear(&op.uid().unwrap_or_default());
                    Ok(action)
                }
                Err(CallError::Retry(why)) => {
                    let failures = ctx.call_failures.failed(&op.uid().unwrap_or_default());
                    let pause =
                        crate::runtime::ops::call_retry(failures, simplyblock_controlplane::draw());
                    write_status(
                        ctx,
                        &recorded,
                        &PersistentVolumeOpsStatus {
                            message: Some(format!(
                                "{message}: {why}; retrying in {} s (failure {failures} in a row)",
                                pause.as_secs()
                            )),
                            ..status
                        },
                    )
                    .await?;
                    Ok(Action::requeue(pause))
                }
                Err(CallError::Deferred(why)) => {
                    let next = PersistentVolumeOpsStatus {
                        message: Some(format!("deferred: {why}")),
                        deferred_since: status.deferred_since.clone().or(Some(Time(now))),
                        ..status
                    };
                    write_status(ctx, &recorded, &next).await?;
                    Ok(Action::requeue(Duration::from_secs(10)))
                }
                Err(CallError::Kube(e)) => Err(e),
            }
        }
        Decision::ContinueOnce { message } => {
            let machine = machine.expect("a running operation has a machine");
            // Write-ahead: from here on the continue counts as sent, whatever happens.
            let mut record = obs.record.clone();
            record.continued_at = Some(Time(now));
            let recorded = write_status(
                ctx,
                op,
                &PersistentVolumeOpsStatus {
                    message: Some(message),
                    migration: Some(record.clone()),
                    ..status.clone()
                },
            )
            .await?;
            let (cluster, nqn, id) = address(&record)?;
            let cp = ctx.control_plane()?;
            let result = cp
                .continue_migration(cluster, &nqn, id, &MigrationContinue::default())
                .await;
            crate::runtime::crash::point(&crate::runtime::crash::ops_point(
                "PersistentVolumeOps",
                "Migrate",
                machine.state().name(),
            ));
            match result {
                Ok(()) => {
                    ctx.event(
                        op,
                        false,
                        "MigrationContinued",
                        format!("migration {id} of subsystem {nqn} is copying"),
                    )
                    .await;
                    Ok(Action::requeue(requeue::NEXT_STEP))
                }
                Err(e) => {
                    let message = format!(
                        "continuing migration {id} failed ({e}); it is not sent again, since the control plane may have acted on it — look at the migration and create a new operation if it did not start"
                    );
                    finish(ctx, &recorded, OpsPhase::Failed, message, None, false).await
                }
            }
        }
    }
}

fn scale(ctx: &Context) -> f64 {
    let f = ctx.step_deadline_scale;
    if f.is_finite() && f > 0.0 { f } else { 1.0 }
}

fn step_entered(machine: &Machine<'_, VolumeOpsStep>) -> Option<Timestamp> {
    crate::runtime::ops::step_entered(machine)
}

enum CallError {
    /// The call failed; the step's deadline bounds the retries.
    Retry(String),
    /// The control plane is not accepting migrations yet.
    Deferred(String),
    Kube(Error),
}

impl From<Error> for CallError {
    fn from(e: Error) -> Self {
        CallError::Kube(e)
    }
}

fn address(record: &MigrationStatus) -> Result<(Uuid, String, Uuid), Error> {
    let parse = |v: &Option<String>, what: &str| {
        v.as_deref()
            .and_then(|s| s.parse::<Uuid>().ok())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "status.migration.{what} is missing or not a UUID; the operation cannot address its migration"
                ))
            })
    };
    Ok((
        parse(&record.cluster_uuid, "clusterUUID")?,
        record.subsystem_nqn.clone().unwrap_or_default(),
        parse(&record.migration_uuid, "migrationUUID")?,
    ))
}

async fn call_once(
    ctx: &Context,
    op: &PersistentVolumeOps,
    recorded: &PersistentVolumeOps,
    obs: &Observation,
    call: &Call,
    image: &str,
    step: &str,
) -> Result<Action, CallError> {
    let me = op.name_any();
    match call {
        Call::Acquire(pvs) => {
            let ok = lock::acquire(&ctx.kube, &me, pvs).await?;
            Ok(Action::requeue(if ok {
                requeue::NEXT_STEP
            } else {
                requeue::CONFLICT
            }))
        }
        Call::Break(pvs) => {
            for pv in pvs {
                let Some(stale) = obs_holder(ctx, pv).await? else {
                    continue;
                };
                if lock::break_stale(&ctx.kube, pv, &stale).await? {
                    ctx.event(
                        op,
                        true,
                        "LockBroken",
                        format!(
                            "the lock of operation {stale} on PersistentVolume {pv} was cleared: that operation ended or is gone"
                        ),
                    )
                    .await;
                }
            }
            Ok(Action::requeue(requeue::NEXT_STEP))
        }
        Call::CreateMigration => {
            let record = &obs.record;
            let cluster = record
                .cluster_uuid
                .as_deref()
                .and_then(|s| s.parse::<Uuid>().ok())
                .ok_or_else(|| CallError::Retry("the volume's cluster is not recorded".into()))?;
            let target = obs
                .target
                .as_ref()
                .ok()
                .and_then(|s| s.parse::<Uuid>().ok())
                .ok_or_else(|| CallError::Retry("the target has no control-plane id".into()))?;
            let nqn = record.subsystem_nqn.clone().unwrap_or_default();
            let cp = ctx.control_plane()?;
            let created = cp
                .create_migration(
                    cluster,
                    &nqn,
                    &MigrationCreate {
                        target_node_id: target,
                        ctrl_loss_tmo: CTRL_LOSS_TMO,
                        host_nqn: None,
                    },
                )
                .await;
            crate::runtime::crash::point(&crate::runtime::crash::ops_point(
                "PersistentVolumeOps",
                "Migrate",
                step,
            ));
            match created {
                Ok(m) => {
                    let mut next = record.clone();
                    next.migration_uuid = Some(m.id.to_string());
                    next.connections = connections(&m);
                    let status = PersistentVolumeOpsStatus {
                        migration: Some(next),
                        message: Some(format!("migration {} pre-created", m.id)),
                        ..status_of(recorded)
                    };
                    write_status(ctx, recorded, &status).await?;
                    ctx.event(
                        op,
                        false,
                        "MigrationCreated",
                        format!(
                            "migration {} of subsystem {nqn} to node {target} pre-created",
                            m.id
                        ),
                    )
                    .await;
                    Ok(Action::requeue(requeue::NEXT_STEP))
                }
                Err(e) => {
                    let text = e.to_string();
                    if text.contains("is rebalancing")
                        || text.contains("data migration in progress")
                    {
                        Err(CallError::Deferred(text))
                    } else {
                        Err(CallError::Retry(text))
                    }
                }
            }
        }
        Call::CreateJobs(list) => {
            let api: Api<Job> = Api::namespaced(ctx.kube.clone(), &ctx.namespace);
            for (node, name) in list {
                let job = jobs::job(op, name, node, &obs.record.connections, image)
                    .map_err(CallError::Retry)?;
                match api.create(&PostParams::default(), &job).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(CallError::Retry(format!("creating Job {name}: {e}"))),
                }
            }
            Ok(Action::requeue(requeue::NEXT_STEP))
        }
        Call::DeleteJobs(names) => {
            let jobs: Vec<(String, String)> = recorded_jobs(op)
                .into_iter()
                .filter(|(_, n)| names.contains(n))
                .collect();
            delete_jobs(ctx, &jobs).await?;
            Ok(Action::requeue(requeue::NEXT_STEP))
        }
    }
}

async fn obs_holder(ctx: &Context, pv: &str) -> Result<Option<String>, Error> {
    Ok(Api::<PersistentVolume>::all(ctx.kube.clone())
        .get_opt(pv)
        .await?
        .and_then(|p| lock::holder_of(&p)))
}

/// The terminal write, after cancelling the backend migration when asked; then its event
/// and metrics, the lock's release and the Jobs' deletion.
async fn finish(
    ctx: &Context,
    op: &PersistentVolumeOps,
    phase: OpsPhase,
    message: String,
    extra: Option<&'static str>,
    cancel: bool,
) -> Result<Action, Error> {
    let cancelled;
    let op = if cancel {
        cancelled = cancel_migration(ctx, op).await?;
        &cancelled
    } else {
        op
    };
    let status = status_of(op);
    let now = Timestamp::now();
    let next = PersistentVolumeOpsStatus {
        phase,
        message: Some(message.clone()),
        completed_at: Some(Time(now)),
        ..status.clone()
    };
    write_status(ctx, op, &next).await?;
    if let Some(reason) = extra {
        ctx.event(op, phase != OpsPhase::Succeeded, reason, message.clone())
            .await;
    }
    let (warning, standard, result) = match phase {
        OpsPhase::Succeeded => (false, reason::SUCCEEDED, "succeeded"),
        OpsPhase::Aborted => (true, reason::ABORTED, "aborted"),
        _ => (true, reason::FAILED, "failed"),
    };
    ctx.event(op, warning, standard, message).await;
    let labels = vec![
        ("action", "Migrate".to_owned()),
        ("result", result.to_owned()),
    ];
    ctx.metrics
        .count(&format!("{METRIC_PREFIX}operations_total"), labels.clone());
    let seconds = status
        .started_at
        .map(|t| now.duration_since(t.0).as_secs_f64().max(0.0))
        .unwrap_or(0.0);
    ctx.metrics.observe(
        &format!("{METRIC_PREFIX}operation_duration_seconds"),
        labels,
        seconds,
    );
    let me = op.name_any();
    lock::release(&ctx.kube, &me, &lock::held_by(&ctx.kube, &me).await?).await?;
    delete_jobs(ctx, &recorded_jobs(op)).await?;
    Ok(Action::await_change())
}

/// How long a recorded cancel is trusted: a migration still active this long after it
/// was asked is asked again (the first answer may have been lost before it was carried out).
const CANCEL_ASKED_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_secs(120);

/// Cancels the recorded backend migration when it is still active; a migration already
/// ended or gone is success. The cancel is recorded in the status (under the
/// resourceVersion lock) before it is sent; the operation as written is returned.
async fn cancel_migration(
    ctx: &Context,
    op: &PersistentVolumeOps,
) -> Result<PersistentVolumeOps, Error> {
    let status = status_of(op);
    let Some(record) = status.migration.clone() else {
        return Ok(op.clone());
    };
    if record.migration_uuid.is_none() {
        return Ok(op.clone());
    }
    let now = Timestamp::now();
    if record
        .cancelled_at
        .as_ref()
        .is_some_and(|at| now.duration_since(at.0).unsigned_abs() < CANCEL_ASKED_AGAIN_AFTER)
    {
        return Ok(op.clone());
    }
    let (cluster, nqn, id) = address(&record)?;
    let cp = ctx.control_plane()?;
    match cp.get_migration(cluster, &nqn, id).await {
        Ok(m) if m.is_terminal() => return Ok(op.clone()),
        Err(e) if e.is_not_found() => return Ok(op.clone()),
        Err(e) => return Err(e.into()),
        Ok(_) => {}
    }
    let asked = PersistentVolumeOpsStatus {
        migration: Some(MigrationStatus {
            cancelled_at: Some(Time(now)),
            ..record
        }),
        ..status
    };
    let op = write_status(ctx, op, &asked).await?;
    match cp.cancel_migration(cluster, &nqn, id).await {
        Ok(()) => {}
        // Ended between the read and the cancel.
        Err(e) if e.to_string().contains("not active") => {}
        Err(e) => return Err(e.into()),
    }
    crate::runtime::crash::point(&crate::runtime::crash::ops_point(
        "PersistentVolumeOps",
        "Migrate",
        "Cancel",
    ));
    ctx.event(
        &op,
        true,
        "MigrationCancelled",
        format!("migration {id} of subsystem {nqn} was cancelled"),
    )
    .await;
    Ok(op)
}

/// Deleted: an unfinished operation cancels its migration and ends Aborted; the lock and
/// the Jobs go; then the finalizer.
async fn cleanup(op: &PersistentVolumeOps, ctx: &Context) -> Result<(), Error> {
    let mut op = op.clone();
    if !status_of(&op).phase.is_terminal() {
        let at = status_of(&op)
            .step
            .state
            .map(|s| format!(" at step {s}"))
            .unwrap_or_default();
        finish(
            ctx,
            &op,
            OpsPhase::Aborted,
            format!("the operation was deleted{at}; its backend migration, if any, was cancelled"),
            None,
            true,
        )
        .await?;
        op = Api::<PersistentVolumeOps>::all(ctx.kube.clone())
            .get(&op.name_any())
            .await?;
    }
    let me = op.name_any();
    lock::release(&ctx.kube, &me, &lock::held_by(&ctx.kube, &me).await?).await?;
    delete_jobs(ctx, &recorded_jobs(&op)).await?;
    set_finalizers(ctx, &op, false).await
}

/// Adds or removes the finalizer on the operation as read (a compare-and-swap on the
/// list: 409 is [`Error::Stale`]).
async fn set_finalizers(
    ctx: &Context,
    op: &PersistentVolumeOps,
    present: bool,
) -> Result<(), Error> {
    let mut list: Vec<String> = op
        .finalizers()
        .iter()
        .filter(|f| *f != PERSISTENT_VOLUME_OPS_FINALIZER)
        .cloned()
        .collect();
    if present {
        list.push(PERSISTENT_VOLUME_OPS_FINALIZER.into());
    }
    let patch = json!({"metadata": {"resourceVersion": op.resource_version(), "finalizers": list}});
    match Api::<PersistentVolumeOps>::all(ctx.kube.clone())
        .patch(
            &op.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Err(Error::Stale(op.name_any())),
        Err(e) => Err(e.into()),
    }
}

/// Writes the whole status with server-side apply, conditional on the resourceVersion the
/// decision was taken from; unchanged, nothing is sent. Returns the object as stored.
async fn write_status(
    ctx: &Context,
    op: &PersistentVolumeOps,
    next: &PersistentVolumeOpsStatus,
) -> Result<PersistentVolumeOps, Error> {
    let previous = op.status.as_ref().map_or(&[][..], |s| &s.conditions[..]);
    let verdicts =
        conditions::ops_verdicts(next.phase, next.message.as_deref().unwrap_or_default());
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now());
    let next = PersistentVolumeOpsStatus {
        observed_generation: op.meta().generation,
        conditions: conditions::with_conditions(previous, &verdicts, op.meta().generation, &now),
        ..next.clone()
    };
    if op.status.as_ref() == Some(&next) {
        return Ok(op.clone());
    }
    kit::apply_status(&ctx.kube, op, MANAGER, &next, Guard::ResourceVersion).await
}

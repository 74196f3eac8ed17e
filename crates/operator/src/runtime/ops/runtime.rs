//! The I/O around the pure decisions: reading the target and the queue, the lock writes,
//! status writes (server-side apply under the kind's field manager, only when changed),
//! events, and the finalizer.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde_json::json;
use simplyblock_api::common::OpsPhase;
use simplyblock_api::conditions;
use simplyblock_statemachine::{Machine, State, StepSnapshot};
use tracing::Instrument;

use super::{
    Decision, Gate, Move, Observation, OpsResource, OpsStatus, Plan, StepGraphs, Steps,
    abort_check, gate, queue_ahead, reason, running,
};
use crate::runtime::context::{Context, requeue};
use crate::runtime::kit::{Guard, apply_status};
use crate::runtime::machine::says_news;

/// The lock field on every target's status.
pub const LOCK_FIELD: &str = "activeOpsRef";

pub use crate::runtime::kit::Error;

/// The controller of Ops kind `K`: a change of a target (its lock released, its status
/// moved) wakes every operation on it. A kind adds its own watches before [`run`].
pub fn controller<K: OpsResource>(ctx: &Context) -> Controller<K> {
    let controller = Controller::new(ctx.scope.api::<K>(&ctx.kube), watcher::Config::default());
    if !K::LOCKS_TARGET {
        return controller;
    }
    let store = controller.store();
    controller.watches(
        ctx.scope.api::<K::Target>(&ctx.kube),
        watcher::Config::default(),
        move |target| {
            store
                .state()
                .into_iter()
                .filter(|op| {
                    op.namespace() == target.namespace() && op.target_name() == target.name_any()
                })
                .map(|op| ObjectRef::from_obj(&*op))
                .collect::<Vec<_>>()
        },
    )
}

/// Runs `controller` (from [`controller`]) over the kind's `steps` until the operator
/// stops.
pub async fn run<K: OpsResource, S: Steps<K>>(
    name: &'static str,
    controller: Controller<K>,
    steps: S,
    ctx: Arc<Context>,
) {
    let steps = Arc::new(steps);
    crate::runtime::kit::run(
        name,
        controller,
        move |op, ctx| {
            let steps = steps.clone();
            async move { reconcile(op, ctx, &*steps).await }
        },
        ctx,
    )
    .await
}

/// One pass over one operation: the finalizer, the phase and lock gate, then one step.
/// A pass over a finished operation also prunes its target's history.
pub async fn reconcile<K: OpsResource, S: Steps<K>>(
    op: Arc<K>,
    ctx: Arc<Context>,
    steps: &S,
) -> Result<Action, Error> {
    // Inside the controller's `reconcile` span (object, kind): the operation and the step
    // it is at when the pass begins.
    let span = tracing::info_span!(
        "operation",
        operation = op.action_name(),
        step = op.ops_status().step.state.as_deref().unwrap_or("none"),
    );
    let action = pass(op.clone(), ctx.clone(), steps)
        .instrument(span.clone())
        .await?;
    if !K::RUNTIME_PRUNES_HISTORY
        || !op.ops_status().phase.is_terminal()
        || op.meta().deletion_timestamp.is_some()
    {
        return Ok(action);
    }
    let ns = op.namespace().unwrap_or_default();
    let next_expiry = super::history::prune::<K>(
        &Api::namespaced(ctx.kube.clone(), &ns),
        &Api::namespaced(ctx.kube.clone(), &ns),
        op.history_group(),
        |o| o.history_group(),
        None,
    )
    .instrument(span)
    .await?;
    // A finished operation waits for no change of its own: look again when the next one
    // outlives the retention.
    match next_expiry {
        Some(wait) if action == Action::await_change() => {
            Ok(Action::requeue(wait.max(Duration::from_secs(1))))
        }
        _ => Ok(action),
    }
}

async fn pass<K: OpsResource, S: Steps<K>>(
    op: Arc<K>,
    ctx: Arc<Context>,
    steps: &S,
) -> Result<Action, Error> {
    let ctx = &*ctx;
    if !K::LOCKS_TARGET && op.ops_status().phase.is_terminal() {
        // Without a lock, the finalizer only guards the Aborted record of an unfinished
        // operation: it goes with the operation's end.
        crate::runtime::kit::remove_finalizer(&ctx.kube, &*op, K::FINALIZER).await?;
        return Ok(Action::await_change());
    }
    crate::runtime::kit::finalized(
        &ctx.kube,
        K::FINALIZER,
        op,
        |op| async move { apply(&*op, ctx, steps).await },
        |op| async move { cleanup(&*op, ctx, steps).await },
    )
    .await
}

/// Deleted: an operation that never ended is recorded Aborted first (its event and
/// metrics), then what it created goes ([`Steps::dependents_gone`]), then the lock is
/// released.
async fn cleanup<K: OpsResource, S: Steps<K>>(
    op: &K,
    ctx: &Context,
    steps: &S,
) -> Result<Action, Error> {
    if !op.ops_status().phase.is_terminal() {
        return finish(op, ctx, OpsPhase::Aborted, op.deleted_message(), None).await;
    }
    if let Some(why) = steps.dependents_gone(op, ctx).await? {
        return Err(Error::Held(why));
    }
    release(&ctx.kube, op).await?;
    Ok(Action::await_change())
}

fn created(o: &impl Resource) -> Option<Timestamp> {
    o.meta().creation_timestamp.as_ref().map(|t| t.0)
}

async fn apply<K: OpsResource, S: Steps<K>>(
    op: &K,
    ctx: &Context,
    steps: &S,
) -> Result<Action, Error> {
    let ns = op.namespace().unwrap_or_default();
    let me = op.name_any();
    let target = match op.own_target() {
        Some(itself) => Some(itself),
        None => {
            Api::<K::Target>::namespaced(ctx.kube.clone(), &ns)
                .get_opt(op.target_name())
                .await?
        }
    };
    let status = op.ops_status();
    // A kind without a lock holds its own, always.
    let holder = match K::LOCKS_TARGET {
        true => target.as_ref().map(|t| K::lock_holder(t)),
        false => Some(Some(me.as_str())),
    };
    // Only a Pending operation facing a free lock needs the queue.
    let queue: Vec<K> = if status.phase == OpsPhase::Pending && holder == Some(None) {
        Api::<K>::namespaced(ctx.kube.clone(), &ns)
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|o| {
                o.target_name() == op.target_name()
                    && !o.ops_status().phase.is_terminal()
                    && o.meta().deletion_timestamp.is_none()
            })
            .collect()
    } else {
        Vec::new()
    };
    let ahead = queue_ahead(
        (created(op), &me),
        queue
            .iter()
            .map(|o| (created(o), o.meta().name.as_deref().unwrap_or(""))),
    );
    let obs = Observation {
        phase: status.phase,
        abort: op.abort_requested(),
        target: holder,
        ahead,
    };
    let target_kind = K::Target::kind(&());
    match gate(&me, &target_kind, op.target_name(), &obs) {
        Gate::Idle => Ok(Action::await_change()),
        Gate::Release => {
            release(&ctx.kube, op).await?;
            Ok(Action::await_change())
        }
        Gate::Abort(message) => finish(op, ctx, OpsPhase::Aborted, message, None).await,
        Gate::Fail(message) => finish(op, ctx, OpsPhase::Failed, message, None).await,
        Gate::Queue(message) => {
            if status.message.as_deref() != Some(message.as_str()) {
                ctx.event(op, false, reason::QUEUED, message.clone()).await;
            }
            let next = OpsStatus {
                phase: OpsPhase::Pending,
                message: Some(message),
                ..status
            };
            write_status(&ctx.kube, op, &next, op.kind_status()).await?;
            Ok(Action::requeue(super::QUEUED_RECHECK))
        }
        Gate::Acquire => {
            let Some(target) = target else {
                return Ok(Action::requeue(requeue::CONFLICT));
            };
            // A Running operation taking its lock back was admitted long ago.
            if status.phase == OpsPhase::Pending
                && let Some(hold) = steps.admission(op, &target, ctx).await?
            {
                if status.message.as_deref() != Some(hold.message.as_str()) {
                    ctx.event(op, true, hold.reason, hold.message.clone()).await;
                }
                let next = OpsStatus {
                    message: Some(hold.message),
                    ..status
                };
                write_status(&ctx.kube, op, &next, op.kind_status()).await?;
                return Ok(Action::requeue(super::QUEUED_RECHECK));
            }
            if acquire(&ctx.kube, op, &target).await? {
                Ok(Action::requeue(requeue::NEXT_STEP))
            } else {
                Ok(Action::requeue(requeue::CONFLICT))
            }
        }
        Gate::Start => {
            let now = Timestamp::now();
            let machine = match StepGraphs::<K>::with_deadline_scale(ctx.step_deadline_scale)
                .restore(op, now)
            {
                Ok(m) => m,
                Err(e) => return finish(op, ctx, OpsPhase::Failed, e.to_string(), None).await,
            };
            let message = format!("started at step {}", machine.state().name());
            let next = OpsStatus {
                phase: OpsPhase::Running,
                step: machine.snapshot(),
                message: Some(message.clone()),
                started_at: Some(Time(now)),
                completed_at: None,
                conditions: Vec::new(),
            };
            write_status(&ctx.kube, op, &next, op.kind_status()).await?;
            // Counted before it is said: whoever sees the event finds it counted.
            super::metrics::started(&ctx.metrics, op, created(op));
            ctx.event(op, false, reason::STARTED, message).await;
            Ok(Action::requeue(requeue::NEXT_STEP))
        }
        Gate::Run => {
            let Some(target) = target else {
                return Ok(Action::requeue(requeue::CONFLICT));
            };
            drive(op, &target, ctx, steps).await
        }
    }
}

/// Writes `next`, the status of an operation that stays on its step, with the kind's own
/// fields `kind`.
async fn record<K: OpsResource, S: Steps<K>>(
    ctx: &Context,
    op: &K,
    steps: &S,
    next: &OpsStatus,
    kind: K::Fields,
) -> Result<Action, Error> {
    write_status(&ctx.kube, op, next, kind.clone()).await?;
    steps.kind_status_written(ctx, op, &kind);
    Ok(Action::requeue(requeue::NEXT_STEP))
}

/// One step of a Running operation that holds its lock.
async fn drive<K: OpsResource, S: Steps<K>>(
    op: &K,
    target: &K::Target,
    ctx: &Context,
    steps: &S,
) -> Result<Action, Error> {
    let now = Timestamp::now();
    let status = op.ops_status();
    let mut machine: Machine<'static, K::Step> =
        match StepGraphs::<K>::with_deadline_scale(ctx.step_deadline_scale).restore(op, now) {
            Ok(m) => m,
            // An unknown action or stored step: no retry can help.
            Err(e) => return finish(op, ctx, OpsPhase::Failed, e.to_string(), None).await,
        };
    let refused = match abort_check(op.abort_requested(), &machine) {
        Ok(Some(message)) => {
            if let Some(why) = steps.unwind(op, machine.state(), ctx).await? {
                let waiting = OpsStatus {
                    message: Some(format!("{message}; undoing what the step started: {why}")),
                    ..status.clone()
                };
                write_status(&ctx.kube, op, &waiting, op.kind_status()).await?;
                return Ok(Action::requeue(super::kind::POLL));
            }
            return finish(op, ctx, OpsPhase::Aborted, message, None).await;
        }
        Ok(None) => None,
        Err(note) => {
            if !status
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with(&note))
            {
                ctx.event(op, true, "AbortRefused", note.clone()).await;
            }
            Some(note)
        }
    };
    let obs = steps.observe(op, target, &machine, ctx).await?;
    // The deadline is judged when the observation is in: a slow control plane makes a late
    // look, and a late look must not call.
    let now = Timestamp::now();
    let super::Noted { plan, notes } = steps.plan(op, target, &machine, &obs, now);
    let running_status = |machine: &Machine<'static, K::Step>, message: String| OpsStatus {
        phase: OpsPhase::Running,
        step: machine.snapshot(),
        message: Some(message),
        ..status.clone()
    };
    let decision = running(&machine, plan, refused.as_deref(), now);
    let noted = match &decision {
        Decision::Finish {
            deadline_exceeded, ..
        } => !deadline_exceeded,
        Decision::Carry {
            plan: Plan::Wait { message, .. },
            ..
        } => says_news(status.message.as_deref(), message),
        _ => true,
    };
    if noted {
        for note in notes {
            ctx.event(op, note.warning, note.reason, note.message).await;
        }
    }
    match decision {
        Decision::Finish {
            phase,
            mut message,
            kind_status,
            deadline_exceeded,
        } => {
            if deadline_exceeded {
                if let Some(said) = steps.deadline_message(op, machine.state()) {
                    message = said;
                }
                super::metrics::deadline_exceeded(&ctx.metrics, op, machine.state().name());
                ctx.event(op, true, reason::DEADLINE, message.clone()).await;
            }
            left(ctx, op, steps, &machine);
            if let Some(kind) = &kind_status {
                steps.kind_status_written(ctx, op, kind);
            }
            if phase == OpsPhase::Succeeded
                && let Some((reason, note)) = steps.succeed_event(op)
            {
                ctx.event(op, false, reason, note).await;
            }
            finish(op, ctx, phase, message, kind_status).await
        }
        // `running` finishes both; carried, they would be a bug.
        Decision::Carry {
            plan: Plan::Succeed { .. } | Plan::Fail(_),
            ..
        } => {
            let message = "the operator carried a terminal plan as a step; this is a bug in the operator, please report it".to_owned();
            finish(op, ctx, OpsPhase::Failed, message, None).await
        }
        Decision::Carry {
            plan:
                Plan::Advance {
                    to,
                    message,
                    kind_status,
                },
            ..
        } => {
            let from = machine.state();
            let before = machine.clone();
            match to {
                Move::To(next) => {
                    if let Err(e) = machine.transition_to(next, now) {
                        let message = format!(
                            "the operator tried an illegal step ({e}); this is a bug in the operator, please report it"
                        );
                        return finish(op, ctx, OpsPhase::Failed, message, None).await;
                    }
                }
                Move::Restart => machine.reset(now),
            }
            let kind = kind_status.unwrap_or_else(|| op.kind_status());
            write_status(
                &ctx.kube,
                op,
                &running_status(&machine, message),
                kind.clone(),
            )
            .await?;
            left(ctx, op, steps, &before);
            steps.kind_status_written(ctx, op, &kind);
            if let Some((reason, note)) = steps.advance_event(op, from, to) {
                ctx.event(op, false, reason, note).await;
            }
            Ok(Action::requeue(requeue::NEXT_STEP))
        }
        Decision::Carry {
            plan:
                Plan::Progress {
                    kind_status,
                    message,
                },
            ..
        } => {
            // The step moved on without leaving: its budget starts again from now.
            machine.extend_deadline(now);
            let next = running_status(&machine, message);
            record(ctx, op, steps, &next, kind_status).await
        }
        Decision::Carry {
            plan: Plan::Record {
                kind_status,
                message,
            },
            ..
        } => {
            let next = running_status(&machine, message);
            record(ctx, op, steps, &next, kind_status).await
        }
        Decision::Carry {
            plan: Plan::Call { call, message },
            after,
        } => {
            // Write-ahead: the step is on record before its side effect.
            let recorded = write_status(
                &ctx.kube,
                op,
                &running_status(&machine, message.clone()),
                op.kind_status(),
            )
            .await?;
            tracing::info!(op = %op.name_any(), ?call, "issuing");
            let result = steps.execute(op, target, &call, ctx).await;
            crash_point::<K>(op, machine.state().name());
            let uid = op.uid().unwrap_or_default();
            match result {
                Ok(()) => {
                    ctx.call_failures.clear(&uid);
                    Ok(Action::requeue(after.min(Duration::from_millis(500))))
                }
                Err(e) => {
                    let failures = ctx.call_failures.failed(&uid);
                    let pause = super::call_retry(failures, simplyblock_controlplane::draw());
                    // Never past the step's deadline, which then fails the step.
                    let pause = machine
                        .requeue_after(Timestamp::now())
                        .map_or(pause, |left| pause.min(left));
                    let message = format!(
                        "{message}: the call failed ({e}); retrying in {} s (failure {failures} in a row)",
                        pause.as_secs()
                    );
                    write_status(
                        &ctx.kube,
                        &recorded,
                        &running_status(&machine, message),
                        op.kind_status(),
                    )
                    .await?;
                    Ok(Action::requeue(pause))
                }
            }
        }
        Decision::Carry {
            plan:
                Plan::CallOnce {
                    to,
                    call,
                    message,
                    accepted,
                },
            ..
        } => {
            let before = machine.clone();
            if let Err(e) = machine.transition_to(to, now) {
                let message = format!(
                    "the operator tried an illegal step ({e}); this is a bug in the operator, please report it"
                );
                return finish(op, ctx, OpsPhase::Failed, message, None).await;
            }
            // Write-ahead: from here on the call counts as issued, whatever happens next.
            let recorded = write_status(
                &ctx.kube,
                op,
                &running_status(&machine, message.clone()),
                op.kind_status(),
            )
            .await?;
            left(ctx, op, steps, &before);
            tracing::info!(op = %op.name_any(), ?call, "issuing once");
            let result = steps.execute(op, target, &call, ctx).await;
            crash_point::<K>(op, before.state().name());
            match result {
                Ok(()) => {
                    record_answer(&ctx.kube, &recorded, &running_status(&machine, accepted))
                        .await?;
                    Ok(Action::requeue(requeue::NEXT_STEP))
                }
                Err(e) => {
                    let message = format!(
                        "{message}: the call failed ({e}); it is not repeated, since the control plane may have acted on it — look at the {} and create a new operation if it did not",
                        K::Target::kind(&())
                    );
                    finish(&recorded, ctx, OpsPhase::Failed, message, None).await
                }
            }
        }
        Decision::Carry {
            plan: Plan::Wait { message, event, .. },
            after,
        } => {
            if let Some(reason) = event
                && says_news(status.message.as_deref(), &message)
            {
                ctx.event(op, true, reason, message.clone()).await;
            }
            write_status(
                &ctx.kube,
                op,
                &running_status(&machine, message),
                op.kind_status(),
            )
            .await?;
            Ok(Action::requeue(after.max(Duration::from_millis(100))))
        }
    }
}

/// The kill point of a call decided in `step` (see [`crate::runtime::crash`]).
fn crash_point<K: OpsResource>(op: &K, step: &str) {
    crate::runtime::crash::point(&crate::runtime::crash::ops_point(
        &K::kind(&()),
        op.action_name(),
        step,
    ));
}

/// The step `machine` is at was left: how long it took, for the metrics.
fn left<K: OpsResource, S: Steps<K>>(
    ctx: &Context,
    op: &K,
    steps: &S,
    machine: &Machine<'static, K::Step>,
) {
    if let Some(entered) = super::step_entered(machine) {
        let step = machine.state();
        super::metrics::step_left(&ctx.metrics, op, step.name(), entered);
        let seconds = Timestamp::now()
            .duration_since(entered)
            .as_secs_f64()
            .max(0.0);
        steps.step_left(ctx, op, step, seconds);
    }
}

/// The terminal write, its metrics and event, then the lock's release.
async fn finish<K: OpsResource>(
    op: &K,
    ctx: &Context,
    phase: OpsPhase,
    message: String,
    kind_status: Option<K::Fields>,
) -> Result<Action, Error> {
    ctx.call_failures.clear(&op.uid().unwrap_or_default());
    let status = op.ops_status();
    let started_at = status.started_at.clone();
    let next = OpsStatus {
        phase,
        message: Some(message.clone()),
        completed_at: Some(Time(Timestamp::now())),
        ..status
    };
    write_status(
        &ctx.kube,
        op,
        &next,
        kind_status.unwrap_or_else(|| op.kind_status()),
    )
    .await?;
    let (warning, reason) = match phase {
        OpsPhase::Succeeded => (false, reason::SUCCEEDED),
        OpsPhase::Aborted => (true, reason::ABORTED),
        _ => (true, reason::FAILED),
    };
    super::metrics::finished(&ctx.metrics, op, phase, started_at.as_ref());
    ctx.event(op, warning, reason, message).await;
    release(&ctx.kube, op).await?;
    Ok(Action::await_change())
}

/// Writes the whole status (common fields and `kind`) when it differs from what is
/// stored; every write carries `observedGeneration`. Returns the operation as now stored.
///
/// The write is conditional on `op`'s resourceVersion: a decision taken from a stale view
/// (the watch had not yet delivered this controller's own last write) is refused with
/// 409 ([`Error::Stale`]) instead of overwriting the newer record. Without it, a pass
/// that read the write-ahead record of an expand call overwrote the record of its answer
/// and failed the operation as "stopped between the call and its answer".
pub async fn write_status<K: OpsResource>(
    kube: &kube::Client,
    op: &K,
    next: &OpsStatus,
    kind: K::Fields,
) -> Result<K, Error> {
    let stored = op.ops_status();
    let conditions = conditions::with_conditions(
        &stored.conditions,
        &conditions::ops_verdicts(next.phase, next.message.as_deref().unwrap_or_default()),
        op.meta().generation,
        &Time(Timestamp::now()),
    );
    let without_conditions = |s: &OpsStatus| OpsStatus {
        conditions: Vec::new(),
        ..s.clone()
    };
    if without_conditions(&stored) == without_conditions(next)
        && stored.conditions == conditions
        && op.kind_status() == kind
        && observed_generation(op) == op.meta().generation
    {
        return Ok(op.clone());
    }
    let status = StatusBody {
        fields: &kind,
        conditions: &conditions,
        phase: next.phase,
        step: &next.step,
        message: next.message.as_deref(),
        observed_generation: op.meta().generation,
        started_at: next.started_at.as_ref(),
        completed_at: next.completed_at.as_ref(),
    };
    apply_status(kube, op, K::MANAGER, &status, Guard::ResourceVersion).await
}

/// Records the answer to a call issued once. The answer is a fact of this pass, not a
/// decision from a view that may be stale: when the write-ahead record was changed since
/// (a spec edit such as `abort`), it is written again onto a fresh read of the same step.
async fn record_answer<K: OpsResource>(
    kube: &kube::Client,
    recorded: &K,
    next: &OpsStatus,
) -> Result<(), Error> {
    let api = Api::<K>::namespaced(kube.clone(), &recorded.namespace().unwrap_or_default());
    let mut current = recorded.clone();
    for _ in 0..5 {
        match write_status(kube, &current, next, recorded.kind_status()).await {
            Err(Error::Stale(_)) => {}
            other => return other.map(|_| ()),
        }
        current = api.get(&recorded.name_any()).await?;
        if current.ops_status().step != recorded.ops_status().step {
            // Another pass has moved on from this step: its record stands.
            return Ok(());
        }
    }
    Err(Error::Stale(recorded.name_any()))
}

/// The whole status an Ops kind's controller applies: the common fields and the kind's
/// own, each left out while unset (`observedGeneration` is always written).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusBody<'a, F> {
    #[serde(flatten)]
    fields: &'a F,
    #[serde(skip_serializing_if = "<[Condition]>::is_empty")]
    conditions: &'a [Condition],
    phase: OpsPhase,
    #[serde(skip_serializing_if = "StepSnapshot::is_empty")]
    step: &'a StepSnapshot,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    started_at: Option<&'a Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    completed_at: Option<&'a Time>,
}

fn observed_generation<K: OpsResource>(op: &K) -> Option<i64> {
    serde_json::to_value(op)
        .ok()
        .and_then(|v| v["status"]["observedGeneration"].as_i64())
}

/// Takes the target's lock with an optimistic-lock write: `false` when another writer got
/// there first (409).
pub async fn acquire<K: OpsResource>(
    kube: &kube::Client,
    op: &K,
    target: &K::Target,
) -> Result<bool, Error> {
    let patch = json!({
        "metadata": {"resourceVersion": target.meta().resource_version},
        "status": {LOCK_FIELD: op.name_any()},
    });
    let targets: Api<K::Target> =
        Api::namespaced(kube.clone(), &op.namespace().unwrap_or_default());
    let params = PatchParams {
        field_manager: Some(K::MANAGER.into()),
        ..PatchParams::default()
    };
    match targets
        .patch_status(op.target_name(), &params, &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Releases the lock if it still names `op`, on a fresh read, retried on conflict.
/// Idempotent: a missing target or another holder is success.
pub async fn release<K: OpsResource>(kube: &kube::Client, op: &K) -> Result<(), Error> {
    if !K::LOCKS_TARGET {
        return Ok(());
    }
    let targets: Api<K::Target> =
        Api::namespaced(kube.clone(), &op.namespace().unwrap_or_default());
    let me = op.name_any();
    let params = PatchParams {
        field_manager: Some(K::MANAGER.into()),
        ..PatchParams::default()
    };
    for _ in 0..5 {
        let Some(target) = targets.get_opt(op.target_name()).await? else {
            return Ok(());
        };
        if K::lock_holder(&target) != Some(me.as_str()) {
            return Ok(());
        }
        let patch = json!({
            "metadata": {"resourceVersion": target.meta().resource_version},
            "status": {LOCK_FIELD: null},
        });
        match targets
            .patch_status(op.target_name(), &params, &Patch::Merge(patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::LockContended(format!(
        "{} {}",
        K::Target::kind(&()),
        op.target_name()
    )))
}

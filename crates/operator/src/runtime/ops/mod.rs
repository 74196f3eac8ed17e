//! The runtime every `*Ops` kind shares: the phase machine (Pending → Running →
//! Succeeded/Failed/Aborted), the lock `status.activeOpsRef` on the target, queueing in
//! creation order, the six standard events, `spec.abort`, the finalizer, and the driver
//! that runs a kind's step graph.
//!
//! A kind plugs in twice:
//! - [`OpsResource`] says what its target is, where its common status fields are, and how
//!   to read the target's lock;
//! - [`Steps`] gives, per step, an observation (reads only), a pure [`Steps::plan`] over it
//!   (with the kind's own events) and the one call a plan may ask for.
//!
//! A kind without a lock ([`OpsResource::LOCKS_TARGET`] false) is its own target: it runs
//! at once, and its finalizer goes when it ends.
//!
//! The decisions are pure functions ([`gate`], [`queue_ahead`], [`running`]) tested without
//! an API server; [`runtime`] is the thin I/O around them.

pub mod metrics;
pub mod runtime;

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use simplyblock_api::common::OpsPhase;
use simplyblock_statemachine::{Machine, State, StepSnapshot};

use crate::runtime::context::Context;

pub use runtime::{Error, controller, reconcile, run};

/// The standard events of every Ops kind (a closed set; kinds add their own beside them).
pub mod reason {
    pub const QUEUED: &str = "OperationQueued";
    pub const STARTED: &str = "OperationStarted";
    pub const SUCCEEDED: &str = "OperationSucceeded";
    pub const FAILED: &str = "OperationFailed";
    pub const ABORTED: &str = "OperationAborted";
    pub const DEADLINE: &str = "StepDeadlineExceeded";
}

/// How often a queued operation looks again (the target's watch usually comes first).
pub const QUEUED_RECHECK: Duration = Duration::from_secs(10);
/// After a call failed: the step's deadline bounds the retries.
pub const CALL_RETRY: Duration = Duration::from_secs(3);
/// The longest pause before a failed call of a step is tried again, however many failed
/// before ([`call_retry`]).
pub const CALL_RETRY_CAP: Duration = Duration::from_secs(60);

/// The pause after the `failures`-th failed call in a row of one operation: a random part
/// (`draw` in `[0, 1)`) of [`CALL_RETRY`] doubled per earlier failure, at most
/// [`CALL_RETRY_CAP`]. A control plane that is down is not asked again and again at one
/// cadence by every operation, and operations that failed together do not retry together.
pub fn call_retry(failures: u32, draw: f64) -> Duration {
    simplyblock_controlplane::retry_delay(failures, CALL_RETRY, CALL_RETRY_CAP, draw)
        .max(CALL_RETRY_FLOOR)
}

/// The shortest pause before a failed call is tried again (a draw may come out near 0).
const CALL_RETRY_FLOOR: Duration = Duration::from_millis(250);

/// The failed calls in a row of each running operation, by uid. Kept in memory: after a
/// restart the pauses begin short again, which the step's deadline bounds all the same.
#[derive(Debug, Default)]
pub struct CallFailures(std::sync::Mutex<std::collections::HashMap<String, u32>>);

impl CallFailures {
    /// One more failed call of `op`; how many in a row now.
    pub fn failed(&self, op: &str) -> u32 {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = map.entry(op.to_owned()).or_default();
        *n = n.saturating_add(1);
        *n
    }

    /// A call of `op` went through, or `op` ended: the count starts over.
    pub fn clear(&self, op: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(op);
    }
}
/// The longest wait between two looks at a running step.
pub const POLL: Duration = Duration::from_secs(5);

/// The fields of `status` every Ops kind has, as the runtime reads and writes them.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct OpsStatus {
    pub phase: OpsPhase,
    pub step: StepSnapshot,
    pub message: Option<String>,
    pub started_at: Option<Time>,
    pub completed_at: Option<Time>,
}

/// An Ops kind: one operation on one target of kind [`OpsResource::Target`] in the same
/// namespace, whose lock is the target's `status.activeOpsRef`.
pub trait OpsResource:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    type Target: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static;

    /// `storage.simplyblock.io/<kind>-finalizer`.
    const FINALIZER: &'static str;
    /// The field manager of the kind's controller (its status writes and the lock).
    const MANAGER: &'static str;
    /// `simplyblock_<kind>_`, the prefix of the kind's metrics.
    const METRIC_PREFIX: &'static str;
    /// The metrics' label naming the target (`cluster`, `node`).
    const TARGET_LABEL: &'static str;
    /// Whether an operation takes its target's lock (`status.activeOpsRef`) and queues
    /// behind the others on it. A kind without a lock runs on its own, at once.
    const LOCKS_TARGET: bool = true;

    /// The name of the target in the operation's namespace.
    fn target_name(&self) -> &str;
    /// The action's name, for messages and metrics.
    fn action_name(&self) -> &'static str;
    /// `spec.abort`.
    fn abort_requested(&self) -> bool;
    /// The common status fields.
    fn ops_status(&self) -> OpsStatus;
    /// The kind's own status fields (camelCase keys), kept as they are by a write that does
    /// not change them.
    fn kind_status(&self) -> Map<String, Value>;
    /// Who holds the target's lock.
    fn lock_holder(target: &Self::Target) -> Option<&str>;
    /// The value of the metrics' target label; by default the target's name.
    fn metric_target(&self) -> String {
        self.target_name().to_owned()
    }
    /// The target, when a kind without a lock is its own (nothing is read).
    fn own_target(&self) -> Option<Self::Target> {
        None
    }
    /// The message of an unfinished operation that was deleted (it ends Aborted).
    fn deleted_message(&self) -> String {
        let at = self
            .ops_status()
            .step
            .state
            .map(|s| format!(" at step {s}"))
            .unwrap_or_default();
        format!("the operation was deleted{at}; it stopped where it was")
    }
}

/// A kind's own event, beside the standard ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// Why [`Steps::admission`] keeps an operation Pending: the event's reason and the
/// sentence a person reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub reason: &'static str,
    pub message: String,
}

/// A plan and the kind's own events that go with it (what an inspection found, why an
/// item was left out), decided from the same observation.
#[derive(Clone, Debug, PartialEq)]
pub struct Noted<S, C> {
    pub plan: Plan<S, C>,
    pub notes: Vec<Note>,
}

impl<S, C> From<Plan<S, C>> for Noted<S, C> {
    fn from(plan: Plan<S, C>) -> Self {
        Noted {
            plan,
            notes: Vec::new(),
        }
    }
}

/// What a kind's step asks for, decided from one observation.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan<S, C> {
    /// The step's outcome is there: move to `to` (a declared edge, or back to the initial
    /// step with [`Move::Restart`]).
    Advance {
        to: Move<S>,
        message: String,
        kind_status: Option<Map<String, Value>>,
    },
    /// Record kind fields (e.g. a list written once) without moving.
    Record {
        kind_status: Map<String, Value>,
        message: String,
    },
    /// Record kind fields that show the step progressing, and give the step its whole
    /// budget again from now (a long wait that keeps moving is not stuck).
    Progress {
        kind_status: Map<String, Value>,
        message: String,
    },
    /// The action reached what it asked for.
    Succeed {
        message: String,
        kind_status: Option<Map<String, Value>>,
    },
    /// The action cannot reach it; no retry.
    Fail(String),
    /// The outcome is not there and nothing has produced it yet: issue `call`.
    Call { call: C, message: String },
    /// A call that must never be issued twice and whose effect may not show at once: the
    /// move to `to` is written first (the record that the call is under way; `to` never
    /// calls again), then the call, then `accepted` as the message. A failed call ends the
    /// operation Failed: the control plane may have acted on it.
    CallOnce {
        to: S,
        call: C,
        message: String,
        accepted: String,
    },
    /// The outcome is not there yet but is on its way (or blocked): look again later.
    /// `event` is raised once, when the message first appears.
    Wait {
        message: String,
        after: Duration,
        event: Option<&'static str>,
    },
}

/// Where [`Plan::Advance`] goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Move<S> {
    To(S),
    /// Back to the initial step (a per-item loop starting its next item).
    Restart,
}

/// A kind's steps: reads, a pure plan, and the calls.
pub trait Steps<K: OpsResource>: Send + Sync + 'static {
    type Step: State + Send + Sync;
    type Obs: Send;
    type Call: Debug + Send;

    /// The operation's machine, restored from `status.step`; an error fails the operation
    /// without retry (an unknown action or step).
    fn machine(
        &self,
        op: &K,
        now: Timestamp,
    ) -> Result<Machine<'static, Self::Step>, simplyblock_statemachine::Error>;

    /// Everything the step's plan needs, read from the world. No writes.
    fn observe(
        &self,
        op: &K,
        target: &K::Target,
        machine: &Machine<'static, Self::Step>,
        ctx: &Context,
    ) -> impl Future<Output = Result<Self::Obs, Error>> + Send;

    /// What to do next, with the kind's own events that go with it ([`Noted`]; a plan
    /// without events converts into one). Pure. The runtime raises the events when it
    /// acts on the plan: a wait's only when its message is new, none when the deadline
    /// overrides the plan.
    fn plan(
        &self,
        op: &K,
        target: &K::Target,
        machine: &Machine<'static, Self::Step>,
        obs: &Self::Obs,
        now: Timestamp,
    ) -> Noted<Self::Step, Self::Call>;

    /// The message of an operation that failed because `step` outlived its deadline, when
    /// the kind can say more than the runtime's "step … exceeded its deadline". Default
    /// none.
    fn deadline_message(&self, _op: &K, _step: Self::Step) -> Option<String> {
        None
    }

    /// Issues one call; `Err` is the sentence a person reads.
    fn execute(
        &self,
        op: &K,
        target: &K::Target,
        call: &Self::Call,
        ctx: &Context,
    ) -> impl Future<Output = Result<(), String>> + Send;

    /// The kind's own admission rule, asked once before the lock is taken (a Pending
    /// operation facing a free lock and nothing ahead of it; an abort is never asked):
    /// `Some(hold)` keeps it Pending with the hold's message, its event raised when the
    /// message is new. Default: admitted.
    fn admission(
        &self,
        _op: &K,
        _target: &K::Target,
        _ctx: &Context,
    ) -> impl Future<Output = Result<Option<Hold>, Error>> + Send {
        async { Ok(None) }
    }

    /// The operation is deleted and terminal: `None` once what it created (and does not
    /// own) is gone, else why its finalizer stays (it asked them to stop, and looks
    /// again). Default: nothing to clean up.
    fn dependents_gone(
        &self,
        _op: &K,
        _ctx: &Context,
    ) -> impl Future<Output = Result<Option<String>, Error>> + Send {
        async { Ok(None) }
    }

    /// A kind-specific event raised when the operation succeeds (e.g. `TaskCanceled`).
    fn succeed_event(&self, _op: &K) -> Option<(&'static str, String)> {
        None
    }

    /// The operation left `step` after `seconds` in it: kind-specific metrics. Default none.
    fn step_left(&self, _ctx: &Context, _op: &K, _step: Self::Step, _seconds: f64) {}

    /// The kind's own status fields were written as `kind`: kind-specific gauges. Default
    /// none.
    fn kind_status_written(&self, _ctx: &Context, _op: &K, _kind: &Map<String, Value>) {}

    /// Kind-specific events beside the standard ones (e.g. `NodeRestarted`), raised when a
    /// plan advances. Default none.
    fn advance_event(
        &self,
        _op: &K,
        _from: Self::Step,
        _to: Move<Self::Step>,
    ) -> Option<(&'static str, String)> {
        None
    }
}

/// When the current step was entered: its deadline minus its budget (`None` for a step
/// without a deadline).
pub fn step_entered<S: State>(machine: &Machine<'_, S>) -> Option<Timestamp> {
    let budget = machine.graph().deadline(machine.state())?;
    machine.deadline()?.checked_sub(budget).ok()
}

/// What the runtime sees before the step machine runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation<'a> {
    pub phase: OpsPhase,
    pub abort: bool,
    /// `None`: the target does not exist. `Some(holder)`: it does, with that lock holder.
    pub target: Option<Option<&'a str>>,
    /// The first unfinished operation on the same target that comes before this one in
    /// creation order ([`queue_ahead`]).
    pub ahead: Option<&'a str>,
}

/// The runtime's decision before any step runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Terminal, and the lock still names this operation: release it.
    Release,
    /// Terminal and released: nothing to do.
    Idle,
    /// End in Aborted with this message (and release the lock if held).
    Abort(String),
    /// End in Failed with this message.
    Fail(String),
    /// Stay Pending with this message.
    Queue(String),
    /// Take the lock (optimistic write on the target), then start.
    Acquire,
    /// The lock is ours but the phase is still Pending: become Running.
    Start,
    /// Running with the lock: run the step machine.
    Run,
}

/// The phase and lock decision. Pure.
///
/// Pending holds no lock and has issued nothing, so an abort or a missing target ends it
/// at once; a Running operation whose target disappeared ends Aborted; the lock is taken
/// only when it is free and no earlier operation on the target is waiting.
pub fn gate(me: &str, target_kind: &str, target_name: &str, obs: &Observation<'_>) -> Gate {
    let holder = obs.target.flatten();
    if obs.phase.is_terminal() {
        return if holder == Some(me) {
            Gate::Release
        } else {
            Gate::Idle
        };
    }
    let Some(holder) = obs.target else {
        return match obs.phase {
            OpsPhase::Pending => Gate::Fail(format!(
                "{target_kind} {target_name} does not exist in this namespace; nothing was done — create the operation naming an existing {target_kind}"
            )),
            _ => Gate::Abort(format!(
                "{target_kind} {target_name} disappeared while the operation ran; it stopped where it was"
            )),
        };
    };
    match holder {
        Some(h) if h == me => {
            if obs.phase == OpsPhase::Pending {
                if obs.abort {
                    return Gate::Abort("aborted on request before it started".into());
                }
                Gate::Start
            } else {
                Gate::Run
            }
        }
        // Running without a lock (it was cleared by hand): take it back before going on.
        None if obs.phase == OpsPhase::Running => Gate::Acquire,
        _ if obs.phase == OpsPhase::Running => Gate::Abort(format!(
            "the lock on {target_kind} {target_name} no longer names this operation (it names {}); it stopped where it was",
            holder.unwrap_or("nothing")
        )),
        _ if obs.abort => Gate::Abort("aborted on request before it started".into()),
        Some(other) => Gate::Queue(format!(
            "queued: {target_kind} {target_name} is locked by operation {other}; this one starts when it ends"
        )),
        None => match obs.ahead {
            Some(first) => Gate::Queue(format!(
                "queued: operation {first} on {target_kind} {target_name} was created first and runs before this one"
            )),
            None => Gate::Acquire,
        },
    }
}

/// The first unfinished operation ahead of `me` in creation order (ties by name), among
/// `others` (creation time, name) — which may include `me` itself.
pub fn queue_ahead<'a>(
    me: (Option<Timestamp>, &str),
    others: impl IntoIterator<Item = (Option<Timestamp>, &'a str)>,
) -> Option<&'a str> {
    let key = |(t, n): (Option<Timestamp>, &str)| (t.unwrap_or(Timestamp::MAX), n.to_owned());
    let mine = key(me);
    others
        .into_iter()
        .filter(|&(t, n)| n != me.1 && key((t, n)) < mine)
        .min_by_key(|&o| key(o))
        .map(|(_, n)| n)
}

/// What the driver does with a plan.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision<S, C> {
    /// Finish in a terminal phase.
    Finish {
        phase: OpsPhase,
        message: String,
        kind_status: Option<Map<String, Value>>,
        deadline_exceeded: bool,
    },
    /// Carry out `plan` (never [`Plan::Succeed`] or [`Plan::Fail`], which finish), its
    /// message noted; a call or a wait looks again after `after`, within the deadline.
    Carry { plan: Plan<S, C>, after: Duration },
}

impl<S, C> Plan<S, C> {
    /// The plan with `note` before its message (a refused abort the person must see).
    fn noted(mut self, note: Option<&str>) -> Plan<S, C> {
        if let Some(note) = note {
            match &mut self {
                Plan::Advance { message, .. }
                | Plan::Record { message, .. }
                | Plan::Progress { message, .. }
                | Plan::Succeed { message, .. }
                | Plan::Fail(message)
                | Plan::Call { message, .. }
                | Plan::CallOnce { message, .. }
                | Plan::Wait { message, .. } => *message = format!("{note} — {message}"),
            }
        }
        self
    }
}

/// The abort rule before a step runs: `Ok(None)` no abort asked, `Ok(Some(message))` abort
/// now, `Err(message)` refused on this step (the operation keeps running and says so).
pub fn abort_check<S: State>(
    abort: bool,
    machine: &Machine<'_, S>,
) -> Result<Option<String>, String> {
    if !abort {
        return Ok(None);
    }
    match machine.check_abort() {
        Ok(()) => Ok(Some(format!(
            "aborted on request at step {}",
            machine.state().name()
        ))),
        Err(e) => Err(format!("spec.abort is refused: {e}")),
    }
}

/// Turns a plan into what the driver does: the deadline applies to steps that still wait
/// or call, a refused abort prefixes every message, and waits never exceed the deadline.
/// Pure.
pub fn running<S: State, C>(
    machine: &Machine<'_, S>,
    plan: Plan<S, C>,
    refused_abort: Option<&str>,
    now: Timestamp,
) -> Decision<S, C> {
    let budget = |after: Duration| match machine.requeue_after(now) {
        Some(left) => after.min(left),
        None => after,
    };
    match plan {
        Plan::Succeed {
            message,
            kind_status,
        } => Decision::Finish {
            phase: OpsPhase::Succeeded,
            message,
            kind_status,
            deadline_exceeded: false,
        },
        Plan::Fail(message) => Decision::Finish {
            phase: OpsPhase::Failed,
            message,
            kind_status: None,
            deadline_exceeded: false,
        },
        Plan::Call { message, .. }
        | Plan::CallOnce { message, .. }
        | Plan::Wait { message, .. }
            if machine.timed_out(now) =>
        {
            Decision::Finish {
                phase: OpsPhase::Failed,
                message: format!(
                    "step {} exceeded its deadline{}: {message}",
                    machine.state().name(),
                    machine
                        .deadline()
                        .map(|d| format!(" ({d})"))
                        .unwrap_or_default()
                ),
                kind_status: None,
                deadline_exceeded: true,
            }
        }
        plan => {
            let after = match &plan {
                Plan::Wait { after, .. } => budget(*after),
                Plan::Call { .. } => budget(POLL),
                _ => Duration::ZERO,
            };
            Decision::Carry {
                plan: plan.noted(refused_abort),
                after,
            }
        }
    }
}

#[cfg(test)]
mod tests;

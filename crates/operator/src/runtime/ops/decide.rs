//! The runtime's pure decisions, tested without an API server: the phase and lock gate
//! ([`gate`], [`queue_ahead`]), the abort rule, what a plan comes to ([`running`]), and the
//! pause before a failed call is tried again.

use std::fmt::Debug;
use std::time::Duration;

use jiff::Timestamp;
use simplyblock_api::common::OpsPhase;
use simplyblock_statemachine::{Machine, State};

use super::kind::*;

/// How often a queued operation looks again (the target's watch usually comes first).
pub const QUEUED_RECHECK: Duration = Duration::from_secs(10);
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
pub enum Decision<S, C, F> {
    /// Finish in a terminal phase.
    Finish {
        phase: OpsPhase,
        message: String,
        kind_status: Option<F>,
        deadline_exceeded: bool,
    },
    /// Carry out `plan` (never [`Plan::Succeed`] or [`Plan::Fail`], which finish), its
    /// message noted; a call or a wait looks again after `after`, within the deadline.
    Carry {
        plan: Plan<S, C, F>,
        after: Duration,
    },
}

impl<S, C, F> Plan<S, C, F> {
    /// The plan with `note` before its message (a refused abort the person must see).
    fn noted(mut self, note: Option<&str>) -> Plan<S, C, F> {
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
pub fn running<S: State, C, F>(
    machine: &Machine<'_, S>,
    plan: Plan<S, C, F>,
    refused_abort: Option<&str>,
    now: Timestamp,
) -> Decision<S, C, F> {
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

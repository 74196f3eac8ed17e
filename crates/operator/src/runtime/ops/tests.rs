//! The phase, lock, queue, abort and deadline decisions, without an API server.

use std::time::Duration;

use jiff::Timestamp;
use simplyblock_api::common::OpsPhase;
use simplyblock_statemachine::{Graph, GraphDef, Machine, StateDef};

use super::*;

simplyblock_statemachine::state_enum! {
    enum S { Requesting, Awaiting }
}

fn graph() -> Graph<S> {
    Graph::new(GraphDef::new(
        S::Requesting,
        &[
            StateDef::new(S::Requesting)
                .to(&[S::Awaiting])
                .abortable()
                .deadline(Duration::from_secs(120)),
            StateDef::new(S::Awaiting).deadline(Duration::from_secs(1800)),
        ],
    ))
    .expect("graph")
}

fn ts(s: i64) -> Timestamp {
    Timestamp::from_second(s).expect("ts")
}

fn obs<'a>(
    phase: OpsPhase,
    target: Option<Option<&'a str>>,
    ahead: Option<&'a str>,
) -> Observation<'a> {
    Observation {
        phase,
        abort: false,
        target,
        ahead,
    }
}

fn g(o: &Observation<'_>) -> Gate {
    gate("op-b", "StorageCluster", "sb", o)
}

#[test]
fn a_free_lock_is_taken_only_by_the_head_of_the_queue() {
    assert_eq!(g(&obs(OpsPhase::Pending, Some(None), None)), Gate::Acquire);
    let Gate::Queue(m) = g(&obs(OpsPhase::Pending, Some(None), Some("op-a"))) else {
        panic!("queued");
    };
    assert!(
        m.contains("operation op-a on StorageCluster sb was created first"),
        "{m}"
    );
}

#[test]
fn a_held_lock_queues_and_names_the_holder() {
    let Gate::Queue(m) = g(&obs(OpsPhase::Pending, Some(Some("op-a")), None)) else {
        panic!("queued");
    };
    assert!(m.contains("locked by operation op-a"), "{m}");
}

#[test]
fn holding_the_lock_starts_then_runs() {
    assert_eq!(
        g(&obs(OpsPhase::Pending, Some(Some("op-b")), None)),
        Gate::Start
    );
    assert_eq!(
        g(&obs(OpsPhase::Running, Some(Some("op-b")), None)),
        Gate::Run
    );
    // Cleared by hand while running: taken back.
    assert_eq!(g(&obs(OpsPhase::Running, Some(None), None)), Gate::Acquire);
    assert!(matches!(
        g(&obs(OpsPhase::Running, Some(Some("op-x")), None)),
        Gate::Abort(_)
    ));
}

#[test]
fn terminal_releases_only_its_own_lock() {
    for phase in [OpsPhase::Succeeded, OpsPhase::Failed, OpsPhase::Aborted] {
        assert_eq!(g(&obs(phase, Some(Some("op-b")), None)), Gate::Release);
        assert_eq!(g(&obs(phase, Some(Some("op-a")), None)), Gate::Idle);
        assert_eq!(g(&obs(phase, None, None)), Gate::Idle);
    }
}

#[test]
fn a_missing_target_fails_a_pending_op_and_aborts_a_running_one() {
    assert!(matches!(
        g(&obs(OpsPhase::Pending, None, None)),
        Gate::Fail(_)
    ));
    let Gate::Abort(m) = g(&obs(OpsPhase::Running, None, None)) else {
        panic!("aborted");
    };
    assert!(m.contains("disappeared"), "{m}");
}

#[test]
fn abort_before_the_start_needs_no_lock() {
    let mut o = obs(OpsPhase::Pending, Some(Some("op-a")), None);
    o.abort = true;
    assert!(matches!(g(&o), Gate::Abort(_)));
    o.target = Some(Some("op-b"));
    assert!(matches!(g(&o), Gate::Abort(_)));
}

#[test]
fn the_queue_is_creation_order_with_ties_by_name() {
    let all = [
        (Some(ts(10)), "c"),
        (Some(ts(5)), "z"),
        (Some(ts(10)), "a"),
        (Some(ts(20)), "b"),
    ];
    assert_eq!(queue_ahead((Some(ts(5)), "z"), all), None);
    assert_eq!(queue_ahead((Some(ts(10)), "a"), all), Some("z"));
    assert_eq!(queue_ahead((Some(ts(10)), "c"), all), Some("z"));
    assert_eq!(
        queue_ahead((Some(ts(10)), "c"), [(Some(ts(10)), "a")]),
        Some("a")
    );
    assert_eq!(
        queue_ahead((Some(ts(10)), "a"), [(Some(ts(10)), "c")]),
        None
    );
    assert_eq!(queue_ahead((Some(ts(20)), "b"), []), None);
}

#[test]
fn abort_is_honoured_on_abortable_steps_and_refused_elsewhere() {
    let gr = graph();
    let mut m = Machine::start(&gr, ts(0));
    assert_eq!(abort_check(false, &m), Ok(None));
    assert!(matches!(abort_check(true, &m), Ok(Some(_))));
    m.transition_to(S::Awaiting, ts(1)).expect("edge");
    let refused = abort_check(true, &m).expect_err("refused");
    assert!(refused.starts_with("spec.abort is refused"), "{refused}");
    assert!(refused.contains("Awaiting"), "{refused}");
}

#[test]
fn a_late_step_fails_unless_its_outcome_is_there() {
    let gr = graph();
    let m = Machine::start(&gr, ts(0));
    let late = ts(500);
    let wait: Plan<S, (), ()> = Plan::Wait {
        message: "waiting".into(),
        after: Duration::from_secs(1),
        event: None,
    };
    let Decision::Finish {
        phase,
        message,
        deadline_exceeded,
        ..
    } = running(&m, wait.clone(), None, late)
    else {
        panic!("finished");
    };
    assert_eq!((phase, deadline_exceeded), (OpsPhase::Failed, true));
    assert!(
        message.contains("step Requesting exceeded its deadline"),
        "{message}"
    );
    assert!(matches!(
        running(
            &m,
            Plan::<S, (), ()>::Call {
                call: (),
                message: "x".into()
            },
            None,
            late
        ),
        Decision::Finish { .. }
    ));
    // The outcome is there: advance even when late.
    let advance: Plan<S, (), ()> = Plan::Advance {
        to: Move::To(S::Awaiting),
        message: "done".into(),
        kind_status: None,
    };
    assert!(matches!(
        running(&m, advance, None, late),
        Decision::Carry {
            plan: Plan::Advance { .. },
            ..
        }
    ));
    // In time: waits are capped by the deadline.
    let Decision::Carry {
        plan: Plan::Wait { .. },
        after,
    } = running(
        &m,
        Plan::<S, (), ()>::Wait {
            message: "w".into(),
            after: Duration::from_secs(600),
            event: None,
        },
        None,
        ts(100),
    )
    else {
        panic!("wait");
    };
    assert_eq!(after, Duration::from_secs(20));
}

#[test]
fn a_refused_abort_stays_in_the_message() {
    let gr = graph();
    let m = Machine::start(&gr, ts(0));
    let Decision::Carry {
        plan: Plan::Wait { message, .. },
        ..
    } = running(
        &m,
        Plan::<S, (), ()>::Wait {
            message: "waiting".into(),
            after: Duration::from_secs(1),
            event: None,
        },
        Some("spec.abort is refused: no"),
        ts(1),
    )
    else {
        panic!("wait");
    };
    assert_eq!(message, "spec.abort is refused: no — waiting");
}

#[test]
fn a_call_issued_once_is_late_like_any_call_and_otherwise_keeps_its_record() {
    let gr = graph();
    let m = Machine::start(&gr, ts(0));
    let once = || Plan::<S, (), ()>::CallOnce {
        to: S::Awaiting,
        call: (),
        message: "calling".into(),
        accepted: "accepted".into(),
    };
    assert!(matches!(
        running(&m, once(), None, ts(500)),
        Decision::Finish {
            deadline_exceeded: true,
            ..
        }
    ));
    assert_eq!(
        running(&m, once(), Some("refused"), ts(1)),
        Decision::Carry {
            plan: Plan::CallOnce {
                to: S::Awaiting,
                call: (),
                message: "refused — calling".into(),
                accepted: "accepted".into(),
            },
            after: Duration::ZERO,
        }
    );
}

#[test]
fn a_step_was_entered_its_budget_before_its_deadline() {
    let gr = graph();
    let mut m = Machine::start(&gr, ts(10));
    assert_eq!(step_entered(&m), Some(ts(10)));
    m.transition_to(S::Awaiting, ts(70)).expect("edge");
    assert_eq!(step_entered(&m), Some(ts(70)));
}

#[test]
fn progress_is_carried_even_when_late_and_restarts_the_steps_budget() {
    let gr = graph();
    let mut m = Machine::start(&gr, ts(0));
    let progress: Plan<S, (), ()> = Plan::Progress {
        kind_status: (),
        message: "one more volume moved".into(),
    };
    // Progress is news, not a wait: it is written even past the deadline.
    assert!(matches!(
        running(&m, progress, None, ts(500)),
        Decision::Carry {
            plan: Plan::Progress { .. },
            ..
        }
    ));
    // What the runtime does with it: the budget counts from the progress.
    m.extend_deadline(ts(500));
    assert!(!m.timed_out(ts(600)));
    assert_eq!(m.deadline(), Some(ts(620)));
}

#[test]
fn a_failed_call_waits_longer_each_time_in_a_row_at_random_and_at_most_a_minute() {
    for failures in 1..=12u32 {
        let ceiling = CALL_RETRY
            .saturating_mul(1 << (failures - 1).min(20))
            .min(CALL_RETRY_CAP);
        assert_eq!(call_retry(failures, 0.0), Duration::from_millis(250));
        let longest = call_retry(failures, 0.999_999);
        assert!(longest <= ceiling, "{failures}: {longest:?} > {ceiling:?}");
        assert!(longest + Duration::from_millis(1) >= ceiling.mul_f64(0.999_999));
        let middle = call_retry(failures, 0.5);
        assert!(middle < longest || ceiling <= Duration::from_millis(500));
    }
    assert_eq!(call_retry(1, 0.5), Duration::from_millis(1500));
    assert_eq!(call_retry(3, 0.5), Duration::from_secs(6));
    assert_eq!(call_retry(u32::MAX, 1.0), CALL_RETRY_CAP);
}

#[test]
fn failures_are_counted_per_operation_and_start_over_once_a_call_goes_through() {
    let failures = CallFailures::default();
    assert_eq!(failures.failed("a"), 1);
    assert_eq!(failures.failed("a"), 2);
    assert_eq!(failures.failed("b"), 1);
    failures.clear("a");
    assert_eq!(failures.failed("a"), 1);
    assert_eq!(failures.failed("b"), 2);
}

//! The StorageClusterOps step graphs (inv-cluster.md §3) as a fixture: declared the way the
//! api crate declares them, and checked against the reference's CEL list, deadlines and
//! abortable table.

use std::sync::LazyLock;
use std::time::Duration;

use jiff::Timestamp;
use proptest::prelude::*;
use simplyblock_statemachine::testing::{assert_step_list_matches, assert_step_schema_matches};
use simplyblock_statemachine::{
    Error, GraphDef, Machine, MultiGraph, State, StateDef, StepSnapshot, action_enum, state_enum,
};

state_enum! {
    /// Every step of every StorageClusterOps action.
    pub enum Step {
        Requesting,
        Awaiting,
        ShuttingDown,
        Starting,
        CheckingPeers,
        ShuttingDownNode,
        RefreshingPod,
        AwaitingPod,
        RestartingNode,
        Rebalancing,
    }
}

action_enum! {
    pub enum ScopsAction { Activate, Expand, Shutdown, Start, Restart, RollingRestart, CancelTask }
}

use Step::*;

const fn minutes(n: u64) -> Duration {
    Duration::from_secs(n * 60)
}

/// Activate, Expand, Shutdown, Start, CancelTask: issue one call, then wait for its outcome.
const REQUEST: GraphDef<Step> = GraphDef::new(
    Requesting,
    &[
        StateDef::new(Requesting)
            .to(&[Awaiting])
            .abortable()
            .deadline(minutes(2)),
        StateDef::new(Awaiting).deadline(minutes(30)),
    ],
);

/// The control plane has no restart call: shut down, then start.
const RESTART: GraphDef<Step> = GraphDef::new(
    ShuttingDown,
    &[
        StateDef::new(ShuttingDown)
            .to(&[Starting])
            .deadline(minutes(30)),
        StateDef::new(Starting).deadline(minutes(30)),
    ],
);

/// One node per lap. Rebalancing declares its edge back to CheckingPeers instead of using
/// `Machine::reset`, so the loop is part of the graph (and checked); the operation ends when
/// `nodeIndex == len(nodes)`, which is the controller's predicate, not a terminal step.
const ROLLING_RESTART: GraphDef<Step> = GraphDef::new(
    CheckingPeers,
    &[
        StateDef::new(CheckingPeers)
            .to(&[ShuttingDownNode])
            .abortable()
            .deadline(minutes(120)),
        // RefreshingPod only when spec.rollingRestart.refreshSNodeAPI.
        StateDef::new(ShuttingDownNode)
            .to(&[RefreshingPod, RestartingNode])
            .deadline(minutes(30)),
        StateDef::new(RefreshingPod)
            .to(&[AwaitingPod])
            .deadline(minutes(10)),
        StateDef::new(AwaitingPod)
            .to(&[RestartingNode])
            .deadline(minutes(10)),
        StateDef::new(RestartingNode)
            .to(&[Rebalancing])
            .deadline(minutes(45)),
        StateDef::new(Rebalancing)
            .to(&[CheckingPeers])
            .abortable()
            .deadline(minutes(240)),
    ],
);

static SCOPS: LazyLock<MultiGraph<ScopsAction, Step>> = LazyLock::new(|| {
    use ScopsAction::*;
    MultiGraph::new(&[
        (Activate, REQUEST),
        (Expand, REQUEST),
        (Shutdown, REQUEST),
        (Start, REQUEST),
        (CancelTask, REQUEST),
        (Restart, RESTART),
        (RollingRestart, ROLLING_RESTART),
    ])
    .expect("StorageClusterOps step graphs are valid")
});

/// The CEL list of `status.step` in the reference CRD.
const CRD_STEPS: &[&str] = &[
    "Requesting",
    "Awaiting",
    "ShuttingDown",
    "Starting",
    "CheckingPeers",
    "ShuttingDownNode",
    "RefreshingPod",
    "AwaitingPod",
    "RestartingNode",
    "Rebalancing",
];

fn at(text: &str) -> Timestamp {
    text.parse().expect("valid timestamp")
}

fn after(start: Timestamp, duration: Duration) -> Timestamp {
    start.checked_add(duration).expect("in range")
}

#[test]
fn every_action_has_a_graph() {
    assert_eq!(SCOPS.actions(), ScopsAction::ALL);
}

#[test]
fn declared_steps_agree_with_the_crd() {
    assert_step_list_matches(&SCOPS.declared_state_names(), CRD_STEPS);
    // Enum order is the reference CRD's order, so a generated list reads the same.
    assert_eq!(SCOPS.declared_state_names(), CRD_STEPS);
    // No enum value is dead.
    assert_eq!(SCOPS.declared_states(), Step::ALL);
    let schema = StepSnapshot::schema_for_steps(&SCOPS.declared_state_names()).to_value();
    assert_step_schema_matches(CRD_STEPS, &schema);
}

#[test]
fn unabortable_table_is_the_reference_table() {
    assert_eq!(
        SCOPS.unabortable_states(),
        [
            Awaiting,
            ShuttingDown,
            Starting,
            ShuttingDownNode,
            RefreshingPod,
            AwaitingPod,
            RestartingNode
        ]
    );
}

#[test]
fn initial_steps_carry_their_deadlines() {
    // The Go controller kept an `initialDeadlines` table because its library dropped these.
    let now = at("2026-05-01T12:00:00Z");
    for (action, budget) in [
        (ScopsAction::Activate, minutes(2)),
        (ScopsAction::Expand, minutes(2)),
        (ScopsAction::Shutdown, minutes(2)),
        (ScopsAction::Start, minutes(2)),
        (ScopsAction::CancelTask, minutes(2)),
        (ScopsAction::Restart, minutes(30)),
        (ScopsAction::RollingRestart, minutes(120)),
    ] {
        let machine = SCOPS.start(action, now).expect("declared action");
        assert_eq!(machine.deadline(), Some(after(now, budget)), "{action}");
        let restored = SCOPS
            .restore(action, &StepSnapshot::default(), now)
            .expect("declared action");
        assert_eq!(restored, machine, "{action}");
    }
}

#[test]
fn rolling_restart_over_two_nodes() {
    let mut now = at("2026-05-01T12:00:00Z");
    let mut machine = SCOPS
        .start(ScopsAction::RollingRestart, now)
        .expect("declared action");
    let laps: [&[(Step, Duration)]; 2] = [
        // refreshSNodeAPI: true
        &[
            (ShuttingDownNode, minutes(30)),
            (RefreshingPod, minutes(10)),
            (AwaitingPod, minutes(10)),
            (RestartingNode, minutes(45)),
            (Rebalancing, minutes(240)),
            (CheckingPeers, minutes(120)),
        ],
        // refreshSNodeAPI: false
        &[
            (ShuttingDownNode, minutes(30)),
            (RestartingNode, minutes(45)),
            (Rebalancing, minutes(240)),
        ],
    ];
    for lap in laps {
        for &(step, budget) in lap {
            now = after(now, Duration::from_secs(7));
            machine.transition_to(step, now).expect("declared edge");
            assert_eq!(machine.state(), step);
            assert_eq!(machine.deadline(), Some(after(now, budget)), "{step}");
        }
    }
    // After the last node the controller finishes the phase; the step stays Rebalancing.
    assert!(machine.can_abort());
    assert!(!machine.is_terminal());
    assert_eq!(machine.allowed_transitions(), [CheckingPeers]);
}

#[test]
fn rolling_restart_cannot_skip_the_node_shutdown() {
    let now = at("2026-05-01T12:00:00Z");
    let mut machine = SCOPS
        .start(ScopsAction::RollingRestart, now)
        .expect("declared action");
    let err = machine
        .transition_to(RestartingNode, now)
        .expect_err("no edge");
    assert_eq!(
        err,
        Error::IllegalTransition {
            from: "CheckingPeers",
            to: "RestartingNode",
            allowed: vec!["ShuttingDownNode"],
            action: Some("RollingRestart"),
        }
    );
    assert_eq!(machine.state(), CheckingPeers);
}

#[test]
fn delete_guard_reads_the_stored_step_of_the_action() {
    let now = at("2026-05-01T12:00:00Z");
    let stored: StepSnapshot =
        serde_json::from_str(r#"{"state":"ShuttingDownNode","deadline":"2026-05-01T12:30:00Z"}"#)
            .expect("valid status.step");
    let machine = SCOPS
        .restore(ScopsAction::RollingRestart, &stored, now)
        .expect("declared step");
    assert_eq!(
        machine
            .check_abort()
            .expect_err("not abortable")
            .to_string(),
        "step \"ShuttingDownNode\" of action RollingRestart cannot be aborted: it is waiting \
         for the outcome of a call it issued; the operation keeps running; set spec.abort \
         again or delete it once it reaches one of CheckingPeers, Rebalancing"
    );
    // A pending op (no step yet) is at the initial step, which for Restart is unabortable.
    let pending = SCOPS
        .restore(ScopsAction::Restart, &StepSnapshot::default(), now)
        .expect("declared action");
    assert_eq!(
        pending.check_abort(),
        Err(Error::NotAbortable {
            state: "ShuttingDown",
            abortable: vec![],
            action: Some("Restart"),
        })
    );
}

#[test]
fn a_step_of_another_action_is_unknown() {
    let stored = StepSnapshot {
        state: Some("Requesting".into()),
        deadline: None,
    };
    let err = SCOPS
        .restore(
            ScopsAction::RollingRestart,
            &stored,
            at("2026-05-01T12:00:00Z"),
        )
        .expect_err("not declared for RollingRestart");
    assert_eq!(
        err.to_string(),
        "step \"Requesting\" is not declared for action RollingRestart; the stored \
         status.step was written by another version of the operator or edited by hand, so \
         the operation cannot resume — it fails; create a new operation to try again"
    );
}

#[test]
fn a_step_past_its_deadline_restores_timed_out() {
    let stored: StepSnapshot =
        serde_json::from_str(r#"{"state":"Awaiting","deadline":"2026-05-01T12:30:00Z"}"#)
            .expect("valid status.step");
    let machine = SCOPS
        .restore(ScopsAction::Activate, &stored, at("2026-05-01T13:00:00Z"))
        .expect("declared step");
    assert!(machine.timed_out(at("2026-05-01T13:00:00Z")));
    assert_eq!(machine.requeue_after(at("2026-05-01T13:00:00Z")), None);
}

#[test]
fn stored_snapshot_text_matches_metav1_time() {
    let now = at("2026-05-01T12:00:00.250Z");
    let machine = SCOPS
        .start(ScopsAction::Activate, now)
        .expect("declared action");
    assert_eq!(
        serde_json::to_string(&machine.snapshot()).expect("serializes"),
        r#"{"state":"Requesting","deadline":"2026-05-01T12:02:01Z"}"#
    );
}

// --- properties over the real graphs ---

#[derive(Clone, Debug)]
enum Move {
    /// Take one of the allowed edges (index modulo their number).
    Allowed(prop::sample::Index),
    /// Try any step, allowed or not.
    Any(prop::sample::Index),
    Reset,
    Extend,
}

fn moves() -> impl Strategy<Value = Vec<(Move, u64)>> {
    let one = prop_oneof![
        4 => any::<prop::sample::Index>().prop_map(Move::Allowed),
        4 => any::<prop::sample::Index>().prop_map(Move::Any),
        1 => Just(Move::Reset),
        1 => Just(Move::Extend),
    ];
    prop::collection::vec((one, 0u64..20_000), 0..60)
}

fn ceil_second(ts: Timestamp) -> Timestamp {
    if ts.subsec_nanosecond() > 0 {
        Timestamp::from_second(ts.as_second() + 1).expect("in range")
    } else {
        ts
    }
}

fn expected_deadline(machine: &Machine<'_, Step>, step: Step, now: Timestamp) -> Option<Timestamp> {
    machine
        .graph()
        .deadline(step)
        .map(|budget| ceil_second(after(now, budget)))
}

fn start_time() -> impl Strategy<Value = Timestamp> {
    (1_700_000_000i64..1_900_000_000, 0i32..1_000_000_000)
        .prop_map(|(s, ns)| Timestamp::new(s, ns).expect("in range"))
}

proptest! {
    #[test]
    fn random_walks_stay_in_the_graph(
        action in prop::sample::select(ScopsAction::ALL),
        start in start_time(),
        walk in moves(),
    ) {
        let graph = SCOPS.graph(action).expect("declared action");
        let mut now = start;
        let mut machine = Machine::start(graph, now);
        for (step, dt) in walk {
            now = after(now, Duration::from_millis(dt * 37));
            match step {
                Move::Allowed(index) => {
                    let allowed = machine.allowed_transitions();
                    if allowed.is_empty() {
                        prop_assert!(machine.is_terminal());
                        continue;
                    }
                    let next = allowed[index.index(allowed.len())];
                    prop_assert!(machine.transition_to(next, now).is_ok());
                    prop_assert_eq!(machine.state(), next);
                    prop_assert_eq!(machine.deadline(), expected_deadline(&machine, next, now));
                }
                Move::Any(index) => {
                    let next = Step::ALL[index.index(Step::ALL.len())];
                    let before = machine.clone();
                    let legal = graph.allows(machine.state(), next);
                    prop_assert_eq!(machine.can_transition_to(next), legal);
                    match machine.transition_to(next, now) {
                        Ok(()) => {
                            prop_assert!(legal);
                            prop_assert_eq!(machine.state(), next);
                        }
                        Err(err) => {
                            prop_assert!(!legal);
                            let is_illegal = matches!(err, Error::IllegalTransition { .. });
                            prop_assert!(is_illegal);
                            prop_assert_eq!(&machine, &before);
                        }
                    }
                }
                Move::Reset => {
                    machine.reset(now);
                    prop_assert_eq!(machine.state(), graph.initial());
                    prop_assert_eq!(machine.deadline(), expected_deadline(&machine, graph.initial(), now));
                }
                Move::Extend => {
                    machine.extend_deadline(now);
                    prop_assert_eq!(machine.deadline(), expected_deadline(&machine, machine.state(), now));
                }
            }
            prop_assert!(graph.declares(machine.state()));
            prop_assert_eq!(machine.deadline().is_some(), graph.deadline(machine.state()).is_some());
            prop_assert_eq!(machine.can_abort(), graph.is_abortable(machine.state()));
            prop_assert_eq!(machine.timed_out(now), machine.requeue_after(now).is_none() && machine.deadline().is_some());
            // What the controller stores resumes to the same machine, at any later time.
            let text = serde_json::to_string(&machine.snapshot()).expect("serializes");
            let stored: StepSnapshot = serde_json::from_str(&text).expect("deserializes");
            let later = after(now, Duration::from_secs(dt));
            prop_assert_eq!(&Machine::restore(graph, &stored, later).expect("declared"), &machine);
        }
    }

    #[test]
    fn snapshots_round_trip_through_json(
        step in prop::sample::select(Step::ALL),
        deadline in prop::option::of((-1_000_000_000i64..4_000_000_000, 0i32..1_000_000_000)),
        empty_state in any::<bool>(),
    ) {
        let snapshot = StepSnapshot {
            state: (!empty_state).then(|| step.name().to_owned()),
            deadline: deadline.map(|(s, ns)| Timestamp::new(s, ns).expect("in range")),
        };
        let text = serde_json::to_string(&snapshot).expect("serializes");
        let back: StepSnapshot = serde_json::from_str(&text).expect("deserializes");
        prop_assert_eq!(back, snapshot);
    }
}

#[test]
fn unabortable_union_agrees_with_every_action() {
    let union = SCOPS.unabortable_states();
    for state in &union {
        assert!(
            SCOPS
                .iter()
                .any(|(_, graph)| graph.declares(*state) && !graph.is_abortable(*state)),
            "{state} is reported but abortable wherever it is declared"
        );
    }
    for (action, graph) in SCOPS.iter() {
        for state in graph.unabortable_states() {
            assert!(
                union.contains(&state),
                "{state} is unabortable in {action} but not reported"
            );
        }
    }
}

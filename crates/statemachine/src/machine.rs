//! A position in a graph, with the current step's deadline.

use std::fmt;
use std::time::Duration;

use jiff::{RoundMode, Timestamp, TimestampRound, Unit};

use crate::{Error, Graph, State, StepSnapshot};

/// The current step of one operation (or multi-step reconcile) in its graph, and when that
/// step's time budget runs out.
///
/// Invariants, whatever sequence of calls: the current step is declared by the graph, and
/// the machine has a deadline exactly when the graph gives the current step one. Calls that
/// fail leave the machine unchanged.
///
/// A machine lives for one reconcile: restore it from `status.step`, move it, write
/// [`snapshot`](Machine::snapshot) back before issuing the step's side effect.
#[derive(Clone, PartialEq, Eq)]
pub struct Machine<'g, S> {
    graph: &'g Graph<S>,
    state: S,
    deadline: Option<Timestamp>,
}

impl<'g, S: State> Machine<'g, S> {
    /// A machine at the graph's initial step, with the initial step's deadline armed from
    /// `now` (the initial step's budget counts like any other's).
    pub fn start(graph: &'g Graph<S>, now: Timestamp) -> Self {
        let initial = graph.initial();
        Self {
            graph,
            state: initial,
            deadline: deadline_from(graph, initial, now),
        }
    }

    /// Resumes from a stored `status.step`.
    ///
    /// - No state (absent or empty): the operation has not started its first step yet, so
    ///   this is [`start`](Machine::start) — the initial step with its deadline armed from
    ///   `now`; a stored deadline without a state means nothing and is dropped.
    /// - A state the graph does not declare: [`Error::UnknownState`]. The controller fails
    ///   the operation without retrying.
    /// - A declared state: the stored deadline is kept as it is, even when it is already
    ///   past, so the machine reports [`timed_out`](Machine::timed_out). The graph decides
    ///   whether the step has a deadline at all: if it has one and none was stored (written
    ///   by a version without it), the deadline is armed from `now`; if it has none, a
    ///   stored one is dropped.
    ///
    /// The result may differ from `snapshot`; write it back when it does.
    pub fn restore(
        graph: &'g Graph<S>,
        snapshot: &StepSnapshot,
        now: Timestamp,
    ) -> Result<Self, Error> {
        let name = match snapshot.state.as_deref() {
            None | Some("") => return Ok(Self::start(graph, now)),
            Some(name) => name,
        };
        let state = S::from_name(name)
            .filter(|&state| graph.declares(state))
            .ok_or_else(|| Error::UnknownState {
                state: name.to_owned(),
                action: graph.action(),
            })?;
        let deadline = match graph.deadline(state) {
            None => None,
            Some(_) => snapshot
                .deadline
                .or_else(|| deadline_from(graph, state, now)),
        };
        Ok(Self {
            graph,
            state,
            deadline,
        })
    }

    /// What to store in `status.step`.
    pub fn snapshot(&self) -> StepSnapshot {
        StepSnapshot {
            state: Some(self.state.name().to_owned()),
            deadline: self.deadline,
        }
    }

    /// The graph the machine moves in.
    pub fn graph(&self) -> &'g Graph<S> {
        self.graph
    }

    /// The current step.
    pub fn state(&self) -> S {
        self.state
    }

    /// When the current step's budget runs out, if it has one.
    pub fn deadline(&self) -> Option<Timestamp> {
        self.deadline
    }

    /// Moves along the edge to `next` and arms `next`'s deadline from `now`. A self-edge
    /// re-enters the step, so its deadline starts over.
    ///
    /// Fails with [`Error::IllegalTransition`] when the graph has no such edge (including
    /// when `next` is not declared at all); the machine is then unchanged.
    pub fn transition_to(&mut self, next: S, now: Timestamp) -> Result<(), Error> {
        if !self.graph.allows(self.state, next) {
            return Err(Error::IllegalTransition {
                from: self.state.name(),
                to: next.name(),
                allowed: self
                    .allowed_transitions()
                    .iter()
                    .map(|s| s.name())
                    .collect(),
                action: self.graph.action(),
            });
        }
        self.enter(next, now);
        Ok(())
    }

    /// Whether [`transition_to`](Machine::transition_to) would accept `next`.
    pub fn can_transition_to(&self, next: S) -> bool {
        self.graph.allows(self.state, next)
    }

    /// Back to the initial step, deadline armed from `now`, from any step. This is not an
    /// edge of the graph: it is for starting a workflow over, e.g. a per-item loop that
    /// does not declare its back edge.
    pub fn reset(&mut self, now: Timestamp) {
        self.enter(self.graph.initial(), now);
    }

    /// Restarts the current step's budget from `now`, without leaving the step: for a step
    /// that is still making progress (e.g. another node came back) and deserves more time.
    /// No effect on a step without a deadline.
    pub fn extend_deadline(&mut self, now: Timestamp) {
        self.deadline = deadline_from(self.graph, self.state, now);
    }

    fn enter(&mut self, state: S, now: Timestamp) {
        self.state = state;
        self.deadline = deadline_from(self.graph, state, now);
    }

    /// Whether the current step's deadline has been reached (at the deadline itself counts).
    pub fn timed_out(&self, now: Timestamp) -> bool {
        self.deadline.is_some_and(|deadline| deadline <= now)
    }

    /// How long until the current step times out: the requeue a controller asks for while it
    /// waits. `None` when the step has no deadline or has already timed out.
    pub fn requeue_after(&self, now: Timestamp) -> Option<Duration> {
        let deadline = self.deadline?;
        if deadline <= now {
            return None;
        }
        Duration::try_from(now.duration_until(deadline)).ok()
    }

    /// Whether the current step accepts an abort.
    pub fn can_abort(&self) -> bool {
        self.graph.is_abortable(self.state)
    }

    /// [`can_abort`](Machine::can_abort) as a `Result` whose error tells the user where an
    /// abort becomes possible; for an admission denial or an event.
    pub fn check_abort(&self) -> Result<(), Error> {
        if self.can_abort() {
            return Ok(());
        }
        Err(Error::NotAbortable {
            state: self.state.name(),
            abortable: self
                .graph
                .abortable_states()
                .into_iter()
                .map(S::name)
                .collect(),
            action: self.graph.action(),
        })
    }

    /// Whether the current step has no outgoing edges.
    pub fn is_terminal(&self) -> bool {
        self.graph.is_terminal(self.state)
    }

    /// The steps the machine may move to, in declaration order.
    pub fn allowed_transitions(&self) -> &'g [S] {
        self.graph.targets(self.state)
    }
}

// The graph is static data; printing it with every machine would bury the state.
impl<S: State> fmt::Debug for Machine<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Machine")
            .field("action", &self.graph.action())
            .field("state", &self.state)
            .field("deadline", &self.deadline)
            .finish()
    }
}

/// `now` plus the budget of `state`, rounded up to whole seconds.
///
/// `status.step.deadline` is shown to people and read by tools that expect a
/// `metav1.Time`, which has second precision; rounding up keeps the stored text short and
/// never shortens a budget. A budget past the end of time saturates to `Timestamp::MAX`.
fn deadline_from<S: State>(graph: &Graph<S>, state: S, now: Timestamp) -> Option<Timestamp> {
    let budget = graph.deadline(state)?;
    let exact = now.checked_add(budget).unwrap_or(Timestamp::MAX);
    let round = TimestampRound::new()
        .smallest(Unit::Second)
        .mode(RoundMode::Ceil);
    Some(exact.round(round).unwrap_or(exact))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GraphDef, StateDef};

    crate::state_enum! {
        enum S { A, B, C, Undeclared }
    }

    const MIN: Duration = Duration::from_secs(60);

    fn graph() -> Graph<S> {
        Graph::new(GraphDef::new(
            S::A,
            &[
                StateDef::new(S::A).to(&[S::B]).abortable().deadline(MIN),
                StateDef::new(S::B).to(&[S::B, S::C]).deadline(10 * MIN),
                StateDef::new(S::C),
            ],
        ))
        .expect("valid")
    }

    fn ts(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).expect("in range")
    }

    #[test]
    fn start_arms_the_initial_deadline() {
        // Regression: the Go library never ran the initial state's hook, so its deadline
        // was lost and every controller kept a table of initial deadlines.
        let g = graph();
        let m = Machine::start(&g, ts(1000));
        assert_eq!(m.state(), S::A);
        assert_eq!(m.deadline(), Some(ts(1060)));
        assert_eq!(m.graph(), &g);
    }

    #[test]
    fn transition_follows_edges_and_arms_the_next_deadline() {
        let g = graph();
        let mut m = Machine::start(&g, ts(0));
        assert_eq!(m.transition_to(S::B, ts(30)), Ok(()));
        assert_eq!((m.state(), m.deadline()), (S::B, Some(ts(630))));
        // Self-edge: same step, budget starts over.
        assert_eq!(m.transition_to(S::B, ts(100)), Ok(()));
        assert_eq!((m.state(), m.deadline()), (S::B, Some(ts(700))));
        assert_eq!(m.transition_to(S::C, ts(200)), Ok(()));
        assert_eq!((m.state(), m.deadline()), (S::C, None));
        assert!(m.is_terminal());
    }

    #[test]
    fn an_edge_not_in_the_graph_is_refused_and_changes_nothing() {
        let g = graph();
        let mut m = Machine::start(&g, ts(0));
        let before = m.clone();
        assert_eq!(
            m.transition_to(S::C, ts(5)),
            Err(Error::IllegalTransition {
                from: "A",
                to: "C",
                allowed: vec!["B"],
                action: None
            })
        );
        // A self-edge must be declared to be taken.
        assert!(m.transition_to(S::A, ts(5)).is_err());
        assert_eq!(m, before);
    }

    #[test]
    fn an_undeclared_target_is_an_illegal_transition() {
        let g = graph();
        let mut m = Machine::start(&g, ts(0));
        assert_eq!(
            m.transition_to(S::Undeclared, ts(5)),
            Err(Error::IllegalTransition {
                from: "A",
                to: "Undeclared",
                allowed: vec!["B"],
                action: None
            })
        );
        assert!(!m.can_transition_to(S::Undeclared));
        assert_eq!(m.state(), S::A);
    }

    #[test]
    fn reset_returns_to_initial_from_anywhere_and_rearms() {
        let g = graph();
        let mut m = Machine::start(&g, ts(0));
        m.transition_to(S::B, ts(1)).expect("edge");
        m.transition_to(S::C, ts(2)).expect("edge");
        m.reset(ts(500));
        assert_eq!((m.state(), m.deadline()), (S::A, Some(ts(560))));
    }

    #[test]
    fn timed_out_at_and_after_the_deadline() {
        let g = graph();
        let m = Machine::start(&g, ts(0));
        assert!(!m.timed_out(ts(59)));
        assert!(m.timed_out(ts(60)));
        assert!(m.timed_out(ts(61)));
    }

    #[test]
    fn requeue_after_counts_down_to_the_deadline() {
        let g = graph();
        let m = Machine::start(&g, ts(0));
        assert_eq!(m.requeue_after(ts(0)), Some(MIN));
        assert_eq!(m.requeue_after(ts(45)), Some(Duration::from_secs(15)));
        assert_eq!(m.requeue_after(ts(60)), None);
        assert_eq!(m.requeue_after(ts(3600)), None);
    }

    #[test]
    fn no_deadline_never_times_out() {
        let g = graph();
        let mut m = Machine::start(&g, ts(0));
        m.transition_to(S::B, ts(0)).expect("edge");
        m.transition_to(S::C, ts(0)).expect("edge");
        assert!(!m.timed_out(Timestamp::MAX));
        assert_eq!(m.requeue_after(ts(0)), None);
    }

    #[test]
    fn deadlines_round_up_to_whole_seconds() {
        let g = graph();
        let now = ts(100)
            .checked_add(Duration::from_millis(1))
            .expect("in range");
        let m = Machine::start(&g, now);
        assert_eq!(m.deadline(), Some(ts(161)));
        // Already whole: unchanged.
        assert_eq!(Machine::start(&g, ts(100)).deadline(), Some(ts(160)));
    }

    #[test]
    fn a_deadline_past_the_end_of_time_saturates() {
        let g = Graph::new(GraphDef::new(
            S::A,
            &[StateDef::new(S::A).deadline(Duration::MAX)],
        ))
        .expect("valid");
        let m = Machine::start(&g, ts(0));
        assert_eq!(m.deadline(), Some(Timestamp::MAX));
        assert!(!m.timed_out(ts(0)));
    }

    #[test]
    fn extend_deadline_restarts_the_budget_in_place() {
        let g = graph();
        let mut m = Machine::start(&g, ts(0));
        m.extend_deadline(ts(50));
        assert_eq!((m.state(), m.deadline()), (S::A, Some(ts(110))));
        m.transition_to(S::B, ts(60)).expect("edge");
        m.transition_to(S::C, ts(60)).expect("edge");
        m.extend_deadline(ts(70));
        assert_eq!(m.deadline(), None);
    }

    #[test]
    fn abortable_follows_the_current_step() {
        let g = graph();
        let mut m = Machine::start(&g, ts(0));
        assert!(m.can_abort());
        assert_eq!(m.check_abort(), Ok(()));
        m.transition_to(S::B, ts(0)).expect("edge");
        assert!(!m.can_abort());
        assert_eq!(
            m.check_abort(),
            Err(Error::NotAbortable {
                state: "B",
                abortable: vec!["A"],
                action: None
            })
        );
    }

    #[test]
    fn allowed_transitions_and_terminal() {
        let g = graph();
        let mut m = Machine::start(&g, ts(0));
        assert_eq!(m.allowed_transitions(), &[S::B]);
        assert!(!m.is_terminal());
        m.transition_to(S::B, ts(0)).expect("edge");
        assert_eq!(m.allowed_transitions(), &[S::B, S::C]);
        assert!(m.can_transition_to(S::C));
        assert!(!m.can_transition_to(S::A));
    }

    fn snap(state: Option<&str>, deadline: Option<Timestamp>) -> StepSnapshot {
        StepSnapshot {
            state: state.map(str::to_owned),
            deadline,
        }
    }

    #[test]
    fn restore_without_a_state_starts_and_drops_the_stored_deadline() {
        let g = graph();
        for stored in [
            snap(None, None),
            snap(Some(""), Some(ts(5))),
            snap(None, Some(ts(5))),
        ] {
            let m = Machine::restore(&g, &stored, ts(1000)).expect("restores");
            assert_eq!(m, Machine::start(&g, ts(1000)), "from {stored:?}");
        }
    }

    #[test]
    fn restore_keeps_a_declared_state_and_its_deadline() {
        let g = graph();
        let m = Machine::restore(&g, &snap(Some("B"), Some(ts(900))), ts(100)).expect("restores");
        assert_eq!((m.state(), m.deadline()), (S::B, Some(ts(900))));
        assert_eq!(m.snapshot(), snap(Some("B"), Some(ts(900))));
    }

    #[test]
    fn restore_with_a_past_deadline_is_timed_out() {
        let g = graph();
        let m = Machine::restore(&g, &snap(Some("B"), Some(ts(50))), ts(100)).expect("restores");
        assert!(m.timed_out(ts(100)));
        assert_eq!(m.requeue_after(ts(100)), None);
    }

    #[test]
    fn restore_lets_the_graph_decide_whether_there_is_a_deadline() {
        let g = graph();
        // B has a budget but none was stored: armed from now.
        let m = Machine::restore(&g, &snap(Some("B"), None), ts(100)).expect("restores");
        assert_eq!(m.deadline(), Some(ts(700)));
        // C has no budget: a stored deadline is dropped.
        let m = Machine::restore(&g, &snap(Some("C"), Some(ts(5))), ts(100)).expect("restores");
        assert_eq!(m.deadline(), None);
    }

    #[test]
    fn restore_refuses_a_step_the_graph_does_not_declare() {
        let g = graph();
        for name in ["Undeclared", "Nonsense", "b"] {
            assert_eq!(
                Machine::restore(&g, &snap(Some(name), None), ts(0)),
                Err(Error::UnknownState {
                    state: name.to_owned(),
                    action: None
                })
            );
        }
    }

    #[test]
    fn debug_omits_the_graph() {
        let g = graph();
        let m = Machine::start(&g, ts(0));
        let text = format!("{m:?}");
        assert!(
            text.starts_with("Machine { action: None, state: A, deadline: Some("),
            "{text}"
        );
    }
}

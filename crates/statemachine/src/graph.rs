//! Declarations ([`StateDef`], [`GraphDef`]) and the validated graphs built from them
//! ([`Graph`], [`MultiGraph`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use crate::{Action, Error, Machine, State, StepSnapshot};

/// The definition of one step: where it may go next, whether it may be aborted, and how
/// long it may take.
///
/// Built with `const` methods so a whole graph can be plain `const`/`static` data:
///
/// ```
/// # use std::time::Duration;
/// # use simplyblock_statemachine::StateDef;
/// # simplyblock_statemachine::state_enum! { pub enum Step { Requesting, Awaiting } }
/// const REQUESTING: StateDef<Step> = StateDef::new(Step::Requesting)
///     .to(&[Step::Awaiting])
///     .abortable()
///     .deadline(Duration::from_secs(2 * 60));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateDef<'a, S> {
    state: S,
    to: &'a [S],
    abortable: bool,
    deadline: Option<Duration>,
}

impl<'a, S: Copy> StateDef<'a, S> {
    /// A terminal, unabortable step without a deadline.
    pub const fn new(state: S) -> Self {
        Self {
            state,
            to: &[],
            abortable: false,
            deadline: None,
        }
    }

    /// The steps this one may move to. Empty (the default) makes the step terminal; listing
    /// the step itself allows re-entering it, which re-arms its deadline.
    pub const fn to(self, to: &'a [S]) -> Self {
        Self { to, ..self }
    }

    /// Accept an abort (and a DELETE of the operation) while in this step. Only steps that
    /// have no call in flight whose outcome must be awaited should be abortable.
    pub const fn abortable(self) -> Self {
        Self {
            abortable: true,
            ..self
        }
    }

    /// The time budget of the step, counted from the moment it is entered.
    pub const fn deadline(self, deadline: Duration) -> Self {
        Self {
            deadline: Some(deadline),
            ..self
        }
    }
}

/// The declaration of one step graph: its initial step and the definition of every step.
/// Plain data; [`Graph::new`] or [`MultiGraph::new`] validates it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphDef<'a, S> {
    initial: S,
    states: &'a [StateDef<'a, S>],
}

impl<'a, S: Copy> GraphDef<'a, S> {
    /// Declares a graph starting at `initial`.
    pub const fn new(initial: S, states: &'a [StateDef<'a, S>]) -> Self {
        Self { initial, states }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Node<S> {
    to: Vec<S>,
    abortable: bool,
    deadline: Option<Duration>,
}

/// A validated step graph: every edge ends at a declared step, every step is reachable
/// from the initial one, no step is declared twice, and no deadline is zero.
///
/// Queries about steps the graph does not declare answer as for a terminal, unabortable
/// step without a deadline; use [`declares`](Graph::declares) to tell the two apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Graph<S> {
    initial: S,
    nodes: BTreeMap<S, Node<S>>,
    // Set when the graph belongs to a MultiGraph, so errors can name the action.
    action: Option<&'static str>,
}

impl<S: State> Graph<S> {
    /// Validates `def` into a graph.
    pub fn new(def: GraphDef<'_, S>) -> Result<Self, Error> {
        Self::build(def, None)
    }

    fn build(def: GraphDef<'_, S>, action: Option<&'static str>) -> Result<Self, Error> {
        let mut nodes = BTreeMap::new();
        for state_def in def.states {
            if state_def.deadline == Some(Duration::ZERO) {
                return Err(Error::ZeroDeadline {
                    state: state_def.state.name(),
                    action,
                });
            }
            let mut to = Vec::with_capacity(state_def.to.len());
            for &target in state_def.to {
                if !to.contains(&target) {
                    to.push(target);
                }
            }
            let node = Node {
                to,
                abortable: state_def.abortable,
                deadline: state_def.deadline,
            };
            if nodes.insert(state_def.state, node).is_some() {
                return Err(Error::DuplicateState {
                    state: state_def.state.name(),
                    action,
                });
            }
        }
        if !nodes.contains_key(&def.initial) {
            return Err(Error::InitialNotDeclared {
                initial: def.initial.name(),
                action,
            });
        }
        for (&from, node) in &nodes {
            if let Some(&to) = node.to.iter().find(|to| !nodes.contains_key(to)) {
                return Err(Error::UndeclaredTarget {
                    from: from.name(),
                    to: to.name(),
                    action,
                });
            }
        }
        let graph = Self {
            initial: def.initial,
            nodes,
            action,
        };
        let reachable = graph.reachable();
        if let Some(&state) = graph.nodes.keys().find(|state| !reachable.contains(state)) {
            return Err(Error::Unreachable {
                state: state.name(),
                initial: graph.initial.name(),
                action,
            });
        }
        Ok(graph)
    }

    fn reachable(&self) -> BTreeSet<S> {
        let mut seen = BTreeSet::from([self.initial]);
        let mut todo = vec![self.initial];
        while let Some(state) = todo.pop() {
            for &next in self.targets(state) {
                if seen.insert(next) {
                    todo.push(next);
                }
            }
        }
        seen
    }

    /// Where every machine over this graph starts, and where [`Machine::reset`] returns.
    pub fn initial(&self) -> S {
        self.initial
    }

    /// The action this graph belongs to, when it is part of a [`MultiGraph`].
    pub fn action(&self) -> Option<&'static str> {
        self.action
    }

    /// Whether `state` is a step of this graph.
    pub fn declares(&self, state: S) -> bool {
        self.nodes.contains_key(&state)
    }

    /// The steps `state` may move to, in declaration order.
    pub fn targets(&self, state: S) -> &[S] {
        self.nodes.get(&state).map_or(&[], |node| &node.to)
    }

    /// Whether `state` has no outgoing edges.
    pub fn is_terminal(&self, state: S) -> bool {
        self.targets(state).is_empty()
    }

    /// Whether an abort is accepted in `state`.
    pub fn is_abortable(&self, state: S) -> bool {
        self.nodes.get(&state).is_some_and(|node| node.abortable)
    }

    /// The time budget of `state`, if it has one.
    pub fn deadline(&self, state: S) -> Option<Duration> {
        self.nodes.get(&state).and_then(|node| node.deadline)
    }

    /// Whether the edge `from → to` exists.
    pub fn allows(&self, from: S, to: S) -> bool {
        self.targets(from).contains(&to)
    }

    /// Every declared step, sorted.
    pub fn declared_states(&self) -> Vec<S> {
        self.nodes.keys().copied().collect()
    }

    /// The wire names of [`declared_states`](Graph::declared_states), in the same order.
    pub fn declared_state_names(&self) -> Vec<&'static str> {
        names(self.nodes.keys().copied())
    }

    /// The declared steps that refuse an abort, sorted. A DELETE guard refuses from these.
    pub fn unabortable_states(&self) -> Vec<S> {
        self.states_where(|node| !node.abortable)
    }

    /// The declared steps that accept an abort, sorted.
    pub fn abortable_states(&self) -> Vec<S> {
        self.states_where(|node| node.abortable)
    }

    fn states_where(&self, keep: impl Fn(&Node<S>) -> bool) -> Vec<S> {
        self.nodes
            .iter()
            .filter(|(_, node)| keep(node))
            .map(|(&state, _)| state)
            .collect()
    }

    /// A machine at the initial step, with the initial step's deadline armed from `now`.
    pub fn start(&self, now: Timestamp) -> Machine<'_, S> {
        Machine::start(self, now)
    }

    /// A machine resumed from a stored `status.step`; see [`Machine::restore`].
    pub fn restore(
        &self,
        snapshot: &StepSnapshot,
        now: Timestamp,
    ) -> Result<Machine<'_, S>, Error> {
        Machine::restore(self, snapshot, now)
    }
}

/// One step graph per action, for an Ops kind: `spec.action` picks the graph.
///
/// Every graph is validated when the multi-graph is built, so a broken graph for a rarely
/// used action fails the first test that touches the kind, not the first operation that
/// uses the action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiGraph<A, S> {
    graphs: BTreeMap<A, Graph<S>>,
}

impl<A: Action, S: State> MultiGraph<A, S> {
    /// Validates every graph. When several are broken, the error is about the first one in
    /// action order, so it is the same on every run.
    pub fn new(defs: &[(A, GraphDef<'_, S>)]) -> Result<Self, Error> {
        let mut sorted: Vec<_> = defs.iter().collect();
        sorted.sort_by_key(|(action, _)| *action);
        let mut graphs = BTreeMap::new();
        for &&(action, def) in &sorted {
            if graphs.contains_key(&action) {
                return Err(Error::DuplicateAction {
                    action: action.name(),
                });
            }
            graphs.insert(action, Graph::build(def, Some(action.name()))?);
        }
        Ok(Self { graphs })
    }

    /// The same graphs with every deadline multiplied by `factor` (e.g. 0.01 to make a test
    /// meet a deadline in seconds); a deadline that would round to zero becomes a
    /// millisecond, so no step times out as it is entered. A factor that is not a positive
    /// finite number leaves the deadlines as they are.
    pub fn scaled(&self, factor: f64) -> Self {
        let mut graphs = self.graphs.clone();
        if factor.is_finite() && factor > 0.0 {
            for graph in graphs.values_mut() {
                for node in graph.nodes.values_mut() {
                    node.deadline = node
                        .deadline
                        .map(|d| d.mul_f64(factor).max(Duration::from_millis(1)));
                }
            }
        }
        Self { graphs }
    }

    /// [`MultiGraph::scaled`] made once per graph and factor for the life of the process,
    /// and shared: a controller restarted with the same factor reads the same graphs. A
    /// factor of 1 is `self`. Meant for the deadline-shortened runs of tests (a handful of
    /// factors); each distinct factor keeps its copy for good.
    pub fn scaled_static(&'static self, factor: f64) -> &'static Self
    where
        A: Send + Sync + 'static,
        S: Send + Sync + 'static,
    {
        use std::any::Any;
        use std::sync::{LazyLock, Mutex};
        if factor == 1.0 {
            return self;
        }
        // Statics are shared by every instantiation of a generic function: the copies are
        // kept as `Any`, keyed by the graphs' address and the factor.
        type Copies = BTreeMap<(usize, u64), &'static (dyn Any + Send + Sync)>;
        static COPIES: LazyLock<Mutex<Copies>> = LazyLock::new(Mutex::default);
        let key = (self as *const Self as usize, factor.to_bits());
        let mut copies = COPIES.lock().unwrap_or_else(|e| e.into_inner());
        let copy = *copies
            .entry(key)
            .or_insert_with(|| Box::leak(Box::new(self.scaled(factor))));
        copy.downcast_ref::<Self>()
            .expect("a copy is keyed by the address of the graphs it was made from")
    }

    /// The graph of `action`.
    pub fn graph(&self, action: A) -> Result<&Graph<S>, Error> {
        self.graphs.get(&action).ok_or(Error::UnknownAction {
            action: action.name(),
        })
    }

    /// The actions that have a graph, sorted.
    pub fn actions(&self) -> Vec<A> {
        self.graphs.keys().copied().collect()
    }

    /// Every `(action, graph)` pair, sorted by action.
    pub fn iter(&self) -> impl Iterator<Item = (A, &Graph<S>)> {
        self.graphs.iter().map(|(&action, graph)| (action, graph))
    }

    /// A machine at the initial step of `action`'s graph; see [`Machine::start`].
    pub fn start(&self, action: A, now: Timestamp) -> Result<Machine<'_, S>, Error> {
        Ok(Machine::start(self.graph(action)?, now))
    }

    /// A machine for `action` resumed from a stored `status.step`; see [`Machine::restore`].
    pub fn restore(
        &self,
        action: A,
        snapshot: &StepSnapshot,
        now: Timestamp,
    ) -> Result<Machine<'_, S>, Error> {
        Machine::restore(self.graph(action)?, snapshot, now)
    }

    /// Every step declared by any action's graph, sorted and deduplicated: the list the
    /// CRD's step enum and its CEL rule must equal.
    pub fn declared_states(&self) -> Vec<S> {
        self.union(Graph::declared_states)
    }

    /// The wire names of [`declared_states`](MultiGraph::declared_states), same order.
    pub fn declared_state_names(&self) -> Vec<&'static str> {
        names(self.declared_states())
    }

    /// Every step that is unabortable in at least one action, sorted and deduplicated.
    ///
    /// This is the conservative table for a DELETE guard that does not look at the action.
    /// A guard that knows the action should ask that action's graph (or a restored
    /// machine's [`can_abort`](Machine::can_abort)) instead, which is exact.
    pub fn unabortable_states(&self) -> Vec<S> {
        self.union(Graph::unabortable_states)
    }

    fn union(&self, states: impl Fn(&Graph<S>) -> Vec<S>) -> Vec<S> {
        let all: BTreeSet<S> = self.graphs.values().flat_map(states).collect();
        all.into_iter().collect()
    }
}

fn names<S: State>(states: impl IntoIterator<Item = S>) -> Vec<&'static str> {
    states.into_iter().map(S::name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::state_enum! {
        enum S { A, B, C, D }
    }

    const MIN: Duration = Duration::from_secs(60);

    fn graph(initial: S, defs: &[StateDef<'_, S>]) -> Result<Graph<S>, Error> {
        Graph::new(GraphDef::new(initial, defs))
    }

    #[test]
    fn state_def_defaults_to_terminal_unabortable_without_deadline() {
        let g = graph(S::A, &[StateDef::new(S::A)]).expect("valid");
        assert!(g.is_terminal(S::A));
        assert!(!g.is_abortable(S::A));
        assert_eq!(g.deadline(S::A), None);
        assert_eq!(g.targets(S::A), &[] as &[S]);
    }

    #[test]
    fn queries_answer_from_the_declaration() {
        let g = graph(
            S::A,
            &[
                StateDef::new(S::A)
                    .to(&[S::C, S::B, S::C])
                    .abortable()
                    .deadline(MIN),
                StateDef::new(S::B).to(&[S::B]),
                StateDef::new(S::C),
            ],
        )
        .expect("valid");
        assert_eq!(g.initial(), S::A);
        assert_eq!(g.action(), None);
        // Declaration order kept, duplicates dropped.
        assert_eq!(g.targets(S::A), &[S::C, S::B]);
        assert!(g.allows(S::A, S::B));
        assert!(g.allows(S::B, S::B));
        assert!(!g.allows(S::B, S::A));
        assert!(g.is_terminal(S::C));
        assert!(!g.is_terminal(S::B));
        assert_eq!(g.deadline(S::A), Some(MIN));
        assert_eq!(g.declared_states(), vec![S::A, S::B, S::C]);
        assert_eq!(g.declared_state_names(), vec!["A", "B", "C"]);
        assert_eq!(g.unabortable_states(), vec![S::B, S::C]);
        assert_eq!(g.abortable_states(), vec![S::A]);
        assert!(g.declares(S::C));
        assert!(!g.declares(S::D));
        // Undeclared steps answer as terminal, unabortable, no deadline.
        assert!(g.is_terminal(S::D) && !g.is_abortable(S::D) && g.deadline(S::D).is_none());
    }

    #[test]
    fn initial_must_be_declared() {
        assert_eq!(
            graph(S::D, &[StateDef::new(S::A)]),
            Err(Error::InitialNotDeclared {
                initial: "D",
                action: None
            })
        );
    }

    #[test]
    fn edge_targets_must_be_declared() {
        assert_eq!(
            graph(
                S::A,
                &[StateDef::new(S::A).to(&[S::B, S::C]), StateDef::new(S::B)]
            ),
            Err(Error::UndeclaredTarget {
                from: "A",
                to: "C",
                action: None
            })
        );
    }

    #[test]
    fn a_state_is_declared_once() {
        assert_eq!(
            graph(
                S::A,
                &[StateDef::new(S::A), StateDef::new(S::A).abortable()]
            ),
            Err(Error::DuplicateState {
                state: "A",
                action: None
            })
        );
    }

    #[test]
    fn every_state_is_reachable_from_initial() {
        assert_eq!(
            graph(
                S::A,
                &[StateDef::new(S::A), StateDef::new(S::B).to(&[S::A])]
            ),
            Err(Error::Unreachable {
                state: "B",
                initial: "A",
                action: None
            })
        );
    }

    #[test]
    fn a_zero_deadline_is_refused() {
        assert_eq!(
            graph(S::A, &[StateDef::new(S::A).deadline(Duration::ZERO)]),
            Err(Error::ZeroDeadline {
                state: "A",
                action: None
            })
        );
    }

    // Graphs are meant to be `const` data; this would not compile if the builders were not
    // const fns.
    const TWO: GraphDef<'static, S> = GraphDef::new(
        S::A,
        &[
            StateDef::new(S::A).to(&[S::B]).abortable().deadline(MIN),
            StateDef::new(S::B),
        ],
    );
    const ONE: GraphDef<'static, S> = GraphDef::new(S::C, &[StateDef::new(S::C).to(&[S::C])]);

    #[test]
    fn multi_graph_validates_every_graph_and_names_the_action() {
        const BROKEN: GraphDef<'static, S> =
            GraphDef::new(S::A, &[StateDef::new(S::A).to(&[S::D])]);
        assert_eq!(
            MultiGraph::new(&[("Zeta", BROKEN), ("Alpha", TWO), ("Beta", BROKEN)]),
            Err(Error::UndeclaredTarget {
                from: "A",
                to: "D",
                action: Some("Beta")
            })
        );
    }

    #[test]
    fn multi_graph_refuses_a_duplicate_action() {
        assert_eq!(
            MultiGraph::new(&[("One", ONE), ("Two", TWO), ("One", ONE)]),
            Err(Error::DuplicateAction { action: "One" })
        );
    }

    #[test]
    fn multi_graph_lookups() {
        let mg = MultiGraph::new(&[("Two", TWO), ("One", ONE)]).expect("valid");
        assert_eq!(mg.actions(), vec!["One", "Two"]);
        assert_eq!(mg.graph("Two").map(Graph::initial), Ok(S::A));
        assert_eq!(mg.graph("Two").map(Graph::action), Ok(Some("Two")));
        assert_eq!(
            mg.graph("Three").err(),
            Some(Error::UnknownAction { action: "Three" })
        );
        assert_eq!(
            mg.start("Three", Timestamp::UNIX_EPOCH).err(),
            Some(Error::UnknownAction { action: "Three" })
        );
        assert_eq!(mg.declared_states(), vec![S::A, S::B, S::C]);
        assert_eq!(mg.declared_state_names(), vec!["A", "B", "C"]);
        assert_eq!(mg.unabortable_states(), vec![S::B, S::C]);
        assert_eq!(mg.iter().count(), 2);
    }

    #[test]
    fn multi_graph_unabortable_is_a_union() {
        // A is abortable in one action and not in the other: reported.
        const STRICT: GraphDef<'static, S> = GraphDef::new(S::A, &[StateDef::new(S::A)]);
        let mg = MultiGraph::new(&[("Lax", TWO), ("Strict", STRICT)]).expect("valid");
        assert_eq!(mg.unabortable_states(), vec![S::A, S::B]);
    }

    #[test]
    fn a_scaled_multi_graph_changes_only_the_deadlines() {
        let mg = MultiGraph::new(&[("Two", TWO), ("One", ONE)]).expect("valid");
        let fast = mg.scaled(0.01);
        let two = fast.graph("Two").expect("Two");
        assert_eq!(two.deadline(S::A), Some(Duration::from_millis(600)));
        assert_eq!(two.deadline(S::B), None);
        assert!(two.allows(S::A, S::B) && two.is_abortable(S::A));
        assert_eq!(fast.declared_states(), mg.declared_states());
        // Never zero, and a nonsense factor changes nothing.
        let tiny = mg.scaled(1e-12);
        assert_eq!(
            tiny.graph("Two").expect("Two").deadline(S::A),
            Some(Duration::from_millis(1))
        );
        assert_eq!(mg.scaled(0.0), mg);
        assert_eq!(mg.scaled(f64::NAN), mg);
        assert_eq!(mg.scaled(1.0), mg);
    }

    #[test]
    fn a_static_scaled_copy_is_made_once_per_graphs_and_factor() {
        static MG: std::sync::LazyLock<MultiGraph<&'static str, S>> =
            std::sync::LazyLock::new(|| MultiGraph::new(&[("Two", TWO)]).expect("valid"));
        static OTHER: std::sync::LazyLock<MultiGraph<&'static str, S>> =
            std::sync::LazyLock::new(|| MultiGraph::new(&[("One", ONE)]).expect("valid"));
        let graphs: &'static MultiGraph<&'static str, S> = &MG;
        assert!(std::ptr::eq(graphs.scaled_static(1.0), graphs));
        let fast = graphs.scaled_static(0.01);
        assert!(std::ptr::eq(fast, graphs.scaled_static(0.01)), "shared");
        assert_eq!(*fast, graphs.scaled(0.01));
        assert!(!std::ptr::eq(fast, graphs.scaled_static(0.1)));
        let other: &'static MultiGraph<&'static str, S> = &OTHER;
        assert_eq!(*other.scaled_static(0.01), other.scaled(0.01));
    }
}

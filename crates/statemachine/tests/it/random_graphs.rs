//! Properties over randomly generated graphs and multi-graphs.

use std::time::Duration;

use jiff::Timestamp;
use proptest::prelude::*;
use simplyblock_statemachine::{
    Error, Graph, GraphDef, Machine, MultiGraph, State, StateDef, StepSnapshot, state_enum,
};

state_enum! {
    enum R { S0, S1, S2, S3, S4, S5, S6, S7 }
}

/// An owned graph declaration; borrowed into `GraphDef` on demand.
#[derive(Clone, Debug)]
struct Decl {
    initial: R,
    states: Vec<(R, Vec<R>, bool, Option<Duration>)>,
}

impl Decl {
    fn state_defs(&self) -> Vec<StateDef<'_, R>> {
        self.states
            .iter()
            .map(|(state, to, abortable, deadline)| {
                let mut def = StateDef::new(*state).to(to);
                if *abortable {
                    def = def.abortable();
                }
                if let Some(deadline) = deadline {
                    def = def.deadline(*deadline);
                }
                def
            })
            .collect()
    }

    fn try_graph(&self) -> Result<Graph<R>, Error> {
        Graph::new(GraphDef::new(self.initial, &self.state_defs()))
    }

    fn graph(&self) -> Graph<R> {
        self.try_graph().expect("generated graphs are valid")
    }
}

/// A valid graph: a random subset of `R` in random order, each step after the first reached
/// by an edge from an earlier one (so all are reachable), plus random extra edges.
fn decl() -> impl Strategy<Value = Decl> {
    Just(R::ALL.to_vec())
        .prop_shuffle()
        .prop_flat_map(|order| (1..=order.len()).prop_map(move |n| order[..n].to_vec()))
        .prop_flat_map(|states| {
            let n = states.len();
            let parents = prop::collection::vec(any::<prop::sample::Index>(), n);
            let extra = prop::collection::vec((0..n, 0..n), 0..=2 * n);
            let flags = prop::collection::vec((any::<bool>(), prop::option::of(1u64..100_000)), n);
            (Just(states), parents, extra, flags)
        })
        .prop_map(|(states, parents, extra, flags)| {
            let mut edges: Vec<Vec<R>> = vec![Vec::new(); states.len()];
            for (i, parent) in parents.iter().enumerate().skip(1) {
                edges[parent.index(i)].push(states[i]);
            }
            for (from, to) in extra {
                edges[from].push(states[to]);
            }
            Decl {
                initial: states[0],
                states: states
                    .iter()
                    .zip(edges)
                    .zip(flags)
                    .map(|((&state, to), (abortable, secs))| {
                        (state, to, abortable, secs.map(Duration::from_secs))
                    })
                    .collect(),
            }
        })
}

const ACTIONS: &[&str] = &["Alpha", "Beta", "Gamma", "Delta"];

fn multi_decl() -> impl Strategy<Value = Vec<(&'static str, Decl)>> {
    prop::collection::vec(decl(), 1..=ACTIONS.len())
        .prop_map(|decls| ACTIONS.iter().copied().zip(decls).collect())
}

fn multi_graph(decls: &[(&'static str, Decl)]) -> MultiGraph<&'static str, R> {
    let state_defs: Vec<_> = decls.iter().map(|(_, decl)| decl.state_defs()).collect();
    let defs: Vec<_> = decls
        .iter()
        .zip(&state_defs)
        .map(|((action, decl), states)| (*action, GraphDef::new(decl.initial, states)))
        .collect();
    MultiGraph::new(&defs).expect("generated graphs are valid")
}

#[derive(Clone, Debug)]
enum Move {
    Allowed(prop::sample::Index),
    Any(prop::sample::Index),
    Reset,
}

fn walk() -> impl Strategy<Value = Vec<(Move, u64)>> {
    let one = prop_oneof![
        4 => any::<prop::sample::Index>().prop_map(Move::Allowed),
        4 => any::<prop::sample::Index>().prop_map(Move::Any),
        1 => Just(Move::Reset),
    ];
    prop::collection::vec((one, 0u64..10_000), 0..80)
}

proptest! {
    #[test]
    fn random_walks_never_leave_a_random_graph(decl in decl(), moves in walk()) {
        let graph = decl.graph();
        let mut now = Timestamp::from_second(1_800_000_000).expect("in range");
        let mut machine = Machine::start(&graph, now);
        for (step, dt) in moves {
            now = now.checked_add(Duration::from_secs(dt)).expect("in range");
            let mut entered = false;
            match step {
                Move::Allowed(index) => {
                    let allowed = machine.allowed_transitions();
                    if let Some(&next) = allowed.get(index.index(allowed.len().max(1))) {
                        prop_assert!(machine.transition_to(next, now).is_ok());
                        prop_assert_eq!(machine.state(), next);
                        entered = true;
                    } else {
                        prop_assert!(machine.is_terminal());
                    }
                }
                Move::Any(index) => {
                    let next = R::ALL[index.index(R::ALL.len())];
                    let before = machine.clone();
                    let legal = graph.allows(machine.state(), next);
                    let result = machine.transition_to(next, now);
                    prop_assert_eq!(result.is_ok(), legal);
                    if !legal {
                        prop_assert_eq!(&machine, &before);
                    }
                    entered = legal;
                }
                Move::Reset => {
                    machine.reset(now);
                    prop_assert_eq!(machine.state(), graph.initial());
                    entered = true;
                }
            }
            // A step just entered has its whole budget ahead of it.
            if let (true, Some(deadline)) = (entered, machine.deadline()) {
                prop_assert!(deadline > now);
                prop_assert!(!machine.timed_out(now));
            }
            prop_assert!(graph.declares(machine.state()));
            prop_assert_eq!(machine.deadline().is_some(), graph.deadline(machine.state()).is_some());
            prop_assert_eq!(&Machine::restore(&graph, &machine.snapshot(), now).expect("declared"), &machine);
        }
    }

    #[test]
    fn unabortable_table_equals_the_graphs_answer(decls in multi_decl()) {
        let multi = multi_graph(&decls);
        let union = multi.unabortable_states();
        // Every reported step is unabortable in some action...
        for &state in &union {
            prop_assert!(multi.iter().any(|(_, g)| g.declares(state) && !g.is_abortable(state)));
        }
        // ...and every step unabortable in any action is reported.
        for (_, graph) in multi.iter() {
            for &state in &graph.declared_states() {
                if !graph.is_abortable(state) {
                    prop_assert!(union.contains(&state));
                }
            }
        }
        prop_assert!(union.windows(2).all(|pair| pair[0] < pair[1]), "sorted and deduplicated");
    }

    #[test]
    fn declared_states_are_the_sorted_union(decls in multi_decl()) {
        let multi = multi_graph(&decls);
        let declared = multi.declared_states();
        prop_assert!(declared.windows(2).all(|pair| pair[0] < pair[1]));
        for state in R::ALL {
            let anywhere = multi.iter().any(|(_, g)| g.declares(*state));
            prop_assert_eq!(declared.contains(state), anywhere);
        }
        prop_assert_eq!(
            multi.declared_state_names(),
            declared.iter().map(|s| s.name()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn restore_round_trips_state_and_deadline(
        decl in decl(),
        pick in any::<prop::sample::Index>(),
        stored in (0i64..4_000_000_000, 0i32..1_000_000_000),
        now in 0i64..4_000_000_000,
    ) {
        let graph = decl.graph();
        let declared = graph.declared_states();
        let state = declared[pick.index(declared.len())];
        let deadline = Timestamp::new(stored.0, stored.1).expect("in range");
        let now = Timestamp::from_second(now).expect("in range");
        let snapshot = StepSnapshot {
            state: Some(state.name().to_owned()),
            deadline: graph.deadline(state).map(|_| deadline),
        };
        let text = serde_json::to_string(&snapshot).expect("serializes");
        let machine = Machine::restore(&graph, &serde_json::from_str(&text).expect("deserializes"), now)
            .expect("declared");
        prop_assert_eq!(machine.state(), state);
        prop_assert_eq!(machine.deadline(), snapshot.deadline);
        prop_assert_eq!(machine.timed_out(now), snapshot.deadline.is_some_and(|d| d <= now));
        prop_assert_eq!(machine.snapshot(), snapshot);
    }

    #[test]
    fn undeclared_steps_are_refused_on_restore(decl in decl(), pick in any::<prop::sample::Index>()) {
        let graph = decl.graph();
        let undeclared: Vec<R> = R::ALL.iter().copied().filter(|s| !graph.declares(*s)).collect();
        prop_assume!(!undeclared.is_empty());
        let state = undeclared[pick.index(undeclared.len())];
        let snapshot = StepSnapshot { state: Some(state.name().to_owned()), deadline: None };
        prop_assert_eq!(
            Machine::restore(&graph, &snapshot, Timestamp::UNIX_EPOCH),
            Err(Error::UnknownState { state: state.name().to_owned(), action: None })
        );
    }

    #[test]
    fn an_edge_to_an_undeclared_step_is_refused(decl in decl(), pick in any::<prop::sample::Index>()) {
        let mut decl = decl;
        let undeclared: Vec<R> = R::ALL
            .iter()
            .copied()
            .filter(|s| decl.states.iter().all(|(d, ..)| d != s))
            .collect();
        prop_assume!(!undeclared.is_empty());
        let target = undeclared[pick.index(undeclared.len())];
        let from = decl.states[0].0;
        decl.states[0].1.push(target);
        prop_assert_eq!(
            decl.try_graph(),
            Err(Error::UndeclaredTarget { from: from.name(), to: target.name(), action: None })
        );
    }
}

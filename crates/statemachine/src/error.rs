//! The crate's one error type.
//!
//! Names rather than typed states keep `Error` non-generic, so controllers can `?` errors
//! from several step enums into one error type. The texts are written for the person who
//! reads them in an event or `status.message`.

use std::fmt;

/// Everything that can go wrong declaring a graph or running a machine over it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The graph's initial step has no definition.
    #[error(
        "the step graph{} starts at step {initial:?} but does not declare it; add a StateDef for {initial:?}",
        ForAction(*.action)
    )]
    InitialNotDeclared {
        initial: &'static str,
        action: Option<&'static str>,
    },

    /// An edge points at a step the graph does not declare.
    #[error(
        "step {from:?}{} has an edge to {to:?}, which is not declared; declare {to:?} or remove the edge",
        OfAction(*.action)
    )]
    UndeclaredTarget {
        from: &'static str,
        to: &'static str,
        action: Option<&'static str>,
    },

    /// The same step is defined twice, so which definition applies would be ambiguous.
    #[error(
        "step {state:?} is declared twice{}; merge the two definitions into one",
        ForAction(*.action)
    )]
    DuplicateState {
        state: &'static str,
        action: Option<&'static str>,
    },

    /// A declared step cannot be reached from the initial step, so it would be a dead value
    /// in the CRD's step enum.
    #[error(
        "step {state:?}{} is declared but no path leads to it from the initial step {initial:?}; add an edge to it or remove it",
        OfAction(*.action)
    )]
    Unreachable {
        state: &'static str,
        initial: &'static str,
        action: Option<&'static str>,
    },

    /// A zero deadline would time the step out the moment it is entered.
    #[error(
        "step {state:?}{} has a zero deadline, so it would time out as soon as it is entered; give it a positive deadline or none",
        OfAction(*.action)
    )]
    ZeroDeadline {
        state: &'static str,
        action: Option<&'static str>,
    },

    /// A multi-graph declares the same action twice.
    #[error("action {action} has two step graphs; keep exactly one per action")]
    DuplicateAction { action: &'static str },

    /// No graph is declared for the requested action.
    #[error(
        "no step graph is declared for action {action}; this operator version cannot run it, so the operation fails — use an action this version supports or upgrade the operator"
    )]
    UnknownAction { action: &'static str },

    /// The stored `status.step.state` names a step the graph does not declare. The
    /// operation cannot resume: the controller fails it without retrying.
    #[error(
        "step {state:?} is not declared{}; the stored status.step was written by another version of the operator or edited by hand, so the operation cannot resume — it fails; create a new operation to try again",
        ForAction(*.action)
    )]
    UnknownState {
        state: String,
        action: Option<&'static str>,
    },

    /// The controller asked for a move the graph does not allow. This is a bug in the
    /// controller, not in the object.
    #[error(
        "cannot move from step {from:?} to {to:?}{}: {}; this is an operator bug, please report it",
        ForAction(*.action),
        Allowed(.allowed)
    )]
    IllegalTransition {
        from: &'static str,
        to: &'static str,
        /// The steps `from` may move to, in declaration order.
        allowed: Vec<&'static str>,
        action: Option<&'static str>,
    },

    /// An abort (or a DELETE) was requested while the current step is not abortable.
    #[error(
        "step {state:?}{} cannot be aborted: it is waiting for the outcome of a call it issued; the operation keeps running{}",
        OfAction(*.action),
        AbortableAt(.abortable)
    )]
    NotAbortable {
        state: &'static str,
        /// The steps of the same graph at which an abort is accepted.
        abortable: Vec<&'static str>,
        action: Option<&'static str>,
    },
}

/// Renders " for action X" (nothing for a graph that is not part of a multi-graph).
struct ForAction(Option<&'static str>);

impl fmt::Display for ForAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(action) => write!(f, " for action {action}"),
            None => Ok(()),
        }
    }
}

/// Renders " of action X" (nothing for a graph that is not part of a multi-graph).
struct OfAction(Option<&'static str>);

impl fmt::Display for OfAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(action) => write!(f, " of action {action}"),
            None => Ok(()),
        }
    }
}

struct Allowed<'a>(&'a [&'static str]);

impl fmt::Display for Allowed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("the step is terminal")
        } else {
            write!(f, "the allowed next steps are {}", self.0.join(", "))
        }
    }
}

struct AbortableAt<'a>(&'a [&'static str]);

impl fmt::Display for AbortableAt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str(" to its end; no step of it can be aborted")
        } else {
            write!(
                f,
                "; set spec.abort again or delete it once it reaches one of {}",
                self.0.join(", ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_state_names_the_step_the_action_and_what_to_do() {
        let err = Error::UnknownState {
            state: "Foo".into(),
            action: Some("RollingRestart"),
        };
        assert_eq!(
            err.to_string(),
            "step \"Foo\" is not declared for action RollingRestart; the stored status.step was \
             written by another version of the operator or edited by hand, so the operation \
             cannot resume — it fails; create a new operation to try again"
        );
    }

    #[test]
    fn illegal_transition_lists_the_allowed_steps() {
        let err = Error::IllegalTransition {
            from: "Requesting",
            to: "Starting",
            allowed: vec!["Awaiting"],
            action: None,
        };
        assert_eq!(
            err.to_string(),
            "cannot move from step \"Requesting\" to \"Starting\": the allowed next steps are \
             Awaiting; this is an operator bug, please report it"
        );
        let terminal = Error::IllegalTransition {
            from: "Awaiting",
            to: "Requesting",
            allowed: vec![],
            action: Some("Activate"),
        };
        assert!(
            terminal
                .to_string()
                .contains("for action Activate: the step is terminal")
        );
    }

    #[test]
    fn not_abortable_says_where_abort_becomes_possible() {
        let err = Error::NotAbortable {
            state: "ShuttingDownNode",
            abortable: vec!["CheckingPeers", "Rebalancing"],
            action: Some("RollingRestart"),
        };
        assert_eq!(
            err.to_string(),
            "step \"ShuttingDownNode\" of action RollingRestart cannot be aborted: it is waiting \
             for the outcome of a call it issued; the operation keeps running; set spec.abort \
             again or delete it once it reaches one of CheckingPeers, Rebalancing"
        );
        let never = Error::NotAbortable {
            state: "ShuttingDown",
            abortable: vec![],
            action: Some("Restart"),
        };
        assert!(
            never
                .to_string()
                .ends_with("keeps running to its end; no step of it can be aborted")
        );
    }
}

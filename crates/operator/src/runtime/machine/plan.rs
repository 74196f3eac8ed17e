//! What a machine's step asks for, decided purely from one observation: [`Plan`], where an
//! advance goes ([`Move`]), and the kind's own events that go with a plan ([`Noted`]).
//!
//! The kind's own status fields are a type parameter, `F`: each kind names its typed
//! fields, and the runtime that writes its status serializes them beside its own.

use std::time::Duration;

/// A kind's own event, beside the standard ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// A plan and the kind's own events that go with it (what an inspection found, why an
/// item was left out), decided from the same observation.
#[derive(Clone, Debug, PartialEq)]
pub struct Noted<S, C, F> {
    pub plan: Plan<S, C, F>,
    pub notes: Vec<Note>,
}

impl<S, C, F> From<Plan<S, C, F>> for Noted<S, C, F> {
    fn from(plan: Plan<S, C, F>) -> Self {
        Noted {
            plan,
            notes: Vec::new(),
        }
    }
}

impl<S, C, F> Noted<S, C, F> {
    /// The same plan and events, its call (if any) turned into `D` by `into`: a kind whose
    /// actions each have their own call type lifts one action's plan into the kind's.
    pub fn map_call<D>(self, into: impl FnOnce(C) -> D) -> Noted<S, D, F> {
        Noted {
            plan: self.plan.map_call(into),
            notes: self.notes,
        }
    }
}

impl<S, C, F> Plan<S, C, F> {
    /// The same plan, its call (if any) turned into `D` by `into`. Pure.
    pub fn map_call<D>(self, into: impl FnOnce(C) -> D) -> Plan<S, D, F> {
        match self {
            Plan::Advance {
                to,
                message,
                kind_status,
            } => Plan::Advance {
                to,
                message,
                kind_status,
            },
            Plan::Record {
                kind_status,
                message,
            } => Plan::Record {
                kind_status,
                message,
            },
            Plan::Progress {
                kind_status,
                message,
            } => Plan::Progress {
                kind_status,
                message,
            },
            Plan::Succeed {
                message,
                kind_status,
            } => Plan::Succeed {
                message,
                kind_status,
            },
            Plan::Fail(message) => Plan::Fail(message),
            Plan::Call { call, message } => Plan::Call {
                call: into(call),
                message,
            },
            Plan::CallOnce {
                to,
                call,
                message,
                accepted,
            } => Plan::CallOnce {
                to,
                call: into(call),
                message,
                accepted,
            },
            Plan::Wait {
                message,
                after,
                event,
            } => Plan::Wait {
                message,
                after,
                event,
            },
        }
    }

    /// A wait with nothing new to say: `stored`, the message the status already holds,
    /// stands, so nothing is written; the step is looked at again after `after`.
    pub fn quiet(stored: Option<&str>, after: Duration) -> Self {
        Plan::Wait {
            message: stored.unwrap_or_default().to_owned(),
            after,
            event: None,
        }
    }
}

/// What a kind's step asks for, decided from one observation; `F` is the kind's own
/// status fields.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan<S, C, F> {
    /// The step's outcome is there: move to `to` (a declared edge, or back to the initial
    /// step with [`Move::Restart`]), writing `kind_status` when given.
    Advance {
        to: Move<S>,
        message: String,
        kind_status: Option<F>,
    },
    /// Record kind fields (e.g. a list written once) without moving.
    Record { kind_status: F, message: String },
    /// Record kind fields that show the step progressing, and give the step its whole
    /// budget again from now (a long wait that keeps moving is not stuck).
    Progress { kind_status: F, message: String },
    /// The machine reached what it asked for.
    Succeed {
        message: String,
        kind_status: Option<F>,
    },
    /// The machine cannot reach it; no retry.
    Fail(String),
    /// The outcome is not there and nothing has produced it yet: issue `call`.
    Call { call: C, message: String },
    /// A call that must never be issued twice and whose effect may not show at once: the
    /// move to `to` is written first (the record that the call is under way; `to` never
    /// calls again), then the call, then `accepted` as the message. The Ops runtime ends
    /// an operation whose call failed Failed: the control plane may have acted on it.
    CallOnce {
        to: S,
        call: C,
        message: String,
        accepted: String,
    },
    /// The outcome is not there yet but is on its way (or blocked): look again later.
    /// `event` (a warning) is raised once, when the message first appears.
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
    /// Back to the initial step (a per-item loop starting its next item, or a machine
    /// that found its premise gone).
    Restart,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kind's own status fields, in tests: one counter.
    type Fields = u8;

    #[derive(Clone, Debug, PartialEq)]
    enum Outer {
        Inner(u8),
    }

    const AFTER: Duration = Duration::from_secs(5);

    #[test]
    fn mapping_the_call_changes_only_the_call() {
        let called: Plan<u8, u8, Fields> = Plan::CallOnce {
            to: 3,
            call: 7,
            message: "m".into(),
            accepted: "a".into(),
        };
        assert_eq!(
            called.map_call(Outer::Inner),
            Plan::CallOnce {
                to: 3,
                call: Outer::Inner(7),
                message: "m".into(),
                accepted: "a".into(),
            }
        );
        let call: Plan<u8, u8, Fields> = Plan::Call {
            call: 1,
            message: "m".into(),
        };
        assert_eq!(
            call.map_call(Outer::Inner),
            Plan::Call {
                call: Outer::Inner(1),
                message: "m".into(),
            }
        );
        let waits: Plan<u8, u8, Fields> = Plan::Wait {
            message: "w".into(),
            after: AFTER,
            event: Some("E"),
        };
        assert_eq!(
            waits.map_call(Outer::Inner),
            Plan::Wait {
                message: "w".into(),
                after: AFTER,
                event: Some("E"),
            }
        );
        let advance: Plan<u8, u8, Fields> = Plan::Advance {
            to: Move::Restart,
            message: "a".into(),
            kind_status: Some(2),
        };
        assert_eq!(
            advance.map_call(Outer::Inner),
            Plan::Advance {
                to: Move::Restart,
                message: "a".into(),
                kind_status: Some(2),
            }
        );
        let fail: Plan<u8, u8, Fields> = Plan::Fail("f".into());
        assert_eq!(fail.map_call(Outer::Inner), Plan::Fail("f".into()));
    }

    #[test]
    fn mapping_a_noted_plan_keeps_its_events() {
        let note = Note {
            warning: true,
            reason: "R",
            message: "n".into(),
        };
        let noted: Noted<u8, u8, Fields> = Noted {
            plan: Plan::Call {
                call: 2,
                message: "m".into(),
            },
            notes: vec![note.clone()],
        };
        assert_eq!(
            noted.map_call(Outer::Inner),
            Noted {
                plan: Plan::Call {
                    call: Outer::Inner(2),
                    message: "m".into(),
                },
                notes: vec![note],
            }
        );
    }

    #[test]
    fn typed_kind_fields_map_with_the_call() {
        let record: Plan<u8, u8, Vec<String>> = Plan::Record {
            kind_status: vec!["a".into()],
            message: "r".into(),
        };
        assert_eq!(
            record.map_call(Outer::Inner),
            Plan::Record {
                kind_status: vec!["a".into()],
                message: "r".into(),
            }
        );
    }

    #[test]
    fn a_quiet_wait_restates_the_stored_message() {
        let quiet: Plan<u8, u8, Fields> = Plan::quiet(Some("said"), AFTER);
        assert_eq!(
            quiet,
            Plan::Wait {
                message: "said".into(),
                after: AFTER,
                event: None,
            }
        );
        let nothing: Plan<u8, u8, Fields> = Plan::quiet(None, AFTER);
        assert!(matches!(nothing, Plan::Wait { message, .. } if message.is_empty()));
    }
}

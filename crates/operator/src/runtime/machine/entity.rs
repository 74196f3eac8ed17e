//! The entity mode: the machine of an object that is no operation (StorageCluster
//! creation, StorageNode provisioning, the deployment document's expansion) run over the
//! one [`Plan`].
//!
//! A kind implements [`Entity`]: its typed status writer (the step, the phase a [`Stage`]
//! names, the message and its own fields, server-side applied under its field manager
//! onto the resourceVersion the pass read), and its own calls. [`execute`] performs the
//! variants every kind shares, in the same way for each:
//!
//! | plan | what is done |
//! |---|---|
//! | `Advance` | the transition (or the restart), then the write; looked at again after [`Entity::after_advance`] |
//! | `Wait` with a new message | its events, then the write; looked at again after `after` |
//! | `Wait` with the stored message | nothing but the look after `after` |
//! | `Record`, `Progress` | the kind's fields written on the step (`Progress` renews its deadline) |
//! | `Succeed`, `Fail` | the final write; nothing more until the object changes |
//! | `Call`, `CallOnce` | the kind's [`Entity::call`] (`CallOnce` writes its move first) |
//!
//! A write that finds the object changed since it was read writes nothing, and the pass
//! looks again after [`requeue::CONFLICT`]: it decided from a stale copy. A kind's call
//! may answer with the plan that follows it (the move its effect allows, the hold its
//! failure asks for), which is performed in the same pass onto the object as the pass
//! last wrote it.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use jiff::Timestamp;
use kube::Resource;
use kube::runtime::controller::Action;
use simplyblock_statemachine::{Machine, State};

use super::plan::{Move, Note, Noted, Plan};
use crate::runtime::context::{Context, requeue};
use crate::runtime::kit::Error;

/// Where a status write leaves the machine, for the kind to name as its phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// On its way: a move, a restart, a record, the write before a call.
    Running,
    /// Held on its step by what it waits for.
    Holding,
    /// The machine reached what it asked for.
    Succeeded,
    /// The machine gave up.
    Failed,
}

/// One status write of an entity's machine.
pub struct Status<'a, S: State, F> {
    pub stage: Stage,
    /// The machine whose position is written.
    pub machine: &'a Machine<'static, S>,
    pub message: String,
    /// The kind's own fields the write changes; `None` keeps them as stored.
    pub fields: Option<F>,
    /// When the pass decided.
    pub now: Timestamp,
}

/// The plan of entity kind `E`, with its events.
pub type EntityPlan<E> = Noted<<E as Entity>::Step, <E as Entity>::Call, <E as Entity>::Fields>;

/// What a kind's call leaves to do.
pub enum After<E: Entity> {
    /// The plan its outcome asks for, performed in the same pass.
    Plan(EntityPlan<E>),
    /// Nothing more in this pass.
    Done(Action),
}

impl<E: Entity> After<E> {
    /// Nothing more in this pass; look again after `after`.
    pub fn requeue(after: Duration) -> Self {
        After::Done(Action::requeue(after))
    }
}

/// A kind whose object runs a step machine of its own: its typed status writer and its
/// calls. One value serves one pass, so it may carry what the pass read beside the object.
pub trait Entity: Sized + Send + Sync {
    /// The object whose status holds the machine.
    type Object: Resource<DynamicType = ()> + Clone + Debug + Send + Sync;
    type Step: State + Send + Sync;
    /// What is the kind's own to do (create, claim, record).
    type Call: Debug + Send;
    /// The kind's own status fields that plans write.
    type Fields: Send;

    /// The message the object's status holds.
    fn message(object: &Self::Object) -> Option<&str>;

    /// Writes the machine's position with its phase, message and fields onto `object`'s
    /// resourceVersion, and returns the object as stored; `None` when it changed since it
    /// was read (nothing was written).
    fn write(
        &self,
        ctx: &Context,
        object: &Self::Object,
        status: Status<'_, Self::Step, Self::Fields>,
    ) -> impl Future<Output = Result<Option<Self::Object>, Error>> + Send;

    /// Performs `call` (`message`: the plan's) and says what follows.
    fn call(
        &self,
        pass: &mut Pass<'_, Self>,
        call: Self::Call,
        message: String,
    ) -> impl Future<Output = Result<After<Self>, Error>> + Send;

    /// How long after a move into `to` the machine is looked at again: by default at once
    /// (the watch usually brings the write first).
    fn after_advance(&self, _to: Self::Step) -> Duration {
        requeue::NEXT_STEP
    }

    /// The machine fails with `notes` raised: the kind's own account of it (metrics).
    fn failing(&self, _ctx: &Context, _object: &Self::Object, _notes: &[Note]) {}
}

/// One pass of an entity's machine: the object as the pass last stored it, and the
/// machine it moves.
pub struct Pass<'a, E: Entity> {
    pub entity: &'a E,
    pub ctx: &'a Context,
    /// As read, then as this pass last wrote it: a second write goes onto that version.
    pub object: E::Object,
    pub machine: Machine<'static, E::Step>,
    pub now: Timestamp,
}

impl<E: Entity> Pass<'_, E> {
    /// Writes the machine's position with `message` and `fields`; `false`: the object
    /// changed since it was read, nothing was written.
    pub async fn write(
        &mut self,
        stage: Stage,
        message: String,
        fields: Option<E::Fields>,
    ) -> Result<bool, Error> {
        let status = Status {
            stage,
            machine: &self.machine,
            message,
            fields,
            now: self.now,
        };
        match self.entity.write(self.ctx, &self.object, status).await? {
            Some(written) => {
                self.object = written;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn raise(&self, notes: Vec<Note>) {
        for note in notes {
            self.ctx
                .event(&self.object, note.warning, note.reason, note.message)
                .await;
        }
    }

    /// Moves the machine to `to`; `false`: the plan asked for an edge the graph does not
    /// have, a bug the pass stops at rather than loop on.
    fn transition(&mut self, to: E::Step) -> bool {
        match self.machine.transition_to(to, self.now) {
            Ok(()) => true,
            Err(e) => {
                let kind = E::Object::kind(&());
                tracing::error!(error = %e, %kind, "illegal transition");
                false
            }
        }
    }

    /// The write of a plan that moves or records: the pass ends after `after`, or after
    /// [`requeue::CONFLICT`] when the write found a newer copy.
    async fn written(
        &mut self,
        stage: Stage,
        message: String,
        fields: Option<E::Fields>,
        after: Action,
    ) -> Result<After<E>, Error> {
        if !self.write(stage, message, fields).await? {
            return Ok(After::requeue(requeue::CONFLICT));
        }
        Ok(After::Done(after))
    }
}

/// Performs `plan` for `object`, whose machine is `machine`, as decided at `now`: the
/// shared variants here, the kind's calls through [`Entity::call`], and whatever plan a
/// call answers with, until the pass is done.
pub async fn execute<E: Entity>(
    entity: &E,
    ctx: &Context,
    object: E::Object,
    machine: Machine<'static, E::Step>,
    plan: EntityPlan<E>,
    now: Timestamp,
) -> Result<Action, Error> {
    let mut pass = Pass {
        entity,
        ctx,
        object,
        machine,
        now,
    };
    let mut next = plan;
    loop {
        match perform(&mut pass, next).await? {
            After::Plan(plan) => next = plan,
            After::Done(action) => return Ok(action),
        }
    }
}

/// Whether a wait says something the status does not hold yet.
pub fn says_news(stored: Option<&str>, message: &str) -> bool {
    stored.unwrap_or_default() != message
}

async fn perform<E: Entity>(
    pass: &mut Pass<'_, E>,
    noted: EntityPlan<E>,
) -> Result<After<E>, Error> {
    let Noted { plan, notes } = noted;
    let progressing = matches!(plan, Plan::Progress { .. });
    match plan {
        Plan::Advance {
            to,
            message,
            kind_status,
        } => {
            match to {
                Move::To(step) => {
                    if !pass.transition(step) {
                        return Ok(After::Done(Action::await_change()));
                    }
                }
                Move::Restart => pass.machine.reset(pass.now),
            }
            pass.raise(notes).await;
            let after = Action::requeue(pass.entity.after_advance(pass.machine.state()));
            pass.written(Stage::Running, message, kind_status, after)
                .await
        }
        Plan::Wait {
            message,
            after,
            event,
        } => {
            // Said once: a message the status holds is neither written nor raised again.
            if !says_news(E::message(&pass.object), &message) {
                return Ok(After::requeue(after));
            }
            pass.raise(notes).await;
            if let Some(reason) = event {
                pass.ctx
                    .event(&pass.object, true, reason, message.clone())
                    .await;
            }
            let after = Action::requeue(after);
            pass.written(Stage::Holding, message, None, after).await
        }
        Plan::Record {
            kind_status,
            message,
        }
        | Plan::Progress {
            kind_status,
            message,
        } => {
            if progressing {
                // The step moved on without leaving: its budget starts again from now.
                pass.machine.extend_deadline(pass.now);
            }
            pass.raise(notes).await;
            let after = Action::requeue(requeue::NEXT_STEP);
            pass.written(Stage::Running, message, Some(kind_status), after)
                .await
        }
        Plan::Succeed {
            message,
            kind_status,
        } => {
            pass.raise(notes).await;
            let after = Action::await_change();
            pass.written(Stage::Succeeded, message, kind_status, after)
                .await
        }
        Plan::Fail(message) => {
            pass.entity.failing(pass.ctx, &pass.object, &notes);
            pass.raise(notes).await;
            let after = Action::await_change();
            pass.written(Stage::Failed, message, None, after).await
        }
        Plan::Call { call, message } => {
            pass.raise(notes).await;
            tracing::debug!(object = ?pass.object.meta().name, ?call, "calling");
            let entity = pass.entity;
            entity.call(pass, call, message).await
        }
        Plan::CallOnce {
            to,
            call,
            message,
            accepted,
        } => {
            if !pass.transition(to) {
                return Ok(After::Done(Action::await_change()));
            }
            pass.raise(notes).await;
            // Write-ahead: from here on the call counts as issued, whatever happens next.
            if !pass.write(Stage::Running, message, None).await? {
                return Ok(After::requeue(requeue::CONFLICT));
            }
            let entity = pass.entity;
            entity.call(pass, call, accepted).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_news_only_when_the_status_does_not_hold_its_message() {
        assert!(says_news(None, "waiting"));
        assert!(says_news(Some("before"), "waiting"));
        assert!(!says_news(Some("waiting"), "waiting"));
        // A quiet wait over a status without a message restates nothing.
        assert!(!says_news(None, ""));
    }
}

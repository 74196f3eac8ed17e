//! What an `*Ops` kind implements: where its common status fields are and how its target
//! is locked ([`OpsResource`]), and its steps ([`Steps`]), each an observation, a pure
//! [`Plan`] over it and the one call a plan may ask for.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;
use simplyblock_api::common::OpsKind;
use simplyblock_statemachine::{Machine, MultiGraph};

use crate::runtime::context::Context;
use crate::runtime::error::Error;
pub use crate::runtime::machine::{Move, Note, Noted, Plan};

/// The standard events of every Ops kind (a closed set; kinds add their own beside them).
pub mod reason {
    pub const QUEUED: &str = "OperationQueued";
    pub const STARTED: &str = "OperationStarted";
    pub const SUCCEEDED: &str = "OperationSucceeded";
    pub const FAILED: &str = "OperationFailed";
    pub const ABORTED: &str = "OperationAborted";
    pub const DEADLINE: &str = "StepDeadlineExceeded";
}

/// The longest wait between two looks at a running step.
pub const POLL: Duration = Duration::from_secs(5);

/// The fields of `status` every Ops kind has, as the runtime reads and writes them.
pub use simplyblock_api::common::OpsStatusCore as OpsStatus;

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
    + OpsKind
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

    /// Whether the runtime prunes the kind's finished operations ([`super::history`]).
    /// False for a kind that records them somewhere first and prunes them itself.
    const RUNTIME_PRUNES_HISTORY: bool = true;

    /// The name of the target in the operation's namespace.
    fn target_name(&self) -> &str;
    /// The history the operation counts in: its target's, or the namespace's for a kind
    /// without a lock (each operation is its own target).
    fn history_group(&self) -> &str {
        if Self::LOCKS_TARGET {
            self.target_name()
        } else {
            ""
        }
    }
    /// The action's name, for messages and metrics.
    fn action_name(&self) -> &'static str {
        simplyblock_statemachine::Action::name(self.action())
    }
    /// `spec.abort`.
    fn abort_requested(&self) -> bool {
        self.abort()
    }
    /// The common status fields.
    fn ops_status(&self) -> OpsStatus {
        self.status_core()
    }
    /// The kind's own status fields, beside the common ones: a typed part of its status
    /// that serializes to the same camelCase keys, each left out while unset.
    type Fields: Clone + Debug + Default + PartialEq + Serialize + Send + Sync + 'static;

    /// The kind's own status fields as stored, kept as they are by a write that does not
    /// change them.
    fn kind_status(&self) -> Self::Fields;
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

/// Why [`Steps::admission`] keeps an operation Pending: the event's reason and the
/// sentence a person reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub reason: &'static str,
    pub message: String,
}

/// The step graphs of kind `K` that its [`Steps`] run over, their deadlines scaled by
/// [`Context::step_deadline_scale`] (tests shorten them).
pub struct StepGraphs<K: OpsKind> {
    graphs: &'static MultiGraph<K::Action, K::Step>,
}

impl<K: OpsKind> Clone for StepGraphs<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: OpsKind> Copy for StepGraphs<K> {}

impl<K: OpsKind> Default for StepGraphs<K> {
    fn default() -> Self {
        StepGraphs {
            graphs: K::graphs(),
        }
    }
}

impl<K: OpsResource> StepGraphs<K> {
    /// The graphs with every deadline multiplied by `scale` (1: as declared).
    pub fn with_deadline_scale(scale: f64) -> Self {
        StepGraphs {
            graphs: K::graphs().scaled_static(scale),
        }
    }

    /// The operation's machine, restored from its `status.step`.
    pub fn restore(
        &self,
        op: &K,
        now: Timestamp,
    ) -> Result<Machine<'static, K::Step>, simplyblock_statemachine::Error> {
        self.graphs.restore(op.action(), &op.ops_status().step, now)
    }
}

/// A kind's steps: reads, a pure plan, and the calls.
pub trait Steps<K: OpsResource>: Send + Sync + 'static {
    type Obs: Send;
    type Call: Debug + Send;

    /// Everything the step's plan needs, read from the world. No writes.
    fn observe(
        &self,
        op: &K,
        target: &K::Target,
        machine: &Machine<'static, K::Step>,
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
        machine: &Machine<'static, K::Step>,
        obs: &Self::Obs,
        now: Timestamp,
    ) -> Noted<K::Step, Self::Call, K::Fields>;

    /// The message of an operation that failed because `step` outlived its deadline, when
    /// the kind can say more than the runtime's "step … exceeded its deadline". Default
    /// none.
    fn deadline_message(&self, _op: &K, _step: K::Step) -> Option<String> {
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

    /// An abort was asked at `step`, an abortable one: undo what the step may have
    /// started (a volume a call created). `None` once nothing is left and the operation
    /// ends Aborted; else why the abort waits, written as the message and looked at
    /// again. Default: nothing to undo.
    fn unwind(
        &self,
        _op: &K,
        _step: K::Step,
        _ctx: &Context,
    ) -> impl Future<Output = Result<Option<String>, Error>> + Send {
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
    fn step_left(&self, _ctx: &Context, _op: &K, _step: K::Step, _seconds: f64) {}

    /// The kind's own status fields were written as `kind`: kind-specific gauges. Default
    /// none.
    fn kind_status_written(&self, _ctx: &Context, _op: &K, _kind: &K::Fields) {}

    /// Kind-specific events beside the standard ones (e.g. `NodeRestarted`), raised when a
    /// plan advances. Default none.
    fn advance_event(
        &self,
        _op: &K,
        _from: K::Step,
        _to: Move<K::Step>,
    ) -> Option<(&'static str, String)> {
        None
    }
}

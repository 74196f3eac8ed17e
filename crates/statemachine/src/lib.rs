//! Declared step graphs for simplyblock operations and multi-step reconciles.
//!
//! An operation (an `*Ops` object) or a multi-step reconcile moves through named steps.
//! Which steps exist, where each may go next, which accept an abort and how long each may
//! take is declared once, as data, in a [`Graph`] (or a [`MultiGraph`]: one graph per
//! `spec.action`). Everything else is derived from that declaration, so it cannot drift:
//! the CRD's step enum and CEL list ([`MultiGraph::declared_state_names`],
//! [`StepSnapshot::schema_for_steps`], checked by [`testing`]), the DELETE guard's table
//! ([`MultiGraph::unabortable_states`]) and the controller's moves ([`Machine`]).
//!
//! A [`Machine`] is a position in a graph plus the current step's deadline. It does no I/O
//! and never reads the clock: every call that needs the time takes `now`, so a reconcile
//! is a deterministic function of the stored object, the observation and `now`. A
//! controller restores the machine from `status.step` ([`StepSnapshot`]), decides from
//! current state whether the step's outcome is already there, moves the machine, and
//! writes the new snapshot *before* issuing the next step's side effect. Steps are
//! predicates over the world, not hooks: this crate only knows names, edges, abortability
//! and budgets.
//!
//! ```
//! use std::time::Duration;
//! use simplyblock_statemachine::{GraphDef, MultiGraph, StateDef, StepSnapshot};
//!
//! simplyblock_statemachine::state_enum! {
//!     pub enum Step { Requesting, Awaiting }
//! }
//! simplyblock_statemachine::action_enum! {
//!     pub enum ClusterAction { Activate, Shutdown }
//! }
//!
//! const REQUEST: GraphDef<Step> = GraphDef::new(
//!     Step::Requesting,
//!     &[
//!         StateDef::new(Step::Requesting)
//!             .to(&[Step::Awaiting])
//!             .abortable()
//!             .deadline(Duration::from_secs(2 * 60)),
//!         StateDef::new(Step::Awaiting).deadline(Duration::from_secs(30 * 60)),
//!     ],
//! );
//!
//! static GRAPHS: std::sync::LazyLock<MultiGraph<ClusterAction, Step>> =
//!     std::sync::LazyLock::new(|| {
//!         MultiGraph::new(&[(ClusterAction::Activate, REQUEST), (ClusterAction::Shutdown, REQUEST)])
//!             .expect("cluster step graphs are valid")
//!     });
//!
//! # fn main() -> Result<(), simplyblock_statemachine::Error> {
//! let now: jiff::Timestamp = "2026-05-01T12:00:00Z".parse().expect("timestamp");
//! let mut machine = GRAPHS.restore(ClusterAction::Activate, &StepSnapshot::default(), now)?;
//! assert_eq!(machine.state(), Step::Requesting);
//! assert_eq!(machine.requeue_after(now), Some(Duration::from_secs(120)));
//! machine.transition_to(Step::Awaiting, now)?;
//! assert!(!machine.can_abort());
//! assert_eq!(GRAPHS.unabortable_states(), [Step::Awaiting]);
//! # Ok(())
//! # }
//! ```
//!
//! In a status struct, embed the snapshot without an `Option` (empty already means "not
//! started") and give it the kind's step list, so the CRD's enum and CEL rule come from
//! the graphs:
//!
//! ```text
//! #[serde(default, skip_serializing_if = "StepSnapshot::is_empty")]
//! #[schemars(schema_with = "step_schema")]
//! pub step: StepSnapshot,
//!
//! fn step_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
//!     StepSnapshot::schema_for_steps(&GRAPHS.declared_state_names())
//! }
//! ```

mod error;
mod graph;
mod machine;
mod snapshot;
mod state;
pub mod testing;

pub use error::Error;
pub use graph::{Graph, GraphDef, MultiGraph, StateDef};
pub use machine::Machine;
pub use snapshot::{StepSnapshot, UNKNOWN_STEP_MESSAGE, cel_step_rule};
pub use state::{Action, State};

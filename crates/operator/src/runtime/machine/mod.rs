//! The one step-machine runtime of the operator: the [`Plan`] a pure `plan` returns over
//! an observation, and its two executors.
//!
//! - The Ops mode ([`crate::runtime::ops`]) runs the `*Ops` kinds: phases, the target's
//!   lock, the queue, abort, the six standard events and the kinds' untyped status
//!   fields.
//! - The entity mode ([`Entity`], [`execute`]) runs the machine of an object that is no
//!   operation (StorageCluster creation, StorageNode provisioning, the deployment
//!   document's expansion): the kind writes its own typed status, and calls what is its
//!   own; the moves, waits, restarts and endings are performed here once for all of them.

pub mod entity;
pub mod plan;

pub use entity::*;
pub use plan::*;

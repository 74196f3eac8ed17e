//! The runtime every `*Ops` kind shares: the phase machine (Pending → Running →
//! Succeeded/Failed/Aborted), the lock `status.activeOpsRef` on the target, queueing in
//! creation order, the six standard events, `spec.abort`, the finalizer, and the driver
//! that runs a kind's step graph.
//!
//! A kind plugs in twice:
//! - [`OpsResource`] says what its target is, where its common status fields are, and how
//!   to read the target's lock;
//! - [`Steps`] gives, per step, an observation (reads only), a pure [`Steps::plan`] over it
//!   (with the kind's own events) and the one call a plan may ask for.
//!
//! A kind without a lock ([`OpsResource::LOCKS_TARGET`] false) is its own target: it runs
//! at once, and its finalizer goes when it ends.
//!
//! Finished operations are kept as a bounded history per target ([`history`]): the
//! runtime prunes beyond the namespace StorageCluster's `opsHistoryLimit` and
//! `opsRetention` whenever it looks at a finished operation.
//!
//! The decisions are pure functions ([`gate`], [`queue_ahead`], [`running`]) tested without
//! an API server; [`runtime`] is the thin I/O around them.
//!
//! The plan a step returns is the machine runtime's ([`crate::runtime::machine`]), with
//! the kind's own status fields as an untyped map; the entity machines run the same plan
//! in the runtime's entity mode.

pub mod decide;
pub mod history;
pub mod kind;
pub mod metrics;
pub mod retry;
pub mod runtime;

pub use decide::*;
pub use kind::*;
pub use retry::*;
pub use runtime::{Error, controller, reconcile, run};

#[cfg(test)]
mod tests;

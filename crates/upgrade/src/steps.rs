//! The steps of the upgrade and migrate stages, one module per stage: what each step
//! would do, whether it is done, whether it may run, and the change it makes. A step
//! without an `apply` is planned only: a run stops there.
//!
//! Every change reads the [`World`](crate::world::World) it is given, writes through the
//! client, and is safe to run again: a rerun after a kill finds part of its work done and
//! does the rest (every write is a merge of the wanted values or guarded by the object's
//! resourceVersion).

pub mod migrate;
mod shared;
pub mod upgrade;

pub use migrate::{HANDLE_ANNOTATION, SIZING_ANNOTATION};

use crate::step::Step;

/// Every step of both stages, in declaration order.
pub fn all() -> Vec<Step> {
    let mut all = upgrade::steps();
    all.extend(migrate::steps());
    all
}

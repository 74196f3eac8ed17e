//! Moving an installation of the Go operator (objects stored at
//! `storage.simplyblock.io/v1alpha1`) onto this operator.
//!
//! Two stages: **upgrade** (the conversion webhook, the CRDs serving v1alpha2, this
//! operator in place of the Go one) and **migrate** (after a person has checked the upgrade:
//! the retired kinds absorbed, ownership moved from StorageNodeSets to StorageClusters, keys
//! respelled, storage rewritten to v1alpha2). Each stage is a set of [`step::Step`]s ordered by
//! what they require; a stage containing a blocked step is refused as a whole.
//!
//! Planning is pure: [`world::observe`] reads the cluster once into a [`world::World`], and
//! [`checks`], [`plan::plan`] and [`preflight::assess`] are functions of it.

pub mod checks;
pub mod go_installation;
pub mod plan;
pub mod preflight;
pub mod record;
pub mod run;
pub mod step;
pub mod steps;
pub mod world;

pub use plan::{Plan, order, plan};
pub use preflight::{Report, assess, preflight};
pub use step::{Action, Context, Helm, Options, Refusal, Stage, Step};
pub use world::{Target, World, observe};

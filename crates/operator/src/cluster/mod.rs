//! StorageCluster: the creation machine, the steady state (and the history of its
//! operations) and the teardown.

pub mod controller;
pub mod history;
pub mod observe;
pub mod ops;
pub mod params;

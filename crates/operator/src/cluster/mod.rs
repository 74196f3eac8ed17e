//! StorageCluster: the creation machine, the steady state and the teardown.

pub mod controller;
pub mod observe;
pub mod ops;
pub mod params;

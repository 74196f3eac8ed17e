//! StorageCluster: the creation machine, the steady state (and the history of its
//! operations), the teardown, and the storage-node workload the cluster runs on its workers.

pub mod controller;
pub mod creation;
pub mod history;
pub mod identity;
pub mod observe;
pub mod ops;
pub mod params;
pub mod status;
pub mod workload;

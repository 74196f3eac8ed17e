//! StorageCluster: the creation machine, the steady state (and the history of its
//! operations), and the teardown (the storage-node workload it runs on its workers is [`crate::workload`]).

pub mod controller;
pub mod creation;
pub mod history;
pub mod identity;
pub mod observe;
pub mod ops;
pub mod params;
pub mod status;

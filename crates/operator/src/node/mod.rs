//! StorageNode: provisioning and steady state, and the storage-node workload.

pub mod controller;
pub mod machine;
pub mod provisioning;
pub mod serving;
pub mod workload;

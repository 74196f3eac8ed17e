//! StorageNode: provisioning and steady state, and its operations (StorageNodeOps).

pub mod controller;
pub mod machine;
pub mod maintenance_trigger;
pub mod ops;
pub mod provisioning;

//! StorageNode: provisioning and steady state.

pub mod controller;
pub mod machine;
pub mod provisioning;

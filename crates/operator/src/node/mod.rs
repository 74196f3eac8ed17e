//! StorageNode: provisioning and steady state.

pub mod controller;
pub mod provisioning;

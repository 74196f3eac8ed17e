//! StorageNode: provisioning and steady state.

pub mod client_tls;
pub mod controller;
pub mod machine;
pub mod provisioning;

//! The integration tests of this crate, one binary: a module per area.

mod behaviour;
mod common;
mod contract;
mod faults;
mod kill9;
mod labels_kube;
mod tls;
mod volume_files;

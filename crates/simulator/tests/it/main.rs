//! The integration tests of this crate, one binary: a module per area.

mod backups;
mod behaviour;
mod common;
mod contract;
mod device_fail;
mod faults;
mod informer;
mod kill9;
mod labels_kube;
mod logs;
mod stats;
mod stream;
mod sync_sites;
mod tls;
mod two_sites;
mod volume_files;

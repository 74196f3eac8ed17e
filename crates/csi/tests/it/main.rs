//! The integration tests of this crate, one binary: a module per area.

mod binary;
mod claims;
mod common;
mod csiaddons;
mod driver;
mod group_snapshots;
mod metrics;
mod replication;
mod sanity;
mod secret;
mod sites;

//! The integration tests of this crate, one binary: a module per area.

mod binary;
mod common;
mod csiaddons;
mod driver;
mod replication;
mod sanity;
mod secret;
mod sites;

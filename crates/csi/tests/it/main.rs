//! The integration tests of this crate, one binary: a module per area.

mod binary;
mod common;
mod driver;
mod sanity;
mod secret;

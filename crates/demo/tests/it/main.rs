//! The integration tests of this crate, one binary: a module per area.

mod agreement;
mod chart;
mod demo;

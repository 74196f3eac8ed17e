//! The integration tests of this crate, one binary: a module per area.

mod observability;

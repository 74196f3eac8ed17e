//! The integration tests of this crate, one binary: a module per area.

mod certmanager;
mod lifecycle;
mod node;
mod ocm;
mod standin;

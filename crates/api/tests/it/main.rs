//! The integration tests of this crate, one binary: a module per area.

mod backups;
mod cel;
mod crds;
mod devices;
mod install_kinds;
mod pvops;
mod sites;
mod support;
mod tfo;

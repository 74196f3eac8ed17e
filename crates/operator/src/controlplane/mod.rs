//! ControlPlane: where the simplyblock control plane runs and how every client reaches
//! it. The controller installs a local control plane (the objects built purely in
//! [`manifests`], the steps decided purely in [`plan`]) or connects to a managed one, and
//! publishes the client every other controller calls through ([`crate::runtime::link`]).
//! ControlPlaneOps ([`ops`]) restarts, upgrades and backs up a local one.

pub mod controller;
pub mod manifests;
pub mod names;
pub mod ops;
pub mod plan;
pub mod reach;

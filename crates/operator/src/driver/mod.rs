//! SimplyblockDriver: the CSI driver installed in the cluster, its controller plugin,
//! node plugins, accounts, roles and registration; one per cluster.
//!
//! [`names`], [`objects`] and [`manifests`] say what the driver consists of, and [`rbac`]
//! who may do what. Pure.

pub mod manifests;
pub mod names;
pub mod objects;
pub mod rbac;

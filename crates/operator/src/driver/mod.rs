//! SimplyblockDriver: the CSI driver installed in the cluster, its controller plugin,
//! node plugins, accounts, roles and registration; one per cluster.
//!
//! [`names`], [`objects`] and [`manifests`] say what the driver consists of, [`rbac`]
//! who may do what, [`adoption`] how a Helm install is taken over and [`compare`] when an
//! object needs writing; [`plan`] decides a pass from an observed cluster. Pure.

pub mod adoption;
pub mod compare;
pub mod manifests;
pub mod names;
pub mod objects;
pub mod plan;
pub mod rbac;

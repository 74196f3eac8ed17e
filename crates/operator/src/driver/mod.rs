//! SimplyblockDriver: the CSI driver installed in the cluster, its controller plugin,
//! node plugins, accounts and registration; one per cluster. Its accounts' roles and
//! bindings are the Helm chart's, which the controller checks are in place.
//!
//! [`names`], [`objects`] and [`manifests`] say what the driver consists of, [`rbac`]
//! who may do what (and the chart's roles), [`adoption`] how a Helm install is taken over and [`compare`] when an
//! object needs writing; [`plan`] decides a pass from an [`observe`]d cluster, and
//! [`controller`] carries it out. Everything but `observe` and `controller` is pure.

pub mod adoption;
pub mod compare;
pub mod controller;
pub mod manifests;
pub mod metrics;
pub mod names;
pub mod objects;
pub mod observe;
pub mod plan;
pub mod rbac;

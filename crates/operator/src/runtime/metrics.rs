//! The operator's metrics registry: [`simplyblock_telemetry::metrics`], one per operator
//! (owned by its [`crate::runtime::context::Context`]), rendered at `/metrics`.
//!
//! Every controller run by [`crate::runtime::kit`] writes `simplyblock_reconcile_*`; the
//! Ops kinds add theirs ([`crate::runtime::ops::metrics`]), and so do the entities.

pub use simplyblock_telemetry::metrics::*;

//! What simplyblock's binaries tell the outside world.
//!
//! [`catalogue`] declares every metric family any binary exports: its name, type, labels,
//! meaning and exporter. The documentation, the chart's alerts and dashboards, and the
//! registries that write the families are all held to it. [`logs`] sets up how every
//! binary writes its logs.

pub mod catalogue;
pub mod logs;
pub mod metrics;

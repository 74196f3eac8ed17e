//! The simplyblock operator: the controllers that reconcile the storage.simplyblock.io API
//! against the simplyblock control plane, and the admission webhooks that guard it.
//!
//! One module per domain; pure decisions (`validation`, plans) live apart from the I/O
//! that reads the world and writes the result.

pub mod assembly;
pub mod backup;
pub mod cluster;
pub mod controlplane;
pub mod crds;
pub mod csi_secret;
pub mod deployment;
pub mod device;
pub mod dr;
pub mod driver;
pub mod fleet;
pub mod metrics_server;
pub mod metricsapi;
pub mod node;
pub mod pool;
pub mod preflight;
pub mod runtime;
pub mod site;
pub mod uninstall;
pub mod volume_ops;
pub mod webhooks;
pub mod workload;

pub use assembly::{Config, run};

/// The environment variable naming the log format of every binary (the chart's
/// `logFormat`): `json` or `text`.
pub use simplyblock_telemetry::logs::LOG_FORMAT_ENV;

//! The simplyblock operator: the controllers that reconcile the storage.simplyblock.io API
//! against the simplyblock control plane, and the admission webhooks that guard it.
//!
//! One module per domain; pure decisions (`validation`, plans) live apart from the I/O
//! that reads the world and writes the result.

pub mod assembly;
pub mod ca;
pub mod cluster;
pub mod context;
pub mod controlplane;
pub mod crash;
pub mod crds;
pub mod csi_secret;
pub mod deployment;
pub mod device;
pub mod dr;
pub mod driver;
pub mod events;
pub mod kit;
pub mod link;
pub mod metrics;
pub mod metrics_server;
pub mod node;
pub mod ops;
pub mod pool;
pub mod preflight;
pub mod serving;
pub mod site;
pub mod streams;
pub mod uninstall;
pub mod volume_ops;
pub mod webhooks;

pub use assembly::{Config, run};

/// The environment variable naming the log format of every binary (the chart's
/// `logFormat`): `json` or `text`.
pub const LOG_FORMAT_ENV: &str = "SIMPLYBLOCK_LOG_FORMAT";

/// What can go wrong in the operator's own machinery (controllers report their domain
/// errors in status and events instead).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("TLS setup of the webhook server failed: {0}")]
    Tls(String),
    #[error("the {server} could not listen on {addr}: {source}")]
    Listen {
        /// Which server: the webhook server, the metrics server.
        server: &'static str,
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("reading {what} from the Kubernetes API failed: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
}

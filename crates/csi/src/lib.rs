//! The simplyblock CSI driver (`csi.simplyblock.io`): the CSI Identity, Controller and
//! Node services over the control plane's REST API, two attachers behind one trait
//! (NVMe-oF for production, loop devices for tests and the demo), and the filesystem
//! layer that formats only proven-blank devices.
//!
//! Pure logic (handles, NQNs, parameters, capability checks, probe classification,
//! command building, sysfs and mountinfo parsing, error mapping) lives apart from the
//! code that runs commands or talks to the control plane, and is unit-tested on its own.

pub mod addons_identity;
pub mod attach;
pub mod caps;
pub mod chain;
pub mod claim;
pub mod cli;
pub mod clusters;
pub mod controller;
pub mod error;
pub mod exec;
pub mod fs;
pub mod group_snapshot;
pub mod handle;
pub mod identity;
pub mod locks;
pub mod metrics;
pub mod metrics_http;
pub mod mkfs_options;
pub mod node;
pub mod params;
pub mod proto;
pub mod pvc;
pub mod record;
pub mod recovery;
pub mod replication;
pub mod replication_params;
pub mod server;
pub mod topology;
pub mod volume_group;

pub use clusters::install_crypto_provider;
pub use error::{CsiError, Result};
pub use server::{Driver, Mode, NodeConfig, serve, serve_measured, socket_path};

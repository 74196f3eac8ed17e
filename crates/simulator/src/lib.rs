//! `sbsim`: a faithful simulator of the simplyblock control plane's REST API
//! (`/api/v2`, after sbcli main), its workers' storage-node APIs, and a fleet of
//! simulated workers. It keeps the control plane's state machines and quirks, persists
//! state under a directory (surviving `kill -9`), runs on an injectable clock, and takes
//! scripted, seeded faults. See the crate README for the command line and admin routes.

pub mod admin;
pub mod backups;
pub mod calllog;
pub mod clock;
pub mod clones;
pub mod cycles;
pub mod engine;
pub mod error;
pub mod faults;
pub mod fleet;
pub mod http;
pub mod jobs;
pub mod labels;
pub mod model;
pub mod objstore;
pub mod openapi;
pub mod paths;
pub mod render;
pub mod replicated;
pub mod reply;
pub mod rng;
pub mod routes;
pub mod sim;
pub mod stats;
pub mod store;
pub mod stream;
pub mod volfiles;

pub use error::SimError;
pub use http::{Server, ServerTls};
pub use sim::{DEFAULT_ENROLLMENT_LABEL, Sim, SimConfig, Timings};

/// Install ring as the process-wide rustls provider (kube's client asks for the default).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

//! Typed async client of the simplyblock control plane's REST API (`/api/v2`) and of a
//! worker's storage-node API, as the operator and the CSI driver use them.
//!
//! Every call carries the bearer token. Reads (GET) are retried while the server is
//! unavailable; writes are sent once, because most are not idempotent (a second
//! node add or cluster create does harm). Errors are classified by what a caller does
//! next ([`Error`]), including the server's quirks: trailing-slash 307 redirects are
//! followed, plain-text 500s become opaque [`Error::Refused`], and the quotes a Python
//! `KeyError` leaves around not-found messages are stripped.

mod client;
mod error;
pub mod informer;
mod redacted;
mod response;
pub mod routes;
mod snode;
pub mod sse;
mod tls;
pub mod types;

pub use client::{
    Client, ClientConfig, IoStat, NodeRemoveOptions, draw, latest_iostat, retry_delay,
};
pub use error::{Error, Result, message_from_body};
pub use informer::{Changes, Informer, InformerConfig, Scope, Subscription};
pub use redacted::Redacted;
pub use reqwest::Method;
pub use response::RawResponse;
pub use snode::{SnodeClient, SnodeConfig};
pub use tls::TlsConfig;
pub use types::*;
pub use url::Url;
pub use uuid::Uuid;

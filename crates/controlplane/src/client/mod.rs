//! The `/api/v2` client. `config` says how to reach the control plane, `retry` when a read
//! is tried again, and `transport` holds the [`Client`] and the way every call goes
//! (sending, retrying, reading and classifying answers, event streams). Each resource's
//! calls are their own module, cut as the simulator's routes are; every path comes from
//! [`crate::routes`].

mod backup;
mod cluster;
mod config;
mod device;
mod group;
mod meta;
mod migration;
mod node;
mod pool;
mod replication;
mod retry;
mod snapshot;
mod stats;
mod sync;
mod task;
mod transport;
mod volume;

pub use config::ClientConfig;
pub use node::NodeRemoveOptions;
pub use retry::{draw, retry_delay};
pub use stats::{IoStat, latest_iostat};
pub use transport::Client;

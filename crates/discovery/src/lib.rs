//! Discovery for simplyblock: what a worker has, and what a deployment could be made of it.
//!
//! Three layers, kept apart so each can be tested on its own:
//!
//! * [`probe`] reads `/sys`, `/proc` and `/dev` under a root path and writes a [`Report`].
//!   It decides nothing: every device is reported with every ground it is refused on.
//! * [`plan`] is a pure function from reports, Kubernetes Nodes and the run's
//!   `DiscoverSpec` to a draft `ClusterDeploymentConfig`, its notes and its refusals.
//! * [`run`] packages the planner for the OperatorOps controller and the first-install
//!   bootstrap: it takes data already read from the API and returns what to write and
//!   which events to emit.

pub mod configmap;
mod error;
pub mod parse;
pub mod plan;
pub mod probe;
pub mod report;
pub mod run;
pub mod size;
pub mod worker;

pub use error::Error;
pub use probe::probe;
pub use report::{REPORT_VERSION, Report, decode, encode};

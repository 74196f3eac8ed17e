//! The machinery every domain's controllers run on, apart from the domains: the context
//! and scope of a running operator, the controller kit and its one error, the step-machine
//! runtime (its plan and entity mode in `machine`, its `*Ops` mode in `ops`), metrics,
//! events, the control-plane streams and links, the serving and CA certificates, and the
//! kill points of the crash tests.
//!
//! Nothing here imports a domain module (`cluster`, `node`, …): the domains sit above.

pub mod ca;
pub mod conditions;
pub mod context;
pub mod crash;
pub mod error;
pub mod events;
pub mod kit;
pub mod link;
pub mod machine;
pub mod metrics;
pub mod ops;
pub mod serving;
pub mod streams;

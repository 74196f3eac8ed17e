//! ClusterDeploymentConfig and OperatorOps: documents, their validation and expansion.

pub mod controller;
pub mod discovery;
pub mod expansion;
pub mod metrics;
pub mod plan;
pub mod validation;
pub mod world;

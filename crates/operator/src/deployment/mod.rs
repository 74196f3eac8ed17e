//! ClusterDeploymentConfig and OperatorOps: documents, their validation and expansion.

pub mod validation;

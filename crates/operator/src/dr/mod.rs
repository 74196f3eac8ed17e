//! Disaster recovery on a hub: the kinds that act across clusters through Open Cluster
//! Management, and the check that this API server is such a hub.

pub mod bubble;
pub mod hub;
pub mod site_deployment;

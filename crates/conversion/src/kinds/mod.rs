//! The converting kinds and their rules.

mod control_plane;
mod storage_backup;
mod storage_cluster;
mod storage_cluster_ops;
mod storage_node;
mod storage_node_ops;
mod storage_pool;

use crate::Kind;

/// Every kind served at both versions.
pub static ALL: &[Kind] = &[
    storage_pool::KIND,
    storage_cluster::KIND,
    storage_node::KIND,
    storage_cluster_ops::KIND,
    control_plane::KIND,
    storage_node_ops::KIND,
    storage_backup::KIND,
];

//! The integration tests of this crate, one binary: a module per area.

mod random_graphs;
mod storage_cluster_ops;

//! I/O statistics: the latest samples of a cluster, pool, storage node or volume
//! (`GET …/iostats`). The history is untyped in the OpenAPI document; [`IoStat`] reads the
//! fields sbcli's statistics records carry.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::transport::Client;
use crate::error::Result;
use crate::routes;

/// One I/O sample (sbcli's `StatsObject`): rates per second over the sample's period.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct IoStat {
    /// Seconds since the epoch.
    pub date: i64,
    pub read_bytes_ps: f64,
    pub write_bytes_ps: f64,
    pub read_io_ps: f64,
    pub write_io_ps: f64,
    /// Average read latency, microseconds.
    pub read_latency_ps: f64,
    /// Average write latency, microseconds.
    pub write_latency_ps: f64,
}

/// The newest of `samples` (the history's order is not promised).
pub fn latest_iostat(samples: Vec<IoStat>) -> Option<IoStat> {
    samples.into_iter().max_by_key(|s| s.date)
}

impl Client {
    pub async fn cluster_iostats(&self, cluster: Uuid) -> Result<Vec<IoStat>> {
        self.get(&format!("{}iostats", routes::cluster(cluster)))
            .await
    }

    pub async fn pool_iostats(&self, cluster: Uuid, pool: Uuid) -> Result<Vec<IoStat>> {
        self.get(&format!("{}iostats", routes::pool(cluster, pool)))
            .await
    }

    pub async fn node_iostats(&self, cluster: Uuid, node: Uuid) -> Result<Vec<IoStat>> {
        self.get(&format!("{}iostats", routes::storage_node(cluster, node)))
            .await
    }

    pub async fn volume_iostats(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
    ) -> Result<Vec<IoStat>> {
        self.get(&format!("{}iostats", routes::volume(cluster, pool, volume)))
            .await
    }
}

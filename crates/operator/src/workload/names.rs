//! The names the storage-node workload goes by. The controller, the manifests, the serving
//! certificate and the node controller's addresses all spell them, so they live below all
//! of those.

pub use simplyblock_api::keys::{
    CLUSTER_LABEL, ENROLLMENT_LABEL, LEGACY_ENROLLMENT_LABEL, MANAGED_BY_LABEL, NAMESPACE_LABEL,
};
/// The headless Service through which the control plane reaches each worker.
pub const SERVICE_NAME: &str = "simplyblock-storage-node-api";
/// The managed-by value of the workload's objects, which its controller watches by.
pub const MANAGED_BY: &str = simplyblock_api::keys::MANAGED_BY_STORAGE_CLUSTER;
/// The storage-node image used when neither the cluster nor the ControlPlane names one.
pub const DEFAULT_IMAGE: &str = "quay.io/simplyblock-io/simplyblock:latest";

/// The ServiceAccount the storage-node pods of `cluster` run as.
pub fn account(cluster: &str) -> String {
    format!("simplyblock-storage-node-{cluster}")
}

/// `simplyblock.io/storage-node-uuid.<cluster uuid>.<slot>`: the topology label the CSI
/// driver reads. Its key never changes for a worker's lifetime.
pub fn topology_label(cluster_uuid: &str, slot: i32) -> String {
    simplyblock_api::keys::storage_node_topology_key(cluster_uuid, slot)
}

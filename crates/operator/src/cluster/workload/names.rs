//! The names the storage-node workload goes by. The controller, the manifests, the serving
//! certificate and the node controller's addresses all spell them, so they live below all
//! of those.

/// The label whose value names the cluster a worker serves; the DaemonSet selects on it.
pub const ENROLLMENT_LABEL: &str = "io.simplyblock.storagenodeset";
/// The headless Service through which the control plane reaches each worker.
pub const SERVICE_NAME: &str = "simplyblock-storage-node-api";
/// The label naming the cluster an object of the workload belongs to.
pub const CLUSTER_LABEL: &str = "storage.simplyblock.io/cluster";
/// The label the workload controller watches its Secrets by, and its value.
pub const MANAGED_BY_LABEL: &str = "storage.simplyblock.io/managed-by";
pub const MANAGED_BY: &str = "storagecluster";
/// The storage-node image used when neither the cluster nor the ControlPlane names one.
pub const DEFAULT_IMAGE: &str = "quay.io/simplyblock-io/simplyblock:latest";

/// `storage.simplyblock.io/storage-node-uuid.<cluster uuid>.<slot>`: the topology label
/// the CSI driver reads. Its key never changes for a worker's lifetime.
pub fn topology_label(cluster_uuid: &str, slot: i32) -> String {
    format!("storage.simplyblock.io/storage-node-uuid.{cluster_uuid}.{slot}")
}

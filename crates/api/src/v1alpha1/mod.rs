//! The `storage.simplyblock.io/v1alpha1` shapes, as the Go operator stored them.
//!
//! Every fleet that ran the Go operator holds its objects at v1alpha1. These types describe
//! those objects exactly (field names, types, enums and defaults of the shipped CRDs), so the
//! CRDs can serve v1alpha1 beside the v1alpha2 hub while an installation is moved over, and
//! the conversion can be tested against every shape v1alpha1 can say. Nothing in the operator
//! reads or writes them: it speaks v1alpha2 only.

pub mod control_plane;
pub mod storage_backup;
pub mod storage_cluster;
pub mod storage_cluster_ops;
pub mod storage_node;
pub mod storage_node_ops;
pub mod storage_node_set;
pub mod storage_pool;

pub use control_plane::ControlPlane;
pub use storage_backup::StorageBackup;
pub use storage_cluster::StorageCluster;
pub use storage_cluster_ops::StorageClusterOps;
pub use storage_node::StorageNode;
pub use storage_node_ops::StorageNodeOps;
pub use storage_pool::StoragePool;

/// The version these types are served at.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of a v1alpha1 object.
pub const API_VERSION: &str = "storage.simplyblock.io/v1alpha1";

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The v1alpha1 CRD of every converting kind: each is served beside the hub's version of
/// the same CRD.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        StorageCluster::crd(),
        StorageClusterOps::crd(),
        StorageNode::crd(),
        StorageNodeOps::crd(),
        StoragePool::crd(),
        ControlPlane::crd(),
        StorageBackup::crd(),
    ]
}

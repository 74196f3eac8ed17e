//! The `metrics.simplyblock.io/v1alpha2` aggregated API, served by the operator process:
//! capacity readings of volumes (`lvm`, named after their PersistentVolumeClaim), clusters
//! (`scm`), pools (`spm`), storage nodes (`snm`) and devices (`sdm`), each named and
//! namespaced like the object it measures, computed when asked and never stored.
//!
//! The API server reaches it through the APIService `v1alpha2.metrics.simplyblock.io`
//! (see [`server`]); [`auth`] checks who asks and whether they may, [`observe`] reads,
//! [`readings`] builds the answers.
//!
//! Cost of one get or list: one list of the measured kind from the API server (its label
//! and field selectors passed along), one more for the StorageClusters (`snm`, `spm`) or
//! the PersistentVolumes (`lvm`), and from the control plane one call per cluster (`scm`:
//! the cluster, `snm`: its storage-node list, `spm`: its pool list), per storage node
//! (`sdm`: the control plane lists devices per node only) or per bound claim (`lvm`: the
//! volume's own record, as the volume list carries no capacity). Nothing is cached: every
//! answer is the control plane's latest sample.

pub mod auth;
pub mod observe;
pub mod readings;
pub mod server;

/// The API group.
pub const GROUP: &str = "metrics.simplyblock.io";
/// The one version served.
pub const VERSION: &str = "v1alpha2";
/// The chart's Service in front of it, which the APIService names.
pub const SERVICE: &str = "simplyblock-operator-metrics-api";
/// The APIService's name.
pub const API_SERVICE: &str = "v1alpha2.metrics.simplyblock.io";

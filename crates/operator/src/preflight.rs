//! `simplyblock-operator preflight`: what a node and the cluster need before the operator
//! is installed, every check made and every problem reported at once.
//!
//! [`assess`] turns an [`Observation`] into one [`Finding`] per check that applies, purely;
//! [`observe`] (in `observe.rs`) reads the node's /sys and /proc, dials the image
//! registries and asks the Kubernetes API. A check the caller may not make (the API server
//! says 403) is reported as not checked, not as a problem; one that could not be made for
//! another reason is a problem, because nothing then vouches for what it guards.

mod assess;
mod observation;
mod observe;

pub use assess::*;
pub use observation::*;
pub use observe::{
    NodeRoots, REGISTRY_TIMEOUT, observe, observe_cluster, observe_node, observe_registries,
};

/// Looks at what `options` asks for and reports on it: the node under `roots`, the cluster
/// through `client` (or `Err`: why there is no client).
pub async fn check(
    options: &Options,
    roots: &NodeRoots,
    client: Result<&kube::Client, String>,
) -> Report {
    assess(options, &observe(options, roots, client).await)
}

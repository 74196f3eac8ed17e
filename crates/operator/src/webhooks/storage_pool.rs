//! StoragePool admission, every problem at once:
//! - on create, `spec.clusterRef` names a StorageCluster of the pool's namespace (it is
//!   immutable, so what holds at creation holds after; a cluster not yet in the control
//!   plane is admitted, and the pool waits for it);
//! - every name of `spec.allowedNodes` can be a Node's name.
//!
//! A pool the control plane created without host authentication cannot enforce
//! allowedNodes given to it later; the controller says so on the pool, since only the
//! control plane knows how the pool was created.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhook;
use kube::api::{Api, DynamicObject};
use kube::core::admission::{AdmissionReview, Operation};
use simplyblock_api::names::is_dns_subdomain;
use simplyblock_api::{StorageCluster, StoragePool};

use super::{WebhookContext, typed};

/// The path of the StoragePool webhook.
pub const PATH: &str = "/validate-storage-simplyblock-io-v1alpha2-storagepool";
/// Its name in the webhook configuration.
pub const NAME: &str = "vstoragepool.simplyblock.io";

/// `webhook` answering CREATE and UPDATE.
pub fn create_and_update(webhook: ValidatingWebhook) -> ValidatingWebhook {
    super::answering(webhook, &["CREATE", "UPDATE"])
}

/// The refusal of a pool whose cluster does not exist.
pub fn no_cluster(cluster_ref: &str, namespace: &str) -> String {
    format!(
        "spec.clusterRef {cluster_ref:?} does not name a StorageCluster in namespace {namespace:?}; create the StorageCluster first or name an existing one"
    )
}

/// What is wrong with the pool's spec by itself.
pub fn problems(pool: &StoragePool) -> Vec<String> {
    pool.spec
        .allowed_nodes
        .iter()
        .filter(|name| !is_dns_subdomain(name))
        .map(|name| {
            format!(
                "spec.allowedNodes entry {name:?} cannot be a Node's name (a lowercase DNS subdomain of at most 253 characters); write the name `kubectl get nodes` shows"
            )
        })
        .collect()
}

pub async fn review(
    State(ctx): State<Arc<WebhookContext>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    super::answer(review, |req| async move {
        let Some(new) = req.object.as_ref() else {
            return Ok(());
        };
        let pool = typed::<StoragePool>(new)?;
        let mut problems = problems(&pool);
        if req.operation == Operation::Create {
            let namespace = req.namespace.clone().unwrap_or_default();
            let cluster_ref = &pool.spec.cluster_ref;
            let found = Api::<StorageCluster>::namespaced(ctx.client.clone(), &namespace)
                .get_opt(cluster_ref)
                .await
                .map_err(|e| {
                    format!("StorageCluster {cluster_ref} in namespace {namespace} could not be read ({e}); try again")
                })?;
            if found.is_none() {
                problems.insert(0, no_cluster(cluster_ref, &namespace));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use simplyblock_api::storage_pool::StoragePoolSpec;

    #[test]
    fn every_bad_node_name_is_reported_at_once() {
        let pool = |nodes: &[&str]| {
            StoragePool::new(
                "p1",
                StoragePoolSpec {
                    cluster_ref: "sb".into(),
                    allowed_nodes: nodes.iter().map(|s| s.to_string()).collect(),
                    limits: None,
                    volume_defaults: None,
                },
            )
        };
        let found = problems(&pool(&["worker-1", "Worker_2", ""]));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("\"Worker_2\""), "{found:?}");
        assert!(problems(&pool(&["worker-1"])).is_empty());
    }
}

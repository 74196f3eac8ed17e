//! StorageBackupPolicy admission, on create: `spec.clusterRef` names a StorageCluster of
//! the policy's namespace (it is immutable, so what holds at creation holds after).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhook;
use kube::api::{Api, DynamicObject};
use kube::core::admission::{AdmissionReview, Operation};
use simplyblock_api::StorageCluster;
use simplyblock_api::storage_backup_policy::StorageBackupPolicy;

use super::{WebhookContext, typed};

/// The path of the StorageBackupPolicy webhook.
pub const PATH: &str = "/validate-storage-simplyblock-io-v1alpha2-storagebackuppolicy";
/// Its name in the webhook configuration.
pub const NAME: &str = "vstoragebackuppolicy.simplyblock.io";

/// `webhook` answering CREATE only.
pub fn create_only(webhook: ValidatingWebhook) -> ValidatingWebhook {
    super::answering(webhook, &["CREATE"])
}

/// The refusal of a policy whose cluster does not exist.
pub fn no_cluster(cluster_ref: &str, namespace: &str) -> String {
    format!(
        "spec.clusterRef {cluster_ref:?} does not name a StorageCluster in namespace {namespace:?}"
    )
}

pub async fn review(
    State(ctx): State<Arc<WebhookContext>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    super::answer(review, |req| async move {
        let (Operation::Create, Some(new)) = (&req.operation, req.object.as_ref()) else {
            return Ok(());
        };
        let policy = typed::<StorageBackupPolicy>(new)?;
        let namespace = req.namespace.clone().unwrap_or_default();
        let cluster_ref = &policy.spec.cluster_ref;
        let found = Api::<StorageCluster>::namespaced(ctx.client.clone(), &namespace)
            .get_opt(cluster_ref)
            .await
            .map_err(|e| {
                format!("StorageCluster {cluster_ref} in namespace {namespace} could not be read ({e}); try again")
            })?;
        match found {
            Some(_) => Ok(()),
            None => Err(no_cluster(cluster_ref, &namespace)),
        }
    })
    .await
}

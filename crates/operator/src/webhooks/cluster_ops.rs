//! StorageClusterOps DELETE guard: an operation that is running a step which cannot be
//! aborted (a call in flight on the control plane) cannot be deleted, since deleting it
//! would drop the lock and the audit record while the control plane still works on it.
//! Terminal and Pending operations, and Running ones on an abortable step, may go (the
//! finalizer releases the lock).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionReview, Operation};
use simplyblock_api::StorageClusterOps;
use simplyblock_api::storage_cluster_ops::GRAPHS;

use super::WebhookContext;

/// The path of the StorageClusterOps DELETE guard.
pub const PATH: &str = "/validate-storage-simplyblock-io-v1alpha2-storageclusterops";
/// Its name in the webhook configuration.
pub const NAME: &str = "vstorageclusterops.simplyblock.io";

/// `webhook` answering DELETE only (the guard has nothing to say on create or update).
pub fn delete_only(
    webhook: k8s_openapi::api::admissionregistration::v1::ValidatingWebhook,
) -> k8s_openapi::api::admissionregistration::v1::ValidatingWebhook {
    super::answering(webhook, &["DELETE"])
}

pub async fn review(
    State(_ctx): State<Arc<WebhookContext>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    super::answer(review, |req| async move {
        match (&req.operation, req.old_object.as_ref()) {
            (Operation::Delete, Some(old)) => super::delete_verdict(old, on_delete),
            _ => Ok(()),
        }
    })
    .await
}

/// Whether `op` may be deleted now; the refusal names the step and what to do.
pub fn on_delete(op: &StorageClusterOps) -> Result<(), String> {
    super::keep_while_unabortable(
        op,
        &GRAPHS,
        &format!(
            "the control plane is acting on StorageCluster {}",
            op.spec.cluster_ref
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(action: &str, phase: &str, step: Option<&str>) -> StorageClusterOps {
        let mut status = json!({"phase": phase});
        if let Some(step) = step {
            status["step"] = json!({"state": step});
        }
        serde_json::from_value(json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "StorageClusterOps",
            "metadata": {"name": "op"},
            "spec": {"clusterRef": "sb", "action": action},
            "status": status,
        }))
        .expect("op")
    }

    #[test]
    fn only_a_running_op_on_an_unabortable_step_is_kept() {
        let refused = on_delete(&op("Shutdown", "Running", Some("Awaiting"))).expect_err("kept");
        assert!(refused.contains("step Awaiting"), "{refused}");
        assert!(refused.contains("spec.abort"), "{refused}");
        assert!(on_delete(&op("Shutdown", "Running", Some("Requesting"))).is_ok());
        assert!(on_delete(&op("Shutdown", "Succeeded", Some("Awaiting"))).is_ok());
        assert!(on_delete(&op("Restart", "Pending", None)).is_ok());
        assert!(on_delete(&op("RollingRestart", "Running", Some("Rebalancing"))).is_ok());
        let refused = on_delete(&op("Restart", "Running", Some("ShuttingDown"))).expect_err("kept");
        assert!(refused.contains("none in this action"), "{refused}");
    }
}

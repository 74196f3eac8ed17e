//! StorageDeviceOps admission. On create: the operation must name a StorageDevice of its
//! namespace (the reference is immutable, so a wrong one could never be corrected). On
//! delete: a running operation on a step its action cannot abort (the control plane is
//! acting on the device) is kept; terminal and Pending ones, and Running ones on an
//! abortable step, may go.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use kube::api::{Api, DynamicObject};
use kube::core::admission::{AdmissionReview, Operation};
use simplyblock_api::StorageDevice;
use simplyblock_api::storage_device_ops::{DECLARED, StorageDeviceOps};

use super::{WebhookContext, typed};

/// The path of the StorageDeviceOps webhook.
pub const PATH: &str = "/validate-storage-simplyblock-io-v1alpha2-storagedeviceops";
/// Its name in the webhook configuration.
pub const NAME: &str = "vstoragedeviceops.simplyblock.io";

pub async fn review(
    State(ctx): State<Arc<WebhookContext>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    super::answer(review, |req| async move {
        match (&req.operation, req.object.as_ref(), req.old_object.as_ref()) {
            (Operation::Create, Some(new), _) => {
                let op = typed::<StorageDeviceOps>(new)?;
                let namespace = req.namespace.clone().unwrap_or_default();
                let device = Api::<StorageDevice>::namespaced(ctx.client.clone(), &namespace)
                    .get_opt(&op.spec.device_ref)
                    .await
                    .map_err(|e| {
                        format!(
                            "StorageDevice {} could not be read ({e}); try again",
                            op.spec.device_ref
                        )
                    })?;
                on_create(&op, &namespace, device.is_some())
            }
            (Operation::Delete, _, Some(old)) => super::delete_verdict(old, on_delete),
            _ => Ok(()),
        }
    })
    .await
}

/// Whether `op` may be created, given whether the device it names exists.
pub fn on_create(
    op: &StorageDeviceOps,
    namespace: &str,
    device_exists: bool,
) -> Result<(), String> {
    if device_exists {
        return Ok(());
    }
    Err(format!(
        "spec.deviceRef names StorageDevice {}, which does not exist in namespace {namespace}; name one of `kubectl get storagedevices -n {namespace}`",
        op.spec.device_ref
    ))
}

/// Whether `op` may be deleted now; the refusal names the step and what to do. The steps
/// that keep it are its action's unabortable ones, the declared-only actions' included.
pub fn on_delete(op: &StorageDeviceOps) -> Result<(), String> {
    super::keep_while_unabortable(
        op,
        &DECLARED,
        &format!(
            "the control plane is acting on StorageDevice {}",
            op.spec.device_ref
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(action: &str, status: serde_json::Value) -> StorageDeviceOps {
        serde_json::from_value(json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "StorageDeviceOps",
            "metadata": {"name": "op"},
            "spec": {"deviceRef": "sb-w1-0-00000001", "action": action},
            "status": status,
        }))
        .expect("op")
    }

    fn running(step: &str) -> serde_json::Value {
        json!({"phase": "Running", "step": {"state": step}})
    }

    #[test]
    fn a_running_op_is_kept_exactly_on_its_actions_unabortable_steps() {
        for (action, step, kept) in [
            ("Restart", "Requesting", false),
            ("Restart", "Awaiting", true),
            ("Fail", "Removing", false),
            ("Fail", "Failing", true),
            ("Fail", "Awaiting", true),
            ("SelfTest", "Requesting", true),
            ("Replace", "AwaitingDevice", true),
            ("Migrate", "AwaitingMove", false),
            ("Migrate", "Attaching", true),
        ] {
            assert_eq!(
                on_delete(&op(action, running(step))).is_err(),
                kept,
                "{action} {step}"
            );
        }
        let refused = on_delete(&op("Fail", running("Failing"))).expect_err("kept");
        assert!(
            refused.contains("step Failing") && refused.contains("Removing"),
            "{refused}"
        );
        assert!(
            on_delete(&op(
                "Fail",
                json!({"phase": "Failed", "step": {"state": "Failing"}})
            ))
            .is_ok()
        );
    }

    #[test]
    fn a_missing_device_is_said() {
        let refused = on_create(&op("Fail", json!({})), "ns", false).expect_err("refused");
        assert!(
            refused.contains("StorageDevice sb-w1-0-00000001") && refused.contains("ns"),
            "{refused}"
        );
        assert!(on_create(&op("Fail", json!({})), "ns", true).is_ok());
    }
}

//! ControlPlaneOps admission. On create: the operation must name a ControlPlane of its
//! namespace that the operator installed (`source.local`); a managed control plane runs
//! elsewhere and is operated there. On delete: the guard every Ops kind has — a running
//! operation on a step that cannot be aborted (the control plane is acting on it) is
//! kept; terminal and Pending ones, and Running ones on an abortable step, may go.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use kube::api::{Api, DynamicObject};
use kube::core::admission::{AdmissionReview, Operation};
use simplyblock_api::control_plane::ControlPlane;
use simplyblock_api::control_plane_ops::{ControlPlaneOps, GRAPHS};

use super::{WebhookContext, typed};

/// The path of the ControlPlaneOps webhook.
pub const PATH: &str = "/validate-storage-simplyblock-io-v1alpha2-controlplaneops";
/// Its name in the webhook configuration.
pub const NAME: &str = "vcontrolplaneops.simplyblock.io";

/// `webhook` answering CREATE and DELETE.
pub fn create_and_delete(
    webhook: k8s_openapi::api::admissionregistration::v1::ValidatingWebhook,
) -> k8s_openapi::api::admissionregistration::v1::ValidatingWebhook {
    super::answering(webhook, &["CREATE", "DELETE"])
}

pub async fn review(
    State(ctx): State<Arc<WebhookContext>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    super::answer(review, |req| async move {
        match (&req.operation, req.object.as_ref(), req.old_object.as_ref()) {
            (Operation::Create, Some(new), _) => {
                let op = typed::<ControlPlaneOps>(new)?;
                let namespace = req.namespace.clone().unwrap_or_default();
                let target = Api::<ControlPlane>::namespaced(ctx.client.clone(), &namespace)
                    .get_opt(&op.spec.control_plane_ref)
                    .await
                    .map_err(|e| {
                        format!(
                            "ControlPlane {} could not be read ({e}); try again",
                            op.spec.control_plane_ref
                        )
                    })?;
                on_create(&op, &namespace, target.as_ref())
            }
            (Operation::Delete, _, Some(old)) => super::delete_verdict(old, on_delete),
            _ => Ok(()),
        }
    })
    .await
}

/// Whether `op` may be created against `target` (the ControlPlane it names, if any).
pub fn on_create(
    op: &ControlPlaneOps,
    namespace: &str,
    target: Option<&ControlPlane>,
) -> Result<(), String> {
    let name = &op.spec.control_plane_ref;
    let Some(target) = target else {
        return Err(format!(
            "spec.controlPlaneRef names ControlPlane {name}, which does not exist in namespace {namespace}; name the ControlPlane of this namespace (simplyblock)"
        ));
    };
    if !target.spec.source.is_local() {
        return Err(format!(
            "ControlPlane {name} is managed: its control plane runs elsewhere and is restarted, upgraded and backed up there; a ControlPlaneOps acts only on a control plane the operator installed (spec.source.local)"
        ));
    }
    Ok(())
}

/// Whether `op` may be deleted now; the refusal names the step and what to do.
pub fn on_delete(op: &ControlPlaneOps) -> Result<(), String> {
    super::keep_while_unabortable(
        op,
        &GRAPHS,
        &format!(
            "the control plane {} is being changed",
            op.spec.control_plane_ref
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(phase: &str, step: Option<&str>) -> ControlPlaneOps {
        let mut status = json!({"phase": phase});
        if let Some(step) = step {
            status["step"] = json!({"state": step});
        }
        serde_json::from_value(json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "ControlPlaneOps",
            "metadata": {"name": "up"},
            "spec": {"controlPlaneRef": "simplyblock", "action": "Upgrade",
                     "upgrade": {"image": "quay.io/simplyblock-io/simplyblock:2"}},
            "status": status,
        }))
        .expect("op")
    }

    fn control_plane(source: serde_json::Value) -> ControlPlane {
        serde_json::from_value(json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "ControlPlane",
            "metadata": {"name": "simplyblock"},
            "spec": {"source": source},
        }))
        .expect("control plane")
    }

    #[test]
    fn only_a_running_op_on_an_unabortable_step_is_kept() {
        let refused = on_delete(&op("Running", Some("Applying"))).expect_err("kept");
        assert!(refused.contains("step Applying"), "{refused}");
        assert!(refused.contains("Draining, Preflight"), "{refused}");
        assert!(on_delete(&op("Running", Some("Draining"))).is_ok());
        assert!(on_delete(&op("Failed", Some("Verifying"))).is_ok());
        assert!(on_delete(&op("Pending", None)).is_ok());
    }

    #[test]
    fn creation_needs_a_local_control_plane_of_the_namespace() {
        let o = op("Pending", None);
        let missing = on_create(&o, "sb", None).expect_err("no target");
        assert!(
            missing.contains("does not exist in namespace sb"),
            "{missing}"
        );
        let managed = control_plane(json!({"managed": {"endpoint": "https://cp.example"}}));
        let refused = on_create(&o, "sb", Some(&managed)).expect_err("managed");
        assert!(refused.contains("is managed"), "{refused}");
        let local =
            control_plane(json!({"local": {"image": "quay.io/simplyblock-io/simplyblock:1"}}));
        assert_eq!(on_create(&o, "sb", Some(&local)), Ok(()));
    }
}

//! StorageNodeOps admission. On create: the operation must name a StorageNode of its
//! namespace, and a Migrate a worker Node that exists (the references are immutable, so a
//! wrong one could never be corrected); a Remove's system-volume filter must pass
//! [`system_filter::compile`], since the drain deletes what it names. On update: `spec.remove`
//! stays as created. The CRD's rules say so at v1alpha2, but a write at v1alpha1 (its
//! `spec.drain`) is validated against v1alpha1's schema, which has no such rule; the
//! webhook sees every write at v1alpha2, converted. On delete: the guard every Ops kind has
//! — a running operation on a step that cannot be aborted (the control plane is acting on
//! the node, or a migration is re-pointing it) is kept; terminal and Pending ones, and
//! Running ones on an abortable step, may go.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject};
use kube::core::admission::{AdmissionReview, Operation};
use simplyblock_api::StorageNode;
use simplyblock_api::storage_node_ops::{GRAPHS, StorageNodeOps};

use super::{WebhookContext, typed};
use crate::node::ops::system_filter;

/// The path of the StorageNodeOps webhook.
pub const PATH: &str = "/validate-storage-simplyblock-io-v1alpha2-storagenodeops";
/// Its name in the webhook configuration.
pub const NAME: &str = "vstoragenodeops.simplyblock.io";

/// `webhook` answering CREATE, UPDATE and DELETE.
pub fn create_update_delete(
    webhook: k8s_openapi::api::admissionregistration::v1::ValidatingWebhook,
) -> k8s_openapi::api::admissionregistration::v1::ValidatingWebhook {
    super::answering(webhook, &["CREATE", "UPDATE", "DELETE"])
}

pub async fn review(
    State(ctx): State<Arc<WebhookContext>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    super::answer(review, |req| async move {
        match (&req.operation, req.object.as_ref(), req.old_object.as_ref()) {
            (Operation::Create, Some(new), _) => {
                let op = typed::<StorageNodeOps>(new)?;
                let namespace = req.namespace.clone().unwrap_or_default();
                let unreadable = |what: String| {
                    move |e: kube::Error| format!("{what} could not be read ({e}); try again")
                };
                let node = Api::<StorageNode>::namespaced(ctx.client.clone(), &namespace)
                    .get_opt(&op.spec.node_ref)
                    .await
                    .map_err(unreadable(format!("StorageNode {}", op.spec.node_ref)))?;
                let target = match &op.spec.migrate {
                    Some(m) => Some(
                        Api::<Node>::all(ctx.client.clone())
                            .get_opt(&m.target_worker_node)
                            .await
                            .map_err(unreadable(format!("Node {}", m.target_worker_node)))?
                            .is_some(),
                    ),
                    None => None,
                };
                on_create(&op, &namespace, node.as_ref(), target)
            }
            (Operation::Update, Some(new), Some(old)) => on_update(&old.data, &new.data),
            (Operation::Delete, _, Some(old)) => super::delete_verdict(old, on_delete),
            _ => Ok(()),
        }
    })
    .await
}

/// Whether `op` may be created: `node` is the StorageNode it names, if any;
/// `target_exists` whether a Migrate's target worker is a Node. Every problem is said.
pub fn on_create(
    op: &StorageNodeOps,
    namespace: &str,
    node: Option<&StorageNode>,
    target_exists: Option<bool>,
) -> Result<(), String> {
    let mut problems = Vec::new();
    if node.is_none() {
        problems.push(format!(
            "spec.nodeRef names StorageNode {}, which does not exist in namespace {namespace}; name one of `kubectl get storagenodes -n {namespace}`",
            op.spec.node_ref
        ));
    }
    if let (Some(m), Some(false)) = (&op.spec.migrate, target_exists) {
        problems.push(format!(
            "spec.migrate.targetWorkerNode names Node {}, which does not exist; name a worker of `kubectl get nodes`",
            m.target_worker_node
        ));
    }
    if let (Some(m), Some(node)) = (&op.spec.migrate, node)
        && m.target_worker_node == node.spec.worker_node
    {
        problems.push(format!(
            "spec.migrate.targetWorkerNode is {}, the worker StorageNode {} already runs on; name another worker",
            m.target_worker_node, op.spec.node_ref
        ));
    }
    if let Some(remove) = &op.spec.remove
        && let Err(refused) = system_filter::compile(&remove.system_volume_filter_regex)
    {
        problems.push(refused);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Whether an update from `old` to `new` (the objects' raw data) may go: `spec.remove` is
/// as it was created. Read raw, so an object that no longer parses can still lose its
/// finalizer.
pub fn on_update(old: &serde_json::Value, new: &serde_json::Value) -> Result<(), String> {
    let remove = |o: &serde_json::Value| o.get("spec").and_then(|s| s.get("remove")).cloned();
    if remove(old) == remove(new) {
        return Ok(());
    }
    Err("spec.remove is fixed at creation (at v1alpha1, spec.drain): the drain deletes the volumes its filter names, so an operation runs with the filter it was admitted with; create another operation with the filter you need".into())
}

/// Whether `op` may be deleted now; the refusal names the step and what to do.
pub fn on_delete(op: &StorageNodeOps) -> Result<(), String> {
    super::keep_while_unabortable(
        op,
        &GRAPHS,
        &format!(
            "the control plane is acting on StorageNode {}",
            op.spec.node_ref
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(spec: serde_json::Value, status: serde_json::Value) -> StorageNodeOps {
        serde_json::from_value(json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "StorageNodeOps",
            "metadata": {"name": "op"}, "spec": spec, "status": status,
        }))
        .expect("op")
    }

    #[test]
    fn only_a_running_op_on_an_unabortable_step_is_kept() {
        let spec = json!({"nodeRef": "sb-w1-0", "action": "Restart"});
        let running = |step: &str| json!({"phase": "Running", "step": {"state": step}});
        let refused = on_delete(&op(spec.clone(), running("Departing"))).expect_err("kept");
        assert!(
            refused.contains("step Departing") && refused.contains("Requesting"),
            "{refused}"
        );
        assert!(on_delete(&op(spec.clone(), running("Requesting"))).is_ok());
        assert!(on_delete(&op(spec.clone(), json!({"phase": "Failed"}))).is_ok());
        let migrate = json!({"nodeRef": "sb-w1-0", "action": "Migrate",
                             "migrate": {"targetWorkerNode": "w2"}});
        assert!(on_delete(&op(migrate, running("Promoting"))).is_err());
    }

    #[test]
    fn a_removal_filter_is_checked_beside_the_node_and_fixed_after_creation() {
        let spec = json!({"nodeRef": "sb-w1-0", "action": "Remove",
                          "remove": {"systemVolumeFilterRegex": ".*"}});
        let refused =
            on_create(&op(spec.clone(), json!({})), "ns", None, None).expect_err("refused");
        assert!(
            refused.contains("StorageNode sb-w1-0")
                && refused.contains("does not start with ^")
                && refused.contains("matches the empty name"),
            "{refused}"
        );
        let admitted = json!({"nodeRef": "sb-w1-0", "action": "Remove",
                              "remove": {"systemVolumeFilterRegex": "^sb-fio-baseline-.*"}});
        let without = json!({"nodeRef": "sb-w1-0", "action": "Remove"});
        let obj = |spec: &serde_json::Value| json!({"spec": spec});
        assert!(on_update(&obj(&admitted), &obj(&admitted)).is_ok());
        let mut aborted = admitted.clone();
        aborted["abort"] = json!(true);
        assert!(on_update(&obj(&admitted), &obj(&aborted)).is_ok());
        for (from, to) in [
            (&admitted, &spec),
            (&without, &admitted),
            (&admitted, &without),
        ] {
            let refused = on_update(&obj(from), &obj(to)).expect_err("refused");
            assert!(
                refused.starts_with("spec.remove is fixed at creation"),
                "{refused}"
            );
        }
    }

    #[test]
    fn a_missing_node_and_target_are_both_said() {
        let spec = json!({"nodeRef": "sb-w1-0", "action": "Migrate",
                          "migrate": {"targetWorkerNode": "w9"}});
        let refused =
            on_create(&op(spec, json!({})), "ns", None, Some(false)).expect_err("refused");
        assert!(
            refused.contains("StorageNode sb-w1-0") && refused.contains("Node w9"),
            "{refused}"
        );
    }
}

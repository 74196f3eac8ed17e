//! StorageDevice admission: the objects are the operator's mirror of the control plane's
//! drives, so a DELETE is allowed only to the operator's own account (the exact user name,
//! as the StorageNode webhook checks it: any other account of its namespace, such as the
//! probe Jobs', is refused), to the garbage collector (the cascade from a deleted StorageNode), and while the namespace
//! itself is being deleted. Anyone else is refused: a deleted device would be created
//! again on the next pass, and nothing would have happened to the drive.
//!
//! This webhook fails open (failurePolicy Ignore): an operator that is down must not hold
//! up a node's or a namespace's deletion. A namespace that cannot be read is a refusal.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhook;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject};
use kube::core::admission::{AdmissionReview, Operation};

use super::WebhookContext;

/// The path of the StorageDevice webhook.
pub const PATH: &str = "/validate-storage-simplyblock-io-v1alpha2-storagedevice";
/// Its name in the webhook configuration.
pub const NAME: &str = "vstoragedevice.simplyblock.io";

/// The identities the garbage collector deletes dependents under: its own service account
/// when the controller manager runs with `--use-service-account-credentials`, else the
/// controller manager itself.
pub const GARBAGE_COLLECTORS: &[&str] = &[
    "system:serviceaccount:kube-system:generic-garbage-collector",
    "system:kube-controller-manager",
];

/// `webhook` answering DELETE only, and admitting when it cannot be reached.
pub fn delete_only_fail_open(webhook: ValidatingWebhook) -> ValidatingWebhook {
    ValidatingWebhook {
        failure_policy: Some("Ignore".into()),
        ..super::answering(webhook, &["DELETE"])
    }
}

pub async fn review(
    State(ctx): State<Arc<WebhookContext>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    super::answer(review, |req| async move {
        if req.operation != Operation::Delete {
            return Ok(());
        }
        let user = req.user_info.username.clone().unwrap_or_default();
        if by_identity(&user, &ctx.operator_user) {
            return Ok(());
        }
        let namespace = req.namespace.clone().unwrap_or_default();
        let read = Api::<Namespace>::all(ctx.client.clone())
            .get_opt(&namespace)
            .await
            .map_err(|e| e.to_string())
            .map(|ns| ns.is_none_or(|ns| terminating(&ns)));
        decide(&user, &req.name, &namespace, read)
    })
    .await
}

/// Whether `user` may delete any StorageDevice: the operator itself (`operator_user`, the
/// exact user name [`WebhookContext::is_operator`] compares), or the garbage collector.
pub fn by_identity(user: &str, operator_user: &str) -> bool {
    GARBAGE_COLLECTORS.contains(&user) || (!operator_user.is_empty() && user == operator_user)
}

/// Whether a namespace is being deleted.
pub fn terminating(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_some()
        || ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating")
}

/// The verdict for a user who is neither the operator nor the garbage collector:
/// `namespace_terminating` is the namespace's state, or why it could not be read.
pub fn decide(
    user: &str,
    device: &str,
    namespace: &str,
    namespace_terminating: Result<bool, String>,
) -> Result<(), String> {
    match namespace_terminating {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!(
            "StorageDevice {device} is the operator's record of a drive, and {user} may not delete it: the operator creates and deletes these objects as the control plane's drives come and go, and would create it again. To take the drive out of service, create a StorageDeviceOps with action Fail in namespace {namespace}"
        )),
        Err(e) => Err(format!(
            "namespace {namespace} could not be read ({e}), so whether it is being deleted is unknown; the deletion of StorageDevice {device} is refused — try again"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPERATOR: &str = "system:serviceaccount:simplyblock-system:simplyblock-operator";

    #[test]
    fn only_the_operator_itself_and_the_garbage_collector_may_delete() {
        for user in [
            OPERATOR,
            "system:serviceaccount:kube-system:generic-garbage-collector",
            "system:kube-controller-manager",
        ] {
            assert!(by_identity(user, OPERATOR), "{user}");
        }
        for user in [
            "admin",
            // Another account of the operator's namespace is not the operator.
            "system:serviceaccount:simplyblock-system:simplyblock-nodeprobe",
            "system:serviceaccount:simplyblock-system:another",
            "system:serviceaccount:default:simplyblock-operator",
            "system:serviceaccount:simplyblock-system-2:x",
            "system:serviceaccount:kube-system:namespace-controller",
        ] {
            assert!(!by_identity(user, OPERATOR), "{user}");
        }
        assert!(!by_identity("", ""));
    }

    #[test]
    fn anyone_else_only_while_the_namespace_goes() {
        assert_eq!(decide("admin", "d", "ns", Ok(true)), Ok(()));
        let refused = decide("admin", "d", "ns", Ok(false)).expect_err("refused");
        assert!(
            refused.contains("admin") && refused.contains("operator") && refused.contains("Fail"),
            "{refused}"
        );
        let unread = decide("admin", "d", "ns", Err("timeout".into())).expect_err("refused");
        assert!(
            unread.contains("timeout") && unread.contains("try again"),
            "{unread}"
        );
    }
}

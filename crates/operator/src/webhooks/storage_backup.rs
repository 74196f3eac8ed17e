//! StorageBackup admission, on create and delete.
//!
//! A record (`spec.clusterRef`) is the operator's account of a copy its cluster's store
//! holds: only the operator creates one, and only it deletes one, except while the
//! namespace is being deleted. A request (`spec.source`) backs up a claim the operator
//! can read anywhere, so its requester must be allowed to read that claim themselves
//! (a SubjectAccessReview carrying the request's user). The operator's own account is
//! always admitted.
//!
//! This webhook fails open (failurePolicy Ignore): an operator that is down must not hold
//! up a namespace's deletion, and the operator's own writes go through it.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhook;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject};
use kube::core::admission::{AdmissionReview, Operation};
use simplyblock_api::storage_backup::StorageBackup;

use super::storage_device::terminating;
use super::{WebhookContext, typed};

/// The path of the StorageBackup webhook.
pub const PATH: &str = "/validate-storage-simplyblock-io-v1alpha2-storagebackup";
/// Its name in the webhook configuration.
pub const NAME: &str = "vstoragebackup.simplyblock.io";

/// `webhook` answering CREATE and DELETE, and admitting when it cannot be reached.
pub fn create_delete_fail_open(webhook: ValidatingWebhook) -> ValidatingWebhook {
    ValidatingWebhook {
        failure_policy: Some("Ignore".into()),
        ..super::answering(webhook, &["CREATE", "DELETE"])
    }
}

/// The refusal of a record written by someone other than the operator.
pub fn record_by_hand(namespace: &str, name: &str) -> String {
    format!(
        "StorageBackup {namespace}/{name} cannot be created by hand: a backup object records a copy the operator found in the cluster's store, and one written here would name a copy that does not exist. Schedule backups with a StorageBackupPolicy instead, or request one backup of a claim with spec.source"
    )
}

/// The refusal of a record deleted by hand.
pub fn record_deleted_by_hand(namespace: &str, name: &str) -> String {
    format!(
        "StorageBackup {namespace}/{name} is a record of a copy in the cluster's store and is removed by the operator when the store stops reporting it. Deleting the record would not delete the copy, which is governed by the bucket's lifecycle policy and by the control plane's retention"
    )
}

/// The refusal of a request whose requester may not read the claim (`reason`: the
/// authorizer's, if it gave one).
pub fn claim_not_readable(user: &str, claim: &str, namespace: &str, reason: &str) -> String {
    let reason = if reason.is_empty() {
        String::new()
    } else {
        format!(" ({reason})")
    };
    format!(
        "{user} may not get persistentvolumeclaims in namespace {namespace:?}{reason}, and this request backs up claim {claim} there: the operator can read every namespace, so a request reaches only the claims its requester may read. Ask for that right, or have someone who holds it create the request"
    )
}

pub async fn review(
    State(ctx): State<Arc<WebhookContext>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    super::answer(review, |req| async move {
        if ctx.is_operator(req.user_info.username.as_deref()) {
            return Ok(());
        }
        let namespace = req.namespace.clone().unwrap_or_default();
        let user = req.user_info.username.clone().unwrap_or_default();
        match req.operation {
            Operation::Create => {
                let Some(new) = req.object.as_ref() else {
                    return Ok(());
                };
                let backup = typed::<StorageBackup>(new)?;
                let Some(source) = &backup.spec.source else {
                    return Err(record_by_hand(&namespace, &req.name));
                };
                let claim_ns = source.claim_namespace.clone().unwrap_or_else(|| namespace.clone());
                let info = &req.user_info;
                let asked = SubjectAccessReview {
                    spec: SubjectAccessReviewSpec {
                        user: info.username.clone(),
                        groups: info.groups.clone(),
                        uid: info.uid.clone(),
                        extra: info.extra.clone(),
                        resource_attributes: Some(ResourceAttributes {
                            verb: Some("get".into()),
                            group: Some(String::new()),
                            resource: Some("persistentvolumeclaims".into()),
                            namespace: Some(claim_ns.clone()),
                            name: Some(source.claim_name.clone()),
                            ..ResourceAttributes::default()
                        }),
                        ..SubjectAccessReviewSpec::default()
                    },
                    ..SubjectAccessReview::default()
                };
                let answer = Api::<SubjectAccessReview>::all(ctx.client.clone())
                    .create(&Default::default(), &asked)
                    .await
                    .map_err(|e| {
                        format!("whether {user} may get persistentvolumeclaims in namespace {claim_ns:?} could not be asked ({e}); try again")
                    })?;
                let status = answer.status.unwrap_or_default();
                if status.allowed && status.denied != Some(true) {
                    Ok(())
                } else {
                    Err(claim_not_readable(
                        &user,
                        &source.claim_name,
                        &claim_ns,
                        &status.reason.unwrap_or_default(),
                    ))
                }
            }
            Operation::Delete => {
                let Some(old) = req.old_object.as_ref() else {
                    return Ok(());
                };
                let backup = typed::<StorageBackup>(old)?;
                if backup.is_request() {
                    return Ok(());
                }
                let read = Api::<Namespace>::all(ctx.client.clone())
                    .get_opt(&namespace)
                    .await;
                match read {
                    Ok(ns) if ns.as_ref().is_none_or(terminating) => Ok(()),
                    Ok(_) => Err(record_deleted_by_hand(&namespace, &req.name)),
                    Err(e) => Err(format!(
                        "a StorageBackup is deleted by the operator rather than by hand, and whether namespace {namespace} is terminating could not be established: {e}"
                    )),
                }
            }
            _ => Ok(()),
        }
    })
    .await
}

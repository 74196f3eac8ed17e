//! Writes sent at v1alpha1 held to every rule of v1alpha2, the version they are stored at.
//!
//! The API server checks a write only against the schema of the version it was sent at,
//! and converting it up restores what the `storage.simplyblock.io/conversion-<path>`
//! annotations carry. So, unchecked, a v1alpha1 write could store what v1alpha2 refuses:
//! an image from any registry, a managed endpoint over plain HTTP, a status written
//! without the status subresource. Every CREATE and UPDATE sent at v1alpha1 reaches this
//! webhook converted to v1alpha2 (the API server converts it for a webhook registered at
//! v1alpha2; a match condition keeps writes sent at v1alpha2 away), which:
//! - refuses a status that is not the one stored (none, on a create): only the status
//!   subresource writes it, and that is served at v1alpha2 alone;
//! - tries the converted object again as a server-side dry run at v1alpha2, so the API
//!   server answers with every v1alpha2 rule it breaks, schema and CEL alike, in the words
//!   of those rules; an update that keeps the stored spec needs none.
//!
//! A create sent at v1alpha1 must make an object v1alpha2 accepts whole: a StorageNode
//! without the hub's cluster and sizing (as the Go operator wrote them) is refused.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use k8s_openapi::api::admissionregistration::v1::{MatchCondition, ValidatingWebhook};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::admission::{AdmissionReview, Operation};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use super::WebhookContext;

/// The webhook's path.
pub const PATH: &str = "/validate-storage-simplyblock-io-v1alpha1-writes";
/// The webhook's name.
pub const NAME: &str = "vv1alpha1writes.simplyblock.io";

/// The kinds served at v1alpha1, and their resources.
pub const CONVERTING: [(&str, &str); 7] = [
    ("ControlPlane", "controlplanes"),
    ("StorageBackup", "storagebackups"),
    ("StorageCluster", "storageclusters"),
    ("StorageClusterOps", "storageclusterops"),
    ("StorageNode", "storagenodes"),
    ("StorageNodeOps", "storagenodeops"),
    ("StoragePool", "storagepools"),
];

/// Registered for the converting kinds' creates and updates, called only for those sent
/// at v1alpha1.
pub fn spoke_writes(mut webhook: ValidatingWebhook) -> ValidatingWebhook {
    for rule in webhook.rules.iter_mut().flatten() {
        rule.resources = Some(CONVERTING.iter().map(|(_, r)| (*r).to_owned()).collect());
    }
    webhook.match_policy = Some("Equivalent".into());
    webhook
        .match_conditions
        .get_or_insert_with(Vec::new)
        .push(MatchCondition {
            name: "sent-at-v1alpha1".into(),
            expression: format!(
                "request.requestKind.version == '{}'",
                simplyblock_api::v1alpha1::VERSION
            ),
        });
    webhook
}

pub async fn review(
    State(ctx): State<Arc<WebhookContext>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    super::answer(review, |req| async move {
        let sent_at = req.request_kind.as_ref().map(|k| k.version.as_str());
        if sent_at != Some(simplyblock_api::v1alpha1::VERSION) {
            return Ok(());
        }
        let Some(object) = req.object.as_ref() else {
            return Ok(());
        };
        let create = match req.operation {
            Operation::Create => true,
            Operation::Update => false,
            _ => return Ok(()),
        };
        let old = req.old_object.as_ref();
        status_unchanged(
            object.data.get("status"),
            old.and_then(|o| o.data.get("status")),
        )?;
        // An update that leaves the spec as stored (a label, a finalizer: what the Go
        // operator writes while an upgrade runs) stores nothing v1alpha2 could refuse that
        // is not stored already.
        if !create && old.and_then(|o| o.data.get("spec")) == object.data.get("spec") {
            return Ok(());
        }
        dry_run(
            &ctx.client,
            &req.kind,
            &req.resource.resource,
            object,
            create,
        )
        .await
    })
    .await
}

/// A status present or changed: said, with what to do.
fn status_unchanged(sent: Option<&Value>, stored: Option<&Value>) -> Result<(), String> {
    let empty = |v: Option<&Value>| {
        v.is_none_or(|v| v.is_null() || v == &Value::Object(Default::default()))
    };
    let same = match (sent, stored) {
        (a, b) if empty(a) && empty(b) => true,
        (Some(a), Some(b)) => a == b,
        _ => false,
    };
    if same {
        return Ok(());
    }
    Err(format!(
        "this write, sent at {}, would change the object's status, which only the operator writes (through the status subresource, served at {}); remove every storage.simplyblock.io/conversion-status.* annotation that does not say what the stored object says, or write at {}",
        simplyblock_api::v1alpha1::API_VERSION,
        simplyblock_api::API_VERSION,
        simplyblock_api::API_VERSION,
    ))
}

/// The object, converted to v1alpha2, created or updated as a server-side dry run: the
/// API server's refusal, with every rule broken, is the answer.
async fn dry_run(
    client: &kube::Client,
    kind: &GroupVersionKind,
    plural: &str,
    object: &DynamicObject,
    create: bool,
) -> Result<(), String> {
    let resource = ApiResource::from_gvk_with_plural(kind, plural);
    let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let params = PostParams {
        dry_run: true,
        field_manager: None,
    };
    // The fields' owners are the API server's to keep: a dry run needs none of them.
    let mut object = object.clone();
    object.metadata.managed_fields = None;
    let object = &object;
    let tried = if create {
        api.create(&params, object).await.map(|_| ())
    } else {
        let name = object.metadata.name.as_deref().unwrap_or_default();
        api.replace(name, &params, object).await.map(|_| ())
    };
    match tried {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(s)) if matches!(s.code, 400 | 403 | 409 | 422) => Err(format!(
            "sent at {}, this {} breaks what {} (the version it is stored at) allows: {}",
            simplyblock_api::v1alpha1::API_VERSION,
            kind.kind,
            simplyblock_api::API_VERSION,
            s.message
        )),
        // Admitting what could not be checked is the one answer that could store what
        // v1alpha2 refuses.
        Err(e) => Err(format!(
            "this write, sent at {}, could not be checked against {}: {e}; try again",
            simplyblock_api::v1alpha1::API_VERSION,
            simplyblock_api::API_VERSION
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_status_may_only_come_back_as_stored() {
        let stored = json!({"uuid": "a", "phase": "Online"});
        assert!(status_unchanged(Some(&stored), Some(&stored)).is_ok());
        assert!(status_unchanged(None, None).is_ok());
        assert!(status_unchanged(Some(&json!({})), None).is_ok());
        let forged = json!({"uuid": "b", "phase": "Online"});
        let why = status_unchanged(Some(&forged), Some(&stored)).expect_err("forged");
        assert!(why.contains("status subresource"), "{why}");
        assert!(status_unchanged(Some(&json!({"uuid": "b"})), None).is_err());
    }

    /// A kind served at v1alpha1 left out here would take v1alpha1 writes unchecked.
    #[test]
    fn every_kind_served_at_v1alpha1_is_checked() {
        let mut checked: Vec<String> = CONVERTING
            .iter()
            .map(|(_, plural)| format!("{plural}.{}", simplyblock_api::GROUP))
            .collect();
        checked.sort();
        let mut served = simplyblock_api::converting_crd_names();
        served.sort();
        assert_eq!(checked, served);
    }
}

//! SimplyblockDriver admission: a cluster runs one CSI driver, so creating a second
//! SimplyblockDriver, in any namespace, is refused.
//!
//! This webhook fails open (failurePolicy Ignore): the chart creates its driver while the
//! operator, which serves the webhook, may not run yet. A second driver that gets in
//! anyway is held at Installing by the controller, which takes the oldest as the cluster's.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhook;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::admission::{AdmissionReview, Operation};
use simplyblock_api::SimplyblockDriver;

use super::WebhookContext;

/// The path of the SimplyblockDriver webhook.
pub const PATH: &str = "/validate-storage-simplyblock-io-v1alpha2-simplyblockdriver";
/// Its name in the webhook configuration.
pub const NAME: &str = "vsimplyblockdriver.simplyblock.io";

/// `webhook` answering CREATE only, and admitting when it cannot be reached.
pub fn create_only_fail_open(webhook: ValidatingWebhook) -> ValidatingWebhook {
    ValidatingWebhook {
        failure_policy: Some("Ignore".into()),
        ..super::answering(webhook, &["CREATE"])
    }
}

pub async fn review(
    State(ctx): State<Arc<WebhookContext>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    super::answer(review, |req| async move {
        if req.operation != Operation::Create {
            return Ok(());
        }
        let existing = Api::<SimplyblockDriver>::all(ctx.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|e| {
                format!("the existing SimplyblockDrivers could not be read ({e}); try again")
            })?;
        let names: Vec<String> = existing
            .items
            .iter()
            .map(|d| format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any()))
            .collect();
        check(&names)
    })
    .await
}

/// Refuses a new driver while any of `existing` (`namespace/name`) is there.
pub fn check(existing: &[String]) -> Result<(), String> {
    match existing {
        [] => Ok(()),
        names => Err(format!(
            "SimplyblockDriver {} already exists, and a cluster runs one CSI driver; change that one, or delete it first",
            names.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_driver_is_admitted_and_a_second_refused_naming_the_first() {
        assert_eq!(check(&[]), Ok(()));
        let why = check(&["simplyblock-system/simplyblock".into()]).expect_err("a second");
        assert!(why.contains("simplyblock-system/simplyblock"), "{why}");
        assert!(why.contains("one CSI driver"), "{why}");
    }
}

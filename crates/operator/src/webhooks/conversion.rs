//! The conversion webhook: the API server sends the objects of a kind served at both
//! v1alpha1 and v1alpha2 here whenever a client asks for the version they are not stored
//! at, and [`simplyblock_conversion`] converts them. Conversion never fails, so the answer
//! is always a success with one object per object sent.
//!
//! [`register`] points each converting CRD's `spec.conversion` at this server and gives it
//! the CA bundle, at start and whenever the CA changes. An operator in the cluster (its
//! webhooks behind a Service) does so for every CRD that serves v1alpha1: a client may
//! read or write at v1alpha1 even when nothing is stored there, and the chart's CRDs (not
//! templated) name a placeholder Service in no release's namespace, so every such request
//! would fail. An operator reached by URL runs outside the cluster (development, the
//! tests' shared API servers): it registers only once objects are stored at v1alpha1 (the
//! CRD's `status.storedVersions` lists it: an installation of the Go operator being moved
//! over), so that operators sharing one API server do not take each other's conversions.
//! A CRD installed without a v1alpha1 version is left alone.

use std::sync::Arc;

use axum::extract::State;
use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::core::Status;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use serde_json::json;

use super::{Endpoint, WebhookContext};
use crate::runtime::error::ServerError as Error;

/// The path the API server posts ConversionReviews to.
pub const PATH: &str = simplyblock_api::CONVERSION_PATH;

/// Converts every object of one review.
pub async fn review(
    State(ctx): State<Arc<WebhookContext>>,
    axum::Json(review): axum::Json<ConversionReview>,
) -> axum::Json<ConversionReview> {
    let request = match ConversionRequest::from_review(review) {
        Ok(request) => request,
        Err(_) => {
            return axum::Json(
                ConversionResponse::invalid(Status::failure(
                    "the ConversionReview carries no request",
                    "BadRequest",
                ))
                .into_review(),
            );
        }
    };
    let desired = request.desired_api_version.clone();
    let converted: Vec<serde_json::Value> = request
        .objects
        .iter()
        .map(|object| {
            let from = object
                .get("apiVersion")
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_owned();
            let kind = object
                .get("kind")
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_owned();
            ctx.metrics.count(
                "simplyblock_conversions_total",
                vec![("kind", kind), ("from", from), ("to", desired.clone())],
            );
            simplyblock_conversion::convert(object, &desired)
        })
        .collect();
    axum::Json(
        ConversionResponse::for_request(request)
            .success(converted)
            .into_review(),
    )
}

/// The `spec.conversion` patch that sends conversions to `endpoint`, trusting `ca_bundle`.
pub fn conversion_patch(endpoint: &Endpoint, ca_bundle: &str) -> serde_json::Value {
    let bundle = ByteString(ca_bundle.as_bytes().to_vec());
    let client_config = match endpoint {
        Endpoint::Url(base) => json!({
            "url": format!("{}{PATH}", base.trim_end_matches('/')),
            "service": null,
            "caBundle": bundle,
        }),
        Endpoint::Service { namespace, name } => json!({
            "url": null,
            "service": {"namespace": namespace, "name": name, "path": PATH, "port": 443},
            "caBundle": bundle,
        }),
    };
    json!({"spec": {"conversion": {
        "strategy": "Webhook",
        "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": client_config},
    }}})
}

/// Whether `crd` already converts through `endpoint` with `ca_bundle`.
fn registered(crd: &CustomResourceDefinition, endpoint: &Endpoint, ca_bundle: &str) -> bool {
    let Some(config) = crd
        .spec
        .conversion
        .as_ref()
        .filter(|c| c.strategy == "Webhook")
        .and_then(|c| c.webhook.as_ref())
        .and_then(|w| w.client_config.as_ref())
    else {
        return false;
    };
    let bundle_ok = config.ca_bundle.as_ref().map(|b| b.0.as_slice()) == Some(ca_bundle.as_bytes());
    let target_ok = match endpoint {
        Endpoint::Url(base) => {
            config.url.as_deref() == Some(&format!("{}{PATH}", base.trim_end_matches('/')))
        }
        Endpoint::Service { namespace, name } => config.service.as_ref().is_some_and(|s| {
            s.namespace == *namespace
                && s.name == *name
                && s.path.as_deref() == Some(PATH)
                && s.port.unwrap_or(443) == 443
        }),
    };
    bundle_ok && target_ok
}

/// Points every converting CRD at this operator's conversion webhook.
pub async fn register(
    client: &kube::Client,
    endpoint: &Endpoint,
    ca_bundle: &str,
) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in simplyblock_api::converting_crd_names() {
        let kube_error = |source| Error::Kube {
            what: format!("CustomResourceDefinition {name}"),
            source,
        };
        let Some(crd) = api.get_opt(&name).await.map_err(kube_error)? else {
            tracing::warn!(crd = %name, "not installed: install the chart's CRDs");
            continue;
        };
        if !crd
            .spec
            .versions
            .iter()
            .any(|v| v.name == simplyblock_api::v1alpha1::VERSION)
        {
            tracing::warn!(crd = %name, "installed without v1alpha1, so nothing converts; upgrade the chart's CRDs");
            continue;
        }
        let stored_v1alpha1 = crd
            .status
            .as_ref()
            .and_then(|s| s.stored_versions.as_ref())
            .is_some_and(|v| v.iter().any(|v| v == simplyblock_api::v1alpha1::VERSION));
        let in_cluster = matches!(endpoint, Endpoint::Service { .. });
        if !(in_cluster || stored_v1alpha1) || registered(&crd, endpoint, ca_bundle) {
            continue;
        }
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(conversion_patch(endpoint, ca_bundle)),
        )
        .await
        .map_err(kube_error)?;
        tracing::info!(crd = %name, "conversions go to this operator");
    }
    Ok(())
}

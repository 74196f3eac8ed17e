//! What every webhook's handler is built from: the shared context, unpacking a review and
//! answering it, reading the typed object, and the DELETE guard of the Ops kinds.

use kube::Resource;
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use simplyblock_api::common::{OpsKind, OpsPhase};
use simplyblock_statemachine::State;

/// What the handlers share.
#[derive(Clone)]
pub struct WebhookContext {
    pub client: kube::Client,
    /// The operator's own user name (`system:serviceaccount:<namespace>:<account>`): the
    /// single-writer fields are its to write, and no other account's, not even another
    /// of its namespace.
    pub operator_user: String,
    /// Where refusals are counted.
    pub metrics: std::sync::Arc<crate::runtime::metrics::Metrics>,
}

impl WebhookContext {
    pub fn is_operator(&self, username: Option<&str>) -> bool {
        username == Some(self.operator_user.as_str())
    }
}

/// Who the API server takes `client` for (a SelfSubjectReview, which every authenticated
/// user may create): the user name the webhooks recognise as the operator.
pub async fn own_user(client: &kube::Client) -> Result<String, kube::Error> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let review = kube::Api::<SelfSubjectReview>::all(client.clone())
        .create(&Default::default(), &SelfSubjectReview::default())
        .await?;
    Ok(review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default())
}

/// The DELETE guard of every Ops kind, derived from its graphs: a Running operation on a
/// step its action's graph in `graphs` declares unabortable is kept, and the refusal names
/// the step, what is under way (`acting`, e.g. "the control plane is acting on StorageNode
/// w1") and where `spec.abort` could stop it; every other operation may go (its finalizer
/// releases the lock).
pub fn keep_while_unabortable<K>(
    op: &K,
    graphs: &simplyblock_statemachine::MultiGraph<K::Action, K::Step>,
    acting: &str,
) -> Result<(), String>
where
    K: OpsKind + Resource<DynamicType = ()>,
{
    let Ok(graph) = graphs.graph(op.action()) else {
        return Ok(());
    };
    let status = op.status_core();
    let names =
        |states: Vec<K::Step>| -> Vec<&'static str> { states.iter().map(|s| s.name()).collect() };
    let Some(step) = status.step.state.as_deref().filter(|s| {
        status.phase == OpsPhase::Running && names(graph.unabortable_states()).contains(s)
    }) else {
        return Ok(());
    };
    let kind = K::kind(&());
    let name = op.meta().name.as_deref().unwrap_or("");
    let abortable = names(graph.abortable_states());
    let (abort, none) = if abortable.is_empty() {
        (
            String::new(),
            " (spec.abort cannot help: none in this action's steps can be aborted)",
        )
    } else {
        let steps = abortable.join(", ");
        let abort =
            format!(", or set spec.abort: true to stop it at the next abortable step ({steps})");
        (abort, "")
    };
    Err(format!(
        "{kind} {name} is running step {step}, which cannot be aborted: {acting}, and deleting the operation now would drop its lock mid-way. Wait for it to end{abort}, then delete it{none}"
    ))
}

/// Unpacks a review, or answers a malformed one.
pub fn request(
    review: AdmissionReview<DynamicObject>,
) -> Result<AdmissionRequest<DynamicObject>, Box<AdmissionReview<DynamicObject>>> {
    review.try_into().map_err(|e| {
        tracing::warn!(error = %e, "a malformed admission review");
        Box::new(
            AdmissionResponse::invalid(format!("the admission review is malformed: {e}"))
                .into_review(),
        )
    })
}

/// Answers `review` with the verdict of `decide` on its request: `Err` denies with that
/// message (what is wrong and what to do), a malformed review is refused as invalid.
pub(crate) async fn answer<F, Fut>(
    review: AdmissionReview<DynamicObject>,
    decide: F,
) -> axum::Json<AdmissionReview<DynamicObject>>
where
    F: FnOnce(AdmissionRequest<DynamicObject>) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let req = match request(review) {
        Ok(req) => req,
        Err(answer) => return axum::Json(*answer),
    };
    let response = AdmissionResponse::from(&req);
    let verdict = match decide(req).await {
        Ok(()) => response,
        Err(message) => deny(response, message),
    };
    axum::Json(verdict.into_review())
}

/// Reads the typed object out of a review's raw one.
pub fn typed<K: serde::de::DeserializeOwned>(object: &DynamicObject) -> Result<K, String> {
    serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .map_err(|e| format!("the object does not match its schema: {e}"))
}

/// The verdict of `on_delete` on `old`, an operation being deleted; one that cannot be read
/// is kept.
pub(crate) fn delete_verdict<K: serde::de::DeserializeOwned>(
    old: &DynamicObject,
    on_delete: impl FnOnce(&K) -> Result<(), String>,
) -> Result<(), String> {
    typed::<K>(old)
        .map_err(|e| format!("the operation could not be read ({e}); it is kept"))
        .and_then(|op| on_delete(&op))
}

/// Where the API server reaches the webhooks.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// A URL base, e.g. `https://127.0.0.1:9443` (tests, the demo).
    Url(String),
    /// A Service in the cluster, on port 443.
    Service { namespace: String, name: String },
}

/// Denies with 403 Forbidden, the code Kubernetes uses for admission refusals.
pub fn deny(response: AdmissionResponse, message: String) -> AdmissionResponse {
    let mut response = response.deny(message);
    response.result.code = 403;
    response.result.reason = "Forbidden".into();
    response
}

/// `webhook` with each of its rules answering `operations` only.
pub fn answering(
    mut webhook: k8s_openapi::api::admissionregistration::v1::ValidatingWebhook,
    operations: &[&str],
) -> k8s_openapi::api::admissionregistration::v1::ValidatingWebhook {
    for rule in webhook.rules.iter_mut().flatten() {
        rule.operations = Some(operations.iter().map(|&o| o.to_owned()).collect());
    }
    webhook
}

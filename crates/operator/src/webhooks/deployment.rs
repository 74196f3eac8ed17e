//! ClusterDeploymentConfig admission: a draft is admitted on its structure (the schema and
//! CEL have checked it), the approving edit is answered against the live cluster, and an
//! approved document stays as it was approved.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionReview, Operation};
use simplyblock_api::ClusterDeploymentConfig;

use super::{WebhookContext, typed};
use crate::deployment::{validation, world};

pub async fn review(
    State(ctx): State<Arc<WebhookContext>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    super::answer(review, |req| async move {
        decide(
            &ctx,
            &req.operation,
            req.object.as_ref(),
            req.old_object.as_ref(),
            &req.namespace,
        )
        .await
    })
    .await
}

async fn decide(
    ctx: &WebhookContext,
    operation: &Operation,
    object: Option<&DynamicObject>,
    old: Option<&DynamicObject>,
    namespace: &Option<String>,
) -> Result<(), String> {
    let Some(object) = object else {
        return Ok(());
    };
    let doc: ClusterDeploymentConfig = typed(object)?;
    let old: Option<ClusterDeploymentConfig> = old.map(typed).transpose()?;
    let was_approved = old.as_ref().is_some_and(|o| o.spec.approved);
    if was_approved {
        // The CEL rules say the same first on a current CRD; this answers for documents
        // whose CRD predates them.
        let old = old.as_ref().map(|o| &o.spec);
        if !doc.spec.approved {
            return Err("ApprovalWithdrawn: approval cannot be withdrawn; the document may already have been expanded. Delete the document instead, which deletes nothing it created".into());
        }
        if old != Some(&doc.spec) {
            return Err("SpecImmutable: an approved deployment config is immutable; to add nodes to its cluster, write a new document naming it in spec.clusterRef".into());
        }
        return Ok(());
    }
    let approving = doc.spec.approved && matches!(operation, Operation::Create | Operation::Update);
    if !approving {
        return Ok(());
    }
    let namespace = namespace.clone().unwrap_or_default();
    let name = doc.metadata.name.clone().unwrap_or_default();
    let world = world::read(&ctx.client, &namespace, &doc.spec).await.map_err(|e| {
        format!("the approval could not be checked against the cluster ({e}); nothing was approved, try again")
    })?;
    let problems = validation::approval_problems(&name, &doc.spec, &world);
    if problems.is_empty() {
        Ok(())
    } else {
        crate::deployment::metrics::approval_rejected(&ctx.metrics, &namespace, &problems);
        Err(validation::summary(&problems))
    }
}

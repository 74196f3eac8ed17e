//! ClusterDeploymentConfig admission: a draft is admitted on its structure (the schema and
//! CEL have checked it), the approving edit is answered against the live cluster, and an
//! approved document stays as it was approved.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::admission::{AdmissionResponse, AdmissionReview, Operation};
use simplyblock_api::cluster_deployment_config::ClusterDeploymentConfigSpec;
use simplyblock_api::{ClusterDeploymentConfig, StorageCluster, StorageNode};

use super::{WebhookContext, request, typed};
use crate::deployment::validation::{self, ExistingCluster, World};

pub async fn review(
    State(ctx): State<Arc<WebhookContext>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let req = match request(review) {
        Ok(req) => req,
        Err(answer) => return Json(*answer),
    };
    let response = AdmissionResponse::from(&req);
    let answer = match decide(
        &ctx,
        &req.operation,
        req.object.as_ref(),
        req.old_object.as_ref(),
        &req.namespace,
    )
    .await
    {
        Ok(()) => response,
        Err(message) => super::deny(response, message),
    };
    Json(answer.into_review())
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
    let world = read_world(ctx, &namespace, &doc.spec).await.map_err(|e| {
        format!("the approval could not be checked against the cluster ({e}); nothing was approved, try again")
    })?;
    let problems = validation::approval_problems(&name, &doc.spec, &world);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(validation::summary(&problems))
    }
}

/// Reads what approval is judged against: the Nodes, the namespace's clusters with their
/// nodes, and the other approved documents that create a cluster.
async fn read_world(
    ctx: &WebhookContext,
    namespace: &str,
    spec: &ClusterDeploymentConfigSpec,
) -> Result<World, kube::Error> {
    let nodes: BTreeSet<String> = Api::<Node>::all(ctx.client.clone())
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    let mut world = World {
        nodes,
        ..World::default()
    };
    for cluster in Api::<StorageCluster>::namespaced(ctx.client.clone(), namespace)
        .list(&ListParams::default())
        .await?
        .items
    {
        let storage = cluster.spec.storage_nodes.clone().unwrap_or_default();
        let sockets = storage.sockets_to_use.len().max(1) as u32;
        world.clusters.insert(
            cluster.metadata.name.clone().unwrap_or_default(),
            ExistingCluster {
                device_class: cluster.spec.device_class,
                stripe: cluster.spec.stripe.clone(),
                nodes: BTreeSet::new(),
                slots_per_worker: sockets * storage.nodes_per_socket.max(1) as u32,
            },
        );
    }
    if let Some(target) = spec.cluster_ref.as_deref()
        && let Some(existing) = world.clusters.get_mut(target)
    {
        for node in Api::<StorageNode>::namespaced(ctx.client.clone(), namespace)
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|n| n.spec.cluster_ref == target)
        {
            existing
                .nodes
                .insert((node.spec.worker_node, node.spec.slot.unwrap_or(0)));
        }
    }
    for other in Api::<ClusterDeploymentConfig>::namespaced(ctx.client.clone(), namespace)
        .list(&ListParams::default())
        .await?
        .items
    {
        if other.spec.approved
            && other.spec.cluster_ref.is_none()
            && let Some(template) = &other.spec.cluster
        {
            world.creating.insert(
                template.name.clone(),
                other.metadata.name.clone().unwrap_or_default(),
            );
        }
    }
    Ok(world)
}

//! The ClusterDeploymentConfig controller. A draft is validated on every pass and
//! expanded on none; an approved document runs the expansion machine: Validating ->
//! CreatingCluster -> AwaitingCluster -> CreatingNodes -> Activating.
//!
//! The document owns nothing it creates (deleting it deletes a document), creates only
//! what does not exist, and never changes what does. Every step is a predicate over what
//! exists: CreatingNodes lists the cluster's nodes and creates only the missing slots, so
//! any number of passes produce the same nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use simplyblock_api::cluster_deployment_config::{
    ClusterDeploymentConfig, ClusterDeploymentConfigStatus, DeploymentPhase, EXPANSION_GRAPH,
    ExpansionStep,
};
use simplyblock_api::names::label_value;
use simplyblock_api::storage_cluster_ops::{
    ClusterAction, StorageClusterOps, StorageClusterOpsSpec,
};
use simplyblock_api::storage_node::NodePhase;
use simplyblock_api::{StorageCluster, StorageNode};
use simplyblock_statemachine::Machine;

use super::expansion::{self, CLUSTER_LABEL, CREATED_BY_LABEL};
use super::{validation, world};
use crate::context::{Context, requeue};
use crate::kit::{self, Error, Guard};

const MANAGER: &str = "clusterdeploymentconfig-controller";
/// Set on approved documents, for selectors; output only.
pub const READY_LABEL: &str = "storage.simplyblock.io/ready-to-deploy";

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "clusterdeploymentconfig";

/// Runs the controller until the operator stops.
pub async fn run(ctx: Arc<Context>) {
    let controller = Controller::new(
        ctx.scope.api::<ClusterDeploymentConfig>(&ctx.kube),
        watcher::Config::default(),
    );
    let store = controller.store();
    // A cluster or node changing moves the documents of its namespace on (their uuid and
    // phases are what AwaitingCluster and Activating wait for).
    let by_namespace = move |ns: Option<String>| {
        store
            .state()
            .into_iter()
            .filter(|d| d.namespace() == ns)
            .map(|d| kube::runtime::reflector::ObjectRef::from_obj(&*d))
            .collect::<Vec<_>>()
    };
    let by_ns_nodes = by_namespace.clone();
    let controller = controller
        .watches(
            ctx.scope.api::<StorageCluster>(&ctx.kube),
            watcher::Config::default(),
            move |c: StorageCluster| by_namespace(c.namespace()),
        )
        .watches(
            ctx.scope.api::<StorageNode>(&ctx.kube),
            watcher::Config::default(),
            move |n: StorageNode| by_ns_nodes(n.namespace()),
        );
    kit::run(CONTROLLER, controller, reconcile, ctx).await
}

pub async fn reconcile(
    doc: Arc<ClusterDeploymentConfig>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let status = doc.status.clone().unwrap_or_default();
    super::metrics::phase(
        &ctx.metrics,
        &namespace(&doc),
        &doc.name_any(),
        status.phase,
    );
    if matches!(
        status.phase,
        DeploymentPhase::Expanded | DeploymentPhase::Failed
    ) {
        return Ok(Action::await_change());
    }
    if !doc.spec.approved {
        return draft(&doc, &status, &ctx).await;
    }
    label_ready(&doc, &ctx).await?;
    expand(&doc, &status, &ctx).await
}

fn namespace(doc: &ClusterDeploymentConfig) -> String {
    doc.namespace().unwrap_or_default()
}

/// Validation only: what is wrong goes into status.message for the reviewer.
async fn draft(
    doc: &ClusterDeploymentConfig,
    status: &ClusterDeploymentConfigStatus,
    ctx: &Context,
) -> Result<Action, Error> {
    let world = world::read(&ctx.kube, &namespace(doc), &doc.spec).await?;
    let problems = validation::approval_problems(&doc.name_any(), &doc.spec, &world);
    let message = if problems.is_empty() {
        let workers: BTreeSet<&String> = doc
            .spec
            .node_sets
            .iter()
            .flat_map(|s| &s.groups)
            .flat_map(|g| &g.workers)
            .collect();
        format!(
            "ready for review: {} worker(s) in {} node set(s); set spec.approved to deploy",
            workers.len(),
            doc.spec.node_sets.len()
        )
    } else {
        validation::summary(&problems).replacen(
            "the document cannot be approved",
            "not yet approvable",
            1,
        )
    };
    if status.message.as_deref() != Some(message.as_str()) || status.phase != DeploymentPhase::Draft
    {
        if status.message.is_none() {
            ctx.event(doc, false, "AwaitingApproval", message.clone())
                .await;
        }
        for p in &problems {
            ctx.event(doc, true, p.reason.as_str(), p.message.clone())
                .await;
        }
        write_status(
            ctx,
            doc,
            DeploymentPhase::Draft,
            None,
            Some(message),
            None,
            None,
        )
        .await?;
    }
    Ok(Action::requeue(requeue::RESYNC))
}

async fn label_ready(doc: &ClusterDeploymentConfig, ctx: &Context) -> Result<(), Error> {
    if doc.labels().get(READY_LABEL).map(String::as_str) == Some("true") {
        return Ok(());
    }
    let patch = json!({"metadata": {"labels": {READY_LABEL: "true"}}});
    Api::<ClusterDeploymentConfig>::namespaced(ctx.kube.clone(), &namespace(doc))
        .patch(
            &doc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    Ok(())
}

struct StatusExtra {
    cluster_ref: Option<String>,
    node_refs: Option<Vec<String>>,
}

async fn write_status(
    ctx: &Context,
    doc: &ClusterDeploymentConfig,
    phase: DeploymentPhase,
    machine: Option<&Machine<'_, ExpansionStep>>,
    message: Option<String>,
    extra: Option<StatusExtra>,
    started: Option<jiff::Timestamp>,
) -> Result<(), Error> {
    let current = doc.status.clone().unwrap_or_default();
    let extra = extra.unwrap_or(StatusExtra {
        cluster_ref: None,
        node_refs: None,
    });
    // Every apply restates every field: a field this manager owns and leaves out is
    // removed.
    let status = ClusterDeploymentConfigStatus {
        phase,
        step: machine.map(|m| m.snapshot()).unwrap_or(current.step),
        cluster_ref: extra.cluster_ref.or(current.cluster_ref),
        node_refs: extra.node_refs.unwrap_or(current.node_refs),
        message: message.or(current.message),
        observed_generation: doc.metadata.generation,
        expansion_started_at: started.map(Time),
    };
    kit::apply_status(&ctx.kube, doc, MANAGER, &status, Guard::None).await?;
    Ok(())
}

/// When the expansion began: the stored value, or now on the first pass after approval
/// (the writes of that one pass may restamp it by the milliseconds between them).
fn started(doc: &ClusterDeploymentConfig) -> Option<jiff::Timestamp> {
    Some(
        doc.status
            .as_ref()
            .and_then(|s| s.expansion_started_at.as_ref())
            .map(|t| t.0)
            .unwrap_or_else(jiff::Timestamp::now),
    )
}

async fn fail(
    ctx: &Context,
    doc: &ClusterDeploymentConfig,
    machine: &Machine<'_, ExpansionStep>,
    reason: &str,
    message: String,
) -> Result<Action, Error> {
    ctx.event(doc, true, reason, message.clone()).await;
    super::metrics::validation_failure(&ctx.metrics, &namespace(doc), reason);
    write_status(
        ctx,
        doc,
        DeploymentPhase::Failed,
        Some(machine),
        Some(format!("{reason}: {message}")),
        None,
        started(doc),
    )
    .await?;
    Ok(Action::await_change())
}

async fn advance(
    ctx: &Context,
    doc: &ClusterDeploymentConfig,
    machine: &mut Machine<'_, ExpansionStep>,
    next: ExpansionStep,
    message: String,
    extra: Option<StatusExtra>,
) -> Result<Action, Error> {
    let now = jiff::Timestamp::now();
    if let Err(e) = machine.transition_to(next, now) {
        tracing::error!(error = %e, "illegal expansion transition");
        return Ok(Action::await_change());
    }
    write_status(
        ctx,
        doc,
        DeploymentPhase::Expanding,
        Some(machine),
        Some(message),
        extra,
        started(doc),
    )
    .await?;
    Ok(Action::requeue(requeue::NEXT_STEP))
}

async fn expand(
    doc: &ClusterDeploymentConfig,
    status: &ClusterDeploymentConfigStatus,
    ctx: &Context,
) -> Result<Action, Error> {
    let now = jiff::Timestamp::now();
    let ns = namespace(doc);
    let name = doc.name_any();
    let mut machine = match EXPANSION_GRAPH.restore(&status.step, now) {
        Ok(m) => m,
        Err(e) => {
            let m = EXPANSION_GRAPH.start(now);
            return fail(ctx, doc, &m, "UnknownStep", e.to_string()).await;
        }
    };
    if status.phase == DeploymentPhase::Draft && !status.step.is_empty() {
        // A status from before approval; the expansion starts now.
        machine = EXPANSION_GRAPH.start(now);
    }
    if machine.timed_out(now) {
        let message = format!("expansion step {} outlived its deadline", machine.state());
        return fail(ctx, doc, &machine, "StepDeadlineExceeded", message).await;
    }
    let clusters: Api<StorageCluster> = Api::namespaced(ctx.kube.clone(), &ns);
    let Some(target) = expansion::target_cluster(doc).map(str::to_string) else {
        return fail(
            ctx,
            doc,
            &machine,
            "NoClusterNamed",
            "the document names neither spec.clusterRef nor spec.cluster.name".into(),
        )
        .await;
    };

    match machine.state() {
        ExpansionStep::Validating => {
            if status.phase != DeploymentPhase::Expanding || status.expansion_started_at.is_none() {
                write_status(
                    ctx,
                    doc,
                    DeploymentPhase::Expanding,
                    Some(&machine),
                    Some("validating against the cluster".into()),
                    None,
                    started(doc),
                )
                .await?;
            }
            let world = world::read(&ctx.kube, &ns, &doc.spec).await?;
            // A document that resumes its own cluster is not in conflict with it.
            let mut world = world;
            if status.cluster_ref.as_deref() == Some(target.as_str())
                && doc.spec.cluster_ref.is_none()
            {
                world.clusters.remove(&target);
            }
            let problems = validation::approval_problems(&name, &doc.spec, &world);
            if let Some(first) = problems.first() {
                return fail(
                    ctx,
                    doc,
                    &machine,
                    first.reason.as_str(),
                    validation::summary(&problems),
                )
                .await;
            }
            advance(
                ctx,
                doc,
                &mut machine,
                ExpansionStep::CreatingCluster,
                format!("creating or resolving StorageCluster {target}"),
                None,
            )
            .await
        }
        ExpansionStep::CreatingCluster => {
            let existing = clusters.get_opt(&target).await?;
            match (doc.spec.cluster_ref.is_some(), existing) {
                (true, Some(_)) => {}
                (true, None) => {
                    return fail(
                        ctx,
                        doc,
                        &machine,
                        "ClusterNotFound",
                        format!("StorageCluster {target} named by spec.clusterRef does not exist"),
                    )
                    .await;
                }
                (false, Some(c)) => {
                    let ours = c.labels().get(CREATED_BY_LABEL) == Some(&label_value(&name))
                        && status.cluster_ref.as_deref() == Some(target.as_str());
                    if !ours {
                        return fail(ctx, doc, &machine, "ClusterExists", format!("StorageCluster {target} already exists and this document did not create it; grow it with a document naming it in spec.clusterRef")).await;
                    }
                }
                (false, None) => {
                    // Recorded first: a crash after the create finds the cluster as ours.
                    write_status(
                        ctx,
                        doc,
                        DeploymentPhase::Expanding,
                        Some(&machine),
                        None,
                        Some(StatusExtra {
                            cluster_ref: Some(target.clone()),
                            node_refs: None,
                        }),
                        started(doc),
                    )
                    .await?;
                    let Some(cluster) = expansion::cluster(doc) else {
                        return fail(
                            ctx,
                            doc,
                            &machine,
                            "NoClusterNamed",
                            "the document has no spec.cluster to create".into(),
                        )
                        .await;
                    };
                    match clusters.create(&PostParams::default(), &cluster).await {
                        Ok(_) => {
                            ctx.event(
                                doc,
                                false,
                                "ClusterCreated",
                                format!("created StorageCluster {target}"),
                            )
                            .await
                        }
                        Err(kube::Error::Api(s)) if s.code == 409 => {
                            // Someone else's, created between the look and the create.
                            return Ok(Action::requeue(requeue::NEXT_STEP));
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            advance(
                ctx,
                doc,
                &mut machine,
                ExpansionStep::AwaitingCluster,
                format!("waiting for StorageCluster {target} to exist in the control plane"),
                Some(StatusExtra {
                    cluster_ref: Some(target.clone()),
                    node_refs: None,
                }),
            )
            .await
        }
        ExpansionStep::AwaitingCluster => {
            let created = clusters
                .get_opt(&target)
                .await?
                .and_then(|c| c.status)
                .and_then(|s| s.uuid)
                .is_some_and(|u| !u.is_empty());
            if !created {
                return Ok(Action::requeue(requeue::RESYNC));
            }
            advance(
                ctx,
                doc,
                &mut machine,
                ExpansionStep::CreatingNodes,
                "creating the storage nodes".into(),
                None,
            )
            .await
        }
        ExpansionStep::CreatingNodes => {
            let Some(cluster) = clusters.get_opt(&target).await? else {
                return fail(
                    ctx,
                    doc,
                    &machine,
                    "ClusterNotFound",
                    format!("StorageCluster {target} disappeared during the expansion"),
                )
                .await;
            };
            let nodes_api: Api<StorageNode> = Api::namespaced(ctx.kube.clone(), &ns);
            let existing: BTreeSet<(String, i32)> = nodes_api
                .list(
                    &ListParams::default()
                        .labels(&format!("{CLUSTER_LABEL}={}", label_value(&target))),
                )
                .await?
                .items
                .into_iter()
                .filter(|n| n.spec.cluster_ref == target)
                .map(|n| (n.spec.worker_node, n.spec.slot.unwrap_or(0)))
                .collect();
            let wanted = expansion::nodes(doc, &cluster);
            let mut created = 0;
            for node in &wanted {
                let key = (node.spec.worker_node.clone(), node.spec.slot.unwrap_or(0));
                if existing.contains(&key) {
                    continue;
                }
                match nodes_api.create(&PostParams::default(), node).await {
                    Ok(_) => created += 1,
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
            }
            if created > 0 {
                super::metrics::nodes_created(&ctx.metrics, &ns, created);
                ctx.event(
                    doc,
                    false,
                    "NodesCreated",
                    format!("created {created} StorageNode(s) for StorageCluster {target}"),
                )
                .await;
            }
            // The record is rebuilt from the slots the document describes, so a node whose
            // creation outran this write is never left out of it.
            let refs: Vec<String> = wanted
                .iter()
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            advance(
                ctx,
                doc,
                &mut machine,
                ExpansionStep::Activating,
                format!("waiting for {} storage node(s) to come online", refs.len()),
                Some(StatusExtra {
                    cluster_ref: None,
                    node_refs: Some(refs),
                }),
            )
            .await
        }
        ExpansionStep::Activating => activating(doc, status, &target, &machine, ctx).await,
    }
}

async fn activating(
    doc: &ClusterDeploymentConfig,
    status: &ClusterDeploymentConfigStatus,
    target: &str,
    machine: &Machine<'_, ExpansionStep>,
    ctx: &Context,
) -> Result<Action, Error> {
    let ns = namespace(doc);
    let nodes_api: Api<StorageNode> = Api::namespaced(ctx.kube.clone(), &ns);
    let phases: BTreeMap<String, NodePhase> = nodes_api
        .list(&ListParams::default().labels(&format!("{CLUSTER_LABEL}={}", label_value(target))))
        .await?
        .items
        .into_iter()
        .map(|n| (n.name_any(), n.status.map(|s| s.phase).unwrap_or_default()))
        .collect();
    let online = status
        .node_refs
        .iter()
        .filter(|r| phases.get(*r) == Some(&NodePhase::Online))
        .count();
    if online < status.node_refs.len() {
        let message = format!(
            "{online}/{} storage node(s) online; waiting for the rest",
            status.node_refs.len()
        );
        if status.message.as_deref() != Some(message.as_str()) {
            ctx.event(doc, false, "AwaitingNodes", message.clone())
                .await;
            write_status(
                ctx,
                doc,
                DeploymentPhase::Expanding,
                Some(machine),
                Some(message),
                None,
                started(doc),
            )
            .await?;
        }
        return Ok(Action::requeue(requeue::RESYNC));
    }
    if doc.spec.cluster_ref.is_none() {
        // A growth document's nodes are added with expand: the control plane rebalances
        // onto them itself; only a new cluster is activated.
        let ops: Api<StorageClusterOps> = Api::namespaced(ctx.kube.clone(), &ns);
        let name = format!("{target}-activate");
        if ops.get_opt(&name).await?.is_none() {
            let mut op = StorageClusterOps::new(
                &name,
                StorageClusterOpsSpec {
                    cluster_ref: target.to_string(),
                    action: ClusterAction::Activate,
                    abort: false,
                    cancel_task: None,
                    rolling_restart: None,
                },
            );
            op.metadata.owner_references = doc.controller_owner_ref(&()).map(|o| vec![o]);
            match ops.create(&PostParams::default(), &op).await {
                Ok(_) => {}
                // Created by an earlier pass whose status write was lost.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            ctx.event(
                doc,
                false,
                "ActivationRequested",
                format!("requested activation of StorageCluster {target} ({name})"),
            )
            .await;
        }
    }
    if let Some(began) = started(doc) {
        let seconds = jiff::Timestamp::now().duration_since(began).as_secs_f64();
        super::metrics::expanded(&ctx.metrics, &ns, seconds);
    }
    write_status(
        ctx,
        doc,
        DeploymentPhase::Expanded,
        Some(machine),
        Some(format!(
            "expanded: StorageCluster {target} with {} storage node(s)",
            status.node_refs.len()
        )),
        None,
        started(doc),
    )
    .await?;
    Ok(Action::await_change())
}

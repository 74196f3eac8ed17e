//! The ClusterDeploymentConfig controller. A draft is validated on every pass and
//! expanded on none; an approved document runs the expansion machine: Validating ->
//! CreatingCluster -> AwaitingCluster -> CreatingNodes -> Activating.
//!
//! The document owns nothing it creates (deleting it deletes a document), creates only
//! what does not exist, and never changes what does. Every step is a predicate over what
//! exists: CreatingNodes lists the cluster's nodes and creates only the missing slots, so
//! any number of passes produce the same nodes.
//!
//! A pass of the expansion is `observe` (reads only, what the step needs), the pure
//! [`plan::plan`] over it, and the machine runtime's `execute`, which performs the plan
//! with [`Expansion`] as the document's status writer and caller.
//!
//! A document has no finalizer, so the controller never sees one go: after every pass,
//! and every [`SWEEP_INTERVAL`], the phase series of the documents its cache no longer
//! holds are forgotten ([`super::metrics::sweep_phases`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use serde_json::json;
use simplyblock_api::cluster_deployment_config::{
    ClusterDeploymentConfig, ClusterDeploymentConfigStatus, DeploymentPhase, EXPANSION_GRAPH,
    ExpansionStep,
};
use simplyblock_api::names::label_value;
use simplyblock_api::storage_cluster_ops::StorageClusterOps;
use simplyblock_api::{StorageCluster, StorageNode};
use simplyblock_statemachine::Machine;

use super::expansion::{self, CLUSTER_LABEL};
use super::plan::{self, ExpansionCall, Observation, Refs};
use super::{validation, world};
use crate::runtime::context::{Context, requeue};
use crate::runtime::kit::{self, Error, Guard};
use crate::runtime::machine::{self, After, Entity, Note, Pass, Stage, Status};

const MANAGER: &str = "clusterdeploymentconfig-controller";
/// Set on approved documents, for selectors; output only.
pub const READY_LABEL: &str = "storage.simplyblock.io/ready-to-deploy";

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "clusterdeploymentconfig";

/// How often the phase series of deleted documents are swept when no pass does it.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Runs the controller until the operator stops.
pub async fn run(ctx: Arc<Context>) {
    let controller = Controller::new(
        ctx.scope.api::<ClusterDeploymentConfig>(&ctx.kube),
        watcher::Config::default(),
    );
    let docs = controller.store();
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
    let swept = docs.clone();
    let reconcile_and_sweep = move |doc: Arc<ClusterDeploymentConfig>, ctx: Arc<Context>| {
        let docs = swept.clone();
        async move {
            let result = reconcile(doc, ctx.clone()).await;
            sweep(&docs, &ctx);
            result
        }
    };
    // The sweeper stops at shutdown; the controller, finishing its passes, ends the run.
    let sweeper = async {
        sweep_periodically(docs, ctx.clone()).await;
        std::future::pending::<()>().await
    };
    tokio::select! {
        () = kit::run(CONTROLLER, controller, reconcile_and_sweep, ctx.clone()) => {}
        () = sweeper => {}
    }
}

/// Forgets the phase series of every document `docs` no longer holds.
fn sweep(docs: &Store<ClusterDeploymentConfig>, ctx: &Context) {
    let existing: BTreeSet<(String, String)> = docs
        .state()
        .iter()
        .map(|d| (namespace(d), d.name_any()))
        .collect();
    let gone = super::metrics::sweep_phases(&ctx.metrics, &existing);
    if gone > 0 {
        tracing::debug!(
            controller = CONTROLLER,
            gone,
            "forgot the phases of deleted documents"
        );
    }
}

/// [`sweep`] every [`SWEEP_INTERVAL`] once the cache has synced (an empty cache before
/// that holds nothing), until the operator stops.
async fn sweep_periodically(docs: Store<ClusterDeploymentConfig>, ctx: Arc<Context>) {
    let shutdown = ctx.shutdown.clone();
    let sweeping = async {
        if docs.wait_until_ready().await.is_err() {
            return;
        }
        let mut every = tokio::time::interval(SWEEP_INTERVAL);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            sweep(&docs, &ctx);
        }
    };
    tokio::select! {
        () = sweeping => {}
        () = shutdown.wait() => {}
    }
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
    // The label write moves the resourceVersion; the status writes go onto the new one.
    let doc = label_ready(&doc, &ctx)
        .await?
        .unwrap_or_else(|| (*doc).clone());
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
        let draft = DeploymentPhase::Draft;
        write_status(ctx, doc, draft, None, Some(message), Refs::default(), None).await?;
    }
    Ok(Action::requeue(requeue::RESYNC))
}

/// Labels the document ready; returns it as stored when it wrote. The patch carries the
/// resourceVersion read, so the status read with it is still the stored one.
async fn label_ready(
    doc: &ClusterDeploymentConfig,
    ctx: &Context,
) -> Result<Option<ClusterDeploymentConfig>, Error> {
    if doc.labels().get(READY_LABEL).map(String::as_str) == Some("true") {
        return Ok(None);
    }
    let ready = Patch::Merge(json!({"metadata": {
        "resourceVersion": doc.resource_version(),
        "labels": {READY_LABEL: "true"},
    }}));
    let docs: Api<ClusterDeploymentConfig> = kit::api_of(&ctx.kube, doc);
    match docs
        .patch(&doc.name_any(), &PatchParams::default(), &ready)
        .await
    {
        Ok(labelled) => Ok(Some(labelled)),
        Err(kube::Error::Api(s)) if s.code == 409 => Err(Error::Stale(format!(
            "ClusterDeploymentConfig {}",
            doc.name_any()
        ))),
        Err(e) => Err(e.into()),
    }
}

/// Writes the document's status onto the resourceVersion read: `message` and `refs`
/// where given, the rest restated as stored.
async fn write_status(
    ctx: &Context,
    doc: &ClusterDeploymentConfig,
    phase: DeploymentPhase,
    machine: Option<&Machine<'_, ExpansionStep>>,
    message: Option<String>,
    refs: Refs,
    started: Option<Timestamp>,
) -> Result<ClusterDeploymentConfig, Error> {
    let current = doc.status.clone().unwrap_or_default();
    // Every apply restates every field: a field this manager owns and leaves out is
    // removed.
    let message = message.or(current.message);
    let now = Time(Timestamp::now());
    let conditions = simplyblock_api::conditions::of_phase(
        &current.conditions,
        phase,
        message.as_deref(),
        doc.metadata.generation,
        &now,
    );
    let status = ClusterDeploymentConfigStatus {
        phase,
        conditions,
        step: machine.map(|m| m.snapshot()).unwrap_or(current.step),
        cluster_ref: refs.cluster_ref.or(current.cluster_ref),
        node_refs: refs.node_refs.unwrap_or(current.node_refs),
        message,
        observed_generation: doc.metadata.generation,
        expansion_started_at: started.map(Time),
    };
    kit::apply_status(&ctx.kube, doc, MANAGER, &status, Guard::ResourceVersion).await
}

/// One pass of the expansion: restore the step, observe, plan, execute.
async fn expand(
    doc: &ClusterDeploymentConfig,
    status: &ClusterDeploymentConfigStatus,
    ctx: &Context,
) -> Result<Action, Error> {
    let now = Timestamp::now();
    let entity = Expansion {
        // The stored start, or this first pass after approval.
        started: status.expansion_started_at.as_ref().map_or(now, |t| t.0),
    };
    let (machine, next) = match plan::restore(status, now) {
        Ok(machine) => {
            let target = expansion::target_cluster(doc);
            let observation = observe(doc, status, machine.state(), target, ctx).await?;
            let next = plan::plan(&machine, doc, status, &observation, now);
            (machine, next)
        }
        Err(e) => (
            EXPANSION_GRAPH.start(now),
            plan::fail("UnknownStep", e.to_string()),
        ),
    };
    machine::execute(&entity, ctx, doc.clone(), machine, next, now).await
}

/// Reads what `step`'s plan needs, and nothing else. No writes.
async fn observe(
    doc: &ClusterDeploymentConfig,
    status: &ClusterDeploymentConfigStatus,
    step: ExpansionStep,
    target: Option<&str>,
    ctx: &Context,
) -> Result<Observation, Error> {
    let mut obs = Observation::default();
    let Some(target) = target else {
        return Ok(obs);
    };
    let ns = namespace(doc);
    let clusters: Api<StorageCluster> = Api::namespaced(ctx.kube.clone(), &ns);
    match step {
        ExpansionStep::Validating => {
            if plan::began(status) {
                obs.world = Some(world::read(&ctx.kube, &ns, &doc.spec).await?);
            }
        }
        ExpansionStep::CreatingCluster | ExpansionStep::AwaitingCluster => {
            obs.cluster = clusters.get_opt(target).await?;
        }
        ExpansionStep::CreatingNodes => {
            obs.cluster = clusters.get_opt(target).await?;
            if obs.cluster.is_some() {
                obs.nodes = cluster_nodes(ctx, &ns, target)
                    .await?
                    .into_iter()
                    .filter(|n| n.spec.cluster_ref == target)
                    .map(|n| (n.spec.worker_node, n.spec.slot.unwrap_or(0)))
                    .collect();
            }
        }
        ExpansionStep::Activating => {
            obs.phases = cluster_nodes(ctx, &ns, target)
                .await?
                .into_iter()
                .map(|n| (n.name_any(), n.status.map(|s| s.phase).unwrap_or_default()))
                .collect();
            if doc.spec.cluster_ref.is_none() {
                let ops: Api<StorageClusterOps> = Api::namespaced(ctx.kube.clone(), &ns);
                obs.activation_requested =
                    ops.get_opt(&plan::activation_name(target)).await?.is_some();
            }
        }
    }
    Ok(obs)
}

/// The StorageNodes labelled as `cluster`'s.
async fn cluster_nodes(ctx: &Context, ns: &str, cluster: &str) -> Result<Vec<StorageNode>, Error> {
    let selector = format!("{CLUSTER_LABEL}={}", label_value(cluster));
    let nodes: Api<StorageNode> = Api::namespaced(ctx.kube.clone(), ns);
    Ok(nodes
        .list(&ListParams::default().labels(&selector))
        .await?
        .items)
}

/// The expansion's writer and caller, for the machine runtime: one pass over one
/// document whose expansion began at `started`.
struct Expansion {
    started: Timestamp,
}

impl Entity for Expansion {
    type Object = ClusterDeploymentConfig;
    type Step = ExpansionStep;
    type Call = ExpansionCall;
    type Fields = Refs;

    fn message(doc: &ClusterDeploymentConfig) -> Option<&str> {
        doc.status.as_ref()?.message.as_deref()
    }

    /// Expanding until the machine ends Expanded (its duration measured) or Failed.
    async fn write(
        &self,
        ctx: &Context,
        doc: &ClusterDeploymentConfig,
        status: Status<'_, ExpansionStep, Refs>,
    ) -> Result<Option<ClusterDeploymentConfig>, Error> {
        let phase = match status.stage {
            Stage::Running | Stage::Holding => DeploymentPhase::Expanding,
            Stage::Succeeded => DeploymentPhase::Expanded,
            Stage::Failed => DeploymentPhase::Failed,
        };
        let refs = status.fields.unwrap_or_default();
        let machine = Some(status.machine);
        let message = Some(status.message);
        let started = Some(self.started);
        let written = write_status(ctx, doc, phase, machine, message, refs, started).await;
        let written = kit::unless_stale(written)?;
        // Measured once the end is recorded: a write that lost its race is done again.
        if written.is_some() && phase == DeploymentPhase::Expanded {
            let seconds = status.now.duration_since(self.started).as_secs_f64();
            super::metrics::expanded(&ctx.metrics, &namespace(doc), seconds);
        }
        Ok(written)
    }

    fn failing(&self, ctx: &Context, doc: &ClusterDeploymentConfig, notes: &[Note]) {
        for note in notes {
            super::metrics::validation_failure(&ctx.metrics, &namespace(doc), note.reason);
        }
    }

    async fn call(
        &self,
        pass: &mut Pass<'_, Self>,
        call: ExpansionCall,
        message: String,
    ) -> Result<After<Self>, Error> {
        let ctx = pass.ctx;
        match call {
            ExpansionCall::CreateCluster { cluster, then } => {
                // Recorded first: a crash after the create finds the cluster as ours.
                let record = Refs {
                    cluster_ref: cluster.metadata.name.clone(),
                    node_refs: None,
                };
                if !pass.write(Stage::Running, message, Some(record)).await? {
                    return Ok(After::requeue(requeue::CONFLICT));
                }
                let doc = &pass.object;
                let clusters: Api<StorageCluster> = kit::api_of(&ctx.kube, doc);
                match clusters.create(&PostParams::default(), &cluster).await {
                    Ok(_) => {
                        let message = format!("created StorageCluster {}", cluster.name_any());
                        ctx.event(doc, false, "ClusterCreated", message).await;
                    }
                    // Someone else's, created between the look and the create, or an
                    // earlier pass's: the next pass tells which.
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        return Ok(After::requeue(requeue::NEXT_STEP));
                    }
                    Err(e) => return Err(e.into()),
                }
                Ok(After::Plan((*then).into()))
            }
            ExpansionCall::CreateNodes {
                cluster,
                nodes,
                then,
            } => {
                let doc = &pass.object;
                let ns = namespace(doc);
                let api: Api<StorageNode> = Api::namespaced(ctx.kube.clone(), &ns);
                let mut created = 0;
                for node in &nodes {
                    match api.create(&PostParams::default(), node).await {
                        Ok(_) => created += 1,
                        Err(kube::Error::Api(s)) if s.code == 409 => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                if created > 0 {
                    super::metrics::nodes_created(&ctx.metrics, &ns, created);
                    let message =
                        format!("created {created} StorageNode(s) for StorageCluster {cluster}");
                    ctx.event(doc, false, "NodesCreated", message).await;
                }
                Ok(After::Plan((*then).into()))
            }
            ExpansionCall::Activate { op, then } => {
                request_activation(ctx, &pass.object, &op).await?;
                Ok(After::Plan((*then).into()))
            }
        }
    }
}

/// Creates `op`, the activation of the document's new cluster, unless an earlier pass
/// did, and says so.
async fn request_activation(
    ctx: &Context,
    doc: &ClusterDeploymentConfig,
    op: &StorageClusterOps,
) -> Result<(), Error> {
    let ops: Api<StorageClusterOps> = kit::api_of(&ctx.kube, doc);
    match ops.create(&PostParams::default(), op).await {
        Ok(_) => {}
        // Created by an earlier pass whose status write was lost.
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let message = format!(
        "requested activation of StorageCluster {} ({})",
        op.spec.cluster_ref,
        op.name_any()
    );
    ctx.event(doc, false, "ActivationRequested", message).await;
    Ok(())
}

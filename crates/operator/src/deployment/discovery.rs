//! The OperatorOps controller (action Discover) and the first-install bootstrap.
//!
//! Inspecting picks the workers once and records them; Probing runs one probe Job per
//! worker, pinned to it and owned by the run, and waits for their report ConfigMaps;
//! Writing turns the reports into a ClusterDeploymentConfig in Draft, or adopts the one of
//! that name. Every step is abortable: discovery changes nothing on the workers. The
//! decisions are the discovery crate's; this module reads and writes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use simplyblock_api::common::OpsPhase;
use simplyblock_api::operator_ops::{
    GRAPHS, OperatorAction, OperatorOps, OperatorOpsStatus, OperatorOpsStep,
};
use simplyblock_api::{ClusterDeploymentConfig, StorageCluster, StorageNode};
use simplyblock_discovery::{configmap, run};
use simplyblock_statemachine::Machine;

use crate::context::{Context, requeue};
use crate::kit::{self, Error, Guard};
use crate::metrics::Metrics;

/// A discovery run reached `phase` (terminal):
/// `simplyblock_operator_operations_total{namespace,action,result}` and
/// `simplyblock_operator_operation_duration_seconds{…}`.
fn operator_ops_finished(
    m: &Metrics,
    namespace: &str,
    action: &str,
    phase: OpsPhase,
    started_at: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
) {
    let result = format!("{phase:?}").to_lowercase();
    let labels = vec![
        ("namespace", namespace.to_owned()),
        ("action", action.to_owned()),
        ("result", result),
    ];
    let seconds = started_at
        .map(|t| jiff::Timestamp::now().duration_since(t.0).as_secs_f64())
        .unwrap_or(0.0);
    m.count("simplyblock_operator_operations_total", labels.clone());
    m.observe(
        "simplyblock_operator_operation_duration_seconds",
        labels,
        seconds,
    );
}

/// What the newest discovery run in `namespace` put in its draft.
fn discovery_found(m: &Metrics, namespace: &str, workers: usize, devices: usize) {
    let labels = vec![("namespace", namespace.to_owned())];
    m.set(
        "simplyblock_operator_discovery_workers_found_count",
        labels.clone(),
        workers as f64,
    );
    m.set(
        "simplyblock_operator_discovery_devices_found_count",
        labels,
        devices as f64,
    );
}

const MANAGER: &str = "operatorops-controller";
/// Held while a run is unfinished, so that deleting it mid-run leaves an Aborted record
/// (event and metrics) before it goes; removed once the run is terminal.
pub const FINALIZER: &str = "storage.simplyblock.io/operatorops-finalizer";

/// What the probe Jobs run.
#[derive(Clone, Debug)]
pub struct ProbeSettings {
    /// The operator's own image: it carries the probe.
    pub image: String,
    pub service_account: String,
}

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "operatorops";

/// Runs the controller until the operator stops.
pub async fn run(ctx: Arc<Context>, probe: ProbeSettings) {
    let probe = Arc::new(probe);
    let controller = Controller::new(
        ctx.scope.api::<OperatorOps>(&ctx.kube),
        watcher::Config::default(),
    );
    let store = controller.store();
    // A report ConfigMap carries its run's name as a label; the run's Jobs are owned.
    let of_run = move |cm: ConfigMap| {
        let run = cm.labels().get(configmap::LABEL_RUN).cloned();
        store
            .state()
            .into_iter()
            .filter(|o| {
                o.namespace() == cm.namespace()
                    && run.as_deref() == Some(configmap::label_value(&o.name_any()).as_str())
            })
            .map(|o| kube::runtime::reflector::ObjectRef::from_obj(&*o))
            .collect::<Vec<_>>()
    };
    let reports = watcher::Config::default().labels(&format!(
        "{}={}",
        configmap::LABEL_COMPONENT,
        configmap::COMPONENT
    ));
    let controller = controller
        .owns(ctx.scope.api::<Job>(&ctx.kube), watcher::Config::default())
        .watches(ctx.scope.api::<ConfigMap>(&ctx.kube), reports, of_run);
    kit::run(
        CONTROLLER,
        controller,
        move |op, ctx| {
            let probe = probe.clone();
            async move { reconcile(op, ctx, probe).await }
        },
        ctx,
    )
    .await
}

async fn write(ctx: &Context, op: &OperatorOps, status: &OperatorOpsStatus) -> Result<(), Error> {
    let mut status = status.clone();
    status.observed_generation = op.metadata.generation;
    kit::apply_status(&ctx.kube, op, MANAGER, &status, Guard::None).await?;
    Ok(())
}

async fn emit(ctx: &Context, op: &OperatorOps, events: &[run::Event]) {
    for e in events {
        ctx.event(op, e.warning, e.reason, e.message.clone()).await;
    }
}

async fn finish(
    ctx: &Context,
    op: &OperatorOps,
    mut status: OperatorOpsStatus,
    phase: OpsPhase,
    message: String,
) -> Result<Action, Error> {
    let reason = match phase {
        OpsPhase::Succeeded => "OperationSucceeded",
        OpsPhase::Aborted => "OperationAborted",
        _ => "OperationFailed",
    };
    ctx.event(op, phase == OpsPhase::Failed, reason, message.clone())
        .await;
    status.phase = phase;
    status.message = Some(message);
    status.completed_at = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::now(),
    ));
    write(ctx, op, &status).await?;
    release(ctx, op).await?;
    operator_ops_finished(
        &ctx.metrics,
        &op.namespace().unwrap_or_default(),
        simplyblock_statemachine::Action::name(op.spec.action),
        phase,
        status.started_at.as_ref(),
    );
    Ok(Action::await_change())
}

/// Sets the run's finalizers to `finalizers`, guarded by the resourceVersion it was read at.
async fn set_finalizers(
    ctx: &Context,
    op: &OperatorOps,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    let body = json!({"metadata": {
        "resourceVersion": op.metadata.resource_version,
        "finalizers": finalizers,
    }});
    Api::<OperatorOps>::namespaced(ctx.kube.clone(), &op.namespace().unwrap_or_default())
        .patch(&op.name_any(), &PatchParams::default(), &Patch::Merge(body))
        .await?;
    Ok(())
}

/// Drops the finalizer from a fresh read of the run (a conflict is retried by the next
/// pass, which finds the run terminal and releases again).
async fn release(ctx: &Context, op: &OperatorOps) -> Result<(), Error> {
    let api = Api::<OperatorOps>::namespaced(ctx.kube.clone(), &op.namespace().unwrap_or_default());
    let Some(fresh) = api.get_opt(&op.name_any()).await? else {
        return Ok(());
    };
    if !fresh.finalizers().iter().any(|f| f.as_str() == FINALIZER) {
        return Ok(());
    }
    let kept = fresh
        .finalizers()
        .iter()
        .filter(|f| f.as_str() != FINALIZER)
        .cloned()
        .collect();
    set_finalizers(ctx, &fresh, kept).await
}

async fn reconcile(
    op: Arc<OperatorOps>,
    ctx: Arc<Context>,
    probe: Arc<ProbeSettings>,
) -> Result<Action, Error> {
    let mut status = op.status.clone().unwrap_or_default();
    let held = op.finalizers().iter().any(|f| f.as_str() == FINALIZER);
    if status.phase.is_terminal() {
        if held {
            release(&ctx, &op).await?;
        }
        return Ok(Action::await_change());
    }
    if op.metadata.deletion_timestamp.is_some() {
        if !held {
            return Ok(Action::await_change());
        }
        // Every step is abortable: discovery changed nothing on the workers, and the
        // run's Jobs and reports are deleted with it.
        let at = status
            .step
            .state
            .clone()
            .unwrap_or_else(|| "Inspecting".into());
        return finish(
            &ctx,
            &op,
            status,
            OpsPhase::Aborted,
            format!("the run was deleted at {at}; its probe Jobs and reports go with it"),
        )
        .await;
    }
    if !held {
        let mut finalizers = op.finalizers().to_vec();
        finalizers.push(FINALIZER.into());
        set_finalizers(&ctx, &op, finalizers).await?;
        // The patch is an update of the run, which brings the next pass.
        return Ok(Action::await_change());
    }
    let now = jiff::Timestamp::now();
    let ns = op.namespace().unwrap_or_default();
    let name = op.name_any();
    let OperatorAction::Discover = op.spec.action;
    let spec = op.spec.discover.clone().unwrap_or_default();
    let mut machine = match GRAPHS.restore(OperatorAction::Discover, &status.step, now) {
        Ok(m) => m,
        Err(e) => return finish(&ctx, &op, status, OpsPhase::Failed, e.to_string()).await,
    };
    if status.phase == OpsPhase::Pending {
        status.phase = OpsPhase::Running;
        status.started_at = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
        status.step = machine.snapshot();
        status.message = Some("inspecting the workers".into());
        ctx.event(&*op, false, "OperationStarted", "discovery started".into())
            .await;
        write(&ctx, &op, &status).await?;
    }
    if op.spec.abort {
        // Every step of Discover is abortable.
        return finish(
            &ctx,
            &op,
            status,
            OpsPhase::Aborted,
            format!("aborted at {} on request", machine.state()),
        )
        .await;
    }
    if machine.timed_out(now) {
        let message = match machine.state() {
            OperatorOpsStep::Probing => format!(
                "no worker reported within the probing deadline; the reports that did arrive are the ConfigMaps labelled {}",
                configmap::run_selector(&name)
            ),
            step => format!("step {step} outlived its deadline"),
        };
        ctx.event(&*op, true, "StepDeadlineExceeded", message.clone())
            .await;
        return finish(&ctx, &op, status, OpsPhase::Failed, message).await;
    }

    match machine.state() {
        OperatorOpsStep::Inspecting => {
            let nodes = Api::<Node>::all(ctx.kube.clone())
                .list(&ListParams::default())
                .await?
                .items;
            let taken: BTreeSet<String> = Api::<StorageNode>::namespaced(ctx.kube.clone(), &ns)
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .map(|n| n.spec.worker_node)
                .collect();
            let groups = ctx
                .kube
                .list_api_groups()
                .await
                .ok()
                .map(|g| g.groups.into_iter().map(|g| g.name).collect::<Vec<_>>());
            match run::inspect(&spec, &nodes, &taken, groups.as_deref()) {
                Err(message) => finish(&ctx, &op, status, OpsPhase::Failed, message).await,
                Ok(inspection) => {
                    emit(&ctx, &op, &inspection.events).await;
                    advance(&mut machine, OperatorOpsStep::Probing, now);
                    status.step = machine.snapshot();
                    status.workers = inspection.workers.clone();
                    status.environment = Some(inspection.environment);
                    status.message =
                        Some(format!("probing {} worker(s)", inspection.workers.len()));
                    write(&ctx, &op, &status).await?;
                    Ok(Action::requeue(requeue::NEXT_STEP))
                }
            }
        }
        OperatorOpsStep::Probing => {
            let jobs: Api<Job> = Api::namespaced(ctx.kube.clone(), &ns);
            let reported = reports(&ctx, &ns, &name).await?;
            let pods = Api::<Pod>::namespaced(ctx.kube.clone(), &ns)
                .list(&ListParams::default().labels(&configmap::run_selector(&name)))
                .await?
                .items;
            if let Some((pod, why)) = pods
                .iter()
                .find_map(|p| run::image_error(p).map(|why| (p, why)))
            {
                let worker = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_else(|| pod.name_any());
                let message = format!(
                    "the probe image {} cannot be started on {worker} ({why}); point --probe-image (SIMPLYBLOCK_OPERATOR_IMAGE) at an image the workers can pull, then start a new run",
                    probe.image
                );
                ctx.event(&*op, true, "NodeProbeImageError", message.clone())
                    .await;
                return finish(&ctx, &op, status, OpsPhase::Failed, message).await;
            }
            let mut failed = Vec::new();
            for worker in &status.workers {
                let job_name = configmap::config_map_name(&name, worker);
                if reported.contains_key(worker) {
                    continue;
                }
                match jobs.get_opt(&job_name).await? {
                    None => {
                        let job = probe_job(&op, worker, &job_name, &probe);
                        match jobs.create(&PostParams::default(), &job).await {
                            Ok(_) => {}
                            Err(kube::Error::Api(s)) if s.code == 409 => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                    Some(job) if job_failed(&job) => failed.push(worker.clone()),
                    Some(_) => {}
                }
            }
            for worker in &failed {
                ctx.event(
                    &*op,
                    true,
                    "DeviceInspectionFailed",
                    format!(
                        "the probe on {worker} failed after its retries; the worker is left out"
                    ),
                )
                .await;
            }
            let pending = status
                .workers
                .iter()
                .filter(|w| !reported.contains_key(*w) && !failed.contains(w))
                .count();
            if pending > 0 {
                let message = format!(
                    "probing: {} of {} worker(s) reported",
                    reported.len(),
                    status.workers.len()
                );
                if status.message.as_deref() != Some(message.as_str()) {
                    status.message = Some(message);
                    write(&ctx, &op, &status).await?;
                }
                return Ok(Action::requeue(std::time::Duration::from_secs(2)));
            }
            if reported.is_empty() {
                return finish(
                    &ctx,
                    &op,
                    status,
                    OpsPhase::Failed,
                    "no worker reported: every probe Job failed".into(),
                )
                .await;
            }
            advance(&mut machine, OperatorOpsStep::Writing, now);
            status.step = machine.snapshot();
            status.message = Some(format!(
                "writing the draft from {} report(s)",
                reported.len()
            ));
            write(&ctx, &op, &status).await?;
            Ok(Action::requeue(requeue::NEXT_STEP))
        }
        OperatorOpsStep::Writing => {
            let nodes = Api::<Node>::all(ctx.kube.clone())
                .list(&ListParams::default())
                .await?
                .items;
            let reported = reports(&ctx, &ns, &name).await?;
            let reports: Vec<_> = reported.into_values().collect();
            let environment = status
                .environment
                .unwrap_or(simplyblock_api::cluster_deployment_config::Environment::Vanilla);
            match run::plan_writing(&name, &ns, &spec, environment, &nodes, &reports) {
                run::Writing::Fail { message, events } => {
                    emit(&ctx, &op, &events).await;
                    finish(&ctx, &op, status, OpsPhase::Failed, message).await
                }
                run::Writing::Write {
                    config,
                    events,
                    message,
                    ..
                } => {
                    let docs: Api<ClusterDeploymentConfig> = Api::namespaced(ctx.kube.clone(), &ns);
                    let doc_name = config.name_any();
                    match docs.create(&PostParams::default(), &config).await {
                        Ok(_) => emit(&ctx, &op, &events).await,
                        Err(kube::Error::Api(s)) if s.code == 409 => {
                            emit(&ctx, &op, &run::adopted_events(&doc_name)).await
                        }
                        Err(e) => return Err(e.into()),
                    }
                    let (workers, devices) = run::found(&config);
                    discovery_found(&ctx.metrics, &ns, workers, devices);
                    status.config_ref = Some(doc_name);
                    finish(&ctx, &op, status, OpsPhase::Succeeded, message).await
                }
            }
        }
    }
}

fn advance(
    machine: &mut Machine<'_, OperatorOpsStep>,
    next: OperatorOpsStep,
    now: jiff::Timestamp,
) {
    if let Err(e) = machine.transition_to(next, now) {
        tracing::error!(error = %e, "illegal discovery transition");
    }
}

/// The run's report ConfigMaps, by the worker each names.
async fn reports(
    ctx: &Context,
    ns: &str,
    run: &str,
) -> Result<BTreeMap<String, simplyblock_discovery::plan::WorkerReport>, Error> {
    let maps: Api<ConfigMap> = Api::namespaced(ctx.kube.clone(), ns);
    let mut out = BTreeMap::new();
    for cm in maps
        .list(&ListParams::default().labels(&configmap::run_selector(run)))
        .await?
        .items
    {
        let Some(worker) = cm
            .annotations()
            .get(configmap::NODE_ANNOTATION)
            .cloned()
            .or_else(|| cm.labels().get(configmap::LABEL_NODE).cloned())
        else {
            continue;
        };
        let report = run::read_report(&worker, &cm.name_any(), cm.data.as_ref());
        out.insert(worker, report);
    }
    Ok(out)
}

fn job_failed(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Failed" && c.status == "True"))
}

fn probe_job(op: &OperatorOps, worker: &str, name: &str, probe: &ProbeSettings) -> Job {
    let run = op.name_any();
    let mut labels = configmap::labels(&run, worker);
    labels.insert(
        "storage.simplyblock.io/managed-by".into(),
        "operatorops".into(),
    );
    let tolerations = op
        .spec
        .discover
        .as_ref()
        .map(|d| d.tolerations.clone())
        .unwrap_or_default();
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": op.namespace(),
            "labels": labels,
            "annotations": {(configmap::NODE_ANNOTATION): worker},
            "ownerReferences": [op.controller_owner_ref(&())],
        },
        "spec": {
            "backoffLimit": 2,
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    // Pinned, not scheduled: the probe must read this worker.
                    "nodeName": worker,
                    "restartPolicy": "Never",
                    "serviceAccountName": probe.service_account,
                    "hostPID": true,
                    "tolerations": tolerations,
                    "containers": [{
                        "name": "probe",
                        "image": probe.image,
                        "imagePullPolicy": "Always",
                        "args": ["probe", "--root", "/host", "--node", worker, "--run", run, "--run-uid", op.uid().unwrap_or_default(), "--config-map", name],
                        "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
                        "securityContext": {"privileged": true},
                        "volumeMounts": [{"name": "host", "mountPath": "/host", "readOnly": true}],
                    }],
                    "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
                },
            },
        },
    }))
    .unwrap_or_default()
}

/// The first-install guard: raises `initial-discovery` in `namespace` only on a fresh
/// installation with a usable worker, and says why not otherwise. A read error declines.
pub async fn bootstrap(client: &kube::Client, namespace: &str) -> Result<String, String> {
    let read = async {
        let ops = Api::<OperatorOps>::all(client.clone())
            .list_metadata(&ListParams::default())
            .await?
            .items
            .len();
        let docs = Api::<ClusterDeploymentConfig>::all(client.clone())
            .list_metadata(&ListParams::default())
            .await?
            .items
            .len();
        let clusters = Api::<StorageCluster>::all(client.clone())
            .list_metadata(&ListParams::default())
            .await?
            .items
            .len();
        let nodes = Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items;
        Ok::<_, kube::Error>((ops, docs, clusters, nodes))
    };
    let (ops, docs, clusters, nodes) = read
        .await
        .map_err(|e| format!("the installation could not be read ({e})"))?;
    let op = run::bootstrap(namespace, ops, docs, clusters, &nodes).map_err(|d| d.to_string())?;
    let api = Api::<OperatorOps>::namespaced(client.clone(), namespace);
    let give_up = tokio::time::Instant::now() + BOOTSTRAP_RETRY_FOR;
    loop {
        match api.create(&PostParams::default(), &op).await {
            Ok(_) => return Ok(format!("raised OperatorOps {}", run::INITIAL_DISCOVERY)),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                return Ok(format!(
                    "OperatorOps {} already exists",
                    run::INITIAL_DISCOVERY
                ));
            }
            Err(kube::Error::Api(s))
                if webhook_unreachable(s.code) && tokio::time::Instant::now() < give_up =>
            {
                tracing::debug!(error = %s, "the OperatorOps webhook does not answer yet; retrying");
                tokio::time::sleep(BOOTSTRAP_RETRY_EVERY).await;
            }
            Err(e) => {
                return Err(format!(
                    "creating OperatorOps {} failed ({e})",
                    run::INITIAL_DISCOVERY
                ));
            }
        }
    }
}

/// How often and for how long the bootstrap retries its create while the webhook that
/// admits it is not answering (the operator's own server may still be starting).
const BOOTSTRAP_RETRY_EVERY: std::time::Duration = std::time::Duration::from_millis(500);
const BOOTSTRAP_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(120);

/// The API server's answers when an admission webhook cannot be reached: Internal (500,
/// the call failed), ServiceUnavailable (503) and Timeout (504). Every other refusal is
/// final.
pub fn webhook_unreachable(code: u16) -> bool {
    matches!(code, 500 | 503 | 504)
}

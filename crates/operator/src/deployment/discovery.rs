//! The OperatorOps controller (action Discover) on the shared [`crate::runtime::ops`] runtime, and
//! the first-install bootstrap.
//!
//! An OperatorOps takes no lock: it is its own target and runs at once. The phases, abort,
//! deadlines, the finalizer and the standard events and metrics are the runtime's; this
//! module is what each step reads ([`observe`]), decides ([`plan`], pure, with the
//! discovery crate's decisions) and calls ([`execute`]).
//!
//! | step | reads | call | done when |
//! |---|---|---|---|
//! | Inspecting | Nodes, StorageNodes, API groups | | the workers and environment are recorded |
//! | Probing | report ConfigMaps, probe pods and Jobs | a probe Job per worker without one, pinned to it and owned by the run | every worker reported or its Job failed (left out); an image that cannot be pulled fails the run |
//! | Writing | Nodes, reports, the document of the draft's name | create the draft | the draft exists: written by this run, or adopted |
//!
//! Every step is abortable: discovery changes nothing on the workers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde_json::json;
use simplyblock_api::cluster_deployment_config::Environment;
use simplyblock_api::operator_ops::{OperatorOps, OperatorOpsStep};
use simplyblock_api::{ClusterDeploymentConfig, StorageCluster, StorageNode};
use simplyblock_discovery::plan::{DISCOVERED_BY_LABEL, WorkerReport, config_name};
use simplyblock_discovery::{configmap, run};
use simplyblock_statemachine::Machine;

use crate::runtime::context::Context;
use crate::runtime::ops::{self, Move, Note, Noted, OpsResource, Plan, Steps};

/// Held while a run is unfinished, so that deleting it mid-run leaves an Aborted record
/// (event and metrics) before it goes; removed once the run is terminal.
pub const FINALIZER: &str = "storage.simplyblock.io/operatorops-finalizer";
const MANAGER: &str = "operatorops-controller";
/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "operatorops";
const METRIC_PREFIX: &str = "simplyblock_operator_";

/// How often Probing looks for reports (their ConfigMaps' watch usually comes first).
const PROBE_POLL: Duration = Duration::from_secs(2);

/// What the probe Jobs run.
#[derive(Clone, Debug)]
pub struct ProbeSettings {
    /// The operator's own image: it carries the probe.
    pub image: String,
    /// The operator's own pull policy (the chart's `image.pullPolicy`): an installation
    /// from a mirror, or with images imported into the runtime, pulls the probe as it
    /// pulled the operator.
    pub pull_policy: String,
    /// The operator's own pull secrets (the chart's `imagePullSecrets`).
    pub pull_secrets: Vec<String>,
    pub service_account: String,
}

impl ProbeSettings {
    /// The released operator image.
    pub const IMAGE: &str = "quay.io/simplyblock-io/simplyblock-operator:latest";
    /// The service account the chart gives probe Jobs.
    pub const SERVICE_ACCOUNT: &str = "simplyblock-nodeprobe";
    /// The pull policy when none is given: a tagged image once on each worker.
    pub const PULL_POLICY: &str = "IfNotPresent";
}

impl Default for ProbeSettings {
    fn default() -> ProbeSettings {
        ProbeSettings {
            image: Self::IMAGE.into(),
            pull_policy: Self::PULL_POLICY.into(),
            pull_secrets: Vec::new(),
            service_account: Self::SERVICE_ACCOUNT.into(),
        }
    }
}

/// OperatorOps' own status fields, beside the common ones.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fields {
    /// Fixed in Inspecting.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<Environment>,
    /// The document Writing wrote.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_ref: Option<String>,
}

impl OpsResource for OperatorOps {
    /// The operator is not a resource of this API: a run is its own target.
    type Target = OperatorOps;
    const FINALIZER: &'static str = FINALIZER;
    const MANAGER: &'static str = MANAGER;
    const METRIC_PREFIX: &'static str = METRIC_PREFIX;
    const TARGET_LABEL: &'static str = "namespace";
    const LOCKS_TARGET: bool = false;

    fn target_name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
    type Fields = Fields;
    fn kind_status(&self) -> Fields {
        let Some(s) = &self.status else {
            return Fields::default();
        };
        Fields {
            workers: s.workers.clone(),
            environment: s.environment,
            config_ref: s.config_ref.clone(),
        }
    }
    fn lock_holder(_: &OperatorOps) -> Option<&str> {
        None
    }
    fn metric_target(&self) -> String {
        self.namespace().unwrap_or_default()
    }
    fn own_target(&self) -> Option<OperatorOps> {
        Some(self.clone())
    }
    fn deleted_message(&self) -> String {
        let at = self
            .ops_status()
            .step
            .state
            .unwrap_or_else(|| OperatorOpsStep::Inspecting.to_string());
        format!("the run was deleted at {at}; its probe Jobs and reports go with it")
    }
}

/// What the steps read. Each step fills its own fields; the others stay empty.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// Inspecting: the operator's namespace, the only one probe Jobs run in.
    pub operator_namespace: Option<String>,
    /// Inspecting, Writing: every Node.
    pub nodes: Vec<Node>,
    /// Inspecting: the workers that already run a StorageNode in the namespace.
    pub storage_node_workers: BTreeSet<String>,
    /// Inspecting: the API groups' names; `None` when listing them failed.
    pub api_groups: Option<Vec<String>>,
    /// Probing, Writing: the run's reports, by the worker each names.
    pub reports: BTreeMap<String, WorkerReport>,
    /// Probing: the run's probe pods.
    pub probe_pods: Vec<Pod>,
    /// Probing: the run's probe Jobs, by name: whether each failed after its retries.
    pub probe_jobs: BTreeMap<String, bool>,
    /// Writing: the labels of the ClusterDeploymentConfig of the draft's name, when one
    /// exists.
    pub existing_draft: Option<BTreeMap<String, String>>,
}

/// The one side effect a step may issue.
#[derive(Clone, Debug)]
pub enum Call {
    /// Start the probe on these workers: one Job each (an existing one is kept).
    CreateProbeJobs(Vec<String>),
    /// Create the draft; its events are raised once it is written. A document of its
    /// name that appeared meanwhile (409) is adopted by the next look.
    WriteDraft {
        config: Box<ClusterDeploymentConfig>,
        notes: Vec<Note>,
    },
}

/// The steps of action Discover.
#[derive(Clone, Debug)]
pub struct DiscoverSteps {
    pub probe: ProbeSettings,
}

impl Steps<OperatorOps> for DiscoverSteps {
    type Obs = Observed;
    type Call = Call;

    async fn observe(
        &self,
        op: &OperatorOps,
        _target: &OperatorOps,
        machine: &Machine<'static, OperatorOpsStep>,
        ctx: &Context,
    ) -> Result<Observed, ops::Error> {
        observe(op, machine.state(), ctx).await
    }

    fn plan(
        &self,
        op: &OperatorOps,
        _target: &OperatorOps,
        machine: &Machine<'static, OperatorOpsStep>,
        obs: &Observed,
        _now: Timestamp,
    ) -> Noted<OperatorOpsStep, Call, Fields> {
        plan(op, machine.state(), obs, &self.probe.image)
    }

    async fn execute(
        &self,
        op: &OperatorOps,
        _target: &OperatorOps,
        call: &Call,
        ctx: &Context,
    ) -> Result<(), String> {
        execute(op, call, &self.probe, ctx).await
    }

    fn deadline_message(&self, op: &OperatorOps, step: OperatorOpsStep) -> Option<String> {
        (step == OperatorOpsStep::Probing).then(|| {
            format!(
                "no worker reported within the probing deadline; the reports that did arrive are the ConfigMaps labelled {}",
                configmap::run_selector(&op.name_any())
            )
        })
    }
}

/// Runs the controller until the operator stops: a run wakes on its own changes, its
/// Jobs' and its report ConfigMaps'.
pub async fn run(ctx: Arc<Context>, probe: ProbeSettings) {
    let controller = ops::controller::<OperatorOps>(&ctx);
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
            .map(|o| ObjectRef::from_obj(&*o))
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
    ops::run(CONTROLLER, controller, DiscoverSteps { probe }, ctx).await
}

/// What `step` reads. No writes.
pub async fn observe(
    op: &OperatorOps,
    step: OperatorOpsStep,
    ctx: &Context,
) -> Result<Observed, ops::Error> {
    let ns = op.namespace().unwrap_or_default();
    let name = op.name_any();
    let nodes = || async {
        Api::<Node>::all(ctx.kube.clone())
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
    };
    let of_run = ListParams::default().labels(&configmap::run_selector(&name));
    let mut obs = Observed::default();
    match step {
        OperatorOpsStep::Inspecting => {
            obs.operator_namespace = Some(ctx.namespace.clone());
            obs.nodes = nodes().await?;
            obs.storage_node_workers = Api::<StorageNode>::namespaced(ctx.kube.clone(), &ns)
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .map(|n| n.spec.worker_node)
                .collect();
            obs.api_groups = ctx
                .kube
                .list_api_groups()
                .await
                .ok()
                .map(|g| g.groups.into_iter().map(|g| g.name).collect());
        }
        OperatorOpsStep::Probing => {
            obs.reports = reports(ctx, &ns, op).await?;
            obs.probe_pods = Api::<Pod>::namespaced(ctx.kube.clone(), &ns)
                .list(&of_run)
                .await?
                .items;
            obs.probe_jobs = Api::<Job>::namespaced(ctx.kube.clone(), &ns)
                .list(&of_run)
                .await?
                .items
                .into_iter()
                .map(|job| (job.name_any(), job_failed(&job)))
                .collect();
        }
        OperatorOpsStep::Writing => {
            obs.nodes = nodes().await?;
            obs.reports = reports(ctx, &ns, op).await?;
            let spec = op.spec.discover.clone().unwrap_or_default();
            obs.existing_draft = Api::<ClusterDeploymentConfig>::namespaced(ctx.kube.clone(), &ns)
                .get_opt(&config_name(&name, &spec))
                .await?
                .map(|doc| doc.labels().clone());
        }
    }
    Ok(obs)
}

/// The run's report ConfigMaps, by the worker each names.
async fn reports(
    ctx: &Context,
    ns: &str,
    op: &OperatorOps,
) -> Result<BTreeMap<String, WorkerReport>, ops::Error> {
    let maps: Api<ConfigMap> = Api::namespaced(ctx.kube.clone(), ns);
    let (name, uid) = (op.name_any(), op.uid().unwrap_or_default());
    let run = configmap::RunRef {
        name: &name,
        uid: &uid,
    };
    let mut out = BTreeMap::new();
    for cm in maps
        .list(&ListParams::default().labels(&configmap::run_selector(&name)))
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
        // Not this run's report, whatever its labels say: left out, so the worker's
        // report is still missing.
        if !configmap::is_report_of(&cm, run, &worker) {
            continue;
        }
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

/// Why a run outside the operator's namespace `home` probes nothing.
fn probing_elsewhere(op: &OperatorOps, home: &str) -> String {
    format!(
        "probe Jobs run privileged with the host's root mounted, so they run only in the operator's namespace {home}, and this run is in {}: create the OperatorOps in {home}",
        op.namespace().unwrap_or_default()
    )
}

/// Issues one call; `Err` is the sentence a person reads.
pub async fn execute(
    op: &OperatorOps,
    call: &Call,
    probe: &ProbeSettings,
    ctx: &Context,
) -> Result<(), String> {
    let ns = op.namespace().unwrap_or_default();
    match call {
        Call::CreateProbeJobs(workers) => {
            // Never elsewhere, whatever decided the call.
            if ns != ctx.namespace {
                return Err(probing_elsewhere(op, &ctx.namespace));
            }
            let jobs: Api<Job> = Api::namespaced(ctx.kube.clone(), &ns);
            for worker in workers {
                let name = configmap::config_map_name(&op.name_any(), worker);
                let job = probe_job(op, worker, &name, probe)?;
                match jobs.create(&PostParams::default(), &job).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(format!("creating probe Job {name}: {e}")),
                }
            }
            Ok(())
        }
        Call::WriteDraft { config, notes } => {
            let docs: Api<ClusterDeploymentConfig> = Api::namespaced(ctx.kube.clone(), &ns);
            match docs.create(&PostParams::default(), config).await {
                Ok(_) => {
                    for note in notes {
                        ctx.event(op, note.warning, note.reason, note.message.clone())
                            .await;
                    }
                    let (workers, devices) = run::found(config);
                    discovery_found(&ctx.metrics, &ns, workers, devices);
                    Ok(())
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(format!(
                    "creating ClusterDeploymentConfig {}: {e}",
                    config.name_any()
                )),
            }
        }
    }
}

/// What the newest draft written in `namespace` proposes:
/// `simplyblock_operator_discovery_{workers,devices}_found_count{namespace}`.
fn discovery_found(
    m: &crate::runtime::metrics::Metrics,
    namespace: &str,
    workers: usize,
    devices: usize,
) {
    let labels = vec![("namespace", namespace.to_owned())];
    m.set(
        &format!("{METRIC_PREFIX}discovery_workers_found_count"),
        labels.clone(),
        workers as f64,
    );
    m.set(
        &format!("{METRIC_PREFIX}discovery_devices_found_count"),
        labels,
        devices as f64,
    );
}

impl From<run::Event> for Note {
    fn from(e: run::Event) -> Note {
        Note {
            warning: e.warning,
            reason: e.reason,
            message: e.message,
        }
    }
}

fn notes(events: Vec<run::Event>) -> Vec<Note> {
    events.into_iter().map(Note::from).collect()
}

/// What `step` does next, from one observation, with the events that go with it. Pure.
pub fn plan(
    op: &OperatorOps,
    step: OperatorOpsStep,
    obs: &Observed,
    probe_image: &str,
) -> Noted<OperatorOpsStep, Call, Fields> {
    match step {
        OperatorOpsStep::Inspecting => plan_inspecting(op, obs),
        OperatorOpsStep::Probing => plan_probing(op, obs, probe_image),
        OperatorOpsStep::Writing => plan_writing(op, obs),
    }
}

fn plan_inspecting(op: &OperatorOps, obs: &Observed) -> Noted<OperatorOpsStep, Call, Fields> {
    if let Some(home) = &obs.operator_namespace
        && op.namespace().as_ref() != Some(home)
    {
        return Plan::Fail(probing_elsewhere(op, home)).into();
    }
    let spec = op.spec.discover.clone().unwrap_or_default();
    let api_groups = obs.api_groups.as_deref();
    match run::inspect(&spec, &obs.nodes, &obs.storage_node_workers, api_groups) {
        Err(message) => Plan::Fail(message).into(),
        Ok(inspection) => Noted {
            plan: Plan::Advance {
                to: Move::To(OperatorOpsStep::Probing),
                message: format!("probing {} worker(s)", inspection.workers.len()),
                kind_status: Some(Fields {
                    workers: inspection.workers,
                    environment: Some(inspection.environment),
                    ..op.kind_status()
                }),
            },
            notes: notes(inspection.events),
        },
    }
}

fn plan_probing(
    op: &OperatorOps,
    obs: &Observed,
    probe_image: &str,
) -> Noted<OperatorOpsStep, Call, Fields> {
    if let Some((pod, why)) = obs
        .probe_pods
        .iter()
        .find_map(|p| run::image_error(p).map(|why| (p, why)))
    {
        let worker = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_else(|| pod.name_any());
        let message = format!(
            "the probe image {probe_image} cannot be started on {worker} ({why}); point --probe-image (SIMPLYBLOCK_OPERATOR_IMAGE) at an image the workers can pull, then start a new run"
        );
        return Noted {
            notes: vec![Note {
                warning: true,
                reason: "NodeProbeImageError",
                message: message.clone(),
            }],
            plan: Plan::Fail(message),
        };
    }
    let run = op.name_any();
    let workers = op.status.clone().unwrap_or_default().workers;
    let unreported: Vec<&String> = workers
        .iter()
        .filter(|w| !obs.reports.contains_key(*w))
        .collect();
    let job_of = |w: &str| obs.probe_jobs.get(&configmap::config_map_name(&run, w));
    let unstarted: Vec<String> = unreported
        .iter()
        .filter(|w| job_of(w).is_none())
        .map(|w| (*w).clone())
        .collect();
    if !unstarted.is_empty() {
        return Plan::Call {
            message: format!("probing: starting the probe on {}", unstarted.join(", ")),
            call: Call::CreateProbeJobs(unstarted),
        }
        .into();
    }
    let (failed, pending): (Vec<&String>, Vec<&String>) = unreported
        .into_iter()
        .partition(|w| job_of(w) == Some(&true));
    let notes = failed
        .iter()
        .map(|w| Note {
            warning: true,
            reason: "DeviceInspectionFailed",
            message: format!("the probe on {w} failed after its retries; the worker is left out"),
        })
        .collect();
    let plan = if !pending.is_empty() {
        let left_out = match failed.is_empty() {
            true => String::new(),
            false => format!(
                "; left out after their probe failed: {}",
                failed
                    .iter()
                    .map(|w| w.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        Plan::Wait {
            message: format!(
                "probing: {} of {} worker(s) reported{left_out}",
                obs.reports.len(),
                workers.len()
            ),
            after: PROBE_POLL,
            event: None,
        }
    } else if obs.reports.is_empty() {
        Plan::Fail("no worker reported: every probe Job failed".into())
    } else {
        Plan::Advance {
            to: Move::To(OperatorOpsStep::Writing),
            message: format!("writing the draft from {} report(s)", obs.reports.len()),
            kind_status: None,
        }
    };
    Noted { plan, notes }
}

fn plan_writing(op: &OperatorOps, obs: &Observed) -> Noted<OperatorOpsStep, Call, Fields> {
    let run = op.name_any();
    let ns = op.namespace().unwrap_or_default();
    let spec = op.spec.discover.clone().unwrap_or_default();
    let environment = op
        .status
        .as_ref()
        .and_then(|s| s.environment)
        .unwrap_or(Environment::Vanilla);
    let reports: Vec<WorkerReport> = obs.reports.values().cloned().collect();
    match run::plan_writing(&run, &ns, &spec, environment, &obs.nodes, &reports) {
        run::Writing::Fail { message, events } => Noted {
            plan: Plan::Fail(message),
            notes: notes(events),
        },
        run::Writing::Write {
            config,
            events,
            message,
            ..
        } => {
            let name = config.name_any();
            let Some(existing) = &obs.existing_draft else {
                return Plan::Call {
                    message: format!("writing ClusterDeploymentConfig {name} in Draft"),
                    call: Call::WriteDraft {
                        config,
                        notes: notes(events),
                    },
                }
                .into();
            };
            let written_by_this_run =
                existing.get(DISCOVERED_BY_LABEL) == config.labels().get(DISCOVERED_BY_LABEL);
            Noted {
                plan: Plan::Succeed {
                    message,
                    kind_status: Some(Fields {
                        config_ref: Some(name.clone()),
                        ..op.kind_status()
                    }),
                },
                // Its events were raised when it was written; an adopted document's
                // planned notes describe another document.
                notes: match written_by_this_run {
                    true => Vec::new(),
                    false => notes(run::adopted_events(&name)),
                },
            }
        }
    }
}

fn probe_job(
    op: &OperatorOps,
    worker: &str,
    name: &str,
    probe: &ProbeSettings,
) -> Result<Job, String> {
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
    job_from(
        name,
        json!({
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
                        "imagePullSecrets": probe.pull_secrets.iter()
                            .map(|name| json!({"name": name}))
                            .collect::<Vec<_>>(),
                        "hostPID": true,
                        "tolerations": tolerations,
                        "containers": [{
                            "name": "probe",
                            "image": probe.image,
                            "imagePullPolicy": probe.pull_policy,
                            "args": ["probe", "--root", "/host", "--node", worker, "--run", run, "--run-uid", op.uid().unwrap_or_default(), "--config-map", name],
                            "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
                            "securityContext": {"privileged": true},
                            "volumeMounts": [{"name": "host", "mountPath": "/host", "readOnly": true}],
                        }],
                        "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
                    },
                },
            },
        }),
    )
}

/// The Job `document` describes. One that does not decode is an error: an empty Job in
/// its place would be created nameless, or worse, run nothing on the worker.
fn job_from(name: &str, document: serde_json::Value) -> Result<Job, String> {
    serde_json::from_value(document).map_err(|e| {
        format!(
            "building probe Job {name} failed: its manifest is not a Job ({e}); this is a bug in the operator, report it with the operator's version"
        )
    })
}

#[cfg(test)]
#[path = "discovery_tests.rs"]
mod tests;

/// The first-install guard: raises `initial-discovery` in `namespace` only on a fresh
/// installation with a usable worker, and says why not otherwise. A read error declines.
pub async fn bootstrap(
    client: &kube::Client,
    namespace: &str,
    cluster_name: Option<String>,
) -> Result<String, String> {
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
    let op = run::bootstrap(namespace, ops, docs, clusters, &nodes, cluster_name)
        .map_err(|d| d.to_string())?;
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

//! What the OperatorOps controller and the first-install bootstrap call: each function
//! takes data already read from the API and returns what to write and which events to
//! emit, so the controller stays a thin loop of reads and writes.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use simplyblock_api::cluster_deployment_config::{ClusterDeploymentConfig, Environment};
use simplyblock_api::operator_ops::{
    DeviceFilter, DiscoverSpec, OperatorAction, OperatorOps, OperatorOpsSpec,
};

use crate::Error;
use crate::plan::{self, Input, Plan, WorkerReport};
use crate::worker::{environment, usable_worker};

/// A Kubernetes event to emit on the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Event {
    fn normal(reason: &'static str, message: String) -> Self {
        Event {
            warning: false,
            reason,
            message,
        }
    }
    fn warning(reason: &'static str, message: String) -> Self {
        Event {
            warning: true,
            reason,
            message,
        }
    }
}

/// What Inspecting concluded: the workers (sorted), the environment, and the events.
#[derive(Debug, Clone, PartialEq)]
pub struct Inspection {
    pub workers: Vec<String>,
    pub environment: Environment,
    pub events: Vec<Event>,
}

/// Inspecting: choose the run's workers from the Nodes. `storage_node_workers` are the
/// workers that already have a StorageNode; they are dropped silently. `api_groups` is
/// `None` when listing them failed, which is an event rather than a failure.
pub fn inspect(
    spec: &DiscoverSpec,
    nodes: &[Node],
    storage_node_workers: &BTreeSet<String>,
    api_groups: Option<&[String]>,
) -> Result<Inspection, String> {
    let mut events = Vec::new();
    if api_groups.is_none() {
        events.push(Event::warning(
            "EnvironmentPartiallyRead",
            "the API groups could not be listed, so the distribution was concluded from the nodes alone".into(),
        ));
    }
    let enable_cp = spec.enable_control_plane_nodes.unwrap_or(false);
    let mut workers = Vec::new();
    for n in nodes {
        let Some(name) = n.metadata.name.clone() else {
            continue;
        };
        if !spec.workers.is_empty() && !spec.workers.contains(&name) {
            continue;
        }
        let labels = n.metadata.labels.clone().unwrap_or_default();
        if !spec
            .node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
        {
            continue;
        }
        if storage_node_workers.contains(&name) {
            continue;
        }
        match usable_worker(n, enable_cp) {
            Ok(()) => workers.push(name),
            Err(reason) => events.push(Event::normal(
                "WorkerDeclined",
                format!("{name} is left out: {reason}"),
            )),
        }
    }
    for w in &spec.workers {
        if !nodes.iter().any(|n| n.metadata.name.as_deref() == Some(w)) {
            events.push(Event::warning(
                "WorkerDeclined",
                format!("{w} is named in spec.discover.workers and no such Node exists"),
            ));
        }
    }
    workers.sort();
    workers.dedup();
    if workers.is_empty() {
        return Err(format!(
            "no schedulable worker is free: every candidate node is cordoned, tainted NoSchedule/NoExecute, a control-plane node without spec.discover.enableControlPlaneNodes, or already runs a StorageNode ({} node(s) considered)",
            nodes.len()
        ));
    }
    Ok(Inspection {
        workers,
        environment: environment(nodes, api_groups),
        events,
    })
}

/// What Writing does.
#[derive(Debug, Clone)]
pub enum Writing {
    /// Create this draft (or adopt the existing one of the same name, see
    /// [`adopted_events`]), emit the events, and succeed.
    Write {
        config: Box<ClusterDeploymentConfig>,
        events: Vec<Event>,
        /// For the run's status.message.
        message: String,
        plan: Box<Plan>,
    },
    /// Fail the run with this message, after emitting the events.
    Fail { message: String, events: Vec<Event> },
}

/// Writing: plan the draft from the reports and say what to write and emit.
pub fn plan_writing(
    run: &str,
    namespace: &str,
    spec: &DiscoverSpec,
    environment: Environment,
    nodes: &[Node],
    reports: &[WorkerReport],
) -> Writing {
    if reports.is_empty() {
        return Writing::Fail {
            message: "the probe reports are gone: no ConfigMap labelled for this run remains, so there is nothing to plan from; start a new discovery run".into(),
            events: Vec::new(),
        };
    }
    let input = Input {
        run,
        namespace: Some(namespace),
        spec,
        environment: Some(environment),
        nodes,
        reports,
        require_fully_readable: false,
    };
    let plan = match plan::plan(&input) {
        Ok(p) => p,
        Err(e) => {
            return Writing::Fail {
                message: e.to_string(),
                events: Vec::new(),
            };
        }
    };
    let mut events: Vec<Event> = plan
        .refusals
        .iter()
        .map(|r| Event::normal("DeviceDeclined", r.line()))
        .collect();
    match &plan.config {
        None => Writing::Fail {
            message: format!(
                "no worker has a device this run would use: {}",
                plan.summary
            ),
            events,
        },
        Some(config) => {
            events.extend(
                plan.notes
                    .iter()
                    .map(|n| Event::normal("ConfigWritten", n.clone())),
            );
            events.push(Event::normal("OperationSucceeded", plan.summary.clone()));
            let mut message = plan.summary.clone();
            if !plan.explain.is_empty() {
                message.push_str(". ");
                message.push_str(&plan.explain.join("; "));
            }
            Writing::Write {
                config: Box::new(config.clone()),
                events,
                message,
                plan: Box::new(plan),
            }
        }
    }
}

/// The events when a document of the draft's name already exists: it is adopted and left
/// as it is, and the planned notes are not emitted since they describe another document.
pub fn adopted_events(name: &str) -> Vec<Event> {
    vec![Event::normal(
        "ConfigExists",
        format!(
            "a ClusterDeploymentConfig named {name} already exists; it is adopted as this run's result and left unchanged"
        ),
    )]
}

/// The name of the first-install run.
pub const INITIAL_DISCOVERY: &str = "initial-discovery";

/// Why the first-install bootstrap raises no run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapDecline(pub String);

impl std::fmt::Display for BootstrapDecline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The bootstrap guard: raise `initial-discovery` only on an installation with no
/// previous result (no OperatorOps, no ClusterDeploymentConfig, no StorageCluster) and at
/// least one node the run would use. A run that fired on every restart would start a Job
/// on every node at each upgrade; one with no usable worker could only fail and leave a
/// finalizer behind. A read error is the caller's to turn into a decline.
pub fn bootstrap(
    namespace: &str,
    operator_ops: usize,
    configs: usize,
    clusters: usize,
    nodes: &[Node],
) -> Result<OperatorOps, BootstrapDecline> {
    if operator_ops > 0 {
        return Err(BootstrapDecline(format!(
            "{operator_ops} operator operation(s) have already run"
        )));
    }
    if configs > 0 {
        return Err(BootstrapDecline(format!(
            "{configs} deployment config(s) already exist"
        )));
    }
    if clusters > 0 {
        return Err(BootstrapDecline(format!(
            "{clusters} storage cluster(s) are already deployed"
        )));
    }
    if !nodes.iter().any(|n| usable_worker(n, false).is_ok()) {
        return Err(BootstrapDecline(format!(
            "none of the {} node(s) hold storage without being asked to",
            nodes.len()
        )));
    }
    Ok(OperatorOps {
        metadata: ObjectMeta {
            name: Some(INITIAL_DISCOVERY.into()),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        spec: OperatorOpsSpec {
            action: OperatorAction::Discover,
            abort: false,
            discover: Some(DiscoverSpec {
                // A machine that held data before carries a partition table on every
                // disk; the first run is meant to show what the fleet has.
                device_filter: Some(DeviceFilter {
                    enable_partitioned_devices: Some(true),
                    ..DeviceFilter::default()
                }),
                ..DiscoverSpec::default()
            }),
        },
        status: None,
    })
}

/// Decodes one report ConfigMap's data for the planner; a missing key or a refused report
/// becomes the worker's refusal rather than a silent drop.
pub fn read_report(
    worker: &str,
    config_map: &str,
    data: Option<&std::collections::BTreeMap<String, String>>,
) -> WorkerReport {
    let report = match data.and_then(|d| d.get(crate::configmap::REPORT_KEY)) {
        None => Err(Error::ReportMissing {
            config_map: config_map.to_string(),
        }),
        Some(text) => crate::report::decode(text.as_bytes()),
    };
    WorkerReport {
        worker: worker.to_string(),
        report,
    }
}

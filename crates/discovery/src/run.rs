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

/// How many workers a draft proposes, and how many devices across them (each group's
/// device list is every one of its workers').
pub fn found(config: &ClusterDeploymentConfig) -> (usize, usize) {
    let groups = config.spec.node_sets.iter().flat_map(|s| &s.groups);
    groups.fold((0, 0), |(workers, devices), g| {
        let each = g.devices.as_ref().map_or(0, |d| {
            d.nvme.as_ref().map_or(0, Vec::len) + d.block.as_ref().map_or(0, Vec::len)
        });
        (workers + g.workers.len(), devices + g.workers.len() * each)
    })
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

/// Why a probe pod cannot start its probe because the image cannot be had, when that is
/// so: the kubelet's reasons for an image that is unnamed, not allowed to be pulled, or
/// still failing to pull after its retries (a first `ErrImagePull` may pass, so it is not
/// one of them).
pub fn image_error(pod: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find_map(|c| {
        let waiting = c.state.as_ref()?.waiting.as_ref()?;
        let reason = waiting.reason.as_deref()?;
        matches!(
            reason,
            "ImagePullBackOff" | "ErrImageNeverPull" | "InvalidImageName"
        )
        .then(|| match waiting.message.as_deref() {
            Some(m) if !m.is_empty() => format!("{reason}: {m}"),
            _ => reason.to_string(),
        })
    })
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
    cluster_name: Option<String>,
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
                cluster_name,
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;
    use std::collections::BTreeMap;

    fn node(name: &str, labels: &[&str], unschedulable: bool) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|l| (l.to_string(), String::new()))
                .collect::<BTreeMap<_, _>>(),
        );
        n.spec = Some(NodeSpec {
            unschedulable: Some(unschedulable),
            ..NodeSpec::default()
        });
        n
    }

    fn groups() -> Vec<String> {
        vec!["apps".into()]
    }

    #[test]
    fn workers_with_a_storage_node_are_dropped_silently_and_the_rest_sorted() {
        let nodes = [
            node("w3", &[], false),
            node("w1", &[], false),
            node("w2", &[], false),
        ];
        let taken = BTreeSet::from(["w2".to_string()]);
        let got = inspect(
            &DiscoverSpec::default(),
            &nodes,
            &taken,
            Some(&groups()[..]),
        )
        .expect("workers");
        assert_eq!(got.workers, ["w1", "w3"]);
        assert!(got.events.is_empty(), "{:?}", got.events);
        assert_eq!(got.environment, Environment::Vanilla);
    }

    #[test]
    fn a_declined_worker_is_an_event_saying_why() {
        let nodes = [
            node("w1", &[], false),
            node("w2", &[], true),
            node("cp1", &["node-role.kubernetes.io/control-plane"], false),
        ];
        let got = inspect(
            &DiscoverSpec::default(),
            &nodes,
            &BTreeSet::new(),
            Some(&groups()[..]),
        )
        .expect("w1");
        assert_eq!(got.workers, ["w1"]);
        let reasons: Vec<(&str, &str)> = got
            .events
            .iter()
            .map(|e| (e.reason, e.message.as_str()))
            .collect();
        assert_eq!(reasons.len(), 2, "{reasons:?}");
        assert!(got.events.iter().all(|e| e.reason == "WorkerDeclined"));
        assert!(
            reasons[0].1.starts_with("w2 is left out: it is cordoned"),
            "{reasons:?}"
        );
        assert!(
            reasons[1]
                .1
                .starts_with("cp1 is left out: it is a control-plane node"),
            "{reasons:?}"
        );
        // Asked for by name, a Node that does not exist is a warning.
        let spec = DiscoverSpec {
            workers: vec!["w1".into(), "ghost".into()],
            ..DiscoverSpec::default()
        };
        let got = inspect(&spec, &nodes, &BTreeSet::new(), Some(&groups()[..])).expect("w1");
        assert_eq!(got.workers, ["w1"]);
        let e = got
            .events
            .iter()
            .find(|e| e.message.contains("ghost"))
            .expect("ghost");
        assert!(e.warning && e.reason == "WorkerDeclined", "{e:?}");
    }

    #[test]
    fn unlisted_api_groups_are_a_warning_not_a_failure() {
        let nodes = [node("w1", &[], false)];
        let got = inspect(&DiscoverSpec::default(), &nodes, &BTreeSet::new(), None).expect("w1");
        assert_eq!(got.workers, ["w1"]);
        let e = &got.events[0];
        assert_eq!((e.warning, e.reason), (true, "EnvironmentPartiallyRead"));
    }

    #[test]
    fn no_schedulable_worker_fails_the_run() {
        let nodes = [node("w1", &[], true), node("w2", &[], false)];
        let taken = BTreeSet::from(["w2".to_string()]);
        let err = inspect(
            &DiscoverSpec::default(),
            &nodes,
            &taken,
            Some(&groups()[..]),
        )
        .expect_err("nobody free");
        assert!(err.starts_with("no schedulable worker is free: "), "{err}");
        assert!(err.ends_with("(2 node(s) considered)"), "{err}");
    }

    #[test]
    fn the_bootstrap_declines_with_the_first_reason_that_holds() {
        let usable = [node("w1", &[], false)];
        let decline = |ops, docs, clusters, nodes: &[Node]| {
            bootstrap("ns", ops, docs, clusters, nodes, None)
                .expect_err("declined")
                .to_string()
        };
        assert_eq!(
            decline(2, 1, 1, &usable),
            "2 operator operation(s) have already run"
        );
        assert_eq!(
            decline(0, 1, 1, &usable),
            "1 deployment config(s) already exist"
        );
        assert_eq!(
            decline(0, 0, 3, &usable),
            "3 storage cluster(s) are already deployed"
        );
        let unusable = [
            node("w1", &[], true),
            node("cp1", &["node-role.kubernetes.io/master"], false),
        ];
        assert_eq!(
            decline(0, 0, 0, &unusable),
            "none of the 2 node(s) hold storage without being asked to"
        );
        assert_eq!(
            decline(0, 0, 0, &[]),
            "none of the 0 node(s) hold storage without being asked to"
        );
        let op = bootstrap("ns", 0, 0, 0, &usable, None).expect("raised");
        assert_eq!(op.metadata.name.as_deref(), Some(INITIAL_DISCOVERY));
        assert_eq!(op.metadata.namespace.as_deref(), Some("ns"));
        let filter = op
            .spec
            .discover
            .and_then(|d| d.device_filter)
            .expect("filter");
        assert_eq!(filter.enable_partitioned_devices, Some(true));
    }

    #[test]
    fn an_image_that_cannot_be_pulled_is_told_apart_from_a_first_attempt() {
        let pod = |reason: &str| -> k8s_openapi::api::core::v1::Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"},
                "status": {"containerStatuses": [{
                    "name": "probe", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                    "state": {"waiting": {"reason": reason, "message": "Back-off pulling image \"x\""}},
                }]}
            }))
            .expect("pod")
        };
        assert_eq!(
            image_error(&pod("ImagePullBackOff")).as_deref(),
            Some("ImagePullBackOff: Back-off pulling image \"x\"")
        );
        assert!(image_error(&pod("InvalidImageName")).is_some());
        assert_eq!(image_error(&pod("ErrImagePull")), None);
        assert_eq!(image_error(&pod("ContainerCreating")), None);
        assert_eq!(
            image_error(&k8s_openapi::api::core::v1::Pod::default()),
            None
        );
    }

    #[test]
    fn found_counts_every_worker_of_a_group_with_its_devices() {
        let config: ClusterDeploymentConfig = serde_json::from_value(serde_json::json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "ClusterDeploymentConfig",
            "metadata": {"name": "d"},
            "spec": {"nodeSets": [
                {"name": "a", "groups": [
                    {"name": "g1", "workers": ["w1", "w2"], "devices": {"nvme": ["0000:01:00.0", "0000:02:00.0"]}},
                    {"name": "g2", "workers": ["w3"], "devices": {"nvme": ["0000:03:00.0"]}}]},
                {"name": "b", "groups": [{"name": "g3", "workers": ["w4"]}]}]}
        }))
        .expect("config");
        assert_eq!(found(&config), (4, 5));
    }
}

//! Discovery end to end on a real API server: the first-install bootstrap raises a run,
//! probe Jobs run on simulated workers (sbsim probes their host trees), and the run writes
//! a ClusterDeploymentConfig in Draft. A worker whose disks something else drives is left
//! out with the sentence saying so. A second start raises no second run.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_api::cluster_deployment_config::{ClusterDeploymentConfig, DeploymentPhase};
use simplyblock_api::common::OpsPhase;
use simplyblock_api::operator_ops::OperatorOps;
use simplyblock_controlplane::{Client, ClientConfig, Url};
use simplyblock_discovery::configmap;
use simplyblock_operator::deployment::discovery::{self, ProbeSettings};
use simplyblock_operator::runtime::context::Context;
use simplyblock_simulator::{Server, Sim, SimConfig, jobs};

const NS: &str = "discover";
const WORKERS: [&str; 3] = ["dw1", "dw2", "dw3"];
/// A worker whose NVMe controllers are both on vfio-pci and held open by a process.
const HELD: &str = "dw4";

fn profile(worker: &str) -> &'static str {
    if worker == HELD {
        "qemu-vfio-held"
    } else {
        "qemu-numa2-nvme"
    }
}

#[tokio::test]
async fn a_fresh_install_discovers_the_fleet_into_a_draft_once() {
    // An API server of its own: a fresh install sees no deployment document anywhere, and
    // this test's Nodes are the whole fleet.
    let (env, kube) = crate::support::own_api_server(NS).await;
    let nodes: Api<Node> = Api::all(kube.clone());
    let all: Vec<&str> = WORKERS.iter().copied().chain([HELD]).collect();
    for (i, w) in all.iter().enumerate() {
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": w, "labels": {"kubernetes.io/hostname": w}}}),
        )
        .expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("node");
        let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": format!("10.40.0.{}", i + 1)}],
                                       "conditions": [{"type": "Ready", "status": "True"}]}});
        nodes
            .patch_status(w, &PatchParams::default(), &Patch::Merge(status))
            .await
            .expect("status");
        // The API server taints a new Node not-ready; the node lifecycle controller, which
        // does not run here, lifts it once the kubelet reports Ready.
        nodes
            .patch(
                w,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": null}})),
            )
            .await
            .expect("untaint");
    }

    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut fleet = String::from("workers:\n");
    for (i, w) in all.iter().enumerate() {
        fleet.push_str(&format!(
            "  - hostname: {w}\n    addresses: [10.40.0.{}]\n    profile: {}\n",
            i + 1,
            profile(w)
        ));
    }
    std::fs::write(dir.path().join("fleet.yaml"), fleet).expect("fleet");
    let config = SimConfig {
        tokens: vec!["t".into()],
        fleet: Some(dir.path().join("fleet.yaml")),
        hosts_dir: Some(std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/hosts"
        ))),
        ..SimConfig::new(dir.path().join("state"))
    };
    let sim = Server::start(Sim::open(config).expect("sim"), "127.0.0.1:0", None)
        .await
        .expect("sbsim");
    tokio::spawn(jobs::watch(sim.sim.clone(), kube.clone()));
    let cp =
        Client::new(ClientConfig::new(Url::parse(&sim.url).expect("url"), "t")).expect("client");
    let ctx = Arc::new(
        Context::new(
            crate::support::operator_kube_on(&env, NS).await,
            cp,
            sim.url.clone(),
            NS.into(),
        )
        .watching(NS),
    );
    let probe = ProbeSettings {
        image: "quay.io/simplyblock-io/simplyblock-operator:latest".into(),
        service_account: "simplyblock-nodeprobe".into(),
        ..ProbeSettings::default()
    };
    tokio::spawn(discovery::run(ctx.clone(), probe));

    // The chart's operator.discoveryClusterName names the cluster the draft proposes.
    let raised = discovery::bootstrap(&kube, NS, Some("fleet".into()))
        .await
        .expect("the bootstrap raises a run");
    assert_eq!(raised, "raised OperatorOps initial-discovery");

    let ops: Api<OperatorOps> = Api::namespaced(kube.clone(), NS);
    let status = until(&ops, "initial-discovery", |op| {
        op.status.as_ref().is_some_and(|s| s.phase.is_terminal())
    })
    .await
    .status
    .unwrap_or_default();
    assert_eq!(status.phase, OpsPhase::Succeeded, "{:?}", status.message);
    assert_eq!(status.workers, all, "every usable Node is probed");
    let config_name = status.config_ref.clone().expect("the draft's name");
    let doc = Api::<ClusterDeploymentConfig>::namespaced(kube.clone(), NS)
        .get(&config_name)
        .await
        .expect("the draft");
    assert!(
        !doc.spec.approved,
        "a discovered document is a draft nobody approved"
    );
    assert_eq!(
        doc.spec.cluster.as_ref().map(|c| c.name.as_str()),
        Some("fleet"),
        "the cluster is named as the value says"
    );
    let workers: Vec<&String> = doc
        .spec
        .node_sets
        .iter()
        .flat_map(|s| &s.groups)
        .flat_map(|g| &g.workers)
        .collect();
    assert_eq!(workers.len(), WORKERS.len(), "{:#?}", doc.spec);
    assert!(
        workers.iter().all(|w| w.as_str() != HELD),
        "the held worker is not in the draft: {:#?}",
        doc.spec
    );

    // The held worker is refused with the sentence that says why, as an event and in the
    // run's status.
    let events: Api<Event> = Api::namespaced(kube.clone(), NS);
    let declined: Vec<String> = crate::support::until("the DeviceDeclined event", async || {
        let found: Vec<String> = events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("DeviceDeclined"))
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("initial-discovery")
            })
            .filter_map(|e| e.note)
            .filter(|m| m.starts_with(&format!("{HELD}:")))
            .collect();
        (!found.is_empty()).then_some(found)
    })
    .await;
    assert_eq!(
        declined.len(),
        1,
        "one refusal for {HELD}: {declined:#?}; the run said {:?}",
        status.message
    );
    let line = &declined[0];
    let prefix = format!("{HELD}: something is driving its disks: ");
    let suffix = "; they may belong to a guest or another storage system, so they are left alone";
    assert!(
        line.starts_with(&prefix) && line.ends_with(suffix),
        "{line}"
    );
    let held: Vec<&str> = line[prefix.len()..line.len() - suffix.len()]
        .split("; ")
        .collect();
    assert_eq!(held.len(), 2, "both controllers are named: {line}");
    for h in held {
        let (address, holder) = h.split_once(" on vfio-pci held by ").expect(line);
        assert!(address.starts_with("0000:"), "a PCI address: {h}");
        assert!(
            holder.starts_with("sleep (pid ") && holder.ends_with(')'),
            "the holding process and its pid: {h}"
        );
    }
    assert!(
        status
            .message
            .as_deref()
            .is_some_and(|m| m.contains(line.as_str())),
        "the run's status says it too: {:?}",
        status.message
    );
    let devices: usize = doc
        .spec
        .node_sets
        .iter()
        .flat_map(|s| &s.groups)
        .map(|g| {
            g.devices
                .as_ref()
                .and_then(|d| d.nvme.as_ref())
                .map_or(0, Vec::len)
        })
        .sum();
    assert!(
        devices > 0,
        "the draft proposes the fixture's NVMe devices: {:#?}",
        doc.spec
    );
    // The draft controller has not run here; the document is untouched by anything else.
    assert!(doc.status.as_ref().map(|s| &s.phase) != Some(&DeploymentPhase::Expanded));

    // The draft is the one the planner writes for these host trees, and each of its
    // notes is a ConfigWritten event; the summary opens the run's status message.
    let expected_draft = expected("draft.yaml", &draft_yaml(&doc));
    assert_eq!(draft_yaml(&doc), expected_draft);
    let notes = expected(
        "notes.txt",
        &written_notes(&kube, "initial-discovery").await,
    );
    assert_eq!(
        written_notes(&kube, "initial-discovery").await,
        notes,
        "one ConfigWritten event per note"
    );
    let summary = notes.lines().next().expect("a summary note");
    assert!(
        summary.starts_with(&format!("wrote {config_name} in Draft: 3 workers with ")),
        "{summary}"
    );
    assert!(
        status
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with(&format!("{summary}. "))),
        "the status message opens with the summary: {:?}",
        status.message
    );

    // Each report belongs to the run: deleting the run deletes them.
    let run = ops.get("initial-discovery").await.expect("run");
    let reports = Api::<ConfigMap>::namespaced(kube.clone(), NS)
        .list(&ListParams::default().labels(&configmap::run_selector("initial-discovery")))
        .await
        .expect("reports")
        .items;
    assert_eq!(reports.len(), all.len(), "one report per worker");
    for cm in &reports {
        let owners = cm.metadata.owner_references.clone().unwrap_or_default();
        assert!(
            owners
                .iter()
                .any(|o| o.kind == "OperatorOps" && Some(&o.uid) == run.metadata.uid.as_ref()),
            "{} is owned by the run: {owners:?}",
            cm.name_any()
        );
    }

    // The run is counted, with what it found.
    let proposed: usize = doc
        .spec
        .node_sets
        .iter()
        .flat_map(|s| &s.groups)
        .map(|g| {
            g.workers.len()
                * g.devices
                    .as_ref()
                    .and_then(|d| d.nvme.as_ref())
                    .map_or(0, Vec::len)
        })
        .sum();
    let ns_label = ("namespace", NS);
    assert_eq!(
        ctx.metrics.sample(
            "simplyblock_operator_operations_total",
            &[ns_label, ("action", "Discover"), ("result", "succeeded")]
        ),
        Some(1.0)
    );
    assert_eq!(
        ctx.metrics.sample(
            "simplyblock_operator_discovery_workers_found_count",
            &[ns_label]
        ),
        Some(WORKERS.len() as f64)
    );
    assert_eq!(
        ctx.metrics.sample(
            "simplyblock_operator_discovery_devices_found_count",
            &[ns_label]
        ),
        Some(proposed as f64)
    );

    // A second start finds the run and declines.
    let again = discovery::bootstrap(&kube, NS, None)
        .await
        .expect_err("no second run");
    assert_eq!(again, "1 operator operation(s) have already run");

    // A run whose document name is taken adopts that document and changes nothing in it.
    let docs = Api::<ClusterDeploymentConfig>::namespaced(kube.clone(), NS);
    let mut taken: ClusterDeploymentConfig = serde_saphyr::from_str(include_str!(
        "../../../../deploy/samples/clusterdeploymentconfig.yaml"
    ))
    .expect("sample");
    taken.metadata.name = Some("written-by-hand".into());
    let taken = docs
        .create(&PostParams::default(), &taken)
        .await
        .expect("a document of that name");
    let adopting: OperatorOps = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "OperatorOps",
        "metadata": {"name": "adopting"},
        "spec": {"action": "Discover", "discover": {"configName": "written-by-hand", "workers": ["dw1"]}}
    }))
    .expect("op");
    ops.create(&PostParams::default(), &adopting)
        .await
        .expect("run");
    let adopted = until(&ops, "adopting", |op| {
        op.status.as_ref().is_some_and(|s| s.phase.is_terminal())
    })
    .await
    .status
    .unwrap_or_default();
    assert_eq!(adopted.phase, OpsPhase::Succeeded, "{:?}", adopted.message);
    assert_eq!(adopted.config_ref.as_deref(), Some("written-by-hand"));
    let after = docs.get("written-by-hand").await.expect("the document");
    assert_eq!(
        after.metadata.resource_version, taken.metadata.resource_version,
        "the adopted document is left unchanged"
    );
    assert_eq!(after.spec, taken.spec);
    let said = crate::support::until("the OperationSucceeded event", async || {
        let said = run_events(&kube, "adopting").await;
        said.iter()
            .any(|(r, _)| r == "OperationSucceeded")
            .then_some(said)
    })
    .await;
    assert!(
        said.iter()
            .any(|(r, n)| r == "ConfigExists" && n.contains("written-by-hand")),
        "{said:#?}"
    );
    assert!(
        !said.iter().any(|(r, _)| r == "ConfigWritten"),
        "the planned notes describe another document: {said:#?}"
    );
}

/// The run's events as (reason, note).
async fn run_events(kube: &kube::Client, run: &str) -> Vec<(String, String)> {
    events_of(kube, NS, run).await
}

/// The notes of the run's ConfigWritten events, sorted, one a line; waits for the events,
/// which are published after the status write.
async fn written_notes(kube: &kube::Client, run: &str) -> String {
    let said = crate::support::until(&format!("run {run} to succeed"), async || {
        let said = run_events(kube, run).await;
        said.iter()
            .any(|(r, _)| r == "OperationSucceeded")
            .then_some(said)
    })
    .await;
    let mut notes: Vec<String> = said
        .into_iter()
        .filter(|(r, _)| r == "ConfigWritten")
        .map(|(_, n)| n)
        .collect();
    // The summary first, as the planner orders them; the rest sorted.
    notes.sort_by_key(|n| (!n.starts_with("wrote "), n.clone()));
    notes.iter().map(|n| format!("{n}\n")).collect()
}

/// The stored draft as the planner renders it, without what the API server adds.
fn draft_yaml(doc: &ClusterDeploymentConfig) -> String {
    let mut doc = doc.clone();
    doc.metadata = kube::api::ObjectMeta {
        name: doc.metadata.name.clone(),
        namespace: doc.metadata.namespace.clone(),
        labels: doc.metadata.labels.clone(),
        ..Default::default()
    };
    doc.status = None;
    simplyblock_discovery::plan::render(&doc).expect("render")
}

/// The expected text in `tests/it/expected/<file>`; `UPDATE_EXPECT=1` writes `actual` there.
fn expected(file: &str, actual: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/expected")
        .join(file);
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::create_dir_all(path.parent().expect("dir")).expect("dir");
        std::fs::write(&path, actual).expect("write");
    }
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Regression: the operator process registered its webhooks and raised the first run
/// before its webhook server accepted connections, so the create timed out in the
/// `voperatorops` webhook and the first install never discovered anything.
#[tokio::test]
async fn the_operator_process_raises_the_first_run_through_its_own_webhook() {
    // An API server of its own: the process registers webhooks for the whole cluster, and
    // they stop answering when the process is stopped.
    let ns = "operator-start";
    let (env, kube) = crate::support::own_api_server(ns).await;
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "sw1"}})).expect("node");
    let nodes: Api<Node> = Api::all(kube.clone());
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("node");
    nodes
        .patch(
            "sw1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": null}})),
        )
        .await
        .expect("untaint");

    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, "t").expect("token");
    let log_path = dir.path().join("operator.log");
    let log = std::fs::File::create(&log_path).expect("log");
    let port = crate::support::free_port();
    let mut operator = Command::new(env!("CARGO_BIN_EXE_simplyblock-operator"))
        .arg("run")
        .arg(format!("--webhook-listen=127.0.0.1:{port}"))
        .arg(format!("--webhook-url=https://127.0.0.1:{port}"))
        .arg("--metrics-addr=off")
        .arg("--metrics-api-addr=127.0.0.1:0")
        .arg(format!("--namespace={ns}"))
        .arg(format!("--watch-namespace={ns}"))
        // No ControlPlane: discovery makes no control-plane calls.
        .arg(format!("--control-plane-token-file={}", token.display()))
        .env("KUBECONFIG", crate::support::operator_kubeconfig(&env, ns))
        .env("RUST_LOG", "info")
        // The operator logs to stderr; its reports go to stdout.
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("the operator starts");

    let ops: Api<OperatorOps> = Api::namespaced(kube.clone(), ns);
    let start = Instant::now();
    let raised = loop {
        if let Some(op) = ops.get_opt("initial-discovery").await.expect("read") {
            break Some(op);
        }
        if start.elapsed() > Duration::from_secs(90)
            || operator.try_wait().expect("the process").is_some()
        {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let logged = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let Some(op) = raised else {
        let _ = operator.kill();
        let _ = operator.wait();
        panic!(
            "the operator raised no initial-discovery; it logged:\n{}",
            logged()
        );
    };
    assert_eq!(
        op.spec
            .discover
            .as_ref()
            .and_then(|d| d.device_filter.as_ref())
            .and_then(|f| f.enable_partitioned_devices),
        Some(true),
        "the first run shows partitioned disks too"
    );
    // The create passed through the operator's own webhook, which answers: it refuses an
    // unreadable size range.
    let refused: OperatorOps = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "OperatorOps",
        "metadata": {"name": "unreadable-range"},
        "spec": {"action": "Discover", "discover": {"deviceFilter": {"driveSizeRange": "lots"}}}
    }))
    .expect("op");
    match ops.create(&PostParams::default(), &refused).await {
        Err(kube::Error::Api(s)) => assert!(
            s.message
                .contains("voperatorops.simplyblock.io\" denied the request"),
            "{s:?}"
        ),
        other => panic!("the webhook should refuse the range: {other:?}"),
    }
    assert!(
        logged().contains("raised OperatorOps initial-discovery"),
        "the operator says what it did:\n{}",
        logged()
    );

    // No kubelet runs here, so the run waits in Probing, holding its finalizer. A probe
    // pod whose image cannot be pulled fails it, and the finalizer goes with the run's end.
    let probing = until(&ops, "initial-discovery", |o| {
        o.status.as_ref().and_then(|s| s.step.state.as_deref()) == Some("Probing")
    })
    .await;
    assert!(
        probing
            .finalizers()
            .iter()
            .any(|f| f.as_str() == discovery::FINALIZER)
    );
    let pods: Api<Pod> = Api::namespaced(kube.clone(), ns);
    let mut labels = configmap::labels("initial-discovery", "sw1");
    labels.insert(
        "batch.kubernetes.io/job-name".into(),
        configmap::config_map_name("initial-discovery", "sw1"),
    );
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "probe-sw1", "labels": labels},
        "spec": {"nodeName": "sw1", "containers": [{"name": "probe", "image": "registry.invalid/probe:none"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    let waiting = json!({"status": {"containerStatuses": [{
        "name": "probe", "image": "registry.invalid/probe:none", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"registry.invalid/probe:none\""}},
    }]}});
    pods.patch_status("probe-sw1", &PatchParams::default(), &Patch::Merge(waiting))
        .await
        .expect("pod status");
    let failed = until(&ops, "initial-discovery", |o| {
        o.status.as_ref().is_some_and(|s| s.phase.is_terminal()) && o.finalizers().is_empty()
    })
    .await;
    let failed_status = failed.status.unwrap_or_default();
    assert_eq!(failed_status.phase, OpsPhase::Failed);
    let message = failed_status.message.unwrap_or_default();
    assert!(
        message.starts_with("the probe image quay.io/simplyblock-io/simplyblock-operator:latest cannot be started on sw1 (ImagePullBackOff: "),
        "{message}"
    );
    let said = events_of(&kube, ns, "initial-discovery").await;
    assert!(
        said.iter()
            .any(|(r, n)| r == "NodeProbeImageError" && *n == message),
        "{said:#?}"
    );

    // A run deleted mid-run ends Aborted before it goes.
    let doomed: OperatorOps = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "OperatorOps",
        "metadata": {"name": "deleted-mid-run"},
        "spec": {"action": "Discover", "discover": {"workers": ["sw1"]}}
    }))
    .expect("op");
    ops.create(&PostParams::default(), &doomed)
        .await
        .expect("run");
    until(&ops, "deleted-mid-run", |o| {
        o.finalizers()
            .iter()
            .any(|f| f.as_str() == discovery::FINALIZER)
            && o.status.as_ref().and_then(|s| s.step.state.as_deref()) == Some("Probing")
    })
    .await;
    ops.delete("deleted-mid-run", &Default::default())
        .await
        .expect("delete");
    crate::support::until("the deleted run to go", async || {
        ops.get_opt("deleted-mid-run")
            .await
            .expect("read")
            .is_none()
            .then_some(())
    })
    .await;
    let said = events_of(&kube, ns, "deleted-mid-run").await;
    let _ = operator.kill();
    let _ = operator.wait();
    assert!(
        said.iter().any(|(r, n)| r == "OperationAborted"
            && n == "the run was deleted at Probing; its probe Jobs and reports go with it"),
        "{said:#?}"
    );
}

/// Waits until the run satisfies `done`, and returns it.
async fn until(
    ops: &Api<OperatorOps>,
    name: &str,
    done: impl Fn(&OperatorOps) -> bool,
) -> OperatorOps {
    crate::support::until(&format!("run {name} to get there"), async || {
        let op = ops.get(name).await.ok()?;
        done(&op).then_some(op)
    })
    .await
}

/// The events about `run` in `ns` as (reason, note).
async fn events_of(kube: &kube::Client, ns: &str, run: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(kube.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(run))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

//! Discovery end to end on a real API server: the first-install bootstrap raises a run,
//! probe Jobs run on simulated workers (sbsim probes their host trees), and the run writes
//! a ClusterDeploymentConfig in Draft. A worker whose disks something else drives is left
//! out with the sentence saying so. A second start raises no second run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_api::cluster_deployment_config::{ClusterDeploymentConfig, DeploymentPhase};
use simplyblock_api::common::OpsPhase;
use simplyblock_api::operator_ops::OperatorOps;
use simplyblock_controlplane::{Client, ClientConfig, Url};
use simplyblock_operator::context::Context;
use simplyblock_operator::deployment::discovery::{self, ProbeSettings};
use simplyblock_simulator::{Server, Sim, SimConfig, jobs};
use simplyblock_testenv::TestEnv;

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
    let env = TestEnv::shared().expect("API server");
    env.install_crds(&simplyblock_api::crds())
        .await
        .expect("CRDs");
    let kube = env.client().await.expect("client");
    simplyblock_testenv::create_namespace(&kube, NS)
        .await
        .expect("namespace");
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
    let ctx = Arc::new(Context::new(kube.clone(), cp, sim.url.clone(), NS.into()));
    let probe = ProbeSettings {
        image: "quay.io/simplyblock-io/simplyblock-operator:latest".into(),
        service_account: "simplyblock-nodeprobe".into(),
    };
    tokio::spawn(discovery::run(ctx, probe, Some(NS.into())));

    let raised = discovery::bootstrap(&kube, NS)
        .await
        .expect("the bootstrap raises a run");
    assert_eq!(raised, "raised OperatorOps initial-discovery");

    let ops: Api<OperatorOps> = Api::namespaced(kube.clone(), NS);
    let start = Instant::now();
    let status = loop {
        let s = ops
            .get("initial-discovery")
            .await
            .expect("run")
            .status
            .unwrap_or_default();
        if s.phase.is_terminal() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the run did not finish: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
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
    let start = Instant::now();
    let declined: Vec<String> = loop {
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
        if !found.is_empty() || start.elapsed() > Duration::from_secs(10) {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
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
    assert!(doc.status.map(|s| s.phase) != Some(DeploymentPhase::Expanded));

    // A second start finds the run and declines.
    let again = discovery::bootstrap(&kube, NS)
        .await
        .expect_err("no second run");
    assert_eq!(again, "1 operator operation(s) have already run");
}

//! kill -9 the operator process at 20 random moments of a deployment, restarting it each
//! time. Whatever step each kill lands in, the deployment ends the same way: every node
//! Online, one cluster create and one node add per worker in the control plane's call
//! log, one activation request and one activation call, the cluster Online, nothing
//! orphaned. The same again with faults scripted in the control plane (409s, 5xx answers,
//! node adds, activations and creates whose answers are lost, latency).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use simplyblock_api::cluster_deployment_config::{ClusterDeploymentConfig, DeploymentPhase};
use simplyblock_api::storage_cluster::ClusterPhase;
use simplyblock_api::storage_node::NodePhase;
use simplyblock_api::storage_pool::PoolPhase;
use simplyblock_api::{OperatorOps, StorageCluster, StorageClusterOps, StorageNode, StoragePool};
use simplyblock_controlplane::{Client, ClientConfig, Method, Url};
use simplyblock_simulator::{Server, Sim, SimConfig, labels};
use simplyblock_testenv::TestEnv;

const TOKEN: &str = "crash-test-token";
const WORKERS: [&str; 3] = ["cw1", "cw2", "cw3"];
const KILLS: usize = 20;
/// The Secrets a deployment of the sample document leaves in its namespace.
const EXPECTED_SECRETS: [&str; 5] = [
    "simplyblock-cluster-simplyblock",
    "simplyblock-csi-secret-v2",
    "simplyblock-operator-webhook-ca",
    "simplyblock-storage-node-ca-simplyblock",
    "simplyblock-storage-node-tls-simplyblock",
];

/// A small deterministic generator: the kill moments are the same on every run.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn operator(env: &TestEnv, sim: &Server, token_file: &std::path::Path, ns: &str) -> Child {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    Command::new(env!("CARGO_BIN_EXE_simplyblock-operator"))
        .args(["run", "--disable-initial-discovery"])
        .arg(format!("--webhook-listen=127.0.0.1:{port}"))
        .arg(format!("--webhook-url=https://127.0.0.1:{port}"))
        // Two runs share the machine: the metrics port is whatever is free.
        .arg("--metrics-addr=127.0.0.1:0")
        .arg(format!("--namespace={ns}"))
        .arg(format!("--watch-namespace={ns}"))
        .arg(format!("--control-plane-url={}", sim.url))
        .arg(format!(
            "--control-plane-token-file={}",
            token_file.display()
        ))
        .arg(format!("--storage-node-proxy={}", sim.addr))
        .env("KUBECONFIG", env.kubeconfig_path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the operator starts")
}

async fn calls(cp: &Client) -> Vec<Value> {
    let r = cp
        .raw(Method::GET, "/../../_sim/calls", &[], None)
        .await
        .expect("call log");
    serde_json::from_value(r.json().unwrap_or(Value::Null)).expect("calls")
}

fn answered(c: &Value) -> bool {
    // Status 0 is a connection dropped after the commit: the request took effect.
    c["status"]
        .as_u64()
        .is_some_and(|s| s == 0 || (200..300).contains(&s))
}

async fn deploy_through_kills(ns: &str, faults: &str, seed: u64) {
    let env = TestEnv::start().await.expect("API server");
    env.install_crds(&simplyblock_api::crds())
        .await
        .expect("CRDs");
    let kube = env.client().await.expect("client");
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns");
    Api::<Namespace>::all(kube.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace");
    let nodes: Api<Node> = Api::all(kube.clone());
    let mut fleet = String::from("workers:\n");
    for (i, w) in WORKERS.iter().enumerate() {
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": w, "labels": {"kubernetes.io/hostname": w}}}),
        )
        .expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("node");
        let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": format!("10.50.0.{}", i + 1)}],
                                       "conditions": [{"type": "Ready", "status": "True"}]}});
        nodes
            .patch_status(w, &PatchParams::default(), &Patch::Merge(status))
            .await
            .expect("status");
        fleet.push_str(&format!(
            "  - hostname: {w}\n    addresses: [10.50.0.{}]\n",
            i + 1
        ));
    }

    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("fleet.yaml"), fleet).expect("fleet");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).expect("token");
    let config = SimConfig {
        tokens: vec![TOKEN.into()],
        time_scale: 4.0,
        fleet: Some(dir.path().join("fleet.yaml")),
        faults: faults.into(),
        seed,
        ..SimConfig::new(dir.path().join("state"))
    };
    let sim = Server::start(Sim::open(config).expect("sim"), "127.0.0.1:0", None)
        .await
        .expect("sbsim");
    tokio::spawn(labels::watch(sim.sim.clone(), kube.clone()));
    let cp =
        Client::new(ClientConfig::new(Url::parse(&sim.url).expect("url"), TOKEN)).expect("client");

    let mut doc: ClusterDeploymentConfig = serde_saphyr::from_str(include_str!(
        "../../../deploy/samples/clusterdeploymentconfig.yaml"
    ))
    .expect("sample");
    doc.spec.approved = true;
    doc.spec.node_sets[0].groups[0].workers = WORKERS.iter().map(|w| w.to_string()).collect();
    let docs: Api<ClusterDeploymentConfig> = Api::namespaced(kube.clone(), ns);
    docs.create(&PostParams::default(), &doc)
        .await
        .expect("document");
    let name = doc.metadata.name.clone().expect("name");

    let storage_nodes: Api<StorageNode> = Api::namespaced(kube.clone(), ns);
    let mut rng = Lcg(seed);
    let mut child = operator(&env, &sim, &token_file, ns);
    let mut mid_deployment = 0;
    for i in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(300 + rng.below(900))).await;
        child.kill().expect("kill -9");
        child.wait().expect("reaped");
        let doc = docs
            .get(&name)
            .await
            .expect("document")
            .status
            .unwrap_or_default();
        let steps: Vec<String> = storage_nodes
            .list(&Default::default())
            .await
            .expect("nodes")
            .items
            .into_iter()
            .map(|n| {
                n.status
                    .map(|s| s.step.state.unwrap_or_else(|| format!("{:?}", s.phase)))
                    .unwrap_or_default()
            })
            .collect();
        println!(
            "kill {i:>2}: document {:?}/{}, nodes {steps:?}",
            doc.phase,
            doc.step.state.as_deref().unwrap_or("-")
        );
        if doc.phase != DeploymentPhase::Expanded {
            mid_deployment += 1;
        }
        child = operator(&env, &sim, &token_file, ns);
    }
    // The harness proves something only if the kills land inside the deployment.
    assert!(
        mid_deployment >= KILLS / 2,
        "only {mid_deployment} of {KILLS} kills landed before the deployment ended"
    );

    let start = Instant::now();
    loop {
        let doc = docs
            .get(&name)
            .await
            .expect("document")
            .status
            .unwrap_or_default();
        let items = storage_nodes
            .list(&Default::default())
            .await
            .expect("nodes")
            .items;
        let online = items
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .is_some_and(|s| s.phase == NodePhase::Online)
            })
            .count();
        // The last step of the path: the Online cluster's default pool with its class.
        let pool_ready = Api::<StoragePool>::namespaced(kube.clone(), ns)
            .list(&Default::default())
            .await
            .expect("pools")
            .items
            .iter()
            .any(|p| {
                p.status.as_ref().is_some_and(|s| {
                    s.phase == PoolPhase::Ready && !s.storage_class_names.is_empty()
                })
            });
        if doc.phase == DeploymentPhase::Expanded && online == WORKERS.len() && pool_ready {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(150),
            "the deployment did not finish after the kills: document {:?}/{:?} ({:?}), {online} node(s) Online",
            doc.phase,
            doc.step.state,
            doc.message
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    child.kill().expect("kill");
    child.wait().expect("reaped");

    // Every fault scripted with a count fired in full, so the run met each of them.
    let r = cp
        .raw(Method::GET, "/../../_sim/faults", &[], None)
        .await
        .expect("faults");
    let rules: Value = r.json().unwrap_or(Value::Null);
    for rule in rules["rules"].as_array().into_iter().flatten() {
        if let Some(count) = rule["count"].as_u64() {
            assert_eq!(rule["fired"].as_u64(), Some(count), "{rule}");
        }
    }

    let log = calls(&cp).await;
    let creates = log
        .iter()
        .filter(|c| c["method"] == "POST" && c["path"] == "/api/v2/clusters/" && answered(c))
        .count();
    assert_eq!(creates, 1, "one cluster create reached the control plane");
    let adds = log
        .iter()
        .filter(|c| {
            c["method"] == "POST"
                && c["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/storage-nodes/"))
                && answered(c)
        })
        .count();
    assert_eq!(
        adds,
        WORKERS.len(),
        "one node add per worker reached the control plane"
    );
    let clusters = cp.list_clusters().await.expect("clusters");
    assert_eq!(clusters.len(), 1);
    assert_eq!(
        cp.list_storage_nodes(clusters[0].id)
            .await
            .expect("nodes")
            .len(),
        WORKERS.len()
    );
    let items = storage_nodes
        .list(&Default::default())
        .await
        .expect("nodes")
        .items;
    assert_eq!(
        items.len(),
        WORKERS.len(),
        "no duplicate or orphaned StorageNode"
    );
    // Each worker's slot was added once: the answered adds name every worker once.
    let mut added: Vec<&str> = log
        .iter()
        .filter(|c| {
            c["method"] == "POST"
                && c["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/storage-nodes/"))
                && answered(c)
        })
        .filter_map(|c| c["body"]["node_address"].as_str())
        .filter_map(|a| a.split('.').next())
        .collect();
    added.sort();
    assert_eq!(added, WORKERS, "one node add per slot");
    let activations = log
        .iter()
        .filter(|c| {
            c["method"] == "POST"
                && c["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/activate") || p.ends_with("/activate/"))
                && answered(c)
        })
        .count();
    assert_eq!(activations, 1, "one activation reached the control plane");
    let cluster = Api::<StorageCluster>::namespaced(kube.clone(), ns)
        .get("simplyblock")
        .await
        .expect("the cluster");
    assert_eq!(
        cluster.status.as_ref().map(|s| s.phase),
        Some(ClusterPhase::Online),
        "{:?}",
        cluster.status
    );
    assert!(
        cluster
            .status
            .as_ref()
            .is_some_and(|s| s.active_ops_ref.is_none() && s.provisioning_slots.is_empty()),
        "no lock or node-add slot left behind: {:?}",
        cluster.status
    );

    // Nothing orphaned: exactly the objects a deployment of this document makes.
    let ops: Vec<String> = Api::<StorageClusterOps>::namespaced(kube.clone(), ns)
        .list(&Default::default())
        .await
        .expect("ops")
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    assert_eq!(ops, ["simplyblock-activate"], "one activation request");
    let operator_ops = Api::<OperatorOps>::namespaced(kube.clone(), ns)
        .list(&Default::default())
        .await
        .expect("operator ops")
        .items;
    assert!(operator_ops.is_empty(), "{operator_ops:?}");
    let mut config_maps: Vec<String> = Api::<ConfigMap>::namespaced(kube.clone(), ns)
        .list(&Default::default())
        .await
        .expect("config maps")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    config_maps.sort();
    assert_eq!(config_maps, ["simplyblock-storage-node-config-simplyblock"]);
    let mut secrets: Vec<String> = Api::<Secret>::namespaced(kube.clone(), ns)
        .list(&Default::default())
        .await
        .expect("secrets")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    secrets.sort();
    assert_eq!(secrets, EXPECTED_SECRETS);

    let pool_creates = log
        .iter()
        .filter(|c| {
            c["method"] == "POST"
                && c["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/storage-pools/"))
                && answered(c)
        })
        .count();
    assert_eq!(pool_creates, 1, "one pool create reached the control plane");
    assert_eq!(cp.list_pools(clusters[0].id).await.expect("pools").len(), 1);
    let pools = Api::<StoragePool>::namespaced(kube.clone(), ns)
        .list(&Default::default())
        .await
        .expect("pools")
        .items;
    assert_eq!(pools.len(), 1, "one default pool");
    let classes = Api::<StorageClass>::all(kube.clone())
        .list(&ListParams::default().labels(&format!(
            "storage.simplyblock.io/namespace={ns},storage.simplyblock.io/pool={}",
            pools[0].metadata.name.as_deref().unwrap_or_default()
        )))
        .await
        .expect("classes")
        .items;
    assert_eq!(classes.len(), 1, "one StorageClass for the pool");
}

#[tokio::test]
async fn kills_at_random_moments_change_nothing() {
    deploy_through_kills("crash", "", 7).await;
}

#[tokio::test]
async fn kills_under_control_plane_faults_change_nothing() {
    deploy_through_kills(
        "crash-faults",
        concat!(
            "error:method=GET,rate=0.05,status=503;",
            "drop:method=POST,path=/api/v2/clusters/,count=1;",
            "drop:method=POST,path=/api/v2/clusters/*/storage-pools/,count=1;",
            // Node adds: a 409, two 5xx answers before anything is done, and one add
            // committed whose answer is lost.
            "conflict:method=POST,path=/api/v2/clusters/*/storage-nodes/,count=1;",
            "error:method=POST,path=/api/v2/clusters/*/storage-nodes/,status=500,after=1,count=2;",
            "drop:method=POST,path=/api/v2/clusters/*/storage-nodes/,after=3,count=1;",
            // Activation: a 503, then one committed whose answer is lost.
            "error:method=POST,path=/api/v2/clusters/*/activate,status=503,count=1;",
            "drop:method=POST,path=/api/v2/clusters/*/activate,after=1,count=1;",
            "latency:ms=20,rate=0.2",
        ),
        11,
    )
    .await;
}

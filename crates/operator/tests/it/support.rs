//! What the operator's integration tests share: waiting for an observed fact, the
//! control-plane client and sbsim's call log, a namespace, the webhooks served once per
//! process, and the cluster harness (an sbsim with three online storage nodes and a
//! StorageCluster carrying its id).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use simplyblock_api::common::OpsPhase;
use simplyblock_api::{StorageCluster, StorageClusterOps};
use simplyblock_controlplane::{
    Client, ClientConfig, ClusterCreate, ClusterStatus, Method, NodeStatus, StorageNodeAdd, Url,
    Uuid,
};
use simplyblock_operator::runtime::context::Context;
use simplyblock_operator::runtime::metrics::Metrics;
use simplyblock_operator::webhooks::{
    self, Endpoint, WebhookContext, WebhookServer, tls::ServingCertificates,
};
use simplyblock_simulator::{Server, Sim, SimConfig};
use simplyblock_testenv::TestEnv;
use tokio::sync::OnceCell;

pub const TOKEN: &str = "operator-test-token";
/// The label that puts a simulated worker in storage-node set `c1`.
pub const LABEL: &str = simplyblock_api::keys::ENROLLMENT_LABEL;
/// The operator namespace the webhooks are served for.
pub const OPERATOR_NAMESPACE: &str = "simplyblock-system";

pub use simplyblock_testenv::wait::{PATIENCE, until, until_explained, until_within};

/// Waits until `client` may `verb` `resource` of API group `group` in `namespace`, as the
/// API server's authorizer sees it. The authorizer reads RBAC from a cache: a binding just
/// written is in force only once that cache has it, and a loaded server lags.
pub async fn until_allowed(
    client: &kube::Client,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: &str,
) {
    use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
    let review: SelfSubjectAccessReview = serde_json::from_value(json!({
        "spec": {"resourceAttributes": {
            "verb": verb, "group": group, "resource": resource, "namespace": namespace
        }}
    }))
    .expect("review");
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    until(
        &format!("{verb} {resource} allowed in {namespace}"),
        async || {
            let answer = reviews.create(&PostParams::default(), &review).await.ok()?;
            answer.status?.allowed.then_some(())
        },
    )
    .await
}

/// Waits until `controller` has ended `n` more passes over `namespace/name` than it had
/// when called: the proof that it looked again, taken before asserting that it changed
/// nothing. A pass running when this is called counts, so a caller that needs a pass that
/// started after some write asks for two.
pub async fn passes(metrics: &Metrics, controller: &str, namespace: &str, name: &str, n: u64) {
    let from = metrics.passes(controller, namespace, name);
    until(
        &format!("{n} more pass(es) of the {controller} controller over {namespace}/{name}"),
        async || (metrics.passes(controller, namespace, name) >= from + n).then_some(()),
    )
    .await;
}

/// The annotation [`nudged`] changes.
const NUDGE: &str = "test.simplyblock.io/nudge";

/// Changes an annotation of `name`, so its controller makes a pass whatever its requeue
/// interval, then waits until a pass that started after the change has ended.
pub async fn nudged<K>(metrics: &Metrics, api: &Api<K>, controller: &str, name: &str)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let namespace = api
        .get(name)
        .await
        .expect("the object to nudge")
        .meta()
        .namespace
        .clone()
        .unwrap_or_default();
    for _ in 0..2 {
        let from = metrics.passes(controller, &namespace, name);
        let stamp = format!("{:?}", Instant::now());
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {NUDGE: stamp}}})),
        )
        .await
        .expect("nudge");
        until(
            &format!("a pass of {controller} over {name} after a nudge"),
            async || (metrics.passes(controller, &namespace, name) > from).then_some(()),
        )
        .await;
    }
}

/// Asserts that `controller` has converged on `name`: a pass that started after this call
/// changes nothing of the object but the annotation that caused it.
pub async fn converged<K>(metrics: &Metrics, api: &Api<K>, controller: &str, name: &str)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let comparable = |o: &K| {
        let mut v = serde_json::to_value(o).expect("json");
        if let Some(m) = v["metadata"].as_object_mut() {
            m.remove("resourceVersion");
            m.remove("managedFields");
            if let Some(a) = m.get_mut("annotations").and_then(Value::as_object_mut) {
                a.remove(NUDGE);
                if a.is_empty() {
                    m.remove("annotations");
                }
            }
        }
        v
    };
    let before = api.get(name).await.expect("the object");
    nudged(metrics, api, controller, name).await;
    let after = api.get(name).await.expect("the object");
    assert_eq!(
        comparable(&before),
        comparable(&after),
        "a pass of the {controller} controller changed {name}"
    );
}

/// A client of sbsim at `url`, quick to give up and retry.
pub fn cp_client(url: &str) -> Client {
    let mut cfg = ClientConfig::new(Url::parse(url).expect("url"), TOKEN);
    cfg.timeout = Duration::from_secs(5);
    cfg.retry_backoff = Duration::from_millis(20);
    Client::new(cfg).expect("client")
}

/// A cluster `name` on sbsim, through `cp`: its three storage nodes (workers `w1..w3` of
/// [`fleet`]) added and Online, the cluster active, and a pool `pool1` in it.
pub async fn active_cluster_with_pool(
    cp: &Client,
    name: &str,
) -> (
    simplyblock_controlplane::Cluster,
    simplyblock_controlplane::Pool,
) {
    let cluster = cp
        .create_cluster(&ClusterCreate::new(name, 10, 4))
        .await
        .expect("cluster");
    for i in 1..=3 {
        cp.add_storage_node(
            cluster.id,
            &StorageNodeAdd::new(
                format!("w{i}.simplyblock-storage-node-api.simplyblock.svc.cluster.local:5000"),
                "eth0",
            ),
        )
        .await
        .expect("node add");
    }
    until("three online nodes", async || {
        let nodes = cp.list_storage_nodes(cluster.id).await.ok()?;
        (nodes.len() == 3 && nodes.iter().all(|n| n.status == NodeStatus::Online)).then_some(())
    })
    .await;
    cp.activate_cluster(cluster.id).await.expect("activate");
    until("the cluster active", async || {
        (cp.get_cluster(cluster.id).await.ok()?.status == ClusterStatus::Active).then_some(())
    })
    .await;
    let pool = cp
        .create_pool(
            cluster.id,
            &simplyblock_controlplane::PoolCreate {
                name: "pool1".into(),
                ..Default::default()
            },
        )
        .await
        .expect("pool");
    (cluster, pool)
}

/// `n` simulated workers `w1..wn` in storage-node set `c1`, two 2T drives each.
pub fn fleet(n: usize) -> String {
    let mut s = String::from("workers:\n");
    for i in 1..=n {
        s.push_str(&format!(
            "  - hostname: w{i}\n    addresses: [10.10.0.{i}]\n    devices: {{count: 2, size: 2T}}\n    labels: {{{LABEL}: c1}}\n"
        ));
    }
    s
}

/// Creates namespace `name`.
pub async fn namespace(kube: &kube::Client, name: &str) {
    simplyblock_testenv::create_namespace(kube, name)
        .await
        .expect("namespace");
}

/// The API server every test of this binary shares, with the CRDs installed and the
/// webhooks registered: every test runs under the admission a real install has, whatever
/// test ran first.
pub async fn api_server() -> &'static TestEnv {
    logs();
    webhooks().await;
    TestEnv::shared().expect("API server")
}

/// An API server of the test's own, with the CRDs installed and namespace `ns`: for a test
/// whose Nodes must be the whole fleet, or whose operator processes register the webhooks
/// of the whole cluster (which stop answering when the process stops). The chart's
/// accounts and roles are installed for a release in `ns`, and the operator's kubeconfig
/// ([`operator_kubeconfig`]) written. The client returned is the admin's.
pub async fn own_api_server(ns: &str) -> (TestEnv, kube::Client) {
    own_api_server_on(TestEnv::start().await.expect("API server"), ns).await
}

/// [`own_api_server`] with the chart installed to serve every namespace
/// (`operator.watchAllNamespaces`): for an operator run with [`Scope::all`].
///
/// [`Scope::all`]: simplyblock_operator::runtime::context::Scope::all
pub async fn own_api_server_serving_all(ns: &str) -> (TestEnv, kube::Client) {
    let env = TestEnv::start().await.expect("API server");
    own_api_server_with(env, ns, &[("operator.watchAllNamespaces", "true")]).await
}

/// [`own_api_server`] on an API server the test started (and perhaps prepared) itself.
pub async fn own_api_server_on(env: TestEnv, ns: &str) -> (TestEnv, kube::Client) {
    own_api_server_with(env, ns, &[]).await
}

async fn own_api_server_with(
    env: TestEnv,
    ns: &str,
    values: &[(&str, &str)],
) -> (TestEnv, kube::Client) {
    env.install_crds(&simplyblock_api::crds())
        .await
        .expect("CRDs");
    let kube = env.client().await.expect("client");
    namespace(&kube, ns).await;
    simplyblock_testenv::chart::install_identity_with(&env, ns, values)
        .await
        .expect("the chart's accounts and roles");
    let written = env
        .service_account_kubeconfig(ns, simplyblock_testenv::chart::OPERATOR_ACCOUNT)
        .await
        .expect("the operator's kubeconfig");
    assert_eq!(written, operator_kubeconfig(&env, ns));
    (env, kube)
}

/// The kubeconfig of the chart's operator ServiceAccount in `ns` on an
/// [`own_api_server`]: what an operator process under test runs as.
pub fn operator_kubeconfig(env: &TestEnv, ns: &str) -> std::path::PathBuf {
    env.dir().join(format!(
        "kubeconfig-{ns}-{}",
        simplyblock_testenv::chart::OPERATOR_ACCOUNT
    ))
}

/// A client that is the operator (the chart's ServiceAccount in `ns`) on an
/// [`own_api_server`].
pub async fn operator_kube_on(env: &TestEnv, ns: &str) -> kube::Client {
    env.service_account_client(ns, simplyblock_testenv::chart::OPERATOR_ACCOUNT)
        .await
        .expect("the operator's client")
}

/// A loopback port for a process that binds it itself ([`simplyblock_testenv::free_port`]).
pub fn free_port() -> u16 {
    simplyblock_testenv::free_port().expect("a free port")
}

/// The operator binary, run against `env`, serving and watching `ns`; it reaches the
/// control plane its ControlPlane names ([`managed_control_plane`]) through sbsim at
/// `sbsim` (with the token in `token_file`); its webhooks on a free port, its output
/// discarded. Callers add their own flags and start it.
pub fn operator_command(
    env: &TestEnv,
    sbsim: SocketAddr,
    token_file: &std::path::Path,
    ns: &str,
) -> std::process::Command {
    use std::process::Stdio;
    let port = free_port();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_simplyblock-operator"));
    command
        .args(["run", "--disable-initial-discovery"])
        .arg(format!("--webhook-listen=127.0.0.1:{port}"))
        .arg(format!("--webhook-url=https://127.0.0.1:{port}"))
        // Tests run operators side by side: the metrics API on a port of each one's own.
        .arg("--metrics-api-addr=127.0.0.1:0")
        .arg(format!("--namespace={ns}"))
        .arg(format!("--watch-namespace={ns}"))
        .arg(format!("--control-plane-proxy={sbsim}"))
        .arg(format!(
            "--control-plane-token-file={}",
            token_file.display()
        ))
        .env("KUBECONFIG", operator_kubeconfig(env, ns))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// ControlPlane `simplyblock` in `ns`, managed at [`MANAGED_TLS_ENDPOINT`] over TLS
/// verified against `ca_pem` (in Secret `cp-ca`), with the operator's own token: what an
/// operator process of a test reaches the control plane by (sbsim of [`sbsim_tls_material`]).
pub async fn managed_control_plane(kube: &kube::Client, ns: &str, ca_pem: &str) {
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": "cp-ca"},
        "stringData": {"ca.crt": ca_pem},
    }))
    .expect("secret");
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(kube.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("CA Secret");
    let cp: simplyblock_api::control_plane::ControlPlane = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "ControlPlane",
        "metadata": {"name": "simplyblock"},
        "spec": {"source": {"managed": {
            "endpoint": MANAGED_TLS_ENDPOINT,
            "caBundleSecretRef": {"name": "cp-ca"},
        }}},
    }))
    .expect("control plane");
    Api::<simplyblock_api::control_plane::ControlPlane>::namespaced(kube.clone(), ns)
        .create(&PostParams::default(), &cp)
        .await
        .expect("ControlPlane");
}

/// An sbsim of a test's own, with its state in `dir`.
pub struct Sbsim {
    pub server: Server,
    pub cp: Client,
    /// Where the operator reaches it: [`MANAGED_TLS_ENDPOINT`].
    pub endpoint: String,
    /// sbsim's state; kept for as long as the server runs.
    _dir: tempfile::TempDir,
}

/// The host a TLS-serving sbsim ([`sbsim_tls`]) has its certificate for.
pub const MANAGED_TLS_HOST: &str = "control-plane.example";
/// A managed control plane's endpoint served by [`sbsim_tls`]: routable by the rules of
/// its CEL, reached through sbsim as a proxy.
pub const MANAGED_TLS_ENDPOINT: &str = "https://control-plane.example:5000";

/// [`sbsim`], with the PEM of the CA its certificate for [`MANAGED_TLS_HOST`] is from:
/// clients reach it through it as their proxy (a `CONNECT` tunnel) and verify it as they
/// would the real control plane.
pub async fn sbsim_tls(faults: &str, workers: usize) -> (Sbsim, String) {
    sbsim_timed(faults, workers, simplyblock_simulator::Timings::default()).await
}

/// [`sbsim_tls`] with the simulated hardware's `timings` (sim milliseconds, at 1000×).
pub async fn sbsim_timed(
    faults: &str,
    workers: usize,
    timings: simplyblock_simulator::Timings,
) -> (Sbsim, String) {
    let (tls, ca_pem) = sbsim_tls_material();
    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    let fleet_path = (workers > 0).then(|| {
        let path = dir.path().join("fleet.yaml");
        std::fs::write(&path, fleet(workers)).expect("fleet");
        path
    });
    // Each sbsim of this process draws its ids from a seed of its own: the tests share
    // one API server, and cluster-scoped objects named by control-plane ids (volume
    // handles on PersistentVolumes) must not meet another test's.
    static SEEDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let config = SimConfig {
        tokens: vec![TOKEN.into()],
        time_scale: 1000.0,
        faults: faults.into(),
        fleet: fleet_path,
        timings,
        seed: SEEDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        ..SimConfig::new(dir.path().join("state"))
    };
    let server = Server::start(Sim::open(config).expect("sim"), "127.0.0.1:0", Some(tls))
        .await
        .expect("sbsim");
    let sim = Sbsim {
        cp: tls_cp_client(server.addr, &ca_pem, TOKEN),
        endpoint: MANAGED_TLS_ENDPOINT.to_owned(),
        server,
        _dir: dir,
    };
    (sim, ca_pem)
}

/// What an sbsim serves TLS with as the control plane at [`MANAGED_TLS_HOST`], and the
/// PEM of its CA. It answers nothing in plain HTTP: the storage nodes it stands in for
/// serve TLS too, once their Secret is mounted ([`storage_nodes_mount`]).
pub fn sbsim_tls_material() -> (simplyblock_simulator::ServerTls, String) {
    let ca = simplyblock_certs::Authority::new("sbsim test CA").expect("CA");
    let serving = ca
        .serving(MANAGED_TLS_HOST, &[MANAGED_TLS_HOST], &[])
        .expect("serving certificate");
    let tls = simplyblock_simulator::ServerTls {
        cert_pem: serving.cert.clone().into_bytes(),
        key_pem: serving.key.clone().into_bytes(),
        client_ca_pem: None,
        plain_too: false,
    };
    (tls, ca.cert_pem())
}

/// A client of the control plane at [`MANAGED_TLS_ENDPOINT`], served by the sbsim at
/// `addr` (its proxy) and verified against `ca_pem`, sending `token`.
pub fn tls_cp_client(addr: std::net::SocketAddr, ca_pem: &str, token: &str) -> Client {
    let mut cfg = ClientConfig::new(Url::parse(MANAGED_TLS_ENDPOINT).expect("url"), token);
    cfg.timeout = Duration::from_secs(5);
    cfg.retry_backoff = Duration::from_millis(20);
    cfg.connect_to = Some(addr);
    cfg.tls = Some(simplyblock_controlplane::TlsConfig {
        ca_pem: ca_pem.as_bytes().to_vec(),
        ..Default::default()
    });
    Client::new(cfg).expect("client")
}

/// Starts sbsim at 1000× speed with `faults`, and `workers` simulated workers when not 0,
/// serving the control plane over TLS as [`sbsim_tls`] does: [`Sbsim::cp`] and the
/// operator reach it at [`Sbsim::endpoint`].
pub async fn sbsim(faults: &str, workers: usize) -> Sbsim {
    sbsim_tls(faults, workers).await.0
}

/// The storage-node APIs of `ns`'s workers serve what the storage-node pods would mount
/// (see [`simplyblock_testenv::standin::storage_node_pods`]): each worker its own
/// certificate, once the operator's signer has issued it, or, where the DaemonSet mounts
/// the cluster's serving Secret, that Secret's for all of them; either way requiring client
/// certificates from the CAs of its `ca.crt`. Until then they answer plain HTTP.
pub fn storage_nodes_mount(
    kube: &kube::Client,
    ns: &str,
    sim: &Server,
) -> simplyblock_testenv::standin::StandIn {
    let named_tls = sim.named_tls.clone();
    simplyblock_testenv::standin::storage_node_pods(
        kube.clone(),
        ns.into(),
        move |ns, worker, files| {
            let served = match worker {
                None => named_tls.serve_storage_nodes(ns, files),
                Some(worker) => named_tls.serve_storage_node(ns, worker, files),
            };
            if let Err(e) = served {
                let who = worker.unwrap_or("every worker");
                eprintln!("the storage node of {ns} on {who} cannot serve what it mounts: {e}");
            }
        },
    )
}

/// cert-manager and the management API's pods of a local control plane with mutual TLS in
/// `ns`: the stand-in issues the Certificates the operator writes, and sbsim serves the
/// management API's certificate at its Service name and takes only clients with a
/// certificate from its CA, as the API pods that mount the Secret would.
pub fn local_control_plane_tls(
    kube: &kube::Client,
    ns: &str,
    sim: &Server,
) -> [simplyblock_testenv::standin::StandIn; 2] {
    use simplyblock_operator::controlplane::names::{API, API_TLS_SECRET};
    let issuing = simplyblock_testenv::certmanager::start(kube.clone(), ns.into());
    let named_tls = sim.named_tls.clone();
    let mounted = simplyblock_testenv::standin::mount_secrets(
        kube.clone(),
        ns.into(),
        API_TLS_SECRET,
        move |ns, files| {
            let name = format!("{API}.{ns}.svc");
            if let Err(e) = named_tls.serve_mounted(&name, files, true) {
                eprintln!("the management API {name} cannot serve the mounted Secret: {e}");
            }
        },
    );
    [issuing, mounted]
}

/// Every request sbsim received, in order, refused ones included.
pub async fn call_log(cp: &Client) -> Vec<Value> {
    let r = cp
        .raw(Method::GET, "/../../_sim/calls", &[], None)
        .await
        .expect("call log");
    serde_json::from_value(r.json().unwrap_or(Value::Null)).expect("calls")
}

/// How many `method path` requests sbsim received.
pub async fn calls(cp: &Client, method: &str, path: &str) -> usize {
    call_log(cp)
        .await
        .iter()
        .filter(|c| c["method"] == method && c["path"] == path)
        .count()
}

/// The statuses sbsim answered `method path` with, in order.
pub async fn answers(cp: &Client, method: &str, path: &str) -> Vec<u64> {
    call_log(cp)
        .await
        .iter()
        .filter(|c| c["method"] == method && c["path"] == path)
        .filter_map(|c| c["status"].as_u64())
        .collect()
}

/// The notes of the events of `reason` in `ns`, about `object` when given.
pub async fn events(
    kube: &kube::Client,
    ns: &str,
    object: Option<&str>,
    reason: &str,
) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(kube.clone(), ns);
    events
        .list(&Default::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| {
            object.is_none_or(|o| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(o))
        })
        .filter_map(|e| e.note)
        .collect()
}

/// The notes of the events of `reason` in `ns` once there is at least one. The
/// operator publishes an event after the write it explains, so a test that has seen
/// the write waits here for the event instead of reading the list once.
pub async fn raised(
    kube: &kube::Client,
    ns: &str,
    object: Option<&str>,
    reason: &str,
) -> Vec<String> {
    until(&format!("a {reason} event"), async || {
        let found = events(kube, ns, object, reason).await;
        (!found.is_empty()).then_some(found)
    })
    .await
}

/// How often `reason` was raised on `object` once it was raised at least `at_least`
/// times (see [`raised`]).
pub async fn occurrences_reaching(
    kube: &kube::Client,
    ns: &str,
    object: &str,
    reason: &str,
    at_least: i32,
) -> i32 {
    until(&format!("{at_least} {reason} events"), async || {
        let n = occurrences(kube, ns, object, reason).await;
        (n >= at_least).then_some(n)
    })
    .await
}

/// How often `reason` was raised on `object` in `ns`: the publisher folds a repeated
/// note into one Event with a series count.
pub async fn occurrences(kube: &kube::Client, ns: &str, object: &str, reason: &str) -> i32 {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(kube.clone(), ns);
    events
        .list(&Default::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(object))
        .map(|e| e.series.map(|s| s.count).unwrap_or(1))
        .sum()
}

/// The operator's logs, written through the test harness: a failing test shows what its
/// controllers did (`RUST_LOG` narrows or widens it), a passing one shows nothing.
pub fn logs() {
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| "info,kube=warn,kube_runtime=warn".into());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    });
}

/// The webhook server of this process and where the API server reaches it.
pub struct Served {
    pub certs: Arc<ServingCertificates>,
    pub base: String,
}

/// The operator's ServiceAccount token on the shared API server: the chart's accounts
/// and roles installed once per process, in the operator's namespace, serving them all.
async fn operator_token() -> &'static str {
    static TOKEN: OnceCell<String> = OnceCell::const_new();
    TOKEN
        .get_or_init(|| async {
            let env = TestEnv::shared().expect("API server");
            let admin = env.client().await.expect("client");
            // Another test may have made it already.
            let _ = simplyblock_testenv::create_namespace(&admin, OPERATOR_NAMESPACE).await;
            // Each test of this server works in a namespace of its own: the chart as it
            // is installed to serve every namespace.
            simplyblock_testenv::chart::install_identity_with(
                env,
                OPERATOR_NAMESPACE,
                &[("operator.watchAllNamespaces", "true")],
            )
            .await
            .expect("the chart's accounts and roles");
            env.service_account_token(
                OPERATOR_NAMESPACE,
                simplyblock_testenv::chart::OPERATOR_ACCOUNT,
            )
            .await
            .expect("the operator's token")
        })
        .await
}

/// A client that is the operator: the chart's ServiceAccount, holding exactly the
/// permissions the chart's roles grant, so a permission the chart lacks fails the test
/// that needs it. The tests' own setup and assertions use the admin client.
pub async fn operator_kube() -> kube::Client {
    let env = TestEnv::shared().expect("API server");
    let mut config = env.config().clone();
    config.auth_info = kube::config::AuthInfo {
        token: Some(operator_token().await.to_string().into()),
        ..Default::default()
    };
    kube::Client::try_from(config).expect("the operator's client")
}

/// The shared API server with the CRDs installed and the webhooks registered, served once
/// per process from a thread of their own (each test has its own runtime). One server for
/// every test: the webhook configurations are cluster-wide, and two servers registering
/// in turn would leave the API server calling whichever registered last.
pub async fn webhooks() -> &'static Served {
    static SERVED: OnceCell<Served> = OnceCell::const_new();
    SERVED
        .get_or_init(|| async {
            let env = TestEnv::shared().expect("API server");
            env.install_crds(&simplyblock_api::crds())
                .await
                .expect("CRDs");
            let authority =
                simplyblock_certs::Authority::new("simplyblock-webhook-ca").expect("ca");
            let certs = ServingCertificates::new(
                authority,
                vec!["localhost".into()],
                vec![Ipv4Addr::LOCALHOST.into()],
                Duration::from_secs(3600),
            )
            .expect("serving certificates");
            let (tx, rx) = tokio::sync::oneshot::channel();
            let served_certs = certs.clone();
            let config = env.config().clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Runtime::new().expect("runtime");
                rt.block_on(async move {
                    let ctx = WebhookContext {
                        client: kube::Client::try_from(config).expect("client"),
                        operator_user: format!(
                            "system:serviceaccount:{OPERATOR_NAMESPACE}:{}",
                            simplyblock_testenv::chart::OPERATOR_ACCOUNT
                        ),
                        metrics: Default::default(),
                    };
                    let server = WebhookServer::bind(
                        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
                        served_certs,
                        webhooks::router(ctx),
                    )
                    .await
                    .expect("bind");
                    let _ = tx.send(server.local_addr().expect("addr"));
                    server.run().await;
                });
            });
            let addr = rx.await.expect("the webhook server started");
            let base = format!("https://{addr}");
            let client = operator_kube().await;
            webhooks::register(&client, &Endpoint::Url(base.clone()), &certs.ca_bundle())
                .await
                .expect("webhook configuration");
            Served { certs, base }
        })
        .await
}

/// A namespace, an sbsim with three online storage nodes in a 1+1 cluster `sb` that is
/// not activated, and a StorageCluster `sb` (stripe `stripe`) carrying its control-plane
/// id. No controller runs until a test starts one.
pub struct Harness {
    pub kube: kube::Client,
    pub ns: String,
    pub sim: Sbsim,
    pub cp: Client,
    pub uuid: Uuid,
    pub ctx: Arc<Context>,
}

pub async fn harness(ns: &str, faults: &str, stripe: (i32, i32)) -> Harness {
    harness_timed(
        ns,
        faults,
        stripe,
        simplyblock_simulator::Timings::default(),
    )
    .await
}

/// [`harness`] with the simulated hardware's `timings`.
pub async fn harness_timed(
    ns: &str,
    faults: &str,
    stripe: (i32, i32),
    timings: simplyblock_simulator::Timings,
) -> Harness {
    harness_built(ns, faults, stripe, timings, None).await
}

/// The endpoint of the object store [`harness_with_store`] sets up in its sbsim.
pub const STORE_ENDPOINT: &str = "http://minio.test:9000";
/// Its bucket, and the key that may write to it.
pub const STORE_BUCKET: &str = "backups";
pub const STORE_KEY: (&str, &str) = ("AKIDSTORE", "store-secret");

/// [`harness_timed`] whose cluster backs up into an object store of its sbsim (set up as a
/// user sets up MinIO: a bucket open to one key), under `prefix`.
pub async fn harness_with_store(
    ns: &str,
    timings: simplyblock_simulator::Timings,
    prefix: &str,
) -> Harness {
    let store = simplyblock_controlplane::BackupConfig {
        access_key_id: Some(STORE_KEY.0.into()),
        secret_access_key: Some(STORE_KEY.1.to_owned().into()),
        local_endpoint: Some(STORE_ENDPOINT.into()),
        bucket_name: Some(STORE_BUCKET.into()),
        prefix: Some(prefix.into()),
        region: None,
    };
    harness_built(ns, "", (1, 1), timings, Some(store)).await
}

async fn harness_built(
    ns: &str,
    faults: &str,
    stripe: (i32, i32),
    timings: simplyblock_simulator::Timings,
    store: Option<simplyblock_controlplane::BackupConfig>,
) -> Harness {
    let kube = api_server().await.client().await.expect("client");
    namespace(&kube, ns).await;
    let sim = sbsim_timed(faults, 3, timings).await.0;
    let cp = sim.cp.clone();
    let mut create = ClusterCreate::new("sb", 10, 4);
    if let Some(store) = store {
        let bucket = json!({
            "endpoint": store.local_endpoint, "bucket": store.bucket_name,
            "access_key_id": STORE_KEY.0, "secret_access_key": STORE_KEY.1,
        });
        cp.raw(
            Method::POST,
            "/../../_sim/object-stores",
            &[],
            Some(&bucket),
        )
        .await
        .expect("the object store");
        create.backup_config = Some(store);
    }
    let cluster = cp.create_cluster(&create).await.expect("cluster");
    for i in 1..=3 {
        cp.add_storage_node(
            cluster.id,
            &StorageNodeAdd::new(
                format!("w{i}.simplyblock-storage-node-api.simplyblock.svc.cluster.local:5000"),
                "eth0",
            ),
        )
        .await
        .expect("node add");
    }
    until("three online nodes", async || {
        let nodes = cp.list_storage_nodes(cluster.id).await.ok()?;
        (nodes.len() == 3 && nodes.iter().all(|n| n.status == NodeStatus::Online)).then_some(())
    })
    .await;

    let sc: StorageCluster = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
        "metadata": {"name": "sb"},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 4,
                 "stripe": {"dataChunks": stripe.0, "parityChunks": stripe.1}}
    }))
    .expect("cluster");
    let clusters: Api<StorageCluster> = Api::namespaced(kube.clone(), ns);
    clusters
        .create(&PostParams::default(), &sc)
        .await
        .expect("StorageCluster");
    clusters
        .patch_status(
            "sb",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"uuid": cluster.id.to_string()}})),
        )
        .await
        .expect("uuid");
    let ctx = Arc::new(
        Context::new(
            operator_kube().await,
            cp.clone(),
            sim.endpoint.clone(),
            ns.to_string(),
        )
        .watching(ns),
    );
    Harness {
        kube,
        ns: ns.into(),
        sim,
        cp,
        uuid: cluster.id,
        ctx,
    }
}

impl Harness {
    /// The StorageClusterOps controller.
    pub fn start(&self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(simplyblock_operator::cluster::ops::run(self.ctx.clone()))
    }

    pub fn ops(&self) -> Api<StorageClusterOps> {
        Api::namespaced(self.kube.clone(), &self.ns)
    }

    pub fn clusters(&self) -> Api<StorageCluster> {
        Api::namespaced(self.kube.clone(), &self.ns)
    }

    pub async fn phase_is(&self, name: &str, phase: OpsPhase) -> StorageClusterOps {
        let last = std::sync::Mutex::new(None);
        until_explained(
            &format!("{name} {phase:?}"),
            PATIENCE,
            async || {
                let op = self.ops().get(name).await.ok()?;
                let status = op.status.clone();
                *last.lock().expect("lock") = status.clone();
                (status?.phase == phase).then_some(op)
            },
            || format!("last seen {:?}", last.lock().expect("lock")),
        )
        .await
    }

    pub async fn step_is(&self, name: &str, step: &str) -> StorageClusterOps {
        until(&format!("{name} at {step}"), async || {
            let op = self.ops().get(name).await.ok()?;
            let s = op.status.as_ref()?;
            (s.phase == OpsPhase::Running && s.step.state.as_deref() == Some(step)).then_some(op)
        })
        .await
    }

    pub async fn calls(&self, method: &str, path: &str) -> usize {
        calls(&self.cp, method, path).await
    }

    pub async fn answers(&self, method: &str, path: &str) -> Vec<u64> {
        answers(&self.cp, method, path).await
    }

    /// The notes of `reason` on `object` once it was raised (see [`raised`]).
    pub async fn events(&self, object: &str, reason: &str) -> Vec<String> {
        raised(&self.kube, &self.ns, Some(object), reason).await
    }

    /// Brings the cluster to active through the control plane itself.
    pub async fn activated(&self) {
        self.cp.activate_cluster(self.uuid).await.expect("activate");
        until("the cluster active", async || {
            (self.cp.get_cluster(self.uuid).await.ok()?.status == ClusterStatus::Active)
                .then_some(())
        })
        .await;
    }
}

/// An installation moved over from the Go operator, on an API server of its own: the
/// CRDs named `go_crds` first installed as the Go operator stored them (v1alpha1), then
/// this release's over them ([`own_api_server_on`]); the operator's webhooks served in this
/// process as the chart's account, its conversions and admission registered with the API
/// server. Returns the environment, an admin client and the serving task.
pub async fn moved_over_api_server(
    ns: &str,
    go_crds: &[&str],
) -> (TestEnv, kube::Client, tokio::task::JoinHandle<()>) {
    let env = TestEnv::start().await.expect("API server");
    let old: Vec<_> = simplyblock_api::v1alpha1::crds()
        .into_iter()
        .filter(|crd| {
            crd.metadata
                .name
                .as_deref()
                .is_some_and(|n| go_crds.contains(&n))
        })
        .map(|mut crd| {
            for version in &mut crd.spec.versions {
                version.served = true;
                version.storage = true;
            }
            crd
        })
        .collect();
    assert_eq!(
        old.len(),
        go_crds.len(),
        "the Go operator's CRDs {go_crds:?}"
    );
    env.install_crds(&old)
        .await
        .expect("the Go operator's CRDs");
    let (env, admin) = own_api_server_on(env, ns).await;
    let operator = operator_kube_on(&env, ns).await;
    let serving = serve_webhooks(&operator, ns, true).await;
    (env, admin, serving)
}

/// The operator's webhooks served from this runtime on a loopback port, as the chart's
/// account of namespace `ns` (`operator`), which registers them with the API server: the
/// admission webhooks, and the conversions too with `conversions`. The serving task.
pub async fn serve_webhooks(
    operator: &kube::Client,
    ns: &str,
    conversions: bool,
) -> tokio::task::JoinHandle<()> {
    let certs = ServingCertificates::new(
        simplyblock_certs::Authority::new(&format!("{ns}-webhook-test-ca")).expect("ca"),
        vec!["localhost".into()],
        vec![Ipv4Addr::LOCALHOST.into()],
        Duration::from_secs(3600),
    )
    .expect("certificates");
    let server = WebhookServer::bind(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        certs.clone(),
        webhooks::router(WebhookContext {
            client: operator.clone(),
            operator_user: format!(
                "system:serviceaccount:{ns}:{}",
                simplyblock_testenv::chart::OPERATOR_ACCOUNT
            ),
            metrics: Default::default(),
        }),
    )
    .await
    .expect("bind");
    let endpoint = Endpoint::Url(format!("https://{}", server.local_addr().expect("addr")));
    let serving = tokio::spawn(server.run());
    if conversions {
        webhooks::conversion::register(operator, &endpoint, &certs.ca_bundle())
            .await
            .expect("conversions");
    }
    webhooks::register(operator, &endpoint, &certs.ca_bundle())
        .await
        .expect("admission");
    serving
}

/// What a scraper the chart lets in reads at the `/metrics` of an operator process on
/// `port` on [`own_api_server`] `env` (namespace `ns`): over TLS verified against the
/// operator's webhook CA, with the token of account `scraper`, bound to the chart's
/// ClusterRole `simplyblock-metrics-reader`. `None` while it does not answer so.
pub async fn scrape(env: &TestEnv, ns: &str, port: u16) -> Option<String> {
    use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    use simplyblock_operator::metrics_server::READER_ROLE;
    let admin = env.client().await.ok()?;
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "scraper"}})).ok()?;
    let _ = Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create(&Default::default(), &account)
        .await;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{ns}-scraper")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READER_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": ns}],
    }))
    .ok()?;
    let _ = Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&Default::default(), &binding)
        .await;
    let token = env.service_account_token(ns, "scraper").await.ok()?;
    let ca = Api::<Secret>::namespaced(admin, ns)
        .get_opt(simplyblock_operator::webhooks::ca::SECRET)
        .await
        .ok()??;
    let bundle = ca.data?.get("ca.crt")?.0.clone();
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&bundle) {
        roots.add(cert.ok()?).ok()?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(
        rustls::crypto::ring::default_provider().into(),
    )
    .with_safe_default_protocol_versions()
    .ok()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let response = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .build()
        .ok()?
        .get(format!("https://127.0.0.1:{port}/metrics"))
        .bearer_auth(token)
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    response.text().await.ok()
}

/// A structural CRD serving `kind` (any fields) in `group`/`version`: enough for discovery
/// and for the objects the operator writes of it, nothing of the kind's schema.
pub fn open_crd(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}"),
                     // A *.k8s.io group needs its API review named, as upstream's CRDs do.
                     "annotations": {"api-approved.kubernetes.io":
                                     "https://github.com/kubernetes-csi/external-snapshotter/pull/1068"}},
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": format!("{kind}List"),
                      "plural": plural, "singular": kind.to_lowercase()},
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "versions": [{"name": version, "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {
                              "type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .expect("CRD")
}

/// The group-snapshot API the csi-snapshotter v8.2 watches: its three kinds, as the
/// external-snapshotter's CRDs serve them (without their schemas).
pub fn group_snapshot_crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    const GROUP: &str = "groupsnapshot.storage.k8s.io";
    [
        ("VolumeGroupSnapshot", "volumegroupsnapshots", true),
        (
            "VolumeGroupSnapshotContent",
            "volumegroupsnapshotcontents",
            false,
        ),
        (
            "VolumeGroupSnapshotClass",
            "volumegroupsnapshotclasses",
            false,
        ),
    ]
    .into_iter()
    .map(|(kind, plural, namespaced)| open_crd(GROUP, "v1beta1", kind, plural, namespaced))
    .collect()
}

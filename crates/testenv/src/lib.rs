//! A real Kubernetes API server for tests and the demo: etcd and kube-apiserver started on
//! free loopback ports, with their own CA, RBAC authorization and an admin client.
//!
//! ```no_run
//! # async fn example() -> Result<(), simplyblock_testenv::Error> {
//! let env = simplyblock_testenv::TestEnv::start().await?;
//! let client = env.client().await?;
//! # Ok(()) }
//! ```
//!
//! [`TestEnv::start`] gives an environment owned by the caller: dropping it stops both
//! processes and removes their files, also while a test panics. [`TestEnv::shared`] gives one
//! environment per test binary, for suites whose tests each take a namespace of their own;
//! its processes die with the binary (see [`process`]) and its files are swept by the next
//! start.

pub mod assets;
pub mod certmanager;
pub mod chart;
pub mod chart_readme;
pub mod kubelet;
pub mod node;
pub mod ocm;
pub mod process;
pub mod standin;
pub mod wait;

use std::fs;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};

use process::Guarded;

/// What can go wrong while building or starting the environment.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "Go is needed to build kube-apiserver, etcd, csi-sanity, helm, promtool and kubectl for the test environment: {0}. \
         Install Go {minimum} or newer (https://go.dev/doc/install) and put `go` on PATH.",
        minimum = "1.26"
    )]
    GoMissing(String),
    #[error("building {what} failed:\n{detail}")]
    Build { what: String, detail: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("generating test certificates failed: {0}")]
    Certificates(#[from] simplyblock_certs::Error),
    #[error(
        "{name} did not become ready within {waited:?}: {reason}\nlast lines of its log ({log}):\n{tail}"
    )]
    NotReady {
        name: &'static str,
        waited: Duration,
        reason: String,
        log: String,
        tail: String,
    },
    #[error("the Kubernetes client could not be configured: {0}")]
    Client(String),
    #[error("applying the chart's objects failed: {0}")]
    Apply(String),
    #[error("installing CustomResourceDefinition {name} failed: {reason}")]
    Crd { name: String, reason: String },
    #[error("a pod's container cannot be started as its kubelet would: {0}")]
    Kubelet(String),
    #[error("the node: {0}")]
    Node(String),
}

impl Error {
    pub(crate) fn io(context: String, source: std::io::Error) -> Error {
        Error::Io { context, source }
    }

    /// A process that did not start because its port was taken.
    fn is_port_taken(&self) -> bool {
        matches!(self, Error::NotReady { tail, .. } if tail.contains("address already in use"))
    }
}

/// A running etcd + kube-apiserver pair.
pub struct TestEnv {
    /// kube-apiserver, then etcd: dropped in this order, before the files are removed.
    processes: Vec<Guarded>,
    dir: PathBuf,
    kubeconfig: PathBuf,
    config: kube::Config,
    url: String,
    /// The CA that signs the API server's certificate and every client's.
    authority: simplyblock_certs::Pair,
}

/// How the API server serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Profile {
    /// On loopback, for tests with no node: no Service endpoints, no token admission.
    Loopback,
    /// On a node's address, as a cluster's API server: the `kubernetes` Service points at
    /// it, pods get ServiceAccount tokens, kubelets are authorized as nodes.
    Node(Ipv4Addr),
}

/// The `kubernetes` Service's address in a cluster with a node (the first of the
/// Service range).
pub const NODE_API_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);
pub(crate) const NODE_SERVICE_RANGE: &str = "10.96.0.0/24";
/// The common name of the client certificate the API server proxies to aggregated APIs
/// with (the only one `--requestheader-allowed-names` admits).
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";
/// The CA's common name, under which [`simplyblock_certs::Authority::from_pair`] reads it.
const CA_NAME: &str = "simplyblock-testenv-ca";

impl TestEnv {
    /// Builds the binaries if needed, then starts etcd and kube-apiserver and waits until the
    /// API server reports ready.
    pub async fn start() -> Result<TestEnv, Error> {
        Self::start_as(Profile::Loopback).await
    }

    async fn start_as(profile: Profile) -> Result<TestEnv, Error> {
        let binaries = tokio::task::spawn_blocking(assets::ensure)
            .await
            .map_err(|e| Error::Client(format!("the asset build task failed: {e}")))??;
        sweep_stale_runs();
        // A port found free can still be taken before etcd or the API server binds it:
        // such a start is begun again on other ports.
        let mut attempts = 3;
        loop {
            let dir = run_dir()?;
            match Self::start_in(&binaries, dir.clone(), profile).await {
                Ok(env) => return Ok(env),
                Err(e) => {
                    let _ = fs::remove_dir_all(&dir);
                    attempts -= 1;
                    if attempts == 0 || !e.is_port_taken() {
                        return Err(e);
                    }
                    tracing::warn!(error = %e, "a port was taken before its bind; starting again");
                }
            }
        }
    }

    /// One environment for the whole test binary, started on first use. Each test should
    /// create a client of its own ([`TestEnv::client`]), because a client belongs to the
    /// tokio runtime that built it and every `#[tokio::test]` has its own.
    pub fn shared() -> Result<&'static TestEnv, Error> {
        static SHARED: OnceLock<Result<TestEnv, String>> = OnceLock::new();
        let env = SHARED.get_or_init(|| {
            // Its own thread and runtime, so no test's runtime is blocked or owns anything
            // the environment needs later.
            std::thread::spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?
                    .block_on(TestEnv::start())
                    .map_err(|e| e.to_string())
            })
            .join()
            .unwrap_or_else(|_| Err("starting the shared test environment panicked".into()))
        });
        env.as_ref().map_err(|e| Error::Client(e.clone()))
    }

    async fn start_in(
        binaries: &assets::Binaries,
        dir: PathBuf,
        profile: Profile,
    ) -> Result<TestEnv, Error> {
        let ca = simplyblock_certs::Authority::new(CA_NAME)?;
        let authority = ca.pair();
        let serving = match profile {
            Profile::Loopback => ca.loopback_serving("kube-apiserver")?,
            // What pods reach it by: the Service's address and names.
            Profile::Node(address) => ca.serving(
                "kube-apiserver",
                &[
                    "localhost",
                    "kubernetes",
                    "kubernetes.default",
                    "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local",
                ],
                &[
                    IpAddr::V4(Ipv4Addr::LOCALHOST),
                    IpAddr::V4(address),
                    IpAddr::V4(NODE_API_SERVICE_IP),
                ],
            )?,
        };
        let admin = ca.client("admin", Some("system:masters"))?;
        let (service_account_key, service_account_public_key) = simplyblock_certs::key_pair()?;
        let write = |name: &str, contents: &str| -> Result<PathBuf, Error> {
            let path = dir.join(name);
            fs::write(&path, contents)
                .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
            Ok(path)
        };
        let ca = write("ca.crt", &ca.cert_pem())?;
        let serving_cert = write("apiserver.crt", &serving.cert)?;
        let serving_key = write("apiserver.key", &serving.key)?;
        let sa_key = write("service-account.key", &service_account_key)?;
        let sa_pub = write("service-account.pub", &service_account_public_key)?;
        let admin_cert = write("admin.crt", &admin.cert)?;
        let admin_key = write("admin.key", &admin.key)?;
        // The aggregation layer's own CA and the client certificate the API server proxies
        // to aggregated APIs with, as kubeadm sets them up.
        let front_proxy_ca =
            simplyblock_certs::Authority::new("simplyblock-testenv-front-proxy-ca")?;
        let front_proxy = front_proxy_ca.client(FRONT_PROXY_CLIENT, None)?;
        let front_proxy_ca_file = write("front-proxy-ca.crt", &front_proxy_ca.cert_pem())?;
        let front_proxy_cert = write("front-proxy-client.crt", &front_proxy.cert)?;
        let front_proxy_key = write("front-proxy-client.key", &front_proxy.key)?;

        let etcd_client = free_port()?;
        let etcd_peer = free_port()?;
        let etcd_log = dir.join("etcd.log");
        let mut etcd_cmd = Command::new(&binaries.etcd);
        etcd_cmd
            .arg("--name=testenv")
            .arg(format!("--data-dir={}", dir.join("etcd").display()))
            .arg(format!(
                "--listen-client-urls=http://127.0.0.1:{etcd_client}"
            ))
            .arg(format!(
                "--advertise-client-urls=http://127.0.0.1:{etcd_client}"
            ))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"
            ))
            .arg(format!(
                "--initial-cluster=testenv=http://127.0.0.1:{etcd_peer}"
            ))
            .arg("--unsafe-no-fsync=true")
            .arg("--log-level=warn");
        let mut etcd = spawn_logged("etcd", etcd_cmd, &etcd_log)?;
        wait_for_etcd(&mut etcd, etcd_client, &etcd_log).await?;

        let port = free_port()?;
        let address = match profile {
            Profile::Loopback => Ipv4Addr::LOCALHOST,
            Profile::Node(address) => address,
        };
        let url = format!("https://{address}:{port}");
        let apiserver_log = dir.join("kube-apiserver.log");
        let mut api_cmd = Command::new(&binaries.kube_apiserver);
        api_cmd
            .arg(format!("--etcd-servers=http://127.0.0.1:{etcd_client}"))
            .arg(format!("--cert-dir={}", dir.display()))
            .arg(format!("--tls-cert-file={}", serving_cert.display()))
            .arg(format!("--tls-private-key-file={}", serving_key.display()))
            .arg(format!("--client-ca-file={}", ca.display()))
            .arg(format!("--secure-port={port}"))
            .arg(format!("--bind-address={address}"))
            .arg(format!("--advertise-address={address}"))
            .arg("--allow-privileged=true")
            .arg(format!("--service-account-issuer={url}/"))
            .arg(format!("--service-account-key-file={}", sa_pub.display()))
            .arg(format!(
                "--service-account-signing-key-file={}",
                sa_key.display()
            ))
            .arg("--v=1");
        match profile {
            Profile::Loopback => {
                api_cmd
                    // The kubernetes Service endpoints cannot point at loopback; nothing
                    // here needs them.
                    .arg("--endpoint-reconciler-type=none")
                    .arg("--service-cluster-ip-range=10.0.0.0/24")
                    .arg("--authorization-mode=RBAC")
                    // No token controller runs here, so pods would be refused with it on.
                    .arg("--disable-admission-plugins=ServiceAccount")
                    // Aggregated APIs are proxied to with the front-proxy certificate,
                    // which they verify against the CA published in
                    // kube-system/extension-apiserver-authentication.
                    .arg(format!(
                        "--requestheader-client-ca-file={}",
                        front_proxy_ca_file.display()
                    ))
                    .arg(format!(
                        "--requestheader-allowed-names={FRONT_PROXY_CLIENT}"
                    ))
                    .arg("--requestheader-username-headers=X-Remote-User")
                    .arg("--requestheader-group-headers=X-Remote-Group")
                    .arg("--requestheader-extra-headers-prefix=X-Remote-Extra-")
                    .arg(format!(
                        "--proxy-client-cert-file={}",
                        front_proxy_cert.display()
                    ))
                    .arg(format!(
                        "--proxy-client-key-file={}",
                        front_proxy_key.display()
                    ));
            }
            Profile::Node(_) => {
                api_cmd
                    .arg(format!("--service-cluster-ip-range={NODE_SERVICE_RANGE}"))
                    .arg("--authorization-mode=Node,RBAC")
                    .arg("--enable-admission-plugins=NodeRestriction")
                    // Webhooks and aggregated APIs are called at their Service's endpoint
                    // addresses, as on a control plane host that runs no kube-proxy.
                    .arg("--enable-aggregator-routing=true")
                    // The node has no name in DNS.
                    .arg("--kubelet-preferred-address-types=InternalIP")
                    // Controllers read the aggregation layer's CA; the API server never
                    // proxies to an aggregated API here, so its own CA stands in.
                    .arg(format!("--requestheader-client-ca-file={}", ca.display()))
                    .arg("--requestheader-allowed-names=front-proxy-client")
                    .arg("--requestheader-username-headers=X-Remote-User")
                    .arg("--requestheader-group-headers=X-Remote-Group")
                    .arg("--requestheader-extra-headers-prefix=X-Remote-Extra-")
                    // Logs and exec: the API server calls the kubelet as an administrator.
                    .arg(format!(
                        "--kubelet-client-certificate={}",
                        admin_cert.display()
                    ))
                    .arg(format!("--kubelet-client-key={}", admin_key.display()));
            }
        }
        let mut apiserver = spawn_logged("kube-apiserver", api_cmd, &apiserver_log)?;

        let kubeconfig_text = kubeconfig_yaml(&url, &ca, &admin_cert, &admin_key);
        let kubeconfig = write("kubeconfig", &kubeconfig_text)?;
        let parsed = Kubeconfig::from_yaml(&kubeconfig_text)
            .map_err(|e| Error::Client(format!("the generated kubeconfig does not parse: {e}")))?;
        let config = kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
            .await
            .map_err(|e| Error::Client(e.to_string()))?;
        wait_for_apiserver(&mut apiserver, &config, &apiserver_log).await?;

        Ok(TestEnv {
            processes: vec![apiserver, etcd],
            dir,
            kubeconfig,
            config,
            url,
            authority,
        })
    }

    /// A new client for the admin user (group `system:masters`). Call it inside the tokio
    /// runtime that will use the client.
    pub async fn client(&self) -> Result<kube::Client, Error> {
        kube::Client::try_from(self.config.clone()).map_err(|e| Error::Client(e.to_string()))
    }

    /// A client authenticated as ServiceAccount `namespace/name` (which must exist), with a
    /// token from the TokenRequest API: what a pod running as that account holds, so RBAC
    /// decides what it may do. Call it inside the tokio runtime that will use the client.
    pub async fn service_account_client(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<kube::Client, Error> {
        let token = self.service_account_token(namespace, name).await?;
        let mut config = self.config.clone();
        config.auth_info = kube::config::AuthInfo {
            token: Some(token.into()),
            ..Default::default()
        };
        kube::Client::try_from(config).map_err(|e| Error::Client(e.to_string()))
    }

    /// A day-long token for ServiceAccount `namespace/name`.
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<String, Error> {
        use k8s_openapi::api::core::v1::ServiceAccount;
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client().await?, namespace);
        let request = serde_json::from_value(serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 24 * 60 * 60}
        }))
        .map_err(|e| Error::Client(e.to_string()))?;
        let issued = accounts
            .create_token_request(name, &Default::default(), &request)
            .await
            .map_err(|e| Error::Client(format!("a token for {namespace}/{name}: {e}")))?;
        serde_json::to_value(&issued)
            .ok()
            .and_then(|v| v["status"]["token"].as_str().map(str::to_string))
            .ok_or_else(|| Error::Client(format!("no token issued for {namespace}/{name}")))
    }

    /// The client configuration, for building clients with other settings.
    pub fn config(&self) -> &kube::Config {
        &self.config
    }

    /// A kubeconfig file for ServiceAccount `namespace/name` (a day-long token), for a
    /// process under test that runs as that account.
    pub async fn service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<PathBuf, Error> {
        let token = self.service_account_token(namespace, name).await?;
        let ca = self.dir.join("ca.crt");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: {url}\n    certificate-authority: {ca}\nusers:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: testenv\n  context:\n    cluster: testenv\n    user: {name}\n    namespace: {namespace}\ncurrent-context: testenv\n",
            url = self.url,
            ca = ca.display(),
        );
        let path = self.dir.join(format!("kubeconfig-{namespace}-{name}"));
        fs::write(&path, text).map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        Ok(path)
    }

    /// A kubeconfig file for the admin user, for kubectl and for processes under test.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The API server's base URL, `https://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The directory holding this environment's certificates, logs and etcd data.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process ids of kube-apiserver and etcd.
    pub fn pids(&self) -> (u32, u32) {
        (self.processes[0].pid(), self.processes[1].pid())
    }

    /// Applies the CRDs (server-side, so a second install is a no-op) and waits until each
    /// is Established, i.e. served.
    pub async fn install_crds(&self, crds: &[CustomResourceDefinition]) -> Result<(), Error> {
        let client = self.client().await?;
        let api: Api<CustomResourceDefinition> = Api::all(client);
        let params = PatchParams::apply("simplyblock-testenv").force();
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            api.patch(&name, &params, &Patch::Apply(crd))
                .await
                .map_err(|e| Error::Crd {
                    name: name.clone(),
                    reason: e.to_string(),
                })?;
        }
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let established = await_condition(api.clone(), &name, conditions::is_crd_established());
            match tokio::time::timeout(Duration::from_secs(30), established).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    return Err(Error::Crd {
                        name,
                        reason: e.to_string(),
                    });
                }
                Err(_) => {
                    return Err(Error::Crd {
                        name,
                        reason: "not Established after 30s".into(),
                    });
                }
            }
        }
        Ok(())
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        self.processes.clear();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn spawn_logged(name: &'static str, mut cmd: Command, log: &Path) -> Result<Guarded, Error> {
    let file =
        fs::File::create(log).map_err(|e| Error::io(format!("creating {}", log.display()), e))?;
    let err = file
        .try_clone()
        .map_err(|e| Error::io(format!("opening {}", log.display()), e))?;
    cmd.stdin(Stdio::null()).stdout(file).stderr(err);
    Guarded::spawn(name, cmd).map_err(|e| Error::io(format!("starting {name}"), e))
}

async fn wait_for_etcd(etcd: &mut Guarded, port: u16, log: &Path) -> Result<(), Error> {
    let limit = Duration::from_secs(30);
    let started = Instant::now();
    loop {
        if let Some(status) = etcd.exited() {
            return Err(not_ready(
                etcd.name,
                started,
                format!("it exited ({status})"),
                log,
            ));
        }
        if tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        if started.elapsed() > limit {
            return Err(not_ready(
                etcd.name,
                started,
                "its client port never opened".into(),
                log,
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_for_apiserver(
    apiserver: &mut Guarded,
    config: &kube::Config,
    log: &Path,
) -> Result<(), Error> {
    let limit = Duration::from_secs(90);
    let started = Instant::now();
    let client =
        kube::Client::try_from(config.clone()).map_err(|e| Error::Client(e.to_string()))?;
    loop {
        if let Some(status) = apiserver.exited() {
            return Err(not_ready(
                apiserver.name,
                started,
                format!("it exited ({status})"),
                log,
            ));
        }
        let answer = match http::Request::get("/readyz").body(Vec::new()) {
            Ok(req) => match client.request_text(req).await {
                Ok(body) if body.trim() == "ok" => return Ok(()),
                Ok(body) => body,
                Err(e) => e.to_string(),
            },
            Err(e) => e.to_string(),
        };
        if started.elapsed() > limit {
            return Err(not_ready(
                apiserver.name,
                started,
                format!("/readyz said: {answer}"),
                log,
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn not_ready(name: &'static str, started: Instant, reason: String, log: &Path) -> Error {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(30)..].join("\n");
    Error::NotReady {
        name,
        waited: started.elapsed(),
        reason,
        log: log.display().to_string(),
        tail,
    }
}

/// A loopback port nothing listens on, for a process that binds it itself.
///
/// Chosen at random below the kernel's ephemeral range: a port from `bind(0)` lies in that
/// range, where outgoing connections take their source ports too, so between its release
/// and the process's bind a connection of any test could take it ("address already in
/// use"). Below the range only another listener can, and only by picking the same port.
pub fn free_port() -> Result<u16, Error> {
    use std::hash::BuildHasher;
    const LOWEST: u16 = 10_000;
    let ephemeral_from = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    if ephemeral_from > LOWEST + 1_000 {
        let span = u64::from(ephemeral_from - LOWEST);
        let random = std::collections::hash_map::RandomState::new();
        for attempt in 0..64u32 {
            let pick = random.hash_one((std::process::id(), attempt, Instant::now())) % span;
            let port = LOWEST + u16::try_from(pick).unwrap_or(0);
            if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
                return Ok(port);
            }
        }
    }
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::io("finding a free loopback port".into(), e))
}

fn runs_root() -> PathBuf {
    std::env::temp_dir().join("simplyblock-testenv")
}

/// `<tmp>/simplyblock-testenv/<pid>-<n>`: the pid lets a later start tell a dead run's
/// files from a live one's.
fn run_dir() -> Result<PathBuf, Error> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let dir = runs_root().join(format!(
        "{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    Ok(dir)
}

/// Removes the files of environments whose test process has exited.
fn sweep_stale_runs() {
    let Ok(entries) = fs::read_dir(runs_root()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|pid| !process::alive(pid)) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// A kubeconfig that names the certificate files, so kubectl and kube read the same thing.
fn kubeconfig_yaml(url: &str, ca: &Path, cert: &Path, key: &Path) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: {url}\n    certificate-authority: {ca}\nusers:\n- name: admin\n  user:\n    client-certificate: {cert}\n    client-key: {key}\ncontexts:\n- name: testenv\n  context:\n    cluster: testenv\n    user: admin\n    namespace: default\ncurrent-context: testenv\n",
        ca = ca.display(),
        cert = cert.display(),
        key = key.display(),
    )
}

/// Creates the namespace a test works in; each test takes one of its own, so the tests of
/// one binary share the API server without seeing each other's objects.
pub async fn create_namespace(client: &kube::Client, name: &str) -> Result<(), kube::Error> {
    let namespace = k8s_openapi::api::core::v1::Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::all(client.clone())
        .create(&kube::api::PostParams::default(), &namespace)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_start_refused_its_port_is_begun_again() {
        let refused = |tail: &str| Error::NotReady {
            name: "etcd",
            waited: Duration::from_millis(50),
            reason: "it exited (exit status: 1)".into(),
            log: "etcd.log".into(),
            tail: tail.into(),
        };
        let taken = r#"{"level":"fatal","msg":"discovery failed","error":"listen tcp 127.0.0.1:46089: bind: address already in use"}"#;
        assert!(refused(taken).is_port_taken());
        assert!(!refused("open /data/member: permission denied").is_port_taken());
        assert!(!Error::Client("address already in use".into()).is_port_taken());
    }

    #[test]
    fn a_free_port_lies_below_the_ephemeral_range_and_can_be_bound() {
        let ephemeral_from: u16 = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .expect("the kernel's ephemeral range")
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .expect("its first port");
        let ports: Vec<u16> = (0..20).map(|_| free_port().expect("a port")).collect();
        for port in &ports {
            assert!((10_000..ephemeral_from).contains(port), "{ports:?}");
            TcpListener::bind((Ipv4Addr::LOCALHOST, *port)).expect("the port binds");
        }
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() > 1, "picked at random: {ports:?}");
    }
}

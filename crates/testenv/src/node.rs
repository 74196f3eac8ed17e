//! A one-node Kubernetes cluster on this machine: the API server of [`TestEnv`] on a node
//! address of its own, kube-controller-manager, kube-scheduler, kube-proxy, a kubelet,
//! containerd with runc, and CNI's bridge. Nothing is pulled: images are imported into
//! containerd from OCI archives built here (`scripts/build-images.sh`).
//!
//! The node is a machine-wide thing: the kubelet's directory (`/var/lib/kubelet`, where the
//! CSI driver's manifests expect it), cgroups, network devices and iptables rules. So one
//! node runs at a time (a lock file), and [`down`] removes everything a node makes, whether
//! the run that made it ended well or not; [`Node::up`] calls it first, so a crashed run is
//! cleaned by the next.
//!
//! ```no_run
//! # async fn example() -> Result<(), simplyblock_testenv::Error> {
//! let node = simplyblock_testenv::node::Node::up(std::path::Path::new("target/images")).await?;
//! let client = node.env().client().await?;
//! # Ok(()) }
//! ```

use std::fs::{self, File};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node as KubeNode;
use kube::api::Api;

use crate::process::Guarded;
use crate::{Error, Profile, TestEnv, assets, spawn_logged};

/// The node's name, as it registers.
pub const NODE_NAME: &str = "simplyblock-testenv-node";
/// The node's address: on a device of its own, since a kubelet refuses loopback. The API
/// server, the kubelet and every host-network pod serve on it; nothing routes it off this
/// machine. The device is an empty bridge: the test machines' kernels have no dummy
/// devices, and a local address answers whatever the device's carrier.
pub const NODE_IP: Ipv4Addr = Ipv4Addr::new(172, 31, 254, 1);
const NODE_DEVICE: &str = "sbtestnode0";
/// The pods' network: one bridge, one subnet, its first address the gateway on the host.
pub const POD_SUBNET: &str = "10.244.0.0/24";
const POD_BRIDGE: &str = "sbtestcni0";
const CNI_NETWORK: &str = "simplyblock-testenv";
/// The sandbox ("pause") image every pod starts from; `scripts/build-images.sh` builds it.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// The cluster DNS Service's address and the cluster's domain, as kubeadm sets them.
pub const CLUSTER_DNS_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// The images a node cannot start without: every pod's sandbox, and the cluster DNS.
const REQUIRED_IMAGES: [&str; 2] = [PAUSE_IMAGE, assets::COREDNS_IMAGE];
/// Fixed by the CSI driver's manifests (hostPath volumes): the kubelet's root directory.
const KUBELET_DIR: &str = "/var/lib/kubelet";
/// Everything else the node writes: configuration, logs, containerd's store.
const NODE_DIR: &str = "/var/lib/simplyblock-testenv-node";
/// containerd's state (sockets, task bundles).
const RUN_DIR: &str = "/run/simplyblock-testenv-node";
/// Held by the process whose node is up. Outside every directory [`down`] removes: a lock
/// file removed while held would let a second node start, and `down` tear down a live one.
const LOCK_PATH: &str = "/run/simplyblock-testenv-node.lock";
/// The kubelet's pod log directories (its defaults).
const POD_LOG_DIRS: [&str; 2] = ["/var/log/pods", "/var/log/containers"];
/// Where containerd's CRI puts each sandbox's network namespace.
const NETNS_DIR: &str = "/run/netns";
/// The kernel settings a node needs; their earlier values are restored by [`down`].
const SYSCTLS: [(&str, &str); 2] = [
    ("/proc/sys/net/ipv4/ip_forward", "1"),
    // Pod to Service to pod on one bridge: the reply must pass the host's NAT again.
    ("/proc/sys/net/bridge/bridge-nf-call-iptables", "1"),
];
/// The programs a node runs besides the Kubernetes binaries, and the Debian packages that
/// have them.
const HOST_TOOLS: [(&str, &str); 6] = [
    ("containerd", "containerd"),
    ("runc", "runc"),
    ("ctr", "containerd"),
    ("iptables", "iptables"),
    ("conntrack", "conntrack"),
    ("ip", "iproute2"),
];
/// Where Debian's containernetworking-plugins puts the CNI plugins.
const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// A running one-node cluster; dropping it runs [`down`].
pub struct Node {
    /// kubelet first: dropped before the control plane, so no pod is started again while
    /// the rest goes.
    processes: Vec<Guarded>,
    env: Option<TestEnv>,
    _lock: File,
}

impl Node {
    /// Cleans what an earlier run left, starts the API server on [`NODE_IP`] and every node
    /// component, imports each `*.oci.tar` in `images` into containerd, and waits until the
    /// node is Ready. The pause image ([`PAUSE_IMAGE`]) must be among them.
    pub async fn up(images: &Path) -> Result<Node, Error> {
        let node_binaries = tokio::task::spawn_blocking(assets::node)
            .await
            .map_err(|e| Error::Node(format!("the asset build task failed: {e}")))??;
        check_host_tools()?;
        let archives = image_archives(images)?;
        let lock = wait_for_lock(
            "another node is up on this machine; stop it (Ctrl-C in the process that started it) first",
        )
        .await?;
        down_unlocked()?;
        fs::create_dir_all(RUN_DIR).map_err(|e| Error::io(format!("creating {RUN_DIR}"), e))?;
        let dir = PathBuf::from(NODE_DIR);
        fs::create_dir_all(dir.join("logs"))
            .map_err(|e| Error::io(format!("creating {NODE_DIR}"), e))?;
        set_sysctls(&dir)?;
        network_device()?;

        let mut node = Node {
            processes: Vec::new(),
            env: None,
            _lock: lock,
        };
        let env = TestEnv::start_as(Profile::Node(NODE_IP)).await?;
        let files = NodeFiles::write(&env, &dir)?;
        node.env = Some(env);

        let containerd = start_containerd(&files)?;
        import_images(&archives)?;
        let controller_manager = start_component(
            "kube-controller-manager",
            &node_binaries.kube_controller_manager,
            &files.controller_manager_args(),
        )?;
        let scheduler = start_component(
            "kube-scheduler",
            &node_binaries.kube_scheduler,
            &files.scheduler_args(),
        )?;
        let proxy = start_component("kube-proxy", &node_binaries.kube_proxy, &files.proxy_args())?;
        let kubelet = start_component("kubelet", &node_binaries.kubelet, &files.kubelet_args())?;
        // Dropped in this order: the kubelet first, containerd last.
        node.processes = vec![kubelet, proxy, scheduler, controller_manager, containerd];
        node.wait_ready().await?;
        let client = node.env().client().await?;
        crate::chart::apply(&client, &cluster_dns()?, "simplyblock-testenv", false).await?;
        node.wait_for_dns(&client).await?;
        Ok(node)
    }

    /// The API server of this node's cluster.
    pub fn env(&self) -> &TestEnv {
        self.env
            .as_ref()
            .expect("a node that is up has its API server")
    }

    /// Imports more images into the node's containerd.
    pub fn import(&self, archives: &[PathBuf]) -> Result<(), Error> {
        import_images(archives)
    }

    /// Gives the imported image `from` the name `to` as well: the name a mirror serves it
    /// by, for a test that installs from a mirror without a registry to pull from.
    pub fn tag(&self, from: &str, to: &str) -> Result<(), Error> {
        ctr_images(&["tag", "--force", from, to])
    }

    /// The process ids of the node's components, by name.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        self.processes.iter().map(|p| (p.name, p.pid())).collect()
    }

    async fn wait_ready(&mut self) -> Result<(), Error> {
        let client = self.env().client().await?;
        let nodes: Api<KubeNode> = Api::all(client.clone());
        let started = Instant::now();
        let limit = Duration::from_secs(120);
        loop {
            for process in &mut self.processes {
                if let Some(status) = process.exited() {
                    return Err(Error::Node(format!(
                        "{} exited ({status}); its log: {}",
                        process.name,
                        log_path(process.name).display()
                    )));
                }
            }
            let state = match nodes.get_opt(NODE_NAME).await {
                Ok(Some(node)) => {
                    let ready = node
                        .status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .into_iter()
                        .find(|c| c.type_ == "Ready");
                    match ready {
                        Some(c) if c.status == "True" => match pods_admitted(&client).await {
                            None => return Ok(()),
                            Some(missing) => missing,
                        },
                        Some(c) => {
                            format!("Ready is {}: {}", c.status, c.message.unwrap_or_default())
                        }
                        None => "no Ready condition yet".into(),
                    }
                }
                Ok(None) => "not registered yet".into(),
                Err(e) => e.to_string(),
            };
            if started.elapsed() > limit {
                return Err(Error::Node(format!(
                    "node {NODE_NAME} is not Ready after {limit:?} ({state}); the kubelet's log: {}",
                    log_path("kubelet").display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

impl Node {
    async fn wait_for_dns(&mut self, client: &kube::Client) -> Result<(), Error> {
        use k8s_openapi::api::apps::v1::Deployment;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "kube-system");
        let started = Instant::now();
        let limit = Duration::from_secs(120);
        loop {
            let available = deployments
                .get_opt("coredns")
                .await
                .ok()
                .flatten()
                .and_then(|d| d.status)
                .and_then(|s| s.available_replicas)
                .unwrap_or(0);
            // Available is not enough: a pod's query reaches CoreDNS once kube-proxy
            // translates the Service's address, which it does a moment later.
            if available > 0 && dns_service_routed() {
                return Ok(());
            }
            if started.elapsed() > limit {
                return Err(Error::Node(format!(
                    "the cluster DNS (Deployment kube-system/coredns behind Service \
                     kube-system/kube-dns) is not available after {limit:?}; the logs of the \
                     kubelet and kube-proxy: {}, {}",
                    log_path("kubelet").display(),
                    log_path("kube-proxy").display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Whether kube-proxy sends both of the kube-dns Service's ports (UDP and TCP) to an
/// endpoint: without one it rejects them instead.
fn dns_service_routed() -> bool {
    let Ok(rules) = run("iptables", &["-t", "nat", "-S", "KUBE-SERVICES"]) else {
        return false;
    };
    [
        "kube-system/kube-dns:dns cluster IP",
        "kube-system/kube-dns:dns-tcp cluster IP",
    ]
    .iter()
    .all(|comment| {
        rules
            .lines()
            .any(|r| r.contains(comment) && r.contains("-j KUBE-SVC-"))
    })
}

/// What a pod of namespace `default` still waits for, if anything: its ServiceAccount and
/// the CA its token volume carries, which the controller manager makes.
async fn pods_admitted(client: &kube::Client) -> Option<String> {
    use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    if !matches!(accounts.get_opt("default").await, Ok(Some(_))) {
        return Some("no ServiceAccount default/default yet".into());
    }
    if !matches!(maps.get_opt("kube-root-ca.crt").await, Ok(Some(_))) {
        return Some("no ConfigMap default/kube-root-ca.crt yet".into());
    }
    None
}

impl Drop for Node {
    fn drop(&mut self) {
        self.processes.clear();
        self.env = None;
        if let Err(e) = down_unlocked() {
            eprintln!("testenv: removing the node left something behind: {e}");
        }
    }
}

/// Where scripts/build-images.sh writes its archives: `$IMAGES_OUT`, else the
/// workspace's `target/images`.
pub fn default_images_dir() -> PathBuf {
    std::env::var_os("IMAGES_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/images")
                .components()
                .collect()
        })
}

/// What a node made that is still there: its devices, directories, cgroups, mounts,
/// iptables chains and processes, one line each. Empty after [`down`].
pub fn leftovers() -> Vec<String> {
    let mut found = Vec::new();
    for device in [POD_BRIDGE, NODE_DEVICE] {
        if Path::new("/sys/class/net").join(device).exists() {
            found.push(format!("network device {device}"));
        }
    }
    if service_route() {
        found.push(format!("blackhole route {}", crate::NODE_SERVICE_RANGE));
    }
    for dir in [KUBELET_DIR, NODE_DIR].into_iter().chain(POD_LOG_DIRS) {
        if Path::new(dir).exists() {
            found.push(format!("directory {dir}"));
        }
    }
    if let Ok(controllers) = fs::read_dir("/sys/fs/cgroup") {
        for controller in controllers.flatten() {
            let dir = controller.path().join("kubepods");
            if dir.exists() {
                found.push(format!("cgroup {}", dir.display()));
            }
        }
    }
    if let Ok(mountinfo) = fs::read_to_string("/proc/self/mountinfo") {
        for point in mountinfo
            .lines()
            .filter_map(|l| l.split_whitespace().nth(4))
            .map(unescape_mount_path)
        {
            if [KUBELET_DIR, NODE_DIR].iter().any(|r| point.starts_with(r))
                || point.starts_with(&format!("{NETNS_DIR}/cni-"))
            {
                found.push(format!("mount {point}"));
            }
        }
    }
    for program in ["iptables-save", "ip6tables-save"] {
        if let Ok(rules) = run(program, &[]) {
            for line in rules.lines().filter(|l| l.starts_with(':')) {
                let chain = line[1..].split_whitespace().next().unwrap_or_default();
                if chain.starts_with("CNI-") || chain.starts_with("KUBE-") {
                    found.push(format!("{program}: chain {chain}"));
                }
            }
        }
    }
    for pid in node_pids() {
        found.push(format!("process {pid}"));
    }
    found
}

/// Where a component's log is.
pub fn log_path(component: &str) -> PathBuf {
    Path::new(NODE_DIR)
        .join("logs")
        .join(format!("{component}.log"))
}

fn check_host_tools() -> Result<(), Error> {
    let mut missing: Vec<&str> = HOST_TOOLS
        .iter()
        .filter(|(tool, _)| which(tool).is_none())
        .map(|(_, package)| *package)
        .collect();
    for plugin in ["bridge", "host-local", "loopback", "portmap"] {
        if !Path::new(CNI_BIN_DIR).join(plugin).is_file() {
            missing.push("containernetworking-plugins");
            break;
        }
    }
    missing.dedup();
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::Node(format!(
        "a node needs programs this machine lacks; install them (as root): apt-get install {}",
        missing.join(" ")
    )))
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

fn image_archives(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let entries = fs::read_dir(dir).map_err(|e| {
        Error::Node(format!(
            "no images at {}: {e}; build them with scripts/build-images.sh --out {}",
            dir.display(),
            dir.display()
        ))
    })?;
    let mut archives: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".oci.tar"))
        .collect();
    archives.sort();
    for image in REQUIRED_IMAGES {
        let file = archive_name(image);
        if !archives
            .iter()
            .any(|a| a.file_name().is_some_and(|n| n == file.as_str()))
        {
            return Err(Error::Node(format!(
                "{} holds no {file}, the image {image} a node cannot start without; build it \
                 with scripts/build-images.sh --only pause,coredns --out {}",
                dir.display(),
                dir.display()
            )));
        }
    }
    Ok(archives)
}

/// The archive scripts/build-images.sh writes for `image`: `<name>-<tag>.oci.tar`.
pub fn archive_name(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    format!("{}.oci.tar", last.replacen(':', "-", 1))
}

/// Runs a host command, failing with its output.
fn run(program: &str, args: &[&str]) -> Result<String, Error> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| Error::io(format!("running {program}"), e))?;
    if !out.status.success() {
        return Err(Error::Node(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn set_sysctls(dir: &Path) -> Result<(), Error> {
    let mut saved = String::new();
    for (path, value) in SYSCTLS {
        let old = fs::read_to_string(path).map_err(|e| Error::io(format!("reading {path}"), e))?;
        saved.push_str(&format!("{path} {}\n", old.trim()));
        fs::write(path, value).map_err(|e| Error::io(format!("writing {path}"), e))?;
    }
    let record = dir.join("sysctls");
    fs::write(&record, saved).map_err(|e| Error::io(format!("writing {}", record.display()), e))
}

fn network_device() -> Result<(), Error> {
    run("ip", &["link", "add", NODE_DEVICE, "type", "bridge"])?;
    run(
        "ip",
        &["addr", "add", &format!("{NODE_IP}/32"), "dev", NODE_DEVICE],
    )?;
    run("ip", &["link", "set", NODE_DEVICE, "up"])?;
    // A packet for a Service address that kube-proxy has not (yet) translated to a pod's
    // is dropped here, never sent off the machine by the default route.
    run(
        "ip",
        &["route", "add", "blackhole", crate::NODE_SERVICE_RANGE],
    )?;
    Ok(())
}

/// Whether the blackhole route of [`network_device`] is there.
fn service_route() -> bool {
    run(
        "ip",
        &[
            "route",
            "show",
            "type",
            "blackhole",
            crate::NODE_SERVICE_RANGE,
        ],
    )
    .is_ok_and(|out| !out.trim().is_empty())
}

/// The files the node's components read: kubeconfigs (each its own client certificate),
/// the kubelet's configuration, containerd's, and the CNI network.
struct NodeFiles {
    dir: PathBuf,
    ca: PathBuf,
    containerd_config: PathBuf,
    kubelet_config: PathBuf,
    kubeconfig: std::collections::BTreeMap<&'static str, PathBuf>,
}

impl NodeFiles {
    fn write(env: &TestEnv, dir: &Path) -> Result<NodeFiles, Error> {
        let write = |name: &str, contents: &str| -> Result<PathBuf, Error> {
            let path = dir.join(name);
            fs::write(&path, contents)
                .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
            Ok(path)
        };
        let authority = simplyblock_certs::Authority::from_pair(crate::CA_NAME, &env.authority)?;
        let ca = write("ca.crt", &authority.cert_pem())?;
        let mut kubeconfig = std::collections::BTreeMap::new();
        let node_user = format!("system:node:{NODE_NAME}");
        for (component, user, group) in [
            ("kubelet", node_user.as_str(), Some("system:nodes")),
            (
                "kube-controller-manager",
                "system:kube-controller-manager",
                None,
            ),
            ("kube-scheduler", "system:kube-scheduler", None),
            ("kube-proxy", "system:kube-proxy", None),
        ] {
            let pair = authority.client(user, group)?;
            let cert = write(&format!("{component}.crt"), &pair.cert)?;
            let key = write(&format!("{component}.key"), &pair.key)?;
            let text = crate::kubeconfig_yaml(env.url(), &ca, &cert, &key);
            kubeconfig.insert(component, write(&format!("{component}.kubeconfig"), &text)?);
        }

        let socket = containerd_socket();
        let cni_conf_dir = dir.join("cni");
        fs::create_dir_all(&cni_conf_dir)
            .map_err(|e| Error::io(format!("creating {}", cni_conf_dir.display()), e))?;
        let containerd_config = write(
            "containerd.toml",
            &containerd_toml(dir, &socket, &cni_conf_dir),
        )?;
        let conflist = cni_conflist(&dir.join("cni-ipam"));
        let path = cni_conf_dir.join("10-simplyblock-testenv.conflist");
        fs::write(&path, conflist)
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        let kubelet_config = write("kubelet.yaml", &kubelet_yaml(&ca))?;
        Ok(NodeFiles {
            dir: dir.to_path_buf(),
            ca,
            containerd_config,
            kubelet_config,
            kubeconfig,
        })
    }

    fn kubeconfig(&self, component: &str) -> String {
        self.kubeconfig[component].display().to_string()
    }

    fn controller_manager_args(&self) -> Vec<String> {
        let kubeconfig = self.kubeconfig("kube-controller-manager");
        vec![
            format!("--kubeconfig={kubeconfig}"),
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
            // Each controller acts as its own ServiceAccount, as on a real cluster, so RBAC
            // decides what the garbage collector or the DaemonSet controller may do.
            "--use-service-account-credentials=true".into(),
            // Published to every namespace as kube-root-ca.crt, which projected token
            // volumes carry.
            format!("--root-ca-file={}", self.ca.display()),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            "--secure-port=10257".into(),
            "--v=1".into(),
        ]
    }

    fn scheduler_args(&self) -> Vec<String> {
        let kubeconfig = self.kubeconfig("kube-scheduler");
        vec![
            format!("--kubeconfig={kubeconfig}"),
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            "--secure-port=10259".into(),
            "--v=1".into(),
        ]
    }

    fn proxy_args(&self) -> Vec<String> {
        vec![
            format!("--kubeconfig={}", self.kubeconfig("kube-proxy")),
            format!("--hostname-override={NODE_NAME}"),
            "--proxy-mode=iptables".into(),
            format!("--cluster-cidr={POD_SUBNET}"),
            // Leave the kernel's conntrack limits as they are: setting them needs rights a
            // test machine may not give.
            "--conntrack-max-per-core=0".into(),
            "--metrics-bind-address=127.0.0.1:10249".into(),
            "--healthz-bind-address=127.0.0.1:10256".into(),
            "--v=1".into(),
        ]
    }

    fn kubelet_args(&self) -> Vec<String> {
        vec![
            format!("--config={}", self.kubelet_config.display()),
            format!("--kubeconfig={}", self.kubeconfig("kubelet")),
            format!(
                "--container-runtime-endpoint=unix://{}",
                containerd_socket().display()
            ),
            format!("--hostname-override={NODE_NAME}"),
            format!("--node-ip={NODE_IP}"),
            format!("--root-dir={KUBELET_DIR}"),
            format!("--cert-dir={}", self.dir.join("kubelet-pki").display()),
            "--v=1".into(),
        ]
    }
}

/// The cluster DNS as kubeadm installs it: CoreDNS answering for the cluster's Services
/// and pods (and nothing else: no upstream is forwarded to, so no query leaves the
/// machine), behind the Service kube-system/kube-dns at [`CLUSTER_DNS_IP`].
fn cluster_dns() -> Result<Vec<kube::api::DynamicObject>, Error> {
    let corefile = format!(
        ".:53 {{\n    errors\n    ready :8181\n    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n        pods insecure\n        fallthrough in-addr.arpa ip6.arpa\n    }}\n    cache 30\n}}\n"
    );
    let labels = serde_json::json!({"k8s-app": "kube-dns"});
    let objects = serde_json::json!([
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "coredns", "namespace": "kube-system"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "system:coredns"},
         "rules": [
            {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
             "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
             "verbs": ["list", "watch"]}
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "system:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "system:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}]},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "coredns", "namespace": "kube-system"},
         "data": {"Corefile": corefile}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "coredns", "namespace": "kube-system", "labels": labels},
         "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": "coredns",
                    "priorityClassName": "system-cluster-critical",
                    "dnsPolicy": "Default",
                    "containers": [{
                        "name": "coredns",
                        "image": assets::COREDNS_IMAGE,
                        "imagePullPolicy": "Never",
                        "args": ["-conf", "/etc/coredns/Corefile"],
                        "ports": [
                            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                            {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"}
                        ],
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}},
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
                        },
                        "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns",
                                          "readOnly": true}]
                    }],
                    "volumes": [{"name": "config", "configMap": {"name": "coredns"}}]
                }
            }
         }},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
         "spec": {
            "selector": labels,
            "clusterIP": CLUSTER_DNS_IP.to_string(),
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}
            ]
         }}
    ]);
    serde_json::from_value(objects)
        .map_err(|e| Error::Node(format!("the cluster DNS objects do not parse: {e}")))
}

fn containerd_toml(dir: &Path, socket: &Path, cni_conf_dir: &Path) -> String {
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"

[grpc]
  address = "{socket}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # runc cannot lower a process's oom_score_adj without CAP_SYS_RESOURCE, which the test
  # machine's root lacks; every sandbox would fail to start.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni}"
"#,
        root = dir.join("containerd").display(),
        state = Path::new(RUN_DIR).join("containerd").display(),
        socket = socket.display(),
        cni = cni_conf_dir.display(),
    )
}

fn cni_conflist(ipam_dir: &Path) -> String {
    serde_json::json!({
        "cniVersion": "0.4.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": POD_BRIDGE,
                "isGateway": true,
                // Pods reach only this machine: nothing to masquerade.
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "dataDir": ipam_dir,
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "routes": [{"dst": "0.0.0.0/0"}]
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
    .to_string()
}

fn kubelet_yaml(ca: &Path) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The test machines have the cgroup v1 hierarchy, which kubelets refuse unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
address: "{NODE_IP}"
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
# The API server calls it with a client certificate of the cluster's CA; everyone else is
# authenticated and authorized by the API server.
authentication:
  anonymous:
    enabled: false
  x509:
    clientCAFile: "{ca}"
  webhook:
    enabled: true
authorization:
  mode: Webhook
# A shared disk may be fuller than the defaults like; a test node evicts nothing for it.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: /etc/resolv.conf
clusterDNS: ["{CLUSTER_DNS_IP}"]
clusterDomain: {CLUSTER_DOMAIN}
"#,
        ca = ca.display()
    )
}

fn start_containerd(files: &NodeFiles) -> Result<Guarded, Error> {
    let mut cmd = Command::new("containerd");
    cmd.arg("--config").arg(&files.containerd_config);
    let mut process = spawn_logged("containerd", cmd, &log_path("containerd"))?;
    let started = Instant::now();
    let socket = containerd_socket();
    while !socket.exists() {
        if let Some(status) = process.exited() {
            return Err(Error::Node(format!(
                "containerd exited ({status}); its log: {}",
                log_path("containerd").display()
            )));
        }
        if started.elapsed() > Duration::from_secs(30) {
            return Err(Error::Node(format!(
                "containerd did not open {} within 30s; its log: {}",
                socket.display(),
                log_path("containerd").display()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(process)
}

fn start_component(name: &'static str, binary: &Path, args: &[String]) -> Result<Guarded, Error> {
    let mut cmd = Command::new(binary);
    cmd.args(args);
    spawn_logged(name, cmd, &log_path(name))
}

/// Where the node's containerd serves CRI and its own API.
fn containerd_socket() -> PathBuf {
    Path::new(RUN_DIR).join("containerd.sock")
}

/// `ctr images <args>` against the node's containerd, in the kubelet's namespace.
fn ctr_images(args: &[&str]) -> Result<(), Error> {
    let address = containerd_socket().display().to_string();
    let mut all = vec!["--address", &address, "--namespace", "k8s.io", "images"];
    all.extend_from_slice(args);
    run("ctr", &all).map(|_| ())
}

fn import_images(archives: &[PathBuf]) -> Result<(), Error> {
    for archive in archives {
        ctr_images(&["import", "--no-unpack", &archive.display().to_string()])?;
    }
    Ok(())
}

/// Removes everything a node makes: its processes and their containers, mounts, network
/// devices and namespaces, iptables rules, cgroups, files, and the kernel settings it
/// changed. Refused while a node is up (its process holds the lock).
pub fn down() -> Result<(), Error> {
    let _lock = take_lock("a node is up; stop the process that started it (Ctrl-C) instead")?;
    down_unlocked()
}

/// The machine's node lock, or `Error::Node(held)` when another process holds it.
/// How long [`Node::up`] waits for a node another process holds (test binaries run side
/// by side, and each real-node test takes its turn).
const LOCK_WAIT: Duration = Duration::from_secs(30 * 60);

/// The node's lock, waiting while another process holds it (saying so once), at most
/// [`LOCK_WAIT`]; then the error says who to stop.
async fn wait_for_lock(held: &str) -> Result<File, Error> {
    let lock =
        File::create(LOCK_PATH).map_err(|e| Error::io(format!("creating {LOCK_PATH}"), e))?;
    let start = Instant::now();
    let mut said = false;
    while lock.try_lock().is_err() {
        if start.elapsed() >= LOCK_WAIT {
            return Err(Error::Node(format!(
                "{held} (its process has held {LOCK_PATH} for {} minutes)",
                LOCK_WAIT.as_secs() / 60
            )));
        }
        if !said {
            eprintln!("waiting for the node another process holds ({LOCK_PATH}) to go down");
            said = true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(lock)
}

fn take_lock(held: &str) -> Result<File, Error> {
    let lock =
        File::create(LOCK_PATH).map_err(|e| Error::io(format!("creating {LOCK_PATH}"), e))?;
    if lock.try_lock().is_err() {
        return Err(Error::Node(format!(
            "{held} (its process holds {LOCK_PATH})"
        )));
    }
    Ok(lock)
}

fn down_unlocked() -> Result<(), Error> {
    let mut problems = Vec::new();
    kill_node_processes(&mut problems);
    if let Some(proxy) = assets::cached_node_binary("kube-proxy")
        && let Err(e) = run(&proxy.display().to_string(), &["--cleanup", "--v=0"])
    {
        problems.push(e.to_string());
    }
    unmount_under(&[KUBELET_DIR, NODE_DIR, RUN_DIR, NETNS_DIR], &mut problems);
    if let Ok(entries) = fs::read_dir(NETNS_DIR) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with("cni-") {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
    for device in [POD_BRIDGE, NODE_DEVICE] {
        if Path::new("/sys/class/net").join(device).exists()
            && let Err(e) = run("ip", &["link", "del", device])
        {
            problems.push(e.to_string());
        }
    }
    if service_route()
        && let Err(e) = run(
            "ip",
            &["route", "del", "blackhole", crate::NODE_SERVICE_RANGE],
        )
    {
        problems.push(e.to_string());
    }
    remove_chains(&mut problems);
    remove_cgroups(&mut problems);
    restore_sysctls(&mut problems);
    for dir in [KUBELET_DIR, NODE_DIR, RUN_DIR]
        .into_iter()
        .chain(POD_LOG_DIRS)
    {
        if let Err(e) = fs::remove_dir_all(dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            problems.push(format!("removing {dir}: {e}"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::Node(problems.join("; ")))
    }
}

/// Kills the node's processes, found by the node's directories on their command line
/// (the components, containerd and its shims) and by the kubelet's cgroups (containers).
fn kill_node_processes(problems: &mut Vec<String>) {
    let started = Instant::now();
    loop {
        let pids = node_pids();
        if pids.is_empty() {
            return;
        }
        for pid in &pids {
            // SAFETY: kill(2) with a pid read from /proc; a pid reused since is at worst
            // another of the node's processes, found the same way.
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(*pid as libc::pid_t, libc::SIGKILL);
            }
        }
        if started.elapsed() > Duration::from_secs(20) {
            problems.push(format!("processes still alive after SIGKILL: {pids:?}"));
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn node_pids() -> Vec<u32> {
    let me = std::process::id();
    let mut pids = Vec::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return pids;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me || !crate::process::alive(pid) {
            continue;
        }
        let cmdline = fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        let cgroup = fs::read_to_string(entry.path().join("cgroup")).unwrap_or_default();
        if cmdline.contains(NODE_DIR)
            || cmdline.contains(RUN_DIR)
            || cgroup.lines().any(|l| l.contains(":/kubepods"))
        {
            pids.push(pid);
        }
    }
    pids
}

/// Unmounts every mount at or below these directories, deepest first.
fn unmount_under(roots: &[&str], problems: &mut Vec<String>) {
    let Ok(mountinfo) = fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<String> = mountinfo
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .map(unescape_mount_path)
        .filter(|p| {
            roots
                .iter()
                .any(|r| p == r || p.starts_with(&format!("{r}/")))
        })
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
    points.dedup();
    for point in points {
        let Ok(c) = std::ffi::CString::new(point.clone()) else {
            continue;
        };
        // SAFETY: umount2 with a NUL-terminated path.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINVAL) && e.raw_os_error() != Some(libc::ENOENT) {
                problems.push(format!("unmounting {point}: {e}"));
            }
        }
    }
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape_mount_path(raw: &str) -> String {
    let mut out = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let digits: String = chars.clone().take(3).collect();
            if let Ok(code) = u8::from_str_radix(&digits, 8) {
                out.push(char::from(code));
                chars.nth(2);
                continue;
            }
        }
        out.push(c);
    }
    out
}

/// The chains a node adds: CNI's plugins' (`CNI-`), and the kubelet's and kube-proxy's
/// (`KUBE-`, which `kube-proxy --cleanup` leaves when the kubelet made them), with every
/// rule that jumps to them.
fn remove_chains(problems: &mut Vec<String>) {
    let ours = |chain: &str| chain.starts_with("CNI-") || chain.starts_with("KUBE-");
    for program in ["iptables", "ip6tables"] {
        for table in ["nat", "filter", "mangle"] {
            let Ok(rules) = run(program, &["-t", table, "-S"]) else {
                continue;
            };
            let chains: Vec<&str> = rules
                .lines()
                .filter_map(|r| r.strip_prefix("-N "))
                .filter(|c| ours(c))
                .collect();
            for rule in rules.lines().filter_map(|r| r.strip_prefix("-A ")) {
                let chain = rule.split_whitespace().next().unwrap_or_default();
                let jumps_to_ours = rule
                    .split_whitespace()
                    .skip_while(|w| *w != "-j" && *w != "-g")
                    .nth(1)
                    .is_some_and(ours);
                if !ours(chain) && jumps_to_ours {
                    let mut args = vec!["-t", table, "-D"];
                    args.extend(rule.split_whitespace());
                    if let Err(e) = run(program, &args) {
                        problems.push(e.to_string());
                    }
                }
            }
            for chain in &chains {
                let _ = run(program, &["-t", table, "-F", chain]);
            }
            for chain in &chains {
                if let Err(e) = run(program, &["-t", table, "-X", chain]) {
                    problems.push(e.to_string());
                }
            }
        }
    }
}

/// The kubelet's cgroups (`kubepods` and below) in every v1 controller, leaves first.
fn remove_cgroups(problems: &mut Vec<String>) {
    let Ok(controllers) = fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    for controller in controllers.flatten() {
        let root = controller.path().join("kubepods");
        if root.is_dir() {
            let mut dirs = Vec::new();
            collect_dirs(&root, &mut dirs);
            dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
            for dir in dirs {
                if let Err(e) = fs::remove_dir(&dir) {
                    problems.push(format!("removing cgroup {}: {e}", dir.display()));
                }
            }
        }
    }
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_path_buf());
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                collect_dirs(&entry.path(), out);
            }
        }
    }
}

fn restore_sysctls(problems: &mut Vec<String>) {
    let record = Path::new(NODE_DIR).join("sysctls");
    let Ok(saved) = fs::read_to_string(&record) else {
        return;
    };
    for line in saved.lines() {
        if let Some((path, value)) = line.split_once(' ')
            && let Err(e) = fs::write(path, value)
        {
            problems.push(format!("restoring {path}: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_paths_are_read_as_the_kernel_escapes_them() {
        assert_eq!(
            unescape_mount_path(r"/var/lib/kubelet/pods/a\040b"),
            "/var/lib/kubelet/pods/a b"
        );
        assert_eq!(unescape_mount_path("/run/netns/cni-1"), "/run/netns/cni-1");
    }

    #[test]
    fn the_cni_network_is_one_bridge_that_masquerades_nothing() {
        let list: serde_json::Value =
            serde_json::from_str(&cni_conflist(Path::new("/x"))).expect("JSON");
        let bridge = &list["plugins"][0];
        assert_eq!(bridge["bridge"], POD_BRIDGE);
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], POD_SUBNET);
    }
}

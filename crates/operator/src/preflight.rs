//! `simplyblock-operator preflight`: what a node and the cluster need before the operator
//! is installed, every check made and every problem reported at once.
//!
//! [`assess`] turns an [`Observation`] into one [`Finding`] per check that applies, purely;
//! [`observe`] (in `observe.rs`) reads the node's /sys and /proc, dials the image
//! registries and asks the Kubernetes API. A check the caller may not make (the API server
//! says 403) is reported as not checked, not as a problem; one that could not be made for
//! another reason is a problem, because nothing then vouches for what it guards.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

mod observe;

pub use observe::{
    NodeRoots, REGISTRY_TIMEOUT, observe, observe_cluster, observe_node, observe_registries,
};

/// The exit status when every check passed (or could not be made for lack of permission).
pub const EXIT_READY: i32 = 0;
/// The exit status when a problem was found.
pub const EXIT_PROBLEMS: i32 = 2;

/// What the chart's `deployment.profile` installs, which decides the cluster checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// A local control plane (FoundationDB, the management API) and the CSI driver.
    Standalone,
    /// A control plane elsewhere; the CSI driver here.
    Managed,
    /// The operator alone.
    Empty,
}

/// Who issues the local control plane's certificates (`controlplane.local.tls.provider`,
/// or `none` for `enableTLS: false`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsProvider {
    /// cert-manager issues them (the chart's default).
    CertManager,
    /// OpenShift's service CA issues them.
    #[value(name = "openshift")]
    OpenShift,
    /// No TLS.
    None,
}

/// Which checks to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub profile: Profile,
    pub tls_provider: TlsProvider,
    /// Check the machine this runs on.
    pub node: bool,
    /// Check the cluster through the Kubernetes API.
    pub cluster: bool,
    /// The registries the images come from, each to be reached from the node; none: the
    /// check does not apply.
    pub registries: Vec<Registry>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            profile: Profile::Standalone,
            tls_provider: TlsProvider::CertManager,
            node: true,
            cluster: true,
            registries: Vec::new(),
        }
    }
}

impl Options {
    /// The checks that apply, in the order they are reported.
    pub fn checks(&self) -> Vec<Check> {
        let standalone = self.profile == Profile::Standalone;
        let node = [
            Check::NvmeTcp,
            Check::NvmeFabrics,
            Check::Hugepages,
            Check::Kernel,
        ];
        let cluster = [
            (Check::KubernetesApi, true),
            (
                Check::CertManager,
                standalone && self.tls_provider == TlsProvider::CertManager,
            ),
            (Check::FoundationDb, standalone),
            (Check::SnapshotCrds, true),
            (Check::SnapshotController, true),
            (Check::DefaultStorageClass, standalone),
        ];
        let mut checks = Vec::new();
        if self.node {
            checks.extend(node);
            if !self.registries.is_empty() {
                checks.push(Check::Registries);
            }
        }
        if self.cluster {
            checks.extend(cluster.iter().filter(|(_, on)| *on).map(|(c, _)| *c));
        }
        checks
    }
}

/// One prerequisite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Check {
    NvmeTcp,
    NvmeFabrics,
    Hugepages,
    Kernel,
    Registries,
    KubernetesApi,
    CertManager,
    #[serde(rename = "foundationdb")]
    FoundationDb,
    SnapshotCrds,
    SnapshotController,
    DefaultStorageClass,
}

impl Check {
    /// The name a person reads in the report.
    pub fn name(self) -> &'static str {
        match self {
            Check::NvmeTcp => "nvme-tcp module",
            Check::NvmeFabrics => "nvme-fabrics module",
            Check::Hugepages => "hugepages",
            Check::Kernel => "kernel",
            Check::Registries => "registries reachable",
            Check::KubernetesApi => "Kubernetes API",
            Check::CertManager => "cert-manager",
            Check::FoundationDb => "FoundationDB CRDs",
            Check::SnapshotCrds => "snapshot CRDs",
            Check::SnapshotController => "snapshot controller",
            Check::DefaultStorageClass => "default StorageClass",
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why something could not be looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unseen {
    /// The caller may not look: not a problem of the installation.
    Forbidden(String),
    /// Looking failed otherwise (unreadable, unreachable, an error answer).
    Failed(String),
}

/// What was looked at, or why it could not be.
pub type Seen<T> = Result<T, Unseen>;

/// What the node shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeObservation {
    /// `/sys/module/nvme_tcp` exists: the module is loaded or built in.
    pub nvme_tcp: Seen<bool>,
    /// `/sys/module/nvme_fabrics` exists.
    pub nvme_fabrics: Seen<bool>,
    pub hugepages: Seen<Hugepages>,
    /// `/proc/sys/kernel/osrelease`, trimmed.
    pub kernel_release: Seen<String>,
}

/// The hugepages of `/proc/meminfo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hugepages {
    /// `HugePages_Total`: pages reserved (0 when the kernel shows no such line).
    pub total: u64,
    /// `Hugepagesize`, in bytes, when shown.
    pub page_size: Option<u64>,
}

impl Hugepages {
    /// The hugepages `/proc/meminfo` shows.
    pub fn from_meminfo(text: &str) -> Self {
        let fields = simplyblock_discovery::parse::meminfo(text);
        Hugepages {
            total: fields.get("HugePages_Total").copied().unwrap_or(0),
            page_size: fields.get("Hugepagesize").copied(),
        }
    }
}

/// An image registry as the kubelet dials it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registry {
    /// The host as listed (`docker.io`), which is what a person recognises.
    pub listed: String,
    /// The host dialled: the listed one, except Docker Hub's (see [`DOCKER_HUB_REGISTRY`]).
    pub host: String,
    pub port: u16,
}

/// The port a registry is dialled at when its entry names none: registries speak HTTPS.
pub const REGISTRY_PORT: u16 = 443;

/// The names an image reference gives Docker Hub.
pub const DOCKER_HUB_NAMES: [&str; 2] = ["docker.io", "index.docker.io"];
/// The host the container runtimes pull Docker Hub's images from: `docker.io` itself serves
/// no registry API, so reaching it would vouch for nothing.
pub const DOCKER_HUB_REGISTRY: &str = "registry-1.docker.io";

impl Registry {
    /// The registry of an `allowedRegistries` entry, `host[:port][/path]`; `None` for `*`,
    /// which allows any registry and so names none to reach.
    pub fn parse(entry: &str) -> Result<Option<Registry>, String> {
        let entry = entry.trim();
        if entry == "*" {
            return Ok(None);
        }
        // The path picks images within the registry; the connection is to its host.
        let authority = entry.split('/').next().unwrap_or_default();
        let (host, port) = match authority.strip_prefix('[') {
            // An IPv6 address is bracketed, for its colons are not a port's.
            Some(rest) => {
                let (host, after) = rest
                    .split_once(']')
                    .ok_or_else(|| format!("{entry:?}: no ] closes the IPv6 address"))?;
                match after {
                    "" => (host, None),
                    _ => match after.strip_prefix(':') {
                        Some(port) => (host, Some(port)),
                        None => return Err(format!("{entry:?}: {after:?} follows the address")),
                    },
                }
            }
            None => match authority.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            },
        };
        if host.is_empty() {
            return Err(format!("{entry:?} names no host"));
        }
        let port = match port {
            None => REGISTRY_PORT,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("{entry:?}: {p:?} is not a port"))?,
        };
        let listed = host.to_ascii_lowercase();
        let host = if DOCKER_HUB_NAMES.contains(&listed.as_str()) {
            DOCKER_HUB_REGISTRY.to_string()
        } else {
            listed.clone()
        };
        Ok(Some(Registry { listed, host, port }))
    }

    /// `host:port` as dialled.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.listed == self.host {
            f.write_str(&self.address())
        } else {
            write!(f, "{} ({})", self.listed, self.address())
        }
    }
}

/// The distinct registries of the chart's `allowedRegistries` entries, in their order:
/// entries that differ only in their path share a host, dialled once. Every entry that is
/// not one is named in the error.
pub fn registries<S: AsRef<str>>(entries: &[S]) -> Result<Vec<Registry>, String> {
    let mut found: Vec<Registry> = Vec::new();
    let mut bad = Vec::new();
    for entry in entries {
        match Registry::parse(entry.as_ref()) {
            Ok(Some(r)) => {
                if !found.iter().any(|f| f.host == r.host && f.port == r.port) {
                    found.push(r);
                }
            }
            Ok(None) => {}
            Err(why) => bad.push(why),
        }
    }
    if bad.is_empty() {
        Ok(found)
    } else {
        Err(format!(
            "not a registry (host[:port][/path]): {}",
            bad.join("; ")
        ))
    }
}

/// Whether a registry took a TCP connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reach {
    pub registry: Registry,
    /// `Err`: why no connection opened (refused, no such host, no answer in time).
    pub reached: Result<(), String>,
}

/// The API groups the cluster checks look for.
pub const CERT_MANAGER: ApiNeed = ApiNeed {
    group: "cert-manager.io",
    version: "v1",
    kinds: &["Certificate", "Issuer"],
};
pub const FOUNDATIONDB: ApiNeed = ApiNeed {
    group: "apps.foundationdb.org",
    version: "v1beta2",
    kinds: &["FoundationDBCluster"],
};
pub const SNAPSHOTS: ApiNeed = ApiNeed {
    group: "snapshot.storage.k8s.io",
    version: "v1",
    kinds: &[
        "VolumeSnapshot",
        "VolumeSnapshotClass",
        "VolumeSnapshotContent",
    ],
};

/// Kinds the operator or the driver uses at one group version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiNeed {
    pub group: &'static str,
    pub version: &'static str,
    pub kinds: &'static [&'static str],
}

impl ApiNeed {
    /// The kinds of this need that `apis` does not serve at its version.
    fn missing(&self, apis: &ServedApis) -> Vec<&'static str> {
        let served = apis.get(self.group).and_then(|g| g.get(self.version));
        self.kinds
            .iter()
            .copied()
            .filter(|k| served.is_none_or(|s| !s.contains(*k)))
            .collect()
    }

    /// The versions of the group served, other than the one needed.
    fn other_versions<'a>(&self, apis: &'a ServedApis) -> Vec<&'a str> {
        apis.get(self.group)
            .map(|g| {
                g.keys()
                    .map(String::as_str)
                    .filter(|v| *v != self.version)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn describe(&self, kinds: &[&str]) -> String {
        format!("{}/{} {}", self.group, self.version, kinds.join(", "))
    }
}

/// Group → version → the kinds served there, for the groups looked for.
pub type ServedApis = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// A workload that may be the snapshot controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// `Deployment` or `Pod`.
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    /// A Deployment with an available replica; a Pod in phase Running.
    pub running: bool,
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Whether a workload of this name is taken for the snapshot controller: the
/// external-snapshotter's manifests and the distributions' add-ons all name it so.
pub fn is_snapshot_controller(name: &str) -> bool {
    name.contains("snapshot-controller")
}

/// A StorageClass as the default-class check sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageClass {
    pub name: String,
    pub provisioner: String,
    /// Annotated `storageclass.kubernetes.io/is-default-class: "true"` (or the beta key).
    pub default: bool,
}

/// What the cluster shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterObservation {
    /// The API server's version (`/version`'s gitVersion).
    pub version: String,
    pub apis: Seen<ServedApis>,
    /// Deployments whose name [`is_snapshot_controller`], in every namespace.
    pub snapshot_deployments: Seen<Vec<Workload>>,
    /// Running Pods whose name [`is_snapshot_controller`], in every namespace (a
    /// controller run by a DaemonSet, a StatefulSet or as a static pod).
    pub snapshot_pods: Seen<Vec<Workload>>,
    pub storage_classes: Seen<Vec<StorageClass>>,
}

/// Everything looked at. `None` where that part was not looked at (skipped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    pub node: Option<NodeObservation>,
    /// `Err`: the Kubernetes API could not be reached or used, and why.
    pub cluster: Option<Result<ClusterObservation, String>>,
    /// Each registry of [`Options::registries`], dialled from the node.
    pub registries: Option<Vec<Reach>>,
}

/// A missing prerequisite, in the three parts a person acts on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// What is missing.
    pub missing: String,
    /// Why that matters.
    pub why: String,
    /// What to do.
    pub fix: String,
}

/// How one check came out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Outcome {
    Ok { detail: String },
    Fail(Problem),
    NotChecked { why: String },
}

/// One check and how it came out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub check: Check,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Every check that applies, each once, in [`Options::checks`]' order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    pub findings: Vec<Finding>,
}

impl Report {
    /// How many checks found a problem.
    pub fn problems(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| matches!(f.outcome, Outcome::Fail(_)))
            .count()
    }

    /// How many checks could not be made for lack of permission.
    pub fn not_checked(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| matches!(f.outcome, Outcome::NotChecked { .. }))
            .count()
    }

    /// How `check` came out, if it applied.
    pub fn outcome(&self, check: Check) -> Option<&Outcome> {
        self.findings
            .iter()
            .find(|f| f.check == check)
            .map(|f| &f.outcome)
    }

    /// The process exit status: [`EXIT_READY`] or [`EXIT_PROBLEMS`].
    pub fn exit_code(&self) -> i32 {
        if self.problems() == 0 {
            EXIT_READY
        } else {
            EXIT_PROBLEMS
        }
    }

    /// The report as JSON: the findings and the count of problems.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "findings": self.findings,
            "problems": self.problems(),
            "notChecked": self.not_checked(),
        })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for finding in &self.findings {
            let check = finding.check;
            match &finding.outcome {
                Outcome::Ok { detail } => writeln!(f, "ok   {check}: {detail}")?,
                Outcome::Fail(p) => {
                    writeln!(f, "FAIL {check}: {}; {}; {}", p.missing, p.why, p.fix)?
                }
                Outcome::NotChecked { why } => writeln!(f, "skip {check}: not checked: {why}")?,
            }
        }
        write!(f, "{} problem(s) found", self.problems())?;
        match self.not_checked() {
            0 => writeln!(f),
            n => writeln!(f, ", {n} check(s) not made"),
        }
    }
}

/// Looks at what `options` asks for and reports on it: the node under `roots`, the cluster
/// through `client` (or `Err`: why there is no client).
pub async fn check(
    options: &Options,
    roots: &NodeRoots,
    client: Result<&kube::Client, String>,
) -> Report {
    assess(options, &observe(options, roots, client).await)
}

/// The report on what was observed. Pure.
pub fn assess(options: &Options, observed: &Observation) -> Report {
    let findings = options
        .checks()
        .into_iter()
        .map(|check| Finding {
            check,
            outcome: outcome(check, observed),
        })
        .collect();
    Report { findings }
}

fn outcome(check: Check, observed: &Observation) -> Outcome {
    let node = |judge: fn(&NodeObservation) -> Outcome| match &observed.node {
        Some(n) => judge(n),
        None => not_looked_at("the node was not looked at"),
    };
    // An unreachable API is the Kubernetes API check's problem, reported once there.
    let cluster = |judge: fn(&ClusterObservation) -> Outcome| match &observed.cluster {
        Some(Ok(c)) => judge(c),
        _ => not_looked_at("the Kubernetes API was not reached"),
    };
    match check {
        Check::NvmeTcp => node(|n| nvme_tcp(&n.nvme_tcp)),
        Check::NvmeFabrics => node(|n| nvme_fabrics(&n.nvme_fabrics)),
        Check::Hugepages => node(|n| hugepages(&n.hugepages)),
        Check::Kernel => node(|n| kernel(&n.kernel_release, &n.nvme_tcp)),
        Check::Registries => match &observed.registries {
            Some(reached) => registries_reached(reached),
            None => not_looked_at("the registries were not dialled"),
        },
        Check::KubernetesApi => kubernetes_api(observed.cluster.as_ref()),
        Check::CertManager => cluster(|c| cert_manager(&c.apis)),
        Check::FoundationDb => cluster(|c| foundationdb(&c.apis)),
        Check::SnapshotCrds => cluster(|c| snapshot_crds(&c.apis)),
        Check::SnapshotController => {
            cluster(|c| snapshot_controller(&c.snapshot_deployments, &c.snapshot_pods))
        }
        Check::DefaultStorageClass => cluster(|c| default_storage_class(&c.storage_classes)),
    }
}

fn not_looked_at(why: &str) -> Outcome {
    Outcome::NotChecked { why: why.into() }
}

fn kubernetes_api(cluster: Option<&Result<ClusterObservation, String>>) -> Outcome {
    match cluster {
        Some(Ok(c)) => Outcome::Ok {
            detail: format!("reached, version {}", c.version),
        },
        Some(Err(why)) => Outcome::Fail(Problem {
            missing: format!("not reachable: {why}"),
            why: "none of the cluster checks could be made".into(),
            fix: "run with a kubeconfig for the cluster (KUBECONFIG, ~/.kube/config) or in a pod with a ServiceAccount, or pass --skip-cluster to check the node alone".into(),
        }),
        None => not_looked_at("the cluster was not looked at"),
    }
}

/// The outcome of a look that did not happen: not checked when forbidden, a problem when
/// it failed.
fn unseen(what: &str, how: &Unseen, grant: &str) -> Outcome {
    match how {
        Unseen::Forbidden(why) => Outcome::NotChecked {
            why: format!("{why}; {grant}"),
        },
        Unseen::Failed(why) => Outcome::Fail(Problem {
            missing: format!("{what} could not be checked: {why}"),
            why: "what this check guards may be missing".into(),
            fix: "fix the access and run preflight again".into(),
        }),
    }
}

const NODE_ACCESS: &str =
    "run preflight as root on the node, or in a pod that mounts the host's /sys and /proc (--root)";

/// How to load the NVMe/TCP modules now and at every boot.
pub const LOAD_MODULES: &str = "`modprobe nvme-tcp` (it loads nvme-fabrics too) and `printf 'nvme-tcp\\nnvme-fabrics\\n' > /etc/modules-load.d/nvme-tcp.conf` so both load at boot; where modprobe finds no module, install the kernel's extra modules (Ubuntu: linux-modules-extra-$(uname -r))";

fn module(seen: &Seen<bool>, name: &str, dir: &str, why: &str) -> Outcome {
    match seen {
        Ok(true) => Outcome::Ok {
            detail: format!("present (/sys/module/{dir})"),
        },
        Ok(false) => Outcome::Fail(Problem {
            missing: format!(
                "the {name} kernel module is not loaded on this node (no /sys/module/{dir})"
            ),
            why: why.into(),
            fix: LOAD_MODULES.into(),
        }),
        Err(how) => unseen(&format!("the {name} module"), how, NODE_ACCESS),
    }
}

fn nvme_tcp(seen: &Seen<bool>) -> Outcome {
    module(
        seen,
        "nvme-tcp",
        "nvme_tcp",
        "volumes reach this node over NVMe/TCP; without the module the CSI node plugin attaches none here and no storage node runs",
    )
}

fn nvme_fabrics(seen: &Seen<bool>) -> Outcome {
    module(
        seen,
        "nvme-fabrics",
        "nvme_fabrics",
        "it provides /dev/nvme-fabrics, through which the CSI node plugin connects every volume path",
    )
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The kubelet's resource name for hugepages of `size` bytes: hugepages-2Mi, hugepages-1Gi.
fn hugepage_resource(size: u64) -> String {
    if size >= GIB && size.is_multiple_of(GIB) {
        format!("hugepages-{}Gi", size / GIB)
    } else {
        format!("hugepages-{}Mi", size / MIB)
    }
}

fn hugepages(seen: &Seen<Hugepages>) -> Outcome {
    const EXAMPLE: u64 = 8 * GIB;
    match seen {
        Ok(h) if h.total > 0 => Outcome::Ok {
            detail: match h.page_size {
                Some(size) => format!(
                    "{} pages of {} MiB reserved ({} MiB)",
                    h.total,
                    size / MIB,
                    h.total.saturating_mul(size) / MIB
                ),
                None => format!("{} pages reserved", h.total),
            },
        },
        Ok(h) => {
            let size = h.page_size.filter(|s| *s > 0).unwrap_or(2 * MIB);
            let pages = EXAMPLE.div_ceil(size);
            // Gigabyte pages are seldom free in one piece on a running machine.
            let at_boot = if size >= GIB {
                format!(
                    " (pages of 1 GiB are best reserved at boot: hugepagesz={}G hugepages={pages} on the kernel command line)",
                    size / GIB
                )
            } else {
                String::new()
            };
            Outcome::Fail(Problem {
                missing: "no hugepages are reserved on this node (HugePages_Total is 0 in /proc/meminfo)".into(),
                why: "a storage node's SPDK takes its memory from hugepages, so none can run on this machine (a node that only mounts volumes does not need them)".into(),
                fix: format!(
                    "reserve them, e.g. `sysctl -w vm.nr_hugepages={pages}` ({pages} pages of {} MiB = 8 GiB; size it to the StorageCluster's minHugePagesSize and more){at_boot}, keep it in /etc/sysctl.d/, and restart the kubelet so the node advertises {}",
                    size / MIB,
                    hugepage_resource(size)
                ),
            })
        }
        Err(how) => unseen("hugepages", how, NODE_ACCESS),
    }
}

/// `major.minor` of a kernel release such as `6.8.0-45-generic`.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// nvme-tcp entered Linux in 5.0.
const NVME_TCP_SINCE: (u32, u32) = (5, 0);

fn kernel(release: &Seen<String>, nvme_tcp: &Seen<bool>) -> Outcome {
    let release = match release {
        Ok(r) => r,
        Err(how) => return unseen("the kernel version", how, NODE_ACCESS),
    };
    match kernel_version(release) {
        Some(v) if v >= NVME_TCP_SINCE => Outcome::Ok {
            detail: format!("{release} (NVMe/TCP since 5.0)"),
        },
        // Distribution kernels (RHEL 8's 4.18) carry nvme-tcp as a backport.
        Some(_) if nvme_tcp == &Ok(true) => Outcome::Ok {
            detail: format!("{release}: older than 5.0, but nvme-tcp is present (a backport)"),
        },
        Some(_) => Outcome::Fail(Problem {
            missing: format!("kernel {release} is older than 5.0"),
            why: "the NVMe/TCP host driver (nvme-tcp) entered Linux in 5.0, and volumes reach nodes only over NVMe/TCP".into(),
            fix: "run a kernel 5.0 or newer, or a distribution kernel that backports nvme-tcp, then load nvme-tcp".into(),
        }),
        None => Outcome::Fail(Problem {
            missing: format!("the kernel release {release:?} names no version"),
            why: "NVMe/TCP needs Linux 5.0 or newer, which cannot be told from it".into(),
            fix: "check `uname -r` by hand".into(),
        }),
    }
}

fn registries_reached(reached: &[Reach]) -> Outcome {
    let open: Vec<String> = reached
        .iter()
        .filter(|r| r.reached.is_ok())
        .map(|r| r.registry.to_string())
        .collect();
    let closed: Vec<(&Registry, &str)> = reached
        .iter()
        .filter_map(|r| Some((&r.registry, r.reached.as_ref().err()?.as_str())))
        .collect();
    if closed.is_empty() {
        return Outcome::Ok {
            detail: if open.is_empty() {
                "no registry is listed".into()
            } else {
                format!("a TCP connection opens to {}", open.join(", "))
            },
        };
    }
    let why_not: Vec<String> = closed
        .iter()
        .map(|(registry, why)| format!("{registry} ({why})"))
        .collect();
    // The ones that answer tell a blocked host from a node with no egress at all.
    let also = if open.is_empty() {
        String::new()
    } else {
        format!("; {} reachable", open.join(", "))
    };
    let addresses: Vec<String> = closed.iter().map(|(r, _)| r.address()).collect();
    Outcome::Fail(Problem {
        missing: format!(
            "no TCP connection from this node to {}{also}",
            why_not.join(", ")
        ),
        why: "the kubelet on this node pulls the images of the operator, the CSI driver, the control plane and the storage nodes from these registries; an image it cannot pull keeps its pod in ImagePullBackOff".into(),
        fix: format!(
            "open the nodes' egress to {}, or mirror the images to a registry the nodes reach and list it in the chart value allowedRegistries (with the images set to the mirror's copies); where the container runtime pulls through an HTTP proxy, no direct connection is needed and this finding does not apply",
            addresses.join(", ")
        ),
    })
}

const DISCOVERY_ACCESS: &str = "check by hand with `kubectl api-resources`";

fn cert_manager(apis: &Seen<ServedApis>) -> Outcome {
    api(
        apis,
        &CERT_MANAGER,
        "cert-manager's API",
        "the standalone control plane's management API takes its TLS certificates from cert-manager; without it the installation holds at ApplyingAPI",
        "install cert-manager (https://cert-manager.io/docs/installation/), or choose another provider (controlplane.local.tls.provider OpenShift, or enableTLS false) and run preflight with that --tls-provider",
    )
}

fn foundationdb(apis: &Seen<ServedApis>) -> Outcome {
    api(
        apis,
        &FOUNDATIONDB,
        "the FoundationDB operator's API",
        "the standalone control plane keeps its state in a FoundationDB cluster that the FoundationDB operator runs; without it the installation holds at ApplyingFoundationDB",
        "install the FoundationDB operator and its CRDs (https://github.com/FoundationDB/fdb-kubernetes-operator), or use the managed profile with a control plane that runs elsewhere",
    )
}

fn snapshot_crds(apis: &Seen<ServedApis>) -> Outcome {
    api(
        apis,
        &SNAPSHOTS,
        "the volume snapshot API",
        "the CSI driver installs its snapshotter and VolumeSnapshotClass only where it is served, so volumes can be neither snapshotted nor restored from a snapshot",
        "install the external-snapshotter's CRDs: from github.com/kubernetes-csi/external-snapshotter (v8), `kubectl kustomize client/config/crd | kubectl create -f -`",
    )
}

/// Whether `need` is served, and a problem naming what is missing when not.
fn api(apis: &Seen<ServedApis>, need: &ApiNeed, what: &str, why: &str, fix: &str) -> Outcome {
    let apis = match apis {
        Ok(a) => a,
        Err(how) => return unseen(what, how, DISCOVERY_ACCESS),
    };
    let missing = need.missing(apis);
    if missing.is_empty() {
        return Outcome::Ok {
            detail: format!("{} served", need.describe(need.kinds)),
        };
    }
    let others = need.other_versions(apis);
    let elsewhere = if others.is_empty() {
        String::new()
    } else {
        format!(" ({} is served only at {})", need.group, others.join(", "))
    };
    Outcome::Fail(Problem {
        missing: format!(
            "{what} is not served: {} missing{elsewhere}",
            need.describe(&missing)
        ),
        why: why.into(),
        fix: fix.into(),
    })
}

fn snapshot_controller(deployments: &Seen<Vec<Workload>>, pods: &Seen<Vec<Workload>>) -> Outcome {
    let found: Vec<&Workload> = [deployments, pods]
        .into_iter()
        .filter_map(|s| s.as_ref().ok())
        .flatten()
        .collect();
    let running: Vec<String> = found
        .iter()
        .filter(|w| w.running)
        .map(|w| w.to_string())
        .collect();
    if !running.is_empty() {
        return Outcome::Ok {
            detail: format!("running: {}", running.join(", ")),
        };
    }
    const WHY: &str = "it binds VolumeSnapshots to their contents; without it a VolumeSnapshot of a simplyblock volume stays unready";
    const ELSEWHERE: &str = "(a provider that runs it on its control plane, e.g. GKE, shows none: there this finding does not apply)";
    if !found.is_empty() {
        let named: Vec<String> = found.iter().map(|w| w.to_string()).collect();
        return Outcome::Fail(Problem {
            missing: format!(
                "the snapshot controller is not running ({} has no ready replica)",
                named.join(", ")
            ),
            why: WHY.into(),
            fix: format!(
                "see why with `kubectl -n {} describe deployment {}` and its pods' events",
                found[0].namespace, found[0].name
            ),
        });
    }
    let unseen_looks: Vec<&Unseen> = [deployments, pods]
        .into_iter()
        .filter_map(|s| s.as_ref().err())
        .collect();
    // Absence is known only where both could be listed.
    if unseen_looks.is_empty() {
        return Outcome::Fail(Problem {
            missing: "no snapshot controller runs: no Deployment or Pod named snapshot-controller in any namespace".into(),
            why: WHY.into(),
            fix: format!(
                "install it: from github.com/kubernetes-csi/external-snapshotter (v8), `kubectl -n kube-system kustomize deploy/kubernetes/snapshot-controller | kubectl create -f -` {ELSEWHERE}"
            ),
        });
    }
    // A failed look outweighs a forbidden one: then it is a problem, not a check not made.
    let failed = unseen_looks.iter().any(|u| matches!(u, Unseen::Failed(_)));
    let reasons = unseen_looks
        .iter()
        .filter_map(|u| match u {
            Unseen::Failed(why) if failed => Some(why.as_str()),
            Unseen::Forbidden(why) if !failed => Some(why.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("; ");
    let how = if failed {
        Unseen::Failed(reasons)
    } else {
        Unseen::Forbidden(reasons)
    };
    unseen(
        "the snapshot controller",
        &how,
        "check by hand with `kubectl get deployments,pods -A | grep snapshot-controller`",
    )
}

fn default_storage_class(classes: &Seen<Vec<StorageClass>>) -> Outcome {
    let classes = match classes {
        Ok(c) => c,
        Err(how) => {
            return unseen(
                "the default StorageClass",
                how,
                "check by hand with `kubectl get storageclass`",
            );
        }
    };
    let defaults: Vec<String> = classes
        .iter()
        .filter(|c| c.default)
        .map(|c| format!("{} (provisioner {})", c.name, c.provisioner))
        .collect();
    match defaults.len() {
        1 => Outcome::Ok {
            detail: defaults[0].clone(),
        },
        // Kubernetes takes the newest of several defaults: it works, but is ambiguous.
        n if n > 1 => Outcome::Ok {
            detail: format!(
                "several are marked default, the newest is used: {}",
                defaults.join(", ")
            ),
        },
        _ => Outcome::Fail(Problem {
            missing: if classes.is_empty() {
                "there is no StorageClass at all, so none is the default".into()
            } else {
                let names: Vec<&str> = classes.iter().map(|c| c.name.as_str()).collect();
                format!(
                    "no StorageClass is marked default (there are: {})",
                    names.join(", ")
                )
            },
            why: "the FoundationDB cluster of the standalone control plane claims its volumes from the default class unless controlplane.local.foundationDB.storageClassName names one; with neither its claims stay Pending and the installation waits on FoundationDB".into(),
            fix: "mark one default: `kubectl annotate storageclass <name> storageclass.kubernetes.io/is-default-class=true`, or name a class in controlplane.local.foundationDB.storageClassName".into(),
        }),
    }
}

#[cfg(test)]
mod tests;

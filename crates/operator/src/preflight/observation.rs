//! What preflight is asked to check ([`Options`], [`Check`]) and what it saw
//! ([`Observation`]): the data between the reading half and the judging half.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

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
    pub(super) fn missing(&self, apis: &ServedApis) -> Vec<&'static str> {
        let served = apis.get(self.group).and_then(|g| g.get(self.version));
        self.kinds
            .iter()
            .copied()
            .filter(|k| served.is_none_or(|s| !s.contains(*k)))
            .collect()
    }

    /// The versions of the group served, other than the one needed.
    pub(super) fn other_versions<'a>(&self, apis: &'a ServedApis) -> Vec<&'a str> {
        apis.get(self.group)
            .map(|g| {
                g.keys()
                    .map(String::as_str)
                    .filter(|v| *v != self.version)
                    .collect()
            })
            .unwrap_or_default()
    }

    pub(super) fn describe(&self, kinds: &[&str]) -> String {
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

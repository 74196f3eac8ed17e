//! The reading half of preflight: the node's /sys and /proc, the image registries and the
//! Kubernetes API, read into an [`Observation`]. It decides nothing; [`super::assess::assess`] does.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::StorageClass as KubeStorageClass;
use kube::api::{Api, ListParams};
use kube::discovery::Discovery;

use super::observation::{
    CERT_MANAGER, ClusterObservation, FOUNDATIONDB, Hugepages, NodeObservation, Observation,
    Options, Reach, Registry, SNAPSHOTS, Seen, ServedApis, StorageClass, Unseen, Workload,
    is_snapshot_controller,
};

/// Where the node's /sys and /proc are: the machine's own, or the host's mounted into a
/// pod, or a test's directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRoots {
    pub sys: PathBuf,
    pub proc: PathBuf,
}

impl NodeRoots {
    /// `sys` and `proc` under `root` (`/` on the node itself).
    pub fn under(root: &Path) -> Self {
        Self {
            sys: root.join("sys"),
            proc: root.join("proc"),
        }
    }
}

impl Default for NodeRoots {
    fn default() -> Self {
        Self::under(Path::new("/"))
    }
}

/// How long a registry has to take a connection. A reachable one answers in well under a
/// second; one behind a firewall that drops packets never does, and the whole of preflight
/// must end within the chart's hook deadline.
pub const REGISTRY_TIMEOUT: Duration = Duration::from_secs(3);

/// What `options` asks to look at. `client` is the Kubernetes API, or why there is none.
pub async fn observe(
    options: &Options,
    roots: &NodeRoots,
    client: Result<&kube::Client, String>,
) -> Observation {
    let cluster = async {
        match (options.cluster, client) {
            (false, _) => None,
            (true, Ok(client)) => Some(observe_cluster(client).await),
            (true, Err(why)) => Some(Err(why)),
        }
    };
    // Dialling is a node check: the connection that counts is the one from this node.
    let registries = async {
        if options.node && !options.registries.is_empty() {
            Some(observe_registries(&options.registries, REGISTRY_TIMEOUT).await)
        } else {
            None
        }
    };
    let (cluster, registries) = futures::join!(cluster, registries);
    Observation {
        node: options.node.then(|| observe_node(roots)),
        cluster,
        registries,
    }
}

/// Whether each registry takes a TCP connection (its name resolved) within `timeout`, all
/// dialled at once so that unreachable ones cost one timeout, not one each.
pub async fn observe_registries(registries: &[Registry], timeout: Duration) -> Vec<Reach> {
    futures::future::join_all(registries.iter().map(|registry| async move {
        let connect = tokio::net::TcpStream::connect((registry.host.as_str(), registry.port));
        let reached = match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no connection within {timeout:?}")),
        };
        Reach {
            registry: registry.clone(),
            reached,
        }
    }))
    .await
}

/// The node's modules, hugepages and kernel release.
pub fn observe_node(roots: &NodeRoots) -> NodeObservation {
    // A module shows under /sys/module when loaded, and also when built into the kernel.
    NodeObservation {
        nvme_tcp: exists(&roots.sys.join("module/nvme_tcp")),
        nvme_fabrics: exists(&roots.sys.join("module/nvme_fabrics")),
        hugepages: read(&roots.proc.join("meminfo")).map(|text| Hugepages::from_meminfo(&text)),
        kernel_release: read(&roots.proc.join("sys/kernel/osrelease"))
            .map(|text| text.trim().to_string()),
    }
}

fn exists(path: &Path) -> Seen<bool> {
    match std::fs::metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_unseen(path, e)),
    }
}

fn read(path: &Path) -> Seen<String> {
    std::fs::read_to_string(path).map_err(|e| io_unseen(path, e))
}

fn io_unseen(path: &Path, e: std::io::Error) -> Unseen {
    let why = format!("reading {}: {e}", path.display());
    if e.kind() == ErrorKind::PermissionDenied {
        Unseen::Forbidden(why)
    } else {
        Unseen::Failed(why)
    }
}

/// The API groups, the snapshot controller and the StorageClasses; `Err` when the API
/// server does not answer at all.
pub async fn observe_cluster(client: &kube::Client) -> Result<ClusterObservation, String> {
    let version = client
        .apiserver_version()
        .await
        .map_err(|e| e.to_string())?;
    let (apis, snapshot_deployments, snapshot_pods, storage_classes) = futures::join!(
        served_apis(client),
        snapshot_deployments(client),
        snapshot_pods(client),
        storage_classes(client),
    );
    Ok(ClusterObservation {
        version: version.git_version,
        apis,
        snapshot_deployments,
        snapshot_pods,
        storage_classes,
    })
}

fn kube_unseen(what: &str, e: kube::Error) -> Unseen {
    match &e {
        kube::Error::Api(status) if status.code == 403 => Unseen::Forbidden(format!(
            "{what} is forbidden to this account ({})",
            status.message
        )),
        _ => Unseen::Failed(format!("{what}: {e}")),
    }
}

/// The kinds served at each version of the groups the checks look for.
async fn served_apis(client: &kube::Client) -> Seen<ServedApis> {
    let groups = [CERT_MANAGER.group, FOUNDATIONDB.group, SNAPSHOTS.group];
    let discovery = Discovery::new(client.clone())
        .filter(&groups)
        .run()
        .await
        .map_err(|e| kube_unseen("API discovery", e))?;
    let mut served = ServedApis::new();
    for group in discovery.groups() {
        let versions = served.entry(group.name().to_string()).or_default();
        for version in group.versions() {
            let kinds = group
                .versioned_resources(version)
                .into_iter()
                .map(|(resource, _)| resource.kind)
                .collect();
            versions.insert(version.to_string(), kinds);
        }
    }
    Ok(served)
}

async fn snapshot_deployments(client: &kube::Client) -> Seen<Vec<Workload>> {
    let listed = Api::<Deployment>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| kube_unseen("listing Deployments in all namespaces", e))?;
    Ok(listed
        .items
        .into_iter()
        .filter_map(|d| {
            let name = d.metadata.name?;
            is_snapshot_controller(&name).then(|| Workload {
                kind: "Deployment",
                namespace: d.metadata.namespace.unwrap_or_default(),
                name,
                running: d
                    .status
                    .and_then(|s| s.available_replicas)
                    .is_some_and(|n| n > 0),
            })
        })
        .collect())
}

async fn snapshot_pods(client: &kube::Client) -> Seen<Vec<Workload>> {
    // Only names are needed and only running pods count: metadata of the running ones.
    let listed = Api::<Pod>::all(client.clone())
        .list_metadata(&ListParams::default().fields("status.phase=Running"))
        .await
        .map_err(|e| kube_unseen("listing Pods in all namespaces", e))?;
    Ok(listed
        .items
        .into_iter()
        .filter_map(|p| {
            let name = p.metadata.name?;
            is_snapshot_controller(&name).then(|| Workload {
                kind: "Pod",
                namespace: p.metadata.namespace.unwrap_or_default(),
                name,
                running: true,
            })
        })
        .collect())
}

/// The annotations that mark the default StorageClass (the beta one is still honoured).
const DEFAULT_CLASS_ANNOTATIONS: [&str; 2] = [
    crate::pool::class::DEFAULT_CLASS_ANNOTATION,
    "storageclass.beta.kubernetes.io/is-default-class",
];

async fn storage_classes(client: &kube::Client) -> Seen<Vec<StorageClass>> {
    let listed = Api::<KubeStorageClass>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| kube_unseen("listing StorageClasses", e))?;
    Ok(listed
        .items
        .into_iter()
        .map(|c| {
            let annotations = c.metadata.annotations.unwrap_or_default();
            StorageClass {
                name: c.metadata.name.unwrap_or_default(),
                provisioner: c.provisioner,
                default: DEFAULT_CLASS_ANNOTATIONS
                    .iter()
                    .any(|key| annotations.get(*key).is_some_and(|v| v == "true")),
            }
        })
        .collect())
}

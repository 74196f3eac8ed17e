//! The names a local control plane's objects go by: the manifests write them, the
//! controller reads their state back by them, the operations restart them.

pub use simplyblock_api::control_plane::SINGLETON_NAME;

/// The management API: its Deployment, Service and ServiceAccount, and its component.
pub const API: &str = "simplyblock-webappapi";
/// The port the management API serves on.
pub const API_PORT: u16 = 5000;
/// The management API's configuration (its environment).
pub const API_CONFIG: &str = "simplyblock-webappapi-config";
/// The FoundationDBCluster, and its component.
pub const FDB_CLUSTER: &str = "simplyblock-fdb-cluster";
/// The ConfigMap the FoundationDB operator writes the cluster file into (`cluster-file`).
pub const FDB_CLUSTER_FILE_CONFIG: &str = "simplyblock-fdb-cluster-config";
/// The object store: its StatefulSet and Service, and its component.
pub const OBJECT_STORE: &str = "simplyblock-minio";
/// The object store's root credentials (`rootUser`, `rootPassword`), made once.
pub const OBJECT_STORE_CREDENTIALS: &str = "simplyblock-minio-credentials";
/// The management API's serving certificate and key (and `ca.crt`).
pub const API_TLS_SECRET: &str = "simplyblock-webappapi-tls";
/// What the management API trusts (`ca.crt`): its own CA and every storage-node CA, so it
/// verifies the storage nodes it calls and the client certificates they present.
pub const API_TRUST_SECRET: &str = "simplyblock-webappapi-trust";
/// The operator's client certificate for a management API that requires one.
pub const CLIENT_TLS_SECRET: &str = "simplyblock-webappapi-client-tls";
/// The client certificate's cert-manager Certificate.
pub const CLIENT_CERTIFICATE: &str = "simplyblock-webappapi-client";
/// The CSI driver's client certificate for a management API that requires one: the
/// SimplyblockDriver mounts it into its plugins.
pub const CSI_CLIENT_TLS_SECRET: &str = "simplyblock-csi-client-tls";
/// The CSI driver's client certificate's cert-manager Certificate.
pub const CSI_CLIENT_CERTIFICATE: &str = "simplyblock-csi-client";
/// The self-signed cert-manager Issuer that signs the control plane's CA.
pub const SELF_SIGNED_ISSUER: &str = "simplyblock-selfsigned";
/// The control plane's CA: its Certificate, its Secret and the Issuer it backs.
pub const CA: &str = "simplyblock-ca";
/// The ConfigMap OpenShift injects its service CA into (`service-ca.crt`).
pub const SERVICE_CA_CONFIG_MAP: &str = "simplyblock-service-ca";

/// The FoundationDB version the cluster runs.
pub const FOUNDATIONDB_VERSION: &str = "7.3.63";
/// The object store's image.
pub const OBJECT_STORE_IMAGE: &str = "quay.io/minio/minio:RELEASE.2025-04-22T22-12-26Z";

/// FoundationDB's Prometheus exporter's image.
pub const FDB_EXPORTER_IMAGE: &str = "aikoven/foundationdb-exporter:3.1.0";

/// The administration pods (`sbctl` at hand, with the cluster file and the TLS material):
/// a Deployment, and its component.
pub const ADMIN_CONTROL: &str = "simplyblock-admin-control";
/// The task runners (node add, restart, migrations, backups, ...): a Deployment of one
/// container per runner, and its component.
pub const TASKS: &str = "simplyblock-tasks";
/// The monitors and collectors (node, device, volume, capacity, health): a Deployment of one
/// container per monitor, and its component.
pub const MONITORING: &str = "simplyblock-monitoring";
/// FoundationDB's Prometheus exporter: its Deployment and Service, and its component.
pub const FDB_EXPORTER: &str = "simplyblock-fdb-exporter";
/// The Role of the control plane's ServiceAccount ([`API`]) and its binding.
pub const CONTROL_ROLE: &str = "simplyblock-control";

/// Every workload the controller reports in `status.components`, with whether the
/// control plane is unavailable when it has no ready replica. The FoundationDB operator
/// (`simplyblock-fdb-controller-manager` in the reference) is a prerequisite installed
/// beside the chart, not a component (see docs/INSTALL.md).
pub const COMPONENTS: [(&str, bool); 7] = [
    (API, true),
    (FDB_CLUSTER, true),
    (OBJECT_STORE, false),
    (ADMIN_CONTROL, false),
    (TASKS, false),
    (MONITORING, false),
    (FDB_EXPORTER, false),
];

/// The components that run as Deployments (the object store is a StatefulSet, the
/// FoundationDB cluster the FoundationDB operator's).
pub const DEPLOYMENTS: [&str; 5] = [API, ADMIN_CONTROL, TASKS, MONITORING, FDB_EXPORTER];

/// Whether the control plane is unavailable when `component` has no ready replica.
pub fn essential(component: &str) -> bool {
    COMPONENTS
        .iter()
        .any(|(name, essential)| *name == component && *essential)
}

/// The management API's in-cluster URL: what `status.endpoint` says of a local control
/// plane.
pub fn api_endpoint(namespace: &str, tls: bool) -> String {
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://{API}.{namespace}.svc:{API_PORT}")
}

/// The DNS names the management API's serving certificate holds.
pub fn api_dns_names(namespace: &str) -> Vec<String> {
    vec![
        API.to_owned(),
        format!("{API}.{namespace}"),
        format!("{API}.{namespace}.svc"),
        format!("{API}.{namespace}.svc.cluster.local"),
    ]
}

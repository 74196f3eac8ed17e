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

/// Every workload the controller reports in `status.components`, with whether the
/// control plane is unavailable when it has no ready replica.
pub const COMPONENTS: [(&str, bool); 3] = [(API, true), (FDB_CLUSTER, true), (OBJECT_STORE, false)];

/// Whether the control plane is unavailable when `component` has no ready replica. The
/// reference's other components (the FoundationDB operator, tasks, monitoring, the
/// exporter, admin control) are not installed here; they would all be non-essential.
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

//! The `storage.simplyblock.io` API, version v1alpha2: the custom resource types, their
//! CEL rules and defaults, and the step graphs their status records; and the vocabulary
//! the operator, the CSI driver and discovery share: the keys written on objects
//! ([`keys`]), how sizes are read ([`quantity`]), and the CSI secret's format
//! ([`csi_secret`]).
//!
//! Pure data: no I/O and no runtime. Field doc comments become the CRD descriptions, which
//! is what `kubectl explain` prints.

// kube's derive takes one `printcolumn(...)` per column, which this lint reads as repeats.
#![allow(clippy::duplicated_attributes)]

pub mod address;
pub mod cluster_deployment_config;
pub mod common;
pub mod conditions;
pub mod control_plane;
pub mod control_plane_ops;
pub mod csi_addons;
pub mod csi_secret;
pub mod keys;
pub mod names;
pub mod operator_ops;
pub mod persistent_volume_ops;
pub mod quantity;
pub mod simplyblock_driver;
pub mod storage_backup;
pub mod storage_backup_ops;
pub mod storage_backup_policy;
pub mod storage_cluster;
pub mod storage_cluster_ops;
pub mod storage_device;
pub mod storage_device_ops;
pub mod storage_node;
pub mod storage_node_ops;
pub mod storage_pool;
pub mod storage_pool_ops;
pub mod storage_site_deployment;
pub mod test_failover;
pub mod v1alpha1;
pub mod volume_handle;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use cluster_deployment_config::ClusterDeploymentConfig;
pub use control_plane::ControlPlane;
pub use control_plane_ops::ControlPlaneOps;
pub use operator_ops::OperatorOps;
pub use persistent_volume_ops::PersistentVolumeOps;
pub use simplyblock_driver::SimplyblockDriver;
pub use storage_backup::StorageBackup;
pub use storage_backup_ops::StorageBackupOps;
pub use storage_backup_policy::StorageBackupPolicy;
pub use storage_cluster::StorageCluster;
pub use storage_cluster_ops::StorageClusterOps;
pub use storage_device::StorageDevice;
pub use storage_device_ops::StorageDeviceOps;
pub use storage_node::StorageNode;
pub use storage_node_ops::StorageNodeOps;
pub use storage_pool::StoragePool;
pub use storage_pool_ops::StoragePoolOps;
pub use storage_site_deployment::StorageSiteDeployment;
pub use test_failover::TestFailover;

pub use keys::{API_VERSION, GROUP, VERSION};

/// Every CustomResourceDefinition of the API, in a stable order. A kind the Go operator
/// stored at v1alpha1 serves that version too ([`served_with_v1alpha1`]).
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        StorageCluster::crd(),
        StorageClusterOps::crd(),
        ClusterDeploymentConfig::crd(),
        OperatorOps::crd(),
        StorageNode::crd(),
        StorageNodeOps::crd(),
        StorageDevice::crd(),
        StorageDeviceOps::crd(),
        StoragePool::crd(),
        StoragePoolOps::crd(),
        ControlPlane::crd(),
        ControlPlaneOps::crd(),
        SimplyblockDriver::crd(),
        PersistentVolumeOps::crd(),
        StorageSiteDeployment::crd(),
        TestFailover::crd(),
        StorageBackupPolicy::crd(),
        StorageBackup::crd(),
        StorageBackupOps::crd(),
    ]
    .into_iter()
    .map(served_with_v1alpha1)
    .collect()
}

/// The Service the operator's webhooks are reached at, in the namespace the chart installs
/// to; the operator rewrites a CRD's conversion to where it actually serves.
pub const WEBHOOK_SERVICE: &str = "simplyblock-operator-webhook";
/// The namespace a CRD's conversion names until the operator rewrites it.
pub const DEFAULT_NAMESPACE: &str = "simplyblock";
/// The path of the conversion webhook.
pub const CONVERSION_PATH: &str = "/convert";
/// The Lease every replica of the operator competes for; whoever holds it runs the
/// controllers (the upgrade tool holds it while the Go operator still runs).
pub const LEADER_LEASE: &str = "simplyblock-operator-leader";

/// `hub` with the v1alpha1 version of the same kind beside it, if there is one: both
/// served, the hub stored, converted by the operator's webhook.
pub fn served_with_v1alpha1(hub: CustomResourceDefinition) -> CustomResourceDefinition {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceConversion, ServiceReference, WebhookClientConfig, WebhookConversion,
    };
    let Some(spoke) = v1alpha1::crds()
        .into_iter()
        .find(|c| c.metadata.name == hub.metadata.name)
    else {
        return hub;
    };
    let mut versions = spoke.spec.versions;
    versions.extend(hub.spec.versions.iter().cloned());
    for version in &mut versions {
        version.served = true;
        version.storage = version.name == VERSION;
    }
    let mut crd = hub;
    crd.spec.versions = versions;
    crd.spec.conversion = Some(CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(WebhookConversion {
            conversion_review_versions: vec!["v1".into()],
            client_config: Some(WebhookClientConfig {
                service: Some(ServiceReference {
                    name: WEBHOOK_SERVICE.into(),
                    namespace: DEFAULT_NAMESPACE.into(),
                    path: Some(CONVERSION_PATH.into()),
                    port: Some(443),
                }),
                ..WebhookClientConfig::default()
            }),
        }),
    });
    crd
}

/// The names of the CRDs served at v1alpha1 as well.
pub fn converting_crd_names() -> Vec<String> {
    v1alpha1::crds()
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect()
}

/// Where the chart keeps its CRDs: `crds/`, which `helm install` creates before it maps
/// the templates (the chart's ControlPlane and SimplyblockDriver need their kinds served).
/// Helm never updates that directory; the chart's pre-upgrade hook does
/// (`simplyblock-operator apply-crds`).
pub const CHART_CRDS_DIR: &str = "deploy/charts/simplyblock-operator/crds";

/// A CRD as the YAML checked in under [`CHART_CRDS_DIR`], kept when a release goes
/// (`helm.sh/resource-policy: keep`; Helm deletes nothing of `crds/`, and the annotation
/// says so to whoever applies them otherwise): deleting a CRD deletes every object of its
/// kind.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::SerializeError> {
    let mut crd = crd.clone();
    crd.metadata.annotations = Some(std::collections::BTreeMap::from([(
        "helm.sh/resource-policy".to_owned(),
        "keep".to_owned(),
    )]));
    let mut out =
        String::from("# Generated by `cargo run -p simplyblock-api --bin crds`; do not edit.\n");
    out.push_str(&serde_saphyr::to_string(&crd)?);
    Ok(out)
}

/// The chart's helpers, whose `simplyblock.crdNames` lists every CRD ([`with_crd_names`]).
pub const CHART_HELPERS: &str = "deploy/charts/simplyblock-operator/templates/_helpers.tpl";

const CRD_NAMES_START: &str = "{{- define \"simplyblock.crdNames\" -}}\n";
const CRD_NAMES_END: &str = "{{- end -}}";

/// `helpers` (the text of [`CHART_HELPERS`]) with the body of its `simplyblock.crdNames`
/// helper made the name of every CRD, sorted, one YAML list item a line; `None` when it
/// has no such helper.
pub fn with_crd_names(helpers: &str) -> Option<String> {
    let (before, rest) = helpers.split_once(CRD_NAMES_START)?;
    let (_, after) = rest.split_once(CRD_NAMES_END)?;
    let mut names: Vec<String> = crds().into_iter().filter_map(|c| c.metadata.name).collect();
    names.sort();
    let list: String = names.iter().map(|n| format!("- {n}\n")).collect();
    Some(format!(
        "{before}{CRD_NAMES_START}{list}{CRD_NAMES_END}{after}"
    ))
}

/// The file a CRD is written to: `<plural>.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.spec.names.plural)
}

//! The driver's objects, built as typed objects from the SimplyblockDriver. Pure: the
//! controller decides the image and whether snapshots are served, calls [`manifests`],
//! and applies what differs.
//!
//! The binary is `simplyblock-csi` (one image for both plugins): the controller plugin
//! serves `--mode=controller` on a socket in an in-memory emptyDir its sidecars share;
//! the node plugin serves `--mode=node` on a socket in the kubelet's plugin directory,
//! registered by node-driver-registrar. Both read the CSI secret, which the StorageCluster
//! controller writes: it is mounted here, never owned. With `spec.tls.enableTLS` both also
//! mount the CA that signs the control plane's certificate ([`CaSource`]), and with
//! `spec.tls.enableMutualTLS` the driver's client certificate
//! ([`CSI_CLIENT_TLS_SECRET`]): mounted, never owned, each read-only and only the keys
//! the driver reads.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, HTTPGetAction, HostPathVolumeSource, KeyToPath, ObjectFieldSelector, PodSpec,
    PodTemplateSpec, Probe, SecretVolumeSource, SecurityContext, ServiceAccount, Toleration,
    Volume, VolumeMount,
};
use k8s_openapi::api::storage::v1::{CSIDriver, CSIDriverSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde_json::Value;
use simplyblock_api::csi_secret;
use simplyblock_api::keys::{MANAGED_BY_LABEL, MANAGED_BY_SIMPLYBLOCK_DRIVER};
use simplyblock_api::simplyblock_driver::{DriverTls, SimplyblockDriver};

pub use crate::controlplane::names::CSI_CLIENT_TLS_SECRET;

use super::names::{
    CONFIG_MAP, CONTROLLER_ACCOUNT, CONTROLLER_APP, CONTROLLER_STATEFULSET, GROUP_SNAPSHOT_CLASS,
    NODE_ACCOUNT, NODE_APP, NODE_DAEMONSET, NODE_SERVER_CONFIG_MAP, SNAPSHOT_CLASS,
};
use super::objects::{
    GROUP_SNAPSHOT_GROUP, GROUP_SNAPSHOT_VERSION, Kind, ObjectKey, SNAPSHOT_GROUP, SNAPSHOT_VERSION,
};

/// The environment variable that says how the driver reaches the control plane:
/// `disabled`, `anonymous` (TLS) or `authenticated` (mutual TLS). Adoption compares a
/// running plugin's value with the spec's.
pub const TLS_MODE_ENV: &str = "SB_TLS_CONNECT";
/// The driver's `--api-token-file`, as an environment variable.
const API_TOKEN_ENV: &str = "SPDKCSI_API_TOKEN_PATH";
/// Every pod's own service-account token, which the control plane checks with a
/// TokenReview.
const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// Where each plugin serves CSI, inside its containers.
const SOCKET_DIR: &str = "/csi";
const SOCKET: &str = "/csi/csi.sock";
/// Under the kubelet's directory (`spec.kubeletDir`): the plugins' sockets, the pods'
/// volumes, and the registration sockets the kubelet watches. The node plugin sees them at
/// the host's paths, which are the ones the kubelet hands it.
const KUBELET_PLUGINS: &str = "plugins";
const KUBELET_PODS: &str = "pods";
const KUBELET_REGISTRY: &str = "plugins_registry";

fn kubelet_path(
    spec: &simplyblock_api::simplyblock_driver::SimplyblockDriverSpec,
    dir: &str,
) -> String {
    format!("{}/{dir}", spec.kubelet_dir.trim_end_matches('/'))
}

/// A PriorityClass name: `default` when unset, none when empty.
fn priority_class(set: &Option<String>, default: &str) -> Option<String> {
    match set.as_deref() {
        None => Some(default.to_owned()),
        Some("") => None,
        Some(name) => Some(name.to_owned()),
    }
}
/// The node plugin's stage records: on the host, so a restarted plugin finds them.
const STATE_DIR: &str = "/var/lib/simplyblock-csi";
const SECRET_DIR: &str = "/etc/spdkcsi-secret";
/// The control plane's CA (`ca.crt`) and the driver's client certificate (`tls.crt`,
/// `tls.key`), each its own read-only volume.
const CA_DIR: &str = "/etc/simplyblock-csi/control-plane-ca";
const CLIENT_TLS_DIR: &str = "/etc/simplyblock-csi/client-tls";
const CONFIG_DIR: &str = "/etc/spdkcsi-config";
const NODE_SERVER_CONFIG_DIR: &str = "/etc/spdkcsi-nodeserver-config";
const REGISTRAR_HEALTH_PORT: i32 = 9809;
/// Where both plugins serve `/metrics` (`--metrics-address`), beside the registrar's
/// health port on a worker's host network.
pub const DRIVER_METRICS_PORT: i32 = 9810;
/// Where each controller sidecar serves its `/metrics` (`--http-endpoint`), by container:
/// the controller's pod has its own network, so they need only differ from each other.
pub const SIDECAR_METRICS_PORTS: &[(&str, &str, i32)] = &[
    ("csi-provisioner", "metrics-prov", 9811),
    ("csi-attacher", "metrics-attach", 9812),
    ("csi-resizer", "metrics-resize", 9813),
    ("csi-health-monitor", "metrics-health", 9814),
    ("csi-snapshotter", "metrics-snap", 9815),
];
/// The csi-addons sidecar's gRPC port for the csi-addons controller-manager.
const ADDONS_PORT: i32 = 9070;
/// The csi-addons sidecar; the spec has no field for it, so this release's is used.
pub const ADDONS_IMAGE: &str = "quay.io/csiaddons/k8s-sidecar:v0.15.0";

/// The ConfigMaps carry no cluster state (the driver reads the clusters from the CSI
/// secret); they are kept, with the content the chart gave them, because an adopted
/// deployment and earlier driver images mount and parse them.
const LEGACY_CONFIG: &str = r#"{"simplybk":{"ip":null,"uuid":null}}"#;
const NODE_SERVER_CONFIG: &str = r#"{"xpuList":[],"kvmPciBridges":null}"#;

/// The snapshot API's `VolumeSnapshotClass`, which k8s-openapi does not carry.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotClass {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub driver: String,
    pub deletion_policy: String,
}

/// The group-snapshot API's `VolumeGroupSnapshotClass`. No parameters: the driver finds
/// a group snapshot's consistency group and cluster from its member volumes.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeGroupSnapshotClass {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub driver: String,
    pub deletion_policy: String,
}

/// Where the CA that signs the control plane's certificate is kept, in the driver's
/// namespace: a key of a Secret, or of a ConfigMap (OpenShift's service CA).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaSource {
    Secret { name: String, key: String },
    ConfigMap { name: String, key: String },
}

/// What the manifests are built from besides the spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings<'a> {
    /// The CSI driver's image (`spec.image`, or the default from the operator's).
    pub image: &'a str,
    /// Snapshots are asked for and the cluster serves their API: the snapshotter sidecar
    /// runs and the VolumeSnapshotClass is written.
    pub snapshots: bool,
    /// Snapshots run and the cluster also serves the group-snapshot API: the snapshotter
    /// runs with its group-snapshot gate and the VolumeGroupSnapshotClass is written.
    /// Without the API the gated sidecar would wait for it and snapshot nothing.
    pub group_snapshots: bool,
    /// The control plane's CA, mounted with `spec.tls.enableTLS`; `None`: the plugins
    /// verify the control plane against the system's CA store (a managed control plane
    /// with a publicly trusted certificate).
    pub ca: Option<&'a CaSource>,
}

/// Every object of the driver. Its accounts' roles and bindings are not among them: they
/// are the chart's ([`super::rbac`]).
#[derive(Clone, Debug)]
pub struct Manifests {
    pub accounts: Vec<ServiceAccount>,
    pub config_maps: Vec<ConfigMap>,
    pub csi_driver: CSIDriver,
    pub snapshot_class: Option<VolumeSnapshotClass>,
    pub group_snapshot_class: Option<VolumeGroupSnapshotClass>,
    pub controller: StatefulSet,
    pub node: DaemonSet,
}

impl Manifests {
    /// Every object as JSON, keyed, in the order of application.
    pub fn objects(&self) -> BTreeMap<ObjectKey, Value> {
        let mut out = BTreeMap::new();
        let mut put = |kind: Kind, metadata: &ObjectMeta, object: Value| {
            let name = metadata.name.clone().unwrap_or_default();
            out.insert(ObjectKey::new(kind, name), object);
        };
        for a in &self.accounts {
            put(Kind::ServiceAccount, &a.metadata, json(a));
        }
        for c in &self.config_maps {
            put(Kind::ConfigMap, &c.metadata, json(c));
        }
        put(
            Kind::CsiDriver,
            &self.csi_driver.metadata,
            json(&self.csi_driver),
        );
        if let Some(class) = &self.snapshot_class {
            put(Kind::VolumeSnapshotClass, &class.metadata, json(class));
        }
        if let Some(class) = &self.group_snapshot_class {
            put(Kind::VolumeGroupSnapshotClass, &class.metadata, json(class));
        }
        put(
            Kind::StatefulSet,
            &self.controller.metadata,
            json(&self.controller),
        );
        put(Kind::DaemonSet, &self.node.metadata, json(&self.node));
        out
    }
}

/// A typed object as JSON (with its apiVersion and kind).
fn json<T: Serialize>(object: &T) -> Value {
    // Serializing these types cannot fail: no map has a non-string key.
    serde_json::to_value(object).unwrap_or(Value::Null)
}

/// Every object a driver named `driver_name` may have, whatever its spec: what is read
/// before deciding, so an object no longer wanted is found and removed.
pub fn every_key(
    driver_name: &str,
    snapshot_api: bool,
    group_snapshot_api: bool,
) -> Vec<ObjectKey> {
    let mut keys = vec![
        ObjectKey::new(Kind::ServiceAccount, CONTROLLER_ACCOUNT),
        ObjectKey::new(Kind::ServiceAccount, NODE_ACCOUNT),
        ObjectKey::new(Kind::ConfigMap, CONFIG_MAP),
        ObjectKey::new(Kind::ConfigMap, NODE_SERVER_CONFIG_MAP),
        ObjectKey::new(Kind::CsiDriver, driver_name),
        ObjectKey::new(Kind::StatefulSet, CONTROLLER_STATEFULSET),
        ObjectKey::new(Kind::DaemonSet, NODE_DAEMONSET),
    ];
    if snapshot_api {
        keys.push(ObjectKey::new(Kind::VolumeSnapshotClass, SNAPSHOT_CLASS));
    }
    if group_snapshot_api {
        keys.push(ObjectKey::new(
            Kind::VolumeGroupSnapshotClass,
            GROUP_SNAPSHOT_CLASS,
        ));
    }
    keys.sort();
    keys
}

/// `disabled`, `anonymous` or `authenticated`: how `tls` reaches the control plane.
pub fn tls_mode(tls: &DriverTls) -> &'static str {
    match (tls.enable_tls, tls.enable_mutual_tls) {
        (false, _) => "disabled",
        (true, false) => "anonymous",
        (true, true) => "authenticated",
    }
}

/// The driver's objects.
pub fn manifests(driver: &SimplyblockDriver, settings: Settings<'_>) -> Manifests {
    let spec = &driver.spec;
    Manifests {
        accounts: [CONTROLLER_ACCOUNT, NODE_ACCOUNT]
            .into_iter()
            .map(|name| ServiceAccount {
                metadata: owned(driver, name),
                ..ServiceAccount::default()
            })
            .collect(),
        config_maps: vec![
            config_map(driver, CONFIG_MAP, "config.json", LEGACY_CONFIG),
            config_map(
                driver,
                NODE_SERVER_CONFIG_MAP,
                "nodeserver-config.json",
                NODE_SERVER_CONFIG,
            ),
        ],
        csi_driver: CSIDriver {
            metadata: cluster_scoped(&spec.driver_name),
            spec: CSIDriverSpec {
                // NVMe/TCP volumes attach from the node: no ControllerPublish step.
                attach_required: Some(false),
                // NodePublishVolume reads nothing about the pod.
                pod_info_on_mount: Some(false),
                volume_lifecycle_modes: Some(vec!["Persistent".into()]),
                ..CSIDriverSpec::default()
            },
        },
        snapshot_class: settings.snapshots.then(|| VolumeSnapshotClass {
            api_version: format!("{SNAPSHOT_GROUP}/{SNAPSHOT_VERSION}"),
            kind: "VolumeSnapshotClass".into(),
            metadata: cluster_scoped(SNAPSHOT_CLASS),
            driver: spec.driver_name.clone(),
            deletion_policy: "Delete".into(),
        }),
        group_snapshot_class: settings.group_snapshots.then(|| VolumeGroupSnapshotClass {
            api_version: format!("{GROUP_SNAPSHOT_GROUP}/{GROUP_SNAPSHOT_VERSION}"),
            kind: "VolumeGroupSnapshotClass".into(),
            metadata: cluster_scoped(GROUP_SNAPSHOT_CLASS),
            driver: spec.driver_name.clone(),
            deletion_policy: "Delete".into(),
        }),
        controller: controller(driver, settings),
        node: node(driver, settings),
    }
}

fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([(
        MANAGED_BY_LABEL.into(),
        MANAGED_BY_SIMPLYBLOCK_DRIVER.into(),
    )])
}

/// A namespaced object the driver controls (it goes when the driver does).
fn owned(driver: &SimplyblockDriver, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: driver.namespace(),
        labels: Some(labels()),
        owner_references: driver.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// A cluster-scoped object, which no namespaced owner can hold: its label marks it the
/// driver's, and the driver's finalizer deletes it.
fn cluster_scoped(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        labels: Some(labels()),
        ..ObjectMeta::default()
    }
}

fn config_map(driver: &SimplyblockDriver, name: &str, key: &str, text: &str) -> ConfigMap {
    ConfigMap {
        metadata: owned(driver, name),
        data: Some(BTreeMap::from([(key.into(), text.into())])),
        ..ConfigMap::default()
    }
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// A host directory into which mounts made in the container must reach the host (and
/// the kubelet's back into the container).
fn shared_mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        mount_propagation: Some("Bidirectional".into()),
        ..mount(name, path, false)
    }
}

fn host_path(name: &str, path: &str, type_: Option<&str>) -> Volume {
    Volume {
        name: name.into(),
        host_path: Some(HostPathVolumeSource {
            path: path.into(),
            type_: type_.map(Into::into),
        }),
        ..Volume::default()
    }
}

fn config_map_volume(name: &str, config_map: &str, optional: bool) -> Volume {
    Volume {
        name: name.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map.into(),
            optional: optional.then_some(true),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn secret_volume() -> Volume {
    Volume {
        name: "csi-secret".into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(csi_secret::NAME.into()),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// `key` of the object, mounted as `path`.
fn item(key: &str, path: &str) -> KeyToPath {
    KeyToPath {
        key: key.into(),
        path: path.into(),
        ..KeyToPath::default()
    }
}

/// The TLS material both plugins mount, as (volume, mount, arguments): the control
/// plane's CA with `spec.tls.enableTLS` when `settings` knows where it is kept, and the
/// driver's client certificate when the mode is `authenticated`. Only the keys the driver
/// reads are projected: the Secret of a cert-manager CA also holds its server's key.
fn tls_material(
    driver: &SimplyblockDriver,
    settings: Settings<'_>,
) -> Vec<(Volume, VolumeMount, Vec<String>)> {
    let tls = &driver.spec.tls;
    let mut out = Vec::new();
    if !tls.enable_tls {
        return out;
    }
    if let Some(ca) = settings.ca {
        let name = "control-plane-ca";
        let volume = match ca {
            CaSource::Secret { name: secret, key } => Volume {
                name: name.into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(secret.clone()),
                    items: Some(vec![item(key, "ca.crt")]),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            },
            CaSource::ConfigMap {
                name: config_map,
                key,
            } => Volume {
                name: name.into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: config_map.clone(),
                    items: Some(vec![item(key, "ca.crt")]),
                    ..ConfigMapVolumeSource::default()
                }),
                ..Volume::default()
            },
        };
        out.push((
            volume,
            mount(name, CA_DIR, true),
            vec![format!("--ca-file={CA_DIR}/ca.crt")],
        ));
    }
    if tls_mode(tls) == "authenticated" {
        let name = "control-plane-client-tls";
        out.push((
            Volume {
                name: name.into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(CSI_CLIENT_TLS_SECRET.into()),
                    items: Some(vec![item("tls.crt", "tls.crt"), item("tls.key", "tls.key")]),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            },
            mount(name, CLIENT_TLS_DIR, true),
            vec![
                format!("--client-cert-file={CLIENT_TLS_DIR}/tls.crt"),
                format!("--client-key-file={CLIENT_TLS_DIR}/tls.key"),
            ],
        ));
    }
    out
}

/// The environment both plugins share: the TLS mode, and the service-account token as
/// the control plane's credential when asked for.
fn plugin_env(driver: &SimplyblockDriver) -> Vec<EnvVar> {
    let mut out = vec![
        env(TLS_MODE_ENV, tls_mode(&driver.spec.tls)),
        env("SIMPLYBLOCK_LOG_FORMAT", &driver.spec.log_format),
    ];
    if driver.spec.enable_service_account_auth {
        out.push(env(API_TOKEN_ENV, SERVICE_ACCOUNT_TOKEN));
    }
    out
}

/// The arguments both plugins share.
fn plugin_args(driver: &SimplyblockDriver, settings: Settings<'_>, mode: &str) -> Vec<String> {
    let mut out = vec![
        format!("--endpoint=unix://{SOCKET}"),
        format!("--mode={mode}"),
        format!("--driver-name={}", driver.spec.driver_name),
        format!("--secret-file={SECRET_DIR}/{}", csi_secret::KEY),
        format!("--metrics-address=:{DRIVER_METRICS_PORT}"),
    ];
    out.extend(
        tls_material(driver, settings)
            .into_iter()
            .flat_map(|(_, _, args)| args),
    );
    out
}

/// The named port a container serves `/metrics` on.
fn metrics_port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: port,
        protocol: Some("TCP".into()),
        ..ContainerPort::default()
    }
}

/// A sidecar of the controller plugin, on its socket, electing a leader among the
/// replicas (the Lease in the driver's namespace), serving its metrics on its port of
/// [`SIDECAR_METRICS_PORTS`] (csi-lib-utils' `csi_sidecar_operations_seconds`).
fn sidecar(driver: &SimplyblockDriver, name: &str, image: &str, extra: &[&str]) -> Container {
    let mut args = vec![
        format!("--csi-address={SOCKET}"),
        "--leader-election".into(),
    ];
    let metrics = SIDECAR_METRICS_PORTS
        .iter()
        .find(|(container, ..)| *container == name)
        .map(|&(_, port_name, port)| metrics_port(port_name, port));
    if let Some(port) = &metrics {
        args.push(format!("--http-endpoint=:{}", port.container_port));
    }
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    Container {
        name: name.into(),
        image: Some(image.into()),
        image_pull_policy: Some(driver.spec.image_pull_policy.clone()),
        args: Some(args),
        ports: metrics.map(|p| vec![p]),
        volume_mounts: Some(vec![mount("socket-dir", SOCKET_DIR, false)]),
        ..Container::default()
    }
}

fn controller(driver: &SimplyblockDriver, settings: Settings<'_>) -> StatefulSet {
    let spec = &driver.spec;
    let images = &spec.sidecar_images;
    let plugin = Container {
        name: "csi-controller".into(),
        image: Some(settings.image.into()),
        image_pull_policy: Some(spec.image_pull_policy.clone()),
        args: Some(plugin_args(driver, settings, "controller")),
        env: Some(plugin_env(driver)),
        ports: Some(vec![metrics_port("metrics", DRIVER_METRICS_PORT)]),
        resources: spec.controller_resources.clone(),
        volume_mounts: Some(with_tls_mounts(
            driver,
            settings,
            vec![
                mount("socket-dir", SOCKET_DIR, false),
                mount("csi-config", CONFIG_DIR, true),
                mount("csi-secret", SECRET_DIR, true),
            ],
        )),
        ..Container::default()
    };
    let mut containers = vec![
        plugin,
        // The driver reads the claim's name from the create request's parameters.
        sidecar(
            driver,
            "csi-provisioner",
            &images.provisioner,
            &["--timeout=180s", "--extra-create-metadata"],
        ),
        // attachRequired is false, so it has nothing to attach; it runs for a CSIDriver
        // adopted with attachRequired true, which cannot be changed in place.
        sidecar(driver, "csi-attacher", &images.attacher, &[]),
        // Expansion is online: no volume is ever in use in a way that stops it.
        sidecar(
            driver,
            "csi-resizer",
            &images.resizer,
            &["--handle-volume-inuse-error=false"],
        ),
        sidecar(driver, "csi-health-monitor", &images.health_monitor, &[]),
    ];
    if settings.snapshots {
        // The group-snapshot gate only where its API is served: with the gate the
        // sidecar waits for that API before it takes any snapshot.
        let args: &[&str] = if settings.group_snapshots {
            &[
                "--timeout=150s",
                "--feature-gates=CSIVolumeGroupSnapshot=true",
            ]
        } else {
            &["--timeout=150s"]
        };
        containers.push(sidecar(
            driver,
            "csi-snapshotter",
            &images.snapshotter,
            args,
        ));
    }
    if spec.enable_csi_addons {
        containers.push(addons_sidecar(driver));
    }
    let (selector, template) = app_pods(
        CONTROLLER_APP,
        PodSpec {
            containers,
            volumes: Some(with_tls_volumes(
                driver,
                settings,
                vec![
                    Volume {
                        name: "socket-dir".into(),
                        empty_dir: Some(EmptyDirVolumeSource {
                            medium: Some("Memory".into()),
                            ..EmptyDirVolumeSource::default()
                        }),
                        ..Volume::default()
                    },
                    config_map_volume("csi-config", CONFIG_MAP, false),
                    secret_volume(),
                ],
            )),
            ..scheduled_pod(
                driver,
                CONTROLLER_ACCOUNT,
                priority_class(
                    &spec.controller_priority_class_name,
                    "system-cluster-critical",
                ),
                &spec.controller_node_selector,
                &spec.controller_tolerations,
            )
        },
    );
    StatefulSet {
        metadata: owned(driver, CONTROLLER_STATEFULSET),
        spec: StatefulSetSpec {
            // The chart's; a StatefulSet's service name cannot change.
            service_name: Some(CONTROLLER_STATEFULSET.into()),
            replicas: Some(spec.controller_replicas),
            selector,
            template,
            ..StatefulSetSpec::default()
        },
        ..StatefulSet::default()
    }
}

/// The csi-addons sidecar: it publishes a CSIAddonsNode naming this pod, which the
/// csi-addons controller-manager resolves to the pod's address itself.
fn addons_sidecar(driver: &SimplyblockDriver) -> Container {
    Container {
        name: "csi-addons".into(),
        image: Some(ADDONS_IMAGE.into()),
        image_pull_policy: Some(driver.spec.image_pull_policy.clone()),
        args: Some(vec![
            format!("--csi-addons-address=unix://{SOCKET}"),
            "--node-id=$(NODE_ID)".into(),
            format!("--controller-port={ADDONS_PORT}"),
            "--pod=$(POD_NAME)".into(),
            "--namespace=$(POD_NAMESPACE)".into(),
            "--pod-uid=$(POD_UID)".into(),
            "--leader-election-namespace=$(POD_NAMESPACE)".into(),
        ]),
        env: Some(vec![
            field_env("NODE_ID", "spec.nodeName"),
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
            field_env("POD_UID", "metadata.uid"),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("csi-addons".into()),
            container_port: ADDONS_PORT,
            ..ContainerPort::default()
        }]),
        volume_mounts: Some(vec![mount("socket-dir", SOCKET_DIR, false)]),
        ..Container::default()
    }
}

fn node(driver: &SimplyblockDriver, settings: Settings<'_>) -> DaemonSet {
    let spec = &driver.spec;
    let plugins = kubelet_path(spec, KUBELET_PLUGINS);
    let pods = kubelet_path(spec, KUBELET_PODS);
    let registry = kubelet_path(spec, KUBELET_REGISTRY);
    let plugin_dir = format!("{plugins}/{}", spec.driver_name);
    let registrar = Container {
        name: "csi-registrar".into(),
        image: Some(spec.sidecar_images.node_driver_registrar.clone()),
        image_pull_policy: Some(spec.image_pull_policy.clone()),
        args: Some(vec![
            format!("--csi-address={SOCKET}"),
            // The kubelet opens the socket by its path on the host.
            format!("--kubelet-registration-path={plugin_dir}/csi.sock"),
            format!("--health-port={REGISTRAR_HEALTH_PORT}"),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("healthz".into()),
            container_port: REGISTRAR_HEALTH_PORT,
            ..ContainerPort::default()
        }]),
        liveness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/healthz".into()),
                port: IntOrString::String("healthz".into()),
                ..HTTPGetAction::default()
            }),
            initial_delay_seconds: Some(20),
            timeout_seconds: Some(10),
            ..Probe::default()
        }),
        volume_mounts: Some(vec![
            mount("socket-dir", SOCKET_DIR, false),
            mount("registration-dir", "/registration", false),
        ]),
        ..Container::default()
    };
    let mut args = plugin_args(driver, settings, "node");
    args.extend([
        "--node-id=$(NODE_ID)".to_owned(),
        format!("--state-dir={STATE_DIR}"),
    ]);
    let mut plugin_env = plugin_env(driver);
    plugin_env.insert(0, field_env("NODE_ID", "spec.nodeName"));
    let plugin = Container {
        name: "csi-node".into(),
        image: Some(settings.image.into()),
        image_pull_policy: Some(spec.image_pull_policy.clone()),
        args: Some(args),
        env: Some(plugin_env),
        // On the host's network: the port is the worker's.
        ports: Some(vec![metrics_port("metrics", DRIVER_METRICS_PORT)]),
        // It connects NVMe/TCP controllers, formats and mounts, and grows filesystems.
        security_context: Some(SecurityContext {
            privileged: Some(true),
            ..SecurityContext::default()
        }),
        resources: spec.node_resources.clone(),
        volume_mounts: Some(with_tls_mounts(
            driver,
            settings,
            vec![
                mount("socket-dir", SOCKET_DIR, false),
                shared_mount("plugin-dir", &plugins),
                shared_mount("pod-dir", &pods),
                mount("host-dev", "/dev", false),
                mount("host-sys", "/sys", false),
                mount("csi-state", STATE_DIR, false),
                mount("csi-config", CONFIG_DIR, true),
                mount("csi-nodeserver-config", NODE_SERVER_CONFIG_DIR, true),
                mount("csi-secret", SECRET_DIR, true),
            ],
        )),
        ..Container::default()
    };
    let (selector, template) = app_pods(
        NODE_APP,
        PodSpec {
            // NVMe/TCP connections are made from the host's network.
            host_network: Some(true),
            dns_policy: Some("ClusterFirstWithHostNet".into()),
            containers: vec![registrar, plugin],
            volumes: Some(with_tls_volumes(
                driver,
                settings,
                vec![
                    host_path("socket-dir", &plugin_dir, Some("DirectoryOrCreate")),
                    host_path("registration-dir", &registry, Some("Directory")),
                    host_path("plugin-dir", &plugins, Some("Directory")),
                    host_path("pod-dir", &pods, Some("Directory")),
                    host_path("host-dev", "/dev", None),
                    host_path("host-sys", "/sys", None),
                    host_path("csi-state", STATE_DIR, Some("DirectoryOrCreate")),
                    config_map_volume("csi-config", CONFIG_MAP, false),
                    config_map_volume("csi-nodeserver-config", NODE_SERVER_CONFIG_MAP, true),
                    secret_volume(),
                ],
            )),
            ..scheduled_pod(
                driver,
                NODE_ACCOUNT,
                priority_class(&spec.node_priority_class_name, "system-node-critical"),
                &spec.node_selector,
                &spec.tolerations,
            )
        },
    );
    DaemonSet {
        metadata: owned(driver, NODE_DAEMONSET),
        spec: DaemonSetSpec {
            selector,
            template,
            ..DaemonSetSpec::default()
        },
        ..DaemonSet::default()
    }
}

/// The selector and pod template of the pods labelled `app: <app>`, each running `pod`.
fn app_pods(app: &str, pod: PodSpec) -> (LabelSelector, PodTemplateSpec) {
    let labels = BTreeMap::from([("app".to_owned(), app.to_owned())]);
    let selector = LabelSelector {
        match_labels: Some(labels.clone()),
        ..LabelSelector::default()
    };
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels),
            ..ObjectMeta::default()
        }),
        spec: Some(pod),
    };
    (selector, template)
}

/// A pod of the driver run as `account` at `priority_class_name`, on the nodes
/// `node_selector` picks and `tolerations` admit, pulling with the driver's secrets.
fn scheduled_pod(
    driver: &SimplyblockDriver,
    account: &str,
    priority_class_name: Option<String>,
    node_selector: &BTreeMap<String, String>,
    tolerations: &[Toleration],
) -> PodSpec {
    PodSpec {
        service_account_name: Some(account.into()),
        priority_class_name,
        image_pull_secrets: non_empty_list(driver.spec.image_pull_secrets.clone()),
        node_selector: non_empty(node_selector.clone()),
        tolerations: non_empty_list(tolerations.to_vec()),
        ..PodSpec::default()
    }
}

/// `mounts` and the mounts of the TLS material ([`tls_material`]).
fn with_tls_mounts(
    driver: &SimplyblockDriver,
    settings: Settings<'_>,
    mut mounts: Vec<VolumeMount>,
) -> Vec<VolumeMount> {
    mounts.extend(
        tls_material(driver, settings)
            .into_iter()
            .map(|(_, m, _)| m),
    );
    mounts
}

/// `volumes` and the TLS material the plugins mount ([`tls_material`]).
fn with_tls_volumes(
    driver: &SimplyblockDriver,
    settings: Settings<'_>,
    mut volumes: Vec<Volume>,
) -> Vec<Volume> {
    volumes.extend(
        tls_material(driver, settings)
            .into_iter()
            .map(|(v, _, _)| v),
    );
    volumes
}

fn non_empty(map: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!map.is_empty()).then_some(map)
}

fn non_empty_list<T>(list: Vec<T>) -> Option<Vec<T>> {
    (!list.is_empty()).then_some(list)
}

#[cfg(test)]
mod tests {
    /// The sidecar images testenv builds for its node are the ones rendered by default: a
    /// default moved to another version is built at that version too, or the real-node test
    /// runs a sidecar this driver does not.
    #[test]
    fn the_sidecars_built_for_a_node_are_the_ones_rendered() {
        let defaults = simplyblock_api::simplyblock_driver::SidecarImages::default();
        let rendered = [
            defaults.provisioner,
            defaults.attacher,
            defaults.resizer,
            defaults.snapshotter,
            defaults.health_monitor,
            defaults.node_driver_registrar,
        ];
        for (image, ..) in simplyblock_testenv::assets::SIDECARS {
            // The one a cluster serving VolumeSnapshots runs once; no driver renders it.
            if image.contains("/snapshot-controller:") {
                continue;
            }
            assert!(
                rendered.iter().any(|r| r == image),
                "testenv builds {image}, which the SimplyblockDriver does not render: {rendered:?}"
            );
        }
    }

    use super::*;
    use serde_json::json;

    const IMAGE: &str = "quay.io/simplyblock-io/simplyblock-csi:v26.4.0";

    fn driver(spec: Value) -> SimplyblockDriver {
        serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "SimplyblockDriver",
            "metadata": {"name": "simplyblock", "namespace": "simplyblock-system",
                         "uid": "5bd00000-0000-4000-8000-000000000001"},
            "spec": spec,
        }))
        .expect("driver")
    }

    /// Every object as one YAML document each, in the order they are applied.
    fn yaml(m: &Manifests) -> String {
        m.objects()
            .values()
            .map(|v| serde_saphyr::to_string(v).expect("YAML"))
            .collect::<Vec<_>>()
            .join("---\n")
    }

    /// The checked-in text of `snapshots/<file>`; `UPDATE_EXPECT=1` writes `actual` there.
    fn expected(file: &str, actual: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/driver/snapshots")
            .join(file);
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            std::fs::create_dir_all(path.parent().expect("dir")).expect("dir");
            std::fs::write(&path, actual).expect("write");
        }
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn container_names(set: &StatefulSet) -> Vec<String> {
        set.spec
            .template
            .spec
            .as_ref()
            .map(|p| p.containers.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn a_driver_of_defaults_renders_as_its_snapshot() {
        let m = manifests(
            &driver(json!({})),
            Settings {
                image: IMAGE,
                snapshots: false,
                group_snapshots: false,
                ca: None,
            },
        );
        let rendered = yaml(&m);
        assert_eq!(rendered, expected("defaults.yaml", &rendered));
    }

    #[test]
    fn a_driver_with_everything_asked_for_renders_as_its_snapshot() {
        let m = manifests(
            &driver(json!({
                "driverName": "csi.example.simplyblock.io",
                "imagePullPolicy": "IfNotPresent",
                "imagePullSecrets": [{"name": "mirror-pull"}],
                "kubeletDir": "/var/lib/k0s/kubelet",
                "nodePriorityClassName": "storage-critical",
                "controllerPriorityClassName": "",
                "logFormat": "json",
                "controllerReplicas": 2,
                "nodeSelector": {"storage": "yes"},
                "tolerations": [{"key": "storage", "operator": "Exists", "effect": "NoSchedule"}],
                "controllerNodeSelector": {"control": "yes"},
                "controllerTolerations": [{"operator": "Exists"}],
                "controllerResources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                "nodeResources": {"limits": {"memory": "512Mi"}},
                "enableServiceAccountAuth": true,
                "enableCSIAddons": true,
                "tls": {"enableTLS": true, "enableMutualTLS": true},
            })),
            Settings {
                image: IMAGE,
                snapshots: true,
                group_snapshots: true,
                ca: Some(&CaSource::Secret {
                    name: "simplyblock-webappapi-tls".into(),
                    key: "ca.crt".into(),
                }),
            },
        );
        let rendered = yaml(&m);
        assert_eq!(rendered, expected("everything.yaml", &rendered));
    }

    /// The plugin containers of `m` (controller, node), each with its pod's volumes.
    fn plugins(m: &Manifests) -> Vec<(Container, Vec<Volume>)> {
        let controller = m.controller.spec.template.spec.clone();
        let node = m.node.spec.template.spec.clone();
        [(controller, "csi-controller"), (node, "csi-node")]
            .into_iter()
            .map(|(pod, name)| {
                let pod = pod.expect("pod");
                let c = pod
                    .containers
                    .iter()
                    .find(|c| c.name == name)
                    .cloned()
                    .expect("plugin");
                (c, pod.volumes.unwrap_or_default())
            })
            .collect()
    }

    /// Every container that has a metrics endpoint serves it, under a named port of its
    /// own in its pod (the node plugin's pod is on the host's network); those without one
    /// are named here, so a new container is a decision.
    #[test]
    fn every_plugin_and_sidecar_serves_its_metrics_on_a_named_port_of_its_own() {
        // The registrar serves only /healthz; the csi-addons sidecar has no HTTP endpoint.
        const NO_METRICS: &[&str] = &["csi-registrar", "csi-addons"];
        let m = manifests(
            &driver(json!({"enableCSIAddons": true})),
            Settings {
                image: IMAGE,
                snapshots: true,
                group_snapshots: true,
                ca: None,
            },
        );
        let pods = [
            m.controller.spec.template.spec.clone().expect("pod"),
            m.node.spec.template.spec.clone().expect("pod"),
        ];
        let mut measured = Vec::new();
        for pod in &pods {
            let mut ports: Vec<(String, i32)> = Vec::new();
            for c in &pod.containers {
                let args = c.args.clone().unwrap_or_default();
                let own: Vec<(String, i32)> = c
                    .ports
                    .iter()
                    .flatten()
                    .map(|p| (p.name.clone().unwrap_or_default(), p.container_port))
                    .collect();
                ports.extend(own.clone());
                if NO_METRICS.contains(&c.name.as_str()) {
                    assert!(
                        !args.iter().any(|a| a.starts_with("--http-endpoint")),
                        "{}: {args:?}",
                        c.name
                    );
                    continue;
                }
                let (flag, port_name) = match c.name.as_str() {
                    "csi-controller" | "csi-node" => ("--metrics-address", "metrics"),
                    _ => ("--http-endpoint", ""),
                };
                let port = own
                    .iter()
                    .find(|(n, _)| n.starts_with("metrics") && n.starts_with(port_name))
                    .unwrap_or_else(|| panic!("{} has no metrics port: {own:?}", c.name));
                assert!(
                    args.contains(&format!("{flag}=:{}", port.1)),
                    "{} serves its metrics on {port:?} by {flag}: {args:?}",
                    c.name
                );
                measured.push(c.name.clone());
            }
            let mut numbers: Vec<i32> = ports.iter().map(|p| p.1).collect();
            let mut names: Vec<&String> = ports.iter().map(|p| &p.0).collect();
            numbers.sort();
            numbers.dedup();
            names.sort();
            names.dedup();
            assert_eq!(
                numbers.len(),
                ports.len(),
                "a port is taken twice: {ports:?}"
            );
            assert_eq!(names.len(), ports.len(), "a name is taken twice: {ports:?}");
            assert!(
                names.iter().all(|n| n.len() <= 15),
                "a port name is longer than 15 characters: {names:?}"
            );
        }
        measured.sort();
        assert_eq!(
            measured,
            [
                "csi-attacher",
                "csi-controller",
                "csi-health-monitor",
                "csi-node",
                "csi-provisioner",
                "csi-resizer",
                "csi-snapshotter"
            ]
        );
    }

    #[test]
    fn the_tls_material_is_mounted_read_only_as_spec_tls_asks() {
        let cert_manager = CaSource::Secret {
            name: "simplyblock-webappapi-tls".into(),
            key: "ca.crt".into(),
        };
        let service_ca = CaSource::ConfigMap {
            name: "simplyblock-service-ca".into(),
            key: "service-ca.crt".into(),
        };
        let render = |tls: Value, ca: Option<&CaSource>| {
            manifests(
                &driver(json!({"tls": tls})),
                Settings {
                    image: IMAGE,
                    snapshots: false,
                    group_snapshots: false,
                    ca,
                },
            )
        };
        let tls_args = |c: &Container| {
            c.args
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|a| a.contains("-file=/etc/simplyblock-csi/"))
                .collect::<Vec<_>>()
        };
        // TLS off: nothing mounted, whatever the CA's place.
        for (c, _) in plugins(&render(json!({}), Some(&cert_manager))) {
            assert!(tls_args(&c).is_empty(), "{:?}", c.args);
        }
        // TLS: the CA alone, only its key projected (the cert-manager Secret also holds
        // the management API's private key).
        for (c, volumes) in plugins(&render(json!({"enableTLS": true}), Some(&cert_manager))) {
            assert_eq!(
                tls_args(&c),
                ["--ca-file=/etc/simplyblock-csi/control-plane-ca/ca.crt"]
            );
            let v = volumes
                .iter()
                .find(|v| v.name == "control-plane-ca")
                .expect("CA volume");
            let secret = v.secret.as_ref().expect("a Secret");
            assert_eq!(
                secret.secret_name.as_deref(),
                Some("simplyblock-webappapi-tls")
            );
            assert_eq!(secret.items, Some(vec![item("ca.crt", "ca.crt")]));
            let m = c
                .volume_mounts
                .iter()
                .flatten()
                .find(|m| m.name == "control-plane-ca")
                .expect("CA mount");
            assert_eq!(m.read_only, Some(true));
        }
        // OpenShift's service CA is a ConfigMap's key.
        for (_, volumes) in plugins(&render(json!({"enableTLS": true}), Some(&service_ca))) {
            let v = volumes
                .iter()
                .find(|v| v.name == "control-plane-ca")
                .expect("CA volume");
            let map = v.config_map.as_ref().expect("a ConfigMap");
            assert_eq!(map.name, "simplyblock-service-ca");
            assert_eq!(map.items, Some(vec![item("service-ca.crt", "ca.crt")]));
        }
        // No known CA: the system's store, so no flag.
        for (c, _) in plugins(&render(json!({"enableTLS": true}), None)) {
            assert!(tls_args(&c).is_empty(), "{:?}", c.args);
        }
        // Mutual TLS: the driver's own client certificate too, read-only.
        let mutual = json!({"enableTLS": true, "enableMutualTLS": true});
        for (c, volumes) in plugins(&render(mutual, Some(&cert_manager))) {
            assert_eq!(
                tls_args(&c),
                [
                    "--ca-file=/etc/simplyblock-csi/control-plane-ca/ca.crt",
                    "--client-cert-file=/etc/simplyblock-csi/client-tls/tls.crt",
                    "--client-key-file=/etc/simplyblock-csi/client-tls/tls.key",
                ]
            );
            let v = volumes
                .iter()
                .find(|v| v.name == "control-plane-client-tls")
                .expect("client volume");
            assert_eq!(
                v.secret.as_ref().and_then(|s| s.secret_name.as_deref()),
                Some(CSI_CLIENT_TLS_SECRET)
            );
            assert!(
                c.volume_mounts
                    .iter()
                    .flatten()
                    .filter(|m| m.name.starts_with("control-plane-"))
                    .all(|m| m.read_only == Some(true))
            );
            assert!(
                c.env
                    .iter()
                    .flatten()
                    .any(|e| e.name == TLS_MODE_ENV && e.value.as_deref() == Some("authenticated"))
            );
        }
    }

    #[test]
    fn the_snapshotter_and_the_class_come_only_with_snapshots() {
        let d = driver(json!({}));
        let without = manifests(
            &d,
            Settings {
                image: IMAGE,
                snapshots: false,
                group_snapshots: false,
                ca: None,
            },
        );
        assert!(without.snapshot_class.is_none());
        assert!(!container_names(&without.controller).contains(&"csi-snapshotter".into()));
        let with = manifests(
            &d,
            Settings {
                image: IMAGE,
                snapshots: true,
                group_snapshots: false,
                ca: None,
            },
        );
        assert_eq!(
            with.snapshot_class.as_ref().map(|c| c.driver.as_str()),
            Some("csi.simplyblock.io")
        );
        assert!(container_names(&with.controller).contains(&"csi-snapshotter".into()));
    }

    fn snapshotter_args(m: &Manifests) -> Vec<String> {
        let controller = json(&m.controller);
        let containers = controller["spec"]["template"]["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let snapshotter = containers
            .iter()
            .find(|c| c["name"] == "csi-snapshotter")
            .expect("the snapshotter");
        serde_json::from_value(snapshotter["args"].clone()).expect("args")
    }

    #[test]
    fn the_group_snapshot_gate_and_class_come_only_with_the_group_snapshot_api() {
        const GATE: &str = "--feature-gates=CSIVolumeGroupSnapshot=true";
        let d = driver(json!({}));
        let render = |group_snapshots| {
            manifests(
                &d,
                Settings {
                    image: IMAGE,
                    snapshots: true,
                    group_snapshots,
                    ca: None,
                },
            )
        };
        let without = render(false);
        assert!(without.group_snapshot_class.is_none());
        assert!(
            !snapshotter_args(&without).iter().any(|a| a == GATE),
            "{:?}",
            snapshotter_args(&without)
        );
        let with = render(true);
        assert!(snapshotter_args(&with).iter().any(|a| a == GATE));
        let class = with.group_snapshot_class.as_ref().expect("the class");
        assert_eq!(class.api_version, "groupsnapshot.storage.k8s.io/v1beta1");
        assert_eq!(class.driver, "csi.simplyblock.io");
        assert_eq!(class.deletion_policy, "Delete");
        assert!(with.objects().contains_key(&ObjectKey::new(
            Kind::VolumeGroupSnapshotClass,
            GROUP_SNAPSHOT_CLASS
        )));
    }

    #[test]
    fn namespaced_objects_are_controlled_by_the_driver_and_cluster_scoped_ones_labelled() {
        let d = driver(json!({"enableCSIAddons": true}));
        let objects = manifests(
            &d,
            Settings {
                image: IMAGE,
                snapshots: true,
                group_snapshots: true,
                ca: None,
            },
        )
        .objects();
        assert_eq!(
            objects.keys().cloned().collect::<Vec<_>>(),
            every_key("csi.simplyblock.io", true, true),
            "with everything asked for, the driver is every object it may have"
        );
        for (key, object) in &objects {
            assert_eq!(
                object["metadata"]["labels"][MANAGED_BY_LABEL], MANAGED_BY_SIMPLYBLOCK_DRIVER,
                "{key}"
            );
            let owners = &object["metadata"]["ownerReferences"];
            if key.kind.namespaced() {
                assert_eq!(
                    owners[0]["uid"],
                    d.metadata.uid.clone().expect("uid"),
                    "{key}"
                );
                assert_eq!(owners[0]["controller"], true, "{key}");
                assert_eq!(
                    object["metadata"]["namespace"], "simplyblock-system",
                    "{key}"
                );
            } else {
                assert!(owners.is_null(), "{key}");
            }
        }
    }

    #[test]
    fn the_tls_mode_is_one_of_three() {
        let tls = |t: bool, m: bool| DriverTls {
            enable_tls: t,
            enable_mutual_tls: m,
            ..DriverTls::default()
        };
        assert_eq!(tls_mode(&tls(false, false)), "disabled");
        assert_eq!(tls_mode(&tls(false, true)), "disabled");
        assert_eq!(tls_mode(&tls(true, false)), "anonymous");
        assert_eq!(tls_mode(&tls(true, true)), "authenticated");
    }
}

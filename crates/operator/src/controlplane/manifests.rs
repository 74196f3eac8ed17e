//! A local control plane's objects, built as typed objects from its spec. Pure: the
//! controller applies what each install step returns, in order — [`foundation_db`] and
//! [`fdb_exporter`] (ApplyingFoundationDB), [`datastore`] (ApplyingDatastore), [`api`] and
//! [`services`] (ApplyingAPI) — and all of them again in the steady state. The workloads
//! are the reference chart's: the management API, admin control, the task runners and
//! the monitors (all sbcli, one image), FoundationDB's exporter and the object store.
//!
//! Every object is owned by the ControlPlane (controller reference) and labelled
//! `storage.simplyblock.io/managed-by: controlplane`, so deleting the ControlPlane deletes
//! them. Choices the reference leaves open:
//!
//! - The object store is a one-replica StatefulSet with a volume claim template: its data
//!   outlives its pod, and the operator needs no rights on PersistentVolumeClaims.
//! - TLS with cert-manager brings its own CA: a self-signed Issuer signs the CA
//!   Certificate, whose Secret backs the CA Issuer of the serving certificate (and of the
//!   operator's client certificate when mutual TLS is on). With OpenShift the service CA
//!   signs the serving certificate; it issues no client certificates, so mutual TLS needs
//!   cert-manager and is off with OpenShift.
//! - FoundationDB runs without TLS (no `FDB_TLS_*`): its pods' certificates are the
//!   FoundationDB operator's configuration, not installed here.
//! - The control plane calls the storage nodes (`SB_TLS_CONNECT`) over TLS when it serves
//!   TLS, presenting its own certificate when cert-manager issued it; sbcli takes only
//!   `disabled`, `anonymous` or `authenticated` there.
//! - The pods' readiness is a TCP check: an HTTP probe would fail under mutual TLS, and
//!   `/_meta/ready` is what the controller itself asks.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment, StatefulSet,
    StatefulSetSpec,
};
use k8s_openapi::api::core::v1::{
    Affinity, ConfigMap, ConfigMapEnvSource, ConfigMapVolumeSource, Container, ContainerPort,
    EmptyDirVolumeSource, EnvFromSource, EnvVar, EnvVarSource, HTTPGetAction, KeyToPath,
    ObjectFieldSelector, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodAffinityTerm,
    PodAntiAffinity, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ProjectedVolumeSource,
    ResourceRequirements, Secret, SecretKeySelector, SecretProjection, SecurityContext, Service,
    ServiceAccount, ServicePort, ServiceSpec, TCPSocketAction, Volume, VolumeMount,
    VolumeProjection, VolumeResourceRequirements,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use simplyblock_api::control_plane::{ControlPlane, LocalSource, TlsProvider};
use simplyblock_api::keys::{MANAGED_BY_CONTROL_PLANE, MANAGED_BY_LABEL};

use super::names::*;

const APP_LABEL: &str = "app.kubernetes.io/name";
const PART_OF_LABEL: &str = "app.kubernetes.io/part-of";
const PART_OF: &str = "simplyblock-control-plane";
/// Where the management API's serving certificate is mounted.
const TLS_DIR: &str = "/etc/simplyblock/tls";
/// Where the FoundationDB cluster file is mounted.
const FDB_DIR: &str = "/etc/foundationdb";
/// The OpenShift annotation that has the service CA issue a Service's certificate.
pub const OPENSHIFT_SERVING_CERT: &str = "service.beta.openshift.io/serving-cert-secret-name";
/// The OpenShift annotation that has the service CA bundle injected into a ConfigMap.
pub const OPENSHIFT_INJECT_CA: &str = "service.beta.openshift.io/inject-cabundle";
const OBJECT_STORE_PORT: i32 = 9000;
/// Where FoundationDB's exporter serves its metrics.
const FDB_EXPORTER_PORT: i32 = 9444;

/// One object to apply: what it is (for the API path) and the object.
#[derive(Clone, Debug)]
pub struct Manifest {
    pub resource: ApiResource,
    pub object: DynamicObject,
}

impl Manifest {
    fn typed<K>(object: &K) -> Manifest
    where
        K: Resource<DynamicType = ()> + serde::Serialize,
    {
        let resource = ApiResource::erase::<K>(&());
        let object = serde_json::to_value(object)
            .and_then(serde_json::from_value)
            .expect("a typed Kubernetes object is a dynamic one");
        Manifest { resource, object }
    }

    fn dynamic(group: &str, version: &str, kind: &str, plural: &str, object: Value) -> Manifest {
        let gvk = GroupVersionKind::gvk(group, version, kind);
        Manifest {
            resource: ApiResource::from_gvk_with_plural(&gvk, plural),
            object: serde_json::from_value(object).expect("a well-formed object"),
        }
    }

    /// `Kind/name`.
    pub fn describe(&self) -> String {
        format!("{}/{}", self.resource.kind, self.object.name_any())
    }
}

/// The FoundationDB operator's `FoundationDBCluster`.
pub fn foundationdb_cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apps.foundationdb.org", "v1beta2", "FoundationDBCluster"),
        "foundationdbclusters",
    )
}

/// cert-manager's `Certificate` (whose API decides whether TLS with cert-manager can be
/// set up).
pub fn certificate_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cert-manager.io", "v1", "Certificate"),
        "certificates",
    )
}

/// The management API's TLS, as the spec resolves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tls {
    /// Serve over TLS.
    pub serve: bool,
    pub provider: TlsProvider,
    /// Require client certificates (cert-manager only; see the module docs).
    pub mutual: bool,
}

impl Tls {
    pub fn of(local: &LocalSource) -> Tls {
        let serve = local.tls.enable_tls;
        let provider = local.tls.provider;
        Tls {
            serve,
            provider,
            mutual: serve && local.tls.enable_mutual_tls && provider == TlsProvider::CertManager,
        }
    }

    /// Whether cert-manager's API must be served to set this up.
    pub fn needs_cert_manager(self) -> bool {
        self.serve && self.provider == TlsProvider::CertManager
    }
}

fn labels(app: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (APP_LABEL.into(), app.into()),
        (PART_OF_LABEL.into(), PART_OF.into()),
        (MANAGED_BY_LABEL.into(), MANAGED_BY_CONTROL_PLANE.into()),
    ])
}

fn selector(app: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(APP_LABEL.into(), app.into())])
}

/// The selector and pod template of the pods of `app`, each running `pod` with the local
/// source's pull secrets and placement.
fn app_pods(local: &LocalSource, app: &str, pod: PodSpec) -> (LabelSelector, PodTemplateSpec) {
    let selector = LabelSelector {
        match_labels: Some(selector(app)),
        ..LabelSelector::default()
    };
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels(app)),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            image_pull_secrets: non_empty(local.image_pull_secrets.clone()),
            tolerations: non_empty(local.tolerations.clone()),
            node_selector: non_empty_map(local.node_selector.clone()),
            ..pod
        }),
    };
    (selector, template)
}

/// The metadata of an object the ControlPlane owns.
fn owned(cp: &ControlPlane, name: &str, app: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: cp.namespace(),
        labels: Some(labels(app)),
        owner_references: cp.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

fn owned_json(cp: &ControlPlane, name: &str, app: &str) -> Value {
    serde_json::to_value(owned(cp, name, app)).expect("metadata")
}

/// FoundationDB's redundancy for `replicas` storage processes: one copy below three, two
/// below five, three from five on.
pub fn redundancy_mode(replicas: i32) -> &'static str {
    match replicas {
        ..=2 => "single",
        3..=4 => "double",
        _ => "triple",
    }
}

/// ApplyingFoundationDB: the FoundationDBCluster.
pub fn foundation_db(cp: &ControlPlane, local: &LocalSource) -> Manifest {
    let fdb = &local.foundation_db;
    let mut claim = json!({"resources": {"requests": {"storage": "16Gi"}}});
    if let Some(class) = &fdb.storage_class_name {
        claim["storageClassName"] = json!(class);
    }
    // The reference's share of a FoundationDB process unless the spec sets one.
    let resources = fdb
        .resources
        .clone()
        .unwrap_or_else(|| resources(("100m", "256Mi"), ("300m", "512Mi")));
    let container = json!({"name": "foundationdb", "resources": resources});
    let mut pod = json!({"containers": [container]});
    if !local.tolerations.is_empty() {
        pod["tolerations"] = json!(local.tolerations);
    }
    if !local.node_selector.is_empty() {
        pod["nodeSelector"] = json!(local.node_selector);
    }
    if !local.image_pull_secrets.is_empty() {
        pod["imagePullSecrets"] = json!(local.image_pull_secrets);
    }
    let resource = foundationdb_cluster_resource();
    Manifest::dynamic(
        &resource.group,
        &resource.version,
        &resource.kind,
        &resource.plural,
        json!({
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": owned_json(cp, FDB_CLUSTER, FDB_CLUSTER),
            "spec": {
                "version": FOUNDATIONDB_VERSION,
                "databaseConfiguration": {"redundancy_mode": redundancy_mode(fdb.replicas)},
                "processCounts": {"storage": fdb.replicas},
                "processes": {"general": {
                    // Kernel AIO is not there in every container runtime.
                    "customParameters": ["knob_disable_posix_kernel_aio=1"],
                    "volumeClaimTemplate": {"spec": claim},
                    "podTemplate": {"spec": pod},
                }},
                // One process of a kind per worker; a lost one is replaced.
                "faultDomain": {"key": "kubernetes.io/hostname"},
                "automationOptions": {"replacements": {"enabled": true}},
                "minimumUptimeSecondsForBounce": 60,
                "sidecarContainer": {"enableLivenessProbe": true, "enableReadinessProbe": false},
                "routing": {"defineDNSLocalityFields": true},
                "useExplicitListenAddress": true,
            },
        }),
    )
}

/// ApplyingDatastore: the object store's Service and StatefulSet. Its credentials Secret
/// ([`object_store_credentials`]) is made once, before these.
pub fn datastore(cp: &ControlPlane, local: &LocalSource) -> Vec<Manifest> {
    let service = Service {
        metadata: owned(cp, OBJECT_STORE, OBJECT_STORE),
        spec: Some(ServiceSpec {
            selector: Some(selector(OBJECT_STORE)),
            ports: Some(vec![ServicePort {
                name: Some("api".into()),
                port: OBJECT_STORE_PORT,
                target_port: Some(IntOrString::String("api".into())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    let claim = PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("data".into()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: local.foundation_db.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".into(),
                    Quantity("10Gi".into()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    };
    let container = Container {
        name: "minio".into(),
        image: Some(OBJECT_STORE_IMAGE.into()),
        args: Some(vec![
            "server".into(),
            "/data".into(),
            "--console-address".into(),
            ":9001".into(),
        ]),
        env: Some(vec![
            credentials_env("MINIO_ROOT_USER", "rootUser"),
            credentials_env("MINIO_ROOT_PASSWORD", "rootPassword"),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("api".into()),
            container_port: OBJECT_STORE_PORT,
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(tcp_probe("api")),
        resources: Some(resources(("100m", "256Mi"), ("500m", "1Gi"))),
        volume_mounts: Some(vec![VolumeMount {
            name: "data".into(),
            mount_path: "/data".into(),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    };
    let (selector, template) = app_pods(
        local,
        OBJECT_STORE,
        PodSpec {
            containers: vec![container],
            ..PodSpec::default()
        },
    );
    let statefulset = StatefulSet {
        metadata: owned(cp, OBJECT_STORE, OBJECT_STORE),
        spec: StatefulSetSpec {
            service_name: Some(OBJECT_STORE.into()),
            replicas: Some(1),
            selector,
            template,
            volume_claim_templates: Some(vec![claim]),
            ..StatefulSetSpec::default()
        },
        ..StatefulSet::default()
    };
    vec![Manifest::typed(&service), Manifest::typed(&statefulset)]
}

/// The object store's root credentials, made once with `user` and `password` (random):
/// applying it again would change them under the running store.
pub fn object_store_credentials(cp: &ControlPlane, user: &str, password: &str) -> Secret {
    Secret {
        metadata: owned(cp, OBJECT_STORE_CREDENTIALS, OBJECT_STORE),
        string_data: Some(BTreeMap::from([
            ("rootUser".into(), user.into()),
            ("rootPassword".into(), password.into()),
        ])),
        ..Secret::default()
    }
}

fn tcp_probe(port: &str) -> Probe {
    Probe {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::String(port.into()),
            ..TCPSocketAction::default()
        }),
        period_seconds: Some(10),
        ..Probe::default()
    }
}

fn non_empty<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

fn non_empty_map(m: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!m.is_empty()).then_some(m)
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

/// `name` set from `key` of the object store's credentials Secret.
fn credentials_env(name: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: OBJECT_STORE_CREDENTIALS.into(),
                key: key.into(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// ApplyingAPI: the management API's ServiceAccount, configuration, TLS objects, Service
/// and Deployment, in that order (the Deployment last, once what it mounts is there).
pub fn api(cp: &ControlPlane, local: &LocalSource) -> Vec<Manifest> {
    let ns = cp.namespace().unwrap_or_default();
    let tls = Tls::of(local);
    let mut out = vec![
        Manifest::typed(&ServiceAccount {
            metadata: owned(cp, API, API),
            ..ServiceAccount::default()
        }),
        Manifest::typed(&ConfigMap {
            metadata: owned(cp, API_CONFIG, API),
            data: Some(BTreeMap::from([
                ("FDB_CLUSTER_FILE".into(), format!("{FDB_DIR}/fdb.cluster")),
                (
                    "SB_OBJECT_STORE_ENDPOINT".into(),
                    format!("http://{OBJECT_STORE}.{ns}.svc:{OBJECT_STORE_PORT}"),
                ),
                ("SB_API_PORT".into(), API_PORT.to_string()),
                ("SIMPLYBLOCK_LOG_LEVEL".into(), "INFO".into()),
                // The first port of the volumes' NVMe-oF listeners on the storage nodes.
                ("LVOL_NVMF_PORT_START".into(), "9110".into()),
            ])),
            ..ConfigMap::default()
        }),
    ];
    if tls.needs_cert_manager() {
        out.extend(cert_manager(cp, &ns, tls.mutual));
    }
    if tls.serve && tls.provider == TlsProvider::OpenShift {
        let mut ca = owned(cp, SERVICE_CA_CONFIG_MAP, API);
        ca.annotations = Some(BTreeMap::from([(
            OPENSHIFT_INJECT_CA.into(),
            "true".into(),
        )]));
        out.push(Manifest::typed(&ConfigMap {
            metadata: ca,
            ..ConfigMap::default()
        }));
    }
    let mut service_meta = owned(cp, API, API);
    if tls.serve && tls.provider == TlsProvider::OpenShift {
        service_meta.annotations = Some(BTreeMap::from([(
            OPENSHIFT_SERVING_CERT.into(),
            API_TLS_SECRET.into(),
        )]));
    }
    out.push(Manifest::typed(&Service {
        metadata: service_meta,
        spec: Some(ServiceSpec {
            selector: Some(selector(API)),
            ports: Some(vec![ServicePort {
                name: Some("api".into()),
                port: API_PORT.into(),
                target_port: Some(IntOrString::String("api".into())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }));
    out.push(Manifest::typed(&api_deployment(cp, local, tls)));
    out
}

/// The environment of every sbcli container of the control plane: its TLS settings, its
/// namespace, and the object store's credentials (the ConfigMap [`API_CONFIG`] carries the
/// rest).
fn sbcli_env(tls: Tls) -> Vec<EnvVar> {
    let provider = match tls.provider {
        TlsProvider::CertManager => "cert-manager",
        TlsProvider::OpenShift => "OpenShift",
    };
    let mut envs = vec![env("SB_TLS_SERVE", tls.serve.to_string())];
    if tls.serve {
        envs.extend([
            env("SB_TLS_PROVIDER", provider),
            // sbcli's settings (prefix SB_): tls_certificate, tls_key,
            // tls_certificate_authority.
            env("SB_TLS_CERTIFICATE", format!("{TLS_DIR}/tls.crt")),
            env("SB_TLS_KEY", format!("{TLS_DIR}/tls.key")),
            env("SB_TLS_CERTIFICATE_AUTHORITY", format!("{TLS_DIR}/ca.crt")),
        ]);
    }
    envs.push(env(
        "SB_TLS_CLIENT_AUTH",
        if tls.mutual { "required" } else { "none" },
    ));
    // The storage nodes require a client certificate: the control plane presents its own
    // whenever cert-manager issued it (for client auth too); OpenShift's service CA issues
    // certificates for serving only.
    let connect = match (tls.serve, tls.provider) {
        (true, TlsProvider::CertManager) => "authenticated",
        (true, TlsProvider::OpenShift) => "anonymous",
        (false, _) => "disabled",
    };
    envs.push(env("SB_TLS_CONNECT", connect));
    envs.push(EnvVar {
        name: "K8S_NAMESPACE".into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "metadata.namespace".into(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    });
    for (name, key) in [
        ("SB_OBJECT_STORE_ACCESS_KEY", "rootUser"),
        ("SB_OBJECT_STORE_SECRET_KEY", "rootPassword"),
    ] {
        envs.push(credentials_env(name, key));
    }
    envs
}

/// The volumes of every sbcli pod of the control plane and where its containers mount
/// them: the FoundationDB cluster file, and with TLS the certificate, key and CAs.
fn sbcli_volumes(tls: Tls) -> (Vec<Volume>, Vec<VolumeMount>) {
    let mut mounts = vec![VolumeMount {
        name: "fdb-cluster-file".into(),
        mount_path: FDB_DIR.into(),
        read_only: Some(true),
        ..VolumeMount::default()
    }];
    let mut volumes = vec![Volume {
        name: "fdb-cluster-file".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: FDB_CLUSTER_FILE_CONFIG.into(),
            items: Some(vec![KeyToPath {
                key: "cluster-file".into(),
                path: "fdb.cluster".into(),
                ..KeyToPath::default()
            }]),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }];
    if tls.serve {
        mounts.push(VolumeMount {
            name: "tls".into(),
            mount_path: TLS_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
        // The certificate and key from the serving Secret, the CAs to trust from the
        // trust Secret ([`trust`]): the pod starts once both exist.
        let project = |secret: &str, keys: &[&str]| VolumeProjection {
            secret: Some(SecretProjection {
                name: secret.into(),
                items: Some(
                    keys.iter()
                        .map(|k| KeyToPath {
                            key: (*k).into(),
                            path: (*k).into(),
                            ..KeyToPath::default()
                        })
                        .collect(),
                ),
                optional: Some(false),
            }),
            ..VolumeProjection::default()
        };
        volumes.push(Volume {
            name: "tls".into(),
            projected: Some(ProjectedVolumeSource {
                sources: Some(vec![
                    project(API_TLS_SECRET, &["tls.crt", "tls.key"]),
                    project(API_TRUST_SECRET, &["ca.crt"]),
                ]),
                ..ProjectedVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    (volumes, mounts)
}

/// Requests and limits of `cpu` and `memory`.
fn resources(requests: (&str, &str), limits: (&str, &str)) -> ResourceRequirements {
    let list = |(cpu, memory): (&str, &str)| {
        BTreeMap::from([
            ("cpu".into(), Quantity(cpu.into())),
            ("memory".into(), Quantity(memory.into())),
        ])
    };
    ResourceRequirements {
        requests: Some(list(requests)),
        limits: Some(list(limits)),
        ..ResourceRequirements::default()
    }
}

/// An sbcli container named `name` running `command` with the control plane's image,
/// environment and mounts.
fn sbcli_container(
    local: &LocalSource,
    tls: Tls,
    name: &str,
    command: &[&str],
    resources: ResourceRequirements,
) -> Container {
    Container {
        name: name.into(),
        image: Some(local.image.clone()),
        image_pull_policy: Some(local.image_pull_policy.clone()),
        command: Some(command.iter().map(|c| (*c).to_string()).collect()),
        env: Some(sbcli_env(tls)),
        env_from: Some(vec![EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: API_CONFIG.into(),
                optional: Some(false),
            }),
            ..EnvFromSource::default()
        }]),
        resources: Some(resources),
        volume_mounts: Some(sbcli_volumes(tls).1),
        ..Container::default()
    }
}

/// A Deployment of the control plane's sbcli pods named `app`: `replicas` pods of
/// `containers` under the control plane's ServiceAccount, on the host's network where
/// `host_network` (the services reach the storage nodes' data-plane ports as the nodes'
/// own processes do), one pod per worker when `spread`.
fn sbcli_deployment(
    cp: &ControlPlane,
    local: &LocalSource,
    tls: Tls,
    app: &str,
    replicas: i32,
    containers: Vec<Container>,
    (host_network, spread): (bool, bool),
) -> Deployment {
    let affinity = spread.then(|| Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                label_selector: Some(LabelSelector {
                    match_labels: Some(selector(app)),
                    ..LabelSelector::default()
                }),
                topology_key: "kubernetes.io/hostname".into(),
                ..PodAffinityTerm::default()
            }]),
            ..PodAntiAffinity::default()
        }),
        ..Affinity::default()
    });
    let (selector, template) = app_pods(
        local,
        app,
        PodSpec {
            service_account_name: Some(API.into()),
            host_network: host_network.then_some(true),
            dns_policy: host_network.then(|| "ClusterFirstWithHostNet".into()),
            affinity,
            containers,
            volumes: Some(sbcli_volumes(tls).0),
            ..PodSpec::default()
        },
    );
    Deployment {
        metadata: owned(cp, app, app),
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector,
            template,
            // Spread one per worker, a surge pod would have nowhere to go.
            strategy: spread.then(|| DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(0)),
                    max_unavailable: Some(IntOrString::Int(1)),
                }),
            }),
            ..DeploymentSpec::default()
        },
        ..Deployment::default()
    }
}

fn api_deployment(cp: &ControlPlane, local: &LocalSource, tls: Tls) -> Deployment {
    let mut container = sbcli_container(
        local,
        tls,
        "webappapi",
        &["python3", "simplyblock_web/app.py"],
        local
            .resources
            .clone()
            .unwrap_or_else(|| resources(("200m", "512Mi"), ("500m", "2Gi"))),
    );
    container.env.get_or_insert_default().extend([
        env("FLASK_DEBUG", "False"),
        env("FLASK_ENV", "production"),
        env("ENABLE_MONITORING", "false"),
    ]);
    container.ports = Some(vec![ContainerPort {
        name: Some("api".into()),
        container_port: API_PORT.into(),
        ..ContainerPort::default()
    }]);
    container.readiness_probe = Some(tcp_probe("api"));
    sbcli_deployment(
        cp,
        local,
        tls,
        API,
        local.replicas,
        vec![container],
        (false, true),
    )
}

/// The task runners, container name → sbcli service script: each drives one kind of the
/// control plane's tasks (a node add runs only when `tasks-node-add-runner` does).
pub const TASK_RUNNERS: [(&str, &str); 17] = [
    ("tasks-node-add-runner", "tasks_runner_node_add.py"),
    ("tasks-runner-restart", "tasks_runner_restart.py"),
    ("tasks-runner-migration", "tasks_runner_migration.py"),
    (
        "tasks-runner-lvol-migration",
        "tasks_runner_lvol_migration.py",
    ),
    (
        "tasks-runner-batch-migration",
        "tasks_runner_batch_migration.py",
    ),
    (
        "tasks-runner-failed-migration",
        "tasks_runner_failed_migration.py",
    ),
    ("tasks-runner-cluster-status", "tasks_cluster_status.py"),
    (
        "tasks-runner-new-device-migration",
        "tasks_runner_new_dev_migration.py",
    ),
    ("tasks-runner-port-allow", "tasks_runner_port_allow.py"),
    ("tasks-runner-jc-comp-resume", "tasks_runner_jc_comp.py"),
    (
        "tasks-runner-sync-lvol-del",
        "tasks_runner_sync_lvol_del.py",
    ),
    (
        "tasks-runner-cluster-expand",
        "tasks_runner_cluster_expand.py",
    ),
    ("tasks-runner-node-removal", "tasks_runner_node_removal.py"),
    (
        "tasks-runner-snapshot-replication",
        "snapshot_replication.py",
    ),
    ("tasks-runner-backup", "tasks_runner_backup.py"),
    ("tasks-runner-backup-merge", "tasks_runner_backup_merge.py"),
    (
        "tasks-runner-replication-final",
        "tasks_runner_replication_final.py",
    ),
];

/// The monitors and collectors, container name → sbcli service script.
pub const MONITORS: [(&str, &str); 10] = [
    ("storage-node-monitor", "storage_node_monitor.py"),
    ("mgmt-node-monitor", "mgmt_node_monitor.py"),
    ("lvol-stats-collector", "lvol_stat_collector.py"),
    (
        "main-distr-event-collector",
        "main_distr_event_collector.py",
    ),
    (
        "capacity-and-stats-collector",
        "capacity_and_stats_collector.py",
    ),
    ("capacity-monitor", "cap_monitor.py"),
    ("health-check", "health_check_service.py"),
    ("device-monitor", "device_monitor.py"),
    ("lvol-monitor", "lvol_monitor.py"),
    ("snapshot-monitor", "snapshot_monitor.py"),
];

/// One container per sbcli service of `services`, each with the services' small share.
fn service_containers(local: &LocalSource, tls: Tls, services: &[(&str, &str)]) -> Vec<Container> {
    services
        .iter()
        .map(|(name, script)| {
            let path = format!("simplyblock_core/services/{script}");
            let mut c = sbcli_container(
                local,
                tls,
                name,
                &["python3", &path],
                resources(("50m", "100Mi"), ("300m", "1Gi")),
            );
            if *name == "mgmt-node-monitor" {
                c.env
                    .get_or_insert_default()
                    .push(env("BACKEND_TYPE", "k8s"));
            }
            c
        })
        .collect()
}

/// The control plane's services beside its API: the administration pods, the task
/// runners and the monitors, with the Role their ServiceAccount ([`API`]) holds.
pub fn services(cp: &ControlPlane, local: &LocalSource) -> Vec<Manifest> {
    let tls = Tls::of(local);
    let admin = sbcli_container(
        local,
        tls,
        "simplyblock-control",
        &["/bin/bash", "-c", "trap : TERM INT; sleep infinity & wait"],
        resources(("200m", "256Mi"), ("600m", "1Gi")),
    );
    vec![
        // The pods list themselves and their peers (a restart finds the storage-node pods
        // of the namespace); every other object here is the operator's to change.
        Manifest::typed(&Role {
            metadata: owned(cp, CONTROL_ROLE, API),
            rules: Some(vec![PolicyRule {
                api_groups: Some(vec![String::new()]),
                resources: Some(vec!["pods".into()]),
                verbs: vec!["get".into(), "list".into(), "watch".into()],
                ..PolicyRule::default()
            }]),
        }),
        Manifest::typed(&RoleBinding {
            metadata: owned(cp, CONTROL_ROLE, API),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "Role".into(),
                name: CONTROL_ROLE.into(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: API.into(),
                namespace: cp.namespace(),
                ..Subject::default()
            }]),
        }),
        Manifest::typed(&sbcli_deployment(
            cp,
            local,
            tls,
            ADMIN_CONTROL,
            local.replicas,
            vec![admin],
            (true, true),
        )),
        Manifest::typed(&sbcli_deployment(
            cp,
            local,
            tls,
            TASKS,
            1,
            service_containers(local, tls, &TASK_RUNNERS),
            (true, false),
        )),
        Manifest::typed(&sbcli_deployment(
            cp,
            local,
            tls,
            MONITORING,
            1,
            service_containers(local, tls, &MONITORS),
            (true, false),
        )),
    ]
}

/// FoundationDB's Prometheus exporter (`:9444/metrics`): its Service and Deployment, read
/// only, as an unprivileged user.
pub fn fdb_exporter(cp: &ControlPlane, local: &LocalSource) -> Vec<Manifest> {
    let metrics_probe = |initial: i32, period: i32| Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/metrics".into()),
            port: IntOrString::String("metrics".into()),
            ..HTTPGetAction::default()
        }),
        initial_delay_seconds: Some(initial),
        period_seconds: Some(period),
        ..Probe::default()
    };
    let container = Container {
        name: "exporter".into(),
        image: Some(FDB_EXPORTER_IMAGE.into()),
        env: Some(vec![env(
            "FDB_CLUSTER_FILE",
            format!("{FDB_DIR}/fdb.cluster"),
        )]),
        ports: Some(vec![ContainerPort {
            name: Some("metrics".into()),
            container_port: FDB_EXPORTER_PORT,
            ..ContainerPort::default()
        }]),
        liveness_probe: Some(metrics_probe(15, 30)),
        readiness_probe: Some(metrics_probe(5, 10)),
        security_context: Some(SecurityContext {
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            privileged: Some(false),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "tmp".into(),
                mount_path: "/tmp".into(),
                ..VolumeMount::default()
            },
            VolumeMount {
                name: "fdb-cluster-file".into(),
                mount_path: FDB_DIR.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
        ]),
        resources: Some(resources(("50m", "64Mi"), ("200m", "128Mi"))),
        ..Container::default()
    };
    let cluster_file = sbcli_volumes(Tls {
        serve: false,
        ..Tls::of(local)
    })
    .0;
    let (pods, template) = app_pods(
        local,
        FDB_EXPORTER,
        PodSpec {
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(4059),
                run_as_group: Some(4059),
                fs_group: Some(4059),
                ..PodSecurityContext::default()
            }),
            automount_service_account_token: Some(false),
            termination_grace_period_seconds: Some(10),
            containers: vec![container],
            volumes: Some(
                std::iter::once(Volume {
                    name: "tmp".into(),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Volume::default()
                })
                .chain(cluster_file)
                .collect(),
            ),
            ..PodSpec::default()
        },
    );
    vec![
        Manifest::typed(&Service {
            metadata: owned(cp, FDB_EXPORTER, FDB_EXPORTER),
            spec: Some(ServiceSpec {
                selector: Some(selector(FDB_EXPORTER)),
                ports: Some(vec![ServicePort {
                    name: Some("metrics".into()),
                    port: FDB_EXPORTER_PORT,
                    target_port: Some(IntOrString::String("metrics".into())),
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }),
        Manifest::typed(&Deployment {
            metadata: owned(cp, FDB_EXPORTER, FDB_EXPORTER),
            spec: DeploymentSpec {
                replicas: Some(1),
                selector: pods,
                template,
                ..DeploymentSpec::default()
            },
            ..Deployment::default()
        }),
    ]
}

/// The Secret of what the management API trusts (`ca.crt`): `bundle`, made by
/// [`trust_bundle`].
pub fn trust(cp: &ControlPlane, bundle: &str) -> Manifest {
    Manifest::typed(&Secret {
        metadata: owned(cp, API_TRUST_SECRET, API),
        data: Some(BTreeMap::from([(
            "ca.crt".into(),
            k8s_openapi::ByteString(bundle.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    })
}

/// The management API's own CA (it verifies the operator's client certificate) followed
/// by the storage-node CAs (it verifies the nodes it calls and the certificates they
/// present); an entry already in the bundle is left out. Pure.
pub fn trust_bundle(api_ca: &str, storage_node_cas: &[String]) -> String {
    let mut bundle = String::new();
    for pem in std::iter::once(api_ca).chain(storage_node_cas.iter().map(String::as_str)) {
        let pem = pem.trim();
        if !pem.is_empty() && !bundle.contains(pem) {
            bundle.push_str(pem);
            bundle.push('\n');
        }
    }
    bundle
}

fn issuer(cp: &ControlPlane, name: &str, spec: Value) -> Manifest {
    cert_manager_object(cp, ("Issuer", "issuers"), name, spec)
}

fn certificate(cp: &ControlPlane, name: &str, spec: Value) -> Manifest {
    cert_manager_object(cp, ("Certificate", "certificates"), name, spec)
}

/// The cert-manager object `name` of `(kind, plural)`, owned by the ControlPlane.
fn cert_manager_object(
    cp: &ControlPlane,
    (kind, plural): (&str, &str),
    name: &str,
    spec: Value,
) -> Manifest {
    Manifest::dynamic(
        "cert-manager.io",
        "v1",
        kind,
        plural,
        json!({
            "apiVersion": "cert-manager.io/v1", "kind": kind,
            "metadata": owned_json(cp, name, API),
            "spec": spec,
        }),
    )
}

/// The CA chain and the certificates cert-manager issues from it.
fn cert_manager(cp: &ControlPlane, ns: &str, mutual: bool) -> Vec<Manifest> {
    let ca_issuer = json!({"name": CA, "kind": "Issuer"});
    let key = json!({"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"});
    let mut out = vec![
        issuer(cp, SELF_SIGNED_ISSUER, json!({"selfSigned": {}})),
        certificate(
            cp,
            CA,
            json!({
                "isCA": true,
                "commonName": CA,
                "secretName": CA,
                "duration": "87600h",
                "privateKey": key,
                "issuerRef": {"name": SELF_SIGNED_ISSUER, "kind": "Issuer"},
            }),
        ),
        issuer(cp, CA, json!({"ca": {"secretName": CA}})),
        certificate(
            cp,
            API,
            json!({
                "secretName": API_TLS_SECRET,
                "dnsNames": api_dns_names(ns),
                // Client auth too: with mutual TLS the management API presents it when it
                // calls the storage nodes (SB_TLS_CONNECT=authenticated).
                "usages": ["server auth", "client auth", "digital signature", "key encipherment"],
                "privateKey": key,
                "issuerRef": ca_issuer,
            }),
        ),
    ];
    if mutual {
        // One identity per caller: the CSI driver's plugins run on every worker, and
        // their certificate must not be the operator's.
        for (name, secret, common_name) in [
            (
                CLIENT_CERTIFICATE,
                CLIENT_TLS_SECRET,
                "simplyblock-operator",
            ),
            (
                CSI_CLIENT_CERTIFICATE,
                CSI_CLIENT_TLS_SECRET,
                "simplyblock-csi",
            ),
        ] {
            out.push(certificate(
                cp,
                name,
                json!({
                    "secretName": secret,
                    "commonName": common_name,
                    "usages": ["client auth", "digital signature"],
                    "privateKey": key,
                    "issuerRef": ca_issuer,
                }),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn control_plane(local: Value) -> ControlPlane {
        serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "ControlPlane",
            "metadata": {"name": "simplyblock", "namespace": "simplyblock",
                         "uid": "0c1d2e3f-0000-4000-8000-0000000000c9"},
            "spec": {"source": {"local": local}},
        }))
        .expect("control plane")
    }

    fn local_of(cp: &ControlPlane) -> LocalSource {
        cp.spec.source.local.clone().expect("local")
    }

    /// Every object of every step as one YAML document each, in the order applied.
    /// Every object of every step, in the order applied.
    fn everything(cp: &ControlPlane) -> Vec<Manifest> {
        let local = local_of(cp);
        let mut all = vec![foundation_db(cp, &local)];
        all.extend(fdb_exporter(cp, &local));
        all.extend(datastore(cp, &local));
        all.extend(api(cp, &local));
        all.extend(services(cp, &local));
        all
    }

    fn yaml(cp: &ControlPlane) -> String {
        everything(cp)
            .iter()
            .map(|m| serde_saphyr::to_string(&m.object).expect("YAML"))
            .collect::<Vec<_>>()
            .join("---\n")
    }

    /// The checked-in text of `snapshots/<file>`; `UPDATE_EXPECT=1` writes `actual` there.
    fn expected(file: &str, actual: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/controlplane/snapshots")
            .join(file);
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            std::fs::create_dir_all(path.parent().expect("dir")).expect("dir");
            std::fs::write(&path, actual).expect("write");
        }
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn the_management_api_trusts_its_own_ca_first_then_the_storage_node_cas() {
        let nodes = [
            "NODE-A\n".to_string(),
            "API".into(),
            "NODE-B\nNODE-A".into(),
        ];
        assert_eq!(
            trust_bundle("API\n", &nodes),
            "API\nNODE-A\nNODE-B\nNODE-A\n",
            "an entry already in the bundle is left out"
        );
        assert_eq!(trust_bundle("API", &[]), "API\n");
    }

    #[test]
    fn a_control_plane_of_defaults_renders_as_its_snapshot() {
        // The defaults: TLS and mutual TLS on, with cert-manager.
        let cp = control_plane(json!({"image": "quay.io/simplyblock-io/simplyblock:25.10.1"}));
        let rendered = yaml(&cp);
        assert_eq!(rendered, expected("defaults.yaml", &rendered));
    }

    #[test]
    fn a_tuned_control_plane_without_tls_renders_as_its_snapshot() {
        let cp = control_plane(json!({
            "image": "mirror.example.com/sb/simplyblock:25.10.1",
            "imagePullPolicy": "Always",
            "imagePullSecrets": [{"name": "mirror-pull"}],
            "replicas": 3,
            "foundationDB": {"replicas": 5, "storageClassName": "fast",
                             "resources": {"requests": {"cpu": "1", "memory": "4Gi"}}},
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
            "tolerations": [{"key": "control-plane", "operator": "Exists", "effect": "NoSchedule"}],
            "nodeSelector": {"simplyblock.io/control-plane": "true"},
            "tls": {"enableTLS": false},
        }));
        let rendered = yaml(&cp);
        assert_eq!(rendered, expected("tuned-plain.yaml", &rendered));
    }

    #[test]
    fn openshift_annotates_the_service_and_asks_for_the_service_ca() {
        let cp = control_plane(json!({
            "image": "quay.io/simplyblock-io/simplyblock:25.10.1",
            "tls": {"provider": "OpenShift"},
        }));
        let local = local_of(&cp);
        let tls = Tls::of(&local);
        assert!(
            tls.serve && !tls.mutual,
            "no client certificates from the service CA"
        );
        let objects = api(&cp, &local);
        let kinds: Vec<String> = objects.iter().map(Manifest::describe).collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount/simplyblock-webappapi",
                "ConfigMap/simplyblock-webappapi-config",
                "ConfigMap/simplyblock-service-ca",
                "Service/simplyblock-webappapi",
                "Deployment/simplyblock-webappapi",
            ]
        );
        let service = &objects[3].object;
        assert_eq!(
            service
                .annotations()
                .get(OPENSHIFT_SERVING_CERT)
                .map(String::as_str),
            Some(API_TLS_SECRET)
        );
        assert_eq!(
            objects[2]
                .object
                .annotations()
                .get(OPENSHIFT_INJECT_CA)
                .map(String::as_str),
            Some("true")
        );
    }

    #[test]
    fn every_object_is_owned_by_the_control_plane_and_labelled() {
        let cp = control_plane(json!({"image": "quay.io/simplyblock-io/simplyblock:25.10.1"}));
        for m in &everything(&cp) {
            let owners = m.object.owner_references();
            assert_eq!(owners.len(), 1, "{}", m.describe());
            assert_eq!(owners[0].kind, "ControlPlane");
            assert_eq!(owners[0].controller, Some(true));
            assert_eq!(
                m.object.labels().get(MANAGED_BY_LABEL).map(String::as_str),
                Some("controlplane"),
                "{}",
                m.describe()
            );
            assert_eq!(m.object.namespace().as_deref(), Some("simplyblock"));
        }
    }

    #[test]
    fn redundancy_follows_the_storage_processes() {
        let modes: Vec<&str> = (1..=6).map(redundancy_mode).collect();
        assert_eq!(
            modes,
            ["single", "single", "double", "double", "triple", "triple"]
        );
    }
    /// One container of the reference's control plane, as its chart renders it.
    struct Fact {
        workload: &'static str,
        container: &'static str,
        /// The command; `None`: the image's own entry point.
        command: Option<&'static [&'static str]>,
        ports: &'static [(&'static str, i32)],
        /// `tcp`, `http <path>` or nothing, for readiness.
        readiness: Option<&'static str>,
        host_network: bool,
        /// Where the container mounts something.
        mounts: &'static [&'static str],
        /// (cpu, memory) requested, and the limits.
        requests: (&'static str, &'static str),
        limits: (&'static str, &'static str),
        privileged: bool,
    }

    const SBCLI_MOUNTS: &[&str] = &["/etc/foundationdb", "/etc/simplyblock/tls"];

    fn service_fact(
        workload: &'static str,
        container: &'static str,
        command: &'static [&'static str],
    ) -> Fact {
        Fact {
            workload,
            container,
            command: Some(command),
            ports: &[],
            readiness: None,
            host_network: true,
            mounts: SBCLI_MOUNTS,
            requests: ("50m", "100Mi"),
            limits: ("300m", "1Gi"),
            privileged: false,
        }
    }

    /// The reference chart's control plane (controlplane_deploy.yaml,
    /// controlplane_foundationdb_exporter.yaml), container by container. Its
    /// FoundationDB operator (simplyblock-fdb-controller-manager) is a prerequisite here,
    /// and its observability stack (graylog, grafana, thanos) is off by its default.
    fn reference() -> Vec<Fact> {
        macro_rules! svc {
            ($w:expr, $c:literal, $script:literal) => {
                service_fact(
                    $w,
                    $c,
                    &["python3", concat!("simplyblock_core/services/", $script)],
                )
            };
        }
        vec![
            Fact {
                workload: API,
                container: "webappapi",
                command: Some(&["python3", "simplyblock_web/app.py"]),
                ports: &[("api", 5000)],
                // The reference has none; see the module docs.
                readiness: Some("tcp"),
                host_network: false,
                mounts: SBCLI_MOUNTS,
                requests: ("200m", "512Mi"),
                limits: ("500m", "2Gi"),
                privileged: false,
            },
            Fact {
                workload: ADMIN_CONTROL,
                container: "simplyblock-control",
                command: Some(&["/bin/bash", "-c", "trap : TERM INT; sleep infinity & wait"]),
                ports: &[],
                readiness: None,
                host_network: true,
                mounts: SBCLI_MOUNTS,
                requests: ("200m", "256Mi"),
                limits: ("600m", "1Gi"),
                privileged: false,
            },
            svc!(
                MONITORING,
                "storage-node-monitor",
                "storage_node_monitor.py"
            ),
            svc!(MONITORING, "mgmt-node-monitor", "mgmt_node_monitor.py"),
            svc!(MONITORING, "lvol-stats-collector", "lvol_stat_collector.py"),
            svc!(
                MONITORING,
                "main-distr-event-collector",
                "main_distr_event_collector.py"
            ),
            svc!(
                MONITORING,
                "capacity-and-stats-collector",
                "capacity_and_stats_collector.py"
            ),
            svc!(MONITORING, "capacity-monitor", "cap_monitor.py"),
            svc!(MONITORING, "health-check", "health_check_service.py"),
            svc!(MONITORING, "device-monitor", "device_monitor.py"),
            svc!(MONITORING, "lvol-monitor", "lvol_monitor.py"),
            svc!(MONITORING, "snapshot-monitor", "snapshot_monitor.py"),
            svc!(TASKS, "tasks-node-add-runner", "tasks_runner_node_add.py"),
            svc!(TASKS, "tasks-runner-restart", "tasks_runner_restart.py"),
            svc!(TASKS, "tasks-runner-migration", "tasks_runner_migration.py"),
            svc!(
                TASKS,
                "tasks-runner-lvol-migration",
                "tasks_runner_lvol_migration.py"
            ),
            svc!(
                TASKS,
                "tasks-runner-batch-migration",
                "tasks_runner_batch_migration.py"
            ),
            svc!(
                TASKS,
                "tasks-runner-failed-migration",
                "tasks_runner_failed_migration.py"
            ),
            svc!(
                TASKS,
                "tasks-runner-cluster-status",
                "tasks_cluster_status.py"
            ),
            svc!(
                TASKS,
                "tasks-runner-new-device-migration",
                "tasks_runner_new_dev_migration.py"
            ),
            svc!(
                TASKS,
                "tasks-runner-port-allow",
                "tasks_runner_port_allow.py"
            ),
            svc!(
                TASKS,
                "tasks-runner-jc-comp-resume",
                "tasks_runner_jc_comp.py"
            ),
            svc!(
                TASKS,
                "tasks-runner-sync-lvol-del",
                "tasks_runner_sync_lvol_del.py"
            ),
            svc!(
                TASKS,
                "tasks-runner-cluster-expand",
                "tasks_runner_cluster_expand.py"
            ),
            svc!(
                TASKS,
                "tasks-runner-node-removal",
                "tasks_runner_node_removal.py"
            ),
            svc!(
                TASKS,
                "tasks-runner-snapshot-replication",
                "snapshot_replication.py"
            ),
            svc!(TASKS, "tasks-runner-backup", "tasks_runner_backup.py"),
            svc!(
                TASKS,
                "tasks-runner-backup-merge",
                "tasks_runner_backup_merge.py"
            ),
            svc!(
                TASKS,
                "tasks-runner-replication-final",
                "tasks_runner_replication_final.py"
            ),
            Fact {
                workload: FDB_EXPORTER,
                container: "exporter",
                command: None,
                ports: &[("metrics", 9444)],
                readiness: Some("http /metrics"),
                host_network: false,
                mounts: &["/tmp", "/etc/foundationdb"],
                requests: ("50m", "64Mi"),
                limits: ("200m", "128Mi"),
                privileged: false,
            },
            Fact {
                workload: OBJECT_STORE,
                container: "minio",
                command: None,
                ports: &[("api", 9000)],
                readiness: Some("tcp"),
                host_network: false,
                mounts: &["/data"],
                requests: ("100m", "256Mi"),
                limits: ("500m", "1Gi"),
                privileged: false,
            },
        ]
    }

    /// A rendered container as the facts of [`Fact`] put it.
    fn rendered_fact(workload: &str, pod: &PodSpec, c: &Container) -> String {
        let quantity = |list: Option<&BTreeMap<String, Quantity>>, key: &str| {
            list.and_then(|l| l.get(key))
                .map(|q| q.0.clone())
                .unwrap_or_default()
        };
        let resources = c.resources.clone().unwrap_or_default();
        let readiness = c
            .readiness_probe
            .as_ref()
            .map(|p| match (&p.tcp_socket, &p.http_get) {
                (Some(_), _) => "tcp".to_string(),
                (_, Some(h)) => format!("http {}", h.path.clone().unwrap_or_default()),
                _ => "other".into(),
            });
        format!(
            "{workload}/{}: command {:?} ports {:?} readiness {:?} hostNetwork {} mounts {:?} requests ({}, {}) limits ({}, {}) privileged {}",
            c.name,
            c.command,
            c.ports
                .iter()
                .flatten()
                .map(|p| (p.name.clone().unwrap_or_default(), p.container_port))
                .collect::<Vec<_>>(),
            readiness,
            pod.host_network.unwrap_or(false),
            c.volume_mounts
                .iter()
                .flatten()
                .map(|m| m.mount_path.clone())
                .collect::<Vec<_>>(),
            quantity(resources.requests.as_ref(), "cpu"),
            quantity(resources.requests.as_ref(), "memory"),
            quantity(resources.limits.as_ref(), "cpu"),
            quantity(resources.limits.as_ref(), "memory"),
            c.security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false),
        )
    }

    fn expected_fact(f: &Fact) -> String {
        format!(
            "{}/{}: command {:?} ports {:?} readiness {:?} hostNetwork {} mounts {:?} requests ({}, {}) limits ({}, {}) privileged {}",
            f.workload,
            f.container,
            f.command
                .map(|c| c.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
            f.ports
                .iter()
                .map(|(n, p)| (n.to_string(), *p))
                .collect::<Vec<_>>(),
            f.readiness.map(str::to_string),
            f.host_network,
            f.mounts.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
            f.requests.0,
            f.requests.1,
            f.limits.0,
            f.limits.1,
            f.privileged,
        )
    }

    /// The typed object of `m`.
    fn typed<T: serde::de::DeserializeOwned>(m: &Manifest) -> T {
        serde_json::to_value(&m.object)
            .and_then(serde_json::from_value)
            .unwrap_or_else(|e| panic!("{} is not of its kind: {e}", m.describe()))
    }

    #[test]
    fn every_container_the_reference_runs_is_rendered_as_the_reference_renders_it() {
        let image = "quay.io/simplyblock-io/simplyblock:25.10.1";
        let cp = control_plane(json!({"image": image}));
        let mut rendered = Vec::new();
        let mut images = BTreeMap::new();
        let mut accounts = BTreeMap::new();
        for m in everything(&cp) {
            let name = m.object.name_any();
            let pod = match m.resource.kind.as_str() {
                "Deployment" => typed::<Deployment>(&m).spec.template.spec,
                "StatefulSet" => typed::<StatefulSet>(&m).spec.template.spec,
                _ => continue,
            };
            let pod = pod.expect("a pod template");
            accounts.insert(name.clone(), pod.service_account_name.clone());
            for c in &pod.containers {
                rendered.push(rendered_fact(&name, &pod, c));
                images.insert(
                    format!("{name}/{}", c.name),
                    c.image.clone().unwrap_or_default(),
                );
            }
        }
        let mut expected: Vec<String> = reference().iter().map(expected_fact).collect();
        rendered.sort();
        expected.sort();
        assert_eq!(rendered, expected);

        // Every sbcli container runs the control plane's image; the others their own.
        for f in reference() {
            let want = match f.workload {
                FDB_EXPORTER => FDB_EXPORTER_IMAGE,
                OBJECT_STORE => OBJECT_STORE_IMAGE,
                _ => image,
            };
            assert_eq!(images[&format!("{}/{}", f.workload, f.container)], want);
        }
        // The sbcli pods run as the control plane's account, which its Role names; the
        // exporter and the object store need none.
        for (workload, account) in &accounts {
            let want = [API, ADMIN_CONTROL, TASKS, MONITORING]
                .contains(&workload.as_str())
                .then(|| API.to_string());
            assert_eq!(account, &want, "{workload}");
        }
        let components: Vec<&str> = COMPONENTS.iter().map(|(n, _)| *n).collect();
        for workload in accounts.keys() {
            assert!(
                components.contains(&workload.as_str()),
                "{workload} is reported"
            );
        }
    }

    #[test]
    fn the_control_planes_role_reads_pods_and_nothing_else() {
        let cp = control_plane(json!({"image": "quay.io/simplyblock-io/simplyblock:25.10.1"}));
        let all = services(&cp, &local_of(&cp));
        let role: Role = typed(&all[0]);
        let rules: Vec<(Vec<String>, Vec<String>, Vec<String>)> = role
            .rules
            .unwrap_or_default()
            .into_iter()
            .map(|r| {
                (
                    r.api_groups.unwrap_or_default(),
                    r.resources.unwrap_or_default(),
                    r.verbs,
                )
            })
            .collect();
        assert_eq!(
            rules,
            [(
                vec![String::new()],
                vec!["pods".to_string()],
                vec!["get".to_string(), "list".into(), "watch".into()]
            )]
        );
        let binding: RoleBinding = typed(&all[1]);
        assert_eq!(binding.role_ref.name, CONTROL_ROLE);
        assert_eq!(binding.subjects.unwrap_or_default()[0].name, API);
    }
}

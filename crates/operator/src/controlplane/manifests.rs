//! A local control plane's objects, built as typed objects from its spec. Pure: the
//! controller applies what each install step returns, in order — [`foundation_db`]
//! (ApplyingFoundationDB), [`datastore`] (ApplyingDatastore), [`api`] (ApplyingAPI) — and
//! all of them again in the steady state.
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

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, ConfigMapVolumeSource, Container, ContainerPort, EnvFromSource,
    EnvVar, EnvVarSource, KeyToPath, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSpec,
    PodTemplateSpec, Probe, ProjectedVolumeSource, Secret, SecretKeySelector, SecretProjection,
    Service, ServiceAccount, ServicePort, ServiceSpec, TCPSocketAction, Volume, VolumeMount,
    VolumeProjection, VolumeResourceRequirements,
};
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
    let mut container = json!({"name": "foundationdb"});
    if let Some(resources) = &fdb.resources {
        container["resources"] = json!(resources);
    }
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
                    "volumeClaimTemplate": {"spec": claim},
                    "podTemplate": {"spec": pod},
                }},
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

fn api_deployment(cp: &ControlPlane, local: &LocalSource, tls: Tls) -> Deployment {
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
    // The storage nodes require a client certificate: the API presents its own whenever
    // cert-manager issued it (for client auth too); OpenShift's service CA issues
    // certificates for serving only.
    let connect = match (tls.serve, tls.provider) {
        (true, TlsProvider::CertManager) => "authenticated",
        (true, TlsProvider::OpenShift) => "anonymous",
        (false, _) => "disabled",
    };
    envs.push(env("SB_TLS_CONNECT", connect));
    for (name, key) in [
        ("SB_OBJECT_STORE_ACCESS_KEY", "rootUser"),
        ("SB_OBJECT_STORE_SECRET_KEY", "rootPassword"),
    ] {
        envs.push(credentials_env(name, key));
    }
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
    let container = Container {
        name: "webappapi".into(),
        image: Some(local.image.clone()),
        image_pull_policy: Some(local.image_pull_policy.clone()),
        env: Some(envs),
        env_from: Some(vec![EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: API_CONFIG.into(),
                optional: Some(false),
            }),
            ..EnvFromSource::default()
        }]),
        ports: Some(vec![ContainerPort {
            name: Some("api".into()),
            container_port: API_PORT.into(),
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(tcp_probe("api")),
        resources: local.resources.clone(),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    let (selector, template) = app_pods(
        local,
        API,
        PodSpec {
            service_account_name: Some(API.into()),
            containers: vec![container],
            volumes: Some(volumes),
            ..PodSpec::default()
        },
    );
    Deployment {
        metadata: owned(cp, API, API),
        spec: DeploymentSpec {
            replicas: Some(local.replicas),
            selector,
            template,
            ..DeploymentSpec::default()
        },
        ..Deployment::default()
    }
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
    fn yaml(cp: &ControlPlane) -> String {
        let local = local_of(cp);
        let mut all = vec![foundation_db(cp, &local)];
        all.extend(datastore(cp, &local));
        all.extend(api(cp, &local));
        all.iter()
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
        let local = local_of(&cp);
        let mut all = vec![foundation_db(&cp, &local)];
        all.extend(datastore(&cp, &local));
        all.extend(api(&cp, &local));
        for m in &all {
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
}

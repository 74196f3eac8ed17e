//! The storage-node workload's objects, built as typed objects from the cluster, its
//! StorageNodes and their workers. Pure: the controller reads the world, calls
//! [`manifests`] and applies each object it returns.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource,
    HostPathVolumeSource, KeyToPath, ObjectFieldSelector, PodCertificateProjection, PodSpec,
    PodTemplateSpec, Probe, ProjectedVolumeSource, SecretProjection, SecretVolumeSource,
    SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec, TCPSocketAction, Volume,
    VolumeMount, VolumeProjection,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use simplyblock_api::storage_cluster::PullPolicy;
use simplyblock_api::{StorageCluster, StorageNode};

use super::names::{
    CLUSTER_LABEL, DEFAULT_IMAGE, ENROLLMENT_LABEL, MANAGED_BY, MANAGED_BY_LABEL, NAMESPACE_LABEL,
    SERVICE_NAME, topology_label,
};
use super::serving;

/// The label every object of the workload carries, and its pods select on, with its value.
const APP_LABEL: &str = "app.kubernetes.io/name";
const APP: &str = "simplyblock-storage-node";
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
/// The key a storage-node pod's kubelet generates for its own certificate.
pub const POD_CERTIFICATE_KEY_TYPE: &str = "ECDSAP256";
/// The longest a storage node's own certificate may live (30 days); its kubelet asks for a
/// new one before it ends.
pub const POD_CERTIFICATE_MAX_EXPIRATION_SECONDS: i32 = 30 * 24 * 60 * 60;

/// A worker as its endpoint: name, first internal address, readiness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worker {
    pub name: String,
    pub address: Option<String>,
    pub ready: bool,
}

/// Every object the workload applies, for one cluster.
#[derive(Debug, Clone)]
pub struct Manifests {
    /// One env file per worker, read by the storage-node pods.
    pub config: ConfigMap,
    /// The headless Service of the namespace, shared by its clusters.
    pub service: Service,
    /// This cluster's endpoints of [`Manifests::service`].
    pub endpoints: EndpointSlice,
    pub account: ServiceAccount,
    pub role: Role,
    pub binding: RoleBinding,
    pub daemonset: DaemonSet,
}

/// The workload of `cluster` for its `nodes` on `workers`, serving the storage-node API on
/// `port`, its pods of the serving certificate whose Secret is at `certificate_version`.
/// With `pod_certificates` (the API server serves PodCertificateRequests) each pod gets a
/// certificate of its own instead of the Secret's shared one; see [`tls_volume`].
pub fn manifests(
    cluster: &StorageCluster,
    nodes: &[StorageNode],
    workers: &[Worker],
    port: u16,
    certificate_version: &str,
    pod_certificates: bool,
) -> Manifests {
    let name = cluster.name_any();
    let account = super::names::account(&name);
    let config_name = format!("simplyblock-storage-node-config-{name}");
    Manifests {
        config: ConfigMap {
            metadata: owned(cluster, &config_name),
            data: Some(
                nodes
                    .iter()
                    .map(|n| (n.spec.worker_node.clone(), node_config(cluster, n)))
                    .collect(),
            ),
            ..ConfigMap::default()
        },
        service: service(cluster, port),
        endpoints: endpoint_slice(cluster, port, workers),
        // The pods' identity: a ServiceAccount of the cluster, allowed what the storage
        // node does in its namespace (see [`role_rules`]) and nothing else.
        account: ServiceAccount {
            metadata: owned(cluster, &account),
            automount_service_account_token: Some(true),
            ..ServiceAccount::default()
        },
        role: Role {
            metadata: owned(cluster, &account),
            rules: Some(role_rules(&config_name)),
        },
        binding: RoleBinding {
            metadata: owned(cluster, &account),
            role_ref: RoleRef {
                api_group: Some(RBAC_GROUP.into()),
                kind: "Role".into(),
                name: account.clone(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: account.clone(),
                namespace: cluster.namespace(),
                ..Subject::default()
            }]),
        },
        daemonset: daemonset(
            cluster,
            &account,
            &config_name,
            port,
            certificate_version,
            pod_certificates,
        ),
    }
}

/// The labels each worker of the cluster carries: the enrollment label, and the topology
/// label of each slot whose node the control plane has named. Pure.
pub fn enrollment(
    cluster: &StorageCluster,
    nodes: &[StorageNode],
) -> BTreeMap<String, BTreeMap<String, String>> {
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let cluster_uuid = cluster.status.as_ref().and_then(|s| s.uuid.as_deref());
    let mut wanted: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for n in nodes {
        let labels = wanted.entry(n.spec.worker_node.clone()).or_default();
        labels.insert(ENROLLMENT_LABEL.to_string(), name.clone());
        labels.insert(NAMESPACE_LABEL.to_string(), namespace.clone());
        if let (Some(cu), Some(uuid)) =
            (cluster_uuid, n.status.as_ref().and_then(|s| s.uuid.clone()))
        {
            labels.insert(topology_label(cu, n.spec.slot.unwrap_or(0)), uuid);
        }
    }
    wanted
}

/// The env file of one node: the configuration the storage node reads at start.
fn node_config(cluster: &StorageCluster, node: &StorageNode) -> String {
    let c = &node.spec.config;
    let storage = cluster.spec.storage_nodes.as_ref();
    let mut env = vec![
        format!("MAX_SUBSYS_COUNT={}", cluster.spec.max_subsystem_count),
        format!("VCPU_COUNT={}", c.sizing.vcpu_count),
    ];
    if let Some(h) = c
        .sizing
        .min_huge_pages_size
        .as_ref()
        .or(cluster.spec.min_huge_pages_size.as_ref())
    {
        env.push(format!("MAX_HUGE_PAGES_SIZE={h}"));
    }
    if !c.device_names.is_empty() {
        env.push(format!("NVME_DEVICES={}", c.device_names.join(",")));
    }
    if !c.pcie_allow_list.is_empty() {
        env.push(format!("PCI_ALLOWED={}", c.pcie_allow_list.join(",")));
    }
    if !c.pcie_deny_list.is_empty() {
        env.push(format!("PCI_BLOCKED={}", c.pcie_deny_list.join(",")));
    }
    if let Some(jm) = &c.journal_manager {
        if let Some(p) = jm.percent_per_device {
            env.push(format!("JM_PERCENT={p}"));
        }
        if let Some(count) = jm.count {
            env.push(format!("HA_JM_COUNT={count}"));
        }
    }
    if let Some(cpu) = c
        .reserved_system_cpu
        .as_ref()
        .or(storage.and_then(|s| s.reserved_system_cpu.as_ref()))
    {
        env.push(format!("RESERVED_SYSTEM_CPU={cpu}"));
    }
    env.join("\n") + "\n"
}

/// The namespace's headless Service. Each cluster of the namespace adds its owner
/// reference under a field manager of its own, so the Service goes when the last cluster
/// does.
fn service(cluster: &StorageCluster, port: u16) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(SERVICE_NAME.into()),
            namespace: cluster.namespace(),
            labels: Some(BTreeMap::from([(APP_LABEL.into(), APP.into())])),
            owner_references: owner(cluster, false),
            ..ObjectMeta::default()
        },
        // No selector: the pods run on the host network, so the endpoint controller would
        // publish bare addresses; the cluster's EndpointSlice gives each worker its own
        // name, `<worker>.simplyblock-storage-node-api.<namespace>.svc`, which is how the
        // control plane reaches a node.
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            ports: Some(vec![ServicePort {
                name: Some("api".into()),
                port: port.into(),
                target_port: Some(IntOrString::Int(port.into())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The cluster's EndpointSlice of the storage-node Service: one endpoint per worker with
/// an address, named after the worker so each gets its own DNS name.
fn endpoint_slice(cluster: &StorageCluster, port: u16, workers: &[Worker]) -> EndpointSlice {
    let name = cluster.name_any();
    let endpoints = workers
        .iter()
        .filter_map(|w| {
            Some(Endpoint {
                addresses: vec![w.address.clone()?],
                hostname: Some(w.name.clone()),
                node_name: Some(w.name.clone()),
                conditions: Some(EndpointConditions {
                    ready: Some(w.ready),
                    ..EndpointConditions::default()
                }),
                ..Endpoint::default()
            })
        })
        .collect();
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("{SERVICE_NAME}-{name}")),
            namespace: cluster.namespace(),
            labels: Some(BTreeMap::from([
                ("kubernetes.io/service-name".into(), SERVICE_NAME.into()),
                (
                    "endpointslice.kubernetes.io/managed-by".into(),
                    "storage.simplyblock.io".into(),
                ),
                (CLUSTER_LABEL.into(), name),
                (MANAGED_BY_LABEL.into(), MANAGED_BY.into()),
            ])),
            owner_references: owner(cluster, true),
            ..ObjectMeta::default()
        },
        address_type: "IPv4".into(),
        ports: Some(vec![EndpointPort {
            name: Some("api".into()),
            port: Some(port.into()),
            protocol: Some("TCP".into()),
            ..EndpointPort::default()
        }]),
        endpoints: Some(endpoints),
    }
}

fn daemonset(
    cluster: &StorageCluster,
    account: &str,
    config_name: &str,
    port: u16,
    certificate_version: &str,
    pod_certificates: bool,
) -> DaemonSet {
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let storage = cluster.spec.storage_nodes.clone().unwrap_or_default();
    let image = storage
        .image
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| DEFAULT_IMAGE.to_string());
    let pull = pull_policy(storage.image_pull_policy);
    let hostname = EnvVar {
        name: "HOSTNAME".into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "spec.nodeName".into(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    };
    // Mutual TLS with the serving Secret's material: callers (the operator, the control
    // plane) must present a certificate the bundle `ca.crt` verifies, and the node presents
    // its own when it calls out.
    let tls_env = [
        plain_env("SB_TLS_SERVE", "1"),
        plain_env("SB_TLS_CLIENT_AUTH", "required"),
        plain_env("SB_TLS_CONNECT", "authenticated"),
        plain_env("SB_TLS_PROVIDER", "cert-manager"),
    ];
    let flag = |set: Option<bool>| {
        if set.unwrap_or(false) {
            "true"
        } else {
            "false"
        }
    };
    let mut env = vec![
        EnvVar {
            name: "NODE_NAME".into(),
            ..hostname.clone()
        },
        hostname.clone(),
    ];
    env.extend(tls_env.clone());
    env.extend([
        plain_env("UBUNTU_HOST", flag(storage.ubuntu_host)),
        plain_env("OPENSHIFT_CLUSTER", flag(Some(storage.openshift.is_some()))),
        plain_env(
            "SKIP_KUBELET_CONFIGURATION",
            flag(Some(!storage.enable_kubelet_configuration.unwrap_or(true))),
        ),
        plain_env("CPU_TOPOLOGY_ENABLED", flag(storage.enable_cpu_topology)),
        plain_env("SIMPLY_BLOCK_DOCKER_IMAGE", &image),
    ]);
    if let Some(openshift) = &storage.openshift {
        env.push(plain_env("OPENSHIFT_MCP", &openshift.machine_config_pool));
    }
    let mount = |name: &str, path: &str, read_only: bool| VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    };
    let config_mount = mount("config", NODE_CONFIG_DIR, true);
    let tls_mount = mount("tls", "/etc/simplyblock/tls", true);
    let container = Container {
        name: "storage-node-api".into(),
        image: Some(image.clone()),
        image_pull_policy: Some(pull.into()),
        command: Some(vec![
            "sh".into(),
            "-c".into(),
            format!(
                "{SOURCE_NODE_CONFIG}\nexec sudo -E python3 simplyblock_web/node_webapp.py storage_node_k8s"
            ),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("api".into()),
            container_port: port.into(),
            ..ContainerPort::default()
        }]),
        // Callers must present a client certificate, which the kubelet has not: a TCP
        // check, as the reference does under mutual TLS.
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String("api".into()),
                ..TCPSocketAction::default()
            }),
            initial_delay_seconds: Some(10),
            period_seconds: Some(5),
            ..Probe::default()
        }),
        // SPDK owns the node's NVMe devices and huge pages through /dev and /sys.
        security_context: Some(SecurityContext {
            privileged: Some(true),
            ..SecurityContext::default()
        }),
        env: Some(env),
        volume_mounts: Some(vec![
            mount("dev", "/dev", false),
            mount("etc-simplyblock", "/etc/simplyblock", false),
            mount("host-sys", "/sys", false),
            mount("var-run-simplyblock", "/var/run/simplyblock", false),
            config_mount.clone(),
            tls_mount.clone(),
        ]),
        resources: storage.container_resources,
        ..Container::default()
    };
    // Host preparation before the API starts: `node_configure.py` reads the node's
    // configuration, picks its devices and writes the SPDK configuration (huge pages,
    // cores) under /etc/simplyblock, loading kernel modules from the host's /lib/modules.
    // At least one: a cluster without `storageNodes` reads the field's zero.
    let mut fleet_args = format!(" --nodes-per-socket={}", storage.nodes_per_socket.max(1));
    if !storage.sockets_to_use.is_empty() {
        fleet_args.push_str(&format!(
            " --sockets-to-use={}",
            storage.sockets_to_use.join(",")
        ));
    }
    let configure = Container {
        name: "s-node-api-config-generator".into(),
        image: Some(image.clone()),
        image_pull_policy: Some(pull.into()),
        command: Some(vec![
            "sh".into(),
            "-c".into(),
            format!(
                "set -e\n{SOURCE_NODE_CONFIG}\n{CONFIGURE_ARGS}\nARGS=\"${{ARGS}}{fleet_args}\"\nexec sudo -E python3 simplyblock_web/node_configure.py ${{ARGS}}"
            ),
        ]),
        env: Some(std::iter::once(hostname).chain(tls_env).collect()),
        security_context: Some(SecurityContext {
            privileged: Some(true),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(vec![
            mount("etc-simplyblock", "/etc/simplyblock", false),
            mount("host-modules", "/lib/modules", true),
            mount("host-mnt", "/mnt", false),
            config_mount,
            tls_mount,
        ]),
        resources: storage.init_container_resources,
        ..Container::default()
    };
    DaemonSet {
        metadata: owned(cluster, account),
        spec: DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([
                    (APP_LABEL.into(), APP.into()),
                    (CLUSTER_LABEL.into(), name.clone()),
                ])),
                ..LabelSelector::default()
            },
            // A storage node restarts only through the control plane (Restart,
            // RollingRestart): a changed template, a new image or certificate, reaches a
            // node when that operation recreates its pod, never by the DaemonSet alone.
            update_strategy: Some(DaemonSetUpdateStrategy {
                type_: Some("OnDelete".into()),
                ..DaemonSetUpdateStrategy::default()
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(cluster)),
                    annotations: Some(BTreeMap::from([(
                        serving::TEMPLATE_ANNOTATION.into(),
                        certificate_version.into(),
                    )])),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    // Both: a same-named cluster of another namespace enrolls other workers.
                    node_selector: Some(BTreeMap::from([
                        (ENROLLMENT_LABEL.into(), name.clone()),
                        (NAMESPACE_LABEL.into(), namespace.clone()),
                    ])),
                    service_account_name: Some(account.into()),
                    // An evicted storage node takes its volumes' paths with it.
                    priority_class_name: match storage.priority_class_name.as_deref() {
                        None => Some("system-node-critical".into()),
                        Some("") => None,
                        Some(name) => Some(name.into()),
                    },
                    image_pull_secrets: (!storage.image_pull_secrets.is_empty())
                        .then(|| storage.image_pull_secrets.clone()),
                    host_network: Some(true),
                    tolerations: Some(storage.tolerations),
                    init_containers: Some(vec![configure]),
                    containers: vec![container],
                    volumes: Some(vec![
                        host_path("dev", "/dev", None),
                        host_path("etc-simplyblock", "/var/simplyblock", None),
                        host_path("host-sys", "/sys", None),
                        host_path("host-mnt", "/mnt", None),
                        host_path("host-modules", "/lib/modules", None),
                        host_path(
                            "var-run-simplyblock",
                            "/var/run/simplyblock",
                            Some("DirectoryOrCreate"),
                        ),
                        Volume {
                            name: "config".into(),
                            config_map: Some(ConfigMapVolumeSource {
                                name: config_name.into(),
                                ..ConfigMapVolumeSource::default()
                            }),
                            ..Volume::default()
                        },
                        tls_volume(&name, pod_certificates),
                    ]),
                    ..PodSpec::default()
                }),
            },
            ..DaemonSetSpec::default()
        },
        ..DaemonSet::default()
    }
}

/// The volume `tls` the storage-node container mounts at `/etc/simplyblock/tls`: `tls.crt`,
/// `tls.key` and `ca.crt` (the CAs whose certificates it takes from callers), whichever
/// way they arrive, so the container is the same either way.
///
/// With `pod_certificates`, a projected volume: the pod's kubelet generates the key and asks
/// [`STORAGE_NODE_SIGNER`] for a certificate (a PodCertificateRequest naming the pod and its
/// worker), which the operator issues for that worker's name alone; only `ca.crt` comes
/// from the serving Secret. A compromised worker then holds its own certificate and no
/// other node's. Without the API, the serving Secret of the cluster, whose one certificate
/// covers every worker.
///
/// [`STORAGE_NODE_SIGNER`]: simplyblock_api::keys::STORAGE_NODE_SIGNER
fn tls_volume(cluster_name: &str, pod_certificates: bool) -> Volume {
    let secret_name = serving::tls_secret_name(cluster_name);
    if !pod_certificates {
        return Volume {
            name: "tls".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret_name),
                default_mode: Some(0o400),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        };
    }
    Volume {
        name: "tls".into(),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(0o400),
            sources: Some(vec![
                VolumeProjection {
                    pod_certificate: Some(PodCertificateProjection {
                        signer_name: simplyblock_api::keys::STORAGE_NODE_SIGNER.into(),
                        key_type: POD_CERTIFICATE_KEY_TYPE.into(),
                        max_expiration_seconds: Some(POD_CERTIFICATE_MAX_EXPIRATION_SECONDS),
                        key_path: Some("tls.key".into()),
                        certificate_chain_path: Some("tls.crt".into()),
                        ..PodCertificateProjection::default()
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    secret: Some(SecretProjection {
                        name: secret_name,
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".into(),
                            path: "ca.crt".into(),
                            ..KeyToPath::default()
                        }]),
                        ..SecretProjection::default()
                    }),
                    ..VolumeProjection::default()
                },
            ]),
            ..ProjectedVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn pull_policy(policy: PullPolicy) -> &'static str {
    match policy {
        PullPolicy::Always => "Always",
        PullPolicy::Never => "Never",
        PullPolicy::IfNotPresent => "IfNotPresent",
    }
}

/// The labels of the cluster's own objects and pods.
fn labels(cluster: &StorageCluster) -> BTreeMap<String, String> {
    BTreeMap::from([
        (APP_LABEL.into(), APP.into()),
        (CLUSTER_LABEL.into(), cluster.name_any()),
        (MANAGED_BY_LABEL.into(), MANAGED_BY.into()),
    ])
}

/// The metadata of an object the cluster alone owns.
fn owned(cluster: &StorageCluster, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: cluster.namespace(),
        labels: Some(labels(cluster)),
        owner_references: owner(cluster, true),
        ..ObjectMeta::default()
    }
}

/// The cluster as owner; `controller` only where no other cluster shares the object.
fn owner(cluster: &StorageCluster, controller: bool) -> Option<Vec<OwnerReference>> {
    let reference = cluster.controller_owner_ref(&())?;
    Some(vec![OwnerReference {
        controller: Some(controller),
        ..reference
    }])
}

/// Where the storage-node containers read the node configuration ConfigMap: one env file
/// per worker, named by the worker.
const NODE_CONFIG_DIR: &str = "/etc/simplyblock/node";

/// Sources the env file of the pod's worker, when the configuration has one.
const SOURCE_NODE_CONFIG: &str =
    "[ -f \"/etc/simplyblock/node/${HOSTNAME}\" ] && . \"/etc/simplyblock/node/${HOSTNAME}\"";

/// `node_configure.py`'s per-node arguments from the sourced env file.
const CONFIGURE_ARGS: &str = "ARGS=\"--max-lvol=${MAX_SUBSYS_COUNT:-0}\"
[ -n \"${PCI_ALLOWED}\" ] && ARGS=\"${ARGS} --pci-allowed=${PCI_ALLOWED}\"
[ -n \"${PCI_BLOCKED}\" ] && ARGS=\"${ARGS} --pci-blocked=${PCI_BLOCKED}\"
[ -n \"${NVME_DEVICES}\" ] && ARGS=\"${ARGS} --nvme-devices=${NVME_DEVICES}\"";

/// What a cluster's storage-node pods may do in its namespace, as the storage node's own
/// API does: read its configuration; start and stop its SPDK pod (and find it among the
/// namespace's pods); run and clean up the host-preparation Jobs (kernel modules, core
/// isolation). The reference's `pods/exec`, Deployments and Node writes are left out: the
/// storage node execs into nothing, deploys nothing, and the operator labels the workers.
pub fn role_rules(config_name: &str) -> Vec<PolicyRule> {
    let rule = |group: &str, resource: &str, names: Option<&str>, verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(vec![resource.into()]),
        resource_names: names.map(|n| vec![n.into()]),
        verbs: verbs.iter().map(|v| (*v).to_string()).collect(),
        ..PolicyRule::default()
    };
    vec![
        rule("", "configmaps", Some(config_name), &["get", "watch"]),
        rule(
            "",
            "pods",
            None,
            &["get", "list", "watch", "create", "delete"],
        ),
        rule(
            "batch",
            "jobs",
            None,
            &["get", "list", "watch", "create", "delete"],
        ),
    ]
}

/// The host's `path` as the volume `name`.
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

fn plain_env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PORT: u16 = 5000;
    const CERTIFICATE_VERSION: &str = "4711";

    fn cluster(spec: serde_json::Value) -> StorageCluster {
        let mut full = json!({"maxSubsystemCount": 10, "vcpuCount": 4});
        full.as_object_mut()
            .expect("object")
            .extend(spec.as_object().cloned().unwrap_or_default());
        serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
            "metadata": {"name": "sb", "namespace": "storage", "uid": "0c1d2e3f-0000-4000-8000-000000000001"},
            "spec": full,
            "status": {"uuid": "c0ffee00-0000-4000-8000-000000000002"},
        }))
        .expect("cluster")
    }

    fn node(worker: &str, slot: i32, uuid: Option<&str>, config: serde_json::Value) -> StorageNode {
        let mut c = json!({"sizing": {"vcpuCount": 4}});
        c.as_object_mut()
            .expect("object")
            .extend(config.as_object().cloned().unwrap_or_default());
        serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNode",
            "metadata": {"name": format!("sb-{worker}-{slot}"), "namespace": "storage"},
            "spec": {"clusterRef": "sb", "workerNode": worker, "slot": slot, "config": c},
            "status": uuid.map(|u| json!({"uuid": u})),
        }))
        .expect("node")
    }

    fn worker(name: &str, address: Option<&str>, ready: bool) -> Worker {
        Worker {
            name: name.into(),
            address: address.map(Into::into),
            ready,
        }
    }

    /// Every object as one YAML document each, in the order they are applied.
    fn yaml(m: &Manifests) -> String {
        fn doc<T: serde::Serialize>(object: &T) -> String {
            serde_saphyr::to_string(object).expect("YAML")
        }
        [
            doc(&m.config),
            doc(&m.service),
            doc(&m.endpoints),
            doc(&m.account),
            doc(&m.role),
            doc(&m.binding),
            doc(&m.daemonset),
        ]
        .join("---\n")
    }

    /// The checked-in text of `snapshots/<file>`; `UPDATE_EXPECT=1` writes `actual` there.
    fn expected(file: &str, actual: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/workload/snapshots")
            .join(file);
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            std::fs::create_dir_all(path.parent().expect("dir")).expect("dir");
            std::fs::write(&path, actual).expect("write");
        }
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// Each pod with a certificate of its own: what an API server with PodCertificateRequests
    /// (Kubernetes 1.37 and later) gets.
    #[test]
    fn a_cluster_of_defaults_renders_as_its_snapshot() {
        let nodes = [
            node("w1", 0, Some("n-1"), json!({})),
            node("w2", 0, None, json!({})),
        ];
        let workers = [
            worker("w1", Some("10.0.0.11"), true),
            worker("w2", None, false),
        ];
        let rendered = yaml(&manifests(
            &cluster(json!({})),
            &nodes,
            &workers,
            PORT,
            CERTIFICATE_VERSION,
            true,
        ));
        assert_eq!(rendered, expected("defaults.yaml", &rendered));
    }

    /// The pods share the serving Secret's certificate: what an API server without
    /// PodCertificateRequests gets.
    #[test]
    fn a_tuned_cluster_renders_as_its_snapshot() {
        let tuned = cluster(json!({
            "minHugePagesSize": "8G",
            "enableFailureDomains": true,
            "storageNodes": {
                "image": "mirror.example.com/sb/simplyblock:25.10.1",
                "imagePullPolicy": "IfNotPresent",
                "imagePullSecrets": [{"name": "mirror-pull"}],
                "priorityClassName": "",
                "reservedSystemCPU": "0-1",
                "ubuntuHost": true,
                "enableCpuTopology": true,
                "enableKubeletConfiguration": false,
                "openshift": {},
                "tolerations": [
                    {"key": "storage", "operator": "Exists", "effect": "NoSchedule"},
                ],
                "containerResources": {
                    "requests": {"cpu": "2", "memory": "4Gi"},
                    "limits": {"memory": "8Gi"},
                },
            },
        }));
        let nodes = [
            node(
                "w1",
                0,
                Some("n-1"),
                json!({
                    "deviceNames": ["0000:01:00.0", "0000:02:00.0"],
                    "pcieAllowList": ["0000:01:00.0", "0000:02:00.0"],
                    "pcieDenyList": ["0000:03:00.0"],
                    "journalManager": {"count": 2, "percentPerDevice": 5},
                    "failureDomain": "1",
                }),
            ),
            node(
                "w2",
                0,
                Some("n-2"),
                json!({"reservedSystemCPU": "8", "failureDomain": "1"}),
            ),
            node(
                "w3",
                0,
                Some("n-3"),
                json!({"sizing": {"vcpuCount": 8, "minHugePagesSize": "16G"}, "failureDomain": "2"}),
            ),
        ];
        let workers = [
            worker("w1", Some("10.0.0.11"), true),
            worker("w2", Some("10.0.0.12"), false),
            worker("w3", None, true),
        ];
        let rendered = yaml(&manifests(
            &tuned,
            &nodes,
            &workers,
            PORT,
            CERTIFICATE_VERSION,
            false,
        ));
        assert_eq!(rendered, expected("tuned.yaml", &rendered));
    }

    #[test]
    fn each_worker_with_an_address_is_a_named_endpoint() {
        let workers = [
            worker("worker-1", Some("10.0.0.11"), true),
            worker("worker-2", None, true),
            worker("worker-3", Some("10.0.0.13"), false),
        ];
        let slice = endpoint_slice(&cluster(json!({})), PORT, &workers);
        let endpoints = slice.endpoints.expect("endpoints");
        assert_eq!(
            endpoints.len(),
            2,
            "a worker without an address is left out"
        );
        assert_eq!(endpoints[0].hostname.as_deref(), Some("worker-1"));
        assert_eq!(endpoints[0].addresses, ["10.0.0.11"]);
        assert_eq!(
            endpoints[1].conditions.as_ref().and_then(|c| c.ready),
            Some(false)
        );
        assert_eq!(
            slice.metadata.labels.unwrap_or_default()["kubernetes.io/service-name"],
            SERVICE_NAME
        );
        assert_eq!(
            slice.ports.unwrap_or_default()[0].port,
            Some(i32::from(PORT))
        );
    }

    #[test]
    fn the_daemonset_selects_only_on_a_label_a_kubelet_may_not_set() {
        let nodes = [node("w1", 0, Some("n-1"), json!({}))];
        let workers = [worker("w1", Some("10.0.0.11"), true)];
        let objects = manifests(&cluster(json!({})), &nodes, &workers, PORT, "", true);
        let selector = objects
            .daemonset
            .spec
            .template
            .spec
            .and_then(|s| s.node_selector)
            .unwrap_or_default();
        assert_eq!(
            selector.get(ENROLLMENT_LABEL).map(String::as_str),
            Some("sb")
        );
        assert!(!selector.contains_key(simplyblock_api::keys::LEGACY_ENROLLMENT_LABEL));
        // A worker labelled as earlier releases enrolled it, as its kubelet may label it.
        let self_labelled = BTreeMap::from([
            (
                simplyblock_api::keys::LEGACY_ENROLLMENT_LABEL.to_string(),
                "sb".to_string(),
            ),
            (NAMESPACE_LABEL.to_string(), "storage".to_string()),
        ]);
        assert!(
            !selector
                .iter()
                .all(|(k, v)| self_labelled.get(k) == Some(v)),
            "{selector:?}"
        );
        // What the operator writes on the worker is what the DaemonSet selects.
        let written = &enrollment(&cluster(json!({})), &nodes)["w1"];
        assert!(selector.iter().all(|(k, v)| written.get(k) == Some(v)));
    }

    #[test]
    fn a_worker_is_enrolled_at_once_and_labelled_per_named_slot() {
        let nodes = [
            node("w1", 0, Some("n-1"), json!({})),
            node("w1", 1, None, json!({})),
            node("w2", 0, None, json!({})),
        ];
        let wanted = enrollment(&cluster(json!({})), &nodes);
        let topology = topology_label("c0ffee00-0000-4000-8000-000000000002", 0);
        assert_eq!(
            wanted["w1"],
            BTreeMap::from([
                (ENROLLMENT_LABEL.to_string(), "sb".to_string()),
                (NAMESPACE_LABEL.to_string(), "storage".to_string()),
                (topology, "n-1".to_string()),
            ]),
            "a slot the control plane has not named yet has no topology label"
        );
        assert_eq!(
            wanted["w2"],
            BTreeMap::from([
                (ENROLLMENT_LABEL.to_string(), "sb".to_string()),
                (NAMESPACE_LABEL.to_string(), "storage".to_string()),
            ]),
            "a worker is enrolled before its node is added"
        );

        let mut unnamed = cluster(json!({}));
        unnamed.status = None;
        let wanted = enrollment(&unnamed, &nodes);
        assert!(
            wanted.values().all(|labels| labels
                .keys()
                .all(|k| k == ENROLLMENT_LABEL || k == NAMESPACE_LABEL)),
            "without the cluster's UUID there is no topology key: {wanted:?}"
        );
    }

    /// The `tls` volume of the storage-node pods, and the mounts of their container.
    fn tls_of(pod_certificates: bool) -> (Volume, Vec<VolumeMount>) {
        let nodes = [node("w1", 0, Some("n-1"), json!({}))];
        let workers = [worker("w1", Some("10.0.0.11"), true)];
        let objects = manifests(
            &cluster(json!({})),
            &nodes,
            &workers,
            PORT,
            CERTIFICATE_VERSION,
            pod_certificates,
        );
        let pod = objects.daemonset.spec.template.spec.expect("pod spec");
        let volume = pod
            .volumes
            .unwrap_or_default()
            .into_iter()
            .find(|v| v.name == "tls")
            .expect("the tls volume");
        let mounts = pod.containers[0].volume_mounts.clone().unwrap_or_default();
        (volume, mounts)
    }

    #[test]
    fn with_pod_certificates_each_pod_asks_for_its_own_and_trusts_the_secrets_cas() {
        let (volume, mounts) = tls_of(true);
        assert!(volume.secret.is_none(), "{volume:?}");
        let projected = volume.projected.expect("a projected volume");
        assert_eq!(projected.default_mode, Some(0o400));
        let sources = projected.sources.unwrap_or_default();
        assert_eq!(sources.len(), 2, "{sources:?}");
        let certificate = sources[0].pod_certificate.clone().expect("podCertificate");
        assert_eq!(
            certificate,
            PodCertificateProjection {
                signer_name: simplyblock_api::keys::STORAGE_NODE_SIGNER.into(),
                key_type: "ECDSAP256".into(),
                max_expiration_seconds: Some(2_592_000),
                key_path: Some("tls.key".into()),
                certificate_chain_path: Some("tls.crt".into()),
                ..PodCertificateProjection::default()
            }
        );
        let secret = sources[1].secret.clone().expect("the Secret's CAs");
        assert_eq!(secret.name, "simplyblock-storage-node-tls-sb");
        assert_eq!(
            secret.items.unwrap_or_default(),
            [KeyToPath {
                key: "ca.crt".into(),
                path: "ca.crt".into(),
                ..KeyToPath::default()
            }],
            "the Secret's shared certificate and key stay out of the pod"
        );
        // The container reads the same files at the same place either way.
        assert_eq!(mounts, tls_of(false).1);
    }

    #[test]
    fn without_pod_certificates_the_pods_mount_the_serving_secret() {
        let (volume, _) = tls_of(false);
        assert!(volume.projected.is_none(), "{volume:?}");
        assert_eq!(
            volume.secret,
            Some(SecretVolumeSource {
                secret_name: Some("simplyblock-storage-node-tls-sb".into()),
                default_mode: Some(0o400),
                ..SecretVolumeSource::default()
            })
        );
    }
    /// The reference operator's storage-node pod (utils/storage_nodeset_ds.go), container
    /// by container: (name, privileged, mount path → volume, read-only).
    type PodFacts = Vec<(&'static str, bool, Vec<(&'static str, &'static str, bool)>)>;

    fn reference_pod() -> PodFacts {
        vec![
            (
                "s-node-api-config-generator",
                true,
                vec![
                    ("/etc/simplyblock", "etc-simplyblock", false),
                    ("/lib/modules", "host-modules", true),
                    ("/mnt", "host-mnt", false),
                    ("/etc/simplyblock/node", "config", true),
                    ("/etc/simplyblock/tls", "tls", true),
                ],
            ),
            (
                "storage-node-api",
                true,
                vec![
                    ("/dev", "dev", false),
                    ("/etc/simplyblock", "etc-simplyblock", false),
                    ("/sys", "host-sys", false),
                    ("/var/run/simplyblock", "var-run-simplyblock", false),
                    ("/etc/simplyblock/node", "config", true),
                    ("/etc/simplyblock/tls", "tls", true),
                ],
            ),
        ]
    }

    /// The reference's host paths: volume → (host path, type).
    const HOST_PATHS: [(&str, &str, Option<&str>); 6] = [
        ("dev", "/dev", None),
        ("etc-simplyblock", "/var/simplyblock", None),
        ("host-sys", "/sys", None),
        ("host-mnt", "/mnt", None),
        ("host-modules", "/lib/modules", None),
        (
            "var-run-simplyblock",
            "/var/run/simplyblock",
            Some("DirectoryOrCreate"),
        ),
    ];

    #[test]
    fn the_storage_node_pod_prepares_its_host_and_mounts_it_as_the_reference_does() {
        let m = manifests(
            &cluster(json!({"storageNodes": {
                "socketsToUse": ["0", "1"], "nodesPerSocket": 2, "ubuntuHost": true,
                "enableCpuTopology": true,
                "openshift": {"machineConfigPool": "storage"},
            }})),
            &[node(
                "w1",
                0,
                None,
                json!({"pcieAllowList": ["0000:01:00.0"]}),
            )],
            &[worker("w1", Some("10.0.0.11"), true)],
            PORT,
            CERTIFICATE_VERSION,
            false,
        );
        let pod = m.daemonset.spec.template.spec.expect("pod");
        assert_eq!(pod.host_network, Some(true));
        type Owned = Vec<(String, bool, Vec<(String, String, bool)>)>;
        let containers: Owned = pod
            .init_containers
            .iter()
            .flatten()
            .chain(&pod.containers)
            .map(|c| {
                (
                    c.name.clone(),
                    c.security_context
                        .as_ref()
                        .and_then(|s| s.privileged)
                        .unwrap_or(false),
                    c.volume_mounts
                        .iter()
                        .flatten()
                        .map(|v| {
                            (
                                v.mount_path.clone(),
                                v.name.clone(),
                                v.read_only.unwrap_or(false),
                            )
                        })
                        .collect(),
                )
            })
            .collect();
        let reference: Owned = reference_pod()
            .into_iter()
            .map(|(name, privileged, mounts)| {
                (
                    name.to_string(),
                    privileged,
                    mounts
                        .into_iter()
                        .map(|(p, v, r)| (p.to_string(), v.to_string(), r))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(containers, reference);
        let host: Vec<(String, String, Option<String>)> = pod
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| {
                let h = v.host_path.as_ref()?;
                Some((v.name.clone(), h.path.clone(), h.type_.clone()))
            })
            .collect();
        let want: Vec<(String, String, Option<String>)> = HOST_PATHS
            .iter()
            .map(|(n, p, t)| (n.to_string(), p.to_string(), t.map(str::to_string)))
            .collect();
        assert_eq!(host, want);

        // The init container configures the host from the worker's env file and the
        // fleet's placement, then the API starts over the same file.
        let init = &pod.init_containers.as_ref().expect("init")[0];
        let script = init.command.as_ref().expect("command").join(" ");
        for part in [
            ". \"/etc/simplyblock/node/${HOSTNAME}\"",
            "--max-lvol=${MAX_SUBSYS_COUNT:-0}",
            "--pci-allowed=${PCI_ALLOWED}",
            "--pci-blocked=${PCI_BLOCKED}",
            "--nvme-devices=${NVME_DEVICES}",
            " --nodes-per-socket=2 --sockets-to-use=0,1",
            "exec sudo -E python3 simplyblock_web/node_configure.py ${ARGS}",
        ] {
            assert!(script.contains(part), "{part} in {script}");
        }
        let api = &pod.containers[0];
        let command = api.command.as_ref().expect("command").join(" ");
        assert!(
            command
                .ends_with("exec sudo -E python3 simplyblock_web/node_webapp.py storage_node_k8s"),
            "{command}"
        );
        let env: BTreeMap<String, String> = api
            .env
            .iter()
            .flatten()
            .map(|e| {
                let value = e.value.clone().or_else(|| {
                    e.value_from
                        .as_ref()?
                        .field_ref
                        .as_ref()
                        .map(|f| f.field_path.clone())
                });
                (e.name.clone(), value.unwrap_or_default())
            })
            .collect();
        for (name, value) in [
            ("HOSTNAME", "spec.nodeName"),
            ("UBUNTU_HOST", "true"),
            ("OPENSHIFT_CLUSTER", "true"),
            ("OPENSHIFT_MCP", "storage"),
            // Unset: the storage node configures the kubelet, as the API documents.
            ("SKIP_KUBELET_CONFIGURATION", "false"),
            ("CPU_TOPOLOGY_ENABLED", "true"),
            ("SIMPLY_BLOCK_DOCKER_IMAGE", DEFAULT_IMAGE),
            ("SB_TLS_CLIENT_AUTH", "required"),
            ("SB_TLS_CONNECT", "authenticated"),
        ] {
            assert_eq!(env.get(name).map(String::as_str), Some(value), "{name}");
        }
        // The kubelet has no client certificate for the mutual-TLS API: a TCP check.
        let probe = api.readiness_probe.as_ref().expect("readiness");
        assert!(probe.tcp_socket.is_some() && probe.http_get.is_none());
        assert_eq!(
            (probe.initial_delay_seconds, probe.period_seconds),
            (Some(10), Some(5))
        );
    }

    #[test]
    fn the_storage_nodes_role_holds_what_the_node_api_does_in_its_namespace() {
        let m = manifests(
            &cluster(json!({})),
            &[],
            &[],
            PORT,
            CERTIFICATE_VERSION,
            false,
        );
        let rules: Vec<(String, String, Option<Vec<String>>, String)> = m
            .role
            .rules
            .unwrap_or_default()
            .into_iter()
            .map(|r| {
                (
                    r.api_groups.unwrap_or_default().join(","),
                    r.resources.unwrap_or_default().join(","),
                    r.resource_names,
                    r.verbs.join(","),
                )
            })
            .collect();
        assert_eq!(
            rules,
            [
                (
                    String::new(),
                    "configmaps".into(),
                    Some(vec!["simplyblock-storage-node-config-sb".into()]),
                    "get,watch".into()
                ),
                (
                    String::new(),
                    "pods".into(),
                    None,
                    "get,list,watch,create,delete".into()
                ),
                (
                    "batch".into(),
                    "jobs".into(),
                    None,
                    "get,list,watch,create,delete".into()
                ),
            ]
        );
    }
}

//! What an approved document expands into: the StorageCluster its template describes and
//! one StorageNode per worker and slot. Pure: the controller creates what these return and
//! does not exist yet.

use std::collections::BTreeMap;

use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use simplyblock_api::cluster_deployment_config::{ClusterDeploymentConfig, Environment, NodeGroup};
use simplyblock_api::names::{label_value, storage_node_name};
use simplyblock_api::storage_cluster::{
    DEFAULT_OPS_HISTORY_LIMIT, DeviceClass, OpenShift, StorageCluster, StorageClusterSpec,
    StorageNodesSpec,
};
use simplyblock_api::storage_node::{Sizing, StorageNode, StorageNodeConfig, StorageNodeSpec};

/// The label naming the cluster an object belongs to.
pub const CLUSTER_LABEL: &str = simplyblock_api::keys::CLUSTER_LABEL;
/// The label naming a node's worker.
pub const WORKER_LABEL: &str = simplyblock_api::keys::WORKER_LABEL;
/// The label naming the document that created a cluster: how a document tells a cluster
/// it created (and may resume) from one that merely has the same name.
pub const CREATED_BY_LABEL: &str = simplyblock_api::keys::DEPLOYMENT_CONFIG_LABEL;

/// The device class the document's groups name (unset counts as NVMe).
pub fn device_class(doc: &ClusterDeploymentConfig) -> DeviceClass {
    groups(doc)
        .find_map(|g| g.devices.as_ref().and_then(|d| d.class()))
        .unwrap_or_default()
}

fn groups(doc: &ClusterDeploymentConfig) -> impl Iterator<Item = &NodeGroup> {
    doc.spec.node_sets.iter().flat_map(|s| &s.groups)
}

/// The cluster a document names: its clusterRef, or its template's name.
pub fn target_cluster(doc: &ClusterDeploymentConfig) -> Option<&str> {
    doc.spec
        .cluster_ref
        .as_deref()
        .filter(|r| !r.is_empty())
        .or_else(|| doc.spec.cluster.as_ref().map(|c| c.name.as_str()))
}

/// The StorageCluster a creating document describes; `None` for a growth document.
pub fn cluster(doc: &ClusterDeploymentConfig) -> Option<StorageCluster> {
    if doc.spec.cluster_ref.is_some() {
        return None;
    }
    let t = doc.spec.cluster.as_ref()?;
    let class = device_class(doc);
    let format = t.enable_drive_format.unwrap_or(false);
    // Validation refuses groups that disagree on interfaces, so the first one stated is
    // every group's.
    let mut storage = StorageNodesSpec {
        mgmt_interface: groups(doc)
            .find_map(|g| g.mgmt_interface.clone().filter(|m| !m.is_empty())),
        data_interfaces: groups(doc)
            .find_map(|g| (!g.data_interfaces.is_empty()).then(|| g.data_interfaces.clone())),
        sockets_to_use: t.sockets_to_use.clone(),
        nodes_per_socket: t.nodes_per_socket.unwrap_or(1).max(1),
        node_provisioning_budget: t.node_provisioning_budget.unwrap_or(1).max(1),
        enable_journal_device: t.enable_journal_device,
        // One document field, two operations: a 4K reformat for NVMe, a signature wipe
        // for block devices. Only the class's own is set.
        enable_format_4k: (class == DeviceClass::NVMe && format).then_some(true),
        enable_block_format: (class == DeviceClass::LogicalBlock && format).then_some(true),
        image: doc
            .spec
            .images
            .as_ref()
            .and_then(|i| i.cluster.as_ref())
            .map(|i| i.image.clone()),
        tolerations: doc.spec.tolerations.clone(),
        ..StorageNodesSpec::default()
    };
    apply_environment(&mut storage, doc.spec.environment);
    let name = t.name.clone();
    Some(StorageCluster {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: doc.namespace(),
            labels: Some(BTreeMap::from([(
                CREATED_BY_LABEL.to_string(),
                label_value(&doc.name_any()),
            )])),
            ..ObjectMeta::default()
        },
        spec: StorageClusterSpec {
            max_subsystem_count: t.max_subsystem_count,
            vcpu_count: t.vcpu_count,
            min_huge_pages_size: t.min_huge_pages_size.clone(),
            stripe: t.stripe.clone(),
            fabric_type: t.fabric_type.clone(),
            nvmf_base_port: 4420,
            rpc_base_port: 8080,
            snode_api_port: 50001,
            enable_failure_domains: t.enable_failure_domains,
            enable_node_affinity: None,
            enable_sync_replication: t.enable_sync_replication,
            enable_checksum_validation: t.enable_checksum_validation.unwrap_or(false),
            enable_atomicity_4k: t.enable_atomicity_4k.unwrap_or(false),
            device_class: class,
            kms: t.kms.clone(),
            client_data_ifname: None,
            warning_threshold: None,
            critical_threshold: None,
            max_concurrent_worker_restarts: 1,
            ops_history_limit: DEFAULT_OPS_HISTORY_LIMIT,
            ops_retention: None,
            backup: t.backup.clone(),
            disable_data_realignment: None,
            enable_volume_auto_placement: None,
            volume_migration_settings: None,
            volume_auto_placement: None,
            storage_nodes: Some(storage),
        },
        status: None,
    })
}

/// The distribution shorthand, spent on the workload's flags.
pub fn apply_environment(storage: &mut StorageNodesSpec, environment: Option<Environment>) {
    match environment {
        Some(Environment::OpenShift) => {
            storage.openshift = Some(OpenShift {
                machine_config_pool: "worker".into(),
            });
            storage.enable_cpu_topology = Some(true);
            storage.enable_kubelet_configuration = Some(true);
        }
        Some(Environment::Talos) => storage.enable_kubelet_configuration = Some(false),
        Some(Environment::Vanilla | Environment::Rancher | Environment::K3s) => {
            storage.enable_kubelet_configuration = Some(true)
        }
        None => {}
    }
}

/// Storage nodes per worker on `cluster`: sockets times nodes per socket.
pub fn slots_per_worker(cluster: &StorageCluster) -> i32 {
    let storage = cluster.spec.storage_nodes.clone().unwrap_or_default();
    storage.sockets_to_use.len().max(1) as i32 * storage.nodes_per_socket.max(1)
}

/// Every StorageNode the document describes on `cluster`, keyed by (worker, slot).
pub fn nodes(doc: &ClusterDeploymentConfig, cluster: &StorageCluster) -> Vec<StorageNode> {
    let storage = cluster.spec.storage_nodes.clone().unwrap_or_default();
    let per_socket = storage.nodes_per_socket.max(1);
    let slots = slots_per_worker(cluster);
    let growth = doc.spec.cluster_ref.is_some();
    let cluster_name = cluster.name_any();
    let images = doc.spec.images.as_ref();
    let mut out = Vec::new();
    for set in &doc.spec.node_sets {
        for group in &set.groups {
            let devices: Vec<String> = group
                .devices
                .as_ref()
                .map(|d| {
                    d.nvme
                        .clone()
                        .or_else(|| d.block.clone())
                        .unwrap_or_default()
                })
                .unwrap_or_default();
            for worker in &group.workers {
                for slot in 0..slots {
                    let socket = storage
                        .sockets_to_use
                        .get((slot / per_socket) as usize)
                        .cloned()
                        .unwrap_or_else(|| "0".to_string());
                    out.push(StorageNode {
                        metadata: ObjectMeta {
                            name: Some(storage_node_name(&cluster_name, worker, slot)),
                            namespace: cluster.namespace(),
                            labels: Some(BTreeMap::from([
                                (CLUSTER_LABEL.to_string(), label_value(&cluster_name)),
                                (WORKER_LABEL.to_string(), label_value(worker)),
                            ])),
                            owner_references: cluster.controller_owner_ref(&()).map(|o| vec![o]),
                            ..ObjectMeta::default()
                        },
                        spec: StorageNodeSpec {
                            cluster_ref: cluster_name.clone(),
                            node_set: Some(set.name.clone()),
                            worker_node: worker.clone(),
                            socket_id: Some(socket),
                            node_index: Some(slot % per_socket),
                            slot: Some(slot),
                            config: StorageNodeConfig {
                                sizing: Sizing {
                                    vcpu_count: cluster.spec.vcpu_count,
                                    min_huge_pages_size: cluster.spec.min_huge_pages_size.clone(),
                                },
                                spdk_image: images
                                    .and_then(|i| i.spdk.as_ref())
                                    .map(|i| i.image.clone()),
                                spdk_proxy_image: images
                                    .and_then(|i| i.spdk_proxy.as_ref())
                                    .map(|i| i.image.clone()),
                                spdk_image_pull_policy: Default::default(),
                                spdk_proxy_image_pull_policy: Default::default(),
                                spdk_system_memory: group.spdk_system_memory.clone(),
                                reserved_system_cpu: None,
                                journal_manager: group.journal_manager.clone(),
                                device_names: devices.clone(),
                                pcie_allow_list: Vec::new(),
                                pcie_deny_list: Vec::new(),
                                pcie_model: None,
                                drive_size_range: None,
                                failure_domain: group.failure_domain.clone(),
                                expand: growth.then_some(true),
                                site: group.site.clone(),
                            },
                        },
                        status: None,
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(spec: serde_json::Value) -> ClusterDeploymentConfig {
        serde_json::from_value(json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "ClusterDeploymentConfig",
            "metadata": {"name": "doc", "namespace": "ns"}, "spec": spec
        }))
        .expect("doc")
    }

    fn two_socket_doc(environment: &str, format: bool) -> ClusterDeploymentConfig {
        doc(json!({
            "environment": environment,
            "cluster": {"name": "sb", "maxSubsystemCount": 10, "vcpuCount": 4, "minHugePagesSize": "8G",
                        "socketsToUse": ["0", "1"], "nodesPerSocket": 1, "enableDriveFormat": format,
                        "backup": {"endpoint": "https://s3.example.com", "bucket": "fleet",
                                   "credentialsSecretRef": {"name": "s3"}}},
            "tolerations": [{"key": "storage", "operator": "Exists"}],
            "nodeSets": [{"name": "rack-a", "groups": [
                {"name": "g", "workers": ["w1", "w2"], "mgmtInterface": "eth0", "dataInterfaces": ["eth1"],
                 "failureDomain": "rack-a", "devices": {"nvme": ["0000:01:00.0"]}}
            ]}]
        }))
    }

    #[test]
    fn the_template_reaches_the_cluster_and_its_workload() {
        let c = cluster(&two_socket_doc("OpenShift", true)).expect("a creating document");
        assert_eq!(c.metadata.name.as_deref(), Some("sb"));
        assert_eq!(c.spec.device_class, DeviceClass::NVMe);
        let s = c.spec.storage_nodes.clone().expect("workload");
        // The regression the seed names: the socket layout must reach the cluster.
        assert_eq!(s.sockets_to_use, ["0", "1"]);
        assert_eq!(s.mgmt_interface.as_deref(), Some("eth0"));
        assert_eq!(s.data_interfaces, Some(vec!["eth1".to_string()]));
        assert_eq!(s.enable_format_4k, Some(true));
        assert_eq!(s.enable_block_format, None);
        assert!(s.openshift.is_some());
        assert_eq!(
            s.enable_kubelet_configuration,
            Some(true),
            "OpenShift must not skip kubelet configuration"
        );
        assert_eq!(s.tolerations.len(), 1);
        assert_eq!(
            c.spec.backup.map(|b| b.bucket).as_deref(),
            Some("fleet"),
            "the store is told the control plane at creation, so it comes with the document"
        );
    }

    #[test]
    fn environments_set_the_kubelet_flag() {
        for (env, expected) in [
            ("Talos", Some(false)),
            ("Vanilla", Some(true)),
            ("K3s", Some(true)),
            ("Rancher", Some(true)),
        ] {
            let c = cluster(&two_socket_doc(env, false)).expect("cluster");
            let s = c.spec.storage_nodes.expect("workload");
            assert_eq!(s.enable_kubelet_configuration, expected, "{env}");
            assert_eq!(s.enable_format_4k, None, "no format unless asked");
        }
    }

    #[test]
    fn one_node_per_worker_and_slot_with_the_cluster_sizing() {
        let d = two_socket_doc("Vanilla", false);
        let c = cluster(&d).expect("cluster");
        let nodes = nodes(&d, &c);
        let ids: Vec<(String, i32, Option<String>)> = nodes
            .iter()
            .map(|n| {
                (
                    n.spec.worker_node.clone(),
                    n.spec.slot.unwrap_or(-1),
                    n.spec.socket_id.clone(),
                )
            })
            .collect();
        assert_eq!(
            ids,
            [
                ("w1".into(), 0, Some("0".into())),
                ("w1".into(), 1, Some("1".into())),
                ("w2".into(), 0, Some("0".into())),
                ("w2".into(), 1, Some("1".into()))
            ]
        );
        let n = &nodes[0];
        assert_eq!(n.metadata.name.as_deref(), Some("sb-w1-0"));
        assert_eq!(n.spec.config.sizing.vcpu_count, 4);
        assert_eq!(
            n.spec.config.sizing.min_huge_pages_size.as_deref(),
            Some("8G")
        );
        assert_eq!(n.spec.config.device_names, ["0000:01:00.0"]);
        assert_eq!(n.spec.config.failure_domain.as_deref(), Some("rack-a"));
        // A creating document does not ask for a rebalance onto its own initial layout.
        assert_eq!(n.spec.config.expand, None);
    }

    #[test]
    fn a_growth_document_marks_its_nodes_for_expansion() {
        let mut d = two_socket_doc("Vanilla", false);
        let c = cluster(&d).expect("cluster");
        d.spec.cluster_ref = Some("sb".into());
        assert!(super::cluster(&d).is_none(), "growth creates no cluster");
        assert!(
            nodes(&d, &c)
                .iter()
                .all(|n| n.spec.config.expand == Some(true))
        );
    }
}

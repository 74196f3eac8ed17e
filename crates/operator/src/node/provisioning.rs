//! The decisions of the provisioning machine that need no I/O.

use simplyblock_api::{StorageCluster, StorageNode};
use simplyblock_controlplane::StorageNodeAdd;

/// The partitions the control plane cuts on each data device besides the data partition.
///
/// Contract: the backend compares what a device already carries against `1 + this
/// count`, repartitions when they differ, and cannot repartition a device whose table
/// SPDK's gpt module has claimed. So the number is the layout, not a preference: 0 when
/// the journal has a device of its own (a data device carries only its data partition),
/// 1 when every device carries a journal partition. One too many builds the wrong layout
/// on a fresh machine and makes a node whose disks already carry the fleet's layout
/// impossible to add.
pub fn partitions_per_device(dedicated_journal_device: bool) -> u32 {
    if dedicated_journal_device { 0 } else { 1 }
}

/// The control plane's integer failure domain for a node's label: a numeric label is
/// that number; any other label is left for the control plane to assign.
pub fn failure_domain_index(label: Option<&str>) -> Option<i64> {
    label?.parse::<i64>().ok().filter(|n| *n >= 0)
}

/// The body of the node add for `node`, whose storage-node API is at `address`, in a
/// cluster whose storage-node Service lives in `snode_namespace`.
pub fn node_add_body(
    address: String,
    snode_namespace: &str,
    node: &StorageNode,
    cluster: &StorageCluster,
) -> StorageNodeAdd {
    let storage = cluster.spec.storage_nodes.clone().unwrap_or_default();
    let config = &node.spec.config;
    let mut body = StorageNodeAdd::new(
        address,
        storage
            .mgmt_interface
            .clone()
            .unwrap_or_else(|| "eth0".into()),
    );
    body.data_nics = storage.data_interfaces.clone().unwrap_or_default();
    body.namespace = snode_namespace.to_string();
    body.cr_name = node.metadata.name.clone().unwrap_or_default();
    body.cr_namespace = node.metadata.namespace.clone().unwrap_or_default();
    body.cr_plural = "storagenodes".into();
    body.format_4k = storage.enable_format_4k.unwrap_or(false);
    body.partitions = partitions_per_device(storage.enable_journal_device.unwrap_or(false));
    if let Some(jm) = &config.journal_manager {
        if let Some(p) = jm.percent_per_device.and_then(|p| u32::try_from(p).ok()) {
            body.jm_percent = p;
        }
        body.ha_jm_count = jm.count.and_then(|c| u32::try_from(c).ok());
    }
    body.failure_domain = failure_domain_index(config.failure_domain.as_deref());
    // A growth document's node joins a running cluster: without the flag the control plane
    // reads it as part of an initial layout, and refuses it once the cluster is active.
    body.expand = config.expand.unwrap_or(false);
    body.spdk_sys_mem = config.spdk_system_memory.clone();
    if let Some(image) = &config.spdk_image {
        body.spdk_image = image.clone();
    }
    body.spdk_proxy_image = config.spdk_proxy_image.clone();
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(storage_nodes: serde_json::Value) -> StorageCluster {
        serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
            "metadata": {"name": "sb", "namespace": "ns"},
            "spec": {"maxSubsystemCount": 10, "vcpuCount": 4, "storageNodes": storage_nodes},
        }))
        .expect("cluster")
    }

    fn node(config: serde_json::Value) -> StorageNode {
        let mut c = json!({"sizing": {"vcpuCount": 4}});
        c.as_object_mut()
            .expect("object")
            .extend(config.as_object().cloned().unwrap_or_default());
        serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNode",
            "metadata": {"name": "sb-w1-0", "namespace": "ns"},
            "spec": {"clusterRef": "sb", "workerNode": "w1", "slot": 0, "config": c},
        }))
        .expect("node")
    }

    #[test]
    fn partitions_follow_the_journal_layout() {
        // Regression: the count came out one too high in both branches (1 and 2).
        assert_eq!(partitions_per_device(true), 0);
        assert_eq!(partitions_per_device(false), 1);
    }

    #[test]
    fn the_body_carries_what_the_node_and_cluster_say() {
        let c = cluster(json!({
            "mgmtInterface": "eth0", "dataInterfaces": ["eth1"], "enableJournalDevice": true,
            "enableFormat4K": true,
        }));
        let n = node(json!({
            "journalManager": {"count": 2, "percentPerDevice": 5},
            "failureDomain": "3", "expand": true, "spdkImage": "img:1",
            "spdkProxyImage": "proxy:1", "spdkSystemMemory": "4G",
        }));
        let b = node_add_body("w1.svc:5000".into(), "ns", &n, &c);
        assert_eq!(b.node_address, "w1.svc:5000");
        assert_eq!(b.interface_name, "eth0");
        assert_eq!(b.data_nics, ["eth1"]);
        assert_eq!(b.partitions, 0);
        assert_eq!(b.jm_percent, 5);
        assert_eq!(b.ha_jm_count, Some(2));
        assert_eq!(b.failure_domain, Some(3));
        assert!(b.expand);
        assert!(b.format_4k);
        assert_eq!(b.spdk_image, "img:1");
        assert_eq!(b.spdk_proxy_image.as_deref(), Some("proxy:1"));
        assert_eq!(b.spdk_sys_mem.as_deref(), Some("4G"));
        assert_eq!(
            (
                b.cr_name.as_str(),
                b.cr_namespace.as_str(),
                b.cr_plural.as_str()
            ),
            ("sb-w1-0", "ns", "storagenodes")
        );
    }

    #[test]
    fn an_initial_node_keeps_the_control_plane_defaults() {
        let b = node_add_body("a:5000".into(), "ns", &node(json!({})), &cluster(json!({})));
        // Regression: a growth document's node left expand unset; an initial one must not
        // ask for a rebalance onto its own layout.
        assert!(!b.expand);
        assert_eq!(b.partitions, 1);
        assert_eq!(b.jm_percent, 3);
        assert_eq!(b.ha_jm_count, None);
        assert_eq!(b.failure_domain, None);
        assert_eq!(b.spdk_proxy_image, None);
        let wire = serde_json::to_value(&b).expect("json");
        assert_eq!(wire["expand"], false);
        assert!(wire.get("ha_jm_count").is_none());
    }

    #[test]
    fn only_a_numeric_label_is_an_index() {
        assert_eq!(failure_domain_index(Some("2")), Some(2));
        assert_eq!(failure_domain_index(Some("rack-a")), None);
        assert_eq!(failure_domain_index(Some("-1")), None);
        assert_eq!(failure_domain_index(None), None);
    }
}

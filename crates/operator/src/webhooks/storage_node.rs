//! StorageNode admission. On update it holds the fields with one legitimate writer (the
//! operator) against everyone else; on create it checks the node against the cluster it
//! names, since `clusterRef` can never be corrected afterwards.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject};
use kube::core::admission::{AdmissionReview, Operation};
use simplyblock_api::storage_cluster::DeviceClass;
use simplyblock_api::{StorageCluster, StorageNode};

use super::{WebhookContext, typed};

pub async fn review(
    State(ctx): State<Arc<WebhookContext>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    super::answer(review, |req| async move {
        let operator = ctx.is_operator(req.user_info.username.as_deref());
        match (&req.operation, req.object.as_ref()) {
            (Operation::Create, Some(object)) => {
                on_create(
                    &ctx,
                    object,
                    req.namespace.as_deref().unwrap_or_default(),
                    operator,
                )
                .await
            }
            (Operation::Update, Some(object)) if !operator => match req.old_object.as_ref() {
                Some(old) => on_update(object, old),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    })
    .await
}

fn on_update(object: &DynamicObject, old: &DynamicObject) -> Result<(), String> {
    let new: StorageNode = typed(object)?;
    // A node the Go operator left lacks what v1alpha2 requires (its cluster, its sizing)
    // until the upgrade's migration writes them: no layout is held yet to protect, and the
    // update that completes it is judged by what it makes.
    let Ok(old) = typed::<StorageNode>(old) else {
        return Ok(());
    };
    let changed = single_writer_changes(&old, &new);
    if changed.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} written by the simplyblock operator only: they describe a layout the control plane holds, and an edit here would not move it. Use a StorageNodeOps (Migrate) to move a node, or a new deployment document to add one",
        join_fields(&changed)
    ))
}

/// The single-writer fields `new` changes.
pub fn single_writer_changes(old: &StorageNode, new: &StorageNode) -> Vec<&'static str> {
    let mut changed = Vec::new();
    if old.spec.worker_node != new.spec.worker_node {
        changed.push("spec.workerNode");
    }
    if old.spec.socket_id != new.spec.socket_id {
        changed.push("spec.socketId");
    }
    if old.spec.node_index != new.spec.node_index {
        changed.push("spec.nodeIndex");
    }
    let (o, n) = (&old.spec.config, &new.spec.config);
    if o.sizing != n.sizing {
        changed.push("spec.config.sizing");
    }
    if o.pcie_allow_list != n.pcie_allow_list {
        changed.push("spec.config.pcieAllowList");
    }
    if o.reserved_system_cpu != n.reserved_system_cpu {
        changed.push("spec.config.reservedSystemCPU");
    }
    changed
}

fn join_fields(fields: &[&str]) -> String {
    match fields {
        [one] => format!("{one} is"),
        many => format!("{} are", many.join(", ")),
    }
}

async fn on_create(
    ctx: &WebhookContext,
    object: &DynamicObject,
    namespace: &str,
    operator: bool,
) -> Result<(), String> {
    let node: StorageNode = typed(object)?;
    let clusters: Api<StorageCluster> = Api::namespaced(ctx.client.clone(), namespace);
    let cluster = match clusters.get_opt(&node.spec.cluster_ref).await {
        Ok(Some(cluster)) => cluster,
        Ok(None) => {
            return Err(format!(
                "ClusterNotFound: spec.clusterRef names StorageCluster {}, which does not exist in namespace {namespace}; clusterRef cannot change later, so create the node naming an existing cluster",
                node.spec.cluster_ref
            ));
        }
        Err(e) => {
            return Err(format!(
                "the node could not be checked against StorageCluster {} ({e}); nothing was created, try again",
                node.spec.cluster_ref
            ));
        }
    };
    let mut problems = Vec::new();
    // The worker's name becomes a host name the operator sends requests to, and the
    // worker runs the node's privileged pod: it must be a Node that exists.
    let worker = &node.spec.worker_node;
    match Api::<Node>::all(ctx.client.clone()).get_opt(worker).await {
        Ok(Some(_)) => {}
        Ok(None) => problems.push(format!(
            "WorkerNotFound: spec.workerNode names Node {worker}, which does not exist; name a worker of this cluster (kubectl get nodes)"
        )),
        Err(e) => {
            return Err(format!(
                "the node could not be checked against Node {worker} ({e}); nothing was created, try again"
            ));
        }
    }
    problems.extend(create_problems(&node, &cluster, operator));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// What is wrong with a new node for this cluster. The operator may write a node whose
/// sizing differs from the cluster's (a rolling hardware upgrade); nobody may mix device
/// classes.
pub fn create_problems(
    node: &StorageNode,
    cluster: &StorageCluster,
    operator: bool,
) -> Vec<String> {
    let mut problems = Vec::new();
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    let sizing = &node.spec.config.sizing;
    if !operator {
        if sizing.vcpu_count != cluster.spec.vcpu_count {
            problems.push(format!(
                "spec.config.sizing.vcpuCount is {} but StorageCluster {name} runs {} vCPUs per node; set {} (the control plane assumes one core layout per cluster)",
                sizing.vcpu_count, cluster.spec.vcpu_count, cluster.spec.vcpu_count
            ));
        }
        if let Some(floor) = cluster.spec.min_huge_pages_size.as_deref()
            && sizing.min_huge_pages_size.as_deref() != Some(floor)
        {
            problems.push(format!(
                "spec.config.sizing.minHugePagesSize is {} but StorageCluster {name} states {floor}; set {floor}",
                sizing.min_huge_pages_size.as_deref().unwrap_or("unset")
            ));
        }
    }
    let class = cluster.spec.device_class;
    let (pci, paths): (Vec<&String>, Vec<&String>) = node
        .spec
        .config
        .device_names
        .iter()
        .partition(|d| is_pci_address(d));
    if !pci.is_empty() && !paths.is_empty() {
        problems.push("spec.config.deviceNames mixes PCI addresses and device paths; a cluster is built from one class of device, so list only one kind".into());
    } else if class == DeviceClass::NVMe && !paths.is_empty() {
        problems.push(format!(
            "spec.config.deviceNames lists device paths, but StorageCluster {name} is built from NVMe devices named by PCI address; list PCI addresses"
        ));
    } else if class == DeviceClass::LogicalBlock && !pci.is_empty() {
        problems.push(format!(
            "spec.config.deviceNames lists PCI addresses, but StorageCluster {name} is built from logical block devices named by path; list device paths"
        ));
    }
    let config = &node.spec.config;
    if class == DeviceClass::LogicalBlock
        && (!config.pcie_allow_list.is_empty()
            || !config.pcie_deny_list.is_empty()
            || config.pcie_model.is_some())
    {
        problems.push(format!(
            "the PCI filters (pcieAllowList, pcieDenyList, pcieModel) select NVMe devices and would select nothing on StorageCluster {name}, which is built from logical block devices; remove them"
        ));
    }
    problems
}

fn is_pci_address(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && name
            .chars()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(value: serde_json::Value) -> StorageNode {
        serde_json::from_value(json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "StorageNode",
            "metadata": {"name": "n"}, "spec": value
        }))
        .expect("node")
    }

    fn cluster(spec: serde_json::Value) -> StorageCluster {
        serde_json::from_value(json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "StorageCluster",
            "metadata": {"name": "sb"}, "spec": spec
        }))
        .expect("cluster")
    }

    #[test]
    fn pci_addresses_are_recognised() {
        assert!(is_pci_address("0000:5e:00.0"));
        assert!(!is_pci_address("/dev/sdb"));
        assert!(!is_pci_address("nvme0n1"));
        assert!(!is_pci_address("0000:5e:00.00"));
    }

    #[test]
    fn a_user_node_must_match_the_cluster_and_its_class() {
        let c = cluster(json!({"maxSubsystemCount": 10, "vcpuCount": 8, "minHugePagesSize": "8G"}));
        let n = node(json!({
            "clusterRef": "sb", "workerNode": "w1",
            "config": {"sizing": {"vcpuCount": 4}, "deviceNames": ["/dev/sdb"], "pcieModel": "x"}
        }));
        let problems = create_problems(&n, &c, false);
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(problems[0].starts_with(
            "spec.config.sizing.vcpuCount is 4 but StorageCluster sb runs 8 vCPUs per node"
        ));
        assert!(problems[1].contains("minHugePagesSize is unset"));
        assert!(problems[2].contains("lists device paths"));
        // The operator may size a node differently; the class rule binds it too.
        assert_eq!(create_problems(&n, &c, true).len(), 1);
    }

    #[test]
    fn pci_filters_are_refused_on_a_block_cluster() {
        let c = cluster(
            json!({"maxSubsystemCount": 10, "vcpuCount": 4, "deviceClass": "LogicalBlock"}),
        );
        let n = node(json!({
            "clusterRef": "sb", "workerNode": "w1",
            "config": {"sizing": {"vcpuCount": 4}, "deviceNames": ["/dev/sdb"], "pcieDenyList": ["0000:01:00.0"]}
        }));
        let problems = create_problems(&n, &c, false);
        assert_eq!(problems.len(), 1, "{problems:#?}");
        assert!(problems[0].starts_with("the PCI filters"));
    }

    #[test]
    fn the_single_writer_fields_are_named() {
        let old = node(
            json!({"clusterRef": "sb", "workerNode": "w1", "config": {"sizing": {"vcpuCount": 4}}}),
        );
        let mut new = old.clone();
        new.spec.worker_node = "w2".into();
        new.spec.config.sizing.vcpu_count = 8;
        assert_eq!(
            single_writer_changes(&old, &new),
            ["spec.workerNode", "spec.config.sizing"]
        );
        let mut labels_only = old.clone();
        labels_only.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
        assert!(single_writer_changes(&old, &labels_only).is_empty());
    }

    fn dynamic(spec: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "StorageNode",
            "metadata": {"name": "n"}, "spec": spec
        }))
        .expect("object")
    }

    #[test]
    fn a_node_the_go_operator_left_is_completed_by_the_update_that_sizes_it() {
        // Without a cluster and a sizing, as the Go operator stored it: the migration's
        // update names both, which a complete node could not have changed.
        let left = dynamic(json!({"workerNode": "w1"}));
        let completed = dynamic(
            json!({"clusterRef": "sb", "workerNode": "w1", "config": {"sizing": {"vcpuCount": 4}}}),
        );
        assert_eq!(on_update(&completed, &left), Ok(()));
        // Once complete, the sizing is the operator's alone again.
        let resized = dynamic(
            json!({"clusterRef": "sb", "workerNode": "w1", "config": {"sizing": {"vcpuCount": 8}}}),
        );
        let refused = on_update(&resized, &completed).expect_err("refused");
        assert!(
            refused.starts_with("spec.config.sizing is written by the simplyblock operator only"),
            "{refused}"
        );
        // An update that leaves the node incomplete is refused for what it makes.
        assert!(on_update(&left, &left).is_err());
    }
}

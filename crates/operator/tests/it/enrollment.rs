//! Enrollment on the real API server: the storage-node DaemonSet selects its workers only
//! by a label a kubelet may not set on its own Node, and an installation of an earlier
//! release moves to that label without a storage-node pod losing its worker.
//!
//! The test API server does not run the NodeRestriction plugin (it has no kubelets), so
//! what is shown is the selector and the labels the operator writes, not the plugin.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_api::keys::{
    CLUSTER_LABEL, ENROLLMENT_LABEL, LEGACY_ENROLLMENT_LABEL, NAMESPACE_LABEL, WORKER_LABEL,
};
use simplyblock_api::{StorageCluster, StorageNode};
use simplyblock_operator::cluster::workload;
use simplyblock_operator::context::Context;

use crate::support;

const NS: &str = "enrollment";

async fn labels(nodes: &Api<Node>, worker: &str) -> BTreeMap<String, String> {
    nodes
        .get(worker)
        .await
        .expect("worker Node")
        .metadata
        .labels
        .unwrap_or_default()
}

/// Whether a DaemonSet with `selector` places a pod on a Node with `labels`.
fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[tokio::test]
async fn a_worker_labelled_as_its_kubelet_may_label_it_is_not_selected_and_the_old_label_moves() {
    let kube = support::api_server().await.client().await.expect("client");
    support::namespace(&kube, NS).await;
    let nodes: Api<Node> = Api::all(kube.clone());
    // en-w1: a worker of an earlier release's installation, with a storage-node pod the old
    // selector placed; en-w2: a worker new to the cluster; en-w3: a worker whose kubelet
    // labelled its own Node as earlier releases enrolled workers.
    let old = json!({LEGACY_ENROLLMENT_LABEL: "sb", NAMESPACE_LABEL: NS});
    for (worker, labels) in [
        ("en-w1", old.clone()),
        ("en-w2", json!({})),
        ("en-w3", old.clone()),
    ] {
        let node: Node =
            serde_json::from_value(json!({"metadata": {"name": worker, "labels": labels}}))
                .expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("worker Node");
    }
    let sc: StorageCluster = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
        "metadata": {"name": "sb", "namespace": NS},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 4,
                 "stripe": {"dataChunks": 1, "parityChunks": 1}}
    }))
    .expect("cluster");
    let cluster = Api::<StorageCluster>::namespaced(kube.clone(), NS)
        .create(&PostParams::default(), &sc)
        .await
        .expect("StorageCluster");
    let storage_nodes: Api<StorageNode> = Api::namespaced(kube.clone(), NS);
    for worker in ["en-w1", "en-w2"] {
        let sn: StorageNode = serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNode",
            "metadata": {"name": simplyblock_api::names::storage_node_name("sb", worker, 0),
                         "labels": {WORKER_LABEL: worker}},
            "spec": {"clusterRef": "sb", "workerNode": worker, "slot": 0,
                     "config": {"sizing": {"vcpuCount": 4, "minHugePagesSize": "4G"}}},
        }))
        .expect("storage node");
        storage_nodes
            .create(&PostParams::default(), &sn)
            .await
            .expect("StorageNode");
    }
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NS);
    let placed: Pod = serde_json::from_value(json!({
        "metadata": {"name": "simplyblock-storage-node-sb-old",
                     "labels": {CLUSTER_LABEL: "sb", "app.kubernetes.io/name": "simplyblock-storage-node"}},
        "spec": {"nodeName": "en-w1", "nodeSelector": old,
                 "containers": [{"name": "storage-node", "image": workload::DEFAULT_IMAGE}]},
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &placed)
        .await
        .expect("the old storage-node pod");

    let ctx = Arc::new(
        Context::new(
            support::operator_kube().await,
            support::cp_client("http://127.0.0.1:9"),
            support::MANAGED_TLS_ENDPOINT.into(),
            NS.into(),
        )
        .watching(NS),
    );
    let cluster = Arc::new(cluster);
    workload::reconcile(cluster.clone(), ctx.clone())
        .await
        .expect("a pass of the workload controller");

    let ds = Api::<DaemonSet>::namespaced(kube.clone(), NS)
        .get("simplyblock-storage-node-sb")
        .await
        .expect("DaemonSet");
    let selector = ds
        .spec
        .template
        .spec
        .and_then(|s| s.node_selector)
        .unwrap_or_default();
    assert_eq!(
        selector,
        BTreeMap::from([
            (ENROLLMENT_LABEL.to_string(), "sb".to_string()),
            (NAMESPACE_LABEL.to_string(), NS.to_string()),
        ])
    );
    let w1 = labels(&nodes, "en-w1").await;
    let w2 = labels(&nodes, "en-w2").await;
    let w3 = labels(&nodes, "en-w3").await;
    assert!(selects(&selector, &w1), "{w1:?}");
    assert!(selects(&selector, &w2), "{w2:?}");
    assert!(
        !selects(&selector, &w3),
        "a self-labelled worker is selected: {w3:?}"
    );
    assert!(!w3.contains_key(ENROLLMENT_LABEL), "{w3:?}");
    // The old label goes from a worker the cluster does not use, and stays on one whose pod
    // the old selector placed (its kubelet would refuse that pod on a restart without it).
    assert!(!w3.contains_key(LEGACY_ENROLLMENT_LABEL), "{w3:?}");
    assert!(!w3.contains_key(NAMESPACE_LABEL), "{w3:?}");
    assert_eq!(
        w1.get(LEGACY_ENROLLMENT_LABEL).map(String::as_str),
        Some("sb")
    );

    // A kubelet labels its Node again as earlier releases enrolled workers: still no pod.
    nodes
        .patch(
            "en-w3",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": old}})),
        )
        .await
        .expect("self-labelled");
    assert!(!selects(&selector, &labels(&nodes, "en-w3").await));

    // Once the old pod is gone, the next pass removes the old label from its worker. (No
    // kubelet here confirms a graceful deletion.)
    pods.delete(
        "simplyblock-storage-node-sb-old",
        &DeleteParams::default().grace_period(0),
    )
    .await
    .expect("the old pod deleted");
    workload::reconcile(cluster, ctx)
        .await
        .expect("a second pass");
    let w1 = labels(&nodes, "en-w1").await;
    assert!(!w1.contains_key(LEGACY_ENROLLMENT_LABEL), "{w1:?}");
    assert!(selects(&selector, &w1), "{w1:?}");
}

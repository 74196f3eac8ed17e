//! Migrate end to end on the real API server and sbsim: the node moves to a worker that
//! was not in the storage plane, keeps its control-plane id, and its StorageNode follows.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use serde_json::json;
use simplyblock_api::StorageNode;
use simplyblock_api::common::OpsPhase;
use simplyblock_api::keys::{ENROLLMENT_LABEL, WORKER_LABEL};
use simplyblock_api::storage_node_ops::StorageNodeOps;
use simplyblock_controlplane::NodeStatus;

use crate::maintenance::fleet;
use crate::support::until;

#[tokio::test]
async fn a_node_moves_to_a_new_worker_with_its_identity_and_its_storage_node_follows() {
    let f = fleet("migrate-one", 4, 3, 1).await;
    let (node, id) = f.nodes[0].clone();
    let (source, target) = (f.workers[0].clone(), f.workers[3].clone());
    let op: StorageNodeOps = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNodeOps",
        "metadata": {"name": "move"},
        "spec": {"nodeRef": node, "action": "Migrate", "migrate": {"targetWorkerNode": target}},
    }))
    .expect("operation");
    f.ops()
        .create(&PostParams::default(), &op)
        .await
        .expect("created");
    let done = f.reaches("move", OpsPhase::Succeeded, None).await;
    let message = done.status.and_then(|s| s.message).unwrap_or_default();
    assert!(message.contains(&target), "{message}");

    // The same control-plane node, online at the target, promoted once after one restart.
    let moved = f.cp.get_storage_node(f.uuid, id).await.expect("node");
    assert_eq!(
        (moved.hostname.as_str(), moved.status),
        (target.as_str(), NodeStatus::Online)
    );
    assert_eq!(f.calls("restart", id).await, 1);
    assert_eq!(f.calls("promote", id).await, 1);
    let sn = Api::<StorageNode>::namespaced(f.kube.clone(), &f.ns)
        .get(&node)
        .await
        .expect("StorageNode");
    assert_eq!(sn.spec.worker_node, target);
    assert_eq!(
        sn.metadata.labels.unwrap_or_default().get(WORKER_LABEL),
        Some(&target)
    );
    // The target serves the cluster; the source, left without a node, does not.
    let workers: Api<Node> = Api::all(f.kube.clone());
    let labels = |n: Node| n.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels(workers.get(&target).await.expect("target")).get(ENROLLMENT_LABEL),
        Some(&"sb".to_owned())
    );
    until("the source unenrolled", async || {
        let l = labels(workers.get(&source).await.ok()?);
        (!l.contains_key(ENROLLMENT_LABEL)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_window_waits_pending_until_the_cluster_is_active() {
    // The harness's cluster is not activated.
    let h = crate::support::harness("maint-gate", "", (1, 1)).await;
    let first = h.cp.list_storage_nodes(h.uuid).await.expect("nodes")[0].id;
    let worker: Node =
        serde_json::from_value(json!({"metadata": {"name": "maint-gate-w1"}})).expect("node");
    Api::<Node>::all(h.kube.clone())
        .create(&PostParams::default(), &worker)
        .await
        .expect("worker Node");
    let nodes: Api<StorageNode> = Api::namespaced(h.kube.clone(), &h.ns);
    let sn: StorageNode = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNode",
        "metadata": {"name": "sb-gate-0"},
        "spec": {"clusterRef": "sb", "workerNode": "maint-gate-w1", "slot": 0,
                 "config": {"sizing": {"vcpuCount": 4, "minHugePagesSize": "4G"}}},
    }))
    .expect("storage node");
    nodes
        .create(&PostParams::default(), &sn)
        .await
        .expect("StorageNode");
    nodes
        .patch_status(
            "sb-gate-0",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"uuid": first.to_string()}})),
        )
        .await
        .expect("uuid");
    tokio::spawn(simplyblock_operator::node::ops::run(h.ctx.clone()));
    let op: StorageNodeOps = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNodeOps",
        "metadata": {"name": "held"},
        "spec": {"nodeRef": "sb-gate-0", "action": "HostMaintenance"},
    }))
    .expect("operation");
    let ops: Api<StorageNodeOps> = Api::namespaced(h.kube.clone(), &h.ns);
    ops.create(&PostParams::default(), &op)
        .await
        .expect("created");
    let why = crate::support::raised(&h.kube, &h.ns, Some("held"), "ClusterNotReady").await;
    assert!(why[0].contains("not active"), "{why:?}");
    // The event is raised in the pass that writes the status: read the status once written.
    let held = until("the held operation's status", async || {
        ops.get("held").await.ok()?.status
    })
    .await;
    assert_eq!(held.phase, OpsPhase::Pending);
    let node = nodes.get("sb-gate-0").await.expect("node");
    assert_eq!(
        node.status.and_then(|s| s.active_ops_ref),
        None,
        "no lock taken"
    );
    // Active, it is admitted and takes the node's lock.
    h.activated().await;
    until("the window admitted", async || {
        let op = ops.get("held").await.ok()?;
        (op.status?.phase == OpsPhase::Running).then_some(())
    })
    .await;
}

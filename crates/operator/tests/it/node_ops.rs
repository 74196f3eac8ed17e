//! StorageNodeOps end to end on the real API server and sbsim: each single-call action, a
//! restart refused without force, and the node's lock.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_api::StorageNode;
use simplyblock_api::common::OpsPhase;
use simplyblock_api::storage_node_ops::StorageNodeOps;
use simplyblock_controlplane::NodeStatus;

use crate::support::{Harness, PATIENCE, harness_timed, raised, until, until_explained};

const NODE: &str = "sb-snops-0";

/// The harness's cluster, a StorageNode for its first control-plane node, and the
/// StorageNodeOps controller.
async fn node_harness(ns: &str, worker: &str) -> (Harness, simplyblock_controlplane::Uuid) {
    // A restart lasts two seconds here, so a look sees a serving node leave and return.
    let timings = simplyblock_simulator::Timings {
        node_restart_ms: 2_000_000,
        ..Default::default()
    };
    let h = harness_timed(ns, "", (1, 1), timings).await;
    let first = h.cp.list_storage_nodes(h.uuid).await.expect("nodes")[0].id;
    let nodes: Api<Node> = Api::all(h.kube.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": worker}})).expect("node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("worker Node");
    let storage_nodes: Api<StorageNode> = Api::namespaced(h.kube.clone(), ns);
    let sn: StorageNode = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNode",
        "metadata": {"name": NODE},
        "spec": {"clusterRef": "sb", "workerNode": worker, "slot": 0,
                 "config": {"sizing": {"vcpuCount": 4, "minHugePagesSize": "4G"}}},
    }))
    .expect("storage node");
    storage_nodes
        .create(&PostParams::default(), &sn)
        .await
        .expect("StorageNode");
    storage_nodes
        .patch_status(
            NODE,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"uuid": first.to_string()}})),
        )
        .await
        .expect("uuid");
    tokio::spawn(simplyblock_operator::node::ops::run(h.ctx.clone()));
    (h, first)
}

fn operation(name: &str, action: &str, extra: serde_json::Value) -> StorageNodeOps {
    let mut spec = json!({"nodeRef": NODE, "action": action});
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNodeOps",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("operation")
}

/// Creates the operation and waits for it to end in `phase`.
async fn run(h: &Harness, op: StorageNodeOps, phase: OpsPhase) -> StorageNodeOps {
    let api: Api<StorageNodeOps> = Api::namespaced(h.kube.clone(), &h.ns);
    let name = op.metadata.name.clone().expect("name");
    api.create(&PostParams::default(), &op)
        .await
        .expect("created");
    let last = std::sync::Mutex::new(None);
    until_explained(
        &format!("{name} {phase:?}"),
        PATIENCE,
        async || {
            let op = api.get(&name).await.ok()?;
            *last.lock().expect("lock") = op.status.clone();
            (op.status.as_ref()?.phase == phase).then_some(op)
        },
        || format!("last seen {:?}", last.lock().expect("lock")),
    )
    .await
}

async fn status_of(h: &Harness, id: simplyblock_controlplane::Uuid) -> NodeStatus {
    h.cp.get_storage_node(h.uuid, id)
        .await
        .expect("node")
        .status
}

#[tokio::test]
async fn each_single_call_action_calls_once_and_ends_when_the_node_is_there() {
    let (h, id) = node_harness("snops-actions", "snops-actions-w1").await;
    let base = format!("/api/v2/clusters/{}/storage-nodes/{id}", h.uuid);
    for (name, action, extra, calls, wanted) in [
        (
            "stop",
            "Shutdown",
            json!({}),
            "shutdown",
            NodeStatus::Offline,
        ),
        ("start", "Restart", json!({}), "restart", NodeStatus::Online),
        (
            "pause",
            "Suspend",
            json!({}),
            "suspend",
            NodeStatus::Suspended,
        ),
        ("go-on", "Resume", json!({}), "resume", NodeStatus::Online),
    ] {
        let done = run(&h, operation(name, action, extra), OpsPhase::Succeeded).await;
        crate::kubectl::ready(
            &Api::<StorageNodeOps>::namespaced(h.kube.clone(), &h.ns),
            "storagenodeops.storage.simplyblock.io",
            name,
        )
        .await;
        let status = done.status.expect("status");
        assert!(status.started_at.is_some() && status.completed_at.is_some());
        assert_eq!(status_of(&h, id).await, wanted, "{action}");
        assert_eq!(
            h.calls("POST", &format!("{base}/{calls}")).await,
            1,
            "{action}"
        );
        raised(&h.kube, &h.ns, Some(name), "OperationSucceeded").await;
    }
    // The lock is released once the last one has ended: the terminal write comes first,
    // so a reader may see Succeeded a moment before the release.
    let nodes = Api::<StorageNode>::namespaced(h.kube.clone(), &h.ns);
    until("the node's lock released", async || {
        let node = nodes.get(NODE).await.ok()?;
        node.status?.active_ops_ref.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_restart_of_a_serving_node_needs_force_and_is_refused_before_any_call() {
    let (h, id) = node_harness("snops-refusals", "snops-refusals-w1").await;
    let base = format!("/api/v2/clusters/{}/storage-nodes/{id}", h.uuid);
    let refused = run(
        &h,
        operation("bounce", "Restart", json!({})),
        OpsPhase::Failed,
    )
    .await;
    let message = refused.status.and_then(|s| s.message).unwrap_or_default();
    assert!(message.contains("spec.force"), "{message}");
    assert_eq!(status_of(&h, id).await, NodeStatus::Online);
    for verb in ["restart", "shutdown"] {
        assert_eq!(
            h.calls("POST", &format!("{base}/{verb}")).await,
            0,
            "{verb}"
        );
    }
    // Forced, it restarts a serving node.
    run(
        &h,
        operation("bounce-forced", "Restart", json!({"force": true})),
        OpsPhase::Succeeded,
    )
    .await;
    assert_eq!(h.calls("POST", &format!("{base}/restart")).await, 1);
}

#[tokio::test]
async fn an_operation_on_a_node_that_does_not_exist_is_refused_saying_so() {
    let h = crate::support::harness("snops-admission", "", (1, 1)).await;
    let api: Api<StorageNodeOps> = Api::namespaced(h.kube.clone(), &h.ns);
    let mut missing = operation(
        "move",
        "Migrate",
        json!({"migrate": {"targetWorkerNode": "snops-admission-nowhere"}}),
    );
    missing.spec.node_ref = "sb-nowhere-0".into();
    let refused = api
        .create(&PostParams::default(), &missing)
        .await
        .expect_err("refused at admission");
    let message = refused.to_string();
    assert!(
        message.contains("StorageNode sb-nowhere-0, which does not exist")
            && message.contains("Node snops-admission-nowhere, which does not exist"),
        "{message}"
    );
}

//! The controllers on the control plane's event streams, on the real API server and sbsim:
//! a StorageNode's status follows its stream without a GET of the node, and a removed
//! node leaves no stream open (its device mirror's included).

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_api::StorageNode;
use simplyblock_controlplane::{NodeStatus, Scope};

use crate::support::{PATIENCE, harness, nudged, until, until_within};

#[tokio::test]
async fn a_storage_node_follows_its_stream_and_a_removed_one_leaves_no_stream_open() {
    let ns = "streams-node";
    let h = harness(ns, "", (1, 1)).await;
    h.activated().await;
    let id = h.cp.list_storage_nodes(h.uuid).await.expect("nodes")[0].id;
    let worker: Node =
        serde_json::from_value(json!({"metadata": {"name": format!("{ns}-w0")}})).expect("worker");
    Api::<Node>::all(h.kube.clone())
        .create(&PostParams::default(), &worker)
        .await
        .expect("worker Node");
    let api: Api<StorageNode> = Api::namespaced(h.kube.clone(), ns);
    let sn: StorageNode = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNode",
        "metadata": {"name": "sn-0"},
        "spec": {"clusterRef": "sb", "workerNode": format!("{ns}-w0"), "slot": 0,
                 "config": {"sizing": {"vcpuCount": 4, "minHugePagesSize": "4G"}}},
    }))
    .expect("storage node");
    api.create(&PostParams::default(), &sn)
        .await
        .expect("StorageNode");
    api.patch_status(
        "sn-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"uuid": id.to_string(), "phase": "Online"}})),
    )
    .await
    .expect("uuid");
    tokio::spawn(simplyblock_operator::node::controller::run(h.ctx.clone()));
    tokio::spawn(simplyblock_operator::node::ops::run(h.ctx.clone()));
    tokio::spawn(simplyblock_operator::device::mirror::run(h.ctx.clone()));
    tokio::spawn(simplyblock_operator::volume_ops::run(
        h.ctx.clone(),
        "operator:test".into(),
    ));

    // The first pass opens the cluster's node stream; once it is synced, a pass that
    // starts after it reads the node from the stream.
    let scope = Scope::Nodes { cluster: h.uuid };
    let nodes_stream = format!("/api/v2/clusters/{}/storage-nodes/", h.uuid);
    until("the cluster's node stream synced", async || {
        let informer = h.ctx.follow(scope).ok()?;
        informer.is_synced(scope).then_some(())
    })
    .await;
    let controller = simplyblock_operator::node::controller::CONTROLLER;
    nudged(&h.ctx.metrics, &api, controller, "sn-0").await;
    let mirror = simplyblock_operator::device::mirror::CONTROLLER;
    nudged(&h.ctx.metrics, &api, mirror, "sn-0").await;
    let detail = format!("/api/v2/clusters/{}/storage-nodes/{id}/", h.uuid);
    let reads = h.calls("GET", &detail).await;

    h.cp.suspend_storage_node(h.uuid, id, false)
        .await
        .expect("suspend");
    until("the StorageNode's status says suspended", async || {
        let s = api.get("sn-0").await.ok()?.status?;
        (s.status.as_deref() == Some(NodeStatus::Suspended.as_str())).then_some(())
    })
    .await;
    assert_eq!(
        h.calls("GET", &detail).await,
        reads,
        "the node was read from its stream, not by GET"
    );
    let open = h.sim.server.streams.open();
    assert_eq!(open.get(&nodes_stream), Some(&1), "{open:?}");
    // The device mirror follows the node's devices.
    let devices_stream = format!("{nodes_stream}{id}/devices/");
    until("the node's device stream open", async || {
        (h.sim.server.streams.open().get(&devices_stream) == Some(&1)).then_some(())
    })
    .await;

    // Deleting the StorageNode removes the node through a Remove operation.
    api.delete("sn-0", &DeleteParams::default())
        .await
        .expect("delete");
    until_within("the StorageNode gone", PATIENCE, async || {
        api.get_opt("sn-0").await.ok()?.is_none().then_some(())
    })
    .await;
    let node = h.cp.get_storage_node(h.uuid, id).await.expect("node");
    assert_eq!(node.status, NodeStatus::Removed);
    until("no stream of the removed node open", async || {
        let open = h.sim.server.streams.open();
        (!open.keys().any(|path| path.contains(&id.to_string()))).then_some(())
    })
    .await;
    let open = h.sim.server.streams.open();
    assert_eq!(
        open.get(&nodes_stream),
        Some(&1),
        "one stream per scope: {open:?}"
    );
}

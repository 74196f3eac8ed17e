//! The label source against a real kube-apiserver: sbsim watches Nodes (metadata only)
//! and a worker's storage-node API answers only while its Node carries the enrollment
//! label the operator writes.

use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use simplyblock_controlplane::{Error, SnodeClient, SnodeConfig};
use simplyblock_simulator::labels;

#[tokio::test]
async fn enrollment_label_on_the_node_opens_the_storage_node_api() {
    simplyblock_simulator::install_crypto_provider();
    let kenv = simplyblock_testenv::TestEnv::start()
        .await
        .expect("test API server");
    let kube = kenv.client().await.expect("kube client");
    let env = start(2, 0).await;
    let watch_client = labels::client(kenv.kubeconfig_path())
        .await
        .expect("client from kubeconfig");
    let watcher = tokio::spawn(labels::watch(env.server.sim.clone(), watch_client));

    let nodes: Api<Node> = Api::all(kube);
    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "w1", "labels": {"kubernetes.io/hostname": "w1"}}
    }))
    .expect("node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("create Node");

    let mut cfg = SnodeConfig::new(snode_address("w1"));
    cfg.connect_to = Some(env.server.addr);
    cfg.timeout = Duration::from_secs(2);
    let agent = SnodeClient::new(cfg).expect("agent");
    // The watch has seen the Node, which is not enrolled: no answer.
    eventually("labels mirrored", || async {
        let calls = env.server.sim.read(|t, _| {
            t.workers
                .get("w1")
                .map(|w| w.labels.contains_key("kubernetes.io/hostname"))
        });
        calls.filter(|x| *x)
    })
    .await;
    assert!(matches!(agent.info().await, Err(Error::Unavailable { .. })));

    let patch = serde_json::json!({"metadata": {"labels": {LABEL: "c1"}}});
    nodes
        .patch("w1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("label the Node");
    eventually("agent answers", || async { agent.info().await.ok() }).await;

    let unlabel = serde_json::json!({"metadata": {"labels": {LABEL: null}}});
    nodes
        .patch("w1", &PatchParams::default(), &Patch::Merge(&unlabel))
        .await
        .expect("unlabel");
    eventually("agent gone again", || async {
        agent.info().await.is_err().then_some(())
    })
    .await;
    // w2 has no Node at all: it stays unreachable.
    let mut cfg = SnodeConfig::new(snode_address("w2"));
    cfg.connect_to = Some(env.server.addr);
    assert!(SnodeClient::new(cfg).expect("agent").info().await.is_err());
    watcher.abort();
}

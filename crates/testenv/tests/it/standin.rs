//! The stand-in reports workloads ready as a kubelet would, and unready when told.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_testenv::standin::{READY_ANNOTATION, StandIn};
use simplyblock_testenv::wait::until;
use simplyblock_testenv::{TestEnv, create_namespace};

fn labels(app: &str) -> serde_json::Value {
    json!({"matchLabels": {"app": app}})
}

#[tokio::test]
async fn workloads_become_ready_and_a_daemon_set_counts_its_nodes() {
    let env = TestEnv::shared().expect("test environment");
    let client = env.client().await.expect("client");
    let ns = "standin";
    create_namespace(&client, ns).await.expect("namespace");
    let _standin = StandIn::start(client.clone(), Some(ns.into()));

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "api"},
        "spec": {"replicas": 2, "selector": labels("api"), "template": {
            "metadata": {"labels": {"app": "api"}},
            "spec": {"containers": [{"name": "api", "image": "example/api:1"}]}
        }}
    }))
    .expect("deployment");
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("created");
    until("the deployment ready", async || {
        let s = deployments.get("api").await.ok()?.status?;
        (s.ready_replicas == Some(2)).then_some(())
    })
    .await;
    deployments
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {READY_ANNOTATION: "0"}}})),
        )
        .await
        .expect("annotated");
    until("the deployment unready", async || {
        let s = deployments.get("api").await.ok()?.status?;
        (s.ready_replicas.unwrap_or(0) == 0 && s.replicas == Some(2)).then_some(())
    })
    .await;

    let nodes: Api<Node> = Api::all(client.clone());
    for (name, role) in [("standin-a", "storage"), ("standin-b", "other")] {
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {"standin-role": role}}}),
        )
        .expect("node");
        let _ = nodes.create(&PostParams::default(), &node).await;
    }
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "node-plugin"},
        "spec": {"selector": labels("node"), "template": {
            "metadata": {"labels": {"app": "node"}},
            "spec": {
                "nodeSelector": {"standin-role": "storage"},
                "containers": [{"name": "node", "image": "example/node:1"}]
            }
        }}
    }))
    .expect("daemon set");
    daemon_sets
        .create(&PostParams::default(), &ds)
        .await
        .expect("created");
    // One of the two Nodes matches the selector.
    until("the daemon set's one pod ready", async || {
        let s = daemon_sets.get("node-plugin").await.ok()?.status?;
        (s.desired_number_scheduled == 1 && s.number_ready == 1).then_some(())
    })
    .await;
}

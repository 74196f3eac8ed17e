//! The one-node cluster: `Node::up` gives a Ready node whose pods run on the bridge network,
//! reach the API server by the `kubernetes` Service's name (CoreDNS, kube-proxy) with their
//! own ServiceAccount token, and whose logs the API server reads from the kubelet; dropping it
//! leaves nothing behind. Runs as root, with the images scripts/build-images.sh writes.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams, PostParams};
use simplyblock_testenv::node::{self, Node};
use simplyblock_testenv::wait;

#[tokio::test]
async fn a_pod_runs_on_the_node_and_nothing_stays_after_it() {
    let node = Node::up(&node::default_images_dir())
        .await
        .expect("node up");
    let client = node.env().client().await.expect("client");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "hello"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "hello",
                "image": node::PAUSE_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["/bin/busybox", "sh", "-c", concat!(
                    "echo from $(/bin/busybox hostname) at $(/bin/busybox hostname -i); ",
                    "token=$(/bin/busybox cat /var/run/secrets/kubernetes.io/serviceaccount/token); ",
                    "/bin/busybox wget -qO- --no-check-certificate ",
                    "--header \"Authorization: Bearer $token\" ",
                    "https://kubernetes.default.svc.cluster.local/version",
                )],
            }],
        },
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("created");

    let phase = wait::until("the pod to end", async || {
        let phase = pods.get("hello").await.ok()?.status?.phase?;
        matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase)
    })
    .await;
    let log = pods
        .logs("hello", &LogParams::default())
        .await
        .expect("the API server reads the log from the kubelet");
    assert_eq!(phase, "Succeeded", "the pod ended {phase}; its log:\n{log}");
    assert!(log.contains("from hello at 10.244.0."), "{log}");
    assert!(
        log.contains(r#""gitVersion": "v1.37.2""#),
        "the API server's version through the kubernetes Service, by its name: {log}"
    );

    // The node is the machine's while it is up: nobody else takes it down.
    let refused = node::down().expect_err("down while a node is up");
    assert!(refused.to_string().contains("a node is up"), "{refused}");
    let running = node::leftovers();
    assert!(
        running.iter().any(|l| l.starts_with("network device"))
            && running.iter().any(|l| l.starts_with("process")),
        "the refused down removed the node's device or processes: {running:#?}"
    );

    tokio::task::spawn_blocking(move || drop(node))
        .await
        .expect("node down");
    let left = node::leftovers();
    assert!(left.is_empty(), "the node left: {left:#?}");
}

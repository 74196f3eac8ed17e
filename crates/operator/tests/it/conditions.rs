//! The standard conditions on the real API server and sbsim: `kubectl wait
//! --for=condition=Ready` returns for a kind brought to its healthy state, each condition
//! records the generation its controller acted on, and a storage node's worker going away
//! and coming back is said once each way (WorkerAway, WorkerReturned) with Degraded
//! following it.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use simplyblock_api::common::OpsPhase;
use simplyblock_api::conditions::{DEGRADED, READY};
use simplyblock_api::{
    StorageCluster, StorageClusterOps, StorageDevice, StorageNode, StoragePool, StoragePoolOps,
};

use crate::devices::{NODE, device_harness, mirrored, operation, run};
use crate::support::{Harness, api_server, occurrences, occurrences_reaching, passes, until};

/// `kubectl wait --for=condition=Ready <resource>/<name>` against the tests' API server,
/// as a person runs it; panics with kubectl's output when it does not succeed.
async fn kubectl_wait_ready(ns: &str, resource: &str, name: &str) {
    kubectl_wait(ns, resource, name, "--for=condition=Ready").await;
}

/// `kubectl wait <condition> <resource>/<name>`, as [`kubectl_wait_ready`].
async fn kubectl_wait(ns: &str, resource: &str, name: &str, condition: &str) {
    let kubeconfig = api_server().await.kubeconfig_path();
    crate::kubectl::kubectl_wait_on(kubeconfig, Some(ns), resource, name, condition).await;
}

/// The conditions of `name`, once its Ready condition is True, checked to record the
/// generation that is stored.
async fn ready_at_its_generation<K>(api: &Api<K>, name: &str, conditions: fn(&K) -> &[Condition])
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let object = api.get(name).await.expect("object");
    let generation = object.meta().generation;
    let found = conditions(&object);
    let ready = found
        .iter()
        .find(|c| c.type_ == READY)
        .unwrap_or_else(|| panic!("{name} has no Ready condition: {found:?}"));
    assert_eq!(ready.status, "True", "{name}: {ready:?}");
    assert!(generation.is_some(), "{name} has a generation");
    for c in found {
        assert_eq!(
            c.observed_generation, generation,
            "{name}'s {} records the generation acted on",
            c.type_
        );
    }
}

fn node_conditions(n: &StorageNode) -> &[Condition] {
    n.status.as_ref().map_or(&[], |s| &s.conditions[..])
}

fn device_conditions(d: &StorageDevice) -> &[Condition] {
    d.status.as_ref().map_or(&[], |s| &s.conditions[..])
}

fn cluster_conditions(c: &StorageCluster) -> &[Condition] {
    c.status.as_ref().map_or(&[], |s| &s.conditions[..])
}

fn ops_conditions(o: &simplyblock_api::StorageDeviceOps) -> &[Condition] {
    o.status.as_ref().map_or(&[], |s| &s.conditions[..])
}

fn ops_of_pool(o: &StoragePoolOps) -> &[Condition] {
    o.status.as_ref().map_or(&[], |s| &s.conditions[..])
}

fn cluster_ops_conditions(o: &StorageClusterOps) -> &[Condition] {
    o.status.as_ref().map_or(&[], |s| &s.conditions[..])
}

fn pool_conditions(p: &StoragePool) -> &[Condition] {
    p.status.as_ref().map_or(&[], |s| &s.conditions[..])
}

/// A StorageClusterOps activating a StorageCluster, the cluster, its default StoragePool, a StorageNode, its StorageDevices and a
/// StorageDeviceOps each brought to their healthy state: `kubectl wait
/// --for=condition=Ready` returns for each. A StoragePoolOps, always refused, is
/// Ready=False with reason Failed.
#[tokio::test]
async fn kubectl_waits_for_ready_on_the_storage_kinds() {
    let ns = "conditions-ready";
    let (h, node) = device_harness(ns).await;
    tokio::spawn(simplyblock_operator::device::ops::run(h.ctx.clone()));
    tokio::spawn(simplyblock_operator::cluster::controller::run(
        h.ctx.clone(),
    ));
    tokio::spawn(simplyblock_operator::pool::controller::run(h.ctx.clone()));
    tokio::spawn(simplyblock_operator::pool::ops::run(h.ctx.clone()));
    // Activated by a StorageClusterOps, as a person does it.
    let _cluster_ops = h.start();
    let activate: StorageClusterOps = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageClusterOps",
        "metadata": {"name": "sb-activate"},
        "spec": {"clusterRef": "sb", "action": "Activate"},
    }))
    .expect("op");
    h.ops()
        .create(&PostParams::default(), &activate)
        .await
        .expect("created");
    h.phase_is("sb-activate", OpsPhase::Succeeded).await;
    kubectl_wait_ready(
        ns,
        "storageclusterops.storage.simplyblock.io",
        "sb-activate",
    )
    .await;
    ready_at_its_generation(&h.ops(), "sb-activate", cluster_ops_conditions).await;

    kubectl_wait_ready(ns, "storageclusters.storage.simplyblock.io", "sb").await;
    ready_at_its_generation(&h.clusters(), "sb", cluster_conditions).await;

    kubectl_wait_ready(ns, "storagenodes.storage.simplyblock.io", NODE).await;
    let nodes: Api<StorageNode> = Api::namespaced(h.kube.clone(), ns);
    ready_at_its_generation(&nodes, NODE, node_conditions).await;

    // The Online cluster's default pool.
    kubectl_wait_ready(ns, "storagepools.storage.simplyblock.io", "sb-default").await;
    let pools: Api<StoragePool> = Api::namespaced(h.kube.clone(), ns);
    ready_at_its_generation(&pools, "sb-default", pool_conditions).await;
    let op: StoragePoolOps = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StoragePoolOps",
        "metadata": {"name": "rebalance"},
        "spec": {"poolRef": "sb-default", "action": "Rebalance"},
    }))
    .expect("op");
    let pool_ops: Api<StoragePoolOps> = Api::namespaced(h.kube.clone(), ns);
    pool_ops
        .create(&PostParams::default(), &op)
        .await
        .expect("created");
    kubectl_wait(
        ns,
        "storagepoolops.storage.simplyblock.io",
        "rebalance",
        "--for=condition=Ready=False",
    )
    .await;
    let refused = pool_ops.get("rebalance").await.expect("op");
    let ready = ops_of_pool(&refused)
        .iter()
        .find(|c| c.type_ == READY)
        .expect("Ready");
    assert_eq!(ready.reason, "Failed");
    assert_eq!(ready.observed_generation, refused.metadata.generation);

    let objects = mirrored(&h, node).await;
    let device = objects
        .values()
        .find(|o| o.status.as_ref().and_then(|s| s.device_status.as_deref()) == Some("online"))
        .map(|o| o.name_any())
        .expect("a serving drive");
    kubectl_wait_ready(ns, "storagedevices.storage.simplyblock.io", &device).await;
    let devices: Api<StorageDevice> = Api::namespaced(h.kube.clone(), ns);
    ready_at_its_generation(&devices, &device, device_conditions).await;

    // An online device needs no restart: the operation succeeds at once, and Ready says so.
    run(
        &h,
        operation("restart", &device, "Restart"),
        OpsPhase::Succeeded,
    )
    .await;
    kubectl_wait_ready(ns, "storagedeviceops.storage.simplyblock.io", "restart").await;
    let ops: Api<simplyblock_api::StorageDeviceOps> = Api::namespaced(h.kube.clone(), ns);
    ready_at_its_generation(&ops, "restart", ops_conditions).await;
}

/// Sets the Ready condition of the worker Node `name` as its kubelet would, with its
/// heartbeat at `beat` (seconds into the day).
async fn worker_ready(h: &Harness, name: &str, ready: bool, beat: u32) {
    let heartbeat = format!("2026-01-01T00:{:02}:{:02}Z", beat / 60, beat % 60);
    let status = if ready { "True" } else { "False" };
    let patch = json!({"status": {"conditions": [{
        "type": "Ready", "status": status,
        "reason": if ready { "KubeletReady" } else { "NodeStatusUnknown" },
        "message": "set by the test",
        "lastHeartbeatTime": heartbeat,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }]}});
    Api::<Node>::all(h.kube.clone())
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("worker status");
}

/// The StorageNode's Degraded condition, once it is `status` with `reason`.
async fn degraded(nodes: &Api<StorageNode>, status: &str, reason: Option<&str>) -> Condition {
    until(&format!("Degraded {status} ({reason:?})"), async || {
        let n = nodes.get(NODE).await.ok()?;
        let c = node_conditions(&n)
            .iter()
            .find(|c| c.type_ == DEGRADED)?
            .clone();
        (c.status == status && reason.is_none_or(|r| c.reason == r)).then_some(c)
    })
    .await
}

/// A worker Node turning NotReady makes its StorageNode Degraded with one WorkerAway;
/// Ready again clears it with one WorkerReturned.
#[tokio::test]
async fn a_worker_going_away_and_returning_is_said_once_each_way() {
    let ns = "conditions-worker";
    let (h, _) = device_harness(ns).await;
    let worker = format!("{ns}-w1");
    let nodes: Api<StorageNode> = Api::namespaced(h.kube.clone(), ns);
    worker_ready(&h, &worker, true, 0).await;
    kubectl_wait_ready(ns, "storagenodes.storage.simplyblock.io", NODE).await;
    degraded(&nodes, "False", None).await;
    assert_eq!(occurrences(&h.kube, ns, NODE, "WorkerAway").await, 0);

    worker_ready(&h, &worker, false, 1).await;
    let away = degraded(&nodes, "True", Some("WorkerAway")).await;
    assert!(away.message.contains("NotReady"), "{away:?}");
    assert_eq!(
        occurrences_reaching(&h.kube, ns, NODE, "WorkerAway", 1).await,
        1
    );
    // A heartbeat of the still NotReady worker wakes the node again; it says nothing new.
    worker_ready(&h, &worker, false, 2).await;
    passes(&h.ctx.metrics, "storagenode", ns, NODE, 2).await;
    assert_eq!(occurrences(&h.kube, ns, NODE, "WorkerAway").await, 1);

    worker_ready(&h, &worker, true, 3).await;
    let back = degraded(&nodes, "False", None).await;
    assert_ne!(back.reason, "WorkerAway");
    assert_eq!(
        occurrences_reaching(&h.kube, ns, NODE, "WorkerReturned", 1).await,
        1
    );
    assert_eq!(occurrences(&h.kube, ns, NODE, "WorkerAway").await, 1);
}

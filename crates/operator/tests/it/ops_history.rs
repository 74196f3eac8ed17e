//! Every Ops kind keeps a bounded history: against a real API server (sbsim standing in
//! for the control plane), finished operations beyond the namespace StorageCluster's
//! `opsHistoryLimit` are deleted oldest first, per target, by the shared Ops runtime
//! (StorageNodeOps) and by a kind with its own controller (StoragePoolOps) alike.

use std::collections::BTreeSet;

use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::NamespaceResourceScope;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use simplyblock_api::common::{OpsKind, OpsPhase};
use simplyblock_api::storage_node_ops::StorageNodeOps;
use simplyblock_api::{StorageNode, StoragePoolOps};
use simplyblock_operator::{node, pool};

use crate::support::{harness, until};

/// Creates `name` of kind `K` from `spec` and waits for it to end (the operations below
/// end at once), so operations finish in the order they are created.
async fn finished<K>(api: &Api<K>, name: &str, spec: Value)
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + OpsKind
        + Clone
        + std::fmt::Debug
        + Serialize
        + DeserializeOwned,
{
    let op: K = serde_json::from_value(json!({
        "apiVersion": simplyblock_api::API_VERSION, "kind": K::kind(&()),
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("op");
    api.create(&PostParams::default(), &op)
        .await
        .expect("created");
    until(&format!("{name} finished"), async || {
        api.get(name)
            .await
            .ok()?
            .status_core()
            .phase
            .is_terminal()
            .then_some(())
    })
    .await;
}

/// Waits until the operations of `api` are exactly `names`.
async fn exactly<K>(api: &Api<K>, names: &[&str])
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + DeserializeOwned,
{
    let want: BTreeSet<String> = names.iter().map(|n| n.to_string()).collect();
    until(&format!("the operations {names:?}"), async || {
        let have: BTreeSet<String> = api
            .list(&Default::default())
            .await
            .ok()?
            .items
            .iter()
            .map(|o| o.name_any())
            .collect();
        (have == want).then_some(())
    })
    .await;
}

#[tokio::test]
async fn finished_operations_beyond_the_limit_go_oldest_first_per_target_for_two_kinds() {
    let h = harness("ops-history", "", (1, 1)).await;
    h.clusters()
        .patch(
            "sb",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"opsHistoryLimit": 2}})),
        )
        .await
        .expect("limit");
    let _pools = tokio::spawn(pool::ops::run(h.ctx.clone()));
    let _nodes = tokio::spawn(node::ops::run(h.ctx.clone()));

    // StoragePoolOps are refused at once; another pool's operation has its own history.
    let pool_ops: Api<StoragePoolOps> = Api::namespaced(h.kube.clone(), &h.ns);
    let pool_spec = |pool: &str| json!({"poolRef": pool, "action": "Rebalance"});
    finished(&pool_ops, "other-1", pool_spec("other")).await;
    finished(&pool_ops, "pool-1", pool_spec("sb-default")).await;
    finished(&pool_ops, "pool-2", pool_spec("sb-default")).await;
    exactly(&pool_ops, &["other-1", "pool-1", "pool-2"]).await;
    finished(&pool_ops, "pool-3", pool_spec("sb-default")).await;
    exactly(&pool_ops, &["other-1", "pool-2", "pool-3"]).await;
    finished(&pool_ops, "pool-4", pool_spec("sb-default")).await;
    exactly(&pool_ops, &["other-1", "pool-3", "pool-4"]).await;

    // StorageNodeOps asked to abort before they start end Aborted at once, through the
    // shared runtime.
    let worker: k8s_openapi::api::core::v1::Node =
        serde_json::from_value(json!({"metadata": {"name": "ops-history-w1"}})).expect("node");
    Api::<k8s_openapi::api::core::v1::Node>::all(h.kube.clone())
        .create(&PostParams::default(), &worker)
        .await
        .expect("worker Node");
    let sn: StorageNode = serde_json::from_value(json!({
        "apiVersion": simplyblock_api::API_VERSION, "kind": "StorageNode",
        "metadata": {"name": "sb-w1-0"},
        "spec": {"clusterRef": "sb", "workerNode": "ops-history-w1", "slot": 0,
                 "config": {"sizing": {"vcpuCount": 4, "minHugePagesSize": "4G"}}},
    }))
    .expect("storage node");
    Api::<StorageNode>::namespaced(h.kube.clone(), &h.ns)
        .create(&PostParams::default(), &sn)
        .await
        .expect("StorageNode");
    let node_ops: Api<StorageNodeOps> = Api::namespaced(h.kube.clone(), &h.ns);
    let node_spec = json!({"nodeRef": "sb-w1-0", "action": "Restart", "abort": true});
    for name in ["node-1", "node-2", "node-3"] {
        finished(&node_ops, name, node_spec.clone()).await;
    }
    exactly(&node_ops, &["node-2", "node-3"]).await;
    finished(&node_ops, "node-4", node_spec.clone()).await;
    exactly(&node_ops, &["node-3", "node-4"]).await;
    let kept = node_ops.get("node-4").await.expect("node-4");
    assert_eq!(kept.status_core().phase, OpsPhase::Aborted, "{kept:?}");
}

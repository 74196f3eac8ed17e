//! Tenants cannot reach the host: whoever may create the storage kinds makes the
//! operator run privileged pods on the workers, so they are served in one namespace and
//! refused by the API server everywhere else.

use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;
use simplyblock_api::StorageCluster;

use crate::support::{namespace, until};

fn storage_cluster() -> StorageCluster {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
        "metadata": {"name": "sb"},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 4, "stripe": {"dataChunks": 1, "parityChunks": 1}}
    }))
    .expect("cluster")
}

#[tokio::test]
async fn the_storage_kinds_are_refused_outside_the_served_namespace() {
    let served = "tenancy-served";
    let (_env, admin) = crate::support::own_api_server(served).await;
    namespace(&admin, "tenant").await;
    // The chart's policy, as Helm installs it.
    let policy: Vec<DynamicObject> = simplyblock_testenv::chart::render(served, &[])
        .expect("the chart renders")
        .into_iter()
        .filter(|o| {
            simplyblock_testenv::chart::kind_and_name(o).ends_with("/simplyblock-served-namespaces")
        })
        .collect();
    assert_eq!(policy.len(), 2, "a policy and its binding");
    simplyblock_testenv::chart::apply(&admin, &policy, "helm", false)
        .await
        .expect("the policy installs");

    // Even an administrator is refused there, once the API server enforces the policy.
    let tenant: Api<StorageCluster> = Api::namespaced(admin.clone(), "tenant");
    let refused = until("the policy enforced", async || {
        match tenant
            .create(&PostParams::default(), &storage_cluster())
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => Some(s.message),
            Ok(_) => {
                // Admitted before the policy took effect: try again.
                tenant.delete("sb", &Default::default()).await.ok();
                None
            }
            Err(_) => None,
        }
    })
    .await;
    assert!(
        refused.contains(
            "StorageCluster objects belong in namespace tenancy-served, the one the simplyblock operator serves; namespace tenant is not served"
        ),
        "{refused}"
    );
    // Every kind of the group, not just the ones that run pods.
    let ops: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        "tenant",
        &kube::discovery::ApiResource::erase::<simplyblock_api::OperatorOps>(&()),
    );
    let probe: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "OperatorOps",
        "metadata": {"name": "discover"},
        "spec": {"action": "Discover", "discover": {"workers": ["w1"]}}
    }))
    .expect("op");
    match ops.create(&PostParams::default(), &probe).await {
        Err(kube::Error::Api(s)) => assert!(
            s.message
                .contains("OperatorOps objects belong in namespace tenancy-served"),
            "{s:?}"
        ),
        other => panic!("an OperatorOps outside the served namespace: {other:?}"),
    }

    // In the served namespace they are created as before.
    Api::<StorageCluster>::namespaced(admin.clone(), served)
        .create(&PostParams::default(), &storage_cluster())
        .await
        .expect("a StorageCluster in the served namespace");
    // The cluster-scoped kind is in no namespace: only a cluster-wide role grants it, and
    // the policy leaves it alone (a drain creates these).
    let move_volume: simplyblock_api::persistent_volume_ops::PersistentVolumeOps =
        serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "PersistentVolumeOps",
            "metadata": {"name": "tenancy-move"},
            "spec": {"persistentVolumeName": "pv-1", "action": "Migrate",
                     "migrate": {"targetNodeRef": {"namespace": served, "name": "sn-1"}}}
        }))
        .expect("op");
    Api::<simplyblock_api::persistent_volume_ops::PersistentVolumeOps>::all(admin.clone())
        .create(&PostParams::default(), &move_volume)
        .await
        .expect("a PersistentVolumeOps under the policy");
}

//! The cluster lock an operation holds, on a real API server: taken and given back with
//! optimistic concurrency, so a write that lost a race never takes or clears a lock that
//! is not its own.

use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_api::storage_cluster_ops::{ClusterAction, StorageClusterOpsSpec};
use simplyblock_api::{StorageCluster, StorageClusterOps};
use simplyblock_operator::runtime::ops::runtime::{acquire, release};

const NS: &str = "lock";

fn op(name: &str) -> StorageClusterOps {
    let mut op = StorageClusterOps::new(
        name,
        StorageClusterOpsSpec {
            cluster_ref: "sb".into(),
            action: ClusterAction::Activate,
            abort: false,
            cancel_task: None,
            rolling_restart: None,
        },
    );
    op.metadata.namespace = Some(NS.into());
    op
}

fn lock_of(c: &StorageCluster) -> Option<String> {
    c.status.as_ref().and_then(|s| s.active_ops_ref.clone())
}

#[tokio::test]
async fn a_lock_is_taken_and_given_back_only_by_its_holder_across_conflicting_writes() {
    let env = crate::support::api_server().await;
    env.install_crds(&simplyblock_api::crds())
        .await
        .expect("CRDs");
    let kube = env.client().await.expect("client");
    simplyblock_testenv::create_namespace(&kube, NS)
        .await
        .expect("namespace");
    let clusters: Api<StorageCluster> = Api::namespaced(kube.clone(), NS);
    let cluster: StorageCluster = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
        "metadata": {"name": "sb"},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 4}
    }))
    .expect("cluster");
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .expect("cluster");
    let (a, b) = (op("sb-a"), op("sb-b"));

    // Two operations read the cluster at one version; only the first write of the lock
    // lands, the second is refused by the resourceVersion it carries.
    let seen = clusters.get("sb").await.expect("read");
    assert!(acquire(&kube, &a, &seen).await.expect("acquire a"));
    assert!(!acquire(&kube, &b, &seen).await.expect("acquire b"));
    assert_eq!(
        lock_of(&clusters.get("sb").await.expect("read")).as_deref(),
        Some("sb-a")
    );

    // Another writer changes the cluster's status after the holder read it: the release
    // works from a fresh read, clears its own lock and keeps the other write.
    clusters
        .patch_status(
            "sb",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"message": "written by someone else"}})),
        )
        .await
        .expect("a concurrent status write");
    release(&kube, &a).await.expect("release a");
    let after = clusters.get("sb").await.expect("read");
    assert_eq!(lock_of(&after), None);
    assert_eq!(
        after.status.and_then(|s| s.message).as_deref(),
        Some("written by someone else")
    );

    // A release from an operation that no longer holds the lock leaves the holder's.
    let seen = clusters.get("sb").await.expect("read");
    assert!(acquire(&kube, &b, &seen).await.expect("acquire b"));
    release(&kube, &a)
        .await
        .expect("a stale release is a no-op");
    assert_eq!(
        lock_of(&clusters.get("sb").await.expect("read")).as_deref(),
        Some("sb-b")
    );
    release(&kube, &b).await.expect("release b");
    assert_eq!(lock_of(&clusters.get("sb").await.expect("read")), None);
}

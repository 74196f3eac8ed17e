//! Writes sent at v1alpha1 meet every rule of v1alpha2, the version they are stored at:
//! an image from another registry, a status written past the status subresource and a
//! managed endpoint over plain HTTP, each carried in a
//! `storage.simplyblock.io/conversion-<path>` annotation that up-conversion restores, are
//! refused; a v1alpha1 write that keeps to the rules goes through.

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use simplyblock_api::StorageCluster;

const NS: &str = "spoke-writes";

fn at_v1alpha1(client: &kube::Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("storage.simplyblock.io", "v1alpha1", kind);
    Api::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

fn object(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("object")
}

/// The refusal of a write, or a panic naming `what` if it went through.
fn refused<T: std::fmt::Debug>(result: Result<T, kube::Error>, what: &str) -> String {
    match result {
        Err(kube::Error::Api(s)) => s.message,
        other => panic!("{what} went through: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1alpha1_write_cannot_store_what_v1alpha2_refuses() {
    // An installation moved over from the Go operator: its CRDs stored v1alpha1, so the
    // operator points their conversions at itself.
    let (_env, admin, _serving) = crate::support::moved_over_api_server(
        NS,
        &[
            "storageclusters.storage.simplyblock.io",
            "controlplanes.storage.simplyblock.io",
        ],
    )
    .await;

    let clusters = at_v1alpha1(&admin, "StorageCluster", "storageclusters");
    let cluster = |name: &str, annotations: Value| {
        object(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha1", "kind": "StorageCluster",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"maxSubsystemCount": 10, "vcpuCount": 8}
        }))
    };
    // A write that keeps to the rules goes through, whatever version it is sent at.
    crate::support::until("the conversion webhook to answer", async || {
        match clusters
            .create(&PostParams::default(), &cluster("plain", json!({})))
            .await
        {
            Ok(_) => Some(()),
            Err(e) => {
                // Until the API server has the conversion webhook's registration.
                eprintln!("creating at v1alpha1: {e}");
                None
            }
        }
    })
    .await;

    // 1. An image from a registry v1alpha2 refuses, carried in the stash.
    let why = refused(
        clusters
            .create(
                &PostParams::default(),
                &cluster(
                    "evil",
                    json!({"storage.simplyblock.io/conversion-spec.storageNodes.image": "\"evil.example.com/x\""}),
                ),
            )
            .await,
        "an image from another registry",
    );
    assert!(
        why.contains("v1alpha2") && why.contains("spec.storageNodes.image"),
        "{why}"
    );

    // 2. A status written through the main resource, carried in the stash: on a create,
    // and on an update of an object whose status the operator wrote.
    let why = refused(
        clusters
            .create(
                &PostParams::default(),
                &cluster(
                    "forged",
                    json!({"storage.simplyblock.io/conversion-status.uuid": "\"00000000-0000-0000-0000-000000000001\""}),
                ),
            )
            .await,
        "a status on a create",
    );
    assert!(why.contains("status subresource"), "{why}");
    let hub: Api<StorageCluster> = Api::namespaced(admin.clone(), NS);
    hub.patch_status(
        "plain",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"uuid": "00000000-0000-0000-0000-0000000000aa"}})),
    )
    .await
    .expect("the operator's status");
    let why = refused(
        clusters
            .patch(
                "plain",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    "storage.simplyblock.io/conversion-status.uuid": "\"00000000-0000-0000-0000-0000000000bb\""
                }}})),
            )
            .await,
        "a status changed through the main resource",
    );
    assert!(why.contains("status subresource"), "{why}");
    let stored = hub.get("plain").await.expect("the cluster");
    assert_eq!(
        stored.status.and_then(|s| s.uuid).as_deref(),
        Some("00000000-0000-0000-0000-0000000000aa"),
        "the stored status is the operator's"
    );
    // A v1alpha1 write that leaves the status alone still goes through.
    clusters
        .patch(
            "plain",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "storage"}}})),
        )
        .await
        .expect("a label at v1alpha1");

    // 3. A managed endpoint over plain HTTP, carried in the stash.
    let planes = at_v1alpha1(&admin, "ControlPlane", "controlplanes");
    let why = refused(
        planes
            .create(
                &PostParams::default(),
                &object(json!({
                    "apiVersion": "storage.simplyblock.io/v1alpha1", "kind": "ControlPlane",
                    "metadata": {"name": "simplyblock", "annotations": {
                        "storage.simplyblock.io/conversion-spec.source":
                            "{\"managed\":{\"endpoint\":\"http://control-plane.example.com:8080\"}}"
                    }},
                    "spec": {}
                })),
            )
            .await,
        "a managed endpoint over http",
    );
    assert!(
        why.contains("v1alpha2") && why.contains("https://"),
        "{why}"
    );
}

//! TestFailover on the real API server: the scope's required source namespace, the spec
//! fixed at creation, no shared default bubble namespace and the step list of status.

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use simplyblock_api::TestFailover;

use crate::support::{create, dynamic, refusal, update};

fn drill(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2",
        "kind": "TestFailover",
        "metadata": {"name": name},
        "spec": spec
    })
}

fn volume_spec() -> Value {
    json!({
        "scope": "Volume",
        "sourceCluster": "site-a",
        "sourceNamespace": "apps",
        "sourceRef": "data",
        "bubbleCluster": "site-b"
    })
}

#[tokio::test]
async fn a_volume_drill_names_the_claims_namespace() {
    let (client, ns) = crate::support::namespace("cel-tfo-namespace").await;
    let api = dynamic::<TestFailover>(&client, &ns);
    let mut spec = volume_spec();
    spec.as_object_mut()
        .expect("an object")
        .remove("sourceNamespace");
    assert_eq!(
        refusal(create(&api, drill("nameless", spec)).await),
        [
            "spec: Invalid value: sourceNamespace is required for scope Volume: it is the namespace of the source PersistentVolumeClaim"
        ]
    );
    let group = json!({
        "scope": "Group",
        "sourceCluster": "site-a",
        "sourceRef": "orders",
        "bubbleCluster": "site-b"
    });
    let created = create(&api, drill("group", group))
        .await
        .expect("a group drill needs no namespace");
    // No shared default: the drill's own namespace is derived from its name.
    assert_eq!(created.data["spec"].get("bubbleNamespace"), None);
}

#[tokio::test]
async fn a_drill_is_fixed_at_creation() {
    let (client, ns) = crate::support::namespace("cel-tfo-immutable").await;
    let api = dynamic::<TestFailover>(&client, &ns);
    create(&api, drill("drill", volume_spec()))
        .await
        .expect("created");
    let retarget = update(&api, "drill", |o| {
        o["spec"]["bubbleCluster"] = json!("site-c")
    })
    .await;
    assert_eq!(
        refusal(retarget),
        [
            "spec: Invalid value: the spec of a TestFailover is immutable: a drill runs once as written; delete it and create another drill"
        ]
    );
    let pinned = update(&api, "drill", |o| {
        o["spec"]["recoveryPoint"] = json!("snap-1")
    })
    .await;
    assert_eq!(
        refusal(pinned),
        [
            "spec: Invalid value: the spec of a TestFailover is immutable: a drill runs once as written; delete it and create another drill"
        ]
    );
}

#[tokio::test]
async fn names_and_durations_are_bounded() {
    let (client, ns) = crate::support::namespace("cel-tfo-bounds").await;
    let api = dynamic::<TestFailover>(&client, &ns);
    let mut spec = volume_spec();
    spec["sourceCluster"] = json!("c".repeat(64));
    spec["ttlSeconds"] = json!(-1);
    spec["scope"] = json!("Cluster");
    let causes = refusal(create(&api, drill("bounds", spec)).await);
    assert!(
        causes
            .iter()
            .any(|c| c.starts_with("spec.sourceCluster: Too long")),
        "{causes:?}"
    );
    assert!(
        causes
            .iter()
            .any(|c| c.starts_with("spec.ttlSeconds: Invalid value: -1")),
        "{causes:?}"
    );
    assert!(
        causes.contains(
            &"spec.scope: Unsupported value: \"Cluster\": supported values: \"Volume\", \"Group\""
                .to_owned()
        ),
        "{causes:?}"
    );
}

#[tokio::test]
async fn an_unknown_step_is_refused_in_status() {
    let (client, ns) = crate::support::namespace("cel-tfo-step").await;
    let api = dynamic::<TestFailover>(&client, &ns);
    create(&api, drill("drill", volume_spec()))
        .await
        .expect("created");
    // Shipping is the reference's unbuilt step: it is not in the graph, so not admitted.
    let patch =
        Patch::Merge(json!({"status": {"phase": "Provisioning", "step": {"state": "Shipping"}}}));
    let result = api
        .patch_status("drill", &PatchParams::default(), &patch)
        .await;
    assert_eq!(
        refusal(result),
        [
            "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            "status.step.state: Unsupported value: \"Shipping\": supported values: \"ResolvingSource\", \"ResolvingPoint\", \"Cloning\", \"Placing\", \"Releasing\"",
        ]
    );
    let known =
        Patch::Merge(json!({"status": {"phase": "Provisioning", "step": {"state": "Cloning"}}}));
    let stored = api
        .patch_status("drill", &PatchParams::default(), &known)
        .await
        .expect("a declared step is admitted");
    assert_eq!(stored.data["status"]["step"]["state"], json!("Cloning"));
}

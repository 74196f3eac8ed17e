//! PersistentVolumeOps on the real API server: the action's parameter block, the fields
//! fixed at creation, and the step list of status. The kind is cluster-scoped, so every
//! name here carries the test's own prefix.

use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use simplyblock_api::PersistentVolumeOps;

use crate::support::{create, refusal, update};

/// The API of the kind; `test` names the (unused) namespace that comes with the client.
async fn api(test: &str) -> Api<DynamicObject> {
    let (client, _) = crate::support::namespace(test).await;
    Api::all_with(client, &ApiResource::erase::<PersistentVolumeOps>(&()))
}

fn pvops(name: &str, extra: Value) -> Value {
    let mut spec = json!({"persistentVolumeName": "pvc-1", "action": "Migrate"});
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2",
        "kind": "PersistentVolumeOps",
        "metadata": {"name": name},
        "spec": spec
    })
}

fn target(name: &str) -> Value {
    json!({"targetNodeRef": {"namespace": "simplyblock", "name": name}})
}

const MIGRATE_RULE: &str =
    "spec: Invalid value: migrate is required for action Migrate and must be absent otherwise";

#[tokio::test]
async fn a_migrate_names_its_target_node() {
    let api = api("cel-pvops-target").await;
    assert_eq!(
        refusal(create(&api, pvops("cel-pvops-untargeted", json!({}))).await),
        [MIGRATE_RULE]
    );
    let half = json!({"targetNodeRef": {"name": "simplyblock-worker-2-0"}});
    assert_eq!(
        refusal(create(&api, pvops("cel-pvops-half", json!({"migrate": half}))).await),
        [
            "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            "spec.migrate.targetNodeRef.namespace: Required value",
        ]
    );
    let unknown = create(
        &api,
        pvops(
            "cel-pvops-resize",
            json!({"action": "Resize", "migrate": target("n")}),
        ),
    )
    .await;
    assert!(
        refusal(unknown)
            .iter()
            .any(|m| m.contains("supported values: \"Migrate\"")),
    );
    let created = create(
        &api,
        pvops(
            "cel-pvops-targeted",
            json!({"migrate": target("simplyblock-worker-2-0")}),
        ),
    )
    .await
    .expect("a Migrate with its target");
    assert_eq!(
        created.data["spec"]["migrate"]["targetNodeRef"]["name"],
        "simplyblock-worker-2-0"
    );
    assert_eq!(
        created.data["spec"]["abort"],
        json!(false),
        "abort defaults to false"
    );
}

#[tokio::test]
async fn a_volume_operation_is_fixed_at_creation_but_for_abort() {
    let api = api("cel-pvops-fixed").await;
    let creator = json!({"kind": "StorageNodeOps", "namespace": "simplyblock", "name": "drain", "uid": "0d9c"});
    create(
        &api,
        pvops(
            "cel-pvops-fixed",
            json!({"migrate": target("simplyblock-worker-2-0"), "creatorRef": creator}),
        ),
    )
    .await
    .expect("created");
    let name = "cel-pvops-fixed";
    assert_eq!(
        refusal(
            update(&api, name, |o| o["spec"]["persistentVolumeName"] =
                json!("pvc-2"))
            .await
        ),
        [
            "spec.persistentVolumeName: Invalid value: \"pvc-2\": spec.persistentVolumeName is immutable: an operation acts on one volume; create another operation for another volume"
        ]
    );
    assert_eq!(
        refusal(
            update(
                &api,
                name,
                |o| o["spec"]["migrate"]["targetNodeRef"]["namespace"] = json!("elsewhere")
            )
            .await
        ),
        ["spec.migrate: Invalid value: spec.migrate is immutable"]
    );
    assert_eq!(
        refusal(
            update(&api, name, |o| o["spec"]["creatorRef"]["uid"] =
                json!("1e0d"))
            .await
        ),
        ["spec.creatorRef: Invalid value: spec.creatorRef is immutable"]
    );
    assert_eq!(
        refusal(
            update(&api, name, |o| {
                o["spec"]
                    .as_object_mut()
                    .expect("spec")
                    .remove("creatorRef");
            })
            .await
        ),
        ["spec: Invalid value: spec.creatorRef is immutable"]
    );
    let aborted = update(&api, name, |o| o["spec"]["abort"] = json!(true))
        .await
        .expect("abort is the one mutable field");
    assert_eq!(aborted.data["spec"]["abort"], json!(true));
}

#[tokio::test]
async fn status_names_only_declared_steps() {
    let api = api("cel-pvops-steps").await;
    create(
        &api,
        pvops(
            "cel-pvops-steps",
            json!({"migrate": target("simplyblock-worker-2-0")}),
        ),
    )
    .await
    .expect("created");
    let step = |state: &str| {
        Patch::Merge(json!({"status": {"phase": "Running", "step": {"state": state}}}))
    };
    let refused = api
        .patch_status("cel-pvops-steps", &PatchParams::default(), &step("Copying"))
        .await;
    assert_eq!(
        refusal(refused),
        [
            "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            "status.step.state: Unsupported value: \"Copying\": supported values: \"Validating\", \"Migrating\", \"Verifying\"",
        ]
    );
    let stored = api
        .patch_status(
            "cel-pvops-steps",
            &PatchParams::default(),
            &step("Migrating"),
        )
        .await
        .expect("a declared step");
    assert_eq!(stored.data["status"]["step"]["state"], "Migrating");
}

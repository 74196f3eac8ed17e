//! StorageDevice and StorageDeviceOps on the real API server: identities are fixed, the
//! action enum is the runnable actions, and only the graphs' steps are stored.

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use simplyblock_api::{StorageDevice, StorageDeviceOps};

use crate::support::{create, dynamic, refusal, update};

fn device(name: &str) -> Value {
    json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2",
        "kind": "StorageDevice",
        "metadata": {"name": name},
        "spec": {"nodeRef": "sb-w1-0", "deviceID": "0b0c9d2e-5c1a-4b6e-9d44-2f8a1c3e7b10"},
    })
}

fn sdops(name: &str, action: &str) -> Value {
    json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2",
        "kind": "StorageDeviceOps",
        "metadata": {"name": name},
        "spec": {"deviceRef": "sb-w1-0-0b0c9d2e", "action": action},
    })
}

#[tokio::test]
async fn a_device_keeps_its_node_and_id_and_its_status_reads_back() {
    let (client, ns) = crate::support::namespace("cel-sd-identity").await;
    let api = dynamic::<StorageDevice>(&client, &ns);
    create(&api, device("sb-w1-0-0b0c9d2e"))
        .await
        .expect("created");
    assert_eq!(
        refusal(
            update(&api, "sb-w1-0-0b0c9d2e", |o| o["spec"]["nodeRef"] =
                json!("sb-w2-0"))
            .await
        ),
        [
            "spec.nodeRef: Invalid value: \"sb-w2-0\": spec.nodeRef is immutable: a device belongs to one node for its life"
        ]
    );
    assert_eq!(
        refusal(
            update(&api, "sb-w1-0-0b0c9d2e", |o| o["spec"]["deviceID"] =
                json!("other"))
            .await
        ),
        [
            "spec.deviceID: Invalid value: \"other\": spec.deviceID is immutable: it is the identity of the drive this object mirrors"
        ]
    );
    let missing = create(
        &api,
        json!({"apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageDevice",
               "metadata": {"name": "bare"}, "spec": {"nodeRef": "sb-w1-0"}}),
    )
    .await;
    assert!(refusal(missing).contains(&"spec.deviceID: Required value".to_string()));
    let bad_phase = api
        .patch_status(
            "sb-w1-0-0b0c9d2e",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Broken"}})),
        )
        .await;
    assert!(refusal(bad_phase).iter().any(|m| m.contains(
        "supported values: \"Online\", \"Degraded\", \"Unknown\", \"Removed\", \"Failed\""
    )));
    let written = api
        .patch_status(
            "sb-w1-0-0b0c9d2e",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "phase": "Online", "deviceStatus": "JM_DEV", "role": "Journal",
                "capacity": {"totalBytes": 1_000_000_000_000_i64},
                "hardware": {"pciAddress": "0000:00:04.0", "serialNumber": "S1"},
                "clusterID": "c", "nodeID": "n"}})),
        )
        .await
        .expect("status");
    let typed: StorageDevice =
        serde_json::from_value(serde_json::to_value(&written).expect("json")).expect("typed");
    let status = typed.status.expect("status");
    assert_eq!(status.cluster_id.as_deref(), Some("c"));
    assert_eq!(status.node_id.as_deref(), Some("n"));
    assert_eq!(
        status.capacity.and_then(|c| c.total_bytes),
        Some(1_000_000_000_000)
    );
}

#[tokio::test]
async fn a_device_operation_runs_restart_or_fail_and_is_fixed_but_for_abort() {
    let (client, ns) = crate::support::namespace("cel-sdops").await;
    let api = dynamic::<StorageDeviceOps>(&client, &ns);
    for declared in ["SelfTest", "Replace", "Migrate"] {
        let refused = refusal(create(&api, sdops("later", declared)).await);
        assert!(
            refused.iter().any(|m| m.contains(&format!(
                "spec.action: Unsupported value: \"{declared}\": supported values: \"Restart\", \"Fail\""
            ))),
            "{refused:?}"
        );
    }
    create(&api, sdops("op", "Fail")).await.expect("created");
    assert_eq!(
        refusal(update(&api, "op", |o| o["spec"]["action"] = json!("Restart")).await),
        [
            "spec.action: Invalid value: \"Restart\": spec.action is immutable: an operation performs one action; create another operation for another action"
        ]
    );
    assert_eq!(
        refusal(update(&api, "op", |o| o["spec"]["deviceRef"] = json!("other")).await),
        [
            "spec.deviceRef: Invalid value: \"other\": spec.deviceRef is immutable: an operation acts on one device; create another operation for another device"
        ]
    );
    let aborted = update(&api, "op", |o| o["spec"]["abort"] = json!(true))
        .await
        .expect("abort is the one mutable field");
    assert_eq!(aborted.data["spec"]["abort"], json!(true));
    let long = create(
        &api,
        json!({"apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageDeviceOps",
               "metadata": {"name": "long"},
               "spec": {"deviceRef": "d".repeat(254), "action": "Restart"}}),
    )
    .await;
    assert!(
        refusal(long)
            .iter()
            .any(|m| m.starts_with("spec.deviceRef: Too long")),
    );
}

#[tokio::test]
async fn only_the_running_actions_steps_are_stored() {
    let (client, ns) = crate::support::namespace("cel-sdops-step").await;
    let api = dynamic::<StorageDeviceOps>(&client, &ns);
    create(&api, sdops("op", "Restart")).await.expect("created");
    let step = |state: &str| Patch::Merge(json!({"status": {"step": {"state": state}}}));
    // A step of a declared-only action is not one an operation can be at.
    let refused = refusal(
        api.patch_status("op", &PatchParams::default(), &step("AwaitingDevice"))
            .await,
    );
    assert!(
        refused.iter().any(|m| m.contains(
            "status.step.state: Unsupported value: \"AwaitingDevice\": supported values: \"Requesting\", \"Awaiting\", \"Removing\", \"Failing\""
        )),
        "{refused:?}"
    );
    api.patch_status("op", &PatchParams::default(), &step("Failing"))
        .await
        .expect("a step of the graphs");
}

//! StorageDevice and StorageDeviceOps on the real API server and sbsim: the mirror follows
//! the control plane's drives, the DELETE guard admits exactly the operator, the garbage
//! collector and a terminating namespace, and Restart and Fail run end to end.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;
use simplyblock_api::common::OpsPhase;
use simplyblock_api::storage_device::{DevicePhase, DeviceRole, storage_device_name};
use simplyblock_api::storage_device_ops::StorageDeviceOps;
use simplyblock_api::{StorageDevice, StorageNode};
use simplyblock_controlplane::{DeviceStatus, Uuid};

use crate::support::{
    Harness, OPERATOR_NAMESPACE, PATIENCE, harness, raised, until, until_explained,
};

pub(crate) const NODE: &str = "sb-sd-0";

/// The harness's cluster and a StorageNode for its first control-plane node, with the
/// mirror and the StorageNode controller running; returns the node's control-plane id.
pub(crate) async fn device_harness(ns: &str) -> (Harness, Uuid) {
    let h = harness(ns, "", (1, 1)).await;
    let first = h.cp.list_storage_nodes(h.uuid).await.expect("nodes")[0].id;
    let worker: k8s_openapi::api::core::v1::Node =
        serde_json::from_value(json!({"metadata": {"name": format!("{ns}-w1")}})).expect("node");
    Api::<k8s_openapi::api::core::v1::Node>::all(h.kube.clone())
        .create(&PostParams::default(), &worker)
        .await
        .expect("worker Node");
    let storage_nodes: Api<StorageNode> = Api::namespaced(h.kube.clone(), ns);
    let sn: StorageNode = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNode",
        "metadata": {"name": NODE},
        "spec": {"clusterRef": "sb", "workerNode": format!("{ns}-w1"), "slot": 0,
                 "config": {"sizing": {"vcpuCount": 4, "minHugePagesSize": "4G"}}},
    }))
    .expect("storage node");
    storage_nodes
        .create(&PostParams::default(), &sn)
        .await
        .expect("StorageNode");
    storage_nodes
        .patch_status(
            NODE,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"uuid": first.to_string()}})),
        )
        .await
        .expect("uuid");
    tokio::spawn(simplyblock_operator::device::mirror::run(h.ctx.clone()));
    // The node's device counts are its controller's, from the mirror's objects.
    tokio::spawn(simplyblock_operator::node::controller::run(h.ctx.clone()));
    (h, first)
}

fn devices(h: &Harness) -> Api<StorageDevice> {
    Api::namespaced(h.kube.clone(), &h.ns)
}

/// The StorageDevices once they are exactly the control plane's drives of `node`, by id,
/// each with the phase of its control-plane status.
pub(crate) async fn mirrored(h: &Harness, node: Uuid) -> BTreeMap<String, StorageDevice> {
    let last = std::sync::Mutex::new(String::new());
    until_explained(
        "the StorageDevices to mirror the drives",
        PATIENCE,
        async || {
            let drives = h.cp.list_devices(h.uuid, node).await.ok()?;
            let objects = devices(h).list(&Default::default()).await.ok()?.items;
            *last.lock().expect("lock") = format!(
                "drives {:?}; objects {:?}",
                drives.iter().map(|d| (d.id, d.status)).collect::<Vec<_>>(),
                objects
                    .iter()
                    .map(|o| (o.name_any(), o.status.as_ref().map(|s| s.phase)))
                    .collect::<Vec<_>>()
            );
            let by_id: BTreeMap<String, StorageDevice> = objects
                .into_iter()
                .map(|o| (o.spec.device_id.clone(), o))
                .collect();
            let same = by_id.len() == drives.len()
                && drives.iter().all(|d| {
                    by_id.get(&d.id.to_string()).is_some_and(|o| {
                        o.status.as_ref().map(|s| s.phase)
                            == Some(DevicePhase::from_control_plane(d.status.as_str()))
                            && o.status.as_ref().and_then(|s| s.device_status.as_deref())
                                == Some(d.status.as_str())
                    })
                });
            same.then_some(by_id)
        },
        || last.lock().expect("lock").clone(),
    )
    .await
}

#[tokio::test]
async fn the_mirror_follows_the_control_planes_drives() {
    let (h, node) = device_harness("sd-mirror").await;
    let drives = h.cp.list_devices(h.uuid, node).await.expect("drives");
    assert!(drives.len() >= 2, "sbsim gives a node several drives");
    let objects = mirrored(&h, node).await;
    let owner = Api::<StorageNode>::namespaced(h.kube.clone(), &h.ns)
        .get(NODE)
        .await
        .expect("node")
        .controller_owner_ref(&())
        .expect("owner ref");
    for d in &drives {
        let o = &objects[&d.id.to_string()];
        assert_eq!(o.name_any(), storage_device_name(NODE, &d.id.to_string()));
        assert_eq!(o.owner_references(), std::slice::from_ref(&owner));
        assert_eq!(o.labels()["storage.simplyblock.io/node"], NODE);
        assert_eq!(o.labels()["storage.simplyblock.io/cluster"], "sb");
        assert_eq!(o.labels()["storage.simplyblock.io/worker"], "sd-mirror-w1");
        let status = o.status.clone().expect("status");
        assert_eq!(status.node_id, Some(node.to_string()));
        assert_eq!(status.cluster_id, Some(h.uuid.to_string()));
        assert_eq!(
            status.capacity.and_then(|c| c.total_bytes),
            Some(d.size as i64)
        );
        let journal = d.status == DeviceStatus::JmDev;
        assert_eq!(
            status.role,
            Some(if journal {
                DeviceRole::Journal
            } else {
                DeviceRole::Storage
            })
        );
    }
    raised(&h.kube, &h.ns, Some(NODE), "DeviceDiscovered").await;
    // The node's counts, written by the StorageNode controller from these objects.
    let serving = drives
        .iter()
        .filter(|d| matches!(d.status, DeviceStatus::Online | DeviceStatus::JmDev))
        .count() as i32;
    until("the node counting every drive", async || {
        let n = Api::<StorageNode>::namespaced(h.kube.clone(), &h.ns)
            .get(NODE)
            .await
            .ok()?;
        let counted = n.status?.resources?.devices?;
        (counted.total == drives.len() as i32 && counted.online == serving).then_some(())
    })
    .await;

    // A drive removed, then gone from the control plane: Removed, then deleted with
    // DeviceRemoved on the node.
    let storage: Vec<_> = drives
        .iter()
        .filter(|d| d.status == DeviceStatus::Online)
        .collect();
    assert!(storage.len() >= 2, "two serving drives: {drives:?}");
    let (first, second) = (storage[0].id, storage[1].id);
    h.cp.remove_device(h.uuid, node, first, false)
        .await
        .expect("remove");
    mirrored(&h, node).await;
    h.sim
        .server
        .sim
        .mutate(|st| {
            st.t.devices.remove(&first.to_string());
            Ok(())
        })
        .expect("drive gone");
    let after = mirrored(&h, node).await;
    assert!(!after.contains_key(&first.to_string()));
    raised(&h.kube, &h.ns, Some(NODE), "DeviceRemoved").await;

    // A drive that fails: DeviceFailed on it.
    h.sim
        .server
        .sim
        .mutate(|st| {
            if let Some(d) = st.t.devices.get_mut(&second.to_string()) {
                d.status = DeviceStatus::Failed;
            }
            Ok(())
        })
        .expect("drive failed");
    mirrored(&h, node).await;
    raised(
        &h.kube,
        &h.ns,
        Some(&storage_device_name(NODE, &second.to_string())),
        "DeviceFailed",
    )
    .await;
}

/// A client of the test API server as `user`, which the test binds cluster-admin to.
async fn as_user(h: &Harness, user: &str, service_account: Option<(&str, &str)>) -> kube::Client {
    let env = crate::support::api_server().await;
    let subject = match service_account {
        Some((ns, name)) => json!({"kind": "ServiceAccount", "name": name, "namespace": ns}),
        None => json!({"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}),
    };
    let name = format!("sd-test-{}", user.replace(':', "-"));
    let binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [subject],
    }))
    .expect("binding");
    Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(h.kube.clone())
        .patch(
            &name,
            &PatchParams::apply("sd-test").force(),
            &Patch::Apply(&binding),
        )
        .await
        .expect("RBAC for the impersonated user");
    let mut config = env.config().clone();
    config.auth_info.impersonate = Some(user.to_owned());
    let client = kube::Client::try_from(config).expect("client");
    let group = "storage.simplyblock.io";
    crate::support::until_allowed(&client, "delete", group, "storagedevices", &h.ns).await;
    client
}

fn device_object(name: &str) -> StorageDevice {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageDevice",
        "metadata": {"name": name},
        "spec": {"nodeRef": NODE, "deviceID": format!("{name}-id")},
    }))
    .expect("device")
}

#[tokio::test]
async fn only_the_operator_the_garbage_collector_and_a_terminating_namespace_delete_a_device() {
    crate::support::webhooks().await;
    // No mirror runs: the objects here are the test's own.
    let h = harness("sd-delete", "", (1, 1)).await;
    let api = devices(&h);
    for name in ["a", "b", "c", "d", "e"] {
        api.create(&PostParams::default(), &device_object(name))
            .await
            .expect("device");
    }
    let delete_as = async |client: &kube::Client, name: &str| {
        Api::<StorageDevice>::namespaced(client.clone(), &h.ns)
            .delete(name, &DeleteParams::default())
            .await
            .map(|_| ())
    };
    let admin = as_user(&h, "someone", None).await;
    let Err(kube::Error::Api(refused)) = delete_as(&admin, "a").await else {
        panic!("an administrator's delete was admitted")
    };
    assert!(
        refused.message.contains("someone may not delete it")
            && refused
                .message
                .contains("StorageDeviceOps with action Fail"),
        "{}",
        refused.message
    );
    let neighbour_name = format!("system:serviceaccount:{OPERATOR_NAMESPACE}:sd-neighbour");
    let neighbour = as_user(
        &h,
        &neighbour_name,
        Some((OPERATOR_NAMESPACE, "sd-neighbour")),
    )
    .await;
    // Another account of the operator's namespace (as the probe Jobs' is) is not the operator.
    let Err(kube::Error::Api(refused)) = delete_as(&neighbour, "a").await else {
        panic!("another account of the operator's namespace deleted a device")
    };
    assert!(
        refused
            .message
            .contains(&format!("{neighbour_name} may not delete it")),
        "{}",
        refused.message
    );
    // The operator's own account, under the chart's roles alone: binding it more here
    // would give every test sharing this API server an operator with more than the chart
    // grants.
    let operator = crate::support::operator_kube().await;
    delete_as(&operator, "a")
        .await
        .expect("the operator's own account deletes");
    let collector = as_user(
        &h,
        "system:serviceaccount:kube-system:generic-garbage-collector",
        Some(("kube-system", "generic-garbage-collector")),
    )
    .await;
    delete_as(&collector, "b")
        .await
        .expect("the garbage collector's account deletes");
    let manager = as_user(&h, "system:kube-controller-manager", None).await;
    delete_as(&manager, "c")
        .await
        .expect("the controller manager deletes");
    let other_namespace = as_user(
        &h,
        "system:serviceaccount:default:sd-outsider",
        Some(("default", "sd-outsider")),
    )
    .await;
    assert!(delete_as(&other_namespace, "d").await.is_err());

    // The namespace going: anyone may delete (no controller empties it here).
    let namespaces: Api<Namespace> = Api::all(h.kube.clone());
    namespaces
        .delete(&h.ns, &DeleteParams::default())
        .await
        .expect("namespace deleted");
    until("the namespace terminating", async || {
        namespaces
            .get(&h.ns)
            .await
            .ok()?
            .metadata
            .deletion_timestamp
    })
    .await;
    delete_as(&admin, "d")
        .await
        .expect("a device of a terminating namespace is deleted by anyone");
}

pub(crate) fn operation(name: &str, device: &str, action: &str) -> StorageDeviceOps {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageDeviceOps",
        "metadata": {"name": name},
        "spec": {"deviceRef": device, "action": action},
    }))
    .expect("operation")
}

pub(crate) async fn run(h: &Harness, op: StorageDeviceOps, phase: OpsPhase) -> StorageDeviceOps {
    let api: Api<StorageDeviceOps> = Api::namespaced(h.kube.clone(), &h.ns);
    let name = op.name_any();
    api.create(&PostParams::default(), &op)
        .await
        .expect("created");
    let last = std::sync::Mutex::new(None);
    until_explained(
        &format!("{name} {phase:?}"),
        PATIENCE,
        async || {
            let op = api.get(&name).await.ok()?;
            *last.lock().expect("lock") = op.status.clone();
            (op.status.as_ref()?.phase == phase).then_some(op)
        },
        || format!("last seen {:?}", last.lock().expect("lock")),
    )
    .await
}

#[tokio::test]
async fn fail_then_restart_a_device_end_to_end() {
    let (h, node) = device_harness("sdops-actions").await;
    tokio::spawn(simplyblock_operator::device::ops::run(h.ctx.clone()));
    let objects = mirrored(&h, node).await;
    let (id, device) = objects
        .iter()
        .find(|(_, o)| o.status.as_ref().and_then(|s| s.device_status.as_deref()) == Some("online"))
        .map(|(id, o)| (id.parse::<Uuid>().expect("uuid"), o.name_any()))
        .expect("a serving drive");
    let base = format!(
        "/api/v2/clusters/{}/storage-nodes/{node}/devices/{id}",
        h.uuid
    );

    let failed = run(&h, operation("fail", &device, "Fail"), OpsPhase::Succeeded).await;
    let status = failed.status.expect("status");
    assert_eq!(status.device_status_before.as_deref(), Some("online"));
    assert!(status.started_at.is_some() && status.completed_at.is_some());
    assert_eq!(h.calls("POST", &format!("{base}/remove")).await, 1);
    assert_eq!(h.calls("POST", &format!("{base}/fail")).await, 1);
    let cp_status =
        h.cp.get_device(h.uuid, node, id)
            .await
            .expect("drive")
            .status;
    assert_eq!(cp_status, DeviceStatus::Failed);
    raised(&h.kube, &h.ns, Some("fail"), "OperationSucceeded").await;

    // Failing it again is refused, and nothing is called.
    let again = run(
        &h,
        operation("fail-again", &device, "Fail"),
        OpsPhase::Failed,
    )
    .await;
    assert!(
        again
            .status
            .and_then(|s| s.message)
            .is_some_and(|m| m.contains("already failed")),
    );
    assert_eq!(h.calls("POST", &format!("{base}/remove")).await, 1);

    let restarted = run(
        &h,
        operation("restart", &device, "Restart"),
        OpsPhase::Succeeded,
    )
    .await;
    assert_eq!(
        restarted
            .status
            .and_then(|s| s.device_status_before)
            .as_deref(),
        Some("failed")
    );
    assert_eq!(h.calls("POST", &format!("{base}/restart")).await, 1);
    // An online device needs no restart: none is called.
    run(
        &h,
        operation("restart-again", &device, "Restart"),
        OpsPhase::Succeeded,
    )
    .await;
    assert_eq!(h.calls("POST", &format!("{base}/restart")).await, 1);
    // The lock is released once the last one has ended.
    until("the device's lock released", async || {
        let held = devices(&h).get(&device).await.ok()?;
        held.status?.active_ops_ref.is_none().then_some(())
    })
    .await;
}

//! The CEL rules, defaults and enums of the CRDs, as the real API server applies them. Each
//! refusal is asserted to the letter: the message is what a person reads in kubectl.

use crate::support::{create, dynamic, refusal, update};
use serde_json::{Value, json};
use simplyblock_api::{ClusterDeploymentConfig, OperatorOps, StorageCluster, StorageClusterOps};

fn cdc(name: &str, groups: Value) -> Value {
    json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2",
        "kind": "ClusterDeploymentConfig",
        "metadata": {"name": name},
        "spec": {
            "cluster": {"name": "simplyblock", "maxSubsystemCount": 10, "vcpuCount": 4},
            "nodeSets": [{"name": "rack-a", "groups": groups}]
        }
    })
}

fn nvme_group(name: &str) -> Value {
    json!({"name": name, "workers": ["worker-1"], "devices": {"nvme": ["0000:01:00.0"]}})
}

fn block_group(name: &str) -> Value {
    json!({"name": name, "workers": ["worker-2"], "devices": {"block": ["/dev/sdb"]}})
}

fn cluster(name: &str, spec: Value) -> Value {
    let mut base = json!({"maxSubsystemCount": 10, "vcpuCount": 4});
    if let (Some(b), Some(extra)) = (base.as_object_mut(), spec.as_object()) {
        b.extend(extra.clone());
    }
    json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2",
        "kind": "StorageCluster",
        "metadata": {"name": name},
        "spec": base
    })
}

fn scops(name: &str, action: &str) -> Value {
    json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2",
        "kind": "StorageClusterOps",
        "metadata": {"name": name},
        "spec": {"clusterRef": "simplyblock", "action": action}
    })
}

fn discover(name: &str, discover: Value) -> Value {
    json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2",
        "kind": "OperatorOps",
        "metadata": {"name": name},
        "spec": {"action": "Discover", "discover": discover}
    })
}

#[tokio::test]
async fn an_approved_config_is_frozen() {
    let (client, ns) = crate::support::namespace("cel-approved-frozen").await;
    let api = dynamic::<ClusterDeploymentConfig>(&client, &ns);
    create(&api, cdc("doc", json!([nvme_group("g")])))
        .await
        .expect("a draft is admitted");
    update(&api, "doc", |d| d["spec"]["approved"] = json!(true))
        .await
        .expect("approving a draft is allowed");

    let edit = update(&api, "doc", |d| {
        d["spec"]["nodeSets"][0]["groups"][0]["workers"] = json!(["worker-9"])
    })
    .await;
    assert_eq!(
        refusal(edit),
        ["spec: Invalid value: an approved deployment config is immutable"]
    );

    // Metadata stays editable: the expansion labels approved documents.
    update(&api, "doc", |d| {
        d["metadata"]["labels"] = json!({"storage.simplyblock.io/ready-to-deploy": "true"})
    })
    .await
    .expect("labels may change on an approved document");
}

#[tokio::test]
async fn approval_cannot_be_withdrawn() {
    let (client, ns) = crate::support::namespace("cel-approval-withdrawn").await;
    let api = dynamic::<ClusterDeploymentConfig>(&client, &ns);
    let mut doc = cdc("doc", json!([nvme_group("g")]));
    doc["spec"]["approved"] = json!(true);
    create(&api, doc)
        .await
        .expect("an approved document is admitted");

    let withdraw = update(&api, "doc", |d| d["spec"]["approved"] = json!(false)).await;
    // Withdrawing also changes the spec, so both rules speak.
    assert_eq!(
        refusal(withdraw),
        [
            "spec: Invalid value: an approved deployment config is immutable",
            "spec: Invalid value: approval cannot be withdrawn",
        ]
    );
}

#[tokio::test]
async fn a_draft_without_the_approved_key_is_defaulted_and_can_be_approved() {
    let (client, ns) = crate::support::namespace("cel-approved-default").await;
    let api = dynamic::<ClusterDeploymentConfig>(&client, &ns);
    let created = create(&api, cdc("doc", json!([nvme_group("g")])))
        .await
        .expect("a draft without spec.approved is admitted");
    // Defaulted and always serialized: a reviewer sees the gate they are asked to open.
    assert_eq!(created.data["spec"]["approved"], json!(false));
    let approved = update(&api, "doc", |d| d["spec"]["approved"] = json!(true))
        .await
        .expect("the first approval succeeds");
    assert_eq!(approved.data["spec"]["approved"], json!(true));
}

#[tokio::test]
async fn groups_must_share_a_device_class() {
    let (client, ns) = crate::support::namespace("cel-device-class").await;
    let api = dynamic::<ClusterDeploymentConfig>(&client, &ns);
    let mixed = create(
        &api,
        cdc("mixed", json!([nvme_group("a"), block_group("b")])),
    )
    .await;
    assert_eq!(
        refusal(mixed),
        ["spec: Invalid value: every group must name the same device class: all nvme or all block"]
    );
    create(
        &api,
        cdc("all-block", json!([block_group("a"), block_group("b")])),
    )
    .await
    .expect("one class throughout is admitted");
}

#[tokio::test]
async fn a_device_selection_names_one_class() {
    let (client, ns) = crate::support::namespace("cel-device-selection").await;
    let api = dynamic::<ClusterDeploymentConfig>(&client, &ns);
    let both = json!([{
        "name": "g", "workers": ["worker-1"],
        "devices": {"nvme": ["0000:01:00.0"], "block": ["/dev/sdb"]}
    }]);
    let result = create(&api, cdc("both", both)).await;
    assert_eq!(
        refusal(result),
        [
            "spec.nodeSets[0].groups[0].devices: Invalid value: a device selection names NVMe addresses or block devices, not both",
            "spec: Invalid value: every group must name the same device class: all nvme or all block",
        ]
    );
}

#[tokio::test]
async fn only_supported_stripes_are_admitted() {
    let (client, ns) = crate::support::namespace("cel-stripe").await;
    let api = dynamic::<StorageCluster>(&client, &ns);
    let supported = [(1, 0), (1, 1), (2, 1), (4, 1), (1, 2), (2, 2), (4, 2)];
    for (i, (d, p)) in supported.iter().enumerate() {
        let spec = json!({"stripe": {"dataChunks": d, "parityChunks": p}});
        create(&api, cluster(&format!("ok-{i}"), spec))
            .await
            .unwrap_or_else(|e| panic!("{d}+{p} is supported: {e}"));
    }
    // An omitted half counts as 1: {dataChunks: 2} is 2+1.
    create(&api, cluster("half", json!({"stripe": {"dataChunks": 2}})))
        .await
        .expect("2+(1) is supported");

    let message = "spec.stripe: Invalid value: unsupported erasure-coding scheme: dataChunks+parityChunks must be 1+0, 1+1, 2+1, 4+1, 1+2, 2+2 or 4+2 (an omitted half counts as 1)";
    for (i, stripe) in [
        json!({"dataChunks": 3, "parityChunks": 1}),
        json!({"dataChunks": 2, "parityChunks": 0}),
        json!({"dataChunks": 4, "parityChunks": 3}),
        json!({"dataChunks": 3}),
    ]
    .into_iter()
    .enumerate()
    {
        let result = create(
            &api,
            cluster(&format!("bad-{i}"), json!({"stripe": stripe})),
        )
        .await;
        assert_eq!(refusal(result), [message], "stripe {stripe}");
    }
}

#[tokio::test]
async fn the_stripe_cannot_change() {
    let (client, ns) = crate::support::namespace("cel-stripe-immutable").await;
    let api = dynamic::<StorageCluster>(&client, &ns);
    create(
        &api,
        cluster("c", json!({"stripe": {"dataChunks": 1, "parityChunks": 1}})),
    )
    .await
    .expect("created");
    let change = update(&api, "c", |c| c["spec"]["stripe"]["dataChunks"] = json!(2)).await;
    assert_eq!(
        refusal(change),
        [
            "spec.stripe: Invalid value: stripe is immutable: it describes how data is laid out on disk"
        ]
    );
    let removal = update(&api, "c", |c| {
        c["spec"].as_object_mut().map(|s| s.remove("stripe"));
    })
    .await;
    assert_eq!(
        refusal(removal),
        ["spec: Invalid value: stripe cannot be removed once set"]
    );
}

#[tokio::test]
async fn atomic_4k_writes_need_checksums() {
    let (client, ns) = crate::support::namespace("cel-atomic4k").await;
    let api = dynamic::<StorageCluster>(&client, &ns);
    let result = create(&api, cluster("c", json!({"enableAtomicity4K": true}))).await;
    assert_eq!(
        refusal(result),
        ["spec: Invalid value: enableAtomicity4K requires enableChecksumValidation to be true"]
    );
    let created = create(
        &api,
        cluster(
            "d",
            json!({"enableAtomicity4K": true, "enableChecksumValidation": true}),
        ),
    )
    .await
    .expect("with checksums it is admitted");
    // The defaults the schema declares are filled in by the server.
    assert_eq!(created.data["spec"]["nvmfBasePort"], json!(4420));
    assert_eq!(created.data["spec"]["rpcBasePort"], json!(8080));
    assert_eq!(created.data["spec"]["snodeApiPort"], json!(50001));
    assert_eq!(created.data["spec"]["deviceClass"], json!("NVMe"));
    assert_eq!(
        created.data["spec"]["maxConcurrentWorkerRestarts"],
        json!(1)
    );
}

#[tokio::test]
async fn a_document_cannot_carry_atomic_4k_writes_without_checksums() {
    let (client, ns) = crate::support::namespace("cel-cdc-atomic4k").await;
    let api = dynamic::<ClusterDeploymentConfig>(&client, &ns);
    let with = |name: &str, extra: Value, approved: bool| {
        let mut doc = cdc(name, json!([nvme_group("g")]));
        if let (Some(c), Some(extra)) = (doc["spec"]["cluster"].as_object_mut(), extra.as_object())
        {
            c.extend(extra.clone());
        }
        doc["spec"]["approved"] = json!(approved);
        doc
    };
    let expected = [
        "spec.cluster: Invalid value: enableAtomicity4K requires enableChecksumValidation to be true",
    ];
    for approved in [false, true] {
        let result = create(
            &api,
            with("doc", json!({"enableAtomicity4K": true}), approved),
        )
        .await;
        assert_eq!(refusal(result), expected, "approved: {approved}");
        let result = create(
            &api,
            with(
                "doc",
                json!({"enableAtomicity4K": true, "enableChecksumValidation": false}),
                approved,
            ),
        )
        .await;
        assert_eq!(refusal(result), expected, "approved: {approved}");
    }
    create(
        &api,
        with(
            "doc",
            json!({"enableAtomicity4K": true, "enableChecksumValidation": true}),
            true,
        ),
    )
    .await
    .expect("with checksums it is admitted");
    // A draft that would fail cannot be fixed up into the combination either.
    create(&api, with("draft", json!({}), false))
        .await
        .expect("a draft without either is admitted");
    let edit = update(&api, "draft", |d| {
        d["spec"]["cluster"]["enableAtomicity4K"] = json!(true)
    })
    .await;
    assert_eq!(refusal(edit), expected);
}

#[tokio::test]
async fn volume_auto_placement_is_defaulted_by_the_server() {
    let (client, ns) = crate::support::namespace("cel-auto-placement").await;
    let api = dynamic::<StorageCluster>(&client, &ns);
    let created = create(&api, cluster("c", json!({"volumeAutoPlacement": {}})))
        .await
        .expect("an empty volumeAutoPlacement is admitted");
    assert_eq!(
        created.data["spec"]["volumeAutoPlacement"],
        json!({
            "evaluationInterval": "60s",
            "imbalanceThreshold": 80,
            "minHotColdDifferencePct": 20,
            "defaultCoolDownSeconds": 600,
            "maxVolumeMigrationsPerCycle": 10,
            "storageNodeCandidateCount": 3,
            "metricsBackend": "Prometheus",
            "latencyBenchmarkInterval": "5m",
            "baselineStrategy": "RollingWindow",
            "baselineWindow": "6h",
            "baselineColdStart": "PartialWindow",
            "baselineMinSamples": 6,
            // The API server keeps whole numbers whole.
            "baselineOutlierK": 3,
            "iopsWeight": 1,
            "throughputWeight": 0.1,
        })
    );
    let typed: StorageCluster =
        serde_json::from_value(serde_json::to_value(&created).expect("json")).expect("typed");
    assert_eq!(
        typed.spec.volume_auto_placement,
        Some(simplyblock_api::storage_cluster::VolumeAutoPlacement::default())
    );
    // Without the block nothing is invented.
    let bare = create(&api, cluster("d", json!({})))
        .await
        .expect("admitted");
    assert!(bare.data["spec"].get("volumeAutoPlacement").is_none());
}

#[tokio::test]
async fn the_ops_history_limit_defaults_to_twenty_and_is_not_negative() {
    let (client, ns) = crate::support::namespace("cel-ops-history").await;
    let api = dynamic::<StorageCluster>(&client, &ns);
    let created = create(&api, cluster("a", json!({})))
        .await
        .expect("a cluster without the field is admitted");
    assert_eq!(created.data["spec"]["opsHistoryLimit"], json!(20));
    let typed: StorageCluster =
        serde_json::from_value(serde_json::to_value(&created).expect("json")).expect("typed");
    assert_eq!(typed.spec.ops_history_limit, 20);

    let none_kept = create(&api, cluster("b", json!({"opsHistoryLimit": 0})))
        .await
        .expect("0 keeps no finished operation, and is admitted");
    assert_eq!(none_kept.data["spec"]["opsHistoryLimit"], json!(0));
    let result = create(&api, cluster("c", json!({"opsHistoryLimit": -1}))).await;
    assert_eq!(
        refusal(result),
        [
            "spec.opsHistoryLimit: Invalid value: -1: spec.opsHistoryLimit in body should be greater than or equal to 0"
        ]
    );
}

#[tokio::test]
async fn a_cluster_name_fits_a_label_value() {
    let (client, ns) = crate::support::namespace("cel-cluster-name").await;
    let api = dynamic::<StorageCluster>(&client, &ns);
    let at_limit = "c".repeat(63);
    create(&api, cluster(&at_limit, json!({})))
        .await
        .expect("63 characters fit");
    let result = create(&api, cluster(&"c".repeat(64), json!({}))).await;
    assert_eq!(
        refusal(result),
        [
            "<nil>: Invalid value: a StorageCluster name is at most 63 characters, because it is written into label values; choose a shorter name"
        ]
    );
}

#[tokio::test]
async fn an_unknown_action_is_refused() {
    let (client, ns) = crate::support::namespace("cel-unknown-action").await;
    let api = dynamic::<StorageClusterOps>(&client, &ns);
    let result = create(&api, scops("reboot", "Reboot")).await;
    assert_eq!(
        refusal(result),
        [
            "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            "spec.action: Unsupported value: \"Reboot\": supported values: \"Activate\", \"Expand\", \"Shutdown\", \"Start\", \"Restart\", \"RollingRestart\", \"CancelTask\"",
        ]
    );
}

#[tokio::test]
async fn an_action_is_fixed_at_creation_and_abort_is_not() {
    let (client, ns) = crate::support::namespace("cel-action-immutable").await;
    let api = dynamic::<StorageClusterOps>(&client, &ns);
    create(&api, scops("op", "Shutdown"))
        .await
        .expect("created");
    let change = update(&api, "op", |o| o["spec"]["action"] = json!("Start")).await;
    assert_eq!(
        refusal(change),
        [
            "spec.action: Invalid value: \"Start\": spec.action is immutable: an operation performs one action; create another operation for another action"
        ]
    );
    let retarget = update(&api, "op", |o| o["spec"]["clusterRef"] = json!("other")).await;
    assert_eq!(
        refusal(retarget),
        [
            "spec.clusterRef: Invalid value: \"other\": spec.clusterRef is immutable: an operation acts on one cluster; create another operation for another cluster"
        ]
    );
    let aborted = update(&api, "op", |o| o["spec"]["abort"] = json!(true))
        .await
        .expect("abort is the one mutable field");
    assert_eq!(aborted.data["spec"]["abort"], json!(true));

    let oops = dynamic::<OperatorOps>(&client, &ns);
    create(&oops, discover("run", json!({})))
        .await
        .expect("created");
    let edit = update(&oops, "run", |o| {
        o["spec"]["discover"]["clusterRef"] = json!("x")
    })
    .await;
    assert_eq!(
        refusal(edit),
        ["spec.discover: Invalid value: spec.discover is immutable"]
    );
}

#[tokio::test]
async fn an_operator_ops_action_is_known_and_fixed() {
    let (client, ns) = crate::support::namespace("cel-oops-action").await;
    let api = dynamic::<OperatorOps>(&client, &ns);
    // Discover is the only action, so a changed action is always an unknown one and the
    // enum refuses it before the immutability rule is evaluated.
    let expected = [
        "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        "spec.action: Unsupported value: \"Inspect\": supported values: \"Discover\"",
    ];
    let mut unknown = discover("inspect", json!({}));
    unknown["spec"]["action"] = json!("Inspect");
    assert_eq!(refusal(create(&api, unknown).await), expected);
    create(&api, discover("run", json!({})))
        .await
        .expect("created");
    let change = update(&api, "run", |o| o["spec"]["action"] = json!("Inspect")).await;
    assert_eq!(refusal(change), expected);
    let stored = api.get("run").await.expect("still there");
    assert_eq!(stored.data["spec"]["action"], json!("Discover"));
}

#[tokio::test]
async fn cancel_task_names_its_task() {
    let (client, ns) = crate::support::namespace("cel-cancel-task").await;
    let api = dynamic::<StorageClusterOps>(&client, &ns);
    let result = create(&api, scops("cancel", "CancelTask")).await;
    assert_eq!(
        refusal(result),
        [
            "spec: Invalid value: action CancelTask needs spec.cancelTask.taskID, the id of the control-plane task to cancel"
        ]
    );
    let mut op = scops("cancel", "CancelTask");
    op["spec"]["cancelTask"] = json!({"taskID": "6a0c"});
    create(&api, op)
        .await
        .expect("with a task id it is admitted");
}

#[tokio::test]
async fn discovery_takes_workers_or_a_selector() {
    let (client, ns) = crate::support::namespace("cel-discover-workers").await;
    let api = dynamic::<OperatorOps>(&client, &ns);
    let result = create(
        &api,
        discover(
            "both",
            json!({"workers": ["worker-1"], "nodeSelector": {"rack": "a"}}),
        ),
    )
    .await;
    assert_eq!(
        refusal(result),
        [
            "spec.discover: Invalid value: spec.discover names workers and also carries a nodeSelector; state one or the other"
        ]
    );
    create(&api, discover("names", json!({"workers": ["worker-1"]})))
        .await
        .expect("workers alone");
    create(
        &api,
        discover("labels", json!({"nodeSelector": {"rack": "a"}})),
    )
    .await
    .expect("a selector alone");
}

#[tokio::test]
async fn device_filters_belong_to_one_class() {
    let (client, ns) = crate::support::namespace("cel-device-filter").await;
    let api = dynamic::<OperatorOps>(&client, &ns);
    let cases = [
        (
            json!({"enableLogicalBlockDevices": true, "pcieAllowList": ["0000:01:00.0"]}),
            "the PCI filters select NVMe devices and cannot be combined with enableLogicalBlockDevices; use blockAllowList and blockDenyList",
        ),
        (
            json!({"blockDenyList": ["/dev/sda"]}),
            "blockAllowList and blockDenyList select logical block devices and require enableLogicalBlockDevices",
        ),
        (
            json!({"disableReclaimUserspaceDevices": true}),
            "disableReclaimUserspaceDevices keeps userspace-bound controllers out of a logical block-device run and requires enableLogicalBlockDevices",
        ),
    ];
    for (i, (filter, message)) in cases.into_iter().enumerate() {
        let result = create(
            &api,
            discover(&format!("bad-{i}"), json!({"deviceFilter": filter})),
        )
        .await;
        assert_eq!(
            refusal(result),
            [format!(
                "spec.discover.deviceFilter: Invalid value: {message}"
            )],
            "filter {i}"
        );
    }
    let block = json!({"deviceFilter": {
        "enableLogicalBlockDevices": true,
        "blockDenyList": ["/dev/sda"],
        "disableReclaimUserspaceDevices": true
    }});
    create(&api, discover("block", block))
        .await
        .expect("a consistent block filter");
    let nvme = json!({"deviceFilter": {"pcieDenyList": ["0000:01:00.0"], "pcieModel": "PM1733"}});
    create(&api, discover("nvme", nvme))
        .await
        .expect("a consistent NVMe filter");
}

#[tokio::test]
async fn an_unknown_step_is_refused_in_status() {
    let (client, ns) = crate::support::namespace("cel-unknown-step").await;
    let api = dynamic::<StorageClusterOps>(&client, &ns);
    create(&api, scops("op", "Activate"))
        .await
        .expect("created");
    let patch = kube::api::Patch::Merge(json!({"status": {"step": {"state": "Teleporting"}}}));
    let result = api
        .patch_status("op", &kube::api::PatchParams::default(), &patch)
        .await;
    assert_eq!(
        refusal(result),
        [
            "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            "status.step.state: Unsupported value: \"Teleporting\": supported values: \"Requesting\", \"Awaiting\", \"ShuttingDown\", \"Starting\", \"CheckingPeers\", \"ShuttingDownNode\", \"RefreshingPod\", \"AwaitingPod\", \"RestartingNode\", \"Rebalancing\"",
        ]
    );
}

/// The seed's defect: documents stored before `approved` had a default lack the key, and a
/// rule reading `oldSelf.approved` without `has()` refused every approval of them. Such a
/// document cannot be made with the shipped CRD (the server defaults the key on every
/// read), so this installs a copy of the schema without the default under a group of its
/// own, once with the shipped rules and once with the guard removed to show the difference.
#[tokio::test]
async fn a_document_stored_without_the_approved_key_can_be_approved() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::CustomResourceExt;
    use kube::api::Api;
    use kube::core::{ApiResource, GroupVersionKind};

    fn legacy_crd(group: &str, strip_guard: bool) -> CustomResourceDefinition {
        let mut crd = serde_json::to_value(ClusterDeploymentConfig::crd()).expect("crd json");
        crd["metadata"]["name"] = json!(format!("clusterdeploymentconfigs.{group}"));
        crd["spec"]["group"] = json!(group);
        let spec =
            &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        spec["properties"]["approved"]
            .as_object_mut()
            .expect("approved property")
            .remove("default");
        if strip_guard {
            for rule in spec["x-kubernetes-validations"]
                .as_array_mut()
                .expect("rules")
            {
                let text = rule["rule"].as_str().unwrap_or_default().to_string();
                rule["rule"] = json!(text.replace("!has(oldSelf.approved) || ", ""));
            }
        }
        serde_json::from_value(crd).expect("a CRD")
    }

    let (client, ns) = crate::support::namespace("cel-approved-legacy").await;
    let env = simplyblock_testenv::TestEnv::shared().expect("env");
    let guarded = "legacy.storage.simplyblock.io";
    let unguarded = "unguarded.storage.simplyblock.io";
    env.install_crds(&[legacy_crd(guarded, false), legacy_crd(unguarded, true)])
        .await
        .expect("the legacy CRDs install");

    for group in [guarded, unguarded] {
        let gvk = GroupVersionKind::gvk(group, "v1alpha2", "ClusterDeploymentConfig");
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(client.clone(), &ns, &ApiResource::from_gvk(&gvk));
        let mut doc = cdc("doc", json!([nvme_group("g")]));
        doc["apiVersion"] = json!(format!("{group}/v1alpha2"));
        create(&api, doc).await.expect("a draft is admitted");
        let stored = api.get("doc").await.expect("read back");
        assert!(
            stored.data["spec"].get("approved").is_none(),
            "the document must be stored without the key for this test to mean anything"
        );
        let approval = update(&api, "doc", |d| d["spec"]["approved"] = json!(true)).await;
        if group == guarded {
            let approved = approval.expect("the has() guard lets the first approval through");
            assert_eq!(approved.data["spec"]["approved"], json!(true));
        } else {
            let causes = refusal(approval);
            assert!(
                causes.iter().any(|c| c.contains("no such key: approved")),
                "without the guard the approval fails on the missing key: {causes:?}"
            );
        }
    }
}

fn storage_node(name: &str) -> Value {
    json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2",
        "kind": "StorageNode",
        "metadata": {"name": name},
        "spec": {
            "clusterRef": "simplyblock",
            "workerNode": "worker-1",
            "slot": 0,
            "config": {"sizing": {"vcpuCount": 4}, "deviceNames": ["0000:01:00.0"]}
        }
    })
}

#[tokio::test]
async fn a_node_keeps_its_identity() {
    use simplyblock_api::StorageNode;
    let (client, ns) = crate::support::namespace("cel-storage-node").await;
    let api = dynamic::<StorageNode>(&client, &ns);
    create(&api, storage_node("n")).await.expect("created");
    let moved = update(&api, "n", |n| n["spec"]["clusterRef"] = json!("other")).await;
    assert_eq!(
        refusal(moved),
        [
            "spec.clusterRef: Invalid value: \"other\": clusterRef is immutable: a node belongs to one cluster for its life; delete it and create one naming the other cluster"
        ]
    );
    let reslotted = update(&api, "n", |n| n["spec"]["slot"] = json!(1)).await;
    assert_eq!(
        refusal(reslotted),
        ["spec.slot: Invalid value: 1: slot is immutable: it is part of the node's identity"]
    );
    let devices = update(&api, "n", |n| {
        n["spec"]["config"]["deviceNames"] = json!(["0000:02:00.0"])
    })
    .await;
    assert_eq!(
        refusal(devices),
        [
            "spec.config.deviceNames: Invalid value: deviceNames is immutable: the node's data lives on these devices"
        ]
    );
    let long = create(&api, storage_node(&"n".repeat(64))).await;
    assert_eq!(
        refusal(long),
        [
            "<nil>: Invalid value: a StorageNode name is at most 63 characters, because it is written into label values; choose a shorter name"
        ]
    );
    let small = create(&api, {
        let mut n = storage_node("small");
        n["spec"]["config"]["sizing"]["vcpuCount"] = json!(2);
        n
    })
    .await;
    assert_eq!(
        refusal(small),
        [
            "spec.config.sizing.vcpuCount: Invalid value: 2: spec.config.sizing.vcpuCount in body should be greater than or equal to 4"
        ]
    );
}

fn pool(name: &str, volume_defaults: Value) -> Value {
    json!({
        "apiVersion": simplyblock_api::API_VERSION,
        "kind": "StoragePool",
        "metadata": {"name": name},
        "spec": {"clusterRef": "simplyblock", "volumeDefaults": volume_defaults}
    })
}

#[tokio::test]
async fn a_pool_cannot_ask_for_compression() {
    use simplyblock_api::StoragePool;
    let (client, ns) = crate::support::namespace("cel-pool-compression").await;
    let api = dynamic::<StoragePool>(&client, &ns);
    let asked = create(&api, pool("compressed", json!({"enableCompression": true}))).await;
    assert_eq!(
        refusal(asked),
        [
            "spec.volumeDefaults.enableCompression: Invalid value: true: enableCompression is not supported by the CSI driver of this release: the control plane's volume API has no compression setting, so no volume of this pool's StorageClass could be provisioned; remove enableCompression"
        ]
    );
    create(&api, pool("plain", json!({"enableCompression": false})))
        .await
        .expect("false is what the driver does");
    create(&api, pool("encrypted", json!({"enableEncryption": true})))
        .await
        .expect("other defaults are admitted");
}

/// What runs privileged on a worker comes from simplyblock's registries, and a worker is
/// named as a Node is before its name becomes part of a host name.
#[tokio::test]
async fn images_are_full_references_and_workers_are_node_names() {
    use simplyblock_api::StorageNode;
    let (client, ns) = crate::support::namespace("cel-host-reach").await;
    let should_match = |causes: Vec<String>, field: &str| {
        assert!(
            causes
                .iter()
                .any(|c| c.starts_with(&format!("{field}: ")) && c.contains("should match")),
            "{field}: {causes:?}"
        );
    };

    let nodes = dynamic::<StorageNode>(&client, &ns);
    let mut node = storage_node("n");
    // No registry; no tag or digest. Which registries are allowed is the chart's policy.
    node["spec"]["config"]["spdkImage"] = json!("spdk:1");
    node["spec"]["config"]["spdkProxyImage"] = json!("quay.io/simplyblock-io/proxy");
    let causes = refusal(create(&nodes, node).await);
    should_match(causes.clone(), "spec.config.spdkImage");
    should_match(causes, "spec.config.spdkProxyImage");
    for worker in ["evil.example.com:80/x", "Worker-1", "w1@host"] {
        let mut node = storage_node("n");
        node["spec"]["workerNode"] = json!(worker);
        should_match(refusal(create(&nodes, node).await), "spec.workerNode");
    }
    let mut node = storage_node("n");
    node["spec"]["config"]["spdkImage"] = json!("mirror.example.com:5000/sb/spdk:v25.10");
    node["spec"]["config"]["spdkProxyImage"] = json!(format!(
        "quay.io/simplyblock-io/proxy@sha256:{}",
        "a".repeat(64)
    ));
    create(&nodes, node)
        .await
        .expect("a mirror's image, and one pinned by its digest alone");

    let clusters = dynamic::<StorageCluster>(&client, &ns);
    let foreign = cluster(
        "sb",
        json!({"volumeMigrationSettings": {"rebalancerImage": "Registry.example.com/x:1"}}),
    );
    should_match(
        refusal(create(&clusters, foreign).await),
        "spec.volumeMigrationSettings.rebalancerImage",
    );

    let docs = dynamic::<ClusterDeploymentConfig>(&client, &ns);
    let mut doc = cdc("doc", json!([nvme_group("g")]));
    doc["spec"]["images"] = json!({"spdk": {"image": "registry.example.com/spdk:1;reboot"}});
    should_match(refusal(create(&docs, doc).await), "spec.images.spdk.image");
}

fn snops(name: &str, action: &str, extra: Value) -> Value {
    let mut spec = json!({"nodeRef": "simplyblock-worker-1-0", "action": action});
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2",
        "kind": "StorageNodeOps",
        "metadata": {"name": name},
        "spec": spec
    })
}

#[tokio::test]
async fn a_node_operation_carries_exactly_the_parameters_of_its_action() {
    let (client, ns) = crate::support::namespace("cel-snops-parameters").await;
    let api = dynamic::<simplyblock_api::StorageNodeOps>(&client, &ns);
    let refused = |result| refusal(result);
    assert_eq!(
        refused(create(&api, snops("move", "Migrate", json!({}))).await),
        [
            "spec: Invalid value: spec.migrate is given with action Migrate, and only then: it names the worker the node moves to"
        ]
    );
    assert_eq!(
        refused(
            create(
                &api,
                snops(
                    "stop",
                    "Shutdown",
                    json!({"migrate": {"targetWorkerNode": "worker-2"}})
                )
            )
            .await
        ),
        [
            "spec: Invalid value: spec.migrate is given with action Migrate, and only then: it names the worker the node moves to"
        ]
    );
    assert_eq!(
        refused(create(&api, snops("drain", "Suspend", json!({"remove": {}}))).await),
        ["spec: Invalid value: spec.remove is given only with action Remove"]
    );
    assert_eq!(
        refused(
            create(
                &api,
                snops(
                    "pause",
                    "Suspend",
                    json!({"force": true, "reattachVolume": true})
                )
            )
            .await
        ),
        [
            "spec: Invalid value: spec.force applies to actions Restart and Migrate only",
            "spec: Invalid value: spec.reattachVolume applies to actions Restart, Migrate and HostMaintenance only",
        ]
    );
    let moved = create(
        &api,
        snops(
            "move",
            "Migrate",
            json!({"migrate": {"targetWorkerNode": "worker-2"}, "force": false}),
        ),
    )
    .await
    .expect("a Migrate with its target");
    assert_eq!(
        moved.data["spec"]["migrate"]["targetWorkerNode"],
        "worker-2"
    );
    let removal = create(&api, snops("drain", "Remove", json!({"remove": {}})))
        .await
        .expect("a Remove");
    assert_eq!(
        removal.data["spec"]["remove"]["systemVolumeFilterRegex"], "^sb-fio-baseline-.*",
        "the server defaults the filter"
    );
    assert_eq!(
        refused(
            create(
                &api,
                snops(
                    "elsewhere",
                    "Migrate",
                    json!({"migrate": {"targetWorkerNode": "Worker_2"}})
                )
            )
            .await
        )
        .len(),
        1,
        "a target that is not a Node name"
    );
}

#[tokio::test]
async fn a_node_operation_is_fixed_at_creation_but_for_abort() {
    let (client, ns) = crate::support::namespace("cel-snops-immutable").await;
    let api = dynamic::<simplyblock_api::StorageNodeOps>(&client, &ns);
    create(&api, snops("op", "Restart", json!({"force": true})))
        .await
        .expect("created");
    assert_eq!(
        refusal(update(&api, "op", |o| o["spec"]["nodeRef"] = json!("other")).await),
        [
            "spec.nodeRef: Invalid value: \"other\": spec.nodeRef is immutable: an operation acts on one node; create another operation for another node"
        ]
    );
    assert_eq!(
        refusal(update(&api, "op", |o| o["spec"]["action"] = json!("Shutdown")).await),
        [
            "spec.action: Invalid value: \"Shutdown\": spec.action is immutable: an operation performs one action; create another operation for another action",
            "spec: Invalid value: spec.force applies to actions Restart and Migrate only",
        ]
    );
    assert_eq!(
        refusal(update(&api, "op", |o| o["spec"]["force"] = json!(false)).await),
        ["spec.force: Invalid value: false: spec.force is immutable"]
    );
    let aborted = update(&api, "op", |o| o["spec"]["abort"] = json!(true))
        .await
        .expect("abort is the one mutable field");
    assert_eq!(aborted.data["spec"]["abort"], json!(true));
    let unknown = create(&api, snops("reboot", "Reboot", json!({}))).await;
    assert!(
        refusal(unknown)
            .iter()
            .any(|m| m.contains("supported values: \"Shutdown\", \"Restart\", \"Suspend\", \"Resume\", \"Remove\", \"Migrate\", \"HostMaintenance\"")),
    );
}

#[tokio::test]
async fn sync_replication_is_fixed_when_the_cluster_is_created() {
    let (client, ns) = crate::support::namespace("cel-sync-replication").await;
    let api = dynamic::<StorageCluster>(&client, &ns);
    create(&api, cluster("a", json!({"enableSyncReplication": true})))
        .await
        .expect("created");
    let change = refusal(
        update(&api, "a", |c| {
            c["spec"]["enableSyncReplication"] = json!(false)
        })
        .await,
    );
    assert_eq!(change.len(), 1, "{change:?}");
    assert!(
        change[0].contains("enableSyncReplication is immutable"),
        "{change:?}"
    );
    let removal = refusal(
        update(&api, "a", |c| {
            c["spec"]
                .as_object_mut()
                .map(|s| s.remove("enableSyncReplication"));
        })
        .await,
    );
    assert_eq!(removal.len(), 1, "{removal:?}");
    assert!(
        removal[0].contains("fixed when the cluster is created"),
        "{removal:?}"
    );
    create(&api, cluster("b", json!({})))
        .await
        .expect("created without it");
    let added = refusal(
        update(&api, "b", |c| {
            c["spec"]["enableSyncReplication"] = json!(true)
        })
        .await,
    );
    assert_eq!(added.len(), 1, "{added:?}");
    assert!(
        added[0].contains("fixed when the cluster is created"),
        "{added:?}"
    );
}

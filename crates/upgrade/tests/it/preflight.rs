//! Preflight of a fleet the Go operator left behind: the CRDs as it installed them (each
//! converting kind served and stored at v1alpha1 only, plus the StorageNodeSet), a cluster,
//! a node set with its nodes, a pool, and two cluster operations, one finished and one still
//! running. Preflight refuses while the operation runs and names it; once the operation is
//! terminal it passes and prints the plan.

use std::process::Output;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use simplyblock_testenv::TestEnv;
use simplyblock_upgrade::plan::State;
use simplyblock_upgrade::preflight::{EXIT_BLOCKED, EXIT_READY};
use simplyblock_upgrade::{Options, Report, Stage, go_installation};

pub(crate) const NS: &str = "simplyblock";
const CLUSTER_UUID: &str = "6f3c2a1e-9b4d-4c8e-a2f1-0d9e8c7b6a50";
use go_installation::{FINISHED_OPS, Ids, RUNNING_OPS, object};

/// Ids no control plane knows, for checks that call none.
fn made_up_ids() -> Ids {
    Ids {
        cluster: CLUSTER_UUID.into(),
        pool: "a1b2c3d4-0000-4000-8000-000000000001".into(),
        nodes: (0..2)
            .map(|i| {
                (
                    format!("worker-{}", i + 1),
                    format!("0c1d2e3f-0000-4000-8000-00000000000{i}"),
                )
            })
            .collect(),
    }
}

/// The v1alpha1 API of `kind` in the test's namespace.
pub(crate) fn v1alpha1(client: &kube::Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    go_installation::v1alpha1(client, NS, kind, plural)
}

/// Creates a v1alpha1 object with its status, as the Go operator left it.
async fn create(client: &kube::Client, plural: &str, object: Value) -> DynamicObject {
    go_installation::create(client, NS, plural, object)
        .await
        .expect("a Go operator's object")
}

/// The binary's preflight against `env`.
async fn preflight_binary(env: &TestEnv) -> Output {
    upgrade_binary(env, &["preflight"]).await
}

/// The binary run with `args` and `--namespace` against `env`.
pub(crate) async fn upgrade_binary(env: &TestEnv, args: &[&str]) -> Output {
    upgrade_binary_with(env, args, &[]).await
}

/// [`upgrade_binary`] with the environment variables `vars` set.
pub(crate) async fn upgrade_binary_with(
    env: &TestEnv,
    args: &[&str],
    vars: &[(&str, &str)],
) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_simplyblock-upgrade"))
        .args(args)
        .args(["--namespace", NS])
        .env("KUBECONFIG", env.kubeconfig_path())
        .env_remove("POD_NAMESPACE")
        .envs(vars.iter().copied())
        .output()
        .await
        .expect("simplyblock-upgrade runs")
}

pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn step_state<'a>(report: &'a Report, stage: Stage, id: &str) -> &'a State {
    &report
        .plan
        .stage(stage)
        .and_then(|s| s.steps.iter().find(|p| p.id == id))
        .unwrap_or_else(|| panic!("step {id} in the plan"))
        .state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_refuses_while_an_operation_runs_and_passes_once_it_is_terminal() {
    let env = TestEnv::start().await.expect("API server");
    env.install_crds(&go_installation::crds())
        .await
        .expect("the Go operator's CRDs");
    let client = env.client().await.expect("client");
    simplyblock_testenv::create_namespace(&client, NS)
        .await
        .expect("namespace");
    go_installation::fleet(&client, NS, &made_up_ids())
        .await
        .expect("the fleet");
    go_installation::release(&client, NS)
        .await
        .expect("the Go release");

    // While the rolling restart runs: refused, naming it and only it.
    let report =
        simplyblock_upgrade::preflight(&client, NS, &Default::default(), &Options::default())
            .await
            .expect("preflight reads the cluster");
    assert_eq!(report.exit_code(), EXIT_BLOCKED, "{report}");
    let refused: Vec<(&str, &str)> = report
        .refusals
        .iter()
        .map(|r| (r.check, r.object.as_str()))
        .collect();
    assert_eq!(
        refused,
        [(
            "in-flight-operation",
            format!("StorageClusterOps/{RUNNING_OPS}").as_str()
        )],
        "{report}"
    );
    assert!(matches!(
        step_state(&report, Stage::Upgrade, "upgrade-operator"),
        State::Blocked(_)
    ));
    assert!(matches!(
        step_state(&report, Stage::Migrate, "reparent-storage-nodes"),
        State::Blocked(_)
    ));
    let output = preflight_binary(&env).await;
    let text = stdout(&output);
    assert_eq!(
        output.status.code(),
        Some(EXIT_BLOCKED),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.contains(&format!("StorageClusterOps/{RUNNING_OPS}")),
        "{text}"
    );
    assert!(
        !text.contains(&format!("StorageClusterOps/{FINISHED_OPS}")),
        "{text}"
    );

    // The upgrade stage is refused as a whole, naming the blocked step and the operation.
    let refused = upgrade_binary(&env, &["upgrade"]).await;
    assert_eq!(
        refused.status.code(),
        Some(EXIT_BLOCKED),
        "{}",
        stderr(&refused)
    );
    assert!(
        stderr(&refused).contains(&format!(
            "upgrade-operator: [in-flight-operation] StorageClusterOps/{RUNNING_OPS}"
        )),
        "{}",
        stderr(&refused)
    );

    // The Go operator finishes the restart.
    v1alpha1(&client, "StorageClusterOps", "storageclusterops")
        .patch_status(
            RUNNING_OPS,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .expect("the operation finishes");

    let report =
        simplyblock_upgrade::preflight(&client, NS, &Default::default(), &Options::default())
            .await
            .expect("preflight reads the cluster");
    assert_eq!(report.exit_code(), EXIT_READY, "{report}");
    assert_eq!(
        step_state(&report, Stage::Migrate, "reparent-storage-nodes"),
        &State::Pending
    );
    let output = preflight_binary(&env).await;
    let text = stdout(&output);
    assert_eq!(
        output.status.code(),
        Some(EXIT_READY),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for expected in [
        "Checks: no problems found.",
        "deploy-conversion-webhook",
        "rewrite-storage-version",
        "update StorageNode/prod-nodes-worker-1-0: ownerReferences: StorageNodeSet/prod-nodes → StorageCluster/prod (controller)",
        "delete StorageNodeSet/prod-nodes",
        "update ConfigMap/prod-nodes-config: ownerReferences: StorageNodeSet/prod-nodes → StorageCluster/prod (controller)",
        "create ClusterDeploymentConfig/prod: nodeSets[] from StorageNodeSet prod-nodes",
        "annotate StorageNode/prod-nodes-worker-2-0: storage.simplyblock.io/conversion-spec.config.sizing = {\"minHugePagesSize\":\"4Gi\",\"vcpuCount\":8}",
        "hold-controllers",
        "scale Deployment/simplyblock-operator-controller-manager: replicas → 0",
        "Verdict: nothing blocks the upgrade",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in\n{text}");
    }
    // Admitted now, the upgrade holds the Lease and stops where it needs the chart.
    let upgrade = upgrade_binary(&env, &["upgrade"]).await;
    assert_eq!(upgrade.status.code(), Some(1), "{}", stderr(&upgrade));
    assert!(
        stderr(&upgrade).contains("no chart given: pass --chart"),
        "{}",
        stderr(&upgrade)
    );
    let unconfirmed = upgrade_binary(&env, &["migrate"]).await;
    assert_eq!(unconfirmed.status.code(), Some(1));
    assert!(
        stderr(&unconfirmed).contains("--confirm"),
        "{}",
        stderr(&unconfirmed)
    );

    // Nothing else was written: the nodes still name their set.
    let node = v1alpha1(&client, "StorageNode", "storagenodes")
        .get("prod-nodes-worker-1-0")
        .await
        .expect("node");
    assert_eq!(
        node.metadata.owner_references.expect("owners")[0].kind,
        "StorageNodeSet"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_names_every_problem_at_once() {
    let env = TestEnv::start().await.expect("API server");
    env.install_crds(&go_installation::crds())
        .await
        .expect("the Go operator's CRDs");
    let client = env.client().await.expect("client");
    simplyblock_testenv::create_namespace(&client, NS)
        .await
        .expect("namespace");
    create(
        &client,
        "storageclusters",
        object(
            "StorageCluster",
            "prod",
            json!({"spec": {"maxSubsystemCount": 10, "vcpuCount": 8},
                   "status": {"uuid": CLUSTER_UUID}}),
        ),
    )
    .await;
    // The set is draining worker-2, whose node is offline, through a removal not yet started.
    create(
        &client,
        "storagenodesets",
        object(
            "StorageNodeSet",
            "prod-nodes",
            json!({"spec": {"clusterName": "prod", "workerNodes": ["worker-1", "worker-2"]},
                   "status": {"drainCoordination": [{"hostname": "worker-2", "phase": "draining",
                                                     "startedAt": "2026-01-02T03:04:05Z"}]}}),
        ),
    )
    .await;
    for (worker, status) in [("worker-1", "online"), ("worker-2", "offline")] {
        create(
            &client,
            "storagenodes",
            object(
                "StorageNode",
                &format!("prod-nodes-{worker}-0"),
                json!({"spec": {"storageNodeSetRef": "prod-nodes", "workerNode": worker},
                       "status": {"status": status}}),
            ),
        )
        .await;
    }
    create(
        &client,
        "storagenodeops",
        object(
            "StorageNodeOps",
            "remove-worker-2",
            json!({"spec": {"storageNodeRef": "prod-nodes-worker-2-0", "action": "remove"}}),
        ),
    )
    .await;
    let long_pool = "p".repeat(64);
    create(
        &client,
        "storagepools",
        object(
            "StoragePool",
            &long_pool,
            json!({"spec": {"clusterName": "prod"}}),
        ),
    )
    .await;
    // A claim carrying a QoS key in both spellings with different values, and a volume whose
    // legacy handle names a pool that does not exist.
    let claim: k8s_openapi::api::core::v1::PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data", "annotations": {
            "simplyblock.io/qos-rw-iops": "1000", "storage.simplyblock.io/qos-rw-iops": "2000"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .expect("claim");
    Api::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &claim)
        .await
        .expect("claim created");
    let volume: k8s_openapi::api::core::v1::PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "pv-legacy"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "csi": {"driver": simplyblock_api::keys::CSI_DRIVER_NAME,
                         "volumeHandle": format!("{CLUSTER_UUID}:retired-pool:0a0b0c0d-0000-4000-8000-000000000001")}},
    }))
    .expect("volume");
    Api::all(client.clone())
        .create(&PostParams::default(), &volume)
        .await
        .expect("volume created");

    // Sorted by check, as `found` sorts.
    let every_problem = [
        (
            "in-flight-operation",
            "StorageNodeOps/remove-worker-2".to_owned(),
        ),
        (
            "key-spelling-conflict",
            "PersistentVolumeClaim/data".to_owned(),
        ),
        (
            "legacy-handle-unresolvable",
            "PersistentVolume/pv-legacy".to_owned(),
        ),
        ("name-too-long", format!("StoragePool/{long_pool}")),
        ("node-set-drain", "StorageNodeSet/prod-nodes".to_owned()),
        (
            "storage-node-offline",
            "StorageNode/prod-nodes-worker-2-0".to_owned(),
        ),
    ];
    let found = |report: &Report| -> Vec<(&'static str, String)> {
        let mut found: Vec<(&'static str, String)> = report
            .refusals
            .iter()
            .map(|r| (r.check, r.object.clone()))
            .collect();
        found.sort();
        found
    };
    let expected = |acknowledged: bool| -> Vec<(&'static str, String)> {
        every_problem
            .iter()
            .filter(|(check, _)| !(acknowledged && *check == "storage-node-offline"))
            .cloned()
            .collect()
    };

    let report =
        simplyblock_upgrade::preflight(&client, NS, &Default::default(), &Options::default())
            .await
            .expect("preflight reads the cluster");
    assert_eq!(found(&report), expected(false), "{report}");
    assert_eq!(report.exit_code(), EXIT_BLOCKED);

    // Acknowledged, the offline node no longer refuses; everything else still does.
    let output = upgrade_binary(&env, &["preflight", "--acknowledge-offline-nodes"]).await;
    let text = stdout(&output);
    assert_eq!(
        output.status.code(),
        Some(EXIT_BLOCKED),
        "{text}{}",
        stderr(&output)
    );
    for (check, object) in expected(true) {
        assert!(
            text.contains(&format!("[{check}] {object}")),
            "missing {check} {object} in\n{text}"
        );
    }
    assert!(!text.contains("[storage-node-offline]"), "{text}");
    // Each problem says what to do.
    assert!(text.contains("do:  let the drain finish"), "{text}");
    assert!(
        text.contains("do:  restore StoragePool retired-pool"),
        "{text}"
    );
}

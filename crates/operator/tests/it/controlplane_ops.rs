//! The ControlPlaneOps controller against a real API server, sbsim and the stand-in, on a
//! local control plane the ControlPlane controller installed: an Upgrade verified by the
//! version the control plane reports (and refused, or failed on a mismatch), Draining
//! holding while an operation on storage runs, a Restart of a non-essential component
//! that skips it, a Backup creating its FoundationDBBackup, and the webhook's refusals.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use simplyblock_api::StorageClusterOps;
use simplyblock_api::common::OpsPhase;
use simplyblock_api::control_plane::ControlPlanePhase;
use simplyblock_api::control_plane_ops::ControlPlaneOps;
use simplyblock_api::keys::{BACKUP_REQUESTED_BY_ANNOTATION, RESTARTED_AT_ANNOTATION};
use simplyblock_controlplane::Method;
use simplyblock_operator::controlplane::{controller, ops};

use crate::controlplane::{Harness, IMAGE, harness, local};
use crate::support::{PATIENCE, passes, until, until_explained};

const NEXT: &str = "quay.io/simplyblock-io/simplyblock:25.10.2";

/// A local control plane, installed and Available, with both controllers running.
async fn installed(ns: &str) -> (Harness, tokio::task::JoinHandle<()>) {
    let h = harness(ns).await;
    let cp = h.start();
    let _ops = tokio::spawn(ops::run(h.ctx.clone()));
    h.create(local()).await;
    h.phase_is(ControlPlanePhase::Available).await;
    (h, cp)
}

fn operations(h: &Harness) -> Api<ControlPlaneOps> {
    Api::namespaced(h.kube.clone(), &h.ns)
}

fn operation(name: &str, action: &str, extra: Value) -> ControlPlaneOps {
    let mut spec = json!({"controlPlaneRef": "simplyblock", "action": action});
    spec.as_object_mut()
        .expect("object")
        .extend(extra.as_object().cloned().unwrap_or_default());
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "ControlPlaneOps",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("op")
}

async fn create(h: &Harness, name: &str, action: &str, extra: Value) {
    operations(h)
        .create(&PostParams::default(), &operation(name, action, extra))
        .await
        .expect("ControlPlaneOps created");
}

async fn finished(h: &Harness, name: &str) -> ControlPlaneOps {
    let last = std::sync::Mutex::new(None);
    until_explained(
        &format!("{name} to finish"),
        PATIENCE,
        async || {
            let op = operations(h).get(name).await.ok()?;
            *last.lock().expect("lock") = op.status.clone();
            op.status
                .as_ref()
                .is_some_and(|s| s.phase.is_terminal())
                .then_some(op)
        },
        || format!("last seen {:?}", last.lock().expect("lock")),
    )
    .await
}

fn phase_and_message(op: &ControlPlaneOps) -> (OpsPhase, String) {
    let s = op.status.clone().unwrap_or_default();
    (s.phase, s.message.unwrap_or_default())
}

async fn reports_version(h: &Harness, version: &str) {
    let r = h
        .sim
        .cp
        .raw(
            Method::PUT,
            "/../../_sim/version",
            &[],
            Some(&json!({ "version": version })),
        )
        .await
        .expect("sbsim");
    assert!(r.status < 300);
}

async fn lock(h: &Harness) -> Option<String> {
    h.status().await.active_ops_ref
}

async fn api_image(h: &Harness) -> Option<String> {
    Api::<Deployment>::namespaced(h.kube.clone(), &h.ns)
        .get("simplyblock-webappapi")
        .await
        .expect("deployment")
        .spec
        .template
        .spec?
        .containers
        .first()?
        .image
        .clone()
}

#[tokio::test]
async fn an_upgrade_rolls_the_new_image_out_and_verifies_its_version() {
    let (h, _cp) = installed("cpops-upgrade").await;
    reports_version(&h, "25.10.2").await;
    create(&h, "up", "Upgrade", json!({"upgrade": {"image": NEXT}})).await;
    let (phase, message) = phase_and_message(&finished(&h, "up").await);
    assert_eq!(phase, OpsPhase::Succeeded, "{message}");
    assert_eq!(
        message,
        format!("upgraded to {NEXT}; the control plane reports version 25.10.2")
    );
    crate::kubectl::ready(
        &operations(&h),
        "controlplaneops.storage.simplyblock.io",
        "up",
    )
    .await;
    let cp = h.cps().get("simplyblock").await.expect("cp");
    assert_eq!(cp.spec.source.local.expect("local").image, NEXT);
    assert_eq!(api_image(&h).await.as_deref(), Some(NEXT));
    until("the lock released", async || {
        lock(&h).await.is_none().then_some(())
    })
    .await;
    let counted = h.ctx.metrics.sample(
        "simplyblock_controlplane_operations_total",
        &[
            ("namespace", &h.ns),
            ("action", "Upgrade"),
            ("result", "succeeded"),
        ],
    );
    assert_eq!(counted, Some(1.0));
}

#[tokio::test]
async fn an_upgrade_whose_version_differs_fails_as_a_mismatch() {
    let (h, _cp) = installed("cpops-mismatch").await;
    reports_version(&h, "25.10.1").await;
    create(&h, "up", "Upgrade", json!({"upgrade": {"image": NEXT}})).await;
    let (phase, message) = phase_and_message(&finished(&h, "up").await);
    assert_eq!(phase, OpsPhase::Failed);
    assert!(message.starts_with("VersionMismatch: "), "{message}");
    let said = until("the VersionMismatch event", async || {
        let n = crate::support::occurrences(&h.kube, &h.ns, "up", "VersionMismatch").await;
        (n > 0).then_some(n)
    })
    .await;
    assert_eq!(said, 1);
}

#[tokio::test]
async fn an_upgrade_to_the_running_image_is_refused_in_preflight() {
    let (h, _cp) = installed("cpops-same").await;
    create(&h, "up", "Upgrade", json!({"upgrade": {"image": IMAGE}})).await;
    let op = finished(&h, "up").await;
    let (phase, message) = phase_and_message(&op);
    assert_eq!(phase, OpsPhase::Failed);
    assert!(message.contains("already runs"), "{message}");
    assert_eq!(
        op.status.and_then(|s| s.step.state).as_deref(),
        Some("Preflight")
    );
    // Nothing was written.
    let cp = h.cps().get("simplyblock").await.expect("cp");
    assert_eq!(cp.metadata.generation, Some(1));
}

/// A StorageClusterOps of the namespace that reads Running (no controller serves it here).
async fn running_storage_operation(h: &Harness) -> Api<StorageClusterOps> {
    let scops: Api<StorageClusterOps> = Api::namespaced(h.kube.clone(), &h.ns);
    let op: StorageClusterOps = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageClusterOps",
        "metadata": {"name": "roll"},
        "spec": {"clusterRef": "sb", "action": "RollingRestart"},
    }))
    .expect("op");
    scops
        .create(&PostParams::default(), &op)
        .await
        .expect("created");
    scops
        .patch_status(
            "roll",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"phase": "Running", "step": {"state": "CheckingPeers"}}}),
            ),
        )
        .await
        .expect("Running");
    scops
}

#[tokio::test]
async fn draining_holds_while_an_operation_on_storage_runs_and_never_cancels_it() {
    let (h, _cp) = installed("cpops-drain").await;
    let scops = running_storage_operation(&h).await;
    create(&h, "up", "Upgrade", json!({"upgrade": {"image": NEXT}})).await;
    let held = until("the upgrade held in Draining", async || {
        let s = operations(&h).get("up").await.ok()?.status?;
        (s.step.state.as_deref() == Some("Draining")
            && s.message
                .as_deref()
                .is_some_and(|m| m.starts_with("waiting for")))
        .then_some(s)
    })
    .await;
    assert_eq!(
        held.message.as_deref(),
        Some(
            format!(
                "waiting for 1 operation(s) in flight to end: StorageClusterOps {}/roll",
                h.ns
            )
            .as_str()
        )
    );
    passes(&h.ctx.metrics, ops::CONTROLLER, &h.ns, "up", 2).await;
    let s = operations(&h)
        .get("up")
        .await
        .expect("op")
        .status
        .expect("s");
    assert_eq!(s.step.state.as_deref(), Some("Draining"));
    assert_eq!(
        crate::support::occurrences(&h.kube, &h.ns, "up", "OperationsInFlight").await,
        1
    );
    // Untouched: still Running, not asked to abort.
    let roll = scops.get("roll").await.expect("roll");
    assert_eq!(roll.status.expect("s").phase, OpsPhase::Running);
    assert!(!roll.spec.abort);
    assert_eq!(
        h.cps()
            .get("simplyblock")
            .await
            .expect("cp")
            .metadata
            .generation,
        Some(1)
    );

    scops
        .patch_status(
            "roll",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .expect("ended");
    let (phase, message) = phase_and_message(&finished(&h, "up").await);
    assert_eq!(phase, OpsPhase::Succeeded, "{message}");
}

#[tokio::test]
async fn a_restart_of_a_component_that_is_not_essential_skips_draining() {
    let (h, _cp) = installed("cpops-restart").await;
    let _scops = running_storage_operation(&h).await;
    create(
        &h,
        "restart",
        "Restart",
        json!({"restart": {"components": ["simplyblock-minio"]}}),
    )
    .await;
    let op = finished(&h, "restart").await;
    let (phase, message) = phase_and_message(&op);
    assert_eq!(phase, OpsPhase::Succeeded, "{message}");
    let started = op
        .status
        .and_then(|s| s.started_at)
        .expect("started")
        .0
        .to_string();
    let template = |annotations: Option<std::collections::BTreeMap<String, String>>| {
        annotations.and_then(|a| a.get(RESTARTED_AT_ANNOTATION).cloned())
    };
    let store = Api::<StatefulSet>::namespaced(h.kube.clone(), &h.ns)
        .get("simplyblock-minio")
        .await
        .expect("sts");
    assert_eq!(
        template(store.spec.template.metadata.and_then(|m| m.annotations)),
        Some(started)
    );
    let api = Api::<Deployment>::namespaced(h.kube.clone(), &h.ns)
        .get("simplyblock-webappapi")
        .await
        .expect("deployment");
    assert_eq!(
        template(api.spec.template.metadata.and_then(|m| m.annotations)),
        None
    );
    assert_eq!(
        crate::support::occurrences(&h.kube, &h.ns, "restart", "OperationsInFlight").await,
        0
    );
}

#[tokio::test]
async fn a_backup_creates_its_foundationdb_backup_and_waits_for_a_snapshot() {
    let (h, _cp) = installed("cpops-backup").await;
    create(
        &h,
        "backup",
        "Backup",
        json!({"backup": {"blobStore": "blobstore://backup@s3.example:443/nightly?bucket=fdb"}}),
    )
    .await;
    let op = finished(&h, "backup").await;
    let (phase, message) = phase_and_message(&op);
    assert_eq!(phase, OpsPhase::Succeeded, "{message}");
    assert!(message.contains("reports a snapshot"), "{message}");
    assert_eq!(
        op.status.and_then(|s| s.backup_ref).as_deref(),
        Some("simplyblock")
    );
    let backups: Api<DynamicObject> =
        Api::namespaced_with(h.kube.clone(), &h.ns, &ops::backup_resource());
    let backup = backups
        .get("simplyblock")
        .await
        .expect("the FoundationDBBackup");
    assert_eq!(
        backup
            .annotations()
            .get(BACKUP_REQUESTED_BY_ANNOTATION)
            .map(String::as_str),
        Some("backup")
    );
    assert_eq!(
        backup.data["spec"]["clusterName"],
        "simplyblock-fdb-cluster"
    );
    assert_eq!(
        backup.data["spec"]["blobStoreConfiguration"]["accountName"],
        "backup@s3.example:443"
    );
    assert!(
        backup.owner_references().is_empty(),
        "the operation does not own it"
    );
    assert_eq!(
        crate::support::occurrences(&h.kube, &h.ns, "backup", "BackupRequested").await,
        1
    );
}

fn refused<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            s.message
        }
        other => panic!("not refused: {other:?}"),
    }
}

#[tokio::test]
async fn the_webhook_refuses_an_operation_on_a_missing_or_managed_control_plane() {
    let h = harness("cpops-webhook").await;
    let no_target = operations(&h)
        .create(
            &PostParams::default(),
            &operation("r", "Restart", json!({})),
        )
        .await;
    assert!(refused(no_target).contains("does not exist in namespace cpops-webhook"));

    h.create(json!({"managed": {"endpoint": crate::support::MANAGED_TLS_ENDPOINT}}))
        .await;
    let managed = operations(&h)
        .create(
            &PostParams::default(),
            &operation("r", "Restart", json!({})),
        )
        .await;
    assert!(refused(managed).contains("is managed"));
}

#[tokio::test]
async fn a_delete_is_refused_while_the_upgrade_awaits_its_rollout() {
    let (h, cp) = installed("cpops-guard").await;
    // Without the ControlPlane controller the new image is written but never rolled out:
    // the upgrade waits in Awaiting, a step that cannot be aborted.
    cp.abort();
    let _ = cp.await;
    create(&h, "up", "Upgrade", json!({"upgrade": {"image": NEXT}})).await;
    until("the upgrade awaiting its rollout", async || {
        let s = operations(&h).get("up").await.ok()?.status?;
        (s.step.state.as_deref() == Some("Awaiting")).then_some(())
    })
    .await;
    let message = refused(operations(&h).delete("up", &DeleteParams::default()).await);
    assert!(message.contains("step Awaiting"), "{message}");
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    refused(operations(&h).delete("up", &force).await);

    let _cp = tokio::spawn(controller::run(h.ctx.clone()));
    let (phase, message) = phase_and_message(&finished(&h, "up").await);
    assert_eq!(phase, OpsPhase::Succeeded, "{message}");
    assert!(message.contains("unverified"), "{message}");
    operations(&h)
        .delete("up", &DeleteParams::default())
        .await
        .expect("deleted once it ended");
    until("the operation gone", async || {
        operations(&h)
            .get_opt("up")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        h.cps()
            .get("simplyblock")
            .await
            .expect("cp")
            .meta()
            .deletion_timestamp
            .is_none()
    );
}

/// The operator killed right after each operation's call, before it records the call:
/// restarted, it finds the effect there and asks for nothing again. Each call is counted
/// by the API server (a restart is a PATCH of each workload, an upgrade a PATCH of the
/// ControlPlane, a backup an APPLY of its FoundationDBBackup).
#[tokio::test]
async fn a_kill_after_each_call_of_an_operation_repeats_none() {
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};

    use simplyblock_testenv::standin::StandIn;

    use crate::controlplane::{control_plane, requests};
    use crate::support::free_port;

    const SIGABRT: i32 = 6;
    let ns = "cpops-crash";
    let (env, kube) = crate::support::own_api_server(ns).await;
    env.install_crds(&crate::controlplane::components_crds())
        .await
        .expect("the FoundationDB and cert-manager CRDs");
    let _standin = StandIn::start(kube.clone(), Some(ns.into()));
    let sim = crate::support::sbsim("", 0).await;
    let _tls = crate::support::local_control_plane_tls(&kube, ns, &sim.server);
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, crate::support::TOKEN).expect("token");
    let operator = |crash_after: &str| {
        crate::support::operator_command(&env, sim.server.addr, &token_file, ns)
            .arg(format!("--metrics-addr=127.0.0.1:{}", free_port()))
            .env(simplyblock_operator::runtime::crash::ENV, crash_after)
            .spawn()
            .expect("the operator starts")
    };
    let cps: Api<simplyblock_api::ControlPlane> = Api::namespaced(kube.clone(), ns);
    cps.create(&PostParams::default(), &control_plane(local()))
        .await
        .expect("created");
    let operations: Api<ControlPlaneOps> = Api::namespaced(kube.clone(), ns);
    // The upgrade is verified against the version sbsim reports.
    let r = sim
        .cp
        .raw(
            Method::PUT,
            "/../../_sim/version",
            &[],
            Some(&json!({"version": "25.10.2"})),
        )
        .await
        .expect("sbsim");
    assert!(r.status < 300);
    // Installed first, by an operator that is then stopped: no pass runs while the counts
    // before each operation are read.
    let mut installer = operator("");
    until("the control plane Available", async || {
        let s = cps.get("simplyblock").await.ok()?.status?;
        (s.phase == ControlPlanePhase::Available).then_some(())
    })
    .await;
    installer.kill().expect("kill");
    installer.wait().expect("reaped");
    let generation = async |kind: &str, name: &str| -> i64 {
        let api: Api<DynamicObject> = Api::namespaced_with(
            kube.clone(),
            ns,
            &match kind {
                "Deployment" => kube::discovery::ApiResource::erase::<Deployment>(&()),
                "StatefulSet" => kube::discovery::ApiResource::erase::<StatefulSet>(&()),
                _ => kube::discovery::ApiResource::erase::<simplyblock_api::ControlPlane>(&()),
            },
        );
        api.get(name)
            .await
            .expect("the object")
            .metadata
            .generation
            .unwrap_or_default()
    };

    for (name, action, extra, step, counted) in [
        (
            "restart",
            "Restart",
            json!({"restart": {"components": ["simplyblock-webappapi", "simplyblock-minio"]}}),
            "Restarting",
            vec![("PATCH", "deployments"), ("PATCH", "statefulsets")],
        ),
        (
            "upgrade",
            "Upgrade",
            json!({"upgrade": {"image": NEXT}}),
            "Applying",
            vec![("PATCH", "controlplanes")],
        ),
        (
            "backup",
            "Backup",
            json!({"backup": {"blobStore": "blobstore://backup@s3.example:443/nightly?bucket=fdb"}}),
            "Requesting",
            vec![("APPLY", "foundationdbbackups")],
        ),
    ] {
        let point =
            simplyblock_operator::runtime::crash::ops_point("ControlPlaneOps", action, step);
        let before = (
            requests(&kube, "PATCH").await,
            requests(&kube, "APPLY").await,
            generation("Deployment", "simplyblock-webappapi").await,
            generation("StatefulSet", "simplyblock-minio").await,
            generation("ControlPlane", "simplyblock").await,
        );
        // Admitted by the armed operator's webhook once it serves.
        let mut armed = operator(&point);
        let op = operation(name, action, extra);
        until(&format!("{name} admitted"), async || {
            match operations.create(&PostParams::default(), &op).await {
                Ok(_) => Some(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Some(()),
                Err(_) => None,
            }
        })
        .await;
        let start = Instant::now();
        let ended = loop {
            if let Some(status) = armed.try_wait().expect("the operator process") {
                break status;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "the operator never reached {point}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(ended.signal(), Some(SIGABRT), "armed at {point}: {ended}");
        let stored = operations
            .get(name)
            .await
            .expect("op")
            .status
            .expect("status");
        assert_eq!(
            stored.step.state.as_deref(),
            Some(step),
            "killed at {point}, the step moved on"
        );

        let mut unarmed = operator("");
        let last = std::sync::Mutex::new(None);
        let op = until_explained(
            &format!("{name} to finish after the kill"),
            PATIENCE,
            async || {
                let op = operations.get(name).await.ok()?;
                *last.lock().expect("lock") = op.status.clone();
                op.status
                    .as_ref()
                    .is_some_and(|s| s.phase.is_terminal())
                    .then_some(op)
            },
            || format!("last seen {:?}", last.lock().expect("lock")),
        )
        .await;
        // Every pass that could repeat the call has ended before the counts are read:
        // the lock on the ControlPlane is released after the terminal write.
        until("the lock released", async || {
            let cp = cps.get("simplyblock").await.ok()?;
            cp.status?.active_ops_ref.is_none().then_some(())
        })
        .await;
        unarmed.kill().expect("kill");
        unarmed.wait().expect("reaped");
        let (phase, message) = phase_and_message(&op);
        assert_eq!(phase, OpsPhase::Succeeded, "{name}: {message}");

        let after = (
            requests(&kube, "PATCH").await,
            requests(&kube, "APPLY").await,
        );
        for (verb, resource) in counted {
            let (was, is) = if verb == "PATCH" {
                (&before.0, &after.0)
            } else {
                (&before.1, &after.1)
            };
            let delta = is.get(resource).copied().unwrap_or(0.0)
                - was.get(resource).copied().unwrap_or(0.0);
            assert_eq!(
                delta, 1.0,
                "{name}: {verb} {resource} after the kill at {point}"
            );
        }
        // A restart or an upgrade changes each workload's template once.
        let changed = |was: i64, kind: &str, is: i64| {
            let expected = match (name, kind) {
                ("restart", "Deployment" | "StatefulSet") => 1,
                ("upgrade", "Deployment" | "ControlPlane") => 1,
                _ => 0,
            };
            assert_eq!(is - was, expected, "{name}: the generation of the {kind}");
        };
        changed(
            before.2,
            "Deployment",
            generation("Deployment", "simplyblock-webappapi").await,
        );
        changed(
            before.3,
            "StatefulSet",
            generation("StatefulSet", "simplyblock-minio").await,
        );
        changed(
            before.4,
            "ControlPlane",
            generation("ControlPlane", "simplyblock").await,
        );
    }
}

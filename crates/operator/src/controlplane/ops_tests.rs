//! The ControlPlaneOps steps' plans over observations, without an API server or a control
//! plane.

use serde_json::json;

use super::*;
use ControlPlaneOpsStep::*;
use simplyblock_api::control_plane_ops::GRAPHS;

const OLD: &str = "quay.io/simplyblock-io/simplyblock:25.10.1";
const NEW: &str = "quay.io/simplyblock-io/simplyblock:25.10.2";
const STARTED: &str = "2026-01-01T00:00:00Z";

fn op(action: &str, step: &str, spec: serde_json::Value) -> ControlPlaneOps {
    let mut full = json!({"controlPlaneRef": "simplyblock", "action": action});
    full.as_object_mut()
        .expect("object")
        .extend(spec.as_object().cloned().unwrap_or_default());
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "ControlPlaneOps",
        "metadata": {"name": "op", "namespace": "sb"},
        "spec": full,
        "status": {"phase": "Running", "step": {"state": step}, "startedAt": STARTED},
    }))
    .expect("op")
}

fn target(phase: &str) -> ControlPlane {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "ControlPlane",
        "metadata": {"name": "simplyblock", "namespace": "sb"},
        "spec": {"source": {"local": {"image": OLD}}},
        "status": {"phase": phase},
    }))
    .expect("control plane")
}

fn managed() -> ControlPlane {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "ControlPlane",
        "metadata": {"name": "simplyblock", "namespace": "sb"},
        "spec": {"source": {"managed": {"endpoint": "https://cp.example"}}},
    }))
    .expect("control plane")
}

fn rolled(image: &str, restarted_at: Option<&str>) -> Rollout {
    Rollout {
        desired: 2,
        updated: 2,
        ready: 2,
        observed: true,
        restarted_at: restarted_at.map(str::to_owned),
        image: Some(image.into()),
    }
}

/// Every workload of the control plane, each `restarted_at`.
fn every(restarted_at: Option<&str>) -> BTreeMap<String, Rollout> {
    DEPLOYMENTS
        .iter()
        .map(|d| (d.to_string(), rolled(OLD, restarted_at)))
        .chain([(OBJECT_STORE.to_owned(), rolled("minio", restarted_at))])
        .collect()
}

fn answered(version: Option<&str>) -> Option<Probe> {
    Some(Probe::Asked {
        ready: Ok(()),
        version: version.map(str::to_owned),
    })
}

fn plan_of(
    op: &ControlPlaneOps,
    target: &ControlPlane,
    obs: &Observed,
) -> Plan<ControlPlaneOpsStep, Call, Fields> {
    let step = op
        .status
        .as_ref()
        .and_then(|s| s.step.state.clone())
        .expect("step");
    let step = GRAPHS
        .declared_states()
        .into_iter()
        .find(|s| simplyblock_statemachine::State::name(*s) == step)
        .expect("a declared step");
    plan(op, target, step, obs).plan
}

fn stamp() -> String {
    STARTED.parse::<Timestamp>().expect("ts").to_string()
}

#[test]
fn restart_drains_only_for_the_whole_control_plane_or_an_essential_component() {
    let busy = Observed {
        in_flight: vec!["StorageClusterOps sb/roll".into()],
        ..Observed::default()
    };
    let cases = [
        (json!({}), true),
        (json!({"restart": {"components": [API]}}), true),
        (json!({"restart": {"components": [OBJECT_STORE]}}), false),
    ];
    for (spec, drained) in cases {
        let o = op("Restart", "Draining", spec.clone());
        assert_eq!(drains(&o), drained, "{spec}");
        let p = plan_of(&o, &target("Available"), &busy);
        if drained {
            assert!(
                matches!(&p, Plan::Wait { event: Some(reason::IN_FLIGHT), message, .. } if message.contains("StorageClusterOps sb/roll")),
                "{spec}: {p:?}"
            );
        } else {
            assert!(
                matches!(&p, Plan::Advance { to: Move::To(Restarting), message, .. } if message.contains("nothing to drain")),
                "{spec}: {p:?}"
            );
        }
    }
    let idle = plan_of(
        &op("Restart", "Draining", json!({})),
        &target("Available"),
        &Observed::default(),
    );
    assert!(
        matches!(
            idle,
            Plan::Advance {
                to: Move::To(Restarting),
                ..
            }
        ),
        "{idle:?}"
    );
}

#[test]
fn restarting_stamps_each_workload_once_with_the_operations_start() {
    let o = op("Restart", "Restarting", json!({}));
    let fresh = Observed {
        workloads: every(None),
        ..Observed::default()
    };
    assert_eq!(
        plan_of(&o, &target("Available"), &fresh),
        Plan::Call {
            call: Call::Restart {
                workloads: DEPLOYMENTS
                    .iter()
                    .map(|d| (WorkloadKind::Deployment, d.to_string()))
                    .chain([(WorkloadKind::StatefulSet, OBJECT_STORE.into())])
                    .collect(),
                stamp: stamp(),
            },
            message: format!("restarting {}, {OBJECT_STORE}", DEPLOYMENTS.join(", ")),
        }
    );
    // All but one stamped already (a pass killed halfway): only the other.
    let mut half = every(Some(&stamp()));
    half.get_mut(OBJECT_STORE).expect("store").restarted_at = None;
    let p = plan_of(
        &o,
        &target("Available"),
        &Observed {
            workloads: half,
            ..Observed::default()
        },
    );
    assert!(
        matches!(&p, Plan::Call { call: Call::Restart { workloads, .. }, .. } if workloads == &[(WorkloadKind::StatefulSet, OBJECT_STORE.to_owned())]),
        "{p:?}"
    );
    // All stamped: the restart is asked; nothing is called again.
    let done = Observed {
        workloads: every(Some(&stamp())),
        ..Observed::default()
    };
    assert!(matches!(
        plan_of(&o, &target("Available"), &done),
        Plan::Advance {
            to: Move::To(Awaiting),
            ..
        }
    ));
}

#[test]
fn restart_refuses_what_it_cannot_restart() {
    for (components, says) in [
        (json!([FDB_CLUSTER]), "FoundationDB operator"),
        (json!(["simplyblock-nothing"]), "not a component"),
    ] {
        let o = op(
            "Restart",
            "Draining",
            json!({"restart": {"components": components}}),
        );
        let p = plan_of(&o, &target("Available"), &Observed::default());
        assert!(matches!(&p, Plan::Fail(m) if m.contains(says)), "{p:?}");
    }
}

#[test]
fn restart_awaits_the_rollout_and_the_api() {
    let o = op("Restart", "Awaiting", json!({}));
    let mut rolling = every(Some(&stamp()));
    rolling.get_mut(OBJECT_STORE).expect("store").ready = 0;
    let p = plan_of(
        &o,
        &target("Available"),
        &Observed {
            workloads: rolling,
            probe: answered(None),
            ..Observed::default()
        },
    );
    assert!(
        matches!(&p, Plan::Wait { message, .. } if message.contains("simplyblock-minio: 2 of 2 updated, 0 ready")),
        "{p:?}"
    );
    let unanswered = Observed {
        workloads: every(Some(&stamp())),
        probe: Some(Probe::Asked {
            ready: Err("503".into()),
            version: None,
        }),
        ..Observed::default()
    };
    assert!(matches!(
        plan_of(&o, &target("Available"), &unanswered),
        Plan::Wait { .. }
    ));
    let done = Observed {
        workloads: every(Some(&stamp())),
        probe: answered(None),
        ..Observed::default()
    };
    assert!(matches!(
        plan_of(&o, &target("Available"), &done),
        Plan::Succeed { .. }
    ));
}

#[test]
fn preflight_refuses_the_running_image_and_waits_for_available() {
    let same = op("Upgrade", "Preflight", json!({"upgrade": {"image": OLD}}));
    let p = plan_of(&same, &target("Available"), &Observed::default());
    assert!(
        matches!(&p, Plan::Fail(m) if m.contains("already runs")),
        "{p:?}"
    );
    let o = op("Upgrade", "Preflight", json!({"upgrade": {"image": NEW}}));
    assert!(matches!(
        plan_of(&o, &target("Degraded"), &Observed::default()),
        Plan::Wait { .. }
    ));
    assert!(matches!(
        plan_of(&o, &target("Available"), &Observed::default()),
        Plan::Advance {
            to: Move::To(Draining),
            ..
        }
    ));
    let p = plan_of(&o, &managed(), &Observed::default());
    assert!(
        matches!(&p, Plan::Fail(m) if m.contains("is managed")),
        "{p:?}"
    );
}

#[test]
fn applying_writes_the_image_once() {
    let o = op("Upgrade", "Applying", json!({"upgrade": {"image": NEW}}));
    assert_eq!(
        plan_of(&o, &target("Available"), &Observed::default()),
        Plan::Call {
            call: Call::SetImage(NEW.into()),
            message: format!("writing {NEW} into spec.source.local.image"),
        }
    );
    let mut written = target("Available");
    written.spec.source.local.as_mut().expect("local").image = NEW.into();
    assert!(matches!(
        plan_of(&o, &written, &Observed::default()),
        Plan::Advance {
            to: Move::To(Awaiting),
            ..
        }
    ));
}

#[test]
fn awaiting_an_upgrade_wants_the_new_image_rolled_out_and_answering() {
    let o = op("Upgrade", "Awaiting", json!({"upgrade": {"image": NEW}}));
    let old = Observed {
        workloads: BTreeMap::from([(API.to_owned(), rolled(OLD, None))]),
        probe: answered(None),
        ..Observed::default()
    };
    assert!(
        matches!(plan_of(&o, &target("Available"), &old), Plan::Wait { message, .. } if message.contains("to run"))
    );
    let new = Observed {
        workloads: BTreeMap::from([(API.to_owned(), rolled(NEW, None))]),
        probe: answered(None),
        ..Observed::default()
    };
    assert!(matches!(
        plan_of(&o, &target("Available"), &new),
        Plan::Advance {
            to: Move::To(Verifying),
            ..
        }
    ));
}

#[test]
fn verifying_compares_the_reported_version_with_the_tag() {
    let o = op("Upgrade", "Verifying", json!({"upgrade": {"image": NEW}}));
    let with = |v: Option<&str>| Observed {
        probe: answered(v),
        ..Observed::default()
    };
    let ok = plan(&o, &target("Available"), Verifying, &with(Some("25.10.2")));
    assert!(
        matches!(&ok.plan, Plan::Succeed { message, .. } if message.ends_with("reports version 25.10.2")),
        "{ok:?}"
    );
    assert!(ok.notes.is_empty());
    let v = plan(&o, &target("Available"), Verifying, &with(Some("v25.10.2")));
    assert!(matches!(v.plan, Plan::Succeed { .. }));
    let mismatch = plan(&o, &target("Available"), Verifying, &with(Some("25.10.1")));
    assert!(
        matches!(&mismatch.plan, Plan::Fail(m) if m.starts_with("VersionMismatch: ")),
        "{mismatch:?}"
    );
    assert_eq!(mismatch.notes.len(), 1);
    assert_eq!(mismatch.notes[0].reason, reason::VERSION_MISMATCH);
    let unverified = plan(&o, &target("Available"), Verifying, &with(None));
    assert!(
        matches!(&unverified.plan, Plan::Succeed { message, .. } if message.contains("unverified")),
        "{unverified:?}"
    );
}

#[test]
fn image_tags_are_read_past_registries_with_ports_and_digests() {
    assert_eq!(image_tag(NEW), Some("25.10.2"));
    assert_eq!(image_tag("registry:5000/simplyblock:1.2"), Some("1.2"));
    let digest = format!("{NEW}@sha256:{}", "a".repeat(64));
    assert_eq!(image_tag(&digest), Some("25.10.2"));
    assert_eq!(image_tag("registry:5000/simplyblock"), None);
}

#[test]
fn blob_store_urls_become_the_backups_configuration() {
    let read =
        blob_store("blobstore://backup@s3.example:443/nightly?bucket=fdb&sc=1").expect("read");
    assert_eq!(
        read,
        BlobStore {
            account_name: "backup@s3.example:443".into(),
            bucket: Some("fdb".into()),
            backup_name: Some("nightly".into()),
            url_parameters: vec!["sc=1".into()],
        }
    );
    assert!(
        blob_store("https://s3.example/b")
            .expect_err("scheme")
            .contains("blobstore://")
    );
    assert!(
        blob_store("blobstore://k:secret@s3.example/b")
            .expect_err("secret")
            .contains("without the secret")
    );
    assert!(blob_store("not a url").is_err());
}

#[test]
fn a_backup_is_created_or_triggered_once_then_awaited_to_a_snapshot() {
    let spec = json!({"backup": {"blobStore": "blobstore://k@s3.example:443/b?bucket=fdb"}});
    let o = op("Backup", "Requesting", spec.clone());
    let create = plan(&o, &target("Available"), Requesting, &Observed::default());
    assert!(
        matches!(&create.plan, Plan::Call { call: Call::RequestBackup { name, .. }, .. } if name == DEFAULT_BACKUP_NAME),
        "{create:?}"
    );
    assert_eq!(create.notes[0].reason, reason::BACKUP_REQUESTED);
    let someone_elses = Observed {
        backup: Some(BackupView {
            requested_by: Some("nightly".into()),
            snapshot_time: Some(1),
        }),
        ..Observed::default()
    };
    let trigger = plan(&o, &target("Available"), Requesting, &someone_elses);
    assert!(matches!(trigger.plan, Plan::Call { .. }));
    assert_eq!(trigger.notes[0].reason, reason::BACKUP_TRIGGERED);
    let mine = Observed {
        backup: Some(BackupView {
            requested_by: Some("op".into()),
            snapshot_time: None,
        }),
        ..Observed::default()
    };
    let asked = plan(&o, &target("Available"), Requesting, &mine);
    assert!(
        matches!(&asked.plan, Plan::Advance { to: Move::To(Awaiting), kind_status: Some(k), .. } if k.backup_ref.as_deref() == Some("simplyblock")),
        "{asked:?}"
    );

    let o = op("Backup", "Awaiting", spec);
    let started = STARTED.parse::<Timestamp>().expect("ts").as_second();
    let at = |t: Option<i64>| Observed {
        backup: Some(BackupView {
            requested_by: Some("op".into()),
            snapshot_time: t,
        }),
        ..Observed::default()
    };
    assert!(matches!(
        plan_of(&o, &target("Available"), &at(None)),
        Plan::Wait { .. }
    ));
    assert!(
        matches!(
            plan_of(&o, &target("Available"), &at(Some(started - 60))),
            Plan::Wait { .. }
        ),
        "an older snapshot is not this backup's"
    );
    assert!(matches!(
        plan_of(&o, &target("Available"), &at(Some(started))),
        Plan::Succeed { .. }
    ));
}

#[test]
fn the_backup_object_names_the_cluster_and_who_asked() {
    let blob = blob_store("blobstore://k@s3.example:443/?bucket=fdb").expect("read");
    let object = backup_object("simplyblock", &blob, "op");
    assert_eq!(object["spec"]["clusterName"], FDB_CLUSTER);
    assert_eq!(object["spec"]["backupState"], "Running");
    assert_eq!(
        object["spec"]["blobStoreConfiguration"]["backupName"],
        "simplyblock"
    );
    assert_eq!(
        object["metadata"]["annotations"][BACKUP_REQUESTED_BY_ANNOTATION],
        "op"
    );
}

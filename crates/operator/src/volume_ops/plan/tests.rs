//! The decisions of a volume operation, without an API server.

use simplyblock_api::persistent_volume_ops::{
    MigrationStatus, PersistentVolumeOpsStatus, ValidationJob,
};

use super::*;

fn op(phase: OpsPhase, migration: Option<MigrationStatus>, abort: bool) -> PersistentVolumeOps {
    let mut op: PersistentVolumeOps = serde_json::from_value(serde_json::json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "PersistentVolumeOps",
        "metadata": {"name": "move"},
        "spec": {"persistentVolumeName": "pv-a", "action": "Migrate", "abort": abort,
                 "migrate": {"targetNodeRef": {"namespace": "sb", "name": "n2"}}},
    }))
    .expect("op");
    op.status = Some(PersistentVolumeOpsStatus {
        phase,
        migration,
        ..Default::default()
    });
    op
}

fn record() -> MigrationStatus {
    MigrationStatus {
        cluster_uuid: Some("c".into()),
        subsystem_nqn: Some("nqn.x".into()),
        target_node_uuid: Some("t".into()),
        source_node_uuid: Some("s".into()),
        member_count: Some(2),
        ..Default::default()
    }
}

fn obs() -> Observation {
    Observation {
        volume_present: true,
        unresolvable: None,
        target: Ok("t".into()),
        record: record(),
        member_nodes: vec!["s".into(), "s".into()],
        lock: LockPlan::Held,
        backend: None,
        foreign: None,
        consumers: Vec::new(),
        jobs: BTreeMap::new(),
        job_names: BTreeMap::new(),
        job_namespace: "sys".into(),
    }
}

fn backend(status: &str, phase: &str) -> Backend {
    Backend {
        id: "m".into(),
        phase: phase.into(),
        status: status.into(),
        error: String::new(),
    }
}

fn with_migration() -> MigrationStatus {
    MigrationStatus {
        migration_uuid: Some("m".into()),
        ..record()
    }
}

#[test]
fn a_pending_operation_takes_the_lock_then_starts() {
    let o = op(OpsPhase::Pending, None, false);
    let mut w = obs();
    w.lock = LockPlan::Acquire(vec!["pv-a".into()]);
    assert!(matches!(
        gate(&o, &w),
        Some(Decision::Call {
            call: Call::Acquire(_),
            ..
        })
    ));
    w.lock = LockPlan::Held;
    assert_eq!(gate(&o, &w), Some(Decision::Start));
    w.lock = LockPlan::Queue("other".into());
    assert!(matches!(
        gate(&o, &w),
        Some(Decision::Wait { deferred: true, .. })
    ));
}

#[test]
fn a_volume_gone_fails_a_pending_operation_and_aborts_a_running_one_cancelling_its_copy() {
    let mut w = obs();
    w.volume_present = false;
    assert!(matches!(
        gate(&op(OpsPhase::Pending, None, false), &w),
        Some(Decision::Finish {
            phase: OpsPhase::Failed,
            cancel: false,
            ..
        })
    ));
    w.backend = Some(backend("running", "snap_copy"));
    assert!(matches!(
        gate(&op(OpsPhase::Running, Some(with_migration()), false), &w),
        Some(Decision::Finish {
            phase: OpsPhase::Aborted,
            cancel: true,
            ..
        })
    ));
}

#[test]
fn every_member_on_the_target_succeeds_without_a_call_and_some_waits() {
    let o = op(OpsPhase::Running, Some(record()), false);
    let mut w = obs();
    w.member_nodes = vec!["t".into(), "t".into()];
    let Decision::Finish {
        phase,
        message,
        reason,
        ..
    } = step(&o, VolumeOpsStep::Validating, &w)
    else {
        panic!("not finished");
    };
    assert_eq!(phase, OpsPhase::Succeeded);
    assert_eq!(reason, Some("TargetNodeIsSource"));
    assert!(message.starts_with("TargetNodeIsSource"), "{message}");
    w.member_nodes = vec!["t".into(), "s".into()];
    assert!(matches!(
        step(&o, VolumeOpsStep::Validating, &w),
        Decision::Wait {
            deferred: false,
            ..
        }
    ));
}

#[test]
fn the_record_is_written_before_the_migration_is_created() {
    let w = obs();
    assert!(matches!(
        step(
            &op(OpsPhase::Running, None, false),
            VolumeOpsStep::Validating,
            &w
        ),
        Decision::Record { .. }
    ));
    assert_eq!(
        step(
            &op(OpsPhase::Running, Some(record()), false),
            VolumeOpsStep::Validating,
            &w
        ),
        Decision::Call {
            call: Call::CreateMigration,
            message: "pre-creating the migration of subsystem nqn.x to node t".into()
        }
    );
}

#[test]
fn each_consuming_node_gets_a_job_recorded_then_started_then_awaited() {
    let mut w = obs();
    w.backend = Some(backend("new", "pre_created"));
    w.record = with_migration();
    w.consumers = vec!["k1".into()];
    w.job_names.insert("k1".into(), "move-reach-k1".into());
    let o = op(OpsPhase::Running, Some(with_migration()), false);
    let Decision::Record { record, .. } = step(&o, VolumeOpsStep::Validating, &w) else {
        panic!("the Job is recorded first");
    };
    assert_eq!(
        record.validation_jobs,
        [ValidationJob {
            namespace: "sys".into(),
            name: "move-reach-k1".into(),
            node: Some("k1".into()),
            succeeded: false
        }]
    );
    let o = op(OpsPhase::Running, Some(record.clone()), false);
    w.record = record.clone();
    assert!(matches!(
        step(&o, VolumeOpsStep::Validating, &w),
        Decision::Call {
            call: Call::CreateJobs(_),
            ..
        }
    ));
    w.jobs.insert("move-reach-k1".into(), JobState::Running);
    assert!(matches!(
        step(&o, VolumeOpsStep::Validating, &w),
        Decision::Wait { .. }
    ));
    w.jobs.insert("move-reach-k1".into(), JobState::Failed);
    assert!(matches!(
        step(&o, VolumeOpsStep::Validating, &w),
        Decision::Finish {
            phase: OpsPhase::Failed,
            cancel: true,
            ..
        }
    ));
    w.jobs.insert("move-reach-k1".into(), JobState::Succeeded);
    let Decision::Record { record: passed, .. } = step(&o, VolumeOpsStep::Validating, &w) else {
        panic!("the success is recorded");
    };
    assert!(passed.validation_jobs[0].succeeded);
    let o = op(OpsPhase::Running, Some(passed.clone()), false);
    w.record = passed;
    assert!(matches!(
        step(&o, VolumeOpsStep::Validating, &w),
        Decision::Advance {
            to: VolumeOpsStep::Migrating,
            ..
        }
    ));
}

#[test]
fn continue_is_sent_once_and_completion_is_the_control_planes_word() {
    let mut w = obs();
    w.record = with_migration();
    w.backend = Some(backend("new", "pre_created"));
    let o = op(OpsPhase::Running, Some(with_migration()), false);
    assert!(matches!(
        step(&o, VolumeOpsStep::Migrating, &w),
        Decision::ContinueOnce { .. }
    ));
    // Recorded: never again, even while the control plane still says pre_created.
    let continued = MigrationStatus {
        continued_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        )),
        ..with_migration()
    };
    let o = op(OpsPhase::Running, Some(continued), false);
    assert!(matches!(
        step(&o, VolumeOpsStep::Migrating, &w),
        Decision::Wait { .. }
    ));
    w.backend = Some(backend("running", "cleanup_source"));
    assert!(matches!(
        step(&o, VolumeOpsStep::Migrating, &w),
        Decision::Wait { .. }
    ));
    w.backend = Some(backend("done", "completed"));
    assert!(matches!(
        step(&o, VolumeOpsStep::Migrating, &w),
        Decision::Advance {
            to: VolumeOpsStep::Verifying,
            ..
        }
    ));
    w.backend = Some(backend("failed", "cleanup_target"));
    assert!(matches!(
        step(&o, VolumeOpsStep::Migrating, &w),
        Decision::Finish {
            phase: OpsPhase::Failed,
            ..
        }
    ));
}

#[test]
fn verifying_deletes_the_jobs_then_succeeds() {
    let mut w = obs();
    w.jobs.insert("move-reach-k1".into(), JobState::Succeeded);
    let o = op(OpsPhase::Running, Some(with_migration()), false);
    assert_eq!(
        step(&o, VolumeOpsStep::Verifying, &w),
        Decision::Call {
            call: Call::DeleteJobs(vec!["move-reach-k1".into()]),
            message: "deleting validation Jobs move-reach-k1".into()
        }
    );
    w.jobs.insert("move-reach-k1".into(), JobState::Missing);
    assert!(matches!(
        step(&o, VolumeOpsStep::Verifying, &w),
        Decision::Finish {
            phase: OpsPhase::Succeeded,
            ..
        }
    ));
}

#[test]
fn a_running_operation_whose_lock_was_taken_by_another_stops() {
    let mut w = obs();
    w.lock = LockPlan::Queue("other".into());
    assert!(matches!(
        gate(&op(OpsPhase::Running, None, false), &w),
        Some(Decision::Finish {
            phase: OpsPhase::Aborted,
            ..
        })
    ));
}

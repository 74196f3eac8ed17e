//! The creation machine's plans over observations, without an API server or a control
//! plane: given this step and this observation, the next thing is that.

use std::time::Duration;

use CreationStep::*;
use simplyblock_controlplane::{ClusterStatus, Uuid};

use super::*;

fn now() -> Timestamp {
    Timestamp::from_second(1_000_000).expect("ts")
}

fn id(n: u128) -> Identity {
    Identity {
        uuid: Uuid::from_u128(n),
        secret: format!("secret-{n}"),
    }
}

fn body() -> ClusterCreate {
    ClusterCreate::new("sb", 10, 4)
}

fn hugepages() -> ConfigError {
    ConfigError::HugePages("lots".into())
}

fn stored(message: Option<&str>) -> StorageClusterStatus {
    StorageClusterStatus {
        phase: ClusterPhase::Creating,
        message: message.map(str::to_owned),
        ..StorageClusterStatus::default()
    }
}

fn plan_of(step: CreationStep, obs: Observation) -> CreationPlan {
    plan(step, &stored(None), &obs)
}

fn advanced(to: CreationStep) -> CreationPlan {
    Plan::Advance {
        to: Move::To(to),
        message: format!("creation step {}", to.name()),
        kind_status: None,
    }
}

fn recorded(n: u128, to: CreationStep, adopted: bool) -> CreationPlan {
    Plan::Call {
        call: CreationCall::Record {
            identity: id(n),
            to,
            adopted,
        },
        message: format!("creation step {}", to.name()),
    }
}

fn restarted(message: &str) -> CreationPlan {
    Plan::Advance {
        to: Move::Restart,
        message: message.into(),
        kind_status: None,
    }
}

/// The reason a plan holds its step under, with its message; a plan that is no hold
/// fails the test.
fn held(plan: &CreationPlan) -> (&'static str, &str) {
    match plan {
        Plan::Wait {
            event: Some(reason),
            message,
            ..
        } => (*reason, message),
        other => panic!("not a hold: {other:?}"),
    }
}

#[test]
fn claiming_moves_on_only_under_the_resource_version_read() {
    // The claim is a move like any other: the machine runtime writes every move onto the
    // resourceVersion the pass read, which makes it the claim.
    assert_eq!(
        plan_of(Claiming, Observation::default()),
        Plan::Advance {
            to: Move::To(CheckingControlPlane),
            message: "claimed; checking the control plane".into(),
            kind_status: None,
        }
    );
}

#[test]
fn an_unready_control_plane_holds_the_check_and_says_why() {
    let obs = Observation {
        not_ready: Some("503 Service Unavailable".into()),
        ..Observation::default()
    };
    assert_eq!(
        plan_of(CheckingControlPlane, obs),
        Plan::Wait {
            message: "the control plane is not ready (503 Service Unavailable); the cluster is created once it is".into(),
            after: requeue::RETRY,
            event: Some("FDBNotReady"),
        }
    );
}

#[test]
fn a_ready_control_plane_resolves_the_config_or_adopts_what_an_upgrade_left() {
    assert_eq!(
        plan_of(CheckingControlPlane, Observation::default()),
        advanced(ResolvingConfig)
    );
    let upgraded = Observation {
        upgrade: Some(id(7)),
        ..Observation::default()
    };
    assert_eq!(plan_of(CheckingControlPlane, upgraded), advanced(Adopting));
}

#[test]
fn a_resolved_config_moves_on_to_creating() {
    let obs = Observation {
        config: Some(Ok(body())),
        ..Observation::default()
    };
    assert_eq!(plan_of(ResolvingConfig, obs), advanced(Creating));
}

#[test]
fn a_config_error_is_said_once_then_waited_on() {
    for step in [ResolvingConfig, Creating] {
        let obs = || Observation {
            config: Some(Err(hugepages())),
            ..Observation::default()
        };
        assert_eq!(
            plan(step, &stored(None), &obs()),
            Plan::Wait {
                message: hugepages().to_string(),
                after: requeue::RESYNC,
                event: Some("InvalidConfig"),
            },
            "{step}"
        );
        let said = stored(Some(&hugepages().to_string()));
        assert_eq!(
            plan(step, &said, &obs()),
            Plan::quiet(Some(&hugepages().to_string()), requeue::RESYNC),
            "{step}"
        );
    }
}

#[test]
fn a_missing_backup_secret_is_held_under_its_own_reason() {
    let e = ConfigError::BackupCredentials("Secret s3 is missing".into());
    let obs = Observation {
        config: Some(Err(e)),
        ..Observation::default()
    };
    let config_held = plan_of(ResolvingConfig, obs);
    assert_eq!(held(&config_held).0, "BackupCredentialsError");
}

#[test]
fn creating_records_a_cluster_of_the_name_that_is_there_already_instead_of_creating() {
    // The body is resolvable too: the existing cluster still wins.
    let obs = Observation {
        existing: Some(id(3)),
        config: Some(Ok(body())),
        ..Observation::default()
    };
    assert_eq!(plan_of(Creating, obs), recorded(3, Adopting, false));
}

#[test]
fn creating_without_a_cluster_of_the_name_calls_create_with_the_body() {
    let obs = Observation {
        config: Some(Ok(body())),
        ..Observation::default()
    };
    assert_eq!(
        plan_of(Creating, obs),
        Plan::Call {
            call: CreationCall::Create {
                body: Box::new(body())
            },
            message: "creating the cluster in the control plane".into(),
        }
    );
}

#[test]
fn a_failed_create_whose_cluster_exists_is_adopted_not_retried() {
    assert_eq!(
        after_failed_create("connection reset", true),
        advanced(Adopting)
    );
    assert_eq!(
        after_failed_create("400: name taken", false),
        Plan::Wait {
            message: "creating the cluster in the control plane failed: 400: name taken".into(),
            after: requeue::RETRY,
            event: Some("ClusterCreationFailed"),
        }
    );
}

#[test]
fn adopting_prefers_the_upgrade_secret_then_the_cluster_of_the_name() {
    let both = Observation {
        upgrade: Some(id(1)),
        existing: Some(id(2)),
        ..Observation::default()
    };
    let adopt = |n| recorded(n, Persisting, true);
    assert_eq!(plan_of(Adopting, both), adopt(1));
    let named = Observation {
        existing: Some(id(2)),
        ..Observation::default()
    };
    assert_eq!(plan_of(Adopting, named), adopt(2));
}

#[test]
fn adopting_nothing_starts_the_machine_over() {
    assert_eq!(
        plan_of(Adopting, Observation::default()),
        restarted("nothing to adopt was found; creating the cluster afresh")
    );
}

#[test]
fn persisting_without_the_identity_secret_looks_the_cluster_up_again() {
    assert_eq!(
        plan_of(Persisting, Observation::default()),
        restarted("the cluster's Secret is missing; looking the cluster up again")
    );
}

#[test]
fn persisting_finishes_into_the_steady_status_of_the_stored_identity() {
    let reported = Reported {
        cluster: Cluster {
            id: id(5).uuid,
            name: Some("sb".into()),
            status: ClusterStatus::Unready,
            ..Cluster::default()
        },
        tasks: vec![],
    };
    let obs = Observation {
        stored: Some(id(5)),
        reported: Some(reported),
        ..Observation::default()
    };
    let mut current = stored(Some("creation step Persisting"));
    current.step = CREATION_GRAPH.start(now()).snapshot();
    let Plan::Call {
        call: CreationCall::Finish { identity, status },
        message,
    } = plan(Persisting, &current, &obs)
    else {
        panic!("a stored identity the control plane knows finishes the machine");
    };
    assert_eq!(identity, id(5));
    assert_eq!(Some(message), status.message);
    assert_eq!(
        status.uuid.as_deref(),
        Some(id(5).uuid.to_string().as_str())
    );
    assert!(status.step.is_empty(), "the machine's step is cleared");
    assert_eq!(
        status.message,
        Some(format!("created in the control plane as {}", id(5).uuid))
    );
}

#[test]
fn a_read_the_step_needs_but_did_not_get_is_looked_at_again() {
    // Nothing new is said: the stored message stands.
    let look_again = Plan::quiet(None, requeue::RETRY);
    assert_eq!(plan_of(ResolvingConfig, Observation::default()), look_again);
    assert_eq!(plan_of(Creating, Observation::default()), look_again);
    let unreported = || Observation {
        stored: Some(id(5)),
        ..Observation::default()
    };
    assert_eq!(plan_of(Persisting, unreported()), look_again);
    let said = stored(Some("creation step Persisting"));
    assert_eq!(
        plan(Persisting, &said, &unreported()),
        Plan::quiet(Some("creation step Persisting"), requeue::RETRY)
    );
}

#[test]
fn a_step_past_its_deadline_is_noted_once() {
    let machine = CREATION_GRAPH.start(now());
    assert_eq!(overdue(&machine, &stored(None), now()), None, "in time");
    let late = now() + Duration::from_secs(11 * 60);
    let notice = overdue(&machine, &stored(None), late).expect("overdue");
    assert_eq!(
        notice,
        "creation step Claiming outlived its deadline; it is still being retried"
    );
    // Noted: the step's own later message (a config error) does not bring it back.
    let noted = StorageClusterStatus {
        phase: ClusterPhase::Unavailable,
        ..stored(Some(&hugepages().to_string()))
    };
    assert_eq!(overdue(&machine, &noted, late), None);
}

#[test]
fn a_step_held_past_its_deadline_keeps_the_cluster_unavailable() {
    // Regression: a hold wrote Creating over the deadline's Unavailable, and the notice
    // and the hold then rewrote each other on every pass.
    let machine = CREATION_GRAPH.start(now());
    assert_eq!(holding_phase(&machine, now()), ClusterPhase::Creating);
    let late = now() + Duration::from_secs(11 * 60);
    assert_eq!(holding_phase(&machine, late), ClusterPhase::Unavailable);
}

#[test]
fn the_identity_keeps_its_secret_out_of_debug_output() {
    let shown = format!("{:?}", id(9));
    assert!(shown.contains(&id(9).uuid.to_string()), "{shown}");
    assert!(!shown.contains("secret-9"), "{shown}");
}

fn namesake(key: &str, uid: &str, created: i64, recorded: bool) -> Namesake {
    Namesake {
        key: key.into(),
        uid: uid.into(),
        created: Some(Timestamp::from_second(created).expect("ts")),
        recorded,
    }
}

#[test]
fn a_name_is_held_by_the_namesake_that_recorded_a_cluster_else_by_the_oldest() {
    let me = namesake("b/sb", "u-b", 200, false);
    // Alone, or only younger namesakes: this one goes ahead.
    assert_eq!(name_holder(&me, &[]), None);
    let younger = namesake("c/sb", "u-c", 300, false);
    assert_eq!(name_holder(&me, std::slice::from_ref(&younger)), None);
    // An older one holds it, whichever way the two look at each other.
    let older = namesake("a/sb", "u-a", 100, false);
    assert_eq!(
        name_holder(&me, &[younger.clone(), older.clone()]),
        Some("a/sb".into())
    );
    assert_eq!(name_holder(&older, std::slice::from_ref(&me)), None);
    // Created in the same second: the uid decides, the same way for both.
    let twin = namesake("d/sb", "u-0", 200, false);
    assert_eq!(
        name_holder(&me, std::slice::from_ref(&twin)),
        Some("d/sb".into())
    );
    assert_eq!(name_holder(&twin, std::slice::from_ref(&me)), None);
    // One that recorded a control-plane cluster holds it, however young.
    let recorded = namesake("e/sb", "u-e", 900, true);
    assert_eq!(name_holder(&me, &[recorded]), Some("e/sb".into()));
}

#[test]
fn a_name_held_elsewhere_neither_creates_nor_adopts_and_is_said_once() {
    let obs = || Observation {
        name_taken_by: Some("a/sb".into()),
        existing: Some(id(3)),
        config: Some(Ok(body())),
        ..Observation::default()
    };
    for step in [Creating, Adopting] {
        let taken = plan_of(step, obs());
        let (reason, message) = held(&taken);
        assert_eq!(reason, "ClusterNameTaken");
        assert!(
            message.starts_with("StorageCluster a/sb already holds this name"),
            "{message}"
        );
        assert!(matches!(&taken, Plan::Wait { after, .. } if *after == requeue::RESYNC));
        assert_eq!(
            plan(step, &stored(Some(message)), &obs()),
            Plan::quiet(Some(message), requeue::RESYNC)
        );
    }
}

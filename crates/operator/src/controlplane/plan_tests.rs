//! The ControlPlane controller's decisions over observations, without an API server or a
//! control plane: given this step (or this steady state) and this observation, the next
//! thing is that.

use std::time::Duration;

use serde_json::json;
use simplyblock_api::control_plane::INSTALL_GRAPH;
use simplyblock_statemachine::StepSnapshot;

use super::*;
use InstallStep::*;

fn now() -> Timestamp {
    Timestamp::from_second(1_000_000).expect("ts")
}

fn local(spec: serde_json::Value) -> LocalSource {
    let mut full = json!({"image": "quay.io/simplyblock-io/simplyblock:25.10.1"});
    full.as_object_mut()
        .expect("object")
        .extend(spec.as_object().cloned().unwrap_or_default());
    serde_json::from_value(full).expect("local source")
}

fn plain() -> Tls {
    Tls::of(&local(json!({"tls": {"enableTLS": false}})))
}

fn cert_manager() -> Tls {
    Tls::of(&local(json!({})))
}

fn answered(version: Option<&str>) -> Probe {
    Probe::Asked {
        ready: Ok(()),
        version: version.map(str::to_owned),
    }
}

fn refused() -> Probe {
    Probe::Asked {
        ready: Err("503 FDB not ready".into()),
        version: None,
    }
}

fn obs(f: impl FnOnce(&mut Observation)) -> Observation {
    let mut o = Observation {
        endpoint: "http://simplyblock-webappapi.sb.svc:5000".into(),
        namespace: "sb".into(),
        ..Observation::default()
    };
    f(&mut o);
    o
}

/// A hold's message and event; every hold looks again after [`INSTALL_POLL`].
fn held(plan: InstallPlan) -> (String, &'static str) {
    match plan {
        Plan::Wait {
            message,
            after,
            event: Some(event),
        } => {
            assert_eq!(after, INSTALL_POLL, "{message}");
            (message, event)
        }
        other => panic!("not held: {other:?}"),
    }
}

/// Apply `batch`, then move on to `to`, saying so.
fn applies(batch: Batch, to: InstallStep) -> InstallPlan {
    Plan::Call {
        call: InstallCall::Apply { batch, to },
        message: format!("installing: step {}", to.name()),
    }
}

#[test]
fn each_install_step_applies_its_objects_or_waits_for_what_it_needs() {
    let available = FdbHealth {
        available: true,
        healthy: true,
        ready_storage: None,
    };
    let table: Vec<(InstallStep, Tls, Observation, InstallPlan)> = vec![
        (
            ApplyingFoundationDB,
            plain(),
            obs(|o| o.fdb_served = true),
            applies(Batch::FoundationDb, AwaitingFoundationDB),
        ),
        (
            AwaitingFoundationDB,
            plain(),
            obs(|o| o.fdb = Some(available.clone())),
            Plan::Advance {
                to: Move::To(ApplyingDatastore),
                message: "installing: step ApplyingDatastore".into(),
                kind_status: None,
            },
        ),
        (
            ApplyingDatastore,
            plain(),
            obs(|_| {}),
            applies(Batch::Datastore, ApplyingAPI),
        ),
        (
            ApplyingAPI,
            plain(),
            obs(|_| {}),
            applies(Batch::Api, AwaitingAPI),
        ),
        (
            ApplyingAPI,
            cert_manager(),
            obs(|o| o.cert_manager_served = true),
            applies(Batch::Api, AwaitingAPI),
        ),
        (
            AwaitingAPI,
            plain(),
            obs(|o| {
                o.workloads.insert(
                    API.into(),
                    Replicas {
                        desired: 2,
                        ready: 1,
                    },
                );
                o.probe = Some(answered(None));
            }),
            Plan::Call {
                call: InstallCall::HandOver,
                message: "installed: the management API at http://simplyblock-webappapi.sb.svc:5000 answers".into(),
            },
        ),
    ];
    for (step, tls, o, want) in table {
        assert_eq!(install(step, tls, &o), want, "{step:?}");
    }
}

#[test]
fn the_foundationdb_api_not_served_holds_the_first_step_and_says_what_to_install() {
    let plan = install(ApplyingFoundationDB, plain(), &obs(|_| {}));
    let (message, event) = held(plan);
    assert_eq!(event, reason::AWAITING);
    assert!(
        message.contains("apps.foundationdb.org/v1beta2")
            && message.contains("install the FoundationDB operator"),
        "{message}"
    );
}

#[test]
fn foundationdb_not_yet_available_holds_with_what_its_operator_reports() {
    let (message, _) = held(install(AwaitingFoundationDB, plain(), &obs(|_| {})));
    assert!(message.contains("has not reported on it yet"), "{message}");
    // No health at all: most often its operator is not there to write it.
    assert!(
        message.contains("FoundationDB operator is installed and running")
            && message.contains("watching namespace sb")
            && message.contains("`kubectl -n sb get foundationdbcluster simplyblock-fdb-cluster`"),
        "{message}"
    );
    let unavailable = obs(|o| o.fdb = Some(FdbHealth::default()));
    let (message, event) = held(install(AwaitingFoundationDB, plain(), &unavailable));
    assert!(message.contains("not available yet"), "{message}");
    // Its operator runs (it reported): what to look at is the cluster and its pods.
    assert!(
        message.contains("`kubectl -n sb get foundationdbcluster simplyblock-fdb-cluster`")
            && message.contains(
                "`kubectl -n sb get pods -l foundationdb.org/fdb-cluster-name=simplyblock-fdb-cluster`"
            )
            && message.contains("StorageClass"),
        "{message}"
    );
    assert_eq!(event, reason::AWAITING);
}

#[test]
fn tls_with_cert_manager_holds_the_api_step_until_cert_manager_is_served() {
    let (message, _) = held(install(ApplyingAPI, cert_manager(), &obs(|_| {})));
    assert!(message.contains("cert-manager.io/v1"), "{message}");
    assert!(message.contains("enableTLS to false"), "{message}");
    // OpenShift's service CA needs no cert-manager.
    let openshift = Tls::of(&local(json!({"tls": {"provider": "OpenShift"}})));
    assert_eq!(
        install(ApplyingAPI, openshift, &obs(|_| {})),
        applies(Batch::Api, AwaitingAPI)
    );
}

fn api_with_a_ready_replica(o: &mut Observation) {
    o.workloads.insert(
        API.into(),
        Replicas {
            desired: 2,
            ready: 1,
        },
    );
}

#[test]
fn the_api_without_a_ready_replica_holds_the_last_step_whatever_answers() {
    let none_ready = obs(|o| {
        o.workloads.insert(
            API.into(),
            Replicas {
                desired: 2,
                ready: 0,
            },
        );
        o.probe = Some(answered(None));
    });
    let (message, _) = held(install(AwaitingAPI, plain(), &none_ready));
    assert_eq!(
        message,
        "waiting for a ready replica of Deployment simplyblock-webappapi (0 of 2 ready)"
    );
}

#[test]
fn the_api_not_answering_holds_the_last_step_and_missing_credentials_say_so() {
    let (message, event) = held(install(
        AwaitingAPI,
        plain(),
        &obs(|o| {
            api_with_a_ready_replica(o);
            o.probe = Some(refused());
        }),
    ));
    assert_eq!(
        message,
        "waiting for the management API at http://simplyblock-webappapi.sb.svc:5000 to answer: 503 FDB not ready"
    );
    assert_eq!(event, reason::AWAITING);
    let no_token = obs(|o| {
        api_with_a_ready_replica(o);
        o.probe = Some(Probe::NoClient {
            credentials: true,
            why: "no token".into(),
        })
    });
    assert_eq!(
        install(AwaitingAPI, plain(), &no_token),
        Plan::Wait {
            message: "no token".into(),
            after: INSTALL_POLL,
            event: Some(reason::CREDENTIALS),
        }
    );
}

#[test]
fn a_held_step_past_its_deadline_says_so_once_and_keeps_waiting() {
    let waiting = || hold("waiting".into(), reason::AWAITING);
    let machine = INSTALL_GRAPH.start(now());
    assert_eq!(overdue(&machine, now(), waiting()), waiting());
    let stored = StepSnapshot {
        state: Some("AwaitingFoundationDB".into()),
        deadline: Some(now()),
    };
    let late = INSTALL_GRAPH.restore(&stored, now()).expect("machine");
    let later = now() + jiff::SignedDuration::from_secs(1);
    let (message, event) = held(overdue(&late, later, waiting()));
    assert_eq!(event, reason::DEADLINE);
    assert!(
        message.starts_with("install step AwaitingFoundationDB outlived its deadline")
            && message.ends_with("still waiting: waiting"),
        "{message}"
    );
    // Only a hold is late: a step whose outcome is there moves on as it would.
    let available = obs(|o| {
        o.fdb = Some(FdbHealth {
            available: true,
            ..FdbHealth::default()
        })
    });
    let moves = install(AwaitingFoundationDB, plain(), &available);
    assert_eq!(overdue(&late, later, moves.clone()), moves);
    assert!(matches!(moves, Plan::Advance { .. }), "{moves:?}");
}

fn replicas(desired: i32, ready: i32) -> Replicas {
    Replicas { desired, ready }
}

fn component(name: &str, desired: i32, ready: i32, essential: bool) -> Component {
    Component {
        name: name.into(),
        desired,
        ready,
        essential,
    }
}

#[test]
fn components_are_the_workloads_and_foundationdb_by_its_health() {
    let spec = local(json!({"replicas": 2, "foundationDB": {"replicas": 3}}));
    let healthy = FdbHealth {
        available: true,
        healthy: true,
        ready_storage: None,
    };
    let seen = obs(|o| {
        o.workloads.insert(API.into(), replicas(2, 1));
        o.workloads.insert(OBJECT_STORE.into(), replicas(1, 1));
        o.workloads
            .insert("simplyblock-admin-control".into(), replicas(2, 2));
        o.workloads
            .insert("simplyblock-tasks".into(), replicas(1, 0));
        o.workloads
            .insert("simplyblock-monitoring".into(), replicas(1, 1));
        o.fdb = Some(healthy.clone());
    });
    // Sorted by name; the exporter not there yet wants its one replica.
    assert_eq!(
        components(&spec, &seen),
        [
            component("simplyblock-admin-control", 2, 2, false),
            component("simplyblock-fdb-cluster", 3, 3, true),
            component("simplyblock-fdb-exporter", 1, 0, false),
            component("simplyblock-minio", 1, 1, false),
            component("simplyblock-monitoring", 1, 1, false),
            component("simplyblock-tasks", 1, 0, false),
            component("simplyblock-webappapi", 2, 1, true),
        ]
    );
    let fdb_ready = |health: Option<FdbHealth>| {
        let seen = obs(|o| o.fdb = health);
        components(&spec, &seen)
            .into_iter()
            .find(|c| c.name == FDB_CLUSTER)
            .expect("fdb")
            .ready
    };
    let unhealthy = FdbHealth {
        healthy: false,
        ..healthy.clone()
    };
    let counted = FdbHealth {
        ready_storage: Some(2),
        ..healthy.clone()
    };
    assert_eq!(fdb_ready(None), 0);
    assert_eq!(fdb_ready(Some(FdbHealth::default())), 0);
    assert_eq!(fdb_ready(Some(unhealthy)), 2);
    assert_eq!(fdb_ready(Some(counted)), 2);
    // A workload not there yet counts its spec's replicas, none ready.
    let missing = components(&spec, &obs(|_| {}));
    assert!(missing.contains(&component("simplyblock-webappapi", 2, 0, true)));
}

const ENDPOINT: &str = "http://cp:5000";

fn all_ready() -> Vec<Component> {
    vec![
        component("simplyblock-fdb-cluster", 3, 3, true),
        component("simplyblock-minio", 1, 1, false),
        component("simplyblock-webappapi", 2, 2, true),
    ]
}

fn with(name: &str, ready: i32) -> Vec<Component> {
    all_ready()
        .into_iter()
        .map(|c| {
            if c.name == name {
                Component { ready, ..c }
            } else {
                c
            }
        })
        .collect()
}

/// (case, managed, components, probe, the phase, why).
type VerdictCase = (
    &'static str,
    bool,
    Vec<Component>,
    Probe,
    ControlPlanePhase,
    Reason,
);

#[test]
fn the_worst_verdict_wins() {
    use ControlPlanePhase::*;
    let table: Vec<VerdictCase> = vec![
        (
            "all ready",
            false,
            all_ready(),
            answered(None),
            Available,
            Reason::Serving,
        ),
        (
            "api one short",
            false,
            with(API, 1),
            answered(None),
            Degraded,
            Reason::Degraded,
        ),
        (
            "store down",
            false,
            with(OBJECT_STORE, 0),
            answered(None),
            Degraded,
            Reason::Degraded,
        ),
        (
            "api down",
            false,
            with(API, 0),
            answered(None),
            Unavailable,
            Reason::ComponentDown,
        ),
        (
            "fdb down",
            false,
            with(FDB_CLUSTER, 0),
            answered(None),
            Unavailable,
            Reason::ComponentDown,
        ),
        (
            "probe fails",
            false,
            all_ready(),
            refused(),
            Unavailable,
            Reason::Unreachable,
        ),
        (
            "probe fails and api down",
            false,
            with(API, 0),
            refused(),
            Unavailable,
            Reason::Unreachable,
        ),
        (
            "managed answers",
            true,
            vec![],
            answered(Some("1")),
            Available,
            Reason::Serving,
        ),
        (
            "managed fails",
            true,
            vec![],
            refused(),
            Unavailable,
            Reason::Unreachable,
        ),
    ];
    for (case, managed, components, probe, phase, why) in table {
        let v = verdict(managed, &components, &probe, ENDPOINT, Available);
        assert_eq!((v.phase, v.reason), (phase, why), "{case}: {:?}", v.message);
    }
}

#[test]
fn verdicts_say_which_component_and_why() {
    let v = verdict(
        false,
        &with(API, 0),
        &answered(None),
        ENDPOINT,
        ControlPlanePhase::Available,
    );
    assert_eq!(
        v.message.as_deref(),
        Some(
            "unavailable: an essential component has no ready replica: simplyblock-webappapi has 0 of 2 ready"
        )
    );
    let v = verdict(
        false,
        &with(OBJECT_STORE, 0),
        &answered(None),
        ENDPOINT,
        ControlPlanePhase::Available,
    );
    assert_eq!(
        v.message.as_deref(),
        Some("degraded: simplyblock-minio has 0 of 1 ready; clients go on")
    );
    let v = verdict(
        false,
        &all_ready(),
        &refused(),
        ENDPOINT,
        ControlPlanePhase::Available,
    );
    assert_eq!(
        v.message.as_deref(),
        Some("unreachable: the control plane at http://cp:5000 does not answer: 503 FDB not ready")
    );
    assert_eq!(
        verdict(
            false,
            &all_ready(),
            &answered(None),
            ENDPOINT,
            ControlPlanePhase::Degraded
        )
        .message,
        None
    );
}

#[test]
fn a_managed_control_plane_never_reached_stays_installing_and_names_missing_credentials() {
    let no_secret = Probe::NoClient {
        credentials: true,
        why: "Secret cp-token does not exist".into(),
    };
    let v = verdict(
        true,
        &[],
        &no_secret,
        ENDPOINT,
        ControlPlanePhase::Installing,
    );
    assert_eq!(v.phase, ControlPlanePhase::Installing);
    assert_eq!(v.reason, Reason::Credentials);
    assert_eq!(
        v.message.as_deref(),
        Some("credentials: Secret cp-token does not exist")
    );
    let v = verdict(
        true,
        &[],
        &refused(),
        ENDPOINT,
        ControlPlanePhase::Installing,
    );
    assert_eq!(v.phase, ControlPlanePhase::Installing);
    // Once reached, losing it is Unavailable.
    let v = verdict(
        true,
        &[],
        &no_secret,
        ENDPOINT,
        ControlPlanePhase::Available,
    );
    assert_eq!(v.phase, ControlPlanePhase::Unavailable);
}

#[test]
fn an_event_comes_with_each_change_of_reason_and_never_without_one() {
    let ready = verdict(
        false,
        &all_ready(),
        &answered(None),
        ENDPOINT,
        ControlPlanePhase::Installing,
    );
    let note = transition(None, &ready, ENDPOINT).expect("installed");
    assert_eq!((note.warning, note.reason), (false, reason::READY));
    assert_eq!(transition(Some(Reason::Serving), &ready, ENDPOINT), None);
    let cases = [
        (with(API, 1), answered(None), reason::DEGRADED),
        (with(API, 0), answered(None), reason::NOT_READY),
        (all_ready(), refused(), reason::UNREACHABLE),
    ];
    for (components, probe, want) in cases {
        let v = verdict(
            false,
            &components,
            &probe,
            ENDPOINT,
            ControlPlanePhase::Available,
        );
        let note = transition(Some(Reason::Serving), &v, ENDPOINT).expect("a change");
        assert_eq!((note.warning, note.reason), (true, want));
        assert_eq!(Some(note.message), v.message);
        assert_eq!(
            transition(Some(v.reason), &v, ENDPOINT),
            None,
            "{want} twice"
        );
    }
}

#[test]
fn the_reason_of_a_stored_status_is_read_back_from_its_message() {
    let stored = |phase, message: Option<&str>, step: Option<&str>| ControlPlaneStatus {
        phase,
        message: message.map(str::to_owned),
        step: StepSnapshot {
            state: step.map(str::to_owned),
            deadline: None,
        },
        ..ControlPlaneStatus::default()
    };
    use ControlPlanePhase::*;
    for (components, probe) in [
        (all_ready(), answered(None)),
        (with(API, 1), answered(None)),
        (with(API, 0), answered(None)),
        (all_ready(), refused()),
    ] {
        let v = verdict(false, &components, &probe, ENDPOINT, Available);
        let read = Reason::of(&stored(v.phase, v.message.as_deref(), None));
        assert_eq!(read, Some(v.reason));
    }
    assert_eq!(
        Reason::of(&stored(Installing, Some("waiting"), Some("AwaitingAPI"))),
        None
    );
    assert_eq!(Reason::of(&stored(Installing, None, None)), None);
}

#[test]
fn last_checked_alone_is_written_only_once_it_is_stale() {
    let at = |s: i64| Some(Time(Timestamp::from_second(s).expect("ts")));
    let stored = ControlPlaneStatus {
        phase: ControlPlanePhase::Available,
        last_checked: at(1_000),
        active_ops_ref: Some("op".into()),
        ..ControlPlaneStatus::default()
    };
    let next = ControlPlaneStatus {
        last_checked: at(1_010),
        active_ops_ref: None,
        ..stored.clone()
    };
    let fresh = Duration::from_secs(20);
    let t = |s: i64| Timestamp::from_second(s).expect("ts");
    assert!(!worth_writing(&stored, &next, t(1_010), fresh));
    assert!(worth_writing(&stored, &next, t(1_020), fresh));
    let degraded = ControlPlaneStatus {
        phase: ControlPlanePhase::Degraded,
        ..next.clone()
    };
    assert!(worth_writing(&stored, &degraded, t(1_010), fresh));
}

#[test]
fn the_finalizer_holds_while_clusters_remain_and_names_them() {
    assert_eq!(deletion(&[]), None);
    let many: Vec<String> = (1..=7).map(|i| format!("c{i}")).collect();
    let message = deletion(&many).expect("held");
    assert_eq!(
        message,
        "7 StorageCluster(s) still use the control plane (c1, c2, c3, c4, c5, …); the ControlPlane is deleted once they are"
    );
}

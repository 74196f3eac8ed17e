//! Given this document, status and observation, the next thing the expansion does is.

use jiff::Timestamp;
use serde_json::{Value, json};
use simplyblock_api::names::storage_node_name;

use super::*;
use crate::deployment::validation::ExistingCluster;

fn now() -> Timestamp {
    Timestamp::from_second(1_000_000).expect("ts")
}

const WORKERS: [&str; 3] = ["w1", "w2", "w3"];

/// An approved document over w1..w3: a new cluster `sb`, or (`growth`) one naming it.
fn doc(growth: bool) -> ClusterDeploymentConfig {
    let mut spec = json!({"approved": true, "nodeSets": [{"name": "a", "groups": [
        {"name": "g", "workers": WORKERS, "devices": {"nvme": ["0000:01:00.0"]}}
    ]}]});
    if growth {
        spec["clusterRef"] = json!("sb");
    } else {
        spec["cluster"] = json!({"name": "sb", "maxSubsystemCount": 10, "vcpuCount": 4,
                                 "stripe": {"dataChunks": 1, "parityChunks": 1}});
    }
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "ClusterDeploymentConfig",
        "metadata": {"name": "d", "namespace": "ns", "uid": "d-uid"},
        "spec": spec,
    }))
    .expect("document")
}

/// An Expanding status at `step`, begun, with `extra` fields.
fn status(step: &str, extra: Value) -> ClusterDeploymentConfigStatus {
    let mut s = json!({"phase": "Expanding", "step": {"state": step},
                       "expansionStartedAt": "1970-01-12T00:00:00Z"});
    for (k, v) in extra.as_object().expect("fields") {
        s[k] = v.clone();
    }
    serde_json::from_value(s).expect("status")
}

fn cluster(labels: Value, uuid: Option<&str>) -> StorageCluster {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
        "metadata": {"name": "sb", "namespace": "ns", "uid": "sb-uid", "labels": labels},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 4,
                 "stripe": {"dataChunks": 1, "parityChunks": 1}},
        "status": {"uuid": uuid},
    }))
    .expect("cluster")
}

fn ours() -> Value {
    json!({CREATED_BY_LABEL: "d"})
}

fn node_names() -> Vec<String> {
    WORKERS
        .iter()
        .map(|w| storage_node_name("sb", w, 0))
        .collect()
}

fn plan_of(
    doc: &ClusterDeploymentConfig,
    status: &ClusterDeploymentConfigStatus,
    obs: &Observation,
) -> NotedExpansion {
    let machine = restore(status, now()).expect("machine");
    plan(&machine, doc, status, obs, now())
}

/// The reason a plan fails with: its message leads with it, and its warning says it.
fn failed_with(p: &NotedExpansion) -> &'static str {
    match (&p.plan, p.notes.as_slice()) {
        (Plan::Fail(message), [note]) => {
            assert!(note.warning, "a failure is a warning");
            assert_eq!(*message, format!("{}: {}", note.reason, note.message));
            note.reason
        }
        _ => panic!("not a failure: {p:?}"),
    }
}

/// The announcement of a wait; a plan that is no wait fails the test. A quiet wait
/// restates the stored message and announces nothing.
fn waits<'a>(p: &'a NotedExpansion, stored: Option<&str>) -> Option<&'a str> {
    let Plan::Wait {
        message,
        after,
        event: None,
    } = &p.plan
    else {
        panic!("not a wait: {p:?}");
    };
    assert_eq!(*after, requeue::RESYNC);
    match p.notes.as_slice() {
        [] => {
            assert_eq!(
                message,
                stored.unwrap_or_default(),
                "a quiet wait says nothing new"
            );
            None
        }
        [note] => {
            assert_eq!((note.reason, note.warning), ("AwaitingNodes", false));
            assert_eq!(&note.message, message);
            Some(message.as_str())
        }
        _ => panic!("a wait with more than one event: {p:?}"),
    }
}

/// A move: where to, its message, and the fields it records.
struct Advanced<'a> {
    to: ExpansionStep,
    message: &'a str,
    cluster_ref: Option<&'a str>,
    node_refs: Option<&'a Vec<String>>,
}

fn advance_of(p: &ExpansionPlan) -> Advanced<'_> {
    match p {
        Plan::Advance {
            to: Move::To(to),
            message,
            kind_status,
        } => Advanced {
            to: *to,
            message,
            cluster_ref: kind_status.as_ref().and_then(|r| r.cluster_ref.as_deref()),
            node_refs: kind_status.as_ref().and_then(|r| r.node_refs.as_ref()),
        },
        other => panic!("not an advance: {other:?}"),
    }
}

fn advanced_to(p: &NotedExpansion) -> Advanced<'_> {
    assert!(p.notes.is_empty(), "{p:?}");
    advance_of(&p.plan)
}

/// The call a plan issues, with its message.
fn calls(p: &NotedExpansion) -> (&ExpansionCall, &str) {
    match &p.plan {
        Plan::Call { call, message } => (call, message),
        _ => panic!("not a call: {p:?}"),
    }
}

fn world(nodes: &[&str]) -> World {
    World {
        nodes: nodes.iter().map(|n| n.to_string()).collect(),
        ..World::default()
    }
}

fn with_world(world: World) -> Observation {
    Observation {
        world: Some(world),
        ..Observation::default()
    }
}

#[test]
fn a_fresh_approval_begins_before_judging() {
    let draft: ClusterDeploymentConfigStatus =
        serde_json::from_value(json!({"phase": "Draft", "message": "ready for review"}))
            .expect("status");
    let p = plan_of(&doc(false), &draft, &with_world(world(&WORKERS)));
    assert!(p.notes.is_empty(), "{p:?}");
    assert!(
        matches!(&p.plan, Plan::Record { kind_status, message }
            if *kind_status == Refs::default() && message == "validating against the cluster"),
        "{p:?}"
    );
}

#[test]
fn a_draft_status_with_a_step_starts_the_machine_over() {
    let draft: ClusterDeploymentConfigStatus =
        serde_json::from_value(json!({"phase": "Draft", "step": {"state": "Activating"}}))
            .expect("status");
    let machine = restore(&draft, now()).expect("machine");
    assert_eq!(machine.state(), ExpansionStep::Validating);
}

#[test]
fn an_unknown_step_cannot_be_restored() {
    let s = status("Sleeping", json!({}));
    assert!(restore(&s, now()).is_err());
}

#[test]
fn validating_advances_a_sound_document() {
    let p = plan_of(
        &doc(false),
        &status("Validating", json!({})),
        &with_world(world(&WORKERS)),
    );
    let a = advanced_to(&p);
    assert_eq!(a.to, ExpansionStep::CreatingCluster);
    assert_eq!(a.message, "creating or resolving StorageCluster sb");
}

#[test]
fn validating_fails_with_the_first_problem() {
    let p = plan_of(
        &doc(false),
        &status("Validating", json!({})),
        &with_world(world(&["w1", "w2"])),
    );
    assert_eq!(failed_with(&p), "WorkerNotFound");
}

#[test]
fn validating_without_the_world_read_begins_again() {
    let p = plan_of(
        &doc(false),
        &status("Validating", json!({})),
        &Observation::default(),
    );
    assert!(
        matches!(&p.plan, Plan::Record { kind_status, .. } if *kind_status == Refs::default()),
        "{p:?}"
    );
}

fn world_with_sb() -> World {
    let mut w = world(&WORKERS);
    w.clusters.insert(
        "sb".into(),
        ExistingCluster {
            slots_per_worker: 1,
            ..ExistingCluster::default()
        },
    );
    w
}

#[test]
fn validating_a_resumed_expansion_is_not_in_conflict_with_its_own_cluster() {
    let resumed = status("Validating", json!({"clusterRef": "sb"}));
    let p = plan_of(&doc(false), &resumed, &with_world(world_with_sb()));
    assert_eq!(advanced_to(&p).to, ExpansionStep::CreatingCluster);
}

#[test]
fn validating_refuses_a_cluster_of_the_same_name_it_did_not_record() {
    let p = plan_of(
        &doc(false),
        &status("Validating", json!({})),
        &with_world(world_with_sb()),
    );
    assert_eq!(failed_with(&p), "ClusterExists");
}

#[test]
fn a_step_past_its_deadline_fails() {
    let late = status(
        "AwaitingCluster",
        json!({"step": {"state": "AwaitingCluster", "deadline": "1970-01-02T00:00:00Z"}}),
    );
    let obs = Observation {
        cluster: Some(cluster(ours(), Some("c-1"))),
        ..Observation::default()
    };
    let p = plan_of(&doc(false), &late, &obs);
    assert_eq!(failed_with(&p), "StepDeadlineExceeded");
}

#[test]
fn a_document_naming_no_cluster_fails() {
    let mut d = doc(false);
    d.spec.cluster = None;
    let p = plan_of(
        &d,
        &status("Validating", json!({})),
        &with_world(world(&WORKERS)),
    );
    assert_eq!(failed_with(&p), "NoClusterNamed");
}

#[test]
fn creating_records_then_creates_a_missing_cluster() {
    let p = plan_of(
        &doc(false),
        &status("CreatingCluster", json!({})),
        &Observation::default(),
    );
    let (ExpansionCall::CreateCluster { cluster, then }, message) = calls(&p) else {
        panic!("not a create: {p:?}");
    };
    // The record before the create keeps the step's message.
    assert_eq!(message, "creating or resolving StorageCluster sb");
    assert_eq!(cluster.name_any(), "sb");
    assert_eq!(
        cluster.labels().get(CREATED_BY_LABEL).map(String::as_str),
        Some("d")
    );
    let then = advance_of(then);
    assert_eq!(then.to, ExpansionStep::AwaitingCluster);
    assert_eq!(then.cluster_ref, Some("sb"));
}

#[test]
fn creating_resumes_a_cluster_it_created_and_recorded() {
    let obs = Observation {
        cluster: Some(cluster(ours(), None)),
        ..Observation::default()
    };
    let s = status("CreatingCluster", json!({"clusterRef": "sb"}));
    let p = plan_of(&doc(false), &s, &obs);
    let a = advanced_to(&p);
    assert_eq!(a.to, ExpansionStep::AwaitingCluster);
    assert_eq!(a.cluster_ref, Some("sb"));
}

#[test]
fn creating_refuses_a_cluster_labelled_ours_but_never_recorded() {
    let obs = Observation {
        cluster: Some(cluster(ours(), None)),
        ..Observation::default()
    };
    let p = plan_of(&doc(false), &status("CreatingCluster", json!({})), &obs);
    assert_eq!(failed_with(&p), "ClusterExists");
}

#[test]
fn creating_refuses_someone_elses_cluster() {
    let obs = Observation {
        cluster: Some(cluster(json!({CREATED_BY_LABEL: "other"}), None)),
        ..Observation::default()
    };
    let s = status("CreatingCluster", json!({"clusterRef": "sb"}));
    assert_eq!(
        failed_with(&plan_of(&doc(false), &s, &obs)),
        "ClusterExists"
    );
}

#[test]
fn a_growth_document_resolves_the_cluster_it_names() {
    let obs = Observation {
        cluster: Some(cluster(json!({}), Some("c-1"))),
        ..Observation::default()
    };
    let p = plan_of(&doc(true), &status("CreatingCluster", json!({})), &obs);
    assert_eq!(advanced_to(&p).cluster_ref, Some("sb"));
}

#[test]
fn a_growth_document_fails_when_its_cluster_is_missing() {
    let p = plan_of(
        &doc(true),
        &status("CreatingCluster", json!({})),
        &Observation::default(),
    );
    assert_eq!(failed_with(&p), "ClusterNotFound");
}

#[test]
fn awaiting_waits_for_the_control_plane_uuid() {
    let s = status("AwaitingCluster", json!({"clusterRef": "sb"}));
    for uuid in [None, Some("")] {
        let obs = Observation {
            cluster: Some(cluster(ours(), uuid)),
            ..Observation::default()
        };
        assert_eq!(
            waits(&plan_of(&doc(false), &s, &obs), None),
            None,
            "uuid {uuid:?}"
        );
    }
    let obs = Observation {
        cluster: Some(cluster(ours(), Some("c-1"))),
        ..Observation::default()
    };
    let p = plan_of(&doc(false), &s, &obs);
    assert_eq!(advanced_to(&p).to, ExpansionStep::CreatingNodes);
}

fn nodes_observed(existing: &[&str]) -> Observation {
    Observation {
        cluster: Some(cluster(ours(), Some("c-1"))),
        nodes: existing.iter().map(|w| (w.to_string(), 0)).collect(),
        ..Observation::default()
    }
}

#[test]
fn creating_nodes_creates_every_slot_of_a_new_cluster() {
    let s = status("CreatingNodes", json!({"clusterRef": "sb"}));
    let p = plan_of(&doc(false), &s, &nodes_observed(&[]));
    let (
        ExpansionCall::CreateNodes {
            cluster,
            nodes,
            then,
        },
        _,
    ) = calls(&p)
    else {
        panic!("not a create: {p:?}");
    };
    assert_eq!(cluster, "sb");
    let names: Vec<String> = nodes.iter().map(|n| n.name_any()).collect();
    assert_eq!(names, node_names());
    let then = advance_of(then);
    assert_eq!(then.to, ExpansionStep::Activating);
    assert_eq!(then.node_refs, Some(&node_names()));
}

#[test]
fn creating_nodes_creates_only_the_missing_slots_and_records_them_all() {
    let s = status("CreatingNodes", json!({"clusterRef": "sb"}));
    let p = plan_of(&doc(false), &s, &nodes_observed(&["w1", "w3"]));
    let (ExpansionCall::CreateNodes { nodes, then, .. }, _) = calls(&p) else {
        panic!("not a create: {p:?}");
    };
    let workers: Vec<&str> = nodes.iter().map(|n| n.spec.worker_node.as_str()).collect();
    assert_eq!(workers, ["w2"]);
    let then = advance_of(then);
    assert_eq!(then.node_refs, Some(&node_names()));
    assert_eq!(then.message, "waiting for 3 storage node(s) to come online");
}

#[test]
fn creating_nodes_advances_when_every_slot_has_its_node() {
    let s = status("CreatingNodes", json!({"clusterRef": "sb"}));
    let p = plan_of(&doc(false), &s, &nodes_observed(&WORKERS));
    let a = advanced_to(&p);
    assert_eq!(a.to, ExpansionStep::Activating);
    assert_eq!(a.node_refs, Some(&node_names()));
}

#[test]
fn creating_nodes_fails_when_the_cluster_disappeared() {
    let s = status("CreatingNodes", json!({"clusterRef": "sb"}));
    let p = plan_of(&doc(false), &s, &Observation::default());
    assert_eq!(failed_with(&p), "ClusterNotFound");
}

/// The expansion ends Expanded with nothing more to request.
fn finishes_without_activation(p: &NotedExpansion) -> bool {
    p.notes.is_empty()
        && matches!(&p.plan, Plan::Succeed { message, kind_status: None }
            if message == "expanded: StorageCluster sb with 3 storage node(s)")
}

fn activating(message: Option<&str>) -> ClusterDeploymentConfigStatus {
    status(
        "Activating",
        json!({"clusterRef": "sb", "nodeRefs": node_names(), "message": message}),
    )
}

fn phases(online: usize) -> Observation {
    Observation {
        phases: node_names()
            .into_iter()
            .enumerate()
            .map(|(i, n)| {
                let phase = if i < online {
                    NodePhase::Online
                } else {
                    NodePhase::Provisioning
                };
                (n, phase)
            })
            .collect(),
        ..Observation::default()
    }
}

#[test]
fn activating_announces_each_new_count_of_online_nodes() {
    let p = plan_of(&doc(false), &activating(None), &phases(2));
    assert_eq!(
        waits(&p, None),
        Some("2/3 storage node(s) online; waiting for the rest")
    );
}

#[test]
fn activating_waits_quietly_on_an_unchanged_count() {
    let said = "2/3 storage node(s) online; waiting for the rest";
    let s = activating(Some(said));
    let p = plan_of(&doc(false), &s, &phases(2));
    assert_eq!(waits(&p, Some(said)), None);
}

#[test]
fn activating_requests_the_activation_of_a_new_cluster() {
    let p = plan_of(&doc(false), &activating(None), &phases(3));
    let (ExpansionCall::Activate { op, then }, message) = calls(&p) else {
        panic!("no activation: {p:?}");
    };
    // Requested, the expansion ends Expanded with the same message.
    assert!(
        matches!(&**then, Plan::Succeed { message: m, kind_status: None } if m == message),
        "{then:?}"
    );
    assert_eq!(op.name_any(), "sb-activate");
    assert_eq!(op.spec.cluster_ref, "sb");
    assert_eq!(op.spec.action, ClusterAction::Activate);
    let owner = op.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owner.first().map(|o| o.uid.as_str()), Some("d-uid"));
    assert_eq!(
        message,
        "expanded: StorageCluster sb with 3 storage node(s)"
    );
}

#[test]
fn activating_does_not_request_an_activation_twice() {
    let mut obs = phases(3);
    obs.activation_requested = true;
    let p = plan_of(&doc(false), &activating(None), &obs);
    assert!(finishes_without_activation(&p), "{p:?}");
}

#[test]
fn a_growth_document_finishes_without_an_activation() {
    let p = plan_of(&doc(true), &activating(None), &phases(3));
    assert!(finishes_without_activation(&p), "{p:?}");
}

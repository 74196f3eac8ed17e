//! The steps' plans over observations, without an API server or a control plane.

use crate::runtime::ops::StepGraphs;
use jiff::Timestamp;
use serde_json::json;
use simplyblock_controlplane::Cluster;

use super::*;
use ClusterOpsStep::*;
use simplyblock_api::storage_cluster_ops::GRAPHS;

fn now() -> Timestamp {
    Timestamp::from_second(1_000_000).expect("ts")
}

fn op(action: &str, step: Option<&str>, extra: serde_json::Value) -> StorageClusterOps {
    let mut status = json!({"phase": "Running"});
    if let Some(step) = step {
        status["step"] = json!({"state": step});
    }
    if let Some(rr) = extra.get("rollingRestart") {
        status["rollingRestart"] = rr.clone();
    }
    let mut spec = json!({"clusterRef": "sb", "action": action});
    if let Some(s) = extra.get("spec") {
        for (k, v) in s.as_object().expect("spec") {
            spec[k] = v.clone();
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageClusterOps",
        "metadata": {"name": "op", "namespace": "ns"},
        "spec": spec, "status": status,
    }))
    .expect("op")
}

fn target(stripe: (i32, i32)) -> StorageCluster {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
        "metadata": {"name": "sb", "namespace": "ns"},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 4,
                 "stripe": {"dataChunks": stripe.0, "parityChunks": stripe.1}},
    }))
    .expect("cluster")
}

fn uuid(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

fn node(n: u128, status: NodeStatus) -> CpNode {
    CpNode {
        id: uuid(n),
        status,
        hostname: format!("w{n}"),
        ..CpNode::default()
    }
}

fn world(status: ClusterStatus, nodes: Vec<CpNode>) -> Observed {
    Observed {
        uuid: Some(uuid(99)),
        cluster: Some(Cluster {
            id: uuid(99),
            status,
            ..Cluster::default()
        }),
        nodes,
        ..Observed::default()
    }
}

fn plan_of(
    op: &StorageClusterOps,
    t: &StorageCluster,
    obs: &Observed,
) -> Plan<ClusterOpsStep, Call, Fields> {
    let m = StepGraphs::<StorageClusterOps>::default()
        .restore(op, now())
        .expect("machine");
    plan(op, t, &m, obs, now())
}

fn online(n: u128) -> Vec<CpNode> {
    (1..=n).map(|i| node(i, NodeStatus::Online)).collect()
}

#[test]
fn activate_calls_once_the_stripe_has_its_nodes() {
    let o = op("Activate", Some("Requesting"), json!({}));
    let t = target((1, 1));
    let p = plan_of(&o, &t, &world(ClusterStatus::Unready, online(3)));
    assert!(
        matches!(
            p,
            Plan::Call {
                call: Call::Activate(_),
                ..
            }
        ),
        "{p:?}"
    );
}

#[test]
fn activate_holds_on_the_stripe_gate() {
    let o = op("Activate", Some("Requesting"), json!({}));
    let p = plan_of(
        &o,
        &target((2, 1)),
        &world(ClusterStatus::Unready, online(3)),
    );
    let Plan::Wait { message, event, .. } = p else {
        panic!("held: {p:?}");
    };
    assert_eq!(event, Some("StripeNodesNotReady"));
    assert!(
        message.contains("at least 4 online storage nodes and 3 are online"),
        "{message}"
    );
}

#[test]
fn activate_skips_the_gate_and_the_call_when_already_active_or_activating() {
    let o = op("Activate", Some("Requesting"), json!({}));
    for status in [ClusterStatus::Active, ClusterStatus::InActivation] {
        let p = plan_of(&o, &target((4, 2)), &world(status, online(1)));
        assert!(
            matches!(
                p,
                Plan::Advance {
                    to: Move::To(Awaiting),
                    ..
                }
            ),
            "{p:?}"
        );
    }
    let o = op("Activate", Some("Awaiting"), json!({}));
    assert!(matches!(
        plan_of(
            &o,
            &target((1, 1)),
            &world(ClusterStatus::InActivation, online(3))
        ),
        Plan::Wait { .. }
    ));
    assert!(matches!(
        plan_of(
            &o,
            &target((1, 1)),
            &world(ClusterStatus::Active, online(3))
        ),
        Plan::Succeed { .. }
    ));
}

#[test]
fn a_cluster_without_an_id_waits() {
    let o = op("Activate", None, json!({}));
    let p = plan_of(&o, &target((1, 1)), &Observed::default());
    assert!(matches!(p, Plan::Wait { .. }), "{p:?}");
}

#[test]
fn shutdown_skips_the_call_when_the_nodes_are_going_down() {
    let t = target((1, 1));
    let o = op("Shutdown", Some("Requesting"), json!({}));
    assert!(matches!(
        plan_of(&o, &t, &world(ClusterStatus::Active, online(3))),
        Plan::Call {
            call: Call::Shutdown(_),
            ..
        }
    ));
    let going = vec![
        node(1, NodeStatus::InShutdown),
        node(2, NodeStatus::Offline),
    ];
    assert!(matches!(
        plan_of(&o, &t, &world(ClusterStatus::Active, going.clone())),
        Plan::Advance {
            to: Move::To(Awaiting),
            ..
        }
    ));
    let o = op("Shutdown", Some("Awaiting"), json!({}));
    assert!(matches!(
        plan_of(&o, &t, &world(ClusterStatus::Active, going)),
        Plan::Wait { .. }
    ));
    let down = vec![node(1, NodeStatus::Offline), node(2, NodeStatus::Offline)];
    assert!(matches!(
        plan_of(&o, &t, &world(ClusterStatus::Suspended, down)),
        Plan::Succeed { .. }
    ));
}

#[test]
fn restart_shuts_down_then_starts() {
    let t = target((1, 1));
    let o = op("Restart", None, json!({}));
    assert!(matches!(
        plan_of(&o, &t, &world(ClusterStatus::Active, online(2))),
        Plan::Call {
            call: Call::Shutdown(_),
            ..
        }
    ));
    let down = vec![node(1, NodeStatus::Offline), node(2, NodeStatus::Offline)];
    assert!(matches!(
        plan_of(&o, &t, &world(ClusterStatus::Suspended, down.clone())),
        Plan::Advance {
            to: Move::To(Starting),
            ..
        }
    ));
    let o = op("Restart", Some("Starting"), json!({}));
    assert!(matches!(
        plan_of(&o, &t, &world(ClusterStatus::Suspended, down)),
        Plan::Call {
            call: Call::Start(_),
            ..
        }
    ));
    let starting = vec![node(1, NodeStatus::InRestart), node(2, NodeStatus::Online)];
    assert!(matches!(
        plan_of(&o, &t, &world(ClusterStatus::Suspended, starting)),
        Plan::Wait { .. }
    ));
    assert!(matches!(
        plan_of(&o, &t, &world(ClusterStatus::Active, online(2))),
        Plan::Succeed { .. }
    ));
}

#[test]
fn cancel_task_succeeds_once_the_task_is_not_open() {
    let t = target((1, 1));
    let task = uuid(7);
    let spec = json!({"spec": {"cancelTask": {"taskID": task.to_string()}}});
    let open = Task {
        id: task,
        status: TaskStatus::Running,
        ..Task::default()
    };
    let mut w = world(ClusterStatus::Active, vec![]);
    w.tasks = vec![open.clone()];
    let o = op("CancelTask", Some("Requesting"), spec.clone());
    // One call, Awaiting written first: a look while the task is still open never
    // cancels again.
    assert!(matches!(
        plan_of(&o, &t, &w),
        Plan::CallOnce {
            to: Awaiting,
            call: Call::CancelTask(_, _),
            ..
        }
    ));
    let o = op("CancelTask", Some("Awaiting"), spec.clone());
    assert!(matches!(plan_of(&o, &t, &w), Plan::Wait { .. }));
    w.tasks = vec![Task {
        status: TaskStatus::Done,
        ..open
    }];
    assert!(matches!(plan_of(&o, &t, &w), Plan::Succeed { .. }));
    let bad = op(
        "CancelTask",
        None,
        json!({"spec": {"cancelTask": {"taskID": "nope"}}}),
    );
    assert!(matches!(plan_of(&bad, &t, &w), Plan::Fail(_)));
}

fn rr(index: i32, refresh: bool) -> serde_json::Value {
    json!({
        "rollingRestart": {"nodes": [uuid(1).to_string(), uuid(2).to_string()], "nodeIndex": index},
        "spec": {"rollingRestart": {"refreshSNodeAPI": refresh}},
    })
}

#[test]
fn rolling_restart_writes_its_node_list_first() {
    let o = op("RollingRestart", None, json!({}));
    let p = plan_of(
        &o,
        &target((1, 1)),
        &world(ClusterStatus::Active, online(2)),
    );
    let Plan::Record { kind_status, .. } = p else {
        panic!("recorded: {p:?}");
    };
    assert_eq!(
        json!(kind_status)["rollingRestart"],
        json!({"nodes": [uuid(1).to_string(), uuid(2).to_string()], "nodeIndex": 0})
    );
}

#[test]
fn rolling_restart_holds_for_peers_and_names_the_node() {
    let o = op("RollingRestart", Some("CheckingPeers"), rr(0, false));
    let nodes = vec![node(1, NodeStatus::Online), node(2, NodeStatus::Offline)];
    let Plan::Wait { message, event, .. } =
        plan_of(&o, &target((1, 1)), &world(ClusterStatus::Active, nodes))
    else {
        panic!("held");
    };
    assert_eq!(event, Some("PeerNodeNotOnline"));
    assert!(
        message.starts_with(&format!("Node 1/2 ({}): waiting for peer nodes", uuid(1))),
        "{message}"
    );
}

#[test]
fn rolling_restart_walks_one_node() {
    let t = target((1, 1));
    let step = |s: &str, nodes: Vec<CpNode>, refresh: bool| {
        plan_of(
            &op("RollingRestart", Some(s), rr(0, refresh)),
            &t,
            &world(ClusterStatus::Active, nodes),
        )
    };
    let n1 = |s| vec![node(1, s), node(2, NodeStatus::Online)];
    assert!(matches!(
        step("CheckingPeers", online(2), false),
        Plan::Advance {
            to: Move::To(ShuttingDownNode),
            ..
        }
    ));
    assert!(matches!(
        step("ShuttingDownNode", online(2), false),
        Plan::Call {
            call: Call::ShutdownNode(_, _),
            ..
        }
    ));
    assert!(matches!(
        step("ShuttingDownNode", n1(NodeStatus::InShutdown), false),
        Plan::Wait { .. }
    ));
    assert!(matches!(
        step("ShuttingDownNode", n1(NodeStatus::Offline), false),
        Plan::Advance {
            to: Move::To(RestartingNode),
            ..
        }
    ));
    assert!(matches!(
        step("ShuttingDownNode", n1(NodeStatus::Offline), true),
        Plan::Advance {
            to: Move::To(RefreshingPod),
            ..
        }
    ));
    assert!(matches!(
        step("RestartingNode", n1(NodeStatus::Offline), false),
        Plan::Call {
            call: Call::RestartNode(_, _),
            ..
        }
    ));
    assert!(matches!(
        step("RestartingNode", n1(NodeStatus::InRestart), false),
        Plan::Wait { .. }
    ));
    assert!(matches!(
        step("RestartingNode", online(2), false),
        Plan::Advance {
            to: Move::To(Rebalancing),
            ..
        }
    ));
    let Plan::Advance {
        to,
        kind_status,
        message,
    } = step("Rebalancing", online(2), false)
    else {
        panic!("next node");
    };
    assert_eq!(to, Move::To(CheckingPeers));
    assert_eq!(
        json!(kind_status.expect("index"))["rollingRestart"]["nodeIndex"],
        json!(1)
    );
    assert!(message.starts_with("Node 2/2"), "{message}");
    // The last node's rebalance ends the operation.
    let last = op("RollingRestart", Some("Rebalancing"), rr(1, false));
    let Plan::Succeed { kind_status, .. } =
        plan_of(&last, &t, &world(ClusterStatus::Active, online(2)))
    else {
        panic!("done");
    };
    assert_eq!(
        json!(kind_status.expect("index"))["rollingRestart"]["nodeIndex"],
        json!(2)
    );
}

#[test]
fn rebalancing_holds_the_node_index() {
    let o = op("RollingRestart", Some("Rebalancing"), rr(0, false));
    let mut w = world(ClusterStatus::Active, online(2));
    if let Some(c) = w.cluster.as_mut() {
        c.is_re_balancing = true;
    }
    assert!(matches!(
        plan_of(&o, &target((1, 1)), &w),
        Plan::Wait { .. }
    ));
}

#[test]
fn refreshing_deletes_only_pods_older_than_the_step() {
    let t = target((1, 1));
    let o = op("RollingRestart", Some("RefreshingPod"), rr(0, true));
    let m = StepGraphs::<StorageClusterOps>::default()
        .restore(&o, now())
        .expect("machine");
    let entered = ops::step_entered(&m).expect("entered");
    let pod = |name: &str, created: Timestamp, ready| PodView {
        name: name.into(),
        created: Some(created),
        ready,
        deleting: false,
    };
    let mut w = world(
        ClusterStatus::Active,
        vec![node(1, NodeStatus::Offline), node(2, NodeStatus::Online)],
    );
    // No pod at all (no kubelet): gone.
    assert!(matches!(
        plan(&o, &t, &m, &w, now()),
        Plan::Advance {
            to: Move::To(AwaitingPod),
            ..
        }
    ));
    w.pods = vec![pod(
        "old",
        entered - jiff::SignedDuration::from_secs(60),
        true,
    )];
    assert_eq!(
        plan(&o, &t, &m, &w, now()),
        Plan::Call {
            call: Call::DeletePods(vec!["old".into()]),
            message: format!("Node 1/2 ({}): RefreshingPod", uuid(1)),
        }
    );
    w.pods = vec![pod(
        "new",
        entered + jiff::SignedDuration::from_secs(5),
        false,
    )];
    assert!(matches!(
        plan(&o, &t, &m, &w, now()),
        Plan::Advance {
            to: Move::To(AwaitingPod),
            ..
        }
    ));
    let o = op("RollingRestart", Some("AwaitingPod"), rr(0, true));
    let m = StepGraphs::<StorageClusterOps>::default()
        .restore(&o, now())
        .expect("machine");
    let Plan::Wait { message, .. } = plan(&o, &t, &m, &w, now()) else {
        panic!("waits for Ready");
    };
    assert!(
        message.contains("no Ready storage-node pod of cluster sb on worker w1"),
        "{message}"
    );
    w.pods[0].ready = true;
    assert!(matches!(
        plan(&o, &t, &m, &w, now()),
        Plan::Advance {
            to: Move::To(RestartingNode),
            ..
        }
    ));
}

#[test]
fn refreshing_deletes_only_after_the_entry_second() {
    // Entered 300 ms into a second: the entry reads as the next whole second, and a
    // replacement made before then would carry the earlier second and look old.
    let t = target((1, 1));
    let o = op("RollingRestart", Some("RefreshingPod"), rr(0, true));
    let mid = now() + jiff::SignedDuration::from_millis(300);
    let m = StepGraphs::<StorageClusterOps>::default()
        .restore(&o, mid)
        .expect("machine");
    let entered = ops::step_entered(&m).expect("entered");
    assert_eq!(entered, now() + jiff::SignedDuration::from_secs(1));
    let mut w = world(
        ClusterStatus::Active,
        vec![node(1, NodeStatus::Offline), node(2, NodeStatus::Online)],
    );
    w.pods = vec![PodView {
        name: "old".into(),
        created: Some(now() - jiff::SignedDuration::from_secs(60)),
        ready: true,
        deleting: false,
    }];
    let Plan::Wait { after, .. } = plan(&o, &t, &m, &w, mid) else {
        panic!("deleted within the entry's second");
    };
    assert_eq!(after, Duration::from_millis(700));
    assert_eq!(
        plan(&o, &t, &m, &w, entered),
        Plan::Call {
            call: Call::DeletePods(vec!["old".into()]),
            message: format!("Node 1/2 ({}): RefreshingPod", uuid(1)),
        }
    );
    // A replacement made in the entry's next second is not old.
    w.pods[0].name = "new".into();
    w.pods[0].created = Some(entered);
    assert!(matches!(
        plan(&o, &t, &m, &w, entered),
        Plan::Advance {
            to: Move::To(AwaitingPod),
            ..
        }
    ));
}

#[test]
fn an_unknown_stored_step_cannot_be_restored() {
    let o = op("Activate", Some("Rebalancing"), json!({}));
    assert!(
        StepGraphs::<StorageClusterOps>::default()
            .restore(&o, now())
            .is_err()
    );
}

/// The defect: the cluster reads active before an accepted expansion starts, so a second
/// look in Requesting called expand again.
#[test]
fn expand_records_awaiting_before_its_one_call_and_awaiting_never_calls() {
    let t = target((1, 1));
    let requesting = op("Expand", Some("Requesting"), json!({}));
    let p = plan_of(&requesting, &t, &world(ClusterStatus::Active, online(3)));
    let Plan::CallOnce {
        to, call, message, ..
    } = p
    else {
        panic!("a call recorded first: {p:?}");
    };
    assert_eq!((to, call), (Awaiting, Call::Expand(uuid(99))));
    assert_eq!(message, EXPAND_PENDING);
    // Already expanding: no call at all.
    let p = plan_of(
        &requesting,
        &t,
        &world(ClusterStatus::InExpansion, online(3)),
    );
    assert!(
        matches!(
            p,
            Plan::Advance {
                to: Move::To(Awaiting),
                ..
            }
        ),
        "{p:?}"
    );

    let mut accepted = op("Expand", Some("Awaiting"), json!({}));
    accepted.status.as_mut().expect("status").message =
        Some("the control plane accepted the expansion; waiting for active".into());
    for (status, done) in [
        (ClusterStatus::Active, true),
        (ClusterStatus::InExpansion, false),
        (ClusterStatus::Unready, false),
    ] {
        let p = plan_of(&accepted, &t, &world(status, online(3)));
        assert!(
            !matches!(p, Plan::Call { .. } | Plan::CallOnce { .. }),
            "{p:?}"
        );
        assert_eq!(matches!(p, Plan::Succeed { .. }), done, "{status}: {p:?}");
    }

    // Only the record, and the cluster active: the call may or may not have gone out. A
    // read just after the record waits for the answer's record; later it fails.
    let mut pending = op("Expand", Some("Awaiting"), json!({}));
    pending.status.as_mut().expect("status").message = Some(EXPAND_PENDING.into());
    let budget = GRAPHS
        .graph(ClusterAction::Expand)
        .expect("graph")
        .deadline(Awaiting)
        .expect("deadline");
    let entered_at = |secs: i64| {
        let mut o = pending.clone();
        let deadline = now()
            .checked_sub(jiff::SignedDuration::from_secs(secs))
            .expect("ts")
            .checked_add(budget)
            .expect("ts");
        o.status.as_mut().expect("status").step.deadline = Some(deadline);
        o
    };
    for status in [ClusterStatus::Active, ClusterStatus::Degraded] {
        let p = plan_of(&entered_at(1), &t, &world(status, online(3)));
        let Plan::Wait { message, .. } = p else {
            panic!("waits: {p:?}");
        };
        // The wait keeps the record, so the next look still knows.
        assert!(message.ends_with(EXPAND_PENDING), "{message}");
    }
    let p = plan_of(
        &entered_at(60),
        &t,
        &world(ClusterStatus::Active, online(3)),
    );
    let Plan::Fail(why) = p else {
        panic!("unknown outcome fails: {p:?}");
    };
    assert!(why.contains("not repeated"), "{why}");
    let p = plan_of(&pending, &t, &world(ClusterStatus::InExpansion, online(3)));
    assert!(matches!(p, Plan::Wait { .. }), "{p:?}");
}

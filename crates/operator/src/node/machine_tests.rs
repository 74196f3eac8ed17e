//! The provisioning plan over observations, without an API server or a control plane:
//! given this step and this observation, the next thing is that.

use jiff::Timestamp;
use serde_json::json;
use simplyblock_api::storage_node::PROVISIONING_GRAPH;
use simplyblock_controlplane::Uuid;
use simplyblock_statemachine::State;

use super::*;
use ProvisioningCall::*;
use ProvisioningStep::*;

fn now() -> Timestamp {
    Timestamp::from_second(1_767_225_600).expect("ts")
}

fn cluster(failure_domains: bool) -> StorageCluster {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
        "metadata": {"name": "sb", "namespace": "ns"},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 4, "enableFailureDomains": failure_domains},
    }))
    .expect("cluster")
}

fn node_at(slot: i32, config: serde_json::Value) -> StorageNode {
    let mut c = json!({"sizing": {"vcpuCount": 4}});
    c.as_object_mut()
        .expect("object")
        .extend(config.as_object().cloned().unwrap_or_default());
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNode",
        "metadata": {"name": format!("sb-w1-{slot}"), "namespace": "ns"},
        "spec": {"clusterRef": "sb", "workerNode": "w1", "slot": slot, "config": c},
    }))
    .expect("node")
}

fn node() -> StorageNode {
    node_at(0, json!({}))
}

/// The worker's control-plane nodes, one per slot.
fn backend(count: u128) -> Vec<CpNode> {
    (0..count)
        .map(|n| CpNode {
            id: Uuid::from_u128(n + 1),
            hostname: "w1".into(),
            rpc_port: 8080 + n as u16,
            ..CpNode::default()
        })
        .collect()
}

fn next(step: ProvisioningStep, node: &StorageNode, observed: Observation) -> ProvisioningPlan {
    plan(step, node, &cluster(false), &observed, now())
}

fn advance_to(to: ProvisioningStep) -> impl Fn(&ProvisioningPlan) -> bool {
    move |p| matches!(&p.plan, Plan::Advance { to: Move::To(t), .. } if *t == to)
}

/// A hold's reason and when it looks again: a wait whose message is said with an event
/// of that reason.
fn held(plan: &ProvisioningPlan) -> (&'static str, Duration) {
    match (&plan.plan, plan.notes.as_slice()) {
        (Plan::Wait { message, after, .. }, [note]) => {
            assert_eq!(&note.message, message, "the event says the hold's message");
            assert!(!note.warning, "a hold is no warning");
            (note.reason, *after)
        }
        _ => panic!("expected a hold, got {plan:?}"),
    }
}

fn held_saying(plan: &ProvisioningPlan) -> &str {
    match &plan.plan {
        Plan::Wait { message, .. } => message,
        other => panic!("expected a hold, got {other:?}"),
    }
}

/// The call a plan issues, with its message.
fn calls(plan: &ProvisioningPlan) -> (&ProvisioningCall, &str) {
    match &plan.plan {
        Plan::Call { call, message } => (call, message),
        other => panic!("expected a call, got {other:?}"),
    }
}

/// A wait with nothing new to say, looked at again after `after`.
fn quiet(after: Duration) -> ProvisioningPlan {
    bare(Plan::quiet(None, after))
}

/// A plan without events.
fn bare(plan: Plan<ProvisioningStep, ProvisioningCall, ()>) -> ProvisioningPlan {
    plan.into()
}

fn away() -> Observation {
    Observation {
        worker_away: Some("worker w1 is cordoned".into()),
        ..Observation::default()
    }
}

#[test]
fn checking_host_waits_for_the_api_then_adopts_or_checks_the_config() {
    let unreachable = Observation {
        host_unreachable: Some("connection refused".into()),
        ..Observation::default()
    };
    let p = next(CheckingHost, &node(), unreachable);
    assert_eq!(held(&p), ("HostUnreachable", requeue::CONFLICT));
    assert!(held_saying(&p).contains("connection refused"));

    let fresh = next(CheckingHost, &node(), Observation::default());
    assert!(advance_to(CheckingConfig)(&fresh), "{fresh:?}");

    // A node already at this slot of the worker is adopted; one at a lower slot only is not.
    let at = |slot, count| {
        let observed = Observation {
            backend: backend(count),
            ..Observation::default()
        };
        next(CheckingHost, &node_at(slot, json!({})), observed)
    };
    assert!(advance_to(Adopting)(&at(0, 1)));
    assert!(advance_to(CheckingConfig)(&at(1, 1)));
    assert!(advance_to(Adopting)(&at(1, 2)));
}

#[test]
fn checking_config_holds_a_node_without_a_failure_domain_where_the_cluster_needs_one() {
    let check = |failure_domains, config| {
        plan(
            CheckingConfig,
            &node_at(0, config),
            &cluster(failure_domains),
            &Observation::default(),
            now(),
        )
    };
    let missing = check(true, json!({}));
    assert_eq!(held(&missing), ("FailureDomainMissing", requeue::RESYNC));
    let named = check(true, json!({"failureDomain": "1"}));
    assert!(advance_to(AwaitingSlot)(&named), "{named:?}");
    let unused = check(false, json!({}));
    assert!(advance_to(AwaitingSlot)(&unused), "{unused:?}");
}

fn slot(worker: &str, node: &str) -> ProvisioningSlot {
    ProvisioningSlot {
        worker: worker.into(),
        node: node.into(),
        taken_at: Time(Timestamp::UNIX_EPOCH),
    }
}

fn contender(worker: &str) -> Contender {
    Contender {
        name: format!("sb-{worker}-0"),
        worker: worker.into(),
        slot: 0,
        provisioning: true,
        awaiting_slot: true,
        away: false,
        created: 1_767_225_600,
    }
}

fn slots(budget: i32, slots: Vec<ProvisioningSlot>, waiting: &[&str]) -> Observation {
    Observation {
        slots: Some(SlotInputs {
            cluster_version: Some("41".into()),
            budget,
            slots,
            contenders: waiting.iter().map(|w| contender(w)).collect(),
        }),
        ..Observation::default()
    }
}

#[test]
fn awaiting_slot_claims_a_free_slot_under_the_clusters_version() {
    let p = next(AwaitingSlot, &node(), slots(1, vec![], &["w1", "w2"]));
    let (
        TakeSlot {
            slots: claim,
            cluster_version,
        },
        message,
    ) = calls(&p)
    else {
        panic!("expected a claim, got {p:?}");
    };
    assert_eq!(message, "adding worker w1 to the control plane");
    assert_eq!(cluster_version.as_deref(), Some("41"));
    assert_eq!(
        *claim,
        [ProvisioningSlot {
            worker: "w1".into(),
            node: "sb-w1-0".into(),
            taken_at: Time(now()),
        }]
    );
}

#[test]
fn awaiting_slot_rides_on_its_workers_claim_and_moves_into_posting() {
    let mine = slots(1, vec![slot("w1", "sb-w1-0")], &["w1"]);
    let p = next(AwaitingSlot, &node_at(1, json!({})), mine);
    assert!(advance_to(Posting)(&p), "{p:?}");
}

#[test]
fn awaiting_slot_holds_while_the_budget_is_full_or_the_cluster_is_gone() {
    let full = slots(1, vec![slot("w2", "sb-w2-0")], &["w1", "w2"]);
    let p = next(AwaitingSlot, &node(), full);
    assert_eq!(held(&p), ("AwaitingSlot", requeue::CONFLICT));
    assert!(held_saying(&p).contains("nodeProvisioningBudget"));
    // An earlier worker in line goes first.
    let mut behind = slots(1, vec![], &["w1", "w0"]);
    if let Some(inputs) = behind.slots.as_mut() {
        inputs.contenders[1].created -= 60;
    }
    assert_eq!(
        held(&next(AwaitingSlot, &node(), behind)),
        ("AwaitingSlot", requeue::CONFLICT)
    );
    let gone = next(AwaitingSlot, &node(), Observation::default());
    assert_eq!(held(&gone), ("AwaitingSlot", requeue::CONFLICT));
    assert_eq!(held_saying(&gone), "the cluster is gone");
}

#[test]
fn posting_sends_the_add_only_when_nothing_shows_it_was_sent() {
    let p = next(Posting, &node(), Observation::default());
    assert!(matches!(calls(&p), (SendAdd, message) if message.contains("worker w1's node")));
    for nothing_open in [AddWindow::EndedWithoutNode, AddWindow::Succeeded] {
        let observed = Observation {
            add: Some(nothing_open),
            ..Observation::default()
        };
        assert!(matches!(
            calls(&next(Posting, &node(), observed)),
            (SendAdd, _)
        ));
    }
    let sent = [
        Observation {
            backend: backend(1),
            ..Observation::default()
        },
        Observation {
            sibling_posted: true,
            ..Observation::default()
        },
        Observation {
            add: Some(AddWindow::Open),
            ..Observation::default()
        },
    ];
    for observed in sent {
        let p = next(Posting, &node(), observed.clone());
        assert!(advance_to(Resolving)(&p), "{observed:?} gave {p:?}");
    }
}

#[test]
fn posting_waits_out_an_away_worker_without_sending() {
    let p = next(Posting, &node(), away());
    assert_eq!(
        p,
        bare(Plan::Advance {
            to: Move::To(AwaitingWorker),
            message: "worker w1 is cordoned".into(),
            kind_status: None,
        })
    );
    // The worker is looked at again at the resync, every other move at once.
    assert_eq!(after_advance(AwaitingWorker), requeue::RESYNC);
    for &step in ProvisioningStep::ALL {
        if step != AwaitingWorker {
            assert_eq!(after_advance(step), requeue::NEXT_STEP, "{step}");
        }
    }
}

#[test]
fn resolving_records_the_node_once_the_add_is_closed() {
    let resolving = |slot, count, add| {
        let observed = Observation {
            backend: backend(count),
            add: Some(add),
            ..Observation::default()
        };
        next(Resolving, &node_at(slot, json!({})), observed)
    };
    assert_eq!(resolving(0, 1, AddWindow::Open), quiet(RESOLVE_POLL));
    let second = backend(2).remove(1);
    let message = format!("created in the control plane as {}", second.id);
    assert_eq!(
        resolving(1, 2, AddWindow::Succeeded),
        bare(Plan::Call {
            call: Record { found: second },
            message,
        })
    );
    // A node at the slot is the add's outcome, whatever the task says of the add.
    assert!(matches!(
        calls(&resolving(0, 1, AddWindow::EndedWithoutNode)),
        (Record { .. }, _)
    ));
    // Nothing at this slot yet: wait, unless the add is over without a node.
    assert_eq!(resolving(1, 1, AddWindow::Open), quiet(RESOLVE_POLL));
    assert_eq!(resolving(1, 1, AddWindow::Succeeded), quiet(RESOLVE_POLL));
    let again = resolving(0, 0, AddWindow::EndedWithoutNode);
    assert!(advance_to(Posting)(&again), "{again:?}");
}

#[test]
fn awaiting_worker_looks_again_until_the_worker_is_back() {
    assert_eq!(
        next(AwaitingWorker, &node(), away()),
        quiet(requeue::RESYNC)
    );
    let back = next(AwaitingWorker, &node(), Observation::default());
    assert!(advance_to(CheckingHost)(&back), "{back:?}");
}

#[test]
fn adopting_records_the_node_at_the_slot_or_starts_over() {
    let observed = Observation {
        backend: backend(1),
        ..Observation::default()
    };
    let found = backend(1).remove(0);
    let message = format!("adopted control-plane node {}", found.id);
    assert_eq!(
        next(Adopting, &node(), observed),
        bare(Plan::Call {
            call: Adopt { found },
            message,
        })
    );
    assert_eq!(
        next(Adopting, &node(), Observation::default()),
        bare(Plan::Advance {
            to: Move::Restart,
            message: "nothing to adopt; adding the node".into(),
            kind_status: None,
        })
    );
}

#[test]
fn every_advance_is_an_edge_of_the_graph() {
    let observations = [
        Observation::default(),
        away(),
        Observation {
            backend: backend(1),
            add: Some(AddWindow::Succeeded),
            ..Observation::default()
        },
        Observation {
            add: Some(AddWindow::EndedWithoutNode),
            ..Observation::default()
        },
        slots(1, vec![slot("w1", "sb-w1-0")], &["w1"]),
    ];
    let mut edges = 0;
    for &step in ProvisioningStep::ALL {
        for observed in &observations {
            if let Plan::Advance {
                to: Move::To(to), ..
            } = next(step, &node(), observed.clone()).plan
            {
                assert!(PROVISIONING_GRAPH.allows(step, to), "{step} -> {to}");
                edges += 1;
            }
        }
    }
    assert!(edges >= 7, "only {edges} advances were planned");
}

#[test]
fn a_held_step_past_its_deadline_says_both_in_one_message() {
    let note = overdue_note(ProvisioningStep::AwaitingSlot);
    assert_eq!(
        note,
        "provisioning step AwaitingSlot outlived its deadline; still retrying"
    );
    let held = held_message("waiting for a node-add slot".into(), Some(&note));
    assert_eq!(held, format!("waiting for a node-add slot ({note})"));
    // Stable: the next pass writes the same message, so nothing changes and no event.
    assert_eq!(held_message(held.clone(), Some(&note)), held);
    assert_eq!(
        held_message("waiting".into(), None),
        "waiting",
        "in time, the reason alone"
    );
}

#[test]
fn a_hold_past_its_deadline_says_the_notice_in_its_message_and_event() {
    let note = overdue_note(ProvisioningStep::AwaitingSlot);
    let slot = || hold("AwaitingSlot", "waiting".into(), requeue::CONFLICT);
    let late = past_deadline(slot(), Some(&note));
    assert_eq!(held(&late), ("AwaitingSlot", requeue::CONFLICT));
    assert_eq!(held_saying(&late), format!("waiting ({note})"));
    assert_eq!(past_deadline(slot(), None), slot(), "in time, as planned");
    // A wait with nothing new to say, and a move, are no holds: they stay as they are.
    assert_eq!(
        past_deadline(quiet(RESOLVE_POLL), Some(&note)),
        quiet(RESOLVE_POLL)
    );
    let moves = || advance(Posting, "m".into());
    assert_eq!(past_deadline(moves(), Some(&note)), moves());
}

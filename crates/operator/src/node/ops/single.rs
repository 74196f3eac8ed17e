//! StorageNodeOps Shutdown, Suspend, Resume and Restart: one call on the node each, then
//! a wait for the control plane to report it where the call puts it. They read nothing
//! beside the node ([`Seen`]), and their call is the node call itself ([`NodeCall`]).
//!
//! | action | steps | call, skipped when | done when |
//! |---|---|---|---|
//! | Shutdown | Requesting → Awaiting | shutdown; offline, in_shutdown or in_restart | offline |
//! | Suspend | Requesting → Awaiting | suspend; suspended | suspended |
//! | Resume | Requesting → Awaiting | resume; online | online |
//! | Restart | Requesting → Departing → Awaiting | restart, once (Departing is written first); in_restart. Unforced only from offline | left online, then online |

use simplyblock_api::storage_node_ops::{NodeAction, NodeOpsStep, StorageNodeOps};
use simplyblock_controlplane::{NodeRestart, NodeStatus};

use super::step::{Fields, NodeCall, Seen, advance, settle, wait};
use crate::runtime::ops::Plan;

/// The one call of a single-call action.
pub type Call = NodeCall;

/// Words of a restart's record naming the node's status when the call went out.
const FROM: &str = "from status";

/// The next thing a step does, from one observation. Pure.
pub fn plan(
    op: &StorageNodeOps,
    step: NodeOpsStep,
    seen: &Seen,
) -> Plan<NodeOpsStep, Call, Fields> {
    use NodeAction as A;
    use NodeOpsStep::*;
    use NodeStatus as S;
    let action = op.spec.action;
    let name = &op.spec.node_ref;
    let Some(id) = seen.node else {
        return wait(format!(
            "StorageNode {name} has no control-plane id yet; waiting for it to be provisioned"
        ));
    };
    let Some(cluster) = seen.cluster else {
        return wait(format!(
            "the cluster of StorageNode {name} has no control-plane id; waiting for it"
        ));
    };
    let Some(node) = &seen.found else {
        return Plan::Fail(format!(
            "the control plane does not know node {id} (StorageNode {name}); nothing was called"
        ));
    };
    let status = node.status;
    match (action, step) {
        (A::Shutdown, Requesting) => {
            if matches!(status, S::Offline | S::InShutdown | S::InRestart) {
                return advance(
                    Awaiting,
                    format!("the node is {status}; no shutdown call needed"),
                );
            }
            Plan::Call {
                call: NodeCall::Shutdown(cluster, id),
                message: format!("shutting the node down (it is {status})"),
            }
        }
        (A::Shutdown, Awaiting) => settle(status, S::Offline, "shut down: the node is offline"),
        (A::Suspend, Requesting) => {
            if status == S::Suspended {
                return advance(Awaiting, "the node is suspended; no suspend call needed");
            }
            Plan::Call {
                call: NodeCall::Suspend(cluster, id),
                message: format!("suspending the node (it is {status})"),
            }
        }
        (A::Suspend, Awaiting) => settle(status, S::Suspended, "the node is suspended"),
        (A::Resume, Requesting) => {
            if status == S::Online {
                return advance(Awaiting, "the node is online; no resume call needed");
            }
            Plan::Call {
                call: NodeCall::Resume(cluster, id),
                message: format!("resuming the node (it is {status})"),
            }
        }
        (A::Resume, Awaiting) => settle(status, S::Online, "the node is online"),
        (A::Restart, Requesting) => {
            if status == S::InRestart {
                return advance(Departing, "the node is already restarting");
            }
            let force = op.spec.force.unwrap_or(false);
            if status != S::Offline && !force {
                return Plan::Fail(format!(
                    "the node is {status}: a restart without spec.force needs it offline (the control plane would accept the call and drop it); shut it down first, or create a Restart with force: true"
                ));
            }
            // The node may be back online before a look could see it leave, so no look can
            // tell whether the call went out: Departing is written first and never calls.
            Plan::CallOnce {
                to: Departing,
                call: NodeCall::Restart(
                    cluster,
                    id,
                    NodeRestart {
                        force,
                        reattach_volume: op.spec.reattach_volume.unwrap_or(false),
                        ..NodeRestart::default()
                    },
                ),
                message: format!("restarting the node {FROM} {status}"),
                accepted: format!(
                    "the control plane accepted the restart of the node {FROM} {status}; waiting for it to leave online"
                ),
            }
        }
        (A::Restart, Departing) => {
            // A node restarted from offline has nothing to leave: the record of the call
            // (written before it, kept by every wait) says where it started.
            let from_offline = op
                .status
                .as_ref()
                .and_then(|s| s.message.as_deref())
                .is_some_and(|m| m.contains(&format!("{FROM} {}", S::Offline)));
            if status == S::Online && !from_offline {
                return wait(format!(
                    "waiting for the node to leave online ({FROM} online)"
                ));
            }
            advance(
                Awaiting,
                format!("the node is {status}; waiting for it to come back online"),
            )
        }
        (A::Restart, Awaiting) => settle(status, S::Online, "restarted: the node is online"),
        (action, step) => Plan::Fail(format!(
            "step {step:?} is not one of action {}",
            simplyblock_statemachine::Action::name(action)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use NodeOpsStep::*;
    use simplyblock_controlplane::{StorageNode as CpNode, Uuid};

    fn op(action: &str, force: Option<bool>) -> StorageNodeOps {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNodeOps",
            "metadata": {"name": "op", "namespace": "ns"},
            "spec": {"nodeRef": "sb-w1-0", "action": action, "force": force},
        }))
        .expect("op")
    }

    fn seen(status: NodeStatus) -> Seen {
        Seen {
            cluster: Some(Uuid::from_u128(1)),
            node: Some(Uuid::from_u128(2)),
            found: Some(CpNode {
                status,
                ..CpNode::default()
            }),
        }
    }

    fn kind(plan: &Plan<NodeOpsStep, Call, Fields>) -> &'static str {
        match plan {
            Plan::Advance { .. } => "advance",
            Plan::Record { .. } => "record",
            Plan::Progress { .. } => "progress",
            Plan::Succeed { .. } => "succeed",
            Plan::Fail(_) => "fail",
            Plan::Call { .. } => "call",
            Plan::CallOnce { .. } => "call once",
            Plan::Wait { .. } => "wait",
        }
    }

    #[test]
    fn each_single_call_action_calls_unless_the_node_is_there_and_ends_when_it_is() {
        use NodeStatus::*;
        let table = [
            ("Shutdown", Online, Requesting, "call"),
            ("Shutdown", InShutdown, Requesting, "advance"),
            ("Shutdown", InRestart, Requesting, "advance"),
            ("Shutdown", InShutdown, Awaiting, "wait"),
            ("Shutdown", Offline, Awaiting, "succeed"),
            ("Suspend", Online, Requesting, "call"),
            ("Suspend", Suspended, Requesting, "advance"),
            ("Suspend", Suspended, Awaiting, "succeed"),
            ("Resume", Suspended, Requesting, "call"),
            ("Resume", Online, Requesting, "advance"),
            ("Resume", Suspended, Awaiting, "wait"),
            ("Resume", Online, Awaiting, "succeed"),
        ];
        for (action, status, step, want) in table {
            let got = plan(&op(action, None), step, &seen(status));
            assert_eq!(kind(&got), want, "{action} {status} {step:?}: {got:?}");
        }
    }

    #[test]
    fn a_restart_is_called_once_and_only_forced_from_anything_but_offline() {
        use NodeStatus::*;
        let unforced = plan(&op("Restart", None), Requesting, &seen(Online));
        let Plan::Fail(why) = unforced else {
            panic!("{unforced:?}")
        };
        assert!(why.contains("force"), "{why}");
        for (force, status) in [(None, Offline), (Some(true), Online)] {
            let got = plan(&op("Restart", force), Requesting, &seen(status));
            assert_eq!(kind(&got), "call once", "{force:?} {status}");
        }
        assert_eq!(
            kind(&plan(&op("Restart", None), Requesting, &seen(InRestart))),
            "advance"
        );
        assert_eq!(
            kind(&plan(&op("Restart", None), Departing, &seen(Online))),
            "wait"
        );
        assert_eq!(
            kind(&plan(&op("Restart", None), Departing, &seen(InRestart))),
            "advance"
        );
        assert_eq!(
            kind(&plan(&op("Restart", None), Awaiting, &seen(Online))),
            "succeed"
        );
    }

    #[test]
    fn a_node_restarted_from_offline_has_nothing_to_leave() {
        let Plan::CallOnce { accepted, .. } =
            plan(&op("Restart", None), Requesting, &seen(NodeStatus::Offline))
        else {
            panic!("a restart from offline is called")
        };
        let mut recorded = op("Restart", None);
        recorded.status = Some(simplyblock_api::storage_node_ops::StorageNodeOpsStatus {
            message: Some(accepted),
            ..Default::default()
        });
        // Back online before a look saw it go: it restarted.
        let got = plan(&recorded, Departing, &seen(NodeStatus::Online));
        assert_eq!(kind(&got), "advance", "{got:?}");
    }

    #[test]
    fn a_node_without_an_id_waits_and_one_the_control_plane_lost_fails() {
        let waiting = plan(&op("Shutdown", None), Requesting, &Seen::default());
        assert_eq!(kind(&waiting), "wait");
        let lost = Seen {
            found: None,
            ..seen(NodeStatus::Online)
        };
        assert_eq!(
            kind(&plan(&op("Shutdown", None), Requesting, &lost)),
            "fail"
        );
    }
}

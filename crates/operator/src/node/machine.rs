//! The provisioning machine of a StorageNode as a pure decision: given the step the node
//! is at and what one pass observed, the next thing to do.
//!
//! [`super::controller`] is the I/O around it: it observes (reads only, and only what the
//! step needs), asks [`plan`] for one [`Plan`] of the machine runtime, and the runtime
//! executes it (the status writes), with the controller's [`ProvisioningCall`]s (the slot
//! claim, the one node-add call, the record of the node).
//!
//! | step | done (advance) when | holds or waits while | call |
//! |---|---|---|---|
//! | CheckingHost | the storage-node API answers: to Adopting if the worker already has a node at this slot, else CheckingConfig | the API does not answer | |
//! | CheckingConfig | the config is complete | failure domains are on and the node names none | |
//! | AwaitingSlot | the worker holds a node-add slot | the budget is full, or others are ahead | claim a slot |
//! | Posting | the add is sent, or its effect is there (nodes of the worker, a sibling that posted, an open add) | | node add |
//! | Resolving | the node is at this slot and the add is closed | the add is open, or nothing is there yet | |
//! | AwaitingWorker | the worker's Node is back | it is gone, NotReady or cordoned | |
//! | Adopting | the node at this slot is recorded (none: the machine restarts) | | |

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use simplyblock_api::storage_cluster::ProvisioningSlot;
use simplyblock_api::storage_node::ProvisioningStep;
use simplyblock_api::{StorageCluster, StorageNode};
use simplyblock_controlplane::StorageNode as CpNode;

use super::provisioning::{self, AddWindow, Contender, SlotDecision};
use crate::runtime::context::requeue;
use crate::runtime::machine::{Move, Note, Noted, Plan};

/// How often Resolving looks at the control plane while the add runs.
pub const RESOLVE_POLL: Duration = Duration::from_secs(1);

/// What one pass read for the step it is at. A field the step does not need is left at
/// its default, and every default is the "nothing there" answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observation {
    /// Why the worker's Node cannot take a node add now (gone, NotReady, cordoned).
    pub worker_away: Option<String>,
    /// Why the worker's storage-node API did not answer.
    pub host_unreachable: Option<String>,
    /// The control-plane nodes of the worker, in slot order (by RPC port).
    pub backend: Vec<CpNode>,
    /// A sibling of the same worker has sent (or owns) the add.
    pub sibling_posted: bool,
    /// Where the worker's node add is, by the control plane's task list.
    pub add: Option<AddWindow>,
    /// The budget's inputs, read fresh; at AwaitingSlot `None` means the cluster is gone.
    pub slots: Option<SlotInputs>,
}

/// What the node-add budget is decided from: the cluster as just read, and its nodes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlotInputs {
    /// The cluster's resourceVersion: the claim is written only onto it.
    pub cluster_version: Option<String>,
    pub budget: i32,
    pub slots: Vec<ProvisioningSlot>,
    pub contenders: Vec<Contender>,
}

/// What the provisioning machine calls that is its own.
#[derive(Clone, Debug, PartialEq)]
pub enum ProvisioningCall {
    /// Claim a node-add slot: write `slots` onto the cluster under `cluster_version`, then
    /// move into Posting under the node's resourceVersion (the two together are the claim).
    TakeSlot {
        slots: Vec<ProvisioningSlot>,
        cluster_version: Option<String>,
    },
    /// Send the node add, then move into Resolving under the node's resourceVersion.
    SendAdd,
    /// The control plane made the node: record it, and give the worker's slot back.
    Record { found: CpNode },
    /// The worker already had a node at this slot: record it instead of adding one.
    Adopt { found: CpNode },
}

/// The next thing to do, decided from one observation, with the event of a held step.
/// The provisioning status has no fields of its own beyond the step, phase and message
/// until the node is recorded.
pub type ProvisioningPlan = Noted<ProvisioningStep, ProvisioningCall, ()>;

/// The next thing for `node`, at `step`, given what this pass observed.
pub fn plan(
    step: ProvisioningStep,
    node: &StorageNode,
    cluster: &StorageCluster,
    observed: &Observation,
    now: Timestamp,
) -> ProvisioningPlan {
    use ProvisioningStep::*;
    let worker = &node.spec.worker_node;
    let at_slot = observed.backend.get(slot_of(node));
    let stored = node.status.as_ref().and_then(|s| s.message.as_deref());
    let call = |call, message| -> ProvisioningPlan { Plan::Call { call, message }.into() };
    let quiet = |after| -> ProvisioningPlan { Plan::quiet(stored, after).into() };
    match step {
        CheckingHost => match &observed.host_unreachable {
            Some(why) => hold(
                "HostUnreachable",
                format!(
                    "worker {worker}'s storage-node API does not answer yet ({why}); the node is added once it does"
                ),
                requeue::CONFLICT,
            ),
            None => advance(
                if at_slot.is_some() {
                    Adopting
                } else {
                    CheckingConfig
                },
                format!("worker {worker} answers"),
            ),
        },
        CheckingConfig => {
            if cluster.spec.enable_failure_domains.unwrap_or(false)
                && node.spec.config.failure_domain.is_none()
            {
                return hold(
                    "FailureDomainMissing",
                    "StorageCluster uses failure domains and this node names none; set spec.config.failureDomain".into(),
                    requeue::RESYNC,
                );
            }
            advance(AwaitingSlot, "waiting for a node-add slot".into())
        }
        AwaitingSlot => plan_slot(node, observed.slots.as_ref(), now),
        Posting => {
            // Looked at again after the resync ([`after_advance`]): the worker's return
            // brings no event of its own.
            if let Some(why) = &observed.worker_away {
                return advance(AwaitingWorker, why.clone());
            }
            let message = format!("waiting for the control plane to create worker {worker}'s node");
            // The add's effect may already be there: nodes of the worker, a sibling that
            // posted, or an add task still open from a pass that died after sending it.
            let sent = !observed.backend.is_empty()
                || observed.sibling_posted
                || observed.add == Some(AddWindow::Open);
            if sent {
                advance(Resolving, message)
            } else {
                call(ProvisioningCall::SendAdd, message)
            }
        }
        // The task window is the evidence of where the add is: while it is open the node
        // may exist half-made, and the worker keeps its node-add slot, so the budget
        // covers the whole add and not only its first half.
        Resolving => match (at_slot, observed.add) {
            (Some(_), Some(AddWindow::Open)) => quiet(RESOLVE_POLL),
            (Some(found), _) => call(
                ProvisioningCall::Record {
                    found: found.clone(),
                },
                format!("created in the control plane as {}", found.id),
            ),
            // An add that is over without a node (refused, lost, or out of retries) is
            // asked for again rather than waited out while it holds the slot.
            (None, Some(AddWindow::EndedWithoutNode)) => advance(
                Posting,
                format!("the node add for worker {worker} ended without a node; asking again"),
            ),
            (None, _) => quiet(RESOLVE_POLL),
        },
        AwaitingWorker => match observed.worker_away {
            Some(_) => quiet(requeue::RESYNC),
            None => advance(CheckingHost, format!("worker {worker} is back")),
        },
        Adopting => match at_slot {
            Some(found) => call(
                ProvisioningCall::Adopt {
                    found: found.clone(),
                },
                format!("adopted control-plane node {}", found.id),
            ),
            None => Plan::Advance {
                to: Move::Restart,
                message: "nothing to adopt; adding the node".into(),
                kind_status: None,
            }
            .into(),
        },
    }
}

/// How long after a move into `to` the node is looked at again: a worker that went away
/// is waited for at the resync, every other step at once.
pub fn after_advance(to: ProvisioningStep) -> Duration {
    match to {
        ProvisioningStep::AwaitingWorker => requeue::RESYNC,
        _ => requeue::NEXT_STEP,
    }
}

/// Stay, saying why (a status message, and an event of `reason`, once), and look again
/// after `after`.
pub fn hold(reason: &'static str, message: String, after: Duration) -> ProvisioningPlan {
    Noted {
        plan: Plan::Wait {
            message: message.clone(),
            after,
            event: None,
        },
        notes: vec![Note {
            warning: false,
            reason,
            message,
        }],
    }
}

/// `plan` as a step past its deadline performs it: a hold says the deadline's notice
/// `overdue` in its own message and event ([`held_message`]).
pub fn past_deadline(plan: ProvisioningPlan, overdue: Option<&str>) -> ProvisioningPlan {
    match plan {
        Noted {
            plan:
                Plan::Wait {
                    message,
                    after,
                    event,
                },
            notes,
        } if !notes.is_empty() => {
            let message = held_message(message, overdue);
            let notes = notes
                .into_iter()
                .map(|note| Note {
                    message: message.clone(),
                    ..note
                })
                .collect();
            Noted {
                plan: Plan::Wait {
                    message,
                    after,
                    event,
                },
                notes,
            }
        }
        other => other,
    }
}

/// AwaitingSlot: who may take a node-add slot is decided from the ordered set of waiting
/// workers ([`provisioning::slot_decision`]); a second slot of a worker already in flight
/// rides on its claim.
fn plan_slot(node: &StorageNode, inputs: Option<&SlotInputs>, now: Timestamp) -> ProvisioningPlan {
    let worker = &node.spec.worker_node;
    let hold = |message: String| hold("AwaitingSlot", message, requeue::CONFLICT);
    let Some(inputs) = inputs else {
        return hold("the cluster is gone".into());
    };
    let message = format!("adding worker {worker} to the control plane");
    match provisioning::slot_decision(worker, inputs.budget, &inputs.slots, &inputs.contenders) {
        // The transition into Posting is the mutex: under the resourceVersion this pass
        // read, so two passes cannot both get here.
        SlotDecision::Held => advance(ProvisioningStep::Posting, message),
        SlotDecision::Wait(why) => hold(why),
        SlotDecision::Claim(mut slots) => {
            slots.push(ProvisioningSlot {
                worker: worker.clone(),
                node: node.name_any(),
                taken_at: Time(now),
            });
            Plan::Call {
                call: ProvisioningCall::TakeSlot {
                    slots,
                    cluster_version: inputs.cluster_version.clone(),
                },
                message,
            }
            .into()
        }
    }
}

/// A move to `to`.
pub fn advance(to: ProvisioningStep, message: String) -> ProvisioningPlan {
    Plan::Advance {
        to: Move::To(to),
        message,
        kind_status: None,
    }
    .into()
}

/// The node's slot on its worker, as an index into the worker's nodes.
pub fn slot_of(node: &StorageNode) -> usize {
    node.spec.slot.unwrap_or(0).max(0) as usize
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;

/// The notice of a step past its deadline (provisioning goes on retrying).
pub fn overdue_note(step: ProvisioningStep) -> String {
    format!("provisioning step {step} outlived its deadline; still retrying")
}

/// `message` as a held step past its deadline writes it: with the notice, so that the
/// notice and the reason it holds are one message. Two messages would replace each other
/// on every pass, each with a write and an event.
pub fn held_message(message: String, overdue: Option<&str>) -> String {
    match overdue {
        Some(note) if !message.contains(note) => format!("{message} ({note})"),
        _ => message,
    }
}

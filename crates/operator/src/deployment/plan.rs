//! The expansion machine's decisions: given the document, its status, its step and an
//! [`Observation`] of the world, [`plan`] says the one next thing to do, as a [`Plan`] of
//! the machine runtime over the document's own status fields ([`Refs`]) and its own calls
//! ([`ExpansionCall`]). Pure, so every step and branch is a table test; the controller
//! reads the observation, and the runtime performs the plan with the controller's writer
//! and calls.
//!
//! | step | done when | otherwise |
//! |---|---|---|
//! | Validating | the document has no approval problem | fail with the first problem |
//! | CreatingCluster | the target exists and is this document's (or is grown) | record it as ours, then create it |
//! | AwaitingCluster | the cluster has a control-plane uuid | wait |
//! | CreatingNodes | every (worker, slot) has its StorageNode | create the missing ones |
//! | Activating | every recorded node is Online | wait; a new cluster is then activated |

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use kube::{Resource, ResourceExt};
use simplyblock_api::cluster_deployment_config::{
    ClusterDeploymentConfig, ClusterDeploymentConfigStatus, DeploymentPhase, EXPANSION_GRAPH,
    ExpansionStep,
};
use simplyblock_api::names::label_value;
use simplyblock_api::storage_cluster_ops::{
    ClusterAction, StorageClusterOps, StorageClusterOpsSpec,
};
use simplyblock_api::storage_node::NodePhase;
use simplyblock_api::{StorageCluster, StorageNode};
use simplyblock_statemachine::Machine;

use super::expansion::{self, CREATED_BY_LABEL};
use super::validation::{self, World};
use crate::runtime::context::requeue;
use crate::runtime::machine::{Move, Note, Noted, Plan};

/// What a step's plan reads, gathered by the controller once per pass. Each step fills
/// only its own fields; the others stay empty.
#[derive(Clone, Debug, Default)]
pub struct Observation {
    /// Validating, once begun: what approval is judged against.
    pub world: Option<World>,
    /// CreatingCluster, AwaitingCluster, CreatingNodes: the target StorageCluster.
    pub cluster: Option<StorageCluster>,
    /// CreatingNodes: the target's StorageNodes, as (worker, slot).
    pub nodes: BTreeSet<(String, i32)>,
    /// Activating: the phase of each of the target's StorageNodes, by name.
    pub phases: BTreeMap<String, NodePhase>,
    /// Activating, new cluster: whether its activation request exists.
    pub activation_requested: bool,
}

/// The document's own status fields a plan writes; what is `None` stays as stored.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Refs {
    /// The cluster this document expands.
    pub cluster_ref: Option<String>,
    /// The StorageNodes this document describes.
    pub node_refs: Option<Vec<String>>,
}

/// The next thing an expansion pass does, without its events.
pub type ExpansionPlan = Plan<ExpansionStep, ExpansionCall, Refs>;

/// What the expansion calls that is its own. Each ends in `then`, the move its effect
/// allows.
#[derive(Clone, Debug)]
pub enum ExpansionCall {
    /// Record the cluster as this document's (the call's message with its
    /// `cluster_ref`), then create it: a crash after the create finds the cluster
    /// recorded as ours.
    CreateCluster {
        cluster: Box<StorageCluster>,
        then: Box<ExpansionPlan>,
    },
    /// Create the StorageNodes of the slots that have none.
    CreateNodes {
        cluster: String,
        nodes: Vec<StorageNode>,
        then: Box<ExpansionPlan>,
    },
    /// Request the activation of a new cluster whose request does not exist yet.
    Activate {
        op: Box<StorageClusterOps>,
        then: Box<ExpansionPlan>,
    },
}

/// The next thing an expansion pass does, with its events: a failure's reason, the
/// announcement of a new count of nodes online.
pub type NotedExpansion = Noted<ExpansionStep, ExpansionCall, Refs>;

/// The machine `status.step` stores; a status from before approval starts over.
pub fn restore(
    status: &ClusterDeploymentConfigStatus,
    now: Timestamp,
) -> Result<Machine<'static, ExpansionStep>, simplyblock_statemachine::Error> {
    if status.phase == DeploymentPhase::Draft && !status.step.is_empty() {
        return Ok(EXPANSION_GRAPH.start(now));
    }
    EXPANSION_GRAPH.restore(&status.step, now)
}

/// Whether the expansion has been marked begun: Validating then reads the world.
pub fn began(status: &ClusterDeploymentConfigStatus) -> bool {
    status.phase == DeploymentPhase::Expanding && status.expansion_started_at.is_some()
}

/// The name of the StorageClusterOps that activates `cluster`.
pub fn activation_name(cluster: &str) -> String {
    format!("{cluster}-activate")
}

/// What the expansion does next at `machine`'s step. Pure.
pub fn plan(
    machine: &Machine<'_, ExpansionStep>,
    doc: &ClusterDeploymentConfig,
    status: &ClusterDeploymentConfigStatus,
    obs: &Observation,
    now: Timestamp,
) -> NotedExpansion {
    if machine.timed_out(now) {
        let message = format!("expansion step {} outlived its deadline", machine.state());
        return fail("StepDeadlineExceeded", message);
    }
    let Some(target) = expansion::target_cluster(doc) else {
        return fail(
            "NoClusterNamed",
            "the document names neither spec.clusterRef nor spec.cluster.name".into(),
        );
    };
    match machine.state() {
        ExpansionStep::Validating => validating(doc, status, target, obs),
        ExpansionStep::CreatingCluster => creating_cluster(doc, status, target, obs),
        ExpansionStep::AwaitingCluster => {
            let created = obs
                .cluster
                .as_ref()
                .and_then(|c| c.status.as_ref())
                .and_then(|s| s.uuid.as_deref())
                .is_some_and(|u| !u.is_empty());
            if !created {
                return ExpansionPlan::quiet(status.message.as_deref(), requeue::RESYNC).into();
            }
            advance(ExpansionStep::CreatingNodes, "creating the storage nodes").into()
        }
        ExpansionStep::CreatingNodes => creating_nodes(doc, target, obs),
        ExpansionStep::Activating => activating(doc, status, target, obs),
    }
}

/// The document cannot be expanded: phase Failed, its message led by `reason`, and a
/// warning event of `reason`; no retry.
pub fn fail(reason: &'static str, message: String) -> NotedExpansion {
    Noted {
        plan: Plan::Fail(format!("{reason}: {message}")),
        notes: vec![Note {
            warning: true,
            reason,
            message,
        }],
    }
}

fn advance(to: ExpansionStep, message: impl Into<String>) -> ExpansionPlan {
    recording(to, message.into(), None)
}

/// A move to `to` that writes `refs` on the way (`None`: as stored).
fn recording(to: ExpansionStep, message: String, refs: Option<Refs>) -> ExpansionPlan {
    Plan::Advance {
        to: Move::To(to),
        message,
        kind_status: refs,
    }
}

fn validating(
    doc: &ClusterDeploymentConfig,
    status: &ClusterDeploymentConfigStatus,
    target: &str,
    obs: &Observation,
) -> NotedExpansion {
    // Marked begun (phase Expanding, its start stamped) before it is judged.
    let (true, Some(world)) = (began(status), &obs.world) else {
        return Plan::Record {
            kind_status: Refs::default(),
            message: "validating against the cluster".into(),
        }
        .into();
    };
    let mut world = world.clone();
    // A document that resumes its own cluster is not in conflict with it.
    if status.cluster_ref.as_deref() == Some(target) && doc.spec.cluster_ref.is_none() {
        world.clusters.remove(target);
    }
    let problems = validation::approval_problems(&doc.name_any(), &doc.spec, &world);
    if let Some(first) = problems.first() {
        return fail(first.reason.as_str(), validation::summary(&problems));
    }
    advance(ExpansionStep::CreatingCluster, resolving(target)).into()
}

/// The message of CreatingCluster, which its record of the cluster keeps.
fn resolving(target: &str) -> String {
    format!("creating or resolving StorageCluster {target}")
}

fn creating_cluster(
    doc: &ClusterDeploymentConfig,
    status: &ClusterDeploymentConfigStatus,
    target: &str,
    obs: &Observation,
) -> NotedExpansion {
    let then = recording(
        ExpansionStep::AwaitingCluster,
        format!("waiting for StorageCluster {target} to exist in the control plane"),
        Some(Refs {
            cluster_ref: Some(target.to_string()),
            node_refs: None,
        }),
    );
    match (doc.spec.cluster_ref.is_some(), &obs.cluster) {
        (true, Some(_)) => then.into(),
        (true, None) => fail(
            "ClusterNotFound",
            format!("StorageCluster {target} named by spec.clusterRef does not exist"),
        ),
        (false, Some(c)) => {
            let ours = c.labels().get(CREATED_BY_LABEL) == Some(&label_value(&doc.name_any()))
                && status.cluster_ref.as_deref() == Some(target);
            if ours {
                then.into()
            } else {
                fail(
                    "ClusterExists",
                    format!(
                        "StorageCluster {target} already exists and this document did not create it; grow it with a document naming it in spec.clusterRef"
                    ),
                )
            }
        }
        (false, None) => match expansion::cluster(doc) {
            Some(cluster) => Plan::Call {
                call: ExpansionCall::CreateCluster {
                    cluster: Box::new(cluster),
                    then: Box::new(then),
                },
                message: resolving(target),
            }
            .into(),
            None => fail(
                "NoClusterNamed",
                "the document has no spec.cluster to create".into(),
            ),
        },
    }
}

fn creating_nodes(
    doc: &ClusterDeploymentConfig,
    target: &str,
    obs: &Observation,
) -> NotedExpansion {
    let Some(cluster) = &obs.cluster else {
        return fail(
            "ClusterNotFound",
            format!("StorageCluster {target} disappeared during the expansion"),
        );
    };
    let wanted = expansion::nodes(doc, cluster);
    // The record is rebuilt from the slots the document describes, so a node whose
    // creation outran the status write is never left out of it.
    let refs: Vec<String> = wanted
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    let message = format!("waiting for {} storage node(s) to come online", refs.len());
    let then = recording(
        ExpansionStep::Activating,
        message.clone(),
        Some(Refs {
            cluster_ref: None,
            node_refs: Some(refs),
        }),
    );
    let missing: Vec<StorageNode> = wanted
        .into_iter()
        .filter(|n| {
            let slot = (n.spec.worker_node.clone(), n.spec.slot.unwrap_or(0));
            !obs.nodes.contains(&slot)
        })
        .collect();
    if missing.is_empty() {
        return then.into();
    }
    Plan::Call {
        call: ExpansionCall::CreateNodes {
            cluster: target.to_string(),
            nodes: missing,
            then: Box::new(then),
        },
        message,
    }
    .into()
}

fn activating(
    doc: &ClusterDeploymentConfig,
    status: &ClusterDeploymentConfigStatus,
    target: &str,
    obs: &Observation,
) -> NotedExpansion {
    let wanted = status.node_refs.len();
    let online = status
        .node_refs
        .iter()
        .filter(|r| obs.phases.get(*r) == Some(&NodePhase::Online))
        .count();
    if online < wanted {
        let message = format!("{online}/{wanted} storage node(s) online; waiting for the rest");
        if status.message.as_deref() == Some(message.as_str()) {
            return ExpansionPlan::quiet(Some(&message), requeue::RESYNC).into();
        }
        // A new count is announced with an event.
        return Noted {
            plan: Plan::Wait {
                message: message.clone(),
                after: requeue::RESYNC,
                event: None,
            },
            notes: vec![Note {
                warning: false,
                reason: "AwaitingNodes",
                message,
            }],
        };
    }
    let message = format!("expanded: StorageCluster {target} with {wanted} storage node(s)");
    let expanded = Plan::Succeed {
        message: message.clone(),
        kind_status: None,
    };
    // A growth document's nodes are added with expand: the control plane rebalances onto
    // them itself; only a new cluster is activated.
    if doc.spec.cluster_ref.is_some() || obs.activation_requested {
        return expanded.into();
    }
    Plan::Call {
        call: ExpansionCall::Activate {
            op: Box::new(activation_request(doc, target)),
            then: Box::new(expanded),
        },
        message,
    }
    .into()
}

/// The StorageClusterOps that activates `cluster`, owned by the document.
fn activation_request(doc: &ClusterDeploymentConfig, cluster: &str) -> StorageClusterOps {
    let mut op = StorageClusterOps::new(
        &activation_name(cluster),
        StorageClusterOpsSpec {
            cluster_ref: cluster.to_string(),
            action: ClusterAction::Activate,
            abort: false,
            cancel_task: None,
            rolling_restart: None,
        },
    );
    op.metadata.owner_references = doc.controller_owner_ref(&()).map(|o| vec![o]);
    op
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;

//! The StorageNode controller: the provisioning machine until the control plane has the
//! node, then the steady state that reports it.
//!
//! A node add is not idempotent and adds every slot of a worker at once, so the claim is
//! taken in Kubernetes before the call: a slot in the cluster's `status.provisioningSlots`
//! (the node-add budget, counted by worker) and the transition into Posting, both written
//! under the object's resourceVersion. A sibling of the same worker already at Posting or
//! beyond, or a backend node already at the worker, means the add is not sent again.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Resource;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde::Serialize;
use serde_json::json;
use simplyblock_api::common::OpsPhase;
use simplyblock_api::conditions::{self, Verdict};
use simplyblock_api::keys::NODE_LABEL;
use simplyblock_api::names::label_value;
use simplyblock_api::storage_cluster::ProvisioningSlot;
use simplyblock_api::storage_device::DevicePhase;
use simplyblock_api::storage_node::{
    Capacity, DeviceCounts, NodePhase, NodePorts, NodeResources, PROVISIONING_GRAPH,
    ProvisioningStep, StorageNodeStatus,
};
use simplyblock_api::storage_node_ops::{NodeAction, StorageNodeOps, StorageNodeOpsSpec};
use simplyblock_api::{StorageCluster, StorageDevice, StorageNode};
use simplyblock_controlplane::{Uuid, types::NodeStatus};
use simplyblock_statemachine::{Machine, StepSnapshot};

use super::machine::{self, Observation, ProvisioningCall, SlotInputs};
use super::provisioning::{self, AddWindow, Contender};
use crate::runtime::context::{Context, requeue};
use crate::runtime::kit::{self, Error, Guard};
use crate::runtime::machine::{After, Entity, Pass, Stage, Status};
use crate::workload::snode::snode;

pub const FINALIZER: &str = "storage.simplyblock.io/storagenode-finalizer";
const MANAGER: &str = "storagenode-controller";

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "storagenode";

/// Runs the controller until the operator stops.
pub async fn run(ctx: Arc<Context>) {
    let controller = Controller::new(
        ctx.scope.api::<StorageNode>(&ctx.kube),
        watcher::Config::default(),
    );
    let store = controller.store();
    // A cluster's status (its uuid, its slots) moves its provisioning nodes on. A node
    // that has its control-plane node reads nothing more of the cluster than the uuid it
    // already had, so it keeps to its own resync: waking every node on every status
    // write of the cluster cost a control-plane read per node per write while a fleet
    // was being added.
    let of_cluster = move |c: StorageCluster| {
        let deleting = c.metadata.deletion_timestamp.is_some();
        store
            .state()
            .into_iter()
            .filter(|n| n.namespace() == c.namespace() && n.spec.cluster_ref == c.name_any())
            .filter(|n| deleting || n.status.as_ref().and_then(|s| s.uuid.as_ref()).is_none())
            .map(|n| kube::runtime::reflector::ObjectRef::from_obj(&*n))
            .collect::<Vec<_>>()
    };
    // A worker going away or coming back makes its recorded nodes Degraded or not.
    let nodes = controller.store();
    let of_worker = move |worker: Node| {
        nodes
            .state()
            .into_iter()
            .filter(|n| n.spec.worker_node == worker.name_any())
            .filter(|n| n.status.as_ref().and_then(|s| s.uuid.as_ref()).is_some())
            .map(|n| kube::runtime::reflector::ObjectRef::from_obj(&*n))
            .collect::<Vec<_>>()
    };
    let controller = controller
        .watches(
            Api::<Node>::all(ctx.kube.clone()),
            watcher::Config::default(),
            of_worker,
        )
        .watches(
            ctx.scope.api::<StorageCluster>(&ctx.kube),
            watcher::Config::default(),
            of_cluster,
        )
        // Its drives' counts are this controller's to write.
        .owns(
            ctx.scope.api::<StorageDevice>(&ctx.kube),
            watcher::Config::default(),
        );
    // A stream event about a node's control-plane object wakes it; the resync stays.
    let woken = ctx
        .streams
        .triggers(controller.store(), |n: &StorageNode, change| {
            let uuid = n.status.as_ref().and_then(|s| s.uuid.as_deref());
            crate::runtime::streams::status_uuid(uuid).is_some_and(|id| change.touches(id))
        });
    let controller = controller.reconcile_on(woken);
    kit::run(CONTROLLER, controller, reconcile, ctx).await
}

pub async fn reconcile(node: Arc<StorageNode>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ctx = &*ctx;
    kit::finalized(
        &ctx.kube,
        FINALIZER,
        node,
        |n| async move { apply(&n, ctx).await },
        |n| async move {
            let done = cleanup(&n, ctx).await;
            // Done: the finalizer goes next, and the node's series with it.
            if done.is_ok() {
                forget_phase_state(ctx, &n);
            }
            done
        },
    )
    .await
}

fn cluster_uuid(cluster: &StorageCluster) -> Option<Uuid> {
    cluster.status.as_ref()?.uuid.as_deref()?.parse().ok()
}

async fn apply(node: &StorageNode, ctx: &Context) -> Result<Action, Error> {
    let ns = node.namespace().unwrap_or_default();
    let clusters: Api<StorageCluster> = Api::namespaced(ctx.kube.clone(), &ns);
    let status = node.status.clone().unwrap_or_default();
    let Some(cluster) = clusters.get_opt(&node.spec.cluster_ref).await? else {
        wait_for_cluster(
            ctx,
            node,
            &status,
            "ClusterNotFound",
            format!("StorageCluster {} does not exist", node.spec.cluster_ref),
        )
        .await?;
        return Ok(Action::requeue(requeue::RESYNC));
    };
    let Some(cluster_id) = cluster_uuid(&cluster) else {
        wait_for_cluster(
            ctx,
            node,
            &status,
            "ClusterNotReady",
            format!(
                "waiting for StorageCluster {} to be created in the control plane",
                node.spec.cluster_ref
            ),
        )
        .await?;
        return Ok(Action::requeue(requeue::RESYNC));
    };
    if let Some(uuid) = status.uuid.as_deref().and_then(|u| u.parse::<Uuid>().ok()) {
        // A recorded node holds no slot: the add gives it back right after the record, and
        // a pass killed in between leaves it here for any later pass to give back.
        if holds_slot(&cluster, node) {
            release_slot(ctx, node, &cluster).await?;
        }
        return steady(node, &status, cluster_id, uuid, ctx).await;
    }
    provision(node, &status, &cluster, cluster_id, ctx).await
}

/// Writes why the node waits for its cluster (and its event) once, before the machine
/// runs: the step stays as stored.
async fn wait_for_cluster(
    ctx: &Context,
    node: &StorageNode,
    status: &StorageNodeStatus,
    reason: &str,
    message: String,
) -> Result<(), Error> {
    if status.message.as_deref() == Some(message.as_str()) {
        return Ok(());
    }
    ctx.event(node, false, reason, message.clone()).await;
    let step = Some(status.step.clone());
    write(
        ctx,
        node,
        NodePhase::Provisioning,
        step,
        Some(message),
        None,
    )
    .await?;
    Ok(())
}

/// The fields of StorageNode status this controller owns: its machine's position, and
/// what the control plane reports of the node once it has one.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OwnedStatus {
    phase: NodePhase,
    #[serde(skip_serializing_if = "StepSnapshot::is_empty")]
    step: StepSnapshot,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    health: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uptime: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resources: Option<NodeResources>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ports: Option<NodePorts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure_domain: Option<String>,
    observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    conditions: Vec<Condition>,
}

/// Writes this controller's status fields onto the version of `node` this pass read, and
/// returns the node as stored; `None` when someone wrote the node since it was read (the
/// pass decided from a stale copy and looks again).
///
/// Every write is guarded: the fields are written whole under one manager, so an
/// unguarded write from a stale pass would move the machine back and drop what a newer
/// pass recorded (the node's uuid).
async fn write(
    ctx: &Context,
    node: &StorageNode,
    phase: NodePhase,
    step: Option<StepSnapshot>,
    message: Option<String>,
    observed: Option<&StorageNodeStatus>,
) -> Result<Option<StorageNode>, Error> {
    let conditions = node_conditions(node, phase, message.as_deref(), None);
    write_with(ctx, node, phase, step, message, observed, conditions).await
}

/// [`write`] with the conditions decided by the caller.
async fn write_with(
    ctx: &Context,
    node: &StorageNode,
    phase: NodePhase,
    step: Option<StepSnapshot>,
    message: Option<String>,
    observed: Option<&StorageNodeStatus>,
    conditions: Vec<Condition>,
) -> Result<Option<StorageNode>, Error> {
    let observed = observed.cloned().unwrap_or_default();
    let status = OwnedStatus {
        phase,
        step: step.unwrap_or_default(),
        message,
        uuid: observed.uuid,
        status: observed.status,
        health: observed.health,
        hostname: observed.hostname,
        uptime: observed.uptime,
        resources: observed.resources,
        ports: observed.ports,
        failure_domain: observed.failure_domain,
        observed_generation: node.metadata.generation,
        conditions,
    };
    let written = kit::apply_status(&ctx.kube, node, MANAGER, &status, Guard::ResourceVersion);
    let written = kit::unless_stale(written.await)?;
    if written.is_some() {
        phase_state(ctx, node, phase);
    }
    Ok(written)
}

/// The reason of Degraded while the node's worker is away.
const WORKER_AWAY: &str = "WorkerAway";
/// The event of a worker that came back.
const WORKER_RETURNED: &str = "WorkerReturned";

/// The node's conditions for `phase`; `worker_away` (looked at only once the node is
/// recorded) makes it Degraded whatever the phase says.
fn node_conditions(
    node: &StorageNode,
    phase: NodePhase,
    message: Option<&str>,
    worker_away: Option<&str>,
) -> Vec<Condition> {
    let previous = node.status.as_ref().map_or(&[][..], |s| &s.conditions[..]);
    let now = Time(jiff::Timestamp::now());
    let generation = node.metadata.generation;
    let mut next = conditions::of_phase(previous, phase, message, generation, &now);
    if let Some(why) = worker_away {
        let verdict = Verdict {
            type_: conditions::DEGRADED,
            holds: true,
            reason: WORKER_AWAY,
            message: why,
        };
        conditions::set_condition(&mut next, &verdict, generation, &now);
    }
    next
}

/// Whether the stored conditions say the worker was away.
fn was_away(status: &StorageNodeStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == conditions::DEGRADED && c.status == "True" && c.reason == WORKER_AWAY)
}

/// Why a recorded node's worker is away: its Node is gone or NotReady. A cordoned worker
/// is not away (it is being maintained on purpose).
fn worker_gone_or_not_ready(worker: &str, node: Option<&Node>) -> Option<String> {
    let Some(n) = node else {
        return Some(format!("worker {worker} is not a Node of this cluster"));
    };
    let not_ready = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status != "True"));
    not_ready.then(|| format!("worker {worker} is NotReady"))
}

/// Every phase a StorageNode can be in, as the phase gauge names them.
const PHASES: [NodePhase; 8] = [
    NodePhase::Pending,
    NodePhase::Provisioning,
    NodePhase::Online,
    NodePhase::Removing,
    NodePhase::Removed,
    NodePhase::Offline,
    NodePhase::Degraded,
    NodePhase::Failed,
];

const PHASE_STATE: &str = "simplyblock_storagenode_phase_state";

fn phase_labels(node: &StorageNode) -> crate::runtime::metrics::Labels {
    series_labels(&node.spec.cluster_ref, &node.name_any())
}

fn series_labels(cluster: &str, node: &str) -> crate::runtime::metrics::Labels {
    vec![("cluster", cluster.to_owned()), ("node", node.to_owned())]
}

/// `simplyblock_storagenode_phase_state{cluster,node,phase}`: 1 for the node's phase.
fn phase_state(ctx: &Context, node: &StorageNode, phase: NodePhase) {
    let names: Vec<String> = PHASES.iter().map(|p| format!("{p:?}")).collect();
    ctx.metrics.one_hot(
        PHASE_STATE,
        &phase_labels(node),
        names.iter().map(String::as_str),
        Some(&format!("{phase:?}")),
    );
}

/// The node is gone: its phase series and what a drain of it measured are no longer
/// rendered.
fn forget_phase_state(ctx: &Context, node: &StorageNode) {
    forget_series(&ctx.metrics, &node.spec.cluster_ref, &node.name_any());
}

fn forget_series(m: &crate::runtime::metrics::Metrics, cluster: &str, node: &str) {
    let names: Vec<String> = PHASES.iter().map(|p| format!("{p:?}")).collect();
    m.forget_one_hot(
        PHASE_STATE,
        &series_labels(cluster, node),
        names.iter().map(String::as_str),
    );
    m.forget(
        super::ops::remove::DRAIN_BLOCKED,
        &super::ops::remove::labels(node),
    );
}

/// The worker's Node, if it is one of this cluster's.
async fn worker_node(ctx: &Context, worker: &str) -> Result<Option<Node>, Error> {
    Ok(Api::<Node>::all(ctx.kube.clone()).get_opt(worker).await?)
}

/// The worker's management address, as Kubernetes reports it.
fn address_of(node: Option<&Node>) -> Option<&str> {
    node?
        .status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address.as_str())
}

/// Why `worker` (its Node, if there is one) cannot take a node add now.
fn away_reason(worker: &str, node: Option<&Node>) -> Option<String> {
    let Some(n) = node else {
        return Some(format!("worker {worker} is not a Node of this cluster"));
    };
    if n.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
    {
        return Some(format!("worker {worker} is cordoned"));
    }
    let not_ready = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "False"));
    not_ready.then(|| format!("worker {worker} is NotReady"))
}

/// The backend nodes of `worker` (named by its hostname or its Node's address), in slot
/// order (by RPC port).
async fn backend_nodes_of(
    ctx: &Context,
    cluster_id: Uuid,
    worker: &str,
    known: Option<&Node>,
) -> Result<Vec<simplyblock_controlplane::StorageNode>, Error> {
    let address = address_of(known);
    let mut nodes: Vec<_> = ctx
        .control_plane()?
        .list_storage_nodes(cluster_id)
        .await?
        .into_iter()
        .filter(|n| n.hostname == worker || Some(n.mgmt_ip.as_str()) == address)
        .collect();
    nodes.sort_by_key(|n| n.rpc_port);
    Ok(nodes)
}

async fn provision(
    node: &StorageNode,
    status: &StorageNodeStatus,
    cluster: &StorageCluster,
    cluster_id: Uuid,
    ctx: &Context,
) -> Result<Action, Error> {
    let now = jiff::Timestamp::now();
    let machine = match PROVISIONING_GRAPH.restore(&status.step, now) {
        Ok(m) => m,
        Err(e) => {
            write(
                ctx,
                node,
                NodePhase::Failed,
                None,
                Some(format!(
                    "the stored provisioning step cannot be resumed: {e}"
                )),
                None,
            )
            .await?;
            return Ok(Action::await_change());
        }
    };
    // This pass's own bookkeeping writes move the resourceVersion on; a write later in
    // the pass goes onto the object as they left it, so it fails only on someone else's
    // write. One that fails here means this pass read a stale copy: look again.
    let mut current = None;
    if status.step.is_empty() {
        // The first pass: record the machine's start so its deadline counts from now.
        current = write(
            ctx,
            node,
            NodePhase::Provisioning,
            Some(machine.snapshot()),
            Some(format!(
                "checking worker {}'s storage-node API",
                node.spec.worker_node
            )),
            None,
        )
        .await?;
        if current.is_none() {
            return Ok(Action::requeue(requeue::CONFLICT));
        }
    }
    if machine.timed_out(now) {
        let message = machine::overdue_note(machine.state());
        // Said once: a held step carries the notice in its own message from then on.
        if !status
            .message
            .as_deref()
            .is_some_and(|m| m.contains(&message))
        {
            ctx.event(node, true, "StepDeadlineExceeded", message.clone())
                .await;
            current = write(
                ctx,
                current.as_ref().unwrap_or(node),
                NodePhase::Provisioning,
                Some(machine.snapshot()),
                Some(message),
                None,
            )
            .await?;
            if current.is_none() {
                return Ok(Action::requeue(requeue::CONFLICT));
            }
        }
    }
    let node = current.as_ref().unwrap_or(node);
    let observed = observe(machine.state(), node, cluster, cluster_id, ctx).await?;
    let plan = machine::plan(machine.state(), node, cluster, &observed, now);
    let provisioning = Provisioning {
        cluster,
        cluster_id,
    };
    let plan = machine::past_deadline(plan, provisioning.overdue(&machine).as_deref());
    let now = jiff::Timestamp::now();
    crate::runtime::machine::execute(&provisioning, ctx, node.clone(), machine, plan, now).await
}

/// Reads what `step` decides from, and nothing else: the control plane is asked only
/// what the step needs, in the order a step stops at its first answer.
async fn observe(
    step: ProvisioningStep,
    node: &StorageNode,
    cluster: &StorageCluster,
    cluster_id: Uuid,
    ctx: &Context,
) -> Result<Observation, Error> {
    let worker = &node.spec.worker_node;
    let mut observed = Observation::default();
    match step {
        ProvisioningStep::CheckingHost => {
            if let Err(e) = snode(ctx, cluster, worker).await?.check().await {
                observed.host_unreachable = Some(e.to_string());
                return Ok(observed);
            }
            let known = worker_node(ctx, worker).await?;
            observed.backend = backend_nodes_of(ctx, cluster_id, worker, known.as_ref()).await?;
        }
        ProvisioningStep::CheckingConfig => {}
        ProvisioningStep::AwaitingSlot => {
            observed.slots = slot_inputs(ctx, node, cluster).await?;
        }
        ProvisioningStep::Posting => {
            let known = worker_node(ctx, worker).await?;
            observed.worker_away = away_reason(worker, known.as_ref());
            if observed.worker_away.is_some() {
                return Ok(observed);
            }
            observed.backend = backend_nodes_of(ctx, cluster_id, worker, known.as_ref()).await?;
            if !observed.backend.is_empty() {
                return Ok(observed);
            }
            observed.sibling_posted = sibling_posted(ctx, node).await?;
            if !observed.sibling_posted {
                observed.add = Some(add_window(ctx, cluster, cluster_id, worker).await?);
            }
        }
        ProvisioningStep::Resolving => {
            let known = worker_node(ctx, worker).await?;
            observed.backend = backend_nodes_of(ctx, cluster_id, worker, known.as_ref()).await?;
            observed.add = Some(add_window(ctx, cluster, cluster_id, worker).await?);
        }
        ProvisioningStep::AwaitingWorker => {
            let known = worker_node(ctx, worker).await?;
            observed.worker_away = away_reason(worker, known.as_ref());
        }
        ProvisioningStep::Adopting => {
            let known = worker_node(ctx, worker).await?;
            observed.backend = backend_nodes_of(ctx, cluster_id, worker, known.as_ref()).await?;
        }
    }
    Ok(observed)
}

/// The provisioning machine's writer and caller, for the machine runtime: one pass over
/// one node of `cluster` (`cluster_id` in the control plane).
struct Provisioning<'a> {
    cluster: &'a StorageCluster,
    cluster_id: Uuid,
}

impl Provisioning<'_> {
    /// The notice of a step past its deadline, which a held step says with its reason.
    fn overdue(&self, machine: &Machine<'_, ProvisioningStep>) -> Option<String> {
        machine
            .timed_out(jiff::Timestamp::now())
            .then(|| machine::overdue_note(machine.state()))
    }
}

impl Entity for Provisioning<'_> {
    type Object = StorageNode;
    type Step = ProvisioningStep;
    type Call = ProvisioningCall;
    type Fields = ();

    fn after_advance(&self, to: ProvisioningStep) -> std::time::Duration {
        machine::after_advance(to)
    }

    fn message(node: &StorageNode) -> Option<&str> {
        node.status.as_ref()?.message.as_deref()
    }

    /// Provisioning until the node is recorded (the machine plans no ending of its own: a
    /// record writes the node's observed status).
    async fn write(
        &self,
        ctx: &Context,
        node: &StorageNode,
        status: Status<'_, ProvisioningStep, ()>,
    ) -> Result<Option<StorageNode>, Error> {
        let phase = match status.stage {
            Stage::Failed => NodePhase::Failed,
            _ => NodePhase::Provisioning,
        };
        let step = Some(status.machine.snapshot());
        write(ctx, node, phase, step, Some(status.message), None).await
    }

    async fn call(
        &self,
        pass: &mut Pass<'_, Self>,
        call: ProvisioningCall,
        message: String,
    ) -> Result<After<Self>, Error> {
        let (node, ctx, cluster) = (&pass.object, pass.ctx, self.cluster);
        let worker = &node.spec.worker_node;
        match call {
            ProvisioningCall::TakeSlot {
                slots,
                cluster_version,
            } => {
                // The slot first, under the cluster's resourceVersion: two claims from one
                // reading cannot both land. Then the transition into Posting, under the
                // node's: two passes cannot both get there.
                if !write_slots(ctx, cluster, cluster_version, &slots).await? {
                    return Ok(After::requeue(requeue::CONFLICT));
                }
                let to = ProvisioningStep::Posting;
                Ok(After::Plan(machine::advance(to, message)))
            }
            ProvisioningCall::SendAdd => {
                let namespace = cluster.namespace().unwrap_or_default();
                let body = provisioning::node_add_body(
                    ctx.snode.address(worker, &namespace)?,
                    &namespace,
                    node,
                    cluster,
                );
                let added = ctx
                    .control_plane()?
                    .add_storage_node(self.cluster_id, &body)
                    .await;
                crate::runtime::crash::point(crate::runtime::crash::NODE_ADD);
                match added {
                    Ok(task) => {
                        ctx.event(
                            node,
                            false,
                            "NodeAddRequested",
                            format!("node add for worker {worker} queued as task {task}"),
                        )
                        .await
                    }
                    // The real server's answer to a second add while one is open.
                    Err(e) if e.is_retryable() => {
                        tracing::info!(%worker, error = %e, "a node add for this worker is already open")
                    }
                    Err(e) => {
                        let message =
                            format!("the control plane refused to add worker {worker}: {e}");
                        let refused = machine::hold("NodeAddFailed", message, requeue::RETRY);
                        let overdue = self.overdue(&pass.machine);
                        return Ok(After::Plan(machine::past_deadline(
                            refused,
                            overdue.as_deref(),
                        )));
                    }
                }
                // Onto the version read: a pass that read an older copy (a requeue can run
                // before the watch brings this controller's own last write) must not move
                // the node back.
                let to = ProvisioningStep::Resolving;
                Ok(After::Plan(machine::advance(to, message)))
            }
            ProvisioningCall::Record { found } => {
                if !record(ctx, node, &found, message).await? {
                    return Ok(After::requeue(requeue::CONFLICT));
                }
                crate::runtime::crash::point(crate::runtime::crash::NODE_RECORDED);
                if let Some(created) = &node.metadata.creation_timestamp {
                    let took = jiff::Timestamp::now().duration_since(created.0);
                    ctx.metrics.observe(
                        "simplyblock_storagenode_provisioning_duration_seconds",
                        vec![("cluster", node.spec.cluster_ref.clone())],
                        took.as_secs_f64(),
                    );
                }
                release_slot(ctx, node, cluster).await?;
                let slot = node.spec.slot.unwrap_or(0);
                let message = format!(
                    "worker {worker} slot {slot} is control-plane node {}",
                    found.id
                );
                ctx.event(node, false, "NodeOnline", message).await;
                Ok(After::requeue(requeue::NEXT_STEP))
            }
            ProvisioningCall::Adopt { found } => {
                if !record(ctx, node, &found, message).await? {
                    return Ok(After::requeue(requeue::CONFLICT));
                }
                let message = format!(
                    "adopted control-plane node {} instead of adding one",
                    found.id
                );
                ctx.event(node, false, "NodeAdopted", message).await;
                Ok(After::requeue(requeue::NEXT_STEP))
            }
        }
    }
}

/// Records the control-plane node `found` as this node's: the machine is done. `false`:
/// the node changed since this pass read it, nothing was recorded.
async fn record(
    ctx: &Context,
    node: &StorageNode,
    found: &simplyblock_controlplane::StorageNode,
    message: String,
) -> Result<bool, Error> {
    let observed = observed(found);
    let phase = phase_of(found);
    let written = write(ctx, node, phase, None, Some(message), Some(&observed)).await?;
    Ok(written.is_some())
}

/// A sibling of the same worker with a control-plane node, or of a lower slot already
/// at Posting or beyond, has sent (or owns) the add. Only lower slots count, so two slots that
/// both find the add over cannot each leave the asking to the other.
async fn sibling_posted(ctx: &Context, node: &StorageNode) -> Result<bool, Error> {
    let api: Api<StorageNode> =
        Api::namespaced(ctx.kube.clone(), &node.namespace().unwrap_or_default());
    let posted = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|n| n.name_any() != node.name_any())
        .filter(|n| {
            n.spec.cluster_ref == node.spec.cluster_ref
                && n.spec.worker_node == node.spec.worker_node
        })
        .any(|n| {
            let lower = n.spec.slot.unwrap_or(0) < node.spec.slot.unwrap_or(0);
            let s = n.status.unwrap_or_default();
            s.uuid.is_some()
                || lower
                    && matches!(
                        s.step.state.as_deref(),
                        Some("Posting") | Some("Resolving") | Some("Adopting")
                    )
        });
    Ok(posted)
}

/// Where the node add of `worker` is, by the control plane's task list.
async fn add_window(
    ctx: &Context,
    cluster: &StorageCluster,
    cluster_id: Uuid,
    worker: &str,
) -> Result<AddWindow, Error> {
    let tasks = ctx.control_plane()?.list_tasks(cluster_id).await?;
    let namespace = cluster.namespace().unwrap_or_default();
    let address = ctx.snode.address(worker, &namespace)?;
    Ok(provisioning::add_window(&tasks, &address))
}

/// What the node-add budget is decided from, read fresh (the cluster, its nodes, and the
/// Nodes of the other waiting workers); `None` when the cluster is gone.
async fn slot_inputs(
    ctx: &Context,
    node: &StorageNode,
    cluster: &StorageCluster,
) -> Result<Option<SlotInputs>, Error> {
    let ns = node.namespace().unwrap_or_default();
    let clusters: Api<StorageCluster> = Api::namespaced(ctx.kube.clone(), &ns);
    let Some(fresh) = clusters.get_opt(&cluster.name_any()).await? else {
        return Ok(None);
    };
    let worker = &node.spec.worker_node;
    let siblings = Api::<StorageNode>::namespaced(ctx.kube.clone(), &ns)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|n| n.spec.cluster_ref == node.spec.cluster_ref);
    // A worker that is away (gone, NotReady, cordoned) does not hold the line; the Nodes
    // are read once, and only when another worker waits.
    let mut workers: Option<std::collections::BTreeMap<String, Node>> = None;
    let mut contenders = Vec::new();
    for n in siblings {
        let status = n.status.clone().unwrap_or_default();
        let awaiting_slot = status.uuid.is_none()
            && status.step.state.as_deref() == Some(ProvisioningStep::AwaitingSlot.as_str());
        let away = if awaiting_slot && &n.spec.worker_node != worker {
            if workers.is_none() {
                let all = Api::<Node>::all(ctx.kube.clone())
                    .list(&ListParams::default())
                    .await?;
                workers = Some(all.items.into_iter().map(|k| (k.name_any(), k)).collect());
            }
            let known = workers.as_ref().and_then(|w| w.get(&n.spec.worker_node));
            away_reason(&n.spec.worker_node, known).is_some()
        } else {
            false
        };
        contenders.push(Contender {
            name: n.name_any(),
            worker: n.spec.worker_node.clone(),
            slot: n.spec.slot.unwrap_or(0),
            provisioning: status.uuid.is_none(),
            awaiting_slot,
            away,
            created: n
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(i64::MAX, |t| t.0.as_second()),
        });
    }
    Ok(Some(SlotInputs {
        cluster_version: fresh.resource_version(),
        budget: fresh
            .spec
            .storage_nodes
            .as_ref()
            .map(|s| s.node_provisioning_budget)
            .unwrap_or(1),
        slots: fresh.status.unwrap_or_default().provisioning_slots,
        contenders,
    }))
}

/// Writes the cluster's `status.provisioningSlots` onto its resourceVersion `version`;
/// `false` when someone wrote the cluster since.
async fn write_slots<S: Serialize>(
    ctx: &Context,
    cluster: &StorageCluster,
    version: Option<String>,
    slots: &[S],
) -> Result<bool, Error> {
    let clusters: Api<StorageCluster> = kit::api_of(&ctx.kube, cluster);
    let patch =
        json!({"metadata": {"resourceVersion": version}, "status": {"provisioningSlots": slots}});
    match clusters
        .patch_status(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The cluster as read lists a provisioning slot of this node.
fn holds_slot(cluster: &StorageCluster, node: &StorageNode) -> bool {
    cluster.status.as_ref().is_some_and(|s| {
        s.provisioning_slots
            .iter()
            .any(|slot| slot.node == node.name_any())
    })
}

/// Gives this node's worker's slot back, on a fresh read, retried on conflict.
async fn release_slot(
    ctx: &Context,
    node: &StorageNode,
    cluster: &StorageCluster,
) -> Result<(), Error> {
    let clusters: Api<StorageCluster> = kit::api_of(&ctx.kube, cluster);
    for _ in 0..8 {
        let Some(fresh) = clusters.get_opt(&cluster.name_any()).await? else {
            return Ok(());
        };
        let slots = fresh.status.clone().unwrap_or_default().provisioning_slots;
        if !slots.iter().any(|s| s.node == node.name_any()) {
            return Ok(());
        }
        let kept: Vec<&ProvisioningSlot> =
            slots.iter().filter(|s| s.node != node.name_any()).collect();
        if write_slots(ctx, &fresh, fresh.resource_version(), &kept).await? {
            return Ok(());
        }
    }
    Ok(())
}

fn phase_of(found: &simplyblock_controlplane::StorageNode) -> NodePhase {
    NodePhase::from_control_plane(
        found.status.as_str(),
        found.online_device_count < found.device_count,
    )
}

fn observed(found: &simplyblock_controlplane::StorageNode) -> StorageNodeStatus {
    let port = |p: u16| (p > 0).then_some(i32::from(p));
    // A stream's or a fresh node's record carries no statistics: no capacity then.
    let capacity = (found.capacity.size_total > 0).then(|| Capacity {
        total_bytes: Some(found.capacity.size_total),
        used_bytes: Some(found.capacity.size_used),
        sampled_at: jiff::Timestamp::from_second(found.capacity.date)
            .ok()
            .filter(|_| found.capacity.date > 0)
            .map(Time),
    });
    StorageNodeStatus {
        ports: Some(NodePorts {
            management: (!found.mgmt_ip.is_empty()).then(|| found.mgmt_ip.clone()),
            nvmeof: port(found.nvmf_port),
            lvol: port(found.lvol_subsys_port),
            rpc: port(found.rpc_port),
        }),
        failure_domain: Some(found.failure_domain.to_string()),
        uuid: Some(found.id.to_string()),
        status: Some(found.status.as_str().to_string()),
        health: found.health_check,
        hostname: Some(found.hostname.clone()),
        uptime: found.uptime.clone(),
        resources: Some(NodeResources {
            cpu: Some(found.cpu_spdk_count as i32),
            memory: None,
            volumes: Some(found.lvols as i32),
            // Counted from the node's StorageDevices ([`device_counts`]).
            devices: None,
            capacity,
        }),
        ..StorageNodeStatus::default()
    }
}

/// The node's drives as its StorageDevices (the mirror's, one per drive the control plane
/// reports) say: how many serve and how many there are. This controller alone writes
/// them into the node's status; a change of a StorageDevice wakes it.
async fn device_counts(ctx: &Context, node: &StorageNode) -> Result<DeviceCounts, Error> {
    let name = node.name_any();
    let devices: Api<StorageDevice> = kit::api_of(&ctx.kube, node);
    // The mirror labels each with its node's name, when that can be a label value.
    let selected = match label_value(&name) == name {
        true => ListParams::default().labels(&format!("{NODE_LABEL}={name}")),
        false => ListParams::default(),
    };
    let mine: Vec<StorageDevice> = devices
        .list(&selected)
        .await?
        .items
        .into_iter()
        .filter(|d| d.spec.node_ref == name)
        .collect();
    Ok(counts_of(&mine))
}

/// The counts of `devices`: those Online, and all of them. Pure.
pub fn counts_of(devices: &[StorageDevice]) -> DeviceCounts {
    let online = devices
        .iter()
        .filter(|d| d.status.as_ref().map(|s| s.phase) == Some(DevicePhase::Online))
        .count();
    DeviceCounts {
        online: online as i32,
        total: devices.len() as i32,
    }
}

/// The capacity to write: the one reported, unless it moved by less than 1 % of the total
/// (the figure changes with every write on the node; a write per change would wake this
/// controller for ever), and the last one when none is reported.
fn settled_capacity(before: Option<&Capacity>, now: Option<Capacity>) -> Option<Capacity> {
    let Some(now) = now else {
        // Stream records carry no statistics: the last figure stays, with its sample time.
        return before.cloned();
    };
    let Some(before) = before else {
        return Some(now);
    };
    let total = now.total_bytes.unwrap_or(0);
    let moved = (now.used_bytes.unwrap_or(0) - before.used_bytes.unwrap_or(0)).abs();
    if before.total_bytes == now.total_bytes && moved * 100 < total {
        Some(before.clone())
    } else {
        Some(now)
    }
}

async fn steady(
    node: &StorageNode,
    status: &StorageNodeStatus,
    cluster_id: Uuid,
    uuid: Uuid,
    ctx: &Context,
) -> Result<Action, Error> {
    // The cluster's node stream (a plain GET until it is synced).
    let scope = simplyblock_controlplane::Scope::Nodes {
        cluster: cluster_id,
    };
    let informer = ctx.follow(scope)?;
    let found = match informer.node(cluster_id, uuid).await {
        Ok(f) => f,
        Err(e) if e.is_not_found() => {
            write(
                ctx,
                node,
                NodePhase::Removed,
                None,
                Some(format!("the control plane no longer knows node {uuid}")),
                Some(status),
            )
            .await?;
            return Ok(Action::requeue(requeue::RESYNC));
        }
        Err(e) => return Err(e.into()),
    };
    let mut next = observed(&found);
    if let Some(resources) = next.resources.as_mut() {
        let before = status.resources.as_ref().and_then(|r| r.capacity.as_ref());
        resources.capacity = settled_capacity(before, resources.capacity.take());
        resources.devices = Some(device_counts(ctx, node).await?);
    }
    let phase = phase_of(&found);
    let worker = &node.spec.worker_node;
    let away = worker_gone_or_not_ready(worker, worker_node(ctx, worker).await?.as_ref());
    let message = status.message.clone();
    let conditions = node_conditions(node, phase, message.as_deref(), away.as_deref());
    let same = status.phase == phase
        && status.conditions == conditions
        && status.status == next.status
        && status.health == next.health
        && status.resources == next.resources
        && status.ports == next.ports
        && status.failure_domain == next.failure_domain
        // Uptime changes on every read; on its own it is no reason to write (a write
        // would wake this controller again, for ever).
        && status.step.is_empty();
    if !same {
        let written = write_with(ctx, node, phase, None, message, Some(&next), conditions).await?;
        // Said once the record holds it: the stored condition is what makes it once.
        match (written.is_some(), was_away(status), away) {
            (true, false, Some(why)) => ctx.event(node, true, WORKER_AWAY, why).await,
            (true, true, None) => {
                let back = format!("worker {worker} is Ready again");
                ctx.event(node, false, WORKER_RETURNED, back).await;
            }
            _ => {}
        }
    }
    // A node on its way somewhere (in creation, restarting) is looked at again soon,
    // unless its stream will say when it moves; a settled one at the resync backstop.
    let settled = matches!(
        phase,
        NodePhase::Online | NodePhase::Offline | NodePhase::Removed
    ) || informer.is_synced(scope);
    Ok(Action::requeue(if settled {
        requeue::RESYNC
    } else {
        std::time::Duration::from_secs(2)
    }))
}

/// The name of the Remove operation a StorageNode's deletion raises for it.
pub fn removal_name(node: &StorageNode) -> String {
    format!("{}-remove", node.name_any())
}

/// A deleted StorageNode goes through a StorageNodeOps Remove, so its volumes move before
/// the control plane removes it; the finalizer stays until that operation has succeeded.
async fn cleanup(node: &StorageNode, ctx: &Context) -> Result<Action, Error> {
    let Some(uuid) = node
        .status
        .as_ref()
        .and_then(|s| s.uuid.as_deref())
        .and_then(|u| u.parse::<Uuid>().ok())
    else {
        return Ok(Action::await_change());
    };
    let clusters: Api<StorageCluster> =
        Api::namespaced(ctx.kube.clone(), &node.namespace().unwrap_or_default());
    let Some(cluster_id) = clusters
        .get_opt(&node.spec.cluster_ref)
        .await?
        .as_ref()
        .and_then(cluster_uuid)
    else {
        return Ok(Action::await_change());
    };
    let ops: Api<StorageNodeOps> =
        Api::namespaced(ctx.kube.clone(), &node.namespace().unwrap_or_default());
    let name = removal_name(node);
    let existing = ops.get_opt(&name).await?;
    // Already removed (by hand, or by a pass before a crash): nothing to drain. The answer
    // comes from the control plane, not from a cache.
    let Some(op) = existing else {
        let status = match ctx
            .control_plane()?
            .get_storage_node(cluster_id, uuid)
            .await
        {
            Ok(n) => n.status,
            Err(e) if e.is_not_found() => return Ok(Action::await_change()),
            Err(e) => return Err(e.into()),
        };
        if status == NodeStatus::Removed {
            return Ok(Action::await_change());
        }
        if !matches!(status, NodeStatus::Online | NodeStatus::Suspended) {
            let why = format!(
                "the control plane removes only an online or suspended node, and node {uuid} is {status}: restart it (StorageNodeOps Restart) and the removal starts, or remove the finalizer {FINALIZER} to leave the control-plane node behind"
            );
            if node.status.as_ref().and_then(|s| s.message.as_deref()) != Some(why.as_str()) {
                ctx.event(node, true, "RemovalDeferred", why.clone()).await;
                write_message(ctx, node, why.clone()).await?;
            }
            return Err(Error::Held(why));
        }
        let mut op = StorageNodeOps::new(
            &name,
            StorageNodeOpsSpec {
                node_ref: node.name_any(),
                action: NodeAction::Remove,
                abort: false,
                force: None,
                reattach_volume: None,
                migrate: None,
                remove: None,
            },
        );
        op.metadata.owner_references = node.controller_owner_ref(&()).map(|o| vec![o]);
        match ops.create(&PostParams::default(), &op).await {
            Ok(_) => {
                let message = format!(
                    "the StorageNode was deleted: StorageNodeOps {name} moves its volumes off, then removes node {uuid}"
                );
                ctx.event(node, false, "RemovalStarted", message.clone())
                    .await;
                write_message(ctx, node, message).await?;
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        return Err(Error::Held(format!("StorageNodeOps {name} created")));
    };
    let status = op.status.clone().unwrap_or_default();
    match status.phase {
        OpsPhase::Succeeded => Ok(Action::await_change()),
        OpsPhase::Failed | OpsPhase::Aborted => {
            let why = format!(
                "StorageNodeOps {name} ended {:?}: {}; the node stays until it is removed — fix the cause and delete {name}, and a new removal starts",
                status.phase,
                status.message.unwrap_or_default()
            );
            if node.status.as_ref().and_then(|s| s.message.as_deref()) != Some(why.as_str()) {
                ctx.event(node, true, "RemovalFailed", why.clone()).await;
                write_message(ctx, node, why.clone()).await?;
            }
            Err(Error::Held(why))
        }
        _ => Err(Error::Held(format!(
            "waiting for StorageNodeOps {name} ({})",
            status.message.unwrap_or_default()
        ))),
    }
}

/// Writes `message` over the node's status message, keeping every other field this
/// controller owns as it is.
async fn write_message(ctx: &Context, node: &StorageNode, message: String) -> Result<(), Error> {
    let status = node.status.clone().unwrap_or_default();
    write(
        ctx,
        node,
        status.phase,
        Some(status.step.clone()).filter(|s| !s.is_empty()),
        Some(message),
        Some(&status),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(phase: &str) -> StorageDevice {
        serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2",
            "kind": "StorageDevice",
            "metadata": {"name": format!("d-{phase}")},
            "spec": {"nodeRef": "n", "deviceID": "x"},
            "status": {"phase": phase},
        }))
        .expect("device")
    }

    #[test]
    fn the_counts_are_the_serving_drives_and_all_of_them() {
        let devices = ["Online", "Online", "Failed", "Removed"].map(device);
        assert_eq!(
            counts_of(&devices),
            DeviceCounts {
                online: 2,
                total: 4
            }
        );
        assert_eq!(counts_of(&[]), DeviceCounts::default());
    }

    #[test]
    fn a_deleted_nodes_series_go_and_its_neighbours_stay() {
        let m = crate::runtime::metrics::Metrics::new();
        let names: Vec<String> = PHASES.iter().map(|p| format!("{p:?}")).collect();
        for n in ["a", "b"] {
            m.one_hot(
                PHASE_STATE,
                &series_labels("sb", n),
                names.iter().map(String::as_str),
                Some("Online"),
            );
            m.set(
                super::super::ops::remove::DRAIN_BLOCKED,
                super::super::ops::remove::labels(n),
                2.0,
            );
        }
        forget_series(&m, "sb", "a");
        let drain = super::super::ops::remove::DRAIN_BLOCKED;
        let online = |n: &str| {
            m.sample(
                PHASE_STATE,
                &[("cluster", "sb"), ("node", n), ("phase", "Online")],
            )
        };
        assert_eq!(online("a"), None);
        assert_eq!(m.sample(drain, &[("node", "a")]), None);
        assert_eq!(online("b"), Some(1.0));
        assert_eq!(m.sample(drain, &[("node", "b")]), Some(2.0));
    }

    fn capacity(total: i64, used: i64) -> Option<Capacity> {
        Some(Capacity {
            total_bytes: Some(total),
            used_bytes: Some(used),
            sampled_at: None,
        })
    }

    #[test]
    fn capacity_is_rewritten_only_when_it_moved_a_percent_or_the_total_changed() {
        let before = capacity(1000, 100);
        let table = [
            (capacity(1000, 109), before.clone()),
            (capacity(1000, 110), capacity(1000, 110)),
            (capacity(2000, 100), capacity(2000, 100)),
            (None, before.clone()),
        ];
        for (now, want) in table {
            assert_eq!(
                settled_capacity(before.as_ref(), now.clone()),
                want,
                "{now:?}"
            );
        }
        assert_eq!(settled_capacity(None, capacity(1, 1)), capacity(1, 1));
    }

    #[test]
    fn ports_failure_domain_and_capacity_come_from_the_control_planes_record() {
        let found = simplyblock_controlplane::StorageNode {
            mgmt_ip: "10.0.0.7".into(),
            nvmf_port: 4420,
            lvol_subsys_port: 9090,
            rpc_port: 8080,
            failure_domain: 2,
            capacity: simplyblock_controlplane::types::CapacityStat {
                size_total: 4096,
                size_used: 1024,
                date: 1_767_225_600,
                ..Default::default()
            },
            ..Default::default()
        };
        let status = observed(&found);
        let ports = status.ports.expect("ports");
        assert_eq!(ports.management.as_deref(), Some("10.0.0.7"));
        assert_eq!(
            (ports.nvmeof, ports.lvol, ports.rpc),
            (Some(4420), Some(9090), Some(8080))
        );
        assert_eq!(status.failure_domain.as_deref(), Some("2"));
        let capacity = status.resources.and_then(|r| r.capacity).expect("capacity");
        assert_eq!(
            (capacity.total_bytes, capacity.used_bytes),
            (Some(4096), Some(1024))
        );
        assert!(capacity.sampled_at.is_some());
        // No statistics, no capacity.
        let bare = observed(&simplyblock_controlplane::StorageNode::default());
        assert_eq!(bare.resources.and_then(|r| r.capacity), None);
        assert_eq!(bare.ports.and_then(|p| p.nvmeof), None);
    }
}

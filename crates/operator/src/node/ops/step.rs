//! What every StorageNodeOps action shares, below the actions and the registry that
//! dispatches to them: the node as the control plane sees it ([`Seen`]), the plan helpers
//! every step uses, the cluster gate of the actions that need a settled cluster, the
//! node calls several actions issue ([`NodeCall`]), and the kind's own status fields
//! ([`Fields`]).

use std::time::Duration;

use kube::ResourceExt;
use kube::api::Api;
use serde::Serialize;
use simplyblock_api::storage_node_ops::{DrainStatus, NodeOpsStep, RemovalStatus, StorageNodeOps};
use simplyblock_api::{StorageCluster, StorageNode};
use simplyblock_controlplane::{
    ClusterStatus, NodeRestart, NodeStatus, StorageNode as CpNode, Uuid,
};

use crate::runtime::context::Context;
use crate::runtime::ops::{self, Move, Plan};

/// StorageNodeOps' own status fields, beside the common ones (Remove's).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fields {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removal: Option<RemovalStatus>,
}

/// How often an awaited step looks at the control plane.
pub const AWAIT_POLL: Duration = Duration::from_secs(1);

/// What every action reads: the control plane's ids of the node and its cluster, and its
/// view of the node.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// From the node's StorageCluster's status.uuid.
    pub cluster: Option<Uuid>,
    /// From the StorageNode's status.uuid.
    pub node: Option<Uuid>,
    /// `None` with both ids: the control plane does not know the node.
    pub found: Option<CpNode>,
}

/// Reads what every action sees of `node`.
pub async fn observe(node: &StorageNode, ctx: &Context) -> Result<Seen, ops::Error> {
    let uuid = |s: Option<&String>| s.and_then(|u| u.parse::<Uuid>().ok());
    let mut seen = Seen {
        node: uuid(node.status.as_ref().and_then(|s| s.uuid.as_ref())),
        ..Seen::default()
    };
    let clusters: Api<StorageCluster> =
        Api::namespaced(ctx.kube.clone(), &node.namespace().unwrap_or_default());
    if let Some(cluster) = clusters.get_opt(&node.spec.cluster_ref).await? {
        seen.cluster = uuid(cluster.status.as_ref().and_then(|s| s.uuid.as_ref()));
    }
    let (Some(cluster), Some(id)) = (seen.cluster, seen.node) else {
        return Ok(seen);
    };
    // From the cluster's node stream once synced; a node it lacks is asked by GET.
    let informer = ctx.follow(simplyblock_controlplane::Scope::Nodes { cluster })?;
    seen.found = match informer.node(cluster, id).await {
        Ok(n) => Some(n),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    Ok(seen)
}

/// The cluster gate of the actions that move or stop a node for a while (Migrate,
/// HostMaintenance), asked once before the lock: the node's cluster exists in the control
/// plane, is active and is not rebalancing.
pub async fn cluster_gate(
    node: &StorageNode,
    ctx: &Context,
) -> Result<Option<ops::Hold>, ops::Error> {
    let name = &node.spec.cluster_ref;
    let hold = |message: String| {
        Ok(Some(ops::Hold {
            reason: "ClusterNotReady",
            message,
        }))
    };
    let clusters: Api<StorageCluster> =
        Api::namespaced(ctx.kube.clone(), &node.namespace().unwrap_or_default());
    let id = clusters
        .get_opt(name)
        .await?
        .and_then(|c| c.status?.uuid?.parse::<Uuid>().ok());
    let Some(id) = id else {
        return hold(format!(
            "StorageCluster {name} does not exist in the control plane yet; the operation starts once it does"
        ));
    };
    let cluster = ctx.control_plane()?.get_cluster(id).await?;
    if cluster.status != ClusterStatus::Active {
        return hold(format!(
            "StorageCluster {name} is {} in the control plane, not active; the operation starts once it is active",
            cluster.status
        ));
    }
    if cluster.is_re_balancing {
        return hold(format!(
            "StorageCluster {name} is rebalancing; the operation starts once the rebalance is over"
        ));
    }
    Ok(None)
}

/// Looks again after [`AWAIT_POLL`], saying `message`.
/// What a step of an action is decided over, beside the action's own observation: the
/// operation, its StorageNode, the step it is at, and the common observation.
#[derive(Clone, Copy)]
pub struct At<'a> {
    pub op: &'a StorageNodeOps,
    pub node: &'a StorageNode,
    pub step: NodeOpsStep,
    pub seen: &'a Seen,
}

/// The step issues `call`, saying `message`.
pub fn call<C>(call: C, message: String) -> Plan<NodeOpsStep, C, Fields> {
    Plan::Call { call, message }
}

pub fn wait<C>(message: String) -> Plan<NodeOpsStep, C, Fields> {
    Plan::Wait {
        message,
        after: AWAIT_POLL,
        event: None,
    }
}

pub fn advance<C>(to: NodeOpsStep, message: impl Into<String>) -> Plan<NodeOpsStep, C, Fields> {
    Plan::Advance {
        to: Move::To(to),
        message: message.into(),
        kind_status: None,
    }
}

pub fn succeed<C>(message: impl Into<String>) -> Plan<NodeOpsStep, C, Fields> {
    Plan::Succeed {
        message: message.into(),
        kind_status: None,
    }
}

/// Succeeds once the node is `wanted`, and waits otherwise.
pub fn settle<C>(
    status: NodeStatus,
    wanted: NodeStatus,
    done: &str,
) -> Plan<NodeOpsStep, C, Fields> {
    if status == wanted {
        succeed(done)
    } else {
        wait(format!(
            "the control plane reports the node {status}; waiting for {wanted}"
        ))
    }
}

/// A call on the node itself, in its cluster: the whole of a single-call action, and a
/// step of the longer ones (HostMaintenance shuts the node down and restarts it, Migrate
/// restarts it elsewhere).
#[derive(Clone, Debug, PartialEq)]
pub enum NodeCall {
    Shutdown(Uuid, Uuid),
    Suspend(Uuid, Uuid),
    Resume(Uuid, Uuid),
    Restart(Uuid, Uuid, NodeRestart),
}

impl NodeCall {
    /// Issues the call; `Err` is the sentence a person reads.
    pub async fn execute(&self, ctx: &Context) -> Result<(), String> {
        let cp = ctx.control_plane().map_err(|e| e.to_string())?;
        let result = match self {
            NodeCall::Shutdown(c, n) => cp.shutdown_storage_node(*c, *n, false).await,
            NodeCall::Suspend(c, n) => cp.suspend_storage_node(*c, *n, false).await,
            NodeCall::Resume(c, n) => cp.resume_storage_node(*c, *n).await,
            NodeCall::Restart(c, n, params) => cp.restart_storage_node(*c, *n, params).await,
        };
        result.map_err(|e| e.to_string())
    }
}

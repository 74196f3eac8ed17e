//! StorageNodeOps Migrate: not run by this operator yet. Its graph is declared in the API; an
//! operation ends Failed before it calls anything.

use jiff::Timestamp;
use simplyblock_api::StorageNode;
use simplyblock_api::storage_node_ops::{NodeOpsStep, StorageNodeOps};

use super::unsupported;
use crate::context::Context;
use crate::ops::{self, Noted, Plan};

/// What Migrate reads beside the node.
#[derive(Clone, Debug, Default)]
pub struct Observed {}

/// The calls Migrate makes.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {}

pub async fn observe(
    _op: &StorageNodeOps,
    _node: &StorageNode,
    _step: NodeOpsStep,
    _base: &super::Observed,
    _ctx: &Context,
) -> Result<Observed, ops::Error> {
    Ok(Observed::default())
}

pub fn plan(
    op: &StorageNodeOps,
    _node: &StorageNode,
    _step: NodeOpsStep,
    _obs: &super::Observed,
    _now: Timestamp,
) -> Noted<NodeOpsStep, super::Call> {
    Plan::Fail(unsupported(op.spec.action)).into()
}

pub async fn execute(
    _op: &StorageNodeOps,
    _node: &StorageNode,
    call: &Call,
    _ctx: &Context,
) -> Result<(), String> {
    match *call {}
}

//! The StorageCluster status this controller writes, typed: [`CreationStatus`] while the
//! creation machine runs, [`SteadyStatus`] once the control plane has the cluster. Both
//! are server-side applies under one field manager, so a field one of them leaves out is
//! removed (the creation step once the cluster exists).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::Serialize;
use simplyblock_api::StorageCluster;
use simplyblock_api::storage_cluster::{
    ClusterPhase, ClusterTask, CreationStep, OperationRecord, StorageClusterStatus,
};
use simplyblock_statemachine::{Machine, StepSnapshot};

use crate::runtime::context::Context;
use crate::runtime::kit::{self, Error, Guard};

/// The field manager of the StorageCluster controller's writes (status and Secrets).
pub const MANAGER: &str = "storagecluster-controller";

/// The fields of StorageCluster status this controller owns while it creates the cluster.
#[derive(Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct CreationStatus {
    phase: ClusterPhase,
    #[serde(skip_serializing_if = "StepSnapshot::is_empty")]
    step: StepSnapshot,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    conditions: Vec<Condition>,
}

/// Writes the creation machine's position (and phase and message), before the step's
/// side effect, and returns the cluster as stored. Under [`Guard::ResourceVersion`],
/// `None`: the object moved since it was read and nothing was written.
pub async fn write_step(
    ctx: &Context,
    cluster: &StorageCluster,
    phase: ClusterPhase,
    machine: Option<&Machine<'_, CreationStep>>,
    message: Option<String>,
    guard: Guard,
) -> Result<Option<StorageCluster>, Error> {
    let status = CreationStatus {
        phase,
        step: machine.map(|m| m.snapshot()).unwrap_or_default(),
        conditions: conditions_of(cluster, phase, message.as_deref()),
        message,
        observed_generation: cluster.metadata.generation,
    };
    apply_unless_stale(ctx, cluster, &status, guard).await
}

/// The conditions for `phase`, from those stored on `cluster`.
fn conditions_of(
    cluster: &StorageCluster,
    phase: ClusterPhase,
    message: Option<&str>,
) -> Vec<Condition> {
    crate::runtime::conditions::for_phase(
        cluster.status.as_ref().map(|s| &s.conditions[..]),
        phase,
        message,
        cluster.metadata.generation,
    )
}

/// The fields of StorageCluster status this controller owns once the cluster exists:
/// what the control plane reports, and the history of its operations.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SteadyStatus {
    phase: ClusterPhase,
    #[serde(skip_serializing_if = "Option::is_none")]
    uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nqn: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    erasure_coding_scheme: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rebalancing: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_fault_tolerance: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_concurrent_worker_restarts: Option<i32>,
    tasks: Vec<ClusterTask>,
    recent_operations: Vec<OperationRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    conditions: Vec<Condition>,
}

/// Writes the steady-state status, only when it differs from what is stored. `false`: the
/// history changed and the object moved since it was read (409); nothing was written.
pub async fn write_steady(
    ctx: &Context,
    cluster: &StorageCluster,
    next: &StorageClusterStatus,
) -> Result<bool, Error> {
    let current = cluster.status.clone().unwrap_or_default();
    let mut next = next.clone();
    next.observed_generation = cluster.metadata.generation;
    next.conditions = conditions_of(cluster, next.phase, next.message.as_deref());
    if current == next {
        return Ok(true);
    }
    let status = SteadyStatus {
        phase: next.phase,
        uuid: next.uuid.clone(),
        cluster_name: next.cluster_name.clone(),
        nqn: next.nqn.clone(),
        erasure_coding_scheme: next.erasure_coding_scheme.clone(),
        status: next.status.clone(),
        rebalancing: next.rebalancing,
        max_fault_tolerance: next.max_fault_tolerance,
        max_concurrent_worker_restarts: next
            .max_fault_tolerance
            .map(|ftt| cluster.spec.max_concurrent_worker_restarts.min(ftt.max(1))),
        tasks: next.tasks.clone(),
        recent_operations: next.recent_operations.clone(),
        message: next.message.clone(),
        observed_generation: next.observed_generation,
        conditions: next.conditions.clone(),
    };
    // The history is merged into what was read: a stale read must not overwrite entries a
    // newer write recorded.
    let guard = if current.recent_operations != next.recent_operations {
        Guard::ResourceVersion
    } else {
        Guard::None
    };
    Ok(apply_unless_stale(ctx, cluster, &status, guard)
        .await?
        .is_some())
}

/// [`kit::apply_status`], with a refused conditional write as `None` rather than an
/// error: the caller decides again on the newer version.
async fn apply_unless_stale<S: Serialize>(
    ctx: &Context,
    cluster: &StorageCluster,
    status: &S,
    guard: Guard,
) -> Result<Option<StorageCluster>, Error> {
    kit::unless_stale(kit::apply_status(&ctx.kube, cluster, MANAGER, status, guard).await)
}

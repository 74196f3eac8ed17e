//! StoragePoolOps: its one action, Rebalance, needs volume migration, which this operator
//! does not have yet. An operation is therefore ended Failed before it takes the pool's
//! lock or calls anything, saying so, rather than left Pending without a word.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde::Serialize;
use simplyblock_api::StoragePoolOps;
use simplyblock_api::common::OpsPhase;

use crate::runtime::context::Context;
use crate::runtime::kit::{self, Error, Guard};

const MANAGER: &str = "storagepoolops-controller";

/// What a refused operation's status says.
pub const UNSUPPORTED: &str = "Rebalance is not supported by this operator yet (it needs volume migration); nothing was changed, and this record can be deleted";

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "storagepoolops";

/// Runs the controller until the operator stops.
pub async fn run(ctx: Arc<Context>) {
    let controller = Controller::new(
        ctx.scope.api::<StoragePoolOps>(&ctx.kube),
        watcher::Config::default(),
    );
    kit::run(CONTROLLER, controller, reconcile, ctx).await
}

/// The fields of StoragePoolOps status this controller writes: the refusal.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Refusal {
    phase: OpsPhase,
    message: &'static str,
    completed_at: Time,
    observed_generation: Option<i64>,
    conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}

async fn reconcile(op: Arc<StoragePoolOps>, ctx: Arc<Context>) -> Result<Action, Error> {
    let phase = op.status.as_ref().map(|s| s.phase).unwrap_or_default();
    if phase.is_terminal() {
        if op.metadata.deletion_timestamp.is_none() {
            // The bounded history every Ops kind keeps, per pool.
            let ns = op.namespace().unwrap_or_default();
            let next = crate::runtime::ops::history::prune::<StoragePoolOps>(
                &kube::Api::namespaced(ctx.kube.clone(), &ns),
                &kube::Api::namespaced(ctx.kube.clone(), &ns),
                &op.spec.pool_ref,
                |o| o.spec.pool_ref.as_str(),
                None,
            )
            .await?;
            if let Some(wait) = next {
                return Ok(Action::requeue(wait.max(std::time::Duration::from_secs(1))));
            }
        }
        return Ok(Action::await_change());
    }
    let now = Time(jiff::Timestamp::now());
    let previous = op.status.as_ref().map_or(&[][..], |s| &s.conditions[..]);
    let verdicts = simplyblock_api::conditions::ops_verdicts(OpsPhase::Failed, UNSUPPORTED);
    let refusal = Refusal {
        phase: OpsPhase::Failed,
        message: UNSUPPORTED,
        conditions: simplyblock_api::conditions::with_conditions(
            previous,
            &verdicts,
            op.metadata.generation,
            &now,
        ),
        completed_at: now,
        observed_generation: op.metadata.generation,
    };
    kit::apply_status(
        &ctx.kube,
        op.as_ref(),
        MANAGER,
        &refusal,
        Guard::ResourceVersion,
    )
    .await?;
    ctx.event(&*op, true, "ActionUnsupported", UNSUPPORTED.to_owned())
        .await;
    Ok(Action::await_change())
}

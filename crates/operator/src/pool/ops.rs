//! StoragePoolOps: its one action, Rebalance, needs volume migration, which this operator
//! does not have yet. An operation is therefore ended Failed before it takes the pool's
//! lock or calls anything, saying so, rather than left Pending without a word.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde_json::json;
use simplyblock_api::StoragePoolOps;
use simplyblock_api::common::OpsPhase;

use crate::context::{Context, requeue};

const MANAGER: &str = "storagepoolops-controller";

/// What a refused operation's status says.
pub const UNSUPPORTED: &str = "Rebalance is not supported by this operator yet (it needs volume migration); nothing was changed, and this record can be deleted";

pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let ops: Api<StoragePoolOps> = match &namespace {
        Some(ns) => Api::namespaced(ctx.kube.clone(), ns),
        None => Api::all(ctx.kube.clone()),
    };
    Controller::new(ops, watcher::Config::default())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            crate::ops::metrics::reconciled("storagepoolops", &result);
            if let Err(e) = result {
                tracing::debug!(error = %e, "storagepoolops reconcile");
            }
        })
        .await;
}

fn error_policy(_: Arc<StoragePoolOps>, error: &kube::Error, _: Arc<Context>) -> Action {
    tracing::warn!(error = %error, "reconciling a StoragePoolOps failed; retrying");
    Action::requeue(requeue::RETRY)
}

async fn reconcile(op: Arc<StoragePoolOps>, ctx: Arc<Context>) -> Result<Action, kube::Error> {
    let phase = op.status.as_ref().map(|s| s.phase).unwrap_or_default();
    if phase.is_terminal() {
        return Ok(Action::await_change());
    }
    let api: Api<StoragePoolOps> =
        Api::namespaced(ctx.kube.clone(), &op.namespace().unwrap_or_default());
    let body = json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2",
        "kind": "StoragePoolOps",
        "metadata": {"name": op.name_any()},
        "status": {
            "phase": OpsPhase::Failed,
            "message": UNSUPPORTED,
            "completedAt": Time(jiff::Timestamp::now()),
            "observedGeneration": op.metadata.generation,
        },
    });
    api.patch_status(
        &op.name_any(),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(body),
    )
    .await?;
    ctx.event(&*op, true, "ActionUnsupported", UNSUPPORTED.to_owned())
        .await;
    Ok(Action::await_change())
}

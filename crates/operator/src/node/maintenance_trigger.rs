//! Host maintenance follows the worker: a cordoned worker's StorageNodes each get a
//! HostMaintenance StorageNodeOps (their window, owned by the node); an uncordon before a
//! window was admitted aborts it, and a finished window is deleted on uncordon, so the
//! next cordon opens a fresh one. A finished window's markers (the pods' label, the
//! disruption budget) are removed here too, whatever way it ended.
//!
//! Only nodes in the steady state (with a control-plane id) get a window: a node still
//! being provisioned waits for a cordoned worker on its own (AwaitingWorker).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use simplyblock_api::StorageNode;
use simplyblock_api::common::OpsPhase;
use simplyblock_api::names::derived_name;
use simplyblock_api::storage_node_ops::{NodeAction, StorageNodeOps};

use super::ops::maintenance;
use crate::runtime::context::{Context, requeue};
use crate::runtime::kit::{self, Error};

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "storagenode-maintenance";

/// The name of `node`'s maintenance window.
pub fn window_name(node: &str) -> String {
    derived_name(&[node, "maintenance"], 253)
}

/// What the trigger does for one node. Pure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Cordoned and no window: open one.
    Open,
    /// Uncordoned before the window was admitted: abort it.
    Abort,
    /// Uncordoned and the window finished: remove its markers, then delete it.
    Delete,
    /// The window finished while the worker is still cordoned: remove its markers.
    Teardown,
    Nothing,
}

/// `window`: its phase, step and whether it was asked to abort.
pub fn decide(cordoned: bool, window: Option<(OpsPhase, Option<&str>, bool)>) -> Trigger {
    match (cordoned, window) {
        (true, None) => Trigger::Open,
        (_, Some((phase, _, _))) if phase.is_terminal() => {
            if cordoned {
                Trigger::Teardown
            } else {
                Trigger::Delete
            }
        }
        (false, Some((OpsPhase::Pending, _, false))) => Trigger::Abort,
        (false, Some((OpsPhase::Running, Some("Holding") | None, false))) => Trigger::Abort,
        _ => Trigger::Nothing,
    }
}

/// Runs the controller until the operator stops.
pub async fn run(ctx: Arc<Context>) {
    let controller = Controller::new(
        ctx.scope.api::<StorageNode>(&ctx.kube),
        watcher::Config::default(),
    );
    let store = controller.store();
    let controller = controller
        .watches(
            Api::<Node>::all(ctx.kube.clone()),
            watcher::Config::default(),
            move |worker: Node| {
                store
                    .state()
                    .into_iter()
                    .filter(|n| n.spec.worker_node == worker.name_any())
                    .map(|n| ObjectRef::from_obj(&*n))
                    .collect::<Vec<_>>()
            },
        )
        .watches(
            ctx.scope.api::<StorageNodeOps>(&ctx.kube),
            watcher::Config::default(),
            |op: StorageNodeOps| {
                (op.spec.action == NodeAction::HostMaintenance).then(|| {
                    ObjectRef::<StorageNode>::new(&op.spec.node_ref)
                        .within(&op.namespace().unwrap_or_default())
                })
            },
        );
    kit::run(CONTROLLER, controller, reconcile, ctx).await
}

pub async fn reconcile(node: Arc<StorageNode>, ctx: Arc<Context>) -> Result<Action, Error> {
    let has_id = node.status.as_ref().is_some_and(|s| s.uuid.is_some());
    if node.meta().deletion_timestamp.is_some() || !has_id {
        return Ok(Action::await_change());
    }
    let ns = node.namespace().unwrap_or_default();
    let worker = &node.spec.worker_node;
    let name = window_name(&node.name_any());
    let windows: Api<StorageNodeOps> = Api::namespaced(ctx.kube.clone(), &ns);
    let window = windows.get_opt(&name).await?;
    let cordoned = Api::<Node>::all(ctx.kube.clone())
        .get_opt(worker)
        .await?
        .and_then(|n| n.spec?.unschedulable)
        .unwrap_or(false);
    let seen = window.as_ref().map(|w| {
        let s = w.status.as_ref();
        (
            s.map(|s| s.phase).unwrap_or_default(),
            s.and_then(|s| s.step.state.as_deref()),
            w.spec.abort,
        )
    });
    match decide(cordoned, seen) {
        Trigger::Nothing => {}
        Trigger::Open => {
            let owners: Vec<_> = node
                .controller_owner_ref(&())
                .map(|mut o| {
                    o.block_owner_deletion = Some(false);
                    o
                })
                .into_iter()
                .collect();
            let window: StorageNodeOps = serde_json::from_value(json!({
                "apiVersion": simplyblock_api::keys::API_VERSION, "kind": "StorageNodeOps",
                "metadata": {
                    "name": name,
                    "ownerReferences": owners,
                },
                "spec": {"nodeRef": node.name_any(), "action": "HostMaintenance"},
            }))
            .map_err(|e| Error::Invalid(e.to_string()))?;
            match windows.create(&PostParams::default(), &window).await {
                Ok(_) => {
                    ctx.event(
                        &*node,
                        false,
                        "MaintenanceRequested",
                        format!("worker {worker} is cordoned: maintenance window {name} is opened for this node"),
                    )
                    .await
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Trigger::Abort => {
            let patch = json!({"spec": {"abort": true}});
            windows
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await?;
            ctx.event(
                &*node,
                false,
                "MaintenanceWithdrawn",
                format!("worker {worker} was uncordoned before its maintenance window opened: {name} is aborted"),
            )
            .await;
        }
        Trigger::Teardown | Trigger::Delete => {
            if let Some(left) = maintenance::teardown(&ctx, &ns, worker).await? {
                ctx.event(&*node, true, maintenance::MARKERS_LEFT, left)
                    .await;
                return Ok(Action::requeue(requeue::RESYNC));
            }
            if decide(cordoned, seen) == Trigger::Delete {
                match windows.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(Action::requeue(requeue::RESYNC))
}

#[cfg(test)]
mod tests {
    use super::*;
    use OpsPhase::*;

    #[test]
    fn a_cordon_opens_a_window_and_an_uncordon_withdraws_or_clears_it() {
        let table = [
            (true, None, Trigger::Open),
            (
                true,
                Some((Running, Some("ShuttingDown"), false)),
                Trigger::Nothing,
            ),
            (
                true,
                Some((Succeeded, Some("Cleanup"), false)),
                Trigger::Teardown,
            ),
            (false, None, Trigger::Nothing),
            (false, Some((Pending, None, false)), Trigger::Abort),
            (
                false,
                Some((Running, Some("Holding"), false)),
                Trigger::Abort,
            ),
            (
                false,
                Some((Running, Some("Holding"), true)),
                Trigger::Nothing,
            ),
            // Past Holding the window runs on: the uncordon is what AwaitingHost waits for.
            (
                false,
                Some((Running, Some("AwaitingHost"), false)),
                Trigger::Nothing,
            ),
            (
                false,
                Some((Aborted, Some("Holding"), true)),
                Trigger::Delete,
            ),
            (
                false,
                Some((Failed, Some("Restarting"), false)),
                Trigger::Delete,
            ),
        ];
        for (cordoned, window, want) in table {
            assert_eq!(decide(cordoned, window), want, "{cordoned} {window:?}");
        }
    }

    #[test]
    fn a_window_name_is_bounded_and_readable_when_it_fits() {
        assert_eq!(window_name("sb-w1-0"), "sb-w1-0-maintenance");
        assert!(window_name(&"n".repeat(300)).len() <= 253);
    }
}

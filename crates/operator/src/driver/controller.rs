//! The SimplyblockDriver controller: each pass observes ([`observe`]), decides
//! ([`plan::plan`]) and carries the decision out here: the applies (server-side, forced,
//! under one field manager), the strip of an adopted release's metadata, the removal of
//! what the spec no longer asks for, then the status, its events and metrics. Deleting
//! the driver deletes its cluster-scoped objects behind its finalizer; the namespaced
//! ones go with their owner.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use simplyblock_api::SimplyblockDriver;
use simplyblock_api::control_plane::ControlPlane;
use simplyblock_api::keys::{
    MANAGED_BY_LABEL, MANAGED_BY_SIMPLYBLOCK_DRIVER, SIMPLYBLOCK_DRIVER_FINALIZER,
};
use simplyblock_api::simplyblock_driver::{DriverPhase, SimplyblockDriverStatus};

use super::adoption;
use super::metrics;
use super::objects::ObjectKey;
use super::observe::{self, api};
use super::plan::{self, Converge, DriverRef, Hold, Plan};
use crate::runtime::context::{Context, requeue};
use crate::runtime::kit::{self, Error, Guard};

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "simplyblockdriver";
/// The field manager of every object and status field the controller writes.
pub const MANAGER: &str = "simplyblockdriver-controller";

/// Runs the controller until the operator stops. `operator_image` is the operator's own
/// image, whose registry and tag the driver runs at when `spec.image` is unset.
pub async fn run(ctx: Arc<Context>, operator_image: String) {
    let controller = Controller::new(
        ctx.scope.api::<SimplyblockDriver>(&ctx.kube),
        watcher::Config::default(),
    );
    let store = controller.store();
    // Which driver is the cluster's changes when one comes or goes: the others look again.
    let others = move |changed: SimplyblockDriver| {
        store
            .state()
            .into_iter()
            .filter(|d| d.uid() != changed.uid())
            .map(|d| ObjectRef::from_obj(&*d))
            .collect::<Vec<_>>()
    };
    // Where the control plane's CA is kept is the ControlPlane's: the drivers of its
    // namespace look again when it changes.
    let drivers = controller.store();
    let of_namespace = move |cp: ControlPlane| {
        drivers
            .state()
            .into_iter()
            .filter(|d| d.namespace() == cp.namespace())
            .map(|d| ObjectRef::from_obj(&*d))
            .collect::<Vec<_>>()
    };
    // The plugins' readiness is the driver's phase.
    let managed = watcher::Config::default().labels(&format!(
        "{MANAGED_BY_LABEL}={MANAGED_BY_SIMPLYBLOCK_DRIVER}"
    ));
    let controller = controller
        .owns(ctx.scope.api::<StatefulSet>(&ctx.kube), managed.clone())
        .owns(ctx.scope.api::<DaemonSet>(&ctx.kube), managed)
        .watches(
            ctx.scope.api::<SimplyblockDriver>(&ctx.kube),
            watcher::Config::default(),
            others,
        )
        .watches(
            ctx.scope.api::<ControlPlane>(&ctx.kube),
            watcher::Config::default(),
            of_namespace,
        );
    let image: Arc<str> = operator_image.into();
    let reconcile = move |driver, ctx| reconcile(driver, ctx, image.clone());
    kit::run(CONTROLLER, controller, reconcile, ctx).await
}

pub async fn reconcile(
    driver: Arc<SimplyblockDriver>,
    ctx: Arc<Context>,
    operator_image: Arc<str>,
) -> Result<Action, Error> {
    let ctx = &*ctx;
    let image = &*operator_image;
    kit::finalized(
        &ctx.kube,
        SIMPLYBLOCK_DRIVER_FINALIZER,
        driver,
        |d| async move { apply(&d, ctx, image).await },
        |d| async move { cleanup(&d, ctx).await },
    )
    .await
}

async fn apply(
    driver: &SimplyblockDriver,
    ctx: &Context,
    operator_image: &str,
) -> Result<Action, Error> {
    let obs = observe::observe(&ctx.kube, driver, &ctx.namespace, operator_image).await?;
    let plan = plan::plan(driver, &obs);
    let refused = match &plan {
        Ok(converge) => execute(ctx, driver, converge).await?,
        Err(_) => None,
    };
    let mut status = plan::status(driver, &obs, &plan);
    if let Some(refused) = &refused {
        status.message = Some(refused.message.clone());
    }
    status.conditions = crate::runtime::conditions::for_phase(
        driver.status.as_ref().map(|s| &s.conditions[..]),
        status.phase,
        status.message.as_deref(),
        driver.metadata.generation,
    );
    report(ctx, driver, &plan, refused.as_ref(), &status).await?;
    Ok(Action::requeue(if refused.is_some() {
        requeue::RETRY
    } else {
        requeue::RESYNC
    }))
}

/// An apply the API server refused for a reason a retry does not change (a permission
/// the operator lacks, a field that cannot take the value): said in status, not only in
/// the log.
fn refusal(key: &ObjectKey, error: &kube::Error) -> Option<Hold> {
    let kube::Error::Api(status) = error else {
        return None;
    };
    let hint = match status.code {
        403 => "the operator's ClusterRole lacks a permission this controller uses",
        422 => "the object cannot take what the spec asks for",
        _ => return None,
    };
    Some(Hold {
        reason: "ApplyRefused",
        message: format!("applying {key} was refused ({hint}): {}", status.message),
    })
}

fn list(keys: impl IntoIterator<Item = impl std::fmt::Display>) -> String {
    keys.into_iter()
        .map(|k| k.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Applies, strips and removes what `converge` says, with an event for each kind of
/// change made; stops at an apply refused for good, and returns why.
async fn execute(
    ctx: &Context,
    driver: &SimplyblockDriver,
    converge: &Converge,
) -> Result<Option<Hold>, Error> {
    let namespace = driver.namespace().unwrap_or_default();
    let params = PatchParams::apply(MANAGER).force();
    for (key, body) in &converge.apply {
        let applied = api(&ctx.kube, key.kind, &namespace)
            .patch(&key.name, &params, &Patch::Apply(body))
            .await;
        crate::runtime::crash::point(crate::runtime::crash::DRIVER_APPLY);
        if let Err(e) = applied {
            return match refusal(key, &e) {
                Some(refused) => Ok(Some(refused)),
                None => Err(e.into()),
            };
        }
    }
    for key in &converge.strip {
        api(&ctx.kube, key.kind, &namespace)
            .patch(
                &key.name,
                &PatchParams::default(),
                &Patch::Merge(adoption::strip_patch()),
            )
            .await?;
    }
    for key in &converge.prune {
        delete(ctx, key, &namespace).await?;
    }
    if !converge.strip.is_empty() {
        ctx.event(
            driver,
            false,
            "Adopted",
            format!(
                "took over from their Helm release, which now keeps them (helm.sh/resource-policy: keep): {}",
                list(&converge.strip)
            ),
        )
        .await;
    }
    let applied = converge
        .apply
        .iter()
        .map(|(k, _)| k)
        .filter(|k| !converge.strip.contains(k));
    let applied = list(applied);
    if !applied.is_empty() {
        ctx.event(driver, false, "Applied", format!("applied {applied}"))
            .await;
    }
    if !converge.prune.is_empty() {
        ctx.event(
            driver,
            false,
            "Removed",
            format!(
                "removed what the spec no longer asks for: {}",
                list(&converge.prune)
            ),
        )
        .await;
    }
    Ok(None)
}

async fn delete(ctx: &Context, key: &ObjectKey, namespace: &str) -> Result<(), Error> {
    match api(&ctx.kube, key.kind, namespace)
        .delete(&key.name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Writes `status` when it changed, with an event when the phase changed (or the message
/// of a hold or of a refused apply is new), and the metrics.
async fn report(
    ctx: &Context,
    driver: &SimplyblockDriver,
    plan: &Plan,
    refused: Option<&Hold>,
    status: &SimplyblockDriverStatus,
) -> Result<(), Error> {
    let previous = driver.status.as_ref();
    let message = status.message.clone().unwrap_or_default();
    let held = match plan {
        Err(hold) => Some(hold),
        Ok(_) => refused,
    };
    if let Some(hold) = held
        && previous.and_then(|p| p.message.as_deref()) != Some(hold.message.as_str())
    {
        ctx.event(driver, true, hold.reason, message.clone()).await;
    }
    let converging = plan.is_ok();
    if converging && previous.map(|p| p.phase) != Some(status.phase) {
        let (reason, warning) = match status.phase {
            DriverPhase::Installing => ("Installing", false),
            DriverPhase::Ready => ("Ready", false),
            DriverPhase::Degraded => ("Degraded", true),
            DriverPhase::Unavailable => ("Unavailable", true),
        };
        ctx.event(driver, warning, reason, message).await;
    }
    if previous != Some(status) {
        kit::apply_status(&ctx.kube, driver, MANAGER, status, Guard::ResourceVersion).await?;
    }
    metrics::record(
        &ctx.metrics,
        &driver.namespace().unwrap_or_default(),
        &driver.name_any(),
        previous,
        status,
    );
    Ok(())
}

/// The driver is being deleted: when it is the cluster's driver, its cluster-scoped
/// objects go (a held duplicate installed none, and must not take the real one's).
async fn cleanup(driver: &SimplyblockDriver, ctx: &Context) -> Result<Action, Error> {
    let drivers = observe::drivers(&ctx.kube).await?;
    if plan::active(&drivers) == Some(&DriverRef::of(driver)) {
        let snapshot_api = observe::snapshot_api(&ctx.kube).await?;
        let group_snapshot_api = observe::group_snapshot_api(&ctx.kube).await?;
        let objects = observe::cluster_scoped(&ctx.kube, snapshot_api, group_snapshot_api).await?;
        for key in &objects {
            delete(ctx, key, "").await?;
        }
        if !objects.is_empty() {
            ctx.event(
                driver,
                false,
                "Removed",
                format!(
                    "deleted the driver's cluster-scoped objects: {}",
                    list(&objects)
                ),
            )
            .await;
        }
    }
    metrics::forget(
        &ctx.metrics,
        &driver.namespace().unwrap_or_default(),
        &driver.name_any(),
        driver.status.as_ref(),
    );
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::objects::Kind;

    fn refused_with(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("csidrivers is forbidden", "Forbidden")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn a_missing_permission_or_an_impossible_field_is_said_in_status_and_the_rest_retried() {
        let key = ObjectKey::new(Kind::CsiDriver, "csi.simplyblock.io");
        let forbidden = refusal(&key, &refused_with(403)).expect("403");
        assert_eq!(forbidden.reason, "ApplyRefused");
        assert!(
            forbidden.message.starts_with(
                "applying CSIDriver/csi.simplyblock.io was refused (the operator's ClusterRole lacks"
            ),
            "{}",
            forbidden.message
        );
        assert!(forbidden.message.ends_with("csidrivers is forbidden"));
        assert!(refusal(&key, &refused_with(422)).is_some());
        assert!(refusal(&key, &refused_with(409)).is_none());
        assert!(refusal(&key, &refused_with(500)).is_none());
    }
}

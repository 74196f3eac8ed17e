//! What the steps of both stages are built from: the `step!` table row, the pieces their
//! descriptions share, and the guarded writes their effects make.

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::Value;

use crate::checks;
use crate::step::{Action, Context, Options, Refusal, StepError};
use crate::world::{Crd, GROUP, V1ALPHA1, V1ALPHA2, World, display, kind, name, text};

pub(super) fn ok(_: &World, _: &Options) -> Result<(), Vec<Refusal>> {
    Ok(())
}

pub(super) fn crd_name(crd: &Crd) -> String {
    format!("CustomResourceDefinition/{}.{GROUP}", crd.plural)
}

/// The group's CRDs of the kinds this release converts.
pub(super) fn converting_crds(world: &World) -> impl Iterator<Item = &Crd> {
    let kinds = checks::converting_kinds();
    world
        .crds
        .iter()
        .filter(move |c| kinds.contains(&c.kind.as_str()))
}

pub(super) fn action(
    rule: &'static str,
    verb: &'static str,
    object: String,
    detail: String,
) -> Action {
    Action {
        rule,
        verb,
        object,
        detail,
    }
}

pub(super) fn failed(e: impl Into<anyhow::Error>) -> StepError {
    StepError::Failed(e.into())
}

pub(super) fn kube_failed(what: impl std::fmt::Display) -> impl FnOnce(kube::Error) -> StepError {
    move |e| StepError::kube(what, e)
}

/// The API of `object`'s kind: the group's kinds at the version the object was read at,
/// the Kubernetes kinds the steps touch by their own resource.
pub(super) fn api_of(
    ctx: &Context,
    world: &World,
    object: &Value,
) -> Result<Api<DynamicObject>, StepError> {
    let kind_ = kind(object);
    let namespace = match text(object, "/metadata/namespace") {
        "" => ctx.namespace.as_str(),
        ns => ns,
    };
    let (group, plural, namespaced) = match kind_ {
        "DaemonSet" => ("apps", "daemonsets", true),
        "Deployment" => ("apps", "deployments", true),
        "Service" => ("", "services", true),
        "ServiceAccount" => ("", "serviceaccounts", true),
        "ConfigMap" => ("", "configmaps", true),
        "Secret" => ("", "secrets", true),
        "PersistentVolumeClaim" => ("", "persistentvolumeclaims", true),
        "PersistentVolume" => ("", "persistentvolumes", false),
        "Node" => ("", "nodes", false),
        _ => {
            let crd = world.crd(kind_).ok_or_else(|| {
                failed(anyhow::anyhow!(
                    "{}: no CRD of kind {kind_}",
                    display(object)
                ))
            })?;
            let version = if text(object, "/apiVersion").ends_with(V1ALPHA2) {
                V1ALPHA2
            } else {
                V1ALPHA1
            };
            return Ok(crd.api(&ctx.client, namespace, version));
        }
    };
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind_), plural);
    Ok(if namespaced {
        Api::namespaced_with(ctx.client.clone(), namespace, &resource)
    } else {
        Api::all_with(ctx.client.clone(), &resource)
    })
}

/// Merges `patch` into `object`, guarded by the resourceVersion it was read at: a change
/// since is a conflict, and the step's next run reads again.
pub(super) async fn merge(
    ctx: &Context,
    world: &World,
    object: &Value,
    mut patch: Value,
) -> Result<(), StepError> {
    let version = text(object, "/metadata/resourceVersion");
    if !version.is_empty() {
        patch["metadata"]["resourceVersion"] = Value::String(version.into());
    }
    api_of(ctx, world, object)?
        .patch(name(object), &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(kube_failed(format!("updating {}", display(object))))?;
    Ok(())
}

macro_rules! step {
    ($id:literal, $stage:ident, $phase:literal, [$($req:literal),*], $describe:expr, $done:expr, $validate:expr, $apply:expr) => {
        step!($id, $stage, $phase, [$($req),*], $describe, $done, $validate, $apply, None, false)
    };
    ($id:literal, $stage:ident, $phase:literal, [$($req:literal),*], $describe:expr, $done:expr, $validate:expr, $apply:expr, $verify:expr, $recorded:expr) => {
        Step {
            id: $id,
            stage: Stage::$stage,
            phase: $phase,
            requires: &[$($req),*],
            describe: $describe,
            done: $done,
            validate: $validate,
            apply: $apply,
            verify: $verify,
            recorded: $recorded,
        }
    };
}
pub(super) use step;

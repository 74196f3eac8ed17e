//! The upgrade stage: the conversion webhook, the CRDs serving v1alpha2, and this
//! operator in place of the Go one. Each step's description, completion and validation,
//! then the change it makes.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{Value, json};

use super::shared::{action, converting_crds, crd_name, failed, kube_failed, merge, ok, step};
use crate::step::{Action, Context, Options, Refusal, Stage, Step, StepError};
use crate::world::{
    Crd, GROUP, OPERATOR_DEPLOYMENT, V1ALPHA1, V1ALPHA2, World, display, kind, name, text,
};
use crate::{checks, world};

/// Helm's annotation naming a release's object.
pub const RELEASE_ANNOTATION: &str = "meta.helm.sh/release-name";
/// Helm's annotation keeping an object when its release goes.
pub const KEEP_ANNOTATION: &str = "helm.sh/resource-policy";
/// The identity the tool holds the operator's Lease under.
pub const HOLDER: &str = "simplyblock-upgrade";
/// How long the tool's hold on the Lease lasts without a rerun renewing it.
pub const HOLD_SECONDS: i32 = 3600;
/// The field manager of the tool's writes.
pub const MANAGER: &str = "simplyblock-upgrade";
/// The pod-template annotation that restarts the operator's replicas at the swap.
pub const RESTARTED_ANNOTATION: &str = "storage.simplyblock.io/restarted-at";
/// The annotation the operator smoke test writes at v1alpha2.
pub const SMOKE_ANNOTATION: &str = "storage.simplyblock.io/upgraded-by";

/// The upgrade stage's steps, in declaration order.
pub fn steps() -> Vec<Step> {
    vec![
        step!(
            "hold-controllers",
            Upgrade,
            "",
            [],
            hold_describe,
            hold_done,
            hold_validate,
            Some(hold_controllers)
        ),
        step!(
            "deploy-conversion-webhook",
            Upgrade,
            "",
            ["hold-controllers"],
            deploy_describe,
            deploy_done,
            ok,
            Some(deploy_operator)
        ),
        step!(
            "await-conversion-webhook",
            Upgrade,
            "",
            ["deploy-conversion-webhook"],
            await_webhook_describe,
            await_webhook_done,
            ok,
            Some(wait_only)
        ),
        step!(
            "apply-crds",
            Upgrade,
            "",
            ["await-conversion-webhook"],
            apply_crds_describe,
            apply_crds_done,
            ok,
            Some(apply_crds)
        ),
        step!(
            "verify-crd-versions",
            Upgrade,
            "",
            ["apply-crds"],
            |_| check(
                "verify-crd-versions",
                "every CRD Established and NamesAccepted, converting kinds serving v1alpha1 and v1alpha2, storage held at v1alpha1"
            ),
            never,
            ok,
            Some(verify_crd_versions),
            None,
            true
        ),
        step!(
            "smoke-test-conversion",
            Upgrade,
            "",
            ["verify-crd-versions"],
            |_| check(
                "smoke-test-conversion",
                "every object of each converting kind read through v1alpha2 (the webhook converts it) and through v1alpha1: the same objects, each converting back unchanged"
            ),
            never,
            smoke_conversion_validate,
            Some(smoke_test_conversion),
            None,
            true
        ),
        step!(
            "hand-over-helm-release",
            Upgrade,
            "",
            ["smoke-test-conversion"],
            helm_describe,
            helm_done,
            ok,
            Some(hand_over_release)
        ),
        step!(
            "upgrade-operator",
            Upgrade,
            "",
            ["hand-over-helm-release"],
            swap_describe,
            operator_swapped,
            swap_validate,
            Some(swap_operator)
        ),
        step!(
            "await-operator",
            Upgrade,
            "",
            ["upgrade-operator"],
            |_| check(
                "await-operator",
                "this release's operator takes the Lease and leads"
            ),
            await_operator_done,
            ok,
            Some(wait_only)
        ),
        step!(
            "smoke-test-operator",
            Upgrade,
            "",
            ["await-operator"],
            |_| check(
                "smoke-test-operator",
                "a write at v1alpha2 on every StorageCluster, read back at v1alpha1"
            ),
            never,
            ok,
            Some(smoke_test_operator),
            None,
            true
        ),
    ]
}

// ---- what each step would do, whether it is done, whether it may run ----

fn never(_: &World) -> bool {
    false
}

fn check(rule: &'static str, detail: &str) -> Vec<Action> {
    vec![action(rule, "check", "-".into(), detail.into())]
}

fn hold_describe(world: &World) -> Vec<Action> {
    vec![action(
        "hold-controllers",
        if world.lease.is_some() {
            "update"
        } else {
            "create"
        },
        format!("Lease/{}", simplyblock_api::LEADER_LEASE),
        format!(
            "held by {} (renewed by every run, {} s a term) until the operator swap: the new operator serves its webhooks but runs no controller while the Go operator runs",
            HOLDER, HOLD_SECONDS
        ),
    )]
}

fn hold_done(world: &World) -> bool {
    world
        .lease
        .as_ref()
        .is_some_and(|l| l.current && !l.holder.is_empty())
}

fn hold_validate(world: &World, _: &Options) -> Result<(), Vec<Refusal>> {
    match &world.lease {
        Some(l) if l.current && l.holder != HOLDER && !operator_swapped(world) => {
            Err(vec![Refusal {
                check: "operator-already-leads",
                object: format!("Lease/{}", simplyblock_api::LEADER_LEASE),
                what: format!("held by {:?} while the Go operator still runs", l.holder),
                why: "two operators would reconcile the same objects".into(),
                fix: format!(
                    "scale Deployment/{OPERATOR_DEPLOYMENT} to 0, wait for the Lease to expire, and run again"
                ),
            }])
        }
        _ => Ok(()),
    }
}

/// This release's operator Deployment, installed by its Helm release.
fn own_operator(world: &World) -> Option<&Value> {
    world.deployments.iter().find(|d| {
        name(d) == OPERATOR_DEPLOYMENT
            && text(
                d,
                &format!("/metadata/annotations/{}", pointer_key(RELEASE_ANNOTATION)),
            ) == world.target.release
    })
}

fn pointer_key(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn deploy_describe(world: &World) -> Vec<Action> {
    vec![action(
        "deploy-operator",
        "helm",
        format!("release {}", world.target.release),
        format!(
            "helm upgrade --install {} <chart> --take-ownership --skip-crds --set crds.upgrade=false --set preflight.enabled=false --set deployment.profile=empty: the operator's Deployment, Services, accounts and webhooks; it serves {} for {} converting CRD(s)",
            world.target.release,
            simplyblock_api::CONVERSION_PATH,
            converting_crds(world).count()
        ),
    )]
}

fn deploy_done(world: &World) -> bool {
    own_operator(world).is_some()
}

fn await_webhook_describe(world: &World) -> Vec<Action> {
    converting_crds(world)
        .filter(|c| c.conversion != "Webhook" || !c.conversion_ca_bundle)
        .map(|c| {
            action(
                "await-conversion-webhook",
                "await",
                crd_name(c),
                format!(
                    "spec.conversion: strategy {} → Webhook with the operator's CA bundle, written by the operator when it starts",
                    c.conversion
                ),
            )
        })
        .collect()
}

fn await_webhook_done(world: &World) -> bool {
    converting_crds(world).next().is_some()
        && converting_crds(world).all(|c| c.conversion == "Webhook" && c.conversion_ca_bundle)
}

fn apply_crds_describe(world: &World) -> Vec<Action> {
    simplyblock_api::crds()
        .iter()
        .filter_map(|crd| {
            let kind_ = &crd.spec.names.kind;
            let object = format!(
                "CustomResourceDefinition/{}",
                crd.metadata.name.as_deref().unwrap_or("")
            );
            match world.crd(kind_) {
                Some(have) if have.serves(V1ALPHA2) => None,
                Some(have) => Some(action(
                    "apply-crds",
                    "update",
                    object,
                    format!(
                        "serve v1alpha2 beside {}, storage held at {}",
                        have.versions
                            .iter()
                            .map(|v| v.0.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                        have.storage().unwrap_or(V1ALPHA1)
                    ),
                )),
                None => Some(action(
                    "apply-crds",
                    "create",
                    object,
                    format!("new kind {kind_}, v1alpha2 only"),
                )),
            }
        })
        .collect()
}

fn apply_crds_done(world: &World) -> bool {
    simplyblock_api::crds().iter().all(|crd| {
        world
            .crd(&crd.spec.names.kind)
            .is_some_and(|c| c.serves(V1ALPHA2))
    })
}

/// Whether an object whose release annotation says `release` is the old release's: the
/// one named `--from-release`, or any but this one's when none is named.
fn of_release(world: &World, release: Option<&str>) -> bool {
    let from = &world.target.from_release;
    match release {
        Some(r) if r == world.target.release => false,
        Some(r) => from.is_empty() || r == from,
        None => false,
    }
}

fn kept(annotations: Option<&str>) -> bool {
    annotations == Some("keep")
}

/// The group's CRDs of the old release not yet kept.
pub fn crds_to_keep(world: &World) -> impl Iterator<Item = &Crd> {
    world.crds.iter().filter(|c| {
        of_release(
            world,
            c.annotations.get(RELEASE_ANNOTATION).map(String::as_str),
        ) && !kept(c.annotations.get(KEEP_ANNOTATION).map(String::as_str))
    })
}

/// The namespace's objects of the old release not yet kept, its operator excepted.
pub fn objects_to_keep(world: &World) -> impl Iterator<Item = &Value> {
    let release = format!("/metadata/annotations/{}", pointer_key(RELEASE_ANNOTATION));
    let keep = format!("/metadata/annotations/{}", pointer_key(KEEP_ANNOTATION));
    world.release_objects().filter(move |o| {
        let r = text(o, &release);
        of_release(world, (!r.is_empty()).then_some(r))
            && !kept(Some(text(o, &keep)))
            && !(kind(o) == "Deployment" && name(o) == world.target.old_operator)
    })
}

fn helm_describe(world: &World) -> Vec<Action> {
    let detail =
        || "helm.sh/resource-policy: keep, so uninstalling the old release leaves it".to_owned();
    crds_to_keep(world)
        .map(|c| action("hand-over-helm-release", "annotate", crd_name(c), detail()))
        .chain(
            objects_to_keep(world)
                .map(|o| action("hand-over-helm-release", "annotate", display(o), detail())),
        )
        .collect()
}

fn helm_done(world: &World) -> bool {
    crds_to_keep(world).next().is_none() && objects_to_keep(world).next().is_none()
}

/// The Go operator's Deployments still running.
pub fn old_operators(world: &World) -> impl Iterator<Item = &Value> {
    world
        .deployments
        .iter()
        .filter(|d| name(d) == world.target.old_operator)
}

fn operator_swapped(world: &World) -> bool {
    own_operator(world).is_some()
        && old_operators(world)
            .all(|d| d.pointer("/spec/replicas").and_then(Value::as_i64) == Some(0))
        && world
            .lease
            .as_ref()
            .is_none_or(|l| l.holder != HOLDER || !l.current)
}

fn swap_describe(world: &World) -> Vec<Action> {
    old_operators(world)
        .filter(|d| d.pointer("/spec/replicas").and_then(Value::as_i64) != Some(0))
        .map(|d| {
            action(
                "upgrade-operator",
                "scale",
                display(d),
                "replicas → 0: the Go operator stops".into(),
            )
        })
        .chain(std::iter::once(action(
            "upgrade-operator",
            "delete",
            format!("Lease/{}", simplyblock_api::LEADER_LEASE),
            "the hold released".into(),
        )))
        .chain(std::iter::once(action(
            "upgrade-operator",
            "restart",
            format!("Deployment/{OPERATOR_DEPLOYMENT}"),
            "its replicas restarted: one leads at once and runs the controllers".into(),
        )))
        .collect()
}

fn swap_validate(world: &World, _: &Options) -> Result<(), Vec<Refusal>> {
    let mut out = checks::in_flight_operations(world)
        .err()
        .unwrap_or_default();
    if old_operators(world).next().is_none() {
        out.push(Refusal {
            check: "old-operator-missing",
            object: format!("Deployment/{}", world.target.old_operator),
            what: "not found in the namespace".into(),
            why: "the Go operator must be stopped before this one leads".into(),
            fix: "name the Go operator's Deployment with --old-operator-deployment".into(),
        });
    }
    if out.is_empty() { Ok(()) } else { Err(out) }
}

fn await_operator_done(world: &World) -> bool {
    world
        .lease
        .as_ref()
        .is_some_and(|l| l.current && !l.holder.is_empty() && l.holder != HOLDER)
}

fn smoke_conversion_validate(world: &World, _: &Options) -> Result<(), Vec<Refusal>> {
    checks::round_trips(world)
}

// ---- the changes the steps make ----

/// The tool's hold on the operator's Lease: taken (or renewed) so the new operator, once
/// deployed, serves its webhooks but runs no controller until the swap.
pub fn hold_controllers<'a>(
    ctx: &'a Context,
    _: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move { hold(ctx).await }.boxed()
}

/// Takes or renews the hold; refuses a Lease another holder keeps current.
pub async fn hold(ctx: &Context) -> Result<(), StepError> {
    let api: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let now = MicroTime(jiff::Timestamp::now());
    let lease_name = simplyblock_api::LEADER_LEASE;
    let existing = api
        .get_opt(lease_name)
        .await
        .map_err(kube_failed(format!("reading Lease {lease_name}")))?;
    let mut spec = LeaseSpec {
        holder_identity: Some(HOLDER.into()),
        lease_duration_seconds: Some(HOLD_SECONDS),
        acquire_time: Some(now.clone()),
        renew_time: Some(now),
        ..LeaseSpec::default()
    };
    match existing {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(lease_name.into()),
                    namespace: Some(ctx.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec),
            };
            api.create(&PostParams::default(), &lease)
                .await
                .map_err(kube_failed(format!("creating Lease {lease_name}")))?;
        }
        Some(mut lease) => {
            let held = world::lease_held(&lease, jiff::Timestamp::now());
            if held.current && held.holder != HOLDER {
                return Err(failed(anyhow::anyhow!(
                    "Lease {lease_name} is held by {:?}: an operator of this release already runs its controllers; stop it (scale its Deployment to 0) and run again",
                    held.holder
                )));
            }
            if held.holder == HOLDER {
                spec.acquire_time = lease.spec.as_ref().and_then(|s| s.acquire_time.clone());
            }
            lease.spec = Some(spec);
            // Replace, guarded by the resourceVersion just read.
            api.replace(lease_name, &PostParams::default(), &lease)
                .await
                .map_err(kube_failed(format!("holding Lease {lease_name}")))?;
        }
    }
    Ok(())
}

/// Installs this release's chart beside the Go operator: `helm upgrade --install`, the
/// operator's profile `empty` (the installation's control plane and driver are adopted,
/// not installed again), without its CRDs.
pub fn deploy_operator<'a>(ctx: &'a Context, _: &'a World) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let Some(chart) = &ctx.helm.chart else {
            return Err(failed(anyhow::anyhow!(
                "no chart given: pass --chart with this release's simplyblock-operator chart (a directory, an archive or a repository reference)"
            )));
        };
        let mut args: Vec<String> = vec![
            "upgrade".into(),
            "--install".into(),
            ctx.helm.release.clone(),
            chart.clone(),
            "--namespace".into(),
            ctx.namespace.clone(),
            "--take-ownership".into(),
            // The CRDs are the apply-crds step's: storage held at v1alpha1 until migrate
            // (the chart's crds/ store v1alpha2), so neither Helm's crds/ nor the chart's
            // pre-upgrade hook applies them.
            "--skip-crds".into(),
            "--set".into(),
            "crds.upgrade=false".into(),
            // This tool's preflight checked the installation; the chart's hook Job would
            // hold the install on node prerequisites the running storage already meets.
            "--set".into(),
            "preflight.enabled=false".into(),
            "--set".into(),
            "deployment.profile=empty".into(),
        ];
        if let Some(kubeconfig) = &ctx.helm.kubeconfig {
            args.push("--kubeconfig".into());
            args.push(kubeconfig.clone());
        }
        for values in &ctx.helm.values {
            args.push("--values".into());
            args.push(values.clone());
        }
        println!("    running: {} {}", ctx.helm.binary, args.join(" "));
        let out = tokio::process::Command::new(&ctx.helm.binary)
            .args(&args)
            .output()
            .await
            .map_err(|e| failed(anyhow::anyhow!("running {}: {e}", ctx.helm.binary)))?;
        if !out.status.success() {
            return Err(failed(anyhow::anyhow!(
                "helm refused the install: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }
    .boxed()
}

/// Nothing to change: the step waits for its `done`.
pub fn wait_only<'a>(_: &'a Context, _: &'a World) -> BoxFuture<'a, Result<(), StepError>> {
    async { Ok(()) }.boxed()
}

/// Whether `crd`'s `status.storedVersions` lists v1alpha1: objects may be stored there.
fn stores_v1alpha1(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.stored_versions.as_ref())
        .is_some_and(|v| v.iter().any(|v| v == V1ALPHA1))
}

/// This release's CRDs applied, each converting kind's storage held at v1alpha1 and its
/// conversion (the operator's webhook, written when it started) kept as it is.
pub fn apply_crds<'a>(ctx: &'a Context, _: &'a World) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let api: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
        for mut crd in simplyblock_api::crds() {
            let crd_name = crd.metadata.name.clone().unwrap_or_default();
            let live = api
                .get_opt(&crd_name)
                .await
                .map_err(kube_failed(format!("reading CRD {crd_name}")))?;
            let stored_v1alpha1 = live.as_ref().is_some_and(stores_v1alpha1);
            let converting = crd.spec.versions.iter().any(|v| v.name == V1ALPHA1);
            if converting && stored_v1alpha1 {
                for version in &mut crd.spec.versions {
                    version.storage = version.name == V1ALPHA1;
                }
                crd.spec.conversion = live.and_then(|l| l.spec.conversion);
            }
            crd.metadata.managed_fields = None;
            api.patch(
                &crd_name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&crd),
            )
            .await
            .map_err(kube_failed(format!("applying CRD {crd_name}")))?;
        }
        Ok(())
    }
    .boxed()
}

/// Every CRD of this release Established with its names accepted, each converting kind
/// serving both versions with storage still at v1alpha1 where objects are stored there.
pub fn verify_crd_versions<'a>(
    ctx: &'a Context,
    _: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let api: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
        let deadline = tokio::time::Instant::now() + ctx.wait;
        loop {
            let mut problems = Vec::new();
            for crd in simplyblock_api::crds() {
                let crd_name = crd.metadata.name.clone().unwrap_or_default();
                let Some(live) = api
                    .get_opt(&crd_name)
                    .await
                    .map_err(kube_failed(format!("reading CRD {crd_name}")))?
                else {
                    problems.push(format!("{crd_name}: not installed"));
                    continue;
                };
                let conditions = live
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.clone())
                    .unwrap_or_default();
                for wanted in ["Established", "NamesAccepted"] {
                    if !conditions
                        .iter()
                        .any(|c| c.type_ == wanted && c.status == "True")
                    {
                        problems.push(format!("{crd_name}: not {wanted}"));
                    }
                }
                let served = |v: &str| live.spec.versions.iter().any(|x| x.name == v && x.served);
                if !served(V1ALPHA2) {
                    problems.push(format!("{crd_name}: v1alpha2 not served"));
                }
                if crd.spec.versions.iter().any(|v| v.name == V1ALPHA1) {
                    if !served(V1ALPHA1) {
                        problems.push(format!("{crd_name}: v1alpha1 not served"));
                    }
                    let storage = live.spec.versions.iter().find(|v| v.storage);
                    if stores_v1alpha1(&live) && storage.is_none_or(|v| v.name != V1ALPHA1) {
                        problems.push(format!(
                            "{crd_name}: storage is not held at v1alpha1 while objects are stored there"
                        ));
                    }
                }
            }
            if problems.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(failed(anyhow::anyhow!(
                    "the CRDs did not settle within {:?}: {}",
                    ctx.wait,
                    problems.join("; ")
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    .boxed()
}

/// Every object of `crd` at `version`, by name.
async fn read_all(
    ctx: &Context,
    crd: &world::Crd,
    version: &str,
) -> Result<BTreeMap<String, Value>, StepError> {
    Ok(world::list_group(&ctx.client, &ctx.namespace, crd, version)
        .await
        .map_err(failed)?
        .into_iter()
        .map(|o| (name(&o).to_owned(), o))
        .collect())
}

/// Every object of every converting kind read through v1alpha2 (converted by the webhook)
/// and through v1alpha1: the same objects, and what v1alpha2 says converts back to what
/// v1alpha1 says.
pub fn smoke_test_conversion<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let kinds = checks::converting_kinds();
        let mut problems = Vec::new();
        for crd in world.crds.iter().filter(|c| kinds.contains(&c.kind.as_str())) {
            let old = read_all(ctx, crd, V1ALPHA1).await?;
            let hub = read_all(ctx, crd, V1ALPHA2).await?;
            if old.keys().ne(hub.keys()) {
                problems.push(format!(
                    "{}: v1alpha1 lists {:?}, v1alpha2 lists {:?}",
                    crd.kind,
                    old.keys().collect::<Vec<_>>(),
                    hub.keys().collect::<Vec<_>>()
                ));
                continue;
            }
            for (object_name, read_at_hub) in &hub {
                let back = simplyblock_conversion::convert(read_at_hub, &format!("{GROUP}/{V1ALPHA1}"));
                for part in ["spec", "status"] {
                    let said = |o: &Value| {
                        simplyblock_conversion::path::said(o.get(part).unwrap_or(&Value::Null))
                    };
                    if said(&back) != said(&old[object_name]) {
                        problems.push(format!(
                            "{}/{object_name}: its {part} read through v1alpha2 does not convert back to what v1alpha1 reads",
                            crd.kind
                        ));
                    }
                }
            }
            println!(
                "    {}: {} object(s) read at both versions",
                crd.kind,
                hub.len()
            );
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(failed(anyhow::anyhow!(
                "the conversion smoke test failed:\n  {}",
                problems.join("\n  ")
            )))
        }
    }
    .boxed()
}

/// Marks what the old release owns `helm.sh/resource-policy: keep`, so uninstalling it
/// leaves them for this operator (its own operator Deployment excepted: that one goes).
pub fn hand_over_release<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let patch = json!({"metadata": {"annotations": {KEEP_ANNOTATION: "keep"}}});
        let crds: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
        for crd in crds_to_keep(world) {
            let crd_name = format!("{}.{GROUP}", crd.plural);
            crds.patch(&crd_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube_failed(format!("annotating CRD {crd_name}")))?;
        }
        for object in objects_to_keep(world) {
            merge(ctx, world, object, patch.clone()).await?;
        }
        Ok(())
    }
    .boxed()
}

/// The swap: the Go operator scaled to nothing, the hold on the Lease released, and this
/// release's operator restarted, so it leads now: a replica waiting on the Lease sleeps
/// until the term it last read ends, which for the tool's hold is an hour away.
pub fn swap_operator<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
        for old in old_operators(world) {
            deployments
                .patch(
                    name(old),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": 0}})),
                )
                .await
                .map_err(kube_failed(format!("scaling {} to 0", display(old))))?;
        }
        release(ctx).await?;
        let restart = json!({"spec": {"template": {"metadata": {"annotations": {
            RESTARTED_ANNOTATION: jiff::Timestamp::now().to_string()
        }}}}});
        deployments
            .patch(
                OPERATOR_DEPLOYMENT,
                &PatchParams::default(),
                &Patch::Merge(restart),
            )
            .await
            .map_err(kube_failed(format!(
                "restarting Deployment/{OPERATOR_DEPLOYMENT}"
            )))?;
        Ok(())
    }
    .boxed()
}

/// Gives the Lease up if the tool holds it, guarded by the version read.
async fn release(ctx: &Context) -> Result<(), StepError> {
    let api: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let lease_name = simplyblock_api::LEADER_LEASE;
    let Some(lease) = api
        .get_opt(lease_name)
        .await
        .map_err(kube_failed(format!("reading Lease {lease_name}")))?
    else {
        return Ok(());
    };
    if world::lease_held(&lease, jiff::Timestamp::now()).holder != HOLDER {
        return Ok(());
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: lease.metadata.resource_version.clone(),
            uid: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(lease_name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(kube_failed(format!("releasing Lease {lease_name}"))(e)),
    }
}

/// A write at v1alpha2 on every StorageCluster (an annotation, through the admission
/// webhooks and the conversion), read back at v1alpha1.
pub fn smoke_test_operator<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let Some(crd) = world.crd("StorageCluster") else {
            return Ok(());
        };
        let stamp = jiff::Timestamp::now().to_string();
        for cluster in world.of_kind("StorageCluster") {
            let at = |version: &str| crd.api(&ctx.client, &ctx.namespace, version);
            at(V1ALPHA2)
                .patch(
                    name(cluster),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {SMOKE_ANNOTATION: stamp}}})),
                )
                .await
                .map_err(kube_failed(format!(
                    "writing {} at v1alpha2",
                    display(cluster)
                )))?;
            let back = at(V1ALPHA1)
                .get(name(cluster))
                .await
                .map_err(kube_failed(format!(
                    "reading {} at v1alpha1",
                    display(cluster)
                )))?;
            let seen = back
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SMOKE_ANNOTATION))
                .cloned();
            if seen.as_deref() != Some(stamp.as_str()) {
                return Err(failed(anyhow::anyhow!(
                    "{}: the write at v1alpha2 does not read back at v1alpha1 (saw {seen:?})",
                    display(cluster)
                )));
            }
            println!(
                "    {} written at v1alpha2, read back at v1alpha1",
                display(cluster)
            );
        }
        Ok(())
    }
    .boxed()
}

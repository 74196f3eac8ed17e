//! The steps of the upgrade and migrate stages: what each would do, whether it is done,
//! whether it may run, and (in [`crate::effects`]) the change it makes. A step without an
//! `apply` is planned only: a run stops there.

use serde_json::Value;

use crate::step::{Action, Options, Refusal, Stage, Step};
use crate::world::{
    Crd, GROUP, OPERATOR_DEPLOYMENT, V1ALPHA1, V1ALPHA2, World, display, kind, name, text,
};
use crate::{checks, effects};

/// Helm's annotation naming a release's object.
pub const RELEASE_ANNOTATION: &str = "meta.helm.sh/release-name";
/// Helm's annotation keeping an object when its release goes.
pub const KEEP_ANNOTATION: &str = "helm.sh/resource-policy";

/// The annotation the sizing of a StorageNode's cluster is stamped into.
pub const SIZING_ANNOTATION: &str = "storage.simplyblock.io/conversion-spec.config.sizing";
/// The annotation a legacy volume handle's UUID form is written into.
pub const HANDLE_ANNOTATION: &str = "storage.simplyblock.io/volume-handle";

fn ok(_: &World, _: &Options) -> Result<(), Vec<Refusal>> {
    Ok(())
}

fn never(_: &World) -> bool {
    false
}

fn crd_name(crd: &Crd) -> String {
    format!("CustomResourceDefinition/{}.{GROUP}", crd.plural)
}

/// The group's CRDs of the kinds this release converts.
fn converting_crds(world: &World) -> impl Iterator<Item = &Crd> {
    let kinds = checks::converting_kinds();
    world
        .crds
        .iter()
        .filter(move |c| kinds.contains(&c.kind.as_str()))
}

fn action(rule: &'static str, verb: &'static str, object: String, detail: String) -> Action {
    Action {
        rule,
        verb,
        object,
        detail,
    }
}

fn check(rule: &'static str, detail: &str) -> Vec<Action> {
    vec![action(rule, "check", "-".into(), detail.into())]
}

// ---- upgrade ----

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
            effects::HOLDER,
            effects::HOLD_SECONDS
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
        Some(l) if l.current && l.holder != effects::HOLDER && !operator_swapped(world) => {
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
            .is_none_or(|l| l.holder != effects::HOLDER || !l.current)
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
        .is_some_and(|l| l.current && !l.holder.is_empty() && l.holder != effects::HOLDER)
}

fn smoke_conversion_validate(world: &World, _: &Options) -> Result<(), Vec<Refusal>> {
    checks::round_trips(world)
}

// ---- migrate ----

/// The StorageNodeSet a controller ownerReference of `object` names.
pub fn owning_set(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| text(r, "/kind") == "StorageNodeSet")
        .map(|r| text(r, "/name"))
}

/// The StorageCluster a StorageNode belongs to: its controller owner, else its set's cluster.
pub fn node_cluster<'a>(world: &'a World, node: &'a Value) -> Option<&'a str> {
    let owner = node
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|r| text(r, "/kind") == "StorageCluster")
        .map(|r| text(r, "/name"));
    owner.or_else(|| {
        let set = world.find("StorageNodeSet", text(node, "/spec/storageNodeSetRef"))?;
        Some(text(set, "/spec/clusterName")).filter(|c| !c.is_empty())
    })
}

fn reparent_nodes_describe(world: &World) -> Vec<Action> {
    world
        .of_kind("StorageNode")
        .filter_map(|n| {
            let set = owning_set(n)?;
            let cluster = set_cluster(world, set);
            Some(action(
                "reparent",
                "update",
                display(n),
                format!("ownerReferences: StorageNodeSet/{set} → StorageCluster/{cluster} (controller), with its sizing stamped when missing, one atomic update"),
            ))
        })
        .collect()
}

fn reparent_nodes_done(world: &World) -> bool {
    world
        .of_kind("StorageNode")
        .all(|n| owning_set(n).is_none())
}

fn reparent_nodes_validate(world: &World, options: &Options) -> Result<(), Vec<Refusal>> {
    let mut out: Vec<Refusal> = [
        checks::in_flight_operations(world),
        checks::node_set_drains(world),
        checks::offline_nodes(world, options),
    ]
    .into_iter()
    .filter_map(Result::err)
    .flatten()
    .collect();
    for set in world.of_kind("StorageNodeSet") {
        let cluster = text(set, "/spec/clusterName");
        if world.find("StorageCluster", cluster).is_none() {
            out.push(Refusal {
                check: "owner-cluster-missing",
                object: display(set),
                what: format!("names StorageCluster {cluster:?}, which does not exist"),
                why: "its nodes are reparented to the cluster the set names".into(),
                fix: format!("restore StorageCluster {cluster} or delete the set's nodes"),
            });
        }
    }
    if out.is_empty() { Ok(()) } else { Err(out) }
}

/// The cluster StorageNodeSet `set` names, `?` when the set is gone.
fn set_cluster<'a>(world: &'a World, set: &str) -> &'a str {
    world
        .find("StorageNodeSet", set)
        .map(|s| text(s, "/spec/clusterName"))
        .unwrap_or("?")
}

fn workload_describe(world: &World) -> Vec<Action> {
    world
        .release_objects()
        .filter_map(|o| {
            let set = owning_set(o)?;
            let cluster = set_cluster(world, set);
            Some(action(
                "reparent",
                "update",
                display(o),
                format!(
                    "ownerReferences: StorageNodeSet/{set} → StorageCluster/{cluster} (controller)"
                ),
            ))
        })
        .collect()
}

fn workload_done(world: &World) -> bool {
    world.release_objects().all(|o| owning_set(o).is_none())
}

/// The clusters node sets name, with the sets.
pub fn sets_by_cluster(world: &World) -> std::collections::BTreeMap<&str, Vec<&str>> {
    let mut out = std::collections::BTreeMap::<&str, Vec<&str>>::new();
    for set in world.of_kind("StorageNodeSet") {
        out.entry(text(set, "/spec/clusterName"))
            .or_default()
            .push(name(set));
    }
    out
}

fn cdc_describe(world: &World) -> Vec<Action> {
    sets_by_cluster(world)
        .into_iter()
        .filter(|(cluster, _)| !world.hub_has("ClusterDeploymentConfig", cluster))
        .map(|(cluster, sets)| {
            action(
                "transform",
                "create",
                format!("ClusterDeploymentConfig/{cluster}"),
                format!("nodeSets[] from StorageNodeSet {}", sets.join(", ")),
            )
        })
        .collect()
}

fn cdc_done(world: &World) -> bool {
    sets_by_cluster(world)
        .keys()
        .all(|c| world.hub_has("ClusterDeploymentConfig", c))
}

fn retire_describe(world: &World) -> Vec<Action> {
    world
        .of_kind("StorageNodeSet")
        .filter(|s| !retired(s))
        .map(|s| {
            action(
                "retire",
                "delete",
                display(s),
                "once nothing names it as owner; its nodes and workload survive".into(),
            )
        })
        .collect()
}

/// The finalizers of Kubernetes' garbage collector: the orphaning of a set's remaining
/// dependents is its to finish.
pub const COLLECTOR_FINALIZERS: &[&str] = &["orphan", "foregroundDeletion"];

/// Whether `set` is deleted, or being deleted with only the garbage collector's work left.
pub fn retired(set: &Value) -> bool {
    set.pointer("/metadata/deletionTimestamp").is_some()
        && set
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .all(|f| {
                f.as_str()
                    .is_some_and(|f| COLLECTOR_FINALIZERS.contains(&f))
            })
}

fn retire_done(world: &World) -> bool {
    world.of_kind("StorageNodeSet").all(retired)
}

fn retire_validate(world: &World, _: &Options) -> Result<(), Vec<Refusal>> {
    checks::node_set_drains(world)
}

/// The sizing JSON a node would be stamped with.
pub fn sizing(world: &World, node: &Value) -> Option<Value> {
    let cluster = world.find("StorageCluster", node_cluster(world, node)?)?;
    let vcpu = cluster.pointer("/spec/vcpuCount")?.as_i64()?;
    let mut sizing = serde_json::json!({ "vcpuCount": vcpu });
    let huge = text(cluster, "/spec/maxHugePagesSize");
    if !huge.is_empty() {
        sizing["minHugePagesSize"] = Value::String(huge.into());
    }
    Some(sizing)
}

pub fn stamped(node: &Value) -> bool {
    // Read as the hub reads it: the stamp may since sit in a stash of the whole config,
    // written back by a v1alpha2 writer.
    simplyblock_conversion::convert(node, simplyblock_conversion::HUB)
        .pointer("/spec/config/sizing/vcpuCount")
        .is_some_and(Value::is_number)
}

fn sizing_describe(world: &World) -> Vec<Action> {
    world
        .of_kind("StorageNode")
        .filter(|n| !stamped(n))
        .map(|n| {
            action(
                "transform",
                "annotate",
                display(n),
                format!(
                    "{SIZING_ANNOTATION} = {}{}",
                    sizing(world, n).map_or("(cluster unknown)".into(), |s| s.to_string()),
                    if owning_set(n).is_some() {
                        " (written by reparent-storage-nodes, in the same update as its owner)"
                    } else {
                        ""
                    }
                ),
            )
        })
        .collect()
}

fn sizing_done(world: &World) -> bool {
    world.of_kind("StorageNode").all(stamped)
}

fn sizing_validate(world: &World, _: &Options) -> Result<(), Vec<Refusal>> {
    let out: Vec<Refusal> = world
        .of_kind("StorageNode")
        .filter(|n| !stamped(n) && sizing(world, n).is_none())
        .map(|n| Refusal {
            check: "node-sizing-unknown",
            object: display(n),
            what: format!(
                "its cluster {:?} is not found or has no spec.vcpuCount",
                node_cluster(world, n).unwrap_or("")
            ),
            why: "v1alpha2 sizes a node from its cluster; without it the node would be resized"
                .into(),
            fix: "set spec.vcpuCount on the node's StorageCluster (or restore the cluster)".into(),
        })
        .collect();
    if out.is_empty() { Ok(()) } else { Err(out) }
}

/// Old keys on `object` without their new spelling beside them.
fn unmoved(object: &Value) -> Vec<(String, String)> {
    unmoved_keys(object)
        .into_iter()
        .map(|(_, old, new)| (old, new))
        .collect()
}

/// Old keys on `object` without their new spelling beside them, with the map they are in
/// (`annotations` or `labels`).
pub fn unmoved_keys(object: &Value) -> Vec<(&'static str, String, String)> {
    let mut out = Vec::new();
    for map in ["annotations", "labels"] {
        let Some(entries) = object
            .pointer(&format!("/metadata/{map}"))
            .and_then(Value::as_object)
        else {
            continue;
        };
        for old in entries.keys() {
            if let Some(new) = checks::moved(old)
                && !entries.contains_key(&new)
            {
                out.push((map, old.clone(), new));
            }
        }
    }
    out
}

fn keys_describe(world: &World) -> Vec<Action> {
    world
        .everything()
        .flat_map(|o| {
            unmoved(o).into_iter().map(move |(old, new)| {
                action(
                    "rewrite-keys",
                    "annotate",
                    display(o),
                    format!("add {new} beside {old}, value verbatim; the old key stays"),
                )
            })
        })
        .collect()
}

fn keys_done(world: &World) -> bool {
    world.everything().all(|o| unmoved(o).is_empty())
}

fn keys_validate(world: &World, _: &Options) -> Result<(), Vec<Refusal>> {
    checks::annotation_conflicts(world)
}

/// A step that makes one v1alpha2 object of `to` per object of the retired `from`.
fn absorbed(world: &World, from: &str, to: &str) -> bool {
    world.of_kind(from).all(|o| world.hub_has(to, name(o)))
}

fn absorb_describe(world: &World, from: &str, to: &str, detail: &str) -> Vec<Action> {
    world
        .of_kind(from)
        .filter(|o| !world.hub_has(to, name(o)))
        .map(|o| {
            action(
                "absorb",
                "create",
                format!("{to}/{}", name(o)),
                format!("{detail} from {}", display(o)),
            )
        })
        .collect()
}

fn policies_describe(world: &World) -> Vec<Action> {
    absorb_describe(world, "BackupPolicy", "StorageBackupPolicy", "a copy")
}
fn policies_done(world: &World) -> bool {
    absorbed(world, "BackupPolicy", "StorageBackupPolicy")
}
fn migrations_describe(world: &World) -> Vec<Action> {
    absorb_describe(
        world,
        "VolumeMigration",
        "PersistentVolumeOps",
        "action Migrate",
    )
}
fn migrations_done(world: &World) -> bool {
    absorbed(world, "VolumeMigration", "PersistentVolumeOps")
}
fn restores_describe(world: &World) -> Vec<Action> {
    absorb_describe(world, "BackupRestore", "StorageBackupOps", "action Restore")
}
fn restores_done(world: &World) -> bool {
    absorbed(world, "BackupRestore", "StorageBackupOps")
}

fn of_retired_kind(world: &World, kind_: &str) -> Result<(), Vec<Refusal>> {
    match checks::in_flight_operations(world) {
        Err(all) => {
            let mine: Vec<Refusal> = all
                .into_iter()
                .filter(|r| r.object.starts_with(&format!("{kind_}/")))
                .collect();
            if mine.is_empty() { Ok(()) } else { Err(mine) }
        }
        Ok(()) => Ok(()),
    }
}
fn migrations_validate(world: &World, _: &Options) -> Result<(), Vec<Refusal>> {
    of_retired_kind(world, "VolumeMigration")
}
fn restores_validate(world: &World, _: &Options) -> Result<(), Vec<Refusal>> {
    of_retired_kind(world, "BackupRestore")
}

/// Each legacy volume not yet annotated, with the handle it is annotated with (`None` when
/// its pool is not found).
pub fn normalized_handles(world: &World) -> Vec<(&Value, Option<String>)> {
    checks::legacy_volumes(world)
        .filter(|(pv, _, _)| {
            text(
                pv,
                &format!(
                    "/metadata/annotations/{}",
                    HANDLE_ANNOTATION.replace('/', "~1")
                ),
            )
            .is_empty()
        })
        .map(|(pv, cluster, pool)| {
            let handle = text(pv, "/spec/csi/volumeHandle");
            let volume = handle.rsplit(':').next().unwrap_or("");
            let normal = checks::pool_uuid(world, cluster, pool)
                .map(|uuid| format!("{cluster}:{uuid}:{volume}"));
            (pv, normal)
        })
        .collect()
}

fn handles_describe(world: &World) -> Vec<Action> {
    normalized_handles(world)
        .into_iter()
        .map(|(pv, handle)| {
            action(
                "normalize-handles",
                "annotate",
                display(pv),
                format!(
                    "{HANDLE_ANNOTATION} = {}",
                    handle.as_deref().unwrap_or("(pool unresolved)")
                ),
            )
        })
        .collect()
}

fn handles_done(world: &World) -> bool {
    normalized_handles(world).is_empty()
}

fn handles_validate(world: &World, _: &Options) -> Result<(), Vec<Refusal>> {
    checks::legacy_handles(world)
}

fn imports_describe(world: &World) -> Vec<Action> {
    world
        .of_kind("BackupImport")
        .map(|o| {
            action(
                "retire",
                "delete",
                display(o),
                "a retired kind; nothing replaces it".into(),
            )
        })
        .collect()
}

fn imports_done(world: &World) -> bool {
    world.of_kind("BackupImport").next().is_none()
}

fn rewrite_describe(world: &World) -> Vec<Action> {
    converting_crds(world)
        .filter(|c| !rewritten(c))
        .map(|c| {
            let count = world.objects.iter().filter(|o| kind(o) == c.kind).count();
            action(
                "rewrite-storage",
                "update",
                crd_name(c),
                format!(
                    "storage → v1alpha2; write back its {count} object(s) unchanged; status.storedVersions → [v1alpha2]"
                ),
            )
        })
        .collect()
}

pub fn rewritten(crd: &Crd) -> bool {
    crd.storage() == Some(V1ALPHA2) && crd.stored_versions == [V1ALPHA2]
}

fn rewrite_done(world: &World) -> bool {
    converting_crds(world).all(rewritten) && converting_crds(world).next().is_some()
}

fn rewrite_validate(world: &World, _: &Options) -> Result<(), Vec<Refusal>> {
    let out: Vec<Refusal> = [checks::round_trips(world), checks::name_lengths(world)]
        .into_iter()
        .filter_map(Result::err)
        .flatten()
        .collect();
    if out.is_empty() { Ok(()) } else { Err(out) }
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

/// Every step of both stages, in declaration order.
pub fn all() -> Vec<Step> {
    vec![
        step!(
            "hold-controllers",
            Upgrade,
            "",
            [],
            hold_describe,
            hold_done,
            hold_validate,
            Some(effects::hold_controllers)
        ),
        step!(
            "deploy-conversion-webhook",
            Upgrade,
            "",
            ["hold-controllers"],
            deploy_describe,
            deploy_done,
            ok,
            Some(effects::deploy_operator)
        ),
        step!(
            "await-conversion-webhook",
            Upgrade,
            "",
            ["deploy-conversion-webhook"],
            await_webhook_describe,
            await_webhook_done,
            ok,
            Some(effects::wait_only)
        ),
        step!(
            "apply-crds",
            Upgrade,
            "",
            ["await-conversion-webhook"],
            apply_crds_describe,
            apply_crds_done,
            ok,
            Some(effects::apply_crds)
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
            Some(effects::verify_crd_versions),
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
            Some(effects::smoke_test_conversion),
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
            Some(effects::hand_over_release)
        ),
        step!(
            "upgrade-operator",
            Upgrade,
            "",
            ["hand-over-helm-release"],
            swap_describe,
            operator_swapped,
            swap_validate,
            Some(effects::swap_operator)
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
            Some(effects::wait_only)
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
            Some(effects::smoke_test_operator),
            None,
            true
        ),
        step!(
            "reparent-storage-nodes",
            Migrate,
            "Ownership",
            [],
            reparent_nodes_describe,
            reparent_nodes_done,
            reparent_nodes_validate,
            Some(effects::reparent_nodes)
        ),
        step!(
            "reparent-node-set-workload",
            Migrate,
            "Ownership",
            ["reparent-storage-nodes"],
            workload_describe,
            workload_done,
            ok,
            Some(effects::reparent_workload)
        ),
        step!(
            "create-cluster-deployment-configs",
            Migrate,
            "Transforming",
            [],
            cdc_describe,
            cdc_done,
            ok,
            Some(effects::create_deployment_configs)
        ),
        step!(
            "retire-storage-node-sets",
            Migrate,
            "Ownership",
            [
                "reparent-storage-nodes",
                "reparent-node-set-workload",
                "create-cluster-deployment-configs"
            ],
            retire_describe,
            retire_done,
            retire_validate,
            Some(effects::retire_node_sets),
            Some(effects::survivors_remain),
            false
        ),
        step!(
            "stamp-storage-node-sizing",
            Migrate,
            "Transforming",
            ["reparent-storage-nodes"],
            sizing_describe,
            sizing_done,
            sizing_validate,
            Some(effects::stamp_sizing)
        ),
        step!(
            "rewrite-annotation-keys",
            Migrate,
            "Transforming",
            [],
            keys_describe,
            keys_done,
            keys_validate,
            Some(effects::rewrite_keys)
        ),
        step!(
            "copy-backup-policies",
            Migrate,
            "Transforming",
            [],
            policies_describe,
            policies_done,
            ok,
            None
        ),
        step!(
            "absorb-volume-migrations",
            Migrate,
            "Transforming",
            [],
            migrations_describe,
            migrations_done,
            migrations_validate,
            None
        ),
        step!(
            "absorb-backup-restores",
            Migrate,
            "Transforming",
            [],
            restores_describe,
            restores_done,
            restores_validate,
            None
        ),
        step!(
            "normalize-volume-handles",
            Migrate,
            "Handles",
            [],
            handles_describe,
            handles_done,
            handles_validate,
            Some(effects::normalize_handles)
        ),
        step!(
            "delete-backup-imports",
            Migrate,
            "Deleting",
            ["copy-backup-policies"],
            imports_describe,
            imports_done,
            ok,
            None
        ),
        step!(
            "rewrite-storage-version",
            Migrate,
            "Rewriting",
            [
                "retire-storage-node-sets",
                "stamp-storage-node-sizing",
                "rewrite-annotation-keys",
                "absorb-volume-migrations",
                "absorb-backup-restores",
                "normalize-volume-handles",
                "delete-backup-imports"
            ],
            rewrite_describe,
            rewrite_done,
            rewrite_validate,
            Some(effects::rewrite_storage)
        ),
    ]
}

//! The migrate stage, run after a person has checked the upgrade: the retired kinds
//! absorbed, ownership moved from StorageNodeSets to StorageClusters, keys respelled and
//! storage rewritten to v1alpha2. Each step's description, completion and validation, then
//! the change it makes.

use std::collections::BTreeMap;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    PropagationPolicy,
};
use serde_json::{Value, json};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use simplyblock_api::cluster_deployment_config::{
    ClusterDeploymentConfig, ClusterDeploymentConfigSpec, NodeGroup, NodeSet,
};
use simplyblock_api::keys::{BACKUP_POLICY_LABEL, HISTORICAL_RECORD_ANNOTATION};
use simplyblock_api::storage_backup_ops::{BackupAction, RestoreSpec, StorageBackupOpsSpec};
use simplyblock_api::storage_backup_policy::StorageBackupPolicySpec;
use simplyblock_api::{StorageBackupOps, StorageBackupPolicy};

use super::shared::{
    action, api_of, converting_crds, crd_name, failed, kube_failed, merge, ok, step,
};
use crate::checks;
use crate::step::{Action, Context, Options, Refusal, Stage, Step, StepError};
use crate::world::{Crd, GROUP, V1ALPHA1, V1ALPHA2, World, display, kind, name, text};

/// The annotation the sizing of a StorageNode's cluster is stamped into.
pub const SIZING_ANNOTATION: &str = "storage.simplyblock.io/conversion-spec.config.sizing";
/// The annotation a legacy volume handle's UUID form is written into.
pub const HANDLE_ANNOTATION: &str = "storage.simplyblock.io/volume-handle";

/// The migrate stage's steps, in declaration order.
pub fn steps() -> Vec<Step> {
    vec![
        step!(
            "reparent-storage-nodes",
            Migrate,
            "Ownership",
            [],
            reparent_nodes_describe,
            reparent_nodes_done,
            reparent_nodes_validate,
            Some(reparent_nodes)
        ),
        step!(
            "reparent-node-set-workload",
            Migrate,
            "Ownership",
            ["reparent-storage-nodes"],
            workload_describe,
            workload_done,
            ok,
            Some(reparent_workload)
        ),
        step!(
            "create-cluster-deployment-configs",
            Migrate,
            "Transforming",
            [],
            cdc_describe,
            cdc_done,
            ok,
            Some(create_deployment_configs)
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
            Some(retire_node_sets),
            Some(survivors_remain),
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
            Some(stamp_sizing)
        ),
        step!(
            "rewrite-annotation-keys",
            Migrate,
            "Transforming",
            [],
            keys_describe,
            keys_done,
            keys_validate,
            Some(rewrite_keys)
        ),
        step!(
            "copy-backup-policies",
            Migrate,
            "Transforming",
            [],
            policies_describe,
            policies_done,
            policies_validate,
            Some(copy_policies)
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
            Some(absorb_restores)
        ),
        step!(
            "normalize-volume-handles",
            Migrate,
            "Handles",
            [],
            handles_describe,
            handles_done,
            handles_validate,
            Some(normalize_handles)
        ),
        step!(
            "delete-backup-imports",
            Migrate,
            "Deleting",
            ["copy-backup-policies"],
            imports_describe,
            imports_done,
            ok,
            Some(delete_imports)
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
            Some(rewrite_storage)
        ),
    ]
}

// ---- what each step would do, whether it is done, whether it may run ----

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

/// The annotation keys a Go claim named its BackupPolicy under, the one that wins first.
pub const POLICY_ANNOTATIONS: [&str; 3] = [
    BACKUP_POLICY_LABEL,
    "simplyblock.io/backup-policy",
    "simplybk/backup-policy",
];

/// The Go BackupPolicy a claim's annotations name, if any.
pub fn claim_policy(claim: &Value) -> Option<&str> {
    let annotations = claim.pointer("/metadata/annotations")?;
    POLICY_ANNOTATIONS
        .iter()
        .find_map(|k| annotations.get(*k).and_then(Value::as_str))
        .filter(|p| !p.is_empty())
}

/// The claims Go BackupPolicy `policy` covered (annotated, in its namespace) that do not
/// carry the label its StorageBackupPolicy selects on.
pub fn unlabelled_claims<'a>(world: &'a World, policy: &'a Value) -> Vec<&'a Value> {
    let namespace = text(policy, "/metadata/namespace");
    world
        .kubernetes
        .iter()
        .filter(|o| kind(o) == "PersistentVolumeClaim")
        .filter(|c| text(c, "/metadata/namespace") == namespace)
        .filter(|c| claim_policy(c) == Some(name(policy)))
        .filter(|c| {
            c.pointer("/metadata/labels")
                .and_then(|l| l.get(BACKUP_POLICY_LABEL))
                .and_then(Value::as_str)
                != Some(name(policy))
        })
        .collect()
}

fn policies_describe(world: &World) -> Vec<Action> {
    world
        .of_kind("BackupPolicy")
        .flat_map(|p| {
            let labels = unlabelled_claims(world, p).into_iter().map(move |c| {
                action(
                    "absorb",
                    "label",
                    display(c),
                    format!("{BACKUP_POLICY_LABEL}={}", name(p)),
                )
            });
            let create = (!world.hub_has("StorageBackupPolicy", name(p))).then(|| {
                action(
                    "absorb",
                    "create",
                    format!("StorageBackupPolicy/{}", name(p)),
                    format!(
                        "cluster {}, claims labelled {BACKUP_POLICY_LABEL}={}, its schedule and limits",
                        text(p, "/spec/clusterName"),
                        name(p)
                    ),
                )
            });
            labels.chain(create).chain([action(
                "retire",
                "delete",
                display(p),
                "its finalizer dropped first: the control plane's policy stays, for the new one to adopt by name".into(),
            )])
        })
        .collect()
}

fn policies_done(world: &World) -> bool {
    world.of_kind("BackupPolicy").next().is_none()
}

/// Whether `text` is a positive number without leading zeros followed by a unit of time.
fn interval(text: &str) -> bool {
    text.strip_suffix(['m', 'h', 'd', 'w'])
        .is_some_and(positive)
}

fn positive(text: &str) -> bool {
    !text.is_empty() && !text.starts_with('0') && text.bytes().all(|b| b.is_ascii_digit())
}

/// What of Go BackupPolicy `policy` a StorageBackupPolicy cannot say, if anything: the Go
/// CRD took zero counts and intervals, and a policy with nothing to do, all of which the
/// control plane refused.
pub fn policy_problem(policy: &Value) -> Option<String> {
    let schedule = text(policy, "/spec/schedule");
    let max_age = text(policy, "/spec/maxAge");
    let max_versions = policy
        .pointer("/spec/maxVersions")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if name(policy).len() > checks::LABEL_LIMIT {
        return Some(format!(
            "its name has {} characters; the claims' label holds at most {}",
            name(policy).len(),
            checks::LABEL_LIMIT
        ));
    }
    let tiers_ok = schedule.split_whitespace().all(|tier| {
        tier.split_once(',')
            .is_some_and(|(every, keep)| interval(every) && positive(keep))
    });
    if !schedule.is_empty() && !tiers_ok {
        return Some(format!(
            "schedule {schedule:?} has a zero interval or count"
        ));
    }
    if !max_age.is_empty() && !interval(max_age) {
        return Some(format!("maxAge {max_age:?} is zero"));
    }
    if schedule.is_empty() && max_age.is_empty() && max_versions <= 0 {
        return Some("it sets none of schedule, maxVersions or maxAge".into());
    }
    None
}

fn policies_validate(world: &World, _: &Options) -> Result<(), Vec<Refusal>> {
    let out: Vec<Refusal> = world
        .of_kind("BackupPolicy")
        .filter_map(|p| {
            Some(Refusal {
                check: "backup-policy-unmovable",
                object: display(p),
                what: policy_problem(p)?,
                why: "the control plane never took such a policy, and StorageBackupPolicy refuses it".into(),
                fix: format!(
                    "delete {} (it backs nothing up) or recreate it with a valid schedule, maxVersions or maxAge",
                    display(p)
                ),
            })
        })
        .collect();
    if out.is_empty() { Ok(()) } else { Err(out) }
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
    let mut out = absorb_describe(
        world,
        "BackupRestore",
        "StorageBackupOps",
        "a historical record of action Restore, with its outcome,",
    );
    out.extend(world.of_kind("BackupRestore").map(|r| {
        action(
            "retire",
            "delete",
            display(r),
            "once its record holds its outcome".into(),
        )
    }));
    out
}
fn restores_done(world: &World) -> bool {
    world.of_kind("BackupRestore").next().is_none()
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
        .filter(|o| !retired(o))
        .map(|o| {
            action(
                "retire",
                "delete",
                display(o),
                "a retired kind (the store is the inventory); the StorageBackup it made is orphaned, not deleted".into(),
            )
        })
        .collect()
}

fn imports_done(world: &World) -> bool {
    world.of_kind("BackupImport").all(retired)
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

// ---- the changes the steps make ----

/// The controller ownerReference to StorageCluster `cluster`, in place of the node set's.
fn reparented(world: &World, object: &Value) -> Result<Option<Value>, StepError> {
    let Some(set) = owning_set(object) else {
        return Ok(None);
    };
    let cluster_name = world
        .find("StorageNodeSet", set)
        .map(|s| text(s, "/spec/clusterName"))
        .filter(|c| !c.is_empty())
        .or_else(|| node_cluster(world, object))
        .ok_or_else(|| {
            failed(anyhow::anyhow!(
                "{}: its StorageNodeSet {set} is gone and names no cluster",
                display(object)
            ))
        })?;
    let cluster = world.find("StorageCluster", cluster_name).ok_or_else(|| {
        failed(anyhow::anyhow!(
            "{}: StorageCluster {cluster_name} does not exist",
            display(object)
        ))
    })?;
    let mut refs: Vec<Value> = object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| text(r, "/kind") != "StorageNodeSet" && text(r, "/kind") != "StorageCluster")
        .collect();
    refs.push(json!({
        "apiVersion": format!("{GROUP}/{V1ALPHA2}"),
        "kind": "StorageCluster",
        "name": cluster_name,
        "uid": text(cluster, "/metadata/uid"),
        "controller": true,
        "blockOwnerDeletion": true,
    }));
    Ok(Some(json!({"metadata": {"ownerReferences": refs}})))
}

/// The annotations that stamp a node's `sizing`.
fn stamp(sizing: &Value) -> Value {
    json!({SIZING_ANNOTATION: sizing.to_string()})
}

/// Each StorageNode of a set moves to the set's cluster in one update, which stamps its
/// sizing too when it has none: v1alpha2 requires both, and a node with one but not the
/// other could not be written through v1alpha2 in between.
pub fn reparent_nodes<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        for node in world.of_kind("StorageNode") {
            let Some(mut patch) = reparented(world, node)? else {
                continue;
            };
            if !stamped(node)
                && let Some(sizing) = sizing(world, node)
            {
                patch["metadata"]["annotations"] = stamp(&sizing);
            }
            merge(ctx, world, node, patch).await?;
        }
        Ok(())
    }
    .boxed()
}

/// Each object of a set's workload moves to the set's StorageCluster, one guarded update
/// each.
pub fn reparent_workload<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        for object in world.release_objects() {
            if let Some(patch) = reparented(world, object)? {
                merge(ctx, world, object, patch).await?;
            }
        }
        Ok(())
    }
    .boxed()
}

/// One unapproved ClusterDeploymentConfig per cluster the node sets name, its node sets
/// the retired sets with the workers their storage nodes run on: the cluster's layout
/// kept as a document; nothing runs from it until a person approves it.
pub fn create_deployment_configs<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let api: Api<ClusterDeploymentConfig> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
        for (cluster, sets) in sets_by_cluster(world) {
            if world.hub_has("ClusterDeploymentConfig", cluster) {
                continue;
            }
            let node_sets = sets
                .iter()
                .map(|set_name| NodeSet {
                    name: (*set_name).to_owned(),
                    groups: vec![node_group(world, set_name)],
                })
                .collect();
            let mut document = ClusterDeploymentConfig::new(
                cluster,
                ClusterDeploymentConfigSpec {
                    approved: false,
                    environment: None,
                    edge_cluster: None,
                    cluster_ref: Some(cluster.to_owned()),
                    cluster: None,
                    node_sets,
                    images: None,
                    tolerations: Vec::new(),
                },
            );
            document.metadata.annotations = Some(BTreeMap::from([(
                "storage.simplyblock.io/migrated-from".to_owned(),
                sets.iter()
                    .map(|s| format!("StorageNodeSet/{s}"))
                    .collect::<Vec<_>>()
                    .join(","),
            )]));
            match api.create(&PostParams::default(), &document).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => {
                    return Err(kube_failed(format!(
                        "creating ClusterDeploymentConfig/{cluster}"
                    ))(e));
                }
            }
        }
        Ok(())
    }
    .boxed()
}

/// The one group of a retired set: the workers its storage nodes run on, its interfaces.
fn node_group(world: &World, set_name: &str) -> NodeGroup {
    let mut workers: Vec<String> = world
        .of_kind("StorageNode")
        .filter(|n| text(n, "/spec/storageNodeSetRef") == set_name)
        .map(|n| text(n, "/spec/workerNode").to_owned())
        .filter(|w| !w.is_empty())
        .collect();
    workers.sort_unstable();
    workers.dedup();
    let set = world.find("StorageNodeSet", set_name);
    let field = |pointer: &str| set.map(|s| text(s, pointer)).filter(|v| !v.is_empty());
    NodeGroup {
        name: "default".into(),
        workers,
        mgmt_interface: field("/spec/mgmtIfname").map(str::to_owned),
        data_interfaces: set
            .and_then(|s| s.pointer("/spec/dataIfname"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        devices: None,
        failure_domain: None,
        site: None,
        spdk_system_memory: None,
        journal_manager: None,
    }
}

/// The StorageNodeSets deleted, once nothing this tool moves names them, orphaning
/// anything else still theirs (the garbage collector's part).
pub fn retire_node_sets<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let still: Vec<String> = world
            .of_kind("StorageNode")
            .chain(world.release_objects())
            .filter(|o| owning_set(o).is_some())
            .map(display)
            .collect();
        if !still.is_empty() {
            return Err(failed(anyhow::anyhow!(
                "still owned by a StorageNodeSet: {}",
                still.join(", ")
            )));
        }
        for set in world.of_kind("StorageNodeSet").filter(|s| !retired(s)) {
            let api = api_of(ctx, world, set)?;
            // The Go operator's finalizers would hold the delete forever now it is gone; the
            // garbage collector's stay, so anything still the set's is orphaned, not deleted.
            let finalizers: Vec<&Value> = set
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .collect();
            let kept: Vec<&Value> = finalizers
                .iter()
                .copied()
                .filter(|f| {
                    f.as_str()
                        .is_some_and(|f| COLLECTOR_FINALIZERS.contains(&f))
                })
                .collect();
            if kept.len() != finalizers.len() {
                merge(ctx, world, set, json!({"metadata": {"finalizers": kept}})).await?;
            }
            let params = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Orphan),
                ..DeleteParams::default()
            };
            match api.delete(name(set), &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(kube_failed(format!("deleting {}", display(set)))(e)),
            }
        }
        Ok(())
    }
    .boxed()
}

/// What retiring the sets must leave: every StorageNode and every workload object the sets'
/// clusters own, as `before` (the world the sets were deleted from) had them, still there
/// and not being deleted.
pub fn survivors_remain<'a>(
    ctx: &'a Context,
    before: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let owned_by_cluster = |o: &&Value| {
            o.pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| refs.iter().any(|r| text(r, "/kind") == "StorageCluster"))
        };
        let mut lost = Vec::new();
        for object in before
            .of_kind("StorageNode")
            .chain(before.release_objects().filter(owned_by_cluster))
        {
            let now = api_of(ctx, before, object)?
                .get_opt(name(object))
                .await
                .map_err(kube_failed(format!("reading {}", display(object))))?;
            if now.is_none_or(|o| o.metadata.deletion_timestamp.is_some()) {
                lost.push(display(object));
            }
        }
        if lost.is_empty() {
            Ok(())
        } else {
            Err(failed(anyhow::anyhow!(
                "retiring the node sets took what they owned with them: {} are gone or being deleted",
                lost.join(", ")
            )))
        }
    }
    .boxed()
}

pub fn stamp_sizing<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        for node in world.of_kind("StorageNode").filter(|n| !stamped(n)) {
            let sizing = sizing(world, node).ok_or_else(|| {
                failed(anyhow::anyhow!(
                    "{}: its cluster's sizing is unknown",
                    display(node)
                ))
            })?;
            merge(
                ctx,
                world,
                node,
                json!({"metadata": {"annotations": stamp(&sizing)}}),
            )
            .await?;
        }
        Ok(())
    }
    .boxed()
}

pub fn rewrite_keys<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        for object in world.everything() {
            let mut patch = json!({"metadata": {}});
            for (map, old, new) in unmoved_keys(object) {
                let value = object
                    .pointer(&format!("/metadata/{map}"))
                    .and_then(|m| m.get(&old))
                    .cloned()
                    .unwrap_or(Value::Null);
                patch["metadata"][map][new] = value;
            }
            if patch["metadata"].as_object().is_some_and(|m| !m.is_empty()) {
                merge(ctx, world, object, patch).await?;
            }
        }
        Ok(())
    }
    .boxed()
}

pub fn normalize_handles<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        for (pv, handle) in normalized_handles(world) {
            let handle = handle.ok_or_else(|| {
                failed(anyhow::anyhow!(
                    "{}: the pool its handle names is not found",
                    display(pv)
                ))
            })?;
            merge(
                ctx,
                world,
                pv,
                json!({"metadata": {"annotations": {HANDLE_ANNOTATION: handle}}}),
            )
            .await?;
        }
        Ok(())
    }
    .boxed()
}

/// The annotation a moved object names what it was moved from in.
const MIGRATED_FROM: &str = "storage.simplyblock.io/migrated-from";

/// Deletes a Go object, its finalizers dropped first: the Go operator, stopped, would never
/// release them, and one that ran would undo in the control plane what was just moved.
/// `orphan` leaves what it owns to the garbage collector to orphan.
async fn retire_go_object(
    ctx: &Context,
    world: &World,
    object: &Value,
    orphan: bool,
) -> Result<(), StepError> {
    let has_finalizers = object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| {
            f.iter().any(|f| {
                f.as_str()
                    .is_some_and(|f| !COLLECTOR_FINALIZERS.contains(&f))
            })
        });
    if has_finalizers {
        merge(
            ctx,
            world,
            object,
            json!({"metadata": {"finalizers": null}}),
        )
        .await?;
    }
    let params = DeleteParams {
        propagation_policy: orphan.then_some(PropagationPolicy::Orphan),
        ..DeleteParams::default()
    };
    match api_of(ctx, world, object)?
        .delete(name(object), &params)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(kube_failed(format!("deleting {}", display(object)))(e)),
    }
}

/// Creates `object` unless it exists.
async fn create_once<K>(api: &Api<K>, object: &K, what: &str) -> Result<(), StepError>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(kube_failed(format!("creating {what}"))(e)),
    }
}

/// The StorageBackupPolicy Go BackupPolicy `policy` becomes: the same name (the control
/// plane's policy is found by it and adopted) and the claims it covered, by label.
pub fn policy_of(policy: &Value) -> StorageBackupPolicy {
    let some = |pointer: &str| Some(text(policy, pointer).to_owned()).filter(|v| !v.is_empty());
    let mut copy = StorageBackupPolicy::new(
        name(policy),
        StorageBackupPolicySpec {
            cluster_ref: text(policy, "/spec/clusterName").to_owned(),
            claim_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    BACKUP_POLICY_LABEL.to_owned(),
                    name(policy).to_owned(),
                )])),
                match_expressions: None,
            }),
            // Absent: this namespace, the one the Go policy and its claims had to share.
            namespace_selector: None,
            schedule: some("/spec/schedule"),
            max_versions: policy
                .pointer("/spec/maxVersions")
                .and_then(Value::as_i64)
                .filter(|v| *v > 0)
                .and_then(|v| i32::try_from(v).ok()),
            max_age: some("/spec/maxAge"),
        },
    );
    copy.metadata.annotations = Some(BTreeMap::from([(
        MIGRATED_FROM.to_owned(),
        display(policy),
    )]));
    copy
}

/// Each Go BackupPolicy: its claims labelled first (so the new policy never selects an
/// empty set and detaches nothing), then its StorageBackupPolicy created, then the Go
/// object deleted without its finalizer, which would detach and delete the control plane's
/// policy the new one adopts.
pub fn copy_policies<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        for policy in world.of_kind("BackupPolicy") {
            if let Some(problem) = policy_problem(policy) {
                return Err(failed(anyhow::anyhow!("{}: {problem}", display(policy))));
            }
            for claim in unlabelled_claims(world, policy) {
                merge(
                    ctx,
                    world,
                    claim,
                    json!({"metadata": {"labels": {BACKUP_POLICY_LABEL: name(policy)}}}),
                )
                .await?;
            }
            let namespace = match text(policy, "/metadata/namespace") {
                "" => ctx.namespace.as_str(),
                ns => ns,
            };
            if !world.hub_has("StorageBackupPolicy", name(policy)) {
                let api: Api<StorageBackupPolicy> = Api::namespaced(ctx.client.clone(), namespace);
                create_once(
                    &api,
                    &policy_of(policy),
                    &format!("StorageBackupPolicy/{}", name(policy)),
                )
                .await?;
            }
            retire_go_object(ctx, world, policy, false).await?;
        }
        Ok(())
    }
    .boxed()
}

/// The StorageBackupOps a finished Go BackupRestore becomes, and the status it records: a
/// historical record, which the operator never runs.
pub fn restore_record(restore: &Value) -> (StorageBackupOps, Value) {
    let some = |pointer: &str| Some(text(restore, pointer).to_owned()).filter(|v| !v.is_empty());
    let own_namespace = text(restore, "/metadata/namespace");
    let claim_name = some("/status/pvcName")
        .or_else(|| some("/spec/pvcTemplate/metadata/name"))
        .unwrap_or_else(|| format!("{}-restored", name(restore)));
    let mut record = StorageBackupOps::new(
        name(restore),
        StorageBackupOpsSpec {
            backup_ref: text(restore, "/spec/backupRef/name").to_owned(),
            action: BackupAction::Restore,
            restore: Some(RestoreSpec {
                claim_name,
                claim_namespace: some("/status/pvcNamespace").filter(|ns| ns != own_namespace),
                target_pool: some("/status/poolName").or_else(|| some("/spec/targetPool")),
                claim_labels: BTreeMap::new(),
                claim_annotations: BTreeMap::new(),
            }),
            abort: false,
        },
    );
    record.metadata.annotations = Some(BTreeMap::from([
        (HISTORICAL_RECORD_ANNOTATION.to_owned(), "true".to_owned()),
        (MIGRATED_FROM.to_owned(), display(restore)),
    ]));
    let mut status = json!({
        "phase": if text(restore, "/status/phase") == "Done" { "Succeeded" } else { "Failed" },
        "step": {"state": "Binding"},
    });
    for (from, to) in [
        ("clusterUUID", "clusterID"),
        ("backupID", "backupID"),
        ("restoredLvolID", "restoredLvolID"),
        ("poolUUID", "poolUUID"),
        ("pvName", "persistentVolumeName"),
        ("pvcName", "claimName"),
        ("pvcNamespace", "claimNamespace"),
        ("message", "message"),
        ("startedAt", "startedAt"),
        ("completedAt", "completedAt"),
    ] {
        if let Some(value) = some(&format!("/status/{from}")) {
            status[to] = Value::String(value);
        }
    }
    (record, status)
}

/// Each finished Go BackupRestore: its record created, its outcome written into the
/// record's status (again on every run while the Go object is there to read it from), then
/// the Go object deleted.
pub fn absorb_restores<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let crd = world.crd("StorageBackupOps").ok_or_else(|| {
            failed(anyhow::anyhow!(
                "no CRD of kind StorageBackupOps: the upgrade stage applies it"
            ))
        })?;
        for restore in world.of_kind("BackupRestore") {
            let namespace = match text(restore, "/metadata/namespace") {
                "" => ctx.namespace.as_str(),
                ns => ns,
            };
            let (record, status) = restore_record(restore);
            let what = format!("StorageBackupOps/{}", name(restore));
            if !world.hub_has("StorageBackupOps", name(restore)) {
                let api: Api<StorageBackupOps> = Api::namespaced(ctx.client.clone(), namespace);
                create_once(&api, &record, &what).await?;
            }
            crd.api(&ctx.client, namespace, V1ALPHA2)
                .patch_status(
                    name(restore),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": status})),
                )
                .await
                .map_err(kube_failed(format!("writing the status of {what}")))?;
            retire_go_object(ctx, world, restore, false).await?;
        }
        Ok(())
    }
    .boxed()
}

/// Each BackupImport deleted, orphaning the StorageBackup it made: that backup is in the
/// store, and so recorded, whatever imported it.
pub fn delete_imports<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        for import in world.of_kind("BackupImport").filter(|o| !retired(o)) {
            retire_go_object(ctx, world, import, true).await?;
        }
        Ok(())
    }
    .boxed()
}

/// The storage rewrite of each converting CRD: storage switched to v1alpha2, every object
/// written back unchanged (so etcd holds it at v1alpha2), then `status.storedVersions`
/// narrowed to `[v1alpha2]`. Each part is safe to repeat.
pub fn rewrite_storage<'a>(
    ctx: &'a Context,
    world: &'a World,
) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let api: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
        let kinds = checks::converting_kinds();
        for crd in world
            .crds
            .iter()
            .filter(|c| kinds.contains(&c.kind.as_str()) && !rewritten(c))
        {
            let crd_name = format!("{}.{GROUP}", crd.plural);
            let live = api
                .get(&crd_name)
                .await
                .map_err(kube_failed(format!("reading CRD {crd_name}")))?;
            if live
                .spec
                .versions
                .iter()
                .any(|v| v.name == V1ALPHA1 && v.storage)
            {
                let versions: Vec<Value> = live
                    .spec
                    .versions
                    .iter()
                    .map(|v| {
                        let mut v = serde_json::to_value(v).unwrap_or(Value::Null);
                        v["storage"] = json!(v["name"] == V1ALPHA2);
                        v
                    })
                    .collect();
                api.patch(
                    &crd_name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({
                        "metadata": {"resourceVersion": live.metadata.resource_version},
                        "spec": {"versions": versions},
                    })),
                )
                .await
                .map_err(kube_failed(format!(
                    "switching CRD {crd_name}'s storage to v1alpha2"
                )))?;
            }
            let resource = crd.resource(V1ALPHA2);
            let objects: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
            let all = objects
                .list(&ListParams::default())
                .await
                .map_err(kube_failed(format!("listing {} at v1alpha2", crd.plural)))?;
            let rewritten = all.items.len();
            for object in all.items {
                write_back(ctx, &resource, object).await?;
            }
            api.patch_status(
                &crd_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"storedVersions": [V1ALPHA2]}})),
            )
            .await
            .map_err(kube_failed(format!(
                "narrowing CRD {crd_name}'s storedVersions"
            )))?;
            println!(
                "    {}: {rewritten} object(s) rewritten at v1alpha2",
                crd.kind
            );
        }
        Ok(())
    }
    .boxed()
}

/// Writes `object` back as read; a conflict reads it again.
async fn write_back(
    ctx: &Context,
    resource: &ApiResource,
    mut object: DynamicObject,
) -> Result<(), StepError> {
    let object_name = object.metadata.name.clone().unwrap_or_default();
    let ns = object.metadata.namespace.clone().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, resource);
    for _ in 0..5 {
        match api
            .replace(&object_name, &PostParams::default(), &object)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                object = api.get(&object_name).await.map_err(kube_failed(format!(
                    "re-reading {}/{object_name}",
                    resource.kind
                )))?;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => {
                return Err(kube_failed(format!(
                    "writing {}/{object_name} back at v1alpha2",
                    resource.kind
                ))(e));
            }
        }
    }
    Err(failed(anyhow::anyhow!(
        "{}/{object_name} kept changing while it was written back; run again",
        resource.kind
    )))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn go_policy(spec: Value) -> Value {
        json!({"kind": "BackupPolicy", "metadata": {"name": "nightly", "namespace": "sb"}, "spec": spec})
    }

    #[test]
    fn a_go_policy_becomes_one_selecting_its_claims_by_label_with_its_limits() {
        let copy = policy_of(&go_policy(json!({
            "clusterName": "prod", "schedule": "15m,4 1d,7", "maxAge": "7d", "maxVersions": 0
        })));
        let spec = serde_json::to_value(&copy.spec).expect("json");
        assert_eq!(
            spec,
            json!({"clusterRef": "prod", "schedule": "15m,4 1d,7", "maxAge": "7d",
                   "claimSelector": {"matchLabels": {BACKUP_POLICY_LABEL: "nightly"}}}),
            "maxVersions 0 (no limit) is left out"
        );
        let copy = policy_of(&go_policy(json!({"clusterName": "prod", "maxVersions": 3})));
        assert_eq!(copy.spec.max_versions, Some(3));
    }

    #[test]
    fn a_go_policy_the_control_plane_never_took_is_refused() {
        for (spec, why) in [
            (json!({"clusterName": "prod"}), "none of"),
            (json!({"clusterName": "prod", "schedule": "0m,4"}), "zero"),
            (json!({"clusterName": "prod", "schedule": "15m,0"}), "zero"),
            (json!({"clusterName": "prod", "maxAge": "0d"}), "zero"),
            (json!({"clusterName": "prod", "maxVersions": 0}), "none of"),
        ] {
            let problem = policy_problem(&go_policy(spec.clone())).unwrap_or_default();
            assert!(problem.contains(why), "{spec}: {problem:?}");
        }
        assert_eq!(
            policy_problem(&go_policy(
                json!({"clusterName": "prod", "schedule": "15m,4  1h,24"})
            )),
            None
        );
        let mut long = go_policy(json!({"clusterName": "prod", "maxAge": "7d"}));
        long["metadata"]["name"] = json!("p".repeat(64));
        assert!(policy_problem(&long).is_some());
    }

    #[test]
    fn the_claims_of_a_policy_are_those_annotated_in_its_namespace_under_any_spelling() {
        let claim = |name: &str, ns: &str, annotations: Value, labels: Value| {
            json!({"kind": "PersistentVolumeClaim",
                   "metadata": {"name": name, "namespace": ns, "annotations": annotations, "labels": labels}})
        };
        let world = World {
            kubernetes: vec![
                claim(
                    "new",
                    "sb",
                    json!({BACKUP_POLICY_LABEL: "nightly"}),
                    json!({}),
                ),
                claim(
                    "old",
                    "sb",
                    json!({"simplyblock.io/backup-policy": "nightly"}),
                    json!({}),
                ),
                claim(
                    "legacy",
                    "sb",
                    json!({"simplybk/backup-policy": "nightly"}),
                    json!({}),
                ),
                // The new key wins, as it did for the Go operator.
                claim(
                    "other",
                    "sb",
                    json!({BACKUP_POLICY_LABEL: "weekly", "simplybk/backup-policy": "nightly"}),
                    json!({}),
                ),
                claim(
                    "elsewhere",
                    "apps",
                    json!({BACKUP_POLICY_LABEL: "nightly"}),
                    json!({}),
                ),
                claim(
                    "done",
                    "sb",
                    json!({BACKUP_POLICY_LABEL: "nightly"}),
                    json!({BACKUP_POLICY_LABEL: "nightly"}),
                ),
            ],
            ..World::default()
        };
        let policy = go_policy(json!({"clusterName": "prod", "maxAge": "7d"}));
        let names: Vec<&str> = unlabelled_claims(&world, &policy)
            .into_iter()
            .map(name)
            .collect();
        assert_eq!(names, ["new", "old", "legacy"]);
    }

    #[test]
    fn a_finished_go_restore_becomes_a_historical_record_of_its_outcome() {
        let restore = json!({"kind": "BackupRestore", "metadata": {"name": "r1", "namespace": "sb"},
            "spec": {"clusterName": "prod", "backupRef": {"name": "b1"}, "targetPool": "silver",
                     "pvcTemplate": {"metadata": {"name": "from-template"}, "spec": {}}},
            "status": {"phase": "Done", "clusterUUID": "c-1", "backupID": "b-1", "restoredLvolID": "l-2",
                       "poolName": "gold", "poolUUID": "p-1", "pvName": "restore-x", "pvcName": "db-restored",
                       "pvcNamespace": "apps", "message": "PVC apps/db-restored is bound",
                       "startedAt": "2026-01-02T03:04:05Z", "completedAt": "2026-01-02T03:14:05Z"}});
        let (record, status) = restore_record(&restore);
        assert_eq!(
            serde_json::to_value(&record.spec).expect("json"),
            json!({"backupRef": "b1", "action": "Restore", "abort": false,
                   "restore": {"claimName": "db-restored", "claimNamespace": "apps", "targetPool": "gold"}})
        );
        assert!(record.is_historical_record());
        assert_eq!(
            status,
            json!({"phase": "Succeeded", "step": {"state": "Binding"}, "clusterID": "c-1",
                   "backupID": "b-1", "restoredLvolID": "l-2", "poolUUID": "p-1",
                   "persistentVolumeName": "restore-x", "claimName": "db-restored",
                   "claimNamespace": "apps", "message": "PVC apps/db-restored is bound",
                   "startedAt": "2026-01-02T03:04:05Z", "completedAt": "2026-01-02T03:14:05Z"})
        );

        // A failed one, before it named a claim: the template's name, its own pool choice.
        let mut failed = restore.clone();
        failed["status"] = json!({"phase": "Failed", "pvcNamespace": "sb"});
        let (record, status) = restore_record(&failed);
        let spec = record.spec.restore.expect("restore");
        assert_eq!(
            (
                spec.claim_name.as_str(),
                spec.claim_namespace,
                spec.target_pool.as_deref()
            ),
            ("from-template", None, Some("silver"))
        );
        assert_eq!(status["phase"], "Failed");
        failed["spec"]["pvcTemplate"]["metadata"] = json!({});
        assert_eq!(
            restore_record(&failed)
                .0
                .spec
                .restore
                .expect("restore")
                .claim_name,
            "r1-restored"
        );
    }
}

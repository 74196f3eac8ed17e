//! The steps of the upgrade and migrate stages.
//!
//! This release declares them (what each would do, whether it is done, whether it may run);
//! carrying them out is not implemented yet, so every `apply` and `verify` is `None`.

use serde_json::Value;

use crate::checks;
use crate::step::{Action, Options, Refusal, Stage, Step};
use crate::world::{Crd, GROUP, V1ALPHA1, V1ALPHA2, World, display, kind, name, text};

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

fn deploy_webhook_describe(world: &World) -> Vec<Action> {
    converting_crds(world)
        .filter(|c| c.conversion != "Webhook")
        .map(|c| {
            action(
                "conversion-webhook",
                "update",
                crd_name(c),
                format!(
                    "spec.conversion: strategy {} → Webhook, served by the operator's {} on Service {}",
                    c.conversion,
                    simplyblock_api::CONVERSION_PATH,
                    simplyblock_api::WEBHOOK_SERVICE
                ),
            )
        })
        .collect()
}

fn deploy_webhook_done(world: &World) -> bool {
    converting_crds(world).all(|c| c.conversion == "Webhook")
        && converting_crds(world).next().is_some()
}

fn await_webhook_done(world: &World) -> bool {
    deploy_webhook_done(world) && converting_crds(world).all(|c| c.conversion_ca_bundle)
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

fn helm_describe(world: &World) -> Vec<Action> {
    world
        .crds
        .iter()
        .filter(|c| c.annotations.contains_key("meta.helm.sh/release-name"))
        .filter(|c| c.annotations.get("helm.sh/resource-policy").map(String::as_str) != Some("keep"))
        .map(|c| {
            action(
                "hand-over-helm-release",
                "annotate",
                crd_name(c),
                "helm.sh/resource-policy: keep, so the old release's removal leaves it".into(),
            )
        })
        .chain(check(
            "hand-over-helm-release",
            "render the old and the new chart, classify every difference; an unclassified one refuses",
        ))
        .collect()
}

fn upgrade_operator_validate(world: &World, _: &Options) -> Result<(), Vec<Refusal>> {
    checks::in_flight_operations(world)
}

fn smoke_conversion_validate(world: &World, _: &Options) -> Result<(), Vec<Refusal>> {
    checks::round_trips(world)
}

// ---- migrate ----

/// The StorageNodeSet a controller ownerReference of `object` names.
fn owning_set(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| text(r, "/kind") == "StorageNodeSet")
        .map(|r| text(r, "/name"))
}

/// The StorageCluster a StorageNode belongs to: its controller owner, else its set's cluster.
fn node_cluster<'a>(world: &'a World, node: &'a Value) -> Option<&'a str> {
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
            let cluster = world
                .find("StorageNodeSet", set)
                .map(|s| text(s, "/spec/clusterName"))
                .unwrap_or("?");
            Some(action(
                "reparent",
                "update",
                display(n),
                format!("ownerReferences: StorageNodeSet/{set} → StorageCluster/{cluster} (controller), one atomic update"),
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

fn workload_describe(world: &World) -> Vec<Action> {
    world
        .workload
        .iter()
        .filter_map(|o| {
            let set = owning_set(o)?;
            let cluster = world
                .find("StorageNodeSet", set)
                .map(|s| text(s, "/spec/clusterName"))
                .unwrap_or("?");
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
    world.workload.iter().all(|o| owning_set(o).is_none())
}

/// The clusters node sets name, with the sets.
fn sets_by_cluster(world: &World) -> std::collections::BTreeMap<&str, Vec<&str>> {
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

fn retire_done(world: &World) -> bool {
    world.of_kind("StorageNodeSet").next().is_none()
}

fn retire_validate(world: &World, _: &Options) -> Result<(), Vec<Refusal>> {
    checks::node_set_drains(world)
}

/// The sizing JSON a node would be stamped with.
fn sizing(world: &World, node: &Value) -> Option<Value> {
    let cluster = world.find("StorageCluster", node_cluster(world, node)?)?;
    let vcpu = cluster.pointer("/spec/vcpuCount")?.as_i64()?;
    let mut sizing = serde_json::json!({ "vcpuCount": vcpu });
    let huge = text(cluster, "/spec/maxHugePagesSize");
    if !huge.is_empty() {
        sizing["minHugePagesSize"] = Value::String(huge.into());
    }
    Some(sizing)
}

fn stamped(node: &Value) -> bool {
    node.pointer("/metadata/annotations")
        .and_then(|a| a.get(SIZING_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .is_some_and(|v| v.get("vcpuCount").is_some_and(Value::is_number))
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
                    "{SIZING_ANNOTATION} = {}",
                    sizing(world, n).map_or("(cluster unknown)".into(), |s| s.to_string())
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
                out.push((old.clone(), new));
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

fn handles_describe(world: &World) -> Vec<Action> {
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
            let uuid = checks::pool_uuid(world, cluster, pool).unwrap_or("(unresolved)");
            let handle = text(pv, "/spec/csi/volumeHandle");
            let volume = handle.rsplit(':').next().unwrap_or("");
            action(
                "normalize-handles",
                "annotate",
                display(pv),
                format!("{HANDLE_ANNOTATION} = {cluster}:{uuid}:{volume}"),
            )
        })
        .collect()
}

fn handles_done(world: &World) -> bool {
    handles_describe(world).is_empty()
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

fn rewritten(crd: &Crd) -> bool {
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
    ($id:literal, $stage:ident, $phase:literal, [$($req:literal),*], $describe:expr, $done:expr, $validate:expr) => {
        Step {
            id: $id,
            stage: Stage::$stage,
            phase: $phase,
            requires: &[$($req),*],
            describe: $describe,
            done: $done,
            validate: $validate,
            apply: None,
            verify: None,
        }
    };
}

/// Every step of both stages, in declaration order.
pub fn all() -> Vec<Step> {
    vec![
        step!(
            "deploy-conversion-webhook",
            Upgrade,
            "",
            [],
            deploy_webhook_describe,
            deploy_webhook_done,
            ok
        ),
        step!(
            "await-conversion-webhook",
            Upgrade,
            "",
            ["deploy-conversion-webhook"],
            |_| check(
                "await-conversion-webhook",
                "the webhook answers a ConversionReview and every converting CRD carries its CA bundle"
            ),
            await_webhook_done,
            ok
        ),
        step!(
            "smoke-test-conversion",
            Upgrade,
            "",
            ["await-conversion-webhook"],
            |_| check(
                "smoke-test-conversion",
                "read one object of each converting kind through v1alpha2 and round-trip it"
            ),
            never,
            smoke_conversion_validate
        ),
        step!(
            "apply-crds",
            Upgrade,
            "",
            ["smoke-test-conversion"],
            apply_crds_describe,
            apply_crds_done,
            ok
        ),
        step!(
            "verify-crd-versions",
            Upgrade,
            "",
            ["apply-crds"],
            |_| check(
                "verify-crd-versions",
                "every CRD Established and NamesAccepted, converting kinds serving both versions, storage at v1alpha1"
            ),
            never,
            ok
        ),
        step!(
            "retest-conversion",
            Upgrade,
            "",
            ["verify-crd-versions"],
            |_| check(
                "retest-conversion",
                "the smoke test of the conversion again, through the applied CRDs"
            ),
            never,
            smoke_conversion_validate
        ),
        step!(
            "hand-over-helm-release",
            Upgrade,
            "",
            ["retest-conversion"],
            helm_describe,
            never,
            ok
        ),
        step!(
            "upgrade-operator",
            Upgrade,
            "",
            ["hand-over-helm-release"],
            |_| vec![action(
                "upgrade-operator",
                "update",
                "Deployment/simplyblock-operator".into(),
                "this operator's image and chart values, the Go values keys translated".into()
            )],
            never,
            upgrade_operator_validate
        ),
        step!(
            "await-operator",
            Upgrade,
            "",
            ["upgrade-operator"],
            |_| check(
                "await-operator",
                "the operator is ready, has adopted the release's objects, and nothing differs from the capture"
            ),
            never,
            ok
        ),
        step!(
            "smoke-test-operator",
            Upgrade,
            "",
            ["await-operator"],
            |_| check(
                "smoke-test-operator",
                "a write at v1alpha2 is accepted and reconciled"
            ),
            never,
            ok
        ),
        step!(
            "reparent-storage-nodes",
            Migrate,
            "Ownership",
            [],
            reparent_nodes_describe,
            reparent_nodes_done,
            reparent_nodes_validate
        ),
        step!(
            "reparent-node-set-workload",
            Migrate,
            "Ownership",
            ["reparent-storage-nodes"],
            workload_describe,
            workload_done,
            ok
        ),
        step!(
            "create-cluster-deployment-configs",
            Migrate,
            "Transforming",
            [],
            cdc_describe,
            cdc_done,
            ok
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
            retire_validate
        ),
        step!(
            "stamp-storage-node-sizing",
            Migrate,
            "Transforming",
            ["reparent-storage-nodes"],
            sizing_describe,
            sizing_done,
            sizing_validate
        ),
        step!(
            "rewrite-annotation-keys",
            Migrate,
            "Transforming",
            [],
            keys_describe,
            keys_done,
            keys_validate
        ),
        step!(
            "copy-backup-policies",
            Migrate,
            "Transforming",
            [],
            policies_describe,
            policies_done,
            ok
        ),
        step!(
            "absorb-volume-migrations",
            Migrate,
            "Transforming",
            [],
            migrations_describe,
            migrations_done,
            migrations_validate
        ),
        step!(
            "absorb-backup-restores",
            Migrate,
            "Transforming",
            [],
            restores_describe,
            restores_done,
            restores_validate
        ),
        step!(
            "normalize-volume-handles",
            Migrate,
            "Handles",
            [],
            handles_describe,
            handles_done,
            handles_validate
        ),
        step!(
            "delete-backup-imports",
            Migrate,
            "Deleting",
            ["copy-backup-policies"],
            imports_describe,
            imports_done,
            ok
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
            rewrite_validate
        ),
    ]
}

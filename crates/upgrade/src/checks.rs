//! The preflight checks: each a pure function of the [`World`], each refusal saying what is
//! wrong, why that stops the upgrade and what to do. Steps refuse by the same checks.

use serde_json::Value;
use simplyblock_conversion::path::said;
use simplyblock_conversion::{HUB, SPOKE};

use crate::step::{Options, Refusal};
use crate::world::{World, display, kind, name, text};

/// The longest name a label value (and so a name written into one) may have.
pub const LABEL_LIMIT: usize = 63;

/// Phases after which an operation does nothing more.
const TERMINAL_OPS_PHASES: &[&str] = &["Succeeded", "Failed"];
/// Terminal phases of the retired VolumeMigration and BackupRestore.
const TERMINAL_RETIRED_PHASES: &[&str] = &["Completed", "Succeeded", "Failed", "Done"];
/// Drain phases of a StorageNodeSet's `drainCoordination` after which the drain is over.
const FINISHED_DRAIN_PHASES: &[&str] = &["complete", "failed"];

/// Annotation and label keys that move from `simplyblock.io/<k>` to
/// `storage.simplyblock.io/<k>`.
pub const MOVED_KEYS: &[&str] = &[
    "auto-restart-on-pathloss",
    "backup-policy",
    "component",
    "drain-node",
    "fdb-node",
    "fio-baseline",
    "fio-baseline-node",
    "guardian-disable",
    "host-id",
    "lvol-id",
    "lvol-protection",
    "managed-by",
    "nvmf-model-id",
    "placement-hint",
    "pod-affinity",
    "pool",
    "qos-r-mbps",
    "qos-rw-iops",
    "qos-rw-mbps",
    "qos-w-mbps",
    "replication-policy",
    "selected-storage-node",
    "selected-storage-node-applied",
    "selected-storage-node-rejected",
    "simplyblock-rebalancer-injected",
    "storage",
    "trigger-realignment",
    "volume-handle",
];
/// Moved key families: every key with one of these prefixes moves.
pub const MOVED_FAMILIES: &[&str] = &["pool.", "storage-node-uuid."];
/// The old prefix of a moved key.
pub const OLD_PREFIX: &str = "simplyblock.io/";
/// The new prefix of a moved key.
pub const NEW_PREFIX: &str = "storage.simplyblock.io/";

/// The new spelling of `key` if it is an old spelling of a moved key.
pub fn moved(key: &str) -> Option<String> {
    let rest = key.strip_prefix(OLD_PREFIX)?;
    (MOVED_KEYS.contains(&rest) || MOVED_FAMILIES.iter().any(|f| rest.starts_with(f)))
        .then(|| format!("{NEW_PREFIX}{rest}"))
}

fn refusal(check: &'static str, object: String, what: String, why: &str, fix: String) -> Refusal {
    Refusal {
        check,
        object,
        what,
        why: why.to_owned(),
        fix,
    }
}

fn collect(refusals: Vec<Refusal>) -> Result<(), Vec<Refusal>> {
    if refusals.is_empty() {
        Ok(())
    } else {
        Err(refusals)
    }
}

/// Operations (StorageClusterOps, StorageNodeOps) and the retired VolumeMigration and
/// BackupRestore that have not reached a terminal phase.
pub fn in_flight_operations(world: &World) -> Result<(), Vec<Refusal>> {
    let mut out = Vec::new();
    for (kind_, terminal) in [
        ("StorageClusterOps", TERMINAL_OPS_PHASES),
        ("StorageNodeOps", TERMINAL_OPS_PHASES),
        ("VolumeMigration", TERMINAL_RETIRED_PHASES),
        ("BackupRestore", TERMINAL_RETIRED_PHASES),
    ] {
        for op in world.of_kind(kind_) {
            let phase = text(op, "/status/phase");
            if terminal.contains(&phase) {
                continue;
            }
            let action = text(op, "/spec/action");
            out.push(refusal(
                "in-flight-operation",
                display(op),
                format!(
                    "the operation{} is in phase {}",
                    if action.is_empty() {
                        String::new()
                    } else {
                        format!(" {action:?}")
                    },
                    if phase.is_empty() {
                        "(not started)".to_owned()
                    } else {
                        phase.to_owned()
                    }
                ),
                "the Go operator runs it; the new operator would take it over half done, with its state in a shape it reads differently",
                format!(
                    "wait until {} reaches {}, or delete it to abort it, then run preflight again",
                    display(op),
                    terminal.join(" or ")
                ),
            ));
        }
    }
    collect(out)
}

/// StorageNodeSets with a drain in progress.
pub fn node_set_drains(world: &World) -> Result<(), Vec<Refusal>> {
    let mut out = Vec::new();
    for set in world.of_kind("StorageNodeSet") {
        let draining: Vec<String> = set
            .pointer("/status/drainCoordination")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|d| !FINISHED_DRAIN_PHASES.contains(&text(d, "/phase")))
            .map(|d| format!("{} ({})", text(d, "/hostname"), text(d, "/phase")))
            .collect();
        if !draining.is_empty() {
            out.push(refusal(
                "node-set-drain",
                display(set),
                format!("is draining {}", draining.join(", ")),
                "drains move to StorageNodeOps in v1alpha2; a drain the set coordinates is lost when the set is retired",
                "let the drain finish (its phase becomes complete or failed), then run preflight again".into(),
            ));
        }
    }
    collect(out)
}

/// Storage nodes the control plane does not report online.
pub fn offline_nodes(world: &World, options: &Options) -> Result<(), Vec<Refusal>> {
    if options.acknowledge_offline_nodes {
        return Ok(());
    }
    let out = world
        .of_kind("StorageNode")
        .filter(|n| text(n, "/status/status") != "online")
        .map(|n| {
            let status = text(n, "/status/status");
            refusal(
                "storage-node-offline",
                display(n),
                format!(
                    "is {}",
                    if status.is_empty() {
                        "not reported by the control plane".to_owned()
                    } else {
                        format!("{status}, not online")
                    }
                ),
                "the migration rewrites every StorageNode; a node that is not online cannot confirm it still runs as its object says",
                format!(
                    "bring {} online, or remove it, or rerun with --acknowledge-offline-nodes to move it as it is",
                    name(n)
                ),
            )
        })
        .collect();
    collect(out)
}

/// Names that v1alpha2 writes into label values, longer than a label value may be.
pub fn name_lengths(world: &World) -> Result<(), Vec<Refusal>> {
    let mut out = Vec::new();
    let mut long = |object: &Value, what: String, value: &str, fix: String| {
        if value.len() > LABEL_LIMIT {
            out.push(refusal(
                "name-too-long",
                display(object),
                format!("{what} {value:?} has {} characters", value.len()),
                "v1alpha2 writes it into label values, which hold at most 63; the object could not be written at v1alpha2",
                fix,
            ));
        }
    };
    for object in &world.objects {
        match kind(object) {
            "StorageCluster" | "StoragePool" | "StorageNode" | "StorageNodeSet" => long(
                object,
                "the name".into(),
                name(object),
                format!(
                    "recreate {} under a name of at most 63 characters before upgrading",
                    display(object)
                ),
            ),
            _ => {}
        }
        if kind(object) == "StorageNodeSet" {
            long(
                object,
                "the cluster it names (spec.clusterName, the nodes' clusterRef)".into(),
                text(object, "/spec/clusterName"),
                "rename the StorageCluster to at most 63 characters".into(),
            );
        }
    }
    collect(out)
}

/// The converting kinds of this release.
pub fn converting_kinds() -> Vec<&'static str> {
    simplyblock_conversion::kinds()
        .iter()
        .map(|p| p.kind.kind)
        .collect()
}

/// Every v1alpha1 object of a converting kind comes back equal from the hub: what it says
/// in its own fields, and what its stash annotations say once read at the hub (a stash may
/// come back under another key, e.g. the stamped `config.sizing` inside a stash of the
/// whole `config` block, and still say the same).
pub fn round_trips(world: &World) -> Result<(), Vec<Refusal>> {
    let converting = converting_kinds();
    let out = world
        .objects
        .iter()
        .filter(|o| converting.contains(&kind(o)))
        .filter_map(|original| {
            let up = simplyblock_conversion::convert(original, HUB);
            let back = simplyblock_conversion::convert(&up, SPOKE);
            let again = simplyblock_conversion::convert(&back, HUB);
            let (before, after) = (said(&unstashed(original)), said(&unstashed(&back)));
            let difference = if before != after {
                first_difference(&before, &after, "")
            } else if said(&up) != said(&again) {
                format!(
                    "at v1alpha2 {}",
                    first_difference(&said(&up), &said(&again), "")
                )
            } else {
                return None;
            };
            Some(refusal(
                "conversion-round-trip",
                display(original),
                format!("does not come back equal through v1alpha2: {difference}"),
                "once v1alpha2 is served, every read through it and every write back would change the object",
                "keep the object as it is and report it with this output; the upgrade must not run until the conversion carries it".into(),
            ))
        })
        .collect();
    collect(out)
}

/// `object` without its stash annotations.
fn unstashed(object: &Value) -> Value {
    let mut out = object.clone();
    if let Some(annotations) = out
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.retain(|k, _| {
            !k.starts_with(simplyblock_conversion::UP_STASH)
                && !k.starts_with(simplyblock_conversion::DOWN_STASH)
        });
    }
    out
}

/// Where two values first differ, as `path: before → after`.
fn first_difference(a: &Value, b: &Value, at: &str) -> String {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for key in x.keys().chain(y.keys()) {
                let (p, q) = (
                    x.get(key).unwrap_or(&Value::Null),
                    y.get(key).unwrap_or(&Value::Null),
                );
                if p != q {
                    return first_difference(p, q, &format!("{at}.{key}"));
                }
            }
            format!("{at}: differs")
        }
        _ => format!("{at}: {a} → {b}"),
    }
}

/// Objects carrying a moved key in both spellings with different values.
pub fn annotation_conflicts(world: &World) -> Result<(), Vec<Refusal>> {
    let mut out = Vec::new();
    for object in world.everything() {
        for map in ["annotations", "labels"] {
            let Some(entries) = object
                .pointer(&format!("/metadata/{map}"))
                .and_then(Value::as_object)
            else {
                continue;
            };
            for (old, value) in entries {
                let Some(new) = moved(old) else { continue };
                let Some(other) = entries.get(&new) else {
                    continue;
                };
                if other != value {
                    let ns = text(object, "/metadata/namespace");
                    out.push(refusal(
                        "key-spelling-conflict",
                        if ns.is_empty() || ns == world.namespace {
                            display(object)
                        } else {
                            format!("{} (namespace {ns})", display(object))
                        },
                        format!("{map} {old} = {value} but {new} = {other}"),
                        "the migration copies the old key to the new; with two different values it cannot know which one holds",
                        format!("remove the one that is wrong (keep {new} if it is right), then run preflight again"),
                    ));
                }
            }
        }
    }
    collect(out)
}

/// Volumes of the CSI driver whose handle names the pool by name, with no pool of that
/// name in the cluster the handle names.
pub fn legacy_handles(world: &World) -> Result<(), Vec<Refusal>> {
    let out = legacy_volumes(world)
        .filter(|(_, cluster, pool)| pool_uuid(world, cluster, pool).is_none())
        .map(|(pv, cluster, pool)| {
            refusal(
                "legacy-handle-unresolvable",
                display(pv),
                format!("its handle names pool {pool:?} of cluster {cluster}, and no StoragePool of that name in that cluster has a UUID"),
                "v1alpha2 names pools by UUID; the handle's pool cannot be translated",
                format!("restore StoragePool {pool} (with status.uuid) in the cluster, or delete the volume"),
            )
        })
        .collect();
    collect(out)
}

/// The CSI volumes whose handle's pool segment is a name: `(pv, cluster, pool)`.
pub fn legacy_volumes(world: &World) -> impl Iterator<Item = (&Value, &str, &str)> {
    world
        .kubernetes
        .iter()
        .filter(|o| kind(o) == "PersistentVolume")
        .filter(|pv| text(pv, "/spec/csi/driver") == simplyblock_api::keys::CSI_DRIVER_NAME)
        .filter_map(|pv| {
            let handle = text(pv, "/spec/csi/volumeHandle");
            let mut parts = handle.split(':');
            let (Some(cluster), Some(pool), Some(_), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return None;
            };
            (!pool.is_empty() && !is_uuid(pool)).then_some((pv, cluster, pool))
        })
}

/// The UUID of pool `pool` of the cluster whose UUID is `cluster`.
pub fn pool_uuid<'a>(world: &'a World, cluster: &str, pool: &str) -> Option<&'a str> {
    let cluster_name = world
        .of_kind("StorageCluster")
        .find(|c| text(c, "/status/uuid") == cluster)
        .map(name)?;
    world
        .of_kind("StoragePool")
        .find(|p| name(p) == pool && text(p, "/spec/clusterName") == cluster_name)
        .map(|p| text(p, "/status/uuid"))
        .filter(|u| !u.is_empty())
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Every check, every refusal.
pub fn all(world: &World, options: &Options) -> Vec<Refusal> {
    let mut out: Vec<Refusal> = [
        in_flight_operations(world),
        node_set_drains(world),
        offline_nodes(world, options),
        name_lengths(world),
        round_trips(world),
        annotation_conflicts(world),
        legacy_handles(world),
    ]
    .into_iter()
    .filter_map(Result::err)
    .flatten()
    .collect();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn world(objects: Vec<Value>) -> World {
        World {
            namespace: "sb".into(),
            objects,
            ..World::default()
        }
    }

    #[test]
    fn a_key_in_both_spellings_with_different_values_is_refused_and_equal_values_are_not() {
        let mut w = world(vec![
            json!({"kind": "StoragePool", "metadata": {"name": "p", "annotations": {
                "simplyblock.io/qos-rw-iops": "100", "storage.simplyblock.io/qos-rw-iops": "200",
                "simplyblock.io/pool.sb.prod.p": "x", "storage.simplyblock.io/pool.sb.prod.p": "x",
                "simplyblock.io/not-moved": "1", "storage.simplyblock.io/not-moved": "2",
            }}}),
        ]);
        let refusals = annotation_conflicts(&w).expect_err("conflict");
        assert_eq!(refusals.len(), 1, "{refusals:?}");
        assert!(refusals[0].what.contains("qos-rw-iops"), "{}", refusals[0]);
        w.objects[0]["metadata"]["annotations"]["storage.simplyblock.io/qos-rw-iops"] =
            json!("100");
        assert_eq!(annotation_conflicts(&w), Ok(()));
    }

    #[test]
    fn offline_nodes_refuse_unless_acknowledged() {
        let w = world(vec![
            json!({"kind": "StorageNode", "metadata": {"name": "a"}, "status": {"status": "online"}}),
            json!({"kind": "StorageNode", "metadata": {"name": "b"}, "status": {"status": "offline"}}),
        ]);
        let refusals = offline_nodes(&w, &Options::default()).expect_err("offline");
        assert_eq!(
            refusals
                .iter()
                .map(|r| r.object.as_str())
                .collect::<Vec<_>>(),
            ["StorageNode/b"]
        );
        assert_eq!(
            offline_nodes(
                &w,
                &Options {
                    acknowledge_offline_nodes: true
                }
            ),
            Ok(())
        );
    }

    #[test]
    fn a_drain_in_progress_refuses_and_a_finished_one_does_not() {
        let set = |phase: &str| {
            json!({"kind": "StorageNodeSet", "metadata": {"name": "s"},
            "status": {"drainCoordination": [{"hostname": "w1", "phase": phase, "startedAt": "2026-01-01T00:00:00Z"}]}})
        };
        assert!(node_set_drains(&world(vec![set("draining")])).is_err());
        assert_eq!(node_set_drains(&world(vec![set("complete")])), Ok(()));
    }

    #[test]
    fn names_longer_than_a_label_value_are_refused() {
        let long = "n".repeat(64);
        let w = world(vec![
            json!({"kind": "StorageNode", "metadata": {"name": long}}),
            json!({"kind": "StorageNode", "metadata": {"name": "n".repeat(63)}}),
        ]);
        let refusals = name_lengths(&w).expect_err("too long");
        assert_eq!(refusals.len(), 1);
        assert_eq!(refusals[0].object, format!("StorageNode/{long}"));
    }

    #[test]
    fn a_pool_as_the_go_operator_stored_it_round_trips() {
        let pool = json!({"apiVersion": SPOKE, "kind": "StoragePool",
            "metadata": {"name": "p", "namespace": "sb", "uid": "u"},
            "spec": {"clusterName": "prod", "capacityLimit": "1Ti", "dhchap": true, "qos": {"rwIops": 100}},
            "status": {"uuid": "u-1"}});
        assert_eq!(round_trips(&world(vec![pool])), Ok(()));
    }

    #[test]
    fn a_node_whose_stamped_sizing_comes_back_in_a_block_stash_round_trips() {
        // The migration stamps `config.sizing` under its own key; the way back stashes the
        // hub's config as one block: another key, the same meaning.
        let node = json!({"apiVersion": SPOKE, "kind": "StorageNode",
            "metadata": {"name": "n", "annotations": {
                "storage.simplyblock.io/conversion-spec.config.sizing": "{\"vcpuCount\":8}"},
                "ownerReferences": [{"kind": "StorageCluster", "name": "prod", "controller": true}]},
            "spec": {"workerNode": "w1"}});
        assert_eq!(round_trips(&world(vec![node])), Ok(()));
    }

    #[test]
    fn a_legacy_handle_resolves_through_the_pool_of_its_cluster() {
        let cluster = "c0ffee00-0000-4000-8000-000000000001";
        let mut w = world(vec![
            json!({"kind": "StorageCluster", "metadata": {"name": "prod"}, "status": {"uuid": cluster}}),
            json!({"kind": "StoragePool", "metadata": {"name": "p"}, "spec": {"clusterName": "prod"}, "status": {"uuid": "pool-uuid"}}),
        ]);
        w.kubernetes.push(json!({"kind": "PersistentVolume", "metadata": {"name": "pv"},
            "spec": {"csi": {"driver": simplyblock_api::keys::CSI_DRIVER_NAME, "volumeHandle": format!("{cluster}:p:c0ffee00-0000-4000-8000-000000000002")}}}));
        assert_eq!(legacy_handles(&w), Ok(()));
        w.kubernetes[0]["spec"]["csi"]["volumeHandle"] = json!(format!(
            "{cluster}:gone:c0ffee00-0000-4000-8000-000000000002"
        ));
        assert!(legacy_handles(&w).is_err());
    }
}

//! StorageNodeOps: `storageNodeRef` is `nodeRef`; the action is recased (`HostMaintenance`,
//! the hub's alone, reads `restart`); `targetWorkerNode` and `newSsdPcie` are `migrate`,
//! `drain` is `remove`. The sub-phase is the step of the action's graph, by a table per
//! action; the hub's `Aborted` reads `Failed` at v1alpha1. The volume counters, migrated
//! and pending in v1alpha1, are migrated and total in the hub, and the Go operator omitted
//! a counter that was zero, so the hub is given the zero back and v1alpha1 omits it again.
//!
//! Stashed going up: `status.triggered` and a sub-phase the action's table does not know.
//! Stashed going down: `spec.abort`, `HostMaintenance`, the step's deadline and a step
//! v1alpha1 has no sub-phase for (or one the sub-phase names only together with others),
//! `Aborted`, `status.drain.devicesTotal`, `status.removal` and `status.observedGeneration`.

use kube::CustomResourceExt;
use serde_json::Value;
use simplyblock_api::{StorageNodeOps, v1alpha1};

use crate::{Kind, Mapping, Rule, SPOKE, path};

pub const KIND: Kind = Kind {
    kind: "StorageNodeOps",
    rules: &[
        // The derived counters come first: going down, they take a counter the v1alpha1
        // object omits before the counters' own rules see it.
        Rule::with(
            "",
            "status.drain.volumesTotal",
            Mapping::Derived(omitted_total),
        ),
        Rule::with(
            "",
            "status.drain.volumesMigrated",
            Mapping::Derived(omitted_migrated),
        ),
        Rule::with(
            "status.volumesMigrated",
            "status.drain.volumesMigrated",
            Mapping::Code {
                up: |value, _| value.as_i64().map(Value::from),
                down: migrated_down,
            },
        ),
        Rule::with(
            "status.volumesPending",
            "status.drain.volumesTotal",
            Mapping::Code {
                up: pending_up,
                down: pending_down,
            },
        ),
        Rule::same("spec.storageNodeRef", "spec.nodeRef"),
        Rule::with("spec.action", "spec.action", Mapping::Enum(ACTIONS)),
        Rule::same("spec.targetWorkerNode", "spec.migrate.targetWorkerNode"),
        Rule::same("spec.newSsdPcie", "spec.migrate.newSsdPcie"),
        Rule::same(
            "spec.drain.systemVolumeFilterRegex",
            "spec.remove.systemVolumeFilterRegex",
        ),
        Rule::with(
            "status.phase",
            "status.phase",
            Mapping::Code {
                up: |value, _| Some(value.clone()),
                down: |value, _| match value.as_str()? {
                    "Aborted" => Some(Value::from("Failed")),
                    _ => Some(value.clone()),
                },
            },
        ),
        Rule::with(
            "status.subPhase",
            "status.step.state",
            Mapping::Code {
                up: sub_phase_up,
                down: sub_phase_down,
            },
        ),
    ],
    v1alpha1: v1alpha1::StorageNodeOps::crd,
    hub: StorageNodeOps::crd,
};

/// The actions; `HostMaintenance`, which v1alpha1 cannot say, reads as `restart` (the node
/// goes down and comes back) and the engine stashes the hub's spelling beside it.
const ACTIONS: &[(&str, &str)] = &[
    ("shutdown", "Shutdown"),
    ("restart", "Restart"),
    ("restart", "HostMaintenance"),
    ("suspend", "Suspend"),
    ("resume", "Resume"),
    ("remove", "Remove"),
    ("migrate", "Migrate"),
];

/// (action, sub-phase, step): the step a v1alpha1 sub-phase resumes at.
const SUB_PHASES: &[(&str, &str, &str)] = &[
    ("remove", "Validating", "Validating"),
    ("remove", "Suspending", "ShuttingDown"),
    ("remove", "Migrating", "MigratingVolumes"),
    ("remove", "Verifying", "Verifying"),
    ("remove", "Removing", "Removing"),
    ("migrate", "Preparing", "Preparing"),
    ("migrate", "Restarting", "AwaitingNode"),
    ("migrate", "Promoting", "Promoting"),
];

/// (action, step, sub-phase): the sub-phase a step reads as; the hub has more steps than
/// v1alpha1 has sub-phases, and a step that is not the one its sub-phase resumes at is
/// stashed by the engine beside it.
const STEPS: &[(&str, &str, &str)] = &[
    ("remove", "Validating", "Validating"),
    ("remove", "ShuttingDown", "Suspending"),
    ("remove", "MigratingDevices", "Suspending"),
    ("remove", "MigratingVolumes", "Migrating"),
    ("remove", "Verifying", "Verifying"),
    ("remove", "Removing", "Removing"),
    ("remove", "AwaitingRemoval", "Removing"),
    ("migrate", "Preparing", "Preparing"),
    ("migrate", "Relocating", "Restarting"),
    ("migrate", "AwaitingNode", "Restarting"),
    ("migrate", "Promoting", "Promoting"),
];

fn sub_phase_up(value: &Value, object: &Value) -> Option<Value> {
    let (action, sub) = (action_of(object), value.as_str()?);
    SUB_PHASES
        .iter()
        .find(|(a, s, _)| *a == action && *s == sub)
        .map(|(_, _, step)| Value::from(*step))
}

fn sub_phase_down(value: &Value, object: &Value) -> Option<Value> {
    let (action, step) = (action_of(object), value.as_str()?);
    STEPS
        .iter()
        .find(|(a, s, _)| *a == action && *s == step)
        .map(|(_, _, sub)| Value::from(*sub))
}

/// The object's action in lower case, whichever version the object is at.
fn action_of(object: &Value) -> String {
    path::get(object, "spec.action")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_ascii_lowercase()
}

fn is_spoke(object: &Value) -> bool {
    object.get("apiVersion").and_then(Value::as_str) == Some(SPOKE)
}

fn int(object: &Value, at: &str) -> Option<i64> {
    path::get(object, at).and_then(Value::as_i64)
}

/// The migrated count the hub holds (or, for a v1alpha1 object, will hold), zero if none.
fn migrated(object: &Value) -> i64 {
    let at = if is_spoke(object) {
        "status.volumesMigrated"
    } else {
        "status.drain.volumesMigrated"
    };
    int(object, at).unwrap_or(0)
}

/// The hub total of a v1alpha1 object, if it has one.
fn spoke_total(object: &Value) -> Option<i64> {
    let pending = int(object, "status.volumesPending");
    match (pending, int(object, "status.volumesMigrated")) {
        (Some(pending), migrated) => Some(pending + migrated.unwrap_or(0)),
        (None, Some(migrated)) if migrated != 0 => Some(migrated),
        _ => None,
    }
}

/// Up: a v1alpha1 object that omitted its (zero) pending count still has a total. Down: a
/// total equal to a non-zero migrated count is what v1alpha1 writes as no pending count.
fn omitted_total(object: &Value) -> Option<Value> {
    if is_spoke(object) {
        if int(object, "status.volumesPending").is_some() {
            return None;
        }
        int(object, "status.volumesMigrated")
            .filter(|m| *m != 0)
            .map(Value::from)
    } else {
        int(object, "status.drain.volumesMigrated")
            .filter(|m| *m != 0)
            .map(Value::from)
    }
}

/// Up: a v1alpha1 object that omitted its (zero) migrated count beside a pending one has
/// migrated none. Down: a zero migrated count beside a non-zero total is omitted.
fn omitted_migrated(object: &Value) -> Option<Value> {
    let present = if is_spoke(object) {
        int(object, "status.volumesMigrated").is_none()
            && int(object, "status.volumesPending").is_some_and(|p| p != 0)
    } else {
        int(object, "status.drain.volumesTotal").is_some_and(|t| t != 0)
    };
    present.then(|| Value::from(0))
}

/// Down, the migrated count; checked against a v1alpha1 object, a zero the way down would
/// omit (see [`omitted_migrated`]) does not come back, so the engine stashes it.
fn migrated_down(value: &Value, object: &Value) -> Option<Value> {
    let m = value.as_i64()?;
    if is_spoke(object) && m == 0 && spoke_total(object).is_some_and(|t| t != 0) {
        return None;
    }
    Some(Value::from(m))
}

/// Up, the total: pending plus migrated.
fn pending_up(value: &Value, object: &Value) -> Option<Value> {
    Some(Value::from(value.as_i64()?.checked_add(migrated(object))?))
}

/// Down, the pending count: total less migrated; checked against a v1alpha1 object, a zero
/// the way down would omit (see [`omitted_total`]) does not come back, so the engine stashes
/// it.
fn pending_down(value: &Value, object: &Value) -> Option<Value> {
    let total = value.as_i64()?;
    let m = migrated(object);
    if is_spoke(object) && total == m && m != 0 {
        return None;
    }
    Some(Value::from(total.checked_sub(m)?))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{HUB, SPOKE, convert};

    /// A drain as the Go operator left it mid-way: nothing migrated yet, so no
    /// `volumesMigrated` (Go omitted zeros).
    fn go_drain() -> Value {
        json!({
            "apiVersion": SPOKE,
            "kind": "StorageNodeOps",
            "metadata": {"name": "drain-a", "namespace": "simplyblock"},
            "spec": {
                "storageNodeRef": "set-a-0",
                "action": "remove",
                "drain": {"systemVolumeFilterRegex": "^sb-fio-baseline-.*"}
            },
            "status": {
                "phase": "Running",
                "subPhase": "Suspending",
                "volumesPending": 12,
                "triggered": true,
                "startedAt": "2026-01-02T03:04:05Z"
            }
        })
    }

    #[test]
    fn a_go_drain_goes_up_with_both_counters_and_its_step() {
        let hub = convert(&go_drain(), HUB);
        assert_eq!(
            hub["spec"],
            json!({
                "nodeRef": "set-a-0",
                "action": "Remove",
                "remove": {"systemVolumeFilterRegex": "^sb-fio-baseline-.*"}
            })
        );
        assert_eq!(
            hub["status"],
            json!({
                "phase": "Running",
                "step": {"state": "ShuttingDown"},
                "drain": {"volumesTotal": 12, "volumesMigrated": 0},
                "startedAt": "2026-01-02T03:04:05Z"
            })
        );
        assert_eq!(
            hub["metadata"]["annotations"],
            json!({"storage.simplyblock.io/v1alpha1-status.triggered": "true"})
        );
        assert_eq!(convert(&hub, SPOKE), go_drain());
    }

    #[test]
    fn a_hub_migration_reads_as_the_go_spelling_and_comes_back_whole() {
        let hub = json!({
            "apiVersion": HUB,
            "kind": "StorageNodeOps",
            "metadata": {"name": "move-a", "namespace": "simplyblock"},
            "spec": {
                "nodeRef": "set-a-0",
                "action": "Migrate",
                "abort": true,
                "migrate": {"targetWorkerNode": "worker-2", "newSsdPcie": ["0000:01:00.0"]}
            },
            "status": {
                "phase": "Aborted",
                "step": {"state": "Relocating", "deadline": "2026-01-02T03:34:05Z"},
                "message": "aborted"
            }
        });
        let down = convert(&hub, SPOKE);
        assert_eq!(
            down["spec"],
            json!({
                "storageNodeRef": "set-a-0",
                "action": "migrate",
                "targetWorkerNode": "worker-2",
                "newSsdPcie": ["0000:01:00.0"]
            })
        );
        assert_eq!(
            down["status"],
            json!({"phase": "Failed", "subPhase": "Restarting", "message": "aborted"})
        );
        assert_eq!(
            down["metadata"]["annotations"],
            json!({
                "storage.simplyblock.io/conversion-spec.abort": "true",
                "storage.simplyblock.io/conversion-status.phase": "\"Aborted\"",
                "storage.simplyblock.io/conversion-status.step": "{\"deadline\":\"2026-01-02T03:34:05Z\"}",
                "storage.simplyblock.io/conversion-status.step.state": "\"Relocating\""
            })
        );
        assert_eq!(convert(&down, HUB), hub);
    }

    #[test]
    fn host_maintenance_reads_as_a_restart_and_comes_back() {
        let hub = json!({
            "apiVersion": HUB,
            "kind": "StorageNodeOps",
            "metadata": {"name": "maint-a", "namespace": "simplyblock"},
            "spec": {"nodeRef": "set-a-0", "action": "HostMaintenance"},
            "status": {"phase": "Running", "step": {"state": "Holding"}}
        });
        let down = convert(&hub, SPOKE);
        assert_eq!(down["spec"]["action"], json!("restart"));
        assert_eq!(down["status"], json!({"phase": "Running"}));
        assert_eq!(
            down["metadata"]["annotations"],
            json!({
                "storage.simplyblock.io/conversion-spec.action": "\"HostMaintenance\"",
                "storage.simplyblock.io/conversion-status.step.state": "\"Holding\""
            })
        );
        assert_eq!(convert(&down, HUB), hub);
    }

    #[test]
    fn a_finished_drain_keeps_its_counters_through_the_hub() {
        let mut done = go_drain();
        done["status"] = json!({"phase": "Succeeded", "volumesMigrated": 12});
        let hub = convert(&done, HUB);
        assert_eq!(
            hub["status"]["drain"],
            json!({"volumesTotal": 12, "volumesMigrated": 12})
        );
        assert_eq!(convert(&hub, SPOKE), done);
    }
}

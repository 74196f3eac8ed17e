//! StorageClusterOps: the actions are PascalCase in the hub (`node-rolling-restart` is
//! `RollingRestart`), `nodeRollingRestart` is `rollingRestart`, and the rolling restart's
//! progress, pending and processed lists in v1alpha1, is one ordered list and an index in the
//! hub. Its step on the current node, `nodePhase` in v1alpha1, is the hub's `status.step`
//! of a RollingRestart, derived from it and carried down inside the progress block; the
//! other actions' steps v1alpha1 cannot say. `Aborted` reads as `Failed` in v1alpha1;
//! CancelTask, `abort`, `observedGeneration` and the step's deadline are stashed going down,
//! `triggered` going up, and `phaseTriggered` with the progress block it belongs to.

use kube::CustomResourceExt;
use serde_json::{Value, json};
use simplyblock_api::{StorageClusterOps, v1alpha1};

use crate::{Kind, Mapping, Rule, SPOKE, path};

/// The actions, (v1alpha1, hub). The hub's CancelTask has no v1alpha1 spelling.
const ACTIONS: &[(&str, &str)] = &[
    ("activate", "Activate"),
    ("expand", "Expand"),
    ("shutdown", "Shutdown"),
    ("start", "Start"),
    ("restart", "Restart"),
    ("node-rolling-restart", "RollingRestart"),
];

/// A rolling restart's step on the current node, (v1alpha1 `nodePhase`, hub step).
const NODE_PHASES: &[(&str, &str)] = &[
    ("snode-refresh", "RefreshingPod"),
    ("snode-refresh-wait", "AwaitingPod"),
    ("shutting-down", "ShuttingDownNode"),
    ("restarting", "RestartingNode"),
    ("rebalancing", "Rebalancing"),
];

/// The hub's step before the shutdown of each node: v1alpha1 called it shutting down too.
const CHECKING_PEERS: (&str, &str) = ("shutting-down", "CheckingPeers");

fn action_up(value: &Value, _: &Value) -> Option<Value> {
    let text = value.as_str()?;
    let hub = ACTIONS
        .iter()
        .find(|(v1, _)| *v1 == text)
        .map_or(text, |(_, hub)| hub);
    Some(Value::from(hub))
}

/// CancelTask has no v1alpha1 spelling: it goes to the stash rather than into a value the
/// v1alpha1 schema refuses.
fn action_down(value: &Value, _: &Value) -> Option<Value> {
    let text = value.as_str()?;
    match ACTIONS.iter().find(|(_, hub)| *hub == text) {
        Some((v1, _)) => Some(Value::from(*v1)),
        None if text == "CancelTask" => None,
        None => Some(Value::from(text)),
    }
}

/// Whether the object, at either version, is a rolling restart.
fn rolling(object: &Value) -> bool {
    matches!(
        path::get(object, "spec.action").and_then(Value::as_str),
        Some("node-rolling-restart" | "RollingRestart")
    )
}

/// A rolling restart's `nodePhase` as its hub step; the other actions have none.
fn node_phase_up(value: &Value, object: &Value) -> Option<Value> {
    let text = value.as_str()?;
    if !rolling(object) {
        return None;
    }
    NODE_PHASES
        .iter()
        .find(|(v1, _)| *v1 == text)
        .map(|(_, hub)| Value::from(*hub))
}

/// A rolling restart's hub step as its `nodePhase`.
fn node_phase_down(value: &Value, object: &Value) -> Option<Value> {
    let text = value.as_str()?;
    if !rolling(object) {
        return None;
    }
    NODE_PHASES
        .iter()
        .chain([&CHECKING_PEERS])
        .find(|(_, hub)| *hub == text)
        .map(|(v1, _)| Value::from(*v1))
}

fn is_v1alpha1(object: &Value) -> bool {
    object.get("apiVersion").and_then(Value::as_str) == Some(SPOKE)
}

const NODE_PHASE: &str = "status.nodeRollingRestartStatus.nodePhase";

/// The `nodePhase` of the progress block: the hub object's step, said as a `nodePhase`; of a
/// v1alpha1 object (when checking a conversion back), the one it says, if the hub can say
/// it as a step. One the hub cannot say makes the block differ, so the block is stashed.
fn node_phase(object: &Value) -> Option<Value> {
    if is_v1alpha1(object) {
        let phase = path::get(object, NODE_PHASE)?;
        node_phase_up(phase, object).map(|_| phase.clone())
    } else {
        node_phase_down(path::get(object, "status.step.state")?, object)
    }
}

/// The hub's step, derived from `nodePhase`. Of a hub object: its step when the way down
/// and up again derives it once more, so it need not be stashed; that needs a progress
/// block to carry `nodePhase` down.
fn step(object: &Value) -> Option<Value> {
    if is_v1alpha1(object) {
        return node_phase_up(path::get(object, NODE_PHASE)?, object);
    }
    path::get(object, "status.rollingRestart")?;
    let state = path::get(object, "status.step.state")?;
    node_phase_down(state, object)
        .and_then(|phase| node_phase_up(&phase, object))
        .filter(|again| again == state)
}

fn strings(value: Option<&Value>) -> Vec<Value> {
    value.and_then(Value::as_array).cloned().unwrap_or_default()
}

/// Up: the processed nodes, then the pending ones; the index is where processing stands.
/// A block with neither nodes nor a `nodePhase` the hub can say has no hub progress, and is
/// stashed whole, as is one that says more (`phaseTriggered`, a `nodePhase` of another
/// action): such a stash goes back down only while the hub's progress is unchanged.
fn progress_up(value: &Value, object: &Value) -> Option<Value> {
    let processed = strings(value.get("processedNodes"));
    let index = i32::try_from(processed.len()).ok()?;
    let mut nodes = processed;
    nodes.extend(strings(value.get("pendingNodes")));
    if nodes.is_empty() {
        let phase = value.get("nodePhase")?;
        node_phase_up(phase, object)?;
        return Some(json!({"nodeIndex": 0}));
    }
    Some(json!({"nodes": nodes, "nodeIndex": index}))
}

/// Down: the list split at the index (clamped to the list), and the step as `nodePhase`.
fn progress_down(value: &Value, object: &Value) -> Option<Value> {
    let nodes = strings(value.get("nodes"));
    let index = value
        .get("nodeIndex")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        .clamp(0, nodes.len() as i64) as usize;
    let mut block = serde_json::Map::new();
    if index > 0 {
        block.insert(
            "processedNodes".into(),
            Value::Array(nodes[..index].to_vec()),
        );
    }
    if index < nodes.len() {
        block.insert("pendingNodes".into(), Value::Array(nodes[index..].to_vec()));
    }
    if let Some(phase) = node_phase(object) {
        block.insert("nodePhase".into(), phase);
    }
    (!block.is_empty()).then_some(Value::Object(block))
}

pub const KIND: Kind = Kind {
    kind: "StorageClusterOps",
    rules: &[
        Rule::with(
            "spec.action",
            "spec.action",
            Mapping::Code {
                up: action_up,
                down: action_down,
            },
        ),
        Rule::same("spec.nodeRollingRestart", "spec.rollingRestart"),
        // v1alpha1 has no Aborted: it reads as Failed, and Failed stays Failed going up.
        Rule::with(
            "status.phase",
            "status.phase",
            Mapping::Enum(&[("Failed", "Failed"), ("Failed", "Aborted")]),
        ),
        Rule::with(
            "status.nodeRollingRestartStatus",
            "status.rollingRestart",
            Mapping::Code {
                up: progress_up,
                down: progress_down,
            },
        ),
        Rule::with("", "status.step.state", Mapping::Derived(step)),
    ],
    v1alpha1: v1alpha1::StorageClusterOps::crd,
    hub: StorageClusterOps::crd,
};

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::{HUB, SPOKE, convert};

    /// A rolling restart the Go operator left half done: two nodes restarted, the third
    /// restarting.
    fn rolling_restart() -> serde_json::Value {
        json!({
            "apiVersion": SPOKE,
            "kind": "StorageClusterOps",
            "metadata": {"name": "roll", "namespace": "simplyblock"},
            "spec": {
                "clusterRef": "simplyblock-cluster",
                "action": "node-rolling-restart",
                "nodeRollingRestart": {"refreshSNodeAPI": true}
            },
            "status": {
                "phase": "Running",
                "triggered": true,
                "message": "restarting node n3",
                "startedAt": "2026-01-02T03:04:05Z",
                "nodeRollingRestartStatus": {
                    "processedNodes": ["n1", "n2"],
                    "pendingNodes": ["n3"],
                    "nodePhase": "restarting",
                    "phaseTriggered": true
                }
            }
        })
    }

    #[test]
    fn a_rolling_restart_goes_up_as_one_node_list_and_its_step() {
        let hub = convert(&rolling_restart(), HUB);
        assert_eq!(
            hub,
            json!({
                "apiVersion": HUB,
                "kind": "StorageClusterOps",
                "metadata": {
                    "name": "roll",
                    "namespace": "simplyblock",
                    "annotations": {
                        "storage.simplyblock.io/v1alpha1-status.triggered": "true",
                        "storage.simplyblock.io/v1alpha1-status.nodeRollingRestartStatus":
                            r#"{"nodePhase":"restarting","pendingNodes":["n3"],"phaseTriggered":true,"processedNodes":["n1","n2"]}"#
                    }
                },
                "spec": {
                    "clusterRef": "simplyblock-cluster",
                    "action": "RollingRestart",
                    "rollingRestart": {"refreshSNodeAPI": true}
                },
                "status": {
                    "phase": "Running",
                    "message": "restarting node n3",
                    "startedAt": "2026-01-02T03:04:05Z",
                    "step": {"state": "RestartingNode"},
                    "rollingRestart": {"nodes": ["n1", "n2", "n3"], "nodeIndex": 2}
                }
            })
        );
        assert_eq!(convert(&hub, SPOKE), rolling_restart());
    }

    #[test]
    fn progress_made_in_the_hub_drops_the_stale_phase_triggered() {
        let mut hub = convert(&rolling_restart(), HUB);
        hub["status"]["rollingRestart"]["nodeIndex"] = json!(3);
        hub["status"]["step"] = json!({"state": "CheckingPeers"});
        let down = convert(&hub, SPOKE);
        assert_eq!(
            down["status"]["nodeRollingRestartStatus"],
            json!({"processedNodes": ["n1", "n2", "n3"], "nodePhase": "shutting-down"})
        );
        assert_eq!(down["status"]["triggered"], json!(true));
        // CheckingPeers reads as shutting-down, which goes up as ShuttingDownNode: stashed.
        assert_eq!(
            down["metadata"]["annotations"],
            json!({
                "storage.simplyblock.io/conversion-status.step": r#"{"state":"CheckingPeers"}"#
            })
        );
        assert_eq!(
            convert(&down, HUB)["status"]["step"],
            json!({"state": "CheckingPeers"})
        );
    }

    #[test]
    fn an_aborted_cancel_task_reads_as_failed_and_comes_back_whole() {
        let hub = json!({
            "apiVersion": HUB,
            "kind": "StorageClusterOps",
            "metadata": {"name": "cancel", "namespace": "simplyblock"},
            "spec": {
                "clusterRef": "simplyblock-cluster",
                "action": "CancelTask",
                "abort": true,
                "cancelTask": {"taskID": "t-1"}
            },
            "status": {
                "phase": "Aborted",
                "step": {"state": "Requesting", "deadline": "2026-01-02T03:06:05Z"},
                "observedGeneration": 2
            }
        });
        let down = convert(&hub, SPOKE);
        assert_eq!(
            down,
            json!({
                "apiVersion": SPOKE,
                "kind": "StorageClusterOps",
                "metadata": {
                    "name": "cancel",
                    "namespace": "simplyblock",
                    "annotations": {
                        "storage.simplyblock.io/conversion-spec.abort": "true",
                        "storage.simplyblock.io/conversion-spec.action": r#""CancelTask""#,
                        "storage.simplyblock.io/conversion-spec.cancelTask": r#"{"taskID":"t-1"}"#,
                        "storage.simplyblock.io/conversion-status.observedGeneration": "2",
                        "storage.simplyblock.io/conversion-status.phase": r#""Aborted""#,
                        "storage.simplyblock.io/conversion-status.step":
                            r#"{"deadline":"2026-01-02T03:06:05Z","state":"Requesting"}"#
                    }
                },
                "spec": {"clusterRef": "simplyblock-cluster"},
                "status": {"phase": "Failed"}
            })
        );
        assert_eq!(convert(&down, HUB), hub);
    }
}

//! StorageDeviceOps (`sdops`): one audited operation on one StorageDevice.
//!
//! Restart and Fail run. SelfTest, Replace and Migrate are declared with their graphs (so
//! the step names, the abort table and the DELETE guard already cover them) but are not in
//! the CRD's action enum: the control plane's v2 API has no call for any of them, and an
//! operation that reaches the controller with one ends Failed saying so.

use std::borrow::Cow;
use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use simplyblock_statemachine::{Action, GraphDef, MultiGraph, StateDef, StepSnapshot, state_enum};

use crate::common::OpsPhase;

/// One operation on one StorageDevice. Only `spec.abort` may change after creation;
/// operations on one device run one at a time, in creation order.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "StorageDeviceOps",
    plural = "storagedeviceops",
    namespaced,
    status = "StorageDeviceOpsStatus",
    shortname = "sdops",
    category = "simplyblock",
    doc = "One operation on a StorageDevice (restart it, or fail it out of the cluster for good), kept as an audit record once it has finished.",
    printcolumn(name = "Device", type_ = "string", json_path = ".spec.deviceRef"),
    printcolumn(name = "Action", type_ = "string", json_path = ".spec.action"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Step", type_ = "string", json_path = ".status.step.state"),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.message",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    selectable = ".spec.deviceRef"
)]
#[serde(rename_all = "camelCase")]
pub struct StorageDeviceOpsSpec {
    /// The StorageDevice, in this namespace, the operation acts on. Immutable. Selectable:
    /// `kubectl get sdops --field-selector spec.deviceRef=<device>`.
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.deviceRef is immutable: an operation acts on one device; create another operation for another device"
    ))]
    pub device_ref: String,

    /// The operation: Restart (bring a removed or failed device back online) or Fail
    /// (take the device out of the data path and mark it failed, for good). Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.action is immutable: an operation performs one action; create another operation for another action"
    ))]
    pub action: DeviceAction,

    /// Ask a running operation to stop. Honoured on the steps the action's graph declares
    /// abortable (before the control plane was asked anything); elsewhere the operation
    /// keeps running and says so in status.message.
    #[serde(default)]
    pub abort: bool,
}

/// The operations on a device. Only [`DeviceAction::RUNNABLE`] are in the CRD's enum.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviceAction {
    /// Restart a removed or failed device: the control plane rebuilds its stack and it
    /// comes back online.
    Restart,
    /// Remove the device from the data path, then mark it failed: its data is rebuilt
    /// elsewhere and the device is not used again.
    Fail,
    /// Run the drive's self-test. Declared only: the control plane has no call for it.
    SelfTest,
    /// Swap the drive for a new one. Declared only: the control plane has no call for it.
    Replace,
    /// Move the drive with its contents to another node. Declared only: the control plane
    /// has no call for it.
    Migrate,
}

impl DeviceAction {
    /// Every action, with a graph each.
    pub const ALL: &'static [DeviceAction] = &[
        DeviceAction::Restart,
        DeviceAction::Fail,
        DeviceAction::SelfTest,
        DeviceAction::Replace,
        DeviceAction::Migrate,
    ];

    /// The actions this operator runs: the CRD's enum.
    pub const RUNNABLE: &'static [DeviceAction] = &[DeviceAction::Restart, DeviceAction::Fail];

    /// Why an action cannot run, or `None` when it can.
    pub fn unavailable(self) -> Option<String> {
        let missing = match self {
            DeviceAction::Restart | DeviceAction::Fail => return None,
            DeviceAction::SelfTest => "a device self-test",
            DeviceAction::Replace => "adopting a replacement device",
            DeviceAction::Migrate => "detaching a device and adopting it on another node",
        };
        Some(format!(
            "action {} cannot run: the control plane's v2 API has no call for {missing}; nothing was done, and this record can be deleted",
            self.name()
        ))
    }
}

impl Action for DeviceAction {
    fn name(self) -> &'static str {
        match self {
            DeviceAction::Restart => "Restart",
            DeviceAction::Fail => "Fail",
            DeviceAction::SelfTest => "SelfTest",
            DeviceAction::Replace => "Replace",
            DeviceAction::Migrate => "Migrate",
        }
    }
}

impl JsonSchema for DeviceAction {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "DeviceAction".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let names: Vec<&str> = DeviceAction::RUNNABLE.iter().map(|a| a.name()).collect();
        json_schema!({"type": "string", "enum": names})
    }
}

state_enum! {
    /// Every step of every StorageDeviceOps action, the declared-only ones included.
    pub enum DeviceOpsStep {
        Requesting,
        Awaiting,
        Removing,
        Failing,
        Validating,
        AwaitingDevice,
        Adding,
        Rebuilding,
        Detaching,
        AwaitingMove,
        Attaching,
    }
}

const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;

/// The restart call (abortable until it is issued), then the wait for the device online.
const RESTART: GraphDef<'static, DeviceOpsStep> = GraphDef::new(
    DeviceOpsStep::Requesting,
    &[
        StateDef::new(DeviceOpsStep::Requesting)
            .to(&[DeviceOpsStep::Awaiting])
            .abortable()
            .deadline(Duration::from_secs(5 * MINUTE)),
        StateDef::new(DeviceOpsStep::Awaiting).deadline(Duration::from_secs(30 * MINUTE)),
    ],
);

/// Out of the data path (abortable: a removed device can be restarted), then failed for
/// good, then the wait for the control plane to report it failed.
const FAIL: GraphDef<'static, DeviceOpsStep> = GraphDef::new(
    DeviceOpsStep::Removing,
    &[
        StateDef::new(DeviceOpsStep::Removing)
            .to(&[DeviceOpsStep::Failing])
            .abortable()
            .deadline(Duration::from_secs(10 * MINUTE)),
        StateDef::new(DeviceOpsStep::Failing)
            .to(&[DeviceOpsStep::Awaiting])
            .deadline(Duration::from_secs(10 * MINUTE)),
        StateDef::new(DeviceOpsStep::Awaiting).deadline(Duration::from_secs(30 * MINUTE)),
    ],
);

/// Declared only: the redundancy check, the self-test call and its result.
const SELF_TEST: GraphDef<'static, DeviceOpsStep> = GraphDef::new(
    DeviceOpsStep::Validating,
    &[
        StateDef::new(DeviceOpsStep::Validating)
            .to(&[DeviceOpsStep::Requesting])
            .abortable()
            .deadline(Duration::from_secs(10 * MINUTE)),
        StateDef::new(DeviceOpsStep::Requesting)
            .to(&[DeviceOpsStep::Awaiting])
            .deadline(Duration::from_secs(5 * MINUTE)),
        StateDef::new(DeviceOpsStep::Awaiting).deadline(Duration::from_secs(2 * HOUR)),
    ],
);

/// Declared only: the old drive out, a person swaps it (no deadline), the new one in and
/// rebuilt.
const REPLACE: GraphDef<'static, DeviceOpsStep> = GraphDef::new(
    DeviceOpsStep::Validating,
    &[
        StateDef::new(DeviceOpsStep::Validating)
            .to(&[DeviceOpsStep::Removing])
            .abortable()
            .deadline(Duration::from_secs(10 * MINUTE)),
        StateDef::new(DeviceOpsStep::Removing)
            .to(&[DeviceOpsStep::AwaitingDevice])
            .deadline(Duration::from_secs(10 * MINUTE)),
        StateDef::new(DeviceOpsStep::AwaitingDevice).to(&[DeviceOpsStep::Adding]),
        StateDef::new(DeviceOpsStep::Adding)
            .to(&[DeviceOpsStep::Rebuilding])
            .deadline(Duration::from_secs(30 * MINUTE)),
        StateDef::new(DeviceOpsStep::Rebuilding).deadline(Duration::from_secs(24 * HOUR)),
    ],
);

/// Declared only: detached, moved by a person (no deadline; abortable, which re-attaches
/// it where it was), attached on the target.
const MIGRATE: GraphDef<'static, DeviceOpsStep> = GraphDef::new(
    DeviceOpsStep::Validating,
    &[
        StateDef::new(DeviceOpsStep::Validating)
            .to(&[DeviceOpsStep::Detaching])
            .abortable()
            .deadline(Duration::from_secs(10 * MINUTE)),
        StateDef::new(DeviceOpsStep::Detaching)
            .to(&[DeviceOpsStep::AwaitingMove])
            .deadline(Duration::from_secs(30 * MINUTE)),
        StateDef::new(DeviceOpsStep::AwaitingMove)
            .to(&[DeviceOpsStep::Attaching])
            .abortable(),
        StateDef::new(DeviceOpsStep::Attaching).deadline(Duration::from_secs(30 * MINUTE)),
    ],
);

/// The step graphs of the actions that run: the CRD's step list and the controller's.
pub static GRAPHS: LazyLock<MultiGraph<DeviceAction, DeviceOpsStep>> = LazyLock::new(|| {
    MultiGraph::new(&[(DeviceAction::Restart, RESTART), (DeviceAction::Fail, FAIL)])
        .expect("the StorageDeviceOps graphs are valid")
});

crate::common::ops_kind!(StorageDeviceOps: DeviceAction, DeviceOpsStep, GRAPHS);

/// The step graphs of every action, the declared-only ones included: the DELETE guard's
/// table, so it already holds when one of them starts to run.
pub static DECLARED: LazyLock<MultiGraph<DeviceAction, DeviceOpsStep>> = LazyLock::new(|| {
    MultiGraph::new(&[
        (DeviceAction::Restart, RESTART),
        (DeviceAction::Fail, FAIL),
        (DeviceAction::SelfTest, SELF_TEST),
        (DeviceAction::Replace, REPLACE),
        (DeviceAction::Migrate, MIGRATE),
    ])
    .expect("the declared StorageDeviceOps graphs are valid")
});

fn step_schema(_: &mut SchemaGenerator) -> Schema {
    StepSnapshot::schema_for_steps(&GRAPHS.declared_state_names())
}

/// The progress of the operation.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageDeviceOpsStatus {
    /// Pending, Running, Succeeded, Failed or Aborted.
    #[serde(default)]
    pub phase: OpsPhase,
    /// The current step of the action's graph and its deadline.
    #[serde(default, skip_serializing_if = "StepSnapshot::is_empty")]
    #[schemars(schema_with = "step_schema")]
    pub step: StepSnapshot,
    /// Why the phase is what it is, in one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the operation took the device's lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it reached a terminal phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// Ready (True once the operation succeeded; Failed or Aborted are False with that
    /// reason) and Progressing (True while it runs). `kubectl wait --for=condition=Ready`
    /// waits for success.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The control plane's status of the device when the operation first looked, before
    /// it asked for anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_status_before: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use DeviceOpsStep::*;
    use simplyblock_statemachine::State;

    #[test]
    fn every_action_has_a_graph_and_only_restart_and_fail_run() {
        let mut declared = DECLARED.actions();
        declared.sort();
        assert_eq!(declared, DeviceAction::ALL.to_vec());
        assert_eq!(GRAPHS.actions(), DeviceAction::RUNNABLE.to_vec());
        for action in DeviceAction::ALL {
            assert_eq!(
                action.unavailable().is_none(),
                DeviceAction::RUNNABLE.contains(action),
                "{action:?}"
            );
        }
    }

    #[test]
    fn the_step_list_is_the_running_actions_steps() {
        assert_eq!(
            GRAPHS.declared_state_names(),
            vec!["Requesting", "Awaiting", "Removing", "Failing"]
        );
    }

    #[test]
    fn abortable_steps_are_exactly_the_reference_table() {
        let abortable = |a| {
            DECLARED
                .graph(a)
                .expect("graph")
                .abortable_states()
                .into_iter()
                .map(|s: DeviceOpsStep| s.name())
                .collect::<Vec<_>>()
        };
        assert_eq!(abortable(DeviceAction::Restart), vec!["Requesting"]);
        assert_eq!(abortable(DeviceAction::Fail), vec!["Removing"]);
        assert_eq!(abortable(DeviceAction::SelfTest), vec!["Validating"]);
        assert_eq!(abortable(DeviceAction::Replace), vec!["Validating"]);
        assert_eq!(
            abortable(DeviceAction::Migrate),
            vec!["Validating", "AwaitingMove"]
        );
    }

    #[test]
    fn waits_on_a_person_have_no_deadline() {
        let replace = DECLARED.graph(DeviceAction::Replace).expect("graph");
        assert_eq!(replace.deadline(AwaitingDevice), None);
        let migrate = DECLARED.graph(DeviceAction::Migrate).expect("graph");
        assert_eq!(migrate.deadline(AwaitingMove), None);
        assert!(migrate.deadline(Attaching).is_some());
    }

    #[test]
    fn the_schema_enum_is_the_runnable_actions() {
        let crd = serde_json::to_value(<StorageDeviceOps as kube::CustomResourceExt>::crd())
            .expect("crd");
        let action = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["action"];
        assert_eq!(action["enum"], serde_json::json!(["Restart", "Fail"]));
        // A stored or future object naming a declared action still reads, so the
        // controller can end it with the reason.
        let op: DeviceAction = serde_json::from_str("\"Replace\"").expect("reads");
        assert_eq!(op, DeviceAction::Replace);
    }
}

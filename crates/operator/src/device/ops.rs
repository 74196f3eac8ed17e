//! The StorageDeviceOps controller on the shared [`crate::runtime::ops`] runtime: the lock is
//! `StorageDevice.status.activeOpsRef`; each step is a predicate over the control plane's
//! view of the device and at most one call.
//!
//! | action | step | call, skipped when | done when |
//! |---|---|---|---|
//! | Restart | Requesting | restart; the device is online (only a removed or failed one can be restarted) | — |
//! | Restart | Awaiting | — | online |
//! | Fail | Removing | remove; already out of the data path (a failed device is refused) | removed |
//! | Fail | Failing | fail; already failed (a device back in service is refused) | failed |
//! | Fail | Awaiting | — | failed |
//!
//! Fail is never forced and does not wait for redundancy: when other devices of the
//! cluster are already out of service it raises `InsufficientRedundancy` and goes on.
//! Before the first call, the device's status is recorded in `status.deviceStatusBefore`.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use serde::Serialize;
use simplyblock_api::StorageDevice;
use simplyblock_api::keys::CLUSTER_LABEL;
use simplyblock_api::storage_device::DevicePhase;
use simplyblock_api::storage_device_ops::{DeviceAction, DeviceOpsStep, StorageDeviceOps};
use simplyblock_controlplane::{Device, DeviceStatus, Uuid};
use simplyblock_statemachine::{Action as _, Machine};

use crate::runtime::context::Context;
use crate::runtime::ops::{self, Move, Note, Noted, OpsResource, Plan, Steps};

pub const FINALIZER: &str = "storage.simplyblock.io/storagedeviceops-finalizer";
const MANAGER: &str = "storagedeviceops-controller";
/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "storagedeviceops";
const METRIC_PREFIX: &str = "simplyblock_storagedevice_";
/// How often an awaited step looks at the control plane.
const AWAIT_POLL: Duration = Duration::from_secs(1);

/// StorageDeviceOps' own status fields, beside the common ones.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fields {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_status_before: Option<String>,
}

impl OpsResource for StorageDeviceOps {
    type Target = StorageDevice;
    const FINALIZER: &'static str = FINALIZER;
    const MANAGER: &'static str = MANAGER;
    const METRIC_PREFIX: &'static str = METRIC_PREFIX;
    const TARGET_LABEL: &'static str = "device";

    fn target_name(&self) -> &str {
        &self.spec.device_ref
    }
    fn action_name(&self) -> &'static str {
        self.spec.action.name()
    }
    type Fields = Fields;
    fn kind_status(&self) -> Fields {
        Fields {
            device_status_before: self
                .status
                .as_ref()
                .and_then(|s| s.device_status_before.clone()),
        }
    }
    fn lock_holder(target: &StorageDevice) -> Option<&str> {
        target.status.as_ref()?.active_ops_ref.as_deref()
    }
}

/// What the steps read.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The control plane's ids of the cluster, the node and the device, from the
    /// StorageDevice; `None` until the mirror has reported it.
    pub ids: Option<(Uuid, Uuid, Uuid)>,
    /// The control plane's view of the device; `None` when it does not know it.
    pub found: Option<Device>,
    /// Other StorageDevices of the same cluster that are out of service (Fail reads it).
    pub others_out: Vec<String>,
}

/// The one side effect a step may issue.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    Restart(Uuid, Uuid, Uuid),
    Remove(Uuid, Uuid, Uuid),
    Fail(Uuid, Uuid, Uuid),
}

/// The steps of every action (the runtime restores the machine from the kind's graphs).
#[derive(Clone, Copy, Default)]
pub struct DeviceSteps;

impl Steps<StorageDeviceOps> for DeviceSteps {
    type Obs = Observed;
    type Call = Call;

    async fn observe(
        &self,
        op: &StorageDeviceOps,
        target: &StorageDevice,
        machine: &Machine<'static, DeviceOpsStep>,
        ctx: &Context,
    ) -> Result<Observed, ops::Error> {
        let mut obs = Observed::default();
        let uuid = |s: Option<&String>| s.and_then(|u| u.parse::<Uuid>().ok());
        let status = target.status.clone().unwrap_or_default();
        let (Some(cluster), Some(node), Some(device)) = (
            uuid(status.cluster_id.as_ref()),
            uuid(status.node_id.as_ref()),
            uuid(Some(&target.spec.device_id)),
        ) else {
            return Ok(obs);
        };
        obs.ids = Some((cluster, node, device));
        obs.found = match ctx.control_plane()?.get_device(cluster, node, device).await {
            Ok(d) => Some(d),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e.into()),
        };
        if op.spec.action == DeviceAction::Fail && machine.state() == DeviceOpsStep::Removing {
            obs.others_out = others_out(target, ctx).await?;
        }
        Ok(obs)
    }

    fn plan(
        &self,
        op: &StorageDeviceOps,
        _target: &StorageDevice,
        machine: &Machine<'static, DeviceOpsStep>,
        obs: &Observed,
        _now: Timestamp,
    ) -> Noted<DeviceOpsStep, Call, Fields> {
        plan(op, machine.state(), obs)
    }

    async fn execute(
        &self,
        _op: &StorageDeviceOps,
        _target: &StorageDevice,
        call: &Call,
        ctx: &Context,
    ) -> Result<(), String> {
        let cp = ctx.control_plane().map_err(|e| e.to_string())?;
        let result = match *call {
            Call::Restart(c, n, d) => cp.restart_device(c, n, d, false).await,
            Call::Remove(c, n, d) => cp.remove_device(c, n, d, false).await,
            Call::Fail(c, n, d) => cp.fail_device(c, n, d).await,
        };
        result.map_err(|e| e.to_string())
    }
}

/// The names of the other StorageDevices of `device`'s cluster that are not Online.
async fn others_out(device: &StorageDevice, ctx: &Context) -> Result<Vec<String>, ops::Error> {
    let Some(cluster) = device.labels().get(CLUSTER_LABEL) else {
        return Ok(Vec::new());
    };
    let devices: Api<StorageDevice> =
        Api::namespaced(ctx.kube.clone(), &device.namespace().unwrap_or_default());
    let selector = format!("{CLUSTER_LABEL}={cluster}");
    let mut out: Vec<String> = devices
        .list(&kube::api::ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter(|d| d.name_any() != device.name_any())
        .filter(|d| d.status.as_ref().map(|s| s.phase) != Some(DevicePhase::Online))
        .map(|d| d.name_any())
        .collect();
    out.sort();
    Ok(out)
}

/// Runs the controller until the operator stops.
pub async fn run(ctx: Arc<Context>) {
    let steps = DeviceSteps;
    ops::run(CONTROLLER, ops::controller(&ctx), steps, ctx).await
}

fn wait(message: String) -> Plan<DeviceOpsStep, Call, Fields> {
    Plan::Wait {
        message,
        after: AWAIT_POLL,
        event: None,
    }
}

fn advance(to: DeviceOpsStep, message: String) -> Plan<DeviceOpsStep, Call, Fields> {
    Plan::Advance {
        to: Move::To(to),
        message,
        kind_status: None,
    }
}

fn succeed(message: &str) -> Plan<DeviceOpsStep, Call, Fields> {
    Plan::Succeed {
        message: message.to_owned(),
        kind_status: None,
    }
}

fn serving(s: DeviceStatus) -> bool {
    matches!(s, DeviceStatus::Online | DeviceStatus::JmDev)
}

fn failed(s: DeviceStatus) -> bool {
    matches!(s, DeviceStatus::Failed | DeviceStatus::FailedAndMigrated)
}

/// The next thing a step does, from one observation. Pure.
pub fn plan(
    op: &StorageDeviceOps,
    step: DeviceOpsStep,
    obs: &Observed,
) -> Noted<DeviceOpsStep, Call, Fields> {
    use DeviceAction as A;
    use DeviceOpsStep::*;
    let name = &op.spec.device_ref;
    if let Some(why) = op.spec.action.unavailable() {
        return Plan::Fail(why).into();
    }
    let Some((c, n, d)) = obs.ids else {
        return wait(format!(
            "StorageDevice {name} has no control-plane ids yet; waiting for the operator to report the device"
        ))
        .into();
    };
    let Some(device) = &obs.found else {
        return Plan::Fail(format!(
            "the control plane does not know device {d} (StorageDevice {name}); nothing was called"
        ))
        .into();
    };
    let status = device.status;
    let recorded = op
        .status
        .as_ref()
        .is_some_and(|s| s.device_status_before.is_some());
    // The status before anything is asked, written before the first call.
    if !recorded
        && matches!(
            (op.spec.action, step),
            (A::Restart, Requesting) | (A::Fail, Removing)
        )
    {
        return Plan::Record {
            kind_status: Fields {
                device_status_before: Some(status.as_str().to_owned()),
            },
            message: format!("the device is {status}"),
        }
        .into();
    }
    match (op.spec.action, step) {
        (A::Restart, Requesting) => {
            if serving(status) {
                return advance(
                    Awaiting,
                    format!("the device is {status}; no restart call needed"),
                )
                .into();
            }
            if !matches!(status, DeviceStatus::Removed | DeviceStatus::Failed) {
                return Plan::Fail(format!(
                    "the device is {status}: the control plane restarts only a removed or failed device; if its node is down, restart the node with a StorageNodeOps Restart"
                ))
                .into();
            }
            Plan::Call {
                call: Call::Restart(c, n, d),
                message: format!("restarting the device (it is {status})"),
            }
            .into()
        }
        (A::Restart, Awaiting) => {
            if serving(status) {
                succeed("restarted: the device is online").into()
            } else {
                wait(format!(
                    "the control plane reports the device {status}; waiting for online"
                ))
                .into()
            }
        }
        (A::Fail, Removing) => {
            if failed(status) {
                return Plan::Fail(format!(
                    "the device is already {status}; nothing was done — a failed device needs no Fail"
                ))
                .into();
            }
            if status == DeviceStatus::Removed {
                return advance(
                    Failing,
                    "the device is out of the data path already; no remove call needed".into(),
                )
                .into();
            }
            if status == DeviceStatus::New {
                return Plan::Fail(
                    "the device is new: it was never in the data path, and the control plane removes only a device in service; nothing was done".into(),
                )
                .into();
            }
            let mut notes = Vec::new();
            if !obs.others_out.is_empty() {
                notes.push(Note {
                    warning: true,
                    reason: "InsufficientRedundancy",
                    message: format!(
                        "failing {name} while {} of the same cluster {} out of service may leave data without a redundant copy until the rebuild ends; the operation goes on",
                        obs.others_out.join(", "),
                        if obs.others_out.len() == 1 { "is" } else { "are" }
                    ),
                });
            }
            Noted {
                plan: Plan::Call {
                    call: Call::Remove(c, n, d),
                    message: format!("taking the device out of the data path (it is {status})"),
                },
                notes,
            }
        }
        (A::Fail, Failing) => {
            if failed(status) {
                return advance(
                    Awaiting,
                    format!("the device is {status}; no fail call needed"),
                )
                .into();
            }
            if status != DeviceStatus::Removed {
                return Plan::Fail(format!(
                    "the device is back in service ({status}) after it was removed — someone restarted it; it was not failed. Create another Fail if it should still go"
                ))
                .into();
            }
            Plan::Call {
                call: Call::Fail(c, n, d),
                message: "marking the removed device failed".into(),
            }
            .into()
        }
        (A::Fail, Awaiting) => {
            if failed(status) {
                succeed("failed: the device is out of the cluster for good and its data is rebuilt on the other devices").into()
            } else {
                wait(format!(
                    "the control plane reports the device {status}; waiting for failed"
                ))
                .into()
            }
        }
        (action, step) => Plan::Fail(format!(
            "step {step} is not one of action {}",
            action.name()
        ))
        .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DeviceOpsStep::*;
    use DeviceStatus as S;
    use serde_json::json;

    fn op(action: &str, before: Option<&str>) -> StorageDeviceOps {
        serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageDeviceOps",
            "metadata": {"name": "op", "namespace": "ns"},
            "spec": {"deviceRef": "sb-w1-0-00000001", "action": action},
            "status": {"deviceStatusBefore": before},
        }))
        .expect("op")
    }

    fn seen(status: DeviceStatus) -> Observed {
        Observed {
            ids: Some((Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3))),
            found: Some(Device {
                status,
                ..Device::default()
            }),
            others_out: Vec::new(),
        }
    }

    fn kind(plan: &Plan<DeviceOpsStep, Call, Fields>) -> &'static str {
        match plan {
            Plan::Advance { .. } => "advance",
            Plan::Record { .. } => "record",
            Plan::Progress { .. } => "progress",
            Plan::Succeed { .. } => "succeed",
            Plan::Fail(_) => "fail",
            Plan::Call {
                call: Call::Restart(..),
                ..
            } => "restart",
            Plan::Call {
                call: Call::Remove(..),
                ..
            } => "remove",
            Plan::Call {
                call: Call::Fail(..),
                ..
            } => "fail call",
            Plan::CallOnce { .. } => "call once",
            Plan::Wait { .. } => "wait",
        }
    }

    #[test]
    fn each_step_calls_only_when_its_outcome_is_not_there() {
        let table = [
            ("Restart", Requesting, S::Removed, "restart"),
            ("Restart", Requesting, S::Failed, "restart"),
            ("Restart", Requesting, S::Online, "advance"),
            ("Restart", Requesting, S::Unavailable, "fail"),
            ("Restart", Awaiting, S::Removed, "wait"),
            ("Restart", Awaiting, S::Online, "succeed"),
            ("Fail", Removing, S::Online, "remove"),
            ("Fail", Removing, S::Unavailable, "remove"),
            ("Fail", Removing, S::Removed, "advance"),
            ("Fail", Removing, S::Failed, "fail"),
            ("Fail", Removing, S::FailedAndMigrated, "fail"),
            ("Fail", Removing, S::New, "fail"),
            ("Fail", Failing, S::Removed, "fail call"),
            ("Fail", Failing, S::Failed, "advance"),
            ("Fail", Failing, S::Online, "fail"),
            ("Fail", Awaiting, S::Removed, "wait"),
            ("Fail", Awaiting, S::Failed, "succeed"),
            ("Fail", Awaiting, S::FailedAndMigrated, "succeed"),
        ];
        for (action, step, status, want) in table {
            let got = plan(&op(action, Some("online")), step, &seen(status)).plan;
            assert_eq!(kind(&got), want, "{action} {step} {status}: {got:?}");
        }
    }

    #[test]
    fn the_status_before_is_recorded_before_the_first_call() {
        for (action, step) in [("Restart", Requesting), ("Fail", Removing)] {
            let got = plan(&op(action, None), step, &seen(S::Removed)).plan;
            let Plan::Record { kind_status, .. } = &got else {
                panic!("{got:?}")
            };
            assert_eq!(kind_status.device_status_before.as_deref(), Some("removed"));
        }
        // Later steps never record it again.
        assert_eq!(
            kind(&plan(&op("Fail", None), Failing, &seen(S::Removed)).plan),
            "fail call"
        );
    }

    #[test]
    fn a_fail_warns_of_redundancy_and_goes_on() {
        let obs = Observed {
            others_out: vec!["sb-w2-0-00000009".into()],
            ..seen(S::Online)
        };
        let Noted { plan: got, notes } = plan(&op("Fail", Some("online")), Removing, &obs);
        assert_eq!(kind(&got), "remove");
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].reason, "InsufficientRedundancy");
        assert!(notes[0].warning && notes[0].message.contains("sb-w2-0-00000009"));
        assert!(
            plan(&op("Fail", Some("online")), Removing, &seen(S::Online))
                .notes
                .is_empty()
        );
    }

    #[test]
    fn a_device_the_operator_has_not_reported_waits_and_one_the_control_plane_lost_fails() {
        assert_eq!(
            kind(&plan(&op("Restart", None), Requesting, &Observed::default()).plan),
            "wait"
        );
        let lost = Observed {
            found: None,
            ..seen(S::Online)
        };
        assert_eq!(
            kind(&plan(&op("Restart", None), Requesting, &lost).plan),
            "fail"
        );
    }

    #[test]
    fn a_declared_only_action_has_no_machine_and_its_plan_says_why() {
        let graphs = crate::runtime::ops::StepGraphs::<StorageDeviceOps>::default();
        for action in ["SelfTest", "Replace", "Migrate"] {
            let declared = op(action, None);
            assert!(
                graphs.restore(&declared, Timestamp::now()).is_err(),
                "{action}"
            );
            let Plan::Fail(why) = plan(&declared, Validating, &seen(S::Online)).plan else {
                panic!("{action} is refused")
            };
            assert!(why.contains("no call for"), "{why}");
        }
    }
}

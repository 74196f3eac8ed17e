//! The StorageDevice mirror: one object per drive the control plane reports for each
//! StorageNode, kept in step by polling `GET …/storage-nodes/{n}/devices/`.
//!
//! | what the control plane says | what the mirror does |
//! |---|---|
//! | a drive with no object | creates `<node>-<first 8 of its id>`, owned by the node; `DeviceDiscovered` on the node |
//! | a drive whose object differs | writes its status; a phase change raises `DeviceFailed`, `DeviceDegraded`, `DeviceStateUnknown` or (from any other phase) `DeviceOnline` |
//! | an object with no drive, node online, suspended, removed or unknown | deletes it; `DeviceRemoved` on the node when it was last removed, else `DeviceDisappeared` (warning) |
//! | an object with no drive, node in any other status | phase Unknown, object kept — but Failed and Removed stay |
//!
//! The node's `status.resources.devices` (online and total) is the StorageNode
//! controller's, counted from these objects. The plan is [`plan`], pure; the rest reads
//! and writes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use simplyblock_api::keys::{CLUSTER_LABEL, NODE_LABEL, WORKER_LABEL};
use simplyblock_api::names::label_value;
use simplyblock_api::storage_device::{
    DeviceCapacity, DeviceHardware, DevicePhase, DeviceRole, StorageDeviceSpec,
    StorageDeviceStatus, storage_device_name,
};
use simplyblock_api::{StorageCluster, StorageDevice, StorageNode};
use simplyblock_controlplane::{Device, DeviceStatus, NodeStatus, Scope, Uuid};

use crate::runtime::context::Context;
use crate::runtime::kit::{self, Error, Guard};
use crate::runtime::ops::Note;

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "storagedevice";
/// The field manager of the StorageDevice objects.
pub const MANAGER: &str = "storagedevice-controller";
/// How often a node's drives are read again.
pub const POLL: Duration = Duration::from_secs(15);

/// What the control plane reports of a node and its drives.
#[derive(Clone, Debug, PartialEq)]
pub enum Report {
    /// The node has no control-plane id yet, or its cluster has none: nothing is known.
    Unprovisioned,
    /// The control plane does not know the node (any more).
    NodeGone,
    /// The node's status and its drives.
    Node {
        status: NodeStatus,
        devices: Vec<Device>,
    },
}

/// One change the mirror makes.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Create the object for a newly reported drive, then write its status.
    Create {
        name: String,
        device_id: String,
        status: StorageDeviceStatus,
        note: Note,
    },
    /// Write the object's status; `note` is raised on the device.
    Update {
        name: String,
        status: StorageDeviceStatus,
        note: Option<Note>,
    },
    /// Delete the object; `note` is raised on the node.
    Delete { name: String, note: Note },
}

/// The status the mirror writes for a drive as the control plane reports it.
pub fn status_of(d: &Device) -> StorageDeviceStatus {
    let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let hardware = DeviceHardware {
        pci_address: some(&d.pcie_address),
        serial_number: some(&d.serial_number),
        model: some(&d.model),
        nvme_controller: some(&d.nvme_controller),
    };
    StorageDeviceStatus {
        phase: DevicePhase::from_control_plane(d.status.as_str()),
        device_status: Some(d.status.as_str().to_owned()),
        role: Some(if d.status == DeviceStatus::JmDev {
            DeviceRole::Journal
        } else {
            DeviceRole::Storage
        }),
        capacity: Some(DeviceCapacity {
            total_bytes: i64::try_from(d.size).ok(),
        }),
        hardware: (hardware != DeviceHardware::default()).then_some(hardware),
        cluster_id: Some(d.cluster_id.to_string()),
        node_id: Some(d.storage_node_id.to_string()),
        ..StorageDeviceStatus::default()
    }
}

/// The mirror's own fields of a status: everything but the lock and the generation,
/// which it never writes, and the conditions, which follow from the rest when written.
fn mirrored(status: &StorageDeviceStatus) -> StorageDeviceStatus {
    StorageDeviceStatus {
        active_ops_ref: None,
        observed_generation: None,
        conditions: Vec::new(),
        ..status.clone()
    }
}

/// `status` with its conditions, from those stored on `device`.
fn with_conditions(device: &StorageDevice, mut status: StorageDeviceStatus) -> StorageDeviceStatus {
    status.conditions = crate::runtime::conditions::for_phase(
        device.status.as_ref().map(|s| &s.conditions[..]),
        status.phase,
        status.message.as_deref(),
        device.metadata.generation,
    );
    status
}

fn phase_note(name: &str, before: DevicePhase, after: &StorageDeviceStatus) -> Option<Note> {
    if before == after.phase {
        return None;
    }
    let word = after.device_status.as_deref().unwrap_or("unknown");
    let (warning, reason, message) = match after.phase {
        DevicePhase::Failed => (
            true,
            "DeviceFailed",
            format!(
                "device {name} failed (control-plane status {word}); its data is rebuilt on the other devices — replace the drive"
            ),
        ),
        DevicePhase::Degraded => (
            true,
            "DeviceDegraded",
            format!(
                "device {name} is degraded (control-plane status {word}); check the drive and its node"
            ),
        ),
        DevicePhase::Unknown => (
            true,
            "DeviceStateUnknown",
            after.message.clone().unwrap_or_else(|| {
                format!("the state of device {name} is unknown (control-plane status {word})")
            }),
        ),
        DevicePhase::Online => (
            false,
            "DeviceOnline",
            format!("device {name} is online again (it was {})", before.as_str()),
        ),
        DevicePhase::Removed => return None,
    };
    Some(Note {
        warning,
        reason,
        message,
    })
}

/// Whether a drive missing from the node's report is gone (its object is deleted) rather
/// than unreadable: the node answers for its drives when it is online, suspended or
/// removed, and a node the control plane does not know has none.
fn missing_means_gone(report: &Report) -> Option<NodeStatus> {
    match report {
        Report::Node { status, .. }
            if !matches!(
                status,
                NodeStatus::Online | NodeStatus::Suspended | NodeStatus::Removed
            ) =>
        {
            Some(*status)
        }
        _ => None,
    }
}

/// The changes that bring `existing` (the node's StorageDevices) in step with `report`.
/// Pure.
pub fn plan(node: &str, report: &Report, existing: &[StorageDevice]) -> Vec<Change> {
    let mut changes = Vec::new();
    if *report == Report::Unprovisioned {
        return changes;
    }
    let devices: &[Device] = match report {
        Report::Node { devices, .. } => devices,
        _ => &[],
    };
    let by_id: BTreeMap<&str, &StorageDevice> = existing
        .iter()
        .map(|o| (o.spec.device_id.as_str(), o))
        .collect();
    for d in devices {
        let id = d.id.to_string();
        let next = status_of(d);
        match by_id.get(id.as_str()) {
            None => {
                let name = storage_device_name(node, &id);
                changes.push(Change::Create {
                    note: Note {
                        warning: false,
                        reason: "DeviceDiscovered",
                        message: format!(
                            "device {name} discovered: control-plane id {id}, status {}",
                            d.status
                        ),
                    },
                    name,
                    device_id: id,
                    status: next,
                });
            }
            Some(o) => {
                let current = o.status.clone().unwrap_or_default();
                if mirrored(&current) != next || o.status.is_none() {
                    let name = o.name_any();
                    changes.push(Change::Update {
                        note: o
                            .status
                            .as_ref()
                            .and_then(|s| phase_note(&name, s.phase, &next)),
                        name,
                        status: next,
                    });
                }
            }
        }
    }
    let reported: Vec<String> = devices.iter().map(|d| d.id.to_string()).collect();
    for o in existing {
        if reported.contains(&o.spec.device_id) {
            continue;
        }
        let name = o.name_any();
        let current = o.status.clone().unwrap_or_default();
        match missing_means_gone(report) {
            None => {
                let removed = current.phase == DevicePhase::Removed;
                changes.push(Change::Delete {
                    note: if removed {
                        Note {
                            warning: false,
                            reason: "DeviceRemoved",
                            message: format!(
                                "device {name} was removed and the control plane no longer lists it; its StorageDevice is deleted"
                            ),
                        }
                    } else {
                        Note {
                            warning: true,
                            reason: "DeviceDisappeared",
                            message: format!(
                                "device {name} (last {}) is no longer listed by the control plane; its StorageDevice is deleted — check the drive if this was not planned",
                                current.device_status.as_deref().unwrap_or("never reported")
                            ),
                        }
                    },
                    name,
                });
            }
            // Failed and Removed are facts about the drive; an unreadable node does not
            // undo them.
            Some(_) if matches!(current.phase, DevicePhase::Failed | DevicePhase::Removed) => {}
            Some(status) => {
                let message = format!(
                    "node {node} is {status}, so the control plane does not report its devices; the state of this one is unknown until the node is back"
                );
                if current.phase == DevicePhase::Unknown
                    && current.message.as_deref() == Some(message.as_str())
                {
                    continue;
                }
                let next = StorageDeviceStatus {
                    phase: DevicePhase::Unknown,
                    message: Some(message),
                    ..mirrored(&current)
                };
                changes.push(Change::Update {
                    note: phase_note(&name, current.phase, &next),
                    name,
                    status: next,
                });
            }
        }
    }
    changes
}

/// Runs the mirror until the operator stops.
pub async fn run(ctx: Arc<Context>) {
    let controller = Controller::new(
        ctx.scope.api::<StorageNode>(&ctx.kube),
        watcher::Config::default(),
    )
    .owns(
        ctx.scope.api::<StorageDevice>(&ctx.kube),
        watcher::Config::default(),
    );
    // A stream event about the node or its devices wakes its mirror; the poll stays.
    let woken = ctx
        .streams
        .triggers(controller.store(), |n: &StorageNode, change| {
            let uuid = n.status.as_ref().and_then(|s| s.uuid.as_deref());
            crate::runtime::streams::status_uuid(uuid).is_some_and(|id| change.node_or_devices(id))
        });
    let controller = controller.reconcile_on(woken);
    kit::run(CONTROLLER, controller, reconcile, ctx).await
}

/// One pass over one StorageNode's drives.
pub async fn reconcile(node: Arc<StorageNode>, ctx: Arc<Context>) -> Result<Action, Error> {
    if node.meta().deletion_timestamp.is_some() {
        // The devices go with the node: they are owned by it, and so does its stream.
        let uuid = node.status.as_ref().and_then(|s| s.uuid.as_deref());
        if let Some(id) = crate::runtime::streams::status_uuid(uuid) {
            ctx.streams
                .unfollow(|s| matches!(s, Scope::Devices { node, .. } if *node == id));
        }
        return Ok(Action::await_change());
    }
    let ctx = &*ctx;
    let ns = node.namespace().unwrap_or_default();
    let name = node.name_any();
    let report = read(&node, ctx).await?;
    let devices: Api<StorageDevice> = Api::namespaced(ctx.kube.clone(), &ns);
    let existing: Vec<StorageDevice> = devices
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|d| d.spec.node_ref == name)
        .collect();
    for change in plan(&name, &report, &existing) {
        carry(&node, &devices, change, ctx).await?;
    }
    // Objects created by an earlier version of this pass, or with labels another writer
    // dropped, get their labels and owner back.
    for o in &existing {
        if !owned_as_wanted(o, &node) {
            apply_object(&devices, &node, &o.name_any(), &o.spec.device_id).await?;
        }
    }
    if matches!(report, Report::Node { .. }) {
        gauges(ctx, &node, &report, &existing);
    }
    Ok(Action::requeue(POLL))
}

async fn read(node: &StorageNode, ctx: &Context) -> Result<Report, Error> {
    let uuid = |s: Option<&String>| s.and_then(|u| u.parse::<Uuid>().ok());
    let Some(node_id) = uuid(node.status.as_ref().and_then(|s| s.uuid.as_ref())) else {
        return Ok(Report::Unprovisioned);
    };
    let clusters: Api<StorageCluster> =
        Api::namespaced(ctx.kube.clone(), &node.namespace().unwrap_or_default());
    let Some(cluster) = clusters.get_opt(&node.spec.cluster_ref).await? else {
        return Ok(Report::Unprovisioned);
    };
    let Some(cluster_id) = uuid(cluster.status.as_ref().and_then(|s| s.uuid.as_ref())) else {
        return Ok(Report::Unprovisioned);
    };
    // The node and its devices from their streams (plain GETs until synced).
    let cp = ctx.control_plane()?;
    let informer = ctx.follow(Scope::Nodes {
        cluster: cluster_id,
    })?;
    let devices_scope = Scope::Devices {
        cluster: cluster_id,
        node: node_id,
    };
    let status = match informer.node(cluster_id, node_id).await {
        Ok(n) => n.status,
        Err(e) if e.is_not_found() => {
            ctx.streams.unfollow(|s| *s == devices_scope);
            return Ok(Report::NodeGone);
        }
        Err(e) => return Err(e.into()),
    };
    // A removed node's devices change no more: its stream closes.
    let devices = if status == NodeStatus::Removed {
        ctx.streams.unfollow(|s| *s == devices_scope);
        cp.list_devices(cluster_id, node_id).await
    } else {
        ctx.streams.devices(cp, cluster_id, node_id).await
    };
    let devices = match devices {
        Ok(d) => d,
        Err(e) if e.is_not_found() => return Ok(Report::NodeGone),
        Err(e) => return Err(e.into()),
    };
    Ok(Report::Node { status, devices })
}

/// The labels of a node's devices; one whose value cannot be a label value is left off.
fn labels(node: &StorageNode) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    for (key, value) in [
        (CLUSTER_LABEL, node.spec.cluster_ref.as_str()),
        (NODE_LABEL, node.meta().name.as_deref().unwrap_or_default()),
        (WORKER_LABEL, node.spec.worker_node.as_str()),
    ] {
        if !value.is_empty() && label_value(value) == value {
            labels.insert(key.to_owned(), value.to_owned());
        }
    }
    labels
}

fn owned_as_wanted(o: &StorageDevice, node: &StorageNode) -> bool {
    let owner = node.controller_owner_ref(&());
    let labelled = labels(node)
        .iter()
        .all(|(k, v)| o.labels().get(k) == Some(v));
    labelled && owner.is_some_and(|r| o.owner_references().contains(&r))
}

/// Creates or re-labels the object (server-side apply of its metadata and spec).
async fn apply_object(
    devices: &Api<StorageDevice>,
    node: &StorageNode,
    name: &str,
    device_id: &str,
) -> Result<StorageDevice, Error> {
    let spec = StorageDeviceSpec {
        node_ref: node.name_any(),
        device_id: device_id.to_owned(),
    };
    let body = json!({
        "apiVersion": simplyblock_api::API_VERSION,
        "kind": "StorageDevice",
        "metadata": {
            "name": name,
            "labels": labels(node),
            "ownerReferences": node.controller_owner_ref(&()).into_iter().collect::<Vec<_>>(),
        },
        "spec": spec,
    });
    Ok(devices
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(body),
        )
        .await?)
}

async fn carry(
    node: &StorageNode,
    devices: &Api<StorageDevice>,
    change: Change,
    ctx: &Context,
) -> Result<(), Error> {
    match change {
        Change::Create {
            name,
            device_id,
            status,
            note,
        } => {
            let created = apply_object(devices, node, &name, &device_id).await?;
            let status = with_conditions(&created, status);
            kit::apply_status(&ctx.kube, &created, MANAGER, &status, Guard::None).await?;
            ctx.event(node, note.warning, note.reason, note.message)
                .await;
        }
        Change::Update { name, status, note } => {
            let Some(current) = devices.get_opt(&name).await? else {
                return Ok(());
            };
            let status = with_conditions(&current, status);
            let written =
                kit::apply_status(&ctx.kube, &current, MANAGER, &status, Guard::None).await?;
            if let Some(note) = note {
                ctx.event(&written, note.warning, note.reason, note.message)
                    .await;
            }
        }
        Change::Delete { name, note } => {
            match devices.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                Err(e) => return Err(e.into()),
            }
            forget(ctx, node, &name);
            ctx.event(node, note.warning, note.reason, note.message)
                .await;
        }
    }
    Ok(())
}

fn device_labels(node: &StorageNode, device: &str) -> crate::runtime::metrics::Labels {
    vec![
        ("namespace", node.namespace().unwrap_or_default()),
        ("node", node.name_any()),
        ("device", device.to_owned()),
    ]
}

const CAPACITY: &str = "simplyblock_storagedevice_capacity_bytes";
const USED: &str = "simplyblock_storagedevice_used_bytes";
const PHASE: &str = "simplyblock_storagedevice_phase_state";

/// The gauges of the node and its devices, from this pass's report.
fn gauges(ctx: &Context, node: &StorageNode, report: &Report, existing: &[StorageDevice]) {
    let Report::Node { devices, .. } = report else {
        return;
    };
    let m = &ctx.metrics;
    let name = node.name_any();
    let phases: Vec<&str> = DevicePhase::ALL.iter().map(|p| p.as_str()).collect();
    let mut failed = 0;
    for d in devices {
        let device = existing
            .iter()
            .find(|o| o.spec.device_id == d.id.to_string())
            .map(|o| o.name_any())
            .unwrap_or_else(|| storage_device_name(&name, &d.id.to_string()));
        let labels = device_labels(node, &device);
        let phase = DevicePhase::from_control_plane(d.status.as_str());
        if phase == DevicePhase::Failed {
            failed += 1;
        }
        m.set(CAPACITY, labels.clone(), d.size as f64);
        // The used bytes come from the fleet collector ([`crate::fleet`]): streamed
        // devices carry no statistics.
        m.one_hot(PHASE, &labels, phases.iter().copied(), Some(phase.as_str()));
    }
    let node_labels = vec![
        ("namespace", node.namespace().unwrap_or_default()),
        ("node", name),
    ];
    m.set(
        "simplyblock_storagenode_devices_count",
        node_labels.clone(),
        devices.len() as f64,
    );
    m.set(
        "simplyblock_storagenode_devices_failed_count",
        node_labels,
        failed as f64,
    );
}

/// Drops the series of a deleted device.
fn forget(ctx: &Context, node: &StorageNode, device: &str) {
    let labels = device_labels(node, device);
    ctx.metrics.forget(CAPACITY, &labels);
    ctx.metrics.forget(USED, &labels);
    for phase in DevicePhase::ALL {
        let mut series = labels.clone();
        series.push(("phase", phase.as_str().to_owned()));
        ctx.metrics.forget(PHASE, &series);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DevicePhase as P;

    fn drive(n: u128, status: DeviceStatus) -> Device {
        Device {
            id: Uuid::from_u128(n << 96),
            status,
            size: 1 << 40,
            pcie_address: "0000:00:04.0".into(),
            ..Device::default()
        }
    }

    fn object(n: u128, phase: DevicePhase, word: &str) -> StorageDevice {
        let id = Uuid::from_u128(n << 96).to_string();
        let mut o = StorageDevice::new(
            &storage_device_name("sb-w1-0", &id),
            StorageDeviceSpec {
                node_ref: "sb-w1-0".into(),
                device_id: id,
            },
        );
        o.status = Some(StorageDeviceStatus {
            phase,
            device_status: Some(word.into()),
            ..StorageDeviceStatus::default()
        });
        o
    }

    fn node(status: NodeStatus, devices: Vec<Device>) -> Report {
        Report::Node { status, devices }
    }

    fn reasons(changes: &[Change]) -> Vec<(&'static str, Option<&'static str>)> {
        changes
            .iter()
            .map(|c| match c {
                Change::Create { note, .. } => ("create", Some(note.reason)),
                Change::Update { note, .. } => ("update", note.as_ref().map(|n| n.reason)),
                Change::Delete { note, .. } => ("delete", Some(note.reason)),
            })
            .collect()
    }

    #[test]
    fn a_new_drive_is_created_under_its_derived_name_and_announced_on_the_node() {
        let changes = plan(
            "sb-w1-0",
            &node(NodeStatus::Online, vec![drive(1, DeviceStatus::JmDev)]),
            &[],
        );
        let [
            Change::Create {
                name, status, note, ..
            },
        ] = changes.as_slice()
        else {
            panic!("{changes:?}")
        };
        assert_eq!(name, "sb-w1-0-00000001");
        assert_eq!(note.reason, "DeviceDiscovered");
        assert_eq!(status.role, Some(DeviceRole::Journal));
        assert_eq!(status.phase, P::Online);
        assert_eq!(status.capacity.and_then(|c| c.total_bytes), Some(1 << 40));
    }

    #[test]
    fn an_unchanged_drive_writes_nothing_and_a_changed_one_says_its_new_phase_once() {
        let mut same = object(1, P::Online, "online");
        same.status = Some(status_of(&drive(1, DeviceStatus::Online)));
        let report = node(NodeStatus::Online, vec![drive(1, DeviceStatus::Online)]);
        assert_eq!(plan("sb-w1-0", &report, &[same]), vec![]);
        for (before, word, now, want) in [
            (
                P::Online,
                "online",
                DeviceStatus::Failed,
                Some("DeviceFailed"),
            ),
            (
                P::Online,
                "online",
                DeviceStatus::Unavailable,
                Some("DeviceDegraded"),
            ),
            (
                P::Failed,
                "failed",
                DeviceStatus::Online,
                Some("DeviceOnline"),
            ),
            (
                P::Degraded,
                "unavailable",
                DeviceStatus::Online,
                Some("DeviceOnline"),
            ),
            (P::Online, "online", DeviceStatus::Removed, None),
            // The same phase under another word (journal and online) is news, not an event.
            (P::Online, "online", DeviceStatus::JmDev, None),
        ] {
            let got = plan(
                "sb-w1-0",
                &node(NodeStatus::Online, vec![drive(1, now)]),
                &[object(1, before, word)],
            );
            assert_eq!(reasons(&got), vec![("update", want)], "{before:?} -> {now}");
        }
    }

    #[test]
    fn a_missing_drive_is_deleted_only_where_its_node_answers_for_it() {
        for status in [
            NodeStatus::Online,
            NodeStatus::Suspended,
            NodeStatus::Removed,
        ] {
            let got = plan(
                "sb-w1-0",
                &node(status, vec![]),
                &[
                    object(1, P::Removed, "removed"),
                    object(2, P::Online, "online"),
                ],
            );
            assert_eq!(
                reasons(&got),
                vec![
                    ("delete", Some("DeviceRemoved")),
                    ("delete", Some("DeviceDisappeared"))
                ],
                "{status}"
            );
        }
        let gone = plan(
            "sb-w1-0",
            &Report::NodeGone,
            &[object(1, P::Online, "online")],
        );
        assert_eq!(reasons(&gone), vec![("delete", Some("DeviceDisappeared"))]);
        // Any other node status: Unknown, once, and Failed and Removed are kept.
        let offline = node(NodeStatus::Offline, vec![]);
        let got = plan(
            "sb-w1-0",
            &offline,
            &[
                object(1, P::Online, "online"),
                object(2, P::Failed, "failed"),
                object(3, P::Removed, "removed"),
            ],
        );
        assert_eq!(reasons(&got), vec![("update", Some("DeviceStateUnknown"))]);
        let Change::Update { status, .. } = &got[0] else {
            panic!("{got:?}")
        };
        let mut unknown = object(1, P::Unknown, "online");
        unknown.status = Some(status.clone());
        assert_eq!(plan("sb-w1-0", &offline, &[unknown]), vec![]);
    }

    #[test]
    fn nothing_is_done_before_the_node_has_an_id() {
        assert_eq!(
            plan(
                "sb-w1-0",
                &Report::Unprovisioned,
                &[object(1, P::Online, "online")]
            ),
            vec![]
        );
    }
}

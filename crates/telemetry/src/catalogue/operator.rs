//! The operator's own families: reconciles, operations and the phases of its kinds.
//!
//! The families every Ops kind exports under its prefix are generated per kind
//! ([`OPS_FAMILIES`]); the kind's own extras are rows of [`FAMILIES`].

use super::{Exporter::Operator, Family, Type::*};

pub(super) const FAMILIES: &[Family] = &[
    Family {
        name: "simplyblock_operator_leader_state",
        r#type: Gauge,
        labels: &["pod"],
        help: "1 while this operator replica holds the leader lease and runs the controllers, 0 while it stands by.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_reconcile_total",
        r#type: Counter,
        labels: &["controller", "result"],
        help: "Reconcile passes of a controller that ended, by result (success, error).",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_reconcile_errors_total",
        r#type: Counter,
        labels: &["controller", "kind"],
        help: "Reconcile passes of a controller that failed, by the kind of error (kubernetes, conflict, control_plane, stale, held, ...).",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_reconcile_duration_seconds",
        r#type: Histogram,
        labels: &["controller"],
        help: "How long a controller's reconcile pass took.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_conversions_total",
        r#type: Counter,
        labels: &["kind", "from", "to"],
        help: "Objects the conversion webhook converted from one API version to another.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_hub_checks_total",
        r#type: Counter,
        labels: &["result"],
        help: "Checks whether this API server is an OCM hub, by answer (hub, not_hub, error).",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_hub_controllers_running_state",
        r#type: Gauge,
        labels: &[],
        help: "1 once this API server was found to be an OCM hub and the disaster-recovery hub controllers run.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagecluster_phase_state",
        r#type: Gauge,
        labels: &["namespace", "cluster", "phase"],
        help: "1 for the phase the StorageCluster is in, 0 for every other phase.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagecluster_rolling_restart_peer_hold_seconds",
        r#type: Histogram,
        labels: &["cluster"],
        help: "How long a rolling restart waited for a restarted node's peers to be back before the next node.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagecluster_rolling_restart_node_count",
        r#type: Gauge,
        labels: &["cluster"],
        help: "The storage nodes the cluster's current rolling restart restarts, one by one.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagecluster_rolling_restart_node_index_count",
        r#type: Gauge,
        labels: &["cluster"],
        help: "The position (from 0) of the node the cluster's current rolling restart is at.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagenode_phase_state",
        r#type: Gauge,
        labels: &["cluster", "node", "phase"],
        help: "1 for the phase the StorageNode is in, 0 for every other phase.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagenode_provisioning_duration_seconds",
        r#type: Histogram,
        labels: &["cluster"],
        help: "How long a storage node took from its creation to being online.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagenode_devices_count",
        r#type: Gauge,
        labels: &["namespace", "node"],
        help: "The devices the control plane reports on the storage node.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagenode_devices_failed_count",
        r#type: Gauge,
        labels: &["namespace", "node"],
        help: "The storage node's devices the control plane reports as failed.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagenode_drain_blocked_volumes_count",
        r#type: Gauge,
        labels: &["node"],
        help: "Volumes a node removal cannot move off the node yet (no other node can take them).",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagenode_drain_volumes_migrated_total",
        r#type: Counter,
        labels: &["node"],
        help: "Volumes a node removal moved off the node.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagenode_maintenance_hold_seconds",
        r#type: Histogram,
        labels: &["node"],
        help: "How long a storage node stayed in maintenance before it was resumed.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagedevice_phase_state",
        r#type: Gauge,
        labels: &["namespace", "node", "device", "phase"],
        help: "1 for the phase the StorageDevice is in, 0 for every other phase.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagedevice_capacity_bytes",
        r#type: Gauge,
        labels: &["namespace", "node", "device"],
        help: "The device's size as the control plane reports it.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagedevice_used_bytes",
        r#type: Gauge,
        labels: &["namespace", "node", "device"],
        help: "The bytes of the device holding data, as the control plane reports them.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_simplyblockdriver_nodes_ready_count",
        r#type: Gauge,
        labels: &["namespace", "name"],
        help: "The driver's node plugins that are ready.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_simplyblockdriver_nodes_expected_count",
        r#type: Gauge,
        labels: &["namespace", "name"],
        help: "The driver's node plugins scheduled: one per worker that should run one.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_simplyblockdriver_controller_ready_state",
        r#type: Gauge,
        labels: &["namespace", "name"],
        help: "1 while a controller plugin of the driver is ready, 0 while none is.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_simplyblockdriver_version_info",
        r#type: Gauge,
        labels: &["namespace", "name", "version"],
        help: "1, labelled with the version of the CSI driver the SimplyblockDriver runs.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_controlplane_ready_state",
        r#type: Gauge,
        labels: &["namespace"],
        help: "1 while the control plane in the namespace serves its API, 0 while it does not.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_controlplane_component_ready_count",
        r#type: Gauge,
        labels: &["namespace", "component", "essential"],
        help: "The ready replicas of a control-plane component.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_controlplane_component_desired_count",
        r#type: Gauge,
        labels: &["namespace", "component", "essential"],
        help: "The replicas a control-plane component should run.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_controlplane_version_info",
        r#type: Gauge,
        labels: &["namespace", "version"],
        help: "1, labelled with the version the control plane reports.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_controlplane_probe_duration_seconds",
        r#type: Histogram,
        labels: &["namespace"],
        help: "How long a probe of the control plane's API took.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_controlplane_probe_failures_total",
        r#type: Counter,
        labels: &["namespace", "reason"],
        help: "Probes of the control plane's API that failed, by reason.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_controlplane_install_step_duration_seconds",
        r#type: Histogram,
        labels: &["namespace", "step"],
        help: "How long the control plane's installation spent in a step.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_operator_discovery_workers_found_count",
        r#type: Gauge,
        labels: &["namespace"],
        help: "The workers the newest discovery run proposes as storage nodes.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_operator_discovery_devices_found_count",
        r#type: Gauge,
        labels: &["namespace"],
        help: "The NVMe devices the newest discovery run found on those workers.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_clusterdeploymentconfig_phase_state",
        r#type: Gauge,
        labels: &["namespace", "name", "phase"],
        help: "1 for the phase the ClusterDeploymentConfig is in, 0 for every other phase.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_clusterdeploymentconfig_nodes_created_total",
        r#type: Counter,
        labels: &["namespace"],
        help: "StorageNodes an approved ClusterDeploymentConfig created.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_clusterdeploymentconfig_validation_failures_total",
        r#type: Counter,
        labels: &["namespace", "reason"],
        help: "Expansions of a ClusterDeploymentConfig refused, by reason.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_clusterdeploymentconfig_approval_rejections_total",
        r#type: Counter,
        labels: &["namespace", "reason"],
        help: "Approving writes of a ClusterDeploymentConfig refused at admission, one per problem.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_clusterdeploymentconfig_expansion_duration_seconds",
        r#type: Histogram,
        labels: &["namespace"],
        help: "How long a ClusterDeploymentConfig took from its approval to Expanded.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_persistentvolume_operations_total",
        r#type: Counter,
        labels: &["action", "result"],
        help: "Volume operations (PersistentVolumeOps) that ended, by action and result.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_persistentvolume_operation_duration_seconds",
        r#type: Histogram,
        labels: &["action", "result"],
        help: "How long a volume operation took from its start to its end.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_persistentvolume_operation_step_duration_seconds",
        r#type: Histogram,
        labels: &["action", "step"],
        help: "How long a volume operation spent in a step.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_persistentvolume_operation_step_deadline_exceeded_total",
        r#type: Counter,
        labels: &["action", "step"],
        help: "Volume operations failed because a step outlived its deadline.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_persistentvolume_operation_queued_seconds",
        r#type: Histogram,
        labels: &["action"],
        help: "How long a volume operation waited for its volume's lock.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagebackup_completions_total",
        r#type: Counter,
        labels: &["cluster", "policy", "result"],
        help: "Backups that ended, by result (succeeded, failed); policy is empty for a backup no policy took.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagebackup_size_bytes",
        r#type: Histogram,
        labels: &["cluster", "policy"],
        help: "The size of a backup that succeeded.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagebackup_duration_seconds",
        r#type: Histogram,
        labels: &["cluster", "policy"],
        help: "How long a backup that succeeded took.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagebackup_available_count",
        r#type: Gauge,
        labels: &["cluster", "claim"],
        help: "The completed backups the cluster holds of a claim's volume.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagebackup_age_seconds",
        r#type: Gauge,
        labels: &["cluster", "claim"],
        help: "The age of the newest completed backup of a claim's volume.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagebackuppolicy_attached_claims_count",
        r#type: Gauge,
        labels: &["cluster", "policy"],
        help: "The claims a StorageBackupPolicy covers.",
        exporter: Operator,
    },
];

/// The families of an Ops kind: `simplyblock_<kind>_operation...`, labelled first with the
/// kind's target (`$target`), for the operations of kind `$ops`.
macro_rules! ops_families {
    ($kind:literal, $ops:literal, $target:literal) => {
        &[
            Family {
                name: concat!("simplyblock_", $kind, "_operations_total"),
                r#type: Counter,
                labels: &[$target, "action", "result"],
                help: concat!(
                    $ops,
                    " operations that ended, by action and result (succeeded, failed, aborted)."
                ),
                exporter: Operator,
            },
            Family {
                name: concat!("simplyblock_", $kind, "_operation_duration_seconds"),
                r#type: Histogram,
                labels: &[$target, "action", "result"],
                help: concat!(
                    "How long a ",
                    $ops,
                    " operation took from its start to its end."
                ),
                exporter: Operator,
            },
            Family {
                name: concat!("simplyblock_", $kind, "_operation_step_duration_seconds"),
                r#type: Histogram,
                labels: &[$target, "action", "step"],
                help: concat!("How long a ", $ops, " operation spent in a step it left."),
                exporter: Operator,
            },
            Family {
                name: concat!(
                    "simplyblock_",
                    $kind,
                    "_operation_step_deadline_exceeded_total"
                ),
                r#type: Counter,
                labels: &[$target, "action", "step"],
                help: concat!(
                    $ops,
                    " operations failed because a step outlived its deadline."
                ),
                exporter: Operator,
            },
            Family {
                name: concat!("simplyblock_", $kind, "_operation_lock_wait_seconds"),
                r#type: Histogram,
                labels: &[$target, "action"],
                help: concat!(
                    "How long a ",
                    $ops,
                    " operation waited from its creation to its start."
                ),
                exporter: Operator,
            },
        ]
    };
    ($kind:literal, $ops:literal, $target:literal, locks) => {
        &[Family {
            name: concat!("simplyblock_", $kind, "_operation_active_state"),
            r#type: Gauge,
            labels: &[$target],
            help: concat!(
                "1 while a ",
                $ops,
                " operation holds its target's lock, 0 once it ended."
            ),
            exporter: Operator,
        }]
    };
}

/// Every Ops kind's families; the kinds that lock their target add `operation_active_state`.
pub(super) const OPS_FAMILIES: &[&[Family]] = &[
    ops_families!("storagecluster", "StorageClusterOps", "cluster"),
    ops_families!("storagecluster", "StorageClusterOps", "cluster", locks),
    ops_families!("storagenode", "StorageNodeOps", "node"),
    ops_families!("storagenode", "StorageNodeOps", "node", locks),
    ops_families!("storagedevice", "StorageDeviceOps", "device"),
    ops_families!("storagedevice", "StorageDeviceOps", "device", locks),
    ops_families!("controlplane", "ControlPlaneOps", "namespace"),
    ops_families!("controlplane", "ControlPlaneOps", "namespace", locks),
    ops_families!("storagebackup", "StorageBackupOps", "backup"),
    ops_families!("storagebackup", "StorageBackupOps", "backup", locks),
    ops_families!("operator", "OperatorOps", "namespace"),
];

//! The operator's own families: reconciles, operations and the phases of its kinds.

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
        name: "simplyblock_storagecluster_phase_state",
        r#type: Gauge,
        labels: &["namespace", "cluster", "phase"],
        help: "1 for the phase the StorageCluster is in, 0 for every other phase.",
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
        name: "simplyblock_storagenode_operation_step_deadline_exceeded_total",
        r#type: Counter,
        labels: &["node", "action", "step"],
        help: "StorageNodeOps operations failed because a step outlived its deadline.",
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
        name: "simplyblock_reconcile_total",
        r#type: Counter,
        labels: &["controller", "result"],
        help: "Reconcile passes ended, by controller and result (success, error).",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_reconcile_errors_total",
        r#type: Counter,
        labels: &["controller", "kind"],
        help: "Reconcile passes that ended in an error, by controller and kind of error.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_reconcile_duration_seconds",
        r#type: Histogram,
        labels: &["controller"],
        help: "How long a reconcile pass took.",
        exporter: Operator,
    },
];

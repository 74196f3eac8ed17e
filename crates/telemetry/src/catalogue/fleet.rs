//! The fleet as the control plane reports it, exported by the operator: capacity, health
//! and I/O per cluster, pool, storage node, device and volume.

use super::{Exporter::Operator, Family, Type::*};

pub(super) const FAMILIES: &[Family] = &[
    Family {
        name: "simplyblock_storagecluster_status_state",
        r#type: Gauge,
        labels: &["namespace", "cluster", "status"],
        help: "1 for the status the control plane reports for the cluster (active, degraded, read_only, suspended, ...), 0 for the others it has reported.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagecluster_capacity_bytes",
        r#type: Gauge,
        labels: &["namespace", "cluster"],
        help: "The cluster's usable capacity: the size of its online devices.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagecluster_used_bytes",
        r#type: Gauge,
        labels: &["namespace", "cluster"],
        help: "The bytes of the cluster holding data.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagecluster_provisioned_bytes",
        r#type: Gauge,
        labels: &["namespace", "cluster"],
        help: "The sum of the sizes of the cluster's volumes (thin provisioning lets it exceed the capacity).",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagepool_capacity_bytes",
        r#type: Gauge,
        labels: &["namespace", "cluster", "pool"],
        help: "The pool's size limit; 0 when the pool is unlimited.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagepool_used_bytes",
        r#type: Gauge,
        labels: &["namespace", "cluster", "pool"],
        help: "The bytes of the pool's volumes holding data.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagepool_provisioned_bytes",
        r#type: Gauge,
        labels: &["namespace", "cluster", "pool"],
        help: "The sum of the sizes of the pool's volumes.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagenode_capacity_bytes",
        r#type: Gauge,
        labels: &["namespace", "cluster", "node"],
        help: "The storage node's capacity: the size of its online devices.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagenode_used_bytes",
        r#type: Gauge,
        labels: &["namespace", "cluster", "node"],
        help: "The bytes of the storage node holding data.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_storagenode_status_state",
        r#type: Gauge,
        labels: &["namespace", "cluster", "node", "status"],
        help: "1 for the status the control plane reports for the storage node (online, offline, unreachable, in_restart, ...), 0 for the others it has reported.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_persistentvolume_capacity_bytes",
        r#type: Gauge,
        labels: &[
            "namespace",
            "cluster",
            "pool",
            "persistentvolume",
            "claim_namespace",
            "claim",
        ],
        help: "The volume's size.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_persistentvolume_used_bytes",
        r#type: Gauge,
        labels: &[
            "namespace",
            "cluster",
            "pool",
            "persistentvolume",
            "claim_namespace",
            "claim",
        ],
        help: "The bytes of the volume holding data.",
        exporter: Operator,
    },
    Family {
        name: "simplyblock_persistentvolume_replication_lag_seconds",
        r#type: Gauge,
        labels: &[
            "namespace",
            "cluster",
            "pool",
            "persistentvolume",
            "claim_namespace",
            "claim",
        ],
        help: "For a replicated volume: the age of the newest snapshot the remote site holds.",
        exporter: Operator,
    },
];

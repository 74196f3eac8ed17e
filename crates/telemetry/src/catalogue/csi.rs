//! The CSI driver's families and those of the sidecars the chart runs next to it.
//!
//! The driver's `cluster` label is the cluster the call's volume, snapshot or class
//! names (empty when it names none): bounded by the clusters the CSI secret lists, never
//! a volume id.

use super::{
    Exporter::{CsiController, CsiNode, Sidecar},
    Family,
    Type::*,
};

pub(super) const FAMILIES: &[Family] = &[
    Family {
        name: "simplyblock_csi_operations_total",
        r#type: Counter,
        labels: &["method", "cluster", "code"],
        help: "gRPC calls the driver answered, by full method name and gRPC status code (OK, InvalidArgument, ...); the node plugin exports it too.",
        exporter: CsiController,
    },
    Family {
        name: "simplyblock_csi_operation_duration_seconds",
        r#type: Histogram,
        labels: &["method", "cluster"],
        help: "How long the driver took to answer a gRPC call, whatever its outcome; the node plugin exports it too.",
        exporter: CsiController,
    },
    Family {
        name: "simplyblock_csi_attach_errors_total",
        r#type: Counter,
        labels: &["cluster", "reason"],
        help: "Volume attaches that failed on the node (NodeStageVolume at its connect or attach step; the driver serves no ControllerPublishVolume), by gRPC status code as the reason.",
        exporter: CsiNode,
    },
    Family {
        name: "simplyblock_csi_mount_errors_total",
        r#type: Counter,
        labels: &["reason"],
        help: "NodeStageVolume and NodePublishVolume calls that failed, by the step that failed: request, connect, attach, format, mount or publish.",
        exporter: CsiNode,
    },
    Family {
        name: "simplyblock_csi_volumes_staged_count",
        r#type: Gauge,
        labels: &[],
        help: "Volumes staged on this node (those the node plugin keeps a stage record of).",
        exporter: CsiNode,
    },
    Family {
        name: "csi_sidecar_operations_seconds",
        r#type: Histogram,
        labels: &["driver_name", "method_name", "grpc_status_code"],
        help: "How long a CSI sidecar's gRPC call to the driver took, by its outcome (csi-lib-utils; the provisioner, attacher and resizer add a `migrated` label).",
        exporter: Sidecar,
    },
];

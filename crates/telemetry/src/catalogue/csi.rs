//! The CSI driver's families and those of the sidecars the chart runs next to it.

use super::{Exporter::Sidecar, Family, Type::*};

pub(super) const FAMILIES: &[Family] = &[Family {
    name: "csi_sidecar_operations_seconds",
    r#type: Histogram,
    labels: &["driver_name", "method_name", "grpc_status_code"],
    help: "How long a CSI call a sidecar made to the driver took, by method and gRPC status.",
    exporter: Sidecar,
}];

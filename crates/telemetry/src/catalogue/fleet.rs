//! The fleet as the control plane reports it, exported by the operator: capacity, health
//! and I/O per cluster, pool, storage node, device and volume.

use super::Family;

pub(super) const FAMILIES: &[Family] = &[];

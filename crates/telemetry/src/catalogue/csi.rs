//! The CSI driver's families and those of the sidecars the chart runs next to it.

use super::Family;

pub(super) const FAMILIES: &[Family] = &[];

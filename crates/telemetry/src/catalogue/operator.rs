//! The operator's own families: reconciles, operations and the phases of its kinds.

use super::Family;

pub(super) const FAMILIES: &[Family] = &[];

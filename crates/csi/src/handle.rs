//! Volume and snapshot handles and the NQN formats: their wire format is the API crate's,
//! shared with the operator, which reads the handles the driver writes.

pub use simplyblock_api::volume_handle::*;

/// The CSI driver name; also the StorageClass provisioner.
pub const DRIVER_NAME: &str = simplyblock_api::keys::CSI_DRIVER_NAME;

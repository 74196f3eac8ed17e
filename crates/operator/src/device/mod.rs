//! StorageDevice: the mirror of each StorageNode's drives ([`mirror`]) and the
//! StorageDeviceOps controller ([`ops`]).

pub mod mirror;
pub mod ops;

//! StoragePool: the pool in the control plane and its StorageClasses; StoragePoolOps.

pub mod access;
pub mod class;
pub mod controller;
pub mod ops;

//! Backups: the StorageBackupOps controller (restore a backup into a new claim).

pub mod restore;

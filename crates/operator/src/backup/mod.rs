//! Backups: StorageBackupPolicy (backups on a schedule for the claims a selector picks),
//! StorageBackup (records of what a cluster's store holds, and requests for one backup
//! of a claim), and StorageBackupOps (a restore into a new claim, [`restore`]).

pub mod claims;
pub mod mirror;
pub mod policy;
pub mod request;
pub mod restore;

use std::sync::Arc;

use crate::runtime::context::Context;

/// The backup controllers, until the operator stops.
pub async fn run(ctx: Arc<Context>) {
    futures::join!(
        policy::run(ctx.clone()),
        mirror::run(ctx.clone()),
        request::run(ctx.clone()),
        restore::run(ctx),
    );
}

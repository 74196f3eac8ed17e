//! The control plane's `/api/v2` routes, one module per resource, and the table that sends
//! a routed, authenticated request to its resource's handler; also the workers'
//! storage-node API ([`snode`]). What the resource modules share (the request, record
//! lookups) sits in [`request`] and [`lookup`], which import none of them.

mod backup;
mod cluster;
mod device;
mod group;
mod lookup;
mod management;
mod migration;
mod node;
mod pool;
mod pool_hosts;
mod replication;
mod request;
mod snapshot;
pub mod snode;
mod sync;
mod task;
mod volume;
mod volume_create;

pub use request::ApiReq;

use simplyblock_controlplane::routes as api;

use crate::reply::ApiResult;
use crate::sim::{Sim, St};

type Handler = fn(&mut St<'_>, &ApiReq) -> ApiResult;

/// Route template prefix → its resource's handler. The first prefix the route starts with
/// wins, so a prefix stands before any shorter one it begins with.
const RESOURCES: &[(&str, Handler)] = &[
    (api::VOLUME_REPLICATION, replication::volume_relationship),
    (api::VOLUME_SNAPSHOTS, snapshot::handle),
    (api::VOLUME_BACKUPS, backup::handle),
    // A prefix: a pool's volume routes.
    (
        "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes",
        volume::handle,
    ),
    // A prefix: a pool's snapshot routes.
    (
        "/clusters/{cluster_id}/storage-pools/{pool_id}/snapshots",
        snapshot::handle,
    ),
    (api::POOLS, pool::handle),
    (api::DEVICES, device::handle),
    (api::STORAGE_NODES, node::handle),
    (api::TASKS, task::handle),
    (api::CONSISTENCY_GROUPS, group::handle),
    // A prefix: a cluster's backup routes.
    (api::BACKUPS, backup::handle),
    (api::MIGRATIONS, migration::handle),
    // A prefix: a cluster's replication targets, policies and relationships.
    (
        "/clusters/{cluster_id}/replication/",
        replication::targets_and_policies,
    ),
    (api::CLUSTERS, cluster::handle),
    // A prefix: the management nodes' routes, which the client does not call.
    ("/management-nodes/", management::handle),
];

/// Dispatch one routed, authenticated request.
pub fn handle(sim: &Sim, req: &ApiReq) -> ApiResult {
    sim.mutate(|st| {
        lookup::resolve_parents(st.t, req)?;
        match RESOURCES
            .iter()
            .find(|(prefix, _)| req.route.starts_with(prefix))
        {
            Some((_, handler)) => handler(st, req),
            None => Err(req.unsimulated()),
        }
    })
}

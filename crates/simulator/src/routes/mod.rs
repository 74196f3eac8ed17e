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
mod replication;
mod request;
mod snapshot;
pub mod snode;
mod sync;
mod task;
mod volume;
mod volume_create;

pub use request::ApiReq;

use crate::reply::ApiResult;
use crate::sim::{Sim, St};

type Handler = fn(&mut St<'_>, &ApiReq) -> ApiResult;

/// Route template prefix → its resource's handler. The first prefix the route starts with
/// wins, so a prefix stands before any shorter one it begins with.
const RESOURCES: &[(&str, Handler)] = &[
    (
        "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/replication/",
        replication::volume_relationship,
    ),
    (
        "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/snapshots",
        snapshot::handle,
    ),
    (
        "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes/{volume_id}/backups",
        backup::handle,
    ),
    (
        "/clusters/{cluster_id}/storage-pools/{pool_id}/volumes",
        volume::handle,
    ),
    (
        "/clusters/{cluster_id}/storage-pools/{pool_id}/snapshots",
        snapshot::handle,
    ),
    ("/clusters/{cluster_id}/storage-pools/", pool::handle),
    (
        "/clusters/{cluster_id}/storage-nodes/{storage_node_id}/devices/",
        device::handle,
    ),
    ("/clusters/{cluster_id}/storage-nodes/", node::handle),
    ("/clusters/{cluster_id}/tasks/", task::handle),
    ("/clusters/{cluster_id}/consistency-groups/", group::handle),
    ("/clusters/{cluster_id}/backups/", backup::handle),
    (
        "/clusters/{cluster_id}/subsystems/{nqn}/migrations/",
        migration::handle,
    ),
    (
        "/clusters/{cluster_id}/replication/",
        replication::targets_and_policies,
    ),
    ("/clusters/", cluster::handle),
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

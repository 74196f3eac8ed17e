//! The csi-addons VolumeGroup service: a volume group is a consistency group of the
//! control plane, named by its `cg:{cluster}:{group}` handle, which the Replication
//! service's group path takes (a VolumeGroupReplication).
//!
//! Volumes join a consistency group when they are created, from their claim's
//! `storage.simplyblock.io/consistency-group` label, and never later. So CreateVolumeGroup
//! finds the group whose members are exactly the volumes named; a membership change may
//! only take members out; and deleting a volume group deletes neither the volumes
//! (`DO_NOT_ALLOW_VG_TO_DELETE_VOLUMES`) nor the group, which lives as long as its members.

use std::collections::BTreeSet;
use std::sync::Arc;

use simplyblock_controlplane::Client;
use tonic::{Request, Response, Status};
use uuid::Uuid;

use crate::clusters::Clusters;
use crate::controller::page;
use crate::error::{CsiError, Result};
use crate::group_snapshot::{groups, open_members, pools_of, the_group, volumes_on_one_cluster};
use crate::handle::{PoolRef, VolumeHandle};
use crate::proto::csi::v1 as csi;
use crate::proto::csiaddons::volumegroup as vg;
use crate::replication::GroupHandle;
use vg::controller_server::Controller;

/// The VolumeGroup service.
#[derive(Debug)]
pub struct VolumeGroupService {
    clusters: Arc<Clusters>,
}

impl VolumeGroupService {
    pub fn new(clusters: Arc<Clusters>) -> Self {
        Self { clusters }
    }

    /// Group `g` of `cluster` with `members` as the sidecar sees it.
    async fn view(
        &self,
        client: &Client,
        cluster: Uuid,
        group: Uuid,
        members: &BTreeSet<Uuid>,
    ) -> Result<vg::VolumeGroup> {
        let mut volumes = Vec::new();
        for (v, pool) in pools_of(client, cluster, members.iter().copied()).await? {
            let size = client.get_volume(cluster, pool, v).await?.size;
            volumes.push(csi::Volume {
                capacity_bytes: size as i64,
                volume_id: VolumeHandle {
                    cluster,
                    pool: PoolRef::Id(pool),
                    volume: v,
                }
                .to_string(),
                ..Default::default()
            });
        }
        Ok(vg::VolumeGroup {
            volume_group_id: GroupHandle { cluster, group }.to_string(),
            volume_group_context: Default::default(),
            volumes,
        })
    }
}

/// The volumes of `ids` (one cluster's), or every problem with them at once.
fn parse_volumes(ids: &[String]) -> Result<(Uuid, BTreeSet<Uuid>)> {
    let mut problems = Vec::new();
    let handles = volumes_on_one_cluster(
        ids,
        "a volume group is one consistency group",
        &mut problems,
    );
    if handles.is_empty() && problems.is_empty() {
        problems.push("volume_ids must name the volumes of a consistency group: a group is formed when its volumes are created, from their claims' label storage.simplyblock.io/consistency-group".into());
    }
    if !problems.is_empty() {
        return Err(CsiError::InvalidArgument(problems.join("; ")));
    }
    Ok((
        handles[0].cluster,
        handles.iter().map(|h| h.volume).collect(),
    ))
}

/// The open members of the group `h` names; NOT_FOUND when the control plane has no such
/// group.
async fn group_members(client: &Client, h: &GroupHandle) -> Result<BTreeSet<Uuid>> {
    open_members(client, h.cluster, h.group)
        .await
        .map_err(|e| match e {
            CsiError::ControlPlane(ref c) if c.is_not_found() => {
                CsiError::NotFound(format!("volume group {h}"))
            }
            e => e,
        })
}

type R<T> = std::result::Result<Response<T>, Status>;

#[tonic::async_trait]
impl Controller for VolumeGroupService {
    async fn create_volume_group(
        &self,
        request: Request<vg::CreateVolumeGroupRequest>,
    ) -> R<vg::CreateVolumeGroupResponse> {
        let req = request.into_inner();
        if req.name.is_empty() {
            return Err(CsiError::InvalidArgument("name is required".into()).into());
        }
        let (cluster, wanted) = parse_volumes(&req.volume_ids)?;
        let client = self.clusters.client(cluster)?;
        let all = groups(&client, cluster).await?;
        let g = the_group(&all, &wanted)?;
        let view = self.view(&client, cluster, g.id, &g.members).await?;
        Ok(Response::new(vg::CreateVolumeGroupResponse {
            volume_group: Some(view),
        }))
    }

    async fn modify_volume_group_membership(
        &self,
        request: Request<vg::ModifyVolumeGroupMembershipRequest>,
    ) -> R<vg::ModifyVolumeGroupMembershipResponse> {
        let req = request.into_inner();
        let h = GroupHandle::parse(&req.volume_group_id)?;
        let client = self.clusters.client(h.cluster)?;
        let current = group_members(&client, &h).await?;
        let wanted: BTreeSet<Uuid> = if req.volume_ids.is_empty() {
            BTreeSet::new()
        } else {
            let (cluster, wanted) = parse_volumes(&req.volume_ids)?;
            if cluster != h.cluster {
                return Err(CsiError::InvalidArgument(format!(
                    "the volumes are on cluster {cluster}, the volume group {h} on {}",
                    h.cluster
                ))
                .into());
            }
            wanted
        };
        let joining: Vec<String> = wanted.difference(&current).map(Uuid::to_string).collect();
        if !joining.is_empty() {
            return Err(CsiError::FailedPrecondition(format!(
                "volumes {} cannot join volume group {h}: a volume joins a consistency group only when it is created, from its claim's label storage.simplyblock.io/consistency-group",
                joining.join(", ")
            ))
            .into());
        }
        for v in current.difference(&wanted) {
            match client
                .remove_consistency_group_member(h.cluster, h.group, *v)
                .await
            {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(CsiError::from(e).into()),
            }
        }
        let view = self.view(&client, h.cluster, h.group, &wanted).await?;
        Ok(Response::new(vg::ModifyVolumeGroupMembershipResponse {
            volume_group: Some(view),
        }))
    }

    async fn delete_volume_group(
        &self,
        request: Request<vg::DeleteVolumeGroupRequest>,
    ) -> R<vg::DeleteVolumeGroupResponse> {
        let req = request.into_inner();
        // The group lives as long as its members; its volumes are never deleted with it.
        GroupHandle::parse(&req.volume_group_id)?;
        Ok(Response::new(vg::DeleteVolumeGroupResponse {}))
    }

    async fn list_volume_groups(
        &self,
        request: Request<vg::ListVolumeGroupsRequest>,
    ) -> R<vg::ListVolumeGroupsResponse> {
        let req = request.into_inner();
        let mut all = Vec::new();
        let mut ids = self.clusters.ids();
        ids.sort();
        for cluster in ids {
            let client = self.clusters.client(cluster)?;
            for g in groups(&client, cluster).await? {
                all.push((cluster, g));
            }
        }
        let (window, next) = page(&all, req.max_entries, &req.starting_token)?;
        let mut entries = Vec::new();
        for (cluster, g) in window {
            let client = self.clusters.client(cluster)?;
            entries.push(vg::list_volume_groups_response::Entry {
                volume_group: Some(self.view(&client, cluster, g.id, &g.members).await?),
            });
        }
        Ok(Response::new(vg::ListVolumeGroupsResponse {
            entries,
            next_token: next,
        }))
    }

    async fn controller_get_volume_group(
        &self,
        request: Request<vg::ControllerGetVolumeGroupRequest>,
    ) -> R<vg::ControllerGetVolumeGroupResponse> {
        let req = request.into_inner();
        let h = GroupHandle::parse(&req.volume_group_id)?;
        let client = self.clusters.client(h.cluster)?;
        let members = group_members(&client, &h).await?;
        let view = self.view(&client, h.cluster, h.group, &members).await?;
        Ok(Response::new(vg::ControllerGetVolumeGroupResponse {
            volume_group: Some(view),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_ids_are_checked_all_at_once() {
        let c1 = Uuid::from_u128(1);
        let c2 = Uuid::from_u128(2);
        let p = Uuid::from_u128(3);
        let v = |c: Uuid, n: u128| {
            VolumeHandle {
                cluster: c,
                pool: PoolRef::Id(p),
                volume: Uuid::from_u128(n),
            }
            .to_string()
        };
        let (cluster, set) = parse_volumes(&[v(c1, 10), v(c1, 11)]).expect("one cluster");
        assert_eq!(cluster, c1);
        assert_eq!(set.len(), 2);
        let e = parse_volumes(&["nope".into(), v(c1, 10), v(c2, 11)]).expect_err("bad");
        let text = e.to_string();
        assert!(
            text.contains("\"nope\"") && text.contains("2 clusters"),
            "{text}"
        );
        let e = parse_volumes(&[]).expect_err("empty");
        assert!(e.to_string().contains("consistency-group"), "{e}");
    }
}

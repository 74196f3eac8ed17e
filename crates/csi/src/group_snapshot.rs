//! The CSI GroupController service: a group snapshot is one generation of a consistency
//! group (every open member taken together, numbered `group_seq`). The request's volumes
//! must be exactly the group's open members; the group is formed at CreateVolume from
//! the claims' `storage.simplyblock.io/consistency-group` label.
//!
//! The group snapshot id is `{cluster}:{group}:{group_seq}`; each member's snapshot id
//! is an ordinary snapshot handle, so a member restores like any snapshot. The name the
//! snapshotter gives is recorded with the generation, which makes a retried create find
//! it.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use simplyblock_controlplane::{Client, GroupSnapshot};
use tonic::{Request, Response, Status};
use uuid::Uuid;

use crate::clusters::Clusters;
use crate::controller::{snapshot_entry, timestamp};
use crate::error::{CsiError, Result};
use crate::handle::{PoolRef, VolumeHandle};
use crate::locks::KeyLocks;
use crate::proto::csi::v1 as csi;
use crate::proto::csi::v1::group_controller_server::GroupController;
use csi::group_controller_service_capability::rpc::Type as GroupCap;

/// A group snapshot's id: the generation `seq` of group `group` on `cluster`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupSnapshotId {
    pub cluster: Uuid,
    pub group: Uuid,
    pub seq: u64,
}

impl GroupSnapshotId {
    pub fn parse(s: &str) -> Option<Self> {
        let mut parts = s.split(':');
        let id = GroupSnapshotId {
            cluster: Uuid::parse_str(parts.next()?).ok()?,
            group: Uuid::parse_str(parts.next()?).ok()?,
            seq: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(id)
    }
}

impl fmt::Display for GroupSnapshotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.cluster, self.group, self.seq)
    }
}

/// A consistency group as the membership check sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupView {
    pub id: Uuid,
    pub name: String,
    /// Open members only.
    pub members: BTreeSet<Uuid>,
}

/// The group whose open members are exactly `wanted`, or why there is none: the volumes
/// are in no group, spread over groups, or are not all of their group.
pub fn the_group<'g>(groups: &'g [GroupView], wanted: &BTreeSet<Uuid>) -> Result<&'g GroupView> {
    let holding: Vec<&GroupView> = groups
        .iter()
        .filter(|g| !g.members.is_disjoint(wanted))
        .collect();
    let list = |s: &BTreeSet<Uuid>| s.iter().map(Uuid::to_string).collect::<Vec<_>>().join(", ");
    match holding.as_slice() {
        [] => Err(CsiError::FailedPrecondition(format!(
            "volumes {} are in no consistency group; a group snapshot takes a consistency group, which volumes join when their claims carry the label storage.simplyblock.io/consistency-group at creation",
            list(wanted)
        ))),
        [g] => {
            let outside: BTreeSet<Uuid> = wanted.difference(&g.members).copied().collect();
            let left_out: BTreeSet<Uuid> = g.members.difference(wanted).copied().collect();
            if outside.is_empty() && left_out.is_empty() {
                return Ok(g);
            }
            let mut why = Vec::new();
            if !outside.is_empty() {
                why.push(format!("{} are not in it", list(&outside)));
            }
            if !left_out.is_empty() {
                why.push(format!("its members {} are not named", list(&left_out)));
            }
            Err(CsiError::FailedPrecondition(format!(
                "a group snapshot takes every member of consistency group {:?} at once, but the request does not name exactly its members: {}; select exactly the group's claims",
                g.name,
                why.join(" and ")
            )))
        }
        many => Err(CsiError::FailedPrecondition(format!(
            "volumes {} belong to {} consistency groups ({}); a group snapshot takes one group",
            list(wanted),
            many.len(),
            many.iter()
                .map(|g| format!("{:?}", g.name))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Every consistency group of `cluster` with its open members.
pub async fn groups(client: &Client, cluster: Uuid) -> Result<Vec<GroupView>> {
    let mut out = Vec::new();
    for g in client.list_consistency_groups(cluster, None).await? {
        out.push(GroupView {
            members: open_members(client, cluster, g.id).await?,
            id: g.id,
            name: g.name,
        });
    }
    Ok(out)
}

/// The open members of group `group` of `cluster`.
pub async fn open_members(client: &Client, cluster: Uuid, group: Uuid) -> Result<BTreeSet<Uuid>> {
    Ok(client
        .consistency_group_members(cluster, group)
        .await?
        .into_iter()
        .filter(|m| m.removed_seq == 0)
        .map(|m| m.lvol_id)
        .collect())
}

/// The pool each of `volumes` of `cluster` is in.
pub async fn pools_of(
    client: &Client,
    cluster: Uuid,
    volumes: impl Iterator<Item = Uuid>,
) -> Result<Vec<(Uuid, Uuid)>> {
    let pools = client.list_pools(cluster).await?;
    let mut out = Vec::new();
    'member: for v in volumes {
        for p in &pools {
            match client.get_volume(cluster, p.id, v).await {
                Ok(_) => {
                    out.push((v, p.id));
                    continue 'member;
                }
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e.into()),
            }
        }
        return Err(CsiError::NotFound(format!(
            "volume {v} of cluster {cluster}, a member of a consistency group"
        )));
    }
    Ok(out)
}

/// The GroupController service.
#[derive(Debug)]
pub struct GroupControllerService {
    clusters: Arc<Clusters>,
    names: KeyLocks,
}

/// What the GroupController advertises.
pub const CAPABILITIES: &[GroupCap] = &[GroupCap::CreateDeleteGetVolumeGroupSnapshot];

impl GroupControllerService {
    pub fn new(clusters: Arc<Clusters>) -> Self {
        Self {
            clusters,
            names: KeyLocks::default(),
        }
    }

    /// The CSI view of generation `s`: each member's snapshot as a snapshot of its pool.
    async fn entry(
        &self,
        client: &Client,
        cluster: Uuid,
        group: Uuid,
        s: &GroupSnapshot,
        known_pools: &[(Uuid, Uuid)],
    ) -> Result<csi::VolumeGroupSnapshot> {
        let id = GroupSnapshotId {
            cluster,
            group,
            seq: s.group_seq,
        };
        let missing: Vec<Uuid> = s
            .members
            .iter()
            .map(|m| m.lvol_id)
            .filter(|v| !known_pools.iter().any(|(k, _)| k == v))
            .collect();
        let mut pools = known_pools.to_vec();
        pools.extend(pools_of(client, cluster, missing.into_iter()).await?);
        let mut snapshots = Vec::new();
        for m in &s.members {
            let pool = pools
                .iter()
                .find(|(v, _)| *v == m.lvol_id)
                .map(|(_, p)| *p)
                .ok_or_else(|| CsiError::Internal(format!("no pool for {}", m.lvol_id)))?;
            let snap = client
                .get_snapshot(cluster, pool, m.snapshot_id)
                .await
                .map_err(|e| {
                    if e.is_not_found() {
                        CsiError::NotFound(format!(
                            "snapshot {} of group snapshot {id}",
                            m.snapshot_id
                        ))
                    } else {
                        e.into()
                    }
                })?;
            let mut entry = snapshot_entry(cluster, pool, &snap);
            entry.group_snapshot_id = id.to_string();
            snapshots.push(entry);
        }
        Ok(csi::VolumeGroupSnapshot {
            group_snapshot_id: id.to_string(),
            ready_to_use: snapshots.iter().all(|s| s.ready_to_use),
            creation_time: s
                .created_at
                .as_deref()
                .and_then(timestamp)
                .or_else(|| snapshots.first().and_then(|s| s.creation_time)),
            snapshots,
        })
    }
}

type R<T> = std::result::Result<Response<T>, Status>;

#[tonic::async_trait]
impl GroupController for GroupControllerService {
    async fn group_controller_get_capabilities(
        &self,
        _r: Request<csi::GroupControllerGetCapabilitiesRequest>,
    ) -> R<csi::GroupControllerGetCapabilitiesResponse> {
        Ok(Response::new(csi::GroupControllerGetCapabilitiesResponse {
            capabilities: CAPABILITIES
                .iter()
                .map(|t| csi::GroupControllerServiceCapability {
                    r#type: Some(csi::group_controller_service_capability::Type::Rpc(
                        csi::group_controller_service_capability::Rpc { r#type: *t as i32 },
                    )),
                })
                .collect(),
        }))
    }

    async fn create_volume_group_snapshot(
        &self,
        request: Request<csi::CreateVolumeGroupSnapshotRequest>,
    ) -> R<csi::CreateVolumeGroupSnapshotResponse> {
        let req = request.into_inner();
        let mut problems = Vec::new();
        if req.name.is_empty() {
            problems.push("name is required".to_owned());
        }
        if req.source_volume_ids.is_empty() {
            problems.push("source_volume_ids must name at least one volume".to_owned());
        }
        let handles = volumes_on_one_cluster(
            &req.source_volume_ids,
            "a group snapshot takes one consistency group",
            &mut problems,
        );
        if !problems.is_empty() {
            return Err(CsiError::InvalidArgument(problems.join("; ")).into());
        }
        let cluster = handles[0].cluster;
        let client = self.clusters.client(cluster)?;
        let _g = self.names.lock(&req.name).await;
        let wanted: BTreeSet<Uuid> = handles.iter().map(|h| h.volume).collect();
        let groups = groups(&client, cluster).await?;
        // A retry finds the generation taken under this name, on whichever group.
        for g in &groups {
            let taken = client
                .list_group_snapshots(cluster, g.id)
                .await
                .map_err(CsiError::from)?;
            if let Some(s) = taken
                .iter()
                .find(|s| s.name.as_deref() == Some(req.name.as_str()))
            {
                let members: BTreeSet<Uuid> = s.members.iter().map(|m| m.lvol_id).collect();
                if members != wanted {
                    return Err(CsiError::AlreadyExists(format!(
                        "group snapshot {:?} exists with other volumes (of consistency group {:?}); choose another name",
                        req.name, g.name
                    ))
                    .into());
                }
                let entry = self.entry(&client, cluster, g.id, s, &[]).await?;
                return Ok(Response::new(csi::CreateVolumeGroupSnapshotResponse {
                    group_snapshot: Some(entry),
                }));
            }
        }
        let group = the_group(&groups, &wanted)?;
        let mut pools = Vec::new();
        for h in &handles {
            let pool = match &h.pool {
                PoolRef::Id(id) => *id,
                other => self.clusters.pool_id(cluster, other).await?,
            };
            pools.push((h.volume, pool));
        }
        let taken = client
            .create_named_group_snapshot(cluster, group.id, &req.name)
            .await
            .map_err(CsiError::from)?;
        let entry = self
            .entry(&client, cluster, group.id, &taken, &pools)
            .await?;
        Ok(Response::new(csi::CreateVolumeGroupSnapshotResponse {
            group_snapshot: Some(entry),
        }))
    }

    async fn delete_volume_group_snapshot(
        &self,
        request: Request<csi::DeleteVolumeGroupSnapshotRequest>,
    ) -> R<csi::DeleteVolumeGroupSnapshotResponse> {
        let req = request.into_inner();
        if req.group_snapshot_id.is_empty() {
            return Err(CsiError::InvalidArgument("group_snapshot_id is required".into()).into());
        }
        // An id this driver never issued names nothing to delete.
        let Some(id) = GroupSnapshotId::parse(&req.group_snapshot_id) else {
            return Ok(Response::new(csi::DeleteVolumeGroupSnapshotResponse {}));
        };
        let client = self.clusters.client(id.cluster)?;
        match client
            .delete_group_snapshot(id.cluster, id.group, id.seq)
            .await
        {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(CsiError::from(e).into()),
        }
        Ok(Response::new(csi::DeleteVolumeGroupSnapshotResponse {}))
    }

    async fn get_volume_group_snapshot(
        &self,
        request: Request<csi::GetVolumeGroupSnapshotRequest>,
    ) -> R<csi::GetVolumeGroupSnapshotResponse> {
        let req = request.into_inner();
        if req.group_snapshot_id.is_empty() {
            return Err(CsiError::InvalidArgument("group_snapshot_id is required".into()).into());
        }
        let id = GroupSnapshotId::parse(&req.group_snapshot_id).ok_or_else(|| {
            CsiError::NotFound(format!(
                "group snapshot {:?} (not a simplyblock group snapshot id)",
                req.group_snapshot_id
            ))
        })?;
        let client = self.clusters.client(id.cluster)?;
        let s = client
            .get_group_snapshot(id.cluster, id.group, id.seq)
            .await
            .map_err(|e| {
                if e.is_not_found() {
                    CsiError::NotFound(format!("group snapshot {id}"))
                } else {
                    e.into()
                }
            })?;
        let entry = self.entry(&client, id.cluster, id.group, &s, &[]).await?;
        // The snapshotter names the members it knows; one it does not hold is a mismatch.
        if !req.snapshot_ids.is_empty() {
            let ours: BTreeSet<&str> = entry
                .snapshots
                .iter()
                .map(|s| s.snapshot_id.as_str())
                .collect();
            let asked: BTreeSet<&str> = req.snapshot_ids.iter().map(String::as_str).collect();
            if ours != asked {
                return Err(CsiError::InvalidArgument(format!(
                    "snapshot_ids {asked:?} are not the members {ours:?} of group snapshot {id}"
                ))
                .into());
            }
        }
        Ok(Response::new(csi::GetVolumeGroupSnapshotResponse {
            group_snapshot: Some(entry),
        }))
    }
}

/// The volume handles of `ids`, with a problem added for each id that is not one and for
/// volumes on more than one cluster (`one_group` says why they must share one).
pub(crate) fn volumes_on_one_cluster(
    ids: &[String],
    one_group: &str,
    problems: &mut Vec<String>,
) -> Vec<VolumeHandle> {
    let mut handles = Vec::new();
    for v in ids {
        match VolumeHandle::parse(v) {
            Ok(h) => handles.push(h),
            Err(_) => problems.push(format!("{v:?} is not a simplyblock volume id")),
        }
    }
    let clusters: BTreeSet<Uuid> = handles.iter().map(|h| h.cluster).collect();
    if clusters.len() > 1 {
        problems.push(format!(
            "the volumes are on {} clusters; {one_group}, on one cluster",
            clusters.len()
        ));
    }
    handles
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn group(id: u128, name: &str, members: &[u128]) -> GroupView {
        GroupView {
            id: u(id),
            name: name.into(),
            members: members.iter().map(|m| u(*m)).collect(),
        }
    }

    fn set(v: &[u128]) -> BTreeSet<Uuid> {
        v.iter().map(|m| u(*m)).collect()
    }

    #[test]
    fn ids_round_trip_and_others_are_refused() {
        let id = GroupSnapshotId {
            cluster: u(1),
            group: u(2),
            seq: 7,
        };
        assert_eq!(GroupSnapshotId::parse(&id.to_string()), Some(id));
        for bad in [
            "",
            "x:y:1",
            &format!("{}:{}", u(1), u(2)),
            &format!("{}:{}:{}", u(1), u(2), u(3)),
            &format!("{}:{}:7:8", u(1), u(2)),
        ] {
            assert_eq!(GroupSnapshotId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn only_exactly_a_groups_members_make_a_group_snapshot() {
        let groups = [group(10, "db", &[1, 2]), group(20, "logs", &[3])];
        assert_eq!(the_group(&groups, &set(&[2, 1])).expect("db").id, u(10));

        let partial = the_group(&groups, &set(&[1])).expect_err("a part");
        assert_eq!(partial.code(), tonic::Code::FailedPrecondition);
        assert!(partial.to_string().contains("not named"), "{partial}");

        let extra = the_group(&groups, &set(&[1, 2, 9])).expect_err("an outsider");
        assert!(extra.to_string().contains("are not in it"), "{extra}");

        let spread = the_group(&groups, &set(&[1, 2, 3])).expect_err("two groups");
        assert!(
            spread.to_string().contains("2 consistency groups"),
            "{spread}"
        );

        let none = the_group(&groups, &set(&[8])).expect_err("no group");
        assert!(
            none.to_string()
                .contains("storage.simplyblock.io/consistency-group"),
            "{none}"
        );
    }
}

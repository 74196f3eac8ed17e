//! The consistency-group path of the Replication service: a `cg:` handle names a group,
//! and the verbs act on every member at once through the group's replication routes.
//!
//! The handle's cluster resolves the group it names and the group serving now (after a
//! failover, the group on the other site). Enable, Info and Resync act on the serving
//! group; Disable and Demote on this site's: the serving group if it is local, else the
//! named one if that is local, else the serving one. Promote is not resolved: the
//! control plane's group failover decides between nothing to do, a failback and a
//! failover. When the resolution fails, the handle is used as it is. The sync method's
//! demote and promote act on the named group for the class's site.

use std::collections::{BTreeMap, HashMap};

use simplyblock_controlplane::{DemoteOutcome, Failback, FailoverStatus};
use uuid::Uuid;

use super::{GroupHandle, ReplicationService, info, ready};
use crate::error::{CsiError, Result};
use crate::handle::{PoolRef, VolumeHandle};
use crate::proto::csiaddons::replication as repl;
use crate::replication_params::{Method, ReplicationParams, sync_route_error};

/// One group on one cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupAt {
    pub cluster: Uuid,
    pub group: Uuid,
}

impl std::fmt::Display for GroupAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "consistency group {} of cluster {}",
            self.group, self.cluster
        )
    }
}

/// The group a handle names and the group serving in its stead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    pub named: GroupAt,
    pub active: GroupAt,
    /// The control plane answered the resolution: the group is known.
    pub known: bool,
}

impl Resolved {
    /// The handle as it is, when the resolution cannot be asked.
    pub fn unresolved(g: &GroupHandle) -> Self {
        let at = GroupAt {
            cluster: g.cluster,
            group: g.group,
        };
        Self {
            named: at,
            active: at,
            known: false,
        }
    }

    /// The group Disable and Demote act on.
    pub fn local_site(&self, is_local: impl Fn(Uuid) -> bool) -> GroupAt {
        if is_local(self.active.cluster) {
            self.active
        } else if is_local(self.named.cluster) {
            self.named
        } else {
            self.active
        }
    }

    /// The `source_cluster_id` a group Resync names: the named group's cluster when it is
    /// local, else the lexically first local cluster, else the class's.
    pub fn resync_source(&self, local: &[Uuid], class_source: Option<Uuid>) -> Option<Uuid> {
        if local.contains(&self.named.cluster) {
            return Some(self.named.cluster);
        }
        local
            .iter()
            .min_by_key(|c| c.to_string())
            .copied()
            .or(class_source)
    }
}

impl ReplicationService {
    async fn resolve_group(&self, g: &GroupHandle) -> Resolved {
        let client = match self.clusters.client(g.cluster) {
            Ok(c) => c,
            Err(_) => return Resolved::unresolved(g),
        };
        match client.resolve_consistency_group(g.cluster, g.group).await {
            Ok(r) => {
                let at = |x: &simplyblock_controlplane::ConsistencyGroup| GroupAt {
                    cluster: if x.cluster_id.is_nil() {
                        g.cluster
                    } else {
                        x.cluster_id
                    },
                    group: x.id,
                };
                Resolved {
                    named: at(&r.named),
                    active: at(&r.active),
                    known: true,
                }
            }
            Err(e) => {
                tracing::warn!(group = %g, error = %e, "the group resolution failed; acting on the handle as it is");
                Resolved::unresolved(g)
            }
        }
    }

    fn local_group(&self, r: &Resolved) -> GroupAt {
        let local = self.clusters.local_ids();
        r.local_site(|c| local.contains(&c))
    }

    pub async fn enable_group(&self, g: &GroupHandle, p: &ReplicationParams) -> Result<()> {
        let Some(policy) = p.policy else {
            return Ok(());
        };
        if matches!(p.method, Method::Sync { .. }) {
            return Ok(());
        }
        let at = self.resolve_group(g).await.active;
        let client = self.clusters.client(at.cluster)?;
        match client
            .set_group_replication(at.cluster, at.group, Some(policy))
            .await
        {
            Ok(()) => Ok(()),
            // The destination has no group until a promote makes one.
            Err(e) if e.is_not_found() => {
                tracing::info!(group = %at, "enable: the group does not exist yet; nothing to attach");
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    pub async fn disable_group(&self, g: &GroupHandle, p: &ReplicationParams) -> Result<()> {
        if matches!(p.method, Method::Sync { .. }) {
            return Ok(());
        }
        let r = self.resolve_group(g).await;
        let at = self.local_group(&r);
        let client = self.clusters.client(at.cluster)?;
        match client
            .set_group_replication(at.cluster, at.group, None)
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if r.known && e.is_not_found() => {
                tracing::info!(group = %at, "disable: the group is gone; nothing left to do");
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    pub async fn demote_group(&self, g: &GroupHandle, p: &ReplicationParams) -> Result<()> {
        if let Method::Sync { site } = &p.method {
            let client = self.clusters.client(g.cluster)?;
            return client
                .sync_demote_group(g.cluster, g.group, site)
                .await
                .map_err(sync_route_error);
        }
        let r = self.resolve_group(g).await;
        let at = self.local_group(&r);
        let client = self.clusters.client(at.cluster)?;
        match client.demote_group_replication(at.cluster, at.group).await {
            Ok(DemoteOutcome::Done) => Ok(()),
            Ok(DemoteOutcome::Converging) => Err(CsiError::Aborted(format!(
                "the demote of {at} is still converging: its members' last writes are on their \
                 way to the replicas; retry"
            ))),
            Err(e) if r.known && e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Fail the group over as the handle names it; a member that could not fail over makes
    /// the call worth a retry.
    pub async fn promote_group(
        &self,
        g: &GroupHandle,
        p: &ReplicationParams,
        force: bool,
    ) -> Result<()> {
        if let Method::Sync { site } = &p.method {
            let client = self.clusters.client(g.cluster)?;
            let r = client
                .sync_promote_group(g.cluster, g.group, site, !force)
                .await
                .map_err(sync_route_error)?;
            tracing::info!(group = %g, site, members = r.members.len(), "promote: the group is served on the site");
            return Ok(());
        }
        let client = self.clusters.client(g.cluster)?;
        let results = client
            .failover_group_replication(g.cluster, g.group)
            .await?;
        let failed: Vec<String> = results
            .iter()
            .filter(|r| r.status == FailoverStatus::Failed)
            .map(|r| {
                format!(
                    "volume {}: {}",
                    r.lvol_id,
                    r.detail.as_deref().unwrap_or("failed")
                )
            })
            .collect();
        if !failed.is_empty() {
            return Err(CsiError::Aborted(format!(
                "consistency group {g} did not fail over completely ({}); retry once the \
                 members replicate",
                failed.join("; ")
            )));
        }
        tracing::info!(group = %g, members = results.len(), "promote: the group failed over");
        Ok(())
    }

    pub async fn resync_group(&self, g: &GroupHandle, p: &ReplicationParams) -> Result<bool> {
        if matches!(p.method, Method::Sync { .. }) {
            return Ok(true);
        }
        let r = self.resolve_group(g).await;
        let at = r.active;
        let source = r.resync_source(&self.clusters.local_ids(), p.source_cluster);
        let client = self.clusters.client(at.cluster)?;
        client
            .failback_group_replication(
                at.cluster,
                at.group,
                &Failback {
                    source_cluster_id: source,
                },
            )
            .await?;
        let st = client
            .group_replication_status(at.cluster, at.group)
            .await?;
        Ok(ready(&st))
    }

    pub async fn group_info(
        &self,
        g: &GroupHandle,
    ) -> Result<repl::GetVolumeReplicationInfoResponse> {
        let at = self.resolve_group(g).await.active;
        let client = self.clusters.client(at.cluster)?;
        let st = client
            .group_replication_status(at.cluster, at.group)
            .await?;
        Ok(info(&st))
    }

    /// The group's own id and an identity map over the handles of its open members, which
    /// Ramen needs to restore a volume group replication.
    pub async fn group_destination(&self, g: &GroupHandle) -> Result<repl::ReplicationDestination> {
        use repl::replication_destination::{Type, VolumeGroupDestination};
        let handles = self.member_handles(g).await.map_err(|e| {
            CsiError::ControlPlane(simplyblock_controlplane::Error::Unavailable {
                method: "GET".into(),
                path: format!(
                    "/clusters/{}/consistency-groups/{}/members",
                    g.cluster, g.group
                ),
                message: format!("the members of consistency group {g} cannot be listed: {e}"),
            })
        })?;
        Ok(repl::ReplicationDestination {
            r#type: Some(Type::Volumegroup(VolumeGroupDestination {
                volume_group_id: g.to_string(),
                volume_ids: handles.into_iter().map(|h| (h.clone(), h)).collect(),
            })),
        })
    }

    /// The CSI handles of the group's open members; each member's pool is found among the
    /// cluster's pools.
    async fn member_handles(&self, g: &GroupHandle) -> Result<Vec<String>> {
        let client = self.clusters.client(g.cluster)?;
        let members = client.consistency_group_members(g.cluster, g.group).await?;
        let mut pool_of: HashMap<Uuid, Uuid> = HashMap::new();
        for pool in client.list_pools(g.cluster).await? {
            for v in client.list_volumes(g.cluster, pool.id).await? {
                pool_of.insert(v.id, pool.id);
            }
        }
        let mut out = BTreeMap::new();
        for m in members.iter().filter(|m| m.is_open()) {
            let pool = pool_of.get(&m.lvol_id).ok_or_else(|| {
                CsiError::NotFound(format!(
                    "volume {} of consistency group {g} in any pool of cluster {}",
                    m.lvol_id, g.cluster
                ))
            })?;
            let h = VolumeHandle {
                cluster: g.cluster,
                pool: PoolRef::Id(*pool),
                volume: m.lvol_id,
            };
            out.insert(h.to_string(), ());
        }
        Ok(out.into_keys().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(c: u128, g: u128) -> GroupAt {
        GroupAt {
            cluster: Uuid::from_u128(c),
            group: Uuid::from_u128(g),
        }
    }

    #[test]
    fn the_local_site_prefers_the_serving_group_then_the_named_one() {
        let r = Resolved {
            named: at(1, 10),
            active: at(2, 20),
            known: true,
        };
        let only = |c: u128| move |x: Uuid| x == Uuid::from_u128(c);
        assert_eq!(r.local_site(only(2)), at(2, 20));
        assert_eq!(r.local_site(only(1)), at(1, 10));
        assert_eq!(
            r.local_site(only(3)),
            at(2, 20),
            "no local group: the serving one"
        );
        assert_eq!(r.local_site(|_| true), at(2, 20));
    }

    #[test]
    fn the_group_resync_source_is_the_named_cluster_when_local() {
        let r = Resolved {
            named: at(1, 10),
            active: at(2, 20),
            known: true,
        };
        let (c1, c2, c9) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(9));
        assert_eq!(r.resync_source(&[c2, c1], None), Some(c1));
        assert_eq!(r.resync_source(&[c9, c2], None), Some(c2));
        assert_eq!(r.resync_source(&[], Some(c9)), Some(c9));
        assert_eq!(r.resync_source(&[], None), None);
    }

    #[test]
    fn an_unresolved_handle_is_used_as_it_is() {
        let g = GroupHandle {
            cluster: Uuid::from_u128(1),
            group: Uuid::from_u128(10),
        };
        let r = Resolved::unresolved(&g);
        assert_eq!((r.named, r.active, r.known), (at(1, 10), at(1, 10), false));
    }
}

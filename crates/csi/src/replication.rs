//! The csi-addons Replication service (`replication.Controller`), served beside CSI in the
//! controller mode.
//!
//! Every verb first finds what the request names (a volume handle, or a `cg:` consistency
//! group handle), then the member of the volume's replication chain it acts on:
//!
//! | Verb | Member | Call |
//! |---|---|---|
//! | Enable | local member | attach the class's policy; start replicating if the member is no source yet |
//! | Disable | local member | detach the policy (an explicit `null`) |
//! | Demote | local member | `…/replication/demote`: 204 done, 202 still converging (ABORTED) |
//! | Promote | active end | `…/replication/failover?planned=!force` |
//! | Resync | active end | `…/replication/failback`, then the lag decides readiness |
//! | Info | active end | `…/replication/status` |
//!
//! A 404 from Disable or Demote on a member of a known chain is a reaped old primary and
//! counts as done. The sync method (`replication.storage.simplyblock.io/method=sync`) makes
//! Enable, Disable and Resync successes without a call, and Demote and Promote act on the
//! handle's own volume for the class's site. A `cg:` handle takes the group
//! path ([`group`]).

use std::sync::Arc;

use simplyblock_controlplane::{Client, DemoteOutcome, Failback, ReplicationStatus, VolumeUpdate};
use tonic::{Request, Response, Status};
use uuid::Uuid;

use crate::chain::{self, Chain};
use crate::clusters::Clusters;
use crate::controller::timestamp;
use crate::error::{CsiError, Result};
use crate::handle::VolumeHandle;
use crate::locks::KeyLocks;
use crate::proto::csiaddons::replication as repl;
use crate::replication_params::{Method, POLICY_ID, ReplicationParams, sync_route_error};
use repl::controller_server::Controller;
use repl::get_volume_replication_info_response::Status as Health;

#[path = "replication_group.rs"]
pub mod group;

/// The prefix of a consistency-group handle: `cg:{clusterUUID}:{groupUUID}`.
pub const GROUP_PREFIX: &str = "cg:";

/// A consistency group as the csi-addons sidecar names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupHandle {
    pub cluster: Uuid,
    pub group: Uuid,
}

impl GroupHandle {
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || {
            CsiError::InvalidArgument(format!(
                "{s:?} is not a consistency-group handle cg:<cluster UUID>:<group UUID>"
            ))
        };
        let rest = s.strip_prefix(GROUP_PREFIX).ok_or_else(bad)?;
        let (c, g) = rest.split_once(':').ok_or_else(bad)?;
        Ok(Self {
            cluster: Uuid::parse_str(c).map_err(|_| bad())?,
            group: Uuid::parse_str(g).map_err(|_| bad())?,
        })
    }
}

impl std::fmt::Display for GroupHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{GROUP_PREFIX}{}:{}", self.cluster, self.group)
    }
}

/// What a replication request acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    Volume(VolumeHandle),
    Group(GroupHandle),
}

impl Subject {
    /// The id the request names: the volume source's id, else the volume-group source's id.
    /// (The flat `volume_id` of older sidecars is a reserved field of the vendored spec, so
    /// no request that reaches this driver carries it.) A `cg:` id is a group whatever
    /// field carries it.
    pub fn of(source: Option<&repl::ReplicationSource>) -> Result<Self> {
        use repl::replication_source::Type;
        let id = match source.and_then(|s| s.r#type.as_ref()) {
            Some(Type::Volume(v)) => v.volume_id.as_str(),
            Some(Type::Volumegroup(g)) => g.volume_group_id.as_str(),
            None => "",
        };
        let id = id.trim();
        if id.is_empty() {
            return Err(CsiError::InvalidArgument(
                "the request names no volume: set replication_source.volume.volume_id or \
                 replication_source.volumegroup.volume_group_id"
                    .into(),
            ));
        }
        if id.starts_with(GROUP_PREFIX) {
            return GroupHandle::parse(id).map(Subject::Group);
        }
        VolumeHandle::parse(id).map(Subject::Volume).map_err(|_| {
            CsiError::InvalidArgument(format!(
                "{id:?} is not a simplyblock volume handle cluster:pool:volume"
            ))
        })
    }

    fn key(&self) -> String {
        match self {
            Subject::Volume(h) => h.to_string(),
            Subject::Group(g) => g.to_string(),
        }
    }
}

/// The Replication service.
#[derive(Debug)]
pub struct ReplicationService {
    clusters: Arc<Clusters>,
    locks: KeyLocks,
}

impl ReplicationService {
    pub fn new(clusters: Arc<Clusters>) -> Self {
        Self {
            clusters,
            locks: KeyLocks::default(),
        }
    }

    async fn chain(&self, start: &VolumeHandle) -> Result<Chain> {
        // The walk asks each member's own cluster, as the CSI secret lists them.
        chain::resolve(self.clusters.as_ref(), start).await
    }

    /// The member Enable, Disable and Demote act on.
    fn local_member(&self, chain: &Chain) -> VolumeHandle {
        let local = self.clusters.local_ids();
        chain.local_member(|c| local.contains(&c)).clone()
    }

    /// The client and pool UUID of one chain member.
    async fn at(&self, member: &VolumeHandle) -> Result<(Arc<Client>, Uuid)> {
        let client = self.clusters.client(member.cluster)?;
        let pool = self.clusters.pool_id(member.cluster, &member.pool).await?;
        Ok((client, pool))
    }

    /// Attach the class's policy to the local member, and start replicating it when it is
    /// not yet the source of a relationship (attaching alone only names the schedule; the
    /// start follows the policy's target).
    ///
    /// A member the control plane does not know is a failover target whose volume Promote
    /// creates: nothing to do. A 404 while the member exists names the policy instead.
    pub async fn enable_volume(&self, h: &VolumeHandle, p: &ReplicationParams) -> Result<()> {
        let Some(policy) = p.policy else {
            return Ok(());
        };
        if matches!(p.method, Method::Sync { .. }) {
            return Ok(());
        }
        let chain = self.chain(h).await?;
        let m = self.local_member(&chain);
        let (client, pool) = self.at(&m).await?;
        let attach = VolumeUpdate {
            replication_policy_id: Some(Some(policy)),
            ..VolumeUpdate::default()
        };
        match client
            .update_volume(m.cluster, pool, m.volume, &attach)
            .await
        {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {
                return match client.get_volume(m.cluster, pool, m.volume).await {
                    Ok(_) => Err(CsiError::InvalidArgument(format!(
                        "cluster {} refused replication policy {policy} for volume {m}: {}; set \
                         the replication class's {POLICY_ID} to a policy of that cluster",
                        m.cluster,
                        e.message()
                    ))),
                    Err(gone) if gone.is_not_found() => {
                        tracing::info!(volume = %m, "enable: the member does not exist yet; nothing to attach");
                        Ok(())
                    }
                    Err(other) => Err(other.into()),
                };
            }
            Err(e) => return Err(e.into()),
        }
        // A member that already replicates (or replicated, and failed over) keeps its
        // relationship: starting it again would resume writes into a promoted replica.
        match client.replication_relationship(m.cluster, m.volume).await {
            Ok(r) if r.is_source => Ok(()),
            Ok(_) => self.start(&client, &m, pool, policy).await,
            Err(e) if e.is_not_found() => self.start(&client, &m, pool, policy).await,
            Err(e) => Err(e.into()),
        }
    }

    async fn start(
        &self,
        client: &Client,
        m: &VolumeHandle,
        pool: Uuid,
        policy: Uuid,
    ) -> Result<()> {
        client
            .start_volume_replication(m.cluster, pool, m.volume, &Default::default())
            .await?;
        tracing::info!(volume = %m, %policy, "enable: replication started");
        Ok(())
    }

    /// Detach the policy from the local member with an explicit `null`.
    pub async fn disable_volume(&self, h: &VolumeHandle, p: &ReplicationParams) -> Result<()> {
        if matches!(p.method, Method::Sync { .. }) {
            return Ok(());
        }
        let chain = self.chain(h).await?;
        let m = self.local_member(&chain);
        let (client, pool) = self.at(&m).await?;
        let detach = VolumeUpdate {
            replication_policy_id: Some(None),
            ..VolumeUpdate::default()
        };
        match client
            .update_volume(m.cluster, pool, m.volume, &detach)
            .await
        {
            Ok(()) => Ok(()),
            Err(e) => reaped(&chain, e.into(), &m, "disable"),
        }
    }

    /// Demote the local member: done when the control plane answers 204, ABORTED while its
    /// final sync converges (the sidecar asks again).
    pub async fn demote_volume(&self, h: &VolumeHandle, p: &ReplicationParams) -> Result<()> {
        if let Method::Sync { site } = &p.method {
            return self.sync_demote(h, site).await;
        }
        let chain = self.chain(h).await?;
        let m = self.local_member(&chain);
        let (client, pool) = self.at(&m).await?;
        match client
            .demote_volume_replication(m.cluster, pool, m.volume)
            .await
        {
            Ok(DemoteOutcome::Done) => Ok(()),
            Ok(DemoteOutcome::Converging) => Err(CsiError::Aborted(format!(
                "the demote of volume {m} is still converging: its last writes are on their way \
                 to the replica; retry"
            ))),
            Err(e) => reaped(&chain, e.into(), &m, "demote"),
        }
    }

    /// Fail the chain over to its active end; planned unless forced. A planned promote
    /// while the source's demote converges is ABORTED (never FAILED_PRECONDITION, which
    /// the sidecar escalates into a forced promote), and FAILED_PRECONDITION when the
    /// source was never demoted.
    pub async fn promote_volume(
        &self,
        h: &VolumeHandle,
        p: &ReplicationParams,
        force: bool,
    ) -> Result<()> {
        if let Method::Sync { site } = &p.method {
            return self.sync_promote(h, site, force).await;
        }
        let chain = self.chain(h).await?;
        let end = chain.active_end().clone();
        let (client, pool) = self.at(&end).await?;
        client
            .failover_volume_replication(end.cluster, pool, end.volume, Some(!force))
            .await
            .map_err(|e| match e {
                simplyblock_controlplane::Error::Conflict { message, .. } => {
                    CsiError::Aborted(format!(
                        "volume {end} cannot be promoted yet: {message}; the demote of its \
                         source is still converging, retry"
                    ))
                }
                e => e.into(),
            })?;
        tracing::info!(volume = %end, planned = !force, "promote: failed over");
        Ok(())
    }

    /// Fence the volume on the class's site (the one this driver's site serves): done also
    /// where it is not served. A synchronously replicated volume is one volume of one
    /// cluster, so there is no chain to walk.
    async fn sync_demote(&self, h: &VolumeHandle, site: &str) -> Result<()> {
        let (client, pool) = self.at(h).await?;
        client
            .sync_demote_volume(h.cluster, pool, h.volume, site)
            .await
            .map_err(sync_route_error)
    }

    /// Serve the volume on the class's site; planned unless forced. A 409 (in progress, or
    /// the serving site not demoted yet) is worth a retry, a 412 (the serving site is
    /// offline) is the one refusal the sidecar escalates into a forced promote.
    async fn sync_promote(&self, h: &VolumeHandle, site: &str, force: bool) -> Result<()> {
        let (client, pool) = self.at(h).await?;
        let r = client
            .sync_promote_volume(h.cluster, pool, h.volume, site, !force)
            .await
            .map_err(sync_route_error)?;
        tracing::info!(volume = %h, site, planned = !force, paths = r.connection_strings.len(), "promote: served on the site");
        Ok(())
    }

    /// Send the active end's writes back to this site, then report whether the copy is
    /// within its lag budget. It never cuts over.
    pub async fn resync_volume(&self, h: &VolumeHandle, p: &ReplicationParams) -> Result<bool> {
        if matches!(p.method, Method::Sync { .. }) {
            return Ok(true);
        }
        let chain = self.chain(h).await?;
        let end = chain.active_end().clone();
        let source = chain.resync_source(&self.clusters.local_ids(), p.source_cluster);
        let (client, pool) = self.at(&end).await?;
        client
            .failback_volume_replication(
                end.cluster,
                pool,
                end.volume,
                &Failback {
                    source_cluster_id: source,
                },
            )
            .await?;
        let st = client
            .volume_replication_status(end.cluster, pool, end.volume)
            .await?;
        Ok(ready(&st))
    }

    /// The active end's replication status.
    pub async fn volume_info(
        &self,
        h: &VolumeHandle,
    ) -> Result<repl::GetVolumeReplicationInfoResponse> {
        let chain = self.chain(h).await?;
        let end = chain.active_end().clone();
        let (client, pool) = self.at(&end).await?;
        let st = client
            .volume_replication_status(end.cluster, pool, end.volume)
            .await?;
        Ok(info(&st))
    }
}

/// A verb's failure, unless it is a reaped member of a known chain (then done).
fn reaped(chain: &Chain, err: CsiError, member: &VolumeHandle, verb: &str) -> Result<()> {
    if chain.reaped(&err) {
        tracing::info!(volume = %member, "{verb}: the chain member was reaped; nothing left to do");
        return Ok(());
    }
    Err(err)
}

/// Resync is ready when the lag is unknown or within its budget.
pub fn ready(st: &ReplicationStatus) -> bool {
    match (st.lag_seconds, st.lag_budget_seconds) {
        (Some(lag), Some(budget)) => lag <= budget,
        _ => true,
    }
}

/// The control plane's typed status as the csi-addons sidecar reads it. A volume that never
/// replicated has no last sync time.
pub fn info(st: &ReplicationStatus) -> repl::GetVolumeReplicationInfoResponse {
    let duration = (st.last_replicated_at.is_some() && st.last_cycle_seconds > 0.0).then(|| {
        let d = std::time::Duration::from_secs_f64(st.last_cycle_seconds);
        prost_types::Duration {
            seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
        }
    });
    let over_budget = matches!(
        (st.lag_seconds, st.lag_budget_seconds),
        (Some(lag), Some(budget)) if lag > budget
    );
    let health = match st.state.as_str() {
        "error" => Health::Error,
        "degraded" | "lagging" => Health::Degraded,
        _ if over_budget => Health::Degraded,
        "in_sync" | "replicating" => Health::Healthy,
        _ => Health::Unknown,
    };
    let mut message = format!("role {}, state {}", st.role, st.state);
    if let Some(lag) = st.lag_seconds {
        message.push_str(&format!(", lag {lag:.0}s"));
        if let Some(budget) = st.lag_budget_seconds {
            message.push_str(&format!(" of a {budget:.0}s budget"));
        }
    }
    if st.resyncing {
        message.push_str(", resyncing");
    }
    repl::GetVolumeReplicationInfoResponse {
        last_sync_time: st.last_replicated_at.as_deref().and_then(timestamp),
        last_sync_duration: duration,
        last_sync_bytes: i64::try_from(st.last_cycle_bytes).unwrap_or(i64::MAX),
        status: health as i32,
        status_message: message,
    }
}

type R<T> = std::result::Result<Response<T>, Status>;

#[tonic::async_trait]
impl Controller for ReplicationService {
    async fn enable_volume_replication(
        &self,
        r: Request<repl::EnableVolumeReplicationRequest>,
    ) -> R<repl::EnableVolumeReplicationResponse> {
        let r = r.into_inner();
        let subject = Subject::of(r.replication_source.as_ref())?;
        let params = ReplicationParams::parse(&r.parameters)?;
        let _g = self.locks.lock(&subject.key()).await;
        match &subject {
            Subject::Volume(h) => self.enable_volume(h, &params).await?,
            Subject::Group(g) => self.enable_group(g, &params).await?,
        }
        Ok(Response::new(repl::EnableVolumeReplicationResponse {}))
    }

    async fn disable_volume_replication(
        &self,
        r: Request<repl::DisableVolumeReplicationRequest>,
    ) -> R<repl::DisableVolumeReplicationResponse> {
        let r = r.into_inner();
        let subject = Subject::of(r.replication_source.as_ref())?;
        let params = ReplicationParams::parse(&r.parameters)?;
        let _g = self.locks.lock(&subject.key()).await;
        match &subject {
            Subject::Volume(h) => self.disable_volume(h, &params).await?,
            Subject::Group(g) => self.disable_group(g, &params).await?,
        }
        Ok(Response::new(repl::DisableVolumeReplicationResponse {}))
    }

    async fn promote_volume(
        &self,
        r: Request<repl::PromoteVolumeRequest>,
    ) -> R<repl::PromoteVolumeResponse> {
        let r = r.into_inner();
        let subject = Subject::of(r.replication_source.as_ref())?;
        let params = ReplicationParams::parse(&r.parameters)?;
        let _g = self.locks.lock(&subject.key()).await;
        match &subject {
            Subject::Volume(h) => self.promote_volume(h, &params, r.force).await?,
            Subject::Group(g) => self.promote_group(g, &params, r.force).await?,
        }
        Ok(Response::new(repl::PromoteVolumeResponse {}))
    }

    async fn demote_volume(
        &self,
        r: Request<repl::DemoteVolumeRequest>,
    ) -> R<repl::DemoteVolumeResponse> {
        let r = r.into_inner();
        let subject = Subject::of(r.replication_source.as_ref())?;
        let params = ReplicationParams::parse(&r.parameters)?;
        let _g = self.locks.lock(&subject.key()).await;
        match &subject {
            Subject::Volume(h) => self.demote_volume(h, &params).await?,
            Subject::Group(g) => self.demote_group(g, &params).await?,
        }
        Ok(Response::new(repl::DemoteVolumeResponse {}))
    }

    async fn resync_volume(
        &self,
        r: Request<repl::ResyncVolumeRequest>,
    ) -> R<repl::ResyncVolumeResponse> {
        let r = r.into_inner();
        let subject = Subject::of(r.replication_source.as_ref())?;
        let params = ReplicationParams::parse(&r.parameters)?;
        let _g = self.locks.lock(&subject.key()).await;
        let ready = match &subject {
            Subject::Volume(h) => self.resync_volume(h, &params).await?,
            Subject::Group(g) => self.resync_group(g, &params).await?,
        };
        Ok(Response::new(repl::ResyncVolumeResponse { ready }))
    }

    async fn get_volume_replication_info(
        &self,
        r: Request<repl::GetVolumeReplicationInfoRequest>,
    ) -> R<repl::GetVolumeReplicationInfoResponse> {
        let r = r.into_inner();
        match Subject::of(r.replication_source.as_ref())? {
            Subject::Volume(h) => Ok(Response::new(self.volume_info(&h).await?)),
            Subject::Group(g) => Ok(Response::new(self.group_info(&g).await?)),
        }
    }

    async fn get_replication_destination_info(
        &self,
        r: Request<repl::GetReplicationDestinationInfoRequest>,
    ) -> R<repl::GetReplicationDestinationInfoResponse> {
        use repl::replication_destination::{Type, VolumeDestination};
        let r = r.into_inner();
        match Subject::of(r.replication_source.as_ref())? {
            // A volume's destination is the handle itself: the replica is reached through
            // the chain, never by a handle of its own.
            Subject::Volume(h) => Ok(Response::new(repl::GetReplicationDestinationInfoResponse {
                replication_destination: Some(repl::ReplicationDestination {
                    r#type: Some(Type::Volume(VolumeDestination {
                        volume_id: h.to_string(),
                    })),
                }),
            })),
            Subject::Group(g) => Ok(Response::new(repl::GetReplicationDestinationInfoResponse {
                replication_destination: Some(self.group_destination(&g).await?),
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;
    use repl::replication_source::{Type, VolumeGroupSource, VolumeSource};

    fn volume(id: &str) -> repl::ReplicationSource {
        repl::ReplicationSource {
            r#type: Some(Type::Volume(VolumeSource {
                volume_id: id.into(),
            })),
        }
    }

    fn group(id: &str) -> repl::ReplicationSource {
        repl::ReplicationSource {
            r#type: Some(Type::Volumegroup(VolumeGroupSource {
                volume_group_id: id.into(),
            })),
        }
    }

    const C: &str = "11111111-1111-4111-8111-111111111111";
    const P: &str = "22222222-2222-4222-8222-222222222222";
    const V: &str = "33333333-3333-4333-8333-333333333333";

    #[test]
    fn the_volume_source_names_a_volume_and_a_cg_handle_a_group() {
        let handle = format!("{C}:{P}:{V}");
        let Subject::Volume(h) = Subject::of(Some(&volume(&handle))).expect("a volume") else {
            panic!("not a volume");
        };
        assert_eq!(h.to_string(), handle);
        let cg = format!("cg:{C}:{V}");
        for source in [group(&cg), volume(&cg)] {
            assert_eq!(
                Subject::of(Some(&source)).expect("a group"),
                Subject::Group(GroupHandle {
                    cluster: Uuid::parse_str(C).expect("c"),
                    group: Uuid::parse_str(V).expect("g"),
                })
            );
        }
        assert_eq!(
            GroupHandle::parse(&cg).expect("parsed").to_string(),
            cg,
            "a group handle prints as it parses"
        );
    }

    #[test]
    fn malformed_or_missing_ids_are_invalid_arguments() {
        for source in [
            None,
            Some(repl::ReplicationSource { r#type: None }),
            Some(volume("")),
            Some(volume("pvc-1")),
            Some(volume(&format!("{C}:{P}"))),
            Some(group("cg:")),
            Some(group(&format!("cg:{C}"))),
            Some(group(&format!("cg:{C}:not-a-uuid"))),
            Some(group(&format!("cg:{C}:{V}:x"))),
        ] {
            let err = Subject::of(source.as_ref()).expect_err("refused");
            assert_eq!(err.code(), Code::InvalidArgument, "{source:?}: {err}");
        }
    }

    fn status(state: &str, lag: Option<f64>, budget: Option<f64>) -> ReplicationStatus {
        ReplicationStatus {
            role: "source".into(),
            state: state.into(),
            lag_seconds: lag,
            lag_budget_seconds: budget,
            ..Default::default()
        }
    }

    #[test]
    fn resync_is_ready_within_the_budget_or_without_one() {
        assert!(ready(&status("in_sync", Some(10.0), Some(120.0))));
        assert!(ready(&status("in_sync", Some(120.0), Some(120.0))));
        assert!(!ready(&status("lagging", Some(121.0), Some(120.0))));
        assert!(ready(&status("replicating", None, Some(120.0))));
        assert!(ready(&status("replicating", Some(500.0), None)));
    }

    #[test]
    fn info_maps_the_typed_status() {
        let never = info(&ReplicationStatus {
            role: "none".into(),
            state: "not_replicating".into(),
            ..Default::default()
        });
        assert_eq!(never.last_sync_time, None);
        assert_eq!(never.last_sync_duration, None);
        assert_eq!(never.status, Health::Unknown as i32);

        let st = ReplicationStatus {
            last_replicated_at: Some("2026-01-02T03:04:05.250000Z".into()),
            last_cycle_seconds: 1.5,
            last_cycle_bytes: 4096,
            ..status("in_sync", Some(30.0), Some(120.0))
        };
        let i = info(&st);
        assert_eq!(
            i.last_sync_time,
            Some(prost_types::Timestamp {
                seconds: 1_767_323_045,
                nanos: 250_000_000
            })
        );
        assert_eq!(
            i.last_sync_duration,
            Some(prost_types::Duration {
                seconds: 1,
                nanos: 500_000_000
            })
        );
        assert_eq!(i.last_sync_bytes, 4096);
        assert_eq!(i.status, Health::Healthy as i32);
        assert_eq!(
            i.status_message,
            "role source, state in_sync, lag 30s of a 120s budget"
        );

        for (state, lag, want) in [
            ("error", None, Health::Error),
            ("degraded", None, Health::Degraded),
            ("lagging", Some(500.0), Health::Degraded),
            ("replicating", Some(500.0), Health::Degraded),
            ("replicating", None, Health::Healthy),
        ] {
            assert_eq!(
                info(&status(state, lag, Some(120.0))).status,
                want as i32,
                "{state} {lag:?}"
            );
        }
    }
}

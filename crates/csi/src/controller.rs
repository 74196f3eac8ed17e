//! The CSI Controller service: volumes, snapshots, clones, expansion and capacity
//! against the control plane of the cluster the StorageClass (or the handle) names.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use simplyblock_api::keys;
use simplyblock_controlplane::{
    Client, ConnectEntry, Snapshot as CpSnapshot, SnapshotStatus, Volume as CpVolume, VolumeClone,
    VolumeCreate, VolumeStatus,
};
use tonic::{Request, Response, Status};
use uuid::Uuid;

use crate::caps;
use crate::claim::{self, ClaimControls};
use crate::clusters::Clusters;
use crate::error::{CsiError, Result};
use crate::fs;
use crate::handle::{PoolRef, SnapshotHandle, VolumeHandle};
use crate::locks::KeyLocks;
use crate::params::{self, ClassParams, vc};
use crate::proto::csi::v1 as csi;
use crate::proto::csi::v1::controller_server::Controller;
use crate::pvc;
use csi::controller_service_capability::rpc::Type as Cap;

/// The Controller service.
#[derive(Debug)]
pub struct ControllerService {
    clusters: Arc<Clusters>,
    names: KeyLocks,
    /// Reads the claim behind a create for its controls; without it, claims set none.
    kube: Option<pvc::ApiServer>,
}

impl ControllerService {
    pub fn new(clusters: Arc<Clusters>, kube: Option<pvc::ApiServer>) -> Self {
        Self {
            clusters,
            names: KeyLocks::default(),
            kube,
        }
    }

    /// The claim a plain create is for and the controls it sets, when the provisioner
    /// names it and the driver may read it. A refused control fails the create and is
    /// recorded on the claim.
    async fn claim_controls(
        &self,
        req: &csi::CreateVolumeRequest,
    ) -> Result<Option<(pvc::Claim, ClaimControls)>> {
        let (Some(pvc::ApiServer(client)), Some(name), Some(namespace)) = (
            self.kube.as_ref(),
            req.parameters.get(claim::PVC_NAME_PARAM),
            req.parameters.get(claim::PVC_NAMESPACE_PARAM),
        ) else {
            return Ok(None);
        };
        // A restore or a clone takes its placement from its source.
        if req.volume_content_source.is_some() {
            return Ok(None);
        }
        let c = pvc::read(client, namespace, name).await?;
        match ClaimControls::parse(&c.annotations, &c.labels) {
            Ok(controls) => Ok(Some((c, controls))),
            Err(problems) => Err(self.refuse(&c, &problems).await),
        }
    }

    /// Records the refusal on the claim and returns it as the create's error.
    async fn refuse(&self, c: &pvc::Claim, problems: &[String]) -> CsiError {
        let message = claim::refusal(&c.namespace, &c.name, problems);
        if let Some(pvc::ApiServer(client)) = &self.kube {
            pvc::warn(client, c, pvc::REFUSED_REASON, &message).await;
        }
        CsiError::InvalidArgument(message)
    }

    /// Refuses a pin that names no storage node of the cluster (by id or hostname), so the
    /// claim says why instead of the control plane's opaque refusal.
    async fn check_pin(
        &self,
        pl: &Placement,
        claim: &Option<(pvc::Claim, ClaimControls)>,
    ) -> Result<()> {
        let Some((c, controls)) = claim else {
            return Ok(());
        };
        let Some(pin) = &controls.pin else {
            return Ok(());
        };
        let nodes = pl.client.list_storage_nodes(pl.cluster).await?;
        if nodes
            .iter()
            .any(|n| n.id.to_string() == pin.host || n.hostname == pin.host)
        {
            return Ok(());
        }
        let known: Vec<String> = nodes
            .iter()
            .map(|n| format!("{} ({})", n.id, n.hostname))
            .collect();
        Err(self
            .refuse(
                c,
                &[format!(
                    "annotation {}={:?} names no storage node of cluster {}; its storage nodes are {}",
                    pin.key,
                    pin.host,
                    pl.cluster,
                    known.join(", ")
                )],
            )
            .await)
    }

    /// The members of `h`'s replication chain that a delete of `h` retires: every member
    /// after `h` except the active end, which serves the volume now and is never deleted.
    /// The walk is best effort: a chain that cannot be walked leaves its replicas, and the
    /// volume itself is still deleted.
    async fn retired_replicas(&self, h: &VolumeHandle) -> Vec<VolumeHandle> {
        match crate::chain::resolve(self.clusters.as_ref(), h).await {
            Ok(chain) => {
                let hops = chain.hops();
                hops.get(1..hops.len().saturating_sub(1))
                    .unwrap_or_default()
                    .to_vec()
            }
            Err(e) => {
                tracing::warn!(volume = %h, error = %e, "the volume's replication chain could not be walked; its retired replicas, if any, are left in place");
                Vec::new()
            }
        }
    }

    /// Deletes one retired replica; gone already is done, and a failure is logged, since
    /// the volume the user deleted is gone either way.
    async fn delete_retired(&self, member: &VolumeHandle) {
        let deleted = match (
            self.clusters.client(member.cluster),
            self.clusters.pool_id(member.cluster, &member.pool).await,
        ) {
            (Ok(client), Ok(pool)) => client
                .delete_volume(member.cluster, pool, member.volume)
                .await
                .or_else(|e| {
                    if e.is_not_found() {
                        Ok(())
                    } else {
                        Err(e.into())
                    }
                }),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        match deleted {
            Ok(()) => {
                tracing::info!(replica = %member, "deleted a retired replica of a deleted volume")
            }
            Err(e) => {
                tracing::warn!(replica = %member, error = %e, "a retired replica of a deleted volume could not be deleted; delete it on its cluster")
            }
        }
    }
}

fn segments(v: &[csi::Topology]) -> Vec<BTreeMap<String, String>> {
    v.iter()
        .map(|t| {
            t.segments
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .collect()
}

fn is_online(v: &CpVolume) -> bool {
    v.status == VolumeStatus::Online
}

/// The volume id at the end of an absolute volume URL (`…/volumes/{id}/`).
pub fn id_from_url(url: &str) -> Option<Uuid> {
    url.trim_end_matches('/')
        .rsplit('/')
        .next()
        .and_then(|s| Uuid::parse_str(s).ok())
}

/// ISO-8601 (with or without an offset; without one it is UTC) to a protobuf timestamp.
pub fn timestamp(iso: &str) -> Option<prost_types::Timestamp> {
    let ts = iso.parse::<jiff::Timestamp>().ok().or_else(|| {
        iso.parse::<jiff::civil::DateTime>()
            .ok()
            .and_then(|dt| dt.to_zoned(jiff::tz::TimeZone::UTC).ok())
            .map(|z| z.timestamp())
    })?;
    Some(prost_types::Timestamp {
        seconds: ts.as_second(),
        nanos: ts.subsec_nanosecond(),
    })
}

/// A snapshot being deleted (kept by the control plane only while clones refer to it) is
/// gone as far as CSI is concerned.
fn live(s: &CpSnapshot) -> bool {
    s.status != SnapshotStatus::InDeletion
}

pub fn snapshot_entry(cluster: Uuid, pool: Uuid, s: &CpSnapshot) -> csi::Snapshot {
    let source = s
        .lvol
        .as_deref()
        .and_then(id_from_url)
        .map(|v| {
            VolumeHandle {
                cluster,
                pool: PoolRef::Id(pool),
                volume: v,
            }
            .to_string()
        })
        .unwrap_or_default();
    csi::Snapshot {
        size_bytes: s.size as i64,
        snapshot_id: SnapshotHandle {
            cluster,
            pool: Some(PoolRef::Id(pool)),
            snapshot: s.id,
        }
        .to_string(),
        source_volume_id: source,
        creation_time: timestamp(&s.created_at).or_else(|| {
            let now = jiff::Timestamp::now();
            Some(prost_types::Timestamp {
                seconds: now.as_second(),
                nanos: 0,
            })
        }),
        ready_to_use: s.status == SnapshotStatus::Online,
        group_snapshot_id: String::new(),
    }
}

/// Offset pagination over a stable listing.
pub fn page<T: Clone>(all: &[T], max: i32, token: &str) -> Result<(Vec<T>, String)> {
    if max < 0 {
        return Err(CsiError::InvalidArgument(
            "max_entries must not be negative".into(),
        ));
    }
    let start: usize = if token.is_empty() {
        0
    } else {
        token
            .parse()
            .map_err(|_| CsiError::BadToken(token.into()))?
    };
    if start > all.len() {
        return Err(CsiError::BadToken(token.into()));
    }
    let end = if max == 0 {
        all.len()
    } else {
        (start + max as usize).min(all.len())
    };
    let next = if end < all.len() {
        end.to_string()
    } else {
        String::new()
    };
    Ok((all[start..end].to_vec(), next))
}

/// How long CreateVolume waits for a leftover of the same name to be deleted.
const LEFTOVER_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// What one create attempt found.
enum Created {
    /// The volume (new or adopted) and its pool.
    Volume(Uuid, Box<CpVolume>),
    /// A leftover of the same name is being deleted: its pool and id.
    Leftover(Uuid, Uuid),
}

struct Placement {
    cluster: Uuid,
    pool: Uuid,
    client: Arc<Client>,
    segment: Option<(String, String)>,
}

impl ControllerService {
    async fn place(&self, p: &ClassParams, req: &csi::CreateVolumeRequest) -> Result<Placement> {
        let (pref, reqs) = req
            .accessibility_requirements
            .as_ref()
            .map(|t| (segments(&t.preferred), segments(&t.requisite)))
            .unwrap_or_default();
        let (cluster, segment) = p.choose_cluster(&pref, &reqs)?;
        let client = self.clusters.client(cluster)?;
        let name = p.pool_name.clone().unwrap_or_default();
        let pool_ref = match Uuid::parse_str(&name) {
            Ok(u) => PoolRef::Id(u),
            Err(_) => PoolRef::Name(name),
        };
        let pool = self
            .clusters
            .pool_id(cluster, &pool_ref)
            .await
            .map_err(|e| match e {
                CsiError::NotFound(what) => CsiError::InvalidArgument(format!(
                    "{what}; the StorageClass pool_name must name an existing pool"
                )),
                other => other,
            })?;
        Ok(Placement {
            cluster,
            pool,
            client,
            segment,
        })
    }

    async fn find_by_name(
        &self,
        pl: &Placement,
        pools: &[Uuid],
        name: &str,
    ) -> Result<Option<(Uuid, CpVolume)>> {
        for pool in pools {
            if let Some(v) = pl
                .client
                .list_volumes(pl.cluster, *pool)
                .await?
                .into_iter()
                .find(|v| v.name == name)
            {
                return Ok(Some((*pool, v)));
            }
        }
        Ok(None)
    }

    /// Create the volume, or adopt the online one of the same name and size. A leftover of
    /// the same name that is not online (a create that failed half-way) is deleted, its
    /// deletion waited for, and the volume created again, all in this call.
    async fn create_or_adopt(
        &self,
        pl: &Placement,
        req: &csi::CreateVolumeRequest,
        p: &ClassParams,
        size: u64,
        controls: Option<&ClaimControls>,
    ) -> Result<(Uuid, CpVolume)> {
        for _ in 0..2 {
            match self.create_once(pl, req, p, size, controls).await? {
                Created::Volume(pool, v) => return Ok((pool, *v)),
                Created::Leftover(pool, id) => self.wait_deleted(pl, pool, id, &req.name).await?,
            }
        }
        Err(CsiError::Aborted(format!(
            "the name {:?} was taken again by a volume that is not online while it was being recreated; the create is retried",
            req.name
        )))
    }

    /// Wait until the control plane has finished deleting volume `id`.
    async fn wait_deleted(&self, pl: &Placement, pool: Uuid, id: Uuid, name: &str) -> Result<()> {
        let start = std::time::Instant::now();
        loop {
            match pl.client.get_volume(pl.cluster, pool, id).await {
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => return Err(e.into()),
                Ok(v) if v.status == VolumeStatus::Deleted => return Ok(()),
                Ok(_) => {}
            }
            if start.elapsed() > LEFTOVER_WAIT {
                return Err(CsiError::Aborted(format!(
                    "the leftover volume {id} named {name:?} is still being deleted after {LEFTOVER_WAIT:?}; the create is retried"
                )));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Send the create (plain, from a snapshot, or a clone of a volume) once. A 409 is
    /// reconciled by name.
    async fn create_once(
        &self,
        pl: &Placement,
        req: &csi::CreateVolumeRequest,
        p: &ClassParams,
        size: u64,
        controls: Option<&ClaimControls>,
    ) -> Result<Created> {
        use csi::volume_content_source::Type as Src;
        let name = req.name.as_str();
        let src = req
            .volume_content_source
            .as_ref()
            .and_then(|s| s.r#type.clone());
        let mut pools = vec![pl.pool];
        let mut want = size;
        let send = match &src {
            None => {
                let (pref, reqs) = req
                    .accessibility_requirements
                    .as_ref()
                    .map(|t| (segments(&t.preferred), segments(&t.requisite)))
                    .unwrap_or_default();
                let host = params::storage_nodes_in(pl.cluster, &pref, &reqs)
                    .first()
                    .map(|u| u.to_string());
                let mut body = VolumeCreate {
                    max_rw_iops: p.qos_rw_iops,
                    max_rw_mbytes: p.qos_rw_mbytes,
                    max_r_mbytes: p.qos_r_mbytes,
                    max_w_mbytes: p.qos_w_mbytes,
                    host_id: host.clone(),
                    priority_class: p.priority_class,
                    pvc_name: p.pvc_name.clone(),
                    ndcs: p.ndcs,
                    npcs: p.npcs,
                    fabric: p.fabric.clone(),
                    max_namespace_per_subsys: Some(p.max_namespace_per_subsys.max(1)),
                    namespaced: p.max_namespace_per_subsys > 1,
                    encrypt: p.encryption,
                    do_replicate: p.replicate,
                    ..VolumeCreate::new(name, size)
                };
                if let Some(c) = controls {
                    c.apply(&mut body, host);
                }
                pl.client.create_volume(pl.cluster, pl.pool, &body).await
            }
            Some(Src::Snapshot(s)) => {
                let h = SnapshotHandle::parse(&s.snapshot_id)?;
                if h.cluster != pl.cluster {
                    return Err(CsiError::InvalidArgument(format!(
                        "snapshot {} is in cluster {}, but the StorageClass places the volume in {}",
                        s.snapshot_id, h.cluster, pl.cluster
                    )));
                }
                let spool = match &h.pool {
                    Some(r) => self.clusters.pool_id(h.cluster, r).await?,
                    None => pl.pool,
                };
                let snap = pl
                    .client
                    .get_snapshot(h.cluster, spool, h.snapshot)
                    .await
                    .map_err(|e| not_found(e, format!("snapshot {}", s.snapshot_id)))?;
                if snap.size > want {
                    if req
                        .capacity_range
                        .as_ref()
                        .is_some_and(|c| c.limit_bytes > 0 && (c.limit_bytes as u64) < snap.size)
                    {
                        return Err(CsiError::OutOfRange(format!(
                            "snapshot {} holds {} bytes, more than the limit asked for",
                            s.snapshot_id, snap.size
                        )));
                    }
                    want = snap.size;
                }
                let body = VolumeClone {
                    name: name.into(),
                    snapshot_id: Some(h.snapshot),
                    size: if want == snap.size { 0 } else { want },
                    pvc_name: p.pvc_name.clone(),
                    ..Default::default()
                };
                pools.push(spool);
                pl.client
                    .create_volume_from_snapshot(pl.cluster, spool, &body)
                    .await
            }
            Some(Src::Volume(v)) => {
                let h = VolumeHandle::parse(&v.volume_id)?;
                if h.cluster != pl.cluster {
                    return Err(CsiError::InvalidArgument(format!(
                        "volume {} is in cluster {}, but the StorageClass places the clone in {}",
                        v.volume_id, h.cluster, pl.cluster
                    )));
                }
                let spool = self.clusters.pool_id(h.cluster, &h.pool).await?;
                let source = pl
                    .client
                    .get_volume(h.cluster, spool, h.volume)
                    .await
                    .map_err(|e| not_found(e, format!("volume {}", v.volume_id)))?;
                want = want.max(source.size);
                let new_size = (want > source.size).then(|| want.to_string());
                pools.insert(0, spool);
                pl.client
                    .clone_volume(h.cluster, spool, h.volume, name, new_size.as_deref())
                    .await
            }
        };
        match send {
            Ok(id) => {
                for pool in &pools {
                    match pl.client.get_volume(pl.cluster, *pool, id).await {
                        Ok(v) => return Ok(Created::Volume(*pool, Box::new(v))),
                        Err(e) if e.is_not_found() => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(CsiError::Internal(format!(
                    "the control plane created volume {id} but does not show it in pool {}",
                    pl.pool
                )))
            }
            Err(e) if e.is_conflict() => {
                // Reconcile by name: reuse an online volume of the same size.
                let Some((pool, v)) = self.find_by_name(pl, &pools, name).await? else {
                    return Err(CsiError::AlreadyExists(format!(
                        "a volume named {name:?} exists outside pool {}; choose another name",
                        pl.pool
                    )));
                };
                if v.status == VolumeStatus::InDeletion {
                    return Ok(Created::Leftover(pool, v.id));
                }
                if !is_online(&v) {
                    tracing::warn!(volume = %v.id, status = %v.status, "deleting a leftover volume of the same name before recreating it");
                    match pl.client.delete_volume(pl.cluster, pool, v.id).await {
                        Ok(()) => {}
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(e.into()),
                    }
                    return Ok(Created::Leftover(pool, v.id));
                }
                if v.size != want {
                    return Err(CsiError::AlreadyExists(format!(
                        "volume {name:?} exists with {} bytes, not the {want} asked for",
                        v.size
                    )));
                }
                Ok(Created::Volume(pool, Box::new(v)))
            }
            Err(e) => Err(e.into()),
        }
    }
}

fn not_found(e: simplyblock_controlplane::Error, what: String) -> CsiError {
    if e.is_not_found() {
        CsiError::NotFound(what)
    } else {
        e.into()
    }
}

fn volume_context(
    cluster: Uuid,
    pool: Uuid,
    v: &CpVolume,
    p: &ClassParams,
    seg: &Option<(String, String)>,
    paths: Option<&[ConnectEntry]>,
) -> HashMap<String, String> {
    let mut m = HashMap::new();
    m.insert(vc::CLUSTER_ID.into(), cluster.to_string());
    m.insert(vc::NAME.into(), v.id.to_string());
    m.insert(vc::UUID.into(), v.id.to_string());
    m.insert(vc::MODEL.into(), v.id.to_string());
    m.insert(vc::NQN.into(), v.nqn.clone());
    m.insert(vc::NS_ID.into(), v.ns_id.to_string());
    m.insert(vc::POOL_ID.into(), pool.to_string());
    m.insert(
        vc::TARGET_TYPE.into(),
        p.target_type
            .clone()
            .unwrap_or_else(|| v.fabric.to_ascii_lowercase()),
    );
    if p.encryption {
        m.insert(vc::ENCRYPTION.into(), "true".into());
    }
    if let Some((k, val)) = seg {
        m.insert(k.clone(), val.clone());
    }
    p.format.to_context(&mut m);
    if let Some(paths) = paths {
        if let Ok(c) = serde_json::to_string(
            &paths
                .iter()
                .map(|e| serde_json::json!({"ip": e.ip, "port": e.port}))
                .collect::<Vec<_>>(),
        ) {
            m.insert(vc::CONNECTIONS.into(), c);
        }
        // One set of tunables for every path: the primary's.
        if let Some(primary) = paths.first() {
            params::PathTunables::from_entry(primary).to_context(&mut m);
        }
        if let Some(t) = paths
            .iter()
            .find_map(|e| e.target_lvol_id.clone().filter(|t| !t.is_empty()))
        {
            m.insert(vc::TARGET_LVOL_ID.into(), t);
        }
    }
    m
}

/// The topology a new volume is reachable from: the segment its cluster was chosen by and
/// the DHCHAP pool label, in one segment set (a Node must match both).
fn accessible_topology(seg: &Option<(String, String)>, dhchap: Option<&str>) -> Vec<csi::Topology> {
    let mut segments: HashMap<String, String> = HashMap::new();
    if let Some((k, v)) = seg {
        segments.insert(k.clone(), v.clone());
    }
    if let Some(key) = dhchap {
        segments.insert(key.to_string(), keys::POOL_ACCESS_ALLOWED.into());
    }
    if segments.is_empty() {
        vec![]
    } else {
        vec![csi::Topology { segments }]
    }
}

fn caps_of(list: &[Cap]) -> Vec<csi::ControllerServiceCapability> {
    list.iter()
        .map(|t| csi::ControllerServiceCapability {
            r#type: Some(csi::controller_service_capability::Type::Rpc(
                csi::controller_service_capability::Rpc { r#type: *t as i32 },
            )),
        })
        .collect()
}

/// What the Controller advertises.
pub const CAPABILITIES: &[Cap] = &[
    Cap::CreateDeleteVolume,
    Cap::CreateDeleteSnapshot,
    Cap::ListSnapshots,
    Cap::ExpandVolume,
    Cap::CloneVolume,
    Cap::GetVolume,
    Cap::VolumeCondition,
    Cap::GetCapacity,
];

type R<T> = std::result::Result<Response<T>, Status>;

#[tonic::async_trait]
impl Controller for ControllerService {
    async fn create_volume(
        &self,
        request: Request<csi::CreateVolumeRequest>,
    ) -> R<csi::CreateVolumeResponse> {
        let req = request.into_inner();
        if req.name.is_empty() {
            return Err(CsiError::InvalidArgument("name is required".into()).into());
        }
        caps::check_all(&req.volume_capabilities)?;
        let p = ClassParams::parse(&req.parameters)?;
        for c in &req.volume_capabilities {
            if let (caps::Access::Mount { fs_type, .. }, _) = caps::check(c)? {
                p.format.check_for(fs::format_as(&fs_type))?;
            }
        }
        let range = req.capacity_range.unwrap_or_default();
        let size = params::volume_size(range.required_bytes, range.limit_bytes)?;
        if let Some(max) = p.max_size
            && size > max
        {
            return Err(CsiError::OutOfRange(format!(
                "the volume would have {size} bytes, above the StorageClass's max_size of {max} bytes; ask for less or use a class with a larger max_size"
            ))
            .into());
        }
        let claim = self.claim_controls(&req).await?;
        let _g = self.names.lock(&req.name).await;
        let pl = self.place(&p, &req).await?;
        self.check_pin(&pl, &claim).await?;
        let (pool, v) = self
            .create_or_adopt(&pl, &req, &p, size, claim.as_ref().map(|(_, c)| c))
            .await?;
        // The hint was for this create only; a failure to remove it is logged, never
        // fatal, since the volume exists and a retried create adopts it.
        if let (Some(pvc::ApiServer(client)), Some((c, controls))) = (&self.kube, &claim)
            && let Err(e) = pvc::remove_annotations(client, c, &controls.hint_keys).await
        {
            tracing::warn!(error = %e, "the one-shot placement hint stays on the claim");
        }
        // Publish: the paths go into the volume context, primary first.
        let paths = match pl.client.connect_volume(pl.cluster, pool, v.id, None).await {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(volume = %v.id, error = %e, "no connection info at create; the node refreshes it at stage");
                None
            }
        };
        let handle = VolumeHandle {
            cluster: pl.cluster,
            pool: PoolRef::Id(pool),
            volume: v.id,
        };
        Ok(Response::new(csi::CreateVolumeResponse {
            volume: Some(csi::Volume {
                capacity_bytes: v.size as i64,
                volume_id: handle.to_string(),
                volume_context: volume_context(
                    pl.cluster,
                    pool,
                    &v,
                    &p,
                    &pl.segment,
                    paths.as_deref(),
                ),
                content_source: req.volume_content_source,
                accessible_topology: accessible_topology(
                    &pl.segment,
                    p.dhchap_node_selector.as_deref(),
                ),
            }),
        }))
    }

    async fn delete_volume(
        &self,
        request: Request<csi::DeleteVolumeRequest>,
    ) -> R<csi::DeleteVolumeResponse> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(CsiError::InvalidArgument("volume_id is required".into()).into());
        }
        // A handle this driver never issued names nothing to delete.
        let Ok(h) = VolumeHandle::parse(&req.volume_id) else {
            return Ok(Response::new(csi::DeleteVolumeResponse {}));
        };
        let _g = self.names.lock(&req.volume_id).await;
        // A handle this driver issued names a volume that exists until its cluster says
        // otherwise; answering success for a cluster the secret lacks would leave it behind.
        let client = match self.clusters.client(h.cluster) {
            Ok(c) => c,
            Err(_) => {
                return Err(CsiError::FailedPrecondition(format!(
                    "volume {} is on cluster {}, which the CSI secret ({}, key {}) does not name, so it cannot be deleted; add the cluster to the secret (the driver reads it again when it changes) and the deletion is retried",
                    req.volume_id,
                    h.cluster,
                    simplyblock_api::csi_secret::NAME,
                    simplyblock_api::csi_secret::KEY
                ))
                .into());
            }
        };
        let pool = match self.clusters.pool_id(h.cluster, &h.pool).await {
            Ok(p) => p,
            Err(CsiError::NotFound(_)) => return Ok(Response::new(csi::DeleteVolumeResponse {})),
            Err(e) => return Err(e.into()),
        };
        // Walked first: a failed-over volume's retired replicas are found from its handle.
        let retired = self.retired_replicas(&h).await;
        match client.delete_volume(h.cluster, pool, h.volume).await {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(CsiError::from(e).into()),
        }
        for member in retired {
            self.delete_retired(&member).await;
        }
        Ok(Response::new(csi::DeleteVolumeResponse {}))
    }

    async fn controller_publish_volume(
        &self,
        _r: Request<csi::ControllerPublishVolumeRequest>,
    ) -> R<csi::ControllerPublishVolumeResponse> {
        Err(CsiError::Unimplemented("ControllerPublishVolume".into()).into())
    }

    async fn controller_unpublish_volume(
        &self,
        _r: Request<csi::ControllerUnpublishVolumeRequest>,
    ) -> R<csi::ControllerUnpublishVolumeResponse> {
        Err(CsiError::Unimplemented("ControllerUnpublishVolume".into()).into())
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<csi::ValidateVolumeCapabilitiesRequest>,
    ) -> R<csi::ValidateVolumeCapabilitiesResponse> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(CsiError::InvalidArgument("volume_id is required".into()).into());
        }
        if req.volume_capabilities.is_empty() {
            return Err(
                CsiError::InvalidArgument("volume_capabilities must not be empty".into()).into(),
            );
        }
        let h = VolumeHandle::parse(&req.volume_id).map_err(CsiError::from)?;
        let client = self.clusters.client(h.cluster)?;
        let pool = self.clusters.pool_id(h.cluster, &h.pool).await?;
        client
            .get_volume(h.cluster, pool, h.volume)
            .await
            .map_err(|e| not_found(e, format!("volume {}", req.volume_id)))?;
        Ok(Response::new(
            match caps::check_all(&req.volume_capabilities) {
                Ok(()) => csi::ValidateVolumeCapabilitiesResponse {
                    confirmed: Some(csi::validate_volume_capabilities_response::Confirmed {
                        volume_context: req.volume_context,
                        volume_capabilities: req.volume_capabilities,
                        parameters: req.parameters,
                        mutable_parameters: req.mutable_parameters,
                    }),
                    message: String::new(),
                },
                Err(e) => csi::ValidateVolumeCapabilitiesResponse {
                    confirmed: None,
                    message: e.to_string(),
                },
            },
        ))
    }

    async fn list_volumes(
        &self,
        _r: Request<csi::ListVolumesRequest>,
    ) -> R<csi::ListVolumesResponse> {
        Err(CsiError::Unimplemented("ListVolumes".into()).into())
    }

    async fn get_capacity(
        &self,
        request: Request<csi::GetCapacityRequest>,
    ) -> R<csi::GetCapacityResponse> {
        let req = request.into_inner();
        if let Some(c) = &req.volume_capabilities.first() {
            caps::check(c)?;
        }
        let mut available: u64 = 0;
        let mut max_volume: u64 = 0;
        if req.parameters.contains_key("pool_name") {
            let p = ClassParams::parse(&req.parameters)?;
            let fake = csi::CreateVolumeRequest {
                accessibility_requirements: req.accessible_topology.map(|t| {
                    csi::TopologyRequirement {
                        requisite: vec![t.clone()],
                        preferred: vec![t],
                    }
                }),
                ..Default::default()
            };
            let pl = self.place(&p, &fake).await?;
            let pool = pl
                .client
                .get_pool(pl.cluster, pl.pool)
                .await
                .map_err(CsiError::from)?;
            let cluster = pl
                .client
                .get_cluster(pl.cluster)
                .await
                .map_err(CsiError::from)?;
            let free = cluster.capacity.size_free.max(0) as u64;
            available = if pool.max_size > 0 {
                let prov = pool
                    .capacity
                    .map(|c| c.size_prov.max(0) as u64)
                    .unwrap_or(0);
                pool.max_size
                    .saturating_sub(prov)
                    .min(if free > 0 { free } else { u64::MAX })
            } else {
                free
            };
            max_volume = pool.volume_max_size;
        } else {
            for id in self.clusters.ids() {
                let c = self.clusters.client(id)?;
                available += c
                    .get_cluster(id)
                    .await
                    .map_err(CsiError::from)?
                    .capacity
                    .size_free
                    .max(0) as u64;
            }
        }
        Ok(Response::new(csi::GetCapacityResponse {
            available_capacity: available as i64,
            maximum_volume_size: (max_volume > 0).then_some(max_volume as i64),
            minimum_volume_size: Some(params::GIB as i64),
        }))
    }

    async fn controller_get_capabilities(
        &self,
        _r: Request<csi::ControllerGetCapabilitiesRequest>,
    ) -> R<csi::ControllerGetCapabilitiesResponse> {
        Ok(Response::new(csi::ControllerGetCapabilitiesResponse {
            capabilities: caps_of(CAPABILITIES),
        }))
    }

    async fn create_snapshot(
        &self,
        request: Request<csi::CreateSnapshotRequest>,
    ) -> R<csi::CreateSnapshotResponse> {
        let req = request.into_inner();
        if req.name.is_empty() {
            return Err(CsiError::InvalidArgument("name is required".into()).into());
        }
        if req.source_volume_id.is_empty() {
            return Err(CsiError::InvalidArgument("source_volume_id is required".into()).into());
        }
        let h = VolumeHandle::parse(&req.source_volume_id).map_err(CsiError::from)?;
        let client = self.clusters.client(h.cluster)?;
        let pool = self.clusters.pool_id(h.cluster, &h.pool).await?;
        let _g = self.names.lock(&format!("snapshot/{}", req.name)).await;
        let existing = |list: Vec<CpSnapshot>| list.into_iter().find(|s| s.name == req.name);
        let check = |s: CpSnapshot| -> Result<csi::Snapshot> {
            let e = snapshot_entry(h.cluster, pool, &s);
            if s.lvol.as_deref().and_then(id_from_url) == Some(h.volume) {
                Ok(e)
            } else {
                Err(CsiError::AlreadyExists(format!(
                    "snapshot {:?} exists for another volume ({})",
                    req.name, e.source_volume_id
                )))
            }
        };
        if let Some(s) = existing(
            client
                .list_snapshots(h.cluster, pool)
                .await
                .map_err(CsiError::from)?,
        ) {
            return Ok(Response::new(csi::CreateSnapshotResponse {
                snapshot: Some(check(s)?),
            }));
        }
        match client
            .create_snapshot(h.cluster, pool, h.volume, &req.name)
            .await
        {
            Ok(id) => {
                let s = client
                    .get_snapshot(h.cluster, pool, id)
                    .await
                    .map_err(CsiError::from)?;
                Ok(Response::new(csi::CreateSnapshotResponse {
                    snapshot: Some(snapshot_entry(h.cluster, pool, &s)),
                }))
            }
            Err(e) if e.is_not_found() => {
                Err(CsiError::NotFound(format!("volume {}", req.source_volume_id)).into())
            }
            Err(e) if e.is_conflict() => match existing(
                client
                    .list_snapshots(h.cluster, pool)
                    .await
                    .map_err(CsiError::from)?,
            ) {
                Some(s) => Ok(Response::new(csi::CreateSnapshotResponse {
                    snapshot: Some(check(s)?),
                })),
                None => Err(CsiError::AlreadyExists(format!(
                    "snapshot name {:?} is taken in another pool of cluster {}",
                    req.name, h.cluster
                ))
                .into()),
            },
            Err(e) => Err(CsiError::from(e).into()),
        }
    }

    async fn delete_snapshot(
        &self,
        request: Request<csi::DeleteSnapshotRequest>,
    ) -> R<csi::DeleteSnapshotResponse> {
        let req = request.into_inner();
        if req.snapshot_id.is_empty() {
            return Err(CsiError::InvalidArgument("snapshot_id is required".into()).into());
        }
        let Ok(h) = SnapshotHandle::parse(&req.snapshot_id) else {
            return Ok(Response::new(csi::DeleteSnapshotResponse {}));
        };
        let Ok(client) = self.clusters.client(h.cluster) else {
            return Ok(Response::new(csi::DeleteSnapshotResponse {}));
        };
        let pools = match &h.pool {
            Some(r) => match self.clusters.pool_id(h.cluster, r).await {
                Ok(p) => vec![p],
                Err(CsiError::NotFound(_)) => vec![],
                Err(e) => return Err(e.into()),
            },
            // The legacy form names no pool: try each.
            None => client
                .list_pools(h.cluster)
                .await
                .map_err(CsiError::from)?
                .into_iter()
                .map(|p| p.id)
                .collect(),
        };
        for pool in pools {
            match client.delete_snapshot(h.cluster, pool, h.snapshot).await {
                Ok(()) => break,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(CsiError::from(e).into()),
            }
        }
        Ok(Response::new(csi::DeleteSnapshotResponse {}))
    }

    async fn list_snapshots(
        &self,
        request: Request<csi::ListSnapshotsRequest>,
    ) -> R<csi::ListSnapshotsResponse> {
        let req = request.into_inner();
        let mut all: Vec<csi::Snapshot> = Vec::new();
        if !req.snapshot_id.is_empty() {
            if let Ok(h) = SnapshotHandle::parse(&req.snapshot_id)
                && let Ok(client) = self.clusters.client(h.cluster)
            {
                let pools = match &h.pool {
                    Some(r) => self
                        .clusters
                        .pool_id(h.cluster, r)
                        .await
                        .map(|p| vec![p])
                        .unwrap_or_default(),
                    None => client
                        .list_pools(h.cluster)
                        .await
                        .map_err(CsiError::from)?
                        .into_iter()
                        .map(|p| p.id)
                        .collect(),
                };
                for pool in pools {
                    match client.get_snapshot(h.cluster, pool, h.snapshot).await {
                        Ok(s) => {
                            if live(&s) {
                                all.push(snapshot_entry(h.cluster, pool, &s));
                            }
                            break;
                        }
                        Err(e) if e.is_not_found() => continue,
                        Err(e) => return Err(CsiError::from(e).into()),
                    }
                }
            }
        } else if !req.source_volume_id.is_empty() {
            if let Ok(h) = VolumeHandle::parse(&req.source_volume_id)
                && let Ok(client) = self.clusters.client(h.cluster)
                && let Ok(pool) = self.clusters.pool_id(h.cluster, &h.pool).await
            {
                match client
                    .list_volume_snapshots(h.cluster, pool, h.volume)
                    .await
                {
                    Ok(list) => all.extend(
                        list.iter()
                            .filter(|s| live(s))
                            .map(|s| snapshot_entry(h.cluster, pool, s)),
                    ),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(CsiError::from(e).into()),
                }
            }
        } else {
            for cluster in self.clusters.ids() {
                let client = self.clusters.client(cluster)?;
                for pool in client.list_pools(cluster).await.map_err(CsiError::from)? {
                    let list = client
                        .list_snapshots(cluster, pool.id)
                        .await
                        .map_err(CsiError::from)?;
                    all.extend(
                        list.iter()
                            .filter(|s| live(s))
                            .map(|s| snapshot_entry(cluster, pool.id, s)),
                    );
                }
            }
        }
        let (entries, next) = page(&all, req.max_entries, &req.starting_token)?;
        Ok(Response::new(csi::ListSnapshotsResponse {
            entries: entries
                .into_iter()
                .map(|s| csi::list_snapshots_response::Entry { snapshot: Some(s) })
                .collect(),
            next_token: next,
        }))
    }

    async fn get_snapshot(
        &self,
        _r: Request<csi::GetSnapshotRequest>,
    ) -> R<csi::GetSnapshotResponse> {
        Err(CsiError::Unimplemented("GetSnapshot".into()).into())
    }

    async fn controller_expand_volume(
        &self,
        request: Request<csi::ControllerExpandVolumeRequest>,
    ) -> R<csi::ControllerExpandVolumeResponse> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(CsiError::InvalidArgument("volume_id is required".into()).into());
        }
        let Some(range) = req.capacity_range else {
            return Err(CsiError::InvalidArgument("capacity_range is required".into()).into());
        };
        let want = params::volume_size(range.required_bytes, range.limit_bytes)?;
        let h = VolumeHandle::parse(&req.volume_id).map_err(CsiError::from)?;
        let client = self.clusters.client(h.cluster)?;
        let pool = self.clusters.pool_id(h.cluster, &h.pool).await?;
        let _g = self.names.lock(&req.volume_id).await;
        let v = client
            .get_volume(h.cluster, pool, h.volume)
            .await
            .map_err(|e| not_found(e, format!("volume {}", req.volume_id)))?;
        let node_expansion_required = !matches!(
            req.volume_capability
                .as_ref()
                .and_then(|c| c.access_type.as_ref()),
            Some(csi::volume_capability::AccessType::Block(_))
        );
        if v.size >= want {
            return Ok(Response::new(csi::ControllerExpandVolumeResponse {
                capacity_bytes: v.size as i64,
                node_expansion_required,
            }));
        }
        client
            .resize_volume(h.cluster, pool, h.volume, want)
            .await
            .map_err(CsiError::from)?;
        // The resize route answers 204 whatever happened: read the size back.
        let after = client
            .get_volume(h.cluster, pool, h.volume)
            .await
            .map_err(CsiError::from)?;
        if after.size < want {
            return Err(CsiError::FailedPrecondition(format!(
                "the control plane did not grow volume {} to {want} bytes (it has {}); check the cluster's state",
                req.volume_id, after.size
            ))
            .into());
        }
        Ok(Response::new(csi::ControllerExpandVolumeResponse {
            capacity_bytes: after.size as i64,
            node_expansion_required,
        }))
    }

    async fn controller_get_volume(
        &self,
        request: Request<csi::ControllerGetVolumeRequest>,
    ) -> R<csi::ControllerGetVolumeResponse> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(CsiError::InvalidArgument("volume_id is required".into()).into());
        }
        let h = VolumeHandle::parse(&req.volume_id).map_err(CsiError::from)?;
        let client = self.clusters.client(h.cluster)?;
        let pool = self.clusters.pool_id(h.cluster, &h.pool).await?;
        let v = client
            .get_volume(h.cluster, pool, h.volume)
            .await
            .map_err(|e| not_found(e, format!("volume {}", req.volume_id)))?;
        let abnormal = !is_online(&v) || v.io_error;
        Ok(Response::new(csi::ControllerGetVolumeResponse {
            volume: Some(csi::Volume {
                capacity_bytes: v.size as i64,
                volume_id: req.volume_id.clone(),
                ..Default::default()
            }),
            status: Some(csi::controller_get_volume_response::VolumeStatus {
                published_node_ids: vec![],
                volume_condition: Some(csi::VolumeCondition {
                    abnormal,
                    message: if abnormal {
                        format!(
                            "volume is {}{}",
                            v.status,
                            if v.io_error { " with I/O errors" } else { "" }
                        )
                    } else {
                        "volume is online".into()
                    },
                }),
            }),
        }))
    }

    async fn controller_modify_volume(
        &self,
        _r: Request<csi::ControllerModifyVolumeRequest>,
    ) -> R<csi::ControllerModifyVolumeResponse> {
        Err(CsiError::Unimplemented("ControllerModifyVolume".into()).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pagination_by_offset() {
        let all: Vec<u32> = (0..5).collect();
        let (p1, t1) = page(&all, 2, "").expect("p1");
        assert_eq!((p1, t1.as_str()), (vec![0, 1], "2"));
        let (p2, t2) = page(&all, 2, &t1).expect("p2");
        assert_eq!((p2, t2.as_str()), (vec![2, 3], "4"));
        let (p3, t3) = page(&all, 2, &t2).expect("p3");
        assert_eq!((p3, t3.as_str()), (vec![4], ""));
        assert_eq!(page(&all, 0, "").expect("all").0.len(), 5);
        assert_eq!(
            page(&all, 2, "x").expect_err("bad").code(),
            tonic::Code::Aborted
        );
        assert_eq!(
            page(&all, 2, "9").expect_err("past").code(),
            tonic::Code::Aborted
        );
        assert_eq!(
            page(&all, -1, "").expect_err("neg").code(),
            tonic::Code::InvalidArgument
        );
    }

    #[test]
    fn the_volume_context_carries_the_keys_the_node_reads() {
        let (c, pool, id) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        let v = CpVolume {
            id,
            nqn: "nqn.x".into(),
            ns_id: 1,
            fabric: "TCP".into(),
            ..Default::default()
        };
        let mut params = HashMap::new();
        params.insert("cluster_id".to_string(), c.to_string());
        params.insert("pool_name".to_string(), "p".to_string());
        params.insert("tune2fs_reserved_blocks".to_string(), "1".to_string());
        params.insert("xfs_su".to_string(), "16k".to_string());
        params.insert("xfs_sw".to_string(), "2".to_string());
        params.insert("mkfs_options".to_string(), "-b 4096".to_string());
        let p = ClassParams::parse(&params).expect("params");
        let paths = [
            ConnectEntry {
                ip: "10.0.0.1".into(),
                port: 4420,
                reconnect_delay: 2,
                nr_io_queues: 3,
                ctrl_loss_tmo: 60,
                host_iface: "eth1".into(),
                ..Default::default()
            },
            ConnectEntry {
                ip: "10.0.0.2".into(),
                port: 4420,
                target_lvol_id: Some("lvol-b".into()),
                ..Default::default()
            },
        ];
        let m = volume_context(c, pool, &v, &p, &None, Some(&paths));
        let get = |k: &str| m.get(k).map(String::as_str);
        assert_eq!(get("model"), Some(id.to_string()).as_deref());
        assert_eq!(get("uuid"), get("model"));
        assert_eq!(get("targetType"), Some("tcp"));
        assert_eq!(get("reconnectDelay"), Some("2"), "the primary's tunables");
        assert_eq!(get("nrIoQueues"), Some("3"));
        assert_eq!(get("ctrlLossTmo"), Some("60"));
        assert_eq!(get("hostIface"), Some("eth1"));
        assert_eq!(get("targetLvolID"), Some("lvol-b"));
        assert_eq!(
            get("connections"),
            Some(r#"[{"ip":"10.0.0.1","port":4420},{"ip":"10.0.0.2","port":4420}]"#)
        );
        assert_eq!(get("tune2fs_reserved_blocks"), Some("1"));
        assert_eq!((get("xfs_su"), get("xfs_sw")), (Some("16k"), Some("2")));
        assert_eq!(get("mkfs_options"), Some("-b 4096"));
        assert!(!m.contains_key("encryption"));
        // Without connection info: no path keys at all.
        let m = volume_context(c, pool, &v, &p, &None, None);
        for k in [
            "connections",
            "reconnectDelay",
            "nrIoQueues",
            "targetLvolID",
        ] {
            assert!(!m.contains_key(k), "{k}");
        }
    }

    #[test]
    fn accessible_topology_joins_the_zone_and_the_dhchap_pool() {
        assert!(accessible_topology(&None, None).is_empty());
        let zone = Some((params::topo::ZONE.to_string(), "z1".to_string()));
        let t = accessible_topology(&zone, Some("simplyblock.io/pool.p1"));
        assert_eq!(t.len(), 1, "one segment set: a Node must match both");
        assert_eq!(
            t[0].segments.get(params::topo::ZONE).map(String::as_str),
            Some("z1")
        );
        assert_eq!(
            t[0].segments
                .get("simplyblock.io/pool.p1")
                .map(String::as_str),
            Some("allowed")
        );
        let t = accessible_topology(&None, Some("simplyblock.io/pool.p1"));
        assert_eq!(t[0].segments.len(), 1);
    }

    #[test]
    fn urls_and_times() {
        let v = Uuid::from_u128(5);
        assert_eq!(
            id_from_url(&format!(
                "http://x/api/v2/clusters/a/storage-pools/b/volumes/{v}/"
            )),
            Some(v)
        );
        assert_eq!(id_from_url("http://x/"), None);
        assert_eq!(
            timestamp("2026-12-02T10:00:00Z").map(|t| t.seconds),
            Some(1_796_205_600)
        );
        assert_eq!(
            timestamp("2026-12-02T10:00:00").map(|t| t.seconds),
            Some(1_796_205_600)
        );
        assert!(timestamp("yesterday").is_none());
    }
}

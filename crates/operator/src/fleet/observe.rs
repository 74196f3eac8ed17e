//! One pass's reads: the control plane's lists and a bounded number of volume visits
//! (see the module above for the count), and the Kubernetes objects that name what it
//! reports.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::ResourceExt;
use kube::api::Api;
use simplyblock_api::keys::CSI_DRIVER_NAME;
use simplyblock_api::storage_device::storage_device_name;
use simplyblock_api::volume_handle::VolumeHandle;
use simplyblock_api::{StorageCluster, StorageNode, StoragePool};
use simplyblock_controlplane::{Uuid, latest_iostat};

use super::plan::{
    Claim, DeviceSeen, NodeSeen, Observation, PoolSeen, VolumeFigures, VolumeSeen, visits,
};
use crate::runtime::context::Context;
use crate::runtime::kit::Error;

/// The objects of `K` in `namespace` that belong to `cluster`, by control-plane id.
fn by_uuid<'a>(
    objects: impl IntoIterator<Item = (&'a str, Option<&'a str>, String)>,
    cluster: &str,
) -> BTreeMap<Uuid, String> {
    objects
        .into_iter()
        .filter(|(cluster_ref, _, _)| *cluster_ref == cluster)
        .filter_map(|(_, uuid, name)| Some((uuid?.parse().ok()?, name)))
        .collect()
}

pub(super) async fn observe(
    ctx: &Context,
    cluster: &StorageCluster,
    id: Uuid,
    budget: usize,
    figures: &mut BTreeMap<Uuid, VolumeFigures>,
    last_visit: &mut Option<Uuid>,
) -> Result<Observation, Error> {
    let cp = ctx.control_plane()?;
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();

    let node_objects: Vec<StorageNode> = Api::namespaced(ctx.kube.clone(), &namespace)
        .list(&Default::default())
        .await?
        .items;
    let node_names = by_uuid(
        node_objects.iter().map(|n| {
            (
                n.spec.cluster_ref.as_str(),
                n.status.as_ref().and_then(|s| s.uuid.as_deref()),
                n.name_any(),
            )
        }),
        &name,
    );
    let pool_objects: Vec<StoragePool> = Api::namespaced(ctx.kube.clone(), &namespace)
        .list(&Default::default())
        .await?
        .items;
    let pool_names = by_uuid(
        pool_objects.iter().map(|p| {
            (
                p.spec.cluster_ref.as_str(),
                p.status.as_ref().and_then(|s| s.uuid.as_deref()),
                p.name_any(),
            )
        }),
        &name,
    );
    let claims = claims(ctx, id).await?;

    let dto = cp.get_cluster(id).await?;
    let io = latest_iostat(cp.cluster_iostats(id).await.unwrap_or_default());
    let mut nodes = Vec::new();
    for n in cp.list_storage_nodes(id).await? {
        let label = node_names.get(&n.id).cloned().unwrap_or(n.hostname.clone());
        let node_io = latest_iostat(cp.node_iostats(id, n.id).await.unwrap_or_default());
        let devices = cp
            .list_devices(id, n.id)
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|d| DeviceSeen {
                name: storage_device_name(&label, &d.id.to_string()),
                size: d.size,
                used_bytes: d.capacity.size_used.max(0) as u64,
            })
            .collect();
        nodes.push(NodeSeen {
            label,
            status: n.status,
            capacity_bytes: n.capacity.size_total.max(0) as u64,
            used_bytes: n.capacity.size_used.max(0) as u64,
            io: node_io,
            devices,
        });
    }

    let mut pools = Vec::new();
    let mut pool_of: BTreeMap<Uuid, Uuid> = BTreeMap::new();
    let mut replicated: Vec<Uuid> = Vec::new();
    for p in cp.list_pools(id).await? {
        let pool_io = latest_iostat(cp.pool_iostats(id, p.id).await.unwrap_or_default());
        let capacity = p.capacity.clone().unwrap_or_default();
        let mut volumes = Vec::new();
        for v in cp.list_volumes(id, p.id).await? {
            pool_of.insert(v.id, p.id);
            if v.do_replicate {
                replicated.push(v.id);
            }
            volumes.push(VolumeSeen {
                id: v.id,
                size: v.size,
                claim: claims.get(&v.id).cloned(),
            });
        }
        pools.push(PoolSeen {
            label: pool_names.get(&p.id).cloned().unwrap_or(p.name.clone()),
            max_size: p.max_size,
            provisioned_bytes: capacity.size_prov.max(0) as u64,
            used_bytes: capacity.size_used.max(0) as u64,
            io: pool_io,
            volumes,
        });
    }
    let tasks = cp.list_tasks(id).await?;

    // Volumes gone from the control plane lose their figures; the budget goes round the
    // volumes that have a PersistentVolume (only they are exported).
    figures.retain(|v, _| pool_of.contains_key(v));
    let exported: Vec<Uuid> = pool_of
        .keys()
        .filter(|v| claims.contains_key(v))
        .copied()
        .collect();
    // The control plane's clock (its latest capacity sample), against which snapshot
    // ages are measured.
    let now = dto.capacity.date;
    for v in visits(&exported, *last_visit, budget) {
        *last_visit = Some(v);
        let pool = pool_of[&v];
        let detail = match cp.get_volume(id, pool, v).await {
            Ok(d) => d,
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e.into()),
        };
        let volume_io = latest_iostat(cp.volume_iostats(id, pool, v).await.unwrap_or_default());
        let replication_lag_seconds = if replicated.contains(&v) {
            match cp.latest_replicated_snapshot(id, v).await {
                Ok(Some(s)) => s
                    .created_at
                    .as_deref()
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                    .filter(|_| now > 0)
                    .map(|t| (now - t.as_second()).max(0) as f64),
                _ => None,
            }
        } else {
            None
        };
        figures.insert(
            v,
            VolumeFigures {
                used_bytes: detail.capacity.size_used.max(0) as u64,
                io: volume_io,
                replication_lag_seconds,
            },
        );
    }

    Ok(Observation {
        namespace,
        cluster: name,
        status: dto.status,
        rebalancing: dto.is_re_balancing,
        capacity_bytes: dto.capacity.size_total.max(0) as u64,
        used_bytes: dto.capacity.size_used.max(0) as u64,
        provisioned_bytes: dto.capacity.size_prov.max(0) as u64,
        io,
        nodes,
        pools,
        tasks,
        figures: figures.clone(),
    })
}

/// The driver's PersistentVolumes on control-plane cluster `cluster`, by volume id.
async fn claims(ctx: &Context, cluster: Uuid) -> Result<BTreeMap<Uuid, Claim>, Error> {
    let pvs: Api<PersistentVolume> = Api::all(ctx.kube.clone());
    let mut out = BTreeMap::new();
    for pv in pvs.list(&Default::default()).await? {
        let Some(spec) = pv.spec.as_ref() else {
            continue;
        };
        let Some(csi) = spec.csi.as_ref().filter(|c| c.driver == CSI_DRIVER_NAME) else {
            continue;
        };
        let Ok(handle) = VolumeHandle::parse(&csi.volume_handle) else {
            continue;
        };
        if handle.cluster != cluster {
            continue;
        }
        let claim = spec.claim_ref.as_ref();
        out.insert(
            handle.volume,
            Claim {
                persistent_volume: pv.name_any(),
                claim_namespace: claim.and_then(|c| c.namespace.clone()).unwrap_or_default(),
                claim: claim.and_then(|c| c.name.clone()).unwrap_or_default(),
            },
        );
    }
    Ok(out)
}

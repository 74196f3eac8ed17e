//! Reading the measured objects from the API server and their capacity from the control
//! plane, then handing both to [`super::readings`].

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use serde_json::json;
use simplyblock_api::keys::CSI_DRIVER_NAME;
use simplyblock_api::volume_handle::{PoolRef, VolumeHandle};
use simplyblock_api::{StorageCluster, StorageDevice, StorageNode, StoragePool};
use simplyblock_controlplane::{CapacityStat, Client, Uuid};

use super::readings::{Kind, Measured, Reading};

/// What was asked: where, and which objects.
#[derive(Clone, Debug, Default)]
pub struct Query {
    /// `None`: every namespace.
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
}

impl Query {
    fn params(&self) -> ListParams {
        let mut params = ListParams::default();
        if let Some(labels) = &self.label_selector {
            params = params.labels(labels);
        }
        if let Some(fields) = &self.field_selector {
            params = params.fields(fields);
        }
        params
    }

    fn api<K>(&self, kube: &kube::Client) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced(kube.clone(), ns),
            None => Api::all(kube.clone()),
        }
    }
}

/// Why no readings could be served.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// The API server refused the list (a bad label selector, say): its own Status.
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error("the control plane could not be asked: {0}")]
    ControlPlane(String),
}

fn measured<K: Resource>(object: &K) -> Measured {
    let meta = object.meta();
    Measured {
        name: meta.name.clone().unwrap_or_default(),
        namespace: meta.namespace.clone().unwrap_or_default(),
        labels: meta.labels.clone().unwrap_or_default(),
        creation_timestamp: meta
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
    }
}

fn uuid(text: Option<&str>) -> Option<Uuid> {
    text.and_then(|t| t.parse().ok())
}

/// `items` grouped by the control plane id of the StorageCluster each names (`cluster_ref`,
/// in its own namespace); those of a cluster without an id are left out.
fn by_cluster<'a, K: ResourceExt>(
    items: &'a [K],
    clusters: &BTreeMap<(String, String), Uuid>,
    cluster_ref: impl Fn(&K) -> &String,
) -> BTreeMap<Uuid, Vec<&'a K>> {
    let mut grouped: BTreeMap<Uuid, Vec<&K>> = BTreeMap::new();
    for item in items {
        let key = (
            item.namespace().unwrap_or_default(),
            cluster_ref(item).clone(),
        );
        if let Some(cluster) = clusters.get(&key) {
            grouped.entry(*cluster).or_default().push(item);
        }
    }
    grouped
}

/// The control plane id of each StorageCluster, by namespace and name.
async fn cluster_ids(
    kube: &kube::Client,
    query: &Query,
) -> Result<BTreeMap<(String, String), Uuid>, ObserveError> {
    let unfiltered = Query {
        namespace: query.namespace.clone(),
        ..Query::default()
    };
    let clusters = unfiltered
        .api::<StorageCluster>(kube)
        .list(&ListParams::default())
        .await?;
    Ok(clusters
        .items
        .iter()
        .filter_map(|c| {
            let id = uuid(c.status.as_ref().and_then(|s| s.uuid.as_deref()))?;
            Some(((c.namespace().unwrap_or_default(), c.name_any()), id))
        })
        .collect())
}

/// The readings of `kind` that `query` selects.
pub async fn readings(
    kind: Kind,
    kube: &kube::Client,
    cp: &Client,
    query: &Query,
) -> Result<Vec<Reading>, ObserveError> {
    let cp_error = |e: simplyblock_controlplane::Error| ObserveError::ControlPlane(e.to_string());
    let params = query.params();
    let mut out = Vec::new();
    match kind {
        Kind::StorageCluster => {
            for cluster in query.api::<StorageCluster>(kube).list(&params).await? {
                let Some(id) = uuid(cluster.status.as_ref().and_then(|s| s.uuid.as_deref())) else {
                    continue;
                };
                let found = cp.get_cluster(id).await.map_err(cp_error)?;
                let scheme =
                    json!({"dataChunks": found.distr_ndcs, "parityChunks": found.distr_npcs});
                out.extend(Reading::of(
                    kind,
                    measured(&cluster),
                    &found.capacity,
                    vec![("clusterID", json!(id)), ("erasureCoding", scheme)],
                ));
            }
        }
        Kind::StorageNode => {
            let nodes = query.api::<StorageNode>(kube).list(&params).await?;
            let clusters = cluster_ids(kube, query).await?;
            for (cluster, nodes) in by_cluster(&nodes.items, &clusters, |o| &o.spec.cluster_ref) {
                let samples: BTreeMap<Uuid, CapacityStat> = cp
                    .list_storage_nodes(cluster)
                    .await
                    .map_err(cp_error)?
                    .into_iter()
                    .map(|n| (n.id, n.capacity))
                    .collect();
                for node in nodes {
                    let Some(id) = uuid(node.status.as_ref().and_then(|s| s.uuid.as_deref()))
                    else {
                        continue;
                    };
                    let Some(sample) = samples.get(&id) else {
                        continue;
                    };
                    out.extend(Reading::of(
                        kind,
                        measured(node),
                        sample,
                        vec![
                            ("nodeID", json!(id)),
                            ("storageCluster", json!(node.spec.cluster_ref)),
                            ("workerNode", json!(node.spec.worker_node)),
                        ],
                    ));
                }
            }
        }
        Kind::StoragePool => {
            let pools = query.api::<StoragePool>(kube).list(&params).await?;
            let clusters = cluster_ids(kube, query).await?;
            for (cluster, pools) in by_cluster(&pools.items, &clusters, |o| &o.spec.cluster_ref) {
                let samples: BTreeMap<Uuid, CapacityStat> = cp
                    .list_pools(cluster)
                    .await
                    .map_err(cp_error)?
                    .into_iter()
                    .filter_map(|p| Some((p.id, p.capacity?)))
                    .collect();
                for pool in pools {
                    let Some(id) = uuid(pool.status.as_ref().and_then(|s| s.uuid.as_deref()))
                    else {
                        continue;
                    };
                    let Some(sample) = samples.get(&id) else {
                        continue;
                    };
                    out.extend(Reading::of(
                        kind,
                        measured(pool),
                        sample,
                        vec![("poolID", json!(id)), ("clusterID", json!(cluster))],
                    ));
                }
            }
        }
        Kind::StorageDevice => {
            let devices = query.api::<StorageDevice>(kube).list(&params).await?;
            let mut by_node: BTreeMap<(Uuid, Uuid), Vec<&StorageDevice>> = BTreeMap::new();
            for device in &devices.items {
                let status = device.status.as_ref();
                let (Some(cluster), Some(node)) = (
                    uuid(status.and_then(|s| s.cluster_id.as_deref())),
                    uuid(status.and_then(|s| s.node_id.as_deref())),
                ) else {
                    continue;
                };
                by_node.entry((cluster, node)).or_default().push(device);
            }
            for ((cluster, node), devices) in by_node {
                let samples: BTreeMap<Uuid, CapacityStat> = cp
                    .list_devices(cluster, node)
                    .await
                    .map_err(cp_error)?
                    .into_iter()
                    .map(|d| (d.id, d.capacity))
                    .collect();
                for device in devices {
                    let Some(id) = uuid(Some(&device.spec.device_id)) else {
                        continue;
                    };
                    let Some(sample) = samples.get(&id) else {
                        continue;
                    };
                    out.extend(Reading::of(
                        kind,
                        measured(device),
                        sample,
                        vec![
                            ("deviceID", json!(id)),
                            ("storageNode", json!(device.spec.node_ref)),
                        ],
                    ));
                }
            }
        }
        Kind::LogicalVolume => {
            let claims = query
                .api::<PersistentVolumeClaim>(kube)
                .list(&params)
                .await?;
            let bound: BTreeSet<String> = claims
                .items
                .iter()
                .filter_map(|c| c.spec.as_ref()?.volume_name.clone())
                .collect();
            if bound.is_empty() {
                return Ok(out);
            }
            let volumes = Api::<PersistentVolume>::all(kube.clone())
                .list(&ListParams::default())
                .await?;
            let handles: BTreeMap<String, VolumeHandle> = volumes
                .items
                .iter()
                .filter(|pv| bound.contains(&pv.name_any()))
                .filter_map(|pv| {
                    let csi = pv.spec.as_ref()?.csi.as_ref()?;
                    if csi.driver != CSI_DRIVER_NAME {
                        return None;
                    }
                    Some((pv.name_any(), VolumeHandle::parse(&csi.volume_handle).ok()?))
                })
                .collect();
            let mut by_pool: BTreeMap<(Uuid, Uuid), Vec<(&PersistentVolumeClaim, &str)>> =
                BTreeMap::new();
            for claim in &claims.items {
                let Some(pv) = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()) else {
                    continue;
                };
                // A handle naming its pool by name predates the v2 API: no reading.
                if let Some(VolumeHandle {
                    cluster,
                    pool: PoolRef::Id(pool),
                    ..
                }) = handles.get(pv)
                {
                    by_pool
                        .entry((*cluster, *pool))
                        .or_default()
                        .push((claim, pv));
                }
            }
            for ((cluster, pool), claims) in by_pool {
                for (claim, pv) in claims {
                    let Some(handle) = handles.get(pv) else {
                        continue;
                    };
                    // The volume list carries no capacity; only a volume's own record does.
                    let sample = match cp.get_volume(cluster, pool, handle.volume).await {
                        Ok(volume) => volume.capacity,
                        Err(e) if e.is_not_found() => continue,
                        Err(e) => return Err(cp_error(e)),
                    };
                    out.extend(Reading::of(
                        kind,
                        measured(claim),
                        &sample,
                        vec![
                            ("volumeID", json!(handle.volume)),
                            ("poolID", json!(pool)),
                            ("clusterID", json!(cluster)),
                            ("persistentVolume", json!(pv)),
                        ],
                    ));
                }
            }
        }
    }
    out.sort_by(|a, b| {
        (&a.measured.namespace, &a.measured.name).cmp(&(&b.measured.namespace, &b.measured.name))
    });
    Ok(out)
}

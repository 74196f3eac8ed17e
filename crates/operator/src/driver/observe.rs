//! Reading what a pass decides from: the cluster's SimplyblockDrivers, whether the
//! snapshot API is served, the chart's bindings that give the driver's accounts their
//! permissions, each object the driver may have, the CSIDrivers Helm installed, and where
//! the control plane's CA is kept. No writes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use k8s_openapi::api::storage::v1::CSIDriver;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};
use simplyblock_api::SimplyblockDriver;
use simplyblock_api::control_plane::{ControlPlane, SINGLETON_NAME};

use super::adoption::HELM_LABELS;
use super::manifests::{CaSource, every_key};
use super::objects::{
    GROUP_SNAPSHOT_GROUP, GROUP_SNAPSHOT_RESOURCES, GROUP_SNAPSHOT_VERSION, Kind, ObjectKey,
    SNAPSHOT_GROUP, SNAPSHOT_VERSION,
};
use super::plan::{DriverRef, Observation, Seen, ca_source};
use super::rbac::{self, Scope};
use crate::runtime::kit::Error;

/// The dynamic API of `kind` in `namespace` (ignored for a cluster-scoped kind).
pub fn api(client: &kube::Client, kind: Kind, namespace: &str) -> Api<DynamicObject> {
    let resource = kind.resource();
    if kind.namespaced() {
        Api::namespaced_with(client.clone(), namespace, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    }
}

/// Whether the cluster serves VolumeSnapshotClasses. An answer that says neither is an
/// error: deciding on it would remove the class of a cluster that has one.
pub async fn snapshot_api(client: &kube::Client) -> Result<bool, Error> {
    match client
        .list_api_group_resources(&format!("{SNAPSHOT_GROUP}/{SNAPSHOT_VERSION}"))
        .await
    {
        Ok(list) => Ok(list
            .resources
            .iter()
            .any(|r| r.name == Kind::VolumeSnapshotClass.resource().plural)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Whether the cluster serves every kind of the group-snapshot API the snapshotter
/// watches (VolumeGroupSnapshots, their contents and classes); the same care as
/// [`snapshot_api`].
pub async fn group_snapshot_api(client: &kube::Client) -> Result<bool, Error> {
    match client
        .list_api_group_resources(&format!("{GROUP_SNAPSHOT_GROUP}/{GROUP_SNAPSHOT_VERSION}"))
        .await
    {
        Ok(list) => Ok(GROUP_SNAPSHOT_RESOURCES
            .iter()
            .all(|plural| list.resources.iter().any(|r| r.name == *plural))),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Every SimplyblockDriver of the cluster.
pub async fn drivers(client: &kube::Client) -> Result<Vec<DriverRef>, Error> {
    let all: Api<SimplyblockDriver> = Api::all(client.clone());
    Ok(all
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(DriverRef::of)
        .collect())
}

/// What a pass over `driver` decides from.
pub async fn observe(
    client: &kube::Client,
    driver: &SimplyblockDriver,
    operator_namespace: &str,
    operator_image: &str,
) -> Result<Observation, Error> {
    let namespace = driver.namespace().unwrap_or_default();
    let drivers = drivers(client).await?;
    let snapshot_api = snapshot_api(client).await?;
    let group_snapshot_api = group_snapshot_api(client).await?;
    let mut live = BTreeMap::new();
    for key in every_key(&driver.spec.driver_name, snapshot_api, group_snapshot_api) {
        if let Some(object) = api(client, key.kind, &namespace).get_opt(&key.name).await? {
            live.insert(key, to_json(&object)?);
        }
    }
    let helm = format!("{}=Helm", HELM_LABELS[0]);
    let helm_csi_drivers = Api::<CSIDriver>::all(client.clone())
        .list(&ListParams::default().labels(&helm))
        .await?
        .items
        .iter()
        .map(to_json)
        .collect::<Result<_, _>>()?;
    // A driver elsewhere is held; the operator reads nothing of that namespace for it.
    let (bindings, control_plane_ca) = if namespace == operator_namespace {
        (
            bindings(client, &namespace).await?,
            control_plane_ca(client, &namespace).await?,
        )
    } else {
        (BTreeMap::new(), None)
    };
    Ok(Observation {
        bindings,
        drivers,
        snapshot_api,
        group_snapshot_api,
        live,
        helm_csi_drivers,
        operator_namespace: operator_namespace.to_owned(),
        operator_image: operator_image.to_owned(),
        control_plane_ca,
    })
}

/// `name` through `api` as JSON, or `None` when there is none.
async fn get_json<K>(api: Api<K>, name: &str) -> Result<Option<serde_json::Value>, kube::Error>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    api.get_opt(name).await.and_then(|found| {
        found
            .map(serde_json::to_value)
            .transpose()
            .map_err(kube::Error::SerdeError)
    })
}

/// Each of the chart's bindings for the driver ([`rbac::grants`]), read by name (all the
/// operator may read of RBAC); a RoleBinding in `namespace`, the driver's.
async fn bindings(client: &kube::Client, namespace: &str) -> Result<BTreeMap<String, Seen>, Error> {
    let mut out = BTreeMap::new();
    for grant in rbac::grants() {
        let read = match grant.scope {
            Scope::Cluster => {
                get_json(Api::<ClusterRoleBinding>::all(client.clone()), &grant.name).await
            }
            Scope::Namespace => {
                get_json(
                    Api::<RoleBinding>::namespaced(client.clone(), namespace),
                    &grant.name,
                )
                .await
            }
        };
        let seen = match read {
            Ok(Some(binding)) => Seen::Found(binding),
            Ok(None) => Seen::Missing,
            Err(kube::Error::Api(s)) if s.code == 403 => Seen::Forbidden,
            Err(e) => return Err(e.into()),
        };
        out.insert(grant.binding_key(), seen);
    }
    Ok(out)
}

/// Where the CA of the ControlPlane of `namespace` is kept ([`ca_source`]); `None`
/// without a ControlPlane.
async fn control_plane_ca(
    client: &kube::Client,
    namespace: &str,
) -> Result<Option<CaSource>, Error> {
    let control_planes: Api<ControlPlane> = Api::namespaced(client.clone(), namespace);
    let Some(cp) = control_planes.get_opt(SINGLETON_NAME).await? else {
        return Ok(None);
    };
    let bundle = cp
        .spec
        .source
        .managed
        .as_ref()
        .and_then(|m| m.ca_bundle_secret_ref.as_ref());
    let keys = match bundle {
        None => Vec::new(),
        Some(r) => Api::<Secret>::namespaced(client.clone(), namespace)
            .get_opt(&r.name)
            .await?
            .and_then(|s| s.data)
            .map(|d| {
                d.into_iter()
                    .filter(|(_, v)| !v.0.is_empty())
                    .map(|(k, _)| k)
                    .collect()
            })
            .unwrap_or_default(),
    };
    Ok(ca_source(&cp, &keys))
}

fn to_json<K: serde::Serialize>(object: &K) -> Result<serde_json::Value, Error> {
    serde_json::to_value(object).map_err(|e| Error::Kube(kube::Error::SerdeError(e)))
}

/// The cluster-scoped objects of the driver (its label marks them), for its removal.
pub async fn cluster_scoped(
    client: &kube::Client,
    snapshot_api: bool,
    group_snapshot_api: bool,
) -> Result<Vec<ObjectKey>, Error> {
    let selector = format!(
        "{}={}",
        simplyblock_api::keys::MANAGED_BY_LABEL,
        simplyblock_api::keys::MANAGED_BY_SIMPLYBLOCK_DRIVER
    );
    let mut out = Vec::new();
    for kind in Kind::ALL.into_iter().filter(|k| !k.namespaced()) {
        if (kind == Kind::VolumeSnapshotClass && !snapshot_api)
            || (kind == Kind::VolumeGroupSnapshotClass && !group_snapshot_api)
        {
            continue;
        }
        let listed = api(client, kind, "")
            .list(&ListParams::default().labels(&selector))
            .await?;
        out.extend(
            listed
                .items
                .iter()
                .map(|o| ObjectKey::new(kind, o.name_any())),
        );
    }
    Ok(out)
}

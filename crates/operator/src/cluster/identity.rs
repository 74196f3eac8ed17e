//! The control plane's id and secret of a StorageCluster, kept in the Secret
//! `simplyblock-cluster-<name>` (the durable record between creating the cluster and
//! storing its uuid in status) and published to the CSI driver's Secret.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use simplyblock_api::StorageCluster;
use simplyblock_controlplane::Uuid;

use super::status::MANAGER;
use crate::csi_secret;
use crate::runtime::context::Context;
use crate::runtime::kit::Error;

/// The label on the Secrets this controller owns (and watches).
pub const MANAGED_BY_LABEL: &str = "storage.simplyblock.io/managed-by";

/// The control plane's id and secret of a cluster.
#[derive(Clone, PartialEq, Eq)]
pub struct Identity {
    pub uuid: Uuid,
    pub secret: String,
}

impl fmt::Debug for Identity {
    // The secret stays out of logs and test output.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("uuid", &self.uuid)
            .finish_non_exhaustive()
    }
}

/// The Secret `simplyblock-cluster-<name>` holding the cluster's [`Identity`].
pub fn cluster_secret_name(cluster: &str) -> String {
    format!("simplyblock-cluster-{cluster}")
}

/// An upgrade leaves `simplyblock-<name>-upgrade` (`uuid`, `secret`) for adoption.
pub fn upgrade_secret_name(cluster: &str) -> String {
    format!("simplyblock-{cluster}-upgrade")
}

/// The identity in Secret `secret`; `None` when the Secret or one of its keys is missing.
pub async fn read(ctx: &Context, ns: &str, secret: &str) -> Result<Option<Identity>, Error> {
    let api: Api<Secret> = Api::namespaced(ctx.kube.clone(), ns);
    let Some(s) = api.get_opt(secret).await? else {
        return Ok(None);
    };
    let field = |k: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(k))
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
    };
    Ok(
        match (field("uuid").and_then(|u| u.parse().ok()), field("secret")) {
            (Some(uuid), Some(secret)) => Some(Identity { uuid, secret }),
            _ => None,
        },
    )
}

/// Stores `id` in the cluster's Secret, owned by the StorageCluster.
pub async fn write(ctx: &Context, cluster: &StorageCluster, id: &Identity) -> Result<(), Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster_secret_name(&cluster.name_any());
    let owner = cluster.controller_owner_ref(&());
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.clone()),
            owner_references: owner.map(|o| vec![o]),
            labels: Some(BTreeMap::from([
                (MANAGED_BY_LABEL.into(), "storagecluster".into()),
                ("storage.simplyblock.io/cluster".into(), cluster.name_any()),
            ])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("uuid".into(), ByteString(id.uuid.to_string().into_bytes())),
            ("secret".into(), ByteString(id.secret.clone().into_bytes())),
        ])),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(ctx.kube.clone(), &ns)
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await?;
    Ok(())
}

/// Writes every cluster the control plane lists into the CSI driver's Secret, marks `id`'s
/// cluster the site's own, and drops the entries this control plane wrote for clusters it
/// no longer lists ([`csi_secret::with_listed`]). `id`'s own entry is written from `id`
/// even before the list shows it, so the driver can serve the cluster as soon as it exists.
pub async fn publish_csi_entry(
    ctx: &Context,
    cluster: &StorageCluster,
    id: &Identity,
) -> Result<(), Error> {
    let endpoint = ctx.control_plane_endpoint()?;
    let entry = |uuid: String, secret: String| csi_secret::Entry {
        cluster_id: uuid,
        cluster_endpoint: endpoint.clone(),
        cluster_secret: secret,
        extra: Default::default(),
    };
    let mut listed: Vec<csi_secret::Entry> = ctx
        .control_plane()?
        .list_clusters()
        .await?
        .into_iter()
        .filter(|c| c.id != id.uuid)
        .map(|c| entry(c.id.to_string(), c.secret.expose().to_string()))
        .collect();
    listed.push(entry(id.uuid.to_string(), id.secret.clone()));
    let own = id.uuid.to_string();
    change_csi_secret(ctx, cluster, |c| {
        csi_secret::with_listed(c, &endpoint, &listed, &own)
    })
    .await
}

/// Applies `change` to the CSI driver's Secret on behalf of `cluster`. A stored secret
/// that does not parse is left as it is, and a Warning event on the cluster says what is
/// wrong with it and how to repair it.
pub async fn change_csi_secret(
    ctx: &Context,
    cluster: &StorageCluster,
    change: impl Fn(&csi_secret::Contents) -> Option<csi_secret::Contents>,
) -> Result<(), Error> {
    match csi_secret::update(&ctx.kube, &ctx.namespace, change).await {
        Ok(()) => Ok(()),
        Err(csi_secret::UpdateError::Kube(e)) => Err(e.into()),
        Err(unreadable @ csi_secret::UpdateError::Unreadable { .. }) => {
            let message = unreadable.to_string();
            ctx.event(cluster, true, "CSISecretUnreadable", message.clone())
                .await;
            Err(Error::CsiSecretUnreadable(message))
        }
    }
}

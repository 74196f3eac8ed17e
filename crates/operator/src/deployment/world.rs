//! Reads the world a deployment document is judged against.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use simplyblock_api::cluster_deployment_config::ClusterDeploymentConfigSpec;
use simplyblock_api::{ClusterDeploymentConfig, StorageCluster, StorageNode};

use super::validation::{ExistingCluster, World};

/// Reads what approval is judged against: the Nodes, the namespace's clusters with their
/// nodes, and the other approved documents that create a cluster.
pub async fn read(
    client: &kube::Client,
    namespace: &str,
    spec: &ClusterDeploymentConfigSpec,
) -> Result<World, kube::Error> {
    let nodes: BTreeSet<String> = Api::<Node>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    let mut world = World {
        nodes,
        ..World::default()
    };
    for cluster in Api::<StorageCluster>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?
        .items
    {
        let storage = cluster.spec.storage_nodes.clone().unwrap_or_default();
        let sockets = storage.sockets_to_use.len().max(1) as u32;
        world.clusters.insert(
            cluster.metadata.name.clone().unwrap_or_default(),
            ExistingCluster {
                device_class: cluster.spec.device_class,
                stripe: cluster.spec.stripe.clone(),
                nodes: BTreeSet::new(),
                slots_per_worker: sockets * storage.nodes_per_socket.max(1) as u32,
            },
        );
    }
    if let Some(target) = spec.cluster_ref.as_deref()
        && let Some(existing) = world.clusters.get_mut(target)
    {
        for node in Api::<StorageNode>::namespaced(client.clone(), namespace)
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|n| n.spec.cluster_ref == target)
        {
            existing
                .nodes
                .insert((node.spec.worker_node, node.spec.slot.unwrap_or(0)));
        }
    }
    for other in Api::<ClusterDeploymentConfig>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?
        .items
    {
        if other.spec.approved
            && other.spec.cluster_ref.is_none()
            && let Some(template) = &other.spec.cluster
        {
            world.creating.insert(
                template.name.clone(),
                other.metadata.name.clone().unwrap_or_default(),
            );
        }
    }
    Ok(world)
}

//! The node's topology segments, from its Kubernetes Node labels.

use std::collections::BTreeMap;
use std::time::Duration;

use simplyblock_api::keys;

use crate::error::{CsiError, Result};
use crate::params::topo;

/// Segments NodeGetInfo reports for a node with these labels: zone (the beta key is
/// reported under the stable one), region, `simplyblock.io/pool.*=allowed`, every
/// `simplyblock.io/storage-node-uuid.*`; without any of these, only the hostname segment.
pub fn segments(labels: &BTreeMap<String, String>, node: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(z) = labels
        .get(topo::ZONE)
        .or_else(|| labels.get(topo::ZONE_BETA))
    {
        out.insert(topo::ZONE.to_string(), z.clone());
    }
    if let Some(r) = labels.get(topo::REGION) {
        out.insert(topo::REGION.to_string(), r.clone());
    }
    for (k, v) in labels {
        if (k.starts_with(topo::POOL_PREFIX) && v == keys::POOL_ACCESS_ALLOWED)
            || k.starts_with(topo::STORAGE_NODE_PREFIX)
        {
            out.insert(k.clone(), v.clone());
        }
    }
    if out.is_empty() {
        out.insert(topo::HOSTNAME.to_string(), node.to_string());
    }
    out
}

/// What the node learns from its Node object.
#[derive(Debug, Clone, Default)]
pub struct NodeFacts {
    pub uid: Option<String>,
    pub labels: BTreeMap<String, String>,
}

/// Read the Node (5 tries, 5 s apart: registering without topology breaks provisioning,
/// so the caller exits when this fails).
pub async fn read_node(client: kube::Client, name: &str) -> Result<NodeFacts> {
    use k8s_openapi::api::core::v1::Node;
    let api: kube::Api<Node> = kube::Api::all(client);
    let mut last = String::new();
    for attempt in 0..5 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        match api.get(name).await {
            Ok(n) => {
                return Ok(NodeFacts {
                    uid: n.metadata.uid,
                    labels: n.metadata.labels.unwrap_or_default(),
                });
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(CsiError::Internal(format!(
        "could not read Node {name} from the Kubernetes API after 5 tries ({last}); the node plugin needs its labels for topology"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn labels_become_segments() {
        let s = segments(
            &l(&[
                ("failure-domain.beta.kubernetes.io/zone", "z1"),
                ("topology.kubernetes.io/region", "r1"),
                ("simplyblock.io/pool.gold", "allowed"),
                ("simplyblock.io/pool.silver", "denied"),
                ("simplyblock.io/storage-node-uuid.c1.0", "n1"),
                ("kubernetes.io/hostname", "w1"),
            ]),
            "w1",
        );
        assert_eq!(
            s,
            l(&[
                ("topology.kubernetes.io/zone", "z1"),
                ("topology.kubernetes.io/region", "r1"),
                ("simplyblock.io/pool.gold", "allowed"),
                ("simplyblock.io/storage-node-uuid.c1.0", "n1"),
            ])
        );
        assert_eq!(
            segments(&l(&[("kubernetes.io/hostname", "w2")]), "w2"),
            l(&[("topology.simplyblock.io/hostname", "w2")])
        );
    }

    #[test]
    fn the_storage_node_labels_the_operator_writes_place_volumes_on_their_nodes() {
        let c1 = uuid::Uuid::from_u128(0x1111);
        let c2 = uuid::Uuid::from_u128(0x2222);
        let (n1, n2, n3) = (
            uuid::Uuid::from_u128(0xa1),
            uuid::Uuid::from_u128(0xa2),
            uuid::Uuid::from_u128(0xb1),
        );
        // The labels of a Node serving two slots of one cluster and one of another, keyed
        // as the operator's workload keys them.
        let labels: BTreeMap<String, String> = [
            (keys::storage_node_topology_key(&c1.to_string(), 0), n1),
            (keys::storage_node_topology_key(&c1.to_string(), 1), n2),
            (keys::storage_node_topology_key(&c2.to_string(), 0), n3),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.to_string()))
        .collect();
        let reported = segments(&labels, "w1");
        assert_eq!(reported, labels, "every storage-node label is a segment");
        let placed = |cluster| {
            crate::params::storage_nodes_in(cluster, std::slice::from_ref(&reported), &[])
        };
        assert_eq!(placed(c1), vec![n1, n2]);
        assert_eq!(placed(c2), vec![n3]);
        assert!(placed(uuid::Uuid::from_u128(0x3333)).is_empty());
    }
}

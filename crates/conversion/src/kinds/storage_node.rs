//! StorageNode: `overrides` is `config`, `socketIndex` is `slot`, `storageNodeSetRef` is
//! `nodeSet`, and the hub's `clusterRef` is the StorageCluster that controls the node (its
//! controller owner reference), which v1alpha1 does not write down. The failure domain, an
//! index in v1alpha1, is a label in the hub; the device summary, `total/online` text in
//! v1alpha1, is two counts in the hub.
//!
//! Stashed going up: the overrides the hub keeps on the cluster (`ubuntuHost`,
//! `skipKubeletConfiguration`, `enableCpuTopology`), `status.postedAt` and
//! `status.latencyMetrics`. Stashed going down: `config.sizing`, the pull policies, a
//! `clusterRef` other than the controller's, the step, phase, message, capacity and observed
//! generation, and a failure domain that is not a decimal index.

use kube::CustomResourceExt;
use serde_json::{Value, json};
use simplyblock_api::{StorageNode, v1alpha1};

use crate::{Kind, Mapping, Rule};

pub const KIND: Kind = Kind {
    kind: "StorageNode",
    rules: &[
        Rule::with("", "spec.clusterRef", Mapping::Derived(controlling_cluster)),
        Rule::same("spec.storageNodeSetRef", "spec.nodeSet"),
        Rule::same("spec.socketIndex", "spec.slot"),
        Rule::same("spec.overrides.spdkImage", "spec.config.spdkImage"),
        Rule::same(
            "spec.overrides.spdkProxyImage",
            "spec.config.spdkProxyImage",
        ),
        Rule::same(
            "spec.overrides.spdkSystemMemory",
            "spec.config.spdkSystemMemory",
        ),
        Rule::same(
            "spec.overrides.reservedSystemCPU",
            "spec.config.reservedSystemCPU",
        ),
        Rule::same(
            "spec.overrides.journalManager",
            "spec.config.journalManager",
        ),
        Rule::same("spec.overrides.pcieAllowList", "spec.config.pcieAllowList"),
        Rule::same("spec.overrides.pcieDenyList", "spec.config.pcieDenyList"),
        Rule::same("spec.overrides.pcieModel", "spec.config.pcieModel"),
        Rule::same(
            "spec.overrides.driveSizeRange",
            "spec.config.driveSizeRange",
        ),
        Rule::same("spec.overrides.deviceNames", "spec.config.deviceNames"),
        Rule::same("spec.overrides.expand", "spec.config.expand"),
        Rule::with(
            "spec.overrides.failureDomain",
            "spec.config.failureDomain",
            FAILURE_DOMAIN,
        ),
        Rule::with(
            "status.failureDomain",
            "status.failureDomain",
            FAILURE_DOMAIN,
        ),
        Rule::with(
            "status.resources.devices",
            "status.resources.devices",
            Mapping::Code {
                up: devices_up,
                down: devices_down,
            },
        ),
    ],
    v1alpha1: v1alpha1::StorageNode::crd,
    hub: StorageNode::crd,
};

/// The name of the StorageCluster among the controller owner references (by kind only, as
/// the Go operator read it).
fn controlling_cluster(object: &Value) -> Option<Value> {
    object
        .pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| {
            r.get("controller").and_then(Value::as_bool) == Some(true)
                && r.get("kind").and_then(Value::as_str) == Some("StorageCluster")
        })
        .and_then(|r| r.get("name"))
        .filter(|n| n.as_str().is_some_and(|n| !n.is_empty()))
        .cloned()
}

/// A failure-domain index (v1alpha1) is the label of its decimal digits (hub); an index out
/// of range, or a label that is not a non-negative 32-bit index, is stashed.
const FAILURE_DOMAIN: Mapping = Mapping::Code {
    up: |value, _| {
        let n = i32::try_from(value.as_i64()?).ok().filter(|n| *n >= 0)?;
        Some(Value::String(n.to_string()))
    },
    down: |value, _| {
        value
            .as_str()?
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|n| *n >= 0)
            .map(Value::from)
    },
};

/// `"total/online"`, the summary the Go operator stored, is `{online, total}`; text that is
/// not two counts is stashed.
fn devices_up(value: &Value, _: &Value) -> Option<Value> {
    let (total, online) = value.as_str()?.split_once('/')?;
    let total: i32 = total.trim().parse().ok()?;
    let online: i32 = online.trim().parse().ok()?;
    Some(json!({"online": online, "total": total}))
}

fn devices_down(value: &Value, _: &Value) -> Option<Value> {
    let total = value.get("total")?.as_i64()?;
    let online = value.get("online")?.as_i64()?;
    Some(Value::String(format!("{total}/{online}")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::{HUB, SPOKE, convert};

    /// A node as the Go operator left it after the upgrade re-parented it to its cluster and
    /// stamped its sizing.
    fn go_node() -> serde_json::Value {
        json!({
            "apiVersion": SPOKE,
            "kind": "StorageNode",
            "metadata": {
                "name": "set-a-0",
                "namespace": "simplyblock",
                "ownerReferences": [{
                    "apiVersion": "storage.simplyblock.io/v1alpha1", "kind": "StorageCluster",
                    "name": "cluster-a", "uid": "u1", "controller": true
                }],
                "annotations": {
                    "storage.simplyblock.io/conversion-spec.config.sizing":
                        "{\"minHugePagesSize\":\"16G\",\"vcpuCount\":8}"
                }
            },
            "spec": {
                "storageNodeSetRef": "set-a",
                "workerNode": "worker-1",
                "socketId": "0",
                "nodeIndex": 0,
                "socketIndex": 1,
                "overrides": {
                    "spdkImage": "quay.io/simplyblock-io/spdk:v25",
                    "failureDomain": 2,
                    "ubuntuHost": true,
                    "deviceNames": ["nvme0n1"]
                }
            },
            "status": {
                "uuid": "9d1e",
                "status": "online",
                "health": true,
                "resources": {"cpu": 4, "memory": "8G", "devices": "4/3"},
                "ports": {"management": "10.0.0.5", "nvmeof": 4420},
                "postedAt": "2026-01-02T03:04:05Z",
                "failureDomain": 2
            }
        })
    }

    #[test]
    fn a_go_node_goes_up_with_its_cluster_from_its_owner() {
        let hub = convert(&go_node(), HUB);
        assert_eq!(
            hub["spec"],
            json!({
                "clusterRef": "cluster-a",
                "nodeSet": "set-a",
                "workerNode": "worker-1",
                "socketId": "0",
                "nodeIndex": 0,
                "slot": 1,
                "config": {
                    "sizing": {"vcpuCount": 8, "minHugePagesSize": "16G"},
                    "spdkImage": "quay.io/simplyblock-io/spdk:v25",
                    "failureDomain": "2",
                    "deviceNames": ["nvme0n1"]
                }
            })
        );
        assert_eq!(
            hub["status"],
            json!({
                "uuid": "9d1e",
                "status": "online",
                "health": true,
                "resources": {"cpu": 4, "memory": "8G", "devices": {"online": 3, "total": 4}},
                "ports": {"management": "10.0.0.5", "nvmeof": 4420},
                "failureDomain": "2"
            })
        );
        assert_eq!(
            hub["metadata"]["annotations"],
            json!({
                "storage.simplyblock.io/v1alpha1-spec.overrides": "{\"ubuntuHost\":true}",
                "storage.simplyblock.io/v1alpha1-status.postedAt": "\"2026-01-02T03:04:05Z\""
            })
        );

        // The way back stashes what is left of the hub's config as one block.
        let mut expected = go_node();
        expected["metadata"]["annotations"] = json!({
            "storage.simplyblock.io/conversion-spec.config":
                "{\"sizing\":{\"minHugePagesSize\":\"16G\",\"vcpuCount\":8}}"
        });
        let back = convert(&hub, SPOKE);
        assert_eq!(back, expected);
        assert_eq!(convert(&back, HUB), hub);
    }

    #[test]
    fn a_node_not_yet_reparented_has_no_cluster_and_a_stashed_one_wins() {
        let mut node = go_node();
        node["metadata"]["ownerReferences"][0]["kind"] = json!("StorageNodeSet");
        assert_eq!(convert(&node, HUB)["spec"].get("clusterRef"), None);

        node["metadata"]["annotations"]["storage.simplyblock.io/conversion-spec.clusterRef"] =
            json!("\"cluster-b\"");
        assert_eq!(
            convert(&node, HUB)["spec"]["clusterRef"],
            json!("cluster-b")
        );
    }

    #[test]
    fn a_failure_domain_label_that_is_no_index_waits_in_a_stash() {
        let mut hub = convert(&go_node(), HUB);
        hub["spec"]["config"]["failureDomain"] = json!("rack-7");
        let down = convert(&hub, SPOKE);
        assert_eq!(down["spec"]["overrides"].get("failureDomain"), None);
        assert_eq!(
            down["metadata"]["annotations"]["storage.simplyblock.io/conversion-spec.config.failureDomain"],
            json!("\"rack-7\"")
        );
        assert_eq!(
            convert(&down, HUB)["spec"]["config"]["failureDomain"],
            json!("rack-7")
        );
    }
}

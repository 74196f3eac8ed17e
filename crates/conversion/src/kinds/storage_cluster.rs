//! StorageCluster: `maxHugePagesSize` is `minHugePagesSize` (it always was a floor), the
//! Vault block is `kms.vault`, the backup endpoint loses its `local`, and the toggles of
//! migration and placement are top-level or said the other way round. Realignment defaulted
//! on in v1alpha1 and the hub says `disableDataRealignment`, so unset means on in both and a
//! plain negation carries it. The Go operator's `phase` (`creation`) and `subPhase`
//! (`creating`) are the hub's `Creating` phase and creation step; any other value of either
//! side is stashed. Thresholds are 32-bit in v1alpha1: a hub value beyond that is stashed.
//! The backup flags, `volumeMigrationSettings.enabled` and the never-written status fields
//! have no hub field and are stashed.

use kube::CustomResourceExt;
use serde_json::Value;
use simplyblock_api::{StorageCluster, v1alpha1};

use crate::{Kind, Mapping, Rule};

/// A threshold value, 64-bit in the hub and 32-bit in v1alpha1.
const THRESHOLD: Mapping = Mapping::Code {
    up: |v, _| Some(v.clone()),
    down: |v, _| {
        v.as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .map(Value::from)
    },
};

/// The one phase v1alpha1 writes, `creation`, is the hub's `Creating`.
const PHASE: Mapping = Mapping::Code {
    up: |v, _| (v.as_str() == Some("creation")).then(|| Value::from("Creating")),
    down: |v, _| (v.as_str() == Some("Creating")).then(|| Value::from("creation")),
};

/// The one sub-phase v1alpha1 writes, `creating`, is the hub's creation step `Creating`.
const SUB_PHASE: Mapping = Mapping::Code {
    up: |v, _| (v.as_str() == Some("creating")).then(|| Value::from("Creating")),
    down: |v, _| (v.as_str() == Some("Creating")).then(|| Value::from("creating")),
};

pub const KIND: Kind = Kind {
    kind: "StorageCluster",
    rules: &[
        Rule::same("spec.maxHugePagesSize", "spec.minHugePagesSize"),
        Rule::same(
            "spec.hashicorpVaultSettings.baseURL",
            "spec.kms.vault.endpoint",
        ),
        Rule::same("spec.backup.localEndpoint", "spec.backup.endpoint"),
        Rule::with(
            "spec.warningThreshold.capacity",
            "spec.warningThreshold.capacity",
            THRESHOLD,
        ),
        Rule::with(
            "spec.warningThreshold.provisionedCapacity",
            "spec.warningThreshold.provisionedCapacity",
            THRESHOLD,
        ),
        Rule::with(
            "spec.criticalThreshold.capacity",
            "spec.criticalThreshold.capacity",
            THRESHOLD,
        ),
        Rule::with(
            "spec.criticalThreshold.provisionedCapacity",
            "spec.criticalThreshold.provisionedCapacity",
            THRESHOLD,
        ),
        Rule::with(
            "spec.volumeMigrationSettings.dataRealignment.enabled",
            "spec.disableDataRealignment",
            Mapping::Negate,
        ),
        Rule::same(
            "spec.volumeAutoPlacement.enabled",
            "spec.enableVolumeAutoPlacement",
        ),
        Rule::with(
            "spec.volumeAutoPlacement.migrationEnabled",
            "spec.volumeAutoPlacement.disableMigration",
            Mapping::Negate,
        ),
        Rule::same(
            "spec.volumeAutoPlacement.latencyBenchmarkEnabled",
            "spec.volumeAutoPlacement.enableLatencyBenchmark",
        ),
        Rule::with(
            "spec.volumeAutoPlacement.metricsBackend",
            "spec.volumeAutoPlacement.metricsBackend",
            Mapping::Enum(&[
                ("controlplane", "ControlPlane"),
                ("prometheus", "Prometheus"),
                ("uniform", "Uniform"),
            ]),
        ),
        Rule::with("status.phase", "status.phase", PHASE),
        Rule::with("status.subPhase", "status.step.state", SUB_PHASE),
    ],
    v1alpha1: v1alpha1::StorageCluster::crd,
    hub: StorageCluster::crd,
};

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::{HUB, SPOKE, convert};

    /// A cluster as the Go operator left it: created, online, with Vault, backup and
    /// automatic placement configured.
    fn go_cluster() -> serde_json::Value {
        json!({
            "apiVersion": SPOKE,
            "kind": "StorageCluster",
            "metadata": {"name": "simplyblock-cluster", "namespace": "simplyblock"},
            "spec": {
                "maxSubsystemCount": 32,
                "vcpuCount": 8,
                "maxHugePagesSize": "100G",
                "stripe": {"dataChunks": 2, "parityChunks": 1},
                "fabricType": "tcp",
                "nvmfBasePort": 4420,
                "hashicorpVaultSettings": {"baseURL": "https://vault.example.com:8200"},
                "warningThreshold": {"capacity": 80, "provisionedCapacity": 150},
                "backup": {
                    "localEndpoint": "https://s3.example.com",
                    "snapshotBackups": true,
                    "secondaryTarget": 2,
                    "credentialsSecretRef": {"name": "s3-credentials"}
                },
                "volumeMigrationSettings": {
                    "enabled": true,
                    "rebalancerImage": "quay.io/simplyblock-io/rebalancer:1.0",
                    "dataRealignment": {"interval": "15m", "minMoves": 3}
                },
                "volumeAutoPlacement": {
                    "enabled": true,
                    "migrationEnabled": false,
                    "metricsBackend": "controlplane",
                    "latencyBenchmarkEnabled": true,
                    "imbalanceThreshold": 70
                }
            },
            "status": {
                "uuid": "5f0c7c2e-uuid",
                "clusterName": "simplyblock-cluster",
                "status": "active",
                "configured": true,
                "erasureCodingScheme": "2x1",
                "maxFaultTolerance": 1,
                "mgmtNodes": 3
            }
        })
    }

    #[test]
    fn a_go_cluster_goes_up_to_the_hub_and_back() {
        let up = convert(&go_cluster(), HUB);
        assert_eq!(
            up["spec"],
            json!({
                "maxSubsystemCount": 32,
                "vcpuCount": 8,
                "minHugePagesSize": "100G",
                "stripe": {"dataChunks": 2, "parityChunks": 1},
                "fabricType": "tcp",
                "nvmfBasePort": 4420,
                "kms": {"vault": {"endpoint": "https://vault.example.com:8200"}},
                "warningThreshold": {"capacity": 80, "provisionedCapacity": 150},
                "backup": {
                    "endpoint": "https://s3.example.com",
                    "credentialsSecretRef": {"name": "s3-credentials"}
                },
                "volumeMigrationSettings": {
                    "rebalancerImage": "quay.io/simplyblock-io/rebalancer:1.0",
                    "dataRealignment": {"interval": "15m", "minMoves": 3}
                },
                "enableVolumeAutoPlacement": true,
                "volumeAutoPlacement": {
                    "disableMigration": true,
                    "metricsBackend": "ControlPlane",
                    "enableLatencyBenchmark": true,
                    "imbalanceThreshold": 70
                }
            })
        );
        // Realignment was unset, which meant on: the hub does not disable it either.
        assert!(up["spec"].get("disableDataRealignment").is_none());
        assert_eq!(
            up["status"],
            json!({
                "uuid": "5f0c7c2e-uuid",
                "clusterName": "simplyblock-cluster",
                "status": "active",
                "configured": true,
                "erasureCodingScheme": "2x1",
                "maxFaultTolerance": 1
            })
        );
        assert_eq!(
            up["metadata"]["annotations"],
            json!({
                "storage.simplyblock.io/v1alpha1-spec.backup.secondaryTarget": "2",
                "storage.simplyblock.io/v1alpha1-spec.backup.snapshotBackups": "true",
                "storage.simplyblock.io/v1alpha1-spec.volumeMigrationSettings.enabled": "true",
                "storage.simplyblock.io/v1alpha1-status.mgmtNodes": "3"
            })
        );

        let down = convert(&up, SPOKE);
        assert_eq!(down, go_cluster());
    }

    #[test]
    fn realignment_turned_off_in_v1alpha1_is_disabled_in_the_hub() {
        let mut cluster = go_cluster();
        cluster["spec"]["volumeMigrationSettings"]["dataRealignment"]["enabled"] = json!(false);
        let up = convert(&cluster, HUB);
        assert_eq!(up["spec"]["disableDataRealignment"], json!(true));
        assert_eq!(convert(&up, SPOKE), cluster);
    }

    #[test]
    fn a_hub_cluster_mid_creation_reads_as_the_go_operators_creation() {
        let hub = json!({
            "apiVersion": HUB,
            "kind": "StorageCluster",
            "metadata": {"name": "c", "namespace": "simplyblock"},
            "spec": {"maxSubsystemCount": 10, "vcpuCount": 4,
                     "warningThreshold": {"capacity": 5_000_000_000i64}},
            "status": {"phase": "Creating",
                       "step": {"state": "Creating", "deadline": "2026-01-02T03:04:05Z"}}
        });
        let down = convert(&hub, SPOKE);
        assert_eq!(
            down["status"],
            json!({"phase": "creation", "subPhase": "creating"})
        );
        // Beyond 32 bits: v1alpha1 cannot say it, so it waits in the stash.
        assert!(down["spec"].get("warningThreshold").is_none());
        assert_eq!(
            down["metadata"]["annotations"],
            json!({
                "storage.simplyblock.io/conversion-spec.warningThreshold.capacity": "5000000000",
                "storage.simplyblock.io/conversion-status.step": "{\"deadline\":\"2026-01-02T03:04:05Z\"}"
            })
        );
        assert_eq!(convert(&down, HUB), hub);
    }
}

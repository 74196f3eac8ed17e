//! StoragePool: `clusterName` is `clusterRef`; capacity and QoS limits are `limits`; the
//! StorageClass parameters, text in v1alpha1, are typed `volumeDefaults`. The unused
//! `status` and `action`, and the observed QoS are stashed.

use kube::CustomResourceExt;
use simplyblock_api::{StoragePool, v1alpha1};

use crate::{Kind, Mapping, Rule};

pub const KIND: Kind = Kind {
    kind: "StoragePool",
    rules: &[
        Rule::same("spec.clusterName", "spec.clusterRef"),
        Rule::same("spec.capacityLimit", "spec.limits.capacity"),
        Rule::same("spec.logicalVolumeMaxSize", "spec.limits.maxVolumeSize"),
        Rule::same("spec.qos.iops", "spec.limits.iops"),
        Rule::same("spec.qos.throughput", "spec.limits.throughput"),
        Rule::same("spec.dhchap", "spec.volumeDefaults.enableDHCHAP"),
        Rule::with(
            "spec.storageClassParameters.qosRwIops",
            "spec.volumeDefaults.iops",
            Mapping::IntText,
        ),
        Rule::with(
            "spec.storageClassParameters.qosRwMbytes",
            "spec.volumeDefaults.throughput.readWrite",
            Mapping::IntText,
        ),
        Rule::with(
            "spec.storageClassParameters.qosRMbytes",
            "spec.volumeDefaults.throughput.read",
            Mapping::IntText,
        ),
        Rule::with(
            "spec.storageClassParameters.qosWMbytes",
            "spec.volumeDefaults.throughput.write",
            Mapping::IntText,
        ),
        Rule::with(
            "spec.storageClassParameters.compression",
            "spec.volumeDefaults.enableCompression",
            Mapping::BoolText,
        ),
        Rule::same(
            "spec.storageClassParameters.encryption",
            "spec.volumeDefaults.enableEncryption",
        ),
        Rule::same(
            "spec.storageClassParameters.replicate",
            "spec.volumeDefaults.enableReplication",
        ),
        Rule::with(
            "spec.storageClassParameters.lvolPriorityClass",
            "spec.volumeDefaults.priorityClass",
            Mapping::IntText,
        ),
        Rule::with(
            "spec.storageClassParameters.maxNamespacePerSubsys",
            "spec.volumeDefaults.maxNamespacesPerSubsystem",
            Mapping::IntText,
        ),
        Rule::same(
            "spec.storageClassParameters.filesystem",
            "spec.volumeDefaults.filesystem",
        ),
        Rule::same(
            "spec.storageClassParameters.fabric",
            "spec.volumeDefaults.fabric",
        ),
        Rule::same(
            "spec.storageClassParameters.tune2fsReservedBlocks",
            "spec.volumeDefaults.tune2fsReservedBlocks",
        ),
    ],
    v1alpha1: v1alpha1::StoragePool::crd,
    hub: StoragePool::crd,
};

//! The names written on Kubernetes objects: the API group and version, label and
//! annotation keys, finalizers, the values of the managed-by label, and the Node label
//! keys the CSI driver reports as topology.
//!
//! Whoever writes a key and whoever reads it take it from here, so the two cannot drift
//! apart.

// The API.

/// The API group of every kind here.
pub const GROUP: &str = "storage.simplyblock.io";
/// The served and stored version.
pub const VERSION: &str = "v1alpha2";
/// The `apiVersion` of every kind here: `GROUP/VERSION`.
pub const API_VERSION: &str = "storage.simplyblock.io/v1alpha2";

// Labels.

/// Label: which controller wrote an object and may delete it; the value is one of the
/// `MANAGED_BY_*` constants.
pub const MANAGED_BY_LABEL: &str = "storage.simplyblock.io/managed-by";
/// Managed-by value: written by the StorageCluster controller (the storage-node
/// workload, its Secrets and EndpointSlices, the CSI secret).
pub const MANAGED_BY_STORAGE_CLUSTER: &str = "storagecluster";
/// Managed-by value: a StorageClass written by the StoragePool controller.
pub const MANAGED_BY_STORAGE_POOL: &str = "storagepool";
/// Managed-by value: the control plane's workloads a local ControlPlane installed.
pub const MANAGED_BY_CONTROL_PLANE: &str = "controlplane";
/// Managed-by value: the CSI driver's objects a SimplyblockDriver installed or adopted,
/// cluster-scoped ones included (which its finalizer deletes).
pub const MANAGED_BY_SIMPLYBLOCK_DRIVER: &str = "simplyblockdriver";
/// Managed-by value: a discovery run's probe Jobs and report ConfigMaps.
pub const MANAGED_BY_OPERATOR_OPS: &str = "operatorops";
/// Managed-by value: a PersistentVolumeOps a StorageNodeOps Remove created to drain its
/// node (`spec.creatorRef` names which one).
pub const MANAGED_BY_STORAGE_NODE_OPS: &str = "storagenodeops";
/// Managed-by value: a PersistentVolumeOps validation Job.
pub const MANAGED_BY_PERSISTENT_VOLUME_OPS: &str = "persistentvolumeops";
/// The value of Kubernetes' `endpointslice.kubernetes.io/managed-by` on the
/// EndpointSlices the operator writes, so the EndpointSlice controller leaves them alone.
pub const ENDPOINT_SLICE_MANAGER: &str = "storage.simplyblock.io";

/// Label: the StorageCluster (by name) an object belongs to: the storage-node pods (the
/// workload's selector) and their Secrets and EndpointSlices, StorageNodes, a pool's
/// StorageClasses.
pub const CLUSTER_LABEL: &str = "storage.simplyblock.io/cluster";
/// Label on a StorageClass: the namespace of the pool it is assigned to (StorageClasses
/// are cluster-scoped, pools are not).
pub const NAMESPACE_LABEL: &str = "storage.simplyblock.io/namespace";
/// Label on a StorageClass: the StoragePool (by name) it is assigned to.
pub const POOL_LABEL: &str = "storage.simplyblock.io/pool";
/// Label on a StorageNode, and on a StorageDevice: the Kubernetes node (worker) it runs on.
pub const WORKER_LABEL: &str = "storage.simplyblock.io/worker";
/// Label on a StorageDevice: the StorageNode (by name) the device belongs to.
pub const NODE_LABEL: &str = "storage.simplyblock.io/node";
/// Label on a StorageCluster: the ClusterDeploymentConfig that created it, which is how a
/// document tells a cluster it created (and may resume) from one that has the same name.
pub const DEPLOYMENT_CONFIG_LABEL: &str = "storage.simplyblock.io/deployment-config";
/// Label on an approved ClusterDeploymentConfig, for selectors; output only.
pub const READY_TO_DEPLOY_LABEL: &str = "storage.simplyblock.io/ready-to-deploy";
/// Label on a draft ClusterDeploymentConfig: the discovery run (OperatorOps) it was
/// planned from.
pub const DISCOVERED_BY_LABEL: &str = "storage.simplyblock.io/discovered-by";
/// Label: which part of the system an object is; see [`NODEPROBE_COMPONENT`].
pub const COMPONENT_LABEL: &str = "storage.simplyblock.io/component";
/// Component value: a discovery probe's report ConfigMap (and the Job that writes it).
pub const NODEPROBE_COMPONENT: &str = "nodeprobe";
/// Label on a probe report: the discovery run it belongs to (a label value of its name).
pub const NODEPROBE_RUN_LABEL: &str = "storage.simplyblock.io/nodeprobe-run";
/// Label on a probe report: the node it describes (a label value of its name, which may
/// have been cut; [`NODEPROBE_NODE_ANNOTATION`] holds it whole).
pub const NODEPROBE_NODE_LABEL: &str = "storage.simplyblock.io/nodeprobe-node";
/// Label on a Kubernetes Node: the StorageCluster (by name) whose storage-node DaemonSet
/// runs there; the DaemonSet's nodeSelector. Under `node-restriction.kubernetes.io/`, which
/// the NodeRestriction admission plugin keeps a kubelet from setting on its own Node: a
/// compromised worker cannot enrol itself and receive a storage-node pod and its key.
pub const ENROLLMENT_LABEL: &str = "node-restriction.kubernetes.io/simplyblock-storage-node";
/// The signer of the storage nodes' own certificates: each storage-node pod asks for one
/// through a `podCertificate` projected volume (its kubelet makes the PodCertificateRequest)
/// and the operator issues it from the cluster's CA for that pod's worker alone.
pub const STORAGE_NODE_SIGNER: &str = "storage.simplyblock.io/storage-node";
/// Label on a Kubernetes Node: the enrollment label of earlier releases (and of the Go
/// operator). A kubelet may set it on its own Node, so nothing selects on it any more; the
/// operator removes it once no storage-node pod scheduled by it is left on the worker.
pub const LEGACY_ENROLLMENT_LABEL: &str = "io.simplyblock.storagenodeset";

// Annotations.

/// Annotation on a probe report: the exact name of the node it describes.
pub const NODEPROBE_NODE_ANNOTATION: &str = "storage.simplyblock.io/nodeprobe-node";
/// Annotation on a Secret holding a certificate (the webhook CA, a storage-node serving
/// certificate): when it stops being valid, RFC 3339.
pub const NOT_AFTER_ANNOTATION: &str = "storage.simplyblock.io/not-after";
/// Annotation on the webhook CA's Secret: when the previous CA, still in the caBundle,
/// stops being valid, RFC 3339.
pub const PREVIOUS_NOT_AFTER_ANNOTATION: &str = "storage.simplyblock.io/previous-not-after";
/// Annotation on a storage-node serving Secret: the DNS names its certificate holds,
/// comma-separated.
pub const DNS_NAMES_ANNOTATION: &str = "storage.simplyblock.io/dns-names";
/// Annotation on a storage-node serving Secret: what its certificate is for
/// (`server,client`: the node serves with it and calls out with it).
pub const CERTIFICATE_USAGES_ANNOTATION: &str = "storage.simplyblock.io/certificate-usages";
/// Annotation on the storage-node pod template: the serving Secret's resourceVersion, so
/// a pod created after a reissue is visibly of the new certificate.
pub const SERVING_CERTIFICATE_VERSION_ANNOTATION: &str =
    "storage.simplyblock.io/serving-certificate-version";
/// Annotation on a StorageCluster: the default pool the operator created for it; once
/// there, the pool is not created again (a person may have deleted it).
pub const DEFAULT_POOL_ANNOTATION: &str = "storage.simplyblock.io/default-pool";
/// Annotation on an object the SimplyblockDriver controller applies: a digest of the body
/// it last applied, so a pass whose body is unchanged and still in place writes nothing,
/// while a field dropped from the body (which the live object cannot show) is applied.
pub const APPLIED_DIGEST_ANNOTATION: &str = "storage.simplyblock.io/applied-digest";
/// Annotation on a StorageCluster, reserved: the operator does not request realignment
/// yet, so it is not acted on. Meant to ask for data realignment now, whatever
/// `volumeMigrationSettings.dataRealignment` says about its interval and minimum moves.
pub const TRIGGER_REALIGNMENT_ANNOTATION: &str = "storage.simplyblock.io/trigger-realignment";

/// Annotation on the pod template of a control-plane workload: when a ControlPlaneOps
/// Restart asked for its pods to be replaced (that operation's start, RFC 3339); a change
/// rolls the workload, as `kubectl rollout restart` does.
pub const RESTARTED_AT_ANNOTATION: &str = "storage.simplyblock.io/restarted-at";
/// Annotation on every PersistentVolume of an NVMe-oF subsystem: the PersistentVolumeOps
/// that holds the subsystem's lock (a PersistentVolume has no status of ours to carry
/// `activeOpsRef`).
pub const ACTIVE_OPS_ANNOTATION: &str = "storage.simplyblock.io/active-ops";
/// Annotation on a FoundationDBBackup: the ControlPlaneOps Backup that last created or
/// triggered it (the operation does not own it).
pub const BACKUP_REQUESTED_BY_ANNOTATION: &str = "storage.simplyblock.io/backup-requested-by";

// Finalizers.

/// Holds a StorageCluster until its pools, its control-plane cluster and its entry in
/// the CSI secret are gone.
pub const STORAGE_CLUSTER_FINALIZER: &str = "storage.simplyblock.io/storagecluster-finalizer";
/// The StorageCluster finalizer older operators set; read and removed on delete.
pub const LEGACY_STORAGE_CLUSTER_FINALIZER: &str = "storage.simplyblock.io/cluster-finalizer";
/// Holds a StorageNode until its control-plane node is removed.
pub const STORAGE_NODE_FINALIZER: &str = "storage.simplyblock.io/storagenode-finalizer";
/// Holds a StoragePool until its volumes, its StorageClass and its control-plane pool
/// are gone.
pub const STORAGE_POOL_FINALIZER: &str = "storage.simplyblock.io/storagepool-finalizer";
/// Holds a StorageClusterOps until it has released its cluster's lock.
pub const STORAGE_CLUSTER_OPS_FINALIZER: &str =
    "storage.simplyblock.io/storageclusterops-finalizer";
/// Holds a ControlPlane while StorageClusters exist in its namespace.
pub const CONTROL_PLANE_FINALIZER: &str = "storage.simplyblock.io/controlplane-finalizer";
/// Holds a ControlPlaneOps until it has released the control plane's lock.
pub const CONTROL_PLANE_OPS_FINALIZER: &str = "storage.simplyblock.io/controlplaneops-finalizer";
/// Holds a SimplyblockDriver until its cluster-scoped objects are deleted.
pub const SIMPLYBLOCK_DRIVER_FINALIZER: &str = "storage.simplyblock.io/simplyblockdriver-finalizer";
/// Holds an OperatorOps until the run is terminal.
pub const OPERATOR_OPS_FINALIZER: &str = "storage.simplyblock.io/operatorops-finalizer";
/// Holds a PersistentVolumeOps until its backend migration is cancelled or finished, its
/// validation Jobs are deleted and its lock on the subsystem's volumes is released.
pub const PERSISTENT_VOLUME_OPS_FINALIZER: &str =
    "storage.simplyblock.io/persistentvolumeops-finalizer";

// The CSI driver.

/// The CSI driver's name: the provisioner of the StorageClasses the operator writes, and
/// the name the driver registers under.
pub const CSI_DRIVER_NAME: &str = "csi.simplyblock.io";

// Topology: Node labels the CSI node plugin reports as its topology segments.

/// Prefix of the Node labels `<prefix><cluster uuid>.<slot>` whose value is the UUID of
/// the storage node serving that slot on the Node; the CSI controller places a volume's
/// primary on a storage node of the Nodes its consumer may run on.
///
/// Not under `storage.simplyblock.io/` like the other keys: external-provisioner records
/// the set of topology keys a node plugin registered with in CSINode, and CreateVolume
/// fails for a Node whose keys changed, so the prefix the reference's driver reported
/// stays.
pub const STORAGE_NODE_TOPOLOGY_PREFIX: &str = "simplyblock.io/storage-node-uuid.";
/// Prefix of the Node labels `<prefix><pool>`: valued [`POOL_ACCESS_ALLOWED`], the Node may
/// attach the volumes of a pool whose hosts authenticate (DH-HMAC-CHAP).
pub const POOL_ACCESS_LABEL_PREFIX: &str = "simplyblock.io/pool.";
/// The value of a pool access label that lets the Node attach the pool's volumes.
pub const POOL_ACCESS_ALLOWED: &str = "allowed";

/// The access label key of the pool with control-plane id `pool_uuid`, which the operator
/// puts on every Node of the pool's allowedNodes: `simplyblock.io/pool.<pool uuid>`.
pub fn pool_access_label(pool_uuid: &str) -> String {
    format!("{POOL_ACCESS_LABEL_PREFIX}{pool_uuid}")
}
/// The topology key a node plugin reports when its Node has no other: the node's name.
pub const HOSTNAME_TOPOLOGY_KEY: &str = "topology.simplyblock.io/hostname";

/// The Node label key that names the storage node of `slot` of cluster `cluster_uuid`:
/// `simplyblock.io/storage-node-uuid.<cluster uuid>.<slot>`. Its value is the storage
/// node's UUID; the key never changes for a worker's lifetime.
pub fn storage_node_topology_key(cluster_uuid: &str, slot: i32) -> String {
    format!("{STORAGE_NODE_TOPOLOGY_PREFIX}{cluster_uuid}.{slot}")
}

/// The cluster and slot a storage-node topology key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorageNodeTopologyKey<'a> {
    pub cluster_uuid: &'a str,
    pub slot: i32,
}

/// Reads a key [`storage_node_topology_key`] wrote; `None` for any other key.
pub fn parse_storage_node_topology_key(key: &str) -> Option<StorageNodeTopologyKey<'_>> {
    let rest = key.strip_prefix(STORAGE_NODE_TOPOLOGY_PREFIX)?;
    // A cluster UUID holds no '.', so the slot is what follows the last one.
    let (cluster_uuid, slot) = rest.rsplit_once('.')?;
    if cluster_uuid.is_empty() {
        return None;
    }
    Some(StorageNodeTopologyKey {
        cluster_uuid,
        slot: slot.parse().ok()?,
    })
}

// Disaster recovery: the labels Ramen (the OCM DR orchestrator) reads on storage classes.

/// Label on a StorageClass (and on a VolumeSnapshotClass, VolumeReplicationClass or
/// VolumeGroupReplicationClass of the same storage): the storage instance its volumes
/// live on. The operator writes the simplyblock cluster's UUID, so two sites' classes
/// carry different values (asynchronous replication between distinct instances), and
/// Ramen pairs each class with the other classes of the same instance by it.
pub const RAMEN_STORAGE_ID_LABEL: &str = "ramendr.openshift.io/storageid";
/// Label on a VolumeReplicationClass: the replication relationship it takes part in. The
/// classes of both peers carry the same value ([`ramen_replication_id`]), which is how
/// Ramen knows they replicate to each other.
pub const RAMEN_REPLICATION_ID_LABEL: &str = "ramendr.openshift.io/replicationid";
/// Label on a VolumeGroupReplicationClass: as [`RAMEN_REPLICATION_ID_LABEL`], for
/// consistency groups.
pub const RAMEN_GROUP_REPLICATION_ID_LABEL: &str = "ramendr.openshift.io/groupreplicationid";

/// The replication id of the relationship between clusters `a` and `b` (UUIDs), the same
/// whichever site computes it: `simplyblock-` and the first 16 hex digits of the SHA-256
/// of the two UUIDs, lower-cased, sorted and joined by `:`. Written by hand it is
/// `printf '%s:%s' <lower> <higher> | sha256sum | cut -c1-16` (docs/DR.md).
pub fn ramen_replication_id(a: &str, b: &str) -> String {
    use sha2::{Digest, Sha256};
    let (a, b) = (a.trim().to_ascii_lowercase(), b.trim().to_ascii_lowercase());
    let (low, high) = if a <= b { (a, b) } else { (b, a) };
    let digest = Sha256::digest(format!("{low}:{high}").as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("simplyblock-{hex}")
}

/// Set to `"true"` on an object of the group, it lets the object be deleted, and its
/// finalizers released, without the operator's admission: the way out when the operator
/// is down or a cluster it would clean up is unreachable. What the operator would have
/// checked or cleaned is then the user's to check.
pub const FORCE_DELETE_ANNOTATION: &str = "storage.simplyblock.io/force-delete";

/// Label on a StorageBackup: the claim whose volume it is a copy of, while that claim is
/// known.
pub const CLAIM_LABEL: &str = "storage.simplyblock.io/claim";
/// Label on a claim that a policy moved over from the Go operator selects on (the Go
/// operator named a claim's policy in an annotation of this key).
pub const BACKUP_POLICY_LABEL: &str = "storage.simplyblock.io/backup-policy";
/// Label on a claim and its PersistentVolume that a restore created: the StorageBackupOps
/// that created them. A restore never adopts a claim without it.
pub const RESTORED_BY_LABEL: &str = "storage.simplyblock.io/restored-by";
/// Annotation on an operation carried over from the Go operator as a record of what it
/// did: never advanced, its references never checked.
pub const HISTORICAL_RECORD_ANNOTATION: &str = "storage.simplyblock.io/historical-record";

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn the_api_version_is_group_and_version_and_what_every_kind_declares() {
        assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
        for declared in [
            crate::StorageCluster::api_version(&()),
            crate::StorageClusterOps::api_version(&()),
            crate::ClusterDeploymentConfig::api_version(&()),
            crate::OperatorOps::api_version(&()),
            crate::StorageNode::api_version(&()),
            crate::StoragePool::api_version(&()),
            crate::StoragePoolOps::api_version(&()),
        ] {
            assert_eq!(declared, API_VERSION);
        }
    }

    #[test]
    fn a_replication_id_is_the_same_from_either_site_and_a_valid_label_value() {
        let a = "6f1c1e4e-2f7b-4c1a-9a53-0d2b1f6c8e01";
        let b = "0b7d5a10-93c4-4e2f-8f11-5c3e9d2a7b42";
        let id = ramen_replication_id(a, b);
        assert_eq!(id, ramen_replication_id(b, a));
        assert_eq!(
            id,
            ramen_replication_id(&a.to_uppercase(), &format!(" {b} "))
        );
        // The documented shell derivation: sha256 of "<lower>:<higher>", 16 hex digits.
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(format!("{b}:{a}").as_bytes());
        let hex: String = digest.iter().map(|x| format!("{x:02x}")).collect();
        assert_eq!(id, format!("simplyblock-{}", &hex[..16]));
        // Another pair, another relationship.
        assert_ne!(
            id,
            ramen_replication_id(a, "7e0f3b0c-1d2e-4f5a-8b9c-0d1e2f3a4b5c")
        );
        assert!(id.len() <= 63);
        assert!(
            id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "{id}"
        );
    }

    #[test]
    fn keys_under_the_group_are_valid_label_keys() {
        for key in [
            MANAGED_BY_LABEL,
            CLUSTER_LABEL,
            NAMESPACE_LABEL,
            POOL_LABEL,
            WORKER_LABEL,
            NODE_LABEL,
            DEPLOYMENT_CONFIG_LABEL,
            READY_TO_DEPLOY_LABEL,
            DISCOVERED_BY_LABEL,
            COMPONENT_LABEL,
            NODEPROBE_RUN_LABEL,
            NODEPROBE_NODE_LABEL,
            NODEPROBE_NODE_ANNOTATION,
            NOT_AFTER_ANNOTATION,
            PREVIOUS_NOT_AFTER_ANNOTATION,
            DNS_NAMES_ANNOTATION,
            CERTIFICATE_USAGES_ANNOTATION,
            SERVING_CERTIFICATE_VERSION_ANNOTATION,
            DEFAULT_POOL_ANNOTATION,
            TRIGGER_REALIGNMENT_ANNOTATION,
            APPLIED_DIGEST_ANNOTATION,
            ACTIVE_OPS_ANNOTATION,
            STORAGE_CLUSTER_FINALIZER,
            LEGACY_STORAGE_CLUSTER_FINALIZER,
            STORAGE_NODE_FINALIZER,
            STORAGE_POOL_FINALIZER,
            STORAGE_CLUSTER_OPS_FINALIZER,
            OPERATOR_OPS_FINALIZER,
            SIMPLYBLOCK_DRIVER_FINALIZER,
        ] {
            let (prefix, name) = key.split_once('/').expect("a prefixed key");
            assert_eq!(prefix, GROUP, "{key}");
            assert!(
                !name.is_empty()
                    && name.len() <= 63
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')),
                "{key} is not a valid label key name"
            );
        }
    }

    #[test]
    fn the_enrollment_label_is_one_a_kubelet_may_not_set_on_its_own_node() {
        // NodeRestriction refuses a kubelet any label under this prefix.
        let (prefix, name) = ENROLLMENT_LABEL.split_once('/').expect("a prefixed key");
        assert_eq!(prefix, "node-restriction.kubernetes.io");
        assert!(!name.is_empty() && name.len() <= 63, "{name}");
        assert_ne!(ENROLLMENT_LABEL, LEGACY_ENROLLMENT_LABEL);
    }

    #[test]
    fn the_storage_node_topology_key_keeps_the_reference_prefix() {
        let key = storage_node_topology_key("0b0c9d2e-5c1a-4b6e-9d44-2f8a1c3e7b10", 1);
        assert_eq!(
            key,
            "simplyblock.io/storage-node-uuid.0b0c9d2e-5c1a-4b6e-9d44-2f8a1c3e7b10.1"
        );
        // A label key's name part (after the '/') is at most 63 bytes.
        let name = key.split_once('/').map(|(_, n)| n).unwrap_or_default();
        assert!(name.len() <= 63, "{} bytes", name.len());
    }

    #[test]
    fn a_storage_node_topology_key_reads_back_as_its_cluster_and_slot() {
        let cluster = "0b0c9d2e-5c1a-4b6e-9d44-2f8a1c3e7b10";
        for slot in [0, 1, 7] {
            assert_eq!(
                parse_storage_node_topology_key(&storage_node_topology_key(cluster, slot)),
                Some(StorageNodeTopologyKey {
                    cluster_uuid: cluster,
                    slot
                })
            );
        }
        for other in [
            "storage.simplyblock.io/storage-node-uuid.c1.0",
            "simplyblock.io/storage-node-uuid.c1",
            "simplyblock.io/storage-node-uuid..0",
            "simplyblock.io/storage-node-uuid.c1.first",
            "simplyblock.io/pool.gold",
        ] {
            assert_eq!(parse_storage_node_topology_key(other), None, "{other}");
        }
    }
}

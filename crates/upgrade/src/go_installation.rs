//! An installation as the Go operator leaves it: its CRDs, a fleet of its objects, its Helm
//! release and a volume its driver provisioned. What the tool is shown and tested on (the
//! demo's upgrade act and the upgrade tests); the shapes are the Go operator's.

use anyhow::Context as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::world::{DEFAULT_OLD_OPERATOR, GROUP, V1ALPHA1};

/// The Go operator's Helm release.
pub const RELEASE: &str = "simplyblock";
/// The Go operator's Deployment.
pub const OPERATOR: &str = DEFAULT_OLD_OPERATOR;
/// The fleet's StorageCluster, StorageNodeSet and StoragePool.
pub const CLUSTER: &str = "prod";
pub const NODE_SET: &str = "prod-nodes";
pub const POOL: &str = "gold";
/// The fleet's finished and running StorageClusterOps.
pub const FINISHED_OPS: &str = "prod-activate";
pub const RUNNING_OPS: &str = "prod-rolling-restart";
/// The legacy volume's PersistentVolume.
pub const VOLUME: &str = "pvc-legacy";

/// The control plane's ids and the workers a fleet names.
pub struct Ids {
    pub cluster: String,
    pub pool: String,
    /// `(worker, storage node id)`.
    pub nodes: Vec<(String, String)>,
}

/// `crd` as the Go operator installed it: its v1alpha1 version alone, served and stored,
/// no conversion.
fn as_go_installed(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    crd.spec.versions.retain(|v| v.name == V1ALPHA1);
    for v in &mut crd.spec.versions {
        v.served = true;
        v.storage = true;
    }
    crd.spec.conversion = None;
    crd
}

/// Every v1alpha1 CRD the Go operator installed that this workspace describes: the
/// converting kinds', the retired StorageNodeSet's and the retired backup kinds'.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut crds: Vec<CustomResourceDefinition> = simplyblock_conversion::kinds()
        .iter()
        .map(|k| (k.kind.v1alpha1)())
        .chain(simplyblock_api::v1alpha1::crds())
        .chain([simplyblock_api::v1alpha1::storage_node_set::StorageNodeSet::crd()])
        .chain(retired_backup_crds())
        .map(as_go_installed)
        .collect();
    crds.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    crds.dedup_by(|a, b| a.metadata.name == b.metadata.name);
    crds
}

/// A v1alpha1 CRD of the group as the Go operator generated it: namespaced, with a status
/// subresource.
fn go_crd(kind: &str, plural: &str, short: Option<&str>, spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": plural,
                      "singular": kind.to_ascii_lowercase(), "shortNames": short.into_iter().collect::<Vec<_>>()},
            "scope": "Namespaced",
            "versions": [{
                "name": V1ALPHA1, "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "required": ["spec"], "properties": {
                    "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                    "metadata": {"type": "object"}, "spec": spec, "status": status}}},
            }],
        },
    })
}

fn strings(names: &[&str]) -> Value {
    Value::Object(
        names
            .iter()
            .map(|n| ((*n).to_owned(), json!({"type": "string"})))
            .collect(),
    )
}

/// The Go operator's BackupPolicy, BackupRestore and BackupImport, which v1alpha2 retires:
/// their fields and types as its CRDs declared them.
pub fn retired_backup_crds() -> Vec<CustomResourceDefinition> {
    let immutable = json!([{"rule": "self == oldSelf", "message": "field is immutable"}]);
    let policy = go_crd(
        "BackupPolicy",
        "backuppolicies",
        None,
        json!({"type": "object", "required": ["clusterName"], "properties": {
            "clusterName": {"type": "string", "x-kubernetes-validations": immutable},
            "maxVersions": {"type": "integer"},
            "maxAge": {"type": "string", "pattern": "^\\d+[mhdw]$"},
            "schedule": {"type": "string", "pattern": "^(\\d+[mhdw],\\d+)(\\s+\\d+[mhdw],\\d+)*$"}}}),
        json!({"type": "object", "properties": {
            "phase": {"type": "string"}, "message": {"type": "string"},
            "clusterUUID": {"type": "string"}, "policyID": {"type": "string"},
            "attachedLvols": {"type": "array", "items": {"type": "object",
                "required": ["lvolID", "pvcName", "pvcNamespace"],
                "properties": strings(&["lvolID", "pvcName", "pvcNamespace"])}}}}),
    );
    let mut restore_status = strings(&[
        "phase",
        "message",
        "clusterUUID",
        "backupID",
        "sourceLvolID",
        "fsType",
        "poolName",
        "poolUUID",
        "restoredLvolID",
        "pvName",
        "pvcName",
        "pvcNamespace",
        "sourceClusterUUID",
    ]);
    for at in ["startedAt", "completedAt"] {
        restore_status[at] = json!({"type": "string", "format": "date-time"});
    }
    let restore = go_crd(
        "BackupRestore",
        "backuprestores",
        Some("br"),
        json!({"type": "object", "required": ["backupRef", "clusterName", "pvcTemplate"], "properties": {
            "clusterName": {"type": "string", "x-kubernetes-validations": immutable},
            "backupRef": {"type": "object", "required": ["name"], "properties": strings(&["name"])},
            "targetPool": {"type": "string"},
            "targetNode": {"type": "string"},
            "pvcTemplate": {"type": "object", "required": ["spec"], "properties": {
                "metadata": {"type": "object", "properties": {
                    "name": {"type": "string"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}},
                // A PersistentVolumeClaimSpec; the steps read none of it.
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}),
        json!({"type": "object", "properties": restore_status}),
    );
    let mut import_status = strings(&[
        "phase",
        "message",
        "sourceClusterUUID",
        "targetClusterUUID",
        "importedBackupID",
        "storageBackupRef",
    ]);
    import_status["completedAt"] = json!({"type": "string", "format": "date-time"});
    let import = go_crd(
        "BackupImport",
        "backupimports",
        Some("bi"),
        json!({"type": "object", "required": ["sourceBackupID", "sourceClusterName", "targetClusterName"], "properties": {
            "sourceBackupID": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,128}$"},
            "sourceClusterName": {"type": "string", "x-kubernetes-validations": immutable},
            "targetClusterName": {"type": "string", "x-kubernetes-validations": immutable}}}),
        json!({"type": "object", "properties": import_status}),
    );
    [policy, restore, import]
        .into_iter()
        .map(|crd| serde_json::from_value(crd).expect("a well-formed CRD"))
        .collect()
}

/// The v1alpha1 API of `kind` in `namespace`.
pub fn v1alpha1(
    client: &kube::Client,
    namespace: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, V1ALPHA1, kind), plural);
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Creates `object` (a v1alpha1 object of `kind`) and writes its status as the Go operator
/// did, through the status subresource; returns it as created.
pub async fn create(
    client: &kube::Client,
    namespace: &str,
    plural: &str,
    object: Value,
) -> anyhow::Result<DynamicObject> {
    let kind = object["kind"].as_str().unwrap_or_default().to_owned();
    let api = v1alpha1(client, namespace, &kind, plural);
    let status = object.get("status").cloned();
    let mut object: DynamicObject = serde_json::from_value(object)?;
    object.data.as_object_mut().map(|d| d.remove("status"));
    object.metadata.namespace = Some(namespace.into());
    let name = object.metadata.name.clone().unwrap_or_default();
    let created = api
        .create(&PostParams::default(), &object)
        .await
        .with_context(|| format!("creating {kind}/{name}"))?;
    if let Some(status) = status {
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .with_context(|| format!("the status of {kind}/{name}"))?;
    }
    Ok(created)
}

/// A v1alpha1 object of `kind` called `name`, with `rest` (its `metadata` merged).
pub fn object(kind: &str, name: &str, rest: Value) -> Value {
    let mut base = json!({"apiVersion": format!("{GROUP}/{V1ALPHA1}"), "kind": kind, "metadata": {"name": name}});
    if let (Some(b), Some(e)) = (base.as_object_mut(), rest.as_object()) {
        for (k, v) in e {
            match (
                k.as_str(),
                b.get_mut("metadata").and_then(Value::as_object_mut),
                v.as_object(),
            ) {
                ("metadata", Some(m), Some(extra)) => m.extend(extra.clone()),
                _ => {
                    b.insert(k.clone(), v.clone());
                }
            }
        }
    }
    base
}

/// The fleet: a StorageCluster with its control-plane id, a StorageNodeSet owning a
/// ConfigMap and a StorageNode per worker, a pool, and two cluster operations, one finished
/// and one still running.
pub async fn fleet(client: &kube::Client, namespace: &str, ids: &Ids) -> anyhow::Result<()> {
    let workers: Vec<&str> = ids.nodes.iter().map(|(w, _)| w.as_str()).collect();
    create(
        client,
        namespace,
        "storageclusters",
        object(
            "StorageCluster",
            CLUSTER,
            json!({
                "spec": {"maxSubsystemCount": 10, "vcpuCount": 8, "maxHugePagesSize": "4Gi",
                         "fabricType": "tcp", "enableNodeAffinity": true},
                "status": {"uuid": ids.cluster, "status": "active", "configured": true},
            }),
        ),
    )
    .await?;
    let set = create(
        client,
        namespace,
        "storagenodesets",
        object(
            "StorageNodeSet",
            NODE_SET,
            json!({
                "spec": {"clusterName": CLUSTER, "workerNodes": workers,
                         "mgmtIfname": "eth0", "spdkSystemMemory": "4G"},
                "status": {"totalNodes": workers.len(), "onlineNodes": workers.len()},
            }),
        ),
    )
    .await?;
    let owner = json!([{
        "apiVersion": format!("{GROUP}/{V1ALPHA1}"), "kind": "StorageNodeSet",
        "name": NODE_SET, "uid": set.metadata.uid.unwrap_or_default(),
        "controller": true, "blockOwnerDeletion": true,
    }]);
    // Part of the set's workload.
    let config: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": format!("{NODE_SET}-config"), "ownerReferences": owner},
        "data": {"spdk.json": "{}"},
    }))?;
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &config)
        .await
        .context("the set's ConfigMap")?;
    for (i, (worker, uuid)) in ids.nodes.iter().enumerate() {
        create(
            client,
            namespace,
            "storagenodes",
            object(
                "StorageNode",
                &format!("{NODE_SET}-{worker}-0"),
                json!({
                    "metadata": {
                        "ownerReferences": owner,
                        "labels": {"storage.simplyblock.io/storagenodeset": NODE_SET,
                                   "storage.simplyblock.io/worker": worker},
                    },
                    "spec": {"storageNodeSetRef": NODE_SET, "workerNode": worker,
                             "socketId": "0", "nodeIndex": 0, "socketIndex": i},
                    "status": {"uuid": uuid, "status": "online", "health": true, "hostname": worker,
                               "resources": {"cpu": 8, "memory": "32Gi", "devices": "4/4"}},
                }),
            ),
        )
        .await?;
    }
    create(
        client,
        namespace,
        "storagepools",
        object(
            "StoragePool",
            POOL,
            json!({
                "spec": {"clusterName": CLUSTER, "capacityLimit": "10Ti", "dhchap": true},
                "status": {"uuid": ids.pool, "status": "active"},
            }),
        ),
    )
    .await?;
    create(
        client,
        namespace,
        "storageclusterops",
        object(
            "StorageClusterOps",
            FINISHED_OPS,
            json!({
                "spec": {"clusterRef": CLUSTER, "action": "activate"},
                "status": {"phase": "Succeeded", "triggered": true, "message": "activated"},
            }),
        ),
    )
    .await?;
    let node = |i: usize| {
        format!(
            "{NODE_SET}-{}-0",
            workers.get(i).copied().unwrap_or_default()
        )
    };
    create(client, namespace, "storageclusterops", object("StorageClusterOps", RUNNING_OPS, json!({
        "spec": {"clusterRef": CLUSTER, "action": "node-rolling-restart"},
        "status": {"phase": "Running", "triggered": true,
                   "nodeRollingRestartStatus": {"pendingNodes": [node(1)], "processedNodes": [node(0)]}},
    })))
    .await?;
    Ok(())
}

/// Ends the fleet's running operation, as the Go operator would have.
pub async fn finish_running_operation(
    client: &kube::Client,
    namespace: &str,
) -> anyhow::Result<()> {
    v1alpha1(client, namespace, "StorageClusterOps", "storageclusterops")
        .patch_status(
            RUNNING_OPS,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .context("ending the running operation")?;
    Ok(())
}

/// The Go operator's own objects, as its Helm release left them: its Deployment and a
/// ConfigMap.
pub async fn release(client: &kube::Client, namespace: &str) -> anyhow::Result<()> {
    let annotations =
        json!({"meta.helm.sh/release-name": RELEASE, "meta.helm.sh/release-namespace": namespace});
    let labels =
        json!({"app.kubernetes.io/managed-by": "Helm", "control-plane": "controller-manager"});
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": OPERATOR, "annotations": annotations, "labels": labels},
        "spec": {"replicas": 1,
                 "selector": {"matchLabels": {"control-plane": "controller-manager"}},
                 "template": {"metadata": {"labels": {"control-plane": "controller-manager"}},
                              "spec": {"containers": [{"name": "manager",
                                                       "image": "simplyblock/simplyblock-operator:v1"}]}}},
    }))?;
    Api::<Deployment>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &deployment)
        .await
        .context("the Go operator's Deployment")?;
    let config: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "simplyblock-operator-settings", "annotations": annotations, "labels": labels},
        "data": {"logLevel": "info"},
    }))?;
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &config)
        .await
        .context("the Go release's ConfigMap")?;
    Ok(())
}

/// A volume the Go driver provisioned: its handle names its pool by name, and it carries a
/// QoS annotation under the old key.
pub async fn legacy_volume(
    client: &kube::Client,
    cluster: &str,
    volume: &str,
) -> anyhow::Result<()> {
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": VOLUME, "annotations": {"simplyblock.io/qos-rw-iops": "100"}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Retain",
                 "csi": {"driver": simplyblock_api::keys::CSI_DRIVER_NAME,
                         "volumeHandle": format!("{cluster}:{POOL}:{volume}")}},
    }))?;
    Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &pv)
        .await
        .context("the legacy volume")?;
    Ok(())
}

/// The backup kinds' objects: BackupPolicy [`BACKUP_POLICY`] (with the Go operator's
/// finalizer) and two claims annotated with it under the old and the legacy key, a finished
/// and a failed BackupRestore, a BackupImport and the StorageBackup it made, and a
/// StorageBackup of a claim.
pub async fn backups(client: &kube::Client, namespace: &str) -> anyhow::Result<()> {
    create(client, namespace, "backuppolicies", object("BackupPolicy", BACKUP_POLICY, json!({
        "metadata": {"finalizers": ["storage.simplyblock.io/backuppolicy-finalizer"]},
        "spec": {"clusterName": CLUSTER, "schedule": "15m,4 1d,7", "maxAge": "7d", "maxVersions": 0},
        "status": {"phase": "Active", "policyID": "policy-1", "clusterUUID": "c"},
    })))
    .await?;
    for (claim, key) in BACKED_UP_CLAIMS
        .iter()
        .zip(["simplyblock.io/backup-policy", "simplybk/backup-policy"])
    {
        let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": claim, "annotations": {key: BACKUP_POLICY}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }))?;
        Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &pvc)
            .await
            .with_context(|| format!("the claim {claim}"))?;
    }
    create(
        client,
        namespace,
        "storagebackups",
        object("StorageBackup", BACKUP, backup()),
    )
    .await?;
    // Finished an hour ago: within the Ops history's retention (seven days by default), as
    // the Go operator's recent restores are; older ones are pruned at the first pass.
    let now = jiff::Timestamp::now().as_second();
    let at = |ago: i64| jiff::Timestamp::from_second(now - ago).map(|t| t.to_string());
    let (started, completed) = (at(4200)?, at(3600)?);
    for (name, phase) in [(RESTORE_DONE, "Done"), (RESTORE_FAILED, "Failed")] {
        let mut status = json!({"phase": phase, "clusterUUID": "c-1", "backupID": "b-2",
            "poolName": POOL, "message": format!("restore {phase}"),
            "startedAt": started.to_string(), "completedAt": completed.to_string()});
        if phase == "Done" {
            status["restoredLvolID"] = json!("l-restored");
            status["pvName"] = json!("restore-1");
            status["pvcName"] = json!("db-restored");
            status["pvcNamespace"] = json!(namespace);
        }
        create(client, namespace, "backuprestores", object("BackupRestore", name, json!({
            "spec": {"clusterName": CLUSTER, "backupRef": {"name": BACKUP},
                     "pvcTemplate": {"spec": {"resources": {"requests": {"storage": "1Gi"}}}}},
            "status": status,
        })))
        .await?;
    }
    let import = create(client, namespace, "backupimports", object("BackupImport", BACKUP_IMPORT, json!({
        "spec": {"sourceClusterName": "elsewhere", "sourceBackupID": "b-9", "targetClusterName": CLUSTER},
        "status": {"phase": "Done", "importedBackupID": "b-9", "storageBackupRef": format!("{BACKUP_IMPORT}-imported")},
    })))
    .await?;
    let mut imported = imported_backup();
    imported["metadata"] = json!({"ownerReferences": [{
        "apiVersion": format!("{GROUP}/{V1ALPHA1}"), "kind": "BackupImport", "name": BACKUP_IMPORT,
        "uid": import.metadata.uid.unwrap_or_default(), "controller": true, "blockOwnerDeletion": true,
    }]});
    create(
        client,
        namespace,
        "storagebackups",
        object(
            "StorageBackup",
            &format!("{BACKUP_IMPORT}-imported"),
            imported,
        ),
    )
    .await?;
    Ok(())
}

/// The Go BackupPolicy, and the claims annotated with it.
pub const BACKUP_POLICY: &str = "nightly";
pub const BACKED_UP_CLAIMS: [&str; 2] = ["db", "logs"];
/// The StorageBackup of claim `db`, restored by both BackupRestores.
pub const BACKUP: &str = "db-backup";
pub const RESTORE_DONE: &str = "db-restore";
pub const RESTORE_FAILED: &str = "db-restore-failed";
pub const BACKUP_IMPORT: &str = "from-elsewhere";

/// Spec and status of StorageBackup [`BACKUP`], as the Go operator wrote them.
pub fn backup() -> Value {
    json!({
        "spec": {"clusterName": CLUSTER, "pvcRef": {"name": BACKED_UP_CLAIMS[0]}, "snapshotName": "backup-db"},
        "status": {"phase": "Done", "apiStatus": "completed", "message": "Backup status: completed",
                   "clusterUUID": "c-1", "pvName": "pvc-db", "poolName": POOL, "lvolID": "l-1",
                   "snapshotID": "s-1", "snapshotName": "backup-db", "backupID": "b-2", "s3ID": 2,
                   "prevBackupID": "b-1", "size": 1_073_741_824_i64,
                   "allowedHosts": [{"nqn": "nqn.2014-08.org.nvmexpress:uuid:host-1"}],
                   "createdAt": "2026-01-02T03:04:05Z", "completedAt": "2026-01-02T03:05:05Z"},
    })
}

/// Spec and status of the StorageBackup BackupImport [`BACKUP_IMPORT`] made.
pub fn imported_backup() -> Value {
    json!({
        "spec": {"clusterName": CLUSTER, "sourceClusterUUID": "c-0"},
        "status": {"phase": "Done", "backupID": "b-9", "sourceClusterUUID": "c-0",
                   "clusterUUID": "c-1", "message": "Imported from cluster elsewhere"},
    })
}

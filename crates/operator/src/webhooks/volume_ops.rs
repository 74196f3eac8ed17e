//! PersistentVolumeOps admission. On create: the PersistentVolume exists, is a CSI volume
//! of the simplyblock driver with a parsable handle, the target StorageNode exists and
//! belongs to the volume's cluster (a cluster without a control-plane id yet is admitted;
//! the controller holds). Every problem is said at once. On delete: refused while the
//! operation runs Verifying, the one step that cannot be aborted.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Api, DynamicObject};
use kube::core::admission::{AdmissionReview, Operation};
use simplyblock_api::persistent_volume_ops::{GRAPHS, PersistentVolumeOps};
use simplyblock_api::{StorageCluster, StorageNode};

use super::{WebhookContext, typed};

/// The path of the PersistentVolumeOps webhook.
pub const PATH: &str = "/validate-storage-simplyblock-io-v1alpha2-persistentvolumeops";
/// Its name in the webhook configuration.
pub const NAME: &str = "vpersistentvolumeops.simplyblock.io";

/// The webhook for a cluster-scoped kind, on create and delete.
pub fn cluster_scoped(
    webhook: k8s_openapi::api::admissionregistration::v1::ValidatingWebhook,
) -> k8s_openapi::api::admissionregistration::v1::ValidatingWebhook {
    let mut webhook = super::answering(webhook, &["CREATE", "DELETE"]);
    for rule in webhook.rules.iter_mut().flatten() {
        rule.scope = Some("Cluster".into());
    }
    webhook
}

/// What admission reads for a new operation.
#[derive(Clone, Debug, Default)]
pub struct World {
    pub volume: Option<PersistentVolume>,
    pub target: Option<StorageNode>,
    /// The target's StorageCluster `status.uuid` (`None`: no cluster or no id yet).
    pub target_cluster: Option<String>,
}

pub async fn review(
    State(ctx): State<Arc<WebhookContext>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    super::answer(review, |req| async move {
        match (&req.operation, req.object.as_ref(), req.old_object.as_ref()) {
            (Operation::Create, Some(new), _) => {
                let op = typed::<PersistentVolumeOps>(new)?;
                let unreadable = |what: String| {
                    move |e: kube::Error| format!("{what} could not be read ({e}); try again")
                };
                let mut world = World {
                    volume: Api::<PersistentVolume>::all(ctx.client.clone())
                        .get_opt(&op.spec.persistent_volume_name)
                        .await
                        .map_err(unreadable(format!(
                            "PersistentVolume {}",
                            op.spec.persistent_volume_name
                        )))?,
                    ..World::default()
                };
                if let Some(m) = &op.spec.migrate {
                    let r = &m.target_node_ref;
                    world.target = Api::<StorageNode>::namespaced(ctx.client.clone(), &r.namespace)
                        .get_opt(&r.name)
                        .await
                        .map_err(unreadable(format!(
                            "StorageNode {}/{}",
                            r.namespace, r.name
                        )))?;
                    if let Some(node) = &world.target {
                        world.target_cluster =
                            Api::<StorageCluster>::namespaced(ctx.client.clone(), &r.namespace)
                                .get_opt(&node.spec.cluster_ref)
                                .await
                                .map_err(unreadable(format!(
                                    "StorageCluster {}",
                                    node.spec.cluster_ref
                                )))?
                                .and_then(|c| c.status)
                                .and_then(|s| s.uuid)
                                .filter(|u| !u.is_empty());
                    }
                }
                on_create(&op, &world)
            }
            (Operation::Delete, _, Some(old)) => super::delete_verdict(old, on_delete),
            _ => Ok(()),
        }
    })
    .await
}

/// Whether `op` may be created in `world`. Every problem is said.
pub fn on_create(op: &PersistentVolumeOps, world: &World) -> Result<(), String> {
    let mut problems = Vec::new();
    let pv = &op.spec.persistent_volume_name;
    let mut volume_cluster = None;
    match &world.volume {
        None => problems.push(format!(
            "PersistentVolumeMissing: spec.persistentVolumeName names PersistentVolume {pv}, which does not exist; name one of `kubectl get pv`"
        )),
        Some(volume) => match volume.spec.as_ref().and_then(|s| s.csi.as_ref()) {
            None => problems.push(format!(
                "NotCSIVolume: PersistentVolume {pv} has no spec.csi; only simplyblock CSI volumes can be migrated"
            )),
            Some(csi) if csi.driver != simplyblock_api::keys::CSI_DRIVER_NAME => problems.push(format!(
                "ForeignDriver: PersistentVolume {pv} belongs to CSI driver {}, not {}; only simplyblock volumes can be migrated",
                csi.driver,
                simplyblock_api::keys::CSI_DRIVER_NAME
            )),
            Some(csi) => match simplyblock_api::volume_handle::VolumeHandle::parse(&csi.volume_handle) {
                Ok(h) => volume_cluster = Some(h.cluster.to_string()),
                Err(_) => problems.push(format!(
                    "UnparsableHandle: the volume handle {:?} of PersistentVolume {pv} is not <cluster>:<pool>:<volume>",
                    csi.volume_handle
                )),
            },
        },
    }
    if let Some(m) = &op.spec.migrate {
        let r = &m.target_node_ref;
        match &world.target {
            None => problems.push(format!(
                "TargetNodeMissing: spec.migrate.targetNodeRef names StorageNode {}/{}, which does not exist; name one of `kubectl get storagenodes -n {}`",
                r.namespace, r.name, r.namespace
            )),
            Some(node) => {
                if let (Some(theirs), Some(ours)) = (&world.target_cluster, &volume_cluster)
                    && theirs != ours
                {
                    problems.push(format!(
                        "ClusterMismatch: StorageNode {}/{} belongs to cluster {theirs} (StorageCluster {}), but PersistentVolume {pv} is in cluster {ours}; name a node of the volume's cluster",
                        r.namespace, r.name, node.spec.cluster_ref
                    ));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Whether `op` may be deleted now.
pub fn on_delete(op: &PersistentVolumeOps) -> Result<(), String> {
    super::keep_while_unabortable(
        op,
        &GRAPHS,
        "the volume has moved and the operation is cleaning up its validation Jobs",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(status: serde_json::Value) -> PersistentVolumeOps {
        serde_json::from_value(json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "PersistentVolumeOps",
            "metadata": {"name": "op"},
            "spec": {"persistentVolumeName": "pv-1", "action": "Migrate",
                     "migrate": {"targetNodeRef": {"namespace": "sb", "name": "n2"}}},
            "status": status,
        }))
        .expect("op")
    }

    fn pv(csi: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(json!({"metadata": {"name": "pv-1"}, "spec": {"csi": csi}}))
            .expect("pv")
    }

    fn node() -> StorageNode {
        serde_json::from_value(json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "StorageNode",
            "metadata": {"name": "n2"},
            "spec": {"clusterRef": "sb", "workerNode": "w2",
                     "config": {"sizing": {"vcpuCount": 4}}},
        }))
        .expect("node")
    }

    const C1: &str = "11111111-1111-1111-1111-111111111111";
    const C2: &str = "22222222-2222-2222-2222-222222222222";

    #[test]
    fn every_problem_is_said_at_once() {
        let refused = on_create(&op(json!({})), &World::default()).expect_err("refused");
        assert!(
            refused.contains("PersistentVolumeMissing") && refused.contains("TargetNodeMissing"),
            "{refused}"
        );
        let world = World {
            volume: Some(pv(
                json!({"driver": "csi.simplyblock.io", "volumeHandle": "nope"}),
            )),
            target: None,
            target_cluster: None,
        };
        let refused = on_create(&op(json!({})), &world).expect_err("refused");
        assert!(
            refused.contains("UnparsableHandle") && refused.contains("TargetNodeMissing"),
            "{refused}"
        );
    }

    #[test]
    fn the_target_must_be_in_the_volumes_cluster_once_it_has_one() {
        let handle = format!("{C1}:{C2}:{C2}");
        let world = |cluster: Option<&str>| World {
            volume: Some(pv(
                json!({"driver": "csi.simplyblock.io", "volumeHandle": handle}),
            )),
            target: Some(node()),
            target_cluster: cluster.map(str::to_owned),
        };
        assert!(on_create(&op(json!({})), &world(Some(C1))).is_ok());
        assert!(
            on_create(&op(json!({})), &world(None)).is_ok(),
            "no uuid yet: admitted"
        );
        let refused = on_create(&op(json!({})), &world(Some(C2))).expect_err("refused");
        assert!(refused.starts_with("ClusterMismatch"), "{refused}");
        let foreign = World {
            volume: Some(pv(
                json!({"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}),
            )),
            ..world(Some(C1))
        };
        assert!(
            on_create(&op(json!({})), &foreign)
                .expect_err("refused")
                .starts_with("ForeignDriver")
        );
    }

    #[test]
    fn only_verifying_keeps_the_operation() {
        let running = |step: &str| json!({"phase": "Running", "step": {"state": step}});
        assert!(on_delete(&op(running("Verifying"))).is_err());
        assert!(on_delete(&op(running("Migrating"))).is_ok());
        assert!(on_delete(&op(json!({"phase": "Succeeded"}))).is_ok());
    }
}

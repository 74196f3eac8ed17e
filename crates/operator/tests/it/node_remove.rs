//! StorageNodeOps Remove end to end on the real API server and sbsim: a drain that moves
//! a volume off the node before the control plane removes it, a drain held by a pinned
//! claim, a node the control plane no longer knows, and a StorageNode's deletion that
//! goes through Remove.

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_api::StorageNode;
use simplyblock_api::common::OpsPhase;
use simplyblock_api::persistent_volume_ops::PersistentVolumeOps;
use simplyblock_api::storage_node_ops::StorageNodeOps;
use simplyblock_controlplane::{NodeStatus, PoolCreate, Uuid, VolumeCreate};

use crate::support::{Harness, PATIENCE, harness, raised, until, until_explained};

/// An active cluster of three nodes, a StorageNode `sn-<i>` for each, a pool, and the
/// StorageNodeOps and PersistentVolumeOps controllers.
struct Fleet {
    h: Harness,
    nodes: Vec<Uuid>,
    pool: Uuid,
}

impl Fleet {
    async fn new(ns: &str) -> Fleet {
        let f = Fleet::bare(ns).await;
        tokio::spawn(simplyblock_operator::node::ops::run(f.h.ctx.clone()));
        f.start_moves();
        f
    }

    /// The PersistentVolumeOps controller.
    fn start_moves(&self) {
        tokio::spawn(simplyblock_operator::volume_ops::run(
            self.h.ctx.clone(),
            "operator:test".into(),
        ));
    }

    /// The fleet without its controllers.
    async fn bare(ns: &str) -> Fleet {
        let h = harness(ns, "", (1, 1)).await;
        h.activated().await;
        let nodes: Vec<Uuid> =
            h.cp.list_storage_nodes(h.uuid)
                .await
                .expect("nodes")
                .iter()
                .map(|n| n.id)
                .collect();
        let api: Api<StorageNode> = Api::namespaced(h.kube.clone(), ns);
        for (i, id) in nodes.iter().enumerate() {
            let worker: Node =
                serde_json::from_value(json!({"metadata": {"name": format!("{ns}-w{i}")}}))
                    .expect("worker");
            Api::<Node>::all(h.kube.clone())
                .create(&PostParams::default(), &worker)
                .await
                .expect("worker Node");
            let name = format!("sn-{i}");
            let sn: StorageNode = serde_json::from_value(json!({
                "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNode",
                "metadata": {"name": name},
                "spec": {"clusterRef": "sb", "workerNode": format!("{ns}-w{i}"), "slot": 0,
                         "config": {"sizing": {"vcpuCount": 4, "minHugePagesSize": "4G"}}},
            }))
            .expect("storage node");
            api.create(&PostParams::default(), &sn)
                .await
                .expect("StorageNode");
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"uuid": id.to_string(), "phase": "Online"}})),
            )
            .await
            .expect("uuid");
        }
        let pool =
            h.cp.create_pool(
                h.uuid,
                &PoolCreate {
                    name: format!("{ns}-pool"),
                    ..Default::default()
                },
            )
            .await
            .expect("pool")
            .id;
        Fleet { h, nodes, pool }
    }

    /// A volume on node `on`, and a PersistentVolume for it bound to claim `claim`.
    async fn volume(&self, name: &str, on: Uuid, claim: &str) -> Uuid {
        let h = &self.h;
        let mut create = VolumeCreate::new(format!("{}-{name}", h.ns), 1 << 30);
        create.host_id = Some(on.to_string());
        let id =
            h.cp.create_volume(h.uuid, self.pool, &create)
                .await
                .expect("volume");
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": format!("{}-{name}", h.ns)},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "claimRef": {"namespace": h.ns, "name": claim},
                     "csi": {"driver": "csi.simplyblock.io",
                             "volumeHandle": format!("{}:{}:{id}", h.uuid, self.pool)}},
        }))
        .expect("pv");
        Api::<PersistentVolume>::all(h.kube.clone())
            .create(&PostParams::default(), &pv)
            .await
            .expect("PersistentVolume");
        id
    }

    async fn node_of(&self, volume: Uuid) -> Uuid {
        self.h
            .cp
            .get_volume(self.h.uuid, self.pool, volume)
            .await
            .expect("volume")
            .storage_node_id
    }

    fn ops(&self) -> Api<StorageNodeOps> {
        Api::namespaced(self.h.kube.clone(), &self.h.ns)
    }

    async fn create(&self, name: &str, node: &str) {
        let op: StorageNodeOps = serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNodeOps",
            "metadata": {"name": name}, "spec": {"nodeRef": node, "action": "Remove"},
        }))
        .expect("op");
        self.ops()
            .create(&PostParams::default(), &op)
            .await
            .expect("created");
    }

    /// Waits for operation `name` to end in `phase`.
    async fn ended(&self, name: &str, phase: OpsPhase) -> StorageNodeOps {
        let api = self.ops();
        let last = std::sync::Mutex::new(None);
        until_explained(
            &format!("{name} {phase:?}"),
            PATIENCE,
            async || {
                let op = api.get(name).await.ok()?;
                *last.lock().expect("lock") = op.status.clone();
                (op.status.as_ref()?.phase == phase).then_some(op)
            },
            || format!("last seen {:?}", last.lock().expect("lock")),
        )
        .await
    }

    fn removals(&self, node: Uuid) -> String {
        format!("/api/v2/clusters/{}/storage-nodes/{node}/", self.h.uuid)
    }

    async fn moves_left(&self) -> usize {
        Api::<PersistentVolumeOps>::all(self.h.kube.clone())
            .list(&ListParams::default())
            .await
            .expect("moves")
            .items
            .iter()
            .filter(|m| {
                m.spec
                    .creator_ref
                    .as_ref()
                    .is_some_and(|c| c.namespace == self.h.ns)
            })
            .count()
    }
}

#[tokio::test]
async fn a_removal_moves_the_nodes_volume_off_before_the_control_plane_removes_it() {
    let f = Fleet::new("snops-drain").await;
    let source = f.nodes[0];
    let volume = f.volume("data", source, "claim-data").await;
    f.create("drain", "sn-0").await;
    let done = f.ended("drain", OpsPhase::Succeeded).await;
    let status = done.status.expect("status");
    let drain = status.drain.expect("drain");
    assert_eq!((drain.volumes_total, drain.volumes_migrated), (1, 1));
    let now_on = f.node_of(volume).await;
    assert_ne!(now_on, source, "the volume moved");
    assert!(f.nodes.contains(&now_on));
    let node =
        f.h.cp
            .get_storage_node(f.h.uuid, source)
            .await
            .expect("node");
    assert_eq!(node.status, NodeStatus::Removed);
    assert_eq!(f.h.calls("DELETE", &f.removals(source)).await, 1);
    assert_eq!(f.moves_left().await, 0, "the finished move was deleted");
    raised(&f.h.kube, &f.h.ns, Some("drain"), "DrainCompleted").await;
    let metric = "simplyblock_storagenode_drain_volumes_migrated_total";
    assert_eq!(
        f.h.ctx.metrics.sample(metric, &[("node", "sn-0")]),
        Some(1.0)
    );
    let removal = status.removal.expect("removal");
    assert_eq!(removal.node_status.as_deref(), Some("removed"));
}

#[tokio::test]
async fn a_pinned_claim_holds_the_drain_until_aborted_and_nothing_is_called() {
    let f = Fleet::new("snops-pinned").await;
    let source = f.nodes[0];
    f.volume("pinned", source, "claim-pinned").await;
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "claim-pinned",
                     "annotations": {"storage.simplyblock.io/selected-storage-node": source.to_string()}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .expect("claim");
    Api::<PersistentVolumeClaim>::namespaced(f.h.kube.clone(), &f.h.ns)
        .create(&PostParams::default(), &claim)
        .await
        .expect("claim");
    f.create("drain", "sn-0").await;
    let notes = raised(&f.h.kube, &f.h.ns, Some("drain"), "DrainBlocked").await;
    assert!(
        notes
            .iter()
            .any(|n| n.contains("snops-pinned-pinned (its claim is pinned")),
        "{notes:?}"
    );
    let blocked = "simplyblock_storagenode_drain_blocked_volumes_count";
    assert_eq!(
        f.h.ctx.metrics.sample(blocked, &[("node", "sn-0")]),
        Some(1.0)
    );
    let held = f.ops().get("drain").await.expect("op");
    let status = held.status.expect("status");
    assert_eq!(status.phase, OpsPhase::Running);
    assert_eq!(status.step.state.as_deref(), Some("Validating"));
    f.ops()
        .patch(
            "drain",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"abort": true}})),
        )
        .await
        .expect("abort");
    f.ended("drain", OpsPhase::Aborted).await;
    assert_eq!(f.h.calls("DELETE", &f.removals(source)).await, 0);
    assert_eq!(f.moves_left().await, 0);
    let node =
        f.h.cp
            .get_storage_node(f.h.uuid, source)
            .await
            .expect("node");
    assert_eq!(node.status, NodeStatus::Online);
}

#[tokio::test]
async fn a_node_the_control_plane_already_removed_is_removed_without_a_call() {
    let f = Fleet::new("snops-gone").await;
    let gone = f.nodes[2];
    f.h.cp
        .remove_storage_node(f.h.uuid, gone, Default::default())
        .await
        .expect("removed by hand");
    until("removed by hand", async || {
        let n = f.h.cp.get_storage_node(f.h.uuid, gone).await.ok()?;
        (n.status == NodeStatus::Removed).then_some(())
    })
    .await;
    f.create("gone", "sn-2").await;
    let done = f.ended("gone", OpsPhase::Succeeded).await;
    let message = done.status.and_then(|s| s.message).unwrap_or_default();
    assert!(message.contains("is removed"), "{message}");
    assert_eq!(
        f.h.calls("DELETE", &f.removals(gone)).await,
        1,
        "only the removal sent by hand"
    );
}

#[tokio::test]
async fn a_stuck_node_of_an_unready_cluster_is_removed_once_the_control_plane_lost_it() {
    let f = Fleet::new("snops-stuck").await;
    let stuck = f.nodes[1];
    // The cluster is not ready, and the node's record is gone from the control plane (its
    // add never finished, or it was deleted by hand): no removal can be asked, none is
    // needed.
    f.h.sim
        .server
        .sim
        .mutate(|st| {
            if let Some(c) = st.t.clusters.get_mut(&f.h.uuid.to_string()) {
                c.status = simplyblock_controlplane::ClusterStatus::Unready;
            }
            st.t.nodes.remove(&stuck.to_string());
            Ok(())
        })
        .expect("the cluster unready, the node gone");
    f.create("stuck", "sn-1").await;
    let done = f.ended("stuck", OpsPhase::Succeeded).await;
    let message = done.status.and_then(|s| s.message).unwrap_or_default();
    assert!(message.contains("no longer knows node"), "{message}");
    assert_eq!(f.h.calls("DELETE", &f.removals(stuck)).await, 0);
}

#[tokio::test]
async fn deleting_a_storage_node_drains_it_through_a_remove_operation() {
    let f = Fleet::new("sn-delete-drain").await;
    tokio::spawn(simplyblock_operator::node::controller::run(f.h.ctx.clone()));
    let source = f.nodes[1];
    let volume = f.volume("data", source, "claim-data").await;
    let nodes: Api<StorageNode> = Api::namespaced(f.h.kube.clone(), &f.h.ns);
    // The controller's finalizer is on before the delete.
    until("the finalizer on", async || {
        let n = nodes.get("sn-1").await.ok()?;
        (!n.finalizers().is_empty()).then_some(())
    })
    .await;
    nodes
        .delete("sn-1", &DeleteParams::default())
        .await
        .expect("delete");
    until_explained(
        "the StorageNode gone",
        PATIENCE,
        async || nodes.get_opt("sn-1").await.ok()?.is_none().then_some(()),
        String::new,
    )
    .await;
    assert_ne!(f.node_of(volume).await, source, "the volume moved first");
    let node =
        f.h.cp
            .get_storage_node(f.h.uuid, source)
            .await
            .expect("node");
    assert_eq!(node.status, NodeStatus::Removed);
    assert_eq!(f.h.calls("DELETE", &f.removals(source)).await, 1);
}

#[tokio::test]
async fn a_deleted_removal_stops_the_moves_it_started_and_deletes_them() {
    let f = Fleet::bare("snops-cascade").await;
    // Budgets cut to a ten-thousandth: MigratingVolumes gives up after about 9 s.
    let ctx = simplyblock_operator::runtime::context::Context::new(
        crate::support::operator_kube().await,
        f.h.cp.clone(),
        f.h.sim.endpoint.clone(),
        f.h.ns.clone(),
    )
    .watching(&f.h.ns)
    .with_step_deadline_scale(1e-4);
    tokio::spawn(simplyblock_operator::node::ops::run(std::sync::Arc::new(
        ctx,
    )));
    f.volume("data", f.nodes[0], "claim-data").await;
    f.create("drain", "sn-0").await;
    // No PersistentVolumeOps controller runs yet: the move never starts, and the drain
    // outlives its budget with the move still there.
    let failed = f.ended("drain", OpsPhase::Failed).await;
    let message = failed.status.and_then(|s| s.message).unwrap_or_default();
    assert!(
        message.contains("step MigratingVolumes exceeded its deadline"),
        "{message}"
    );
    assert_eq!(f.moves_left().await, 1);
    f.ops()
        .delete("drain", &DeleteParams::default())
        .await
        .expect("delete");
    // Held by its finalizer until the move has stopped: the abort is asked.
    let moves: Api<PersistentVolumeOps> = Api::all(f.h.kube.clone());
    until("the move asked to abort", async || {
        let list = moves.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|m| {
                m.spec.abort
                    && m.spec
                        .creator_ref
                        .as_ref()
                        .is_some_and(|c| c.name == "drain")
            })
            .then_some(())
    })
    .await;
    assert!(f.ops().get_opt("drain").await.expect("read").is_some());
    f.start_moves();
    until_explained(
        "the removal and its move gone",
        PATIENCE,
        async || f.ops().get_opt("drain").await.ok()?.is_none().then_some(()),
        String::new,
    )
    .await;
    assert_eq!(f.moves_left().await, 0);
    assert_eq!(f.h.calls("DELETE", &f.removals(f.nodes[0])).await, 0);
}

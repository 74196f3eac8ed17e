//! StoragePools against a real API server and sbsim: the default pool of an Online
//! cluster and its StorageClass, a pool created once also when the answer is lost, limits
//! sent on change, a deleted class not recreated, deletion held while volumes remain,
//! the cluster's deletion waiting for its pools, StoragePoolOps refused, and the class
//! labelled with the storage id Ramen pairs it by.

use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use simplyblock_api::common::OpsPhase;
use simplyblock_api::storage_pool::PoolPhase;
use simplyblock_api::{StorageCluster, StoragePool, StoragePoolOps};
use simplyblock_controlplane::{Uuid, VolumeCreate};
use simplyblock_operator::pool;

use crate::support::{Harness, until};

/// [`crate::support::harness`] with the cluster active.
async fn harness(ns: &str, faults: &str) -> Harness {
    let h = crate::support::harness(ns, faults, (1, 1)).await;
    h.activated().await;
    h
}

impl Harness {
    /// The pool controllers; the cluster controller too when `with_cluster`.
    fn start_pools(&self, with_cluster: bool) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = vec![
            tokio::spawn(pool::controller::run(self.ctx.clone())),
            tokio::spawn(pool::ops::run(self.ctx.clone())),
        ];
        if with_cluster {
            tasks.push(tokio::spawn(
                simplyblock_operator::cluster::controller::run(self.ctx.clone()),
            ));
        }
        tasks
    }

    fn pools(&self) -> Api<StoragePool> {
        Api::namespaced(self.kube.clone(), &self.ns)
    }

    fn classes(&self) -> Api<StorageClass> {
        Api::all(self.kube.clone())
    }

    async fn create_pool(&self, name: &str, spec: Value) {
        let pool: StoragePool = serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StoragePool",
            "metadata": {"name": name},
            "spec": spec,
        }))
        .expect("pool");
        self.pools()
            .create(&PostParams::default(), &pool)
            .await
            .expect("created");
    }

    async fn ready(&self, name: &str) -> StoragePool {
        until(&format!("pool {name} Ready"), async || {
            let p = self.pools().get(name).await.ok()?;
            (p.status.as_ref()?.phase == PoolPhase::Ready
                && !p.status.as_ref()?.storage_class_names.is_empty())
            .then_some(p)
        })
        .await
    }

    async fn gone(&self, name: &str) {
        until(&format!("pool {name} gone"), async || {
            self.pools()
                .get_opt(name)
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await;
    }

    fn pools_path(&self) -> String {
        format!("/api/v2/clusters/{}/storage-pools/", self.uuid)
    }

    async fn message(&self, name: &str, starts: &str) -> String {
        until(&format!("pool {name} saying {starts:?}"), async || {
            let m = self.pools().get(name).await.ok()?.status?.message?;
            m.starts_with(starts).then_some(m)
        })
        .await
    }
}

#[tokio::test]
async fn an_online_cluster_gets_a_default_pool_and_its_storage_class() {
    let h = harness("pools-default", "").await;
    let _c = h.start_pools(true);
    let name = pool::class::default_pool_name("sb");
    assert_eq!(name, "sb-default");
    let p = h.ready(&name).await;
    let status = p.status.clone().expect("status");
    let uuid = status.uuid.clone().expect("uuid");
    let found =
        h.cp.find_pool(h.uuid, &name)
            .await
            .expect("pools")
            .expect("the pool is in the control plane");
    assert_eq!(found.id.to_string(), uuid);
    assert_eq!(status.status.as_deref(), Some("active"));

    // Owned by the cluster, recorded on it: the record follows the pool's creation, so
    // the pool can be Ready before it lands.
    let recorded = until("the default pool recorded on the cluster", async || {
        let cluster = h.clusters().get("sb").await.ok()?;
        cluster
            .metadata
            .annotations?
            .remove(pool::controller::DEFAULT_POOL_ANNOTATION)
    })
    .await;
    assert_eq!(recorded, name);
    let owner = p.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owner.len(), 1);
    assert_eq!(owner[0].kind, "StorageCluster");
    assert_eq!(owner[0].controller, Some(true));

    // Its class: named by the rule (short, unless a cluster of the same name in another
    // test's namespace took it first), labelled for the pool, naming cluster and pool.
    let candidates = pool::class::storage_class_names(&h.ns, "sb", &name);
    let class_name = status
        .storage_class_names
        .first()
        .cloned()
        .unwrap_or_default();
    assert!(
        candidates.contains(&class_name),
        "{class_name} is not one of {candidates:?}"
    );
    assert_eq!(status.storage_class_names, vec![class_name.clone()]);
    assert_eq!(
        status.default_storage_class_name.as_deref(),
        Some(class_name.as_str())
    );
    let class = h.classes().get(&class_name).await.expect("class");
    let labels = class.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels["storage.simplyblock.io/pool"], name);
    assert_eq!(labels["storage.simplyblock.io/cluster"], "sb");
    assert_eq!(labels["storage.simplyblock.io/namespace"], h.ns);
    assert_eq!(labels["storage.simplyblock.io/managed-by"], "storagepool");
    // The storage instance Ramen pairs the class by: the cluster's UUID.
    assert_eq!(labels["ramendr.openshift.io/storageid"], h.uuid.to_string());
    let params = class.parameters.clone().unwrap_or_default();
    assert_eq!(params["cluster_id"], h.uuid.to_string());
    assert_eq!(params["pool_name"], name);
    assert_eq!(class.provisioner, "csi.simplyblock.io");
    assert_eq!(h.calls("POST", &h.pools_path()).await, 1);

    // Converged: nothing more is written.
    crate::support::converged(&h.ctx.metrics, &h.pools(), "storagepool", &name).await;

    // A class written before the label (an earlier release's) gets it back.
    h.classes()
        .patch(
            &class_name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"ramendr.openshift.io/storageid": null}}}),
            ),
        )
        .await
        .expect("label removed");
    crate::support::nudged(&h.ctx.metrics, &h.pools(), "storagepool", &name).await;
    let relabelled = until("the storage id back on the class", async || {
        let class = h.classes().get(&class_name).await.ok()?;
        class
            .metadata
            .labels?
            .remove("ramendr.openshift.io/storageid")
    })
    .await;
    assert_eq!(relabelled, h.uuid.to_string());

    // A person deletes the class and the pool: neither comes back.
    h.classes()
        .delete(&class_name, &DeleteParams::default())
        .await
        .expect("class deleted");
    until("the class list to empty", async || {
        let s = h.pools().get(&name).await.ok()?.status?;
        s.storage_class_names.is_empty().then_some(())
    })
    .await;
    assert!(
        h.classes()
            .get_opt(&class_name)
            .await
            .expect("get")
            .is_none()
    );
    h.pools()
        .delete(&name, &DeleteParams::default())
        .await
        .expect("pool deleted");
    h.gone(&name).await;
    assert!(
        h.cp.find_pool(h.uuid, &name)
            .await
            .expect("pools")
            .is_none()
    );
    // The cluster controller, which made the default pool, looks again and leaves it gone.
    crate::support::nudged(&h.ctx.metrics, &h.clusters(), "storagecluster", "sb").await;
    assert!(h.pools().get_opt(&name).await.expect("get").is_none());
    assert_eq!(h.calls("POST", &h.pools_path()).await, 1);
}

#[tokio::test]
async fn a_pool_whose_create_answer_is_lost_is_adopted_and_limits_follow_the_spec() {
    let h = harness(
        "pools-lost-answer",
        "drop:method=POST,path=/api/v2/clusters/*/storage-pools/,count=1",
    )
    .await;
    let _c = h.start_pools(false);
    h.create_pool(
        "fast",
        json!({"clusterRef": "sb", "limits": {"capacity": "10T", "maxVolumeSize": "1T"},
               "volumeDefaults": {"filesystem": "ext4", "iops": 5000}}),
    )
    .await;
    let p = h.ready("fast").await;
    assert_eq!(
        h.calls("POST", &h.pools_path()).await,
        1,
        "no second create"
    );
    let found =
        h.cp.find_pool(h.uuid, "fast")
            .await
            .expect("pools")
            .expect("pool");
    // T is 10^12, as the control plane reads sizes.
    assert_eq!(found.max_size, 10_000_000_000_000);
    assert_eq!(found.volume_max_size, 1_000_000_000_000);
    let class_name = p.status.expect("status").storage_class_names[0].clone();
    let params = h
        .classes()
        .get(&class_name)
        .await
        .expect("class")
        .parameters
        .unwrap_or_default();
    assert_eq!(params["csi.storage.k8s.io/fstype"], "ext4");
    assert_eq!(params["max_iops"], "5000");

    // A limit changed in the spec is sent once.
    h.pools()
        .patch(
            "fast",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"limits": {"maxVolumeSize": "2T"}}})),
        )
        .await
        .expect("patched");
    until("the new limit in the control plane", async || {
        let f = h.cp.find_pool(h.uuid, "fast").await.ok()??;
        (f.volume_max_size == 2_000_000_000_000).then_some(())
    })
    .await;
    crate::support::nudged(&h.ctx.metrics, &h.pools(), "storagepool", "fast").await;
    assert_eq!(
        h.calls("PUT", &format!("{}{}/", h.pools_path(), found.id))
            .await,
        1
    );

    // The API server refuses what the pool cannot take, every problem at once.
    let bad: StoragePool = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StoragePool",
        "metadata": {"name": "bad"},
        "spec": {"clusterRef": "sb", "limits": {"capacity": "lots", "iops": 10}},
    }))
    .expect("pool");
    let e = h
        .pools()
        .create(&PostParams::default(), &bad)
        .await
        .expect_err("refused");
    let text = e.to_string();
    assert!(text.contains("spec.limits.capacity"), "{text}");
    assert!(
        text.contains("pool-wide iops and throughput limits are not supported yet"),
        "{text}"
    );
}

#[tokio::test]
async fn deletion_waits_for_volumes_then_removes_pool_and_class() {
    let h = harness("pools-delete", "").await;
    let _c = h.start_pools(true);
    h.create_pool("data", json!({"clusterRef": "sb"})).await;
    let p = h.ready("data").await;
    let class_name = p.status.clone().expect("status").storage_class_names[0].clone();
    let pool_id: Uuid = p
        .status
        .expect("status")
        .uuid
        .expect("uuid")
        .parse()
        .expect("uuid");
    let volume =
        h.cp.create_volume(h.uuid, pool_id, &VolumeCreate::new("pvc-1", 1 << 30))
            .await
            .expect("volume");

    // An authored class assigned to the pool holds deletion too.
    let authored: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": "pools-delete-authored", "labels": {
            "storage.simplyblock.io/namespace": h.ns, "storage.simplyblock.io/cluster": "sb",
            "storage.simplyblock.io/pool": "data"}},
        "provisioner": "csi.simplyblock.io",
        "parameters": {"cluster_id": h.uuid.to_string(), "pool_name": "data"},
    }))
    .expect("class");
    h.classes()
        .create(&PostParams::default(), &authored)
        .await
        .expect("authored class");
    h.pools()
        .delete("data", &DeleteParams::default())
        .await
        .expect("delete");
    let m = h
        .message("data", "StorageClasses pools-delete-authored")
        .await;
    assert!(m.contains("still provision from the pool"), "{m}");
    h.classes()
        .delete("pools-delete-authored", &DeleteParams::default())
        .await
        .expect("authored deleted");

    let m = h.message("data", "the pool still holds 1 volume").await;
    assert!(m.contains("pvc-1"), "{m}");
    let p = h.pools().get("data").await.expect("held");
    assert_eq!(p.status.expect("status").phase, PoolPhase::Deleting);
    assert_eq!(
        h.calls("DELETE", &format!("{}{pool_id}/", h.pools_path()))
            .await,
        0,
        "no delete is sent while volumes remain"
    );
    assert!(
        h.classes()
            .get_opt(&class_name)
            .await
            .expect("get")
            .is_some()
    );

    h.cp.delete_volume(h.uuid, pool_id, volume)
        .await
        .expect("volume deleted");
    h.gone("data").await;
    assert!(
        h.classes()
            .get_opt(&class_name)
            .await
            .expect("get")
            .is_none()
    );
    assert!(
        h.cp.find_pool(h.uuid, "data")
            .await
            .expect("pools")
            .is_none()
    );
    assert_eq!(
        h.calls("DELETE", &format!("{}{pool_id}/", h.pools_path()))
            .await,
        1
    );
}

/// A pass that finds the control-plane pool already gone (a stale copy read just after the
/// finalizer came off, or a pool deleted by hand) sends no delete of its own.
#[tokio::test]
async fn a_pool_already_gone_from_the_control_plane_is_not_deleted_again() {
    let h = harness("pools-gone", "").await;
    let controllers = h.start_pools(true);
    h.create_pool("data", json!({"clusterRef": "sb"})).await;
    let p = h.ready("data").await;
    let pool_id: Uuid = p
        .status
        .expect("status")
        .uuid
        .expect("uuid")
        .parse()
        .expect("uuid");
    let volume =
        h.cp.create_volume(h.uuid, pool_id, &VolumeCreate::new("pvc-1", 1 << 30))
            .await
            .expect("volume");
    h.pools()
        .delete("data", &DeleteParams::default())
        .await
        .expect("delete");
    h.message("data", "the pool still holds 1 volume").await;

    // Stopped, so no retry slips in between the two deletes by hand; restarted, it finds
    // the pool gone, as it would after a crash right after its own delete.
    for task in &controllers {
        task.abort();
    }
    h.cp.delete_volume(h.uuid, pool_id, volume)
        .await
        .expect("volume deleted");
    // The control plane deletes a volume in the background, and refuses to delete a pool
    // that still holds one.
    crate::support::until("the volume gone from the control plane", async || {
        let left = h.cp.list_volumes(h.uuid, pool_id).await.ok()?;
        left.is_empty().then_some(())
    })
    .await;
    h.cp.delete_pool(h.uuid, pool_id)
        .await
        .expect("pool deleted");
    let _c = h.start_pools(true);
    h.gone("data").await;
    assert_eq!(
        h.calls("DELETE", &format!("{}{pool_id}/", h.pools_path()))
            .await,
        1,
        "only the delete sent by hand"
    );
}

#[tokio::test]
async fn a_deleted_cluster_takes_its_pools_first() {
    let h = harness("pools-cluster-delete", "").await;
    let _c = h.start_pools(true);
    let name = pool::class::default_pool_name("sb");
    h.ready(&name).await;
    let clusters: Api<StorageCluster> = Api::namespaced(h.kube.clone(), &h.ns);
    clusters
        .delete("sb", &DeleteParams::default())
        .await
        .expect("delete");
    h.gone(&name).await;
    assert!(
        h.cp.find_pool(h.uuid, &name)
            .await
            .map(|p| p.is_none())
            .unwrap_or(true)
    );
}

#[tokio::test]
async fn a_pool_operation_is_refused_with_a_reason() {
    let h = harness("pools-ops", "").await;
    let _c = h.start_pools(false);
    let op: StoragePoolOps = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StoragePoolOps",
        "metadata": {"name": "rebalance"},
        "spec": {"poolRef": "sb-default", "action": "Rebalance"},
    }))
    .expect("op");
    let ops: Api<StoragePoolOps> = Api::namespaced(h.kube.clone(), &h.ns);
    ops.create(&PostParams::default(), &op)
        .await
        .expect("created");
    let status = until("the operation Failed", async || {
        let s = ops.get("rebalance").await.ok()?.status?;
        (s.phase == OpsPhase::Failed).then_some(s)
    })
    .await;
    assert_eq!(status.message.as_deref(), Some(pool::ops::UNSUPPORTED));
    assert!(status.completed_at.is_some());
}

/// spec.allowedNodes enforced (sbsim stands in for the control plane): each existing Node's
/// host NQN registered with the pool once, the pool's access label on exactly those Nodes,
/// status.allowedNodes, one AllowedNodeMissing for a name with no Node; the control plane
/// connects the pool's volumes to allowed hosts only, and a changed list moves all of it.
#[tokio::test]
async fn allowed_nodes_decide_which_hosts_attach_and_which_nodes_are_labelled() {
    use k8s_openapi::api::core::v1::Node;
    use simplyblock_api::volume_handle::host_nqn;

    let h = harness("pools-access", "").await;
    let nodes: Api<Node> = Api::all(h.kube.clone());
    let (a, b, gone) = ("pools-access-a", "pools-access-b", "pools-access-gone");
    let mut uid = std::collections::BTreeMap::new();
    for name in [a, b] {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).expect("node");
        let made = nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("Node");
        uid.insert(name, made.metadata.uid.expect("uid"));
    }
    let _c = h.start_pools(true);
    h.create_pool(
        "gated",
        json!({"clusterRef": "sb", "allowedNodes": [a, gone]}),
    )
    .await;
    let p = until("status.allowedNodes resolved", async || {
        let p = h.ready("gated").await;
        (p.status.as_ref()?.allowed_nodes == vec![a.to_owned()]).then_some(p)
    })
    .await;
    let status = p.status.clone().expect("status");
    let pool_id: Uuid = status.uuid.clone().expect("uuid").parse().expect("uuid");
    let label = format!("simplyblock.io/pool.{pool_id}");
    assert!(status.limits.is_some(), "{status:?}");

    // The control plane keeps the pool's host list: a's host only.
    let found = h.cp.get_pool(h.uuid, pool_id).await.expect("pool");
    assert!(
        found.dhchap,
        "a pool naming Nodes is created with host authentication"
    );
    assert_eq!(found.allowed_hosts, vec![host_nqn(&uid[a])]);
    let labelled = async |name: &str| {
        nodes
            .get(name)
            .await
            .expect("node")
            .metadata
            .labels
            .unwrap_or_default()
            .get(&label)
            .cloned()
    };
    assert_eq!(labelled(a).await.as_deref(), Some("allowed"));
    assert_eq!(labelled(b).await, None);
    let class = h
        .classes()
        .get(&status.storage_class_names[0])
        .await
        .expect("class");
    assert_eq!(
        class.parameters.unwrap_or_default()["dhchap_node_selector"],
        label,
        "volumes are scheduled onto the labelled Nodes"
    );

    // The missing name is announced once, also across passes.
    let missing = h.events("gated", "AllowedNodeMissing").await;
    assert!(missing[0].contains(gone), "{missing:?}");
    crate::support::nudged(&h.ctx.metrics, &h.pools(), "storagepool", "gated").await;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(h.kube.clone(), &h.ns);
    let announced: Vec<_> = events
        .list(&Default::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("AllowedNodeMissing"))
        .collect();
    assert_eq!(announced.len(), 1, "{announced:?}");
    assert!(announced[0].series.is_none(), "{announced:?}");

    // The control plane connects the pool's volumes to a and refuses b.
    let volume =
        h.cp.create_volume(h.uuid, pool_id, &VolumeCreate::new("gated-1", 1 << 30))
            .await
            .expect("volume");
    let connect = async |node: &str| {
        h.cp.connect_volume(h.uuid, pool_id, volume, Some(&host_nqn(&uid[node])))
            .await
    };
    assert!(!connect(a).await.expect("a attaches").is_empty());
    let refused = connect(b).await.expect_err("b is refused");
    assert!(refused.is_not_found(), "{refused:?}");
    assert!(
        refused.message().contains("not found in allowed hosts"),
        "{refused:?}"
    );

    // The list changes to b: host, label and status follow, and a loses access.
    h.pools()
        .patch(
            "gated",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"allowedNodes": [b]}})),
        )
        .await
        .expect("allowedNodes changed");
    until("status.allowedNodes moved to b", async || {
        let s = h.pools().get("gated").await.ok()?.status?;
        (s.allowed_nodes == vec![b.to_owned()]).then_some(())
    })
    .await;
    assert_eq!(labelled(a).await, None);
    assert_eq!(labelled(b).await.as_deref(), Some("allowed"));
    let found = h.cp.get_pool(h.uuid, pool_id).await.expect("pool");
    assert_eq!(found.allowed_hosts, vec![host_nqn(&uid[b])]);
    assert!(!connect(b).await.expect("b attaches").is_empty());
    assert!(connect(a).await.is_err(), "a no longer attaches");

    // Converged: each host was sent once.
    crate::support::converged(&h.ctx.metrics, &h.pools(), "storagepool", "gated").await;
    let host_path = format!("{}{pool_id}/host", h.pools_path());
    assert_eq!(h.calls("POST", &host_path).await, 2);
    assert_eq!(h.calls("DELETE", &host_path).await, 1);

    // Only an absent Node named: no host may attach (an empty host list would admit all).
    let allow = async |names: Value| {
        h.pools()
            .patch(
                "gated",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"allowedNodes": names}})),
            )
            .await
            .expect("allowedNodes changed");
    };
    allow(json!([gone])).await;
    until("the pool Pending with no allowed Node", async || {
        let s = h.pools().get("gated").await.ok()?.status?;
        (s.allowed_nodes.is_empty() && s.phase == PoolPhase::Pending).then_some(())
    })
    .await;
    let found = h.cp.get_pool(h.uuid, pool_id).await.expect("pool");
    assert_eq!(found.allowed_hosts, vec![pool::access::nobody()]);
    assert!(connect(a).await.is_err() && connect(b).await.is_err());
    assert_eq!(labelled(b).await, None);
    allow(json!([b])).await;
    until("b labelled again", async || {
        (labelled(b).await.as_deref() == Some("allowed")).then_some(())
    })
    .await;

    // The pool goes: so does its label.
    h.cp.delete_volume(h.uuid, pool_id, volume)
        .await
        .expect("volume deleted");
    h.pools()
        .delete("gated", &DeleteParams::default())
        .await
        .expect("pool deleted");
    h.gone("gated").await;
    assert_eq!(labelled(b).await, None);
    for name in [a, b] {
        nodes
            .delete(name, &DeleteParams::default())
            .await
            .expect("Node deleted");
    }
}

/// A pool the control plane created without host authentication cannot be restricted
/// later: the pool says so instead of pretending.
#[tokio::test]
async fn allowed_nodes_given_to_a_pool_created_without_them_are_reported_unenforced() {
    use k8s_openapi::api::core::v1::Node;

    let h = harness("pools-unenforced", "").await;
    let nodes: Api<Node> = Api::all(h.kube.clone());
    let name = "pools-unenforced-a";
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).expect("node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("Node");
    let _c = h.start_pools(true);
    h.create_pool("open", json!({"clusterRef": "sb"})).await;
    h.ready("open").await;
    h.pools()
        .patch(
            "open",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"allowedNodes": [name]}})),
        )
        .await
        .expect("allowedNodes set");
    let m = h
        .message("open", "spec.allowedNodes cannot be enforced")
        .await;
    assert!(m.contains("create a new StoragePool"), "{m}");
    let p = h.pools().get("open").await.expect("pool");
    assert_eq!(p.status.expect("status").phase, PoolPhase::Pending);
    assert!(!h.events("open", "AllowedNodesNotEnforced").await.is_empty());
    let found =
        h.cp.find_pool(h.uuid, "open")
            .await
            .expect("pools")
            .expect("pool");
    assert!(found.allowed_hosts.is_empty());
    assert_eq!(
        h.calls("POST", &format!("{}{}/host", h.pools_path(), found.id))
            .await,
        0,
        "nothing is sent the control plane would refuse"
    );
    nodes
        .delete(name, &DeleteParams::default())
        .await
        .expect("Node deleted");
}

/// Admission: a pool naming no existing cluster, with allowedNodes no Node can be named,
/// is refused with every problem in one answer.
#[tokio::test]
async fn a_pool_of_no_cluster_with_bad_node_names_is_refused_naming_each_problem() {
    let h = harness("pools-admission", "").await;
    let pool: StoragePool = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StoragePool",
        "metadata": {"name": "lost"},
        "spec": {"clusterRef": "nowhere", "allowedNodes": ["Worker_1", "worker-2"]},
    }))
    .expect("pool");
    let refused = h
        .pools()
        .create(&PostParams::default(), &pool)
        .await
        .expect_err("refused");
    let text = refused.to_string();
    assert!(
        text.contains("\"nowhere\" does not name a StorageCluster"),
        "{text}"
    );
    assert!(
        text.contains("\"Worker_1\" cannot be a Node's name"),
        "{text}"
    );
    assert!(!text.contains("worker-2"), "{text}");
    assert!(h.pools().get_opt("lost").await.expect("get").is_none());

    // Its cluster exists: admitted.
    h.create_pool(
        "found",
        json!({"clusterRef": "sb", "allowedNodes": ["worker-2"]}),
    )
    .await;
}

//! The StorageCluster controller against a real API server and sbsim: creation, adoption
//! after a lost answer, an unready control plane, steady state and deletion.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use simplyblock_api::StorageCluster;
use simplyblock_api::storage_cluster::ClusterPhase;
use simplyblock_controlplane::{Client, Method};
use simplyblock_operator::cluster::controller;
use simplyblock_operator::csi_secret;
use simplyblock_operator::runtime::context::Context;

use crate::support::{Sbsim, namespace, sbsim, until};

struct Harness {
    kube: kube::Client,
    ns: String,
    /// Kept alive for the test; dropping it stops sbsim (`None`: another holds it).
    _sim: Option<Sbsim>,
    cp: Client,
    ctx: Arc<Context>,
}

/// A namespace of its own, an sbsim of its own, and the controller watching that namespace.
async fn harness(ns: &str, faults: &str) -> Harness {
    let kube = crate::support::api_server()
        .await
        .client()
        .await
        .expect("client");
    namespace(&kube, ns).await;
    let sim = sbsim(faults, 0).await;
    let cp = sim.cp.clone();
    let ctx = Arc::new(
        Context::new(
            crate::support::operator_kube().await,
            cp.clone(),
            sim.endpoint.clone(),
            ns.to_string(),
        )
        .watching(ns),
    );
    tokio::spawn(controller::run(ctx.clone()));
    Harness {
        kube,
        ns: ns.into(),
        _sim: Some(sim),
        cp,
        ctx,
    }
}

impl Harness {
    fn clusters(&self) -> Api<StorageCluster> {
        Api::namespaced(self.kube.clone(), &self.ns)
    }

    async fn create(&self, name: &str) {
        let cluster: StorageCluster = serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
            "metadata": {"name": name},
            "spec": {"maxSubsystemCount": 10, "vcpuCount": 4, "stripe": {"dataChunks": 1, "parityChunks": 1}}
        }))
        .expect("cluster");
        self.clusters()
            .create(&PostParams::default(), &cluster)
            .await
            .expect("created");
    }

    async fn calls(&self, method: &str, path: &str) -> usize {
        crate::support::calls(&self.cp, method, path).await
    }

    /// The notes of `reason` once it was raised.
    async fn events(&self, reason: &str) -> Vec<String> {
        crate::support::raised(&self.kube, &self.ns, None, reason).await
    }
}

/// The cluster's uuid once the creation machine is done: the uuid is recorded a step
/// before the machine ends, so a uuid alone does not mean the phase has moved on.
async fn created(h: &Harness, name: &str) -> Option<String> {
    let status = h.clusters().get(name).await.ok()?.status?;
    status.step.is_empty().then_some(status.uuid?)
}

#[tokio::test]
async fn a_cluster_is_created_once_and_reported() {
    let h = harness("cluster-create", "").await;
    h.create("sb").await;
    let uuid = until("the cluster created", async || created(&h, "sb").await).await;

    let cluster = h.clusters().get("sb").await.expect("cluster");
    let status = cluster.status.expect("status");
    // sbsim creates a cluster unready: it is being built up, nothing is wrong. (A run
    // once read another phase here; the whole status says which, and what else.)
    assert_eq!(status.phase, ClusterPhase::Provisioning, "{status:#?}");
    assert_eq!(status.status.as_deref(), Some("unready"));
    assert_eq!(status.erasure_coding_scheme.as_deref(), Some("1x1"));
    assert!(
        status.step.is_empty(),
        "the creation machine is done: {:?}",
        status.step
    );
    assert!(
        cluster
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&controller::FINALIZER.to_string())
    );
    assert_eq!(h.calls("POST", "/api/v2/clusters/").await, 1);

    // The cluster's Secret, and its entry for the CSI driver.
    let secrets: Api<Secret> = Api::namespaced(h.kube.clone(), &h.ns);
    let record = secrets
        .get("simplyblock-cluster-sb")
        .await
        .expect("cluster secret");
    let data = record.data.expect("data");
    assert_eq!(String::from_utf8_lossy(&data["uuid"].0), uuid);
    let csi = secrets.get(csi_secret::NAME).await.expect("CSI secret");
    let contents: csi_secret::Contents =
        serde_json::from_slice(&csi.data.expect("data")[csi_secret::KEY].0).expect("contents");
    assert_eq!(contents.clusters.len(), 1);
    assert_eq!(contents.clusters[0].cluster_id, uuid);
    assert_eq!(
        contents.clusters[0].cluster_secret,
        String::from_utf8_lossy(&data["secret"].0)
    );

    // Converged: once the control plane's tasks of the new cluster are done (each one
    // leaving the window is a status change), further passes write nothing.
    until("the cluster's task window empty", async || {
        let c = h.clusters().get("sb").await.ok()?;
        c.status?.tasks.is_empty().then_some(())
    })
    .await;
    crate::support::converged(&h.ctx.metrics, &h.clusters(), "storagecluster", "sb").await;

    // Deletion removes it from the control plane, the CSI secret and Kubernetes.
    h.clusters()
        .delete("sb", &DeleteParams::default())
        .await
        .expect("delete");
    until("the StorageCluster to go", async || {
        h.clusters()
            .get_opt("sb")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(
        h.calls("DELETE", &format!("/api/v2/clusters/{uuid}/"))
            .await,
        1
    );
    assert!(h.cp.list_clusters().await.expect("clusters").is_empty());
    let csi = secrets.get(csi_secret::NAME).await.expect("CSI secret");
    let contents: csi_secret::Contents =
        serde_json::from_slice(&csi.data.expect("data")[csi_secret::KEY].0).expect("contents");
    assert!(contents.clusters.is_empty());
}

#[tokio::test]
async fn a_create_whose_answer_is_lost_is_adopted_not_repeated() {
    // The control plane commits the create and drops the connection before answering.
    let h = harness(
        "cluster-lost-answer",
        "drop:method=POST,path=/api/v2/clusters/,count=1",
    )
    .await;
    h.create("sb").await;
    until("the cluster created", async || created(&h, "sb").await).await;
    assert_eq!(
        h.calls("POST", "/api/v2/clusters/").await,
        1,
        "no second create"
    );
    assert_eq!(h.cp.list_clusters().await.expect("clusters").len(), 1);
    let adopted = h.events("ClusterAdopted").await;
    assert_eq!(adopted.len(), 1, "{adopted:?}");
}

#[tokio::test]
async fn a_create_committed_after_the_client_gave_up_is_adopted_not_repeated() {
    // The control plane takes longer than the client waits (5 s) and commits the create
    // after the client has given up on it.
    let h = harness(
        "cluster-late-commit",
        "latency:method=POST,path=/api/v2/clusters/,ms=6000,count=1",
    )
    .await;
    h.create("sb").await;
    until("the cluster created", async || created(&h, "sb").await).await;
    assert_eq!(
        h.calls("POST", "/api/v2/clusters/").await,
        1,
        "no second create"
    );
    assert_eq!(h.cp.list_clusters().await.expect("clusters").len(), 1);
}

#[tokio::test]
async fn an_unready_control_plane_holds_creation_and_says_why() {
    let h = harness("cluster-unready", "unready:for=3s").await;
    h.create("sb").await;
    let message = until("the hold message", async || {
        let m = h.clusters().get("sb").await.ok()?.status?.message?;
        m.starts_with("the control plane is not ready").then_some(m)
    })
    .await;
    assert!(
        message.ends_with("the cluster is created once it is"),
        "{message}"
    );
    assert!(!h.events("FDBNotReady").await.is_empty());
    assert_eq!(
        h.calls("POST", "/api/v2/clusters/").await,
        0,
        "nothing is created while unready"
    );
    // It proceeds once the control plane answers.
    until("the cluster created", async || created(&h, "sb").await).await;
    assert_eq!(h.calls("POST", "/api/v2/clusters/").await, 1);
}

impl Harness {
    async fn clock(&self, scale: f64) {
        let r = self
            .cp
            .raw(
                Method::PUT,
                "/../../_sim/clock",
                &[],
                Some(&json!({"scale": scale})),
            )
            .await
            .expect("clock");
        assert!(r.status < 300, "clock: {}", r.status);
    }

    /// A metadata change: the controller looks again at once instead of at its resync.
    async fn nudge(&self, name: &str, n: usize) {
        self.clusters()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"test/nudge": n.to_string()}}})),
            )
            .await
            .expect("nudge");
    }

    /// (type, note) of every event with `reason`.
    async fn typed_events(&self, reason: &str) -> Vec<(String, String)> {
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.kube.clone(), &self.ns);
        events
            .list(&Default::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .map(|e| (e.type_.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect()
    }
}

#[tokio::test]
async fn a_node_add_that_gave_up_leaves_the_window_with_a_warning() {
    // Every attempt of a node add fails: the control plane gives up at max_retry.
    let h = harness("cluster-task-verdict", "taskfail:name=node_add").await;
    h.create("sb").await;
    let uuid: simplyblock_controlplane::Uuid =
        until("the cluster created", async || created(&h, "sb").await)
            .await
            .parse()
            .expect("uuid");
    until("the creation tasks done", async || {
        let c = h.clusters().get("sb").await.ok()?;
        c.status?.tasks.is_empty().then_some(())
    })
    .await;
    // Frozen sim time holds the add open until the window has shown it.
    h.clock(0.0).await;
    let task =
        h.cp.add_storage_node(
            uuid,
            &simplyblock_controlplane::StorageNodeAdd::new(
                "w1.simplyblock-storage-node-api.simplyblock.svc.cluster.local:5000",
                "eth0",
            ),
        )
        .await
        .expect("node add")
        .to_string();
    let mut n = 0;
    until("the add in the task window", async || {
        n += 1;
        h.nudge("sb", n).await;
        let c = h.clusters().get("sb").await.ok()?;
        c.status?.tasks.iter().any(|t| t.id == task).then_some(())
    })
    .await;
    h.clock(1000.0).await;
    let last = until("the add's final state", async || {
        let t = h.cp.get_task(uuid, task.parse().ok()?).await.ok()?;
        (t.status == simplyblock_controlplane::TaskStatus::Done).then_some(t)
    })
    .await;
    assert_eq!(last.function_result, "max retry reached");
    let verdicts = until("the add's verdict", async || {
        n += 1;
        h.nudge("sb", n).await;
        let v: Vec<(String, String)> = h
            .typed_events("TaskFailed")
            .await
            .into_iter()
            .filter(|(_, note)| note.contains(&task))
            .collect();
        (!v.is_empty()).then_some(v)
    })
    .await;
    assert_eq!(verdicts.len(), 1, "one event: {verdicts:?}");
    let (kind, note) = &verdicts[0];
    assert_eq!(kind, "Warning", "{note}");
    assert!(
        note.contains("node_add") && note.contains("max retry reached"),
        "{note}"
    );
    // No Normal verdict for the same task beside it.
    for reason in ["TaskCompleted", "TaskCanceled", "TaskLeftQueue"] {
        let normal: Vec<_> = h
            .typed_events(reason)
            .await
            .into_iter()
            .filter(|(_, note)| note.contains(&task))
            .collect();
        assert!(normal.is_empty(), "{reason}: {normal:?}");
    }
}

/// The control plane names clusters without their namespace. A StorageCluster of a name
/// another served namespace already holds neither adopts that cluster nor, deleted,
/// deletes it.
#[tokio::test]
async fn same_named_clusters_of_two_namespaces_neither_adopt_nor_delete_each_other() {
    use simplyblock_operator::runtime::context::Scope;
    let (first, second) = ("names-first", "names-second");
    // An API server of its own: the operator serves every namespace of it.
    let (env, admin) = crate::support::own_api_server_serving_all(first).await;
    namespace(&admin, second).await;
    let sim = sbsim("", 0).await;
    let ctx = Arc::new(
        Context::new(
            crate::support::operator_kube_on(&env, first).await,
            sim.cp.clone(),
            sim.endpoint.clone(),
            first.to_string(),
        )
        .with_scope(Scope::all()),
    );
    tokio::spawn(controller::run(ctx.clone()));
    let h = |ns: &str| Harness {
        kube: admin.clone(),
        ns: ns.into(),
        _sim: None,
        cp: sim.cp.clone(),
        ctx: ctx.clone(),
    };
    let (a, b) = (h(first), h(second));
    a.create("sb").await;
    let uuid = until("the first cluster created", async || {
        created(&a, "sb").await
    })
    .await;

    b.create("sb").await;
    let held = until("the second cluster held", async || {
        let s = b.clusters().get("sb").await.ok()?.status?;
        s.message
            .filter(|m| m.starts_with("StorageCluster names-first/sb already holds this name"))
            .map(|m| (m, s.uuid))
    })
    .await;
    assert_eq!(held.1, None, "the second cluster recorded {:?}", held.1);
    assert_eq!(b.events("ClusterNameTaken").await, [held.0]);
    assert_eq!(a.calls("POST", "/api/v2/clusters/").await, 1);
    assert_eq!(sim.cp.list_clusters().await.expect("clusters").len(), 1);

    // Deleted, the second takes nothing with it.
    b.clusters()
        .delete("sb", &DeleteParams::default())
        .await
        .expect("delete");
    until("the second cluster gone", async || {
        b.clusters()
            .get_opt("sb")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    // No delete of the first cluster, by any form of its path (the route ends in a slash).
    let first = format!("/api/v2/clusters/{uuid}");
    let deletes: Vec<Value> = crate::support::call_log(&sim.cp)
        .await
        .into_iter()
        .filter(|c| {
            c["method"] == "DELETE" && c["path"].as_str().is_some_and(|p| p.starts_with(&first))
        })
        .collect();
    assert!(deletes.is_empty(), "{deletes:?}");
    assert_eq!(
        sim.cp
            .get_cluster(uuid.parse().expect("uuid"))
            .await
            .expect("the first cluster's control-plane cluster")
            .id
            .to_string(),
        uuid
    );
    let first_status = a.clusters().get("sb").await.expect("first").status;
    assert_eq!(first_status.and_then(|s| s.uuid), Some(uuid));
}

/// Stores the CSI secret in the harness's namespace with `json` under its key, beside a
/// data key of someone else's.
async fn stored_csi_secret(h: &Harness, json: &[u8]) -> Secret {
    use k8s_openapi::ByteString;
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(csi_secret::NAME.into()),
            ..Default::default()
        },
        data: Some(
            [
                (csi_secret::KEY.to_string(), ByteString(json.to_vec())),
                ("notes".to_string(), ByteString(b"kept by hand".to_vec())),
            ]
            .into(),
        ),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(h.kube.clone(), &h.ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("the CSI secret stored")
}

#[tokio::test]
async fn writing_the_csi_secret_keeps_other_clusters_and_keys_it_does_not_know() {
    let h = harness("csi-secret-keeps", "").await;
    let other = json!({
        "clusters": [{
            "cluster_id": "0a000000-0000-4000-8000-00000000000a",
            "cluster_endpoint": "https://other-cp:8080",
            "cluster_secret": "other-secret",
            "local": true,
            "replication_peer": {"site": "b"}
        }],
        "format": 3
    });
    stored_csi_secret(&h, other.to_string().as_bytes()).await;
    h.create("sb").await;
    let uuid = until("the cluster created", async || created(&h, "sb").await).await;

    // The creation machine publishes the entry before it ends.
    let secrets: Api<Secret> = Api::namespaced(h.kube.clone(), &h.ns);
    let data = secrets
        .get(csi_secret::NAME)
        .await
        .expect("CSI secret")
        .data
        .expect("data");
    let written: serde_json::Value =
        serde_json::from_slice(&data[csi_secret::KEY].0).expect("JSON");
    let clusters = written["clusters"].as_array().expect("clusters");
    let entry = |id: &str| {
        clusters
            .iter()
            .find(|c| c["cluster_id"] == id)
            .unwrap_or_else(|| panic!("no entry for {id}: {written}"))
    };
    assert_eq!(clusters.len(), 2, "{written}");
    assert!(entry(&uuid)["cluster_secret"].is_string(), "{written}");
    assert_eq!(
        entry("0a000000-0000-4000-8000-00000000000a"),
        &other["clusters"][0],
        "the other entry as it was"
    );
    assert_eq!(written["format"], 3, "a top-level key kept: {written}");
    assert_eq!(data["notes"].0, b"kept by hand", "another data key kept");
}

#[tokio::test]
async fn the_csi_secret_holds_every_listed_cluster_keeps_foreign_entries_and_drops_stale_own() {
    let h = harness("csi-secret-every", "").await;
    // A second cluster of the same control plane, not a StorageCluster of this site.
    let peer =
        h.cp.create_cluster(&simplyblock_controlplane::ClusterCreate::new("peer", 10, 4))
            .await
            .expect("second cluster");
    let endpoint = h.ctx.control_plane_endpoint().expect("endpoint");
    let foreign = json!({
        "cluster_id": "0b000000-0000-4000-8000-00000000000b",
        "cluster_endpoint": "https://site-b:8080",
        "cluster_secret": "site-b-secret",
        "local": true,
        csi_secret::WRITER_KEY: "https://site-b:8080"
    });
    let stored = json!({"clusters": [
        foreign,
        {
            "cluster_id": "0c000000-0000-4000-8000-00000000000c",
            "cluster_endpoint": endpoint,
            "cluster_secret": "removed-outside",
            csi_secret::WRITER_KEY: endpoint
        }
    ]});
    stored_csi_secret(&h, stored.to_string().as_bytes()).await;
    h.create("sb").await;
    let uuid = until("the cluster created", async || created(&h, "sb").await).await;

    let secrets: Api<Secret> = Api::namespaced(h.kube.clone(), &h.ns);
    let data = secrets
        .get(csi_secret::NAME)
        .await
        .expect("CSI secret")
        .data
        .expect("data");
    let written: Value = serde_json::from_slice(&data[csi_secret::KEY].0).expect("JSON");
    let mut ids: Vec<&str> = written["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .filter_map(|c| c["cluster_id"].as_str())
        .collect();
    ids.sort_unstable();
    let peer_id = peer.id.to_string();
    let mut expected = vec!["0b000000-0000-4000-8000-00000000000b", &peer_id, &uuid];
    expected.sort_unstable();
    assert_eq!(ids, expected, "the stale own entry dropped: {written}");

    let contents = simplyblock_api::csi_secret::decode(&data[csi_secret::KEY].0).expect("contents");
    let entry = |id: &str| {
        contents
            .clusters
            .iter()
            .find(|e| e.cluster_id == id)
            .expect("entry")
            .clone()
    };
    assert_eq!(
        written["clusters"]
            .as_array()
            .expect("clusters")
            .iter()
            .find(|c| c["cluster_id"] == "0b000000-0000-4000-8000-00000000000b"),
        Some(&foreign),
        "another operator's entry as it was"
    );
    assert_eq!(entry(&peer_id).cluster_secret, peer.secret.expose());
    assert_eq!(entry(&peer_id).cluster_endpoint, endpoint);
    assert_eq!(entry(&peer_id).writer(), Some(endpoint.as_str()));
    assert_eq!(entry(&uuid).writer(), Some(endpoint.as_str()));
    assert_eq!(
        contents.local,
        [
            "0b000000-0000-4000-8000-00000000000b".to_string(),
            uuid.clone()
        ]
        .into(),
        "this site's cluster is local, the peer of the same control plane is not"
    );
    // The driver reads what the operator wrote, the peer included.
    let driver = simplyblock_csi::clusters::parse_secret(
        std::str::from_utf8(&data[csi_secret::KEY].0).expect("utf-8"),
    )
    .expect("the driver parses it");
    assert_eq!(driver.len(), 3);
}

#[tokio::test]
async fn an_unreadable_csi_secret_is_left_untouched_and_said_in_an_event() {
    let h = harness("csi-secret-unreadable", "").await;
    let stored = stored_csi_secret(&h, br#"{"clusters": [{"cluster_id": "0a00"#).await;
    h.create("sb").await;
    let notes = h.events("CSISecretUnreadable").await;
    println!("{notes:?}");
    assert!(
        notes[0].contains("untouched") && notes[0].contains(csi_secret::KEY),
        "the event says what is wrong and what to do: {notes:?}"
    );
    // The event follows the refused write: the secret is as it was stored.
    let now = Api::<Secret>::namespaced(h.kube.clone(), &h.ns)
        .get(csi_secret::NAME)
        .await
        .expect("CSI secret");
    assert_eq!(
        now.metadata.resource_version,
        stored.metadata.resource_version
    );
    assert_eq!(now.data, stored.data);
}

#[tokio::test]
async fn a_failed_task_list_is_an_error_not_an_empty_list() {
    // The first task list of the cluster, read as the creation machine persists it, fails.
    let h = harness(
        "cluster-task-list-fails",
        "error:method=GET,path=/api/v2/clusters/*/tasks/,count=1",
    )
    .await;
    h.create("sb").await;
    let uuid = until("the cluster created", async || created(&h, "sb").await).await;
    let tasks = format!("/api/v2/clusters/{uuid}/tasks/");
    let answers = crate::support::answers(&h.cp, "GET", &tasks).await;
    assert_eq!(answers.first(), Some(&500), "the fault fired: {answers:?}");
    // The failed read ended its pass as a control-plane error, retried; it was not read
    // as a cluster without tasks.
    let errors = h.ctx.metrics.sample(
        "simplyblock_reconcile_errors_total",
        &[("controller", "storagecluster"), ("kind", "control_plane")],
    );
    assert!(errors.is_some_and(|n| n >= 1.0), "{errors:?}");
    let status = h.clusters().get("sb").await.expect("cluster").status;
    println!("created after a failed task list: {status:?}");
}

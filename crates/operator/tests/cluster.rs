//! The StorageCluster controller against a real API server and sbsim: creation, adoption
//! after a lost answer, an unready control plane, steady state and deletion.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use simplyblock_api::StorageCluster;
use simplyblock_api::storage_cluster::ClusterPhase;
use simplyblock_controlplane::{Client, ClientConfig, Method, Url};
use simplyblock_operator::cluster::controller;
use simplyblock_operator::context::Context;
use simplyblock_operator::csi_secret;
use simplyblock_simulator::{Server, Sim, SimConfig};
use simplyblock_testenv::TestEnv;

const TOKEN: &str = "operator-test-token";

struct Harness {
    kube: kube::Client,
    ns: String,
    /// Kept alive for the test; dropping it stops sbsim.
    _sim: Server,
    cp: Client,
    _dir: tempfile::TempDir,
}

/// A namespace of its own, an sbsim of its own, and the controller watching that namespace.
async fn harness(ns: &str, faults: &str) -> Harness {
    let env = TestEnv::shared().expect("API server");
    env.install_crds(&simplyblock_api::crds())
        .await
        .expect("CRDs");
    let kube = env.client().await.expect("client");
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns");
    Api::<Namespace>::all(kube.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace");

    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = SimConfig {
        tokens: vec![TOKEN.into()],
        time_scale: 1000.0,
        faults: faults.into(),
        ..SimConfig::new(dir.path().join("state"))
    };
    let sim = Server::start(Sim::open(config).expect("sim"), "127.0.0.1:0", None)
        .await
        .expect("sbsim");
    let cp = cp_client(&sim.url);
    let ctx = Arc::new(Context::new(
        kube.clone(),
        cp.clone(),
        sim.url.clone(),
        ns.to_string(),
    ));
    tokio::spawn(controller::run(ctx, Some(ns.to_string())));
    Harness {
        kube,
        ns: ns.into(),
        _sim: sim,
        cp,
        _dir: dir,
    }
}

fn cp_client(url: &str) -> Client {
    let mut cfg = ClientConfig::new(Url::parse(url).expect("url"), TOKEN);
    cfg.timeout = Duration::from_secs(5);
    cfg.retry_backoff = Duration::from_millis(20);
    Client::new(cfg).expect("client")
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

    async fn until<T>(&self, what: &str, mut f: impl AsyncFnMut(&Harness) -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = f(self).await {
                return v;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn calls(&self, method: &str, path: &str) -> usize {
        let r = self
            .cp
            .raw(Method::GET, "/../../_sim/calls", &[], None)
            .await
            .expect("call log");
        let calls: Vec<Value> =
            serde_json::from_value(r.json().unwrap_or(Value::Null)).expect("calls");
        calls
            .iter()
            .filter(|c| c["method"] == method && c["path"] == path)
            .count()
    }

    async fn events(&self, reason: &str) -> Vec<String> {
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.kube.clone(), &self.ns);
        events
            .list(&Default::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.note)
            .collect()
    }
}

async fn uuid_of(h: &Harness, name: &str) -> Option<String> {
    h.clusters().get(name).await.ok()?.status?.uuid
}

#[tokio::test]
async fn a_cluster_is_created_once_and_reported() {
    let h = harness("cluster-create", "").await;
    h.create("sb").await;
    let uuid = h
        .until("the cluster's uuid", async |h| uuid_of(h, "sb").await)
        .await;

    let cluster = h.clusters().get("sb").await.expect("cluster");
    let status = cluster.status.expect("status");
    // sbsim creates a cluster unready: it is being built up, nothing is wrong.
    assert_eq!(status.phase, ClusterPhase::Provisioning);
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
    h.until("the cluster's task window empty", async |h| {
        let c = h.clusters().get("sb").await.ok()?;
        c.status?.tasks.is_empty().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rv = h
        .clusters()
        .get("sb")
        .await
        .expect("cluster")
        .metadata
        .resource_version;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        h.clusters()
            .get("sb")
            .await
            .expect("cluster")
            .metadata
            .resource_version,
        rv
    );

    // Deletion removes it from the control plane, the CSI secret and Kubernetes.
    h.clusters()
        .delete("sb", &DeleteParams::default())
        .await
        .expect("delete");
    h.until("the StorageCluster to go", async |h| {
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
    h.until("the cluster's uuid", async |h| uuid_of(h, "sb").await)
        .await;
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
async fn an_unready_control_plane_holds_creation_and_says_why() {
    let h = harness("cluster-unready", "unready:for=3s").await;
    h.create("sb").await;
    let message = h
        .until("the hold message", async |h| {
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
    h.until("the cluster's uuid", async |h| uuid_of(h, "sb").await)
        .await;
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
    let uuid: simplyblock_controlplane::Uuid = h
        .until("the cluster's uuid", async |h| uuid_of(h, "sb").await)
        .await
        .parse()
        .expect("uuid");
    h.until("the creation tasks done", async |h| {
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
    h.until("the add in the task window", async |h| {
        n += 1;
        h.nudge("sb", n).await;
        let c = h.clusters().get("sb").await.ok()?;
        c.status?.tasks.iter().any(|t| t.id == task).then_some(())
    })
    .await;
    h.clock(1000.0).await;
    let last = h
        .until("the add's final state", async |h| {
            let t = h.cp.get_task(uuid, task.parse().ok()?).await.ok()?;
            (t.status == simplyblock_controlplane::TaskStatus::Done).then_some(t)
        })
        .await;
    assert_eq!(last.function_result, "max retry reached");
    let verdicts = h
        .until("the add's verdict", async |h| {
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

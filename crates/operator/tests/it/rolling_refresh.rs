//! RollingRestart with `refreshSNodeAPI` against a real API server and sbsim: each node's
//! storage-node pod is replaced between its shutdown and its restart, exactly once, also
//! when the controller is replaced in the middle of the pod steps.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_api::StorageClusterOps;
use simplyblock_api::common::OpsPhase;
use simplyblock_operator::cluster::ops::POD_CLUSTER_LABEL;

use crate::support::{Harness, harness};

impl Harness {
    async fn create_refresh(&self, name: &str) {
        let op: StorageClusterOps = serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageClusterOps",
            "metadata": {"name": name},
            "spec": {"clusterRef": "sb", "action": "RollingRestart",
                     "rollingRestart": {"refreshSNodeAPI": true}}
        }))
        .expect("op");
        self.ops()
            .create(&PostParams::default(), &op)
            .await
            .expect("created");
    }
}

/// Stands in for the storage-node DaemonSet and the kubelet: one Ready pod of cluster `sb`
/// per worker, and a replacement on the same worker for every pod deleted, Ready shortly
/// after. Records which pods were deleted and which were created as replacements.
#[derive(Clone, Default)]
struct Workload {
    deleted: Arc<Mutex<BTreeSet<String>>>,
    replacements: Arc<Mutex<BTreeSet<String>>>,
}

fn storage_node_pod(name: &str, worker: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {POD_CLUSTER_LABEL: "sb"}},
        "spec": {"nodeName": worker,
                 "containers": [{"name": "storage-node-api", "image": "simplyblock/snode:test"}]}
    }))
    .expect("pod")
}

async fn mark_ready(pods: &Api<Pod>, name: &str) {
    let status = json!({"status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}]}});
    // A pod deleted before it got Ready is gone: nothing to mark.
    match pods
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("marking {name} Ready: {e}"),
    }
}

impl Workload {
    /// Creates the original pods, Ready, and starts replacing deleted ones.
    async fn start(h: &Harness, workers: &[String]) -> (Self, Vec<String>) {
        let pods: Api<Pod> = Api::namespaced(h.kube.clone(), &h.ns);
        let mut originals = Vec::new();
        for worker in workers {
            let name = format!("snode-{worker}");
            pods.create(&PostParams::default(), &storage_node_pod(&name, worker))
                .await
                .expect("pod");
            mark_ready(&pods, &name).await;
            originals.push(name);
        }
        let w = Workload::default();
        let me = w.clone();
        tokio::spawn(async move {
            let force = DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            };
            let mut generation = 0;
            loop {
                let listed = pods
                    .list(&ListParams::default().labels(&format!("{POD_CLUSTER_LABEL}=sb")))
                    .await;
                for pod in listed.map(|l| l.items).unwrap_or_default() {
                    if pod.metadata.deletion_timestamp.is_none() {
                        continue;
                    }
                    let name = pod.name_any();
                    let worker = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.node_name.clone())
                        .unwrap_or_default();
                    if !me.deleted.lock().expect("lock").insert(name.clone()) {
                        continue;
                    }
                    let _ = pods.delete(&name, &force).await;
                    generation += 1;
                    let next = format!("snode-{worker}-{generation}");
                    pods.create(&PostParams::default(), &storage_node_pod(&next, &worker))
                        .await
                        .expect("replacement");
                    me.replacements.lock().expect("lock").insert(next.clone());
                    let ready = pods.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(700)).await;
                        mark_ready(&ready, &next).await;
                    });
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        (w, originals)
    }
}

/// Every distinct (step, message) an operation showed, in order; `done` ends when the
/// recorder has seen it leave Running.
struct Recorder {
    seen: Arc<Mutex<Vec<(String, String)>>>,
    done: tokio::task::JoinHandle<()>,
}

/// Records every (step, message) the operation's status goes through, from a watch that is
/// established when this returns: start it before the operation is created.
async fn record_steps(h: &Harness, name: &str) -> Recorder {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let out = seen.clone();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    // A watch, not a poll: it delivers every write of the status in order, so a step that
    // lasts a moment is seen too.
    let mut events = Box::pin(watcher(h.ops(), config).default_backoff());
    let (established, listening) = tokio::sync::oneshot::channel();
    let done = tokio::spawn(async move {
        let mut established = Some(established);
        while let Some(event) = events.next().await {
            let op = match event {
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = established.take() {
                        let _ = tx.send(());
                    }
                    continue;
                }
                Ok(watcher::Event::Apply(op) | watcher::Event::InitApply(op)) => op,
                _ => continue,
            };
            let Some(s) = op.status else {
                continue;
            };
            let entry = (
                s.step.state.clone().unwrap_or_default(),
                s.message.clone().unwrap_or_default(),
            );
            let mut seen = seen.lock().expect("lock");
            if seen.last() != Some(&entry) {
                seen.push(entry);
            }
            if s.phase.is_terminal() {
                return;
            }
        }
    });
    listening.await.expect("the watch is established");
    Recorder { seen: out, done }
}

/// The harness with an active cluster and the stand-in workload on every node's worker.
async fn refresh_harness(ns: &str) -> (Harness, Workload, Vec<String>) {
    let h = harness(ns, "", (1, 1)).await;
    h.activated().await;
    let workers: Vec<String> =
        h.cp.list_storage_nodes(h.uuid)
            .await
            .expect("nodes")
            .into_iter()
            .map(|n| n.hostname)
            .collect();
    assert_eq!(workers.len(), 3, "{workers:?}");
    let (w, originals) = Workload::start(&h, &workers).await;
    (h, w, originals)
}

/// The end state both tests expect: succeeded, every node through both pod steps and in
/// order, each original pod deleted once and no replacement deleted, one shutdown and one
/// restart per node.
async fn assert_refreshed(
    h: &Harness,
    name: &str,
    w: &Workload,
    originals: &[String],
    recorder: Recorder,
) {
    let op = h.phase_is(name, OpsPhase::Succeeded).await;
    let rr = op
        .status
        .and_then(|s| s.rolling_restart)
        .expect("rollingRestart");
    assert_eq!(rr.node_index, 3);
    let listed: Vec<String> =
        h.cp.list_storage_nodes(h.uuid)
            .await
            .expect("nodes")
            .iter()
            .map(|n| n.id.to_string())
            .collect();
    assert_eq!(rr.nodes, listed);

    recorder
        .done
        .await
        .expect("the recorder saw the terminal phase");
    let seen = recorder.seen.lock().expect("lock").clone();
    let mut order: Vec<String> = Vec::new();
    let mut steps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (step, message) in &seen {
        let Some(rest) = message.strip_prefix("Node ") else {
            continue;
        };
        let Some((_, rest)) = rest.split_once(" (") else {
            continue;
        };
        let Some((node, _)) = rest.split_once("): ") else {
            continue;
        };
        if order.last().map(String::as_str) != Some(node) {
            order.push(node.to_string());
        }
        steps
            .entry(node.to_string())
            .or_default()
            .insert(step.clone());
    }
    assert_eq!(order, rr.nodes, "nodes in status order: {seen:#?}");
    for node in &rr.nodes {
        let node_steps = &steps[node];
        for step in ["RefreshingPod", "AwaitingPod", "RestartingNode"] {
            assert!(
                node_steps.contains(step),
                "{node} skipped {step}: {seen:#?}"
            );
        }
        let base = format!("/api/v2/clusters/{}/storage-nodes/{node}", h.uuid);
        assert_eq!(
            h.calls("POST", &format!("{base}/shutdown")).await,
            1,
            "{node}"
        );
        assert_eq!(
            h.calls("POST", &format!("{base}/restart")).await,
            1,
            "{node}"
        );
    }

    let deleted = w.deleted.lock().expect("lock").clone();
    let replacements = w.replacements.lock().expect("lock").clone();
    let expected: BTreeSet<String> = originals.iter().cloned().collect();
    assert_eq!(
        deleted, expected,
        "each original pod deleted, no replacement deleted (replacements {replacements:?})"
    );
    assert_eq!(replacements.len(), 3, "{replacements:?}");
}

#[tokio::test]
async fn rolling_refresh_replaces_each_pod_once_between_shutdown_and_restart() {
    let (h, w, originals) = refresh_harness("scops-refresh").await;
    let _c = h.start();
    let recorder = record_steps(&h, "sb-refresh").await;
    h.create_refresh("sb-refresh").await;
    assert_refreshed(&h, "sb-refresh", &w, &originals, recorder).await;
}

#[tokio::test]
async fn a_controller_replaced_during_the_pod_steps_deletes_and_calls_once() {
    let (h, w, originals) = refresh_harness("scops-refresh-restart").await;
    let mut controller = h.start();
    let recorder = record_steps(&h, "sb-refresh").await;
    h.create_refresh("sb-refresh").await;
    // Replace the controller every time the operation reaches a pod step, so each node
    // has its pod steps resumed by a fresh controller.
    let mut replaced = 0;
    let start = Instant::now();
    let mut last = String::new();
    loop {
        let op = h.ops().get("sb-refresh").await.expect("op");
        let status = op.status.unwrap_or_default();
        if status.phase.is_terminal() {
            break;
        }
        let at = format!(
            "{}|{}",
            status.step.state.clone().unwrap_or_default(),
            status.message.clone().unwrap_or_default()
        );
        let pod_step = matches!(
            status.step.state.as_deref(),
            Some("RefreshingPod" | "AwaitingPod")
        );
        if pod_step && at != last {
            controller.abort();
            let _ = controller.await;
            replaced += 1;
            controller = h.start();
            last = at;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "timed out: {:#?}",
            recorder.seen.lock().expect("lock")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        replaced >= 3,
        "the controller was replaced {replaced} times"
    );
    assert_refreshed(&h, "sb-refresh", &w, &originals, recorder).await;
}

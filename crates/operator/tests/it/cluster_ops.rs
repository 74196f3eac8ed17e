//! The StorageClusterOps controller against a real API server and sbsim: activation with
//! exactly one control-plane call (also when its answer is lost), queueing in creation
//! order, abort honoured and refused, the DELETE guard answering a real delete, the
//! cluster's retention of finished operations and its recent history, and the metrics
//! served over HTTP.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use simplyblock_api::common::OpsPhase;
use simplyblock_api::{StorageCluster, StorageClusterOps};
use simplyblock_controlplane::{Method, NodeStatus, StorageNodeAdd};
use simplyblock_operator::runtime::context::Context;

use crate::support::{Harness, harness, until};

impl Harness {
    /// The controller with every step deadline multiplied by `scale`.
    async fn start_scaled(&self, scale: f64) -> tokio::task::JoinHandle<()> {
        let ctx = Context::new(
            crate::support::operator_kube().await,
            self.cp.clone(),
            self.sim.endpoint.clone(),
            self.ns.clone(),
        )
        .watching(&self.ns)
        .with_step_deadline_scale(scale);
        let ctx = Context {
            metrics: self.ctx.metrics.clone(),
            ..ctx
        };
        tokio::spawn(simplyblock_operator::cluster::ops::run(Arc::new(ctx)))
    }

    /// The StorageCluster controller too: its steady state keeps the history.
    fn start_cluster_controller(&self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(simplyblock_operator::cluster::controller::run(
            self.ctx.clone(),
        ))
    }

    async fn create_op(&self, name: &str, action: &str) {
        self.create_op_with(name, action, json!({})).await;
    }

    /// An operation whose spec also carries `extra` (parameters, `abort`).
    async fn create_op_with(&self, name: &str, action: &str, extra: Value) {
        let mut spec = json!({"clusterRef": "sb", "action": action});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        let op: StorageClusterOps = serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageClusterOps",
            "metadata": {"name": name},
            "spec": spec
        }))
        .expect("op");
        self.ops()
            .create(&PostParams::default(), &op)
            .await
            .expect("created");
    }

    async fn lock(&self) -> Option<String> {
        Api::<StorageCluster>::namespaced(self.kube.clone(), &self.ns)
            .get("sb")
            .await
            .expect("cluster")
            .status?
            .active_ops_ref
    }

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

    async fn abort(&self, name: &str) {
        self.ops()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"abort": true}})),
            )
            .await
            .expect("abort");
    }

    /// How often `reason` was raised on `object` once it was at least `at_least` times:
    /// the recorder folds repeats into one Event with a series count.
    async fn occurrences(&self, object: &str, reason: &str, at_least: i32) -> i32 {
        crate::support::occurrences_reaching(&self.kube, &self.ns, object, reason, at_least).await
    }

    fn activate_path(&self) -> String {
        format!("/api/v2/clusters/{}/activate", self.uuid)
    }
}

#[tokio::test]
async fn activate_succeeds_with_exactly_one_call() {
    let h = harness("scops-activate", "", (1, 1)).await;
    let _c = h.start();
    h.create_op("sb-activate", "Activate").await;
    let op = h.phase_is("sb-activate", OpsPhase::Succeeded).await;
    let status = op.status.expect("status");
    assert!(status.started_at.is_some() && status.completed_at.is_some());
    assert_eq!(status.step.state.as_deref(), Some("Awaiting"));
    assert_eq!(h.calls("POST", &h.activate_path()).await, 1);
    assert_eq!(
        h.cp.get_cluster(h.uuid).await.expect("cluster").status,
        simplyblock_controlplane::ClusterStatus::Active
    );
    until("the lock released", async || {
        h.lock().await.is_none().then_some(())
    })
    .await;
    assert_eq!(h.events("sb-activate", "OperationStarted").await.len(), 1);
    assert_eq!(h.events("sb-activate", "OperationSucceeded").await.len(), 1);
    assert!(
        op.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&simplyblock_operator::cluster::ops::FINALIZER.to_string())
    );
    let total = h.ctx.metrics.sample(
        "simplyblock_storagecluster_operations_total",
        &[
            ("cluster", "sb"),
            ("action", "Activate"),
            ("result", "succeeded"),
        ],
    );
    assert_eq!(total, Some(1.0));
    assert!(
        h.ctx
            .metrics
            .render()
            .contains("# TYPE simplyblock_storagecluster_operations counter")
    );
    // A second Activate on an active cluster skips the gate and the call.
    h.create_op("sb-activate-again", "Activate").await;
    h.phase_is("sb-activate-again", OpsPhase::Succeeded).await;
    assert_eq!(h.calls("POST", &h.activate_path()).await, 1);
}

#[tokio::test]
async fn a_lost_activate_answer_is_not_repeated() {
    // sbsim commits the activate and drops the connection: the controller sees an error,
    // and its next look finds the cluster activating rather than calling again.
    let h = harness(
        "scops-lost",
        "drop:method=POST,path=/api/v2/clusters/*/activate,count=1",
        (1, 1),
    )
    .await;
    let _c = h.start();
    h.create_op("sb-activate", "Activate").await;
    h.phase_is("sb-activate", OpsPhase::Succeeded).await;
    assert_eq!(h.calls("POST", &h.activate_path()).await, 1);
}

#[tokio::test]
async fn an_activate_answered_500_after_it_committed_is_not_repeated() {
    // sbsim activates the cluster and then answers 500: the controller records the
    // failure, and its next look finds the cluster activating rather than calling again.
    let h = harness(
        "scops-commit-500",
        "commiterror:method=POST,path=/api/v2/clusters/*/activate,count=1",
        (1, 1),
    )
    .await;
    let _c = h.start();
    h.create_op("sb-activate", "Activate").await;
    let op = h.phase_is("sb-activate", OpsPhase::Succeeded).await;
    assert_eq!(h.answers("POST", &h.activate_path()).await, [500]);
    assert_eq!(
        op.status.and_then(|s| s.step.state).as_deref(),
        Some("Awaiting")
    );
    assert_eq!(
        h.cp.get_cluster(h.uuid).await.expect("cluster").status,
        simplyblock_controlplane::ClusterStatus::Active
    );
}

#[tokio::test]
async fn conflicts_on_the_calls_are_retried_until_one_goes_through() {
    // A 409 answers before the control plane changes anything: the call is repeated, and
    // exactly one of each goes through.
    let h = harness(
        "scops-conflicts",
        "conflict:method=POST,path=/api/v2/clusters/*/shutdown,count=2;conflict:method=POST,path=/api/v2/clusters/*/start,count=1",
        (1, 1),
    )
    .await;
    h.activated().await;
    let _c = h.start();
    h.create_op("sb-restart", "Restart").await;
    let op = h.phase_is("sb-restart", OpsPhase::Succeeded).await;
    let path = |verb: &str| format!("/api/v2/clusters/{}/{verb}", h.uuid);
    assert_eq!(h.answers("POST", &path("shutdown")).await, [409, 409, 202]);
    assert_eq!(h.answers("POST", &path("start")).await, [409, 202]);
    assert_eq!(
        op.status.and_then(|s| s.step.state).as_deref(),
        Some("Starting")
    );
    until("the lock released", async || {
        h.lock().await.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_controller_restarted_between_steps_calls_once() {
    let h = harness("scops-restart", "", (1, 1)).await;
    // Freeze sim time so activation stays in flight while the controller is replaced.
    h.clock(0.0).await;
    let first = h.start();
    h.create_op("sb-activate", "Activate").await;
    until("the activate call", async || {
        (h.calls("POST", &h.activate_path()).await == 1).then_some(())
    })
    .await;
    first.abort();
    let _ = first.await;
    let _second = h.start();
    // Two passes of the new controller while the control plane's clock stands still:
    // the activation cannot have finished, and still no second call.
    crate::support::passes(&h.ctx.metrics, "storageclusterops", &h.ns, "sb-activate", 2).await;
    assert_eq!(h.calls("POST", &h.activate_path()).await, 1);
    h.clock(1000.0).await;
    h.phase_is("sb-activate", OpsPhase::Succeeded).await;
    assert_eq!(h.calls("POST", &h.activate_path()).await, 1);
}

#[tokio::test]
async fn two_operations_run_one_after_the_other_in_creation_order() {
    let h = harness("scops-queue", "", (1, 1)).await;
    // Both exist before the controller looks. Creation times have a second's resolution,
    // so the second is created in a later second than the first: creation order, not the
    // name (which puts the shutdown first), decides.
    h.create_op("z-activate", "Activate").await;
    let first = h.ops().get("z-activate").await.expect("z-activate");
    let created = first.metadata.creation_timestamp.expect("created").0;
    until("the next second", async || {
        (jiff::Timestamp::now().as_second() > created.as_second()).then_some(())
    })
    .await;
    h.create_op("a-shutdown", "Shutdown").await;
    let _c = h.start();
    let activate = h.phase_is("z-activate", OpsPhase::Succeeded).await;
    let shutdown = h.phase_is("a-shutdown", OpsPhase::Succeeded).await;
    let activated = activate
        .status
        .and_then(|s| s.completed_at)
        .expect("completed");
    let shut = shutdown.status.and_then(|s| s.started_at).expect("started");
    assert!(shut.0 >= activated.0, "{shut:?} before {activated:?}");
    let queued = h.events("a-shutdown", "OperationQueued").await;
    assert!(!queued.is_empty(), "the shutdown waited its turn");
    assert!(queued[0].contains("z-activate"), "{queued:?}");
    assert_eq!(h.calls("POST", &h.activate_path()).await, 1);
    assert_eq!(
        h.calls("POST", &format!("/api/v2/clusters/{}/shutdown", h.uuid))
            .await,
        1
    );
    until("the lock released", async || {
        h.lock().await.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn abort_on_requesting_ends_aborted_without_a_call() {
    // A 2+1 stripe needs four online nodes; there are three, so Activate holds in
    // Requesting (abortable) behind the stripe gate.
    let h = harness("scops-abort", "", (2, 1)).await;
    let _c = h.start();
    h.create_op("sb-activate", "Activate").await;
    let held = until("the stripe gate", async || {
        let op = h.ops().get("sb-activate").await.ok()?;
        let m = op.status?.message?;
        m.starts_with("StripeNodesNotReady").then_some(m)
    })
    .await;
    assert!(held.contains("at least 4"), "{held}");
    assert_eq!(
        h.events("sb-activate", "StripeNodesNotReady").await.len(),
        1
    );
    h.abort("sb-activate").await;
    let op = h.phase_is("sb-activate", OpsPhase::Aborted).await;
    assert_eq!(
        op.status.and_then(|s| s.step.state).as_deref(),
        Some("Requesting")
    );
    assert_eq!(h.calls("POST", &h.activate_path()).await, 0);
    until("the lock released", async || {
        h.lock().await.is_none().then_some(())
    })
    .await;
    assert_eq!(h.events("sb-activate", "OperationAborted").await.len(), 1);
}

#[tokio::test]
async fn abort_and_delete_are_refused_while_a_shutdown_awaits() {
    let h = harness("scops-awaiting", "", (1, 1)).await;
    // Frozen time: the shutdown starts (nodes in_shutdown) and never finishes.
    h.clock(0.0).await;
    let _c = h.start();
    h.create_op("sb-shutdown", "Shutdown").await;
    h.step_is("sb-shutdown", "Awaiting").await;

    h.abort("sb-shutdown").await;
    let refused = until("the abort refusal", async || {
        let op = h.ops().get("sb-shutdown").await.ok()?;
        let m = op.status?.message?;
        m.starts_with("spec.abort is refused").then_some(m)
    })
    .await;
    assert!(refused.contains("Awaiting"), "{refused}");
    assert_eq!(
        h.ops()
            .get("sb-shutdown")
            .await
            .expect("op")
            .status
            .expect("s")
            .phase,
        OpsPhase::Running
    );

    match h
        .ops()
        .delete("sb-shutdown", &DeleteParams::default())
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(s.message.contains("step Awaiting"), "{}", s.message);
            assert!(s.message.contains("spec.abort"), "{}", s.message);
        }
        other => panic!("the delete went through: {other:?}"),
    }
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    assert!(h.ops().delete("sb-shutdown", &force).await.is_err());

    // Time moves again: the shutdown ends, and the delete is allowed.
    h.clock(1000.0).await;
    h.phase_is("sb-shutdown", OpsPhase::Succeeded).await;
    h.ops()
        .delete("sb-shutdown", &DeleteParams::default())
        .await
        .expect("deleted once terminal");
    until("the op to go", async || {
        h.ops()
            .get_opt("sb-shutdown")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(
        h.calls("POST", &format!("/api/v2/clusters/{}/shutdown", h.uuid))
            .await,
        1
    );
}

#[tokio::test]
async fn restart_shuts_down_then_starts_with_one_call_each() {
    let h = harness("scops-cluster-restart", "", (1, 1)).await;
    h.activated().await;
    let _c = h.start();
    h.create_op("sb-restart", "Restart").await;
    let op = h.phase_is("sb-restart", OpsPhase::Succeeded).await;
    assert_eq!(
        op.status.and_then(|s| s.step.state).as_deref(),
        Some("Starting")
    );
    let path = |verb: &str| format!("/api/v2/clusters/{}/{verb}", h.uuid);
    assert_eq!(h.calls("POST", &path("shutdown")).await, 1);
    assert_eq!(h.calls("POST", &path("start")).await, 1);
}

#[tokio::test]
async fn rolling_restart_restarts_every_node_once_in_order() {
    let h = harness("scops-rolling", "", (1, 1)).await;
    h.activated().await;
    let _c = h.start();
    h.create_op("sb-rolling", "RollingRestart").await;
    let op = h.phase_is("sb-rolling", OpsPhase::Succeeded).await;
    let rr = op
        .status
        .and_then(|s| s.rolling_restart)
        .expect("rollingRestart");
    let listed: Vec<String> =
        h.cp.list_storage_nodes(h.uuid)
            .await
            .expect("nodes")
            .iter()
            .map(|n| n.id.to_string())
            .collect();
    assert_eq!(rr.nodes, listed);
    assert_eq!(rr.node_index, 3);
    for node in &rr.nodes {
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
    assert_eq!(h.occurrences("sb-rolling", "NodeRestarted", 3).await, 3);
    let sample = |name: &str, labels: &[(&str, &str)]| h.ctx.metrics.sample(name, labels);
    let sb = [("cluster", "sb")];
    assert_eq!(
        sample("simplyblock_storagecluster_rolling_restart_node_count", &sb),
        Some(3.0)
    );
    assert_eq!(
        sample(
            "simplyblock_storagecluster_rolling_restart_node_index_count",
            &sb
        ),
        Some(3.0)
    );
    let held = sample(
        "simplyblock_storagecluster_rolling_restart_peer_hold_seconds_count",
        &sb,
    );
    assert!(held.is_some_and(|n| n >= 3.0), "{held:?}");
    let rebalanced = sample(
        "simplyblock_storagecluster_operation_step_duration_seconds_count",
        &[
            ("cluster", "sb"),
            ("action", "RollingRestart"),
            ("step", "Rebalancing"),
        ],
    );
    assert!(rebalanced.is_some_and(|n| n >= 3.0), "{rebalanced:?}");
    let text = h.ctx.metrics.render();
    for typed in [
        "# TYPE simplyblock_storagecluster_rolling_restart_node_index_count gauge",
        "# TYPE simplyblock_storagecluster_rolling_restart_node_count gauge",
        "# TYPE simplyblock_storagecluster_rolling_restart_peer_hold_seconds histogram",
        "# TYPE simplyblock_storagecluster_operation_step_duration_seconds histogram",
        "# TYPE simplyblock_storagecluster_operation_lock_wait_seconds histogram",
    ] {
        assert!(text.contains(typed), "{typed} in {text}");
    }
}

/// `status.recentOperations` of the harness's cluster as (name, phase) pairs.
async fn recent(h: &Harness) -> Vec<(String, OpsPhase)> {
    h.clusters()
        .get("sb")
        .await
        .expect("cluster")
        .status
        .map(|s| s.recent_operations)
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.name, r.phase))
        .collect()
}

fn named(list: &[(&str, OpsPhase)]) -> Vec<(String, OpsPhase)> {
    list.iter().map(|(n, p)| (n.to_string(), *p)).collect()
}

async fn gone(h: &Harness, name: &str) {
    until(&format!("{name} deleted"), async || {
        h.ops().get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

async fn set_history_limit(h: &Harness, limit: i32) {
    h.clusters()
        .patch(
            "sb",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"opsHistoryLimit": limit}})),
        )
        .await
        .expect("opsHistoryLimit");
}

#[tokio::test]
async fn finished_operations_beyond_the_limit_are_deleted_oldest_first() {
    use OpsPhase::*;
    let h = harness("scops-history", "", (1, 1)).await;
    set_history_limit(&h, 2).await;
    let _ops = h.start();
    let _clusters = h.start_cluster_controller();
    // One after the other, so creation and completion order agree with the names.
    let unknown_task = json!({"cancelTask": {"taskID": "00000000-0000-0000-0000-0000000000aa"}});
    h.create_op_with("h-1", "CancelTask", unknown_task.clone())
        .await;
    h.phase_is("h-1", Succeeded).await;
    h.create_op_with(
        "h-2",
        "CancelTask",
        json!({"cancelTask": {"taskID": "not-a-uuid"}}),
    )
    .await;
    h.phase_is("h-2", Failed).await;
    let mut aborted = unknown_task.clone();
    aborted["abort"] = json!(true);
    h.create_op_with("h-3", "CancelTask", aborted).await;
    h.phase_is("h-3", Aborted).await;
    h.create_op_with("h-4", "CancelTask", unknown_task.clone())
        .await;
    h.phase_is("h-4", Succeeded).await;

    gone(&h, "h-1").await;
    gone(&h, "h-2").await;
    for kept in ["h-3", "h-4"] {
        let op = h.ops().get(kept).await.expect(kept);
        assert!(op.metadata.deletion_timestamp.is_none(), "{kept} is kept");
    }
    // The history outlives the objects.
    let expected = named(&[
        ("h-4", Succeeded),
        ("h-3", Aborted),
        ("h-2", Failed),
        ("h-1", Succeeded),
    ]);
    until("the history of four", async || {
        (recent(&h).await == expected).then_some(())
    })
    .await;
    let records = h
        .clusters()
        .get("sb")
        .await
        .expect("cluster")
        .status
        .expect("status")
        .recent_operations;
    assert!(
        records.iter().all(|r| r.completed_at.is_some()),
        "{records:?}"
    );
    assert!(
        records
            .iter()
            .all(|r| r.action == simplyblock_api::storage_cluster_ops::ClusterAction::CancelTask),
        "{records:?}"
    );
    let failed = records.iter().find(|r| r.name == "h-2").expect("h-2");
    assert!(
        failed
            .message
            .as_deref()
            .is_some_and(|m| m.contains("not a control-plane task id")),
        "{failed:?}"
    );

    // A running operation (frozen time holds the shutdown in Awaiting) and one queued
    // behind it survive a limit of 0, which deletes every finished one.
    h.clock(0.0).await;
    h.create_op("h-5", "Shutdown").await;
    h.step_is("h-5", "Awaiting").await;
    h.create_op_with("h-6", "CancelTask", unknown_task).await;
    h.phase_is("h-6", Pending).await;
    set_history_limit(&h, 0).await;
    gone(&h, "h-3").await;
    gone(&h, "h-4").await;
    for name in ["h-5", "h-6"] {
        let op = h.ops().get(name).await.expect(name);
        assert!(
            op.metadata.deletion_timestamp.is_none(),
            "{name} is not deleted"
        );
        assert!(!op.status.expect("status").phase.is_terminal(), "{name}");
    }

    // Both finish and go; the history keeps the newest five.
    h.clock(1000.0).await;
    gone(&h, "h-5").await;
    gone(&h, "h-6").await;
    let expected = named(&[
        ("h-6", Succeeded),
        ("h-5", Succeeded),
        ("h-4", Succeeded),
        ("h-3", Aborted),
        ("h-2", Failed),
    ]);
    until("the history of the newest five", async || {
        (recent(&h).await == expected).then_some(())
    })
    .await;
}

/// A GET over plain HTTP/1.1: the response's head (status line and headers) and body.
async fn http_get(addr: SocketAddr, path: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("response");
    let text = String::from_utf8(raw).expect("utf-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    (head.to_string(), body.to_string())
}

/// The value of the sample `line_start` (name and labels) in a scrape, 0 when absent.
fn scraped(body: &str, line_start: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn the_operation_metrics_are_served_over_http() {
    let h = harness("scops-metrics", "", (1, 1)).await;
    let server = simplyblock_operator::metrics_server::MetricsServer::bind(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        h.ctx.metrics.clone(),
    )
    .await
    .expect("bind");
    let addr = server.local_addr().expect("addr");
    let _served = tokio::spawn(server.run());

    let (head, body) = http_get(addr, "/healthz").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, "ok");

    let series = "simplyblock_storagecluster_operations_total{cluster=\"sb\",action=\"CancelTask\",result=\"failed\"}";
    let (_, before) = http_get(addr, "/metrics").await;
    let _c = h.start();
    h.create_op_with(
        "sb-cancel",
        "CancelTask",
        json!({"cancelTask": {"taskID": "not-a-uuid"}}),
    )
    .await;
    h.phase_is("sb-cancel", OpsPhase::Failed).await;
    // The count follows the terminal status write and its event.
    let after = until("the failed CancelTask counted", async || {
        let (_, after) = http_get(addr, "/metrics").await;
        (scraped(&after, series) >= scraped(&before, series) + 1.0).then_some(after)
    })
    .await;
    let (head, _) = http_get(addr, "/metrics").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{head}"
    );
    assert!(
        after.contains("# TYPE simplyblock_storagecluster_operations counter"),
        "{after}"
    );
    // The controller's own reconciles are counted too.
    assert!(
        scraped(
            &after,
            "simplyblock_reconcile_total{controller=\"storageclusterops\",result=\"success\"}"
        ) >= 1.0,
        "{after}"
    );
}

#[tokio::test]
async fn a_control_plane_slower_than_the_step_deadline_fails_the_operation() {
    // Deadlines at 1/200: Requesting has 600ms, which a stored deadline rounds up to the
    // next whole second, so up to 1.6s; every read of the cluster takes 2.5s. (With 1.5s
    // a look could come in time and the operation succeed: the test's flake.)
    let h = harness(
        "scops-deadline",
        "latency:method=GET,path=/api/v2/clusters/*/,ms=2500",
        (1, 1),
    )
    .await;
    let _c = h.start_scaled(0.005).await;
    h.create_op("sb-activate", "Activate").await;
    let op = h.phase_is("sb-activate", OpsPhase::Failed).await;
    let status = op.status.expect("status");
    assert_eq!(status.step.state.as_deref(), Some("Requesting"));
    let message = status.message.unwrap_or_default();
    assert!(
        message.starts_with("step Requesting exceeded its deadline"),
        "{message}"
    );
    let exceeded = h.events("sb-activate", "StepDeadlineExceeded").await;
    assert_eq!(exceeded.len(), 1, "{exceeded:?}");
    assert_eq!(h.events("sb-activate", "OperationFailed").await.len(), 1);
    until("the lock released", async || {
        h.lock().await.is_none().then_some(())
    })
    .await;
    // The late look found the step out of time before it called.
    assert_eq!(h.calls("POST", &h.activate_path()).await, 0);
    let counted = h.ctx.metrics.sample(
        "simplyblock_storagecluster_operation_step_deadline_exceeded_total",
        &[
            ("cluster", "sb"),
            ("action", "Activate"),
            ("step", "Requesting"),
        ],
    );
    assert_eq!(counted, Some(1.0));
}

/// Replaces the controller every time the operation shows a new (step, message) — after a
/// write-ahead record, after a call, while it waits — until the operation ends. A poll sees
/// a state that lasts (a wait on the control plane); one that a pass writes and the next
/// replaces within milliseconds it may miss, so the tests count on the lasting ones only.
/// The kill-point crash test replaces the operator after every call, deterministically.
async fn replacing_the_controller(h: &Harness, name: &str) -> (StorageClusterOps, usize) {
    let mut controller = h.start();
    let mut replaced = 0;
    let mut last = String::new();
    let start = Instant::now();
    loop {
        let op = h.ops().get(name).await.expect("op");
        let status = op.status.clone().unwrap_or_default();
        if status.phase.is_terminal() {
            controller.abort();
            return (op, replaced);
        }
        let at = format!(
            "{}|{}",
            status.step.state.clone().unwrap_or_default(),
            status.message.clone().unwrap_or_default()
        );
        if status.phase == OpsPhase::Running && at != last {
            controller.abort();
            let _ = controller.await;
            replaced += 1;
            controller = h.start();
            last = at;
        }
        assert!(
            start.elapsed() < crate::support::PATIENCE,
            "timed out at {last}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Shuts the harness's active cluster down through the control plane itself.
async fn shut_down(h: &Harness) {
    h.cp.shutdown_cluster(h.uuid).await.expect("shutdown");
    until("every node offline", async || {
        let nodes = h.cp.list_storage_nodes(h.uuid).await.ok()?;
        nodes
            .iter()
            .all(|n| n.status == NodeStatus::Offline)
            .then_some(())
    })
    .await;
}

fn cluster_path(h: &Harness, verb: &str) -> String {
    format!("/api/v2/clusters/{}/{verb}", h.uuid)
}

async fn cluster_status(h: &Harness) -> simplyblock_controlplane::ClusterStatus {
    h.cp.get_cluster(h.uuid).await.expect("cluster").status
}

#[tokio::test]
async fn start_brings_a_shut_down_cluster_back_with_one_call() {
    let h = harness("scops-start", "", (1, 1)).await;
    h.activated().await;
    shut_down(&h).await;
    let _c = h.start();
    h.create_op("sb-start", "Start").await;
    let op = h.phase_is("sb-start", OpsPhase::Succeeded).await;
    assert_eq!(
        op.status.and_then(|s| s.step.state).as_deref(),
        Some("Awaiting")
    );
    assert_eq!(h.answers("POST", &cluster_path(&h, "start")).await, [202]);
    assert_eq!(
        cluster_status(&h).await,
        simplyblock_controlplane::ClusterStatus::Active
    );
    let nodes = h.cp.list_storage_nodes(h.uuid).await.expect("nodes");
    assert!(
        nodes.iter().all(|n| n.status == NodeStatus::Online),
        "{nodes:?}"
    );
}

#[tokio::test]
async fn expand_calls_once_although_the_cluster_reads_active_before_and_after() {
    let h = harness("scops-expand", "", (1, 1)).await;
    h.activated().await;
    let _c = h.start();
    h.create_op("sb-expand", "Expand").await;
    let op = h.phase_is("sb-expand", OpsPhase::Succeeded).await;
    assert_eq!(
        op.status.and_then(|s| s.step.state).as_deref(),
        Some("Awaiting")
    );
    // Every call of the operation came before its terminal write, and a finished
    // operation makes none.
    assert_eq!(h.answers("POST", &cluster_path(&h, "expand")).await, [202]);
    assert_eq!(
        cluster_status(&h).await,
        simplyblock_controlplane::ClusterStatus::Active
    );
}

#[tokio::test]
async fn an_expand_call_that_failed_is_not_repeated() {
    // A 500 may hide an expansion that happened: the operation fails and says so.
    let h = harness(
        "scops-expand-500",
        "commiterror:method=POST,path=/api/v2/clusters/*/expand,count=1",
        (1, 1),
    )
    .await;
    h.activated().await;
    let _c = h.start();
    h.create_op("sb-expand", "Expand").await;
    let op = h.phase_is("sb-expand", OpsPhase::Failed).await;
    let message = op.status.and_then(|s| s.message).unwrap_or_default();
    assert!(message.contains("it is not repeated"), "{message}");
    assert_eq!(h.answers("POST", &cluster_path(&h, "expand")).await, [500]);
    until("the lock released", async || {
        h.lock().await.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_expand_whose_answer_was_lost_is_not_repeated() {
    // The expansion commits and the connection closes before its answer: the operation
    // cannot know it happened, fails, and says so; there is no second call.
    let h = harness(
        "scops-expand-drop",
        "drop:method=POST,path=/api/v2/clusters/*/expand,count=1",
        (1, 1),
    )
    .await;
    h.activated().await;
    let _c = h.start();
    h.create_op("sb-expand", "Expand").await;
    let op = h.phase_is("sb-expand", OpsPhase::Failed).await;
    let message = op.status.and_then(|s| s.message).unwrap_or_default();
    assert!(message.contains("it is not repeated"), "{message}");
    assert_eq!(h.answers("POST", &cluster_path(&h, "expand")).await, [0]);
}

#[tokio::test]
async fn a_shutdown_survives_its_controller_replaced_whenever_it_moves() {
    let h = harness("scops-crash-shutdown", "", (1, 1)).await;
    h.activated().await;
    h.clock(20.0).await;
    h.create_op("sb-shutdown", "Shutdown").await;
    let (op, replaced) = replacing_the_controller(&h, "sb-shutdown").await;
    assert_eq!(op.status.expect("status").phase, OpsPhase::Succeeded);
    // At least while it waited for the nodes to go offline.
    assert!(replaced >= 1, "replaced {replaced} times");
    assert_eq!(
        h.answers("POST", &cluster_path(&h, "shutdown")).await,
        [202]
    );
    let nodes = h.cp.list_storage_nodes(h.uuid).await.expect("nodes");
    assert!(
        nodes.iter().all(|n| n.status == NodeStatus::Offline),
        "{nodes:?}"
    );
}

#[tokio::test]
async fn a_start_survives_its_controller_replaced_whenever_it_moves() {
    let h = harness("scops-crash-start", "", (1, 1)).await;
    h.activated().await;
    shut_down(&h).await;
    h.clock(20.0).await;
    h.create_op("sb-start", "Start").await;
    let (op, replaced) = replacing_the_controller(&h, "sb-start").await;
    assert_eq!(op.status.expect("status").phase, OpsPhase::Succeeded);
    // At least while it waited for the cluster to become active.
    assert!(replaced >= 1, "replaced {replaced} times");
    assert_eq!(h.answers("POST", &cluster_path(&h, "start")).await, [202]);
    assert_eq!(
        cluster_status(&h).await,
        simplyblock_controlplane::ClusterStatus::Active
    );
}

#[tokio::test]
async fn a_restart_survives_its_controller_replaced_whenever_it_moves() {
    let h = harness("scops-crash-restart", "", (1, 1)).await;
    h.activated().await;
    h.clock(20.0).await;
    h.create_op("sb-restart", "Restart").await;
    let (op, replaced) = replacing_the_controller(&h, "sb-restart").await;
    assert_eq!(op.status.expect("status").phase, OpsPhase::Succeeded);
    // At least while it waited for offline, and again for active.
    assert!(replaced >= 2, "replaced {replaced} times");
    assert_eq!(
        h.answers("POST", &cluster_path(&h, "shutdown")).await,
        [202]
    );
    assert_eq!(h.answers("POST", &cluster_path(&h, "start")).await, [202]);
    assert_eq!(
        cluster_status(&h).await,
        simplyblock_controlplane::ClusterStatus::Active
    );
}

#[tokio::test]
async fn an_expand_survives_its_controller_replaced_whenever_it_moves() {
    let h = harness("scops-crash-expand", "", (1, 1)).await;
    h.activated().await;
    h.clock(20.0).await;
    h.create_op("sb-expand", "Expand").await;
    let (op, replaced) = replacing_the_controller(&h, "sb-expand").await;
    let status = op.status.expect("status");
    // At least while the cluster was expanding.
    assert!(replaced >= 1, "replaced {replaced} times");
    // Never two calls. A replacement between the record and the answer leaves the
    // outcome unknown (the call may not have gone out), which fails the operation rather
    // than calling again.
    let answers = h.answers("POST", &cluster_path(&h, "expand")).await;
    match status.phase {
        OpsPhase::Succeeded => assert_eq!(answers, [202]),
        OpsPhase::Failed => assert!(
            answers.len() <= 1
                && status
                    .message
                    .as_deref()
                    .is_some_and(|m| m.contains("is unknown")),
            "{status:?}"
        ),
        other => panic!("{other:?}: {status:?}"),
    }
    assert_eq!(
        cluster_status(&h).await,
        simplyblock_controlplane::ClusterStatus::Active
    );
}

#[tokio::test]
async fn a_rolling_restart_survives_its_controller_replaced_whenever_it_moves() {
    let h = harness("scops-crash-rolling", "", (1, 1)).await;
    h.activated().await;
    h.clock(20.0).await;
    h.create_op("sb-rolling", "RollingRestart").await;
    let (op, replaced) = replacing_the_controller(&h, "sb-rolling").await;
    let status = op.status.expect("status");
    assert_eq!(status.phase, OpsPhase::Succeeded, "{status:?}");
    // At least once per node, while it waited for the node's shutdown or restart.
    assert!(replaced >= 3, "replaced {replaced} times");
    let rr = status.rolling_restart.expect("rollingRestart");
    assert_eq!(rr.node_index, 3);
    for node in &rr.nodes {
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
    let nodes = h.cp.list_storage_nodes(h.uuid).await.expect("nodes");
    assert!(
        nodes.iter().all(|n| n.status == NodeStatus::Online),
        "{nodes:?}"
    );
}

#[tokio::test]
async fn a_cluster_deleted_mid_run_ends_its_operation_aborted() {
    let h = harness("scops-target-gone", "", (1, 1)).await;
    h.activated().await;
    // Frozen time holds the shutdown in Awaiting.
    h.clock(0.0).await;
    let _c = h.start();
    h.create_op("sb-shutdown", "Shutdown").await;
    h.step_is("sb-shutdown", "Awaiting").await;
    h.clusters()
        .delete("sb", &DeleteParams::default())
        .await
        .expect("delete");
    let op = h.phase_is("sb-shutdown", OpsPhase::Aborted).await;
    let message = op.status.and_then(|s| s.message).unwrap_or_default();
    assert!(message.contains("disappeared"), "{message}");
    assert_eq!(h.events("sb-shutdown", "OperationAborted").await.len(), 1);
    assert_eq!(
        h.answers("POST", &cluster_path(&h, "shutdown")).await,
        [202]
    );
}

#[tokio::test]
async fn cancel_task_on_an_open_task_calls_once_and_waits_for_it_to_leave() {
    // Every node add attempt fails: the task ends on its own at max_retry. The control
    // plane has no cancel route, so the cancel answers 404.
    let h = harness("scops-cancel-open", "", (1, 1)).await;
    let r =
        h.cp.raw(
            Method::PUT,
            "/../../_sim/faults",
            &[],
            Some(&json!({"spec": "taskfail:name=node_add"})),
        )
        .await
        .expect("faults");
    assert!(r.status < 300, "faults: {}", r.status);
    // Frozen time holds the new add open.
    h.clock(0.0).await;
    let task =
        h.cp.add_storage_node(
            h.uuid,
            &StorageNodeAdd::new(
                "w9.simplyblock-storage-node-api.simplyblock.svc.cluster.local:5000",
                "eth0",
            ),
        )
        .await
        .expect("node add");
    let _c = h.start();
    h.create_op_with(
        "sb-cancel",
        "CancelTask",
        json!({"cancelTask": {"taskID": task.to_string()}}),
    )
    .await;
    let waiting = h.step_is("sb-cancel", "Awaiting").await;
    let message = waiting.status.and_then(|s| s.message).unwrap_or_default();
    let cancel = format!("/api/v2/clusters/{}/tasks/{task}/cancel", h.uuid);
    until("the cancel answered", async || {
        (!h.answers("POST", &cancel).await.is_empty()).then_some(())
    })
    .await;
    // Looks while the task is open do not cancel again.
    crate::support::passes(&h.ctx.metrics, "storageclusterops", &h.ns, "sb-cancel", 2).await;
    assert_eq!(h.answers("POST", &cancel).await, [404], "{message}");
    assert_eq!(
        h.ops()
            .get("sb-cancel")
            .await
            .expect("op")
            .status
            .expect("s")
            .phase,
        OpsPhase::Running
    );
    h.clock(1000.0).await;
    h.phase_is("sb-cancel", OpsPhase::Succeeded).await;
    assert_eq!(h.answers("POST", &cancel).await, [404]);
    assert_eq!(h.events("sb-cancel", "TaskCanceled").await.len(), 1);
    until("the lock released", async || {
        h.lock().await.is_none().then_some(())
    })
    .await;
}

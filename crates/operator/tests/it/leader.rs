//! Two operator processes against one API server: only the one holding the leader Lease
//! reconciles (the other serves its webhooks and metrics and waits); killed, the leader's
//! place is taken by the other within the lease time; stopped with SIGTERM, a leader
//! releases the Lease on its way out.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use serde_json::json;
use simplyblock_api::StorageCluster;
use simplyblock_operator::assembly::LeaderElection;
use simplyblock_simulator::{Server, Sim, SimConfig};
use simplyblock_testenv::TestEnv;

use crate::support::{PATIENCE, free_port, operator_command, own_api_server, until, until_within};

const TOKEN: &str = "leader-test-token";
const NS: &str = "leader";
/// Short, so the takeover is quick; the renewal comes at a third of it.
const LEASE_SECONDS: u64 = 4;

/// One operator process named `identity`, its metrics on `metrics_port`.
fn operator(
    env: &TestEnv,
    sim: &Server,
    token_file: &std::path::Path,
    identity: &str,
    metrics_port: u16,
) -> Child {
    operator_command(env, sim.addr, token_file, NS)
        .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
        .arg(format!("--lease-duration={LEASE_SECONDS}s"))
        .env("POD_NAME", identity)
        .spawn()
        .expect("the operator starts")
}

/// The `simplyblock_operator_leader_state` a process reports for `identity`.
fn leader_state(metrics: &str, identity: &str) -> Option<f64> {
    let series = format!("simplyblock_operator_leader_state{{pod=\"{identity}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.parse().ok())
}

/// The StorageCluster passes a process's metrics count (0 when none).
fn cluster_passes(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("simplyblock_reconcile_total{controller=\"storagecluster\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt(LeaderElection::LEASE)
        .await
        .ok()??
        .spec?
        .holder_identity
}

async fn create_cluster(clusters: &Api<StorageCluster>, name: &str) {
    let cluster: StorageCluster = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
        "metadata": {"name": name},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 4, "stripe": {"dataChunks": 1, "parityChunks": 1}},
    }))
    .expect("cluster");
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .expect("StorageCluster");
}

async fn created(clusters: &Api<StorageCluster>, name: &str) {
    until(&format!("StorageCluster {name} created"), async || {
        let uuid = clusters.get(name).await.ok()?.status?.uuid?;
        (!uuid.is_empty()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn only_the_leader_reconciles_and_the_standby_takes_over_when_it_dies() {
    let (env, kube) = own_api_server(NS).await;
    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).expect("token");
    let config = SimConfig {
        tokens: vec![TOKEN.into()],
        time_scale: 100.0,
        ..SimConfig::new(dir.path().join("state"))
    };
    let (tls, ca_pem) = crate::support::sbsim_tls_material();
    let sim = Server::start(Sim::open(config).expect("sim"), "127.0.0.1:0", Some(tls))
        .await
        .expect("sbsim");
    crate::support::managed_control_plane(&kube, NS, &ca_pem).await;
    let leases: Api<Lease> = Api::namespaced(kube.clone(), NS);
    let clusters: Api<StorageCluster> = Api::namespaced(kube.clone(), NS);

    let (a_port, b_port) = (free_port(), free_port());
    let mut a = operator(&env, &sim, &token_file, "operator-a", a_port);
    until("operator-a leading", async || {
        (holder(&leases).await.as_deref() == Some("operator-a")).then_some(())
    })
    .await;
    let mut b = operator(&env, &sim, &token_file, "operator-b", b_port);
    // The standby serves too: its metrics answer (and its webhooks admit what follows).
    until("operator-b serving", async || {
        crate::support::scrape(&env, NS, b_port).await
    })
    .await;

    create_cluster(&clusters, "first").await;
    created(&clusters, "first").await;
    let a_metrics = crate::support::scrape(&env, NS, a_port)
        .await
        .expect("operator-a's metrics");
    assert!(cluster_passes(&a_metrics) >= 1.0, "{a_metrics}");
    let b_metrics = crate::support::scrape(&env, NS, b_port)
        .await
        .expect("operator-b's metrics");
    assert_eq!(
        cluster_passes(&b_metrics),
        0.0,
        "the standby reconciled: {b_metrics}"
    );
    assert_eq!(
        leader_state(&a_metrics, "operator-a"),
        Some(1.0),
        "{a_metrics}"
    );
    assert_eq!(
        leader_state(&b_metrics, "operator-b"),
        Some(0.0),
        "{b_metrics}"
    );
    assert_eq!(holder(&leases).await.as_deref(), Some("operator-a"));

    // The leader dies without releasing the Lease: the standby waits it out, then leads.
    // The bound is a wait's patience (a loaded machine is slow), not a speed claim; the
    // figure is printed.
    a.kill().expect("kill operator-a");
    let _ = a.wait();
    let killed = Instant::now();
    until_within(
        "operator-b leading",
        Duration::from_secs(LEASE_SECONDS * 3),
        async || (holder(&leases).await.as_deref() == Some("operator-b")).then_some(()),
    )
    .await;
    eprintln!(
        "takeover after the leader's death: {:.1} s (lease {LEASE_SECONDS} s)",
        killed.elapsed().as_secs_f64()
    );
    create_cluster(&clusters, "second").await;
    created(&clusters, "second").await;
    let b_metrics = crate::support::scrape(&env, NS, b_port)
        .await
        .expect("operator-b's metrics");
    assert!(cluster_passes(&b_metrics) >= 1.0, "{b_metrics}");
    assert_eq!(
        leader_state(&b_metrics, "operator-b"),
        Some(1.0),
        "{b_metrics}"
    );

    // SIGTERM: the passes in flight finish, the Lease is released, the process ends well.
    let pid = i32::try_from(b.id()).expect("pid");
    let term = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill -TERM");
    assert!(term.success());
    let stopped = Instant::now();
    let status = loop {
        if let Some(status) = b.try_wait().expect("wait") {
            break status;
        }
        assert!(stopped.elapsed() < PATIENCE, "operator-b did not stop");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "operator-b ended with {status}");
    assert_eq!(holder(&leases).await, None, "the Lease was not released");
}

//! The second act: disaster recovery between two sites.
//!
//! Site B is a second cluster on hosts of its own, stood up by that site's administrators
//! through its management API; both sites' replication targets point at each other. The
//! volume of the first act is protected through the csi-addons Replication service (as the
//! csi-addons sidecar calls it for a VolumeReplication), then failed over to B in a
//! planned move (demote on A, promote on B), read back on B from the handle of the
//! original PersistentVolume, written to there, and failed back to A, where both lines
//! read back. Before the failover, while A serves, a TestFailover drill on the hub (this
//! API server, with both sites as its managed clusters) clones B's latest recovery point
//! into a bubble namespace on B, where it reads back what A wrote.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use repl::controller_client::ControllerClient as Replication;
use simplyblock_api::API_VERSION;
use simplyblock_api::test_failover::{FailoverPhase, TestFailover};
use simplyblock_controlplane::{
    Client, ClientConfig, ClusterCreate, ClusterStatus, Method, NodeStatus, PoolCreate,
    ReplicationPolicyCreate, ReplicationTargetCreate, StorageNodeAdd, Url, Uuid, VolumeStatus,
};
use simplyblock_csi::proto::csi::v1 as csi;
use simplyblock_csi::proto::csi::v1::controller_client::ControllerClient;
use simplyblock_csi::proto::csi::v1::node_client::NodeClient;
use simplyblock_csi::proto::csiaddons::replication as repl;
use tonic::transport::Channel;

use crate::{NAMESPACE, TOKEN, step, volume};

/// Site B's hosts: in sbsim's fleet, with no Kubernetes Node here (they belong to the
/// other site's Kubernetes cluster), labelled as that site's storage-node pods run there.
pub const SITE_B_HOSTS: [&str; 2] = ["site-b-1", "site-b-2"];

/// The fleet lines for site B's hosts.
pub fn site_b_fleet() -> String {
    SITE_B_HOSTS
        .iter()
        .enumerate()
        .map(|(i, h)| {
            format!(
                "  - hostname: {h}\n    addresses: [10.0.1.{}]\n    devices: {{count: 2, size: 500G}}\n    labels: {{{}: site-b}}\n",
                i + 11,
                simplyblock_simulator::DEFAULT_ENROLLMENT_LABEL
            )
        })
        .collect()
}

fn storage_node_api(host: &str) -> String {
    format!("{host}.simplyblock-storage-node-api.{NAMESPACE}.svc.cluster.local:5000")
}

/// One site: its cluster and pool, its replication policy towards the other site.
struct Site {
    cluster: Uuid,
    pool: Uuid,
    policy: Uuid,
}

fn source(handle: &str) -> Option<repl::ReplicationSource> {
    Some(repl::ReplicationSource {
        r#type: Some(repl::replication_source::Type::Volume(
            repl::replication_source::VolumeSource {
                volume_id: handle.into(),
            },
        )),
    })
}

/// Repeats a verb the sidecar would repeat: ABORTED and UNAVAILABLE mean "not yet".
async fn until_done<T, F, Fut>(what: &str, mut call: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let started = Instant::now();
    let mut said = None;
    loop {
        match call().await {
            Ok(r) => return Ok(r.into_inner()),
            Err(s) if matches!(s.code(), tonic::Code::Aborted | tonic::Code::Unavailable) => {
                if said.as_deref() != Some(s.message()) {
                    println!(
                        "[{:>5.1}s] {what}: {:?}, {}; the sidecar retries",
                        started.elapsed().as_secs_f64(),
                        s.code(),
                        s.message()
                    );
                    said = Some(s.message().to_owned());
                }
                anyhow::ensure!(
                    started.elapsed() < Duration::from_secs(120),
                    "{what} did not finish within 2 minutes: {}",
                    s.message()
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(s) => anyhow::bail!("{what}: {:?}: {}", s.code(), s.message()),
        }
    }
}

/// Stands up site B and the replication targets and policies between the sites.
async fn second_site(cp: &Client, a_cluster: Uuid, a_pool: Uuid) -> anyhow::Result<(Site, Site)> {
    let b = cp
        .create_cluster(&ClusterCreate::new("site-b", 10, 4))
        .await?
        .id;
    for host in SITE_B_HOSTS {
        cp.add_storage_node(b, &StorageNodeAdd::new(storage_node_api(host), "eth0"))
            .await?;
    }
    let started = Instant::now();
    loop {
        let nodes = cp.list_storage_nodes(b).await?;
        if nodes.len() == SITE_B_HOSTS.len() && nodes.iter().all(|n| n.status == NodeStatus::Online)
        {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "site B's storage nodes did not come online within a minute"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    cp.activate_cluster(b).await?;
    while cp.get_cluster(b).await?.status != ClusterStatus::Active {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "site B did not become active within 2 minutes"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let b_pool = cp
        .create_pool(
            b,
            &PoolCreate {
                name: "site-b-pool".into(),
                ..Default::default()
            },
        )
        .await?
        .id;
    let mut policies = Vec::new();
    for (from, to, to_pool) in [(a_cluster, b, b_pool), (b, a_cluster, a_pool)] {
        let target = cp
            .create_replication_target(
                from,
                &ReplicationTargetCreate {
                    target_name: format!("simplyblock-repl-{to}"),
                    target_cluster_id: to,
                    target_pool_id: Some(to_pool),
                    timeout_sec: None,
                },
            )
            .await?;
        let policy = cp
            .create_replication_policy(
                from,
                &ReplicationPolicyCreate {
                    policy_name: format!("every-minute-to-{to}"),
                    target_id: target.id,
                    interval_min: 1,
                    mode: None,
                    keep_replicated: None,
                },
            )
            .await?;
        policies.push(policy.id);
    }
    Ok((
        Site {
            cluster: a_cluster,
            pool: a_pool,
            policy: policies[0],
        },
        Site {
            cluster: b,
            pool: b_pool,
            policy: policies[1],
        },
    ))
}

fn params(policy: Uuid) -> HashMap<String, String> {
    HashMap::from([("replicationPolicyID".to_owned(), policy.to_string())])
}

/// Waits until the volume's replica holds what was written by `after`, by the
/// replication info the sidecar reads.
async fn replicated_since(
    driver: &mut Replication<Channel>,
    handle: &str,
    after: std::time::SystemTime,
) -> anyhow::Result<repl::GetVolumeReplicationInfoResponse> {
    let started = Instant::now();
    loop {
        let info = driver
            .get_volume_replication_info(repl::GetVolumeReplicationInfoRequest {
                replication_source: source(handle),
                ..Default::default()
            })
            .await?
            .into_inner();
        let synced = info.last_sync_time.as_ref().is_some_and(|t| {
            std::time::UNIX_EPOCH + Duration::new(t.seconds.max(0) as u64, t.nanos.max(0) as u32)
                >= after
        });
        if synced {
            return Ok(info);
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "no replication cycle finished within 2 minutes; last info: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn describe(info: &repl::GetVolumeReplicationInfoResponse) -> String {
    let status = repl::get_volume_replication_info_response::Status::try_from(info.status)
        .map(|s| s.as_str_name().to_owned())
        .unwrap_or_else(|_| info.status.to_string());
    format!(
        "last sync {}, {} bytes in {:.1}s, {status}{}",
        info.last_sync_time
            .as_ref()
            .map(|t| t.to_string())
            .unwrap_or_else(|| "never".into()),
        info.last_sync_bytes,
        info.last_sync_duration
            .as_ref()
            .map(|d| d.seconds as f64 + f64::from(d.nanos) / 1e9)
            .unwrap_or_default(),
        if info.status_message.is_empty() {
            String::new()
        } else {
            format!(" ({})", info.status_message)
        }
    )
}

/// Runs the act. `served` is the first act's volume, mounted on site A.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    kube: &kube::Client,
    node_plugin: &kube::Client,
    control_plane: &str,
    served: &mut volume::Served,
    file: &Path,
    greeting: &str,
    csi_dir: &Path,
    stand_ins: volume::StandIns<'_>,
) -> anyhow::Result<()> {
    let cp = Client::new(ClientConfig::new(Url::parse(control_plane)?, TOKEN))?;
    let handle = served.volume.volume_id.clone();
    let mut parts = handle.split(':');
    let (Some(a_cluster), Some(a_pool)) = (parts.next(), parts.next()) else {
        anyhow::bail!("volume id {handle} is not cluster:pool:volume");
    };
    let (a_cluster, a_pool): (Uuid, Uuid) = (a_cluster.parse()?, a_pool.parse()?);

    let attachable = volume::cannot_attach().is_none();
    step(
        "a second site, B: its cluster on two hosts of its own, and replication targets and policies both ways",
    );
    let (a, b) = second_site(&cp, a_cluster, a_pool).await?;
    println!(
        "site A: cluster {} (pool {}), site B: cluster {} (pool {}); policies {} (A to B) and {} (B to A)",
        a.cluster, a.pool, b.cluster, b.pool, a.policy, b.policy
    );

    let listed = wait_listed(kube, &[a.cluster, b.cluster]).await?;
    println!("the CSI secret lists {listed}");

    // Each site's driver reads its own site's CSI secret: both list both clusters (the
    // operator writes every cluster the control plane lists), each marks its own local.
    let site_a = volume::start(
        kube,
        node_plugin,
        NAMESPACE,
        &csi_dir.join("site-a"),
        stand_ins,
        Some(a.cluster),
    )
    .await?;
    let site_b = volume::start(
        kube,
        node_plugin,
        NAMESPACE,
        &csi_dir.join("site-b"),
        stand_ins,
        Some(b.cluster),
    )
    .await?;
    let mut on_a = Replication::new(site_a.controller.clone());
    let mut on_b = Replication::new(site_b.controller.clone());

    // A recovery point is crash-consistent: it holds what reached the volume. The
    // application flushes its file, as one that cares for its data does.
    if served.mounted {
        std::fs::File::open(file)?.sync_all()?;
    }
    step("protecting the volume: EnableVolumeReplication on site A with A's policy");
    on_a.enable_volume_replication(repl::EnableVolumeReplicationRequest {
        parameters: params(a.policy),
        replication_source: source(&handle),
        ..Default::default()
    })
    .await?;
    let written = std::time::SystemTime::now();
    let info = replicated_since(&mut on_a, &handle, written).await?;
    println!("replicating to site B: {}", describe(&info));

    rehearse(
        kube,
        &cp,
        [&a, &b],
        &site_b,
        served,
        file,
        greeting,
        csi_dir,
    )
    .await?;

    step("planned failover to site B: the pod on A stops, DemoteVolume on A, PromoteVolume on B");
    served.unmount().await?;
    until_done("DemoteVolume on site A", || {
        let mut client = on_a.clone();
        let request = repl::DemoteVolumeRequest {
            parameters: params(a.policy),
            replication_source: source(&handle),
            ..Default::default()
        };
        async move { client.demote_volume(request).await }
    })
    .await?;
    until_done("PromoteVolume on site B", || {
        let mut client = on_b.clone();
        let request = repl::PromoteVolumeRequest {
            parameters: params(b.policy),
            replication_source: source(&handle),
            ..Default::default()
        };
        async move { client.promote_volume(request).await }
    })
    .await?;
    let relationship = cp
        .volume_replication(a.cluster, a.pool, volume_id(&handle)?)
        .await?;
    println!(
        "volume {} on site A is {:?}; its replica {} on site B serves",
        volume_id(&handle)?,
        relationship.state,
        relationship
            .target_lvol_id
            .map(|v| v.to_string())
            .unwrap_or_default()
    );

    let mut node_b = NodeClient::new(site_b.node.clone());
    let b_staging = csi_dir.join("site-b").join("staging/pvc-demo");
    let b_target = csi_dir.join("site-b").join("pods/demo/volumes/pvc-demo");
    let second = "written on site B after the failover\n";
    if attachable {
        step(
            "on site B, the same PersistentVolume (the same handle) is mounted: the node stages the promoted replica",
        );
        volume::attach(
            &mut node_b,
            &served.volume,
            &served.fs_type,
            &b_staging,
            &b_target,
        )
        .await?;
        let on_site_b = b_target.join(file.file_name().unwrap_or_default());
        let back = std::fs::read_to_string(&on_site_b)?;
        anyhow::ensure!(
            back == greeting,
            "site B reads something else than site A wrote: {back:?}"
        );
        println!("$ cat {} (site B)\n{back}", on_site_b.display());
        std::fs::write(&on_site_b, format!("{greeting}{second}"))?;
        println!("appended on site B: {}", second.trim_end());
    }

    step(
        "site A's copy of the application is deleted: DeleteVolume removes the demoted volume, never the replica that serves",
    );
    let mut controller_a = ControllerClient::new(site_a.controller.clone());
    controller_a
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: handle.clone(),
            ..Default::default()
        })
        .await?;
    // A replication source is reaped, not removed: it stays readable as deleted, and its
    // relationship still resolves, so the chain still leads from the original handle.
    let started = Instant::now();
    let old = loop {
        let old = cp
            .get_volume(a.cluster, a.pool, volume_id(&handle)?)
            .await?;
        if old.status == VolumeStatus::Deleted {
            break old;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "the demoted volume on site A was not reaped within a minute: {:?}",
            old.status
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    println!(
        "volume {} on site A is {:?}: reaped, its relationship still resolves",
        old.id, old.status
    );

    step(
        "failing back to site A: re-protect B towards A, the pod on B stops, DemoteVolume on B, PromoteVolume on A",
    );
    on_b.enable_volume_replication(repl::EnableVolumeReplicationRequest {
        parameters: params(b.policy),
        replication_source: source(&handle),
        ..Default::default()
    })
    .await?;
    if attachable {
        volume::detach(&mut node_b, &handle, &b_staging, &b_target).await?;
    }
    let since = std::time::SystemTime::now();
    let info = replicated_since(&mut on_b, &handle, since).await?;
    println!("replicating back to site A: {}", describe(&info));
    until_done("DemoteVolume on site B", || {
        let mut client = on_b.clone();
        let request = repl::DemoteVolumeRequest {
            parameters: params(b.policy),
            replication_source: source(&handle),
            ..Default::default()
        };
        async move { client.demote_volume(request).await }
    })
    .await?;
    until_done("PromoteVolume on site A", || {
        let mut client = on_a.clone();
        let request = repl::PromoteVolumeRequest {
            parameters: params(a.policy),
            replication_source: source(&handle),
            ..Default::default()
        };
        async move { client.promote_volume(request).await }
    })
    .await?;
    if attachable {
        // Site A's node plugin, reading the secret that now lists both sites, stages the
        // same handle again: the chain leads to the replica the failback promoted.
        let mut node_a = NodeClient::new(site_a.node.clone());
        let a_staging = csi_dir.join("site-a").join("staging/pvc-demo");
        let a_target = csi_dir.join("site-a").join("pods/demo/volumes/pvc-demo");
        volume::attach(
            &mut node_a,
            &served.volume,
            &served.fs_type,
            &a_staging,
            &a_target,
        )
        .await?;
        let on_site_a = a_target.join(file.file_name().unwrap_or_default());
        let back = std::fs::read_to_string(&on_site_a);
        volume::detach(&mut node_a, &handle, &a_staging, &a_target).await?;
        let back = back?;
        anyhow::ensure!(
            back == format!("{greeting}{second}"),
            "site A reads something else after the failback: {back:?}"
        );
        println!(
            "$ cat {} (site A, after the failback)\n{back}",
            on_site_a.display()
        );
    }
    site_a.stop().await;
    site_b.stop().await;
    Ok(())
}

/// Waits until the operator's CSI secret lists every one of `clusters` (it writes each
/// cluster the control plane lists); describes the entries.
async fn wait_listed(kube: &kube::Client, clusters: &[Uuid]) -> anyhow::Result<String> {
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(kube.clone(), NAMESPACE);
    let started = Instant::now();
    loop {
        let entries = secrets
            .get_opt(simplyblock_api::csi_secret::NAME)
            .await?
            .and_then(|s| s.data)
            .and_then(|d| d.get(simplyblock_api::csi_secret::KEY).cloned())
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .map(|text| simplyblock_csi::clusters::parse_secret(&text))
            .transpose()?
            .unwrap_or_default();
        if clusters
            .iter()
            .all(|c| entries.iter().any(|e| e.cluster_id == *c))
        {
            return Ok(entries
                .iter()
                .map(|e| format!("{}{}", e.cluster_id, if e.local { " (local)" } else { "" }))
                .collect::<Vec<_>>()
                .join(", "));
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(90),
            "the CSI secret did not list clusters {clusters:?} within 90 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn volume_id(handle: &str) -> anyhow::Result<Uuid> {
    handle
        .rsplit(':')
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("volume id {handle} is not cluster:pool:volume"))
}

/// The managed clusters of the hub, one per site, as the drill names them.
pub const SITES: [&str; 2] = ["site-a", "site-b"];
/// The drill's name and its bubble namespace on site B.
const DRILL: &str = "rehearsal";
const BUBBLE: &str = "dr-rehearsal";

/// The DR rehearsal: a TestFailover on the hub clones site B's latest recovery point of
/// the application's claim into a bubble namespace on site B while site A serves on, the
/// bubble's copy reads what A wrote, and deleting the drill takes the bubble away.
#[allow(clippy::too_many_arguments)]
async fn rehearse(
    kube: &kube::Client,
    cp: &Client,
    sites: [&Site; 2],
    site_b: &volume::Running,
    served: &volume::Served,
    file: &Path,
    greeting: &str,
    csi_dir: &Path,
) -> anyhow::Result<()> {
    step(
        "a DR rehearsal while site A serves: a TestFailover on the hub clones site B's latest recovery point into a bubble on B",
    );
    let apply = PatchParams::apply("simplyblock-demo").force();
    // Each site's secret, as the hub's administrator stores them beside the drills.
    let secrets: Api<Secret> = Api::namespaced(kube.clone(), NAMESPACE);
    for (name, site) in SITES.iter().zip(sites) {
        let secret = cp.get_cluster(site.cluster).await?.secret;
        let object: Secret = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("simplyblock-cluster-{name}")},
            "stringData": {"secret": secret.expose()},
        }))?;
        secrets
            .patch(
                &format!("simplyblock-cluster-{name}"),
                &apply,
                &Patch::Apply(&object),
            )
            .await?;
    }
    // The application's claim, bound to the PersistentVolume of the first act as the PV
    // controller (not run here) would bind it.
    let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "pvc-demo", "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "resources": {"requests": {"storage": "1Gi"}}, "volumeName": "pv-demo"},
    }))?;
    Api::<PersistentVolumeClaim>::namespaced(kube.clone(), "default")
        .patch("pvc-demo", &apply, &Patch::Apply(&claim))
        .await?;
    simplyblock_testenv::ocm::bind(kube, "default", "pvc-demo").await?;

    let drills: Api<TestFailover> = Api::namespaced(kube.clone(), NAMESPACE);
    let drill: TestFailover = serde_json::from_value(serde_json::json!({
        "apiVersion": API_VERSION, "kind": "TestFailover",
        "metadata": {"name": DRILL},
        "spec": {"scope": "Volume", "sourceCluster": SITES[0], "sourceNamespace": "default",
                 "sourceRef": "pvc-demo", "bubbleCluster": SITES[1], "bubbleNamespace": BUBBLE},
    }))?;
    let calls_to_a = writes_to(cp, sites[0].cluster).await?;
    drills.create(&PostParams::default(), &drill).await?;
    let started = Instant::now();
    let mut said = String::new();
    let status = loop {
        let status = drills.get(DRILL).await?.status.unwrap_or_default();
        let now = format!(
            "{:?}/{}: {}",
            status.phase,
            status.step.state.as_deref().unwrap_or("-"),
            status.message.as_deref().unwrap_or("")
        );
        if now != said {
            println!("[{:>5.1}s] {DRILL} {now}", started.elapsed().as_secs_f64());
            said = now;
        }
        match status.phase {
            FailoverPhase::Ready => break status,
            FailoverPhase::Failed => anyhow::bail!("the drill failed: {said}"),
            _ => {}
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(180),
            "the drill was not Ready within 3 minutes: {said}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    println!("\n$ kubectl get testfailovers -n {NAMESPACE}");
    print!(
        "{}",
        crate::table::get(
            kube,
            &format!("/apis/{API_VERSION}/namespaces/{NAMESPACE}/testfailovers")
        )
        .await?
    );
    let report = status.report.clone().unwrap_or_default();
    let clone = status
        .clones
        .first()
        .and_then(|c| c.clone_id.clone())
        .ok_or_else(|| anyhow::anyhow!("the Ready drill records no clone"))?;
    println!(
        "the drill's recovery point: snapshot {} on site B, {} s old; its clone {clone} is bound in namespace {BUBBLE}; invariants held: {}",
        report.recovery_point.as_deref().unwrap_or("?"),
        report
            .recovery_point_age_seconds
            .map_or_else(|| "?".into(), |s| s.to_string()),
        report.invariants_held.unwrap_or(false)
    );
    anyhow::ensure!(
        writes_to(cp, sites[0].cluster).await? == calls_to_a,
        "the drill wrote to site A"
    );
    println!("site A received no write from the drill, and serves on");

    if volume::cannot_attach().is_none() {
        let mut node_b = NodeClient::new(site_b.node.clone());
        let staging = csi_dir.join("site-b").join("staging/rehearsal");
        let target = csi_dir.join("site-b").join("pods/rehearsal/volumes/clone");
        let bubble = csi::Volume {
            volume_id: clone.clone(),
            ..Default::default()
        };
        volume::attach(&mut node_b, &bubble, &served.fs_type, &staging, &target).await?;
        let copy = target.join(file.file_name().unwrap_or_default());
        let back = std::fs::read_to_string(&copy);
        volume::detach(&mut node_b, &clone, &staging, &target).await?;
        let back = back?;
        anyhow::ensure!(
            back == greeting,
            "the bubble reads something else than site A wrote: {back:?}"
        );
        println!("$ cat {} (the bubble on site B)\n{back}", copy.display());
    }

    drills.delete(DRILL, &DeleteParams::default()).await?;
    let started = Instant::now();
    while drills.get_opt(DRILL).await?.is_some() {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "the drill was not torn down within 2 minutes"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The drill asks for its clone's deletion; the control plane removes the volume in
    // the background (in_deletion, then gone), so the clone is awaited, not read once.
    let clone_id = volume_id(&clone)?;
    let started = Instant::now();
    while let Some(left) = cp
        .list_volumes(sites[1].cluster, sites[1].pool)
        .await?
        .into_iter()
        .find(|v| v.id == clone_id)
    {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "the drill's clone outlived the drill: it is still {} 30 s after the drill went",
            left.status.as_str()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let bubble_left = Api::<Namespace>::all(kube.clone())
        .get_opt(BUBBLE)
        .await?
        .is_some();
    anyhow::ensure!(!bubble_left, "the bubble namespace outlived the drill");
    println!("the drill is deleted: its clone and its bubble namespace {BUBBLE} are gone");
    Ok(())
}

/// How many writes the control plane received for `cluster` so far.
async fn writes_to(cp: &Client, cluster: Uuid) -> anyhow::Result<usize> {
    let prefix = format!("/api/v2/clusters/{cluster}");
    let answer = cp.raw(Method::GET, "/../../_sim/calls", &[], None).await?;
    let calls: Vec<serde_json::Value> =
        serde_json::from_value(answer.json().unwrap_or(serde_json::Value::Null))?;
    Ok(calls
        .iter()
        .filter(|c| {
            c["method"] != "GET" && c["path"].as_str().is_some_and(|p| p.starts_with(&prefix))
        })
        .count())
}

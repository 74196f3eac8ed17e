//! Path recovery on the node: the node plugin's container as the SimplyblockDriver renders
//! it, started as its kubelet would (its Secret and ConfigMaps as files, its arguments and
//! environment as written) under the chart's RBAC for its ServiceAccount, against a real
//! API server and sbsim. Stand-ins, as the demo uses them: the loop attacher for the
//! kernel's NVMe/TCP initiator (a path is a file sbsim cuts through `POST
//! /_sim/paths/cut`), and shorter guardian timings than the production defaults, so the
//! test does not wait minutes; the reconnect monitor runs at its rendered default.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Event, Node, Pod, Secret, ServiceAccount};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_api::SimplyblockDriver;
use simplyblock_api::csi_secret;
use simplyblock_controlplane::{Client, Uuid, VolumeCreate};
use simplyblock_csi::attach::loopdev;
use simplyblock_csi::cli::Args;
use simplyblock_csi::proto::csi::v1 as csi;
use simplyblock_csi::proto::csi::v1::node_client::NodeClient;
use simplyblock_csi::recovery::{OPT_IN, RESTART_REASON};
use simplyblock_operator::driver::manifests::{Settings, manifests};
use simplyblock_operator::driver::names::NODE_ACCOUNT;
use simplyblock_simulator::{Server, Sim, SimConfig};
use tonic::transport::Channel;

use crate::support::{TOKEN, active_cluster_with_pool, cp_client, fleet, own_api_server, until};

const NS: &str = "path-recovery";
const NODE: &str = "recovery-worker";

struct ControlPlane {
    server: Server,
    client: Client,
    cluster: Uuid,
    cluster_secret: String,
    pool: Uuid,
    files: PathBuf,
    _dir: tempfile::TempDir,
}

async fn control_plane() -> ControlPlane {
    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    let fleet_path = dir.path().join("fleet.yaml");
    std::fs::write(&fleet_path, fleet(3)).expect("fleet");
    let files = dir.path().join("volumes");
    let config = SimConfig {
        tokens: vec![TOKEN.into()],
        time_scale: 1000.0,
        fleet: Some(fleet_path),
        volume_files: Some(files.clone()),
        ..SimConfig::new(dir.path().join("state"))
    };
    let server = Server::start(Sim::open(config).expect("sim"), "127.0.0.1:0", None)
        .await
        .expect("sbsim");
    let cp = cp_client(&server.url);
    let (cluster, pool) = active_cluster_with_pool(&cp, "recovery").await;
    ControlPlane {
        cluster: cluster.id,
        cluster_secret: cluster.secret.expose().to_owned(),
        pool: pool.id,
        client: cp,
        server,
        files,
        _dir: dir,
    }
}

/// What the operator and the StorageCluster controller write for the node plugin: its
/// ServiceAccount, its ConfigMaps and the CSI secret naming the cluster.
async fn driver_objects(
    kube: &kube::Client,
    m: &simplyblock_operator::driver::manifests::Manifests,
    cp: &ControlPlane,
) {
    let post = PostParams::default();
    for a in &m.accounts {
        let api: Api<ServiceAccount> = Api::namespaced(kube.clone(), NS);
        let mut a = a.clone();
        a.metadata.owner_references = None;
        // The chart's identity may have made it already.
        let _ = api.create(&post, &a).await;
    }
    for c in &m.config_maps {
        let mut c = c.clone();
        c.metadata.owner_references = None;
        Api::namespaced(kube.clone(), NS)
            .create(&post, &c)
            .await
            .expect("a ConfigMap of the driver");
    }
    let contents = csi_secret::Contents {
        clusters: vec![csi_secret::Entry {
            cluster_id: cp.cluster.to_string(),
            cluster_endpoint: cp.server.url.clone(),
            cluster_secret: cp.cluster_secret.clone(),
            extra: Default::default(),
        }],
        local: [cp.cluster.to_string()].into(),
        extra: Default::default(),
    };
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(csi_secret::NAME.into()),
            ..Default::default()
        },
        data: Some(csi_secret::secret_data(&contents)),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(kube.clone(), NS)
        .create(&post, &secret)
        .await
        .expect("the CSI secret");
}

/// A pod on the worker using one volume, owned by a ReplicaSet (its controller) and
/// opted in to restarts on path loss; Running, as its kubelet reports it.
async fn app_pod(kube: &kube::Client, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NS);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {OPT_IN: "true"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{name}-rs"),
                "uid": "0d5a3f4c-5b8e-4a4e-9c1e-7f3e2a1b0c9d", "controller": true,
            }],
        },
        "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "busybox"}]},
    }))
    .expect("pod");
    let created = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .expect("running");
    created.metadata.uid.expect("uid")
}

fn block() -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_mode: Some(csi::volume_capability::AccessMode {
            mode: csi::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
        }),
        access_type: Some(csi::volume_capability::AccessType::Block(Default::default())),
    }
}

/// A volume, staged and published (as a block device) to the pod with `uid`, at the
/// kubelet's paths under `root`. Returns its CSI volume id.
async fn attached(
    node: &mut NodeClient<Channel>,
    cp: &ControlPlane,
    root: &Path,
    name: &str,
    uid: &str,
) -> (String, Uuid) {
    let volume = cp
        .client
        .create_volume(cp.cluster, cp.pool, &VolumeCreate::new(name, 1 << 30))
        .await
        .expect("volume");
    let volume_id = format!("{}:{}:{volume}", cp.cluster, cp.pool);
    until("the volume's file", async || {
        cp.files
            .join(format!("{volume}.img"))
            .exists()
            .then_some(())
    })
    .await;
    let staging = root.join(format!(
        "kubelet/plugins/kubernetes.io/csi/volumeDevices/staging/pv-{name}"
    ));
    let target = root.join(format!(
        "kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pv-{name}/{uid}"
    ));
    node.node_stage_volume(csi::NodeStageVolumeRequest {
        volume_id: volume_id.clone(),
        staging_target_path: staging.display().to_string(),
        volume_capability: Some(block()),
        ..Default::default()
    })
    .await
    .expect("stage");
    node.node_publish_volume(csi::NodePublishVolumeRequest {
        volume_id: volume_id.clone(),
        staging_target_path: staging.display().to_string(),
        target_path: target.display().to_string(),
        volume_capability: Some(block()),
        ..Default::default()
    })
    .await
    .expect("publish");
    (volume_id, volume)
}

/// The paths the node holds for `volume` (the loop attacher's marks).
fn held(files: &Path, volume: Uuid) -> Vec<String> {
    loopdev::marked_paths(&loopdev::paths_dir(files, volume))
        .into_iter()
        .map(|p| loopdev::path_name(&p.ip, p.port))
        .collect()
}

async fn cut(cp: &ControlPlane, volume: Uuid, paths: Option<&[String]>) -> Vec<String> {
    let mut body = json!({"volume": volume.to_string()});
    if let Some(p) = paths {
        body["paths"] = json!(p);
    }
    let r = cp
        .client
        .raw(
            simplyblock_controlplane::Method::POST,
            "/../../_sim/paths/cut",
            &[],
            Some(&body),
        )
        .await
        .expect("cut");
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("json");
    serde_json::from_value(v["cut"].clone()).expect("cut paths")
}

async fn restart_events(kube: &kube::Client, uid: &str) -> Vec<Event> {
    Api::<Event>::namespaced(kube.clone(), NS)
        .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(RESTART_REASON))
        .collect()
}

async fn terminating(kube: &kube::Client, name: &str) -> bool {
    Api::<Pod>::namespaced(kube.clone(), NS)
        .get_opt(name)
        .await
        .expect("pod")
        .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_path_is_reconnected_and_a_pod_that_lost_every_path_is_restarted() {
    let (env, kube) = own_api_server(NS).await;
    let cp = control_plane().await;
    let node: Node = serde_json::from_value(json!({"metadata": {"name": NODE}})).expect("node");
    Api::<Node>::all(kube.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("the worker's Node");

    let driver: SimplyblockDriver = serde_json::from_value(json!({
        "apiVersion": simplyblock_api::API_VERSION, "kind": "SimplyblockDriver",
        "metadata": {"name": "simplyblock", "namespace": NS, "uid": "path-recovery-driver"},
        "spec": {},
    }))
    .expect("driver");
    let m = manifests(
        &driver,
        Settings {
            image: "quay.io/simplyblock-io/simplyblock-csi:test",
            snapshots: false,
            group_snapshots: false,
            ca: None,
        },
    );
    driver_objects(&kube, &m, &cp).await;
    let pod = m.node.spec.template.spec.clone().expect("pod");
    let root = tempfile::tempdir().expect("root");
    let mounted =
        simplyblock_testenv::kubelet::mount(&kube, NS, &pod, "csi-node", NODE, root.path())
            .await
            .expect("the node plugin's volumes");
    let mut args = mounted.args.clone();
    args.extend([
        "--attacher=loop".to_owned(),
        format!("--loop-dir={}", cp.files.display()),
        // Set in every pod, so the plugin reads its Node and its pods.
        "--kubernetes=true".to_owned(),
        "--guardian-interval=1s".to_owned(),
        "--path-loss-grace=2s".to_owned(),
    ]);
    let args = Args::from_container(&args, &mounted.env).expect("the plugin's arguments");
    assert_eq!(
        args.reconnect_interval,
        std::time::Duration::from_secs(3),
        "the monitor runs at the reference's interval"
    );
    let plugin_kube = env
        .service_account_client(NS, NODE_ACCOUNT)
        .await
        .expect("the node plugin's account");
    let driver = args
        .driver(Some(plugin_kube))
        .await
        .expect("the plugin starts");
    let socket = args.socket().expect("socket");
    let routes = driver.routes().expect("routes");
    let recovery = driver
        .start_recovery()
        .expect("recovery")
        .expect("node mode");
    let mut guardian_passes = recovery.guardian_passes().expect("with Kubernetes");
    let s = socket.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(async move {
        let _ = simplyblock_csi::serve(&s, routes, async {
            let _ = stopped.await;
        })
        .await;
    });
    until("the plugin's socket", async || {
        tokio::net::UnixStream::connect(&socket)
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    let channel = tonic::transport::Endpoint::try_from("http://localhost")
        .expect("endpoint")
        .connect_with_connector(tower::service_fn(move |_| {
            let p = socket.clone();
            async move {
                tokio::net::UnixStream::connect(p)
                    .await
                    .map(hyper_util::rt::TokioIo::new)
            }
        }))
        .await
        .expect("connect");
    let mut node_client = NodeClient::new(channel);

    let uid_lost = app_pod(&kube, "lost").await;
    let uid_kept = app_pod(&kube, "kept").await;
    let (lost_id, lost) = attached(&mut node_client, &cp, root.path(), "lost", &uid_lost).await;
    let (kept_id, kept) = attached(&mut node_client, &cp, root.path(), "kept", &uid_kept).await;
    let all_kept = held(&cp.files, kept);
    assert!(
        all_kept.len() >= 2 && !held(&cp.files, lost).is_empty(),
        "each published path is connected at stage: {all_kept:?}"
    );

    // One path cut: the monitor connects it again, as the control plane still publishes it.
    let first = vec![all_kept[0].clone()];
    assert_eq!(
        cut(&cp, kept, Some(&first)).await,
        first,
        "the path was held and is cut"
    );
    until("the cut path reconnected by the monitor", async || {
        (held(&cp.files, kept) == all_kept).then_some(())
    })
    .await;

    // Every path of one volume cut, and one of the other's: the pod on the first is
    // restarted, with an Event saying why; the other keeps a live path and its pod.
    let last = vec![all_kept[all_kept.len() - 1].clone()];
    assert!(!cut(&cp, lost, None).await.is_empty());
    assert_eq!(cut(&cp, kept, Some(&last)).await, last);
    let event = until("the Event on the restarted pod", async || {
        restart_events(&kube, &uid_lost).await.into_iter().next()
    })
    .await;
    let message = event.message.unwrap_or_default();
    assert!(
        message.contains(&lost_id) && message.contains("lost every path"),
        "{message}"
    );
    until("the pod that lost every path deleted", async || {
        terminating(&kube, "lost").await.then_some(())
    })
    .await;
    // Two full guardian passes later, the pod whose volume kept a path is untouched, and
    // the one restarted was restarted once.
    let seen = *guardian_passes.borrow_and_update();
    until("two more guardian passes", async || {
        (*guardian_passes.borrow_and_update() >= seen + 2).then_some(())
    })
    .await;
    assert!(
        !terminating(&kube, "kept").await,
        "a pod with a live path is never restarted"
    );
    assert!(restart_events(&kube, &uid_kept).await.is_empty());
    assert_eq!(restart_events(&kube, &uid_lost).await.len(), 1);
    until("the other volume's cut path reconnected", async || {
        (held(&cp.files, kept) == all_kept).then_some(())
    })
    .await;

    drop(recovery);
    for (id, name, uid) in [(&lost_id, "lost", &uid_lost), (&kept_id, "kept", &uid_kept)] {
        let staging = root.path().join(format!(
            "kubelet/plugins/kubernetes.io/csi/volumeDevices/staging/pv-{name}"
        ));
        let target = root.path().join(format!(
            "kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pv-{name}/{uid}"
        ));
        node_client
            .node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
                volume_id: id.clone(),
                target_path: target.display().to_string(),
            })
            .await
            .expect("unpublish");
        node_client
            .node_unstage_volume(csi::NodeUnstageVolumeRequest {
                volume_id: id.clone(),
                staging_target_path: staging.display().to_string(),
            })
            .await
            .expect("unstage");
    }
    let _ = stop.send(());
    let _ = serving.await;
}

//! The driver's `/metrics` against sbsim with real loop devices and mounts: every call is
//! counted under its method, the cluster its volume or class names and its code; a stage
//! the control plane refuses counts a mount error at `connect` and an attach error; the
//! staged volumes are counted at each scrape.

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::*;
use simplyblock_csi::metrics::code_name;
use simplyblock_csi::proto::csi::v1 as csi;
use simplyblock_csi::proto::csiaddons::identity as addons;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CREATE: &str = "/csi.v1.Controller/CreateVolume";
const STAGE: &str = "/csi.v1.Node/NodeStageVolume";
const PUBLISH: &str = "/csi.v1.Node/NodePublishVolume";

/// The body of `GET url` (plain HTTP/1.1), panicking unless it is a 200 in the
/// OpenMetrics format.
pub async fn scrape(url: &str) -> String {
    let rest = url.strip_prefix("http://").expect("http url");
    let (host, path) = rest.split_at(rest.find('/').expect("path"));
    let mut conn = tokio::net::TcpStream::connect(host).await.expect("connect");
    conn.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .expect("request");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).await.expect("answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("head and body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    body.to_owned()
}

/// The value of the sample `name` carrying every label of `labels` (and maybe others);
/// `None` when no sample does.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let (set, value) = match rest.strip_prefix('{') {
            Some(r) => r.split_once("} ")?,
            None => ("", rest.strip_prefix(' ')?),
        };
        let has_all = labels
            .iter()
            .all(|(k, v)| set.split(',').any(|kv| kv == format!("{k}=\"{v}\"")));
        has_all.then(|| value.split_whitespace().next()?.parse().ok())?
    })
}

fn mount_cap() -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_mode: Some(csi::volume_capability::AccessMode {
            mode: csi::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
        }),
        access_type: Some(csi::volume_capability::AccessType::Mount(
            csi::volume_capability::MountVolume {
                fs_type: "xfs".into(),
                ..Default::default()
            },
        )),
    }
}

fn create_request(
    name: &str,
    params: std::collections::HashMap<String, String>,
) -> csi::CreateVolumeRequest {
    csi::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 1 << 30,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![mount_cap()],
        parameters: params,
        ..Default::default()
    }
}

fn stage_request(v: &csi::Volume, staging: &Path) -> csi::NodeStageVolumeRequest {
    csi::NodeStageVolumeRequest {
        volume_id: v.volume_id.clone(),
        staging_target_path: staging.display().to_string(),
        volume_capability: Some(mount_cap()),
        volume_context: v.volume_context.clone(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_is_counted_by_method_cluster_and_code_and_a_refused_stage_by_its_step() {
    let sim = sbsim(3).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let _cleanup = Cleanup {
        dir: dir.path().to_path_buf(),
        files: sim.files.clone(),
    };
    let driver = DriverProc::start(dir.path(), &[sim.entry()], &sim.files, BTreeMap::new()).await;
    let (mut identity, mut ctl, mut node) = driver.clients().await;
    let cluster = sim.cluster.to_string();

    // Nothing staged yet, and nothing counted.
    let before = scrape(&driver.metrics_url).await;
    assert_eq!(
        sample(&before, "simplyblock_csi_volumes_staged_count", &[]),
        Some(0.0),
        "{before}"
    );
    assert_eq!(
        sample(&before, "simplyblock_csi_operations_total", &[]),
        None
    );

    // A call that names no cluster, a csi-addons one, and one over every cluster.
    identity
        .get_plugin_info(csi::GetPluginInfoRequest {})
        .await
        .expect("plugin info");
    addons::identity_client::IdentityClient::new(driver.channel().await)
        .get_identity(addons::GetIdentityRequest {})
        .await
        .expect("addons identity");
    ctl.get_capacity(csi::GetCapacityRequest::default())
        .await
        .expect("capacity of every cluster");

    // Two creates that succeed and one that fails, all in the class's cluster.
    let mut volumes = Vec::new();
    for name in ["metrics-a", "metrics-b"] {
        let v = ctl
            .create_volume(create_request(name, sim.params()))
            .await
            .expect("create")
            .into_inner()
            .volume
            .expect("volume");
        volumes.push(v);
    }
    let mut no_pool = sim.params();
    no_pool.insert("pool_name".into(), "no-such-pool".into());
    let refused = ctl
        .create_volume(create_request("metrics-c", no_pool))
        .await
        .expect_err("no such pool");

    // One stage that succeeds; one the control plane refuses (the pool allows another
    // host only); a publish of a volume never staged.
    let staging = dir.path().join("a-staging");
    node.node_stage_volume(stage_request(&volumes[0], &staging))
        .await
        .expect("stage");
    let gated = sim
        .client
        .create_pool(
            sim.cluster,
            &simplyblock_controlplane::types::PoolCreate {
                name: "gated".into(),
                dhchap: true,
                ..Default::default()
            },
        )
        .await
        .expect("pool");
    sim.client
        .add_pool_host(
            sim.cluster,
            gated.id,
            &simplyblock_csi::handle::host_nqn("another-node-uid"),
        )
        .await
        .expect("another host allowed");
    let mut gated_params = sim.params();
    gated_params.insert("pool_name".into(), "gated".into());
    let gated_volume = ctl
        .create_volume(create_request("metrics-gated", gated_params))
        .await
        .expect("create in the gated pool")
        .into_inner()
        .volume
        .expect("volume");
    let stage_refused = node
        .node_stage_volume(stage_request(
            &gated_volume,
            &dir.path().join("gated-staging"),
        ))
        .await
        .expect_err("this node's host is not allowed");
    let publish_refused = node
        .node_publish_volume(csi::NodePublishVolumeRequest {
            volume_id: volumes[1].volume_id.clone(),
            staging_target_path: dir.path().join("b-staging").display().to_string(),
            target_path: dir.path().join("b-target").display().to_string(),
            volume_capability: Some(mount_cap()),
            ..Default::default()
        })
        .await
        .expect_err("not staged");

    let text = scrape(&driver.metrics_url).await;
    let ops = |method: &str, cluster: &str, code: &str| {
        sample(
            &text,
            "simplyblock_csi_operations_total",
            &[("method", method), ("cluster", cluster), ("code", code)],
        )
    };
    assert_eq!(
        ops("/csi.v1.Identity/GetPluginInfo", "", "OK"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        ops("/identity.Identity/GetIdentity", "", "OK"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        ops("/csi.v1.Controller/GetCapacity", "", "OK"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(ops(CREATE, &cluster, "OK"), Some(3.0), "{text}");
    assert_eq!(
        ops(CREATE, &cluster, code_name(refused.code())),
        Some(1.0),
        "{text}"
    );
    assert_eq!(ops(STAGE, &cluster, "OK"), Some(1.0), "{text}");
    assert_eq!(
        ops(STAGE, &cluster, code_name(stage_refused.code())),
        Some(1.0),
        "{text}"
    );
    assert_eq!(stage_refused.code(), tonic::Code::FailedPrecondition);
    assert_eq!(
        ops(PUBLISH, "", code_name(publish_refused.code())),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "simplyblock_csi_operation_duration_seconds_count",
            &[("method", CREATE), ("cluster", &cluster)]
        ),
        Some(4.0),
        "{text}"
    );

    // The refused stage failed connecting; the publish before anything was done.
    let mount_errors = |reason: &str| {
        sample(
            &text,
            "simplyblock_csi_mount_errors_total",
            &[("reason", reason)],
        )
    };
    assert_eq!(mount_errors("connect"), Some(1.0), "{text}");
    assert_eq!(mount_errors("request"), Some(1.0), "{text}");
    assert_eq!(mount_errors("mount"), None, "{text}");
    assert_eq!(
        sample(
            &text,
            "simplyblock_csi_attach_errors_total",
            &[("cluster", &cluster), ("reason", "FailedPrecondition")]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "simplyblock_csi_volumes_staged_count", &[]),
        Some(1.0),
        "{text}"
    );
    // No sample names a volume.
    for v in volumes.iter().chain([&gated_volume]) {
        assert!(!text.contains(&v.volume_id), "{text}");
    }

    node.node_unstage_volume(csi::NodeUnstageVolumeRequest {
        volume_id: volumes[0].volume_id.clone(),
        staging_target_path: staging.display().to_string(),
    })
    .await
    .expect("unstage");
    let after = scrape(&driver.metrics_url).await;
    assert_eq!(
        sample(&after, "simplyblock_csi_volumes_staged_count", &[]),
        Some(0.0),
        "{after}"
    );
}

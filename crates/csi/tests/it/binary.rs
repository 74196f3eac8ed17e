//! The `simplyblock-csi` binary: flags wire the endpoint, the mode and a cluster given on
//! the command line (its secret in a file); it serves until SIGTERM and removes its
//! socket; `/metrics` where --metrics-address says.

use crate::common::*;
use simplyblock_csi::proto::csi::v1 as csi;
use simplyblock_csi::proto::csi::v1::controller_client::ControllerClient;
use simplyblock_csi::proto::csi::v1::identity_client::IdentityClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_the_controller_from_flags() {
    let sim = sbsim(3).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("csi.sock");
    // The cluster's secret comes from a file, never from a flag the process list shows.
    let secret_file = dir.path().join("cluster-secret");
    std::fs::write(&secret_file, format!("{}\n", sim.cluster_secret)).expect("secret file");
    // A port free a moment ago, so the default's is not needed (and not taken).
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_simplyblock-csi"))
        .arg(format!("--endpoint=unix://{}", socket.display()))
        .args(["--mode", "controller", "--kubernetes=false"])
        .arg(format!(
            "--secret-file={}",
            dir.path().join("absent.json").display()
        ))
        .arg(format!("--cluster-id={}", sim.cluster))
        .arg(format!("--cluster-endpoint={}", sim.server.url))
        .arg(format!("--cluster-secret-file={}", secret_file.display()))
        .arg(format!("--metrics-address=127.0.0.1:{metrics_port}"))
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    eventually("socket", || async {
        tokio::net::UnixStream::connect(&socket)
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    let ch = tonic::transport::Endpoint::try_from("http://localhost")
        .expect("endpoint")
        .connect_with_connector(tower::service_fn({
            let s = socket.clone();
            move |_| {
                let p = s.clone();
                async move {
                    tokio::net::UnixStream::connect(p)
                        .await
                        .map(hyper_util::rt::TokioIo::new)
                }
            }
        }))
        .await
        .expect("connect");
    let mut id = IdentityClient::new(ch.clone());
    let info = id
        .get_plugin_info(csi::GetPluginInfoRequest {})
        .await
        .expect("info")
        .into_inner();
    assert_eq!(info.name, "csi.simplyblock.io");
    let caps = id
        .get_plugin_capabilities(csi::GetPluginCapabilitiesRequest {})
        .await
        .expect("caps")
        .into_inner();
    assert_eq!(
        caps.capabilities.len(),
        5,
        "controller, group controller, topology, online and offline expansion"
    );
    let mut ctl = ControllerClient::new(ch);
    let v = ctl
        .create_volume(csi::CreateVolumeRequest {
            name: "from-the-binary".into(),
            volume_capabilities: vec![csi::VolumeCapability {
                access_mode: Some(csi::volume_capability::AccessMode {
                    mode: csi::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
                }),
                access_type: Some(csi::volume_capability::AccessType::Mount(Default::default())),
            }],
            parameters: sim.params(),
            ..Default::default()
        })
        .await
        .expect("create")
        .into_inner()
        .volume
        .expect("volume");
    assert_eq!(v.capacity_bytes, 1 << 30, "size 0 becomes 1 GiB");
    assert!(
        v.volume_id
            .starts_with(&format!("{}:{}:", sim.cluster, sim.pool))
    );
    // The node service is not served in controller mode.
    let mut node = simplyblock_csi::proto::csi::v1::node_client::NodeClient::new(
        tonic::transport::Endpoint::try_from("http://localhost")
            .expect("endpoint")
            .connect_with_connector(tower::service_fn({
                let s = socket.clone();
                move |_| {
                    let p = s.clone();
                    async move {
                        tokio::net::UnixStream::connect(p)
                            .await
                            .map(hyper_util::rt::TokioIo::new)
                    }
                }
            }))
            .await
            .expect("connect"),
    );
    let e = node
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .expect_err("no node service");
    assert_eq!(e.code(), tonic::Code::Unimplemented);
    let text = crate::metrics::scrape(&format!("http://127.0.0.1:{metrics_port}/metrics")).await;
    let cluster = sim.cluster.to_string();
    for (method, cluster, code) in [
        ("/csi.v1.Identity/GetPluginInfo", "", "OK"),
        ("/csi.v1.Controller/CreateVolume", cluster.as_str(), "OK"),
        ("/csi.v1.Node/NodeGetInfo", "", "Unimplemented"),
    ] {
        let labels = [("method", method), ("cluster", cluster), ("code", code)];
        assert_eq!(
            crate::metrics::sample(&text, "simplyblock_csi_operations_total", &labels),
            Some(1.0),
            "{labels:?}: {text}"
        );
    }
    // The controller stages nothing, so it has no such gauge.
    assert_eq!(
        crate::metrics::sample(&text, "simplyblock_csi_volumes_staged_count", &[]),
        None
    );
    drop(ctl);
    drop(id);
    drop(node);

    let pid = child.id().expect("pid");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = tokio::time::timeout(simplyblock_testenv::wait::PATIENCE, child.wait())
        .await
        .expect("exits on SIGTERM")
        .expect("wait");
    assert!(exit.success(), "{exit:?}");
    assert!(!socket.exists(), "the socket is removed on exit");
}

#[tokio::test]
async fn node_mode_without_a_node_id_says_what_is_missing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let secret_file = dir.path().join("cluster-secret");
    std::fs::write(&secret_file, "x").expect("secret file");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_simplyblock-csi"))
        .args([
            "--mode",
            "node",
            "--kubernetes=false",
            "--cluster-id=11111111-1111-4111-8111-111111111111",
            "--cluster-endpoint=http://127.0.0.1:1",
        ])
        .arg(format!("--cluster-secret-file={}", secret_file.display()))
        .env_remove("NODE_ID")
        .output()
        .await
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--node-id"), "{err}");
}

#[tokio::test]
async fn an_unreadable_api_token_file_stops_the_driver_at_start() {
    // Regression: the token file was read with its error dropped, so the driver served
    // with the CSI secret's credentials instead of the token it was told to use.
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("token");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_simplyblock-csi"))
        .arg(format!(
            "--endpoint=unix://{}",
            dir.path().join("csi.sock").display()
        ))
        .args(["--mode", "controller", "--kubernetes=false"])
        .arg(format!(
            "--secret-file={}",
            dir.path().join("absent.json").display()
        ))
        .args([
            "--cluster-id=11111111-1111-4111-8111-111111111111",
            "--cluster-endpoint=http://127.0.0.1:1",
        ])
        .arg(format!("--api-token-file={}", missing.display()))
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(simplyblock_testenv::wait::PATIENCE, out)
        .await
        .expect("exits at start")
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("API token file") && err.contains(&missing.display().to_string()),
        "{err}"
    );
    assert!(!dir.path().join("csi.sock").exists(), "it never served");
}

#[tokio::test]
async fn a_cluster_secret_is_not_taken_as_a_flag() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_simplyblock-csi"))
        .args([
            "--mode",
            "controller",
            "--kubernetes=false",
            "--cluster-id=11111111-1111-4111-8111-111111111111",
            "--cluster-endpoint=http://127.0.0.1:1",
            "--cluster-secret=visible-to-every-user",
        ])
        .output()
        .await
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unexpected argument '--cluster-secret'"),
        "{err}"
    );
}

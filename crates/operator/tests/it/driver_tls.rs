//! The CSI driver reaches the control plane with the TLS material its SimplyblockDriver
//! mounts. The driver controller observes and plans as it does on every pass; its plugin
//! objects are stored by the API server, and their containers are started as a kubelet
//! would (the Secrets and ConfigMaps as files, the environment resolved, the arguments
//! as written), the one stand-in being `--control-plane-proxy`: sbsim answers at the
//! control plane's name, which does not resolve here.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use simplyblock_api::SimplyblockDriver;
use simplyblock_api::csi_secret;
use simplyblock_csi::cli::Args;
use simplyblock_csi::proto::csi::v1 as csi;
use simplyblock_csi::proto::csi::v1::controller_client::ControllerClient;
use simplyblock_operator::driver::manifests::CSI_CLIENT_TLS_SECRET;
use simplyblock_operator::driver::names::CONTROLLER_STATEFULSET;
use simplyblock_operator::driver::objects::Kind;
use simplyblock_operator::driver::observe::{self, api};
use simplyblock_operator::driver::plan::{self, DriverRef};
use simplyblock_simulator::{Server, ServerTls, Sim, SimConfig};
use tonic::transport::Channel;

use crate::support::{
    MANAGED_TLS_ENDPOINT, MANAGED_TLS_HOST, TOKEN, active_cluster_with_pool, api_server, cp_client,
    fleet, managed_control_plane, namespace, until,
};

const OPERATOR_IMAGE: &str = "quay.io/simplyblock-io/simplyblock-operator:v26.4.0";

/// An sbsim with an active cluster and a pool, answering plain HTTP at its own address
/// (the test's) and, at the control plane's name, TLS from `serving` that takes only
/// clients with a certificate from `clients_from`.
struct ControlPlane {
    server: Server,
    cluster: simplyblock_controlplane::Uuid,
    cluster_secret: String,
    pool: String,
    _dir: tempfile::TempDir,
}

impl ControlPlane {
    async fn start(serving: &simplyblock_certs::Pair, clients_from: &str) -> ControlPlane {
        simplyblock_simulator::install_crypto_provider();
        let dir = tempfile::tempdir().expect("tempdir");
        let fleet_path = dir.path().join("fleet.yaml");
        std::fs::write(&fleet_path, fleet(3)).expect("fleet");
        let config = SimConfig {
            tokens: vec![TOKEN.into()],
            time_scale: 1000.0,
            fleet: Some(fleet_path),
            volume_files: Some(dir.path().join("volumes")),
            ..SimConfig::new(dir.path().join("state"))
        };
        let server = Server::start(Sim::open(config).expect("sim"), "127.0.0.1:0", None)
            .await
            .expect("sbsim");
        server
            .named_tls
            .serve(
                MANAGED_TLS_HOST,
                &ServerTls {
                    cert_pem: serving.cert.clone().into_bytes(),
                    key_pem: serving.key.clone().into_bytes(),
                    client_ca_pem: Some(clients_from.as_bytes().to_vec()),
                    plain_too: false,
                },
            )
            .expect("TLS at the control plane's name");
        let cp = cp_client(&server.url);
        let (cluster, pool) = active_cluster_with_pool(&cp, "csi-tls").await;
        ControlPlane {
            cluster: cluster.id,
            cluster_secret: cluster.secret.expose().to_owned(),
            pool: pool.name,
            server,
            _dir: dir,
        }
    }

    /// The calls that reached the control plane's API over TLS: (method, path, client).
    fn tls_calls(&self) -> Vec<(String, String, Option<String>)> {
        let calls = self
            .server
            .sim
            .calls
            .lock()
            .map(|log| log.since(0))
            .unwrap_or_default();
        calls
            .into_iter()
            .filter(|c| c.path.starts_with("/api/v2/") && c.client.is_some())
            .map(|c| (c.method, c.path, c.client))
            .collect()
    }
}

/// What the operator's namespace holds for the driver: a managed ControlPlane at
/// [`MANAGED_TLS_ENDPOINT`] whose CA is `ca_pem`, the driver's client certificate (the
/// control plane's owner issues it for a managed one), and the CSI secret naming the
/// cluster at that endpoint, as the StorageCluster controller writes it.
async fn namespace_with(
    kube: &kube::Client,
    ns: &str,
    ca_pem: &str,
    client: &simplyblock_certs::Pair,
    cp: &ControlPlane,
) {
    namespace(kube, ns).await;
    managed_control_plane(kube, ns, ca_pem).await;
    let secrets: Api<Secret> = Api::namespaced(kube.clone(), ns);
    let client_tls: Secret = serde_json::from_value(json!({
        "metadata": {"name": CSI_CLIENT_TLS_SECRET},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": client.cert, "tls.key": client.key},
    }))
    .expect("client Secret");
    secrets
        .create(&PostParams::default(), &client_tls)
        .await
        .expect("the driver's client certificate");
    let contents = csi_secret::Contents {
        clusters: vec![csi_secret::Entry {
            cluster_id: cp.cluster.to_string(),
            cluster_endpoint: MANAGED_TLS_ENDPOINT.into(),
            cluster_secret: cp.cluster_secret.clone(),
            extra: Default::default(),
        }],
        local: [cp.cluster.to_string()].into(),
        extra: Default::default(),
    };
    let csi: Secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(csi_secret::NAME.into()),
            ..Default::default()
        },
        data: Some(csi_secret::secret_data(&contents)),
        ..Secret::default()
    };
    secrets
        .create(&PostParams::default(), &csi)
        .await
        .expect("the CSI secret");
}

/// A pass of the driver controller over a driver asking for mutual TLS, in `ns`: its
/// namespaced objects applied (the ConfigMaps, the workloads) as the controller applies
/// them, and the controller plugin's StatefulSet as the API server stores it.
async fn rendered_controller(kube: &kube::Client, ns: &str) -> StatefulSet {
    let driver: SimplyblockDriver = serde_json::from_value(json!({
        "apiVersion": simplyblock_api::API_VERSION, "kind": "SimplyblockDriver",
        "metadata": {"name": "simplyblock", "namespace": ns, "uid": format!("{ns}-driver")},
        "spec": {"tls": {"enableTLS": true, "enableMutualTLS": true}},
    }))
    .expect("driver");
    let mut obs = observe::observe(kube, &driver, ns, OPERATOR_IMAGE)
        .await
        .expect("observe");
    // The API server is shared: other tests' drivers are not this namespace's concern,
    // and the chart's CSI bindings there name the accounts of the shared release's
    // namespace; this test plays a release in `ns`, whose bindings name its accounts.
    obs.drivers = vec![DriverRef::of(&driver)];
    obs.bindings = simplyblock_operator::driver::rbac::grants()
        .iter()
        .map(|g| {
            let binding = json!({
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": g.role_kind(), "name": g.name},
                "subjects": [{"kind": "ServiceAccount", "name": g.account, "namespace": ns}],
            });
            (g.binding_key(), plan::Seen::Found(binding))
        })
        .collect();
    let Ok(converge) = plan::plan(&driver, &obs) else {
        panic!("the driver is held");
    };
    for (key, body) in converge.apply.iter().filter(|(k, _)| k.kind.namespaced()) {
        let mut body = body.clone();
        // The driver is not stored (the API server is shared, and admits one driver).
        body["metadata"]["ownerReferences"] = Value::Null;
        api(kube, key.kind, ns)
            .patch(
                &key.name,
                &PatchParams::apply("driver-tls-test").force(),
                &Patch::Apply(&serde_json::from_value::<DynamicObject>(body).expect("object")),
            )
            .await
            .unwrap_or_else(|e| panic!("applying {key}: {e}"));
    }
    assert!(
        converge
            .apply
            .iter()
            .any(|(k, _)| k.kind == Kind::StatefulSet),
        "the controller plugin is rendered"
    );
    Api::<StatefulSet>::namespaced(kube.clone(), ns)
        .get(CONTROLLER_STATEFULSET)
        .await
        .expect("the controller plugin's StatefulSet")
}

/// The controller plugin's container, mounted under `root` as its kubelet would, started
/// in this process with its arguments and environment and `--control-plane-proxy`.
async fn start_plugin(
    kube: &kube::Client,
    ns: &str,
    set: &StatefulSet,
    proxy: SocketAddr,
    root: &Path,
) -> (
    simplyblock_testenv::kubelet::Mounted,
    ControllerClient<Channel>,
) {
    let pod = set.spec.template.spec.clone().expect("pod template");
    let mounted = simplyblock_testenv::kubelet::mount(kube, ns, &pod, "csi-controller", "w1", root)
        .await
        .expect("the plugin's volumes");
    let mut args = mounted.args.clone();
    args.push(format!("--control-plane-proxy={proxy}"));
    let args = Args::from_container(&args, &mounted.env).expect("the plugin's arguments");
    let driver = args.driver(None).await.expect("the plugin starts");
    let socket = args.socket().expect("socket");
    let routes = driver.routes().expect("routes");
    let s = socket.clone();
    tokio::spawn(async move {
        let _ = simplyblock_csi::serve(&s, routes, std::future::pending()).await;
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
    (mounted, ControllerClient::new(channel))
}

fn create(cp: &ControlPlane, name: &str) -> csi::CreateVolumeRequest {
    let parameters: HashMap<String, String> = [
        ("cluster_id".to_owned(), cp.cluster.to_string()),
        ("pool_name".to_owned(), cp.pool.clone()),
    ]
    .into();
    csi::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 1 << 30,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![csi::VolumeCapability {
            access_mode: Some(csi::volume_capability::AccessMode {
                mode: csi::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
            }),
            access_type: Some(csi::volume_capability::AccessType::Mount(
                csi::volume_capability::MountVolume {
                    fs_type: "ext4".into(),
                    ..Default::default()
                },
            )),
        }],
        parameters,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_started_as_the_driver_renders_it_provisions_over_mutual_tls() {
    let kube = api_server().await.client().await.expect("client");
    let ca = simplyblock_certs::Authority::new("control plane CA").expect("CA");
    let serving = ca
        .serving(MANAGED_TLS_HOST, &[MANAGED_TLS_HOST], &[])
        .expect("serving");
    let client = ca.client("simplyblock-csi", None).expect("client");
    let cp = ControlPlane::start(&serving, &ca.cert_pem()).await;
    let ns = "driver-tls-mutual";
    namespace_with(&kube, ns, &ca.cert_pem(), &client, &cp).await;

    let set = rendered_controller(&kube, ns).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (mounted, mut controller) = start_plugin(
        &kube,
        ns,
        &set,
        cp.server.addr,
        &dir.path().join("controller"),
    )
    .await;
    assert!(
        mounted.args.iter().any(|a| a.starts_with("--ca-file="))
            && mounted
                .args
                .iter()
                .any(|a| a.starts_with("--client-cert-file=")),
        "the rendered plugin takes the CA and its certificate: {:?}",
        mounted.args
    );

    let volume = controller
        .create_volume(create(&cp, "pvc-over-tls"))
        .await
        .expect("CreateVolume over mutual TLS")
        .into_inner()
        .volume
        .expect("a volume");
    assert!(
        volume.volume_id.starts_with(&cp.cluster.to_string()),
        "{}",
        volume.volume_id
    );
    let calls = cp.tls_calls();
    assert!(
        calls.iter().any(|(m, p, c)| m == "POST"
            && p.ends_with("/volumes/")
            && c.as_deref() == Some("simplyblock-csi")),
        "the volume was created over TLS, with the driver's certificate: {calls:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_the_mounted_ca_did_not_sign_is_refused_until_the_ca_is_updated() {
    let kube = api_server().await.client().await.expect("client");
    // The control plane's CA was replaced; the Secret the driver mounts still holds the
    // one before, which did not sign what the server presents.
    let before = simplyblock_certs::Authority::new("control plane CA, before").expect("CA");
    let now = simplyblock_certs::Authority::new("control plane CA, now").expect("CA");
    let serving = now
        .serving(MANAGED_TLS_HOST, &[MANAGED_TLS_HOST], &[])
        .expect("serving");
    let client = now.client("simplyblock-csi", None).expect("client");
    let cp = ControlPlane::start(&serving, &now.cert_pem()).await;
    let ns = "driver-tls-refused";
    namespace_with(&kube, ns, &before.cert_pem(), &client, &cp).await;

    let set = rendered_controller(&kube, ns).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (mounted, mut controller) = start_plugin(
        &kube,
        ns,
        &set,
        cp.server.addr,
        &dir.path().join("controller"),
    )
    .await;

    let refused = controller
        .create_volume(create(&cp, "pvc-refused"))
        .await
        .expect_err("a server the CA did not sign");
    let message = refused.message();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{message}");
    for said in [
        MANAGED_TLS_ENDPOINT,
        "invalid peer certificate: UnknownIssuer",
        "does not trust",
        "give the CA that signed",
    ] {
        assert!(message.contains(said), "{said:?} missing from: {message}");
    }
    assert_eq!(
        cp.tls_calls(),
        vec![],
        "no request, and so no bearer, reached the server"
    );

    // The Secret now holds the current CA; the kubelet swaps the mounted file, and the
    // running plugin reads it at its next call.
    Api::<Secret>::namespaced(kube.clone(), ns)
        .patch(
            "cp-ca",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"ca.crt": now.cert_pem()}})),
        )
        .await
        .expect("the CA Secret updated");
    mounted.refresh().await.expect("the kubelet's update");
    let volume = tokio::time::timeout(
        Duration::from_secs(30),
        controller.create_volume(create(&cp, "pvc-refused")),
    )
    .await
    .expect("an answer")
    .expect("CreateVolume once the CA is the server's")
    .into_inner()
    .volume
    .expect("a volume");
    assert!(volume.volume_id.starts_with(&cp.cluster.to_string()));
}

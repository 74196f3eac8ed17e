//! The chart as a user installs it, on a real node: testenv's one-node cluster (kubelet,
//! containerd, CNI, kube-proxy, CoreDNS, the scheduler and the controller manager), the
//! images built by scripts/build-images.sh and imported (never pulled), and `helm install`
//! of deploy/charts/simplyblock-operator. Nothing of the operator is started by the test:
//! the kubelet runs its pods with the arguments, environment, files and account the chart
//! renders.
//!
//! What the test sets that a user would not, and why:
//! - the control plane is sbsim (the one stand-in: the simplyblock management API needs
//!   FoundationDB and SPDK storage nodes, which do not run here), served over TLS on the
//!   node's address and given to the chart as a managed control plane
//!   (`controlplane.managed.*`), with its CA and a bearer token in Secrets, as a user of a
//!   managed control plane gives them;
//! - `image.pullPolicy=Never` and `driver.image.pullPolicy=Never`: the images are imported,
//!   no registry exists to ask; they are imported under a mirror's names
//!   (`registry.simplyblock.test/sb/...`), which the release lists in `allowedRegistries`
//!   with a pull secret, as a platform team installs from its own registry;
//! - `preflight.enabled=false` for the install that runs: this machine lacks the NVMe/TCP
//!   modules and hugepages, which the first install's preflight hook reports, and refuses.
//!
//! What it does not reach yet, and why: the SimplyblockDriver's pods cannot start here, for
//! csi-attacher v4.8.1, csi-resizer, csi-external-health-monitor-controller and
//! csi-node-driver-registrar cannot be built (the Go module proxy refuses them; see
//! `simplyblock_testenv::assets::SIDECARS`), and discovery finds no drive to deploy on,
//! for the machine has no NVMe device (nor the modules for one over a loop target).

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use simplyblock_api::control_plane::ControlPlane;
use simplyblock_simulator::{Server, ServerTls, Sim, SimConfig};
use simplyblock_testenv::node::{self, Node};

const NAMESPACE: &str = "simplyblock-system";
/// The chart's operator Deployment.
const OPERATOR_DEPLOYMENT: &str = "simplyblock-operator";
const TOKEN: &str = "node-test-token";
/// The registry (and path) the test's mirror serves the images by.
const MIRROR: &str = "registry.simplyblock.test/sb";

/// The preflight hook's report: the log of its (failed, so kept) Job's pod.
async fn preflight_report(kube: &kube::Client) -> String {
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NAMESPACE);
    let pod = pods
        .list(&ListParams::default().labels("app.kubernetes.io/component=preflight"))
        .await
        .expect("pods")
        .items
        .into_iter()
        .find_map(|p| p.metadata.name)
        .expect("the preflight Job's pod");
    pods.logs(&pod, &Default::default()).await.expect("its log")
}

/// sbsim on the node's address, serving TLS with a certificate for that address.
async fn control_plane(dir: &std::path::Path) -> (Server, String) {
    simplyblock_simulator::install_crypto_provider();
    let ca = simplyblock_certs::Authority::new("sbsim CA").expect("CA");
    let serving = ca
        .serving("control-plane", &[], &[std::net::IpAddr::V4(node::NODE_IP)])
        .expect("serving certificate");
    let tls = ServerTls {
        cert_pem: serving.cert.into_bytes(),
        key_pem: serving.key.into_bytes(),
        client_ca_pem: None,
        plain_too: false,
    };
    let config = SimConfig {
        tokens: vec![TOKEN.into()],
        ..SimConfig::new(dir.join("state"))
    };
    let server = Server::start(
        Sim::open(config).expect("sim"),
        &format!("{}:0", node::NODE_IP),
        Some(tls),
    )
    .await
    .expect("sbsim on the node's address");
    (server, ca.cert_pem())
}

/// testenv's wait for a fact, for checks that say what they saw instead of the fact: the
/// last of those is in the failure.
async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let last = std::sync::Mutex::new(String::new());
    simplyblock_testenv::wait::until_explained(
        what,
        limit,
        async || match check().await {
            Ok(value) => Some(value),
            Err(state) => {
                *last.lock().expect("last state") = state;
                None
            }
        },
        || format!("last seen: {}", last.lock().expect("last state")),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_runs_on_a_real_node_as_installed() {
    let node = Node::up(&node::default_images_dir())
        .await
        .expect("node up");
    let env = node.env();
    let kube = env.client().await.expect("client");
    let dir = tempfile::tempdir().expect("tempdir");
    let (sbsim, ca_pem) = control_plane(dir.path()).await;
    let endpoint = format!("https://{}:{}", node::NODE_IP, sbsim.addr.port());

    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).expect("namespace");
    Api::<Namespace>::all(kube.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace");
    let secrets: Api<Secret> = Api::namespaced(kube.clone(), NAMESPACE);
    for (name, key, value) in [
        ("control-plane-ca", "ca.crt", ca_pem.as_str()),
        ("control-plane-credentials", "token", TOKEN),
    ] {
        let secret: Secret =
            serde_json::from_value(json!({"metadata": {"name": name}, "stringData": {key: value}}))
                .expect("secret");
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("secret");
    }

    // The operator's and the driver's images under the names the mirror serves them by.
    let version = env!("CARGO_PKG_VERSION");
    for image in ["simplyblock-operator", "simplyblock-csi"] {
        node.tag(
            &format!("quay.io/simplyblock-io/{image}:{version}"),
            &format!("{MIRROR}/{image}:{version}"),
        )
        .expect("the mirror's name");
    }
    let pull: Secret = serde_json::from_value(json!({
        "metadata": {"name": "mirror-pull"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson":
            r#"{"auths":{"registry.simplyblock.test":{"auth":"cHVsbDpwdWxs"}}}"#},
    }))
    .expect("pull secret");
    secrets
        .create(&PostParams::default(), &pull)
        .await
        .expect("the pull secret");
    let operator_image = format!("{MIRROR}/simplyblock-operator");
    let csi_image = format!("{MIRROR}/simplyblock-csi");
    let mut values = vec![
        ("deployment.profile", "managed"),
        ("controlplane.managed.endpoint", endpoint.as_str()),
        (
            "controlplane.managed.credentialsSecretRef",
            "control-plane-credentials",
        ),
        ("controlplane.managed.caBundleSecretRef", "control-plane-ca"),
        ("image.pullPolicy", "Never"),
        ("driver.image.pullPolicy", "Never"),
        ("allowedRegistries[0]", MIRROR),
        ("allowedRegistries[1]", "registry.k8s.io/sig-storage"),
        ("imagePullSecrets[0].name", "mirror-pull"),
        ("image.repository", operator_image.as_str()),
        ("driver.image.repository", csi_image.as_str()),
    ];

    // The first install: the preflight hook runs on the node and finds it lacking, every
    // problem at once; nothing of the release is installed.
    let refused = simplyblock_testenv::chart::install(env.kubeconfig_path(), NAMESPACE, &values)
        .expect_err("preflight refuses a node without NVMe/TCP");
    assert!(refused.contains("simplyblock-preflight"), "{refused}");
    let report = preflight_report(&kube).await;
    for missing in [
        "FAIL nvme-tcp module",
        "FAIL nvme-fabrics module",
        "FAIL snapshot CRDs",
        "FAIL snapshot controller",
    ] {
        assert!(report.contains(missing), "{missing}: {report}");
    }
    assert!(
        !report.contains("FoundationDB"),
        "the managed profile needs no FoundationDB: {report}"
    );
    let deployments: Api<Deployment> = Api::namespaced(kube.clone(), NAMESPACE);
    assert!(
        deployments
            .get_opt(OPERATOR_DEPLOYMENT)
            .await
            .expect("read")
            .is_none(),
        "a refused install starts no operator"
    );
    simplyblock_testenv::chart::uninstall(env.kubeconfig_path(), NAMESPACE)
        .expect("the failed release is removed");

    values.push(("preflight.enabled", "false"));
    simplyblock_testenv::chart::install(env.kubeconfig_path(), NAMESPACE, &values)
        .expect("helm install");
    // The operator's pods run as the chart renders them, and become ready.
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NAMESPACE);
    eventually(
        "the operator's two replicas are ready",
        Duration::from_secs(180),
        || async {
            let status = deployments
                .get(OPERATOR_DEPLOYMENT)
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            if status.ready_replicas == Some(2) {
                return Ok(());
            }
            let waiting: Vec<String> = pods
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .iter()
                .flat_map(|p| {
                    p.status
                        .iter()
                        .flat_map(|s| s.container_statuses.iter().flatten())
                        .map(|c| format!("{:?}", c.state))
                        .collect::<Vec<_>>()
                })
                .collect();
            Err(format!("{status:?}; containers: {waiting:?}"))
        },
    )
    .await;

    // One of them leads.
    let operator_pods: Vec<String> = pods
        .list(&ListParams::default().labels("app.kubernetes.io/component=operator"))
        .await
        .expect("pods")
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    let leases: Api<Lease> = Api::namespaced(kube.clone(), NAMESPACE);
    let holder = eventually(
        "a pod holds the leader Lease",
        Duration::from_secs(60),
        || async {
            let lease = leases
                .get_opt(simplyblock_api::LEADER_LEASE)
                .await
                .map_err(|e| e.to_string())?;
            lease
                .and_then(|l| l.spec?.holder_identity)
                .ok_or_else(|| "no holder".to_string())
        },
    )
    .await;
    assert!(
        operator_pods.contains(&holder),
        "the Lease is held by {holder}, not one of the operator's pods {operator_pods:?}"
    );

    // The leader reaches the managed control plane at its endpoint over TLS.
    let control_planes: Api<ControlPlane> = Api::namespaced(kube.clone(), NAMESPACE);
    eventually(
        "the ControlPlane is Available at the endpoint given",
        Duration::from_secs(120),
        || async {
            let cp = control_planes
                .get("simplyblock")
                .await
                .map_err(|e| e.to_string())?;
            let status = serde_json::to_value(&cp.status).unwrap_or_default();
            if status["phase"] == "Available" && status["endpoint"] == endpoint.as_str() {
                Ok(())
            } else {
                Err(status.to_string())
            }
        },
    )
    .await;

    // Over TLS, with the token of the chart's credentials Secret (sbsim answers 401 to any
    // other): every call the operator's pod made was answered.
    let calls = sbsim.sim.calls.lock().expect("call log").since(0);
    assert!(
        calls.iter().any(|c| c.path.starts_with("/api/v2/")),
        "the operator called the control plane: {calls:?}"
    );
    let refused: Vec<_> = calls.iter().filter(|c| c.status == 401).collect();
    assert!(refused.is_empty(), "calls refused their token: {refused:?}");

    // The API server reaches the webhooks through the chart's Service: a v1alpha1 write is
    // converted (the conversion webhook, which the operator pointed at its Service) and
    // meets v1alpha2's rules (the validating webhooks).
    let v1alpha1 = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("storage.simplyblock.io", "v1alpha1", "StorageCluster"),
        "storageclusters",
    );
    let clusters: Api<DynamicObject> = Api::namespaced_with(kube.clone(), NAMESPACE, &v1alpha1);
    let cluster = |name: &str, annotations: serde_json::Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha1", "kind": "StorageCluster",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"maxSubsystemCount": 10, "vcpuCount": 8}
        }))
        .expect("cluster")
    };
    eventually(
        "a v1alpha1 write is converted",
        Duration::from_secs(60),
        || async {
            clusters
                .create(&PostParams::default(), &cluster("at-v1alpha1", json!({})))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
    let refused = clusters
        .create(
            &PostParams::default(),
            &cluster(
                "elsewhere",
                json!({"storage.simplyblock.io/conversion-spec.storageNodes.image": "\"evil.example.com/x:1\""}),
            ),
        )
        .await
        .expect_err("an image from another registry, carried at v1alpha1");
    assert!(
        refused
            .to_string()
            .contains("evil.example.com/x:1 is not from an allowed registry")
            && refused.to_string().contains(MIRROR),
        "refused for its image by the registries the release allows: {refused}"
    );
    Api::<DynamicObject>::namespaced_with(kube.clone(), NAMESPACE, &v1alpha1)
        .delete("at-v1alpha1", &Default::default())
        .await
        .expect("deleted");

    // Discovery's probe Job ran on the node and read this machine, as installed (hostPID,
    // the host's root read-only): its report has this machine's processors. The machine
    // has no NVMe drive, so the run ends saying no worker has a device it would use.
    let ops: Api<simplyblock_api::operator_ops::OperatorOps> =
        Api::namespaced(kube.clone(), NAMESPACE);
    let message = eventually(
        "initial discovery ends",
        Duration::from_secs(180),
        || async {
            let op = ops
                .get_opt("initial-discovery")
                .await
                .map_err(|e| e.to_string())?
                .ok_or("not raised yet")?;
            let status = serde_json::to_value(&op.status).unwrap_or_default();
            match status["phase"].as_str() {
                Some("Failed" | "Succeeded") => {
                    Ok(status["message"].as_str().unwrap_or_default().to_owned())
                }
                _ => Err(status.to_string()),
            }
        },
    )
    .await;
    let reports: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(kube.clone(), NAMESPACE);
    let report = reports
        .list(&ListParams::default())
        .await
        .expect("config maps")
        .items
        .into_iter()
        .find_map(|cm| cm.data?.remove("report.json"))
        .expect("the probe's report");
    let report: serde_json::Value = serde_json::from_str(&report).expect("a JSON report");
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    assert_eq!(report["node"], node::NODE_NAME, "{report}");
    assert_eq!(
        report["cpu"]["onlineCpus"], cpus,
        "this machine's processors: {report}"
    );
    assert!(
        message.contains(node::NODE_NAME) && message.contains("no candidate disk"),
        "discovery on a machine without NVMe drives: {message}"
    );

    // The driver's node plugin, as the operator rendered it: the mirror's image, pulled
    // with the release's secret.
    let daemonsets: Api<k8s_openapi::api::apps::v1::DaemonSet> =
        Api::namespaced(kube.clone(), NAMESPACE);
    let plugin = eventually(
        "the operator renders the CSI node plugin",
        Duration::from_secs(60),
        || async {
            daemonsets
                .get_opt(simplyblock_operator::driver::names::NODE_DAEMONSET)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    let plugin_pod = plugin.spec.template.spec.expect("pod spec");
    assert_eq!(
        plugin_pod
            .image_pull_secrets
            .unwrap_or_default()
            .into_iter()
            .map(|s| s.name)
            .collect::<Vec<_>>(),
        ["mirror-pull"]
    );
    assert!(
        plugin_pod
            .containers
            .iter()
            .any(|c| c.image.as_deref() == Some(&format!("{csi_image}:{version}"))),
        "the node plugin runs the mirror's image: {:?}",
        plugin_pod
            .containers
            .iter()
            .map(|c| &c.image)
            .collect::<Vec<_>>()
    );

    // helm upgrade to the next release, whose storagepools CRD has a new printer column:
    // its pre-upgrade hook Job applies the new crds/ on the node before Helm goes on.
    let next_dir = tempfile::tempdir().expect("tempdir");
    let next = next_dir.path().join("simplyblock-operator");
    let column = simplyblock_testenv::chart::next_release(&next).expect("the next release");
    simplyblock_testenv::chart::upgrade(env.kubeconfig_path(), NAMESPACE, &next, &[])
        .expect("helm upgrade to the next release");
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(kube.clone());
    let pools = crds
        .get("storagepools.storage.simplyblock.io")
        .await
        .expect("the CRD");
    assert!(
        pools
            .spec
            .versions
            .iter()
            .flat_map(|v| v.additional_printer_columns.iter().flatten())
            .any(|c| c.name == column),
        "the upgrade applied the next release's CRD"
    );

    // helm uninstall finishes: its hook removes the driver while the operator runs, the
    // ControlPlane is kept with the data, and nothing is left Terminating.
    simplyblock_testenv::chart::uninstall(env.kubeconfig_path(), NAMESPACE)
        .expect("helm uninstall");
    let group = kube::Discovery::new(kube.clone())
        .filter(&["storage.simplyblock.io"])
        .run()
        .await
        .expect("discovery");
    let mut terminating = Vec::new();
    let mut kinds = Vec::new();
    for (resource, _) in group.groups().flat_map(|g| g.recommended_resources()) {
        kinds.push(resource.kind.clone());
        for object in Api::<DynamicObject>::all_with(kube.clone(), &resource)
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
        {
            if object.metadata.deletion_timestamp.is_some() {
                terminating.push(format!("{} {:?}", resource.kind, object.metadata.name));
            }
        }
    }
    assert!(kinds.len() > 10, "the CRDs are kept: {kinds:?}");
    assert!(terminating.is_empty(), "left Terminating: {terminating:?}");
    assert!(
        control_planes
            .get_opt("simplyblock")
            .await
            .expect("read")
            .is_some(),
        "the ControlPlane is kept"
    );
    let drivers = Api::<DynamicObject>::namespaced_with(
        kube.clone(),
        NAMESPACE,
        &ApiResource::erase::<simplyblock_api::SimplyblockDriver>(&()),
    );
    assert!(
        drivers
            .get_opt("simplyblock")
            .await
            .expect("read")
            .is_none()
    );
    // The driver's workloads go with it: deleted when the operator releases the driver,
    // and gone once the garbage collector has taken their pods (not at once).
    simplyblock_testenv::wait::until("the driver's workloads gone with it", async || {
        daemonsets
            .get_opt(simplyblock_operator::driver::names::NODE_DAEMONSET)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        deployments
            .get_opt(OPERATOR_DEPLOYMENT)
            .await
            .expect("read")
            .is_none()
    );

    drop(sbsim);
    tokio::task::spawn_blocking(move || drop(node))
        .await
        .expect("node down");
    let left = node::leftovers();
    assert!(left.is_empty(), "the node left: {left:#?}");
}

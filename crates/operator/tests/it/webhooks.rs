//! The webhooks, registered by URL with a real API server, answering real writes.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use simplyblock_api::{ClusterDeploymentConfig, StorageCluster, StorageNode};
use simplyblock_operator::runtime::serving::ServerLimits;
use simplyblock_operator::webhooks::WebhookServer;
use tokio::net::TcpStream;

use crate::support::{OPERATOR_NAMESPACE, Served, webhooks as setup};

async fn namespace(client: &kube::Client, name: &str) {
    simplyblock_testenv::create_namespace(client, name)
        .await
        .expect("namespace");
}

async fn node(client: &kube::Client, name: &str) {
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).expect("node");
    match Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating Node {name}: {e}"),
    }
}

fn api<K: kube::Resource<DynamicType = ()>>(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<K>(&()))
}

fn obj(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("object")
}

/// The webhook's refusal text, or a panic if the write went through.
fn denied<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "not an admission refusal: {s:?}");
            s.message
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn document(workers: &[&str]) -> Value {
    json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "ClusterDeploymentConfig",
        "metadata": {"name": "doc"},
        "spec": {
            "cluster": {"name": "sb", "maxSubsystemCount": 10, "vcpuCount": 4,
                        "stripe": {"dataChunks": 1, "parityChunks": 1}},
            "nodeSets": [{"name": "rack-a", "groups": [
                {"name": "g", "workers": workers, "devices": {"nvme": ["0000:01:00.0"]}}
            ]}]
        }
    })
}

#[tokio::test]
async fn approval_is_checked_against_the_cluster_and_lists_every_problem() {
    setup().await;
    let env = crate::support::api_server().await;
    let client = env.client().await.expect("client");
    namespace(&client, "approve").await;
    for n in ["wh-a1", "wh-a2"] {
        node(&client, n).await;
    }
    let docs = api::<ClusterDeploymentConfig>(&client, "approve");
    docs.create(
        &PostParams::default(),
        &obj(document(&["wh-a1", "wh-a2", "wh-ghost"])),
    )
    .await
    .expect("a draft naming a missing worker is admitted: drafts are checked on structure only");

    let mut approved = docs.get("doc").await.expect("doc");
    approved.data["spec"]["approved"] = json!(true);
    let message = denied(docs.replace("doc", &PostParams::default(), &approved).await);
    assert_eq!(
        message,
        "admission webhook \"vclusterdeploymentconfig.simplyblock.io\" denied the request: the document cannot be approved: 1 problem(s) (1 WorkerNotFound); WorkerNotFound: worker wh-ghost is not a Node of this cluster; fix spec.nodeSets[0].groups[0].workers or add the node before approving"
    );

    node(&client, "wh-ghost").await;
    let mut approved = docs.get("doc").await.expect("doc");
    approved.data["spec"]["approved"] = json!(true);
    docs.replace("doc", &PostParams::default(), &approved)
        .await
        .expect("with every worker present the approval goes through");

    // A second document creating the same cluster is refused at its approval.
    let mut second = document(&["wh-a1"]);
    second["metadata"]["name"] = json!("second");
    second["spec"]["approved"] = json!(true);
    let message = denied(docs.create(&PostParams::default(), &obj(second)).await);
    assert!(
        message.contains("the document cannot be approved: 3 problem(s) (1 StripeBelowMinimumNodes, 1 StripeBelowMinimumWorkers, 1 ClusterExists)"),
        "{message}"
    );
    assert!(
        message
            .contains("ClusterExists: the approved document doc already creates StorageCluster sb"),
        "{message}"
    );
}

/// The approving write is refused with the reason that names what the document is about:
/// no cluster at all, a cluster to grow that does not exist, and growth with devices of
/// the other class than the cluster is built from.
#[tokio::test]
async fn approval_names_a_missing_target_and_a_device_class_mismatch() {
    setup().await;
    let env = crate::support::api_server().await;
    let client = env.client().await.expect("client");
    namespace(&client, "approve-targets").await;
    for n in ["wh-t1", "wh-t2", "wh-t3"] {
        node(&client, n).await;
    }
    let docs = api::<ClusterDeploymentConfig>(&client, "approve-targets");
    let approved = |name: &str, spec: Value| {
        let mut d = document(&["wh-t1", "wh-t2", "wh-t3"]);
        d["metadata"]["name"] = json!(name);
        d["spec"]["approved"] = json!(true);
        for (k, v) in spec.as_object().cloned().unwrap_or_default() {
            d["spec"][k] = v;
        }
        obj(d)
    };
    const DENIED: &str =
        "admission webhook \"vclusterdeploymentconfig.simplyblock.io\" denied the request: ";

    let mut nothing = approved("nothing", json!({}));
    nothing.data["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("cluster");
    let message = denied(docs.create(&PostParams::default(), &nothing).await);
    assert!(
        message.starts_with(&format!("{DENIED}the document cannot be approved: ")),
        "{message}"
    );
    assert!(message.contains("NoClusterNamed: the document names neither spec.clusterRef (to grow a cluster) nor spec.cluster.name (to create one)"), "{message}");

    let mut missing = approved("missing", json!({"clusterRef": "nowhere"}));
    missing.data["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("cluster");
    let message = denied(docs.create(&PostParams::default(), &missing).await);
    assert!(message.contains("ClusterNotFound: spec.clusterRef names StorageCluster nowhere, which does not exist in this namespace"), "{message}");

    api::<StorageCluster>(&client, "approve-targets")
        .create(
            &PostParams::default(),
            &obj(json!({
                "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
                "metadata": {"name": "blocks"},
                "spec": {"maxSubsystemCount": 10, "vcpuCount": 4, "deviceClass": "LogicalBlock",
                         "stripe": {"dataChunks": 1, "parityChunks": 1}}
            })),
        )
        .await
        .expect("cluster");
    let mut grow = approved("grow", json!({"clusterRef": "blocks"}));
    grow.data["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("cluster");
    let message = denied(docs.create(&PostParams::default(), &grow).await);
    assert!(message.contains("the document cannot be approved: 1 problem(s) (1 DeviceClassMismatch); DeviceClassMismatch: the document's groups name "), "{message}");

    // The same growth with devices of the cluster's class is admitted.
    let mut fixed = approved("grow", json!({"clusterRef": "blocks"}));
    fixed.data["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("cluster");
    fixed.data["spec"]["nodeSets"][0]["groups"][0]["devices"] = json!({"block": ["/dev/vdb"]});
    docs.create(&PostParams::default(), &fixed)
        .await
        .expect("growth with the cluster's device class is admitted");
}

fn storage_cluster() -> Value {
    json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
        "metadata": {"name": "sb"},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 8}
    })
}

fn storage_node(vcpus: i64) -> Value {
    json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNode",
        "metadata": {"name": "sb-w1-0"},
        "spec": {"clusterRef": "sb", "workerNode": "webhook-w1", "slot": 0,
                 "config": {"sizing": {"vcpuCount": vcpus}, "deviceNames": ["0000:01:00.0"]}}
    })
}

#[tokio::test]
async fn storage_nodes_are_checked_against_their_cluster_and_guarded() {
    setup().await;
    let env = crate::support::api_server().await;
    let client = env.client().await.expect("client");
    namespace(&client, "nodes").await;
    let nodes = api::<StorageNode>(&client, "nodes");

    let message = denied(
        nodes
            .create(&PostParams::default(), &obj(storage_node(8)))
            .await,
    );
    assert_eq!(
        message,
        "admission webhook \"vstoragenode.simplyblock.io\" denied the request: ClusterNotFound: spec.clusterRef names StorageCluster sb, which does not exist in namespace nodes; clusterRef cannot change later, so create the node naming an existing cluster"
    );

    api::<StorageCluster>(&client, "nodes")
        .create(&PostParams::default(), &obj(storage_cluster()))
        .await
        .expect("cluster");
    // Every problem at once: a worker that is no Node, and a sizing of another cluster.
    let message = denied(
        nodes
            .create(&PostParams::default(), &obj(storage_node(4)))
            .await,
    );
    assert_eq!(
        message,
        "admission webhook \"vstoragenode.simplyblock.io\" denied the request: WorkerNotFound: spec.workerNode names Node webhook-w1, which does not exist; name a worker of this cluster (kubectl get nodes); spec.config.sizing.vcpuCount is 4 but StorageCluster sb runs 8 vCPUs per node; set 8 (the control plane assumes one core layout per cluster)"
    );
    let worker: k8s_openapi::api::core::v1::Node =
        serde_json::from_value(json!({"metadata": {"name": "webhook-w1"}})).expect("node");
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .create(&PostParams::default(), &worker)
        .await
        .expect("the worker");
    let message = denied(
        nodes
            .create(&PostParams::default(), &obj(storage_node(4)))
            .await,
    );
    assert!(message.ends_with("spec.config.sizing.vcpuCount is 4 but StorageCluster sb runs 8 vCPUs per node; set 8 (the control plane assumes one core layout per cluster)"), "{message}");
    assert!(!message.contains("WorkerNotFound"), "{message}");
    nodes
        .create(&PostParams::default(), &obj(storage_node(8)))
        .await
        .expect("a node matching its cluster is admitted");

    let mut moved = nodes.get("sb-w1-0").await.expect("node");
    moved.data["spec"]["workerNode"] = json!("w2");
    let message = denied(
        nodes
            .replace("sb-w1-0", &PostParams::default(), &moved)
            .await,
    );
    assert!(
        message.contains("spec.workerNode is written by the simplyblock operator only"),
        "{message}"
    );

    // Only the operator's own service account may write it: another account of its
    // namespace, however privileged, may not.
    let as_account = async |account: &str| {
        let binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding =
            serde_json::from_value(json!({
                "metadata": {"name": format!("webhook-test-{account}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": OPERATOR_NAMESPACE}]
            }))
            .expect("binding");
        Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(client.clone())
            .patch(
                &format!("webhook-test-{account}"),
                &kube::api::PatchParams::apply("webhook-test").force(),
                &kube::api::Patch::Apply(&binding),
            )
            .await
            .expect("RBAC for the impersonated account");
        let mut config = env.config().clone();
        config.auth_info.impersonate = Some(format!(
            "system:serviceaccount:{OPERATOR_NAMESPACE}:{account}"
        ));
        let client = kube::Client::try_from(config).expect("client");
        let group = "storage.simplyblock.io";
        crate::support::until_allowed(&client, "update", group, "storagenodes", "nodes").await;
        client
    };
    let neighbour = as_account("simplyblock-nodeprobe").await;
    let as_neighbour = api::<StorageNode>(&neighbour, "nodes");
    let mut moved = as_neighbour.get("sb-w1-0").await.expect("node");
    moved.data["spec"]["workerNode"] = json!("w2");
    let message = denied(
        as_neighbour
            .replace("sb-w1-0", &PostParams::default(), &moved)
            .await,
    );
    assert!(
        message.contains("spec.workerNode is written by the simplyblock operator only"),
        "{message}"
    );
    // The operator as the chart's account under the chart's roles alone: a binding of its
    // own here would give every test sharing this API server a stronger operator.
    let operator = crate::support::operator_kube().await;
    let as_operator = api::<StorageNode>(&operator, "nodes");
    let mut moved = as_operator.get("sb-w1-0").await.expect("node");
    moved.data["spec"]["workerNode"] = json!("w2");
    let written = as_operator
        .replace("sb-w1-0", &PostParams::default(), &moved)
        .await
        .expect("the operator writes the single-writer fields");
    assert_eq!(written.data["spec"]["workerNode"], json!("w2"));
}

#[tokio::test]
async fn a_rotated_certificate_is_served_without_a_restart() {
    let served = setup().await;
    let before = served.certs.current_der();
    served.certs.rotate().expect("rotate");
    assert_ne!(
        before,
        served.certs.current_der(),
        "rotation issued a new certificate"
    );
    // The API server trusts the CA, not the leaf: writes still pass through the webhook.
    let env = crate::support::api_server().await;
    let client = env.client().await.expect("client");
    namespace(&client, "rotation").await;
    let docs = api::<ClusterDeploymentConfig>(&client, "rotation");
    docs.create(&PostParams::default(), &obj(document(&["nobody"])))
        .await
        .expect("the webhook answers over the new certificate");
    let mut approved = docs.get("doc").await.expect("doc");
    approved.data["spec"]["approved"] = json!(true);
    let message = denied(docs.replace("doc", &PostParams::default(), &approved).await);
    assert!(
        message.contains("WorkerNotFound: worker nobody"),
        "{message}"
    );
    // A new handshake is answered with the new certificate.
    assert_eq!(peer_certificate(served).await, served.certs.current_der());
}

/// The leaf certificate a fresh TLS handshake with the webhook server presents, verified
/// against the webhook CA.
async fn peer_certificate(served: &Served) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(served.certs.ca_bundle().as_bytes()).expect("ca"))
        .expect("root");
    let config = rustls::ClientConfig::builder_with_provider(
        rustls::crypto::ring::default_provider().into(),
    )
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let addr = served.base.trim_start_matches("https://");
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").expect("name"), tcp)
        .await
        .expect("a verified handshake");
    tls.get_ref()
        .1
        .peer_certificates()
        .expect("a peer certificate")[0]
        .to_vec()
}

#[tokio::test]
async fn a_discovery_run_with_an_unreadable_size_range_is_refused() {
    setup().await;
    let env = crate::support::api_server().await;
    let client = env.client().await.expect("client");
    namespace(&client, "operatorops").await;
    let ops = api::<simplyblock_api::OperatorOps>(&client, "operatorops");
    let run = |range: &str| {
        obj(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "OperatorOps",
            "metadata": {"name": format!("run-{}", range.len())},
            "spec": {"action": "Discover", "discover": {"deviceFilter": {"driveSizeRange": range}}}
        }))
    };
    let message = denied(ops.create(&PostParams::default(), &run("lots")).await);
    assert!(
        message.starts_with("admission webhook \"voperatorops.simplyblock.io\" denied the request: spec.discover.deviceFilter.driveSizeRange: "),
        "{message}"
    );
    ops.create(&PostParams::default(), &run("100G-2T"))
        .await
        .expect("a readable range is admitted");
}

/// The webhook CA lives in a Secret: a second start finds the same CA instead of making
/// one nobody trusts yet; a CA near its end is replaced, and the bundle trusts the new CA
/// and the previous one, so certificates of either verify while the change rolls out.
#[tokio::test]
async fn the_webhook_ca_is_kept_in_a_secret_and_rotated_with_an_overlapping_bundle() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Patch, PatchParams};
    use simplyblock_operator::webhooks::ca;
    let env = crate::support::api_server().await;
    let client = env.client().await.expect("client");
    namespace(&client, "webhook-ca").await;
    let first = ca::ensure(&client, "webhook-ca").await.expect("a CA");
    let again = ca::ensure(&client, "webhook-ca")
        .await
        .expect("the CA again");
    assert_eq!(
        first.bundle, again.bundle,
        "a second start reuses the stored CA"
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "webhook-ca");
    let stored = secrets.get(ca::SECRET).await.expect("the CA Secret");
    let end: jiff::Timestamp = stored.metadata.annotations.clone().unwrap_or_default()
        [ca::NOT_AFTER]
        .parse()
        .expect("a recorded end");
    let left = end.duration_since(jiff::Timestamp::now());
    assert!(
        left > jiff::SignedDuration::from_hours(364 * 24) && left <= ca::VALIDITY,
        "a CA is valid for a year: {left:?}"
    );

    // Near its end: the next look replaces it and keeps the old one trusted.
    let soon = jiff::Timestamp::now()
        .saturating_add(jiff::SignedDuration::from_hours(24))
        .expect("time");
    secrets
        .patch(
            ca::SECRET,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {ca::NOT_AFTER: soon.to_string()}}})),
        )
        .await
        .expect("age the CA");
    let rotated = ca::ensure(&client, "webhook-ca").await.expect("a new CA");
    assert_ne!(rotated.authority.cert_pem(), first.authority.cert_pem());
    assert!(
        rotated.bundle.contains(&first.authority.cert_pem()),
        "the old CA stays trusted"
    );
    assert!(rotated.bundle.contains(&rotated.authority.cert_pem()));
    for (which, authority) in [("old", &first.authority), ("new", &rotated.authority)] {
        let leaf = authority
            .serving("webhook", &["webhook.example"], &[])
            .expect("a serving certificate");
        verify(&rotated.bundle, &leaf.cert, "webhook.example")
            .unwrap_or_else(|e| panic!("a certificate of the {which} CA does not verify: {e}"));
    }
    let unrelated = simplyblock_certs::Authority::new("other")
        .expect("ca")
        .serving("webhook", &["webhook.example"], &[])
        .expect("cert");
    assert!(verify(&rotated.bundle, &unrelated.cert, "webhook.example").is_err());
}

/// Verifies `leaf` for `name` against every CA in `bundle`.
fn verify(bundle: &str, leaf: &str, name: &str) -> Result<(), String> {
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(bundle.as_bytes()) {
        roots.add(ca.expect("a CA in the bundle")).expect("root");
    }
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        roots.into(),
        rustls::crypto::ring::default_provider().into(),
    )
    .build()
    .expect("verifier");
    let leaf = CertificateDer::from_pem_slice(leaf.as_bytes()).expect("leaf PEM");
    let server = ServerName::try_from(name.to_string()).expect("name");
    verifier
        .verify_server_cert(&leaf, &[], &server, &[], UnixTime::now())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Installed with the chart, the webhook configuration is Helm's but for the caBundles:
/// the operator writes those alone, so an upgrade that changes a webhook goes through
/// without forcing, and the next bundle the operator publishes leaves Helm's change be.
/// Without the chart's configuration the chart's account installs nothing; an operator run
/// by an administrator installs the whole of it.
#[tokio::test]
async fn the_operator_and_helm_share_the_webhook_configuration_without_a_conflict() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use kube::api::{DeleteParams, Patch, PatchParams};
    use simplyblock_operator::webhooks::{CONFIGURATION_NAME, Endpoint, register};

    let ns = "webhook-ownership";
    // An API server of its own: the configuration here names a Service nobody serves.
    let (env, admin) = crate::support::own_api_server(ns).await;
    let operator = crate::support::operator_kube_on(&env, ns).await;
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(admin.clone());
    let endpoint = Endpoint::Service {
        namespace: ns.into(),
        name: "simplyblock-operator-webhook".into(),
    };
    let bundles = |c: &ValidatingWebhookConfiguration| -> Vec<String> {
        c.webhooks
            .iter()
            .flatten()
            .map(|w| {
                let bundle = w.client_config.ca_bundle.clone().unwrap_or_default();
                String::from_utf8_lossy(&bundle.0).into_owned()
            })
            .collect()
    };

    let ours = simplyblock_operator::webhooks::configuration(&endpoint, "")
        .webhooks
        .map_or(0, |w| w.len());

    // No chart: the chart's account creates no configuration, and says whose it is ...
    configurations
        .delete(CONFIGURATION_NAME, &DeleteParams::default())
        .await
        .expect("the placeholder deleted");
    let refused = register(&operator, &endpoint, "first-ca")
        .await
        .expect_err("the operator's account created a webhook configuration")
        .to_string();
    assert!(refused.contains("the chart installs it"), "{refused}");
    // ... and an operator run by an administrator installs every webhook.
    register(&admin, &endpoint, "first-ca")
        .await
        .expect("registered");
    let whole = configurations
        .get(CONFIGURATION_NAME)
        .await
        .expect("created");
    assert_eq!(bundles(&whole), vec!["first-ca"; ours]);
    configurations
        .delete(CONFIGURATION_NAME, &DeleteParams::default())
        .await
        .expect("deleted");

    // The chart's, applied as Helm applies it: server-side, conflicts not forced.
    let chart = simplyblock_testenv::chart::render(ns, &[("deployment.profile", "empty")])
        .expect("the chart renders")
        .into_iter()
        .find(|o| {
            simplyblock_testenv::chart::kind_and_name(o)
                == format!("ValidatingWebhookConfiguration/{CONFIGURATION_NAME}")
        })
        .expect("the chart's webhook configuration");
    let helm = |object: &DynamicObject| {
        let configurations = configurations.clone();
        let object = object.clone();
        async move {
            configurations
                .patch(
                    CONFIGURATION_NAME,
                    &PatchParams::apply("helm"),
                    &Patch::Apply(&object),
                )
                .await
        }
    };
    helm(&chart).await.expect("the chart installs");
    register(&operator, &endpoint, "first-ca")
        .await
        .expect("registered");
    let installed = configurations.get(CONFIGURATION_NAME).await.expect("read");
    assert_eq!(bundles(&installed), vec!["first-ca"; ours]);

    // An upgrade changes a webhook; the operator's bundles are not in Helm's way.
    let mut upgraded = chart.clone();
    for webhook in upgraded.data["webhooks"].as_array_mut().expect("webhooks") {
        webhook["timeoutSeconds"] = json!(7);
    }
    helm(&upgraded)
        .await
        .expect("an upgrade goes through without forcing a conflict");
    register(&operator, &endpoint, "second-ca")
        .await
        .expect("registered");
    let after = configurations.get(CONFIGURATION_NAME).await.expect("read");
    assert_eq!(bundles(&after), vec!["second-ca"; ours]);
    for webhook in after.webhooks.iter().flatten() {
        assert_eq!(webhook.timeout_seconds, Some(7), "{}", webhook.name);
        assert!(
            webhook.client_config.service.is_some() && webhook.client_config.url.is_none(),
            "{}: the chart's Service stays",
            webhook.name
        );
    }
}

/// A TLS client configuration trusting the webhook CA.
fn trusting_client(served: &Served) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(served.certs.ca_bundle().as_bytes()).expect("ca"))
        .expect("root");
    Arc::new(
        rustls::ClientConfig::builder_with_provider(
            rustls::crypto::ring::default_provider().into(),
        )
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

/// A connection that has sent its ClientHello and will send nothing more.
async fn stalled_handshake(addr: &str, config: &Arc<rustls::ClientConfig>) -> TcpStream {
    use tokio::io::AsyncWriteExt;
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let mut client = rustls::ClientConnection::new(config.clone(), name).expect("client");
    let mut hello = Vec::new();
    client.write_tls(&mut hello).expect("client hello");
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.write_all(&hello).await.expect("send the client hello");
    tcp
}

/// `GET /healthz` over a new TLS connection: the answer as text.
async fn healthz(addr: &str, config: &Arc<rustls::ClientConfig>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let mut tls = tokio_rustls::TlsConnector::from(config.clone())
        .connect(name, tcp)
        .await
        .expect("handshake");
    tls.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .await
        .expect("request");
    let mut answer = String::new();
    let _ = tls.read_to_string(&mut answer).await;
    answer
}

/// Reads (and drops) whatever the server sends until it closes the connection.
async fn until_closed<S: tokio::io::AsyncRead + Unpin>(mut stream: S) {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
}

#[tokio::test]
async fn a_flood_of_idle_connections_does_not_keep_the_api_server_from_an_answer() {
    const IDLE: usize = 1_000;
    const STALLED: usize = 50;
    let served = setup().await;
    let env = crate::support::api_server().await;
    let client = env.client().await.expect("client");
    namespace(&client, "flood").await;
    let docs = api::<ClusterDeploymentConfig>(&client, "flood");
    docs.create(&PostParams::default(), &obj(document(&["nobody"])))
        .await
        .expect("a draft is admitted");

    let addr = served.base.trim_start_matches("https://").to_string();
    let config = trusting_client(served);
    let flooded = std::time::Instant::now();
    let mut flood = Vec::new();
    for _ in 0..IDLE {
        flood.push(TcpStream::connect(&addr).await.expect("an idle connection"));
    }
    for _ in 0..STALLED {
        flood.push(stalled_handshake(&addr, &config).await);
    }
    println!(
        "opened {IDLE} idle connections and {STALLED} stalled handshakes in {:?}",
        flooded.elapsed()
    );

    // The server itself, asked directly over a new connection.
    let asked = std::time::Instant::now();
    let health = healthz(&addr, &config).await;
    println!(
        "a new connection's GET /healthz was answered {:?} after connecting, with the flood open",
        asked.elapsed()
    );
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");

    // A write the webhook refuses, through the API server, while the flood is open: the
    // answer is the webhook's refusal, not the API server failing to call it.
    let mut approved = docs.get("doc").await.expect("doc");
    approved.data["spec"]["approved"] = json!(true);
    let asked = std::time::Instant::now();
    let message = denied(docs.replace("doc", &PostParams::default(), &approved).await);
    let answered_in = asked.elapsed();
    println!(
        "the webhook's refusal arrived {answered_in:?} after the request, with the flood open"
    );
    assert!(
        message.contains("WorkerNotFound: worker nobody"),
        "{message}"
    );
    assert!(
        answered_in < std::time::Duration::from_secs(10),
        "the answer took longer than the admission timeout: {answered_in:?}"
    );

    // Every flood connection is closed by the server: displaced past the connection bound
    // or past the handshake timeout. The deadline is generous; the figure is printed.
    let closing = std::time::Instant::now();
    let closed = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        futures::future::join_all(flood.into_iter().map(until_closed)),
    )
    .await;
    assert!(
        closed.is_ok(),
        "the webhook server still held flood connections a minute on"
    );
    println!(
        "the server closed all {} flood connections within {:?}",
        IDLE + STALLED,
        closing.elapsed()
    );
}

#[tokio::test]
async fn idle_connections_and_stalled_handshakes_are_closed_after_their_timeouts() {
    let served = setup().await;
    let limits = ServerLimits {
        handshake_timeout: Duration::from_millis(500),
        // Longer than the idle timeout, so the last connection is closed for being idle.
        header_read_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(1),
        max_connections: 8,
    };
    let server = WebhookServer::bind(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        served.certs.clone(),
        axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" })),
    )
    .await
    .expect("bind")
    .with_limits(limits);
    let addr = server.local_addr().expect("addr").to_string();
    let serving = tokio::spawn(server.run());
    let config = trusting_client(served);

    let started = std::time::Instant::now();
    until_closed(TcpStream::connect(&addr).await.expect("connect")).await;
    println!(
        "a silent TCP connection was closed after {:?}",
        started.elapsed()
    );

    let started = std::time::Instant::now();
    until_closed(stalled_handshake(&addr, &config).await).await;
    println!(
        "a stalled handshake was closed after {:?}",
        started.elapsed()
    );

    // A completed handshake and no request: closed at the header timeout.
    let tcp = TcpStream::connect(&addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let tls = tokio_rustls::TlsConnector::from(config.clone())
        .connect(name, tcp)
        .await
        .expect("handshake");
    let started = std::time::Instant::now();
    until_closed(tls).await;
    println!(
        "a TLS connection that sent no request was closed after {:?}",
        started.elapsed()
    );

    // A completed handshake and one request, then silence: closed once idle.
    use tokio::io::AsyncWriteExt;
    let tcp = TcpStream::connect(&addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let mut tls = tokio_rustls::TlsConnector::from(config.clone())
        .connect(name, tcp)
        .await
        .expect("handshake");
    tls.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .expect("request");
    let started = std::time::Instant::now();
    until_closed(tls).await;
    println!(
        "a TLS connection idle after one request was closed after {:?}",
        started.elapsed()
    );
    serving.abort();
}

/// The worker of the StorageNode the removal tests act on; not the one another test of
/// the shared API server expects to be missing.
const FILTER_WORKER: &str = "snops-filter-w1";

/// In `ns`: a StorageCluster, a worker Node and StorageNode sb-w1-0 on it, for
/// StorageNodeOps the webhook admits.
async fn storage_node_in(client: &kube::Client, ns: &str) {
    node(client, FILTER_WORKER).await;
    api::<StorageCluster>(client, ns)
        .create(&PostParams::default(), &obj(storage_cluster()))
        .await
        .expect("cluster");
    let mut storage_node = storage_node(8);
    storage_node["spec"]["workerNode"] = json!(FILTER_WORKER);
    api::<StorageNode>(client, ns)
        .create(&PostParams::default(), &obj(storage_node))
        .await
        .expect("node");
}

fn removal(name: &str, remove: Option<&str>) -> DynamicObject {
    let mut spec = json!({"nodeRef": "sb-w1-0", "action": "Remove"});
    if let Some(pattern) = remove {
        spec["remove"] = json!({"systemVolumeFilterRegex": pattern});
    }
    obj(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNodeOps",
        "metadata": {"name": name}, "spec": spec,
    }))
}

const NODE_OPS_DENIED: &str =
    "admission webhook \"vstoragenodeops.simplyblock.io\" denied the request: ";

#[tokio::test]
async fn a_removal_filter_that_could_delete_any_volume_is_refused_naming_each_problem() {
    // Regression: any pattern was admitted, `.*` among them, and the drain deleted every
    // volume of the node it matched that no PersistentVolume here claimed.
    setup().await;
    let env = crate::support::api_server().await;
    let client = env.client().await.expect("client");
    namespace(&client, "snops-filter").await;
    storage_node_in(&client, "snops-filter").await;
    let ops = api::<simplyblock_api::StorageNodeOps>(&client, "snops-filter");
    let advice = "The drain deletes, rather than moves, every volume of the node whose name it matches; give a pattern anchored with ^ to a prefix only the system's own volumes carry, like the default ^sb-fio-baseline-.*";

    let message = denied(
        ops.create(&PostParams::default(), &removal("all", Some(".*")))
            .await,
    );
    assert_eq!(
        message,
        format!(
            "{NODE_OPS_DENIED}spec.remove.systemVolumeFilterRegex \".*\" is refused: it does not start with ^, so it matches anywhere in a name; it matches the empty name, and so every name at its start; it matches ordinary volume names (a, z, 0, data, db-0, backup, test, volume-1, postgres-data-postgres-0, pvc-3f0c2b1e-9a4d-4c7e-8b2f-6d1e0a9c5b47, 3f0c2b1e-9a4d-4c7e-8b2f-6d1e0a9c5b47). {advice}"
        )
    );
    let message = denied(
        ops.create(
            &PostParams::default(),
            &removal("loose", Some("sb-fio-baseline-(")),
        )
        .await,
    );
    assert_eq!(
        message,
        format!(
            "{NODE_OPS_DENIED}spec.remove.systemVolumeFilterRegex \"sb-fio-baseline-(\" is refused: it does not start with ^, so it matches anywhere in a name; it is not a regular expression (unclosed group at character 17). {advice}"
        )
    );
    let message = denied(
        ops.create(
            &PostParams::default(),
            &removal("half", Some("^sb-fio-baseline-.*|bench")),
        )
        .await,
    );
    assert_eq!(
        message,
        format!(
            "{NODE_OPS_DENIED}spec.remove.systemVolumeFilterRegex \"^sb-fio-baseline-.*|bench\" is refused: not every alternative is anchored with ^, so one matches anywhere in a name. {advice}"
        )
    );
    let message = denied(
        ops.create(&PostParams::default(), &removal("letters", Some("^[a-z]")))
            .await,
    );
    assert!(
        message.contains("it matches ordinary volume names (a, z, data, db-0, backup, test, volume-1, postgres-data-postgres-0, pvc-"),
        "{message}"
    );

    ops.create(
        &PostParams::default(),
        &removal("bench", Some("^sb-fio-baseline-[0-9]+$")),
    )
    .await
    .expect("an anchored prefix is admitted");
    ops.create(&PostParams::default(), &removal("default", None))
        .await
        .expect("a Remove without a filter is admitted");
}

/// The v1alpha1 view of StorageNodeOps in `ns`.
/// How the v1alpha1 writes webhook says it: the same write tried at v1alpha2 meets the
/// CRD's rule. The API server reports whichever refusal came first.
const FROZEN_AT_V1ALPHA2: &str = "spec.remove is immutable";

fn v1alpha1_node_ops(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("storage.simplyblock.io", "v1alpha1", "StorageNodeOps"),
        "storagenodeops",
    );
    Api::namespaced_with(client.clone(), ns, &resource)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_filter_cannot_be_added_or_changed_after_creation_at_either_version() {
    // Regression: at v1alpha1 (spec.drain) the filter could be added to, or changed on, an
    // admitted Remove; v1alpha1's schema has no rule against it, and nothing else looked.
    use kube::api::{Patch, PatchParams};
    const NS: &str = "snops-frozen";
    // The conversion webhook is pointed at this process, as in an installation upgraded
    // from the Go operator (CRDs that stored v1alpha1).
    let (_env, admin, serving) =
        crate::support::moved_over_api_server(NS, &["storagenodeops.storage.simplyblock.io"]).await;
    storage_node_in(&admin, NS).await;

    let ops = api::<simplyblock_api::StorageNodeOps>(&admin, NS);
    let old = v1alpha1_node_ops(&admin, NS);
    ops.create(&PostParams::default(), &removal("bare", None))
        .await
        .expect("a Remove without a filter");
    ops.create(
        &PostParams::default(),
        &removal("filtered", Some("^sb-fio-baseline-.*")),
    )
    .await
    .expect("a Remove with the default filter");
    let frozen = format!(
        "{NODE_OPS_DENIED}spec.remove is fixed at creation (at v1alpha1, spec.drain): the drain deletes the volumes its filter names, so an operation runs with the filter it was admitted with; create another operation with the filter you need"
    );
    let drain = |pattern: &str| {
        Patch::Merge(json!({"spec": {"drain": {"systemVolumeFilterRegex": pattern}}}))
    };
    // Added at v1alpha1, even a filter that would be admitted at creation.
    let message = denied(
        old.patch(
            "bare",
            &PatchParams::default(),
            &drain("^sb-fio-baseline-.*"),
        )
        .await,
    );
    assert!(
        message == frozen || message.contains(FROZEN_AT_V1ALPHA2),
        "{message}"
    );
    // Changed at v1alpha1.
    let message = denied(
        old.patch("filtered", &PatchParams::default(), &drain(".*"))
            .await,
    );
    assert!(
        message == frozen || message.contains(FROZEN_AT_V1ALPHA2),
        "{message}"
    );
    // Removed at v1alpha1.
    let message = denied(
        old.patch(
            "filtered",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"drain": null}})),
        )
        .await,
    );
    assert!(
        message == frozen || message.contains(FROZEN_AT_V1ALPHA2),
        "{message}"
    );
    // At v1alpha2 the CRD's own rules refuse the same, before the webhook is asked.
    for (name, spec) in [
        (
            "bare",
            json!({"remove": {"systemVolumeFilterRegex": "^sb-fio-baseline-.*"}}),
        ),
        (
            "filtered",
            json!({"remove": {"systemVolumeFilterRegex": ".*"}}),
        ),
    ] {
        match ops
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
        {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 422, "{s:?}");
                assert!(
                    s.message.contains("spec.remove is immutable"),
                    "{}",
                    s.message
                );
            }
            other => panic!("{name}: expected a refusal, got {other:?}"),
        }
    }
    for (name, want) in [("bare", None), ("filtered", Some("^sb-fio-baseline-.*"))] {
        let op = ops.get(name).await.expect("op");
        assert_eq!(
            op.data["spec"]["remove"]["systemVolumeFilterRegex"].as_str(),
            want,
            "{name}"
        );
    }
    // Created at v1alpha1, the filter is checked as at v1alpha2.
    let created = obj(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha1", "kind": "StorageNodeOps",
        "metadata": {"name": "wide"},
        "spec": {"storageNodeRef": "sb-w1-0", "action": "remove",
                 "drain": {"systemVolumeFilterRegex": ".*"}},
    }));
    // Said by this kind's webhook, or by the v1alpha1-writes webhook's dry run quoting it:
    // the API server reports whichever refusal came first.
    let message = denied(old.create(&PostParams::default(), &created).await);
    assert!(
        message.contains(
            "spec.remove.systemVolumeFilterRegex \".*\" is refused: it does not start with ^"
        ),
        "{message}"
    );
    // Other writes at v1alpha1 still go: the webhook looks at spec.remove only.
    old.patch(
        "filtered",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "storage"}}})),
    )
    .await
    .expect("a label written at v1alpha1");
    serving.abort();
}

/// `result` was refused because the webhook could not be called.
fn unreachable<T: std::fmt::Debug>(result: Result<T, kube::Error>, what: &str) {
    match result {
        Err(kube::Error::Api(s)) if s.message.contains("failed calling webhook") => {}
        other => panic!("{what}: not refused by the unreachable webhook: {other:?}"),
    }
}

/// With the operator down (its webhooks registered, nothing listening at their endpoint,
/// every one `Fail`), a deletion still finishes: a finalizer is released from an object
/// being deleted, an operation marked `storage.simplyblock.io/force-delete` is deleted,
/// and the namespace controller deletes what a namespace held. What the webhooks guard
/// stays guarded: a spec change and an unmarked deletion are still refused.
#[tokio::test]
async fn deletion_finishes_while_the_operator_is_down() {
    use kube::api::{DeleteParams, Patch, PatchParams};
    use simplyblock_api::keys::FORCE_DELETE_ANNOTATION;
    use simplyblock_api::{StorageClusterOps, StorageNodeOps};
    use simplyblock_operator::webhooks::{Endpoint, NAMESPACE_CONTROLLER};

    let ns = "wedge";
    let (env, kube) = crate::support::own_api_server(ns).await;
    let finalizer = "storage.simplyblock.io/test-hold";
    let node_ops = api::<StorageNodeOps>(&kube, ns);
    let cluster_ops = api::<StorageClusterOps>(&kube, ns);
    let nodes = api::<StorageNode>(&kube, ns);
    // Created before the webhooks are registered: the operator is already down.
    for (api, object) in [
        (
            &node_ops,
            json!({"apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNodeOps",
                   "metadata": {"name": "restart", "finalizers": [finalizer]},
                   "spec": {"nodeRef": "sb-w1-0", "action": "Restart"}}),
        ),
        (
            &cluster_ops,
            json!({"apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageClusterOps",
                   "metadata": {"name": "restart"},
                   "spec": {"clusterRef": "sb", "action": "Restart"}}),
        ),
        (&nodes, {
            let mut n = storage_node(4);
            n["metadata"]["finalizers"] = json!([finalizer]);
            n
        }),
    ] {
        api.create(&PostParams::default(), &obj(object))
            .await
            .expect("created");
    }
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        l.local_addr().expect("addr").port()
    };
    // The chart's configuration, its webhooks at an address where no one answers.
    simplyblock_operator::webhooks::register(
        &kube,
        &Endpoint::Url(format!("https://127.0.0.1:{closed}")),
        "no one answers",
    )
    .await
    .expect("the webhooks registered");
    let merge = |v: Value| Patch::Merge(v);
    let params = PatchParams::default();

    // Guarded still: an unmarked deletion of a running operation, a spec change.
    unreachable(
        node_ops.delete("restart", &DeleteParams::default()).await,
        "an unmarked delete",
    );
    unreachable(
        nodes
            .patch(
                "sb-w1-0",
                &params,
                &merge(json!({"spec": {"workerNode": "elsewhere"}})),
            )
            .await,
        "a spec change",
    );

    // The mark, then the deletion and the finalizer's release.
    node_ops
        .patch(
            "restart",
            &params,
            &merge(json!({"metadata": {"annotations": {FORCE_DELETE_ANNOTATION: "true"}}})),
        )
        .await
        .expect("the mark is an update that changes no spec");
    node_ops
        .delete("restart", &DeleteParams::default())
        .await
        .expect("a marked operation is deleted");
    node_ops
        .patch(
            "restart",
            &params,
            &merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("its finalizer released");
    assert!(node_ops.get_opt("restart").await.expect("read").is_none());

    // A StorageNode being deleted (no DELETE rule) gives its finalizer up, unmarked, but
    // its spec stays guarded while it goes.
    nodes
        .delete("sb-w1-0", &DeleteParams::default())
        .await
        .expect("deleting the node");
    unreachable(
        nodes
            .patch(
                "sb-w1-0",
                &params,
                &merge(json!({"spec": {"workerNode": "elsewhere"}})),
            )
            .await,
        "a spec change while the node goes",
    );
    nodes
        .patch(
            "sb-w1-0",
            &params,
            &merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("the finalizer of a node being deleted is released");
    assert!(nodes.get_opt("sb-w1-0").await.expect("read").is_none());

    // The namespace controller deletes a running operation unmarked (its account as
    // kube-controller-manager runs it, with the right to delete).
    let system = "kube-system";
    let account = NAMESPACE_CONTROLLER.rsplit(':').next().expect("account");
    let sa: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": account}})).expect("account");
    Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(kube.clone(), system)
        .create(&PostParams::default(), &sa)
        .await
        .expect("the namespace controller's account");
    let binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "wedge-namespace-controller"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": system}]
    }))
    .expect("binding");
    Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(kube.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("its right to delete");
    unreachable(
        cluster_ops
            .delete("restart", &DeleteParams::default())
            .await,
        "an unmarked delete by the user",
    );
    let controller = env
        .service_account_client(system, account)
        .await
        .expect("the namespace controller's client");
    let group = "storage.simplyblock.io";
    crate::support::until_allowed(&controller, "delete", group, "storageclusterops", ns).await;
    api::<StorageClusterOps>(&controller, ns)
        .delete("restart", &DeleteParams::default())
        .await
        .expect("the namespace controller deletes the operation");
    assert!(
        cluster_ops
            .get_opt("restart")
            .await
            .expect("read")
            .is_none()
    );
}

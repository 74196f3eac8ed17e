//! Enrollment on the real API server: the storage-node DaemonSet selects its workers only
//! by a label a kubelet may not set on its own Node, and an installation of an earlier
//! release moves to that label without a storage-node pod losing its worker.
//!
//! The test API server does not run the NodeRestriction plugin (it has no kubelets), so
//! what is shown is the selector and the labels the operator writes, not the plugin.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_api::keys::{
    CLUSTER_LABEL, ENROLLMENT_LABEL, LEGACY_ENROLLMENT_LABEL, NAMESPACE_LABEL, WORKER_LABEL,
};
use simplyblock_api::{StorageCluster, StorageNode};
use simplyblock_operator::runtime::context::Context;
use simplyblock_operator::workload;

use crate::support;

const NS: &str = "enrollment";

async fn labels(nodes: &Api<Node>, worker: &str) -> BTreeMap<String, String> {
    nodes
        .get(worker)
        .await
        .expect("worker Node")
        .metadata
        .labels
        .unwrap_or_default()
}

/// Creates the Node of `worker` with `labels`.
async fn create_worker(nodes: &Api<Node>, worker: &str, labels: serde_json::Value) {
    let node: Node =
        serde_json::from_value(json!({"metadata": {"name": worker, "labels": labels}}))
            .expect("node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("worker Node");
}

/// Whether a DaemonSet with `selector` places a pod on a Node with `labels`.
fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[tokio::test]
async fn a_worker_labelled_as_its_kubelet_may_label_it_is_not_selected_and_the_old_label_moves() {
    let kube = support::api_server().await.client().await.expect("client");
    support::namespace(&kube, NS).await;
    let nodes: Api<Node> = Api::all(kube.clone());
    // en-w1: a worker of an earlier release's installation, with a storage-node pod the old
    // selector placed; en-w2: a worker new to the cluster; en-w3: a worker whose kubelet
    // labelled its own Node as earlier releases enrolled workers.
    let old = json!({LEGACY_ENROLLMENT_LABEL: "sb", NAMESPACE_LABEL: NS});
    for (worker, labels) in [
        ("en-w1", old.clone()),
        ("en-w2", json!({})),
        ("en-w3", old.clone()),
    ] {
        create_worker(&nodes, worker, labels).await;
    }
    let sc: StorageCluster = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
        "metadata": {"name": "sb", "namespace": NS},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 4,
                 "stripe": {"dataChunks": 1, "parityChunks": 1}}
    }))
    .expect("cluster");
    let cluster = Api::<StorageCluster>::namespaced(kube.clone(), NS)
        .create(&PostParams::default(), &sc)
        .await
        .expect("StorageCluster");
    let storage_nodes: Api<StorageNode> = Api::namespaced(kube.clone(), NS);
    for worker in ["en-w1", "en-w2"] {
        let sn: StorageNode = serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNode",
            "metadata": {"name": simplyblock_api::names::storage_node_name("sb", worker, 0),
                         "labels": {WORKER_LABEL: worker}},
            "spec": {"clusterRef": "sb", "workerNode": worker, "slot": 0,
                     "config": {"sizing": {"vcpuCount": 4, "minHugePagesSize": "4G"}}},
        }))
        .expect("storage node");
        storage_nodes
            .create(&PostParams::default(), &sn)
            .await
            .expect("StorageNode");
    }
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NS);
    let placed: Pod = serde_json::from_value(json!({
        "metadata": {"name": "simplyblock-storage-node-sb-old",
                     "labels": {CLUSTER_LABEL: "sb", "app.kubernetes.io/name": "simplyblock-storage-node"}},
        "spec": {"nodeName": "en-w1", "nodeSelector": old,
                 "containers": [{"name": "storage-node", "image": workload::DEFAULT_IMAGE}]},
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &placed)
        .await
        .expect("the old storage-node pod");

    let ctx = Arc::new(
        Context::new(
            support::operator_kube().await,
            support::cp_client("http://127.0.0.1:9"),
            support::MANAGED_TLS_ENDPOINT.into(),
            NS.into(),
        )
        .watching(NS),
    );
    let cluster = Arc::new(cluster);
    workload::reconcile(cluster.clone(), ctx.clone())
        .await
        .expect("a pass of the workload controller");

    let ds = Api::<DaemonSet>::namespaced(kube.clone(), NS)
        .get("simplyblock-storage-node-sb")
        .await
        .expect("DaemonSet");
    let selector = ds
        .spec
        .template
        .spec
        .and_then(|s| s.node_selector)
        .unwrap_or_default();
    assert_eq!(
        selector,
        BTreeMap::from([
            (ENROLLMENT_LABEL.to_string(), "sb".to_string()),
            (NAMESPACE_LABEL.to_string(), NS.to_string()),
        ])
    );
    let w1 = labels(&nodes, "en-w1").await;
    let w2 = labels(&nodes, "en-w2").await;
    let w3 = labels(&nodes, "en-w3").await;
    assert!(selects(&selector, &w1), "{w1:?}");
    assert!(selects(&selector, &w2), "{w2:?}");
    assert!(
        !selects(&selector, &w3),
        "a self-labelled worker is selected: {w3:?}"
    );
    assert!(!w3.contains_key(ENROLLMENT_LABEL), "{w3:?}");
    // The old label goes from a worker the cluster does not use, and stays on one whose pod
    // the old selector placed (its kubelet would refuse that pod on a restart without it).
    assert!(!w3.contains_key(LEGACY_ENROLLMENT_LABEL), "{w3:?}");
    assert!(!w3.contains_key(NAMESPACE_LABEL), "{w3:?}");
    assert_eq!(
        w1.get(LEGACY_ENROLLMENT_LABEL).map(String::as_str),
        Some("sb")
    );

    // A kubelet labels its Node again as earlier releases enrolled workers: still no pod.
    nodes
        .patch(
            "en-w3",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": old}})),
        )
        .await
        .expect("self-labelled");
    assert!(!selects(&selector, &labels(&nodes, "en-w3").await));

    // Once the old pod is gone, the next pass removes the old label from its worker. (No
    // kubelet here confirms a graceful deletion.)
    pods.delete(
        "simplyblock-storage-node-sb-old",
        &DeleteParams::default().grace_period(0),
    )
    .await
    .expect("the old pod deleted");
    workload::reconcile(cluster, ctx)
        .await
        .expect("a second pass");
    let w1 = labels(&nodes, "en-w1").await;
    assert!(!w1.contains_key(LEGACY_ENROLLMENT_LABEL), "{w1:?}");
    assert!(selects(&selector, &w1), "{w1:?}");
}

/// Each storage-node pod gets a certificate of its own worker's name from the cluster's CA
/// (the operator signs the PodCertificateRequest its kubelet makes); a pod of another
/// account, or on a worker the cluster did not enrol, gets none. Requests are made here
/// by the admin, standing in for the kubelets (the Node authorizer lets a kubelet make
/// them for its own pods only).
#[tokio::test]
async fn each_storage_node_gets_its_own_workers_certificate_and_nothing_else_gets_one() {
    use k8s_openapi::api::certificates::v1::PodCertificateRequest;
    use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use simplyblock_api::keys::STORAGE_NODE_SIGNER;
    use workload::signer;

    let ns = "node-certificates";
    let (env, admin) = support::own_api_server(ns).await;
    let operator = support::operator_kube_on(&env, ns).await;
    let ctx = Arc::new(
        Context::new(
            operator,
            support::cp_client("http://127.0.0.1:9"),
            support::MANAGED_TLS_ENDPOINT.into(),
            ns.into(),
        )
        .watching(ns),
    );
    let signing = tokio::spawn(signer::run(ctx.clone()));

    // Cluster sb, its CA, its storage-node account; nc-w1 enrolled in it, nc-w2 not.
    let cluster: StorageCluster = serde_json::from_value(json!({
        "apiVersion": simplyblock_api::API_VERSION, "kind": "StorageCluster",
        "metadata": {"name": "sb"},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 4, "stripe": {"dataChunks": 1, "parityChunks": 1}}
    }))
    .expect("cluster");
    Api::<StorageCluster>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &cluster)
        .await
        .expect("cluster");
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), ns);
    let ca_meta = kube::api::ObjectMeta {
        name: Some(workload::serving::ca_secret_name("sb")),
        ..Default::default()
    };
    let ca = simplyblock_operator::runtime::ca::ensure(
        &secrets,
        &ca_meta,
        &workload::serving::CA_POLICY,
    )
    .await
    .expect("the cluster's CA");
    let nodes: Api<Node> = Api::all(admin.clone());
    for (worker, labels) in [
        (
            "nc-w1",
            json!({ENROLLMENT_LABEL: "sb", NAMESPACE_LABEL: ns}),
        ),
        ("nc-w2", json!({})),
    ] {
        create_worker(&nodes, worker, labels).await;
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
    for account in [signer::account("sb"), "simplyblock-csi-node-sa".to_string()] {
        let sa: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": account}})).expect("account");
        accounts
            .create(&PostParams::default(), &sa)
            .await
            .expect("account");
    }

    // A pod on `worker` as `account`, and the request its kubelet makes: its key's PEM and
    // the request's name.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let requests: Api<PodCertificateRequest> = Api::namespaced(admin.clone(), ns);
    let ask = async |pod_name: &str, worker: &str, account: &str| -> (String, String) {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": pod_name},
            "spec": {"nodeName": worker, "serviceAccountName": account,
                     "containers": [{"name": "storage-node", "image": "simplyblock:test"}]}
        }))
        .expect("pod");
        let pod = pods
            .create(&PostParams::default(), &pod)
            .await
            .expect("pod");
        let node = nodes.get(worker).await.expect("worker");
        let sa = accounts.get(account).await.expect("account");
        let (key, csr) = simplyblock_certs::certificate_request().expect("request");
        let pcr: PodCertificateRequest = serde_json::from_value(json!({
            "metadata": {"generateName": format!("{pod_name}-")},
            "spec": {
                "signerName": STORAGE_NODE_SIGNER,
                "podName": pod_name, "podUID": pod.metadata.uid,
                "serviceAccountName": account, "serviceAccountUID": sa.metadata.uid,
                "nodeName": worker, "nodeUID": node.metadata.uid,
                "maxExpirationSeconds": 86400,
                "stubPKCS10Request": k8s_openapi::ByteString(csr),
            }
        }))
        .expect("request");
        let made = requests
            .create(&PostParams::default(), &pcr)
            .await
            .expect("the kubelet's request");
        (key, made.metadata.name.expect("name"))
    };
    let answered = async |name: &str| -> PodCertificateRequest {
        support::until(&format!("request {name} answered"), async || {
            let pcr = requests.get(name).await.ok()?;
            let conditions = pcr.status.as_ref()?.conditions.clone()?;
            (!conditions.is_empty()).then_some(pcr)
        })
        .await
    };
    let condition = |pcr: &PodCertificateRequest| {
        let c = &pcr
            .status
            .as_ref()
            .expect("status")
            .conditions
            .as_ref()
            .expect("conditions")[0];
        (c.type_.clone(), c.reason.clone(), c.message.clone())
    };

    let (key, w1) = ask("storage-node-w1", "nc-w1", &signer::account("sb")).await;
    let issued = answered(&w1).await;
    assert_eq!(condition(&issued).0, "Issued", "{:?}", condition(&issued));
    let chain = issued
        .status
        .as_ref()
        .and_then(|s| s.certificate_chain.clone())
        .expect("a chain");
    let leaf = CertificateDer::from_pem_slice(chain.as_bytes()).expect("leaf");
    let (_, parsed) = x509_parser::parse_x509_certificate(&leaf).expect("x509");
    let requested = rcgen::KeyPair::from_pem(&key).expect("key");
    assert_eq!(
        parsed.public_key().raw,
        rcgen::PublicKeyData::subject_public_key_info(&requested).as_slice(),
        "issued to the pod's key"
    );
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.bundle.as_bytes()).expect("ca"))
        .expect("root");
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        roots.into(),
        rustls::crypto::ring::default_provider().into(),
    )
    .build()
    .expect("verifier");
    let named = |n: &str| ServerName::try_from(n.to_string()).expect("name");
    verifier
        .verify_server_cert(
            &leaf,
            &[],
            &named(&format!(
                "nc-w1.simplyblock-storage-node-api.{ns}.svc.cluster.local"
            )),
            &[],
            UnixTime::now(),
        )
        .expect("the certificate names its own worker");
    for other in [
        format!("nc-w2.simplyblock-storage-node-api.{ns}.svc.cluster.local"),
        format!("simplyblock-storage-node-api.{ns}.svc"),
    ] {
        assert!(
            verifier
                .verify_server_cert(&leaf, &[], &named(&other), &[], UnixTime::now())
                .is_err(),
            "the certificate also serves {other}"
        );
    }

    // A worker the cluster did not enrol, and another account of the namespace.
    let (_, w2) = ask("storage-node-w2", "nc-w2", &signer::account("sb")).await;
    let (_, csi) = ask("csi-node-w1", "nc-w1", "simplyblock-csi-node-sa").await;
    for (name, reason) in [(w2, "WorkerNotEnrolled"), (csi, "NotAStorageNode")] {
        let denied = answered(&name).await;
        let (type_, why, message) = condition(&denied);
        assert_eq!(
            (type_.as_str(), why.as_str()),
            ("Denied", reason),
            "{message}"
        );
        assert!(
            denied
                .status
                .as_ref()
                .and_then(|s| s.certificate_chain.as_ref())
                .is_none()
        );
    }
    signing.abort();
}

//! The stand-in reports workloads ready as a kubelet would, and unready when told.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_testenv::standin::{Files, READY_ANNOTATION, StandIn};
use simplyblock_testenv::wait::until;
use simplyblock_testenv::{TestEnv, create_namespace};

fn labels(app: &str) -> serde_json::Value {
    json!({"matchLabels": {"app": app}})
}

#[tokio::test]
async fn workloads_become_ready_and_a_daemon_set_counts_its_nodes() {
    let env = TestEnv::shared().expect("test environment");
    let client = env.client().await.expect("client");
    let ns = "standin";
    create_namespace(&client, ns).await.expect("namespace");
    let _standin = StandIn::start(client.clone(), Some(ns.into()));

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "api"},
        "spec": {"replicas": 2, "selector": labels("api"), "template": {
            "metadata": {"labels": {"app": "api"}},
            "spec": {"containers": [{"name": "api", "image": "example/api:1"}]}
        }}
    }))
    .expect("deployment");
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("created");
    until("the deployment ready", async || {
        let s = deployments.get("api").await.ok()?.status?;
        (s.ready_replicas == Some(2)).then_some(())
    })
    .await;
    deployments
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {READY_ANNOTATION: "0"}}})),
        )
        .await
        .expect("annotated");
    until("the deployment unready", async || {
        let s = deployments.get("api").await.ok()?.status?;
        (s.ready_replicas.unwrap_or(0) == 0 && s.replicas == Some(2)).then_some(())
    })
    .await;

    let nodes: Api<Node> = Api::all(client.clone());
    for (name, role) in [("standin-a", "storage"), ("standin-b", "other")] {
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {"standin-role": role}}}),
        )
        .expect("node");
        let _ = nodes.create(&PostParams::default(), &node).await;
    }
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "node-plugin"},
        "spec": {"selector": labels("node"), "template": {
            "metadata": {"labels": {"app": "node"}},
            "spec": {
                "nodeSelector": {"standin-role": "storage"},
                "containers": [{"name": "node", "image": "example/node:1"}]
            }
        }}
    }))
    .expect("daemon set");
    daemon_sets
        .create(&PostParams::default(), &ds)
        .await
        .expect("created");
    // One of the two Nodes matches the selector.
    until("the daemon set's one pod ready", async || {
        let s = daemon_sets.get("node-plugin").await.ok()?.status?;
        (s.desired_number_scheduled == 1 && s.number_ready == 1).then_some(())
    })
    .await;
}

/// What the storage-node stand-in handed over: namespace, worker, files.
type Served = std::sync::Arc<std::sync::Mutex<Vec<(String, Option<String>, Files)>>>;

/// The last files handed over for `worker` (`None`: the whole namespace).
fn last_served(served: &Served, worker: Option<&str>) -> Option<Files> {
    served
        .lock()
        .expect("lock")
        .iter()
        .rev()
        .find(|(_, w, _)| w.as_deref() == worker)
        .map(|(_, _, f)| f.clone())
}

/// A signer of `signer` in `ns` for the test: denies each pod's first request (its kubelet
/// asks again), and issues the next from `ca` for `<worker>.example`.
async fn sign(client: kube::Client, ns: &str, signer: &str, ca: simplyblock_certs::Authority) {
    use k8s_openapi::api::certificates::v1::PodCertificateRequest;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    let requests: Api<PodCertificateRequest> = Api::namespaced(client, ns);
    let mut denied = std::collections::BTreeSet::new();
    loop {
        for pcr in requests
            .list(&Default::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let answered = pcr
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| !c.is_empty());
            if answered || pcr.spec.signer_name != signer {
                continue;
            }
            let now = Timestamp::now().as_second();
            let condition = |type_: &str| {
                json!({"type": type_, "status": "True", "reason": type_, "message": "the test's signer",
                       "lastTransitionTime": Time(Timestamp::now())})
            };
            let status = if denied.insert(pcr.spec.pod_uid.clone()) {
                json!({"conditions": [condition("Denied")]})
            } else {
                let worker = &pcr.spec.node_name;
                let leaf = ca
                    .peer_for_request(
                        &pcr.spec.stub_pkc_s10_request.0,
                        worker,
                        &[&format!("{worker}.example")],
                        now - 60,
                        now + 7200,
                    )
                    .expect("the stand-in's request is a valid PKCS#10 request");
                let at = |s: i64| Time(Timestamp::from_second(s).expect("time"));
                json!({
                    "conditions": [condition("Issued")],
                    "certificateChain": leaf,
                    "notBefore": at(now - 60),
                    "notAfter": at(now + 7200),
                    "beginRefreshAt": at(now + 3600),
                })
            };
            requests
                .patch_status(
                    &pcr.metadata.name.clone().unwrap_or_default(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "status": status })),
                )
                .await
                .expect("answered");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The kubelets of storage-node pods: a Secret mounted alike by every pod is handed over
/// for the whole namespace; a pod with a `podCertificate` volume gets a Pod on each selected
/// Node, a request of its own (made again when denied), and its key, the issued chain and
/// the Secret's CAs handed over for its worker alone, again when the CAs change. Nodes
/// leaving the selection lose their pod, nodes joining get one.
#[tokio::test]
async fn each_storage_node_pod_gets_its_own_certificate_from_the_signer() {
    use k8s_openapi::api::certificates::v1::PodCertificateRequest;
    use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
    use kube::api::DeleteParams;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

    const SIGNER: &str = "example.com/storage-node";
    let env = TestEnv::shared().expect("test environment");
    let client = env.client().await.expect("client");
    let ns = "standin-pod-certificates";
    create_namespace(&client, ns).await.expect("namespace");
    let ca = simplyblock_certs::Authority::new("pod certificates test CA").expect("CA");
    let ca_pem = ca.cert_pem();

    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "snode"}})).expect("account"),
        )
        .await
        .expect("account");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    for (name, ca_crt) in [("snode-tls", ca_pem.as_str()), ("shared-tls", "shared CA")] {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name},
            "stringData": {"ca.crt": ca_crt, "tls.crt": "shared cert", "tls.key": "shared key"},
        }))
        .expect("secret");
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("secret");
    }
    let nodes: Api<Node> = Api::all(client.clone());
    for (name, role) in [("standin-pc-a", "snode-pc"), ("standin-pc-b", "other")] {
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {"standin-pc-role": role}}}),
        )
        .expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("node");
    }
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    let daemon_set = |name: &str, tls: serde_json::Value| -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"selector": labels(name), "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"standin-pc-role": "snode-pc"},
                    "serviceAccountName": "snode",
                    "containers": [{"name": "snode", "image": "example/snode:1"}],
                    "volumes": [tls],
                }
            }}
        }))
        .expect("daemon set")
    };
    for ds in [
        daemon_set(
            "snode",
            json!({"name": "tls", "projected": {"defaultMode": 256, "sources": [
                {"podCertificate": {"signerName": SIGNER, "keyType": "ECDSAP256",
                    "maxExpirationSeconds": 86400,
                    "keyPath": "tls.key", "certificateChainPath": "tls.crt"}},
                {"secret": {"name": "snode-tls", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            ]}}),
        ),
        daemon_set(
            "shared",
            json!({"name": "tls", "secret": {"secretName": "shared-tls"}}),
        ),
    ] {
        daemon_sets
            .create(&PostParams::default(), &ds)
            .await
            .expect("daemon set");
    }

    let served: Served = Default::default();
    let record = served.clone();
    let _kubelets = simplyblock_testenv::standin::storage_node_pods(
        client.clone(),
        ns.into(),
        move |ns, worker, files| {
            record.lock().expect("lock").push((
                ns.to_owned(),
                worker.map(str::to_owned),
                files.clone(),
            ));
        },
    );
    let signing = tokio::spawn(sign(client.clone(), ns, SIGNER, ca));

    let shared = until("the shared Secret handed over", async || {
        last_served(&served, None)
    })
    .await;
    assert_eq!(shared["ca.crt"], b"shared CA");
    let own = until("pc-a's own certificate handed over", async || {
        last_served(&served, Some("standin-pc-a"))
    })
    .await;
    assert_eq!(
        own.keys().map(String::as_str).collect::<Vec<_>>(),
        ["ca.crt", "tls.crt", "tls.key"]
    );
    assert_eq!(own["ca.crt"], ca_pem.as_bytes());
    assert!(
        served
            .lock()
            .expect("lock")
            .iter()
            .all(|(n, w, _)| n == ns && w.as_deref() != Some("standin-pc-b"))
    );
    // The key is the one the certificate was issued to, and the chain is the CA's.
    let chain = CertificateDer::pem_slice_iter(&own["tls.crt"])
        .collect::<Result<Vec<_>, _>>()
        .expect("chain");
    let key = PrivateKeyDer::from_pem_slice(&own["tls.key"]).expect("key");
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .expect("an ECDSA key");
    rustls::sign::CertifiedKey::new(chain.clone(), signing_key)
        .keys_match()
        .expect("the certificate is the key's");
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("CA"))
        .expect("root");
    rustls::client::WebPkiServerVerifier::builder_with_provider(
        std::sync::Arc::new(roots),
        provider,
    )
    .build()
    .expect("verifier")
    .verify_server_cert(
        &chain[0],
        &[],
        &ServerName::try_from("standin-pc-a.example").expect("name"),
        &[],
        UnixTime::now(),
    )
    .expect("issued by the CA for the worker");

    // The pod the stand-in keeps, and its requests: the first denied, the second issued.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = pods.get("snode-standin-pc-a").await.expect("the pod");
    let spec = pod.spec.clone().expect("spec");
    assert_eq!(spec.node_name.as_deref(), Some("standin-pc-a"));
    assert_eq!(spec.service_account_name.as_deref(), Some("snode"));
    assert!(
        pods.get_opt("snode-standin-pc-b")
            .await
            .expect("read")
            .is_none()
    );
    let requests: Vec<PodCertificateRequest> = Api::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .expect("requests")
        .items;
    let mut answers: Vec<String> = requests
        .iter()
        .filter(|r| Some(&r.spec.pod_uid) == pod.metadata.uid.as_ref())
        .flat_map(|r| r.status.clone()?.conditions)
        .flatten()
        .map(|c| c.type_)
        .collect();
    // Listed by their generated names: in no order of their making.
    answers.sort();
    assert_eq!(answers, ["Denied", "Issued"], "{requests:#?}");

    // New CAs reach the pod, with its certificate as it was.
    secrets
        .patch(
            "snode-tls",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"ca.crt": format!("{ca_pem}{ca_pem}")}})),
        )
        .await
        .expect("new CAs");
    let renewed = until("the new CAs handed over", async || {
        last_served(&served, Some("standin-pc-a")).filter(|f| f["ca.crt"].len() == 2 * ca_pem.len())
    })
    .await;
    assert_eq!(renewed["tls.crt"], own["tls.crt"]);

    // pc-b joins the selection and gets a pod and a certificate; pc-a leaves it and loses
    // its pod.
    for (name, role) in [("standin-pc-b", "snode-pc"), ("standin-pc-a", "other")] {
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"standin-pc-role": role}}})),
            )
            .await
            .expect("relabelled");
    }
    until("pc-b's own certificate handed over", async || {
        last_served(&served, Some("standin-pc-b"))
    })
    .await;
    until("pc-a's pod gone", async || {
        pods.get_opt("snode-standin-pc-a")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    signing.abort();
    for name in ["standin-pc-a", "standin-pc-b"] {
        let _ = nodes.delete(name, &DeleteParams::default()).await;
    }
}

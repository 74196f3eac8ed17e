//! The spine on a real API server and sbsim: an approved document becomes a cluster whose
//! workers are enrolled, whose storage nodes are added to the control plane exactly once
//! per worker, come Online, and whose activation is requested.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use simplyblock_api::cluster_deployment_config::{ClusterDeploymentConfig, DeploymentPhase};
use simplyblock_api::storage_node::NodePhase;
use simplyblock_api::{StorageClusterOps, StorageNode};
use simplyblock_controlplane::{Client, Method};
use simplyblock_operator::runtime::context::Context;
use simplyblock_operator::workload::ENROLLMENT_LABEL;
use simplyblock_operator::{cluster, deployment, node};
use simplyblock_simulator::{Server, Sim, SimConfig, Timings, labels};

use crate::support::{TOKEN, until};

const NS: &str = "provision";
const WORKERS: [&str; 3] = ["pw1", "pw2", "pw3"];

fn fleet() -> String {
    let mut s = String::from("workers:\n");
    for (i, w) in WORKERS.iter().enumerate() {
        s.push_str(&format!(
            "  - hostname: {w}\n    addresses: [10.30.0.{}]\n    devices: {{count: 2, size: 2T}}\n",
            i + 1
        ));
    }
    s
}

#[tokio::test]
async fn an_approved_document_ends_with_its_nodes_online_and_activation_requested() {
    let env = crate::support::api_server().await;
    env.install_crds(&simplyblock_api::crds())
        .await
        .expect("CRDs");
    let kube = env.client().await.expect("client");
    simplyblock_testenv::create_namespace(&kube, NS)
        .await
        .expect("namespace");
    let nodes_api: Api<Node> = Api::all(kube.clone());
    for (i, w) in WORKERS.iter().enumerate() {
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": w, "labels": {"kubernetes.io/hostname": w}}}),
        )
        .expect("node");
        nodes_api
            .create(&PostParams::default(), &node)
            .await
            .expect("node");
        let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": format!("10.30.0.{}", i + 1)}],
                                       "conditions": [{"type": "Ready", "status": "True"}]}});
        nodes_api
            .patch_status(w, &PatchParams::default(), &Patch::Merge(status))
            .await
            .expect("node status");
    }

    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("fleet.yaml"), fleet()).expect("fleet");
    let config = SimConfig {
        tokens: vec![TOKEN.into()],
        time_scale: 100.0,
        fleet: Some(dir.path().join("fleet.yaml")),
        ..SimConfig::new(dir.path().join("state"))
    };
    let (tls, ca_pem) = crate::support::sbsim_tls_material();
    let sim = Server::start(Sim::open(config).expect("sim"), "127.0.0.1:0", Some(tls))
        .await
        .expect("sbsim");
    let _mounted = crate::support::storage_nodes_mount(&kube, NS, &sim);
    // sbsim learns the enrollment labels the operator writes from the API server.
    tokio::spawn(labels::watch(sim.sim.clone(), kube.clone()));
    let cp = crate::support::tls_cp_client(sim.addr, &ca_pem, TOKEN);
    let ctx = Arc::new(
        Context::new(
            crate::support::operator_kube().await,
            cp.clone(),
            crate::support::MANAGED_TLS_ENDPOINT.into(),
            NS.into(),
        )
        .watching(NS)
        .with_snode_proxy(sim.addr),
    );
    tokio::spawn(cluster::controller::run(ctx.clone()));
    tokio::spawn(deployment::controller::run(ctx.clone()));
    tokio::spawn(node::controller::run(ctx.clone()));
    tokio::spawn(simplyblock_operator::device::mirror::run(ctx.clone()));
    tokio::spawn(simplyblock_operator::workload::run(ctx.clone()));

    let mut doc: ClusterDeploymentConfig = serde_saphyr::from_str(include_str!(
        "../../../../deploy/samples/clusterdeploymentconfig.yaml"
    ))
    .expect("sample");
    doc.spec.approved = true;
    doc.spec.node_sets[0].groups[0].workers = WORKERS.iter().map(|w| w.to_string()).collect();
    let docs: Api<ClusterDeploymentConfig> = Api::namespaced(kube.clone(), NS);
    docs.create(&PostParams::default(), &doc)
        .await
        .expect("document");
    let name = doc.metadata.name.clone().expect("name");

    let storage_nodes: Api<StorageNode> = Api::namespaced(kube.clone(), NS);
    let online = until("every storage node Online", async || {
            let items = storage_nodes.list(&Default::default()).await.ok()?.items;
            (items.len() == WORKERS.len()
                && items.iter().all(|n| {
                    n.status
                        .as_ref()
                        .is_some_and(|s| s.phase == NodePhase::Online && s.uuid.is_some())
                    // The device counts, from the node's StorageDevices, once all are there.
                    && n.status.as_ref().and_then(|s| s.resources.as_ref()?.devices).map(|d| (d.online, d.total)) == Some((2, 2))
                }))
            .then_some(items)
        },
    )
    .await;
    for n in &online {
        let s = n.status.clone().expect("status");
        assert!(s.step.is_empty(), "provisioning is done: {:?}", s.step);
        assert_eq!(s.status.as_deref(), Some("online"));
        assert_eq!(
            s.resources
                .and_then(|r| r.devices)
                .map(|d| (d.online, d.total)),
            Some((2, 2))
        );
        let name = n.metadata.name.clone().expect("name");
        assert_eq!(
            ctx.metrics.sample(
                "simplyblock_storagenode_phase_state",
                &[
                    ("cluster", n.spec.cluster_ref.as_str()),
                    ("node", name.as_str()),
                    ("phase", "Online")
                ]
            ),
            Some(1.0),
            "{name}"
        );
    }
    let cluster_ref = online[0].spec.cluster_ref.clone();
    assert_eq!(
        ctx.metrics.sample(
            "simplyblock_storagenode_provisioning_duration_seconds_count",
            &[("cluster", cluster_ref.as_str())]
        ),
        Some(WORKERS.len() as f64)
    );

    // Exactly one node add per worker, and the worker enrolled and labelled with its slot.
    let r = cp
        .raw(Method::GET, "/../../_sim/calls", &[], None)
        .await
        .expect("call log");
    let calls: Vec<Value> = serde_json::from_value(r.json().unwrap_or(Value::Null)).expect("calls");
    let adds = calls
        .iter()
        .filter(|c| {
            c["method"] == "POST"
                && c["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/storage-nodes/"))
        })
        .count();
    assert_eq!(adds, WORKERS.len(), "one node add per worker");
    // Every storage-node call went over mutual TLS, with the operator's certificate from
    // the cluster's CA (sbsim refuses plain HTTP and anonymous clients there).
    let node_calls: Vec<&Value> = calls
        .iter()
        .filter(|c| c["path"].as_str().is_some_and(|p| p.starts_with("/snode/")))
        .collect();
    assert!(
        node_calls.iter().any(|c| c["status"] == 200),
        "the workers answered: {node_calls:#?}"
    );
    assert!(
        node_calls
            .iter()
            .all(|c| c["client"] == "simplyblock-operator"),
        "{node_calls:#?}"
    );
    // Labels follow the nodes' status through the workload controller: eventually.
    for w in WORKERS {
        let labels = until("the worker's enrollment and topology labels", async || {
            let labels = nodes_api
                .get(w)
                .await
                .ok()?
                .metadata
                .labels
                .unwrap_or_default();
            labels
                .keys()
                .any(|k| k.starts_with(simplyblock_api::keys::STORAGE_NODE_TOPOLOGY_PREFIX))
                .then_some(labels)
        })
        .await;
        assert_eq!(
            labels.get(ENROLLMENT_LABEL).map(String::as_str),
            Some("simplyblock")
        );
    }

    // The workload: a DaemonSet selecting enrolled workers, a config entry per worker.
    let ds = Api::<DaemonSet>::namespaced(kube.clone(), NS)
        .get("simplyblock-storage-node-simplyblock")
        .await
        .expect("DaemonSet");
    let selector = ds
        .spec
        .template
        .spec
        .clone()
        .and_then(|s| s.node_selector)
        .unwrap_or_default();
    assert_eq!(
        selector.get(ENROLLMENT_LABEL).map(String::as_str),
        Some("simplyblock")
    );
    let pod_spec = ds.spec.template.spec.clone().unwrap_or_default();
    assert_eq!(
        pod_spec.service_account_name.as_deref(),
        Some("simplyblock-storage-node-simplyblock")
    );
    // The pods' identity may read their configuration, and run their SPDK pod and host
    // preparation Jobs, and nothing else.
    let role = Api::<Role>::namespaced(kube.clone(), NS)
        .get("simplyblock-storage-node-simplyblock")
        .await
        .expect("Role");
    let rules: Vec<(Vec<String>, Vec<String>, Vec<String>)> = role
        .rules
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            (
                r.resources.unwrap_or_default(),
                r.resource_names.unwrap_or_default(),
                r.verbs,
            )
        })
        .collect();
    let strings = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let any = ["get", "list", "watch", "create", "delete"];
    assert_eq!(
        rules,
        [
            (
                strings(&["configmaps"]),
                strings(&["simplyblock-storage-node-config-simplyblock"]),
                strings(&["get", "watch"])
            ),
            (strings(&["pods"]), vec![], strings(&any)),
            (strings(&["jobs"]), vec![], strings(&any)),
        ]
    );
    let binding = Api::<RoleBinding>::namespaced(kube.clone(), NS)
        .get("simplyblock-storage-node-simplyblock")
        .await
        .expect("RoleBinding");
    assert_eq!(
        binding.subjects.unwrap_or_default()[0].name,
        "simplyblock-storage-node-simplyblock"
    );
    Api::<ServiceAccount>::namespaced(kube.clone(), NS)
        .get("simplyblock-storage-node-simplyblock")
        .await
        .expect("ServiceAccount");
    // Each worker is an endpoint of the storage-node Service under its own name.
    let slice = Api::<EndpointSlice>::namespaced(kube.clone(), NS)
        .get("simplyblock-storage-node-api-simplyblock")
        .await
        .expect("EndpointSlice");
    let mut named: Vec<(String, Vec<String>)> = slice
        .endpoints
        .iter()
        .flatten()
        .map(|e| (e.hostname.clone().unwrap_or_default(), e.addresses.clone()))
        .collect();
    named.sort();
    let expected: Vec<(String, Vec<String>)> = WORKERS
        .iter()
        .enumerate()
        .map(|(i, w)| (w.to_string(), vec![format!("10.30.0.{}", i + 1)]))
        .collect();
    assert_eq!(named, expected);
    assert_eq!(
        slice.metadata.labels.unwrap_or_default()["kubernetes.io/service-name"],
        "simplyblock-storage-node-api"
    );
    let config = Api::<ConfigMap>::namespaced(kube.clone(), NS)
        .get("simplyblock-storage-node-config-simplyblock")
        .await
        .expect("ConfigMap");
    let data = config.data.unwrap_or_default();
    assert_eq!(data.keys().map(String::as_str).collect::<Vec<_>>(), WORKERS);
    assert!(
        data["pw1"].contains("MAX_SUBSYS_COUNT=10\nVCPU_COUNT=4\n"),
        "{}",
        data["pw1"]
    );

    // The storage-node API serves TLS from the cluster's own CA, for every worker's name.
    let secrets = Api::<Secret>::namespaced(kube.clone(), NS);
    let ca = secrets
        .get("simplyblock-storage-node-ca-simplyblock")
        .await
        .expect("the CA Secret");
    let ca_pem = ca.data.clone().unwrap_or_default()["ca.crt"].0.clone();
    let tls = secrets
        .get("simplyblock-storage-node-tls-simplyblock")
        .await
        .expect("the serving Secret");
    assert_eq!(tls.type_.as_deref(), Some("kubernetes.io/tls"));
    let tls_data = tls.data.clone().unwrap_or_default();
    assert_eq!(tls_data["ca.crt"].0, ca_pem);
    verifies(
        &ca_pem,
        &tls_data["tls.crt"].0,
        "pw1.simplyblock-storage-node-api.provision.svc.cluster.local",
    );
    verifies(
        &ca_pem,
        &tls_data["tls.crt"].0,
        "pw3.simplyblock-storage-node-api.provision.svc",
    );
    let template = ds.spec.template.metadata.clone().unwrap_or_default();
    assert_eq!(
        template.annotations.unwrap_or_default()["storage.simplyblock.io/serving-certificate-version"],
        tls.metadata.resource_version.clone().unwrap_or_default(),
        "the pod template names the certificate its pods get"
    );
    assert_eq!(
        ds.spec
            .update_strategy
            .clone()
            .and_then(|u| u.type_)
            .as_deref(),
        Some("OnDelete"),
        "storage nodes restart only through the control plane"
    );
    // This API server serves PodCertificateRequests: each pod asks the operator's signer
    // for a certificate of its own, and takes only the CAs from the serving Secret.
    let tls_volume = pod_spec
        .volumes
        .clone()
        .unwrap_or_default()
        .into_iter()
        .find(|v| v.name == "tls")
        .expect("the tls volume");
    let sources = tls_volume
        .projected
        .and_then(|p| p.sources)
        .unwrap_or_default();
    assert!(
        sources.iter().any(|s| s
            .pod_certificate
            .as_ref()
            .is_some_and(|c| c.signer_name == simplyblock_api::keys::STORAGE_NODE_SIGNER)),
        "{sources:?}"
    );
    assert!(
        sources.iter().any(|s| s
            .secret
            .as_ref()
            .is_some_and(|s| s.name == "simplyblock-storage-node-tls-simplyblock")),
        "{sources:?}"
    );
    // A lost serving Secret is issued again from the same CA; the CA itself stays.
    secrets
        .delete(
            "simplyblock-storage-node-tls-simplyblock",
            &DeleteParams::default(),
        )
        .await
        .expect("delete the serving Secret");
    let reissued = until("the serving Secret again", async || {
        secrets
            .get_opt("simplyblock-storage-node-tls-simplyblock")
            .await
            .ok()?
    })
    .await;
    let reissued_data = reissued.data.clone().unwrap_or_default();
    assert_eq!(reissued_data["ca.crt"].0, ca_pem);
    assert_ne!(reissued_data["tls.crt"].0, tls_data["tls.crt"].0);
    verifies(
        &ca_pem,
        &reissued_data["tls.crt"].0,
        "pw2.simplyblock-storage-node-api.provision.svc",
    );
    let ca_after = secrets
        .get("simplyblock-storage-node-ca-simplyblock")
        .await
        .expect("the CA Secret");
    assert_eq!(
        ca_after.metadata.resource_version,
        ca.metadata.resource_version
    );
    until("the template names the new certificate", async || {
        let ds = Api::<DaemonSet>::namespaced(kube.clone(), NS)
            .get("simplyblock-storage-node-simplyblock")
            .await
            .ok()?;
        let a = ds.spec.template.metadata?.annotations?;
        (a.get("storage.simplyblock.io/serving-certificate-version")
            == reissued.metadata.resource_version.as_ref())
        .then_some(())
    })
    .await;

    let expanded = until("the document Expanded", async || {
        let s = docs.get(&name).await.ok()?.status?;
        (s.phase == DeploymentPhase::Expanded).then_some(s)
    })
    .await;
    assert_eq!(expanded.node_refs.len(), WORKERS.len());
    Api::<StorageClusterOps>::namespaced(kube.clone(), NS)
        .get("simplyblock-activate")
        .await
        .expect("activation requested");

    // A node the control plane has removed already (by hand, or by a pass that crashed
    // before its finalizer came off) is not removed again: a second removal is refused,
    // and the StorageNode would never go.
    let pw3 = online
        .iter()
        .find(|n| n.spec.worker_node == "pw3")
        .expect("pw3");
    let cluster_id: simplyblock_controlplane::Uuid =
        cp.list_clusters().await.expect("clusters")[0].id;
    let node_id: simplyblock_controlplane::Uuid = pw3
        .status
        .as_ref()
        .and_then(|s| s.uuid.as_deref())
        .expect("uuid")
        .parse()
        .expect("uuid");
    cp.remove_storage_node(
        cluster_id,
        node_id,
        simplyblock_controlplane::NodeRemoveOptions {
            force_remove: false,
            force_delete: false,
        },
    )
    .await
    .expect("removed by hand");
    until("pw3 removed", async || {
        let n = cp.get_storage_node(cluster_id, node_id).await.ok()?;
        (n.status == simplyblock_controlplane::types::NodeStatus::Removed).then_some(())
    })
    .await;
    let pw3_name = pw3.metadata.name.clone().expect("name");
    let pw3_uid = pw3.metadata.uid.clone();
    storage_nodes
        .delete(&pw3_name, &DeleteParams::default())
        .await
        .expect("delete pw3");
    until("the StorageNode of pw3 gone", async || match storage_nodes
        .get_opt(&pw3_name)
        .await
        .ok()?
    {
        Some(n) if n.metadata.uid == pw3_uid => None,
        _ => Some(()),
    })
    .await;
    let r = cp
        .raw(Method::GET, "/../../_sim/calls", &[], None)
        .await
        .expect("call log");
    let calls: Vec<Value> = serde_json::from_value(r.json().unwrap_or(Value::Null)).expect("calls");
    let removals = calls
        .iter()
        .filter(|c| {
            c["method"] == "DELETE"
                && c["path"] == format!("/api/v2/clusters/{cluster_id}/storage-nodes/{node_id}/")
        })
        .count();
    assert_eq!(removals, 1, "only the removal sent by hand");
}

/// The leaf certificate chains to the CA for `name`.
fn verifies(ca_pem: &[u8], leaf_pem: &[u8], name: &str) {
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem).expect("CA PEM"))
        .expect("root");
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        roots.into(),
        rustls::crypto::ring::default_provider().into(),
    )
    .build()
    .expect("verifier");
    let leaf = CertificateDer::from_pem_slice(leaf_pem).expect("leaf PEM");
    let server = ServerName::try_from(name.to_string()).expect("name");
    verifier
        .verify_server_cert(&leaf, &[], &server, &[], UnixTime::now())
        .unwrap_or_else(|e| panic!("the serving certificate does not verify for {name}: {e}"));
}

/// Regression: each waiting node counted the slots already claimed, so the cap held for the
/// first add only; the moment it finished, every waiter saw the same free slot and took it.
/// Four workers under a budget of one are added strictly one at a time, judged by the
/// control plane's own record of each add (queued, then finished). Then a growth document
/// adds a fifth worker to the activated cluster, which the control plane accepts only as
/// an expansion: the add must carry `expand`, and the initial ones must not.
#[tokio::test]
async fn a_budget_of_one_holds_for_every_node_and_a_growth_add_carries_expand() {
    const NS: &str = "provision-budget";
    const WORKERS: [&str; 5] = ["bw1", "bw2", "bw3", "bw4", "bw5"];
    let initial = &WORKERS[..4];
    // Node creation (in_creation to online) long against a reconcile, so a slot given back
    // when the node appears rather than when the add ends lets the next add overlap it.
    let timings = Timings {
        node_add_ms: 100_000,
        ..Timings::default()
    };
    let setup = start(NS, &WORKERS, 31, "", timings).await;
    let (kube, cp) = (setup.kube.clone(), setup.cp.clone());
    let mut doc: ClusterDeploymentConfig = serde_saphyr::from_str(include_str!(
        "../../../../deploy/samples/clusterdeploymentconfig.yaml"
    ))
    .expect("sample");
    doc.spec.approved = true;
    doc.spec.node_sets[0].groups[0].workers = initial.iter().map(|w| w.to_string()).collect();
    let docs: Api<ClusterDeploymentConfig> = Api::namespaced(kube.clone(), NS);
    docs.create(&PostParams::default(), &doc)
        .await
        .expect("document");
    let storage_nodes: Api<StorageNode> = Api::namespaced(kube.clone(), NS);
    let all_online = async |count: usize| {
        until("the storage nodes Online", async || {
            let items = storage_nodes.list(&Default::default()).await.ok()?.items;
            (items.len() == count
                && items.iter().all(|n| {
                    n.status
                        .as_ref()
                        .is_some_and(|s| s.phase == NodePhase::Online && s.uuid.is_some())
                }))
            .then_some(())
        })
        .await
    };
    all_online(initial.len()).await;
    let cluster_id = cp.list_clusters().await.expect("clusters")[0].id;
    let active = async || {
        until("the cluster active", async || {
            let c = cp.get_cluster(cluster_id).await.ok()?;
            (c.status == simplyblock_controlplane::types::ClusterStatus::Active).then_some(())
        })
        .await
    };
    active().await;

    // The control plane's log, oldest first: every add queued and finished, in order.
    let r = cp
        .raw(
            Method::GET,
            &format!("/clusters/{cluster_id}/logs"),
            &[("limit", "200".to_string())],
            None,
        )
        .await
        .expect("cluster log");
    let mut log: Vec<Value> = serde_json::from_value(r.json().unwrap_or(Value::Null)).expect("log");
    log.reverse();
    let adds_log: Vec<&str> = log
        .iter()
        .filter(|e| e["event"] == "node_add")
        .filter_map(|e| e["message"].as_str())
        .collect();
    let mut open = std::collections::BTreeSet::new();
    let mut most = 0;
    let mut finished = 0;
    let mut failed = 0;
    for m in &adds_log {
        if let Some(addr) = m.strip_prefix("node add queued for ") {
            assert!(
                open.insert(addr.to_string()),
                "a second add for {addr} while one was open: {adds_log:#?}"
            );
            most = most.max(open.len());
        } else if let Some(addr) = m
            .strip_prefix("node add for ")
            .and_then(|r| r.strip_suffix(" succeeded"))
        {
            assert!(open.remove(addr), "{addr} finished without being queued");
            finished += 1;
        } else if let Some((addr, _)) = m
            .strip_prefix("node add for ")
            .and_then(|r| r.split_once(" failed after "))
        {
            // An add the control plane gave up on is asked for again, once it ended.
            assert!(open.remove(addr), "{addr} failed without being queued");
            failed += 1;
        }
    }
    if failed > 0 {
        println!("node adds that failed and were asked again: {adds_log:#?}");
    }
    assert_eq!(finished, initial.len(), "every worker was added: {log:#?}");
    assert_eq!(
        most, 1,
        "two node adds overlapped under a budget of one: {log:#?}"
    );

    // Growth: a second document naming the cluster adds the fifth worker.
    let mut growth = doc.clone();
    growth.metadata = serde_json::from_value(json!({"name": "grow-bw5"})).expect("meta");
    growth.spec.cluster_ref = Some("simplyblock".into());
    growth.spec.cluster = None;
    growth.spec.node_sets[0].groups[0].workers = vec!["bw5".into()];
    docs.create(&PostParams::default(), &growth)
        .await
        .expect("growth document");
    all_online(WORKERS.len()).await;

    let r = cp
        .raw(Method::GET, "/../../_sim/calls", &[], None)
        .await
        .expect("call log");
    let calls: Vec<Value> = serde_json::from_value(r.json().unwrap_or(Value::Null)).expect("calls");
    let adds: Vec<&Value> = calls
        .iter()
        .filter(|c| {
            c["method"] == "POST"
                && c["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/storage-nodes/"))
        })
        .collect();
    let seen: Vec<String> = adds
        .iter()
        .map(|c| {
            format!(
                "{} {} expand={} at {}",
                c["status"], c["body"]["node_address"], c["body"]["expand"], c["time"]
            )
        })
        .collect();
    assert_eq!(
        adds.len(),
        WORKERS.len() + failed,
        "one node add per worker, and one more per add that failed: {seen:#?}"
    );
    for add in adds {
        let body = &add["body"];
        let growth = body["node_address"]
            .as_str()
            .is_some_and(|a| a.starts_with("bw5."));
        assert_eq!(body["expand"], json!(growth), "{body}");
        // The sample's groups keep a journal partition on every device.
        assert_eq!(body["partitions"], 1, "{body}");
    }
}

/// Synchronous replication: a document's cluster asks for it and each group names its
/// site. The control plane (sbsim, the stand-in) creates the cluster with
/// `sync_replication` and adds every node in its group's site, read back from it; the CSI
/// driver's replication service, with a sync class and the CSI secret the operator wrote,
/// then demotes a volume on one site and promotes it on the other (sbsim refuses both on
/// a cluster created without the flag).
#[tokio::test]
async fn a_sync_replicated_cluster_is_created_so_and_its_nodes_stand_in_their_sites() {
    const NS: &str = "provision-sync";
    const WORKERS: [&str; 4] = ["sw1", "sw2", "sw3", "sw4"];
    let setup = start(NS, &WORKERS, 33, "", Timings::default()).await;
    let (kube, cp) = (setup.kube.clone(), setup.cp.clone());
    let mut doc: ClusterDeploymentConfig = serde_saphyr::from_str(include_str!(
        "../../../../deploy/samples/clusterdeploymentconfig.yaml"
    ))
    .expect("sample");
    doc.spec.approved = true;
    doc.spec
        .cluster
        .as_mut()
        .expect("cluster")
        .enable_sync_replication = Some(true);
    let group = doc.spec.node_sets[0].groups[0].clone();
    let site_of = |worker: &str| if worker < "sw3" { "east" } else { "west" };
    doc.spec.node_sets[0].groups = ["east", "west"]
        .into_iter()
        .map(
            |site| simplyblock_api::cluster_deployment_config::NodeGroup {
                name: site.into(),
                workers: WORKERS
                    .iter()
                    .filter(|w| site_of(w) == site)
                    .map(|w| w.to_string())
                    .collect(),
                site: Some(site.into()),
                ..group.clone()
            },
        )
        .collect();
    let docs: Api<ClusterDeploymentConfig> = Api::namespaced(kube.clone(), NS);
    docs.create(&PostParams::default(), &doc)
        .await
        .expect("document");
    let storage_nodes: Api<StorageNode> = Api::namespaced(kube.clone(), NS);
    let online = until("the storage nodes Online", async || {
        let items = storage_nodes.list(&Default::default()).await.ok()?.items;
        (items.len() == WORKERS.len()
            && items.iter().all(|n| {
                n.status
                    .as_ref()
                    .is_some_and(|s| s.phase == NodePhase::Online && s.uuid.is_some())
            }))
        .then_some(items)
    })
    .await;
    let clusters: Api<simplyblock_api::StorageCluster> = Api::namespaced(kube.clone(), NS);
    let stc = clusters.get("simplyblock").await.expect("StorageCluster");
    assert_eq!(stc.spec.enable_sync_replication, Some(true));

    // Read back from the control plane: the cluster and each node's site.
    let cluster = cp.list_clusters().await.expect("clusters")[0].clone();
    assert!(cluster.sync_replication, "{cluster:?}");
    let added = cp.list_storage_nodes(cluster.id).await.expect("nodes");
    assert_eq!(added.len(), WORKERS.len());
    let mut by_site: std::collections::BTreeMap<String, Vec<simplyblock_controlplane::Uuid>> =
        Default::default();
    for sn in &online {
        let worker = sn.spec.worker_node.as_str();
        assert_eq!(sn.spec.config.site.as_deref(), Some(site_of(worker)));
        let uuid: simplyblock_controlplane::Uuid = sn
            .status
            .as_ref()
            .and_then(|s| s.uuid.as_deref())
            .and_then(|u| u.parse().ok())
            .expect("uuid");
        let found = added
            .iter()
            .find(|n| n.id == uuid)
            .expect("the node in sbsim");
        assert_eq!(
            found.site.as_deref(),
            Some(site_of(worker)),
            "{worker}: {found:?}"
        );
        by_site
            .entry(site_of(worker).to_string())
            .or_default()
            .push(uuid);
    }
    until("the cluster active", async || {
        let c = cp.get_cluster(cluster.id).await.ok()?;
        (c.status == simplyblock_controlplane::types::ClusterStatus::Active).then_some(())
    })
    .await;

    // The CSI driver's sync method acts on the sites the operator gave.
    let pool = cp
        .create_pool(
            cluster.id,
            &simplyblock_controlplane::PoolCreate {
                name: "mirrored".into(),
                ..Default::default()
            },
        )
        .await
        .expect("pool")
        .id;
    let east = by_site["east"].clone();
    let west = by_site["west"].clone();
    let volume = cp
        .create_volume(
            cluster.id,
            pool,
            &simplyblock_controlplane::VolumeCreate {
                host_id: Some(east[0].to_string()),
                ndcs: 1,
                npcs: 1,
                ..simplyblock_controlplane::VolumeCreate::new("mirrored", 1_000_000_000)
            },
        )
        .await
        .expect("volume");
    // The driver's replication service, reading the CSI secret the operator wrote and the
    // CA sbsim serves with, reaching the control plane through sbsim's proxy.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(kube.clone(), NS);
    let written = until("the CSI secret names the cluster", async || {
        let data = secrets
            .get(simplyblock_api::csi_secret::NAME)
            .await
            .ok()?
            .data?;
        let text = data.get(simplyblock_api::csi_secret::KEY)?.0.clone();
        String::from_utf8_lossy(&text)
            .contains(&cluster.id.to_string())
            .then_some(text)
    })
    .await;
    std::fs::write(setup._dir.path().join("secret.json"), written).expect("secret file");
    std::fs::write(setup._dir.path().join("ca.pem"), &setup.ca_pem).expect("CA file");
    let clusters = simplyblock_csi::clusters::Clusters::from_files(
        &setup._dir.path().join("secret.json"),
        None,
        None,
        simplyblock_csi::clusters::Transport {
            ca_file: Some(setup._dir.path().join("ca.pem")),
            proxy: Some(setup._sim.addr),
            ..Default::default()
        },
    )
    .expect("the driver reads the operator's CSI secret");
    let replication =
        simplyblock_csi::replication::ReplicationService::new(std::sync::Arc::new(clusters));
    let handle = simplyblock_api::volume_handle::VolumeHandle {
        cluster: cluster.id,
        pool: simplyblock_api::volume_handle::PoolRef::Id(pool),
        volume,
    };
    let class = |site: &str| {
        simplyblock_csi::replication_params::ReplicationParams::parse(
            &[
                ("replication.storage.simplyblock.io/method", "sync"),
                ("replication.storage.simplyblock.io/site", site),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        )
        .expect("class parameters")
    };
    replication
        .demote_volume(&handle, &class("east"))
        .await
        .expect("the driver demotes on east");
    replication
        .promote_volume(&handle, &class("west"), false)
        .await
        .expect("the driver promotes on west, planned");
    let serving = cp
        .get_volume(cluster.id, pool, volume)
        .await
        .expect("volume")
        .storage_node_id;
    assert!(
        west.contains(&serving),
        "{serving} is not a west node: {by_site:?}"
    );
}

struct Setup {
    kube: kube::Client,
    /// The CA sbsim's certificate chains to.
    ca_pem: String,
    cp: Client,
    _mounted: simplyblock_testenv::standin::StandIn,
    _sim: Server,
    _dir: tempfile::TempDir,
}

/// Workers `workers` (InternalIP 10.`net`.0.N) as Nodes and as sbsim's fleet with `faults`,
/// sim `timings`, and the controllers of the deployment path (activation included) scoped to `ns`.
async fn start(ns: &str, workers: &[&str], net: u8, faults: &str, timings: Timings) -> Setup {
    let env = crate::support::api_server().await;
    env.install_crds(&simplyblock_api::crds())
        .await
        .expect("CRDs");
    let kube = env.client().await.expect("client");
    simplyblock_testenv::create_namespace(&kube, ns)
        .await
        .expect("namespace");
    let nodes_api: Api<Node> = Api::all(kube.clone());
    let mut fleet = String::from("workers:\n");
    for (i, w) in workers.iter().enumerate() {
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": w, "labels": {"kubernetes.io/hostname": w}}}),
        )
        .expect("node");
        nodes_api
            .create(&PostParams::default(), &node)
            .await
            .expect("node");
        let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": format!("10.{net}.0.{}", i + 1)}],
                                       "conditions": [{"type": "Ready", "status": "True"}]}});
        nodes_api
            .patch_status(w, &PatchParams::default(), &Patch::Merge(status))
            .await
            .expect("node status");
        fleet.push_str(&format!(
            "  - hostname: {w}\n    addresses: [10.{net}.0.{}]\n    devices: {{count: 2, size: 2T}}\n",
            i + 1
        ));
    }
    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("fleet.yaml"), fleet).expect("fleet");
    let config = SimConfig {
        tokens: vec![TOKEN.into()],
        time_scale: 50.0,
        fleet: Some(dir.path().join("fleet.yaml")),
        faults: faults.into(),
        timings,
        ..SimConfig::new(dir.path().join("state"))
    };
    let (tls, ca_pem) = crate::support::sbsim_tls_material();
    let sim = Server::start(Sim::open(config).expect("sim"), "127.0.0.1:0", Some(tls))
        .await
        .expect("sbsim");
    let mounted = crate::support::storage_nodes_mount(&kube, ns, &sim);
    tokio::spawn(labels::watch(sim.sim.clone(), kube.clone()));
    let cp = crate::support::tls_cp_client(sim.addr, &ca_pem, TOKEN);
    let ctx = Arc::new(
        Context::new(
            crate::support::operator_kube().await,
            cp.clone(),
            crate::support::MANAGED_TLS_ENDPOINT.into(),
            ns.into(),
        )
        .watching(ns)
        .with_snode_proxy(sim.addr),
    );
    tokio::spawn(cluster::controller::run(ctx.clone()));
    tokio::spawn(cluster::ops::run(ctx.clone()));
    tokio::spawn(deployment::controller::run(ctx.clone()));
    tokio::spawn(node::controller::run(ctx.clone()));
    tokio::spawn(node::ops::run(ctx.clone()));
    tokio::spawn(simplyblock_operator::workload::run(ctx.clone()));
    Setup {
        kube,
        ca_pem,
        cp,
        _mounted: mounted,
        _sim: sim,
        _dir: dir,
    }
}

async fn call_log(cp: &Client) -> Vec<Value> {
    let r = cp
        .raw(Method::GET, "/../../_sim/calls", &[], None)
        .await
        .expect("call log");
    serde_json::from_value(r.json().unwrap_or(Value::Null)).expect("calls")
}

/// Regression: Resolving waited out its deadline for a node an add that had given up was
/// never going to make, holding the cluster's one node-add slot. An add that ends without
/// a node is asked for again. Then: a 404 from the removal means the node is removed
/// already, so the StorageNode goes instead of retrying for ever.
#[tokio::test]
async fn an_add_that_gave_up_is_asked_again_and_a_refused_removal_is_asked_again() {
    const NS: &str = "provision-retry";
    // Every attempt of the first add fails until it gives up (max_retry 11).
    let setup = start(
        NS,
        &["rw1"],
        32,
        "taskfail:name=node_add,count=11",
        Timings::default(),
    )
    .await;
    let (kube, cp) = (setup.kube.clone(), setup.cp.clone());
    let mut doc: ClusterDeploymentConfig = serde_saphyr::from_str(include_str!(
        "../../../../deploy/samples/clusterdeploymentconfig.yaml"
    ))
    .expect("sample");
    doc.spec.approved = true;
    doc.spec.node_sets[0].groups[0].workers = vec!["rw1".into()];
    doc.spec.cluster.as_mut().expect("cluster").stripe =
        Some(serde_json::from_value(json!({"dataChunks": 1, "parityChunks": 0})).expect("stripe"));
    Api::<ClusterDeploymentConfig>::namespaced(kube.clone(), NS)
        .create(&PostParams::default(), &doc)
        .await
        .expect("document");
    let storage_nodes: Api<StorageNode> = Api::namespaced(kube.clone(), NS);
    let online = until("rw1 Online", async || {
        let items = storage_nodes.list(&Default::default()).await.ok()?.items;
        items.into_iter().find(|n| {
            n.status
                .as_ref()
                .is_some_and(|s| s.phase == NodePhase::Online && s.uuid.is_some())
        })
    })
    .await;
    let cluster_id = cp.list_clusters().await.expect("clusters")[0].id;
    let tasks: Vec<_> = cp
        .list_tasks(cluster_id)
        .await
        .expect("tasks")
        .into_iter()
        .filter(|t| t.function_name == "node_add")
        .collect();
    // However many attempts the fault costs, each add that gave up was followed by one
    // new add, sent only once the previous one had ended (a second add while one is open
    // is refused by the control plane).
    let gave_up = tasks
        .iter()
        .filter(|t| t.function_result == "max retry reached")
        .count();
    assert!(gave_up >= 1, "{tasks:?}");
    assert_eq!(
        tasks.iter().filter(|t| t.succeeded()).count(),
        1,
        "{tasks:?}"
    );
    assert_eq!(gave_up + 1, tasks.len(), "{tasks:?}");
    let adds: Vec<Value> = call_log(&cp)
        .await
        .into_iter()
        .filter(|c| {
            c["method"] == "POST"
                && c["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/storage-nodes/"))
        })
        .collect();
    assert_eq!(
        adds.len(),
        tasks.len(),
        "asked again once per add that gave up"
    );
    assert!(adds.iter().all(|c| c["status"] == 201), "{adds:?}");

    // Deleting the StorageNode removes it through a StorageNodeOps Remove, whose removal
    // call is refused once: asked again, and the node goes once the control plane has
    // removed it.
    cp.raw(
        Method::PUT,
        "/../../_sim/faults",
        &[],
        Some(&json!({"spec": "error:method=DELETE,path=/api/v2/clusters/*/storage-nodes/*/,status=500,count=1"})),
    )
    .await
    .expect("fault");
    let name = online.metadata.name.clone().expect("name");
    storage_nodes
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete");
    until("the StorageNode gone", async || {
        storage_nodes
            .get_opt(&name)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let removals: Vec<Value> = call_log(&cp)
        .await
        .into_iter()
        .filter(|c| {
            c["method"] == "DELETE"
                && c["path"]
                    .as_str()
                    .is_some_and(|p| p.contains("/storage-nodes/"))
        })
        .collect();
    let statuses: Vec<&Value> = removals.iter().map(|c| &c["status"]).collect();
    assert_eq!(statuses, [500, 204], "{removals:?}");
}

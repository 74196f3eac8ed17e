//! The metrics.simplyblock.io aggregated API, reached through a real kube-apiserver that
//! proxies to it with its front-proxy certificate, as `kubectl get snm` does. sbsim stands
//! in for the control plane. The API server has no cluster network, so the APIService's
//! Service is an ExternalName for this machine, which the aggregator dials directly.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, ServiceAccount};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use simplyblock_api::{StorageCluster, StorageDevice, StorageNode, StoragePool};
use simplyblock_controlplane::{CapacityStat, VolumeCreate};
use simplyblock_operator::metricsapi::{self, server};
use simplyblock_operator::runtime::context::Context;
use simplyblock_operator::webhooks::tls::ServingCertificates;

use crate::support::{
    active_cluster_with_pool, free_port, operator_kube_on, own_api_server, sbsim, until,
};

const NS: &str = "metrics-api";

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(metricsapi::GROUP, metricsapi::VERSION, kind),
        plural,
    )
}

/// Creates `object` and sets its status, as the operator's controllers would have.
async fn with_status<K>(kube: &kube::Client, object: Value, status: Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(kube.clone(), NS);
    let typed: K = serde_json::from_value(object).expect("object");
    let created = api
        .create(&PostParams::default(), &typed)
        .await
        .expect("create");
    let name = created.meta().name.clone().expect("name");
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .expect("status");
}

fn quantity(bytes: i64) -> String {
    metricsapi::readings::quantity(bytes)
}

/// The capacity an object of this API reports equals the control plane's sample.
fn same_capacity(object: &Value, sample: &CapacityStat, what: &str) {
    let c = &object["capacity"];
    assert_eq!(c["total"], quantity(sample.size_total), "{what} total");
    assert_eq!(c["used"], quantity(sample.size_used), "{what} used");
    assert_eq!(c["free"], quantity(sample.size_free), "{what} free");
    assert_eq!(
        c["provisioned"],
        quantity(sample.size_prov),
        "{what} provisioned"
    );
    assert_eq!(
        c["utilizationPercent"], sample.size_util,
        "{what} utilization"
    );
    assert!(
        object["timestamp"].is_string(),
        "{what} has no timestamp: {object}"
    );
}

async fn list(kube: &kube::Client, kind: &str, plural: &str) -> Vec<Value> {
    Api::<DynamicObject>::namespaced_with(kube.clone(), NS, &resource(kind, plural))
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing {plural}: {e}"))
        .items
        .into_iter()
        .map(|o| serde_json::to_value(o).expect("json"))
        .collect()
}

/// A GET of `path` through the API server, with `accept`.
async fn get_raw(kube: &kube::Client, path: &str, accept: &str) -> Result<Value, kube::Error> {
    let request = http::Request::get(path)
        .header("Accept", accept)
        .body(Vec::new())
        .expect("request");
    kube.request::<Value>(request).await
}

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

fn refused(result: Result<impl std::fmt::Debug, kube::Error>, code: u16) -> String {
    match result {
        Err(kube::Error::Api(s)) if s.code == code => s.message,
        other => panic!("expected a {code} refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn readings_are_served_through_the_api_server_as_objects_and_tables() {
    let (env, kube) = own_api_server(NS).await;
    let sim = sbsim("", 3).await;
    let cp = sim.cp.clone();
    let (cluster, pool) = active_cluster_with_pool(&cp, "sb").await;
    let nodes = cp.list_storage_nodes(cluster.id).await.expect("nodes");
    let first = &nodes[0];
    let devices = cp
        .list_devices(cluster.id, first.id)
        .await
        .expect("devices");
    assert!(!devices.is_empty(), "sbsim gave the node no devices");
    let volume = cp
        .create_volume(cluster.id, pool.id, &VolumeCreate::new("pvc-data", 1 << 30))
        .await
        .expect("volume");

    // The storage objects as the operator keeps them, with their control plane ids.
    with_status::<StorageCluster>(
        &kube,
        json!({"apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
               "metadata": {"name": "sb"},
               "spec": {"maxSubsystemCount": 10, "vcpuCount": 4,
                        "stripe": {"dataChunks": 1, "parityChunks": 1}}}),
        json!({"uuid": cluster.id.to_string()}),
    )
    .await;
    for (i, node) in nodes.iter().enumerate() {
        with_status::<StorageNode>(
            &kube,
            json!({"apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNode",
                   "metadata": {"name": format!("sn-{i}"), "labels": {"rack": format!("r{i}")}},
                   "spec": {"clusterRef": "sb", "workerNode": format!("w{}", i + 1), "slot": 0,
                            "config": {"sizing": {"vcpuCount": 4, "minHugePagesSize": "4G"}}}}),
            json!({"uuid": node.id.to_string()}),
        )
        .await;
    }
    with_status::<StoragePool>(
        &kube,
        json!({"apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StoragePool",
               "metadata": {"name": "pool1"}, "spec": {"clusterRef": "sb"}}),
        json!({"uuid": pool.id.to_string()}),
    )
    .await;
    for (i, device) in devices.iter().enumerate() {
        with_status::<StorageDevice>(
            &kube,
            json!({"apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageDevice",
                   "metadata": {"name": format!("sd-{i}")},
                   "spec": {"nodeRef": "sn-0", "deviceID": device.id.to_string()}}),
            json!({"clusterID": cluster.id.to_string(), "nodeID": first.id.to_string()}),
        )
        .await;
    }
    // A claim bound to the volume, as the CSI driver's provisioning leaves it.
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "pv-data"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "csi": {"driver": simplyblock_api::keys::CSI_DRIVER_NAME,
                         "volumeHandle": format!("{}:{}:{volume}", cluster.id, pool.id)}}
    }))
    .expect("pv");
    Api::<PersistentVolume>::all(kube.clone())
        .create(&PostParams::default(), &pv)
        .await
        .expect("PersistentVolume");
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-data",
                 "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .expect("pvc");
    Api::<PersistentVolumeClaim>::namespaced(kube.clone(), NS)
        .create(&PostParams::default(), &pvc)
        .await
        .expect("PersistentVolumeClaim");

    // The server as the operator runs it, under the chart's RBAC, registered as the chart
    // registers it (the operator fills in the caBundle).
    let port = free_port();
    let external: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
        "metadata": {"name": metricsapi::SERVICE},
        "spec": {"type": "ExternalName", "externalName": "localhost",
                 "ports": [{"name": "metrics-api", "port": port}]}
    }))
    .expect("service");
    Api::<k8s_openapi::api::core::v1::Service>::namespaced(kube.clone(), NS)
        .create(&PostParams::default(), &external)
        .await
        .expect("Service");
    let registration: APIService = serde_json::from_value(server::api_service(
        NS,
        metricsapi::SERVICE,
        i32::from(port),
        "",
    ))
    .expect("APIService");
    let registrations: Api<APIService> = Api::all(kube.clone());
    registrations
        .create(&PostParams::default(), &registration)
        .await
        .expect("APIService");
    let authority = simplyblock_certs::Authority::new("simplyblock-operator-ca").expect("CA");
    let certs = ServingCertificates::new(
        authority,
        vec![format!("{}.{NS}.svc", metricsapi::SERVICE)],
        vec![std::net::Ipv4Addr::LOCALHOST.into()],
        Duration::from_secs(3600),
    )
    .expect("certificates");
    let ctx = Arc::new(Context::new(
        operator_kube_on(&env, NS).await,
        cp.clone(),
        sim.endpoint.clone(),
        NS.to_string(),
    ));
    let serving = server::start(
        std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port)),
        &certs,
        &ctx,
    )
    .await
    .expect("the metrics API server");
    let serving = tokio::spawn(serving);
    until("the APIService Available", async || {
        let found = registrations.get(metricsapi::API_SERVICE).await.ok()?;
        let bundle = found.spec.as_ref()?.ca_bundle.as_ref()?;
        assert_eq!(
            bundle.0,
            certs.ca_bundle().into_bytes(),
            "caBundle not the operator's"
        );
        found
            .status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True")
            .then_some(())
    })
    .await;

    // Each kind, listed as a client lists it, equals what sbsim reports.
    let nodes = cp.list_storage_nodes(cluster.id).await.expect("nodes");
    let snm = list(&kube, "StorageNodeMetrics", "storagenodemetrics").await;
    assert_eq!(snm.len(), 3, "{snm:?}");
    for (i, node) in nodes.iter().enumerate() {
        let name = format!("sn-{i}");
        let object = snm
            .iter()
            .find(|o| o["metadata"]["name"] == name.as_str())
            .unwrap_or_else(|| panic!("no reading of {name}"));
        assert_eq!(object["nodeID"], node.id.to_string());
        assert_eq!(object["workerNode"], format!("w{}", i + 1));
        assert_eq!(object["storageCluster"], "sb");
        assert_eq!(object["metadata"]["labels"]["rack"], format!("r{i}"));
        same_capacity(object, &node.capacity, &name);
    }
    let found = cp.get_cluster(cluster.id).await.expect("cluster");
    let scm = list(&kube, "StorageClusterMetrics", "storageclustermetrics").await;
    assert_eq!(scm.len(), 1, "{scm:?}");
    assert_eq!(scm[0]["clusterID"], cluster.id.to_string());
    assert_eq!(
        scm[0]["erasureCoding"],
        json!({"dataChunks": found.distr_ndcs, "parityChunks": found.distr_npcs})
    );
    same_capacity(&scm[0], &found.capacity, "the cluster");
    let pools = cp.list_pools(cluster.id).await.expect("pools");
    let spm = list(&kube, "StoragePoolMetrics", "storagepoolmetrics").await;
    assert_eq!(spm.len(), 1, "{spm:?}");
    assert_eq!(spm[0]["poolID"], pool.id.to_string());
    let pool_sample = pools[0].capacity.clone().expect("a pool sample");
    same_capacity(&spm[0], &pool_sample, "the pool");
    let devices = cp
        .list_devices(cluster.id, first.id)
        .await
        .expect("devices");
    let sdm = list(&kube, "StorageDeviceMetrics", "storagedevicemetrics").await;
    assert_eq!(sdm.len(), devices.len(), "{sdm:?}");
    for (i, device) in devices.iter().enumerate() {
        let object = sdm
            .iter()
            .find(|o| o["metadata"]["name"] == format!("sd-{i}").as_str())
            .expect("a device reading");
        assert_eq!(object["deviceID"], device.id.to_string());
        assert_eq!(object["storageNode"], "sn-0");
        same_capacity(object, &device.capacity, "a device");
    }
    let record = cp
        .get_volume(cluster.id, pool.id, volume)
        .await
        .expect("volume");
    let lvm = list(&kube, "LogicalVolumeMetrics", "logicalvolumemetrics").await;
    assert_eq!(lvm.len(), 1, "{lvm:?}");
    assert_eq!(lvm[0]["metadata"]["name"], "data");
    assert_eq!(lvm[0]["volumeID"], volume.to_string());
    assert_eq!(lvm[0]["persistentVolume"], "pv-data");
    same_capacity(&lvm[0], &record.capacity, "the volume");

    // The Table kubectl asks for: the reference's columns, the values sbsim reports.
    let base = format!("/apis/metrics.simplyblock.io/v1alpha2/namespaces/{NS}");
    let table = get_raw(&kube, &format!("{base}/storagenodemetrics"), TABLE)
        .await
        .expect("the table");
    assert_eq!(table["kind"], "Table");
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| c["name"].as_str().expect("name"))
        .collect();
    assert_eq!(
        columns,
        [
            "Name", "Worker", "Cluster", "Total", "Used", "Used%", "Node", "Sampled"
        ]
    );
    let rows = table["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3);
    for (i, node) in nodes.iter().enumerate() {
        let cells = &rows[i]["cells"];
        assert_eq!(cells[0], format!("sn-{i}"));
        assert_eq!(cells[1], format!("w{}", i + 1));
        assert_eq!(cells[2], "sb");
        assert_eq!(cells[3], quantity(node.capacity.size_total));
        assert_eq!(cells[4], quantity(node.capacity.size_used));
        assert_eq!(cells[5], node.capacity.size_util);
        assert_eq!(cells[6], node.id.to_string());
    }
    let one = get_raw(&kube, &format!("{base}/storagepoolmetrics/pool1"), TABLE)
        .await
        .expect("a pool's table");
    assert_eq!(one["rows"][0]["cells"][1], quantity(pool_sample.size_total));

    // Field selectors on name and namespace, refused on anything else with what to use.
    let snm_api = Api::<DynamicObject>::namespaced_with(
        kube.clone(),
        NS,
        &resource("StorageNodeMetrics", "storagenodemetrics"),
    );
    let picked = snm_api
        .list(&ListParams::default().fields("metadata.name=sn-1"))
        .await
        .expect("selected");
    assert_eq!(picked.items.len(), 1);
    assert_eq!(picked.items[0].metadata.name.as_deref(), Some("sn-1"));
    let labelled = snm_api
        .list(&ListParams::default().labels("rack=r2"))
        .await
        .expect("by label");
    assert_eq!(labelled.items.len(), 1);
    assert_eq!(labelled.items[0].metadata.name.as_deref(), Some("sn-2"));
    let message = refused(
        snm_api
            .list(&ListParams::default().fields("spec.workerNode=w1"))
            .await,
        400,
    );
    assert!(
        message.contains("spec.workerNode") && message.contains("metadata.name"),
        "{message}"
    );
    // A single object, and one that is not there.
    let got = snm_api.get("sn-0").await.expect("sn-0");
    assert_eq!(got.data["nodeID"], nodes[0].id.to_string());
    let message = refused(snm_api.get("sn-9").await, 404);
    assert!(message.contains("sn-9"), "{message}");
    // No watch.
    let message = refused(
        get_raw(
            &kube,
            &format!("{base}/storagenodemetrics?watch=true"),
            "application/json",
        )
        .await,
        405,
    );
    assert!(message.contains("cannot be watched"), "{message}");

    // Readers: the chart's role grants get and list; a user without it is refused.
    let accounts: Api<ServiceAccount> = Api::namespaced(kube.clone(), NS);
    for name in ["viewer", "nobody"] {
        let account: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": name}})).expect("account");
        accounts
            .create(&PostParams::default(), &account)
            .await
            .expect("account");
    }
    let binding: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "viewer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "simplyblock-metrics-view"},
        "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": NS}]
    }))
    .expect("binding");
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(kube.clone(), NS)
        .create(&PostParams::default(), &binding)
        .await
        .expect("RoleBinding");
    let viewer = env
        .service_account_client(NS, "viewer")
        .await
        .expect("viewer");
    crate::support::until_allowed(&viewer, "list", metricsapi::GROUP, "storagenodemetrics", NS)
        .await;
    let seen = list(&viewer, "StorageNodeMetrics", "storagenodemetrics").await;
    assert_eq!(seen.len(), 3);
    let nobody = env
        .service_account_client(NS, "nobody")
        .await
        .expect("nobody");
    refused(
        Api::<DynamicObject>::namespaced_with(
            nobody,
            NS,
            &resource("StorageNodeMetrics", "storagenodemetrics"),
        )
        .list(&ListParams::default())
        .await,
        403,
    );

    // The server itself decides too: the user the front proxy names is authorized per
    // request, and the headers count only from the front proxy's certificate.
    let url = format!("https://127.0.0.1:{port}{base}/storagenodemetrics");
    let front_proxy = direct_client(&certs.ca_bundle(), Some(env.dir()));
    let answer = front_proxy
        .get(&url)
        .header("X-Remote-User", "nobody")
        .header("X-Remote-Group", "system:authenticated")
        .send()
        .await
        .expect("a direct request");
    assert_eq!(answer.status().as_u16(), 403);
    let status: Value = answer.json().await.expect("a Status");
    assert_eq!(status["reason"], "Forbidden");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("cannot list"),
        "{status}"
    );
    let stranger = direct_client(&certs.ca_bundle(), None);
    let answer = stranger
        .get(&url)
        .header("X-Remote-User", "system:admin")
        .header("X-Remote-Group", "system:masters")
        .send()
        .await
        .expect("a direct request");
    assert_eq!(
        answer.status().as_u16(),
        401,
        "headers believed without the certificate"
    );
    serving.abort();
}

/// A client of the server directly, trusting `ca`, presenting the API server's front-proxy
/// certificate (from the environment's directory `front_proxy`) when given.
fn direct_client(ca: &str, front_proxy: Option<&std::path::Path>) -> reqwest::Client {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.expect("CA")).expect("root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let config = match front_proxy {
        Some(dir) => {
            let cert = std::fs::read(dir.join("front-proxy-client.crt")).expect("cert");
            let key = std::fs::read(dir.join("front-proxy-client.key")).expect("key");
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
                .map(|c| c.expect("cert"))
                .collect();
            builder
                .with_client_auth_cert(chain, PrivateKeyDer::from_pem_slice(&key).expect("key"))
                .expect("client auth")
        }
        None => builder.with_no_client_auth(),
    };
    reqwest::Client::builder()
        .use_preconfigured_tls(config)
        .build()
        .expect("client")
}

//! The conversion webhook on a real API server: the operator (as the chart's account) points
//! the converting CRDs at itself, an object written at v1alpha1 is stored at v1alpha2 and
//! reads back at both versions, what only v1alpha1 says survives a write at v1alpha2, and a
//! storage node the Go operator left names its cluster by its owner.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use simplyblock_api::StoragePool;
use simplyblock_operator::runtime::metrics::Metrics;
use simplyblock_operator::webhooks::tls::ServingCertificates;
use simplyblock_operator::webhooks::{self, Endpoint, WebhookContext, WebhookServer};

use crate::support::{operator_kube_on, own_api_server_on};

const NS: &str = "conversion";

fn v1alpha1_pools(client: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("storage.simplyblock.io", "v1alpha1", "StoragePool"),
        "storagepools",
    );
    Api::namespaced_with(client.clone(), NS, &resource)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_written_at_v1alpha1_reads_back_at_both_versions() {
    // An installation of the Go operator: its CRDs stored v1alpha1, then this chart's CRDs
    // applied over them, so objects may be stored at either version.
    let env = simplyblock_testenv::TestEnv::start()
        .await
        .expect("API server");
    let go_crds: Vec<CustomResourceDefinition> = simplyblock_api::v1alpha1::crds()
        .into_iter()
        .map(|mut crd| {
            for version in &mut crd.spec.versions {
                version.served = true;
                version.storage = true;
            }
            crd
        })
        .collect();
    env.install_crds(&go_crds)
        .await
        .expect("the Go operator's CRDs");
    let (env, admin) = own_api_server_on(env, NS).await;
    let operator = operator_kube_on(&env, NS).await;

    // The webhook server of this process, registered by the operator's own account.
    let certs = ServingCertificates::new(
        simplyblock_certs::Authority::new("conversion-test-ca").expect("ca"),
        vec!["localhost".into()],
        vec![Ipv4Addr::LOCALHOST.into()],
        Duration::from_secs(3600),
    )
    .expect("certificates");
    let metrics = Arc::new(Metrics::new());
    let server = WebhookServer::bind(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        certs.clone(),
        webhooks::router(WebhookContext {
            client: operator.clone(),
            operator_user: "system:serviceaccount:conversion:simplyblock-operator".into(),
            metrics: metrics.clone(),
        }),
    )
    .await
    .expect("bind");
    let base = format!("https://{}", server.local_addr().expect("addr"));
    let serving = tokio::spawn(server.run());
    let endpoint = Endpoint::Url(base.clone());
    webhooks::conversion::register(&operator, &endpoint, &certs.ca_bundle())
        .await
        .expect("the operator points the converting CRDs at itself");
    let crd = Api::<CustomResourceDefinition>::all(admin.clone())
        .get("storagepools.storage.simplyblock.io")
        .await
        .expect("crd");
    let served: Vec<(String, bool, bool)> = crd
        .spec
        .versions
        .iter()
        .map(|v| (v.name.clone(), v.served, v.storage))
        .collect();
    assert_eq!(
        served,
        vec![
            ("v1alpha1".to_owned(), true, false),
            ("v1alpha2".to_owned(), true, true)
        ]
    );
    let url = crd
        .spec
        .conversion
        .and_then(|c| c.webhook)
        .and_then(|w| w.client_config)
        .and_then(|c| c.url);
    assert_eq!(url, Some(format!("{base}/convert")));

    // A pool as the Go operator wrote it.
    let old: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha1", "kind": "StoragePool",
        "metadata": {"name": "pool1", "annotations": {"example.com/owner": "team-a"}},
        "spec": {"clusterName": "cluster1", "capacityLimit": "20G", "dhchap": true,
                 "storageClassParameters": {"qosRwIops": "100", "fabric": "tcp",
                                            "filesystem": "ext4", "encryption": true,
                                            "tune2fsReservedBlocks": "2"}},
    }))
    .expect("v1alpha1 pool");
    v1alpha1_pools(&admin)
        .create(&PostParams::default(), &old)
        .await
        .expect("created at v1alpha1");

    let hub = Api::<StoragePool>::namespaced(admin.clone(), NS)
        .get("pool1")
        .await
        .expect("reads at v1alpha2");
    assert_eq!(hub.spec.cluster_ref, "cluster1");
    let limits = hub.spec.limits.clone().expect("limits");
    assert_eq!(limits.capacity.as_deref(), Some("20G"));
    let defaults = hub.spec.volume_defaults.clone().expect("volume defaults");
    assert_eq!(defaults.iops, Some(100));
    assert!(defaults.enable_encryption && defaults.enable_dhchap);
    assert_eq!(defaults.filesystem.as_str(), "ext4");
    // v1alpha1's defaults, applied when it was written, carried over.
    assert_eq!(defaults.max_namespaces_per_subsystem, Some(1));
    let annotations = hub.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("example.com/owner").map(String::as_str),
        Some("team-a")
    );
    assert_eq!(defaults.fabric.as_deref(), Some("tcp"));
    assert_eq!(defaults.tune2fs_reserved_blocks.as_deref(), Some("2"));
    assert!(
        !annotations.contains_key("storage.simplyblock.io/v1alpha1-spec.storageClassParameters"),
        "every parameter has a field in the hub, nothing is stashed: {annotations:?}"
    );

    // A write at v1alpha2 keeps what only v1alpha1 says.
    Api::<StoragePool>::namespaced(admin.clone(), NS)
        .patch(
            "pool1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"limits": {"capacity": "30G"}}})),
        )
        .await
        .expect("written at v1alpha2");
    let back = v1alpha1_pools(&admin)
        .get("pool1")
        .await
        .expect("reads at v1alpha1");
    assert_eq!(back.data["spec"]["capacityLimit"], "30G");
    assert_eq!(back.data["spec"]["clusterName"], "cluster1");
    assert_eq!(back.data["spec"]["dhchap"], true);
    let params = &back.data["spec"]["storageClassParameters"];
    assert_eq!(params["fabric"], "tcp");
    assert_eq!(params["tune2fsReservedBlocks"], "2");
    assert_eq!(params["qosRwIops"], "100");
    assert_eq!(params["filesystem"], "ext4");
    let back_annotations = back.metadata.annotations.clone().unwrap_or_default();
    assert!(
        back_annotations
            .keys()
            .all(|k| !k.starts_with("storage.simplyblock.io/")),
        "no stash is left at the version that says it all: {back_annotations:?}"
    );
    // A storage node as the Go operator left it, once reparented to its cluster: the hub
    // names the cluster its controller owner is, and the node set it came from.
    let node_resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("storage.simplyblock.io", "v1alpha1", "StorageNode"),
        "storagenodes",
    );
    let old_node: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha1", "kind": "StorageNode",
        "metadata": {"name": "worker-1-0", "ownerReferences": [{
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
            "name": "cluster1", "uid": "2f6d0c9e-0000-4000-8000-000000000001",
            "controller": true}]},
        "spec": {"storageNodeSetRef": "set-a", "workerNode": "worker-1", "socketIndex": 0},
    }))
    .expect("v1alpha1 node");
    Api::<DynamicObject>::namespaced_with(admin.clone(), NS, &node_resource)
        .create(&PostParams::default(), &old_node)
        .await
        .expect("node created at v1alpha1");
    let hub_node_resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("storage.simplyblock.io", "v1alpha2", "StorageNode"),
        "storagenodes",
    );
    let hub_node = Api::<DynamicObject>::namespaced_with(admin.clone(), NS, &hub_node_resource)
        .get("worker-1-0")
        .await
        .expect("node reads at v1alpha2");
    assert_eq!(hub_node.data["spec"]["clusterRef"], "cluster1");
    assert_eq!(hub_node.data["spec"]["nodeSet"], "set-a");
    assert_eq!(hub_node.data["spec"]["workerNode"], "worker-1");
    assert_eq!(hub_node.data["spec"]["slot"], 0);

    assert!(
        metrics
            .render()
            .contains("simplyblock_conversions_total{kind=\"StoragePool\""),
        "conversions are counted:\n{}",
        metrics.render()
    );
    serving.abort();
}

//! The metrics.simplyblock.io aggregated API in the demo: the API server reaches the
//! operator's metrics API at this machine's address (it has no cluster network), and the
//! readings are printed as `kubectl get` prints them, through the API server.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use simplyblock_operator::metricsapi::{API_SERVICE, GROUP, SERVICE, VERSION};

use crate::table;

/// Where the operator serves the metrics API: a free loopback port.
pub fn listen() -> anyhow::Result<SocketAddr> {
    let port = simplyblock_testenv::free_port()?;
    Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
}

/// Points the chart's APIService at `addr`: its Service becomes an ExternalName for this
/// machine, which the API server dials at the APIService's port.
pub async fn route(client: &kube::Client, namespace: &str, addr: SocketAddr) -> anyhow::Result<()> {
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let _ = services.delete(SERVICE, &DeleteParams::default()).await;
    let external: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": SERVICE},
        "spec": {"type": "ExternalName", "externalName": "localhost",
                 "ports": [{"name": "metrics-api", "port": addr.port()}]}
    }))?;
    services.create(&PostParams::default(), &external).await?;
    Api::<APIService>::all(client.clone())
        .patch(
            API_SERVICE,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"service": {"port": addr.port()}}})),
        )
        .await?;
    Ok(())
}

/// `kubectl get snm,sdm,spm,scm,lvm`, and each pool's capacity from its reading.
pub async fn show(client: &kube::Client, namespace: &str) -> anyhow::Result<()> {
    let registrations: Api<APIService> = Api::all(client.clone());
    let started = Instant::now();
    loop {
        let available = registrations
            .get(API_SERVICE)
            .await?
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True");
        if available {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            anyhow::bail!("the APIService {API_SERVICE} did not become Available within 60s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("\n$ kubectl get snm,sdm,spm,scm,lvm -n {namespace}");
    let base = format!("/apis/{GROUP}/{VERSION}/namespaces/{namespace}");
    for resource in [
        "storagenodemetrics",
        "storagedevicemetrics",
        "storagepoolmetrics",
        "storageclustermetrics",
        "logicalvolumemetrics",
    ] {
        print!(
            "{}",
            table::get(client, &format!("{base}/{resource}")).await?
        );
    }
    let pools: serde_json::Value = client
        .request(http::Request::get(format!("{base}/storagepoolmetrics")).body(Vec::new())?)
        .await?;
    for pool in pools["items"].as_array().into_iter().flatten() {
        let capacity = &pool["capacity"];
        println!(
            "pool {}: {} used of {}, {} provisioned ({}%)",
            pool["metadata"]["name"].as_str().unwrap_or_default(),
            capacity["used"].as_str().unwrap_or_default(),
            capacity["total"].as_str().unwrap_or_default(),
            capacity["provisioned"].as_str().unwrap_or_default(),
            capacity["utilizationPercent"],
        );
    }
    Ok(())
}

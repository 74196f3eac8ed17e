//! The demo: everything on one machine, against a real Kubernetes API server.
//!
//! Today it starts the local API server, installs the storage.simplyblock.io CRDs, applies
//! a sample deployment document and shows it as `kubectl get` would. Later stages of the
//! product (the simulated control plane, the operator, discovery, volumes) join this path.

mod table;

use clap::Parser;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};
use simplyblock_api::ClusterDeploymentConfig;
use simplyblock_testenv::TestEnv;

const SAMPLE: &str = include_str!("../../../deploy/samples/clusterdeploymentconfig.yaml");
const NAMESPACE: &str = "simplyblock";

#[derive(Parser)]
#[command(
    name = "simplyblock-demo",
    about = "Run simplyblock's Kubernetes API on a local API server"
)]
struct Cli {
    /// Set everything up, print it, and exit instead of waiting for Ctrl-C.
    #[arg(long)]
    once: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,kube_client=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();

    step("starting a local Kubernetes API server (kube-apiserver + etcd on loopback)");
    let env = TestEnv::start().await?;
    let client = env.client().await?;

    step("installing the storage.simplyblock.io CRDs");
    env.install_crds(&simplyblock_api::crds()).await?;

    step(&format!(
        "applying a deployment document to namespace {NAMESPACE}"
    ));
    let apply = PatchParams::apply("simplyblock-demo").force();
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}
    }))?;
    Api::<Namespace>::all(client.clone())
        .patch(NAMESPACE, &apply, &Patch::Apply(&ns))
        .await?;
    let doc: ClusterDeploymentConfig = serde_saphyr::from_str(SAMPLE)?;
    let name = doc.metadata.name.clone().unwrap_or_default();
    Api::<ClusterDeploymentConfig>::namespaced(client.clone(), NAMESPACE)
        .patch(&name, &apply, &Patch::Apply(&doc))
        .await?;

    println!();
    println!("$ kubectl get clusterdeploymentconfigs -n {NAMESPACE}");
    let path = format!(
        "/apis/storage.simplyblock.io/v1alpha2/namespaces/{NAMESPACE}/clusterdeploymentconfigs"
    );
    print!("{}", table::get(&client, &path).await?);
    println!();
    println!("kubeconfig: {}", env.kubeconfig_path().display());
    println!(
        "try:        KUBECONFIG={} kubectl explain clusterdeploymentconfig.spec",
        env.kubeconfig_path().display()
    );

    if cli.once {
        return Ok(());
    }
    println!("The API server runs until Ctrl-C.");
    tokio::signal::ctrl_c().await?;
    step("stopping");
    drop(env);
    Ok(())
}

fn step(text: &str) {
    eprintln!("==> {text}");
}

//! `simplyblock-operator`: the operator process.
//!
//! `run` serves the admission webhooks over TLS from a certificate issued by the
//! operator's own CA, registers them with the API server (caBundle included), keeps the
//! certificate fresh, serves its metrics over plain HTTP, and runs the controllers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use simplyblock_operator::context::Context;
use simplyblock_operator::metrics_server::{self, MetricsServer};
use simplyblock_operator::webhooks::{
    self, Endpoint, WebhookContext, WebhookServer, tls::ServingCertificates,
};
use simplyblock_operator::{cluster, deployment, node, pool};

#[derive(Parser)]
#[command(name = "simplyblock-operator", about = "The simplyblock operator")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the webhooks and run the controllers.
    Run(Box<RunArgs>),
    /// Probe this machine's disks, NICs and CPUs (what a discovery run's Job does) and
    /// write the report to its ConfigMap, or to stdout.
    Probe {
        /// Where the host's /sys, /proc and /dev are mounted.
        #[arg(long, default_value = "/")]
        root: std::path::PathBuf,
        /// The Kubernetes node name.
        #[arg(long, env = "NODE_NAME")]
        node: Option<String>,
        /// The discovery run (OperatorOps) the report belongs to.
        #[arg(long)]
        run: Option<String>,
        /// The UID of that run, which owns the report's ConfigMap.
        #[arg(long)]
        run_uid: Option<String>,
        /// Write the report to the ConfigMap of this name, in the pod's namespace; without
        /// it, print it.
        #[arg(long)]
        config_map: Option<String>,
        #[arg(long, env = "POD_NAMESPACE", default_value = "simplyblock-system")]
        namespace: String,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// Where the webhook server listens.
    #[arg(
        long,
        default_value = "0.0.0.0:9443",
        env = "SIMPLYBLOCK_WEBHOOK_LISTEN"
    )]
    webhook_listen: SocketAddr,
    /// Where `/metrics` (Prometheus text format) and `/healthz` are served over plain
    /// HTTP; empty or `off` serves neither.
    #[arg(
        long,
        default_value = "0.0.0.0:8080",
        env = "SIMPLYBLOCK_METRICS_ADDR",
        value_parser = parse_listen
    )]
    metrics_addr: Listen,
    /// The operator's namespace: its service accounts write the single-writer fields.
    #[arg(long, env = "POD_NAMESPACE", default_value = "simplyblock-system")]
    namespace: String,
    /// The Service in front of the webhook server.
    #[arg(long, default_value = "simplyblock-operator-webhook")]
    webhook_service: String,
    /// Register the webhooks at this URL base instead of the Service (for an API server
    /// outside the cluster, e.g. the demo's).
    #[arg(long)]
    webhook_url: Option<String>,
    /// How long a serving certificate is valid; it is replaced at a third of that.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    certificate_validity: Duration,
    /// The control plane's address (`/api/v2` is appended).
    #[arg(
        long,
        env = "SIMPLYBLOCK_CONTROL_PLANE_URL",
        default_value = "http://simplyblock-webappapi:5000"
    )]
    control_plane_url: simplyblock_controlplane::Url,
    /// A file holding the bearer token for the control plane: by default the pod's
    /// service-account token, which the control plane verifies with a TokenReview.
    #[arg(
        long,
        env = "SIMPLYBLOCK_CONTROL_PLANE_TOKEN_FILE",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )]
    control_plane_token_file: std::path::PathBuf,
    /// Watch only this namespace instead of all of them.
    #[arg(long, env = "SIMPLYBLOCK_WATCH_NAMESPACE")]
    watch_namespace: Option<String>,
    /// The image probe Jobs run (the operator's own, which carries the probe).
    #[arg(
        long,
        env = "SIMPLYBLOCK_OPERATOR_IMAGE",
        default_value = "quay.io/simplyblock-io/simplyblock-operator:latest"
    )]
    probe_image: String,
    /// The service account probe Jobs run as.
    #[arg(long, default_value = "simplyblock-nodeprobe")]
    probe_service_account: String,
    /// Do not raise the first-install discovery run.
    #[arg(long)]
    disable_initial_discovery: bool,
    /// Reach the workers' storage-node APIs through this HTTP proxy instead of their
    /// Service names (an operator outside the cluster, e.g. against sbsim).
    #[arg(long)]
    storage_node_proxy: Option<SocketAddr>,
}

/// An address to listen on, or none.
#[derive(Clone, Copy, Debug)]
struct Listen(Option<SocketAddr>);

fn parse_listen(text: &str) -> Result<Listen, String> {
    metrics_server::parse_listen(text).map(Listen)
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let span: jiff::Span = text
        .parse()
        .map_err(|e| format!("{text:?} is not a duration such as 24h or 90m: {e}"))?;
    let signed = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .map_err(|e| e.to_string())?;
    Duration::try_from(signed).map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    match Cli::parse().command {
        Command::Run(args) => {
            let RunArgs {
                webhook_listen,
                metrics_addr,
                namespace,
                webhook_service,
                webhook_url,
                certificate_validity,
                control_plane_url,
                control_plane_token_file,
                watch_namespace,
                probe_image,
                probe_service_account,
                disable_initial_discovery,
                storage_node_proxy,
            } = *args;
            let token = std::fs::read_to_string(&control_plane_token_file).map_err(|e| {
                anyhow::anyhow!(
                    "the control-plane token file {} cannot be read ({e}); mount the service-account token or pass --control-plane-token-file",
                    control_plane_token_file.display()
                )
            })?;
            let cp = simplyblock_controlplane::Client::new(
                simplyblock_controlplane::ClientConfig::new(
                    control_plane_url.clone(),
                    token.trim(),
                ),
            )?;
            let client = kube::Client::try_default().await?;
            let dns = vec![
                format!("{webhook_service}.{namespace}.svc"),
                format!("{webhook_service}.{namespace}.svc.cluster.local"),
                "localhost".to_string(),
            ];
            let ips = vec![std::net::Ipv4Addr::LOCALHOST.into()];
            let ca = webhooks::ca::ensure(&client, &namespace).await?;
            let certs = ServingCertificates::with_bundle(
                ca.authority,
                ca.bundle,
                dns,
                ips,
                certificate_validity,
            )?;
            let endpoint = match webhook_url {
                Some(url) => Endpoint::Url(url),
                None => Endpoint::Service {
                    namespace: namespace.clone(),
                    name: webhook_service,
                },
            };
            let mut context = Context::new(
                client.clone(),
                cp,
                control_plane_url.to_string(),
                namespace.clone(),
            );
            if let Some(proxy) = storage_node_proxy {
                context = context.with_snode_proxy(proxy);
            }
            let controllers = Arc::new(context);
            let ctx = WebhookContext {
                client: client.clone(),
                operator_namespace: namespace,
            };
            let server =
                WebhookServer::bind(webhook_listen, certs.clone(), webhooks::router(ctx)).await?;
            let metrics = match metrics_addr.0 {
                Some(addr) => {
                    let metrics = MetricsServer::bind(addr).await?;
                    tracing::info!(listen = %addr, "serving /metrics and /healthz");
                    Some(metrics)
                }
                None => None,
            };
            let metrics = async move {
                match metrics {
                    Some(m) => m.run().await,
                    None => std::future::pending().await,
                }
            };
            webhooks::register(&client, &endpoint, &certs.ca_bundle()).await?;
            tracing::info!(listen = %webhook_listen, ?endpoint, "serving the admission webhooks");
            tokio::spawn(certs.clone().rotate_forever());
            tokio::spawn(webhooks::ca::keep_fresh(
                client.clone(),
                controllers.namespace.clone(),
                endpoint.clone(),
                certs.clone(),
                std::time::Duration::from_secs(3600),
            ));
            // Serve before the bootstrap creates its run: that create passes through the
            // voperatorops webhook just registered, which must already answer.
            let server = tokio::spawn(server.run());
            if !disable_initial_discovery {
                let client = client.clone();
                let namespace = controllers.namespace.clone();
                tokio::spawn(async move {
                    match deployment::discovery::bootstrap(&client, &namespace).await {
                        Ok(done) => tracing::info!("initial discovery: {done}"),
                        Err(why) => tracing::info!("initial discovery declined: {why}"),
                    }
                });
            }
            let probe = deployment::discovery::ProbeSettings {
                image: probe_image,
                service_account: probe_service_account,
            };
            tokio::select! {
                _ = server => {}
                _ = metrics => {}
                _ = cluster::controller::run(controllers.clone(), watch_namespace.clone()) => {}
                _ = cluster::ops::run(controllers.clone(), watch_namespace.clone()) => {}
                _ = deployment::controller::run(controllers.clone(), watch_namespace.clone()) => {}
                _ = node::controller::run(controllers.clone(), watch_namespace.clone()) => {}
                _ = cluster::workload::run(controllers.clone(), watch_namespace.clone()) => {}
                _ = pool::controller::run(controllers.clone(), watch_namespace.clone()) => {}
                _ = pool::ops::run(controllers.clone(), watch_namespace.clone()) => {}
                _ = deployment::discovery::run(controllers, probe, watch_namespace) => {}
                _ = tokio::signal::ctrl_c() => tracing::info!("stopping"),
            }
        }
        Command::Probe {
            root,
            node,
            run,
            run_uid,
            config_map,
            namespace,
        } => {
            use simplyblock_discovery::probe::{ProbeOptions, RootFs, probe_with};
            let options = ProbeOptions {
                node: node.clone(),
                ..ProbeOptions::default()
            };
            let report = probe_with(&RootFs::new(&root), &options);
            let text = simplyblock_discovery::report::encode(&report)?;
            match (config_map, run, run_uid) {
                (Some(name), Some(run), Some(uid)) => {
                    if name.is_empty() || uid.is_empty() {
                        anyhow::bail!(
                            "--config-map and --run-uid must not be empty: the report needs a ConfigMap name and the UID of the run that owns it"
                        );
                    }
                    let client = kube::Client::try_default().await?;
                    let cm = simplyblock_discovery::configmap::report_config_map(
                        &namespace,
                        &name,
                        simplyblock_discovery::configmap::RunRef {
                            name: &run,
                            uid: &uid,
                        },
                        &report.node,
                        text,
                    );
                    kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
                        client, &namespace,
                    )
                    .patch(
                        &name,
                        &kube::api::PatchParams::apply("simplyblock-probe").force(),
                        &kube::api::Patch::Apply(&cm),
                    )
                    .await?;
                    tracing::info!(config_map = %name, "wrote the probe report");
                }
                (Some(_), None, _) => anyhow::bail!(
                    "--config-map needs --run, the discovery run the report belongs to"
                ),
                (Some(_), Some(_), None) => anyhow::bail!(
                    "--config-map needs --run-uid, the UID of the discovery run, which owns the report so that deleting the run deletes it"
                ),
                (None, ..) => println!("{text}"),
            }
        }
    }
    Ok(())
}

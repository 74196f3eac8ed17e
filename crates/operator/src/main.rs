//! `simplyblock-operator`: the operator process.
//!
//! `run` parses the flags into a [`simplyblock_operator::Config`] and runs the operator
//! ([`simplyblock_operator::run`]) until SIGTERM or Ctrl-C, after which the passes in
//! flight finish and the leader Lease is released.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Parser, Subcommand};
use simplyblock_operator::assembly::{LeaderElection, WebhookEndpoint};
use simplyblock_operator::deployment::discovery::ProbeSettings;
use simplyblock_operator::metrics_server;
use simplyblock_operator::runtime::context::{Context, Shutdown};
use simplyblock_operator::runtime::kit::Scope;
use simplyblock_operator::runtime::link::Token;

#[derive(Parser)]
#[command(name = "simplyblock-operator", about = "The simplyblock operator")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    logs: simplyblock_telemetry::logs::LogArgs,
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
    /// Apply the CRDs of a chart's crds/ (mounted in `--directory`), with their conversion
    /// webhook in `--namespace`: the chart's pre-upgrade hook, as Helm never updates them.
    ApplyCrds {
        #[arg(long)]
        directory: std::path::PathBuf,
        /// The release's namespace, where the conversion webhook's Service is.
        #[arg(long, env = "POD_NAMESPACE")]
        namespace: String,
    },
    /// Release what the operator holds before its release goes (the chart's pre-delete
    /// hook): remove the SimplyblockDriver, and with --delete-data every storage object,
    /// the ControlPlane and the CRDs, waiting for the operator to finish each.
    Uninstall {
        /// The namespace the operator serves; every namespace when absent.
        #[arg(long)]
        namespace: Option<String>,
        /// Remove every storage object, the control plane and the CRDs: all data is lost.
        #[arg(long)]
        delete_data: bool,
        /// How long to wait for the operator to release what is deleted.
        #[arg(long, default_value = "270s", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Check that every `--address host:port` answers a TCP connect from here (what a
    /// volume migration's validation Job does on a consuming node); fails naming those
    /// that do not.
    Reach {
        #[arg(long = "address")]
        addresses: Vec<String>,
        /// How long each connect may take.
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Check what this node and the cluster need before the operator is installed: the
    /// NVMe/TCP modules, hugepages and the kernel here; cert-manager, the FoundationDB
    /// operator, volume snapshots and a default StorageClass in the cluster (as the profile
    /// needs). Reports every check, each problem with what to do; exits 0 when no problem
    /// is found, 2 when one is.
    Preflight(PreflightArgs),
}

#[derive(clap::Args)]
struct PreflightArgs {
    /// The chart's deployment.profile: which cluster checks apply.
    #[arg(long, value_enum, default_value = "standalone")]
    profile: simplyblock_operator::preflight::Profile,
    /// The local control plane's TLS provider (none: enableTLS false); cert-manager is
    /// checked only for cert-manager, and only with profile standalone.
    #[arg(long, value_enum, default_value = "cert-manager")]
    tls_provider: simplyblock_operator::preflight::TlsProvider,
    /// Where the host's /sys and /proc are mounted (the node checks read them).
    #[arg(long, default_value = "/")]
    root: std::path::PathBuf,
    /// A registry the images come from (an entry of the chart's allowedRegistries; `*` is
    /// skipped), repeatable: the node check dials each distinct host (port 443 unless
    /// given) and fails naming every one that takes no connection.
    #[arg(
        long = "registry",
        value_name = "HOST[:PORT][/PATH]",
        // A bad entry is refused with the flag it came in, before anything is checked.
        value_parser = |entry: &str| {
            simplyblock_operator::preflight::Registry::parse(entry).map(|_| entry.to_string())
        }
    )]
    registries: Vec<String>,
    /// Skip the node checks (run from a machine that is not a worker).
    #[arg(long)]
    skip_node: bool,
    /// Skip the cluster checks (no kubeconfig at hand).
    #[arg(long, conflicts_with = "skip_node")]
    skip_cluster: bool,
    #[arg(long, value_enum, default_value = "text")]
    output: PreflightOutput,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum PreflightOutput {
    Text,
    Json,
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
    /// Where `/metrics` (OpenMetrics text format, to a bearer token the API server lets
    /// `get /metrics`) and `/healthz` are served, over TLS with the webhooks' certificate;
    /// empty or `off` serves neither.
    #[arg(
        long,
        default_value = "0.0.0.0:8080",
        env = "SIMPLYBLOCK_METRICS_ADDR",
        value_parser = parse_listen
    )]
    metrics_addr: Listen,
    /// Where the metrics.simplyblock.io aggregated API is served (HTTPS, the APIService's
    /// Service port); empty or `off` serves it not.
    #[arg(
        long,
        default_value = "0.0.0.0:6443",
        env = "SIMPLYBLOCK_METRICS_API_ADDR",
        value_parser = parse_listen
    )]
    metrics_api_addr: Listen,
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
    /// A file holding the bearer token for a local control plane (and a managed one
    /// without credentialsSecretRef), read at each use so that a token the kubelet rotates
    /// is followed: by default the pod's service-account token; the chart mounts a
    /// projected token of its own with a short expiry. The control plane verifies it with
    /// a TokenReview. Where the control plane is, is the
    /// ControlPlane's status.endpoint.
    #[arg(
        long,
        env = "SIMPLYBLOCK_CONTROL_PLANE_TOKEN_FILE",
        default_value = simplyblock_operator::runtime::link::SERVICE_ACCOUNT_TOKEN
    )]
    control_plane_token_file: std::path::PathBuf,
    /// The audience the chart mints the operator's token for when it is meant for a
    /// control plane (operator.controlPlaneToken.audience). The token is sent to a managed
    /// control plane without credentialsSecretRef only if this is its one audience: a
    /// token for the API server's would let whoever answers at the endpoint act as the
    /// operator.
    #[arg(
        long,
        env = "SIMPLYBLOCK_CONTROL_PLANE_TOKEN_AUDIENCE",
        default_value = simplyblock_operator::runtime::link::CONTROL_PLANE_AUDIENCE
    )]
    control_plane_token_audience: String,
    /// Reach the control plane through this HTTP proxy instead of resolving its
    /// endpoint's host (an operator outside the cluster, e.g. against sbsim); the
    /// ControlPlane's status.endpoint keeps the in-cluster URL.
    #[arg(long)]
    control_plane_proxy: Option<SocketAddr>,
    /// The namespace whose storage objects the operator serves: its own by default.
    /// Whoever may create these objects makes the operator run privileged pods on the
    /// workers, so only the namespace of the storage administrators is served.
    #[arg(long, env = "SIMPLYBLOCK_WATCH_NAMESPACE")]
    watch_namespace: Option<String>,
    /// Serve every namespace instead (a cluster whose namespaces are all trusted).
    #[arg(
        long,
        env = "SIMPLYBLOCK_WATCH_ALL_NAMESPACES",
        conflicts_with = "watch_namespace"
    )]
    watch_all_namespaces: bool,
    /// The operator's own image: probe Jobs run it, and the CSI driver runs at its
    /// registry and tag (repository simplyblock-csi) unless a SimplyblockDriver names one.
    #[arg(
        long,
        env = "SIMPLYBLOCK_OPERATOR_IMAGE",
        default_value = ProbeSettings::IMAGE
    )]
    probe_image: String,
    /// The pull policy of the operator's own image, which probe Jobs run with.
    #[arg(
        long,
        env = "SIMPLYBLOCK_OPERATOR_IMAGE_PULL_POLICY",
        default_value = ProbeSettings::PULL_POLICY,
        value_parser = ["Always", "IfNotPresent", "Never"]
    )]
    probe_image_pull_policy: String,
    /// The operator's pull secrets (comma-separated names in its namespace): every
    /// workload it renders that names none pulls with them (probe Jobs, storage nodes).
    #[arg(long, env = "SIMPLYBLOCK_IMAGE_PULL_SECRETS", value_delimiter = ',')]
    image_pull_secrets: Vec<String>,
    /// The service account probe Jobs run as.
    #[arg(long, default_value = ProbeSettings::SERVICE_ACCOUNT)]
    probe_service_account: String,
    /// Do not raise the first-install discovery run.
    #[arg(long)]
    disable_initial_discovery: bool,
    /// How often the leader reads each cluster's capacity, health and I/O statistics.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    fleet_interval: Duration,
    /// How many volumes each of those reads visits for their used bytes and I/O (the
    /// control plane's volume lists carry neither); the others wait their turn.
    #[arg(long, default_value_t = 8)]
    fleet_volume_budget: usize,
    /// The StorageCluster the first-install discovery run drafts (the chart's
    /// `operator.discoveryClusterName`); by default the run's name, initial-discovery.
    #[arg(long, env = "SIMPLYBLOCK_DISCOVERY_CLUSTER_NAME")]
    discovery_cluster_name: Option<String>,
    /// Mark this StorageClass, when the operator writes it for a pool, as the cluster's
    /// default (the chart's `operator.defaultStorageClass`).
    #[arg(long, env = "SIMPLYBLOCK_DEFAULT_STORAGE_CLASS")]
    default_storage_class: Option<String>,
    /// Reach the workers' storage-node APIs through this HTTP proxy instead of their
    /// Service names (an operator outside the cluster, e.g. against sbsim).
    #[arg(long)]
    storage_node_proxy: Option<SocketAddr>,
    /// Reconcile without electing a leader: only for a single replica.
    #[arg(long)]
    disable_leader_election: bool,
    /// This replica's name in the leader Lease (by default the pod's name).
    #[arg(long, env = "POD_NAME")]
    leader_identity: Option<String>,
    /// How long the leader Lease stays held without renewal: how long a standby waits
    /// when the leader dies without releasing it.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    lease_duration: Duration,
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

/// The operator's configuration from its flags.
async fn config(args: RunArgs) -> anyhow::Result<simplyblock_operator::Config> {
    let RunArgs {
        webhook_listen,
        metrics_addr,
        metrics_api_addr,
        namespace,
        webhook_service,
        webhook_url,
        certificate_validity,
        control_plane_token_file,
        control_plane_token_audience,
        control_plane_proxy,
        watch_namespace,
        watch_all_namespaces,
        probe_image,
        probe_image_pull_policy,
        image_pull_secrets,
        probe_service_account,
        disable_initial_discovery,
        fleet_interval,
        fleet_volume_budget,
        discovery_cluster_name,
        default_storage_class,
        storage_node_proxy,
        disable_leader_election,
        leader_identity,
        lease_duration,
    } = args;
    let client = kube::Client::try_default().await?;
    let scope = if watch_all_namespaces {
        Scope::all()
    } else {
        Scope::namespace(watch_namespace.unwrap_or_else(|| namespace.clone()))
    };
    let mut context = Context::resolving(client, namespace)
        .with_control_plane_token(Token::File(control_plane_token_file))
        .with_control_plane_audience(control_plane_token_audience)
        .with_scope(scope)
        .with_image_pull_secrets(&image_pull_secrets)
        .with_default_storage_class(default_storage_class.filter(|n| !n.is_empty()))
        .with_shutdown(Shutdown::new());
    if let Some(proxy) = control_plane_proxy {
        context = context.with_control_plane_proxy(proxy);
    }
    if let Some(proxy) = storage_node_proxy {
        context = context.with_snode_proxy(proxy);
    }
    let leader_election = (!disable_leader_election).then(|| LeaderElection {
        lease: LeaderElection::LEASE.into(),
        identity: leader_identity.unwrap_or_else(hostname),
        duration: lease_duration,
    });
    Ok(simplyblock_operator::Config {
        context,
        webhook_listen,
        webhook_endpoint: match webhook_url {
            Some(url) => WebhookEndpoint::Url(url),
            None => WebhookEndpoint::Service(webhook_service),
        },
        certificate_validity,
        metrics_listen: metrics_addr.0,
        metrics_api_listen: metrics_api_addr.0,
        probe: ProbeSettings {
            image: probe_image,
            pull_policy: probe_image_pull_policy,
            pull_secrets: image_pull_secrets,
            service_account: probe_service_account,
        },
        initial_discovery: !disable_initial_discovery,
        discovery_cluster_name: discovery_cluster_name.filter(|n| !n.is_empty()),
        leader_election,
        fleet: simplyblock_operator::fleet::Settings {
            interval: fleet_interval,
            volume_budget: fleet_volume_budget,
        },
    })
}

/// This machine's name: the leader identity outside a pod.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "simplyblock-operator".into())
}

/// SIGTERM (the kubelet stopping the pod) or Ctrl-C.
async fn stop_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            tracing::warn!(error = %e, "SIGTERM cannot be caught; only Ctrl-C stops the operator gracefully");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Runs the preflight checks, prints the report and gives the exit status.
async fn preflight(args: PreflightArgs) -> anyhow::Result<i32> {
    use simplyblock_operator::preflight::{self, NodeRoots, Options};
    let options = Options {
        profile: args.profile,
        tls_provider: args.tls_provider,
        node: !args.skip_node,
        cluster: !args.skip_cluster,
        registries: preflight::registries(&args.registries).map_err(anyhow::Error::msg)?,
    };
    let client = if options.cluster {
        kube::Client::try_default().await.map_err(|e| e.to_string())
    } else {
        Err("not asked for".into())
    };
    let report = preflight::check(
        &options,
        &NodeRoots::under(&args.root),
        client.as_ref().map_err(Clone::clone),
    )
    .await;
    match args.output {
        PreflightOutput::Text => print!("{report}"),
        PreflightOutput::Json => println!("{}", serde_json::to_string_pretty(&report.to_json())?),
    }
    Ok(report.exit_code())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The chart's logFormat (SIMPLYBLOCK_LOG_FORMAT). Logs go to stderr, so that the
    // reports of preflight and uninstall are all of stdout.
    simplyblock_telemetry::logs::init(cli.logs.log_format, "info");
    match cli.command {
        Command::Preflight(args) => {
            let code = preflight(args).await?;
            use std::io::Write as _;
            std::io::stdout().flush()?;
            // The report is printed; the status says whether it found a problem.
            std::process::exit(code);
        }
        Command::Run(args) => {
            let config = config(*args).await?;
            let shutdown = config.context.shutdown.clone();
            tokio::spawn(async move {
                stop_signal().await;
                tracing::info!("stopping: finishing the passes in flight");
                shutdown.fire();
            });
            simplyblock_operator::run(config).await?;
        }
        Command::ApplyCrds {
            directory,
            namespace,
        } => {
            let crds = simplyblock_operator::crds::read(&directory, &namespace)
                .map_err(anyhow::Error::msg)?;
            let client = kube::Client::try_default().await?;
            simplyblock_operator::crds::apply(&client, &crds).await?;
        }
        Command::Uninstall {
            namespace,
            delete_data,
            timeout,
        } => {
            let client = kube::Client::try_default().await?;
            let removal = if delete_data {
                simplyblock_operator::uninstall::Removal::Everything
            } else {
                simplyblock_operator::uninstall::Removal::Driver
            };
            simplyblock_operator::uninstall::run(
                &client,
                removal,
                namespace.as_deref(),
                timeout,
                Duration::from_secs(2),
            )
            .await?;
        }
        Command::Reach { addresses, timeout } => {
            let mut unreachable = Vec::new();
            for address in &addresses {
                let connect = tokio::net::TcpStream::connect(address.as_str());
                match tokio::time::timeout(timeout, connect).await {
                    Ok(Ok(_)) => println!("{address}: reachable"),
                    Ok(Err(e)) => unreachable.push(format!("{address} ({e})")),
                    Err(_) => unreachable.push(format!("{address} (no answer within {timeout:?})")),
                }
            }
            if !unreachable.is_empty() {
                anyhow::bail!(
                    "this node cannot reach {}: check the routes and firewalls between this node and the storage node",
                    unreachable.join(", ")
                );
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
                    // Created, never updated: the probe's account may only create
                    // ConfigMaps, so it cannot change any other of the namespace.
                    match kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
                        client, &namespace,
                    )
                    .create(&kube::api::PostParams::default(), &cm)
                    .await
                    {
                        Ok(_) => tracing::info!(config_map = %name, "wrote the probe report"),
                        // An earlier pod of this Job wrote it; the operator takes a report
                        // only if this run owns it.
                        Err(kube::Error::Api(e)) if e.code == 409 => tracing::info!(
                            config_map = %name,
                            "the probe report was already written"
                        ),
                        Err(e) => return Err(e.into()),
                    }
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

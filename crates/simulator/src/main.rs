//! `sbsim serve`: run the simulator.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use simplyblock_simulator::{Server, ServerTls, Sim, SimConfig, Timings, labels};

#[derive(Parser)]
#[command(
    name = "sbsim",
    about = "A faithful simulator of the simplyblock control plane (/api/v2)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    #[command(flatten)]
    logs: simplyblock_telemetry::logs::LogArgs,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve the control plane, the workers' storage-node APIs and /_sim admin routes.
    Serve(Serve),
}

#[derive(clap::Args)]
struct Serve {
    /// Address to listen on; port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:5000", env = "SBSIM_LISTEN")]
    listen: String,
    /// Where state lives; it survives restarts and kill -9.
    #[arg(long, env = "SBSIM_STATE_DIR")]
    state_dir: PathBuf,
    /// Admin bearer token (repeatable). Without one, any bearer token is accepted.
    #[arg(long = "token", env = "SBSIM_TOKEN")]
    tokens: Vec<String>,
    /// Fleet file (YAML or JSON) describing the simulated workers.
    #[arg(long)]
    fleet: Option<PathBuf>,
    /// Where hardware profiles (host trees) of the fleet live.
    #[arg(long, default_value = "fixtures/hosts")]
    hosts_dir: PathBuf,
    /// Seed for ids, secrets and fault decisions.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Sim seconds per real second (0 freezes time; advance it through /_sim/clock/advance).
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// Fault spec, e.g. "error:method=POST,path=/api/v2/clusters/*/storage-nodes/,rate=0.3;latency:ms=20".
    #[arg(long, default_value = "")]
    faults: String,
    /// The label (KEY or KEY=VALUE) that enrolls a worker; its storage-node API answers only then.
    #[arg(long, default_value = simplyblock_simulator::DEFAULT_ENROLLMENT_LABEL)]
    enrollment_label: String,
    /// Mirror worker labels from the Nodes of this cluster (metadata watch).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Keep answer bodies in the call log.
    #[arg(long)]
    record_bodies: bool,
    /// Serve HTTPS with this certificate (PEM) …
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// … and this key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Seconds a worker reboots for after a node add applies its CPU topology.
    #[arg(long)]
    reboot_seconds: Option<f64>,
    /// Seconds from node record to online during a node add.
    #[arg(long)]
    node_add_seconds: Option<f64>,
    /// Keep each volume's data as a sparse file <id>.img in this directory (for loop devices).
    #[arg(long)]
    volume_files: Option<PathBuf>,
    /// Where the simulated S3 object stores keep their objects (default: <state-dir>/object-stores).
    /// A store is set up as one sets up MinIO, with POST /_sim/object-stores
    /// {"endpoint", "bucket", "region"?, "access_key_id", "secret_access_key"}; a cluster
    /// created with a backup_config naming that endpoint, bucket and key writes its backups
    /// there. Two sbsims given the same folder (and the same bucket) share backups.
    #[arg(long)]
    object_store_dir: Option<PathBuf>,
    /// The version /api/v2/_meta/version reports; without it the route answers 404, as a
    /// control plane without it does.
    #[arg(long)]
    reports_version: Option<String>,
}

fn read(p: &PathBuf) -> anyhow::Result<Vec<u8>> {
    std::fs::read(p).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", p.display()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    simplyblock_telemetry::logs::init(cli.logs.log_format, "info");
    simplyblock_simulator::install_crypto_provider();
    let Cmd::Serve(s) = cli.cmd;
    let mut timings = Timings::default();
    if let Some(r) = s.reboot_seconds {
        timings.reboot_ms = (r * 1000.0) as i64;
    }
    if let Some(r) = s.node_add_seconds {
        timings.node_add_ms = (r * 1000.0) as i64;
    }
    let config = SimConfig {
        tokens: s.tokens,
        seed: s.seed,
        time_scale: s.time_scale,
        fleet: s.fleet,
        hosts_dir: Some(s.hosts_dir),
        faults: s.faults,
        timings,
        enrollment_label: s.enrollment_label,
        record_bodies: s.record_bodies,
        volume_files: s.volume_files,
        object_store_dir: s.object_store_dir,
        version: s.reports_version,
        ..SimConfig::new(s.state_dir)
    };
    if config.tokens.is_empty() {
        tracing::warn!("no --token given: any bearer token is accepted");
    }
    let sim = Sim::open(config)?;
    let tls = match (&s.tls_cert, &s.tls_key) {
        (Some(c), Some(k)) => Some(ServerTls {
            cert_pem: read(c)?,
            key_pem: read(k)?,
            client_ca_pem: s.tls_client_ca.as_ref().map(read).transpose()?,
            plain_too: false,
        }),
        _ => None,
    };
    if let Some(kc) = &s.kubeconfig {
        let client = labels::client(kc).await?;
        tokio::spawn(labels::watch(sim.clone(), client.clone()));
        // No kubelet runs on a simulated worker: sbsim runs its probe Jobs.
        tokio::spawn(simplyblock_simulator::jobs::watch(sim.clone(), client));
    }
    let server = Server::start(sim, &s.listen, tls).await?;
    // The first line on stdout is the URL, so scripts and tests can read it.
    println!("{}", server.url);
    tracing::info!(url = %server.url, "sbsim listening");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tokio::time::timeout(Duration::from_secs(5), server.shutdown())
        .await
        .ok();
    Ok(())
}

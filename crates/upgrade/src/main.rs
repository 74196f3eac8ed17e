//! `simplyblock-upgrade`: moves an installation of the Go operator onto this operator.
//!
//! `preflight` reads the cluster, reports every problem at once and prints the plan of the
//! upgrade and migrate stages; it exits 0 when nothing blocks and 2 when something does.
//! `upgrade` and `migrate` refuse a stage with a blocked step (exit 2), and otherwise carry
//! it out step by step, resuming where an earlier run stopped.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use simplyblock_upgrade::plan::RunError;
use simplyblock_upgrade::preflight::{EXIT_BLOCKED, EXIT_READY};
use simplyblock_upgrade::world::{DEFAULT_OLD_OPERATOR, DEFAULT_RELEASE};
use simplyblock_upgrade::{Context, Helm, Options, Stage, Target, steps};

#[derive(Parser)]
#[command(
    name = "simplyblock-upgrade",
    about = "Move an installation of the Go simplyblock operator (storage.simplyblock.io/v1alpha1) onto this operator"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    logs: simplyblock_telemetry::logs::LogArgs,
}

#[derive(clap::Args)]
struct Common {
    /// The namespace the simplyblock objects and the operator live in.
    #[arg(long, env = "POD_NAMESPACE", default_value = simplyblock_api::DEFAULT_NAMESPACE)]
    namespace: String,
    /// Storage nodes that are not online do not block; they are moved as they are.
    #[arg(long)]
    acknowledge_offline_nodes: bool,
    /// The Helm release this operator is installed as.
    #[arg(long, default_value = DEFAULT_RELEASE)]
    release: String,
    /// The Go operator's Helm release (default: every other release in the namespace).
    #[arg(long, default_value = "")]
    from_release: String,
    /// The Go operator's Deployment, stopped at the swap.
    #[arg(long, default_value = DEFAULT_OLD_OPERATOR)]
    old_operator_deployment: String,
}

impl Common {
    fn target(&self) -> Target {
        Target {
            release: self.release.clone(),
            from_release: self.from_release.clone(),
            old_operator: self.old_operator_deployment.clone(),
        }
    }
    fn options(&self) -> Options {
        Options {
            acknowledge_offline_nodes: self.acknowledge_offline_nodes,
        }
    }
}

#[derive(clap::Args)]
struct Run {
    #[command(flatten)]
    common: Common,
    /// This release's chart (a directory, an archive or a repository reference).
    #[arg(long)]
    chart: Option<String>,
    /// Values files for the chart.
    #[arg(long = "values")]
    values: Vec<String>,
    /// The helm binary.
    #[arg(long, env = "HELM", default_value = "helm")]
    helm: String,
    /// How long a step waits for its effect to show, in seconds.
    #[arg(long, default_value_t = 300)]
    wait_seconds: u64,
}

#[derive(Subcommand)]
enum Command {
    /// Check everything, print each problem and the plan of both stages; change nothing.
    /// Exits 0 when nothing blocks, 2 when something does.
    Preflight(Common),
    /// Run the upgrade stage: this operator deployed beside the Go one with its controllers
    /// held, its conversion webhook, the CRDs serving v1alpha2, the Helm hand-over and the swap.
    Upgrade(Run),
    /// Run the migrate stage, after the upgrade has been verified: ownership, node sets,
    /// keys, handles, then every object rewritten at v1alpha2.
    Migrate {
        #[command(flatten)]
        run: Run,
        /// Confirms the upgrade was verified and the migration may start.
        #[arg(long)]
        confirm: bool,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // The report is stdout; the logs (of the libraries it calls) go to stderr.
    simplyblock_telemetry::logs::init(cli.logs.log_format, "warn");
    match run(cli).await {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("simplyblock-upgrade: {e:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<u8> {
    let client = kube::Client::try_default().await?;
    let (run, stage) = match cli.command {
        Command::Preflight(common) => {
            let report = simplyblock_upgrade::preflight(
                &client,
                &common.namespace,
                &common.target(),
                &common.options(),
            )
            .await?;
            print!("{report}");
            return Ok(u8::try_from(report.exit_code()).unwrap_or(1));
        }
        Command::Upgrade(run) => (run, Stage::Upgrade),
        Command::Migrate { run, confirm } => {
            if !confirm {
                anyhow::bail!(
                    "migrate rewrites every object and cannot be undone; verify the upgrade first, then rerun with --confirm"
                );
            }
            (run, Stage::Migrate)
        }
    };
    let ctx = Context {
        client,
        namespace: run.common.namespace.clone(),
        helm: Helm {
            binary: run.helm.clone(),
            chart: run.chart.clone(),
            release: run.common.release.clone(),
            values: run.values.clone(),
            kubeconfig: None,
        },
        wait: Duration::from_secs(run.wait_seconds),
    };
    println!("stage {stage}, namespace {}", ctx.namespace);
    match simplyblock_upgrade::run::run(
        &ctx,
        &steps::all(),
        stage,
        &run.common.target(),
        &run.common.options(),
    )
    .await
    {
        Ok(()) => {
            println!("stage {stage}: every step done");
            Ok(EXIT_READY as u8)
        }
        Err(e @ RunError::Refused(_)) => {
            eprint!("{e}");
            Ok(EXIT_BLOCKED as u8)
        }
        Err(e) => Err(e.into()),
    }
}

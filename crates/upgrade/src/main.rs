//! `simplyblock-upgrade`: moves an installation of the Go operator onto this operator.
//!
//! `preflight` reads the cluster, reports every problem at once and prints the plan of the
//! upgrade and migrate stages; it exits 0 when nothing blocks and 2 when something does.
//! `upgrade` and `migrate` refuse a stage with a blocked step, and otherwise stop at the
//! first step this release cannot carry out.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use simplyblock_upgrade::plan::RunError;
use simplyblock_upgrade::preflight::{EXIT_BLOCKED, EXIT_READY};
use simplyblock_upgrade::{Options, Stage, observe, steps};

#[derive(Parser)]
#[command(
    name = "simplyblock-upgrade",
    about = "Move an installation of the Go simplyblock operator (storage.simplyblock.io/v1alpha1) onto this operator"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct Target {
    /// The namespace the simplyblock objects live in.
    #[arg(long, env = "POD_NAMESPACE", default_value = simplyblock_api::DEFAULT_NAMESPACE)]
    namespace: String,
    /// Storage nodes that are not online do not block; they are moved as they are.
    #[arg(long)]
    acknowledge_offline_nodes: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Check everything, print each problem and the plan of both stages; change nothing.
    /// Exits 0 when nothing blocks, 2 when something does.
    Preflight(Target),
    /// Run the upgrade stage (the conversion webhook, the CRDs, the operator).
    Upgrade(Target),
    /// Run the migrate stage, after the upgrade has been verified.
    Migrate {
        #[command(flatten)]
        target: Target,
        /// Confirms the upgrade was verified and the migration may start.
        #[arg(long)]
        confirm: bool,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run(Cli::parse()).await {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("simplyblock-upgrade: {e:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<u8> {
    let client = kube::Client::try_default().await?;
    let (target, stage) = match cli.command {
        Command::Preflight(target) => {
            let options = Options {
                acknowledge_offline_nodes: target.acknowledge_offline_nodes,
            };
            let report =
                simplyblock_upgrade::preflight(&client, &target.namespace, &options).await?;
            print!("{report}");
            return Ok(u8::try_from(report.exit_code()).unwrap_or(1));
        }
        Command::Upgrade(target) => (target, Stage::Upgrade),
        Command::Migrate { target, confirm } => {
            if !confirm {
                anyhow::bail!(
                    "migrate rewrites every object; verify the upgrade first, then rerun with --confirm"
                );
            }
            (target, Stage::Migrate)
        }
    };
    let options = Options {
        acknowledge_offline_nodes: target.acknowledge_offline_nodes,
    };
    let world = observe(&client, &target.namespace).await?;
    match simplyblock_upgrade::plan::run(&client, &steps::all(), stage, &world, &options).await {
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

//! `simplyblock-csi`: the CSI driver binary.

use clap::Parser;
use simplyblock_csi::cli::Args;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    // The chart's logFormat, handed down by the operator (SIMPLYBLOCK_LOG_FORMAT).
    simplyblock_telemetry::logs::init(a.logs.log_format, "info");
    simplyblock_csi::install_crypto_provider();
    let kube = if a.kubernetes {
        Some(kube::Client::try_default().await?)
    } else {
        None
    };
    // Unreadable or malformed files stop the driver here, where it is seen.
    let driver = a.driver(kube).await?;
    let socket = a.socket()?;
    tracing::info!(endpoint = %a.endpoint, mode = ?a.mode, "simplyblock-csi serving");
    let routes = driver.routes()?;
    // Runs as long as the driver serves.
    let _recovery = driver.start_recovery()?;
    let shutdown = async {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    simplyblock_csi::serve(&socket, routes, shutdown).await?;
    Ok(())
}

//! `simplyblock-csi`: the CSI driver binary.

use std::sync::Arc;

use clap::Parser;
use simplyblock_csi::cli::Args;
use simplyblock_telemetry::metrics::Metrics;

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
    let metrics = Arc::new(Metrics::new());
    // Bound before the socket is served, so a taken port stops the driver at start.
    let (stop_metrics, metrics_stopped) = tokio::sync::oneshot::channel::<()>();
    let metrics_server = match a.metrics_address()? {
        None => None,
        Some(address) => {
            let listener = tokio::net::TcpListener::bind(address).await.map_err(|e| {
                anyhow::anyhow!(
                    "cannot serve /metrics on {address} ({e}); pass another --metrics-address, or --metrics-address= to serve none"
                )
            })?;
            tracing::info!(address = %listener.local_addr()?, "serving /metrics");
            Some(tokio::spawn(simplyblock_csi::metrics_http::serve(
                listener,
                metrics.clone(),
                driver.metrics_refresh(),
                async {
                    let _ = metrics_stopped.await;
                },
            )))
        }
    };
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
    simplyblock_csi::serve_measured(&socket, routes, metrics, shutdown).await?;
    let _ = stop_metrics.send(());
    if let Some(server) = metrics_server {
        server.await??;
    }
    Ok(())
}

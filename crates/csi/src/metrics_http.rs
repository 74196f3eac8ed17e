//! `GET /metrics`: the driver's registry in the OpenMetrics text format, over plain
//! HTTP inside the pod network, as the Kubernetes CSI sidecars serve theirs. The samples
//! carry method names, gRPC codes, cluster ids and failure reasons, never a secret.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::routing::get;
use simplyblock_telemetry::metrics::{self, Metrics};

/// Brings the gauges read at scrape time up to date before the registry is rendered.
pub type Refresh = Arc<dyn Fn(&Metrics) + Send + Sync>;

/// The address `--metrics-address` names: none when empty, `:PORT` for every IPv4
/// interface, else `HOST:PORT`.
pub fn parse_address(text: &str) -> Result<Option<SocketAddr>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let full = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_owned(),
    };
    full.parse().map(Some).map_err(|e| {
        format!(
            "--metrics-address {text:?} is not an address ({e}); give :PORT, HOST:PORT (IPv6 as [::1]:PORT), or nothing to serve no metrics"
        )
    })
}

#[derive(Clone)]
struct Served {
    metrics: Arc<Metrics>,
    refresh: Option<Refresh>,
}

async fn render(State(s): State<Served>) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    if let Some(refresh) = &s.refresh {
        refresh(&s.metrics);
    }
    ([(CONTENT_TYPE, metrics::CONTENT_TYPE)], s.metrics.render())
}

/// Serve `/metrics` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    refresh: Option<Refresh>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(render))
        .with_state(Served { metrics, refresh });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_a_port_a_host_and_port_or_nothing() {
        assert_eq!(parse_address(""), Ok(None));
        assert_eq!(
            parse_address(":9810"),
            Ok(Some("0.0.0.0:9810".parse().expect("addr")))
        );
        assert_eq!(
            parse_address("[::1]:9810"),
            Ok(Some("[::1]:9810".parse().expect("addr")))
        );
        let e = parse_address("localhost").expect_err("no port");
        assert!(
            e.contains("--metrics-address") && e.contains(":PORT"),
            "{e}"
        );
    }
}

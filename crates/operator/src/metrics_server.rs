//! The operator's metrics over plain HTTP: `GET /metrics` renders the operator's registry
//! ([`crate::metrics`]) in the OpenMetrics text format, and `GET /healthz` answers while
//! the process serves.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;

use crate::Error;
pub use crate::metrics::CONTENT_TYPE;
use crate::metrics::Metrics;

/// `/metrics` and `/healthz`.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(render))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(metrics)
}

async fn render(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics.render())
}

/// A bound metrics server; [`MetricsServer::run`] serves until the task is dropped.
pub struct MetricsServer {
    listener: TcpListener,
    metrics: Arc<Metrics>,
}

impl MetricsServer {
    /// Binds `addr`; port 0 picks a free one (see [`MetricsServer::local_addr`]).
    pub async fn bind(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<MetricsServer, Error> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Listen {
                server: "metrics server",
                addr: addr.to_string(),
                source,
            })?;
        Ok(MetricsServer { listener, metrics })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    pub async fn run(self) {
        if let Err(e) = axum::serve(self.listener, router(self.metrics)).await {
            tracing::warn!(error = %e, "the metrics server stopped");
        }
    }
}

/// What `--metrics-addr` accepts: an address to listen on, or empty or `off` for none.
pub fn parse_listen(text: &str) -> Result<Option<SocketAddr>, String> {
    match text.trim() {
        "" | "off" => Ok(None),
        addr => addr.parse().map(Some).map_err(|e| {
            format!("{text:?} is not an address such as 0.0.0.0:8080, nor empty or off: {e}")
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    async fn get(metrics: &Arc<Metrics>, path: &str) -> (StatusCode, Option<String>, String) {
        let response = router(metrics.clone())
            .oneshot(Request::get(path).body(Body::empty()).expect("request"))
            .await
            .expect("answer");
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("body");
        (
            status,
            content_type,
            String::from_utf8_lossy(&body).into_owned(),
        )
    }

    #[tokio::test]
    async fn metrics_are_rendered_as_openmetrics_text() {
        let metrics = Arc::new(Metrics::new());
        metrics.count(
            "simplyblock_reconcile_total",
            vec![
                ("controller", "metrics-server-test".into()),
                ("result", "error".into()),
            ],
        );
        let (status, content_type, body) = get(&metrics, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type.as_deref(), Some(CONTENT_TYPE));
        assert!(
            body.contains("# TYPE simplyblock_reconcile counter"),
            "{body}"
        );
        assert!(
            body.contains(
                "simplyblock_reconcile_total{controller=\"metrics-server-test\",result=\"error\"} 1.0"
            ),
            "{body}"
        );
        let (status, _, body) = get(&metrics, "/healthz").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
        assert_eq!(get(&metrics, "/other").await.0, StatusCode::NOT_FOUND);
    }

    #[test]
    fn the_flag_reads_an_address_or_off() {
        assert_eq!(
            parse_listen("0.0.0.0:8080"),
            Ok(Some(SocketAddr::from(([0, 0, 0, 0], 8080))))
        );
        assert_eq!(
            parse_listen("[::1]:9090"),
            Ok(Some("[::1]:9090".parse().expect("v6")))
        );
        assert_eq!(parse_listen(""), Ok(None));
        assert_eq!(parse_listen("off"), Ok(None));
        assert!(parse_listen("8080").is_err());
        assert!(parse_listen("on").is_err());
    }
}

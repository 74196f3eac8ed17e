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
use crate::serving::ServerLimits;

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
    limits: ServerLimits,
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
        Ok(MetricsServer {
            listener,
            metrics,
            limits: ServerLimits::METRICS,
        })
    }

    /// Serves within `limits` instead of [`ServerLimits::METRICS`].
    pub fn with_limits(mut self, limits: ServerLimits) -> MetricsServer {
        self.limits = limits;
        self
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    pub async fn run(self) {
        crate::serving::serve(
            "metrics server",
            self.listener,
            self.limits,
            router(self.metrics),
            |tcp| std::future::ready(Ok(tcp)),
        )
        .await;
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

    /// Reads until the server closes the connection.
    async fn until_closed(mut stream: tokio::net::TcpStream) -> String {
        use tokio::io::AsyncReadExt;
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&seen).into_owned()
    }

    #[tokio::test]
    async fn silent_and_idle_connections_are_closed_and_the_bound_keeps_it_answering() {
        use std::time::{Duration, Instant};
        use tokio::io::AsyncWriteExt;
        use tokio::net::TcpStream;
        let limits = ServerLimits {
            handshake_timeout: Duration::from_secs(5),
            header_read_timeout: Duration::from_millis(500),
            idle_timeout: Duration::from_secs(1),
            max_connections: 2,
        };
        let server = MetricsServer::bind(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            Arc::new(Metrics::new()),
        )
        .await
        .expect("bind")
        .with_limits(limits);
        let addr = server.local_addr().expect("addr");
        let serving = tokio::spawn(server.run());

        // Two silent connections fill the bound; a third, real request still gets its
        // answer, and the silent ones are closed.
        let silent = [
            TcpStream::connect(addr).await.expect("connect"),
            TcpStream::connect(addr).await.expect("connect"),
        ];
        let started = Instant::now();
        let mut asking = TcpStream::connect(addr).await.expect("connect");
        asking
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: metrics\r\nconnection: close\r\n\r\n")
            .await
            .expect("request");
        let answer = until_closed(asking).await;
        println!(
            "answered with the bound full of silent connections in {:?}",
            started.elapsed()
        );
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.ends_with("ok"), "{answer}");
        let started = Instant::now();
        for connection in silent {
            until_closed(connection).await;
        }
        println!(
            "the silent connections were closed within {:?}",
            started.elapsed()
        );

        // A request's headers sent halfway, then nothing: closed after the header timeout.
        let mut halfway = TcpStream::connect(addr).await.expect("connect");
        halfway
            .write_all(b"GET /metr")
            .await
            .expect("half a request");
        let started = Instant::now();
        until_closed(halfway).await;
        println!(
            "half-sent headers were dropped after {:?}",
            started.elapsed()
        );
        serving.abort();
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

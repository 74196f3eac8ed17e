//! The operator's metrics: `GET /metrics` renders the operator's registry
//! ([`crate::runtime::metrics`]) in the OpenMetrics text format, and `GET /healthz` answers while
//! the process serves.
//!
//! The operator binary serves both over TLS with the webhooks' certificate, and `/metrics`
//! only to whom the API server lets in ([`Access`]): the series name every object the
//! operator serves. `/healthz` stays open for the kubelet's probes. [`MetricsServer::bind`]
//! alone serves plain and open, for a process that embeds the operator.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::runtime::error::ServerError as Error;
pub use crate::runtime::metrics::CONTENT_TYPE;
use crate::runtime::metrics::Metrics;
use crate::runtime::serving::ServerLimits;
use crate::webhooks::tls::ServingCertificates;

/// The chart's Service in front of the metrics port: its names go into the serving
/// certificate.
pub const SERVICE: &str = "simplyblock-operator-metrics";
/// The chart's ClusterRole that lets a scraper read `/metrics`.
pub const READER_ROLE: &str = "simplyblock-metrics-reader";
/// How long the API server's verdict on a token is kept: a scraper asks every few
/// seconds, and a revoked right stops working within this.
const VERDICT_TTL: Duration = Duration::from_secs(60);
/// The most tokens whose verdicts are kept; past it the oldest are forgotten.
const VERDICTS: usize = 256;

/// Who may read `/metrics`: the holder of a bearer token the API server authenticates
/// (a TokenReview) and lets `get` the non-resource URL `/metrics` (a SubjectAccessReview),
/// as kube-rbac-proxy does.
#[derive(Clone)]
pub struct Access {
    client: kube::Client,
    verdicts: Arc<Mutex<HashMap<String, (Instant, Verdict)>>>,
}

/// The API server's word on one token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// Not authenticated: why.
    Unauthenticated(String),
    /// Authenticated as `user`, who may not read `/metrics`.
    Forbidden(String),
}

impl Access {
    pub fn new(client: kube::Client) -> Access {
        Access {
            client,
            verdicts: Arc::default(),
        }
    }

    /// The verdict on `token`, from the API server unless one younger than
    /// [`VERDICT_TTL`] is kept.
    pub async fn verdict(&self, token: &str) -> Result<Verdict, kube::Error> {
        let now = Instant::now();
        if let Some((at, verdict)) = self.lock().get(token)
            && now.duration_since(*at) < VERDICT_TTL
        {
            return Ok(verdict.clone());
        }
        let verdict = self.ask(token).await?;
        let mut kept = self.lock();
        kept.retain(|_, (at, _)| now.duration_since(*at) < VERDICT_TTL);
        if kept.len() >= VERDICTS {
            kept.clear();
        }
        kept.insert(token.to_owned(), (now, verdict.clone()));
        Ok(verdict)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Verdict)>> {
        self.verdicts.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn ask(&self, token: &str) -> Result<Verdict, kube::Error> {
        let review = Api::<TokenReview>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &TokenReview {
                    spec: TokenReviewSpec {
                        token: token.to_owned(),
                        ..TokenReviewSpec::default()
                    },
                    ..TokenReview::default()
                },
            )
            .await?;
        let status = review.status.unwrap_or_default();
        let user = status.user.unwrap_or_default();
        if status.authenticated != Some(true) || user.username.is_none() {
            return Ok(Verdict::Unauthenticated(status.error.unwrap_or_else(
                || "the API server does not know the token".into(),
            )));
        }
        let name = user.username.clone().unwrap_or_default();
        let access = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &SubjectAccessReview {
                    spec: SubjectAccessReviewSpec {
                        user: user.username,
                        groups: user.groups,
                        uid: user.uid,
                        extra: user.extra,
                        non_resource_attributes: Some(NonResourceAttributes {
                            path: Some("/metrics".into()),
                            verb: Some("get".into()),
                        }),
                        ..SubjectAccessReviewSpec::default()
                    },
                    ..SubjectAccessReview::default()
                },
            )
            .await?;
        Ok(if access.status.is_some_and(|s| s.allowed) {
            Verdict::Allowed
        } else {
            Verdict::Forbidden(name)
        })
    }
}

/// `/metrics` and `/healthz`; `/metrics` only to whom `access` lets in, when given.
pub fn router(metrics: Arc<Metrics>, access: Option<Access>) -> Router {
    Router::new()
        .route("/metrics", get(render))
        .route("/healthz", get(|| async { "ok" }))
        .with_state((metrics, access))
}

async fn render(
    State((metrics, access)): State<(Arc<Metrics>, Option<Access>)>,
    headers: HeaderMap,
) -> Response {
    if let Some(access) = access {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let Some(token) = token else {
            return (
                StatusCode::UNAUTHORIZED,
                format!(
                    "/metrics needs a bearer token: send an account's token whose ClusterRole {READER_ROLE} is bound to it\n"
                ),
            )
                .into_response();
        };
        match access.verdict(token).await {
            Ok(Verdict::Allowed) => {}
            Ok(Verdict::Unauthenticated(why)) => {
                return (
                    StatusCode::UNAUTHORIZED,
                    format!("the bearer token is not accepted ({why})\n"),
                )
                    .into_response();
            }
            Ok(Verdict::Forbidden(user)) => {
                return (
                    StatusCode::FORBIDDEN,
                    format!("{user} may not get /metrics: bind ClusterRole {READER_ROLE} to it\n"),
                )
                    .into_response();
            }
            Err(e) => {
                tracing::warn!(error = %e, "the API server did not review a /metrics token");
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the API server could not be asked who the caller is; try again\n",
                )
                    .into_response();
            }
        }
    }
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics.render()).into_response()
}

/// A bound metrics server; [`MetricsServer::run`] serves until the task is dropped.
pub struct MetricsServer {
    listener: TcpListener,
    metrics: Arc<Metrics>,
    limits: ServerLimits,
    secured: Option<(Arc<ServingCertificates>, Access)>,
}

impl MetricsServer {
    /// Binds `addr`; port 0 picks a free one (see [`MetricsServer::local_addr`]). Plain
    /// and open until [`MetricsServer::secured`].
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
            secured: None,
        })
    }

    /// Serves TLS with `certs`, and `/metrics` only to whom `access` lets in.
    pub fn secured(mut self, certs: Arc<ServingCertificates>, access: Access) -> MetricsServer {
        self.secured = Some((certs, access));
        self
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
        match self.secured {
            Some((certs, access)) => {
                let acceptor = TlsAcceptor::from(certs.server_config());
                crate::runtime::serving::serve(
                    "metrics server",
                    self.listener,
                    self.limits,
                    router(self.metrics, Some(access)),
                    move |tcp| acceptor.accept(tcp),
                )
                .await
            }
            None => {
                crate::runtime::serving::serve(
                    "metrics server",
                    self.listener,
                    self.limits,
                    router(self.metrics, None),
                    |tcp| std::future::ready(Ok(tcp)),
                )
                .await
            }
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
        let response = router(metrics.clone(), None)
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

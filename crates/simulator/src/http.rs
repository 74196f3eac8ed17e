//! The HTTP front: one listener (plain or TLS, optional client certificates) serving
//! `/api/v2` (the control plane), `/snode` (the workers' storage-node APIs, chosen by
//! `Host`) and `/_sim` (admin). Every request passes the faults and lands in the call log.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body as AxBody;
use axum::extract::{Request, State};
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use simplyblock_controlplane::routes as api;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tower::ServiceExt;
use uuid::Uuid;

use crate::calllog::Call;
use crate::error::SimError;
use crate::reply::{ApiError, Body, Reply};
use crate::routes::{self, ApiReq};
use crate::sim::{Sim, lock};
use crate::stream::Streams;

/// What every request is served from: the simulated state, and what the server keeps
/// beside it (the state knows nothing of TLS or streams).
#[derive(Clone)]
struct ServerState {
    sim: Arc<Sim>,
    named_tls: Arc<NamedTls>,
    streams: Arc<Streams>,
}

/// Set per connection so a handler can close it without answering.
#[derive(Clone)]
struct Conn {
    kill: Arc<Notify>,
    scheme: &'static str,
    /// The common name of the certificate the client presented (mutual TLS).
    client: Option<String>,
}

/// The Service the workers' storage-node APIs are reached through, by
/// `<worker>.<service>.<namespace>.svc.cluster.local`.
pub const STORAGE_NODE_SERVICE: &str = "simplyblock-storage-node-api";

/// The TLS sbsim serves per DNS name, beside its listener's own: what a server does once
/// it mounts its Secret. A name covers itself and the names under it, so a storage-node
/// domain (`simplyblock-storage-node-api.<namespace>.svc.cluster.local`) covers its
/// workers, and the control plane's Service name covers the control plane; where several
/// served names cover a host, the longest (most specific) wins, so one worker's own name
/// (`<worker>.simplyblock-storage-node-api.…`) wins over its namespace's domain. A TLS
/// connection whose server name is covered gets that certificate and must present a client
/// certificate its CAs signed when they are given; a plain request to a covered name is
/// refused, as a TLS-only server refuses it.
#[derive(Default)]
pub struct NamedTls(std::sync::RwLock<Vec<(String, Arc<rustls::ServerConfig>)>>);

impl NamedTls {
    /// Serve `tls` for `name` and the names under it from now on (replacing what was there).
    pub fn serve(&self, name: &str, tls: &ServerTls) -> Result<(), SimError> {
        let config = tls_config(tls)?;
        let name = name.trim_matches('.').to_ascii_lowercase();
        let mut served = self.0.write().unwrap_or_else(|e| e.into_inner());
        served.retain(|(d, _)| *d != name);
        served.push((name, config));
        Ok(())
    }

    /// Serves for `name` what a pod mounts from a `kubernetes.io/tls` Secret: `tls.crt` and
    /// `tls.key`, with client certificates required from the CAs of `ca.crt` when
    /// `clients_from_ca`.
    pub fn serve_mounted(
        &self,
        name: &str,
        files: &std::collections::BTreeMap<String, Vec<u8>>,
        clients_from_ca: bool,
    ) -> Result<(), SimError> {
        let file = |key: &str| {
            files
                .get(key)
                .cloned()
                .ok_or_else(|| SimError::Tls(format!("the mounted Secret has no {key}")))
        };
        self.serve(
            name,
            &ServerTls {
                cert_pem: file("tls.crt")?,
                key_pem: file("tls.key")?,
                client_ca_pem: clients_from_ca.then(|| file("ca.crt")).transpose()?,
                plain_too: false,
            },
        )
    }

    /// What the storage-node pods of `namespace` serve from their cluster's serving Secret:
    /// its certificate, with client certificates required from its CAs.
    pub fn serve_storage_nodes(
        &self,
        namespace: &str,
        files: &std::collections::BTreeMap<String, Vec<u8>>,
    ) -> Result<(), SimError> {
        let domain = format!("{STORAGE_NODE_SERVICE}.{namespace}.svc.cluster.local");
        self.serve_mounted(&domain, files, true)
    }

    /// What the storage-node pod on `worker` of `namespace` serves from the certificate of
    /// its own (its pod certificate: `tls.crt`, `tls.key`, and `ca.crt` from the cluster's
    /// serving Secret), with client certificates required from the CAs of `ca.crt`: the
    /// worker's name alone, `<worker>.<STORAGE_NODE_SERVICE>.<namespace>.svc.cluster.local`,
    /// whatever the namespace's domain serves.
    pub fn serve_storage_node(
        &self,
        namespace: &str,
        worker: &str,
        files: &std::collections::BTreeMap<String, Vec<u8>>,
    ) -> Result<(), SimError> {
        let host = format!("{worker}.{STORAGE_NODE_SERVICE}.{namespace}.svc.cluster.local");
        self.serve_mounted(&host, files, true)
    }

    /// The configuration for `host` (port stripped), if a name covering it is served: that
    /// of the longest such name.
    fn for_host(&self, host: &str) -> Option<Arc<rustls::ServerConfig>> {
        let host = host.to_ascii_lowercase();
        let served = self.0.read().unwrap_or_else(|e| e.into_inner());
        served
            .iter()
            .filter(|(name, _)| {
                host.strip_suffix(name.as_str())
                    .is_some_and(|under| under.is_empty() || under.ends_with('.'))
            })
            .max_by_key(|(name, _)| name.len())
            .map(|(_, c)| c.clone())
    }
}

/// The common name of a DER certificate's subject.
fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_owned)
}

/// TLS for the listener.
#[derive(Clone)]
pub struct ServerTls {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    /// Require client certificates signed by these CAs (mTLS).
    pub client_ca_pem: Option<Vec<u8>>,
    /// Also answer plain HTTP on the same port (a connection that does not open with a
    /// TLS handshake): one sbsim stands in for a control plane served over TLS and for
    /// workers' storage-node APIs reached without it.
    pub plain_too: bool,
}

fn tls_config(t: &ServerTls) -> Result<Arc<rustls::ServerConfig>, SimError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = CertificateDer::pem_slice_iter(&t.cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| SimError::Tls(format!("certificate: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(&t.key_pem)
        .map_err(|e| SimError::Tls(format!("key: {e}")))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| SimError::Tls(e.to_string()))?;
    let builder = match &t.client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(ca) {
                roots
                    .add(c.map_err(|e| SimError::Tls(format!("client CA: {e}")))?)
                    .map_err(|e| SimError::Tls(format!("client CA: {e}")))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| SimError::Tls(format!("client verifier: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut cfg = builder
        .with_single_cert(certs, key)
        .map_err(|e| SimError::Tls(e.to_string()))?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// A running sbsim: listener, engine, and the simulator state behind them.
pub struct Server {
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT` (or `https://…`).
    pub url: String,
    pub sim: Arc<Sim>,
    /// The TLS served per DNS name: the workers' storage-node APIs, a control plane's
    /// Service.
    pub named_tls: Arc<NamedTls>,
    /// The open `?watch=true` streams.
    pub streams: Arc<Streams>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Bind `listen` (e.g. `127.0.0.1:0`), start serving and the engine.
    pub async fn start(
        sim: Arc<Sim>,
        listen: &str,
        tls: Option<ServerTls>,
    ) -> Result<Server, SimError> {
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| SimError::Listen {
                addr: listen.to_string(),
                reason: e.to_string(),
            })?;
        let addr = listener.local_addr().map_err(|e| SimError::Listen {
            addr: listen.to_string(),
            reason: e.to_string(),
        })?;
        let plain_too = tls.as_ref().is_some_and(|t| t.plain_too);
        let tls = tls.as_ref().map(tls_config).transpose()?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let (stop, stop_rx) = watch::channel(false);
        let named_tls = Arc::new(NamedTls::default());
        let streams = Arc::new(Streams::default());
        let router = Router::new().fallback(entry).with_state(ServerState {
            sim: sim.clone(),
            named_tls: named_tls.clone(),
            streams: streams.clone(),
        });
        let accept = tokio::spawn(accept_loop(
            named_tls.clone(),
            listener,
            router,
            tls,
            plain_too,
            stop_rx.clone(),
        ));
        let engine = tokio::spawn(crate::engine::run(sim.clone(), stop_rx));
        Ok(Server {
            addr,
            url: format!("{scheme}://{addr}"),
            sim,
            named_tls,
            streams,
            stop,
            tasks: vec![accept, engine],
        })
    }

    /// Stop accepting and stop the engine.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

async fn accept_loop(
    named_tls: Arc<NamedTls>,
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    plain_too: bool,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let tls = tls.clone();
        let named_tls = named_tls.clone();
        tokio::spawn(async move {
            let mut stream = stream;
            if end_connect_tunnel(&mut stream).await.is_err() {
                return;
            }
            // A TLS handshake opens with a record of type 22 (handshake).
            let mut first = [0u8; 1];
            let opens_tls = match stream.peek(&mut first).await {
                Ok(1) => first[0] == 0x16,
                _ => return,
            };
            let kill = Arc::new(Notify::new());
            let service = |conn: Conn| {
                let router = router.clone();
                hyper::service::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(conn.clone());
                    let router = router.clone();
                    async move { router.oneshot(req.map(AxBody::new)).await }
                })
            };
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if !opens_tls {
                if tls.is_some() && !plain_too {
                    return;
                }
                let conn = Conn {
                    kill: kill.clone(),
                    scheme: "http",
                    client: None,
                };
                let c = builder.serve_connection(TokioIo::new(stream), service(conn));
                tokio::select! { _ = c => {}, _ = kill.notified() => {} }
                return;
            }
            // The server name picks the certificate: a served storage-node domain's, or
            // the control plane's.
            let acceptor =
                tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream);
            let Ok(start) = acceptor.await else {
                return;
            };
            let server_name = start.client_hello().server_name().map(str::to_owned);
            let config = server_name
                .as_deref()
                .and_then(|name| named_tls.for_host(name))
                .or(tls);
            let Some(config) = config else {
                return;
            };
            let Ok(s) = start.into_stream(config).await else {
                return;
            };
            let client = s
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|leaf| common_name(leaf));
            let conn = Conn {
                kill: kill.clone(),
                scheme: "https",
                client,
            };
            let c = builder.serve_connection(TokioIo::new(s), service(conn));
            tokio::select! { _ = c => {}, _ = kill.notified() => {} }
        });
    }
}

/// A client that uses sbsim as its HTTP proxy for a name sbsim stands in for sends https
/// through a tunnel, `CONNECT host:port` first (as reqwest does): sbsim answers that it is
/// established and is then the tunnel's far end itself, TLS included. Any other first
/// bytes (a request, a TLS hello) are left for the server to read.
async fn end_connect_tunnel(stream: &mut tokio::net::TcpStream) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const CONNECT: &[u8] = b"CONNECT ";
    let mut first = [0u8; 8];
    loop {
        let n = stream.peek(&mut first).await?;
        if n == 0 || !CONNECT.starts_with(&first[..n]) {
            return Ok(());
        }
        if n == CONNECT.len() {
            break;
        }
        tokio::task::yield_now().await;
    }
    // The request head, to its blank line; a proxy request carries no body.
    let mut head = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8 * 1024 {
            return Err(std::io::Error::other("CONNECT request head over 8 KiB"));
        }
        stream.read_exact(&mut byte).await?;
        head.push(byte[0]);
    }
    stream
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
}

/// A `Host` header's name, its port left out.
fn host_name(host: &str) -> &str {
    host.rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(host, |(name, _)| name)
}

fn parse_query(q: &str) -> HashMap<String, String> {
    url::form_urlencoded::parse(q.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

struct Outcome {
    reply: Result<Reply, ApiError>,
    route: Option<String>,
    www_auth: bool,
}

fn ok(reply: Reply) -> Outcome {
    Outcome {
        reply: Ok(reply),
        route: None,
        www_auth: false,
    }
}

fn err(e: ApiError) -> Outcome {
    Outcome {
        reply: Err(e),
        route: None,
        www_auth: false,
    }
}

/// Each request is handled to its end in a task of its own, as a real server does: a
/// client that gives up (a timeout shorter than a `latency` fault) does not stop the
/// request from committing later, the case an operator must not mistake for "not done".
async fn entry(State(state): State<ServerState>, req: Request) -> Response {
    match tokio::spawn(serve(state, req)).await {
        Ok(response) => response,
        Err(e) => {
            let mut response = Response::new(axum::body::Body::from(format!(
                "sbsim: the request's handler failed: {e}"
            )));
            *response.status_mut() = axum::http::StatusCode::INTERNAL_SERVER_ERROR;
            response
        }
    }
}

async fn serve(state: ServerState, req: Request) -> Response {
    let ServerState {
        sim,
        named_tls,
        streams,
    } = state;
    let started = Instant::now();
    let time = jiff::Timestamp::now().to_string();
    let conn = req.extensions().get::<Conn>().cloned();
    let scheme = conn.as_ref().map(|c| c.scheme).unwrap_or("http");
    let client = conn.as_ref().and_then(|c| c.client.clone());
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost")
        .to_string();
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string);
    let bytes = match axum::body::to_bytes(req.into_body(), 8 << 20).await {
        Ok(b) => b,
        Err(_) => bytes::Bytes::new(),
    };
    let body_json: Option<Value> = if bytes.is_empty() {
        None
    } else {
        serde_json::from_slice(&bytes).ok()
    };
    let is_admin = path.starts_with("/_sim/") || path == "/_sim";
    let verdict = if is_admin {
        Default::default()
    } else {
        lock(&sim.faults).on_request(&method, &path)
    };
    if verdict.latency_ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(verdict.latency_ms)).await;
    }
    let base = format!("{scheme}://{host}");
    let outcome = if let Some(status) = verdict.error {
        if status == 500 {
            err(ApiError::opaque("injected fault"))
        } else {
            err(ApiError::Http(status, "sbsim injected fault".into()))
        }
    } else if verdict.conflict {
        err(ApiError::conflict("sbsim injected conflict"))
    } else if is_admin {
        ok_or(crate::admin::handle(
            &sim,
            &streams,
            &method,
            &path,
            &query,
            body_json.as_ref(),
            auth.as_deref(),
        ))
    } else if scheme == "http" && named_tls.for_host(host_name(&host)).is_some() {
        // nginx's words for it: a server of TLS only answers nothing in plain.
        err(ApiError::Http(
            400,
            "The plain HTTP request was sent to HTTPS port".into(),
        ))
    } else if let Some(verb) = path.strip_prefix("/snode/") {
        let worker = host_name(&host).to_string();
        ok_or(routes::snode::handle(&sim, &worker, verb))
    } else if path.starts_with("/api/v2/") || path == "/api/v2" {
        api_entry(
            &sim,
            &method,
            &path,
            &query,
            &base,
            auth.as_deref(),
            &bytes,
            body_json,
        )
    } else {
        err(ApiError::not_found("Not Found"))
    };
    // The clock, the faults or the fleet moved: open streams look again.
    if is_admin && method != "GET" {
        sim.changed();
    }
    // A refusal the script made is logged under its route too, so a caller's calls count
    // the same whichever were refused.
    let outcome = if outcome.route.is_none() && (verdict.error.is_some() || verdict.conflict) {
        Outcome {
            route: sim.spec.match_path(&path).map(|m| m.template.clone()),
            ..outcome
        }
    } else {
        outcome
    };
    // The request committed; its answer says it failed.
    let outcome = match verdict.commit_error {
        Some(status) => Outcome {
            route: outcome.route.clone(),
            ..err(if status == 500 {
                ApiError::opaque("injected fault after the request committed")
            } else {
                ApiError::Http(
                    status,
                    "sbsim injected fault after the request committed".into(),
                )
            })
        },
        None => outcome,
    };
    if verdict.drop
        && let Some(c) = &conn
    {
        // The request committed; now the answer is lost with the connection.
        record(
            &sim,
            &method,
            &path,
            &query,
            started,
            &time,
            0,
            &outcome,
            &bytes,
            verdict.fired.clone(),
            None,
            client.clone(),
        );
        c.kill.notify_one();
        std::future::pending::<()>().await;
    }
    // `?watch=true` on a streamed route: the GET's answer becomes the stream's snapshot.
    let streamed = watch_stream(&sim, &streams, &method, &path, &query, &base, &outcome);
    let (outcome, streamed) = match streamed {
        Some(Err(e)) => (
            Outcome {
                route: outcome.route.clone(),
                ..err(e)
            },
            None,
        ),
        Some(Ok(resp)) => (outcome, Some(resp)),
        None => (outcome, None),
    };
    if let Some(resp) = streamed {
        record(
            &sim,
            &method,
            &path,
            &query,
            started,
            &time,
            200,
            &outcome,
            &bytes,
            verdict.fired,
            None,
            client,
        );
        return resp;
    }
    let (resp, status, resp_body) = render(&outcome);
    record(
        &sim,
        &method,
        &path,
        &query,
        started,
        &time,
        status,
        &outcome,
        &bytes,
        verdict.fired,
        resp_body,
        client,
    );
    resp
}

/// The event stream for a `?watch=true` GET of a streamed route that answered 200, or
/// the 503 a stream gets while the database is down; `None` for any other request.
fn watch_stream(
    sim: &Arc<Sim>,
    streams: &Arc<Streams>,
    method: &str,
    path: &str,
    query: &str,
    base: &str,
    o: &Outcome,
) -> Option<Result<Response, ApiError>> {
    let watching = parse_query(query)
        .get("watch")
        .is_some_and(|w| matches!(w.to_ascii_lowercase().as_str(), "true" | "1"));
    if method != "GET" || !watching {
        return None;
    }
    let route = o.route.as_deref()?.strip_prefix("/api/v2")?;
    crate::stream::shape(route)?;
    let Ok(Reply {
        status: 200,
        body: Body::Json(first),
        ..
    }) = &o.reply
    else {
        return None;
    };
    if lock(&sim.faults).unready() {
        return Some(Err(ApiError::Http(503, "Database unavailable".into())));
    }
    let m = sim.spec.match_path(path)?;
    let req = crate::stream::scope_request(route, &m.params, base);
    let rx = crate::stream::open(sim.clone(), streams, req, path.to_string(), first.clone());
    let frames = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|f| (Ok::<_, std::convert::Infallible>(f), rx))
    });
    let resp = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-store")
        .header("x-accel-buffering", "no")
        .body(AxBody::from_stream(frames));
    Some(resp.map_err(|e| ApiError::opaque(e.to_string())))
}

fn ok_or(r: Result<Reply, ApiError>) -> Outcome {
    match r {
        Ok(r) => ok(r),
        Err(e) => err(e),
    }
}

#[allow(clippy::too_many_arguments)]
fn api_entry(
    sim: &Sim,
    method: &str,
    path: &str,
    query: &str,
    base: &str,
    auth: Option<&str>,
    bytes: &[u8],
    body: Option<Value>,
) -> Outcome {
    match (method, path.strip_prefix("/api/v2")) {
        ("GET", Some(api::HEALTH)) => return ok(Reply::empty(204)),
        ("GET", Some(api::READY)) => {
            return if lock(&sim.faults).unready() {
                err(ApiError::Plain(503, "FDB not ready".into()))
            } else {
                ok(Reply::empty(204))
            };
        }
        ("GET", Some(api::VERSION)) => {
            return match lock(&sim.version).clone() {
                Some(v) => ok(Reply::ok(json!({ "version": v }))),
                None => err(ApiError::not_found("Not Found")),
            };
        }
        _ => {}
    }
    let Some(m) = sim.spec.match_path(path) else {
        // Starlette's redirect_slashes: the other form of the path, absolute, query kept.
        let other = match path.strip_suffix('/') {
            Some(p) => p.to_string(),
            None => format!("{path}/"),
        };
        if sim.spec.match_path(&other).is_some() {
            let q = if query.is_empty() {
                String::new()
            } else {
                format!("?{query}")
            };
            return ok(Reply::empty(307).with_location(format!("{base}{other}{q}")));
        }
        return err(ApiError::not_found("Not Found"));
    };
    let route = Some(m.template.clone());
    let with_route = |mut o: Outcome| {
        o.route = route.clone();
        o
    };
    if !sim.spec.methods(&m.template).iter().any(|x| x == method) {
        return with_route(err(ApiError::Http(405, "Method Not Allowed".into())));
    }
    let ids_raw: HashMap<String, String> = m.params.clone();
    // Authentication (HTTPBearer): admin tokens, or a cluster's secret for that cluster.
    let token = auth.and_then(|a| {
        let (scheme, t) = a.split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| t.trim().to_string())
    });
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        let mut o = with_route(err(ApiError::Http(401, "Not authenticated".into())));
        o.www_auth = true;
        return o;
    };
    let q = parse_query(query);
    let addressed = ids_raw
        .get("cluster_id")
        .or_else(|| q.get("cluster_id"))
        .cloned();
    let admin = sim.config.tokens.is_empty() || sim.config.tokens.contains(&token);
    let allowed = admin
        || sim.read(|t, _| {
            let by_secret = |c: &crate::model::ClusterRec| c.secret == token;
            match &addressed {
                Some(id) => t.clusters.get(id).is_some_and(by_secret),
                None => {
                    m.template.strip_prefix("/api/v2") == Some(api::CLUSTERS)
                        && method == "GET"
                        && t.clusters.values().any(by_secret)
                }
            }
        });
    if !allowed {
        return with_route(err(ApiError::Http(401, "Invalid token".into())));
    }
    // Path ids are typed UUID, except the NQN-like ones and a group snapshot's number.
    let mut ids = HashMap::new();
    for (k, v) in &ids_raw {
        if matches!(k.as_str(), "nqn" | "host_nqn" | "nic_id" | "group_seq") {
            continue;
        }
        match Uuid::parse_str(v) {
            Ok(u) => {
                ids.insert(k.clone(), u);
            }
            Err(e) => {
                return with_route(err(ApiError::invalid(
                    "uuid_parsing",
                    vec![json!("path"), json!(k)],
                    &format!("Input should be a valid UUID, {e}"),
                    json!(v),
                )));
            }
        }
    }
    if !bytes.is_empty() && body.is_none() {
        return with_route(err(ApiError::invalid(
            "json_invalid",
            vec![json!("body"), json!(0)],
            "JSON decode error",
            Value::Null,
        )));
    }
    let req = ApiReq {
        method: method.to_string(),
        route: m.template.trim_start_matches("/api/v2").to_string(),
        ids,
        params: ids_raw,
        query: q,
        body,
        base: base.to_string(),
    };
    with_route(Outcome {
        reply: routes::handle(sim, &req),
        route: None,
        www_auth: false,
    })
}

fn render(o: &Outcome) -> (Response, u16, Option<(Value, String)>) {
    let (status, body, location, headers) = match &o.reply {
        Ok(r) => (
            r.status,
            r.body.clone(),
            r.location.clone(),
            r.headers.clone(),
        ),
        Err(e) => (e.status(), e.body(), None, Vec::new()),
    };
    let mut builder = Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
    if let Some(l) = &location
        && let Ok(v) = HeaderValue::from_str(l)
    {
        builder = builder.header(header::LOCATION, v);
    }
    for (k, v) in headers {
        builder = builder.header(k, v);
    }
    if o.www_auth {
        builder = builder.header(header::WWW_AUTHENTICATE, "Bearer");
    }
    let (resp, logged) = match body {
        Body::Empty => (builder.body(AxBody::empty()), None),
        Body::Json(v) => {
            let text = v.to_string();
            (
                builder
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(AxBody::from(text)),
                Some((v, "application/json".to_string())),
            )
        }
        Body::Text(t) => (
            builder
                .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
                .body(AxBody::from(t.clone())),
            Some((Value::String(t), "text/plain; charset=utf-8".to_string())),
        ),
    };
    let resp = resp.unwrap_or_else(|_| {
        let mut r = Response::new(AxBody::from("Internal Server Error"));
        *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        r
    });
    (resp, status, logged)
}

#[allow(clippy::too_many_arguments)]
fn record(
    sim: &Sim,
    method: &str,
    path: &str,
    query: &str,
    started: Instant,
    time: &str,
    status: u16,
    o: &Outcome,
    bytes: &[u8],
    faults: Vec<String>,
    resp_body: Option<(Value, String)>,
    client: Option<String>,
) {
    if path.starts_with("/_sim/calls") {
        return;
    }
    let body = (bytes.len() <= 16 << 10)
        .then(|| serde_json::from_slice::<Value>(bytes).ok())
        .flatten();
    let (response, response_content_type) = match (sim.config.record_bodies, resp_body) {
        (true, Some((v, ct))) => (Some(v), Some(ct)),
        _ => (None, None),
    };
    let location = o.reply.as_ref().ok().and_then(|r| r.location.clone());
    let note = o.reply.as_ref().err().map(ApiError::note);
    lock(&sim.calls).push(Call {
        seq: 0,
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        status,
        time: time.to_string(),
        sim_ms: sim.clock.now_ms(),
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        route: o.route.clone(),
        body,
        response,
        response_content_type,
        location,
        faults,
        note,
        client,
    });
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// What a pod mounts: a self-signed certificate for `name`, its key, and itself as the
    /// CA of the clients.
    fn mounted(name: &str) -> BTreeMap<String, Vec<u8>> {
        let issued = rcgen::generate_simple_self_signed(vec![name.to_string()]).expect("cert");
        let cert = issued.cert.pem().into_bytes();
        BTreeMap::from([
            ("tls.crt".to_string(), cert.clone()),
            (
                "tls.key".to_string(),
                issued.signing_key.serialize_pem().into_bytes(),
            ),
            ("ca.crt".to_string(), cert),
        ])
    }

    /// The configuration served for exactly `name`.
    fn served(named: &NamedTls, name: &str) -> Arc<rustls::ServerConfig> {
        let served = named.0.read().expect("lock");
        served
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.clone())
            .unwrap_or_else(|| panic!("{name} is not served"))
    }

    #[test]
    fn a_workers_own_name_wins_over_its_namespaces_domain_in_either_order() {
        const DOMAIN: &str = "simplyblock-storage-node-api.ns.svc.cluster.local";
        let w1 = format!("w1.{DOMAIN}");
        let named = NamedTls::default();
        named
            .serve_storage_node("ns", "w1", &mounted(&w1))
            .expect("the worker's own");
        named
            .serve_storage_nodes("ns", &mounted(&format!("*.{DOMAIN}")))
            .expect("the namespace's");
        let own = served(&named, &w1);
        let shared = served(&named, DOMAIN);
        let at = |host: &str| named.for_host(host);
        assert!(at(&w1).is_some_and(|c| Arc::ptr_eq(&c, &own)));
        assert!(at(&w1.to_ascii_uppercase()).is_some_and(|c| Arc::ptr_eq(&c, &own)));
        assert!(at(&format!("w2.{DOMAIN}")).is_some_and(|c| Arc::ptr_eq(&c, &shared)));
        // Served again, the namespace's domain comes after the worker's name: still the
        // worker's own.
        named
            .serve_storage_nodes("ns", &mounted(&format!("*.{DOMAIN}")))
            .expect("the namespace's again");
        assert!(at(&w1).is_some_and(|c| Arc::ptr_eq(&c, &own)));
        // Another namespace's worker, and a name merely ending alike, are not covered.
        assert!(at("w1.simplyblock-storage-node-api.other.svc.cluster.local").is_none());
        assert!(
            at(&format!("xw1.{DOMAIN}")).is_some_and(|c| Arc::ptr_eq(&c, &served(&named, DOMAIN)))
        );
    }

    #[test]
    fn a_worker_alone_serves_its_own_name_and_nothing_else() {
        let named = NamedTls::default();
        let w1 = "w1.simplyblock-storage-node-api.ns.svc.cluster.local";
        named
            .serve_storage_node("ns", "w1", &mounted(w1))
            .expect("served");
        assert!(named.for_host(w1).is_some());
        assert!(
            named
                .for_host("w2.simplyblock-storage-node-api.ns.svc.cluster.local")
                .is_none()
        );
        assert!(
            named
                .for_host("simplyblock-storage-node-api.ns.svc.cluster.local")
                .is_none()
        );
        let mut incomplete = mounted(w1);
        incomplete.remove("ca.crt");
        assert!(
            named.serve_storage_node("ns", "w1", &incomplete).is_err(),
            "client certificates are required from the mounted CAs"
        );
    }
}

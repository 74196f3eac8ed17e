//! How the webhook and metrics servers hold connections, so that clients that connect and
//! then stall, or simply connect in great numbers, cannot use up the process or keep the
//! API server from being answered.
//!
//! Every connection has a deadline for each phase: the TLS handshake, the request headers,
//! the request body, and the quiet time between requests. The number of connections is
//! bounded; a new connection past the bound displaces the connection that has been quiet
//! the longest (one with no request in flight), so a flood of idle connections costs the
//! flood its oldest members, not the API server its answer. When every connection is busy
//! with a request, the new one waits in the listen backlog until one finishes.

use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower_http::timeout::RequestBodyTimeoutLayer;

/// The deadlines and the connection bound of one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// From accepting a connection to a completed TLS handshake (TLS servers only).
    pub handshake_timeout: Duration,
    /// For a connection's first request, from its acceptance; for a later
    /// request's headers, from their first byte; and for a request's body.
    pub header_read_timeout: Duration,
    /// A connection with no request in flight for this long is closed.
    pub idle_timeout: Duration,
    /// Connections held at once.
    pub max_connections: usize,
}

impl ServerLimits {
    /// The webhook server's: the API server calls with a 10 s admission timeout and keeps
    /// its connections, so a handshake that takes 10 s is no longer one it is waiting for.
    pub const WEBHOOK: ServerLimits = ServerLimits {
        handshake_timeout: Duration::from_secs(10),
        header_read_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(90),
        max_connections: 512,
    };

    /// The metrics server's: a scraper or two and the kubelet's probes.
    pub const METRICS: ServerLimits = ServerLimits {
        handshake_timeout: Duration::from_secs(10),
        header_read_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(90),
        max_connections: 64,
    };
}

/// What the accept loop knows of one open connection.
struct Connection {
    /// Requests whose response has not been produced yet.
    in_flight: AtomicUsize,
    /// Requests answered; a connection that has made none is displaced first.
    answered: AtomicU64,
    /// When the connection last started or finished a request, in milliseconds since the
    /// server started.
    last_active_ms: AtomicU64,
    close: CancellationToken,
    /// Signalled when a request ends, so the idle deadline is taken from then.
    request_ended: Notify,
}

/// The open connections, and the time base of their activity.
struct Connections {
    started: Instant,
    open: Mutex<HashMap<u64, Arc<Connection>>>,
}

impl Connections {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn open(&self, id: u64) -> Arc<Connection> {
        let connection = Arc::new(Connection {
            in_flight: AtomicUsize::new(0),
            answered: AtomicU64::new(0),
            last_active_ms: AtomicU64::new(self.now_ms()),
            close: CancellationToken::new(),
            request_ended: Notify::new(),
        });
        self.lock().insert(id, connection.clone());
        connection
    }

    fn closed(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Closes the connection that has been quiet the longest, if any is quiet at all,
    /// preferring one that has never made a request (a stalled handshake, an idle socket)
    /// to a client such as the API server between its requests.
    fn close_quietest(&self) -> bool {
        let open = self.lock();
        let quietest = open
            .values()
            .filter(|c| c.in_flight.load(Ordering::Acquire) == 0 && !c.close.is_cancelled())
            .min_by_key(|c| {
                (
                    c.answered.load(Ordering::Acquire) > 0,
                    c.last_active_ms.load(Ordering::Acquire),
                )
            });
        match quietest {
            Some(c) => {
                c.close.cancel();
                true
            }
            None => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Connection>>> {
        match self.open.lock() {
            Ok(open) => open,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// Serves `router` on `listener` within `limits`, passing each accepted connection through
/// `handshake` (TLS, or nothing) first. Runs until the task is dropped.
pub(crate) async fn serve<H, Fut, Io>(
    server: &'static str,
    listener: TcpListener,
    limits: ServerLimits,
    router: Router,
    handshake: H,
) where
    H: Fn(TcpStream) -> Fut,
    Fut: Future<Output = std::io::Result<Io>> + Send + 'static,
    Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    serve_identified(server, listener, limits, router, move |tcp| {
        let accepting = handshake(tcp);
        async move { accepting.await.map(|io| (io, ())) }
    })
    .await;
}

/// As [`serve`], with `handshake` also telling who the peer proved to be (a verified client
/// certificate): each request of the connection carries it as an [`axum::Extension`].
pub(crate) async fn serve_identified<H, Fut, Io, Peer>(
    server: &'static str,
    listener: TcpListener,
    limits: ServerLimits,
    router: Router,
    handshake: H,
) where
    H: Fn(TcpStream) -> Fut,
    Fut: Future<Output = std::io::Result<(Io, Peer)>> + Send + 'static,
    Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    Peer: Clone + Send + Sync + 'static,
{
    let router = router.layer(RequestBodyTimeoutLayer::new(limits.header_read_timeout));
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let connections = Arc::new(Connections {
        started: Instant::now(),
        open: Mutex::new(HashMap::new()),
    });
    let mut next_id = 0u64;
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(server, error = %e, "accepting a connection failed");
                // Mostly out of file descriptors: pause for connections to close rather
                // than spin on the same error.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let permit = match slots.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                if connections.close_quietest() {
                    tracing::debug!(server, %peer, "at the connection bound: closed the quietest connection");
                } else {
                    tracing::debug!(server, %peer, "at the connection bound with every connection busy: waiting");
                }
                match slots.clone().acquire_owned().await {
                    Ok(permit) => permit,
                    // The semaphore is never closed.
                    Err(_) => return,
                }
            }
        };
        next_id += 1;
        let id = next_id;
        let connection = connections.open(id);
        let connections = connections.clone();
        let accepting = tokio::time::timeout(limits.handshake_timeout, handshake(tcp));
        let router = router.clone();
        tokio::spawn(async move {
            let close = connection.close.clone();
            tokio::select! {
                () = close.cancelled() => {}
                () = async {
                    let (io, identity) = match accepting.await {
                        Ok(Ok(accepted)) => accepted,
                        Ok(Err(e)) => {
                            tracing::debug!(server, %peer, error = %e, "handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(server, %peer, "handshake timed out");
                            return;
                        }
                    };
                    let router = router.layer(axum::Extension(identity));
                    drive(server, peer, io, router, limits, &connection, &connections).await;
                } => {}
            }
            connections.closed(id);
            drop(permit);
        });
    }
}

/// Serves one connection until the peer closes it, it errs, or it stays idle past the
/// limit (then it is shut down gracefully: an HTTP/2 GOAWAY, or a close between requests).
async fn drive<Io>(
    server: &'static str,
    peer: std::net::SocketAddr,
    io: Io,
    router: Router,
    limits: ServerLimits,
    connection: &Arc<Connection>,
    connections: &Arc<Connections>,
) where
    Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let tracked = {
        let connection = connection.clone();
        let connections = connections.clone();
        tower::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let router = router.clone();
            let connection = connection.clone();
            let connections = connections.clone();
            async move {
                connection.in_flight.fetch_add(1, Ordering::AcqRel);
                let response = tower::ServiceExt::oneshot(router, request).await;
                connection
                    .last_active_ms
                    .store(connections.now_ms(), Ordering::Release);
                connection.answered.fetch_add(1, Ordering::AcqRel);
                connection.in_flight.fetch_sub(1, Ordering::AcqRel);
                connection.request_ended.notify_one();
                response
            }
        })
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder.http2().timer(TokioTimer::new());
    let mut served =
        pin!(builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(tracked)));
    let idle = Duration::from_millis;
    loop {
        let quiet_ms = connections
            .now_ms()
            .saturating_sub(connection.last_active_ms.load(Ordering::Acquire));
        let busy = connection.in_flight.load(Ordering::Acquire) > 0;
        // A connection that has not made its first request is waiting for headers: the
        // HTTP version is read before hyper's own header timeout starts.
        let limit = if connection.answered.load(Ordering::Acquire) == 0 {
            limits.header_read_timeout
        } else {
            limits.idle_timeout
        };
        if !busy && idle(quiet_ms) >= limit {
            tracing::debug!(server, %peer, "closing an idle connection");
            served.as_mut().graceful_shutdown();
            // A peer that ignores the shutdown is dropped after one more header deadline.
            let _ = tokio::time::timeout(limits.header_read_timeout, served.as_mut()).await;
            return;
        }
        let check_in = if busy {
            limit
        } else {
            limit.saturating_sub(idle(quiet_ms))
        };
        tokio::select! {
            result = served.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(server, %peer, error = %e, "connection ended with an error");
                }
                return;
            }
            () = tokio::time::sleep(check_in) => {}
            () = connection.request_ended.notified() => {}
        }
    }
}

//! The client itself and the way every call goes: one HTTP client with the bearer token,
//! reads retried while the server is unavailable, answers read under a cap and classified,
//! event streams opened. The resource modules build on the helpers here.

use std::time::Duration;

use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use url::Url;
use uuid::Uuid;

use super::config::ClientConfig;
use super::retry::{RETRY_CAP, draw, retry_delay};
use crate::error::{Error, Result};
use crate::response::{MAX_BODY, RawResponse, classify, decode, describe, headers_of, read_body};
use crate::tls::client_config;

/// The longest an event stream is read; the server closes its streams after an hour.
const WATCH_DEADLINE: Duration = Duration::from_secs(2 * 3600);

/// The system's resolver, refusing a name any of whose addresses `refuse` names.
struct Refusing {
    refuse: fn(std::net::IpAddr) -> Option<String>,
}

impl reqwest::dns::Resolve for Refusing {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let refuse = self.refuse;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<std::net::SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(why) = addrs.iter().find_map(|a| refuse(a.ip())) {
                return Err(format!("{host} resolves to {why}; not connecting").into());
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Typed client of the control plane. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    api: Url,
    token: crate::Redacted,
    read_retries: u32,
    retry_backoff: Duration,
    max_body: usize,
    max_event: usize,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("api", &self.api.as_str())
            .finish()
    }
}

fn id_from_location(location: Option<&str>) -> Option<Uuid> {
    let loc = location?;
    let path = loc.split('?').next().unwrap_or(loc);
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .and_then(|s| Uuid::parse_str(s).ok())
}

impl Client {
    /// Build a client. Redirects (the server's trailing-slash 307s) are followed with
    /// method, body and token kept, since they stay on the same host.
    pub fn new(config: ClientConfig) -> Result<Self> {
        let tls = client_config(config.tls.as_ref())?;
        let mut builder = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(config.timeout)
            .connect_timeout(config.connect_timeout)
            .redirect(reqwest::redirect::Policy::limited(4));
        if let Some(refuse) = config.refuse_address {
            builder = builder
                .dns_resolver(std::sync::Arc::new(Refusing { refuse }))
                .redirect(reqwest::redirect::Policy::custom(move |attempt| {
                    let literal = attempt
                        .url()
                        .host_str()
                        .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
                        .and_then(|h| h.parse::<std::net::IpAddr>().ok());
                    match literal.and_then(refuse) {
                        Some(why) => attempt.error(format!("a redirect to {why}")),
                        None if attempt.previous().len() >= 4 => {
                            attempt.error("too many redirects")
                        }
                        None => attempt.follow(),
                    }
                }));
        }
        if let Some(addr) = config.connect_to {
            let proxy = reqwest::Proxy::all(format!("http://{addr}"))
                .map_err(|e| Error::Config(format!("proxy {addr}: {e}")))?;
            builder = builder.proxy(proxy);
        }
        let http = builder
            .build()
            .map_err(|e| Error::Config(format!("HTTP client: {e}")))?;
        let mut api = config.base_url.clone();
        if api.cannot_be_a_base() {
            return Err(Error::Config(format!(
                "{} cannot carry a path",
                config.base_url
            )));
        }
        let base = api.path().trim_end_matches('/').to_string();
        api.set_path(&format!("{base}/api/v2"));
        Ok(Self {
            http,
            api,
            token: config.token,
            read_retries: config.read_retries,
            retry_backoff: config.retry_backoff,
            max_body: MAX_BODY,
            max_event: crate::sse::MAX_EVENT,
        })
    }

    /// The same client with another bearer token (e.g. a cluster secret).
    pub fn with_token(&self, token: impl Into<String>) -> Self {
        let mut c = self.clone();
        c.token = crate::Redacted::new(token);
        c
    }

    /// Send one request to `path` (relative to `/api/v2`, e.g. `/clusters/`) and return
    /// the answer whatever its status. GETs are retried while the server is unavailable.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
    ) -> Result<RawResponse> {
        let url = format!("{}{}", self.api.as_str().trim_end_matches('/'), path);
        let attempts = if method == Method::GET {
            self.read_retries + 1
        } else {
            1
        };
        let mut last = None;
        for attempt in 0..attempts {
            if attempt > 0 {
                let cap = RETRY_CAP.max(self.retry_backoff);
                tokio::time::sleep(retry_delay(attempt, self.retry_backoff, cap, draw())).await;
            }
            match self.send_once(&method, &url, path, query, body).await {
                Ok(r) if method == Method::GET && matches!(r.status, 502..=504) => {
                    last = Some(Ok(r));
                }
                Ok(r) => return Ok(r),
                Err(e @ Error::Unavailable { .. }) => last = Some(Err(e)),
                Err(e) => return Err(e),
            }
        }
        last.unwrap_or_else(|| {
            Err(Error::Unavailable {
                method: method.to_string(),
                path: path.to_string(),
                message: "no attempt was made".into(),
            })
        })
    }

    async fn send_once(
        &self,
        method: &Method,
        url: &str,
        path: &str,
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
    ) -> Result<RawResponse> {
        let mut req = self
            .http
            .request(method.clone(), url)
            .bearer_auth(self.token.expose());
        if !query.is_empty() {
            req = req.query(query);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| not_sent(method.as_str(), path, &e))?;
        let status = resp.status().as_u16();
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let location = header("location");
        let content_type = header("content-type");
        let headers = headers_of(&resp);
        let body = read_body(resp, self.max_body, method.as_str(), path).await?;
        Ok(RawResponse {
            status,
            location,
            content_type,
            headers,
            body,
        })
    }

    /// Open the event stream of a list or detail route (`path` relative to `/api/v2`,
    /// e.g. `/clusters/{c}/storage-nodes/`) with `?watch=true`. Anything but a 200 is
    /// classified as every answer is: a 404 means the scope's object (or its parent) is
    /// gone. The stream outlives the client's request deadline; the server ends it.
    pub async fn watch(&self, path: &str) -> Result<crate::sse::EventStream> {
        let url = format!("{}{}", self.api.as_str().trim_end_matches('/'), path);
        let resp = self
            .http
            .get(&url)
            .bearer_auth(self.token.expose())
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .query(&[("watch", "true")])
            .timeout(WATCH_DEADLINE)
            .send()
            .await
            .map_err(|e| not_sent("GET", path, &e))?;
        let status = resp.status().as_u16();
        if status == 200 {
            return Ok(crate::sse::EventStream::new(
                resp,
                path.to_string(),
                self.max_event,
            ));
        }
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let headers = headers_of(&resp);
        let body = read_body(resp, self.max_body, "GET", path).await?;
        Err(classify(
            &Method::GET,
            path,
            &RawResponse {
                status,
                location: None,
                content_type,
                headers,
                body,
            },
        ))
    }

    /// Send and classify: a 2xx is returned, anything else becomes an [`Error`].
    pub(super) async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
    ) -> Result<RawResponse> {
        let r = self.raw(method.clone(), path, query, body).await?;
        if (200..300).contains(&r.status) {
            return Ok(r);
        }
        Err(classify(&method, path, &r))
    }

    pub(super) async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let r = self.call(Method::GET, path, &[], None).await?;
        decode(&Method::GET, path, &r)
    }

    pub(super) async fn send<B: Serialize>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&B>,
    ) -> Result<RawResponse> {
        let body = match body {
            Some(b) => Some(serde_json::to_value(b).map_err(|e| Error::Invalid {
                method: method.to_string(),
                path: path.to_string(),
                message: format!("body not serialisable: {e}"),
            })?),
            None => None,
        };
        self.call(method, path, query, body.as_ref()).await
    }

    pub(super) async fn post_empty(&self, path: &str, query: &[(&str, String)]) -> Result<()> {
        self.send::<()>(Method::POST, path, query, None).await?;
        Ok(())
    }

    pub(super) fn created_id(method: &Method, path: &str, r: &RawResponse) -> Result<Uuid> {
        if let Some(id) = id_from_location(r.location.as_deref()) {
            return Ok(id);
        }
        // `response-format=identifier` bodies are a JSON string.
        if let Ok(s) = serde_json::from_slice::<String>(&r.body)
            && let Ok(id) = Uuid::parse_str(&s)
        {
            return Ok(id);
        }
        Err(Error::Protocol {
            method: method.to_string(),
            path: path.to_string(),
            status: r.status,
            message: "a creation answer without an id in Location or body".into(),
        })
    }
}

/// Why a request got no answer: the server's certificate did not verify, or the server
/// could not be reached.
fn not_sent(method: &str, path: &str, e: &reqwest::Error) -> Error {
    let (method, path, message) = (method.to_string(), path.to_string(), describe(e));
    if untrusted(e) {
        Error::Untrusted {
            method,
            path,
            message,
        }
    } else {
        Error::Unavailable {
            method,
            path,
            message,
        }
    }
}

/// Whether `e` comes from a server certificate that did not verify. rustls's error
/// reaches here inside an I/O error, whose `source` skips it, so each I/O error's inner
/// error is looked at too.
fn untrusted(e: &reqwest::Error) -> bool {
    use std::error::Error as _;
    let invalid = |inner: &(dyn std::error::Error + 'static)| {
        inner
            .downcast_ref::<rustls::Error>()
            .is_some_and(|r| matches!(r, rustls::Error::InvalidCertificate(_)))
    };
    let mut src = e.source();
    while let Some(inner) = src {
        let wrapped = inner
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .is_some_and(|i| invalid(i));
        if invalid(inner) || wrapped {
            return true;
        }
        src = inner.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::size;

    #[test]
    fn location_yields_the_id() {
        let id = Uuid::from_u128(7);
        let loc = format!("/api/v2/clusters/x/storage-pools/y/volumes/{id}/");
        assert_eq!(id_from_location(Some(&loc)), Some(id));
        assert_eq!(id_from_location(Some("/api/v2/clusters/")), None);
    }

    /// Serves `answer` (raw HTTP) to every connection on a loopback port; the client for it.
    async fn serving(answer: Vec<u8>) -> Client {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = conn.write_all(&answer).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        let url = Url::parse(&format!("http://{addr}")).expect("url");
        let mut config = ClientConfig::new(url, "token");
        config.read_retries = 0;
        Client::new(config).expect("client")
    }

    fn too_large(e: &Error, what: &str) {
        let text = e.to_string();
        assert!(matches!(e, Error::Protocol { .. }), "{text}");
        assert!(!e.is_retryable(), "{text}");
        assert!(text.contains(what), "{text}");
    }

    #[tokio::test]
    async fn a_body_past_the_cap_is_refused_naming_the_url_and_the_cap() {
        let body = "x".repeat(2048);
        // Announced by its length: refused before it is read.
        let announced = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        // Unannounced (read to the end of the connection): refused once past the cap.
        let unannounced = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{body}"
        );
        for answer in [announced, unannounced] {
            let mut client = serving(answer.into_bytes()).await;
            client.max_body = 1024;
            let e = client
                .raw(Method::GET, "/clusters/", &[], None)
                .await
                .expect_err("a body past the cap");
            too_large(&e, "/api/v2/clusters/ is larger than 1024 bytes");
            // Within the cap the same answer is read whole.
            client.max_body = 4096;
            let r = client
                .raw(Method::GET, "/clusters/", &[], None)
                .await
                .expect("within the cap");
            assert_eq!(r.body.len(), 2048);
        }
        assert_eq!(size(MAX_BODY), "16 MiB");
    }

    #[tokio::test]
    async fn an_event_past_the_cap_breaks_the_stream_naming_the_cap() {
        let data = "y".repeat(600);
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\nevent: snapshot\r\ndata: []\r\n\r\nevent: updated\r\ndata: {data}\r\ndata: {data}\r\n\r\n"
        );
        let mut client = serving(answer.into_bytes()).await;
        client.max_event = 1000;
        let mut stream = client.watch("/clusters/").await.expect("stream");
        let first = stream.next().await.expect("the first event");
        assert_eq!(
            first,
            Some(crate::sse::Frame::Event {
                event: "snapshot".into(),
                data: "[]".into()
            })
        );
        let e = stream.next().await.expect_err("an event past the cap");
        too_large(&e, "larger than 1000 bytes");
        assert_eq!(size(crate::sse::MAX_EVENT), "1 MiB");
    }
}

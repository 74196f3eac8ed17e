//! The `/api/v2` client.

use std::time::Duration;

use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use url::Url;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::response::{MAX_BODY, RawResponse, classify, decode, describe, read_body};
use crate::tls::{TlsConfig, client_config};
use crate::types::*;

/// The longest an event stream is read; the server closes its streams after an hour.
const WATCH_DEADLINE: Duration = Duration::from_secs(2 * 3600);

/// The longest pause between two attempts of a read, however many came before.
pub const RETRY_CAP: Duration = Duration::from_secs(10);

/// The pause before retry `attempt` (1 for the first retry): a uniform draw (`draw` in
/// `[0, 1)`) below `base` doubled per earlier retry, capped at `cap`. Full jitter, so
/// clients that failed together do not come back together.
pub fn retry_delay(attempt: u32, base: Duration, cap: Duration, draw: f64) -> Duration {
    let doublings = attempt.saturating_sub(1).min(31);
    let ceiling = base.saturating_mul(1 << doublings).min(cap);
    ceiling.mul_f64(draw.clamp(0.0, 1.0))
}

/// A draw in `[0, 1)`, different at each call and in each process (no dependency for
/// what needs no cryptographic quality): the random part of [`retry_delay`].
pub fn draw() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|t| t.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// How to reach the control plane.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Scheme, host and port, e.g. `http://simplyblock-webappapi:5000`; `/api/v2` is appended.
    pub base_url: Url,
    /// Bearer token: a service-account token or a cluster secret.
    pub token: crate::Redacted,
    /// HTTPS material; `None` for plain HTTP.
    pub tls: Option<TlsConfig>,
    /// Whole-request deadline.
    pub timeout: Duration,
    /// TCP/TLS connect deadline.
    pub connect_timeout: Duration,
    /// Extra attempts for idempotent reads (GET) that found the server unavailable.
    pub read_retries: u32,
    /// The longest first pause between read attempts; doubled per retry up to
    /// [`RETRY_CAP`], each pause a random part of that (see [`retry_delay`]).
    pub retry_backoff: Duration,
    /// Send requests through this address as an HTTP proxy instead of resolving the
    /// URL's host: plain HTTP names the URL (absolute URI and `Host`), HTTPS goes through
    /// a `CONNECT` tunnel and verifies the certificate against the URL's host as ever.
    /// Lets an operator outside the cluster reach a control plane known by its in-cluster
    /// address (a test, the demo, with sbsim).
    pub connect_to: Option<std::net::SocketAddr>,
    /// Refuse to connect to an address this names (with why): every address the URL's
    /// host resolves to is judged at each new connection, and the connection uses only
    /// addresses judged, so a name repointed after the client was built is caught too. A
    /// redirect to a host given as an address is judged before it is followed. Not
    /// applied to `connect_to`, nor to an address written in `base_url` (judge that before
    /// building the client).
    pub refuse_address: Option<fn(std::net::IpAddr) -> Option<String>>,
}

impl ClientConfig {
    /// Defaults: 30 s timeout, 5 s connect timeout, 3 read retries from 200 ms.
    pub fn new(base_url: Url, token: impl Into<String>) -> Self {
        Self {
            base_url,
            token: crate::Redacted::new(token),
            tls: None,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            read_retries: 3,
            retry_backoff: Duration::from_millis(200),
            connect_to: None,
            refuse_address: None,
        }
    }
}

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

/// Options of `DELETE …/storage-nodes/{n}/`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeRemoveOptions {
    pub force_remove: bool,
    pub force_delete: bool,
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

/// Percent-encode one path segment (an NQN carries `:`; hosts carry nothing odd, but be safe).
fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
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
        let body = read_body(resp, self.max_body, method.as_str(), path).await?;
        Ok(RawResponse {
            status,
            location,
            content_type,
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
        let body = read_body(resp, self.max_body, "GET", path).await?;
        Err(classify(
            &Method::GET,
            path,
            &RawResponse {
                status,
                location: None,
                content_type,
                body,
            },
        ))
    }

    /// Send and classify: a 2xx is returned, anything else becomes an [`Error`].
    async fn call(
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

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let r = self.call(Method::GET, path, &[], None).await?;
        decode(&Method::GET, path, &r)
    }

    async fn send<B: Serialize>(
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

    async fn post_empty(&self, path: &str, query: &[(&str, String)]) -> Result<()> {
        self.send::<()>(Method::POST, path, query, None).await?;
        Ok(())
    }

    fn created_id(method: &Method, path: &str, r: &RawResponse) -> Result<Uuid> {
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

    // ---- readiness -------------------------------------------------------------------

    /// `GET /_meta/ready`: Ok when the control plane's database answers; its 503 while
    /// unready is [`Error::Unavailable`], as every 503 is.
    pub async fn ready(&self) -> Result<()> {
        self.call(Method::GET, "/_meta/ready", &[], None)
            .await
            .map(|_| ())
    }

    /// `GET /_meta/version`: the version the control plane reports, `None` when it
    /// reports none (a control plane without the route answers 404). The answer is a JSON
    /// string or an object with a `version` field.
    pub async fn version(&self) -> Result<Option<String>> {
        let path = "/_meta/version";
        let r = self.raw(Method::GET, path, &[], None).await?;
        if r.status == 404 {
            return Ok(None);
        }
        if !(200..300).contains(&r.status) {
            return Err(classify(&Method::GET, path, &r));
        }
        let value: serde_json::Value = decode(&Method::GET, path, &r)?;
        let version = match &value {
            serde_json::Value::String(v) => Some(v.clone()),
            serde_json::Value::Object(o) => {
                o.get("version").and_then(|v| v.as_str()).map(str::to_owned)
            }
            _ => None,
        };
        match version {
            Some(v) if !v.trim().is_empty() => Ok(Some(v.trim().to_owned())),
            Some(_) => Ok(None),
            None => Err(Error::Protocol {
                method: "GET".into(),
                path: path.into(),
                status: r.status,
                message: format!("expected a version string or {{\"version\": …}}, got {value}"),
            }),
        }
    }

    /// `GET /_meta/health`.
    pub async fn health(&self) -> Result<()> {
        self.call(Method::GET, "/_meta/health", &[], None)
            .await
            .map(|_| ())
    }

    // ---- clusters ----------------------------------------------------------------------

    pub async fn list_clusters(&self) -> Result<Vec<Cluster>> {
        self.get("/clusters/").await
    }

    pub async fn get_cluster(&self, cluster: Uuid) -> Result<Cluster> {
        self.get(&format!("/clusters/{cluster}/")).await
    }

    /// `POST /clusters/` with `response-format=full`.
    pub async fn create_cluster(&self, params: &ClusterCreate) -> Result<Cluster> {
        let path = "/clusters/";
        let r = self
            .send(
                Method::POST,
                path,
                &[("response-format", "full".into())],
                Some(params),
            )
            .await?;
        decode(&Method::POST, path, &r)
    }

    pub async fn update_cluster(&self, cluster: Uuid, update: &ClusterUpdate) -> Result<()> {
        self.send(
            Method::PUT,
            &format!("/clusters/{cluster}/"),
            &[],
            Some(update),
        )
        .await
        .map(|_| ())
    }

    pub async fn delete_cluster(&self, cluster: Uuid) -> Result<()> {
        self.send::<()>(Method::DELETE, &format!("/clusters/{cluster}/"), &[], None)
            .await
            .map(|_| ())
    }

    /// Starts activation in the background (202); poll the cluster's status.
    pub async fn activate_cluster(&self, cluster: Uuid) -> Result<()> {
        self.post_empty(&format!("/clusters/{cluster}/activate"), &[])
            .await
    }

    pub async fn expand_cluster(&self, cluster: Uuid) -> Result<()> {
        self.post_empty(&format!("/clusters/{cluster}/expand"), &[])
            .await
    }

    pub async fn shutdown_cluster(&self, cluster: Uuid) -> Result<()> {
        self.post_empty(&format!("/clusters/{cluster}/shutdown"), &[])
            .await
    }

    pub async fn start_cluster(&self, cluster: Uuid) -> Result<()> {
        self.post_empty(&format!("/clusters/{cluster}/start"), &[])
            .await
    }

    pub async fn rebalance_cluster(&self, cluster: Uuid) -> Result<()> {
        self.post_empty(&format!("/clusters/{cluster}/rebalance"), &[])
            .await
    }

    /// Capacity history (untyped samples).
    pub async fn cluster_capacity(&self, cluster: Uuid) -> Result<Vec<serde_json::Value>> {
        self.get(&format!("/clusters/{cluster}/capacity")).await
    }

    // ---- storage nodes -----------------------------------------------------------------

    pub async fn list_storage_nodes(&self, cluster: Uuid) -> Result<Vec<StorageNode>> {
        self.get(&format!("/clusters/{cluster}/storage-nodes/"))
            .await
    }

    pub async fn get_storage_node(&self, cluster: Uuid, node: Uuid) -> Result<StorageNode> {
        self.get(&format!("/clusters/{cluster}/storage-nodes/{node}/"))
            .await
    }

    /// Queue a `node_add` task; returns the task id. Not idempotent: a second add for the
    /// same address while the first is open is refused (opaque 500).
    pub async fn add_storage_node(&self, cluster: Uuid, params: &StorageNodeAdd) -> Result<Uuid> {
        let path = format!("/clusters/{cluster}/storage-nodes/");
        let r = self
            .send(
                Method::POST,
                &path,
                &[("response-format", "identifier".into())],
                Some(params),
            )
            .await?;
        Self::created_id(&Method::POST, &path, &r)
    }

    pub async fn remove_storage_node(
        &self,
        cluster: Uuid,
        node: Uuid,
        options: NodeRemoveOptions,
    ) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &format!("/clusters/{cluster}/storage-nodes/{node}/"),
            &[
                ("force_remove", options.force_remove.to_string()),
                ("force_delete", options.force_delete.to_string()),
            ],
            None,
        )
        .await
        .map(|_| ())
    }

    /// `force` is a query parameter on the server (a JSON `force` is silently ignored).
    pub async fn suspend_storage_node(&self, cluster: Uuid, node: Uuid, force: bool) -> Result<()> {
        self.post_empty(
            &format!("/clusters/{cluster}/storage-nodes/{node}/suspend"),
            &[("force", force.to_string())],
        )
        .await
    }

    pub async fn resume_storage_node(&self, cluster: Uuid, node: Uuid) -> Result<()> {
        self.post_empty(
            &format!("/clusters/{cluster}/storage-nodes/{node}/resume"),
            &[],
        )
        .await
    }

    /// 202 and a background shutdown; a 409 names what blocks a graceful one.
    pub async fn shutdown_storage_node(
        &self,
        cluster: Uuid,
        node: Uuid,
        force: bool,
    ) -> Result<()> {
        self.post_empty(
            &format!("/clusters/{cluster}/storage-nodes/{node}/shutdown"),
            &[("force", force.to_string())],
        )
        .await
    }

    /// 202 and a background restart; refusals are invisible, so poll the status.
    pub async fn restart_storage_node(
        &self,
        cluster: Uuid,
        node: Uuid,
        params: &NodeRestart,
    ) -> Result<()> {
        self.send(
            Method::POST,
            &format!("/clusters/{cluster}/storage-nodes/{node}/restart"),
            &[],
            Some(params),
        )
        .await
        .map(|_| ())
    }

    pub async fn promote_storage_node(&self, cluster: Uuid, node: Uuid) -> Result<()> {
        self.post_empty(
            &format!("/clusters/{cluster}/storage-nodes/{node}/promote"),
            &[],
        )
        .await
    }

    pub async fn storage_node_nics(&self, cluster: Uuid, node: Uuid) -> Result<Vec<Nic>> {
        self.get(&format!("/clusters/{cluster}/storage-nodes/{node}/nics"))
            .await
    }

    // ---- devices -----------------------------------------------------------------------

    pub async fn list_devices(&self, cluster: Uuid, node: Uuid) -> Result<Vec<Device>> {
        self.get(&format!(
            "/clusters/{cluster}/storage-nodes/{node}/devices/"
        ))
        .await
    }

    pub async fn get_device(&self, cluster: Uuid, node: Uuid, device: Uuid) -> Result<Device> {
        self.get(&format!(
            "/clusters/{cluster}/storage-nodes/{node}/devices/{device}/"
        ))
        .await
    }

    pub async fn remove_device(
        &self,
        cluster: Uuid,
        node: Uuid,
        device: Uuid,
        force: bool,
    ) -> Result<()> {
        self.post_empty(
            &format!("/clusters/{cluster}/storage-nodes/{node}/devices/{device}/remove"),
            &[("force", force.to_string())],
        )
        .await
    }

    pub async fn restart_device(
        &self,
        cluster: Uuid,
        node: Uuid,
        device: Uuid,
        force: bool,
    ) -> Result<()> {
        self.post_empty(
            &format!("/clusters/{cluster}/storage-nodes/{node}/devices/{device}/restart"),
            &[("force", force.to_string())],
        )
        .await
    }

    /// Marks a removed device failed for good (its data is rebuilt elsewhere). A newer
    /// control plane's call: refused unless the device is removed, and while any node has
    /// a volume migration.
    pub async fn fail_device(&self, cluster: Uuid, node: Uuid, device: Uuid) -> Result<()> {
        self.post_empty(
            &format!("/clusters/{cluster}/storage-nodes/{node}/devices/{device}/fail"),
            &[],
        )
        .await
    }

    pub async fn reset_device(&self, cluster: Uuid, node: Uuid, device: Uuid) -> Result<()> {
        self.post_empty(
            &format!("/clusters/{cluster}/storage-nodes/{node}/devices/{device}/reset"),
            &[],
        )
        .await
    }

    // ---- tasks -------------------------------------------------------------------------

    pub async fn list_tasks(&self, cluster: Uuid) -> Result<Vec<Task>> {
        self.get(&format!("/clusters/{cluster}/tasks/")).await
    }

    /// An unknown task id answers 500 on the real server, not 404.
    pub async fn get_task(&self, cluster: Uuid, task: Uuid) -> Result<Task> {
        self.get(&format!("/clusters/{cluster}/tasks/{task}/"))
            .await
    }

    // ---- pools -------------------------------------------------------------------------

    pub async fn list_pools(&self, cluster: Uuid) -> Result<Vec<Pool>> {
        self.get(&format!("/clusters/{cluster}/storage-pools/"))
            .await
    }

    pub async fn get_pool(&self, cluster: Uuid, pool: Uuid) -> Result<Pool> {
        self.get(&format!("/clusters/{cluster}/storage-pools/{pool}/"))
            .await
    }

    /// The pool with this name, if any.
    pub async fn find_pool(&self, cluster: Uuid, name: &str) -> Result<Option<Pool>> {
        Ok(self
            .list_pools(cluster)
            .await?
            .into_iter()
            .find(|p| p.name == name))
    }

    pub async fn create_pool(&self, cluster: Uuid, params: &PoolCreate) -> Result<Pool> {
        let path = format!("/clusters/{cluster}/storage-pools/");
        let r = self
            .send(
                Method::POST,
                &path,
                &[("response-format", "full".into())],
                Some(params),
            )
            .await?;
        decode(&Method::POST, &path, &r)
    }

    pub async fn update_pool(&self, cluster: Uuid, pool: Uuid, update: &PoolUpdate) -> Result<()> {
        self.send(
            Method::PUT,
            &format!("/clusters/{cluster}/storage-pools/{pool}/"),
            &[],
            Some(update),
        )
        .await
        .map(|_| ())
    }

    pub async fn delete_pool(&self, cluster: Uuid, pool: Uuid) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &format!("/clusters/{cluster}/storage-pools/{pool}/"),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    pub async fn add_pool_host(&self, cluster: Uuid, pool: Uuid, host_nqn: &str) -> Result<()> {
        self.send(
            Method::POST,
            &format!("/clusters/{cluster}/storage-pools/{pool}/host"),
            &[],
            Some(&HostNqn {
                host_nqn: host_nqn.into(),
            }),
        )
        .await
        .map(|_| ())
    }

    /// A DELETE with a JSON body, as the server requires.
    pub async fn remove_pool_host(&self, cluster: Uuid, pool: Uuid, host_nqn: &str) -> Result<()> {
        self.send(
            Method::DELETE,
            &format!("/clusters/{cluster}/storage-pools/{pool}/host"),
            &[],
            Some(&HostNqn {
                host_nqn: host_nqn.into(),
            }),
        )
        .await
        .map(|_| ())
    }

    // ---- volumes -----------------------------------------------------------------------

    fn vol_path(cluster: Uuid, pool: Uuid) -> String {
        format!("/clusters/{cluster}/storage-pools/{pool}/volumes/")
    }

    pub async fn list_volumes(&self, cluster: Uuid, pool: Uuid) -> Result<Vec<Volume>> {
        self.get(&Self::vol_path(cluster, pool)).await
    }

    pub async fn get_volume(&self, cluster: Uuid, pool: Uuid, volume: Uuid) -> Result<Volume> {
        self.get(&format!("{}{volume}/", Self::vol_path(cluster, pool)))
            .await
    }

    /// Create a volume; returns its id (taken from `Location`). A duplicate name in any
    /// cluster is a [`Error::Conflict`].
    pub async fn create_volume(
        &self,
        cluster: Uuid,
        pool: Uuid,
        params: &VolumeCreate,
    ) -> Result<Uuid> {
        let path = Self::vol_path(cluster, pool);
        let r = self.send(Method::POST, &path, &[], Some(params)).await?;
        Self::created_id(&Method::POST, &path, &r)
    }

    /// Create a volume from a snapshot through the volume-create route.
    pub async fn create_volume_from_snapshot(
        &self,
        cluster: Uuid,
        pool: Uuid,
        params: &VolumeClone,
    ) -> Result<Uuid> {
        let path = Self::vol_path(cluster, pool);
        let r = self.send(Method::POST, &path, &[], Some(params)).await?;
        Self::created_id(&Method::POST, &path, &r)
    }

    pub async fn update_volume(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        update: &VolumeUpdate,
    ) -> Result<()> {
        self.send(
            Method::PUT,
            &format!("{}{volume}/", Self::vol_path(cluster, pool)),
            &[],
            Some(update),
        )
        .await
        .map(|_| ())
    }

    /// Grow a volume. The server ignores the resize's own result and answers 204, so
    /// read the volume back to know whether it took.
    pub async fn resize_volume(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        size: u64,
    ) -> Result<()> {
        self.update_volume(
            cluster,
            pool,
            volume,
            &VolumeUpdate {
                size: Some(size),
                ..VolumeUpdate::default()
            },
        )
        .await
    }

    pub async fn delete_volume(&self, cluster: Uuid, pool: Uuid, volume: Uuid) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &format!("{}{volume}/", Self::vol_path(cluster, pool)),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    /// NVMe/TCP paths of a volume, primary first. Errors arrive as plain-text 404s.
    pub async fn connect_volume(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        host_nqn: Option<&str>,
    ) -> Result<Vec<ConnectEntry>> {
        let path = format!("{}{volume}/connect", Self::vol_path(cluster, pool));
        let query: Vec<(&str, String)> = host_nqn
            .map(|h| vec![("host_nqn", h.to_string())])
            .unwrap_or_default();
        let r = self.call(Method::GET, &path, &query, None).await?;
        decode(&Method::GET, &path, &r)
    }

    /// Allow a host NQN on a volume; returns the entry with its keys.
    pub async fn add_volume_host(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        host_nqn: &str,
    ) -> Result<serde_json::Value> {
        let path = format!("{}{volume}/hosts", Self::vol_path(cluster, pool));
        let r = self
            .send(
                Method::POST,
                &path,
                &[],
                Some(&HostNqn {
                    host_nqn: host_nqn.into(),
                }),
            )
            .await?;
        decode(&Method::POST, &path, &r)
    }

    pub async fn remove_volume_host(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        host_nqn: &str,
    ) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &format!(
                "{}{volume}/hosts/{}",
                Self::vol_path(cluster, pool),
                seg(host_nqn)
            ),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    // ---- snapshots and clones ----------------------------------------------------------

    /// Snapshot a volume; returns the snapshot id (from `Location`).
    pub async fn create_snapshot(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        name: &str,
    ) -> Result<Uuid> {
        let path = format!("{}{volume}/snapshots", Self::vol_path(cluster, pool));
        let r = self
            .send(
                Method::POST,
                &path,
                &[],
                Some(&SnapshotCreate {
                    name: name.into(),
                    backup: false,
                }),
            )
            .await?;
        Self::created_id(&Method::POST, &path, &r)
    }

    pub async fn list_volume_snapshots(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
    ) -> Result<Vec<Snapshot>> {
        self.get(&format!(
            "{}{volume}/snapshots",
            Self::vol_path(cluster, pool)
        ))
        .await
    }

    pub async fn list_snapshots(&self, cluster: Uuid, pool: Uuid) -> Result<Vec<Snapshot>> {
        self.get(&format!(
            "/clusters/{cluster}/storage-pools/{pool}/snapshots/"
        ))
        .await
    }

    pub async fn get_snapshot(
        &self,
        cluster: Uuid,
        pool: Uuid,
        snapshot: Uuid,
    ) -> Result<Snapshot> {
        self.get(&format!(
            "/clusters/{cluster}/storage-pools/{pool}/snapshots/{snapshot}/"
        ))
        .await
    }

    pub async fn delete_snapshot(&self, cluster: Uuid, pool: Uuid, snapshot: Uuid) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &format!("/clusters/{cluster}/storage-pools/{pool}/snapshots/{snapshot}/"),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    /// Clone a volume (snapshot and clone in one call); returns the new volume's id.
    /// `new_size` is a size string such as `"20G"`.
    pub async fn clone_volume(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        clone_name: &str,
        new_size: Option<&str>,
    ) -> Result<Uuid> {
        let path = format!("{}{volume}/clone", Self::vol_path(cluster, pool));
        let mut query = vec![("clone_name", clone_name.to_string())];
        if let Some(s) = new_size {
            query.push(("new_size", s.to_string()));
        }
        let r = self.send::<()>(Method::POST, &path, &query, None).await?;
        Self::created_id(&Method::POST, &path, &r)
    }

    // ---- migrations (subsystem form) ---------------------------------------------------

    fn mig_path(cluster: Uuid, nqn: &str) -> String {
        format!("/clusters/{cluster}/subsystems/{}/migrations/", seg(nqn))
    }

    /// Newest first.
    pub async fn list_migrations(&self, cluster: Uuid, nqn: &str) -> Result<Vec<Migration>> {
        self.get(&Self::mig_path(cluster, nqn)).await
    }

    /// Pre-create a migration (phase `pre_created`); the answer carries target-side
    /// `connect_strings` to connect before [`Client::continue_migration`].
    pub async fn create_migration(
        &self,
        cluster: Uuid,
        nqn: &str,
        params: &MigrationCreate,
    ) -> Result<Migration> {
        let path = Self::mig_path(cluster, nqn);
        let r = self
            .send(
                Method::POST,
                &path,
                &[("response-format", "full".into())],
                Some(params),
            )
            .await?;
        decode(&Method::POST, &path, &r)
    }

    pub async fn get_migration(
        &self,
        cluster: Uuid,
        nqn: &str,
        migration: Uuid,
    ) -> Result<Migration> {
        self.get(&format!("{}{migration}/", Self::mig_path(cluster, nqn)))
            .await
    }

    pub async fn continue_migration(
        &self,
        cluster: Uuid,
        nqn: &str,
        migration: Uuid,
        params: &MigrationContinue,
    ) -> Result<()> {
        self.send(
            Method::POST,
            &format!("{}{migration}/continue", Self::mig_path(cluster, nqn)),
            &[],
            Some(params),
        )
        .await
        .map(|_| ())
    }

    pub async fn cancel_migration(&self, cluster: Uuid, nqn: &str, migration: Uuid) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &format!("{}{migration}/", Self::mig_path(cluster, nqn)),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    pub async fn cleanup_migration_target(
        &self,
        cluster: Uuid,
        nqn: &str,
        migration: Uuid,
    ) -> Result<serde_json::Value> {
        let path = format!("{}{migration}/cleanup-target", Self::mig_path(cluster, nqn));
        let r = self.send::<()>(Method::POST, &path, &[], None).await?;
        decode(&Method::POST, &path, &r)
    }

    // ---- replication -------------------------------------------------------------------

    pub async fn list_replication_targets(&self, cluster: Uuid) -> Result<Vec<ReplicationTarget>> {
        self.get(&format!("/clusters/{cluster}/replication/targets/"))
            .await
    }

    pub async fn create_replication_target(
        &self,
        cluster: Uuid,
        params: &ReplicationTargetCreate,
    ) -> Result<ReplicationTarget> {
        let path = format!("/clusters/{cluster}/replication/targets/");
        let r = self
            .send(
                Method::POST,
                &path,
                &[("response-format", "full".into())],
                Some(params),
            )
            .await?;
        decode(&Method::POST, &path, &r)
    }

    pub async fn delete_replication_target(&self, cluster: Uuid, target: Uuid) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &format!("/clusters/{cluster}/replication/targets/{target}/"),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    pub async fn failover_replication_target(
        &self,
        cluster: Uuid,
        target: Uuid,
    ) -> Result<Vec<FailoverResult>> {
        let path = format!("/clusters/{cluster}/replication/targets/{target}/failover");
        let r = self.send::<()>(Method::POST, &path, &[], None).await?;
        decode(&Method::POST, &path, &r)
    }

    pub async fn list_replication_policies(&self, cluster: Uuid) -> Result<Vec<ReplicationPolicy>> {
        self.get(&format!("/clusters/{cluster}/replication/policies/"))
            .await
    }

    pub async fn create_replication_policy(
        &self,
        cluster: Uuid,
        params: &ReplicationPolicyCreate,
    ) -> Result<ReplicationPolicy> {
        let path = format!("/clusters/{cluster}/replication/policies/");
        let r = self
            .send(
                Method::POST,
                &path,
                &[("response-format", "full".into())],
                Some(params),
            )
            .await?;
        decode(&Method::POST, &path, &r)
    }

    pub async fn delete_replication_policy(&self, cluster: Uuid, policy: Uuid) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &format!("/clusters/{cluster}/replication/policies/{policy}/"),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    fn repl_path(cluster: Uuid, pool: Uuid, volume: Uuid) -> String {
        format!("{}{volume}/replication/", Self::vol_path(cluster, pool))
    }

    /// The volume's replication relationship; 404 when it has none.
    pub async fn volume_replication(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
    ) -> Result<ReplicationRelationship> {
        self.get(&Self::repl_path(cluster, pool, volume)).await
    }

    pub async fn start_volume_replication(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        params: &ReplicationStart,
    ) -> Result<()> {
        self.send(
            Method::POST,
            &format!("{}start", Self::repl_path(cluster, pool, volume)),
            &[],
            Some(params),
        )
        .await
        .map(|_| ())
    }

    /// One of `stop`, `trigger`, `failover` (bodyless verbs answering 204).
    pub async fn volume_replication_action(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        verb: &str,
    ) -> Result<()> {
        self.post_empty(
            &format!("{}{verb}", Self::repl_path(cluster, pool, volume)),
            &[],
        )
        .await
    }

    /// Planned cutover; returns the `replication_final` task id.
    pub async fn commit_volume_replication(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
    ) -> Result<Uuid> {
        let path = format!("{}commit", Self::repl_path(cluster, pool, volume));
        let r = self.send::<()>(Method::POST, &path, &[], None).await?;
        Self::created_id(&Method::POST, &path, &r)
    }

    pub async fn failback_volume_replication(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        params: &Failback,
    ) -> Result<()> {
        self.send(
            Method::POST,
            &format!("{}failback", Self::repl_path(cluster, pool, volume)),
            &[],
            Some(params),
        )
        .await
        .map(|_| ())
    }

    /// Bring the volume up on its replica (`POST …/replication/failover`). `planned` adds
    /// `?planned=` (a newer control plane): a planned failover needs a finished demote of the
    /// source, and is refused with 409 while the demote converges and 412 when none was asked.
    pub async fn failover_volume_replication(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        planned: Option<bool>,
    ) -> Result<()> {
        let query: Vec<(&str, String)> = planned
            .map(|p| vec![("planned", p.to_string())])
            .unwrap_or_default();
        self.post_empty(
            &format!("{}failover", Self::repl_path(cluster, pool, volume)),
            &query,
        )
        .await
    }

    /// Demote the volume (`POST …/replication/demote`, a newer control plane): it stops
    /// serving and its last writes are sent to the target.
    pub async fn demote_volume_replication(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
    ) -> Result<DemoteOutcome> {
        let path = format!("{}demote", Self::repl_path(cluster, pool, volume));
        let r = self.send::<()>(Method::POST, &path, &[], None).await?;
        Ok(if r.status == 202 {
            DemoteOutcome::Converging
        } else {
            DemoteOutcome::Done
        })
    }

    /// The volume's typed replication status (`GET …/replication/status`, a newer control
    /// plane); a volume without replication answers role `none`.
    pub async fn volume_replication_status(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
    ) -> Result<ReplicationStatus> {
        self.get(&format!("{}status", Self::repl_path(cluster, pool, volume)))
            .await
    }

    /// The relationship a volume belongs to, looked up by volume id alone
    /// (`GET /clusters/{c}/replication/relationships/{lvol_id}`, a newer control plane): the
    /// one it is the source of, else the one it is the target of. It still answers after the
    /// source volume was deleted; 404 when the volume has none.
    pub async fn replication_relationship(
        &self,
        cluster: Uuid,
        lvol: Uuid,
    ) -> Result<ReplicationRelationship> {
        self.get(&format!(
            "/clusters/{cluster}/replication/relationships/{lvol}"
        ))
        .await
    }

    /// The newest snapshot the relationship of `lvol` replicated, on the receiving side
    /// (`GET /clusters/{c}/replication/relationships/{lvol}/latest-snapshot`, a newer control
    /// plane): the recovery point a DR drill clones. `lvol` is the source volume (asked on
    /// its cluster) or the replica (asked on the target cluster); `None` when nothing was
    /// replicated yet (404).
    pub async fn latest_replicated_snapshot(
        &self,
        cluster: Uuid,
        lvol: Uuid,
    ) -> Result<Option<ReplicatedSnapshot>> {
        match self
            .get(&format!(
                "/clusters/{cluster}/replication/relationships/{lvol}/latest-snapshot"
            ))
            .await
        {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    // ---- synchronous replication between a cluster's sites (a newer control plane) ------

    /// Fence the volume on `site` (`POST …/replication/demote?site=`): done also when it is
    /// not served there. Refusals keep the control plane's status: 400 for a site the
    /// cluster does not have, 409 for a gate (retry).
    pub async fn sync_demote_volume(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        site: &str,
    ) -> Result<()> {
        self.post_empty(
            &format!("{}demote", Self::repl_path(cluster, pool, volume)),
            &[("site", site.to_string())],
        )
        .await
    }

    /// Serve the volume on `site` (`POST …/replication/failover?site=&planned=`); `planned`
    /// is false for a forced takeover. 409 means retry (in progress, or the serving site is
    /// not demoted yet), 412 that the serving site is offline (only an unplanned promote
    /// proceeds), 400 a site the cluster does not have.
    pub async fn sync_promote_volume(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        site: &str,
        planned: bool,
    ) -> Result<SyncPromoteResult> {
        let path = format!("{}failover", Self::repl_path(cluster, pool, volume));
        let query = [("site", site.to_string()), ("planned", planned.to_string())];
        let r = self.send::<()>(Method::POST, &path, &query, None).await?;
        decode(&Method::POST, &path, &r)
    }

    /// [`Client::sync_demote_volume`] for every member of a consistency group.
    pub async fn sync_demote_group(&self, cluster: Uuid, group: Uuid, site: &str) -> Result<()> {
        self.post_empty(
            &format!("{}replication/demote", Self::group_path(cluster, group)),
            &[("site", site.to_string())],
        )
        .await
    }

    /// [`Client::sync_promote_volume`] for every member of a consistency group: one entry
    /// per member.
    pub async fn sync_promote_group(
        &self,
        cluster: Uuid,
        group: Uuid,
        site: &str,
        planned: bool,
    ) -> Result<SyncGroupPromoteResult> {
        let path = format!("{}replication/failover", Self::group_path(cluster, group));
        let query = [("site", site.to_string()), ("planned", planned.to_string())];
        let r = self.send::<()>(Method::POST, &path, &query, None).await?;
        decode(&Method::POST, &path, &r)
    }

    // ---- consistency groups (a newer control plane) -----------------------------------

    fn group_path(cluster: Uuid, group: Uuid) -> String {
        format!("/clusters/{cluster}/consistency-groups/{group}/")
    }

    /// The cluster's consistency groups, those named `name` when given.
    pub async fn list_consistency_groups(
        &self,
        cluster: Uuid,
        name: Option<&str>,
    ) -> Result<Vec<ConsistencyGroup>> {
        let path = format!("/clusters/{cluster}/consistency-groups/");
        let query: Vec<(&str, String)> = name
            .map(|n| vec![("name", n.to_string())])
            .unwrap_or_default();
        let r = self.call(Method::GET, &path, &query, None).await?;
        decode(&Method::GET, &path, &r)
    }

    /// The group named `name` in the cluster, if any.
    pub async fn find_consistency_group(
        &self,
        cluster: Uuid,
        name: &str,
    ) -> Result<Option<ConsistencyGroup>> {
        Ok(self
            .list_consistency_groups(cluster, Some(name))
            .await?
            .into_iter()
            .find(|g| g.name == name))
    }

    /// Every member the group had, open ones with `removed_seq == 0`.
    pub async fn consistency_group_members(
        &self,
        cluster: Uuid,
        group: Uuid,
    ) -> Result<Vec<ConsistencyGroupMember>> {
        self.get(&format!("{}members", Self::group_path(cluster, group)))
            .await
    }

    /// Take a volume out of its group (one way: it does not rejoin).
    pub async fn remove_consistency_group_member(
        &self,
        cluster: Uuid,
        group: Uuid,
        lvol: Uuid,
    ) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &format!("{}members/{lvol}", Self::group_path(cluster, group)),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    /// Snapshot every open member at once: one generation, numbered `group_seq`.
    pub async fn create_group_snapshot(&self, cluster: Uuid, group: Uuid) -> Result<GroupSnapshot> {
        let path = format!("{}snapshots", Self::group_path(cluster, group));
        let r = self.send::<()>(Method::POST, &path, &[], None).await?;
        decode(&Method::POST, &path, &r)
    }

    pub async fn list_group_snapshots(
        &self,
        cluster: Uuid,
        group: Uuid,
    ) -> Result<Vec<GroupSnapshot>> {
        self.get(&format!("{}snapshots", Self::group_path(cluster, group)))
            .await
    }

    pub async fn get_group_snapshot(
        &self,
        cluster: Uuid,
        group: Uuid,
        group_seq: u64,
    ) -> Result<GroupSnapshot> {
        self.get(&format!(
            "{}snapshots/{group_seq}",
            Self::group_path(cluster, group)
        ))
        .await
    }

    /// Delete a group snapshot (each member's snapshot; softly while cloned).
    pub async fn delete_group_snapshot(
        &self,
        cluster: Uuid,
        group: Uuid,
        group_seq: u64,
    ) -> Result<()> {
        self.send::<()>(
            Method::DELETE,
            &format!("{}snapshots/{group_seq}", Self::group_path(cluster, group)),
            &[],
            None,
        )
        .await
        .map(|_| ())
    }

    /// Attach a replication policy to the group (every member replicates with it, one
    /// generation at a time), or detach it with `None` (an explicit `null`). Attaching
    /// another policy while one is attached is refused with 412.
    pub async fn set_group_replication(
        &self,
        cluster: Uuid,
        group: Uuid,
        policy: Option<Uuid>,
    ) -> Result<()> {
        self.send(
            Method::PUT,
            &format!("{}replication", Self::group_path(cluster, group)),
            &[],
            Some(&GroupReplicationUpdate {
                replication_policy_id: policy,
            }),
        )
        .await
        .map(|_| ())
    }

    /// Fail every member over to its replica; one result per member.
    pub async fn failover_group_replication(
        &self,
        cluster: Uuid,
        group: Uuid,
    ) -> Result<Vec<FailoverResult>> {
        let path = format!("{}replication/failover", Self::group_path(cluster, group));
        let r = self.send::<()>(Method::POST, &path, &[], None).await?;
        decode(&Method::POST, &path, &r)
    }

    /// Demote every member: done (204) once each member's last writes reached its target,
    /// converging (202) before.
    pub async fn demote_group_replication(
        &self,
        cluster: Uuid,
        group: Uuid,
    ) -> Result<DemoteOutcome> {
        let path = format!("{}replication/demote", Self::group_path(cluster, group));
        let r = self.send::<()>(Method::POST, &path, &[], None).await?;
        Ok(if r.status == 202 {
            DemoteOutcome::Converging
        } else {
            DemoteOutcome::Done
        })
    }

    /// Point every member's replication back at its source cluster.
    pub async fn failback_group_replication(
        &self,
        cluster: Uuid,
        group: Uuid,
        params: &Failback,
    ) -> Result<()> {
        self.send(
            Method::POST,
            &format!("{}replication/failback", Self::group_path(cluster, group)),
            &[],
            Some(params),
        )
        .await
        .map(|_| ())
    }

    /// The group's replication status: its members' taken together.
    pub async fn group_replication_status(
        &self,
        cluster: Uuid,
        group: Uuid,
    ) -> Result<ReplicationStatus> {
        self.get(&format!(
            "{}replication/status",
            Self::group_path(cluster, group)
        ))
        .await
    }

    /// The group a handle names and the group serving now (after failovers, possibly on
    /// another cluster).
    pub async fn resolve_consistency_group(
        &self,
        cluster: Uuid,
        group: Uuid,
    ) -> Result<GroupResolution> {
        self.get(&format!("{}resolution", Self::group_path(cluster, group)))
            .await
    }

    /// The newest generation of the group replicating with `policy` that reached the
    /// target for every member; `None` when there is no such group or nothing replicated
    /// yet (404). A 400 means generations exist but none is complete yet.
    pub async fn latest_replicated_generation(
        &self,
        cluster: Uuid,
        policy: Uuid,
    ) -> Result<Option<LatestGeneration>> {
        match self
            .get(&format!(
                "/clusters/{cluster}/replication/policies/{policy}/latest-generation"
            ))
            .await
        {
            Ok(g) => Ok(Some(g)),
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn volume_replication_tasks(
        &self,
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
    ) -> Result<Vec<Task>> {
        self.get(&format!("{}tasks", Self::repl_path(cluster, pool, volume)))
            .await
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

    #[test]
    fn nqn_segment_is_escaped() {
        assert_eq!(seg("nqn.2023-02.io:a"), "nqn.2023-02.io%3Aa");
    }

    #[test]
    fn a_retry_pause_is_a_draw_below_a_doubling_ceiling_that_stops_at_the_cap() {
        let (base, cap) = (Duration::from_millis(200), Duration::from_secs(10));
        for attempt in 1..=40 {
            let ceiling = retry_delay(attempt, base, cap, 1.0);
            let expected = (base * 2u32.pow((attempt - 1).min(10))).min(cap);
            assert_eq!(ceiling, expected, "attempt {attempt}");
            assert_eq!(retry_delay(attempt, base, cap, 0.0), Duration::ZERO);
            let d = retry_delay(attempt, base, cap, draw());
            assert!(d <= ceiling, "attempt {attempt}: {d:?} above {ceiling:?}");
        }
        assert_eq!(retry_delay(u32::MAX, base, cap, 1.0), cap);
        let draws: Vec<f64> = (0..100).map(|_| draw()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        assert!(
            draws.windows(2).any(|w| w[0] != w[1]),
            "the draws are not all alike"
        );
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

    #[test]
    fn a_secret_is_sent_whole_and_never_printed() {
        let cluster = crate::Cluster {
            secret: "cluster-secret-value".into(),
            ..Default::default()
        };
        let mut create = crate::ClusterCreate::new("sb", 10, 4);
        create.backup_config = Some(crate::BackupConfig {
            secret_access_key: Some("backup-key-value".into()),
            ..Default::default()
        });
        let config = crate::ClientConfig::new(
            url::Url::parse("https://cp.example.com").expect("url"),
            "bearer-token-value",
        );
        let printed = format!("{cluster:?} {create:?} {config:?} {:#?}", config.token);
        for secret in [
            "cluster-secret-value",
            "backup-key-value",
            "bearer-token-value",
        ] {
            assert!(!printed.contains(secret), "{secret} printed: {printed}");
        }
        // On the wire they are what they are.
        let wire = serde_json::to_value(&create).expect("json");
        assert_eq!(
            wire["backup_config"]["secret_access_key"],
            "backup-key-value"
        );
        let read: crate::Cluster =
            serde_json::from_value(serde_json::json!({"secret": "s3cr3t"})).expect("cluster");
        assert_eq!(read.secret.expose(), "s3cr3t");
    }
}

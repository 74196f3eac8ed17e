//! Client of a worker's storage-node API (the agent the storage-node DaemonSet runs,
//! prefix `/snode`). Every answer is `{"status": bool, "results": …}`.

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::Method;
use serde_json::Value;
use url::Url;

use crate::error::{Error, Result};
use crate::response::{RawResponse, classify};
use crate::tls::{TlsConfig, client_config};

/// How to reach one worker's storage-node API.
#[derive(Debug, Clone)]
pub struct SnodeConfig {
    /// `host:port` as the control plane is given it, e.g.
    /// `<worker>.simplyblock-storage-node-api.<ns>.svc.cluster.local:5000`.
    pub address: String,
    /// HTTPS material; `None` for plain HTTP.
    pub tls: Option<TlsConfig>,
    pub timeout: Duration,
    /// Send requests through this address as an HTTP proxy instead of resolving the
    /// host name (HTTPS through a `CONNECT` tunnel, verified against the worker's name).
    /// Lets a test or the demo reach simulated workers.
    pub connect_to: Option<SocketAddr>,
}

impl SnodeConfig {
    pub fn new(address: impl Into<String>) -> Self {
        Self {
            address: address.into(),
            tls: None,
            timeout: Duration::from_secs(10),
            connect_to: None,
        }
    }
}

/// A worker's storage-node API.
#[derive(Debug, Clone)]
pub struct SnodeClient {
    http: reqwest::Client,
    base: Url,
}

impl SnodeClient {
    pub fn new(config: SnodeConfig) -> Result<Self> {
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let base = Url::parse(&format!("{scheme}://{}/snode/", config.address)).map_err(|e| {
            Error::Config(format!("storage-node address {:?}: {e}", config.address))
        })?;
        let mut builder = reqwest::Client::builder()
            .tls_backend_preconfigured(client_config(config.tls.as_ref())?)
            .timeout(config.timeout)
            .connect_timeout(config.timeout);
        if let Some(addr) = config.connect_to {
            let proxy = reqwest::Proxy::all(format!("http://{addr}"))
                .map_err(|e| Error::Config(format!("proxy {addr}: {e}")))?;
            builder = builder.proxy(proxy);
        }
        let http = builder
            .build()
            .map_err(|e| Error::Config(format!("HTTP client: {e}")))?;
        Ok(Self { http, base })
    }

    async fn call(&self, method: Method, verb: &str, body: Option<&Value>) -> Result<Value> {
        let url = self
            .base
            .join(verb)
            .map_err(|e| Error::Config(format!("storage-node route {verb}: {e}")))?;
        let path = url.path().to_string();
        let mut req = self.http.request(method.clone(), url);
        if let Some(b) = body {
            req = req.json(b);
        }
        let unavailable = |message: String| Error::Unavailable {
            method: method.to_string(),
            path: path.clone(),
            message,
        };
        let resp = req.send().await.map_err(|e| unavailable(e.to_string()))?;
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let headers = crate::response::headers_of(&resp);
        let bytes =
            crate::response::read_body(resp, crate::response::MAX_BODY, method.as_str(), &path)
                .await?;
        if !(200..300).contains(&status) {
            return Err(classify(
                &method,
                &path,
                &RawResponse {
                    status,
                    location: None,
                    content_type,
                    headers,
                    body: bytes.to_vec(),
                },
            ));
        }
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| Error::Protocol {
            method: method.to_string(),
            path: path.clone(),
            status,
            message: e.to_string(),
        })?;
        if v.get("status").and_then(Value::as_bool) == Some(true) {
            Ok(v.get("results").cloned().unwrap_or(Value::Null))
        } else {
            Err(Error::Refused {
                method: method.to_string(),
                path,
                status,
                message: v
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("status false")
                    .to_string(),
                opaque: false,
            })
        }
    }

    /// `GET /snode/info`: the host's inventory. The operator's CheckingHost step only
    /// needs this to succeed.
    pub async fn info(&self) -> Result<Value> {
        self.call(Method::GET, "info", None).await
    }

    /// `GET /snode/scan_devices`: the NVMe devices the agent sees.
    pub async fn scan_devices(&self) -> Result<Value> {
        self.call(Method::GET, "scan_devices", None).await
    }

    /// `GET /snode/check`.
    pub async fn check(&self) -> Result<Value> {
        self.call(Method::GET, "check", None).await
    }

    /// `GET /snode/spdk_process_is_up`.
    pub async fn spdk_process_is_up(&self) -> Result<bool> {
        Ok(self
            .call(Method::GET, "spdk_process_is_up", None)
            .await?
            .as_bool()
            .unwrap_or(false))
    }
}

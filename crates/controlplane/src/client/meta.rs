//! Whether the control plane is up, ready, and which version it runs (`/_meta`).

use reqwest::Method;

use super::transport::Client;
use crate::error::{Error, Result};
use crate::response::{classify, decode};
use crate::routes;

impl Client {
    /// `GET /_meta/ready`: Ok when the control plane's database answers; its 503 while
    /// unready is [`Error::Unavailable`], as every 503 is.
    pub async fn ready(&self) -> Result<()> {
        self.call(Method::GET, routes::READY, &[], None)
            .await
            .map(|_| ())
    }

    /// `GET /_meta/version`: the version the control plane reports, `None` when it
    /// reports none (a control plane without the route answers 404). The answer is a JSON
    /// string or an object with a `version` field.
    pub async fn version(&self) -> Result<Option<String>> {
        let path = routes::VERSION;
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
        self.call(Method::GET, routes::HEALTH, &[], None)
            .await
            .map(|_| ())
    }
}

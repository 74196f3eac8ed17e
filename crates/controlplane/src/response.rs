//! Answers as the control plane and the storage-node API send them: the body read under a
//! cap, the answer kept whole ([`RawResponse`]), decoded, or classified into an [`Error`]
//! by what a caller does next. Shared by the `/api/v2` client, its event streams and the
//! storage-node client.

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;

use crate::error::{Error, Result, message_from_body};

/// The largest answer body read. The biggest real answers (a cluster's volume list) are a
/// few MiB; a server sending more is refused rather than held in memory.
pub const MAX_BODY: usize = 16 << 20;

/// `bytes` for a message: whole MiB as MiB, else in bytes.
pub(crate) fn size(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// Reads the body of `resp` chunk by chunk, refusing one longer than `max` (by its
/// `Content-Length` before reading, or once it has sent more): a server cannot make the
/// client hold more than `max`.
/// The headers of `resp` that are text, names lower-case.
pub(crate) fn headers_of(resp: &reqwest::Response) -> Vec<(String, String)> {
    resp.headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect()
}

pub(crate) async fn read_body(
    mut resp: reqwest::Response,
    max: usize,
    method: &str,
    path: &str,
) -> Result<Vec<u8>> {
    let status = resp.status().as_u16();
    let url = resp.url().clone();
    let too_large = || Error::Protocol {
        method: method.to_string(),
        path: path.to_string(),
        status,
        message: format!(
            "the answer from {url} is larger than {}, the most this client reads",
            size(max)
        ),
    };
    if resp
        .content_length()
        .is_some_and(|n| n > u64::try_from(max).unwrap_or(u64::MAX))
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    loop {
        let chunk = resp.chunk().await.map_err(|e| Error::Unavailable {
            method: method.to_string(),
            path: path.to_string(),
            message: format!("answer {status} cut short: {}", describe(&e)),
        })?;
        let Some(chunk) = chunk else {
            return Ok(body);
        };
        if body.len() + chunk.len() > max {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
}

/// An answer as received, for callers that need headers or a route the typed methods
/// do not cover.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    pub location: Option<String>,
    pub content_type: Option<String>,
    /// Every header as sent (names lower-case); some answers carry their only id in one
    /// (`X-Policy-Id`, `X-Backup-Id`).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    /// The first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

pub(crate) fn describe(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    if e.is_timeout() {
        s.push_str(" (timed out)");
    }
    s
}

pub(crate) fn decode<T: DeserializeOwned>(
    method: &Method,
    path: &str,
    r: &RawResponse,
) -> Result<T> {
    serde_json::from_slice(&r.body).map_err(|e| Error::Protocol {
        method: method.to_string(),
        path: path.to_string(),
        status: r.status,
        message: e.to_string(),
    })
}

pub(crate) fn classify(method: &Method, path: &str, r: &RawResponse) -> Error {
    let message = message_from_body(&r.body);
    let method = method.to_string();
    let path = path.to_string();
    let is_json = r
        .content_type
        .as_deref()
        .is_some_and(|c| c.contains("json"));
    match StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR) {
        StatusCode::NOT_FOUND => Error::NotFound {
            method,
            path,
            message,
        },
        StatusCode::CONFLICT => Error::Conflict {
            method,
            path,
            message,
        },
        StatusCode::UNPROCESSABLE_ENTITY => Error::Invalid {
            method,
            path,
            message,
        },
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Error::Unauthorized {
            method,
            path,
            message,
        },
        StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT => {
            Error::Unavailable {
                method,
                path,
                message,
            }
        }
        s => Error::Refused {
            method,
            path,
            status: s.as_u16(),
            opaque: s == StatusCode::INTERNAL_SERVER_ERROR && !is_json,
            message,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_500_is_opaque_and_retryable() {
        let r = RawResponse {
            status: 500,
            location: None,
            content_type: Some("text/plain; charset=utf-8".into()),
            headers: Vec::new(),
            body: b"Internal Server Error".to_vec(),
        };
        let e = classify(&Method::POST, "/x", &r);
        assert!(e.is_retryable(), "{e}");
        let r = RawResponse {
            content_type: Some("application/json".into()),
            body: br#"{"status":"An error occured while processing the request","detail":"boom"}"#
                .to_vec(),
            ..r
        };
        let e = classify(&Method::POST, "/x", &r);
        assert!(!e.is_retryable());
        assert_eq!(e.message(), "boom");
    }
}

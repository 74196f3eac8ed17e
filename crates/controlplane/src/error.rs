//! The one error type of this crate, classified the way callers branch on it.

/// What went wrong talking to the control plane or a storage-node API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// 404: the object does not exist (or exists under another parent).
    #[error(
        "{method} {path}: the control plane has no such object ({message}); it was never created or is already gone, so treat it as absent"
    )]
    NotFound {
        method: String,
        path: String,
        message: String,
    },
    /// 409: the request collides with existing state (a duplicate name, an operation in flight).
    #[error(
        "{method} {path}: the control plane refused with a conflict ({message}); the object exists or another operation holds it, so look it up or retry later"
    )]
    Conflict {
        method: String,
        path: String,
        message: String,
    },
    /// A business refusal: 400 preconditions, 412, or 500 with the control plane's text.
    /// `opaque` marks the plain-text `Internal Server Error` the server gives when a
    /// controller merely returned false; the operator treats that as retryable.
    #[error(
        "{method} {path}: the control plane refused the request with {status}: {message}; {}",
        if *opaque { "it gives no reason for this kind of refusal, so check the object's state and retry" } else { "fix the cause it names before retrying" }
    )]
    Refused {
        method: String,
        path: String,
        status: u16,
        message: String,
        opaque: bool,
    },
    /// 422 or a body this client could not build: the request itself is malformed.
    #[error(
        "{method} {path}: the control plane rejected the request as invalid ({message}); the same request will fail again, so correct its parameters"
    )]
    Invalid {
        method: String,
        path: String,
        message: String,
    },
    /// 401/403: the bearer token was missing or not accepted.
    #[error(
        "{method} {path}: the control plane did not accept the credentials ({message}); check the bearer token (service-account token or cluster secret) and its cluster"
    )]
    Unauthorized {
        method: String,
        path: String,
        message: String,
    },
    /// No usable answer: connection refused, timeout, TLS failure, 502/503/504.
    #[error(
        "{method} {path}: the control plane is unavailable ({message}); it may be starting, overloaded or unreachable, so retry with backoff"
    )]
    Unavailable {
        method: String,
        path: String,
        message: String,
    },
    /// The server's certificate did not verify: not signed by a CA this client trusts, or
    /// not for the host it was reached at. No request was sent.
    #[error(
        "{method} {path}: the server presented a certificate this client does not trust ({message}); it is checked against the CA bundle the client was given (the system's CA store without one) and the endpoint's host, so give the CA that signed the control plane's certificate, or check that the endpoint reaches the control plane and not another server"
    )]
    Untrusted {
        method: String,
        path: String,
        message: String,
    },
    /// An answer that does not have the documented shape.
    #[error(
        "{method} {path}: the control plane answered {status} with a body this client cannot read ({message}); client and server versions probably differ"
    )]
    Protocol {
        method: String,
        path: String,
        status: u16,
        message: String,
    },
    /// The client could not be built from its configuration.
    #[error(
        "the control-plane client configuration is unusable: {0}; fix the URL, token or TLS material"
    )]
    Config(String),
}

impl Error {
    /// Worth retrying later without changing the request.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            // A certificate that did not verify is retried like an outage: the trust a
            // client is given (a mounted CA) is replaced while it runs.
            Error::Unavailable { .. }
                | Error::Untrusted { .. }
                | Error::Refused { opaque: true, .. }
        )
    }

    /// A 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }

    /// A 409.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }

    /// The control plane's own message, where it sent one.
    pub fn message(&self) -> &str {
        match self {
            Error::NotFound { message, .. }
            | Error::Conflict { message, .. }
            | Error::Refused { message, .. }
            | Error::Invalid { message, .. }
            | Error::Unauthorized { message, .. }
            | Error::Unavailable { message, .. }
            | Error::Untrusted { message, .. }
            | Error::Protocol { message, .. } => message,
            Error::Config(m) => m,
        }
    }

    /// The HTTP status, where there was an answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::NotFound { .. } => Some(404),
            Error::Conflict { .. } => Some(409),
            Error::Refused { status, .. } | Error::Protocol { status, .. } => Some(*status),
            Error::Invalid { .. } => Some(422),
            _ => None,
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Pull the human text out of an error body: `detail` (a string, or FastAPI's list of
/// validation errors), else `error`, else the raw text. The server wraps lookup
/// messages in the quotes of a Python `KeyError`; those are removed.
pub fn message_from_body(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body).trim().to_string();
    let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else {
        let unquoted = unquote(&text);
        return if unquoted.trim().is_empty() {
            text
        } else {
            unquoted.to_string()
        };
    };
    let pick = |v: &serde_json::Value| -> Option<String> {
        match v {
            serde_json::Value::String(s) => Some(unquote(s).to_string()),
            serde_json::Value::Array(items) => Some(
                items
                    .iter()
                    .map(|i| {
                        let loc = i
                            .get("loc")
                            .and_then(|l| l.as_array())
                            .map(|l| {
                                l.iter()
                                    .map(|p| match p {
                                        serde_json::Value::String(s) => s.clone(),
                                        other => other.to_string(),
                                    })
                                    .collect::<Vec<_>>()
                                    .join(".")
                            })
                            .unwrap_or_default();
                        let msg = i.get("msg").and_then(|m| m.as_str()).unwrap_or("invalid");
                        format!("{loc}: {msg}")
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            serde_json::Value::Object(o) => o
                .get("message")
                .and_then(|m| m.as_str())
                .map(|s| unquote(s).to_string()),
            _ => None,
        }
    };
    // A field that says nothing ("detail": "", "error": "''") is no message: the whole
    // body is, so a person always reads something.
    let said = |m: &String| !m.trim().is_empty();
    value
        .get("detail")
        .and_then(pick)
        .filter(said)
        .or_else(|| value.get("error").and_then(pick).filter(said))
        .or_else(|| value.as_str().map(|s| unquote(s).to_string()).filter(said))
        .unwrap_or(text)
}

/// The text of a Python `KeyError`, whose `str()` is the repr of its message: in single
/// quotes, or in double quotes when the message itself holds a single quote.
fn unquote(s: &str) -> &str {
    ['\'', '"']
        .iter()
        .find_map(|q| s.strip_prefix(*q)?.strip_suffix(*q))
        .unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_not_found_is_unquoted() {
        let m = message_from_body(br#"{"detail":"'Cluster 1 not found'"}"#);
        assert_eq!(m, "Cluster 1 not found");
    }

    #[test]
    fn double_quoted_not_found_is_unquoted() {
        let m = message_from_body(br#"{"detail":"\"Volume 'db-1' not found\""}"#);
        assert_eq!(m, "Volume 'db-1' not found");
        assert_eq!(unquote("\"LVol 7 not found\""), "LVol 7 not found");
        // One quote alone is text, not a repr.
        assert_eq!(unquote("\"half"), "\"half");
    }

    #[test]
    fn an_empty_field_gives_the_whole_body() {
        // Regression (found by the fuzz property): {"error": ""} gave an empty message.
        assert_eq!(message_from_body(br#"{"error": ""}"#), r#"{"error": ""}"#);
        assert_eq!(
            message_from_body(br#"{"detail": "''", "error": "boom"}"#),
            "boom"
        );
        // And a plain body that is an empty repr (found by fuzzing: "\x0b\x0b''").
        assert_eq!(message_from_body(b"\x0b\x0b''"), "''");
    }

    #[test]
    fn plain_text_is_kept() {
        assert_eq!(
            message_from_body(b"Internal Server Error"),
            "Internal Server Error"
        );
        assert_eq!(
            message_from_body(b"Failed to find volume"),
            "Failed to find volume"
        );
    }

    #[test]
    fn validation_list_is_summarised() {
        let m = message_from_body(
            br#"{"detail":[{"type":"missing","loc":["body","max_subsys"],"msg":"Field required"}]}"#,
        );
        assert_eq!(m, "body.max_subsys: Field required");
    }

    #[test]
    fn precondition_detail_wins_over_error() {
        let m = message_from_body(
            br#"{"error":"Preconditions are not met","detail":"Pool is disabled"}"#,
        );
        assert_eq!(m, "Pool is disabled");
    }
}

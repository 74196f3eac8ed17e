//! Answers in the control plane's shapes: FastAPI's `{"detail": …}`, the app's
//! precondition and runtime envelopes, and the plain-text 500 of an uncaught exception.

use serde_json::{Value, json};

/// A successful answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub location: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

#[derive(Debug, Clone)]
pub enum Body {
    Empty,
    Json(Value),
    Text(String),
}

impl Reply {
    pub fn json(status: u16, v: Value) -> Self {
        Self {
            status,
            location: None,
            headers: Vec::new(),
            body: Body::Json(v),
        }
    }

    pub fn ok(v: Value) -> Self {
        Self::json(200, v)
    }

    pub fn empty(status: u16) -> Self {
        Self {
            status,
            location: None,
            headers: Vec::new(),
            body: Body::Empty,
        }
    }

    pub fn with_header(mut self, name: &str, value: String) -> Self {
        self.headers.push((name.to_string(), value));
        self
    }

    pub fn with_location(mut self, loc: String) -> Self {
        self.location = Some(loc);
        self
    }

    /// `util.creation_response`: 201, a relative `Location`, and the body the
    /// `response-format` query asks for.
    pub fn created(location: String, id: &str, full: Value, format: &str) -> Self {
        let body = match format {
            "empty" => Body::Empty,
            "identifier" => Body::Json(json!(id)),
            _ => Body::Json(full),
        };
        Self {
            status: 201,
            location: Some(location),
            headers: Vec::new(),
            body,
        }
    }
}

/// A refusal, in the exact form the real server gives it.
#[derive(Debug, Clone)]
pub enum ApiError {
    /// `HTTPException(code, msg)` → `{"detail": msg}`.
    Http(u16, String),
    /// `PreconditionError` → 400 `{"error": "Preconditions are not met", "detail": msg}`.
    Precondition(String),
    /// `RuntimeError` → 500 `{"status": "An error occured …", "detail": msg}`.
    Runtime(String),
    /// Any other exception (including `ValueError('Failed to …')`) → plain-text 500.
    /// The reason is not sent (the real server does not either) but goes to the call log.
    Opaque(String),
    /// A plain-text answer with a status (`/connect`'s 404s, `/ready`'s 503).
    Plain(u16, String),
    /// FastAPI's 422 list.
    Validation(Vec<Value>),
}

impl ApiError {
    pub fn not_found(msg: impl Into<String>) -> Self {
        ApiError::Http(404, msg.into())
    }

    /// A lookup 404 as the dependency layer produces it: `str(KeyError(msg))`, quotes kept.
    pub fn key_error(msg: impl AsRef<str>) -> Self {
        ApiError::Http(404, format!("'{}'", msg.as_ref()))
    }

    pub fn conflict(msg: impl Into<String>) -> Self {
        ApiError::Http(409, msg.into())
    }

    pub fn bad_request(msg: impl Into<String>) -> Self {
        ApiError::Http(400, msg.into())
    }

    pub fn opaque(reason: impl Into<String>) -> Self {
        ApiError::Opaque(reason.into())
    }

    pub fn status(&self) -> u16 {
        match self {
            ApiError::Http(s, _) | ApiError::Plain(s, _) => *s,
            ApiError::Precondition(_) => 400,
            ApiError::Runtime(_) | ApiError::Opaque(_) => 500,
            ApiError::Validation(_) => 422,
        }
    }

    /// The answer body and whether it is JSON.
    pub fn body(&self) -> Body {
        match self {
            ApiError::Http(_, m) => Body::Json(json!({"detail": m})),
            ApiError::Precondition(m) => {
                Body::Json(json!({"error": "Preconditions are not met", "detail": m}))
            }
            ApiError::Runtime(m) => Body::Json(json!({
                "status": "An error occured while processing the request",
                "detail": m
            })),
            ApiError::Opaque(_) => Body::Text("Internal Server Error".into()),
            ApiError::Plain(_, m) => Body::Text(m.clone()),
            ApiError::Validation(d) => Body::Json(json!({"detail": d})),
        }
    }

    /// Why, for the call log (the opaque reason is only visible there).
    pub fn note(&self) -> String {
        match self {
            ApiError::Http(_, m)
            | ApiError::Precondition(m)
            | ApiError::Runtime(m)
            | ApiError::Opaque(m)
            | ApiError::Plain(_, m) => m.clone(),
            ApiError::Validation(d) => Value::Array(d.clone()).to_string(),
        }
    }

    /// A 422 for one field.
    pub fn invalid(kind: &str, loc: Vec<Value>, msg: &str, input: Value) -> Self {
        ApiError::Validation(vec![
            json!({"type": kind, "loc": loc, "msg": msg, "input": input}),
        ])
    }
}

pub type ApiResult = Result<Reply, ApiError>;

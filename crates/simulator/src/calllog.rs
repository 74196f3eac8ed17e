//! The call log: every request sbsim answered, so tests can count calls (for example
//! node adds per worker) and the contract tests can check every exchange.

use std::collections::VecDeque;

use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Clone, Serialize)]
pub struct Call {
    pub seq: u64,
    pub method: String,
    pub path: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub query: String,
    /// 0 when the connection was dropped on purpose without an answer.
    pub status: u16,
    /// Real time the request arrived (RFC 3339).
    pub time: String,
    /// Sim time (ms since the epoch) it was handled at.
    pub sim_ms: i64,
    pub duration_ms: f64,
    /// The matched OpenAPI template, when the path is a control-plane route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// The request body, when it was JSON (at most 16 KiB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// The answer body (JSON, or the text as a string); only with body recording on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_content_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Faults that fired on this call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<String>,
    /// Why a refusal happened, including the reason behind an opaque 500.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The common name of the certificate the caller presented (mutual TLS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

#[derive(Debug)]
pub struct CallLog {
    calls: VecDeque<Call>,
    capacity: usize,
    next: u64,
}

impl CallLog {
    pub fn new(capacity: usize) -> Self {
        Self {
            calls: VecDeque::new(),
            capacity: capacity.max(1),
            next: 1,
        }
    }

    pub fn push(&mut self, mut call: Call) {
        call.seq = self.next;
        self.next += 1;
        if self.calls.len() == self.capacity {
            self.calls.pop_front();
        }
        self.calls.push_back(call);
    }

    /// Calls with `seq > since`.
    pub fn since(&self, since: u64) -> Vec<Call> {
        self.calls
            .iter()
            .filter(|c| c.seq > since)
            .cloned()
            .collect()
    }

    pub fn clear(&mut self) {
        self.calls.clear();
    }
}

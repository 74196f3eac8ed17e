//! A value that must never reach a log: tokens, cluster secrets, backup keys.

use serde::{Deserialize, Serialize};

/// A secret string. `Debug` prints `<redacted>`, so a struct holding one can derive
/// `Debug` safely; it serializes as the string it holds, since it is sent where it
/// belongs; [`Redacted::expose`] reads it.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Redacted(String);

impl Redacted {
    pub fn new(value: impl Into<String>) -> Redacted {
        Redacted(value.into())
    }

    /// The secret itself, for the one place it is sent or stored.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl From<String> for Redacted {
    fn from(value: String) -> Redacted {
        Redacted(value)
    }
}

impl From<&str> for Redacted {
    fn from(value: &str) -> Redacted {
        Redacted(value.to_owned())
    }
}

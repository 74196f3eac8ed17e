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

#[cfg(test)]
mod tests {

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

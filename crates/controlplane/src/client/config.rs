//! How to reach the control plane: its address, the token, TLS, deadlines, read retries, and
//! which addresses are refused.

use std::time::Duration;

use url::Url;

use crate::tls::TlsConfig;

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
    /// [`RETRY_CAP`](super::retry::RETRY_CAP), each pause a random part of that (see [`retry_delay`](super::retry::retry_delay)).
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

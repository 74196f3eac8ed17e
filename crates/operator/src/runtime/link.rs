//! How every controller reaches the control plane: through the client the ControlPlane
//! controller publishes from `ControlPlane.status` (its endpoint, the credentials of its
//! source), or, pinned, through one fixed client (the integration tests' in-process
//! harnesses, the benchmark).
//!
//! A controller asks [`crate::runtime::context::Context::control_plane`] for the client; while the
//! control plane is missing, Installing or Unavailable it gets [`crate::runtime::kit::Error::Held`]
//! with the reason instead, and its pass ends to be tried again. Degraded proceeds. When
//! the control plane starts serving (or moves), [`Link::changes`] wakes every controller
//! at once rather than after its retry interval.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::RwLock;

use futures::Stream;
use simplyblock_api::control_plane::ControlPlanePhase;
use tokio::sync::watch;

/// Where a pod's service-account token is mounted.
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// A client of the control plane, and its endpoint as clients elsewhere (the CSI driver)
/// reach it.
#[derive(Clone, Debug)]
pub struct Reach {
    pub client: simplyblock_controlplane::Client,
    /// `status.endpoint`: the URL without `/api/v2`.
    pub endpoint: String,
    /// The CAs (PEM) the control plane's certificates chain to, when a bundle is given
    /// rather than the system's store: the storage nodes trust them too, so that the
    /// control plane reaches them and they reach it.
    pub trust: Option<String>,
}

/// What the ControlPlane controller last published.
#[derive(Clone, Debug)]
pub struct Published {
    pub phase: ControlPlanePhase,
    /// Why the phase is what it is.
    pub message: Option<String>,
    /// `None`: no client could be built (credentials or TLS material missing).
    pub reach: Option<Reach>,
}

/// Whether a client proceeds with what was published, or why it holds. Pure.
pub fn verdict(published: Option<&Published>) -> Result<Reach, String> {
    let Some(published) = published else {
        return Err(
            "no ControlPlane is known yet: this waits for ControlPlane simplyblock in the operator's namespace to be Available (the chart's standalone or managed profile creates it)"
                .into(),
        );
    };
    let why = published
        .message
        .as_deref()
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    match (&published.reach, published.phase.serves()) {
        (Some(reach), true) => Ok(reach.clone()),
        (None, true) => Err(format!(
            "the control plane is {:?} but the operator has no client for it{why}",
            published.phase
        )),
        (_, false) => Err(format!(
            "the control plane is {:?}{why}; this waits until it is Available or Degraded",
            published.phase
        )),
    }
}

/// The bearer token the operator sends to a local control plane (and to a managed one
/// without `credentialsSecretRef`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Token {
    /// Read from this file at each use: a projected service-account token is rotated in
    /// place.
    File(PathBuf),
    /// This token (tests).
    Value(String),
}

impl Token {
    /// The token, or why it cannot be read.
    pub fn read(&self) -> Result<String, String> {
        match self {
            Token::Value(v) => Ok(v.clone()),
            Token::File(path) => std::fs::read_to_string(path)
                .map(|t| t.trim().to_owned())
                .map_err(|e| {
                    format!(
                        "the service-account token {} cannot be read ({e}); mount it, or pass --control-plane-token-file",
                        path.display()
                    )
                }),
        }
    }
}

/// The audience the operator's own token must be minted for, and for nothing else, to be
/// sent to a managed control plane without a credentials Secret.
pub const CONTROL_PLANE_AUDIENCE: &str = "simplyblock-control-plane";

/// Why the operator's own `token` is not sent to a managed control plane, if it is not:
/// a Kubernetes token whose audiences are not only `dedicated` (or that names the API
/// server that issued it) is one the API server accepts, so whoever answers at the
/// endpoint could act as the operator there. Read without verifying: it is the operator's
/// own token. A token that is not a JWT is no Kubernetes token, and is sent as given.
pub fn audience_refusal(token: &str, dedicated: &str) -> Option<String> {
    let claims = jwt_claims(token)?;
    let audiences: Vec<String> = match claims.get("aud") {
        Some(serde_json::Value::String(a)) => vec![a.clone()],
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    let issuer = claims.get("iss").and_then(|v| v.as_str());
    let dedicated_only = !audiences.is_empty()
        && audiences.iter().all(|a| a == dedicated)
        && issuer != Some(dedicated);
    (!dedicated_only).then(|| {
        format!(
            "the operator's own token is for the audience {audiences:?}, which the Kubernetes API server accepts, and spec.source.managed.credentialsSecretRef is not set: it is not sent, since whoever answers at the endpoint could use it against the API server; create a Secret with the control plane's bearer token under the key token and name it in credentialsSecretRef, or have the chart mint the operator's token for the audience {dedicated} alone (operator.controlPlaneToken.audience) and the control plane review tokens for it"
        )
    })
}

/// The claims of a JWT, unverified; `None` when `token` is not one.
fn jwt_claims(token: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    let mut parts = token.split('.');
    let (_header, payload, _signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    serde_json::from_slice(&base64url(payload)?).ok()
}

/// Unpadded base64url, as JWTs carry it.
fn base64url(s: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= value(c)? << (18 - 6 * i);
        }
        let n = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return None,
        };
        out.extend_from_slice(&acc.to_be_bytes()[1..1 + n]);
    }
    Some(out)
}

/// How the ControlPlane controller builds its clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub token: Token,
    /// The only audience [`Access::token`] may name to be sent to a managed control plane
    /// without a credentials Secret ([`audience_refusal`]).
    pub audience: String,
    /// Send plain-HTTP requests through this HTTP proxy instead of resolving the
    /// endpoint's host: an operator outside the cluster reaching the in-cluster Service
    /// (with sbsim, the demo and the tests). `status.endpoint` keeps the in-cluster URL.
    pub proxy: Option<SocketAddr>,
}

impl Default for Access {
    fn default() -> Access {
        Access {
            token: Token::File(SERVICE_ACCOUNT_TOKEN.into()),
            audience: CONTROL_PLANE_AUDIENCE.into(),
            proxy: None,
        }
    }
}

/// The link every controller of one operator reaches the control plane through.
#[derive(Debug)]
pub struct Link {
    pinned: Option<Reach>,
    published: RwLock<Option<Published>>,
    /// The endpoint while the control plane serves, `None` otherwise: what wakes the
    /// controllers when it changes.
    serving: watch::Sender<Option<String>>,
}

impl Link {
    /// Always `reach`, whatever is published.
    pub fn pinned(reach: Reach) -> Link {
        Link {
            pinned: Some(reach),
            ..Link::published()
        }
    }

    /// Whatever the ControlPlane controller publishes; nothing until it does.
    pub fn published() -> Link {
        Link {
            pinned: None,
            published: RwLock::new(None),
            serving: watch::Sender::new(None),
        }
    }

    /// The client to use now, or why to hold.
    pub fn reach(&self) -> Result<Reach, String> {
        if let Some(reach) = &self.pinned {
            return Ok(reach.clone());
        }
        let published = self.published.read().unwrap_or_else(|e| e.into_inner());
        verdict(published.as_ref())
    }

    /// The CAs the control plane's certificates chain to, if a bundle is known
    /// ([`Reach::trust`]), whether or not it serves now.
    pub fn trust(&self) -> Option<String> {
        match &self.pinned {
            Some(reach) => reach.trust.clone(),
            None => self.published_now()?.reach?.trust,
        }
    }

    /// What was last published (whether or not this link is pinned).
    pub fn published_now(&self) -> Option<Published> {
        self.published
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Publishes the control plane's state; `None` once it is gone.
    pub fn publish(&self, next: Option<Published>) {
        let endpoint = verdict(next.as_ref()).ok().map(|r| r.endpoint);
        *self.published.write().unwrap_or_else(|e| e.into_inner()) = next;
        self.serving.send_if_modified(|current| {
            let changed = *current != endpoint;
            *current = endpoint;
            changed
        });
    }

    /// Yields whenever the control plane starts or stops serving, or moves.
    pub fn changes(&self) -> impl Stream<Item = ()> + Send + 'static {
        let mut receiver = self.serving.subscribe();
        receiver.mark_unchanged();
        futures::stream::unfold(receiver, |mut receiver| async move {
            receiver.changed().await.ok()?;
            Some(((), receiver))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::{FutureExt, StreamExt};

    fn reach(endpoint: &str) -> Reach {
        let url = simplyblock_controlplane::Url::parse(endpoint).expect("url");
        Reach {
            client: simplyblock_controlplane::Client::new(
                simplyblock_controlplane::ClientConfig::new(url, "t"),
            )
            .expect("client"),
            endpoint: endpoint.into(),
            trust: None,
        }
    }

    fn published(phase: ControlPlanePhase, reach: Option<Reach>) -> Published {
        Published {
            phase,
            message: Some("why".into()),
            reach,
        }
    }

    #[test]
    fn a_token_file_is_read_at_each_use_so_a_rotation_is_followed() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("token");
        let token = Token::File(path.clone());
        let missing = token.read().expect_err("no file yet");
        assert!(
            missing.contains("cannot be read") && missing.contains("--control-plane-token-file"),
            "{missing}"
        );
        std::fs::write(&path, "first\n").expect("write");
        assert_eq!(token.read().as_deref(), Ok("first"));
        // The kubelet replaces the file's content in place.
        std::fs::write(&path, "second").expect("rotate");
        assert_eq!(token.read().as_deref(), Ok("second"));
    }

    /// An unsigned JWT with these claims.
    pub fn jwt(claims: serde_json::Value) -> String {
        fn encode(bytes: &[u8]) -> String {
            const ALPHABET: &[u8] =
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
            let mut out = String::new();
            for chunk in bytes.chunks(3) {
                let mut acc = 0u32;
                for (i, &b) in chunk.iter().enumerate() {
                    acc |= u32::from(b) << (16 - 8 * i);
                }
                for i in 0..=chunk.len() {
                    out.push(ALPHABET[(acc >> (18 - 6 * i) & 63) as usize] as char);
                }
            }
            out
        }
        format!(
            "{}.{}.sig",
            encode(br#"{"alg":"RS256"}"#),
            encode(claims.to_string().as_bytes())
        )
    }

    #[test]
    fn only_a_token_for_the_dedicated_audience_alone_goes_to_a_managed_control_plane() {
        use serde_json::json;
        let d = CONTROL_PLANE_AUDIENCE;
        let iss = "https://kubernetes.default.svc.cluster.local";
        for sent in [
            jwt(json!({"aud": [d], "iss": iss})),
            jwt(json!({"aud": d, "iss": iss})),
            // Not a Kubernetes token: a static one given as the operator's.
            "operator-test-token".to_owned(),
            "a.b".to_owned(),
        ] {
            assert_eq!(audience_refusal(&sent, d), None, "{sent}");
        }
        for (claims, shown) in [
            (json!({"aud": [iss], "iss": iss}), iss),
            (json!({"aud": [d, iss], "iss": iss}), iss),
            (json!({"aud": "kubernetes"}), "kubernetes"),
            (json!({"iss": iss}), "[]"),
            (json!({"aud": [d], "iss": d}), d),
        ] {
            let why = audience_refusal(&jwt(claims.clone()), d).expect("refused");
            assert!(why.contains(shown), "{claims}: {why}");
            assert!(
                why.contains("credentialsSecretRef")
                    && why.contains("operator.controlPlaneToken.audience"),
                "{why}"
            );
        }
        // Every padding of the payload decodes.
        for pad in ["", "x", "xx"] {
            let token = jwt(json!({"aud": [iss], "p": pad}));
            assert!(audience_refusal(&token, d).is_some(), "{token}");
        }
    }

    #[test]
    fn clients_proceed_on_available_and_degraded_and_hold_otherwise_saying_why() {
        let r = || Some(reach("http://cp:5000"));
        use ControlPlanePhase::*;
        for phase in [Available, Degraded] {
            let ok = verdict(Some(&published(phase, r()))).expect("serves");
            assert_eq!(ok.endpoint, "http://cp:5000");
        }
        for phase in [Installing, Unavailable] {
            let held = verdict(Some(&published(phase, r()))).expect_err("holds");
            assert!(
                held.starts_with(&format!("the control plane is {phase:?}: why")),
                "{held}"
            );
        }
        let held = verdict(Some(&published(Available, None))).expect_err("no client");
        assert!(held.contains("no client"), "{held}");
        let held = verdict(None).expect_err("nothing published");
        assert!(held.starts_with("no ControlPlane is known yet"), "{held}");
    }

    #[test]
    fn a_pinned_link_ignores_what_is_published() {
        let link = Link::pinned(reach("http://pinned:5000"));
        link.publish(Some(published(ControlPlanePhase::Unavailable, None)));
        assert_eq!(link.reach().expect("pinned").endpoint, "http://pinned:5000");
    }

    #[tokio::test]
    async fn only_a_change_of_serving_wakes_the_controllers() {
        let link = Link::published();
        let mut changes = Box::pin(link.changes());
        link.publish(Some(published(ControlPlanePhase::Installing, None)));
        link.publish(Some(published(
            ControlPlanePhase::Available,
            Some(reach("http://a:5000")),
        )));
        changes.next().await.expect("woken when it serves");
        // Degraded at the same endpoint still serves: nothing to wake for.
        link.publish(Some(published(
            ControlPlanePhase::Degraded,
            Some(reach("http://a:5000")),
        )));
        assert!(changes.next().now_or_never().is_none(), "woken for nothing");
        link.publish(None);
        changes.next().await.expect("woken when it stops");
        assert!(link.reach().is_err());
    }
}

//! Who is asking and whether they may: authentication and authorization delegated to the
//! API server, as every aggregated API server does.
//!
//! The API server proxies a request over TLS with its front-proxy client certificate and
//! names the user in request headers; the certificate is checked against the requestheader
//! CA the API server publishes in `kube-system/extension-apiserver-authentication`, and the
//! headers are believed only on such a connection. A bearer token is checked with a
//! TokenReview instead. Each request is then authorized with a SubjectAccessReview.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

/// Where the API server publishes how it authenticates to aggregated servers.
pub const AUTHENTICATION_CONFIG_MAP: (&str, &str) =
    ("kube-system", "extension-apiserver-authentication");

/// How the front proxy names the user, from the API server's published configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FrontProxy {
    /// The requestheader CA, PEM.
    pub client_ca: String,
    /// The common names a front-proxy certificate may carry; empty: any the CA signed.
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_headers_prefixes: Vec<String>,
}

impl FrontProxy {
    /// The front-proxy configuration of the ConfigMap's data; `None` when the API server
    /// publishes no requestheader CA (it then proxies to no aggregated server).
    pub fn from_config_map(data: &BTreeMap<String, String>) -> Option<FrontProxy> {
        let client_ca = data.get("requestheader-client-ca-file")?.clone();
        let list = |key: &str| -> Vec<String> {
            data.get(key)
                .and_then(|v| serde_json::from_str::<Vec<String>>(v).ok())
                .unwrap_or_default()
        };
        Some(FrontProxy {
            client_ca,
            allowed_names: list("requestheader-allowed-names"),
            username_headers: list("requestheader-username-headers"),
            group_headers: list("requestheader-group-headers"),
            extra_headers_prefixes: list("requestheader-extra-headers-prefix"),
        })
    }

    /// Reads the API server's published configuration.
    pub async fn read(kube: &kube::Client) -> Result<Option<FrontProxy>, kube::Error> {
        let (namespace, name) = AUTHENTICATION_CONFIG_MAP;
        let found = Api::<ConfigMap>::namespaced(kube.clone(), namespace)
            .get_opt(name)
            .await?;
        Ok(found
            .and_then(|c| c.data)
            .and_then(|d| FrontProxy::from_config_map(&d)))
    }

    /// A verifier asking for a client certificate and accepting one the requestheader CA
    /// signed; a connection without one is let through, to authenticate by token.
    pub fn verifier(&self) -> Result<Arc<dyn ClientCertVerifier>, String> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(self.client_ca.as_bytes()) {
            let cert = cert.map_err(|e| format!("the requestheader CA does not parse: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("the requestheader CA is not usable: {e}"))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .allow_unauthenticated()
            .build()
            .map_err(|e| format!("the requestheader CA is not usable: {e}"))
    }

    /// The user the front proxy names in `headers`, when the connection's verified
    /// certificate (`common_name`) is one the API server allows as its front proxy.
    pub fn user(&self, common_name: &str, headers: &axum::http::HeaderMap) -> Option<User> {
        if !self.allowed_names.is_empty() && !self.allowed_names.iter().any(|n| n == common_name) {
            return None;
        }
        let values = |name: &str| -> Vec<String> {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_string)
                .collect()
        };
        let name = self
            .username_headers
            .iter()
            .flat_map(|h| values(h))
            .find(|v| !v.is_empty())?;
        let groups = self.group_headers.iter().flat_map(|h| values(h)).collect();
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (header, value) in headers {
            let header = header.as_str();
            for prefix in &self.extra_headers_prefixes {
                if let Some(key) = header.strip_prefix(&prefix.to_ascii_lowercase())
                    && let Ok(value) = value.to_str()
                {
                    extra
                        .entry(key.to_string())
                        .or_default()
                        .push(value.to_string());
                }
            }
        }
        Some(User {
            name,
            groups,
            extra,
        })
    }
}

/// What a connection's TLS handshake proved: the common name of a verified client
/// certificate, if one was presented.
#[derive(Clone, Debug, Default)]
pub struct Peer {
    pub common_name: Option<String>,
}

/// The common name of a DER certificate.
pub fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    cert.subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_string)
}

/// An authenticated user.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Checks a bearer token with a TokenReview; `None` when the API server does not accept it.
pub async fn token_user(kube: &kube::Client, token: &str) -> Result<Option<User>, kube::Error> {
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: token.to_string(),
            ..TokenReviewSpec::default()
        },
        ..TokenReview::default()
    };
    let answer = Api::<TokenReview>::all(kube.clone())
        .create(&PostParams::default(), &review)
        .await?;
    let Some(status) = answer.status.filter(|s| s.authenticated == Some(true)) else {
        return Ok(None);
    };
    let Some(info) = status.user else {
        return Ok(None);
    };
    Ok(Some(User {
        name: info.username.unwrap_or_default(),
        groups: info.groups.unwrap_or_default(),
        extra: info.extra.unwrap_or_default(),
    }))
}

/// What a request does, for its SubjectAccessReview.
#[derive(Clone, Debug, PartialEq)]
pub struct Attributes {
    pub verb: &'static str,
    pub resource: &'static str,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// Whether `user` may do `attributes`: `Err` carries the API server's reason when not.
pub async fn authorize(
    kube: &kube::Client,
    user: &User,
    attributes: &Attributes,
) -> Result<Result<(), String>, kube::Error> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            groups: Some(user.groups.clone()),
            extra: Some(user.extra.clone()),
            resource_attributes: Some(ResourceAttributes {
                group: Some(super::GROUP.into()),
                version: Some(super::VERSION.into()),
                resource: Some(attributes.resource.into()),
                verb: Some(attributes.verb.into()),
                namespace: attributes.namespace.clone(),
                name: attributes.name.clone(),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answer = Api::<SubjectAccessReview>::all(kube.clone())
        .create(&PostParams::default(), &review)
        .await?;
    let status = answer.status.unwrap_or_default();
    if status.allowed {
        Ok(Ok(()))
    } else {
        Ok(Err(status.reason.unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxy() -> FrontProxy {
        let data: BTreeMap<String, String> = [
            ("requestheader-client-ca-file", "PEM"),
            ("requestheader-allowed-names", "[\"front-proxy-client\"]"),
            ("requestheader-username-headers", "[\"X-Remote-User\"]"),
            ("requestheader-group-headers", "[\"X-Remote-Group\"]"),
            (
                "requestheader-extra-headers-prefix",
                "[\"X-Remote-Extra-\"]",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        FrontProxy::from_config_map(&data).expect("configured")
    }

    fn headers() -> axum::http::HeaderMap {
        let mut h = axum::http::HeaderMap::new();
        h.insert("x-remote-user", "alice".parse().expect("value"));
        h.append("x-remote-group", "dev".parse().expect("value"));
        h.append(
            "x-remote-group",
            "system:authenticated".parse().expect("value"),
        );
        h.insert("x-remote-extra-scopes", "a".parse().expect("value"));
        h
    }

    #[test]
    fn the_front_proxy_names_the_user_in_its_headers() {
        let user = proxy()
            .user("front-proxy-client", &headers())
            .expect("a user");
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, ["dev", "system:authenticated"]);
        assert_eq!(user.extra["scopes"], ["a"]);
    }

    #[test]
    fn a_certificate_not_allowed_as_front_proxy_names_nobody() {
        assert!(proxy().user("someone-else", &headers()).is_none());
    }

    #[test]
    fn no_requestheader_ca_is_no_front_proxy() {
        assert!(FrontProxy::from_config_map(&BTreeMap::new()).is_none());
    }
}

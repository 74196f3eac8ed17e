//! The aggregated API's HTTPS server and its APIService.
//!
//! It listens on a port of its own rather than the webhook port: it asks every client for
//! a certificate (the API server's front-proxy one) and checks it against the requestheader
//! CA, which the webhook listener must not do, and a separate listener keeps a slow metrics
//! request from taking the connections admission needs. It serves the webhooks' certificate
//! (same CA, same Service names), so the APIService trusts the same bundle.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Extension, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::auth::{self, Attributes, FrontProxy, Peer, User};
use super::observe::{self, ObserveError, Query};
use super::readings::{self, Kind};
use super::{API_SERVICE, GROUP, VERSION};
use crate::runtime::context::Context;
use crate::runtime::error::ServerError as Error;
use crate::runtime::serving::ServerLimits;
use crate::webhooks::tls::ServingCertificates;

/// What the handlers need.
pub struct MetricsApi {
    /// The operator's own client: it reads the measured objects and asks for the reviews.
    pub kube: kube::Client,
    /// Whose link to the control plane the readings come through.
    pub context: Arc<Context>,
    /// `None`: the API server publishes no requestheader CA; only bearer tokens then.
    pub front_proxy: Option<FrontProxy>,
}

/// A bound server; [`MetricsApiServer::run`] serves until the task is dropped.
pub struct MetricsApiServer {
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    api: Arc<MetricsApi>,
}

impl MetricsApiServer {
    pub async fn bind(
        addr: SocketAddr,
        certs: &Arc<ServingCertificates>,
        api: MetricsApi,
    ) -> Result<MetricsApiServer, Error> {
        let verifier = match &api.front_proxy {
            Some(proxy) => Some(proxy.verifier().map_err(Error::Tls)?),
            None => None,
        };
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Listen {
                server: "metrics API server",
                addr: addr.to_string(),
                source,
            })?;
        Ok(MetricsApiServer {
            listener,
            tls: certs.server_config_verifying(verifier),
            api: Arc::new(api),
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    pub async fn run(self) {
        let acceptor = TlsAcceptor::from(self.tls);
        let router = Router::new().fallback(answer).with_state(self.api);
        crate::runtime::serving::serve_identified(
            "metrics API server",
            self.listener,
            ServerLimits::WEBHOOK,
            router,
            move |tcp| {
                let accepting = acceptor.accept(tcp);
                async move {
                    let tls = accepting.await?;
                    let common_name = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(|c| auth::common_name(c));
                    Ok((tls, Peer { common_name }))
                }
            },
        )
        .await;
    }
}

/// A refusal as a `meta/v1` Status.
fn refuse(code: StatusCode, reason: &str, message: impl Into<String>) -> Response {
    let body = readings::status(code.as_u16(), reason, &message.into());
    (code, axum::Json(body)).into_response()
}

/// What a path under `/apis` names.
#[derive(Debug, PartialEq)]
enum Target {
    Groups,
    Group,
    Resources,
    Objects {
        kind: Kind,
        namespace: Option<String>,
        name: Option<String>,
    },
}

fn target(path: &str) -> Result<Target, String> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let resource = |r: &str| {
        Kind::from_resource(r).ok_or_else(|| {
            format!(
                "{GROUP}/{VERSION} has no resource {r:?}; it serves {}",
                Kind::ALL.map(Kind::resource).join(", ")
            )
        })
    };
    match parts.as_slice() {
        ["apis"] => Ok(Target::Groups),
        ["apis", GROUP] => Ok(Target::Group),
        ["apis", GROUP, VERSION] => Ok(Target::Resources),
        ["apis", GROUP, VERSION, r] => Ok(Target::Objects {
            kind: resource(r)?,
            namespace: None,
            name: None,
        }),
        ["apis", GROUP, VERSION, "namespaces", ns, r] => Ok(Target::Objects {
            kind: resource(r)?,
            namespace: Some(ns.to_string()),
            name: None,
        }),
        ["apis", GROUP, VERSION, "namespaces", ns, r, name] => Ok(Target::Objects {
            kind: resource(r)?,
            namespace: Some(ns.to_string()),
            name: Some(name.to_string()),
        }),
        _ => Err(format!(
            "{path} is not a path of {GROUP}/{VERSION}; its objects are at /apis/{GROUP}/{VERSION}/namespaces/<namespace>/<resource>[/<name>]"
        )),
    }
}

fn query_param(uri_query: Option<&str>, key: &str) -> Option<String> {
    uri_query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then(|| percent_decode(v))
    })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Who asks: the user the front proxy names on a connection with its certificate, else
/// the owner of a bearer token.
async fn authenticate(
    api: &MetricsApi,
    peer: &Peer,
    headers: &HeaderMap,
) -> Result<Option<User>, kube::Error> {
    if let (Some(proxy), Some(cn)) = (&api.front_proxy, &peer.common_name)
        && let Some(user) = proxy.user(cn, headers)
    {
        return Ok(Some(user));
    }
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match token {
        Some(token) => auth::token_user(&api.kube, token.trim()).await,
        None => Ok(None),
    }
}

async fn answer(
    State(api): State<Arc<MetricsApi>>,
    Extension(peer): Extension<Peer>,
    request: Request,
) -> Response {
    let (parts, _) = request.into_parts();
    let path = parts.uri.path();
    let target = match target(path) {
        Ok(target) => target,
        Err(message) => return refuse(StatusCode::NOT_FOUND, "NotFound", message),
    };
    // Discovery says only what is served, which the API server shows every user anyway;
    // its availability check asks for it without naming a user.
    let (kind, namespace, name) = match target {
        Target::Groups => return axum::Json(readings::api_group_list()).into_response(),
        Target::Group => return axum::Json(readings::api_group()).into_response(),
        Target::Resources => return axum::Json(readings::resource_list()).into_response(),
        Target::Objects {
            kind,
            namespace,
            name,
        } => (kind, namespace, name),
    };
    let user = match authenticate(&api, &peer, &parts.headers).await {
        Ok(Some(user)) => user,
        Ok(None) => {
            return refuse(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "no user: call through the Kubernetes API server (kubectl get snm), which authenticates you, or present a bearer token it accepts",
            );
        }
        Err(e) => {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                format!("the Kubernetes API server could not check the token: {e}; retry shortly"),
            );
        }
    };
    let watch = query_param(parts.uri.query(), "watch").is_some_and(|w| w == "true" || w == "1");
    if parts.method != Method::GET || watch {
        return refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!(
                "{}.{GROUP} is read-only and cannot be watched: readings are computed when asked; use get or list (kubectl get {}) and ask again for a newer one",
                kind.resource(),
                kind.short_name()
            ),
        );
    }
    let verb = if name.is_some() { "get" } else { "list" };
    let attributes = Attributes {
        verb,
        resource: kind.resource(),
        namespace: namespace.clone(),
        name: name.clone(),
    };
    match auth::authorize(&api.kube, &user, &attributes).await {
        Ok(Ok(())) => {}
        Ok(Err(reason)) => {
            let place = match &namespace {
                Some(ns) => format!("in the namespace {ns:?}"),
                None => "at the cluster scope".to_string(),
            };
            let why = if reason.is_empty() {
                String::new()
            } else {
                format!(" ({reason})")
            };
            return refuse(
                StatusCode::FORBIDDEN,
                "Forbidden",
                format!(
                    "{kind}.{GROUP} is forbidden: User {user:?} cannot {verb} resource {kind:?} in API group {GROUP:?} {place}{why}; bind a role granting it, such as the view ClusterRole",
                    kind = kind.resource(),
                    user = user.name,
                ),
            );
        }
        Err(e) => {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                format!(
                    "the Kubernetes API server could not authorize the request: {e}; retry shortly"
                ),
            );
        }
    }
    let field_selector = query_param(parts.uri.query(), "fieldSelector").filter(|s| !s.is_empty());
    if let Some(selector) = &field_selector {
        let problems = readings::field_selector_problems(selector);
        if !problems.is_empty() {
            return refuse(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("field selector {selector:?}: {}", problems.join("; ")),
            );
        }
    }
    let field_selector = match (&name, field_selector) {
        (Some(name), Some(s)) => Some(format!("metadata.name={name},{s}")),
        (Some(name), None) => Some(format!("metadata.name={name}")),
        (None, s) => s,
    };
    let query = Query {
        namespace: namespace.clone(),
        label_selector: query_param(parts.uri.query(), "labelSelector").filter(|s| !s.is_empty()),
        field_selector,
    };
    let cp = match api.context.link.reach() {
        Ok(reach) => reach.client,
        Err(reason) => {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                format!(
                    "the control plane is not reachable yet: {reason}; readings come from it, so ask again once its ControlPlane is Available"
                ),
            );
        }
    };
    let found = match observe::readings(kind, &api.kube, &cp, &query).await {
        Ok(found) => found,
        Err(ObserveError::Kube(kube::Error::Api(status))) => {
            let code = StatusCode::from_u16(status.code).unwrap_or(StatusCode::BAD_REQUEST);
            return refuse(code, &status.reason, status.message);
        }
        Err(e) => {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                format!("{e}; retry shortly"),
            );
        }
    };
    let table = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(readings::wants_table);
    if let Some(name) = &name {
        if found.is_empty() {
            return refuse(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!(
                    "{}.{GROUP} {name:?} not found: there is no {} {name:?} in {:?} with a control plane id and a sample from the control plane; check `kubectl get {} {name}` and its status",
                    kind.resource(),
                    kind.measures(),
                    namespace.as_deref().unwrap_or_default(),
                    kind.measures().to_ascii_lowercase(),
                ),
            );
        }
        if !table {
            return axum::Json(found[0].object()).into_response();
        }
    }
    let body: Value = if table {
        readings::table(kind, &found)
    } else {
        readings::list(kind, &found)
    };
    axum::Json(body).into_response()
}

/// Binds the server at `addr` with the front-proxy configuration the API server publishes,
/// and keeps the installed APIService trusting `certs`; the returned future serves.
pub async fn start(
    addr: SocketAddr,
    certs: &Arc<ServingCertificates>,
    ctx: &Arc<Context>,
) -> Result<impl Future<Output = ()> + Send + 'static, Error> {
    let front_proxy = FrontProxy::read(&ctx.kube)
        .await
        .map_err(|source| Error::Kube {
            what: format!(
                "the ConfigMap {}/{} (how the API server authenticates to aggregated APIs)",
                auth::AUTHENTICATION_CONFIG_MAP.0,
                auth::AUTHENTICATION_CONFIG_MAP.1
            ),
            source,
        })?;
    if front_proxy.is_none() {
        tracing::warn!(
            "the API server publishes no requestheader CA, so it cannot proxy to the metrics API; only bearer tokens are accepted"
        );
    }
    let server = MetricsApiServer::bind(
        addr,
        certs,
        MetricsApi {
            kube: ctx.kube.clone(),
            context: ctx.clone(),
            front_proxy,
        },
    )
    .await?;
    if register(&ctx.kube, &certs.ca_bundle()).await? {
        tracing::info!(listen = %addr, "serving the {GROUP} aggregated API");
    } else {
        tracing::info!(listen = %addr, "serving the {GROUP} aggregated API; no APIService {API_SERVICE} is installed, so the API server does not route to it");
    }
    Ok(server.run())
}

/// The APIService registering this server with the API server, at `port` of the Service
/// `namespace/service`, trusting `ca_bundle`: what the chart installs.
pub fn api_service(namespace: &str, service: &str, port: i32, ca_bundle: &str) -> Value {
    json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": API_SERVICE},
        "spec": {
            "group": GROUP,
            "version": VERSION,
            "service": {"namespace": namespace, "name": service, "port": port},
            "caBundle": k8s_openapi::ByteString(ca_bundle.as_bytes().to_vec()),
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    })
}

/// Keeps the installed APIService's caBundle the operator's CA; an APIService not
/// installed (the chart's `metricsApi.enabled` off) is left absent.
pub async fn register(kube: &kube::Client, ca_bundle: &str) -> Result<bool, Error> {
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
    use kube::api::{Api, Patch, PatchParams};
    let kube_error = |source| Error::Kube {
        what: format!(
            "APIService {API_SERVICE} (the chart installs it; the operator only keeps its CA bundle current)"
        ),
        source,
    };
    let api: Api<APIService> = Api::all(kube.clone());
    if api
        .get_opt(API_SERVICE)
        .await
        .map_err(kube_error)?
        .is_none()
    {
        return Ok(false);
    }
    let body = json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": API_SERVICE},
        "spec": {"caBundle": k8s_openapi::ByteString(ca_bundle.as_bytes().to_vec())},
    });
    api.patch(
        API_SERVICE,
        &PatchParams::apply(crate::webhooks::FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map_err(kube_error)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_discovery_lists_and_objects() {
        assert_eq!(target("/apis"), Ok(Target::Groups));
        assert_eq!(target("/apis/metrics.simplyblock.io"), Ok(Target::Group));
        assert_eq!(
            target("/apis/metrics.simplyblock.io/v1alpha2"),
            Ok(Target::Resources)
        );
        assert_eq!(
            target("/apis/metrics.simplyblock.io/v1alpha2/namespaces/ns/storagenodemetrics/sn"),
            Ok(Target::Objects {
                kind: Kind::StorageNode,
                namespace: Some("ns".into()),
                name: Some("sn".into())
            })
        );
        assert_eq!(
            target("/apis/metrics.simplyblock.io/v1alpha2/storagepoolmetrics"),
            Ok(Target::Objects {
                kind: Kind::StoragePool,
                namespace: None,
                name: None
            })
        );
        let unknown = target("/apis/metrics.simplyblock.io/v1alpha2/nodes").expect_err("unknown");
        assert!(unknown.contains("storagenodemetrics"), "{unknown}");
    }

    #[test]
    fn query_parameters_are_decoded() {
        assert_eq!(
            query_param(
                Some("watch=true&fieldSelector=metadata.name%3Dsn-1"),
                "fieldSelector"
            ),
            Some("metadata.name=sn-1".into())
        );
        assert_eq!(query_param(Some("limit=500"), "watch"), None);
    }
}

//! The client of a ControlPlane's control plane: its endpoint (a local control plane's
//! in-cluster Service, or the managed one's URL), its bearer token (the managed
//! `credentialsSecretRef`, else the operator's service-account token) and its TLS trust
//! (the CA cert-manager or OpenShift issued from, the managed `caBundleSecretRef`, else
//! the system's store). Building it reads Secrets and ConfigMaps; when one is missing,
//! the answer says which and why, instead of a client.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::Api;
use simplyblock_api::control_plane::{ControlPlane, ManagedSource, TlsProvider};
use simplyblock_controlplane::{Client, ClientConfig, TlsConfig, Url};

use super::manifests::Tls;
use super::names::{API_TLS_SECRET, CLIENT_TLS_SECRET, SERVICE_CA_CONFIG_MAP, api_endpoint};
use super::plan::Probe;
use crate::runtime::context::Context;
use crate::runtime::kit::Error;
use crate::runtime::link::Reach;

/// Why no client could be made: the probe's [`Probe::NoClient`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoClient {
    pub credentials: bool,
    pub why: String,
}

impl From<NoClient> for Probe {
    fn from(n: NoClient) -> Probe {
        Probe::NoClient {
            credentials: n.credentials,
            why: n.why,
        }
    }
}

fn credentials(why: String) -> NoClient {
    NoClient {
        credentials: true,
        why,
    }
}

/// `status.endpoint` of `cp`: without `/api/v2`, without a trailing slash.
pub fn endpoint(cp: &ControlPlane) -> String {
    let ns = cp.namespace().unwrap_or_default();
    match (&cp.spec.source.local, &cp.spec.source.managed) {
        (Some(local), _) => api_endpoint(&ns, Tls::of(local).serve),
        (None, Some(managed)) => managed.endpoint.trim_end_matches('/').to_owned(),
        (None, None) => String::new(),
    }
}

/// The client of `cp`'s control plane, or why there is none yet. `Err` is a failed read.
pub async fn build(ctx: &Context, cp: &ControlPlane) -> Result<Result<Reach, NoClient>, Error> {
    let ns = cp.namespace().unwrap_or_default();
    let endpoint = endpoint(cp);
    let secrets: Api<Secret> = Api::namespaced(ctx.kube.clone(), &ns);
    let (token, tls) = match (&cp.spec.source.local, &cp.spec.source.managed) {
        (Some(local), _) => {
            let token = match ctx.access.token.read() {
                Ok(t) => t,
                Err(why) => return Ok(Err(credentials(why))),
            };
            let tls = Tls::of(local);
            if !tls.serve {
                (token, None)
            } else {
                match local_tls(ctx, &secrets, &ns, tls).await? {
                    Ok(tls) => (token, Some(tls)),
                    Err(missing) => return Ok(Err(missing)),
                }
            }
        }
        (None, Some(managed)) => match managed_material(ctx, &secrets, &ns, managed).await? {
            Ok(material) => material,
            Err(missing) => return Ok(Err(missing)),
        },
        (None, None) => {
            return Ok(Err(NoClient {
                credentials: false,
                why: "spec.source names neither local nor managed".into(),
            }));
        }
    };
    let url = match Url::parse(&endpoint) {
        Ok(url) => url,
        Err(e) => {
            return Ok(Err(NoClient {
                credentials: false,
                why: format!("the endpoint {endpoint} is not a URL: {e}"),
            }));
        }
    };
    let trust = tls
        .as_ref()
        .filter(|t| !t.ca_pem.is_empty())
        .and_then(|t| String::from_utf8(t.ca_pem.clone()).ok());
    let mut config = ClientConfig::new(url, token);
    config.tls = tls;
    config.connect_to = ctx.access.proxy;
    if cp.spec.source.local.is_none() {
        // Judged again at each connection, not only when the client is built.
        config.refuse_address = Some(refuse_local);
    }
    match Client::new(config) {
        Ok(client) => Ok(Ok(Reach {
            client,
            endpoint,
            trust,
        })),
        Err(e) => Ok(Err(NoClient {
            credentials: false,
            why: e.to_string(),
        })),
    }
}

fn key_of(secret: &Secret, keys: &[&str]) -> Option<Vec<u8>> {
    let data = secret.data.as_ref()?;
    keys.iter()
        .find_map(|k| data.get(*k))
        .map(|b| b.0.clone())
        .filter(|b| !b.is_empty())
}

/// The CA a local control plane's serving certificate was issued from (PEM), or what it
/// waits for.
pub async fn api_ca(
    ctx: &Context,
    secrets: &Api<Secret>,
    ns: &str,
    provider: TlsProvider,
) -> Result<Result<Vec<u8>, String>, Error> {
    Ok(match provider {
        TlsProvider::CertManager => {
            let secret = secrets.get_opt(API_TLS_SECRET).await?;
            match secret.as_ref().and_then(|s| key_of(s, &["ca.crt"])) {
                Some(ca) => Ok(ca),
                None => Err(format!(
                    "waiting for cert-manager to issue the management API's certificate into Secret {API_TLS_SECRET} (with ca.crt)"
                )),
            }
        }
        TlsProvider::OpenShift => {
            let maps: Api<ConfigMap> = Api::namespaced(ctx.kube.clone(), ns);
            let found = maps.get_opt(SERVICE_CA_CONFIG_MAP).await?;
            match found
                .as_ref()
                .and_then(|m| m.data.as_ref())
                .and_then(|d| d.get("service-ca.crt"))
            {
                Some(ca) if !ca.is_empty() => Ok(ca.clone().into_bytes()),
                _ => Err(format!(
                    "waiting for OpenShift to inject its service CA into ConfigMap {SERVICE_CA_CONFIG_MAP} (service-ca.crt)"
                )),
            }
        }
    })
}

/// A local control plane's trust: the CA its serving certificate was issued from, and the
/// operator's client certificate when mutual TLS is on.
async fn local_tls(
    ctx: &Context,
    secrets: &Api<Secret>,
    ns: &str,
    tls: Tls,
) -> Result<Result<TlsConfig, NoClient>, Error> {
    let waiting = |why: String| {
        Ok(Err(NoClient {
            credentials: false,
            why,
        }))
    };
    let ca_pem = match api_ca(ctx, secrets, ns, tls.provider).await? {
        Ok(ca) => ca,
        Err(why) => return waiting(why),
    };
    let client_identity = if tls.mutual {
        let secret = secrets.get_opt(CLIENT_TLS_SECRET).await?;
        let pair = secret
            .as_ref()
            .and_then(|s| Some((key_of(s, &["tls.crt"])?, key_of(s, &["tls.key"])?)));
        match pair {
            Some(pair) => Some(pair),
            None => {
                return waiting(format!(
                    "waiting for cert-manager to issue the operator's client certificate into Secret {CLIENT_TLS_SECRET}"
                ));
            }
        }
    } else {
        None
    };
    Ok(Ok(TlsConfig {
        ca_pem,
        client_identity,
        server_name: None,
    }))
}

/// A managed control plane's token and trust, from the Secrets its spec names.
async fn managed_material(
    ctx: &Context,
    secrets: &Api<Secret>,
    ns: &str,
    managed: &ManagedSource,
) -> Result<Result<(String, Option<TlsConfig>), NoClient>, Error> {
    if let Some(why) = local_endpoint(&managed.endpoint, ctx.access.proxy.is_none()).await {
        return Ok(Err(NoClient {
            credentials: false,
            why,
        }));
    }
    let token = match &managed.credentials_secret_ref {
        None => match ctx.access.token.read() {
            Ok(t) => match crate::runtime::link::audience_refusal(&t, &ctx.access.audience) {
                None => t,
                Some(why) => return Ok(Err(credentials(why))),
            },
            Err(why) => return Ok(Err(credentials(why))),
        },
        Some(r) => match secrets.get_opt(&r.name).await? {
            None => {
                return Ok(Err(credentials(format!(
                    "Secret {} named by spec.source.managed.credentialsSecretRef does not exist in namespace {ns}; create it with the control plane's bearer token under the key token",
                    r.name
                ))));
            }
            Some(secret) => match key_of(&secret, &["token", "secret"]) {
                Some(t) => String::from_utf8_lossy(&t).trim().to_owned(),
                None => {
                    return Ok(Err(credentials(format!(
                        "Secret {} named by spec.source.managed.credentialsSecretRef holds neither the key token nor secret; put the control plane's bearer token under token",
                        r.name
                    ))));
                }
            },
        },
    };
    if !managed.endpoint.starts_with("https://") {
        // Held to the CRD's rule here too: an object written before the rule existed.
        if !managed.insecure {
            return Ok(Err(credentials(format!(
                "spec.source.managed.endpoint {} is not https://, and the bearer token is not sent in cleartext; give the https:// endpoint, or set insecure: true for a control plane without TLS on a trusted network",
                managed.endpoint
            ))));
        }
        return Ok(Ok((token, None)));
    }
    let ca_pem = match &managed.ca_bundle_secret_ref {
        None => Vec::new(),
        Some(r) => match secrets.get_opt(&r.name).await? {
            None => {
                return Ok(Err(credentials(format!(
                    "Secret {} named by spec.source.managed.caBundleSecretRef does not exist in namespace {ns}; create it with the CA under the key ca.crt",
                    r.name
                ))));
            }
            Some(secret) => match key_of(&secret, &["ca.crt", "tls.crt"]) {
                Some(ca) => ca,
                None => {
                    return Ok(Err(credentials(format!(
                        "Secret {} named by spec.source.managed.caBundleSecretRef holds neither ca.crt nor tls.crt",
                        r.name
                    ))));
                }
            },
        },
    };
    Ok(Ok((
        token,
        Some(TlsConfig {
            ca_pem,
            client_identity: None,
            server_name: None,
        }),
    )))
}

/// Why a managed `endpoint` is refused, if it is: its host is a loopback, link-local or
/// unspecified address in any spelling, or (when `resolve`) a name any of whose addresses
/// is. Checked each time the client is built, since an object may predate the CRD's rule;
/// the client judges each connection's addresses again ([`refuse_local`]). Behind
/// `--control-plane-proxy` the proxy, not the operator, resolves the host, so only its
/// spelling is judged; the proxy's own address is not, which is how tests reach sbsim on
/// loopback.
pub async fn local_endpoint(endpoint: &str, resolve: bool) -> Option<String> {
    use simplyblock_api::address::local_host;
    let refused = |what: String| {
        format!(
            "spec.source.managed.endpoint {endpoint} {what}, which reaches the operator's own pod or the node (its metadata service), not a control plane: the bearer token is not sent there; give the control plane's routable address"
        )
    };
    let url = match Url::parse(endpoint) {
        Ok(url) => url,
        Err(e) => return Some(format!("the endpoint {endpoint} is not a URL: {e}")),
    };
    // The URL parser has already turned every IPv4 spelling into a.b.c.d; the raw host is
    // judged too, for a parser that reads it otherwise.
    let host = url.host_str().unwrap_or_default().to_owned();
    if let Some(kind) = local_host(&host)
        .or_else(|| simplyblock_api::address::url_host(endpoint).and_then(|h| local_host(&h)))
    {
        return Some(refused(format!("is a {kind} address ({host})")));
    }
    let literal = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .is_ok();
    if !resolve || literal {
        return None;
    }
    let port = url.port_or_known_default().unwrap_or(443);
    // A name that does not resolve is left to the call, which says so.
    let addresses = tokio::net::lookup_host((host.as_str(), port)).await.ok()?;
    resolved_refusal(endpoint, addresses.map(|a| a.ip()))
}

/// Why the client of a managed control plane does not connect to `ip`: it is local.
fn refuse_local(ip: std::net::IpAddr) -> Option<String> {
    simplyblock_api::address::local_address(ip).map(|kind| format!("the {kind} address {ip}"))
}

/// Why `endpoint` is refused given the addresses its host resolved to: any local one.
fn resolved_refusal(
    endpoint: &str,
    mut addresses: impl Iterator<Item = std::net::IpAddr>,
) -> Option<String> {
    use simplyblock_api::address::local_address;
    addresses
        .find_map(|ip| local_address(ip).map(|kind| (ip, kind)))
        .map(|(ip, kind)| {
            format!(
                "spec.source.managed.endpoint {endpoint} resolves to the {kind} address {ip}, which reaches the operator's own pod or the node (its metadata service), not a control plane: the bearer token is not sent there; give the control plane's routable address"
            )
        })
}

/// Asks the control plane through `reach`: ready, and (when ready) its version.
pub async fn probe(reach: &Reach) -> Probe {
    match reach.client.ready().await {
        Err(e) => Probe::Asked {
            ready: Err(e.to_string()),
            version: None,
        },
        Ok(()) => Probe::Asked {
            ready: Ok(()),
            // A version that cannot be read is no version: the control plane answers.
            version: reach.client.version().await.ok().flatten(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server on loopback answering every request with `answer`; the requests it read.
    async fn answering(
        answer: &'static str,
    ) -> (
        std::net::SocketAddr,
        tokio::sync::mpsc::UnboundedReceiver<String>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (seen, requests) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    while let Ok(n) = conn.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let head = String::from_utf8_lossy(&buf[..n]);
                        let _ = seen.send(head.lines().next().unwrap_or_default().to_owned());
                        if conn.write_all(answer.as_bytes()).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (addr, requests)
    }

    fn client(url: &str, proxy: Option<std::net::SocketAddr>, refuse: bool) -> Client {
        let mut config = ClientConfig::new(Url::parse(url).expect("url"), "t");
        config.connect_to = proxy;
        config.read_retries = 0;
        config.refuse_address = refuse.then_some(refuse_local as fn(_) -> _);
        Client::new(config).expect("client")
    }

    #[tokio::test]
    async fn each_connection_is_refused_a_local_address_and_each_redirect_to_one() {
        const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        let (addr, mut seen) = answering(OK).await;
        // A name, resolved at connection time: it is what the operator would reach.
        let url = format!("http://localhost:{}", addr.port());
        client(&url, None, false)
            .ready()
            .await
            .expect("reached unguarded");
        let refused = client(&url, None, true)
            .ready()
            .await
            .expect_err("refused")
            .to_string();
        assert!(
            refused.contains("localhost resolves to the loopback address"),
            "{refused}"
        );
        seen.recv().await.expect("the unguarded request");
        assert!(seen.try_recv().is_err(), "the guarded client connected");

        // Behind a proxy (how tests reach sbsim on loopback) the proxy's own address is
        // not judged, but a redirect to a local address is.
        const AWAY: &str = "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://169.254.169.254/latest\r\ncontent-length: 0\r\n\r\n";
        let (proxy, mut seen) = answering(AWAY).await;
        let refused = client("http://cp.example:5000", Some(proxy), true)
            .ready()
            .await
            .expect_err("refused")
            .to_string();
        assert!(
            refused.contains("a redirect to the link-local address 169.254.169.254"),
            "{refused}"
        );
        let first = seen.recv().await.expect("the first request");
        assert!(first.contains("http://cp.example:5000/"), "{first}");
        assert!(seen.try_recv().is_err(), "the redirect was followed");
    }

    #[tokio::test]
    async fn a_local_endpoint_is_refused_in_every_spelling_and_by_what_it_resolves_to() {
        for (endpoint, shown) in [
            ("https://2130706433/", "loopback address (127.0.0.1)"),
            ("https://0x7f000001:8443", "loopback address (127.0.0.1)"),
            ("https://127.1", "loopback address (127.0.0.1)"),
            (
                "https://[::ffff:127.0.0.1]/",
                "loopback address ([::ffff:7f00:1])",
            ),
            ("https://[::ffff:169.254.169.254]", "link-local address"),
            ("https://localhost./", "loopback address (localhost.)"),
            ("http://0/", "unspecified address (0.0.0.0)"),
        ] {
            for resolve in [false, true] {
                let why = local_endpoint(endpoint, resolve).await.expect(endpoint);
                assert!(
                    why.starts_with(&format!(
                        "spec.source.managed.endpoint {endpoint} is a {shown}"
                    )),
                    "{why}"
                );
            }
        }
        // A name is judged by every address it resolves to: one local one is enough.
        let ips = |list: &[&str]| {
            list.iter()
                .map(|a| a.parse().expect("ip"))
                .collect::<Vec<std::net::IpAddr>>()
                .into_iter()
        };
        let why = resolved_refusal("https://cp.example", ips(&["10.0.0.1", "::ffff:127.0.0.2"]))
            .expect("refused");
        assert!(
            why.contains("resolves to the loopback address ::ffff:127.0.0.2"),
            "{why}"
        );
        let why = resolved_refusal("https://cp.example", ips(&["169.254.169.254"]));
        assert!(why.is_some_and(|w| w.contains("link-local")));
        assert_eq!(
            resolved_refusal("https://cp.example", ips(&["10.0.0.1", "2001:db8::1"])),
            None
        );
        for fine in [
            "https://cp.example.com",
            "https://10.1.2.3:5000",
            "https://[2001:db8::1]",
        ] {
            assert_eq!(local_endpoint(fine, false).await, None, "{fine}");
        }
        assert_eq!(local_endpoint("https://10.1.2.3:5000", true).await, None);
    }
}

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
use crate::context::Context;
use crate::kit::Error;
use crate::link::Reach;

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
    let token = match &managed.credentials_secret_ref {
        None => match ctx.access.token.read() {
            Ok(t) => t,
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

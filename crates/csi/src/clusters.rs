//! The CSI secret (`simplyblock-csi-secret-v2`, key `secret.json`, as
//! [`simplyblock_api::csi_secret`] defines it) and one control-plane client per cluster it
//! names, reached with the TLS material the SimplyblockDriver mounts ([`Transport`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use simplyblock_api::csi_secret;
use simplyblock_controlplane::{Client, ClientConfig, TlsConfig, Url};
use uuid::Uuid;

use crate::error::{CsiError, Result};
use crate::handle::PoolRef;

/// Install ring as the process-wide rustls provider (the control-plane client asks for
/// the default).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Where the secret is mounted by default.
pub const DEFAULT_SECRET_PATH: &str = "/etc/spdkcsi-secret/secret.json";

/// How the driver reaches the control planes, as `SB_TLS_CONNECT` (the SimplyblockDriver's
/// `spec.tls`) says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsConnect {
    /// Any endpoint: `http://` in plain, `https://` verified as [`Transport`] says.
    #[default]
    Disabled,
    /// TLS only: a plain `http://` endpoint is refused, since its bearer would travel in
    /// cleartext.
    Anonymous,
    /// TLS only, presenting a client certificate (the control plane requires one).
    Authenticated,
}

impl TlsConnect {
    fn name(self) -> &'static str {
        match self {
            TlsConnect::Disabled => "disabled",
            TlsConnect::Anonymous => "anonymous",
            TlsConnect::Authenticated => "authenticated",
        }
    }
}

/// The TLS material and the route to the control planes. The files are read at start and
/// again whenever one of them changes (kubelet swaps a mounted Secret's files by a link).
///
/// An `https://` endpoint is verified against `ca_file` when given, else against the
/// system's CA store (a control plane with a publicly trusted certificate); the certificate
/// must name the endpoint's host.
#[derive(Debug, Clone, Default)]
pub struct Transport {
    pub tls: TlsConnect,
    /// PEM bundle of the CAs that sign the control planes' certificates.
    pub ca_file: Option<PathBuf>,
    /// PEM certificate chain presented to the control plane (mutual TLS), with its key.
    pub client_cert_file: Option<PathBuf>,
    pub client_key_file: Option<PathBuf>,
    /// Connect through this address, as an HTTP proxy (a `CONNECT` tunnel for https),
    /// instead of resolving the endpoint's host. The URL, and so the name the server's
    /// certificate is checked against, stay the endpoint's: for a driver outside the
    /// cluster whose control plane is known by its in-cluster Service name.
    pub proxy: Option<SocketAddr>,
}

/// What [`Transport`]'s files held when last read.
#[derive(Default)]
struct Material {
    tls: TlsConnect,
    ca_pem: Vec<u8>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
    proxy: Option<SocketAddr>,
}

impl Transport {
    fn files(&self) -> [Option<&Path>; 3] {
        [
            self.ca_file.as_deref(),
            self.client_cert_file.as_deref(),
            self.client_key_file.as_deref(),
        ]
    }

    fn read(&self) -> Result<Material> {
        let read = |path: &Path, what: &str, fix: &str| {
            std::fs::read(path).map_err(|e| {
                CsiError::FailedPrecondition(format!(
                    "cannot read the {what} {}: {e}; {fix}",
                    path.display()
                ))
            })
        };
        let ca_pem = match &self.ca_file {
            None => Vec::new(),
            Some(path) => {
                let pem = read(
                    path,
                    "CA file",
                    "mount the control plane's CA there (the SimplyblockDriver does with spec.tls.enableTLS) or leave out --ca-file to trust the system's CA store",
                )?;
                if CertificateDer::pem_slice_iter(&pem).next().is_none() {
                    return Err(CsiError::FailedPrecondition(format!(
                        "the CA file {} holds no PEM certificate; it must hold the CA that signs the control plane's certificate",
                        path.display()
                    )));
                }
                pem
            }
        };
        let identity = match (&self.client_cert_file, &self.client_key_file) {
            (None, None) => None,
            (Some(cert), Some(key)) => {
                let fix = "mount the driver's client certificate there (the SimplyblockDriver does with spec.tls.enableMutualTLS)";
                Some((
                    read(cert, "client certificate file", fix)?,
                    read(key, "client key file", fix)?,
                ))
            }
            _ => {
                return Err(CsiError::InvalidArgument(
                    "a client certificate needs both --client-cert-file and --client-key-file"
                        .into(),
                ));
            }
        };
        if self.tls == TlsConnect::Authenticated && identity.is_none() {
            return Err(CsiError::FailedPrecondition(
                "SB_TLS_CONNECT is authenticated (the SimplyblockDriver's spec.tls.enableMutualTLS): the control plane takes only callers with a client certificate, and none was given; pass --client-cert-file and --client-key-file".into(),
            ));
        }
        Ok(Material {
            tls: self.tls,
            ca_pem,
            identity,
            proxy: self.proxy,
        })
    }
}

/// One cluster of the secret, as the driver serves it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterEntry {
    pub cluster_id: Uuid,
    pub cluster_endpoint: String,
    pub cluster_secret: String,
    /// Marks the site's own clusters (replication picks the local member by it).
    pub local: bool,
}

impl std::fmt::Debug for ClusterEntry {
    // The secret never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterEntry")
            .field("cluster_id", &self.cluster_id)
            .field("cluster_endpoint", &self.cluster_endpoint)
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

/// Parse `secret.json`, whose format [`simplyblock_api::csi_secret`] defines.
pub fn parse_secret(text: &str) -> Result<Vec<ClusterEntry>> {
    let contents = csi_secret::decode(text.as_bytes())
        .map_err(|e| CsiError::InvalidArgument(e.to_string()))?;
    contents
        .clusters
        .iter()
        .map(|c| {
            let cluster_id = Uuid::parse_str(c.cluster_id.trim()).map_err(|_| {
                CsiError::InvalidArgument(format!(
                    "the CSI secret names cluster {:?}, which is not a cluster UUID",
                    c.cluster_id
                ))
            })?;
            if c.cluster_endpoint.trim().is_empty() {
                return Err(CsiError::InvalidArgument(format!(
                    "the CSI secret gives cluster {cluster_id} no cluster_endpoint"
                )));
            }
            Ok(ClusterEntry {
                cluster_id,
                cluster_endpoint: c.cluster_endpoint.clone(),
                cluster_secret: c.cluster_secret.clone(),
                local: contents.local.contains(&c.cluster_id),
            })
        })
        .collect()
}

/// Clients for every cluster the driver may serve.
///
/// Built from the secret file, it follows the file: kubelet updates a mounted Secret by
/// swapping a symlink, so each use compares the identity of the file (and of the token
/// file) with what was last read and reads them again when it changed. Content that does
/// not parse is logged and the last good list kept: one bad edit must not cut every
/// volume off from its cluster.
#[derive(Debug, Default)]
pub struct Clusters {
    served: RwLock<Arc<Served>>,
    source: Option<Source>,
}

#[derive(Debug, Default)]
struct Served {
    clients: BTreeMap<Uuid, Arc<Client>>,
    /// The clusters the secret marks as this site's own.
    local: Vec<Uuid>,
}

/// Where the served list comes from, when it comes from files.
#[derive(Debug)]
struct Source {
    secret: PathBuf,
    token_file: Option<PathBuf>,
    /// A cluster given on the command line, served whatever the file says.
    extra: Option<ClusterEntry>,
    transport: Transport,
    seen: Mutex<Vec<Option<Stamp>>>,
}

/// What tells one version of a file from the next without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

impl Stamp {
    /// Of the file a path leads to now (links followed, as kubelet's swap needs).
    fn of(path: &Path) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
        })
    }
}

impl Served {
    fn new(entries: &[ClusterEntry], token: Option<&str>, material: &Material) -> Result<Self> {
        let mut out = Served::default();
        for e in entries {
            let bearer = match token.filter(|t| !t.trim().is_empty()) {
                Some(t) => t.trim().to_string(),
                None => e.cluster_secret.clone(),
            };
            if bearer.is_empty() {
                return Err(CsiError::InvalidArgument(format!(
                    "cluster {} has no credential: set cluster_secret in the CSI secret or give an API token file",
                    e.cluster_id
                )));
            }
            let url = Url::parse(&e.cluster_endpoint).map_err(|err| {
                CsiError::InvalidArgument(format!(
                    "cluster {}: endpoint {:?} is not a URL: {err}",
                    e.cluster_id, e.cluster_endpoint
                ))
            })?;
            let mut cfg = ClientConfig::new(url.clone(), bearer);
            cfg.timeout = Duration::from_secs(60);
            cfg.connect_to = material.proxy;
            match url.scheme() {
                "https" => {
                    cfg.tls = Some(TlsConfig {
                        ca_pem: material.ca_pem.clone(),
                        client_identity: material.identity.clone(),
                        server_name: None,
                    });
                }
                "http" if material.tls != TlsConnect::Disabled => {
                    return Err(CsiError::FailedPrecondition(format!(
                        "cluster {}: the CSI secret gives the plain-HTTP endpoint {}, but this driver reaches control planes over TLS only (SB_TLS_CONNECT={}, from the SimplyblockDriver's spec.tls.enableTLS): the cluster's secret would travel in cleartext; serve the control plane over TLS so that its endpoint is https://, or set spec.tls.enableTLS to false for a control plane on a trusted network",
                        e.cluster_id,
                        e.cluster_endpoint,
                        material.tls.name()
                    )));
                }
                "http" => {}
                other => {
                    return Err(CsiError::InvalidArgument(format!(
                        "cluster {}: endpoint {:?} is {other}://, neither http:// nor https://",
                        e.cluster_id, e.cluster_endpoint
                    )));
                }
            }
            let client = Client::new(cfg).map_err(|err| {
                CsiError::FailedPrecondition(format!(
                    "cluster {} at {}: {err}",
                    e.cluster_id, e.cluster_endpoint
                ))
            })?;
            out.clients.insert(e.cluster_id, Arc::new(client));
            if e.local {
                out.local.push(e.cluster_id);
            }
        }
        out.local.sort();
        out.local.dedup();
        Ok(out)
    }
}

impl Source {
    /// Read the token and the secret and build their clients.
    fn read(&self) -> Result<Served> {
        let token = match &self.token_file {
            Some(p) => Some(std::fs::read_to_string(p).map_err(|e| {
                CsiError::FailedPrecondition(format!(
                    "cannot read the API token file {}: {e}; mount the token there or leave out --api-token-file",
                    p.display()
                ))
            })?),
            None => None,
        };
        let mut entries = match std::fs::read_to_string(&self.secret) {
            Ok(text) => parse_secret(&text)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && self.extra.is_some() => {
                Vec::new()
            }
            Err(e) => {
                return Err(CsiError::FailedPrecondition(format!(
                    "cannot read the CSI secret {}: {e}; mount Secret {} there or pass --cluster-id and --cluster-endpoint",
                    self.secret.display(),
                    csi_secret::NAME
                )));
            }
        };
        if let Some(x) = &self.extra {
            entries.retain(|e| e.cluster_id != x.cluster_id);
            entries.push(x.clone());
        }
        let material = self.transport.read()?;
        Served::new(&entries, token.as_deref(), &material)
    }

    /// Of the secret, the token file and the TLS files, in that order.
    fn stamps(&self) -> Vec<Option<Stamp>> {
        let mut out = vec![
            Stamp::of(&self.secret),
            self.token_file.as_deref().and_then(Stamp::of),
        ];
        out.extend(
            self.transport
                .files()
                .into_iter()
                .map(|f| f.and_then(Stamp::of)),
        );
        out
    }
}

impl Clusters {
    /// Serve these entries, for good; a non-empty `token` (a service-account token)
    /// replaces every entry's `cluster_secret` as the bearer. An `https://` endpoint is
    /// verified against the system's CA store.
    pub fn new(entries: &[ClusterEntry], token: Option<&str>) -> Result<Self> {
        Ok(Clusters {
            served: RwLock::new(Arc::new(Served::new(entries, token, &Material::default())?)),
            source: None,
        })
    }

    /// Serve the secret file (and the optional token file), reached as `transport` says,
    /// following changes of every file, plus `extra`, a cluster given on the command line.
    /// With `extra`, a missing secret file serves that cluster alone. An unreadable or
    /// malformed file, or an endpoint the transport refuses, is an error here, at start,
    /// and only logged later.
    pub fn from_files(
        secret: &Path,
        token_file: Option<&Path>,
        extra: Option<ClusterEntry>,
        transport: Transport,
    ) -> Result<Self> {
        let source = Source {
            secret: secret.to_path_buf(),
            token_file: token_file.map(Path::to_path_buf),
            extra,
            transport,
            seen: Mutex::new(Vec::new()),
        };
        let stamps = source.stamps();
        let served = source.read()?;
        *lock(&source.seen) = stamps;
        Ok(Clusters {
            served: RwLock::new(Arc::new(served)),
            source: Some(source),
        })
    }

    /// The list to serve this call: the files' current one if they changed and parse,
    /// else the last good one.
    fn current(&self) -> Arc<Served> {
        if let Some(src) = &self.source {
            let mut seen = lock(&src.seen);
            let now = src.stamps();
            if *seen != now {
                // Recorded first, so a bad version is logged once, not on every call.
                *seen = now;
                match src.read() {
                    Ok(served) => {
                        tracing::info!(
                            secret = %src.secret.display(),
                            clusters = served.clients.len(),
                            "the CSI secret or the TLS material changed; serving its clusters"
                        );
                        *self.served.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(served);
                    }
                    Err(e) => tracing::error!(
                        secret = %src.secret.display(),
                        error = %e,
                        "the CSI secret or the TLS material changed but cannot be used; still serving the clusters as before"
                    ),
                }
            }
        }
        self.served
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The client of `cluster`, which the call being served names ([`crate::metrics`]).
    pub fn client(&self, cluster: Uuid) -> Result<Arc<Client>> {
        crate::metrics::note_cluster(cluster);
        self.current()
            .clients
            .get(&cluster)
            .cloned()
            .ok_or_else(|| CsiError::UnknownCluster(cluster.to_string()))
    }

    /// Every cluster served: the call being served goes over them all and is labelled
    /// with none ([`crate::metrics`]).
    pub fn ids(&self) -> Vec<Uuid> {
        crate::metrics::note_every_cluster();
        self.current().clients.keys().copied().collect()
    }

    /// The clusters the secret marks as this site's own, sorted; empty when the operator
    /// that wrote the secret marks none.
    pub fn local_ids(&self) -> Vec<Uuid> {
        self.current().local.clone()
    }

    pub fn is_empty(&self) -> bool {
        self.current().clients.is_empty()
    }

    /// The pool's UUID; a name (legacy handles, StorageClass `pool_name`) is looked up.
    pub async fn pool_id(&self, cluster: Uuid, pool: &PoolRef) -> Result<Uuid> {
        match pool {
            PoolRef::Id(id) => Ok(*id),
            PoolRef::Name(name) => {
                let c = self.client(cluster)?;
                c.find_pool(cluster, name)
                    .await?
                    .map(|p| p.id)
                    .ok_or_else(|| {
                        CsiError::NotFound(format!("pool {name:?} in cluster {cluster}"))
                    })
            }
        }
    }
}

/// A poisoned lock only means a reload panicked; the stamps it guards are still whole.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_parses_and_builds_clients() {
        let text = r#"{"clusters":[{"cluster_id":"11111111-1111-4111-8111-111111111111",
            "cluster_endpoint":"http://cp:5000","cluster_secret":"s3cret"}]}"#;
        let entries = parse_secret(text).expect("parse");
        assert_eq!(entries.len(), 1);
        assert!(!entries[0].local);
        let c = Clusters::new(&entries, None).expect("clients");
        assert!(c.client(entries[0].cluster_id).is_ok());
        let other = Uuid::from_u128(7);
        let e = c.client(other).expect_err("unknown");
        assert!(e.to_string().contains("simplyblock-csi-secret-v2"), "{e}");
    }

    #[test]
    fn missing_endpoint_or_credential_is_an_error() {
        let no_ep = r#"{"clusters":[{"cluster_id":"11111111-1111-4111-8111-111111111111","cluster_endpoint":""}]}"#;
        assert!(parse_secret(no_ep).is_err());
        let no_secret = r#"{"clusters":[{"cluster_id":"11111111-1111-4111-8111-111111111111","cluster_endpoint":"http://cp"}]}"#;
        let entries = parse_secret(no_secret).expect("parse");
        assert!(Clusters::new(&entries, None).is_err());
        assert!(Clusters::new(&entries, Some("token\n")).is_ok());
        assert!(parse_secret("not json").is_err());
        let not_a_uuid = r#"{"clusters":[{"cluster_id":"prod","cluster_endpoint":"http://cp"}]}"#;
        let e = parse_secret(not_a_uuid).expect_err("not a UUID");
        assert!(e.to_string().contains("\"prod\""), "{e}");
    }

    #[test]
    fn a_changed_secret_is_served_and_a_malformed_one_is_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("secret.json");
        // A new file renamed over the old, as kubelet's link swap presents an update.
        let replace = |text: &str| {
            let tmp = dir.path().join("next");
            std::fs::write(&tmp, text).expect("write");
            std::fs::rename(&tmp, &path).expect("rename");
        };
        let naming = |id: &str| {
            format!(
                r#"{{"clusters":[{{"cluster_id":"{id}","cluster_endpoint":"http://cp:5000","cluster_secret":"s"}}]}}"#
            )
        };
        let a = "11111111-1111-4111-8111-111111111111";
        let b = "22222222-2222-4222-8222-222222222222";
        replace(&naming(a));
        let c = Clusters::from_files(&path, None, None, Transport::default()).expect("start");
        let ids = || c.ids().iter().map(Uuid::to_string).collect::<Vec<_>>();
        assert_eq!(ids(), [a]);
        replace("{\"clusters\": [");
        assert_eq!(ids(), [a], "the last good list is kept");
        replace(&naming(b));
        assert_eq!(ids(), [b], "the new secret is served");
        std::fs::remove_file(&path).expect("remove");
        assert_eq!(ids(), [b], "a vanished secret is not an empty one");

        // At start, what cannot be read or used stops the driver.
        let missing = dir.path().join("missing");
        assert!(Clusters::from_files(&missing, None, None, Transport::default()).is_err());
        replace(&naming(a));
        let e = Clusters::from_files(&path, Some(&missing), None, Transport::default())
            .expect_err("token file");
        assert!(e.to_string().contains("API token file"), "{e}");
        replace("not json");
        assert!(Clusters::from_files(&path, None, None, Transport::default()).is_err());
    }

    /// A file renamed over `path`, as kubelet's link swap presents an update.
    fn replace(path: &Path, text: &str) {
        let tmp = path.with_extension("next");
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, path).expect("rename");
    }

    fn secret_for(id: &str, endpoint: &str) -> String {
        format!(
            r#"{{"clusters":[{{"cluster_id":"{id}","cluster_endpoint":"{endpoint}","cluster_secret":"s"}}]}}"#
        )
    }

    #[test]
    fn a_plain_http_endpoint_is_refused_when_tls_is_asked_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("secret.json");
        let a = "11111111-1111-4111-8111-111111111111";
        replace(&path, &secret_for(a, "http://cp:5000"));
        for tls in [TlsConnect::Anonymous, TlsConnect::Authenticated] {
            let ca = dir.path().join("ca.crt");
            let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
            let authority = simplyblock_certs::Authority::new("test CA").expect("CA");
            let pair = authority.client("simplyblock-csi", None).expect("client");
            replace(&ca, &authority.cert_pem());
            replace(&cert, &pair.cert);
            replace(&key, &pair.key);
            let transport = Transport {
                tls,
                ca_file: Some(ca),
                client_cert_file: Some(cert),
                client_key_file: Some(key),
                proxy: None,
            };
            let e = Clusters::from_files(&path, None, None, transport).expect_err("plain HTTP");
            let text = e.to_string();
            for said in [
                "plain-HTTP endpoint http://cp:5000",
                &format!("SB_TLS_CONNECT={}", tls.name()),
                "cleartext",
                "spec.tls.enableTLS",
            ] {
                assert!(text.contains(said), "{said:?} missing from: {text}");
            }
        }
        // Without TLS asked for, a plain endpoint is served as ever.
        assert!(Clusters::from_files(&path, None, None, Transport::default()).is_ok());
    }

    #[test]
    fn tls_material_that_cannot_be_used_stops_the_driver_at_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("secret.json");
        replace(
            &path,
            &secret_for("11111111-1111-4111-8111-111111111111", "https://cp:5000"),
        );
        let start = |transport: Transport| {
            Clusters::from_files(&path, None, None, transport)
                .expect_err("refused")
                .to_string()
        };
        let missing = dir.path().join("missing.crt");
        let e = start(Transport {
            ca_file: Some(missing.clone()),
            ..Transport::default()
        });
        assert!(
            e.contains("cannot read the CA file") && e.contains("missing.crt"),
            "{e}"
        );
        let garbage = dir.path().join("garbage.crt");
        replace(&garbage, "not a certificate");
        let e = start(Transport {
            ca_file: Some(garbage),
            ..Transport::default()
        });
        assert!(e.contains("holds no PEM certificate"), "{e}");
        let e = start(Transport {
            tls: TlsConnect::Authenticated,
            ..Transport::default()
        });
        assert!(
            e.contains("SB_TLS_CONNECT is authenticated") && e.contains("--client-cert-file"),
            "{e}"
        );
        let e = start(Transport {
            client_cert_file: Some(missing.clone()),
            client_key_file: Some(missing),
            ..Transport::default()
        });
        assert!(e.contains("cannot read the client certificate file"), "{e}");
    }

    #[test]
    fn a_changed_ca_file_is_read_again_and_a_bad_one_is_not_served() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("secret.json");
        let ca = dir.path().join("ca.crt");
        let a = "11111111-1111-4111-8111-111111111111";
        let b = "22222222-2222-4222-8222-222222222222";
        let authority = |name: &str| {
            simplyblock_certs::Authority::new(name)
                .expect("CA")
                .cert_pem()
        };
        replace(&path, &secret_for(a, "https://cp:5000"));
        replace(&ca, &authority("first CA"));
        let transport = Transport {
            ca_file: Some(ca.clone()),
            ..Transport::default()
        };
        let c = Clusters::from_files(&path, None, None, transport).expect("start");
        let ids = || c.ids().iter().map(Uuid::to_string).collect::<Vec<_>>();
        assert_eq!(ids(), [a]);
        // A CA that cannot be used holds back the secret's change too: nothing is served
        // with trust the driver could not read.
        replace(&ca, "not a certificate");
        replace(&path, &secret_for(b, "https://cp:5000"));
        assert_eq!(ids(), [a], "the last good list is kept");
        // The CA alone changes: the files are read again and the secret's change served.
        replace(&ca, &authority("second CA"));
        assert_eq!(ids(), [b]);
    }

    #[test]
    fn the_driver_reads_exactly_what_the_operator_writes() {
        let a = "11111111-1111-4111-8111-111111111111";
        let b = "22222222-2222-4222-8222-222222222222";
        let written = csi_secret::Contents {
            clusters: vec![
                csi_secret::Entry {
                    cluster_id: a.into(),
                    cluster_endpoint: "http://cp-a:5000".into(),
                    cluster_secret: "secret-a".into(),
                    extra: Default::default(),
                },
                csi_secret::Entry {
                    cluster_id: b.into(),
                    cluster_endpoint: "https://cp-b".into(),
                    cluster_secret: "secret-b".into(),
                    extra: Default::default(),
                },
            ],
            local: [b.to_string()].into(),
            extra: Default::default(),
        };
        // The bytes the operator stores under the Secret's key, as the driver's mount
        // shows them.
        let data = csi_secret::secret_data(&written);
        let text = String::from_utf8(data[csi_secret::KEY].0.clone()).expect("utf-8");
        let read = parse_secret(&text).expect("the driver reads it");
        let served = Clusters::new(&read, None).expect("clients");
        assert_eq!(served.local_ids(), vec![Uuid::parse_str(b).expect("b")]);
        assert_eq!(
            read,
            vec![
                ClusterEntry {
                    cluster_id: Uuid::parse_str(a).expect("a"),
                    cluster_endpoint: "http://cp-a:5000".into(),
                    cluster_secret: "secret-a".into(),
                    local: false,
                },
                ClusterEntry {
                    cluster_id: Uuid::parse_str(b).expect("b"),
                    cluster_endpoint: "https://cp-b".into(),
                    cluster_secret: "secret-b".into(),
                    local: true,
                },
            ]
        );
    }
}

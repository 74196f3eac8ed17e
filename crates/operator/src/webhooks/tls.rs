//! The webhook server's TLS: a serving certificate issued from the operator's own CA and
//! replaced before it expires, without dropping connections or restarting the listener.

use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use simplyblock_certs::Authority;

use crate::runtime::error::ServerError as Error;

/// The serving certificate in use and the means to replace it.
pub struct ServingCertificates {
    authority: RwLock<Authority>,
    bundle: RwLock<String>,
    dns: Vec<String>,
    ips: Vec<IpAddr>,
    validity: Duration,
    current: RwLock<Arc<CertifiedKey>>,
}

impl std::fmt::Debug for ServingCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCertificates")
            .field("dns", &self.dns)
            .field("ips", &self.ips)
            .finish_non_exhaustive()
    }
}

impl ServingCertificates {
    /// Issues a first certificate for these names, valid for `validity`; the API server
    /// trusts `authority` alone.
    pub fn new(
        authority: Authority,
        dns: Vec<String>,
        ips: Vec<IpAddr>,
        validity: Duration,
    ) -> Result<Arc<Self>, Error> {
        let bundle = authority.cert_pem();
        Self::with_bundle(authority, bundle, dns, ips, validity)
    }

    /// As [`ServingCertificates::new`], with the API server trusting `bundle` (the CA and
    /// a previous one still in force).
    pub fn with_bundle(
        authority: Authority,
        bundle: String,
        dns: Vec<String>,
        ips: Vec<IpAddr>,
        validity: Duration,
    ) -> Result<Arc<Self>, Error> {
        let first = issue(&authority, &dns, &ips, validity)?;
        Ok(Arc::new(ServingCertificates {
            bundle: RwLock::new(bundle),
            authority: RwLock::new(authority),
            dns,
            ips,
            validity,
            current: RwLock::new(first),
        }))
    }

    /// The CAs the API server must trust: the webhook configurations' caBundle.
    pub fn ca_bundle(&self) -> String {
        match self.bundle.read() {
            Ok(b) => b.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Issues from `authority` from now on, trusted through `bundle` (which the caller has
    /// published to the API server first), and replaces the serving certificate with one
    /// of the new CA's.
    pub fn replace_authority(&self, authority: Authority, bundle: String) -> Result<(), Error> {
        match self.authority.write() {
            Ok(mut a) => *a = authority,
            Err(poisoned) => *poisoned.into_inner() = authority,
        }
        match self.bundle.write() {
            Ok(mut b) => *b = bundle,
            Err(poisoned) => *poisoned.into_inner() = bundle,
        }
        self.rotate()
    }

    /// Replaces the serving certificate; new handshakes use the new one.
    pub fn rotate(&self) -> Result<(), Error> {
        let next = {
            let authority = match self.authority.read() {
                Ok(a) => a,
                Err(poisoned) => poisoned.into_inner(),
            };
            issue(&authority, &self.dns, &self.ips, self.validity)?
        };
        match self.current.write() {
            Ok(mut current) => *current = next,
            Err(poisoned) => *poisoned.into_inner() = next,
        }
        Ok(())
    }

    /// The serial of the certificate in use, to tell rotations apart.
    pub fn current_der(&self) -> Vec<u8> {
        let current = match self.current.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        current.cert.first().map(|c| c.to_vec()).unwrap_or_default()
    }

    /// Rotates at a third of the validity, so a missed round or two still leaves a valid
    /// certificate.
    pub async fn rotate_forever(self: Arc<Self>) {
        let period = (self.validity / 3).max(Duration::from_secs(1));
        loop {
            tokio::time::sleep(period).await;
            if let Err(e) = self.rotate() {
                tracing::error!(error = %e, "rotating the webhook serving certificate failed; the current one stays in use");
            } else {
                tracing::info!("rotated the webhook serving certificate");
            }
        }
    }

    pub fn server_config(self: &Arc<Self>) -> Arc<rustls::ServerConfig> {
        self.server_config_verifying(None)
    }

    /// As [`ServingCertificates::server_config`], checking the client certificates
    /// `clients` asks for (`None`: asking for none).
    pub fn server_config_verifying(
        self: &Arc<Self>,
        clients: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    ) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap_or_else(|_| {
                rustls::ServerConfig::builder_with_protocol_versions(rustls::DEFAULT_VERSIONS)
            });
        let builder = match clients {
            Some(verifier) => builder.with_client_cert_verifier(verifier),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(Arc::new(Resolver(self.clone())));
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

#[derive(Debug)]
struct Resolver(Arc<ServingCertificates>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        match self.0.current.read() {
            Ok(c) => Some(c.clone()),
            Err(poisoned) => Some(poisoned.into_inner().clone()),
        }
    }
}

fn issue(
    authority: &Authority,
    dns: &[String],
    ips: &[IpAddr],
    validity: Duration,
) -> Result<Arc<CertifiedKey>, Error> {
    let until = jiff::Timestamp::now()
        .as_second()
        .saturating_add(i64::try_from(validity.as_secs()).unwrap_or(i64::MAX / 2));
    let names: Vec<&str> = dns.iter().map(String::as_str).collect();
    let pair = authority
        .serving_until("simplyblock-operator-webhook", &names, ips, Some(until))
        .map_err(|e| Error::Tls(e.to_string()))?;
    let cert = CertificateDer::from_pem_slice(pair.cert.as_bytes())
        .map_err(|e| Error::Tls(format!("the issued certificate does not parse: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(pair.key.as_bytes())
        .map_err(|e| Error::Tls(format!("the issued key does not parse: {e}")))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| Error::Tls(format!("the issued key cannot sign: {e}")))?;
    Ok(Arc::new(CertifiedKey::new(vec![cert], signer)))
}

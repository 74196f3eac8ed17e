//! rustls client configuration (ring provider only) for the control plane and the
//! storage-node API: a CA bundle, an optional client certificate (mTLS) and an optional
//! pinned server name, as the operator uses (`simplyblock-webappapi.<ns>.svc`).

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use crate::error::{Error, Result};

/// TLS material for a client.
#[derive(Clone, Default)]
pub struct TlsConfig {
    /// PEM bundle of the CAs that sign the server certificate; empty: the system's CA
    /// store (a control plane with a publicly trusted certificate).
    pub ca_pem: Vec<u8>,
    /// PEM certificate chain and PEM private key presented to the server (mTLS).
    pub client_identity: Option<(Vec<u8>, Vec<u8>)>,
    /// Verify the server certificate against this name instead of the URL's host.
    pub server_name: Option<String>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The private key stays out of logs.
        f.debug_struct("TlsConfig")
            .field("ca_pem_bytes", &self.ca_pem.len())
            .field("client_identity", &self.client_identity.is_some())
            .field("server_name", &self.server_name)
            .finish()
    }
}

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Build the rustls config; with `None` the result carries no roots and serves plain HTTP only.
pub(crate) fn client_config(tls: Option<&TlsConfig>) -> Result<rustls::ClientConfig> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| Error::Config(format!("TLS versions: {e}")))?;
    let mut roots = rustls::RootCertStore::empty();
    let Some(tls) = tls else {
        return Ok(builder.with_root_certificates(roots).with_no_client_auth());
    };
    if tls.ca_pem.is_empty() {
        // Certificates of the store that do not parse are skipped, as a browser would.
        let found = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(found.certs);
        if roots.is_empty() {
            return Err(Error::Config(format!(
                "no CA bundle was given and the system's CA store holds no usable certificate ({} error(s) reading it)",
                found.errors.len()
            )));
        }
    } else {
        for cert in CertificateDer::pem_slice_iter(&tls.ca_pem) {
            let cert = cert.map_err(|e| Error::Config(format!("CA bundle is not PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| Error::Config(format!("CA certificate rejected: {e}")))?;
        }
        if roots.is_empty() {
            return Err(Error::Config("the CA bundle holds no certificate".into()));
        }
    }
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| Error::Config(format!("CA bundle unusable: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match &tls.server_name {
        Some(name) => Arc::new(PinnedName {
            inner: webpki,
            name: ServerName::try_from(name.clone())
                .map_err(|e| Error::Config(format!("server name {name:?}: {e}")))?,
        }),
        None => webpki,
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match &tls.client_identity {
        None => Ok(builder.with_no_client_auth()),
        Some((chain, key)) => {
            let chain = CertificateDer::pem_slice_iter(chain)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| Error::Config(format!("client certificate is not PEM: {e}")))?;
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| Error::Config(format!("client key is not PEM: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| Error::Config(format!("client certificate rejected: {e}")))
        }
    }
}

/// Full WebPKI verification, but against a fixed name (the service DNS name) rather than
/// whatever host the URL used.
#[derive(Debug)]
struct PinnedName {
    inner: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for PinnedName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

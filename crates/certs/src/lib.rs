//! A small certificate authority for things that talk TLS on their own terms: the test
//! API server, and the operator's webhook server, which issues its serving certificate
//! from a CA of its own and hands that CA to the API server as the caBundle.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

#[derive(Debug, thiserror::Error)]
#[error("generating a certificate failed: {0}")]
pub struct Error(String);

fn err(e: rcgen::Error) -> Error {
    Error(e.to_string())
}

/// A PEM certificate with its PEM (PKCS#8) private key.
#[derive(Clone)]
pub struct Pair {
    pub cert: String,
    pub key: String,
}

impl std::fmt::Debug for Pair {
    // The key never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pair")
            .field("key", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// A CA that issues certificates.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    key_pem: String,
}

impl Authority {
    /// A new self-signed CA.
    pub fn new(common_name: &str) -> Result<Authority, Error> {
        let key = KeyPair::generate().map_err(err)?;
        let key_pem = key.serialize_pem();
        let params = ca_params(common_name);
        let cert_pem = params.self_signed(&key).map_err(err)?.pem();
        Ok(Authority {
            issuer: Issuer::new(params, key),
            cert_pem,
            key_pem,
        })
    }

    /// A new self-signed CA valid until `not_after` (seconds since the Unix epoch); its
    /// holder replaces it before then.
    pub fn new_until(common_name: &str, not_after: i64) -> Result<Authority, Error> {
        let key = KeyPair::generate().map_err(err)?;
        let key_pem = key.serialize_pem();
        let mut params = ca_params(common_name);
        params.not_after = time::OffsetDateTime::from_unix_timestamp(not_after)
            .map_err(|e| Error(format!("not_after is out of range: {e}")))?;
        let cert_pem = params.self_signed(&key).map_err(err)?.pem();
        Ok(Authority {
            issuer: Issuer::new(ca_params(common_name), key),
            cert_pem,
            key_pem,
        })
    }

    /// A CA stored earlier as [`Authority::pair`], under the common name it was made with.
    /// What it issues chains to the stored certificate: the issuer name is that common
    /// name, and the key identifier is derived from the key alone.
    pub fn from_pair(common_name: &str, pair: &Pair) -> Result<Authority, Error> {
        let key = KeyPair::from_pem(&pair.key)
            .map_err(|e| Error(format!("the stored CA key does not parse: {e}")))?;
        if !pair.cert.contains("-----BEGIN CERTIFICATE-----") {
            return Err(Error("the stored CA certificate is not PEM".into()));
        }
        Ok(Authority {
            issuer: Issuer::new(ca_params(common_name), key),
            cert_pem: pair.cert.clone(),
            key_pem: pair.key.clone(),
        })
    }

    /// The CA certificate and key.
    pub fn pair(&self) -> Pair {
        Pair {
            cert: self.cert_pem.clone(),
            key: self.key_pem.clone(),
        }
    }

    /// The CA certificate alone: what clients trust.
    pub fn cert_pem(&self) -> String {
        self.cert_pem.clone()
    }

    /// A server certificate for these DNS names and addresses.
    pub fn serving(&self, common_name: &str, dns: &[&str], ips: &[IpAddr]) -> Result<Pair, Error> {
        self.serving_until(common_name, dns, ips, None)
    }

    /// A server certificate valid until `not_after` (seconds since the Unix epoch); the
    /// holder replaces it before then.
    pub fn serving_until(
        &self,
        common_name: &str,
        dns: &[&str],
        ips: &[IpAddr],
        not_after: Option<i64>,
    ) -> Result<Pair, Error> {
        let names: Vec<String> = dns.iter().map(|d| d.to_string()).collect();
        let mut params = CertificateParams::new(names).map_err(err)?;
        if let Some(secs) = not_after {
            params.not_after = time::OffsetDateTime::from_unix_timestamp(secs)
                .map_err(|e| Error(format!("not_after is out of range: {e}")))?;
        }
        params
            .subject_alt_names
            .extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
        params.distinguished_name = name(common_name, None);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A certificate of a peer that serves these DNS names and also calls out with it (server
    /// and client auth), valid until `not_after` (seconds since the Unix epoch).
    pub fn peer_until(
        &self,
        common_name: &str,
        dns: &[&str],
        not_after: i64,
    ) -> Result<Pair, Error> {
        let names: Vec<String> = dns.iter().map(|d| d.to_string()).collect();
        let mut params = CertificateParams::new(names).map_err(err)?;
        params.not_after = time::OffsetDateTime::from_unix_timestamp(not_after)
            .map_err(|e| Error(format!("not_after is out of range: {e}")))?;
        params.distinguished_name = name(common_name, None);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        self.sign(params)
    }

    /// A peer certificate (server and client auth) for these DNS names, valid from
    /// `not_before` to `not_after` (seconds since the Unix epoch), issued to the public key
    /// of the PKCS#10 request `csr_der` (its signature checked; nothing else of it is
    /// taken: the names and usages are the caller's). The certificate in PEM.
    pub fn peer_for_request(
        &self,
        csr_der: &[u8],
        common_name: &str,
        dns: &[&str],
        not_before: i64,
        not_after: i64,
    ) -> Result<String, Error> {
        let request = rcgen::CertificateSigningRequestParams::from_der(
            &rustls_pki_types::CertificateSigningRequestDer::from(csr_der.to_vec()),
        )
        .map_err(err)?;
        let names: Vec<String> = dns.iter().map(|d| d.to_string()).collect();
        let mut params = CertificateParams::new(names).map_err(err)?;
        let at = |secs: i64| {
            time::OffsetDateTime::from_unix_timestamp(secs)
                .map_err(|e| Error(format!("a validity bound is out of range: {e}")))
        };
        params.not_before = at(not_before)?;
        params.not_after = at(not_after)?;
        params.distinguished_name = name(common_name, None);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let cert = params
            .signed_by(&request.public_key, &self.issuer)
            .map_err(err)?;
        Ok(cert.pem())
    }

    /// A server certificate for loopback: `localhost`, `127.0.0.1` and `::1`.
    pub fn loopback_serving(&self, common_name: &str) -> Result<Pair, Error> {
        self.serving(
            common_name,
            &["localhost"],
            &[
                IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
                IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
            ],
        )
    }

    /// A client certificate; Kubernetes reads the user from CN and the group from O.
    pub fn client(&self, user: &str, group: Option<&str>) -> Result<Pair, Error> {
        self.client_until(user, group, None)
    }

    /// A client certificate valid until `not_after` (seconds since the Unix epoch).
    pub fn client_until(
        &self,
        user: &str,
        group: Option<&str>,
        not_after: Option<i64>,
    ) -> Result<Pair, Error> {
        let mut params = CertificateParams::default();
        if let Some(secs) = not_after {
            params.not_after = time::OffsetDateTime::from_unix_timestamp(secs)
                .map_err(|e| Error(format!("not_after is out of range: {e}")))?;
        }
        params.distinguished_name = name(user, group);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, mut params: CertificateParams) -> Result<Pair, Error> {
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().map_err(err)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(err)?;
        Ok(Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

/// A new key and an empty PKCS#10 request of it, as a kubelet makes for a pod's
/// certificate: (private key PEM, request DER).
pub fn certificate_request() -> Result<(String, Vec<u8>), Error> {
    let key = KeyPair::generate().map_err(err)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    let request = params.serialize_request(&key).map_err(err)?;
    Ok((key.serialize_pem(), request.der().to_vec()))
}

/// A key pair alone, e.g. for signing service-account tokens: (private PEM, public PEM).
pub fn key_pair() -> Result<(String, String), Error> {
    let key = KeyPair::generate().map_err(err)?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = name(common_name, None);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(org) = organization {
        dn.push(DnType::OrganizationName, org);
    }
    dn
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

    /// What verifies a server's and a client's certificate against `ca` alone.
    fn verifiers(
        ca: &Authority,
    ) -> (
        std::sync::Arc<rustls::client::WebPkiServerVerifier>,
        std::sync::Arc<dyn rustls::server::danger::ClientCertVerifier>,
    ) {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).expect("ca pem"))
            .expect("root");
        let roots = std::sync::Arc::new(roots);
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let servers = rustls::client::WebPkiServerVerifier::builder_with_provider(
            roots.clone(),
            provider.clone(),
        )
        .build()
        .expect("server verifier");
        let clients = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider)
            .build()
            .expect("client verifier");
        (servers, clients)
    }

    #[test]
    fn a_serving_certificate_verifies_against_its_ca_for_its_names_only() {
        let ca = Authority::new("test-ca").expect("ca");
        let serving = ca.loopback_serving("server").expect("serving");
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).expect("ca pem"))
            .expect("root");
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            roots.into(),
            rustls::crypto::ring::default_provider().into(),
        )
        .build()
        .expect("verifier");
        let leaf = CertificateDer::from_pem_slice(serving.cert.as_bytes()).expect("leaf pem");
        let now = UnixTime::now();
        for name in ["localhost", "127.0.0.1"] {
            let server = ServerName::try_from(name).expect("name");
            verifier
                .verify_server_cert(&leaf, &[], &server, &[], now)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let other = ServerName::try_from("example.com").expect("name");
        assert!(
            verifier
                .verify_server_cert(&leaf, &[], &other, &[], now)
                .is_err()
        );

        let stranger = Authority::new("other-ca").expect("ca");
        let foreign = stranger.loopback_serving("server").expect("serving");
        let foreign = CertificateDer::from_pem_slice(foreign.cert.as_bytes()).expect("pem");
        let localhost = ServerName::try_from("localhost").expect("name");
        assert!(
            verifier
                .verify_server_cert(&foreign, &[], &localhost, &[], now)
                .is_err()
        );
    }

    #[test]
    fn a_stored_authority_issues_what_its_certificate_verifies() {
        let original = Authority::new("stored-ca").expect("ca");
        let reloaded = Authority::from_pair("stored-ca", &original.pair()).expect("reload");
        assert_eq!(reloaded.cert_pem(), original.cert_pem());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(original.cert_pem().as_bytes()).expect("ca pem"))
            .expect("root");
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            roots.into(),
            rustls::crypto::ring::default_provider().into(),
        )
        .build()
        .expect("verifier");
        let leaf = reloaded.loopback_serving("server").expect("serving");
        let leaf = CertificateDer::from_pem_slice(leaf.cert.as_bytes()).expect("leaf pem");
        let localhost = ServerName::try_from("localhost").expect("name");
        verifier
            .verify_server_cert(&leaf, &[], &localhost, &[], UnixTime::now())
            .expect("a certificate from the reloaded CA verifies");

        // The name is part of the chain: under another one nothing verifies.
        let renamed = Authority::from_pair("another-name", &original.pair()).expect("reload");
        let leaf = renamed.loopback_serving("server").expect("serving");
        let leaf = CertificateDer::from_pem_slice(leaf.cert.as_bytes()).expect("leaf pem");
        assert!(
            verifier
                .verify_server_cert(&leaf, &[], &localhost, &[], UnixTime::now())
                .is_err()
        );

        let broken = Pair {
            cert: original.cert_pem(),
            key: "not a key".into(),
        };
        assert!(Authority::from_pair("stored-ca", &broken).is_err());
    }

    #[test]
    fn a_peer_certificate_verifies_as_a_server_and_as_a_client_a_serving_one_only_as_a_server() {
        let ca = Authority::new("peer-ca").expect("ca");
        let (servers, clients) = verifiers(&ca);
        let now = UnixTime::now();
        let later = now.as_secs() as i64 + 3600;
        let name = ServerName::try_from("w1.nodes.ns.svc").expect("name");
        let leaf = |p: &Pair| CertificateDer::from_pem_slice(p.cert.as_bytes()).expect("pem");

        let peer = ca
            .peer_until("node", &["*.nodes.ns.svc"], later)
            .expect("peer");
        servers
            .verify_server_cert(&leaf(&peer), &[], &name, &[], now)
            .expect("serves");
        clients
            .verify_client_cert(&leaf(&peer), &[], now)
            .expect("calls out");

        let serving = ca
            .serving_until("node", &["*.nodes.ns.svc"], &[], Some(later))
            .expect("serving");
        assert!(
            clients
                .verify_client_cert(&leaf(&serving), &[], now)
                .is_err()
        );
    }

    #[test]
    fn a_certificate_for_a_request_is_the_requesters_key_with_the_callers_names_only() {
        let ca = Authority::new("request-ca").expect("ca");
        let key = KeyPair::generate().expect("key");
        // The request asks for a name of its own; only the caller's are issued.
        let csr = CertificateParams::new(vec!["everything.example".to_string()])
            .expect("params")
            .serialize_request(&key)
            .expect("request");
        let now = UnixTime::now().as_secs() as i64;
        let pem = ca
            .peer_for_request(csr.der(), "w1", &["w1.nodes.ns.svc"], now - 60, now + 3600)
            .expect("issued");
        let leaf = CertificateDer::from_pem_slice(pem.as_bytes()).expect("pem");
        let (_, parsed) = x509_parser::parse_x509_certificate(&leaf).expect("x509");
        assert_eq!(
            parsed.public_key().raw,
            rcgen::PublicKeyData::subject_public_key_info(&key).as_slice(),
            "issued to the requester's key"
        );
        assert_eq!(parsed.validity().not_before.timestamp(), now - 60);
        assert_eq!(parsed.validity().not_after.timestamp(), now + 3600);

        let (servers, clients) = verifiers(&ca);
        let at = UnixTime::now();
        let named = |n: &str| ServerName::try_from(n.to_string()).expect("name");
        servers
            .verify_server_cert(&leaf, &[], &named("w1.nodes.ns.svc"), &[], at)
            .expect("serves its own name");
        for other in ["w2.nodes.ns.svc", "everything.example"] {
            assert!(
                servers
                    .verify_server_cert(&leaf, &[], &named(other), &[], at)
                    .is_err(),
                "{other}"
            );
        }
        clients
            .verify_client_cert(&leaf, &[], at)
            .expect("calls out");

        // A request whose signature does not hold is refused.
        let mut forged = csr.der().to_vec();
        let last = forged.len() - 1;
        forged[last] ^= 0xff;
        assert!(
            ca.peer_for_request(&forged, "w1", &["w1.nodes.ns.svc"], now, now + 3600)
                .is_err()
        );
    }

    #[test]
    fn keys_stay_out_of_debug_output() {
        let ca = Authority::new("test-ca").expect("ca");
        let text = format!("{:?}", ca.pair());
        assert!(!text.contains("PRIVATE KEY"), "{text}");
    }
}

//! Certificates for one test environment: a CA, the API server's serving certificate, an
//! admin client certificate, and the service-account signing key.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};

use crate::Error;

/// A PEM certificate with its PEM private key.
pub struct Pair {
    pub cert: String,
    pub key: String,
}

/// Everything a test environment needs, in PEM.
pub struct Bundle {
    pub ca: Pair,
    pub serving: Pair,
    pub admin: Pair,
    /// Signs service-account tokens (the API server requires one since 1.20).
    pub service_account_key: String,
    /// Verifies them; the API server reads only public keys from its key file.
    pub service_account_public_key: String,
}

/// A CA that can issue further certificates, e.g. for webhook servers under test.
pub struct Authority {
    issuer: CertifiedIssuer<'static, KeyPair>,
    key_pem: String,
}

impl Authority {
    pub fn new(common_name: &str) -> Result<Authority, Error> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name, None);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().map_err(cert_err)?;
        let key_pem = key.serialize_pem();
        let issuer = CertifiedIssuer::self_signed(params, key).map_err(cert_err)?;
        Ok(Authority { issuer, key_pem })
    }

    pub fn pair(&self) -> Pair {
        Pair {
            cert: self.issuer.pem(),
            key: self.key_pem.clone(),
        }
    }

    /// A serving certificate for loopback: `127.0.0.1`, `::1` and `localhost`.
    pub fn serving(&self, common_name: &str) -> Result<Pair, Error> {
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).map_err(cert_err)?;
        params
            .subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv6Addr::LOCALHOST.into()));
        params.distinguished_name = name(common_name, None);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate; Kubernetes reads the user from CN and the groups from O.
    pub fn client(&self, user: &str, group: Option<&str>) -> Result<Pair, Error> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(user, group);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, mut params: CertificateParams) -> Result<Pair, Error> {
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().map_err(cert_err)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(cert_err)?;
        Ok(Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

pub fn bundle() -> Result<Bundle, Error> {
    let ca = Authority::new("simplyblock-testenv-ca")?;
    let service_account = KeyPair::generate().map_err(cert_err)?;
    Ok(Bundle {
        serving: ca.serving("kube-apiserver")?,
        admin: ca.client("admin", Some("system:masters"))?,
        service_account_key: service_account.serialize_pem(),
        service_account_public_key: service_account.public_key_pem(),
        ca: ca.pair(),
    })
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(org) = organization {
        dn.push(DnType::OrganizationName, org);
    }
    dn
}

fn cert_err(e: rcgen::Error) -> Error {
    Error::Certificates(e.to_string())
}

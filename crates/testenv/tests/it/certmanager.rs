//! The cert-manager stand-in issues a self-signed CA, and serving and client certificates
//! that chain to it, as cert-manager would for the same objects.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use serde_json::json;
use simplyblock_testenv::wait::until;
use simplyblock_testenv::{TestEnv, certmanager, create_namespace};

fn object(kind: &str, name: &str, spec: serde_json::Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "cert-manager.io/v1", "kind": kind,
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("object")
}

fn file(secret: &Secret, key: &str) -> Vec<u8> {
    secret.data.as_ref().expect("data")[key].0.clone()
}

#[tokio::test]
async fn a_ca_chain_is_issued_and_its_certificates_verify() {
    let env = TestEnv::shared().expect("test environment");
    env.install_crds(&certmanager::crds()).await.expect("CRDs");
    let client = env.client().await.expect("client");
    let ns = "certmanager";
    create_namespace(&client, ns).await.expect("namespace");
    let _issuing = certmanager::start(client.clone(), ns.into());

    let api = |kind: &str| -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("cert-manager.io", "v1", kind);
        Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
    };
    let ca_ref = json!({"name": "ca", "kind": "Issuer"});
    for (kind, name, spec) in [
        ("Issuer", "self", json!({"selfSigned": {}})),
        (
            "Certificate",
            "ca",
            json!({"isCA": true, "commonName": "test-ca", "secretName": "ca",
            "issuerRef": {"name": "self", "kind": "Issuer"}}),
        ),
        ("Issuer", "ca", json!({"ca": {"secretName": "ca"}})),
        (
            "Certificate",
            "api",
            json!({"secretName": "api-tls", "dnsNames": ["api.ns.svc"],
            "usages": ["server auth"], "issuerRef": ca_ref}),
        ),
        (
            "Certificate",
            "client",
            json!({"secretName": "client-tls", "commonName": "me",
            "usages": ["client auth"], "issuerRef": ca_ref}),
        ),
    ] {
        api(kind)
            .create(&PostParams::default(), &object(kind, name, spec))
            .await
            .expect("created");
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let [ca, serving, client_tls] = until("the three Secrets issued", async || {
        Some([
            secrets.get_opt("ca").await.ok()??,
            secrets.get_opt("api-tls").await.ok()??,
            secrets.get_opt("client-tls").await.ok()??,
        ])
    })
    .await;
    for name in ["ca", "api", "client"] {
        until("the Certificate Ready", async || {
            let c = api("Certificate").get(name).await.ok()?;
            (c.data["status"]["conditions"][0]["status"] == "True").then_some(())
        })
        .await;
    }

    let ca_pem = file(&ca, "tls.crt");
    assert_eq!(file(&serving, "ca.crt"), ca_pem);
    assert_eq!(file(&client_tls, "ca.crt"), ca_pem);
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(&ca_pem).expect("CA PEM"))
        .expect("CA");
    let roots = Arc::new(roots);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let now = UnixTime::now();

    let leaf = |s: &Secret| CertificateDer::from_pem_slice(&file(s, "tls.crt")).expect("PEM");
    let servers = rustls::client::WebPkiServerVerifier::builder_with_provider(
        roots.clone(),
        provider.clone(),
    )
    .build()
    .expect("server verifier");
    let name = ServerName::try_from("api.ns.svc").expect("name");
    servers
        .verify_server_cert(&leaf(&serving), &[], &name, &[], now)
        .expect("the serving certificate chains to the CA for its name");
    let other = ServerName::try_from("other.ns.svc").expect("name");
    assert!(
        servers
            .verify_server_cert(&leaf(&serving), &[], &other, &[], now)
            .is_err()
    );
    let clients = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider)
        .build()
        .expect("client verifier");
    clients
        .verify_client_cert(&leaf(&client_tls), &[], now)
        .expect("the client certificate chains to the CA");
}

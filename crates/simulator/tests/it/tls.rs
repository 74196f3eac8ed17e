//! HTTPS with a required client certificate: the client's mTLS, CA bundle and pinned
//! service name against sbsim's TLS listener (rustls with ring on both sides).

use crate::common::*;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use simplyblock_controlplane::*;
use simplyblock_simulator::{Server, ServerTls, Sim};

struct Pki {
    ca_pem: String,
    server: (String, String),
    client: (String, String),
    other_client: (String, String),
}

fn pki() -> Pki {
    pki_for(&["simplyblock-webappapi.simplyblock.svc"])
}

/// A CA, a server certificate for `names`, a client certificate (CN `operator`) and one
/// from a CA nobody trusts.
fn pki_for(names: &[&str]) -> Pki {
    let ca_key = KeyPair::generate().expect("key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).expect("ca");
    let issuer = Issuer::new(ca_params, &ca_key);
    let leaf = |names: Vec<String>, issuer: &Issuer<'_, &KeyPair>| {
        let key = KeyPair::generate().expect("key");
        let cert = CertificateParams::new(names)
            .expect("params")
            .signed_by(&key, issuer)
            .expect("sign");
        (cert.pem(), key.serialize_pem())
    };
    let server = leaf(names.iter().map(|n| n.to_string()).collect(), &issuer);
    let client = leaf_named("operator", &issuer);
    // A client certificate from a CA the server does not trust.
    let rogue_key = KeyPair::generate().expect("key");
    let mut rogue_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    rogue_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let rogue = Issuer::new(rogue_params, &rogue_key);
    let other_client = leaf_named("intruder", &rogue);
    Pki {
        ca_pem: ca_cert.pem(),
        server,
        client,
        other_client,
    }
}

/// A client certificate whose subject's common name is `name`.
fn leaf_named(name: &str, issuer: &Issuer<'_, &KeyPair>) -> (String, String) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(vec![name.to_string()]).expect("params");
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let cert = params.signed_by(&key, issuer).expect("sign");
    (cert.pem(), key.serialize_pem())
}

#[tokio::test]
async fn mtls_with_a_pinned_service_name() {
    simplyblock_simulator::install_crypto_provider();
    let pki = pki();
    let dir = tempfile::tempdir().expect("dir");
    let sim = Sim::open(config(dir.path(), &fleet_yaml(1, 1))).expect("sim");
    let server = Server::start(
        sim,
        "127.0.0.1:0",
        Some(ServerTls {
            cert_pem: pki.server.0.clone().into_bytes(),
            key_pem: pki.server.1.clone().into_bytes(),
            client_ca_pem: Some(pki.ca_pem.clone().into_bytes()),
            plain_too: false,
        }),
    )
    .await
    .expect("tls server");
    assert!(server.url.starts_with("https://127.0.0.1:"));
    let client = |identity: Option<&(String, String)>| {
        let mut cfg = ClientConfig::new(Url::parse(&server.url).expect("url"), TOKEN);
        cfg.read_retries = 0;
        cfg.tls = Some(TlsConfig {
            ca_pem: pki.ca_pem.clone().into_bytes(),
            client_identity: identity
                .map(|(c, k)| (c.clone().into_bytes(), k.clone().into_bytes())),
            // The URL says 127.0.0.1; the certificate names the service, as in a cluster.
            server_name: Some("simplyblock-webappapi.simplyblock.svc".into()),
        });
        Client::new(cfg).expect("client")
    };
    let good = client(Some(&pki.client));
    good.ready().await.expect("ready over mTLS");
    let cluster = good
        .create_cluster(&ClusterCreate::new("tls", 10, 4))
        .await
        .expect("create over mTLS");
    assert_eq!(
        good.get_cluster(cluster.id).await.expect("get").id,
        cluster.id
    );

    let e = client(None)
        .list_clusters()
        .await
        .expect_err("no client certificate");
    assert!(matches!(e, Error::Unavailable { .. }), "{e}");
    let e = client(Some(&pki.other_client))
        .list_clusters()
        .await
        .expect_err("untrusted client certificate");
    assert!(matches!(e, Error::Unavailable { .. }), "{e}");

    // Without the pin, the certificate does not match 127.0.0.1.
    let mut cfg = ClientConfig::new(Url::parse(&server.url).expect("url"), TOKEN);
    cfg.read_retries = 0;
    cfg.tls = Some(TlsConfig {
        ca_pem: pki.ca_pem.clone().into_bytes(),
        client_identity: Some((
            pki.client.0.clone().into_bytes(),
            pki.client.1.clone().into_bytes(),
        )),
        server_name: None,
    });
    let unpinned = Client::new(cfg).expect("client");
    assert!(unpinned.list_clusters().await.is_err());
    server.shutdown().await;
}

/// A storage-node domain served over TLS: its workers answer only TLS clients that
/// present a certificate from the cluster's CA, and the call log names the client; the
/// control plane on the same port stays plain.
#[tokio::test]
async fn storage_nodes_served_over_tls_require_the_clusters_client_certificate() {
    simplyblock_simulator::install_crypto_provider();
    const DOMAIN: &str = "simplyblock-storage-node-api.ns.svc.cluster.local";
    let pki = pki_for(&[&format!("*.{DOMAIN}")]);
    let dir = tempfile::tempdir().expect("dir");
    let sim = Sim::open(config(dir.path(), &fleet_yaml(1, 1))).expect("sim");
    let server = Server::start(sim, "127.0.0.1:0", None)
        .await
        .expect("server");
    let node = |tls: Option<TlsConfig>| {
        let mut cfg = SnodeConfig::new(format!("w1.{DOMAIN}:5000"));
        cfg.tls = tls;
        cfg.connect_to = Some(server.addr);
        SnodeClient::new(cfg).expect("storage-node client")
    };
    let tls = |identity: Option<&(String, String)>| TlsConfig {
        ca_pem: pki.ca_pem.clone().into_bytes(),
        client_identity: identity.map(|(c, k)| (c.clone().into_bytes(), k.clone().into_bytes())),
        server_name: None,
    };
    node(None)
        .check()
        .await
        .expect("plain before the domain serves TLS");

    server
        .named_tls
        .serve(
            DOMAIN,
            &ServerTls {
                cert_pem: pki.server.0.clone().into_bytes(),
                key_pem: pki.server.1.clone().into_bytes(),
                client_ca_pem: Some(pki.ca_pem.clone().into_bytes()),
                plain_too: false,
            },
        )
        .expect("serve the domain over TLS");
    let e = node(None)
        .check()
        .await
        .expect_err("plain HTTP to a TLS node");
    assert!(e.to_string().contains("plain HTTP"), "{e}");
    let e = node(Some(tls(None)))
        .check()
        .await
        .expect_err("no client certificate");
    assert!(matches!(e, Error::Unavailable { .. }), "{e}");
    let e = node(Some(tls(Some(&pki.other_client))))
        .check()
        .await
        .expect_err("a client certificate from another CA");
    assert!(matches!(e, Error::Unavailable { .. }), "{e}");
    node(Some(tls(Some(&pki.client))))
        .check()
        .await
        .expect("the cluster's client certificate");
    let calls = server.sim.calls.lock().expect("log").since(0);
    let checks: Vec<(u16, Option<&str>)> = calls
        .iter()
        .filter(|c| c.path == "/snode/check")
        .map(|c| (c.status, c.client.as_deref()))
        .collect();
    // The refused handshakes never became requests.
    assert_eq!(
        checks,
        [(200, None), (400, None), (200, Some("operator"))],
        "{calls:#?}"
    );

    // A worker of another domain, and the control plane, are still plain.
    let cp = ClientConfig::new(Url::parse(&server.url).expect("url"), TOKEN);
    Client::new(cp)
        .expect("client")
        .ready()
        .await
        .expect("ready in plain");
    server.shutdown().await;
}

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
    let server = leaf(
        vec!["simplyblock-webappapi.simplyblock.svc".into()],
        &issuer,
    );
    let client = leaf(vec!["operator".into()], &issuer);
    // A client certificate from a CA the server does not trust.
    let rogue_key = KeyPair::generate().expect("key");
    let mut rogue_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    rogue_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let rogue = Issuer::new(rogue_params, &rogue_key);
    let other_client = leaf(vec!["intruder".into()], &rogue);
    Pki {
        ca_pem: ca_cert.pem(),
        server,
        client,
        other_client,
    }
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

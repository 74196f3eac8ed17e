//! The operator binary serves `/metrics` over TLS, and only to a scraper the API server
//! authenticates and lets read it; `/healthz` stays open for the kubelet.

use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::support::{free_port, operator_command, own_api_server, sbsim, scrape, until};

/// The answer of an operator's metrics port to `GET path` over TLS (the certificate is
/// checked by `scrape` elsewhere), with `token` when given: the status and the body.
async fn get(port: u16, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    let tls = rustls::ClientConfig::builder_with_provider(
        rustls::crypto::ring::default_provider().into(),
    )
    .with_safe_default_protocol_versions()
    .ok()?
    .dangerous()
    .with_custom_certificate_verifier(std::sync::Arc::new(AnyCertificate))
    .with_no_client_auth();
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(Duration::from_secs(5))
        .build()
        .ok()?;
    let mut request = client.get(format!("https://127.0.0.1:{port}{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.ok()?))
}

/// Trusts any certificate: what is read here is the server's answer to who asks, not who
/// it is (the scraper of [`scrape`] verifies that).
#[derive(Debug)]
struct AnyCertificate;

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[tokio::test]
async fn metrics_are_served_over_tls_only_to_a_reader_the_api_server_lets_in() {
    let ns = "metrics-access";
    let (env, admin) = own_api_server(ns).await;
    let sim = sbsim("", 0).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "sbsim-token").expect("token");
    let port = free_port();
    let mut operator = operator_command(&env, sim.server.addr, &token_file, ns)
        .arg(format!("--metrics-addr=127.0.0.1:{port}"))
        .spawn()
        .expect("the operator starts");

    // The kubelet's probe: open, over TLS.
    let (status, body) = until("the operator's /healthz", async || {
        get(port, "/healthz", None).await
    })
    .await;
    assert_eq!((status, body.as_str()), (200, "ok"));

    // Plain HTTP is not served.
    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(
        plain.as_ref().map_or(true, |r| !r.status().is_success()),
        "plain HTTP was answered: {plain:?}"
    );

    // No token, a token the API server does not know, an account without the role.
    let (status, body) = get(port, "/metrics", None).await.expect("an answer");
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("simplyblock-metrics-reader"), "{body}");
    let (status, body) = get(port, "/metrics", Some("not-a-token"))
        .await
        .expect("an answer");
    assert_eq!(status, 401, "{body}");
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "curious"}})).expect("account"),
        )
        .await
        .expect("an account without the role");
    let curious = env
        .service_account_token(ns, "curious")
        .await
        .expect("its token");
    let (status, body) = get(port, "/metrics", Some(&curious))
        .await
        .expect("an answer");
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(&format!("system:serviceaccount:{ns}:curious"))
            && body.contains("bind ClusterRole simplyblock-metrics-reader"),
        "{body}"
    );
    assert!(!body.contains("simplyblock_"), "{body}");

    // The chart's reader role bound: the series, over TLS verified against the
    // operator's CA.
    let metrics = until("a reader's scrape", async || scrape(&env, ns, port).await).await;
    assert!(metrics.contains("# TYPE simplyblock_"), "{metrics}");

    operator.kill().expect("kill");
    operator.wait().expect("reaped");
}

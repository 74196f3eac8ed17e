//! What cert-manager would do, for an API server without it: the `Certificate`s of a
//! namespace whose `Issuer` is self-signed (`spec.selfSigned`) or a CA (`spec.ca.secretName`)
//! are issued into their `spec.secretName` as `kubernetes.io/tls` Secrets (`tls.crt`,
//! `tls.key`, `ca.crt`) and reported Ready, as cert-manager does. Enough for a chain of a
//! self-signed Issuer, a CA Certificate and a CA Issuer of serving and client certificates;
//! durations, key algorithms and renewal are not modelled (a Secret is issued once).
//!
//! ```no_run
//! # async fn example(client: kube::Client) {
//! use simplyblock_testenv::certmanager;
//! let _issuing = certmanager::start(client, "ns".into());
//! # }
//! ```

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};
use simplyblock_certs::{Authority, Pair};

use crate::standin::{StandIn, minimal_crd};

/// The annotation cert-manager records a certificate's common name under.
pub const COMMON_NAME_ANNOTATION: &str = "cert-manager.io/common-name";

/// Minimal `Issuer` and `Certificate` CRDs (`cert-manager.io/v1`, any fields, a status
/// subresource).
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        minimal_crd("cert-manager.io", "v1", "Issuer", "issuers", &[]),
        minimal_crd(
            "cert-manager.io",
            "v1",
            "Certificate",
            "certificates",
            &["cert"],
        ),
    ]
}

fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("cert-manager.io", "v1", kind))
}

/// Issues the Certificates of `namespace` as they appear, until dropped.
pub fn start(client: kube::Client, namespace: String) -> StandIn {
    StandIn::every_pass(move || {
        let client = client.clone();
        let namespace = namespace.clone();
        async move {
            // A pass that fails (an Issuer not there yet) is tried again on the next.
            let _ = pass(&client, &namespace).await;
        }
    })
}

async fn pass(client: &kube::Client, namespace: &str) -> Result<(), String> {
    let certificates: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resource("Certificate"));
    let list = certificates
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    // One whose Issuer is not ready yet (its CA not issued) waits for a later pass; the
    // others go on.
    for certificate in list {
        let _ = issue_once(client, namespace, &certificate).await;
    }
    Ok(())
}

/// Issues `certificate` unless its Secret exists, and reports it Ready.
async fn issue_once(
    client: &kube::Client,
    namespace: &str,
    certificate: &DynamicObject,
) -> Result<(), String> {
    let certificates: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resource("Certificate"));
    let issuers: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resource("Issuer"));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let name = certificate.metadata.name.clone().unwrap_or_default();
    let spec = &certificate.data["spec"];
    let secret_name = spec["secretName"]
        .as_str()
        .ok_or_else(|| format!("Certificate {name} names no secretName"))?;
    let issued = secrets
        .get_opt(secret_name)
        .await
        .map_err(|e| e.to_string())?;
    if issued.is_none() {
        let issuer_name = spec["issuerRef"]["name"].as_str().unwrap_or_default();
        let issuer = issuers
            .get_opt(issuer_name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("Issuer {issuer_name} does not exist"))?;
        let mut secret = issue(spec, &issuer.data["spec"], &secrets).await?;
        secret.metadata.name = Some(secret_name.into());
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .map_err(|e| e.to_string())?;
    }
    if certificate.data["status"]["conditions"][0]["status"] != "True" {
        let status = json!({"status": {"conditions": [{
            "type": "Ready", "status": "True", "reason": "Ready",
            "message": "Certificate is up to date and has not expired",
        }]}});
        certificates
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The Secret of a Certificate of `spec` from an Issuer of `issuer`.
async fn issue(spec: &Value, issuer: &Value, secrets: &Api<Secret>) -> Result<Secret, String> {
    let common_name = match spec["commonName"].as_str() {
        Some(name) if !name.is_empty() => name,
        _ => spec["dnsNames"][0]
            .as_str()
            .unwrap_or("cert-manager stand-in"),
    };
    let (pair, ca) = if issuer.get("selfSigned").is_some() {
        let authority = Authority::new(common_name).map_err(|e| e.to_string())?;
        (authority.pair(), authority.cert_pem())
    } else if let Some(ca_secret) = issuer["ca"]["secretName"].as_str() {
        let stored = secrets
            .get_opt(ca_secret)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("the CA Secret {ca_secret} is not issued yet"))?;
        let file = |key: &str| {
            stored
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
                .ok_or_else(|| format!("the CA Secret {ca_secret} has no {key}"))
        };
        let ca_name = stored
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(COMMON_NAME_ANNOTATION))
            .cloned()
            .unwrap_or_default();
        let ca_pair = Pair {
            cert: file("tls.crt")?,
            key: file("tls.key")?,
        };
        let authority = Authority::from_pair(&ca_name, &ca_pair).map_err(|e| e.to_string())?;
        let usages: Vec<&str> = spec["usages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let dns: Vec<&str> = spec["dnsNames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        // A certificate for both is issued for serving only: nothing here presents one.
        let pair = if usages.contains(&"client auth") && !usages.contains(&"server auth") {
            authority.client(common_name, None)
        } else {
            authority.serving(common_name, &dns, &[])
        }
        .map_err(|e| e.to_string())?;
        (pair, file("tls.crt")?)
    } else {
        return Err("the Issuer is neither selfSigned nor ca".into());
    };
    let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
    Ok(Secret {
        metadata: kube::api::ObjectMeta {
            annotations: Some(BTreeMap::from([(
                COMMON_NAME_ANNOTATION.to_string(),
                common_name.to_string(),
            )])),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            ("tls.crt".to_string(), bytes(&pair.cert)),
            ("tls.key".to_string(), bytes(&pair.key)),
            ("ca.crt".to_string(), bytes(&ca)),
        ])),
        ..Default::default()
    })
}

//! The admission webhooks, served over TLS only, from a certificate the operator issues
//! from its own CA (see [`tls`]).
//!
//! Each handler reads what it needs from the API server and answers with every problem at
//! once. A handler that cannot read the world denies: the webhooks run with failurePolicy
//! Fail, and admitting what could not be checked is the one answer that loses data. (The
//! SimplyblockDriver webhook and the StorageDevice DELETE guard fail open; their modules say
//! why.)

pub mod access;
pub mod backup_ops;
pub mod backup_policy;
pub mod ca;
pub mod cluster_ops;
pub mod control_plane_ops;
pub mod conversion;
pub mod deployment;
pub mod device_ops;
pub mod node_ops;
pub mod operator_ops;
mod review;
pub mod simplyblock_driver;
pub mod spoke_writes;
pub mod storage_backup;
pub mod storage_device;
pub mod storage_node;
pub mod storage_pool;
pub mod test_failover;
pub mod tls;
pub mod volume_ops;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::{MethodRouter, post};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhook;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::runtime::error::ServerError as Error;
use crate::runtime::serving::ServerLimits;
use tls::ServingCertificates;

pub use review::{Endpoint, WebhookContext, keep_while_unabortable, own_user};
pub(crate) use review::{answer, answering, delete_verdict, typed};

/// The path of the ClusterDeploymentConfig webhook.
pub const DEPLOYMENT_PATH: &str =
    "/validate-storage-simplyblock-io-v1alpha2-clusterdeploymentconfig";
/// The path of the StorageNode webhook.
pub const STORAGE_NODE_PATH: &str = "/validate-storage-simplyblock-io-v1alpha2-storagenode";

/// One admission webhook: its name in the configuration, the path it is served at, the
/// resource it validates, how it differs from the default webhook (CREATE and UPDATE of a
/// namespaced resource, failing closed), and its handler.
pub struct Webhook {
    pub name: &'static str,
    pub path: &'static str,
    pub resource: &'static str,
    shape: fn(ValidatingWebhook) -> ValidatingWebhook,
    handler: fn() -> MethodRouter<Arc<WebhookContext>>,
}

/// The default webhook, unchanged.
fn as_declared(webhook: ValidatingWebhook) -> ValidatingWebhook {
    webhook
}

/// Every admission webhook, in the configuration's order: the routes and the
/// ValidatingWebhookConfiguration (and so the chart's `webhooks.yaml`) are derived from
/// it, so a new webhook is its module and one entry here.
pub const WEBHOOKS: &[Webhook] = &[
    Webhook {
        name: "vclusterdeploymentconfig.simplyblock.io",
        path: DEPLOYMENT_PATH,
        resource: "clusterdeploymentconfigs",
        shape: as_declared,
        handler: || post(deployment::review),
    },
    Webhook {
        name: "vstoragenode.simplyblock.io",
        path: STORAGE_NODE_PATH,
        resource: "storagenodes",
        shape: as_declared,
        handler: || post(storage_node::review),
    },
    Webhook {
        name: operator_ops::NAME,
        path: operator_ops::PATH,
        resource: "operatorops",
        shape: as_declared,
        handler: || post(operator_ops::review),
    },
    Webhook {
        name: cluster_ops::NAME,
        path: cluster_ops::PATH,
        resource: "storageclusterops",
        shape: cluster_ops::delete_only,
        handler: || post(cluster_ops::review),
    },
    Webhook {
        name: node_ops::NAME,
        path: node_ops::PATH,
        resource: "storagenodeops",
        shape: node_ops::create_update_delete,
        handler: || post(node_ops::review),
    },
    Webhook {
        name: storage_device::NAME,
        path: storage_device::PATH,
        resource: "storagedevices",
        shape: storage_device::delete_only_fail_open,
        handler: || post(storage_device::review),
    },
    Webhook {
        name: device_ops::NAME,
        path: device_ops::PATH,
        resource: "storagedeviceops",
        shape: control_plane_ops::create_and_delete,
        handler: || post(device_ops::review),
    },
    Webhook {
        name: control_plane_ops::NAME,
        path: control_plane_ops::PATH,
        resource: "controlplaneops",
        shape: control_plane_ops::create_and_delete,
        handler: || post(control_plane_ops::review),
    },
    Webhook {
        name: volume_ops::NAME,
        path: volume_ops::PATH,
        resource: "persistentvolumeops",
        shape: volume_ops::cluster_scoped,
        handler: || post(volume_ops::review),
    },
    Webhook {
        name: simplyblock_driver::NAME,
        path: simplyblock_driver::PATH,
        resource: "simplyblockdrivers",
        shape: simplyblock_driver::create_only_fail_open,
        handler: || post(simplyblock_driver::review),
    },
    Webhook {
        name: test_failover::NAME,
        path: test_failover::PATH,
        resource: "testfailovers",
        shape: test_failover::create_only,
        handler: || post(test_failover::review),
    },
    Webhook {
        name: backup_ops::NAME,
        path: backup_ops::PATH,
        resource: "storagebackupops",
        shape: control_plane_ops::create_and_delete,
        handler: || post(backup_ops::review),
    },
    Webhook {
        name: backup_policy::NAME,
        path: backup_policy::PATH,
        resource: "storagebackuppolicies",
        shape: backup_policy::create_only,
        handler: || post(backup_policy::review),
    },
    Webhook {
        name: storage_pool::NAME,
        path: storage_pool::PATH,
        resource: "storagepools",
        shape: storage_pool::create_and_update,
        handler: || post(storage_pool::review),
    },
    Webhook {
        name: storage_backup::NAME,
        path: storage_backup::PATH,
        resource: "storagebackups",
        shape: storage_backup::create_delete_fail_open,
        handler: || post(storage_backup::review),
    },
    Webhook {
        name: spoke_writes::NAME,
        path: spoke_writes::PATH,
        resource: "storageclusters",
        shape: spoke_writes::spoke_writes,
        handler: || post(spoke_writes::review),
    },
];

/// The routes of every webhook of [`WEBHOOKS`], the CRDs' conversion and the health check.
pub fn router(ctx: WebhookContext) -> Router {
    WEBHOOKS
        .iter()
        .fold(Router::new(), |router, webhook| {
            router.route(webhook.path, (webhook.handler)())
        })
        .route(conversion::PATH, post(conversion::review))
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .with_state(Arc::new(ctx))
}

/// A bound webhook server; [`WebhookServer::run`] serves until the task is dropped.
pub struct WebhookServer {
    listener: TcpListener,
    certs: Arc<ServingCertificates>,
    router: Router,
    limits: ServerLimits,
}

impl WebhookServer {
    pub async fn bind(
        addr: SocketAddr,
        certs: Arc<ServingCertificates>,
        router: Router,
    ) -> Result<WebhookServer, Error> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Listen {
                server: "webhook server",
                addr: addr.to_string(),
                source,
            })?;
        Ok(WebhookServer {
            listener,
            certs,
            router,
            limits: ServerLimits::WEBHOOK,
        })
    }

    /// Serves within `limits` instead of [`ServerLimits::WEBHOOK`].
    pub fn with_limits(mut self, limits: ServerLimits) -> WebhookServer {
        self.limits = limits;
        self
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    pub async fn run(self) {
        let acceptor = TlsAcceptor::from(self.certs.server_config());
        crate::runtime::serving::serve(
            "webhook server",
            self.listener,
            self.limits,
            self.router,
            move |tcp| acceptor.accept(tcp),
        )
        .await;
    }
}

/// What no webhook is asked about, so that a deletion always finishes, even while the
/// operator is down (a `Fail` webhook without an endpoint refuses everything it matches):
/// - an update that leaves the spec as it is, of an object being deleted or marked
///   [`FORCE_DELETE_ANNOTATION`]: a finalizer's release, the mark itself;
/// - the deletion of an object so marked;
/// - a deletion by the namespace controller: the namespace is going, and each operation's
///   own finalizer still records it as aborted when the operator runs.
pub fn deletion_always_finishes() -> Vec<k8s_openapi::api::admissionregistration::v1::MatchCondition>
{
    use k8s_openapi::api::admissionregistration::v1::MatchCondition;
    use simplyblock_api::keys::FORCE_DELETE_ANNOTATION as FORCE;
    let marked = |object: &str| {
        format!(
            "(has({object}.metadata.annotations) && '{FORCE}' in {object}.metadata.annotations && {object}.metadata.annotations['{FORCE}'] == 'true')"
        )
    };
    vec![
        MatchCondition {
            name: "not-a-release-of-what-is-going".into(),
            expression: format!(
                "request.operation != 'UPDATE' || !(has(object.spec) == has(oldObject.spec) && (!has(object.spec) || object.spec == oldObject.spec) && (has(oldObject.metadata.deletionTimestamp) || {}))",
                marked("object")
            ),
        },
        MatchCondition {
            name: "not-a-forced-delete".into(),
            expression: format!("request.operation != 'DELETE' || !{}", marked("oldObject")),
        },
        MatchCondition {
            name: "not-the-namespace-controller".into(),
            expression: format!(
                "request.operation != 'DELETE' || request.userInfo.username != '{NAMESPACE_CONTROLLER}'"
            ),
        },
    ]
}

/// The account kube-controller-manager's namespace controller deletes a namespace's
/// objects as.
pub const NAMESPACE_CONTROLLER: &str = "system:serviceaccount:kube-system:namespace-controller";

/// The name of the operator's ValidatingWebhookConfiguration.
pub const CONFIGURATION_NAME: &str = "simplyblock-operator";

/// The ValidatingWebhookConfiguration of every webhook, trusting `ca_bundle`.
pub fn configuration(
    endpoint: &Endpoint,
    ca_bundle: &str,
) -> k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::admissionregistration::v1::{
        RuleWithOperations, ServiceReference, ValidatingWebhookConfiguration, WebhookClientConfig,
    };
    let webhook = |name: &str, path: &str, resource: &str| {
        let client_config = match endpoint {
            Endpoint::Url(base) => WebhookClientConfig {
                url: Some(format!("{}{path}", base.trim_end_matches('/'))),
                ca_bundle: Some(ByteString(ca_bundle.as_bytes().to_vec())),
                ..WebhookClientConfig::default()
            },
            Endpoint::Service { namespace, name } => WebhookClientConfig {
                service: Some(ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some(path.to_string()),
                    port: Some(443),
                }),
                ca_bundle: Some(ByteString(ca_bundle.as_bytes().to_vec())),
                ..WebhookClientConfig::default()
            },
        };
        ValidatingWebhook {
            name: name.to_string(),
            admission_review_versions: vec!["v1".into()],
            client_config,
            failure_policy: Some("Fail".into()),
            side_effects: "None".into(),
            timeout_seconds: Some(10),
            match_conditions: Some(deletion_always_finishes()),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec![simplyblock_api::GROUP.into()]),
                api_versions: Some(vec![simplyblock_api::VERSION.into()]),
                operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
                resources: Some(vec![resource.into()]),
                scope: Some("Namespaced".into()),
            }]),
            ..ValidatingWebhook::default()
        }
    };
    ValidatingWebhookConfiguration {
        metadata: kube::api::ObjectMeta {
            name: Some(CONFIGURATION_NAME.into()),
            ..Default::default()
        },
        webhooks: Some(
            WEBHOOKS
                .iter()
                .map(|w| (w.shape)(webhook(w.name, w.path, w.resource)))
                .collect(),
        ),
    }
}

/// The field manager the operator writes the webhook configuration under.
pub(crate) const FIELD_MANAGER: &str = "simplyblock-operator";

/// Publishes the webhooks with `ca_bundle`, server-side.
///
/// Reached through the Service, the webhooks are the Helm chart's: the chart's
/// configuration carries them without a caBundle, and the operator applies only each one's
/// caBundle, so a `helm upgrade` and the operator never write the same field and neither
/// forces the other's away. Where the webhooks are reached by URL (an operator outside the
/// cluster, whose address only it knows), the operator applies the whole of
/// [`configuration`] onto it. The chart's account may update that configuration only, and
/// only with webhooks of the storage kinds (ValidatingAdmissionPolicy
/// simplyblock-operator-writes): it creates none, so without the chart only an operator
/// run by an administrator registers its webhooks.
pub async fn register(
    client: &kube::Client,
    endpoint: &Endpoint,
    ca_bundle: &str,
) -> Result<(), Error> {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use kube::api::{Patch, PatchParams};
    let kube_error = |source| Error::Kube {
        what: format!(
            "ValidatingWebhookConfiguration {CONFIGURATION_NAME} (the chart installs it; the operator only keeps each webhook's CA bundle current and may create none)"
        ),
        source,
    };
    let api: kube::Api<ValidatingWebhookConfiguration> = kube::Api::all(client.clone());
    let installed = match endpoint {
        Endpoint::Service { .. } => api.get_opt(CONFIGURATION_NAME).await.map_err(kube_error)?,
        Endpoint::Url(_) => None,
    };
    let body = match &installed {
        Some(installed) => {
            let (body, missing) = bundle_only(installed, ca_bundle);
            if !missing.is_empty() {
                tracing::warn!(
                    ?missing,
                    "the installed webhook configuration lacks these webhooks of this operator, so they are not called; upgrade the chart to this operator's version"
                );
            }
            body
        }
        None => whole(endpoint, ca_bundle),
    };
    // Forced: the operator's CA is the only source of the bundle, whoever wrote it last.
    api.patch(
        CONFIGURATION_NAME,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map(|_| ())
    .map_err(kube_error)
}

/// [`configuration`] as an apply body.
fn whole(endpoint: &Endpoint, ca_bundle: &str) -> serde_json::Value {
    let config = configuration(endpoint, ca_bundle);
    serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": config.webhooks,
    })
}

/// An apply body holding only the caBundle of each webhook of [`configuration`] that
/// `installed` has (the webhooks are a list keyed by name, so the entries merge into the
/// installed ones); and the names of the operator's webhooks `installed` lacks, which a
/// bundle alone cannot create.
fn bundle_only(
    installed: &k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
    ca_bundle: &str,
) -> (serde_json::Value, Vec<String>) {
    let present: Vec<&str> = installed
        .webhooks
        .iter()
        .flatten()
        .map(|w| w.name.as_str())
        .collect();
    let bundle = k8s_openapi::ByteString(ca_bundle.as_bytes().to_vec());
    let mut entries = Vec::new();
    let mut missing = Vec::new();
    let ours = configuration(&Endpoint::Url(String::new()), "").webhooks;
    for name in ours.iter().flatten().map(|w| w.name.clone()) {
        if present.contains(&name.as_str()) {
            entries.push(serde_json::json!({"name": name, "clientConfig": {"caBundle": bundle}}));
        } else {
            missing.push(name);
        }
    }
    let body = serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": entries,
    });
    (body, missing)
}

#[cfg(test)]
mod chart_tests {
    use super::*;

    /// The chart's ValidatingWebhookConfiguration: the operator's own, for the webhook
    /// Service of the release namespace and without a caBundle (the operator writes the
    /// bundle of the CA it keeps).
    fn chart_template() -> String {
        let endpoint = Endpoint::Service {
            namespace: "NAMESPACE".into(),
            name: "simplyblock-operator-webhook".into(),
        };
        let mut config = configuration(&endpoint, "");
        for webhook in config.webhooks.iter_mut().flatten() {
            webhook.client_config.ca_bundle = None;
        }
        let value = serde_json::json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": CONFIGURATION_NAME, "labels": {"LABELS": ""}},
            "webhooks": config.webhooks,
        });
        let yaml = serde_saphyr::to_string(&value).expect("yaml");
        let mut out = String::from(
            "# Generated from the operator's webhooks::configuration(); `UPDATE_EXPECT=1 cargo test\n\
             # -p simplyblock-operator --lib chart_tests` rewrites it. Do not edit.\n",
        );
        for line in yaml.lines() {
            let line = line
                .replace(
                    "namespace: NAMESPACE",
                    "namespace: {{ .Release.Namespace }}",
                )
                .replace(
                    "    LABELS: \"\"",
                    "    {{- include \"simplyblock.labels\" . | nindent 4 }}\n  \
                     {{- include \"simplyblock.annotations\" . | nindent 2 }}",
                );
            out.push_str(&line);
            out.push('\n');
        }
        out
    }

    #[test]
    fn the_chart_registers_the_operators_webhooks() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deploy/charts/simplyblock-operator/templates/webhooks.yaml");
        let actual = chart_template();
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            std::fs::write(&path, &actual).expect("write the chart's webhooks");
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == actual,
            "the chart's webhooks.yaml differs from webhooks::configuration(); rerun with UPDATE_EXPECT=1"
        );
    }

    #[test]
    fn beside_the_charts_configuration_the_operator_writes_only_the_bundles() {
        let endpoint = Endpoint::Service {
            namespace: "simplyblock-system".into(),
            name: "simplyblock-operator-webhook".into(),
        };
        let mut installed = configuration(&endpoint, "");
        let webhooks = installed.webhooks.as_mut().expect("webhooks");
        let ours = webhooks.len();
        // A chart older than the operator: one of its webhooks is not installed.
        let dropped = webhooks.remove(1).name;
        // Someone else's webhook in the same configuration is not the operator's to touch.
        let mut foreign = webhooks[0].clone();
        foreign.name = "vforeign.example.com".into();
        webhooks.push(foreign);

        let (body, missing) = bundle_only(&installed, "PEM");
        assert_eq!(missing, vec![dropped]);
        let entries = body["webhooks"].as_array().expect("entries");
        assert_eq!(entries.len(), ours - 1, "{body}");
        for entry in entries {
            let fields: Vec<&String> = entry.as_object().expect("entry").keys().collect();
            assert_eq!(fields, ["clientConfig", "name"], "{entry}");
            assert_eq!(
                entry["clientConfig"],
                serde_json::json!({"caBundle": "UEVN"}),
                "base64 of the bundle, nothing else: {entry}"
            );
            assert_ne!(entry["name"], "vforeign.example.com");
        }
    }
}

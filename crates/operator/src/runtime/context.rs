//! What every controller shares: the Kubernetes client and the link to the control plane,
//! the event publisher, the metrics, the namespaces it serves, its shutdown signal, and
//! where the operator runs.

use std::sync::Arc;

use k8s_openapi::NamespaceResourceScope;
use kube::Api;
use std::time::Duration;

use kube::Resource;

/// The first wait before the disaster-recovery controllers ask again whether this API
/// server is an Open Cluster Management hub.
pub const HUB_FIRST_RETRY: Duration = Duration::from_secs(60);

/// Shared by the controllers of one operator process.
pub struct Context {
    pub kube: kube::Client,
    /// How the controllers reach the control plane ([`Context::control_plane`]): published
    /// by the ControlPlane controller, or pinned.
    pub link: crate::runtime::link::Link,
    /// How the ControlPlane controller builds its clients: the token it sends and the
    /// proxy it dials through.
    pub access: crate::runtime::link::Access,
    /// The operator's namespace, where the CSI secret lives.
    pub namespace: String,
    pub events: crate::runtime::events::Publisher,
    /// Where workers' storage-node APIs are reached.
    pub snode: SnodeSettings,
    /// Multiplies every Ops step deadline (1: the declared ones, 30 minutes for a cluster
    /// shutdown). Tests set it below 1 to see a deadline pass within seconds
    /// ([`Context::with_step_deadline_scale`]); it is read when a controller starts.
    pub step_deadline_scale: f64,
    /// The operator's metrics ([`crate::runtime::metrics`]).
    pub metrics: Arc<crate::runtime::metrics::Metrics>,
    /// The namespaces the controllers watch.
    pub scope: Scope,
    /// Fired when the operator stops: the controllers finish the passes in flight and end.
    pub shutdown: Shutdown,
    /// The control plane's event streams: the informer the controllers read through, and
    /// what wakes them ([`crate::runtime::streams`]).
    pub streams: Arc<crate::runtime::streams::Streams>,
    /// The first wait before discovery is asked again whether this API server is an OCM
    /// hub ([`HUB_FIRST_RETRY`]); tests shorten it.
    pub hub_first_retry: Duration,
    /// The failed calls in a row of each running operation: how long the next retry
    /// waits ([`crate::runtime::ops::call_retry`]).
    pub call_failures: Arc<crate::runtime::ops::CallFailures>,
    /// The operator's own pull secrets (the chart's `imagePullSecrets`): what the
    /// workloads it renders pull with when their objects name none.
    pub image_pull_secrets: Vec<k8s_openapi::api::core::v1::LocalObjectReference>,
    /// The StorageClass marked the cluster's default when the operator writes it (the
    /// chart's `operator.defaultStorageClass`).
    pub default_storage_class: Option<String>,
}

/// The namespaces the operator serves: one, or all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope(pub Option<String>);

impl Scope {
    /// Every namespace.
    pub fn all() -> Scope {
        Scope(None)
    }

    /// Only `namespace`.
    pub fn namespace(namespace: impl Into<String>) -> Scope {
        Scope(Some(namespace.into()))
    }

    /// The API of `K` over this scope.
    pub fn api<K>(&self, client: &kube::Client) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
    {
        match &self.0 {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
}

/// The operator's stop signal, shared by every controller.
#[derive(Clone, Debug, Default)]
pub struct Shutdown(tokio_util::sync::CancellationToken);

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// Stops every controller holding a clone.
    pub fn fire(&self) {
        self.0.cancel();
    }

    /// Resolves once fired.
    pub async fn wait(self) {
        self.0.cancelled_owned().await
    }
}

/// How to reach a worker's storage-node API.
#[derive(Clone, Debug)]
pub struct SnodeSettings {
    pub port: u16,
    /// The operator's client certificates toward each cluster's storage nodes.
    pub certificates: Arc<crate::workload::client_tls::ClientCertificates>,
    /// Send the requests to this address as an HTTP proxy instead of resolving the
    /// worker's name (an API server outside the cluster, e.g. the demo's, with sbsim).
    pub proxy: Option<std::net::SocketAddr>,
}

impl SnodeSettings {
    /// `<worker>.simplyblock-storage-node-api.<namespace>.svc.cluster.local:<port>`, the
    /// address the control plane is given in a node add, where `namespace` is the
    /// cluster's (its storage-node Service's). A worker name that is not a Node's name is
    /// refused before it becomes part of a host name.
    pub fn address(
        &self,
        worker: &str,
        namespace: &str,
    ) -> Result<String, crate::runtime::kit::Error> {
        if !simplyblock_api::names::is_dns_subdomain(worker) {
            return Err(crate::runtime::kit::Error::Invalid(format!(
                "worker {worker:?} is not a Node name (a DNS-1123 subdomain); no request is sent to it: correct spec.workerNode"
            )));
        }
        Ok(format!(
            "{worker}.{}.{}.svc.cluster.local:{}",
            crate::workload::names::SERVICE_NAME,
            namespace,
            self.port
        ))
    }
}

impl Context {
    /// Controllers that reach the control plane through `cp` at `cp_endpoint` whatever
    /// the ControlPlane says (pinned): the in-process harnesses of tests and benchmarks.
    pub fn new(
        kube: kube::Client,
        cp: simplyblock_controlplane::Client,
        cp_endpoint: String,
        namespace: String,
    ) -> Context {
        let reach = crate::runtime::link::Reach {
            client: cp,
            endpoint: cp_endpoint,
            trust: None,
        };
        Context::with_link(kube, crate::runtime::link::Link::pinned(reach), namespace)
    }

    /// Controllers that reach the control plane the ControlPlane controller publishes
    /// (the operator process).
    pub fn resolving(kube: kube::Client, namespace: String) -> Context {
        Context::with_link(kube, crate::runtime::link::Link::published(), namespace)
    }

    fn with_link(
        kube: kube::Client,
        link: crate::runtime::link::Link,
        namespace: String,
    ) -> Context {
        Context {
            events: crate::runtime::events::Publisher::new(
                kube.clone(),
                "simplyblock-operator",
                std::env::var("POD_NAME").ok(),
            ),
            kube,
            link,
            access: crate::runtime::link::Access::default(),
            snode: SnodeSettings {
                port: 5000,
                certificates: Arc::default(),
                proxy: None,
            },
            namespace,
            step_deadline_scale: 1.0,
            metrics: Arc::default(),
            scope: Scope::all(),
            shutdown: Shutdown::new(),
            streams: Arc::default(),
            hub_first_retry: HUB_FIRST_RETRY,
            call_failures: Arc::default(),
            image_pull_secrets: Vec::new(),
            default_storage_class: None,
        }
    }

    /// Watch only `namespace` (see [`Context::scope`]).
    pub fn watching(mut self, namespace: impl Into<String>) -> Context {
        self.scope = Scope::namespace(namespace);
        self
    }

    /// Watch what `scope` says.
    pub fn with_scope(mut self, scope: Scope) -> Context {
        self.scope = scope;
        self
    }

    /// Render workloads with `secrets` as their pull secrets when their objects name none.
    pub fn with_image_pull_secrets(mut self, secrets: &[String]) -> Context {
        self.image_pull_secrets = secrets
            .iter()
            .map(|name| k8s_openapi::api::core::v1::LocalObjectReference { name: name.clone() })
            .collect();
        self
    }

    /// Mark the StorageClass `name` the cluster's default when writing it.
    pub fn with_default_storage_class(mut self, name: Option<String>) -> Context {
        self.default_storage_class = name;
        self
    }

    /// Stop when `shutdown` fires.
    pub fn with_shutdown(mut self, shutdown: Shutdown) -> Context {
        self.shutdown = shutdown;
        self
    }

    /// Scale every Ops step deadline by `factor` (see [`Context::step_deadline_scale`]);
    /// a factor that is not a positive number keeps the declared deadlines.
    pub fn with_step_deadline_scale(mut self, factor: f64) -> Context {
        self.step_deadline_scale = factor;
        self
    }

    /// Ask whether this is an OCM hub again after `first` at the start (see
    /// [`Context::hub_first_retry`]).
    pub fn with_hub_first_retry(mut self, first: Duration) -> Context {
        self.hub_first_retry = first;
        self
    }

    /// Reach storage-node APIs through `proxy` (see [`SnodeSettings::proxy`]).
    pub fn with_snode_proxy(mut self, proxy: std::net::SocketAddr) -> Context {
        self.snode.proxy = Some(proxy);
        self
    }

    /// Send `token` to a local control plane (and a managed one without credentials).
    pub fn with_control_plane_token(mut self, token: crate::runtime::link::Token) -> Context {
        self.access.token = token;
        self
    }

    /// The one audience the operator's own token may name to be sent to a managed control
    /// plane without credentials (see [`crate::runtime::link::audience_refusal`]).
    pub fn with_control_plane_audience(mut self, audience: impl Into<String>) -> Context {
        self.access.audience = audience.into();
        self
    }

    /// Reach the control plane through `proxy` (see [`crate::runtime::link::Access::proxy`]).
    pub fn with_control_plane_proxy(mut self, proxy: std::net::SocketAddr) -> Context {
        self.access.proxy = Some(proxy);
        self
    }

    /// The control plane's client; [`crate::runtime::kit::Error::Held`] with the reason while it
    /// is missing, Installing or Unavailable.
    pub fn control_plane(
        &self,
    ) -> Result<simplyblock_controlplane::Client, crate::runtime::kit::Error> {
        self.link
            .reach()
            .map(|r| r.client)
            .map_err(crate::runtime::kit::Error::Held)
    }

    /// The informer with `scope` followed (its stream opened by the first pass that asks);
    /// held like [`Context::control_plane`].
    pub fn follow(
        &self,
        scope: simplyblock_controlplane::Scope,
    ) -> Result<simplyblock_controlplane::Informer, crate::runtime::kit::Error> {
        Ok(self.streams.follow(self.control_plane()?, scope))
    }

    /// The control plane's `status.endpoint`, as the CSI driver reaches it; held like
    /// [`Context::control_plane`].
    pub fn control_plane_endpoint(&self) -> Result<String, crate::runtime::kit::Error> {
        self.link
            .reach()
            .map(|r| r.endpoint)
            .map_err(crate::runtime::kit::Error::Held)
    }

    /// Publishes an event on `object`; a failure to publish is logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        if let Err(e) = self
            .events
            .publish(&object.object_ref(&()), warning, reason, &note)
            .await
        {
            tracing::warn!(error = %e, reason, "publishing an event failed");
        }
    }
}

/// The requeue intervals the controllers share.
pub mod requeue {
    use super::Duration;
    /// After a lost optimistic-lock race.
    pub const CONFLICT: Duration = Duration::from_secs(5);
    /// While the control plane is unready or refused.
    pub const RETRY: Duration = Duration::from_secs(20);
    /// The steady-state backstop.
    pub const RESYNC: Duration = Duration::from_secs(30);
    /// Right after a step advanced; the watch usually comes first.
    pub const NEXT_STEP: Duration = Duration::from_millis(200);
}

//! Assembling the services by mode and serving them on the endpoint socket: CSI, the
//! csi-addons Identity service and, in the controller mode, the CSI GroupController and
//! the csi-addons Replication and VolumeGroup services. Other gRPC services join through [`Driver::routes`]: add them to the builder
//! before [`serve`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use simplyblock_telemetry::metrics::Metrics;
use tonic::service::RoutesBuilder;

use crate::addons_identity::AddonsIdentityService;
use crate::attach::Attacher;
use crate::clusters::Clusters;
use crate::controller::ControllerService;
use crate::error::{CsiError, Result};
use crate::group_snapshot::GroupControllerService;
use crate::identity::IdentityService;
use crate::metrics::{MeasureLayer, VOLUMES_STAGED};
use crate::metrics_http::Refresh;
use crate::node::NodeService;
use crate::proto::csi::v1::controller_server::ControllerServer;
use crate::proto::csi::v1::group_controller_server::GroupControllerServer;
use crate::proto::csi::v1::identity_server::IdentityServer;
use crate::proto::csi::v1::node_server::NodeServer;
use crate::proto::csiaddons::identity::identity_server::IdentityServer as AddonsIdentityServer;
use crate::proto::csiaddons::replication::controller_server::ControllerServer as ReplicationServer;
use crate::proto::csiaddons::volumegroup::controller_server::ControllerServer as VolumeGroupServer;
use crate::recovery::{Recovery, RecoveryConfig};
use crate::replication::ReplicationService;
use crate::volume_group::VolumeGroupService;

/// Which services the process serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Controller,
    Node,
    Both,
}

impl Mode {
    pub fn controller(self) -> bool {
        matches!(self, Mode::Controller | Mode::Both)
    }
    pub fn node(self) -> bool {
        matches!(self, Mode::Node | Mode::Both)
    }
}

/// Node-side settings.
#[derive(Clone)]
pub struct NodeConfig {
    pub node_id: String,
    pub host_nqn: String,
    pub segments: std::collections::BTreeMap<String, String>,
    pub state_dir: PathBuf,
    pub attacher: Arc<dyn Attacher>,
    /// The timing of path recovery ([`Driver::start_recovery`]).
    pub recovery: RecoveryConfig,
    /// The plugin's Kubernetes client; without one, pods on a volume that lost every
    /// path are not restarted.
    pub kube: Option<kube::Client>,
}

impl std::fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConfig")
            .field("node_id", &self.node_id)
            .field("host_nqn", &self.host_nqn)
            .field("segments", &self.segments)
            .field("state_dir", &self.state_dir)
            .field("attacher", &self.attacher)
            .field("recovery", &self.recovery)
            .field("kube", &self.kube.is_some())
            .finish()
    }
}

/// The driver: its services for one mode.
#[derive(Debug)]
pub struct Driver {
    pub name: String,
    pub mode: Mode,
    pub clusters: Arc<Clusters>,
    pub node: Option<NodeConfig>,
    /// The API server, where the controller reads the claims it creates volumes for.
    pub kube: Option<crate::pvc::ApiServer>,
    /// The Node service, one for the gRPC server and the recovery loops.
    node_service: OnceLock<Arc<NodeService>>,
}

impl Driver {
    pub fn new(
        name: String,
        mode: Mode,
        clusters: Arc<Clusters>,
        node: Option<NodeConfig>,
        kube: Option<crate::pvc::ApiServer>,
    ) -> Self {
        Self {
            name,
            mode,
            clusters,
            node,
            kube,
            node_service: OnceLock::new(),
        }
    }

    fn node_service(&self) -> Result<Arc<NodeService>> {
        let n = self.node.clone().ok_or_else(|| {
            CsiError::InvalidArgument(
                "node mode needs the node settings (node id, attacher)".into(),
            )
        })?;
        Ok(self
            .node_service
            .get_or_init(|| {
                Arc::new(NodeService::new(
                    n.node_id,
                    n.host_nqn,
                    n.segments,
                    n.state_dir,
                    self.clusters.clone(),
                    n.attacher,
                ))
            })
            .clone())
    }

    /// Start the node's path recovery (reconnect monitor and guardian); None outside the
    /// node mode. The loops stop when the returned value is dropped.
    pub fn start_recovery(&self) -> Result<Option<Recovery>> {
        let (true, Some(n)) = (self.mode.node(), &self.node) else {
            return Ok(None);
        };
        let service = self.node_service()?;
        Ok(Some(Recovery::start(service, n.kube.clone(), n.recovery)))
    }

    /// What `/metrics` reads at each scrape: in the node mode, how many volumes are
    /// staged (the stage records, which outlive a restart of the plugin).
    pub fn metrics_refresh(&self) -> Option<Refresh> {
        let (true, Some(n)) = (self.mode.node(), &self.node) else {
            return None;
        };
        let state_dir = n.state_dir.clone();
        Some(Arc::new(
            move |metrics: &Metrics| match crate::record::all(&state_dir) {
                Ok(records) => metrics.set(VOLUMES_STAGED, vec![], records.len() as f64),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot count the staged volumes for /metrics")
                }
            },
        ))
    }

    /// The CSI services for the mode, ready for more services to be added.
    pub fn routes(&self) -> Result<RoutesBuilder> {
        let mut b = RoutesBuilder::default();
        b.add_service(IdentityServer::new(IdentityService {
            name: self.name.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            controller: self.mode.controller(),
        }));
        b.add_service(AddonsIdentityServer::new(AddonsIdentityService {
            name: self.name.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            controller: self.mode.controller(),
        }));
        if self.mode.controller() {
            b.add_service(ControllerServer::new(ControllerService::new(
                self.clusters.clone(),
                self.kube.clone(),
            )));
            b.add_service(GroupControllerServer::new(GroupControllerService::new(
                self.clusters.clone(),
            )));
            b.add_service(ReplicationServer::new(ReplicationService::new(
                self.clusters.clone(),
            )));
            b.add_service(VolumeGroupServer::new(VolumeGroupService::new(
                self.clusters.clone(),
            )));
        }
        if self.mode.node() {
            b.add_service(NodeServer::from_arc(self.node_service()?));
        }
        Ok(b)
    }
}

/// The socket path of a CSI endpoint: `unix:///csi/csi.sock`, `unix:/csi/csi.sock` or a
/// plain path.
pub fn socket_path(endpoint: &str) -> Result<PathBuf> {
    let p = if let Some(rest) = endpoint.strip_prefix("unix://") {
        rest
    } else if let Some(rest) = endpoint.strip_prefix("unix:") {
        rest
    } else if endpoint.contains("://") {
        return Err(CsiError::InvalidArgument(format!(
            "endpoint {endpoint:?} is not a unix socket; use unix:///path/to/csi.sock"
        )));
    } else {
        endpoint
    };
    if p.is_empty() {
        return Err(CsiError::InvalidArgument(
            "the endpoint names no socket path".into(),
        ));
    }
    Ok(PathBuf::from(p))
}

/// [`serve_measured`] into a registry of its own, which nothing renders.
pub async fn serve(
    socket: &Path,
    routes: RoutesBuilder,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<()> {
    serve_measured(socket, routes, Arc::new(Metrics::new()), shutdown).await
}

/// Serve `routes` on the unix socket until `shutdown` resolves, counting every call into
/// `metrics` ([`crate::metrics`]). Keepalive pings every 30 s (10 s timeout); connections
/// are never closed for age or idleness, because the sidecars exit when theirs drops.
pub async fn serve_measured(
    socket: &Path,
    routes: RoutesBuilder,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<()> {
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| CsiError::io(format!("creating {}", dir.display()), e))?;
    }
    // A socket left by a previous run would make bind fail.
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(CsiError::io(
                format!("removing stale {}", socket.display()),
                e,
            ));
        }
    }
    let listener = tokio::net::UnixListener::bind(socket)
        .map_err(|e| CsiError::io(format!("binding {}", socket.display()), e))?;
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .timeout(Duration::from_secs(300))
        .trace_fn(|req| tracing::info_span!("csi", method = %req.uri().path()))
        .layer(MeasureLayer::new(metrics))
        .add_routes(routes.routes())
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .map_err(|e| CsiError::Internal(format!("gRPC server on {}: {e}", socket.display())))?;
    let _ = std::fs::remove_file(socket);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            socket_path("unix:///csi/csi.sock").expect("3 slashes"),
            PathBuf::from("/csi/csi.sock")
        );
        assert_eq!(
            socket_path("unix:/csi/csi.sock").expect("1 slash"),
            PathBuf::from("/csi/csi.sock")
        );
        assert_eq!(
            socket_path("/tmp/x.sock").expect("plain"),
            PathBuf::from("/tmp/x.sock")
        );
        assert!(socket_path("tcp://0.0.0.0:10000").is_err());
        assert!(socket_path("unix://").is_err());
    }
}

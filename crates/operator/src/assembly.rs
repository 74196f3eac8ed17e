//! The operator assembled: [`run`] serves the admission webhooks and the metrics on every
//! replica, and runs the controllers on the one that holds the leader Lease.
//!
//! Every replica serves the webhooks (the API server may call any of them), from a
//! certificate issued by the CA every replica shares ([`crate::webhooks::ca`]). Only the
//! leader reconciles and writes status: it takes the `coordination.k8s.io` Lease in the
//! operator's namespace before its first pass, renews it while it runs, and on shutdown
//! stops starting passes, finishes the ones in flight and releases the Lease, so that a
//! standby takes over at once instead of after the lease time.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};

use crate::deployment::discovery::{self, ProbeSettings};
use crate::metrics_server::{Access, MetricsServer};
use crate::runtime::context::Context;
use crate::webhooks::tls::ServingCertificates;
use crate::webhooks::{self, Endpoint, WebhookContext, WebhookServer};
use crate::{cluster, controlplane, deployment, driver, node, pool};

/// Where the API server reaches the webhooks.
#[derive(Clone, Debug)]
pub enum WebhookEndpoint {
    /// The Service of this name in the operator's namespace (in a cluster).
    Service(String),
    /// This URL base (an API server outside the cluster).
    Url(String),
    /// `https://` and the address the server bound (the demo, tests).
    Bound,
}

/// How replicas elect their leader.
#[derive(Clone, Debug)]
pub struct LeaderElection {
    /// The Lease in the operator's namespace.
    pub lease: String,
    /// This replica's name in the Lease: the pod's name, so a restarted container takes
    /// its own Lease back at once.
    pub identity: String,
    /// How long a Lease not renewed stays held.
    pub duration: Duration,
}

impl LeaderElection {
    /// The Lease every replica of the operator competes for.
    pub const LEASE: &str = simplyblock_api::LEADER_LEASE;
}

/// Everything [`run`] needs.
pub struct Config {
    /// The clients, the scope and the shutdown signal the controllers share.
    pub context: Context,
    /// Where the webhook server listens.
    pub webhook_listen: SocketAddr,
    pub webhook_endpoint: WebhookEndpoint,
    /// How long a serving certificate is valid; it is replaced at a third of that.
    pub certificate_validity: Duration,
    /// Where `/metrics` and `/healthz` are served; `None` serves neither.
    pub metrics_listen: Option<SocketAddr>,
    /// Where the metrics.simplyblock.io aggregated API is served; `None` serves it not.
    pub metrics_api_listen: Option<SocketAddr>,
    /// What probe Jobs run.
    pub probe: ProbeSettings,
    /// Raise the first-install discovery run once leading.
    pub initial_discovery: bool,
    /// The StorageCluster that run drafts; `None`: named after the run.
    pub discovery_cluster_name: Option<String>,
    /// `None`: this process leads alone (one replica, a test).
    pub leader_election: Option<LeaderElection>,
    /// How the leader reads the fleet's statistics.
    pub fleet: crate::fleet::Settings,
}

impl Config {
    /// An operator on this machine against an API server outside any cluster (the demo,
    /// the benchmark): webhooks on a free loopback port registered by that address, no
    /// metrics server, no discovery run, no election.
    pub fn local(context: Context) -> Config {
        Config {
            context,
            webhook_listen: SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, 0)),
            webhook_endpoint: WebhookEndpoint::Bound,
            certificate_validity: Duration::from_secs(24 * 3600),
            metrics_listen: None,
            metrics_api_listen: None,
            probe: ProbeSettings::default(),
            initial_discovery: false,
            discovery_cluster_name: None,
            leader_election: None,
            fleet: crate::fleet::Settings::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Operator(#[from] crate::runtime::error::ServerError),
    #[error("the leader Lease could not be read or written: {0}")]
    Lease(#[from] kube_lease_manager::LeaseManagerError),
    #[error(
        "this replica lost the leader Lease while it ran; it stopped reconciling and exits so that it restarts as a standby"
    )]
    LostLeadership,
}

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs the operator until `config.context.shutdown` fires (`Ok`) or the Lease is lost.
pub async fn run(config: Config) -> Result<(), Error> {
    let ctx = Arc::new(config.context);
    let client = ctx.kube.clone();
    let namespace = ctx.namespace.clone();

    let ca = webhooks::ca::ensure(&client, &namespace).await?;
    let mut dns = vec!["localhost".to_string()];
    if let WebhookEndpoint::Service(service) = &config.webhook_endpoint {
        // The metrics and metrics API ports serve the same certificate, behind the chart's
        // Services.
        for service in [
            service.as_str(),
            crate::metrics_server::SERVICE,
            crate::metricsapi::SERVICE,
        ] {
            dns.push(format!("{service}.{namespace}.svc"));
            dns.push(format!("{service}.{namespace}.svc.cluster.local"));
        }
    }
    if config.metrics_api_listen.is_some()
        && !matches!(config.webhook_endpoint, WebhookEndpoint::Service(_))
    {
        // The APIService names its Service, whose name the API server checks, wherever
        // the operator runs.
        dns.push(format!("{}.{namespace}.svc", crate::metricsapi::SERVICE));
    }
    let certs = ServingCertificates::with_bundle(
        ca.authority,
        ca.bundle,
        dns,
        vec![std::net::Ipv4Addr::LOCALHOST.into()],
        config.certificate_validity,
    )?;
    let server = WebhookServer::bind(
        config.webhook_listen,
        certs.clone(),
        webhooks::router(WebhookContext {
            client: client.clone(),
            operator_user: webhooks::own_user(&client).await.map_err(|source| {
                crate::runtime::error::ServerError::Kube {
                    what: "who the operator is (a SelfSubjectReview)".into(),
                    source,
                }
            })?,
            metrics: ctx.metrics.clone(),
        }),
    )
    .await?;
    let endpoint = match config.webhook_endpoint {
        WebhookEndpoint::Service(name) => Endpoint::Service {
            namespace: namespace.clone(),
            name,
        },
        WebhookEndpoint::Url(url) => Endpoint::Url(url),
        WebhookEndpoint::Bound => Endpoint::Url(format!(
            "https://{}",
            server.local_addr().unwrap_or(config.webhook_listen)
        )),
    };
    // Serving before registering: the bootstrap's create passes through these webhooks.
    let mut background = vec![tokio::spawn(server.run())];
    webhooks::register(&client, &endpoint, &certs.ca_bundle()).await?;
    webhooks::conversion::register(&client, &endpoint, &certs.ca_bundle()).await?;
    tracing::info!(listen = %config.webhook_listen, ?endpoint, "serving the admission webhooks");
    background.push(tokio::spawn(certs.clone().rotate_forever()));
    if let Some(addr) = config.metrics_listen {
        let server = MetricsServer::bind(addr, ctx.metrics.clone())
            .await?
            .secured(certs.clone(), Access::new(client.clone()));
        tracing::info!(listen = %addr, "serving /metrics (to readers the API server admits) and /healthz over TLS");
        background.push(tokio::spawn(server.run()));
    }
    if let Some(addr) = config.metrics_api_listen {
        background.push(tokio::spawn(
            crate::metricsapi::server::start(addr, &certs, &ctx).await?,
        ));
    }
    background.push(tokio::spawn(webhooks::ca::keep_fresh(
        client.clone(),
        namespace.clone(),
        endpoint,
        certs,
        Duration::from_secs(3600),
    )));

    let result = lead(
        &ctx,
        config.leader_election,
        config.probe,
        config.fleet,
        config
            .initial_discovery
            .then_some(config.discovery_cluster_name),
    )
    .await;
    for task in background {
        task.abort();
    }
    result
}

/// Waits for the Lease (or the shutdown), then runs the controllers while renewing it.
async fn lead(
    ctx: &Arc<Context>,
    election: Option<LeaderElection>,
    probe: ProbeSettings,
    fleet: crate::fleet::Settings,
    initial_discovery: Option<Option<String>>,
) -> Result<(), Error> {
    let lease = match election {
        None => None,
        Some(election) => {
            let (duration, grace) = lease_times(&election);
            let manager = lease_manager(ctx, &election).await?;
            leader_state(ctx, &election, false);
            tracing::info!(identity = %election.identity, lease = %election.lease, "waiting to lead");
            loop {
                tokio::select! {
                    leading = manager.changed() => if leading? { break },
                    _ = ctx.shutdown.clone().wait() => return Ok(()),
                }
            }
            tracing::info!(identity = %election.identity, "leading: the controllers start");
            leader_state(ctx, &election, true);
            Some((manager, duration, grace, election))
        }
    };
    if let Some(cluster_name) = initial_discovery {
        let client = ctx.kube.clone();
        let namespace = ctx.namespace.clone();
        tokio::spawn(async move {
            match discovery::bootstrap(&client, &namespace, cluster_name).await {
                Ok(done) => tracing::info!("initial discovery: {done}"),
                Err(why) => tracing::info!("initial discovery declined: {why}"),
            }
        });
    }
    let controllers = futures::future::join_all(controllers(ctx, probe, fleet));
    let Some((manager, duration, grace, election)) = lease else {
        controllers.await;
        return Ok(());
    };
    let outcome = tokio::select! {
        _ = controllers => Ok(()),
        lost = keep(&manager, duration, grace) => lost,
    };
    if outcome.is_err() {
        // Nothing may reconcile without the Lease; the controllers end where they are.
        ctx.shutdown.fire();
    }
    leader_state(ctx, &election, false);
    if let Err(e) = manager.release().await {
        tracing::warn!(error = %e, "releasing the leader Lease failed; a standby takes over when it expires");
    }
    outcome
}

/// `simplyblock_operator_leader_state{pod}`: whether this replica leads.
fn leader_state(ctx: &Context, election: &LeaderElection, leading: bool) {
    ctx.metrics.set(
        "simplyblock_operator_leader_state",
        vec![("pod", election.identity.clone())],
        if leading { 1.0 } else { 0.0 },
    );
}

/// Renews the Lease; returns when it is lost. A renewal is tried `grace` before the Lease
/// runs out, so when one fails the last good one was `duration - grace` ago; failures
/// that go on until the Lease could have run out lose it, since a standby may lead by then.
async fn keep(manager: &LeaseManager, duration: Duration, grace: Duration) -> Result<(), Error> {
    let mut failing_since: Option<tokio::time::Instant> = None;
    loop {
        let began = tokio::time::Instant::now();
        let result = manager.changed().await;
        // A call that lasted past a renewal renewed in between: any earlier streak is over.
        if began.elapsed() > duration - grace {
            failing_since = None;
        }
        match result {
            Ok(true) => failing_since = None,
            Ok(false) => return Err(Error::LostLeadership),
            Err(e) => {
                let now = tokio::time::Instant::now();
                let since = *failing_since
                    .get_or_insert_with(|| now.checked_sub(duration - grace).unwrap_or(now));
                if since.elapsed() >= duration {
                    tracing::error!(error = %e, "the leader Lease could not be renewed before it ran out");
                    return Err(Error::LostLeadership);
                }
                tracing::warn!(error = %e, "renewing the leader Lease failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// The Lease's duration, and how long before it runs out the holder renews it (a third).
fn lease_times(election: &LeaderElection) -> (Duration, Duration) {
    let duration = election.duration.as_secs().max(2);
    (
        Duration::from_secs(duration),
        Duration::from_secs((duration / 3).max(1)),
    )
}

async fn lease_manager(ctx: &Context, election: &LeaderElection) -> Result<LeaseManager, Error> {
    let (duration, grace) = lease_times(election);
    Ok(LeaseManagerBuilder::new(ctx.kube.clone(), &election.lease)
        .with_namespace(&ctx.namespace)
        .with_identity(&election.identity)
        .with_duration(duration.as_secs())
        .with_grace(grace.as_secs())
        .with_field_manager("simplyblock-operator-leader")
        .build()
        .await?)
}

/// Every controller of the operator.
fn controllers(
    ctx: &Arc<Context>,
    probe: ProbeSettings,
    fleet: crate::fleet::Settings,
) -> Vec<Task> {
    // The probe runs in the operator's own image, whose registry and tag the CSI driver
    // runs at unless its spec names an image.
    let operator_image = probe.image.clone();
    vec![
        Box::pin(controlplane::controller::run(ctx.clone())),
        Box::pin(controlplane::ops::run(ctx.clone())),
        Box::pin(cluster::controller::run(ctx.clone())),
        Box::pin(cluster::ops::run(ctx.clone())),
        Box::pin(deployment::controller::run(ctx.clone())),
        Box::pin(discovery::run(ctx.clone(), probe)),
        Box::pin(node::controller::run(ctx.clone())),
        Box::pin(node::ops::run(ctx.clone())),
        Box::pin(node::maintenance_trigger::run(ctx.clone())),
        Box::pin(crate::device::mirror::run(ctx.clone())),
        Box::pin(crate::device::ops::run(ctx.clone())),
        Box::pin(crate::workload::run(ctx.clone())),
        Box::pin(pool::controller::run(ctx.clone())),
        Box::pin(pool::ops::run(ctx.clone())),
        Box::pin(crate::volume_ops::run(ctx.clone(), operator_image.clone())),
        Box::pin(driver::controller::run(ctx.clone(), operator_image)),
        Box::pin(crate::dr::run(ctx.clone())),
        Box::pin(crate::backup::run(ctx.clone())),
        Box::pin(crate::fleet::run(ctx.clone(), fleet)),
    ]
}

//! StorageSiteDeployment end to end: one API server is the OCM hub and the site `site-a`
//! at once (the OCM stand-in applies the works and answers the views), with the site's
//! own controllers and sbsim behind them. A request discovers the site's workers into a
//! draft, is approved, and follows the deployment until the site's StorageCluster is
//! Online; deleting it leaves everything on the site. A request whose discovery the site
//! refuses fails with the site's words, and one for a cluster the hub does not know waits.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_api::cluster_deployment_config::{ClusterDeploymentConfig, DeploymentPhase};
use simplyblock_api::common::OpsPhase;
use simplyblock_api::operator_ops::OperatorOps;
use simplyblock_api::storage_node::NodePhase;
use simplyblock_api::storage_site_deployment::{FINALIZER, SitePhase, StorageSiteDeployment};
use simplyblock_api::{StorageCluster, StorageNode};
use simplyblock_operator::deployment::discovery::{self, ProbeSettings};
use simplyblock_operator::dr::site_deployment::{self, REQUEST_LABEL, discovery_name, work_name};
use simplyblock_operator::runtime::context::Context;
use simplyblock_operator::{cluster, deployment, node};
use simplyblock_simulator::{Server, Sim, SimConfig, jobs, labels};
use simplyblock_testenv::ocm;

use crate::support::{TOKEN, until, until_explained};

/// The site's namespace: where its operator runs and its draft is written.
const SITE_NS: &str = "sbsd-site";
/// Where the requests live on the hub.
const HUB_NS: &str = "sbsd-hub";
const SITE: &str = "site-a";
const WORKERS: [&str; 3] = ["sa-w1", "sa-w2", "sa-w3"];
const PROFILE: &str = "qemu-numa2-nvme";

/// The site: Nodes, sbsim with the workers' host trees, and the site operator's
/// controllers from discovery to an Online cluster.
struct Site {
    env: simplyblock_testenv::TestEnv,
    kube: kube::Client,
    /// sbsim; kept for as long as the site runs.
    _sim: Server,
    cp: simplyblock_controlplane::Client,
    _dir: tempfile::TempDir,
    _standins: Vec<simplyblock_testenv::standin::StandIn>,
}

async fn site() -> Site {
    crate::support::logs();
    // An API server of its own: sbsim runs every probe Job it sees, and the OCM agent
    // serves every managed cluster's works.
    let (env, kube) = crate::support::own_api_server(SITE_NS).await;
    let nodes: Api<Node> = Api::all(kube.clone());
    let mut fleet = String::from("workers:\n");
    for (i, w) in WORKERS.iter().enumerate() {
        let address = format!("10.50.0.{}", i + 1);
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": w, "labels": {"kubernetes.io/hostname": w}}}),
        )
        .expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("node");
        let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": address}],
                                       "conditions": [{"type": "Ready", "status": "True"}]}});
        nodes
            .patch_status(w, &PatchParams::default(), &Patch::Merge(status))
            .await
            .expect("node status");
        // No node lifecycle controller runs here to lift the not-ready taint.
        nodes
            .patch(
                w,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": null}})),
            )
            .await
            .expect("untaint");
        fleet.push_str(&format!(
            "  - hostname: {w}\n    addresses: [{address}]\n    profile: {PROFILE}\n"
        ));
    }

    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("fleet.yaml"), fleet).expect("fleet");
    let (tls, ca_pem) = crate::support::sbsim_tls_material();
    let sim = Server::start(
        Sim::open(SimConfig {
            tokens: vec![TOKEN.into()],
            time_scale: 100.0,
            fleet: Some(dir.path().join("fleet.yaml")),
            hosts_dir: Some(std::path::PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../fixtures/hosts"
            ))),
            ..SimConfig::new(dir.path().join("state"))
        })
        .expect("sim"),
        "127.0.0.1:0",
        Some(tls),
    )
    .await
    .expect("sbsim");
    tokio::spawn(labels::watch(sim.sim.clone(), kube.clone()));
    tokio::spawn(jobs::watch(sim.sim.clone(), kube.clone()));
    let mounted = crate::support::storage_nodes_mount(&kube, SITE_NS, &sim);
    let cp = crate::support::tls_cp_client(sim.addr, &ca_pem, TOKEN);

    let operator = crate::support::operator_kube_on(&env, SITE_NS).await;
    let ctx = Arc::new(
        Context::new(
            operator,
            cp.clone(),
            crate::support::MANAGED_TLS_ENDPOINT.into(),
            SITE_NS.into(),
        )
        .watching(SITE_NS)
        .with_snode_proxy(sim.addr),
    );
    let probe = ProbeSettings {
        image: "quay.io/simplyblock-io/simplyblock-operator:latest".into(),
        service_account: "simplyblock-nodeprobe".into(),
        ..ProbeSettings::default()
    };
    tokio::spawn(discovery::run(ctx.clone(), probe));
    tokio::spawn(deployment::controller::run(ctx.clone()));
    tokio::spawn(cluster::controller::run(ctx.clone()));
    tokio::spawn(cluster::ops::run(ctx.clone()));
    tokio::spawn(simplyblock_operator::workload::run(ctx.clone()));
    tokio::spawn(node::controller::run(ctx.clone()));
    tokio::spawn(simplyblock_operator::device::mirror::run(ctx.clone()));

    // The hub: OCM's CRDs, the site registered, and its work agent.
    env.install_crds(&ocm::hub_crds()).await.expect("OCM CRDs");
    ocm::add_managed_cluster(&kube, SITE)
        .await
        .expect("the managed cluster");
    let agent = ocm::work_agent(kube.clone());
    crate::support::namespace(&kube, HUB_NS).await;

    Site {
        env,
        kube,
        _sim: sim,
        cp,
        _dir: dir,
        _standins: vec![mounted, agent],
    }
}

impl Site {
    /// The StorageSiteDeployment controller on the hub, as the chart's ServiceAccount.
    async fn hub(&self) -> Arc<Context> {
        let operator = crate::support::operator_kube_on(&self.env, SITE_NS).await;
        let ctx = Arc::new(
            Context::new(
                operator,
                self.cp.clone(),
                crate::support::MANAGED_TLS_ENDPOINT.into(),
                SITE_NS.into(),
            )
            .watching(HUB_NS),
        );
        tokio::spawn(site_deployment::run(ctx.clone()));
        ctx
    }

    fn requests(&self) -> Api<StorageSiteDeployment> {
        Api::namespaced(self.kube.clone(), HUB_NS)
    }

    /// Waits until request `name` is in `phase`, and returns it.
    async fn phase(&self, name: &str, phase: SitePhase, within: Duration) -> StorageSiteDeployment {
        self.reaches(name, phase, within, |_| true).await
    }

    /// Waits until request `name` is in `phase` and `also` holds, and returns it.
    async fn reaches(
        &self,
        name: &str,
        phase: SitePhase,
        within: Duration,
        also: impl Fn(&StorageSiteDeployment) -> bool,
    ) -> StorageSiteDeployment {
        let last = std::sync::Mutex::new(None);
        until_explained(
            &format!("request {name} {phase:?}"),
            within,
            async || {
                let req = self.requests().get(name).await.ok()?;
                *last.lock().expect("lock") = req.status.clone();
                (req.status.as_ref()?.phase == phase && also(&req)).then_some(req)
            },
            || format!("last seen {:#?}", last.lock().expect("lock")),
        )
        .await
    }

    /// The reasons of the events on request `name`, oldest first.
    async fn phases_said(&self, name: &str) -> Vec<(String, String)> {
        let mut events: Vec<_> =
            Api::<k8s_openapi::api::events::v1::Event>::namespaced(self.kube.clone(), HUB_NS)
                .list(&ListParams::default())
                .await
                .expect("events")
                .items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
                .collect();
        events.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
        events
            .into_iter()
            .map(|e| (e.reason.unwrap_or_default(), e.type_.unwrap_or_default()))
            .collect()
    }
}

fn request(name: &str, spec: serde_json::Value) -> StorageSiteDeployment {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageSiteDeployment",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("request")
}

fn condition(req: &StorageSiteDeployment, type_: &str) -> (String, String) {
    req.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
        .map(|c| (c.status.clone(), c.reason.clone()))
        .unwrap_or_default()
}

#[tokio::test]
async fn a_site_is_discovered_drafted_approved_and_deployed_and_kept_when_the_request_goes() {
    let site = site().await;
    let requests = site.requests();
    let east = request(
        "east",
        json!({
            "cluster": SITE,
            "siteNamespace": SITE_NS,
            "discover": {"workers": WORKERS},
            "sizing": {"name": "sb-east", "maxSubsystemCount": 12},
        }),
    );
    let east = requests
        .create(&PostParams::default(), &east)
        .await
        .expect("the request");
    // Nothing has looked at it yet: Pending.
    assert_eq!(east.status.unwrap_or_default().phase, SitePhase::Pending);
    let hub = site.hub().await;

    // Drafted once the draft has nodes; the sizing is applied onto it right after.
    let drafted = site
        .reaches("east", SitePhase::Drafted, Duration::from_secs(120), |r| {
            let draft = r.status.as_ref().and_then(|s| s.draft.as_ref());
            draft.and_then(|d| d.cluster.as_deref()) == Some("sb-east")
        })
        .await;
    let status = drafted.status.clone().expect("status");
    assert!(
        drafted.finalizers().iter().any(|f| f == FINALIZER),
        "the request holds its release"
    );
    assert_eq!(
        status.work_name.as_deref(),
        Some(work_name(&drafted).as_str())
    );
    assert_eq!(status.observed_generation, drafted.metadata.generation);
    let draft = status.draft.clone().expect("the draft read back");
    assert_eq!(draft.name, "site-draft");
    assert!(!draft.node_sets.is_empty(), "{draft:?}");
    assert!(!draft.approved);
    assert!(
        status
            .message
            .as_deref()
            .is_some_and(|m| m.contains("spec.approved")),
        "{:?}",
        status.message
    );
    assert_eq!(
        condition(&drafted, "Delivered"),
        ("True".into(), "WorkApplied".into())
    );
    assert_eq!(
        condition(&drafted, "Discovered"),
        ("True".into(), "DraftHasNodes".into())
    );
    assert_eq!(
        condition(&drafted, "Approved"),
        ("False".into(), "AwaitingApproval".into())
    );
    assert_eq!(
        condition(&drafted, "Ready"),
        ("False".into(), "ClusterNotOnline".into())
    );

    // On the site: the discovery the work raised, and the draft it wrote with the sizing.
    let ops: Api<OperatorOps> = Api::namespaced(site.kube.clone(), SITE_NS);
    // The run writes the draft before its own status, and the hub may see the draft first.
    let run_name = discovery_name(&drafted);
    let run_status = until("the discovery run on the site Succeeded", async || {
        let status = ops.get(&run_name).await.ok()?.status?;
        (status.phase == OpsPhase::Succeeded).then_some(status)
    })
    .await;
    crate::kubectl::ready_on(
        site.env.kubeconfig_path(),
        &ops,
        "operatorops.storage.simplyblock.io",
        &run_name,
    )
    .await;
    assert_eq!(run_status.config_ref.as_deref(), Some("site-draft"));
    let docs: Api<ClusterDeploymentConfig> = Api::namespaced(site.kube.clone(), SITE_NS);
    let doc = docs.get("site-draft").await.expect("the site's draft");
    let template = doc.spec.cluster.clone().expect("a cluster template");
    assert_eq!(template.name, "sb-east");
    assert_eq!(template.max_subsystem_count, 12);
    let workers: Vec<&String> = doc
        .spec
        .node_sets
        .iter()
        .flat_map(|s| &s.groups)
        .flat_map(|g| &g.workers)
        .collect();
    assert_eq!(workers.len(), WORKERS.len(), "{:#?}", doc.spec);
    assert!(!doc.spec.approved, "nothing approved the draft yet");

    requests
        .patch(
            "east",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"approved": true}})),
        )
        .await
        .expect("approve");
    // Deploying passes while the site expands the draft; the events below show it.
    let online = site
        .phase("east", SitePhase::Online, Duration::from_secs(180))
        .await;
    crate::kubectl::ready_on(
        site.env.kubeconfig_path(),
        &requests,
        "storagesitedeployments.storage.simplyblock.io",
        "east",
    )
    .await;
    let status = online.status.clone().expect("status");
    assert_eq!(
        status.draft.as_ref().and_then(|d| d.phase),
        Some(DeploymentPhase::Expanded),
        "Online waits for the draft's deployment to end"
    );
    let cluster = status
        .storage_cluster
        .clone()
        .expect("the cluster read back");
    assert_eq!(cluster.name, "sb-east");
    assert_eq!(cluster.phase.as_deref(), Some("Online"));
    let uuid = cluster.uuid.clone().expect("the cluster's uuid");
    let in_sbsim = site
        .cp
        .list_clusters()
        .await
        .expect("sbsim's clusters")
        .into_iter()
        .find(|c| c.id.to_string() == uuid)
        .expect("the uuid is sbsim's cluster");
    assert_eq!(in_sbsim.id.to_string(), uuid);
    assert_eq!(cluster.nodes.len(), WORKERS.len(), "{cluster:?}");
    for n in &cluster.nodes {
        assert_eq!(n.phase.as_deref(), Some("Online"), "{n:?}");
        assert!(n.hostname.is_some(), "{n:?}");
    }
    for type_ in ["Delivered", "Discovered", "Approved", "Ready"] {
        assert_eq!(condition(&online, type_).0, "True", "{type_}: {status:#?}");
    }
    assert_eq!(
        condition(&online, "Ready"),
        ("True".into(), "ClusterOnline".into())
    );
    let said: Vec<String> = crate::support::until("the Online event", async || {
        let said = site.phases_said("east").await;
        said.iter().any(|(r, _)| r == "Online").then_some(said)
    })
    .await
    .into_iter()
    .map(|(reason, _)| reason)
    .filter(|r| ["Discovering", "Drafted", "Deploying", "Online", "Failed"].contains(&r.as_str()))
    .collect();
    assert_eq!(said, ["Discovering", "Drafted", "Deploying", "Online"]);
    // Settled: another pass writes nothing new.
    crate::support::converged(&hub.metrics, &requests, site_deployment::CONTROLLER, "east").await;

    // Deleting the request releases the work and the views, and orphans the site's objects.
    let uid = online.metadata.uid.clone().expect("uid");
    requests
        .delete("east", &Default::default())
        .await
        .expect("delete");
    until("the request to go", async || {
        requests.get_opt("east").await.ok()?.is_none().then_some(())
    })
    .await;
    let works: Api<DynamicObject> =
        Api::namespaced_with(site.kube.clone(), SITE, &ocm::manifest_work_resource());
    let views: Api<DynamicObject> = Api::namespaced_with(
        site.kube.clone(),
        SITE,
        &ocm::managed_cluster_view_resource(),
    );
    let mine = ListParams::default().labels(&format!("{REQUEST_LABEL}={uid}"));
    assert!(works.list(&mine).await.expect("works").items.is_empty());
    assert!(views.list(&mine).await.expect("views").items.is_empty());
    let kept = Api::<StorageCluster>::namespaced(site.kube.clone(), SITE_NS)
        .get("sb-east")
        .await
        .expect("the StorageCluster stays on the site");
    assert!(kept.metadata.deletion_timestamp.is_none());
    assert_eq!(
        kept.status.and_then(|s| s.uuid).as_deref(),
        Some(uuid.as_str())
    );
    let doc = docs.get("site-draft").await.expect("the draft stays");
    assert!(doc.metadata.deletion_timestamp.is_none() && doc.spec.approved);
    assert!(
        ops.get_opt(&discovery_name(&online))
            .await
            .expect("read")
            .is_some()
    );
    let nodes = Api::<StorageNode>::namespaced(site.kube.clone(), SITE_NS)
        .list(&ListParams::default())
        .await
        .expect("nodes")
        .items;
    assert_eq!(nodes.len(), WORKERS.len());
    assert!(nodes.iter().all(|n| {
        n.status
            .as_ref()
            .is_some_and(|s| s.phase == NodePhase::Online)
    }));
}

#[tokio::test]
async fn a_refused_discovery_fails_with_the_sites_words_and_an_unknown_cluster_waits() {
    let site = site().await;
    let requests = site.requests();
    // The site's OperatorOps takes workers by name or by label, never both.
    let west = request(
        "west",
        json!({
            "cluster": SITE,
            "siteNamespace": SITE_NS,
            "draftName": "west-draft",
            "discover": {"workers": ["sa-w1"], "nodeSelector": {"rack": "a"}},
        }),
    );
    requests
        .create(&PostParams::default(), &west)
        .await
        .expect("the request");
    site.hub().await;
    let failed = site
        .phase("west", SitePhase::Failed, Duration::from_secs(60))
        .await;
    let status = failed.status.clone().expect("status");
    let message = status.message.clone().unwrap_or_default();
    assert!(
        message.starts_with("the site refused the request's work: OperatorOps ")
            && message.contains("names workers and also carries a nodeSelector"),
        "{message}"
    );
    assert_eq!(
        condition(&failed, "Delivered"),
        ("False".into(), "WorkRefused".into())
    );
    assert_eq!(
        condition(&failed, "Discovered"),
        ("False".into(), "DiscoveryRunning".into())
    );
    let said = crate::support::until("the Failed event", async || {
        let said = site.phases_said("west").await;
        said.iter().any(|(r, _)| r == "Failed").then_some(said)
    })
    .await;
    assert!(
        said.iter().any(|(r, t)| r == "Failed" && t == "Warning"),
        "{said:?}"
    );
    let ops: Api<OperatorOps> = Api::namespaced(site.kube.clone(), SITE_NS);
    assert!(
        ops.get_opt(&discovery_name(&failed))
            .await
            .expect("read")
            .is_none(),
        "the site created nothing"
    );

    // A cluster the hub does not know waits in Pending, saying so.
    let north = request(
        "north",
        json!({"cluster": "site-z", "siteNamespace": SITE_NS}),
    );
    requests
        .create(&PostParams::default(), &north)
        .await
        .expect("the request");
    let pending = site
        .reaches("north", SitePhase::Pending, Duration::from_secs(60), |r| {
            r.status.as_ref().is_some_and(|s| s.message.is_some())
        })
        .await;
    assert_eq!(
        pending.status.and_then(|s| s.message).as_deref(),
        Some(
            "the hub has no namespace site-z for managed cluster site-z: register the cluster with the hub, or create a request naming a registered cluster"
        )
    );

    for name in ["west", "north"] {
        requests
            .delete(name, &Default::default())
            .await
            .expect("delete");
        until("the request to go", async || {
            requests.get_opt(name).await.ok()?.is_none().then_some(())
        })
        .await;
    }
}

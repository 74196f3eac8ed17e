//! The upgrade act: an installation of the Go operator, on an API server of its own and a
//! control plane of its own, moved onto this operator by `simplyblock-upgrade`: preflight
//! refuses while an operation runs and prints the plan once it ended, then the upgrade and
//! the migrate stages run, and the operator adopts the cluster it finds.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use simplyblock_api::{StorageCluster, StorageNode};
use simplyblock_controlplane::{
    Client, ClientConfig, ClusterCreate, ClusterStatus, NodeStatus, PoolCreate, StorageNodeAdd,
    Url, VolumeCreate,
};
use simplyblock_operator::assembly::LeaderElection;
use simplyblock_operator::runtime::context::Context;
use simplyblock_simulator::{Server, Sim, SimConfig};
use simplyblock_testenv::TestEnv;
use simplyblock_testenv::standin::{self, Pod};
use simplyblock_upgrade::go_installation::{self, Ids};
use simplyblock_upgrade::{Helm, Options, Stage, Target, steps};

use crate::{step, wait_for};

const NAMESPACE: &str = "simplyblock";
const TOKEN: &str = "simplyblock-demo-upgrade";

/// sbsim with two workers enrolled as the Go operator's node set enrolled them.
async fn control_plane(dir: &std::path::Path) -> anyhow::Result<(Server, Client)> {
    let fleet = dir.join("fleet.yaml");
    let mut workers = String::from("workers:\n");
    for i in 1..=2 {
        workers.push_str(&format!(
            "  - hostname: w{i}\n    addresses: [10.20.0.{i}]\n    devices: {{count: 2, size: 2T}}\n    labels: {{node-restriction.kubernetes.io/simplyblock-storage-node: {}}}\n",
            go_installation::NODE_SET
        ));
    }
    std::fs::write(&fleet, workers)?;
    let server = Server::start(
        Sim::open(SimConfig {
            tokens: vec![TOKEN.into()],
            time_scale: 1000.0,
            fleet: Some(fleet),
            ..SimConfig::new(dir.join("state"))
        })?,
        "127.0.0.1:0",
        None,
    )
    .await?;
    let mut config = ClientConfig::new(Url::parse(&format!("http://{}", server.addr))?, TOKEN);
    config.retry_backoff = Duration::from_millis(20);
    let client = Client::new(config)?;
    Ok((server, client))
}

/// Runs the act; prints what a person would see.
pub async fn act() -> anyhow::Result<()> {
    step(
        "upgrading from the Go operator: its installation on an API server and a control plane of their own",
    );
    let env: &'static TestEnv = Box::leak(Box::new(TestEnv::start().await?));
    env.install_crds(&go_installation::crds()).await?;
    let admin = env.client().await?;
    simplyblock_testenv::create_namespace(&admin, NAMESPACE).await?;
    let dir = tempfile::tempdir()?;
    let (server, cp) = control_plane(dir.path()).await?;

    // What the Go operator created in the control plane: the cluster, its nodes, a pool
    // and a volume.
    let cluster = cp
        .create_cluster(&ClusterCreate::new(go_installation::CLUSTER, 10, 8))
        .await?;
    for i in 1..=2 {
        cp.add_storage_node(
            cluster.id,
            &StorageNodeAdd::new(
                format!("w{i}.simplyblock-storage-node-api.{NAMESPACE}.svc.cluster.local:5000"),
                "eth0",
            ),
        )
        .await?;
    }
    wait_for("two online nodes", Duration::from_secs(60), async || {
        let nodes = cp.list_storage_nodes(cluster.id).await.ok()?;
        (nodes.len() == 2 && nodes.iter().all(|n| n.status == NodeStatus::Online)).then_some(())
    })
    .await?;
    cp.activate_cluster(cluster.id).await?;
    wait_for("the cluster active", Duration::from_secs(60), async || {
        (cp.get_cluster(cluster.id).await.ok()?.status == ClusterStatus::Active).then_some(())
    })
    .await?;
    let mut nodes: Vec<(String, String)> = cp
        .list_storage_nodes(cluster.id)
        .await?
        .into_iter()
        .map(|n| (n.hostname, n.id.to_string()))
        .collect();
    nodes.sort();
    let pool = cp
        .create_pool(
            cluster.id,
            &PoolCreate {
                name: go_installation::POOL.into(),
                ..PoolCreate::default()
            },
        )
        .await?;
    let volume = cp
        .create_volume(
            cluster.id,
            pool.id,
            &VolumeCreate {
                name: go_installation::VOLUME.into(),
                size: 1 << 30,
                ..VolumeCreate::default()
            },
        )
        .await?;
    let ids = Ids {
        cluster: cluster.id.to_string(),
        pool: pool.id.to_string(),
        nodes,
    };
    go_installation::fleet(&admin, NAMESPACE, &ids).await?;
    go_installation::release(&admin, NAMESPACE).await?;
    go_installation::legacy_volume(&admin, &ids.cluster, &volume.to_string()).await?;
    println!(
        "the Go operator's installation: StorageCluster/{} ({}), StorageNodeSet/{} with {} StorageNodes, StoragePool/{}, StorageClusterOps/{} (Succeeded) and StorageClusterOps/{} (Running), all stored at v1alpha1; its Deployment {}",
        go_installation::CLUSTER,
        ids.cluster,
        go_installation::NODE_SET,
        ids.nodes.len(),
        go_installation::POOL,
        go_installation::FINISHED_OPS,
        go_installation::RUNNING_OPS,
        go_installation::OPERATOR
    );

    step("simplyblock-upgrade preflight, while the Go operator still restarts the cluster's nodes");
    let target = Target {
        from_release: go_installation::RELEASE.into(),
        ..Target::default()
    };
    let options = Options::default();
    let report = simplyblock_upgrade::preflight(&admin, NAMESPACE, &target, &options).await?;
    for refusal in &report.refusals {
        println!("refused: {refusal}");
    }
    anyhow::ensure!(
        report.blocked(),
        "preflight did not refuse the running operation"
    );

    step("the rolling restart ends; simplyblock-upgrade preflight again: the plan to approve");
    go_installation::finish_running_operation(&admin, NAMESPACE).await?;
    let report = simplyblock_upgrade::preflight(&admin, NAMESPACE, &target, &options).await?;
    print!("{report}");
    anyhow::ensure!(!report.blocked(), "preflight still blocks");

    // The pod of this release's operator, once the upgrade installs its Deployment.
    let pod_cp = cp.clone();
    let endpoint = format!("http://{}", server.addr);
    let pod_admin = admin.clone();
    let _operator = standin::pod(
        admin.clone(),
        NAMESPACE.into(),
        "simplyblock-operator".into(),
        move || {
            let (admin, cp, endpoint) = (pod_admin.clone(), pod_cp.clone(), endpoint.clone());
            async move {
                simplyblock_testenv::chart::serve_webhooks_here(&admin).await;
                let kube = match env
                    .service_account_client(NAMESPACE, simplyblock_testenv::chart::OPERATOR_ACCOUNT)
                    .await
                {
                    Ok(kube) => kube,
                    Err(e) => {
                        // The upgrade then waits in vain for the webhook and says so.
                        eprintln!("    the upgraded operator cannot start: {e}");
                        return Pod::new(tokio::spawn(async {}), || {});
                    }
                };
                let context =
                    Context::new(kube, cp, endpoint, NAMESPACE.into()).watching(NAMESPACE);
                let shutdown = context.shutdown.clone();
                let task = tokio::spawn(async move {
                    if let Err(e) = simplyblock_operator::run(simplyblock_operator::Config {
                        leader_election: Some(LeaderElection {
                            lease: LeaderElection::LEASE.into(),
                            identity: "simplyblock-operator-upgraded".into(),
                            duration: Duration::from_secs(4),
                        }),
                        ..simplyblock_operator::Config::local(context)
                    })
                    .await
                    {
                        eprintln!("    the upgraded operator stopped: {e}");
                    }
                });
                Pod::new(task, move || shutdown.fire())
            }
        },
    );

    let ctx = simplyblock_upgrade::Context {
        client: admin.clone(),
        namespace: NAMESPACE.into(),
        helm: Helm {
            binary: simplyblock_testenv::assets::helm()?.display().to_string(),
            chart: Some(simplyblock_testenv::chart::dir().display().to_string()),
            release: target.release.clone(),
            values: Vec::new(),
            kubeconfig: Some(env.kubeconfig_path().display().to_string()),
        },
        wait: Duration::from_secs(120),
    };
    step(
        "simplyblock-upgrade upgrade --chart deploy/charts/simplyblock-operator --from-release simplyblock",
    );
    simplyblock_upgrade::run::run(&ctx, &steps::all(), Stage::Upgrade, &target, &options)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    step("simplyblock-upgrade migrate --confirm");
    simplyblock_upgrade::run::run(&ctx, &steps::all(), Stage::Migrate, &target, &options)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;

    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let mut stored = Vec::new();
    for name in simplyblock_api::converting_crd_names() {
        let versions = crds
            .get(&name)
            .await?
            .status
            .and_then(|s| s.stored_versions)
            .unwrap_or_default();
        stored.push(format!("{name} [{}]", versions.join(",")));
    }
    println!("stored versions: {}", stored.join(", "));
    let nodes = Api::<StorageNode>::namespaced(admin.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await?;
    for node in &nodes.items {
        let owner = node
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| format!("{}/{}", o.kind, o.name))
            .unwrap_or_default();
        println!(
            "StorageNode/{} at v1alpha2: cluster {}, {} vCPUs, owned by {owner}",
            node.metadata.name.as_deref().unwrap_or_default(),
            node.spec.cluster_ref,
            node.spec.config.sizing.vcpu_count
        );
    }
    let clusters: Api<StorageCluster> = Api::namespaced(admin.clone(), NAMESPACE);
    let nqn = wait_for(
        "the operator reporting on the adopted cluster",
        Duration::from_secs(60),
        async || {
            let status = clusters.get(go_installation::CLUSTER).await.ok()?.status?;
            (status.nqn.as_deref() == Some(cluster.nqn.as_str())).then_some(status.nqn)
        },
    )
    .await?;
    let creates = server
        .sim
        .calls
        .lock()
        .map(|log| log.since(0))
        .unwrap_or_default()
        .iter()
        .filter(|c| c.method == "POST" && c.path.trim_end_matches('/') == "/api/v2/clusters")
        .count();
    println!(
        "the operator adopted StorageCluster/{} ({}) from the control plane: cluster creates in its call log: {creates}",
        go_installation::CLUSTER,
        nqn.unwrap_or_default()
    );
    anyhow::ensure!(creates == 1, "the cluster was created again");
    drop(server);
    Ok(())
}

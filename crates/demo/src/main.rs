//! The demo: the whole product on one machine, against a real Kubernetes API server and
//! the simulated control plane.
//!
//! It starts the local API server, installs the CRDs, creates three worker Nodes and a
//! matching simulated fleet in sbsim (each worker's hardware is a host tree captured from
//! a real kernel), starts the operator (its webhooks over TLS and its controllers), has it
//! install the chart's ControlPlane (the stand-in reporting its workloads ready, sbsim
//! answering at its in-cluster endpoint through the operator's proxy flag), lets
//! the first-install discovery find the disks and write a deployment document, shows it
//! for review, approves it, and follows the deployment until the cluster is Online.

mod alerts;
mod backups;
mod day_two;
mod disaster_recovery;
mod metrics_api;
mod table;
mod upgrade;
mod volume;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::Parser;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, Patch, PatchParams};
use simplyblock_api::cluster_deployment_config::ClusterDeploymentConfig;
use simplyblock_api::common::OpsPhase;
use simplyblock_api::control_plane::{ControlPlane, ControlPlanePhase};
use simplyblock_api::operator_ops::OperatorOps;
use simplyblock_api::simplyblock_driver::{DriverPhase, SimplyblockDriver};
use simplyblock_api::storage_cluster::ClusterPhase;
use simplyblock_api::storage_pool::PoolPhase;
use simplyblock_api::{
    API_VERSION, StorageCluster, StorageClusterOps, StorageNode, StorageNodeOps, StoragePool,
};
use simplyblock_operator::assembly::LeaderElection;
use simplyblock_operator::runtime::context::Context;
use simplyblock_operator::runtime::link::Token;
use simplyblock_simulator::{Server, Sim, SimConfig, jobs, labels};
use simplyblock_testenv::standin::{self, StandIn};
use simplyblock_testenv::{TestEnv, chart};

/// The captured host trees the simulated workers are made of.
const HOSTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/hosts");
const PROFILE: &str = "qemu-numa2-nvme";
const NAMESPACE: &str = "simplyblock";
const WORKERS: [&str; 3] = ["worker-1", "worker-2", "worker-3"];
const TOKEN: &str = "simplyblock-demo";
/// The chart's values for the demo: the standalone profile, its management API served by
/// sbsim over mutual TLS with certificates from cert-manager (the chart's defaults).
const CHART_VALUES: &[(&str, &str)] = &[("deployment.profile", "standalone")];

#[derive(Parser)]
#[command(
    name = "simplyblock-demo",
    about = "Deploy simplyblock on a local API server and a simulated fleet"
)]
struct Cli {
    /// Run the deployment, print the result, and exit instead of waiting for Ctrl-C.
    #[arg(long)]
    once: bool,
    /// Sim seconds per real second: how fast the simulated hardware is.
    #[arg(long, default_value_t = 20.0)]
    time_scale: f64,
    #[command(flatten)]
    logs: simplyblock_telemetry::logs::LogArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    simplyblock_telemetry::logs::init(cli.logs.log_format, "warn,kube_client=off,kube_runtime=off");
    simplyblock_simulator::install_crypto_provider();

    step("starting a local Kubernetes API server (kube-apiserver + etcd on loopback)");
    let env = TestEnv::start().await?;
    let client = env.client().await?;
    env.install_crds(&simplyblock_api::crds()).await?;
    // No FoundationDB operator, no cert-manager and no kubelet run here: the stand-ins
    // report what they would of the control plane's workloads, and issue its certificates.
    env.install_crds(&[
        standin::foundationdb_crd(),
        standin::foundationdb_backup_crd(),
    ])
    .await?;
    env.install_crds(&simplyblock_testenv::certmanager::crds())
        .await?;
    // This API server is also the hub of Open Cluster Management, with both sites of the
    // disaster-recovery act as its managed clusters; the work agent plays their OCM agents.
    env.install_crds(&simplyblock_testenv::ocm::hub_crds())
        .await?;
    for site in disaster_recovery::SITES {
        simplyblock_testenv::ocm::add_managed_cluster(&client, site).await?;
    }
    let ocm_agent = simplyblock_testenv::ocm::work_agent(client.clone());
    let apply = PatchParams::apply("simplyblock-demo").force();
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}
    }))?;
    Api::<Namespace>::all(client.clone())
        .patch(NAMESPACE, &apply, &Patch::Apply(&ns))
        .await?;

    step(
        "creating a fleet of three workers: Kubernetes Nodes and their simulated hardware in sbsim",
    );
    let nodes: Api<Node> = Api::all(client.clone());
    let mut fleet = String::from("workers:\n");
    for (i, w) in WORKERS.iter().enumerate() {
        let address = format!("10.0.0.{}", i + 11);
        let node = serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": w, "labels": {"kubernetes.io/hostname": w}},
        });
        nodes.patch(w, &apply, &Patch::Apply(&node)).await?;
        let status = serde_json::json!({"status": {
            "addresses": [{"type": "InternalIP", "address": address}],
            "conditions": [{"type": "Ready", "status": "True"}],
        }});
        nodes
            .patch_status(w, &PatchParams::default(), &Patch::Merge(status))
            .await?;
        // A new Node is tainted not-ready until the node lifecycle controller (not run
        // here) sees its kubelet Ready; lift it as that controller would.
        nodes
            .patch(
                w,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"taints": null}})),
            )
            .await?;
        fleet.push_str(&format!(
            "  - hostname: {w}\n    addresses: [{address}]\n    profile: {PROFILE}\n"
        ));
    }
    // Site B's hosts, for the disaster-recovery act: they belong to the other site.
    fleet.push_str(&disaster_recovery::site_b_fleet());
    let sim_dir = env.dir().join("sbsim");
    std::fs::create_dir_all(&sim_dir)?;
    std::fs::write(sim_dir.join("fleet.yaml"), fleet)?;
    let sim = Server::start(
        Sim::open(SimConfig {
            tokens: vec![TOKEN.into()],
            time_scale: cli.time_scale,
            fleet: Some(sim_dir.join("fleet.yaml")),
            hosts_dir: Some(HOSTS.into()),
            volume_files: Some(sim_dir.join("volumes")),
            ..SimConfig::new(sim_dir.join("state"))
        })?,
        "127.0.0.1:0",
        None,
    )
    .await?;
    // Background tasks, stopped before the API server goes so none of them complains.
    let tasks = vec![
        tokio::spawn(labels::watch(sim.sim.clone(), client.clone())),
        // No kubelet runs on a simulated worker: sbsim runs the probe Jobs itself.
        tokio::spawn(jobs::watch(sim.sim.clone(), client.clone())),
    ];

    step(
        "installing the chart (helm template, profile standalone): the operator's accounts and roles, its Services",
    );
    // The chart's CRDs are the ones installed above (a test holds them equal). The
    // operator runs in this process in place of its Deployment, and registers its webhooks
    // at its own address in place of the chart's Service; the ControlPlane and the
    // SimplyblockDriver are applied once those webhooks answer.
    let rendered = chart::render(NAMESPACE, CHART_VALUES).map_err(anyhow::Error::msg)?;
    let (installs, rest): (Vec<_>, Vec<_>) = rendered
        .into_iter()
        .filter(|o| {
            let name = chart::kind_and_name(o);
            name != "Deployment/simplyblock-operator"
                && name != "ValidatingWebhookConfiguration/simplyblock-operator"
        })
        .partition(|o| {
            let kind = o.types.as_ref().map_or("", |t| t.kind.as_str());
            kind == "ControlPlane" || kind == "SimplyblockDriver"
        });
    chart::apply(&client, &rest, "helm", false).await?;
    // The chart's webhook configuration, empty: its webhooks name the Service, which this
    // API server cannot reach; the operator fills it in with its own address (its account
    // may update that configuration, never create one).
    chart::webhook_placeholder(&client).await?;
    // sbsim answers as the management API of the image the ControlPlane names.
    let version = installs
        .iter()
        .find_map(|o| o.data["spec"]["source"]["local"]["image"].as_str())
        .and_then(|image| image.rsplit_once(':'))
        .map(|(_, tag)| tag.to_owned());
    *sim.sim.version.lock().expect("sbsim's version") = version;
    for object in &rest {
        eprintln!("    applied {}", chart::kind_and_name(object));
    }

    step(
        "starting the operator as the chart's ServiceAccount (least privilege: no role to grant, no Secret outside its namespaces): admission webhooks over TLS, and its controllers",
    );
    // The operator the binary runs, leader election included, in this process.
    let operator_client = env
        .service_account_client(NAMESPACE, chart::OPERATOR_ACCOUNT)
        .await?;
    least_privilege(&operator_client).await?;
    // It finds the control plane the ControlPlane installs, at its in-cluster Service,
    // reached through sbsim as the management API.
    let context = Context::resolving(operator_client, NAMESPACE.into())
        // The chart's default: the operator serves its own namespace alone.
        .watching(NAMESPACE)
        .with_control_plane_token(Token::Value(TOKEN.into()))
        .with_control_plane_proxy(sim.addr)
        .with_snode_proxy(sim.addr);
    let shutdown = context.shutdown.clone();
    let operator_metrics = context.metrics.clone();
    let metrics_api_listen = metrics_api::listen()?;
    metrics_api::route(&client, NAMESPACE, metrics_api_listen).await?;
    let operator = tokio::spawn(simplyblock_operator::run(simplyblock_operator::Config {
        initial_discovery: true,
        metrics_api_listen: Some(metrics_api_listen),
        leader_election: Some(LeaderElection {
            lease: LeaderElection::LEASE.into(),
            identity: "simplyblock-operator-demo".into(),
            duration: Duration::from_secs(15),
        }),
        ..simplyblock_operator::Config::local(context)
    }));
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let holder = wait_for("the leader Lease", Duration::from_secs(60), async || {
        if operator.is_finished() {
            return Some(None);
        }
        let holder = leases
            .get_opt(LeaderElection::LEASE)
            .await
            .ok()??
            .spec?
            .holder_identity?;
        Some(Some(holder))
    })
    .await?;
    let Some(holder) = holder else {
        let ended = operator.await?;
        anyhow::bail!("the operator stopped before it led: {ended:?}");
    };
    eprintln!("    leader: {holder} holds Lease {}", LeaderElection::LEASE);

    step("applying the chart's ControlPlane/simplyblock and SimplyblockDriver/simplyblock");
    let _standin = StandIn::start(client.clone(), Some(NAMESPACE.into()));
    let _issuing = simplyblock_testenv::certmanager::start(client.clone(), NAMESPACE.into());
    // The management API serves the certificate cert-manager issued it and takes only
    // clients with one from the same CA, as its pods would.
    let api_mounted_by = sim.named_tls.clone();
    let _api_mounted = standin::mount_secrets(
        client.clone(),
        NAMESPACE.into(),
        simplyblock_operator::controlplane::names::API_TLS_SECRET,
        move |ns, files| {
            let name = format!(
                "{}.{ns}.svc",
                simplyblock_operator::controlplane::names::API
            );
            if let Err(e) = api_mounted_by.serve_mounted(&name, files, true) {
                eprintln!("    the management API cannot serve its certificate: {e}");
            }
        },
    );
    // The storage nodes serve the certificate their pods would mount (each its own, issued
    // by the operator's signer, or their cluster's serving Secret's) and take only callers
    // with a certificate from its CA.
    let mounted_by = sim.named_tls.clone();
    let _mounted = standin::storage_node_pods(
        client.clone(),
        NAMESPACE.into(),
        move |ns, worker, files| {
            let served = match worker {
                None => mounted_by.serve_storage_nodes(ns, files),
                Some(worker) => mounted_by.serve_storage_node(ns, worker, files),
            };
            if let Err(e) = served {
                eprintln!("    the storage nodes cannot serve their certificate: {e}");
            }
        },
    );
    chart::apply(&client, &installs, "helm", false).await?;
    let control_planes: Api<ControlPlane> = Api::namespaced(client.clone(), NAMESPACE);
    wait_for(
        "the control plane installed",
        Duration::from_secs(120),
        async || {
            let s = control_planes.get("simplyblock").await.ok()?.status?;
            (s.phase == ControlPlanePhase::Available).then_some(())
        },
    )
    .await?;
    // The stand-in reports the driver's StatefulSet and DaemonSet ready, as a kubelet would
    // once their pods run.
    let drivers: Api<SimplyblockDriver> = Api::namespaced(client.clone(), NAMESPACE);
    wait_for(
        "the CSI driver installed",
        Duration::from_secs(120),
        async || {
            let s = drivers.get("simplyblock").await.ok()?.status?;
            (s.phase == DriverPhase::Ready).then_some(())
        },
    )
    .await?;
    println!("\n$ kubectl get controlplanes,simplyblockdrivers -n {NAMESPACE}");
    for plural in ["controlplanes", "simplyblockdrivers"] {
        print!(
            "{}",
            table::get(
                &client,
                &format!("/apis/{API_VERSION}/namespaces/{NAMESPACE}/{plural}")
            )
            .await?
        );
    }

    step("a tenant tries a StorageCluster in its own namespace: the API server refuses it");
    let tenant = "team-a";
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": tenant}
    }))?;
    Api::<Namespace>::all(client.clone())
        .patch(tenant, &apply, &Patch::Apply(&ns))
        .await?;
    let intruder: StorageCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": API_VERSION, "kind": "StorageCluster",
        "metadata": {"name": "mine"},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 4}
    }))?;
    let tenants: Api<StorageCluster> = Api::namespaced(client.clone(), tenant);
    // The chart's policy is enforced once the API server has loaded it.
    let refused = wait_for(
        "the served-namespace policy",
        Duration::from_secs(30),
        async || match tenants.create(&Default::default(), &intruder).await {
            Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => Some(s.message),
            Ok(_) => {
                tenants.delete("mine", &Default::default()).await.ok();
                None
            }
            Err(_) => None,
        },
    )
    .await?;
    println!("\n$ kubectl -n {tenant} create -f storagecluster.yaml");
    println!("Error from server (Forbidden): {refused}");

    step("an image from a registry the release does not list (allowedRegistries): refused");
    let elsewhere: StorageCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": API_VERSION, "kind": "StorageCluster",
        "metadata": {"name": "elsewhere"},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 4,
                 "storageNodes": {"image": "registry.example.com/simplyblock:26.2.1"}}
    }))?;
    let served_clusters: Api<StorageCluster> = Api::namespaced(client.clone(), NAMESPACE);
    let refused = wait_for(
        "the allowed-registries policy",
        Duration::from_secs(30),
        async || match served_clusters
            .create(&Default::default(), &elsewhere)
            .await
        {
            Err(kube::Error::Api(s)) if s.message.contains("allowedRegistries") => Some(s.message),
            Ok(_) => {
                served_clusters
                    .delete("elsewhere", &Default::default())
                    .await
                    .ok();
                None
            }
            Err(_) => None,
        },
    )
    .await?;
    println!("\n$ kubectl -n {NAMESPACE} create -f storagecluster.yaml");
    println!("Error from server (Forbidden): {refused}");

    step("first install: discovering the fleet's disks (OperatorOps initial-discovery)");
    let ops: Api<OperatorOps> = Api::namespaced(client.clone(), NAMESPACE);
    let run = wait_for("the discovery run", Duration::from_secs(60), async || {
        let s = ops.get("initial-discovery").await.ok()?.status?;
        s.phase.is_terminal().then_some(s)
    })
    .await?;
    println!("\n$ kubectl get operatorops -n {NAMESPACE}");
    print!(
        "{}",
        table::get(
            &client,
            &format!("/apis/{API_VERSION}/namespaces/{NAMESPACE}/operatorops")
        )
        .await?
    );
    let Some(name) = run
        .config_ref
        .clone()
        .filter(|_| run.phase == OpsPhase::Succeeded)
    else {
        anyhow::bail!(
            "discovery did not write a document: {}",
            run.message.unwrap_or_default()
        );
    };
    println!("discovery: {}", run.message.unwrap_or_default());
    let docs: Api<ClusterDeploymentConfig> = Api::namespaced(client.clone(), NAMESPACE);
    wait_for(
        "the document's review",
        Duration::from_secs(30),
        async || docs.get(&name).await.ok()?.status?.message,
    )
    .await?;
    let cdc_path = format!("/apis/{API_VERSION}/namespaces/{NAMESPACE}/clusterdeploymentconfigs");
    println!("\n$ kubectl get clusterdeploymentconfigs -n {NAMESPACE}");
    print!("{}", table::get(&client, &cdc_path).await?);
    let review = docs
        .get(&name)
        .await?
        .status
        .and_then(|s| s.message)
        .unwrap_or_default();
    println!("review: {review}\n");

    step(&format!(
        "naming the cluster's backup store in {name} (an S3 bucket, its keys in Secret backup-store) and approving it"
    ));
    let store = backups::store(&client, &sim.url).await?;
    println!(
        "$ kubectl patch cdc {name} --type merge -p '{}'",
        serde_json::json!({"spec": {"cluster": {"backup": store}, "approved": true}})
    );
    docs.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(
            serde_json::json!({"spec": {"cluster": {"backup": store}, "approved": true}}),
        ),
    )
    .await?;

    let cluster_name = docs
        .get(&name)
        .await?
        .spec
        .cluster
        .map(|c| c.name)
        .ok_or_else(|| anyhow::anyhow!("the discovered document names no cluster"))?;
    let clusters: Api<StorageCluster> = Api::namespaced(client.clone(), NAMESPACE);
    let storage_nodes: Api<StorageNode> = Api::namespaced(client.clone(), NAMESPACE);
    let started = Instant::now();
    let mut last = String::new();
    let outcome = loop {
        let line = progress(&docs, &name, &cluster_name, &clusters, &storage_nodes).await;
        if line != last {
            println!("[{:>5.1}s] {line}", started.elapsed().as_secs_f64());
            last = line;
        }
        let phase = clusters
            .get_opt(&cluster_name)
            .await?
            .and_then(|c| c.status)
            .map(|s| s.phase);
        if phase == Some(ClusterPhase::Online) {
            break Ok(());
        }
        if started.elapsed() > Duration::from_secs(180) {
            break Err(anyhow::anyhow!(
                "the cluster did not come Online within 3 minutes; last: {last}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };

    println!("\n$ kubectl get storageclusters,storagenodes -n {NAMESPACE}");
    print!(
        "{}",
        table::get(
            &client,
            &format!("/apis/{API_VERSION}/namespaces/{NAMESPACE}/storageclusters")
        )
        .await?
    );
    print!(
        "{}",
        table::get(
            &client,
            &format!("/apis/{API_VERSION}/namespaces/{NAMESPACE}/storagenodes")
        )
        .await?
    );
    println!(
        "\n{}",
        summary(&cluster_name, &clusters, &storage_nodes).await?
    );
    println!(
        "{}",
        calls_by_client(
            &sim.sim,
            "/api/v2/",
            "management API calls (mutual TLS, cert-manager's CA)"
        )
    );
    println!(
        "{}",
        calls_by_client(
            &sim.sim,
            "/snode/",
            "storage-node API calls (mutual TLS, the cluster's CA)"
        )
    );
    let volume_files = sim_dir.join("volumes");
    let stand_ins = volume::StandIns {
        proxy: sim.addr,
        volume_files: &volume_files,
    };
    let served = match outcome {
        Ok(()) => day_one(
            &client,
            &env,
            &cluster_name,
            &env.dir().join("csi"),
            stand_ins,
            &sim.url,
        )
        .await
        .map(Some),
        Err(e) => Err(e),
    };
    if served.is_ok() {
        println!(
            "{}",
            calls_by_client(
                &sim.sim,
                "/api/v2/",
                "management API calls to the end, the CSI driver's among them (the demo's own reads of sbsim, at its own address, carry none)"
            )
        );
    }
    // A drive fails, and the chart's alert for it fires on the operator's metrics.
    let served = match served {
        Ok(served) => match alerts::act(&client, &sim.sim, operator_metrics).await {
            Ok(()) => Ok(served),
            Err(e) => {
                if let Some(served) = served {
                    let _ = served.stop().await;
                }
                Err(e)
            }
        },
        Err(e) => Err(e),
    };
    // Last, on an API server of its own: an installation of the Go operator moved over.
    let served = match served {
        Ok(served) => match upgrade::act().await {
            Ok(()) => Ok(served),
            Err(e) => {
                if let Some(served) = served {
                    let _ = served.stop().await;
                }
                Err(e)
            }
        },
        Err(e) => Err(e),
    };
    println!("kubeconfig: {}", env.kubeconfig_path().display());
    if served.is_ok() && !cli.once {
        println!("The API server, sbsim, the operator and the CSI driver run until Ctrl-C.");
        tokio::signal::ctrl_c().await?;
        step("stopping");
    }
    let outcome = match served {
        Ok(Some(served)) => served.stop().await,
        Ok(None) => Ok(()),
        Err(e) => Err(e),
    };
    shutdown.fire();
    let stopped = operator.await;
    for task in tasks {
        task.abort();
    }
    let outcome = match stopped {
        Ok(Ok(())) => outcome,
        Ok(Err(e)) => outcome.and(Err(e.into())),
        Err(e) => outcome.and(Err(e.into())),
    };
    drop(ocm_agent);
    drop(sim);
    drop(env);
    outcome
}

/// Who called `what` (the paths under `prefix`), by sbsim's call log: the name of the
/// client certificate each call presented.
fn calls_by_client(sim: &simplyblock_simulator::Sim, prefix: &str, what: &str) -> String {
    let calls = sim.calls.lock().map(|log| log.since(0)).unwrap_or_default();
    let mut by_client = std::collections::BTreeMap::<String, usize>::new();
    for call in calls.iter().filter(|c| c.path.starts_with(prefix)) {
        let client = call
            .client
            .clone()
            .unwrap_or_else(|| "no certificate".into());
        *by_client.entry(client).or_default() += 1;
    }
    let callers: Vec<String> = by_client
        .iter()
        .map(|(client, n)| format!("{n} as {client}"))
        .collect();
    format!(
        "{what}, by the client certificate presented: {}",
        callers.join(", ")
    )
}

/// After the cluster is Online: its default pool and StorageClass, a volume provisioned,
/// mounted and written through the CSI driver, then a RollingRestart of the cluster while
/// the volume stays mounted, and the file read back. The driver runs as the operator's
/// objects say, with `stand_ins` only; `control_plane` is sbsim's own address, where the
/// demo reads what the control plane holds.
async fn day_one(
    client: &kube::Client,
    env: &TestEnv,
    cluster: &str,
    csi_dir: &std::path::Path,
    stand_ins: volume::StandIns<'_>,
    control_plane: &str,
) -> anyhow::Result<volume::Served> {
    step("the operator gives the Online cluster its default pool and a StorageClass for it");
    let pools: Api<StoragePool> = Api::namespaced(client.clone(), NAMESPACE);
    let pool_name = simplyblock_operator::pool::class::default_pool_name(cluster);
    let class = wait_for("the default pool", Duration::from_secs(60), async || {
        let s = pools.get(&pool_name).await.ok()?.status?;
        (s.phase == PoolPhase::Ready)
            .then_some(s.default_storage_class_name)
            .flatten()
    })
    .await?;
    println!("\n$ kubectl get storagepools -n {NAMESPACE}");
    print!(
        "{}",
        table::get(
            client,
            &format!("/apis/{API_VERSION}/namespaces/{NAMESPACE}/storagepools")
        )
        .await?
    );
    println!("\n$ kubectl get storageclass {class}");
    print!(
        "{}",
        table::get(
            client,
            &format!("/apis/storage.k8s.io/v1/storageclasses/{class}")
        )
        .await?
    );

    step("provisioning a 1 GiB volume from that class through the CSI driver, and mounting it");
    // The node plugin reads its Node as the account the SimplyblockDriver gave it.
    let node_plugin = env
        .service_account_client(NAMESPACE, simplyblock_operator::driver::names::NODE_ACCOUNT)
        .await?;
    let mut served = volume::serve(
        client,
        &node_plugin,
        NAMESPACE,
        &class,
        "pvc-demo",
        csi_dir,
        stand_ins,
    )
    .await?;
    println!(
        "\nvolume {} ({} bytes, {}) from {class}",
        served.volume.volume_id, served.volume.capacity_bytes, served.fs_type
    );
    if let Some(note) = &served.note {
        println!("note: {note}");
    }
    let file = served.target.join("hello.txt");
    let greeting = format!(
        "written by the simplyblock demo into volume {}\n",
        served.volume.volume_id
    );
    if served.mounted {
        std::fs::write(&file, &greeting)?;
        let (used, total) = served.usage().await?;
        println!(
            "mounted at {}; wrote {}",
            served.target.display(),
            file.display()
        );
        println!(
            "$ cat {}\n{greeting}filesystem: {used} of {total} bytes used",
            file.display()
        );
    }

    step("reading capacity through the metrics.simplyblock.io aggregated API");
    metrics_api::show(client, NAMESPACE).await?;

    step("restarting the cluster's storage nodes one at a time (StorageClusterOps RollingRestart)");
    let ops: Api<StorageClusterOps> = Api::namespaced(client.clone(), NAMESPACE);
    let op_name = format!("{cluster}-rolling-restart");
    let op: StorageClusterOps = serde_json::from_value(serde_json::json!({
        "apiVersion": API_VERSION, "kind": "StorageClusterOps",
        "metadata": {"name": op_name},
        "spec": {"clusterRef": cluster, "action": "RollingRestart"},
    }))?;
    ops.create(&Default::default(), &op).await?;
    let started = Instant::now();
    let mut last = String::new();
    let done = loop {
        let s = ops.get(&op_name).await?.status.unwrap_or_default();
        let line = format!(
            "{:?}{}{}",
            s.phase,
            s.step
                .state
                .as_deref()
                .map(|x| format!("/{x}"))
                .unwrap_or_default(),
            s.message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        );
        if line != last {
            println!("[{:>5.1}s] {line}", started.elapsed().as_secs_f64());
            last = line;
        }
        if s.phase.is_terminal() {
            break s;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(180),
            "the rolling restart did not finish within 3 minutes; last: {last}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    println!("\n$ kubectl get storageclusterops -n {NAMESPACE}");
    print!(
        "{}",
        table::get(
            client,
            &format!("/apis/{API_VERSION}/namespaces/{NAMESPACE}/storageclusterops")
        )
        .await?
    );
    anyhow::ensure!(
        done.phase == OpsPhase::Succeeded,
        "the rolling restart ended {:?}: {}",
        done.phase,
        done.message.unwrap_or_default()
    );
    if served.mounted {
        let back = std::fs::read_to_string(&file)?;
        anyhow::ensure!(
            back == greeting,
            "the file changed across the restart: {back:?}"
        );
        println!(
            "after the rolling restart, {} still reads: {}",
            file.display(),
            back.trim_end()
        );
    }

    step("shutting one storage node down and restarting it (StorageNodeOps Shutdown, Restart)");
    let nodes: Api<StorageNode> = Api::namespaced(client.clone(), NAMESPACE);
    let node = nodes
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .min()
        .ok_or_else(|| anyhow::anyhow!("no storage node"))?;
    let node_ops: Api<StorageNodeOps> = Api::namespaced(client.clone(), NAMESPACE);
    for action in ["Shutdown", "Restart"] {
        let name = format!("{node}-{}", action.to_lowercase());
        let op: StorageNodeOps = serde_json::from_value(serde_json::json!({
            "apiVersion": API_VERSION, "kind": "StorageNodeOps",
            "metadata": {"name": name},
            "spec": {"nodeRef": node, "action": action},
        }))?;
        node_ops.create(&Default::default(), &op).await?;
        let done = follow(&node_ops, &name).await?;
        anyhow::ensure!(
            done.0 == OpsPhase::Succeeded,
            "StorageNodeOps {name} ended {:?}: {}",
            done.0,
            done.2.unwrap_or_default()
        );
    }
    println!("\n$ kubectl get storagenodeops -n {NAMESPACE}");
    print!(
        "{}",
        table::get(
            client,
            &format!("/apis/{API_VERSION}/namespaces/{NAMESPACE}/storagenodeops")
        )
        .await?
    );
    if served.mounted {
        let back = std::fs::read_to_string(&file)?;
        anyhow::ensure!(
            back == greeting,
            "the file changed across the node's restart: {back:?}"
        );
        println!(
            "after storage node {node} restarted, {} still reads: {}",
            file.display(),
            back.trim_end()
        );
    }
    day_two::run(client, control_plane, &served, &file, &greeting).await?;
    backups::run(client, cluster, &mut served, &file).await?;
    disaster_recovery::run(
        client,
        &node_plugin,
        control_plane,
        &mut served,
        &file,
        &greeting,
        csi_dir,
        stand_ins,
    )
    .await?;
    Ok(served)
}

/// Prints a StorageNodeOps' phase, step and message as they change, until it ends;
/// returns the last of them.
async fn follow(
    api: &Api<StorageNodeOps>,
    name: &str,
) -> anyhow::Result<(OpsPhase, Option<String>, Option<String>)> {
    let s = day_two::follow_until(api, name, |_| false).await?;
    Ok((s.phase, s.step.state, s.message))
}

/// Shows that the operator's account is refused the first steps towards cluster-admin
/// (dry runs, so nothing is written even if one were let through, which fails the demo).
async fn least_privilege(operator: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    use kube::api::PostParams;
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "simplyblock-operator-more"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": chart::OPERATOR_ACCOUNT, "namespace": NAMESPACE}],
    }))?;
    let secret: Secret =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "simplyblock-probe"}}))?;
    let attempts = [
        (
            "bind cluster-admin to itself",
            Api::<ClusterRoleBinding>::all(operator.clone())
                .create(&dry, &binding)
                .await
                .map(|_| ()),
        ),
        (
            "write a Secret in kube-system",
            Api::<Secret>::namespaced(operator.clone(), "kube-system")
                .create(&dry, &secret)
                .await
                .map(|_| ()),
        ),
    ];
    for (what, result) in attempts {
        match result {
            Err(kube::Error::Api(status)) if status.code == 403 => {
                eprintln!("    the operator's account may not {what}: Forbidden");
            }
            other => anyhow::bail!("the operator's account was not refused to {what}: {other:?}"),
        }
    }
    Ok(())
}

fn step(text: &str) {
    eprintln!("==> {text}");
}

async fn wait_for<T>(
    what: &str,
    limit: Duration,
    mut f: impl AsyncFnMut() -> Option<T>,
) -> anyhow::Result<T> {
    let started = Instant::now();
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if started.elapsed() > limit {
            anyhow::bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One line a person can follow: the document's step, the cluster's phase, the nodes'.
async fn progress(
    docs: &Api<ClusterDeploymentConfig>,
    name: &str,
    cluster: &str,
    clusters: &Api<StorageCluster>,
    nodes: &Api<StorageNode>,
) -> String {
    let doc = docs
        .get(name)
        .await
        .ok()
        .and_then(|d| d.status)
        .unwrap_or_default();
    let mut line = format!(
        "document {:?}{}",
        doc.phase,
        doc.step
            .state
            .as_deref()
            .map(|s| format!("/{s}"))
            .unwrap_or_default()
    );
    if let Some(c) = clusters.get_opt(cluster).await.ok().flatten() {
        let s = c.status.unwrap_or_default();
        line.push_str(&format!(
            "; cluster {:?}{}",
            s.phase,
            s.step
                .state
                .as_deref()
                .map(|x| format!("/{x}"))
                .unwrap_or_default()
        ));
    }
    let mut phases: BTreeMap<String, usize> = BTreeMap::new();
    for n in nodes
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let s = n.status.unwrap_or_default();
        let key = match s.step.state {
            Some(step) => format!("{:?}/{step}", s.phase),
            None => format!("{:?}", s.phase),
        };
        *phases.entry(key).or_default() += 1;
    }
    if !phases.is_empty() {
        let parts: Vec<String> = phases.iter().map(|(k, n)| format!("{n} {k}")).collect();
        line.push_str(&format!("; nodes {}", parts.join(", ")));
    }
    line
}

/// The closing line: the cluster, its phase, and its nodes' phases.
async fn summary(
    cluster: &str,
    clusters: &Api<StorageCluster>,
    nodes: &Api<StorageNode>,
) -> anyhow::Result<String> {
    let c = clusters.get(cluster).await?;
    let s = c.status.unwrap_or_default();
    let node_phases: Vec<String> = nodes
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .map(|n| {
            format!(
                "{} {:?}",
                n.spec.worker_node,
                n.status.map(|s| s.phase).unwrap_or_default()
            )
        })
        .collect();
    Ok(format!(
        "cluster {cluster}: {:?} ({}); nodes: {}",
        s.phase,
        s.status.as_deref().unwrap_or("no control-plane status"),
        node_phases.join(", ")
    ))
}

//! `testenv`: a local Kubernetes API server for people.
//!
//! `testenv up` starts etcd and kube-apiserver, prints the kubeconfig path and keeps them
//! running until interrupted; Ctrl-C stops both and removes their files.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use simplyblock_testenv::TestEnv;

#[derive(Parser)]
#[command(
    name = "testenv",
    about = "A local kube-apiserver and etcd on loopback"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
    #[command(flatten)]
    logs: simplyblock_telemetry::logs::LogArgs,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the API server, print its kubeconfig path, run until Ctrl-C.
    Up {
        /// Install every CustomResourceDefinition in these YAML files or directories.
        #[arg(long = "crds")]
        crds: Vec<PathBuf>,
    },
    /// A one-node cluster on this machine (root): kubelet, containerd, CNI, kube-proxy,
    /// the scheduler and the controller manager beside the API server.
    Node {
        #[command(subcommand)]
        command: NodeCmd,
    },
    /// Build (or find in the cache) the CSI sidecars this machine can build, and print
    /// each as `<image> <binary>`, for scripts/build-images.sh.
    Sidecars,
    /// Build (or find in the cache) CoreDNS, the node's cluster DNS, and print it as
    /// `<image> <binary>`, for scripts/build-images.sh.
    Coredns,
    /// Build (or find in the cache) kube-apiserver, etcd, csi-sanity, helm, promtool, kubectl
    /// and a node's binaries (kubelet, kube-controller-manager, kube-scheduler), then print
    /// their paths.
    Build,
    /// Write the chart's README.md from its values.schema.json and values.yaml.
    ChartReadme,
}

#[derive(Subcommand)]
enum NodeCmd {
    /// Clean what an earlier run left, start the node, import the images, print the
    /// kubeconfig path, run until Ctrl-C (which removes everything again).
    Up {
        /// A directory of OCI image archives (`*.oci.tar`) to import; it must hold the
        /// pause image. `scripts/build-images.sh` writes them.
        #[arg(long, default_value = "target/images")]
        images: PathBuf,
    },
    /// Remove everything a node made: processes, containers, mounts, network devices,
    /// iptables rules, cgroups, files, kernel settings.
    Down,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // kube logs every refused connection while the API server is still starting.
    simplyblock_telemetry::logs::init(cli.logs.log_format, "warn,kube_client=off");
    match cli.command {
        Cmd::ChartReadme => {
            let path = simplyblock_testenv::chart_readme::write().map_err(anyhow::Error::msg)?;
            println!("wrote {}", path.display());
        }
        Cmd::Build => {
            let bins = tokio::task::spawn_blocking(simplyblock_testenv::assets::ensure).await??;
            println!("kube-apiserver: {}", bins.kube_apiserver.display());
            println!("etcd: {}", bins.etcd.display());
            let sanity =
                tokio::task::spawn_blocking(simplyblock_testenv::assets::csi_sanity).await??;
            println!("csi-sanity: {}", sanity.display());
            let helm = tokio::task::spawn_blocking(simplyblock_testenv::assets::helm).await??;
            println!("helm: {}", helm.display());
            let promtool =
                tokio::task::spawn_blocking(simplyblock_testenv::assets::promtool).await??;
            println!("promtool: {}", promtool.display());
            let kubectl =
                tokio::task::spawn_blocking(simplyblock_testenv::assets::kubectl).await??;
            println!("kubectl: {}", kubectl.display());
            let node = tokio::task::spawn_blocking(simplyblock_testenv::assets::node).await??;
            println!("kubelet: {}", node.kubelet.display());
            println!(
                "kube-controller-manager: {}",
                node.kube_controller_manager.display()
            );
            println!("kube-scheduler: {}", node.kube_scheduler.display());
            println!("kube-proxy: {}", node.kube_proxy.display());
        }
        Cmd::Sidecars => {
            for sidecar in
                tokio::task::spawn_blocking(simplyblock_testenv::assets::sidecars).await??
            {
                println!("{} {}", sidecar.image, sidecar.binary.display());
            }
        }
        Cmd::Coredns => {
            let binary =
                tokio::task::spawn_blocking(simplyblock_testenv::assets::coredns).await??;
            println!(
                "{} {}",
                simplyblock_testenv::assets::COREDNS_IMAGE,
                binary.display()
            );
        }
        Cmd::Node {
            command: NodeCmd::Down,
        } => {
            tokio::task::spawn_blocking(simplyblock_testenv::node::down).await??;
            println!("the node and everything it made are gone");
        }
        Cmd::Node {
            command: NodeCmd::Up { images },
        } => {
            let node = simplyblock_testenv::node::Node::up(&images).await?;
            let env = node.env();
            println!(
                "node {} is Ready at {}",
                simplyblock_testenv::node::NODE_NAME,
                simplyblock_testenv::node::NODE_IP
            );
            println!("API server: {}", env.url());
            println!("kubeconfig: {}", env.kubeconfig_path().display());
            for (name, pid) in node.pids() {
                println!("process: {name} {pid}");
            }
            println!(
                "try: KUBECONFIG={} kubectl get nodes,pods -A",
                env.kubeconfig_path().display()
            );
            println!("Ctrl-C stops it and removes everything it made.");
            tokio::signal::ctrl_c().await?;
            tokio::task::spawn_blocking(move || drop(node)).await?;
            eprintln!("stopped");
        }
        Cmd::Up { crds } => {
            let env = TestEnv::start().await?;
            let crds = read_crds(&crds)?;
            env.install_crds(&crds).await?;
            println!("API server: {}", env.url());
            println!("kubeconfig: {}", env.kubeconfig_path().display());
            let (apiserver, etcd) = env.pids();
            println!("processes: kube-apiserver {apiserver}, etcd {etcd}");
            println!(
                "try: KUBECONFIG={} kubectl get ns",
                env.kubeconfig_path().display()
            );
            println!("Ctrl-C stops it and removes its files.");
            tokio::signal::ctrl_c().await?;
            drop(env);
            eprintln!("stopped");
        }
    }
    Ok(())
}

fn read_crds(paths: &[PathBuf]) -> anyhow::Result<Vec<CustomResourceDefinition>> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(path)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .collect();
            entries.sort();
            files.extend(entries);
        } else {
            files.push(path.clone());
        }
    }
    let mut crds = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        let docs: Vec<CustomResourceDefinition> = serde_saphyr::from_str_multiple(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        crds.extend(docs);
    }
    Ok(crds)
}

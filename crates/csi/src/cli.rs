//! The driver's command line: its flags, the environment variables the SimplyblockDriver's
//! manifests set, and the driver they describe. The binary parses its own; whoever runs the
//! driver as a plugin container would (the demo, tests) parses the container's
//! ([`Args::from_container`]), so both run what the manifests say.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{CommandFactory, Parser};

use crate::attach::Attacher;
use crate::attach::loopdev::LoopAttacher;
use crate::attach::nvmeof::NvmeofAttacher;
use crate::clusters::{ClusterEntry, Clusters, DEFAULT_SECRET_PATH, TlsConnect, Transport};
use crate::recovery::RecoveryConfig;
use crate::{Driver, Mode, NodeConfig, handle, topology};

/// The driver's metrics port: next to the node-driver-registrar's health port (9809),
/// and free on a worker's host network, where the node plugin runs.
pub const DEFAULT_METRICS_ADDRESS: &str = ":9810";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AttacherKind {
    /// NVMe/TCP through /dev/nvme-fabrics (production).
    Nvmeof,
    /// Loop devices over the simulator's volume files (tests, demo).
    Loop,
}

#[derive(Parser, Debug, Clone)]
#[command(
    name = "simplyblock-csi",
    about = "The simplyblock CSI driver (csi.simplyblock.io)"
)]
pub struct Args {
    /// The CSI endpoint the sidecars connect to.
    #[arg(long, env = "CSI_ENDPOINT", default_value = "unix:///csi/csi.sock")]
    pub endpoint: String,
    /// Which services to serve.
    #[arg(long, value_enum, default_value = "both")]
    pub mode: Mode,
    #[arg(long, default_value = handle::DRIVER_NAME)]
    pub driver_name: String,
    /// This node's name (the Kubernetes node name); required in node mode.
    #[arg(long, env = "NODE_ID")]
    pub node_id: Option<String>,
    /// The CSI secret (Secret simplyblock-csi-secret-v2, key secret.json).
    #[arg(long, env = "SPDKCSI_SECRET", default_value = DEFAULT_SECRET_PATH)]
    pub secret_file: PathBuf,
    /// A bearer token file that replaces every cluster_secret when non-empty.
    #[arg(long, env = "SPDKCSI_API_TOKEN_PATH")]
    pub api_token_file: Option<PathBuf>,
    /// A cluster to serve in addition to the secret's (with --cluster-endpoint and
    /// --cluster-secret-file).
    #[arg(long, requires = "cluster_endpoint")]
    pub cluster_id: Option<uuid::Uuid>,
    /// The control plane's address for --cluster-id, e.g. https://simplyblock-webappapi:5000.
    #[arg(long, requires = "cluster_id")]
    pub cluster_endpoint: Option<String>,
    /// A file holding the bearer secret for --cluster-id: a secret is never a flag, which
    /// every user of the machine reads in /proc/<pid>/cmdline.
    #[arg(long, env = "SIMPLYBLOCK_CLUSTER_SECRET_FILE", requires = "cluster_id")]
    pub cluster_secret_file: Option<PathBuf>,
    /// How the control planes are reached: `disabled` (an http:// endpoint in plain, an
    /// https:// one verified), `anonymous` (TLS only: an http:// endpoint is refused) or
    /// `authenticated` (TLS only, presenting --client-cert-file). The SimplyblockDriver
    /// sets it from spec.tls.
    #[arg(long, env = "SB_TLS_CONNECT", value_enum, default_value = "disabled")]
    pub tls_connect: TlsConnect,
    /// PEM bundle of the CAs that sign the control planes' certificates, read again when
    /// it changes. Without it, https:// endpoints are verified against the system's CA
    /// store.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// PEM certificate chain presented to the control planes (mutual TLS), read again
    /// when it changes.
    #[arg(long, requires = "client_key_file")]
    pub client_cert_file: Option<PathBuf>,
    /// The PEM private key of --client-cert-file.
    #[arg(long, requires = "client_cert_file")]
    pub client_key_file: Option<PathBuf>,
    /// Connect to the control planes through this address, as an HTTP proxy (a CONNECT
    /// tunnel for https), instead of resolving their hosts. The endpoint's URL, and the
    /// name its certificate is checked against, stay as the CSI secret gives them: for a
    /// driver outside the cluster whose control plane is known by its in-cluster Service
    /// name.
    #[arg(long)]
    pub control_plane_proxy: Option<SocketAddr>,
    /// Where `GET /metrics` is served (OpenMetrics text, plain HTTP): `:PORT` on every
    /// interface, `HOST:PORT`, or empty to serve none.
    #[arg(long, default_value = DEFAULT_METRICS_ADDRESS)]
    pub metrics_address: String,
    #[arg(long, value_enum, default_value = "nvmeof")]
    pub attacher: AttacherKind,
    /// Directory of the volume files (loop attacher).
    #[arg(long, required_if_eq("attacher", "loop"))]
    pub loop_dir: Option<PathBuf>,
    /// Where the node keeps its stage records.
    #[arg(long, default_value = "/var/lib/simplyblock-csi")]
    pub state_dir: PathBuf,
    /// The host NQN; by default derived from the Node's UID (or the node name without Kubernetes).
    #[arg(long)]
    pub host_nqn: Option<String>,
    /// The NVMe host id sent with the host NQN; by default the UUID the host NQN carries
    /// (the Node's UID), or one derived from the NQN's text.
    #[arg(long)]
    pub host_id: Option<uuid::Uuid>,
    /// Read the Node's labels and UID from Kubernetes (in-cluster config or $KUBECONFIG),
    /// and in the controller the claims it creates volumes for (their annotations set
    /// per-volume controls). `--kubernetes=false` skips it: topology is then the hostname
    /// segment only, and claims set no controls. The
    /// default is true inside a pod (KUBERNETES_SERVICE_HOST set), else false.
    #[arg(long, action = clap::ArgAction::Set, default_value_t = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some())]
    pub kubernetes: bool,
    /// Node mode: how often the paths of each staged volume are compared with the ones
    /// the control plane publishes, and a missing one connected again.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub reconnect_interval: Duration,
    /// Node mode (with Kubernetes): how often the pods using a volume that lost every
    /// path are looked for, to restart those that opt in.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub guardian_interval: Duration,
    /// Node mode: how long a volume stays without any live path before the pods using it
    /// are restarted, so a cluster on its way to suspended is not met half-way.
    #[arg(long, env = "GUARDIAN_BROKEN_LVOL_GRACE_PERIOD", default_value = "90s", value_parser = parse_duration)]
    pub path_loss_grace: Duration,
    /// Node mode: the least time between two restarts of the same pod.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub restart_backoff: Duration,
    #[command(flatten)]
    pub logs: simplyblock_telemetry::logs::LogArgs,
}

/// A duration such as `3s`, `90s` or `5m`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let span: jiff::Span = text
        .parse()
        .map_err(|e| format!("{text:?} is not a duration such as 3s or 5m: {e}"))?;
    let signed = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .map_err(|e| e.to_string())?;
    Duration::try_from(signed).map_err(|e| format!("{text:?}: {e}"))
}

impl Args {
    /// The arguments a container with `args` and `env` runs the driver with: `$(VAR)` in
    /// an argument is replaced by the variable's value, as the kubelet does, and a
    /// variable the driver reads (`SB_TLS_CONNECT`, `NODE_ID`, ...) counts as its flag
    /// unless the flag is given.
    pub fn from_container(args: &[String], env: &[(String, String)]) -> Result<Args, clap::Error> {
        let mut argv: Vec<String> = args.iter().map(|a| expand(a, env)).collect();
        let command = Args::command();
        for (name, value) in env {
            let Some(long) = command
                .get_arguments()
                .find(|a| a.get_env().is_some_and(|e| e == name.as_str()))
                .and_then(|a| a.get_long())
            else {
                continue;
            };
            let flag = format!("--{long}");
            let given = argv
                .iter()
                .any(|a| *a == flag || a.starts_with(&format!("{flag}=")));
            if !given {
                argv.push(format!("{flag}={}", expand(value, env)));
            }
        }
        Args::try_parse_from(std::iter::once("simplyblock-csi".to_owned()).chain(argv))
    }

    /// How the control planes are reached.
    pub fn transport(&self) -> Transport {
        Transport {
            tls: self.tls_connect,
            ca_file: self.ca_file.clone(),
            client_cert_file: self.client_cert_file.clone(),
            client_key_file: self.client_key_file.clone(),
            proxy: self.control_plane_proxy,
        }
    }

    /// The clusters to serve. Unreadable or malformed files, and endpoints the transport
    /// refuses, are errors here, where they are seen; later changes are followed, and a
    /// bad one is logged while the last good list is kept.
    pub fn clusters(&self) -> anyhow::Result<Clusters> {
        let cluster_secret = match &self.cluster_secret_file {
            None => String::new(),
            Some(path) => std::fs::read_to_string(path)
                .map(|s| s.trim().to_owned())
                .map_err(|e| {
                    anyhow::anyhow!(
                        "cannot read the cluster secret file {} ({e}); mount it there or pass another --cluster-secret-file",
                        path.display()
                    )
                })?,
        };
        let extra = match (self.cluster_id, &self.cluster_endpoint) {
            (Some(id), Some(ep)) => Some(ClusterEntry {
                cluster_id: id,
                cluster_endpoint: ep.clone(),
                cluster_secret,
                local: true,
            }),
            _ => None,
        };
        Ok(Clusters::from_files(
            &self.secret_file,
            self.api_token_file.as_deref(),
            extra,
            self.transport(),
        )?)
    }

    /// Where `/metrics` is served, if anywhere.
    pub fn metrics_address(&self) -> anyhow::Result<Option<SocketAddr>> {
        crate::metrics_http::parse_address(&self.metrics_address).map_err(anyhow::Error::msg)
    }

    /// The socket the driver serves on.
    pub fn socket(&self) -> crate::Result<PathBuf> {
        crate::socket_path(&self.endpoint)
    }

    /// The driver these arguments describe. With `--kubernetes`, `kube` reads the Node's
    /// labels and UID in node mode, and the claims in controller mode (the binary builds
    /// it from its environment).
    pub async fn driver(&self, kube: Option<kube::Client>) -> anyhow::Result<Driver> {
        let clusters = Arc::new(self.clusters()?);
        let node = if self.mode.node() {
            let Some(node_id) = self.node_id.clone() else {
                anyhow::bail!("node mode needs --node-id (or NODE_ID), the Kubernetes node name");
            };
            let facts = match (self.kubernetes, &kube) {
                // Registering without topology breaks provisioning: stop instead.
                (true, Some(client)) => topology::read_node(client.clone(), &node_id).await?,
                (true, None) => anyhow::bail!(
                    "--kubernetes needs a Kubernetes client to read Node {node_id}; pass --kubernetes=false to serve without topology"
                ),
                (false, _) => topology::NodeFacts::default(),
            };
            let host_nqn = self.host_nqn.clone().unwrap_or_else(|| {
                handle::host_nqn(
                    &facts
                        .uid
                        .clone()
                        .unwrap_or_else(|| handle::uuid_for_name(&node_id).to_string()),
                )
            });
            let attacher: Arc<dyn Attacher> = match self.attacher {
                AttacherKind::Nvmeof => Arc::new(NvmeofAttacher {
                    host_id: self.host_id,
                    ..NvmeofAttacher::default()
                }),
                AttacherKind::Loop => {
                    Arc::new(LoopAttacher::new(self.loop_dir.clone().unwrap_or_default()))
                }
            };
            Some(NodeConfig {
                segments: topology::segments(&facts.labels, &node_id),
                node_id,
                host_nqn,
                state_dir: self.state_dir.clone(),
                attacher,
                recovery: RecoveryConfig {
                    reconnect_interval: self.reconnect_interval,
                    guardian_interval: self.guardian_interval,
                    path_loss_grace: self.path_loss_grace,
                    restart_backoff: self.restart_backoff,
                },
                kube: if self.kubernetes { kube.clone() } else { None },
            })
        } else {
            None
        };
        Ok(Driver::new(
            self.driver_name.clone(),
            self.mode,
            clusters,
            node,
            kube.filter(|_| self.kubernetes).map(crate::pvc::ApiServer),
        ))
    }
}

/// `text` with each `$(NAME)` of a variable in `env` replaced by its value; `$$` stands
/// for `$`, and any other reference stays as written (the kubelet's rules).
fn expand(text: &str, env: &[(String, String)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        let reference = after.strip_prefix('(').and_then(|inner| {
            inner
                .find(')')
                .map(|end| (&inner[..end], &inner[end + 1..]))
        });
        match reference.and_then(|(name, tail)| {
            env.iter()
                .find(|(n, _)| n == name)
                .map(|(_, value)| (value, tail))
        }) {
            Some((value, tail)) => {
                out.push_str(value);
                rest = tail;
            }
            None => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn references_expand_as_the_kubelet_expands_them() {
        let e = env(&[("NODE_ID", "worker-1")]);
        assert_eq!(expand("--node-id=$(NODE_ID)", &e), "--node-id=worker-1");
        assert_eq!(
            expand("$(MISSING)/$$(NODE_ID)/$", &e),
            "$(MISSING)/$(NODE_ID)/$"
        );
        assert_eq!(expand("$(NODE_ID", &e), "$(NODE_ID");
    }

    #[test]
    fn a_containers_environment_counts_as_the_flags_it_names() {
        let args: Vec<String> = [
            "--endpoint=unix:///csi/csi.sock",
            "--mode=node",
            "--node-id=$(NODE_ID)",
            "--ca-file=/etc/ca/ca.crt",
            "--client-cert-file=/etc/client/tls.crt",
            "--client-key-file=/etc/client/tls.key",
        ]
        .map(str::to_owned)
        .to_vec();
        let e = env(&[
            ("NODE_ID", "worker-1"),
            ("SB_TLS_CONNECT", "authenticated"),
            ("SPDKCSI_API_TOKEN_PATH", "/token"),
            ("UNRELATED", "x"),
        ]);
        let a = Args::from_container(&args, &e).expect("parse");
        assert_eq!(a.node_id.as_deref(), Some("worker-1"));
        assert_eq!(a.mode, Mode::Node);
        assert_eq!(a.tls_connect, TlsConnect::Authenticated);
        assert_eq!(a.api_token_file, Some(PathBuf::from("/token")));
        assert_eq!(a.ca_file, Some(PathBuf::from("/etc/ca/ca.crt")));
        // A flag given wins over the variable, as it does for the binary.
        let mut given = args.clone();
        given.push("--tls-connect=anonymous".into());
        let a = Args::from_container(&given, &e).expect("parse");
        assert_eq!(a.tls_connect, TlsConnect::Anonymous);
        // A certificate without its key is refused.
        let half = vec!["--client-cert-file=/etc/client/tls.crt".to_owned()];
        assert!(Args::from_container(&half, &[]).is_err());
    }
}

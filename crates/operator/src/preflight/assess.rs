//! The judging half of preflight: [`assess`] turns an [`Observation`] into one [`Finding`]
//! per check that applies, purely, and the [`Report`] a person reads.

use std::fmt;

use serde::Serialize;

use super::observation::*;

/// A missing prerequisite, in the three parts a person acts on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// What is missing.
    pub missing: String,
    /// Why that matters.
    pub why: String,
    /// What to do.
    pub fix: String,
}

/// How one check came out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Outcome {
    Ok { detail: String },
    Fail(Problem),
    NotChecked { why: String },
}

/// One check and how it came out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub check: Check,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Every check that applies, each once, in [`Options::checks`]' order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    pub findings: Vec<Finding>,
}

impl Report {
    /// How many checks found a problem.
    pub fn problems(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| matches!(f.outcome, Outcome::Fail(_)))
            .count()
    }

    /// How many checks could not be made for lack of permission.
    pub fn not_checked(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| matches!(f.outcome, Outcome::NotChecked { .. }))
            .count()
    }

    /// How `check` came out, if it applied.
    pub fn outcome(&self, check: Check) -> Option<&Outcome> {
        self.findings
            .iter()
            .find(|f| f.check == check)
            .map(|f| &f.outcome)
    }

    /// The process exit status: [`EXIT_READY`] or [`EXIT_PROBLEMS`].
    pub fn exit_code(&self) -> i32 {
        if self.problems() == 0 {
            EXIT_READY
        } else {
            EXIT_PROBLEMS
        }
    }

    /// The report as JSON: the findings and the count of problems.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "findings": self.findings,
            "problems": self.problems(),
            "notChecked": self.not_checked(),
        })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for finding in &self.findings {
            let check = finding.check;
            match &finding.outcome {
                Outcome::Ok { detail } => writeln!(f, "ok   {check}: {detail}")?,
                Outcome::Fail(p) => {
                    writeln!(f, "FAIL {check}: {}; {}; {}", p.missing, p.why, p.fix)?
                }
                Outcome::NotChecked { why } => writeln!(f, "skip {check}: not checked: {why}")?,
            }
        }
        write!(f, "{} problem(s) found", self.problems())?;
        match self.not_checked() {
            0 => writeln!(f),
            n => writeln!(f, ", {n} check(s) not made"),
        }
    }
}

/// The report on what was observed. Pure.
pub fn assess(options: &Options, observed: &Observation) -> Report {
    let findings = options
        .checks()
        .into_iter()
        .map(|check| Finding {
            check,
            outcome: outcome(check, observed),
        })
        .collect();
    Report { findings }
}

fn outcome(check: Check, observed: &Observation) -> Outcome {
    let node = |judge: fn(&NodeObservation) -> Outcome| match &observed.node {
        Some(n) => judge(n),
        None => not_looked_at("the node was not looked at"),
    };
    // An unreachable API is the Kubernetes API check's problem, reported once there.
    let cluster = |judge: fn(&ClusterObservation) -> Outcome| match &observed.cluster {
        Some(Ok(c)) => judge(c),
        _ => not_looked_at("the Kubernetes API was not reached"),
    };
    match check {
        Check::NvmeTcp => node(|n| nvme_tcp(&n.nvme_tcp)),
        Check::NvmeFabrics => node(|n| nvme_fabrics(&n.nvme_fabrics)),
        Check::Hugepages => node(|n| hugepages(&n.hugepages)),
        Check::Kernel => node(|n| kernel(&n.kernel_release, &n.nvme_tcp)),
        Check::Registries => match &observed.registries {
            Some(reached) => registries_reached(reached),
            None => not_looked_at("the registries were not dialled"),
        },
        Check::KubernetesApi => kubernetes_api(observed.cluster.as_ref()),
        Check::CertManager => cluster(|c| cert_manager(&c.apis)),
        Check::FoundationDb => cluster(|c| foundationdb(&c.apis)),
        Check::SnapshotCrds => cluster(|c| snapshot_crds(&c.apis)),
        Check::SnapshotController => {
            cluster(|c| snapshot_controller(&c.snapshot_deployments, &c.snapshot_pods))
        }
        Check::DefaultStorageClass => cluster(|c| default_storage_class(&c.storage_classes)),
    }
}

fn not_looked_at(why: &str) -> Outcome {
    Outcome::NotChecked { why: why.into() }
}

fn kubernetes_api(cluster: Option<&Result<ClusterObservation, String>>) -> Outcome {
    match cluster {
        Some(Ok(c)) => Outcome::Ok {
            detail: format!("reached, version {}", c.version),
        },
        Some(Err(why)) => Outcome::Fail(Problem {
            missing: format!("not reachable: {why}"),
            why: "none of the cluster checks could be made".into(),
            fix: "run with a kubeconfig for the cluster (KUBECONFIG, ~/.kube/config) or in a pod with a ServiceAccount, or pass --skip-cluster to check the node alone".into(),
        }),
        None => not_looked_at("the cluster was not looked at"),
    }
}

/// The outcome of a look that did not happen: not checked when forbidden, a problem when
/// it failed.
fn unseen(what: &str, how: &Unseen, grant: &str) -> Outcome {
    match how {
        Unseen::Forbidden(why) => Outcome::NotChecked {
            why: format!("{why}; {grant}"),
        },
        Unseen::Failed(why) => Outcome::Fail(Problem {
            missing: format!("{what} could not be checked: {why}"),
            why: "what this check guards may be missing".into(),
            fix: "fix the access and run preflight again".into(),
        }),
    }
}

const NODE_ACCESS: &str =
    "run preflight as root on the node, or in a pod that mounts the host's /sys and /proc (--root)";

/// How to load the NVMe/TCP modules now and at every boot.
pub const LOAD_MODULES: &str = "`modprobe nvme-tcp` (it loads nvme-fabrics too) and `printf 'nvme-tcp\\nnvme-fabrics\\n' > /etc/modules-load.d/nvme-tcp.conf` so both load at boot; where modprobe finds no module, install the kernel's extra modules (Ubuntu: linux-modules-extra-$(uname -r))";

fn module(seen: &Seen<bool>, name: &str, dir: &str, why: &str) -> Outcome {
    match seen {
        Ok(true) => Outcome::Ok {
            detail: format!("present (/sys/module/{dir})"),
        },
        Ok(false) => Outcome::Fail(Problem {
            missing: format!(
                "the {name} kernel module is not loaded on this node (no /sys/module/{dir})"
            ),
            why: why.into(),
            fix: LOAD_MODULES.into(),
        }),
        Err(how) => unseen(&format!("the {name} module"), how, NODE_ACCESS),
    }
}

fn nvme_tcp(seen: &Seen<bool>) -> Outcome {
    module(
        seen,
        "nvme-tcp",
        "nvme_tcp",
        "volumes reach this node over NVMe/TCP; without the module the CSI node plugin attaches none here and no storage node runs",
    )
}

fn nvme_fabrics(seen: &Seen<bool>) -> Outcome {
    module(
        seen,
        "nvme-fabrics",
        "nvme_fabrics",
        "it provides /dev/nvme-fabrics, through which the CSI node plugin connects every volume path",
    )
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The kubelet's resource name for hugepages of `size` bytes: hugepages-2Mi, hugepages-1Gi.
fn hugepage_resource(size: u64) -> String {
    if size >= GIB && size.is_multiple_of(GIB) {
        format!("hugepages-{}Gi", size / GIB)
    } else {
        format!("hugepages-{}Mi", size / MIB)
    }
}

fn hugepages(seen: &Seen<Hugepages>) -> Outcome {
    const EXAMPLE: u64 = 8 * GIB;
    match seen {
        Ok(h) if h.total > 0 => Outcome::Ok {
            detail: match h.page_size {
                Some(size) => format!(
                    "{} pages of {} MiB reserved ({} MiB)",
                    h.total,
                    size / MIB,
                    h.total.saturating_mul(size) / MIB
                ),
                None => format!("{} pages reserved", h.total),
            },
        },
        Ok(h) => {
            let size = h.page_size.filter(|s| *s > 0).unwrap_or(2 * MIB);
            let pages = EXAMPLE.div_ceil(size);
            // Gigabyte pages are seldom free in one piece on a running machine.
            let at_boot = if size >= GIB {
                format!(
                    " (pages of 1 GiB are best reserved at boot: hugepagesz={}G hugepages={pages} on the kernel command line)",
                    size / GIB
                )
            } else {
                String::new()
            };
            Outcome::Fail(Problem {
                missing: "no hugepages are reserved on this node (HugePages_Total is 0 in /proc/meminfo)".into(),
                why: "a storage node's SPDK takes its memory from hugepages, so none can run on this machine (a node that only mounts volumes does not need them)".into(),
                fix: format!(
                    "reserve them, e.g. `sysctl -w vm.nr_hugepages={pages}` ({pages} pages of {} MiB = 8 GiB; size it to the StorageCluster's minHugePagesSize and more){at_boot}, keep it in /etc/sysctl.d/, and restart the kubelet so the node advertises {}",
                    size / MIB,
                    hugepage_resource(size)
                ),
            })
        }
        Err(how) => unseen("hugepages", how, NODE_ACCESS),
    }
}

/// `major.minor` of a kernel release such as `6.8.0-45-generic`.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// nvme-tcp entered Linux in 5.0.
const NVME_TCP_SINCE: (u32, u32) = (5, 0);

fn kernel(release: &Seen<String>, nvme_tcp: &Seen<bool>) -> Outcome {
    let release = match release {
        Ok(r) => r,
        Err(how) => return unseen("the kernel version", how, NODE_ACCESS),
    };
    match kernel_version(release) {
        Some(v) if v >= NVME_TCP_SINCE => Outcome::Ok {
            detail: format!("{release} (NVMe/TCP since 5.0)"),
        },
        // Distribution kernels (RHEL 8's 4.18) carry nvme-tcp as a backport.
        Some(_) if nvme_tcp == &Ok(true) => Outcome::Ok {
            detail: format!("{release}: older than 5.0, but nvme-tcp is present (a backport)"),
        },
        Some(_) => Outcome::Fail(Problem {
            missing: format!("kernel {release} is older than 5.0"),
            why: "the NVMe/TCP host driver (nvme-tcp) entered Linux in 5.0, and volumes reach nodes only over NVMe/TCP".into(),
            fix: "run a kernel 5.0 or newer, or a distribution kernel that backports nvme-tcp, then load nvme-tcp".into(),
        }),
        None => Outcome::Fail(Problem {
            missing: format!("the kernel release {release:?} names no version"),
            why: "NVMe/TCP needs Linux 5.0 or newer, which cannot be told from it".into(),
            fix: "check `uname -r` by hand".into(),
        }),
    }
}

fn registries_reached(reached: &[Reach]) -> Outcome {
    let open: Vec<String> = reached
        .iter()
        .filter(|r| r.reached.is_ok())
        .map(|r| r.registry.to_string())
        .collect();
    let closed: Vec<(&Registry, &str)> = reached
        .iter()
        .filter_map(|r| Some((&r.registry, r.reached.as_ref().err()?.as_str())))
        .collect();
    if closed.is_empty() {
        return Outcome::Ok {
            detail: if open.is_empty() {
                "no registry is listed".into()
            } else {
                format!("a TCP connection opens to {}", open.join(", "))
            },
        };
    }
    let why_not: Vec<String> = closed
        .iter()
        .map(|(registry, why)| format!("{registry} ({why})"))
        .collect();
    // The ones that answer tell a blocked host from a node with no egress at all.
    let also = if open.is_empty() {
        String::new()
    } else {
        format!("; {} reachable", open.join(", "))
    };
    let addresses: Vec<String> = closed.iter().map(|(r, _)| r.address()).collect();
    Outcome::Fail(Problem {
        missing: format!(
            "no TCP connection from this node to {}{also}",
            why_not.join(", ")
        ),
        why: "the kubelet on this node pulls the images of the operator, the CSI driver, the control plane and the storage nodes from these registries; an image it cannot pull keeps its pod in ImagePullBackOff".into(),
        fix: format!(
            "open the nodes' egress to {}, or mirror the images to a registry the nodes reach and list it in the chart value allowedRegistries (with the images set to the mirror's copies); where the container runtime pulls through an HTTP proxy, no direct connection is needed and this finding does not apply",
            addresses.join(", ")
        ),
    })
}

const DISCOVERY_ACCESS: &str = "check by hand with `kubectl api-resources`";

fn cert_manager(apis: &Seen<ServedApis>) -> Outcome {
    api(
        apis,
        &CERT_MANAGER,
        "cert-manager's API",
        "the standalone control plane's management API takes its TLS certificates from cert-manager; without it the installation holds at ApplyingAPI",
        "install cert-manager (https://cert-manager.io/docs/installation/), or choose another provider (controlplane.local.tls.provider OpenShift, or enableTLS false) and run preflight with that --tls-provider",
    )
}

fn foundationdb(apis: &Seen<ServedApis>) -> Outcome {
    api(
        apis,
        &FOUNDATIONDB,
        "the FoundationDB operator's API",
        "the standalone control plane keeps its state in a FoundationDB cluster that the FoundationDB operator runs; without it the installation holds at ApplyingFoundationDB",
        "install the FoundationDB operator and its CRDs (https://github.com/FoundationDB/fdb-kubernetes-operator), or use the managed profile with a control plane that runs elsewhere",
    )
}

fn snapshot_crds(apis: &Seen<ServedApis>) -> Outcome {
    api(
        apis,
        &SNAPSHOTS,
        "the volume snapshot API",
        "the CSI driver installs its snapshotter and VolumeSnapshotClass only where it is served, so volumes can be neither snapshotted nor restored from a snapshot",
        "install the external-snapshotter's CRDs: from github.com/kubernetes-csi/external-snapshotter (v8), `kubectl kustomize client/config/crd | kubectl create -f -`",
    )
}

/// Whether `need` is served, and a problem naming what is missing when not.
fn api(apis: &Seen<ServedApis>, need: &ApiNeed, what: &str, why: &str, fix: &str) -> Outcome {
    let apis = match apis {
        Ok(a) => a,
        Err(how) => return unseen(what, how, DISCOVERY_ACCESS),
    };
    let missing = need.missing(apis);
    if missing.is_empty() {
        return Outcome::Ok {
            detail: format!("{} served", need.describe(need.kinds)),
        };
    }
    let others = need.other_versions(apis);
    let elsewhere = if others.is_empty() {
        String::new()
    } else {
        format!(" ({} is served only at {})", need.group, others.join(", "))
    };
    Outcome::Fail(Problem {
        missing: format!(
            "{what} is not served: {} missing{elsewhere}",
            need.describe(&missing)
        ),
        why: why.into(),
        fix: fix.into(),
    })
}

fn snapshot_controller(deployments: &Seen<Vec<Workload>>, pods: &Seen<Vec<Workload>>) -> Outcome {
    let found: Vec<&Workload> = [deployments, pods]
        .into_iter()
        .filter_map(|s| s.as_ref().ok())
        .flatten()
        .collect();
    let running: Vec<String> = found
        .iter()
        .filter(|w| w.running)
        .map(|w| w.to_string())
        .collect();
    if !running.is_empty() {
        return Outcome::Ok {
            detail: format!("running: {}", running.join(", ")),
        };
    }
    const WHY: &str = "it binds VolumeSnapshots to their contents; without it a VolumeSnapshot of a simplyblock volume stays unready";
    const ELSEWHERE: &str = "(a provider that runs it on its control plane, e.g. GKE, shows none: there this finding does not apply)";
    if !found.is_empty() {
        let named: Vec<String> = found.iter().map(|w| w.to_string()).collect();
        return Outcome::Fail(Problem {
            missing: format!(
                "the snapshot controller is not running ({} has no ready replica)",
                named.join(", ")
            ),
            why: WHY.into(),
            fix: format!(
                "see why with `kubectl -n {} describe deployment {}` and its pods' events",
                found[0].namespace, found[0].name
            ),
        });
    }
    let unseen_looks: Vec<&Unseen> = [deployments, pods]
        .into_iter()
        .filter_map(|s| s.as_ref().err())
        .collect();
    // Absence is known only where both could be listed.
    if unseen_looks.is_empty() {
        return Outcome::Fail(Problem {
            missing: "no snapshot controller runs: no Deployment or Pod named snapshot-controller in any namespace".into(),
            why: WHY.into(),
            fix: format!(
                "install it: from github.com/kubernetes-csi/external-snapshotter (v8), `kubectl -n kube-system kustomize deploy/kubernetes/snapshot-controller | kubectl create -f -` {ELSEWHERE}"
            ),
        });
    }
    // A failed look outweighs a forbidden one: then it is a problem, not a check not made.
    let failed = unseen_looks.iter().any(|u| matches!(u, Unseen::Failed(_)));
    let reasons = unseen_looks
        .iter()
        .filter_map(|u| match u {
            Unseen::Failed(why) if failed => Some(why.as_str()),
            Unseen::Forbidden(why) if !failed => Some(why.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("; ");
    let how = if failed {
        Unseen::Failed(reasons)
    } else {
        Unseen::Forbidden(reasons)
    };
    unseen(
        "the snapshot controller",
        &how,
        "check by hand with `kubectl get deployments,pods -A | grep snapshot-controller`",
    )
}

fn default_storage_class(classes: &Seen<Vec<StorageClass>>) -> Outcome {
    let classes = match classes {
        Ok(c) => c,
        Err(how) => {
            return unseen(
                "the default StorageClass",
                how,
                "check by hand with `kubectl get storageclass`",
            );
        }
    };
    let defaults: Vec<String> = classes
        .iter()
        .filter(|c| c.default)
        .map(|c| format!("{} (provisioner {})", c.name, c.provisioner))
        .collect();
    match defaults.len() {
        1 => Outcome::Ok {
            detail: defaults[0].clone(),
        },
        // Kubernetes takes the newest of several defaults: it works, but is ambiguous.
        n if n > 1 => Outcome::Ok {
            detail: format!(
                "several are marked default, the newest is used: {}",
                defaults.join(", ")
            ),
        },
        _ => Outcome::Fail(Problem {
            missing: if classes.is_empty() {
                "there is no StorageClass at all, so none is the default".into()
            } else {
                let names: Vec<&str> = classes.iter().map(|c| c.name.as_str()).collect();
                format!(
                    "no StorageClass is marked default (there are: {})",
                    names.join(", ")
                )
            },
            why: "the FoundationDB cluster of the standalone control plane claims its volumes from the default class unless controlplane.local.foundationDB.storageClassName names one; with neither its claims stay Pending and the installation waits on FoundationDB".into(),
            fix: "mark one default: `kubectl annotate storageclass <name> storageclass.kubernetes.io/is-default-class=true`, or name a class in controlplane.local.foundationDB.storageClassName".into(),
        }),
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

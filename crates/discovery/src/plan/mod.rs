//! The planner: probe reports, Kubernetes Nodes and the run's DiscoverSpec in, a draft
//! ClusterDeploymentConfig with its notes and refusals out. Pure: no I/O, no clock.
//!
//! Per worker, sorted by name: synthesize devices for controllers no block device stands
//! for, apply the device rules (first refusal wins), the worker rules, the memory-node
//! placement, record leftovers, choose the management interface. Then across the fleet:
//! network agreement, grouping, node sets by role, the cluster block, the document.

mod devices;
pub mod net;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use simplyblock_api::cluster_deployment_config::{
    ClusterDeploymentConfig, ClusterDeploymentConfigSpec, ClusterTemplate, DeviceSelection,
    Environment, NodeGroup, NodeSet,
};
use simplyblock_api::operator_ops::{DeviceFilter, DiscoverSpec};

pub use devices::{Admitted, Class, Rule};

use crate::Error;
use crate::report::{ControllerDriver, InUse, NUMA_UNKNOWN, Report};
use crate::size::{SizeRange, format_binary, parse_size_range};
use crate::worker::{Role, internal_ip, role};

/// One worker's report as the run read it: decoded, or the reason it could not be.
#[derive(Debug, Clone)]
pub struct WorkerReport {
    pub worker: String,
    pub report: Result<Report, Error>,
}

/// Everything the planner reads.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    /// The OperatorOps run's name.
    pub run: &'a str,
    pub namespace: Option<&'a str>,
    pub spec: &'a DiscoverSpec,
    pub environment: Option<Environment>,
    /// The Nodes of the workers (at least); roles and InternalIPs are read from them.
    pub nodes: &'a [Node],
    pub reports: &'a [WorkerReport],
    /// Refuse a worker whose probe could not read everything. Off in production.
    pub require_fully_readable: bool,
}

/// One refusal: a device (or a whole worker) the draft leaves out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub worker: String,
    /// `None` when the whole worker is refused.
    pub device: Option<String>,
    pub rule: Option<Rule>,
    pub reason: String,
}

impl Refusal {
    /// The line a `DeviceDeclined` event carries.
    pub fn line(&self) -> String {
        match &self.device {
            Some(d) => format!("{} {d}: {}", self.worker, self.reason),
            None => format!("{}: {}", self.worker, self.reason),
        }
    }
    fn pre(&self) -> bool {
        self.rule.is_some_and(Rule::is_pre_filter)
    }
}

/// What the planner produced.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The draft, or `None` when no worker has a device the run would use.
    pub config: Option<ClusterDeploymentConfig>,
    /// One sentence per derived number, the summary first; each is a `ConfigWritten` event.
    pub notes: Vec<String>,
    /// Every refusal, pre-filters included; each is a `DeviceDeclined` event.
    pub refusals: Vec<Refusal>,
    /// One line per worker for the run's status message: what it contributes, or why
    /// nothing. Pre-filter refusals are left out; the rest are counted by rule.
    pub explain: Vec<String>,
    /// The summary sentence (also the first note when a draft was written).
    pub summary: String,
}

struct Worker {
    name: String,
    role: Role,
    admitted: Vec<Admitted>,
    numa: Option<i32>,
    mgmt: Option<net::Choice>,
    data: Vec<String>,
    report: Report,
    placement: Option<String>,
}

/// The label on a draft naming the run that wrote it (its label value).
pub use simplyblock_api::keys::DISCOVERED_BY_LABEL;

/// The document name: `configName`, otherwise `discovered-<run>`.
pub fn config_name(run: &str, spec: &DiscoverSpec) -> String {
    spec.config_name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("discovered-{run}"))
}

fn node_of<'a>(nodes: &'a [Node], name: &str) -> Option<&'a Node> {
    nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(name))
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn rule_word(r: Option<Rule>) -> &'static str {
    match r {
        Some(Rule::WholeDisk) => "not a whole disk",
        Some(Rule::SimplyblockVolume) => "a simplyblock volume",
        Some(Rule::Class) => "of another class",
        Some(Rule::Available) => "unavailable",
        Some(Rule::Iscsi) => "an iSCSI LUN",
        Some(Rule::AllowDeny) => "excluded by the allow/deny lists",
        Some(Rule::Model) => "of another model",
        Some(Rule::Size) => "outside the size range",
        Some(Rule::Placement) => "on another memory node",
        None => "refused",
    }
}

/// Plans a draft. Fails only on a `driveSizeRange` that does not parse, which admission
/// refuses already; it is checked again because a filter that silently widened would be
/// worse than a run that stops.
pub fn plan(input: &Input<'_>) -> Result<Plan, Error> {
    let default_filter = DeviceFilter::default();
    let filter = input.spec.device_filter.as_ref().unwrap_or(&default_filter);
    let size: Option<SizeRange> = filter
        .drive_size_range
        .as_deref()
        .filter(|s| !s.trim().is_empty())
        .map(parse_size_range)
        .transpose()?;
    let class = Class::from_filter(filter);
    let rules = devices::Rules {
        class,
        filter,
        size: size.as_ref(),
    };
    let mut refusals: Vec<Refusal> = Vec::new();
    let mut explain: Vec<String> = Vec::new();
    let mut workers: Vec<Worker> = Vec::new();
    let mut sorted: Vec<&WorkerReport> = input.reports.iter().collect();
    sorted.sort_by(|a, b| a.worker.cmp(&b.worker));
    for wr in sorted {
        let w = wr.worker.clone();
        let mut refuse_worker = |reason: String, refusals: &mut Vec<Refusal>| {
            explain.push(format!("{w}: {reason}"));
            refusals.push(Refusal {
                worker: w.clone(),
                device: None,
                rule: None,
                reason,
            });
        };
        let report = match &wr.report {
            Ok(r) => r.clone(),
            Err(e) => {
                refuse_worker(format!("its probe report was not used: {e}"), &mut refusals);
                continue;
            }
        };
        if report.node != w {
            refuse_worker(
                format!(
                    "its report names node {:?}, not this worker, so it is not used; re-run discovery",
                    report.node
                ),
                &mut refusals,
            );
            continue;
        }
        let Some(node) = node_of(input.nodes, &w) else {
            refuse_worker(
                "the Node is gone from the cluster, so it is left out".into(),
                &mut refusals,
            );
            continue;
        };
        let ip = internal_ip(node);
        // 1. Devices for controllers with no block device.
        let synthesized = devices::synthesize(&report.nvme_controllers, &report.devices);
        // 2. Device rules.
        let mut admitted = Vec::new();
        let mut own: Vec<Refusal> = Vec::new();
        for (d, synth) in report
            .devices
            .iter()
            .map(|d| (d, false))
            .chain(synthesized.iter().map(|d| (d, true)))
        {
            match rules.apply(d, synth) {
                Ok(a) => admitted.push(a),
                Err((rule, reason)) => own.push(Refusal {
                    worker: w.clone(),
                    device: Some(if d.path.is_empty() {
                        d.name.clone()
                    } else {
                        d.path.clone()
                    }),
                    rule: Some(rule),
                    reason,
                }),
            }
        }
        // 3. Worker rules.
        let worker_refusal = if input.require_fully_readable && !report.unreadable.is_empty() {
            Some(format!(
                "its probe could not read everything ({}), and this run requires a fully readable worker",
                report.unreadable.join("; ")
            ))
        } else if admitted.is_empty() {
            let userspace = || {
                report
                    .nvme_controllers
                    .iter()
                    .filter(|c| c.driver.is_userspace())
            };
            let held: Vec<String> = userspace()
                .filter(|c| c.in_use == InUse::Held)
                .map(|c| {
                    let who: Vec<String> = c
                        .holders
                        .iter()
                        .map(|h| format!("{} (pid {})", h.command, h.pid))
                        .collect();
                    format!(
                        "{} on {} held by {}",
                        c.address,
                        c.driver.name(),
                        who.join(", ")
                    )
                })
                .collect();
            let blind = userspace()
                .filter(|c| c.in_use == InUse::Unreadable)
                .count();
            let idle: Vec<String> = report
                .nvme_controllers
                .iter()
                .filter(|c| {
                    (c.driver.is_userspace() && c.in_use == InUse::Idle)
                        || c.driver == ControllerDriver::None
                })
                .map(|c| format!("{} ({})", c.address, c.driver.name()))
                .collect();
            Some(if blind > 0 {
                format!(
                    "it is unverifiable: {} of its NVMe controllers are on a userspace driver and the process table could not be read, so whether anything is driving them is unknown; check the probe's access to /proc",
                    blind
                )
            } else if !held.is_empty() {
                format!(
                    "something is driving its disks: {}; they may belong to a guest or another storage system, so they are left alone",
                    held.join("; ")
                )
            } else if !idle.is_empty() {
                format!(
                    "the disks are there to be reclaimed: {} {} bound to a userspace driver or to none with nothing using them, and the run's filter refused them",
                    idle.join(", "),
                    if idle.len() == 1 { "is" } else { "are" }
                )
            } else {
                let counted = count_by_rule(&own);
                if counted.is_empty() {
                    "no device of it survived the device rules (it reports no candidate disk)"
                        .into()
                } else {
                    format!("no device of it survived the device rules ({counted})")
                }
            })
        } else {
            None
        };
        refusals.extend(own);
        if let Some(reason) = worker_refusal {
            refuse_worker(reason, &mut refusals);
            continue;
        }
        // 4. Placement, 5. leftovers.
        let (numa, chosen, placement) = place(&report, admitted);
        let leftovers: Vec<Refusal> = chosen
            .1
            .iter()
            .map(|a| Refusal {
                worker: w.clone(),
                device: Some(a.address.clone()),
                rule: Some(Rule::Placement),
                reason: placement.clone().unwrap_or_default(),
            })
            .collect();
        refusals.extend(leftovers);
        // 6. Interfaces.
        let mgmt = net::management(&report, ip);
        let data = net::data_interfaces(&report, ip)
            .into_iter()
            .filter(|d| Some(d) != mgmt.as_ref().map(|m| &m.name))
            .collect();
        workers.push(Worker {
            name: w.clone(),
            role: role(node),
            admitted: chosen.0,
            numa,
            mgmt,
            data,
            report,
            placement,
        });
    }

    // Fleet network agreement: management first, then data.
    let mut notes: Vec<String> = Vec::new();
    fleet_networks(&mut workers, &mut refusals, &mut explain, &mut notes);

    let name = config_name(input.run, input.spec);
    let device_count: usize = workers.iter().map(|w| w.admitted.len()).sum();
    if workers.is_empty() {
        let summary = failure_summary(&explain, &refusals);
        return Ok(Plan {
            config: None,
            notes: Vec::new(),
            refusals,
            explain,
            summary,
        });
    }

    // Data NICs are named only if every worker has one.
    let all_have_data = workers.iter().all(|w| !w.data.is_empty());
    if !all_have_data && workers.iter().any(|w| !w.data.is_empty()) {
        notes.push(
            "dataInterfaces is left empty: not every worker has a data interface (physical, bond or team, up, 10G or faster, with an IPv4 address besides the node's own), so storage traffic shares the management interface".into(),
        );
    }

    // Grouping.
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new(); // key, worker indexes
    for (i, w) in workers.iter().enumerate() {
        let mut addrs: Vec<&str> = w.admitted.iter().map(|a| a.address.as_str()).collect();
        addrs.sort();
        addrs.dedup();
        let key = format!(
            "{}\u{0}{}\u{0}{}",
            class.word(),
            w.mgmt.as_ref().map_or("", |m| m.name.as_str()),
            addrs.join("\u{0}")
        );
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(i),
            None => groups.push((key, vec![i])),
        }
    }
    // Workers are sorted, so the order of first appearance is the order of first worker.
    let mut node_groups: Vec<(usize, NodeGroup)> = Vec::new();
    for (n, (_, members)) in groups.iter().enumerate() {
        let first = &workers[members[0]];
        let mut addrs: Vec<String> = first.admitted.iter().map(|a| a.address.clone()).collect();
        addrs.sort();
        addrs.dedup();
        let bytes: u64 = first.admitted.iter().map(|a| a.device.size_bytes).sum();
        let count = addrs.len().max(1);
        let size = if bytes == 0 {
            "unsized".to_string()
        } else {
            format_binary(bytes / u64::try_from(count).unwrap_or(1))
        };
        let group_name = format!("group-{}-{}-{}x{size}", n + 1, class.word(), addrs.len());
        let selection = match class {
            Class::Nvme => DeviceSelection {
                nvme: Some(addrs.clone()),
                block: None,
            },
            Class::Block => DeviceSelection {
                nvme: None,
                block: Some(addrs.clone()),
            },
        };
        if bytes == 0 {
            notes.push(format!(
                "{group_name} is named for its device count: its devices are NVMe controllers bound to a userspace driver or to none, so the kernel reports no size for them"
            ));
        }
        for &m in members {
            node_groups.push((
                m,
                NodeGroup {
                    name: group_name.clone(),
                    workers: vec![workers[m].name.clone()],
                    mgmt_interface: first.mgmt.as_ref().map(|c| c.name.clone()),
                    data_interfaces: if all_have_data {
                        first.data.clone()
                    } else {
                        Vec::new()
                    },
                    devices: Some(selection.clone()),
                    failure_domain: None,
                    site: None,
                    spdk_system_memory: None,
                    journal_manager: None,
                },
            ));
        }
    }
    // Node sets by role, split after grouping so identical infra machines stay one group.
    let mut node_sets: Vec<NodeSet> = Vec::new();
    for r in [Role::Infra, Role::Worker, Role::ControlPlane] {
        let mut set_groups: Vec<NodeGroup> = Vec::new();
        for (m, g) in &node_groups {
            if workers[*m].role != r {
                continue;
            }
            match set_groups.iter_mut().find(|sg| sg.name == g.name) {
                Some(sg) => sg.workers.push(workers[*m].name.clone()),
                None => set_groups.push(g.clone()),
            }
        }
        if !set_groups.is_empty() {
            node_sets.push(NodeSet {
                name: r.node_set().to_string(),
                groups: set_groups,
            });
        }
    }

    // Per-worker lines and notes.
    for w in &workers {
        let numa = match w.numa {
            Some(n) if n != NUMA_UNKNOWN => format!("on NUMA node {n}"),
            Some(_) => "on no memory node in particular".to_string(),
            None => "across memory nodes".to_string(),
        };
        let mgmt = w
            .mgmt
            .as_ref()
            .map_or("no management interface".to_string(), |m| {
                format!("management interface {}", m.name)
            });
        explain.push(format!(
            "{}: {} {numa}, {mgmt}",
            w.name,
            plural(
                w.admitted.len(),
                &format!("{} device", class.word()),
                &format!("{} devices", class.word())
            )
        ));
        match &w.mgmt {
            Some(m) => notes.push(format!("{}: mgmtInterface {} because {}", w.name, m.name, m.reason)),
            None => notes.push(format!(
                "{}: no interface qualifies as the management interface (bindable, up, holding a reachable address), so mgmtInterface is unset and the node add would fail; set it by hand",
                w.name
            )),
        }
        if all_have_data {
            notes.push(data_note(w));
        }
        if let Some(p) = &w.placement {
            notes.push(format!("{}: {p}", w.name));
        }
    }

    let cluster = if input.spec.cluster_ref.is_some() {
        notes.push(format!(
            "the draft grows cluster {} (spec.discover.clusterRef), so it proposes no cluster block",
            input.spec.cluster_ref.as_deref().unwrap_or_default()
        ));
        None
    } else {
        let cluster = input
            .spec
            .cluster_name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| input.run.to_owned());
        Some(cluster_block(&cluster, &workers, &mut notes))
    };
    let mut labels = BTreeMap::new();
    labels.insert(
        DISCOVERED_BY_LABEL.to_string(),
        crate::configmap::label_value(input.run),
    );
    let config = ClusterDeploymentConfig {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: input.namespace.map(str::to_string),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: ClusterDeploymentConfigSpec {
            approved: false,
            environment: input.environment,
            edge_cluster: None,
            cluster_ref: input.spec.cluster_ref.clone(),
            cluster,
            node_sets: node_sets.clone(),
            images: None,
            tolerations: input.spec.tolerations.clone(),
        },
        status: None,
    };
    let group_count: BTreeSet<&str> = node_groups.iter().map(|(_, g)| g.name.as_str()).collect();
    let summary = format!(
        "wrote {name} in Draft: {} with {} {} {}, in {} across {}; {}",
        plural(workers.len(), "worker", "workers"),
        device_count,
        class.word(),
        if device_count == 1 {
            "device"
        } else {
            "devices"
        },
        plural(group_count.len(), "group", "groups"),
        plural(node_sets.len(), "node set", "node sets"),
        plural(refusals.len(), "refusal", "refusals"),
    );
    notes.insert(0, summary.clone());
    Ok(Plan {
        config: Some(config),
        notes,
        refusals,
        explain,
        summary,
    })
}

/// Non-pre-filter refusals counted by rule and reason: "3 unavailable (Partitioned)".
fn count_by_rule(refusals: &[Refusal]) -> String {
    let mut counts: BTreeMap<(Option<Rule>, String), usize> = BTreeMap::new();
    for r in refusals.iter().filter(|r| !r.pre()) {
        // The reason names the ground, not the device, so equal grounds fold together.
        *counts.entry((r.rule, r.reason.clone())).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|((rule, reason), n)| format!("{n} {}: {reason}", rule_word(rule)))
        .collect::<Vec<_>>()
        .join("; ")
}

fn failure_summary(explain: &[String], refusals: &[Refusal]) -> String {
    if explain.is_empty() {
        return format!(
            "no worker reported ({})",
            plural(refusals.len(), "refusal", "refusals")
        );
    }
    explain.join("; ")
}

type Placed = (Option<i32>, (Vec<Admitted>, Vec<Admitted>), Option<String>);

/// Buckets the admitted devices by memory node and takes one: most devices, then most
/// capacity, then most physical cores, a real node before the unknown one, lowest id.
fn place(r: &Report, admitted: Vec<Admitted>) -> Placed {
    let mut buckets: BTreeMap<i32, Vec<Admitted>> = BTreeMap::new();
    for a in admitted {
        buckets.entry(a.device.numa_node).or_default().push(a);
    }
    let key = |node: i32, devs: &[Admitted]| {
        (
            devs.len(),
            devs.iter()
                .map(|a| a.device.size_bytes)
                .fold(0u64, u64::saturating_add),
            r.physical_cores(node),
            node != NUMA_UNKNOWN,
            std::cmp::Reverse(node),
        )
    };
    let mut ranked: Vec<(i32, Vec<Admitted>)> = buckets.into_iter().collect();
    ranked.sort_by_key(|(n, d)| std::cmp::Reverse(key(*n, d)));
    let mut iter = ranked.into_iter();
    let Some((node, chosen)) = iter.next() else {
        return (None, (Vec::new(), Vec::new()), None);
    };
    let rest: Vec<(i32, Vec<Admitted>)> = iter.collect();
    if rest.is_empty() {
        return (Some(node), (chosen, Vec::new()), None);
    }
    let describe = |n: i32| {
        if n == NUMA_UNKNOWN {
            "no memory node in particular".to_string()
        } else {
            format!("NUMA node {n}")
        }
    };
    let (ck, rk) = (key(node, &chosen), key(rest[0].0, &rest[0].1));
    let why = if ck.0 != rk.0 {
        "it holds the most admitted devices"
    } else if ck.1 != rk.1 {
        "it ties on device count and holds the most capacity"
    } else if ck.2 != rk.2 {
        "it ties on devices and capacity and has the most physical cores"
    } else if ck.3 != rk.3 {
        "it ties on devices, capacity and cores, and a known memory node is preferred"
    } else {
        "it ties on every measure and has the lowest node id"
    };
    let others: Vec<String> = rest
        .iter()
        .map(|(n, d)| {
            format!(
                "{} on {} ({})",
                d.len(),
                describe(*n),
                format_binary(d.iter().map(|a| a.device.size_bytes).sum())
            )
        })
        .collect();
    let sentence = format!(
        "placed on {} with {} ({}) because {}, against {}; a storage node uses one memory node, so the devices elsewhere are left out",
        describe(node),
        plural(chosen.len(), "device", "devices"),
        format_binary(chosen.iter().map(|a| a.device.size_bytes).sum()),
        why,
        others.join(", ")
    );
    let left: Vec<Admitted> = rest.into_iter().flat_map(|(_, d)| d).collect();
    (Some(node), (chosen, left), Some(sentence))
}

/// Why a worker's data interfaces are these, and which memory node they sit on: a bond's
/// or team's only when all its members agree.
fn data_note(w: &Worker) -> String {
    let nics: Vec<&crate::report::Interface> = w
        .data
        .iter()
        .filter_map(|n| w.report.interfaces.iter().find(|i| &i.name == n))
        .collect();
    let speed = nics
        .iter()
        .map(|i| net::resolved_speed(&w.report, i))
        .max()
        .unwrap_or(0);
    let nodes: Vec<i32> = nics
        .iter()
        .map(|i| net::resolved_numa(&w.report, i))
        .collect();
    let numa = match nodes.first() {
        Some(&n) if n != NUMA_UNKNOWN && nodes.iter().all(|m| *m == n) => {
            format!("on NUMA node {n}")
        }
        _ => "on no single NUMA node (not reported, or the members of a bond or team disagree)"
            .to_string(),
    };
    format!(
        "{}: dataInterfaces {} because {} the best data link (physical, bond or team, up, 10G or faster, with an IPv4 address besides the node's own; ranked by jumbo MTU, speed, aggregation, then driver): {speed} Mb/s, {numa}",
        w.name,
        w.data.join(", "),
        if w.data.len() == 1 {
            "it is"
        } else {
            "they tie as"
        },
    )
}

/// Management: the network the majority holds wins (lower network on a tie) and the
/// minority is refused. Data: networks held by more than half the workers; a worker
/// missing one is refused.
fn fleet_networks(
    workers: &mut Vec<Worker>,
    refusals: &mut Vec<Refusal>,
    explain: &mut Vec<String>,
    notes: &mut Vec<String>,
) {
    if workers.len() < 2 {
        return;
    }
    let mgmt_net = |w: &Worker| {
        w.mgmt
            .as_ref()
            .and_then(|m| m.network)
            .and_then(|(a, p)| net::network(a, p))
    };
    let mut counts: BTreeMap<(IpAddr, u8), usize> = BTreeMap::new();
    for w in workers.iter() {
        if let Some(n) = mgmt_net(w) {
            *counts.entry(n).or_default() += 1;
        }
    }
    if let Some((&winner, _)) = counts.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        && counts.len() > 1
    {
        let total = workers.len();
        let held = counts[&winner];
        let mut kept = Vec::new();
        for w in workers.drain(..) {
            match mgmt_net(&w) {
                Some(n) if n != winner => {
                    let reason = format!(
                        "its management network {} is not the fleet's {} ({} of {} workers), and a cluster's nodes must reach each other on one management network",
                        net::show(n),
                        net::show(winner),
                        held,
                        total
                    );
                    explain.push(format!("{}: {reason}", w.name));
                    refusals.push(Refusal {
                        worker: w.name.clone(),
                        device: None,
                        rule: None,
                        reason,
                    });
                }
                _ => kept.push(w),
            }
        }
        *workers = kept;
    }
    if workers.len() < 2 {
        return;
    }
    let data_nets: Vec<Vec<(IpAddr, u8)>> = workers
        .iter()
        .map(|w| net::networks(&w.report, &w.data))
        .collect();
    let mut held: BTreeMap<(IpAddr, u8), usize> = BTreeMap::new();
    for nets in &data_nets {
        for n in nets {
            *held.entry(*n).or_default() += 1;
        }
    }
    let total = workers.len();
    let shared: Vec<(IpAddr, u8)> = held
        .iter()
        .filter(|(_, c)| **c * 2 > total)
        .map(|(n, _)| *n)
        .collect();
    if shared.is_empty() {
        return;
    }
    notes.push(format!(
        "data networks: {} (held by more than half the workers)",
        shared
            .iter()
            .map(|n| net::show(*n))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let mut kept = Vec::new();
    for (w, nets) in workers.drain(..).zip(data_nets) {
        let missing: Vec<String> = shared
            .iter()
            .filter(|n| !nets.contains(n))
            .map(|n| net::show(*n))
            .collect();
        if missing.is_empty() {
            kept.push(w);
            continue;
        }
        let reason = format!(
            "it has no data interface on {}, which most of the fleet shares, so its storage traffic could not reach the others",
            missing.join(", ")
        );
        explain.push(format!("{}: {reason}", w.name));
        refusals.push(Refusal {
            worker: w.name.clone(),
            device: None,
            rule: None,
            reason,
        });
    }
    *workers = kept;
}

const VCPU_FLOOR: u32 = 4;
const GIB: u64 = 1 << 30;

/// The cluster block, for a cluster named `wanted` (`spec.discover.clusterName`, or the
/// run's name).
fn cluster_block(wanted: &str, workers: &[Worker], notes: &mut Vec<String>) -> ClusterTemplate {
    let mut name = wanted.to_owned();
    if name.len() > 63 {
        name = crate::configmap::label_value(&name);
        notes.push(format!(
            "cluster.name is {name}: {wanted} is longer than the 63 characters a cluster name may have"
        ));
    }
    // vcpuCount: the smallest chosen memory node's cores, from workers whose devices are
    // all on one real node. The control plane assumes one count across the cluster.
    let readings: Vec<(u32, &str)> = workers
        .iter()
        .filter_map(|w| {
            let n = w.numa.filter(|n| *n != NUMA_UNKNOWN)?;
            let cores = w.report.physical_cores(n);
            (cores > 0).then_some((cores, w.name.as_str()))
        })
        .collect();
    let vcpu = match readings.iter().min() {
        Some(&(cores, who)) if cores >= VCPU_FLOOR => {
            notes.push(format!(
                "cluster.vcpuCount {cores}: the physical cores of the smallest chosen memory node ({who})"
            ));
            cores
        }
        Some(&(cores, who)) => {
            notes.push(format!(
                "cluster.vcpuCount {VCPU_FLOOR}: the floor below which SPDK gets no NVMe-oF poller core; {who} has only {cores} physical core(s) on its chosen memory node, so the cluster asks more of it than it has"
            ));
            VCPU_FLOOR
        }
        None => {
            notes.push(format!(
                "cluster.vcpuCount {VCPU_FLOOR}: the floor, since no worker's chosen memory node reported its cores"
            ));
            VCPU_FLOOR
        }
    };
    // minHugePagesSize: the smallest free huge pages on any chosen node, in whole GiB.
    let mut smallest: Option<(u64, &str)> = None;
    let mut none: Option<&str> = None;
    for w in workers {
        let free = w.numa.map_or(0, |n| w.report.free_huge_page_bytes(n)) / GIB;
        if free == 0 {
            none.get_or_insert(w.name.as_str());
            continue;
        }
        if smallest.is_none_or(|(s, _)| free < s) {
            smallest = Some((free, w.name.as_str()));
        }
    }
    let huge = match (none, smallest) {
        (Some(who), _) => {
            notes.push(format!(
                "cluster.minHugePagesSize is unset: {who} has less than 1 GiB of free huge pages on the memory node it was placed on"
            ));
            None
        }
        (None, Some((g, who))) => {
            notes.push(format!(
                "cluster.minHugePagesSize {g}G: the smallest free huge-page amount on a chosen memory node ({who})"
            ));
            Some(format!("{g}G"))
        }
        (None, None) => None,
    };
    notes.push(
        "cluster.maxSubsystemCount 30: the middle of the allowed range, not derived from the machines".into(),
    );
    notes.push(
        "cluster.enableDriveFormat true: every listed device is formatted when its storage node takes it, destroying what it holds; strike a device from its group, or set this false, if any must be kept".into(),
    );
    ClusterTemplate {
        name,
        max_subsystem_count: 30,
        vcpu_count: i32::try_from(vcpu).unwrap_or(i32::MAX),
        min_huge_pages_size: huge,
        enable_drive_format: Some(true),
        sockets_to_use: Vec::new(),
        nodes_per_socket: None,
        stripe: None,
        fabric_type: None,
        enable_failure_domains: None,
        enable_sync_replication: None,
        enable_checksum_validation: None,
        enable_atomicity_4k: None,
        kms: None,
        backup: None,
        node_provisioning_budget: None,
        enable_journal_device: None,
    }
}

/// The draft as YAML, as a reviewer reads it.
pub fn render(config: &ClusterDeploymentConfig) -> Result<String, Error> {
    serde_saphyr::to_string(config).map_err(|e| Error::Render {
        detail: e.to_string(),
    })
}

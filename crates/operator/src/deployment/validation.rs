//! What is wrong with a deployment document, judged against the live cluster.
//!
//! Pure: the caller reads the world (Nodes, StorageClusters and their StorageNodes, the
//! other approved documents) into a [`World`], and gets every problem at once. The
//! approving edit is refused on any of them, because approval freezes the document and an
//! approver fixing one mistake per apply is the same failure in slow motion.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use simplyblock_api::cluster_deployment_config::ClusterDeploymentConfigSpec;
use simplyblock_api::common::Stripe;
use simplyblock_api::storage_cluster::DeviceClass;

/// Why a document cannot be approved. The names are the event reasons.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    WorkerNotFound,
    WorkerInTwoGroups,
    ConflictingInterfaces,
    StripeUnsupported,
    StripeBelowMinimumNodes,
    StripeBelowMinimumWorkers,
    NoClusterNamed,
    ClusterNotFound,
    ClusterExists,
    DeviceClassMismatch,
    SitesIncomplete,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::WorkerNotFound => "WorkerNotFound",
            Reason::WorkerInTwoGroups => "WorkerInTwoGroups",
            Reason::ConflictingInterfaces => "ConflictingInterfaces",
            Reason::StripeUnsupported => "StripeUnsupported",
            Reason::StripeBelowMinimumNodes => "StripeBelowMinimumNodes",
            Reason::StripeBelowMinimumWorkers => "StripeBelowMinimumWorkers",
            Reason::NoClusterNamed => "NoClusterNamed",
            Reason::ClusterNotFound => "ClusterNotFound",
            Reason::ClusterExists => "ClusterExists",
            Reason::DeviceClassMismatch => "DeviceClassMismatch",
            Reason::SitesIncomplete => "SitesIncomplete",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem: its reason and the sentence a person reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub reason: Reason,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason, self.message)
    }
}

/// An existing StorageCluster, as far as approval cares.
#[derive(Clone, Debug, Default)]
pub struct ExistingCluster {
    pub device_class: DeviceClass,
    pub stripe: Option<Stripe>,
    /// Its StorageNodes, as (worker, slot).
    pub nodes: BTreeSet<(String, i32)>,
    /// Slots per worker, from `spec.storageNodes`.
    pub slots_per_worker: u32,
}

/// What the live cluster holds.
#[derive(Clone, Debug, Default)]
pub struct World {
    /// Names of the Kubernetes Nodes.
    pub nodes: BTreeSet<String>,
    /// StorageClusters of the document's namespace, by name.
    pub clusters: BTreeMap<String, ExistingCluster>,
    /// Other approved documents of the namespace that create a cluster: document name by
    /// cluster name.
    pub creating: BTreeMap<String, String>,
}

/// Every problem that keeps `doc` (named `name`) from being approved in `world`.
pub fn approval_problems(
    name: &str,
    doc: &ClusterDeploymentConfigSpec,
    world: &World,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut problem = |reason, message: String| problems.push(Problem { reason, message });

    // Which cluster the document is about, and whether it creates or grows it.
    let growth = doc.cluster_ref.as_deref().filter(|r| !r.is_empty());
    let target = match growth {
        Some(r) => Some(r),
        None => doc.cluster.as_ref().map(|c| c.name.as_str()),
    };
    let existing = target.and_then(|t| world.clusters.get(t));
    match (growth, target) {
        (_, None) => problem(
            Reason::NoClusterNamed,
            "the document names neither spec.clusterRef (to grow a cluster) nor spec.cluster.name (to create one), so it describes no deployment; set one of them".into(),
        ),
        (Some(cluster), _) if existing.is_none() => problem(
            Reason::ClusterNotFound,
            format!("spec.clusterRef names StorageCluster {cluster}, which does not exist in this namespace; fix the name, or remove clusterRef and describe the cluster in spec.cluster to create it"),
        ),
        (None, Some(cluster)) if existing.is_some() => problem(
            Reason::ClusterExists,
            format!("StorageCluster {cluster} already exists and a document never changes an existing cluster; to add nodes to it, set spec.clusterRef: {cluster} instead of spec.cluster"),
        ),
        (None, Some(cluster)) => {
            if let Some(other) = world.creating.get(cluster).filter(|o| o.as_str() != name) {
                problem(
                    Reason::ClusterExists,
                    format!("the approved document {other} already creates StorageCluster {cluster}; choose another name in spec.cluster.name, or grow it with spec.clusterRef once it exists"),
                );
            }
        }
        _ => {}
    }

    // Workers: each must exist and appear in one group only.
    let mut seen: BTreeMap<&str, String> = BTreeMap::new();
    for (si, set) in doc.node_sets.iter().enumerate() {
        for (gi, group) in set.groups.iter().enumerate() {
            let at = format!("spec.nodeSets[{si}].groups[{gi}]");
            for worker in &group.workers {
                if !world.nodes.contains(worker) {
                    problem(
                        Reason::WorkerNotFound,
                        format!(
                            "worker {worker} is not a Node of this cluster; fix {at}.workers or add the node before approving"
                        ),
                    );
                }
                if let Some(first) = seen.insert(worker, at.clone()) {
                    problem(
                        Reason::WorkerInTwoGroups,
                        format!(
                            "worker {worker} is listed in {first} and in {at}; a node is identified by its worker and slot, so the second group's settings would never reach it; keep the worker in one group"
                        ),
                    );
                }
            }
        }
    }

    // One DaemonSet serves the whole cluster, so its interfaces are the same everywhere.
    let mut mgmt: BTreeSet<&str> = BTreeSet::new();
    let mut data: BTreeSet<Vec<String>> = BTreeSet::new();
    for group in doc.node_sets.iter().flat_map(|s| &s.groups) {
        if let Some(m) = group.mgmt_interface.as_deref().filter(|m| !m.is_empty()) {
            mgmt.insert(m);
        }
        if !group.data_interfaces.is_empty() {
            data.insert(group.data_interfaces.clone());
        }
    }
    if mgmt.len() > 1 {
        let names: Vec<&str> = mgmt.into_iter().collect();
        problem(
            Reason::ConflictingInterfaces,
            format!(
                "groups name different management interfaces ({}), but one DaemonSet serves every node of a cluster; use one mgmtInterface in every group",
                names.join(", ")
            ),
        );
    }
    if data.len() > 1 {
        let lists: Vec<String> = data
            .into_iter()
            .map(|d| format!("[{}]", d.join(",")))
            .collect();
        problem(
            Reason::ConflictingInterfaces,
            format!(
                "groups name different data interfaces ({}); use the same dataInterfaces in every group",
                lists.join(", ")
            ),
        );
    }

    // Device class: every group names the same one (CEL holds that); a growth document's
    // must match the cluster's.
    let class = doc
        .node_sets
        .iter()
        .flat_map(|s| &s.groups)
        .find_map(|g| g.devices.as_ref().and_then(|d| d.class()))
        .unwrap_or_default();
    if let (Some(cluster), Some(existing)) = (growth, existing)
        && existing.device_class != class
    {
        problem(
            Reason::DeviceClassMismatch,
            format!(
                "the document's groups name {} devices but StorageCluster {cluster} is built from {} devices, and a cluster holds one class; list devices of the cluster's class",
                class_words(class),
                class_words(existing.device_class)
            ),
        );
    }

    // Synchronous replication mirrors a volume to a second site: every node names its
    // site (the node add carries it), and there are two sites at least.
    if growth.is_none()
        && doc
            .cluster
            .as_ref()
            .is_some_and(|c| c.enable_sync_replication == Some(true))
    {
        let mut sites: BTreeSet<&str> = BTreeSet::new();
        for (si, set) in doc.node_sets.iter().enumerate() {
            for (gi, group) in set.groups.iter().enumerate() {
                match group.site.as_deref().filter(|s| !s.is_empty()) {
                    Some(site) => {
                        sites.insert(site);
                    }
                    None => problem(
                        Reason::SitesIncomplete,
                        format!(
                            "spec.cluster.enableSyncReplication is true but spec.nodeSets[{si}].groups[{gi}] names no site, so its nodes would stand in none; set the group's site"
                        ),
                    ),
                }
            }
        }
        if sites.len() == 1 {
            problem(
                Reason::SitesIncomplete,
                format!(
                    "spec.cluster.enableSyncReplication is true but every group stands in site {}, and a volume is mirrored to a second site; put some groups in another site, or turn synchronous replication off",
                    sites.first().copied().unwrap_or_default()
                ),
            );
        }
    }

    // The stripe's minimum, in storage nodes (slots) and in distinct workers.
    let stripe = match growth {
        Some(_) => existing.and_then(|e| e.stripe.clone()),
        None => doc.cluster.as_ref().and_then(|c| c.stripe.clone()),
    }
    .unwrap_or_default();
    let (ndcs, npcs) = stripe.scheme();
    match stripe.minimum_nodes() {
        None => problem(
            Reason::StripeUnsupported,
            format!(
                "the erasure-coding scheme {ndcs}+{npcs} is not one simplyblock supports; use 1+0, 1+1, 2+1, 4+1, 1+2, 2+2 or 4+2"
            ),
        ),
        Some(minimum) => {
            let slots = match (growth, existing) {
                (Some(_), Some(e)) => e.slots_per_worker.max(1),
                _ => template_slots(doc),
            };
            let mut workers: BTreeSet<&str> = seen.keys().copied().collect();
            let mut nodes: BTreeSet<(String, i32)> = BTreeSet::new();
            if let Some(e) = existing.filter(|_| growth.is_some()) {
                nodes.extend(e.nodes.iter().cloned());
                workers.extend(e.nodes.iter().map(|(w, _)| w.as_str()));
            }
            for worker in seen.keys() {
                for slot in 0..slots {
                    nodes.insert((worker.to_string(), slot as i32));
                }
            }
            if (nodes.len() as u32) < minimum {
                problem(
                    Reason::StripeBelowMinimumNodes,
                    format!(
                        "the {ndcs}+{npcs} stripe needs at least {minimum} storage nodes and the cluster would have {}; add workers or choose a narrower stripe",
                        nodes.len()
                    ),
                );
            }
            if (workers.len() as u32) < minimum {
                problem(
                    Reason::StripeBelowMinimumWorkers,
                    format!(
                        "the {ndcs}+{npcs} stripe needs its {minimum} nodes on at least {minimum} distinct workers, so one machine's failure costs one node, and the cluster would have {}; add workers or choose a narrower stripe",
                        workers.len()
                    ),
                );
            }
        }
    }
    problems
}

/// Storage nodes per worker that a creating document's template describes.
fn template_slots(doc: &ClusterDeploymentConfigSpec) -> u32 {
    let Some(t) = doc.cluster.as_ref() else {
        return 1;
    };
    let sockets = t.sockets_to_use.len().max(1) as u32;
    sockets * t.nodes_per_socket.unwrap_or(1).max(1) as u32
}

fn class_words(class: DeviceClass) -> &'static str {
    match class {
        DeviceClass::NVMe => "NVMe",
        DeviceClass::LogicalBlock => "logical block",
    }
}

/// The admission answer for a problem list: one sentence per problem, counted by reason.
pub fn summary(problems: &[Problem]) -> String {
    let mut by_reason: BTreeMap<Reason, usize> = BTreeMap::new();
    for p in problems {
        *by_reason.entry(p.reason).or_default() += 1;
    }
    let counts: Vec<String> = by_reason.iter().map(|(r, n)| format!("{n} {r}")).collect();
    let mut out = format!(
        "the document cannot be approved: {} problem(s) ({})",
        problems.len(),
        counts.join(", ")
    );
    for p in problems {
        out.push_str("; ");
        out.push_str(&p.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(value: serde_json::Value) -> ClusterDeploymentConfigSpec {
        serde_json::from_value(value).expect("a document spec")
    }

    fn creating(workers: &[&str], stripe: serde_json::Value) -> ClusterDeploymentConfigSpec {
        doc(json!({
            "cluster": {"name": "sb", "maxSubsystemCount": 10, "vcpuCount": 4, "stripe": stripe},
            "nodeSets": [{"name": "a", "groups": [
                {"name": "g", "workers": workers, "devices": {"nvme": ["0000:01:00.0"]}}
            ]}]
        }))
    }

    fn world(nodes: &[&str]) -> World {
        World {
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            ..World::default()
        }
    }

    fn reasons(problems: &[Problem]) -> Vec<Reason> {
        problems.iter().map(|p| p.reason).collect()
    }

    #[test]
    fn a_sound_document_has_no_problem() {
        let spec = creating(
            &["w1", "w2", "w3"],
            json!({"dataChunks": 1, "parityChunks": 1}),
        );
        assert_eq!(
            approval_problems("d", &spec, &world(&["w1", "w2", "w3"])),
            vec![]
        );
    }

    #[test]
    fn an_unsupported_stripe_is_named_and_not_counted_against() {
        let spec = creating(
            &["w1", "w2", "w3", "w4"],
            json!({"dataChunks": 3, "parityChunks": 1}),
        );
        let problems = approval_problems("d", &spec, &world(&["w1", "w2", "w3", "w4"]));
        // A scheme without a minimum gets no node or worker count held against it.
        assert_eq!(reasons(&problems), vec![Reason::StripeUnsupported]);
        assert_eq!(
            problems[0].to_string(),
            "StripeUnsupported: the erasure-coding scheme 3+1 is not one simplyblock supports; use 1+0, 1+1, 2+1, 4+1, 1+2, 2+2 or 4+2"
        );
        for (ndcs, npcs) in [(1, 0), (1, 1), (2, 1), (4, 1), (1, 2), (2, 2), (4, 2)] {
            let spec = creating(
                &["w1", "w2", "w3", "w4", "w5", "w6"],
                json!({"dataChunks": ndcs, "parityChunks": npcs}),
            );
            let w = world(&["w1", "w2", "w3", "w4", "w5", "w6"]);
            assert!(
                !reasons(&approval_problems("d", &spec, &w)).contains(&Reason::StripeUnsupported),
                "{ndcs}+{npcs}"
            );
        }
    }

    #[test]
    fn sync_replication_needs_every_group_in_a_site_and_two_sites() {
        let mut d = creating(
            &["w1", "w2", "w3", "w4"],
            json!({"dataChunks": 1, "parityChunks": 1}),
        );
        d.cluster.as_mut().expect("cluster").enable_sync_replication = Some(true);
        let group = d.node_sets[0].groups[0].clone();
        d.node_sets[0].groups = vec![
            simplyblock_api::cluster_deployment_config::NodeGroup {
                name: "east".into(),
                workers: vec!["w1".into(), "w2".into()],
                ..group.clone()
            },
            simplyblock_api::cluster_deployment_config::NodeGroup {
                name: "west".into(),
                workers: vec!["w3".into(), "w4".into()],
                ..group
            },
        ];
        let w = world(&["w1", "w2", "w3", "w4"]);
        let found = approval_problems("d", &d, &w);
        assert_eq!(
            reasons(&found),
            [Reason::SitesIncomplete, Reason::SitesIncomplete]
        );
        assert!(found[0].message.contains("groups[0]"), "{found:?}");
        assert!(found[1].message.contains("groups[1]"), "{found:?}");
        d.node_sets[0].groups[0].site = Some("east".into());
        d.node_sets[0].groups[1].site = Some("east".into());
        let found = approval_problems("d", &d, &w);
        assert_eq!(reasons(&found), [Reason::SitesIncomplete]);
        assert!(found[0].message.contains("site east"), "{found:?}");
        d.node_sets[0].groups[1].site = Some("west".into());
        assert_eq!(approval_problems("d", &d, &w), Vec::new());
        // Without synchronous replication, sites are not asked for.
        d.cluster.as_mut().expect("cluster").enable_sync_replication = None;
        d.node_sets[0].groups[1].site = None;
        assert_eq!(approval_problems("d", &d, &w), Vec::new());
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let spec = creating(
            &["w1", "ghost"],
            json!({"dataChunks": 1, "parityChunks": 1}),
        );
        let mut w = world(&["w1"]);
        w.clusters.insert("sb".into(), ExistingCluster::default());
        let problems = approval_problems("d", &spec, &w);
        assert_eq!(
            reasons(&problems),
            vec![
                Reason::ClusterExists,
                Reason::WorkerNotFound,
                Reason::StripeBelowMinimumNodes,
                Reason::StripeBelowMinimumWorkers
            ]
        );
        assert_eq!(
            problems[1].message,
            "worker ghost is not a Node of this cluster; fix spec.nodeSets[0].groups[0].workers or add the node before approving"
        );
        let text = summary(&problems);
        assert!(text.starts_with("the document cannot be approved: 4 problem(s) (1 WorkerNotFound, 1 StripeBelowMinimumNodes, 1 StripeBelowMinimumWorkers, 1 ClusterExists)"), "{text}");
    }

    #[test]
    fn slots_count_towards_nodes_but_not_towards_workers() {
        // 2+1 needs 4 nodes on 4 workers; two workers with two sockets give 4 nodes.
        let mut spec = creating(&["w1", "w2"], json!({"dataChunks": 2, "parityChunks": 1}));
        if let Some(t) = spec.cluster.as_mut() {
            t.sockets_to_use = vec!["0".into(), "1".into()];
        }
        let problems = approval_problems("d", &spec, &world(&["w1", "w2"]));
        assert_eq!(reasons(&problems), vec![Reason::StripeBelowMinimumWorkers]);
    }

    #[test]
    fn growth_counts_the_existing_nodes() {
        let spec = doc(json!({
            "clusterRef": "sb",
            "nodeSets": [{"name": "a", "groups": [
                {"name": "g", "workers": ["w4"], "devices": {"nvme": ["0000:01:00.0"]}}
            ]}]
        }));
        let mut w = world(&["w1", "w2", "w3", "w4"]);
        let mut existing = ExistingCluster {
            stripe: Some(Stripe {
                data_chunks: Some(2),
                parity_chunks: Some(1),
            }),
            slots_per_worker: 1,
            ..ExistingCluster::default()
        };
        for worker in ["w1", "w2", "w3"] {
            existing.nodes.insert((worker.into(), 0));
        }
        w.clusters.insert("sb".into(), existing);
        assert_eq!(approval_problems("d", &spec, &w), vec![]);
    }

    #[test]
    fn growth_must_keep_the_device_class() {
        let spec = doc(json!({
            "clusterRef": "sb",
            "nodeSets": [{"name": "a", "groups": [
                {"name": "g", "workers": ["w1"], "devices": {"block": ["/dev/sdb"]}}
            ]}]
        }));
        let mut w = world(&["w1"]);
        w.clusters.insert(
            "sb".into(),
            ExistingCluster {
                stripe: Some(Stripe {
                    data_chunks: Some(1),
                    parity_chunks: Some(0),
                }),
                ..ExistingCluster::default()
            },
        );
        let problems = approval_problems("d", &spec, &w);
        assert_eq!(reasons(&problems), vec![Reason::DeviceClassMismatch]);
        assert!(
            problems[0].message.contains("built from NVMe devices"),
            "{}",
            problems[0].message
        );
    }

    #[test]
    fn a_missing_target_and_a_missing_cluster_are_told_apart() {
        let none =
            doc(json!({"nodeSets": [{"name": "a", "groups": [{"name": "g", "workers": ["w1"]}]}]}));
        assert!(
            reasons(&approval_problems("d", &none, &world(&["w1"])))
                .contains(&Reason::NoClusterNamed)
        );
        let missing = doc(
            json!({"clusterRef": "gone", "nodeSets": [{"name": "a", "groups": [{"name": "g", "workers": ["w1"]}]}]}),
        );
        assert!(
            reasons(&approval_problems("d", &missing, &world(&["w1"])))
                .contains(&Reason::ClusterNotFound)
        );
    }

    #[test]
    fn another_approved_document_creating_the_cluster_is_a_conflict() {
        let spec = creating(&["w1"], json!({"dataChunks": 1, "parityChunks": 0}));
        let mut w = world(&["w1"]);
        w.creating.insert("sb".into(), "first".into());
        assert_eq!(
            reasons(&approval_problems("second", &spec, &w)),
            vec![Reason::ClusterExists]
        );
        // A document is not in conflict with itself.
        assert_eq!(approval_problems("first", &spec, &w), vec![]);
    }

    #[test]
    fn a_worker_in_two_groups_and_disagreeing_interfaces_are_findings() {
        let spec = doc(json!({
            "cluster": {"name": "sb", "maxSubsystemCount": 10, "vcpuCount": 4, "stripe": {"dataChunks": 1, "parityChunks": 0}},
            "nodeSets": [{"name": "a", "groups": [
                {"name": "g1", "workers": ["w1"], "mgmtInterface": "eth0"},
                {"name": "g2", "workers": ["w1"], "mgmtInterface": "eth1"}
            ]}]
        }));
        let problems = approval_problems("d", &spec, &world(&["w1"]));
        assert_eq!(
            reasons(&problems),
            vec![Reason::WorkerInTwoGroups, Reason::ConflictingInterfaces]
        );
    }
}

//! The decisions of the provisioning machine that need no I/O beside its step plan
//! ([`super::machine`]): the node-add body, the node-add budget, and what the control
//! plane's task list says about an add.

use std::collections::{BTreeMap, BTreeSet};

use simplyblock_api::storage_cluster::ProvisioningSlot;
use simplyblock_api::{StorageCluster, StorageNode};
use simplyblock_controlplane::{StorageNodeAdd, Task, TaskStatus};

/// The partitions the control plane cuts on each data device besides the data partition.
///
/// Contract: the backend compares what a device already carries against `1 + this
/// count`, repartitions when they differ, and cannot repartition a device whose table
/// SPDK's gpt module has claimed. So the number is the layout, not a preference: 0 when
/// the journal has a device of its own (a data device carries only its data partition),
/// 1 when every device carries a journal partition. One too many builds the wrong layout
/// on a fresh machine and makes a node whose disks already carry the fleet's layout
/// impossible to add.
pub fn partitions_per_device(dedicated_journal_device: bool) -> u32 {
    if dedicated_journal_device { 0 } else { 1 }
}

/// The control plane's integer failure domain for a node's label: a numeric label is
/// that number; any other label is left for the control plane to assign.
pub fn failure_domain_index(label: Option<&str>) -> Option<i64> {
    label?.parse::<i64>().ok().filter(|n| *n >= 0)
}

/// The body of the node add for `node`, whose storage-node API is at `address`, in a
/// cluster whose storage-node Service lives in `snode_namespace`.
pub fn node_add_body(
    address: String,
    snode_namespace: &str,
    node: &StorageNode,
    cluster: &StorageCluster,
) -> StorageNodeAdd {
    let storage = cluster.spec.storage_nodes.clone().unwrap_or_default();
    let config = &node.spec.config;
    let mut body = StorageNodeAdd::new(
        address,
        storage
            .mgmt_interface
            .clone()
            .unwrap_or_else(|| "eth0".into()),
    );
    body.data_nics = storage.data_interfaces.clone().unwrap_or_default();
    body.namespace = snode_namespace.to_string();
    body.cr_name = node.metadata.name.clone().unwrap_or_default();
    body.cr_namespace = node.metadata.namespace.clone().unwrap_or_default();
    body.cr_plural = "storagenodes".into();
    body.format_4k = storage.enable_format_4k.unwrap_or(false);
    body.partitions = partitions_per_device(storage.enable_journal_device.unwrap_or(false));
    if let Some(jm) = &config.journal_manager {
        if let Some(p) = jm.percent_per_device.and_then(|p| u32::try_from(p).ok()) {
            body.jm_percent = p;
        }
        body.ha_jm_count = jm.count.and_then(|c| u32::try_from(c).ok());
    }
    body.failure_domain = failure_domain_index(config.failure_domain.as_deref());
    body.site = config.site.clone();
    // A growth document's node joins a running cluster: without the flag the control plane
    // reads it as part of an initial layout, and refuses it once the cluster is active.
    body.expand = config.expand.unwrap_or(false);
    body.spdk_sys_mem = config.spdk_system_memory.clone();
    if let Some(image) = &config.spdk_image {
        body.spdk_image = image.clone();
    }
    body.spdk_proxy_image = config.spdk_proxy_image.clone();
    body
}

/// One StorageNode of the cluster as the budget sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Contender {
    pub name: String,
    pub worker: String,
    pub slot: i32,
    /// It has no control-plane node yet.
    pub provisioning: bool,
    /// Its provisioning machine is at AwaitingSlot.
    pub awaiting_slot: bool,
    /// Its worker is gone, NotReady or cordoned: it does not contend.
    pub away: bool,
    /// Its creation time (Unix seconds), the first key of the order.
    pub created: i64,
}

/// What the budget says to one waiting worker.
#[derive(Debug, Clone, PartialEq)]
pub enum SlotDecision {
    /// The worker already holds a slot (another of its nodes took it).
    Held,
    /// Take a slot: write these entries (stale ones dropped, the new one not yet added).
    Claim(Vec<ProvisioningSlot>),
    /// Wait, for this reason.
    Wait(String),
}

/// Decides whether `worker` may take a node-add slot.
///
/// The decision is made from the set that is waiting, not from who has written a claim:
/// the contending workers are ordered (earliest created node, then name), and a worker
/// goes on only if its place in that order is within the free slots. Every waiting node
/// reading one set reaches one answer without any of them having written anything, so
/// the cap holds for every node, not only the first; the claim itself is then written
/// under the cluster's resourceVersion.
pub fn slot_decision(
    worker: &str,
    budget: i32,
    slots: &[ProvisioningSlot],
    nodes: &[Contender],
) -> SlotDecision {
    if slots.iter().any(|s| s.worker == worker) {
        return SlotDecision::Held;
    }
    let budget = budget.max(1) as usize;
    // Entries whose node finished (has a control-plane node) or is gone are stale.
    let live: BTreeSet<&str> = nodes
        .iter()
        .filter(|n| n.provisioning)
        .map(|n| n.name.as_str())
        .collect();
    let kept: Vec<ProvisioningSlot> = slots
        .iter()
        .filter(|s| live.contains(s.node.as_str()))
        .cloned()
        .collect();
    let in_flight: BTreeSet<&str> = kept.iter().map(|s| s.worker.as_str()).collect();
    if in_flight.len() >= budget {
        return SlotDecision::Wait(waiting_for_slot(budget));
    }
    let free = budget - in_flight.len();
    // Each waiting worker once, at the key of its earliest node.
    let mut waiting: BTreeMap<&str, (i64, i32)> = BTreeMap::new();
    for n in nodes.iter().filter(|n| {
        n.provisioning
            && n.awaiting_slot
            && (!n.away || n.worker == worker)
            && !in_flight.contains(n.worker.as_str())
    }) {
        let key = (n.created, n.slot);
        waiting
            .entry(n.worker.as_str())
            .and_modify(|k| *k = (*k).min(key))
            .or_insert(key);
    }
    waiting.entry(worker).or_insert((i64::MIN, 0));
    let mut order: Vec<(i64, i32, &str)> = waiting
        .into_iter()
        .map(|(w, (created, slot))| (created, slot, w))
        .collect();
    order.sort();
    let place = order.iter().position(|(_, _, w)| *w == worker).unwrap_or(0);
    if place < free {
        return SlotDecision::Claim(kept);
    }
    SlotDecision::Wait(waiting_for_slot(budget))
}

/// The wait message. It names no worker and no place in line on purpose: a message that
/// changed with every add ahead would rewrite the status (and raise an event) of every
/// waiting node each time one finishes, O(n²) writes for a fleet of n; the workers being
/// added are in the StorageCluster's `status.provisioningSlots`.
fn waiting_for_slot(budget: usize) -> String {
    format!(
        "waiting for a node-add slot: the cluster adds {budget} worker(s) at a time (spec.nodeProvisioningBudget), in the order their nodes were created; status.provisioningSlots of the StorageCluster names the workers being added"
    )
}

/// The node-add tasks of the worker at `address`.
fn adds_for<'a>(tasks: &'a [Task], address: &'a str) -> impl Iterator<Item = &'a Task> {
    tasks.iter().filter(move |t| {
        t.function_name == "node_add"
            && t.function_params
                .get("node_addr")
                .and_then(|v| v.as_str())
                .is_some_and(|a| a == address)
    })
}

/// Whether a node add for the worker at `address` is still open.
pub fn add_open(tasks: &[Task], address: &str) -> bool {
    adds_for(tasks, address).any(|t| !t.canceled && t.status != TaskStatus::Done)
}

/// Whether the add this step waits on is over without having produced a node: no add for
/// the address is open and none succeeded (a refused or lost request leaves no task at
/// all; one that gave up ends done without success). Such an add is asked for again.
pub fn add_over_without_node(tasks: &[Task], address: &str) -> bool {
    !add_open(tasks, address) && !adds_for(tasks, address).any(Task::succeeded)
}

/// Where the node add of the worker at one address is, by the control plane's tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddWindow {
    /// An add is still open: the node may exist half-made.
    Open,
    /// No add is open and one succeeded.
    Succeeded,
    /// No add is open and none succeeded ([`add_over_without_node`]): ask again.
    EndedWithoutNode,
}

/// The add window of the worker at `address`.
pub fn add_window(tasks: &[Task], address: &str) -> AddWindow {
    if add_open(tasks, address) {
        AddWindow::Open
    } else if add_over_without_node(tasks, address) {
        AddWindow::EndedWithoutNode
    } else {
        AddWindow::Succeeded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn cluster(storage_nodes: serde_json::Value) -> StorageCluster {
        serde_json::from_value(json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "StorageCluster",
            "metadata": {"name": "sb", "namespace": "ns"},
            "spec": {"maxSubsystemCount": 10, "vcpuCount": 4, "storageNodes": storage_nodes},
        }))
        .expect("cluster")
    }

    fn node(config: serde_json::Value) -> StorageNode {
        let mut c = json!({"sizing": {"vcpuCount": 4}});
        c.as_object_mut()
            .expect("object")
            .extend(config.as_object().cloned().unwrap_or_default());
        serde_json::from_value(json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "StorageNode",
            "metadata": {"name": "sb-w1-0", "namespace": "ns"},
            "spec": {"clusterRef": "sb", "workerNode": "w1", "slot": 0, "config": c},
        }))
        .expect("node")
    }

    #[test]
    fn partitions_follow_the_journal_layout() {
        // Regression: the count came out one too high in both branches (1 and 2).
        assert_eq!(partitions_per_device(true), 0);
        assert_eq!(partitions_per_device(false), 1);
    }

    #[test]
    fn the_body_carries_what_the_node_and_cluster_say() {
        let c = cluster(json!({
            "mgmtInterface": "eth0", "dataInterfaces": ["eth1"], "enableJournalDevice": true,
            "enableFormat4K": true,
        }));
        let n = node(json!({
            "journalManager": {"count": 2, "percentPerDevice": 5},
            "failureDomain": "3", "expand": true, "spdkImage": "img:1",
            "spdkProxyImage": "proxy:1", "spdkSystemMemory": "4G",
        }));
        let b = node_add_body("w1.svc:5000".into(), "ns", &n, &c);
        assert_eq!(b.node_address, "w1.svc:5000");
        assert_eq!(b.interface_name, "eth0");
        assert_eq!(b.data_nics, ["eth1"]);
        assert_eq!(b.partitions, 0);
        assert_eq!(b.jm_percent, 5);
        assert_eq!(b.ha_jm_count, Some(2));
        assert_eq!(b.failure_domain, Some(3));
        assert!(b.expand);
        assert!(b.format_4k);
        assert_eq!(b.spdk_image, "img:1");
        assert_eq!(b.spdk_proxy_image.as_deref(), Some("proxy:1"));
        assert_eq!(b.spdk_sys_mem.as_deref(), Some("4G"));
        assert_eq!(
            (
                b.cr_name.as_str(),
                b.cr_namespace.as_str(),
                b.cr_plural.as_str()
            ),
            ("sb-w1-0", "ns", "storagenodes")
        );
    }

    #[test]
    fn an_initial_node_keeps_the_control_plane_defaults() {
        let b = node_add_body("a:5000".into(), "ns", &node(json!({})), &cluster(json!({})));
        // Regression: a growth document's node left expand unset; an initial one must not
        // ask for a rebalance onto its own layout.
        assert!(!b.expand);
        assert_eq!(b.partitions, 1);
        assert_eq!(b.jm_percent, 3);
        assert_eq!(b.ha_jm_count, None);
        assert_eq!(b.failure_domain, None);
        assert_eq!(b.spdk_proxy_image, None);
        let wire = serde_json::to_value(&b).expect("json");
        assert_eq!(wire["expand"], false);
        assert!(wire.get("ha_jm_count").is_none());
    }

    #[test]
    fn only_a_numeric_label_is_an_index() {
        assert_eq!(failure_domain_index(Some("2")), Some(2));
        assert_eq!(failure_domain_index(Some("rack-a")), None);
        assert_eq!(failure_domain_index(Some("-1")), None);
        assert_eq!(failure_domain_index(None), None);
    }

    fn contender(worker: &str, awaiting: bool) -> Contender {
        Contender {
            name: format!("sb-{worker}-0"),
            worker: worker.into(),
            slot: 0,
            provisioning: true,
            awaiting_slot: awaiting,
            away: false,
            created: 1_767_225_600,
        }
    }

    fn slot(worker: &str) -> ProvisioningSlot {
        ProvisioningSlot {
            worker: worker.into(),
            node: format!("sb-{worker}-0"),
            taken_at: Time(jiff::Timestamp::UNIX_EPOCH),
        }
    }

    fn claims(budget: i32, slots: &[ProvisioningSlot], nodes: &[Contender]) -> Vec<String> {
        nodes
            .iter()
            // A worker that is away does not ask (its own pass holds it in AwaitingWorker).
            .filter(|n| n.awaiting_slot && !n.away)
            .filter(|n| {
                matches!(
                    slot_decision(&n.worker, budget, slots, nodes),
                    SlotDecision::Claim(_)
                )
            })
            .map(|n| n.worker.clone())
            .collect()
    }

    #[test]
    fn every_waiter_reading_one_set_agrees_on_who_goes() {
        // Regression: each waiter counted the claims written so far, so when a slot came
        // free every waiter saw it free and all of them took it.
        let nodes: Vec<Contender> = ["w4", "w2", "w3", "w1"]
            .iter()
            .map(|w| contender(w, true))
            .collect();
        assert_eq!(claims(1, &[], &nodes), ["w1"]);
        assert_eq!(claims(2, &[], &nodes), ["w2", "w1"]);
        // With one slot taken, a budget of two lets exactly one more go.
        let mut held = nodes.clone();
        held.retain(|n| n.worker != "w1");
        held.push(contender("w1", false));
        assert_eq!(claims(2, &[slot("w1")], &held), ["w2"]);
        assert_eq!(claims(1, &[slot("w1")], &held), Vec::<String>::new());
    }

    #[test]
    fn earlier_nodes_go_first_and_away_workers_do_not_block() {
        let mut nodes: Vec<Contender> =
            ["a", "b", "c"].iter().map(|w| contender(w, true)).collect();
        nodes[2].created -= 86_400;
        assert_eq!(claims(1, &[], &nodes), ["c"]);
        nodes[2].away = true;
        assert_eq!(claims(1, &[], &nodes), ["a"]);
    }

    #[test]
    fn stale_slots_are_dropped_and_a_held_worker_rides_on_its_claim() {
        let mut done = contender("w1", false);
        done.provisioning = false;
        let nodes = vec![done, contender("w2", true)];
        match slot_decision("w2", 1, &[slot("w1")], &nodes) {
            SlotDecision::Claim(kept) => assert!(kept.is_empty(), "{kept:?}"),
            other => panic!("expected a claim, got {other:?}"),
        }
        assert_eq!(
            slot_decision("w2", 1, &[slot("w2")], &nodes),
            SlotDecision::Held
        );
    }

    #[test]
    fn a_waiting_node_is_told_one_thing_however_the_line_moves() {
        // Regression: the message named the workers in flight and those ahead, so each
        // finished add rewrote every waiter's status and raised an event for each.
        let nodes: Vec<Contender> = ["w1", "w2", "w3", "w4"]
            .iter()
            .map(|w| contender(w, true))
            .collect();
        let told = |slots: &[ProvisioningSlot], nodes: &[Contender]| match slot_decision(
            "w4", 1, slots, nodes,
        ) {
            SlotDecision::Wait(why) => why,
            other => panic!("w4 should wait, got {other:?}"),
        };
        let full = told(&[slot("w1")], &nodes);
        let mut later = nodes.clone();
        later.retain(|n| n.worker != "w1");
        let behind_two = told(&[], &later);
        later.retain(|n| n.worker != "w2");
        let behind_one = told(&[slot("w2")], &later);
        assert_eq!(full, behind_two);
        assert_eq!(full, behind_one);
        assert!(full.contains("nodeProvisioningBudget"), "{full}");
    }

    fn task(addr: &str, status: TaskStatus, result: &str) -> Task {
        serde_json::from_value(json!({
            "id": "00000000-0000-0000-0000-000000000001",
            "cluster_id": "00000000-0000-0000-0000-000000000002",
            "device_id": null, "storage_node_id": null,
            "status": status.as_str(), "canceled": false, "function_name": "node_add",
            "function_params": {"node_addr": addr}, "function_result": result,
            "max_retry": 11, "retry": 0,
        }))
        .expect("task")
    }

    #[test]
    fn an_add_is_over_without_a_node_only_when_nothing_is_open_or_succeeded() {
        let a = "w1.svc:5000";
        assert!(add_over_without_node(&[], a), "a lost request left no task");
        let gave_up = task(a, TaskStatus::Done, "max retry reached");
        assert!(add_over_without_node(std::slice::from_ref(&gave_up), a));
        let open = task(a, TaskStatus::Suspended, "");
        assert!(add_open(std::slice::from_ref(&open), a));
        assert!(!add_over_without_node(&[gave_up.clone(), open], a));
        let ok = task(a, TaskStatus::Done, "Node add result: Success");
        assert!(!add_over_without_node(&[gave_up.clone(), ok.clone()], a));
        assert_eq!(add_window(&[gave_up.clone(), ok], a), AddWindow::Succeeded);
        assert_eq!(add_window(&[gave_up], a), AddWindow::EndedWithoutNode);
        assert_eq!(add_window(&[], a), AddWindow::EndedWithoutNode);
        assert_eq!(
            add_window(&[task(a, TaskStatus::Running, "")], a),
            AddWindow::Open
        );
        // Another worker's address is not this one's, even as a suffix.
        assert!(!add_open(
            &[task("xw1.svc:5000", TaskStatus::Running, "")],
            a
        ));
    }
}

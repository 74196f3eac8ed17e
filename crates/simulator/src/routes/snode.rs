//! A worker's storage-node API (`/snode/<verb>`): its inventory, devices and SPDK process,
//! as the operator and the control plane's node add ask for them.

use serde_json::{Value, json};
use simplyblock_controlplane::types::NodeStatus;

use crate::reply::{ApiError, Reply};
use crate::sim::Sim;

/// Answer one verb. `worker` is the Host the caller used: its first DNS label names the
/// worker, or it is one of the worker's addresses.
pub fn handle(sim: &Sim, worker: &str, verb: &str) -> Result<Reply, ApiError> {
    sim.mutate(|st| {
        let Some(host) = st.worker_for_address(worker) else {
            return Err(ApiError::Plain(
                503,
                format!("no storage-node API answers for {worker}: no such worker in the fleet"),
            ));
        };
        st.worker_reachable(&host)
            .map_err(|why| ApiError::Plain(503, format!("storage-node API unreachable: {why}")))?;
        let Some(w) = st.t.workers.get(&host).cloned() else {
            return Err(ApiError::Plain(503, "worker vanished".into()));
        };
        let devices: Vec<Value> = w
            .devices
            .iter()
            .map(|d| json!({"model": d.model, "serial": d.serial, "pcie_address": d.pcie, "size": d.size}))
            .collect();
        let results = match verb.trim_end_matches('/') {
            "info" => json!({
                "hostname": w.hostname,
                "cpu_count": w.cpus,
                "memory": w.memory,
                "profile": w.profile,
                "network_interface": w.nics.iter().map(|(n, ip)| (n.clone(), json!({"ip": ip}))).collect::<serde_json::Map<_, _>>(),
                "nvme_devices": devices,
                "labels": w.labels,
            }),
            "scan_devices" => json!({"nvme_devices": devices}),
            "check" => json!(true),
            "spdk_process_is_up" => json!(st.t.nodes.values().any(|n| n.worker == w.hostname && n.status == NodeStatus::Online)),
            "spdk_process_start" | "spdk_process_kill" | "firewall_set_port" | "set_hugepages"
            | "apply_config" | "join_swarm" | "leave_swarm" => json!(true),
            _ => return Err(ApiError::not_found("Not Found")),
        };
        Ok(Reply::ok(json!({"status": true, "results": results})))
    })
}

//! What the control plane says about a cluster, turned into status. Pure.

use simplyblock_api::storage_cluster::{ClusterPhase, ClusterTask, StorageClusterStatus};
use simplyblock_controlplane::{Cluster, Task, TaskStatus};

/// The most tasks kept in status; the schema caps the list at this.
pub const MAX_TASKS: usize = 20;

/// The status fields the steady state owns, from the control plane's answers. Everything
/// the creation machine and other writers own is left as it was in `current`.
pub fn steady_status(
    current: &StorageClusterStatus,
    cluster: &Cluster,
    tasks: &[Task],
) -> StorageClusterStatus {
    let status = cluster.status.as_str().to_string();
    let mut next = current.clone();
    next.phase = ClusterPhase::from_control_plane(Some(&status), cluster.is_re_balancing);
    next.status = Some(status);
    next.uuid = Some(cluster.id.to_string());
    next.cluster_name = cluster.name.clone();
    next.nqn = Some(cluster.nqn.clone());
    next.erasure_coding_scheme = Some(format!("{}x{}", cluster.distr_ndcs, cluster.distr_npcs));
    next.rebalancing = Some(cluster.is_re_balancing);
    next.max_fault_tolerance = Some(cluster.max_fault_tolerance as i32);
    next.tasks = tasks
        .iter()
        .filter(|t| t.status != TaskStatus::Done && !t.canceled)
        .take(MAX_TASKS)
        .map(|t| ClusterTask {
            id: t.id.to_string(),
            type_: Some(t.function_name.clone()),
            status: Some(t.status.as_str().to_string()),
            retry: Some(t.retry as i32),
        })
        .collect();
    next
}

/// Tasks that left the window since `before`, with how each ended: `TaskCompleted` or
/// `TaskCanceled`. A task the control plane no longer lists at all counts as completed.
pub fn finished_tasks<'a>(
    before: &'a StorageClusterStatus,
    after: &StorageClusterStatus,
    tasks: &[Task],
) -> Vec<(&'a ClusterTask, &'static str)> {
    before
        .tasks
        .iter()
        .filter(|t| !after.tasks.iter().any(|a| a.id == t.id))
        .map(|t| {
            let canceled = tasks.iter().any(|x| x.id.to_string() == t.id && x.canceled);
            (
                t,
                if canceled {
                    "TaskCanceled"
                } else {
                    "TaskCompleted"
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(status: &str, rebalancing: bool) -> Cluster {
        serde_json::from_value(json!({
            "id": "5b3c0e0e-8f35-4a8e-9d5f-3c1b2a7a0f01", "name": "sb",
            "nqn": "nqn.2023-02.io.simplyblock:5b3c", "status": status,
            "is_re_balancing": rebalancing, "block_size": 512, "distr_ndcs": 2, "distr_npcs": 1,
            "ha": true, "utilization_critical": 0, "utilization_warning": 0,
            "provisioned_capacity_critical": 0, "provisioned_capacity_warning": 0,
            "node_affinity": false, "anti_affinity": false, "enable_failure_domain": false,
            "secret": "s", "tls_enabled": false, "max_fault_tolerance": 1, "backup_enabled": false,
            "capacity": {"date": 0, "size_total": 0, "size_prov": 0, "size_used": 0, "size_free": 0, "size_util": 0}
        }))
        .expect("cluster")
    }

    fn task(id: &str, status: &str, canceled: bool) -> Task {
        serde_json::from_value(json!({
            "id": id, "cluster_id": "5b3c0e0e-8f35-4a8e-9d5f-3c1b2a7a0f01", "device_id": null,
            "storage_node_id": null, "status": status, "canceled": canceled,
            "function_name": "node_add", "function_params": {}, "function_result": "",
            "max_retry": 3, "retry": 1
        }))
        .expect("task")
    }

    /// The phase of every status the client knows, with and without a rebalance. The
    /// match has no wildcard and the loop runs over `ClusterStatus::ALL`, so a status added
    /// to the client does not compile or pass until its phase is written down here.
    #[test]
    fn every_control_plane_status_has_its_phase() {
        use simplyblock_controlplane::ClusterStatus as S;
        let expected = |s: S, rebalancing: bool| match s {
            S::Active | S::Degraded | S::ReadOnly if rebalancing => ClusterPhase::Rebalancing,
            S::Active => ClusterPhase::Online,
            S::Degraded | S::ReadOnly => ClusterPhase::Degraded,
            S::Unready | S::InExpansion => ClusterPhase::Provisioning,
            S::InActivation => ClusterPhase::Activating,
            S::Suspended => ClusterPhase::Suspended,
            S::Inactive | S::Unknown => ClusterPhase::Unavailable,
        };
        for &s in S::ALL {
            for rebalancing in [false, true] {
                let c = cluster(s.as_str(), rebalancing);
                assert_eq!(c.status, s, "{s} decodes as itself");
                let got = steady_status(&StorageClusterStatus::default(), &c, &[]).phase;
                assert_eq!(
                    got,
                    expected(s, rebalancing),
                    "{s} rebalancing={rebalancing}"
                );
            }
        }
    }

    #[test]
    fn the_status_reads_the_cluster() {
        let s = steady_status(
            &StorageClusterStatus::default(),
            &cluster("active", false),
            &[],
        );
        assert_eq!(s.phase, ClusterPhase::Online);
        assert_eq!(s.erasure_coding_scheme.as_deref(), Some("2x1"));
        assert_eq!(s.max_fault_tolerance, Some(1));
        let s = steady_status(&s, &cluster("degraded", true), &[]);
        assert_eq!(s.phase, ClusterPhase::Rebalancing);
        assert_eq!(s.status.as_deref(), Some("degraded"));
    }

    #[test]
    fn finished_tasks_leave_the_window_with_how_they_ended() {
        let a = "00000000-0000-0000-0000-00000000000a";
        let b = "00000000-0000-0000-0000-00000000000b";
        let c = "00000000-0000-0000-0000-00000000000c";
        let running = [
            task(a, "running", false),
            task(b, "new", false),
            task(c, "running", false),
        ];
        let before = steady_status(
            &StorageClusterStatus::default(),
            &cluster("active", false),
            &running,
        );
        assert_eq!(before.tasks.len(), 3);
        let later = [
            task(a, "done", false),
            task(b, "done", true),
            task(c, "running", false),
        ];
        let after = steady_status(&before, &cluster("active", false), &later);
        assert_eq!(after.tasks.len(), 1);
        let finished: Vec<(String, &str)> = finished_tasks(&before, &after, &later)
            .into_iter()
            .map(|(t, r)| (t.id.clone(), r))
            .collect();
        assert_eq!(
            finished,
            [
                (a.to_string(), "TaskCompleted"),
                (b.to_string(), "TaskCanceled")
            ]
        );
    }

    #[test]
    fn the_window_is_capped() {
        let many: Vec<Task> = (0..30)
            .map(|i| task(&format!("00000000-0000-0000-0000-{i:012}"), "new", false))
            .collect();
        let s = steady_status(
            &StorageClusterStatus::default(),
            &cluster("active", false),
            &many,
        );
        assert_eq!(s.tasks.len(), MAX_TASKS);
    }
}

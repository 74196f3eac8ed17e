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

/// Tasks that left the window since `before`, each with its final state in the control
/// plane's list when it is there (`None`: no longer listed, read it on its own). A task
/// still open that only fell out of a full window has not finished and is not returned.
pub fn finished_tasks<'a, 'b>(
    before: &'a StorageClusterStatus,
    after: &StorageClusterStatus,
    tasks: &'b [Task],
) -> Vec<(&'a ClusterTask, Option<&'b Task>)> {
    before
        .tasks
        .iter()
        .filter(|t| !after.tasks.iter().any(|a| a.id == t.id))
        .map(|t| (t, tasks.iter().find(|x| x.id.to_string() == t.id)))
        .filter(|(_, found)| found.is_none_or(|x| x.status == TaskStatus::Done || x.canceled))
        .collect()
}

/// The one event a task leaving the window raises.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskVerdict {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

/// How a task that left the window ended, from its final state (`None`: the control plane
/// no longer has it): canceled; gave up (its retries spent, "max retry reached") or failed
/// (a result saying so) — a Warning; completed, perhaps after retries. Pure.
pub fn task_verdict(seen: &ClusterTask, last: Option<&Task>) -> TaskVerdict {
    let kind = last
        .map(|t| t.function_name.as_str())
        .or(seen.type_.as_deref())
        .unwrap_or("task");
    let head = format!("task {} ({kind})", seen.id);
    let Some(t) = last else {
        return TaskVerdict {
            warning: false,
            reason: "TaskLeftQueue",
            note: format!(
                "{head} left the control plane's queue and is no longer listed; how it ended is unknown"
            ),
        };
    };
    let result = t.function_result.trim();
    let attempts = match t.max_retry {
        Some(max) => format!("{} of {max} retries", t.retry),
        None => format!("{} retries", t.retry),
    };
    if t.canceled {
        return TaskVerdict {
            warning: false,
            reason: "TaskCanceled",
            note: format!("{head} was canceled after {attempts}"),
        };
    }
    let lower = result.to_ascii_lowercase();
    let spent = t.max_retry.is_some_and(|max| t.retry >= max);
    if spent || lower.contains("max retry") {
        return TaskVerdict {
            warning: true,
            reason: "TaskFailed",
            note: format!(
                "{head} gave up after {attempts}: {}",
                if result.is_empty() {
                    "max retry reached"
                } else {
                    result
                }
            ),
        };
    }
    if lower.contains("false") || lower.contains("fail") || lower.contains("error") {
        return TaskVerdict {
            warning: true,
            reason: "TaskFailed",
            note: format!("{head} failed after {attempts}: {result}"),
        };
    }
    TaskVerdict {
        warning: false,
        reason: "TaskCompleted",
        note: if t.retry > 0 {
            format!("{head} completed after {attempts}: {result}")
        } else if result.is_empty() {
            format!("{head} completed")
        } else {
            format!("{head} completed: {result}")
        },
    }
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

    fn ended(id: &str, result: &str, retry: u32, max_retry: Option<u32>) -> Task {
        Task {
            function_result: result.into(),
            retry,
            max_retry,
            ..task(id, "done", false)
        }
    }

    #[test]
    fn finished_tasks_leave_the_window_with_their_final_state() {
        let a = "00000000-0000-0000-0000-00000000000a";
        let b = "00000000-0000-0000-0000-00000000000b";
        let c = "00000000-0000-0000-0000-00000000000c";
        let d = "00000000-0000-0000-0000-00000000000d";
        let running = [
            task(a, "running", false),
            task(b, "new", false),
            task(c, "running", false),
            task(d, "running", false),
        ];
        let before = steady_status(
            &StorageClusterStatus::default(),
            &cluster("active", false),
            &running,
        );
        assert_eq!(before.tasks.len(), 4);
        let later = [
            task(a, "done", false),
            task(b, "done", true),
            task(c, "running", false),
        ];
        let after = steady_status(&before, &cluster("active", false), &later);
        assert_eq!(after.tasks.len(), 1);
        let finished: Vec<(String, Option<String>)> = finished_tasks(&before, &after, &later)
            .into_iter()
            .map(|(t, last)| (t.id.clone(), last.map(|l| l.id.to_string())))
            .collect();
        assert_eq!(
            finished,
            [
                (a.to_string(), Some(a.to_string())),
                (b.to_string(), Some(b.to_string())),
                (d.to_string(), None),
            ]
        );
    }

    #[test]
    fn an_open_task_pushed_out_of_a_full_window_has_not_finished() {
        let ids: Vec<String> = (0..=MAX_TASKS)
            .map(|i| format!("00000000-0000-0000-0000-{i:012}"))
            .collect();
        let first: Vec<Task> = ids[1..].iter().map(|i| task(i, "new", false)).collect();
        let before = steady_status(
            &StorageClusterStatus::default(),
            &cluster("active", false),
            &first,
        );
        // A new task listed first pushes the last one out; it is still open.
        let all: Vec<Task> = ids.iter().map(|i| task(i, "new", false)).collect();
        let after = steady_status(&before, &cluster("active", false), &all);
        assert!(finished_tasks(&before, &after, &all).is_empty());
    }

    /// The verdict's contract: a node add that gave up ("max retry reached", or its retries
    /// spent) is a Warning, a canceled task and a completed one are Normal.
    #[test]
    fn the_verdict_comes_from_the_retries_and_the_result() {
        let id = "00000000-0000-0000-0000-00000000000a";
        let seen = ClusterTask {
            id: id.into(),
            type_: Some("node_add".into()),
            status: Some("suspended".into()),
            retry: Some(3),
        };
        let cases = [
            (
                ended(id, "max retry reached", 11, Some(11)),
                true,
                "TaskFailed",
            ),
            (
                ended(id, "Node add result: False", 11, Some(11)),
                true,
                "TaskFailed",
            ),
            (ended(id, "max retry reached", 2, None), true, "TaskFailed"),
            (
                ended(id, "Node add result: False", 1, Some(11)),
                true,
                "TaskFailed",
            ),
            (
                ended(id, "Node add result: Success", 0, Some(11)),
                false,
                "TaskCompleted",
            ),
            (
                ended(id, "Node add result: Success", 4, Some(11)),
                false,
                "TaskCompleted",
            ),
            (ended(id, "Done", 0, Some(8)), false, "TaskCompleted"),
            (task(id, "done", true), false, "TaskCanceled"),
        ];
        for (last, warning, reason) in cases {
            let v = task_verdict(&seen, Some(&last));
            assert_eq!(
                (v.warning, v.reason),
                (warning, reason),
                "{last:?}: {}",
                v.note
            );
            assert!(
                v.note.contains(id) && v.note.contains("node_add"),
                "{}",
                v.note
            );
        }
        let gave_up = task_verdict(&seen, Some(&ended(id, "max retry reached", 11, Some(11))));
        assert!(
            gave_up.note.contains("gave up after 11 of 11 retries"),
            "{}",
            gave_up.note
        );
        let gone = task_verdict(&seen, None);
        assert_eq!((gone.warning, gone.reason), (false, "TaskLeftQueue"));
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

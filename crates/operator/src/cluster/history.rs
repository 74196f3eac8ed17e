//! The history of a cluster's operations: finished StorageClusterOps are the audit record,
//! `spec.opsHistoryLimit` of them are kept per cluster for at most `spec.opsRetention`
//! (the plan every Ops kind follows, [`history::plan`]), and the newest few are
//! remembered in `status.recentOperations` after their objects are gone.
//!
//! Run by the cluster's steady state: [`History::read`] lists the cluster's operations,
//! [`recent`] (pure) merges them into what the status remembers, and only once that status
//! is written does [`History::prune`] delete what [`to_delete`] (pure) chooses. A crash
//! between the two leaves operations that the next pass deletes; no order of failures
//! deletes an operation before it is on record.

use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use simplyblock_api::storage_cluster::{OperationRecord, StorageCluster};
use simplyblock_api::storage_cluster_ops::StorageClusterOps;

use crate::runtime::ops::history::{self, Bounds};

/// The most operations `status.recentOperations` holds; the schema caps the list at this.
pub const MAX_RECENT: usize = 5;

fn is_terminal(op: &StorageClusterOps) -> bool {
    op.status.as_ref().is_some_and(|s| s.phase.is_terminal())
}

/// The terminal operations to delete so that `limit` remain, oldest first: the plan every
/// Ops kind's history follows ([`history::plan`]), without the retention. Pure.
pub fn to_delete<'a>(
    ops: &'a [StorageClusterOps],
    limit: i32,
    lock_holder: Option<&str>,
) -> Vec<&'a StorageClusterOps> {
    let bounds = Bounds {
        limit: usize::try_from(limit).unwrap_or(0),
        retention: None,
    };
    history::plan(ops, bounds, lock_holder, Timestamp::now()).delete
}

/// What the cluster remembers: `stored` merged with the terminal operations in `ops`, one
/// entry per name (what is observed wins), newest first by completion time, at most
/// [`MAX_RECENT`]. Pure.
pub fn recent(stored: &[OperationRecord], ops: &[StorageClusterOps]) -> Vec<OperationRecord> {
    let observed: Vec<OperationRecord> = ops
        .iter()
        .filter(|op| is_terminal(op))
        .filter_map(|op| {
            let status = op.status.as_ref()?;
            Some(OperationRecord {
                name: op.name_any(),
                action: op.spec.action,
                phase: status.phase,
                completed_at: status.completed_at.clone(),
                message: status.message.clone(),
            })
        })
        .collect();
    let mut merged: Vec<OperationRecord> = stored
        .iter()
        .filter(|r| !observed.iter().any(|o| o.name == r.name))
        .cloned()
        .collect();
    merged.extend(observed);
    merged.sort_by(|a, b| {
        let key = |r: &OperationRecord| (r.completed_at.as_ref().map(|t| t.0), r.name.clone());
        key(b).cmp(&key(a))
    });
    merged.truncate(MAX_RECENT);
    merged
}

/// A cluster's operations as one pass read them.
pub struct History {
    ops: Vec<StorageClusterOps>,
}

impl History {
    /// The operations naming `cluster`, selected by `spec.clusterRef` on the server.
    pub async fn read(kube: &kube::Client, cluster: &StorageCluster) -> Result<Self, kube::Error> {
        let api: Api<StorageClusterOps> =
            Api::namespaced(kube.clone(), &cluster.namespace().unwrap_or_default());
        let params =
            ListParams::default().fields(&format!("spec.clusterRef={}", cluster.name_any()));
        Ok(History {
            ops: api.list(&params).await?.items,
        })
    }

    /// `stored` with what this pass observed (see [`recent`]).
    pub fn recent(&self, stored: &[OperationRecord]) -> Vec<OperationRecord> {
        recent(stored, &self.ops)
    }

    /// Deletes the operations beyond the cluster's `spec.opsHistoryLimit` or
    /// `spec.opsRetention`. Each delete is
    /// bound to the object read, so an operation created again under the same name is not
    /// touched; one already gone is no error. Call only after the status holding their
    /// records is written.
    pub async fn prune(
        &self,
        kube: &kube::Client,
        cluster: &StorageCluster,
    ) -> Result<usize, kube::Error> {
        let lock = cluster
            .status
            .as_ref()
            .and_then(|s| s.active_ops_ref.as_deref());
        let api: Api<StorageClusterOps> =
            Api::namespaced(kube.clone(), &cluster.namespace().unwrap_or_default());
        let bounds = Bounds::of(std::slice::from_ref(cluster));
        let chosen = history::plan(&self.ops, bounds, lock, Timestamp::now());
        let deleted = history::delete_each(&api, &chosen.delete).await?;
        if deleted > 0 {
            tracing::info!(cluster = %cluster.name_any(), deleted, "deleted finished operations beyond spec.opsHistoryLimit");
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use simplyblock_api::common::OpsPhase;

    /// An operation created at second `created`, completed at second `completed` when
    /// `phase` is terminal.
    fn op(name: &str, phase: &str, created: u32, completed: Option<u32>) -> StorageClusterOps {
        let at = |s: u32| format!("2026-01-01T00:00:{s:02}Z");
        let mut status = json!({"phase": phase, "message": format!("{name} {phase}")});
        if let Some(c) = completed {
            status["completedAt"] = json!(at(c));
        }
        serde_json::from_value(json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "StorageClusterOps",
            "metadata": {"name": name, "uid": format!("uid-{name}"), "creationTimestamp": at(created)},
            "spec": {"clusterRef": "sb", "action": "CancelTask", "cancelTask": {"taskID": "t"}},
            "status": status,
        }))
        .expect("op")
    }

    fn names(ops: Vec<&StorageClusterOps>) -> Vec<String> {
        ops.into_iter().map(|o| o.name_any()).collect()
    }

    #[test]
    fn the_oldest_finished_operations_go_first() {
        let ops = [
            op("d", "Succeeded", 4, Some(40)),
            op("a", "Succeeded", 1, Some(10)),
            op("c", "Failed", 3, Some(30)),
            op("b", "Aborted", 2, Some(20)),
        ];
        assert_eq!(names(to_delete(&ops, 2, None)), ["a", "b"]);
        assert_eq!(names(to_delete(&ops, 4, None)), Vec::<String>::new());
        assert_eq!(names(to_delete(&ops, 0, None)), ["a", "b", "c", "d"]);
        // Below 0 is refused by the schema; read as 0 all the same.
        assert_eq!(to_delete(&ops, -1, None).len(), 4);
    }

    #[test]
    fn completion_decides_before_creation() {
        // Created first, finished last: the newest record.
        let ops = [
            op("early", "Succeeded", 1, Some(50)),
            op("late", "Succeeded", 2, Some(20)),
        ];
        assert_eq!(names(to_delete(&ops, 1, None)), ["late"]);
        // Same completion second: creation, then the name, decide.
        let ops = [
            op("y", "Succeeded", 2, Some(9)),
            op("x", "Succeeded", 2, Some(9)),
            op("z", "Succeeded", 1, Some(9)),
        ];
        assert_eq!(names(to_delete(&ops, 1, None)), ["z", "x"]);
        // A terminal operation without a completion time counts as the oldest.
        let ops = [
            op("timed", "Succeeded", 1, Some(5)),
            op("untimed", "Failed", 9, None),
        ];
        assert_eq!(names(to_delete(&ops, 1, None)), ["untimed"]);
    }

    #[test]
    fn an_unfinished_operation_is_never_deleted() {
        let ops = [
            op("pending", "Pending", 1, None),
            op("running", "Running", 2, None),
            op("old", "Succeeded", 3, Some(10)),
            op("new", "Succeeded", 4, Some(20)),
        ];
        assert_eq!(names(to_delete(&ops, 0, None)), ["old", "new"]);
        assert_eq!(names(to_delete(&ops, 1, None)), ["old"]);
        // Unfinished ones do not count toward the limit.
        assert_eq!(names(to_delete(&ops, 2, None)), Vec::<String>::new());
        // No status at all is not terminal either.
        let mut bare = op("bare", "Pending", 1, None);
        bare.status = None;
        assert!(to_delete(std::slice::from_ref(&bare), 0, None).is_empty());
    }

    #[test]
    fn the_lock_holder_and_objects_being_deleted_are_left_alone() {
        let mut going = op("going", "Succeeded", 1, Some(10));
        going.metadata.deletion_timestamp = going.metadata.creation_timestamp.clone();
        let ops = [
            going,
            op("holder", "Succeeded", 2, Some(20)),
            op("kept", "Succeeded", 3, Some(30)),
        ];
        assert_eq!(
            names(to_delete(&ops, 1, Some("holder"))),
            Vec::<String>::new()
        );
        assert_eq!(names(to_delete(&ops, 1, None)), ["holder"]);
    }

    fn record(name: &str, phase: OpsPhase, completed: u32) -> OperationRecord {
        serde_json::from_value(json!({
            "name": name, "action": "Activate", "phase": phase,
            "completedAt": format!("2026-01-01T00:00:{completed:02}Z"), "message": "stored",
        }))
        .expect("record")
    }

    #[test]
    fn the_history_is_newest_first_and_outlives_the_objects() {
        let stored = [
            record("gone-2", OpsPhase::Failed, 20),
            record("gone-1", OpsPhase::Succeeded, 10),
        ];
        let ops = [
            op("running", "Running", 5, None),
            op("done", "Succeeded", 6, Some(30)),
        ];
        let recent = recent(&stored, &ops);
        let got: Vec<(&str, OpsPhase)> =
            recent.iter().map(|r| (r.name.as_str(), r.phase)).collect();
        assert_eq!(
            got,
            [
                ("done", OpsPhase::Succeeded),
                ("gone-2", OpsPhase::Failed),
                ("gone-1", OpsPhase::Succeeded)
            ]
        );
        let done = &recent[0];
        assert_eq!(done.message.as_deref(), Some("done Succeeded"));
        assert_eq!(
            done.action,
            simplyblock_api::storage_cluster_ops::ClusterAction::CancelTask
        );
        assert_eq!(
            done.completed_at
                .as_ref()
                .map(|t| t.0.to_string())
                .as_deref(),
            Some("2026-01-01T00:00:30Z")
        );
    }

    #[test]
    fn the_history_holds_one_entry_per_name_and_at_most_five() {
        // Stored says Running-era text; the object now says how it ended: the object wins.
        let stored = [record("a", OpsPhase::Failed, 1)];
        let ops: Vec<StorageClusterOps> = (0..7)
            .map(|i| {
                op(
                    &format!("{}", (b'a' + i) as char),
                    "Succeeded",
                    1,
                    Some(u32::from(i) + 10),
                )
            })
            .collect();
        let recent = recent(&stored, &ops);
        let got: Vec<&str> = recent.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(got, ["g", "f", "e", "d", "c"]);
        assert_eq!(recent.len(), MAX_RECENT);
        let recent = super::recent(&stored, &ops[..1]);
        assert_eq!(recent.len(), 1);
        assert_eq!(recent[0].phase, OpsPhase::Succeeded);
        assert_eq!(recent[0].message.as_deref(), Some("a Succeeded"));
    }

    #[test]
    fn an_unchanged_history_compares_equal() {
        // What makes the steady state skip the write: the second pass computes the same list.
        let ops = [
            op("a", "Succeeded", 1, Some(10)),
            op("b", "Aborted", 2, Some(11)),
        ];
        let first = recent(&[], &ops);
        assert_eq!(recent(&first, &ops), first);
        assert_eq!(recent(&first, &[]), first);
    }
}

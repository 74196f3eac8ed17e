//! The bounded history every Ops kind keeps: finished operations (Succeeded, Failed or
//! Aborted) are the audit record, and the namespace's StorageCluster bounds it with
//! `spec.opsHistoryLimit` (how many finished operations each target keeps) and
//! `spec.opsRetention` (how long a finished operation is kept at most).
//!
//! [`plan`] (pure) chooses what goes; [`prune`] reads the operations of one target,
//! plans, and deletes. The runtime runs it whenever it looks at a finished operation, so
//! a crash between two deletes only leaves work for the next look. An operation that has
//! not finished is never chosen: its record is the only account of work in flight (a
//! restore's volume, a migration), and some kinds refuse its deletion at such steps.

use std::time::Duration;

use jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use simplyblock_api::common::OpsKind;
use simplyblock_api::storage_cluster::{
    DEFAULT_OPS_HISTORY_LIMIT, DEFAULT_OPS_RETENTION, StorageCluster,
};

/// How much history a target keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Finished operations kept per target; the newest stay.
    pub limit: usize,
    /// How long after it finished an operation is kept; `None` keeps it for ever.
    pub retention: Option<Duration>,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            limit: DEFAULT_OPS_HISTORY_LIMIT as usize,
            retention: parse_duration(DEFAULT_OPS_RETENTION),
        }
    }
}

impl Bounds {
    /// The bounds the namespace's StorageClusters set: the tightest of each, since one
    /// history serves them all; the defaults when there is none. A retention that does not
    /// parse (the schema forbids it) is read as none rather than deleting anything early.
    pub fn of(clusters: &[StorageCluster]) -> Bounds {
        if clusters.is_empty() {
            return Bounds::default();
        }
        let limit = clusters
            .iter()
            .map(|c| usize::try_from(c.spec.ops_history_limit).unwrap_or(0))
            .min()
            .unwrap_or_default();
        let retention = clusters
            .iter()
            .filter_map(|c| {
                parse_duration(
                    c.spec
                        .ops_retention
                        .as_ref()
                        .map_or(DEFAULT_OPS_RETENTION, |d| d.0.as_str()),
                )
            })
            .min();
        Bounds { limit, retention }
    }
}

/// A Kubernetes duration (`90s`, `1h30m`, `168h`); `None` when it is not one.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (seconds, len) = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("µs", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ]
        .into_iter()
        .find(|(unit, _)| rest.starts_with(unit))
        .map(|(unit, s)| (s, unit.len()))?;
        total += number * seconds;
        rest = &rest[len..];
    }
    Duration::try_from_secs_f64(total).ok()
}

/// What [`plan`] decided for one target.
#[derive(Debug)]
pub struct Plan<'a, K> {
    /// The operations to delete, oldest first.
    pub delete: Vec<&'a K>,
    /// When the oldest kept operation outlives the retention: look again then.
    pub next_expiry: Option<Timestamp>,
}

fn completed<K: OpsKind>(op: &K) -> Option<Timestamp> {
    op.status_core().completed_at.map(|t| t.0)
}

/// Oldest first: by completion, then creation, then name. A finished operation without a
/// completion time (written by hand) counts as the oldest.
fn age_key<K: OpsKind + Resource>(op: &K) -> (Option<Timestamp>, Option<Timestamp>, String) {
    (
        completed(op),
        op.meta().creation_timestamp.as_ref().map(|t| t.0),
        op.meta().name.clone().unwrap_or_default(),
    )
}

/// The label a hub's StorageSiteDeployment puts on what its ManifestWork applies to a site.
pub const SITE_DEPLOYMENT_LABEL: &str = "storage.simplyblock.io/site-deployment";

/// An operation a hub's ManifestWork keeps applied (a site deployment's discovery): a
/// deleted one would be applied again, and run again, so it stays until its work goes.
fn applied_by_a_hub<K: Resource>(op: &K) -> bool {
    op.meta()
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(SITE_DEPLOYMENT_LABEL))
}

/// The finished operations among `ops` (one target's) to delete: beyond `bounds.limit`,
/// oldest first, and any finished longer ago than `bounds.retention` at `now`. Never an
/// unfinished one, nor one already being deleted, nor one a hub applies (none of them
/// counts toward the limit), nor `protected` (a lock holder, whose lock is released
/// first). Pure.
pub fn plan<'a, K: OpsKind + Resource>(
    ops: &'a [K],
    bounds: Bounds,
    protected: Option<&str>,
    now: Timestamp,
) -> Plan<'a, K> {
    let mut finished: Vec<&K> = ops
        .iter()
        .filter(|op| {
            op.status_core().phase.is_terminal()
                && op.meta().deletion_timestamp.is_none()
                && !applied_by_a_hub(*op)
        })
        .collect();
    // Newest first.
    finished.sort_by_key(|op| std::cmp::Reverse(age_key(*op)));
    let expiry = |op: &K| -> Option<Timestamp> {
        let retention = bounds.retention?;
        let span = jiff::SignedDuration::try_from(retention).ok()?;
        // Without a completion time the creation time stands in; without both, at once.
        let at = completed(op)
            .or_else(|| op.meta().creation_timestamp.as_ref().map(|t| t.0))
            .unwrap_or(Timestamp::UNIX_EPOCH);
        Some(at.checked_add(span).unwrap_or(Timestamp::MAX))
    };
    let mut delete = Vec::new();
    let mut next_expiry: Option<Timestamp> = None;
    for (i, op) in finished.into_iter().enumerate() {
        if op.meta().name.as_deref() == protected {
            continue;
        }
        let expires = expiry(op);
        if i >= bounds.limit || expires.is_some_and(|e| e <= now) {
            delete.push(op);
        } else if let Some(e) = expires {
            next_expiry = Some(next_expiry.map_or(e, |n| n.min(e)));
        }
    }
    delete.reverse();
    Plan {
        delete,
        next_expiry,
    }
}

/// Deletes each of `chosen`, bound to the object read so an operation created again under
/// the same name is not touched; one already gone is no error. Returns how many went.
pub async fn delete_each<K>(api: &Api<K>, chosen: &[&K]) -> Result<usize, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + DeserializeOwned,
{
    let mut deleted = 0;
    for op in chosen {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: op.meta().uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&op.name_any(), &params).await {
            Ok(_) => deleted += 1,
            // Gone already, or replaced by a newer object of the same name.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

/// Deletes what [`plan`] chooses among the operations `ops` lists whose target
/// (`target_of`) is `target`, under the bounds of the StorageClusters `clusters` lists
/// (the operations' namespace's; every cluster the operator serves for a kind stored
/// outside namespaces). Each delete is bound to the object read, so an operation created
/// again under the same name is not touched; one already gone is no error. Returns how
/// long until the next operation outlives the retention.
pub async fn prune<K>(
    ops: &Api<K>,
    clusters: &Api<StorageCluster>,
    target: &str,
    target_of: impl Fn(&K) -> &str,
    protected: Option<&str>,
) -> Result<Option<Duration>, kube::Error>
where
    K: OpsKind + Resource<DynamicType = ()> + Clone + std::fmt::Debug + DeserializeOwned,
{
    let bounds = Bounds::of(&clusters.list(&ListParams::default()).await?.items);
    let api = ops;
    let ops: Vec<K> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|op| target_of(op) == target)
        .collect();
    let now = Timestamp::now();
    let chosen = plan(&ops, bounds, protected, now);
    let deleted = delete_each(api, &chosen.delete).await?;
    if deleted > 0 {
        tracing::info!(
            kind = %K::kind(&()),
            target,
            deleted,
            limit = bounds.limit,
            "deleted finished operations beyond the StorageCluster's opsHistoryLimit or opsRetention"
        );
    }
    Ok(chosen
        .next_expiry
        .map(|e| Duration::try_from(e.duration_since(now)).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use simplyblock_api::storage_node_ops::StorageNodeOps;

    /// A node operation created at second `created`, completed at second `completed`.
    fn op(name: &str, phase: &str, created: u32, completed: Option<u32>) -> StorageNodeOps {
        let at = |s: u32| format!("2026-01-01T00:{:02}:{:02}Z", s / 60, s % 60);
        let mut status = json!({"phase": phase});
        if let Some(c) = completed {
            status["completedAt"] = json!(at(c));
        }
        serde_json::from_value(json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "StorageNodeOps",
            "metadata": {"name": name, "uid": format!("uid-{name}"), "creationTimestamp": at(created)},
            "spec": {"nodeRef": "n", "action": "Restart"},
            "status": status,
        }))
        .expect("op")
    }

    fn at(s: u32) -> Timestamp {
        format!("2026-01-01T00:{:02}:{:02}Z", s / 60, s % 60)
            .parse()
            .expect("time")
    }

    fn names<K: Resource>(ops: &[&K]) -> Vec<String> {
        ops.iter()
            .map(|o| o.meta().name.clone().unwrap_or_default())
            .collect()
    }

    fn limit(limit: usize) -> Bounds {
        Bounds {
            limit,
            retention: None,
        }
    }

    #[test]
    fn beyond_the_limit_the_oldest_finished_go_first() {
        let ops = [
            op("d", "Succeeded", 4, Some(40)),
            op("a", "Succeeded", 1, Some(10)),
            op("c", "Failed", 3, Some(30)),
            op("b", "Aborted", 2, Some(20)),
        ];
        let now = at(100);
        assert_eq!(names(&plan(&ops, limit(2), None, now).delete), ["a", "b"]);
        assert!(plan(&ops, limit(4), None, now).delete.is_empty());
        assert_eq!(
            names(&plan(&ops, limit(0), None, now).delete),
            ["a", "b", "c", "d"]
        );
    }

    #[test]
    fn completion_decides_then_creation_then_the_name() {
        let ops = [
            op("early", "Succeeded", 1, Some(50)),
            op("late", "Succeeded", 2, Some(20)),
        ];
        assert_eq!(names(&plan(&ops, limit(1), None, at(99)).delete), ["late"]);
        let ops = [
            op("y", "Succeeded", 2, Some(9)),
            op("x", "Succeeded", 2, Some(9)),
            op("z", "Succeeded", 1, Some(9)),
        ];
        assert_eq!(
            names(&plan(&ops, limit(1), None, at(99)).delete),
            ["z", "x"]
        );
        // Without a completion time: the oldest.
        let ops = [
            op("timed", "Succeeded", 1, Some(5)),
            op("untimed", "Failed", 9, None),
        ];
        assert_eq!(
            names(&plan(&ops, limit(1), None, at(99)).delete),
            ["untimed"]
        );
    }

    #[test]
    fn active_operations_are_kept_and_not_counted() {
        let ops = [
            op("pending", "Pending", 1, None),
            op("running", "Running", 2, None),
            op("old", "Succeeded", 3, Some(10)),
            op("new", "Succeeded", 4, Some(20)),
        ];
        let now = at(99);
        assert_eq!(
            names(&plan(&ops, limit(0), None, now).delete),
            ["old", "new"]
        );
        assert_eq!(names(&plan(&ops, limit(1), None, now).delete), ["old"]);
        assert!(plan(&ops, limit(2), None, now).delete.is_empty());
        // Long past any retention, an unfinished one still stays.
        let bounds = Bounds {
            limit: 0,
            retention: Some(Duration::from_secs(1)),
        };
        assert_eq!(
            names(&plan(&ops[..2], bounds, None, at(3000)).delete),
            Vec::<String>::new()
        );
        let mut bare = op("bare", "Pending", 1, None);
        bare.status = None;
        assert!(
            plan(std::slice::from_ref(&bare), limit(0), None, now)
                .delete
                .is_empty()
        );
    }

    #[test]
    fn the_protected_operation_and_ones_being_deleted_stay() {
        let mut going = op("going", "Succeeded", 1, Some(10));
        going.metadata.deletion_timestamp = going.metadata.creation_timestamp.clone();
        let ops = [
            going,
            op("holder", "Succeeded", 2, Some(20)),
            op("kept", "Succeeded", 3, Some(30)),
        ];
        assert!(
            plan(&ops, limit(1), Some("holder"), at(99))
                .delete
                .is_empty()
        );
        assert_eq!(
            names(&plan(&ops, limit(1), None, at(99)).delete),
            ["holder"]
        );
    }

    #[test]
    fn an_operation_a_hub_applies_stays() {
        let mut applied = op("applied", "Succeeded", 1, Some(10));
        applied.metadata.labels =
            Some([(SITE_DEPLOYMENT_LABEL.to_string(), "uid".to_string())].into());
        let ops = [applied, op("own", "Succeeded", 2, Some(20))];
        assert_eq!(names(&plan(&ops, limit(0), None, at(99)).delete), ["own"]);
    }

    #[test]
    fn the_retention_removes_what_finished_too_long_ago_and_says_when_next() {
        let ops = [
            op("old", "Succeeded", 1, Some(10)),
            op("mid", "Failed", 2, Some(70)),
            op("new", "Succeeded", 3, Some(130)),
        ];
        let bounds = Bounds {
            limit: 10,
            retention: Some(Duration::from_secs(60)),
        };
        let chosen = plan(&ops, bounds, None, at(100));
        assert_eq!(names(&chosen.delete), ["old"]);
        // "mid" is the next to outlive it: 70 + 60.
        assert_eq!(chosen.next_expiry, Some(at(130)));
        let chosen = plan(&ops, bounds, None, at(190));
        assert_eq!(names(&chosen.delete), ["old", "mid", "new"]);
        assert_eq!(chosen.next_expiry, None);
        // The limit and the retention together.
        let both = Bounds {
            limit: 1,
            retention: Some(Duration::from_secs(60)),
        };
        let chosen = plan(&ops, both, None, at(100));
        assert_eq!(names(&chosen.delete), ["old", "mid"]);
        assert_eq!(chosen.next_expiry, Some(at(190)));
    }

    #[test]
    fn kubernetes_durations_parse() {
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("168h"), Some(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("1.5m"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        for bad in ["", "7d", "h", "10", "1h-2m"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_tightest_cluster_bounds_a_shared_namespace() {
        let cluster = |limit: i32, retention: Option<&str>| -> StorageCluster {
            let mut spec =
                json!({"maxSubsystemCount": 10, "vcpuCount": 4, "opsHistoryLimit": limit});
            if let Some(r) = retention {
                spec["opsRetention"] = json!(r);
            }
            serde_json::from_value(json!({
                "apiVersion": simplyblock_api::API_VERSION, "kind": "StorageCluster",
                "metadata": {"name": format!("c{limit}")}, "spec": spec,
            }))
            .expect("cluster")
        };
        assert_eq!(Bounds::of(&[]), Bounds::default());
        assert_eq!(
            Bounds::default().retention,
            Some(Duration::from_secs(604_800))
        );
        let b = Bounds::of(&[cluster(5, Some("2h")), cluster(3, None)]);
        assert_eq!(
            b,
            Bounds {
                limit: 3,
                retention: Some(Duration::from_secs(7200))
            }
        );
    }
}

//! The Ops metrics, per kind prefix (`simplyblock_<kind>_`):
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `operations_total` | counter | `<target>, action, result` |
//! | `operation_duration_seconds` | histogram | `<target>, action, result` |
//! | `operation_step_duration_seconds` | histogram | `<target>, action, step` (a step left) |
//! | `operation_step_deadline_exceeded_total` | counter | `<target>, action, step` |
//! | `operation_lock_wait_seconds` | histogram | `<target>, action` (creation to lock) |
//! | `operation_active_state` | gauge | `<target>` (1 while an operation holds the lock) |
//!
//! Kinds add their own through the operator's [`Metrics`] (StorageClusterOps:
//! `rolling_restart_peer_hold_seconds`, `rolling_restart_node_index_count`,
//! `rolling_restart_node_count`).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use simplyblock_api::common::OpsPhase;

use super::OpsResource;
pub use crate::runtime::metrics::{Labels, Metrics};

fn seconds_since(t: Timestamp) -> f64 {
    Timestamp::now().duration_since(t).as_secs_f64().max(0.0)
}

fn result(phase: OpsPhase) -> &'static str {
    match phase {
        OpsPhase::Succeeded => "succeeded",
        OpsPhase::Failed => "failed",
        OpsPhase::Aborted => "aborted",
        OpsPhase::Running => "running",
        OpsPhase::Pending => "pending",
    }
}

fn target_labels<K: OpsResource>(op: &K) -> Labels {
    vec![(K::TARGET_LABEL, op.metric_target())]
}

/// An operation reached `phase` (terminal): count it, observe its duration, and clear its
/// target's active state.
pub fn finished<K: OpsResource>(m: &Metrics, op: &K, phase: OpsPhase, started_at: Option<&Time>) {
    let mut labels = target_labels(op);
    labels.push(("action", op.action_name().to_owned()));
    labels.push(("result", result(phase).to_owned()));
    let name = |item: &str| format!("{}{item}", K::METRIC_PREFIX);
    m.count(&name("operations_total"), labels.clone());
    let seconds = started_at.map(|t| seconds_since(t.0)).unwrap_or(0.0);
    m.observe(&name("operation_duration_seconds"), labels, seconds);
    if K::LOCKS_TARGET {
        m.set(&name("operation_active_state"), target_labels(op), 0.0);
    }
}

fn step_labels<K: OpsResource>(op: &K, step: &str) -> Labels {
    let mut labels = target_labels(op);
    labels.push(("action", op.action_name().to_owned()));
    labels.push(("step", step.to_owned()));
    labels
}

/// An operation left `step`, which it entered at `entered`.
pub fn step_left<K: OpsResource>(m: &Metrics, op: &K, step: &str, entered: Timestamp) {
    m.observe(
        &format!("{}operation_step_duration_seconds", K::METRIC_PREFIX),
        step_labels(op, step),
        seconds_since(entered),
    );
}

/// An operation failed because `step` outlived its deadline.
pub fn deadline_exceeded<K: OpsResource>(m: &Metrics, op: &K, step: &str) {
    m.count(
        &format!("{}operation_step_deadline_exceeded_total", K::METRIC_PREFIX),
        step_labels(op, step),
    );
}

/// An operation took its target's lock and started, having waited since `created`.
pub fn started<K: OpsResource>(m: &Metrics, op: &K, created: Option<Timestamp>) {
    if let Some(created) = created {
        let mut labels = target_labels(op);
        labels.push(("action", op.action_name().to_owned()));
        m.observe(
            &format!("{}operation_lock_wait_seconds", K::METRIC_PREFIX),
            labels,
            seconds_since(created),
        );
    }
    if K::LOCKS_TARGET {
        m.set(
            &format!("{}operation_active_state", K::METRIC_PREFIX),
            target_labels(op),
            1.0,
        );
    }
}

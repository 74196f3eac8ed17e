//! The Ops metrics, per kind prefix (`simplyblock_<kind>_`):
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `operations_total` | counter | `<target>, action, result` |
//! | `operation_duration_seconds` | summary | `<target>, action, result` |
//! | `operation_step_duration_seconds` | summary | `<target>, action, step` (a step left) |
//! | `operation_step_deadline_exceeded_total` | counter | `<target>, action, step` |
//! | `operation_lock_wait_seconds` | summary | `<target>, action` (creation to lock) |
//! | `operation_active_state` | gauge | `<target>` (1 while an operation holds the lock) |
//!
//! Kinds add their own through [`observe`] and [`set_gauge`] (StorageClusterOps:
//! `rolling_restart_peer_hold_seconds`, `rolling_restart_node_index_count`,
//! `rolling_restart_node_count`). Beside them, for every controller,
//! `simplyblock_reconcile_total{controller,result}` ([`reconciled`]).
//!
//! Kept in one process-wide registry and rendered in the Prometheus text format by
//! [`render`], which [`crate::metrics_server`] serves at `/metrics`. A family's type is
//! the one it was registered with, never guessed from its name: a gauge may end in
//! `_count`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{LazyLock, Mutex};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::reflector::ObjectRef;
use simplyblock_api::common::OpsPhase;

use super::OpsResource;

/// A sample's labels, in the order they are rendered.
pub type Labels = Vec<(&'static str, String)>;

#[derive(Default)]
struct Registry {
    /// (metric name, labels) → value.
    counters: BTreeMap<(String, Labels), f64>,
    gauges: BTreeMap<(String, Labels), f64>,
    /// (family name, labels) → (sum, count).
    summaries: BTreeMap<(String, Labels), (f64, f64)>,
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Mutex::default);

fn with<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    let mut r = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    f(&mut r)
}

/// Adds one observation of `value` to the summary `name` (its `_sum` and `_count`).
pub fn observe(name: String, labels: Labels, value: f64) {
    with(|r| {
        let entry = r.summaries.entry((name, labels)).or_default();
        entry.0 += value.max(0.0);
        entry.1 += 1.0;
    });
}

/// Sets the gauge `name`.
pub fn set_gauge(name: String, labels: Labels, value: f64) {
    with(|r| {
        r.gauges.insert((name, labels), value);
    });
}

/// Adds `by` to the counter `name`.
pub fn add_counter(name: String, labels: Labels, by: f64) {
    with(|r| {
        *r.counters.entry((name, labels)).or_default() += by;
    });
}

fn count(name: String, labels: Labels) {
    add_counter(name, labels, 1.0);
}

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

/// An operation reached `phase` (terminal): count it, observe its duration, and clear its
/// target's active state.
pub fn finished<K: OpsResource>(op: &K, phase: OpsPhase, started_at: Option<&Time>) {
    let target = op.target_name().to_owned();
    let labels: Labels = vec![
        (K::TARGET_LABEL, target.clone()),
        ("action", op.action_name().to_owned()),
        ("result", result(phase).to_owned()),
    ];
    let name = |item: &str| format!("{}{item}", K::METRIC_PREFIX);
    count(name("operations_total"), labels.clone());
    let seconds = started_at.map(|t| seconds_since(t.0)).unwrap_or(0.0);
    observe(name("operation_duration_seconds"), labels, seconds);
    set_gauge(
        name("operation_active_state"),
        vec![(K::TARGET_LABEL, target)],
        0.0,
    );
}

fn step_labels<K: OpsResource>(op: &K, step: &str) -> Labels {
    vec![
        (K::TARGET_LABEL, op.target_name().to_owned()),
        ("action", op.action_name().to_owned()),
        ("step", step.to_owned()),
    ]
}

/// An operation left `step`, which it entered at `entered`.
pub fn step_left<K: OpsResource>(op: &K, step: &str, entered: Timestamp) {
    observe(
        format!("{}operation_step_duration_seconds", K::METRIC_PREFIX),
        step_labels(op, step),
        seconds_since(entered),
    );
}

/// An operation failed because `step` outlived its deadline.
pub fn deadline_exceeded<K: OpsResource>(op: &K, step: &str) {
    count(
        format!("{}operation_step_deadline_exceeded_total", K::METRIC_PREFIX),
        step_labels(op, step),
    );
}

/// A discovery run (OperatorOps, which has no target and takes no lock) reached `phase`
/// (terminal): `simplyblock_operator_operations_total{namespace,action,result}` and
/// `simplyblock_operator_operation_duration_seconds{…}` (sum and count).
pub fn operator_ops_finished(
    namespace: &str,
    action: &str,
    phase: OpsPhase,
    started_at: Option<&Time>,
) {
    let labels: Labels = vec![
        ("namespace", namespace.to_owned()),
        ("action", action.to_owned()),
        ("result", result(phase).to_owned()),
    ];
    let seconds = started_at
        .map(|t| Timestamp::now().duration_since(t.0).as_secs_f64().max(0.0))
        .unwrap_or(0.0);
    with(|r| {
        for (item, add) in [
            ("operations_total", 1.0),
            ("operation_duration_seconds_sum", seconds),
            ("operation_duration_seconds_count", 1.0),
        ] {
            *r.counters
                .entry((format!("simplyblock_operator_{item}"), labels.clone()))
                .or_default() += add;
        }
    });
}

/// What the newest discovery run in `namespace` put in its draft:
/// `simplyblock_operator_discovery_workers_found_count{namespace}` and
/// `simplyblock_operator_discovery_devices_found_count{namespace}`.
pub fn discovery_found(namespace: &str, workers: usize, devices: usize) {
    let labels: Labels = vec![("namespace", namespace.to_owned())];
    with(|r| {
        r.gauges.insert(
            (
                "simplyblock_operator_discovery_workers_found_count".to_owned(),
                labels.clone(),
            ),
            workers as f64,
        );
        r.gauges.insert(
            (
                "simplyblock_operator_discovery_devices_found_count".to_owned(),
                labels,
            ),
            devices as f64,
        );
    });
}

/// A controller's reconcile ended: `result` is `success` or `error`. Results of the
/// controller's own machinery (an object gone from its cache, a watch error) are not
/// reconciles and are not counted.
pub fn reconciled<K, A, E: 'static, Q: 'static>(
    controller: &'static str,
    outcome: &Result<(ObjectRef<K>, A), kube::runtime::controller::Error<E, Q>>,
) where
    K: kube::runtime::reflector::Lookup + ?Sized,
{
    use kube::runtime::controller::Error;
    let (result, namespace, name) = match outcome {
        Ok((o, _)) => ("success", o.namespace.clone(), o.name.clone()),
        Err(Error::ReconcilerFailed(_, o)) => ("error", o.namespace.clone(), o.name.clone()),
        Err(_) => return,
    };
    let labels: Labels = vec![
        ("controller", controller.to_owned()),
        ("result", result.to_owned()),
    ];
    with(|r| {
        *r.counters
            .entry(("simplyblock_reconcile_total".to_owned(), labels))
            .or_default() += 1.0;
    });
    let mut passes = PASSES.lock().unwrap_or_else(|e| e.into_inner());
    *passes
        .entry((controller, namespace.unwrap_or_default(), name))
        .or_default() += 1;
}

/// (controller, namespace, name) → passes ended. Not exported as a metric (one series per
/// object would outlive the objects); it is how a caller in the same process proves that
/// a controller looked at an object again, e.g. before asserting that nothing changed.
static PASSES: LazyLock<Mutex<BTreeMap<PassKey, u64>>> = LazyLock::new(Mutex::default);

/// (controller, namespace, name).
type PassKey = (&'static str, String, String);

/// How many passes of `controller` over `namespace/name` have ended in this process.
pub fn passes(controller: &str, namespace: &str, name: &str) -> u64 {
    let passes = PASSES.lock().unwrap_or_else(|e| e.into_inner());
    passes
        .iter()
        .find(|((c, ns, n), _)| *c == controller && ns == namespace && n == name)
        .map_or(0, |(_, count)| *count)
}

/// An operation took its target's lock and started, having waited since `created`.
pub fn started<K: OpsResource>(op: &K, created: Option<Timestamp>) {
    let target = op.target_name().to_owned();
    if let Some(created) = created {
        observe(
            format!("{}operation_lock_wait_seconds", K::METRIC_PREFIX),
            vec![
                (K::TARGET_LABEL, target.clone()),
                ("action", op.action_name().to_owned()),
            ],
            seconds_since(created),
        );
    }
    set_gauge(
        format!("{}operation_active_state", K::METRIC_PREFIX),
        vec![(K::TARGET_LABEL, target)],
        1.0,
    );
}

fn sample_line(out: &mut String, name: &str, labels: &Labels, v: f64) {
    let labels: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect();
    let _ = writeln!(out, "{name}{{{}}} {v}", labels.join(","));
}

/// Every metric in the Prometheus text exposition format: one `# TYPE` line per family,
/// with the type it was registered with.
pub fn render() -> String {
    with(|r| {
        let mut out = String::new();
        let typed = |out: &mut String, last: &mut String, name: &str, kind: &str| {
            if last != name {
                let _ = writeln!(out, "# TYPE {name} {kind}");
                *last = name.to_owned();
            }
        };
        let mut last = String::new();
        for ((name, labels), v) in &r.counters {
            typed(&mut out, &mut last, name, "counter");
            sample_line(&mut out, name, labels, *v);
        }
        for ((name, labels), v) in &r.gauges {
            typed(&mut out, &mut last, name, "gauge");
            sample_line(&mut out, name, labels, *v);
        }
        for ((name, labels), (sum, n)) in &r.summaries {
            typed(&mut out, &mut last, name, "summary");
            sample_line(&mut out, &format!("{name}_sum"), labels, *sum);
            sample_line(&mut out, &format!("{name}_count"), labels, *n);
        }
        out
    })
}

/// The value of one sample, for tests; a summary's parts are `<name>_sum` and
/// `<name>_count`.
pub fn sample(name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let same = |l: &Labels| {
        l.len() == labels.len()
            && l.iter()
                .zip(labels)
                .all(|((k, v), (k2, v2))| k == k2 && v == v2)
    };
    with(|r| {
        let plain = r
            .counters
            .iter()
            .chain(r.gauges.iter())
            .find(|((n, l), _)| n == name && same(l))
            .map(|(_, v)| *v);
        plain.or_else(|| {
            r.summaries.iter().find_map(|((n, l), (sum, count))| {
                if !same(l) {
                    return None;
                }
                match name.strip_prefix(n.as_str())? {
                    "_sum" => Some(*sum),
                    "_count" => Some(*count),
                    _ => None,
                }
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defect: every name ending in `_count` was typed a summary, and a summary's
    /// family was guessed by trimming suffixes.
    #[test]
    fn a_gauge_ending_in_count_is_a_gauge_and_a_summary_is_one_family() {
        set_gauge(
            "test_render_node_index_count".into(),
            vec![("cluster", "a".into())],
            2.0,
        );
        observe(
            "test_render_wait_seconds".into(),
            vec![("cluster", "a".into())],
            1.5,
        );
        observe(
            "test_render_wait_seconds".into(),
            vec![("cluster", "a".into())],
            0.5,
        );
        let text = render();
        assert!(
            text.contains("# TYPE test_render_node_index_count gauge\ntest_render_node_index_count{cluster=\"a\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE test_render_wait_seconds summary\ntest_render_wait_seconds_sum{cluster=\"a\"} 2\ntest_render_wait_seconds_count{cluster=\"a\"} 2\n"),
            "{text}"
        );
        assert!(
            !text.contains("# TYPE test_render_node_index summary"),
            "{text}"
        );
        assert_eq!(
            sample("test_render_wait_seconds_count", &[("cluster", "a")]),
            Some(2.0)
        );
        assert_eq!(
            sample("test_render_node_index_count", &[("cluster", "a")]),
            Some(2.0)
        );
    }
}

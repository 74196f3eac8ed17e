//! The Ops metrics, per kind prefix (`simplyblock_<kind>_`):
//! `operations_total{<target>,action,result}`, `operation_duration_seconds{…}` (sum and
//! count) and `operation_active_state{<target>}` (1 while an operation holds the lock).
//!
//! Beside them, for every controller, `simplyblock_reconcile_total{controller,result}`
//! ([`reconciled`]).
//!
//! Kept in one process-wide registry and rendered in the Prometheus text format by
//! [`render`], which [`crate::metrics_server`] serves at `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{LazyLock, Mutex};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use simplyblock_api::common::OpsPhase;

use super::OpsResource;

type Labels = Vec<(&'static str, String)>;

#[derive(Default)]
struct Registry {
    /// (metric name, labels) → value.
    counters: BTreeMap<(String, Labels), f64>,
    gauges: BTreeMap<(String, Labels), f64>,
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Mutex::default);

fn with<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    let mut r = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    f(&mut r)
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
    let seconds = started_at
        .map(|t| Timestamp::now().duration_since(t.0).as_secs_f64().max(0.0))
        .unwrap_or(0.0);
    with(|r| {
        let name = |item: &str| format!("{}{item}", K::METRIC_PREFIX);
        *r.counters
            .entry((name("operations_total"), labels.clone()))
            .or_default() += 1.0;
        *r.counters
            .entry((name("operation_duration_seconds_sum"), labels.clone()))
            .or_default() += seconds;
        *r.counters
            .entry((name("operation_duration_seconds_count"), labels))
            .or_default() += 1.0;
        r.gauges.insert(
            (
                name("operation_active_state"),
                vec![(K::TARGET_LABEL, target)],
            ),
            0.0,
        );
    });
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
pub fn reconciled<T, E: 'static, Q: 'static>(
    controller: &'static str,
    outcome: &Result<T, kube::runtime::controller::Error<E, Q>>,
) {
    use kube::runtime::controller::Error;
    let result = match outcome {
        Ok(_) => "success",
        Err(Error::ReconcilerFailed(..)) => "error",
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
}

/// An operation took its target's lock and started.
pub fn started<K: OpsResource>(op: &K) {
    with(|r| {
        r.gauges.insert(
            (
                format!("{}operation_active_state", K::METRIC_PREFIX),
                vec![(K::TARGET_LABEL, op.target_name().to_owned())],
            ),
            1.0,
        );
    });
}

/// Every metric in the Prometheus text exposition format.
pub fn render() -> String {
    with(|r| {
        let mut out = String::new();
        let mut last = String::new();
        let mut line = |out: &mut String, kind: &str, name: &str, labels: &Labels, v: f64| {
            let family = name
                .trim_end_matches("_sum")
                .trim_end_matches("_count")
                .to_owned();
            if family != last {
                let kind = if family != name { "summary" } else { kind };
                let _ = writeln!(out, "# TYPE {family} {kind}");
                last = family;
            }
            let labels: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
                .collect();
            let _ = writeln!(out, "{name}{{{}}} {v}", labels.join(","));
        };
        for ((name, labels), v) in &r.counters {
            line(&mut out, "counter", name, labels, *v);
        }
        for ((name, labels), v) in &r.gauges {
            line(&mut out, "gauge", name, labels, *v);
        }
        out
    })
}

/// The value of one sample, for tests.
pub fn sample(name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    with(|r| {
        r.counters
            .iter()
            .chain(r.gauges.iter())
            .find(|((n, l), _)| {
                n == name
                    && l.len() == labels.len()
                    && l.iter()
                        .zip(labels)
                        .all(|((k, v), (k2, v2))| k == k2 && v == v2)
            })
            .map(|(_, v)| *v)
    })
}

//! The operator's metrics: one registry per operator (owned by its [`crate::context::Context`]),
//! rendered in the OpenMetrics text format by [`Metrics::render`] at `/metrics`.
//!
//! Families are registered the first time they are written, with the type they are written
//! as: a counter (`_total` added by the encoder), a gauge (which may end in `_count`), or
//! a histogram of seconds. Two operators in one process (the tests) share nothing.
//!
//! Every controller run by [`crate::kit`] has:
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `simplyblock_reconcile_total` | counter | `controller, result` (`success`, `error`) |
//! | `simplyblock_reconcile_errors_total` | counter | `controller, kind` ([`crate::kit::Error::kind`]) |
//! | `simplyblock_reconcile_duration_seconds` | histogram | `controller` |
//!
//! The Ops kinds add theirs ([`crate::ops::metrics`]), and so do the entities.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A sample's labels, in the order they are rendered.
pub type Labels = Vec<(&'static str, String)>;

type CounterFamily = Family<Labels, Counter<f64, AtomicU64>>;
type GaugeFamily = Family<Labels, Gauge<f64, AtomicU64>>;
type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

/// The content type of [`Metrics::render`]'s answer.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// 5 ms to about 45 minutes: a reconcile, a step, a whole cluster shutdown.
fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 20))
}

#[derive(Default)]
struct Families {
    registry: Registry,
    counters: BTreeMap<String, CounterFamily>,
    gauges: BTreeMap<String, GaugeFamily>,
    histograms: BTreeMap<String, HistogramFamily>,
}

/// (controller, namespace, name) → passes ended.
type PassKey = (String, String, String);

/// One operator's metrics.
#[derive(Default)]
pub struct Metrics {
    families: Mutex<Families>,
    /// Not exported (one series per object would outlive the objects): how a caller in
    /// the same process proves that a controller looked at an object again.
    passes: Mutex<BTreeMap<PassKey, u64>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    fn families(&self) -> std::sync::MutexGuard<'_, Families> {
        self.families.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `by` to the counter `name` (which ends in `_total`).
    pub fn add(&self, name: &str, labels: Labels, by: f64) {
        let family = {
            let mut f = self.families();
            match f.counters.get(name) {
                Some(family) => family.clone(),
                None => {
                    let family = CounterFamily::default();
                    let base = name.strip_suffix("_total").unwrap_or(name);
                    f.registry.register(base, help(name), family.clone());
                    f.counters.insert(name.to_owned(), family.clone());
                    family
                }
            }
        };
        family.get_or_create(&labels).inc_by(by.max(0.0));
    }

    /// Adds one to the counter `name`.
    pub fn count(&self, name: &str, labels: Labels) {
        self.add(name, labels, 1.0);
    }

    /// Sets the gauge `name`.
    pub fn set(&self, name: &str, labels: Labels, value: f64) {
        let family = {
            let mut f = self.families();
            match f.gauges.get(name) {
                Some(family) => family.clone(),
                None => {
                    let family = GaugeFamily::default();
                    f.registry.register(name, help(name), family.clone());
                    f.gauges.insert(name.to_owned(), family.clone());
                    family
                }
            }
        };
        family.get_or_create(&labels).set(value);
    }

    /// Removes the series of the gauge `name` with exactly `labels`: what it measured is
    /// gone (an object deleted, a version replaced), so it is no longer rendered.
    pub fn forget(&self, name: &str, labels: &Labels) {
        let family = self.families().gauges.get(name).cloned();
        if let Some(family) = family {
            family.remove(labels);
        }
    }

    /// Sets the gauge `name` to 1 for the series whose `phase` label is `current` and 0
    /// for every other of `states` (all 0 when `current` is `None`: the object is gone).
    pub fn one_hot<'a>(
        &self,
        name: &str,
        labels: &Labels,
        states: impl IntoIterator<Item = &'a str>,
        current: Option<&str>,
    ) {
        for state in states {
            let mut series = labels.clone();
            series.push(("phase", state.to_owned()));
            self.set(name, series, if Some(state) == current { 1.0 } else { 0.0 });
        }
    }

    /// Removes the series [`Metrics::one_hot`] wrote for `labels`, one per state of
    /// `states`: the object they describe is gone, so they are no longer rendered.
    pub fn forget_one_hot<'a>(
        &self,
        name: &str,
        labels: &Labels,
        states: impl IntoIterator<Item = &'a str>,
    ) {
        for state in states {
            let mut series = labels.clone();
            series.push(("phase", state.to_owned()));
            self.forget(name, &series);
        }
    }

    /// Observes `seconds` in the histogram `name`.
    pub fn observe(&self, name: &str, labels: Labels, seconds: f64) {
        let family = {
            let mut f = self.families();
            match f.histograms.get(name) {
                Some(family) => family.clone(),
                None => {
                    let family = HistogramFamily::new_with_constructor(
                        seconds_histogram as fn() -> Histogram,
                    );
                    f.registry.register(name, help(name), family.clone());
                    f.histograms.insert(name.to_owned(), family.clone());
                    family
                }
            }
        };
        family.get_or_create(&labels).observe(seconds.max(0.0));
    }

    /// A controller's pass over `namespace/name` ended.
    pub fn pass_ended(&self, controller: &str, namespace: &str, name: &str) {
        let mut passes = self.passes.lock().unwrap_or_else(|e| e.into_inner());
        *passes
            .entry((controller.to_owned(), namespace.to_owned(), name.to_owned()))
            .or_default() += 1;
    }

    /// How many passes of `controller` over `namespace/name` have ended.
    pub fn passes(&self, controller: &str, namespace: &str, name: &str) -> u64 {
        let passes = self.passes.lock().unwrap_or_else(|e| e.into_inner());
        passes
            .get(&(controller.to_owned(), namespace.to_owned(), name.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// Every family in the OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.families().registry);
        out
    }

    /// The value of one sample as rendered (a counter's name with `_total`, a histogram's
    /// `_sum` and `_count`), for tests and benchmarks.
    pub fn sample(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let wanted = format!(
            "{name}{{{}}} ",
            labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{v}\""))
                .collect::<Vec<_>>()
                .join(",")
        );
        let bare = format!("{name} ");
        self.render().lines().find_map(|line| {
            let value = line.strip_prefix(&wanted).or_else(|| {
                labels
                    .is_empty()
                    .then(|| line.strip_prefix(&bare))
                    .flatten()
            })?;
            value.split_whitespace().next()?.parse().ok()
        })
    }
}

/// The help text: the metric's name in words, since the tables in the module docs are
/// where each is explained.
fn help(name: &str) -> String {
    name.trim_start_matches("simplyblock_").replace('_', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_renders_with_the_type_it_was_written_as() {
        let m = Metrics::new();
        m.set("x_node_index_count", vec![("cluster", "a".into())], 2.0);
        m.observe("x_wait_seconds", vec![("cluster", "a".into())], 1.5);
        m.observe("x_wait_seconds", vec![("cluster", "a".into())], 0.5);
        m.count("x_operations_total", vec![("cluster", "a".into())]);
        let text = m.render();
        assert!(text.contains("# TYPE x_node_index_count gauge"), "{text}");
        assert!(text.contains("# TYPE x_wait_seconds histogram"), "{text}");
        assert!(text.contains("# TYPE x_operations counter"), "{text}");
        assert_eq!(
            m.sample("x_node_index_count", &[("cluster", "a")]),
            Some(2.0)
        );
        assert_eq!(
            m.sample("x_wait_seconds_sum", &[("cluster", "a")]),
            Some(2.0)
        );
        assert_eq!(
            m.sample("x_wait_seconds_count", &[("cluster", "a")]),
            Some(2.0)
        );
        assert_eq!(
            m.sample("x_operations_total", &[("cluster", "a")]),
            Some(1.0)
        );
        assert_eq!(m.sample("x_operations_total", &[("cluster", "b")]), None);
    }

    #[test]
    fn a_forgotten_series_is_no_longer_rendered() {
        let m = Metrics::new();
        let (a, b) = (vec![("v", "1".to_owned())], vec![("v", "2".to_owned())]);
        m.set("x_info", a.clone(), 1.0);
        m.set("x_info", b.clone(), 1.0);
        m.forget("x_info", &a);
        m.forget("never_written", &a);
        assert_eq!(m.sample("x_info", &[("v", "1")]), None);
        assert_eq!(m.sample("x_info", &[("v", "2")]), Some(1.0));
    }

    #[test]
    fn the_one_hot_series_of_a_deleted_object_go_and_its_neighbours_stay() {
        let m = Metrics::new();
        let of = |o: &str| vec![("name", o.to_owned())];
        let states = ["Up", "Down"];
        m.one_hot("x_phase_state", &of("a"), states, Some("Up"));
        m.one_hot("x_phase_state", &of("b"), states, Some("Down"));
        m.forget_one_hot("x_phase_state", &of("a"), states);
        for s in states {
            assert_eq!(
                m.sample("x_phase_state", &[("name", "a"), ("phase", s)]),
                None
            );
        }
        assert_eq!(
            m.sample("x_phase_state", &[("name", "b"), ("phase", "Down")]),
            Some(1.0)
        );
        assert!(!m.render().contains("name=\"a\""), "{}", m.render());
    }

    #[test]
    fn two_registries_share_nothing() {
        let (a, b) = (Metrics::new(), Metrics::new());
        a.count("shared_name_total", vec![]);
        a.pass_ended("c", "ns", "o");
        assert_eq!(a.sample("shared_name_total", &[]), Some(1.0));
        assert_eq!(b.sample("shared_name_total", &[]), None);
        assert_eq!((a.passes("c", "ns", "o"), b.passes("c", "ns", "o")), (1, 0));
    }
}

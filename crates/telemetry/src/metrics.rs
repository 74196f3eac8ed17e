//! A binary's metrics registry, rendered in the OpenMetrics text format by
//! [`Metrics::render`] at `/metrics`.
//!
//! Families are registered the first time they are written, with the type they are written
//! as: a counter (`_total` added by the encoder), a gauge (which may end in `_count`), or
//! a histogram of seconds. Two registries in one process (the tests) share nothing.
//!
//! Every family written must be declared in the [`catalogue`], with the type and the
//! labels (in order) it is written with; its HELP text is the catalogue's. Writing one
//! that is not is a bug: a debug build (the tests) panics naming the family and where to
//! declare it; a release build logs it once at error and records the sample anyway, since
//! a missing row must not cost an operator its metrics.
//!
//! A series keyed by an object's name goes with the object: its controller forgets it
//! when it sees the deletion ([`Metrics::forget_one_hot`]), or, for a kind without a
//! finalizer, sweeps the series of every object it no longer holds
//! ([`Metrics::sweep_one_hot`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::catalogue::{self, Type};

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

/// 1 MiB to 1 TiB: the size of a backup.
fn bytes_histogram() -> Histogram {
    Histogram::new(exponential_buckets(f64::from(1u32 << 20), 4.0, 11))
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
pub struct Metrics {
    /// Whether writes are held to the catalogue (always, outside telemetry's own tests).
    checked: bool,
    /// The families a release build has already logged as off the catalogue.
    reported: Mutex<BTreeSet<String>>,
    families: Mutex<Families>,
    /// Not exported (one series per object would outlive the objects): how a caller in
    /// the same process proves that a controller looked at an object again.
    passes: Mutex<BTreeMap<PassKey, u64>>,
    /// Family name → the label sets (without `phase`) [`Metrics::one_hot`] has shown and
    /// nothing has forgotten since: what [`Metrics::sweep_one_hot`] chooses from. Held
    /// while a one-hot family's series are written or removed, so the two agree.
    one_hot: Mutex<BTreeMap<String, BTreeSet<Labels>>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            checked: true,
            reported: Mutex::default(),
            families: Mutex::default(),
            passes: Mutex::default(),
            one_hot: Mutex::default(),
        }
    }
}

/// What is wrong with writing `name` as a `r#type` with `labels` (their names, in order),
/// if anything; `None` when the catalogue declares exactly that.
pub fn off_catalogue(name: &str, r#type: Type, labels: &[&str]) -> Option<String> {
    let written = format!(
        "metric family {name} is written as a {} with labels [{}]",
        r#type.as_str(),
        labels.join(", ")
    );
    let Some(declared) = catalogue::family(name) else {
        return Some(format!(
            "{written}, but the catalogue does not declare it: add its row (type, labels, \
             help) to {}",
            catalogue::FILES
        ));
    };
    let mut problems = Vec::new();
    if declared.r#type != r#type {
        problems.push(format!("declared as a {}", declared.r#type.as_str()));
    }
    if declared.labels != labels {
        problems.push(format!(
            "declared with labels [{}]",
            declared.labels.join(", ")
        ));
    }
    (!problems.is_empty()).then(|| {
        format!(
            "{written}, but it is {}: write it as declared, or change its row in {}",
            problems.join(" and "),
            catalogue::FILES
        )
    })
}

impl Metrics {
    /// A registry held to the catalogue.
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// A registry that writes any family: for this crate's own tests of the mechanics,
    /// under names no binary exports.
    #[cfg(test)]
    fn unchecked() -> Metrics {
        Metrics {
            checked: false,
            ..Metrics::default()
        }
    }

    /// Holds a write of `name` as a `r#type` with `labels` to the catalogue (see the
    /// module's documentation), and returns the family's HELP text.
    fn declared(&self, name: &str, r#type: Type, labels: &Labels) -> String {
        if !self.checked {
            return help(name);
        }
        let keys: Vec<&str> = labels.iter().map(|(k, _)| *k).collect();
        if let Some(problem) = off_catalogue(name, r#type, &keys) {
            if cfg!(debug_assertions) {
                panic!("{problem}");
            }
            let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
            if reported.insert(name.to_owned()) {
                tracing::error!("{problem}; this is a bug in the binary, please report it");
            }
        }
        catalogue::family(name)
            .map(|f| f.help.to_owned())
            .unwrap_or_else(|| help(name))
    }

    fn families(&self) -> std::sync::MutexGuard<'_, Families> {
        self.families.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Locked before [`Metrics::families`] whenever both are.
    fn shown(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, BTreeSet<Labels>>> {
        self.one_hot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `by` to the counter `name` (which ends in `_total`).
    pub fn add(&self, name: &str, labels: Labels, by: f64) {
        let help = self.declared(name, Type::Counter, &labels);
        let family = {
            let mut f = self.families();
            match f.counters.get(name) {
                Some(family) => family.clone(),
                None => {
                    let family = CounterFamily::default();
                    let base = name.strip_suffix("_total").unwrap_or(name);
                    f.registry.register(base, help, family.clone());
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
        let help = self.declared(name, Type::Gauge, &labels);
        let family = {
            let mut f = self.families();
            match f.gauges.get(name) {
                Some(family) => family.clone(),
                None => {
                    let family = GaugeFamily::default();
                    f.registry.register(name, help, family.clone());
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
    /// `labels` is remembered as shown until forgotten ([`Metrics::sweep_one_hot`]).
    pub fn one_hot<'a>(
        &self,
        name: &str,
        labels: &Labels,
        states: impl IntoIterator<Item = &'a str>,
        current: Option<&str>,
    ) {
        let mut shown = self.shown();
        for state in states {
            let mut series = labels.clone();
            series.push(("phase", state.to_owned()));
            self.set(name, series, if Some(state) == current { 1.0 } else { 0.0 });
        }
        shown
            .entry(name.to_owned())
            .or_default()
            .insert(labels.clone());
    }

    /// Removes the series [`Metrics::one_hot`] wrote for `labels`, one per state of
    /// `states`: the object they describe is gone, so they are no longer rendered.
    pub fn forget_one_hot<'a>(
        &self,
        name: &str,
        labels: &Labels,
        states: impl IntoIterator<Item = &'a str>,
    ) {
        let mut shown = self.shown();
        if let Some(sets) = shown.get_mut(name) {
            sets.remove(labels);
        }
        self.forget_states(name, labels, states);
    }

    /// [`Metrics::forget_one_hot`] for every label set of `name` shown by
    /// [`Metrics::one_hot`] that `keep` refuses: how a controller that sees no deletions
    /// (a kind without a finalizer) drops the series of the objects it no longer holds.
    /// Returns how many label sets went.
    pub fn sweep_one_hot<'a>(
        &self,
        name: &str,
        states: impl IntoIterator<Item = &'a str>,
        keep: impl Fn(&Labels) -> bool,
    ) -> usize {
        let states: Vec<&str> = states.into_iter().collect();
        let mut shown = self.shown();
        let Some(sets) = shown.get_mut(name) else {
            return 0;
        };
        let gone: Vec<Labels> = sets.iter().filter(|l| !keep(l)).cloned().collect();
        for labels in &gone {
            sets.remove(labels);
            self.forget_states(name, labels, states.iter().copied());
        }
        gone.len()
    }

    fn forget_states<'a>(
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
        self.observe_in(name, labels, seconds, seconds_histogram);
    }

    /// Observes `bytes` in the histogram `name` (1 MiB to 1 TiB, by fours).
    pub fn observe_bytes(&self, name: &str, labels: Labels, bytes: f64) {
        self.observe_in(name, labels, bytes, bytes_histogram);
    }

    fn observe_in(&self, name: &str, labels: Labels, value: f64, buckets: fn() -> Histogram) {
        let seconds = value;
        let help = self.declared(name, Type::Histogram, &labels);
        let family = {
            let mut f = self.families();
            match f.histograms.get(name) {
                Some(family) => family.clone(),
                None => {
                    let family = HistogramFamily::new_with_constructor(buckets);
                    f.registry.register(name, help, family.clone());
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

/// The help text of a family off the catalogue: its name in words.
fn help(name: &str) -> String {
    name.trim_start_matches("simplyblock_").replace('_', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_renders_with_the_type_it_was_written_as() {
        let m = Metrics::unchecked();
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
        let m = Metrics::unchecked();
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
        let m = Metrics::unchecked();
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
    fn a_sweep_forgets_the_one_hot_series_it_is_not_told_to_keep() {
        let m = Metrics::unchecked();
        let of = |o: &str| vec![("name", o.to_owned())];
        let states = ["Up", "Down"];
        for o in ["a", "b", "c"] {
            m.one_hot("x_phase_state", &of(o), states, Some("Up"));
        }
        m.one_hot("y_phase_state", &of("a"), states, Some("Up"));
        m.forget_one_hot("x_phase_state", &of("c"), states);
        let keep_b = |l: &Labels| l.contains(&("name", "b".to_owned()));
        assert_eq!(
            m.sweep_one_hot("x_phase_state", states, keep_b),
            1,
            "only a"
        );
        for s in states {
            assert_eq!(
                m.sample("x_phase_state", &[("name", "a"), ("phase", s)]),
                None
            );
        }
        assert_eq!(
            m.sample("x_phase_state", &[("name", "b"), ("phase", "Up")]),
            Some(1.0)
        );
        assert_eq!(
            m.sample("y_phase_state", &[("name", "a"), ("phase", "Up")]),
            Some(1.0),
            "another family is not swept"
        );
        // What went is no longer shown: a second sweep has nothing to forget, and a
        // family never written has nothing either.
        assert_eq!(m.sweep_one_hot("x_phase_state", states, keep_b), 0);
        assert_eq!(m.sweep_one_hot("never_written", states, |_| false), 0);
        // Written again, it is shown again.
        m.one_hot("x_phase_state", &of("a"), states, Some("Down"));
        assert_eq!(m.sweep_one_hot("x_phase_state", states, |_| false), 2);
        assert!(!m.render().contains("x_phase_state{"), "{}", m.render());
    }

    #[test]
    fn two_registries_share_nothing() {
        let (a, b) = (Metrics::unchecked(), Metrics::unchecked());
        a.count("shared_name_total", vec![]);
        a.pass_ended("c", "ns", "o");
        assert_eq!(a.sample("shared_name_total", &[]), Some(1.0));
        assert_eq!(b.sample("shared_name_total", &[]), None);
        assert_eq!((a.passes("c", "ns", "o"), b.passes("c", "ns", "o")), (1, 0));
    }

    #[test]
    fn a_declared_family_renders_with_the_catalogue_help() {
        let m = Metrics::new();
        m.set(
            "simplyblock_operator_leader_state",
            vec![("pod", "operator-0".into())],
            1.0,
        );
        let declared = catalogue::family("simplyblock_operator_leader_state").expect("declared");
        let text = m.render();
        assert!(
            text.contains(&format!(
                "# HELP simplyblock_operator_leader_state {}",
                declared.help
            )),
            "{text}"
        );
    }

    #[test]
    fn a_write_off_the_catalogue_names_each_problem_and_where_to_declare() {
        let undeclared =
            off_catalogue("simplyblock_nothing_count", Type::Gauge, &["a"]).expect("undeclared");
        assert!(
            undeclared.contains("simplyblock_nothing_count")
                && undeclared.contains("does not declare it")
                && undeclared.contains("catalogue/operator.rs"),
            "{undeclared}"
        );
        let both = off_catalogue(
            "simplyblock_operator_leader_state",
            Type::Counter,
            &["node"],
        )
        .expect("another type and labels");
        assert!(
            both.contains("declared as a gauge") && both.contains("declared with labels [pod]"),
            "{both}"
        );
        assert_eq!(
            off_catalogue("simplyblock_operator_leader_state", Type::Gauge, &["pod"]),
            None
        );
        let reordered = off_catalogue(
            "simplyblock_reconcile_total",
            Type::Counter,
            &["result", "controller"],
        );
        assert!(reordered.is_some(), "labels are held in order");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "simplyblock_nothing_count is written as a gauge")]
    fn a_debug_build_refuses_a_write_off_the_catalogue() {
        Metrics::new().set("simplyblock_nothing_count", vec![], 1.0);
    }

    #[test]
    fn every_family_written_through_the_ops_prefix_is_declared_per_kind() {
        for (kind, target) in [
            ("storagecluster", "cluster"),
            ("storagenode", "node"),
            ("storagedevice", "device"),
            ("controlplane", "namespace"),
            ("storagebackup", "backup"),
            ("operator", "namespace"),
        ] {
            let name = format!("simplyblock_{kind}_operations_total");
            assert_eq!(
                off_catalogue(&name, Type::Counter, &[target, "action", "result"]),
                None
            );
        }
    }
}

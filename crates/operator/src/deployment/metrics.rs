//! The document's metrics, `simplyblock_clusterdeploymentconfig_`: `phase_state{namespace,
//! name,phase}` (1 for the phase it is in), `expansion_duration_seconds{namespace}` (sum
//! and count, approval to Expanded), `nodes_created_total{namespace}`,
//! `validation_failures_total{namespace,reason}` (expansions refused) and
//! `approval_rejections_total{namespace,reason}` (approving writes refused at admission,
//! one per problem).
//!
//! A document has no finalizer: its `phase_state` series go when the controller sweeps
//! ([`sweep_phases`]) and no longer holds it.

use std::collections::BTreeSet;

use simplyblock_api::cluster_deployment_config::DeploymentPhase;

use crate::deployment::validation::Problem;
use crate::runtime::metrics::{Labels, Metrics};

const PREFIX: &str = "simplyblock_clusterdeploymentconfig_";

fn name(item: &str) -> String {
    format!("{PREFIX}{item}")
}

fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
}

fn phase_name(p: DeploymentPhase) -> &'static str {
    match p {
        DeploymentPhase::Draft => "Draft",
        DeploymentPhase::Expanding => "Expanding",
        DeploymentPhase::Expanded => "Expanded",
        DeploymentPhase::Failed => "Failed",
    }
}

/// The document `namespace/doc` is in `phase`.
pub fn phase(m: &Metrics, namespace: &str, doc: &str, phase: DeploymentPhase) {
    m.one_hot(
        &name("phase_state"),
        &labels(&[("namespace", namespace), ("name", doc)]),
        DeploymentPhase::ALL.map(phase_name),
        Some(phase_name(phase)),
    );
}

/// Forgets the `phase_state` series of every document not in `existing` (namespace,
/// name); returns how many documents' series went.
pub fn sweep_phases(m: &Metrics, existing: &BTreeSet<(String, String)>) -> usize {
    m.sweep_one_hot(
        &name("phase_state"),
        DeploymentPhase::ALL.map(phase_name),
        |l| exists(l, existing),
    )
}

/// Whether the series labelled `shown` describe a document of `existing`; a series
/// without both labels was not written by [`phase`] and stays.
fn exists(shown: &Labels, existing: &BTreeSet<(String, String)>) -> bool {
    let label = |key: &str| shown.iter().find(|(k, _)| *k == key).map(|(_, v)| v);
    match (label("namespace"), label("name")) {
        (Some(ns), Some(doc)) => existing.contains(&(ns.clone(), doc.clone())),
        _ => true,
    }
}

pub fn nodes_created(m: &Metrics, namespace: &str, count: usize) {
    m.add(
        &name("nodes_created_total"),
        labels(&[("namespace", namespace)]),
        count as f64,
    );
}

pub fn validation_failure(m: &Metrics, namespace: &str, reason: &str) {
    m.count(
        &name("validation_failures_total"),
        labels(&[("namespace", namespace), ("reason", reason)]),
    );
}

pub fn approval_rejected(m: &Metrics, namespace: &str, problems: &[Problem]) {
    for p in problems {
        m.count(
            &name("approval_rejections_total"),
            labels(&[("namespace", namespace), ("reason", p.reason.as_str())]),
        );
    }
}

pub fn expanded(m: &Metrics, namespace: &str, seconds: f64) {
    m.observe(
        &name("expansion_duration_seconds"),
        labels(&[("namespace", namespace)]),
        seconds,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phase_is_one_hot_and_counters_add_up() {
        let m = Metrics::new();
        phase(&m, "m-ns", "doc", DeploymentPhase::Expanding);
        phase(&m, "m-ns", "doc", DeploymentPhase::Expanded);
        let of = |p: &str| {
            m.sample(
                "simplyblock_clusterdeploymentconfig_phase_state",
                &[("namespace", "m-ns"), ("name", "doc"), ("phase", p)],
            )
        };
        assert_eq!(of("Expanded"), Some(1.0));
        assert_eq!(of("Expanding"), Some(0.0));
        assert_eq!(of("Draft"), Some(0.0));
        nodes_created(&m, "m-ns", 3);
        nodes_created(&m, "m-ns", 2);
        assert_eq!(
            m.sample(
                "simplyblock_clusterdeploymentconfig_nodes_created_total",
                &[("namespace", "m-ns")]
            ),
            Some(5.0)
        );
        expanded(&m, "m-ns", 4.0);
        let text = m.render();
        assert!(
            text.contains(
                "# TYPE simplyblock_clusterdeploymentconfig_expansion_duration_seconds histogram"
            ),
            "{text}"
        );
    }

    fn docs(pairs: &[(&str, &str)]) -> BTreeSet<(String, String)> {
        pairs
            .iter()
            .map(|(ns, n)| ((*ns).to_owned(), (*n).to_owned()))
            .collect()
    }

    #[test]
    fn a_series_is_kept_only_while_its_document_exists() {
        let existing = docs(&[("a-ns", "doc"), ("b-ns", "other")]);
        let of = |ns: &str, n: &str| labels(&[("namespace", ns), ("name", n)]);
        assert!(exists(&of("a-ns", "doc"), &existing));
        assert!(exists(&of("b-ns", "other"), &existing));
        // The same name in another namespace is another document.
        assert!(!exists(&of("b-ns", "doc"), &existing));
        assert!(!exists(&of("a-ns", "gone"), &existing));
        assert!(!exists(&of("a-ns", "doc"), &docs(&[])));
        assert!(exists(&labels(&[("name", "doc")]), &docs(&[])));
    }

    #[test]
    fn a_sweep_forgets_the_phases_of_deleted_documents_only() {
        let m = Metrics::new();
        phase(&m, "m-ns", "kept", DeploymentPhase::Draft);
        phase(&m, "m-ns", "deleted", DeploymentPhase::Expanding);
        let of = |doc: &str, p: &str| {
            m.sample(
                "simplyblock_clusterdeploymentconfig_phase_state",
                &[("namespace", "m-ns"), ("name", doc), ("phase", p)],
            )
        };
        assert_eq!(sweep_phases(&m, &docs(&[("m-ns", "kept")])), 1);
        for p in DeploymentPhase::ALL.map(phase_name) {
            assert_eq!(of("deleted", p), None, "{p}");
        }
        assert_eq!(of("kept", "Draft"), Some(1.0));
        assert_eq!(of("kept", "Expanded"), Some(0.0));
        assert_eq!(sweep_phases(&m, &docs(&[("m-ns", "kept")])), 0);
    }
}

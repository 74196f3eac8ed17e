//! Every metric family a simplyblock binary exports, declared once.
//!
//! A family is written only under a name declared here, the reference documentation
//! (`docs/OBSERVABILITY.md`) is generated from these rows, and the chart's alerts and
//! dashboards may name only these families. The rows are kept per area so that each
//! area's owner edits one file.

use std::collections::BTreeMap;
use std::sync::LazyLock;

mod csi;
mod fleet;
mod operator;

/// How a family's samples behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Type {
    /// Only ever increases; the exposition adds `_total` to the name declared without it.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in buckets (`_bucket`, `_sum`, `_count`).
    Histogram,
}

/// Which binary exports a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Exporter {
    /// The operator (`/metrics` on its metrics port), from the leader unless said otherwise.
    Operator,
    /// The CSI driver's controller plugin.
    CsiController,
    /// The CSI driver's node plugin, on every worker.
    CsiNode,
    /// A Kubernetes CSI sidecar container run next to the driver (its own metrics endpoint).
    Sidecar,
}

/// One metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    /// As exposed, counters with their `_total`.
    pub name: &'static str,
    pub r#type: Type,
    /// The labels every sample carries, in order.
    pub labels: &'static [&'static str],
    /// What a sample means, one sentence: the exposition's HELP text and the documentation's.
    pub help: &'static str,
    pub exporter: Exporter,
}

impl Type {
    /// As the exposition's `# TYPE` line names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Type::Counter => "counter",
            Type::Gauge => "gauge",
            Type::Histogram => "histogram",
        }
    }
}

impl Exporter {
    /// The binary, in words, as the documentation's headings name it.
    pub fn title(self) -> &'static str {
        match self {
            Exporter::Operator => "The operator",
            Exporter::CsiController => "The CSI controller plugin",
            Exporter::CsiNode => "The CSI node plugin",
            Exporter::Sidecar => "The CSI sidecars",
        }
    }
}

/// Where the rows of each area are declared, for the message that asks for a missing one.
pub const FILES: &str = "crates/telemetry/src/catalogue/operator.rs (the operator's own), \
     fleet.rs (the fleet as the control plane reports it) or csi.rs (the CSI driver)";

/// Every declared family, sorted by name.
pub fn families() -> Vec<Family> {
    let mut all: Vec<Family> = [operator::FAMILIES, fleet::FAMILIES, csi::FAMILIES]
        .into_iter()
        .chain(operator::OPS_FAMILIES.iter().copied())
        .flatten()
        .copied()
        .collect();
    all.sort_by_key(|f| f.name);
    all
}

/// The declared family named `name` (as exposed), if any.
pub fn family(name: &str) -> Option<Family> {
    static INDEX: LazyLock<BTreeMap<&'static str, Family>> =
        LazyLock::new(|| families().into_iter().map(|f| (f.name, f)).collect());
    INDEX.get(name).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_family_is_declared_twice() {
        let all = families();
        let twice: Vec<&str> = all
            .windows(2)
            .filter(|w| w[0].name == w[1].name)
            .map(|w| w[0].name)
            .collect();
        assert!(twice.is_empty(), "declared more than once: {twice:?}");
    }

    #[test]
    fn every_name_follows_the_convention() {
        let bad: Vec<String> = families()
            .iter()
            .filter(|f| {
                let counter_ok = (f.r#type == Type::Counter) == f.name.ends_with("_total");
                let ours_ok = f.exporter == Exporter::Sidecar || f.name.starts_with("simplyblock_");
                !counter_ok || !ours_ok || f.help.is_empty()
            })
            .map(|f| format!("{} ({:?})", f.name, f.r#type))
            .collect();
        assert!(bad.is_empty(), "names off the convention: {bad:?}");
    }
}

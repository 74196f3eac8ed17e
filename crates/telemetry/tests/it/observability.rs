//! docs/OBSERVABILITY.md, the reference of every metric family and alert, is written from
//! the catalogue and the chart's rule file; a test fails when the committed file differs.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde_json::Value;
use simplyblock_telemetry::catalogue::{self, Exporter, Family};

const COMMAND: &str = "UPDATE_EXPECT=1 cargo test -p simplyblock-telemetry --test it observability";

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const DOC: &str = "docs/OBSERVABILITY.md";
const ALERTS: &str = "deploy/charts/simplyblock-operator/files/prometheus/alerts.yaml";

/// What the document says before its generated tables.
const INTRO: &str = r#"# Observability

What simplyblock's binaries tell the outside: the metric families they export, the alerts
the chart ships, and their logs.

## Scraping

The operator serves `/metrics` (OpenMetrics text) on its `metrics` port (8080), behind the
Service `simplyblock-operator-metrics`, over TLS with the webhooks' certificate (its CA is
in the webhook configurations' `caBundle`). Only a scraper the API server authenticates
and allows to `get` the non-resource URL `/metrics` is answered: bind the chart's
ClusterRole `simplyblock-metrics-reader` to the scraper's ServiceAccount (Prometheus's, say)
and let it send its token. `/healthz` on the same port stays open for the kubelet.

Every replica serves `/metrics`; the families about the storage kinds come from the
leader, which runs the controllers. `simplyblock_operator_leader_state{pod}` says which
replica that is (not exported when leader election is disabled).

The CSI driver's controller and node plugins serve `/metrics` over plain HTTP on their
`metrics` port (9810; the node plugin on the worker's host network), and each sidecar of
the controller pod serves its own (`metrics-prov` 9811, `metrics-attach` 9812,
`metrics-resize` 9813, `metrics-health` 9814, `metrics-snap` 9815). No label carries a
secret or a volume id.

With the Prometheus Operator installed, the chart renders the scrape targets, the alerts
and the dashboards: `monitoring.serviceMonitor.enabled` (a ServiceMonitor for the operator,
a PodMonitor for the driver's pods; `scraperServiceAccount` binds Prometheus's account to
`simplyblock-metrics-reader`), `monitoring.prometheusRule.enabled` (the alerts below) and
`monitoring.dashboards.enabled` (Grafana dashboards as ConfigMaps labelled
`grafana_dashboard: "1"`).

The leader reads the fleet's statistics from the control plane every `--fleet-interval`
(30 s; chart value `operator.fleetInterval`): capacity, status and I/O per cluster, pool,
storage node and device, and a few volumes a pass round robin (`--fleet-volume-budget`,
8), which bounds the cost at `5 + 2N + 2P + 3B` calls a pass per cluster (N storage nodes,
P pools, B the budget): 262 calls a minute at 50 workers with one pool.

## The metrics API

`kubectl get snm,sdm,spm,scm,lvm` reads the `metrics.simplyblock.io/v1alpha2` kinds
StorageNodeMetrics, StorageDeviceMetrics, StoragePoolMetrics, StorageClusterMetrics and
LogicalVolumeMetrics (one per claim, named after it): capacity readings the operator takes
from the control plane when asked, served behind an APIService (chart value
`metricsApi.enabled`). Whoever holds the view, edit or admin role in a namespace reads the
readings of its objects.

## Logs

Every binary (operator, CSI driver, `sbsim`, the demo, `testenv`, `simplyblock-upgrade`)
writes its logs to stderr, as text or as JSON: `--log-format json|text`, or the
environment variable `SIMPLYBLOCK_LOG_FORMAT`; text when neither is given. The chart's
value `logFormat` (`json` by default) sets it for the operator, its hooks and, through the
SimplyblockDriver's `spec.logFormat`, the CSI driver. `RUST_LOG` filters (e.g.
`info,kube=warn`).

A JSON line is one object: `timestamp`, `level`, `target`, `fields` (with `message`), and
`spans`, the spans it was logged in. Every line a controller logs during a pass carries
the span `reconcile` with `controller`, `kind` and `object` (`namespace/name`); a pass of
an Ops kind adds the span `operation` with `operation` (the action) and `step` (the step
the pass began at). To follow one object: `jq 'select(.spans[]?.object == "ns/name")'`.

## Metrics

Every family below is declared once, in `crates/telemetry/src/catalogue/`; a binary that
writes a family not declared there (or with another type or labels) is stopped by its
tests. Counters are shown with the `_total` the exposition adds; a histogram adds
`_bucket`, `_sum` and `_count`. A family whose name ends in `_state` is 1 or 0 (one-hot
over the `phase` or `status` label where it has one); `_info` is 1, its labels are the
information.
"#;

fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// `simplyblock_<group>_...`: the kind (or the area) a family is about.
fn group(family: &Family) -> &str {
    let rest = family
        .name
        .strip_prefix("simplyblock_")
        .unwrap_or(family.name);
    rest.split('_').next().unwrap_or(rest)
}

fn metrics(out: &mut String) {
    let families = catalogue::families();
    for exporter in [
        Exporter::Operator,
        Exporter::CsiController,
        Exporter::CsiNode,
        Exporter::Sidecar,
    ] {
        let of: Vec<&Family> = families.iter().filter(|f| f.exporter == exporter).collect();
        if of.is_empty() {
            continue;
        }
        let _ = write!(out, "\n### {}\n", exporter.title());
        let mut groups: Vec<&str> = of.iter().map(|f| group(f)).collect();
        groups.dedup();
        for g in groups {
            let _ = write!(
                out,
                "\n#### `simplyblock_{g}_*`\n\n| metric | type | labels | meaning |\n|---|---|---|---|\n"
            );
            for f in of.iter().filter(|f| group(f) == g) {
                let labels: Vec<String> = f.labels.iter().map(|l| format!("`{l}`")).collect();
                let _ = writeln!(
                    out,
                    "| `{}` | {} | {} | {} |",
                    f.name,
                    f.r#type.as_str(),
                    labels.join(", "),
                    cell(f.help)
                );
            }
        }
    }
}

/// The Alerts section from the chart's rule file; every problem of the file at once.
fn alerts(out: &mut String) -> Result<(), String> {
    let path = repository().join(ALERTS);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {ALERTS}: {e}"))?;
    let rules: Value =
        serde_saphyr::from_str(&text).map_err(|e| format!("{ALERTS} is not YAML: {e}"))?;
    let _ = write!(
        out,
        "\n## Alerts\n\nThe chart's Prometheus rules (`{ALERTS}`), each with its runbook.\n"
    );
    let mut problems = Vec::new();
    for g in rules["groups"].as_array().into_iter().flatten() {
        let name = g["name"].as_str().unwrap_or("(unnamed)");
        let _ = write!(out, "\n### Group `{name}`\n");
        for r in g["rules"].as_array().into_iter().flatten() {
            let Some(alert) = r["alert"].as_str() else {
                continue; // a recording rule
            };
            let field = |v: &Value, what: &str, problems: &mut Vec<String>| match v.as_str() {
                Some(s) => s.trim().to_owned(),
                None => {
                    problems.push(format!("alert {alert} has no {what}"));
                    String::new()
                }
            };
            let expr = field(&r["expr"], "expr", &mut problems);
            let severity = field(&r["labels"]["severity"], "labels.severity", &mut problems);
            let a = &r["annotations"];
            let summary = field(&a["summary"], "annotations.summary", &mut problems);
            let description = field(&a["description"], "annotations.description", &mut problems);
            let runbook = field(&a["runbook"], "annotations.runbook", &mut problems);
            let wait = r["for"].as_str().unwrap_or("0s");
            let _ = write!(
                out,
                "\n#### {alert}\n\n{summary}\n\n| severity | for | expression |\n|---|---|---|\n| {severity} | {wait} | `{}` |\n\n{}\n\n{runbook}\n",
                cell(&expr),
                cell(&description)
            );
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{ALERTS}: {}", problems.join("; ")))
    }
}

fn generate() -> Result<String, String> {
    let mut out = String::from(INTRO);
    metrics(&mut out);
    alerts(&mut out)?;
    Ok(out)
}

#[test]
fn observability_md_is_generated_from_the_catalogue_and_the_alerts() {
    let generated = generate().unwrap_or_else(|e| panic!("{e}"));
    let path = repository().join(DOC);
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&path, &generated).expect("write docs/OBSERVABILITY.md");
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "{DOC} differs from the catalogue and {ALERTS}: run `{COMMAND}`"
    );
}

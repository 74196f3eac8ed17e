//! The chart's monitoring: the alert rules pass `promtool check rules` and their unit
//! tests (`promtool test rules`), every alert and dashboard query names only metric
//! families the catalogue declares, and the ServiceMonitor, PodMonitor, PrometheusRule and
//! dashboard ConfigMaps render only when asked for, aimed at what the chart and the
//! operator actually run.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use regex::Regex;
use serde_json::Value;
use simplyblock_telemetry::catalogue::{self, Type};
use simplyblock_testenv::chart;

fn alerts_path() -> PathBuf {
    chart::dir().join("files/prometheus/alerts.yaml")
}

fn alerts() -> Value {
    let text = std::fs::read_to_string(alerts_path()).expect("alerts.yaml");
    serde_saphyr::from_str(&text).expect("alerts.yaml parses")
}

fn rules(alerts: &Value) -> Vec<Value> {
    alerts["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").clone())
        .collect()
}

/// Every dashboard file: its name and its JSON.
fn dashboards() -> Vec<(String, Value)> {
    let dir = chart::dir().join("files/dashboards");
    let mut all: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .expect("files/dashboards")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("dashboard");
            let json = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()));
            (
                p.file_name()
                    .expect("a file name")
                    .to_string_lossy()
                    .into_owned(),
                json,
            )
        })
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

fn promtool(args: &[&str]) -> (bool, String) {
    let promtool = simplyblock_testenv::assets::promtool().expect("promtool");
    let out = Command::new(promtool)
        .args(args)
        .current_dir(chart::dir().join("files/prometheus"))
        .output()
        .expect("running promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let (ok, out) = promtool(&["check", "rules", "alerts.yaml"]);
    assert!(ok, "promtool check rules:\n{out}");
    assert!(out.contains("SUCCESS: 10 rules found"), "{out}");
    let (ok, out) = promtool(&["test", "rules", "alerts_test.yaml"]);
    assert!(ok, "promtool test rules:\n{out}");
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn every_alert_is_tested_firing_and_silent() {
    let text = std::fs::read_to_string(chart::dir().join("files/prometheus/alerts_test.yaml"))
        .expect("alerts_test.yaml");
    let tests: Value = serde_saphyr::from_str(&text).expect("alerts_test.yaml parses");
    let mut firing = BTreeSet::new();
    let mut silent = BTreeSet::new();
    for case in tests["tests"].as_array().expect("tests") {
        for check in case["alert_rule_test"].as_array().into_iter().flatten() {
            let name = check["alertname"].as_str().expect("alertname").to_owned();
            let expected = check["exp_alerts"].as_array().map_or(0, Vec::len);
            if expected == 0 {
                silent.insert(name);
            } else {
                firing.insert(name);
            }
        }
    }
    let all: BTreeSet<String> = rules(&alerts())
        .iter()
        .map(|r| r["alert"].as_str().expect("alert").to_owned())
        .collect();
    let never_fired: Vec<_> = all.difference(&firing).collect();
    let never_silent: Vec<_> = all.difference(&silent).collect();
    assert!(
        never_fired.is_empty() && never_silent.is_empty(),
        "alerts_test.yaml never sees these fire: {never_fired:?}; never sees these silent: {never_silent:?}"
    );
}

#[test]
fn every_alert_says_how_bad_what_and_what_to_do() {
    let mut problems = Vec::new();
    for rule in rules(&alerts()) {
        let name = rule["alert"].as_str().unwrap_or("(unnamed)");
        if !matches!(
            rule["labels"]["severity"].as_str(),
            Some("warning" | "critical")
        ) {
            problems.push(format!(
                "{name}: labels.severity is not warning or critical"
            ));
        }
        for key in ["summary", "description", "runbook"] {
            if rule["annotations"][key]
                .as_str()
                .is_none_or(|t| t.trim().is_empty())
            {
                problems.push(format!("{name}: annotations.{key} is missing"));
            }
        }
        let runbook = rule["annotations"]["runbook"].as_str().unwrap_or_default();
        for part in [
            "**What it means:**",
            "**What to check:**",
            "**What to do:**",
            "kubectl ",
        ] {
            if !runbook.contains(part) {
                problems.push(format!("{name}: the runbook lacks {part:?}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---- The names test ----

/// PromQL's functions, aggregations and keywords: identifiers that are never metrics.
const PROMQL_WORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "atan2",
    "inf",
    "nan",
    "Inf",
    "NaN",
];

/// Keywords followed by a parenthesised list of label names.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// What one PromQL expression reads: the metric names it selects, and the `__name__`
/// regular expressions it matches names with.
#[derive(Debug, Default, PartialEq)]
struct Selected {
    names: BTreeSet<String>,
    name_patterns: BTreeSet<String>,
}

fn selected(expr: &str) -> Selected {
    let mut out = Selected::default();
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    let mut last_word = String::new();
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&chars, i);
        } else if c == '{' {
            let end = matching(&chars, i, '{', '}');
            name_matchers(&chars[i + 1..end].iter().collect::<String>(), &mut out);
            i = end + 1;
        } else if c == '[' {
            i = matching(&chars, i, '[', ']') + 1;
        } else if c == '(' && LABEL_LISTS.contains(&last_word.as_str()) {
            i = matching(&chars, i, '(', ')') + 1;
            last_word.clear();
        } else if c == '$' || c.is_ascii_digit() || c == '.' {
            // A dashboard variable or a number or duration, with its unit.
            i += 1;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '.')
            {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            let call = next == Some(&'(');
            if !call && !PROMQL_WORDS.contains(&word.as_str()) {
                out.names.insert(word.clone());
            }
            last_word = word;
        } else {
            if !c.is_whitespace() {
                last_word.clear();
            }
            i += 1;
        }
    }
    out
}

fn skip_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() && chars[i] != quote {
        if chars[i] == '\\' && quote != '`' {
            i += 1;
        }
        i += 1;
    }
    i + 1
}

/// The index of the bracket closing the one at `start`, outside strings.
fn matching(chars: &[char], start: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => {
                i = skip_string(chars, i);
                continue;
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
        i += 1;
    }
    panic!(
        "unbalanced {open} in {:?}",
        chars.iter().collect::<String>()
    )
}

/// The `__name__` matchers of a `{...}` selector.
fn name_matchers(matchers: &str, out: &mut Selected) {
    let re = Regex::new(r#"__name__\s*(=~|=)\s*"((?:[^"\\]|\\.)*)""#).expect("regex");
    for m in re.captures_iter(matchers) {
        let value = m[2].replace("\\\\", "\\");
        if &m[1] == "=" {
            out.names.insert(value);
        } else {
            out.name_patterns.insert(value);
        }
    }
}

/// The metric of a templating query `label_values(metric{...}, label)`, if any.
fn label_values_metric(query: &str) -> Option<Selected> {
    let inner = query.trim().strip_prefix("label_values(")?;
    let (selector, _label) = inner.rsplit_once(',')?;
    Some(selected(selector))
}

/// Every name `selections` read that the catalogue does not declare (nor Prometheus' own
/// `up`), and every `__name__` pattern that matches no declared family.
fn undeclared(selections: &[(String, Selected)]) -> Vec<String> {
    let families = catalogue::families();
    let declared = |name: &str| {
        name == "up"
            || families.iter().any(|f| f.name == name)
            || ["_bucket", "_sum", "_count"].iter().any(|suffix| {
                name.strip_suffix(suffix).is_some_and(|base| {
                    families
                        .iter()
                        .any(|f| f.name == base && f.r#type == Type::Histogram)
                })
            })
    };
    let mut problems = Vec::new();
    for (place, s) in selections {
        for name in &s.names {
            if !declared(name) {
                problems.push(format!("{place}: {name} is not a declared metric family"));
            }
        }
        for pattern in &s.name_patterns {
            match Regex::new(&format!("^(?:{pattern})$")) {
                Ok(re) if families.iter().any(|f| re.is_match(f.name)) => {}
                Ok(_) => problems.push(format!(
                    "{place}: __name__=~{pattern:?} matches no declared metric family"
                )),
                Err(e) => problems.push(format!("{place}: __name__=~{pattern:?}: {e}")),
            }
        }
    }
    problems
}

/// Every query of alerts.yaml and the dashboards, with where it is.
fn every_query() -> Vec<(String, Selected)> {
    let mut all = Vec::new();
    for rule in rules(&alerts()) {
        let name = rule["alert"].as_str().expect("alert");
        let expr = rule["expr"].as_str().expect("expr");
        all.push((format!("alerts.yaml {name}"), selected(expr)));
    }
    for (file, dashboard) in dashboards() {
        let mut panels = dashboard["panels"].as_array().cloned().unwrap_or_default();
        // Collapsed rows hold their panels.
        let nested: Vec<Value> = panels
            .iter()
            .flat_map(|p| p["panels"].as_array().cloned().unwrap_or_default())
            .collect();
        panels.extend(nested);
        for panel in panels {
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    let title = panel["title"].as_str().unwrap_or_default();
                    all.push((format!("{file} {title:?}"), selected(expr)));
                }
            }
        }
        for variable in dashboard["templating"]["list"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let query = variable["query"]["query"]
                .as_str()
                .or(variable["query"].as_str())
                .unwrap_or_default();
            if let Some(s) = label_values_metric(query) {
                let name = variable["name"].as_str().unwrap_or_default();
                all.push((format!("{file} variable {name}"), s));
            }
        }
    }
    all
}

#[test]
fn alerts_and_dashboards_name_only_declared_metric_families() {
    let queries = every_query();
    // The alerts and four dashboards, each with queries.
    assert!(queries.len() > 40, "{} queries", queries.len());
    let problems = undeclared(&queries);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_names_check_catches_an_invented_name_and_sees_past_promql() {
    let s = selected(
        r#"histogram_quantile(0.99, sum by (controller, le) (rate(simplyblock_reconcile_duration_seconds_bucket{controller=~"a|b", namespace!="x"}[$__rate_interval]))) > 0.5 and on (controller) simplyblock_invented_total offset 5m"#,
    );
    assert_eq!(
        s.names,
        BTreeSet::from([
            "simplyblock_reconcile_duration_seconds_bucket".to_owned(),
            "simplyblock_invented_total".to_owned(),
        ])
    );
    let s2 = selected(r#"increase({__name__=~"simplyblock_.+_nothing_total", node="n"}[15m]) > 0"#);
    assert_eq!(s2.names, BTreeSet::new());
    assert_eq!(
        s2.name_patterns,
        BTreeSet::from(["simplyblock_.+_nothing_total".to_owned()])
    );
    let gauge_with_count = selected(
        "simplyblock_simplyblockdriver_nodes_ready_count < simplyblock_storagecluster_used_bytes_count",
    );
    let problems = undeclared(&[
        ("invented".into(), s),
        ("pattern".into(), s2),
        ("count".into(), gauge_with_count),
    ]);
    assert_eq!(
        problems,
        vec![
            "invented: simplyblock_invented_total is not a declared metric family".to_owned(),
            "pattern: __name__=~\"simplyblock_.+_nothing_total\" matches no declared metric family"
                .to_owned(),
            // _count maps to a family only for histograms.
            "count: simplyblock_storagecluster_used_bytes_count is not a declared metric family"
                .to_owned(),
        ]
    );
    assert_eq!(
        label_values_metric(r#"label_values(simplyblock_pool_x{namespace=~"$namespace"}, pool)"#)
            .map(|s| s.names),
        Some(BTreeSet::from(["simplyblock_pool_x".to_owned()]))
    );
}

// ---- Rendering ----

const MONITORING_KINDS: [&str; 3] = ["ServiceMonitor", "PodMonitor", "PrometheusRule"];

fn render(values: &[(&str, &str)]) -> Result<Vec<kube::api::DynamicObject>, String> {
    let mut all = vec![("deployment.profile", "standalone")];
    all.extend_from_slice(values);
    chart::render("simplyblock-system", &all)
}

fn find<'a>(
    objects: &'a [kube::api::DynamicObject],
    kind: &str,
    name: &str,
) -> &'a kube::api::DynamicObject {
    objects
        .iter()
        .find(|o| chart::kind_and_name(o) == format!("{kind}/{name}"))
        .unwrap_or_else(|| panic!("{kind}/{name} is not rendered"))
}

fn json(object: &kube::api::DynamicObject) -> Value {
    serde_json::to_value(object).expect("object as JSON")
}

#[test]
fn nothing_of_monitoring_renders_by_default() {
    let objects = render(&[]).expect("render");
    let monitoring: Vec<String> = objects
        .iter()
        .filter(|o| {
            let kind = o
                .types
                .as_ref()
                .map(|t| t.kind.as_str())
                .unwrap_or_default();
            MONITORING_KINDS.contains(&kind)
                || o.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("simplyblock-dashboard-"))
                || o.metadata.name.as_deref() == Some("simplyblock-metrics-reader")
                    && kind == "ClusterRoleBinding"
        })
        .map(chart::kind_and_name)
        .collect();
    assert!(monitoring.is_empty(), "{monitoring:?}");
}

#[test]
fn the_service_monitor_scrapes_the_operators_metrics_service_over_verified_tls() {
    let objects = render(&[
        ("monitoring.serviceMonitor.enabled", "true"),
        ("monitoring.serviceMonitor.interval", "15s"),
        (
            "monitoring.serviceMonitor.labels.release",
            "kube-prometheus",
        ),
    ])
    .expect("render");
    let monitor = json(find(&objects, "ServiceMonitor", "simplyblock-operator"));
    assert_eq!(monitor["metadata"]["namespace"], "simplyblock-system");
    assert_eq!(monitor["metadata"]["labels"]["release"], "kube-prometheus");
    // It selects the metrics Service, and only it: not the webhook Service.
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    let selects = |service: &Value| {
        selector
            .iter()
            .all(|(k, v)| &service["metadata"]["labels"][k] == v)
    };
    let metrics = json(find(&objects, "Service", "simplyblock-operator-metrics"));
    let webhook = json(find(&objects, "Service", "simplyblock-operator-webhook"));
    assert!(selects(&metrics), "{selector:?} does not select {metrics}");
    assert!(
        !selects(&webhook),
        "{selector:?} also selects the webhook Service"
    );
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], metrics["spec"]["ports"][0]["name"]);
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["interval"], "15s");
    // The name the operator's certificate is issued for, and the CA it is issued from.
    assert_eq!(
        endpoint["tlsConfig"]["serverName"],
        format!(
            "{}.simplyblock-system.svc",
            simplyblock_operator::metrics_server::SERVICE
        )
    );
    assert_eq!(
        endpoint["tlsConfig"]["ca"]["secret"]["name"],
        simplyblock_operator::webhooks::ca::SECRET
    );
    assert_eq!(
        endpoint["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    // No binding unless a scraper is named.
    assert!(
        !objects
            .iter()
            .any(|o| chart::kind_and_name(o) == "ClusterRoleBinding/simplyblock-metrics-reader")
    );
}

#[test]
fn the_pod_monitor_selects_the_driver_pods_and_keeps_only_metrics_ports() {
    let objects = render(&[("monitoring.serviceMonitor.enabled", "true")]).expect("render");
    let monitor = json(find(&objects, "PodMonitor", "simplyblock-csi"));
    let expression = &monitor["spec"]["selector"]["matchExpressions"][0];
    assert_eq!(expression["key"], "app");
    assert_eq!(expression["operator"], "In");
    let apps: BTreeSet<&str> = expression["values"]
        .as_array()
        .expect("values")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    use simplyblock_operator::driver::names::{CONTROLLER_APP, NODE_APP};
    assert_eq!(apps, BTreeSet::from([CONTROLLER_APP, NODE_APP]));
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        serde_json::json!(["simplyblock-system"])
    );
    let keep = &monitor["spec"]["podMetricsEndpoints"][0]["relabelings"][0];
    assert_eq!(keep["action"], "keep");
    assert_eq!(
        keep["sourceLabels"],
        serde_json::json!(["__meta_kubernetes_pod_container_port_name"])
    );
    // Prometheus anchors a relabelling regex at both ends.
    let regex = Regex::new(&format!("^(?:{})$", keep["regex"].as_str().expect("regex")))
        .expect("the regex compiles");
    for port in ["metrics", "metrics-provisioner", "metrics-attacher"] {
        assert!(regex.is_match(port), "{port} is not kept");
    }
    for port in ["healthz", "metricsx", "grpc", "metrics-"] {
        assert!(!regex.is_match(port), "{port} is kept");
    }
}

#[test]
fn the_scraper_is_bound_to_the_metrics_reader_role_only_when_named() {
    let objects = render(&[
        ("monitoring.serviceMonitor.enabled", "true"),
        (
            "monitoring.serviceMonitor.scraperServiceAccount.name",
            "prometheus-k8s",
        ),
        (
            "monitoring.serviceMonitor.scraperServiceAccount.namespace",
            "monitoring",
        ),
    ])
    .expect("render");
    let binding = json(find(
        &objects,
        "ClusterRoleBinding",
        "simplyblock-metrics-reader",
    ));
    assert_eq!(
        binding["roleRef"]["name"],
        simplyblock_operator::metrics_server::READER_ROLE
    );
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}])
    );
    // The role it binds is the chart's.
    find(
        &objects,
        "ClusterRole",
        simplyblock_operator::metrics_server::READER_ROLE,
    );
}

#[test]
fn monitors_elsewhere_need_a_tls_config_they_can_read() {
    let err = render(&[
        ("monitoring.serviceMonitor.enabled", "true"),
        ("monitoring.serviceMonitor.namespace", "monitoring"),
    ])
    .expect_err("refused");
    assert!(
        err.contains("monitoring.serviceMonitor.namespace")
            && err.contains("simplyblock-operator-webhook-ca")
            && err.contains("tlsConfig"),
        "{err}"
    );
    let objects = render(&[
        ("monitoring.serviceMonitor.enabled", "true"),
        ("monitoring.serviceMonitor.namespace", "monitoring"),
        (
            "monitoring.serviceMonitor.tlsConfig.insecureSkipVerify",
            "true",
        ),
    ])
    .expect("render");
    let monitor = json(find(&objects, "ServiceMonitor", "simplyblock-operator"));
    assert_eq!(monitor["metadata"]["namespace"], "monitoring");
    assert_eq!(
        monitor["spec"]["endpoints"][0]["tlsConfig"],
        serde_json::json!({"insecureSkipVerify": true})
    );
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        serde_json::json!(["simplyblock-system"])
    );
}

#[test]
fn the_prometheus_rule_is_the_rule_file() {
    let objects = render(&[
        ("monitoring.prometheusRule.enabled", "true"),
        ("monitoring.prometheusRule.labels.role", "alert-rules"),
    ])
    .expect("render");
    let rule = json(find(&objects, "PrometheusRule", "simplyblock"));
    assert_eq!(rule["metadata"]["labels"]["role"], "alert-rules");
    // Exactly the file's groups: helm expands none of Prometheus' {{ $labels }}.
    assert_eq!(rule["spec"]["groups"], alerts()["groups"]);
    let summary = rule["spec"]["groups"][0]["rules"][0]["annotations"]["summary"]
        .as_str()
        .expect("summary");
    assert!(summary.contains("{{ $labels.cluster }}"), "{summary}");
}

#[test]
fn each_dashboard_renders_as_a_labelled_config_map() {
    let objects = render(&[
        ("monitoring.dashboards.enabled", "true"),
        (
            "monitoring.dashboards.label",
            "grafana.example.com/dashboard",
        ),
        ("monitoring.dashboards.labelValue", "yes"),
        (
            "monitoring.dashboards.annotations.grafana_folder",
            "Storage",
        ),
    ])
    .expect("render");
    let files = dashboards();
    assert_eq!(
        files.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>(),
        [
            "capacity.json",
            "csi-driver.json",
            "fleet-overview.json",
            "operator.json"
        ]
    );
    for (file, dashboard) in files {
        let name = format!("simplyblock-dashboard-{}", file.trim_end_matches(".json"));
        let map = json(find(&objects, "ConfigMap", &name));
        assert_eq!(
            map["metadata"]["labels"]["grafana.example.com/dashboard"],
            "yes"
        );
        assert_eq!(map["metadata"]["annotations"]["grafana_folder"], "Storage");
        let text = map["data"][&file].as_str().expect("the dashboard's key");
        let parsed: Value = serde_json::from_str(text).expect("the ConfigMap holds JSON");
        assert_eq!(parsed, dashboard);
        // Grafana needs a uid and a title to import it, and its panels a data source.
        assert!(
            dashboard["uid"]
                .as_str()
                .is_some_and(|u| u.starts_with("simplyblock-"))
        );
        assert!(dashboard["title"].as_str().is_some_and(|t| !t.is_empty()));
    }
    // The default label is the one Grafana's sidecar looks for.
    let objects = render(&[("monitoring.dashboards.enabled", "true")]).expect("render");
    let map = json(find(
        &objects,
        "ConfigMap",
        "simplyblock-dashboard-operator",
    ));
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
}

#[test]
fn the_package_ships_the_rules_and_dashboards_but_not_their_tests() {
    let dir = tempfile::tempdir().expect("temp dir");
    let archive = chart::package(dir.path()).expect("helm package");
    let listing = Command::new("tar")
        .args(["-tzf", &archive.display().to_string()])
        .output()
        .expect("tar");
    let listing = String::from_utf8_lossy(&listing.stdout);
    for file in [
        "simplyblock-operator/files/prometheus/alerts.yaml",
        "simplyblock-operator/files/dashboards/fleet-overview.json",
        "simplyblock-operator/templates/monitoring.yaml",
    ] {
        assert!(
            listing.lines().any(|l| l == file),
            "{file} missing from {listing}"
        );
    }
    assert!(
        !listing.contains("alerts_test.yaml"),
        "the alerts' unit tests are packaged: {listing}"
    );
}

//! One alert firing: a drive fails in sbsim, the operator's `/metrics` shows its
//! StorageDevice Failed, and the chart's own `SimplyblockDeviceFailed` rule, evaluated by
//! promtool over the samples scraped from that endpoint, fires for it.
//!
//! No Prometheus runs here: promtool's rule unit test is Prometheus' rule engine over
//! given series. The scraped samples are held constant for the test's span, as repeated
//! scrapes of an unchanged fleet would record them.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ResourceExt};
use simplyblock_api::storage_device::{DevicePhase, StorageDevice};
use simplyblock_operator::metrics_server::MetricsServer;
use simplyblock_operator::runtime::metrics::Metrics;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{NAMESPACE, step, wait_for};

/// The alert this act shows, as alerts.yaml names it.
const ALERT: &str = "SimplyblockDeviceFailed";
/// The family the alert reads.
const PHASE: &str = "simplyblock_storagedevice_phase_state";
/// The target labels Prometheus adds to every scraped sample (the ServiceMonitor's job is
/// the Service's name).
const JOB: &str = "simplyblock-operator-metrics";

pub async fn act(
    client: &kube::Client,
    sim: &simplyblock_simulator::Sim,
    metrics: Arc<Metrics>,
) -> anyhow::Result<()> {
    step(
        "a drive fails: the chart's SimplyblockDeviceFailed alert fires on the operator's /metrics",
    );
    // The operator runs in this process: its metrics served as the embedding serves them,
    // plain on loopback (the binary serves them over TLS to readers the API server admits).
    let server = MetricsServer::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), metrics).await?;
    let addr = server
        .local_addr()
        .ok_or_else(|| anyhow::anyhow!("the metrics server has no address"))?;
    let serving = tokio::spawn(server.run());
    let outcome = fire(client, sim, addr).await;
    serving.abort();
    outcome
}

async fn fire(
    client: &kube::Client,
    sim: &simplyblock_simulator::Sim,
    addr: SocketAddr,
) -> anyhow::Result<()> {
    let devices: Api<StorageDevice> = Api::namespaced(client.clone(), NAMESPACE);
    let device = devices
        .list(&Default::default())
        .await?
        .into_iter()
        .find(|d| {
            d.status
                .as_ref()
                .is_some_and(|s| s.phase == DevicePhase::Online)
        })
        .ok_or_else(|| anyhow::anyhow!("no Online StorageDevice to fail"))?;
    let name = device.name_any();
    let id = device.spec.device_id.clone();
    sim.mutate(|st| {
        if let Some(d) = st.t.devices.get_mut(&id) {
            d.status = simplyblock_controlplane::DeviceStatus::Failed;
        }
        Ok(())
    })
    .map_err(|e| anyhow::anyhow!("failing drive {id} in sbsim: {e:?}"))?;
    println!("sbsim: drive {id} ({NAMESPACE}/{name}) failed");

    let failed = format!("device=\"{name}\"");
    let samples = wait_for(
        "the operator's /metrics to show the device Failed",
        Duration::from_secs(120),
        async || {
            let body = scrape(addr).await.ok()?;
            let shown = parse(&body).into_iter().any(|(series, value)| {
                series.starts_with(&format!("{PHASE}{{"))
                    && series.contains(&failed)
                    && series.contains("phase=\"Failed\"")
                    && value.parse::<f64>() == Ok(1.0)
            });
            shown.then_some(body)
        },
    )
    .await?;
    let series = parse(&samples);
    println!(
        "scraped http://{addr}/metrics: {} samples, among them:",
        series.len()
    );
    for (s, v) in series
        .iter()
        .filter(|(s, _)| s.starts_with(PHASE) && s.contains(&failed))
    {
        println!("  {s} {v}");
    }

    // Every device the scrape shows Failed fires, this one among them.
    let instance = addr.to_string();
    let mut expected = Vec::new();
    for (s, v) in &series {
        if !s.starts_with(&format!("{PHASE}{{"))
            || !s.contains("phase=\"Failed\"")
            || v.parse::<f64>() != Ok(1.0)
        {
            continue;
        }
        let mut labels = series_labels(&with_target(s, &instance));
        labels.push(("alertname".into(), ALERT.into()));
        labels.push(("severity".into(), "critical".into()));
        labels.sort();
        let annotations = expected_annotations(&labels)?;
        expected.push((labels, annotations));
    }
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("device_failed_test.yaml");
    std::fs::write(&file, unit_test(&series, &instance, &expected))?;
    let promtool = tokio::task::spawn_blocking(simplyblock_testenv::assets::promtool).await??;
    let out = tokio::process::Command::new(&promtool)
        .args(["test", "rules"])
        .arg(&file)
        .output()
        .await?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    anyhow::ensure!(
        out.status.success(),
        "promtool did not see {ALERT} fire as expected:\n{text}"
    );
    println!(
        "promtool test rules (the chart's files/prometheus/alerts.yaml over the scraped samples): SUCCESS"
    );
    for (labels, annotations) in &expected {
        let ours = labels.iter().any(|(k, v)| k == "device" && *v == name);
        println!(
            "firing: {ALERT}{}",
            if ours {
                " (the drive failed above)"
            } else {
                ""
            }
        );
        for (k, v) in labels {
            println!("  {k}={v}");
        }
        for (k, v) in annotations.iter().filter(|(k, _)| k != "runbook") {
            println!("  {k}: {v}");
        }
    }
    Ok(())
}

/// Labels or annotations: (name, value) pairs.
type Pairs = Vec<(String, String)>;

/// The labels of a series written `name{k="v",...}`.
fn series_labels(series: &str) -> Vec<(String, String)> {
    let Some((_, rest)) = series.split_once('{') else {
        return Vec::new();
    };
    let mut labels = Vec::new();
    let mut chars = rest.trim_end_matches('}').chars().peekable();
    loop {
        let key: String = chars
            .by_ref()
            .skip_while(|c| *c == ',' || c.is_whitespace())
            .take_while(|c| *c != '=')
            .collect();
        if key.is_empty() || chars.next() != Some('"') {
            break;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => break,
                },
                '"' => break,
                c => value.push(c),
            }
        }
        labels.push((key, value));
    }
    labels
}

/// The annotations the chart's rule gives an alert with `labels`: its `{{ $labels.NAME }}`
/// filled in. promtool compares them with Prometheus' own expansion.
fn expected_annotations(labels: &[(String, String)]) -> anyhow::Result<Vec<(String, String)>> {
    let path = simplyblock_testenv::chart::dir().join("files/prometheus/alerts.yaml");
    let rules: serde_json::Value = serde_saphyr::from_str(&std::fs::read_to_string(&path)?)?;
    let rule = rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .find(|r| r["alert"] == ALERT)
        .ok_or_else(|| anyhow::anyhow!("{} has no alert {ALERT}", path.display()))?;
    let mut out = Vec::new();
    for (key, template) in rule["annotations"].as_object().into_iter().flatten() {
        let mut text = template.as_str().unwrap_or_default().to_owned();
        for (label, value) in labels {
            text = text.replace(&format!("{{{{ $labels.{label} }}}}"), value);
        }
        anyhow::ensure!(
            !text.contains("{{"),
            "annotation {key} of {ALERT} uses more than $labels: {text}"
        );
        out.push((key.clone(), text));
    }
    Ok(out)
}

/// A promtool `test rules` file: the chart's alert rules over `series` held constant for
/// ten minutes, each with the target labels a scrape adds, expecting exactly the alerts
/// `expected` (labels, annotations) to fire at minute 5.
fn unit_test(series: &[(String, String)], instance: &str, expected: &[(Pairs, Pairs)]) -> String {
    let rules = simplyblock_testenv::chart::dir().join("files/prometheus/alerts.yaml");
    let mut out = format!(
        "rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n",
        yaml_string(&rules.display().to_string())
    );
    for (s, v) in series {
        let Ok(value) = v.parse::<f64>() else {
            continue;
        };
        if !value.is_finite() {
            continue;
        }
        out.push_str(&format!(
            "      - series: {}\n        values: {}\n",
            yaml_string(&with_target(s, instance)),
            yaml_string(&format!("{value}x10"))
        ));
    }
    out.push_str(&format!(
        "    alert_rule_test:\n      - eval_time: 5m\n        alertname: {ALERT}\n        exp_alerts:\n"
    ));
    for (labels, annotations) in expected {
        out.push_str("          - exp_labels:\n");
        for (k, v) in labels.iter().filter(|(k, _)| k != "alertname") {
            out.push_str(&format!("              {k}: {}\n", yaml_string(v)));
        }
        out.push_str("            exp_annotations:\n");
        for (k, v) in annotations {
            out.push_str(&format!("              {k}: {}\n", yaml_string(v)));
        }
    }
    out
}

/// `series` with the labels Prometheus adds to what it scrapes from the operator's
/// target, unless the series has its own (honorLabels).
fn with_target(series: &str, instance: &str) -> String {
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, rest.trim_end_matches('}')),
        None => (series, ""),
    };
    let mut all: Vec<String> = Vec::new();
    if !labels.is_empty() {
        all.push(labels.to_owned());
    }
    for (k, v) in [("job", JOB), ("instance", instance)] {
        if !labels.contains(&format!("{k}=\"")) {
            all.push(format!("{k}=\"{v}\""));
        }
    }
    format!("{name}{{{}}}", all.join(","))
}

fn yaml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// The samples of an exposition: (series, value) of every line that is not a comment.
fn parse(body: &str) -> Vec<(String, String)> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.to_owned()))
        })
        .collect()
}

/// `GET /metrics` as Prometheus asks for it; the body.
async fn scrape(addr: SocketAddr) -> anyhow::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(
            format!(
                "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no HTTP response from {addr}"))?;
    anyhow::ensure!(head.starts_with("HTTP/1.1 200"), "GET /metrics: {head}");
    Ok(body.to_owned())
}

//! Table tests of the planner: one folder per case under `tests/cases/<family>/<case>/`.
//!
//! A case holds `spec.yaml` (`run`, optional `environment`, `discover`: a DiscoverSpec),
//! `nodes.yaml` (compact nodes: `name`, `ip`, `roles`, `cordoned`, `taints`), and
//! `reports/<worker>.json`: a partial report merged over a base machine (two memory nodes
//! of 8 cores, 4 GiB of free huge pages each, eth0 holding the node's InternalIP), or
//! `reports/<worker>.host` naming a folder under `fixtures/hosts/` to probe. Expected
//! output is `draft.yaml` and `notes.txt`; `UPDATE_EXPECT=1` rewrites them.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeSpec, NodeStatus, Taint};
use serde::Deserialize;
use serde_json::{Value, json};
use simplyblock_api::cluster_deployment_config::Environment;
use simplyblock_api::operator_ops::DiscoverSpec;
use simplyblock_discovery::plan::{Input, WorkerReport, plan, render};
use simplyblock_discovery::probe::{ProbeOptions, RootFs, probe_with};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    run: String,
    #[serde(default)]
    environment: Option<Environment>,
    #[serde(default)]
    discover: DiscoverSpec,
    #[serde(default)]
    require_fully_readable: bool,
}

#[derive(Deserialize)]
struct CompactNode {
    name: String,
    #[serde(default)]
    ip: Option<String>,
    #[serde(default)]
    roles: Vec<String>,
    #[serde(default)]
    cordoned: bool,
    #[serde(default)]
    taints: Vec<String>,
}

fn node(c: &CompactNode) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(c.name.clone());
    n.metadata.labels = Some(
        c.roles
            .iter()
            .map(|r| (format!("node-role.kubernetes.io/{r}"), String::new()))
            .collect(),
    );
    n.spec = Some(NodeSpec {
        unschedulable: Some(c.cordoned),
        taints: Some(
            c.taints
                .iter()
                .map(|t| {
                    let (key, effect) = t.split_once(':').unwrap_or((t, "NoSchedule"));
                    Taint {
                        key: key.into(),
                        effect: effect.into(),
                        ..Taint::default()
                    }
                })
                .collect(),
        ),
        ..NodeSpec::default()
    });
    n.status = Some(NodeStatus {
        addresses: c.ip.as_ref().map(|ip| {
            vec![NodeAddress {
                type_: "InternalIP".into(),
                address: ip.clone(),
            }]
        }),
        ..NodeStatus::default()
    });
    n
}

fn base_report(worker: &str, ip: Option<&str>) -> Value {
    let numa = |n: i32, first: u32| json!({"node": n, "onlineCpus": (first..first + 16).collect::<Vec<_>>(), "physicalCores": 8});
    let mut eth0 = json!({"name": "eth0", "kind": "Physical", "speedMbps": 25000, "mtu": 1500,
        "state": "up", "driver": "ice", "pciAddress": "0000:17:00.0", "numaNode": 0});
    if let Some(ip) = ip {
        eth0["addresses"] = json!([{"address": ip, "prefixLen": 24}]);
    }
    json!({
        "version": simplyblock_discovery::REPORT_VERSION,
        "node": worker,
        "cpu": {"onlineCpus": 32, "physicalCores": 16, "sockets": 2, "threadsPerCore": 2,
                "hyperThreading": true, "numaNodes": [numa(0, 0), numa(1, 16)]},
        "memory": {"totalBytes": 274877906944u64, "freeBytes": 137438953472u64, "availableBytes": 206158430208u64},
        "hugePages": [{"sizeBytes": 2097152, "total": 4096, "free": 4096,
                       "numaNodes": [{"node": 0, "total": 2048, "free": 2048}, {"node": 1, "total": 2048, "free": 2048}]}],
        "interfaces": [
            {"name": "lo", "kind": "Loopback", "state": "unknown", "numaNode": -1,
             "addresses": [{"address": "127.0.0.1", "prefixLen": 8}]},
            eth0
        ]
    })
}

/// Objects merge key by key; anything else (arrays included) replaces.
fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run_case(dir: &Path) -> (String, String) {
    let read = |f: &str| {
        fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{}/{f}: {e}", dir.display()))
    };
    let spec: Spec = serde_saphyr::from_str(&read("spec.yaml")).expect("spec.yaml");
    let compact: Vec<CompactNode> =
        serde_saphyr::from_str(&read("nodes.yaml")).expect("nodes.yaml");
    let nodes: Vec<Node> = compact.iter().map(node).collect();
    let mut reports = Vec::new();
    let mut entries: Vec<PathBuf> = fs::read_dir(dir.join("reports"))
        .map(|d| d.map(|e| e.expect("entry").path()).collect())
        .unwrap_or_default();
    entries.sort();
    for path in entries {
        let worker = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("name")
            .to_string();
        let text = fs::read_to_string(&path).expect("report");
        let bytes = if path.extension().is_some_and(|e| e == "host") {
            let root = repo().join("fixtures/hosts").join(text.trim()).join("root");
            let report = probe_with(
                &RootFs::new(&root),
                &ProbeOptions {
                    node: Some(worker.clone()),
                    now: Some(jiff::Timestamp::UNIX_EPOCH),
                    ..ProbeOptions::default()
                },
            );
            simplyblock_discovery::encode(&report).expect("encode")
        } else if text.trim_start().starts_with("RAW") {
            // A report taken as it is, not merged: for version and shape refusals.
            text.trim_start().trim_start_matches("RAW").to_string()
        } else {
            let ip = compact
                .iter()
                .find(|c| c.name == worker)
                .and_then(|c| c.ip.as_deref());
            let mut base = base_report(&worker, ip);
            merge(&mut base, serde_json::from_str(&text).expect("report json"));
            base.to_string()
        };
        reports.push(WorkerReport {
            worker,
            report: simplyblock_discovery::decode(bytes.as_bytes()),
        });
    }
    let input = Input {
        run: &spec.run,
        namespace: Some("simplyblock"),
        spec: &spec.discover,
        environment: spec.environment,
        nodes: &nodes,
        reports: &reports,
        require_fully_readable: spec.require_fully_readable,
    };
    match plan(&input) {
        Err(e) => (String::new(), format!("error: {e}\n")),
        Ok(p) => {
            let draft = p
                .config
                .as_ref()
                .map(|c| render(c).expect("render"))
                .unwrap_or_default();
            let mut notes = String::from("# notes\n");
            for n in &p.notes {
                notes.push_str(&format!("{n}\n"));
            }
            notes.push_str("# explain\n");
            for e in &p.explain {
                notes.push_str(&format!("{e}\n"));
            }
            notes.push_str("# refusals\n");
            for r in &p.refusals {
                notes.push_str(&format!("{}\n", r.line()));
            }
            if p.config.is_none() {
                notes.push_str(&format!("# failed\n{}\n", p.summary));
            }
            (draft, notes)
        }
    }
}

#[test]
fn planner_cases() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut families: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for family in fs::read_dir(&root).expect("tests/cases") {
        let family = family.expect("family").path();
        for case in fs::read_dir(&family).expect("family dir") {
            let case = case.expect("case").path();
            let (draft, notes) = run_case(&case);
            let fam = family
                .file_name()
                .and_then(|f| f.to_str())
                .unwrap_or("")
                .to_string();
            *families.entry(fam).or_default() += 1;
            if update {
                fs::write(case.join("draft.yaml"), &draft).expect("write");
                fs::write(case.join("notes.txt"), &notes).expect("write");
                continue;
            }
            let want_draft = fs::read_to_string(case.join("draft.yaml")).unwrap_or_default();
            let want_notes = fs::read_to_string(case.join("notes.txt")).unwrap_or_default();
            if want_draft != draft || want_notes != notes {
                failures.push(format!(
                    "{}:\n--- draft\n{draft}\n--- notes\n{notes}",
                    case.display()
                ));
            }
        }
    }
    for f in [
        "dev", "numa", "size", "pci", "fleet", "net", "role", "filt", "held", "fail", "cm", "tmpl",
        "host",
    ] {
        assert!(
            families.get(f).copied().unwrap_or(0) > 0,
            "family {f} has no case"
        );
    }
    assert!(
        failures.is_empty(),
        "{} case(s) differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

//! The steps' plans over observations, without an API server.

use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};

use super::*;
use OperatorOpsStep::*;

const IMAGE: &str = "registry.example/probe:1";

fn op(step: &str, workers: &[&str], discover: Value) -> OperatorOps {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "OperatorOps",
        "metadata": {"name": "run", "namespace": "ns"},
        "spec": {"action": "Discover", "discover": discover},
        "status": {"phase": "Running", "step": {"state": step}, "workers": workers,
                   "environment": "Vanilla"},
    }))
    .expect("op")
}

fn node(name: &str, ip: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"addresses": [{"type": "InternalIP", "address": ip}]},
    }))
    .expect("node")
}

/// A worker with one free NVMe disk, two NUMA nodes and its InternalIP on eth0.
fn report(worker: &str, ip: &str) -> WorkerReport {
    let numa = |n: i32, first: u32| json!({"node": n, "onlineCpus": (first..first + 16).collect::<Vec<_>>(), "physicalCores": 8});
    let text = json!({
        "version": simplyblock_discovery::REPORT_VERSION, "node": worker,
        "cpu": {"onlineCpus": 32, "physicalCores": 16, "sockets": 2, "threadsPerCore": 2,
                "hyperThreading": true, "numaNodes": [numa(0, 0), numa(1, 16)]},
        "memory": {"totalBytes": 274877906944u64, "freeBytes": 137438953472u64, "availableBytes": 206158430208u64},
        "hugePages": [{"sizeBytes": 2097152, "total": 4096, "free": 4096,
                       "numaNodes": [{"node": 0, "total": 2048, "free": 2048}, {"node": 1, "total": 2048, "free": 2048}]}],
        "interfaces": [{"name": "eth0", "kind": "Physical", "speedMbps": 25000, "mtu": 1500, "state": "up",
                        "numaNode": 0, "addresses": [{"address": ip, "prefixLen": 24}]}],
        "devices": [{"name": "nvme0n1", "path": "/dev/nvme0n1", "pciAddress": "0000:50:00.0",
                     "sizeBytes": 2199023255552u64, "kind": "Disk", "transport": "NVMe",
                     "model": "M", "numaNode": 0, "available": true, "exclusiveOpen": "Succeeded"}],
    });
    WorkerReport {
        worker: worker.into(),
        report: simplyblock_discovery::report::decode(text.to_string().as_bytes()),
    }
}

fn reported(workers: &[&str]) -> BTreeMap<String, WorkerReport> {
    workers
        .iter()
        .enumerate()
        .map(|(i, w)| (w.to_string(), report(w, &format!("10.0.0.{}", i + 1))))
        .collect()
}

fn job(worker: &str) -> String {
    configmap::config_map_name("run", worker)
}

fn reasons(noted: &Noted<OperatorOpsStep, Call, Fields>) -> Vec<&str> {
    noted.notes.iter().map(|n| n.reason).collect()
}

#[test]
fn inspecting_records_the_usable_workers_and_the_environment() {
    let op = op("Inspecting", &[], json!({}));
    let obs = Observed {
        nodes: vec![
            node("w1", "10.0.0.1"),
            node("w2", "10.0.0.2"),
            node("w3", "10.0.0.3"),
        ],
        storage_node_workers: BTreeSet::from(["w3".to_string()]),
        api_groups: None,
        ..Observed::default()
    };
    let noted = plan(&op, Inspecting, &obs, IMAGE);
    let Plan::Advance {
        to,
        message,
        kind_status: Some(kind),
    } = &noted.plan
    else {
        panic!("{noted:?}");
    };
    assert_eq!(*to, Move::To(Probing));
    assert_eq!(message, "probing 2 worker(s)");
    assert_eq!(
        kind.workers,
        ["w1", "w2"],
        "a worker with a StorageNode is left out"
    );
    assert_eq!(kind.environment, Some(Environment::Vanilla));
    assert_eq!(reasons(&noted), ["EnvironmentPartiallyRead"]);
}

#[test]
fn a_run_outside_the_operators_namespace_probes_nothing() {
    let op = op("Inspecting", &[], json!({}));
    let obs = Observed {
        operator_namespace: Some("simplyblock".into()),
        nodes: vec![node("w1", "10.0.0.1")],
        api_groups: Some(Vec::new()),
        ..Observed::default()
    };
    let noted = plan(&op, Inspecting, &obs, IMAGE);
    assert!(
        matches!(&noted.plan, Plan::Fail(m) if m == "probe Jobs run privileged with the host's root mounted, so they run only in the operator's namespace simplyblock, and this run is in ns: create the OperatorOps in simplyblock"),
        "{noted:?}"
    );
    // In the operator's namespace it goes on.
    let home = Observed {
        operator_namespace: Some("ns".into()),
        ..obs
    };
    assert!(
        matches!(
            &plan(&op, Inspecting, &home, IMAGE).plan,
            Plan::Advance { .. }
        ),
        "at home"
    );
}

#[test]
fn inspecting_without_a_free_worker_fails() {
    let op = op("Inspecting", &[], json!({"workers": ["gone"]}));
    let obs = Observed {
        nodes: vec![node("w1", "10.0.0.1")],
        api_groups: Some(Vec::new()),
        ..Observed::default()
    };
    let noted = plan(&op, Inspecting, &obs, IMAGE);
    assert!(
        matches!(&noted.plan, Plan::Fail(m) if m.starts_with("no schedulable worker is free")),
        "{noted:?}"
    );
}

#[test]
fn probing_starts_the_probe_on_the_workers_without_a_job_or_a_report() {
    let op = op("Probing", &["w1", "w2", "w3"], json!({}));
    let obs = Observed {
        reports: reported(&["w1"]),
        probe_jobs: BTreeMap::from([(job("w2"), false)]),
        ..Observed::default()
    };
    let noted = plan(&op, Probing, &obs, IMAGE);
    match &noted.plan {
        Plan::Call {
            call: Call::CreateProbeJobs(workers),
            message,
        } => {
            assert_eq!(workers, &["w3".to_string()]);
            assert_eq!(message, "probing: starting the probe on w3");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn probing_waits_for_the_reports_and_says_who_is_left_out() {
    let op = op("Probing", &["w1", "w2", "w3"], json!({}));
    let mut obs = Observed {
        reports: reported(&["w1"]),
        probe_jobs: BTreeMap::from([(job("w2"), false), (job("w3"), false)]),
        ..Observed::default()
    };
    let noted = plan(&op, Probing, &obs, IMAGE);
    assert!(
        matches!(&noted.plan, Plan::Wait { message, after: PROBE_POLL, event: None }
            if message == "probing: 1 of 3 worker(s) reported"),
        "{noted:?}"
    );
    assert!(noted.notes.is_empty(), "{noted:?}");

    obs.probe_jobs.insert(job("w3"), true);
    let noted = plan(&op, Probing, &obs, IMAGE);
    assert!(
        matches!(&noted.plan, Plan::Wait { message, .. }
            if message == "probing: 1 of 3 worker(s) reported; left out after their probe failed: w3"),
        "{noted:?}"
    );
    assert_eq!(
        noted.notes,
        [Note {
            warning: true,
            reason: "DeviceInspectionFailed",
            message: "the probe on w3 failed after its retries; the worker is left out".into(),
        }]
    );
}

#[test]
fn probing_moves_to_writing_once_every_worker_reported_or_failed() {
    let op = op("Probing", &["w1", "w2"], json!({}));
    let obs = Observed {
        reports: reported(&["w1"]),
        probe_jobs: BTreeMap::from([(job("w1"), false), (job("w2"), true)]),
        ..Observed::default()
    };
    let noted = plan(&op, Probing, &obs, IMAGE);
    assert!(
        matches!(&noted.plan, Plan::Advance { to: Move::To(Writing), message, kind_status: None }
            if message == "writing the draft from 1 report(s)"),
        "{noted:?}"
    );
    assert_eq!(reasons(&noted), ["DeviceInspectionFailed"]);
}

#[test]
fn probing_fails_when_every_probe_failed() {
    let op = op("Probing", &["w1", "w2"], json!({}));
    let obs = Observed {
        probe_jobs: BTreeMap::from([(job("w1"), true), (job("w2"), true)]),
        ..Observed::default()
    };
    let noted = plan(&op, Probing, &obs, IMAGE);
    assert!(
        matches!(&noted.plan, Plan::Fail(m) if m == "no worker reported: every probe Job failed"),
        "{noted:?}"
    );
    assert_eq!(reasons(&noted), ["DeviceInspectionFailed"; 2]);
}

#[test]
fn probing_fails_on_an_image_the_worker_cannot_pull() {
    let op = op("Probing", &["w1"], json!({}));
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "probe-w1"},
        "spec": {"nodeName": "w1", "containers": [{"name": "probe"}]},
        "status": {"containerStatuses": [{"name": "probe", "image": IMAGE, "imageID": "",
            "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}}}]},
    }))
    .expect("pod");
    let obs = Observed {
        probe_pods: vec![pod],
        probe_jobs: BTreeMap::from([(job("w1"), false)]),
        ..Observed::default()
    };
    let noted = plan(&op, Probing, &obs, IMAGE);
    let Plan::Fail(message) = &noted.plan else {
        panic!("{noted:?}");
    };
    assert!(
        message.starts_with(&format!(
            "the probe image {IMAGE} cannot be started on w1 (ImagePullBackOff: back-off); "
        )),
        "{message}"
    );
    assert_eq!(
        noted.notes,
        [Note {
            warning: true,
            reason: "NodeProbeImageError",
            message: message.clone(),
        }]
    );
}

#[test]
fn writing_without_reports_fails() {
    let op = op("Writing", &["w1"], json!({}));
    let noted = plan(&op, Writing, &Observed::default(), IMAGE);
    assert!(
        matches!(&noted.plan, Plan::Fail(m) if m.starts_with("the probe reports are gone")),
        "{noted:?}"
    );
}

fn writing_world(existing_draft: Option<BTreeMap<String, String>>) -> Observed {
    Observed {
        nodes: vec![node("w1", "10.0.0.1")],
        reports: reported(&["w1"]),
        existing_draft,
        ..Observed::default()
    }
}

#[test]
fn writing_creates_the_draft_with_its_notes() {
    let op = op("Writing", &["w1"], json!({}));
    let noted = plan(&op, Writing, &writing_world(None), IMAGE);
    let Plan::Call {
        call: Call::WriteDraft { config, notes },
        message,
    } = &noted.plan
    else {
        panic!("{noted:?}");
    };
    assert_eq!(
        message,
        "writing ClusterDeploymentConfig discovered-run in Draft"
    );
    assert_eq!(config.name_any(), "discovered-run");
    assert!(!config.spec.approved);
    assert!(
        notes.iter().any(|n| n.reason == "ConfigWritten"),
        "the notes are raised with the write: {notes:?}"
    );
    assert!(noted.notes.is_empty(), "nothing is said before the write");
}

#[test]
fn writing_succeeds_on_the_draft_it_wrote_without_saying_it_again() {
    let op = op("Writing", &["w1"], json!({}));
    let ours = BTreeMap::from([(DISCOVERED_BY_LABEL.to_string(), "run".to_string())]);
    let noted = plan(&op, Writing, &writing_world(Some(ours)), IMAGE);
    let Plan::Succeed {
        message,
        kind_status: Some(kind),
    } = &noted.plan
    else {
        panic!("{noted:?}");
    };
    assert!(
        message.starts_with("wrote discovered-run in Draft"),
        "{message}"
    );
    assert_eq!(kind.config_ref.as_deref(), Some("discovered-run"));
    assert_eq!(kind.workers, ["w1"], "the other kind fields stay");
    assert!(noted.notes.is_empty(), "{noted:?}");
}

#[test]
fn writing_adopts_a_document_of_that_name_written_by_someone_else() {
    let op = op("Writing", &["w1"], json!({"configName": "by-hand"}));
    let noted = plan(&op, Writing, &writing_world(Some(BTreeMap::new())), IMAGE);
    assert!(
        matches!(&noted.plan, Plan::Succeed { kind_status: Some(k), .. } if k.config_ref.as_deref() == Some("by-hand")),
        "{noted:?}"
    );
    assert_eq!(reasons(&noted), ["ConfigExists"]);
}

#[test]
fn a_deleted_run_and_a_late_probe_say_what_is_left() {
    let run = op("Probing", &["w1"], json!({}));
    assert_eq!(
        run.deleted_message(),
        "the run was deleted at Probing; its probe Jobs and reports go with it"
    );
    let steps = DiscoverSteps {
        probe: ProbeSettings {
            image: IMAGE.into(),
            service_account: "sa".into(),
            ..ProbeSettings::default()
        },
    };
    let late = steps.deadline_message(&run, Probing).expect("a message");
    assert!(
        late.starts_with("no worker reported within the probing deadline"),
        "{late}"
    );
    assert!(late.ends_with(&configmap::run_selector("run")), "{late}");
    assert_eq!(steps.deadline_message(&run, Writing), None);
    assert_eq!(run.metric_target(), "ns");
}

fn probe_settings() -> ProbeSettings {
    ProbeSettings {
        image: IMAGE.into(),
        pull_policy: "Never".into(),
        pull_secrets: vec!["mirror-pull".into()],
        service_account: ProbeSettings::SERVICE_ACCOUNT.into(),
    }
}

#[test]
fn a_probe_job_is_built_pinned_to_its_worker_and_owned_by_its_run() {
    let mut op = op("Probing", &["w1"], json!({}));
    op.metadata.uid = Some("5e1f0000-0000-4000-8000-000000000001".into());
    let built = probe_job(&op, "w1", &job("w1"), &probe_settings()).expect("a Job");
    assert_eq!(built.metadata.name.as_deref(), Some(job("w1").as_str()));
    let owners = built.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(owners[0].uid, "5e1f0000-0000-4000-8000-000000000001");
    let pod = built
        .spec
        .and_then(|s| s.template.spec)
        .expect("a pod spec");
    assert_eq!(pod.node_name.as_deref(), Some("w1"));
    assert_eq!(pod.containers[0].image.as_deref(), Some(IMAGE));
    // The operator's own pull policy: images imported or mirrored are not pulled anew.
    assert_eq!(
        pod.containers[0].image_pull_policy.as_deref(),
        Some("Never")
    );
    // And its pull secrets: a mirror that wants credentials serves the probe too.
    let secrets: Vec<_> = pod
        .image_pull_secrets
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(secrets, ["mirror-pull"]);
}

#[test]
fn a_probe_job_that_does_not_decode_is_an_error_not_an_empty_job() {
    // A run never stored has no uid, so it cannot own the Job: its ownerReferences
    // entry is null and the manifest is not a Job.
    let op = op("Probing", &["w1"], json!({}));
    let err = probe_job(&op, "w1", &job("w1"), &probe_settings()).expect_err("not a Job");
    assert!(
        err.starts_with(&format!(
            "building probe Job {} failed: its manifest is not a Job (",
            job("w1")
        )),
        "{err}"
    );
    assert!(err.contains("OwnerReference"), "{err}");
    assert!(err.contains("report it"), "{err}");
}

//! Preflight's findings over observations, without a node or an API server.

use super::*;

/// A node with everything: modules, 4096 pages of 2 MiB, a 6.8 kernel.
fn good_node() -> NodeObservation {
    NodeObservation {
        nvme_tcp: Ok(true),
        nvme_fabrics: Ok(true),
        hugepages: Ok(Hugepages {
            total: 4096,
            page_size: Some(2 << 20),
        }),
        kernel_release: Ok("6.8.0-45-generic".into()),
    }
}

/// A node with nothing: no modules, no hugepages (a 5.15 kernel is fine).
fn bare_node() -> NodeObservation {
    NodeObservation {
        nvme_tcp: Ok(false),
        nvme_fabrics: Ok(false),
        hugepages: Ok(Hugepages {
            total: 0,
            page_size: Some(2 << 20),
        }),
        kernel_release: Ok("5.15.0-91-generic".into()),
    }
}

fn need(apis: &mut ServedApis, need: &ApiNeed) {
    apis.entry(need.group.into())
        .or_default()
        .entry(need.version.into())
        .or_default()
        .extend(need.kinds.iter().map(|k| k.to_string()));
}

fn good_cluster() -> ClusterObservation {
    let mut apis = ServedApis::new();
    for n in [CERT_MANAGER, FOUNDATIONDB, SNAPSHOTS] {
        need(&mut apis, &n);
    }
    ClusterObservation {
        version: "v1.33.1".into(),
        apis: Ok(apis),
        snapshot_deployments: Ok(vec![Workload {
            kind: "Deployment",
            namespace: "kube-system".into(),
            name: "snapshot-controller".into(),
            running: true,
        }]),
        snapshot_pods: Ok(vec![]),
        storage_classes: Ok(vec![StorageClass {
            name: "standard".into(),
            provisioner: "rancher.io/local-path".into(),
            default: true,
        }]),
    }
}

/// An API server with nothing installed.
fn empty_cluster() -> ClusterObservation {
    ClusterObservation {
        version: "v1.33.1".into(),
        apis: Ok(ServedApis::new()),
        snapshot_deployments: Ok(vec![]),
        snapshot_pods: Ok(vec![]),
        storage_classes: Ok(vec![]),
    }
}

fn observed(node: NodeObservation, cluster: ClusterObservation) -> Observation {
    Observation {
        node: Some(node),
        cluster: Some(Ok(cluster)),
    }
}

fn failed(report: &Report) -> Vec<Check> {
    report
        .findings
        .iter()
        .filter(|f| matches!(f.outcome, Outcome::Fail(_)))
        .map(|f| f.check)
        .collect()
}

fn problem(report: &Report, check: Check) -> &Problem {
    match report.outcome(check) {
        Some(Outcome::Fail(p)) => p,
        other => panic!("{check} did not fail: {other:?}"),
    }
}

#[test]
fn everything_present_is_all_ok_and_exits_zero() {
    let report = assess(&Options::default(), &observed(good_node(), good_cluster()));
    assert_eq!(report.problems(), 0, "{report}");
    assert_eq!(report.exit_code(), EXIT_READY);
    assert_eq!(report.findings.len(), 10, "one line per check: {report}");
    let text = report.to_string();
    assert!(
        text.lines().take(10).all(|l| l.starts_with("ok   ")),
        "{text}"
    );
    assert!(text.ends_with("0 problem(s) found\n"), "{text}");
}

#[test]
fn every_missing_prerequisite_is_reported_at_once() {
    let report = assess(&Options::default(), &observed(bare_node(), empty_cluster()));
    assert_eq!(
        failed(&report),
        vec![
            Check::NvmeTcp,
            Check::NvmeFabrics,
            Check::Hugepages,
            Check::CertManager,
            Check::FoundationDb,
            Check::SnapshotCrds,
            Check::SnapshotController,
            Check::DefaultStorageClass,
        ],
        "{report}"
    );
    assert_eq!(report.exit_code(), EXIT_PROBLEMS);
    let text = report.to_string();
    assert_eq!(text.lines().filter(|l| l.starts_with("FAIL ")).count(), 8);
    assert!(text.ends_with("8 problem(s) found\n"), "{text}");
    // Each says what is missing, why it matters and what to do.
    for f in &report.findings {
        if let Outcome::Fail(p) = &f.outcome {
            assert!(
                !p.missing.is_empty() && !p.why.is_empty() && !p.fix.is_empty(),
                "{p:?}"
            );
        }
    }
}

#[test]
fn a_failure_line_says_what_why_and_what_to_do() {
    let report = assess(&Options::default(), &observed(bare_node(), good_cluster()));
    let text = report.to_string();
    let line = text
        .lines()
        .find(|l| l.starts_with("FAIL nvme-tcp module: "))
        .expect("the nvme-tcp line");
    assert!(line.contains("not loaded on this node"), "{line}");
    assert!(line.contains("`modprobe nvme-tcp`"), "{line}");
    assert!(line.contains("/etc/modules-load.d/"), "{line}");
    let hugepages = problem(&report, Check::Hugepages);
    assert!(
        hugepages.fix.contains("sysctl -w vm.nr_hugepages=4096"),
        "{hugepages:?}"
    );
    assert!(hugepages.fix.contains("hugepages-2Mi"), "{hugepages:?}");
}

#[test]
fn hugepages_of_another_size_are_counted_in_that_size() {
    let mut node = bare_node();
    node.hugepages = Ok(Hugepages {
        total: 0,
        page_size: Some(1 << 30),
    });
    let report = assess(&Options::default(), &observed(node, good_cluster()));
    let p = problem(&report, Check::Hugepages);
    assert!(p.fix.contains("vm.nr_hugepages=8`"), "{p:?}");
    assert!(p.fix.contains("hugepages-1Gi"), "{p:?}");
    assert!(p.fix.contains("hugepagesz=1G hugepages=8"), "{p:?}");
}

#[test]
fn hugepages_are_read_from_meminfo() {
    let text = "MemTotal:       16384 kB\nHugePages_Total:    1024\nHugePages_Free:     1024\nHugepagesize:       2048 kB\n";
    assert_eq!(
        Hugepages::from_meminfo(text),
        Hugepages {
            total: 1024,
            page_size: Some(2 << 20)
        }
    );
    // A kernel without HugeTLB shows no line: none reserved.
    assert_eq!(Hugepages::from_meminfo("MemTotal: 1 kB\n").total, 0);
}

#[test]
fn the_kernel_needs_5_0_unless_nvme_tcp_is_backported() {
    assert_eq!(kernel_version("6.8.0-45-generic"), Some((6, 8)));
    assert_eq!(kernel_version("5.0.0"), Some((5, 0)));
    assert_eq!(kernel_version("4.18.0-553.el8_10.x86_64"), Some((4, 18)));
    assert_eq!(kernel_version("garbage"), None);

    let with = |release: &str, nvme_tcp: bool| {
        let mut node = good_node();
        node.kernel_release = Ok(release.into());
        node.nvme_tcp = Ok(nvme_tcp);
        assess(&Options::default(), &observed(node, good_cluster()))
            .outcome(Check::Kernel)
            .cloned()
            .expect("kernel checked")
    };
    assert!(matches!(with("5.0.0", true), Outcome::Ok { .. }));
    // RHEL 8's 4.18 carries nvme-tcp.
    assert!(matches!(
        with("4.18.0-553.el8_10.x86_64", true),
        Outcome::Ok { .. }
    ));
    match with("4.19.0", false) {
        Outcome::Fail(p) => assert!(p.missing.contains("older than 5.0"), "{p:?}"),
        other => panic!("an old kernel without nvme-tcp passed: {other:?}"),
    }
    assert!(matches!(with("unknown", true), Outcome::Fail(_)));
}

#[test]
fn the_profile_decides_the_cluster_checks() {
    let cluster_checks = |profile, tls_provider| {
        Options {
            profile,
            tls_provider,
            node: false,
            cluster: true,
        }
        .checks()
    };
    use Check::*;
    assert_eq!(
        cluster_checks(Profile::Standalone, TlsProvider::CertManager),
        vec![
            KubernetesApi,
            CertManager,
            FoundationDb,
            SnapshotCrds,
            SnapshotController,
            DefaultStorageClass
        ]
    );
    assert_eq!(
        cluster_checks(Profile::Standalone, TlsProvider::OpenShift),
        vec![
            KubernetesApi,
            FoundationDb,
            SnapshotCrds,
            SnapshotController,
            DefaultStorageClass
        ]
    );
    for profile in [Profile::Managed, Profile::Empty] {
        assert_eq!(
            cluster_checks(profile, TlsProvider::CertManager),
            vec![KubernetesApi, SnapshotCrds, SnapshotController]
        );
    }
    // A managed cluster with nothing installed fails only what it needs.
    let options = Options {
        profile: Profile::Managed,
        ..Options::default()
    };
    let report = assess(&options, &observed(good_node(), empty_cluster()));
    assert_eq!(
        failed(&report),
        vec![SnapshotCrds, SnapshotController],
        "{report}"
    );
}

#[test]
fn skipping_the_node_looks_at_the_cluster_alone() {
    let options = Options {
        node: false,
        ..Options::default()
    };
    let report = assess(
        &options,
        &Observation {
            node: None,
            cluster: Some(Ok(good_cluster())),
        },
    );
    assert!(report.outcome(Check::NvmeTcp).is_none());
    assert_eq!(report.findings.len(), 6);
    assert_eq!(report.problems(), 0, "{report}");
}

#[test]
fn an_unreachable_cluster_is_one_problem_and_the_rest_not_checked() {
    let report = assess(
        &Options::default(),
        &Observation {
            node: Some(good_node()),
            cluster: Some(Err("connection refused".into())),
        },
    );
    assert_eq!(failed(&report), vec![Check::KubernetesApi], "{report}");
    assert!(
        problem(&report, Check::KubernetesApi)
            .missing
            .contains("connection refused")
    );
    assert_eq!(report.not_checked(), 5);
    assert_eq!(report.exit_code(), EXIT_PROBLEMS);
    assert!(
        report
            .to_string()
            .ends_with("1 problem(s) found, 5 check(s) not made\n")
    );
}

#[test]
fn what_the_caller_may_not_list_is_not_checked_not_failed() {
    fn forbidden<T>(what: &str) -> Seen<T> {
        Err(Unseen::Forbidden(format!("{what} is forbidden")))
    }
    let mut cluster = empty_cluster();
    cluster.snapshot_deployments = forbidden("listing Deployments");
    cluster.snapshot_pods = forbidden("listing Pods");
    cluster.storage_classes = forbidden("listing StorageClasses");
    let mut apis = ServedApis::new();
    for n in [CERT_MANAGER, FOUNDATIONDB, SNAPSHOTS] {
        need(&mut apis, &n);
    }
    cluster.apis = Ok(apis);
    let report = assess(&Options::default(), &observed(good_node(), cluster));
    assert_eq!(report.problems(), 0, "{report}");
    assert_eq!(report.exit_code(), EXIT_READY);
    for check in [Check::SnapshotController, Check::DefaultStorageClass] {
        match report.outcome(check) {
            Some(Outcome::NotChecked { why }) => assert!(why.contains("forbidden"), "{why}"),
            other => panic!("{check}: {other:?}"),
        }
    }
    let text = report.to_string();
    assert!(
        text.contains("skip snapshot controller: not checked: listing Deployments is forbidden"),
        "{text}"
    );
    assert!(
        text.ends_with("0 problem(s) found, 2 check(s) not made\n"),
        "{text}"
    );
}

#[test]
fn a_failed_look_is_a_problem() {
    let mut cluster = good_cluster();
    cluster.storage_classes = Err(Unseen::Failed("listing StorageClasses: 500".into()));
    let report = assess(&Options::default(), &observed(good_node(), cluster));
    assert_eq!(failed(&report), vec![Check::DefaultStorageClass]);
}

#[test]
fn the_snapshot_controller_is_found_by_deployment_or_pod() {
    let controller = |deployments: Seen<Vec<Workload>>, pods: Seen<Vec<Workload>>| {
        let mut cluster = good_cluster();
        cluster.snapshot_deployments = deployments;
        cluster.snapshot_pods = pods;
        assess(&Options::default(), &observed(good_node(), cluster))
            .outcome(Check::SnapshotController)
            .cloned()
            .expect("checked")
    };
    let workload = |kind, running| Workload {
        kind,
        namespace: "kube-system".into(),
        name: "snapshot-controller-7f9".into(),
        running,
    };
    // A static pod or a DaemonSet's: no Deployment, a running Pod.
    assert!(matches!(
        controller(Ok(vec![]), Ok(vec![workload("Pod", true)])),
        Outcome::Ok { .. }
    ));
    // Pods may not be listed, but a Deployment is up.
    assert!(matches!(
        controller(
            Ok(vec![workload("Deployment", true)]),
            Err(Unseen::Forbidden("no".into()))
        ),
        Outcome::Ok { .. }
    ));
    // Installed but not running.
    match controller(Ok(vec![workload("Deployment", false)]), Ok(vec![])) {
        Outcome::Fail(p) => {
            assert!(p.missing.contains("not running"), "{p:?}");
            assert!(
                p.fix.contains("kubectl -n kube-system describe deployment"),
                "{p:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Absent where Deployments were listed but Pods were not: unknown, not absent.
    assert!(matches!(
        controller(Ok(vec![]), Err(Unseen::Forbidden("no".into()))),
        Outcome::NotChecked { .. }
    ));
    assert!(is_snapshot_controller("snapshot-controller"));
    assert!(is_snapshot_controller("ebs-csi-snapshot-controller-0"));
    assert!(!is_snapshot_controller("csi-snapshotter"));
}

#[test]
fn an_api_served_at_another_version_says_so() {
    let mut cluster = good_cluster();
    let mut apis = ServedApis::new();
    need(&mut apis, &CERT_MANAGER);
    need(&mut apis, &SNAPSHOTS);
    apis.entry(FOUNDATIONDB.group.into())
        .or_default()
        .entry("v1beta1".into())
        .or_default()
        .insert("FoundationDBCluster".into());
    // A snapshot API without its contents' kind.
    apis.get_mut(SNAPSHOTS.group)
        .and_then(|g| g.get_mut("v1"))
        .map(|kinds| kinds.remove("VolumeSnapshotContent"));
    cluster.apis = Ok(apis);
    let report = assess(&Options::default(), &observed(good_node(), cluster));
    let fdb = problem(&report, Check::FoundationDb);
    assert!(
        fdb.missing
            .contains("apps.foundationdb.org/v1beta2 FoundationDBCluster missing (apps.foundationdb.org is served only at v1beta1)"),
        "{fdb:?}"
    );
    let snapshots = problem(&report, Check::SnapshotCrds);
    assert!(
        snapshots
            .missing
            .contains("snapshot.storage.k8s.io/v1 VolumeSnapshotContent missing"),
        "{snapshots:?}"
    );
}

#[test]
fn default_storage_class_names_the_classes_there_are() {
    let classes = |list: Vec<StorageClass>| {
        let mut cluster = good_cluster();
        cluster.storage_classes = Ok(list);
        assess(&Options::default(), &observed(good_node(), cluster))
            .outcome(Check::DefaultStorageClass)
            .cloned()
            .expect("checked")
    };
    let class = |name: &str, default| StorageClass {
        name: name.into(),
        provisioner: "p".into(),
        default,
    };
    match classes(vec![class("fast", false), class("slow", false)]) {
        Outcome::Fail(p) => {
            assert!(p.missing.contains("there are: fast, slow"), "{p:?}");
            assert!(
                p.fix
                    .contains("storageclass.kubernetes.io/is-default-class=true"),
                "{p:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    match classes(vec![class("a", true), class("b", true)]) {
        Outcome::Ok { detail } => assert!(detail.contains("several"), "{detail}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_json_report_carries_each_finding_and_the_count() {
    let report = assess(&Options::default(), &observed(bare_node(), good_cluster()));
    let json = report.to_json();
    assert_eq!(json["problems"], 3);
    assert_eq!(json["findings"][0]["check"], "nvme-tcp");
    assert_eq!(json["findings"][0]["status"], "fail");
    assert!(
        json["findings"][0]["fix"]
            .as_str()
            .is_some_and(|f| f.contains("modprobe"))
    );
    assert_eq!(json["findings"][3]["status"], "ok");
    assert!(json["findings"][3]["detail"].is_string());
}

#[test]
fn the_node_is_read_from_its_roots() {
    let dir = tempfile::tempdir().expect("dir");
    let roots = NodeRoots::under(dir.path());
    // Nothing there: no modules, and meminfo and osrelease unreadable.
    let bare = observe_node(&roots);
    assert_eq!(bare.nvme_tcp, Ok(false));
    assert!(matches!(bare.hugepages, Err(Unseen::Failed(_))));

    std::fs::create_dir_all(roots.sys.join("module/nvme_tcp")).expect("module");
    std::fs::create_dir_all(roots.proc.join("sys/kernel")).expect("proc");
    std::fs::write(
        roots.proc.join("meminfo"),
        "HugePages_Total: 8\nHugepagesize: 2048 kB\n",
    )
    .expect("meminfo");
    std::fs::write(roots.proc.join("sys/kernel/osrelease"), "6.1.0\n").expect("osrelease");
    let node = observe_node(&roots);
    assert_eq!(
        node,
        NodeObservation {
            nvme_tcp: Ok(true),
            nvme_fabrics: Ok(false),
            hugepages: Ok(Hugepages {
                total: 8,
                page_size: Some(2 << 20)
            }),
            kernel_release: Ok("6.1.0".into()),
        }
    );
}

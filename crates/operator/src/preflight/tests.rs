//! Preflight's findings over observations, without a node or an API server.

use super::*;
use crate::preflight::{NodeRoots, observe_node};

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
        registries: None,
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
            registries: vec![],
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
            registries: None,
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
            registries: None,
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

fn registry(entry: &str) -> Registry {
    Registry::parse(entry)
        .expect("an entry")
        .expect("a registry")
}

/// The chart's default allowedRegistries, as the hook passes them.
const CHART_REGISTRIES: [&str; 5] = [
    "quay.io/simplyblock-io",
    "docker.io/simplyblock",
    "public.ecr.aws/simply-block",
    "registry.k8s.io/sig-storage",
    "quay.io/csiaddons",
];

fn with_registries(entries: &[&str]) -> Options {
    Options {
        registries: registries(entries).expect("registries"),
        ..Options::default()
    }
}

fn reached(entry: &str, how: Result<(), &str>) -> Reach {
    Reach {
        registry: registry(entry),
        reached: how.map_err(str::to_string),
    }
}

fn with_reached(reached: Vec<Reach>) -> Observation {
    Observation {
        registries: Some(reached),
        ..observed(good_node(), good_cluster())
    }
}

#[test]
fn a_registry_entry_is_dialled_at_its_host_and_port() {
    let quay = registry("quay.io/simplyblock-io");
    assert_eq!((quay.host.as_str(), quay.port), ("quay.io", 443));
    assert_eq!(quay.to_string(), "quay.io:443");
    // A port is kept; the path, however deep, is not dialled.
    let mirror = registry("registry.example.com:5000/sb/images");
    assert_eq!(mirror.address(), "registry.example.com:5000");
    assert_eq!(registry("localhost").address(), "localhost:443");
    // Docker Hub's images come from its registry host, named beside what was listed.
    let hub = registry("docker.io/simplyblock");
    assert_eq!(hub.address(), "registry-1.docker.io:443");
    assert_eq!(hub.to_string(), "docker.io (registry-1.docker.io:443)");
    let v6 = registry("[fd00::1]:5000/sb");
    assert_eq!((v6.host.as_str(), v6.port), ("fd00::1", 5000));
    assert_eq!(v6.address(), "[fd00::1]:5000");
    // "*" allows any registry and so names none.
    assert_eq!(Registry::parse("*"), Ok(None));
    for bad in [
        "registry.example.com:https/sb",
        "host:0",
        "host:70000",
        "/sb",
        "",
    ] {
        assert!(Registry::parse(bad).is_err(), "{bad:?} parsed");
    }
}

#[test]
fn registries_are_dialled_once_per_host_and_port() {
    let found = registries(&[
        "quay.io/simplyblock-io",
        "*",
        "quay.io/other",
        "quay.io:8443/simplyblock-io",
        "registry.k8s.io/sig-storage",
        "docker.io/simplyblock",
        "index.docker.io/library",
    ])
    .expect("registries");
    let addresses: Vec<String> = found.iter().map(Registry::address).collect();
    assert_eq!(
        addresses,
        [
            "quay.io:443",
            "quay.io:8443",
            "registry.k8s.io:443",
            "registry-1.docker.io:443"
        ]
    );
    assert_eq!(registries(&["*"]), Ok(vec![]));
    // Every bad entry is named, not just the first.
    let bad = registries(&["quay.io/a", "a:x/b", ":5000"]).expect_err("bad entries");
    assert!(
        bad.contains("\"a:x/b\"") && bad.contains("\":5000\""),
        "{bad}"
    );
}

#[test]
fn the_registry_check_is_a_node_check_made_only_with_registries() {
    assert!(!Options::default().checks().contains(&Check::Registries));
    assert!(
        !with_registries(&["*"])
            .checks()
            .contains(&Check::Registries),
        "\"*\" names no registry to reach"
    );
    let options = with_registries(&CHART_REGISTRIES);
    assert_eq!(
        options.checks()[..5],
        [
            Check::NvmeTcp,
            Check::NvmeFabrics,
            Check::Hugepages,
            Check::Kernel,
            Check::Registries
        ]
    );
    let skip_node = Options {
        node: false,
        ..options
    };
    assert!(!skip_node.checks().contains(&Check::Registries));
}

#[test]
fn registries_that_all_take_a_connection_are_ok() {
    let report = assess(
        &with_registries(&CHART_REGISTRIES),
        // One dial per host and port, as the prober makes them (quay.io serves two).
        &with_reached(
            registries(&CHART_REGISTRIES)
                .expect("registries")
                .into_iter()
                .map(|registry| Reach {
                    registry,
                    reached: Ok(()),
                })
                .collect(),
        ),
    );
    assert_eq!(report.problems(), 0, "{report}");
    match report.outcome(Check::Registries) {
        Some(Outcome::Ok { detail }) => assert_eq!(
            detail,
            "a TCP connection opens to quay.io:443, docker.io (registry-1.docker.io:443), public.ecr.aws:443, registry.k8s.io:443"
        ),
        other => panic!("{other:?}\n{report}"),
    }
    assert!(
        report
            .to_string()
            .contains("ok   registries reachable: a TCP connection opens to quay.io:443"),
        "{report}"
    );
}

#[test]
fn every_unreachable_registry_is_named_at_once() {
    let entries = [
        "quay.io/simplyblock-io",
        "registry.example.com:5000/sb",
        "docker.io/simplyblock",
    ];
    let report = assess(
        &with_registries(&entries),
        &with_reached(vec![
            reached(entries[0], Ok(())),
            reached(entries[1], Err("Connection refused (os error 111)")),
            reached(entries[2], Err("no connection within 3s")),
        ]),
    );
    assert_eq!(failed(&report), vec![Check::Registries], "{report}");
    let p = problem(&report, Check::Registries);
    assert_eq!(
        p.missing,
        "no TCP connection from this node to registry.example.com:5000 (Connection refused (os error 111)), docker.io (registry-1.docker.io:443) (no connection within 3s); quay.io:443 reachable"
    );
    assert!(p.why.contains("the kubelet on this node pulls"), "{p:?}");
    assert!(
        p.fix.starts_with(
            "open the nodes' egress to registry.example.com:5000, registry-1.docker.io:443, or mirror"
        ),
        "{p:?}"
    );
    assert!(p.fix.contains("allowedRegistries"), "{p:?}");
    let text = report.to_string();
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("FAIL registries reachable: "))
            .count(),
        1,
        "{text}"
    );
    assert!(text.ends_with("1 problem(s) found\n"), "{text}");
}

#[test]
fn registries_not_dialled_are_not_checked() {
    let report = assess(
        &with_registries(&CHART_REGISTRIES),
        &observed(good_node(), good_cluster()),
    );
    assert!(
        matches!(
            report.outcome(Check::Registries),
            Some(Outcome::NotChecked { .. })
        ),
        "{report}"
    );
}

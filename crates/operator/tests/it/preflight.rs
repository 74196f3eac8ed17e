//! Preflight against a real API server with nothing installed and a node root with nothing
//! in it: every missing prerequisite is in the one report, and each turns ok once it is
//! there. An account that may list nothing gets "not checked", not a failure. Registries
//! are dialled for real: a port that listens is reachable, one that does not is named.

use std::path::Path;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_operator::preflight::{self, Check, NodeRoots, Options, Outcome, Report};
use simplyblock_testenv::TestEnv;
use simplyblock_testenv::standin::minimal_crd;

/// A node root with a 6.1 kernel, no NVMe modules and no hugepages.
fn bare_node(root: &Path) -> NodeRoots {
    let roots = NodeRoots::under(root);
    std::fs::create_dir_all(roots.sys.join("module")).expect("sys");
    std::fs::create_dir_all(roots.proc.join("sys/kernel")).expect("proc");
    std::fs::write(
        roots.proc.join("meminfo"),
        "MemTotal: 16384000 kB\nHugePages_Total: 0\nHugepagesize: 2048 kB\n",
    )
    .expect("meminfo");
    std::fs::write(roots.proc.join("sys/kernel/osrelease"), "6.1.0-18-amd64\n").expect("osrelease");
    roots
}

fn failed(report: &Report) -> Vec<Check> {
    report
        .findings
        .iter()
        .filter(|f| matches!(f.outcome, Outcome::Fail(_)))
        .map(|f| f.check)
        .collect()
}

fn ok(report: &Report, check: Check) -> String {
    match report.outcome(check) {
        Some(Outcome::Ok { detail }) => detail.clone(),
        other => panic!("{check} is not ok: {other:?}\n{report}"),
    }
}

#[tokio::test]
async fn an_empty_cluster_and_a_bare_node_report_every_missing_prerequisite_at_once() {
    crate::support::logs();
    let env = TestEnv::start().await.expect("API server");
    let kube = env.client().await.expect("client");
    let node = tempfile::tempdir().expect("node root");
    let roots = bare_node(node.path());
    let options = Options::default();

    let report = preflight::check(&options, &roots, Ok(&kube)).await;
    let missing = [
        Check::NvmeTcp,
        Check::NvmeFabrics,
        Check::Hugepages,
        Check::CertManager,
        Check::FoundationDb,
        Check::SnapshotCrds,
        Check::SnapshotController,
        Check::DefaultStorageClass,
    ];
    assert_eq!(failed(&report), missing, "{report}");
    ok(&report, Check::KubernetesApi);
    ok(&report, Check::Kernel);
    assert_eq!(report.exit_code(), preflight::EXIT_PROBLEMS);
    let text = report.to_string();
    for check in missing {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("FAIL {check}: "))),
            "no FAIL line for {check}:\n{text}"
        );
    }
    assert!(text.ends_with("8 problem(s) found\n"), "{text}");

    // A default StorageClass: that check turns ok, the others stay.
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {
            "name": "standard",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": "rancher.io/local-path",
    }))
    .expect("StorageClass");
    Api::<StorageClass>::all(kube.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("create the StorageClass");
    let report = preflight::check(&options, &roots, Ok(&kube)).await;
    assert_eq!(
        ok(&report, Check::DefaultStorageClass),
        "standard (provisioner rancher.io/local-path)"
    );
    assert_eq!(failed(&report), missing[..7], "{report}");

    // The APIs and a snapshot controller with an available replica: only the node's
    // problems are left.
    let mut crds = simplyblock_testenv::certmanager::crds();
    crds.push(simplyblock_testenv::standin::foundationdb_crd());
    for (kind, plural) in [
        ("VolumeSnapshot", "volumesnapshots"),
        ("VolumeSnapshotClass", "volumesnapshotclasses"),
        ("VolumeSnapshotContent", "volumesnapshotcontents"),
    ] {
        let mut crd = minimal_crd("snapshot.storage.k8s.io", "v1", kind, plural, &[]);
        // A *.k8s.io group needs its API review named, as upstream's CRDs do.
        crd.metadata.annotations = Some(
            [(
                "api-approved.kubernetes.io".to_string(),
                "https://github.com/kubernetes-csi/external-snapshotter/pull/814".to_string(),
            )]
            .into(),
        );
        crds.push(crd);
    }
    env.install_crds(&crds).await.expect("CRDs");
    snapshot_controller(&kube).await;
    let report = simplyblock_testenv::wait::until("the cluster checks to pass", async || {
        let report = preflight::check(&options, &roots, Ok(&kube)).await;
        (failed(&report) == missing[..3]).then_some(report)
    })
    .await;
    assert!(
        ok(&report, Check::SnapshotController)
            .contains("Deployment kube-system/snapshot-controller"),
        "{report}"
    );
    assert!(ok(&report, Check::CertManager).contains("cert-manager.io/v1 Certificate, Issuer"));
}

/// A Deployment `kube-system/snapshot-controller` reported available (no controller
/// manager runs here to do it).
async fn snapshot_controller(kube: &kube::Client) {
    let deployments: Api<Deployment> = Api::namespaced(kube.clone(), "kube-system");
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "snapshot-controller"},
        "spec": {
            "selector": {"matchLabels": {"app": "snapshot-controller"}},
            "template": {
                "metadata": {"labels": {"app": "snapshot-controller"}},
                "spec": {"containers": [{"name": "snapshot-controller", "image": "snapshot-controller:v8.2.1"}]},
            },
        },
    }))
    .expect("Deployment");
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("create the Deployment");
    deployments
        .patch_status(
            "snapshot-controller",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1}}),
            ),
        )
        .await
        .expect("report it available");
}

#[tokio::test]
async fn what_the_account_may_not_list_is_not_checked_rather_than_failed() {
    crate::support::logs();
    let env = TestEnv::start().await.expect("API server");
    let admin = env.client().await.expect("client");
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "nobody"}})).expect("account");
    Api::<ServiceAccount>::namespaced(admin, "default")
        .create(&PostParams::default(), &account)
        .await
        .expect("create the account");
    let nobody = env
        .service_account_client("default", "nobody")
        .await
        .expect("the account's client");
    let options = Options {
        node: false,
        ..Options::default()
    };

    let report = preflight::check(&options, &NodeRoots::default(), Ok(&nobody)).await;
    for check in [Check::SnapshotController, Check::DefaultStorageClass] {
        match report.outcome(check) {
            Some(Outcome::NotChecked { why }) => assert!(why.contains("forbidden"), "{why}"),
            other => panic!("{check}: {other:?}\n{report}"),
        }
    }
    // Discovery is open to every account: the APIs are checked, and missing.
    assert_eq!(
        failed(&report),
        [Check::CertManager, Check::FoundationDb, Check::SnapshotCrds],
        "{report}"
    );
    assert!(
        report
            .to_string()
            .ends_with("3 problem(s) found, 2 check(s) not made\n"),
        "{report}"
    );
}

#[tokio::test]
async fn a_registry_that_takes_no_connection_is_named_and_one_that_listens_is_not() {
    crate::support::logs();
    // The kernel completes a connection to a listening socket without an accept, which is
    // all a TCP connect asks; a port whose listener is gone refuses.
    let listening = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let open = listening.local_addr().expect("address").port();
    let closed = {
        let gone = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        gone.local_addr().expect("address").port()
    };
    let node = tempfile::tempdir().expect("node root");
    let roots = bare_node(node.path());
    let options = |entries: &[String]| Options {
        cluster: false,
        registries: preflight::registries(entries).expect("registries"),
        ..Options::default()
    };
    let no_cluster = || Err("not asked for".to_string());

    let both = options(&[
        format!("127.0.0.1:{open}/simplyblock"),
        "*".into(),
        format!("127.0.0.1:{closed}"),
    ]);
    let report = preflight::check(&both, &roots, no_cluster()).await;
    match report.outcome(Check::Registries) {
        Some(Outcome::Fail(p)) => {
            assert!(
                p.missing.starts_with(&format!(
                    "no TCP connection from this node to 127.0.0.1:{closed} ("
                )),
                "{p:?}"
            );
            assert!(
                p.missing
                    .ends_with(&format!("; 127.0.0.1:{open} reachable")),
                "{p:?}"
            );
        }
        other => panic!("{other:?}\n{report}"),
    }

    let report = preflight::check(
        &options(&[format!("127.0.0.1:{open}/simplyblock")]),
        &roots,
        no_cluster(),
    )
    .await;
    assert_eq!(
        ok(&report, Check::Registries),
        format!("a TCP connection opens to 127.0.0.1:{open}")
    );

    // --skip-node: nothing is dialled, and the check is not reported.
    let skip_node = Options {
        node: false,
        ..both
    };
    let observed = preflight::observe(&skip_node, &roots, no_cluster()).await;
    assert_eq!(observed.registries, None);
    assert!(
        preflight::assess(&skip_node, &observed)
            .outcome(Check::Registries)
            .is_none()
    );
    drop(listening);
}

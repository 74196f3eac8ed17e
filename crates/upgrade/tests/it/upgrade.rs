//! A real upgrade: an installation of the Go operator (its CRDs, its Helm release, a fleet
//! it left, a volume with a handle naming its pool) against sbsim holding the same cluster.
//! Preflight refuses while a cluster operation runs; once it ended, `upgrade` and then
//! `migrate` run with the tool killed right after every step's change, once each, and
//! rerun. Afterwards every object reads at both versions, is stored at v1alpha2, the
//! operator adopted the cluster without creating one, and the volume's handle resolves.

use std::os::unix::process::ExitStatusExt;
use std::process::Output;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;
use simplyblock_api::cluster_deployment_config::ClusterDeploymentConfig;
use simplyblock_api::storage_backup::BackupPhase;
use simplyblock_api::{
    StorageBackup, StorageBackupOps, StorageBackupPolicy, StorageCluster, StorageClusterOps,
    StorageNode, StoragePool,
};
use simplyblock_controlplane::{
    Client, ClientConfig, ClusterCreate, ClusterStatus, Method, NodeStatus, PoolCreate,
    StorageNodeAdd, Url, VolumeCreate,
};
use simplyblock_operator::assembly::LeaderElection;
use simplyblock_operator::runtime::context::Context;
use simplyblock_simulator::{Server, Sim, SimConfig};
use simplyblock_testenv::TestEnv;
use simplyblock_testenv::standin::{self, Pod, StandIn};
use simplyblock_testenv::wait::until;
use simplyblock_upgrade::run::CRASH_ENV;
use simplyblock_upgrade::{Stage, steps};

use simplyblock_upgrade::go_installation::{
    self, BACKED_UP_CLAIMS, BACKUP, BACKUP_IMPORT, BACKUP_POLICY, Ids, OPERATOR as GO_OPERATOR,
    RELEASE as GO_RELEASE, RESTORE_DONE, RESTORE_FAILED, RUNNING_OPS,
};

use crate::preflight::{NS, stderr, stdout, upgrade_binary, upgrade_binary_with, v1alpha1};

const TOKEN: &str = "upgrade-test-token";
/// Who the operator of this release leads as.
const OPERATOR_IDENTITY: &str = "simplyblock-operator-0";

struct Sbsim {
    cp: Client,
    server: Server,
    _dir: tempfile::TempDir,
}

/// sbsim with two workers, plain HTTP.
async fn sbsim() -> Sbsim {
    let dir = tempfile::tempdir().expect("tempdir");
    let fleet = dir.path().join("fleet.yaml");
    let mut workers = String::from("workers:\n");
    for i in 1..=2 {
        workers.push_str(&format!(
            "  - hostname: w{i}\n    addresses: [10.10.0.{i}]\n    devices: {{count: 2, size: 2T}}\n    labels: {{node-restriction.kubernetes.io/simplyblock-storage-node: prod-nodes}}\n"
        ));
    }
    std::fs::write(&fleet, workers).expect("fleet");
    let config = SimConfig {
        tokens: vec![TOKEN.into()],
        time_scale: 1000.0,
        fleet: Some(fleet),
        ..SimConfig::new(dir.path().join("state"))
    };
    let server = Server::start(Sim::open(config).expect("sim"), "127.0.0.1:0", None)
        .await
        .expect("sbsim");
    let mut cfg = ClientConfig::new(
        Url::parse(&format!("http://{}", server.addr)).expect("url"),
        TOKEN,
    );
    cfg.timeout = Duration::from_secs(5);
    cfg.retry_backoff = Duration::from_millis(20);
    Sbsim {
        cp: Client::new(cfg).expect("client"),
        server,
        _dir: dir,
    }
}

/// How many `method path` requests sbsim received.
async fn calls(cp: &Client, method: &str, path: &str) -> usize {
    let log = cp
        .raw(Method::GET, "/../../_sim/calls", &[], None)
        .await
        .expect("call log");
    let log: Vec<Value> = serde_json::from_value(log.json().unwrap_or(Value::Null)).expect("calls");
    log.iter()
        .filter(|c| c["method"] == method && c["path"] == path)
        .count()
}

fn hub_node_names(nodes: &kube::core::ObjectList<StorageNode>) -> Vec<String> {
    nodes
        .items
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect()
}

/// The tool run with `args`, killed right after `crash` when given.
async fn tool(env: &TestEnv, args: &[&str], crash: Option<&str>) -> Output {
    let helm = simplyblock_testenv::assets::helm().expect("helm");
    let chart = simplyblock_testenv::chart::dir();
    let mut all: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    all.extend([
        "--from-release".into(),
        GO_RELEASE.into(),
        "--old-operator-deployment".into(),
        GO_OPERATOR.into(),
        "--helm".into(),
        helm.display().to_string(),
        "--chart".into(),
        chart.display().to_string(),
        "--wait-seconds".into(),
        "120".into(),
    ]);
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let vars: Vec<(&str, &str)> = crash.map(|step| (CRASH_ENV, step)).into_iter().collect();
    upgrade_binary_with(env, &all, &vars).await
}

/// Runs `stage` killed after each of its steps in turn, then to its end.
async fn kill_at_every_step(env: &TestEnv, stage: Stage, args: &[&str]) -> Vec<&'static str> {
    let ids: Vec<&'static str> = steps::all()
        .into_iter()
        .filter(|s| s.stage == stage && s.implemented())
        .map(|s| s.id)
        .collect();
    let mut killed = Vec::new();
    for id in &ids {
        let out = tool(env, args, Some(id)).await;
        assert_eq!(
            out.status.signal(),
            Some(6),
            "{stage} killed after {id} did not stop there ({:?})\nstderr:\n{}\nstdout:\n{}",
            out.status,
            stderr(&out),
            stdout(&out)
        );
        assert!(
            stderr(&out).contains(&format!("aborting after {id}")),
            "{}",
            stderr(&out)
        );
        killed.push(*id);
    }
    let out = tool(env, args, None).await;
    assert!(
        out.status.success(),
        "{stage} rerun to its end: {:?}\nstderr:\n{}\nstdout:\n{}",
        out.status,
        stderr(&out),
        stdout(&out)
    );
    assert!(
        stdout(&out).contains(&format!("stage {stage}: every step done")),
        "{}",
        stdout(&out)
    );
    killed
}

/// The operator this release's chart deploys, run here in place of its pod once its
/// Deployment exists, as its ServiceAccount, and restarted when the Deployment's pod
/// template changes.
fn operator_pod(env: &'static TestEnv, cp: Client, endpoint: String) -> StandIn {
    let admin = kube::Client::try_from(env.config().clone()).expect("client");
    standin::pod(
        admin.clone(),
        NS.into(),
        "simplyblock-operator".into(),
        move || {
            let (admin, cp, endpoint) = (admin.clone(), cp.clone(), endpoint.clone());
            async move {
                simplyblock_testenv::chart::serve_webhooks_here(&admin).await;
                let kube = env
                    .service_account_client(NS, simplyblock_testenv::chart::OPERATOR_ACCOUNT)
                    .await
                    .expect("the operator's account");
                let context = Context::new(kube, cp, endpoint, NS.into()).watching(NS);
                let shutdown = context.shutdown.clone();
                let task = tokio::spawn(async move {
                    let ended = simplyblock_operator::run(simplyblock_operator::Config {
                        leader_election: Some(LeaderElection {
                            lease: LeaderElection::LEASE.into(),
                            identity: OPERATOR_IDENTITY.into(),
                            duration: Duration::from_secs(4),
                        }),
                        ..simplyblock_operator::Config::local(context)
                    })
                    .await;
                    if let Err(e) = ended {
                        panic!("the operator stopped: {e}");
                    }
                });
                Pod::new(task, move || shutdown.fire())
            }
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_installation_moves_over_with_the_tool_killed_after_every_step() {
    // Its own API server: the test installs the Go operator's CRDs and its own webhooks.
    let env: &'static TestEnv = Box::leak(Box::new(TestEnv::start().await.expect("API server")));
    env.install_crds(&go_installation::crds())
        .await
        .expect("the Go operator's CRDs");
    let admin = env.client().await.expect("client");
    simplyblock_testenv::create_namespace(&admin, NS)
        .await
        .expect("namespace");

    // The control plane holds the cluster the Go operator created, its nodes, a pool and a
    // volume.
    let sim = sbsim().await;
    let cp = sim.cp.clone();
    let cluster = cp
        .create_cluster(&ClusterCreate::new("prod", 10, 8))
        .await
        .expect("cluster");
    let mut nodes = Vec::new();
    for i in 1..=2 {
        cp.add_storage_node(
            cluster.id,
            &StorageNodeAdd::new(
                format!("w{i}.simplyblock-storage-node-api.{NS}.svc.cluster.local:5000"),
                "eth0",
            ),
        )
        .await
        .expect("node add");
    }
    until("two online nodes", async || {
        let listed = cp.list_storage_nodes(cluster.id).await.ok()?;
        (listed.len() == 2 && listed.iter().all(|n| n.status == NodeStatus::Online)).then_some(())
    })
    .await;
    cp.activate_cluster(cluster.id).await.expect("activate");
    until("the cluster active", async || {
        (cp.get_cluster(cluster.id).await.ok()?.status == ClusterStatus::Active).then_some(())
    })
    .await;
    for node in cp.list_storage_nodes(cluster.id).await.expect("nodes") {
        nodes.push((node.hostname.clone(), node.id.to_string()));
    }
    nodes.sort();
    let pool = cp
        .create_pool(
            cluster.id,
            &PoolCreate {
                name: "gold".into(),
                ..PoolCreate::default()
            },
        )
        .await
        .expect("pool");
    let volume = cp
        .create_volume(
            cluster.id,
            pool.id,
            &VolumeCreate {
                name: "pvc-legacy".into(),
                size: 1 << 30,
                ..VolumeCreate::default()
            },
        )
        .await
        .expect("volume");
    let created_before = calls(&cp, "POST", "/api/v2/clusters/").await
        + calls(&cp, "POST", "/api/v2/clusters").await;
    assert_eq!(created_before, 1, "the seed's create is counted");

    let ids = Ids {
        cluster: cluster.id.to_string(),
        pool: pool.id.to_string(),
        nodes,
    };
    go_installation::fleet(&admin, NS, &ids)
        .await
        .expect("the fleet");
    go_installation::backups(&admin, NS)
        .await
        .expect("the backup objects");
    go_installation::release(&admin, NS)
        .await
        .expect("the Go release");
    go_installation::legacy_volume(&admin, &ids.cluster, &volume.to_string())
        .await
        .expect("the legacy volume");

    // Preflight refuses while the rolling restart runs, and names it.
    let out = upgrade_binary(env, &["preflight"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(stdout(&out).contains(RUNNING_OPS), "{}", stdout(&out));
    // The upgrade refuses too, before it changes anything.
    let out = tool(env, &["upgrade"], None).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stderr(&out).contains(RUNNING_OPS), "{}", stderr(&out));
    assert!(
        Api::<Lease>::namespaced(admin.clone(), NS)
            .get_opt(simplyblock_api::LEADER_LEASE)
            .await
            .expect("lease")
            .is_none(),
        "a refused upgrade took the Lease"
    );

    // The operation ends; preflight passes and prints the plan.
    go_installation::finish_running_operation(&admin, NS)
        .await
        .expect("the operation ends");
    let out = upgrade_binary(env, &["preflight"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    for planned in [
        "hold-controllers",
        "reparent-storage-nodes",
        "rewrite-storage-version",
    ] {
        assert!(stdout(&out).contains(planned), "{}", stdout(&out));
    }

    // The pod of the operator's Deployment, once the upgrade creates it.
    let _operator = operator_pod(env, cp.clone(), format!("http://{}", sim.server.addr));

    let killed = kill_at_every_step(env, Stage::Upgrade, &["upgrade"]).await;
    assert_eq!(killed.first(), Some(&"hold-controllers"));
    // The Go operator is stopped, this one leads, the converting CRDs still store v1alpha1.
    let go = Api::<Deployment>::namespaced(admin.clone(), NS)
        .get(GO_OPERATOR)
        .await
        .expect("the Go operator's Deployment");
    assert_eq!(go.spec.replicas, Some(0));
    let lease = Api::<Lease>::namespaced(admin.clone(), NS)
        .get(simplyblock_api::LEADER_LEASE)
        .await
        .expect("lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some(OPERATOR_IDENTITY)
    );
    let kept = Api::<ConfigMap>::namespaced(admin.clone(), NS)
        .get("simplyblock-operator-settings")
        .await
        .expect("the Go release's ConfigMap");
    assert_eq!(
        kept.metadata
            .annotations
            .unwrap_or_default()
            .get("helm.sh/resource-policy")
            .map(String::as_str),
        Some("keep")
    );
    assert!(
        Api::<ConfigMap>::namespaced(admin.clone(), NS)
            .get_opt(simplyblock_upgrade::record::NAME)
            .await
            .expect("record")
            .is_none(),
        "the record is deleted once the stage is done"
    );

    // Migrate refuses without confirmation, then runs killed after every step.
    let out = tool(env, &["migrate"], None).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("--confirm"), "{}", stderr(&out));
    let killed = kill_at_every_step(env, Stage::Migrate, &["migrate", "--confirm"]).await;
    assert!(killed.contains(&"rewrite-storage-version"), "{killed:?}");

    // Stored at v1alpha2 only.
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    for name in simplyblock_api::converting_crd_names() {
        let crd = crds.get(&name).await.expect("crd");
        assert_eq!(
            crd.status.and_then(|s| s.stored_versions),
            Some(vec!["v1alpha2".to_owned()]),
            "{name}"
        );
        let storage: Vec<&str> = crd
            .spec
            .versions
            .iter()
            .filter(|v| v.storage)
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(storage, ["v1alpha2"], "{name}");
    }

    // Every object reads at both versions: typed at v1alpha2, as JSON at v1alpha1.
    let hub_nodes = Api::<StorageNode>::namespaced(admin.clone(), NS)
        .list(&ListParams::default())
        .await
        .expect("storage nodes read at v1alpha2");
    assert_eq!(hub_nodes.items.len(), 2);
    for node in &hub_nodes.items {
        assert_eq!(node.spec.cluster_ref, "prod");
        let owner = node
            .metadata
            .owner_references
            .clone()
            .unwrap_or_default()
            .into_iter()
            .find(|o| o.controller == Some(true))
            .expect("a controller owner");
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("StorageCluster", "prod")
        );
    }
    let hub_cluster = Api::<StorageCluster>::namespaced(admin.clone(), NS)
        .get("prod")
        .await
        .expect("the cluster read at v1alpha2");
    assert_eq!(
        hub_cluster.status.and_then(|s| s.uuid),
        Some(ids.cluster.clone())
    );
    let hub_pool = Api::<StoragePool>::namespaced(admin.clone(), NS)
        .get("gold")
        .await
        .expect("the pool read at v1alpha2");
    assert_eq!(hub_pool.spec.cluster_ref, "prod");
    let ops = Api::<StorageClusterOps>::namespaced(admin.clone(), NS)
        .list(&ListParams::default())
        .await
        .expect("cluster operations read at v1alpha2");
    assert_eq!(ops.items.len(), 2);
    // The same objects at both versions (the operator may have added its own since, e.g. a
    // cluster's default pool), the fleet's among them.
    for (kind, plural, fleet) in [
        ("StorageCluster", "storageclusters", vec!["prod".to_owned()]),
        ("StorageNode", "storagenodes", hub_node_names(&hub_nodes)),
        ("StoragePool", "storagepools", vec!["gold".to_owned()]),
        (
            "StorageClusterOps",
            "storageclusterops",
            vec![RUNNING_OPS.to_owned()],
        ),
        ("StorageBackup", "storagebackups", vec![BACKUP.to_owned()]),
    ] {
        let names = |version: &'static str| {
            let resource = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("storage.simplyblock.io", version, kind),
                plural,
            );
            let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource);
            async move {
                let mut names: Vec<String> = api
                    .list(&ListParams::default())
                    .await
                    .unwrap_or_else(|e| panic!("{kind} at {version}: {e}"))
                    .items
                    .into_iter()
                    .filter_map(|o| o.metadata.name)
                    .collect();
                names.sort();
                names
            }
        };
        let (old, hub) = (names("v1alpha1").await, names("v1alpha2").await);
        assert_eq!(old, hub, "{kind}");
        for name in fleet {
            assert!(old.contains(&name), "{kind}/{name} in {old:?}");
        }
    }
    let old_node: DynamicObject = v1alpha1(&admin, "StorageNode", "storagenodes")
        .get(&hub_nodes.items[0].metadata.name.clone().unwrap_or_default())
        .await
        .expect("a node at v1alpha1");
    assert_eq!(old_node.data["spec"]["storageNodeSetRef"], "prod-nodes");

    backups_moved_over(&admin).await;

    // The node set retired into a deployment document; its workload kept.
    // Deleted, orphaning: this API server runs no garbage collector to finish the orphaning,
    // so the set waits on its finalizer, and nothing else holds it.
    for set in v1alpha1(&admin, "StorageNodeSet", "storagenodesets")
        .list(&ListParams::default())
        .await
        .expect("sets")
        .items
    {
        assert!(set.metadata.deletion_timestamp.is_some(), "{set:?}");
        assert_eq!(set.metadata.finalizers, Some(vec!["orphan".to_owned()]));
    }
    let document = Api::<ClusterDeploymentConfig>::namespaced(admin.clone(), NS)
        .get("prod")
        .await
        .expect("the cluster's deployment document");
    assert!(!document.spec.approved);
    assert_eq!(document.spec.node_sets.len(), 1);
    assert_eq!(document.spec.node_sets[0].groups[0].workers.len(), 2);
    let workload = Api::<ConfigMap>::namespaced(admin.clone(), NS)
        .get("prod-nodes-config")
        .await
        .expect("the set's ConfigMap survives");
    assert_eq!(
        workload
            .metadata
            .owner_references
            .unwrap_or_default()
            .iter()
            .map(|o| o.kind.as_str())
            .collect::<Vec<_>>(),
        ["StorageCluster"]
    );

    // The volume's handle resolves: the annotation names the pool by its id, and the
    // control plane has the volume there.
    let pv = Api::<PersistentVolume>::all(admin.clone())
        .get("pvc-legacy")
        .await
        .expect("volume");
    let annotations = pv.metadata.annotations.unwrap_or_default();
    let handle = annotations
        .get(steps::HANDLE_ANNOTATION)
        .expect("the normalised handle");
    assert_eq!(handle, &format!("{}:{}:{volume}", ids.cluster, ids.pool));
    cp.get_volume(cluster.id, pool.id, volume)
        .await
        .expect("the handle's volume is the control plane's");
    assert_eq!(
        annotations
            .get("storage.simplyblock.io/qos-rw-iops")
            .map(String::as_str),
        Some("100"),
        "the moved key beside the old one"
    );

    // The operator adopted the cluster it found in the control plane: it reports on it and
    // never created one.
    let clusters: Api<StorageCluster> = Api::namespaced(admin.clone(), NS);
    until("the operator reports on the adopted cluster", async || {
        let status = clusters.get("prod").await.ok()?.status?;
        (status.nqn.as_deref() == Some(cluster.nqn.as_str())).then_some(())
    })
    .await;
    let created = calls(&cp, "POST", "/api/v2/clusters/").await
        + calls(&cp, "POST", "/api/v2/clusters").await;
    assert_eq!(
        created, 1,
        "only the seed's create reached the control plane"
    );
    // Nor did it add a node or a volume again: the fleet's are the control plane's.
    let node_adds = calls(
        &cp,
        "POST",
        &format!("/api/v2/clusters/{}/storage-nodes/", cluster.id),
    )
    .await;
    assert_eq!(node_adds, 2, "the seed's two node adds only");
    let volume_creates = calls(
        &cp,
        "POST",
        &format!(
            "/api/v2/clusters/{}/storage-pools/{}/volumes/",
            cluster.id, pool.id
        ),
    )
    .await;
    assert_eq!(volume_creates, 1, "the seed's volume only");
}

/// The Go backup kinds moved over: the policy copied with its claims labelled, the
/// restores kept as historical records, the import gone, and the backups reading at
/// v1alpha2 as a request and a record, and at v1alpha1 as the Go operator wrote them.
async fn backups_moved_over(admin: &kube::Client) {
    let policy = Api::<StorageBackupPolicy>::namespaced(admin.clone(), NS)
        .get(BACKUP_POLICY)
        .await
        .expect("the copied policy");
    let spec = serde_json::to_value(&policy.spec).expect("json");
    assert_eq!(
        spec,
        serde_json::json!({"clusterRef": "prod", "schedule": "15m,4 1d,7", "maxAge": "7d",
            "claimSelector": {"matchLabels": {"storage.simplyblock.io/backup-policy": BACKUP_POLICY}}})
    );
    for claim in BACKED_UP_CLAIMS {
        let pvc = Api::<PersistentVolumeClaim>::namespaced(admin.clone(), NS)
            .get(claim)
            .await
            .expect("claim");
        assert_eq!(
            pvc.metadata
                .labels
                .unwrap_or_default()
                .get("storage.simplyblock.io/backup-policy")
                .map(String::as_str),
            Some(BACKUP_POLICY),
            "{claim}"
        );
    }
    for (kind, plural) in [
        ("BackupPolicy", "backuppolicies"),
        ("BackupRestore", "backuprestores"),
    ] {
        let left = v1alpha1(admin, kind, plural)
            .list(&ListParams::default())
            .await
            .expect(kind);
        assert!(left.items.is_empty(), "{kind}: {:?}", left.items);
    }
    // Deleted, orphaning: with no garbage collector here, it waits on the collector's
    // finalizer alone, and the StorageBackup it made is still there.
    for import in v1alpha1(admin, "BackupImport", "backupimports")
        .list(&ListParams::default())
        .await
        .expect("imports")
        .items
    {
        assert!(import.metadata.deletion_timestamp.is_some(), "{import:?}");
        assert_eq!(import.metadata.finalizers, Some(vec!["orphan".to_owned()]));
    }

    let records = Api::<StorageBackupOps>::namespaced(admin.clone(), NS);
    let done = records
        .get(RESTORE_DONE)
        .await
        .expect("the finished restore");
    assert!(done.is_historical_record());
    assert_eq!(done.spec.backup_ref, BACKUP);
    let restore = done.spec.restore.clone().expect("restore");
    assert_eq!(
        (
            restore.claim_name.as_str(),
            restore.claim_namespace,
            restore.target_pool.as_deref()
        ),
        ("db-restored", None, Some("gold"))
    );
    let mut status = serde_json::to_value(done.status.clone().expect("status")).expect("json");
    // The Go restore's own times, carried over (seeded ten minutes apart, an hour ago).
    let mut time = |key: &str| -> jiff::Timestamp {
        let value = status[key].take();
        value.as_str().expect(key).parse().expect(key)
    };
    let (started, completed) = (time("startedAt"), time("completedAt"));
    assert_eq!(completed.duration_since(started).as_secs(), 600);
    assert_eq!(
        status,
        serde_json::json!({"phase": "Succeeded", "step": {"state": "Binding"}, "clusterID": "c-1",
            "backupID": "b-2", "restoredLvolID": "l-restored", "persistentVolumeName": "restore-1",
            "claimName": "db-restored", "claimNamespace": NS, "message": "restore Done",
            "startedAt": null, "completedAt": null})
    );
    let failed = records
        .get(RESTORE_FAILED)
        .await
        .expect("the failed restore");
    assert!(failed.is_historical_record());
    let status = failed.status.expect("status");
    assert_eq!(
        serde_json::to_value(status.phase).expect("json"),
        serde_json::json!("Failed")
    );
    assert_eq!(
        failed.spec.restore.expect("restore").claim_name,
        format!("{RESTORE_FAILED}-restored")
    );

    let backups = Api::<StorageBackup>::namespaced(admin.clone(), NS);
    let request = backups.get(BACKUP).await.expect("the backup at v1alpha2");
    assert_eq!(
        request.spec.source.as_ref().map(|s| s.claim_name.as_str()),
        Some(BACKED_UP_CLAIMS[0])
    );
    assert!(request.spec.cluster_ref.is_none());
    let status = request.status.clone().expect("status");
    assert_eq!(status.phase, BackupPhase::Available);
    assert_eq!(status.cluster_id.as_deref(), Some("c-1"));
    let copy = status.backup.expect("backup");
    assert_eq!(
        (
            copy.backup_id.as_str(),
            copy.s3_id,
            copy.previous_backup_id.as_deref(),
            copy.size
        ),
        ("b-2", Some(2), Some("b-1"), Some(1 << 30))
    );
    let source = status.source.expect("source");
    assert_eq!(
        (
            source.persistent_volume_name.as_deref(),
            source.pool_name.as_deref(),
            source.lvol_id.as_deref()
        ),
        (Some("pvc-db"), Some("gold"), Some("l-1"))
    );
    // The record BackupImport made names a backup this fleet's control plane does not
    // hold (the fixture imported nothing into it): the operator's mirror removes a record
    // whose backup its cluster does not report, as it does any backup that left the store.
    until("the imported record removed by the mirror", async || {
        backups
            .get_opt(&format!("{BACKUP_IMPORT}-imported"))
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    // Back at v1alpha1, each says what the Go operator wrote.
    for (name, written) in [(BACKUP.to_owned(), go_installation::backup())] {
        let old = v1alpha1(admin, "StorageBackup", "storagebackups")
            .get(&name)
            .await
            .expect("the backup at v1alpha1");
        assert_eq!(old.data["spec"], written["spec"], "{name}");
        assert_eq!(old.data["status"], written["status"], "{name}");
    }
}

//! A TestFailover drill end to end on a hub whose API server also plays both sites (the
//! OCM stand-in's work agent), with one sbsim serving both sites' clusters: a volume of
//! site A replicates to site B, and the drill clones B's latest recovery point into a
//! bubble on B without a single write against A, then takes it all away when deleted.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use serde_json::json;
use simplyblock_api::test_failover::{FailoverPhase, TEST_FAILOVER_FINALIZER, TestFailover};
use simplyblock_controlplane::{
    Client, ClusterCreate, ClusterStatus, NodeStatus, PoolCreate, ReplicationStart,
    ReplicationTargetCreate, StorageNodeAdd, Uuid, VolumeCreate,
};
use simplyblock_operator::context::{Context, Shutdown};
use simplyblock_operator::dr::bubble::object_name;
use simplyblock_testenv::TestEnv;
use simplyblock_testenv::ocm;

use crate::support::{
    PATIENCE, Sbsim, call_log, operator_kube_on, own_api_server, raised, sbsim_tls, tls_cp_client,
    until, until_explained,
};

/// One site: its control-plane cluster and pool, and its secret.
struct Site {
    cluster: Uuid,
    pool: Uuid,
    secret: String,
}

async fn site(cp: &Client, name: &str, workers: &[&str]) -> Site {
    let cluster = cp
        .create_cluster(&ClusterCreate::new(name, 10, 4))
        .await
        .expect("cluster");
    for w in workers {
        cp.add_storage_node(
            cluster.id,
            &StorageNodeAdd::new(
                format!("{w}.simplyblock-storage-node-api.simplyblock.svc.cluster.local:5000"),
                "eth0",
            ),
        )
        .await
        .expect("node add");
    }
    until(&format!("the nodes of {name} online"), async || {
        let nodes = cp.list_storage_nodes(cluster.id).await.ok()?;
        (nodes.len() == workers.len() && nodes.iter().all(|n| n.status == NodeStatus::Online))
            .then_some(())
    })
    .await;
    cp.activate_cluster(cluster.id).await.expect("activate");
    until(&format!("{name} active"), async || {
        (cp.get_cluster(cluster.id).await.ok()?.status == ClusterStatus::Active).then_some(())
    })
    .await;
    let pool = cp
        .create_pool(
            cluster.id,
            &PoolCreate {
                name: format!("{name}-pool"),
                ..Default::default()
            },
        )
        .await
        .expect("pool")
        .id;
    let secret = cp
        .get_cluster(cluster.id)
        .await
        .expect("cluster")
        .secret
        .expose()
        .to_owned();
    Site {
        cluster: cluster.id,
        pool,
        secret,
    }
}

/// The hub: an API server of its own with the OCM CRDs, both sites as managed clusters
/// served by the work agent; sbsim with sites A (w1, w2) and B (w3, w4) replicating A to
/// B. No operator runs until a test starts one.
struct Drill {
    env: TestEnv,
    kube: kube::Client,
    sim: Sbsim,
    ca_pem: String,
    a: Site,
    b: Site,
    shutdown: Shutdown,
    token_file: std::path::PathBuf,
    _dir: tempfile::TempDir,
    _agent: simplyblock_testenv::standin::StandIn,
}

const NS: &str = "tfo";
const APPS: &str = "tfo-apps";

async fn hub() -> Drill {
    let (env, kube) = own_api_server(NS).await;
    env.install_crds(&ocm::hub_crds()).await.expect("OCM CRDs");
    for cluster in ["site-a", "site-b"] {
        ocm::add_managed_cluster(&kube, cluster)
            .await
            .expect("managed cluster");
    }
    let agent = ocm::work_agent(kube.clone());
    let (sim, ca_pem) = sbsim_tls("", 4).await;
    let a = site(&sim.cp, "site-a", &["w1", "w2"]).await;
    let b = site(&sim.cp, "site-b", &["w3", "w4"]).await;
    sim.cp
        .create_replication_target(
            a.cluster,
            &ReplicationTargetCreate {
                target_name: "to-site-b".into(),
                target_cluster_id: b.cluster,
                target_pool_id: Some(b.pool),
                timeout_sec: None,
            },
        )
        .await
        .expect("replication target");
    // Each site's secret, as the hub's administrator stores them beside the drills.
    let secrets: Api<Secret> = Api::namespaced(kube.clone(), NS);
    for (name, site) in [("site-a", &a), ("site-b", &b)] {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": format!("simplyblock-cluster-{name}")},
            "stringData": {"secret": site.secret},
        }))
        .expect("secret");
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("cluster secret");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, crate::support::TOKEN).expect("token");
    Drill {
        env,
        kube,
        sim,
        ca_pem,
        a,
        b,
        shutdown: Shutdown::new(),
        token_file,
        _dir: dir,
        _agent: agent,
    }
}

impl Drill {
    /// The operator's hub controllers in this process, as the chart's account.
    async fn start_operator(&self) {
        let ctx = Arc::new(
            // A token sbsim refuses: every call the drill makes must carry a site's own
            // secret.
            Context::new(
                operator_kube_on(&self.env, NS).await,
                tls_cp_client(self.sim.server.addr, &self.ca_pem, "not-a-token"),
                self.sim.endpoint.clone(),
                NS.into(),
            )
            .with_shutdown(self.shutdown.clone())
            .with_hub_first_retry(Duration::from_millis(100)),
        );
        tokio::spawn(simplyblock_operator::dr::run(ctx));
    }
}

impl Drop for Drill {
    fn drop(&mut self) {
        self.shutdown.fire();
    }
}

/// A volume on site A replicating to site B, with the claim and PersistentVolume that
/// hold it on site A; returns the volume and the replicated snapshot that landed on B.
async fn protected_claim(d: &Drill) -> (Uuid, simplyblock_controlplane::ReplicatedSnapshot) {
    let cp = &d.sim.cp;
    let volume = cp
        .create_volume(
            d.a.cluster,
            d.a.pool,
            &VolumeCreate::new("tfo-data", 1 << 30),
        )
        .await
        .expect("volume");
    cp.start_volume_replication(
        d.a.cluster,
        d.a.pool,
        volume,
        &ReplicationStart {
            replication_cluster_id: Some(d.b.cluster),
            ..Default::default()
        },
    )
    .await
    .expect("start replication");
    cp.volume_replication_action(d.a.cluster, d.a.pool, volume, "trigger")
        .await
        .expect("trigger");
    let point = until("a replicated snapshot on site B", async || {
        cp.latest_replicated_snapshot(d.a.cluster, volume)
            .await
            .ok()
            .flatten()
    })
    .await;

    simplyblock_testenv::create_namespace(&d.kube, APPS)
        .await
        .expect("namespace");
    let handle = format!("{}:{}:{volume}", d.a.cluster, d.a.pool);
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "tfo-source-pv"},
        "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": "simplyblock", "volumeMode": "Block",
            "persistentVolumeReclaimPolicy": "Delete",
            "claimRef": {"namespace": APPS, "name": "data"},
            "csi": {"driver": "csi.simplyblock.io", "volumeHandle": handle, "fsType": "xfs",
                    "volumeAttributes": {"uuid": volume.to_string(), "nqn": "nqn.source",
                                         "targetType": "tcp",
                                         "csi.storage.k8s.io/pvc/name": "data"}},
        },
    }))
    .expect("pv");
    Api::<PersistentVolume>::all(d.kube.clone())
        .create(&PostParams::default(), &pv)
        .await
        .expect("source pv");
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "simplyblock",
                 "volumeMode": "Block", "resources": {"requests": {"storage": "1Gi"}},
                 "volumeName": "tfo-source-pv"},
    }))
    .expect("pvc");
    Api::<PersistentVolumeClaim>::namespaced(d.kube.clone(), APPS)
        .create(&PostParams::default(), &pvc)
        .await
        .expect("source pvc");
    ocm::bind(&d.kube, APPS, "data").await.expect("bound");
    (volume, point)
}

fn drill_object(name: &str) -> TestFailover {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "TestFailover",
        "metadata": {"name": name},
        "spec": {"scope": "Volume", "sourceCluster": "site-a", "sourceNamespace": APPS,
                 "sourceRef": "data", "bubbleCluster": "site-b",
                 "bubbleNamespace": "tfo-bubble"},
    }))
    .expect("drill")
}

/// The writes sbsim received after the first `from` calls, as `METHOD path`.
async fn writes_since(cp: &Client, from: usize) -> Vec<String> {
    call_log(cp)
        .await
        .into_iter()
        .skip(from)
        .filter(|c| c["method"] != "GET")
        .map(|c| {
            format!(
                "{} {}",
                c["method"].as_str().unwrap_or(""),
                c["path"].as_str().unwrap_or("")
            )
        })
        .collect()
}

async fn phase(drills: &Api<TestFailover>, name: &str, want: FailoverPhase) -> TestFailover {
    let last = std::sync::Mutex::new(None);
    until_explained(
        &format!("drill {name} {want:?}"),
        PATIENCE,
        async || {
            let drill = drills.get(name).await.ok()?;
            *last.lock().expect("lock") = drill.status.clone();
            (drill.status.as_ref()?.phase == want).then_some(drill)
        },
        || format!("last seen {:?}", last.lock().expect("lock")),
    )
    .await
}

#[tokio::test]
async fn a_drill_clones_the_replicated_point_into_a_bubble_and_leaves_the_source_alone() {
    let d = hub().await;
    d.start_operator().await;
    let (volume, point) = protected_claim(&d).await;
    let from = call_log(&d.sim.cp).await.len();

    let drills: Api<TestFailover> = Api::namespaced(d.kube.clone(), NS);
    drills
        .create(&PostParams::default(), &drill_object("rehearsal"))
        .await
        .expect("the drill is created");
    let ready = phase(&drills, "rehearsal", FailoverPhase::Ready).await;
    let status = ready.status.clone().expect("status");
    assert!(
        ready
            .finalizers()
            .iter()
            .any(|f| f == TEST_FAILOVER_FINALIZER)
    );
    let slot = &status.clones[0];
    assert_eq!(
        slot.source_handle.as_deref(),
        Some(format!("{}:{}:{volume}", d.a.cluster, d.a.pool).as_str())
    );
    assert_eq!(slot.source_fs_type.as_deref(), Some("xfs"));
    assert_eq!(slot.source_volume_mode.as_deref(), Some("Block"));
    assert!(!slot.snapshot_taken);

    // The clone is on site B, made from a snapshot site B holds of the replica.
    let recorded = slot.snapshot_id.as_deref().expect("the point");
    let (snap_cluster, snap_pool, snapshot) = {
        let parts: Vec<Uuid> = recorded
            .split(':')
            .map(|p| p.parse().expect("a uuid"))
            .collect();
        (parts[0], parts[1], parts[2])
    };
    assert_eq!((snap_cluster, snap_pool), (d.b.cluster, d.b.pool));
    let report = status.report.clone().expect("a report");
    assert_eq!(report.recovery_point, Some(snapshot.to_string()));
    assert_eq!(report.bubble_cluster.as_deref(), Some("site-b"));
    assert_eq!(report.invariants_held, Some(true));
    assert!(report.recovery_point_age_seconds.is_some());
    assert!(status.ready_at.is_some() && status.started_at.is_some());
    // Cycles go on landing while the drill runs: the point is one of them, a snapshot on
    // site B of the volume's replica.
    let replica = d
        .sim
        .cp
        .volume_replication(d.a.cluster, d.a.pool, volume)
        .await
        .expect("the relationship")
        .target_lvol_id
        .expect("a replica");
    assert_eq!(point.lvol_id, replica);
    let taken = d
        .sim
        .cp
        .get_snapshot(d.b.cluster, d.b.pool, snapshot)
        .await
        .expect("the point is a snapshot of site B");
    assert!(
        taken
            .lvol
            .as_deref()
            .is_some_and(|parent| parent.contains(&replica.to_string())),
        "the point is a snapshot of the replica {replica}: {:?}",
        taken.lvol
    );
    let clone_id: Uuid = slot
        .clone_id
        .as_deref()
        .and_then(|h| h.rsplit(':').next())
        .expect("the clone")
        .parse()
        .expect("a uuid");
    let clone = d
        .sim
        .cp
        .get_volume(d.b.cluster, d.b.pool, clone_id)
        .await
        .expect("the clone is a volume of site B");
    assert_eq!(clone.name, object_name(NS, "rehearsal", "clone"));
    assert!(
        clone
            .cloned_from
            .as_deref()
            .is_some_and(|from| from.contains(&snapshot.to_string())),
        "the clone is of the recovery point: {:?}",
        clone.cloned_from
    );

    // The bubble on site B: a claim bound to a static volume carrying the source's
    // filesystem type and mode.
    let pv = Api::<PersistentVolume>::all(d.kube.clone())
        .get(&object_name(NS, "rehearsal", "pv"))
        .await
        .expect("the bubble's volume");
    let spec = pv.spec.clone().expect("spec");
    let csi = spec.csi.clone().expect("csi");
    assert_eq!(csi.volume_handle, slot.clone_id.clone().expect("clone"));
    assert_eq!(csi.fs_type.as_deref(), Some("xfs"));
    assert_eq!(spec.volume_mode.as_deref(), Some("Block"));
    assert_eq!(
        csi.volume_attributes
            .unwrap_or_default()
            .keys()
            .cloned()
            .collect::<Vec<_>>(),
        ["targetType"],
        "only attributes that do not name the source"
    );
    let claim = Api::<PersistentVolumeClaim>::namespaced(d.kube.clone(), "tfo-bubble")
        .get("data")
        .await
        .expect("the bubble's claim");
    assert_eq!(claim.status.and_then(|s| s.phase).as_deref(), Some("Bound"));
    assert_eq!(
        claim.spec.and_then(|s| s.volume_mode).as_deref(),
        Some("Block")
    );
    for reason in [
        "DrillStarted",
        "SourceResolved",
        "RecoveryPointResolved",
        "CloneBuilt",
        "BubbleReady",
    ] {
        raised(&d.kube, NS, Some("rehearsal"), reason).await;
    }

    // Site A saw reads only: the drill wrote nothing there.
    let writes = writes_since(&d.sim.cp, from).await;
    let on_a = format!("/api/v2/clusters/{}/", d.a.cluster);
    assert!(
        writes.iter().all(|w| !w.contains(&on_a)),
        "the drill wrote to site A: {writes:?}"
    );
    assert_eq!(
        writes
            .iter()
            .filter(|w| w.starts_with("POST") && w.contains(&format!("/clusters/{}/", d.b.cluster)))
            .count(),
        1,
        "one clone was made on site B: {writes:?}"
    );

    // Deleting the drill takes the bubble, the clone and the views away, then the drill.
    drills
        .delete("rehearsal", &DeleteParams::default())
        .await
        .expect("deleted");
    until("the drill gone", async || {
        drills
            .get_opt("rehearsal")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        d.sim
            .cp
            .list_volumes(d.b.cluster, d.b.pool)
            .await
            .expect("site B's volumes")
            .iter()
            .all(|v| v.id != clone_id),
        "the clone is deleted"
    );
    let works: Api<DynamicObject> =
        Api::namespaced_with(d.kube.clone(), "site-b", &ocm::manifest_work_resource());
    assert!(
        works
            .list(&Default::default())
            .await
            .expect("works")
            .items
            .is_empty()
    );
    let views: Api<DynamicObject> = Api::namespaced_with(
        d.kube.clone(),
        "site-a",
        &ocm::managed_cluster_view_resource(),
    );
    assert!(
        views
            .list(&Default::default())
            .await
            .expect("views")
            .items
            .is_empty()
    );
    assert!(
        Api::<PersistentVolume>::all(d.kube.clone())
            .get_opt(&object_name(NS, "rehearsal", "pv"))
            .await
            .expect("readable")
            .is_none()
    );
    assert!(
        Api::<Namespace>::all(d.kube.clone())
            .get_opt("tfo-bubble")
            .await
            .expect("readable")
            .is_none()
    );
    // The source is where it was, and its volume on site A too.
    d.sim
        .cp
        .get_volume(d.a.cluster, d.a.pool, volume)
        .await
        .expect("the source volume stays");
    let writes = writes_since(&d.sim.cp, from).await;
    assert!(writes.iter().all(|w| !w.contains(&on_a)), "{writes:?}");
}

/// The operator process killed right after it made the clone, before any pass saw it: the
/// restarted operator finds the clone by its name and makes no second one.
#[tokio::test]
async fn a_drill_killed_right_after_its_clone_makes_no_second_clone() {
    use std::os::unix::process::ExitStatusExt;

    let d = hub().await;
    crate::support::managed_control_plane(&d.kube, NS, &d.ca_pem).await;
    protected_claim(&d).await;
    let drills: Api<TestFailover> = Api::namespaced(d.kube.clone(), NS);
    drills
        .create(&PostParams::default(), &drill_object("killed"))
        .await
        .expect("the drill is created");

    let point = simplyblock_operator::dr::test_failover::clone_point();
    let mut child = crate::support::operator_command(&d.env, d.sim.server.addr, &d.token_file, NS)
        .arg("--metrics-addr=127.0.0.1:0")
        .env(simplyblock_operator::crash::ENV, &point)
        .spawn()
        .expect("the operator starts");
    let status = until(&format!("the operator aborted at {point}"), async || {
        child.try_wait().expect("the operator process")
    })
    .await;
    assert_eq!(status.signal(), Some(crate::crash::SIGABRT), "{status}");

    let name = object_name(NS, "killed", "clone");
    let named = async || -> Vec<Uuid> {
        d.sim
            .cp
            .list_volumes(d.b.cluster, d.b.pool)
            .await
            .expect("site B's volumes")
            .into_iter()
            .filter(|v| v.name == name)
            .map(|v| v.id)
            .collect()
    };
    let made = named().await;
    assert_eq!(made.len(), 1, "the clone was made before the kill");
    let killed = drills.get("killed").await.expect("the drill");
    let status = killed.status.expect("status");
    assert_eq!(status.step.state.as_deref(), Some("Cloning"));
    assert!(
        status.clones.iter().all(|c| c.clone_id.is_none()),
        "the clone is not on record"
    );

    d.start_operator().await;
    let ready = phase(&drills, "killed", FailoverPhase::Ready).await;
    assert_eq!(named().await, made, "no second clone");
    let recorded = ready.status.expect("status").clones[0]
        .clone_id
        .clone()
        .expect("the clone on record");
    assert!(recorded.ends_with(&made[0].to_string()), "{recorded}");
    let volumes = format!(
        "/api/v2/clusters/{}/storage-pools/{}/volumes/",
        d.b.cluster, d.b.pool
    );
    let clone_calls = call_log(&d.sim.cp)
        .await
        .into_iter()
        .filter(|c| c["method"] == "POST" && c["path"] == volumes.as_str())
        .count();
    assert_eq!(clone_calls, 1, "one clone call on site B in all");

    drills
        .delete("killed", &DeleteParams::default())
        .await
        .expect("deleted");
    until("the drill gone", async || {
        drills.get_opt("killed").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(named().await.is_empty(), "the clone is deleted");
}

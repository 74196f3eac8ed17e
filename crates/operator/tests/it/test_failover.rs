//! A TestFailover drill end to end on a hub whose API server also plays both sites (the
//! OCM stand-in's work agent), with one sbsim serving both sites' clusters: a volume of
//! site A replicates to site B, and the drill clones B's latest recovery point into a
//! bubble on B without a single write against A, then takes it all away when deleted. A
//! consistency group of site A replicating to B is drilled the same way, every member
//! from one generation.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use simplyblock_api::StorageCluster;
use simplyblock_api::test_failover::{FailoverPhase, TEST_FAILOVER_FINALIZER, TestFailover};
use simplyblock_controlplane::{
    Client, ClusterCreate, ClusterStatus, NodeStatus, PoolCreate, ReplicationPolicyCreate,
    ReplicationStart, ReplicationTargetCreate, StorageNodeAdd, Uuid, VolumeCreate,
};
use simplyblock_operator::dr::bubble::{member_object_name, object_name};
use simplyblock_operator::runtime::context::{Context, Shutdown};
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
    /// Site A's replication target, site B.
    target: Uuid,
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
    let target = sim
        .cp
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
        .expect("replication target")
        .id;
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
        target,
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
    simplyblock_testenv::create_namespace(&d.kube, APPS)
        .await
        .expect("namespace");
    protected(d, "data", "tfo-source-pv").await
}

/// The claim `claim` in APPS (which exists), held by `pv` of a site A volume replicating
/// to site B; returns the volume and its first replicated snapshot.
async fn protected(
    d: &Drill,
    claim: &str,
    pv: &str,
) -> (Uuid, simplyblock_controlplane::ReplicatedSnapshot) {
    let cp = &d.sim.cp;
    let volume = cp
        .create_volume(
            d.a.cluster,
            d.a.pool,
            &VolumeCreate::new(format!("tfo-{claim}"), 1 << 30),
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
    hold(d, claim, pv, volume).await;
    (volume, point)
}

/// The claim `claim` in APPS bound to the PersistentVolume `pv` of site A's `volume`, as
/// the CSI driver leaves them: xfs on a block device.
async fn hold(d: &Drill, claim: &str, pv: &str, volume: Uuid) {
    let handle = format!("{}:{}:{volume}", d.a.cluster, d.a.pool);
    let object: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": pv},
        "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": "simplyblock", "volumeMode": "Block",
            "persistentVolumeReclaimPolicy": "Delete",
            "claimRef": {"namespace": APPS, "name": claim},
            "csi": {"driver": "csi.simplyblock.io", "volumeHandle": handle, "fsType": "xfs",
                    "volumeAttributes": {"uuid": volume.to_string(), "nqn": "nqn.source",
                                         "targetType": "tcp",
                                         "csi.storage.k8s.io/pvc/name": claim}},
        },
    }))
    .expect("pv");
    Api::<PersistentVolume>::all(d.kube.clone())
        .create(&PostParams::default(), &object)
        .await
        .expect("source pv");
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": claim},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "simplyblock",
                 "volumeMode": "Block", "resources": {"requests": {"storage": "1Gi"}},
                 "volumeName": pv},
    }))
    .expect("pvc");
    Api::<PersistentVolumeClaim>::namespaced(d.kube.clone(), APPS)
        .create(&PostParams::default(), &pvc)
        .await
        .expect("source pvc");
    ocm::bind(&d.kube, APPS, claim).await.expect("bound");
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
    writes(&call_log(cp).await[from..])
}

/// The writes among `calls`, as `METHOD path`.
fn writes(calls: &[Value]) -> Vec<String> {
    calls
        .iter()
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

/// Whether sbsim carried `call` out. A refused clone made nothing: under load a point can
/// be removed by retention before its clone, and the drill then resolves the latest again
/// (the plan's tests).
fn carried_out(call: &Value) -> bool {
    call["status"]
        .as_u64()
        .is_some_and(|s| (200..300).contains(&s))
}

/// Waits for every event a drill raises on its way to Ready.
async fn raised_on_the_way_to_ready(d: &Drill, drill: &str) {
    for reason in [
        "DrillStarted",
        "SourceResolved",
        "RecoveryPointResolved",
        "CloneBuilt",
        "BubbleReady",
    ] {
        raised(&d.kube, NS, Some(drill), reason).await;
    }
}

/// The writes sbsim received since `from`: none to site A, and `clones` creates on site B.
/// Returns the prefix of site A's paths, for the checks that follow.
async fn wrote_only_clones(d: &Drill, from: usize, clones: usize) -> String {
    let calls = call_log(&d.sim.cp).await.split_off(from);
    let writes = writes(&calls);
    let on_a = format!("/api/v2/clusters/{}/", d.a.cluster);
    assert!(
        writes.iter().all(|w| !w.contains(&on_a)),
        "the drill wrote to site A: {writes:?}"
    );
    let on_b = format!("/clusters/{}/", d.b.cluster);
    let made = calls.iter().filter(|c| {
        c["method"] == "POST"
            && c["path"].as_str().is_some_and(|p| p.contains(&on_b))
            && carried_out(c)
    });
    assert_eq!(
        made.count(),
        clones,
        "one clone per source volume on site B: {writes:?}"
    );
    on_a
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
    crate::kubectl::ready_on(
        d.env.kubeconfig_path(),
        &drills,
        "testfailovers.storage.simplyblock.io",
        "rehearsal",
    )
    .await;
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
    raised_on_the_way_to_ready(&d, "rehearsal").await;

    // Site A saw reads only: the drill wrote nothing there.
    let on_a = wrote_only_clones(&d, from, 1).await;

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
        .env(simplyblock_operator::runtime::crash::ENV, &point)
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
        .collect::<Vec<_>>();
    let made_calls = clone_calls.iter().filter(|c| carried_out(c)).count();
    assert_eq!(
        made_calls, 1,
        "one clone made on site B in all: {clone_calls:#?}"
    );

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

/// The consistency group the group drills clone.
const GROUP: &str = "app";

/// Two volumes of site A in the consistency group [`GROUP`], each held by a claim in APPS,
/// replicating to site B under one policy; returns the members (by id) with their claims
/// and the policy, once a generation of the group has landed on B.
async fn protected_group(d: &Drill) -> (Vec<(Uuid, &'static str)>, Uuid) {
    let cp = &d.sim.cp;
    let policy = cp
        .create_replication_policy(
            d.a.cluster,
            &ReplicationPolicyCreate {
                policy_name: "app-to-site-b".into(),
                target_id: d.target,
                interval_min: 1,
                mode: None,
                keep_replicated: None,
            },
        )
        .await
        .expect("policy")
        .id;
    simplyblock_testenv::create_namespace(&d.kube, APPS)
        .await
        .expect("namespace");
    let mut members = Vec::new();
    for (name, claim) in [("app-db", "db"), ("app-log", "log")] {
        let volume = cp
            .create_volume(
                d.a.cluster,
                d.a.pool,
                &VolumeCreate {
                    consistency_group: Some(GROUP.into()),
                    pvc_name: Some(claim.into()),
                    ..VolumeCreate::new(name, 1 << 30)
                },
            )
            .await
            .expect("member");
        hold(d, claim, &format!("tfo-{claim}-pv"), volume).await;
        members.push((volume, claim));
    }
    members.sort();
    let group = cp
        .find_consistency_group(d.a.cluster, GROUP)
        .await
        .expect("groups")
        .expect("the group");
    cp.set_group_replication(d.a.cluster, group.id, Some(policy))
        .await
        .expect("attach the policy");
    until("a generation of the group on site B", async || {
        cp.latest_replicated_generation(d.a.cluster, policy)
            .await
            .ok()
            .flatten()
    })
    .await;
    (members, policy)
}

/// The hub's StorageCluster `name` of site A: what names a source cluster's control-plane
/// id to a Group drill.
async fn storage_cluster(d: &Drill, name: &str, id: Uuid) {
    let clusters: Api<StorageCluster> = Api::namespaced(d.kube.clone(), NS);
    let cluster: StorageCluster = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
        "metadata": {"name": name},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 4,
                 "stripe": {"dataChunks": 1, "parityChunks": 1}},
    }))
    .expect("cluster");
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .expect("the StorageCluster");
    clusters
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"uuid": id.to_string()}})),
        )
        .await
        .expect("its control-plane id");
}

fn group_drill(name: &str, group: &str, source_cluster: &str) -> TestFailover {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "TestFailover",
        "metadata": {"name": name},
        "spec": {"scope": "Group", "sourceCluster": source_cluster, "sourceNamespace": APPS,
                 "sourceRef": group, "bubbleCluster": "site-b",
                 "bubbleNamespace": "tfo-group-bubble"},
    }))
    .expect("drill")
}

/// A Group drill clones every member of the group from one replicated generation into a
/// bubble on site B, reading site A only, and takes it all away when deleted.
#[tokio::test]
async fn a_group_drill_clones_every_member_from_one_generation_and_leaves_the_source_alone() {
    let d = hub().await;
    d.start_operator().await;
    let (members, policy) = protected_group(&d).await;
    storage_cluster(&d, "site-a", d.a.cluster).await;
    // Sim time stands still from here: no further generation lands, so the latest one is
    // the one the drill must resolve. Work already due at the freeze lands in the engine's
    // next pass: wait for two, so one began after the freeze.
    let sim = &d.sim.server.sim;
    sim.clock.set_scale(0.0);
    let passes = || sim.engine_passes.load(std::sync::atomic::Ordering::Relaxed);
    let from = passes();
    until("two passes of sbsim's engine", async || {
        sim.wake.notify_one();
        (passes() >= from + 2).then_some(())
    })
    .await;
    let generation = d
        .sim
        .cp
        .latest_replicated_generation(d.a.cluster, policy)
        .await
        .expect("the latest generation")
        .expect("a generation landed");
    assert_eq!(generation.members.len(), 2);
    let from = call_log(&d.sim.cp).await.len();

    let drills: Api<TestFailover> = Api::namespaced(d.kube.clone(), NS);
    drills
        .create(
            &PostParams::default(),
            &group_drill("group-rehearsal", GROUP, "site-a"),
        )
        .await
        .expect("the drill is created");
    let ready = phase(&drills, "group-rehearsal", FailoverPhase::Ready).await;
    let status = ready.status.clone().expect("status");
    let report = status.report.clone().expect("a report");
    assert_eq!(
        report.recovery_point,
        Some(format!("generation {}", generation.group_seq))
    );
    assert_eq!(report.bubble_cluster.as_deref(), Some("site-b"));
    assert_eq!(report.invariants_held, Some(true));

    // One slot per member, each cloned on site B from that member's snapshot of the same
    // generation.
    assert_eq!(status.clones.len(), members.len(), "{:?}", status.clones);
    let pvs = Api::<PersistentVolume>::all(d.kube.clone());
    let bubble_claims =
        Api::<PersistentVolumeClaim>::namespaced(d.kube.clone(), "tfo-group-bubble");
    let mut clones = Vec::new();
    for (member, claim) in &members {
        let slot = status
            .clones
            .iter()
            .find(|s| s.source_ref == member.to_string())
            .unwrap_or_else(|| panic!("a slot for member {member}: {:?}", status.clones));
        assert_eq!(
            slot.source_handle.as_deref(),
            Some(format!("{}:{}:{member}", d.a.cluster, d.a.pool).as_str())
        );
        assert_eq!(slot.pvc_name.as_deref(), Some(*claim));
        assert_eq!(slot.source_fs_type.as_deref(), Some("xfs"));
        assert_eq!(slot.source_volume_mode.as_deref(), Some("Block"));
        assert!(!slot.snapshot_taken);
        let landed = generation
            .members
            .iter()
            .find(|m| m.source_lvol_id == *member)
            .expect("the generation holds the member");
        assert_eq!(landed.group_seq, generation.group_seq);
        assert_eq!((landed.cluster_id, landed.pool_id), (d.b.cluster, d.b.pool));
        assert_eq!(
            slot.snapshot_id.as_deref(),
            Some(format!("{}:{}:{}", d.b.cluster, d.b.pool, landed.snapshot_id).as_str()),
            "member {member} is cloned from its snapshot of generation {}",
            generation.group_seq
        );
        let clone_handle = slot.clone_id.clone().expect("the clone");
        let clone_id: Uuid = clone_handle
            .rsplit(':')
            .next()
            .and_then(|id| id.parse().ok())
            .expect("a uuid");
        let clone = d
            .sim
            .cp
            .get_volume(d.b.cluster, d.b.pool, clone_id)
            .await
            .expect("the clone is a volume of site B");
        assert_eq!(
            clone.name,
            member_object_name(NS, "group-rehearsal", &member.to_string(), "clone")
        );
        assert!(
            clone
                .cloned_from
                .as_deref()
                .is_some_and(|from| from.contains(&landed.snapshot_id.to_string())),
            "the clone of {member} is of its snapshot {}: {:?}",
            landed.snapshot_id,
            clone.cloned_from
        );

        // In the bubble: the member's claim, bound to a static volume of the clone that
        // carries the members' filesystem type and mode.
        let pv_name = member_object_name(NS, "group-rehearsal", &member.to_string(), "pv");
        let pv = pvs.get(&pv_name).await.expect("the bubble's volume");
        let spec = pv.spec.clone().expect("spec");
        let csi = spec.csi.clone().expect("csi");
        assert_eq!(csi.volume_handle, clone_handle);
        assert_eq!(csi.fs_type.as_deref(), Some("xfs"));
        assert_eq!(spec.volume_mode.as_deref(), Some("Block"));
        let bound = bubble_claims.get(claim).await.expect("the bubble's claim");
        assert_eq!(bound.status.and_then(|s| s.phase).as_deref(), Some("Bound"));
        let claim_spec = bound.spec.expect("spec");
        assert_eq!(claim_spec.volume_name.as_deref(), Some(pv_name.as_str()));
        assert_eq!(claim_spec.volume_mode.as_deref(), Some("Block"));
        clones.push((clone_id, pv_name));
    }
    raised_on_the_way_to_ready(&d, "group-rehearsal").await;

    // Site A saw reads only; site B one clone per member.
    let on_a = wrote_only_clones(&d, from, members.len()).await;

    // Time runs again for the teardown, which takes the bubble, the clones and the views.
    d.sim.server.sim.clock.set_scale(1000.0);
    drills
        .delete("group-rehearsal", &DeleteParams::default())
        .await
        .expect("deleted");
    until("the drill gone", async || {
        drills
            .get_opt("group-rehearsal")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let left = d
        .sim
        .cp
        .list_volumes(d.b.cluster, d.b.pool)
        .await
        .expect("site B's volumes");
    for (clone_id, pv_name) in &clones {
        assert!(
            left.iter().all(|v| v.id != *clone_id),
            "clone {clone_id} is deleted"
        );
        assert!(
            pvs.get_opt(pv_name).await.expect("readable").is_none(),
            "{pv_name} is gone"
        );
    }
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
        Api::<Namespace>::all(d.kube.clone())
            .get_opt("tfo-group-bubble")
            .await
            .expect("readable")
            .is_none()
    );
    // The group is where it was, every member on site A.
    let open: Vec<Uuid> = {
        let group = d
            .sim
            .cp
            .find_consistency_group(d.a.cluster, GROUP)
            .await
            .expect("groups")
            .expect("the group stays");
        let mut ids: Vec<Uuid> = d
            .sim
            .cp
            .consistency_group_members(d.a.cluster, group.id)
            .await
            .expect("members")
            .into_iter()
            .filter(|m| m.is_open())
            .map(|m| m.lvol_id)
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(open, members.iter().map(|(id, _)| *id).collect::<Vec<_>>());
    let writes = writes_since(&d.sim.cp, from).await;
    assert!(writes.iter().all(|w| !w.contains(&on_a)), "{writes:?}");
}

/// Site A's secret stored under its control-plane id, for drills that name site A by it.
async fn secret_under_id(d: &Drill) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("simplyblock-cluster-{}", d.a.cluster)},
        "stringData": {"secret": d.a.secret},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(d.kube.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .expect("the secret under the id");
}

/// A Group drill naming a group its source cluster does not have fails, saying which.
#[tokio::test]
async fn a_group_drill_of_a_group_that_does_not_exist_fails_naming_it() {
    let d = hub().await;
    d.start_operator().await;
    secret_under_id(&d).await;
    let from = call_log(&d.sim.cp).await.len();
    let drills: Api<TestFailover> = Api::namespaced(d.kube.clone(), NS);
    drills
        .create(
            &PostParams::default(),
            &group_drill("no-group", "billing", &d.a.cluster.to_string()),
        )
        .await
        .expect("the drill is created");
    let failed = phase(&drills, "no-group", FailoverPhase::Failed).await;
    let message = failed.status.and_then(|s| s.message).expect("a message");
    assert!(
        message.contains("no consistency group named billing")
            && message.contains(&d.a.cluster.to_string()),
        "{message}"
    );
    raised(&d.kube, NS, Some("no-group"), "DrillFailed").await;
    let writes = writes_since(&d.sim.cp, from).await;
    assert!(
        writes.is_empty(),
        "a failed drill wrote nothing: {writes:?}"
    );
}

/// Claims are read through the source's ManagedCluster, which a control-plane id does not
/// name: a Group drill with both fails at once, saying how to name the source instead.
#[tokio::test]
async fn a_group_drill_by_cluster_id_with_a_source_namespace_fails_at_once() {
    let d = hub().await;
    d.start_operator().await;
    protected_group(&d).await;
    secret_under_id(&d).await;
    let drills: Api<TestFailover> = Api::namespaced(d.kube.clone(), NS);
    drills
        .create(
            &PostParams::default(),
            &group_drill("by-id", GROUP, &d.a.cluster.to_string()),
        )
        .await
        .expect("the drill is created");
    let failed = phase(&drills, "by-id", FailoverPhase::Failed).await;
    let message = failed.status.and_then(|s| s.message).expect("a message");
    assert!(
        message.contains("sourceNamespace") && message.contains("ManagedCluster"),
        "{message}"
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
}

/// A teardown that cannot finish (the bubble cluster's control plane refuses every
/// deletion) holds the drill and says why; marked `storage.simplyblock.io/force-delete`,
/// the drill goes, and a `ForcedRelease` warning names the clone left behind, which is
/// indeed still there.
#[tokio::test]
async fn a_drill_whose_teardown_cannot_finish_goes_when_forced_naming_what_is_left() {
    use simplyblock_api::keys::FORCE_DELETE_ANNOTATION;
    let d = hub().await;
    d.start_operator().await;
    protected_claim(&d).await;
    let drills: Api<TestFailover> = Api::namespaced(d.kube.clone(), NS);
    drills
        .create(&PostParams::default(), &drill_object("stuck"))
        .await
        .expect("the drill is created");
    let ready = phase(&drills, "stuck", FailoverPhase::Ready).await;
    let clone = ready.status.expect("status").clones[0]
        .clone_id
        .clone()
        .expect("a clone");
    let clone_id: Uuid = clone
        .rsplit(':')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("the clone's id");

    let r = d
        .sim
        .cp
        .raw(
            simplyblock_controlplane::Method::PUT,
            "/../../_sim/faults",
            &[],
            Some(&json!({"spec": "error:method=DELETE,status=503"})),
        )
        .await
        .expect("faults");
    assert!(r.status < 300, "faults: {}", r.status);
    drills
        .delete("stuck", &DeleteParams::default())
        .await
        .expect("deleted");
    until("the teardown to hold", async || {
        let message = drills.get_opt("stuck").await.ok()??.status?.message?;
        message.contains("teardown is holding").then_some(())
    })
    .await;

    drills
        .patch(
            "stuck",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {FORCE_DELETE_ANNOTATION: "true"}}})),
        )
        .await
        .expect("marked");
    until("the forced drill gone", async || {
        drills.get_opt("stuck").await.ok()?.is_none().then_some(())
    })
    .await;
    let said = crate::support::raised(&d.kube, NS, Some("stuck"), "ForcedRelease").await;
    assert!(
        said.iter().any(|m| m.contains(&clone)),
        "the event names the clone left: {said:?}"
    );
    d.sim
        .cp
        .get_volume(d.b.cluster, d.b.pool, clone_id)
        .await
        .expect("the clone the event names is left on site B");
}

/// The operator's admission webhooks on the hub, served as the chart's account; they
/// answer until the returned task is dropped with the test's runtime.
async fn serve_webhooks(d: &Drill) -> tokio::task::JoinHandle<()> {
    let operator = operator_kube_on(&d.env, NS).await;
    crate::support::serve_webhooks(&operator, NS, false).await
}

/// Applies `objects` (RBAC objects, accounts) as the admin.
async fn apply_all(kube: &kube::Client, objects: &[Value]) {
    for object in objects {
        let object: DynamicObject = serde_json::from_value(object.clone()).expect("object");
        let kind = object.types.clone().expect("types");
        let (group, version) = kind
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", kind.api_version.as_str()));
        let resource = kube::api::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            group, version, &kind.kind,
        ));
        let api: Api<DynamicObject> = match &object.metadata.namespace {
            Some(ns) => Api::namespaced_with(kube.clone(), ns, &resource),
            None => Api::all_with(kube.clone(), &resource),
        };
        api.create(&PostParams::default(), &object)
            .await
            .expect("created");
    }
}

/// A role of `rules` in `namespace` (cluster-wide when `None`) bound to the account.
fn grant(name: &str, namespace: Option<&str>, account: &str, rules: Value) -> [Value; 2] {
    let (role, binding) = match namespace {
        Some(_) => ("Role", "RoleBinding"),
        None => ("ClusterRole", "ClusterRoleBinding"),
    };
    let meta = |n: &str| match namespace {
        Some(ns) => json!({"name": n, "namespace": ns}),
        None => json!({"name": n}),
    };
    [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": role,
               "metadata": meta(name), "rules": rules}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": binding,
               "metadata": meta(name),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role, "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NS}]}),
    ]
}

/// Who may create drills is not who may read every claim: a requester without `get` on
/// the source claim is refused, the refusal naming that right; granted it, the same drill
/// is admitted.
#[tokio::test]
async fn a_requester_without_get_on_the_source_claim_may_not_create_a_drill() {
    let d = hub().await;
    let _webhooks = serve_webhooks(&d).await;
    simplyblock_testenv::create_namespace(&d.kube, APPS)
        .await
        .expect("namespace");
    let mut objects = vec![json!({"apiVersion": "v1", "kind": "ServiceAccount",
                                   "metadata": {"name": "rehearser", "namespace": NS}})];
    objects.extend(grant(
        "tfo-drills",
        Some(NS),
        "rehearser",
        json!([{"apiGroups": ["storage.simplyblock.io"], "resources": ["testfailovers"],
                "verbs": ["create", "get"]}]),
    ));
    objects.extend(grant(
        "tfo-bubble-claims",
        None,
        "rehearser",
        json!([{"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                "verbs": ["create"]}]),
    ));
    apply_all(&d.kube, &objects).await;
    let rehearser = d
        .env
        .service_account_client(NS, "rehearser")
        .await
        .expect("the requester's client");
    let drills: Api<TestFailover> = Api::namespaced(rehearser, NS);

    // The roles just bound reach the authorizer in a moment: the refusal that names only
    // the source claim's right is the settled answer.
    let wanted = format!(
        "system:serviceaccount:{NS}:rehearser may not get persistentvolumeclaim data in namespace {APPS}"
    );
    let refusal = until(
        "the refusal naming the source claim's right",
        async || match drills
            .create(&PostParams::default(), &drill_object("unseen"))
            .await
        {
            Err(kube::Error::Api(status))
                if status.code == 403
                    && status.message.contains(&wanted)
                    && !status.message.contains("may not create") =>
            {
                Some(status.message)
            }
            Ok(_) => panic!("a drill of a claim its requester may not read was admitted"),
            Err(_) => None,
        },
    )
    .await;
    assert!(
        refusal.contains("a drill reaches only what its requester may"),
        "{refusal}"
    );

    apply_all(
        &d.kube,
        &grant(
            "tfo-source-claim",
            Some(APPS),
            "rehearser",
            json!([{"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                    "resourceNames": ["data"], "verbs": ["get"]}]),
        ),
    )
    .await;
    until(
        "the drill admitted once its requester may read the claim",
        async || {
            drills
                .create(&PostParams::default(), &drill_object("seen"))
                .await
                .ok()
        },
    )
    .await;
}

/// A bubbleNamespace that already exists on the bubble cluster, made by someone else, is
/// not adopted: the drill fails before placing anything, and deleting the drill leaves
/// the namespace and what is in it.
#[tokio::test]
async fn an_existing_namespace_not_made_by_the_drill_is_refused_and_kept() {
    let d = hub().await;
    d.start_operator().await;
    protected_claim(&d).await;
    // Site B's namespace of that name, someone else's, with their claim in it.
    simplyblock_testenv::create_namespace(&d.kube, "tfo-bubble")
        .await
        .expect("the existing namespace");
    let theirs: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "theirs"},
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .expect("pvc");
    Api::<PersistentVolumeClaim>::namespaced(d.kube.clone(), "tfo-bubble")
        .create(&PostParams::default(), &theirs)
        .await
        .expect("their claim");

    let drills: Api<TestFailover> = Api::namespaced(d.kube.clone(), NS);
    drills
        .create(&PostParams::default(), &drill_object("intruder"))
        .await
        .expect("the drill is created");
    let failed = phase(&drills, "intruder", FailoverPhase::Failed).await;
    let message = failed.status.and_then(|s| s.message).unwrap_or_default();
    assert!(
        message.contains(
            "namespace tfo-bubble already exists on cluster site-b and was not made by this drill"
        ),
        "{message}"
    );
    let works: Api<DynamicObject> =
        Api::namespaced_with(d.kube.clone(), "site-b", &ocm::manifest_work_resource());
    assert!(
        works
            .get_opt(&object_name(NS, "intruder", "bubble"))
            .await
            .expect("works")
            .is_none(),
        "nothing was placed"
    );

    drills
        .delete("intruder", &DeleteParams::default())
        .await
        .expect("deleted");
    until("the drill torn down", async || {
        drills
            .get_opt("intruder")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let kept = Api::<Namespace>::all(d.kube.clone())
        .get("tfo-bubble")
        .await
        .expect("the namespace is kept");
    assert!(kept.metadata.deletion_timestamp.is_none());
    Api::<PersistentVolumeClaim>::namespaced(d.kube.clone(), "tfo-bubble")
        .get("theirs")
        .await
        .expect("their claim is kept");
}

/// Two drills without a bubbleNamespace each get a namespace of their own, labelled with
/// their identity, and tearing one down leaves the other's bubble whole.
#[tokio::test]
async fn two_drills_without_a_bubble_namespace_get_namespaces_of_their_own() {
    let d = hub().await;
    d.start_operator().await;
    protected_claim(&d).await;
    protected(&d, "logs", "tfo-logs-pv").await;
    let drills: Api<TestFailover> = Api::namespaced(d.kube.clone(), NS);
    for (name, claim) in [("first", "data"), ("second", "logs")] {
        let mut drill = drill_object(name);
        drill.spec.source_ref = claim.into();
        drill.spec.bubble_namespace = None;
        drills
            .create(&PostParams::default(), &drill)
            .await
            .expect("the drill is created");
    }
    let first = phase(&drills, "first", FailoverPhase::Ready).await;
    let second = phase(&drills, "second", FailoverPhase::Ready).await;
    let (ns1, ns2) = (first.bubble_namespace(), second.bubble_namespace());
    assert_ne!(ns1, ns2);
    let namespaces = Api::<Namespace>::all(d.kube.clone());
    for (drill, ns, claim) in [(&first, &ns1, "data"), (&second, &ns2, "logs")] {
        let made = namespaces.get(ns).await.expect("the drill's namespace");
        assert_eq!(
            made.labels()
                .get(simplyblock_api::test_failover::TEST_ID_LABEL)
                .map(String::as_str),
            drill.metadata.uid.as_deref(),
            "{ns}"
        );
        Api::<PersistentVolumeClaim>::namespaced(d.kube.clone(), ns)
            .get(claim)
            .await
            .expect("the drill's claim in its own namespace");
    }

    drills
        .delete("first", &DeleteParams::default())
        .await
        .expect("deleted");
    until("the first drill's namespace gone", async || {
        namespaces.get_opt(&ns1).await.ok()?.is_none().then_some(())
    })
    .await;
    let kept = namespaces
        .get(&ns2)
        .await
        .expect("the second bubble is kept");
    assert!(kept.metadata.deletion_timestamp.is_none());
    Api::<PersistentVolumeClaim>::namespaced(d.kube.clone(), &ns2)
        .get("logs")
        .await
        .expect("the second drill's claim is kept");
}

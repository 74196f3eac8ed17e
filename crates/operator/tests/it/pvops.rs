//! PersistentVolumeOps end to end on the real API server and sbsim: a subsystem of two
//! volumes moved to another node (the lock on both PersistentVolumes, the validation Job
//! on the consuming node, the continue sent once), a target that already holds the
//! volumes, an abort that cancels the backend migration, and a stale lock broken.

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_api::StorageNode;
use simplyblock_api::common::OpsPhase;
use simplyblock_api::keys::ACTIVE_OPS_ANNOTATION;
use simplyblock_api::persistent_volume_ops::PersistentVolumeOps;
use simplyblock_controlplane::{PoolCreate, Uuid, VolumeCreate};
use simplyblock_testenv::standin::StandIn;

use crate::support::{Harness, PATIENCE, harness_timed, raised, until, until_explained};

/// A subsystem of two volumes on one node, their PersistentVolumes (`<ns>-pv-a`,
/// `<ns>-pv-b`), a pod on `<ns>-k1` using the first one's claim, and a StorageNode `target`
/// for another node.
struct Setup {
    h: Harness,
    pvs: [String; 2],
    volumes: [Uuid; 2],
    source: Uuid,
    target: Uuid,
    _jobs: StandIn,
}

async fn setup(ns: &str, phase_ms: i64) -> Setup {
    let timings = simplyblock_simulator::Timings {
        migration_phase_ms: phase_ms,
        ..Default::default()
    };
    let h = harness_timed(ns, "", (1, 1), timings).await;
    h.activated().await;
    let nodes = h.cp.list_storage_nodes(h.uuid).await.expect("nodes");
    let (source, target) = (nodes[0].id, nodes[1].id);
    let pool =
        h.cp.create_pool(
            h.uuid,
            &PoolCreate {
                name: format!("{ns}-pool"),
                ..Default::default()
            },
        )
        .await
        .expect("pool")
        .id;
    let mut volumes = Vec::new();
    for i in 0..2 {
        let mut create = VolumeCreate::new(format!("{ns}-vol-{i}"), 1 << 30);
        create.max_namespace_per_subsys = Some(2);
        create.host_id = Some(source.to_string());
        volumes.push(
            h.cp.create_volume(h.uuid, pool, &create)
                .await
                .expect("volume"),
        );
    }
    let a = h.cp.get_volume(h.uuid, pool, volumes[0]).await.expect("a");
    let b = h.cp.get_volume(h.uuid, pool, volumes[1]).await.expect("b");
    assert_eq!(a.nqn, b.nqn, "the two volumes share a subsystem");
    let pvs = [format!("{ns}-pv-a"), format!("{ns}-pv-b")];
    let pv_api: Api<PersistentVolume> = Api::all(h.kube.clone());
    for (pv, vol) in pvs.iter().zip(&volumes) {
        let object: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": pv},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "claimRef": {"namespace": ns, "name": format!("claim-{pv}")},
                     "csi": {"driver": "csi.simplyblock.io",
                             "volumeHandle": format!("{}:{pool}:{vol}", h.uuid)}},
        }))
        .expect("pv");
        pv_api
            .create(&PostParams::default(), &object)
            .await
            .expect("PersistentVolume");
    }
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "consumer"},
        "spec": {"nodeName": format!("{ns}-k1"),
                 "containers": [{"name": "app", "image": "app"}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": format!("claim-{}", pvs[0])}}]},
    }))
    .expect("pod");
    Api::<Pod>::namespaced(h.kube.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    let worker = format!("{ns}-w2");
    let node: k8s_openapi::api::core::v1::Node =
        serde_json::from_value(json!({"metadata": {"name": worker}})).expect("node");
    Api::<k8s_openapi::api::core::v1::Node>::all(h.kube.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("worker Node");
    let sn: StorageNode = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageNode",
        "metadata": {"name": "target"},
        "spec": {"clusterRef": "sb", "workerNode": worker, "slot": 0,
                 "config": {"sizing": {"vcpuCount": 4, "minHugePagesSize": "4G"}}},
    }))
    .expect("storage node");
    let sns: Api<StorageNode> = Api::namespaced(h.kube.clone(), ns);
    sns.create(&PostParams::default(), &sn)
        .await
        .expect("StorageNode");
    sns.patch_status(
        "target",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"uuid": target.to_string()}})),
    )
    .await
    .expect("uuid");
    // What the consuming node's kubelet would report: every validation Job succeeds.
    let kube = h.kube.clone();
    let jobs_ns = ns.to_owned();
    let jobs = StandIn::every_pass(move || {
        let api: Api<Job> = Api::namespaced(kube.clone(), &jobs_ns);
        async move {
            let Ok(list) = api
                .list(
                    &ListParams::default()
                        .labels("storage.simplyblock.io/managed-by=persistentvolumeops"),
                )
                .await
            else {
                return;
            };
            for job in list {
                if job.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0) > 0 {
                    continue;
                }
                let name = job.metadata.name.clone().unwrap_or_default();
                let now = jiff::Timestamp::now().to_string();
                let status = json!({"status": {"succeeded": 1, "startTime": now, "completionTime": now,
                    "conditions": [{"type": "SuccessCriteriaMet", "status": "True"},
                                   {"type": "Complete", "status": "True"}]}});
                let _ = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                    .await;
            }
        }
    });
    tokio::spawn(simplyblock_operator::volume_ops::run(
        h.ctx.clone(),
        "operator:test".into(),
    ));
    Setup {
        h,
        pvs,
        volumes: [volumes[0], volumes[1]],
        source,
        target,
        _jobs: jobs,
    }
}

fn operation(ns: &str, name: &str, pv: &str) -> PersistentVolumeOps {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "PersistentVolumeOps",
        "metadata": {"name": name},
        "spec": {"persistentVolumeName": pv, "action": "Migrate",
                 "migrate": {"targetNodeRef": {"namespace": ns, "name": "target"}}},
    }))
    .expect("operation")
}

fn api(s: &Setup) -> Api<PersistentVolumeOps> {
    Api::all(s.h.kube.clone())
}

async fn ended(s: &Setup, name: &str, phase: OpsPhase) -> PersistentVolumeOps {
    let last = std::sync::Mutex::new(None);
    until_explained(
        &format!("{name} {phase:?}"),
        PATIENCE,
        async || {
            let op = api(s).get(name).await.ok()?;
            *last.lock().expect("lock") = op.status.clone();
            (op.status.as_ref()?.phase == phase).then_some(op)
        },
        || format!("last seen {:?}", last.lock().expect("lock")),
    )
    .await
}

async fn holders(s: &Setup) -> Vec<Option<String>> {
    let pvs: Api<PersistentVolume> = Api::all(s.h.kube.clone());
    let mut out = Vec::new();
    for pv in &s.pvs {
        let pv = pvs.get(pv).await.expect("pv");
        out.push(
            pv.metadata
                .annotations
                .unwrap_or_default()
                .get(ACTIVE_OPS_ANNOTATION)
                .cloned(),
        );
    }
    out
}

/// The terminal write comes first, then the release: wait for it.
async fn released(s: &Setup) {
    until("the lock released on every volume", async || {
        (holders(s).await == vec![None, None]).then_some(())
    })
    .await;
}

async fn nodes_of(s: &Setup) -> BTreeSet<Uuid> {
    let mut out = BTreeSet::new();
    for v in &s.volumes {
        let all = s.h.cp.list_pools(s.h.uuid).await.expect("pools");
        for p in all {
            if let Ok(vol) = s.h.cp.get_volume(s.h.uuid, p.id, *v).await {
                out.insert(vol.storage_node_id);
            }
        }
    }
    out
}

/// One sbsim per test would hand every test the same ids (its seed is fixed), and the
/// PersistentVolumes are cluster-wide: the scenarios share one setup and run in turn.
#[tokio::test]
async fn a_subsystem_moves_once_then_stays_and_an_abort_cancels_the_copy() {
    let s = setup("pvops-move", 300).await;
    let ns = s.h.ns.clone();
    // A lock left by an operation that no longer exists is broken.
    Api::<PersistentVolume>::all(s.h.kube.clone())
        .patch(
            &s.pvs[1],
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {ACTIVE_OPS_ANNOTATION: "pvops-move-gone"}}}),
            ),
        )
        .await
        .expect("a stale lock");
    let name = "pvops-move-1";
    api(&s)
        .create(&PostParams::default(), &operation(&ns, name, &s.pvs[1]))
        .await
        .expect("created");
    // While it runs, both volumes of the subsystem name it.
    until("the lock on both volumes", async || {
        (holders(&s).await == vec![Some(name.to_owned()), Some(name.to_owned())]).then_some(())
    })
    .await;
    let done = ended(&s, name, OpsPhase::Succeeded).await;
    crate::kubectl::ready(&api(&s), "persistentvolumeops.storage.simplyblock.io", name).await;
    raised(&s.h.kube, "default", Some(name), "LockBroken").await;
    let status = done.status.expect("status");
    let m = status.migration.expect("migration record");
    assert_eq!(m.source_node_uuid, Some(s.source.to_string()));
    assert_eq!(m.target_node_uuid, Some(s.target.to_string()));
    assert_eq!(m.member_count, Some(2));
    assert!(m.continued_at.is_some());
    let job = &m.validation_jobs;
    assert_eq!(job.len(), 1, "one Job, for the one consuming node: {job:?}");
    assert_eq!(job[0].node.as_deref(), Some(format!("{ns}-k1").as_str()));
    assert!(job[0].succeeded);
    assert_eq!(nodes_of(&s).await, BTreeSet::from([s.target]));
    released(&s).await;
    let left = Api::<Job>::namespaced(s.h.kube.clone(), &ns)
        .get_opt(&job[0].name)
        .await
        .expect("read");
    assert!(
        left.is_none_or(|j| j.metadata.deletion_timestamp.is_some()),
        "Verifying deleted the Job"
    );
    let nqn = m.subsystem_nqn.clone().expect("nqn");
    // The NQN is escaped in the path as the client sends it.
    let base = format!(
        "/api/v2/clusters/{}/subsystems/{}/migrations/",
        s.h.uuid,
        nqn.replace(':', "%3A")
    );
    let id = m.migration_uuid.expect("id");
    assert_eq!(s.h.calls("POST", &base).await, 1, "one create");
    assert_eq!(
        s.h.calls("POST", &format!("{base}{id}/continue")).await,
        1,
        "one continue"
    );
    raised(&s.h.kube, "default", Some(name), "OperationSucceeded").await;

    // The volumes are on the target now: a second operation has nothing to move.
    let again = "pvops-move-2";
    api(&s)
        .create(&PostParams::default(), &operation(&ns, again, &s.pvs[0]))
        .await
        .expect("created");
    let done = ended(&s, again, OpsPhase::Succeeded).await;
    let message = done.status.and_then(|st| st.message).unwrap_or_default();
    assert!(message.starts_with("TargetNodeIsSource"), "{message}");
    assert_eq!(
        s.h.calls("POST", &base).await,
        1,
        "no create for a volume already there"
    );
    raised(&s.h.kube, "default", Some(again), "TargetNodeIsSource").await;
    released(&s).await;

    // Back to the first node, with the control plane's clock stopped: the copy never ends,
    // and an abort cancels it.
    let sns: Api<StorageNode> = Api::namespaced(s.h.kube.clone(), &ns);
    sns.patch_status(
        "target",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"uuid": s.source.to_string()}})),
    )
    .await
    .expect("the target is the first node now");
    let r =
        s.h.cp
            .raw(
                simplyblock_controlplane::Method::PUT,
                "/../../_sim/clock",
                &[],
                Some(&json!({"scale": 0.0})),
            )
            .await
            .expect("sbsim admin");
    assert!(r.status < 300, "the clock stops: {}", r.status);
    let back = "pvops-move-3";
    api(&s)
        .create(&PostParams::default(), &operation(&ns, back, &s.pvs[0]))
        .await
        .expect("created");
    let running = until("the copy running", async || {
        let st = api(&s).get(back).await.ok()?.status?;
        (st.step.state.as_deref() == Some("Migrating")
            && st.migration.as_ref()?.continued_at.is_some())
        .then_some(st)
    })
    .await;
    let id = running
        .migration
        .and_then(|m| m.migration_uuid)
        .expect("id");
    until("the continue answered", async || {
        (s.h.calls("POST", &format!("{base}{id}/continue")).await == 1).then_some(())
    })
    .await;
    api(&s)
        .patch(
            back,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"abort": true}})),
        )
        .await
        .expect("abort");
    ended(&s, back, OpsPhase::Aborted).await;
    assert_eq!(
        s.h.calls("DELETE", &format!("{base}{id}/")).await,
        1,
        "one cancel"
    );
    raised(&s.h.kube, "default", Some(back), "MigrationCancelled").await;
    released(&s).await;
    assert_eq!(
        nodes_of(&s).await,
        BTreeSet::from([s.target]),
        "nothing moved"
    );
}

use serde_json::json;
use simplyblock_api::test_failover::TestFailoverStatus;

use super::*;

const CLUSTER_A: &str = "11111111-1111-1111-1111-111111111111";
const POOL_A: &str = "22222222-2222-2222-2222-222222222222";
const VOLUME_A: &str = "33333333-3333-3333-3333-333333333333";

fn uuid(s: &str) -> Uuid {
    s.parse().expect("a uuid")
}

fn drill(bubble: &str, status: TestFailoverStatus) -> TestFailover {
    let mut drill: TestFailover = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "TestFailover",
        "metadata": {"name": "drill", "namespace": "dr", "uid": "u-1"},
        "spec": {"scope": "Volume", "sourceCluster": "site-a", "sourceNamespace": "apps",
                 "sourceRef": "data", "bubbleCluster": bubble},
    }))
    .expect("a drill");
    drill.status = Some(status);
    drill
}

fn source_handle() -> String {
    format!("{CLUSTER_A}:{POOL_A}:{VOLUME_A}")
}

fn resolved() -> CloneStatus {
    CloneStatus {
        source_ref: "data".into(),
        source_handle: Some(source_handle()),
        pvc_name: Some("data".into()),
        source_fs_type: Some("xfs".into()),
        source_volume_mode: Some("Block".into()),
        ..CloneStatus::default()
    }
}

fn now() -> Timestamp {
    "2026-12-06T02:00:00Z".parse().expect("a time")
}

fn claim() -> Value {
    json!({"kind": "PersistentVolumeClaim", "spec": {"volumeName": "pv-data"}})
}

fn volume(handle: &str) -> Value {
    json!({"kind": "PersistentVolume", "spec": {
        "volumeMode": "Block",
        "csi": {"driver": "csi.simplyblock.io", "volumeHandle": handle, "fsType": "xfs",
                "volumeAttributes": {"uuid": "x", "nqn": "n", "targetType": "tcp",
                                     "csi.storage.k8s.io/pvc/name": "data"}}}})
}

#[test]
fn the_source_is_read_claim_first_then_its_volume() {
    let d = drill("site-b", TestFailoverStatus::default());
    let step = FailoverStep::ResolvingSource;
    let seen = |claim, volume| Observation::Source { claim, volume };
    assert_eq!(
        plan(&d, step, &seen(View::Absent, View::Absent), now()),
        Decision::Call(Call::View {
            suffix: "src-pvc",
            resource: "persistentvolumeclaims",
            name: "data".into(),
            namespace: Some("apps".into()),
        })
    );
    assert!(matches!(
        plan(&d, step, &seen(View::Pending, View::Absent), now()),
        Decision::Wait(m) if m.contains("waiting for cluster site-a to report claim apps/data")
    ));
    assert!(matches!(
        plan(&d, step, &seen(View::Failed("not found".into()), View::Absent), now()),
        Decision::Wait(m) if m.contains("not found")
    ));
    assert_eq!(
        plan(&d, step, &seen(View::Seen(claim()), View::Absent), now()),
        Decision::Call(Call::View {
            suffix: "src-pv",
            resource: "persistentvolumes",
            name: "pv-data".into(),
            namespace: None,
        })
    );
    let Decision::Advance {
        to, clones, event, ..
    } = plan(
        &d,
        step,
        &seen(View::Seen(claim()), View::Seen(volume(&source_handle()))),
        now(),
    )
    else {
        panic!("the source resolves");
    };
    assert_eq!(to, FailoverStep::ResolvingPoint);
    assert_eq!(event.0, "SourceResolved");
    let slot = &clones[0];
    assert_eq!(
        slot.source_handle.as_deref(),
        Some(source_handle().as_str())
    );
    assert_eq!(slot.source_fs_type.as_deref(), Some("xfs"));
    assert_eq!(slot.source_volume_mode.as_deref(), Some("Block"));
    assert_eq!(
        slot.source_volume_context,
        Some(BTreeMap::from([("targetType".into(), "tcp".into())])),
        "the keys naming the source are stripped"
    );
}

#[test]
fn a_source_that_is_no_bound_simplyblock_volume_fails_the_drill() {
    let d = drill("site-b", TestFailoverStatus::default());
    let step = FailoverStep::ResolvingSource;
    let unbound = Observation::Source {
        claim: View::Seen(json!({"spec": {}})),
        volume: View::Absent,
    };
    assert!(matches!(plan(&d, step, &unbound, now()),
        Decision::Fail { message, .. } if message.contains("not bound")));
    let mut foreign = volume("h");
    foreign["spec"]["csi"]["driver"] = json!("ebs.csi.aws.com");
    let foreign = Observation::Source {
        claim: View::Seen(claim()),
        volume: View::Seen(foreign),
    };
    assert!(matches!(plan(&d, step, &foreign, now()),
        Decision::Fail { message, .. } if message.contains("ebs.csi.aws.com")));
}

fn group_drill(status: TestFailoverStatus) -> TestFailover {
    let mut d = drill("site-b", status);
    d.spec.scope = FailoverScope::Group;
    d.spec.source_ref = "app".into();
    d
}

fn member(id: &str, pvc: &str) -> Volume {
    Volume {
        id: uuid(id),
        pool_uuid: POOL_A.into(),
        pvc_name: pvc.into(),
        size: 1 << 30,
        ..Volume::default()
    }
}

const M1: &str = "aaaaaaaa-0000-0000-0000-000000000001";
const M2: &str = "aaaaaaaa-0000-0000-0000-000000000002";

#[test]
fn a_group_resolves_to_one_slot_per_member_with_the_first_members_class() {
    let d = group_drill(TestFailoverStatus::default());
    let step = FailoverStep::ResolvingSource;
    let group = ConsistencyGroup {
        id: uuid("bbbbbbbb-0000-0000-0000-000000000001"),
        name: "app".into(),
        ..ConsistencyGroup::default()
    };
    let seen = |cluster, group: Option<ConsistencyGroup>, members, claim, volume| {
        Observation::Group(GroupSource {
            cluster,
            group,
            members,
            claim,
            volume,
        })
    };
    let both = || {
        vec![
            (uuid(M1), Some(member(M1, "app-0"))),
            (uuid(M2), Some(member(M2, ""))),
        ]
    };
    assert!(matches!(
        plan(&d, step, &seen(None, None, vec![], View::Absent, View::Absent), now()),
        Decision::Fail { message, .. } if message.contains("StorageCluster")
    ));
    assert!(matches!(
        plan(&d, step, &seen(Some(uuid(CLUSTER_A)), None, vec![], View::Absent, View::Absent), now()),
        Decision::Fail { message, .. } if message.contains("no consistency group named app")
    ));
    assert!(matches!(
        plan(&d, step, &seen(Some(uuid(CLUSTER_A)), Some(group.clone()),
            vec![(uuid(M1), Some(member(M1, "app-0"))), (uuid(M2), None)], View::Absent, View::Absent), now()),
        Decision::Wait(m) if m.contains("1 of the 2 members")
    ));
    // Both members and the group found, neither claim nor volume looked at yet.
    let members_found = |drill: &TestFailover| {
        plan(
            drill,
            step,
            &seen(
                Some(uuid(CLUSTER_A)),
                Some(group.clone()),
                both(),
                View::Absent,
                View::Absent,
            ),
            now(),
        )
    };
    assert_eq!(
        members_found(&d),
        Decision::Call(Call::View {
            suffix: "src-pvc",
            resource: "persistentvolumeclaims",
            name: "app-0".into(),
            namespace: Some("apps".into()),
        })
    );
    let mut by_id = d.clone();
    by_id.spec.source_cluster = CLUSTER_A.into();
    assert!(matches!(
        members_found(&by_id),
        Decision::Fail { message, .. }
            if message.contains("not a ManagedCluster") && message.contains("sourceNamespace apps")
    ));
    by_id.spec.source_namespace = None;
    assert!(
        matches!(members_found(&by_id), Decision::Advance { .. }),
        "without sourceNamespace a group named by id resolves without its claims"
    );
    let Decision::Advance { to, clones, .. } = plan(
        &d,
        step,
        &seen(
            Some(uuid(CLUSTER_A)),
            Some(group),
            both(),
            View::Seen(claim()),
            View::Seen(volume(&source_handle())),
        ),
        now(),
    ) else {
        panic!("the group resolves");
    };
    assert_eq!(to, FailoverStep::ResolvingPoint);
    assert_eq!(clones.len(), 2);
    assert_eq!(clones[0].source_ref, M1);
    assert_eq!(
        clones[0].source_handle.as_deref(),
        Some(format!("{CLUSTER_A}:{POOL_A}:{M1}").as_str())
    );
    assert_eq!(clones[0].pvc_name.as_deref(), Some("app-0"));
    assert!(
        clones[1]
            .pvc_name
            .as_deref()
            .is_some_and(|n| n.starts_with("tfo-") && n.contains("-pvc-")),
        "a member without a claim gets a claim name of the drill's: {:?}",
        clones[1].pvc_name
    );
    for slot in &clones {
        assert_eq!(slot.source_fs_type.as_deref(), Some("xfs"));
        assert_eq!(slot.source_volume_mode.as_deref(), Some("Block"));
        assert_eq!(slot.size_bytes, Some(1 << 30));
    }
}

#[test]
fn a_group_clones_each_member_from_its_snapshot_of_one_generation() {
    let slot = |m: &str| CloneStatus {
        source_ref: m.into(),
        source_handle: Some(format!("{CLUSTER_A}:{POOL_A}:{m}")),
        ..CloneStatus::default()
    };
    let d = group_drill(TestFailoverStatus {
        clones: vec![slot(M1), slot(M2)],
        ..TestFailoverStatus::default()
    });
    let step = FailoverStep::ResolvingPoint;
    let snap = |m: &str, s: &str| simplyblock_controlplane::GenerationMember {
        snapshot_id: uuid(s),
        cluster_id: uuid("55555555-5555-5555-5555-555555555555"),
        pool_id: uuid("66666666-6666-6666-6666-666666666666"),
        source_lvol_id: uuid(m),
        group_seq: 3,
        ..Default::default()
    };
    // The generation lists its members in another order than the slots.
    let generation = LatestGeneration {
        group_seq: 3,
        members: vec![
            snap(M2, "cccccccc-0000-0000-0000-000000000002"),
            snap(M1, "cccccccc-0000-0000-0000-000000000001"),
        ],
    };
    let Decision::Advance { clones, report, .. } = plan(
        &d,
        step,
        &Observation::Generation(GenerationSeen::Latest(Some(generation.clone()))),
        now(),
    ) else {
        panic!("the generation is the point");
    };
    assert!(
        clones[0]
            .snapshot_id
            .as_deref()
            .is_some_and(|s| s.ends_with("cccccccc-0000-0000-0000-000000000001"))
    );
    assert!(
        clones[1]
            .snapshot_id
            .as_deref()
            .is_some_and(|s| s.ends_with("cccccccc-0000-0000-0000-000000000002"))
    );
    assert_eq!(
        report.and_then(|r| r.recovery_point).as_deref(),
        Some("generation 3")
    );
    assert!(matches!(
        plan(
            &d,
            step,
            &Observation::Generation(GenerationSeen::Incomplete),
            now()
        ),
        Decision::Wait(_)
    ));
    assert!(matches!(
        plan(&d, step, &Observation::Generation(GenerationSeen::Latest(None)), now()),
        Decision::Fail { message, .. } if message.contains("no replicated generation")
    ));
    let mut shrunk = generation;
    shrunk.members.pop();
    assert!(matches!(
        plan(&d, step, &Observation::Generation(GenerationSeen::Latest(Some(shrunk))), now()),
        Decision::Fail { message, .. } if message.contains("membership changed")
    ));
    let mut in_place = d.clone();
    in_place.spec.bubble_cluster = "site-a".into();
    assert!(matches!(
        plan(&in_place, step, &Observation::Generation(GenerationSeen::Incomplete), now()),
        Decision::Fail { message, .. } if message.contains("replication target")
    ));
}

fn at_point(bubble: &str) -> TestFailover {
    drill(
        bubble,
        TestFailoverStatus {
            clones: vec![resolved()],
            ..TestFailoverStatus::default()
        },
    )
}

#[test]
fn onto_another_cluster_the_point_is_the_latest_replicated_snapshot() {
    let d = at_point("site-b");
    let step = FailoverStep::ResolvingPoint;
    assert!(matches!(
        plan(&d, step, &Observation::Replicated(None), now()),
        Decision::Fail { message, .. } if message.contains("no replicated snapshot")
    ));
    let point = ReplicatedSnapshot {
        snapshot_id: uuid("44444444-4444-4444-4444-444444444444"),
        cluster_id: uuid("55555555-5555-5555-5555-555555555555"),
        pool_id: uuid("66666666-6666-6666-6666-666666666666"),
        size: 1 << 30,
        created_at: Some("2026-12-06T01:59:00Z".into()),
        ..ReplicatedSnapshot::default()
    };
    let Decision::Advance {
        to, clones, report, ..
    } = plan(&d, step, &Observation::Replicated(Some(point)), now())
    else {
        panic!("the point resolves");
    };
    assert_eq!(to, FailoverStep::Cloning);
    assert_eq!(
        clones[0].snapshot_id.as_deref(),
        Some(
            "55555555-5555-5555-5555-555555555555:66666666-6666-6666-6666-666666666666:44444444-4444-4444-4444-444444444444"
        )
    );
    assert!(
        !clones[0].snapshot_taken,
        "a replicated snapshot is not the drill's"
    );
    assert_eq!(clones[0].size_bytes, Some(1 << 30));
    let report = report.expect("a report");
    assert_eq!(report.bubble_cluster.as_deref(), Some("site-b"));
    assert_eq!(
        report.recovery_point.as_deref(),
        Some("44444444-4444-4444-4444-444444444444")
    );
    assert!(report.recovery_point_time.is_some());

    let mut pinned = at_point("site-b");
    pinned.spec.recovery_point = Some("snap-1".into());
    assert!(matches!(
        plan(&pinned, step, &Observation::Replicated(None), now()),
        Decision::Fail { message, .. } if message.contains("leave recoveryPoint out")
    ));
}

#[test]
fn in_place_the_drill_takes_its_own_snapshot_once() {
    let d = at_point("site-a");
    let step = FailoverStep::ResolvingPoint;
    let pool = uuid(POOL_A);
    assert_eq!(
        plan(
            &d,
            step,
            &Observation::InPlace {
                pool,
                snapshot: None
            },
            now()
        ),
        Decision::Call(Call::Snapshot {
            cluster: uuid(CLUSTER_A),
            pool,
            volume: uuid(VOLUME_A),
            name: name(&d, "snap"),
        })
    );
    let taken = Snapshot {
        id: uuid("77777777-7777-7777-7777-777777777777"),
        name: name(&d, "snap"),
        created_at: "2026-12-06T01:00:00".into(),
        ..Snapshot::default()
    };
    let Decision::Advance { clones, .. } = plan(
        &d,
        step,
        &Observation::InPlace {
            pool,
            snapshot: Some(taken.clone()),
        },
        now(),
    ) else {
        panic!("the taken snapshot is the point");
    };
    assert!(clones[0].snapshot_taken, "the drill deletes what it took");

    let mut pinned = at_point("site-a");
    pinned.spec.recovery_point = Some(taken.id.to_string());
    let Decision::Advance { clones, .. } = plan(
        &pinned,
        step,
        &Observation::InPlace {
            pool,
            snapshot: Some(taken),
        },
        now(),
    ) else {
        panic!("the pinned snapshot is the point");
    };
    assert!(!clones[0].snapshot_taken, "a pinned snapshot is left alone");
}

fn at_cloning() -> TestFailover {
    let mut slot = resolved();
    slot.snapshot_id = Some(format!(
        "{CLUSTER_A}:{POOL_A}:44444444-4444-4444-4444-444444444444"
    ));
    drill(
        "site-b",
        TestFailoverStatus {
            clones: vec![slot],
            ..TestFailoverStatus::default()
        },
    )
}

/// What Cloning reads: the clones found, each slot's point present or not.
fn clones(made: Vec<Option<Volume>>, point_present: bool) -> Observation {
    let point_present = vec![point_present; made.len()];
    Observation::Clones {
        made,
        point_present,
    }
}

#[test]
fn a_point_removed_before_its_clone_is_resolved_again_unless_pinned() {
    let d = at_cloning();
    let step = FailoverStep::Cloning;
    let Decision::Advance {
        to,
        clones: kept,
        message,
        event,
        ..
    } = plan(&d, step, &clones(vec![None], false), now())
    else {
        panic!("the latest point is resolved again");
    };
    assert_eq!(to, FailoverStep::ResolvingPoint);
    assert_eq!(kept, d.status.clone().expect("status").clones);
    assert!(
        message.contains("44444444-4444-4444-4444-444444444444"),
        "{message}"
    );
    assert_eq!(event.0, "RecoveryPointGone");
    assert!(
        simplyblock_api::test_failover::GRAPHS
            .graph(simplyblock_api::test_failover::FailoverStage::Drill)
            .expect("the drill's graph")
            .allows(FailoverStep::Cloning, FailoverStep::ResolvingPoint),
        "the graph declares the way back"
    );

    let mut pinned = at_cloning();
    pinned.spec.recovery_point = Some("44444444-4444-4444-4444-444444444444".into());
    let Decision::Fail { message, .. } = plan(&pinned, step, &clones(vec![None], false), now())
    else {
        panic!("a pinned point cannot be had again");
    };
    assert!(
        message.contains("spec.recoveryPoint") && message.contains("site-b"),
        "{message}"
    );
}

#[test]
fn a_clone_is_made_only_when_none_of_its_name_exists() {
    let d = at_cloning();
    let step = FailoverStep::Cloning;
    assert_eq!(
        plan(&d, step, &clones(vec![None], true), now()),
        Decision::Call(Call::Clone {
            slot: 0,
            cluster: uuid(CLUSTER_A),
            pool: uuid(POOL_A),
            snapshot: uuid("44444444-4444-4444-4444-444444444444"),
            name: name(&d, "clone"),
        })
    );
    let made = Volume {
        id: uuid("88888888-8888-8888-8888-888888888888"),
        name: name(&d, "clone"),
        size: 2 << 30,
        ..Volume::default()
    };
    let Decision::Advance { to, clones, .. } =
        plan(&d, step, &clones(vec![Some(made)], false), now())
    else {
        panic!("the clone exists");
    };
    assert_eq!(to, FailoverStep::Placing);
    assert_eq!(
        clones[0].clone_id.as_deref(),
        Some(format!("{CLUSTER_A}:{POOL_A}:88888888-8888-8888-8888-888888888888").as_str())
    );
    assert_eq!(clones[0].size_bytes, Some(2 << 30));
}

fn at_placing() -> TestFailover {
    let mut slot = resolved();
    slot.clone_id = Some(format!(
        "{CLUSTER_A}:{POOL_A}:88888888-8888-8888-8888-888888888888"
    ));
    drill(
        "site-b",
        TestFailoverStatus {
            clones: vec![slot],
            report: Some(FailoverReport {
                recovery_point_time: Some(Time("2026-12-06T01:59:00Z".parse().expect("time"))),
                ..FailoverReport::default()
            }),
            ..TestFailoverStatus::default()
        },
    )
}

#[test]
fn the_bubble_is_ready_when_every_claim_is_bound_and_the_source_unchanged() {
    let d = at_placing();
    let step = FailoverStep::Placing;
    let seen = |bound, source_volume| Observation::Placement {
        bound,
        source_volume,
        bubble: View::Failed("namespaces \"x\" not found".into()),
    };
    assert_eq!(
        plan(&d, step, &seen(None, View::Absent), now()),
        Decision::Call(Call::Place)
    );
    assert!(matches!(
        plan(&d, step, &seen(Some(0), View::Absent), now()),
        Decision::Wait(m) if m.contains("0 of 1 bound")
    ));
    let Decision::Ready { report, .. } = plan(
        &d,
        step,
        &seen(Some(1), View::Seen(volume(&source_handle()))),
        now(),
    ) else {
        panic!("ready");
    };
    assert_eq!(report.invariants_held, Some(true));
    assert_eq!(report.recovery_point_age_seconds, Some(60));
    assert!(matches!(
        plan(
            &d,
            step,
            &seen(Some(1), View::Seen(volume("c:p:other"))),
            now()
        ),
        Decision::Fail {
            reason: INVARIANT_VIOLATED,
            ..
        }
    ));
}

#[test]
fn the_bubble_is_placed_only_in_a_namespace_absent_or_the_drills_own() {
    let d = at_placing();
    let own = d.bubble_namespace();
    assert_eq!(own, bubble_namespace_of(&d));
    let step = FailoverStep::Placing;
    let seen = |bubble| Observation::Placement {
        bound: None,
        source_volume: View::Absent,
        bubble,
    };
    assert_eq!(
        plan(&d, step, &seen(View::Absent), now()),
        Decision::Call(Call::View {
            suffix: BUBBLE_VIEW,
            resource: "namespaces",
            name: own.clone(),
            namespace: None,
        })
    );
    assert!(matches!(
        plan(&d, step, &seen(View::Pending), now()),
        Decision::Wait(m) if m.contains(&own)
    ));
    assert!(matches!(
        plan(&d, step, &seen(View::Failed("forbidden".into())), now()),
        Decision::Wait(_)
    ));
    let namespace = |labels: Value| json!({"metadata": {"name": own, "labels": labels}});
    assert_eq!(
        plan(
            &d,
            step,
            &seen(View::Seen(namespace(json!({TEST_ID_LABEL: "u-1"})))),
            now()
        ),
        Decision::Call(Call::Place)
    );
    for foreign in [json!({}), json!({TEST_ID_LABEL: "another-drill"})] {
        let Decision::Fail { message, .. } =
            plan(&d, step, &seen(View::Seen(namespace(foreign))), now())
        else {
            panic!("a namespace the drill did not make is refused");
        };
        assert!(
            message.contains(&format!("namespace {own} already exists on cluster site-b")),
            "{message}"
        );
    }
    assert_eq!(view_cluster(&d, BUBBLE_VIEW), "site-b");
    assert_eq!(view_cluster(&d, "src-pv"), "site-a");
}

fn bubble_namespace_of(d: &TestFailover) -> String {
    simplyblock_api::test_failover::default_bubble_namespace(
        "dr",
        d.metadata.name.as_deref().unwrap_or_default(),
    )
}

#[test]
fn the_older_live_drill_of_a_source_and_bubble_wins() {
    let at = |name: &str, uid: &str, created: &str, phase: FailoverPhase| {
        let mut d = drill(
            "site-b",
            TestFailoverStatus {
                phase,
                ..TestFailoverStatus::default()
            },
        );
        d.metadata.name = Some(name.into());
        d.metadata.uid = Some(uid.into());
        d.metadata.creation_timestamp = Some(Time(created.parse().expect("time")));
        d
    };
    let first = at("a", "1", "2026-12-06T01:00:00Z", FailoverPhase::Pending);
    let second = at("b", "2", "2026-12-06T01:00:01Z", FailoverPhase::Pending);
    assert!(conflicts(&second, &first));
    assert!(!conflicts(&first, &second));
    assert!(
        !conflicts(&first, &first),
        "a drill does not conflict with itself"
    );
    let running = at("c", "3", "2026-12-06T02:00:00Z", FailoverPhase::Ready);
    assert!(
        conflicts(&first, &running),
        "a drill that started holds the source"
    );
    let failed = at("d", "4", "2026-12-06T00:00:00Z", FailoverPhase::Failed);
    assert!(!conflicts(&first, &failed));
    let mut elsewhere = at("e", "5", "2026-12-06T00:00:00Z", FailoverPhase::Ready);
    elsewhere.spec.bubble_cluster = "site-c".into();
    assert!(!conflicts(&first, &elsewhere));
}

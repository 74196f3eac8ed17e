use super::*;

fn id(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

fn observation() -> Observation {
    Observation {
        namespace: "ns".into(),
        cluster: "c1".into(),
        status: ClusterStatus::ReadOnly,
        rebalancing: true,
        capacity_bytes: 1000,
        used_bytes: 900,
        provisioned_bytes: 2000,
        io: Some(IoStat {
            read_bytes_ps: 10.0,
            read_latency_ps: 250.0,
            ..IoStat::default()
        }),
        nodes: vec![NodeSeen {
            label: "sn-1".into(),
            status: NodeStatus::Online,
            capacity_bytes: 1000,
            used_bytes: 900,
            io: None,
            devices: vec![DeviceSeen {
                name: "sn-1-0000abcd".into(),
                size: 1000,
                used_bytes: 900,
            }],
        }],
        pools: vec![PoolSeen {
            label: "p1".into(),
            max_size: 0,
            provisioned_bytes: 2000,
            used_bytes: 900,
            io: None,
            volumes: vec![
                VolumeSeen {
                    id: id(1),
                    size: 2000,
                    claim: Some(Claim {
                        persistent_volume: "pv-1".into(),
                        claim_namespace: "apps".into(),
                        claim: "data".into(),
                    }),
                },
                VolumeSeen {
                    id: id(2),
                    size: 5,
                    claim: None,
                },
            ],
        }],
        tasks: vec![
            Task {
                function_name: "device_restart".into(),
                status: simplyblock_controlplane::TaskStatus::New,
                ..Task::default()
            },
            Task {
                function_name: "device_restart".into(),
                status: simplyblock_controlplane::TaskStatus::New,
                ..Task::default()
            },
            Task {
                function_name: "node_restart".into(),
                canceled: true,
                ..Task::default()
            },
        ],
        figures: BTreeMap::from([(
            id(1),
            VolumeFigures {
                used_bytes: 900,
                io: None,
                replication_lag_seconds: Some(42.0),
            },
        )]),
    }
}

fn value(samples: &[Sample], family: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.family == family
                && s.labels.len() == labels.len()
                && s.labels
                    .iter()
                    .zip(labels)
                    .all(|((k, v), (wk, wv))| k == wk && v == wv)
        })
        .map(|s| s.value)
}

#[test]
fn every_family_carries_its_catalogue_labels_and_the_control_planes_figure() {
    let samples = samples(&observation());
    for s in &samples {
        let family = simplyblock_telemetry::catalogue::family(s.family)
            .unwrap_or_else(|| panic!("{} is not in the catalogue", s.family));
        let names: Vec<&str> = s.labels.iter().map(|(k, _)| *k).collect();
        assert_eq!(names, family.labels, "{}", s.family);
    }
    let c = [("namespace", "ns"), ("cluster", "c1")];
    let status = |s: &str| value(&samples, CLUSTER_STATUS, &[c[0], c[1], ("status", s)]);
    assert_eq!(status("read_only"), Some(1.0));
    assert_eq!(status("active"), Some(0.0));
    assert_eq!(
        value(&samples, "simplyblock_storagecluster_provisioned_bytes", &c),
        Some(2000.0)
    );
    assert_eq!(
        value(&samples, "simplyblock_storagecluster_rebalancing_state", &c),
        Some(1.0)
    );
    assert_eq!(
        value(
            &samples,
            "simplyblock_storagecluster_read_latency_seconds",
            &c
        ),
        Some(0.000250)
    );
    let tasks = |t: &str, s: &str| {
        value(
            &samples,
            "simplyblock_storagecluster_tasks_count",
            &[c[0], c[1], ("task", t), ("status", s)],
        )
    };
    assert_eq!(tasks("device_restart", "new"), Some(2.0));
    assert_eq!(tasks("node_restart", "canceled"), Some(1.0));
    let pv = [
        ("namespace", "ns"),
        ("cluster", "c1"),
        ("pool", "p1"),
        ("persistentvolume", "pv-1"),
        ("claim_namespace", "apps"),
        ("claim", "data"),
    ];
    assert_eq!(
        value(&samples, "simplyblock_persistentvolume_used_bytes", &pv),
        Some(900.0)
    );
    assert_eq!(
        value(
            &samples,
            "simplyblock_persistentvolume_replication_lag_seconds",
            &pv
        ),
        Some(42.0)
    );
    // A volume without a PersistentVolume has no series.
    assert!(
        !samples.iter().any(
            |s| s.family.starts_with("simplyblock_persistentvolume") && s.labels[3].1 != "pv-1"
        )
    );
}

#[test]
fn a_volume_not_visited_yet_has_its_size_and_no_used_figure() {
    let mut o = observation();
    o.figures.clear();
    let samples = samples(&o);
    assert!(
        samples
            .iter()
            .any(|s| s.family == "simplyblock_persistentvolume_capacity_bytes")
    );
    assert!(
        !samples
            .iter()
            .any(|s| s.family == "simplyblock_persistentvolume_used_bytes")
    );
}

#[test]
fn visits_go_round_the_volumes_within_the_budget() {
    let ids = [id(3), id(1), id(2), id(4), id(5)];
    assert_eq!(visits(&ids, None, 2), vec![id(1), id(2)]);
    assert_eq!(visits(&ids, Some(id(2)), 2), vec![id(3), id(4)]);
    assert_eq!(visits(&ids, Some(id(4)), 2), vec![id(5), id(1)]);
    // A volume gone since the last visit: the next after it.
    assert_eq!(visits(&[id(1), id(5)], Some(id(3)), 1), vec![id(5)]);
    assert_eq!(visits(&ids, None, 9).len(), 5, "never one volume twice");
    assert!(visits(&[], Some(id(1)), 3).is_empty());
}

#[test]
fn a_device_crossing_is_announced_once_and_again_only_after_it_dropped() {
    let device = |used| DeviceSeen {
        name: "d".into(),
        size: 100,
        used_bytes: used,
    };
    let (full, crossed) = crossings(&[&device(80)], &BTreeSet::new(), 80);
    assert_eq!(crossed, vec!["d".to_string()]);
    let (full, crossed) = crossings(&[&device(95)], &full, 80);
    assert!(crossed.is_empty(), "still over: not again");
    let (full, crossed) = crossings(&[&device(79)], &full, 80);
    assert!(crossed.is_empty() && full.is_empty());
    let (_, crossed) = crossings(&[&device(81)], &full, 80);
    assert_eq!(crossed, vec!["d".to_string()], "crossed again");
}

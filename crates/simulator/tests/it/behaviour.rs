//! The control plane's state machines and quirks, through the client: redirects, quoted
//! not-found messages, plain-text 500s, auth, duplicates, node and cluster statuses,
//! the workers' storage-node API, the sim clock, replication.

use std::time::Duration;

use crate::common::*;
use simplyblock_controlplane::*;

#[tokio::test]
async fn quirks_are_served_and_classified() {
    let env = start(1, 1).await;
    let c = &env.client;
    let cluster = c
        .create_cluster(&ClusterCreate::new("q", 10, 4))
        .await
        .expect("create");
    let id = cluster.id;

    // Trailing-slash redirect: GET and a POST with a body both follow the 307.
    let r = c
        .raw(Method::GET, &format!("/clusters/{id}"), &[], None)
        .await
        .expect("redirected");
    assert_eq!(r.status, 200);
    let body = serde_json::json!({"name": "q2", "max_subsys": 1, "spdk_vcpu_count": 1});
    let r = c
        .raw(Method::POST, "/clusters", &[], Some(&body))
        .await
        .expect("redirected post");
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let calls = env.server.sim.calls.lock().expect("log").since(0);
    let redirect = calls
        .iter()
        .find(|x| x.status == 307 && x.method == "POST")
        .expect("307");
    assert!(
        redirect
            .location
            .as_deref()
            .is_some_and(|l| l.starts_with("http://") && l.ends_with("/api/v2/clusters/"))
    );

    // A lookup 404 carries KeyError quotes on the wire; the client strips them.
    let missing = Uuid::from_u128(9);
    let raw = c
        .raw(Method::GET, &format!("/clusters/{missing}/"), &[], None)
        .await
        .expect("404");
    assert_eq!(
        String::from_utf8_lossy(&raw.body),
        format!("{{\"detail\":\"'Cluster {missing} not found'\"}}")
    );
    let e = c.get_cluster(missing).await.expect_err("404");
    assert!(e.is_not_found());
    assert_eq!(e.message(), format!("Cluster {missing} not found"));

    // Unknown task id: the real server's KeyError bug, a plain-text 500.
    let e = c.get_task(id, missing).await.expect_err("500");
    assert!(
        matches!(
            e,
            Error::Refused {
                status: 500,
                opaque: true,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.message(), "Internal Server Error");

    // 422 for an erasure-coding scheme the server does not offer.
    let mut bad = ClusterCreate::new("bad", 10, 4);
    bad.distr_ndcs = 3;
    let e = c.create_cluster(&bad).await.expect_err("422");
    assert!(matches!(e, Error::Invalid { .. }), "{e}");
    assert!(e.message().contains("Invalid erasure coding scheme"), "{e}");

    // Duplicates.
    let e = c
        .create_cluster(&ClusterCreate::new("q", 10, 4))
        .await
        .expect_err("dup");
    assert!(e.is_conflict());
    assert_eq!(e.message(), "A cluster with the name 'q' already exists");

    // Auth: none, wrong, a cluster secret for its own cluster only.
    let anon = c.with_token("");
    assert!(matches!(
        anon.list_clusters().await.expect_err("401"),
        Error::Unauthorized { .. }
    ));
    let wrong = c.with_token("nope");
    assert_eq!(
        wrong.list_clusters().await.expect_err("401").message(),
        "Invalid token"
    );
    let by_secret = c.with_token(cluster.secret.expose());
    by_secret.get_cluster(id).await.expect("own cluster");
    by_secret.list_clusters().await.expect("list with a secret");
    let other = c.list_clusters().await.expect("l")[1].id;
    assert!(matches!(
        by_secret
            .get_cluster(other)
            .await
            .expect_err("other cluster"),
        Error::Unauthorized { .. }
    ));

    // Not active: volume create is an opaque refusal; connect on nothing is plain text.
    let pool = c
        .create_pool(
            id,
            &PoolCreate {
                name: "p".into(),
                ..Default::default()
            },
        )
        .await
        .expect("pool");
    let e = c
        .create_volume(id, pool.id, &VolumeCreate::new("v", 1_000_000_000))
        .await
        .expect_err("unready cluster");
    assert!(matches!(e, Error::Refused { opaque: true, .. }), "{e}");
    // The volume lookup runs before the route: a quoted `LVol … not found`.
    let e = c
        .connect_volume(id, pool.id, missing, None)
        .await
        .expect_err("404");
    assert!(e.is_not_found());
    assert_eq!(e.message(), format!("LVol {missing} not found"));
    let e = c
        .create_pool(
            id,
            &PoolCreate {
                name: "p".into(),
                ..Default::default()
            },
        )
        .await
        .expect_err("dup pool");
    assert_eq!(e.message(), "Pool p already exists");
}

#[tokio::test]
async fn storage_node_api_follows_enrollment_and_node_add_reboots() {
    let env = start(2, 1).await;
    let addr = env.server.addr;
    let agent = |w: &str| {
        let mut cfg = SnodeConfig::new(snode_address(w));
        cfg.connect_to = Some(addr);
        cfg.timeout = Duration::from_secs(2);
        SnodeClient::new(cfg).expect("snode client")
    };
    let info = agent("w1").info().await.expect("enrolled worker answers");
    assert_eq!(info["hostname"], "w1");
    assert_eq!(info["nvme_devices"].as_array().map(Vec::len), Some(2));
    // w2 carries no enrollment label: no storage-node pod, no answer.
    let e = agent("w2").info().await.expect_err("not enrolled");
    assert!(matches!(e, Error::Unavailable { .. }), "{e}");
    // The operator labels the worker (here through the admin route).
    let c = simplyblock_controlplane::Client::new(ClientConfig::new(
        Url::parse(&env.server.url).expect("u"),
        TOKEN,
    ))
    .expect("c");
    let r = c
        .raw(
            Method::PUT,
            "/../../_sim/workers/w2/labels",
            &[],
            Some(&serde_json::json!({LABEL: "c1"})),
        )
        .await
        .expect("label");
    assert_eq!(r.status, 200);
    agent("w2").info().await.expect("now it answers");

    // A node add applies the CPU topology and reboots the worker: unreachable for a while.
    env.server.sim.clock.set_scale(0.0);
    let cluster = env
        .client
        .create_cluster(&ClusterCreate::new("r", 10, 4))
        .await
        .expect("create");
    env.client
        .add_storage_node(
            cluster.id,
            &StorageNodeAdd::new(snode_address("w1"), "eth0"),
        )
        .await
        .expect("add");
    env.server.sim.clock.advance(1_500);
    env.server.sim.wake.notify_one();
    eventually("worker rebooting", || async {
        agent("w1").info().await.is_err().then_some(())
    })
    .await;
    let node_count = env
        .client
        .list_storage_nodes(cluster.id)
        .await
        .expect("n")
        .len();
    assert_eq!(node_count, 0, "no node record before the worker is back");
    // Frozen clock: nothing moves until it is advanced past the reboot and the add, however
    // often the engine looks (two passes: one that started after this point).
    let passes = || {
        env.server
            .sim
            .engine_passes
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let from = passes();
    eventually("two engine passes", || async {
        env.server.sim.wake.notify_one();
        (passes() >= from + 2).then_some(())
    })
    .await;
    assert!(agent("w1").info().await.is_err());
    env.server.sim.clock.advance(21_000);
    env.server.sim.wake.notify_one();
    agent("w1").info().await.expect("back after the reboot");
    let node = eventually("in_creation", || async {
        env.client
            .list_storage_nodes(cluster.id)
            .await
            .ok()?
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(node.status, NodeStatus::InCreation);
    env.server.sim.clock.advance(9_000);
    env.server.sim.wake.notify_one();
    eventually("online", || async {
        (env.client
            .get_storage_node(cluster.id, node.id)
            .await
            .ok()?
            .status
            == NodeStatus::Online)
            .then_some(())
    })
    .await;
    assert!(agent("w1").spdk_process_is_up().await.expect("up"));
}

#[tokio::test]
async fn cluster_degrades_suspends_and_recovers() {
    let env = start(3, 3).await;
    let c = &env.client;
    let cid = active_cluster(c, "deg", 3).await;
    let nodes = c.list_storage_nodes(cid).await.expect("nodes");
    let status = || async { c.get_cluster(cid).await.expect("cluster").status };

    c.shutdown_storage_node(cid, nodes[0].id, false)
        .await
        .expect("shutdown");
    // A second graceful shutdown while one is in flight is a 409 naming the other node.
    let e = c
        .shutdown_storage_node(cid, nodes[1].id, false)
        .await
        .expect_err("409");
    assert!(
        e.is_conflict() && e.message().contains("cannot shutdown"),
        "{e}"
    );
    eventually("degraded", || async {
        (status().await == ClusterStatus::Degraded).then_some(())
    })
    .await;
    eventually("offline", || async {
        (c.get_storage_node(cid, nodes[0].id).await.ok()?.status == NodeStatus::Offline)
            .then_some(())
    })
    .await;
    c.shutdown_storage_node(cid, nodes[1].id, false)
        .await
        .expect("second");
    eventually("suspended", || async {
        (status().await == ClusterStatus::Suspended).then_some(())
    })
    .await;
    // Restart of an online node without force is refused silently (202, nothing moves).
    c.restart_storage_node(cid, nodes[2].id, &NodeRestart::default())
        .await
        .expect("202");
    for n in &nodes[..2] {
        eventually("offline", || async {
            (c.get_storage_node(cid, n.id).await.ok()?.status == NodeStatus::Offline).then_some(())
        })
        .await;
        c.restart_storage_node(cid, n.id, &NodeRestart::default())
            .await
            .expect("restart");
        eventually("online", || async {
            (c.get_storage_node(cid, n.id).await.ok()?.status == NodeStatus::Online).then_some(())
        })
        .await;
    }
    assert_eq!(
        c.get_storage_node(cid, nodes[2].id)
            .await
            .expect("n")
            .status,
        NodeStatus::Online
    );
    eventually("active again", || async {
        (status().await == ClusterStatus::Active).then_some(())
    })
    .await;

    // Devices: remove, refuse a second remove, restart.
    let d = c.list_devices(cid, nodes[0].id).await.expect("devs")[0].clone();
    c.remove_device(cid, nodes[0].id, d.id, false)
        .await
        .expect("remove");
    assert_eq!(
        c.get_device(cid, nodes[0].id, d.id)
            .await
            .expect("d")
            .status,
        DeviceStatus::Removed
    );
    assert!(
        c.remove_device(cid, nodes[0].id, d.id, false)
            .await
            .expect_err("already removed")
            .is_retryable()
    );
    c.restart_device(cid, nodes[0].id, d.id, false)
        .await
        .expect("restart");
    assert_eq!(
        c.get_device(cid, nodes[0].id, d.id)
            .await
            .expect("d")
            .status,
        DeviceStatus::Online
    );
    let e = c
        .get_device(cid, nodes[1].id, d.id)
        .await
        .expect_err("other node");
    assert_eq!(e.message(), format!("Device {} not found", d.id));

    // Suspend needs online; resume needs suspended.
    c.suspend_storage_node(cid, nodes[1].id, false)
        .await
        .expect("suspend");
    assert!(
        c.suspend_storage_node(cid, nodes[1].id, false)
            .await
            .is_err()
    );
    c.resume_storage_node(cid, nodes[1].id)
        .await
        .expect("resume");
    assert!(c.resume_storage_node(cid, nodes[1].id).await.is_err());

    // Volume delete is refused while the cluster is suspended (a 400 precondition).
    let pool = c
        .create_pool(
            cid,
            &PoolCreate {
                name: "p".into(),
                ..Default::default()
            },
        )
        .await
        .expect("pool");
    let vid = c
        .create_volume(cid, pool.id, &VolumeCreate::new("v", 1_000_000_000))
        .await
        .expect("vol");
    // A volume with allowed hosts needs a host NQN to connect: a plain-text 404.
    let guarded = c
        .create_volume(
            cid,
            pool.id,
            &VolumeCreate {
                allowed_hosts: Some(vec!["nqn.2014-08.io.simplyblock:uuid:h1".into()]),
                ..VolumeCreate::new("guarded", 1_000_000_000)
            },
        )
        .await
        .expect("guarded");
    let e = c
        .connect_volume(cid, pool.id, guarded, None)
        .await
        .expect_err("plain 404");
    assert!(e.is_not_found());
    assert!(
        e.message()
            .ends_with("has allowed hosts configured; --host-nqn is required"),
        "{e}"
    );
    let paths = c
        .connect_volume(
            cid,
            pool.id,
            guarded,
            Some("nqn.2014-08.io.simplyblock:uuid:h1"),
        )
        .await
        .expect("with host");
    assert!(
        paths[0]
            .connect_arg("dhchap-secret")
            .is_some_and(|k| k.starts_with("DHHC-1"))
    );
    let other = c
        .create_cluster(&ClusterCreate::new("other", 10, 4))
        .await
        .expect("other");
    // Volume names are unique across clusters.
    let opool = c
        .create_pool(
            other.id,
            &PoolCreate {
                name: "p".into(),
                ..Default::default()
            },
        )
        .await
        .expect("pool");
    let e = c
        .create_volume(other.id, opool.id, &VolumeCreate::new("v", 1_000_000_000))
        .await
        .expect_err("dup name");
    assert!(e.is_conflict());
    assert_eq!(e.message(), "Volume v exists");
    c.shutdown_cluster(cid).await.expect("cluster shutdown");
    eventually("suspended", || async {
        (status().await == ClusterStatus::Suspended).then_some(())
    })
    .await;
    let e = c.delete_volume(cid, pool.id, vid).await.expect_err("400");
    assert!(matches!(e, Error::Refused { status: 400, .. }), "{e}");
    c.start_cluster(cid).await.expect("start");
    eventually("active after start", || async {
        (status().await == ClusterStatus::Active).then_some(())
    })
    .await;
    c.delete_volume(cid, pool.id, vid).await.expect("delete");
    eventually("gone", || async {
        c.get_volume(cid, pool.id, vid)
            .await
            .err()
            .filter(Error::is_not_found)
    })
    .await;
}

#[tokio::test]
async fn replication_fails_over_to_the_replica() {
    let dir = tempfile::tempdir().expect("dir");
    let cfg = config(dir.path(), &fleet_yaml(4, 4));
    let env = start_with(dir, cfg).await;
    let c = &env.client;
    // Two clusters of two nodes each (w1, w2 and w3, w4).
    let src = active_cluster(c, "src", 2).await;
    let dst = c
        .create_cluster(&ClusterCreate::new("dst", 10, 4))
        .await
        .expect("dst");
    for w in ["w3", "w4"] {
        c.add_storage_node(dst.id, &StorageNodeAdd::new(snode_address(w), "eth0"))
            .await
            .expect("add");
    }
    eventually("dst nodes", || async {
        let n = c.list_storage_nodes(dst.id).await.ok()?;
        (n.len() == 2 && n.iter().all(|n| n.status == NodeStatus::Online)).then_some(())
    })
    .await;
    c.activate_cluster(dst.id).await.expect("activate");
    eventually("dst active", || async {
        (c.get_cluster(dst.id).await.ok()?.status == ClusterStatus::Active).then_some(())
    })
    .await;
    let dpool = c
        .create_pool(
            dst.id,
            &PoolCreate {
                name: "dp".into(),
                ..Default::default()
            },
        )
        .await
        .expect("dpool");
    let spool = c
        .create_pool(
            src,
            &PoolCreate {
                name: "sp".into(),
                ..Default::default()
            },
        )
        .await
        .expect("spool");
    let target = c
        .create_replication_target(
            src,
            &ReplicationTargetCreate {
                target_name: "simplyblock-repl-dst".into(),
                target_cluster_id: dst.id,
                target_pool_id: Some(dpool.id),
                timeout_sec: None,
            },
        )
        .await
        .expect("target");
    let vid = c
        .create_volume(src, spool.id, &VolumeCreate::new("rv", 1_000_000_000))
        .await
        .expect("vol");
    // No replica yet: failover is refused.
    c.start_volume_replication(src, spool.id, vid, &ReplicationStart::default())
        .await
        .expect("start");
    let rel = c.volume_replication(src, spool.id, vid).await.expect("rel");
    assert_eq!(rel.state, ReplicationState::Replicating);
    assert_eq!(rel.target_cluster_id, Some(dst.id));
    c.volume_replication_action(src, spool.id, vid, "trigger")
        .await
        .expect("trigger");
    let rel = eventually("replicated", || async {
        let r = c.volume_replication(src, spool.id, vid).await.ok()?;
        r.target_lvol_id.is_some().then_some(r)
    })
    .await;
    let replica = rel.target_lvol_id.expect("replica");
    assert!(
        c.list_volumes(dst.id, dpool.id)
            .await
            .expect("dst vols")
            .iter()
            .any(|v| v.id == replica)
    );
    let tasks = c
        .volume_replication_tasks(src, spool.id, vid)
        .await
        .expect("tasks");
    assert!(
        tasks
            .iter()
            .any(|t| t.function_name == "snapshot_replication" && t.status == TaskStatus::Done)
    );
    let results = c
        .failover_replication_target(src, target.id)
        .await
        .expect("failover");
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].status, FailoverStatus::FailedOver);
    assert_eq!(results[0].target_lvol_id, Some(replica));
    // After failover /connect points at the replica only.
    let paths = c
        .connect_volume(src, spool.id, vid, None)
        .await
        .expect("connect");
    assert!(!paths.is_empty());
    assert!(
        paths
            .iter()
            .all(|p| p.target_lvol_id.as_deref() == Some(replica.to_string().as_str()))
    );
    // Idempotent per volume.
    let again = c
        .failover_replication_target(src, target.id)
        .await
        .expect("again");
    assert_eq!(again[0].status, FailoverStatus::Skipped);
    c.failback_volume_replication(src, spool.id, vid, &Failback::default())
        .await
        .expect("failback");
    let rel = c.volume_replication(src, spool.id, vid).await.expect("rel");
    assert_eq!(rel.direction, ReplicationDirection::ToSource);
    let task = c
        .commit_volume_replication(src, spool.id, vid)
        .await
        .expect("commit");
    eventually("cutover done", || async {
        let r = c.volume_replication(src, spool.id, vid).await.ok()?;
        (r.state == ReplicationState::CutoverDone).then_some(())
    })
    .await;
    // `replication_final` is outside the task DTO's closed enum, as on the real server.
    let raw = c
        .raw(Method::GET, &format!("/clusters/{src}/tasks/"), &[], None)
        .await
        .expect("tasks");
    assert!(String::from_utf8_lossy(&raw.body).contains(&task.to_string()));
}

//! Two sites in one sbsim: two clusters replicating to each other, every replication verb
//! through the control-plane client, a 12-move chain alternating sites and a looping pair.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::json;
use simplyblock_controlplane::*;

use crate::common::*;

/// One site: its cluster, its pool, and its replication target towards the other site.
#[derive(Clone, Copy)]
struct Site {
    cluster: Uuid,
    pool: Uuid,
    target: Uuid,
}

struct Sites {
    env: Env,
    a: Site,
    b: Site,
}

impl Sites {
    fn other(&self, cluster: Uuid) -> Site {
        if cluster == self.a.cluster {
            self.b
        } else {
            self.a
        }
    }

    fn site(&self, cluster: Uuid) -> Site {
        if cluster == self.a.cluster {
            self.a
        } else {
            self.b
        }
    }
}

/// Site A on workers w1, w2 and site B on w3, w4, each with a pool and a target towards
/// the other.
async fn two_sites() -> Sites {
    two_sites_with(false).await.0
}

/// [`two_sites`], with volume data kept as files in the returned directory when `files`.
async fn two_sites_with(files: bool) -> (Sites, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("volumes");
    let mut cfg = config(dir.path(), &fleet_yaml(4, 4));
    if files {
        cfg.volume_files = Some(data.clone());
    }
    let env = start_with(dir, cfg).await;
    let c = &env.client;
    let a = active_cluster(c, "site-a", 2).await;
    let b = c
        .create_cluster(&ClusterCreate::new("site-b", 10, 4))
        .await
        .expect("create site B");
    for w in ["w3", "w4"] {
        c.add_storage_node(b.id, &StorageNodeAdd::new(snode_address(w), "eth0"))
            .await
            .expect("add a node to site B");
    }
    eventually("site B nodes online", || async {
        let n = c.list_storage_nodes(b.id).await.ok()?;
        (n.len() == 2 && n.iter().all(|n| n.status == NodeStatus::Online)).then_some(())
    })
    .await;
    c.activate_cluster(b.id).await.expect("activate site B");
    eventually("site B active", || async {
        (c.get_cluster(b.id).await.ok()?.status == ClusterStatus::Active).then_some(())
    })
    .await;
    let b = b.id;
    let mut pools = Vec::new();
    for (cluster, name) in [(a, "pool-a"), (b, "pool-b")] {
        let p = c
            .create_pool(
                cluster,
                &PoolCreate {
                    name: name.into(),
                    ..Default::default()
                },
            )
            .await
            .expect("pool");
        pools.push(p.id);
    }
    let mut targets = Vec::new();
    for (from, to, pool) in [(a, b, pools[1]), (b, a, pools[0])] {
        let t = c
            .create_replication_target(
                from,
                &ReplicationTargetCreate {
                    target_name: format!("to-{to}"),
                    target_cluster_id: to,
                    target_pool_id: Some(pool),
                    timeout_sec: None,
                },
            )
            .await
            .expect("target");
        targets.push(t.id);
    }
    let sites = Sites {
        env,
        a: Site {
            cluster: a,
            pool: pools[0],
            target: targets[0],
        },
        b: Site {
            cluster: b,
            pool: pools[1],
            target: targets[1],
        },
    };
    (sites, data)
}

/// Start replicating `vol` of `site` towards the other site, trigger a snapshot and wait
/// for the replica; returns it.
async fn protect(s: &Sites, site: Site, vol: Uuid) -> Uuid {
    let c = &s.env.client;
    let other = s.other(site.cluster);
    c.start_volume_replication(
        site.cluster,
        site.pool,
        vol,
        &ReplicationStart {
            replication_cluster_id: Some(other.cluster),
            ..Default::default()
        },
    )
    .await
    .expect("start replication");
    c.volume_replication_action(site.cluster, site.pool, vol, "trigger")
        .await
        .expect("trigger");
    eventually("the replica exists", || async {
        let r = c
            .volume_replication(site.cluster, site.pool, vol)
            .await
            .ok()?;
        r.target_lvol_id.filter(|_| r.is_source)
    })
    .await
}

/// Freeze (0) or run (1000×) the sim clock.
async fn clock_scale(s: &Sites, scale: f64) {
    let r = reqwest::Client::new()
        .put(format!("{}/_sim/clock", s.env.server.url))
        .bearer_auth(TOKEN)
        .json(&json!({ "scale": scale }))
        .send()
        .await
        .expect("set the clock");
    assert!(r.status().is_success(), "{}", r.status());
}

async fn advance(s: &Sites, seconds: f64) {
    let r = reqwest::Client::new()
        .post(format!("{}/_sim/clock/advance", s.env.server.url))
        .bearer_auth(TOKEN)
        .json(&json!({ "seconds": seconds }))
        .send()
        .await
        .expect("advance the clock");
    assert!(r.status().is_success(), "{}", r.status());
}

/// Let sim time pass five seconds at a time until `check` yields, and fail naming `what`
/// once `budget` of sim time has passed without it. Each advance carries out everything
/// due before it answers, so the budget, not the machine's speed, decides: a loaded run
/// sees the same moments as an idle one.
async fn pass_until<T>(
    s: &Sites,
    what: &str,
    budget: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    const STEP: Duration = Duration::from_secs(5);
    let mut passed = Duration::ZERO;
    loop {
        advance(s, STEP.as_secs_f64()).await;
        passed += STEP;
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            passed < budget,
            "{what}: not seen after {budget:?} of sim time"
        );
    }
}

/// A volume `name` on site A with a policy replicating it to site B every minute (not
/// started); returns the volume.
async fn on_a_one_minute_policy(s: &Sites, name: &str, size: u64) -> Uuid {
    let c = &s.env.client;
    let policy = c
        .create_replication_policy(
            s.a.cluster,
            &ReplicationPolicyCreate {
                policy_name: "every-minute".into(),
                target_id: s.a.target,
                interval_min: 1,
                mode: None,
                keep_replicated: None,
            },
        )
        .await
        .expect("policy");
    let vol = c
        .create_volume(s.a.cluster, s.a.pool, &VolumeCreate::new(name, size))
        .await
        .expect("volume");
    c.update_volume(
        s.a.cluster,
        s.a.pool,
        vol,
        &VolumeUpdate {
            replication_policy_id: Some(Some(policy.id)),
            ..Default::default()
        },
    )
    .await
    .expect("attach the policy");
    vol
}

/// One advance of ten minutes runs each scheduled cycle of those ten minutes at its own
/// moment, as ten minutes at any clock speed would: ten cycles, not the one a jump
/// straight to the end would start.
#[tokio::test]
async fn one_long_advance_runs_every_cycle_of_the_time_it_passes() {
    let s = two_sites().await;
    let c = &s.env.client;
    let vol = on_a_one_minute_policy(&s, "tick", 100_000_000).await;
    clock_scale(&s, 0.0).await;
    c.start_volume_replication(s.a.cluster, s.a.pool, vol, &ReplicationStart::default())
        .await
        .expect("start");
    let done = async || {
        c.volume_replication_tasks(s.a.cluster, s.a.pool, vol)
            .await
            .expect("tasks")
            .iter()
            .filter(|t| t.function_name == "snapshot_replication" && t.status == TaskStatus::Done)
            .count()
    };
    let before = done().await;
    advance(&s, 600.0).await;
    let after = done().await;
    assert!(
        after - before >= 10,
        "ten minutes of a one-minute schedule ran {} cycle(s)",
        after - before
    );
}

/// The chain walk of the CSI driver's rules: from `(cluster, lvol)` follow each
/// relationship the volume is the source of to its own target, stopping where the
/// relationship's active volume is its target (or absent), at a volume that is no source,
/// or at a volume without a relationship. A revisited volume is a loop.
async fn walk(c: &Client, cluster: Uuid, lvol: Uuid) -> Result<Vec<(Uuid, Uuid)>, String> {
    let mut h = (cluster, lvol);
    let mut hops = vec![h];
    let mut visited = HashSet::new();
    for _ in 0..256 {
        if !visited.insert(h.1) {
            return Err(format!("replication chain of {lvol} loops at {}", h.1));
        }
        let rel = match c.replication_relationship(h.0, h.1).await {
            Ok(r) => r,
            Err(e) if e.status() == Some(404) => return Ok(hops),
            Err(e) => return Err(e.to_string()),
        };
        if !rel.is_source {
            return Ok(hops);
        }
        let (Some(tc), Some(tv)) = (rel.target_cluster_id, rel.target_lvol_id) else {
            return Err(format!("relationship {} has no target", rel.replication_id));
        };
        assert!(rel.target_pool_id.is_some(), "the lookup names the pool");
        h = (tc, tv);
        hops.push(h);
        if rel.active_lvol_id.is_none_or(|a| a == tv) {
            return Ok(hops);
        }
    }
    Err(format!("replication chain of {lvol} did not converge"))
}

/// Policies and targets between the sites; starting replication makes the relationship
/// and the replica on the other site, and the policy's schedule keeps snapshotting.
#[tokio::test]
async fn replication_between_two_sites_follows_the_policy_schedule() {
    let s = two_sites().await;
    let c = &s.env.client;
    let vol = on_a_one_minute_policy(&s, "app", 1_000_000_000).await;
    let policies = c
        .list_replication_policies(s.a.cluster)
        .await
        .expect("policies");
    assert_eq!(policies.len(), 1, "{policies:?}");
    assert_eq!(policies[0].interval_min, 1);
    let targets = c
        .list_replication_targets(s.b.cluster)
        .await
        .expect("targets");
    assert_eq!(targets.len(), 1);
    assert_eq!(targets[0].target_cluster_id, s.a.cluster);
    c.start_volume_replication(s.a.cluster, s.a.pool, vol, &ReplicationStart::default())
        .await
        .expect("start");
    // No trigger: the schedule alone snapshots, once per interval of sim time.
    let rel = eventually("two scheduled snapshots", || async {
        let tasks = c
            .volume_replication_tasks(s.a.cluster, s.a.pool, vol)
            .await
            .ok()?;
        let done = tasks
            .iter()
            .filter(|t| t.function_name == "snapshot_replication" && t.status == TaskStatus::Done)
            .count();
        let r = c
            .volume_replication(s.a.cluster, s.a.pool, vol)
            .await
            .ok()?;
        (done >= 2).then_some(r)
    })
    .await;
    assert_eq!(rel.state, ReplicationState::Replicating);
    assert_eq!(rel.direction, ReplicationDirection::ToTarget);
    assert_eq!(rel.source_cluster_id, Some(s.a.cluster));
    assert_eq!(rel.target_cluster_id, Some(s.b.cluster));
    assert!(rel.is_source);
    let replica = rel.target_lvol_id.expect("replica");
    let on_b = c
        .list_volumes(s.b.cluster, s.b.pool)
        .await
        .expect("B volumes");
    assert!(
        on_b.iter().any(|v| v.id == replica),
        "the replica lives on site B"
    );
    // Seen from the replica, the relationship is the same one, not as its source.
    let from_b = c
        .volume_replication(s.b.cluster, s.b.pool, replica)
        .await
        .expect("relationship from B");
    assert_eq!(from_b.replication_id, rel.replication_id);
    assert!(!from_b.is_source);
    let st = c
        .volume_replication_status(s.a.cluster, s.a.pool, vol)
        .await
        .expect("status");
    assert_eq!(st.role, "source");
    assert!(st.last_replicated_at.is_some());
    assert!(st.lag_budget_seconds.is_some());
}

/// Demote, planned and unplanned failover, failback, the typed status, and the reaping of
/// the old primary whose relationship still resolves.
#[tokio::test]
async fn demote_failover_failback_and_reaping_across_sites() {
    let s = two_sites().await;
    let c = &s.env.client;
    let (a, b) = (s.a, s.b);
    let vol = c
        .create_volume(a.cluster, a.pool, &VolumeCreate::new("db", 1_000_000_000))
        .await
        .expect("volume");
    let none = c
        .volume_replication_status(a.cluster, a.pool, vol)
        .await
        .expect("status without replication");
    assert_eq!(
        (none.role.as_str(), none.state.as_str()),
        ("none", "not_replicating")
    );
    assert_eq!(none.last_replicated_at, None);
    let lookup = c.replication_relationship(a.cluster, vol).await;
    assert_eq!(lookup.err().and_then(|e| e.status()), Some(404));

    let replica = protect(&s, a, vol).await;
    clock_scale(&s, 0.0).await;
    // A planned failover needs a demote first.
    let e = c
        .failover_volume_replication(b.cluster, b.pool, replica, Some(true))
        .await
        .expect_err("planned failover without a demote");
    assert_eq!(e.status(), Some(412), "{e}");
    // The demote converges on the sim clock: 202 until its final snapshot is across.
    assert_eq!(
        c.demote_volume_replication(a.cluster, a.pool, vol)
            .await
            .expect("demote"),
        DemoteOutcome::Converging
    );
    let e = c
        .failover_volume_replication(b.cluster, b.pool, replica, Some(true))
        .await
        .expect_err("planned failover while the demote converges");
    assert_eq!(e.status(), Some(409), "{e}");
    pass_until(
        &s,
        "the demote is done",
        Duration::from_secs(600),
        async || {
            (c.demote_volume_replication(a.cluster, a.pool, vol)
                .await
                .ok()?
                == DemoteOutcome::Done)
                .then_some(())
        },
    )
    .await;
    c.failover_volume_replication(b.cluster, b.pool, replica, Some(true))
        .await
        .expect("planned failover");
    let rel = c
        .volume_replication(a.cluster, a.pool, vol)
        .await
        .expect("relationship");
    assert_eq!(rel.state, ReplicationState::FailedOver);
    // Failing over again is idempotent.
    c.failover_volume_replication(b.cluster, b.pool, replica, Some(true))
        .await
        .expect("failover again");
    let on_b = c
        .volume_replication_status(b.cluster, b.pool, replica)
        .await
        .expect("replica status");
    assert_eq!(on_b.role, "failed_over");
    let on_a = c
        .volume_replication_status(a.cluster, a.pool, vol)
        .await
        .expect("old primary status");
    assert_eq!(on_a.role, "secondary");
    let looked = c
        .replication_relationship(b.cluster, replica)
        .await
        .expect("lookup from the replica");
    assert!(!looked.is_source);
    assert_eq!(looked.active_lvol_id, Some(replica));
    assert_eq!(looked.target_pool_id, Some(b.pool));

    // Failback: the replica sends its writes back to the source.
    let e = c
        .failback_volume_replication(
            b.cluster,
            b.pool,
            replica,
            &Failback {
                source_cluster_id: Some(b.cluster),
            },
        )
        .await
        .expect_err("failback naming the wrong source cluster");
    assert_eq!(e.status(), Some(400), "{e}");
    c.failback_volume_replication(
        b.cluster,
        b.pool,
        replica,
        &Failback {
            source_cluster_id: Some(a.cluster),
        },
    )
    .await
    .expect("failback");
    let rel = c
        .volume_replication(b.cluster, b.pool, replica)
        .await
        .expect("relationship");
    assert_eq!(rel.direction, ReplicationDirection::ToSource);
    assert_eq!(rel.state, ReplicationState::Replicating);
    assert!(
        c.volume_replication_status(b.cluster, b.pool, replica)
            .await
            .expect("status")
            .resyncing
    );

    // An unplanned failover needs no demote.
    clock_scale(&s, 1000.0).await;
    let other = c
        .create_volume(a.cluster, a.pool, &VolumeCreate::new("logs", 1_000_000_000))
        .await
        .expect("second volume");
    let other_replica = protect(&s, a, other).await;
    c.failover_volume_replication(b.cluster, b.pool, other_replica, Some(false))
        .await
        .expect("unplanned failover");
    assert_eq!(
        c.volume_replication(a.cluster, a.pool, other)
            .await
            .expect("relationship")
            .state,
        ReplicationState::FailedOver
    );

    // Reaping the old primary: soft-deleted, out of lists, readable, and its relationship
    // still resolves by id.
    c.delete_volume(a.cluster, a.pool, other)
        .await
        .expect("reap");
    let gone = eventually("the old primary is reaped", || async {
        let v = c.get_volume(a.cluster, a.pool, other).await.ok()?;
        (v.status == VolumeStatus::Deleted).then_some(v)
    })
    .await;
    assert_eq!(gone.id, other);
    let listed = c.list_volumes(a.cluster, a.pool).await.expect("A volumes");
    assert!(listed.iter().all(|v| v.id != other));
    let e = c
        .delete_volume(a.cluster, a.pool, other)
        .await
        .expect_err("deleting a reaped volume");
    assert_eq!(e.status(), Some(404));
    assert!(e.to_string().contains("Volume deleted"), "{e}");
    let looked = c
        .replication_relationship(a.cluster, other)
        .await
        .expect("lookup after the source is reaped");
    assert!(looked.is_source);
    assert_eq!(looked.target_lvol_id, Some(other_replica));
    assert_eq!(looked.active_lvol_id, Some(other_replica));
    assert_eq!(looked.target_pool_id, Some(b.pool));
}

/// Fail over and back 12 times, each move re-protecting the new primary towards the other
/// site after reaping the old one: the chain is walkable from every member to the active
/// end.
#[tokio::test]
async fn a_twelve_move_chain_alternating_sites_walks_to_its_active_end() {
    let s = two_sites().await;
    let c = &s.env.client;
    let first = c
        .create_volume(
            s.a.cluster,
            s.a.pool,
            &VolumeCreate::new("chain", 1_000_000_000),
        )
        .await
        .expect("volume");
    let mut members = vec![(s.a.cluster, first)];
    for _ in 0..12 {
        let (cluster, vol) = *members.last().expect("member");
        let here = s.site(cluster);
        let there = s.other(cluster);
        let replica = protect(&s, here, vol).await;
        c.failover_volume_replication(there.cluster, there.pool, replica, Some(false))
            .await
            .expect("failover");
        c.delete_volume(here.cluster, here.pool, vol)
            .await
            .expect("reap the old primary");
        eventually("the old primary is reaped", || async {
            let v = c.get_volume(here.cluster, here.pool, vol).await.ok()?;
            (v.status == VolumeStatus::Deleted).then_some(())
        })
        .await;
        members.push((there.cluster, replica));
    }
    let end = *members.last().expect("end");
    assert_eq!(end.0, s.a.cluster, "12 moves end on the site they began");
    for (i, (cluster, vol)) in members.iter().enumerate() {
        let hops = walk(c, *cluster, *vol).await.expect("walk");
        assert_eq!(hops.last(), Some(&end), "from member {i}");
        assert_eq!(hops, members[i..].to_vec(), "from member {i}");
    }
    for pair in members.windows(2) {
        assert_ne!(pair[0].0, pair[1].0, "each move changes site");
    }
}

/// A failed-over replica protected back towards its old source reuses it: two
/// relationships pointing at each other, which the chain walk detects from either member.
#[tokio::test]
async fn a_looping_pair_is_detected_by_the_chain_walk() {
    let s = two_sites().await;
    let c = &s.env.client;
    let vol = c
        .create_volume(
            s.a.cluster,
            s.a.pool,
            &VolumeCreate::new("pair", 1_000_000_000),
        )
        .await
        .expect("volume");
    let replica = protect(&s, s.a, vol).await;
    c.failover_volume_replication(s.b.cluster, s.b.pool, replica, None)
        .await
        .expect("failover to B");
    // Protect B's primary back towards A while A's old primary lives: it is the replica.
    let back = protect(&s, s.b, replica).await;
    assert_eq!(back, vol);
    c.failover_volume_replication(s.a.cluster, s.a.pool, vol, None)
        .await
        .expect("failover back to A");
    let ab = c
        .replication_relationship(s.a.cluster, vol)
        .await
        .expect("A's relationship");
    let ba = c
        .replication_relationship(s.b.cluster, replica)
        .await
        .expect("B's relationship");
    assert!(ab.is_source && ba.is_source);
    assert_eq!(ab.target_lvol_id, Some(replica));
    assert_eq!(ba.target_lvol_id, Some(vol));
    for (cluster, start) in [(s.a.cluster, vol), (s.b.cluster, replica)] {
        let e = walk(c, cluster, start).await.expect_err("a loop");
        assert!(e.contains("loops at"), "{e}");
    }
}

/// With the sim clock frozen, run `vol`'s open replication cycles to their end, so the
/// next one starts only when asked.
async fn quiesce(s: &Sites, site: Site, vol: Uuid) {
    let c = &s.env.client;
    clock_scale(s, 0.0).await;
    pass_until(
        s,
        "no open replication cycle",
        Duration::from_secs(600),
        async || {
            let tasks = c
                .volume_replication_tasks(site.cluster, site.pool, vol)
                .await
                .ok()?;
            tasks
                .iter()
                .all(|t| t.status == TaskStatus::Done)
                .then_some(())
        },
    )
    .await;
}

/// Trigger one more cycle of `vol`'s relationship and wait (advancing the sim clock) until
/// a snapshot newer than `than` landed; returns it.
async fn next_cycle(s: &Sites, site: Site, vol: Uuid, than: Option<Uuid>) -> ReplicatedSnapshot {
    let c = &s.env.client;
    c.volume_replication_action(site.cluster, site.pool, vol, "trigger")
        .await
        .expect("trigger");
    pass_until(
        s,
        "a newer replicated snapshot",
        Duration::from_secs(600),
        async || {
            c.latest_replicated_snapshot(site.cluster, vol)
                .await
                .ok()
                .flatten()
                .filter(|l| Some(l.snapshot_id) != than)
        },
    )
    .await
}

/// The latest replicated snapshot lives on the target as a snapshot of the replica, is
/// found from either side of the relationship, clones there, and rolls over as cycles
/// come, keeping the policy's count (a cloned one lingers in deletion).
#[tokio::test]
async fn the_latest_replicated_snapshot_is_on_the_target_and_clones_there() {
    let s = two_sites().await;
    let c = &s.env.client;
    let (a, b) = (s.a, s.b);
    let vol = c
        .create_volume(a.cluster, a.pool, &VolumeCreate::new("rp", 1_000_000_000))
        .await
        .expect("volume");
    assert_eq!(
        c.latest_replicated_snapshot(a.cluster, vol)
            .await
            .expect("no relationship yet"),
        None
    );
    let replica = protect(&s, a, vol).await;
    quiesce(&s, a, vol).await;
    let first = c
        .latest_replicated_snapshot(a.cluster, vol)
        .await
        .expect("latest")
        .expect("a snapshot landed with the replica");
    assert_eq!(
        (
            first.cluster_id,
            first.pool_id,
            first.lvol_id,
            first.source_lvol_id
        ),
        (b.cluster, b.pool, replica, vol)
    );
    assert!(first.created_at.is_some());
    assert_eq!(
        c.latest_replicated_snapshot(b.cluster, replica)
            .await
            .expect("from the target"),
        Some(first.clone())
    );
    assert_eq!(
        c.latest_replicated_snapshot(a.cluster, replica)
            .await
            .expect("the replica is not site A's"),
        None
    );
    let snap = c
        .get_snapshot(b.cluster, b.pool, first.snapshot_id)
        .await
        .expect("a snapshot of site B");
    assert_eq!(snap.status, SnapshotStatus::Online);
    let drill = c
        .create_volume_from_snapshot(
            b.cluster,
            b.pool,
            &VolumeClone {
                name: "drill".into(),
                snapshot_id: Some(first.snapshot_id),
                size: first.size,
                ..Default::default()
            },
        )
        .await
        .expect("clone the recovery point on site B");
    assert!(
        c.list_volumes(b.cluster, b.pool)
            .await
            .expect("B volumes")
            .iter()
            .any(|v| v.id == drill)
    );
    // Three more cycles: the default keeps three, so the first goes, softly (it has a clone).
    let mut last = first.snapshot_id;
    for _ in 0..3 {
        last = next_cycle(&s, a, vol, Some(last)).await.snapshot_id;
    }
    let snaps = c
        .list_snapshots(b.cluster, b.pool)
        .await
        .expect("B snapshots");
    let online: Vec<Uuid> = snaps
        .iter()
        .filter(|x| x.status == SnapshotStatus::Online)
        .map(|x| x.id)
        .collect();
    assert_eq!(online.len(), 3, "{snaps:?}");
    assert!(online.contains(&last) && !online.contains(&first.snapshot_id));
    assert_eq!(
        c.get_snapshot(b.cluster, b.pool, first.snapshot_id)
            .await
            .expect("the cloned snapshot lingers")
            .status,
        SnapshotStatus::InDeletion
    );
}

fn write_at(files: &std::path::Path, vol: Uuid, offset: u64, data: &[u8]) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(files.join(format!("{vol}.img")))
        .expect("open the volume file");
    f.seek(SeekFrom::Start(offset)).expect("seek");
    f.write_all(data).expect("write");
}

fn read_at(files: &std::path::Path, id: Uuid, offset: u64, len: usize) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(files.join(format!("{id}.img"))).expect("open the file");
    f.seek(SeekFrom::Start(offset)).expect("seek");
    let mut buf = vec![0; len];
    f.read_exact(&mut buf).expect("read");
    buf
}

/// With volume files, each cycle carries the source's data to the replica and its landed
/// snapshot: after a failover the replica reads what was written before the last cycle,
/// and a failback carries the replica's writes back to the source.
#[tokio::test]
async fn replication_cycles_carry_the_data_across_sites() {
    let (s, files) = two_sites_with(true).await;
    let c = &s.env.client;
    let (a, b) = (s.a, s.b);
    let vol = c
        .create_volume(a.cluster, a.pool, &VolumeCreate::new("data", 200_000_000))
        .await
        .expect("volume");
    write_at(&files, vol, 4096, b"first words");
    let replica = protect(&s, a, vol).await;
    quiesce(&s, a, vol).await;
    assert_eq!(read_at(&files, replica, 4096, 11), b"first words");
    let first = c
        .latest_replicated_snapshot(a.cluster, vol)
        .await
        .expect("latest")
        .expect("landed");
    write_at(&files, vol, 8 << 20, b"second words");
    let second = next_cycle(&s, a, vol, Some(first.snapshot_id)).await;
    assert_eq!(read_at(&files, replica, 8 << 20, 12), b"second words");
    assert_eq!(
        read_at(&files, second.snapshot_id, 8 << 20, 12),
        b"second words"
    );
    // The earlier snapshot keeps the data of its own cycle.
    assert_eq!(read_at(&files, first.snapshot_id, 8 << 20, 12), [0; 12]);

    c.failover_volume_replication(b.cluster, b.pool, replica, Some(false))
        .await
        .expect("failover to B");
    assert_eq!(read_at(&files, replica, 4096, 11), b"first words");
    assert_eq!(read_at(&files, replica, 8 << 20, 12), b"second words");

    // B serves and writes; failing back carries that to A's volume.
    write_at(&files, replica, 16 << 20, b"written on B");
    c.failback_volume_replication(
        b.cluster,
        b.pool,
        replica,
        &Failback {
            source_cluster_id: Some(a.cluster),
        },
    )
    .await
    .expect("failback");
    let back = next_cycle(&s, a, vol, Some(second.snapshot_id)).await;
    assert_eq!((back.cluster_id, back.lvol_id), (a.cluster, vol));
    assert_eq!(back.source_lvol_id, replica);
    assert_eq!(read_at(&files, vol, 16 << 20, 12), b"written on B");
}

/// Volumes created with `consistency_group` join one group pinned to the first member's
/// node (20 at most); group snapshots take every open member as one numbered generation;
/// a removed member stays listed with its `removed_seq`.
#[tokio::test]
async fn consistency_groups_pin_their_members_and_snapshot_them_together() {
    let s = two_sites().await;
    let c = &s.env.client;
    let a = s.a;
    let in_group = |name: &str| VolumeCreate {
        consistency_group: Some("db".into()),
        ..VolumeCreate::new(name, 1_000_000_000)
    };
    let v1 = c
        .create_volume(a.cluster, a.pool, &in_group("db-0"))
        .await
        .expect("first member");
    let v2 = c
        .create_volume(a.cluster, a.pool, &in_group("db-1"))
        .await
        .expect("second member");
    c.create_volume(
        a.cluster,
        a.pool,
        &VolumeCreate::new("loner", 1_000_000_000),
    )
    .await
    .expect("a volume of no group");
    let g = c
        .find_consistency_group(a.cluster, "db")
        .await
        .expect("groups")
        .expect("the group exists");
    assert_eq!(g.member_count, 2);
    assert_eq!(g.cluster_id, a.cluster);
    let node_of = |v| async move {
        c.get_volume(a.cluster, a.pool, v)
            .await
            .expect("volume")
            .storage_node_id
    };
    assert_eq!(node_of(v1).await, g.node_id);
    assert_eq!(node_of(v2).await, g.node_id);
    assert_eq!(
        c.list_consistency_groups(a.cluster, None)
            .await
            .expect("all groups")
            .len(),
        1
    );
    assert!(
        c.find_consistency_group(s.b.cluster, "db")
            .await
            .expect("B's groups")
            .is_none()
    );

    let snap = c
        .create_group_snapshot(a.cluster, g.id)
        .await
        .expect("group snapshot");
    assert_eq!(snap.group_seq, 1);
    let taken: Vec<Uuid> = snap.members.iter().map(|m| m.lvol_id).collect();
    assert_eq!(taken, vec![v1, v2]);
    for m in &snap.members {
        let x = c
            .get_snapshot(a.cluster, a.pool, m.snapshot_id)
            .await
            .expect("a member's snapshot");
        assert_eq!(x.status, SnapshotStatus::Online);
    }
    assert_eq!(
        c.get_group_snapshot(a.cluster, g.id, 1)
            .await
            .expect("by number"),
        snap
    );

    c.remove_consistency_group_member(a.cluster, g.id, v2)
        .await
        .expect("remove a member");
    let e = c
        .remove_consistency_group_member(a.cluster, g.id, v2)
        .await
        .expect_err("removed already");
    assert_eq!(e.status(), Some(404), "{e}");
    let members = c
        .consistency_group_members(a.cluster, g.id)
        .await
        .expect("members");
    assert_eq!(members.len(), 2);
    assert!(members[0].is_open() && members[0].lvol_id == v1);
    assert!(!members[1].is_open() && members[1].lvol_id == v2);
    let second = c
        .create_group_snapshot(a.cluster, g.id)
        .await
        .expect("second group snapshot");
    assert_eq!(second.group_seq, 2);
    assert_eq!(second.members.len(), 1);

    c.delete_group_snapshot(a.cluster, g.id, 1)
        .await
        .expect("delete a group snapshot");
    for seq in [1, 7] {
        let e = c
            .get_group_snapshot(a.cluster, g.id, seq)
            .await
            .expect_err("no such group snapshot");
        assert_eq!(e.status(), Some(404), "{e}");
    }
    let e = c
        .get_snapshot(a.cluster, a.pool, snap.members[0].snapshot_id)
        .await
        .expect_err("the member snapshot went with it");
    assert_eq!(e.status(), Some(404), "{e}");
    assert_eq!(
        c.list_group_snapshots(a.cluster, g.id)
            .await
            .expect("group snapshots")
            .iter()
            .map(|x| x.group_seq)
            .collect::<Vec<_>>(),
        vec![2]
    );

    // The cap: 20 open members (v1 and 19 more), the 21st is refused.
    for i in 2..21 {
        c.create_volume(a.cluster, a.pool, &in_group(&format!("db-{i}")))
            .await
            .expect("a member below the cap");
    }
    let e = c
        .create_volume(a.cluster, a.pool, &in_group("db-21"))
        .await
        .expect_err("a full group");
    assert_eq!(e.status(), Some(500), "{e}");
    let resolved = c
        .resolve_consistency_group(a.cluster, g.id)
        .await
        .expect("resolution");
    assert_eq!(resolved.named.id, g.id);
    assert_eq!(resolved.active.id, g.id);
    assert_eq!(resolved.named.member_count, 20);
}

/// A group replicates with one policy, one generation at a time: the policy's latest
/// generation has every member's snapshot on the target; the group fails over as one,
/// the group of its replicas on the target serving in its stead, and fails back.
#[tokio::test]
async fn a_consistency_group_replicates_fails_over_and_back_as_one() {
    let s = two_sites().await;
    let c = &s.env.client;
    let (a, b) = (s.a, s.b);
    let policy = |name: &str| ReplicationPolicyCreate {
        policy_name: name.into(),
        target_id: a.target,
        interval_min: 1,
        mode: None,
        keep_replicated: None,
    };
    let p = c
        .create_replication_policy(a.cluster, &policy("group"))
        .await
        .expect("policy");
    let other = c
        .create_replication_policy(a.cluster, &policy("other"))
        .await
        .expect("another policy");
    let mut vols = Vec::new();
    for i in 0..2 {
        let v = c
            .create_volume(
                a.cluster,
                a.pool,
                &VolumeCreate {
                    consistency_group: Some("app".into()),
                    ..VolumeCreate::new(format!("app-{i}"), 1_000_000_000)
                },
            )
            .await
            .expect("member");
        vols.push(v);
    }
    let g = c
        .find_consistency_group(a.cluster, "app")
        .await
        .expect("groups")
        .expect("group");
    assert_eq!(
        c.latest_replicated_generation(a.cluster, p.id)
            .await
            .expect("no group replicates yet"),
        None
    );
    c.set_group_replication(a.cluster, g.id, Some(p.id))
        .await
        .expect("attach the policy");
    c.set_group_replication(a.cluster, g.id, Some(p.id))
        .await
        .expect("attaching it again");
    let e = c
        .set_group_replication(a.cluster, g.id, Some(other.id))
        .await
        .expect_err("another policy");
    assert_eq!(e.status(), Some(412), "{e}");
    let listed = c
        .list_replication_policies(a.cluster)
        .await
        .expect("policies");
    let mine = listed.iter().find(|x| x.id == p.id).expect("the policy");
    assert!(mine.consistency_group);
    assert_eq!(mine.group_lvs_name.as_deref(), Some(g.lvs_name.as_str()));
    assert_eq!(mine.group_node_id, Some(g.node_id));
    assert!(
        !listed
            .iter()
            .find(|x| x.id == other.id)
            .expect("other")
            .consistency_group
    );

    let generation = eventually("a complete generation", || async {
        c.latest_replicated_generation(a.cluster, p.id)
            .await
            .ok()
            .flatten()
    })
    .await;
    let mut sources: Vec<Uuid> = generation
        .members
        .iter()
        .map(|m| m.source_lvol_id)
        .collect();
    sources.sort();
    let mut expected = vols.clone();
    expected.sort();
    assert_eq!(sources, expected);
    for m in &generation.members {
        assert_eq!((m.cluster_id, m.pool_id), (b.cluster, b.pool));
        assert_eq!(m.group_seq, generation.group_seq);
        let snap = c
            .get_snapshot(b.cluster, b.pool, m.snapshot_id)
            .await
            .expect("the member's snapshot on B");
        assert_eq!(snap.status, SnapshotStatus::Online);
    }
    assert_eq!(
        c.group_replication_status(a.cluster, g.id)
            .await
            .expect("status")
            .role,
        "source"
    );
    eventually("the group is demoted", || async {
        (c.demote_group_replication(a.cluster, g.id).await.ok()? == DemoteOutcome::Done)
            .then_some(())
    })
    .await;

    let results = c
        .failover_group_replication(a.cluster, g.id)
        .await
        .expect("group failover");
    assert_eq!(results.len(), 2);
    assert!(
        results
            .iter()
            .all(|r| r.status == FailoverStatus::FailedOver),
        "{results:?}"
    );
    let again = c
        .failover_group_replication(a.cluster, g.id)
        .await
        .expect("failover again");
    assert!(again.iter().all(|r| r.status == FailoverStatus::Skipped));
    let on_b = c
        .find_consistency_group(b.cluster, "app")
        .await
        .expect("B's groups")
        .expect("the replicas' group on B");
    assert_eq!(on_b.member_count, 2);
    let resolved = c
        .resolve_consistency_group(a.cluster, g.id)
        .await
        .expect("resolution");
    assert_eq!(resolved.named.id, g.id);
    assert_eq!(
        (resolved.active.id, resolved.active.cluster_id),
        (on_b.id, b.cluster)
    );
    assert_eq!(
        c.resolve_consistency_group(b.cluster, on_b.id)
            .await
            .expect("B resolves to itself")
            .active
            .id,
        on_b.id
    );
    assert_eq!(
        c.group_replication_status(b.cluster, on_b.id)
            .await
            .expect("B status")
            .role,
        "failed_over"
    );
    assert_eq!(
        c.group_replication_status(a.cluster, g.id)
            .await
            .expect("A status")
            .role,
        "secondary"
    );

    let e = c
        .failback_group_replication(
            b.cluster,
            on_b.id,
            &Failback {
                source_cluster_id: Some(b.cluster),
            },
        )
        .await
        .expect_err("the wrong source cluster");
    assert_eq!(e.status(), Some(400), "{e}");
    c.failback_group_replication(
        b.cluster,
        on_b.id,
        &Failback {
            source_cluster_id: Some(a.cluster),
        },
    )
    .await
    .expect("failback");
    assert!(
        c.group_replication_status(b.cluster, on_b.id)
            .await
            .expect("status")
            .resyncing
    );

    c.set_group_replication(a.cluster, g.id, None)
        .await
        .expect("detach");
    assert_eq!(
        c.list_consistency_groups(a.cluster, Some("app"))
            .await
            .expect("groups")[0]
            .policy_id,
        None
    );
}

/// The names of the files under the volume-files directory.
fn files_in(dir: &std::path::Path) -> std::collections::BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("the volume files")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// Delete `vol`, a replication source, and wait (advancing the sim clock) until it is
/// reaped.
async fn reap(s: &Sites, site: Site, vol: Uuid) {
    let c = &s.env.client;
    c.delete_volume(site.cluster, site.pool, vol)
        .await
        .expect("delete the old primary");
    pass_until(
        s,
        "the old primary is reaped",
        Duration::from_secs(600),
        async || {
            let v = c.get_volume(site.cluster, site.pool, vol).await.ok()?;
            (v.status == VolumeStatus::Deleted).then_some(())
        },
    )
    .await;
}

/// A reaped volume on the receiving side of a relationship that still resolves takes no
/// more replicated snapshots: the failed-over replica feeds its writes back to its source,
/// the source is reaped, and a triggered cycle finishes without landing a snapshot there,
/// without keeping one pending and without leaving its staged data behind as a file.
#[tokio::test]
async fn a_reaped_receiving_volume_takes_no_more_replicated_snapshots() {
    let (s, files) = two_sites_with(true).await;
    let c = &s.env.client;
    let (a, b) = (s.a, s.b);
    let vol = c
        .create_volume(a.cluster, a.pool, &VolumeCreate::new("fed", 200_000_000))
        .await
        .expect("volume");
    let replica = protect(&s, a, vol).await;
    c.failover_volume_replication(b.cluster, b.pool, replica, Some(false))
        .await
        .expect("failover to B");
    c.failback_volume_replication(
        b.cluster,
        b.pool,
        replica,
        &Failback {
            source_cluster_id: Some(a.cluster),
        },
    )
    .await
    .expect("failback: B sends, A receives");
    quiesce(&s, a, vol).await;
    // While A lives, a cycle lands on it: the negative below is about the reaping alone.
    let before = c
        .latest_replicated_snapshot(b.cluster, replica)
        .await
        .expect("latest")
        .map(|l| l.snapshot_id);
    write_at(&files, replica, 8 << 20, b"written on B");
    let landed = next_cycle(&s, b, replica, before).await;
    assert_eq!((landed.cluster_id, landed.lvol_id), (a.cluster, vol));
    assert_eq!(read_at(&files, vol, 8 << 20, 12), b"written on B");

    reap(&s, a, vol).await;
    let a_snapshots = c
        .list_snapshots(a.cluster, a.pool)
        .await
        .expect("A snapshots");
    let files_before = files_in(&files);
    let cycles = c
        .volume_replication_tasks(b.cluster, b.pool, replica)
        .await
        .expect("tasks")
        .len();
    write_at(&files, replica, 16 << 20, b"after the reap");
    c.volume_replication_action(b.cluster, b.pool, replica, "trigger")
        .await
        .expect("trigger a cycle towards the reaped source");
    pass_until(
        &s,
        "the triggered cycle is done",
        Duration::from_secs(600),
        async || {
            let tasks = c
                .volume_replication_tasks(b.cluster, b.pool, replica)
                .await
                .ok()?;
            // At least the triggered cycle: the schedule may start more while time
            // advances, and each of them must land nothing either.
            (tasks.len() > cycles && tasks.iter().all(|t| t.status == TaskStatus::Done))
                .then_some(())
        },
    )
    .await;

    assert_eq!(
        c.latest_replicated_snapshot(b.cluster, replica)
            .await
            .expect("latest")
            .map(|l| l.snapshot_id),
        Some(landed.snapshot_id),
        "nothing newer landed"
    );
    assert_eq!(
        c.list_snapshots(a.cluster, a.pool)
            .await
            .expect("A snapshots"),
        a_snapshots,
        "no snapshot of the reaped source"
    );
    assert_eq!(read_at(&files, vol, 16 << 20, 14), [0; 14]);
    let pending = s.env.server.sim.read(|t, _| {
        t.replications
            .get(&vol.to_string())
            .map(|r| r.pending_snapshot)
    });
    assert_eq!(
        pending,
        Some(None),
        "the relationship keeps no pending snapshot"
    );
    assert_eq!(
        files_in(&files),
        files_before,
        "no staged data is left behind"
    );
}

/// A replica that failed over and was protected again, its old source reaped (so towards
/// a new replica on the old site), is the last hop of the chain; failing it over acts on
/// its own relationship, not on the one it is the replica of: a planned failover needs its
/// own demote, and then its new replica serves at the end of the chain.
#[tokio::test]
async fn failing_over_a_reprotected_replica_acts_on_its_own_relationship() {
    let s = two_sites().await;
    let c = &s.env.client;
    let (a, b) = (s.a, s.b);
    let vol = c
        .create_volume(a.cluster, a.pool, &VolumeCreate::new("home", 1_000_000_000))
        .await
        .expect("volume");
    let replica = protect(&s, a, vol).await;
    c.failover_volume_replication(b.cluster, b.pool, replica, Some(false))
        .await
        .expect("failover to B");
    reap(&s, a, vol).await;
    let back = protect(&s, b, replica).await;
    assert_ne!(back, vol, "a reaped source is not reused as the replica");
    assert_eq!(
        walk(c, a.cluster, vol).await,
        Ok(vec![(a.cluster, vol), (b.cluster, replica)]),
        "B serves while it replicates back: it is the chain's last hop"
    );

    clock_scale(&s, 0.0).await;
    let e = c
        .failover_volume_replication(b.cluster, b.pool, replica, Some(true))
        .await
        .expect_err("a planned failover before B is demoted");
    assert_eq!(e.status(), Some(412), "{e}");
    assert!(
        e.to_string().contains(&replica.to_string()),
        "the demote asked for is B's: {e}"
    );
    pass_until(
        &s,
        "B's demote is done",
        Duration::from_secs(600),
        async || {
            (c.demote_volume_replication(b.cluster, b.pool, replica)
                .await
                .ok()?
                == DemoteOutcome::Done)
                .then_some(())
        },
    )
    .await;
    c.failover_volume_replication(b.cluster, b.pool, replica, Some(true))
        .await
        .expect("planned failback to A");

    let own = c
        .volume_replication(b.cluster, b.pool, replica)
        .await
        .expect("B's relationship");
    assert!(own.is_source);
    assert_eq!(own.target_lvol_id, Some(back));
    assert_eq!(own.state, ReplicationState::FailedOver);
    let first = c
        .replication_relationship(a.cluster, vol)
        .await
        .expect("the first relationship still resolves");
    assert_eq!(first.state, ReplicationState::FailedOver);
    assert_eq!(first.active_lvol_id, Some(back));
    let chain = vec![(a.cluster, vol), (b.cluster, replica), (a.cluster, back)];
    assert_eq!(walk(c, a.cluster, vol).await, Ok(chain.clone()));
    assert_eq!(walk(c, b.cluster, replica).await, Ok(chain[1..].to_vec()));
    let role = |cluster, pool, v| async move {
        c.volume_replication_status(cluster, pool, v)
            .await
            .expect("status")
            .role
    };
    assert_eq!(role(a.cluster, a.pool, back).await, "failed_over");
    assert_eq!(role(b.cluster, b.pool, replica).await, "secondary");
    // Again is done, and moves nothing.
    c.failover_volume_replication(b.cluster, b.pool, replica, Some(true))
        .await
        .expect("failing over again");
    assert_eq!(walk(c, a.cluster, vol).await, Ok(chain));
}

//! Synchronous replication between the two sites of one cluster: nodes are added with a
//! site, a volume is served on its primary node's site, and demote and promote with
//! `?site=` move it between them with the control plane's status codes.

use simplyblock_controlplane::*;

use crate::common::*;

/// Add the workers' nodes to `cluster` in `site`; returns their ids.
async fn add_site(c: &Client, cluster: Uuid, site: &str, workers: &[&str]) -> Vec<Uuid> {
    let before: Vec<Uuid> = c
        .list_storage_nodes(cluster)
        .await
        .expect("nodes")
        .iter()
        .map(|n| n.id)
        .collect();
    for w in workers {
        c.add_storage_node(
            cluster,
            &StorageNodeAdd {
                site: Some(site.into()),
                ..StorageNodeAdd::new(snode_address(w), "eth0")
            },
        )
        .await
        .expect("node add");
    }
    eventually("the site's nodes online", || async {
        let nodes = c.list_storage_nodes(cluster).await.ok()?;
        let new: Vec<Uuid> = nodes
            .iter()
            .filter(|n| !before.contains(&n.id) && n.status == NodeStatus::Online)
            .map(|n| n.id)
            .collect();
        (new.len() == workers.len()).then_some(new)
    })
    .await
}

#[tokio::test]
async fn sync_demote_and_promote_move_a_volume_between_sites() {
    let env = start(4, 4).await;
    let c = &env.client;
    let cluster = c
        .create_cluster(&ClusterCreate {
            sync_replication: true,
            ..ClusterCreate::new("stretched", 10, 4)
        })
        .await
        .expect("cluster")
        .id;
    let east = add_site(c, cluster, "east", &["w1", "w2"]).await;
    let west = add_site(c, cluster, "west", &["w3", "w4"]).await;
    c.activate_cluster(cluster).await.expect("activate");
    eventually("cluster active", || async {
        (c.get_cluster(cluster).await.ok()?.status == ClusterStatus::Active).then_some(())
    })
    .await;
    let pool = c
        .create_pool(
            cluster,
            &PoolCreate {
                name: "p".into(),
                ..Default::default()
            },
        )
        .await
        .expect("pool")
        .id;
    let vol = c
        .create_volume(
            cluster,
            pool,
            &VolumeCreate {
                host_id: Some(east[0].to_string()),
                ndcs: 1,
                npcs: 1,
                ..VolumeCreate::new("mirrored", 1_000_000_000)
            },
        )
        .await
        .expect("volume");
    let serving = || async {
        c.get_volume(cluster, pool, vol)
            .await
            .expect("volume")
            .storage_node_id
    };
    assert_eq!(serving().await, east[0]);
    let st = c
        .volume_replication_status(cluster, pool, vol)
        .await
        .expect("status");
    assert_eq!((st.role.as_str(), st.state.as_str()), ("source", "in_sync"));
    assert_eq!(st.lag_seconds, Some(0.0));

    let e = c
        .sync_demote_volume(cluster, pool, vol, "north")
        .await
        .expect_err("a site the cluster does not have");
    assert_eq!(e.status(), Some(400), "{e}");
    assert!(e.message().contains("north"), "{e}");
    let e = c
        .sync_promote_volume(cluster, pool, vol, "west", true)
        .await
        .expect_err("planned promote before the demote");
    assert_eq!(e.status(), Some(409), "{e}");
    assert!(e.message().contains("demote it there first"), "{e}");

    // Not served on west: nothing to fence there.
    c.sync_demote_volume(cluster, pool, vol, "west")
        .await
        .expect("demote where it is not served");
    assert_eq!(serving().await, east[0]);
    for _ in 0..2 {
        c.sync_demote_volume(cluster, pool, vol, "east")
            .await
            .expect("demote on its site, twice");
    }
    assert_eq!(
        c.volume_replication_status(cluster, pool, vol)
            .await
            .expect("status")
            .role,
        "secondary"
    );
    let promoted = c
        .sync_promote_volume(cluster, pool, vol, "west", true)
        .await
        .expect("planned promote on west");
    assert_eq!(promoted.lvol_id, vol);
    assert!(!promoted.connection_strings.is_empty());
    let now = serving().await;
    assert!(west.contains(&now), "{now} is not a west node");
    let again = c
        .sync_promote_volume(cluster, pool, vol, "west", true)
        .await
        .expect("promote where it is served");
    assert_eq!(again.lvol_id, vol);
    assert_eq!(serving().await, now);

    // The serving site goes away: a planned promote is refused with 412, a forced one
    // takes over.
    c.suspend_storage_node(cluster, now, false)
        .await
        .expect("suspend west's node");
    let e = c
        .sync_promote_volume(cluster, pool, vol, "east", true)
        .await
        .expect_err("the peer is offline");
    assert_eq!(e.status(), Some(412), "{e}");
    c.sync_promote_volume(cluster, pool, vol, "east", false)
        .await
        .expect("forced promote");
    assert!(east.contains(&serving().await));
    // West still has an online node: the mirror holds.
    assert_eq!(
        c.volume_replication_status(cluster, pool, vol)
            .await
            .expect("status")
            .state,
        "in_sync"
    );
    let other_west: Vec<Uuid> = west.iter().copied().filter(|n| *n != now).collect();
    for n in other_west {
        c.suspend_storage_node(cluster, n, false)
            .await
            .expect("suspend the rest of west");
    }
    assert_eq!(
        c.volume_replication_status(cluster, pool, vol)
            .await
            .expect("status")
            .state,
        "degraded"
    );
    let e = c
        .sync_demote_volume(cluster, pool, vol, "east")
        .await
        .expect_err("no site to take over");
    assert_eq!(e.status(), Some(409), "{e}");
    let e = c
        .sync_demote_volume(cluster, pool, vol, "")
        .await
        .expect_err("no site");
    assert_eq!(e.status(), Some(400), "{e}");
}

/// The group forms act on every member of a consistency group.
#[tokio::test]
async fn sync_group_demote_and_promote_act_on_every_member() {
    let env = start(4, 4).await;
    let c = &env.client;
    let cluster = c
        .create_cluster(&ClusterCreate {
            sync_replication: true,
            ..ClusterCreate::new("stretched", 10, 4)
        })
        .await
        .expect("cluster")
        .id;
    let east = add_site(c, cluster, "east", &["w1", "w2"]).await;
    let west = add_site(c, cluster, "west", &["w3", "w4"]).await;
    c.activate_cluster(cluster).await.expect("activate");
    eventually("cluster active", || async {
        (c.get_cluster(cluster).await.ok()?.status == ClusterStatus::Active).then_some(())
    })
    .await;
    let pool = c
        .create_pool(
            cluster,
            &PoolCreate {
                name: "p".into(),
                ..Default::default()
            },
        )
        .await
        .expect("pool")
        .id;
    let mut vols = Vec::new();
    for i in 0..2 {
        let v = c
            .create_volume(
                cluster,
                pool,
                &VolumeCreate {
                    host_id: Some(east[0].to_string()),
                    consistency_group: Some("pair".into()),
                    ndcs: 1,
                    npcs: 1,
                    ..VolumeCreate::new(format!("pair-{i}"), 1_000_000_000)
                },
            )
            .await
            .expect("member");
        vols.push(v);
    }
    let g = c
        .find_consistency_group(cluster, "pair")
        .await
        .expect("groups")
        .expect("group");
    let e = c
        .sync_promote_group(cluster, g.id, "west", true)
        .await
        .expect_err("planned promote before the demote");
    assert_eq!(e.status(), Some(409), "{e}");
    c.sync_demote_group(cluster, g.id, "east")
        .await
        .expect("demote the group on east");
    let promoted = c
        .sync_promote_group(cluster, g.id, "west", true)
        .await
        .expect("promote the group on west");
    assert_eq!(
        promoted
            .members
            .iter()
            .map(|m| m.lvol_id)
            .collect::<Vec<_>>(),
        vols
    );
    for v in vols {
        let node = c
            .get_volume(cluster, pool, v)
            .await
            .expect("member")
            .storage_node_id;
        assert!(west.contains(&node), "member {v} is not on west");
    }
    let e = c
        .sync_demote_group(cluster, g.id, "south")
        .await
        .expect_err("a site the cluster does not have");
    assert_eq!(e.status(), Some(400), "{e}");
}

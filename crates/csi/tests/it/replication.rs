//! The csi-addons Replication service end to end: the csi-addons client on the driver's
//! socket, one sbsim serving two sites, each site's driver with a CSI secret that lists
//! both clusters and marks its own `local`. The handle every call names is the original
//! PersistentVolume's, as Ramen restores it on either site; the driver walks the chain.

use std::collections::HashMap;
use std::path::Path;

use simplyblock_controlplane::{
    ReplicationDirection, ReplicationPolicyCreate, Uuid, VolumeCreate, VolumeStatus,
};
use simplyblock_csi::proto::csi::v1 as csi;
use simplyblock_csi::proto::csi::v1::node_client::NodeClient;
use simplyblock_csi::proto::csiaddons::replication as repl;
use simplyblock_csi::replication_params::{METHOD, POLICY_ID, SITE};
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::common::*;
use crate::sites::*;
use repl::controller_client::ControllerClient;
use repl::replication_source::{Type, VolumeGroupSource, VolumeSource};

type Repl = ControllerClient<Channel>;

fn source(handle: &str) -> Option<repl::ReplicationSource> {
    Some(repl::ReplicationSource {
        r#type: Some(Type::Volume(VolumeSource {
            volume_id: handle.into(),
        })),
    })
}

fn group_source(handle: &str) -> Option<repl::ReplicationSource> {
    Some(repl::ReplicationSource {
        r#type: Some(Type::Volumegroup(VolumeGroupSource {
            volume_group_id: handle.into(),
        })),
    })
}

fn class(kv: &[(&str, &str)]) -> HashMap<String, String> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn enable(c: &mut Repl, h: &str, params: HashMap<String, String>) -> Result<(), Status> {
    c.enable_volume_replication(repl::EnableVolumeReplicationRequest {
        parameters: params,
        replication_source: source(h),
        ..Default::default()
    })
    .await
    .map(|_| ())
}

async fn disable(c: &mut Repl, h: &str, params: HashMap<String, String>) -> Result<(), Status> {
    c.disable_volume_replication(repl::DisableVolumeReplicationRequest {
        parameters: params,
        replication_source: source(h),
        ..Default::default()
    })
    .await
    .map(|_| ())
}

async fn promote(c: &mut Repl, h: &str, force: bool) -> Result<(), Status> {
    c.promote_volume(repl::PromoteVolumeRequest {
        force,
        replication_source: source(h),
        ..Default::default()
    })
    .await
    .map(|_| ())
}

async fn demote(c: &mut Repl, h: &str) -> Result<(), Status> {
    c.demote_volume(repl::DemoteVolumeRequest {
        replication_source: source(h),
        ..Default::default()
    })
    .await
    .map(|_| ())
}

async fn resync(c: &mut Repl, h: &str) -> Result<bool, Status> {
    c.resync_volume(repl::ResyncVolumeRequest {
        replication_source: source(h),
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner().ready)
}

async fn info(c: &mut Repl, h: &str) -> Result<repl::GetVolumeReplicationInfoResponse, Status> {
    c.get_volume_replication_info(repl::GetVolumeReplicationInfoRequest {
        replication_source: source(h),
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner())
}

fn code<T: std::fmt::Debug>(r: Result<T, Status>) -> (Code, String) {
    let s = r.expect_err("the call is refused");
    (s.code(), s.message().to_string())
}

async fn policy(s: &TwoSites, site: &Site, name: &str) -> Uuid {
    s.client
        .create_replication_policy(
            site.cluster,
            &ReplicationPolicyCreate {
                policy_name: name.into(),
                target_id: site.target,
                interval_min: 1,
                mode: None,
                keep_replicated: None,
            },
        )
        .await
        .expect("policy")
        .id
}

/// A site's driver and its csi-addons client.
struct Driver {
    proc: DriverProc,
    repl: Repl,
    _dir: tempfile::TempDir,
}

async fn driver(s: &TwoSites, local: Uuid) -> Driver {
    let dir = tempfile::tempdir().expect("tempdir");
    let proc = s.driver(dir.path(), local).await;
    let repl = Repl::new(proc.channel().await);
    Driver {
        proc,
        repl,
        _dir: dir,
    }
}

/// Enable on A, the status from either site, a planned move to B (demote on A first, with
/// the 409 and 412 refusals on the way), the resync back, and Disable with its explicit
/// null.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_moves_a_volume_between_two_sites() {
    let s = two_sites().await;
    let c = &s.client;
    let mut a = driver(&s, s.a.cluster).await;
    let mut b = driver(&s, s.b.cluster).await;
    let pol = policy(&s, &s.a, "every-minute").await;
    let vol = s.volume(&s.a, "app").await;
    let h = s.handle(&s.a, vol);
    let class_a = class(&[(POLICY_ID, &pol.to_string())]);

    let never = info(&mut a.repl, &h).await.expect("info before enable");
    assert_eq!(never.last_sync_time, None, "a volume that never replicated");

    enable(&mut a.repl, &h, class_a.clone())
        .await
        .expect("enable");
    enable(&mut a.repl, &h, class_a.clone())
        .await
        .expect("enable again");
    let e = c
        .delete_replication_policy(s.a.cluster, pol)
        .await
        .expect_err("the policy is attached");
    assert_eq!(e.status(), Some(400), "{e}");
    // Enable started the relationship towards the policy's target: B.
    let rel = c
        .volume_replication(s.a.cluster, s.a.pool, vol)
        .await
        .expect("a relationship");
    assert!(rel.is_source);
    assert_eq!(rel.target_cluster_id, Some(s.b.cluster));
    s.replica(&s.a, vol).await;

    // Info reads the active end (B's replica, still being written) from either site.
    for d in [&mut a, &mut b] {
        let i = eventually("a last sync time", || {
            let mut r = d.repl.clone();
            let h = h.clone();
            async move {
                info(&mut r, &h)
                    .await
                    .ok()
                    .filter(|i| i.last_sync_time.is_some())
            }
        })
        .await;
        assert!(i.last_sync_bytes > 0, "{i:?}");
        assert!(i.status_message.starts_with("role secondary"), "{i:?}");
    }
    let dest = a
        .repl
        .get_replication_destination_info(repl::GetReplicationDestinationInfoRequest {
            replication_source: source(&h),
            ..Default::default()
        })
        .await
        .expect("destination")
        .into_inner();
    assert_eq!(
        dest.replication_destination,
        Some(repl::ReplicationDestination {
            r#type: Some(repl::replication_destination::Type::Volume(
                repl::replication_destination::VolumeDestination {
                    volume_id: h.clone()
                }
            ))
        })
    );

    // A planned promote needs a finished demote of the source.
    s.freeze();
    let (code_, msg) = code(promote(&mut b.repl, &h, false).await);
    assert_eq!(code_, Code::FailedPrecondition, "{msg}");
    let (code_, msg) = code(demote(&mut a.repl, &h).await);
    assert_eq!(code_, Code::Aborted, "{msg}");
    assert!(msg.contains("still converging"), "{msg}");
    let (code_, msg) = code(promote(&mut b.repl, &h, false).await);
    assert_eq!(
        code_,
        Code::Aborted,
        "a converging demote is worth a retry: {msg}"
    );
    eventually("the demote is done", || {
        let mut r = a.repl.clone();
        let h = h.clone();
        s.advance(5.0);
        async move { demote(&mut r, &h).await.ok() }
    })
    .await;
    promote(&mut b.repl, &h, false)
        .await
        .expect("planned promote");
    promote(&mut b.repl, &h, false)
        .await
        .expect("promote again");
    let i = info(&mut b.repl, &h).await.expect("info after promote");
    assert!(i.status_message.starts_with("role failed_over"), "{i:?}");
    // The failover target's class carries no policy: Enable there attaches nothing.
    enable(&mut b.repl, &h, class(&[]))
        .await
        .expect("enable without a policy");

    // Resync from A: B's writes flow back to A, within the lag budget.
    let ready = resync(&mut a.repl, &h).await.expect("resync");
    assert!(ready);
    let rel = c
        .volume_replication(s.a.cluster, s.a.pool, vol)
        .await
        .expect("relationship");
    assert_eq!(rel.direction, ReplicationDirection::ToSource);

    // Disable detaches the policy with an explicit null; a second Disable meets the
    // control plane's 404 on a known chain member, which is done.
    disable(&mut a.repl, &h, class_a.clone())
        .await
        .expect("disable");
    c.delete_replication_policy(s.a.cluster, pol)
        .await
        .expect("the policy is detached");
    disable(&mut a.repl, &h, class_a)
        .await
        .expect("disable again");
    a.proc.stop().await;
    b.proc.stop().await;
}

/// An old primary reaped after an unplanned failover: Demote and Disable on it are done,
/// Info follows the chain to the replica; on a volume that never replicated, Disable is
/// NOT_FOUND.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reaped_member_of_a_known_chain_is_done() {
    let s = two_sites().await;
    let mut a = driver(&s, s.a.cluster).await;
    let mut b = driver(&s, s.b.cluster).await;
    let vol = s.volume(&s.a, "db").await;
    let h = s.handle(&s.a, vol);
    s.protect(&s.a, vol).await;
    promote(&mut b.repl, &h, true)
        .await
        .expect("unplanned promote");
    s.reap(&s.a, vol).await;

    demote(&mut a.repl, &h)
        .await
        .expect("demote a reaped member");
    disable(&mut a.repl, &h, class(&[]))
        .await
        .expect("disable a reaped member");
    let i = info(&mut a.repl, &h).await.expect("info");
    assert!(i.status_message.starts_with("role failed_over"), "{i:?}");

    let lone = s.volume(&s.a, "lone").await;
    let (code_, msg) = code(disable(&mut a.repl, &s.handle(&s.a, lone), class(&[])).await);
    assert_eq!(code_, Code::NotFound, "{msg}");
    a.proc.stop().await;
    b.proc.stop().await;
}

/// Four moves alternating sites, each through the drivers with the first member's handle:
/// Enable on the site serving the volume (its local member), Promote on the other (the
/// active end), then the old primary is reaped. The chain is walked from every member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_move_chain_is_walked_from_the_driver() {
    let s = two_sites().await;
    let c = &s.client;
    let mut a = driver(&s, s.a.cluster).await;
    let mut b = driver(&s, s.b.cluster).await;
    let pols = [
        policy(&s, &s.a, "a-to-b").await,
        policy(&s, &s.b, "b-to-a").await,
    ];
    let first = s.volume(&s.a, "chain").await;
    let h = s.handle(&s.a, first);
    let mut members = vec![(s.a.clone(), first)];
    for k in 0..4 {
        let (here, vol) = members.last().expect("member").clone();
        let there = s.other(here.cluster).clone();
        let (local, remote, pol) = if k % 2 == 0 {
            (&mut a, &mut b, pols[0])
        } else {
            (&mut b, &mut a, pols[1])
        };
        enable(&mut local.repl, &h, class(&[(POLICY_ID, &pol.to_string())]))
            .await
            .expect("enable on the serving site");
        let rel = c
            .replication_relationship(here.cluster, vol)
            .await
            .expect("the serving member replicates");
        assert!(
            rel.is_source,
            "move {k}: enable acted on the serving member"
        );
        let replica = s.replica(&here, vol).await;
        promote(&mut remote.repl, &h, true)
            .await
            .expect("promote on the other site");
        s.reap(&here, vol).await;
        members.push((there, replica));
    }
    let (end_site, end) = members.last().expect("end").clone();
    assert_eq!(
        end_site.cluster, s.a.cluster,
        "four moves end where they began"
    );
    for (site, vol) in &members {
        let from = s.handle(site, *vol);
        let i = info(&mut a.repl, &from).await.expect("info");
        assert!(i.status_message.starts_with("role failed_over"), "{i:?}");
    }
    // Enable through the first handle reaches the end on A and protects it towards B.
    enable(&mut a.repl, &h, class(&[(POLICY_ID, &pols[0].to_string())]))
        .await
        .expect("enable at the end");
    let rel = c
        .replication_relationship(s.a.cluster, end)
        .await
        .expect("the end replicates");
    assert!(rel.is_source);
    assert_eq!(rel.target_cluster_id, Some(s.b.cluster));
    a.proc.stop().await;
    b.proc.stop().await;
}

/// What the driver refuses before any call, and what it does not serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_the_sidecar_can_act_on() {
    let s = two_sites().await;
    let mut a = driver(&s, s.a.cluster).await;
    let vol = s.volume(&s.a, "v").await;
    let h = s.handle(&s.a, vol);

    let (code_, msg) = code(info(&mut a.repl, "pvc-1234").await);
    assert_eq!(code_, Code::InvalidArgument, "{msg}");
    let unknown = format!("{}:{}:{}", Uuid::from_u128(9), s.a.pool, vol);
    let (code_, msg) = code(info(&mut a.repl, &unknown).await);
    assert_eq!(code_, Code::Unavailable, "{msg}");
    assert!(msg.contains("not in the CSI secret"), "{msg}");
    let missing = s.handle(&s.a, Uuid::from_u128(7));
    let (code_, msg) = code(info(&mut a.repl, &missing).await);
    assert_eq!(code_, Code::NotFound, "{msg}");

    for params in [
        class(&[(METHOD, "semi")]),
        class(&[(METHOD, "sync")]),
        class(&[(METHOD, "sync"), (SITE, "-x")]),
        class(&[(POLICY_ID, "gold")]),
    ] {
        let (code_, msg) = code(enable(&mut a.repl, &h, params.clone()).await);
        assert_eq!(code_, Code::InvalidArgument, "{params:?}: {msg}");
    }
    // A policy the volume's cluster does not have.
    let (code_, msg) = code(
        enable(
            &mut a.repl,
            &h,
            class(&[(POLICY_ID, &Uuid::from_u128(5).to_string())]),
        )
        .await,
    );
    assert_eq!(code_, Code::InvalidArgument, "{msg}");
    assert!(msg.contains("replicationPolicyID"), "{msg}");
    // The sync method: Enable and Disable are successes without a call.
    let sync = class(&[
        (METHOD, "sync"),
        (SITE, "site-a"),
        (POLICY_ID, &Uuid::from_u128(5).to_string()),
    ]);
    enable(&mut a.repl, &h, sync.clone())
        .await
        .expect("sync enable");
    disable(&mut a.repl, &h, sync).await.expect("sync disable");
    let rel = s.client.replication_relationship(s.a.cluster, vol).await;
    assert_eq!(
        rel.err().and_then(|e| e.status()),
        Some(404),
        "nothing started"
    );

    // A group the control plane does not know.
    let cg = format!("cg:{}:{}", s.a.cluster, Uuid::from_u128(3));
    let r = a
        .repl
        .clone()
        .get_volume_replication_info(repl::GetVolumeReplicationInfoRequest {
            replication_source: group_source(&cg),
            ..Default::default()
        })
        .await;
    let (code_, msg) = code(r);
    assert_eq!(code_, Code::NotFound, "{msg}");
    a.proc.stop().await;
}

/// A consistency group of two volumes moves to B and back as one: Enable attaches the
/// policy to the group, Info and Resync follow it to the group serving on B after the
/// promote, Disable detaches this site's group, and the destination names every member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consistency_group_moves_as_one() {
    let s = two_sites().await;
    let c = &s.client;
    let mut a = driver(&s, s.a.cluster).await;
    let mut b = driver(&s, s.b.cluster).await;
    let pol = policy(&s, &s.a, "group-every-minute").await;
    let mut vols = Vec::new();
    for name in ["orders-db", "orders-log"] {
        let v = c
            .create_volume(
                s.a.cluster,
                s.a.pool,
                &VolumeCreate {
                    consistency_group: Some("orders".into()),
                    ..VolumeCreate::new(name, 1_000_000_000)
                },
            )
            .await
            .expect("member");
        vols.push(v);
    }
    let g = c
        .find_consistency_group(s.a.cluster, "orders")
        .await
        .expect("groups")
        .expect("the group");
    let cg = format!("cg:{}:{}", s.a.cluster, g.id);
    let class_a = class(&[(POLICY_ID, &pol.to_string())]);

    let mut enable_g = a.repl.clone();
    enable_g
        .enable_volume_replication(repl::EnableVolumeReplicationRequest {
            parameters: class_a.clone(),
            replication_source: group_source(&cg),
            ..Default::default()
        })
        .await
        .expect("enable the group");
    let e = c
        .delete_replication_policy(s.a.cluster, pol)
        .await
        .expect_err("the policy is attached");
    assert_eq!(e.status(), Some(400), "{e}");
    let group_info = |r: &Repl| {
        let mut r = r.clone();
        let cg = cg.clone();
        async move {
            r.get_volume_replication_info(repl::GetVolumeReplicationInfoRequest {
                replication_source: group_source(&cg),
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner())
        }
    };
    let i = eventually("every member replicated", || async {
        group_info(&a.repl)
            .await
            .ok()
            .filter(|i| i.last_sync_time.is_some())
    })
    .await;
    assert!(i.status_message.starts_with("role source"), "{i:?}");

    let dest = a
        .repl
        .get_replication_destination_info(repl::GetReplicationDestinationInfoRequest {
            replication_source: group_source(&cg),
            ..Default::default()
        })
        .await
        .expect("destination")
        .into_inner();
    let handles: HashMap<String, String> = vols
        .iter()
        .map(|v| (s.handle(&s.a, *v), s.handle(&s.a, *v)))
        .collect();
    assert_eq!(
        dest.replication_destination,
        Some(repl::ReplicationDestination {
            r#type: Some(repl::replication_destination::Type::Volumegroup(
                repl::replication_destination::VolumeGroupDestination {
                    volume_group_id: cg.clone(),
                    volume_ids: handles,
                }
            ))
        })
    );

    // Demote on A until its last writes are across, then promote on B.
    s.freeze();
    eventually("the group demote is done", || {
        let mut r = a.repl.clone();
        let cg = cg.clone();
        s.advance(5.0);
        async move {
            r.demote_volume(repl::DemoteVolumeRequest {
                replication_source: group_source(&cg),
                ..Default::default()
            })
            .await
            .ok()
        }
    })
    .await;
    b.repl
        .promote_volume(repl::PromoteVolumeRequest {
            replication_source: group_source(&cg),
            ..Default::default()
        })
        .await
        .expect("promote the group");
    let i = group_info(&b.repl).await.expect("info after promote");
    assert!(i.status_message.starts_with("role failed_over"), "{i:?}");
    let on_b = c
        .find_consistency_group(s.b.cluster, "orders")
        .await
        .expect("groups")
        .expect("the group serves on B");
    assert_eq!(on_b.member_count, 2);

    // Resync from A: the serving group on B sends its writes back to A.
    let ready = a
        .repl
        .resync_volume(repl::ResyncVolumeRequest {
            replication_source: group_source(&cg),
            ..Default::default()
        })
        .await
        .expect("resync the group")
        .into_inner()
        .ready;
    assert!(ready);
    for v in &vols {
        let rel = c
            .volume_replication(s.a.cluster, s.a.pool, *v)
            .await
            .expect("relationship");
        assert_eq!(rel.direction, ReplicationDirection::ToSource);
    }

    // Disable on A detaches A's own group (not the one serving on B).
    a.repl
        .disable_volume_replication(repl::DisableVolumeReplicationRequest {
            parameters: class_a,
            replication_source: group_source(&cg),
            ..Default::default()
        })
        .await
        .expect("disable the group");
    c.delete_replication_policy(s.a.cluster, pol)
        .await
        .expect("the policy is detached");
    a.proc.stop().await;
    b.proc.stop().await;
}

async fn demote_in(
    c: &mut Repl,
    src: Option<repl::ReplicationSource>,
    params: HashMap<String, String>,
) -> Result<(), Status> {
    c.demote_volume(repl::DemoteVolumeRequest {
        parameters: params,
        replication_source: src,
        ..Default::default()
    })
    .await
    .map(|_| ())
}

async fn promote_in(
    c: &mut Repl,
    src: Option<repl::ReplicationSource>,
    params: HashMap<String, String>,
    force: bool,
) -> Result<(), Status> {
    c.promote_volume(repl::PromoteVolumeRequest {
        force,
        parameters: params,
        replication_source: src,
        ..Default::default()
    })
    .await
    .map(|_| ())
}

/// The sync method on one cluster stretched over two sites, for a volume and for a group:
/// Enable, Disable and Resync are successes without a call; Demote and Promote name the
/// class's site, with the sync routes' codes (409 UNAVAILABLE, 400 INVALID_ARGUMENT, 412
/// FAILED_PRECONDITION until forced).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sync_method_moves_volumes_between_the_sites_of_one_cluster() {
    let s = stretched().await;
    let c = &s.client;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = s.driver(dir.path()).await;
    let mut r = Repl::new(d.channel().await);
    let sync = |site: &str| class(&[(METHOD, "sync"), (SITE, site)]);
    let vol = s.volume("mirrored", None).await;
    let h = format!("{}:{}:{vol}", s.cluster, s.pool);

    enable(&mut r, &h, sync("east")).await.expect("sync enable");
    disable(&mut r, &h, sync("east"))
        .await
        .expect("sync disable");
    let ready = r
        .resync_volume(repl::ResyncVolumeRequest {
            parameters: sync("east"),
            replication_source: source(&h),
            ..Default::default()
        })
        .await
        .expect("sync resync")
        .into_inner()
        .ready;
    assert!(ready);

    let (code_, msg) = code(promote_in(&mut r, source(&h), sync("west"), false).await);
    assert_eq!(code_, Code::Unavailable, "east is not demoted yet: {msg}");
    let (code_, msg) = code(demote_in(&mut r, source(&h), sync("north")).await);
    assert_eq!(code_, Code::InvalidArgument, "{msg}");
    demote_in(&mut r, source(&h), sync("east"))
        .await
        .expect("demote on east");
    promote_in(&mut r, source(&h), sync("west"), false)
        .await
        .expect("planned promote on west");
    let on = s.serving_node(vol).await;
    assert!(s.west.contains(&on), "served on {on}, not on west");
    info(&mut r, &h)
        .await
        .expect("info through the status route");

    // A group moves as one.
    let mut members = Vec::new();
    for name in ["pair-0", "pair-1"] {
        members.push(s.volume(name, Some("pair")).await);
    }
    let g = c
        .find_consistency_group(s.cluster, "pair")
        .await
        .expect("groups")
        .expect("the group");
    let cg = group_source(&format!("cg:{}:{}", s.cluster, g.id));
    let (code_, msg) = code(promote_in(&mut r, cg.clone(), sync("west"), false).await);
    assert_eq!(code_, Code::Unavailable, "{msg}");
    demote_in(&mut r, cg.clone(), sync("east"))
        .await
        .expect("demote the group on east");
    promote_in(&mut r, cg.clone(), sync("west"), false)
        .await
        .expect("promote the group on west");
    for m in members {
        let on = s.serving_node(m).await;
        assert!(
            s.west.contains(&on),
            "member {m} served on {on}, not on west"
        );
    }

    // West goes away: a planned promote on east is refused as a precondition (the one
    // refusal the sidecar escalates), a forced one takes over.
    c.suspend_storage_node(s.cluster, on, false)
        .await
        .expect("suspend west's serving node");
    let (code_, msg) = code(promote_in(&mut r, source(&h), sync("east"), false).await);
    assert_eq!(code_, Code::FailedPrecondition, "{msg}");
    promote_in(&mut r, source(&h), sync("east"), true)
        .await
        .expect("forced promote on east");
    let on = s.serving_node(vol).await;
    assert!(s.east.contains(&on), "served on {on}, not on east");
    d.stop().await;
}

fn ext4() -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_mode: Some(csi::volume_capability::AccessMode {
            mode: csi::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
        }),
        access_type: Some(csi::volume_capability::AccessType::Mount(
            csi::volume_capability::MountVolume {
                fs_type: "ext4".into(),
                ..Default::default()
            },
        )),
    }
}

/// NodeStage and NodePublish of `h` on a site's node, as the kubelet mounts a pod's volume.
async fn mount(node: &mut NodeClient<Channel>, h: &str, staging: &Path, target: &Path) {
    node.node_stage_volume(csi::NodeStageVolumeRequest {
        volume_id: h.into(),
        staging_target_path: staging.display().to_string(),
        volume_capability: Some(ext4()),
        ..Default::default()
    })
    .await
    .expect("stage");
    node.node_publish_volume(csi::NodePublishVolumeRequest {
        volume_id: h.into(),
        staging_target_path: staging.display().to_string(),
        target_path: target.display().to_string(),
        volume_capability: Some(ext4()),
        ..Default::default()
    })
    .await
    .expect("publish");
}

/// NodeUnpublish and NodeUnstage of `h`: the pod stops, its writes are on the volume.
async fn unmount(node: &mut NodeClient<Channel>, h: &str, staging: &Path, target: &Path) {
    node.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
        volume_id: h.into(),
        target_path: target.display().to_string(),
    })
    .await
    .expect("unpublish");
    node.node_unstage_volume(csi::NodeUnstageVolumeRequest {
        volume_id: h.into(),
        staging_target_path: staging.display().to_string(),
    })
    .await
    .expect("unstage");
}

/// Which volume the node staged for `h`: the record's, and the file behind its device.
fn staged(d: &Driver, h: &str) -> ((Uuid, Uuid), std::path::PathBuf) {
    let rec = simplyblock_csi::record::load(&d.proc.state_dir, h)
        .expect("record")
        .expect("staged");
    let dev = rec.device.expect("attached");
    let name = dev.file_name().expect("a device name").to_string_lossy();
    let backing = std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file"))
        .expect("a loop device");
    (
        (rec.cluster, rec.volume),
        std::path::PathBuf::from(backing.trim()),
    )
}

/// Retry a verb the sidecar retries (ABORTED: the demote still converges) until it is done.
async fn until_done<F, Fut>(what: &str, mut call: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), Status>>,
{
    eventually(what, || {
        let r = call();
        async move {
            match r.await {
                Ok(()) => Some(()),
                Err(e) if e.code() == Code::Aborted => None,
                Err(e) => panic!("{what}: {e:?}"),
            }
        }
    })
    .await
}

/// A volume's status; `None` once it is removed.
async fn status_of(s: &TwoSites, site: &Site, vol: Uuid) -> Option<VolumeStatus> {
    match s.client.get_volume(site.cluster, site.pool, vol).await {
        Ok(v) => Some(v.status),
        Err(e) if e.is_not_found() => None,
        Err(e) => panic!("volume {vol}: {e}"),
    }
}

/// The planned move to B and back to A as Ramen drives it, every call naming the original
/// PersistentVolume's handle: each site's node stages the active end of the chain (B's
/// replica, then A's new replica) and reads what the other site wrote; DeleteVolume of the
/// handle reaps the demoted volume it names and the retired replicas, never the one
/// serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_fails_over_and_back_and_every_stage_reads_the_active_end() {
    let s = two_sites().await;
    let c = &s.client;
    let mnt = tempfile::tempdir().expect("tempdir");
    // Declared after the directories, so it unmounts before they are removed.
    let _cleanup = Cleanup {
        dir: mnt.path().to_path_buf(),
        files: s.files.clone(),
    };
    let mut a = driver(&s, s.a.cluster).await;
    let mut b = driver(&s, s.b.cluster).await;
    let (_, mut ctl_a, mut node_a) = a.proc.clients().await;
    let (_, mut ctl_b, mut node_b) = b.proc.clients().await;
    let class_a = class(&[(POLICY_ID, &policy(&s, &s.a, "a-to-b").await.to_string())]);
    let class_b = class(&[(POLICY_ID, &policy(&s, &s.b, "b-to-a").await.to_string())]);
    let vol = s.volume(&s.a, "app").await;
    let h = s.handle(&s.a, vol);
    let (staging_a, target_a) = (mnt.path().join("a-staging"), mnt.path().join("a-target"));
    let (staging_b, target_b) = (mnt.path().join("b-staging"), mnt.path().join("b-target"));
    let file_of = |v: Uuid| s.files.join(format!("{v}.img"));

    // A serves and writes.
    mount(&mut node_a, &h, &staging_a, &target_a).await;
    assert_eq!(staged(&a, &h), ((s.a.cluster, vol), file_of(vol)));
    std::fs::write(target_a.join("data.txt"), "written on A\n").expect("write on A");

    enable(&mut a.repl, &h, class_a.clone())
        .await
        .expect("enable on A");
    eventually("a replicated cycle", || {
        let mut r = a.repl.clone();
        let h = h.clone();
        async move {
            info(&mut r, &h)
                .await
                .ok()
                .filter(|i| i.last_sync_time.is_some())
        }
    })
    .await;
    let replica = c
        .volume_replication(s.a.cluster, s.a.pool, vol)
        .await
        .expect("A's relationship")
        .target_lvol_id
        .expect("B's replica");

    // Failover: the pod on A stops, A is demoted (its last writes go across), B promoted.
    unmount(&mut node_a, &h, &staging_a, &target_a).await;
    until_done("demote on A", || {
        let mut r = a.repl.clone();
        let h = h.clone();
        async move { demote(&mut r, &h).await }
    })
    .await;
    until_done("promote on B", || {
        let mut r = b.repl.clone();
        let h = h.clone();
        async move { promote(&mut r, &h, false).await }
    })
    .await;
    mount(&mut node_b, &h, &staging_b, &target_b).await;
    assert_eq!(
        staged(&b, &h),
        ((s.b.cluster, replica), file_of(replica)),
        "B's node stages B's replica for the handle of A's volume"
    );
    let on_b = target_b.join("data.txt");
    assert_eq!(
        std::fs::read_to_string(&on_b).expect("read on B"),
        "written on A\n"
    );
    std::fs::write(&on_b, "written on A\nwritten on B\n").expect("write on B");

    // A's copy of the application goes: DeleteVolume on A reaps the demoted volume the
    // handle names, and leaves the replica that serves.
    ctl_a
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: h.clone(),
            ..Default::default()
        })
        .await
        .expect("delete on A");
    eventually("A's demoted volume is reaped", || async {
        (status_of(&s, &s.a, vol).await == Some(VolumeStatus::Deleted)).then_some(())
    })
    .await;
    assert_eq!(
        status_of(&s, &s.b, replica).await,
        Some(VolumeStatus::Online)
    );

    // Failback: re-protect B towards A (a new replica, the old volume is reaped), the pod
    // on B stops, B is demoted, A promoted.
    enable(&mut b.repl, &h, class_b.clone())
        .await
        .expect("enable on B");
    let back = s.replica(&s.b, replica).await;
    assert_ne!(back, vol, "the reaped volume is not reused");
    let rel = c
        .volume_replication(s.b.cluster, s.b.pool, replica)
        .await
        .expect("B's relationship");
    assert!(rel.is_source);
    assert_eq!(rel.target_cluster_id, Some(s.a.cluster));
    unmount(&mut node_b, &h, &staging_b, &target_b).await;
    until_done("demote on B", || {
        let mut r = b.repl.clone();
        let h = h.clone();
        async move { demote(&mut r, &h).await }
    })
    .await;
    until_done("promote on A", || {
        let mut r = a.repl.clone();
        let h = h.clone();
        async move { promote(&mut r, &h, false).await }
    })
    .await;
    let i = info(&mut a.repl, &h)
        .await
        .expect("info after the failback");
    assert!(i.status_message.starts_with("role failed_over"), "{i:?}");
    mount(&mut node_a, &h, &staging_a, &target_a).await;
    assert_eq!(
        staged(&a, &h),
        ((s.a.cluster, back), file_of(back)),
        "A's node stages A's new replica for the same handle"
    );
    assert_eq!(
        std::fs::read_to_string(target_a.join("data.txt")).expect("read on A"),
        "written on A\nwritten on B\n"
    );

    // B's copy of the application goes: DeleteVolume on B reaps B's demoted replica, a
    // retired member of the chain, and leaves A's new replica serving.
    ctl_b
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: h.clone(),
            ..Default::default()
        })
        .await
        .expect("delete on B");
    eventually("B's demoted replica is reaped", || async {
        (status_of(&s, &s.b, replica).await == Some(VolumeStatus::Deleted)).then_some(())
    })
    .await;
    assert_eq!(status_of(&s, &s.a, back).await, Some(VolumeStatus::Online));
    assert_eq!(
        std::fs::read_to_string(target_a.join("data.txt")).expect("read on A"),
        "written on A\nwritten on B\n"
    );
    unmount(&mut node_a, &h, &staging_a, &target_a).await;
    a.proc.stop().await;
    b.proc.stop().await;
}

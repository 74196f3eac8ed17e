//! The CSI GroupController on the real API server and sbsim (the control plane's
//! stand-in, with volume files): claims labelled into a consistency group are snapshotted
//! together, the group snapshot is read back by Get, each member restores with the content
//! it had when the snapshot was taken, and Delete removes the group snapshot. A request
//! that does not name exactly a group's members is refused.

use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom, Write};

use simplyblock_controlplane::Uuid;
use simplyblock_csi::proto::csi::v1 as csi;
use simplyblock_csi::proto::csi::v1::controller_client::ControllerClient;
use simplyblock_csi::proto::csi::v1::group_controller_client::GroupControllerClient;
use tonic::Code;
use tonic::transport::Channel;

use crate::claims::ClaimEnv;

const GROUP_LABEL: (&str, &str) = ("storage.simplyblock.io/consistency-group", "gs-db");

fn volume_id(handle: &str) -> Uuid {
    handle
        .rsplit(':')
        .next()
        .and_then(|s| s.parse().ok())
        .expect("handle")
}

/// Volumes of claims `<prefix>-a` and `<prefix>-b`, both labelled `group`, and of
/// `<prefix>-loner`, in no group.
async fn two_members_and_a_loner(
    e: &ClaimEnv,
    ctl: &mut ControllerClient<Channel>,
    prefix: &str,
    group: (&str, &str),
) -> (String, String, String) {
    let mut volume = async |name: &str, labels: &[(&str, &str)]| {
        let claim = format!("{prefix}-{name}");
        e.claim(&claim, &[], labels).await;
        e.create(ctl, &claim, None).await.expect(name).volume_id
    };
    (
        volume("a", &[group]).await,
        volume("b", &[group]).await,
        volume("loner", &[]).await,
    )
}

/// The first bytes of a volume's data: the backing file sbsim keeps for it (what the loop
/// attacher attaches on a node).
fn write_head(e: &ClaimEnv, handle: &str, data: &[u8]) {
    let path = e.sim.files.join(format!("{}.img", volume_id(handle)));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    f.seek(SeekFrom::Start(0)).expect("seek");
    f.write_all(data).expect("write");
    f.sync_all().expect("sync");
}

fn read_head(e: &ClaimEnv, handle: &str, len: usize) -> Vec<u8> {
    let path = e.sim.files.join(format!("{}.img", volume_id(handle)));
    let mut f =
        std::fs::File::open(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    let mut buf = vec![0; len];
    f.read_exact(&mut buf).expect("read");
    buf
}

async fn snapshot_group(
    gc: &mut GroupControllerClient<Channel>,
    name: &str,
    volumes: &[&str],
) -> Result<csi::VolumeGroupSnapshot, tonic::Status> {
    gc.create_volume_group_snapshot(csi::CreateVolumeGroupSnapshotRequest {
        name: name.into(),
        source_volume_ids: volumes.iter().map(|v| (*v).to_owned()).collect(),
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner().group_snapshot.expect("group snapshot"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_snapshot_of_two_claims_restores_each_member() {
    let e = ClaimEnv::start().await;
    let (_, mut ctl, _) = e.driver.clients().await;
    let mut gc = GroupControllerClient::new(e.driver.channel().await);

    let caps = gc
        .group_controller_get_capabilities(csi::GroupControllerGetCapabilitiesRequest {})
        .await
        .expect("caps")
        .into_inner()
        .capabilities;
    assert_eq!(caps.len(), 1, "{caps:?}");

    let (a, b, loner) = two_members_and_a_loner(&e, &mut ctl, "gs", GROUP_LABEL).await;
    write_head(&e, &a, b"alpha-before");
    write_head(&e, &b, b"bravo-before");

    // Only exactly the group's members make a group snapshot.
    for (what, volumes) in [
        ("a part of the group", vec![a.as_str()]),
        ("the group and an outsider", vec![&a, &b, &loner]),
        ("a volume in no group", vec![&loner]),
    ] {
        let err = snapshot_group(&mut gc, "gs-refused", &volumes)
            .await
            .expect_err(what);
        assert_eq!(err.code(), Code::FailedPrecondition, "{what}: {err:?}");
    }

    let taken = snapshot_group(&mut gc, "gs-1", &[&a, &b])
        .await
        .expect("group snapshot");
    assert!(taken.ready_to_use);
    assert!(taken.creation_time.is_some());
    assert_eq!(taken.snapshots.len(), 2);
    let sources: BTreeSet<&str> = taken
        .snapshots
        .iter()
        .map(|s| s.source_volume_id.as_str())
        .collect();
    assert_eq!(sources, BTreeSet::from([a.as_str(), b.as_str()]));
    for s in &taken.snapshots {
        assert_eq!(s.group_snapshot_id, taken.group_snapshot_id);
        assert!(s.ready_to_use);
    }

    // A retry finds it; the same name over other volumes is refused.
    let again = snapshot_group(&mut gc, "gs-1", &[&b, &a])
        .await
        .expect("retried");
    assert_eq!(again.group_snapshot_id, taken.group_snapshot_id);
    let err = snapshot_group(&mut gc, "gs-1", &[&a])
        .await
        .expect_err("same name, other volumes");
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");

    // Get lists it.
    let got = gc
        .get_volume_group_snapshot(csi::GetVolumeGroupSnapshotRequest {
            group_snapshot_id: taken.group_snapshot_id.clone(),
            snapshot_ids: taken
                .snapshots
                .iter()
                .map(|s| s.snapshot_id.clone())
                .collect(),
            ..Default::default()
        })
        .await
        .expect("get")
        .into_inner()
        .group_snapshot
        .expect("group snapshot");
    let ids = |g: &csi::VolumeGroupSnapshot| -> BTreeSet<String> {
        g.snapshots.iter().map(|s| s.snapshot_id.clone()).collect()
    };
    assert_eq!(ids(&got), ids(&taken));

    // The originals change after the snapshot; each member restores what it held then.
    write_head(&e, &a, b"alpha-after!");
    write_head(&e, &b, b"bravo-after!");
    for s in &taken.snapshots {
        let restored = ctl
            .create_volume(csi::CreateVolumeRequest {
                name: format!("restored-{}", volume_id(&s.source_volume_id)),
                capacity_range: Some(csi::CapacityRange {
                    required_bytes: 1 << 30,
                    limit_bytes: 0,
                }),
                volume_capabilities: vec![csi::VolumeCapability {
                    access_mode: Some(csi::volume_capability::AccessMode {
                        mode: csi::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
                    }),
                    access_type: Some(
                        csi::volume_capability::AccessType::Mount(Default::default()),
                    ),
                }],
                parameters: e.sim.params(),
                volume_content_source: Some(csi::VolumeContentSource {
                    r#type: Some(csi::volume_content_source::Type::Snapshot(
                        csi::volume_content_source::SnapshotSource {
                            snapshot_id: s.snapshot_id.clone(),
                        },
                    )),
                }),
                ..Default::default()
            })
            .await
            .expect("restore")
            .into_inner()
            .volume
            .expect("volume");
        let want: &[u8] = if s.source_volume_id == a {
            b"alpha-before"
        } else {
            b"bravo-before"
        };
        assert_eq!(
            read_head(&e, &restored.volume_id, want.len()),
            want,
            "the restore of {}",
            s.source_volume_id
        );
    }

    // Delete removes it; a second delete finds nothing to do.
    let delete = || csi::DeleteVolumeGroupSnapshotRequest {
        group_snapshot_id: taken.group_snapshot_id.clone(),
        snapshot_ids: taken
            .snapshots
            .iter()
            .map(|s| s.snapshot_id.clone())
            .collect(),
        ..Default::default()
    };
    gc.delete_volume_group_snapshot(delete())
        .await
        .expect("delete");
    let err = gc
        .get_volume_group_snapshot(csi::GetVolumeGroupSnapshotRequest {
            group_snapshot_id: taken.group_snapshot_id.clone(),
            ..Default::default()
        })
        .await
        .expect_err("gone");
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let id: Vec<&str> = taken.group_snapshot_id.split(':').collect();
    let left = e
        .sim
        .client
        .list_group_snapshots(e.sim.cluster, id[1].parse().expect("group id"))
        .await
        .expect("list");
    assert!(left.is_empty(), "{left:?}");
    gc.delete_volume_group_snapshot(delete())
        .await
        .expect("a second delete");
    e.driver.stop().await;
}

/// The csi-addons VolumeGroup service over the same consistency group: created from
/// exactly its members, read back, narrowed by taking a member out, never widened, and
/// deleted without deleting its volumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_group_is_the_claims_consistency_group() {
    use simplyblock_csi::proto::csiaddons::volumegroup as vg;
    let e = ClaimEnv::start().await;
    let (_, mut ctl, _) = e.driver.clients().await;
    let mut groups = vg::controller_client::ControllerClient::new(e.driver.channel().await);
    let label = ("storage.simplyblock.io/consistency-group", "vg-db");
    let (a, b, loner) = two_members_and_a_loner(&e, &mut ctl, "vg", label).await;
    let members = |g: &vg::VolumeGroup| -> BTreeSet<String> {
        g.volumes.iter().map(|v| v.volume_id.clone()).collect()
    };

    let err = groups
        .create_volume_group(vg::CreateVolumeGroupRequest {
            name: "vgr-part".into(),
            volume_ids: vec![a.clone()],
            ..Default::default()
        })
        .await
        .expect_err("a part of the group");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let made = groups
        .create_volume_group(vg::CreateVolumeGroupRequest {
            name: "vgr-1".into(),
            volume_ids: vec![b.clone(), a.clone()],
            ..Default::default()
        })
        .await
        .expect("create")
        .into_inner()
        .volume_group
        .expect("group");
    let group = e
        .sim
        .client
        .find_consistency_group(e.sim.cluster, "vg-db")
        .await
        .expect("groups")
        .expect("vg-db");
    assert_eq!(
        made.volume_group_id,
        format!("cg:{}:{}", e.sim.cluster, group.id)
    );
    assert_eq!(members(&made), BTreeSet::from([a.clone(), b.clone()]));

    let get = |id: String| vg::ControllerGetVolumeGroupRequest {
        volume_group_id: id,
        ..Default::default()
    };
    let got = groups
        .controller_get_volume_group(get(made.volume_group_id.clone()))
        .await
        .expect("get")
        .into_inner()
        .volume_group
        .expect("group");
    assert_eq!(members(&got), members(&made));
    let listed = groups
        .list_volume_groups(vg::ListVolumeGroupsRequest::default())
        .await
        .expect("list")
        .into_inner();
    assert!(
        listed.entries.iter().any(|x| x
            .volume_group
            .as_ref()
            .is_some_and(|g| g.volume_group_id == made.volume_group_id)),
        "{listed:?}"
    );

    let modify = |ids: Vec<String>| vg::ModifyVolumeGroupMembershipRequest {
        volume_group_id: made.volume_group_id.clone(),
        volume_ids: ids,
        ..Default::default()
    };
    let err = groups
        .modify_volume_group_membership(modify(vec![a.clone(), b.clone(), loner.clone()]))
        .await
        .expect_err("a volume joining later");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let narrowed = groups
        .modify_volume_group_membership(modify(vec![a.clone()]))
        .await
        .expect("take b out")
        .into_inner()
        .volume_group
        .expect("group");
    assert_eq!(members(&narrowed), BTreeSet::from([a.clone()]));
    let open: Vec<Uuid> = e
        .sim
        .client
        .consistency_group_members(e.sim.cluster, group.id)
        .await
        .expect("members")
        .into_iter()
        .filter(|m| m.removed_seq == 0)
        .map(|m| m.lvol_id)
        .collect();
    assert_eq!(open, vec![volume_id(&a)]);

    groups
        .delete_volume_group(vg::DeleteVolumeGroupRequest {
            volume_group_id: made.volume_group_id.clone(),
            ..Default::default()
        })
        .await
        .expect("delete");
    for v in [&a, &b] {
        e.sim
            .client
            .get_volume(e.sim.cluster, e.sim.pool, volume_id(v))
            .await
            .expect("the group's volumes stay");
    }
    e.driver.stop().await;
}

//! The driver against sbsim with real loop devices, mounts and mkfs: what the device
//! carries is mounted, a mismatch is refused, a restarted node plugin restages, a volume
//! with snapshots deletes as the control plane answers, topology is honoured, and the
//! Node's labels become its topology.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::common::*;
use simplyblock_csi::fs;
use simplyblock_csi::proto::csi::v1 as csi;
use simplyblock_csi::proto::csi::v1::controller_client::ControllerClient;
use simplyblock_csi::proto::csi::v1::node_client::NodeClient;
use tonic::Code;
use tonic::transport::Channel;

fn mount_cap(fs_type: &str) -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_mode: Some(csi::volume_capability::AccessMode {
            mode: csi::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
        }),
        access_type: Some(csi::volume_capability::AccessType::Mount(
            csi::volume_capability::MountVolume {
                fs_type: fs_type.into(),
                ..Default::default()
            },
        )),
    }
}

fn block_cap() -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_mode: Some(csi::volume_capability::AccessMode {
            mode: csi::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
        }),
        access_type: Some(csi::volume_capability::AccessType::Block(
            csi::volume_capability::BlockVolume {},
        )),
    }
}

async fn create(
    ctl: &mut ControllerClient<Channel>,
    name: &str,
    params: HashMap<String, String>,
    topology: Option<csi::TopologyRequirement>,
) -> Result<csi::Volume, tonic::Status> {
    ctl.create_volume(csi::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 1 << 30,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![mount_cap("")],
        parameters: params,
        accessibility_requirements: topology,
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner().volume.expect("volume"))
}

async fn stage(
    node: &mut NodeClient<Channel>,
    v: &csi::Volume,
    staging: &Path,
    cap: csi::VolumeCapability,
) -> Result<(), tonic::Status> {
    node.node_stage_volume(csi::NodeStageVolumeRequest {
        volume_id: v.volume_id.clone(),
        staging_target_path: staging.display().to_string(),
        volume_capability: Some(cap),
        volume_context: v.volume_context.clone(),
        ..Default::default()
    })
    .await
    .map(|_| ())
}

async fn unstage(node: &mut NodeClient<Channel>, v: &csi::Volume, staging: &Path) {
    node.node_unstage_volume(csi::NodeUnstageVolumeRequest {
        volume_id: v.volume_id.clone(),
        staging_target_path: staging.display().to_string(),
    })
    .await
    .expect("unstage");
}

async fn publish(
    node: &mut NodeClient<Channel>,
    v: &csi::Volume,
    staging: &Path,
    target: &Path,
    cap: csi::VolumeCapability,
    readonly: bool,
) -> Result<(), tonic::Status> {
    node.node_publish_volume(csi::NodePublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        staging_target_path: staging.display().to_string(),
        target_path: target.display().to_string(),
        volume_capability: Some(cap),
        readonly,
        ..Default::default()
    })
    .await
    .map(|_| ())
}

async fn unpublish(node: &mut NodeClient<Channel>, v: &csi::Volume, target: &Path) {
    node.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        target_path: target.display().to_string(),
    })
    .await
    .expect("unpublish");
}

fn mounted(path: &Path) -> Option<fs::MountEntry> {
    fs::mount_at(&fs::mounts().expect("mountinfo"), path)
}

struct Setup {
    // Declared first, so it runs before the directories are removed.
    _cleanup: Cleanup,
    sim: Sbsim,
    dir: tempfile::TempDir,
    driver: DriverProc,
}

async fn setup() -> Setup {
    let sim = sbsim(3).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let driver = DriverProc::start(dir.path(), &[sim.entry()], &sim.files, BTreeMap::new()).await;
    Setup {
        _cleanup: Cleanup {
            dir: dir.path().to_path_buf(),
            files: sim.files.clone(),
        },
        sim,
        dir,
        driver,
    }
}

fn paths(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{name}-staging")),
        dir.join(format!("{name}-target")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_fs_type_mounts_what_the_device_carries_and_a_mismatch_is_refused() {
    let s = setup().await;
    let (_, mut ctl, mut node) = s.driver.clients().await;
    let v = create(&mut ctl, "xfs-vol", s.sim.params(), None)
        .await
        .expect("create");
    let (staging, target) = paths(s.dir.path(), "xfs");

    // First stage formats the blank volume with xfs; a file goes on it.
    stage(&mut node, &v, &staging, mount_cap("xfs"))
        .await
        .expect("stage xfs");
    assert_eq!(mounted(&staging).expect("staged").fs_type, "xfs");
    std::fs::write(staging.join("data.txt"), "kept").expect("write");
    unstage(&mut node, &v, &staging).await;
    assert!(mounted(&staging).is_none());

    // A named fsType that differs is refused, naming both, and nothing is formatted.
    let e = stage(&mut node, &v, &staging, mount_cap("ext4"))
        .await
        .expect_err("mismatch");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains("xfs") && e.message().contains("ext4"),
        "{}",
        e.message()
    );
    assert!(mounted(&staging).is_none());
    unstage(&mut node, &v, &staging).await;

    // An empty fsType mounts the xfs that is there, with the data.
    stage(&mut node, &v, &staging, mount_cap(""))
        .await
        .expect("stage empty");
    assert_eq!(mounted(&staging).expect("staged").fs_type, "xfs");
    assert_eq!(
        std::fs::read_to_string(staging.join("data.txt")).expect("read"),
        "kept"
    );
    let rec = simplyblock_csi::record::load(&s.driver.state_dir, &v.volume_id)
        .expect("record")
        .expect("present");
    assert_eq!(
        rec.fs_type.as_deref(),
        Some("xfs"),
        "the staged fs is remembered"
    );

    // Publish read-only: a bind mount that refuses writes.
    publish(&mut node, &v, &staging, &target, mount_cap(""), true)
        .await
        .expect("publish ro");
    let m = mounted(&target).expect("published");
    assert!(m.read_only(), "{m:?}");
    assert!(std::fs::write(target.join("x"), "no").is_err());
    assert_eq!(
        std::fs::read_to_string(target.join("data.txt")).expect("read"),
        "kept"
    );
    // Repeating is fine; the same path read-write is not.
    publish(&mut node, &v, &staging, &target, mount_cap(""), true)
        .await
        .expect("again");
    let e = publish(&mut node, &v, &staging, &target, mount_cap(""), false)
        .await
        .expect_err("rw over ro");
    assert_eq!(e.code(), Code::AlreadyExists);
    unpublish(&mut node, &v, &target).await;
    unpublish(&mut node, &v, &target).await;
    assert!(!target.exists());
    // Growing: the control plane first, then the filesystem (xfs grows online; ext4
    // also needs CAP_SYS_RESOURCE, which not every container has).
    let grown = ctl
        .controller_expand_volume(csi::ControllerExpandVolumeRequest {
            volume_id: v.volume_id.clone(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: 2 << 30,
                limit_bytes: 0,
            }),
            ..Default::default()
        })
        .await
        .expect("controller expand")
        .into_inner();
    assert!(grown.node_expansion_required);
    let n = node
        .node_expand_volume(csi::NodeExpandVolumeRequest {
            volume_id: v.volume_id.clone(),
            volume_path: staging.display().to_string(),
            ..Default::default()
        })
        .await
        .expect("node expand")
        .into_inner();
    assert_eq!(n.capacity_bytes, 2 << 30);
    let u = fs::usage(&staging).expect("usage");
    assert!(u.total_bytes > 1900 << 20, "the filesystem grew: {u:?}");
    unstage(&mut node, &v, &staging).await;
    s.driver.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_plugin_restages_without_formatting() {
    let s = setup().await;
    let (_, mut ctl, mut node) = s.driver.clients().await;
    let v = create(&mut ctl, "restage", s.sim.params(), None)
        .await
        .expect("create");
    let (staging, target) = paths(s.dir.path(), "restage");
    stage(&mut node, &v, &staging, mount_cap(""))
        .await
        .expect("stage");
    assert_eq!(
        mounted(&staging).expect("staged").fs_type,
        "ext4",
        "blank + empty fsType = ext4"
    );
    publish(&mut node, &v, &staging, &target, mount_cap(""), false)
        .await
        .expect("publish");
    std::fs::write(target.join("f"), "before restart").expect("write");

    // The plugin restarts; the kubelet repeats stage and publish.
    let dir = s.dir.path().to_path_buf();
    // The kubelet's connections go away with the old plugin.
    drop(node);
    drop(ctl);
    s.driver.stop().await;
    let driver = DriverProc::start(&dir, &[s.sim.entry()], &s.sim.files, BTreeMap::new()).await;
    let (_, _, mut node) = driver.clients().await;
    stage(&mut node, &v, &staging, mount_cap(""))
        .await
        .expect("restage");
    publish(&mut node, &v, &staging, &target, mount_cap(""), false)
        .await
        .expect("republish");

    // A crash that lost the mounts but kept the device and the record: the next stage
    // mounts the recorded filesystem again, with its data.
    unpublish(&mut node, &v, &target).await;
    fs::unmount_all(&staging).await.expect("lose the mount");
    stage(&mut node, &v, &staging, mount_cap("xfs"))
        .await
        .expect("restage uses the recorded ext4, not the capability");
    assert_eq!(mounted(&staging).expect("staged").fs_type, "ext4");
    assert_eq!(
        std::fs::read_to_string(staging.join("f")).expect("read"),
        "before restart"
    );

    // Stats of the published volume.
    publish(&mut node, &v, &staging, &target, mount_cap(""), false)
        .await
        .expect("publish");
    let st = node
        .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
            volume_id: v.volume_id.clone(),
            volume_path: target.display().to_string(),
            ..Default::default()
        })
        .await
        .expect("stats")
        .into_inner();
    let bytes = &st.usage[0];
    assert!(bytes.total > 900 << 20 && bytes.used > 0, "{st:?}");
    unpublish(&mut node, &v, &target).await;
    unstage(&mut node, &v, &staging).await;
    assert!(
        simplyblock_csi::record::load(&driver.state_dir, &v.volume_id)
            .expect("r")
            .is_none()
    );
    driver.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_volumes_are_published_as_device_nodes() {
    let s = setup().await;
    let (_, mut ctl, mut node) = s.driver.clients().await;
    let v = create(&mut ctl, "blk", s.sim.params(), None)
        .await
        .expect("create");
    let (staging, target) = paths(s.dir.path(), "blk");
    stage(&mut node, &v, &staging, block_cap())
        .await
        .expect("stage");
    publish(&mut node, &v, &staging, &target, block_cap(), false)
        .await
        .expect("publish");
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&target)
            .expect("open device");
        assert_eq!(f.seek(SeekFrom::End(0)).expect("size"), 1 << 30);
        f.seek(SeekFrom::Start(0)).expect("seek");
        f.write_all(b"raw").expect("write");
        f.sync_all().expect("sync");
    }
    unpublish(&mut node, &v, &target).await;
    unstage(&mut node, &v, &staging).await;
    // The write reached the volume's data.
    let id = v.volume_context.get("uuid").expect("uuid");
    let data = std::fs::read(s.sim.files.join(format!("{id}.img"))).expect("file");
    assert_eq!(&data[..3], b"raw");
    s.driver.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_volume_with_snapshots_is_answered_as_the_control_plane_answers() {
    let s = setup().await;
    let (_, mut ctl, _) = s.driver.clients().await;
    let v = create(&mut ctl, "with-snap", s.sim.params(), None)
        .await
        .expect("create");
    let snap = ctl
        .create_snapshot(csi::CreateSnapshotRequest {
            source_volume_id: v.volume_id.clone(),
            name: "snap-1".into(),
            ..Default::default()
        })
        .await
        .expect("snapshot")
        .into_inner()
        .snapshot
        .expect("snapshot");
    assert!(snap.ready_to_use);
    // The control plane accepts the delete (204) and keeps the snapshot.
    ctl.delete_volume(csi::DeleteVolumeRequest {
        volume_id: v.volume_id.clone(),
        ..Default::default()
    })
    .await
    .expect("delete with snapshots");
    let vid = simplyblock_csi::handle::VolumeHandle::parse(&v.volume_id).expect("handle");
    eventually("volume gone", || async {
        s.sim
            .client
            .get_volume(s.sim.cluster, s.sim.pool, vid.volume)
            .await
            .is_err()
            .then_some(())
    })
    .await;
    let listed = ctl
        .list_snapshots(csi::ListSnapshotsRequest {
            snapshot_id: snap.snapshot_id.clone(),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    assert_eq!(listed.entries.len(), 1, "the snapshot outlives its volume");

    // A refusal is passed on with its code: the control plane's 412 is FAILED_PRECONDITION.
    let v2 = create(&mut ctl, "refused", s.sim.params(), None)
        .await
        .expect("create");
    let http = simplyblock_controlplane::Client::new(simplyblock_controlplane::ClientConfig::new(
        simplyblock_controlplane::Url::parse(&s.sim.server.url).expect("url"),
        TOKEN,
    ))
    .expect("client");
    http.raw(
        simplyblock_controlplane::Method::PUT,
        "/../../_sim/faults",
        &[],
        Some(&serde_json::json!({"spec": "error:method=DELETE,path=/api/v2/clusters/**,status=412,count=1"})),
    )
    .await
    .expect("set faults");
    let e = ctl
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: v2.volume_id.clone(),
            ..Default::default()
        })
        .await
        .expect_err("refused");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    ctl.delete_volume(csi::DeleteVolumeRequest {
        volume_id: v2.volume_id.clone(),
        ..Default::default()
    })
    .await
    .expect("the retry succeeds");
    // Deleting again, or a handle never issued, is success.
    ctl.delete_volume(csi::DeleteVolumeRequest {
        volume_id: v2.volume_id.clone(),
        ..Default::default()
    })
    .await
    .expect("idempotent");
    ctl.delete_volume(csi::DeleteVolumeRequest {
        volume_id: "not-a-handle".into(),
        ..Default::default()
    })
    .await
    .expect("unparseable");
    ctl.delete_snapshot(csi::DeleteSnapshotRequest {
        snapshot_id: snap.snapshot_id.clone(),
        ..Default::default()
    })
    .await
    .expect("delete snapshot");
    s.driver.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_requirements_are_honoured() {
    let s = setup().await;
    let (_, mut ctl, _) = s.driver.clients().await;
    let nodes = s
        .sim
        .client
        .list_storage_nodes(s.sim.cluster)
        .await
        .expect("nodes");
    let last = nodes.last().expect("node").id;
    // A storage-node segment pins the volume to that node.
    let key = format!("simplyblock.io/storage-node-uuid.{}.0", s.sim.cluster);
    let req = csi::TopologyRequirement {
        requisite: vec![csi::Topology {
            segments: [(key.clone(), last.to_string())].into_iter().collect(),
        }],
        preferred: vec![csi::Topology {
            segments: [(key, last.to_string())].into_iter().collect(),
        }],
    };
    let v = create(&mut ctl, "pinned", s.sim.params(), Some(req))
        .await
        .expect("create");
    let h = simplyblock_csi::handle::VolumeHandle::parse(&v.volume_id).expect("handle");
    let got = s
        .sim
        .client
        .get_volume(s.sim.cluster, s.sim.pool, h.volume)
        .await
        .expect("volume");
    assert_eq!(
        got.storage_node_id, last,
        "placed on the requested storage node"
    );

    // A zone map routes by the requested zone and reports the zone back.
    let other = uuid::Uuid::from_u128(0xdead);
    let mut params: HashMap<String, String> = HashMap::new();
    params.insert("pool_name".into(), s.sim.pool_name.clone());
    params.insert(
        "zone_cluster_map".into(),
        format!(r#"{{"zone-a":"{}","zone-b":"{other}"}}"#, s.sim.cluster),
    );
    let zone = |z: &str| csi::TopologyRequirement {
        requisite: vec![csi::Topology {
            segments: [("topology.kubernetes.io/zone".to_string(), z.to_string())]
                .into_iter()
                .collect(),
        }],
        preferred: vec![],
    };
    let v = create(&mut ctl, "zoned", params.clone(), Some(zone("zone-a")))
        .await
        .expect("zone a");
    assert_eq!(v.accessible_topology.len(), 1);
    assert_eq!(
        v.accessible_topology[0]
            .segments
            .get("topology.kubernetes.io/zone")
            .map(String::as_str),
        Some("zone-a")
    );
    assert!(v.volume_id.starts_with(&s.sim.cluster.to_string()));
    let e = create(&mut ctl, "zoned-b", params.clone(), Some(zone("zone-b")))
        .await
        .expect_err("zone b");
    assert_eq!(
        e.code(),
        Code::Unavailable,
        "zone-b's cluster is not in the secret: {e:?}"
    );
    let e = create(&mut ctl, "zoned-z", params, Some(zone("zone-z")))
        .await
        .expect_err("zone z");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    s.driver.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_labels_become_the_node_topology() {
    use k8s_openapi::api::core::v1::Node;
    let env = simplyblock_testenv::TestEnv::shared().expect("API server");
    let kube = env.client().await.expect("client");
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "csi-topology-node", "labels": {
            "topology.kubernetes.io/zone": "zone-a",
            "simplyblock.io/storage-node-uuid.c1.0": "11111111-1111-4111-8111-111111111111",
            "simplyblock.io/pool.gold": "allowed",
        }}
    }))
    .expect("node");
    let api: kube::Api<Node> = kube::Api::all(kube.clone());
    let _ = api.delete("csi-topology-node", &Default::default()).await;
    let created = api
        .create(&Default::default(), &node)
        .await
        .expect("create node");
    let facts = simplyblock_csi::topology::read_node(kube, "csi-topology-node")
        .await
        .expect("read");
    assert_eq!(facts.uid, created.metadata.uid);
    let segs = simplyblock_csi::topology::segments(&facts.labels, "csi-topology-node");
    assert_eq!(
        segs.get("topology.kubernetes.io/zone").map(String::as_str),
        Some("zone-a")
    );
    assert!(segs.contains_key("simplyblock.io/storage-node-uuid.c1.0"));
    assert!(segs.contains_key("simplyblock.io/pool.gold"));
    assert!(!segs.contains_key("topology.simplyblock.io/hostname"));

    // NodeGetInfo reports them.
    let sim = sbsim(3).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let driver = DriverProc::start(dir.path(), &[sim.entry()], &sim.files, segs.clone()).await;
    let (_, _, mut n) = driver.clients().await;
    let info = n
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .expect("info")
        .into_inner();
    assert_eq!(info.node_id, "node-1");
    let got: BTreeMap<String, String> = info
        .accessible_topology
        .expect("topology")
        .segments
        .into_iter()
        .collect();
    assert_eq!(got, segs);
    api.delete("csi-topology-node", &Default::default())
        .await
        .expect("delete node");
    driver.stop().await;
}

/// A command's stdout, panicking with its stderr when it fails.
fn sh(program: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_staging_mount_is_restaged_and_unstaged_lazily() {
    let s = setup().await;
    let (_, mut ctl, mut node) = s.driver.clients().await;
    let v = create(&mut ctl, "dead", s.sim.params(), None)
        .await
        .expect("create");
    let (staging, _) = paths(s.dir.path(), "dead");
    stage(&mut node, &v, &staging, mount_cap("xfs"))
        .await
        .expect("stage");
    {
        let f = std::fs::File::create(staging.join("f")).expect("create file");
        use std::io::Write;
        (&f).write_all(b"kept").expect("write");
        f.sync_all().expect("sync");
    }
    // Shut the filesystem down, as xfs does when its device fails: the mount stays in the
    // table but its root answers EIO (statvfs still succeeds).
    let shutdown = || {
        sh(
            "xfs_io",
            &["-x", "-c", "shutdown", &staging.display().to_string()],
        )
    };
    shutdown();
    assert!(fs::is_dead(&staging), "the shut-down mount reads as dead");

    stage(&mut node, &v, &staging, mount_cap("xfs"))
        .await
        .expect("restage");
    assert!(!fs::is_dead(&staging), "restaged: a live mount");
    assert_eq!(mounted(&staging).expect("mounted").fs_type, "xfs");
    assert_eq!(
        std::fs::read_to_string(staging.join("f")).expect("read"),
        "kept",
        "the recorded filesystem was remounted, not formatted"
    );

    shutdown();
    unstage(&mut node, &v, &staging).await;
    assert!(mounted(&staging).is_none(), "the dead mount is gone");
    assert!(
        simplyblock_csi::record::load(&s.driver.state_dir, &v.volume_id)
            .expect("r")
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leftover_of_the_same_name_is_deleted_and_recreated_in_one_call() {
    let s = setup().await;
    let (_, ctl, _) = s.driver.clients().await;
    let c = &s.sim.client;
    let old = c
        .create_volume(
            s.sim.cluster,
            s.sim.pool,
            &simplyblock_controlplane::VolumeCreate::new("leftover", 1 << 30),
        )
        .await
        .expect("leftover");
    // Freeze sim time: the deletion stays in progress and holds the name.
    s.sim.server.sim.clock.set_scale(0.0);
    c.delete_volume(s.sim.cluster, s.sim.pool, old)
        .await
        .expect("delete");
    let mut ctl2 = ctl.clone();
    let params = s.sim.params();
    let call = tokio::spawn(async move { create(&mut ctl2, "leftover", params, None).await });
    // The driver's create met the name (409) while the leftover was being deleted.
    eventually("the driver's create to meet the leftover", || async {
        let calls = c
            .raw(
                simplyblock_controlplane::Method::GET,
                "/../../_sim/calls",
                &[],
                None,
            )
            .await
            .ok()?;
        let calls: Vec<serde_json::Value> = serde_json::from_slice(&calls.body).ok()?;
        calls
            .iter()
            .any(|x| x["method"] == "POST" && x["status"] == 409)
            .then_some(())
    })
    .await;
    s.sim.server.sim.clock.set_scale(1000.0);
    let v = call
        .await
        .expect("join")
        .expect("recreated in the same call");
    let h = simplyblock_csi::handle::VolumeHandle::parse(&v.volume_id).expect("handle");
    assert_ne!(h.volume, old, "a new volume");
    let got = c
        .get_volume(s.sim.cluster, s.sim.pool, h.volume)
        .await
        .expect("get");
    assert_eq!(got.name, "leftover");
    assert_eq!(got.status, simplyblock_controlplane::VolumeStatus::Online);
}

fn staged_device(driver: &DriverProc, v: &csi::Volume) -> String {
    simplyblock_csi::record::load(&driver.state_dir, &v.volume_id)
        .expect("record")
        .and_then(|r| r.device)
        .expect("device")
        .display()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn class_format_parameters_reach_mkfs_and_tune2fs() {
    let s = setup().await;
    let (_, mut ctl, mut node) = s.driver.clients().await;
    let with = |extra: &[(&str, &str)]| {
        let mut p = s.sim.params();
        for (k, v) in extra {
            p.insert(k.to_string(), v.to_string());
        }
        p
    };

    // ext4: the class's mkfs options replace the defaults, tune2fs runs after mkfs.
    let v = create(
        &mut ctl,
        "fmt-ext4",
        with(&[
            ("mkfs_options", "-L sbclass -O ^orphan_file"),
            ("tune2fs_reserved_blocks", "0"),
        ]),
        None,
    )
    .await
    .expect("create");
    let ctx = &v.volume_context;
    assert_eq!(
        ctx.get("tune2fs_reserved_blocks").map(String::as_str),
        Some("0")
    );
    assert_eq!(ctx.get("model"), ctx.get("uuid"), "model names the lvol");
    assert!(ctx.contains_key("connections"), "{ctx:?}");
    let (staging, _) = paths(s.dir.path(), "fmt-ext4");
    stage(&mut node, &v, &staging, mount_cap("ext4"))
        .await
        .expect("stage");
    let dev = staged_device(&s.driver, &v);
    let info = sh("tune2fs", &["-l", &dev]);
    assert!(info.contains("Reserved block count:     0\n"), "{info}");
    assert!(
        info.contains("Filesystem volume name:   sbclass\n"),
        "{info}"
    );
    unstage(&mut node, &v, &staging).await;

    // xfs: the stripe geometry of xfs_su and xfs_sw (64 KiB = 16 blocks of 4 KiB, width 2).
    let v = create(
        &mut ctl,
        "fmt-xfs",
        with(&[("xfs_su", "64k"), ("xfs_sw", "2")]),
        None,
    )
    .await
    .expect("create");
    let (staging, _) = paths(s.dir.path(), "fmt-xfs");
    stage(&mut node, &v, &staging, mount_cap("xfs"))
        .await
        .expect("stage");
    let info = sh("xfs_info", &[&staging.display().to_string()]);
    assert!(
        info.contains("sunit=16") && info.contains("swidth=32 blks"),
        "{info}"
    );
    unstage(&mut node, &v, &staging).await;

    // Bad values are refused before anything is created, naming the parameter.
    for (extra, names) in [
        (&[("compression", "true")][..], "compression"),
        (&[("xfs_su", "64k")][..], "xfs_sw"),
        (
            &[("tune2fs_reserved_blocks", "90")][..],
            "tune2fs_reserved_blocks",
        ),
        (
            &[("dhchap_node_selector", "zone")][..],
            "dhchap_node_selector",
        ),
        (&[("max_size", "big")][..], "max_size"),
    ] {
        let e = create(&mut ctl, "refused", with(extra), None)
            .await
            .expect_err("refused");
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(names), "{e:?}");
    }
    // Regression: mkfs_options reached mkfs verbatim, so `-d <dir>` copied a node
    // directory into the volume. An option off the allow-list, or a value of the wrong
    // form for the filesystem asked for, is refused at CreateVolume.
    for (fs_type, opts, names) in [
        ("", "-L ok -d /etc", "\"-d\""),
        ("ext4", "-E root_owner=0:0", "root_owner"),
        ("xfs", "-b 4096", "\"4096\""),
    ] {
        let e = ctl
            .create_volume(csi::CreateVolumeRequest {
                name: "refused-mkfs".into(),
                volume_capabilities: vec![mount_cap(fs_type)],
                parameters: with(&[("mkfs_options", opts)]),
                ..Default::default()
            })
            .await
            .expect_err(opts);
        assert_eq!(e.code(), Code::InvalidArgument, "{opts}: {e:?}");
        assert!(e.message().contains(names), "{opts}: {e:?}");
        assert!(e.message().contains("takes only -L <label>"), "{e:?}");
    }
    // ... and at NodeStage, for a volume context written by hand, before anything is
    // formatted: the volume later formats clean, with nothing of the node's in it.
    let v = create(&mut ctl, "fmt-guarded", s.sim.params(), None)
        .await
        .expect("create");
    let (staging, _) = paths(s.dir.path(), "fmt-guarded");
    let mut forged = v.clone();
    forged
        .volume_context
        .insert("mkfs_options".into(), "-d /etc".into());
    let e = stage(&mut node, &forged, &staging, mount_cap("ext4"))
        .await
        .expect_err("forged mkfs_options");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("\"-d\""), "{e:?}");
    assert!(mounted(&staging).is_none());
    stage(&mut node, &v, &staging, mount_cap("ext4"))
        .await
        .expect("stage");
    assert!(
        !staging.join("passwd").exists(),
        "no node file in the volume"
    );
    unstage(&mut node, &v, &staging).await;

    // A volume above the class's max_size is out of range.
    let e = create(&mut ctl, "too-big", with(&[("max_size", "512Mi")]), None)
        .await
        .expect_err("above max_size");
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    assert!(
        s.sim
            .client
            .list_volumes(s.sim.cluster, s.sim.pool)
            .await
            .expect("list")
            .iter()
            .all(|v| v.name != "refused" && v.name != "too-big"),
        "nothing was created"
    );

    // The DHCHAP pool label becomes part of the volume's topology.
    let v = create(
        &mut ctl,
        "dhchap",
        with(&[("dhchap_node_selector", "simplyblock.io/pool.gold")]),
        None,
    )
    .await
    .expect("create");
    assert_eq!(
        v.accessible_topology[0]
            .segments
            .get("simplyblock.io/pool.gold")
            .map(String::as_str),
        Some("allowed")
    );
}

/// A pool that names its hosts (the operator registers the host NQN of each Node of a
/// StoragePool's allowedNodes): the control plane (sbsim) refuses this node's host, and
/// the stage fails saying why and what to do; once the node's host is allowed, it stages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_outside_a_pools_allowed_hosts_is_refused_with_the_reason() {
    let s = setup().await;
    let (_, mut ctl, mut node) = s.driver.clients().await;
    let gated = s
        .sim
        .client
        .create_pool(
            s.sim.cluster,
            &simplyblock_controlplane::types::PoolCreate {
                name: "gated".into(),
                dhchap: true,
                ..Default::default()
            },
        )
        .await
        .expect("pool");
    let other = simplyblock_csi::handle::host_nqn("node-2-uid");
    let own = simplyblock_csi::handle::host_nqn("node-1-uid");
    s.sim
        .client
        .add_pool_host(s.sim.cluster, gated.id, &other)
        .await
        .expect("other host allowed");
    let mut params = s.sim.params();
    params.insert("pool_name".into(), "gated".into());
    let v = create(&mut ctl, "gated-vol", params, None)
        .await
        .expect("create");
    let (staging, _) = paths(s.dir.path(), "gated");

    let e = stage(&mut node, &v, &staging, mount_cap("xfs"))
        .await
        .expect_err("refused");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    for part in ["node-1", "allowedNodes", &own, "not found in allowed hosts"] {
        assert!(e.message().contains(part), "{part}: {}", e.message());
    }
    assert!(mounted(&staging).is_none());

    // Allowed (the pool's host list reaches its volumes): it stages.
    s.sim
        .client
        .add_pool_host(s.sim.cluster, gated.id, &own)
        .await
        .expect("own host allowed");
    stage(&mut node, &v, &staging, mount_cap("xfs"))
        .await
        .expect("stage");
    assert_eq!(mounted(&staging).expect("staged").fs_type, "xfs");
    unstage(&mut node, &v, &staging).await;
}

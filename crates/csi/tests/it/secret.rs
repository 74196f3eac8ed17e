//! The CSI secret as kubelet serves it: the driver follows a changed secret, keeps the
//! last good cluster list when the new content is malformed, and refuses to forget a
//! volume whose cluster the secret no longer names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::*;
use simplyblock_api::csi_secret;
use simplyblock_csi::clusters::Clusters;
use simplyblock_csi::proto::csi::v1 as csi;
use tonic::Code;

/// A Secret volume as kubelet lays it out: `secret.json` leads through the `..data` link
/// to a timestamped directory, and an update writes a new directory and swaps the link.
struct MountedSecret {
    dir: PathBuf,
    version: u32,
}

impl MountedSecret {
    fn new(dir: &Path, content: &[u8]) -> MountedSecret {
        std::fs::create_dir_all(dir).expect("secret dir");
        let mut s = MountedSecret {
            dir: dir.to_path_buf(),
            version: 0,
        };
        s.update(content);
        std::os::unix::fs::symlink("..data/secret.json", dir.join(csi_secret::KEY))
            .expect("key link");
        s
    }

    fn path(&self) -> PathBuf {
        self.dir.join(csi_secret::KEY)
    }

    fn update(&mut self, content: &[u8]) {
        let old = format!("..v{}", self.version);
        self.version += 1;
        let new = format!("..v{}", self.version);
        std::fs::create_dir(self.dir.join(&new)).expect("version dir");
        std::fs::write(self.dir.join(&new).join(csi_secret::KEY), content).expect("write");
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&new, &tmp).expect("link");
        std::fs::rename(&tmp, self.dir.join("..data")).expect("swap");
        let _ = std::fs::remove_dir_all(self.dir.join(old));
    }
}

fn secret_naming(clusters: &[(uuid::Uuid, &str, &str)]) -> Vec<u8> {
    csi_secret::encode(&csi_secret::Contents {
        clusters: clusters
            .iter()
            .map(|(id, endpoint, secret)| csi_secret::Entry {
                cluster_id: id.to_string(),
                cluster_endpoint: endpoint.to_string(),
                cluster_secret: secret.to_string(),
                extra: Default::default(),
            })
            .collect(),
        local: Default::default(),
        extra: Default::default(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_follows_the_secret_and_never_forgets_a_volume() {
    let sim = sbsim(3).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let _cleanup = Cleanup {
        dir: dir.path().to_path_buf(),
        files: sim.files.clone(),
    };
    let ours = secret_naming(&[(sim.cluster, &sim.server.url, &sim.cluster_secret)]);
    let other = uuid::Uuid::from_u128(0x5eed);
    let not_ours = secret_naming(&[(other, &sim.server.url, &sim.cluster_secret)]);
    let mut secret = MountedSecret::new(&dir.path().join("secret"), &ours);
    let clusters =
        Clusters::from_files(&secret.path(), None, None, Default::default()).expect("clusters");
    let driver = DriverProc::start_serving(dir.path(), clusters, &sim.files, BTreeMap::new()).await;
    let (_, mut ctl, _) = driver.clients().await;
    let create = |name: &str| csi::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 1 << 30,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![csi::VolumeCapability {
            access_mode: Some(csi::volume_capability::AccessMode {
                mode: csi::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
            }),
            access_type: Some(csi::volume_capability::AccessType::Block(
                csi::volume_capability::BlockVolume {},
            )),
        }],
        parameters: sim.params(),
        ..Default::default()
    };
    let delete = |v: &csi::Volume| csi::DeleteVolumeRequest {
        volume_id: v.volume_id.clone(),
        ..Default::default()
    };
    let volume_count = async || {
        sim.client
            .list_volumes(sim.cluster, sim.pool)
            .await
            .expect("list")
            .len()
    };

    let v = ctl
        .create_volume(create("kept"))
        .await
        .expect("create")
        .into_inner()
        .volume
        .expect("volume");
    assert_eq!(volume_count().await, 1);

    // Malformed content is not served: the clusters of the last good secret still are.
    secret.update(b"{\"clusters\": [");
    ctl.create_volume(create("after-a-bad-edit"))
        .await
        .expect("the last good secret still serves the cluster");
    assert_eq!(volume_count().await, 2);

    // Regression: a secret without the volume's cluster made DeleteVolume answer success
    // and leave the volume behind. The changed secret is read, and the delete refused.
    secret.update(&not_ours);
    let e = ctl.delete_volume(delete(&v)).await.expect_err("refused");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains(&sim.cluster.to_string()) && e.message().contains(csi_secret::NAME),
        "{e:?}"
    );
    assert_eq!(volume_count().await, 2, "nothing was deleted");

    // With the cluster back in the secret the retried delete goes through.
    secret.update(&ours);
    ctl.delete_volume(delete(&v)).await.expect("delete");
    // The control plane deletes in the background: the volume goes, the other stays.
    simplyblock_testenv::wait::until("the deleted volume gone", async || {
        (volume_count().await == 1).then_some(())
    })
    .await;
    // A handle the driver never issued still names nothing to delete.
    ctl.delete_volume(csi::DeleteVolumeRequest {
        volume_id: "reallyfakevolumeid".into(),
        ..Default::default()
    })
    .await
    .expect("an unparsable handle deletes nothing and succeeds");
    driver.stop().await;
}

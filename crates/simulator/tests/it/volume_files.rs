//! `--volume-files`: each volume and snapshot is a sparse file of its size that follows
//! create, snapshot, clone, resize and delete through the API.

use crate::common::*;
use simplyblock_controlplane::*;

#[tokio::test]
async fn volume_files_follow_the_api() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = dir.path().join("volumes");
    let mut cfg = config(dir.path(), &fleet_yaml(2, 2));
    cfg.volume_files = Some(files.clone());
    let env = start_with(dir, cfg).await;
    let c = &env.client;
    let cid = active_cluster(c, "vf", 2).await;
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
    let mut body = VolumeCreate::new("v", 1 << 30);
    body.ndcs = 1;
    body.npcs = 1;
    let v = c.create_volume(cid, pool.id, &body).await.expect("volume");
    let vf = files.join(format!("{v}.img"));
    assert_eq!(std::fs::metadata(&vf).expect("file").len(), 1 << 30);
    // Data written to the file travels into a snapshot and its clone.
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&vf)
            .expect("open");
        f.seek(SeekFrom::Start(4096)).expect("seek");
        f.write_all(b"payload").expect("write");
    }
    let s = c
        .create_snapshot(cid, pool.id, v, "s")
        .await
        .expect("snapshot");
    let clone = c
        .create_volume_from_snapshot(
            cid,
            pool.id,
            &VolumeClone {
                name: "c".into(),
                snapshot_id: Some(s),
                size: 2 << 30,
                ..Default::default()
            },
        )
        .await
        .expect("clone");
    let data = std::fs::read(files.join(format!("{clone}.img"))).expect("clone file");
    assert_eq!(data.len(), 2 << 30);
    assert_eq!(&data[4096..4103], b"payload");
    c.resize_volume(cid, pool.id, v, 3 << 30)
        .await
        .expect("resize");
    assert_eq!(std::fs::metadata(&vf).expect("file").len(), 3 << 30);
    c.delete_volume(cid, pool.id, v).await.expect("delete");
    eventually("volume file removed", || async {
        (!vf.exists()).then_some(())
    })
    .await;
}

//! `POST …/devices/{d}/fail`, the newer control plane's call: only a removed device can be
//! failed, and a failed one is restarted only explicitly.

use simplyblock_controlplane::DeviceStatus;

use crate::common::{active_cluster, start};

#[tokio::test]
async fn only_a_removed_device_is_failed_and_a_restart_brings_it_back() {
    let env = start(3, 3).await;
    let c = &env.client;
    let cid = active_cluster(c, "fail", 3).await;
    let node = c.list_storage_nodes(cid).await.expect("nodes")[0].id;
    let d = c.list_devices(cid, node).await.expect("devices")[0].id;
    let status = async || c.get_device(cid, node, d).await.expect("device").status;

    // Refused as the control plane refuses device verbs: a plain 500.
    let refused = c.fail_device(cid, node, d).await.expect_err("online");
    assert!(refused.to_string().contains("500"), "{refused}");
    assert_eq!(status().await, DeviceStatus::Online);

    c.remove_device(cid, node, d, false).await.expect("remove");
    c.fail_device(cid, node, d).await.expect("fail");
    assert_eq!(status().await, DeviceStatus::Failed);
    // Failed is terminal for remove and fail alike.
    assert!(c.remove_device(cid, node, d, false).await.is_err());
    assert!(c.fail_device(cid, node, d).await.is_err());

    c.restart_device(cid, node, d, false)
        .await
        .expect("restart");
    assert_eq!(status().await, DeviceStatus::Online);
}

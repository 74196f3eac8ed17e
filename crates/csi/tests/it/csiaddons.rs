//! The csi-addons services on the driver's socket, as the csi-addons sidecar reaches them.
//! Tests of one site against one sbsim cluster; the two-site replication tests join here.

use std::collections::BTreeMap;

use crate::common::*;
use ident::identity_client::IdentityClient;
use simplyblock_csi::proto::csiaddons::identity as ident;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_site_the_addons_identity_answers_beside_csi() {
    let sim = sbsim(3).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let driver = DriverProc::start(dir.path(), &[sim.entry()], &sim.files, BTreeMap::new()).await;
    let mut id = IdentityClient::new(driver.channel().await);

    let info = id
        .get_identity(ident::GetIdentityRequest {})
        .await
        .expect("GetIdentity")
        .into_inner();
    assert_eq!(info.name, simplyblock_csi::handle::DRIVER_NAME);
    assert!(!info.vendor_version.is_empty());

    let caps = id
        .get_capabilities(ident::GetCapabilitiesRequest {})
        .await
        .expect("GetCapabilities")
        .into_inner();
    let controller = ident::Capability {
        r#type: Some(ident::capability::Type::Service(
            ident::capability::Service {
                r#type: ident::capability::service::Type::ControllerService as i32,
            },
        )),
    };
    let replication = |t: ident::capability::volume_replication::Type| ident::Capability {
        r#type: Some(ident::capability::Type::VolumeReplication(
            ident::capability::VolumeReplication { r#type: t as i32 },
        )),
    };
    let group = |t: ident::capability::volume_group::Type| ident::Capability {
        r#type: Some(ident::capability::Type::VolumeGroup(
            ident::capability::VolumeGroup { r#type: t as i32 },
        )),
    };
    use ident::capability::volume_group::Type as Vg;
    assert_eq!(
        caps.capabilities,
        vec![
            controller,
            replication(ident::capability::volume_replication::Type::VolumeReplication),
            replication(ident::capability::volume_replication::Type::GetReplicationDestinationInfo),
            group(Vg::VolumeGroup),
            group(Vg::LimitVolumeToOneVolumeGroup),
            group(Vg::DoNotAllowVgToDeleteVolumes),
            group(Vg::ModifyVolumeGroup),
            group(Vg::GetVolumeGroup),
            group(Vg::ListVolumeGroups),
        ]
    );

    let probe = id
        .probe(ident::ProbeRequest {})
        .await
        .expect("Probe")
        .into_inner();
    assert_eq!(probe.ready, Some(true));

    // The CSI Identity still answers on the same socket.
    let (mut csi_id, _, _) = driver.clients().await;
    let plugin = csi_id
        .get_plugin_info(simplyblock_csi::proto::csi::v1::GetPluginInfoRequest {})
        .await
        .expect("GetPluginInfo")
        .into_inner();
    assert_eq!(plugin.name, info.name);
    driver.stop().await;
}

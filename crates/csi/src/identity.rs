//! The CSI Identity service.

use tonic::{Request, Response, Status};

use crate::proto::csi::v1 as csi;
use crate::proto::csi::v1::identity_server::Identity;
use csi::plugin_capability::{self, service, volume_expansion};

#[derive(Debug, Clone)]
pub struct IdentityService {
    pub name: String,
    pub version: String,
    /// Whether this process serves the Controller and GroupController services.
    pub controller: bool,
}

type R<T> = std::result::Result<Response<T>, Status>;

#[tonic::async_trait]
impl Identity for IdentityService {
    async fn get_plugin_info(
        &self,
        _r: Request<csi::GetPluginInfoRequest>,
    ) -> R<csi::GetPluginInfoResponse> {
        Ok(Response::new(csi::GetPluginInfoResponse {
            name: self.name.clone(),
            vendor_version: self.version.clone(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _r: Request<csi::GetPluginCapabilitiesRequest>,
    ) -> R<csi::GetPluginCapabilitiesResponse> {
        let svc = |t: service::Type| csi::PluginCapability {
            r#type: Some(plugin_capability::Type::Service(
                plugin_capability::Service { r#type: t as i32 },
            )),
        };
        let exp = |t: volume_expansion::Type| csi::PluginCapability {
            r#type: Some(plugin_capability::Type::VolumeExpansion(
                plugin_capability::VolumeExpansion { r#type: t as i32 },
            )),
        };
        let mut caps = vec![
            svc(service::Type::VolumeAccessibilityConstraints),
            exp(volume_expansion::Type::Online),
            exp(volume_expansion::Type::Offline),
        ];
        if self.controller {
            caps.insert(0, svc(service::Type::ControllerService));
            caps.insert(1, svc(service::Type::GroupControllerService));
        }
        Ok(Response::new(csi::GetPluginCapabilitiesResponse {
            capabilities: caps,
        }))
    }

    async fn probe(&self, _r: Request<csi::ProbeRequest>) -> R<csi::ProbeResponse> {
        Ok(Response::new(csi::ProbeResponse { ready: Some(true) }))
    }
}

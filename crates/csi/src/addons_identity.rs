//! The csi-addons Identity service, served on the driver's socket beside CSI: the
//! csi-addons sidecar asks it which csi-addons services this process serves.

use tonic::{Request, Response, Status};

use crate::proto::csiaddons::identity as ident;
use ident::capability::{self, service, volume_group, volume_replication};
use ident::identity_server::Identity;

#[derive(Debug, Clone)]
pub struct AddonsIdentityService {
    pub name: String,
    pub version: String,
    /// Whether this process serves the Controller service (and with it Replication and
    /// VolumeGroup).
    pub controller: bool,
}

impl AddonsIdentityService {
    /// The capabilities advertised: only services this process actually serves. The
    /// controller mode serves volume replication, including the destination lookup Ramen
    /// needs to restore a group, and volume groups, which change membership only by
    /// taking members out and never delete their volumes.
    pub fn capabilities(&self) -> Vec<ident::Capability> {
        let mut caps = Vec::new();
        if self.controller {
            caps.push(ident::Capability {
                r#type: Some(capability::Type::Service(capability::Service {
                    r#type: service::Type::ControllerService as i32,
                })),
            });
            for t in [
                volume_replication::Type::VolumeReplication,
                volume_replication::Type::GetReplicationDestinationInfo,
            ] {
                caps.push(ident::Capability {
                    r#type: Some(capability::Type::VolumeReplication(
                        capability::VolumeReplication { r#type: t as i32 },
                    )),
                });
            }
            for t in VOLUME_GROUP {
                caps.push(group(t));
            }
        }
        caps
    }
}

/// The volume group capabilities advertised: every RPC is served, a volume is in one
/// consistency group at most, and deleting a group never deletes its volumes.
const VOLUME_GROUP: [volume_group::Type; 6] = [
    volume_group::Type::VolumeGroup,
    volume_group::Type::LimitVolumeToOneVolumeGroup,
    volume_group::Type::DoNotAllowVgToDeleteVolumes,
    volume_group::Type::ModifyVolumeGroup,
    volume_group::Type::GetVolumeGroup,
    volume_group::Type::ListVolumeGroups,
];

fn group(t: volume_group::Type) -> ident::Capability {
    ident::Capability {
        r#type: Some(capability::Type::VolumeGroup(capability::VolumeGroup {
            r#type: t as i32,
        })),
    }
}

type R<T> = std::result::Result<Response<T>, Status>;

#[tonic::async_trait]
impl Identity for AddonsIdentityService {
    async fn get_identity(
        &self,
        _r: Request<ident::GetIdentityRequest>,
    ) -> R<ident::GetIdentityResponse> {
        Ok(Response::new(ident::GetIdentityResponse {
            name: self.name.clone(),
            vendor_version: self.version.clone(),
            manifest: Default::default(),
        }))
    }

    async fn get_capabilities(
        &self,
        _r: Request<ident::GetCapabilitiesRequest>,
    ) -> R<ident::GetCapabilitiesResponse> {
        Ok(Response::new(ident::GetCapabilitiesResponse {
            capabilities: self.capabilities(),
        }))
    }

    async fn probe(&self, _r: Request<ident::ProbeRequest>) -> R<ident::ProbeResponse> {
        Ok(Response::new(ident::ProbeResponse { ready: Some(true) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(controller: bool) -> AddonsIdentityService {
        AddonsIdentityService {
            name: "csi.simplyblock.io".into(),
            version: "1".into(),
            controller,
        }
    }

    #[test]
    fn controller_replication_and_groups_are_advertised_only_where_they_are_served() {
        let controller = ident::Capability {
            r#type: Some(capability::Type::Service(capability::Service {
                r#type: service::Type::ControllerService as i32,
            })),
        };
        let replication = |t: volume_replication::Type| ident::Capability {
            r#type: Some(capability::Type::VolumeReplication(
                capability::VolumeReplication { r#type: t as i32 },
            )),
        };
        assert_eq!(
            svc(true).capabilities(),
            vec![
                controller,
                replication(volume_replication::Type::VolumeReplication),
                replication(volume_replication::Type::GetReplicationDestinationInfo),
                group(volume_group::Type::VolumeGroup),
                group(volume_group::Type::LimitVolumeToOneVolumeGroup),
                group(volume_group::Type::DoNotAllowVgToDeleteVolumes),
                group(volume_group::Type::ModifyVolumeGroup),
                group(volume_group::Type::GetVolumeGroup),
                group(volume_group::Type::ListVolumeGroups),
            ]
        );
        assert_eq!(svc(false).capabilities(), vec![]);
    }
}

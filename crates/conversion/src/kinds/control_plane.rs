//! ControlPlane: the v1alpha1 image is the image of the control plane the operator installs
//! here, the hub's `spec.source.local.image`; the phases are renamed, the hub's Degraded and
//! Unavailable read as Ready and Initializing in v1alpha1. The rest of the hub's source
//! (a managed control plane, the local one's settings) and status are stashed going down.

use kube::CustomResourceExt;
use simplyblock_api::{ControlPlane, v1alpha1};

use crate::{Kind, Mapping, Rule};

pub const KIND: Kind = Kind {
    kind: "ControlPlane",
    rules: &[
        Rule::same("spec.image", "spec.source.local.image"),
        // The first pair of each v1alpha1 phase is its hub phase going up.
        Rule::with(
            "status.phase",
            "status.phase",
            Mapping::Enum(&[
                ("Initializing", "Installing"),
                ("Ready", "Available"),
                ("Ready", "Degraded"),
                ("Initializing", "Unavailable"),
            ]),
        ),
    ],
    v1alpha1: v1alpha1::ControlPlane::crd,
    hub: ControlPlane::crd,
};

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::{HUB, SPOKE, convert};

    const IMAGE: &str = "quay.io/simplyblock-io/simplyblock:26.2.2";

    #[test]
    fn the_go_operators_control_plane_is_a_local_one_with_its_image() {
        let v1alpha1 = json!({
            "apiVersion": SPOKE,
            "kind": "ControlPlane",
            "metadata": {"name": "simplyblock", "namespace": "simplyblock"},
            "spec": {"image": IMAGE},
            "status": {
                "phase": "Ready",
                "message": "FoundationDB is healthy",
                "lastChecked": "2026-01-02T03:04:05Z"
            }
        });
        let hub = convert(&v1alpha1, HUB);
        assert_eq!(
            hub,
            json!({
                "apiVersion": HUB,
                "kind": "ControlPlane",
                "metadata": {"name": "simplyblock", "namespace": "simplyblock"},
                "spec": {"source": {"local": {"image": IMAGE}}},
                "status": {
                    "phase": "Available",
                    "message": "FoundationDB is healthy",
                    "lastChecked": "2026-01-02T03:04:05Z"
                }
            })
        );
        assert_eq!(convert(&hub, SPOKE), v1alpha1);
    }

    #[test]
    fn a_degraded_control_plane_reads_as_ready_and_keeps_what_v1alpha1_cannot_say() {
        let hub = json!({
            "apiVersion": HUB,
            "kind": "ControlPlane",
            "metadata": {"name": "simplyblock", "namespace": "simplyblock"},
            "spec": {"source": {"local": {"image": IMAGE, "replicas": 3}}},
            "status": {"phase": "Degraded", "endpoint": "https://simplyblock-api:8080"}
        });
        let down = convert(&hub, SPOKE);
        assert_eq!(
            down,
            json!({
                "apiVersion": SPOKE,
                "kind": "ControlPlane",
                "metadata": {
                    "name": "simplyblock",
                    "namespace": "simplyblock",
                    "annotations": {
                        "storage.simplyblock.io/conversion-spec.source": r#"{"local":{"replicas":3}}"#,
                        "storage.simplyblock.io/conversion-status.endpoint": r#""https://simplyblock-api:8080""#,
                        "storage.simplyblock.io/conversion-status.phase": r#""Degraded""#
                    }
                },
                "spec": {"image": IMAGE},
                "status": {"phase": "Ready"}
            })
        );
        assert_eq!(convert(&hub_of(&down), SPOKE), down);
        assert_eq!(hub_of(&down), hub);
    }

    fn hub_of(v1alpha1: &serde_json::Value) -> serde_json::Value {
        convert(v1alpha1, HUB)
    }
}

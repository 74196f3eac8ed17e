//! What a TestFailover places in its bubble: the names of everything a drill creates, the
//! source's CSI attributes with the keys that name the source removed, and the statically
//! bound PersistentVolume and claim of each clone. Pure: no I/O.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, Namespace, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use simplyblock_api::keys::CSI_DRIVER_NAME;
use simplyblock_api::names::digest8;
use simplyblock_api::test_failover::{CloneStatus, TEST_ID_LABEL};

/// The CSI attributes that name the source volume (or its connection), and so must not be
/// carried over to a clone: the clone's handle and the driver's lookups supply them anew.
const SOURCE_KEYS: &[&str] = &[
    "cluster_id",
    "pool_name",
    "nqn",
    "connections",
    "model",
    "name",
    "uuid",
    "nsId",
    "targetLvolID",
];
/// Prefixes of keys Kubernetes and the provisioner write, which describe the source claim.
const SOURCE_PREFIXES: &[&str] = &["csi.storage.k8s.io/", "storage.kubernetes.io/"];

/// The name of a drill's object of kind `suffix` (`clone`, `snap`, `pv`, ...): a digest of
/// the drill's namespace and name, so a restarted controller finds what it made.
pub fn object_name(drill_namespace: &str, drill_name: &str, suffix: &str) -> String {
    let digest = digest8(format!("{drill_namespace}/{drill_name}").as_bytes());
    format!("tfo-{digest}-{suffix}")
}

/// The name of a group member's object: the drill's name plus a digest of the member.
pub fn member_object_name(
    drill_namespace: &str,
    drill_name: &str,
    member: &str,
    suffix: &str,
) -> String {
    let member_digest = digest8(member.as_bytes());
    object_name(
        drill_namespace,
        drill_name,
        &format!("{suffix}-{}", &member_digest[..4]),
    )
}

/// The source's CSI attributes without the keys that name the source.
pub fn strip_volume_context(attributes: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    attributes
        .iter()
        .filter(|(key, _)| {
            !SOURCE_KEYS.contains(&key.as_str())
                && !SOURCE_PREFIXES.iter().any(|p| key.starts_with(p))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn labels(test_id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(TEST_ID_LABEL.to_owned(), test_id.to_owned())])
}

/// The bubble namespace, labelled with the drill's UID.
pub fn namespace(name: &str, test_id: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels(test_id)),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// The PersistentVolume of one clone: statically provisioned (no class), kept on release,
/// reserved for its claim, with the source's filesystem type, attributes and mode.
pub fn persistent_volume(
    pv_name: &str,
    clone_handle: &str,
    slot: &CloneStatus,
    claim_namespace: &str,
    claim_name: &str,
    test_id: &str,
) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(pv_name.to_owned()),
            labels: Some(labels(test_id)),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            capacity: slot
                .size_bytes
                .map(|bytes| BTreeMap::from([("storage".to_owned(), Quantity(bytes.to_string()))])),
            claim_ref: Some(ObjectReference {
                namespace: Some(claim_namespace.to_owned()),
                name: Some(claim_name.to_owned()),
                ..ObjectReference::default()
            }),
            csi: Some(CSIPersistentVolumeSource {
                driver: CSI_DRIVER_NAME.to_owned(),
                volume_handle: clone_handle.to_owned(),
                fs_type: slot.source_fs_type.clone(),
                volume_attributes: slot.source_volume_context.clone(),
                ..CSIPersistentVolumeSource::default()
            }),
            persistent_volume_reclaim_policy: Some("Retain".to_owned()),
            storage_class_name: Some(String::new()),
            volume_mode: slot.source_volume_mode.clone(),
            ..PersistentVolumeSpec::default()
        }),
        ..PersistentVolume::default()
    }
}

/// The claim bound to a clone's PersistentVolume, in the bubble namespace.
pub fn persistent_volume_claim(
    claim_namespace: &str,
    claim_name: &str,
    pv_name: &str,
    slot: &CloneStatus,
    test_id: &str,
) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name.to_owned()),
            namespace: Some(claim_namespace.to_owned()),
            labels: Some(labels(test_id)),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            resources: slot.size_bytes.map(|bytes| VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(bytes.to_string()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            storage_class_name: Some(String::new()),
            volume_mode: slot.source_volume_mode.clone(),
            volume_name: Some(pv_name.to_owned()),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_per_drill_and_fit_a_label() {
        let a = object_name("apps", "drill", "clone");
        assert_eq!(a, object_name("apps", "drill", "clone"));
        assert_ne!(a, object_name("apps", "drill-2", "clone"));
        assert_ne!(a, object_name("other", "drill", "clone"));
        assert!(a.starts_with("tfo-") && a.ends_with("-clone"), "{a}");
        let member = member_object_name("apps", "drill", "lvol-1", "clone");
        assert_ne!(
            member,
            member_object_name("apps", "drill", "lvol-2", "clone")
        );
        assert!(member.len() <= 63, "{member}");
    }

    #[test]
    fn the_source_identity_is_stripped_and_the_rest_kept() {
        let attributes: BTreeMap<String, String> = [
            ("cluster_id", "c"),
            ("pool_name", "p"),
            ("nqn", "nqn.x"),
            ("connections", "[]"),
            ("model", "m"),
            ("name", "n"),
            ("uuid", "u"),
            ("nsId", "1"),
            ("targetLvolID", "t"),
            ("csi.storage.k8s.io/pvc/name", "data"),
            ("storage.kubernetes.io/csiProvisionerIdentity", "x"),
            ("targetType", "tcp"),
            ("encryption", "true"),
            ("ctrlLossTmo", "60"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let kept: Vec<String> = strip_volume_context(&attributes).into_keys().collect();
        assert_eq!(kept, ["ctrlLossTmo", "encryption", "targetType"]);
    }

    #[test]
    fn the_clone_carries_the_sources_fs_type_and_mode_and_binds_its_claim() {
        let slot = CloneStatus {
            source_ref: "data".into(),
            size_bytes: Some(1 << 30),
            source_fs_type: Some("xfs".into()),
            source_volume_mode: Some("Block".into()),
            source_volume_context: Some(BTreeMap::from([("targetType".into(), "tcp".into())])),
            ..CloneStatus::default()
        };
        let pv = persistent_volume("tfo-x-pv", "c:p:clone", &slot, "bubble", "data", "uid");
        let spec = pv.spec.expect("a spec");
        let csi = spec.csi.expect("a CSI source");
        assert_eq!(csi.driver, "csi.simplyblock.io");
        assert_eq!(csi.volume_handle, "c:p:clone");
        assert_eq!(csi.fs_type.as_deref(), Some("xfs"));
        assert_eq!(spec.volume_mode.as_deref(), Some("Block"));
        assert_eq!(spec.storage_class_name.as_deref(), Some(""));
        assert_eq!(
            spec.persistent_volume_reclaim_policy.as_deref(),
            Some("Retain")
        );
        let claim_ref = spec.claim_ref.expect("reserved for its claim");
        assert_eq!(
            (claim_ref.namespace.as_deref(), claim_ref.name.as_deref()),
            (Some("bubble"), Some("data"))
        );
        let pvc = persistent_volume_claim("bubble", "data", "tfo-x-pv", &slot, "uid");
        let claim = pvc.spec.expect("a spec");
        assert_eq!(claim.volume_name.as_deref(), Some("tfo-x-pv"));
        assert_eq!(claim.volume_mode.as_deref(), Some("Block"));
        assert_eq!(claim.storage_class_name.as_deref(), Some(""));
        assert_eq!(pvc.metadata.labels.expect("labelled")[TEST_ID_LABEL], "uid");
    }
}

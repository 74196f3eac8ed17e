//! What the backup controllers share about claims: which simplyblock volume a claim is
//! bound to, and whether a label selector picks an object.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};
use simplyblock_api::keys::CSI_DRIVER_NAME;
use simplyblock_api::volume_handle::{PoolRef, VolumeHandle};
use simplyblock_controlplane::Uuid;

/// A claim's simplyblock volume, as its bound PersistentVolume names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimVolume {
    pub persistent_volume: String,
    pub handle: VolumeHandle,
    pub fs_type: Option<String>,
}

impl ClaimVolume {
    /// The pool's id; `None` on a volume from before the v2 API, which names its pool.
    pub fn pool_id(&self) -> Option<Uuid> {
        match &self.handle.pool {
            PoolRef::Id(id) => Some(*id),
            PoolRef::Name(_) => None,
        }
    }
}

/// `namespace/name`, how a claim is named in messages.
pub fn claim_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The simplyblock volume behind `pv`; why not, in a clause that completes "…because".
pub fn volume_of_pv(pv: &PersistentVolume) -> Result<ClaimVolume, String> {
    let name = pv.name_any();
    let Some(csi) = pv.spec.as_ref().and_then(|s| s.csi.as_ref()) else {
        return Err(format!("the volume {name} is not a CSI volume"));
    };
    if csi.driver != CSI_DRIVER_NAME {
        return Err(format!(
            "the volume {name} is served by {}, not by {CSI_DRIVER_NAME}",
            csi.driver
        ));
    }
    let handle = VolumeHandle::parse(&csi.volume_handle).map_err(|e| {
        format!(
            "the volume {name} carries an unreadable handle {:?} ({e})",
            csi.volume_handle
        )
    })?;
    Ok(ClaimVolume {
        persistent_volume: name,
        handle,
        fs_type: csi.fs_type.clone(),
    })
}

/// The simplyblock volume `claim` is bound to, with its PersistentVolume looked up in
/// `pvs` (by name); why not otherwise.
pub fn volume_of_claim(
    claim: &PersistentVolumeClaim,
    pvs: &BTreeMap<String, PersistentVolume>,
) -> Result<ClaimVolume, String> {
    let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    let Some(pv_name) = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|_| bound)
    else {
        return Err("the claim is not bound yet".into());
    };
    let Some(pv) = pvs.get(pv_name) else {
        return Err(format!("its volume {pv_name} does not exist"));
    };
    volume_of_pv(pv)
}

/// Whether `selector` picks an object labelled `labels`; absent picks nothing. A selector
/// that cannot be read picks nothing either (the API server validates it on write).
pub fn selects(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(selector) = selector else {
        return false;
    };
    Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(labels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pv(driver: &str, handle: &str) -> PersistentVolume {
        serde_json::from_value(json!({
            "metadata": {"name": "pv1"},
            "spec": {"csi": {"driver": driver, "volumeHandle": handle, "fsType": "xfs"}},
        }))
        .expect("pv")
    }

    #[test]
    fn only_a_simplyblock_handle_names_a_volume() {
        let c = Uuid::from_u128(1);
        let p = Uuid::from_u128(2);
        let v = Uuid::from_u128(3);
        let ok = volume_of_pv(&pv(CSI_DRIVER_NAME, &format!("{c}:{p}:{v}"))).expect("ours");
        assert_eq!((ok.handle.volume, ok.pool_id()), (v, Some(p)));
        assert_eq!(ok.fs_type.as_deref(), Some("xfs"));
        let other = volume_of_pv(&pv("ebs.csi.aws.com", "vol-1")).expect_err("not ours");
        assert!(other.contains("ebs.csi.aws.com"), "{other}");
        let bad = volume_of_pv(&pv(CSI_DRIVER_NAME, "x")).expect_err("bad handle");
        assert!(bad.contains("unreadable handle"), "{bad}");
    }

    #[test]
    fn an_absent_selector_picks_nothing_and_an_empty_one_everything() {
        let labels: BTreeMap<String, String> = [("app".to_owned(), "db".to_owned())].into();
        assert!(!selects(None, &labels));
        assert!(selects(Some(&LabelSelector::default()), &labels));
        let db = LabelSelector {
            match_labels: Some([("app".to_owned(), "db".to_owned())].into()),
            ..LabelSelector::default()
        };
        assert!(selects(Some(&db), &labels));
        assert!(!selects(Some(&db), &BTreeMap::new()));
    }
}

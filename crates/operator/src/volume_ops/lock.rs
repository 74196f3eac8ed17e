//! The subsystem lock: the annotation [`ACTIVE_OPS_ANNOTATION`] naming one operation on
//! EVERY PersistentVolume of an NVMe-oF subsystem. Taken in name order, all or nothing,
//! each write conditional on the volume's resourceVersion; a partial acquisition is
//! released; a lock whose holder has ended or is gone is broken.

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use simplyblock_api::keys::ACTIVE_OPS_ANNOTATION;

use crate::runtime::kit::Error;

/// What a holder named on a volume is, as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// Not terminal: its lock stands.
    Live,
    /// Terminal: it should have released; the lock is cleared.
    Ended,
    /// No such operation: the lock is broken.
    Missing,
}

/// The lock decision over the subsystem's volumes `(name, holder)`. Pure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockPlan {
    /// Every volume names `me`.
    Held,
    /// Clear these stale locks first (their holders ended or are gone).
    Break(Vec<String>),
    /// A live operation holds at least one volume: wait for it.
    Queue(String),
    /// Annotate these volumes, in this (name) order.
    Acquire(Vec<String>),
}

/// `volumes` are the subsystem's PersistentVolumes with their holders; `holder` says what
/// each named holder (never `me`) is.
pub fn plan(
    me: &str,
    volumes: &[(String, Option<String>)],
    holder: impl Fn(&str) -> Holder,
) -> LockPlan {
    let mut sorted: Vec<&(String, Option<String>)> = volumes.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut stale = Vec::new();
    let mut free = Vec::new();
    for (pv, h) in sorted {
        match h.as_deref() {
            Some(h) if h == me => {}
            Some(h) => match holder(h) {
                Holder::Live => return LockPlan::Queue(h.to_owned()),
                Holder::Ended | Holder::Missing => stale.push(pv.clone()),
            },
            None => free.push(pv.clone()),
        }
    }
    if !stale.is_empty() {
        LockPlan::Break(stale)
    } else if free.is_empty() {
        LockPlan::Held
    } else {
        LockPlan::Acquire(free)
    }
}

/// The holder a volume's annotation names.
pub fn holder_of(pv: &PersistentVolume) -> Option<String> {
    pv.annotations().get(ACTIVE_OPS_ANNOTATION).cloned()
}

/// Sets (`Some`) or clears (`None`) the annotation on `pv` as read: `false` when the
/// volume changed since (409) or is gone.
async fn write(
    kube: &kube::Client,
    pv: &PersistentVolume,
    value: Option<&str>,
) -> Result<bool, Error> {
    let patch = json!({"metadata": {
        "resourceVersion": pv.resource_version(),
        "annotations": {ACTIVE_OPS_ANNOTATION: value},
    }});
    match Api::<PersistentVolume>::all(kube.clone())
        .patch(
            &pv.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Takes the lock on `names` (in the given order), each read fresh and written only while
/// free. On any refusal the volumes taken so far are released and `false` is returned.
pub async fn acquire(kube: &kube::Client, me: &str, names: &[String]) -> Result<bool, Error> {
    let api = Api::<PersistentVolume>::all(kube.clone());
    let mut taken: Vec<String> = Vec::new();
    for name in names {
        let ok = match api.get_opt(name).await? {
            Some(pv) if holder_of(&pv).is_none() => write(kube, &pv, Some(me)).await?,
            Some(pv) => holder_of(&pv).as_deref() == Some(me),
            None => false,
        };
        if !ok {
            release(kube, me, &taken).await?;
            return Ok(false);
        }
        taken.push(name.clone());
    }
    Ok(true)
}

/// Clears the lock on every volume of `names` that still names `holder`, each read fresh.
/// Idempotent: a volume gone or naming another holder is left alone.
pub async fn release(kube: &kube::Client, holder: &str, names: &[String]) -> Result<(), Error> {
    let api = Api::<PersistentVolume>::all(kube.clone());
    for name in names {
        for _ in 0..5 {
            let Some(pv) = api.get_opt(name).await? else {
                break;
            };
            if holder_of(&pv).as_deref() != Some(holder) {
                break;
            }
            if write(kube, &pv, None).await? {
                break;
            }
        }
    }
    Ok(())
}

/// Every PersistentVolume whose annotation names `holder`.
pub async fn held_by(kube: &kube::Client, holder: &str) -> Result<Vec<String>, Error> {
    Ok(Api::<PersistentVolume>::all(kube.clone())
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter(|pv| holder_of(pv).as_deref() == Some(holder))
        .map(|pv| pv.name_any())
        .collect())
}

/// Clears a stale lock on `name` if it still names `stale` (optimistic).
pub async fn break_stale(kube: &kube::Client, name: &str, stale: &str) -> Result<bool, Error> {
    let api = Api::<PersistentVolume>::all(kube.clone());
    match api.get_opt(name).await? {
        Some(pv) if holder_of(&pv).as_deref() == Some(stale) => write(kube, &pv, None).await,
        _ => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vols(v: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        v.iter()
            .map(|(n, h)| (n.to_string(), h.map(str::to_owned)))
            .collect()
    }

    #[test]
    fn free_volumes_are_taken_in_name_order() {
        let v = vols(&[("pv-b", None), ("pv-a", None), ("pv-c", Some("me"))]);
        assert_eq!(
            plan("me", &v, |_| Holder::Live),
            LockPlan::Acquire(vec!["pv-a".into(), "pv-b".into()])
        );
    }

    #[test]
    fn a_live_holder_on_any_volume_queues_the_whole_subsystem() {
        let v = vols(&[("pv-a", None), ("pv-b", Some("other"))]);
        assert_eq!(
            plan("me", &v, |_| Holder::Live),
            LockPlan::Queue("other".into())
        );
    }

    #[test]
    fn ended_and_missing_holders_are_broken_before_anything_is_taken() {
        let v = vols(&[
            ("pv-a", Some("gone")),
            ("pv-b", Some("done")),
            ("pv-c", None),
        ]);
        let holder = |h: &str| match h {
            "gone" => Holder::Missing,
            _ => Holder::Ended,
        };
        assert_eq!(
            plan("me", &v, holder),
            LockPlan::Break(vec!["pv-a".into(), "pv-b".into()])
        );
    }

    #[test]
    fn every_volume_naming_me_is_held() {
        let v = vols(&[("pv-a", Some("me")), ("pv-b", Some("me"))]);
        assert_eq!(plan("me", &v, |_| Holder::Live), LockPlan::Held);
    }
}

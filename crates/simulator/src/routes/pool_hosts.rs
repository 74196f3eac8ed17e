//! A DH-HMAC-CHAP pool's host list: the hosts the control plane lets connect the pool's
//! volumes. A volume created or cloned into such a pool starts with the pool's hosts, and
//! a host added to or removed from the pool is added to or removed from each of its
//! volumes; `/connect` then refuses every other host (see `volume::connect`).

use simplyblock_controlplane::Uuid;
use simplyblock_controlplane::types::VolumeStatus;

use crate::model::*;
use crate::sim::St;

/// A DH-HMAC-CHAP secret in the form the control plane hands out.
pub fn dhchap_key(st: &mut St<'_>) -> String {
    format!("DHHC-1:01:{}:", st.alnum(48))
}

/// The host entries a new volume of `pool` starts with: the pool's hosts when the pool
/// authenticates hosts, else none.
pub fn inherited(st: &mut St<'_>, pool: Uuid) -> Vec<HostEntry> {
    let hosts = match st.t.pools.get(&pool.to_string()) {
        Some(p) if p.dhchap => p.allowed_hosts.clone(),
        _ => return Vec::new(),
    };
    hosts.into_iter().map(|nqn| entry(st, nqn)).collect()
}

fn entry(st: &mut St<'_>, nqn: String) -> HostEntry {
    HostEntry {
        nqn,
        dhchap_key: dhchap_key(st),
        dhchap_ctrlr_key: dhchap_key(st),
    }
}

fn volumes_of(st: &St<'_>, pool: Uuid) -> Vec<String> {
    st.t.volumes
        .values()
        .filter(|v| v.pool_id == pool && v.status != VolumeStatus::Deleted)
        .map(|v| v.id.to_string())
        .collect()
}

/// Adds `nqn` to every volume of `pool` that lacks it.
pub fn add_to_volumes(st: &mut St<'_>, pool: Uuid, nqn: &str) {
    for id in volumes_of(st, pool) {
        let has =
            st.t.volumes
                .get(&id)
                .is_some_and(|v| v.allowed_hosts.iter().any(|h| h.nqn == nqn));
        if !has {
            let e = entry(st, nqn.to_owned());
            if let Some(v) = st.t.volumes.get_mut(&id) {
                v.allowed_hosts.push(e);
            }
        }
    }
}

/// Removes `nqn` from every volume of `pool`.
pub fn remove_from_volumes(st: &mut St<'_>, pool: Uuid, nqn: &str) {
    for id in volumes_of(st, pool) {
        if let Some(v) = st.t.volumes.get_mut(&id) {
            v.allowed_hosts.retain(|h| h.nqn != nqn);
        }
    }
}

//! Writing the CSI driver's view of the clusters: the Secret whose format
//! [`simplyblock_api::csi_secret`] defines. Every cluster controller writes the entries of
//! all the clusters its control plane lists into the one shared object ([`with_listed`]), so writes are read-modify-write under the object's
//! resourceVersion, retried on conflict.
//!
//! A secret whose data does not parse is left as it is: writing over it would erase every
//! other cluster's entry, and those clusters' volumes would stop being served.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use serde_json::Value;
use simplyblock_api::csi_secret::{DecodeError, decode, secret_data};
use simplyblock_api::keys;

pub use simplyblock_api::csi_secret::{Contents, Entry, KEY, NAME, WRITER_KEY};

/// `contents` with `entry` in place of any entry for the same cluster, keeping the keys the
/// old entry carried beyond `entry`'s; `None` when that changes nothing.
pub fn with_entry(contents: &Contents, entry: &Entry) -> Option<Contents> {
    if contents.clusters.iter().any(|e| e.same_connection(entry)) {
        return None;
    }
    let mut next = contents.clone();
    put_entry(&mut next.clusters, entry.clone());
    next.clusters
        .sort_by(|a, b| a.cluster_id.cmp(&b.cluster_id));
    Some(next)
}

/// Puts `entry` in place of any of `clusters` for the same cluster, keeping the keys the
/// old entry carried beyond `entry`'s.
fn put_entry(clusters: &mut Vec<Entry>, mut entry: Entry) {
    if let Some(old) = clusters.iter().find(|e| e.cluster_id == entry.cluster_id) {
        for (key, value) in &old.extra {
            entry
                .extra
                .entry(key.clone())
                .or_insert_with(|| value.clone());
        }
    }
    clusters.retain(|e| e.cluster_id != entry.cluster_id);
    clusters.push(entry);
}

/// `contents` holding one entry per cluster in `listed`, each written by `writer` (the
/// control plane's endpoint, see [`WRITER_KEY`]), with `local` marked the site's own;
/// `None` when that changes nothing.
///
/// An entry another writer wrote is left as it is, even for a cluster `listed` names: that
/// writer answers for it. An entry without a writer is taken over when its cluster is
/// listed (earlier versions of this operator wrote them so) and otherwise left alone. An
/// entry `writer` wrote whose cluster is no longer listed is dropped with its mark.
pub fn with_listed(
    contents: &Contents,
    writer: &str,
    listed: &[Entry],
    local: &str,
) -> Option<Contents> {
    let foreign = |e: &Entry| e.writer().is_some_and(|w| w != writer);
    let mut next = contents.clone();
    next.clusters.retain(|e| {
        foreign(e) || e.writer().is_none() || listed.iter().any(|l| l.cluster_id == e.cluster_id)
    });
    next.local
        .retain(|id| next.clusters.iter().any(|e| &e.cluster_id == id));
    for entry in listed {
        if next
            .clusters
            .iter()
            .any(|e| e.cluster_id == entry.cluster_id && foreign(e))
        {
            continue;
        }
        let mut entry = entry.clone();
        entry
            .extra
            .insert(WRITER_KEY.into(), Value::String(writer.into()));
        put_entry(&mut next.clusters, entry);
    }
    if next
        .clusters
        .iter()
        .any(|e| e.cluster_id == local && !foreign(e))
    {
        next.local.insert(local.to_string());
    }
    next.clusters
        .sort_by(|a, b| a.cluster_id.cmp(&b.cluster_id));
    (next != *contents).then_some(next)
}

/// `contents` without the entry for `cluster_id`; `None` when there is none.
pub fn without_entry(contents: &Contents, cluster_id: &str) -> Option<Contents> {
    if !contents.clusters.iter().any(|e| e.cluster_id == cluster_id) {
        return None;
    }
    let mut next = contents.clone();
    next.clusters.retain(|e| e.cluster_id != cluster_id);
    next.local.remove(cluster_id);
    Some(next)
}

/// Why the CSI secret was not written.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error("writing the CSI secret failed: {0}")]
    Kube(#[from] kube::Error),
    /// The stored secret does not parse; it was left untouched.
    #[error(
        "{source}. The operator leaves Secret {namespace}/{NAME} untouched rather than overwrite the other clusters' entries; repair key {KEY} to that shape, or delete the key (every StorageCluster writes its entry back)"
    )]
    Unreadable {
        namespace: String,
        #[source]
        source: DecodeError,
    },
}

/// The stored contents; a secret without the key holds no clusters yet.
fn read(secret: &Secret) -> Result<Contents, DecodeError> {
    match secret.data.as_ref().and_then(|d| d.get(KEY)) {
        Some(json) => decode(&json.0),
        None => Ok(Contents::default()),
    }
}

/// Applies `change` to the Secret in `namespace`, creating it when absent. Data keys other
/// than [`KEY`] are kept.
pub async fn update(
    client: &kube::Client,
    namespace: &str,
    change: impl Fn(&Contents) -> Option<Contents>,
) -> Result<(), UpdateError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for _ in 0..8 {
        match api.get_opt(NAME).await? {
            None => {
                let Some(next) = change(&Contents::default()) else {
                    return Ok(());
                };
                let secret = Secret {
                    metadata: kube::api::ObjectMeta {
                        name: Some(NAME.into()),
                        labels: Some(BTreeMap::from([(
                            keys::MANAGED_BY_LABEL.into(),
                            keys::MANAGED_BY_STORAGE_CLUSTER.into(),
                        )])),
                        ..Default::default()
                    },
                    data: Some(secret_data(&next)),
                    ..Secret::default()
                };
                match api.create(&PostParams::default(), &secret).await {
                    Err(kube::Error::Api(s)) if s.code == 409 => continue,
                    other => return Ok(other.map(|_| ())?),
                }
            }
            Some(mut secret) => {
                let stored = read(&secret).map_err(|source| UpdateError::Unreadable {
                    namespace: namespace.to_string(),
                    source,
                })?;
                let Some(next) = change(&stored) else {
                    return Ok(());
                };
                secret
                    .data
                    .get_or_insert_with(BTreeMap::new)
                    .extend(secret_data(&next));
                // replace carries the resourceVersion read above: a concurrent writer
                // makes this a 409, and the loop reads again.
                match api.replace(NAME, &PostParams::default(), &secret).await {
                    Err(kube::Error::Api(s)) if s.code == 409 => continue,
                    other => return Ok(other.map(|_| ())?),
                }
            }
        }
    }
    Err(UpdateError::Kube(kube::Error::Api(Box::new(
        kube::core::Status::failure(
            "the CSI secret kept changing under this write; it will be retried",
            "Conflict",
        ),
    ))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn entry(id: &str, secret: &str) -> Entry {
        Entry {
            cluster_id: id.into(),
            cluster_endpoint: "http://cp:5000".into(),
            cluster_secret: secret.into(),
            extra: Default::default(),
        }
    }

    #[test]
    fn entries_are_replaced_not_duplicated() {
        let one = with_entry(&Contents::default(), &entry("a", "s1")).expect("added");
        assert_eq!(
            with_entry(&one, &entry("a", "s1")),
            None,
            "an unchanged entry writes nothing"
        );
        let two = with_entry(&one, &entry("b", "s2")).expect("added");
        let rotated = with_entry(&two, &entry("a", "s3")).expect("changed");
        assert_eq!(rotated.clusters.len(), 2);
        assert_eq!(rotated.clusters[0].cluster_secret, "s3");
        let removed = without_entry(&rotated, "a").expect("removed");
        assert_eq!(removed.clusters, vec![entry("b", "s2")]);
        assert_eq!(without_entry(&removed, "a"), None);
    }

    #[test]
    fn the_wire_form_is_the_reference_shape() {
        let c = with_entry(&Contents::default(), &entry("a", "s")).expect("added");
        assert_eq!(
            String::from_utf8(simplyblock_api::csi_secret::encode(&c)).expect("utf-8"),
            r#"{"clusters":[{"cluster_id":"a","cluster_endpoint":"http://cp:5000","cluster_secret":"s"}]}"#
        );
        assert!(!format!("{c:?}").contains("\"s\""));
    }

    #[test]
    fn rewriting_an_entry_keeps_the_keys_it_carried() {
        let mut carrying = entry("a", "s1");
        carrying.extra.insert("replica_of".into(), "b".into());
        let stored = Contents {
            clusters: vec![carrying],
            ..Contents::default()
        };
        assert_eq!(
            with_entry(&stored, &entry("a", "s1")),
            None,
            "the same connection writes nothing"
        );
        let rotated = with_entry(&stored, &entry("a", "s2")).expect("changed");
        assert_eq!(rotated.clusters[0].cluster_secret, "s2");
        assert_eq!(rotated.clusters[0].extra["replica_of"], "b");
    }

    #[test]
    fn a_local_mark_survives_rewriting_its_entry_and_goes_with_it() {
        let mut marked = with_entry(&Contents::default(), &entry("a", "s1")).expect("added");
        marked.local.insert("a".into());
        let rotated = with_entry(&marked, &entry("a", "s2")).expect("changed");
        assert!(rotated.local.contains("a"));
        let removed = without_entry(&rotated, "a").expect("removed");
        assert!(removed.local.is_empty());
    }

    fn written(id: &str, secret: &str, writer: &str) -> Entry {
        let mut e = entry(id, secret);
        e.extra.insert(WRITER_KEY.into(), writer.into());
        e
    }

    #[test]
    fn every_listed_cluster_is_written_and_the_callers_own_is_marked_local() {
        let next = with_listed(
            &Contents::default(),
            "http://cp",
            &[entry("b", "s2"), entry("a", "s1")],
            "a",
        )
        .expect("written");
        assert_eq!(
            next.clusters,
            vec![
                written("a", "s1", "http://cp"),
                written("b", "s2", "http://cp")
            ]
        );
        assert_eq!(next.local, BTreeSet::from(["a".to_string()]));
        assert_eq!(
            with_listed(
                &next,
                "http://cp",
                &[entry("a", "s1"), entry("b", "s2")],
                "a"
            ),
            None,
            "an unchanged list writes nothing"
        );
        let second = with_listed(
            &next,
            "http://cp",
            &[entry("a", "s1"), entry("b", "s2")],
            "b",
        )
        .expect("b marked too");
        assert_eq!(
            second.local,
            BTreeSet::from(["a".to_string(), "b".to_string()]),
            "the other cluster's controller keeps the first mark"
        );
    }

    #[test]
    fn another_writers_entries_are_kept_and_own_stale_ones_dropped() {
        let mut peer = written("p", "sp", "https://other-site");
        peer.extra.insert("replica_of".into(), "a".into());
        let stored = Contents {
            clusters: vec![
                written("a", "s1", "http://cp"),
                written("gone", "sg", "http://cp"),
                entry("hand", "sh"),
                peer.clone(),
                // Another writer's entry for a cluster this control plane lists too.
                written("shared", "theirs", "https://other-site"),
            ],
            local: BTreeSet::from(["gone".to_string(), "p".to_string()]),
            ..Contents::default()
        };
        let next = with_listed(
            &stored,
            "http://cp",
            &[entry("a", "s1"), entry("shared", "ours")],
            "a",
        )
        .expect("changed");
        let ids: Vec<_> = next
            .clusters
            .iter()
            .map(|e| e.cluster_id.as_str())
            .collect();
        assert_eq!(ids, vec!["a", "hand", "p", "shared"]);
        assert_eq!(next.clusters[2], peer);
        assert_eq!(next.clusters[3].cluster_secret, "theirs");
        assert_eq!(
            next.local,
            BTreeSet::from(["a".to_string(), "p".to_string()]),
            "the stale entry's mark goes with it, the peer's stays"
        );
    }

    #[test]
    fn an_entry_without_a_writer_is_taken_over_when_listed() {
        let mut legacy = entry("a", "old");
        legacy.extra.insert("replica_of".into(), "b".into());
        let stored = Contents {
            clusters: vec![legacy],
            ..Contents::default()
        };
        let next = with_listed(&stored, "http://cp", &[entry("a", "new")], "a").expect("changed");
        assert_eq!(next.clusters[0].cluster_secret, "new");
        assert_eq!(next.clusters[0].writer(), Some("http://cp"));
        assert_eq!(next.clusters[0].extra["replica_of"], "b");
    }
}

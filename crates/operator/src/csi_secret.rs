//! The CSI driver's view of the clusters: Secret `simplyblock-csi-secret-v2`, key
//! `secret.json`, `{"clusters":[{"cluster_id","cluster_endpoint","cluster_secret"}]}`.
//! Every cluster controller writes its own entry into the one shared object, so writes
//! are read-modify-write under the object's resourceVersion, retried on conflict.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use serde::{Deserialize, Serialize};

pub const NAME: &str = "simplyblock-csi-secret-v2";
pub const KEY: &str = "secret.json";

#[derive(Serialize, Deserialize, Default, Debug, PartialEq, Eq)]
pub struct Contents {
    #[serde(default)]
    pub clusters: Vec<Entry>,
}

#[derive(Serialize, Deserialize, Clone, PartialEq, Eq)]
pub struct Entry {
    pub cluster_id: String,
    pub cluster_endpoint: String,
    pub cluster_secret: String,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("cluster_id", &self.cluster_id)
            .field("cluster_endpoint", &self.cluster_endpoint)
            .field("cluster_secret", &"<redacted>")
            .finish()
    }
}

/// `contents` with `entry` in place of any entry for the same cluster; `None` when that
/// changes nothing.
pub fn with_entry(contents: &Contents, entry: &Entry) -> Option<Contents> {
    if contents.clusters.iter().any(|e| e == entry) {
        return None;
    }
    let mut clusters: Vec<Entry> = contents
        .clusters
        .iter()
        .filter(|e| e.cluster_id != entry.cluster_id)
        .cloned()
        .collect();
    clusters.push(entry.clone());
    clusters.sort_by(|a, b| a.cluster_id.cmp(&b.cluster_id));
    Some(Contents { clusters })
}

/// `contents` without the entry for `cluster_id`; `None` when there is none.
pub fn without_entry(contents: &Contents, cluster_id: &str) -> Option<Contents> {
    if !contents.clusters.iter().any(|e| e.cluster_id == cluster_id) {
        return None;
    }
    Some(Contents {
        clusters: contents
            .clusters
            .iter()
            .filter(|e| e.cluster_id != cluster_id)
            .cloned()
            .collect(),
    })
}

fn read(secret: &Secret) -> Contents {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(KEY))
        .and_then(|b| serde_json::from_slice(&b.0).ok())
        .unwrap_or_default()
}

fn data(contents: &Contents) -> BTreeMap<String, ByteString> {
    let json = serde_json::to_vec(contents).unwrap_or_default();
    BTreeMap::from([(KEY.to_string(), ByteString(json))])
}

/// Applies `change` to the Secret in `namespace`, creating it when absent.
pub async fn update(
    client: &kube::Client,
    namespace: &str,
    change: impl Fn(&Contents) -> Option<Contents>,
) -> Result<(), kube::Error> {
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
                            "storage.simplyblock.io/managed-by".into(),
                            "storagecluster".into(),
                        )])),
                        ..Default::default()
                    },
                    data: Some(data(&next)),
                    ..Secret::default()
                };
                match api.create(&PostParams::default(), &secret).await {
                    Err(kube::Error::Api(s)) if s.code == 409 => continue,
                    other => return other.map(|_| ()),
                }
            }
            Some(mut secret) => {
                let Some(next) = change(&read(&secret)) else {
                    return Ok(());
                };
                secret.data = Some(data(&next));
                // replace carries the resourceVersion read above: a concurrent writer
                // makes this a 409, and the loop reads again.
                match api.replace(NAME, &PostParams::default(), &secret).await {
                    Err(kube::Error::Api(s)) if s.code == 409 => continue,
                    other => return other.map(|_| ()),
                }
            }
        }
    }
    Err(kube::Error::Api(Box::new(kube::core::Status::failure(
        "the CSI secret kept changing under this write; it will be retried",
        "Conflict",
    ))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, secret: &str) -> Entry {
        Entry {
            cluster_id: id.into(),
            cluster_endpoint: "http://cp:5000".into(),
            cluster_secret: secret.into(),
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
    fn the_wire_form_is_what_the_driver_reads() {
        let c = with_entry(&Contents::default(), &entry("a", "s")).expect("added");
        assert_eq!(
            serde_json::to_string(&c).expect("json"),
            r#"{"clusters":[{"cluster_id":"a","cluster_endpoint":"http://cp:5000","cluster_secret":"s"}]}"#
        );
        assert!(!format!("{c:?}").contains("\"s\""));
    }
}

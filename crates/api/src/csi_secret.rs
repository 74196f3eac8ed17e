//! The CSI secret: how the operator tells the CSI driver which clusters there are and
//! how to reach them.
//!
//! One Secret, [`NAME`], in the operator's namespace; its key [`KEY`] holds
//! `{"clusters":[{"cluster_id","cluster_endpoint","cluster_secret","local"}]}`. Every
//! StorageCluster controller writes its own cluster's entry into it; the driver mounts it
//! and serves every cluster it names. `local` marks the site's own clusters (replication
//! picks its local member by it); it is written only when true, so an entry of a cluster
//! that is not marked is the reference's three keys exactly.
//!
//! An entry records who wrote it under [`WRITER_KEY`]: an operator writes every cluster its
//! control plane lists and names its entries by that control plane's endpoint, so it can
//! drop the ones whose cluster the control plane no longer lists while leaving alone the
//! entries another operator (another site's control plane) wrote into the same Secret. An
//! entry without the key was written by a person or by an operator predating it.
//!
//! Keys this version does not know, on an entry or beside `clusters`, are read into
//! `extra` and written back as they were: another writer (a newer operator, a person) may
//! have put them there, and a rewrite of one cluster's entry must not lose them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::ByteString;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The Secret's name.
pub const NAME: &str = "simplyblock-csi-secret-v2";
/// The key of the Secret's data that holds the clusters.
pub const KEY: &str = "secret.json";

/// The entry key naming the writer of the entry: the endpoint of the control plane that
/// listed the cluster. Kept in [`Entry::extra`], so readers that do not know it ignore it.
pub const WRITER_KEY: &str = "written_by";

/// What the secret says: the clusters, and which of them are the site's own.
#[derive(Serialize, Deserialize, Clone, Default, Debug, PartialEq, Eq)]
#[serde(from = "wire::Contents", into = "wire::Contents")]
pub struct Contents {
    pub clusters: Vec<Entry>,
    /// The `cluster_id`s of the clusters that are the site's own, written as
    /// `"local": true` on their entries.
    pub local: BTreeSet<String>,
    /// Top-level keys other than `clusters`, kept as read.
    pub extra: Map<String, Value>,
}

/// One cluster: its id in the control plane, the control plane's URL, and the bearer
/// secret the driver calls it with.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Entry {
    pub cluster_id: String,
    pub cluster_endpoint: String,
    pub cluster_secret: String,
    /// Keys of the entry other than the three above and `local`, kept as read.
    pub extra: Map<String, Value>,
}

impl Entry {
    /// Whether `other` names the same cluster at the same endpoint with the same secret,
    /// whatever else either carries.
    pub fn same_connection(&self, other: &Entry) -> bool {
        self.cluster_id == other.cluster_id
            && self.cluster_endpoint == other.cluster_endpoint
            && self.cluster_secret == other.cluster_secret
    }

    /// Who wrote the entry ([`WRITER_KEY`]); `None` when it does not say.
    pub fn writer(&self) -> Option<&str> {
        self.extra.get(WRITER_KEY).and_then(Value::as_str)
    }
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("cluster_id", &self.cluster_id)
            .field("cluster_endpoint", &self.cluster_endpoint)
            .field("cluster_secret", &"<redacted>")
            // Values unknown to this version may be secrets too: their names only.
            .field("extra", &self.extra.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Why the secret's data is not a cluster list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the CSI secret ({NAME}, key {KEY}) is not {{\"clusters\":[{{\"cluster_id\",\"cluster_endpoint\",\"cluster_secret\"}}]}}: {}",
            self.0
        )
    }
}

impl std::error::Error for DecodeError {}

/// The secret's JSON for `contents`.
pub fn encode(contents: &Contents) -> Vec<u8> {
    // Only strings and booleans: serializing cannot fail.
    serde_json::to_vec(contents).unwrap_or_default()
}

/// The contents of the secret's JSON.
pub fn decode(json: &[u8]) -> Result<Contents, DecodeError> {
    serde_json::from_slice(json).map_err(|e| DecodeError(e.to_string()))
}

/// The Secret's data for `contents`: [`KEY`] and its JSON.
pub fn secret_data(contents: &Contents) -> BTreeMap<String, ByteString> {
    BTreeMap::from([(KEY.to_string(), ByteString(encode(contents)))])
}

/// The wire form: `local` on each entry, as the driver reads it.
mod wire {
    use serde::{Deserialize, Serialize};
    use serde_json::{Map, Value};

    #[derive(Serialize, Deserialize)]
    pub struct Contents {
        #[serde(default)]
        clusters: Vec<Entry>,
        #[serde(flatten)]
        extra: Map<String, Value>,
    }

    #[derive(Serialize, Deserialize)]
    struct Entry {
        cluster_id: String,
        cluster_endpoint: String,
        #[serde(default)]
        cluster_secret: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        local: bool,
        #[serde(flatten)]
        extra: Map<String, Value>,
    }

    impl From<Contents> for super::Contents {
        fn from(wire: Contents) -> Self {
            let local = wire
                .clusters
                .iter()
                .filter(|e| e.local)
                .map(|e| e.cluster_id.clone())
                .collect();
            let clusters = wire
                .clusters
                .into_iter()
                .map(|e| super::Entry {
                    cluster_id: e.cluster_id,
                    cluster_endpoint: e.cluster_endpoint,
                    cluster_secret: e.cluster_secret,
                    extra: e.extra,
                })
                .collect();
            super::Contents {
                clusters,
                local,
                extra: wire.extra,
            }
        }
    }

    impl From<super::Contents> for Contents {
        fn from(contents: super::Contents) -> Self {
            let clusters = contents
                .clusters
                .into_iter()
                .map(|e| Entry {
                    local: contents.local.contains(&e.cluster_id),
                    cluster_id: e.cluster_id,
                    cluster_endpoint: e.cluster_endpoint,
                    cluster_secret: e.cluster_secret,
                    extra: e.extra,
                })
                .collect();
            Contents {
                clusters,
                extra: contents.extra,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, secret: &str) -> Entry {
        Entry {
            cluster_id: id.into(),
            cluster_endpoint: "http://cp:5000".into(),
            cluster_secret: secret.into(),
            extra: Map::new(),
        }
    }

    #[test]
    fn an_unmarked_cluster_is_written_with_the_three_reference_keys() {
        let contents = Contents {
            clusters: vec![entry("a", "s")],
            ..Contents::default()
        };
        assert_eq!(
            String::from_utf8(encode(&contents)).expect("utf-8"),
            r#"{"clusters":[{"cluster_id":"a","cluster_endpoint":"http://cp:5000","cluster_secret":"s"}]}"#
        );
    }

    #[test]
    fn the_local_mark_is_written_on_its_entry_and_read_back() {
        let contents = Contents {
            clusters: vec![entry("a", "s1"), entry("b", "s2")],
            local: BTreeSet::from(["b".to_string()]),
            ..Contents::default()
        };
        let json = encode(&contents);
        assert_eq!(
            String::from_utf8(json.clone()).expect("utf-8"),
            r#"{"clusters":[{"cluster_id":"a","cluster_endpoint":"http://cp:5000","cluster_secret":"s1"},{"cluster_id":"b","cluster_endpoint":"http://cp:5000","cluster_secret":"s2","local":true}]}"#
        );
        assert_eq!(decode(&json), Ok(contents));
    }

    #[test]
    fn secret_data_holds_the_json_under_the_key() {
        let contents = Contents {
            clusters: vec![entry("a", "s")],
            ..Contents::default()
        };
        let data = secret_data(&contents);
        assert_eq!(data.keys().collect::<Vec<_>>(), vec!["secret.json"]);
        assert_eq!(decode(&data[KEY].0), Ok(contents));
    }

    #[test]
    fn decoding_takes_what_older_writers_wrote_and_says_what_it_wanted() {
        let no_secret =
            br#"{"clusters":[{"cluster_id":"a","cluster_endpoint":"http://cp"}],"extra":1}"#;
        let contents = decode(no_secret).expect("decodes");
        assert_eq!(contents.clusters[0].cluster_secret, "");
        assert!(contents.local.is_empty());
        assert_eq!(decode(b"{}"), Ok(Contents::default()));
        let err = decode(br#"{"clusters":[{"cluster_id":"a"}]}"#).expect_err("no endpoint");
        let text = err.to_string();
        assert!(
            text.starts_with("the CSI secret (simplyblock-csi-secret-v2, key secret.json) is not {\"clusters\":[{\"cluster_id\",\"cluster_endpoint\",\"cluster_secret\"}]}: "),
            "{text}"
        );
        assert!(text.contains("cluster_endpoint"), "{text}");
    }

    #[test]
    fn keys_this_version_does_not_know_are_written_back_as_they_were() {
        let json = br#"{"clusters":[{"cluster_id":"a","cluster_endpoint":"http://cp","cluster_secret":"s","local":true,"replica_of":{"id":"b"}}],"generation":7}"#;
        let contents = decode(json).expect("decodes");
        assert!(contents.local.contains("a"));
        assert_eq!(contents.clusters[0].extra["replica_of"]["id"], "b");
        assert_eq!(contents.extra["generation"], 7);
        assert_eq!(
            serde_json::from_slice::<Value>(&encode(&contents)).expect("json"),
            serde_json::from_slice::<Value>(json).expect("json"),
        );
    }

    #[test]
    fn debug_never_prints_a_secret() {
        let contents = Contents {
            clusters: vec![entry("a", "very-secret")],
            ..Contents::default()
        };
        assert!(!format!("{contents:?}").contains("very-secret"));
    }
}

//! The object stores backups go to, as a user sets up MinIO: a store reached at an
//! endpoint, with buckets, each in a region and open to some access keys (the admin
//! routes `/_sim/object-stores`). Objects are files under `<state dir>/object-stores/`.
//! Every request is checked as S3 checks it and fails with S3's words, so a cluster
//! configured with a wrong key, secret, bucket or region sees what it would see.
//!
//! A backup is two objects under `<bucket>/<prefix>/<s3_id>/`: `data.img`, the
//! snapshot's image (sparse, so a large, mostly empty volume costs its written blocks),
//! and `manifest.json`, enough to rebuild the chain from the bucket alone.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::model::{BackupRec, ClusterRec, HostEntry, ObjectStoreRec};
use crate::store::Tables;

/// S3's region when a client names none.
pub const DEFAULT_REGION: &str = "us-east-1";
/// Where boto3 goes without an endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://s3.amazonaws.com";

/// Where and as whom a cluster's backups are written: its `backup_config`.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub endpoint: String,
    pub bucket: String,
    pub prefix: String,
    pub region: String,
    pub access_key: String,
    pub secret: String,
}

impl Target {
    /// The cluster's store; `None` when it was created without `backup_config`.
    pub fn of(c: &ClusterRec) -> Option<Target> {
        let b = c.params.backup_config.as_ref()?;
        let nonempty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
        Some(Target {
            endpoint: nonempty(&b.local_endpoint).unwrap_or_else(|| DEFAULT_ENDPOINT.into()),
            // The control plane's default bucket name.
            bucket: nonempty(&b.bucket_name)
                .unwrap_or_else(|| format!("simplyblock-backup-{}", c.id)),
            prefix: b
                .prefix
                .clone()
                .unwrap_or_default()
                .trim_matches('/')
                .to_string(),
            region: nonempty(&b.region).unwrap_or_else(|| DEFAULT_REGION.into()),
            access_key: b.access_key_id.clone().unwrap_or_default(),
            secret: b
                .secret_access_key
                .as_ref()
                .map(|s| s.expose().to_string())
                .unwrap_or_default(),
        })
    }

    fn url(&self) -> String {
        format!("{}/{}", self.endpoint.trim_end_matches('/'), self.bucket)
    }
}

/// The cluster's store, or why it has none.
pub fn target_of(t: &Tables, cluster: Uuid) -> Result<Target, String> {
    let c = t
        .clusters
        .get(&cluster.to_string())
        .ok_or_else(|| format!("Cluster {cluster} not found"))?;
    Target::of(c).ok_or_else(|| no_config(cluster))
}

pub fn no_config(cluster: Uuid) -> String {
    format!("Cluster {cluster} has no backup configuration: it was created without backup_config")
}

/// A request to `target` as the store answers it: in S3's order, the connection, the
/// key, the bucket, the region the request was signed for, the signature (the secret),
/// the key's grant on the bucket.
pub fn check(t: &Tables, target: &Target) -> Result<(), String> {
    let unreachable = || {
        format!(
            "Could not connect to the endpoint URL: \"{}\"",
            target.url()
        )
    };
    let store = t
        .object_stores
        .get(&target.endpoint)
        .ok_or_else(unreachable)?;
    if store.unreachable {
        return Err(unreachable());
    }
    let Some(secret) = store.users.get(&target.access_key) else {
        return Err(
            "InvalidAccessKeyId: The AWS Access Key Id you provided does not exist in our records."
                .into(),
        );
    };
    let bucket = store
        .buckets
        .get(&target.bucket)
        .ok_or("NoSuchBucket: The specified bucket does not exist")?;
    if bucket.region != target.region {
        return Err(format!(
            "AuthorizationHeaderMalformed: The authorization header is malformed; the region '{}' is wrong; expecting '{}'",
            target.region, bucket.region
        ));
    }
    if *secret != target.secret {
        return Err("SignatureDoesNotMatch: The request signature we calculated does not match the signature you provided. Check your key and signing method.".into());
    }
    if !bucket.keys.contains(&target.access_key) {
        return Err("AccessDenied: Access Denied".into());
    }
    Ok(())
}

/// A file-system name for an endpoint (`https://minio:9000` → `https___minio_9000`).
fn slug(endpoint: &str) -> String {
    endpoint
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Where the objects of every store live: `--object-store-dir`, else under the state
/// directory. Two sbsims given the same folder share their stores' objects, as two
/// control planes share a bucket.
pub fn root(config: &crate::SimConfig) -> PathBuf {
    config
        .object_store_dir
        .clone()
        .unwrap_or_else(|| config.state_dir.join("object-stores"))
}

pub fn bucket_dir(root: &Path, endpoint: &str, bucket: &str) -> PathBuf {
    root.join(slug(endpoint)).join(bucket)
}

fn prefix_dir(root: &Path, target: &Target) -> PathBuf {
    let mut dir = bucket_dir(root, &target.endpoint, &target.bucket);
    for part in target.prefix.split('/').filter(|p| !p.is_empty()) {
        dir.push(part);
    }
    dir
}

/// The folder of backup `s3_id`'s objects.
pub fn backup_dir(root: &Path, target: &Target, s3_id: i64) -> PathBuf {
    prefix_dir(root, target).join(s3_id.to_string())
}

/// What the bucket says of a backup: enough for another cluster to rebuild the chain.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub schema_version: u32,
    pub backup_id: Uuid,
    pub s3_id: i64,
    pub cluster_id: Uuid,
    pub prev_backup_id: String,
    pub lvol_id: String,
    pub lvol_name: String,
    pub snapshot_id: String,
    pub snapshot_name: String,
    pub node_id: String,
    pub size: u64,
    pub allowed_hosts: Vec<HostEntry>,
    pub created_at: i64,
    pub completed_at: i64,
}

impl Manifest {
    pub fn of(b: &BackupRec, completed_ms: i64) -> Manifest {
        Manifest {
            schema_version: 1,
            backup_id: b.id,
            s3_id: b.s3_id,
            cluster_id: b.cluster_id,
            prev_backup_id: b.prev.map(|p| p.to_string()).unwrap_or_default(),
            lvol_id: b.volume_id.to_string(),
            lvol_name: b.volume_name.clone(),
            snapshot_id: b.snapshot_id.to_string(),
            snapshot_name: b.snapshot_name.clone(),
            node_id: b.node_id.to_string(),
            size: b.size,
            allowed_hosts: b.allowed_hosts.clone(),
            created_at: b.created_ms / 1000,
            completed_at: completed_ms / 1000,
        }
    }
}

fn io(e: std::io::Error) -> String {
    format!("InternalError: We encountered an internal error. Please try again. ({e})")
}

/// Uploads backup `b`: its data (`data`, the snapshot's image, or an empty image of its
/// size when sbsim keeps no volume data) and its manifest.
pub fn put(
    root: &Path,
    t: &Tables,
    target: &Target,
    b: &BackupRec,
    data: Option<&Path>,
    completed_ms: i64,
) -> Result<(), String> {
    check(t, target)?;
    let dir = backup_dir(root, target, b.s3_id);
    std::fs::create_dir_all(&dir).map_err(io)?;
    let image = dir.join("data.img");
    match data.filter(|d| d.exists()) {
        Some(from) => crate::volfiles::copy_file(from, &image, b.size).map_err(io)?,
        None => std::fs::File::create(&image)
            .and_then(|f| f.set_len(b.size))
            .map_err(io)?,
    }
    write_manifest(&dir, &Manifest::of(b, completed_ms))
}

fn write_manifest(dir: &Path, m: &Manifest) -> Result<(), String> {
    let text = serde_json::to_vec_pretty(m).map_err(|e| io(std::io::Error::other(e)))?;
    std::fs::write(dir.join("manifest.json"), text).map_err(io)
}

/// The manifest of backup `s3_id`, read as a GET of the object.
pub fn manifest(root: &Path, t: &Tables, target: &Target, s3_id: i64) -> Result<Manifest, String> {
    check(t, target)?;
    let path = backup_dir(root, target, s3_id).join("manifest.json");
    let text = std::fs::read(&path).map_err(|_| no_such_key())?;
    serde_json::from_slice(&text).map_err(|e| format!("the manifest of backup {s3_id}: {e}"))
}

fn no_such_key() -> String {
    "NoSuchKey: The specified key does not exist.".into()
}

/// The data object of backup `s3_id`, once it is there in full (data and manifest).
pub fn data(root: &Path, t: &Tables, target: &Target, s3_id: i64) -> Result<PathBuf, String> {
    manifest(root, t, target, s3_id)?;
    let image = backup_dir(root, target, s3_id).join("data.img");
    image.exists().then_some(image).ok_or_else(no_such_key)
}

/// Rewrites backup `s3_id`'s manifest to follow `prev` (its predecessor was merged).
pub fn relink(root: &Path, t: &Tables, target: &Target, s3_id: i64, prev: Option<Uuid>) {
    if let Ok(mut m) = manifest(root, t, target, s3_id) {
        m.prev_backup_id = prev.map(|p| p.to_string()).unwrap_or_default();
        if let Err(e) = write_manifest(&backup_dir(root, target, s3_id), &m) {
            tracing::warn!(s3_id, error = %e, "rewriting a backup manifest failed");
        }
    }
}

/// Deletes backup `s3_id`'s objects; a store that cannot be reached keeps them, as S3
/// would.
pub fn delete(root: &Path, t: &Tables, target: &Target, s3_id: i64) {
    if check(t, target).is_err() {
        return;
    }
    let dir = backup_dir(root, target, s3_id);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(s3_id, error = %e, "deleting a backup's objects failed"),
    }
}

/// The highest backup number under the target's prefix, so clusters sharing a bucket
/// and prefix never write over each other's backups.
pub fn highest_s3_id(root: &Path, target: &Target) -> i64 {
    std::fs::read_dir(prefix_dir(root, target))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i64>().ok())
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// Adds a bucket to the store at `endpoint` (the store too when it is new), or adds
/// `access_key` to it; an existing bucket keeps its region and objects.
pub fn add_bucket(
    t: &mut Tables,
    endpoint: &str,
    bucket: &str,
    region: Option<&str>,
    access_key: &str,
    secret: &str,
) -> Result<ObjectStoreRec, String> {
    if endpoint.is_empty() || bucket.is_empty() || access_key.is_empty() {
        return Err("endpoint, bucket and access_key_id must not be empty".into());
    }
    let mut store = t
        .object_stores
        .get(endpoint)
        .cloned()
        .unwrap_or_else(|| ObjectStoreRec {
            endpoint: endpoint.to_string(),
            buckets: Default::default(),
            unreachable: false,
            users: Default::default(),
        });
    store
        .users
        .insert(access_key.to_string(), secret.to_string());
    let b = store
        .buckets
        .entry(bucket.to_string())
        .or_insert_with(|| crate::model::BucketRec {
            region: region.unwrap_or(DEFAULT_REGION).to_string(),
            keys: Default::default(),
        });
    if let Some(r) = region
        && r != b.region
    {
        return Err(format!(
            "bucket {bucket} exists in region {}, not {r}",
            b.region
        ));
    }
    b.keys.insert(access_key.to_string());
    t.object_stores.insert(endpoint.to_string(), store.clone());
    Ok(store)
}

/// Removes a bucket and every object in it (`mc rb --force`).
pub fn remove_bucket(root: &Path, t: &mut Tables, endpoint: &str, bucket: &str) -> bool {
    let Some(mut store) = t.object_stores.get(endpoint).cloned() else {
        return false;
    };
    if store.buckets.remove(bucket).is_none() {
        return false;
    }
    t.object_stores.insert(endpoint.to_string(), store);
    let dir = bucket_dir(root, endpoint, bucket);
    if let Err(e) = std::fs::remove_dir_all(&dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(bucket, error = %e, "removing a bucket's objects failed");
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::BucketRec;

    fn target() -> Target {
        Target {
            endpoint: "http://minio:9000".into(),
            bucket: "b".into(),
            prefix: "p/q".into(),
            region: "eu-west-1".into(),
            access_key: "AK".into(),
            secret: "S".into(),
        }
    }

    fn tables() -> Tables {
        let mut t = Tables::default();
        let mut keys = std::collections::BTreeSet::new();
        keys.insert("AK".to_string());
        let mut users = std::collections::BTreeMap::new();
        users.insert("AK".to_string(), "S".to_string());
        let mut buckets = std::collections::BTreeMap::new();
        buckets.insert(
            "b".to_string(),
            BucketRec {
                region: "eu-west-1".into(),
                keys,
            },
        );
        t.object_stores.insert(
            "http://minio:9000",
            ObjectStoreRec {
                endpoint: "http://minio:9000".into(),
                buckets,
                unreachable: false,
                users,
            },
        );
        t
    }

    #[test]
    fn requests_are_checked_as_s3_checks_them() {
        let mut t = tables();
        assert_eq!(check(&t, &target()), Ok(()));
        let refused = |f: &dyn Fn(&mut Target)| {
            let mut x = target();
            f(&mut x);
            check(&t, &x).expect_err("refused")
        };
        assert!(refused(&|x| x.access_key = "nope".into()).starts_with("InvalidAccessKeyId:"));
        assert!(refused(&|x| x.secret = "nope".into()).starts_with("SignatureDoesNotMatch:"));
        assert_eq!(
            refused(&|x| x.bucket = "other".into()),
            "NoSuchBucket: The specified bucket does not exist"
        );
        assert!(
            refused(&|x| x.region = "us-east-1".into())
                .ends_with("the region 'us-east-1' is wrong; expecting 'eu-west-1'")
        );
        assert_eq!(
            refused(&|x| x.endpoint = "http://elsewhere".into()),
            "Could not connect to the endpoint URL: \"http://elsewhere/b\""
        );
        if let Some(s) = t.object_stores.get_mut("http://minio:9000") {
            s.unreachable = true;
        }
        assert_eq!(
            check(&t, &target()).expect_err("down"),
            "Could not connect to the endpoint URL: \"http://minio:9000/b\""
        );
    }

    #[test]
    fn objects_live_under_the_bucket_and_prefix() {
        let dir = tempfile::tempdir().expect("tmp");
        assert_eq!(
            backup_dir(dir.path(), &target(), 7),
            dir.path().join("http___minio_9000/b/p/q/7")
        );
        assert_eq!(highest_s3_id(dir.path(), &target()), 0);
        std::fs::create_dir_all(backup_dir(dir.path(), &target(), 12)).expect("mkdir");
        std::fs::create_dir_all(backup_dir(dir.path(), &target(), 3)).expect("mkdir");
        assert_eq!(highest_s3_id(dir.path(), &target()), 12);
    }
}

//! What the node remembers about each staged volume, one JSON file per volume under the
//! state directory. It is written before the first side effect of a stage and updated
//! after each, so a stage or unstage repeated after a crash knows what was done. It never
//! holds secrets.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{CsiError, Result};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageRecord {
    pub volume_id: String,
    pub cluster: Uuid,
    pub volume: Uuid,
    pub nqn: String,
    pub ns_id: u32,
    pub staging_path: PathBuf,
    /// `nvmeof` or `loop`.
    pub attacher: String,
    pub block: bool,
    /// The device once attached.
    pub device: Option<PathBuf>,
    /// The filesystem mounted at the staging path (`stagedFsType`); a restage mounts
    /// this, whatever the capability says.
    pub fs_type: Option<String>,
    pub mount_flags: Vec<String>,
    /// The paths the volume is published at (NodePublishVolume's targets): the kubelet
    /// names each after its pod, so these say which pods use the volume on this node.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub published: std::collections::BTreeSet<PathBuf>,
}

/// The record's file: named by a digest of the volume id, which may hold any character.
pub fn path_for(dir: &Path, volume_id: &str) -> PathBuf {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(volume_id.as_bytes());
    let hex: String = d[..16].iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("{hex}.json"))
}

pub fn load(dir: &Path, volume_id: &str) -> Result<Option<StageRecord>> {
    let p = path_for(dir, volume_id);
    match std::fs::read(&p) {
        Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
            CsiError::Internal(format!(
                "stage record {} is unreadable ({e}); remove it after checking the volume's mounts",
                p.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CsiError::io(format!("reading {}", p.display()), e)),
    }
}

/// Write atomically (temp file, fsync, rename).
pub fn save(dir: &Path, r: &StageRecord) -> Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir)
        .map_err(|e| CsiError::io(format!("creating {}", dir.display()), e))?;
    let p = path_for(dir, &r.volume_id);
    let tmp = p.with_extension("tmp");
    let body = serde_json::to_vec_pretty(r).map_err(|e| CsiError::Internal(e.to_string()))?;
    let mut f = std::fs::File::create(&tmp)
        .map_err(|e| CsiError::io(format!("writing {}", tmp.display()), e))?;
    f.write_all(&body)
        .and_then(|_| f.sync_all())
        .map_err(|e| CsiError::io(format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, &p).map_err(|e| CsiError::io(format!("renaming {}", p.display()), e))
}

/// Every record in `dir`. One that cannot be read is left out with a warning: it stops
/// only the calls on its own volume.
pub fn all(dir: &Path) -> Result<Vec<StageRecord>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CsiError::io(format!("reading {}", dir.display()), e)),
    };
    let mut out = Vec::new();
    for e in rd.filter_map(|e| e.ok()) {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        match std::fs::read(&p).map(|b| serde_json::from_slice::<StageRecord>(&b)) {
            Ok(Ok(r)) => out.push(r),
            Ok(Err(err)) => {
                tracing::warn!(record = %p.display(), error = %err, "stage record unreadable")
            }
            Err(err) => {
                tracing::warn!(record = %p.display(), error = %err, "stage record unreadable")
            }
        }
    }
    out.sort_by(|a, b| a.volume_id.cmp(&b.volume_id));
    Ok(out)
}

pub fn remove(dir: &Path, volume_id: &str) -> Result<()> {
    let p = path_for(dir, volume_id);
    match std::fs::remove_file(&p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CsiError::io(format!("removing {}", p.display()), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_vanish() {
        let dir = tempfile::tempdir().expect("tmp");
        let r = StageRecord {
            volume_id: "a:b/../c".into(),
            cluster: Uuid::from_u128(1),
            volume: Uuid::from_u128(2),
            nqn: "nqn.x".into(),
            ns_id: 1,
            staging_path: "/stage".into(),
            attacher: "loop".into(),
            block: false,
            device: Some("/dev/loop0".into()),
            fs_type: Some("xfs".into()),
            mount_flags: vec![],
            published: ["/pods/u1/volumes/v/mount".into()].into(),
        };
        assert!(load(dir.path(), &r.volume_id).expect("none").is_none());
        save(dir.path(), &r).expect("save");
        assert_eq!(all(dir.path()).expect("all"), vec![r.clone()]);
        assert!(path_for(dir.path(), &r.volume_id).starts_with(dir.path()));
        assert_eq!(
            load(dir.path(), &r.volume_id).expect("load"),
            Some(r.clone())
        );
        remove(dir.path(), &r.volume_id).expect("rm");
        remove(dir.path(), &r.volume_id).expect("rm twice");
        assert!(load(dir.path(), &r.volume_id).expect("gone").is_none());
    }
}

//! The wire format of volume and snapshot handles and of NQNs, as the rest of simplyblock
//! spells them: the CSI driver writes them into PersistentVolumes and snapshots, and the
//! operator reads them back (volume operations, node removal, failover drills).

use std::fmt;

use uuid::Uuid;

/// A handle that is not one of simplyblock's; says what was read and the form expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedHandle(pub String);

impl fmt::Display for MalformedHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MalformedHandle {}

type Result<T> = std::result::Result<T, MalformedHandle>;
/// Prefix of subsystem NQNs.
pub const SUBSYSTEM_NQN_PREFIX: &str = "nqn.2023-02.io.simplyblock";
/// Prefix of host NQNs (followed by the Kubernetes node UID).
pub const HOST_NQN_PREFIX: &str = "nqn.2014-08.io.simplyblock:uuid:";

/// A pool named by UUID or, on volumes created before the v2 API, by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolRef {
    Id(Uuid),
    Name(String),
}

impl fmt::Display for PoolRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolRef::Id(u) => write!(f, "{u}"),
            PoolRef::Name(n) => f.write_str(n),
        }
    }
}

impl PoolRef {
    fn parse(s: &str) -> Option<Self> {
        if s.is_empty() {
            return None;
        }
        Some(match Uuid::parse_str(s) {
            Ok(u) => PoolRef::Id(u),
            Err(_) => PoolRef::Name(s.to_string()),
        })
    }
}

/// CSI `volume_id`: `{clusterUUID}:{poolUUIDOrName}:{lvolUUID}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeHandle {
    pub cluster: Uuid,
    pub pool: PoolRef,
    pub volume: Uuid,
}

impl VolumeHandle {
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || {
            MalformedHandle(format!(
                "volume {s:?} (not a simplyblock handle cluster:pool:volume)"
            ))
        };
        let mut parts = s.split(':');
        let (Some(c), Some(p), Some(v), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        Ok(Self {
            cluster: Uuid::parse_str(c).map_err(|_| bad())?,
            pool: PoolRef::parse(p).ok_or_else(bad)?,
            volume: Uuid::parse_str(v).map_err(|_| bad())?,
        })
    }
}

impl fmt::Display for VolumeHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.cluster, self.pool, self.volume)
    }
}

/// Snapshot id: `{cluster}:{pool}:{snapshotUUID}`, or the legacy `{cluster}:{snapshotUUID}`
/// (pool unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotHandle {
    pub cluster: Uuid,
    pub pool: Option<PoolRef>,
    pub snapshot: Uuid,
}

impl SnapshotHandle {
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || MalformedHandle(format!("snapshot {s:?} (not a simplyblock snapshot id)"));
        let parts: Vec<&str> = s.split(':').collect();
        let (c, p, id) = match parts.as_slice() {
            [c, id] => (*c, None, *id),
            [c, p, id] => (*c, Some(PoolRef::parse(p).ok_or_else(bad)?), *id),
            _ => return Err(bad()),
        };
        Ok(Self {
            cluster: Uuid::parse_str(c).map_err(|_| bad())?,
            pool: p,
            snapshot: Uuid::parse_str(id).map_err(|_| bad())?,
        })
    }
}

impl fmt::Display for SnapshotHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pool {
            Some(p) => write!(f, "{}:{p}:{}", self.cluster, self.snapshot),
            None => write!(f, "{}:{}", self.cluster, self.snapshot),
        }
    }
}

/// `nqn.2023-02.io.simplyblock:{clusterID}:lvol:{lvolID}`.
pub fn subsystem_nqn(cluster: Uuid, volume: Uuid) -> String {
    format!("{SUBSYSTEM_NQN_PREFIX}:{cluster}:lvol:{volume}")
}

/// The volume id a subsystem NQN names, if it is one of ours.
pub fn volume_of_nqn(nqn: &str) -> Option<(Uuid, Uuid)> {
    let rest = nqn.strip_prefix(SUBSYSTEM_NQN_PREFIX)?.strip_prefix(':')?;
    let (cluster, vol) = rest.split_once(":lvol:")?;
    Some((Uuid::parse_str(cluster).ok()?, Uuid::parse_str(vol).ok()?))
}

/// `nqn.2014-08.io.simplyblock:uuid:{k8sNodeUID}`.
pub fn host_nqn(node_uid: &str) -> String {
    format!("{HOST_NQN_PREFIX}{node_uid}")
}

/// A stable UUID for a node name, for hosts without a Kubernetes node UID (tests, demo).
pub fn uuid_for_name(name: &str) -> Uuid {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(name.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    // Mark it as a name-based (v5-style layout) UUID so it never looks random.
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    Uuid::from_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: &str = "2d8b9d4c-0b5f-4a43-8c8f-1b7e1b0b0c01";
    const P: &str = "3e8b9d4c-0b5f-4a43-8c8f-1b7e1b0b0c02";
    const V: &str = "4f8b9d4c-0b5f-4a43-8c8f-1b7e1b0b0c03";

    #[test]
    fn volume_handle_round_trips() {
        let s = format!("{C}:{P}:{V}");
        let h = VolumeHandle::parse(&s).expect("parse");
        assert!(matches!(h.pool, PoolRef::Id(_)));
        assert_eq!(h.to_string(), s);
    }

    #[test]
    fn legacy_pool_name_is_kept() {
        let h = VolumeHandle::parse(&format!("{C}:pool1:{V}")).expect("parse");
        assert_eq!(h.pool, PoolRef::Name("pool1".into()));
    }

    #[test]
    fn malformed_handles_are_refused() {
        for s in [
            "",
            "x",
            &format!("{C}:{P}"),
            &format!("{C}::{V}"),
            &format!("{C}:{P}:nope"),
            &format!("{C}:{P}:{V}:extra"),
        ] {
            assert!(VolumeHandle::parse(s).is_err(), "{s}");
        }
    }

    #[test]
    fn snapshot_ids_in_both_forms() {
        let full = SnapshotHandle::parse(&format!("{C}:{P}:{V}")).expect("full");
        assert!(full.pool.is_some());
        assert_eq!(full.to_string(), format!("{C}:{P}:{V}"));
        let legacy = SnapshotHandle::parse(&format!("{C}:{V}")).expect("legacy");
        assert_eq!(legacy.pool, None);
        assert_eq!(legacy.to_string(), format!("{C}:{V}"));
        assert!(SnapshotHandle::parse("junk").is_err());
    }

    #[test]
    fn nqn_formats() {
        let c = Uuid::parse_str(C).expect("c");
        let v = Uuid::parse_str(V).expect("v");
        let nqn = subsystem_nqn(c, v);
        assert_eq!(nqn, format!("nqn.2023-02.io.simplyblock:{C}:lvol:{V}"));
        assert_eq!(volume_of_nqn(&nqn), Some((c, v)));
        assert_eq!(volume_of_nqn("nqn.2014-08.org.nvmexpress:uuid:x"), None);
        assert_eq!(
            host_nqn("abc"),
            "nqn.2014-08.io.simplyblock:uuid:abc".to_string()
        );
        assert_eq!(uuid_for_name("n1"), uuid_for_name("n1"));
        assert_ne!(uuid_for_name("n1"), uuid_for_name("n2"));
    }
}

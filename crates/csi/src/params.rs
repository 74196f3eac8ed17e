//! StorageClass parameters, sizes, volume-context keys and topology keys (all pure).

use std::collections::{BTreeMap, HashMap};

use simplyblock_api::keys;
use simplyblock_api::quantity;
use simplyblock_controlplane::ConnectEntry;
use uuid::Uuid;

use crate::error::{CsiError, Result};

pub const GIB: u64 = 1 << 30;

/// Volume-context keys written at CreateVolume and read at NodeStage.
pub mod vc {
    pub const CLUSTER_ID: &str = "cluster_id";
    pub const NAME: &str = "name";
    pub const UUID: &str = "uuid";
    pub const NQN: &str = "nqn";
    pub const NS_ID: &str = "nsId";
    pub const TARGET_TYPE: &str = "targetType";
    pub const CONNECTIONS: &str = "connections";
    pub const POOL_ID: &str = "poolID";
    pub const ENCRYPTION: &str = "encryption";
    /// The lvol id again, under the name the node's device lookup reads.
    pub const MODEL: &str = "model";
    /// Set after a failover: the volume that now serves; preferred over `uuid`.
    pub const TARGET_LVOL_ID: &str = "targetLvolID";
    pub const RECONNECT_DELAY: &str = "reconnectDelay";
    pub const NR_IO_QUEUES: &str = "nrIoQueues";
    pub const CTRL_LOSS_TMO: &str = "ctrlLossTmo";
    pub const HOST_IFACE: &str = "hostIface";
    // Class parameters the node applies when it formats, carried under their own names.
    pub const TUNE2FS_RESERVED_BLOCKS: &str = "tune2fs_reserved_blocks";
    pub const MKFS_OPTIONS: &str = "mkfs_options";
    pub const XFS_SU: &str = "xfs_su";
    pub const XFS_SW: &str = "xfs_sw";
}

/// Topology keys: Kubernetes' own, and the simplyblock Node labels of
/// [`simplyblock_api::keys`].
pub mod topo {
    use simplyblock_api::keys;

    pub const ZONE: &str = "topology.kubernetes.io/zone";
    pub const ZONE_BETA: &str = "failure-domain.beta.kubernetes.io/zone";
    pub const REGION: &str = "topology.kubernetes.io/region";
    pub const POOL_PREFIX: &str = keys::POOL_ACCESS_LABEL_PREFIX;
    pub const STORAGE_NODE_PREFIX: &str = keys::STORAGE_NODE_TOPOLOGY_PREFIX;
    pub const HOSTNAME: &str = keys::HOSTNAME_TOPOLOGY_KEY;
}

/// What CreateVolume reads from the StorageClass parameters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClassParams {
    pub cluster_id: Option<Uuid>,
    pub pool_name: Option<String>,
    pub zone_cluster_map: BTreeMap<String, Uuid>,
    pub region_cluster_map: BTreeMap<String, Uuid>,
    pub fabric: String,
    pub target_type: Option<String>,
    pub max_namespace_per_subsys: u32,
    pub encryption: bool,
    pub qos_rw_iops: u64,
    pub qos_rw_mbytes: u64,
    pub qos_r_mbytes: u64,
    pub qos_w_mbytes: u64,
    pub ndcs: u32,
    pub npcs: u32,
    pub priority_class: u32,
    pub pvc_name: Option<String>,
    /// Growth cap in bytes (`max_size`); volumes are not created above it.
    pub max_size: Option<u64>,
    /// `replicate`: sent as `do_replicate`.
    pub replicate: bool,
    /// `dhchap_node_selector`: a `simplyblock.io/pool.<…>` Node label key; the volume is
    /// reachable only from Nodes labelled with it `allowed`.
    pub dhchap_node_selector: Option<String>,
    /// How the node formats the volume.
    pub format: FormatParams,
}

/// How a blank volume is formatted: read from the StorageClass at CreateVolume, carried in
/// the volume context under the same keys, read again by the node (which also serves
/// volumes whose context was written by hand).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FormatParams {
    /// `mkfs_options`: replaces the default mkfs options.
    pub mkfs_options: Option<Vec<String>>,
    /// `xfs_su` and `xfs_sw`: the stripe unit (as mkfs.xfs spells sizes) and width.
    pub xfs_stripe: Option<(String, u32)>,
    /// `tune2fs_reserved_blocks`: the percentage of ext4 blocks reserved for root, set by
    /// `tune2fs -m` after mkfs. Unset leaves mke2fs's default.
    pub reserved_blocks: Option<String>,
}

/// `xfs_su`: a number of bytes with an optional `k`, `m` or `g`, a multiple of the 4 KiB
/// block size (mkfs.xfs refuses a log stripe unit that is not).
fn parse_stripe_unit(v: &str) -> Result<String> {
    let t = v.trim().to_ascii_lowercase();
    let (digits, mult) = match t.char_indices().last() {
        Some((i, 'k')) => (&t[..i], 1u64 << 10),
        Some((i, 'm')) => (&t[..i], 1 << 20),
        Some((i, 'g')) => (&t[..i], 1 << 30),
        _ => (t.as_str(), 1),
    };
    let bytes = digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|b| *b > 0);
    match bytes {
        Some(b) if b % 4096 == 0 => Ok(t),
        Some(_) => Err(CsiError::InvalidArgument(format!(
            "parameter xfs_su={v:?} is not a multiple of the 4 KiB filesystem block, which mkfs.xfs requires of a stripe unit; use for example 16k or 64k"
        ))),
        None => Err(CsiError::InvalidArgument(format!(
            "parameter xfs_su={v:?} is not a stripe unit: give bytes or a k, m or g suffix, for example 16k"
        ))),
    }
}

impl FormatParams {
    /// Read and check the format keys of a StorageClass or a volume context.
    pub fn parse(p: &HashMap<String, String>) -> Result<Self> {
        let get = |k: &str| p.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let mut out = FormatParams::default();
        if let Some(v) = get(vc::MKFS_OPTIONS) {
            let words: Vec<String> = v.split_whitespace().map(String::from).collect();
            // The filesystem is not known here; the stricter check for it runs where it is.
            crate::mkfs_options::check_any(&words)?;
            out.mkfs_options = Some(words);
        }
        match (get(vc::XFS_SU), get(vc::XFS_SW)) {
            (None, None) => {}
            (Some(su), Some(sw)) => {
                let su = parse_stripe_unit(su)?;
                let sw = sw.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    CsiError::InvalidArgument(format!(
                        "parameter xfs_sw={sw:?} is not a stripe width: give a positive whole number of stripe units, for example 1"
                    ))
                })?;
                out.xfs_stripe = Some((su, sw));
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(CsiError::InvalidArgument(
                    "parameters xfs_su and xfs_sw describe one stripe geometry: set both or neither"
                        .into(),
                ));
            }
        }
        if let Some(v) = get(vc::TUNE2FS_RESERVED_BLOCKS) {
            match v.parse::<f64>() {
                Ok(pct) if (0.0..=50.0).contains(&pct) => out.reserved_blocks = Some(v.into()),
                _ => {
                    return Err(CsiError::InvalidArgument(format!(
                        "parameter tune2fs_reserved_blocks={v:?} is not a percentage tune2fs -m accepts: give a number from 0 to 50, for example 0 or 5"
                    )));
                }
            }
        }
        Ok(out)
    }

    /// Check the class's mkfs options against the filesystem they will format.
    pub fn check_for(&self, fs: &str) -> Result<()> {
        match &self.mkfs_options {
            Some(words) => crate::mkfs_options::check(fs, words),
            None => Ok(()),
        }
    }

    /// The keys to carry in the volume context (only those set).
    pub fn to_context(&self, m: &mut HashMap<String, String>) {
        if let Some(o) = &self.mkfs_options {
            m.insert(vc::MKFS_OPTIONS.into(), o.join(" "));
        }
        if let Some((su, sw)) = &self.xfs_stripe {
            m.insert(vc::XFS_SU.into(), su.clone());
            m.insert(vc::XFS_SW.into(), sw.to_string());
        }
        if let Some(r) = &self.reserved_blocks {
            m.insert(vc::TUNE2FS_RESERVED_BLOCKS.into(), r.clone());
        }
    }
}

/// Per-path NVMe-oF tunables carried in the volume context, one set for every path. The
/// node fills them into the paths the control plane gives at stage only where a path
/// leaves them unset: the fresh answer is the newer word. The controller-loss timeout is
/// recorded but the node always uses its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathTunables {
    pub reconnect_delay: Option<u32>,
    pub nr_io_queues: Option<u32>,
    pub ctrl_loss_tmo: Option<i64>,
    pub host_iface: Option<String>,
}

impl PathTunables {
    /// The tunables of one path as the control plane publishes it (zero or empty is unset).
    pub fn from_entry(e: &ConnectEntry) -> Self {
        PathTunables {
            reconnect_delay: Some(e.reconnect_delay).filter(|n| *n > 0),
            nr_io_queues: Some(e.nr_io_queues).filter(|n| *n > 0),
            ctrl_loss_tmo: Some(e.ctrl_loss_tmo).filter(|n| *n != 0),
            host_iface: Some(e.host_iface.clone()).filter(|s| !s.is_empty()),
        }
    }

    pub fn to_context(&self, m: &mut HashMap<String, String>) {
        if let Some(v) = self.reconnect_delay {
            m.insert(vc::RECONNECT_DELAY.into(), v.to_string());
        }
        if let Some(v) = self.nr_io_queues {
            m.insert(vc::NR_IO_QUEUES.into(), v.to_string());
        }
        if let Some(v) = self.ctrl_loss_tmo {
            m.insert(vc::CTRL_LOSS_TMO.into(), v.to_string());
        }
        if let Some(v) = &self.host_iface {
            m.insert(vc::HOST_IFACE.into(), v.clone());
        }
    }

    pub fn from_context(m: &HashMap<String, String>) -> Result<Self> {
        fn num<T: std::str::FromStr>(m: &HashMap<String, String>, key: &str) -> Result<Option<T>> {
            match m.get(key).map(|v| v.trim()).filter(|v| !v.is_empty()) {
                None => Ok(None),
                Some(v) => v.parse().map(Some).map_err(|_| {
                    CsiError::InvalidArgument(format!(
                        "volume context {key}={v:?} is not a whole number; correct or remove it in the PersistentVolume's volumeAttributes"
                    ))
                }),
            }
        }
        Ok(PathTunables {
            reconnect_delay: num(m, vc::RECONNECT_DELAY)?,
            nr_io_queues: num(m, vc::NR_IO_QUEUES)?,
            ctrl_loss_tmo: num(m, vc::CTRL_LOSS_TMO)?,
            host_iface: m
                .get(vc::HOST_IFACE)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty()),
        })
    }

    /// Fill what the path leaves unset.
    pub fn fill(&self, e: &mut ConnectEntry) {
        if e.reconnect_delay == 0
            && let Some(v) = self.reconnect_delay
        {
            e.reconnect_delay = v;
        }
        if e.nr_io_queues == 0
            && let Some(v) = self.nr_io_queues
        {
            e.nr_io_queues = v;
        }
        if e.ctrl_loss_tmo == 0
            && let Some(v) = self.ctrl_loss_tmo
        {
            e.ctrl_loss_tmo = v;
        }
        if e.host_iface.is_empty()
            && let Some(v) = &self.host_iface
        {
            e.host_iface = v.clone();
        }
    }
}

/// A size as the control plane reads sizes (see [`quantity`]): `G` is 10^9, `Gi` is
/// 2^30 (likewise k, M, T, P); a bare number is bytes.
pub fn parse_size(key: &str, v: &str) -> Result<u64> {
    quantity::parse(v)
        .map_err(|e| CsiError::InvalidArgument(format!("parameter {key}={v:?} is not a size: {e}")))
}

/// The prefix of the Node labels that gate DHCHAP pools.
fn check_dhchap_selector(v: &str) -> Result<String> {
    let key = v.trim();
    let name = key.strip_prefix(topo::POOL_PREFIX).unwrap_or_default();
    let valid_name = !name.is_empty()
        // A label key's name, the part after its '/', is at most 63 bytes.
        && key.split_once('/').is_some_and(|(_, label_name)| label_name.len() <= 63)
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric());
    if valid_name {
        Ok(key.to_string())
    } else {
        Err(CsiError::InvalidArgument(format!(
            "parameter dhchap_node_selector={v:?} is not a pool label key: the node plugin reports only Node labels {}<pool> (valued allowed) as topology, so use that form, for example {}pool1",
            topo::POOL_PREFIX,
            topo::POOL_PREFIX
        )))
    }
}

fn parse_bool(key: &str, v: &str) -> Result<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Ok(true),
        "false" | "no" | "0" | "" => Ok(false),
        _ => Err(CsiError::InvalidArgument(format!(
            "parameter {key}={v:?} is not a boolean (true or false)"
        ))),
    }
}

fn parse_num<T: std::str::FromStr>(key: &str, v: &str) -> Result<T> {
    v.trim().parse().map_err(|_| {
        CsiError::InvalidArgument(format!(
            "parameter {key}={v:?} is not a non-negative integer"
        ))
    })
}

fn parse_cluster_map(key: &str, v: &str) -> Result<BTreeMap<String, Uuid>> {
    let raw: BTreeMap<String, String> = serde_json::from_str(v).map_err(|e| {
        CsiError::InvalidArgument(format!(
            "parameter {key} must be a JSON object of zone to cluster id: {e}"
        ))
    })?;
    let mut out = BTreeMap::new();
    for (zone, cluster) in raw {
        // Blank entries are dropped, as the chart renders unset zones as "".
        if zone.trim().is_empty() || cluster.trim().is_empty() {
            continue;
        }
        let id = Uuid::parse_str(cluster.trim()).map_err(|_| {
            CsiError::InvalidArgument(format!(
                "parameter {key}: {cluster:?} for {zone:?} is not a cluster UUID"
            ))
        })?;
        out.insert(zone, id);
    }
    if out.is_empty() {
        return Err(CsiError::InvalidArgument(format!(
            "parameter {key} maps no zone to a cluster"
        )));
    }
    Ok(out)
}

/// A QoS ceiling spelled `new` (current) or `old` (read forever); when both are given
/// they must agree.
fn parse_qos(p: &HashMap<String, String>, new: &str, old: &str) -> Result<u64> {
    let read = |key: &str| p.get(key).map(|v| parse_num::<u64>(key, v)).transpose();
    match (read(new)?, read(old)?) {
        (Some(a), Some(b)) if a != b => Err(CsiError::InvalidArgument(format!(
            "parameters {new}={a} and {old}={b} disagree: they are two spellings of one QoS ceiling; keep {new} and remove {old}"
        ))),
        (Some(v), _) | (None, Some(v)) => Ok(v),
        (None, None) => Ok(0),
    }
}

impl ClassParams {
    pub fn parse(p: &HashMap<String, String>) -> Result<Self> {
        let mut out = ClassParams {
            fabric: "tcp".into(),
            max_namespace_per_subsys: 1,
            ..Default::default()
        };
        for (k, v) in p {
            match k.as_str() {
                "cluster_id" => {
                    out.cluster_id = Some(Uuid::parse_str(v.trim()).map_err(|_| {
                        CsiError::InvalidArgument(format!(
                            "parameter cluster_id={v:?} is not a cluster UUID"
                        ))
                    })?)
                }
                "pool_name" => out.pool_name = Some(v.clone()).filter(|s| !s.is_empty()),
                "zone_cluster_map" => out.zone_cluster_map = parse_cluster_map(k, v)?,
                "region_cluster_map" => out.region_cluster_map = parse_cluster_map(k, v)?,
                "fabric" => out.fabric = v.to_ascii_lowercase(),
                "type" => out.target_type = Some(v.to_ascii_lowercase()),
                "max_namespace_per_subsys" => out.max_namespace_per_subsys = parse_num(k, v)?,
                "encryption" => out.encryption = parse_bool(k, v)?,
                // QoS: the new keys and the old ones are read alike; both at once must agree.
                "max_iops" | "qos_rw_iops" => {
                    out.qos_rw_iops = parse_qos(p, "max_iops", "qos_rw_iops")?
                }
                "max_mbytes_per_sec" | "qos_rw_mbytes" => {
                    out.qos_rw_mbytes = parse_qos(p, "max_mbytes_per_sec", "qos_rw_mbytes")?
                }
                "max_read_mbytes_per_sec" | "qos_r_mbytes" => {
                    out.qos_r_mbytes = parse_qos(p, "max_read_mbytes_per_sec", "qos_r_mbytes")?
                }
                "max_write_mbytes_per_sec" | "qos_w_mbytes" => {
                    out.qos_w_mbytes = parse_qos(p, "max_write_mbytes_per_sec", "qos_w_mbytes")?
                }
                "distr_ndcs" => out.ndcs = parse_num(k, v)?,
                "distr_npcs" => out.npcs = parse_num(k, v)?,
                "lvol_priority_class" => out.priority_class = parse_num(k, v)?,
                "csi.storage.k8s.io/pvc/name" => out.pvc_name = Some(v.clone()),
                "max_size" => {
                    out.max_size = Some(parse_size(k, v)?).filter(|n| *n > 0);
                }
                "replicate" => out.replicate = parse_bool(k, v)?,
                // The v2 create has no compression setting: only "false" can be honoured.
                "compression" if parse_bool(k, v)? => {
                    return Err(CsiError::InvalidArgument(
                        "parameter compression=true cannot be honoured: the control plane's volume API has no compression setting, so the volume would be created uncompressed; remove the parameter or set it to false".into(),
                    ));
                }
                "dhchap_node_selector" => {
                    out.dhchap_node_selector = Some(v.as_str())
                        .filter(|s| !s.trim().is_empty())
                        .map(check_dhchap_selector)
                        .transpose()?;
                }
                // Everything else (fstype, chart-era keys, provisioner metadata) is read
                // elsewhere or passed through unused.
                _ => {}
            }
        }
        if out.cluster_id.is_none()
            && out.zone_cluster_map.is_empty()
            && out.region_cluster_map.is_empty()
        {
            return Err(CsiError::InvalidArgument(
                "the StorageClass names no cluster: set cluster_id, zone_cluster_map or region_cluster_map".into(),
            ));
        }
        if out.pool_name.is_none() {
            return Err(CsiError::InvalidArgument(
                "the StorageClass names no pool: set pool_name".into(),
            ));
        }
        out.format = FormatParams::parse(p)?;
        Ok(out)
    }

    /// The cluster for the topology the volume must be reachable from: the explicit
    /// `cluster_id`, else the first preferred, then requisite, segment that a zone or
    /// region map names. Returns the cluster and the segment it was chosen by.
    pub fn choose_cluster(
        &self,
        preferred: &[BTreeMap<String, String>],
        requisite: &[BTreeMap<String, String>],
    ) -> Result<(Uuid, Option<(String, String)>)> {
        let maps = [
            (topo::ZONE, &self.zone_cluster_map),
            (topo::REGION, &self.region_cluster_map),
        ];
        let pick = |segs: &[BTreeMap<String, String>]| {
            segs.iter().find_map(|seg| {
                maps.iter().find_map(|(key, map)| {
                    let v = seg.get(*key)?;
                    map.get(v).map(|c| (*c, (key.to_string(), v.clone())))
                })
            })
        };
        if let Some(c) = self.cluster_id {
            // A pinned cluster still honours a zone map when the requirement names a zone
            // the map covers; otherwise the pin wins.
            return Ok((c, pick(preferred).or_else(|| pick(requisite)).map(|x| x.1)));
        }
        if let Some((c, seg)) = pick(preferred).or_else(|| pick(requisite)) {
            return Ok((c, Some(seg)));
        }
        if requisite.is_empty() && preferred.is_empty() {
            // No requirement: a map with exactly one cluster is unambiguous.
            let all: std::collections::BTreeSet<Uuid> = self
                .zone_cluster_map
                .values()
                .chain(self.region_cluster_map.values())
                .copied()
                .collect();
            if all.len() == 1
                && let Some(c) = all.into_iter().next()
            {
                return Ok((c, None));
            }
        }
        Err(CsiError::ResourceExhausted(
            "no cluster of zone_cluster_map or region_cluster_map serves the requested topology; add the zone to the map or relax the requirement".into(),
        ))
    }
}

/// The storage nodes named in topology segments (`simplyblock.io/storage-node-uuid.<cluster>.<n>`,
/// see [`keys::storage_node_topology_key`]) for `cluster`, preferred first, then requisite,
/// without repeats.
pub fn storage_nodes_in(
    cluster: Uuid,
    preferred: &[BTreeMap<String, String>],
    requisite: &[BTreeMap<String, String>],
) -> Vec<Uuid> {
    let of_cluster = |k: &str| {
        keys::parse_storage_node_topology_key(k)
            .is_some_and(|key| Uuid::parse_str(key.cluster_uuid).ok() == Some(cluster))
    };
    let mut out = Vec::new();
    for seg in preferred.iter().chain(requisite) {
        for (k, v) in seg {
            if of_cluster(k)
                && let Ok(u) = Uuid::parse_str(v)
                && !out.contains(&u)
            {
                out.push(u);
            }
        }
    }
    out
}

/// Bytes to create for a capacity range: 0 becomes 1 GiB, and sizes are aligned up to GiB.
pub fn volume_size(required: i64, limit: i64) -> Result<u64> {
    if required < 0 || limit < 0 {
        return Err(CsiError::InvalidArgument(
            "capacity_range bytes must not be negative".into(),
        ));
    }
    let (required, limit) = (required as u64, limit as u64);
    if limit > 0 && required > limit {
        return Err(CsiError::InvalidArgument(format!(
            "capacity_range asks for at least {required} bytes but at most {limit}"
        )));
    }
    let want = if required == 0 {
        if limit > 0 && limit < GIB { limit } else { GIB }
    } else {
        required
    };
    let aligned = want.div_ceil(GIB) * GIB;
    if limit > 0 && aligned > limit {
        return Err(CsiError::OutOfRange(format!(
            "volumes are sized in whole GiB; {want} bytes rounds up to {aligned}, above the limit of {limit}"
        )));
    }
    Ok(aligned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn seg(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const C1: &str = "11111111-1111-4111-8111-111111111111";
    const C2: &str = "22222222-2222-4222-8222-222222222222";

    #[test]
    fn parameters_parse_with_defaults() {
        let p = ClassParams::parse(&m(&[
            ("cluster_id", C1),
            ("pool_name", "pool1"),
            ("qos_rw_iops", "100"),
            ("encryption", "True"),
            ("csi.storage.k8s.io/fstype", "xfs"),
        ]))
        .expect("parse");
        assert_eq!(p.cluster_id.map(|c| c.to_string()).as_deref(), Some(C1));
        assert_eq!(p.pool_name.as_deref(), Some("pool1"));
        assert_eq!(p.qos_rw_iops, 100);
        assert!(p.encryption);
        assert_eq!(p.fabric, "tcp");
        assert_eq!(p.max_namespace_per_subsys, 1);
    }

    #[test]
    fn qos_reads_both_spellings_and_refuses_disagreement() {
        let base = [("cluster_id", C1), ("pool_name", "p")];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut kv = base.to_vec();
            kv.extend_from_slice(extra);
            ClassParams::parse(&m(&kv))
        };
        let p = with(&[("max_iops", "500"), ("qos_r_mbytes", "40")]).expect("parse");
        assert_eq!((p.qos_rw_iops, p.qos_r_mbytes), (500, 40));
        let p = with(&[("max_iops", "500"), ("qos_rw_iops", "500")]).expect("agree");
        assert_eq!(p.qos_rw_iops, 500);
        let e = with(&[("max_iops", "500"), ("qos_rw_iops", "600")]).expect_err("disagree");
        assert!(
            e.to_string().contains("max_iops=500 and qos_rw_iops=600"),
            "{e}"
        );
    }

    #[test]
    fn bad_parameters_say_which() {
        let e = ClassParams::parse(&m(&[
            ("cluster_id", C1),
            ("pool_name", "p"),
            ("qos_rw_iops", "-1"),
        ]))
        .expect_err("negative");
        assert!(e.to_string().contains("qos_rw_iops"), "{e}");
        let e = ClassParams::parse(&m(&[("pool_name", "p")])).expect_err("no cluster");
        assert!(e.to_string().contains("cluster_id"), "{e}");
        let e = ClassParams::parse(&m(&[("cluster_id", C1)])).expect_err("no pool");
        assert!(e.to_string().contains("pool_name"), "{e}");
        let e = ClassParams::parse(&m(&[
            ("zone_cluster_map", r#"{"a":""}"#),
            ("pool_name", "p"),
        ]))
        .expect_err("empty map");
        assert!(e.to_string().contains("maps no zone"), "{e}");
    }

    fn with(extra: &[(&str, &str)]) -> Result<ClassParams> {
        let mut kv = vec![("cluster_id", C1), ("pool_name", "p")];
        kv.extend_from_slice(extra);
        ClassParams::parse(&m(&kv))
    }

    fn refused(extra: &[(&str, &str)], names: &str) -> String {
        let e = with(extra).expect_err("refused");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
        let text = e.to_string();
        assert!(text.contains(names), "{text} should name {names}");
        text
    }

    #[test]
    fn max_size_reads_si_and_iec_suffixes() {
        let p = with(&[("max_size", "2Gi")]).expect("iec");
        assert_eq!(p.max_size, Some(2 * GIB));
        assert_eq!(
            with(&[("max_size", "1T")]).expect("si").max_size,
            Some(1_000_000_000_000)
        );
        assert_eq!(
            with(&[("max_size", "4096")]).expect("bytes").max_size,
            Some(4096)
        );
        assert_eq!(
            with(&[("max_size", "0")]).expect("zero").max_size,
            None,
            "0 is no cap"
        );
        assert_eq!(with(&[]).expect("unset").max_size, None);
        // Fractions are read as every size is (see simplyblock_api::quantity).
        assert_eq!(
            with(&[("max_size", "1.5Gi")]).expect("fraction").max_size,
            Some(GIB + GIB / 2)
        );
        let t = refused(&[("max_size", "lots")], "max_size=\"lots\"");
        assert!(t.contains("500Gi"), "says what to use: {t}");
        let t = refused(&[("max_size", "-1")], "max_size");
        assert!(t.contains("negative"), "says what is wrong: {t}");
    }

    #[test]
    fn replicate_and_compression_are_read() {
        assert!(with(&[("replicate", "True")]).expect("on").replicate);
        assert!(!with(&[("replicate", "False")]).expect("off").replicate);
        refused(&[("replicate", "maybe")], "replicate");
        // The chart writes compression "False": accepted.
        assert!(with(&[("compression", "False")]).is_ok());
        let t = refused(&[("compression", "true")], "compression=true");
        assert!(t.contains("remove the parameter"), "{t}");
    }

    #[test]
    fn dhchap_selector_must_be_a_pool_label_key() {
        let p = with(&[("dhchap_node_selector", "simplyblock.io/pool.pool1")]).expect("ok");
        assert_eq!(
            p.dhchap_node_selector.as_deref(),
            Some("simplyblock.io/pool.pool1")
        );
        assert_eq!(
            with(&[("dhchap_node_selector", "")])
                .expect("blank")
                .dhchap_node_selector,
            None
        );
        let t = refused(
            &[("dhchap_node_selector", "kubernetes.io/hostname")],
            "dhchap_node_selector",
        );
        assert!(
            t.contains("simplyblock.io/pool.pool1"),
            "says what to use: {t}"
        );
        refused(
            &[("dhchap_node_selector", "simplyblock.io/pool.")],
            "dhchap_node_selector",
        );
        refused(
            &[("dhchap_node_selector", "simplyblock.io/pool.a b")],
            "dhchap_node_selector",
        );
        let long = format!("simplyblock.io/pool.{}", "x".repeat(59));
        refused(&[("dhchap_node_selector", &long)], "dhchap_node_selector");
    }

    #[test]
    fn format_parameters_are_checked_and_carried_in_the_context() {
        let p = with(&[
            ("mkfs_options", " -b 4096  -m 1 "),
            ("xfs_su", "64K"),
            ("xfs_sw", "4"),
            ("tune2fs_reserved_blocks", "0"),
        ])
        .expect("parse");
        assert_eq!(
            p.format,
            FormatParams {
                mkfs_options: Some(vec!["-b".into(), "4096".into(), "-m".into(), "1".into()]),
                xfs_stripe: Some(("64k".into(), 4)),
                reserved_blocks: Some("0".into()),
            }
        );
        let mut ctx = HashMap::new();
        p.format.to_context(&mut ctx);
        assert_eq!(FormatParams::parse(&ctx).expect("round trip"), p.format);
        assert_eq!(ctx.get("xfs_su").map(String::as_str), Some("64k"));
        // Blank values are unset, as the chart renders them.
        assert_eq!(
            with(&[("tune2fs_reserved_blocks", ""), ("mkfs_options", " ")])
                .expect("blank")
                .format,
            FormatParams::default()
        );
        refused(&[("xfs_su", "16k")], "xfs_su and xfs_sw");
        refused(&[("xfs_sw", "2")], "xfs_su and xfs_sw");
        let t = refused(&[("xfs_su", "1000"), ("xfs_sw", "1")], "xfs_su=\"1000\"");
        assert!(t.contains("4 KiB"), "{t}");
        refused(&[("xfs_su", "16q"), ("xfs_sw", "1")], "xfs_su");
        refused(&[("xfs_su", "16k"), ("xfs_sw", "0")], "xfs_sw");
        refused(
            &[("tune2fs_reserved_blocks", "60")],
            "tune2fs_reserved_blocks",
        );
        refused(
            &[("tune2fs_reserved_blocks", "five")],
            "tune2fs_reserved_blocks",
        );
        refused(&[("mkfs_options", "/dev/sda")], "mkfs_options");
    }

    #[test]
    fn path_tunables_round_trip_and_fill_only_what_a_path_leaves_unset() {
        let primary = ConnectEntry {
            reconnect_delay: 2,
            nr_io_queues: 4,
            ctrl_loss_tmo: 3600,
            host_iface: "eth1".into(),
            ..Default::default()
        };
        let t = PathTunables::from_entry(&primary);
        let mut ctx = HashMap::new();
        t.to_context(&mut ctx);
        assert_eq!(ctx.get("reconnectDelay").map(String::as_str), Some("2"));
        assert_eq!(ctx.get("nrIoQueues").map(String::as_str), Some("4"));
        assert_eq!(ctx.get("ctrlLossTmo").map(String::as_str), Some("3600"));
        assert_eq!(ctx.get("hostIface").map(String::as_str), Some("eth1"));
        assert_eq!(PathTunables::from_context(&ctx).expect("parse"), t);
        // A path without tunables takes the context's; one with its own keeps them.
        let mut bare = ConnectEntry::default();
        t.fill(&mut bare);
        assert_eq!(
            (
                bare.reconnect_delay,
                bare.nr_io_queues,
                bare.host_iface.as_str()
            ),
            (2, 4, "eth1")
        );
        let mut own = ConnectEntry {
            nr_io_queues: 8,
            ..Default::default()
        };
        t.fill(&mut own);
        assert_eq!(own.nr_io_queues, 8);
        assert!(PathTunables::from_entry(&ConnectEntry::default()) == PathTunables::default());
        let e = PathTunables::from_context(&m(&[("nrIoQueues", "many")])).expect_err("bad");
        assert!(e.to_string().contains("nrIoQueues"), "{e}");
    }

    #[test]
    fn zone_map_picks_the_cluster_of_the_requested_zone() {
        let map = format!(r#"{{"zone-a":"{C1}","zone-b":"{C2}","":""}}"#);
        let p = ClassParams::parse(&m(&[("zone_cluster_map", &map), ("pool_name", "p")]))
            .expect("parse");
        let (c, s) = p
            .choose_cluster(&[], &[seg(&[(topo::ZONE, "zone-b")])])
            .expect("zone b");
        assert_eq!(c.to_string(), C2);
        assert_eq!(s, Some((topo::ZONE.to_string(), "zone-b".to_string())));
        // Preferred wins over requisite order.
        let (c, _) = p
            .choose_cluster(
                &[seg(&[(topo::ZONE, "zone-a")])],
                &[
                    seg(&[(topo::ZONE, "zone-b")]),
                    seg(&[(topo::ZONE, "zone-a")]),
                ],
            )
            .expect("preferred");
        assert_eq!(c.to_string(), C1);
        let e = p
            .choose_cluster(&[], &[seg(&[(topo::ZONE, "zone-z")])])
            .expect_err("unknown zone");
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        // Two clusters and no requirement: ambiguous.
        assert!(p.choose_cluster(&[], &[]).is_err());
    }

    #[test]
    fn storage_node_segments_are_read_for_the_chosen_cluster_only() {
        let c1 = Uuid::parse_str(C1).expect("c1");
        let n1 = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa";
        let n2 = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb";
        let k1 = format!("simplyblock.io/storage-node-uuid.{C1}.0");
        let k2 = format!("simplyblock.io/storage-node-uuid.{C2}.0");
        let nodes = storage_nodes_in(c1, &[seg(&[(&k1, n1), (&k2, n2)])], &[seg(&[(&k1, n1)])]);
        assert_eq!(nodes, vec![Uuid::parse_str(n1).expect("n1")]);
    }

    #[test]
    fn sizes_are_whole_gib() {
        assert_eq!(volume_size(0, 0).expect("zero"), GIB);
        assert_eq!(volume_size(1, 0).expect("one"), GIB);
        assert_eq!(volume_size(10 * GIB as i64, 0).expect("ten"), 10 * GIB);
        assert_eq!(volume_size(GIB as i64 + 1, 0).expect("up"), 2 * GIB);
        assert_eq!(
            volume_size(GIB as i64, 2 * GIB as i64).expect("in range"),
            GIB
        );
        let e = volume_size(GIB as i64 + 1, GIB as i64 + 2).expect_err("limit");
        assert_eq!(e.code(), tonic::Code::OutOfRange);
        assert!(volume_size(5, 4).is_err());
    }
}

//! StorageClass parameters, sizes, volume-context keys and topology keys (all pure).

use std::collections::{BTreeMap, HashMap};

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
}

/// Topology keys.
pub mod topo {
    pub const ZONE: &str = "topology.kubernetes.io/zone";
    pub const ZONE_BETA: &str = "failure-domain.beta.kubernetes.io/zone";
    pub const REGION: &str = "topology.kubernetes.io/region";
    pub const POOL_PREFIX: &str = "simplyblock.io/pool.";
    pub const STORAGE_NODE_PREFIX: &str = "simplyblock.io/storage-node-uuid.";
    pub const HOSTNAME: &str = "topology.simplyblock.io/hostname";
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

/// The storage nodes named in topology segments (`simplyblock.io/storage-node-uuid.<cluster>.<n>`)
/// for `cluster`, preferred first, then requisite, without repeats.
pub fn storage_nodes_in(
    cluster: Uuid,
    preferred: &[BTreeMap<String, String>],
    requisite: &[BTreeMap<String, String>],
) -> Vec<Uuid> {
    let prefix = format!("{}{cluster}.", topo::STORAGE_NODE_PREFIX);
    let mut out = Vec::new();
    for seg in preferred.iter().chain(requisite) {
        for (k, v) in seg {
            if k.starts_with(&prefix)
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

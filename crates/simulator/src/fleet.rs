//! The fleet: simulated workers read from a YAML (or JSON) file.
//!
//! ```yaml
//! workers:
//!   - hostname: worker-1
//!     addresses: [10.10.0.11, 10.20.0.11]   # first = management, rest = data plane
//!     profile: r650-4nvme                   # optional host tree under the hosts dir
//!     cpus: 32                              # default 16
//!     memory_gib: 128                       # default 64
//!     storage_nodes: 1                      # storage nodes (sockets) per worker, default 1
//!     labels: {io.simplyblock.storagenodeset: cluster-a}
//!     devices:                              # used when the profile's tree is absent
//!       count: 4                            # default 2
//!       size: 1.92T                         # bytes or SI/IEC string, default 1T
//!       model: "SAMSUNG MZQL21T9HCJR-00A07" # default "SIM NVMe SSD"
//!       pci: ["0000:3b:00.0", "0000:3c:00.0"] # optional, generated otherwise
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::SimError;
use crate::model::{WorkerDevice, WorkerRec};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetFile {
    #[serde(default)]
    pub workers: Vec<FleetWorker>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetWorker {
    pub hostname: String,
    pub addresses: Vec<String>,
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default)]
    pub cpus: Option<u32>,
    #[serde(default)]
    pub memory_gib: Option<u64>,
    #[serde(default)]
    pub storage_nodes: Option<u32>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub devices: Option<FleetDevices>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetDevices {
    #[serde(default)]
    pub count: Option<u32>,
    #[serde(default)]
    pub size: Option<SizeValue>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub pci: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum SizeValue {
    Bytes(u64),
    Text(String),
}

/// Parse a size: bytes, or a number with an SI (`G` = 1e9) or IEC (`Gi` = 2^30) suffix,
/// optionally followed by `B`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let num: f64 = num.parse().ok()?;
    let unit = unit.trim().trim_end_matches(['B', 'b']);
    let mult: f64 = match unit {
        "" => 1.0,
        "k" | "K" => 1e3,
        "M" | "m" => 1e6,
        "G" | "g" => 1e9,
        "T" | "t" => 1e12,
        "P" | "p" => 1e15,
        "Ki" | "ki" | "KI" => 1024.0,
        "Mi" | "mi" | "MI" => 1024f64.powi(2),
        "Gi" | "gi" | "GI" => 1024f64.powi(3),
        "Ti" | "ti" | "TI" => 1024f64.powi(4),
        "Pi" | "pi" | "PI" => 1024f64.powi(5),
        _ => return None,
    };
    if !num.is_finite() || num < 0.0 {
        return None;
    }
    Some((num * mult) as u64)
}

pub fn load(path: &Path) -> Result<FleetFile, SimError> {
    let text = std::fs::read_to_string(path).map_err(|e| SimError::Fleet {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    let fleet: FleetFile = serde_saphyr::from_str(&text).map_err(|e| SimError::Fleet {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    let mut seen = std::collections::BTreeSet::new();
    for w in &fleet.workers {
        if w.addresses.is_empty() {
            return Err(SimError::Fleet {
                path: path.display().to_string(),
                reason: format!("worker {} has no addresses", w.hostname),
            });
        }
        if !seen.insert(w.hostname.clone()) {
            return Err(SimError::Fleet {
                path: path.display().to_string(),
                reason: format!("worker {} is listed twice", w.hostname),
            });
        }
    }
    Ok(fleet)
}

/// Devices from a host tree `<hosts_dir>/<profile>/sys/class/nvme/nvmeN/` (sysfs layout:
/// `model`, `serial`, `address`, and `nvmeNn1/size` in 512-byte sectors), if present.
fn devices_from_tree(dir: &Path) -> Option<Vec<WorkerDevice>> {
    let nvme = dir.join("sys/class/nvme");
    let mut entries: Vec<_> = std::fs::read_dir(&nvme).ok()?.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    let read = |p: &Path| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let mut out = Vec::new();
    for e in entries {
        let ctrl = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        let size = read(&ctrl.join(format!("{name}n1/size")))
            .and_then(|s| s.parse::<u64>().ok())
            .map(|sectors| sectors * 512)
            .unwrap_or(1_000_000_000_000);
        out.push(WorkerDevice {
            model: read(&ctrl.join("model")).unwrap_or_else(|| "NVMe SSD".into()),
            serial: read(&ctrl.join("serial")).unwrap_or_else(|| format!("SIM-{name}")),
            pcie: read(&ctrl.join("address")).unwrap_or_default(),
            size,
        });
    }
    if out.is_empty() { None } else { Some(out) }
}

/// The root of a profile's host tree: `<hosts_dir>/<profile>/root` as the fixtures are
/// laid out (`fixtures/hosts/<name>/root`), or `<hosts_dir>/<profile>` itself.
pub fn host_root(hosts_dir: &Path, profile: &str) -> Option<std::path::PathBuf> {
    let dir = hosts_dir.join(profile);
    let root = dir.join("root");
    if root.is_dir() {
        Some(root)
    } else if dir.is_dir() {
        Some(dir)
    } else {
        None
    }
}

/// Build a worker record from its fleet entry. `hosts_dir` is where hardware profiles
/// (host trees) live; a missing tree falls back to the synthetic `devices` block.
pub fn worker_record(w: &FleetWorker, hosts_dir: Option<&Path>) -> WorkerRec {
    let from_tree = match (hosts_dir, &w.profile) {
        (Some(dir), Some(profile)) => host_root(dir, profile).and_then(|r| devices_from_tree(&r)),
        _ => None,
    };
    let devices = from_tree.unwrap_or_else(|| {
        let d = w.devices.clone().unwrap_or_default();
        let count = d.count.unwrap_or(2).max(d.pci.len() as u32);
        let size = match &d.size {
            Some(SizeValue::Bytes(b)) => *b,
            Some(SizeValue::Text(t)) => parse_size(t).unwrap_or(1_000_000_000_000),
            None => 1_000_000_000_000,
        };
        (0..count)
            .map(|i| WorkerDevice {
                model: d.model.clone().unwrap_or_else(|| "SIM NVMe SSD".into()),
                serial: format!("SIM{:08X}{:02}", fnv(&w.hostname), i),
                pcie: d
                    .pci
                    .get(i as usize)
                    .cloned()
                    .unwrap_or_else(|| format!("0000:{:02x}:00.0", 0x3b + i)),
                size,
            })
            .collect()
    });
    let nics = w
        .addresses
        .iter()
        .enumerate()
        .map(|(i, a)| (format!("eth{i}"), a.clone()))
        .collect();
    WorkerRec {
        hostname: w.hostname.clone(),
        addresses: w.addresses.clone(),
        nics,
        profile: w.profile.clone(),
        cpus: w.cpus.unwrap_or(16),
        memory: w.memory_gib.unwrap_or(64) * (1 << 30),
        storage_nodes: w.storage_nodes.unwrap_or(1).max(1),
        devices,
        labels: w.labels.clone(),
        reboot_until_ms: None,
        topology_applied: false,
    }
}

fn fnv(s: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in s.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("10G"), Some(10_000_000_000));
        assert_eq!(parse_size("10Gi"), Some(10 * (1 << 30)));
        assert_eq!(parse_size("1.92T"), Some(1_920_000_000_000));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("12X"), None);
    }

    #[test]
    fn fleet_parses_and_fills_defaults() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("fleet.yaml");
        std::fs::write(
            &p,
            "workers:\n  - hostname: w1\n    addresses: [10.0.0.1, 10.1.0.1]\n    devices: {count: 3, size: 2T}\n",
        )
        .expect("write");
        let f = load(&p).expect("fleet");
        let w = worker_record(&f.workers[0], Some(dir.path()));
        assert_eq!(w.devices.len(), 3);
        assert_eq!(w.devices[0].size, 2_000_000_000_000);
        assert_eq!(w.mgmt_ip(), "10.0.0.1");
        assert_eq!(w.storage_nodes, 1);
    }

    #[test]
    fn host_tree_wins_when_present() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ctrl = dir.path().join("p1/sys/class/nvme/nvme0");
        std::fs::create_dir_all(ctrl.join("nvme0n1")).expect("mkdir");
        std::fs::write(ctrl.join("model"), "TREE MODEL\n").expect("w");
        std::fs::write(ctrl.join("address"), "0000:5e:00.0\n").expect("w");
        std::fs::write(ctrl.join("nvme0n1/size"), "2000\n").expect("w");
        let w = FleetWorker {
            hostname: "w".into(),
            addresses: vec!["10.0.0.9".into()],
            profile: Some("p1".into()),
            cpus: None,
            memory_gib: None,
            storage_nodes: None,
            labels: BTreeMap::new(),
            devices: None,
        };
        let rec = worker_record(&w, Some(dir.path()));
        assert_eq!(rec.devices.len(), 1);
        assert_eq!(rec.devices[0].model, "TREE MODEL");
        assert_eq!(rec.devices[0].size, 2000 * 512);
        // An absent profile tree falls back to the synthetic devices.
        let w2 = FleetWorker {
            profile: Some("missing".into()),
            ..w
        };
        assert_eq!(worker_record(&w2, Some(dir.path())).devices.len(), 2);
    }
}

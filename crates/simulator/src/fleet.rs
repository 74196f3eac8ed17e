//! The fleet: simulated workers read from a YAML (or JSON) file.
//!
//! ```yaml
//! workers:
//!   - hostname: worker-1
//!     addresses: [10.10.0.11, 10.20.0.11]   # first = management, rest = data plane
//!     profile: qemu-numa2-nvme              # optional host tree under the hosts dir
//!     cpus: 32                              # default 16
//!     memory_gib: 128                       # default 64
//!     storage_nodes: 1                      # storage nodes (sockets) per worker, default 1
//!     labels: {node-restriction.kubernetes.io/simplyblock-storage-node: cluster-a}
//!     devices:                              # only without a profile: synthetic devices
//!       count: 4                            # default 2
//!       size: 1.92T                         # bytes or SI/IEC string, default 1T
//!       model: "SAMSUNG MZQL21T9HCJR-00A07" # default "SIM NVMe SSD"
//!       pci: ["0000:3b:00.0", "0000:3c:00.0"] # optional, generated otherwise
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use simplyblock_api::quantity;
use simplyblock_discovery::probe::{ProbeOptions, RootFs, probe_with};
use simplyblock_discovery::report::{DeviceKind, Transport};

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

pub fn load(path: &Path) -> Result<FleetFile, SimError> {
    let text = std::fs::read_to_string(path).map_err(|e| SimError::Fleet {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    parse(&text, &path.display().to_string())
}

/// A fleet file's text, checked; `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<FleetFile, SimError> {
    let fail = |reason: String| SimError::Fleet {
        path: origin.to_string(),
        reason,
    };
    let fleet: FleetFile = serde_saphyr::from_str(text).map_err(|e| fail(e.to_string()))?;
    let mut seen = std::collections::BTreeSet::new();
    for w in &fleet.workers {
        if w.addresses.is_empty() {
            return Err(fail(format!("worker {} has no addresses", w.hostname)));
        }
        if !seen.insert(w.hostname.clone()) {
            return Err(fail(format!("worker {} is listed twice", w.hostname)));
        }
    }
    Ok(fleet)
}

/// The worker's devices as the discovery probe reports them from its host tree: one per
/// NVMe namespace (a whole disk on NVMe over PCIe), with the model, serial, PCI address and
/// size the probe read, so what sbsim serves is what discovery showed the reviewer. A
/// controller with no kernel namespace (on vfio-pci or no driver) is not served: the probe
/// cannot read its size.
fn devices_from_tree(root: &Path, worker: &str) -> Result<Vec<WorkerDevice>, String> {
    if !root.is_dir() {
        return Err("there is no such directory".into());
    }
    let block = root.join("sys/block");
    std::fs::read_dir(&block).map_err(|e| format!("{} is unreadable: {e}", block.display()))?;
    let options = ProbeOptions {
        node: Some(worker.to_string()),
        ..ProbeOptions::default()
    };
    let report = probe_with(&RootFs::new(root), &options);
    Ok(report
        .devices
        .iter()
        .filter(|d| d.kind == DeviceKind::Disk && d.transport == Transport::NVMe)
        .map(|d| WorkerDevice {
            model: d.model.clone(),
            serial: d.serial.clone(),
            pcie: d.pci_address.clone(),
            size: d.size_bytes,
        })
        .collect())
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

/// Build a worker record from its fleet entry. A worker with a `profile` gets the devices
/// the probe finds in that host tree under `hosts_dir`, and a tree that is missing or
/// unreadable is an error; a worker without one gets the synthetic `devices` block.
pub fn worker_record(w: &FleetWorker, hosts_dir: Option<&Path>) -> Result<WorkerRec, SimError> {
    let devices = match &w.profile {
        Some(profile) => {
            let fail = |reason: String| SimError::HostTree {
                worker: w.hostname.clone(),
                profile: profile.clone(),
                reason,
            };
            if w.devices.is_some() {
                return Err(fail(
                    "the worker also has a `devices` block, which only a worker without a profile uses".into(),
                ));
            }
            let Some(dir) = hosts_dir else {
                return Err(fail("no hosts directory was given to find it in".into()));
            };
            let root = host_root(dir, profile).unwrap_or_else(|| dir.join(profile));
            devices_from_tree(&root, &w.hostname)
                .map_err(|reason| fail(format!("{}: {reason}", root.display())))?
        }
        None => synthetic_devices(w),
    };
    let nics = w
        .addresses
        .iter()
        .enumerate()
        .map(|(i, a)| (format!("eth{i}"), a.clone()))
        .collect();
    Ok(WorkerRec {
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
    })
}

/// The `devices` block of a worker without a hardware profile.
fn synthetic_devices(w: &FleetWorker) -> Vec<WorkerDevice> {
    let d = w.devices.clone().unwrap_or_default();
    let count = d.count.unwrap_or(2).max(d.pci.len() as u32);
    let size = match &d.size {
        Some(SizeValue::Bytes(b)) => *b,
        Some(SizeValue::Text(t)) => quantity::parse(t).unwrap_or(1_000_000_000_000),
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
    fn fleet_parses_and_fills_defaults() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("fleet.yaml");
        std::fs::write(
            &p,
            "workers:\n  - hostname: w1\n    addresses: [10.0.0.1, 10.1.0.1]\n    devices: {count: 3, size: 2T}\n",
        )
        .expect("write");
        let f = load(&p).expect("fleet");
        let w = worker_record(&f.workers[0], Some(dir.path())).expect("record");
        assert_eq!(w.devices.len(), 3);
        assert_eq!(w.devices[0].size, 2_000_000_000_000);
        assert_eq!(w.mgmt_ip(), "10.0.0.1");
        assert_eq!(w.storage_nodes, 1);
    }

    #[test]
    fn device_sizes_are_read_as_the_control_plane_reads_them() {
        for (size, bytes) in [
            ("1.92T", 1_920_000_000_000),
            ("10Gi", 10 << 30),
            ("4096", 4096),
        ] {
            let w = FleetWorker {
                devices: Some(FleetDevices {
                    count: Some(1),
                    size: Some(SizeValue::Text(size.into())),
                    ..FleetDevices::default()
                }),
                ..worker(None)
            };
            let record = worker_record(&w, None).expect("record");
            assert_eq!(record.devices[0].size, bytes, "{size}");
        }
    }

    const HOSTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/hosts");

    fn worker(profile: Option<&str>) -> FleetWorker {
        FleetWorker {
            hostname: "w".into(),
            addresses: vec!["10.0.0.9".into()],
            profile: profile.map(str::to_string),
            cpus: None,
            memory_gib: None,
            storage_nodes: None,
            labels: BTreeMap::new(),
            devices: None,
        }
    }

    #[test]
    fn a_profile_serves_the_namespaces_the_probe_reports() {
        let hosts = Path::new(HOSTS);
        let rec = worker_record(&worker(Some("qemu-numa2-nvme")), Some(hosts)).expect("record");
        let report = simplyblock_discovery::probe::probe(&hosts.join("qemu-numa2-nvme/root"));
        let nvme: Vec<_> = report
            .devices
            .iter()
            .filter(|d| d.kind == DeviceKind::Disk && d.transport == Transport::NVMe)
            .map(|d| {
                (
                    d.pci_address.clone(),
                    d.serial.clone(),
                    d.model.clone(),
                    d.size_bytes,
                )
            })
            .collect();
        let served: Vec<_> = rec
            .devices
            .iter()
            .map(|d| (d.pcie.clone(), d.serial.clone(), d.model.clone(), d.size))
            .collect();
        assert_eq!(served, nvme);
        // The capture: three controllers on the kernel driver, each one 64 MiB namespace;
        // the SATA and virtio disks and the three unbound controllers are not served.
        let pcie: Vec<&str> = rec.devices.iter().map(|d| d.pcie.as_str()).collect();
        assert_eq!(pcie, ["0000:00:03.0", "0000:00:04.0", "0000:81:00.0"]);
        assert_eq!(rec.devices[0].serial, "SBNODE0A");
        assert_eq!(rec.devices[0].model, "QEMU NVMe Ctrl");
        assert!(rec.devices.iter().all(|d| d.size == 64 << 20));
    }

    #[test]
    fn a_missing_tree_is_an_error_not_synthetic_devices() {
        let err = worker_record(&worker(Some("r650-4nvme")), Some(Path::new(HOSTS)))
            .expect_err("no such profile");
        let text = err.to_string();
        assert!(
            text.contains("worker w's hardware profile r650-4nvme"),
            "{text}"
        );
        assert!(text.contains("no such directory"), "{text}");
        let err = worker_record(&worker(Some("qemu-numa2-nvme")), None).expect_err("no hosts dir");
        assert!(err.to_string().contains("no hosts directory"), "{err}");
    }

    #[test]
    fn a_tree_without_sys_block_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("p1/root/proc")).expect("mkdir");
        let err = worker_record(&worker(Some("p1")), Some(dir.path())).expect_err("unreadable");
        assert!(err.to_string().contains("sys/block is unreadable"), "{err}");
    }

    #[test]
    fn a_profile_and_a_devices_block_are_refused_together() {
        let w = FleetWorker {
            devices: Some(FleetDevices::default()),
            ..worker(Some("qemu-numa2-nvme"))
        };
        let err = worker_record(&w, Some(Path::new(HOSTS))).expect_err("both");
        assert!(err.to_string().contains("`devices` block"), "{err}");
    }

    #[test]
    fn the_example_fleet_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fleet.yaml");
        let fleet = load(&path).expect("example fleet");
        for w in &fleet.workers {
            let rec = worker_record(w, Some(Path::new(HOSTS))).expect("worker");
            assert!(!rec.devices.is_empty(), "{} has no devices", w.hostname);
        }
    }
}

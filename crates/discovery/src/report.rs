//! The probe report: one worker's inventory as the probe found it.
//!
//! This is a wire format, not a view. The probe Job writes it into a ConfigMap and the
//! run reads it back, possibly after an operator upgrade in between, so every change of
//! meaning bumps [`REPORT_VERSION`] and a reader refuses any version but its own.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::Error;

/// The schema version of [`Report`]. History: 1 first report; 2 the controller's driver
/// and measured use instead of one "taken" flag; 3 interface addresses and bridges; 4
/// interface kind, lower and upper links; 5 the subsystem NQN, holders, mounts, partition
/// table, signatures and the exclusive-open result of every device.
pub const REPORT_VERSION: u64 = 5;

/// The memory node of something whose node the kernel does not say.
pub const NUMA_UNKNOWN: i32 = -1;

fn unknown_numa() -> i32 {
    NUMA_UNKNOWN
}

/// One worker's inventory.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub version: u64,
    /// The Kubernetes node name: the only place it survives exactly, since object names
    /// and labels derived from it are cut to 63 bytes.
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probed_at: Option<jiff::Timestamp>,
    #[serde(default)]
    pub cpu: Cpu,
    #[serde(default)]
    pub memory: Memory,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub huge_pages: Vec<HugePagePool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvme_controllers: Vec<Controller>,
    /// What the probe could not read, one sentence each. A report with entries here is
    /// still a report: a worker whose CPU tree was unreadable still has disks to review.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Cpu {
    pub online_cpus: u32,
    #[serde(default)]
    pub offline_cpus: u32,
    pub physical_cores: u32,
    pub sockets: u32,
    pub threads_per_core: u32,
    pub hyper_threading: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub numa_nodes: Vec<NumaCpus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NumaCpus {
    pub node: i32,
    #[serde(default)]
    pub online_cpus: Vec<u32>,
    pub physical_cores: u32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Memory {
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub available_bytes: u64,
    #[serde(default)]
    pub huge_pages_bytes: u64,
    #[serde(default)]
    pub swap_total_bytes: u64,
    #[serde(default)]
    pub swap_free_bytes: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub numa_nodes: Vec<NumaMemory>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NumaMemory {
    pub node: i32,
    pub total_bytes: u64,
    pub free_bytes: u64,
}

/// One huge-page size. Counts are pages, as the kernel exports them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HugePagePool {
    pub size_bytes: u64,
    pub total: u64,
    pub free: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub numa_nodes: Vec<NumaHugePages>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NumaHugePages {
    pub node: i32,
    pub total: u64,
    pub free: u64,
}

/// What a network interface is, as far as sysfs tells.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum InterfaceKind {
    /// Backed by a device on a bus (PCI, virtio, USB).
    Physical,
    Bond,
    Team,
    Vlan,
    Vxlan,
    Macvlan,
    Ipvlan,
    Bridge,
    Veth,
    Tun,
    Wireless,
    Loopback,
    /// Identified by name only: the kernel exports no kind for a dummy device.
    Dummy,
    /// A virtual device sysfs does not identify (ifb, a tunnel, ...).
    #[default]
    Virtual,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceAddress {
    pub address: IpAddr,
    pub prefix_len: u8,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Interface {
    pub name: String,
    pub kind: InterfaceKind,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac_address: String,
    /// Negotiated speed; 0 means unknown (a down link or a virtual device), not slow.
    #[serde(default)]
    pub speed_mbps: u64,
    #[serde(default)]
    pub mtu: u32,
    /// The kernel's operstate: up, down, unknown, dormant, ...
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub driver: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pci_address: String,
    #[serde(default = "unknown_numa")]
    pub numa_node: i32,
    /// Interfaces this one is built on: a bond's or bridge's members, a VLAN's parent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lower: Vec<String>,
    /// Interfaces built on this one: its bond, bridge or VLANs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upper: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<InterfaceAddress>,
}

/// What a block device is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum DeviceKind {
    Disk,
    Partition,
    Loop,
    DeviceMapper,
    Raid,
    Ram,
    Rom,
    Nbd,
    #[default]
    Unknown,
}

/// The bus a block device sits on.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Transport {
    /// NVMe over PCIe: a local controller.
    NVMe,
    /// NVMe over a fabric (TCP, RDMA, FC, loop): somebody else's namespace.
    NVMeFabric,
    Sata,
    Sas,
    Scsi,
    Virtio,
    Usb,
    Iscsi,
    Mmc,
    /// No bus: loop, device-mapper, RAM and the like.
    Virtual,
    #[default]
    Unknown,
}

/// Whether opening the device with O_EXCL succeeded: the kernel's own answer to whether
/// anything (a mount, a holder, a partition in use) has claimed it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ExclusiveOpen {
    Succeeded,
    /// EBUSY: something has the device.
    Busy,
    /// The open failed for another reason, so nothing is known.
    Failed,
    /// Not attempted (partitions and virtual devices are not opened).
    #[default]
    NotTried,
}

/// A ground a device is refused on. The names are the vocabulary of the refusal texts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    NotWholeDisk,
    UnknownBus,
    ZeroSize,
    ReadOnly,
    Removable,
    Partitioned,
    Mounted,
    Swap,
    Held,
    Signature,
    Busy,
    Unreadable,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotWholeDisk => "NotWholeDisk",
            Reason::UnknownBus => "UnknownBus",
            Reason::ZeroSize => "ZeroSize",
            Reason::ReadOnly => "ReadOnly",
            Reason::Removable => "Removable",
            Reason::Partitioned => "Partitioned",
            Reason::Mounted => "Mounted",
            Reason::Swap => "Swap",
            Reason::Held => "Held",
            Reason::Signature => "Signature",
            Reason::Busy => "Busy",
            Reason::Unreadable => "Unreadable",
        }
    }
}

/// One ground with its evidence.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Rejection {
    pub reason: Reason,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// One block device.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    pub name: String,
    pub path: String,
    /// Stable links under /dev/disk/by-id, best first (`nvme-eui.*` before others).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stable_paths: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pci_address: String,
    pub size_bytes: u64,
    pub kind: DeviceKind,
    pub transport: Transport,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub vendor: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub serial: String,
    #[serde(default)]
    pub rotational: bool,
    #[serde(default)]
    pub removable: bool,
    #[serde(default = "unknown_numa")]
    pub numa_node: i32,
    /// The disk a partition belongs to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parent: String,
    /// Kernel devices stacked on this one (dm, md, bcache).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<String>,
    /// Where it, or a partition of it, is mounted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<String>,
    /// `gpt` or `dos` when the first sectors carry a table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_table: Option<String>,
    /// Filesystem or volume signatures found in the first sectors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<String>,
    #[serde(default)]
    pub exclusive_open: ExclusiveOpen,
    /// The NVMe subsystem NQN, for an NVMe namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subsystem_nqn: Option<String>,
    /// True only for a whole disk on a known bus with no rejection.
    pub available: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejections: Vec<Rejection>,
}

impl Device {
    pub fn rejected_for(&self, reason: Reason) -> bool {
        self.rejections.iter().any(|r| r.reason == reason)
    }

    /// Refused, and every ground is among `reasons`. A waiver asks this so it cannot
    /// widen into taking a disk that is also mounted or held.
    pub fn only_rejected_for(&self, reasons: &[Reason]) -> bool {
        !self.available
            && !self.rejections.is_empty()
            && self.rejections.iter().all(|r| reasons.contains(&r.reason))
    }
}

/// The driver an NVMe controller is bound to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum ControllerDriver {
    /// The kernel's nvme driver: the namespaces appear as block devices.
    Nvme,
    VfioPci,
    UioPciGeneric,
    /// Bound to nothing, which is what a failed node add leaves behind.
    #[default]
    None,
    Other(String),
}

impl ControllerDriver {
    pub fn from_name(name: &str) -> Self {
        match name {
            "" => ControllerDriver::None,
            "nvme" => ControllerDriver::Nvme,
            "vfio-pci" => ControllerDriver::VfioPci,
            "uio_pci_generic" => ControllerDriver::UioPciGeneric,
            other => ControllerDriver::Other(other.to_string()),
        }
    }

    pub fn is_userspace(&self) -> bool {
        matches!(
            self,
            ControllerDriver::VfioPci | ControllerDriver::UioPciGeneric
        )
    }

    pub fn name(&self) -> &str {
        match self {
            ControllerDriver::Nvme => "nvme",
            ControllerDriver::VfioPci => "vfio-pci",
            ControllerDriver::UioPciGeneric => "uio_pci_generic",
            ControllerDriver::None => "no driver",
            ControllerDriver::Other(s) => s,
        }
    }
}

/// Whether a userspace-bound controller is in use, measured over the process table.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum InUse {
    /// Nothing holds it.
    Idle,
    /// A process holds it; see `holders`.
    Held,
    /// The process table could not be read, so nothing is known. Never read as idle.
    Unreadable,
    /// Not measured: the controller is bound to the kernel driver or to none.
    #[default]
    NotApplicable,
}

/// A process holding a userspace-bound controller.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    pub pid: u32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub command: String,
    /// What it holds open: `/dev/vfio/12`, `/dev/uio0`, a resource file.
    pub via: String,
}

/// One NVMe controller on the PCI bus.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Controller {
    pub address: String,
    #[serde(default)]
    pub driver: ControllerDriver,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub vendor: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub product: String,
    #[serde(default = "unknown_numa")]
    pub numa_node: i32,
    #[serde(default)]
    pub in_use: InUse,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<Holder>,
}

impl Report {
    /// Free huge-page bytes on a memory node, summed over page sizes.
    pub fn free_huge_page_bytes(&self, node: i32) -> u64 {
        self.huge_pages
            .iter()
            .map(|p| {
                p.numa_nodes
                    .iter()
                    .filter(|n| n.node == node)
                    .map(|n| n.free.saturating_mul(p.size_bytes))
                    .sum::<u64>()
            })
            .sum()
    }

    /// Physical cores of a memory node, 0 when the topology was not read.
    pub fn physical_cores(&self, node: i32) -> u32 {
        self.cpu
            .numa_nodes
            .iter()
            .find(|n| n.node == node)
            .map_or(0, |n| n.physical_cores)
    }
}

/// The report as the indented JSON that goes into the ConfigMap: a person reads it with
/// `kubectl get -o yaml`, where one minified line is unreadable.
pub fn encode(report: &Report) -> Result<String, Error> {
    let mut report = report.clone();
    report.version = REPORT_VERSION;
    let out = serde_json::to_string_pretty(&report).map_err(|e| Error::ReportEncode {
        node: report.node.clone(),
        detail: e.to_string(),
    })?;
    if out.len() > crate::configmap::MAX_REPORT_BYTES {
        return Err(Error::ReportTooLarge {
            node: report.node,
            size: out.len(),
            limit: crate::configmap::MAX_REPORT_BYTES,
        });
    }
    Ok(out)
}

/// Parses a report, refusing any version but [`REPORT_VERSION`]. A Job keeps the image it
/// started with, so after an upgrade a report may come from an older probe, and a field
/// whose meaning changed would be misread; a refused report is a probe to re-run.
pub fn decode(data: &[u8]) -> Result<Report, Error> {
    // The version is read first and alone, so a report of another version is refused as
    // such even when its shape no longer parses as this one.
    #[derive(Deserialize)]
    struct Versioned {
        version: Option<serde_json::Value>,
    }
    let head: Versioned = serde_json::from_slice(data).map_err(|e| Error::ReportMalformed {
        detail: e.to_string(),
    })?;
    let found = match head.version {
        Some(serde_json::Value::Number(n)) => n.as_u64().unwrap_or(0),
        _ => 0,
    };
    if found != REPORT_VERSION {
        return Err(Error::ReportVersion {
            found,
            expected: REPORT_VERSION,
        });
    }
    let report: Report = serde_json::from_slice(data).map_err(|e| Error::ReportMalformed {
        detail: e.to_string(),
    })?;
    if report.node.is_empty() {
        return Err(Error::ReportNamesNoNode);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Report {
        Report {
            version: REPORT_VERSION,
            node: "worker-1".into(),
            ..Report::default()
        }
    }

    #[test]
    fn encode_then_decode_is_identity() {
        let r = sample();
        let text = encode(&r).expect("encodes");
        assert_eq!(decode(text.as_bytes()).expect("decodes"), r);
    }

    #[test]
    fn a_report_of_the_previous_version_is_refused_with_a_rerun_hint() {
        let old = r#"{"version": 4, "node": "w", "interfaces": [{"name": "eth0"}]}"#;
        let err = decode(old.as_bytes()).expect_err("refused");
        assert_eq!(
            err,
            Error::ReportVersion {
                found: 4,
                expected: REPORT_VERSION
            }
        );
        assert!(err.to_string().contains("re-run"), "{err}");
    }

    #[test]
    fn a_newer_report_is_refused_too() {
        let newer = format!(r#"{{"version": {}, "node": "w"}}"#, REPORT_VERSION + 1);
        assert!(matches!(
            decode(newer.as_bytes()),
            Err(Error::ReportVersion { .. })
        ));
    }

    #[test]
    fn a_report_without_a_node_is_refused() {
        let text = format!(r#"{{"version": {REPORT_VERSION}, "node": ""}}"#);
        assert_eq!(decode(text.as_bytes()), Err(Error::ReportNamesNoNode));
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        assert!(matches!(
            decode(b"\xff\x00not json"),
            Err(Error::ReportMalformed { .. })
        ));
    }

    #[test]
    fn only_rejected_for_does_not_widen() {
        let mut d = Device {
            rejections: vec![Rejection {
                reason: Reason::Partitioned,
                detail: String::new(),
            }],
            ..Device::default()
        };
        assert!(d.only_rejected_for(&[Reason::Partitioned]));
        d.rejections.push(Rejection {
            reason: Reason::Mounted,
            detail: "/boot".into(),
        });
        assert!(!d.only_rejected_for(&[Reason::Partitioned]));
    }
}

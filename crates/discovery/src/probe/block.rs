//! Block devices, each with every ground it would be refused on.

use super::procs::{self, OpenFiles};
use super::util::{flag, numa, number, pci_of, text};
use super::{ExclusiveCheck, Fs};
use crate::parse::{self, Mount};
use crate::report::{
    Device, DeviceKind, ExclusiveOpen, NUMA_UNKNOWN, Reason, Rejection, Transport,
};

const BLOCK: &str = "/sys/block";
const BY_ID: &str = "/dev/disk/by-id";

struct Context<'a> {
    mounts: Vec<Mount>,
    swaps: Vec<String>,
    /// (link name, target kernel name) of /dev/disk/by-id.
    by_id: Vec<(String, String)>,
    /// Every process's open files; `None` when they could not all be read, so no device
    /// can be shown to be closed.
    open: Option<&'a OpenFiles>,
}

pub fn devices(
    fs: &dyn Fs,
    exclusive: &dyn ExclusiveCheck,
    open: Result<&OpenFiles, &std::io::Error>,
    unreadable: &mut Vec<String>,
) -> Vec<Device> {
    let names = match fs.read_dir(BLOCK) {
        Ok(n) => n,
        Err(e) => {
            unreadable.push(format!("{BLOCK}: {e}"));
            return Vec::new();
        }
    };
    let mounts = match fs.read_string("/proc/self/mountinfo") {
        Ok(t) => parse::mountinfo(&t),
        Err(e) => {
            unreadable.push(format!(
                "/proc/self/mountinfo: {e}, so no device can be shown to be unmounted"
            ));
            Vec::new()
        }
    };
    let mounts_known = fs.exists("/proc/self/mountinfo");
    let swaps = fs
        .read_string("/proc/swaps")
        .map(|t| parse::swaps(&t))
        .unwrap_or_default();
    let by_id = fs
        .read_dir(BY_ID)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|l| {
            let target = fs.read_link(&format!("{BY_ID}/{l}")).ok()?;
            let name = target.rsplit('/').next()?.to_string();
            Some((l, name))
        })
        .collect();
    let open = match open {
        Ok(o) if o.blind.is_empty() => Some(o),
        Ok(o) => {
            unreadable.push(format!(
                "the open files of {} process(es) ({}), so no disk can be shown to be closed",
                o.blind.len(),
                o.blind
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            None
        }
        Err(e) => {
            unreadable.push(format!("/proc: {e}, so no disk can be shown to be closed"));
            None
        }
    };
    let ctx = Context {
        mounts,
        swaps,
        by_id,
        open,
    };
    let mut out = Vec::new();
    for name in names {
        let base = format!("{BLOCK}/{name}");
        let partitions: Vec<String> = fs
            .read_dir(&base)
            .unwrap_or_default()
            .into_iter()
            .filter(|e| fs.exists(&format!("{base}/{e}/partition")))
            .collect();
        let mut parts = Vec::new();
        for p in &partitions {
            parts.push(read_device(
                fs,
                exclusive,
                &ctx,
                p,
                &format!("{base}/{p}"),
                Some(&name),
                &[],
                mounts_known,
                unreadable,
            ));
        }
        let disk = read_device(
            fs,
            exclusive,
            &ctx,
            &name,
            &base,
            None,
            &parts,
            mounts_known,
            unreadable,
        );
        out.push(disk);
        out.extend(parts);
    }
    out
}

/// The processes that have a device open, as a refusal names them: `process 812
/// (qemu-system-x86) as /dev/nvme0n1`. A descriptor is the device's when the machine says
/// it is that device (its major:minor), or, where it cannot tell, when its link names the
/// device's node.
fn openers(fs: &dyn Fs, open: &OpenFiles, path: &str, dev: Option<(u32, u32)>) -> Vec<String> {
    let mut out: Vec<String> = open
        .files
        .iter()
        .filter(|f| match (f.device, dev) {
            (Some(theirs), Some(ours)) => theirs == ours,
            _ => f.target == path,
        })
        .map(|f| {
            format!(
                "process {} ({}) as {}",
                f.pid,
                procs::command(fs, f.pid),
                f.target
            )
        })
        .collect();
    // One process with the device open twice is one holder.
    out.dedup();
    out
}

fn kind_of(name: &str) -> DeviceKind {
    let starts = |p: &str| name.starts_with(p);
    if starts("loop") {
        DeviceKind::Loop
    } else if starts("dm-") {
        DeviceKind::DeviceMapper
    } else if starts("md") {
        DeviceKind::Raid
    } else if starts("ram") || starts("zram") || starts("pmem") {
        DeviceKind::Ram
    } else if starts("sr") {
        DeviceKind::Rom
    } else if starts("nbd") {
        DeviceKind::Nbd
    } else {
        DeviceKind::Disk
    }
}

/// Where an NVMe namespace's controller is: `device` for a plain namespace, or the
/// first controller of its subsystem for a multipath head.
fn nvme_controller(fs: &dyn Fs, base: &str) -> Option<String> {
    if fs.exists(&format!("{base}/device/transport")) {
        return fs.canonical(&format!("{base}/device")).ok();
    }
    let head = fs.canonical(base).ok()?;
    let subsystem = head.rsplit_once('/')?.0.to_string();
    let ctrl = fs
        .read_dir(&subsystem)
        .ok()?
        .into_iter()
        .find(|e| e.starts_with("nvme") && fs.exists(&format!("{subsystem}/{e}/transport")))?;
    fs.canonical(&format!("{subsystem}/{ctrl}")).ok()
}

#[allow(clippy::too_many_arguments)]
fn read_device(
    fs: &dyn Fs,
    exclusive: &dyn ExclusiveCheck,
    ctx: &Context<'_>,
    name: &str,
    base: &str,
    parent: Option<&str>,
    partitions: &[Device],
    mounts_known: bool,
    unreadable: &mut Vec<String>,
) -> Device {
    let kind = if parent.is_some() {
        DeviceKind::Partition
    } else {
        kind_of(name)
    };
    let canonical = fs.canonical(base).unwrap_or_default();
    let disk_base = parent.map_or(base.to_string(), |p| format!("{BLOCK}/{p}"));
    let size_bytes = number(fs, &format!("{base}/size")).map_or_else(
        || {
            unreadable.push(format!("{base}/size"));
            0
        },
        |s| s.saturating_mul(512),
    );
    let mut transport = Transport::Unknown;
    let mut model = String::new();
    let mut serial = String::new();
    let mut vendor = text(fs, &format!("{disk_base}/device/vendor")).unwrap_or_default();
    let mut subsystem_nqn = None;
    let mut pci = pci_of(&canonical);
    let disk_name = parent.unwrap_or(name);
    if disk_name.starts_with("nvme") {
        if let Some(ctrl) = nvme_controller(fs, &disk_base) {
            transport = match text(fs, &format!("{ctrl}/transport")).as_deref() {
                Some("pcie") => Transport::NVMe,
                Some(_) => Transport::NVMeFabric,
                None => Transport::Unknown,
            };
            model = text(fs, &format!("{ctrl}/model")).unwrap_or_default();
            serial = text(fs, &format!("{ctrl}/serial")).unwrap_or_default();
            subsystem_nqn = text(fs, &format!("{ctrl}/subsysnqn")).filter(|s| !s.is_empty());
            pci = pci_of(&ctrl);
            if transport == Transport::NVMeFabric {
                pci = None;
            }
        }
    } else {
        let c = canonical.as_str();
        transport = if c.contains("/devices/virtual/") {
            Transport::Virtual
        } else if c.contains("/session") {
            Transport::Iscsi
        } else if c.contains("/usb") {
            Transport::Usb
        } else if c.contains("/ata") {
            Transport::Sata
        } else if c.contains("/end_device-") || c.contains("/sas_") {
            Transport::Sas
        } else if c.contains("/mmc") {
            Transport::Mmc
        } else if c.contains("/virtio") && !c.contains("/host") {
            Transport::Virtio
        } else if c.contains("/host") && c.contains("/target") {
            Transport::Scsi
        } else {
            Transport::Unknown
        };
        model = text(fs, &format!("{disk_base}/device/model")).unwrap_or_default();
        serial = text(fs, &format!("{disk_base}/serial"))
            .or_else(|| text(fs, &format!("{disk_base}/device/serial")))
            .unwrap_or_default();
    }
    if vendor.is_empty() && transport == Transport::NVMe {
        vendor = String::new();
    }
    let numa_node = pci.as_ref().map_or(NUMA_UNKNOWN, |(_, dir)| numa(fs, dir));
    let dev = fs
        .read_string(&format!("{base}/dev"))
        .ok()
        .and_then(|t| parse::dev_numbers(&t));
    let path = format!("/dev/{name}");
    let mut mounts: Vec<String> = ctx
        .mounts
        .iter()
        .filter(|m| Some((m.major, m.minor)) == dev)
        .map(|m| m.mount_point.clone())
        .collect();
    for p in partitions {
        mounts.extend(p.mounts.iter().map(|m| format!("{m} ({})", p.name)));
    }
    mounts.sort();
    mounts.dedup();
    let holders = fs.read_dir(&format!("{base}/holders")).unwrap_or_default();
    let mut stable_paths: Vec<String> = ctx
        .by_id
        .iter()
        .filter(|(_, target)| target == name)
        .map(|(link, _)| format!("{BY_ID}/{link}"))
        .collect();
    stable_paths.sort_by_key(|p| (!p.contains("/nvme-eui."), p.clone()));
    let mut rejections = Vec::new();
    let mut reject = |reason: Reason, detail: String| rejections.push(Rejection { reason, detail });
    if kind != DeviceKind::Disk {
        reject(
            Reason::NotWholeDisk,
            format!("{name} is a {kind:?}, not a whole disk"),
        );
    }
    if matches!(transport, Transport::Unknown) && kind == DeviceKind::Disk {
        reject(
            Reason::UnknownBus,
            format!("{name} is on a bus the probe does not recognize"),
        );
    }
    if size_bytes == 0 {
        reject(Reason::ZeroSize, format!("{name} has no capacity"));
    }
    if flag(fs, &format!("{base}/ro")) {
        reject(Reason::ReadOnly, format!("{name} is read-only"));
    }
    let removable = flag(fs, &format!("{disk_base}/removable"));
    if removable {
        reject(Reason::Removable, format!("{name} is removable media"));
    }
    // Only whole disks and partitions with capacity are read and opened: a loop device
    // with nothing attached or an empty drive answers nothing worth knowing.
    let inspect = matches!(kind, DeviceKind::Disk | DeviceKind::Partition) && size_bytes > 0;
    let mut content = parse::Content::default();
    let mut exclusive_open = ExclusiveOpen::NotTried;
    if inspect {
        match fs.read_head(&path, parse::CONTENT_BYTES) {
            Ok(head) => content = parse::content(&head),
            // The OS error is left out: it differs between a machine and its fixture.
            Err(_) => reject(
                Reason::Unreadable,
                format!("{path} could not be read, so its content is unknown"),
            ),
        }
        if kind == DeviceKind::Disk {
            exclusive_open = match fs.host_path(&path) {
                Some(p) => exclusive.check(&p, name),
                None => ExclusiveOpen::Failed,
            };
        }
    }
    if !partitions.is_empty() || content.partition_table.is_some() {
        let table = content
            .partition_table
            .as_deref()
            .unwrap_or("a partition table");
        let names: Vec<&str> = partitions.iter().map(|p| p.name.as_str()).collect();
        let detail = if names.is_empty() {
            format!("{name} carries {table} with no partition the kernel shows")
        } else {
            format!("{name} carries {table} with {}", names.join(", "))
        };
        reject(Reason::Partitioned, detail);
    }
    if !mounts.is_empty() {
        reject(Reason::Mounted, format!("mounted at {}", mounts.join(", ")));
    } else if !mounts_known && inspect {
        reject(
            Reason::Unreadable,
            "the mount table is unreadable, so it is not known to be unmounted".into(),
        );
    }
    let mut swap_use: Vec<String> = ctx
        .swaps
        .iter()
        .filter(|s| **s == path || partitions.iter().any(|p| **s == p.path))
        .cloned()
        .collect();
    swap_use.sort();
    if !swap_use.is_empty() {
        reject(
            Reason::Swap,
            format!("in use as swap: {}", swap_use.join(", ")),
        );
    }
    let mut held: Vec<String> = holders.clone();
    for p in partitions {
        held.extend(p.holders.iter().map(|h| format!("{h} (on {})", p.name)));
    }
    if !held.is_empty() {
        reject(Reason::Held, format!("held by {}", held.join(", ")));
    }
    // A plain open claims nothing the kernel shows in sysfs, and the exclusive open does
    // not see it either: only the process table names it.
    match ctx.open {
        Some(open) => {
            let mut open_by = openers(fs, open, &path, dev);
            for p in partitions {
                let p_dev = fs
                    .read_string(&format!("{base}/{}/dev", p.name))
                    .ok()
                    .and_then(|t| parse::dev_numbers(&t));
                open_by.extend(
                    openers(fs, open, &p.path, p_dev)
                        .into_iter()
                        .map(|o| format!("{o} (on {})", p.name)),
                );
            }
            if !open_by.is_empty() {
                reject(Reason::Held, format!("open by {}", open_by.join(", ")));
            }
        }
        None if inspect => reject(
            Reason::Unreadable,
            format!(
                "not every process's open files could be read, so whether one holds {path} open is unknown"
            ),
        ),
        None => {}
    }
    if !content.signatures.is_empty() {
        reject(
            Reason::Signature,
            format!("carries a {} signature", content.signatures.join(", ")),
        );
    }
    match exclusive_open {
        ExclusiveOpen::Busy => reject(
            Reason::Busy,
            format!("the kernel refused an exclusive open of {path}: something has it open"),
        ),
        ExclusiveOpen::Failed => reject(
            Reason::Unreadable,
            format!("{path} could not be opened, so whether it is in use is unknown"),
        ),
        ExclusiveOpen::Succeeded | ExclusiveOpen::NotTried => {}
    }
    Device {
        name: name.to_string(),
        path,
        stable_paths,
        pci_address: pci.map(|(a, _)| a).unwrap_or_default(),
        size_bytes,
        kind,
        transport,
        vendor,
        model,
        serial,
        rotational: flag(fs, &format!("{disk_base}/queue/rotational")),
        removable,
        numa_node,
        parent: parent.unwrap_or_default().to_string(),
        holders,
        mounts,
        partition_table: content.partition_table,
        signatures: content.signatures,
        exclusive_open,
        subsystem_nqn,
        available: rejections.is_empty(),
        rejections,
    }
}

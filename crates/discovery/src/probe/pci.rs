//! NVMe controllers on the PCI bus, their driver, and who holds the userspace-bound ones.

use super::Fs;
use super::procs::{self, OpenFiles};
use super::util::{link_name, numa, text};
use crate::report::{Controller, ControllerDriver, Holder, InUse};

const PCI: &str = "/sys/bus/pci/devices";
// PCI class of an NVMe controller: mass storage, non-volatile memory, NVMe.
const NVME_CLASS: &str = "0x010802";

pub fn controllers(
    fs: &dyn Fs,
    open: Result<&OpenFiles, &std::io::Error>,
    unreadable: &mut Vec<String>,
) -> Vec<Controller> {
    let addresses = match fs.read_dir(PCI) {
        Ok(a) => a,
        Err(e) => {
            unreadable.push(format!("{PCI}: {e}"));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for address in addresses {
        let dir = format!("{PCI}/{address}");
        if text(fs, &format!("{dir}/class")).as_deref() != Some(NVME_CLASS) {
            continue;
        }
        let driver = ControllerDriver::from_name(
            &link_name(fs, &format!("{dir}/driver")).unwrap_or_default(),
        );
        out.push(Controller {
            vendor: text(fs, &format!("{dir}/vendor")).unwrap_or_default(),
            product: text(fs, &format!("{dir}/device")).unwrap_or_default(),
            numa_node: numa(fs, &dir),
            address,
            driver,
            in_use: InUse::NotApplicable,
            holders: Vec::new(),
        });
    }
    if out.iter().any(|c| c.driver.is_userspace()) {
        measure_use(fs, &mut out, open, unreadable);
    }
    out
}

/// The device nodes through which a process can hold a controller.
fn handles(fs: &dyn Fs, c: &Controller) -> Vec<String> {
    let dir = format!("{PCI}/{}", c.address);
    let mut out = Vec::new();
    if let Some(group) = link_name(fs, &format!("{dir}/iommu_group")) {
        out.push(format!("/dev/vfio/{group}"));
        out.push(format!("/dev/vfio/noiommu-{group}"));
    }
    for uio in fs.read_dir(&format!("{dir}/uio")).unwrap_or_default() {
        out.push(format!("/dev/{uio}"));
    }
    out
}

/// Fills in `in_use` for every userspace-bound controller from the open files of every
/// process. A process whose files cannot be listed makes the answer unknown, never free:
/// reading unknown as free is how a running guest's disk would be reclaimed.
fn measure_use(
    fs: &dyn Fs,
    controllers: &mut [Controller],
    open: Result<&OpenFiles, &std::io::Error>,
    unreadable: &mut Vec<String>,
) {
    let open = match open {
        Ok(o) => o,
        Err(e) => {
            unreadable.push(format!(
                "/proc: {e}, so whether the userspace-bound NVMe controllers are in use is unknown"
            ));
            for c in controllers.iter_mut().filter(|c| c.driver.is_userspace()) {
                c.in_use = InUse::Unreadable;
            }
            return;
        }
    };
    let wanted: Vec<(usize, Vec<String>)> = controllers
        .iter()
        .enumerate()
        .filter(|(_, c)| c.driver.is_userspace())
        .map(|(i, c)| (i, handles(fs, c)))
        .collect();
    let mut held: Vec<Vec<Holder>> = vec![Vec::new(); controllers.len()];
    for f in &open.files {
        for (i, h) in &wanted {
            if h.contains(&f.target) {
                held[*i].push(Holder {
                    pid: f.pid,
                    command: procs::command(fs, f.pid),
                    via: f.target.clone(),
                });
            }
        }
    }
    let blind = &open.blind;
    if !blind.is_empty() {
        unreadable.push(format!(
            "the open files of {} process(es) ({}), so an idle-looking userspace-bound NVMe controller may still be in use",
            blind.len(),
            blind.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    for (i, _) in &wanted {
        let c = &mut controllers[*i];
        c.holders = std::mem::take(&mut held[*i]);
        c.in_use = if !c.holders.is_empty() {
            InUse::Held
        } else if blind.is_empty() {
            InUse::Idle
        } else {
            InUse::Unreadable
        };
    }
}

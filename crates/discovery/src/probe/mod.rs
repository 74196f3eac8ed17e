//! The host probe: reads `/sys`, `/proc` and `/dev` under a root and reports what it finds.
//!
//! It decides nothing. Every block device is reported with every ground it would be
//! refused on, and what could not be read is listed in `unreadable` rather than guessed.
//! The only check with a side effect, the exclusive open, is injectable so a fixture can
//! state its outcome.

mod block;
mod exclusive;
mod fs;
mod host;
mod net;
mod pci;
mod procs;

use std::path::Path;

pub use exclusive::{EXCLUSIVE_FILE, ExclusiveCheck, OsExclusiveCheck, RecordedExclusiveCheck};
pub use fs::{Fs, RootFs};

use crate::report::{REPORT_VERSION, Report};

/// How a probe runs. The defaults suit a probe Job: the node name from the kernel's
/// hostname, the exclusive open either recorded under the root or tried for real.
#[derive(Default)]
pub struct ProbeOptions<'a> {
    /// The Kubernetes node name; without it, the kernel hostname under the root.
    pub node: Option<String>,
    /// The exclusive-open check; without it, [`default_exclusive_check`].
    pub exclusive: Option<&'a dyn ExclusiveCheck>,
    /// The time to stamp; without it, now.
    pub now: Option<jiff::Timestamp>,
}

/// Probes the machine under `root` (`/` on a worker, a fixture folder in tests).
pub fn probe(root: &Path) -> Report {
    probe_with(&RootFs::new(root), &ProbeOptions::default())
}

/// The exclusive-open check a root calls for: the outcomes recorded in its
/// [`EXCLUSIVE_FILE`] when it has one (a fixture), otherwise a real open.
pub fn default_exclusive_check(fs: &dyn Fs) -> Box<dyn ExclusiveCheck> {
    match fs.read_string(EXCLUSIVE_FILE) {
        Ok(text) => Box::new(RecordedExclusiveCheck::parse(&text)),
        Err(_) => Box::new(OsExclusiveCheck),
    }
}

/// Probes through an [`Fs`], which is how the capture tool records what was read.
pub fn probe_with(fs: &dyn Fs, options: &ProbeOptions<'_>) -> Report {
    let mut unreadable = Vec::new();
    let default_check;
    let exclusive: &dyn ExclusiveCheck = match options.exclusive {
        Some(c) => c,
        None => {
            default_check = default_exclusive_check(fs);
            default_check.as_ref()
        }
    };
    let node = options.node.clone().unwrap_or_else(|| {
        fs.read_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    });
    if node.is_empty() {
        unreadable.push("the node name: none was given and the hostname is unreadable".into());
    }
    let cpu = host::cpu(fs, &mut unreadable);
    let (memory, huge_pages) = host::memory(fs, &mut unreadable);
    let interfaces = net::interfaces(fs, &mut unreadable);
    let open = procs::read(fs);
    let devices = block::devices(fs, exclusive, open.as_ref(), &mut unreadable);
    let nvme_controllers = pci::controllers(fs, open.as_ref(), &mut unreadable);
    Report {
        version: REPORT_VERSION,
        node,
        probed_at: Some(options.now.unwrap_or_else(jiff::Timestamp::now)),
        cpu,
        memory,
        huge_pages,
        interfaces,
        devices,
        nvme_controllers,
        unreadable,
    }
}

/// Helpers shared by the readers.
pub(crate) mod util {
    use super::Fs;
    use crate::parse;
    use crate::report::NUMA_UNKNOWN;

    pub fn text(fs: &dyn Fs, path: &str) -> Option<String> {
        fs.read_string(path).ok().map(|s| s.trim().to_string())
    }

    pub fn number(fs: &dyn Fs, path: &str) -> Option<u64> {
        parse::decimal(&fs.read_string(path).ok()?).ok()
    }

    pub fn flag(fs: &dyn Fs, path: &str) -> bool {
        number(fs, path) == Some(1)
    }

    pub fn numa(fs: &dyn Fs, dir: &str) -> i32 {
        fs.read_string(&format!("{dir}/numa_node"))
            .ok()
            .and_then(|s| parse::signed(&s).ok())
            .and_then(|n| i32::try_from(n).ok())
            .filter(|n| *n >= 0)
            .unwrap_or(NUMA_UNKNOWN)
    }

    pub fn link_name(fs: &dyn Fs, path: &str) -> Option<String> {
        let target = fs.read_link(path).ok()?;
        target.rsplit('/').next().map(str::to_string)
    }

    /// The PCI device closest to `canonical` (the last PCI component of its path).
    pub fn pci_of(canonical: &str) -> Option<(String, String)> {
        let mut dir = String::new();
        let mut found = None;
        for comp in canonical.split('/').filter(|c| !c.is_empty()) {
            dir.push('/');
            dir.push_str(comp);
            if parse::is_pci_address(comp) {
                found = Some((comp.to_string(), dir.clone()));
            }
        }
        found
    }
}

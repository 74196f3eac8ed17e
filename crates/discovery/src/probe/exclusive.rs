//! The exclusive open: the kernel's own answer to whether anything has claimed a disk.

use std::collections::BTreeMap;
use std::path::Path;

use crate::report::ExclusiveOpen;

/// The file under a fixture's root that records each device's exclusive-open outcome, one
/// `name outcome` line each (`vda Busy`).
pub const EXCLUSIVE_FILE: &str = "/exclusive-open.txt";

/// Tries to open a block device exclusively.
pub trait ExclusiveCheck {
    /// `path` is the device node within the machine (`/dev/nvme0n1`), `name` its kernel
    /// name.
    fn check(&self, root_path: &Path, name: &str) -> ExclusiveOpen;
}

/// Opens the device read-only with O_EXCL, which for a block device fails with EBUSY when
/// it is mounted, held, or has a partition in use. Closed at once; nothing is written.
pub struct OsExclusiveCheck;

impl ExclusiveCheck for OsExclusiveCheck {
    fn check(&self, root_path: &Path, _name: &str) -> ExclusiveOpen {
        use std::os::unix::fs::OpenOptionsExt;
        match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL | libc::O_CLOEXEC)
            .open(root_path)
        {
            Ok(_) => ExclusiveOpen::Succeeded,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => ExclusiveOpen::Busy,
            Err(_) => ExclusiveOpen::Failed,
        }
    }
}

/// Outcomes stated in advance, as a fixture records them. A device it does not name was
/// not tried.
#[derive(Debug, Default, Clone)]
pub struct RecordedExclusiveCheck {
    outcomes: BTreeMap<String, ExclusiveOpen>,
}

impl RecordedExclusiveCheck {
    pub fn parse(text: &str) -> Self {
        let outcomes = text
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let name = w.next()?;
                let outcome = match w.next()? {
                    "Succeeded" => ExclusiveOpen::Succeeded,
                    "Busy" => ExclusiveOpen::Busy,
                    "Failed" => ExclusiveOpen::Failed,
                    _ => return None,
                };
                Some((name.to_string(), outcome))
            })
            .collect();
        RecordedExclusiveCheck { outcomes }
    }

    pub fn render(outcomes: &[(String, ExclusiveOpen)]) -> String {
        let mut out = String::new();
        for (name, o) in outcomes {
            let word = match o {
                ExclusiveOpen::Succeeded => "Succeeded",
                ExclusiveOpen::Busy => "Busy",
                ExclusiveOpen::Failed => "Failed",
                ExclusiveOpen::NotTried => continue,
            };
            out.push_str(&format!("{name} {word}\n"));
        }
        out
    }
}

impl ExclusiveCheck for RecordedExclusiveCheck {
    fn check(&self, _root_path: &Path, name: &str) -> ExclusiveOpen {
        self.outcomes
            .get(name)
            .copied()
            .unwrap_or(ExclusiveOpen::NotTried)
    }
}

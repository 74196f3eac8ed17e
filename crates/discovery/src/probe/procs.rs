//! Every process's open files, read once per probe from `/proc/<pid>/fd`: a process can
//! hold a disk or a userspace-bound controller open without the kernel marking it
//! claimed anywhere else.

use std::io;

use super::Fs;
use super::util::text;

/// One open file of one process.
pub struct OpenFile {
    pub pid: u32,
    /// Where the descriptor's link points: the path the file was opened by
    /// (`/dev/nvme0n1`, `/dev/vfio/12`).
    pub target: String,
    /// The block device the descriptor is, when the machine can tell (a live `/proc`);
    /// a captured tree keeps only the link.
    pub device: Option<(u32, u32)>,
}

pub struct OpenFiles {
    pub files: Vec<OpenFile>,
    /// The processes whose open files could not be listed.
    pub blind: Vec<String>,
}

/// Reads the open files of every process; an error when `/proc` itself cannot be listed.
pub fn read(fs: &dyn Fs) -> io::Result<OpenFiles> {
    let pids: Vec<String> = fs
        .read_dir("/proc")?
        .into_iter()
        .filter(|e| !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit()))
        .collect();
    let mut out = OpenFiles {
        files: Vec::new(),
        blind: Vec::new(),
    };
    for pid in pids {
        let fd_dir = format!("/proc/{pid}/fd");
        let fds = match fs.read_dir(&fd_dir) {
            Ok(f) => f,
            // The process ended between the listing and now.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(_) => {
                out.blind.push(pid);
                continue;
            }
        };
        let Ok(number) = pid.parse::<u32>() else {
            continue;
        };
        for fd in fds {
            let link = format!("{fd_dir}/{fd}");
            let Ok(target) = fs.read_link(&link) else {
                continue;
            };
            // Sockets, pipes and anonymous inodes (`socket:[812]`) are no device; a node
            // may be anywhere, not only under /dev.
            let device = if target.starts_with('/') {
                fs.block_device_number(&link)
            } else {
                None
            };
            out.files.push(OpenFile {
                pid: number,
                target,
                device,
            });
        }
    }
    Ok(out)
}

/// The command name of a process, to name it as a holder.
pub fn command(fs: &dyn Fs, pid: u32) -> String {
    text(fs, &format!("/proc/{pid}/comm")).unwrap_or_default()
}

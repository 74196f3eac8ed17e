//! Captures a fixture: probes this machine, then copies exactly the files the probe read
//! into a folder that `probe()` reads back to the same report.
//!
//! `capture <out-dir> [node-name]`. Writes `<out-dir>/root/` (the files, links preserved),
//! `<out-dir>/root/exclusive-open.txt` (the exclusive-open outcomes, measured here) and
//! `<out-dir>/live-report.json` (the report the live machine gave).

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use simplyblock_discovery::probe::{
    EXCLUSIVE_FILE, ProbeOptions, RecordedExclusiveCheck, RootFs, probe_with,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = PathBuf::from(args.next().ok_or("usage: capture <out-dir> [node-name]")?);
    let node = args.next();
    let fs_ = RootFs::recording(Path::new("/"));
    let report = probe_with(
        &fs_,
        &ProbeOptions {
            node,
            ..ProbeOptions::default()
        },
    );
    let root = out.join("root");
    fs::create_dir_all(&root)?;
    for path in fs_.touched() {
        copy_path(&root, &path, fs_.recorded(&path)).map_err(|e| format!("copying {path}: {e}"))?;
    }
    let outcomes: Vec<_> = report
        .devices
        .iter()
        .map(|d| (d.name.clone(), d.exclusive_open))
        .collect();
    fs::write(
        root.join(EXCLUSIVE_FILE.trim_start_matches('/')),
        RecordedExclusiveCheck::render(&outcomes),
    )?;
    fs::write(
        out.join("live-report.json"),
        simplyblock_discovery::encode(&report)?,
    )?;
    eprintln!(
        "captured {} device(s), {} interface(s) into {}",
        report.devices.len(),
        report.interfaces.len(),
        out.display()
    );
    Ok(())
}

/// Copies one machine path into `root`, recreating every link along the way with its own
/// (relative) target, so the copy resolves the same way the machine did.
fn copy_path(root: &Path, path: &str, seen: Option<Vec<u8>>) -> std::io::Result<()> {
    let mut cur = PathBuf::from("/");
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let mut i = 0;
    let mut pending: Vec<String> = comps.iter().map(|s| s.to_string()).collect();
    let mut guard = 0;
    while i < pending.len() {
        guard += 1;
        if guard > 4096 {
            break;
        }
        let next = cur.join(&pending[i]);
        let meta = match fs::symlink_metadata(&next) {
            Ok(m) => m,
            Err(_) => return Ok(()),
        };
        let dest = root.join(next.strip_prefix("/").unwrap_or(&next));
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&next)?;
            if let Some(parent) = dest.parent() {
                fs::create_dir_all(parent)?;
            }
            if fs::symlink_metadata(&dest).is_err() {
                std::os::unix::fs::symlink(&target, &dest)?;
            }
            // A /proc fd link names a device node or a socket: keep the link, follow
            // nothing.
            if target.is_absolute() && next.starts_with("/proc") {
                return Ok(());
            }
            let resolved = if target.is_absolute() {
                target
            } else {
                cur.join(&target)
            };
            let rest: Vec<String> = pending[i + 1..].to_vec();
            let rcomps: Vec<String> = resolved
                .components()
                .filter_map(|c| match c {
                    std::path::Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                    std::path::Component::ParentDir => Some("..".into()),
                    _ => None,
                })
                .collect();
            pending = normalize(rcomps);
            i = 0;
            cur = PathBuf::from("/");
            pending.extend(rest);
            continue;
        }
        if i + 1 < pending.len() && !meta.is_dir() {
            // The probe asked for something under a file; the machine has no such path.
            return Ok(());
        }
        if meta.is_dir() {
            fs::create_dir_all(&dest)?;
        } else if meta.is_file() || meta.file_type().is_block_device_like() {
            if let Some(parent) = dest.parent() {
                fs::create_dir_all(parent)?;
            }
            if let Some(bytes) = &seen {
                let data = if next.ends_with("mountinfo") {
                    block_mounts_only(bytes)
                } else {
                    bytes.clone()
                };
                fs::write(&dest, data)?;
                return Ok(());
            }
            let mut data = Vec::new();
            let limit = if next.starts_with("/dev") {
                68 * 1024
            } else {
                1 << 22
            };
            if let Ok(f) = fs::File::open(&next) {
                let _ = f.take(limit).read_to_end(&mut data);
                if next.ends_with("mountinfo") {
                    data = block_mounts_only(&data);
                }
                fs::write(&dest, &data)?;
            }
        }
        cur = next;
        i += 1;
    }
    Ok(())
}

/// The probe matches mounts to block devices by device number, so a mount of no block
/// device (major 0: proc, tmpfs, cgroups, overlays) tells it nothing and is left out.
fn block_mounts_only(data: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(data);
    let mut out = String::new();
    for line in text.lines() {
        let major = line
            .split_whitespace()
            .nth(2)
            .and_then(|d| d.split(':').next());
        if major.is_some_and(|m| m != "0") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.into_bytes()
}

fn normalize(comps: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in comps {
        if c == ".." {
            out.pop();
        } else {
            out.push(c);
        }
    }
    out
}

trait BlockLike {
    fn is_block_device_like(&self) -> bool;
}

impl BlockLike for fs::FileType {
    fn is_block_device_like(&self) -> bool {
        use std::os::unix::fs::FileTypeExt;
        self.is_block_device() || self.is_char_device()
    }
}

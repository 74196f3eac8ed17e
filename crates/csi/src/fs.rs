//! The filesystem layer: probe what a device carries, format only a proven-blank device,
//! mount, bind-mount, grow, and read the mount table. Parsing and command building are
//! pure; the few functions that touch the host say so.
//!
//! Format safety rule: mkfs runs only on a device whose probe found no signature and whose
//! first and last MiB read back as zeros. A failed or short read, or a device that
//! reports no size (not ready yet, or being torn down), is `Unreadable`, never `Blank`.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{CsiError, Result};
use crate::exec::{self, Cmd};
use crate::mkfs_options::SUPPORTED_FS;
use crate::params::FormatParams;

/// The filesystem formatted onto a blank device when the request names none.
pub const DEFAULT_FS: &str = "ext4";

const PROBE_BYTES: u64 = 1 << 20;
const CMD_TIMEOUT: Duration = Duration::from_secs(120);

/// What a device carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// No signature and zeros where signatures live: safe to format.
    Blank,
    /// A filesystem of this type.
    Filesystem(String),
    /// Something that is not a filesystem we mount (LUKS, LVM2, swap, a partition table).
    Foreign(String),
    /// Data without a signature blkid knows: never formatted.
    Unknown,
    /// The device did not answer a read.
    Unreadable(String),
}

/// Classify `blkid -p -o export` output (exit code and text) and whether the probed
/// regions were all zeros.
pub fn classify(blkid_code: Option<i32>, blkid_out: &str, zeros: bool) -> Probe {
    let mut ty = None;
    let mut usage = None;
    let mut pttype = None;
    for line in blkid_out.lines() {
        match line.split_once('=') {
            Some(("TYPE", v)) => ty = Some(v.trim().to_string()),
            Some(("USAGE", v)) => usage = Some(v.trim().to_string()),
            Some(("PTTYPE", v)) => pttype = Some(v.trim().to_string()),
            _ => {}
        }
    }
    match blkid_code {
        // 2: no signature found.
        Some(2) => {
            if zeros {
                Probe::Blank
            } else {
                Probe::Unknown
            }
        }
        Some(0) => match (ty, usage, pttype) {
            (Some(t), Some(u), _) if u == "filesystem" => Probe::Filesystem(t),
            (Some(t), None, _) if SUPPORTED_FS.contains(&t.as_str()) => Probe::Filesystem(t),
            (Some(t), _, _) => Probe::Foreign(t),
            (None, _, Some(p)) => Probe::Foreign(format!("{p} partition table")),
            (None, _, None) => Probe::Unknown,
        },
        // 8: ambivalent (several signatures), anything else: an error. Neither is blank.
        Some(8) => Probe::Foreign("several conflicting signatures".into()),
        code => Probe::Unreadable(format!(
            "blkid exited {}",
            code.map_or("by signal".into(), |c| c.to_string())
        )),
    }
}

/// Whether `dev`'s first and last MiB read back as zeros (host I/O). A device of size 0
/// is an error: it has no regions to read, and "nothing read" is no proof of blank.
fn regions_are_zero(dev: &Path) -> std::io::Result<bool> {
    let mut f = std::fs::File::open(dev)?;
    let size = f.seek(SeekFrom::End(0))?;
    if size == 0 {
        return Err(std::io::Error::other(
            "the device reports a size of 0 (not ready yet, or being detached)",
        ));
    }
    let len = PROBE_BYTES.min(size) as usize;
    let mut buf = vec![0u8; len];
    let zeros = vec![0u8; len];
    for offset in [0, size.saturating_sub(len as u64)] {
        f.seek(SeekFrom::Start(offset))?;
        f.read_exact(&mut buf)?;
        if buf != zeros {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Probe a device (host I/O).
pub async fn probe(dev: &Path) -> Probe {
    let d = dev.to_path_buf();
    let zeros = match tokio::task::spawn_blocking(move || regions_are_zero(&d)).await {
        Ok(Ok(z)) => z,
        Ok(Err(e)) => return Probe::Unreadable(format!("reading {}: {e}", dev.display())),
        Err(e) => return Probe::Unreadable(format!("probe task: {e}")),
    };
    let cmd = blkid_cmd(dev);
    match exec::run_status(&cmd, CMD_TIMEOUT).await {
        Ok(out) => classify(out.code, &out.stdout, zeros),
        Err(e) => Probe::Unreadable(e.to_string()),
    }
}

pub fn blkid_cmd(dev: &Path) -> Cmd {
    // -p: low-level probe of the device itself, bypassing blkid's cache.
    Cmd::new("blkid", &["-p", "-o", "export"]).arg(dev.display().to_string())
}

/// mkfs for a proven-blank device. The default options keep the filesystem mountable by
/// older kernels: ext4 without `orphan_file`, xfs without large extent counters. The
/// class's `mkfs_options` (only those [`crate::mkfs_options`] accepts) replace those
/// defaults rather than adding to them; the quiet
/// flag and ext4's `-F` (the device is whole, with no partition table, which mke2fs
/// would otherwise ask about) stay. xfs gets the class's stripe geometry for its data and
/// log sections.
pub fn mkfs_cmd(fs: &str, dev: &Path, p: &FormatParams) -> Result<Cmd> {
    let d = dev.display().to_string();
    let (mut c, defaults): (Cmd, &[&str]) = match fs {
        "ext4" => (
            Cmd::new("mkfs.ext4", &["-F", "-q"]),
            &["-O", "^orphan_file"],
        ),
        // No -f: mkfs.xfs itself refuses a device with a signature, a second guard.
        "xfs" => (Cmd::new("mkfs.xfs", &["-q"]), &["-i", "nrext64=0"]),
        other => return Err(unsupported(other)),
    };
    p.check_for(fs)?;
    match &p.mkfs_options {
        Some(o) => {
            for w in o {
                c = c.arg(w.clone());
            }
        }
        None => {
            for w in defaults {
                c = c.arg(*w);
            }
        }
    }
    if fs == "xfs"
        && let Some((su, sw)) = &p.xfs_stripe
    {
        c = c
            .arg("-d")
            .arg(format!("su={su},sw={sw}"))
            .arg("-l")
            .arg(format!("su={su}"));
    }
    Ok(c.arg(d))
}

/// `tune2fs -m`: the class's reserved-block percentage, applied to ext4 right after mkfs.
pub fn tune2fs_cmd(fs: &str, dev: &Path, p: &FormatParams) -> Option<Cmd> {
    let pct = p.reserved_blocks.as_ref().filter(|_| fs == "ext4")?;
    Some(Cmd::new("tune2fs", &["-m", pct]).arg(dev.display().to_string()))
}

fn unsupported(fs: &str) -> CsiError {
    CsiError::InvalidArgument(format!(
        "fsType {fs:?} is not supported; use one of {}",
        SUPPORTED_FS.join(", ")
    ))
}

/// The filesystem a blank volume is formatted with for a requested fsType.
pub fn format_as(requested: &str) -> &str {
    if requested.is_empty() {
        DEFAULT_FS
    } else {
        requested
    }
}

/// Check a requested fsType: empty is allowed (mount what is there, else ext4).
pub fn check_fs_type(fs: &str) -> Result<()> {
    if fs.is_empty() || SUPPORTED_FS.contains(&fs) {
        Ok(())
    } else {
        Err(unsupported(fs))
    }
}

/// Mount options for a staged filesystem: the capability's flags, `ro` for reader-only
/// access, `nouuid` for xfs so a volume and its clone can be mounted side by side.
pub fn mount_options(fs: &str, flags: &[String], read_only: bool) -> Vec<String> {
    let mut opts: Vec<String> = flags.iter().filter(|f| !f.is_empty()).cloned().collect();
    if read_only && !opts.iter().any(|o| o == "ro") {
        opts.push("ro".into());
    }
    if fs == "xfs" && !opts.iter().any(|o| o == "nouuid") {
        opts.push("nouuid".into());
    }
    opts
}

pub fn mount_cmd(dev: &Path, target: &Path, fs: &str, options: &[String]) -> Cmd {
    let mut c = Cmd::new("mount", &["-t", fs]);
    if !options.is_empty() {
        c = c.arg("-o").arg(options.join(","));
    }
    c.arg(dev.display().to_string())
        .arg(target.display().to_string())
}

/// A bind mount; with `read_only` mount(8) remounts the bind read-only in the same call.
pub fn bind_cmd(source: &Path, target: &Path, read_only: bool, flags: &[String]) -> Cmd {
    let mut opts: Vec<String> = vec!["bind".into()];
    opts.extend(flags.iter().filter(|f| !f.is_empty()).cloned());
    if read_only {
        opts.push("ro".into());
    }
    Cmd::new("mount", &["-o", &opts.join(",")])
        .arg(source.display().to_string())
        .arg(target.display().to_string())
}

pub fn umount_cmd(target: &Path) -> Cmd {
    Cmd::new("umount", &[]).arg(target.display().to_string())
}

/// A lazy unmount: detaches a dead mount at once, where a plain unmount can hang or fail
/// on a filesystem whose device is gone.
pub fn lazy_umount_cmd(target: &Path) -> Cmd {
    Cmd::new("umount", &["-l"]).arg(target.display().to_string())
}

/// Whether the mount at `path` is dead (host I/O): its root answers EIO, ENOTCONN or
/// ESTALE (a shut-down filesystem, a device that went away after every path was lost), or
/// the block device it was mounted from no longer exists. statvfs alone does not tell: a
/// shut-down xfs still answers it, and ext4 keeps answering from cache after its device
/// is gone.
pub fn is_dead(path: &Path) -> bool {
    use rustix::io::Errno;
    let dead = |e: &Errno| matches!(*e, Errno::IO | Errno::NOTCONN | Errno::STALE);
    match rustix::fs::stat(path) {
        Err(e) => dead(&e),
        Ok(st) => {
            let (major, minor) = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
            if major != 0 && !Path::new(&format!("/sys/dev/block/{major}:{minor}")).exists() {
                return true;
            }
            matches!(rustix::fs::statvfs(path), Err(e) if dead(&e))
        }
    }
}

/// Grow a mounted filesystem to its device.
pub fn grow_cmd(fs: &str, dev: &Path, mount_point: &Path) -> Result<Cmd> {
    match fs {
        "ext4" => Ok(Cmd::new("resize2fs", &[]).arg(dev.display().to_string())),
        "xfs" => Ok(Cmd::new("xfs_growfs", &[]).arg(mount_point.display().to_string())),
        other => Err(unsupported(other)),
    }
}

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// The filesystem root of the mount (`/` for a whole device; a path for binds of a dir).
    pub root: String,
    pub mount_point: PathBuf,
    pub options: Vec<String>,
    pub fs_type: String,
    pub source: String,
}

impl MountEntry {
    pub fn read_only(&self) -> bool {
        self.options.iter().any(|o| o == "ro")
    }
}

/// Undo mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        // Only \000 to \377 name a byte; the kernel escapes nothing above, and \4xx read
        // as a byte overflowed it, so such text stays as written.
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && (b'0'..=b'3').contains(&b[i + 1])
            && b[i + 2..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let post: Vec<&str> = post.split(' ').collect();
            if pre.len() < 6 || post.len() < 2 {
                return None;
            }
            Some(MountEntry {
                root: unescape(pre[3]),
                mount_point: PathBuf::from(unescape(pre[4])),
                options: pre[5].split(',').map(str::to_string).collect(),
                fs_type: post[0].to_string(),
                source: unescape(post[1]),
            })
        })
        .collect()
}

/// The mount table (host I/O).
pub fn mounts() -> Result<Vec<MountEntry>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| CsiError::io("reading /proc/self/mountinfo", e))?;
    Ok(parse_mountinfo(&text))
}

/// The topmost mount at exactly `path`, if any.
pub fn mount_at(entries: &[MountEntry], path: &Path) -> Option<MountEntry> {
    entries
        .iter()
        .rev()
        .find(|m| m.mount_point == path)
        .cloned()
}

/// Run a command built here (host I/O).
pub async fn run(cmd: &Cmd) -> Result<()> {
    exec::run(cmd, CMD_TIMEOUT).await.map(|_| ())
}

/// Unmount every mount stacked at `path` (repeated publish after a crash can stack them).
/// A dead mount is unmounted lazily.
pub async fn unmount_all(path: &Path) -> Result<()> {
    for _ in 0..8 {
        if mount_at(&mounts()?, path).is_none() {
            return Ok(());
        }
        if is_dead(path) {
            tracing::warn!(path = %path.display(), "the mount is dead; unmounting it lazily");
            run(&lazy_umount_cmd(path)).await?;
            continue;
        }
        if let Err(e) = run(&umount_cmd(path)).await {
            if !is_dead(path) {
                return Err(e);
            }
            run(&lazy_umount_cmd(path)).await?;
        }
    }
    Err(CsiError::Internal(format!(
        "{} is still mounted after 8 unmounts",
        path.display()
    )))
}

/// Space and inode figures of a mounted path (host I/O).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub total_bytes: u64,
    pub available_bytes: u64,
    pub used_bytes: u64,
    pub total_inodes: u64,
    pub free_inodes: u64,
}

pub fn usage(path: &Path) -> Result<Usage> {
    let s = rustix::fs::statvfs(path)
        .map_err(|e| CsiError::io(format!("statvfs {}", path.display()), e.into()))?;
    let bs = s.f_frsize;
    Ok(Usage {
        total_bytes: s.f_blocks * bs,
        available_bytes: s.f_bavail * bs,
        used_bytes: (s.f_blocks - s.f_bfree) * bs,
        total_inodes: s.f_files,
        free_inodes: s.f_ffree,
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_octal_escape_above_a_byte_stays_as_written() {
        // Regression: \4xx to \7xx overflowed a u8 (a panic in debug builds).
        assert_eq!(unescape("/mnt/a\\400b"), "/mnt/a\\400b");
        assert_eq!(unescape("/mnt/a\\777"), "/mnt/a\\777");
        assert_eq!(unescape("/mnt/with\\040space"), "/mnt/with space");
        assert_eq!(unescape("/mnt/\\134x"), "/mnt/\\x");
    }

    use super::*;

    #[test]
    fn a_device_of_size_zero_is_never_blank() {
        let dir = tempfile::tempdir().expect("tmp");
        let empty = dir.path().join("empty.img");
        std::fs::write(&empty, b"").expect("empty");
        let err = regions_are_zero(&empty).expect_err("no size, no proof");
        assert!(err.to_string().contains("size of 0"), "{err}");
        let zeros = dir.path().join("zeros.img");
        std::fs::write(&zeros, vec![0u8; 4096]).expect("zeros");
        assert!(regions_are_zero(&zeros).expect("read"));
    }

    #[test]
    fn blkid_results_are_classified_conservatively() {
        assert_eq!(classify(Some(2), "", true), Probe::Blank);
        // No signature but data: never formatted.
        assert_eq!(classify(Some(2), "", false), Probe::Unknown);
        assert_eq!(
            classify(
                Some(0),
                "DEVNAME=/dev/loop0\nUUID=x\nTYPE=xfs\nUSAGE=filesystem\n",
                false
            ),
            Probe::Filesystem("xfs".into())
        );
        assert_eq!(
            classify(Some(0), "TYPE=crypto_LUKS\nUSAGE=crypto\n", false),
            Probe::Foreign("crypto_LUKS".into())
        );
        assert_eq!(
            classify(Some(0), "TYPE=LVM2_member\nUSAGE=raid\n", false),
            Probe::Foreign("LVM2_member".into())
        );
        assert_eq!(
            classify(Some(0), "PTTYPE=gpt\n", false),
            Probe::Foreign("gpt partition table".into())
        );
        assert!(matches!(classify(Some(4), "", true), Probe::Unreadable(_)));
        assert!(matches!(classify(None, "", true), Probe::Unreadable(_)));
        assert!(matches!(classify(Some(8), "", true), Probe::Foreign(_)));
    }

    #[test]
    fn mkfs_commands_carry_the_default_options() {
        let d = Path::new("/dev/loop3");
        let none = FormatParams::default();
        assert_eq!(
            mkfs_cmd("ext4", d, &none).expect("ext4").to_string(),
            "mkfs.ext4 -F -q -O ^orphan_file /dev/loop3"
        );
        assert_eq!(
            mkfs_cmd("xfs", d, &none).expect("xfs").to_string(),
            "mkfs.xfs -q -i nrext64=0 /dev/loop3"
        );
        assert!(mkfs_cmd("btrfs", d, &none).is_err());
        assert!(
            tune2fs_cmd("ext4", d, &none).is_none(),
            "unset leaves mke2fs's default"
        );
        assert!(check_fs_type("").is_ok());
        assert!(check_fs_type("vfat").is_err());
    }

    #[test]
    fn class_format_parameters_replace_the_defaults_and_add_the_stripe() {
        let d = Path::new("/dev/loop3");
        let p = FormatParams {
            mkfs_options: Some(vec!["-b".into(), "4096".into()]),
            xfs_stripe: Some(("64k".into(), 4)),
            reserved_blocks: Some("0".into()),
        };
        let xfs = FormatParams {
            mkfs_options: Some(vec!["-b".into(), "size=4096".into()]),
            ..p.clone()
        };
        assert_eq!(
            mkfs_cmd("ext4", d, &p).expect("ext4").to_string(),
            "mkfs.ext4 -F -q -b 4096 /dev/loop3",
            "class options replace -O ^orphan_file; the stripe is xfs-only"
        );
        assert_eq!(
            mkfs_cmd("xfs", d, &xfs).expect("xfs").to_string(),
            "mkfs.xfs -q -b size=4096 -d su=64k,sw=4 -l su=64k /dev/loop3"
        );
        // Options are checked against the filesystem being made, not only at parse.
        let e = mkfs_cmd("xfs", d, &p).expect_err("ext4's -b form for xfs");
        assert!(matches!(e, CsiError::InvalidArgument(_)), "{e}");
        let stripe_only = FormatParams {
            xfs_stripe: Some(("16k".into(), 1)),
            ..Default::default()
        };
        assert_eq!(
            mkfs_cmd("xfs", d, &stripe_only).expect("xfs").to_string(),
            "mkfs.xfs -q -i nrext64=0 -d su=16k,sw=1 -l su=16k /dev/loop3"
        );
        assert_eq!(
            tune2fs_cmd("ext4", d, &p).map(|c| c.to_string()).as_deref(),
            Some("tune2fs -m 0 /dev/loop3")
        );
        assert!(tune2fs_cmd("xfs", d, &p).is_none());
    }

    #[test]
    fn mount_options_add_ro_and_nouuid() {
        assert_eq!(
            mount_options("xfs", &["noatime".into()], true),
            vec!["noatime", "ro", "nouuid"]
        );
        assert!(mount_options("ext4", &[], false).is_empty());
        let c = mount_cmd(
            Path::new("/dev/loop1"),
            Path::new("/stage"),
            "xfs",
            &mount_options("xfs", &[], false),
        );
        assert_eq!(c.to_string(), "mount -t xfs -o nouuid /dev/loop1 /stage");
        assert_eq!(
            bind_cmd(Path::new("/s"), Path::new("/t"), true, &[]).to_string(),
            "mount -o bind,ro /s /t"
        );
        assert_eq!(
            grow_cmd("xfs", Path::new("/dev/x"), Path::new("/m"))
                .expect("xfs")
                .to_string(),
            "xfs_growfs /m"
        );
    }

    #[test]
    fn mountinfo_parses_with_escapes() {
        let text = "36 35 98:0 / /mnt/with\\040space rw,noatime master:1 - ext4 /dev/loop0 rw,errors=continue\n\
                    37 35 98:0 / /target ro,relatime shared:2 - xfs /dev/loop1 ro\n\
                    garbage line\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].mount_point, PathBuf::from("/mnt/with space"));
        assert_eq!(m[0].fs_type, "ext4");
        assert_eq!(m[0].source, "/dev/loop0");
        assert!(!m[0].read_only());
        assert!(m[1].read_only());
        assert_eq!(
            mount_at(&m, Path::new("/target")).map(|e| e.source),
            Some("/dev/loop1".into())
        );
        assert!(mount_at(&m, Path::new("/nope")).is_none());
    }
}

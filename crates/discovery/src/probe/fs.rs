//! The probe's view of a machine: files under a root path.
//!
//! Every read goes through [`Fs`], which gives the capture tool the list of paths a probe
//! touched (so a fixture holds exactly those) and keeps the probe from reading past its
//! root when a fixture carries a link that points out of it.

use std::cell::{OnceCell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

// No sysfs or proc file the probe reads is anywhere near this; a corrupt fixture that is
// cannot make the probe allocate without bound.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
// A directory with more entries than this is not one the kernel writes.
const MAX_DIR_ENTRIES: usize = 1 << 16;

/// Read access to a machine's `/sys`, `/proc` and `/dev`. Paths are absolute within the
/// machine (`/sys/block`), whatever the root they are read under.
pub trait Fs {
    fn read(&self, path: &str) -> io::Result<Vec<u8>>;
    /// At most `len` bytes from the start.
    fn read_head(&self, path: &str, len: usize) -> io::Result<Vec<u8>>;
    /// Entry names, sorted.
    fn read_dir(&self, path: &str) -> io::Result<Vec<String>>;
    fn read_link(&self, path: &str) -> io::Result<String>;
    /// The path with every link resolved, absolute within the machine.
    fn canonical(&self, path: &str) -> io::Result<String>;

    /// Where `path` is on the host running the probe, for the checks that need a real
    /// file (the exclusive open); `None` when it is not inside the root.
    fn host_path(&self, path: &str) -> Option<PathBuf>;

    /// The major and minor number of the block device `path` leads to, when this machine
    /// can tell: a live `/proc` fd link leads to the device itself, whatever path it was
    /// opened by; a captured tree has no device nodes.
    fn block_device_number(&self, _path: &str) -> Option<(u32, u32)> {
        None
    }

    fn read_string(&self, path: &str) -> io::Result<String> {
        Ok(String::from_utf8_lossy(&self.read(path)?).into_owned())
    }
    fn exists(&self, path: &str) -> bool {
        self.canonical(path).is_ok()
    }
}

/// Files under a root directory, `/` for the machine the probe runs on.
pub struct RootFs {
    root: PathBuf,
    canonical_root: PathBuf,
    touched: Option<RefCell<BTreeSet<String>>>,
    contents: RefCell<BTreeMap<String, Vec<u8>>>,
    /// Whether `/proc` under the root is a live procfs; read once.
    live_proc: OnceCell<bool>,
}

impl RootFs {
    pub fn new(root: &Path) -> Self {
        let canonical_root = fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        RootFs {
            root: root.to_path_buf(),
            canonical_root,
            touched: None,
            contents: RefCell::new(BTreeMap::new()),
            live_proc: OnceCell::new(),
        }
    }

    /// A reader that remembers every path it was asked for; see [`RootFs::touched`].
    pub fn recording(root: &Path) -> Self {
        RootFs {
            touched: Some(RefCell::new(BTreeSet::new())),
            ..RootFs::new(root)
        }
    }

    /// Every path read, listed or resolved so far (recording readers only).
    pub fn touched(&self) -> Vec<String> {
        self.touched
            .as_ref()
            .map(|t| t.borrow().iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The bytes a recording reader returned for `path`, so a capture writes what the
    /// probe saw rather than a later reading of a file that keeps changing (meminfo).
    pub fn recorded(&self, path: &str) -> Option<Vec<u8>> {
        self.contents.borrow().get(path).cloned()
    }

    fn keep(&self, path: &str, data: &[u8]) {
        if self.touched.is_some() {
            self.contents
                .borrow_mut()
                .insert(path.to_string(), data.to_vec());
        }
    }

    fn note(&self, path: &str) {
        if let Some(t) = &self.touched {
            t.borrow_mut().insert(path.to_string());
        }
    }

    fn host_path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// The host path of `path`, refused when its links lead out of the root.
    fn inside(&self, path: &str) -> io::Result<PathBuf> {
        let real = fs::canonicalize(self.host_path(path))?;
        if real.starts_with(&self.canonical_root) {
            Ok(real)
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{path} leads out of the probe's root"),
            ))
        }
    }
}

impl Fs for RootFs {
    fn read(&self, path: &str) -> io::Result<Vec<u8>> {
        self.note(path);
        let mut out = Vec::new();
        fs::File::open(self.inside(path)?)?
            .take(MAX_FILE_BYTES)
            .read_to_end(&mut out)?;
        self.keep(path, &out);
        Ok(out)
    }

    fn read_head(&self, path: &str, len: usize) -> io::Result<Vec<u8>> {
        self.note(path);
        let mut out = Vec::new();
        let limit = u64::try_from(len).unwrap_or(MAX_FILE_BYTES);
        fs::File::open(self.inside(path)?)?
            .take(limit.min(MAX_FILE_BYTES))
            .read_to_end(&mut out)?;
        self.keep(path, &out);
        Ok(out)
    }

    fn read_dir(&self, path: &str) -> io::Result<Vec<String>> {
        self.note(path);
        let mut names = Vec::new();
        for entry in fs::read_dir(self.inside(path)?)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            // The kernel's filesystems name nothing with a leading dot; a stored host tree
            // keeps its empty directories with one, since git keeps no empty directory.
            if name.starts_with('.') {
                continue;
            }
            names.push(name);
            if names.len() > MAX_DIR_ENTRIES {
                return Err(io::Error::other(format!("{path} has too many entries")));
            }
        }
        names.sort();
        Ok(names)
    }

    fn read_link(&self, path: &str) -> io::Result<String> {
        self.note(path);
        // The link itself is read, not followed, so it may point anywhere (a /proc fd link
        // names a device node); only its parent has to be inside the root.
        let host = self.host_path(path);
        if let Some(parent) = Path::new(path).parent().and_then(|p| p.to_str()) {
            self.inside(parent)?;
        }
        Ok(fs::read_link(host)?.to_string_lossy().into_owned())
    }

    fn host_path(&self, path: &str) -> Option<PathBuf> {
        self.inside(path).ok()
    }

    fn block_device_number(&self, path: &str) -> Option<(u32, u32)> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        self.note(path);
        // Only through a live procfs (the machine's own, or the host's mounted into a
        // probe pod), whose fd links the kernel follows to the open file itself, whatever
        // node their text names. A captured tree's links are plain text: following one
        // would reach a device of the machine running the probe.
        let live = *self.live_proc.get_or_init(|| {
            rustix::fs::statfs(self.host_path("/proc"))
                .is_ok_and(|s| s.f_type == rustix::fs::PROC_SUPER_MAGIC)
        });
        if !live {
            return None;
        }
        let meta = fs::metadata(self.host_path(path)).ok()?;
        let rdev = meta.rdev();
        meta.file_type()
            .is_block_device()
            .then(|| (libc::major(rdev), libc::minor(rdev)))
    }

    fn canonical(&self, path: &str) -> io::Result<String> {
        self.note(path);
        let real = self.inside(path)?;
        let rel = real
            .strip_prefix(&self.canonical_root)
            .map_err(|_| io::Error::other("outside the root"))?;
        Ok(format!("/{}", rel.to_string_lossy()))
    }
}

//! The loop attacher: the simulator keeps each volume as a sparse file `<id>.img` of the
//! volume's size in one directory; attaching binds a loop device to it.
//!
//! A loop device has one way to its file, so the control plane's paths are stood in for
//! by files: connecting path `ip:port` of a volume creates `<id>.paths/<ip>:<port>` next to
//! its image, as the kernel adds a controller under `/sys/class/nvme`, and the simulator
//! removes it when that path is cut (`POST /_sim/paths/cut`), as the kernel deletes a
//! controller whose target stayed away past its loss timeout. The device itself keeps
//! working: what a cut changes is only what the node's recovery loops see.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;

use simplyblock_controlplane::ConnectEntry;

use super::{Attacher, PathState, Target};
use crate::error::{CsiError, Result};
use crate::exec::{self, Cmd};

const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct LoopAttacher {
    /// Where the volume files live.
    pub dir: PathBuf,
    /// sysfs root (`/sys`), replaceable in tests.
    pub sys: PathBuf,
}

impl LoopAttacher {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            sys: PathBuf::from("/sys"),
        }
    }

    /// The file backing a volume.
    pub fn file_of(&self, t: &Target) -> PathBuf {
        self.dir.join(format!("{}.img", t.volume))
    }

    /// The directory of a volume's connected paths.
    pub fn paths_dir(&self, t: &Target) -> PathBuf {
        paths_dir(&self.dir, t.volume)
    }

    /// Mark these paths connected.
    fn connect(&self, t: &Target, paths: &[ConnectEntry]) -> Result<()> {
        if paths.is_empty() {
            return Ok(());
        }
        let dir = self.paths_dir(t);
        std::fs::create_dir_all(&dir)
            .map_err(|e| CsiError::io(format!("creating {}", dir.display()), e))?;
        for p in paths {
            let f = dir.join(path_name(&p.ip, p.port));
            std::fs::write(&f, b"")
                .map_err(|e| CsiError::io(format!("connecting path {}", f.display()), e))?;
        }
        Ok(())
    }
}

/// Where the paths of `volume` are marked, in the volume files' directory `dir`.
pub fn paths_dir(dir: &Path, volume: uuid::Uuid) -> PathBuf {
    dir.join(format!("{volume}.paths"))
}

/// The file name marking path `ip:port`.
pub fn path_name(ip: &str, port: u16) -> String {
    format!("{ip}:{port}")
}

/// The paths marked in `dir` (each file `ip:port` is one live path).
pub fn marked_paths(dir: &Path) -> Vec<PathState> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathState> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let (ip, port) = name.rsplit_once(':')?;
            Some(PathState {
                ip: ip.to_owned(),
                port: port.parse().ok()?,
                live: true,
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.ip, a.port).cmp(&(&b.ip, b.port)));
    out
}

pub fn attach_cmd(file: &Path) -> Cmd {
    Cmd::new("losetup", &["--find", "--show"]).arg(file.display().to_string())
}

pub fn detach_cmd(dev: &Path) -> Cmd {
    Cmd::new("losetup", &["--detach"]).arg(dev.display().to_string())
}

pub fn refresh_cmd(dev: &Path) -> Cmd {
    Cmd::new("losetup", &["--set-capacity"]).arg(dev.display().to_string())
}

/// The loop devices whose backing file is `file`, from `<sys>/block/loop*/loop/backing_file`.
/// A device being torn down is not one of them: one whose detach waits for its last user
/// (`loop/autoclear` 1: this attacher never sets it, only a detach of a busy device does)
/// or that already reports a size of 0. Reusing it would hand out a device that empties
/// under its user.
pub fn devices_backed_by(sys: &Path, file: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(sys.join("block")) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("loop") {
                return None;
            }
            let backing = std::fs::read_to_string(e.path().join("loop/backing_file")).ok()?;
            // A file removed while attached reads back with " (deleted)"; it is not ours any more.
            if Path::new(backing.trim()) != file {
                return None;
            }
            let reads = |f: &str, v: &str| {
                std::fs::read_to_string(e.path().join(f)).is_ok_and(|s| s.trim() == v)
            };
            if reads("loop/autoclear", "1") || reads("size", "0") {
                return None;
            }
            Some(PathBuf::from(format!("/dev/{name}")))
        })
        .collect();
    out.sort();
    out
}

impl LoopAttacher {
    fn canonical_file(&self, t: &Target) -> Result<PathBuf> {
        let file = self.file_of(t);
        std::fs::canonicalize(&file).map_err(|e| {
            CsiError::FailedPrecondition(format!(
                "volume {} has no backing file {} ({e}); is the simulator writing volume files to this directory?",
                t.volume,
                file.display()
            ))
        })
    }
}

impl Attacher for LoopAttacher {
    fn kind(&self) -> &'static str {
        "loop"
    }

    fn attach<'a>(&'a self, t: &'a Target) -> BoxFuture<'a, Result<PathBuf>> {
        async move {
            let file = self.canonical_file(t)?;
            self.connect(t, &t.paths)?;
            if let Some(d) = devices_backed_by(&self.sys, &file).into_iter().next() {
                return Ok(d);
            }
            let out = exec::run(&attach_cmd(&file), TIMEOUT).await?;
            let dev = PathBuf::from(out.stdout.trim());
            if !dev.starts_with("/dev/") {
                return Err(CsiError::Internal(format!(
                    "losetup named no device for {}: {:?}",
                    file.display(),
                    out.stdout
                )));
            }
            Ok(dev)
        }
        .boxed()
    }

    fn find<'a>(&'a self, t: &'a Target) -> BoxFuture<'a, Result<Option<PathBuf>>> {
        async move {
            Ok(match std::fs::canonicalize(self.file_of(t)) {
                Ok(file) => devices_backed_by(&self.sys, &file).into_iter().next(),
                Err(_) => None,
            })
        }
        .boxed()
    }

    fn detach<'a>(&'a self, t: &'a Target, device: &'a Path) -> BoxFuture<'a, Result<()>> {
        async move {
            // Detach only a device that still points at this volume's file: after a crash
            // the recorded loop number may have been reused for another volume.
            let Ok(file) = std::fs::canonicalize(self.file_of(t)) else {
                return Ok(());
            };
            for d in devices_backed_by(&self.sys, &file) {
                if d == device || device.as_os_str().is_empty() {
                    exec::run(&detach_cmd(&d), TIMEOUT).await?;
                }
            }
            let paths = self.paths_dir(t);
            match std::fs::remove_dir_all(&paths) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(CsiError::io(format!("removing {}", paths.display()), e)),
            }
        }
        .boxed()
    }

    fn paths<'a>(&'a self, t: &'a Target) -> BoxFuture<'a, Result<Vec<PathState>>> {
        async move { Ok(marked_paths(&self.paths_dir(t))) }.boxed()
    }

    fn connect_paths<'a>(
        &'a self,
        t: &'a Target,
        paths: &'a [ConnectEntry],
    ) -> BoxFuture<'a, Result<()>> {
        async move { self.connect(t, paths) }.boxed()
    }

    fn refresh_size<'a>(&'a self, _t: &'a Target, device: &'a Path) -> BoxFuture<'a, Result<()>> {
        async move { exec::run(&refresh_cmd(device), TIMEOUT).await.map(|_| ()) }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands() {
        assert_eq!(
            attach_cmd(Path::new("/v/a.img")).to_string(),
            "losetup --find --show /v/a.img"
        );
        assert_eq!(
            detach_cmd(Path::new("/dev/loop4")).to_string(),
            "losetup --detach /dev/loop4"
        );
        assert_eq!(
            refresh_cmd(Path::new("/dev/loop4")).to_string(),
            "losetup --set-capacity /dev/loop4"
        );
    }

    #[test]
    fn marked_paths_are_read_back() {
        let dir = tempfile::tempdir().expect("tmp");
        assert!(marked_paths(&dir.path().join("absent")).is_empty());
        for name in [path_name("10.0.0.2", 4420), path_name("10.0.0.1", 4421)] {
            std::fs::write(dir.path().join(name), b"").expect("mark");
        }
        std::fs::write(dir.path().join("stray"), b"").expect("stray");
        let got = marked_paths(dir.path());
        assert_eq!(
            got.iter()
                .map(|p| format!("{}:{}", p.ip, p.port))
                .collect::<Vec<_>>(),
            ["10.0.0.1:4421", "10.0.0.2:4420"]
        );
        assert!(got.iter().all(|p| p.live));
    }

    #[test]
    fn backing_files_are_matched_exactly() {
        let sys = tempfile::tempdir().expect("tmp");
        let mk = |name: &str, backing: &str| {
            let d = sys.path().join("block").join(name).join("loop");
            std::fs::create_dir_all(&d).expect("mkdir");
            std::fs::write(d.join("backing_file"), format!("{backing}\n")).expect("write");
        };
        mk("loop0", "/vols/a.img");
        mk("loop1", "/vols/b.img");
        mk("loop2", "/vols/a.img (deleted)");
        // Two of the same file being torn down: a detach pending, and one already emptied.
        mk("loop3", "/vols/a.img");
        std::fs::write(sys.path().join("block/loop3/loop/autoclear"), "1\n").expect("autoclear");
        mk("loop4", "/vols/a.img");
        std::fs::write(sys.path().join("block/loop4/size"), "0\n").expect("size");
        std::fs::create_dir_all(sys.path().join("block/sda")).expect("sda");
        assert_eq!(
            devices_backed_by(sys.path(), Path::new("/vols/a.img")),
            vec![PathBuf::from("/dev/loop0")]
        );
        assert!(devices_backed_by(sys.path(), Path::new("/vols/c.img")).is_empty());
        assert!(devices_backed_by(Path::new("/nonexistent"), Path::new("/x")).is_empty());
    }
}

//! Optional volume data: with `--volume-files DIR`, each volume and snapshot is a sparse
//! file `DIR/<id>.img` of its size, so a node on the same machine can attach it with a
//! loop device (the CSI driver's loop attacher). Snapshots and clones copy the data,
//! skipping zero blocks so the copies stay sparse. Failures are logged, not answered:
//! the API behaves as without the option.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use uuid::Uuid;

pub fn path(dir: &Path, id: Uuid) -> PathBuf {
    dir.join(format!("{id}.img"))
}

fn warn(what: &str, id: Uuid, e: std::io::Error) {
    tracing::warn!(%id, error = %e, "volume file: {what} failed");
}

/// A new, all-zero volume of `size` bytes.
pub fn create(dir: &Path, id: Uuid, size: u64) {
    let r = std::fs::create_dir_all(dir).and_then(|_| {
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path(dir, id))?;
        f.set_len(size)
    });
    if let Err(e) = r {
        warn("create", id, e);
    }
}

/// Grow (never shrink) to `size` bytes.
pub fn grow(dir: &Path, id: Uuid, size: u64) {
    let r = OpenOptions::new()
        .write(true)
        .open(path(dir, id))
        .and_then(|f| {
            if f.metadata()?.len() < size {
                f.set_len(size)?;
            }
            Ok(())
        });
    if let Err(e) = r {
        warn("grow", id, e);
    }
}

fn sparse_copy(from: &Path, to: &Path, size: u64) -> std::io::Result<()> {
    let mut src = File::open(from)?;
    let mut dst = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(to)?;
    let len = src.metadata()?.len();
    let mut buf = vec![0u8; 1 << 20];
    // Slice equality compiles to memcmp even unoptimised, unlike a byte loop.
    let zeros = vec![0u8; 1 << 20];
    // Only the data extents are read: a large, mostly empty volume copies in the time its
    // written blocks take (the sim copies under its lock, once per replication cycle).
    for (start, end) in extents(&src, len) {
        src.seek(SeekFrom::Start(start))?;
        let mut offset = start;
        while offset < end {
            let want = ((end - offset) as usize).min(buf.len());
            let n = src.read(&mut buf[..want])?;
            if n == 0 {
                break;
            }
            if buf[..n] != zeros[..n] {
                dst.seek(SeekFrom::Start(offset))?;
                dst.write_all(&buf[..n])?;
            }
            offset += n as u64;
        }
    }
    dst.set_len(size.max(len))?;
    dst.sync_all()
}

/// The `[start, end)` ranges of `f` that may hold data: its data extents where the file
/// system tells them apart from holes, else the whole file.
fn extents(f: &File, len: u64) -> Vec<(u64, u64)> {
    use rustix::fs::{SeekFrom as At, seek};
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < len {
        let start = match seek(f, At::Data(pos)) {
            Ok(s) => s,
            // ENXIO: no data past `pos`.
            Err(rustix::io::Errno::NXIO) => break,
            Err(_) => return vec![(0, len)],
        };
        let end = match seek(f, At::Hole(start)) {
            Ok(e) => e.min(len),
            Err(_) => return vec![(0, len)],
        };
        if end <= start {
            break;
        }
        out.push((start, end));
        pos = end;
    }
    out
}

/// `to` becomes a copy of `from`'s data, `size` bytes long (at least `from`'s length).
pub fn copy(dir: &Path, from: Uuid, to: Uuid, size: u64) {
    if let Err(e) = sparse_copy(&path(dir, from), &path(dir, to), size) {
        warn("copy", to, e);
    }
}

/// `to` becomes a sparse copy of file `from`, `size` bytes long (at least `from`'s
/// length): how backups go to and come from their object store.
pub fn copy_file(from: &Path, to: &Path, size: u64) -> std::io::Result<()> {
    sparse_copy(from, to, size)
}

pub fn remove(dir: &Path, id: Uuid) {
    match std::fs::remove_file(path(dir, id)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => warn("remove", id, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_follow_the_volume_lifecycle() {
        let dir = tempfile::tempdir().expect("tmp");
        let (v, s, c) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        create(dir.path(), v, 8 << 20);
        assert_eq!(
            std::fs::metadata(path(dir.path(), v)).expect("v").len(),
            8 << 20
        );
        {
            let mut f = OpenOptions::new()
                .write(true)
                .open(path(dir.path(), v))
                .expect("open");
            f.seek(SeekFrom::Start(3 << 20)).expect("seek");
            f.write_all(b"hello").expect("write");
        }
        copy(dir.path(), v, s, 8 << 20);
        copy(dir.path(), s, c, 16 << 20);
        let data = std::fs::read(path(dir.path(), c)).expect("clone");
        assert_eq!(data.len(), 16 << 20);
        assert_eq!(&data[3 << 20..(3 << 20) + 5], b"hello");
        grow(dir.path(), v, 4 << 20);
        assert_eq!(
            std::fs::metadata(path(dir.path(), v)).expect("v").len(),
            8 << 20,
            "never shrinks"
        );
        grow(dir.path(), v, 32 << 20);
        assert_eq!(
            std::fs::metadata(path(dir.path(), v)).expect("v").len(),
            32 << 20
        );
        remove(dir.path(), v);
        remove(dir.path(), v);
        assert!(!path(dir.path(), v).exists());
    }

    #[test]
    fn a_copy_keeps_every_extent_and_stays_sparse() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tmp");
        let (v, s, e) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        create(dir.path(), v, 256 << 20);
        {
            let mut f = OpenOptions::new()
                .write(true)
                .open(path(dir.path(), v))
                .expect("open");
            for (at, what) in [(0u64, &b"head"[..]), (200 << 20, b"far out")] {
                f.seek(SeekFrom::Start(at)).expect("seek");
                f.write_all(what).expect("write");
            }
        }
        copy(dir.path(), v, s, 256 << 20);
        let data = std::fs::read(path(dir.path(), s)).expect("copy");
        assert_eq!(data.len(), 256 << 20);
        assert_eq!(&data[..4], b"head");
        assert_eq!(&data[200 << 20..(200 << 20) + 7], b"far out");
        assert!(data[4..200 << 20].iter().all(|b| *b == 0));
        let blocks = std::fs::metadata(path(dir.path(), s))
            .expect("meta")
            .blocks();
        assert!(
            blocks * 512 < 16 << 20,
            "the copy allocated {blocks} blocks"
        );
        // An empty volume copies to an empty volume of the asked size.
        create(dir.path(), e, 128 << 20);
        copy(dir.path(), e, s, 128 << 20);
        assert_eq!(
            std::fs::metadata(path(dir.path(), s)).expect("meta").len(),
            128 << 20
        );
    }
}

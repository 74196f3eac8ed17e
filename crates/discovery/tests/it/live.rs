//! The probe on the machine running the tests, for what a captured tree cannot hold: a
//! live process table, whose descriptors lead to the devices themselves.

use std::path::Path;
use std::process::Command;

use simplyblock_discovery::probe::{ProbeOptions, RecordedExclusiveCheck, RootFs, probe_with};
use simplyblock_discovery::report::Reason;

/// A loop device over a file, detached when dropped.
struct Loop(String);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

/// A bind mount, unmounted when dropped.
struct Bind(std::path::PathBuf);

impl Bind {
    fn new(from: &str, to: &Path) -> Bind {
        std::fs::create_dir_all(to).expect("mount point");
        let ok = Command::new("mount")
            .args(["--bind", from])
            .arg(to)
            .status()
            .expect("mount");
        assert!(ok.success(), "mount --bind {from}");
        Bind(to.to_path_buf())
    }
}

impl Drop for Bind {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_disk_opened_through_a_node_of_another_name_is_found_by_its_number() {
    // A container or a VMM may open a disk through a node of its own naming, which no
    // /dev name matches; the descriptor still leads to the device's major:minor.
    let dir = tempfile::tempdir().expect("tempdir");
    let backing = dir.path().join("disk.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(16 << 20))
        .expect("backing file");
    let out = Command::new("losetup")
        .args(["--find", "--show"])
        .arg(&backing)
        .output()
        .expect("losetup (the live probe tests need root and loop devices)");
    assert!(out.status.success(), "losetup: {out:?}");
    let device = Loop(String::from_utf8_lossy(&out.stdout).trim().to_string());
    let name = device.0.trim_start_matches("/dev/").to_string();
    let numbers = std::fs::read_to_string(format!("/sys/block/{name}/dev")).expect("dev");
    let (major, minor) = numbers.trim().split_once(':').expect("major:minor");
    let alias = dir.path().join("disk-by-another-name");
    let made = Command::new("mknod")
        .arg(&alias)
        .args(["b", major, minor])
        .status()
        .expect("mknod");
    assert!(made.success());
    let held = std::fs::File::open(&alias).expect("open the alias");

    // The machine itself, and the machine as a probe pod sees it: the host's root mounted
    // under another path, its /proc and /sys the live ones.
    let host = tempfile::tempdir().expect("host root");
    let _mounts = [
        Bind::new("/proc", &host.path().join("proc")),
        Bind::new("/sys", &host.path().join("sys")),
    ];
    let comm = std::fs::read_to_string("/proc/self/comm").expect("comm");
    let want = format!(
        "open by process {} ({}) as {}",
        std::process::id(),
        comm.trim(),
        alias.display()
    );
    let exclusive = RecordedExclusiveCheck::default();
    for root in [Path::new("/"), host.path()] {
        let report = probe_with(
            &RootFs::new(root),
            &ProbeOptions {
                node: Some("live".into()),
                exclusive: Some(&exclusive),
                now: Some(jiff::Timestamp::UNIX_EPOCH),
            },
        );
        let d = report
            .devices
            .iter()
            .find(|d| d.name == name)
            .unwrap_or_else(|| panic!("{name} under {}", root.display()));
        assert!(
            d.rejections
                .iter()
                .any(|r| r.reason == Reason::Held && r.detail == want),
            "under {}: want {want:?} in {:?}",
            root.display(),
            d.rejections
        );
    }
    drop(held);
}

//! The captured host fixtures read back to the report their machine gave, and a corrupted
//! fixture never panics the probe.

use std::fs;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use simplyblock_discovery::probe::{ProbeOptions, RootFs, probe_with};
use simplyblock_discovery::{Report, decode};

fn hosts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hosts")
}

fn probe_fixture(root: &Path, node: &str) -> Report {
    probe_with(
        &RootFs::new(root),
        &ProbeOptions {
            node: Some(node.into()),
            now: Some(jiff::Timestamp::UNIX_EPOCH),
            ..ProbeOptions::default()
        },
    )
}

#[test]
fn every_fixture_reads_back_to_its_live_report() {
    let mut seen = 0;
    for entry in fs::read_dir(hosts()).expect("fixtures/hosts") {
        let dir = entry.expect("entry").path();
        let live = dir.join("live-report.json");
        if !live.exists() {
            continue;
        }
        let mut want = decode(&fs::read(&live).expect("read")).expect("live report decodes");
        want.probed_at = Some(jiff::Timestamp::UNIX_EPOCH);
        let got = probe_fixture(&dir.join("root"), &want.node);
        assert_eq!(got, want, "{}", dir.display());
        seen += 1;
    }
    assert!(seen >= 5, "expected the captured fixtures, found {seen}");
}

/// git keeps no empty directory, so a fixture with one reads differently from a clean
/// checkout (an empty `/sys/block` becomes a missing one); the capture keeps each with a
/// dot file.
#[test]
fn no_fixture_directory_is_empty() {
    fn walk(dir: &Path, empty: &mut Vec<PathBuf>) {
        let mut entries = 0;
        for entry in fs::read_dir(dir).expect("read_dir") {
            let entry = entry.expect("entry");
            entries += 1;
            let kind = entry.file_type().expect("file type");
            if kind.is_dir() {
                walk(&entry.path(), empty);
            }
        }
        if entries == 0 {
            empty.push(dir.to_path_buf());
        }
    }
    let mut empty = Vec::new();
    walk(&hosts(), &mut empty);
    assert!(
        empty.is_empty(),
        "empty directories, which git drops; touch a .gitkeep in each: {empty:?}"
    );
}

#[test]
fn the_qemu_guest_shows_what_it_was_built_with() {
    let r = probe_fixture(&hosts().join("qemu-numa2-nvme/root"), "g");
    assert_eq!(r.cpu.numa_nodes.len(), 2);
    let kind = |n: &str| r.interfaces.iter().find(|i| i.name == n).map(|i| i.kind);
    use simplyblock_discovery::report::InterfaceKind::*;
    assert_eq!(kind("bond0"), Some(Bond));
    assert_eq!(kind("br0"), Some(Bridge));
    assert_eq!(kind("eth0.100"), Some(Vlan));
    assert_eq!(kind("dummy0"), Some(Dummy));
    assert!(
        kind("bonding_masters").is_none(),
        "a file, not an interface"
    );
    let vda = r.devices.iter().find(|d| d.name == "vda").expect("vda");
    assert_eq!(vda.partition_table.as_deref(), Some("dos"));
    assert!(r.nvme_controllers.iter().any(|c| c.numa_node == 1));
}

#[test]
fn one_controller_with_two_namespaces_backs_two_disks_and_a_gpt_is_seen() {
    let r = probe_fixture(&hosts().join("qemu-small-multins/root"), "g");
    let disks = |serial: &str| -> Vec<&simplyblock_discovery::report::Device> {
        r.devices
            .iter()
            .filter(|d| d.serial == serial && d.parent.is_empty())
            .collect()
    };
    let multi = disks("SBMULTI");
    let names: Vec<&str> = multi.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["nvme0n1", "nvme0n2"]);
    assert!(!multi[0].pci_address.is_empty());
    assert_eq!(multi[0].pci_address, multi[1].pci_address, "one controller");
    let gpt = disks("SBGPT");
    assert_eq!(gpt.len(), 1);
    assert_eq!(gpt[0].partition_table.as_deref(), Some("gpt"));
    assert!(
        r.devices.iter().any(|d| d.parent == gpt[0].name),
        "its partition is listed"
    );
}

#[test]
fn controllers_on_vfio_held_by_a_process_name_that_process() {
    use simplyblock_discovery::report::{ControllerDriver, InUse, Transport};
    let r = probe_fixture(&hosts().join("qemu-vfio-held/root"), "g");
    assert_eq!(r.nvme_controllers.len(), 2);
    for c in &r.nvme_controllers {
        assert_eq!(c.driver, ControllerDriver::VfioPci, "{c:?}");
        assert_eq!(c.in_use, InUse::Held, "{c:?}");
        assert!(
            c.holders
                .iter()
                .any(|h| h.command == "sleep" && h.via.starts_with("/dev/vfio/")),
            "{c:?}"
        );
    }
    assert!(
        r.devices.iter().all(|d| d.transport != Transport::NVMe),
        "no NVMe block device while the kernel driver is not bound"
    );
}

#[test]
fn a_disk_a_process_holds_open_is_refused_naming_the_process() {
    // Regression: a namespace a process had open (without an exclusive claim) was offered,
    // since neither sysfs nor the exclusive open shows a plain open.
    use simplyblock_discovery::report::{ExclusiveOpen, Reason, Rejection};
    let plain = probe_fixture(&hosts().join("qemu-small-multins/root"), "g");
    let open = probe_fixture(&hosts().join("qemu-small-nvme-open/root"), "g");
    let device = |r: &Report, name: &str| {
        r.devices
            .iter()
            .find(|d| d.name == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name}"))
    };
    let held = device(&open, "nvme0n2");
    assert_eq!(
        held.exclusive_open,
        ExclusiveOpen::Succeeded,
        "the exclusive open does not see it"
    );
    assert!(!held.available);
    assert_eq!(
        held.rejections,
        vec![Rejection {
            reason: Reason::Held,
            detail: "open by process 201 (sleep) as /dev/nvme0n2".into(),
        }]
    );
    assert!(device(&plain, "nvme0n2").available, "the same disk, closed");
    // A partition held open refuses itself and names itself on its disk.
    let part = device(&open, "nvme1n1p1");
    assert!(part.rejections.contains(&Rejection {
        reason: Reason::Held,
        detail: "open by process 202 (cat) as /dev/nvme1n1p1".into(),
    }));
    let disk = device(&open, "nvme1n1");
    assert!(disk.rejections.contains(&Rejection {
        reason: Reason::Held,
        detail: "open by process 202 (cat) as /dev/nvme1n1p1 (on nvme1n1p1)".into(),
    }));
    // Nothing else differs from the fixture the tree derives from.
    let without_held = |mut r: Report| {
        for d in &mut r.devices {
            d.rejections
                .retain(|x| !(x.reason == Reason::Held && x.detail.starts_with("open by ")));
            d.available = d.rejections.is_empty();
        }
        r
    };
    assert_eq!(without_held(open), plain);
}

#[test]
fn a_process_whose_open_files_cannot_be_read_leaves_every_disk_unknown() {
    use simplyblock_discovery::report::Reason;
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_tree(&hosts().join("qemu-small-nvme-open/root"), tmp.path());
    // A descriptor table that cannot be listed, as a process hidden from the probe.
    let fd = tmp.path().join("proc/202/fd");
    fs::remove_dir_all(&fd).expect("rm");
    fs::write(&fd, "").expect("not a directory");
    let r = probe_fixture(tmp.path(), "g");
    assert!(
        r.unreadable
            .iter()
            .any(|u| u.starts_with("the open files of 1 process(es) (202)")),
        "{:?}",
        r.unreadable
    );
    for d in r.devices.iter().filter(|d| d.parent.is_empty()) {
        assert!(
            d.rejections
                .iter()
                .any(|x| x.reason == Reason::Unreadable && x.detail.contains("whether one holds")),
            "{d:?}"
        );
        assert!(!d.available, "{}", d.name);
    }
}

#[test]
fn the_full_guest_has_held_idle_and_unbound_controllers_and_a_mounted_disk() {
    use simplyblock_discovery::report::{ControllerDriver, InUse, InterfaceKind};
    let r = probe_fixture(&hosts().join("qemu-numa2-vfio/root"), "g");
    assert_eq!(r.cpu.numa_nodes.len(), 2);
    let on = |driver: ControllerDriver, in_use: InUse| {
        r.nvme_controllers
            .iter()
            .filter(|c| c.driver == driver && c.in_use == in_use)
            .count()
    };
    assert_eq!(on(ControllerDriver::Nvme, InUse::NotApplicable), 3);
    assert_eq!(on(ControllerDriver::None, InUse::NotApplicable), 1);
    assert_eq!(on(ControllerDriver::VfioPci, InUse::Held), 1);
    assert_eq!(on(ControllerDriver::VfioPci, InUse::Idle), 1);
    let sda = r.devices.iter().find(|d| d.name == "sda").expect("sda");
    assert!(sda.mounts.iter().any(|m| m == "/mnt/data"), "{sda:?}");
    let kinds: Vec<InterfaceKind> = r.interfaces.iter().map(|i| i.kind).collect();
    for k in [
        InterfaceKind::Bond,
        InterfaceKind::Bridge,
        InterfaceKind::Vlan,
        InterfaceKind::Veth,
        InterfaceKind::Dummy,
    ] {
        assert!(kinds.contains(&k), "{k:?} in {kinds:?}");
    }
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let Ok(meta) = fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            files(&p, out);
        } else if meta.is_file() {
            out.push(p);
        }
    }
}

fn copy_tree(from: &Path, to: &Path) {
    for e in fs::read_dir(from).into_iter().flatten().flatten() {
        let p = e.path();
        let dest = to.join(e.file_name());
        let meta = fs::symlink_metadata(&p).expect("meta");
        if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&p).expect("link"), &dest).expect("symlink");
        } else if meta.is_dir() {
            fs::create_dir_all(&dest).expect("mkdir");
            copy_tree(&p, &dest);
        } else {
            fs::copy(&p, &dest).expect("copy");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn a_corrupted_fixture_never_panics_the_probe(
        picks in proptest::collection::vec((any::<prop::sample::Index>(), proptest::collection::vec(any::<u8>(), 0..64)), 1..40),
        host in prop::sample::select(vec!["qemu-numa2-nvme", "qemu-numa2-vfio", "qemu-small-multins", "qemu-vfio-held", "this-machine-virtio"]),
    ) {
        let tmp = tempfile::tempdir().expect("tempdir");
        copy_tree(&hosts().join(host).join("root"), tmp.path());
        let mut all = Vec::new();
        files(tmp.path(), &mut all);
        all.sort();
        for (idx, bytes) in &picks {
            let f = idx.get(&all);
            fs::write(f, bytes).expect("corrupt");
        }
        let r = probe_fixture(tmp.path(), "n");
        // Whatever it read, the result is a report that round-trips.
        let text = simplyblock_discovery::encode(&r).expect("encodes");
        prop_assert_eq!(decode(text.as_bytes()).expect("decodes").node, "n");
    }

    #[test]
    fn the_decoder_and_parsers_take_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = decode(&data);
        let text = String::from_utf8_lossy(&data);
        let _ = simplyblock_discovery::parse::cpu_list(&text);
        let _ = simplyblock_discovery::parse::meminfo(&text);
        let _ = simplyblock_discovery::parse::mountinfo(&text);
        let _ = simplyblock_discovery::parse::ipv4_addresses(&text, &text);
        let _ = simplyblock_discovery::parse::if_inet6(&text);
        let _ = simplyblock_discovery::parse::content(&data);
        let _ = simplyblock_discovery::parse::volume_nqn(&text);
        let _ = simplyblock_discovery::size::parse_size_range(&text);
    }
}

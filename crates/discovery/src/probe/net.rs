//! Network interfaces: kind, state, speed, links between them, and addresses.

use super::Fs;
use super::util::{link_name, numa, number, pci_of, text};
use crate::parse;
use crate::report::{Interface, InterfaceAddress, InterfaceKind, NUMA_UNKNOWN};

const NET: &str = "/sys/class/net";

pub fn interfaces(fs: &dyn Fs, unreadable: &mut Vec<String>) -> Vec<Interface> {
    let names = match fs.read_dir(NET) {
        Ok(n) => n,
        Err(e) => {
            unreadable.push(format!("{NET}: {e}"));
            return Vec::new();
        }
    };
    let addresses = addresses(fs, unreadable);
    let mut out = Vec::new();
    for name in names {
        let base = format!("{NET}/{name}");
        // bonding_masters lives here too; a real interface has an index.
        if !fs.exists(&format!("{base}/ifindex")) {
            continue;
        }
        let mut iface = read_interface(fs, &name, &base);
        iface.addresses = addresses
            .iter()
            .filter(|a| a.interface == name)
            .map(|a| InterfaceAddress {
                address: a.address,
                prefix_len: a.prefix_len,
            })
            .collect();
        out.push(iface);
    }
    out
}

fn read_interface(fs: &dyn Fs, name: &str, base: &str) -> Interface {
    let uevent = fs
        .read_string(&format!("{base}/uevent"))
        .map(|t| parse::uevent(&t))
        .unwrap_or_default();
    let devtype = uevent.get("DEVTYPE").map(String::as_str).unwrap_or("");
    let has = |p: &str| fs.exists(&format!("{base}/{p}"));
    let has_device = has("device");
    let ifindex = number(fs, &format!("{base}/ifindex"));
    let iflink = number(fs, &format!("{base}/iflink"));
    let kind = if number(fs, &format!("{base}/type")) == Some(772) {
        InterfaceKind::Loopback
    } else {
        match devtype {
            "bond" => InterfaceKind::Bond,
            "bridge" => InterfaceKind::Bridge,
            "vlan" => InterfaceKind::Vlan,
            "vxlan" => InterfaceKind::Vxlan,
            "macvlan" | "macvtap" => InterfaceKind::Macvlan,
            "ipvlan" => InterfaceKind::Ipvlan,
            "team" => InterfaceKind::Team,
            "wlan" | "wwan" => InterfaceKind::Wireless,
            _ if has("bonding") => InterfaceKind::Bond,
            _ if has("bridge") => InterfaceKind::Bridge,
            _ if has("wireless") || has("phy80211") => InterfaceKind::Wireless,
            _ if has("tun_flags") => InterfaceKind::Tun,
            _ if has_device => InterfaceKind::Physical,
            // A veth's iflink is its peer's index; an unidentified device points at itself.
            _ if ifindex.is_some() && iflink.is_some() && ifindex != iflink => InterfaceKind::Veth,
            // The kernel exports no kind for a dummy device, so its conventional name is
            // the only evidence; it is refused for binding either way.
            _ if name.starts_with("dummy") => InterfaceKind::Dummy,
            _ => InterfaceKind::Virtual,
        }
    };
    let mut lower: Vec<String> = Vec::new();
    if let Some(slaves) = text(fs, &format!("{base}/bonding/slaves")) {
        lower.extend(slaves.split_whitespace().map(str::to_string));
    }
    // Bridges list their ports in brif/, which is what the kernel exports for them.
    // Each listed link is read as well, which also puts it in a capture's copy.
    let ports = fs.read_dir(&format!("{base}/brif")).unwrap_or_default();
    lower.extend(
        ports
            .into_iter()
            .filter(|p| fs.read_link(&format!("{base}/brif/{p}")).is_ok()),
    );
    let entries: Vec<String> = fs
        .read_dir(base)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            !(e.starts_with("lower_") || e.starts_with("upper_"))
                || fs.read_link(&format!("{base}/{e}")).is_ok()
        })
        .collect();
    lower.extend(
        entries
            .iter()
            .filter_map(|e| e.strip_prefix("lower_").map(str::to_string)),
    );
    lower.sort();
    lower.dedup();
    let mut upper: Vec<String> = entries
        .iter()
        .filter_map(|e| e.strip_prefix("upper_").map(str::to_string))
        .collect();
    if let Some(master) = link_name(fs, &format!("{base}/master")) {
        upper.push(master);
    }
    upper.sort();
    upper.dedup();
    let (driver, pci_address, numa_node) = if has_device {
        let driver = link_name(fs, &format!("{base}/device/driver")).unwrap_or_default();
        match fs
            .canonical(&format!("{base}/device"))
            .ok()
            .and_then(|c| pci_of(&c))
        {
            Some((addr, dir)) => (driver, addr, numa(fs, &dir)),
            None => (driver, String::new(), NUMA_UNKNOWN),
        }
    } else {
        (String::new(), String::new(), NUMA_UNKNOWN)
    };
    // Reading speed fails on a link that is down, and -1 means unknown: both are 0 here.
    let speed = fs
        .read_string(&format!("{base}/speed"))
        .ok()
        .and_then(|s| parse::signed(&s).ok())
        .and_then(|s| u64::try_from(s).ok())
        .unwrap_or(0);
    Interface {
        name: name.to_string(),
        kind,
        mac_address: text(fs, &format!("{base}/address")).unwrap_or_default(),
        speed_mbps: speed,
        mtu: number(fs, &format!("{base}/mtu"))
            .and_then(|m| u32::try_from(m).ok())
            .unwrap_or(0),
        state: text(fs, &format!("{base}/operstate")).unwrap_or_default(),
        driver,
        pci_address,
        numa_node,
        lower,
        upper,
        addresses: Vec::new(),
    }
}

/// Addresses come from proc, as sysfs carries none: IPv6 with prefixes from if_inet6, IPv4
/// from the local leaves of the FIB and the connected routes that contain them.
fn addresses(fs: &dyn Fs, unreadable: &mut Vec<String>) -> Vec<parse::Address> {
    let mut out = Vec::new();
    match (
        fs.read_string("/proc/net/fib_trie"),
        fs.read_string("/proc/net/route"),
    ) {
        (Ok(trie), Ok(route)) => out.extend(parse::ipv4_addresses(&trie, &route)),
        _ => unreadable.push(
            "/proc/net/fib_trie and /proc/net/route: the IPv4 addresses of the interfaces".into(),
        ),
    }
    match fs.read_string("/proc/net/if_inet6") {
        Ok(t) => out.extend(parse::if_inet6(&t)),
        // A kernel without IPv6 has no such file; that is not a failure to read.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => unreadable.push(format!("/proc/net/if_inet6: {e}")),
    }
    out
}

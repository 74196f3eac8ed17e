//! Parsers for the kernel's text formats. Pure, total and fuzzed: every function takes
//! whatever bytes a file held and either answers or says what it could not read.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A parse failure, as a sentence fragment for the report's unreadable list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

// A CPU list longer than this is not a machine; refusing it keeps a corrupt file from
// allocating without bound.
const MAX_CPUS: u32 = 1 << 16;

/// `0-3,8,10-11` as used by `cpu/online` and `node*/cpulist`. Empty means none.
pub fn cpu_list(text: &str) -> Result<Vec<u32>, ParseError> {
    let text = text.trim();
    let mut out = Vec::new();
    if text.is_empty() {
        return Ok(out);
    }
    for part in text.split(',') {
        let part = part.trim();
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let n = num(part)?;
                (n, n)
            }
        };
        if lo > hi || hi >= MAX_CPUS {
            return Err(ParseError(format!("the CPU range {part:?} is not a range")));
        }
        out.extend(lo..=hi);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

fn num(s: &str) -> Result<u32, ParseError> {
    s.trim()
        .parse()
        .map_err(|_| ParseError(format!("{s:?} is not a number")))
}

/// A decimal file such as `size` or `mtu`.
pub fn decimal(text: &str) -> Result<u64, ParseError> {
    text.trim()
        .parse()
        .map_err(|_| ParseError(format!("{:?} is not a number", text.trim())))
}

/// A signed decimal such as `numa_node` (-1 for none) or `speed` (-1 for unknown).
pub fn signed(text: &str) -> Result<i64, ParseError> {
    text.trim()
        .parse()
        .map_err(|_| ParseError(format!("{:?} is not a number", text.trim())))
}

/// `/proc/meminfo` or a node's `meminfo` (`Node 0 MemTotal: 123 kB`): field → bytes.
pub fn meminfo(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.split_whitespace().last().unwrap_or_default();
        let mut words = value.split_whitespace();
        let Some(Ok(n)) = words.next().map(str::parse::<u64>) else {
            continue;
        };
        let bytes = match words.next() {
            Some("kB") => n.saturating_mul(1024),
            _ => n,
        };
        out.insert(key.to_string(), bytes);
    }
    out
}

/// A `uevent` file: `KEY=value` lines.
pub fn uevent(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The page size named by a `hugepages-2048kB` directory, in bytes.
pub fn huge_page_dir(name: &str) -> Option<u64> {
    let kb = name.strip_prefix("hugepages-")?.strip_suffix("kB")?;
    kb.parse::<u64>().ok()?.checked_mul(1024)
}

/// One interface address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub interface: String,
    pub address: IpAddr,
    pub prefix_len: u8,
}

/// `/proc/net/if_inet6`: `addr ifindex prefix scope flags name`, all hex.
pub fn if_inet6(text: &str) -> Vec<Address> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || f[0].len() != 32 || !f[0].is_ascii() {
            continue;
        }
        let Ok(bits) = u128::from_str_radix(f[0], 16) else {
            continue;
        };
        let Ok(prefix) = u8::from_str_radix(f[2], 16) else {
            continue;
        };
        if prefix > 128 {
            continue;
        }
        out.push(Address {
            interface: f[5].to_string(),
            address: IpAddr::V6(Ipv6Addr::from(bits)),
            prefix_len: prefix,
        });
    }
    out
}

/// A connected route from `/proc/net/route`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub interface: String,
    pub destination: Ipv4Addr,
    pub prefix_len: u8,
    pub gateway: Ipv4Addr,
}

/// `/proc/net/route`: little-endian hex fields after a header line.
pub fn routes(text: &str) -> Vec<Route> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 {
            continue;
        }
        let (Ok(dest), Ok(gw), Ok(mask)) = (
            u32::from_str_radix(f[1], 16),
            u32::from_str_radix(f[2], 16),
            u32::from_str_radix(f[7], 16),
        ) else {
            continue;
        };
        // The kernel prints the network-order word as a host-order number (x86 here).
        let mask = mask.swap_bytes();
        if mask.leading_ones() + mask.trailing_zeros() != 32 {
            continue;
        }
        out.push(Route {
            interface: f[0].to_string(),
            destination: Ipv4Addr::from(dest.swap_bytes()),
            prefix_len: u8::try_from(mask.leading_ones()).unwrap_or(32),
            gateway: Ipv4Addr::from(gw.swap_bytes()),
        });
    }
    out
}

/// The local IPv4 addresses listed in `/proc/net/fib_trie` (`/32 host LOCAL` leaves).
pub fn fib_trie_locals(text: &str) -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    let mut last: Option<Ipv4Addr> = None;
    for line in text.lines() {
        let t = line.trim_start_matches([' ', '|', '+', '-']).trim();
        if let Ok(addr) = t
            .split_whitespace()
            .next()
            .unwrap_or("")
            .parse::<Ipv4Addr>()
        {
            last = Some(addr);
            continue;
        }
        if t.starts_with("/32 host LOCAL")
            && let Some(a) = last
            && !out.contains(&a)
        {
            out.push(a);
        }
    }
    out
}

/// IPv4 addresses by interface: each local address is given the interface and prefix of
/// the narrowest connected route (no gateway) that contains it. sysfs carries no
/// addresses, so this is what the proc files allow without netlink.
pub fn ipv4_addresses(fib_trie: &str, route: &str) -> Vec<Address> {
    let routes = routes(route);
    let mut out = Vec::new();
    for addr in fib_trie_locals(fib_trie) {
        if addr.is_loopback() {
            out.push(Address {
                interface: "lo".into(),
                address: IpAddr::V4(addr),
                prefix_len: 8,
            });
            continue;
        }
        let best = routes
            .iter()
            .filter(|r| r.gateway.is_unspecified() && contains(r, addr))
            .max_by_key(|r| r.prefix_len);
        if let Some(r) = best {
            out.push(Address {
                interface: r.interface.clone(),
                address: IpAddr::V4(addr),
                prefix_len: r.prefix_len,
            });
        }
    }
    out
}

fn contains(r: &Route, addr: Ipv4Addr) -> bool {
    if r.prefix_len == 0 {
        return false;
    }
    let mask = u32::MAX << (32 - u32::from(r.prefix_len.min(32)));
    (u32::from(addr) & mask) == (u32::from(r.destination) & mask)
}

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub major: u32,
    pub minor: u32,
    pub mount_point: String,
    pub source: String,
}

/// `/proc/self/mountinfo`: `id parent major:minor root mountpoint opts ... - fstype source`.
pub fn mountinfo(text: &str) -> Vec<Mount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 5 {
            continue;
        }
        let Some((maj, min)) = f[2].split_once(':') else {
            continue;
        };
        let (Ok(major), Ok(minor)) = (maj.parse(), min.parse()) else {
            continue;
        };
        let source = f
            .iter()
            .position(|w| *w == "-")
            .and_then(|i| f.get(i + 2))
            .map_or(String::new(), |s| (*s).to_string());
        out.push(Mount {
            major,
            minor,
            mount_point: unescape_octal(f[4]),
            source,
        });
    }
    out
}

fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && let Some(Ok(v)) = b
                .get(i + 1..i + 4)
                .and_then(|d| std::str::from_utf8(d).ok())
                .map(|d| u8::from_str_radix(d, 8))
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Device paths in active use as swap, from `/proc/swaps`.
pub fn swaps(text: &str) -> Vec<String> {
    text.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// `major:minor` as in a block device's `dev` file.
pub fn dev_numbers(text: &str) -> Option<(u32, u32)> {
    let (a, b) = text.trim().split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// What the first bytes of a device say it carries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Content {
    /// `gpt` or `dos`.
    pub partition_table: Option<String>,
    pub signatures: Vec<String>,
}

/// How much of a device [`content`] reads: enough for the btrfs superblock at 64 KiB.
pub const CONTENT_BYTES: usize = 68 * 1024;

fn at(head: &[u8], offset: usize, magic: &[u8]) -> bool {
    head.get(offset..offset + magic.len()) == Some(magic)
}

/// Reads partition tables and filesystem signatures from the first [`CONTENT_BYTES`].
pub fn content(head: &[u8]) -> Content {
    let mut c = Content::default();
    if at(head, 512, b"EFI PART") || at(head, 4096, b"EFI PART") {
        c.partition_table = Some("gpt".into());
    } else if at(head, 510, &[0x55, 0xAA]) && mbr_has_partition(head) {
        c.partition_table = Some("dos".into());
    }
    let mut sig = |name: &str| c.signatures.push(name.to_string());
    if at(head, 1080, &[0x53, 0xEF]) {
        sig("ext4");
    }
    if at(head, 0, b"XFSB") {
        sig("xfs");
    }
    if at(head, 65600, b"_BHRfS_M") {
        sig("btrfs");
    }
    if at(head, 4086, b"SWAPSPACE2") || at(head, 4086, b"SWAP-SPACE") {
        sig("swap");
    }
    if at(head, 512, b"LABELONE") || at(head, 24, b"LVM2 001") {
        sig("LVM2_member");
    }
    if at(head, 0, b"LUKS\xba\xbe") {
        sig("crypto_LUKS");
    }
    if at(head, 32769, b"CD001") {
        sig("iso9660");
    }
    if at(head, 82, b"FAT32   ") || at(head, 54, b"FAT16   ") || at(head, 54, b"FAT12   ") {
        sig("vfat");
    }
    if at(head, 4096, b"\xfc\x4e\x2b\xa9") {
        sig("linux_raid_member");
    }
    if at(head, 0, b"ZBSSD") || at(head, 8192 + 16, b"\xc6\x85\x73\xf6\x4e\x1a\x45\xca") {
        sig("bcache");
    }
    c
}

// A 55AA marker alone is also the tail of a FAT boot sector; a table has at least one
// partition entry with a type.
fn mbr_has_partition(head: &[u8]) -> bool {
    (0..4).any(|i| head.get(446 + i * 16 + 4).is_some_and(|t| *t != 0))
}

/// A simplyblock logical-volume subsystem: `<prefix>:<cluster>:lvol:<volume>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeNqn {
    pub cluster: String,
    pub volume: String,
}

/// Parses a subsystem NQN as a simplyblock logical volume. Parsing rather than matching a
/// prefix keeps a product subsystem that is not a volume, and another vendor's, out.
pub fn volume_nqn(nqn: &str) -> Option<VolumeNqn> {
    let (rest, volume) = nqn.trim().split_once(":lvol:")?;
    let (prefix, cluster) = rest.rsplit_once(':')?;
    if !prefix.starts_with("nqn.") || cluster.is_empty() || volume.is_empty() {
        return None;
    }
    if volume.contains(':') {
        return None;
    }
    Some(VolumeNqn {
        cluster: cluster.to_string(),
        volume: volume.to_string(),
    })
}

/// A PCI address in the `dddd:bb:dd.f` form a deployment config names devices by.
pub fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(cpu_list("0-3,8\n").expect("ok"), vec![0, 1, 2, 3, 8]);
        assert_eq!(cpu_list("").expect("ok"), Vec::<u32>::new());
        assert!(cpu_list("3-1").is_err());
        assert!(cpu_list("0-99999999").is_err());
        assert!(cpu_list("a").is_err());
    }

    #[test]
    fn meminfo_in_bytes() {
        let m = meminfo("MemTotal:       16384 kB\nHugePages_Total:     4\nNode 1 MemFree: 2 kB\n");
        assert_eq!(m["MemTotal"], 16384 * 1024);
        assert_eq!(m["HugePages_Total"], 4);
        assert_eq!(m["MemFree"], 2048);
    }

    #[test]
    fn ipv4_from_trie_and_routes() {
        let trie = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n     |-- 10.0.2.0\n        /24 link UNICAST\n     |-- 10.0.2.15\n        /32 host LOCAL\n     |-- 127.0.0.1\n        /32 host LOCAL\n";
        let route = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\neth0\t00000000\t0202000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\neth0\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
        let a = ipv4_addresses(trie, route);
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].interface, "eth0");
        assert_eq!(a[0].address, "10.0.2.15".parse::<IpAddr>().expect("ip"));
        assert_eq!(a[0].prefix_len, 24);
    }

    #[test]
    fn inet6_lines() {
        let a = if_inet6("fe80000000000000505400fffe123456 02 40 20 80     eth0\nshort line\n");
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].prefix_len, 64);
    }

    #[test]
    fn mountinfo_lines() {
        let m = mountinfo("22 1 259:2 / /var/lib\\040data rw - ext4 /dev/nvme0n1p2 rw\n");
        assert_eq!(m[0].major, 259);
        assert_eq!(m[0].mount_point, "/var/lib data");
        assert_eq!(m[0].source, "/dev/nvme0n1p2");
    }

    #[test]
    fn content_signatures() {
        let mut head = vec![0u8; CONTENT_BYTES];
        assert_eq!(content(&head), Content::default());
        head[512..520].copy_from_slice(b"EFI PART");
        head[1080] = 0x53;
        head[1081] = 0xEF;
        let c = content(&head);
        assert_eq!(c.partition_table.as_deref(), Some("gpt"));
        assert_eq!(c.signatures, vec!["ext4".to_string()]);
        assert_eq!(content(&head[..100]), Content::default());
    }

    #[test]
    fn volume_nqns() {
        let v = volume_nqn("nqn.2023-02.io.simplyblock:c30a:lvol:792e").expect("volume");
        assert_eq!(v.cluster, "c30a");
        assert!(volume_nqn("nqn.2023-02.io.simplyblock:no-marker-here").is_none());
        assert!(volume_nqn("nqn.2014-08.org.nvmexpress:uuid:1234").is_none());
    }

    #[test]
    fn pci_addresses() {
        assert!(is_pci_address("0000:5e:00.0"));
        assert!(!is_pci_address("0000:5e:00"));
        assert!(!is_pci_address("virtio0"));
    }
}

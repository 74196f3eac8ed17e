//! Choosing the management interface and the data interfaces of a worker.

use std::net::IpAddr;

use crate::report::{Interface, InterfaceKind, NUMA_UNKNOWN, Report};

/// The chosen management interface and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub name: String,
    pub reason: String,
    /// The address the fleet-agreement rule reads: the InternalIP when it is here,
    /// otherwise the first reachable IPv4.
    pub network: Option<(IpAddr, u8)>,
}

fn bindable(k: InterfaceKind) -> bool {
    use InterfaceKind::*;
    matches!(
        k,
        Physical | Bond | Team | Vlan | Vxlan | Macvlan | Ipvlan | Bridge
    )
}

fn tier(k: InterfaceKind) -> u8 {
    use InterfaceKind::*;
    match k {
        Physical => 0,
        Bond | Team => 1,
        Vlan | Macvlan | Ipvlan => 2,
        _ => 3,
    }
}

fn up(i: &Interface) -> bool {
    matches!(i.state.as_str(), "up" | "unknown" | "")
}

/// Not link-local, multicast, loopback or unspecified.
pub fn reachable(a: &IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => {
            !(v.is_link_local() || v.is_multicast() || v.is_loopback() || v.is_unspecified())
        }
        IpAddr::V6(v) => {
            !(v.is_unicast_link_local()
                || v.is_multicast()
                || v.is_loopback()
                || v.is_unspecified())
        }
    }
}

fn find<'a>(r: &'a Report, name: &str) -> Option<&'a Interface> {
    r.interfaces.iter().find(|i| i.name == name)
}

/// Speed through the stack: an interface's own reading wins; an aggregate sums its
/// members; a derived interface takes its parent's.
pub fn resolved_speed(r: &Report, i: &Interface) -> u64 {
    speed(r, i, 0)
}

fn speed(r: &Report, i: &Interface, depth: u8) -> u64 {
    if i.speed_mbps > 0 || depth > 8 {
        return i.speed_mbps;
    }
    let lower = i.lower.iter().filter_map(|n| find(r, n));
    match i.kind {
        InterfaceKind::Bond | InterfaceKind::Team | InterfaceKind::Bridge => lower
            .map(|l| speed(r, l, depth + 1))
            .fold(0u64, u64::saturating_add),
        _ => lower
            .map(|l| speed(r, l, depth + 1))
            .find(|s| *s > 0)
            .unwrap_or(0),
    }
}

/// The memory node every member agrees on, or unknown.
pub fn resolved_numa(r: &Report, i: &Interface) -> i32 {
    numa(r, i, 0)
}

fn numa(r: &Report, i: &Interface, depth: u8) -> i32 {
    if i.lower.is_empty() || depth > 8 {
        return i.numa_node;
    }
    let nodes: Vec<i32> = i
        .lower
        .iter()
        .filter_map(|n| find(r, n))
        .map(|l| numa(r, l, depth + 1))
        .collect();
    match nodes.first() {
        Some(&n) if nodes.iter().all(|m| *m == n) => n,
        _ => NUMA_UNKNOWN,
    }
}

fn routable(i: &Interface) -> impl Iterator<Item = &crate::report::InterfaceAddress> {
    i.addresses.iter().filter(|a| reachable(&a.address))
}

/// The management ladder. Eligibility runs first (bindable kind, up, a bridge or overlay
/// only with the node address, a reachable address); then the interface holding the
/// InternalIP wins; otherwise speed, then kind tier, then name.
pub fn management(r: &Report, internal_ip: Option<IpAddr>) -> Option<Choice> {
    let holds_node =
        |i: &Interface| internal_ip.is_some_and(|ip| i.addresses.iter().any(|a| a.address == ip));
    let eligible: Vec<&Interface> = r
        .interfaces
        .iter()
        .filter(|i| bindable(i.kind))
        .filter(|i| up(i))
        .filter(|i| {
            !matches!(i.kind, InterfaceKind::Bridge | InterfaceKind::Vxlan) || holds_node(i)
        })
        .filter(|i| routable(i).next().is_some())
        .collect();
    if let Some(i) = eligible.iter().find(|i| holds_node(i)) {
        let ip = internal_ip?;
        let prefix = i
            .addresses
            .iter()
            .find(|a| a.address == ip)
            .map_or(32, |a| a.prefix_len);
        return Some(Choice {
            name: i.name.clone(),
            reason: format!("it holds the node's InternalIP {ip}"),
            network: Some((ip, prefix)),
        });
    }
    let best = eligible.into_iter().min_by(|a, b| {
        resolved_speed(r, b)
            .cmp(&resolved_speed(r, a))
            .then(tier(a.kind).cmp(&tier(b.kind)))
            .then(a.name.cmp(&b.name))
    })?;
    let network = best
        .addresses
        .iter()
        .find(|a| a.address.is_ipv4() && reachable(&a.address))
        .or_else(|| routable(best).next())
        .map(|a| (a.address, a.prefix_len));
    let why = match internal_ip {
        Some(ip) => format!(
            "no usable interface holds the node's InternalIP {ip}, and it is the fastest interface holding a reachable address"
        ),
        None => "the node reports no InternalIP, and it is the fastest interface holding a reachable address".into(),
    };
    Some(Choice {
        name: best.name.clone(),
        reason: why,
        network,
    })
}

/// Data-plane candidates: physical, bond or team; up; at least 10G; a reachable IPv4;
/// not the interface holding the InternalIP, which stays on management.
pub fn data_interfaces(r: &Report, internal_ip: Option<IpAddr>) -> Vec<String> {
    let candidates: Vec<&Interface> = r
        .interfaces
        .iter()
        .filter(|i| {
            matches!(
                i.kind,
                InterfaceKind::Physical | InterfaceKind::Bond | InterfaceKind::Team
            )
        })
        .filter(|i| matches!(i.state.as_str(), "up" | "unknown"))
        .filter(|i| resolved_speed(r, i) >= 10_000)
        .filter(|i| {
            i.addresses
                .iter()
                .any(|a| a.address.is_ipv4() && reachable(&a.address))
        })
        .filter(|i| !internal_ip.is_some_and(|ip| i.addresses.iter().any(|a| a.address == ip)))
        .collect();
    let key = |i: &Interface| {
        (
            i.mtu >= 9000,
            resolved_speed(r, i),
            matches!(i.kind, InterfaceKind::Bond | InterfaceKind::Team),
            i.driver.starts_with("mlx"),
        )
    };
    let Some(best) = candidates.iter().map(|i| key(i)).max() else {
        return Vec::new();
    };
    let mut names: Vec<String> = candidates
        .iter()
        .filter(|i| key(i) == best)
        .map(|i| i.name.clone())
        .collect();
    names.sort();
    names
}

/// The networks (address masked to its prefix) of an interface list, host routes left
/// out.
pub fn networks(r: &Report, names: &[String]) -> Vec<(IpAddr, u8)> {
    let mut out: Vec<(IpAddr, u8)> = r
        .interfaces
        .iter()
        .filter(|i| names.contains(&i.name))
        .flat_map(|i| i.addresses.iter())
        .filter(|a| reachable(&a.address))
        .filter_map(|a| network(a.address, a.prefix_len))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The network an address is on; `None` for a host route (/32, /128).
pub fn network(a: IpAddr, prefix: u8) -> Option<(IpAddr, u8)> {
    match a {
        IpAddr::V4(v) if prefix < 32 => {
            let mask = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(prefix))
            };
            Some((IpAddr::V4((u32::from(v) & mask).into()), prefix))
        }
        IpAddr::V6(v) if prefix < 128 => {
            let mask = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(prefix))
            };
            Some((IpAddr::V6((u128::from(v) & mask).into()), prefix))
        }
        _ => None,
    }
}

pub fn show((a, p): (IpAddr, u8)) -> String {
    format!("{a}/{p}")
}

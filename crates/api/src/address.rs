//! Whether a host reaches the caller itself or its node rather than another machine:
//! loopback, link-local (the node's metadata service) or unspecified, in any spelling a URL
//! parser or `inet_aton` turns into such an address (`2130706433`, `0x7f000001`, `127.1`,
//! `0177.0.0.1`, `[::ffff:127.0.0.1]`), and the names defined to be loopback
//! (`localhost`). A name that only resolves to such an address is found by resolving it;
//! [`local_address`] judges each address it resolves to.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What kind of local address a host is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Local {
    Loopback,
    LinkLocal,
    Unspecified,
}

impl std::fmt::Display for Local {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Local::Loopback => "loopback",
            Local::LinkLocal => "link-local",
            Local::Unspecified => "unspecified",
        })
    }
}

/// The host of a URL (`scheme://[userinfo@]host[:port][/…]`), lower-cased and
/// percent-decoded, without brackets; `None` when there is no authority.
pub fn url_host(url: &str) -> Option<String> {
    let (_, rest) = url.split_once("://")?;
    // A URL parser ends the authority at a backslash too.
    let authority = rest.split(['/', '?', '#', '\\']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    };
    Some(percent_decode(host).to_ascii_lowercase())
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `host` (a URL's host, with or without brackets, or a bare name or address) is
/// local, and how. A name other than the loopback names is not resolved here.
pub fn local_host(host: &str) -> Option<Local> {
    let host = percent_decode(host.trim()).to_ascii_lowercase();
    let host = host.strip_prefix('[').unwrap_or(&host);
    let host = host.strip_suffix(']').unwrap_or(host);
    if let Ok(ip) = host.parse::<IpAddr>() {
        return local_address(ip);
    }
    // A zone (`fe80::1%eth0`) names an interface of this node.
    if let Some((addr, _zone)) = host.split_once('%')
        && let Ok(ip) = addr.parse::<Ipv6Addr>()
    {
        return local_address(IpAddr::V6(ip)).or(Some(Local::LinkLocal));
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    if let Some(v4) = inet_aton(name) {
        return local_address(IpAddr::V4(v4));
    }
    let loopback_name = matches!(
        name,
        "localhost" | "localhost.localdomain" | "ip6-localhost" | "ip6-loopback"
    ) || name.ends_with(".localhost");
    loopback_name.then_some(Local::Loopback)
}

/// Whether `ip` is local, and how: IPv4 127/8, 169.254/16, 0/8; IPv6 `::1`, `fe80::/10`,
/// `::`; and IPv4-mapped (`::ffff:a.b.c.d`) or -compatible (`::a.b.c.d`) forms of those.
pub fn local_address(ip: IpAddr) -> Option<Local> {
    match ip {
        IpAddr::V4(v4) => local_v4(v4),
        IpAddr::V6(v6) => {
            if v6.is_loopback() {
                Some(Local::Loopback)
            } else if v6.is_unspecified() {
                Some(Local::Unspecified)
            } else if v6.segments()[0] & 0xffc0 == 0xfe80 {
                Some(Local::LinkLocal)
            } else if let Some(v4) = v6.to_ipv4() {
                // Mapped and compatible forms both reach the IPv4 address.
                local_v4(v4)
            } else {
                None
            }
        }
    }
}

fn local_v4(v4: Ipv4Addr) -> Option<Local> {
    if v4.is_loopback() {
        Some(Local::Loopback)
    } else if v4.is_link_local() {
        Some(Local::LinkLocal)
    } else if v4.octets()[0] == 0 {
        // 0/8 is "this host on this network": Linux connects 0.0.0.0 to itself.
        Some(Local::Unspecified)
    } else {
        None
    }
}

/// An IPv4 address in the spellings `inet_aton` and URL parsers accept: one to four parts,
/// each decimal, octal (leading `0`) or hex (`0x`), the last filling the remaining bytes.
fn inet_aton(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut numbers = Vec::with_capacity(parts.len());
    for part in &parts {
        let (digits, radix) =
            if let Some(h) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
                (h, 16)
            } else if part.len() > 1 && part.starts_with('0') {
                (&part[1..], 8)
            } else {
                (*part, 10)
            };
        if part.is_empty() {
            return None;
        }
        let n = if digits.is_empty() {
            0
        } else {
            u64::from_str_radix(digits, radix).ok()?
        };
        numbers.push(n);
    }
    let (last, leading) = numbers.split_last()?;
    if leading.iter().any(|&n| n > 255) {
        return None;
    }
    let tail_bytes = 4 - leading.len() as u32;
    if *last >= 1u64 << (8 * tail_bytes) {
        return None;
    }
    let mut value: u64 = 0;
    for &n in leading {
        value = (value << 8) | n;
    }
    value = (value << (8 * tail_bytes)) | last;
    Some(Ipv4Addr::from(value as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_local_address_is_local() {
        for (host, kind) in [
            ("127.0.0.1", Local::Loopback),
            ("127.1", Local::Loopback),
            ("127.0.1", Local::Loopback),
            ("2130706433", Local::Loopback),
            ("0x7f000001", Local::Loopback),
            ("0X7F.1", Local::Loopback),
            ("0177.0.0.1", Local::Loopback),
            ("127.0.0.1.", Local::Loopback),
            ("%31%32%37.0.0.1", Local::Loopback),
            ("localhost", Local::Loopback),
            ("LOCALHOST.", Local::Loopback),
            ("api.localhost", Local::Loopback),
            ("ip6-localhost", Local::Loopback),
            ("[::1]", Local::Loopback),
            ("::1", Local::Loopback),
            ("[0:0:0:0:0:0:0:1]", Local::Loopback),
            ("[::ffff:127.0.0.1]", Local::Loopback),
            ("[::ffff:7f00:1]", Local::Loopback),
            ("[::127.0.0.1]", Local::Loopback),
            ("169.254.169.254", Local::LinkLocal),
            ("2852039166", Local::LinkLocal),
            ("0xa9.0xfe.0xa9.0xfe", Local::LinkLocal),
            ("[::ffff:169.254.169.254]", Local::LinkLocal),
            ("[fe80::1]", Local::LinkLocal),
            ("[febf::1]", Local::LinkLocal),
            ("fe80::1%eth0", Local::LinkLocal),
            ("0.0.0.0", Local::Unspecified),
            ("0", Local::Unspecified),
            ("0.1.2.3", Local::Unspecified),
            ("[::]", Local::Unspecified),
            ("[::ffff:0.0.0.0]", Local::Unspecified),
        ] {
            assert_eq!(local_host(host), Some(kind), "{host}");
        }
    }

    #[test]
    fn ordinary_names_and_addresses_are_not_local() {
        for host in [
            "cp.example.com",
            "control-plane.example",
            "simplyblock-webappapi.simplyblock-system.svc",
            "localhost.example.com",
            "mylocalhost",
            "10.0.0.1",
            "167772161",
            "8.8.8.8",
            "128.0.0.1",
            "169.255.0.1",
            "[2001:db8::1]",
            "[fec0::1]",
            "[::ffff:10.0.0.1]",
            "1.2.3.4.5",
            "256.1.1.1",
            "0x1g",
        ] {
            assert_eq!(local_host(host), None, "{host}");
        }
    }

    #[test]
    fn the_host_of_an_endpoint_is_what_a_url_parser_connects_to() {
        for (url, host) in [
            ("https://2130706433/", "2130706433"),
            ("https://[::ffff:127.0.0.1]:8443/x", "::ffff:127.0.0.1"),
            ("https://user:pw@cp.example.com:5000", "cp.example.com"),
            ("https://evil.com@127.1/", "127.1"),
            ("https://LocalHost\\@evil.com/", "localhost"),
            ("http://cp.example?x=@127.0.0.1", "cp.example"),
        ] {
            assert_eq!(url_host(url).as_deref(), Some(host), "{url}");
        }
        assert_eq!(url_host("cp.example.com"), None);
        let local = |u: &str| url_host(u).and_then(|h| local_host(&h));
        assert_eq!(local("https://2130706433/"), Some(Local::Loopback));
        assert_eq!(local("https://[::ffff:127.0.0.1]/"), Some(Local::Loopback));
        assert_eq!(local("https://cp.example.com/"), None);
    }
}

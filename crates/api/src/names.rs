//! Names derived from other names, kept within Kubernetes' limits.
//!
//! A value that is already valid and fits is kept as it is. Anything that had to change
//! or be cut gets a suffix of 8 hex digits of a SHA-256 over the raw input, so two long
//! names sharing a prefix, or two that differ only in characters a name cannot hold, still
//! get two values.

use sha2::{Digest, Sha256};

/// The longest label value, and the longest name that is written into one.
pub const MAX_LABEL_VALUE: usize = 63;

/// A DNS-1123 subdomain, the form of a Kubernetes Node's name: what a worker name must be
/// before it is written into a host name.
pub const DNS_SUBDOMAIN_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// Whether `name` is a DNS-1123 subdomain ([`DNS_SUBDOMAIN_PATTERN`], at most 253
/// characters, labels of at most 63).
pub fn is_dns_subdomain(name: &str) -> bool {
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    !name.is_empty() && name.len() <= 253 && name.split('.').all(label)
}

/// The first 8 hex digits of SHA-256 over `input`.
pub fn digest8(input: &[u8]) -> String {
    Sha256::digest(input)
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Lower-cases, replaces everything outside `[a-z0-9.-]` with `-`, and trims both ends to
/// alphanumerics, as names and label values must start and end.
pub fn sanitize(input: &str) -> String {
    let mapped: String = input
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// Cuts a sanitized (ASCII) `s` to at most `max` bytes, trimming the cut end back to an
/// alphanumeric.
pub fn cut(s: &str, max: usize) -> &str {
    let s = &s[..s.len().min(max)];
    s.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
}

/// A label value for `input`.
pub fn label_value(input: &str) -> String {
    derive(input, input.as_bytes(), MAX_LABEL_VALUE)
}

/// A name of at most `limit` bytes for the parts joined with `-`. A natural name that fits
/// is kept readable, so two part lists can share one (`("a-b", "c")` and `("a", "b-c")`):
/// objects named this way are identified by their spec, never by the name. The digest,
/// when one is needed, is over the raw parts joined with NUL.
pub fn derived_name(parts: &[&str], limit: usize) -> String {
    let natural = parts.join("-");
    let raw = parts.join("\0");
    derive(&natural, raw.as_bytes(), limit)
}

fn derive(natural: &str, raw: &[u8], limit: usize) -> String {
    let clean = sanitize(natural);
    if clean.len() <= limit && clean == natural {
        return clean;
    }
    let digest = digest8(raw);
    let head = cut(&clean, limit.saturating_sub(digest.len() + 1));
    if head.is_empty() {
        digest
    } else {
        format!("{head}-{digest}")
    }
}

/// The name of the StorageNode for one slot of one worker in a cluster.
pub fn storage_node_name(cluster: &str, worker: &str, slot: i32) -> String {
    derived_name(&[cluster, worker, &slot.to_string()], MAX_LABEL_VALUE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_name_is_a_dns_subdomain_or_nothing() {
        for good in ["w1", "worker-1.example.com", "a", &"a".repeat(63)] {
            assert!(is_dns_subdomain(good), "{good}");
        }
        for bad in [
            "",
            "W1",
            "-w1",
            "w1-",
            "w1..x",
            "evil.com:80/x",
            "w1@h",
            "w 1",
            &"a".repeat(64),
            &format!("{}b", "a.".repeat(127)),
        ] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
    }

    fn valid(v: &str) -> bool {
        v.len() <= MAX_LABEL_VALUE
            && v.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric())
    }

    #[test]
    fn a_name_that_fits_is_kept() {
        assert_eq!(storage_node_name("sb", "worker-1", 0), "sb-worker-1-0");
        let at_limit = "a".repeat(63);
        assert_eq!(label_value(&at_limit), at_limit);
    }

    #[test]
    fn one_byte_past_the_limit_is_cut_with_a_digest() {
        let long = "a".repeat(64);
        let v = label_value(&long);
        assert_eq!(v.len(), 63);
        assert!(valid(&v), "{v}");
        assert!(v.ends_with(&format!("-{}", digest8(long.as_bytes()))));
    }

    #[test]
    fn long_names_sharing_a_prefix_stay_apart() {
        let worker = "w".repeat(70);
        let a = storage_node_name("cluster", &format!("{worker}-a"), 0);
        let b = storage_node_name("cluster", &format!("{worker}-b"), 0);
        assert_ne!(a, b);
        assert!(valid(&a) && valid(&b), "{a} {b}");
        // And one slot from another.
        assert_ne!(
            storage_node_name("cluster", &worker, 0),
            storage_node_name("cluster", &worker, 1)
        );
    }

    #[test]
    fn a_cut_name_digests_the_raw_parts() {
        let long = "x".repeat(60);
        assert_ne!(
            derived_name(&[&long, "a-b", "c"], 63),
            derived_name(&[&long, "a", "b-c"], 63)
        );
    }

    #[test]
    fn odd_characters_become_a_valid_name() {
        let v = storage_node_name("sb", "Worker_1.Example.COM", 2);
        assert!(valid(&v), "{v}");
        assert!(v.starts_with("sb-worker-1.example.com-2-"), "{v}");
    }
}

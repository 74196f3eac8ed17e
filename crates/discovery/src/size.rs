//! Sizes as people write them: the `driveSizeRange` filter and the binary sizes in group
//! names and notes. Units are binary (K = 1024), which is what the group names use, so a
//! size copied from a group name into the filter means what the name meant.

use simplyblock_api::quantity;

use crate::Error;

const UNITS: [(char, u32); 5] = [('K', 1), ('M', 2), ('G', 3), ('T', 4), ('P', 5)];

/// An inclusive size range; `max == 0` means no upper bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeRange {
    pub min: u64,
    pub max: u64,
    /// The range as the filter wrote it, which is how refusals quote it.
    pub text: String,
}

impl SizeRange {
    pub fn contains(&self, size: u64) -> bool {
        size >= self.min && (self.max == 0 || size <= self.max)
    }
}

/// Parses `100G-2T`, `500G-`, `-2T`, or `1T` (exactly that size). Errors are worded for
/// the admission webhook to show as they are.
pub fn parse_size_range(input: &str) -> Result<SizeRange, Error> {
    let fail = |detail: &str| Error::SizeRange {
        input: input.to_string(),
        detail: detail.to_string(),
    };
    let text = input.trim();
    if text.is_empty() {
        return Err(fail("it is empty"));
    }
    let (min, max) = match text.split_once('-') {
        None => {
            let n = parse_size(text).map_err(|e| fail(&e.to_string()))?;
            if n == 0 {
                return Err(fail("an exact size of zero matches no device"));
            }
            (n, n)
        }
        Some((a, b)) => {
            if b.contains('-') {
                return Err(fail("it has more than one '-'"));
            }
            let (a, b) = (a.trim(), b.trim());
            if a.is_empty() && b.is_empty() {
                return Err(fail("it names neither a lower nor an upper bound"));
            }
            let min = if a.is_empty() {
                0
            } else {
                parse_size(a).map_err(|e| fail(&format!("the lower bound {e}")))?
            };
            let max = if b.is_empty() {
                0
            } else {
                let m = parse_size(b).map_err(|e| fail(&format!("the upper bound {e}")))?;
                if m == 0 {
                    return Err(fail("an upper bound of zero matches no device"));
                }
                m
            };
            if max != 0 && min > max {
                return Err(fail("the lower bound is larger than the upper bound"));
            }
            (min, max)
        }
    };
    Ok(SizeRange {
        min,
        max,
        text: text.to_string(),
    })
}

/// One bound of a range: the shared size reader with K, M, G, T and P as powers of 1024
/// (`i` and `B` allowed after them), the units the group names are written in; a bare
/// number is bytes.
fn parse_size(text: &str) -> Result<u64, quantity::QuantityError> {
    quantity::parse_with_binary_letters(text)
}

/// A size in binary units: whole units exactly (`2T`), otherwise truncated to three
/// decimals (`3.492T`), never rounded up so the text never claims more than there is.
pub fn format_binary(bytes: u64) -> String {
    let mut unit = ' ';
    let mut scale: u128 = 1;
    for (c, p) in UNITS {
        let s = 1024u128.pow(p);
        if u128::from(bytes) >= s {
            unit = c;
            scale = s;
        }
    }
    if unit == ' ' {
        return format!("{bytes}B");
    }
    let b = u128::from(bytes);
    let whole = b / scale;
    let thousandths = (b % scale) * 1000 / scale;
    if thousandths == 0 {
        return format!("{whole}{unit}");
    }
    let frac = format!("{thousandths:03}");
    format!("{whole}.{}{unit}", frac.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;
    const T: u64 = 1 << 40;

    #[test]
    fn the_four_shapes() {
        let r = parse_size_range("100G-2T").expect("range");
        assert_eq!((r.min, r.max), (100 * G, 2 * T));
        let r = parse_size_range("500G-").expect("open top");
        assert_eq!((r.min, r.max), (500 * G, 0));
        assert!(r.contains(u64::MAX));
        let r = parse_size_range("-2T").expect("open bottom");
        assert_eq!((r.min, r.max), (0, 2 * T));
        let r = parse_size_range("1T").expect("exact");
        assert_eq!((r.min, r.max), (T, T));
        assert!(r.contains(T) && !r.contains(T + 1) && !r.contains(T - 1));
    }

    #[test]
    fn bounds_are_inclusive() {
        let r = parse_size_range("1T-2T").expect("range");
        assert!(r.contains(T) && r.contains(2 * T));
        assert!(!r.contains(2 * T + 1));
    }

    #[test]
    fn errors_say_what_is_wrong() {
        for (bad, says) in [
            ("", "empty"),
            ("-", "neither"),
            ("2T-1T", "larger"),
            ("1X", "unit"),
            ("G", "number"),
            ("1T-2T-3T", "more than one"),
            ("0", "zero"),
            ("99999999999P", "too large"),
        ] {
            let err = parse_size_range(bad).expect_err(bad).to_string();
            assert!(err.contains(says), "{bad}: {err}");
            assert!(err.contains("100G-2T"), "the hint is in every error: {err}");
        }
    }

    #[test]
    fn fractions_and_suffixes() {
        assert_eq!(parse_size("1.5T"), Ok(T + T / 2));
        assert_eq!(parse_size("1920GiB"), Ok(1920 * G));
        assert_eq!(parse_size("4096"), Ok(4096));
    }

    #[test]
    fn binary_rendering_never_rounds_up() {
        assert_eq!(format_binary(2 * T), "2T");
        assert_eq!(format_binary(T - 1), "1023.999G");
        assert_eq!(format_binary(3_840_000_000_000), "3.492T");
        assert_eq!(format_binary(512), "512B");
        // What it writes parses back to no more than the value.
        for v in [3_840_000_000_000u64, T - 1, 5 * G + 7] {
            assert!(parse_size(&format_binary(v)).expect("parses") <= v);
        }
    }
}

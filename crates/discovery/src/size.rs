//! Sizes as people write them: the `driveSizeRange` filter and the binary sizes in group
//! names and notes. Units are binary (K = 1024), which is what the group names use.

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
            let n = parse_size(text).map_err(|d| fail(&d))?;
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
                parse_size(a).map_err(|d| fail(&format!("the lower bound {d}")))?
            };
            let max = if b.is_empty() {
                0
            } else {
                let m = parse_size(b).map_err(|d| fail(&format!("the upper bound {d}")))?;
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

/// One size: digits with an optional fraction and a unit K, M, G, T or P (optionally
/// followed by `i`, `B` or `iB`); a bare number is bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    if number.is_empty() || number.starts_with('.') || number.ends_with('.') {
        return Err(format!("{s:?} does not start with a number"));
    }
    let unit_upper = unit.to_ascii_uppercase();
    let power = match unit_upper.as_str() {
        "" | "B" => 0,
        u => {
            let mut chars = u.chars();
            let letter = chars.next().unwrap_or(' ');
            let rest: String = chars.collect();
            let Some((_, p)) = UNITS.iter().find(|(c, _)| *c == letter) else {
                return Err(format!("{s:?} has the unit {unit:?}; use K, M, G, T or P"));
            };
            if !matches!(rest.as_str(), "" | "I" | "B" | "IB") {
                return Err(format!("{s:?} has the unit {unit:?}; use K, M, G, T or P"));
            }
            *p
        }
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if frac.contains('.') {
        return Err(format!("{s:?} is not a number"));
    }
    let scale = 1024u128.pow(power);
    let whole: u128 = whole
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))?;
    let mut value = whole
        .checked_mul(scale)
        .ok_or_else(|| format!("{s:?} is too large"))?;
    if !frac.is_empty() {
        let digits = frac.len().min(18);
        let f: u128 = frac[..digits]
            .parse()
            .map_err(|_| format!("{s:?} is not a number"))?;
        value += f * scale / 10u128.pow(u32::try_from(digits).unwrap_or(18));
    }
    u64::try_from(value).map_err(|_| format!("{s:?} is too large"))
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

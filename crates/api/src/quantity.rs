//! Sizes as people write them in specs and parameters, read one way everywhere.
//!
//! A size is a number, optionally with a fraction, and optionally a unit, which may end
//! in `B`:
//!
//! - SI units are powers of 1000: `k` (or `K`), `M`, `G`, `T`, `P`.
//! - IEC units are powers of 1024: `Ki`, `Mi`, `Gi`, `Ti`, `Pi`.
//! - A bare number is bytes.
//!
//! This is how the control plane reads sizes (`10G` is 10^9 bytes, `10Gi` is 2^30), so a
//! size means the same in a spec as in the call it becomes. Letters are read in either
//! case (`500gi`), as the reference's own parser reads them. Fractions are exact:
//! `1.5Ti` is 1.5 × 2^40 bytes, and what falls below one byte is dropped.
//!
//! A field documented otherwise says so where it is read, by a named choice of
//! [`Reading`]: [`parse_with_default_unit`] for a bare number in another unit,
//! [`parse_with_binary_letters`] for `K`…`P` as powers of 1024.

use std::fmt;

/// A unit a size can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    B,
    K,
    M,
    G,
    T,
    P,
    Ki,
    Mi,
    Gi,
    Ti,
    Pi,
}

impl Unit {
    /// Every unit, bytes first, then SI, then IEC.
    pub const ALL: [Unit; 11] = [
        Unit::B,
        Unit::K,
        Unit::M,
        Unit::G,
        Unit::T,
        Unit::P,
        Unit::Ki,
        Unit::Mi,
        Unit::Gi,
        Unit::Ti,
        Unit::Pi,
    ];

    /// How many bytes one of the unit is.
    pub const fn bytes(self) -> u64 {
        match self {
            Unit::B => 1,
            Unit::K => 1_000,
            Unit::M => 1_000_000,
            Unit::G => 1_000_000_000,
            Unit::T => 1_000_000_000_000,
            Unit::P => 1_000_000_000_000_000,
            Unit::Ki => 1 << 10,
            Unit::Mi => 1 << 20,
            Unit::Gi => 1 << 30,
            Unit::Ti => 1 << 40,
            Unit::Pi => 1 << 50,
        }
    }

    /// The unit as it is written after a number.
    pub const fn symbol(self) -> &'static str {
        match self {
            Unit::B => "B",
            Unit::K => "k",
            Unit::M => "M",
            Unit::G => "G",
            Unit::T => "T",
            Unit::P => "P",
            Unit::Ki => "Ki",
            Unit::Mi => "Mi",
            Unit::Gi => "Gi",
            Unit::Ti => "Ti",
            Unit::Pi => "Pi",
        }
    }

    /// The IEC unit of the same letter (`G` → `Gi`); bytes and IEC units are themselves.
    const fn binary(self) -> Unit {
        match self {
            Unit::K => Unit::Ki,
            Unit::M => Unit::Mi,
            Unit::G => Unit::Gi,
            Unit::T => Unit::Ti,
            Unit::P => Unit::Pi,
            other => other,
        }
    }
}

/// What the letters `K`, `M`, `G`, `T` and `P` without an `i` mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Letters {
    /// Powers of 1000 (SI), as the control plane reads them.
    Decimal,
    /// Powers of 1024, as a field documented in binary units reads them.
    Binary,
}

/// How a field reads its sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// The unit of a bare number.
    pub bare: Unit,
    /// What the letters without an `i` mean.
    pub letters: Letters,
}

impl Reading {
    /// A bare number is bytes, the letters are SI: how the control plane reads sizes.
    pub const STANDARD: Reading = Reading {
        bare: Unit::B,
        letters: Letters::Decimal,
    };
}

/// Why a text is not a size; each says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuantityError {
    Empty,
    Negative {
        text: String,
    },
    NoNumber {
        text: String,
    },
    BadNumber {
        text: String,
    },
    UnknownUnit {
        text: String,
        unit: String,
        letters: Letters,
    },
    FractionOfAByte {
        text: String,
    },
    TooLarge {
        text: String,
    },
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuantityError::Empty => write!(
                f,
                "the size is empty; write a number of bytes or a number with a unit, such as 500Gi or 2T"
            ),
            QuantityError::Negative { text } => {
                write!(f, "{text:?} is negative; a size is zero or more")
            }
            QuantityError::NoNumber { text } => write!(
                f,
                "{text:?} does not start with a number; write the number before its unit, such as 500Gi or 2T"
            ),
            QuantityError::BadNumber { text } => write!(
                f,
                "{text:?} is not a number: write digits with at most one decimal point, and digits on both sides of it, such as 1.5Ti or 0.5G"
            ),
            QuantityError::UnknownUnit {
                text,
                unit,
                letters: Letters::Decimal,
            } => write!(
                f,
                "{text:?} has the unit {unit:?}; use k, M, G, T or P (powers of 1000) or Ki, Mi, Gi, Ti or Pi (powers of 1024), optionally followed by B"
            ),
            QuantityError::UnknownUnit {
                text,
                unit,
                letters: Letters::Binary,
            } => write!(
                f,
                "{text:?} has the unit {unit:?}; use K, M, G, T or P (powers of 1024 here), optionally followed by i or B"
            ),
            QuantityError::FractionOfAByte { text } => write!(
                f,
                "{text:?} is a fraction of a byte; write whole bytes, or give a unit, such as 1.5Ki"
            ),
            QuantityError::TooLarge { text } => write!(
                f,
                "{text:?} is too large: the largest size is {} bytes; write a smaller size",
                u64::MAX
            ),
        }
    }
}

impl std::error::Error for QuantityError {}

/// Bytes for `text` read the standard way: SI and IEC units, a bare number is bytes.
pub fn parse(text: &str) -> Result<u64, QuantityError> {
    parse_with(text, Reading::STANDARD)
}

/// Bytes for `text` read the standard way, except that a bare number is in `unit`: for
/// fields documented as, say, "a bare number is gigabytes".
pub fn parse_with_default_unit(text: &str, unit: Unit) -> Result<u64, QuantityError> {
    parse_with(
        text,
        Reading {
            bare: unit,
            ..Reading::STANDARD
        },
    )
}

/// Bytes for `text` with `K`, `M`, `G`, `T` and `P` read as powers of 1024, with or
/// without an `i`: for fields documented in binary units. A bare number is bytes.
pub fn parse_with_binary_letters(text: &str) -> Result<u64, QuantityError> {
    parse_with(
        text,
        Reading {
            bare: Unit::B,
            letters: Letters::Binary,
        },
    )
}

/// Bytes for `text` read as `reading` says.
pub fn parse_with(text: &str, reading: Reading) -> Result<u64, QuantityError> {
    let trimmed = text.trim();
    let owned = || trimmed.to_string();
    if trimmed.is_empty() {
        return Err(QuantityError::Empty);
    }
    if trimmed.starts_with('-') {
        return Err(QuantityError::Negative { text: owned() });
    }
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit_text) = trimmed.split_at(split);
    if number.is_empty() {
        return Err(QuantityError::NoNumber { text: owned() });
    }
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let has_point = number.contains('.');
    if whole.is_empty() || (has_point && fraction.is_empty()) || fraction.contains('.') {
        return Err(QuantityError::BadNumber { text: owned() });
    }
    let unit =
        read_unit(unit_text.trim_start(), reading).ok_or_else(|| QuantityError::UnknownUnit {
            text: owned(),
            unit: unit_text.trim_start().to_string(),
            letters: reading.letters,
        })?;
    let scale = u128::from(unit.bytes());
    let too_large = || QuantityError::TooLarge { text: owned() };
    let mut whole_value: u128 = 0;
    for d in whole.bytes() {
        whole_value = whole_value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u128::from(d - b'0')))
            .ok_or_else(too_large)?;
    }
    let (fraction_bytes, exact) = fraction_of(fraction, scale);
    if unit == Unit::B && !exact {
        return Err(QuantityError::FractionOfAByte { text: owned() });
    }
    whole_value
        .checked_mul(scale)
        .and_then(|v| v.checked_add(fraction_bytes))
        .and_then(|v| u64::try_from(v).ok())
        .ok_or_else(too_large)
}

/// The unit `text` names (letters in either case, an optional trailing `B`).
fn read_unit(text: &str, reading: Reading) -> Option<Unit> {
    let lower = text.to_ascii_lowercase();
    if lower.is_empty() {
        return Some(reading.bare);
    }
    if lower == "b" {
        return Some(Unit::B);
    }
    let core = lower.strip_suffix('b').unwrap_or(&lower);
    let letter = match core.trim_end_matches('i') {
        "k" => Unit::K,
        "m" => Unit::M,
        "g" => Unit::G,
        "t" => Unit::T,
        "p" => Unit::P,
        _ => return None,
    };
    match (core.len(), reading.letters) {
        (1, Letters::Decimal) => Some(letter),
        (1, Letters::Binary) | (2, _) => Some(letter.binary()),
        _ => None,
    }
}

/// `0.<digits>` × `scale`, rounded down, and whether that was exact.
///
/// Read from the last digit to the first: with `f` the floor of `0.<rest>` × `scale`, the
/// floor of `0.<d><rest>` × `scale` is `(d × scale + f) / 10` in integers, because adding
/// a fraction below 1 to an integer never crosses a multiple of 10. Exact for any
/// number of digits, in integers no larger than 10 × `scale`.
fn fraction_of(digits: &str, scale: u128) -> (u128, bool) {
    let mut floor = 0u128;
    let mut exact = true;
    for d in digits.bytes().rev() {
        let numerator = u128::from(d - b'0') * scale + floor;
        // Whole only while every step divides evenly: once one leaves a remainder, the
        // steps before it add a fraction to an integer.
        exact &= numerator.is_multiple_of(10);
        floor = numerator / 10;
    }
    (floor, exact)
}

/// `bytes` written in `unit`, exactly (`1536` in `Ki` is `1.5Ki`): [`parse`] reads it
/// back to `bytes`.
pub fn format_exact(bytes: u64, unit: Unit) -> String {
    let scale = unit.bytes();
    let whole = bytes / scale;
    let mut remainder = u128::from(bytes % scale);
    let mut out = whole.to_string();
    if remainder != 0 {
        out.push('.');
        // Every unit is 2^a × 5^b bytes, so the decimal expansion ends.
        while remainder != 0 {
            remainder *= 10;
            let digit = remainder / u128::from(scale);
            remainder %= u128::from(scale);
            out.push(char::from(b'0' + digit as u8));
        }
    }
    out.push_str(unit.symbol());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GI: u64 = 1 << 30;
    const TI: u64 = 1 << 40;

    #[test]
    fn every_unit_is_its_power() {
        for (text, bytes) in [
            ("4096", 4096),
            ("4096B", 4096),
            ("1k", 1_000),
            ("1K", 1_000),
            ("1KB", 1_000),
            ("1M", 1_000_000),
            ("1MB", 1_000_000),
            ("1G", 1_000_000_000),
            ("1GB", 1_000_000_000),
            ("1T", 1_000_000_000_000),
            ("1P", 1_000_000_000_000_000),
            ("1PB", 1_000_000_000_000_000),
            ("1Ki", 1 << 10),
            ("1KiB", 1 << 10),
            ("1Mi", 1 << 20),
            ("1Gi", GI),
            ("1GiB", GI),
            ("1Ti", TI),
            ("1Pi", 1 << 50),
            ("1PiB", 1 << 50),
            ("0", 0),
            ("0Ti", 0),
        ] {
            assert_eq!(parse(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn letters_are_read_in_either_case_and_around_spaces() {
        for (text, bytes) in [
            ("500gi", 500 * GI),
            ("500GI", 500 * GI),
            ("500gib", 500 * GI),
            ("2t", 2_000_000_000_000),
            ("2tb", 2_000_000_000_000),
            (" 500Gi ", 500 * GI),
            ("500 Gi", 500 * GI),
        ] {
            assert_eq!(parse(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn fractions_are_exact_and_round_down_below_a_byte() {
        for (text, bytes) in [
            ("1.5Ti", TI + TI / 2),
            ("1.92T", 1_920_000_000_000),
            ("0.5G", 500_000_000),
            ("1.0", 1),
            ("2.50Ki", 2560),
            // 0.1 × 1024 is 102.4 bytes.
            ("0.1Ki", 102),
            // Digits past any that matter change nothing, and are not read as a float.
            ("1.00000000000000000000000000000000000001Ki", 1024),
            ("0.99999999999999999999999999999999999999Ki", 1023),
        ] {
            assert_eq!(parse(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn a_field_can_choose_the_unit_of_a_bare_number() {
        assert_eq!(parse_with_default_unit("100", Unit::G), Ok(100_000_000_000));
        assert_eq!(parse_with_default_unit("1.5", Unit::Gi), Ok(GI + GI / 2));
        // A written unit wins over the default.
        assert_eq!(parse_with_default_unit("4096B", Unit::G), Ok(4096));
        assert_eq!(parse_with_default_unit("8Gi", Unit::G), Ok(8 * GI));
    }

    #[test]
    fn a_field_can_read_letters_as_binary() {
        for (text, bytes) in [
            ("1T", TI),
            ("1Ti", TI),
            ("1TB", TI),
            ("1tib", TI),
            ("100G", 100 * GI),
            ("1.5T", TI + TI / 2),
            ("4096", 4096),
        ] {
            assert_eq!(parse_with_binary_letters(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn errors_say_what_is_wrong_and_what_to_write() {
        for (text, says) in [
            (
                "",
                "the size is empty; write a number of bytes or a number with a unit, such as 500Gi or 2T",
            ),
            (
                "  ",
                "the size is empty; write a number of bytes or a number with a unit, such as 500Gi or 2T",
            ),
            ("-1G", "\"-1G\" is negative; a size is zero or more"),
            (
                "G",
                "\"G\" does not start with a number; write the number before its unit, such as 500Gi or 2T",
            ),
            (
                "lots",
                "\"lots\" does not start with a number; write the number before its unit, such as 500Gi or 2T",
            ),
            (
                ".5G",
                "\".5G\" is not a number: write digits with at most one decimal point, and digits on both sides of it, such as 1.5Ti or 0.5G",
            ),
            (
                "1.G",
                "\"1.G\" is not a number: write digits with at most one decimal point, and digits on both sides of it, such as 1.5Ti or 0.5G",
            ),
            (
                "1.2.3G",
                "\"1.2.3G\" is not a number: write digits with at most one decimal point, and digits on both sides of it, such as 1.5Ti or 0.5G",
            ),
            (
                "12X",
                "\"12X\" has the unit \"X\"; use k, M, G, T or P (powers of 1000) or Ki, Mi, Gi, Ti or Pi (powers of 1024), optionally followed by B",
            ),
            (
                "1Gii",
                "\"1Gii\" has the unit \"Gii\"; use k, M, G, T or P (powers of 1000) or Ki, Mi, Gi, Ti or Pi (powers of 1024), optionally followed by B",
            ),
            (
                "1E",
                "\"1E\" has the unit \"E\"; use k, M, G, T or P (powers of 1000) or Ki, Mi, Gi, Ti or Pi (powers of 1024), optionally followed by B",
            ),
            (
                "1.5",
                "\"1.5\" is a fraction of a byte; write whole bytes, or give a unit, such as 1.5Ki",
            ),
            (
                "1.5B",
                "\"1.5B\" is a fraction of a byte; write whole bytes, or give a unit, such as 1.5Ki",
            ),
            (
                "18446744073709551616",
                "\"18446744073709551616\" is too large: the largest size is 18446744073709551615 bytes; write a smaller size",
            ),
            (
                "18447P",
                "\"18447P\" is too large: the largest size is 18446744073709551615 bytes; write a smaller size",
            ),
            (
                "99999999999999999999999999999999999999999Ki",
                "\"99999999999999999999999999999999999999999Ki\" is too large: the largest size is 18446744073709551615 bytes; write a smaller size",
            ),
        ] {
            let err = parse(text).expect_err(text);
            assert_eq!(err.to_string(), says, "{text:?}");
        }
        assert_eq!(
            parse_with_binary_letters("1X")
                .expect_err("unit")
                .to_string(),
            "\"1X\" has the unit \"X\"; use K, M, G, T or P (powers of 1024 here), optionally followed by i or B"
        );
    }

    #[test]
    fn the_largest_size_is_read_and_one_byte_more_is_not() {
        assert_eq!(parse("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse("16383.5Pi"), Ok(u64::MAX - (1 << 49) + 1));
        assert_eq!(parse(&format_exact(u64::MAX, Unit::Pi)), Ok(u64::MAX));
        assert!(matches!(
            parse("16384Pi"),
            Err(QuantityError::TooLarge { .. })
        ));
    }

    #[test]
    fn formatting_is_exact() {
        assert_eq!(format_exact(1536, Unit::Ki), "1.5Ki");
        assert_eq!(format_exact(TI, Unit::Ti), "1Ti");
        assert_eq!(format_exact(1_920_000_000_000, Unit::T), "1.92T");
        assert_eq!(
            format_exact(1, Unit::Pi),
            "0.00000000000000088817841970012523233890533447265625Pi"
        );
        assert_eq!(format_exact(4096, Unit::B), "4096B");
        assert_eq!(format_exact(0, Unit::G), "0G");
    }

    proptest! {
        #[test]
        fn a_size_formatted_in_any_unit_reads_back_to_itself(bytes in any::<u64>(), unit in proptest::sample::select(Unit::ALL.to_vec())) {
            let text = format_exact(bytes, unit);
            prop_assert_eq!(parse(&text), Ok(bytes), "{}", text);
        }

        #[test]
        fn small_and_round_sizes_read_back_too(count in 0u64..100_000, unit in proptest::sample::select(Unit::ALL.to_vec())) {
            let bytes = count.saturating_mul(unit.bytes());
            prop_assert_eq!(parse(&format_exact(bytes, unit)), Ok(bytes));
        }
    }
}

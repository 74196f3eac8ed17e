//! When a read is tried again: the pause before each retry, a random part of a ceiling that
//! doubles per retry up to a cap.

use std::time::Duration;

/// The longest pause between two attempts of a read, however many came before.
pub const RETRY_CAP: Duration = Duration::from_secs(10);

/// The pause before retry `attempt` (1 for the first retry): a uniform draw (`draw` in
/// `[0, 1)`) below `base` doubled per earlier retry, capped at `cap`. Full jitter, so
/// clients that failed together do not come back together.
pub fn retry_delay(attempt: u32, base: Duration, cap: Duration, draw: f64) -> Duration {
    let doublings = attempt.saturating_sub(1).min(31);
    let ceiling = base.saturating_mul(1 << doublings).min(cap);
    ceiling.mul_f64(draw.clamp(0.0, 1.0))
}

/// A draw in `[0, 1)`, different at each call and in each process (no dependency for
/// what needs no cryptographic quality): the random part of [`retry_delay`].
pub fn draw() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|t| t.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_pause_is_a_draw_below_a_doubling_ceiling_that_stops_at_the_cap() {
        let (base, cap) = (Duration::from_millis(200), Duration::from_secs(10));
        for attempt in 1..=40 {
            let ceiling = retry_delay(attempt, base, cap, 1.0);
            let expected = (base * 2u32.pow((attempt - 1).min(10))).min(cap);
            assert_eq!(ceiling, expected, "attempt {attempt}");
            assert_eq!(retry_delay(attempt, base, cap, 0.0), Duration::ZERO);
            let d = retry_delay(attempt, base, cap, draw());
            assert!(d <= ceiling, "attempt {attempt}: {d:?} above {ceiling:?}");
        }
        assert_eq!(retry_delay(u32::MAX, base, cap, 1.0), cap);
        let draws: Vec<f64> = (0..100).map(|_| draw()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        assert!(
            draws.windows(2).any(|w| w[0] != w[1]),
            "the draws are not all alike"
        );
    }
}

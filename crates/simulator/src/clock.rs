//! Simulated time. Sim time runs at `scale` times real time from an anchor; a scale of 0
//! freezes it so a test can move it only by [`SimClock::advance`]. All state machines
//! read this clock, never the wall clock, so tests run minutes of control-plane time in
//! milliseconds and the demo can run at 1.

use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Anchor {
    real: Instant,
    sim_ms: i64,
    scale: f64,
}

#[derive(Debug)]
pub struct SimClock {
    inner: Mutex<Anchor>,
}

impl SimClock {
    pub fn new(start_ms: i64, scale: f64) -> Self {
        Self {
            inner: Mutex::new(Anchor {
                real: Instant::now(),
                sim_ms: start_ms,
                scale: scale.max(0.0),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Anchor> {
        // A poisoned clock still holds a valid anchor.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn at(a: &Anchor, now: Instant) -> i64 {
        let real = now.duration_since(a.real).as_secs_f64() * 1000.0;
        a.sim_ms + (real * a.scale) as i64
    }

    /// Sim time, milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        let a = self.lock();
        Self::at(&a, Instant::now())
    }

    pub fn scale(&self) -> f64 {
        self.lock().scale
    }

    pub fn set_scale(&self, scale: f64) {
        let mut a = self.lock();
        let now = Instant::now();
        a.sim_ms = Self::at(&a, now);
        a.real = now;
        a.scale = scale.max(0.0);
    }

    /// Jump forward by `ms` of sim time.
    pub fn advance(&self, ms: i64) {
        let mut a = self.lock();
        a.sim_ms += ms.max(0);
    }

    /// The real time until `sim_ms` of sim time have passed, `None` when frozen.
    pub fn real_delay(&self, sim_ms: i64) -> Option<Duration> {
        let scale = self.scale();
        if scale <= 0.0 {
            return None;
        }
        Some(Duration::from_secs_f64(
            (sim_ms.max(0) as f64 / 1000.0) / scale,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frozen_clock_moves_only_when_advanced() {
        let c = SimClock::new(1_000, 0.0);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(c.now_ms(), 1_000);
        c.advance(500);
        assert_eq!(c.now_ms(), 1_500);
        assert_eq!(c.real_delay(10), None);
    }

    #[test]
    fn scaled_clock_runs_faster() {
        let c = SimClock::new(0, 1000.0);
        std::thread::sleep(Duration::from_millis(20));
        // 20 ms real at 1000x is at least 20 s sim.
        assert!(c.now_ms() >= 20_000, "{}", c.now_ms());
    }
}

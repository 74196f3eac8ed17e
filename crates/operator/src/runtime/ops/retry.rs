//! The pause before a failed call of a step is tried again, and the count of failures in a
//! row it grows with.

use std::time::Duration;

/// After a call failed: the step's deadline bounds the retries.
pub const CALL_RETRY: Duration = Duration::from_secs(3);
/// The longest pause before a failed call of a step is tried again, however many failed
/// before ([`call_retry`]).
pub const CALL_RETRY_CAP: Duration = Duration::from_secs(60);

/// The pause after the `failures`-th failed call in a row of one operation: a random part
/// (`draw` in `[0, 1)`) of [`CALL_RETRY`] doubled per earlier failure, at most
/// [`CALL_RETRY_CAP`]. A control plane that is down is not asked again and again at one
/// cadence by every operation, and operations that failed together do not retry together.
pub fn call_retry(failures: u32, draw: f64) -> Duration {
    simplyblock_controlplane::retry_delay(failures, CALL_RETRY, CALL_RETRY_CAP, draw)
        .max(CALL_RETRY_FLOOR)
}

/// The shortest pause before a failed call is tried again (a draw may come out near 0).
const CALL_RETRY_FLOOR: Duration = Duration::from_millis(250);

/// The failed calls in a row of each running operation, by uid. Kept in memory: after a
/// restart the pauses begin short again, which the step's deadline bounds all the same.
#[derive(Debug, Default)]
pub struct CallFailures(std::sync::Mutex<std::collections::HashMap<String, u32>>);

impl CallFailures {
    /// One more failed call of `op`; how many in a row now.
    pub fn failed(&self, op: &str) -> u32 {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = map.entry(op.to_owned()).or_default();
        *n = n.saturating_add(1);
        *n
    }

    /// A call of `op` went through, or `op` ended: the count starts over.
    pub fn clear(&self, op: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(op);
    }
}

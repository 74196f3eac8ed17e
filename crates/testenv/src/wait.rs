//! Waiting for an observed fact, the one way the workspace's tests wait: poll a check until
//! it yields a value, and fail naming what never came. A test never sleeps in place of an
//! observation.

use std::time::{Duration, Instant};

/// How long a wait gives a fact to appear before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// How often a check is polled.
const POLL: Duration = Duration::from_millis(20);

/// Polls `check` until it returns a value; panics naming `what` after [`PATIENCE`].
pub async fn until<T>(what: &str, check: impl AsyncFnMut() -> Option<T>) -> T {
    until_within(what, PATIENCE, check).await
}

/// [`until`] with a limit of its own.
pub async fn until_within<T>(
    what: &str,
    limit: Duration,
    check: impl AsyncFnMut() -> Option<T>,
) -> T {
    until_explained(what, limit, check, String::new).await
}

/// [`until_within`] whose failure also says what `explain` tells (the last state seen).
pub async fn until_explained<T>(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
    explain: impl Fn() -> String,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}; {}",
            explain()
        );
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_the_first_value_the_check_yields() {
        let mut polls = 0;
        let found = until("the third poll", async || {
            polls += 1;
            (polls == 3).then_some(polls)
        })
        .await;
        assert_eq!(found, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after 50ms waiting for nothing; last seen 7")]
    async fn gives_up_naming_what_and_the_last_state() {
        until_explained(
            "nothing",
            Duration::from_millis(50),
            async || None::<()>,
            || "last seen 7".into(),
        )
        .await;
    }
}

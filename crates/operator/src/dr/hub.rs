//! Whether this API server is an Open Cluster Management hub, which is where the
//! disaster-recovery kinds run.
//!
//! A hub serves the `manifestworks` resource of `work.open-cluster-management.io/v1`. A
//! managed cluster serves the same group too, but only `appliedmanifestworks`, so the
//! group being there proves nothing: the resource itself must be listed.

use std::time::Duration;

use crate::runtime::context::Shutdown;

/// The OCM work API's group and version.
pub const WORK_GROUP_VERSION: &str = "work.open-cluster-management.io/v1";
/// The resource only a hub serves.
pub const MANIFESTWORKS: &str = "manifestworks";

/// The first wait before discovery is asked again when the hub API is not served (the
/// context's default, which tests shorten).
pub use crate::runtime::context::HUB_FIRST_RETRY as FIRST_RETRY;
/// The longest wait between two discovery checks.
pub const LONGEST_RETRY: Duration = Duration::from_secs(10 * 60);

/// Whether the API server serves `manifestworks` itself. A group version that is not
/// served at all is a plain no; any other failure to ask is an error.
pub async fn serves_manifestworks(client: &kube::Client) -> Result<bool, kube::Error> {
    match client.list_api_group_resources(WORK_GROUP_VERSION).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == MANIFESTWORKS)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// The wait after `previous`: 60 s first, doubling, at most 10 min.
pub fn next_retry(previous: Option<Duration>) -> Duration {
    next_retry_from(FIRST_RETRY, previous)
}

/// The wait after `previous` when the first is `first`: doubling, at most 10 min.
pub fn next_retry_from(first: Duration, previous: Option<Duration>) -> Duration {
    match previous {
        None => first.min(LONGEST_RETRY),
        Some(wait) => (wait * 2).min(LONGEST_RETRY),
    }
}

/// Returns once the API server serves `manifestworks` (true), or when `shutdown` fires
/// first (false). Discovery is asked at once, then after each wait of [`next_retry`]; a
/// failed check is logged and the polling goes on, so a hub installed after the operator
/// started gets its controllers without a restart.
pub async fn until_hub(client: &kube::Client, shutdown: &Shutdown) -> bool {
    until_hub_polling(client, shutdown, FIRST_RETRY, |_| {}).await
}

/// [`until_hub`] whose first wait is `first`; `checked` is told each answer (`None` for a
/// failed check).
pub async fn until_hub_polling(
    client: &kube::Client,
    shutdown: &Shutdown,
    first: Duration,
    mut checked: impl FnMut(Option<bool>),
) -> bool {
    let mut wait = None;
    loop {
        match serves_manifestworks(client).await {
            Ok(true) => {
                checked(Some(true));
                return true;
            }
            Ok(false) => checked(Some(false)),
            Err(e) => {
                checked(None);
                tracing::warn!(
                    error = %e,
                    "asking the API server whether it serves OCM ManifestWorks failed; asking again later"
                );
            }
        }
        let next = next_retry_from(first, wait);
        wait = Some(next);
        tokio::select! {
            _ = tokio::time::sleep(next) => {}
            _ = shutdown.clone().wait() => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_from_a_minute_up_to_ten() {
        let mut waits = Vec::new();
        let mut wait = None;
        for _ in 0..6 {
            let next = next_retry(wait);
            waits.push(next.as_secs());
            wait = Some(next);
        }
        assert_eq!(waits, [60, 120, 240, 480, 600, 600]);
    }

    #[test]
    fn a_shorter_first_wait_doubles_to_the_same_cap() {
        let mut waits = Vec::new();
        let mut wait = None;
        for _ in 0..12 {
            let next = next_retry_from(Duration::from_secs(1), wait);
            waits.push(next.as_secs());
            wait = Some(next);
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600, 600]);
    }
}

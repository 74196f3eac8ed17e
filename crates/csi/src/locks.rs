//! Per-key async locks, so two calls for the same volume or name never interleave.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

#[derive(Debug, Default)]
pub struct KeyLocks {
    inner: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl KeyLocks {
    pub async fn lock(&self, key: &str) -> OwnedMutexGuard<()> {
        let m = {
            let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            // Drop entries nobody holds, so the map does not grow with every name seen.
            map.retain(|_, v| Arc::strong_count(v) > 1);
            map.entry(key.to_string()).or_default().clone()
        };
        m.lock_owned().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn same_key_waits_other_key_does_not() {
        let locks = Arc::new(KeyLocks::default());
        let g = locks.lock("a").await;
        let _b = locks.lock("b").await;
        let l2 = locks.clone();
        let waiter = tokio::spawn(async move { l2.lock("a").await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        drop(g);
        tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("released")
            .expect("join");
    }
}

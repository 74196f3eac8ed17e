//! What every controller shares: the two API clients, the event recorder, and where the
//! operator runs.

use std::time::Duration;

use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Shared by the controllers of one operator process.
pub struct Context {
    pub kube: kube::Client,
    pub cp: simplyblock_controlplane::Client,
    /// The control plane's address as the CSI driver should reach it.
    pub cp_endpoint: String,
    /// The operator's namespace, where the CSI secret lives.
    pub namespace: String,
    pub recorder: Recorder,
}

impl Context {
    pub fn new(
        kube: kube::Client,
        cp: simplyblock_controlplane::Client,
        cp_endpoint: String,
        namespace: String,
    ) -> Context {
        let reporter = Reporter {
            controller: "simplyblock-operator".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Context {
            recorder: Recorder::new(kube.clone(), reporter),
            kube,
            cp,
            cp_endpoint,
            namespace,
        }
    }

    /// Publishes an event on `object`; a failure to publish is logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &object.object_ref(&())).await {
            tracing::warn!(error = %e, reason, "publishing an event failed");
        }
    }
}

/// The requeue intervals the controllers share.
pub mod requeue {
    use super::Duration;
    /// After a lost optimistic-lock race.
    pub const CONFLICT: Duration = Duration::from_secs(5);
    /// While the control plane is unready or refused.
    pub const RETRY: Duration = Duration::from_secs(20);
    /// The steady-state backstop.
    pub const RESYNC: Duration = Duration::from_secs(30);
    /// Right after a step advanced; the watch usually comes first.
    pub const NEXT_STEP: Duration = Duration::from_millis(200);
}

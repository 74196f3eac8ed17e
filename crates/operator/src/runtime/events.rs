//! Publishing `events.k8s.io/v1` Events on the operator's objects.
//!
//! kube's `Recorder` folds every event with the same reason and action on one object into
//! one series and keeps the first note, so a discovery run that declines twenty devices
//! would show one `DeviceDeclined` and a count. Here the note is part of the key: the same
//! sentence repeated within [`SERIES_WINDOW`] becomes a series (`count` goes up, nothing
//! new is listed), a different sentence is an event of its own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::Mutex;

/// How long a repeat of the same event extends its series instead of starting a new one.
pub const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// The API server refuses a note longer than this many bytes.
const NOTE_LIMIT: usize = 1024;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    uid: Option<String>,
    namespace: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    warning: bool,
    reason: String,
    note: String,
}

struct Series {
    /// The Event's name and namespace.
    name: String,
    namespace: String,
    count: i32,
    last: Timestamp,
}

/// Publishes events; one per operator process, shared by its controllers.
pub struct Publisher {
    client: kube::Client,
    controller: String,
    instance: String,
    seen: Mutex<HashMap<Key, Series>>,
    /// Makes names unique when two events are made within the same nanosecond.
    sequence: AtomicU64,
}

impl Publisher {
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Publisher {
        Publisher {
            client,
            controller: controller.into(),
            instance: instance.unwrap_or_else(|| controller.into()),
            seen: Mutex::new(HashMap::new()),
            sequence: AtomicU64::new(0),
        }
    }

    /// Publishes `note` with `reason` on the object `regarding`.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        warning: bool,
        reason: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let note = truncate(note, NOTE_LIMIT);
        let key = Key {
            uid: regarding.uid.clone(),
            namespace: regarding.namespace.clone(),
            kind: regarding.kind.clone(),
            name: regarding.name.clone(),
            warning,
            reason: reason.into(),
            note: note.into(),
        };
        let now = Timestamp::now();
        let mut seen = self.seen.lock().await;
        seen.retain(|_, s| now.duration_since(s.last) < SERIES_WINDOW);
        if let Some(series) = seen.get_mut(&key) {
            let events: Api<Event> = Api::namespaced(self.client.clone(), &series.namespace);
            let count = series.count + 1;
            let body = serde_json::json!({
                "series": EventSeries { count, last_observed_time: MicroTime(now) },
            });
            match events
                .patch(&series.name, &PatchParams::default(), &Patch::Merge(&body))
                .await
            {
                Ok(_) => {
                    series.count = count;
                    series.last = now;
                    return Ok(());
                }
                // Deleted meanwhile (events expire): start over with a new one.
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    seen.remove(&key);
                }
                Err(e) => return Err(e),
            }
        }
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let base = regarding.name.as_deref().unwrap_or(&self.controller);
        let name = format!(
            "{}.{:x}{:x}",
            truncate(base, 200),
            now.as_nanosecond(),
            self.sequence.fetch_add(1, Ordering::Relaxed)
        );
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(if warning { "Warning" } else { "Normal" }.into()),
            reason: Some(reason.into()),
            action: Some(reason.into()),
            note: Some(note.into()),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        };
        Api::<Event>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), &event)
            .await?;
        seen.insert(
            key,
            Series {
                name,
                namespace,
                count: 1,
                last: now,
            },
        );
        Ok(())
    }
}

/// `text` cut to at most `limit` bytes on a character boundary.
fn truncate(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn truncation_keeps_whole_characters() {
        assert_eq!(truncate("abc", 10), "abc");
        assert_eq!(truncate("abcdef", 3), "abc");
        // 'é' is two bytes; cutting inside it backs off to before it.
        assert_eq!(truncate("aé", 2), "a");
    }
}

//! Events on a real API server: distinct notes stay distinct events, a repeated note
//! becomes a series on one event.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::Resource;
use kube::api::{Api, PostParams};
use serde_json::json;
use simplyblock_operator::runtime::events::Publisher;

const NS: &str = "events-test";

#[tokio::test]
async fn different_notes_are_different_events_and_a_repeat_is_a_series() {
    let env = crate::support::api_server().await;
    let kube = env.client().await.expect("client");
    simplyblock_testenv::create_namespace(&kube, NS)
        .await
        .expect("namespace");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "subject"}})).expect("configmap");
    let cm = Api::<ConfigMap>::namespaced(kube.clone(), NS)
        .create(&PostParams::default(), &cm)
        .await
        .expect("configmap");
    let subject = cm.object_ref(&());

    let events = Publisher::new(kube.clone(), "simplyblock-operator", None);
    for note in [
        "w1 nvme0n1: too small",
        "w1 nvme1n1: partitioned",
        "w1 nvme0n1: too small",
    ] {
        events
            .publish(&subject, false, "DeviceDeclined", note)
            .await
            .expect("publish");
    }
    let long = "x".repeat(5000);
    events
        .publish(&subject, true, "Long", &long)
        .await
        .expect("a note over the API server's limit is cut, not refused");

    let listed = Api::<Event>::namespaced(kube.clone(), NS)
        .list(&Default::default())
        .await
        .expect("events")
        .items;
    let mut declined: Vec<(String, i32)> = listed
        .iter()
        .filter(|e| e.reason.as_deref() == Some("DeviceDeclined"))
        .map(|e| {
            (
                e.note.clone().unwrap_or_default(),
                e.series.as_ref().map_or(1, |s| s.count),
            )
        })
        .collect();
    declined.sort();
    assert_eq!(
        declined,
        [
            ("w1 nvme0n1: too small".to_string(), 2),
            ("w1 nvme1n1: partitioned".to_string(), 1),
        ]
    );
    let cut = listed
        .iter()
        .find(|e| e.reason.as_deref() == Some("Long"))
        .expect("the long event");
    assert_eq!(cut.note.as_deref().map(str::len), Some(1024));
    assert_eq!(cut.type_.as_deref(), Some("Warning"));
}

//! StorageSiteDeployment on the real API server: its defaults, and the rules that keep a
//! request pointed at one site and an approval given once.

use serde_json::{Value, json};
use simplyblock_api::StorageSiteDeployment;

use crate::support::{create, dynamic, refusal, update};

fn sbsd(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2",
        "kind": "StorageSiteDeployment",
        "metadata": {"name": name},
        "spec": spec
    })
}

#[tokio::test]
async fn a_minimal_request_is_defaulted() {
    let (client, ns) = crate::support::namespace("sbsd-defaults").await;
    let api = dynamic::<StorageSiteDeployment>(&client, &ns);
    let stored = create(&api, sbsd("site", json!({"cluster": "site-b"})))
        .await
        .expect("admitted");
    let typed: StorageSiteDeployment =
        serde_json::from_value(serde_json::to_value(&stored).expect("json")).expect("typed");
    assert_eq!(typed.spec.site_namespace, "simplyblock");
    assert_eq!(typed.spec.draft_name, "site-draft");
    assert!(!typed.spec.approved);
    assert_eq!(
        stored.data["spec"]["approved"],
        json!(false),
        "always written"
    );
}

#[tokio::test]
async fn the_site_and_the_draft_name_are_immutable() {
    let (client, ns) = crate::support::namespace("sbsd-immutable").await;
    let api = dynamic::<StorageSiteDeployment>(&client, &ns);
    create(&api, sbsd("site", json!({"cluster": "site-b"})))
        .await
        .expect("admitted");
    let moved = update(&api, "site", |d| d["spec"]["cluster"] = json!("site-c")).await;
    assert_eq!(
        refusal(moved),
        [
            "spec.cluster: Invalid value: \"site-c\": spec.cluster is immutable: a request deploys one site; create another request for another site"
        ]
    );
    let renamed = update(&api, "site", |d| d["spec"]["draftName"] = json!("other")).await;
    assert_eq!(
        refusal(renamed),
        [
            "spec.draftName: Invalid value: \"other\": spec.draftName is immutable: the site's draft keeps its name"
        ]
    );
    update(&api, "site", |d| {
        d["spec"]["sizing"] = json!({"vcpuCount": 4, "maxSubsystemCount": 10})
    })
    .await
    .expect("the sizing may change before approval");
}

#[tokio::test]
async fn approval_is_one_way() {
    let (client, ns) = crate::support::namespace("sbsd-approval").await;
    let api = dynamic::<StorageSiteDeployment>(&client, &ns);
    create(&api, sbsd("site", json!({"cluster": "site-b"})))
        .await
        .expect("admitted");
    update(&api, "site", |d| d["spec"]["approved"] = json!(true))
        .await
        .expect("approving is allowed");
    let withdrawn = update(&api, "site", |d| d["spec"]["approved"] = json!(false)).await;
    assert_eq!(
        refusal(withdrawn),
        [
            "spec: Invalid value: approval cannot be withdrawn: the site is being deployed; delete the request to stop following it (the site keeps what was deployed)"
        ]
    );
}

#[tokio::test]
async fn names_and_sizes_past_their_limits_are_refused() {
    let (client, ns) = crate::support::namespace("sbsd-limits").await;
    let api = dynamic::<StorageSiteDeployment>(&client, &ns);
    create(&api, sbsd("at-limit", json!({"cluster": "c".repeat(63)})))
        .await
        .expect("63 characters are a cluster name");
    let long = create(&api, sbsd("past-limit", json!({"cluster": "c".repeat(64)}))).await;
    assert!(
        refusal(long)
            .contains(&"spec.cluster: Too long: may not be more than 63 bytes".to_string())
    );
    let empty = create(&api, sbsd("empty", json!({"cluster": ""}))).await;
    assert_eq!(
        refusal(empty),
        ["spec.cluster: Invalid value: \"\": spec.cluster in body should be at least 1 chars long"]
    );
    let sizing = create(
        &api,
        sbsd(
            "sizing",
            json!({"cluster": "site-b", "sizing": {"vcpuCount": 0, "maxSubsystemCount": 0}}),
        ),
    )
    .await;
    assert_eq!(
        refusal(sizing),
        [
            "spec.sizing.maxSubsystemCount: Invalid value: 0: spec.sizing.maxSubsystemCount in body should be greater than or equal to 1",
            "spec.sizing.vcpuCount: Invalid value: 0: spec.sizing.vcpuCount in body should be greater than or equal to 1",
        ]
    );
    let workers = create(
        &api,
        sbsd(
            "workers",
            json!({"cluster": "site-b", "discover": {"workers": ["w-1", "w-1"]}}),
        ),
    )
    .await;
    assert_eq!(
        refusal(workers),
        ["spec.discover.workers[1]: Duplicate value: \"w-1\""],
        "workers are a set"
    );
}

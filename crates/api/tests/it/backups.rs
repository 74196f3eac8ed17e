//! The backup kinds on the real API server: a policy that takes or limits backups and
//! keeps its limits, a backup that is a record or a request and never both, and a restore
//! that names its claim and keeps its spec.

use serde_json::{Value, json};
use simplyblock_api::{StorageBackup, StorageBackupOps, StorageBackupPolicy};

use crate::support::{create, dynamic, refusal, update};

fn object(kind: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec
    })
}

#[tokio::test]
async fn a_policy_takes_or_limits_backups_and_keeps_its_limits() {
    let (client, ns) = crate::support::namespace("cel-sbp").await;
    let api = dynamic::<StorageBackupPolicy>(&client, &ns);
    let idle = json!({"clusterRef": "simplyblock", "claimSelector": {}});
    assert_eq!(
        refusal(create(&api, object("StorageBackupPolicy", "idle", idle)).await),
        [
            "spec: Invalid value: set at least one of schedule, maxVersions (above 0) or maxAge: the control plane refuses a policy that neither takes nor limits backups"
        ]
    );
    let zero = json!({"clusterRef": "simplyblock", "maxVersions": 0});
    assert_eq!(
        refusal(create(&api, object("StorageBackupPolicy", "zero", zero)).await),
        [
            "spec: Invalid value: set at least one of schedule, maxVersions (above 0) or maxAge: the control plane refuses a policy that neither takes nor limits backups"
        ]
    );
    // The tiers the control plane refuses (a keep of 0, an interval of 0, no unit).
    for schedule in ["15m,0", "0m,4", "15,4", "15m,4,", "15m"] {
        let spec = json!({"clusterRef": "simplyblock", "schedule": schedule});
        let causes = refusal(create(&api, object("StorageBackupPolicy", "bad", spec)).await);
        assert!(
            causes
                .iter()
                .any(|c| c.starts_with("spec.schedule: Invalid value")),
            "{schedule}: {causes:?}"
        );
    }
    let spec = json!({"clusterRef": "simplyblock", "maxAge": "0d"});
    let causes = refusal(create(&api, object("StorageBackupPolicy", "bad", spec)).await);
    assert!(
        causes
            .iter()
            .any(|c| c.starts_with("spec.maxAge: Invalid value")),
        "{causes:?}"
    );

    let spec = json!({
        "clusterRef": "simplyblock",
        "claimSelector": {"matchLabels": {"backup": "hourly"}},
        "schedule": "1h,24 1d,7",
        "maxVersions": 30,
        "maxAge": "30d"
    });
    create(&api, object("StorageBackupPolicy", "hourly", spec))
        .await
        .expect("a policy with a schedule and limits");
    let retimed = update(&api, "hourly", |o| {
        o["spec"]["schedule"] = json!("2h,12");
        o["spec"]["maxVersions"] = json!(10);
        o["spec"]["maxAge"] = json!("7d");
        o["spec"]["clusterRef"] = json!("other");
    })
    .await;
    assert_eq!(
        refusal(retimed),
        [
            "spec.clusterRef: Invalid value: \"other\": spec.clusterRef is immutable: a policy lives in one cluster's control plane; create another policy for another cluster",
            "spec.maxAge: Invalid value: \"7d\": spec.maxAge is immutable: the control plane cannot change a policy; create another policy",
            "spec.maxVersions: Invalid value: 10: spec.maxVersions is immutable: the control plane cannot change a policy; create another policy",
            "spec.schedule: Invalid value: \"2h,12\": spec.schedule is immutable: the control plane cannot change a policy; create another policy",
        ]
    );
    // Which claims it covers may change.
    update(&api, "hourly", |o| {
        o["spec"]["claimSelector"] = json!({"matchLabels": {"backup": "daily"}})
    })
    .await
    .expect("the selector is mutable");
}

#[tokio::test]
async fn a_backup_is_a_record_or_a_request_never_both() {
    let (client, ns) = crate::support::namespace("cel-sb").await;
    let api = dynamic::<StorageBackup>(&client, &ns);
    let both = json!({"clusterRef": {"name": "simplyblock"}, "source": {"claimName": "data"}});
    let neither = json!({});
    for (name, spec) in [("both", both), ("neither", neither)] {
        assert_eq!(
            refusal(create(&api, object("StorageBackup", name, spec)).await),
            [
                "spec: Invalid value: set exactly one of source (to request a backup of a claim) or clusterRef (a record the operator keeps of a backup the store holds)"
            ],
            "{name}"
        );
    }
    let record_deleting =
        json!({"clusterRef": {"name": "simplyblock"}, "deletionPolicy": "Delete"});
    assert_eq!(
        refusal(create(&api, object("StorageBackup", "record", record_deleting)).await),
        [
            "spec: Invalid value: deletionPolicy Delete is for requests (spec.source): a record goes when its backup leaves the store, by the policy that took it"
        ]
    );
    let request = json!({"source": {"claimName": "data"}, "deletionPolicy": "Delete"});
    create(&api, object("StorageBackup", "request", request))
        .await
        .expect("a request");
    let retarget = update(&api, "request", |o| {
        o["spec"]["source"]["claimName"] = json!("other")
    })
    .await;
    assert_eq!(
        refusal(retarget),
        [
            "spec.source: Invalid value: spec.source is immutable: a request takes one backup of one claim; create another request"
        ]
    );
    update(&api, "request", |o| {
        o["spec"]["deletionPolicy"] = json!("Retain")
    })
    .await
    .expect("what deleting does may change until it is deleted");
}

#[tokio::test]
async fn a_restore_names_its_claim_and_keeps_its_spec() {
    let (client, ns) = crate::support::namespace("cel-sbops").await;
    let api = dynamic::<StorageBackupOps>(&client, &ns);
    let bare = json!({"backupRef": "b", "action": "Restore"});
    assert_eq!(
        refusal(create(&api, object("StorageBackupOps", "bare", bare)).await),
        [
            "spec: Invalid value: action Restore needs spec.restore: the claim to create and, optionally, the pool to restore into"
        ]
    );
    let spec =
        json!({"backupRef": "b", "action": "Restore", "restore": {"claimName": "data-restored"}});
    create(&api, object("StorageBackupOps", "restore", spec))
        .await
        .expect("a restore");
    let moved = update(&api, "restore", |o| {
        o["spec"]["restore"]["claimName"] = json!("elsewhere");
        o["spec"]["backupRef"] = json!("c");
    })
    .await;
    assert_eq!(
        refusal(moved),
        [
            "spec.backupRef: Invalid value: \"c\": spec.backupRef is immutable: an operation acts on one backup; create another operation for another backup",
            "spec.restore: Invalid value: spec.restore is immutable: a restore creates the claim it was created for; create another operation",
        ]
    );
    update(&api, "restore", |o| o["spec"]["abort"] = json!(true))
        .await
        .expect("abort is the one mutable field");
    let mut current = serde_json::to_value(api.get("restore").await.expect("read")).expect("json");
    current["status"] = json!({"phase": "Running", "step": {"state": "Unknown"}});
    let wrote = api
        .replace_status(
            "restore",
            &Default::default(),
            &crate::support::object(current),
        )
        .await;
    assert!(
        refusal(wrote)
            .iter()
            .any(|c| c.starts_with("status.step.state")),
        "a step outside the graph is refused"
    );
}

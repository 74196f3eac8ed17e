//! The OCM stand-in applies a ManifestWork's objects, reports their status and feedback,
//! binds a pre-bound claim, honours the delete option, and answers ManagedClusterViews.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};
use simplyblock_testenv::TestEnv;
use simplyblock_testenv::ocm::{
    self, WORK_FINALIZER, managed_cluster_view_resource, manifest_work_resource,
};
use simplyblock_testenv::wait::until;

async fn hub() -> kube::Client {
    let env = TestEnv::shared().expect("test environment");
    env.install_crds(&ocm::hub_crds())
        .await
        .expect("the OCM CRDs install");
    env.client().await.expect("client")
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("a well-formed object")
}

fn condition<'a>(object: &'a DynamicObject, kind: &str) -> Option<&'a Value> {
    object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

#[tokio::test]
async fn a_work_places_a_bound_claim_reports_its_phase_and_takes_it_away() {
    let client = hub().await;
    ocm::add_managed_cluster(&client, "ocm-site-a")
        .await
        .expect("the managed cluster");
    let _agent = ocm::work_agent(client.clone());

    let manifests = json!([
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ocm-bubble"}},
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "ocm-bubble-pv"},
         "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                  "storageClassName": "", "volumeMode": "Block",
                  "persistentVolumeReclaimPolicy": "Retain",
                  "claimRef": {"namespace": "ocm-bubble", "name": "data"},
                  "csi": {"driver": "csi.simplyblock.io", "volumeHandle": "c:p:v", "fsType": "xfs"}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "data", "namespace": "ocm-bubble"},
         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeMode": "Block",
                  "resources": {"requests": {"storage": "1Gi"}}, "volumeName": "ocm-bubble-pv"}},
    ]);
    let works: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "ocm-site-a", &manifest_work_resource());
    let work = object(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": "bubble", "namespace": "ocm-site-a"},
        "spec": {
            "workload": {"manifests": manifests},
            "manifestConfigs": [{
                "resourceIdentifier": {"group": "", "resource": "persistentvolumeclaims",
                                       "namespace": "ocm-bubble", "name": "data"},
                "feedbackRules": [{"type": "JSONPaths",
                                   "jsonPaths": [{"name": "phase", "path": ".status.phase"}]}],
            }],
        },
    }));
    works
        .create(&PostParams::default(), &work)
        .await
        .expect("the work is created");

    let done = until(
        "the work applied with the claim's phase fed back",
        async || {
            let work = works.get("bubble").await.ok()?;
            let applied = condition(&work, "Applied")?["status"] == "True";
            let available = condition(&work, "Available")?["status"] == "True";
            let manifests = work.data["status"]["resourceStatus"]["manifests"].as_array()?;
            let claim = manifests
                .iter()
                .find(|m| m["resourceMeta"]["resource"] == "persistentvolumeclaims")?;
            let phase = claim["statusFeedback"]["values"]
                .as_array()?
                .iter()
                .find(|v| v["name"] == "phase")?["fieldValue"]
                .clone();
            (applied && available && phase["string"] == "Bound").then_some(work)
        },
    )
    .await;
    assert_eq!(
        done.metadata.finalizers.as_deref(),
        Some(&[WORK_FINALIZER.to_owned()][..])
    );
    let manifests = done.data["status"]["resourceStatus"]["manifests"]
        .as_array()
        .expect("one status per manifest");
    assert_eq!(manifests.len(), 3);
    assert_eq!(
        manifests[1]["resourceMeta"],
        json!({"ordinal": 1, "group": "", "version": "v1", "kind": "PersistentVolume",
               "resource": "persistentvolumes", "name": "ocm-bubble-pv", "namespace": ""})
    );

    let pv = Api::<PersistentVolume>::all(client.clone())
        .get("ocm-bubble-pv")
        .await
        .expect("the volume is applied");
    assert_eq!(
        pv.status.and_then(|s| s.phase).as_deref(),
        Some("Bound"),
        "the volume is bound as the PV controller would"
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "ocm-bubble");
    let claim = claims.get("data").await.expect("the claim is applied");
    assert_eq!(
        pv.spec.and_then(|s| s.claim_ref).and_then(|r| r.uid),
        claim.metadata.uid,
        "the volume's claimRef carries the claim's UID"
    );

    // A view of the claim, as the hub reads a managed cluster's object.
    let views: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "ocm-site-a",
        &managed_cluster_view_resource(),
    );
    let view = object(json!({
        "apiVersion": "view.open-cluster-management.io/v1beta1", "kind": "ManagedClusterView",
        "metadata": {"name": "claim", "namespace": "ocm-site-a"},
        "spec": {"scope": {"resource": "persistentvolumeclaims", "namespace": "ocm-bubble", "name": "data"}},
    }));
    views
        .create(&PostParams::default(), &view)
        .await
        .expect("the view is created");
    let seen = until("the view's result", async || {
        let view = views.get("claim").await.ok()?;
        let processing = condition(&view, "Processing")?;
        (processing["status"] == "True").then(|| view.data["status"]["result"].clone())
    })
    .await;
    assert_eq!(seen["kind"], "PersistentVolumeClaim");
    assert_eq!(seen["spec"]["volumeName"], "ocm-bubble-pv");

    works
        .delete("bubble", &DeleteParams::default())
        .await
        .expect("the work is deleted");
    until("the work and its objects gone", async || {
        let work = works.get_opt("bubble").await.ok()?;
        let claim = claims.get_opt("data").await.ok()?;
        let pv = Api::<PersistentVolume>::all(client.clone())
            .get_opt("ocm-bubble-pv")
            .await
            .ok()?;
        let ns = Api::<Namespace>::all(client.clone())
            .get_opt("ocm-bubble")
            .await
            .ok()?;
        (work.is_none() && claim.is_none() && pv.is_none() && ns.is_none()).then_some(())
    })
    .await;

    // The claim is gone, so the view now says it cannot read it.
    let failed = until("the view reports the claim missing", async || {
        let view = views.get("claim").await.ok()?;
        let processing = condition(&view, "Processing")?.clone();
        (processing["status"] == "False").then_some((processing, view))
    })
    .await;
    assert_eq!(failed.0["reason"], "GetResourceFailed");
    assert!(failed.1.data["status"].get("result").is_none());
}

#[tokio::test]
async fn an_orphaning_work_leaves_its_objects_and_an_unknown_cluster_is_not_served() {
    let client = hub().await;
    ocm::add_managed_cluster(&client, "ocm-site-b")
        .await
        .expect("the managed cluster");
    simplyblock_testenv::create_namespace(&client, "ocm-orphans")
        .await
        .expect("namespace");
    simplyblock_testenv::create_namespace(&client, "ocm-not-a-cluster")
        .await
        .expect("namespace");
    let _agent = ocm::work_agent(client.clone());

    let config_map = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "ocm-orphans"}, "data": {"k": "v"}})
    };
    let work = |namespace: &str, option: Value| {
        object(json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": "orphans", "namespace": namespace},
            "spec": {"workload": {"manifests": [config_map("kept"), config_map("dropped")]},
                     "deleteOption": option},
        }))
    };
    let works: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "ocm-site-b", &manifest_work_resource());
    works
        .create(
            &PostParams::default(),
            &work(
                "ocm-site-b",
                json!({"propagationPolicy": "SelectivelyOrphan", "selectivelyOrphans": {
                    "orphaningRules": [{"group": "", "resource": "configmaps",
                                        "namespace": "ocm-orphans", "name": "kept"}]}}),
            ),
        )
        .await
        .expect("the work is created");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "ocm-orphans");
    until("both config maps applied", async || {
        let kept = config_maps.get_opt("kept").await.ok()??;
        let dropped = config_maps.get_opt("dropped").await.ok()??;
        Some((kept, dropped))
    })
    .await;

    // A work in a namespace that is no managed cluster's is nobody's to apply; the served
    // cluster's work above proves the agent is running.
    let stray: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "ocm-not-a-cluster",
        &manifest_work_resource(),
    );
    let mut unserved = work("ocm-not-a-cluster", json!({}));
    unserved.data["spec"]["workload"]["manifests"] = json!([{
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "stray", "namespace": "ocm-orphans"}}]);
    stray
        .create(&PostParams::default(), &unserved)
        .await
        .expect("the stray work is created");

    works
        .delete("orphans", &DeleteParams::default())
        .await
        .expect("the work is deleted");
    until("the work and the unprotected config map gone", async || {
        let work = works.get_opt("orphans").await.ok()?;
        let dropped = config_maps.get_opt("dropped").await.ok()?;
        (work.is_none() && dropped.is_none()).then_some(())
    })
    .await;
    assert!(
        config_maps
            .get_opt("kept")
            .await
            .expect("readable")
            .is_some(),
        "the orphaned config map stays"
    );
    // The agent made several passes since the stray work was created (the served work was
    // applied, then deleted): the stray one was never applied nor given a finalizer.
    let stray_work = stray.get("orphans").await.expect("the stray work");
    assert!(stray_work.metadata.finalizers.is_none());
    assert!(
        config_maps
            .get_opt("stray")
            .await
            .expect("readable")
            .is_none()
    );
}

//! The chart as a platform team runs it with `helm`: installed from their own registry
//! with a pull secret, refused from a registry they did not list, and upgraded to a release
//! whose CRDs changed. On an API server alone (no kubelet), so nothing here runs a pod: the
//! release's objects and the API server's admission are what is checked.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;
use simplyblock_testenv::{TestEnv, chart};

use crate::support::{namespace, serve_webhooks};

const MIRROR: &str = "mirror.example.com/sb";

/// What a user sets to install from a mirror: the list, the secret, the operator's image.
/// The profile is `empty` because the standalone one asks for a ControlPlane, whose
/// webhook needs the operator's pod; the preflight and CRD hooks are off because their Jobs
/// need a kubelet (the real-node test runs them).
fn mirror_values() -> Vec<(&'static str, &'static str)> {
    vec![
        ("deployment.profile", "empty"),
        ("preflight.enabled", "false"),
        ("crds.upgrade", "false"),
        ("allowedRegistries[0]", MIRROR),
        ("imagePullSecrets[0].name", "mirror-pull"),
        (
            "image.repository",
            "mirror.example.com/sb/simplyblock-operator",
        ),
    ]
}

/// Nothing of a release helm refused is written: its operator is not there.
async fn assert_nothing_written(admin: &kube::Client, ns: &str) {
    let operator = Api::<Deployment>::namespaced(admin.clone(), ns)
        .get_opt("simplyblock-operator")
        .await
        .expect("read");
    assert!(
        operator.is_none(),
        "nothing of a refused release is written"
    );
}

async fn pull_secret(admin: &kube::Client, ns: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "mirror-pull"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson":
            r#"{"auths":{"mirror.example.com":{"auth":"cHVsbDpwdWxs"}}}"#},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("the pull secret");
}

fn control_plane(image: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "ControlPlane",
        "metadata": {"name": "simplyblock"},
        "spec": {"source": {"local": {"image": image}}},
    }))
    .expect("control plane")
}

fn control_planes(admin: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        admin.clone(),
        ns,
        &kube::discovery::ApiResource::erase::<simplyblock_api::ControlPlane>(&()),
    )
}

#[tokio::test]
async fn a_listed_mirror_installs_with_its_pull_secret_and_an_unlisted_registry_is_refused() {
    let env = TestEnv::start().await.expect("API server");
    let admin = env.client().await.expect("client");
    let ns = "simplyblock";
    namespace(&admin, ns).await;
    pull_secret(&admin, ns).await;
    let kubeconfig = env.kubeconfig_path();

    // The operator's image from a registry nobody listed: helm refuses before it writes.
    let mut unlisted = mirror_values();
    unlisted.retain(|(k, _)| *k != "image.repository");
    unlisted.push((
        "image.repository",
        "elsewhere.example.com/simplyblock-operator",
    ));
    let refused = chart::install(kubeconfig, ns, &unlisted).expect_err("an unlisted registry");
    assert!(
        refused.contains("image.repository/image.tag (elsewhere.example.com/simplyblock-operator:")
            && refused.contains("add their registry to allowedRegistries"),
        "{refused}"
    );
    assert_nothing_written(&admin, ns).await;

    // Listed: installed, the operator pulled with the secret and told to hand it on.
    chart::install(kubeconfig, ns, &mirror_values()).expect("the mirror's release installs");
    let operator = Api::<Deployment>::namespaced(admin.clone(), ns)
        .get("simplyblock-operator")
        .await
        .expect("the operator");
    let pod = operator.spec.template.spec.expect("pod spec");
    let secrets: Vec<_> = pod
        .image_pull_secrets
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(secrets, ["mirror-pull"]);
    let container = &pod.containers[0];
    assert!(
        container
            .image
            .as_deref()
            .is_some_and(|i| i.starts_with("mirror.example.com/sb/simplyblock-operator:")),
        "{:?}",
        container.image
    );
    let handed_on = container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "SIMPLYBLOCK_IMAGE_PULL_SECRETS")
        .and_then(|e| e.value.clone());
    assert_eq!(handed_on.as_deref(), Some("mirror-pull"));

    // The storage kinds' images: the API server holds them to the list. The operator's
    // webhooks are served from here, as no Service is reachable from this API server.
    chart::serve_webhooks_here(&admin).await;
    let operator = env
        .service_account_client(ns, chart::OPERATOR_ACCOUNT)
        .await
        .expect("the operator's account");
    let serving = serve_webhooks(&operator, ns, false).await;
    let api = control_planes(&admin, ns);
    let message = simplyblock_testenv::wait::until("the registry policy enforced", async || {
        match api
            .create(
                &PostParams::default(),
                &control_plane("quay.io/simplyblock-io/simplyblock:26.2.1"),
            )
            .await
        {
            Err(kube::Error::Api(s)) if s.message.contains("allowedRegistries") => Some(s.message),
            Ok(_) => {
                // Admitted before the policy took effect: try again.
                api.delete("simplyblock", &Default::default()).await.ok();
                None
            }
            Err(_) => None,
        }
    })
    .await;
    assert!(
        message.contains(&format!(
            "ControlPlane simplyblock: quay.io/simplyblock-io/simplyblock:26.2.1 is not from an allowed registry ({MIRROR})"
        )) && message.contains("helm upgrade --reuse-values --set allowedRegistries"),
        "{message}"
    );
    api.create(
        &PostParams::default(),
        &control_plane("mirror.example.com/sb/simplyblock:26.2.1"),
    )
    .await
    .expect("the mirror's image is admitted");

    // Listing the registry is a value, applied by an upgrade; no CRD changes. The chart's
    // webhook configuration is put back first (helm owns it; the harness replaced it to
    // reach the webhooks served here), and taken over again after.
    serving.abort();
    Api::<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration>::all(
        admin.clone(),
    )
    .delete(chart::WEBHOOK_CONFIGURATION, &Default::default())
    .await
    .expect("the harness's webhook configuration");
    chart::upgrade(
        kubeconfig,
        ns,
        &chart::dir(),
        &[(
            "allowedRegistries",
            "{mirror.example.com/sb,quay.io/simplyblock-io}",
        )],
    )
    .expect("the upgrade");
    chart::serve_webhooks_here(&admin).await;
    let _serving = serve_webhooks(&operator, ns, false).await;
    let mut upgraded = api.get("simplyblock").await.expect("the control plane");
    upgraded.data["spec"]["source"]["local"]["image"] =
        json!("quay.io/simplyblock-io/simplyblock:26.2.1");
    simplyblock_testenv::wait::until("the new list in force", async || {
        api.replace("simplyblock", &PostParams::default(), &upgraded)
            .await
            .ok()
    })
    .await;
}

#[tokio::test]
async fn the_upgrade_hook_applies_the_next_releases_crds_with_its_own_account() {
    let env = TestEnv::start().await.expect("API server");
    let admin = env.client().await.expect("client");
    let ns = "simplyblock";
    namespace(&admin, ns).await;
    let kubeconfig = env.kubeconfig_path();
    let values = [
        ("deployment.profile", "empty"),
        ("preflight.enabled", "false"),
    ];
    // helm install creates the chart's crds/ before the templates.
    chart::install(kubeconfig, ns, &values).expect("release N installs");
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let pools = "storagepools.storage.simplyblock.io";
    let columns = |crd: &CustomResourceDefinition| -> Vec<String> {
        crd.spec
            .versions
            .iter()
            .flat_map(|v| v.additional_printer_columns.iter().flatten())
            .map(|c| c.name.clone())
            .collect()
    };
    let installed = crds.get(pools).await.expect("helm installed the CRDs");
    assert_eq!(
        installed
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("helm.sh/resource-policy"))
            .map(String::as_str),
        Some("keep")
    );

    // The pre-upgrade hook's account, as the chart grants it (a kubelet would run its Job;
    // this API server has none, so its command runs here under that account), applies
    // release N+1's crds/ from the files its ConfigMap mounts.
    let hooks = chart::hooks(ns, &values).expect("the chart's hooks");
    let account: Vec<DynamicObject> = hooks
        .into_iter()
        .filter(|(when, o)| {
            when == "pre-upgrade"
                && matches!(
                    chart::kind_and_name(o).as_str(),
                    "ServiceAccount/simplyblock-crds"
                        | "ClusterRole/simplyblock-crds"
                        | "ClusterRoleBinding/simplyblock-crds"
                )
        })
        .map(|(_, o)| o)
        .collect();
    assert_eq!(account.len(), 3, "the hook's account, role and binding");
    chart::apply(&admin, &account, "helm", false)
        .await
        .expect("the hook's account");
    let hook = env
        .service_account_client(ns, "simplyblock-crds")
        .await
        .expect("the hook's client");
    let dir = tempfile::tempdir().expect("temp dir");
    let next = dir.path().join("simplyblock-operator");
    let column = chart::next_release(&next)
        .expect("the next release")
        .to_owned();
    assert!(!columns(&installed).contains(&column));
    let next_crds =
        simplyblock_operator::crds::read(&next.join("crds"), ns).expect("release N+1's CRDs");
    simplyblock_operator::crds::apply(&hook, &next_crds)
        .await
        .expect("the hook applies them");
    let upgraded = crds.get(pools).await.expect("the CRD");
    assert!(
        columns(&upgraded).contains(&column),
        "the new schema is applied: {:?}",
        columns(&upgraded)
    );
    // Its account writes the group's CRDs and no other.
    let mut foreign = simplyblock_api::crds()[0].clone();
    foreign.metadata.name = Some("widgets.example.com".into());
    foreign.spec.group = "example.com".into();
    foreign.spec.names.plural = "widgets".into();
    crds.create(&PostParams::default(), &foreign)
        .await
        .expect("another group's CRD");
    let hooks_crds: Api<CustomResourceDefinition> = Api::all(hook.clone());
    match hooks_crds
        .patch(
            "widgets.example.com",
            &kube::api::PatchParams::apply(simplyblock_operator::crds::MANAGER).force(),
            &kube::api::Patch::Apply(&foreign),
        )
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("the hook changed another group's CRD: {other:?}"),
    }

    // Uninstalling keeps the CRDs, and with them every storage object.
    chart::uninstall(kubeconfig, ns).expect("the release uninstalls");
    let kept = crds.get(pools).await.expect("the CRD is kept");
    assert!(kept.metadata.deletion_timestamp.is_none());
}

#[tokio::test]
async fn a_control_plane_an_earlier_release_kept_is_refused_to_another_with_how_to_adopt_it() {
    let env = TestEnv::start().await.expect("API server");
    let admin = env.client().await.expect("client");
    let ns = "simplyblock";
    namespace(&admin, ns).await;
    env.install_crds(&simplyblock_api::crds())
        .await
        .expect("CRDs an earlier release installed");
    // What `helm uninstall` of release `storage` left: its ControlPlane, kept.
    let mut kept = control_plane("quay.io/simplyblock-io/simplyblock:26.2.1");
    kept.metadata.annotations = Some(
        [
            ("meta.helm.sh/release-name", "storage"),
            ("meta.helm.sh/release-namespace", ns),
            ("helm.sh/resource-policy", "keep"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
    );
    control_planes(&admin, ns)
        .create(&PostParams::default(), &kept)
        .await
        .expect("the kept ControlPlane");
    let refused = chart::install(env.kubeconfig_path(), ns, &[("preflight.enabled", "false")])
        .expect_err("another release's ControlPlane");
    assert!(
        refused.contains(
            "ControlPlane simplyblock in namespace simplyblock exists and belongs to release storage, not to release simplyblock-operator"
        ) && refused.contains("meta.helm.sh/release-name=simplyblock-operator"),
        "{refused}"
    );
    assert_nothing_written(&admin, ns).await;
}

/// The uninstall hook's account and role for `values`, as the chart renders them.
async fn uninstall_account(admin: &kube::Client, ns: &str, values: &[(&str, &str)]) {
    let account: Vec<DynamicObject> = chart::hooks(ns, values)
        .expect("the chart's hooks")
        .into_iter()
        .filter(|(when, o)| {
            when == "pre-delete" && o.metadata.name.as_deref() == Some("simplyblock-uninstall")
        })
        .filter(|(_, o)| o.types.as_ref().is_some_and(|t| t.kind != "Job"))
        .map(|(_, o)| o)
        .collect();
    assert_eq!(account.len(), 3, "the hook's account, role and binding");
    chart::apply(admin, &account, "helm", false)
        .await
        .expect("the hook's account");
}

#[tokio::test]
async fn the_uninstall_hook_removes_the_driver_and_asked_twice_everything_with_its_own_account() {
    use simplyblock_operator::uninstall::{Removal, run};
    let env = TestEnv::start().await.expect("API server");
    let admin = env.client().await.expect("client");
    let ns = "simplyblock";
    namespace(&admin, ns).await;
    env.install_crds(&simplyblock_api::crds())
        .await
        .expect("CRDs");
    // No operator runs here, so the objects carry no finalizer: what is checked is what
    // the hook deletes, in which order, with the rights the chart gives it.
    let dynamic = |resource: kube::discovery::ApiResource| {
        Api::<DynamicObject>::namespaced_with(admin.clone(), ns, &resource)
    };
    let drivers = dynamic(kube::discovery::ApiResource::erase::<
        simplyblock_api::SimplyblockDriver,
    >(&()));
    let clusters = dynamic(kube::discovery::ApiResource::erase::<
        simplyblock_api::StorageCluster,
    >(&()));
    let object = |kind: &str, spec: serde_json::Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": kind,
            "metadata": {"name": "simplyblock"}, "spec": spec,
        }))
        .expect("object")
    };
    let create_all = async || {
        control_planes(&admin, ns)
            .create(
                &PostParams::default(),
                &control_plane("quay.io/simplyblock-io/simplyblock:26.2.1"),
            )
            .await
            .expect("ControlPlane");
        drivers
            .create(
                &PostParams::default(),
                &object("SimplyblockDriver", json!({})),
            )
            .await
            .expect("SimplyblockDriver");
        clusters
            .create(
                &PostParams::default(),
                &object(
                    "StorageCluster",
                    json!({"maxSubsystemCount": 10, "vcpuCount": 4,
                           "stripe": {"dataChunks": 1, "parityChunks": 1}}),
                ),
            )
            .await
            .expect("StorageCluster");
    };
    create_all().await;

    // By default: the driver goes, the data stays.
    let values = [("preflight.enabled", "false")];
    uninstall_account(&admin, ns, &values).await;
    let hook = env
        .service_account_client(ns, "simplyblock-uninstall")
        .await
        .expect("the hook's client");
    run(
        &hook,
        Removal::Driver,
        Some(ns),
        Duration::from_secs(30),
        Duration::from_millis(100),
    )
    .await
    .expect("the default uninstall");
    assert!(
        drivers
            .get_opt("simplyblock")
            .await
            .expect("read")
            .is_none()
    );
    assert!(
        clusters
            .get_opt("simplyblock")
            .await
            .expect("read")
            .is_some()
    );
    assert!(
        control_planes(&admin, ns)
            .get_opt("simplyblock")
            .await
            .expect("read")
            .is_some()
    );

    // Asked twice: every object and the CRDs.
    drivers
        .create(
            &PostParams::default(),
            &object("SimplyblockDriver", json!({})),
        )
        .await
        .expect("SimplyblockDriver again");
    let everything = [
        ("preflight.enabled", "false"),
        ("uninstall.deleteData", "true"),
        ("uninstall.confirmDeleteData", "true"),
    ];
    uninstall_account(&admin, ns, &everything).await;
    run(
        &hook,
        Removal::Everything,
        Some(ns),
        Duration::from_secs(30),
        Duration::from_millis(100),
    )
    .await
    .expect("the uninstall that removes everything");
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let left: Vec<String> = crds
        .list(&Default::default())
        .await
        .expect("CRDs")
        .items
        .into_iter()
        .filter(|c| {
            c.spec.group == "storage.simplyblock.io" && c.metadata.deletion_timestamp.is_none()
        })
        .filter_map(|c| c.metadata.name)
        .collect();
    assert!(left.is_empty(), "CRDs left: {left:?}");
}

//! The operator under test is the chart's ServiceAccount, not an administrator: what the
//! chart's roles do not grant is refused to it, and it grants others more than it holds
//! only through the CSI driver's roles the chart names.

use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use kube::api::{Api, ListParams};
use simplyblock_api::StorageCluster;

#[tokio::test]
async fn the_operator_holds_only_what_the_chart_grants() {
    crate::support::api_server().await;
    let operator = crate::support::operator_kube().await;

    // Granted: the storage kinds, cluster-wide.
    Api::<StorageCluster>::all(operator.clone())
        .list(&ListParams::default())
        .await
        .expect("the chart grants listing StorageClusters");

    // Not granted: anything the operator has no business with.
    for refused in [
        Api::<Namespace>::all(operator.clone())
            .list(&ListParams::default())
            .await
            .map(|_| ()),
        Api::<ResourceQuota>::all(operator.clone())
            .list(&ListParams::default())
            .await
            .map(|_| ()),
    ] {
        match refused {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
            other => panic!("the operator was not refused: {other:?}"),
        }
    }
}

/// The CSI driver's cluster roles grant the sidecars what the operator does not hold
/// itself; the chart lets it write and bind exactly those roles, by name, and no others.
#[tokio::test]
async fn the_operator_grants_more_than_it_holds_only_in_the_csi_roles() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::{Patch, PatchParams};
    use serde_json::json;

    let ns = "rbac-csi-roles";
    let (env, _admin) = crate::support::own_api_server(ns).await;
    let operator = crate::support::operator_kube_on(&env, ns).await;
    let chart_role = simplyblock_testenv::chart::render(ns, &[("deployment.profile", "empty")])
        .expect("the chart renders")
        .into_iter()
        .find(|o| {
            simplyblock_testenv::chart::kind_and_name(o) == "ClusterRole/simplyblock-operator"
        })
        .expect("the operator's ClusterRole");
    let csi_roles: Vec<String> = chart_role.data["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| {
            r["verbs"]
                .as_array()
                .is_some_and(|v| v.contains(&json!("escalate")))
                && r["resources"]
                    .as_array()
                    .is_some_and(|v| v.contains(&json!("clusterroles")))
        })
        .flat_map(|r| r["resourceNames"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect();
    assert!(!csi_roles.is_empty(), "the chart names no CSI role");

    // What a provisioner sidecar needs and the operator has no business with.
    let role = |name: &str| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["persistentvolumes"],
                       "verbs": ["get", "list", "watch", "create", "delete"]}]
        })
    };
    let binding = |name: &str, role: &str| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "simplyblock-csi-controller-sa", "namespace": ns}]
        })
    };
    let apply = PatchParams::apply("simplyblock-operator");
    let roles: Api<ClusterRole> = Api::all(operator.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(operator.clone());
    for name in &csi_roles {
        roles
            .patch(name, &apply, &Patch::Apply(role(name)))
            .await
            .unwrap_or_else(|e| panic!("the operator may write {name}: {e}"));
        let bound = format!("{name}-binding");
        bindings
            .patch(&bound, &apply, &Patch::Apply(binding(&bound, name)))
            .await
            .unwrap_or_else(|e| panic!("the operator may bind {name}: {e}"));
    }

    // Any other role granting the same is an escalation, refused.
    let other = "not-a-csi-role";
    let refused = roles.patch(other, &apply, &Patch::Apply(role(other))).await;
    match refused {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("the operator wrote a role granting more than it holds: {other:?}"),
    }
}

/// Every permission the SimplyblockDriver controller uses is granted by the chart's
/// ClusterRole, and its grants of the CSI roles name exactly the roles it writes. (The
/// driver's integration tests run under the chart's roles and fail on a missing one; this
/// names it.)
#[test]
fn the_chart_grants_what_the_driver_controller_uses() {
    use simplyblock_operator::driver::rbac;

    let chart_role = simplyblock_testenv::chart::render("rbac", &[("deployment.profile", "empty")])
        .expect("the chart renders")
        .into_iter()
        .find(|o| {
            simplyblock_testenv::chart::kind_and_name(o) == "ClusterRole/simplyblock-operator"
        })
        .expect("the operator's ClusterRole");
    let rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule> =
        serde_json::from_value(chart_role.data["rules"].clone()).expect("rules");
    let strings = |v: &Option<Vec<String>>| v.clone().unwrap_or_default();
    let granted = |group: &str, resource: &str, verb: &str, name: Option<&str>| {
        rules.iter().any(|r| {
            strings(&r.api_groups).iter().any(|g| g == group)
                && strings(&r.resources).iter().any(|x| x == resource)
                && r.verbs.iter().any(|v| v == verb)
                && match (&r.resource_names, name) {
                    (None, _) => true,
                    (Some(names), Some(name)) => names.iter().any(|n| n == name),
                    (Some(_), None) => false,
                }
        })
    };
    let mut missing = Vec::new();
    for rule in rbac::operator_rules() {
        let names: Vec<Option<String>> = match &rule.resource_names {
            Some(names) => names.iter().cloned().map(Some).collect(),
            None => vec![None],
        };
        for group in strings(&rule.api_groups) {
            for resource in strings(&rule.resources) {
                for verb in &rule.verbs {
                    for name in &names {
                        if !granted(&group, &resource, verb, name.as_deref()) {
                            missing.push(format!("{verb} {group}/{resource} {name:?}"));
                        }
                    }
                }
            }
        }
    }
    assert!(missing.is_empty(), "the chart does not grant: {missing:#?}");

    // Escalation is allowed on the driver's roles only, and on all of them.
    let escalated = |resource: &str| -> Vec<String> {
        rules
            .iter()
            .filter(|r| r.verbs.iter().any(|v| v == "escalate"))
            .filter(|r| strings(&r.resources).iter().any(|x| x == resource))
            .flat_map(|r| strings(&r.resource_names))
            .collect()
    };
    assert_eq!(escalated("clusterroles"), rbac::cluster_role_names());
    assert_eq!(
        escalated("roles"),
        [simplyblock_operator::driver::names::CONTROLLER_ROLE]
    );
}

/// The probe Jobs' account creates its report and nothing more: it can neither read,
/// change nor delete the namespace's other ConfigMaps (`simplyblock-upgrade` among them),
/// nor write over a report already there.
#[tokio::test]
async fn the_probe_account_creates_its_report_and_no_other_config_map_is_open_to_it() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
    use serde_json::json;
    use simplyblock_discovery::configmap;

    let ns = "rbac-nodeprobe";
    let (env, admin) = crate::support::own_api_server(ns).await;
    let probe = env
        .service_account_client(ns, "simplyblock-nodeprobe")
        .await
        .expect("the probe's client");
    let upgrade: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "simplyblock-upgrade"},
        "data": {"state": "kept"}
    }))
    .expect("config map");
    Api::<ConfigMap>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &upgrade)
        .await
        .expect("the operator's ConfigMap");

    let maps: Api<ConfigMap> = Api::namespaced(probe, ns);
    let forbidden = |what: &str, result: Result<(), kube::Error>| match result {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{what}: {status:?}"),
        other => panic!("the probe's account was allowed to {what}: {other:?}"),
    };
    let mut changed = upgrade.clone();
    changed.data = Some([("state".to_string(), "changed".to_string())].into());
    forbidden("read it", maps.get("simplyblock-upgrade").await.map(|_| ()));
    forbidden(
        "list ConfigMaps",
        maps.list(&ListParams::default()).await.map(|_| ()),
    );
    forbidden(
        "replace it",
        maps.replace("simplyblock-upgrade", &PostParams::default(), &changed)
            .await
            .map(|_| ()),
    );
    forbidden(
        "patch it",
        maps.patch(
            "simplyblock-upgrade",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"state": "changed"}})),
        )
        .await
        .map(|_| ()),
    );
    forbidden(
        "apply over it",
        maps.patch(
            "simplyblock-upgrade",
            &PatchParams::apply("probe").force(),
            &Patch::Apply(&changed),
        )
        .await
        .map(|_| ()),
    );
    forbidden(
        "delete it",
        maps.delete("simplyblock-upgrade", &DeleteParams::default())
            .await
            .map(|_| ()),
    );

    // Its own report it creates, once: a second write is refused, not applied.
    let run = configmap::RunRef {
        name: "initial-discovery",
        uid: "6f1c0c1e-0000-4000-8000-000000000001",
    };
    let name = configmap::config_map_name(run.name, "w1");
    let report = configmap::report_config_map(ns, &name, run, "w1", "{}".into());
    maps.create(&PostParams::default(), &report)
        .await
        .expect("the probe creates its report");
    match maps.create(&PostParams::default(), &report).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 409, "{status:?}"),
        other => panic!("a report was written twice: {other:?}"),
    }

    let kept = Api::<ConfigMap>::namespaced(admin.clone(), ns)
        .get("simplyblock-upgrade")
        .await
        .expect("the operator's ConfigMap");
    assert_eq!(kept.data, upgrade.data);

    // Nor may it create a ConfigMap that is not a report, such as one the operator has yet
    // to create: the chart's admission policy refuses it.
    let chart = simplyblock_testenv::chart::render(ns, &[("deployment.profile", "empty")])
        .expect("the chart renders");
    let policy: Vec<_> = chart
        .into_iter()
        .filter(|o| {
            simplyblock_testenv::chart::kind_and_name(o).ends_with("/simplyblock-nodeprobe-reports")
        })
        .collect();
    assert_eq!(policy.len(), 2, "the policy and its binding");
    simplyblock_testenv::chart::apply(&admin, &policy, "rbac-test", false)
        .await
        .expect("the chart's policy");
    let squatter: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "simplyblock-later", "labels": report.metadata.labels},
        "data": {"state": "forged"}
    }))
    .expect("config map");
    // Dry runs until the API server enforces the policy it was just given.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let refusal = crate::support::until(
        "the policy refuses a ConfigMap that is no report",
        async || match maps.create(&dry, &squatter).await {
            Err(kube::Error::Api(status)) if status.code == 403 => Some(status.message),
            _ => None,
        },
    )
    .await;
    assert!(
        refusal.contains("simplyblock-later is not one"),
        "{refusal}"
    );
    forbidden(
        "create a ConfigMap that is no report",
        maps.create(&PostParams::default(), &squatter)
            .await
            .map(|_| ()),
    );
    let w2 = configmap::config_map_name(run.name, "w2");
    maps.create(
        &PostParams::default(),
        &configmap::report_config_map(ns, &w2, run, "w2", "{}".into()),
    )
    .await
    .expect("a report is still created");
}

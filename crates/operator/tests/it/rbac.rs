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

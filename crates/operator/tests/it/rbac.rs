//! The operator under test is the chart's ServiceAccount, not an administrator: what the
//! chart's roles do not grant is refused to it, it grants nobody more than it holds, and
//! of what it may update it changes only the fields the chart's policy leaves it.

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

/// The refusal of `result`: a 403 from RBAC or from the chart's admission policy.
fn refused<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 => status.message,
        other => panic!("the operator's account was allowed to {what}: {other:?}"),
    }
}

/// Run as the chart's operator ServiceAccount, every step from its role to cluster-admin
/// is refused: it writes, binds and escalates no cluster role, reaches no Secret outside
/// the namespaces it serves and installs into, mints no token, creates no webhook
/// configuration, widens its own webhooks to no other kind, and changes nothing of its
/// CRDs but their conversion. What it does need still works (the controls beside each).
#[tokio::test]
async fn the_operators_account_takes_no_step_towards_cluster_admin() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
    use serde_json::json;

    let ns = "rbac-escalation";
    let elsewhere = "rbac-escalation-tenant";
    let (env, admin) = crate::support::own_api_server(ns).await;
    crate::support::namespace(&admin, elsewhere).await;
    let operator = crate::support::operator_kube_on(&env, ns).await;
    let me = json!({"kind": "ServiceAccount", "name": "simplyblock-operator", "namespace": ns});
    let apply = PatchParams::apply("simplyblock-operator");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };

    // Cluster roles: a CSI role widened to everything, a binding of it or of
    // cluster-admin to itself, a delete of any role.
    let csi_role = "simplyblock-operator-csi-provisioner";
    Api::<ClusterRole>::all(admin.clone())
        .get(csi_role)
        .await
        .expect("the chart installs the CSI driver's roles");
    let roles: Api<ClusterRole> = Api::all(operator.clone());
    refused(
        "widen a CSI role to */*/*",
        roles
            .patch(
                csi_role,
                &apply,
                &Patch::Apply(json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": csi_role},
                    "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
                })),
            )
            .await,
    );
    refused(
        "create a cluster role",
        roles
            .create(
                &dry,
                &serde_json::from_value(json!({
                    "metadata": {"name": "simplyblock-anything"},
                    "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
                }))
                .expect("role"),
            )
            .await,
    );
    refused(
        "delete ClusterRole view",
        roles.delete("view", &DeleteParams::default()).await,
    );
    let bindings: Api<ClusterRoleBinding> = Api::all(operator.clone());
    for role in [csi_role, "cluster-admin"] {
        refused(
            &format!("bind {role} to itself"),
            bindings
                .create(
                    &dry,
                    &serde_json::from_value(json!({
                        "metadata": {"name": "simplyblock-operator-more"},
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                        "subjects": [me]
                    }))
                    .expect("binding"),
                )
                .await,
        );
    }

    // Roles where it works: one granting what it holds is its to write (a storage
    // cluster's pods read their configuration so) ...
    let local_roles: Api<Role> = Api::namespaced(operator.clone(), ns);
    let role = |name: &str, resources: &[&str], verbs: &[&str]| -> Role {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": resources, "verbs": verbs}]
        }))
        .expect("role")
    };
    local_roles
        .create(&dry, &role("reads-config", &["configmaps"], &["get"]))
        .await
        .expect("a Role granting what the operator holds");
    // The Roles it renders: a storage cluster's (its pods start their SPDK pod and run the
    // host-preparation Jobs) and the local control plane's.
    let rendered = [
        simplyblock_operator::workload::manifests::role_rules("simplyblock-storage-node-config-sb"),
        control_plane_role_rules(),
    ];
    for (i, rules) in rendered.into_iter().enumerate() {
        let rendered_role = Role {
            metadata: kube::api::ObjectMeta {
                name: Some(format!("rendered-{i}")),
                ..Default::default()
            },
            rules: Some(rules),
        };
        local_roles
            .create(&dry, &rendered_role)
            .await
            .unwrap_or_else(|e| panic!("the operator may write the Role it renders: {e}"));
    }
    // ... but not one granting more (exec into the pods there), nor a binding that makes
    // it the namespace's administrator.
    refused(
        "write a Role granting pods/exec",
        local_roles
            .create(&dry, &role("execs", &["pods/exec"], &["create"]))
            .await,
    );
    refused(
        "bind ClusterRole cluster-admin to itself in its namespace",
        Api::<RoleBinding>::namespaced(operator.clone(), ns)
            .create(
                &dry,
                &serde_json::from_value(json!({
                    "metadata": {"name": "simplyblock-operator-admin"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                    "subjects": [me]
                }))
                .expect("binding"),
            )
            .await,
    );

    // Secrets: its namespace's are its own; no other namespace's, and no token.
    let secret = |name: &str, type_: Option<&str>, annotations: serde_json::Value| -> Secret {
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": annotations},
            "type": type_,
            "stringData": {"k": "v"}
        }))
        .expect("secret")
    };
    Api::<Secret>::namespaced(operator.clone(), ns)
        .create(&dry, &secret("mine", None, json!({})))
        .await
        .expect("a Secret of the namespace it serves");
    for other in [elsewhere, "default", "kube-system"] {
        refused(
            &format!("create a Secret in {other}"),
            Api::<Secret>::namespaced(operator.clone(), other)
                .create(&dry, &secret("theirs", None, json!({})))
                .await,
        );
        refused(
            &format!("list the Secrets of {other}"),
            Api::<Secret>::namespaced(operator.clone(), other)
                .list(&ListParams::default())
                .await,
        );
    }
    refused(
        "list every Secret",
        Api::<Secret>::all(operator.clone())
            .list(&ListParams::default())
            .await,
    );
    // A token of an account of its own namespace (the CSI controller's holds what the
    // operator does not): neither by a Secret nor by a TokenRequest.
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "simplyblock-csi-controller-sa"}}))
                .expect("account"),
        )
        .await
        .expect("the CSI controller's account");
    let token_secret = secret(
        "minted",
        Some("kubernetes.io/service-account-token"),
        json!({"kubernetes.io/service-account.name": "simplyblock-csi-controller-sa"}),
    );
    let secrets: Api<Secret> = Api::namespaced(operator.clone(), ns);
    let refusal = crate::support::until(
        "the chart's policy refuses the operator a token Secret",
        async || match secrets.create(&dry, &token_secret).await {
            Err(kube::Error::Api(status)) if status.code == 403 => Some(status.message),
            _ => None,
        },
    )
    .await;
    assert!(
        refusal.contains("no ServiceAccount token Secret"),
        "{refusal}"
    );
    refused(
        "mint a token Secret",
        secrets.create(&PostParams::default(), &token_secret).await,
    );
    refused(
        "request a token of the CSI controller's account",
        Api::<ServiceAccount>::namespaced(operator.clone(), ns)
            .create_token_request(
                "simplyblock-csi-controller-sa",
                &PostParams::default(),
                &TokenRequest::default(),
            )
            .await,
    );

    // Webhook configurations: it creates none, and widens its own to no other kind.
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(operator.clone());
    refused(
        "create a webhook configuration",
        configurations
            .create(
                &dry,
                &serde_json::from_value(json!({"metadata": {"name": "simplyblock-anything"}}))
                    .expect("configuration"),
            )
            .await,
    );
    let endpoint = simplyblock_operator::webhooks::Endpoint::Url("https://127.0.0.1:9".into());
    simplyblock_operator::webhooks::register(&operator, &endpoint, "")
        .await
        .expect("the operator registers its webhooks in the chart's configuration");
    let mut widened = configurations
        .get(simplyblock_testenv::chart::WEBHOOK_CONFIGURATION)
        .await
        .expect("the configuration");
    widened.metadata.managed_fields = None;
    let webhook = &mut widened.webhooks.as_mut().expect("webhooks")[0];
    let rules = webhook.rules.as_mut().expect("rules");
    rules[0].api_groups = Some(vec!["".into()]);
    rules[0].resources = Some(vec!["secrets".into()]);
    let refusal = refused(
        "have every Secret sent to its webhook",
        configurations
            .replace(
                simplyblock_testenv::chart::WEBHOOK_CONFIGURATION,
                &PostParams::default(),
                &widened,
            )
            .await,
    );
    assert!(
        refusal.contains("only storage.simplyblock.io kinds"),
        "{refusal}"
    );

    // Its CRDs: the conversion is its to write, the schema is not.
    let crd = "storageclusters.storage.simplyblock.io";
    simplyblock_operator::webhooks::conversion::register(&operator, &endpoint, "")
        .await
        .expect("the operator points the conversion at itself");
    let crds: Api<CustomResourceDefinition> = Api::all(operator.clone());
    let mut versions = serde_json::to_value(&crds.get(crd).await.expect("the CRD").spec.versions)
        .expect("versions");
    versions[0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"] =
        json!(true);
    let refusal = refused(
        "let any field into StorageCluster's spec",
        crds.patch(
            crd,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"versions": versions}})),
        )
        .await,
    );
    assert!(refusal.contains("only spec.conversion"), "{refusal}");
    let stored = Api::<CustomResourceDefinition>::all(admin.clone())
        .get(crd)
        .await
        .expect("the CRD");
    assert!(
        stored.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| s.properties.as_ref())
            .and_then(|p| p.get("spec"))
            .and_then(|s| s.x_kubernetes_preserve_unknown_fields)
            .is_none(),
        "the schema was widened"
    );
}

/// Every permission the SimplyblockDriver controller uses is granted by the chart's roles
/// for the operator (cluster-wide, or in the namespaces it works in), and none of those
/// roles lets it bind, escalate or impersonate, or write a cluster role or its binding.
/// (The driver's integration tests run under the chart's roles and fail on a missing
/// one; this names it.)
#[test]
fn the_chart_grants_what_the_driver_controller_uses_and_no_way_up() {
    use simplyblock_operator::driver::rbac;

    let rendered = simplyblock_testenv::chart::render("rbac", &[("deployment.profile", "empty")])
        .expect("the chart renders");
    let role_rules = |name: &str| -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
        let role = rendered
            .iter()
            .find(|o| simplyblock_testenv::chart::kind_and_name(o) == format!("ClusterRole/{name}"))
            .unwrap_or_else(|| panic!("ClusterRole {name}"));
        serde_json::from_value(role.data["rules"].clone()).expect("rules")
    };
    let mut rules = role_rules("simplyblock-operator");
    rules.extend(role_rules("simplyblock-operator-namespaced"));
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

    for rule in &rules {
        for verb in ["bind", "escalate", "impersonate", "*"] {
            assert!(!rule.verbs.iter().any(|v| v == verb), "{rule:?}");
        }
        let resources = strings(&rule.resources);
        if resources
            .iter()
            .any(|r| r == "clusterroles" || r == "clusterrolebindings")
        {
            assert_eq!(rule.verbs, ["get"], "{rule:?}");
            assert!(rule.resource_names.is_some(), "{rule:?}");
        }
        if strings(&rule.api_groups)
            .iter()
            .any(|g| g == "admissionregistration.k8s.io")
        {
            assert!(!rule.verbs.iter().any(|v| v == "create"), "{rule:?}");
        }
    }
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

/// The rules of the Role a local control plane's ServiceAccount holds, as rendered.
fn control_plane_role_rules() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    use simplyblock_api::control_plane::ControlPlane;
    use simplyblock_operator::controlplane::manifests;
    let cp: ControlPlane = serde_json::from_value(serde_json::json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "ControlPlane",
        "metadata": {"name": "simplyblock", "namespace": "rbac-escalation"},
        "spec": {"source": {"local": {"image": "quay.io/simplyblock-io/simplyblock:25.10.1"}}},
    }))
    .expect("control plane");
    let local = cp.spec.source.local.clone().expect("local");
    manifests::services(&cp, &local)
        .into_iter()
        .find(|m| m.resource.kind == "Role")
        .and_then(|m| {
            serde_json::from_value::<k8s_openapi::api::rbac::v1::Role>(
                serde_json::to_value(&m.object).ok()?,
            )
            .ok()
        })
        .and_then(|r| r.rules)
        .expect("the control plane's Role")
}

/// A storage node reads its own Node before it starts SPDK: the chart lets the accounts of
/// the served namespace get a Node, and nothing more of Nodes, and no other namespace's.
#[tokio::test]
async fn storage_node_pods_get_their_node_and_nothing_more() {
    use k8s_openapi::api::core::v1::{Node, ServiceAccount};
    use kube::api::PostParams;
    use simplyblock_operator::workload::names::account;

    let ns = "rbac-storage-node";
    let elsewhere = "rbac-storage-node-tenant";
    let (env, admin) = crate::support::own_api_server(ns).await;
    crate::support::namespace(&admin, elsewhere).await;
    let node: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": "worker-1"}}))
        .expect("node");
    Api::<Node>::all(admin.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("a worker");
    let sa: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": account("sb")}}))
            .expect("account");
    for namespace in [ns, elsewhere] {
        Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
            .create(&PostParams::default(), &sa)
            .await
            .expect("the storage cluster's account");
    }
    let pods = env
        .service_account_client(ns, &account("sb"))
        .await
        .expect("the storage node's client");
    let nodes = Api::<Node>::all(pods);
    nodes.get("worker-1").await.expect("its own Node");
    refused("list Nodes", nodes.list(&ListParams::default()).await);
    refused(
        "label a Node",
        nodes
            .patch(
                "worker-1",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({"metadata": {"labels": {"x": "y"}}})),
            )
            .await,
    );
    let tenant = env
        .service_account_client(elsewhere, &account("sb"))
        .await
        .expect("a tenant's client");
    refused(
        "get a Node from a namespace not served",
        Api::<Node>::all(tenant).get("worker-1").await,
    );
}

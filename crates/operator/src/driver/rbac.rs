//! Who may do what: the rules of the node plugin's, the controller plugin's and each
//! controller sidecar's role, the chart's roles and bindings that grant them, and the
//! permissions this controller itself uses. Pure data.
//!
//! Each sidecar's rules are what its upstream `deploy/kubernetes/rbac.yaml` grants, less
//! what this driver's flags switch off: no Secrets (no StorageClass names one), no pods
//! for the resizer (`--handle-volume-inuse-error=false`: expansion is online), no
//! VolumeAttributesClasses (the driver cannot modify a volume), no nodes or pods for the
//! health monitor (its node watcher is off). The snapshotter's group-snapshot rules are
//! granted whether or not the cluster serves that API (the operator sets the sidecar's
//! gate only where it is served; a rule on an API not served grants nothing). The
//! sidecars' leader-election Leases are a Role in the driver's namespace, not a
//! cluster-wide grant.
//!
//! The roles and their bindings are static, so the Helm chart holds them
//! (`templates/csi-rbac.yaml`, generated from [`grants`]: see `chart_tests`), in every
//! profile. The operator writes none: granting a rule would need holding it or
//! `escalate` on the role, and an operator that may write a role it can bind may grant
//! itself anything. It only reads that the chart's bindings are in place before it
//! installs the driver ([`operator_rules`]).

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::names::{CONTROLLER_ACCOUNT, CONTROLLER_ROLE, CONTROLLER_ROLE_BINDING, Component};

const CORE: &str = "";
const STORAGE: &str = "storage.k8s.io";
const SNAPSHOT: &str = "snapshot.storage.k8s.io";
const GROUP_SNAPSHOT: &str = "groupsnapshot.storage.k8s.io";
const RBAC: &str = "rbac.authorization.k8s.io";

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..PolicyRule::default()
    }
}

const READ: &[&str] = &["get", "list", "watch"];
/// What client-go's event recorder does.
const RECORD_EVENTS: &[&str] = &["list", "watch", "create", "update", "patch"];

/// The cluster-wide rules of `component`'s role.
pub fn cluster_rules(component: Component) -> Vec<PolicyRule> {
    match component {
        Component::Node => vec![
            // Topology and the host NQN come from the plugin's own Node.
            rule(CORE, &["nodes"], &["get"]),
            // Path recovery: the pods on the plugin's node (a field selector on
            // spec.nodeName) whose volume lost every path are deleted, with an Event
            // on each saying why.
            rule(CORE, &["pods"], &["list", "delete"]),
            rule(CORE, &["events"], &["create"]),
        ],
        Component::Provisioner => vec![
            rule(
                CORE,
                &["persistentvolumes"],
                &["get", "list", "watch", "create", "patch", "delete"],
            ),
            rule(
                CORE,
                &["persistentvolumeclaims"],
                &["get", "list", "watch", "update"],
            ),
            rule(STORAGE, &["storageclasses"], READ),
            rule(CORE, &["events"], RECORD_EVENTS),
            // A snapshot as a volume's source; the finalizer that protects it.
            rule(
                SNAPSHOT,
                &["volumesnapshots"],
                &["get", "list", "watch", "update"],
            ),
            rule(SNAPSHOT, &["volumesnapshotcontents"], &["get", "list"]),
            // Topology: the driver reports accessibility constraints.
            rule(STORAGE, &["csinodes"], READ),
            rule(CORE, &["nodes"], READ),
            rule(STORAGE, &["volumeattachments"], READ),
        ],
        Component::Attacher => vec![
            rule(
                CORE,
                &["persistentvolumes"],
                &["get", "list", "watch", "patch"],
            ),
            rule(STORAGE, &["csinodes"], READ),
            rule(
                STORAGE,
                &["volumeattachments"],
                &["get", "list", "watch", "patch"],
            ),
            rule(STORAGE, &["volumeattachments/status"], &["patch"]),
        ],
        Component::Resizer => vec![
            rule(
                CORE,
                &["persistentvolumes"],
                &["get", "list", "watch", "patch"],
            ),
            rule(CORE, &["persistentvolumeclaims"], READ),
            rule(CORE, &["persistentvolumeclaims/status"], &["patch"]),
            rule(CORE, &["events"], RECORD_EVENTS),
        ],
        Component::Snapshotter => vec![
            rule(CORE, &["events"], RECORD_EVENTS),
            rule(SNAPSHOT, &["volumesnapshotclasses"], READ),
            rule(
                SNAPSHOT,
                &["volumesnapshotcontents"],
                &["get", "list", "watch", "update", "patch"],
            ),
            rule(
                SNAPSHOT,
                &["volumesnapshotcontents/status"],
                &["update", "patch"],
            ),
            // With its CSIVolumeGroupSnapshot gate: the snapshot controller makes the
            // contents, the sidecar cuts them and records the result.
            rule(GROUP_SNAPSHOT, &["volumegroupsnapshotclasses"], READ),
            rule(
                GROUP_SNAPSHOT,
                &["volumegroupsnapshotcontents"],
                &["get", "list", "watch", "update", "patch"],
            ),
            rule(
                GROUP_SNAPSHOT,
                &["volumegroupsnapshotcontents/status"],
                &["update", "patch"],
            ),
        ],
        Component::HealthMonitor => vec![
            rule(CORE, &["persistentvolumes"], READ),
            rule(CORE, &["persistentvolumeclaims"], READ),
            rule(
                CORE,
                &["events"],
                &["get", "list", "watch", "create", "patch"],
            ),
        ],
        // The sidecar checks the token of each csi-addons controller-manager request.
        Component::Addons => vec![rule(
            "authentication.k8s.io",
            &["tokenreviews"],
            &["create"],
        )],
        // CreateVolume reads the claim's controls (annotations, the consistency-group
        // label), removes its one-shot placement hint, and records a refusal on it.
        Component::ControllerPlugin => vec![
            rule(CORE, &["persistentvolumeclaims"], &["get", "patch"]),
            rule(CORE, &["events"], &["create"]),
        ],
    }
}

/// The rules of the controller plugin's Role in the driver's namespace: every sidecar
/// elects its leader with a Lease there; the csi-addons sidecar also publishes its
/// CSIAddonsNode and reads its own pod (the node's owner).
pub fn controller_namespaced_rules(addons: bool) -> Vec<PolicyRule> {
    let mut rules = vec![rule(
        "coordination.k8s.io",
        &["leases"],
        &["get", "list", "watch", "create", "update", "delete"],
    )];
    if addons {
        rules.push(rule(
            "csiaddons.openshift.io",
            &["csiaddonsnodes"],
            &["get", "watch", "create", "update"],
        ));
        rules.push(rule(CORE, &["pods"], &["get"]));
    }
    rules
}

/// Where a role of the chart grants its rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// A ClusterRole and ClusterRoleBinding.
    Cluster,
    /// A Role and RoleBinding in the release's (the driver's) namespace.
    Namespace,
}

/// One role of the chart's for the driver, with the binding that gives it to one of the
/// driver's accounts (under the role's name).
#[derive(Clone, Debug, PartialEq)]
pub struct Grant {
    pub scope: Scope,
    /// The role's name, and its binding's.
    pub name: String,
    pub rules: Vec<PolicyRule>,
    /// The ServiceAccount, in the driver's namespace, the binding names.
    pub account: &'static str,
}

impl Grant {
    /// `ClusterRole` or `Role`.
    pub fn role_kind(&self) -> &'static str {
        match self.scope {
            Scope::Cluster => "ClusterRole",
            Scope::Namespace => "Role",
        }
    }

    /// `ClusterRoleBinding` or `RoleBinding`.
    pub fn binding_kind(&self) -> &'static str {
        match self.scope {
            Scope::Cluster => "ClusterRoleBinding",
            Scope::Namespace => "RoleBinding",
        }
    }

    /// `Kind/name` of the binding.
    pub fn binding_key(&self) -> String {
        format!("{}/{}", self.binding_kind(), self.name)
    }
}

/// Every role the chart holds for the driver: each component's cluster-wide one (the
/// csi-addons sidecar's too, whether or not a driver runs it: it is harmless without),
/// then the controller's Role with the csi-addons rules.
pub fn grants() -> Vec<Grant> {
    let mut out: Vec<Grant> = Component::ALL
        .iter()
        .map(|c| Grant {
            scope: Scope::Cluster,
            name: c.role(),
            rules: cluster_rules(*c),
            account: c.account(),
        })
        .collect();
    out.push(Grant {
        scope: Scope::Namespace,
        name: CONTROLLER_ROLE.to_owned(),
        rules: controller_namespaced_rules(true),
        account: CONTROLLER_ACCOUNT,
    });
    out
}

/// Every ClusterRoleBinding of the chart's for the driver, by name: the ones the
/// operator may read (the chart's `simplyblock.csiClusterRoleBindings`).
pub fn cluster_role_binding_names() -> Vec<String> {
    Component::ALL.iter().map(|c| c.binding()).collect()
}

/// Every permission the SimplyblockDriver controller uses; the operator's ClusterRole
/// must grant them. No write, `bind` or `escalate` of any RBAC object: it reads the
/// chart's bindings, by name, and nothing else of RBAC.
pub fn operator_rules() -> Vec<PolicyRule> {
    vec![
        rule(
            "storage.simplyblock.io",
            &["simplyblockdrivers"],
            &["get", "list", "watch", "patch"],
        ),
        rule(
            "storage.simplyblock.io",
            &["simplyblockdrivers/status"],
            &["patch"],
        ),
        rule(
            "apps",
            &["statefulsets", "daemonsets"],
            &["get", "list", "watch", "create", "patch"],
        ),
        rule(
            CORE,
            &["serviceaccounts", "configmaps"],
            &["get", "create", "patch"],
        ),
        PolicyRule {
            resource_names: Some(cluster_role_binding_names()),
            ..rule(RBAC, &["clusterrolebindings"], &["get"])
        },
        PolicyRule {
            resource_names: Some(vec![CONTROLLER_ROLE_BINDING.to_owned()]),
            ..rule(RBAC, &["rolebindings"], &["get"])
        },
        rule(
            STORAGE,
            &["csidrivers"],
            &["get", "list", "create", "patch", "delete"],
        ),
        rule(
            SNAPSHOT,
            &["volumesnapshotclasses"],
            &["get", "list", "create", "patch", "delete"],
        ),
        rule(
            GROUP_SNAPSHOT,
            &["volumegroupsnapshotclasses"],
            &["get", "list", "create", "patch", "delete"],
        ),
        rule("events.k8s.io", &["events"], &["create", "patch"]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_rule() -> Vec<PolicyRule> {
        let mut all: Vec<PolicyRule> = grants().into_iter().flat_map(|g| g.rules).collect();
        all.extend(operator_rules());
        all
    }

    #[test]
    fn no_rule_uses_a_wildcard() {
        for r in every_rule() {
            let words = r
                .api_groups
                .iter()
                .flatten()
                .chain(r.resources.iter().flatten())
                .chain(r.resource_names.iter().flatten())
                .chain(r.verbs.iter());
            for word in words {
                assert!(!word.contains('*'), "{r:?}");
            }
            assert!(!r.verbs.is_empty(), "{r:?}");
        }
    }

    #[test]
    fn no_sidecar_reads_secrets_or_writes_what_it_only_watches() {
        for c in Component::ALL {
            for r in cluster_rules(c) {
                assert!(
                    !r.resources.iter().flatten().any(|x| x == "secrets"),
                    "{c:?}: {r:?}"
                );
            }
        }
        // The node plugin reads its own Node, and lists and deletes pods (never creates,
        // updates or reads their secrets) with an Event each: nothing else.
        assert_eq!(
            cluster_rules(Component::Node),
            vec![
                rule(CORE, &["nodes"], &["get"]),
                rule(CORE, &["pods"], &["list", "delete"]),
                rule(CORE, &["events"], &["create"]),
            ]
        );
    }

    #[test]
    fn the_operator_writes_grants_and_binds_no_role_and_reads_only_the_charts_bindings() {
        let rbac: Vec<PolicyRule> = operator_rules()
            .into_iter()
            .filter(|r| r.api_groups == Some(vec![RBAC.to_owned()]))
            .collect();
        for r in &rbac {
            assert_eq!(r.verbs, vec!["get"], "{r:?}");
        }
        let named = |resource: &str| {
            rbac.iter()
                .find(|r| r.resources == Some(vec![resource.to_owned()]))
                .and_then(|r| r.resource_names.clone())
                .unwrap_or_else(|| panic!("{resource}: read by name only"))
        };
        assert_eq!(rbac.len(), 2, "{rbac:?}");
        let cluster: Vec<String> = grants()
            .iter()
            .filter(|g| g.scope == Scope::Cluster)
            .map(|g| g.name.clone())
            .collect();
        assert_eq!(named("clusterrolebindings"), cluster);
        assert_eq!(named("clusterrolebindings").len(), Component::ALL.len());
        assert_eq!(
            named("rolebindings"),
            vec![CONTROLLER_ROLE_BINDING.to_owned()]
        );
        for r in operator_rules() {
            for verb in ["bind", "escalate", "impersonate"] {
                assert!(!r.verbs.iter().any(|v| v == verb), "{r:?}");
            }
        }
    }

    #[test]
    fn the_chart_grants_every_component_and_the_controllers_leases() {
        let all = grants();
        assert_eq!(all.len(), Component::ALL.len() + 1);
        for c in Component::ALL {
            let g = all.iter().find(|g| g.name == c.role()).expect("granted");
            assert_eq!(
                (g.scope, g.account, &g.rules),
                (Scope::Cluster, c.account(), &cluster_rules(c))
            );
        }
        let controller = all.last().expect("the controller's Role");
        assert_eq!(controller.scope, Scope::Namespace);
        assert_eq!(controller.account, CONTROLLER_ACCOUNT);
        assert_eq!(controller.rules, controller_namespaced_rules(true));
        assert_eq!(
            controller.binding_key(),
            "RoleBinding/simplyblock-operator-csi-controller"
        );
    }

    #[test]
    fn csi_addons_permissions_are_granted_only_with_the_sidecar() {
        assert_eq!(controller_namespaced_rules(false).len(), 1);
        assert_eq!(controller_namespaced_rules(true).len(), 3);
    }
}

#[cfg(test)]
mod chart_tests {
    use k8s_openapi::api::rbac::v1::{
        ClusterRole, ClusterRoleBinding, Role, RoleBinding, RoleRef, Subject,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::Value;

    use super::*;

    /// Stand-ins for the template's expressions, replaced in the text.
    const NAMESPACE: &str = "NAMESPACE";
    const LABELS: &str = "LABELS";

    fn meta(name: &str, namespaced: bool) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: namespaced.then(|| NAMESPACE.to_owned()),
            labels: Some([(LABELS.to_owned(), String::new())].into()),
            ..ObjectMeta::default()
        }
    }

    fn json<T: serde::Serialize>(object: &T) -> Value {
        serde_json::to_value(object).expect("json")
    }

    /// Each grant's role, then its binding to the account in the release namespace.
    fn objects() -> Vec<Value> {
        let mut out = Vec::new();
        for g in grants() {
            let namespaced = g.scope == Scope::Namespace;
            let role_ref = RoleRef {
                api_group: Some(RBAC.to_owned()),
                kind: g.role_kind().to_owned(),
                name: g.name.clone(),
            };
            let subjects = Some(vec![Subject {
                kind: "ServiceAccount".to_owned(),
                name: g.account.to_owned(),
                namespace: Some(NAMESPACE.to_owned()),
                ..Subject::default()
            }]);
            let metadata = meta(&g.name, namespaced);
            match g.scope {
                Scope::Cluster => {
                    out.push(json(&ClusterRole {
                        metadata: metadata.clone(),
                        rules: Some(g.rules),
                        ..ClusterRole::default()
                    }));
                    out.push(json(&ClusterRoleBinding {
                        metadata,
                        role_ref,
                        subjects,
                    }));
                }
                Scope::Namespace => {
                    out.push(json(&Role {
                        metadata: metadata.clone(),
                        rules: Some(g.rules),
                    }));
                    out.push(json(&RoleBinding {
                        metadata,
                        role_ref,
                        subjects,
                    }));
                }
            }
        }
        out
    }

    /// The chart's `csi-rbac.yaml`.
    fn chart_template() -> String {
        let mut out = String::from(
            "# Generated from the operator's driver::rbac::grants(); `UPDATE_EXPECT=1 cargo test\n\
             # -p simplyblock-operator --lib chart_tests` rewrites it. Do not edit.\n\
             #\n\
             # The CSI driver's permissions: one ClusterRole per component (the node plugin and\n\
             # each sidecar of the controller plugin) bound to the account its pods run as, and\n\
             # the controller's Role for its sidecars' leader-election Leases (and csi-addons'\n\
             # CSIAddonsNode). Static, so installed in every profile; the operator writes no\n\
             # role or binding, and holds a SimplyblockDriver until these bindings are in place.\n",
        );
        let documents: Vec<String> = objects()
            .iter()
            .map(|o| serde_saphyr::to_string(o).expect("yaml"))
            .collect();
        for line in documents.join("---\n").lines() {
            let line = line
                .replace(
                    &format!("namespace: {NAMESPACE}"),
                    "namespace: {{ .Release.Namespace }}",
                )
                .replace(
                    &format!("    {LABELS}: \"\""),
                    "    {{- include \"simplyblock.labels\" . | nindent 4 }}\n  \
                     {{- include \"simplyblock.annotations\" . | nindent 2 }}",
                );
            out.push_str(&line);
            out.push('\n');
        }
        out
    }

    #[test]
    fn the_chart_grants_the_csi_drivers_permissions() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deploy/charts/simplyblock-operator/templates/csi-rbac.yaml");
        let actual = chart_template();
        assert!(!actual.contains(NAMESPACE) && !actual.contains(LABELS));
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            std::fs::write(&path, &actual).expect("write the chart's csi-rbac.yaml");
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == actual,
            "the chart's csi-rbac.yaml differs from driver::rbac::grants(); rerun with UPDATE_EXPECT=1"
        );
    }
}

//! Who may do what: the rules of the node plugin's and of each controller sidecar's role,
//! and the permissions this controller itself uses. Pure data.
//!
//! Each sidecar's rules are what its upstream `deploy/kubernetes/rbac.yaml` grants, less
//! what this driver's flags switch off: no Secrets (no StorageClass names one), no pods
//! for the resizer (`--handle-volume-inuse-error=false`: expansion is online), no
//! VolumeAttributesClasses (the driver cannot modify a volume), no group snapshots (not
//! served yet), no nodes or pods for the health monitor (its node watcher is off). The
//! sidecars' leader-election Leases are a Role in the driver's namespace, not a
//! cluster-wide grant.
//!
//! Granting a rule needs either holding it or `escalate` on the role (and `bind` for the
//! binding): the operator gets the latter, on these roles' names only
//! ([`operator_rules`]), so its own permissions stay what it uses.

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::names::{CONTROLLER_ROLE, Component};

const CORE: &str = "";
const STORAGE: &str = "storage.k8s.io";
const SNAPSHOT: &str = "snapshot.storage.k8s.io";
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
        // Topology and the host NQN come from the plugin's own Node.
        Component::Node => vec![rule(CORE, &["nodes"], &["get"])],
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

/// Every cluster role the controller writes, by name: what the operator may `escalate`
/// and `bind` cluster-wide (the chart's `simplyblock.csiClusterRoles`).
pub fn cluster_role_names() -> Vec<String> {
    Component::ALL.iter().map(|c| c.role()).collect()
}

/// Every permission the SimplyblockDriver controller uses; the operator's ClusterRole
/// must grant them.
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
        rule(
            RBAC,
            &["roles", "rolebindings"],
            &["get", "create", "patch"],
        ),
        rule(
            RBAC,
            &["clusterroles", "clusterrolebindings"],
            &["get", "list", "create", "patch", "delete"],
        ),
        PolicyRule {
            resource_names: Some(cluster_role_names()),
            ..rule(RBAC, &["clusterroles"], &["bind", "escalate"])
        },
        PolicyRule {
            resource_names: Some(vec![CONTROLLER_ROLE.to_owned()]),
            ..rule(RBAC, &["roles"], &["bind", "escalate"])
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
        rule("events.k8s.io", &["events"], &["create", "patch"]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_rule() -> Vec<PolicyRule> {
        let mut all: Vec<PolicyRule> = Component::ALL
            .iter()
            .flat_map(|c| cluster_rules(*c))
            .collect();
        all.extend(controller_namespaced_rules(true));
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
        // The node plugin reads its own Node and nothing else.
        assert_eq!(
            cluster_rules(Component::Node),
            vec![rule(CORE, &["nodes"], &["get"])]
        );
    }

    #[test]
    fn the_operator_may_grant_exactly_the_roles_it_writes() {
        let grants: Vec<PolicyRule> = operator_rules()
            .into_iter()
            .filter(|r| r.verbs.contains(&"escalate".to_owned()))
            .collect();
        assert_eq!(grants.len(), 2, "{grants:?}");
        for grant in &grants {
            assert_eq!(grant.verbs, vec!["bind", "escalate"]);
        }
        let named = |resource: &str| {
            grants
                .iter()
                .find(|g| g.resources == Some(vec![resource.to_owned()]))
                .and_then(|g| g.resource_names.clone())
                .expect("named roles only")
        };
        assert_eq!(named("clusterroles"), cluster_role_names());
        assert_eq!(named("clusterroles").len(), Component::ALL.len());
        assert_eq!(named("roles"), vec![CONTROLLER_ROLE.to_owned()]);
    }

    #[test]
    fn csi_addons_permissions_are_granted_only_with_the_sidecar() {
        assert_eq!(controller_namespaced_rules(false).len(), 1);
        assert_eq!(controller_namespaced_rules(true).len(), 3);
    }
}

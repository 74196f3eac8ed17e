//! Which Kubernetes nodes a run may use, what they are for, and which distribution the
//! cluster runs.

use std::fmt;

use k8s_openapi::api::core::v1::Node;
use simplyblock_api::cluster_deployment_config::Environment;

/// What a machine is for, from its `node-role.kubernetes.io/<role>` labels. The most
/// restrictive label wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Infrastructure nodes: the tier a cluster's own infrastructure runs on, which is
    /// where storage belongs, so they are proposed first and need no opt-in.
    Infra,
    Worker,
    /// Control-plane (or master) nodes: used only with `enableControlPlaneNodes`.
    ControlPlane,
}

impl Role {
    /// The node set a role's workers are proposed in.
    pub fn node_set(self) -> &'static str {
        match self {
            Role::Infra => "infra",
            Role::Worker => "discovered",
            Role::ControlPlane => "control-plane",
        }
    }
}

const ROLE_PREFIX: &str = "node-role.kubernetes.io/";

pub fn role(node: &Node) -> Role {
    let mut role = Role::Worker;
    for key in node.metadata.labels.iter().flat_map(|l| l.keys()) {
        let Some(r) = key.strip_prefix(ROLE_PREFIX) else {
            continue;
        };
        let this = match r {
            "control-plane" | "master" => Role::ControlPlane,
            "infra" => Role::Infra,
            // Unknown roles count as worker.
            _ => Role::Worker,
        };
        role = match (role, this) {
            (Role::ControlPlane, _) | (_, Role::ControlPlane) => Role::ControlPlane,
            (Role::Infra, _) | (_, Role::Infra) => Role::Infra,
            _ => Role::Worker,
        };
    }
    role
}

/// Why a node is not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// `spec.unschedulable`.
    Cordoned,
    /// A `NoSchedule` or `NoExecute` taint.
    Tainted { key: String, effect: String },
    /// A control-plane node and the run did not ask for those.
    ControlPlane,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Cordoned => f.write_str(
                "it is cordoned, so nothing is scheduled there; uncordon it and run discovery again to include it",
            ),
            Reason::Tainted { key, effect } => write!(
                f,
                "it carries the taint {key}:{effect}, so the probe cannot run there; remove the taint or add a matching toleration to spec.discover.tolerations"
            ),
            Reason::ControlPlane => f.write_str(
                "it is a control-plane node, which holds storage only when asked to; set spec.discover.enableControlPlaneNodes to include it",
            ),
        }
    }
}

/// Whether a node may hold storage in a discovery run: schedulable (not cordoned, no
/// `NoSchedule`/`NoExecute` taint; `PreferNoSchedule` is fine) and not a control-plane
/// node unless those are enabled. The run and the first-install bootstrap both ask this,
/// so the bootstrap never raises a run the run would decline.
pub fn usable_worker(node: &Node, enable_control_plane_nodes: bool) -> Result<(), Reason> {
    let spec = node.spec.as_ref();
    if spec.and_then(|s| s.unschedulable).unwrap_or(false) {
        return Err(Reason::Cordoned);
    }
    if let Some(t) = spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .find(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
    {
        return Err(Reason::Tainted {
            key: t.key.clone(),
            effect: t.effect.clone(),
        });
    }
    if role(node) == Role::ControlPlane && !enable_control_plane_nodes {
        return Err(Reason::ControlPlane);
    }
    Ok(())
}

/// The node's InternalIP, which is how the operator addresses the worker everywhere else.
pub fn internal_ip(node: &Node) -> Option<std::net::IpAddr> {
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "InternalIP")?
        .address
        .parse()
        .ok()
}

/// The distribution, concluded once from every node and, when they could be listed, the
/// API groups. Signals, strongest first: API groups, kubelet version, OS image, labels and
/// annotations. When several match, OpenShift wins over Talos over K3s over Rancher: a
/// Rancher-managed K3s cluster carries both markers, and the distribution that installed
/// the kubelet is what shapes the host.
pub fn environment(nodes: &[Node], api_groups: Option<&[String]>) -> Environment {
    let mut seen = [false; 4]; // OpenShift, Talos, K3s, Rancher
    for g in api_groups.unwrap_or_default() {
        if g.ends_with(".openshift.io") {
            seen[0] = true;
        }
        if g.ends_with(".talos.dev") {
            seen[1] = true;
        }
        if g == "k3s.cattle.io" || g == "helm.cattle.io" {
            seen[2] = true;
        }
        if g == "management.cattle.io" || g == "provisioning.cattle.io" {
            seen[3] = true;
        }
    }
    for n in nodes {
        if let Some(info) = n.status.as_ref().and_then(|s| s.node_info.as_ref()) {
            let kubelet = info.kubelet_version.as_str();
            let os = info.os_image.as_str();
            seen[2] |= kubelet.contains("+k3s");
            seen[3] |= kubelet.contains("+rke2");
            seen[1] |= os.starts_with("Talos");
            seen[0] |= os.starts_with("Red Hat Enterprise Linux CoreOS")
                || os.starts_with("Red Hat Enterprise Linux CoreOS")
                || os.starts_with("Fedora CoreOS");
        }
        let keys = n
            .metadata
            .labels
            .iter()
            .flat_map(|l| l.keys())
            .chain(n.metadata.annotations.iter().flat_map(|a| a.keys()));
        for k in keys {
            seen[0] |= k.starts_with("node.openshift.io/")
                || k.starts_with("machineconfiguration.openshift.io/");
            seen[2] |= k.starts_with("k3s.io/");
            seen[3] |= k.starts_with("rke2.io/")
                || k.starts_with("cattle.io/")
                || k.starts_with("rke.cattle.io/");
        }
    }
    match seen {
        [true, ..] => Environment::OpenShift,
        [_, true, ..] => Environment::Talos,
        [_, _, true, _] => Environment::K3s,
        [_, _, _, true] => Environment::Rancher,
        _ => Environment::Vanilla,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};
    use std::collections::BTreeMap;

    fn node(labels: &[&str], spec: NodeSpec) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("n".into());
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|l| (l.to_string(), String::new()))
                .collect::<BTreeMap<_, _>>(),
        );
        n.spec = Some(spec);
        n
    }

    fn taint(effect: &str) -> NodeSpec {
        NodeSpec {
            taints: Some(vec![Taint {
                key: "dedicated".into(),
                effect: effect.into(),
                ..Taint::default()
            }]),
            ..NodeSpec::default()
        }
    }

    #[test]
    fn cordoned_and_tainted_nodes_say_why() {
        let cordoned = node(
            &[],
            NodeSpec {
                unschedulable: Some(true),
                ..NodeSpec::default()
            },
        );
        assert_eq!(usable_worker(&cordoned, true), Err(Reason::Cordoned));
        let tainted = node(&[], taint("NoExecute"));
        let err = usable_worker(&tainted, true).expect_err("tainted");
        assert!(err.to_string().contains("dedicated:NoExecute"), "{err}");
        assert_eq!(
            usable_worker(&node(&[], taint("PreferNoSchedule")), false),
            Ok(())
        );
    }

    #[test]
    fn control_plane_needs_the_opt_in_and_infra_does_not() {
        let cp = node(&["node-role.kubernetes.io/master"], NodeSpec::default());
        let err = usable_worker(&cp, false).expect_err("declined");
        assert!(err.to_string().contains("enableControlPlaneNodes"));
        assert_eq!(usable_worker(&cp, true), Ok(()));
        let infra = node(&["node-role.kubernetes.io/infra"], NodeSpec::default());
        assert_eq!(usable_worker(&infra, false), Ok(()));
        assert_eq!(role(&infra), Role::Infra);
    }

    #[test]
    fn the_most_restrictive_role_wins() {
        let both = node(
            &[
                "node-role.kubernetes.io/infra",
                "node-role.kubernetes.io/control-plane",
                "node-role.kubernetes.io/worker",
            ],
            NodeSpec::default(),
        );
        assert_eq!(role(&both), Role::ControlPlane);
        let odd = node(&["node-role.kubernetes.io/gpu"], NodeSpec::default());
        assert_eq!(role(&odd), Role::Worker);
    }

    #[test]
    fn environment_precedence() {
        let mut k3s = node(&["k3s.io/hostname"], NodeSpec::default());
        k3s.metadata.annotations = Some(BTreeMap::from([("rke2.io/x".into(), String::new())]));
        assert_eq!(environment(&[k3s.clone()], None), Environment::K3s);
        let groups = vec!["config.openshift.io".to_string()];
        assert_eq!(environment(&[k3s], Some(&groups)), Environment::OpenShift);
        assert_eq!(environment(&[], None), Environment::Vanilla);
    }
}

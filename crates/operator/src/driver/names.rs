//! The names of the driver's objects, and the image it runs when `spec.image` is unset.
//!
//! The namespaced names, the selectors and the container and volume names are the ones
//! the Helm chart that installed the driver before this kind existed used: adoption
//! applies onto those objects, a StatefulSet's or DaemonSet's selector cannot change, and
//! a container or volume under another name would run beside the chart's instead of
//! replacing it.

/// The controller plugin and its sidecars.
pub const CONTROLLER_STATEFULSET: &str = "simplyblock-csi-controller";
/// The node plugin and its registrar, one per worker.
pub const NODE_DAEMONSET: &str = "simplyblock-csi-node";
/// The controller plugin's pods run as this account.
pub const CONTROLLER_ACCOUNT: &str = "simplyblock-csi-controller-sa";
/// The node plugin's pods run as this account.
pub const NODE_ACCOUNT: &str = "simplyblock-csi-node-sa";
/// Mounted by both plugins.
pub const CONFIG_MAP: &str = "simplyblock-csi-cm";
/// Mounted by the node plugin.
pub const NODE_SERVER_CONFIG_MAP: &str = "simplyblock-csi-nodeservercm";
/// The controller plugin's namespaced permissions (its sidecars' leader-election Leases),
/// a Role and RoleBinding of the chart (`csi-rbac.yaml`) in the release namespace.
pub const CONTROLLER_ROLE: &str = "simplyblock-operator-csi-controller";
/// The chart's RoleBinding of [`CONTROLLER_ROLE`], under the same name.
pub const CONTROLLER_ROLE_BINDING: &str = CONTROLLER_ROLE;
/// Written only where the cluster serves `snapshot.storage.k8s.io/v1`.
pub const SNAPSHOT_CLASS: &str = "simplyblock-csi-snapshotclass";
/// Written only where the cluster also serves `groupsnapshot.storage.k8s.io/v1beta1`.
pub const GROUP_SNAPSHOT_CLASS: &str = "simplyblock-csi-groupsnapshotclass";

/// The pod label the controller StatefulSet selects (the chart's; a selector is immutable).
pub const CONTROLLER_APP: &str = "csi-controller";
/// The pod label the node DaemonSet selects (the chart's).
pub const NODE_APP: &str = "simplyblock-csi-node";

/// The repository of the CSI driver's image, beside the operator's.
pub const CSI_REPOSITORY: &str = "simplyblock-csi";

/// Who a cluster-wide role is for: the node plugin or one sidecar of the controller's.
///
/// The roles and their bindings are the chart's (`csi-rbac.yaml`, generated from
/// [`super::rbac`]), named `simplyblock-operator-csi-<component>`: names of their own, so
/// that `helm install` never collides with the `simplyblock-csi-<component>-role` and
/// `-binding` (and `simplyblock-csi-controller-role`/`-binding`) that earlier versions of
/// this operator wrote, or that the CSI driver's own Helm chart and the Go operator's
/// installed. The operator writes no role or binding: those older ones are left where
/// they are (it holds no right to delete them); they grant the same accounts what the
/// chart's do, or more, and an administrator may delete them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Component {
    Node,
    Provisioner,
    Attacher,
    Resizer,
    Snapshotter,
    HealthMonitor,
    /// The csi-addons sidecar, with `spec.enableCSIAddons`.
    Addons,
    /// The controller plugin itself: it reads the claims it creates volumes for.
    ControllerPlugin,
}

impl Component {
    /// Every component, in the order their roles are applied.
    pub const ALL: [Component; 8] = [
        Component::Node,
        Component::Provisioner,
        Component::Attacher,
        Component::Resizer,
        Component::Snapshotter,
        Component::HealthMonitor,
        Component::Addons,
        Component::ControllerPlugin,
    ];

    fn word(self) -> &'static str {
        match self {
            Component::Node => "node",
            Component::Provisioner => "provisioner",
            Component::Attacher => "attacher",
            Component::Resizer => "resizer",
            Component::Snapshotter => "snapshotter",
            Component::HealthMonitor => "health-monitor",
            Component::Addons => "addons",
            Component::ControllerPlugin => "controller-plugin",
        }
    }

    /// `simplyblock-operator-csi-<component>`: the chart's ClusterRole.
    pub fn role(self) -> String {
        format!("simplyblock-operator-csi-{}", self.word())
    }

    /// The chart's ClusterRoleBinding of [`Component::role`], under the same name.
    pub fn binding(self) -> String {
        self.role()
    }

    /// The account the role is bound to.
    pub fn account(self) -> &'static str {
        match self {
            Component::Node => NODE_ACCOUNT,
            _ => CONTROLLER_ACCOUNT,
        }
    }
}

/// An image reference taken apart: everything before its last path segment, and the tag.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ImageRef<'a> {
    prefix: Option<&'a str>,
    tag: Option<&'a str>,
}

fn parse(image: &str) -> ImageRef<'_> {
    let named = image
        .split_once('@')
        .map_or(image, |(named, _digest)| named);
    let (prefix, last) = match named.rsplit_once('/') {
        Some((prefix, last)) => (Some(prefix), last),
        None => (None, named),
    };
    // A ':' before the last '/' is a registry's port, never a tag.
    let tag = last.split_once(':').map(|(_, tag)| tag);
    ImageRef { prefix, tag }
}

/// The tag of `image`: the driver's version as status reports it. `None` for an image
/// pinned by digest alone.
pub fn tag(image: &str) -> Option<&str> {
    parse(image).tag.filter(|t| !t.is_empty())
}

/// The CSI driver's image when `spec.image` is unset: the operator's registry and tag
/// with the CSI repository, since the two images are released together. An operator image
/// pinned by digest alone names no tag to take, and the CSI image's digest is a different
/// one, so there is no default then; the message says what to do.
pub fn default_image(operator_image: &str) -> Result<String, String> {
    let parsed = parse(operator_image);
    let Some(tag) = parsed.tag.filter(|t| !t.is_empty()) else {
        return Err(format!(
            "spec.image is unset and the operator's own image {operator_image} names no tag to run the CSI driver at (a digest belongs to one image only); set spec.image, e.g. quay.io/simplyblock-io/{CSI_REPOSITORY}:<version>"
        ));
    };
    Ok(match parsed.prefix {
        Some(prefix) => format!("{prefix}/{CSI_REPOSITORY}:{tag}"),
        None => format!("{CSI_REPOSITORY}:{tag}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_image_is_the_operators_registry_and_tag_with_the_csi_repository() {
        for (operator, csi) in [
            (
                "quay.io/simplyblock-io/simplyblock-operator:v26.4.0",
                "quay.io/simplyblock-io/simplyblock-csi:v26.4.0",
            ),
            // The tag is kept; the operator's digest is not the CSI image's.
            (
                "quay.io/simplyblock-io/simplyblock-operator:v26.4.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "quay.io/simplyblock-io/simplyblock-csi:v26.4.0",
            ),
            // A registry's port is not a tag.
            (
                "registry.local:5000/mirror/simplyblock-operator:1.2",
                "registry.local:5000/mirror/simplyblock-csi:1.2",
            ),
            ("simplyblock-operator:dev", "simplyblock-csi:dev"),
        ] {
            assert_eq!(default_image(operator).as_deref(), Ok(csi), "{operator}");
        }
    }

    #[test]
    fn an_operator_image_without_a_tag_gives_no_default_and_says_so() {
        for operator in [
            "quay.io/simplyblock-io/simplyblock-operator@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "registry.local:5000/simplyblock-operator",
        ] {
            let why = default_image(operator).expect_err(operator);
            assert!(why.contains("set spec.image"), "{why}");
            assert!(why.contains(operator), "{why}");
        }
    }

    #[test]
    fn the_version_is_the_tag() {
        assert_eq!(tag("quay.io/simplyblock-io/simplyblock-csi:v1"), Some("v1"));
        assert_eq!(
            tag("localhost:5000/simplyblock-csi:v2@sha256:ab"),
            Some("v2")
        );
        assert_eq!(tag("localhost:5000/simplyblock-csi@sha256:ab"), None);
    }

    #[test]
    fn role_names_are_the_charts_and_none_an_earlier_installation_used() {
        for c in Component::ALL {
            assert!(c.role().starts_with("simplyblock-operator-csi-"));
            assert_eq!(c.binding(), c.role());
            assert!(c.role().len() <= 63);
            // What earlier operators and the CSI chart wrote: never the same object.
            assert!(!c.role().ends_with("-role") && !c.binding().ends_with("-binding"));
        }
        assert_eq!(
            Component::HealthMonitor.role(),
            "simplyblock-operator-csi-health-monitor"
        );
        assert_eq!(
            CONTROLLER_ROLE_BINDING,
            "simplyblock-operator-csi-controller"
        );
    }
}

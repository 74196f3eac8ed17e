//! The kinds of object the driver consists of, and how one is named: its kind and name
//! (a namespaced one lives in the SimplyblockDriver's namespace).

use kube::api::ApiResource;
use kube::core::GroupVersionKind;

/// A kind the driver writes. The order is the order of application: identities and
/// configuration first, then the registration, and the workloads last, so their pods
/// start with everything they use in place.
///
/// No RBAC kind: the accounts' roles and bindings are the chart's ([`super::rbac`]), and
/// the controller only checks that they are there. The ClusterRoles, ClusterRoleBindings,
/// Role and RoleBinding that earlier versions of the operator wrote (or adopted from the
/// CSI driver's Helm release) under the `simplyblock-csi-*-role` and `-binding` names are
/// no longer read, changed or deleted: the operator may not touch them, and they stay
/// until an administrator deletes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    ServiceAccount,
    ConfigMap,
    CsiDriver,
    VolumeSnapshotClass,
    VolumeGroupSnapshotClass,
    StatefulSet,
    DaemonSet,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::ServiceAccount,
        Kind::ConfigMap,
        Kind::CsiDriver,
        Kind::VolumeSnapshotClass,
        Kind::VolumeGroupSnapshotClass,
        Kind::StatefulSet,
        Kind::DaemonSet,
    ];

    /// `(group, version, kind, plural)`.
    fn parts(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            Kind::ServiceAccount => ("", "v1", "ServiceAccount", "serviceaccounts"),
            Kind::ConfigMap => ("", "v1", "ConfigMap", "configmaps"),
            Kind::CsiDriver => ("storage.k8s.io", "v1", "CSIDriver", "csidrivers"),
            Kind::VolumeSnapshotClass => (
                SNAPSHOT_GROUP,
                SNAPSHOT_VERSION,
                "VolumeSnapshotClass",
                "volumesnapshotclasses",
            ),
            Kind::VolumeGroupSnapshotClass => (
                GROUP_SNAPSHOT_GROUP,
                GROUP_SNAPSHOT_VERSION,
                "VolumeGroupSnapshotClass",
                "volumegroupsnapshotclasses",
            ),
            Kind::StatefulSet => ("apps", "v1", "StatefulSet", "statefulsets"),
            Kind::DaemonSet => ("apps", "v1", "DaemonSet", "daemonsets"),
        }
    }

    /// What the dynamic client needs to reach objects of this kind.
    pub fn resource(self) -> ApiResource {
        let (group, version, kind, plural) = self.parts();
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
    }

    /// The kind's name, as in `kind:`.
    pub fn name(self) -> &'static str {
        self.parts().2
    }

    /// Whether objects of this kind live in a namespace (the driver's).
    pub fn namespaced(self) -> bool {
        matches!(
            self,
            Kind::ServiceAccount | Kind::ConfigMap | Kind::StatefulSet | Kind::DaemonSet
        )
    }
}

/// The group of the snapshot API, which the cluster may not serve.
pub const SNAPSHOT_GROUP: &str = "snapshot.storage.k8s.io";
pub const SNAPSHOT_VERSION: &str = "v1";
/// The group of the group-snapshot API, which the cluster may not serve either; the
/// version the csi-snapshotter sidecar v8.2 watches.
pub const GROUP_SNAPSHOT_GROUP: &str = "groupsnapshot.storage.k8s.io";
pub const GROUP_SNAPSHOT_VERSION: &str = "v1beta1";
/// The group-snapshot API's kinds (plurals): the sidecar, with its group-snapshot gate,
/// waits for each of them, so the gate is set only when all are served.
pub const GROUP_SNAPSHOT_RESOURCES: [&str; 3] = [
    "volumegroupsnapshots",
    "volumegroupsnapshotcontents",
    "volumegroupsnapshotclasses",
];

/// One object of the driver.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub kind: Kind,
    pub name: String,
}

impl ObjectKey {
    pub fn new(kind: Kind, name: impl Into<String>) -> ObjectKey {
        ObjectKey {
            kind,
            name: name.into(),
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind.name(), self.name)
    }
}

//! What a pass does, decided from the driver and an observation of the cluster: hold it
//! (a second driver, the wrong namespace, the chart's permissions missing, no image, an
//! adoption refused), or bring the driver's objects to what the spec describes; and the
//! status that follows. Pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use serde_json::Value;
use simplyblock_api::simplyblock_driver::{
    DriverPhase, Origin, SimplyblockDriver, SimplyblockDriverStatus, SnapshotSupport,
};

use simplyblock_api::control_plane::{ControlPlane, TlsProvider};

use super::adoption::{self, Holder};
use super::compare;
use super::manifests::{self, CaSource, Settings};
use super::names;
use super::objects::{Kind, ObjectKey};
use super::rbac;
use crate::controlplane::manifests::Tls;
use crate::controlplane::names::{API_TLS_SECRET, SERVICE_CA_CONFIG_MAP};

/// A SimplyblockDriver of the cluster, as the singleton rule sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverRef {
    pub namespace: String,
    pub name: String,
    pub created: Option<Time>,
}

impl DriverRef {
    pub fn of(driver: &SimplyblockDriver) -> DriverRef {
        DriverRef {
            namespace: driver.namespace().unwrap_or_default(),
            name: driver.name_any(),
            created: driver.metadata.creation_timestamp.clone(),
        }
    }

    /// Oldest first; the same second is decided by namespace, then name.
    fn age_key(&self) -> (Option<&Time>, &str, &str) {
        (self.created.as_ref(), &self.namespace, &self.name)
    }
}

impl std::fmt::Display for DriverRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The one driver of the cluster: the oldest. `None` when there is none.
pub fn active(drivers: &[DriverRef]) -> Option<&DriverRef> {
    drivers.iter().min_by(|a, b| a.age_key().cmp(&b.age_key()))
}

/// What a pass found of one of the chart's bindings ([`rbac::grants`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Seen {
    /// The binding, as read.
    Found(Value),
    /// There is none.
    Missing,
    /// The operator may not read it: its own roles are not this version's chart's.
    Forbidden,
}

/// What a pass reads before deciding.
#[derive(Clone, Debug, Default)]
pub struct Observation {
    /// The chart's bindings that give the driver's accounts their permissions, by
    /// [`rbac::Grant::binding_key`]; one not here counts as missing.
    pub bindings: BTreeMap<String, Seen>,
    /// Every SimplyblockDriver of the cluster, this one included.
    pub drivers: Vec<DriverRef>,
    /// The cluster serves `snapshot.storage.k8s.io/v1` VolumeSnapshotClasses.
    pub snapshot_api: bool,
    /// The cluster serves every kind of `groupsnapshot.storage.k8s.io/v1beta1`.
    pub group_snapshot_api: bool,
    /// The objects of [`manifests::every_key`] that exist.
    pub live: BTreeMap<ObjectKey, Value>,
    /// The CSIDrivers a Helm release installed.
    pub helm_csi_drivers: Vec<Value>,
    /// Where the operator runs (and the StorageCluster controller writes the CSI secret).
    pub operator_namespace: String,
    /// The operator's own image, the default's source.
    pub operator_image: String,
    /// Where the CA of the control plane's certificate is kept ([`ca_source`]).
    pub control_plane_ca: Option<CaSource>,
}

/// Where the CA that signs `cp`'s certificate is kept, in the namespace both live in: a
/// local control plane's is what its serving certificate was issued from (cert-manager's
/// `ca.crt` beside it, or OpenShift's service CA); a managed one's is the Secret its
/// `caBundleSecretRef` names, under the first of `ca.crt` and `tls.crt` that
/// `bundle_keys` (the keys that Secret holds) has, as the ControlPlane reads it. `None`
/// when the control plane is plain HTTP or trusted through the system's CA store.
pub fn ca_source(cp: &ControlPlane, bundle_keys: &[String]) -> Option<CaSource> {
    match (&cp.spec.source.local, &cp.spec.source.managed) {
        (Some(local), _) => {
            let tls = Tls::of(local);
            if !tls.serve {
                return None;
            }
            Some(match tls.provider {
                TlsProvider::CertManager => CaSource::Secret {
                    name: API_TLS_SECRET.into(),
                    key: "ca.crt".into(),
                },
                TlsProvider::OpenShift => CaSource::ConfigMap {
                    name: SERVICE_CA_CONFIG_MAP.into(),
                    key: "service-ca.crt".into(),
                },
            })
        }
        (None, Some(managed)) => {
            let secret = managed.ca_bundle_secret_ref.as_ref()?;
            let key = ["ca.crt", "tls.crt"]
                .into_iter()
                .find(|k| bundle_keys.iter().any(|b| b == k))
                // Until the Secret is there, the key the ControlPlane asks for.
                .unwrap_or("ca.crt");
            Some(CaSource::Secret {
                name: secret.name.clone(),
                key: key.into(),
            })
        }
        (None, None) => None,
    }
}

/// Why a driver installs nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// The event's reason.
    pub reason: &'static str,
    pub message: String,
}

/// Bringing the driver's objects to the spec.
#[derive(Clone, Debug, PartialEq)]
pub struct Converge {
    /// The bodies to apply, in order; each carries its digest ([`compare::stamped`]).
    pub apply: Vec<(ObjectKey, Value)>,
    /// Adopted objects still carrying the release's labels, to strip after the apply.
    pub strip: Vec<ObjectKey>,
    /// The driver's objects the spec no longer asks for.
    pub prune: Vec<ObjectKey>,
    /// Whether the objects came from a Helm release.
    pub origin: Origin,
    /// The image both plugins run.
    pub image: String,
}

/// A pass's decision: converge, or hold with the reason (a decision, not a machine: the
/// driver has no steps, each pass brings every object to the spec at once).
pub type Plan = Result<Converge, Hold>;

/// The next thing to do for `driver`.
pub fn plan(driver: &SimplyblockDriver, obs: &Observation) -> Plan {
    let me = DriverRef::of(driver);
    if let Some(first) = active(&obs.drivers).filter(|first| **first != me) {
        return Err(Hold {
            reason: "DuplicateDriver",
            message: format!(
                "SimplyblockDriver {first} is this cluster's CSI driver (the oldest; a cluster runs one); this one installs nothing: delete it, or delete {first} to have this one take over"
            ),
        });
    }
    let namespace = me.namespace.as_str();
    if namespace != obs.operator_namespace {
        return Err(Hold {
            reason: "WrongNamespace",
            message: format!(
                "the driver's pods read the CSI secret {} from their own namespace, and the operator writes it in {}; create the SimplyblockDriver there",
                simplyblock_api::csi_secret::NAME,
                obs.operator_namespace
            ),
        });
    }
    let unbound = permissions_missing(namespace, &obs.bindings);
    if !unbound.is_empty() {
        return Err(Hold {
            reason: "PermissionsMissing",
            message: format!(
                "the CSI driver's pods would lack their permissions, which the simplyblock-operator chart grants and the operator does not: {}; install or upgrade the simplyblock-operator chart in namespace {namespace}, which creates them",
                unbound.join("; ")
            ),
        });
    }
    let image = match driver.spec.image.as_deref().filter(|i| !i.is_empty()) {
        Some(image) => image.to_owned(),
        None => match names::default_image(&obs.operator_image) {
            Ok(image) => image,
            Err(why) => {
                return Err(Hold {
                    reason: "ImageUnresolved",
                    message: why,
                });
            }
        },
    };
    let settings = Settings {
        image: &image,
        snapshots: driver.spec.enable_volume_snapshots && obs.snapshot_api,
        group_snapshots: driver.spec.enable_volume_snapshots
            && obs.snapshot_api
            && obs.group_snapshot_api,
        ca: obs.control_plane_ca.as_ref(),
    };
    let desired = manifests::manifests(driver, settings).objects();
    let refusals = adoption::refusals(driver, &desired, &obs.live, &obs.helm_csi_drivers);
    if !refusals.is_empty() {
        return Err(Hold {
            reason: "AdoptionRefused",
            message: format!(
                "the existing CSI driver objects are not taken over: {}",
                refusals.join("; ")
            ),
        });
    }

    let mut converge = Converge {
        apply: Vec::new(),
        strip: Vec::new(),
        prune: Vec::new(),
        origin: Origin::Created,
        image: image.clone(),
    };
    for (key, body) in desired.iter() {
        let live = obs.live.get(key);
        if live.is_some_and(adoption::adopted) {
            converge.origin = Origin::Adopted;
        }
        let body = keep_immutable(key, body.clone(), live);
        let body = compare::stamped(adoption::with_resource_policy(body, live));
        if live.is_some_and(|l| adoption::holder(l) == Holder::Helm) {
            converge.strip.push(key.clone());
        }
        if !live.is_some_and(|l| compare::up_to_date(l, &body)) {
            converge.apply.push((key.clone(), body));
        }
    }
    converge.prune = obs
        .live
        .iter()
        .filter(|(key, live)| {
            !desired.contains_key(key) && adoption::holder(live) == Holder::Driver
        })
        .map(|(key, _)| key.clone())
        .collect();
    Ok(converge)
}

/// What is wrong with each of the chart's bindings that does not give its role to its
/// account in `namespace`; empty when all do.
fn permissions_missing(namespace: &str, bindings: &BTreeMap<String, Seen>) -> Vec<String> {
    let mut out = Vec::new();
    for grant in rbac::grants() {
        let key = grant.binding_key();
        let live = match bindings.get(&key) {
            Some(Seen::Found(live)) => live,
            Some(Seen::Forbidden) => {
                out.push(format!(
                    "{key} cannot be read (the operator's own roles, from an older chart, do not grant it)"
                ));
                continue;
            }
            Some(Seen::Missing) | None => {
                out.push(format!("{key} is missing"));
                continue;
            }
        };
        let role = &live["roleRef"];
        if role["kind"] != grant.role_kind() || role["name"] != grant.name.as_str() {
            out.push(format!(
                "{key} binds {} {} instead of {} {}",
                role["kind"].as_str().unwrap_or_default(),
                role["name"].as_str().unwrap_or_default(),
                grant.role_kind(),
                grant.name
            ));
        }
        let names_account = live["subjects"].as_array().is_some_and(|subjects| {
            subjects.iter().any(|s| {
                s["kind"] == "ServiceAccount"
                    && s["name"] == grant.account
                    && s["namespace"] == namespace
            })
        });
        if !names_account {
            out.push(format!(
                "{key} does not name ServiceAccount {namespace}/{}",
                grant.account
            ));
        }
    }
    out
}

/// `body` with what `live` holds of the fields that cannot change once written: a
/// CSIDriver's `attachRequired` and `volumeLifecycleModes`. An adopted registration that
/// asks for attachment keeps it (the csi-attacher answers for a driver without a
/// ControllerPublish step); applying another value would be refused.
fn keep_immutable(key: &ObjectKey, mut body: Value, live: Option<&Value>) -> Value {
    if key.kind != Kind::CsiDriver {
        return body;
    }
    let Some(live) = live else { return body };
    for field in ["attachRequired", "volumeLifecycleModes"] {
        let kept = &live["spec"][field];
        if !kept.is_null() {
            body["spec"][field] = kept.clone();
        }
    }
    body
}

/// How the driver's workloads are doing, from their status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Workloads {
    /// Both exist and their controllers have reported on them.
    reported: bool,
    controller_ready: bool,
    nodes_ready: i32,
    nodes_total: i32,
}

fn workloads(obs: &Observation) -> Workloads {
    let controller = obs.live.get(&ObjectKey::new(
        Kind::StatefulSet,
        names::CONTROLLER_STATEFULSET,
    ));
    let node = obs
        .live
        .get(&ObjectKey::new(Kind::DaemonSet, names::NODE_DAEMONSET));
    let (Some(controller), Some(node)) = (controller, node) else {
        return Workloads::default();
    };
    let count = |v: &Value, field: &str| {
        v["status"][field]
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .unwrap_or(0)
    };
    Workloads {
        reported: !controller["status"]["observedGeneration"].is_null()
            && !node["status"]["observedGeneration"].is_null(),
        controller_ready: count(controller, "readyReplicas") >= 1,
        nodes_ready: count(node, "numberReady"),
        nodes_total: count(node, "desiredNumberScheduled"),
    }
}

/// The status after `plan` was carried out on what `obs` saw.
pub fn status(
    driver: &SimplyblockDriver,
    obs: &Observation,
    plan: &Plan,
) -> SimplyblockDriverStatus {
    let previous = driver.status.clone().unwrap_or_default();
    let base = SimplyblockDriverStatus {
        origin: previous.origin,
        observed_generation: driver.metadata.generation,
        ..SimplyblockDriverStatus::default()
    };
    let converge = match plan {
        Err(hold) => {
            return SimplyblockDriverStatus {
                phase: DriverPhase::Installing,
                message: Some(hold.message.clone()),
                ..base
            };
        }
        Ok(converge) => converge,
    };
    let w = workloads(obs);
    let installing =
        !w.reported || (!w.controller_ready && previous.phase == DriverPhase::Installing);
    let (phase, mut message) = if installing {
        (
            DriverPhase::Installing,
            "installing: waiting for the controller plugin to become ready".to_owned(),
        )
    } else if !w.controller_ready {
        (
            DriverPhase::Unavailable,
            "no controller plugin is ready: volumes cannot be provisioned, expanded or snapshotted"
                .to_owned(),
        )
    } else if w.nodes_ready < w.nodes_total {
        (
            DriverPhase::Degraded,
            format!(
                "{} of {} node plugins are ready: volumes cannot be attached on the other workers",
                w.nodes_ready, w.nodes_total
            ),
        )
    } else {
        (
            DriverPhase::Ready,
            format!(
                "the controller plugin and {} node plugin(s) are ready",
                w.nodes_total
            ),
        )
    };
    let snapshot_support = driver
        .spec
        .enable_volume_snapshots
        .then_some(if obs.snapshot_api {
            SnapshotSupport::Detected
        } else {
            SnapshotSupport::Missing
        });
    if snapshot_support == Some(SnapshotSupport::Missing) {
        message.push_str(
            "; snapshots: the cluster does not serve snapshot.storage.k8s.io/v1, install the external-snapshotter's CRDs and snapshot controller",
        );
    }
    if snapshot_support == Some(SnapshotSupport::Detected) && !obs.group_snapshot_api {
        message.push_str(
            "; group snapshots: the cluster does not serve groupsnapshot.storage.k8s.io/v1beta1, install the external-snapshotter's group-snapshot CRDs to take VolumeGroupSnapshots",
        );
    }
    SimplyblockDriverStatus {
        phase,
        nodes_ready: w.nodes_ready,
        nodes_total: w.nodes_total,
        controller_ready: w.controller_ready,
        snapshot_support,
        origin: previous.origin.or(Some(converge.origin)),
        version: names::tag(&converge.image).map(str::to_owned),
        message: Some(message),
        ..base
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;

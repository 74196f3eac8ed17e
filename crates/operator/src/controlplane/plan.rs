//! What the ControlPlane controller does next, decided purely from what a pass observed:
//!
//! - [`install`]: the next thing the current install step of a local control plane does
//!   (apply its objects and move on, wait for a dependency, or hand over to the steady
//!   state), as one [`Plan`] of the machine runtime whose calls ([`InstallCall`]) are the
//!   ControlPlane's own;
//! - [`components`] and [`verdict`]: the steady state's `status.components` and phase,
//!   by the rule "the worst verdict wins";
//! - [`transition`]: the one event a change of verdict raises (none without a change);
//! - [`deletion`]: whether the finalizer still holds.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use simplyblock_api::control_plane::{
    Component, ControlPlanePhase, ControlPlaneStatus, InstallStep, LocalSource,
};
use simplyblock_statemachine::{Machine, State};

use super::manifests::Tls;
use super::names::{
    ADMIN_CONTROL, API, FDB_CLUSTER, FDB_EXPORTER, MONITORING, OBJECT_STORE, TASKS, essential,
};
use crate::runtime::machine::{Move, Plan};

/// Events on the ControlPlane.
pub mod reason {
    pub const READY: &str = "ControlPlaneReady";
    pub const DEGRADED: &str = "ControlPlaneDegraded";
    pub const NOT_READY: &str = "ControlPlaneNotReady";
    pub const UNREACHABLE: &str = "EndpointUnreachable";
    pub const CREDENTIALS: &str = "CredentialsError";
    pub const AWAITING: &str = "AwaitingDependency";
    pub const DEADLINE: &str = "StepDeadlineExceeded";
    pub const CLUSTERS: &str = "ClustersStillPresent";
    pub const IGNORED: &str = "ControlPlaneIgnored";
}

/// What a FoundationDBCluster's status says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FdbHealth {
    pub available: bool,
    pub healthy: bool,
    /// Storage process groups without a condition, when the status lists them.
    pub ready_storage: Option<i32>,
}

/// A workload's replicas.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replicas {
    pub desired: i32,
    pub ready: i32,
}

/// What asking the control plane gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// No client could be built; `credentials`: because the credentials are missing or
    /// unusable (rather than TLS material still being issued).
    NoClient { credentials: bool, why: String },
    /// `GET /_meta/ready` (its failure in words) and `GET /_meta/version`.
    Asked {
        ready: Result<(), String>,
        version: Option<String>,
    },
}

impl Probe {
    pub fn answered(&self) -> bool {
        matches!(self, Probe::Asked { ready: Ok(()), .. })
    }

    pub fn version(&self) -> Option<&str> {
        match self {
            Probe::Asked { version, .. } => version.as_deref(),
            Probe::NoClient { .. } => None,
        }
    }
}

/// What one pass read. Each field is read only where it is needed; elsewhere it keeps
/// its default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observation {
    /// Whether `apps.foundationdb.org/v1beta2` FoundationDBCluster is served.
    pub fdb_served: bool,
    /// Whether cert-manager's `cert-manager.io/v1` Certificate is served.
    pub cert_manager_served: bool,
    /// The FoundationDBCluster's health; `None`: no such object or no status yet.
    pub fdb: Option<FdbHealth>,
    /// The Deployments and StatefulSets, by name.
    pub workloads: BTreeMap<String, Replicas>,
    /// The control plane's answers at [`Observation::endpoint`].
    pub probe: Option<Probe>,
    /// Where the control plane was asked.
    pub endpoint: String,
    /// The ControlPlane's namespace, where its objects are (named in what to check).
    pub namespace: String,
}

/// The objects of an install step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batch {
    FoundationDb,
    Datastore,
    Api,
}

/// What the install machine does that is its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstallCall {
    /// Apply the step's objects, then move on to `to` with the plan's message.
    Apply { batch: Batch, to: InstallStep },
    /// The management API answers: the steady state takes over, and its status (the step
    /// cleared) ends the installation.
    HandOver,
}

/// What the current install step does next; the ControlPlane's status fields beside the
/// step are written by its own writer, so a plan carries none.
pub type InstallPlan = Plan<InstallStep, InstallCall, ()>;

/// How often a held install step looks again.
pub const INSTALL_POLL: Duration = Duration::from_secs(2);

/// The message of a move into `to`.
fn installing(to: InstallStep) -> String {
    format!("installing: step {}", to.name())
}

/// Apply `batch`, then move on to `to`.
fn apply(batch: Batch, to: InstallStep) -> InstallPlan {
    Plan::Call {
        call: InstallCall::Apply { batch, to },
        message: installing(to),
    }
}

/// Stay in the step saying `message`; `event` (a warning) is raised when it is new.
fn hold(message: String, event: &'static str) -> InstallPlan {
    Plan::Wait {
        message,
        after: INSTALL_POLL,
        event: Some(event),
    }
}

/// The hold while the FoundationDB operator reports the cluster unavailable: its operator
/// runs (it wrote the health), so what is missing is in the cluster's pods.
fn fdb_not_available(ns: &str) -> String {
    format!(
        "waiting for FoundationDBCluster {FDB_CLUSTER}: the FoundationDB operator reports it not available yet; \
         check its status (`kubectl -n {ns} get foundationdbcluster {FDB_CLUSTER}`) and its pods \
         (`kubectl -n {ns} get pods -l foundationdb.org/fdb-cluster-name={FDB_CLUSTER}`): a Pending pod \
         usually has a volume claim no StorageClass serves (set controlplane.local.foundationDB.storageClassName \
         or mark a class default); if nothing changes, read the FoundationDB operator's logs"
    )
}

/// The hold while the FoundationDBCluster has no health: its operator has not written it,
/// most often because it is not installed or not running.
fn fdb_not_reported(ns: &str) -> String {
    format!(
        "waiting for FoundationDBCluster {FDB_CLUSTER}: the FoundationDB operator has not reported on it yet; \
         check that the FoundationDB operator is installed and running (`kubectl get deployments -A | grep -i fdb`, \
         its pods and logs) and watching namespace {ns}, and what the cluster shows \
         (`kubectl -n {ns} get foundationdbcluster {FDB_CLUSTER}`)"
    )
}

/// The next thing `step` does with what was read. Pure.
pub fn install(step: InstallStep, tls: Tls, obs: &Observation) -> InstallPlan {
    let awaiting = |message: String| hold(message, reason::AWAITING);
    match step {
        InstallStep::ApplyingFoundationDB if !obs.fdb_served => awaiting(
            "the FoundationDB operator's API (apps.foundationdb.org/v1beta2 FoundationDBCluster) is not served: install the FoundationDB operator and its CRDs; the installation goes on once it is".into(),
        ),
        InstallStep::ApplyingFoundationDB => {
            apply(Batch::FoundationDb, InstallStep::AwaitingFoundationDB)
        }
        InstallStep::AwaitingFoundationDB => match &obs.fdb {
            Some(h) if h.available => Plan::Advance {
                to: Move::To(InstallStep::ApplyingDatastore),
                message: installing(InstallStep::ApplyingDatastore),
                kind_status: None,
            },
            Some(_) => awaiting(fdb_not_available(&obs.namespace)),
            None => awaiting(fdb_not_reported(&obs.namespace)),
        },
        InstallStep::ApplyingDatastore => apply(Batch::Datastore, InstallStep::ApplyingAPI),
        InstallStep::ApplyingAPI if tls.needs_cert_manager() && !obs.cert_manager_served => awaiting(
            "TLS is on with provider cert-manager, but cert-manager's API (cert-manager.io/v1) is not served: install cert-manager, or set spec.source.local.tls.provider to OpenShift or enableTLS to false".into(),
        ),
        InstallStep::ApplyingAPI => apply(Batch::Api, InstallStep::AwaitingAPI),
        InstallStep::AwaitingAPI => match &obs.probe {
            // Answering without a pod of its own would be another server's answer.
            _ if obs.workloads.get(API).is_none_or(|r| r.ready == 0) => {
                let desired = obs.workloads.get(API).map_or(0, |r| r.desired);
                awaiting(format!(
                    "waiting for a ready replica of Deployment {API} (0 of {desired} ready)"
                ))
            }
            Some(Probe::Asked { ready: Ok(()), .. }) => Plan::Call {
                call: InstallCall::HandOver,
                message: format!("installed: the management API at {} answers", obs.endpoint),
            },
            Some(Probe::Asked { ready: Err(e), .. }) => awaiting(format!(
                "waiting for the management API at {} to answer: {e}",
                obs.endpoint
            )),
            Some(Probe::NoClient { credentials, why }) => hold(
                why.clone(),
                if *credentials {
                    reason::CREDENTIALS
                } else {
                    reason::AWAITING
                },
            ),
            None => awaiting(format!(
                "waiting for the management API at {} to answer",
                obs.endpoint
            )),
        },
    }
}

/// `plan` as a step past its deadline performs it: a hold goes on waiting (clients keep
/// holding), but says it is late in its message and its event, once. Pure.
pub fn overdue(
    machine: &Machine<'_, InstallStep>,
    now: Timestamp,
    plan: InstallPlan,
) -> InstallPlan {
    match plan {
        Plan::Wait { message, after, .. } if machine.timed_out(now) => {
            let deadline = machine
                .deadline()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default();
            Plan::Wait {
                message: format!(
                    "install step {} outlived its deadline{deadline}; still waiting: {message}",
                    machine.state().name()
                ),
                after,
                event: Some(reason::DEADLINE),
            }
        }
        other => other,
    }
}

/// The components of a local control plane, by name. FoundationDB reports health, not
/// ready replicas: its ready count is its storage process groups without a condition when
/// its status lists them, else all of them when available and healthy, one short of that
/// when available but not healthy, none when not available.
pub fn components(local: &LocalSource, obs: &Observation) -> Vec<Component> {
    let workload = |name: &str, desired: i32| {
        let seen = obs
            .workloads
            .get(name)
            .copied()
            .unwrap_or(Replicas { desired, ready: 0 });
        Component {
            name: name.into(),
            desired: seen.desired,
            ready: seen.ready.min(seen.desired).max(0),
            essential: essential(name),
        }
    };
    let fdb_desired = local.foundation_db.replicas;
    let fdb_ready = match &obs.fdb {
        None => 0,
        Some(h) if !h.available => 0,
        Some(FdbHealth {
            ready_storage: Some(n),
            ..
        }) => *n,
        Some(h) if h.healthy => fdb_desired,
        Some(_) => (fdb_desired - 1).max(1),
    };
    let mut out = vec![
        workload(API, local.replicas),
        Component {
            name: FDB_CLUSTER.into(),
            desired: fdb_desired,
            ready: fdb_ready.clamp(0, fdb_desired),
            essential: essential(FDB_CLUSTER),
        },
        workload(OBJECT_STORE, 1),
        workload(ADMIN_CONTROL, local.replicas),
        workload(TASKS, 1),
        workload(MONITORING, 1),
        workload(FDB_EXPORTER, 1),
    ];
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Why the phase is what it is; a change of it is what raises an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Answering, every component at its desired count.
    Serving,
    /// Answering, a component below its desired count.
    Degraded,
    /// An essential component has no ready replica.
    ComponentDown,
    /// The control plane does not answer (or no client could be made for it).
    Unreachable,
    /// The credentials are missing or unusable.
    Credentials,
}

impl Reason {
    /// The word a status message of this reason starts with.
    fn word(self) -> &'static str {
        match self {
            Reason::Serving => "",
            Reason::Degraded => "degraded: ",
            Reason::ComponentDown => "unavailable: ",
            Reason::Unreachable => "unreachable: ",
            Reason::Credentials => "credentials: ",
        }
    }

    /// The reason a stored status was written for (its messages start with the reason's
    /// word).
    pub fn of(status: &ControlPlaneStatus) -> Option<Reason> {
        let message = status.message.as_deref().unwrap_or("");
        if !status.step.is_empty() {
            return None;
        }
        [
            Reason::Degraded,
            Reason::ComponentDown,
            Reason::Unreachable,
            Reason::Credentials,
        ]
        .into_iter()
        .find(|r| message.starts_with(r.word()))
        .or(match status.phase {
            ControlPlanePhase::Available => Some(Reason::Serving),
            _ => None,
        })
    }
}

/// The steady state's phase and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub phase: ControlPlanePhase,
    pub reason: Reason,
    pub message: Option<String>,
}

/// The phase by the rule, the worst verdict winning: a probe that fails (or no client)
/// or an essential component with no ready replica is Unavailable; a component below its
/// desired count, or a non-essential one with none ready, is Degraded; else Available. A
/// managed control plane has no components here: it is Available or Unavailable, and
/// Installing until it first answered (`previous` Installing). Pure.
pub fn verdict(
    managed: bool,
    components: &[Component],
    probe: &Probe,
    endpoint: &str,
    previous: ControlPlanePhase,
) -> Verdict {
    let down = |reason: Reason, why: String| Verdict {
        phase: if managed && previous == ControlPlanePhase::Installing {
            ControlPlanePhase::Installing
        } else {
            ControlPlanePhase::Unavailable
        },
        reason,
        message: Some(format!("{}{why}", reason.word())),
    };
    match probe {
        Probe::NoClient {
            credentials: true,
            why,
        } => return down(Reason::Credentials, why.clone()),
        Probe::NoClient { why, .. } => return down(Reason::Unreachable, why.clone()),
        Probe::Asked { ready: Err(e), .. } => {
            return down(
                Reason::Unreachable,
                format!("the control plane at {endpoint} does not answer: {e}"),
            );
        }
        Probe::Asked { ready: Ok(()), .. } => {}
    }
    let short = |c: &&Component| format!("{} has {} of {} ready", c.name, c.ready, c.desired);
    let none_ready: Vec<String> = components
        .iter()
        .filter(|c| c.essential && c.ready == 0)
        .map(|c| short(&c))
        .collect();
    if !none_ready.is_empty() {
        return Verdict {
            phase: ControlPlanePhase::Unavailable,
            reason: Reason::ComponentDown,
            message: Some(format!(
                "{}an essential component has no ready replica: {}",
                Reason::ComponentDown.word(),
                none_ready.join(", ")
            )),
        };
    }
    let below: Vec<String> = components
        .iter()
        .filter(|c| c.ready < c.desired || c.ready == 0)
        .map(|c| short(&c))
        .collect();
    if !below.is_empty() {
        return Verdict {
            phase: ControlPlanePhase::Degraded,
            reason: Reason::Degraded,
            message: Some(format!(
                "{}{}; clients go on",
                Reason::Degraded.word(),
                below.join(", ")
            )),
        };
    }
    Verdict {
        phase: ControlPlanePhase::Available,
        reason: Reason::Serving,
        message: None,
    }
}

/// An event: warning or not, its reason and note (the machine runtime's).
pub use crate::runtime::machine::Note;

/// The event a new verdict raises: one per change of reason (the first verdict after the
/// installation, or after a change of phase or of why), none while it stays the same.
pub fn transition(before: Option<Reason>, after: &Verdict, endpoint: &str) -> Option<Note> {
    if before == Some(after.reason) {
        return None;
    }
    let message = after.message.clone().unwrap_or_default();
    let (warning, reason, message) = match after.reason {
        Reason::Serving => (
            false,
            reason::READY,
            format!("the control plane at {endpoint} is Available"),
        ),
        Reason::Degraded => (true, reason::DEGRADED, message),
        Reason::ComponentDown => (true, reason::NOT_READY, message),
        Reason::Unreachable => (true, reason::UNREACHABLE, message),
        Reason::Credentials => (true, reason::CREDENTIALS, message),
    };
    Some(Note {
        warning,
        reason,
        message,
    })
}

/// Whether the status is worth writing: something but `lastChecked` changed, or the stored
/// `lastChecked` is older than `fresh`. Our own write wakes the next pass; without this,
/// every pass would write a newer `lastChecked` and wake the next.
pub fn worth_writing(
    stored: &ControlPlaneStatus,
    next: &ControlPlaneStatus,
    now: Timestamp,
    fresh: std::time::Duration,
) -> bool {
    let mut same = next.clone();
    same.last_checked = stored.last_checked.clone();
    same.active_ops_ref = stored.active_ops_ref.clone();
    if same != *stored {
        return true;
    }
    match (&stored.last_checked, &next.last_checked) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(Time(then)), Some(_)) => {
            now.duration_since(*then).as_secs_f64().max(0.0) >= fresh.as_secs_f64()
        }
    }
}

/// While StorageClusters remain the control plane must stay: the message to hold with.
pub fn deletion(clusters: &[String]) -> Option<String> {
    if clusters.is_empty() {
        return None;
    }
    let shown: Vec<&str> = clusters.iter().take(5).map(String::as_str).collect();
    Some(format!(
        "{} StorageCluster(s) still use the control plane ({}{}); the ControlPlane is deleted once they are",
        clusters.len(),
        shown.join(", "),
        if clusters.len() > shown.len() {
            ", …"
        } else {
            ""
        }
    ))
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;

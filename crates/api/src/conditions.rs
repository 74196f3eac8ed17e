//! The standard conditions every kind carries in `status.conditions`: `Ready`, and
//! `Progressing` / `Degraded` where they mean something, so `kubectl wait
//! --for=condition=Ready` and generic tooling (Argo CD, Flux) read every kind alike.
//!
//! Pure: the caller passes the time, so the same inputs give the same list.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::cluster_deployment_config::DeploymentPhase;
use crate::common::OpsPhase;
use crate::control_plane::ControlPlanePhase;
use crate::simplyblock_driver::DriverPhase;
use crate::storage_backup::BackupPhase;
use crate::storage_backup_policy::BackupPolicyPhase;
use crate::storage_cluster::ClusterPhase;
use crate::storage_device::DevicePhase;
use crate::storage_node::NodePhase;
use crate::storage_pool::PoolPhase;
use crate::test_failover::FailoverPhase;

/// The object is in its healthy steady state (an Ops kind: it succeeded).
pub const READY: &str = "Ready";
/// The object is moving towards its desired state: being created, rolling, running.
pub const PROGRESSING: &str = "Progressing";
/// The object works but with reduced redundancy or a part failed.
pub const DEGRADED: &str = "Degraded";

/// One condition as a controller decides it, before its bookkeeping fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict<'a> {
    pub type_: &'a str,
    pub holds: bool,
    /// CamelCase, machine-readable.
    pub reason: &'a str,
    /// For people; may be empty.
    pub message: &'a str,
}

/// Sets `verdict` in `conditions`, keeping `lastTransitionTime` while the status stays the
/// same (so a condition that did not change leaves the list equal and causes no write),
/// and stamping `now` when it flips or first appears. `generation` is the generation the
/// controller acted on.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    verdict: &Verdict<'_>,
    generation: Option<i64>,
    now: &Time,
) {
    let status = if verdict.holds { "True" } else { "False" };
    let since = conditions
        .iter()
        .find(|c| c.type_ == verdict.type_ && c.status == status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    let next = Condition {
        type_: verdict.type_.to_owned(),
        status: status.to_owned(),
        reason: verdict.reason.to_owned(),
        message: verdict.message.to_owned(),
        observed_generation: generation,
        last_transition_time: since,
    };
    match conditions.iter_mut().find(|c| c.type_ == verdict.type_) {
        Some(slot) => *slot = next,
        None => conditions.push(next),
    }
}

/// `previous` with every verdict set (see [`set_condition`]); types not among `verdicts`
/// are kept as they were.
pub fn with_conditions(
    previous: &[Condition],
    verdicts: &[Verdict<'_>],
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let mut conditions = previous.to_vec();
    for verdict in verdicts {
        set_condition(&mut conditions, verdict, generation, now);
    }
    conditions
}

/// Whether `conditions` holds `type_` with status True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// The conditions of an Ops kind in `phase`: `Ready` once it succeeded (so waiting for
/// Ready waits for success; Failed and Aborted say so in Ready's reason), `Progressing`
/// while it runs.
pub fn ops_verdicts<'a>(phase: OpsPhase, message: &'a str) -> [Verdict<'a>; 2] {
    let reason = match phase {
        OpsPhase::Pending => "Pending",
        OpsPhase::Running => "Running",
        OpsPhase::Succeeded => "Succeeded",
        OpsPhase::Failed => "Failed",
        OpsPhase::Aborted => "Aborted",
    };
    [
        Verdict {
            type_: READY,
            holds: phase == OpsPhase::Succeeded,
            reason,
            message,
        },
        Verdict {
            type_: PROGRESSING,
            holds: phase == OpsPhase::Running,
            reason,
            message,
        },
    ]
}

/// Which of the three standard conditions an entity's phase makes true.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Standing {
    /// The healthy steady state (Online, Available, Active, ...).
    pub ready: bool,
    /// Moving towards one: being created, provisioned, rebalanced, rolled or removed.
    pub progressing: bool,
    /// Working with a part lost, or failed.
    pub degraded: bool,
}

impl Standing {
    const READY: Standing = Standing {
        ready: true,
        progressing: false,
        degraded: false,
    };
    const PROGRESSING: Standing = Standing {
        ready: false,
        progressing: true,
        degraded: false,
    };
    const DEGRADED: Standing = Standing {
        ready: false,
        progressing: false,
        degraded: true,
    };
    const IDLE: Standing = Standing {
        ready: false,
        progressing: false,
        degraded: false,
    };
}

impl From<NodePhase> for Standing {
    fn from(phase: NodePhase) -> Standing {
        match phase {
            NodePhase::Online => Standing::READY,
            NodePhase::Pending | NodePhase::Provisioning | NodePhase::Removing => {
                Standing::PROGRESSING
            }
            NodePhase::Offline | NodePhase::Degraded | NodePhase::Failed => Standing::DEGRADED,
            NodePhase::Removed => Standing::IDLE,
        }
    }
}

impl From<DevicePhase> for Standing {
    fn from(phase: DevicePhase) -> Standing {
        match phase {
            DevicePhase::Online => Standing::READY,
            DevicePhase::Degraded | DevicePhase::Failed => Standing::DEGRADED,
            DevicePhase::Unknown | DevicePhase::Removed => Standing::IDLE,
        }
    }
}

impl From<ClusterPhase> for Standing {
    fn from(phase: ClusterPhase) -> Standing {
        match phase {
            ClusterPhase::Online => Standing::READY,
            ClusterPhase::Pending
            | ClusterPhase::Creating
            | ClusterPhase::Provisioning
            | ClusterPhase::Activating
            | ClusterPhase::Rebalancing => Standing::PROGRESSING,
            ClusterPhase::Degraded | ClusterPhase::Unavailable | ClusterPhase::Suspended => {
                Standing::DEGRADED
            }
        }
    }
}

impl From<PoolPhase> for Standing {
    fn from(phase: PoolPhase) -> Standing {
        match phase {
            PoolPhase::Ready => Standing::READY,
            PoolPhase::Pending | PoolPhase::Deleting => Standing::PROGRESSING,
        }
    }
}

impl From<BackupPhase> for Standing {
    fn from(phase: BackupPhase) -> Standing {
        match phase {
            BackupPhase::Available => Standing::READY,
            BackupPhase::Pending | BackupPhase::Creating => Standing::PROGRESSING,
            BackupPhase::Failed => Standing::DEGRADED,
        }
    }
}

impl From<BackupPolicyPhase> for Standing {
    fn from(phase: BackupPolicyPhase) -> Standing {
        match phase {
            BackupPolicyPhase::Active => Standing::READY,
            BackupPolicyPhase::Pending => Standing::PROGRESSING,
            BackupPolicyPhase::Failed => Standing::DEGRADED,
        }
    }
}

impl From<ControlPlanePhase> for Standing {
    fn from(phase: ControlPlanePhase) -> Standing {
        match phase {
            ControlPlanePhase::Available => Standing::READY,
            ControlPlanePhase::Installing => Standing::PROGRESSING,
            ControlPlanePhase::Degraded | ControlPlanePhase::Unavailable => Standing::DEGRADED,
        }
    }
}

impl From<DeploymentPhase> for Standing {
    fn from(phase: DeploymentPhase) -> Standing {
        match phase {
            DeploymentPhase::Expanded => Standing::READY,
            DeploymentPhase::Draft | DeploymentPhase::Expanding => Standing::PROGRESSING,
            DeploymentPhase::Failed => Standing::DEGRADED,
        }
    }
}

impl From<DriverPhase> for Standing {
    fn from(phase: DriverPhase) -> Standing {
        match phase {
            DriverPhase::Ready => Standing::READY,
            DriverPhase::Installing => Standing::PROGRESSING,
            DriverPhase::Degraded | DriverPhase::Unavailable => Standing::DEGRADED,
        }
    }
}

impl From<FailoverPhase> for Standing {
    fn from(phase: FailoverPhase) -> Standing {
        match phase {
            FailoverPhase::Ready => Standing::READY,
            FailoverPhase::Pending | FailoverPhase::Provisioning | FailoverPhase::TearingDown => {
                Standing::PROGRESSING
            }
            FailoverPhase::Failed => Standing::DEGRADED,
        }
    }
}

/// An entity's conditions for `phase` (its Debug name is the reason), from `previous`.
pub fn of_phase<P: Into<Standing> + std::fmt::Debug + Copy>(
    previous: &[Condition],
    phase: P,
    message: Option<&str>,
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    of_standing(
        previous,
        phase.into(),
        &format!("{phase:?}"),
        message.unwrap_or_default(),
        generation,
        now,
    )
}

/// An entity's conditions for `standing`, with `reason` and `message` on all three.
pub fn of_standing(
    previous: &[Condition],
    standing: Standing,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    with_conditions(
        previous,
        &entity_verdicts(
            standing.ready,
            standing.progressing,
            standing.degraded,
            reason,
            message,
        ),
        generation,
        now,
    )
}

/// The three standard verdicts of an entity kind: Ready in its healthy steady state,
/// Progressing while it moves towards one, Degraded while it works with a part lost.
/// `reason` is the phase (or state) as the status names it.
pub fn entity_verdicts<'a>(
    ready: bool,
    progressing: bool,
    degraded: bool,
    reason: &'a str,
    message: &'a str,
) -> [Verdict<'a>; 3] {
    [
        Verdict {
            type_: READY,
            holds: ready,
            reason,
            message,
        },
        Verdict {
            type_: PROGRESSING,
            holds: progressing,
            reason,
            message,
        },
        Verdict {
            type_: DEGRADED,
            holds: degraded,
            reason,
            message,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).expect("time"))
    }

    fn ready(holds: bool, reason: &str) -> Verdict<'_> {
        Verdict {
            type_: READY,
            holds,
            reason,
            message: "",
        }
    }

    #[test]
    fn transition_time_is_kept_while_the_status_holds() {
        let mut conditions = Vec::new();
        set_condition(&mut conditions, &ready(true, "Online"), Some(1), &at(1_000));
        let first = conditions.clone();
        set_condition(&mut conditions, &ready(true, "Online"), Some(1), &at(2_000));
        assert_eq!(
            conditions, first,
            "an unchanged condition must not change the list"
        );
        // A new reason or generation is recorded, the transition time is not moved.
        set_condition(&mut conditions, &ready(true, "Active"), Some(2), &at(3_000));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].reason, "Active");
        assert_eq!(conditions[0].observed_generation, Some(2));
        assert_eq!(conditions[0].last_transition_time, at(1_000));
    }

    #[test]
    fn transition_time_moves_when_the_status_flips() {
        let mut conditions = Vec::new();
        set_condition(&mut conditions, &ready(true, "Online"), Some(1), &at(1_000));
        set_condition(
            &mut conditions,
            &ready(false, "Offline"),
            Some(1),
            &at(2_000),
        );
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].status, "False");
        assert_eq!(conditions[0].last_transition_time, at(2_000));
        set_condition(&mut conditions, &ready(true, "Online"), Some(1), &at(3_000));
        assert_eq!(conditions[0].status, "True");
        assert_eq!(conditions[0].last_transition_time, at(3_000));
    }

    #[test]
    fn other_types_are_kept_in_place() {
        let previous = with_conditions(
            &[],
            &entity_verdicts(false, true, false, "Creating", ""),
            Some(1),
            &at(1_000),
        );
        let mut extra = previous.clone();
        extra.insert(
            0,
            Condition {
                type_: "Delivered".into(),
                status: "True".into(),
                reason: "Applied".into(),
                message: String::new(),
                observed_generation: Some(1),
                last_transition_time: at(500),
            },
        );
        let next = with_conditions(
            &extra,
            &entity_verdicts(true, false, false, "Online", ""),
            Some(1),
            &at(2_000),
        );
        let types: Vec<&str> = next.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Delivered", READY, PROGRESSING, DEGRADED]);
        assert!(is_true(&next, READY));
        assert!(!is_true(&next, PROGRESSING));
        assert_eq!(next[0].last_transition_time, at(500));
        assert_eq!(next[1].last_transition_time, at(2_000));
        // Degraded was False before and still is.
        assert_eq!(next[3].last_transition_time, at(1_000));
    }

    #[test]
    fn an_entity_is_ready_only_in_its_steady_state() {
        let conditions = of_phase(&[], NodePhase::Offline, Some("down"), Some(3), &at(1_000));
        assert!(!is_true(&conditions, READY));
        assert!(is_true(&conditions, DEGRADED));
        assert!(conditions.iter().all(|c| c.reason == "Offline"
            && c.message == "down"
            && c.observed_generation == Some(3)));
        let conditions = of_phase(&conditions, NodePhase::Online, None, Some(3), &at(2_000));
        assert!(is_true(&conditions, READY));
        assert!(!is_true(&conditions, DEGRADED));
        assert!(is_true(
            &of_phase(&[], ClusterPhase::Rebalancing, None, None, &at(0)),
            PROGRESSING
        ));
        assert!(is_true(
            &of_phase(&[], ControlPlanePhase::Available, None, None, &at(0)),
            READY
        ));
    }

    #[test]
    fn an_operation_is_ready_only_once_it_succeeded() {
        for (phase, ready, progressing) in [
            (OpsPhase::Pending, false, false),
            (OpsPhase::Running, false, true),
            (OpsPhase::Succeeded, true, false),
            (OpsPhase::Failed, false, false),
            (OpsPhase::Aborted, false, false),
        ] {
            let [r, p] = ops_verdicts(phase, "why");
            assert_eq!((r.holds, p.holds), (ready, progressing), "{phase:?}");
            assert_eq!(r.reason, format!("{phase:?}"));
        }
    }
}

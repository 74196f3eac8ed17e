//! What a PersistentVolumeOps does next, decided from one observation. Pure: no I/O, no
//! clock (the time is in the observation).

use std::collections::BTreeMap;
use std::time::Duration;

use simplyblock_api::common::OpsPhase;
use simplyblock_api::persistent_volume_ops::{
    MigrationStatus, PersistentVolumeOps, ValidationJob, VolumeOpsStep,
};

use super::lock::LockPlan;

/// The control plane's view of the migration this operation runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Backend {
    pub id: String,
    pub phase: String,
    pub status: String,
    pub error: String,
}

impl Backend {
    pub fn terminal(&self) -> bool {
        matches!(self.status.as_str(), "done" | "failed" | "cancelled")
    }
}

/// A validation Job as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    Running,
    Succeeded,
    Failed,
    Missing,
}

/// Everything the plan needs, read in one pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// The PersistentVolume exists and is not being deleted.
    pub volume_present: bool,
    /// Why the volume's subsystem could not be resolved (a sentence), if it could not.
    pub unresolvable: Option<String>,
    /// The target's backend id; `Err` says why there is none (yet).
    pub target: Result<String, String>,
    /// The migration record as the observation resolves it (handle parts, subsystem, source
    /// and target ids, member count) merged over what status already had.
    pub record: MigrationStatus,
    /// Where each member volume of the subsystem is (backend node id).
    pub member_nodes: Vec<String>,
    /// The lock over the subsystem's volumes.
    pub lock: LockPlan,
    /// The recorded (or adoptable) backend migration to this target.
    pub backend: Option<Backend>,
    /// An active backend migration of this subsystem to another node.
    pub foreign: Option<Backend>,
    /// The Kubernetes nodes consuming any volume of the subsystem, sorted.
    pub consumers: Vec<String>,
    /// Each recorded validation Job's state, by name.
    pub jobs: BTreeMap<String, JobState>,
    /// The Job name for a node.
    pub job_names: BTreeMap<String, String>,
    /// Where the validation Jobs run (the operator's namespace).
    pub job_namespace: String,
}

/// One side effect.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    /// Pre-create the backend migration (idempotent on the control plane).
    CreateMigration,
    /// Create the validation Job for each of these `(node, name)` (a Job already there is
    /// success).
    CreateJobs(Vec<(String, String)>),
    /// Delete these Jobs.
    DeleteJobs(Vec<String>),
    /// Annotate these volumes.
    Acquire(Vec<String>),
    /// Clear these stale locks.
    Break(Vec<String>),
}

/// The decision.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Stay where it is; look again after `after`. `deferred` marks a hold the operation
    /// did not cause (another lock, a busy control plane).
    Wait {
        message: String,
        after: Duration,
        deferred: bool,
    },
    /// Pending → Running at the first step.
    Start,
    /// Write the migration record without moving.
    Record {
        record: MigrationStatus,
        message: String,
    },
    /// One call, the step and record written first.
    Call { call: Call, message: String },
    /// Write `continuedAt` (and Migrating's deadline), then continue the copy, once.
    ContinueOnce { message: String },
    /// Move to the next step with this record.
    Advance {
        to: VolumeOpsStep,
        record: MigrationStatus,
        message: String,
    },
    /// End; `cancel` cancels the backend migration first.
    Finish {
        phase: OpsPhase,
        message: String,
        reason: Option<&'static str>,
        cancel: bool,
    },
}

const LOOK: Duration = Duration::from_secs(2);
const QUEUED: Duration = Duration::from_secs(10);

fn wait(message: String, deferred: bool) -> Decision {
    Decision::Wait {
        message,
        after: if deferred { QUEUED } else { LOOK },
        deferred,
    }
}

/// The decision before the step machine: volume, abort and lock. `None`: run the step.
pub fn gate(op: &PersistentVolumeOps, obs: &Observation) -> Option<Decision> {
    let status = op.status.clone().unwrap_or_default();
    let pv = &op.spec.persistent_volume_name;
    let running = status.phase == OpsPhase::Running;
    let active = obs.backend.as_ref().is_some_and(|b| !b.terminal());
    if !obs.volume_present {
        return Some(match running {
            true => Decision::Finish {
                phase: OpsPhase::Aborted,
                message: format!(
                    "PersistentVolume {pv} disappeared while the operation ran; the backend migration, if any, was cancelled"
                ),
                reason: None,
                cancel: active,
            },
            false => Decision::Finish {
                phase: OpsPhase::Failed,
                message: format!(
                    "PersistentVolume {pv} does not exist; nothing was done — create the operation naming an existing volume"
                ),
                reason: None,
                cancel: false,
            },
        });
    }
    if let Some(why) = &obs.unresolvable {
        return Some(Decision::Finish {
            phase: if running {
                OpsPhase::Aborted
            } else {
                OpsPhase::Failed
            },
            message: format!("ClusterUnresolvable: {why}"),
            reason: Some("ClusterUnresolvable"),
            cancel: active,
        });
    }
    if !running {
        if op.spec.abort {
            return Some(Decision::Finish {
                phase: OpsPhase::Aborted,
                message: "aborted on request before it started".into(),
                reason: None,
                cancel: false,
            });
        }
        return Some(match &obs.lock {
            LockPlan::Held => Decision::Start,
            LockPlan::Break(pvs) => Decision::Call {
                message: format!(
                    "breaking the stale lock on {} (its operation ended or is gone)",
                    pvs.join(", ")
                ),
                call: Call::Break(pvs.clone()),
            },
            LockPlan::Acquire(pvs) => Decision::Call {
                message: format!("taking the lock on {}", pvs.join(", ")),
                call: Call::Acquire(pvs.clone()),
            },
            LockPlan::Queue(other) => wait(
                format!(
                    "queued: operation {other} holds the lock on a volume of this NVMe-oF subsystem; this one starts when it ends"
                ),
                true,
            ),
        });
    }
    match &obs.lock {
        LockPlan::Held => None,
        LockPlan::Acquire(pvs) => Some(Decision::Call {
            message: format!("taking the lock on {} again", pvs.join(", ")),
            call: Call::Acquire(pvs.clone()),
        }),
        LockPlan::Break(pvs) => Some(Decision::Call {
            message: format!("breaking the stale lock on {}", pvs.join(", ")),
            call: Call::Break(pvs.clone()),
        }),
        LockPlan::Queue(other) => Some(Decision::Finish {
            phase: OpsPhase::Aborted,
            message: format!(
                "the lock on this NVMe-oF subsystem's volumes now names operation {other}; this one stopped where it was"
            ),
            reason: None,
            cancel: active,
        }),
    }
}

/// The step's decision for a Running operation holding the lock.
pub fn step(op: &PersistentVolumeOps, at: VolumeOpsStep, obs: &Observation) -> Decision {
    let status = op.status.clone().unwrap_or_default();
    let stored = status.migration.clone().unwrap_or_default();
    let record = &obs.record;
    let nqn = record.subsystem_nqn.clone().unwrap_or_default();
    match at {
        VolumeOpsStep::Validating => {
            let target = match &obs.target {
                Ok(t) => t.clone(),
                Err(why) => return wait(why.clone(), false),
            };
            let on_target = obs.member_nodes.iter().filter(|n| **n == target).count();
            if obs.backend.is_none() && !obs.member_nodes.is_empty() {
                if on_target == obs.member_nodes.len() {
                    return Decision::Finish {
                        phase: OpsPhase::Succeeded,
                        message: format!(
                            "TargetNodeIsSource: every volume of subsystem {nqn} is already on node {target}; nothing was moved"
                        ),
                        reason: Some("TargetNodeIsSource"),
                        cancel: false,
                    };
                }
                if on_target > 0 {
                    return wait(
                        format!(
                            "{on_target} of the {} volumes of subsystem {nqn} are on node {target} already and the others not; waiting for the control plane to settle them",
                            obs.member_nodes.len()
                        ),
                        false,
                    );
                }
            }
            if let Some(f) = &obs.foreign {
                return Decision::Finish {
                    phase: OpsPhase::Failed,
                    message: format!(
                        "subsystem {nqn} has an active migration {} to another node; cancel it on the control plane, then create a new operation",
                        f.id
                    ),
                    reason: None,
                    cancel: false,
                };
            }
            let Some(backend) = &obs.backend else {
                if *record != stored {
                    return Decision::Record {
                        record: record.clone(),
                        message: format!("migrating subsystem {nqn} to node {target}"),
                    };
                }
                return Decision::Call {
                    call: Call::CreateMigration,
                    message: format!(
                        "pre-creating the migration of subsystem {nqn} to node {target}"
                    ),
                };
            };
            if backend.terminal() {
                return Decision::Finish {
                    phase: OpsPhase::Failed,
                    message: format!(
                        "the control plane ended migration {} {} before the copy started{}",
                        backend.id,
                        backend.status,
                        said(&backend.error)
                    ),
                    reason: None,
                    cancel: false,
                };
            }
            if *record != stored {
                return Decision::Record {
                    record: record.clone(),
                    message: format!("migration {} pre-created", backend.id),
                };
            }
            let recorded: Vec<&str> = record
                .validation_jobs
                .iter()
                .map(|j| j.node.as_deref().unwrap_or(""))
                .collect();
            let new: Vec<String> = obs
                .consumers
                .iter()
                .filter(|n| !recorded.contains(&n.as_str()))
                .cloned()
                .collect();
            if !new.is_empty() {
                let mut next = record.clone();
                for node in &new {
                    next.validation_jobs.push(ValidationJob {
                        namespace: obs.job_namespace.clone(),
                        name: obs.job_names.get(node).cloned().unwrap_or_default(),
                        node: Some(node.clone()),
                        succeeded: false,
                    });
                }
                return Decision::Record {
                    record: next,
                    message: format!("checking that {} reach the target's paths", new.join(", ")),
                };
            }
            let mut next = record.clone();
            let mut missing = Vec::new();
            let mut pending = Vec::new();
            for job in next.validation_jobs.iter_mut().filter(|j| !j.succeeded) {
                let node = job.node.clone().unwrap_or_default();
                match obs
                    .jobs
                    .get(&job.name)
                    .copied()
                    .unwrap_or(JobState::Missing)
                {
                    JobState::Succeeded => job.succeeded = true,
                    JobState::Failed => {
                        return Decision::Finish {
                            phase: OpsPhase::Failed,
                            message: format!(
                                "node {node} cannot reach the target's NVMe-oF paths (validation Job {} failed); the migration was cancelled — fix the network between {node} and the target, then create a new operation",
                                job.name
                            ),
                            reason: Some("ValidationFailed"),
                            cancel: true,
                        };
                    }
                    JobState::Missing => missing.push((node, job.name.clone())),
                    JobState::Running => pending.push(node),
                }
            }
            if next != *record {
                return Decision::Record {
                    message: "validation Jobs report".into(),
                    record: next,
                };
            }
            if !missing.is_empty() {
                return Decision::Call {
                    message: format!(
                        "starting validation Jobs on {}",
                        missing
                            .iter()
                            .map(|(n, _)| n.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    call: Call::CreateJobs(missing),
                };
            }
            if !pending.is_empty() {
                return wait(
                    format!(
                        "waiting for the validation Jobs on {} to reach the target's paths",
                        pending.join(", ")
                    ),
                    false,
                );
            }
            Decision::Advance {
                to: VolumeOpsStep::Migrating,
                record: record.clone(),
                message: format!(
                    "every consuming node reaches the target; continuing migration {}",
                    backend.id
                ),
            }
        }
        VolumeOpsStep::Migrating => {
            let Some(backend) = &obs.backend else {
                return Decision::Finish {
                    phase: OpsPhase::Failed,
                    message: format!(
                        "migration {} is no longer known to the control plane; the volume's position is what the control plane reports — create a new operation if it did not move",
                        stored.migration_uuid.unwrap_or_default()
                    ),
                    reason: None,
                    cancel: false,
                };
            };
            match backend.status.as_str() {
                "done" => {
                    return Decision::Advance {
                        to: VolumeOpsStep::Verifying,
                        record: record.clone(),
                        message: format!(
                            "migration {} finished; deleting the validation Jobs",
                            backend.id
                        ),
                    };
                }
                "failed" | "cancelled" => {
                    return Decision::Finish {
                        phase: OpsPhase::Failed,
                        message: format!(
                            "the control plane ended migration {} {}{}",
                            backend.id,
                            backend.status,
                            said(&backend.error)
                        ),
                        reason: None,
                        cancel: false,
                    };
                }
                _ => {}
            }
            if stored.continued_at.is_none() {
                return Decision::ContinueOnce {
                    message: format!("continuing migration {}: the copy starts", backend.id),
                };
            }
            wait(
                format!(
                    "migration {} is copying (phase {}, status {})",
                    backend.id, backend.phase, backend.status
                ),
                false,
            )
        }
        VolumeOpsStep::Verifying => {
            let left: Vec<String> = obs
                .jobs
                .iter()
                .filter(|(_, s)| **s != JobState::Missing)
                .map(|(n, _)| n.clone())
                .collect();
            if !left.is_empty() {
                return Decision::Call {
                    message: format!("deleting validation Jobs {}", left.join(", ")),
                    call: Call::DeleteJobs(left),
                };
            }
            Decision::Finish {
                phase: OpsPhase::Succeeded,
                message: format!(
                    "subsystem {nqn} moved to node {}",
                    record.target_node_uuid.clone().unwrap_or_default()
                ),
                reason: None,
                cancel: false,
            }
        }
    }
}

fn said(error: &str) -> String {
    if error.is_empty() {
        String::new()
    } else {
        format!(": {error}")
    }
}

#[cfg(test)]
mod tests;

//! The StorageCluster creation machine (`CREATION_GRAPH`: Claiming → CheckingControlPlane
//! → ResolvingConfig → Creating → Adopting → Persisting) as one pass of three parts:
//!
//! - [`observe`] reads what the current step needs, and only that; it writes nothing;
//! - [`plan`] decides, purely, what the step does next with what was read: one
//!   [`Plan`] of the machine runtime, whose calls ([`CreationCall`]) are this kind's own;
//! - the runtime's [`machine::execute`] performs it, with [`Creation`] as the writer of
//!   the creation status and the caller of the one control-plane call.
//!
//! Every step is written to `status.step` before its side effect, and every side effect is
//! preceded by a look at whether it already happened: a cluster created by a request whose
//! answer was lost is found by name and adopted, never created twice. The claim is written
//! only onto the resourceVersion it was decided from, and the identity the create call
//! answers with is stored in its Secret before anything else can fail.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use simplyblock_api::StorageCluster;
use simplyblock_api::storage_cluster::{
    CREATION_GRAPH, ClusterPhase, CreationStep, StorageClusterStatus,
};
use simplyblock_controlplane::{Cluster, ClusterCreate, Task};
use simplyblock_statemachine::{Machine, State};

use super::identity::{self, Identity, cluster_secret_name, upgrade_secret_name};
use super::observe::steady_status;
use super::params::{self, BackupCredentials, ConfigError};
use super::status::{write_steady, write_step};
use crate::runtime::context::{Context, requeue};
use crate::runtime::kit::{Error, Guard};
use crate::runtime::machine::{self, After, Entity, Move, Pass, Plan, Stage, Status};

/// What one pass of the creation machine read. Each field is read only in the steps named
/// beside it; elsewhere it stays empty.
#[derive(Debug, Default, PartialEq)]
pub struct Observation {
    /// CheckingControlPlane: why the control plane is not ready; `None` when it is.
    pub not_ready: Option<String>,
    /// CheckingControlPlane (once ready), Adopting: the identity an upgrade left behind.
    pub upgrade: Option<Identity>,
    /// ResolvingConfig, and Creating when no cluster has the name yet: the create body, or
    /// why the spec and the Secrets it names cannot give one.
    pub config: Option<Result<ClusterCreate, ConfigError>>,
    /// Creating, and Adopting without an upgrade Secret: the control-plane cluster that
    /// already has this StorageCluster's name.
    pub existing: Option<Identity>,
    /// Creating, Adopting: the StorageCluster of another namespace that holds this one's
    /// name in the control plane (see [`name_holder`]), as `namespace/name`.
    pub name_taken_by: Option<String>,
    /// Persisting: the identity stored in the cluster's Secret.
    pub stored: Option<Identity>,
    /// Persisting, with a stored identity: what the control plane reports of that cluster.
    pub reported: Option<Reported>,
}

/// The control plane's cluster and its tasks.
#[derive(Clone, Debug, PartialEq)]
pub struct Reported {
    pub cluster: Cluster,
    pub tasks: Vec<Task>,
}

/// What the creation machine calls that is its own.
#[derive(Clone, Debug, PartialEq)]
pub enum CreationCall {
    /// Store `identity` in the cluster's Secret, then move to `to`; `adopted`: the cluster
    /// was not created by this operator, which an event says.
    Record {
        identity: Identity,
        to: CreationStep,
        adopted: bool,
    },
    /// Create the cluster in the control plane, then record the identity it answers with.
    Create { body: Box<ClusterCreate> },
    /// The control plane has the cluster: publish it to the CSI driver and write the
    /// steady-state `status`, which ends the machine.
    Finish {
        identity: Identity,
        status: Box<StorageClusterStatus>,
    },
}

/// What the current step does next. The creation status has no fields of its own beyond
/// the step, phase and message: the steady status replaces it whole.
pub type CreationPlan = Plan<CreationStep, CreationCall, ()>;

/// The notice of a step that outlived its deadline, raised once: when the cluster is not
/// already Unavailable. The step goes on being retried.
pub fn overdue(
    machine: &Machine<'_, CreationStep>,
    status: &StorageClusterStatus,
    now: Timestamp,
) -> Option<String> {
    if !machine.timed_out(now) || status.phase == ClusterPhase::Unavailable {
        return None;
    }
    Some(format!(
        "creation step {} outlived its deadline; it is still being retried",
        machine.state()
    ))
}

/// The phase a step that stays where it is writes: Unavailable once past its deadline, so
/// that its own message does not undo the deadline's notice (and raise it again).
pub fn holding_phase(machine: &Machine<'_, CreationStep>, now: Timestamp) -> ClusterPhase {
    if machine.timed_out(now) {
        ClusterPhase::Unavailable
    } else {
        ClusterPhase::Creating
    }
}

/// What `step` does next, given what was read. Pure.
pub fn plan(step: CreationStep, status: &StorageClusterStatus, obs: &Observation) -> CreationPlan {
    // A read the step always makes is missing only if observe changed: look again.
    let look_again: CreationPlan = Plan::quiet(status.message.as_deref(), requeue::RETRY);
    match step {
        // Like every write of the machine, onto the resourceVersion read: only the writer
        // whose read is still current claims the cluster.
        CreationStep::Claiming => Plan::Advance {
            to: Move::To(CreationStep::CheckingControlPlane),
            message: "claimed; checking the control plane".into(),
            kind_status: None,
        },
        CreationStep::CheckingControlPlane => match (&obs.not_ready, &obs.upgrade) {
            (Some(why), _) => Plan::Wait {
                message: format!(
                    "the control plane is not ready ({why}); the cluster is created once it is"
                ),
                after: requeue::RETRY,
                event: Some("FDBNotReady"),
            },
            (None, Some(_)) => advance(CreationStep::Adopting),
            (None, None) => advance(CreationStep::ResolvingConfig),
        },
        CreationStep::ResolvingConfig => match &obs.config {
            Some(Ok(_)) => advance(CreationStep::Creating),
            Some(Err(e)) => hold_on_config(status, e),
            None => look_again,
        },
        CreationStep::Creating | CreationStep::Adopting if obs.name_taken_by.is_some() => {
            name_taken(status, obs.name_taken_by.as_deref().unwrap_or_default())
        }
        CreationStep::Creating => match (&obs.existing, &obs.config) {
            // An earlier create whose answer was lost, or another writer.
            (Some(existing), _) => record(existing.clone(), CreationStep::Adopting, false),
            (None, Some(Ok(body))) => Plan::Call {
                call: CreationCall::Create {
                    body: Box::new(body.clone()),
                },
                message: "creating the cluster in the control plane".into(),
            },
            (None, Some(Err(e))) => hold_on_config(status, e),
            (None, None) => look_again,
        },
        CreationStep::Adopting => match obs.upgrade.as_ref().or(obs.existing.as_ref()) {
            Some(found) => record(found.clone(), CreationStep::Persisting, true),
            None => restart("nothing to adopt was found; creating the cluster afresh"),
        },
        CreationStep::Persisting => match (&obs.stored, &obs.reported) {
            (None, _) => restart("the cluster's Secret is missing; looking the cluster up again"),
            (Some(identity), Some(reported)) => {
                let mut next = steady_status(status, &reported.cluster, &reported.tasks);
                let message = format!("created in the control plane as {}", identity.uuid);
                next.step = Default::default();
                next.message = Some(message.clone());
                Plan::Call {
                    call: CreationCall::Finish {
                        identity: identity.clone(),
                        status: Box::new(next),
                    },
                    message,
                }
            }
            (Some(_), None) => look_again,
        },
    }
}

/// The control plane names clusters without a namespace: a StorageCluster whose name
/// another namespace's StorageCluster holds neither creates nor adopts, or the two would
/// share one control-plane cluster and delete it under each other. Said once.
fn name_taken(status: &StorageClusterStatus, holder: &str) -> CreationPlan {
    let message = format!(
        "StorageCluster {holder} already holds this name in the control plane, which names clusters without their namespace; StorageClusters in different namespaces need different names: delete this one and create it under another name"
    );
    if status.message.as_deref() == Some(message.as_str()) {
        return Plan::quiet(Some(&message), requeue::RESYNC);
    }
    Plan::Wait {
        message,
        after: requeue::RESYNC,
        event: Some("ClusterNameTaken"),
    }
}

/// A StorageCluster as [`name_holder`] weighs it.
#[derive(Clone, Debug, PartialEq)]
pub struct Namesake {
    /// `namespace/name`.
    pub key: String,
    pub uid: String,
    pub created: Option<Timestamp>,
    /// Whether it recorded a control-plane cluster (`status.uuid`).
    pub recorded: bool,
}

/// Which of `others` (StorageClusters of `me`'s name in other namespaces) holds the name
/// in the control plane: one that recorded a cluster, else the oldest of all (the uid
/// breaks a tie), so that two created at once agree on which one goes ahead. `None` when
/// `me` may create or adopt. Pure.
pub fn name_holder(me: &Namesake, others: &[Namesake]) -> Option<String> {
    if let Some(recorded) = others.iter().find(|o| o.recorded) {
        return Some(recorded.key.clone());
    }
    let order = |n: &Namesake| (n.created.unwrap_or(Timestamp::MAX), n.uid.clone());
    others
        .iter()
        .filter(|o| order(o) < order(me))
        .min_by_key(|o| order(o))
        .map(|o| o.key.clone())
}

/// After a create call that failed: a cluster of the name that is there anyway was
/// created by it (its answer was lost) and is adopted; otherwise the failure is said and
/// the call retried.
pub fn after_failed_create(error: &str, exists: bool) -> CreationPlan {
    if exists {
        return advance(CreationStep::Adopting);
    }
    Plan::Wait {
        message: format!("creating the cluster in the control plane failed: {error}"),
        after: requeue::RETRY,
        event: Some("ClusterCreationFailed"),
    }
}

/// Every move is written under the resourceVersion the pass decided from: a pass that read
/// a stale copy (the informer behind the controller's own last write) must not write an
/// earlier step over a later one, nor drop the fields the later one recorded.
fn advance(to: CreationStep) -> CreationPlan {
    Plan::Advance {
        to: Move::To(to),
        message: format!("creation step {}", to.name()),
        kind_status: None,
    }
}

/// Back to the first step, saying why.
fn restart(message: &str) -> CreationPlan {
    Plan::Advance {
        to: Move::Restart,
        message: message.into(),
        kind_status: None,
    }
}

/// Store `identity` as the cluster's, then move to `to`.
fn record(identity: Identity, to: CreationStep, adopted: bool) -> CreationPlan {
    Plan::Call {
        call: CreationCall::Record {
            identity,
            to,
            adopted,
        },
        message: format!("creation step {}", to.name()),
    }
}

/// A spec the create body cannot be made from: said once (a spec or Secret change brings
/// the next pass; the requeue is a backstop).
fn hold_on_config(status: &StorageClusterStatus, e: &ConfigError) -> CreationPlan {
    let message = e.to_string();
    if status.message.as_deref() == Some(message.as_str()) {
        return Plan::quiet(Some(&message), requeue::RESYNC);
    }
    Plan::Wait {
        message,
        after: requeue::RESYNC,
        event: Some(e.reason()),
    }
}

/// Reads what `step` needs. No writes.
pub async fn observe(
    cluster: &StorageCluster,
    step: CreationStep,
    ctx: &Context,
) -> Result<Observation, Error> {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let mut obs = Observation::default();
    match step {
        CreationStep::Claiming => {}
        CreationStep::CheckingControlPlane => {
            obs.not_ready = ctx
                .control_plane()?
                .ready()
                .await
                .err()
                .map(|e| e.to_string());
            if obs.not_ready.is_none() {
                obs.upgrade = identity::read(ctx, &ns, &upgrade_secret_name(&name)).await?;
            }
        }
        CreationStep::ResolvingConfig => obs.config = Some(resolve(cluster, ctx).await?),
        CreationStep::Creating => {
            obs.name_taken_by = namesakes(cluster, ctx).await?;
            if obs.name_taken_by.is_some() {
                return Ok(obs);
            }
            obs.existing = named(ctx, &name).await?;
            if obs.existing.is_none() {
                obs.config = Some(resolve(cluster, ctx).await?);
            }
        }
        CreationStep::Adopting => {
            obs.name_taken_by = namesakes(cluster, ctx).await?;
            if obs.name_taken_by.is_some() {
                return Ok(obs);
            }
            obs.upgrade = identity::read(ctx, &ns, &upgrade_secret_name(&name)).await?;
            if obs.upgrade.is_none() {
                obs.existing = named(ctx, &name).await?;
            }
        }
        CreationStep::Persisting => {
            obs.stored = identity::read(ctx, &ns, &cluster_secret_name(&name)).await?;
            if let Some(id) = &obs.stored {
                let cp = ctx.control_plane()?;
                obs.reported = Some(Reported {
                    cluster: cp.get_cluster(id.uuid).await?,
                    // A list that failed is not an empty one: the report would say the
                    // new cluster has no tasks while its setup tasks run.
                    tasks: cp.list_tasks(id.uuid).await?,
                });
            }
        }
    }
    Ok(obs)
}

/// The StorageCluster of another served namespace holding `cluster`'s name (see
/// [`name_holder`]).
async fn namesakes(cluster: &StorageCluster, ctx: &Context) -> Result<Option<String>, Error> {
    let namesake = |c: &StorageCluster| Namesake {
        key: format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()),
        uid: c.uid().unwrap_or_default(),
        created: c.metadata.creation_timestamp.as_ref().map(|t| t.0),
        recorded: c
            .status
            .as_ref()
            .and_then(|s| s.uuid.as_deref())
            .is_some_and(|u| !u.is_empty()),
    };
    let me = namesake(cluster);
    // Only the namespaces this operator serves share its control plane.
    let others: Vec<Namesake> = ctx
        .scope
        .api::<StorageCluster>(&ctx.kube)
        .list(&ListParams::default().fields(&format!("metadata.name={}", cluster.name_any())))
        .await?
        .items
        .iter()
        .filter(|c| c.uid() != cluster.uid())
        .map(namesake)
        .collect();
    Ok(name_holder(&me, &others))
}

/// The identity of the control-plane cluster named `name`, if there is one.
async fn named(ctx: &Context, name: &str) -> Result<Option<Identity>, Error> {
    Ok(ctx
        .control_plane()?
        .list_clusters()
        .await?
        .into_iter()
        .find(|c| c.name.as_deref() == Some(name))
        .map(|c| Identity {
            uuid: c.id,
            secret: c.secret.expose().to_owned(),
        }))
}

/// The create body, with the backup credentials read from their Secret.
async fn resolve(
    cluster: &StorageCluster,
    ctx: &Context,
) -> Result<Result<ClusterCreate, ConfigError>, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let creds = match &cluster.spec.backup {
        None => None,
        Some(store) => {
            let secret_name = &store.credentials_secret_ref.name;
            let api: Api<Secret> = Api::namespaced(ctx.kube.clone(), &ns);
            let secret = api.get_opt(secret_name).await?;
            let key = |k: &str| {
                secret
                    .as_ref()
                    .and_then(|s| s.data.as_ref())
                    .and_then(|d| d.get(k))
                    .and_then(|b| String::from_utf8(b.0.clone()).ok())
            };
            match (key("access_key_id"), key("secret_access_key")) {
                (Some(access_key_id), Some(secret_access_key)) => Some(BackupCredentials {
                    access_key_id,
                    secret_access_key,
                }),
                _ => {
                    return Ok(Err(ConfigError::BackupCredentials(format!(
                        "Secret {secret_name} in namespace {ns} must exist and hold the keys access_key_id and secret_access_key"
                    ))));
                }
            }
        }
    };
    Ok(params::cluster_create(
        &cluster.name_any(),
        &ns,
        &cluster.spec,
        creds.as_ref(),
    ))
}

/// The creation machine's writer and caller, for [`machine::execute`].
pub struct Creation;

impl Entity for Creation {
    type Object = StorageCluster;
    type Step = CreationStep;
    type Call = CreationCall;
    type Fields = ();

    fn message(cluster: &StorageCluster) -> Option<&str> {
        cluster.status.as_ref()?.message.as_deref()
    }

    async fn call(
        &self,
        pass: &mut Pass<'_, Self>,
        call: CreationCall,
        _message: String,
    ) -> Result<After<Self>, Error> {
        let (cluster, ctx) = (&pass.object, pass.ctx);
        match call {
            CreationCall::Record {
                identity,
                to,
                adopted,
            } => {
                identity::write(ctx, cluster, &identity).await?;
                if adopted {
                    let note = format!(
                        "adopted control-plane cluster {} instead of creating one",
                        identity.uuid
                    );
                    ctx.event(cluster, false, "ClusterAdopted", note).await;
                }
                Ok(After::Plan(advance(to).into()))
            }
            CreationCall::Create { body } => {
                let created = ctx.control_plane()?.create_cluster(&body).await;
                crate::runtime::crash::point(crate::runtime::crash::CLUSTER_CREATE);
                let next = match created {
                    // The secret exists nowhere else it can be read back from reliably: it
                    // is recorded before anything else can fail.
                    Ok(created) => record(
                        Identity {
                            uuid: created.id,
                            secret: created.secret.expose().to_owned(),
                        },
                        CreationStep::Persisting,
                        false,
                    ),
                    Err(e) => {
                        let exists = named(ctx, &cluster.name_any()).await?.is_some();
                        after_failed_create(&e.to_string(), exists)
                    }
                };
                Ok(After::Plan(next.into()))
            }
            CreationCall::Finish { identity, status } => {
                identity::publish_csi_entry(ctx, cluster, &identity).await?;
                write_steady(ctx, cluster, &status).await?;
                Ok(After::requeue(requeue::NEXT_STEP))
            }
        }
    }

    /// A held step writes the [`holding_phase`]; the machine plans no ending of its own
    /// (its finish writes the steady status), so a failure would only be Unavailable.
    async fn write(
        &self,
        ctx: &Context,
        cluster: &StorageCluster,
        status: Status<'_, CreationStep, ()>,
    ) -> Result<Option<StorageCluster>, Error> {
        let phase = match status.stage {
            Stage::Running | Stage::Succeeded => ClusterPhase::Creating,
            Stage::Holding => holding_phase(status.machine, status.now),
            Stage::Failed => ClusterPhase::Unavailable,
        };
        let machine = Some(status.machine);
        let message = Some(status.message);
        write_step(
            ctx,
            cluster,
            phase,
            machine,
            message,
            Guard::ResourceVersion,
        )
        .await
    }
}

/// One pass of the creation machine: restore the step, note a missed deadline, then
/// observe → plan → execute.
pub async fn create(
    cluster: &StorageCluster,
    status: &StorageClusterStatus,
    ctx: &Context,
) -> Result<Action, Error> {
    let now = Timestamp::now();
    let machine = match CREATION_GRAPH.restore(&status.step, now) {
        Ok(m) => m,
        Err(e) => {
            let message = format!("the stored creation step cannot be resumed: {e}");
            let unavailable = ClusterPhase::Unavailable;
            let guard = Guard::ResourceVersion;
            let written = write_step(ctx, cluster, unavailable, None, Some(message), guard).await?;
            if written.is_none() {
                return Ok(Action::requeue(requeue::CONFLICT));
            }
            return Ok(Action::await_change());
        }
    };
    if let Some(message) = overdue(&machine, status, now) {
        let unavailable = ClusterPhase::Unavailable;
        let written = write_step(
            ctx,
            cluster,
            unavailable,
            Some(&machine),
            Some(message.clone()),
            Guard::ResourceVersion,
        )
        .await?;
        if written.is_none() {
            return Ok(Action::requeue(requeue::CONFLICT));
        }
        // Said once: the cluster is Unavailable from now on, which holds the notice back.
        // The step is retried from the copy that write made.
        ctx.event(cluster, true, "StepDeadlineExceeded", message)
            .await;
        return Ok(Action::requeue(requeue::NEXT_STEP));
    }
    let obs = observe(cluster, machine.state(), ctx).await?;
    let next = plan(machine.state(), status, &obs);
    machine::execute(&Creation, ctx, cluster.clone(), machine, next.into(), now).await
}

#[cfg(test)]
#[path = "creation_tests.rs"]
mod tests;

//! The step framework: each step is data (what it needs, what it would do, whether it is
//! done, whether it may run), so a plan is computed without touching the cluster.

use std::fmt;

use crate::world::World;

/// The two stages of moving an installation over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// Phase 1: the conversion webhook, the CRDs and the operator itself.
    Upgrade,
    /// Phase 2, after a person has verified the upgrade: the objects move to v1alpha2.
    Migrate,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Upgrade => "upgrade",
            Stage::Migrate => "migrate",
        })
    }
}

/// One change a step would make, or one thing it would check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Action {
    /// The rule the change carries out, e.g. `reparent`.
    pub rule: &'static str,
    /// `create`, `update`, `annotate`, `delete`, `check`, …
    pub verb: &'static str,
    /// The object, `Kind/name`.
    pub object: String,
    /// What exactly changes.
    pub detail: String,
}

/// Why a step (or the whole upgrade) may not run, and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Refusal {
    /// The check that refused, e.g. `in-flight-operation`.
    pub check: &'static str,
    /// The object concerned, `Kind/name` (or a CRD, or the namespace).
    pub object: String,
    /// What is wrong.
    pub what: String,
    /// Why that stops the upgrade.
    pub why: String,
    /// What to do.
    pub fix: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}] {}: {}\n    why: {}\n    do:  {}",
            self.check, self.object, self.what, self.why, self.fix
        )
    }
}

/// Options a person gives that change what is refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Storage nodes that are not online do not refuse the migration.
    pub acknowledge_offline_nodes: bool,
}

/// What a step's `apply` or `verify` answers.
#[derive(Debug)]
pub enum StepError {
    /// The step cannot be carried out by this release.
    NotImplemented(&'static str),
    /// It ran and failed.
    Failed(anyhow::Error),
    /// A write was refused because its object changed since the step read it (409: the
    /// operator, running beside the tool, wrote it meanwhile). The step is decided again
    /// on a fresh read.
    Conflict(anyhow::Error),
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepError::NotImplemented(id) => {
                write!(f, "{id}: not implemented in this release")
            }
            StepError::Failed(e) => write!(f, "{e:#}"),
            StepError::Conflict(e) => write!(
                f,
                "{e:#} (changed by another writer each time it was read again; run again to resume)"
            ),
        }
    }
}

impl std::error::Error for StepError {}

impl StepError {
    /// A failed write or read of `what`: a conflict when the server refused it as made
    /// from an outdated read (409), else a failure.
    pub fn kube(what: impl fmt::Display, e: kube::Error) -> StepError {
        match e {
            kube::Error::Api(s) if s.code == 409 => {
                StepError::Conflict(anyhow::anyhow!("{what}: {}", s.message))
            }
            e => StepError::Failed(anyhow::anyhow!("{what}: {e}")),
        }
    }
}

/// What effects work with.
#[derive(Clone)]
pub struct Context {
    pub client: kube::Client,
    /// The namespace the simplyblock objects and the operator live in.
    pub namespace: String,
    pub helm: Helm,
    /// How long a step waits for its effect to show.
    pub wait: std::time::Duration,
}

/// How the chart is installed.
#[derive(Clone, Debug)]
pub struct Helm {
    /// The helm binary.
    pub binary: String,
    /// This release's chart; required by the step that installs it.
    pub chart: Option<String>,
    /// The release to install it as.
    pub release: String,
    /// Values files passed on.
    pub values: Vec<String>,
    /// The kubeconfig helm uses; `None`: helm's own default (`KUBECONFIG`, as the tool's).
    pub kubeconfig: Option<String>,
}

/// A change to the cluster: reads `World`, writes through the client.
pub type Effect =
    for<'a> fn(&'a Context, &'a World) -> futures::future::BoxFuture<'a, Result<(), StepError>>;

/// One step of a stage.
#[derive(Clone)]
pub struct Step {
    pub id: &'static str,
    pub stage: Stage,
    /// The state of the migration's graph the step runs in (`Ownership`, `Transforming`, …);
    /// empty for upgrade steps.
    pub phase: &'static str,
    /// Steps that must be done first.
    pub requires: &'static [&'static str],
    /// What the step would do to this world (empty when there is nothing to do).
    pub describe: fn(&World) -> Vec<Action>,
    /// Whether the world already shows the step's effect.
    pub done: fn(&World) -> bool,
    /// Whether the step may run against this world.
    pub validate: fn(&World, &Options) -> Result<(), Vec<Refusal>>,
    /// The change; `None` when this release cannot carry it out.
    pub apply: Option<Effect>,
    /// A check once the change shows, given the world the change was made on: what `done`
    /// cannot see, such as what the change must have left alone; `None` when `done` is the
    /// whole check.
    pub verify: Option<Effect>,
    /// Whether completion is recorded rather than read: a check leaves no trace, so the
    /// run's record says it passed.
    pub recorded: bool,
}

impl Step {
    /// Whether this release can carry the step out.
    pub fn implemented(&self) -> bool {
        self.apply.is_some()
    }

    /// Makes the change.
    pub async fn apply(&self, ctx: &Context, world: &World) -> Result<(), StepError> {
        match self.apply {
            Some(apply) => apply(ctx, world).await,
            None => Err(StepError::NotImplemented(self.id)),
        }
    }

    /// Checks the change, beyond `done`; `before` is the world it was made on.
    pub async fn verify(&self, ctx: &Context, before: &World) -> Result<(), StepError> {
        match self.verify {
            Some(verify) => verify(ctx, before).await,
            None => Ok(()),
        }
    }
}

impl fmt::Debug for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Step")
            .field("id", &self.id)
            .field("stage", &self.stage)
            .field("requires", &self.requires)
            .finish_non_exhaustive()
    }
}

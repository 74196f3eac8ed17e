//! `preflight`: every check at once, then the plan of both stages. Reads only.

use std::fmt;

use crate::plan::{self, OrderError, Plan};
use crate::step::{Options, Refusal};
use crate::world::{self, World, kind};
use crate::{checks, steps};

/// The exit code when nothing blocks.
pub const EXIT_READY: i32 = 0;
/// The exit code when something blocks.
pub const EXIT_BLOCKED: i32 = 2;

/// What preflight found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub namespace: String,
    /// Every problem, each once.
    pub refusals: Vec<Refusal>,
    /// What was not checked, and why.
    pub notes: Vec<String>,
    pub plan: Plan,
}

impl Report {
    /// Whether anything blocks the upgrade.
    pub fn blocked(&self) -> bool {
        !self.refusals.is_empty() || self.plan.blocked()
    }
    /// The process exit code: [`EXIT_READY`] or [`EXIT_BLOCKED`].
    pub fn exit_code(&self) -> i32 {
        if self.blocked() {
            EXIT_BLOCKED
        } else {
            EXIT_READY
        }
    }
}

/// The report on `world`. Pure.
pub fn assess(world: &World, options: &Options) -> Result<Report, OrderError> {
    let converting = checks::converting_kinds();
    let mut unconverted: Vec<&str> = world
        .crds
        .iter()
        .filter(|c| c.serves(world::V1ALPHA1) && !converting.contains(&c.kind.as_str()))
        .filter(|c| world.objects.iter().any(|o| kind(o) == c.kind))
        .map(|c| c.kind.as_str())
        .collect();
    unconverted.sort_unstable();
    let mut notes = Vec::new();
    if !unconverted.is_empty() {
        notes.push(format!(
            "conversion round-trip not checked for {}: this release does not convert these kinds (retired kinds are moved by the migrate steps instead)",
            unconverted.join(", ")
        ));
    }
    Ok(Report {
        namespace: world.namespace.clone(),
        refusals: checks::all(world, options),
        notes,
        plan: plan::plan(&steps::all(), world, options)?,
    })
}

/// Reads the cluster and assesses it. Reads only.
pub async fn preflight(
    client: &kube::Client,
    namespace: &str,
    target: &world::Target,
    options: &Options,
) -> anyhow::Result<Report> {
    let mut world = world::observe(client, namespace).await?;
    world.target = target.clone();
    Ok(assess(&world, options)?)
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "simplyblock-upgrade preflight, namespace {}",
            self.namespace
        )?;
        writeln!(f)?;
        if self.refusals.is_empty() {
            writeln!(f, "Checks: no problems found.")?;
        } else {
            writeln!(
                f,
                "Checks: {} problem(s) block the upgrade:",
                self.refusals.len()
            )?;
            for (n, r) in self.refusals.iter().enumerate() {
                writeln!(f, "  {}. {r}", n + 1)?;
            }
        }
        for note in &self.notes {
            writeln!(f, "Note: {note}")?;
        }
        writeln!(f)?;
        writeln!(f, "Plan:")?;
        write!(f, "{}", self.plan)?;
        writeln!(f)?;
        writeln!(
            f,
            "Run the upgrade stage, check the installation, then the migrate stage. Until `migrate` starts, going back is uninstalling this release, deleting Lease {} and scaling the Go operator back up: every object is still stored at v1alpha1.",
            simplyblock_api::LEADER_LEASE
        )?;
        writeln!(
            f,
            "Verdict: {}",
            if self.blocked() {
                "BLOCKED — resolve the problems above and run preflight again"
            } else {
                "nothing blocks the upgrade"
            }
        )
    }
}

//! Carrying a stage out: each pending step, in order, is validated against a fresh read,
//! printed, applied, and then waited for until the cluster shows it (its `done`), or, for a
//! check, recorded as passed. A run killed anywhere resumes from the cluster and the
//! record: a step whose effect shows is skipped, one half-done is applied again.

use std::time::Duration;

use crate::checks;
use crate::plan::{self, RunError};
use crate::record::{self, Record, Store};
use crate::step::{Context, Options, Stage, Step, StepError};
use crate::steps::upgrade::{HOLDER, hold};
use crate::world::{self, Target, V1ALPHA1, V1ALPHA2, World};

/// Names a step to abort right after its change, before it is verified or recorded (or
/// right after it is found done already): how the tests kill a run at every step. Unset
/// outside such a test.
pub const CRASH_ENV: &str = "SIMPLYBLOCK_UPGRADE_CRASH_AFTER";

/// How often a step's effect is looked for.
const POLL: Duration = Duration::from_millis(500);

/// How many times a step whose write met a newer object is read and applied again.
const CONFLICT_RETRIES: u32 = 5;

impl From<record::Error> for RunError {
    fn from(e: record::Error) -> RunError {
        RunError::Step(StepError::Failed(e.into()))
    }
}

async fn observe(ctx: &Context, target: &Target) -> Result<World, RunError> {
    let mut world = world::observe(&ctx.client, &ctx.namespace)
        .await
        .map_err(|e| RunError::Step(StepError::Failed(e)))?;
    world.target = target.clone();
    Ok(world)
}

/// Runs `stage` to its end.
pub async fn run(
    ctx: &Context,
    steps: &[Step],
    stage: Stage,
    target: &Target,
    options: &Options,
) -> Result<(), RunError> {
    let store = Store::new(&ctx.client, &ctx.namespace);
    let mut record = store.load(stage).await?;
    if record.stage != stage.to_string() {
        return Err(RunError::Step(StepError::Failed(anyhow::anyhow!(
            "ConfigMap {} records the {} stage in progress (at {}); finish it with `simplyblock-upgrade {}` first",
            record::NAME,
            record.stage,
            if record.phase.is_empty() {
                "its start"
            } else {
                record.phase.as_str()
            },
            record.stage
        ))));
    }
    let world = observe(ctx, target).await?;
    if stage == Stage::Migrate && !upgraded(&world) {
        return Err(RunError::Step(StepError::Failed(anyhow::anyhow!(
            "the upgrade stage has not finished (the CRDs serve v1alpha2 and this release's operator leads once it has): run `simplyblock-upgrade upgrade` first"
        ))));
    }
    // Refused as a whole when any step is blocked, before anything changes.
    plan::admit(steps, stage, &world, options)?;
    // Every run writes the record first: a run going on at the same time fails its next write.
    record.started = jiff::Timestamp::now().to_string();
    store.save(&mut record).await?;
    enter(&store, &mut record, "Validating").await?;
    if stage == Stage::Upgrade && world.lease.as_ref().is_some_and(|l| l.holder == HOLDER) {
        // A rerun renews the hold the first run took.
        hold(ctx).await.map_err(RunError::Step)?;
    }
    let mine: Vec<Step> = steps.iter().filter(|s| s.stage == stage).cloned().collect();
    for step in plan::order(&mine).map_err(RunError::Order)? {
        let mut conflicts = 0;
        let world = loop {
            let world = observe(ctx, target).await?;
            if (step.done)(&world) || (step.recorded && record.completed.contains(step.id)) {
                break None;
            }
            // Validated again on what is there now: an earlier step may have changed it.
            if let Err(refusals) = (step.validate)(&world, options) {
                return Err(RunError::Refused(vec![(step.id, refusals)]));
            }
            if stage == Stage::Migrate && !step.phase.is_empty() {
                enter(&store, &mut record, step.phase).await?;
            }
            println!("  {:<34} running", step.id);
            for action in (step.describe)(&world) {
                if action.verb == "check" {
                    println!("    check: {}", action.detail);
                } else {
                    println!("    {} {}: {}", action.verb, action.object, action.detail);
                }
            }
            match step.apply(ctx, &world).await {
                Ok(()) => break Some(world),
                // The operator runs beside the tool and writes the same objects (their
                // status, their finalizers): a write from a read it outdated is decided
                // again on a fresh one, as a controller does.
                Err(StepError::Conflict(e)) if conflicts < CONFLICT_RETRIES => {
                    conflicts += 1;
                    println!("    changed since it was read ({e:#}); reading again");
                }
                Err(e) => return Err(RunError::Step(e)),
            }
        };
        let Some(world) = world else {
            println!("  {:<34} done", step.id);
            crash_point(step.id);
            continue;
        };
        crash_point(step.id);
        if !step.recorded {
            await_done(ctx, target, step).await?;
        }
        step.verify(ctx, &world).await.map_err(RunError::Step)?;
        if step.recorded {
            record.completed.insert(step.id.to_owned());
            store.save(&mut record).await?;
        }
        println!("  {:<34} done", step.id);
    }
    if stage == Stage::Migrate {
        enter(&store, &mut record, "Verifying").await?;
        let world = observe(ctx, target).await?;
        verify_both_versions(ctx, &world).await?;
        enter(&store, &mut record, "Completed").await?;
    }
    store.finish(&record).await?;
    Ok(())
}

/// Records the graph's new state, once.
async fn enter(store: &Store, record: &mut Record, phase: &str) -> Result<(), RunError> {
    if record.phase != phase {
        println!("stage {} → {phase}", record.stage);
        record.phase = phase.to_owned();
        store.save(record).await?;
    }
    Ok(())
}

/// Waits until the cluster shows `step` done.
async fn await_done(ctx: &Context, target: &Target, step: &Step) -> Result<(), RunError> {
    let deadline = tokio::time::Instant::now() + ctx.wait;
    loop {
        if (step.done)(&observe(ctx, target).await?) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(RunError::Step(StepError::Failed(anyhow::anyhow!(
                "{}: its effect did not show within {:?}; run again to resume",
                step.id,
                ctx.wait
            ))));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether the upgrade stage shows done: every CRD of this release serves v1alpha2 and
/// this release's operator leads.
pub fn upgraded(world: &World) -> bool {
    simplyblock_api::crds().iter().all(|crd| {
        world
            .crd(&crd.spec.names.kind)
            .is_some_and(|c| c.serves(V1ALPHA2))
    }) && world
        .lease
        .as_ref()
        .is_some_and(|l| !l.holder.is_empty() && l.holder != HOLDER)
}

/// The names of the objects of `crd` listed at `version`.
async fn names_at(ctx: &Context, crd: &world::Crd, version: &str) -> Result<Vec<String>, String> {
    let mut names: Vec<String> = world::list_group(&ctx.client, &ctx.namespace, crd, version)
        .await
        .map_err(|e| format!("{}: {e:#}", crd.kind))?
        .iter()
        .map(|o| world::name(o).to_owned())
        .collect();
    names.sort();
    Ok(names)
}

/// Every object of every converting kind reads at both versions: the same names listed at
/// each (read again while the operator adds objects between the two lists).
async fn verify_both_versions(ctx: &Context, world: &World) -> Result<(), RunError> {
    let kinds = checks::converting_kinds();
    let deadline = tokio::time::Instant::now() + ctx.wait;
    for crd in world
        .crds
        .iter()
        .filter(|c| kinds.contains(&c.kind.as_str()))
    {
        loop {
            let problem = match (
                names_at(ctx, crd, V1ALPHA1).await,
                names_at(ctx, crd, V1ALPHA2).await,
            ) {
                (Ok(old), Ok(hub)) if old == hub => break,
                (Ok(old), Ok(hub)) => format!(
                    "{} lists {old:?} at v1alpha1 and {hub:?} at v1alpha2",
                    crd.kind
                ),
                (Err(e), _) | (_, Err(e)) => e,
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(RunError::Step(StepError::Failed(anyhow::anyhow!(
                    "after the rewrite: {problem}"
                ))));
            }
            tokio::time::sleep(POLL).await;
        }
    }
    println!("  every object reads at v1alpha1 and v1alpha2");
    Ok(())
}

fn crash_point(step: &str) {
    if std::env::var(CRASH_ENV).is_ok_and(|armed| armed == step) {
        eprintln!("simplyblock-upgrade: aborting after {step} ({CRASH_ENV})");
        std::process::abort();
    }
}

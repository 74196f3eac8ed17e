//! Ordering steps and planning a stage: pure functions of the steps and the [`World`].

use std::collections::BTreeMap;
use std::fmt;

use crate::step::{Action, Options, Refusal, Stage, Step, StepError};
use crate::world::World;

/// Why steps cannot be ordered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrderError {
    /// A step requires an id no step of the stage has.
    Unknown {
        step: &'static str,
        requires: &'static str,
    },
    /// The steps named require one another in a cycle.
    Cycle(Vec<&'static str>),
    /// Two steps share an id.
    Duplicate(&'static str),
}

impl fmt::Display for OrderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OrderError::Unknown { step, requires } => {
                write!(
                    f,
                    "step {step} requires {requires}, which is not a step of its stage"
                )
            }
            OrderError::Cycle(ids) => write!(
                f,
                "steps require one another in a cycle: {}",
                ids.join(", ")
            ),
            OrderError::Duplicate(id) => write!(f, "two steps are called {id}"),
        }
    }
}

impl std::error::Error for OrderError {}

/// `steps` ordered so every step comes after those it requires; among steps free to go,
/// declaration order decides.
pub fn order(steps: &[Step]) -> Result<Vec<&Step>, OrderError> {
    let mut index = BTreeMap::new();
    for (i, step) in steps.iter().enumerate() {
        if index.insert(step.id, i).is_some() {
            return Err(OrderError::Duplicate(step.id));
        }
    }
    let mut waiting = vec![0usize; steps.len()];
    for (i, step) in steps.iter().enumerate() {
        for requires in step.requires {
            if !index.contains_key(requires) {
                return Err(OrderError::Unknown {
                    step: step.id,
                    requires,
                });
            }
            waiting[i] += 1;
        }
    }
    let mut placed = vec![false; steps.len()];
    let mut out = Vec::with_capacity(steps.len());
    while out.len() < steps.len() {
        let Some(next) = (0..steps.len()).find(|&i| !placed[i] && waiting[i] == 0) else {
            return Err(OrderError::Cycle(
                (0..steps.len())
                    .filter(|&i| !placed[i])
                    .map(|i| steps[i].id)
                    .collect(),
            ));
        };
        placed[next] = true;
        out.push(&steps[next]);
        for (i, step) in steps.iter().enumerate() {
            if step.requires.contains(&steps[next].id) {
                waiting[i] -= 1;
            }
        }
    }
    Ok(out)
}

/// Where a step stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// The world already shows its effect.
    Done,
    /// It would run.
    Pending,
    /// It may not run, for these reasons.
    Blocked(Vec<Refusal>),
}

/// One step in a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    pub id: &'static str,
    pub phase: &'static str,
    pub requires: &'static [&'static str],
    pub state: State,
    /// What it would do (empty when done).
    pub actions: Vec<Action>,
    /// Whether this release can carry it out.
    pub implemented: bool,
}

/// The plan of one stage, steps in the order they would run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagePlan {
    pub stage: Stage,
    pub steps: Vec<Planned>,
}

impl StagePlan {
    /// The steps that may not run.
    pub fn blocked(&self) -> impl Iterator<Item = &Planned> {
        self.steps
            .iter()
            .filter(|s| matches!(s.state, State::Blocked(_)))
    }
    /// Whether every step is done.
    pub fn done(&self) -> bool {
        self.steps.iter().all(|s| s.state == State::Done)
    }
}

/// The plan of both stages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub stages: Vec<StagePlan>,
}

impl Plan {
    /// Whether any step of any stage is blocked.
    pub fn blocked(&self) -> bool {
        self.stages.iter().any(|s| s.blocked().next().is_some())
    }
    pub fn stage(&self, stage: Stage) -> Option<&StagePlan> {
        self.stages.iter().find(|s| s.stage == stage)
    }
}

/// Plans one stage of `steps` against `world`.
pub fn plan_stage(
    steps: &[Step],
    stage: Stage,
    world: &World,
    options: &Options,
) -> Result<StagePlan, OrderError> {
    let owned: Vec<Step> = steps.iter().filter(|s| s.stage == stage).cloned().collect();
    let planned = order(&owned)?
        .into_iter()
        .map(|step| {
            let done = (step.done)(world);
            let state = if done {
                State::Done
            } else {
                match (step.validate)(world, options) {
                    Ok(()) => State::Pending,
                    Err(refusals) => State::Blocked(refusals),
                }
            };
            Planned {
                id: step.id,
                phase: step.phase,
                requires: step.requires,
                actions: if done {
                    Vec::new()
                } else {
                    (step.describe)(world)
                },
                state,
                implemented: step.implemented(),
            }
        })
        .collect();
    Ok(StagePlan {
        stage,
        steps: planned,
    })
}

/// Plans both stages.
pub fn plan(steps: &[Step], world: &World, options: &Options) -> Result<Plan, OrderError> {
    Ok(Plan {
        stages: vec![
            plan_stage(steps, Stage::Upgrade, world, options)?,
            plan_stage(steps, Stage::Migrate, world, options)?,
        ],
    })
}

/// Why a stage is not run.
#[derive(Debug)]
pub enum RunError {
    Order(OrderError),
    /// Steps of the stage are blocked.
    Refused(Vec<(&'static str, Vec<Refusal>)>),
    /// A step failed (or this release cannot carry it out).
    Step(StepError),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Order(e) => write!(f, "{e}"),
            RunError::Refused(blocked) => {
                writeln!(f, "the stage is refused; blocked steps:")?;
                for (id, refusals) in blocked {
                    for r in refusals {
                        writeln!(f, "  {id}: {r}")?;
                    }
                }
                Ok(())
            }
            RunError::Step(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RunError {}

/// The steps of `stage` that would run, in order; refuses the stage if any step is blocked.
pub fn admit(
    steps: &[Step],
    stage: Stage,
    world: &World,
    options: &Options,
) -> Result<Vec<&'static str>, RunError> {
    let plan = plan_stage(steps, stage, world, options).map_err(RunError::Order)?;
    let blocked: Vec<(&'static str, Vec<Refusal>)> = plan
        .steps
        .iter()
        .filter_map(|s| match &s.state {
            State::Blocked(r) => Some((s.id, r.clone())),
            _ => None,
        })
        .collect();
    if !blocked.is_empty() {
        return Err(RunError::Refused(blocked));
    }
    Ok(plan
        .steps
        .iter()
        .filter(|s| s.state == State::Pending)
        .map(|s| s.id)
        .collect())
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for stage in &self.stages {
            let blocked = stage.blocked().count();
            let verdict = if stage.done() {
                "done".to_owned()
            } else if blocked > 0 {
                format!("REFUSED: {blocked} step(s) blocked")
            } else {
                "ready".to_owned()
            };
            let command = match stage.stage {
                Stage::Upgrade => "simplyblock-upgrade upgrade --chart <chart>",
                Stage::Migrate => "simplyblock-upgrade migrate --confirm",
            };
            writeln!(f, "Stage {} (`{command}`): {verdict}", stage.stage)?;
            for (n, step) in stage.steps.iter().enumerate() {
                let state = match &step.state {
                    State::Done => "done",
                    State::Pending => "pending",
                    State::Blocked(_) => "BLOCKED",
                };
                let phase = if step.phase.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", step.phase)
                };
                let planned_only = if step.implemented || step.state == State::Done {
                    ""
                } else {
                    "  (not implemented in this release: planned only)"
                };
                writeln!(
                    f,
                    "  {:>2}. {:<34} {state}{phase}{planned_only}",
                    n + 1,
                    step.id
                )?;
                if !step.requires.is_empty() {
                    writeln!(f, "        after: {}", step.requires.join(", "))?;
                }
                if step.state != State::Done {
                    if step.actions.is_empty() {
                        writeln!(f, "        nothing to change")?;
                    }
                    for a in &step.actions {
                        if a.verb == "check" {
                            writeln!(f, "        check: {}", a.detail)?;
                        } else {
                            writeln!(f, "        {} {}: {}", a.verb, a.object, a.detail)?;
                        }
                    }
                }
                if let State::Blocked(refusals) = &step.state {
                    for r in refusals {
                        writeln!(f, "        blocked by [{}] {}", r.check, r.object)?;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::steps;

    fn nothing(_: &World) -> Vec<Action> {
        Vec::new()
    }
    fn no(_: &World) -> bool {
        false
    }
    fn fine(_: &World, _: &Options) -> Result<(), Vec<Refusal>> {
        Ok(())
    }

    fn step(id: &'static str, requires: &'static [&'static str]) -> Step {
        Step {
            id,
            stage: Stage::Upgrade,
            phase: "",
            requires,
            describe: nothing,
            done: no,
            validate: fine,
            apply: None,
            verify: None,
            recorded: false,
        }
    }

    fn ids(steps: &[&Step]) -> Vec<&'static str> {
        steps.iter().map(|s| s.id).collect()
    }

    #[test]
    fn steps_run_after_what_they_require_and_otherwise_in_declaration_order() {
        let steps = [
            step("c", &["b"]),
            step("a", &[]),
            step("b", &["a"]),
            step("d", &[]),
        ];
        assert_eq!(ids(&order(&steps).expect("ordered")), ["a", "b", "c", "d"]);
    }

    #[test]
    fn a_cycle_is_an_error_naming_its_steps() {
        let steps = [
            step("a", &["c"]),
            step("b", &["a"]),
            step("c", &["b"]),
            step("free", &[]),
        ];
        assert_eq!(
            order(&steps).err(),
            Some(OrderError::Cycle(vec!["a", "b", "c"]))
        );
    }

    #[test]
    fn a_requirement_outside_the_stage_is_an_error() {
        let steps = [step("a", &["missing"])];
        assert_eq!(
            order(&steps).err(),
            Some(OrderError::Unknown {
                step: "a",
                requires: "missing"
            })
        );
    }

    #[test]
    fn the_declared_steps_order_within_each_stage() {
        let all = steps::all();
        for stage in [Stage::Upgrade, Stage::Migrate] {
            let mine: Vec<Step> = all.iter().filter(|s| s.stage == stage).cloned().collect();
            let ordered = order(&mine).expect("the declared steps order");
            for (i, s) in ordered.iter().enumerate() {
                for r in s.requires {
                    assert!(
                        ordered[..i].iter().any(|p| p.id == *r),
                        "{} before {r}",
                        s.id
                    );
                }
            }
        }
        let ordered: Vec<&str> = plan(&all, &World::default(), &Options::default())
            .expect("plan")
            .stages
            .iter()
            .flat_map(|s| s.steps.iter().map(|p| p.id))
            .collect();
        assert_eq!(ordered.first(), Some(&"hold-controllers"));
        assert_eq!(ordered.last(), Some(&"rewrite-storage-version"));
    }

    fn object(kind: &str, name: &str, rest: Value) -> Value {
        let mut o = json!({
            "apiVersion": "storage.simplyblock.io/v1alpha1",
            "kind": kind,
            "metadata": {"name": name, "namespace": "sb"},
        });
        if let (Some(o), Some(rest)) = (o.as_object_mut(), rest.as_object()) {
            for (k, v) in rest {
                if k == "metadata" {
                    if let (Some(m), Some(extra)) = (
                        o.get_mut("metadata").and_then(Value::as_object_mut),
                        v.as_object(),
                    ) {
                        m.extend(extra.clone());
                    }
                } else {
                    o.insert(k.clone(), v.clone());
                }
            }
        }
        o
    }

    fn fleet(ops_phase: &str) -> World {
        let owner = json!([{"apiVersion": "storage.simplyblock.io/v1alpha1", "kind": "StorageNodeSet",
            "name": "set-a", "uid": "u1", "controller": true}]);
        World {
            namespace: "sb".into(),
            objects: vec![
                object(
                    "StorageCluster",
                    "prod",
                    json!({"spec": {"vcpuCount": 8, "maxSubsystemCount": 10}, "status": {"uuid": "c0ffee00-0000-4000-8000-000000000001"}}),
                ),
                object(
                    "StorageNodeSet",
                    "set-a",
                    json!({"spec": {"clusterName": "prod"}}),
                ),
                object(
                    "StorageNode",
                    "set-a-w1",
                    json!({"metadata": {"ownerReferences": owner}, "spec": {"storageNodeSetRef": "set-a", "workerNode": "w1"}, "status": {"status": "online"}}),
                ),
                object(
                    "StorageClusterOps",
                    "restart",
                    json!({"spec": {"clusterRef": "prod", "action": "restart"}, "status": {"phase": ops_phase}}),
                ),
            ],
            deployments: vec![json!({"kind": "Deployment",
                "metadata": {"name": crate::world::DEFAULT_OLD_OPERATOR, "namespace": "sb"},
                "spec": {"replicas": 1}})],
            ..World::default()
        }
    }

    fn state<'a>(plan: &'a Plan, id: &str) -> &'a State {
        &plan
            .stages
            .iter()
            .flat_map(|s| &s.steps)
            .find(|s| s.id == id)
            .expect("step")
            .state
    }

    #[test]
    fn a_running_operation_blocks_the_operator_upgrade_and_the_reparenting() {
        let plan = plan(&steps::all(), &fleet("Running"), &Options::default()).expect("plan");
        for id in ["upgrade-operator", "reparent-storage-nodes"] {
            let State::Blocked(refusals) = state(&plan, id) else {
                panic!("{id} is not blocked: {plan}");
            };
            assert!(
                refusals
                    .iter()
                    .any(|r| r.object == "StorageClusterOps/restart"),
                "{refusals:?}"
            );
        }
        assert!(plan.blocked());
        assert!(matches!(
            admit(&steps::all(), Stage::Migrate, &fleet("Running"), &Options::default()),
            Err(RunError::Refused(blocked)) if blocked.iter().any(|(id, _)| *id == "reparent-storage-nodes")
        ));
    }

    #[test]
    fn a_finished_operation_leaves_the_plan_pending_with_what_each_step_does() {
        let world = fleet("Succeeded");
        let plan = plan(&steps::all(), &world, &Options::default()).expect("plan");
        assert!(!plan.blocked(), "{plan}");
        assert_eq!(state(&plan, "reparent-storage-nodes"), &State::Pending);
        let reparent = plan.stages[1]
            .steps
            .iter()
            .find(|s| s.id == "reparent-storage-nodes")
            .expect("step");
        assert_eq!(reparent.actions.len(), 1);
        assert_eq!(reparent.actions[0].object, "StorageNode/set-a-w1");
        assert!(
            reparent.actions[0].detail.contains("StorageCluster/prod"),
            "{:?}",
            reparent.actions
        );
        let admitted =
            admit(&steps::all(), Stage::Migrate, &world, &Options::default()).expect("admitted");
        assert_eq!(admitted.first(), Some(&"reparent-storage-nodes"));
        assert!(
            plan.to_string().contains("reparent-storage-nodes"),
            "{plan}"
        );
    }

    #[test]
    fn a_step_whose_effect_shows_is_done_and_says_nothing() {
        let mut world = fleet("Failed");
        world
            .objects
            .retain(|o| crate::world::kind(o) != "StorageNodeSet");
        if let Some(node) = world
            .objects
            .iter_mut()
            .find(|o| crate::world::kind(o) == "StorageNode")
        {
            node["metadata"]["ownerReferences"] =
                json!([{"kind": "StorageCluster", "name": "prod", "controller": true}]);
        }
        let plan = plan(&steps::all(), &world, &Options::default()).expect("plan");
        assert_eq!(state(&plan, "reparent-storage-nodes"), &State::Done);
        assert_eq!(state(&plan, "retire-storage-node-sets"), &State::Done);
        assert_eq!(state(&plan, "stamp-storage-node-sizing"), &State::Pending);
    }

    #[tokio::test]
    async fn a_step_this_release_cannot_carry_out_says_so() {
        let all = steps::all();
        let planned_only: Vec<&str> = all
            .iter()
            .filter(|s| !s.implemented())
            .map(|s| s.id)
            .collect();
        assert_eq!(planned_only, ["absorb-volume-migrations"]);
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("url"));
        let ctx = crate::step::Context {
            client: kube::Client::try_from(config).expect("client"),
            namespace: "sb".into(),
            helm: crate::step::Helm {
                binary: "helm".into(),
                chart: None,
                release: "r".into(),
                values: Vec::new(),
                kubeconfig: None,
            },
            wait: std::time::Duration::from_secs(1),
        };
        let step = all
            .iter()
            .find(|s| s.id == "absorb-volume-migrations")
            .expect("step");
        let error = step
            .apply(&ctx, &World::default())
            .await
            .expect_err("refused");
        assert_eq!(
            error.to_string(),
            "absorb-volume-migrations: not implemented in this release"
        );
    }
}

//! The TestFailover controller: a disaster-recovery drill run from the hub, which clones
//! the latest recovery point of a source volume into an isolated bubble namespace on
//! another cluster (or the source's own) without touching the source, and removes
//! everything it made when the drill is deleted.
//!
//! The source cluster is read through ManagedClusterViews, the bubble is placed through one
//! ManifestWork, and the control plane is asked for the recovery point and the clone, with
//! the cluster's own secret when the Secret `simplyblock-cluster-<cluster>` (key `secret`)
//! is in the drill's namespace. [`observe`] reads what the current step needs,
//! [`plan::plan`] decides (pure), [`execute`] does one thing.
//!
//! | step | call, skipped when | done when |
//! |---|---|---|
//! | start | the finalizer; a live drill of the same source into the same bubble cluster fails this one | phase Provisioning |
//! | ResolvingSource | views of the source claim, then of its volume (skipped when there) | both answered: handle, attributes, fsType, volumeMode recorded |
//! | ResolvingPoint | in place without a pinned point: the snapshot `tfo-<h>-snap` (skipped when it exists) | onto another cluster: the relationship's latest replicated snapshot (none: Failed) |
//! | Cloning | per slot, the volume `tfo-<h>-clone` from the point (skipped when it exists) | every clone exists; a point removed before its clone: back to ResolvingPoint (pinned: Failed) |
//! | Placing | the ManifestWork `tfo-<h>-bubble` (skipped when it exists) | every claim reported Bound; the source handle unchanged (else Failed, `InvariantViolated`) |
//! | Releasing | on delete: the work, then each clone, each snapshot the drill took, the views (gone counts as done) | nothing left: the finalizer goes |
//! | Releasing, forced | on delete of a drill marked `storage.simplyblock.io/force-delete: "true"`: one pass as above, then the finalizer goes whatever is left, named in a `ForcedRelease` warning | always |
//!
//! Each step has 15 minutes ([`simplyblock_api::test_failover::STEP_DEADLINE`]); a step
//! that overruns fails the drill. A reclaim that fails holds the deletion in TearingDown
//! with a `ReclaimPending` event, and is tried again.

pub mod plan;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use simplyblock_api::StorageCluster;
use simplyblock_api::keys::FORCE_DELETE_ANNOTATION;
use simplyblock_api::test_failover::{
    FailoverPhase, FailoverScope, FailoverStage, FailoverStep, GRAPHS, TEST_FAILOVER_FINALIZER,
    TEST_ID_LABEL, TestFailover, TestFailoverStatus,
};
use simplyblock_api::volume_handle::PoolRef;
use simplyblock_controlplane::{Uuid, VolumeClone};
use simplyblock_statemachine::{MultiGraph, State};

use self::plan::{Call, Decision, GenerationSeen, GroupSource, Observation, View};
use super::bubble;
use super::site_deployment::{managed_cluster_view_resource, manifest_work_resource};
use crate::runtime::context::{Context, requeue};
use crate::runtime::kit::{self, Error, Guard};

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "testfailover";
const MANAGER: &str = "testfailover-controller";
/// On each work and view of a drill: the drill's `namespace/name`, which wakes it.
pub const DRILL_ANNOTATION: &str = "storage.simplyblock.io/test-failover";
/// How often a drill waiting on another cluster looks again (their answers also wake it).
const WAIT: Duration = Duration::from_secs(10);
/// The views a drill may create, by suffix.
const VIEWS: &[&str] = &["src-pvc", "src-pv", plan::BUBBLE_VIEW];

/// Runs the controller until the operator stops. Only on a hub ([`super::run`]).
pub async fn run(ctx: Arc<Context>) {
    let graphs = Arc::new(GRAPHS.scaled(ctx.step_deadline_scale));
    let drills = ctx.scope.api::<TestFailover>(&ctx.kube);
    let works = manifest_work_resource();
    let views = managed_cluster_view_resource();
    // The work and the views live in the clusters' namespaces, where no owner reference
    // can point at the drill: the annotation names it.
    let owned = || watcher::Config::default().labels(TEST_ID_LABEL);
    let controller = Controller::new(drills, watcher::Config::default())
        .watches_with(
            Api::<DynamicObject>::all_with(ctx.kube.clone(), &works),
            works.clone(),
            owned(),
            |o: DynamicObject| drill_of(&o),
        )
        .watches_with(
            Api::<DynamicObject>::all_with(ctx.kube.clone(), &views),
            views.clone(),
            owned(),
            |o: DynamicObject| drill_of(&o),
        );
    kit::run(
        CONTROLLER,
        controller,
        move |drill, ctx| {
            let graphs = graphs.clone();
            async move { reconcile(drill, ctx, &graphs).await }
        },
        ctx,
    )
    .await
}

/// The kill point right after a clone is made, before a pass has seen it
/// ([`crate::runtime::crash`]).
pub fn clone_point() -> String {
    crate::runtime::crash::ops_point("TestFailover", "Drill", FailoverStep::Cloning.name())
}

fn drill_of(o: &DynamicObject) -> Option<ObjectRef<TestFailover>> {
    let (ns, name) = o.annotations().get(DRILL_ANNOTATION)?.split_once('/')?;
    Some(ObjectRef::new(name).within(ns))
}

fn status_of(drill: &TestFailover) -> TestFailoverStatus {
    drill.status.clone().unwrap_or_default()
}

async fn reconcile(
    drill: Arc<TestFailover>,
    ctx: Arc<Context>,
    graphs: &MultiGraph<FailoverStage, FailoverStep>,
) -> Result<Action, Error> {
    let ctx = &*ctx;
    let has_finalizer = drill
        .finalizers()
        .iter()
        .any(|f| f == TEST_FAILOVER_FINALIZER);
    if drill.meta().deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Action::await_change());
        }
        return teardown(&drill, ctx).await;
    }
    let status = status_of(&drill);
    if matches!(status.phase, FailoverPhase::Ready | FailoverPhase::Failed) {
        return Ok(Action::await_change());
    }
    if !has_finalizer {
        let mut finalizers = drill.finalizers().to_vec();
        finalizers.push(TEST_FAILOVER_FINALIZER.to_owned());
        patch_meta(ctx, &drill, json!({"finalizers": finalizers})).await?;
        return Ok(Action::requeue(requeue::NEXT_STEP));
    }
    let now = Timestamp::now();
    let graph = graphs
        .graph(FailoverStage::Drill)
        .map_err(|e| Error::Invalid(e.to_string()))?;
    if status.step.is_empty() {
        return begin(&drill, ctx, graph.start(now).snapshot()).await;
    }
    let machine = match graph.restore(&status.step, now) {
        Ok(m) => m,
        Err(e) => {
            return finish_failed(
                &drill,
                ctx,
                plan::DRILL_FAILED,
                format!(
                    "the drill's step cannot be resumed: {e}; delete the drill and start another"
                ),
            )
            .await;
        }
    };
    let step = machine.state();
    if machine.timed_out(now) {
        let last = status.message.clone().unwrap_or_default();
        return finish_failed(
            &drill,
            ctx,
            plan::DRILL_FAILED,
            format!(
                "step {} did not finish within its deadline ({last})",
                step.name()
            ),
        )
        .await;
    }
    let seen = observe(&drill, step, ctx).await?;
    match plan::plan(&drill, step, &seen, now) {
        Decision::Wait(message) => {
            if status.message.as_deref() != Some(message.as_str()) {
                let mut next = status.clone();
                next.message = Some(message);
                write(ctx, &drill, next, Guard::ResourceVersion).await?;
            }
            Ok(Action::requeue(WAIT))
        }
        Decision::Call(call) => {
            execute(&drill, ctx, call).await?;
            Ok(Action::requeue(requeue::NEXT_STEP))
        }
        Decision::Advance {
            to,
            clones,
            report,
            message,
            event,
        } => {
            let mut machine = machine;
            machine
                .transition_to(to, now)
                .map_err(|e| Error::Invalid(e.to_string()))?;
            let mut next = status.clone();
            next.step = machine.snapshot();
            next.clones = clones;
            next.report = report;
            next.message = Some(message);
            write(ctx, &drill, next, Guard::ResourceVersion).await?;
            ctx.event(drill.as_ref(), false, event.0, event.1).await;
            Ok(Action::requeue(requeue::NEXT_STEP))
        }
        Decision::Ready { report, message } => {
            let mut next = status.clone();
            next.phase = FailoverPhase::Ready;
            next.report = Some(report);
            next.ready_at = Some(Time(now));
            next.message = Some(message.clone());
            write(ctx, &drill, next, Guard::ResourceVersion).await?;
            ctx.event(drill.as_ref(), false, "BubbleReady", message)
                .await;
            Ok(Action::await_change())
        }
        Decision::Fail { reason, message } => finish_failed(&drill, ctx, reason, message).await,
    }
}

/// Starts a drill: refused when another live drill has the same source and bubble cluster.
async fn begin(
    drill: &TestFailover,
    ctx: &Context,
    step: simplyblock_statemachine::StepSnapshot,
) -> Result<Action, Error> {
    let siblings: Api<TestFailover> = kit::api_of(&ctx.kube, drill);
    let others = siblings.list(&ListParams::default()).await?;
    if let Some(other) = others.iter().find(|o| plan::conflicts(drill, o)) {
        return finish_failed(
            drill,
            ctx,
            plan::DRILL_FAILED,
            format!(
                "drill {} already runs for {:?} {} into cluster {}; delete one of the two drills",
                other.name_any(),
                drill.spec.scope,
                drill.spec.source_ref,
                drill.spec.bubble_cluster
            ),
        )
        .await;
    }
    let mut next = status_of(drill);
    next.phase = FailoverPhase::Provisioning;
    next.step = step;
    next.message = Some("resolving the source".into());
    next.started_at = next.started_at.or_else(|| Some(Time(Timestamp::now())));
    write(ctx, drill, next, Guard::ResourceVersion).await?;
    ctx.event(drill, false, "DrillStarted", "the drill started".into())
        .await;
    Ok(Action::requeue(requeue::NEXT_STEP))
}

async fn finish_failed(
    drill: &TestFailover,
    ctx: &Context,
    reason: &'static str,
    message: String,
) -> Result<Action, Error> {
    let mut next = status_of(drill);
    next.phase = FailoverPhase::Failed;
    next.message = Some(message.clone());
    next.completed_at = next.completed_at.or_else(|| Some(Time(Timestamp::now())));
    if reason == plan::INVARIANT_VIOLATED {
        let mut report = next.report.unwrap_or_default();
        report.invariants_held = Some(false);
        next.report = Some(report);
    }
    write(ctx, drill, next, Guard::ResourceVersion).await?;
    ctx.event(drill, true, reason, message).await;
    Ok(Action::await_change())
}

async fn write(
    ctx: &Context,
    drill: &TestFailover,
    mut status: TestFailoverStatus,
    guard: Guard,
) -> Result<TestFailover, Error> {
    status.observed_generation = drill.meta().generation;
    status.conditions = crate::runtime::conditions::for_phase(
        drill.status.as_ref().map(|s| &s.conditions[..]),
        status.phase,
        status.message.as_deref(),
        status.observed_generation,
    );
    kit::apply_status(&ctx.kube, drill, MANAGER, &status, guard).await
}

/// A merge patch of the drill's metadata, conditional on the version read.
async fn patch_meta(ctx: &Context, drill: &TestFailover, mut meta: Value) -> Result<(), Error> {
    meta["resourceVersion"] = json!(drill.resource_version());
    let api: Api<TestFailover> = kit::api_of(&ctx.kube, drill);
    match api
        .patch(
            &drill.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": meta })),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            Err(Error::Stale(format!("TestFailover {}", drill.name_any())))
        }
        Err(e) => Err(e.into()),
    }
}

/// The control plane as `cluster` is reached: with its own secret when the drill's
/// namespace holds `simplyblock-cluster-<cluster>`, else with the operator's token.
async fn control_plane(
    ctx: &Context,
    drill: &TestFailover,
    cluster: &str,
) -> Result<simplyblock_controlplane::Client, Error> {
    let base = ctx.control_plane()?;
    let secrets: Api<Secret> = kit::api_of(&ctx.kube, drill);
    let secret = secrets
        .get_opt(&format!("simplyblock-cluster-{cluster}"))
        .await?
        .and_then(|s| s.data?.get("secret").cloned())
        .and_then(|b| String::from_utf8(b.0).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty());
    Ok(match secret {
        Some(secret) => base.with_token(secret),
        None => base,
    })
}

fn views_api(ctx: &Context, cluster: &str) -> Api<DynamicObject> {
    Api::namespaced_with(ctx.kube.clone(), cluster, &managed_cluster_view_resource())
}

fn works_api(ctx: &Context, cluster: &str) -> Api<DynamicObject> {
    Api::namespaced_with(ctx.kube.clone(), cluster, &manifest_work_resource())
}

async fn read_view(ctx: &Context, drill: &TestFailover, suffix: &str) -> Result<View, Error> {
    let view = views_api(ctx, plan::view_cluster(drill, suffix))
        .get_opt(&plan::name(drill, suffix))
        .await?;
    Ok(match view {
        None => View::Absent,
        Some(view) => {
            let status = &view.data["status"];
            let result = &status["result"];
            if result.as_object().is_some_and(|o| !o.is_empty()) {
                View::Seen(result.clone())
            } else {
                let failed = status["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == "Processing" && c["status"] == "False");
                match failed {
                    Some(c) => View::Failed(
                        c["message"]
                            .as_str()
                            .unwrap_or("no reason given")
                            .to_owned(),
                    ),
                    None => View::Pending,
                }
            }
        }
    })
}

/// Reads what `step` decides on.
async fn observe(
    drill: &TestFailover,
    step: FailoverStep,
    ctx: &Context,
) -> Result<Observation, Error> {
    let status = status_of(drill);
    Ok(match step {
        FailoverStep::ResolvingSource => {
            if drill.spec.scope == FailoverScope::Group {
                Observation::Group(observe_group(drill, ctx).await?)
            } else {
                let claim = read_view(ctx, drill, "src-pvc").await?;
                let volume = match claim {
                    View::Seen(_) => read_view(ctx, drill, "src-pv").await?,
                    _ => View::Absent,
                };
                Observation::Source { claim, volume }
            }
        }
        FailoverStep::ResolvingPoint if drill.spec.scope == FailoverScope::Group => {
            Observation::Generation(observe_generation(drill, ctx).await?)
        }
        FailoverStep::ResolvingPoint => {
            let Some((cluster, pool, volume)) = status
                .clones
                .first()
                .and_then(|c| c.source_handle.as_deref())
                .and_then(plan::source_pool)
            else {
                return Ok(Observation::Replicated(None));
            };
            let cp = control_plane(ctx, drill, &drill.spec.source_cluster).await?;
            if plan::in_place(drill) {
                let pool = match pool {
                    PoolRef::Id(id) => id,
                    PoolRef::Name(name) => match cp.find_pool(cluster, &name).await? {
                        Some(p) => p.id,
                        None => {
                            return Err(Error::Invalid(format!(
                                "the source's pool {name} is not a pool of control-plane cluster {cluster}"
                            )));
                        }
                    },
                };
                let snapshots = cp.list_snapshots(cluster, pool).await?;
                let snapshot = match &drill.spec.recovery_point {
                    Some(pinned) => snapshots.into_iter().find(|s| s.id.to_string() == *pinned),
                    None => {
                        let name = plan::name(drill, "snap");
                        snapshots.into_iter().find(|s| s.name == name)
                    }
                };
                Observation::InPlace { pool, snapshot }
            } else {
                Observation::Replicated(cp.latest_replicated_snapshot(cluster, volume).await?)
            }
        }
        FailoverStep::Cloning => {
            let cp = control_plane(ctx, drill, &drill.spec.bubble_cluster).await?;
            let mut made = Vec::with_capacity(status.clones.len());
            let mut point_present = Vec::with_capacity(status.clones.len());
            let mut volumes: BTreeMap<(Uuid, Uuid), Vec<simplyblock_controlplane::Volume>> =
                BTreeMap::new();
            let mut snapshots: BTreeMap<(Uuid, Uuid), Vec<Uuid>> = BTreeMap::new();
            for slot in &status.clones {
                let Some((cluster, pool, snapshot)) =
                    slot.snapshot_id.as_deref().and_then(plan::split_handle)
                else {
                    made.push(None);
                    point_present.push(false);
                    continue;
                };
                if let std::collections::btree_map::Entry::Vacant(e) =
                    volumes.entry((cluster, pool))
                {
                    e.insert(cp.list_volumes(cluster, pool).await?);
                }
                let name = plan::clone_name(drill, slot);
                let clone = volumes[&(cluster, pool)]
                    .iter()
                    .find(|v| v.name == name)
                    .cloned();
                // The point is only looked for while its clone is still to be made.
                let present = match clone {
                    Some(_) => true,
                    None => {
                        if let std::collections::btree_map::Entry::Vacant(e) =
                            snapshots.entry((cluster, pool))
                        {
                            let listed = cp.list_snapshots(cluster, pool).await?;
                            e.insert(listed.into_iter().map(|s| s.id).collect());
                        }
                        snapshots[&(cluster, pool)].contains(&snapshot)
                    }
                };
                made.push(clone);
                point_present.push(present);
            }
            Observation::Clones {
                made,
                point_present,
            }
        }
        FailoverStep::Placing => {
            let work = works_api(ctx, &drill.spec.bubble_cluster)
                .get_opt(&plan::name(drill, "bubble"))
                .await?;
            let source_volume = read_view(ctx, drill, "src-pv").await?;
            let bubble = match work {
                None => read_view(ctx, drill, plan::BUBBLE_VIEW).await?,
                Some(_) => View::Absent,
            };
            Observation::Placement {
                bound: work.map(|w| bound_claims(&w)),
                source_volume,
                bubble,
            }
        }
        FailoverStep::Releasing => Observation::Replicated(None),
    })
}

/// The source cluster's control-plane id: `spec.sourceCluster` itself when it is one,
/// else the id of the one StorageCluster of that name the operator serves.
async fn source_cluster_id(ctx: &Context, drill: &TestFailover) -> Result<Option<Uuid>, Error> {
    if let Ok(id) = drill.spec.source_cluster.parse::<Uuid>() {
        return Ok(Some(id));
    }
    let clusters = ctx
        .scope
        .api::<StorageCluster>(&ctx.kube)
        .list(&ListParams::default())
        .await?;
    let mut ids: Vec<Uuid> = clusters
        .iter()
        .filter(|c| c.name_any() == drill.spec.source_cluster)
        .filter_map(|c| c.status.as_ref()?.uuid.as_deref()?.parse().ok())
        .collect();
    ids.sort();
    ids.dedup();
    Ok(match ids.as_slice() {
        [one] => Some(*one),
        _ => None,
    })
}

/// The group, its open members' volumes, and the views of the first member's claim.
async fn observe_group(drill: &TestFailover, ctx: &Context) -> Result<GroupSource, Error> {
    let mut seen = GroupSource {
        cluster: source_cluster_id(ctx, drill).await?,
        group: None,
        members: Vec::new(),
        claim: View::Absent,
        volume: View::Absent,
    };
    let Some(cluster) = seen.cluster else {
        return Ok(seen);
    };
    let cp = control_plane(ctx, drill, &drill.spec.source_cluster).await?;
    seen.group = cp
        .find_consistency_group(cluster, &drill.spec.source_ref)
        .await?;
    let Some(group) = &seen.group else {
        return Ok(seen);
    };
    let mut members: Vec<Uuid> = cp
        .consistency_group_members(cluster, group.id)
        .await?
        .into_iter()
        .filter(|m| m.is_open())
        .map(|m| m.lvol_id)
        .collect();
    members.sort();
    let mut volumes = BTreeMap::new();
    for pool in cp.list_pools(cluster).await? {
        for volume in cp.list_volumes(cluster, pool.id).await? {
            volumes.insert(volume.id, volume);
        }
    }
    seen.members = members
        .into_iter()
        .map(|id| (id, volumes.remove(&id)))
        .collect();
    let first_claim = seen
        .members
        .first()
        .and_then(|(_, v)| v.as_ref())
        .is_some_and(|v| !v.pvc_name.is_empty());
    if first_claim && drill.spec.source_namespace.is_some() {
        seen.claim = read_view(ctx, drill, "src-pvc").await?;
        if matches!(seen.claim, View::Seen(_)) {
            seen.volume = read_view(ctx, drill, "src-pv").await?;
        }
    }
    Ok(seen)
}

/// The latest generation of the group's replication policy.
async fn observe_generation(drill: &TestFailover, ctx: &Context) -> Result<GenerationSeen, Error> {
    let Some(cluster) = source_cluster_id(ctx, drill).await? else {
        return Ok(GenerationSeen::Unavailable(format!(
            "cluster {} no longer names one StorageCluster with a control-plane id on this hub",
            drill.spec.source_cluster
        )));
    };
    let cp = control_plane(ctx, drill, &drill.spec.source_cluster).await?;
    let Some(group) = cp
        .find_consistency_group(cluster, &drill.spec.source_ref)
        .await?
    else {
        return Ok(GenerationSeen::Unavailable(format!(
            "consistency group {} is gone from control-plane cluster {cluster}",
            drill.spec.source_ref
        )));
    };
    let Some(policy) = group.policy_id else {
        return Ok(GenerationSeen::Unavailable(format!(
            "consistency group {} has no replication policy, so it has no replicated generation to drill; attach one and wait for a generation to land",
            group.name
        )));
    };
    match cp.latest_replicated_generation(cluster, policy).await {
        Ok(latest) => Ok(GenerationSeen::Latest(latest)),
        Err(e) if e.status() == Some(400) => Ok(GenerationSeen::Incomplete),
        Err(e) => Err(e.into()),
    }
}

/// How many claims the work's status feedback reports Bound.
fn bound_claims(work: &DynamicObject) -> usize {
    work.data["status"]["resourceStatus"]["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["resourceMeta"]["resource"] == "persistentvolumeclaims")
        .filter(|m| {
            m["statusFeedback"]["values"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| v["name"] == "phase" && v["fieldValue"]["string"] == "Bound")
        })
        .count()
}

fn labels(drill: &TestFailover) -> Value {
    json!({ TEST_ID_LABEL: drill.uid().unwrap_or_default() })
}

fn annotations(drill: &TestFailover) -> Value {
    json!({ DRILL_ANNOTATION: format!("{}/{}", drill.namespace().unwrap_or_default(), drill.name_any()) })
}

async fn execute(drill: &TestFailover, ctx: &Context, call: Call) -> Result<(), Error> {
    match call {
        Call::View {
            suffix,
            resource,
            name,
            namespace,
        } => {
            let mut scope = json!({"resource": resource, "name": name});
            if let Some(ns) = namespace {
                scope["namespace"] = json!(ns);
            }
            let view: DynamicObject = serde_json::from_value(json!({
                "apiVersion": managed_cluster_view_resource().api_version,
                "kind": "ManagedClusterView",
                "metadata": {
                    "name": plan::name(drill, suffix),
                    "namespace": plan::view_cluster(drill, suffix),
                    "labels": labels(drill),
                    "annotations": annotations(drill),
                },
                "spec": {"scope": scope},
            }))
            .map_err(|e| Error::Invalid(format!("internal: a view does not encode: {e}")))?;
            create(&views_api(ctx, plan::view_cluster(drill, suffix)), &view).await
        }
        Call::Snapshot {
            cluster,
            pool,
            volume,
            name,
        } => {
            let cp = control_plane(ctx, drill, &drill.spec.source_cluster).await?;
            match cp.create_snapshot(cluster, pool, volume, &name).await {
                Ok(_) => Ok(()),
                // Already taken: the next pass finds it by name.
                Err(e) if e.status() == Some(409) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
        Call::Clone {
            cluster,
            pool,
            snapshot,
            name,
            ..
        } => {
            let cp = control_plane(ctx, drill, &drill.spec.bubble_cluster).await?;
            let request = VolumeClone {
                name,
                snapshot_id: Some(snapshot),
                ..VolumeClone::default()
            };
            match cp
                .create_volume_from_snapshot(cluster, pool, &request)
                .await
            {
                Ok(_) => {
                    crate::runtime::crash::point(&clone_point());
                    Ok(())
                }
                Err(e) if e.status() == Some(409) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
        Call::Place => {
            let work = bubble_work(drill)?;
            create(&works_api(ctx, &drill.spec.bubble_cluster), &work).await
        }
    }
}

async fn create(api: &Api<DynamicObject>, object: &DynamicObject) -> Result<(), Error> {
    match api.create(&Default::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The ManifestWork that places the bubble: its Namespace, and per clone a static
/// PersistentVolume and the claim bound to it, each claim's phase fed back.
pub fn bubble_work(drill: &TestFailover) -> Result<DynamicObject, Error> {
    let status = status_of(drill);
    let test_id = drill.uid().unwrap_or_default();
    let bubble_ns = &drill.bubble_namespace();
    let mut manifests = vec![encode(&bubble::namespace(bubble_ns, &test_id))?];
    let mut configs = Vec::new();
    for (i, slot) in status.clones.iter().enumerate() {
        let Some(clone_handle) = slot.clone_id.as_deref() else {
            return Err(Error::Invalid(format!(
                "internal: clone {i} of the drill is not recorded"
            )));
        };
        let (pv_name, claim_name) = match drill.spec.scope {
            FailoverScope::Volume => (
                plan::name(drill, "pv"),
                slot.pvc_name
                    .clone()
                    .unwrap_or_else(|| drill.spec.source_ref.clone()),
            ),
            FailoverScope::Group => (
                bubble::member_object_name(
                    drill.metadata.namespace.as_deref().unwrap_or_default(),
                    &drill.name_any(),
                    &slot.source_ref,
                    "pv",
                ),
                slot.pvc_name
                    .clone()
                    .unwrap_or_else(|| slot.source_ref.clone()),
            ),
        };
        manifests.push(encode(&bubble::persistent_volume(
            &pv_name,
            clone_handle,
            slot,
            bubble_ns,
            &claim_name,
            &test_id,
        ))?);
        manifests.push(encode(&bubble::persistent_volume_claim(
            bubble_ns,
            &claim_name,
            &pv_name,
            slot,
            &test_id,
        ))?);
        configs.push(json!({
            "resourceIdentifier": {"group": "", "resource": "persistentvolumeclaims",
                                   "namespace": bubble_ns, "name": claim_name},
            "feedbackRules": [{"type": "JSONPaths",
                               "jsonPaths": [{"name": "phase", "path": ".status.phase"}]}],
        }));
    }
    serde_json::from_value(json!({
        "apiVersion": manifest_work_resource().api_version,
        "kind": "ManifestWork",
        "metadata": {
            "name": plan::name(drill, "bubble"),
            "namespace": drill.spec.bubble_cluster,
            "labels": labels(drill),
            "annotations": annotations(drill),
        },
        "spec": {
            "workload": {"manifests": manifests},
            "manifestConfigs": configs,
        },
    }))
    .map_err(|e| Error::Invalid(format!("internal: the bubble's work does not encode: {e}")))
}

/// The work's delete option that leaves the bubble namespace in place.
fn orphan_namespace(drill: &TestFailover) -> Value {
    json!({"spec": {"deleteOption": {
        "propagationPolicy": "SelectivelyOrphan",
        "selectivelyOrphans": {"orphaningRules": [
            {"group": "", "resource": "namespaces", "name": drill.bubble_namespace()},
        ]},
    }}})
}

/// A Kubernetes object as a manifest (with its apiVersion and kind).
fn encode<K: serde::Serialize>(object: &K) -> Result<Value, Error> {
    serde_json::to_value(object)
        .map_err(|e| Error::Invalid(format!("internal: a manifest does not encode: {e}")))
}

/// Releasing: removes what the drill made, in order, then the finalizer.
async fn teardown(drill: &TestFailover, ctx: &Context) -> Result<Action, Error> {
    let mut status = status_of(drill);
    // Every write below goes onto the version it was decided on; after the first, that is
    // the version this pass stored.
    let stored;
    let mut drill = drill;
    if status.phase != FailoverPhase::TearingDown {
        let graph = GRAPHS
            .graph(FailoverStage::Teardown)
            .map_err(|e| Error::Invalid(e.to_string()))?;
        status.phase = FailoverPhase::TearingDown;
        status.step = graph.start(Timestamp::now()).snapshot();
        status.message = Some("tearing down the bubble".into());
        stored = write(ctx, drill, status.clone(), Guard::ResourceVersion).await?;
        drill = &stored;
    }
    let outcome = release(drill, ctx, &status).await;
    if forced(drill) {
        let left = match &outcome {
            Ok(None) => None,
            Ok(Some(waiting)) => Some(waiting.clone()),
            Err((what, e)) => Some(format!("{what} failed: {e}")),
        };
        if let Some(left) = left {
            // The way out the user asked for when a cluster stays out of reach: the drill
            // goes, and the event names what may be left for them to remove.
            let clones: Vec<&str> = status
                .clones
                .iter()
                .filter_map(|c| c.clone_id.as_deref())
                .collect();
            ctx.event(
                drill,
                true,
                "ForcedRelease",
                format!(
                    "released on {FORCE_DELETE_ANNOTATION} without a finished teardown ({left}); check and remove by hand what may be left: the ManifestWork {} on cluster {}, the clones {clones:?}, the views of cluster {}",
                    plan::name(drill, "bubble"),
                    drill.spec.bubble_cluster,
                    drill.spec.source_cluster
                ),
            )
            .await;
            kit::remove_finalizer(&ctx.kube, drill, TEST_FAILOVER_FINALIZER).await?;
            return Ok(Action::await_change());
        }
    }
    match outcome {
        Ok(None) => {}
        Ok(Some(waiting)) => {
            if status.message.as_deref() != Some(waiting.as_str()) {
                status.message = Some(waiting);
                write(ctx, drill, status, Guard::ResourceVersion).await?;
            }
            return Ok(Action::requeue(WAIT));
        }
        Err((what, e)) => {
            let message = format!("teardown is holding: {what} failed: {e}; it is tried again");
            if status.message.as_deref() != Some(message.as_str()) {
                status.message = Some(message.clone());
                write(ctx, drill, status, Guard::ResourceVersion).await?;
                ctx.event(drill, true, "ReclaimPending", message).await;
            }
            return Ok(Action::requeue(requeue::RETRY));
        }
    }
    kit::remove_finalizer(&ctx.kube, drill, TEST_FAILOVER_FINALIZER).await?;
    Ok(Action::await_change())
}

/// The drill is marked to go whether or not its teardown can finish.
fn forced(drill: &TestFailover) -> bool {
    drill
        .annotations()
        .get(FORCE_DELETE_ANNOTATION)
        .is_some_and(|v| v == "true")
}

type Reclaim = Result<Option<String>, (String, Error)>;

/// One pass of teardown: `Ok(None)` once nothing is left, `Ok(Some(why))` while waiting
/// on the bubble cluster, `Err` when a removal failed.
async fn release(drill: &TestFailover, ctx: &Context, status: &TestFailoverStatus) -> Reclaim {
    let on = |what: &str| {
        let what = what.to_owned();
        move |e: Error| (what, e)
    };
    // The work goes first: its removal takes the bubble's claims and volumes with it, and
    // a clone is deleted only once nothing on the bubble cluster uses it.
    let works = works_api(ctx, &drill.spec.bubble_cluster);
    let work_name = plan::name(drill, "bubble");
    let work = works
        .get_opt(&work_name)
        .await
        .map_err(|e| on("reading the bubble's ManifestWork")(e.into()))?;
    if let Some(work) = work {
        if work.metadata.deletion_timestamp.is_none() {
            let bubble = read_view(ctx, drill, plan::BUBBLE_VIEW)
                .await
                .map_err(on("reading the bubble namespace's view"))?;
            if !matches!(&bubble, View::Seen(ns) if plan::made_by(drill, ns)) {
                // Not shown carrying the drill's label: the namespace stays, and only the
                // drill's own objects in it go.
                works
                    .patch(
                        &work_name,
                        &PatchParams::default(),
                        &Patch::Merge(orphan_namespace(drill)),
                    )
                    .await
                    .map_err(|e| on("keeping the bubble namespace")(e.into()))?;
            }
            delete_gone(works.delete(&work_name, &DeleteParams::default()).await)
                .map_err(on("deleting the bubble's ManifestWork"))?;
        }
        return Ok(Some(format!(
            "waiting for cluster {} to remove the bubble",
            drill.spec.bubble_cluster
        )));
    }
    if !status.clones.is_empty() {
        let cp = control_plane(ctx, drill, &drill.spec.bubble_cluster)
            .await
            .map_err(on("reaching the control plane"))?;
        for slot in &status.clones {
            // A clone made before its id was recorded is found by its name.
            let Some((cluster, pool, _)) = slot.snapshot_id.as_deref().and_then(plan::split_handle)
            else {
                continue;
            };
            let mut clones: Vec<Uuid> = slot
                .clone_id
                .as_deref()
                .and_then(plan::split_handle)
                .map(|(_, _, v)| v)
                .into_iter()
                .collect();
            let name = plan::clone_name(drill, slot);
            let listed = gone_is_empty(cp.list_volumes(cluster, pool).await)
                .map_err(|e| on(&format!("listing the volumes of pool {pool}"))(e.into()))?;
            clones.extend(listed.iter().filter(|v| v.name == name).map(|v| v.id));
            clones.sort();
            clones.dedup();
            for clone in clones {
                delete_gone_cp(cp.delete_volume(cluster, pool, clone).await).map_err(|e| {
                    on(&format!("deleting clone {clone} of {}", slot.source_ref))(e.into())
                })?;
            }
        }
        let source = control_plane(ctx, drill, &drill.spec.source_cluster)
            .await
            .map_err(on("reaching the control plane"))?;
        for slot in status.clones.iter().filter(|s| s.snapshot_taken) {
            if let Some((cluster, pool, snapshot)) =
                slot.snapshot_id.as_deref().and_then(plan::split_handle)
            {
                delete_gone_cp(source.delete_snapshot(cluster, pool, snapshot).await).map_err(
                    |e| on(&format!("deleting the drill's snapshot {snapshot}"))(e.into()),
                )?;
            }
        }
    }
    for suffix in VIEWS {
        delete_gone(
            views_api(ctx, plan::view_cluster(drill, suffix))
                .delete(&plan::name(drill, suffix), &DeleteParams::default())
                .await,
        )
        .map_err(on("deleting the drill's views"))?;
    }
    Ok(None)
}

fn delete_gone<T>(result: Result<T, kube::Error>) -> Result<(), Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn delete_gone_cp(
    result: simplyblock_controlplane::Result<()>,
) -> simplyblock_controlplane::Result<()> {
    match result {
        Err(e) if e.status() == Some(404) => Ok(()),
        other => other,
    }
}

fn gone_is_empty<T>(
    result: simplyblock_controlplane::Result<Vec<T>>,
) -> simplyblock_controlplane::Result<Vec<T>> {
    match result {
        Err(e) if e.status() == Some(404) => Ok(Vec::new()),
        other => other,
    }
}

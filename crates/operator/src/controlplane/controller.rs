//! The ControlPlane controller. One ControlPlane is served: `simplyblock` in the
//! operator's namespace; any other is told it is ignored.
//!
//! A local control plane is installed along `INSTALL_GRAPH` (ApplyingFoundationDB →
//! AwaitingFoundationDB → ApplyingDatastore → ApplyingAPI → AwaitingAPI), each pass
//! [`observe`]s what its step needs, [`plan::install`] decides, and the machine runtime's
//! entity mode performs the plan with [`Installation`] as the writer of the install status
//! and the caller that applies the step's objects (server-side, under one field manager,
//! owned by the ControlPlane) before the next step is recorded, or hands over to the
//! steady state. Once the management API answers, and for a managed control
//! plane from the start, every pass is the steady state: re-apply every object, probe
//! `/_meta/ready` and `/_meta/version`, compute `status.components` and the phase, publish
//! `status.endpoint` — and the client behind it to every other controller
//! ([`crate::runtime::link`]). Events come with changes of verdict only.
//!
//! The finalizer holds while any StorageCluster the operator serves exists
//! (`ClustersStillPresent`); the local control plane's objects then go with their owner.
//!
//! Metrics, prefix `simplyblock_controlplane_`:
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `ready_state` | gauge | `namespace` (1 while clients proceed: Available or Degraded) |
//! | `component_ready_count`, `component_desired_count` | gauge | `namespace, component, essential` |
//! | `probe_duration_seconds` | histogram | `namespace` |
//! | `probe_failures_total` | counter | `namespace, reason` (`credentials`, `no_client`, `unavailable`) |
//! | `install_step_duration_seconds` | histogram | `namespace, step` (a step left) |
//! | `version_info` | gauge | `namespace, version` (1 for the version reported) |

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use simplyblock_api::StorageCluster;
use simplyblock_api::control_plane::{
    Component, ControlPlane, ControlPlanePhase, ControlPlaneStatus, INSTALL_GRAPH, InstallStep,
    LocalSource,
};
use simplyblock_api::keys::{CONTROL_PLANE_FINALIZER, MANAGED_BY_CONTROL_PLANE, MANAGED_BY_LABEL};
use simplyblock_statemachine::{Machine, State, StepSnapshot};

use super::manifests::{self, Manifest, Tls};
use super::names::{
    DEPLOYMENTS, FDB_CLUSTER, OBJECT_STORE, OBJECT_STORE_CREDENTIALS, SINGLETON_NAME,
};
use super::plan::{
    self, Batch, FdbHealth, InstallCall, Observation, Probe, Reason, Replicas, reason,
};
use super::reach;
use crate::runtime::context::{Context, requeue};
use crate::runtime::crash;
use crate::runtime::kit::{self, Error, Guard};
use crate::runtime::link::{Published, Reach};
use crate::runtime::machine::{self, After, Entity, Move, Pass, Plan, Status};

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "controlplane";
/// The field manager of the ControlPlane's status and of every object it applies.
pub const MANAGER: &str = "controlplane-controller";
const METRIC_PREFIX: &str = "simplyblock_controlplane_";
/// How often a control plane that is not Available is probed.
const UNWELL_POLL: Duration = Duration::from_secs(10);

/// Runs the controller until the operator stops.
pub async fn run(ctx: Arc<Context>) {
    let managed = format!("{MANAGED_BY_LABEL}={MANAGED_BY_CONTROL_PLANE}");
    let own = ObjectRef::new(SINGLETON_NAME).within(&ctx.namespace);
    let own_for_cas = own.clone();
    let storage_node_objects = {
        use crate::workload::names;
        format!("{}={}", names::MANAGED_BY_LABEL, names::MANAGED_BY)
    };
    let controller = Controller::new(
        ctx.scope.api::<ControlPlane>(&ctx.kube),
        watcher::Config::default(),
    )
    .owns(
        ctx.scope.api::<Deployment>(&ctx.kube),
        watcher::Config::default().labels(&managed),
    )
    .owns(
        ctx.scope.api::<StatefulSet>(&ctx.kube),
        watcher::Config::default().labels(&managed),
    )
    // A new or replaced storage-node CA goes into what the management API trusts.
    .watches(
        ctx.scope.api::<Secret>(&ctx.kube),
        watcher::Config::default().labels(&storage_node_objects),
        move |secret| {
            secret
                .name_any()
                .starts_with(crate::workload::serving::CA_SECRET_PREFIX)
                .then(|| own_for_cas.clone())
        },
    )
    // A StorageCluster going away may be the last one a deletion waits for.
    .watches(
        ctx.scope.api::<StorageCluster>(&ctx.kube),
        watcher::Config::default(),
        move |cluster| {
            cluster
                .meta()
                .deletion_timestamp
                .is_some()
                .then(|| own.clone())
        },
    );
    kit::run(CONTROLLER, controller, reconcile, ctx).await
}

/// Why `cp` is not the one this operator, of `operator_namespace`, serves, if it is not.
/// Pure.
pub fn ignored(cp: &ControlPlane, operator_namespace: &str) -> Option<String> {
    if cp.name_any() != SINGLETON_NAME {
        return Some(format!(
            "ignored: only the ControlPlane named {SINGLETON_NAME} is served, one per Kubernetes cluster"
        ));
    }
    let ns = cp.namespace().unwrap_or_default();
    (ns != operator_namespace).then(|| {
        format!(
            "ignored: the operator serves the ControlPlane in its own namespace {operator_namespace}, one per Kubernetes cluster"
        )
    })
}

pub async fn reconcile(cp: Arc<ControlPlane>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ctx = &*ctx;
    if let Some(why) = ignored(&cp, &ctx.namespace) {
        return ignore(&cp, ctx, why).await;
    }
    let apply = |cp: Arc<ControlPlane>| async move { apply(&cp, ctx).await };
    let cleanup = |cp: Arc<ControlPlane>| async move { cleanup(&cp, ctx).await };
    kit::finalized(&ctx.kube, CONTROL_PLANE_FINALIZER, cp, apply, cleanup).await
}

/// The status fields of an ignored ControlPlane.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct IgnoredStatus {
    message: String,
    observed_generation: Option<i64>,
}

async fn ignore(cp: &ControlPlane, ctx: &Context, why: String) -> Result<Action, Error> {
    if cp.meta().deletion_timestamp.is_some() {
        kit::remove_finalizer(&ctx.kube, cp, CONTROL_PLANE_FINALIZER).await?;
        return Ok(Action::await_change());
    }
    let said = cp.status.as_ref().and_then(|s| s.message.as_deref());
    if said != Some(why.as_str()) {
        let status = IgnoredStatus {
            message: why.clone(),
            observed_generation: cp.metadata.generation,
        };
        kit::apply_status(&ctx.kube, cp, MANAGER, &status, Guard::ResourceVersion).await?;
        ctx.event(cp, true, reason::IGNORED, why).await;
    }
    Ok(Action::await_change())
}

async fn apply(cp: &ControlPlane, ctx: &Context) -> Result<Action, Error> {
    let status = cp.status.clone().unwrap_or_default();
    match &cp.spec.source.local {
        Some(local) if !status.step.is_empty() || status.phase == ControlPlanePhase::Installing => {
            install(cp, local, &status, ctx).await
        }
        Some(local) => steady(cp, Some(local), &status, ctx, None).await,
        None => steady(cp, None, &status, ctx, None).await,
    }
}

/// One pass of the install machine: restore the step, observe, plan, execute.
async fn install(
    cp: &ControlPlane,
    local: &LocalSource,
    status: &ControlPlaneStatus,
    ctx: &Context,
) -> Result<Action, Error> {
    let now = Timestamp::now();
    let machine = match INSTALL_GRAPH.restore(&status.step, now) {
        Ok(m) => m,
        Err(e) => {
            let mut next = status.clone();
            next.message = Some(format!(
                "the stored install step cannot be resumed: {e}; clear status.step to start the installation again"
            ));
            write(ctx, cp, &next, Guard::ResourceVersion).await?;
            return Ok(Action::await_change());
        }
    };
    let (obs, reached) = observe(cp, local, machine.state(), ctx).await?;
    let next = plan::install(machine.state(), Tls::of(local), &obs);
    let next = plan::overdue(&machine, now, next);
    let mut cp = cp.clone();
    if let Plan::Wait { message, .. } = &next {
        // Every held pass says where the installation waits, whether or not its status
        // already does: the link starts empty when the operator does.
        let said = Some(message.clone());
        publish(ctx, ControlPlanePhase::Installing, said, reached.clone());
        // Said already, over a record the status does not hold (a deadline this restore
        // armed, another endpoint): the record is restated, the message not said again.
        let record = installing(status, &machine, &obs.endpoint, message.clone());
        if !machine::says_news(status.message.as_deref(), message) && record != *status {
            cp = write(ctx, &cp, &record, Guard::ResourceVersion).await?;
        }
    }
    let installation = Installation {
        local,
        from: machine.clone(),
        endpoint: obs.endpoint,
        reached,
    };
    machine::execute(&installation, ctx, cp, machine, next.into(), now).await
}

/// The install status at `machine`'s step saying `message`: Installing, where the
/// management API is asked, the other fields as `stored`.
fn installing(
    stored: &ControlPlaneStatus,
    machine: &Machine<'_, InstallStep>,
    endpoint: &str,
    message: String,
) -> ControlPlaneStatus {
    ControlPlaneStatus {
        phase: ControlPlanePhase::Installing,
        step: machine.snapshot(),
        endpoint: Some(endpoint.to_owned()),
        message: Some(message),
        ..stored.clone()
    }
}

/// Reads what `step` needs, and only that. No writes.
async fn observe(
    cp: &ControlPlane,
    local: &LocalSource,
    step: InstallStep,
    ctx: &Context,
) -> Result<(Observation, Option<Reach>), Error> {
    let ns = cp.namespace().unwrap_or_default();
    let mut obs = Observation {
        endpoint: reach::endpoint(cp),
        namespace: ns.clone(),
        ..Observation::default()
    };
    let mut reached = None;
    match step {
        InstallStep::ApplyingFoundationDB => obs.fdb_served = fdb_served(ctx).await?,
        InstallStep::AwaitingFoundationDB => obs.fdb = read_fdb(ctx, &ns).await?,
        InstallStep::ApplyingDatastore => {}
        InstallStep::ApplyingAPI => {
            if Tls::of(local).needs_cert_manager() {
                obs.cert_manager_served = cert_manager_served(ctx).await?;
            }
        }
        InstallStep::AwaitingAPI => {
            obs.workloads = read_workloads(ctx, &ns).await?;
            let (probe, r) = probe(cp, ctx).await?;
            obs.probe = Some(probe);
            reached = r;
        }
    }
    Ok((obs, reached))
}

/// The install machine's writer and caller, for the machine runtime: one pass over the
/// ControlPlane, with what it read beside it.
struct Installation<'a> {
    local: &'a LocalSource,
    /// The machine as the pass restored it: the step a move leaves.
    from: Machine<'static, InstallStep>,
    /// Where the management API is asked, written with every install status.
    endpoint: String,
    /// The client built this pass, published with the status.
    reached: Option<Reach>,
}

impl Entity for Installation<'_> {
    type Object = ControlPlane;
    type Step = InstallStep;
    type Call = InstallCall;
    type Fields = ();

    /// Installing, whatever the stage: the machine plans no ending of its own (its
    /// hand-over writes the steady status). The fields it does not move are restated as
    /// stored. A move is published first, and its step's duration measured once written.
    async fn write(
        &self,
        ctx: &Context,
        cp: &ControlPlane,
        status: Status<'_, InstallStep, ()>,
    ) -> Result<Option<ControlPlane>, Error> {
        let left = self.from.state();
        let moved = status.machine.state() != left;
        if moved {
            // After the step's effect, before its record: the next pass does the step
            // again, which changes nothing.
            crash::point(&crash::control_plane_point(left.name()));
        }
        let stored = cp.status.clone().unwrap_or_default();
        let next = installing(&stored, status.machine, &self.endpoint, status.message);
        if moved {
            let said = next.message.clone();
            publish(
                ctx,
                ControlPlanePhase::Installing,
                said,
                self.reached.clone(),
            );
        }
        let written = kit::unless_stale(write(ctx, cp, &next, Guard::ResourceVersion).await)?;
        if moved && written.is_some() {
            step_left(ctx, cp, &self.from);
        }
        Ok(written)
    }

    async fn call(
        &self,
        pass: &mut Pass<'_, Self>,
        call: InstallCall,
        message: String,
    ) -> Result<After<Self>, Error> {
        match call {
            InstallCall::Apply { batch, to } => {
                apply_batch(pass.ctx, &pass.object, self.local, batch, true).await?;
                let advance = Plan::Advance {
                    to: Move::To(to),
                    message,
                    kind_status: None,
                };
                Ok(After::Plan(advance.into()))
            }
            InstallCall::HandOver => {
                let (cp, ctx, step) = (&pass.object, pass.ctx, pass.machine.state());
                crash::point(&crash::control_plane_point(step.name()));
                // Nothing was written this pass: the object is the one read.
                let status = cp.status.clone().unwrap_or_default();
                // Left once its record is gone: a write refused as stale leaves the step
                // where it was, for the next pass to leave.
                let action = steady(cp, Some(self.local), &status, ctx, Some(step)).await?;
                step_left(ctx, cp, &pass.machine);
                Ok(After::Done(action))
            }
        }
    }

    fn message(cp: &ControlPlane) -> Option<&str> {
        cp.status.as_ref()?.message.as_deref()
    }
}

/// The steady state: every object re-applied (a local control plane), the control plane
/// probed, the components and the phase computed and written, the link published.
/// `installed`: the install's last step, which this pass ends.
async fn steady(
    cp: &ControlPlane,
    local: Option<&LocalSource>,
    status: &ControlPlaneStatus,
    ctx: &Context,
    installed: Option<InstallStep>,
) -> Result<Action, Error> {
    let ns = cp.namespace().unwrap_or_default();
    let endpoint = reach::endpoint(cp);
    let mut obs = Observation {
        endpoint: endpoint.clone(),
        namespace: ns.clone(),
        ..Observation::default()
    };
    if let Some(local) = local {
        obs.fdb_served = fdb_served(ctx).await?;
        obs.cert_manager_served =
            Tls::of(local).needs_cert_manager() && cert_manager_served(ctx).await?;
        // Each object once per pass; an API that is not served leaves its objects out,
        // and the components say what that costs.
        if obs.fdb_served {
            apply_batch(ctx, cp, local, Batch::FoundationDb, true).await?;
            obs.fdb = read_fdb(ctx, &ns).await?;
        }
        apply_batch(ctx, cp, local, Batch::Datastore, true).await?;
        apply_batch(ctx, cp, local, Batch::Api, obs.cert_manager_served).await?;
        obs.workloads = read_workloads(ctx, &ns).await?;
    }
    let (probe, reached) = probe(cp, ctx).await?;
    let components = local.map(|l| plan::components(l, &obs)).unwrap_or_default();
    let verdict = plan::verdict(
        local.is_none(),
        &components,
        &probe,
        &endpoint,
        status.phase,
    );
    let now = Timestamp::now();
    let next = ControlPlaneStatus {
        phase: verdict.phase,
        step: StepSnapshot::default(),
        endpoint: Some(endpoint.clone()),
        version: probe.version().map(str::to_owned),
        last_checked: Some(Time(now)),
        components: components.clone(),
        active_ops_ref: status.active_ops_ref.clone(),
        message: verdict.message.clone(),
        observed_generation: cp.metadata.generation,
        conditions: conditions_of(cp, verdict.phase, verdict.message.as_deref()),
    };
    // Published first: whoever reads the status finds the link already saying the same.
    publish(ctx, verdict.phase, verdict.message.clone(), reached);
    if installed.is_some() || plan::worth_writing(status, &next, now, requeue::RESYNC * 2 / 3) {
        write(ctx, cp, &next, Guard::ResourceVersion).await?;
    }
    let before = match installed {
        Some(_) => None,
        None => Reason::of(status),
    };
    if let Some(note) = plan::transition(before, &verdict, &endpoint) {
        ctx.event(cp, note.warning, note.reason, note.message).await;
    }
    forget(&ctx.metrics, &ns, status, Some(&next));
    record(ctx, &ns, &next, &components, &probe);
    Ok(Action::requeue(match verdict.phase {
        ControlPlanePhase::Available => requeue::RESYNC,
        _ => UNWELL_POLL,
    }))
}

/// Deleted: held while StorageClusters remain; then the link is withdrawn (the local
/// control plane's objects go with their owner).
async fn cleanup(cp: &ControlPlane, ctx: &Context) -> Result<Action, Error> {
    let clusters: Vec<String> = ctx
        .scope
        .api::<StorageCluster>(&ctx.kube)
        .list(&Default::default())
        .await?
        .items
        .iter()
        .map(|c| format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()))
        .collect();
    if let Some(message) = plan::deletion(&clusters) {
        let status = cp.status.clone().unwrap_or_default();
        if status.message.as_deref() != Some(message.as_str()) {
            let mut next = status;
            next.message = Some(message.clone());
            write(ctx, cp, &next, Guard::ResourceVersion).await?;
            ctx.event(cp, true, reason::CLUSTERS, message.clone()).await;
        }
        return Err(Error::Held(message));
    }
    ctx.link.publish(None);
    let ns = cp.namespace().unwrap_or_default();
    forget(
        &ctx.metrics,
        &ns,
        &cp.status.clone().unwrap_or_default(),
        None,
    );
    Ok(Action::await_change())
}

fn publish(ctx: &Context, phase: ControlPlanePhase, message: Option<String>, reach: Option<Reach>) {
    ctx.link.publish(Some(Published {
        phase,
        message,
        reach,
    }));
}

/// Builds the client and asks; `None` reach when no client could be built.
async fn probe(cp: &ControlPlane, ctx: &Context) -> Result<(Probe, Option<Reach>), Error> {
    let ns = cp.namespace().unwrap_or_default();
    let began = Instant::now();
    let (probe, reached) = match reach::build(ctx, cp).await? {
        Err(no_client) => (Probe::from(no_client), None),
        Ok(r) => (reach::probe(&r).await, Some(r)),
    };
    ctx.metrics.observe(
        &format!("{METRIC_PREFIX}probe_duration_seconds"),
        vec![("namespace", ns.clone())],
        began.elapsed().as_secs_f64(),
    );
    let failure = match &probe {
        Probe::NoClient {
            credentials: true, ..
        } => Some("credentials"),
        Probe::NoClient { .. } => Some("no_client"),
        Probe::Asked { ready: Err(_), .. } => Some("unavailable"),
        Probe::Asked { ready: Ok(()), .. } => None,
    };
    if let Some(reason) = failure {
        ctx.metrics.count(
            &format!("{METRIC_PREFIX}probe_failures_total"),
            vec![("namespace", ns), ("reason", reason.to_owned())],
        );
    }
    Ok((probe, reached))
}

/// Removes the series of `before` that `after` does not have (a component gone, a version
/// replaced); all of them when the control plane is gone (`after` is `None`).
fn forget(
    m: &crate::runtime::metrics::Metrics,
    ns: &str,
    before: &ControlPlaneStatus,
    after: Option<&ControlPlaneStatus>,
) {
    let name = |item: &str| format!("{METRIC_PREFIX}{item}");
    if after.is_none() {
        m.forget(&name("ready_state"), &vec![("namespace", ns.to_owned())]);
    }
    for c in &before.components {
        let kept = after.is_some_and(|a| {
            a.components
                .iter()
                .any(|k| k.name == c.name && k.essential == c.essential)
        });
        if !kept {
            let labels = vec![
                ("namespace", ns.to_owned()),
                ("component", c.name.clone()),
                ("essential", c.essential.to_string()),
            ];
            m.forget(&name("component_ready_count"), &labels);
            m.forget(&name("component_desired_count"), &labels);
        }
    }
    if let Some(version) = &before.version
        && after.and_then(|a| a.version.as_ref()) != Some(version)
    {
        let labels = vec![("namespace", ns.to_owned()), ("version", version.clone())];
        m.forget(&name("version_info"), &labels);
    }
}

fn record(
    ctx: &Context,
    ns: &str,
    status: &ControlPlaneStatus,
    components: &[Component],
    probe: &Probe,
) {
    let m = &ctx.metrics;
    let name = |item: &str| format!("{METRIC_PREFIX}{item}");
    let serving = if status.phase.serves() { 1.0 } else { 0.0 };
    m.set(
        &name("ready_state"),
        vec![("namespace", ns.to_owned())],
        serving,
    );
    for c in components {
        let labels = || {
            vec![
                ("namespace", ns.to_owned()),
                ("component", c.name.clone()),
                ("essential", c.essential.to_string()),
            ]
        };
        m.set(&name("component_ready_count"), labels(), f64::from(c.ready));
        m.set(
            &name("component_desired_count"),
            labels(),
            f64::from(c.desired),
        );
    }
    if let Some(version) = probe.version() {
        m.set(
            &name("version_info"),
            vec![
                ("namespace", ns.to_owned()),
                ("version", version.to_owned()),
            ],
            1.0,
        );
    }
}

/// The install step `machine` is at was left: how long it took.
fn step_left(ctx: &Context, cp: &ControlPlane, machine: &Machine<'_, InstallStep>) {
    if let Some(entered) = crate::runtime::ops::step_entered(machine) {
        ctx.metrics.observe(
            &format!("{METRIC_PREFIX}install_step_duration_seconds"),
            vec![
                ("namespace", cp.namespace().unwrap_or_default()),
                ("step", machine.state().name().to_owned()),
            ],
            Timestamp::now()
                .duration_since(entered)
                .as_secs_f64()
                .max(0.0),
        );
    }
}

/// The fields of ControlPlane status this controller owns (all but the lock).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Written {
    phase: ControlPlanePhase,
    #[serde(skip_serializing_if = "StepSnapshot::is_empty")]
    step: StepSnapshot,
    #[serde(skip_serializing_if = "Option::is_none")]
    endpoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_checked: Option<Time>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    components: Vec<Component>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}

/// The conditions for `phase`, from those stored on `cp`.
fn conditions_of(
    cp: &ControlPlane,
    phase: ControlPlanePhase,
    message: Option<&str>,
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    crate::runtime::conditions::for_phase(
        cp.status.as_ref().map(|s| &s.conditions[..]),
        phase,
        message,
        cp.metadata.generation,
    )
}

/// Writes `next` and returns the ControlPlane as stored.
async fn write(
    ctx: &Context,
    cp: &ControlPlane,
    next: &ControlPlaneStatus,
    guard: Guard,
) -> Result<ControlPlane, Error> {
    let written = Written {
        phase: next.phase,
        step: next.step.clone(),
        endpoint: next.endpoint.clone(),
        version: next.version.clone(),
        last_checked: next.last_checked.clone(),
        components: next.components.clone(),
        message: next.message.clone(),
        observed_generation: cp.metadata.generation,
        conditions: conditions_of(cp, next.phase, next.message.as_deref()),
    };
    kit::apply_status(&ctx.kube, cp, MANAGER, &written, guard).await
}

/// Whether the API server serves `resource` of `group_version`.
async fn served(ctx: &Context, group_version: &str, resource: &str) -> Result<bool, Error> {
    match ctx.kube.list_api_group_resources(group_version).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == resource)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

async fn fdb_served(ctx: &Context) -> Result<bool, Error> {
    let r = manifests::foundationdb_cluster_resource();
    served(ctx, &r.api_version, &r.plural).await
}

async fn cert_manager_served(ctx: &Context) -> Result<bool, Error> {
    let r = manifests::certificate_resource();
    served(ctx, &r.api_version, &r.plural).await
}

/// The FoundationDBCluster's health, when it is there and reported on.
async fn read_fdb(ctx: &Context, ns: &str) -> Result<Option<FdbHealth>, Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        ctx.kube.clone(),
        ns,
        &manifests::foundationdb_cluster_resource(),
    );
    let found = match api.get_opt(FDB_CLUSTER).await {
        Ok(found) => found,
        // The CRD went away: nothing to read.
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => return Err(e.into()),
    };
    let Some(status) = found.and_then(|f| f.data.get("status").cloned()) else {
        return Ok(None);
    };
    let health = &status["health"];
    if health.is_null() {
        return Ok(None);
    }
    let ready_storage = status["processGroups"].as_array().map(|groups| {
        groups
            .iter()
            .filter(|g| g["processClass"] == "storage")
            .filter(|g| {
                g["processGroupConditions"]
                    .as_array()
                    .is_none_or(|c| c.is_empty())
            })
            .count() as i32
    });
    Ok(Some(FdbHealth {
        available: health["available"].as_bool().unwrap_or(false),
        healthy: health["healthy"].as_bool().unwrap_or(false),
        ready_storage,
    }))
}

/// The control plane's Deployments and the object store's StatefulSet, by name.
async fn read_workloads(ctx: &Context, ns: &str) -> Result<BTreeMap<String, Replicas>, Error> {
    let mut out = BTreeMap::new();
    let deployments = Api::<Deployment>::namespaced(ctx.kube.clone(), ns);
    for name in DEPLOYMENTS {
        if let Some(d) = deployments.get_opt(name).await? {
            out.insert(
                name.to_owned(),
                Replicas {
                    desired: d.spec.replicas.unwrap_or(1),
                    ready: d.status.and_then(|s| s.ready_replicas).unwrap_or(0),
                },
            );
        }
    }
    if let Some(s) = Api::<StatefulSet>::namespaced(ctx.kube.clone(), ns)
        .get_opt(OBJECT_STORE)
        .await?
    {
        out.insert(
            OBJECT_STORE.to_owned(),
            Replicas {
                desired: s.spec.replicas.unwrap_or(1),
                ready: s.status.and_then(|s| s.ready_replicas).unwrap_or(0),
            },
        );
    }
    Ok(out)
}

/// Applies the objects of `batch`; `cert_manager`: whether cert-manager's objects are
/// among them (its API is served).
async fn apply_batch(
    ctx: &Context,
    cp: &ControlPlane,
    local: &LocalSource,
    batch: Batch,
    cert_manager: bool,
) -> Result<(), Error> {
    let objects = match batch {
        Batch::FoundationDb => {
            let mut objects = vec![manifests::foundation_db(cp, local)];
            objects.extend(manifests::fdb_exporter(cp, local));
            objects
        }
        Batch::Datastore => {
            object_store_credentials(ctx, cp).await?;
            manifests::datastore(cp, local)
        }
        Batch::Api => {
            let mut objects: Vec<Manifest> = manifests::api(cp, local)
                .into_iter()
                .chain(manifests::services(cp, local))
                .filter(|m| cert_manager || m.resource.group != "cert-manager.io")
                .collect();
            if let Some(bundle) = trust_of(ctx, cp, local).await? {
                objects.push(manifests::trust(cp, &bundle));
            }
            objects
        }
    };
    for object in &objects {
        apply_one(ctx, object).await?;
    }
    Ok(())
}

/// What the management API trusts, once its own CA is there to head it; `None` without
/// TLS or before.
async fn trust_of(
    ctx: &Context,
    cp: &ControlPlane,
    local: &LocalSource,
) -> Result<Option<String>, Error> {
    let tls = Tls::of(local);
    if !tls.serve {
        return Ok(None);
    }
    let ns = cp.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.kube.clone(), &ns);
    let Ok(api_ca) = reach::api_ca(ctx, &secrets, &ns, tls.provider).await? else {
        return Ok(None);
    };
    let api_ca = String::from_utf8_lossy(&api_ca);
    Ok(Some(manifests::trust_bundle(
        &api_ca,
        &storage_node_cas(ctx).await?,
    )))
}

/// The CAs of every storage-node cluster the operator serves (a replaced one while it is
/// still trusted), ordered by namespace and cluster.
async fn storage_node_cas(ctx: &Context) -> Result<Vec<String>, Error> {
    use crate::workload::{names, serving};
    let selector = format!("{}={}", names::MANAGED_BY_LABEL, names::MANAGED_BY);
    let secrets = ctx
        .scope
        .api::<Secret>(&ctx.kube)
        .list(&kube::api::ListParams::default().labels(&selector))
        .await?;
    let now = Timestamp::now();
    let mut found: Vec<(String, String, String)> = secrets
        .items
        .iter()
        .filter(|s| s.name_any().starts_with(serving::CA_SECRET_PREFIX))
        .filter_map(|s| {
            let stored = crate::runtime::ca::Stored::from_secret(s).ok()?;
            Some((
                s.namespace().unwrap_or_default(),
                s.name_any(),
                stored.bundle(now),
            ))
        })
        .collect();
    found.sort();
    Ok(found.into_iter().map(|(_, _, bundle)| bundle).collect())
}

/// Server-side apply under [`MANAGER`], taking over fields another manager holds.
async fn apply_one(ctx: &Context, m: &Manifest) -> Result<(), Error> {
    let ns = m.object.namespace().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.kube.clone(), &ns, &m.resource);
    api.patch(
        &m.object.name_any(),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&m.object),
    )
    .await
    .map_err(|e| {
        tracing::warn!(object = %m.describe(), error = %e, "applying failed");
        Error::from(e)
    })?;
    Ok(())
}

/// Makes the object store's credentials once: random, never applied again (that would
/// change them under the running store).
async fn object_store_credentials(ctx: &Context, cp: &ControlPlane) -> Result<(), Error> {
    let ns = cp.namespace().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(ctx.kube.clone(), &ns);
    if api
        .get_metadata_opt(OBJECT_STORE_CREDENTIALS)
        .await?
        .is_some()
    {
        return Ok(());
    }
    let secret = manifests::object_store_credentials(cp, "simplyblock", &random_text()?);
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// 32 random hexadecimal digits.
fn random_text() -> Result<String, Error> {
    let mut bytes = [0u8; 16];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| Error::Certificate("the system's random source failed".into()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controlplane::names::API;

    fn control_plane(name: &str, namespace: &str) -> ControlPlane {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "ControlPlane",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"source": {"managed": {"endpoint": "https://cp.example"}}},
        }))
        .expect("control plane")
    }

    #[test]
    fn only_simplyblock_in_the_operators_namespace_is_served() {
        assert_eq!(ignored(&control_plane("simplyblock", "sb"), "sb"), None);
        let elsewhere = ignored(&control_plane("simplyblock", "other"), "sb").expect("ignored");
        assert!(elsewhere.contains("its own namespace sb"), "{elsewhere}");
        let named = ignored(&control_plane("second", "sb"), "sb").expect("ignored");
        assert!(
            named.contains("only the ControlPlane named simplyblock"),
            "{named}"
        );
    }

    #[test]
    fn an_install_record_moves_the_step_and_keeps_what_the_steady_state_wrote() {
        let now = Timestamp::from_second(1_000_000).expect("ts");
        let stored = ControlPlaneStatus {
            phase: ControlPlanePhase::Unavailable,
            version: Some("1.0".into()),
            last_checked: Some(Time(now)),
            components: vec![Component {
                name: API.into(),
                desired: 1,
                ready: 0,
                essential: true,
            }],
            message: Some("before".into()),
            observed_generation: Some(3),
            ..ControlPlaneStatus::default()
        };
        let machine = INSTALL_GRAPH.start(now);
        let record = installing(&stored, &machine, "http://cp:5000", "held".into());
        assert_eq!(
            record,
            ControlPlaneStatus {
                phase: ControlPlanePhase::Installing,
                step: machine.snapshot(),
                endpoint: Some("http://cp:5000".into()),
                message: Some("held".into()),
                ..stored
            }
        );
    }

    #[test]
    fn a_replaced_version_or_component_and_a_deleted_control_plane_leave_no_series() {
        let m = crate::runtime::metrics::Metrics::new();
        let name = |item: &str| format!("{METRIC_PREFIX}{item}");
        let component = |n: &str| Component {
            name: n.into(),
            desired: 1,
            ready: 1,
            essential: true,
        };
        let status = |version: &str, components: Vec<Component>| ControlPlaneStatus {
            version: Some(version.into()),
            components,
            ..ControlPlaneStatus::default()
        };
        let write = |s: &ControlPlaneStatus| {
            m.set(&name("ready_state"), vec![("namespace", "sb".into())], 1.0);
            let version = s.version.clone().unwrap_or_default();
            let v = vec![("namespace", "sb".into()), ("version", version)];
            m.set(&name("version_info"), v, 1.0);
            for c in &s.components {
                let l = vec![
                    ("namespace", "sb".to_owned()),
                    ("component", c.name.clone()),
                    ("essential", c.essential.to_string()),
                ];
                m.set(&name("component_ready_count"), l, 1.0);
            }
        };
        let version = |v| {
            m.sample(
                &name("version_info"),
                &[("namespace", "sb"), ("version", v)],
            )
        };
        let ready = |c| {
            let l = [("namespace", "sb"), ("component", c), ("essential", "true")];
            m.sample(&name("component_ready_count"), &l)
        };
        let before = status("1.0", vec![component("api"), component("old")]);
        write(&before);
        let after = status("1.1", vec![component("api")]);
        forget(&m, "sb", &before, Some(&after));
        write(&after);
        assert_eq!((version("1.0"), version("1.1")), (None, Some(1.0)));
        assert_eq!((ready("old"), ready("api")), (None, Some(1.0)));
        forget(&m, "sb", &after, None);
        assert_eq!((version("1.1"), ready("api")), (None, None));
        assert_eq!(m.sample(&name("ready_state"), &[("namespace", "sb")]), None);
    }
}

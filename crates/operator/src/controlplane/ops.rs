//! The ControlPlaneOps controller: each action as its step graph on the shared Ops runtime
//! ([`crate::runtime::ops`]: the phase machine, the lock `ControlPlane.status.activeOpsRef`,
//! queueing, abort, deadlines, the standard events). This file is what the steps observe
//! ([`observe`]), decide ([`plan`], pure) and call ([`execute`]).
//!
//! | action | steps | done when |
//! |---|---|---|
//! | Restart | Draining → Restarting → Awaiting | the named workloads rolled out (and the API answers) |
//! | Upgrade | Preflight → Draining → Applying → Awaiting → Verifying | the API runs the image and reports its tag as version |
//! | Backup | Requesting → Awaiting | the FoundationDBBackup reports a snapshot taken since the operation started |
//!
//! Draining waits while any StorageClusterOps, StorageNodeOps or StoragePoolOps the
//! operator serves is Running (`OperationsInFlight`) and never cancels them; a Restart of non-essential
//! components only skips it. Restarting stamps the pod template of each named workload
//! with the operation's start ([`RESTARTED_AT_ANNOTATION`]), so a stamp already there is
//! the restart already asked. The FoundationDB cluster is restarted by the FoundationDB
//! operator, not here.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::core::NamespaceResourceScope;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use simplyblock_api::StorageClusterOps;
use simplyblock_api::StoragePoolOps;
use simplyblock_api::common::{OpsKind, OpsPhase};
use simplyblock_api::control_plane::{ControlPlane, ControlPlanePhase};
use simplyblock_api::control_plane_ops::{
    ControlPlaneAction, ControlPlaneOps, ControlPlaneOpsStep,
};
use simplyblock_api::keys::{
    BACKUP_REQUESTED_BY_ANNOTATION, CONTROL_PLANE_OPS_FINALIZER, RESTARTED_AT_ANNOTATION,
};
use simplyblock_statemachine::Machine;

use super::names::{API, DEPLOYMENTS, FDB_CLUSTER, OBJECT_STORE, essential};
use super::plan::Probe;
use super::reach;
use crate::runtime::context::Context;
use crate::runtime::ops::{self, Move, Note, Noted, OpsResource, Plan, Steps};

const MANAGER: &str = "controlplaneops-controller";
/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "controlplaneops";
const METRIC_PREFIX: &str = "simplyblock_controlplane_";
/// How often a step that waits on the cluster's workloads looks again.
const POLL: Duration = Duration::from_secs(2);
/// The FoundationDBBackup a Backup without `backupName` creates or triggers.
pub const DEFAULT_BACKUP_NAME: &str = "simplyblock";

/// Events on the operation, beside the standard ones.
pub mod reason {
    pub const IN_FLIGHT: &str = "OperationsInFlight";
    pub const BACKUP_REQUESTED: &str = "BackupRequested";
    pub const BACKUP_TRIGGERED: &str = "BackupTriggered";
    pub const VERSION_MISMATCH: &str = "VersionMismatch";
}

/// ControlPlaneOps' own status fields, beside the common ones.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fields {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup_ref: Option<String>,
}

impl OpsResource for ControlPlaneOps {
    type Target = ControlPlane;
    const FINALIZER: &'static str = CONTROL_PLANE_OPS_FINALIZER;
    const MANAGER: &'static str = MANAGER;
    const METRIC_PREFIX: &'static str = METRIC_PREFIX;
    const TARGET_LABEL: &'static str = "namespace";

    fn target_name(&self) -> &str {
        &self.spec.control_plane_ref
    }
    type Fields = Fields;
    fn kind_status(&self) -> Fields {
        Fields {
            backup_ref: self.status.as_ref().and_then(|s| s.backup_ref.clone()),
        }
    }
    fn lock_holder(target: &ControlPlane) -> Option<&str> {
        target.status.as_ref()?.active_ops_ref.as_deref()
    }
    /// One control plane per namespace: the namespace names it in the metrics.
    fn metric_target(&self) -> String {
        self.namespace().unwrap_or_default()
    }
}

/// Which kind a control-plane workload is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
}

/// A workload's rollout, as the steps read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rollout {
    pub desired: i32,
    pub updated: i32,
    pub ready: i32,
    /// Its controller has seen its current spec.
    pub observed: bool,
    /// The pod template's [`RESTARTED_AT_ANNOTATION`].
    pub restarted_at: Option<String>,
    /// The first container's image.
    pub image: Option<String>,
}

impl Rollout {
    /// The rollout of a workload whose spec asks for `desired` replicas (unset: 1) of
    /// `template`, whose status counts `(updated, ready)` replicas (unset: 0) and whose
    /// controller has `observed` its current spec.
    fn of(
        desired: Option<i32>,
        template: &PodTemplateSpec,
        (updated, ready): (Option<i32>, Option<i32>),
        observed: bool,
    ) -> Rollout {
        Rollout {
            desired: desired.unwrap_or(1),
            updated: updated.unwrap_or(0),
            ready: ready.unwrap_or(0),
            observed,
            restarted_at: template
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.as_ref())
                .and_then(|a| a.get(RESTARTED_AT_ANNOTATION).cloned()),
            image: template
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone()),
        }
    }

    /// Every replica runs the current template and is ready.
    pub fn done(&self) -> bool {
        self.observed && self.updated >= self.desired && self.ready >= self.desired
    }

    fn describe(&self) -> String {
        format!(
            "{} of {} updated, {} ready",
            self.updated, self.desired, self.ready
        )
    }
}

/// What a FoundationDBBackup says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackupView {
    /// The operation that last created or triggered it.
    pub requested_by: Option<String>,
    /// The last snapshot its agents report, in seconds since the epoch.
    pub snapshot_time: Option<i64>,
}

/// What the steps read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// Operations on storage that run now (`Kind namespace/name`): Draining waits for them.
    pub in_flight: Vec<String>,
    /// The control-plane workloads by component name; absent: not there.
    pub workloads: BTreeMap<String, Rollout>,
    /// The control plane's answers.
    pub probe: Option<Probe>,
    /// The FoundationDBBackup of a Backup; `None`: not there.
    pub backup: Option<BackupView>,
}

/// The one side effect a step may issue.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    /// Stamp the pod templates of `workloads` with `stamp`.
    Restart {
        workloads: Vec<(WorkloadKind, String)>,
        stamp: String,
    },
    /// Write `spec.source.local.image`.
    SetImage(String),
    /// Apply the FoundationDBBackup `name` as `object` (a create, or a trigger of one that
    /// exists).
    RequestBackup { name: String, object: Value },
}

/// The component a Restart names, as the workload that runs it.
pub fn workload_of(component: &str) -> Result<(WorkloadKind, &'static str), String> {
    match component {
        OBJECT_STORE => Ok((WorkloadKind::StatefulSet, OBJECT_STORE)),
        FDB_CLUSTER => Err(format!(
            "{FDB_CLUSTER} is restarted by the FoundationDB operator (kubectl fdb restart), not by a ControlPlaneOps"
        )),
        other => match DEPLOYMENTS.iter().find(|d| **d == other) {
            Some(deployment) => Ok((WorkloadKind::Deployment, *deployment)),
            None => Err(format!(
                "spec.restart.components names {other}, which is not a component of the control plane; the components are {}, {OBJECT_STORE} and {FDB_CLUSTER}",
                DEPLOYMENTS.join(", ")
            )),
        },
    }
}

/// The workloads a Restart replaces: those named, or all of them.
pub fn restarted(op: &ControlPlaneOps) -> Result<Vec<(WorkloadKind, &'static str)>, String> {
    let named = op
        .spec
        .restart
        .as_ref()
        .map(|r| r.components.clone())
        .unwrap_or_default();
    if named.is_empty() {
        return Ok(DEPLOYMENTS
            .iter()
            .map(|d| (WorkloadKind::Deployment, *d))
            .chain([(WorkloadKind::StatefulSet, OBJECT_STORE)])
            .collect());
    }
    named.iter().map(|c| workload_of(c)).collect()
}

/// Whether a Restart drains first: it restarts the whole control plane, or an essential
/// component of it.
pub fn drains(op: &ControlPlaneOps) -> bool {
    let named = op
        .spec
        .restart
        .as_ref()
        .map(|r| r.components.clone())
        .unwrap_or_default();
    named.is_empty() || named.iter().any(|c| essential(c))
}

/// The tag of `image` (`<registry>/<name>:<tag>[@sha256:…]`).
pub fn image_tag(image: &str) -> Option<&str> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last.split_once(':').map(|(_, tag)| tag)
}

/// Whether the version the control plane reports is the tag it runs (a leading `v` on
/// either side is not a difference).
pub fn same_version(tag: &str, reported: &str) -> bool {
    tag.trim_start_matches('v') == reported.trim_start_matches('v')
}

/// A FoundationDB blob store URL, as the FoundationDBBackup's `blobStoreConfiguration`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlobStore {
    /// `[<key>@]<host>[:<port>]`.
    pub account_name: String,
    pub bucket: Option<String>,
    /// The resource in the URL's path.
    pub backup_name: Option<String>,
    /// The other query parameters, `key=value`.
    pub url_parameters: Vec<String>,
}

/// Reads `blobstore://[<key>[:<secret>]@]<host>[:<port>]/[<name>][?bucket=<bucket>&…]`; a
/// secret in the URL is refused (it would be stored in the object): the backup agents
/// read it from their credentials file.
pub fn blob_store(url: &str) -> Result<BlobStore, String> {
    let usage = "spec.backup.blobStore must be a FoundationDB blob store URL: blobstore://<key>@<host>[:<port>]/<name>?bucket=<bucket>";
    let parsed = simplyblock_controlplane::Url::parse(url).map_err(|e| format!("{usage} ({e})"))?;
    if parsed.scheme() != "blobstore" {
        return Err(format!("{usage}; {url} is not"));
    }
    if parsed.password().is_some() {
        return Err(format!(
            "{usage}, without the secret: it would be stored in the FoundationDBBackup for all to read; the backup agents take it from their credentials file"
        ));
    }
    let host = parsed
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| format!("{usage}; {url} names no host"))?;
    let mut account_name = match parsed.username() {
        "" => host.to_owned(),
        key => format!("{key}@{host}"),
    };
    if let Some(port) = parsed.port() {
        account_name.push_str(&format!(":{port}"));
    }
    let mut bucket = None;
    let mut url_parameters = Vec::new();
    for (k, v) in parsed.query_pairs() {
        if k == "bucket" {
            bucket = Some(v.into_owned());
        } else {
            url_parameters.push(format!("{k}={v}"));
        }
    }
    let name = parsed.path().trim_matches('/');
    Ok(BlobStore {
        account_name,
        bucket,
        backup_name: (!name.is_empty()).then(|| name.to_owned()),
        url_parameters,
    })
}

/// The FoundationDB operator's `FoundationDBBackup`.
pub fn backup_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apps.foundationdb.org", "v1beta2", "FoundationDBBackup"),
        "foundationdbbackups",
    )
}

/// The FoundationDBBackup `name` of the cluster, writing to `blob`, running, marked as
/// asked by `op`. Not owned by the operation: the backup outlives it.
pub fn backup_object(name: &str, blob: &BlobStore, op: &str) -> Value {
    let mut config = json!({
        "accountName": blob.account_name,
        "backupName": blob.backup_name.as_deref().unwrap_or(name),
    });
    if let Some(bucket) = &blob.bucket {
        config["bucket"] = json!(bucket);
    }
    if !blob.url_parameters.is_empty() {
        config["urlParameters"] = json!(blob.url_parameters);
    }
    json!({
        "apiVersion": "apps.foundationdb.org/v1beta2",
        "kind": "FoundationDBBackup",
        "metadata": {"name": name, "annotations": {BACKUP_REQUESTED_BY_ANNOTATION: op}},
        "spec": {
            "clusterName": FDB_CLUSTER,
            "backupState": "Running",
            "blobStoreConfiguration": config,
        },
    })
}

/// The steps of every action (the runtime restores the machine from the kind's graphs).
#[derive(Clone, Copy, Default)]
pub struct ControlPlaneSteps;

impl Steps<ControlPlaneOps> for ControlPlaneSteps {
    type Obs = Observed;
    type Call = Call;

    async fn observe(
        &self,
        op: &ControlPlaneOps,
        target: &ControlPlane,
        machine: &Machine<'static, ControlPlaneOpsStep>,
        ctx: &Context,
    ) -> Result<Observed, ops::Error> {
        observe(op, target, machine.state(), ctx).await
    }

    fn plan(
        &self,
        op: &ControlPlaneOps,
        target: &ControlPlane,
        machine: &Machine<'static, ControlPlaneOpsStep>,
        obs: &Observed,
        _now: Timestamp,
    ) -> Noted<ControlPlaneOpsStep, Call, Fields> {
        plan(op, target, machine.state(), obs)
    }

    async fn execute(
        &self,
        op: &ControlPlaneOps,
        target: &ControlPlane,
        call: &Call,
        ctx: &Context,
    ) -> Result<(), String> {
        execute(op, target, call, ctx).await
    }
}

/// Runs the controller until the operator stops.
pub async fn run(ctx: Arc<Context>) {
    let steps = ControlPlaneSteps;
    ops::run(CONTROLLER, ops::controller(&ctx), steps, ctx).await
}

async fn observe(
    op: &ControlPlaneOps,
    target: &ControlPlane,
    step: ControlPlaneOpsStep,
    ctx: &Context,
) -> Result<Observed, ops::Error> {
    use ControlPlaneOpsStep::*;
    let ns = op.namespace().unwrap_or_default();
    let mut obs = Observed::default();
    match step {
        Draining => obs.in_flight = in_flight(ctx).await?,
        Restarting | Awaiting if op.spec.action != ControlPlaneAction::Backup => {
            obs.workloads = workloads(ctx, &ns).await?;
        }
        _ => {}
    }
    if matches!(step, Awaiting | Verifying) && op.spec.action != ControlPlaneAction::Backup {
        obs.probe = Some(match reach::build(ctx, target).await? {
            Err(no_client) => no_client.into(),
            Ok(r) => reach::probe(&r).await,
        });
    }
    if op.spec.action == ControlPlaneAction::Backup {
        obs.backup = backup(ctx, &ns, &backup_name(op)).await?;
    }
    Ok(obs)
}

/// The FoundationDBBackup a Backup creates or triggers.
pub fn backup_name(op: &ControlPlaneOps) -> String {
    op.spec
        .backup
        .as_ref()
        .and_then(|b| b.backup_name.clone())
        .unwrap_or_else(|| DEFAULT_BACKUP_NAME.into())
}

/// The StorageClusterOps, StorageNodeOps and StoragePoolOps that run now, in the
/// operator's scope.
async fn in_flight(ctx: &Context) -> Result<Vec<String>, ops::Error> {
    let mut out = running::<StorageClusterOps>(ctx).await?;
    out.extend(running::<simplyblock_api::StorageNodeOps>(ctx).await?);
    out.extend(running::<StoragePoolOps>(ctx).await?);
    Ok(out)
}

/// The operations of kind `K` that run now, in the operator's scope, as
/// `<kind> <namespace>/<name>`.
async fn running<K>(ctx: &Context) -> Result<Vec<String>, ops::Error>
where
    K: OpsKind
        + Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned,
{
    let ops = ctx
        .scope
        .api::<K>(&ctx.kube)
        .list(&ListParams::default())
        .await?;
    Ok(ops
        .into_iter()
        .filter(|op| op.status_core().phase == OpsPhase::Running)
        .map(|op| {
            let ns = op.namespace().unwrap_or_default();
            format!("{} {ns}/{}", K::kind(&()), op.name_any())
        })
        .collect())
}

async fn workloads(ctx: &Context, ns: &str) -> Result<BTreeMap<String, Rollout>, ops::Error> {
    let mut out = BTreeMap::new();
    let deployments = Api::<Deployment>::namespaced(ctx.kube.clone(), ns);
    for name in DEPLOYMENTS {
        if let Some(d) = deployments.get_opt(name).await? {
            let status = d.status.unwrap_or_default();
            let replicas = (status.updated_replicas, status.ready_replicas);
            let observed = status.observed_generation >= d.metadata.generation;
            let rollout = Rollout::of(d.spec.replicas, &d.spec.template, replicas, observed);
            out.insert(name.to_owned(), rollout);
        }
    }
    if let Some(s) = Api::<StatefulSet>::namespaced(ctx.kube.clone(), ns)
        .get_opt(OBJECT_STORE)
        .await?
    {
        let status = s.status.unwrap_or_default();
        let replicas = (status.updated_replicas, status.ready_replicas);
        let observed = status.observed_generation >= s.metadata.generation;
        let rollout = Rollout::of(s.spec.replicas, &s.spec.template, replicas, observed);
        out.insert(OBJECT_STORE.to_owned(), rollout);
    }
    Ok(out)
}

async fn backup(ctx: &Context, ns: &str, name: &str) -> Result<Option<BackupView>, ops::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.kube.clone(), ns, &backup_resource());
    let found = match api.get_opt(name).await {
        Ok(found) => found,
        // The CRD is not installed: there is no backup, and the request says why.
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => return Err(e.into()),
    };
    Ok(found.map(|b| BackupView {
        requested_by: b.annotations().get(BACKUP_REQUESTED_BY_ANNOTATION).cloned(),
        snapshot_time: b.data["status"]["backupDetails"]["snapshotTime"].as_i64(),
    }))
}

async fn execute(
    op: &ControlPlaneOps,
    target: &ControlPlane,
    call: &Call,
    ctx: &Context,
) -> Result<(), String> {
    let ns = op.namespace().unwrap_or_default();
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    };
    match call {
        Call::Restart { workloads, stamp } => {
            let patch = json!({"spec": {"template": {"metadata": {"annotations": {
                RESTARTED_AT_ANNOTATION: stamp,
            }}}}});
            for (kind, name) in workloads {
                let result = match kind {
                    WorkloadKind::Deployment => {
                        Api::<Deployment>::namespaced(ctx.kube.clone(), &ns)
                            .patch(name, &params, &Patch::Merge(&patch))
                            .await
                            .map(|_| ())
                    }
                    WorkloadKind::StatefulSet => {
                        Api::<StatefulSet>::namespaced(ctx.kube.clone(), &ns)
                            .patch(name, &params, &Patch::Merge(&patch))
                            .await
                            .map(|_| ())
                    }
                };
                result.map_err(|e| format!("restarting {kind:?} {name}: {e}"))?;
            }
            Ok(())
        }
        Call::SetImage(image) => {
            let patch = json!({"spec": {"source": {"local": {"image": image}}}});
            Api::<ControlPlane>::namespaced(ctx.kube.clone(), &ns)
                .patch(&target.name_any(), &params, &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| format!("writing spec.source.local.image: {e}"))
        }
        Call::RequestBackup { name, object } => {
            let api: Api<DynamicObject> =
                Api::namespaced_with(ctx.kube.clone(), &ns, &backup_resource());
            api.patch(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(object))
                .await
                .map(|_| ())
                .map_err(|e| match e {
                    kube::Error::Api(s) if s.code == 404 => format!(
                        "the FoundationDB operator's API (apps.foundationdb.org/v1beta2 FoundationDBBackup) is not served ({}); install the FoundationDB operator",
                        s.message
                    ),
                    e => format!("applying FoundationDBBackup {name}: {e}"),
                })
        }
    }
}

fn wait(message: impl Into<String>) -> Plan<ControlPlaneOpsStep, Call, Fields> {
    Plan::Wait {
        message: message.into(),
        after: POLL,
        event: None,
    }
}

fn advance(
    to: ControlPlaneOpsStep,
    message: impl Into<String>,
) -> Plan<ControlPlaneOpsStep, Call, Fields> {
    Plan::Advance {
        to: Move::To(to),
        message: message.into(),
        kind_status: None,
    }
}

fn succeed(message: impl Into<String>) -> Plan<ControlPlaneOpsStep, Call, Fields> {
    Plan::Succeed {
        message: message.into(),
        kind_status: None,
    }
}

/// Draining: wait while operations on storage run; then `to`.
fn drain(obs: &Observed, to: ControlPlaneOpsStep) -> Plan<ControlPlaneOpsStep, Call, Fields> {
    if obs.in_flight.is_empty() {
        return advance(to, "no operation on storage is running");
    }
    Plan::Wait {
        message: format!(
            "waiting for {} operation(s) in flight to end: {}",
            obs.in_flight.len(),
            obs.in_flight.join(", ")
        ),
        after: POLL,
        event: Some(reason::IN_FLIGHT),
    }
}

/// Whether the management API answers.
fn answers(obs: &Observed) -> Result<(), String> {
    match &obs.probe {
        Some(Probe::Asked { ready: Ok(()), .. }) => Ok(()),
        Some(Probe::Asked { ready: Err(e), .. }) => Err(e.clone()),
        Some(Probe::NoClient { why, .. }) => Err(why.clone()),
        None => Err("not asked yet".into()),
    }
}

/// What the current step does next. Pure.
pub fn plan(
    op: &ControlPlaneOps,
    target: &ControlPlane,
    step: ControlPlaneOpsStep,
    obs: &Observed,
) -> Noted<ControlPlaneOpsStep, Call, Fields> {
    use ControlPlaneOpsStep::*;
    let Some(local) = target.spec.source.local.as_ref() else {
        return Plan::Fail(format!(
            "ControlPlane {} is managed: its control plane runs elsewhere and is operated there",
            op.spec.control_plane_ref
        ))
        .into();
    };
    match (op.spec.action, step) {
        (ControlPlaneAction::Restart, _) => plan_restart(op, step, obs).into(),
        (ControlPlaneAction::Upgrade, _) => plan_upgrade(op, target, &local.image, step, obs),
        (ControlPlaneAction::Backup, Requesting | Awaiting) => plan_backup(op, step, obs),
        (action, step) => Plan::Fail(format!(
            "step {step:?} is not part of action {action:?}; the stored status was edited by hand"
        ))
        .into(),
    }
}

fn plan_restart(
    op: &ControlPlaneOps,
    step: ControlPlaneOpsStep,
    obs: &Observed,
) -> Plan<ControlPlaneOpsStep, Call, Fields> {
    use ControlPlaneOpsStep::*;
    let workloads = match restarted(op) {
        Ok(w) => w,
        Err(why) => return Plan::Fail(why),
    };
    let names: Vec<&str> = workloads.iter().map(|(_, n)| *n).collect();
    match step {
        Draining if !drains(op) => advance(
            Restarting,
            format!(
                "restarting {} (not essential): nothing to drain",
                names.join(", ")
            ),
        ),
        Draining => drain(obs, Restarting),
        Restarting => {
            let Some(stamp) = op
                .status
                .as_ref()
                .and_then(|s| s.started_at.as_ref())
                .map(|t| t.0.to_string())
            else {
                return Plan::Fail("the operation runs without status.startedAt; this is a bug in the operator, please report it".into());
            };
            if let Some(missing) = names.iter().find(|n| !obs.workloads.contains_key(**n)) {
                return Plan::Fail(format!(
                    "{missing} is not there to restart: the control plane is not installed (yet)"
                ));
            }
            let todo: Vec<(WorkloadKind, String)> = workloads
                .iter()
                .filter(|(_, n)| obs.workloads[*n].restarted_at.as_deref() != Some(stamp.as_str()))
                .map(|(k, n)| (*k, (*n).to_owned()))
                .collect();
            if todo.is_empty() {
                return advance(
                    Awaiting,
                    format!(
                        "restart of {} asked; waiting for the rollout",
                        names.join(", ")
                    ),
                );
            }
            Plan::Call {
                call: Call::Restart {
                    workloads: todo,
                    stamp,
                },
                message: format!("restarting {}", names.join(", ")),
            }
        }
        Awaiting => {
            let pending: Vec<String> = names
                .iter()
                .filter_map(|n| match obs.workloads.get(*n) {
                    Some(r) if r.done() => None,
                    Some(r) => Some(format!("{n}: {}", r.describe())),
                    None => Some(format!("{n}: not there")),
                })
                .collect();
            if !pending.is_empty() {
                return wait(format!("waiting for the rollout ({})", pending.join("; ")));
            }
            if names.contains(&API)
                && let Err(e) = answers(obs)
            {
                return wait(format!(
                    "restarted; waiting for the management API to answer: {e}"
                ));
            }
            succeed(format!("restarted {}", names.join(", ")))
        }
        other => Plan::Fail(format!(
            "step {other:?} is not part of action Restart; the stored status was edited by hand"
        )),
    }
}

fn plan_upgrade(
    op: &ControlPlaneOps,
    target: &ControlPlane,
    running: &str,
    step: ControlPlaneOpsStep,
    obs: &Observed,
) -> Noted<ControlPlaneOpsStep, Call, Fields> {
    use ControlPlaneOpsStep::*;
    let Some(image) = op.spec.upgrade.as_ref().map(|u| u.image.clone()) else {
        return Plan::Fail("action Upgrade needs spec.upgrade.image".into()).into();
    };
    let status = target.status.clone().unwrap_or_default();
    match step {
        Preflight if running == image => Plan::Fail(format!(
            "the control plane already runs {image}; nothing to upgrade"
        ))
        .into(),
        Preflight if status.phase != ControlPlanePhase::Available => wait(format!(
            "waiting for the control plane to be Available before the upgrade (it is {:?}{})",
            status.phase,
            status.message.map(|m| format!(": {m}")).unwrap_or_default()
        ))
        .into(),
        Preflight => advance(Draining, format!("upgrading from {running} to {image}")).into(),
        Draining => drain(obs, Applying).into(),
        Applying if running == image => advance(
            Awaiting,
            format!("spec.source.local.image is {image}; waiting for the rollout"),
        )
        .into(),
        Applying => Plan::Call {
            call: Call::SetImage(image.clone()),
            message: format!("writing {image} into spec.source.local.image"),
        }
        .into(),
        Awaiting => {
            let Some(api) = obs.workloads.get(API) else {
                return wait(format!("waiting for Deployment {API}")).into();
            };
            if api.image.as_deref() != Some(image.as_str()) {
                return wait(format!(
                    "waiting for Deployment {API} to run {image} (it runs {})",
                    api.image.as_deref().unwrap_or("nothing")
                ))
                .into();
            }
            if !api.done() {
                return wait(format!(
                    "waiting for the rollout of {API} ({})",
                    api.describe()
                ))
                .into();
            }
            match answers(obs) {
                Ok(()) => advance(Verifying, "rolled out; verifying the version it reports").into(),
                Err(e) => wait(format!(
                    "rolled out; waiting for the management API to answer: {e}"
                ))
                .into(),
            }
        }
        Verifying => {
            if let Err(e) = answers(obs) {
                return wait(format!("waiting for the management API to answer: {e}")).into();
            }
            let tag = image_tag(&image).unwrap_or(&image);
            match obs.probe.as_ref().and_then(Probe::version) {
                None => succeed(format!(
                    "upgraded to {image}; the control plane reports no version, so the upgrade is unverified"
                ))
                .into(),
                Some(v) if same_version(tag, v) => succeed(format!(
                    "upgraded to {image}; the control plane reports version {v}"
                ))
                .into(),
                Some(v) => {
                    let message = format!(
                        "VersionMismatch: the control plane runs {image} but reports version {v}, not {tag}; it is left on {image} — check the image, or upgrade again"
                    );
                    Noted {
                        plan: Plan::Fail(message.clone()),
                        notes: vec![Note {
                            warning: true,
                            reason: reason::VERSION_MISMATCH,
                            message,
                        }],
                    }
                }
            }
        }
        other => Plan::Fail(format!(
            "step {other:?} is not part of action Upgrade; the stored status was edited by hand"
        ))
        .into(),
    }
}

fn plan_backup(
    op: &ControlPlaneOps,
    step: ControlPlaneOpsStep,
    obs: &Observed,
) -> Noted<ControlPlaneOpsStep, Call, Fields> {
    use ControlPlaneOpsStep::*;
    let name = backup_name(op);
    let me = op.name_any();
    let backup_ref = Fields {
        backup_ref: Some(name.clone()),
    };
    match step {
        Requesting => {
            let Some(spec) = op.spec.backup.as_ref() else {
                return Plan::Fail("action Backup needs spec.backup.blobStore".into()).into();
            };
            let blob = match blob_store(&spec.blob_store) {
                Ok(b) => b,
                Err(why) => return Plan::Fail(why).into(),
            };
            match &obs.backup {
                Some(b) if b.requested_by.as_deref() == Some(me.as_str()) => Plan::Advance {
                    to: Move::To(Awaiting),
                    message: format!("FoundationDBBackup {name} runs; waiting for a snapshot"),
                    kind_status: Some(backup_ref),
                }
                .into(),
                found => {
                    let (reason, message) = match found {
                        None => (
                            reason::BACKUP_REQUESTED,
                            format!("creating FoundationDBBackup {name}"),
                        ),
                        Some(_) => (
                            reason::BACKUP_TRIGGERED,
                            format!("triggering FoundationDBBackup {name}"),
                        ),
                    };
                    Noted {
                        plan: Plan::Call {
                            call: Call::RequestBackup {
                                name: name.clone(),
                                object: backup_object(&name, &blob, &me),
                            },
                            message: message.clone(),
                        },
                        notes: vec![Note {
                            warning: false,
                            reason,
                            message: format!("{message} to {}", spec.blob_store),
                        }],
                    }
                }
            }
        }
        Awaiting => {
            let started = op
                .status
                .as_ref()
                .and_then(|s| s.started_at.as_ref())
                .map(|t| t.0.as_second());
            match (&obs.backup, started) {
                (None, _) => Plan::Fail(format!(
                    "FoundationDBBackup {name} disappeared while the backup ran"
                ))
                .into(),
                (
                    Some(BackupView {
                        snapshot_time: Some(at),
                        ..
                    }),
                    Some(started),
                ) if *at >= started => Plan::Succeed {
                    message: format!(
                        "FoundationDBBackup {name} reports a snapshot at {}",
                        Timestamp::from_second(*at)
                            .map_or_else(|_| at.to_string(), |t| t.to_string())
                    ),
                    kind_status: Some(backup_ref),
                }
                .into(),
                _ => wait(format!(
                    "waiting for FoundationDBBackup {name} to report a snapshot"
                ))
                .into(),
            }
        }
        other => Plan::Fail(format!(
            "step {other:?} is not part of action Backup; the stored status was edited by hand"
        ))
        .into(),
    }
}

#[cfg(test)]
#[path = "ops_tests.rs"]
mod tests;

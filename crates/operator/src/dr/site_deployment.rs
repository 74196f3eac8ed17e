//! The StorageSiteDeployment controller: carries a request to deploy simplyblock on a
//! managed cluster (a site) from the hub to the site, and reports the site's answer.
//!
//! It holds no credentials of the site. Every write to the site is one ManifestWork in the
//! site's namespace on the hub, and every read a ManagedClusterView there:
//!
//! - the work carries an `OperatorOps` Discover whose name hashes the discovery, so a
//!   changed discovery is a new run; once the site's draft has nodes it also carries a
//!   server-side apply (field manager [`HUB_DEPLOY_MANAGER`]) of the sizing and the
//!   approval onto that draft, and of nothing the discovery wrote;
//! - the views read back the draft, the StorageCluster it expands into, and up to
//!   [`MAX_NODE_VIEWS`] of its StorageNodes.
//!
//! What was read back decides the phase and the conditions ([`crate::site`]). Deleting
//! the request deletes the work, whose resources are orphaned: nothing on the site is
//! torn down, the draft and the cluster belong to the site once they exist.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use serde_json::{Value, json};
use simplyblock_api::cluster_deployment_config::DeploymentPhase;
use simplyblock_api::conditions;
use simplyblock_api::keys::DEFAULT_POOL_ANNOTATION;
use simplyblock_api::names::{derived_name, digest8};
use simplyblock_api::storage_site_deployment::{
    FINALIZER, SiteDraft, SiteNode, SitePhase, SiteStorageCluster, StorageSiteDeployment,
    StorageSiteDeploymentStatus,
};

use crate::runtime::context::Context;
use crate::runtime::kit::{self, Error, Guard};
use crate::site::{self, SiteState};

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "storagesitedeployment";
/// The field manager of the request's status, its work and its views.
const MANAGER: &str = "storagesitedeployment-controller";
/// The field manager the site's work agent applies the sizing and the approval with, so
/// the fields the discovery wrote into the draft stay the discovery's.
pub const HUB_DEPLOY_MANAGER: &str = "hub-deploy";
/// Labels the work and the views of one request with its UID, so its release finds them.
pub const REQUEST_LABEL: &str = crate::runtime::ops::history::SITE_DEPLOYMENT_LABEL;
/// `<namespace>/<name>` of the request a work or view belongs to: what wakes the request
/// when the site answers.
pub const REQUEST_ANNOTATION: &str = "storage.simplyblock.io/site-deployment-request";
/// How often the site is read again while the deployment moves.
pub const REQUEUE: Duration = Duration::from_secs(15);
/// How often an Online or Failed request is read again (a failure may clear on the site).
pub const SETTLED_REQUEUE: Duration = Duration::from_secs(120);
/// The most StorageNodes read back: a ManagedClusterView reads one object, so each node
/// is a view of its own.
pub const MAX_NODE_VIEWS: usize = 64;
/// How often the site refreshes a view's result.
const VIEW_REFRESH_SECONDS: i64 = 15;

const SIMPLYBLOCK_GROUP: &str = "storage.simplyblock.io";
const SIMPLYBLOCK_VERSION: &str = "v1alpha2";

/// The hub's ManifestWork (`work.open-cluster-management.io/v1`).
pub fn manifest_work_resource() -> ApiResource {
    ApiResource {
        group: "work.open-cluster-management.io".into(),
        version: "v1".into(),
        api_version: "work.open-cluster-management.io/v1".into(),
        kind: "ManifestWork".into(),
        plural: "manifestworks".into(),
    }
}

/// The hub's ManagedClusterView (`view.open-cluster-management.io/v1beta1`).
pub fn managed_cluster_view_resource() -> ApiResource {
    ApiResource {
        group: "view.open-cluster-management.io".into(),
        version: "v1beta1".into(),
        api_version: "view.open-cluster-management.io/v1beta1".into(),
        kind: "ManagedClusterView".into(),
        plural: "managedclusterviews".into(),
    }
}

/// Runs the controller until the operator stops. Only on a hub: the work and view APIs
/// must be served ([`super::hub`]).
pub async fn run(ctx: Arc<Context>) {
    let requests = ctx.scope.api::<StorageSiteDeployment>(&ctx.kube);
    let works = manifest_work_resource();
    let views = managed_cluster_view_resource();
    // The work and the views live in the site's namespace, where no owner reference can
    // point at the request: the annotation names it, and the site's answers wake it.
    let owned = || watcher::Config::default().labels(REQUEST_LABEL);
    let controller = Controller::new(requests, watcher::Config::default())
        .watches_with(
            Api::<DynamicObject>::all_with(ctx.kube.clone(), &works),
            works.clone(),
            owned(),
            |o: DynamicObject| request_of(&o),
        )
        .watches_with(
            Api::<DynamicObject>::all_with(ctx.kube.clone(), &views),
            views.clone(),
            owned(),
            |o: DynamicObject| request_of(&o),
        );
    kit::run(CONTROLLER, controller, reconcile, ctx).await
}

/// The request a work or view names in [`REQUEST_ANNOTATION`].
fn request_of(o: &DynamicObject) -> Option<ObjectRef<StorageSiteDeployment>> {
    let (ns, name) = o.annotations().get(REQUEST_ANNOTATION)?.split_once('/')?;
    Some(ObjectRef::new(name).within(ns))
}

pub async fn reconcile(
    req: Arc<StorageSiteDeployment>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let client = ctx.kube.clone();
    kit::finalized(
        &client,
        FINALIZER,
        req,
        |req| {
            let ctx = ctx.clone();
            async move { follow(&req, &ctx).await }
        },
        |req| {
            let ctx = ctx.clone();
            async move { release(&req, &ctx).await }
        },
    )
    .await
}

/// Names of the request's objects on the hub, derived from its namespace and name so a
/// restarted controller finds them again.
pub fn work_name(req: &StorageSiteDeployment) -> String {
    let key = format!("{}/{}", req.namespace().unwrap_or_default(), req.name_any());
    format!("sbsd-{}", digest8(key.as_bytes()))
}

/// The name of one of the request's views.
pub fn view_name(req: &StorageSiteDeployment, suffix: &str) -> String {
    format!("{}-{suffix}", work_name(req))
}

/// The OperatorOps the work raises on the site: the draft's name and a digest of the
/// discovery, so a changed discovery is a new run instead of an edit of a finished one.
pub fn discovery_name(req: &StorageSiteDeployment) -> String {
    let spec = discover_spec(req);
    let digest = digest8(spec.to_string().as_bytes());
    derived_name(&["hub-discover", &req.spec.draft_name, &digest], 253)
}

/// The `spec.discover` of the site's OperatorOps. The workers are a set: their order
/// does not make another run.
fn discover_spec(req: &StorageSiteDeployment) -> Value {
    let mut discover = json!({"configName": req.spec.draft_name});
    if let Some(d) = &req.spec.discover {
        if let Some(cp) = d.enable_control_plane_nodes {
            discover["enableControlPlaneNodes"] = json!(cp);
        }
        if !d.workers.is_empty() {
            let mut workers = d.workers.clone();
            workers.sort();
            workers.dedup();
            discover["workers"] = json!(workers);
        }
        if !d.node_selector.is_empty() {
            discover["nodeSelector"] = json!(d.node_selector);
        }
    }
    discover
}

fn labels(req: &StorageSiteDeployment) -> Value {
    json!({REQUEST_LABEL: req.uid().unwrap_or_default()})
}

fn annotations(req: &StorageSiteDeployment) -> Value {
    let key = format!("{}/{}", req.namespace().unwrap_or_default(), req.name_any());
    json!({REQUEST_ANNOTATION: key})
}

/// The request's ManifestWork as it should be now. `draft_has_nodes`: the site's draft
/// exists with nodes, so the sizing and the approval can be applied onto it (an apply
/// before it exists would create a draft without nodes, which the site refuses).
pub fn manifest_work(req: &StorageSiteDeployment, draft_has_nodes: bool) -> Value {
    let ns = &req.spec.site_namespace;
    let draft = &req.spec.draft_name;
    let discovery = json!({
        "apiVersion": format!("{SIMPLYBLOCK_GROUP}/{SIMPLYBLOCK_VERSION}"),
        "kind": "OperatorOps",
        "metadata": {"name": discovery_name(req), "namespace": ns, "labels": labels(req)},
        "spec": {"action": "Discover", "discover": discover_spec(req)},
    });
    let mut manifests = vec![discovery];
    let mut configs = Vec::new();
    let sizing = req
        .spec
        .sizing
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .filter(|v| v.as_object().is_some_and(|m| !m.is_empty()));
    if draft_has_nodes && (sizing.is_some() || req.spec.approved) {
        // Only what the request states: `approved` is applied once true (never as false,
        // which would withdraw an approval given on the site), the sizing field by field.
        let mut spec = serde_json::Map::new();
        if req.spec.approved {
            spec.insert("approved".into(), json!(true));
        }
        if let Some(sizing) = sizing {
            spec.insert("cluster".into(), sizing);
        }
        manifests.push(json!({
            "apiVersion": format!("{SIMPLYBLOCK_GROUP}/{SIMPLYBLOCK_VERSION}"),
            "kind": "ClusterDeploymentConfig",
            "metadata": {"name": draft, "namespace": ns},
            "spec": spec,
        }));
        configs.push(json!({
            "resourceIdentifier": {
                "group": SIMPLYBLOCK_GROUP,
                "resource": "clusterdeploymentconfigs",
                "namespace": ns,
                "name": draft,
            },
            "updateStrategy": {
                "type": "ServerSideApply",
                "serverSideApply": {"force": true, "fieldManager": HUB_DEPLOY_MANAGER},
            },
        }));
    }
    let mut spec = json!({
        "workload": {"manifests": manifests},
        "deleteOption": {"propagationPolicy": "Orphan"},
    });
    if !configs.is_empty() {
        spec["manifestConfigs"] = json!(configs);
    }
    json!({
        "apiVersion": manifest_work_resource().api_version,
        "kind": "ManifestWork",
        "metadata": {
            "name": work_name(req),
            "namespace": req.spec.cluster,
            "labels": labels(req),
            "annotations": annotations(req),
        },
        "spec": spec,
    })
}

/// A view asking the site to read one object of `kind` back to the hub.
pub fn view(req: &StorageSiteDeployment, suffix: &str, target: &Target) -> Value {
    json!({
        "apiVersion": managed_cluster_view_resource().api_version,
        "kind": "ManagedClusterView",
        "metadata": {
            "name": view_name(req, suffix),
            "namespace": req.spec.cluster,
            "labels": labels(req),
            "annotations": annotations(req),
        },
        "spec": {"scope": target.scope(), },
    })
}

/// One object on the site a view reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub kind: &'static str,
    pub resource: &'static str,
    pub namespace: String,
    pub name: String,
}

impl Target {
    fn scope(&self) -> Value {
        json!({
            "apiGroup": SIMPLYBLOCK_GROUP,
            "version": SIMPLYBLOCK_VERSION,
            "kind": self.kind,
            "resource": self.resource,
            "namespace": self.namespace,
            "name": self.name,
            "updateIntervalSeconds": VIEW_REFRESH_SECONDS,
        })
    }

    fn draft(req: &StorageSiteDeployment) -> Target {
        Target {
            kind: "ClusterDeploymentConfig",
            resource: "clusterdeploymentconfigs",
            namespace: req.spec.site_namespace.clone(),
            name: req.spec.draft_name.clone(),
        }
    }

    fn cluster(req: &StorageSiteDeployment, name: &str) -> Target {
        Target {
            kind: "StorageCluster",
            resource: "storageclusters",
            namespace: req.spec.site_namespace.clone(),
            name: name.to_owned(),
        }
    }

    fn node(req: &StorageSiteDeployment, name: &str) -> Target {
        Target {
            kind: "StorageNode",
            resource: "storagenodes",
            namespace: req.spec.site_namespace.clone(),
            name: name.to_owned(),
        }
    }
}

/// Whether the work is applied on the site, and the site's refusal of a manifest when
/// one was refused.
pub fn delivery(work: &Value) -> (bool, Option<String>) {
    let status = &work["status"];
    fn condition_false<'a>(conditions: &'a Value, type_: &str) -> Option<&'a Value> {
        conditions
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"].as_str() == Some(type_) && c["status"].as_str() == Some("False"))
    }
    for manifest in status["resourceStatus"]["manifests"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(c) = condition_false(&manifest["conditions"], "Applied") {
            let meta = &manifest["resourceMeta"];
            return (
                false,
                Some(format!(
                    "{} {} was not applied: {}",
                    meta["kind"].as_str().unwrap_or("a manifest"),
                    meta["name"].as_str().unwrap_or_default(),
                    c["message"].as_str().unwrap_or("no reason given"),
                )),
            );
        }
    }
    let applied = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"].as_str() == Some("Applied") && c["status"].as_str() == Some("True"));
    (applied, None)
}

/// The site's ClusterDeploymentConfig as the status carries it.
pub fn read_draft(object: &Value) -> SiteDraft {
    let spec = &object["spec"];
    let status = &object["status"];
    let string = |v: &Value| v.as_str().map(str::to_owned);
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    let phase = serde_json::from_value::<DeploymentPhase>(status["phase"].clone()).ok();
    SiteDraft {
        name: string(&object["metadata"]["name"]).unwrap_or_default(),
        phase: phase.or(Some(DeploymentPhase::Draft)),
        message: string(&status["message"]),
        approved: spec["approved"].as_bool().unwrap_or(false),
        cluster: string(&status["clusterRef"])
            .or_else(|| string(&spec["clusterRef"]))
            .or_else(|| string(&spec["cluster"]["name"])),
        node_sets: spec["nodeSets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| {
                s["groups"].as_array().into_iter().flatten().any(|g| {
                    g["workers"]
                        .as_array()
                        .is_some_and(|workers| !workers.is_empty())
                })
            })
            .filter_map(|s| string(&s["name"]))
            .collect(),
        node_refs: strings(&status["nodeRefs"]),
    }
}

/// The site's StorageCluster `name` as the status carries it; `object` is what the view
/// read, `None` while it has read nothing.
pub fn read_cluster(name: &str, object: Option<&Value>) -> SiteStorageCluster {
    let string = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    let pool = object
        .and_then(|o| string(&o["metadata"]["annotations"][DEFAULT_POOL_ANNOTATION]))
        .unwrap_or_else(|| crate::pool::class::default_pool_name(name));
    SiteStorageCluster {
        name: name.to_owned(),
        uuid: object.and_then(|o| string(&o["status"]["uuid"])),
        phase: object.and_then(|o| string(&o["status"]["phase"])),
        pool: Some(pool),
        nodes: Vec::new(),
    }
}

/// One StorageNode of the site as the status carries it.
pub fn read_node(name: &str, object: Option<&Value>) -> SiteNode {
    let string = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    SiteNode {
        name: name.to_owned(),
        phase: object.and_then(|o| string(&o["status"]["phase"])),
        hostname: object.and_then(|o| string(&o["status"]["hostname"])),
    }
}

/// The nodes read back: the draft's StorageNodes in name order, at most
/// [`MAX_NODE_VIEWS`].
pub fn node_targets(draft: &SiteDraft) -> Vec<String> {
    let mut refs = draft.node_refs.clone();
    refs.sort();
    refs.dedup();
    refs.truncate(MAX_NODE_VIEWS);
    refs
}

/// The message of a phase `site` leaves without one.
fn describe(req: &StorageSiteDeployment, state: &SiteState, phase: SitePhase) -> String {
    let (ns, draft) = (&req.spec.site_namespace, &req.spec.draft_name);
    match phase {
        SitePhase::Discovering if !state.delivered => format!(
            "waiting for site {} to apply the discovery work",
            req.spec.cluster
        ),
        SitePhase::Discovering => format!(
            "discovery runs on site {}: the draft {ns}/{draft} names no node yet",
            req.spec.cluster
        ),
        SitePhase::Online => {
            let c = state.cluster.as_ref();
            format!(
                "StorageCluster {} is Online with {} storage node(s)",
                c.map_or("", |c| c.name.as_str()),
                c.map_or(0, |c| c.nodes.len())
            )
        }
        _ => match (&state.draft, &state.cluster) {
            (Some(d), Some(c)) => format!(
                "draft {ns}/{draft} {:?}, StorageCluster {} {}",
                d.phase.unwrap_or_default(),
                c.name,
                c.phase.as_deref().unwrap_or("not reported yet")
            ),
            (Some(d), None) => format!(
                "draft {ns}/{draft} {:?}: approved, waiting for the site to name its StorageCluster",
                d.phase.unwrap_or_default()
            ),
            _ => format!("waiting for site {}", req.spec.cluster),
        },
    }
}

/// The message of each condition.
fn condition_message(type_: &str, holds: bool, state: &SiteState) -> String {
    use simplyblock_api::storage_site_deployment::{APPROVED, DELIVERED, DISCOVERED, READY};
    let draft = state.draft.as_ref();
    match type_ {
        DELIVERED => match (&state.refused, holds) {
            (Some(why), _) => why.clone(),
            (None, true) => "the work is applied on the site".into(),
            (None, false) => "the work is not applied on the site yet".into(),
        },
        DISCOVERED => format!(
            "{} node set(s) with workers in the site's draft",
            draft.map_or(0, |d| d.node_sets.len())
        ),
        APPROVED if holds => "the site's draft is approved".into(),
        APPROVED => "the site's draft awaits approval".into(),
        READY => match &state.cluster {
            Some(c) => format!(
                "StorageCluster {} is {}",
                c.name,
                c.phase.as_deref().unwrap_or("not reported yet")
            ),
            None => "the site has no StorageCluster for the draft yet".into(),
        },
        _ => String::new(),
    }
}

/// The status to write for what was read back; conditions keep their transition time
/// while they hold the same value.
pub fn status(
    req: &StorageSiteDeployment,
    state: &SiteState,
    now: jiff::Timestamp,
) -> StorageSiteDeploymentStatus {
    let current = req.status.clone().unwrap_or_default();
    let (phase, message) = site::phase(state);
    let message = message.unwrap_or_else(|| describe(req, state, phase));
    let generation = req.metadata.generation;
    let verdicts = site::conditions(state);
    let messages: Vec<String> = verdicts
        .iter()
        .map(|v| condition_message(v.type_, v.holds, state))
        .collect();
    let verdicts: Vec<conditions::Verdict<'_>> = verdicts
        .iter()
        .zip(&messages)
        .map(|(v, message)| conditions::Verdict {
            type_: v.type_,
            holds: v.holds,
            reason: v.reason,
            message,
        })
        .collect();
    let conditions =
        conditions::with_conditions(&current.conditions, &verdicts, generation, &Time(now));
    StorageSiteDeploymentStatus {
        phase,
        message: Some(message),
        observed_generation: generation,
        work_name: Some(work_name(req)),
        draft: state.draft.clone(),
        storage_cluster: state.cluster.clone(),
        conditions,
    }
}

/// When to read the site again in `phase`.
pub fn requeue(phase: SitePhase) -> Duration {
    match phase {
        SitePhase::Online | SitePhase::Failed => SETTLED_REQUEUE,
        _ => REQUEUE,
    }
}

/// One pass: read the draft, bring the work up to date, read the cluster and its nodes
/// once approved, and write what they say.
async fn follow(req: &StorageSiteDeployment, ctx: &Context) -> Result<Action, Error> {
    let site = Site::of(req, ctx);
    let draft = site
        .read("draft", &Target::draft(req))
        .await?
        .map(|o| read_draft(&o));
    let has_nodes = draft.as_ref().is_some_and(|d| !d.node_sets.is_empty());
    let work = match site.ensure_work(&manifest_work(req, has_nodes)).await? {
        Some(work) => work,
        None => {
            let message = format!(
                "the hub has no namespace {} for managed cluster {}: register the cluster with the hub, or create a request naming a registered cluster",
                req.spec.cluster, req.spec.cluster
            );
            return site.hold(SitePhase::Pending, message).await;
        }
    };
    let (delivered, refused) = delivery(&work);

    let mut cluster = None;
    if let Some(d) = draft.as_ref().filter(|d| d.approved)
        && let Some(name) = &d.cluster
    {
        let object = site.read("cluster", &Target::cluster(req, name)).await?;
        let mut c = read_cluster(name, object.as_ref());
        for (i, node) in node_targets(d).iter().enumerate() {
            let object = site
                .read(&format!("node-{i}"), &Target::node(req, node))
                .await?;
            c.nodes.push(read_node(node, object.as_ref()));
        }
        cluster = Some(c);
    }

    let state = SiteState {
        refused,
        delivered,
        draft,
        cluster,
    };
    let next = status(req, &state, jiff::Timestamp::now());
    site.write(next).await
}

/// Deletes the work (its resources orphaned on the site) and waits until the site has
/// released it, then deletes the views; the finalizer goes after.
async fn release(req: &StorageSiteDeployment, ctx: &Context) -> Result<Action, Error> {
    let site = Site::of(req, ctx);
    if let Some(work) = site.works.get_opt(&work_name(req)).await? {
        if work.metadata.deletion_timestamp.is_none() {
            match site
                .works
                .delete(&work_name(req), &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
            ctx.event(
                req,
                false,
                "WorkReleased",
                format!(
                    "deleted ManifestWork {}/{}; the site keeps what it applied",
                    req.spec.cluster,
                    work_name(req)
                ),
            )
            .await;
        }
        return Err(Error::Held(format!(
            "waiting for site {} to release ManifestWork {}",
            req.spec.cluster,
            work_name(req)
        )));
    }
    let selector = format!("{REQUEST_LABEL}={}", req.uid().unwrap_or_default());
    let views = site
        .views
        .list(&ListParams::default().labels(&selector))
        .await;
    let views = match views {
        Ok(list) => list.items,
        // No view API, no views.
        Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    for v in views {
        match site
            .views
            .delete(&v.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Action::await_change())
}

/// The request and its objects in the site's namespace on the hub.
struct Site<'a> {
    req: &'a StorageSiteDeployment,
    ctx: &'a Context,
    works: Api<DynamicObject>,
    views: Api<DynamicObject>,
}

impl<'a> Site<'a> {
    fn of(req: &'a StorageSiteDeployment, ctx: &'a Context) -> Site<'a> {
        let ns = &req.spec.cluster;
        Site {
            req,
            ctx,
            works: Api::namespaced_with(ctx.kube.clone(), ns, &manifest_work_resource()),
            views: Api::namespaced_with(ctx.kube.clone(), ns, &managed_cluster_view_resource()),
        }
    }

    /// The work as stored, applied first when it differs from `want`; `None` when the
    /// site's namespace does not exist on the hub.
    async fn ensure_work(&self, want: &Value) -> Result<Option<Value>, Error> {
        let name = work_name(self.req);
        let have = self.works.get_opt(&name).await?;
        if let Some(have) = &have {
            let same_spec = have.data["spec"] == want["spec"];
            let same_meta = want["metadata"]["labels"]
                .as_object()
                .into_iter()
                .flatten()
                .chain(
                    want["metadata"]["annotations"]
                        .as_object()
                        .into_iter()
                        .flatten(),
                )
                .all(|(k, v)| {
                    have.labels()
                        .get(k)
                        .or(have.annotations().get(k))
                        .map(String::as_str)
                        == v.as_str()
                });
            if same_spec && same_meta {
                return Ok(Some(serde_json::to_value(have).unwrap_or_default()));
            }
        }
        match self
            .works
            .patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(want),
            )
            .await
        {
            Ok(written) => Ok(Some(serde_json::to_value(&written).unwrap_or_default())),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// What the view `suffix` read of `target`: `None` while it has read nothing, or when
    /// it was just made or pointed at another object.
    async fn read(&self, suffix: &str, target: &Target) -> Result<Option<Value>, Error> {
        let name = view_name(self.req, suffix);
        let want = view(self.req, suffix, target);
        let have = match self.views.get_opt(&name).await {
            Ok(v) => v,
            // The site's namespace is missing: the work's write says so.
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let Some(have) = have else {
            self.apply_view(&name, &want).await?;
            return Ok(None);
        };
        if have.data["spec"]["scope"] != want["spec"]["scope"] {
            self.apply_view(&name, &want).await?;
            return Ok(None);
        }
        let result = &have.data["status"]["result"];
        // A view keeps its last result when a read fails (the object is gone): a failing
        // view has read nothing.
        let failing = have.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Processing" && c["status"] == "False");
        Ok((!failing && result.as_object().is_some_and(|m| !m.is_empty())).then(|| result.clone()))
    }

    async fn apply_view(&self, name: &str, want: &Value) -> Result<(), Error> {
        match self
            .views
            .patch(
                name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(want),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes `next` when it differs from the stored status, with an event when the
    /// phase changes.
    async fn write(&self, next: StorageSiteDeploymentStatus) -> Result<Action, Error> {
        let (req, ctx) = (self.req, self.ctx);
        let current = req.status.clone().unwrap_or_default();
        let phase = next.phase;
        if next != current {
            let message = next.message.clone().unwrap_or_default();
            kit::apply_status(&ctx.kube, req, MANAGER, &next, Guard::ResourceVersion).await?;
            if phase != current.phase || req.status.is_none() {
                let warning = phase == SitePhase::Failed;
                ctx.event(req, warning, phase_reason(phase), message).await;
            }
        }
        Ok(Action::requeue(requeue(phase)))
    }

    /// Writes `phase` and `message` alone (nothing was read from the site).
    async fn hold(&self, phase: SitePhase, message: String) -> Result<Action, Error> {
        let current = self.req.status.clone().unwrap_or_default();
        let next = StorageSiteDeploymentStatus {
            phase,
            message: Some(message),
            observed_generation: self.req.metadata.generation,
            ..current
        };
        self.write(next).await
    }
}

fn phase_reason(phase: SitePhase) -> &'static str {
    match phase {
        SitePhase::Pending => "Pending",
        SitePhase::Discovering => "Discovering",
        SitePhase::Drafted => "Drafted",
        SitePhase::Deploying => "Deploying",
        SitePhase::Online => "Online",
        SitePhase::Failed => "Failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use simplyblock_api::storage_site_deployment::{
        SiteDiscover, SiteSizing, StorageSiteDeploymentSpec,
    };

    fn request(
        discover: Option<SiteDiscover>,
        sizing: Option<SiteSizing>,
        approved: bool,
    ) -> StorageSiteDeployment {
        let mut req = StorageSiteDeployment::new(
            "east",
            StorageSiteDeploymentSpec {
                cluster: "site-a".into(),
                site_namespace: "simplyblock".into(),
                draft_name: "site-draft".into(),
                discover,
                sizing,
                approved,
            },
        );
        req.metadata.namespace = Some("dr".into());
        req.metadata.uid = Some("uid-1".into());
        req.metadata.generation = Some(3);
        req
    }

    #[test]
    fn the_work_carries_the_discovery_and_orphans_what_it_applied() {
        let req = request(None, None, false);
        let work = manifest_work(&req, false);
        assert_eq!(work["metadata"]["namespace"], "site-a");
        assert_eq!(work["metadata"]["name"], work_name(&req));
        assert_eq!(work["spec"]["deleteOption"]["propagationPolicy"], "Orphan");
        let manifests = work["spec"]["workload"]["manifests"]
            .as_array()
            .expect("manifests");
        assert_eq!(manifests.len(), 1);
        assert_eq!(manifests[0]["kind"], "OperatorOps");
        assert_eq!(manifests[0]["metadata"]["namespace"], "simplyblock");
        assert_eq!(
            manifests[0]["spec"],
            json!({"action": "Discover", "discover": {"configName": "site-draft"}})
        );
        assert!(work["spec"].get("manifestConfigs").is_none());
        assert_eq!(
            work["metadata"]["annotations"][REQUEST_ANNOTATION],
            "dr/east"
        );
    }

    #[test]
    fn a_changed_discovery_is_a_new_run_and_the_order_of_workers_is_not() {
        let with = |workers: &[&str]| {
            discovery_name(&request(
                Some(SiteDiscover {
                    workers: workers.iter().map(|w| w.to_string()).collect(),
                    ..SiteDiscover::default()
                }),
                None,
                false,
            ))
        };
        assert_eq!(with(&["w1", "w2"]), with(&["w2", "w1"]));
        assert_ne!(with(&["w1", "w2"]), with(&["w1", "w3"]));
        assert_ne!(with(&["w1"]), discovery_name(&request(None, None, false)));
        assert!(with(&["w1"]).starts_with("hub-discover-site-draft-"));
    }

    #[test]
    fn sizing_and_approval_wait_for_a_draft_with_nodes() {
        let sizing = SiteSizing {
            vcpu_count: Some(4),
            ..SiteSizing::default()
        };
        let req = request(None, Some(sizing), true);
        let before = manifest_work(&req, false);
        assert_eq!(
            before["spec"]["workload"]["manifests"]
                .as_array()
                .map(Vec::len),
            Some(1)
        );

        let work = manifest_work(&req, true);
        let manifests = work["spec"]["workload"]["manifests"]
            .as_array()
            .expect("manifests");
        assert_eq!(manifests.len(), 2);
        assert_eq!(
            manifests[1],
            json!({
                "apiVersion": "storage.simplyblock.io/v1alpha2",
                "kind": "ClusterDeploymentConfig",
                "metadata": {"name": "site-draft", "namespace": "simplyblock"},
                "spec": {"approved": true, "cluster": {"vcpuCount": 4}},
            })
        );
        assert_eq!(
            work["spec"]["manifestConfigs"],
            json!([{
                "resourceIdentifier": {"group": "storage.simplyblock.io", "resource": "clusterdeploymentconfigs",
                                       "namespace": "simplyblock", "name": "site-draft"},
                "updateStrategy": {"type": "ServerSideApply",
                                   "serverSideApply": {"force": true, "fieldManager": "hub-deploy"}},
            }])
        );
        // Not approved and no sizing: nothing to apply onto the draft, and never a false
        // approval that would withdraw one given on the site.
        let plain = manifest_work(&request(None, None, false), true);
        assert_eq!(
            plain["spec"]["workload"]["manifests"]
                .as_array()
                .map(Vec::len),
            Some(1)
        );
        let sized = manifest_work(
            &request(
                None,
                Some(SiteSizing {
                    vcpu_count: Some(2),
                    ..SiteSizing::default()
                }),
                false,
            ),
            true,
        );
        assert!(
            sized["spec"]["workload"]["manifests"][1]["spec"]
                .get("approved")
                .is_none()
        );
    }

    #[test]
    fn delivery_reads_the_work_status() {
        assert_eq!(delivery(&json!({})), (false, None));
        let applied = json!({"status": {"conditions": [{"type": "Applied", "status": "True"}]}});
        assert_eq!(delivery(&applied), (true, None));
        let refused = json!({"status": {
            "conditions": [{"type": "Applied", "status": "False"}],
            "resourceStatus": {"manifests": [
                {"resourceMeta": {"kind": "OperatorOps", "name": "d"},
                 "conditions": [{"type": "Applied", "status": "True"}]},
                {"resourceMeta": {"kind": "ClusterDeploymentConfig", "name": "site-draft"},
                 "conditions": [{"type": "Applied", "status": "False", "message": "denied: too few workers"}]},
            ]},
        }});
        assert_eq!(
            delivery(&refused),
            (
                false,
                Some(
                    "ClusterDeploymentConfig site-draft was not applied: denied: too few workers"
                        .into()
                )
            )
        );
    }

    #[test]
    fn the_draft_counts_only_node_sets_with_workers() {
        let object = json!({
            "metadata": {"name": "site-draft"},
            "spec": {"approved": true, "cluster": {"name": "simplyblock"},
                     "nodeSets": [{"name": "a", "groups": [{"name": "g", "workers": ["w1"]}]},
                                  {"name": "empty", "groups": [{"name": "g", "workers": []}]}]},
            "status": {"phase": "Expanding", "nodeRefs": ["n2", "n1"]},
        });
        let draft = read_draft(&object);
        assert_eq!(draft.node_sets, ["a"]);
        assert_eq!(draft.phase, Some(DeploymentPhase::Expanding));
        assert_eq!(draft.cluster.as_deref(), Some("simplyblock"));
        assert!(draft.approved);
        assert_eq!(node_targets(&draft), ["n1", "n2"]);
        // A draft the site has not reviewed yet is a Draft.
        assert_eq!(
            read_draft(&json!({"metadata": {"name": "d"}})).phase,
            Some(DeploymentPhase::Draft)
        );
    }

    #[test]
    fn at_most_64_nodes_are_read_back() {
        let draft = SiteDraft {
            node_refs: (0..100).map(|i| format!("n{i:03}")).collect(),
            ..SiteDraft::default()
        };
        let targets = node_targets(&draft);
        assert_eq!(targets.len(), MAX_NODE_VIEWS);
        assert_eq!(targets.first().map(String::as_str), Some("n000"));
    }

    #[test]
    fn the_cluster_pool_is_the_recorded_one_or_the_default() {
        let read = read_cluster(
            "simplyblock",
            Some(
                &json!({"metadata": {"annotations": {DEFAULT_POOL_ANNOTATION: "mine"}},
                         "status": {"uuid": "u-1", "phase": "Online"}}),
            ),
        );
        assert_eq!(read.pool.as_deref(), Some("mine"));
        assert_eq!(read.uuid.as_deref(), Some("u-1"));
        let unread = read_cluster("simplyblock", None);
        assert_eq!(unread.pool.as_deref(), Some("simplyblock-default"));
        assert_eq!(unread.phase, None);
    }

    #[test]
    fn conditions_keep_their_transition_time_while_they_hold() {
        let then = jiff::Timestamp::from_second(1_000).expect("time");
        let later = jiff::Timestamp::from_second(2_000).expect("time");
        let mut req = request(None, None, false);
        let undelivered = SiteState::default();
        req.status = Some(status(&req, &undelivered, then));
        let delivered = SiteState {
            delivered: true,
            ..SiteState::default()
        };
        let next = status(&req, &delivered, later);
        let at = |s: &StorageSiteDeploymentStatus, t: &str| {
            s.conditions
                .iter()
                .find(|c| c.type_ == t)
                .map(|c| c.last_transition_time.0)
        };
        assert_eq!(at(&next, "Delivered"), Some(later), "it changed");
        assert_eq!(at(&next, "Ready"), Some(then), "it did not");
        assert_eq!(next.phase, SitePhase::Discovering);
        assert_eq!(next.observed_generation, Some(3));
        assert_eq!(next.work_name, Some(work_name(&req)));
        // The same reading twice is the same status: nothing is written.
        req.status = Some(next.clone());
        assert_eq!(status(&req, &delivered, later), next);
    }

    #[test]
    fn settled_requests_are_read_less_often() {
        assert_eq!(requeue(SitePhase::Online), SETTLED_REQUEUE);
        assert_eq!(requeue(SitePhase::Failed), SETTLED_REQUEUE);
        for phase in [
            SitePhase::Pending,
            SitePhase::Discovering,
            SitePhase::Drafted,
            SitePhase::Deploying,
        ] {
            assert_eq!(requeue(phase), REQUEUE);
        }
    }
}

//! The SimplyblockDriver controller against a real API server: the install, its phases
//! as the plugins come and go, snapshots as the cluster serves their API or not, one
//! driver per cluster, the adoption of a Helm install (and its refusal), the removal, and
//! a crash in the middle of an install.
//!
//! Each test has an API server of its own: the driver's roles and registration are
//! cluster-wide, and a cluster has one driver. No kubelet runs: the stand-in reports the
//! workloads' pods ready (or as many as a test's annotation says), and a DaemonSet
//! scheduled on every Node its selector matches.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use simplyblock_api::SimplyblockDriver;
use simplyblock_api::keys::{APPLIED_DIGEST_ANNOTATION, MANAGED_BY_LABEL};
use simplyblock_api::simplyblock_driver::{
    DriverPhase, Origin, SimplyblockDriverStatus, SnapshotSupport,
};
use simplyblock_operator::driver::adoption::{
    HELM_ANNOTATIONS, HELM_LABELS, RESOURCE_POLICY_ANNOTATION, RESOURCE_POLICY_KEEP,
};
use simplyblock_operator::driver::controller::{self, CONTROLLER};
use simplyblock_operator::driver::manifests::{self, Settings};
use simplyblock_operator::driver::names::{
    CONTROLLER_ACCOUNT, CONTROLLER_STATEFULSET, Component, GROUP_SNAPSHOT_CLASS, NODE_ACCOUNT,
    NODE_DAEMONSET, SNAPSHOT_CLASS,
};
use simplyblock_operator::driver::objects::{Kind, ObjectKey};
use simplyblock_operator::driver::observe;
use simplyblock_operator::driver::rbac::{self, Scope};
use simplyblock_operator::runtime::context::Context;
use simplyblock_operator::webhooks;
use simplyblock_testenv::TestEnv;
use simplyblock_testenv::standin::{READY_ANNOTATION, StandIn};

use crate::support::{
    PATIENCE, events, group_snapshot_crds, nudged, operator_command, operator_kube_on,
    own_api_server, passes, until, until_explained,
};

const OPERATOR_IMAGE: &str = "quay.io/simplyblock-io/simplyblock-operator:v26.4.0";
const CSI_IMAGE: &str = "quay.io/simplyblock-io/simplyblock-csi:v26.4.0";
const DRIVER: &str = "simplyblock";
const CSI_DRIVER: &str = "csi.simplyblock.io";
const NODES: usize = 3;

/// Counts the requests that write (every method but GET: a watch is a GET), so a test
/// can tell a pass that wrote nothing from one whose writes changed nothing.
#[derive(Clone, Default)]
struct CountWrites(Arc<AtomicUsize>);

impl<S> tower::Layer<S> for CountWrites {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            writes: self.0.clone(),
        }
    }
}

#[derive(Clone)]
struct Counted<S> {
    inner: S,
    writes: Arc<AtomicUsize>,
}

impl<S, B> tower::Service<http::Request<B>> for Counted<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> S::Future {
        if request.method() != http::Method::GET {
            self.writes.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.call(request)
    }
}

/// An operator's context, and the writes its client has made.
struct Operator {
    ctx: Arc<Context>,
    writes: CountWrites,
}

impl Operator {
    fn writes(&self) -> usize {
        self.writes.0.load(Ordering::SeqCst)
    }
}

/// Aborts a task when dropped.
struct Running(tokio::task::JoinHandle<()>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// An API server of the test's own with [`NODES`] Nodes, the stand-in, the operator's
/// webhooks, and the operator's ServiceAccount in `ns` (its namespace).
struct Cluster {
    env: TestEnv,
    kube: kube::Client,
    operator: kube::Client,
    operator_token: String,
    ns: String,
    _standin: StandIn,
    _webhooks: Running,
}

/// The operator's webhooks, served from this test's runtime and registered as `operator`.
async fn serve_webhooks(operator: &kube::Client, ns: &str) -> Running {
    Running(crate::support::serve_webhooks(operator, ns, false).await)
}

async fn cluster(ns: &str) -> Cluster {
    crate::support::logs();
    let (env, kube) = own_api_server(ns).await;
    let operator = operator_kube_on(&env, ns).await;
    let operator_token = env
        .service_account_token(ns, simplyblock_testenv::chart::OPERATOR_ACCOUNT)
        .await
        .expect("the operator's token");
    let nodes: Api<Node> = Api::all(kube.clone());
    for i in 1..=NODES {
        let node: Node =
            serde_json::from_value(json!({"metadata": {"name": format!("w{i}")}})).expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("node");
    }
    let webhooks = serve_webhooks(&operator, ns).await;
    Cluster {
        _standin: StandIn::start(kube.clone(), Some(ns.into())),
        _webhooks: webhooks,
        env,
        kube,
        operator,
        operator_token,
        ns: ns.into(),
    }
}

impl Cluster {
    /// A fresh operator: its own client (its writes counted) and metrics, watching every
    /// namespace.
    fn operator(&self) -> Operator {
        let writes = CountWrites::default();
        let mut config = self.env.config().clone();
        config.auth_info = kube::config::AuthInfo {
            token: Some(self.operator_token.clone().into()),
            ..Default::default()
        };
        let client = kube::client::ClientBuilder::try_from(config)
            .expect("client")
            .with_layer(&writes)
            .build();
        let cp = crate::support::cp_client("http://127.0.0.1:9");
        let ctx = Arc::new(Context::new(
            client,
            cp,
            "http://127.0.0.1:9".into(),
            self.ns.clone(),
        ));
        Operator { ctx, writes }
    }

    /// The controller of `operator`, until dropped.
    fn start(&self, operator: &Operator) -> Running {
        Running(tokio::spawn(controller::run(
            operator.ctx.clone(),
            OPERATOR_IMAGE.into(),
        )))
    }

    fn drivers(&self, ns: &str) -> Api<SimplyblockDriver> {
        Api::namespaced(self.kube.clone(), ns)
    }

    async fn create(
        &self,
        ns: &str,
        name: &str,
        spec: Value,
    ) -> Result<SimplyblockDriver, kube::Error> {
        self.drivers(ns)
            .create(&PostParams::default(), &driver(name, spec))
            .await
    }

    /// Whether a driver `ns/name` would be admitted now: a dry run, which the webhooks
    /// answer as they would the create.
    async fn admitted(&self, ns: &str, name: &str) -> Result<(), kube::Error> {
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        self.drivers(ns)
            .create(&dry_run, &driver(name, json!({})))
            .await
            .map(|_| ())
    }

    /// Waits until the status of `ns/name` satisfies `check`.
    async fn status_where(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        check: impl Fn(&SimplyblockDriverStatus) -> bool,
    ) -> SimplyblockDriverStatus {
        let last = std::sync::Mutex::new(None);
        until_explained(
            &format!("{ns}/{name}: {what}"),
            PATIENCE,
            async || {
                let status = self.drivers(ns).get(name).await.ok()?.status?;
                *last.lock().expect("lock") = Some(status.clone());
                check(&status).then_some(status)
            },
            || format!("last seen {:?}", last.lock().expect("lock")),
        )
        .await
    }

    async fn phase_is(&self, ns: &str, name: &str, phase: DriverPhase) -> SimplyblockDriverStatus {
        self.status_where(ns, name, &format!("{phase:?}"), |s| s.phase == phase)
            .await
    }

    /// The live object, or `None`; a kind the cluster does not serve has none.
    async fn object(&self, key: &ObjectKey) -> Option<Value> {
        match observe::api(&self.kube, key.kind, &self.ns)
            .get_opt(&key.name)
            .await
        {
            Ok(found) => found.map(|o| serde_json::to_value(o).expect("json")),
            Err(kube::Error::Api(s)) if s.code == 404 => None,
            Err(e) => panic!("{key}: {e}"),
        }
    }

    /// What each of `keys` that exists holds, less its status: a write of anyone but the
    /// workload controllers changes it.
    async fn versions(&self, keys: &[ObjectKey]) -> BTreeMap<ObjectKey, String> {
        let mut out = BTreeMap::new();
        for key in keys {
            if let Some(mut o) = self.object(key).await {
                // What the stand-in for the workload controllers reports moves the
                // resourceVersion at any time; only what else the object holds counts.
                o["status"] = Value::Null;
                o["metadata"]["resourceVersion"] = Value::Null;
                o["metadata"]["managedFields"] = Value::Null;
                out.insert(key.clone(), o.to_string());
            }
        }
        out
    }

    /// Annotates a workload so the stand-in reports `ready` pods of it.
    async fn report_ready(&self, kind: Kind, name: &str, ready: i32) {
        observe::api(&self.kube, kind, &self.ns)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {READY_ANNOTATION: ready.to_string()}}}),
                ),
            )
            .await
            .expect("annotate");
    }
}

fn driver(name: &str, spec: Value) -> SimplyblockDriver {
    serde_json::from_value(json!({
        "apiVersion": simplyblock_api::API_VERSION, "kind": "SimplyblockDriver",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("driver")
}

/// Every object a default driver consists of where snapshots are (not) served.
fn default_keys(snapshot_api: bool) -> Vec<ObjectKey> {
    manifests::every_key(CSI_DRIVER, snapshot_api, false)
}

/// Whether the API server lets ServiceAccount `ns/account` do `verb` on `resource` of
/// `group` (in `namespace`, for a namespaced one).
async fn may(
    kube: &kube::Client,
    ns: &str,
    account: &str,
    verb: &str,
    (group, resource, namespace): (&str, &str, Option<&str>),
) -> bool {
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": format!("system:serviceaccount:{ns}:{account}"),
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{ns}")],
            "resourceAttributes": {"group": group, "resource": resource, "verb": verb,
                                   "namespace": namespace},
        }
    }))
    .expect("review");
    Api::<SubjectAccessReview>::all(kube.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("a SubjectAccessReview")
        .status
        .is_some_and(|s| s.allowed)
}

/// The operator wrote no role or binding, and the chart's bindings give each of the
/// driver's accounts in `c.ns` its role: the sidecars may do what they do, and no more.
async fn the_pods_permissions_are_the_charts(c: &Cluster) {
    let managed =
        kube::api::ListParams::default().labels(&format!("{MANAGED_BY_LABEL}=simplyblockdriver"));
    async fn count<K>(api: Api<K>, selector: &kube::api::ListParams) -> usize
    where
        K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
    {
        api.list_metadata(selector).await.expect("list").items.len()
    }
    let written = [
        count(Api::<ClusterRole>::all(c.kube.clone()), &managed).await,
        count(Api::<ClusterRoleBinding>::all(c.kube.clone()), &managed).await,
        count(Api::<Role>::namespaced(c.kube.clone(), &c.ns), &managed).await,
        count(
            Api::<RoleBinding>::namespaced(c.kube.clone(), &c.ns),
            &managed,
        )
        .await,
    ];
    assert_eq!(written, [0; 4], "the operator wrote RBAC objects");
    for grant in rbac::grants() {
        let (meta, role_ref, subjects) = match grant.scope {
            Scope::Cluster => {
                let b = Api::<ClusterRoleBinding>::all(c.kube.clone())
                    .get(&grant.name)
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e}", grant.binding_key()));
                (b.metadata, b.role_ref, b.subjects)
            }
            Scope::Namespace => {
                let b = Api::<RoleBinding>::namespaced(c.kube.clone(), &c.ns)
                    .get(&grant.name)
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e}", grant.binding_key()));
                (b.metadata, b.role_ref, b.subjects)
            }
        };
        let labels = meta.labels.unwrap_or_default();
        assert_eq!(
            labels
                .get("app.kubernetes.io/managed-by")
                .map(String::as_str),
            Some("Helm"),
            "{}: the chart's",
            grant.binding_key()
        );
        assert_eq!(
            (role_ref.kind.as_str(), role_ref.name.as_str()),
            (grant.role_kind(), grant.name.as_str())
        );
        assert!(
            subjects.iter().flatten().any(|s| s.kind == "ServiceAccount"
                && s.name == grant.account
                && s.namespace.as_deref() == Some(c.ns.as_str())),
            "{}: {subjects:?}",
            grant.binding_key()
        );
    }
    let ns = c.ns.as_str();
    let k = &c.kube;
    assert!(may(k, ns, NODE_ACCOUNT, "get", ("", "nodes", None)).await);
    assert!(
        !may(
            k,
            ns,
            NODE_ACCOUNT,
            "create",
            ("", "persistentvolumes", None)
        )
        .await
    );
    assert!(
        may(
            k,
            ns,
            CONTROLLER_ACCOUNT,
            "create",
            ("", "persistentvolumes", None)
        )
        .await
    );
    assert!(
        may(
            k,
            ns,
            CONTROLLER_ACCOUNT,
            "patch",
            ("storage.k8s.io", "volumeattachments", None)
        )
        .await
    );
    assert!(
        may(
            k,
            ns,
            CONTROLLER_ACCOUNT,
            "update",
            ("coordination.k8s.io", "leases", Some(ns))
        )
        .await
    );
    assert!(!may(k, ns, CONTROLLER_ACCOUNT, "get", ("", "secrets", Some(ns))).await);
}

fn containers(statefulset: &Value) -> Vec<String> {
    statefulset["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_owned))
        .collect()
}

/// The controller's passes that failed: a pass that ended with an error wrote nothing
/// only because it failed.
fn errors(ctx: &Context) -> f64 {
    ctx.metrics
        .sample(
            "simplyblock_reconcile_total",
            &[("controller", CONTROLLER), ("result", "error")],
        )
        .unwrap_or(0.0)
}

#[tokio::test]
async fn an_install_goes_ready_follows_its_plugins_and_goes_with_its_driver() {
    let c = cluster("drv-install").await;
    let op = c.operator();
    let _controller = c.start(&op);
    let ctx = &op.ctx;
    // Without the chart's binding of the node plugin's role: held, and nothing written.
    let node_binding = Component::Node.binding();
    Api::<ClusterRoleBinding>::all(c.kube.clone())
        .delete(&node_binding, &DeleteParams::default())
        .await
        .expect("delete the chart's binding");
    let created = c.create(&c.ns, DRIVER, json!({})).await.expect("driver");
    let held = c
        .status_where(&c.ns, DRIVER, "held for its permissions", |s| {
            s.message.as_deref().is_some_and(|m| {
                m.contains(&format!("ClusterRoleBinding/{node_binding} is missing"))
            })
        })
        .await;
    assert_eq!(held.phase, DriverPhase::Installing);
    assert!(
        held.message
            .as_deref()
            .is_some_and(|m| m.contains("install or upgrade the simplyblock-operator chart")),
        "{held:?}"
    );
    assert_eq!(
        events(&c.kube, &c.ns, Some(DRIVER), "PermissionsMissing")
            .await
            .len(),
        1
    );
    assert!(c.versions(&default_keys(false)).await.is_empty());
    // The chart installed again (`helm upgrade`): the next pass installs.
    simplyblock_testenv::chart::install_identity(&c.env, &c.ns)
        .await
        .expect("the chart's roles again");
    nudged(&ctx.metrics, &c.drivers(&c.ns), CONTROLLER, DRIVER).await;

    let status = c.phase_is(&c.ns, DRIVER, DriverPhase::Ready).await;
    crate::kubectl::ready_on(
        c.env.kubeconfig_path(),
        &c.drivers(&c.ns),
        "simplyblockdrivers.storage.simplyblock.io",
        DRIVER,
    )
    .await;
    assert_eq!((status.nodes_ready, status.nodes_total), (3, 3));
    assert!(status.controller_ready);
    assert_eq!(status.origin, Some(Origin::Created));
    assert_eq!(status.version.as_deref(), Some("v26.4.0"));
    assert_eq!(status.snapshot_support, Some(SnapshotSupport::Missing));
    assert_eq!(status.observed_generation, created.metadata.generation);

    let uid = c.drivers(&c.ns).get(DRIVER).await.expect("driver").uid();
    for key in default_keys(false) {
        let object = c
            .object(&key)
            .await
            .unwrap_or_else(|| panic!("{key} missing"));
        let meta = &object["metadata"];
        assert_eq!(
            meta["labels"][MANAGED_BY_LABEL], "simplyblockdriver",
            "{key}"
        );
        assert!(
            meta["annotations"][APPLIED_DIGEST_ANNOTATION].is_string(),
            "{key}"
        );
        if key.kind.namespaced() {
            let owners = meta["ownerReferences"].as_array().expect("owners");
            assert_eq!(owners.len(), 1, "{key}");
            assert_eq!(owners[0]["uid"].as_str(), uid.as_deref(), "{key}");
            assert_eq!(owners[0]["controller"], true, "{key}");
        } else {
            assert!(meta["ownerReferences"].is_null(), "{key}");
        }
    }
    let sts = c
        .object(&ObjectKey::new(Kind::StatefulSet, CONTROLLER_STATEFULSET))
        .await
        .expect("controller");
    assert_eq!(
        sts["spec"]["template"]["spec"]["containers"][0]["image"],
        CSI_IMAGE
    );
    assert!(!containers(&sts).contains(&"csi-snapshotter".to_owned()));
    let csi_driver = c
        .object(&ObjectKey::new(Kind::CsiDriver, CSI_DRIVER))
        .await
        .expect("CSIDriver");
    assert_eq!(csi_driver["spec"]["attachRequired"], false);
    assert_eq!(
        csi_driver["spec"]["volumeLifecycleModes"],
        json!(["Persistent"])
    );
    // The driver's pods hold what the chart grants them, and the operator granted nothing.
    the_pods_permissions_are_the_charts(&c).await;
    assert!(
        !events(&c.kube, &c.ns, Some(DRIVER), "Ready")
            .await
            .is_empty()
    );
    let labels = [("namespace", c.ns.as_str()), ("name", DRIVER)];
    let m = &ctx.metrics;
    until("the metrics of a ready driver", async || {
        let ready = m.sample("simplyblock_simplyblockdriver_nodes_ready_count", &labels)?;
        (ready == 3.0).then_some(())
    })
    .await;
    assert_eq!(
        m.sample(
            "simplyblock_simplyblockdriver_nodes_expected_count",
            &labels
        ),
        Some(3.0)
    );
    assert_eq!(
        m.sample(
            "simplyblock_simplyblockdriver_controller_ready_state",
            &labels
        ),
        Some(1.0)
    );
    assert_eq!(
        m.sample(
            "simplyblock_simplyblockdriver_version_info",
            &[
                ("namespace", c.ns.as_str()),
                ("name", DRIVER),
                ("version", "v26.4.0")
            ]
        ),
        Some(1.0)
    );

    // A node plugin not ready: Degraded.
    c.report_ready(Kind::DaemonSet, NODE_DAEMONSET, 2).await;
    let status = c.phase_is(&c.ns, DRIVER, DriverPhase::Degraded).await;
    assert_eq!((status.nodes_ready, status.nodes_total), (2, 3));
    assert!(
        !events(&c.kube, &c.ns, Some(DRIVER), "Degraded")
            .await
            .is_empty()
    );

    // The controller plugin not ready: Unavailable.
    c.report_ready(Kind::StatefulSet, CONTROLLER_STATEFULSET, 0)
        .await;
    let status = c.phase_is(&c.ns, DRIVER, DriverPhase::Unavailable).await;
    assert!(!status.controller_ready);
    assert_eq!(
        m.sample(
            "simplyblock_simplyblockdriver_controller_ready_state",
            &labels
        ),
        Some(0.0)
    );

    // Deleted: its cluster-scoped objects go with it.
    c.drivers(&c.ns)
        .delete(DRIVER, &DeleteParams::default())
        .await
        .expect("delete");
    until("the driver gone", async || {
        c.drivers(&c.ns)
            .get_opt(DRIVER)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    for key in default_keys(false)
        .into_iter()
        .filter(|k| !k.kind.namespaced())
    {
        assert!(c.object(&key).await.is_none(), "{key} outlived its driver");
    }
    assert_eq!(
        m.sample("simplyblock_simplyblockdriver_nodes_ready_count", &labels),
        None
    );
}

/// The snapshot API's VolumeSnapshotClass, as the external-snapshotter's CRD serves it
/// (any fields).
fn volume_snapshot_class_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "volumesnapshotclasses.snapshot.storage.k8s.io",
                     // A *.k8s.io group needs its API review named, as upstream's CRD does.
                     "annotations": {"api-approved.kubernetes.io":
                                     "https://github.com/kubernetes-csi/external-snapshotter/pull/814"}},
        "spec": {
            "group": "snapshot.storage.k8s.io",
            "names": {"kind": "VolumeSnapshotClass", "listKind": "VolumeSnapshotClassList",
                      "plural": "volumesnapshotclasses", "singular": "volumesnapshotclass"},
            "scope": "Cluster",
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {
                              "type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .expect("CRD")
}

#[tokio::test]
async fn snapshots_are_missing_until_their_api_is_served_and_then_installed() {
    let c = cluster("drv-snapshots").await;
    let op = c.operator();
    let _controller = c.start(&op);
    let ctx = &op.ctx;
    c.create(&c.ns, DRIVER, json!({})).await.expect("driver");
    let status = c.phase_is(&c.ns, DRIVER, DriverPhase::Ready).await;
    assert_eq!(status.snapshot_support, Some(SnapshotSupport::Missing));
    assert!(
        status
            .message
            .is_some_and(|m| m.contains("snapshot.storage.k8s.io/v1"))
    );
    let class = ObjectKey::new(Kind::VolumeSnapshotClass, SNAPSHOT_CLASS);
    assert!(c.object(&class).await.is_none());

    c.env
        .install_crds(&[volume_snapshot_class_crd()])
        .await
        .expect("the snapshot CRD");
    // Nothing the controller watches changed: it looks again when nudged.
    let drivers = c.drivers(&c.ns);
    until("snapshots detected", async || {
        nudged(&ctx.metrics, &drivers, CONTROLLER, DRIVER).await;
        let status = drivers.get(DRIVER).await.ok()?.status?;
        (status.snapshot_support == Some(SnapshotSupport::Detected)).then_some(())
    })
    .await;
    let installed = c.object(&class).await.expect("the VolumeSnapshotClass");
    assert_eq!(installed["driver"], CSI_DRIVER);
    assert_eq!(installed["deletionPolicy"], "Delete");
    assert_eq!(
        installed["metadata"]["labels"][MANAGED_BY_LABEL],
        "simplyblockdriver"
    );
    let sts = ObjectKey::new(Kind::StatefulSet, CONTROLLER_STATEFULSET);
    let snapshotter = async || {
        containers(&c.object(&sts).await.expect("controller"))
            .contains(&"csi-snapshotter".to_owned())
    };
    assert!(snapshotter().await);

    // Turned off: the class goes, and so does the sidecar.
    drivers
        .patch(
            DRIVER,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"enableVolumeSnapshots": false}})),
        )
        .await
        .expect("turn snapshots off");
    until("the class removed", async || {
        c.object(&class).await.is_none().then_some(())
    })
    .await;
    assert!(!snapshotter().await);
    let status = c
        .status_where(&c.ns, DRIVER, "no snapshot support reported", |s| {
            s.snapshot_support.is_none()
        })
        .await;
    assert_eq!(status.phase, DriverPhase::Ready);
}

/// The snapshotter's arguments in the live controller StatefulSet.
fn snapshotter_args(statefulset: &Value) -> Vec<String> {
    statefulset["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "csi-snapshotter")
        .map(|c| serde_json::from_value(c["args"].clone()).expect("args"))
        .expect("the snapshotter")
}

#[tokio::test]
async fn the_group_snapshot_gate_is_set_once_the_group_snapshot_api_is_served() {
    const GATE: &str = "--feature-gates=CSIVolumeGroupSnapshot=true";
    let c = cluster("drv-group-snapshots").await;
    c.env
        .install_crds(&[volume_snapshot_class_crd()])
        .await
        .expect("the snapshot CRD");
    let op = c.operator();
    let _controller = c.start(&op);
    let ctx = &op.ctx;
    c.create(&c.ns, DRIVER, json!({})).await.expect("driver");

    // Snapshots served, group snapshots not: the snapshotter runs without the gate, with
    // which it would wait for the missing API; status says what to install.
    let status = c
        .status_where(&c.ns, DRIVER, "snapshots detected", |s| {
            s.snapshot_support == Some(SnapshotSupport::Detected)
        })
        .await;
    assert!(
        status
            .message
            .as_deref()
            .is_some_and(|m| m.contains("groupsnapshot.storage.k8s.io/v1beta1")),
        "{status:?}"
    );
    let sts = ObjectKey::new(Kind::StatefulSet, CONTROLLER_STATEFULSET);
    let args = snapshotter_args(&c.object(&sts).await.expect("controller"));
    assert!(args.iter().any(|a| a == "--timeout=150s"), "{args:?}");
    assert!(!args.iter().any(|a| a == GATE), "{args:?}");
    let class = ObjectKey::new(Kind::VolumeGroupSnapshotClass, GROUP_SNAPSHOT_CLASS);
    assert!(c.object(&class).await.is_none());

    c.env
        .install_crds(&group_snapshot_crds())
        .await
        .expect("the group-snapshot CRDs");
    // Nothing the controller watches changed: it looks again when nudged (or resyncs).
    let drivers = c.drivers(&c.ns);
    until("the gated snapshotter", async || {
        nudged(&ctx.metrics, &drivers, CONTROLLER, DRIVER).await;
        let live = c.object(&sts).await?;
        snapshotter_args(&live)
            .iter()
            .any(|a| a == GATE)
            .then_some(())
    })
    .await;
    // Written by the operator under the chart's role.
    let installed = c
        .object(&class)
        .await
        .expect("the VolumeGroupSnapshotClass");
    assert_eq!(
        installed["apiVersion"],
        "groupsnapshot.storage.k8s.io/v1beta1"
    );
    assert_eq!(installed["driver"], CSI_DRIVER);
    assert_eq!(installed["deletionPolicy"], "Delete");
    assert_eq!(
        installed["metadata"]["labels"][MANAGED_BY_LABEL],
        "simplyblockdriver"
    );
    let status = c
        .status_where(&c.ns, DRIVER, "no group-snapshot hint", |s| {
            s.message
                .as_deref()
                .is_some_and(|m| !m.contains("groupsnapshot"))
        })
        .await;
    assert_eq!(status.snapshot_support, Some(SnapshotSupport::Detected));
    assert_eq!(errors(ctx), 0.0);

    // Deleted: the class goes with the driver's other cluster-scoped objects.
    drivers
        .delete(DRIVER, &DeleteParams::default())
        .await
        .expect("delete");
    until("the driver gone", async || {
        drivers.get_opt(DRIVER).await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(
        c.object(&class).await.is_none(),
        "{class} outlived its driver"
    );
}

#[tokio::test]
async fn a_cluster_has_one_driver() {
    let c = cluster("drv-singleton").await;
    c.create(&c.ns, "first", json!({})).await.expect("first");
    // The second gets in as one created before the webhook was registered (or while it
    // could not be reached) does: with the webhooks gone.
    let config: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(c.kube.clone());
    config
        .delete(webhooks::CONFIGURATION_NAME, &DeleteParams::default())
        .await
        .expect("unregister the webhooks");
    until("the webhooks unregistered", async || {
        c.admitted(&c.ns, "second").await.ok()
    })
    .await;
    c.create(&c.ns, "second", json!({}))
        .await
        .expect("second, unchecked");
    // The operator may create no webhook configuration: the chart's is there again (as a
    // `helm upgrade` puts it back), and the operator fills it.
    simplyblock_testenv::chart::webhook_placeholder(&c.kube)
        .await
        .expect("the chart's webhook configuration");
    let _webhooks = serve_webhooks(&c.operator, &c.ns).await;
    until("the webhooks registered again", async || {
        c.admitted(&c.ns, "third").await.err()
    })
    .await;
    let refused = c
        .create(&c.ns, "third", json!({}))
        .await
        .expect_err("a third driver is refused");
    match refused {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(s.message.contains("first"), "{}", s.message);
            assert!(s.message.contains("one CSI driver"), "{}", s.message);
        }
        other => panic!("refused otherwise: {other}"),
    }

    let op = c.operator();
    let _controller = c.start(&op);
    c.phase_is(&c.ns, "first", DriverPhase::Ready).await;
    let held = c.phase_is(&c.ns, "second", DriverPhase::Installing).await;
    let message = held.message.expect("a message");
    assert!(message.contains(&format!("{}/first", c.ns)), "{message}");
    let reported = events(&c.kube, &c.ns, Some("second"), "DuplicateDriver").await;
    assert_eq!(reported.len(), 1, "{reported:?}");
    // The held driver touched nothing of the first's.
    let sts = c
        .object(&ObjectKey::new(Kind::StatefulSet, CONTROLLER_STATEFULSET))
        .await
        .expect("controller");
    assert_eq!(sts["metadata"]["ownerReferences"][0]["name"], "first");

    // The first deleted, the second takes over.
    c.drivers(&c.ns)
        .delete("first", &DeleteParams::default())
        .await
        .expect("delete");
    let status = c.phase_is(&c.ns, "second", DriverPhase::Ready).await;
    assert_eq!(status.origin, Some(Origin::Created));
    let second = c.drivers(&c.ns).get("second").await.expect("second").uid();
    let sts = c
        .object(&ObjectKey::new(Kind::StatefulSet, CONTROLLER_STATEFULSET))
        .await
        .expect("controller");
    let owners = sts["metadata"]["ownerReferences"]
        .as_array()
        .expect("owners");
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(owners[0]["uid"].as_str(), second.as_deref());
    for key in default_keys(false)
        .into_iter()
        .filter(|k| !k.kind.namespaced())
    {
        assert!(c.object(&key).await.is_some(), "{key} not installed again");
    }
}

/// What the Helm release `csi` installed: the objects a default driver has, as the chart
/// rendered them (the reference driver's arguments, an environment variable and a volume
/// of its own, the controller on the host network), labelled as Helm labels its objects.
fn helm_install(ns: &str) -> Vec<(ObjectKey, Value)> {
    let template: SimplyblockDriver = serde_json::from_value(json!({
        "apiVersion": simplyblock_api::API_VERSION, "kind": "SimplyblockDriver",
        "metadata": {"name": "template", "namespace": ns, "uid": "template"}, "spec": {},
    }))
    .expect("template");
    let objects = manifests::manifests(
        &template,
        Settings {
            image: "quay.io/simplyblock-io/spdk-csi:v0.1.9",
            snapshots: false,
            group_snapshots: false,
            ca: None,
        },
    )
    .objects();
    objects
        .into_iter()
        .map(|(key, mut body)| {
            let name = body["metadata"]["name"].clone();
            body["metadata"] = json!({
                "name": name,
                "labels": {"app.kubernetes.io/managed-by": "Helm", "heritage": "Helm",
                           "release": "csi", "chart": "spdk-csi-0.1.9"},
                "annotations": {"meta.helm.sh/release-name": "csi",
                                "meta.helm.sh/release-namespace": ns},
            });
            if key.kind.namespaced() {
                body["metadata"]["namespace"] = json!(ns);
            }
            let pod = &mut body["spec"]["template"]["spec"];
            match key.kind {
                Kind::DaemonSet => {
                    let node = &mut pod["containers"][1];
                    node["args"] = json!([
                        "--v=5",
                        "--endpoint=unix:///csi/csi.sock",
                        "--nodeid=$(NODE_ID)",
                        "--node"
                    ]);
                    node["env"]
                        .as_array_mut()
                        .expect("env")
                        .push(json!({"name": "GUARDIAN_MIN_BROKEN_FOR", "value": "30s"}));
                    pod["volumes"].as_array_mut().expect("volumes").push(
                        json!({"name": "nvme-hostid-dir", "hostPath": {"path": "/var/lib/nvme"}}),
                    );
                }
                Kind::StatefulSet => pod["hostNetwork"] = json!(true),
                _ => {}
            }
            (key, body)
        })
        .collect()
}

#[tokio::test]
async fn a_helm_install_is_adopted_in_place_unless_it_disagrees_with_the_spec() {
    let c = cluster("drv-adopt").await;
    let installed = helm_install(&c.ns);
    for (key, body) in &installed {
        let object: kube::api::DynamicObject =
            serde_json::from_value(body.clone()).expect("object");
        observe::api(&c.kube, key.kind, &c.ns)
            .create(
                &PostParams {
                    field_manager: Some("helm".into()),
                    ..PostParams::default()
                },
                &object,
            )
            .await
            .unwrap_or_else(|e| panic!("{key}: {e}"));
    }
    let keys: Vec<ObjectKey> = installed.iter().map(|(k, _)| k.clone()).collect();
    // The stand-in's report on the workloads is the last write anyone but the driver makes.
    for kind in [Kind::StatefulSet, Kind::DaemonSet] {
        let key = keys.iter().find(|k| k.kind == kind).expect("workload");
        until(&format!("{key} reported on"), async || {
            let o = c.object(key).await?;
            (!o["status"]["observedGeneration"].is_null()).then_some(())
        })
        .await;
    }
    let helm_versions = c.versions(&keys).await;

    // A driver under another name than the one the release registered: refused, and
    // nothing of the release is touched.
    let op = c.operator();
    let controller = c.start(&op);
    let ctx = &op.ctx;
    c.create(
        &c.ns,
        "renamed",
        json!({"driverName": "other.simplyblock.io"}),
    )
    .await
    .expect("driver");
    let refused = c
        .status_where(&c.ns, "renamed", "adoption refused", |s| {
            s.message
                .as_deref()
                .is_some_and(|m| m.contains("not taken over"))
        })
        .await;
    assert_eq!(refused.phase, DriverPhase::Installing);
    let message = refused.message.expect("message");
    assert!(
        message.contains("installed the driver as csi.simplyblock.io"),
        "{message}"
    );
    assert_eq!(
        events(&c.kube, &c.ns, Some("renamed"), "AdoptionRefused")
            .await
            .len(),
        1
    );
    nudged(&ctx.metrics, &c.drivers(&c.ns), CONTROLLER, "renamed").await;
    assert_eq!(
        c.versions(&keys).await,
        helm_versions,
        "a refused adoption wrote"
    );
    // Deleting it removes nothing of the release's.
    c.drivers(&c.ns)
        .delete("renamed", &DeleteParams::default())
        .await
        .expect("delete");
    until("the refused driver gone", async || {
        c.drivers(&c.ns)
            .get_opt("renamed")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(
        c.versions(&keys).await,
        helm_versions,
        "a refused driver's deletion wrote"
    );

    // The driver the release installed: adopted.
    c.create(&c.ns, DRIVER, json!({})).await.expect("driver");
    let status = c.phase_is(&c.ns, DRIVER, DriverPhase::Ready).await;
    assert_eq!(status.origin, Some(Origin::Adopted));
    let uid = c.drivers(&c.ns).get(DRIVER).await.expect("driver").uid();
    for key in &keys {
        let object = c.object(key).await.unwrap_or_else(|| panic!("{key} gone"));
        let meta = &object["metadata"];
        for label in HELM_LABELS {
            assert!(meta["labels"].get(label).is_none(), "{key} keeps {label}");
        }
        for annotation in HELM_ANNOTATIONS {
            assert!(
                meta["annotations"].get(annotation).is_none(),
                "{key} keeps {annotation}"
            );
        }
        assert_eq!(
            meta["annotations"][RESOURCE_POLICY_ANNOTATION], RESOURCE_POLICY_KEEP,
            "{key}"
        );
        assert_eq!(
            meta["labels"][MANAGED_BY_LABEL], "simplyblockdriver",
            "{key}"
        );
        if key.kind.namespaced() {
            assert_eq!(
                meta["ownerReferences"][0]["uid"].as_str(),
                uid.as_deref(),
                "{key}"
            );
        }
    }
    // The driver's fields were taken over; what only the release wrote stays.
    let ds = c
        .object(&ObjectKey::new(Kind::DaemonSet, NODE_DAEMONSET))
        .await
        .expect("node plugin");
    let node = &ds["spec"]["template"]["spec"]["containers"][1];
    assert_eq!(node["image"], CSI_IMAGE);
    assert_eq!(node["args"][1], "--mode=node");
    assert!(
        node["env"]
            .as_array()
            .is_some_and(|e| e.iter().any(|v| v["name"] == "GUARDIAN_MIN_BROKEN_FOR"))
    );
    assert!(
        !events(&c.kube, &c.ns, Some(DRIVER), "Adopted")
            .await
            .is_empty()
    );

    // A first pass of a new operator over the adopted driver writes nothing.
    drop(controller);
    let adopted = c.versions(&keys).await;
    let before = c.drivers(&c.ns).get(DRIVER).await.expect("driver");
    let fresh = c.operator();
    let _controller = c.start(&fresh);
    passes(&fresh.ctx.metrics, CONTROLLER, &c.ns, DRIVER, 1).await;
    assert_eq!(errors(&fresh.ctx), 0.0);
    assert_eq!(fresh.writes(), 0, "a pass over the adopted driver wrote");
    assert_eq!(
        c.versions(&keys).await,
        adopted,
        "a pass over the adopted driver wrote"
    );
    let after = c.drivers(&c.ns).get(DRIVER).await.expect("driver");
    assert_eq!(before.resource_version(), after.resource_version());
}

#[tokio::test]
async fn an_install_cut_short_by_a_crash_completes_without_duplicates() {
    use std::os::unix::process::ExitStatusExt;
    let c = cluster("drv-crash").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "unused").expect("token");
    let operator = |crash: &str| {
        operator_command(
            &c.env,
            "127.0.0.1:9".parse().expect("an address"),
            &token_file,
            &c.ns,
        )
        .arg("--metrics-addr=off")
        .env("SIMPLYBLOCK_OPERATOR_IMAGE", OPERATOR_IMAGE)
        .env(simplyblock_operator::runtime::crash::ENV, crash)
        .spawn()
        .expect("the operator starts")
    };
    c.create(&c.ns, DRIVER, json!({})).await.expect("driver");

    let mut armed = operator(simplyblock_operator::runtime::crash::DRIVER_APPLY);
    let ended = until("the operator to abort after its first apply", async || {
        armed.try_wait().expect("the operator process")
    })
    .await;
    assert_eq!(ended.signal(), Some(6), "ended otherwise: {ended}");
    let keys = default_keys(false);
    let present = c.versions(&keys).await;
    assert_eq!(
        present.len(),
        1,
        "one object applied before the crash: {present:?}"
    );

    let mut restarted = operator("");
    let status = c.phase_is(&c.ns, DRIVER, DriverPhase::Ready).await;
    assert_eq!(status.origin, Some(Origin::Created));
    restarted.kill().expect("kill");
    restarted.wait().expect("reaped");

    // Every object once, each with one owner.
    let selector = format!("{MANAGED_BY_LABEL}=simplyblockdriver");
    for kind in Kind::ALL {
        let expected = keys.iter().filter(|k| k.kind == kind).count();
        // Not served here.
        if matches!(
            kind,
            Kind::VolumeSnapshotClass | Kind::VolumeGroupSnapshotClass
        ) {
            continue;
        }
        let listed = observe::api(&c.kube, kind, &c.ns)
            .list(&kube::api::ListParams::default().labels(&selector))
            .await
            .expect("list");
        assert_eq!(listed.items.len(), expected, "{kind:?}");
        for o in &listed.items {
            let owners = o.meta().owner_references.as_ref().map_or(0, Vec::len);
            assert_eq!(
                owners,
                usize::from(kind.namespaced()),
                "{kind:?} {}",
                o.name_any()
            );
        }
    }

    // A pass of a fresh operator over the converged install writes nothing.
    let converged = c.versions(&keys).await;
    let before = c.drivers(&c.ns).get(DRIVER).await.expect("driver");
    let op = c.operator();
    let _controller = c.start(&op);
    passes(&op.ctx.metrics, CONTROLLER, &c.ns, DRIVER, 1).await;
    assert_eq!(errors(&op.ctx), 0.0);
    assert_eq!(op.writes(), 0, "a pass over the converged driver wrote");
    assert_eq!(
        c.versions(&keys).await,
        converged,
        "a pass over the converged driver wrote"
    );
    let after = c.drivers(&c.ns).get(DRIVER).await.expect("driver");
    assert_eq!(before.resource_version(), after.resource_version());
}

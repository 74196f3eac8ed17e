//! The ControlPlane controller against a real API server and sbsim (the management API
//! behind the in-cluster Service, reached through sbsim as a proxy) with the stand-in
//! reporting workloads ready and FoundationDB available: a local install through every
//! step to Available with its objects applied and owned, the FoundationDB API not served,
//! components and the probe moving the phase (events only on transitions), a managed
//! control plane and its credentials, the finalizer, a downstream controller holding on
//! the link, and the operator killed at every install step.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use simplyblock_api::StorageCluster;
use simplyblock_api::control_plane::{ControlPlane, ControlPlanePhase, ControlPlaneStatus};
use simplyblock_controlplane::Method;
use simplyblock_operator::controlplane::{controller, manifests};
use simplyblock_operator::runtime::context::Context;
use simplyblock_operator::runtime::link::Token;
use simplyblock_testenv::standin::{self, StandIn};

use crate::support::{
    MANAGED_TLS_ENDPOINT, Sbsim, TOKEN, events, free_port, namespace, nudged, passes, sbsim, until,
};

pub const IMAGE: &str = "quay.io/simplyblock-io/simplyblock:25.10.1";

/// A namespace, an sbsim, the stand-in, and a context whose link the ControlPlane
/// controller publishes; no controller runs until a test starts one.
pub struct Harness {
    pub kube: kube::Client,
    pub ns: String,
    pub sim: Sbsim,
    pub ctx: Arc<Context>,
    _standin: StandIn,
    _tls: [StandIn; 2],
}

/// The FoundationDB and cert-manager CRDs on the shared API server (every test that
/// installs needs them; one that needs them absent has an API server of its own).
async fn foundationdb_crds() {
    crate::support::api_server()
        .await
        .install_crds(&components_crds())
        .await
        .expect("the FoundationDB and cert-manager CRDs");
}

/// The APIs of the components a local control plane is made with: FoundationDB's and
/// cert-manager's.
pub fn components_crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    let mut crds = vec![
        standin::foundationdb_crd(),
        standin::foundationdb_backup_crd(),
    ];
    crds.extend(simplyblock_testenv::certmanager::crds());
    crds
}

pub async fn harness(ns: &str) -> Harness {
    harness_with(ns, sbsim("", 0).await).await
}

/// [`harness`] with sbsim serving TLS as the managed control plane of [`managed`], whose
/// CA is in Secret `cp-ca`.
pub async fn managed_harness(ns: &str) -> Harness {
    let (sim, ca_pem) = crate::support::sbsim_tls("", 0).await;
    let h = harness_with(ns, sim).await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "cp-ca"},
        "stringData": {"ca.crt": ca_pem},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(h.kube.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("CA Secret");
    h
}

async fn harness_with(ns: &str, sim: Sbsim) -> Harness {
    foundationdb_crds().await;
    let kube = crate::support::api_server()
        .await
        .client()
        .await
        .expect("client");
    namespace(&kube, ns).await;
    let ctx = resolving(crate::support::operator_kube().await, ns, &sim);
    Harness {
        _standin: StandIn::start(kube.clone(), Some(ns.into())),
        _tls: crate::support::local_control_plane_tls(&kube, ns, &sim.server),
        kube,
        ns: ns.into(),
        sim,
        ctx,
    }
}

/// A context whose controllers reach the control plane the ControlPlane controller
/// publishes, through sbsim.
pub fn resolving(kube: kube::Client, ns: &str, sim: &Sbsim) -> Arc<Context> {
    Arc::new(
        Context::resolving(kube, ns.into())
            .watching(ns)
            .with_control_plane_token(Token::Value(TOKEN.into()))
            .with_control_plane_proxy(sim.server.addr),
    )
}

/// A ControlPlane `simplyblock` of `source`.
pub fn control_plane(source: Value) -> ControlPlane {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "ControlPlane",
        "metadata": {"name": "simplyblock"},
        "spec": {"source": source},
    }))
    .expect("control plane")
}

/// A local source with its defaults: mutual TLS from cert-manager (the stand-in issues the
/// certificates, sbsim serves the management API's).
pub fn local() -> Value {
    json!({"local": {"image": IMAGE}})
}

impl Harness {
    pub fn start(&self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(controller::run(self.ctx.clone()))
    }

    pub fn cps(&self) -> Api<ControlPlane> {
        Api::namespaced(self.kube.clone(), &self.ns)
    }

    pub async fn create(&self, source: Value) {
        self.cps()
            .create(&PostParams::default(), &control_plane(source))
            .await
            .expect("ControlPlane created");
    }

    pub async fn status(&self) -> ControlPlaneStatus {
        self.cps()
            .get("simplyblock")
            .await
            .expect("ControlPlane")
            .status
            .unwrap_or_default()
    }

    /// Waits until the ControlPlane reads `phase`.
    pub async fn phase_is(&self, phase: ControlPlanePhase) -> ControlPlaneStatus {
        let last = std::sync::Mutex::new(None);
        crate::support::until_explained(
            &format!("the ControlPlane {phase:?}"),
            crate::support::PATIENCE,
            async || {
                let s = self.status().await;
                *last.lock().expect("lock") = Some(s.clone());
                (s.phase == phase && s.step.is_empty()).then_some(s)
            },
            || format!("last seen {:?}", last.lock().expect("lock")),
        )
        .await
    }

    pub async fn events(&self, reason: &str) -> Vec<String> {
        events(&self.kube, &self.ns, Some("simplyblock"), reason).await
    }

    /// How often `reason` was raised on the ControlPlane, repeats of a note included.
    pub async fn occurrences(&self, reason: &str) -> i32 {
        crate::support::occurrences(&self.kube, &self.ns, "simplyblock", reason).await
    }

    /// A pass that started after now has ended.
    pub async fn looked_again(&self) {
        nudged(
            &self.ctx.metrics,
            &self.cps(),
            controller::CONTROLLER,
            "simplyblock",
        )
        .await;
    }

    pub async fn faults(&self, spec: &str) {
        let (method, body) = if spec.is_empty() {
            (Method::DELETE, None)
        } else {
            (Method::PUT, Some(json!({"spec": spec})))
        };
        let r = self
            .sim
            .cp
            .raw(method, "/../../_sim/faults", &[], body.as_ref())
            .await
            .expect("sbsim faults");
        assert!(r.status < 300, "faults: {}", r.status);
    }

    /// Patches `name`'s annotations (a Deployment or StatefulSet) as the stand-in reads them.
    pub async fn ready_replicas<K>(&self, name: &str, ready: Option<i32>)
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let value = ready.map(|n| n.to_string());
        Api::<K>::namespaced(self.kube.clone(), &self.ns)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {standin::READY_ANNOTATION: value}}}),
                ),
            )
            .await
            .expect("annotated");
    }
}

/// `kind/name` → (uid, resourceVersion, generation) of every object a local install makes.
async fn installed_objects(k: &kube::Client, ns: &str) -> BTreeMap<String, (String, String, i64)> {
    let mut out = BTreeMap::new();
    let mut put = |kind: &str, meta: &kube::api::ObjectMeta| {
        out.insert(
            format!("{kind}/{}", meta.name.clone().unwrap_or_default()),
            (
                meta.uid.clone().unwrap_or_default(),
                meta.resource_version.clone().unwrap_or_default(),
                meta.generation.unwrap_or(0),
            ),
        );
    };
    let fdb: Api<DynamicObject> =
        Api::namespaced_with(k.clone(), ns, &manifests::foundationdb_cluster_resource());
    put(
        "FoundationDBCluster",
        &fdb.get("simplyblock-fdb-cluster")
            .await
            .expect("fdb")
            .metadata,
    );
    put(
        "Secret",
        &Api::<Secret>::namespaced(k.clone(), ns)
            .get("simplyblock-minio-credentials")
            .await
            .expect("secret")
            .metadata,
    );
    put(
        "Service",
        &Api::<Service>::namespaced(k.clone(), ns)
            .get("simplyblock-minio")
            .await
            .expect("svc")
            .metadata,
    );
    put(
        "StatefulSet",
        &Api::<StatefulSet>::namespaced(k.clone(), ns)
            .get("simplyblock-minio")
            .await
            .expect("sts")
            .metadata,
    );
    put(
        "ServiceAccount",
        &Api::<ServiceAccount>::namespaced(k.clone(), ns)
            .get("simplyblock-webappapi")
            .await
            .expect("sa")
            .metadata,
    );
    put(
        "ConfigMap",
        &Api::<ConfigMap>::namespaced(k.clone(), ns)
            .get("simplyblock-webappapi-config")
            .await
            .expect("cm")
            .metadata,
    );
    put(
        "Service",
        &Api::<Service>::namespaced(k.clone(), ns)
            .get("simplyblock-webappapi")
            .await
            .expect("svc")
            .metadata,
    );
    put(
        "Service",
        &Api::<Service>::namespaced(k.clone(), ns)
            .get("simplyblock-fdb-exporter")
            .await
            .expect("svc")
            .metadata,
    );
    put(
        "Role",
        &Api::<Role>::namespaced(k.clone(), ns)
            .get("simplyblock-control")
            .await
            .expect("role")
            .metadata,
    );
    put(
        "RoleBinding",
        &Api::<RoleBinding>::namespaced(k.clone(), ns)
            .get("simplyblock-control")
            .await
            .expect("binding")
            .metadata,
    );
    for name in simplyblock_operator::controlplane::names::DEPLOYMENTS {
        put(
            "Deployment",
            &Api::<Deployment>::namespaced(k.clone(), ns)
                .get(name)
                .await
                .expect("deploy")
                .metadata,
        );
    }
    out
}

/// Every object the install made is owned by the ControlPlane (controller reference) and
/// labelled managed-by controlplane.
async fn assert_owned(k: &kube::Client, ns: &str) {
    let cp = Api::<ControlPlane>::namespaced(k.clone(), ns)
        .get("simplyblock")
        .await
        .expect("cp");
    let uid = cp.uid().expect("uid");
    let check = |what: &str, meta: &kube::api::ObjectMeta| {
        let owners = meta.owner_references.clone().unwrap_or_default();
        assert!(
            owners
                .iter()
                .any(|o| o.uid == uid && o.controller == Some(true) && o.kind == "ControlPlane"),
            "{what} is not owned by the ControlPlane: {owners:?}"
        );
        assert_eq!(
            meta.labels
                .as_ref()
                .and_then(|l| l.get("storage.simplyblock.io/managed-by"))
                .map(String::as_str),
            Some("controlplane"),
            "{what}"
        );
    };
    let fdb: Api<DynamicObject> =
        Api::namespaced_with(k.clone(), ns, &manifests::foundationdb_cluster_resource());
    check(
        "the FoundationDBCluster",
        &fdb.get("simplyblock-fdb-cluster")
            .await
            .expect("fdb")
            .metadata,
    );
    check(
        "the object store's Secret",
        &Api::<Secret>::namespaced(k.clone(), ns)
            .get("simplyblock-minio-credentials")
            .await
            .expect("secret")
            .metadata,
    );
    check(
        "the object store's Service",
        &Api::<Service>::namespaced(k.clone(), ns)
            .get("simplyblock-minio")
            .await
            .expect("svc")
            .metadata,
    );
    check(
        "the object store",
        &Api::<StatefulSet>::namespaced(k.clone(), ns)
            .get("simplyblock-minio")
            .await
            .expect("sts")
            .metadata,
    );
    check(
        "the API's ServiceAccount",
        &Api::<ServiceAccount>::namespaced(k.clone(), ns)
            .get("simplyblock-webappapi")
            .await
            .expect("sa")
            .metadata,
    );
    check(
        "the API's ConfigMap",
        &Api::<ConfigMap>::namespaced(k.clone(), ns)
            .get("simplyblock-webappapi-config")
            .await
            .expect("cm")
            .metadata,
    );
    check(
        "the API's Service",
        &Api::<Service>::namespaced(k.clone(), ns)
            .get("simplyblock-webappapi")
            .await
            .expect("svc")
            .metadata,
    );
    check(
        "the API",
        &Api::<Deployment>::namespaced(k.clone(), ns)
            .get("simplyblock-webappapi")
            .await
            .expect("deploy")
            .metadata,
    );
}

#[tokio::test]
async fn a_local_install_goes_through_every_step_to_available() {
    let h = harness("cp-install").await;
    let _c = h.start();
    let began = Instant::now();
    h.create(local()).await;
    let status = h.phase_is(ControlPlanePhase::Available).await;
    println!("installed in {:.2?}", began.elapsed());
    crate::kubectl::ready(
        &h.cps(),
        "controlplanes.storage.simplyblock.io",
        "simplyblock",
    )
    .await;
    let endpoint = format!("https://simplyblock-webappapi.{}.svc:5000", h.ns);
    assert_eq!(status.endpoint.as_deref(), Some(endpoint.as_str()));
    assert!(status.last_checked.is_some());
    assert_eq!(status.message, None);
    let components: Vec<(String, i32, i32, bool)> = status
        .components
        .iter()
        .map(|c| (c.name.clone(), c.desired, c.ready, c.essential))
        .collect();
    assert_eq!(
        components,
        [
            ("simplyblock-admin-control".to_string(), 2, 2, false),
            ("simplyblock-fdb-cluster".to_string(), 3, 3, true),
            ("simplyblock-fdb-exporter".to_string(), 1, 1, false),
            ("simplyblock-minio".to_string(), 1, 1, false),
            ("simplyblock-monitoring".to_string(), 1, 1, false),
            ("simplyblock-tasks".to_string(), 1, 1, false),
            ("simplyblock-webappapi".to_string(), 2, 2, true),
        ]
    );
    assert_owned(&h.kube, &h.ns).await;
    until("the ControlPlaneReady event", async || {
        (h.occurrences("ControlPlaneReady").await == 1).then_some(())
    })
    .await;
    // The link serves every other controller at the in-cluster endpoint.
    assert_eq!(h.ctx.control_plane_endpoint().expect("serving"), endpoint);
    assert!(crate::support::calls(&h.sim.cp, "GET", "/api/v2/_meta/ready").await >= 1);
    // Over mutual TLS, with the client certificate cert-manager issued the operator (sbsim
    // refuses plain HTTP and anonymous clients at the management API's name).
    let probes: Vec<Value> = crate::support::call_log(&h.sim.cp)
        .await
        .into_iter()
        .filter(|c| c["path"] == "/api/v2/_meta/ready")
        .collect();
    assert!(
        probes
            .iter()
            .all(|c| c["client"] == "simplyblock-operator" && c["status"] == 204),
        "{probes:#?}"
    );

    // The steady state re-applies every object each pass and changes none of them.
    let before = installed_objects(&h.kube, &h.ns).await;
    h.looked_again().await;
    // Every step was entered and left once, in a pass of its own. Read once a later pass
    // has ended: the last step is counted when the pass that left it ends.
    for step in [
        "ApplyingFoundationDB",
        "AwaitingFoundationDB",
        "ApplyingDatastore",
        "ApplyingAPI",
        "AwaitingAPI",
    ] {
        let left = h.ctx.metrics.sample(
            "simplyblock_controlplane_install_step_duration_seconds_count",
            &[("namespace", &h.ns), ("step", step)],
        );
        assert_eq!(left, Some(1.0), "{step}");
    }
    h.looked_again().await;
    assert_eq!(
        installed_objects(&h.kube, &h.ns).await,
        before,
        "a pass rewrote an object"
    );
    assert!(
        before.values().all(|(_, _, generation)| *generation <= 1),
        "{before:?}"
    );
    assert_eq!(
        h.occurrences("ControlPlaneReady").await,
        1,
        "an event without a transition"
    );
}

/// The management API trusts its own CA and every storage-node cluster's: it verifies the
/// nodes it calls, and the client certificates they present, against that bundle.
#[tokio::test]
async fn the_management_api_trusts_every_storage_node_ca() {
    use simplyblock_operator::workload::{names, serving};
    let h = harness("cp-trust").await;
    let _c = h.start();
    h.create(local()).await;
    h.phase_is(ControlPlanePhase::Available).await;
    let secrets: Api<Secret> = Api::namespaced(h.kube.clone(), &h.ns);
    let text = |secret: &Secret, key: &str| {
        String::from_utf8(secret.data.as_ref().expect("data")[key].0.clone()).expect("PEM")
    };
    let api_ca = text(
        &secrets
            .get("simplyblock-webappapi-tls")
            .await
            .expect("serving"),
        "ca.crt",
    );
    let trusted = until("the trust Secret", async || {
        Some(text(
            &secrets
                .get_opt("simplyblock-webappapi-trust")
                .await
                .ok()??,
            "ca.crt",
        ))
    })
    .await;
    assert_eq!(trusted.trim(), api_ca.trim(), "no storage-node CA yet");

    // A cluster's storage-node CA appears, as the StorageCluster controller makes it.
    let metadata = kube::api::ObjectMeta {
        name: Some(serving::ca_secret_name("sb")),
        namespace: Some(h.ns.clone()),
        labels: Some(BTreeMap::from([
            (names::CLUSTER_LABEL.to_string(), "sb".to_string()),
            (
                names::MANAGED_BY_LABEL.to_string(),
                names::MANAGED_BY.to_string(),
            ),
        ])),
        ..Default::default()
    };
    let node_ca =
        simplyblock_operator::runtime::ca::ensure(&secrets, &metadata, &serving::CA_POLICY)
            .await
            .expect("a storage-node CA");
    let node_ca = node_ca.authority.cert_pem();
    let trusted = until("the storage-node CA trusted", async || {
        let t = text(
            &secrets
                .get_opt("simplyblock-webappapi-trust")
                .await
                .ok()??,
            "ca.crt",
        );
        t.contains(node_ca.trim()).then_some(t)
    })
    .await;
    assert!(trusted.starts_with(api_ca.trim()), "{trusted}");

    // The API's pods read it as their ca.crt, beside the serving certificate.
    let deployment = Api::<Deployment>::namespaced(h.kube.clone(), &h.ns)
        .get("simplyblock-webappapi")
        .await
        .expect("API Deployment");
    let volumes = deployment.spec.template.spec.expect("pod").volumes;
    let sources = volumes
        .into_iter()
        .flatten()
        .find(|v| v.name == "tls")
        .and_then(|v| v.projected?.sources)
        .expect("a projected tls volume");
    let projected: Vec<(String, Vec<String>)> = sources
        .into_iter()
        .filter_map(|s| s.secret)
        .map(|s| {
            let keys = s.items.into_iter().flatten().map(|i| i.key).collect();
            (s.name, keys)
        })
        .collect();
    assert_eq!(
        projected,
        [
            (
                "simplyblock-webappapi-tls".to_string(),
                vec!["tls.crt".to_string(), "tls.key".to_string()]
            ),
            (
                "simplyblock-webappapi-trust".to_string(),
                vec!["ca.crt".to_string()]
            ),
        ]
    );
}

#[tokio::test]
async fn the_foundationdb_api_not_served_holds_the_first_step_until_it_is() {
    let ns = "cp-no-fdb";
    let (env, kube) = crate::support::own_api_server(ns).await;
    env.install_crds(&simplyblock_testenv::certmanager::crds())
        .await
        .expect("cert-manager's CRDs");
    let sim = sbsim("", 0).await;
    let ctx = resolving(crate::support::operator_kube_on(&env, ns).await, ns, &sim);
    let _standin = StandIn::start(kube.clone(), Some(ns.into()));
    let _tls = crate::support::local_control_plane_tls(&kube, ns, &sim.server);
    let _c = tokio::spawn(controller::run(ctx.clone()));
    let cps: Api<ControlPlane> = Api::namespaced(kube.clone(), ns);
    cps.create(&PostParams::default(), &control_plane(local()))
        .await
        .expect("created");
    let held = until("the first step held", async || {
        let s = cps.get("simplyblock").await.ok()?.status?;
        (s.step.state.as_deref() == Some("ApplyingFoundationDB") && s.message.is_some())
            .then_some(s)
    })
    .await;
    assert_eq!(held.phase, ControlPlanePhase::Installing);
    let message = held.message.unwrap_or_default();
    assert!(
        message.contains("apps.foundationdb.org/v1beta2")
            && message.contains("install the FoundationDB operator"),
        "{message}"
    );
    // The event follows the status it explains.
    let waiting = until("the AwaitingDependency event", async || {
        let found = events(&kube, ns, Some("simplyblock"), "AwaitingDependency").await;
        (!found.is_empty()).then_some(found)
    })
    .await;
    assert_eq!(waiting, [message]);
    // Held, it looks again and says nothing new.
    passes(&ctx.metrics, controller::CONTROLLER, ns, "simplyblock", 2).await;
    assert_eq!(
        crate::support::occurrences(&kube, ns, "simplyblock", "AwaitingDependency").await,
        1
    );
    let held = ctx
        .control_plane()
        .expect_err("clients hold while it installs");
    assert!(held.to_string().contains("Installing"), "{held}");

    env.install_crds(&[standin::foundationdb_crd()])
        .await
        .expect("CRD");
    until("Available once the API is served", async || {
        let s = cps.get("simplyblock").await.ok()?.status?;
        (s.phase == ControlPlanePhase::Available).then_some(())
    })
    .await;
}

#[tokio::test]
async fn components_and_the_probe_move_the_phase_with_one_event_per_transition() {
    let h = harness("cp-phases").await;
    let _c = h.start();
    h.create(local()).await;
    h.phase_is(ControlPlanePhase::Available).await;
    // Counted from here, once the install's own events are out (the object store may have
    // become ready only after the install).
    h.looked_again().await;
    let mut counts = BTreeMap::new();
    for reason in [
        "ControlPlaneReady",
        "ControlPlaneDegraded",
        "ControlPlaneNotReady",
        "EndpointUnreachable",
    ] {
        counts.insert(reason, h.occurrences(reason).await);
    }
    let since = async |reason: &str| h.occurrences(reason).await - counts[reason];

    // One management API replica of two: Degraded, and clients go on.
    h.ready_replicas::<Deployment>("simplyblock-webappapi", Some(1))
        .await;
    let s = h.phase_is(ControlPlanePhase::Degraded).await;
    assert_eq!(
        s.message.as_deref(),
        Some("degraded: simplyblock-webappapi has 1 of 2 ready; clients go on")
    );
    h.ctx.control_plane().expect("Degraded serves");
    // None of it: Unavailable, and clients hold.
    h.ready_replicas::<Deployment>("simplyblock-webappapi", Some(0))
        .await;
    h.phase_is(ControlPlanePhase::Unavailable).await;
    assert!(h.ctx.control_plane().is_err(), "Unavailable serves");
    h.ready_replicas::<Deployment>("simplyblock-webappapi", None)
        .await;
    h.phase_is(ControlPlanePhase::Available).await;
    // The object store is not essential: at 0 the control plane is Degraded.
    h.ready_replicas::<StatefulSet>("simplyblock-minio", Some(0))
        .await;
    h.phase_is(ControlPlanePhase::Degraded).await;
    h.ready_replicas::<StatefulSet>("simplyblock-minio", None)
        .await;
    h.phase_is(ControlPlanePhase::Available).await;

    // The management API stops answering.
    h.faults("error:path=/api/v2/_meta/ready,status=503").await;
    h.looked_again().await;
    let s = h.phase_is(ControlPlanePhase::Unavailable).await;
    assert!(
        s.message
            .as_deref()
            .is_some_and(|m| m.starts_with("unreachable: ")),
        "{s:?}"
    );
    h.faults("").await;
    h.looked_again().await;
    h.phase_is(ControlPlanePhase::Available).await;
    h.looked_again().await;

    assert_eq!(since("ControlPlaneDegraded").await, 2);
    assert_eq!(since("ControlPlaneNotReady").await, 1);
    assert_eq!(since("EndpointUnreachable").await, 1);
    // Back three times; not once more for the passes in between.
    assert_eq!(since("ControlPlaneReady").await, 3);
    let failures = h.ctx.metrics.sample(
        "simplyblock_controlplane_probe_failures_total",
        &[("namespace", &h.ns), ("reason", "unavailable")],
    );
    assert!(failures.is_some_and(|n| n >= 1.0), "{failures:?}");
    assert_eq!(
        h.ctx.metrics.sample(
            "simplyblock_controlplane_ready_state",
            &[("namespace", &h.ns)]
        ),
        Some(1.0)
    );
}

async fn version(h: &Harness, version: Option<&str>) {
    let r = h
        .sim
        .cp
        .raw(
            Method::PUT,
            "/../../_sim/version",
            &[],
            Some(&json!({ "version": version })),
        )
        .await
        .expect("sbsim version");
    assert!(r.status < 300);
}

/// A managed ControlPlane over TLS ([`managed_harness`]) whose bearer token is in Secret
/// `cp-token`.
pub fn managed() -> Value {
    json!({"managed": {
        "endpoint": MANAGED_TLS_ENDPOINT,
        "credentialsSecretRef": {"name": "cp-token"},
        "caBundleSecretRef": {"name": "cp-ca"},
    }})
}

pub async fn token_secret(kube: &kube::Client, ns: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "cp-token"},
        "stringData": {"token": TOKEN},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(kube.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("token Secret");
}

#[tokio::test]
async fn a_managed_control_plane_is_published_and_a_missing_credentials_secret_said() {
    let h = managed_harness("cp-managed").await;
    version(&h, Some("25.10.1")).await;
    let _c = h.start();
    h.create(managed()).await;
    let said = until("the missing Secret said", async || {
        let s = h.status().await;
        s.message
            .filter(|m| m.starts_with("credentials: "))
            .map(|m| (s.phase, m))
    })
    .await;
    assert_eq!(said.0, ControlPlanePhase::Installing, "never reached");
    assert!(
        said.1.contains("Secret cp-token") && said.1.contains("does not exist"),
        "{}",
        said.1
    );
    let raised = until("the CredentialsError event", async || {
        let found = h.events("CredentialsError").await;
        (!found.is_empty()).then_some(found)
    })
    .await;
    assert_eq!(raised, std::slice::from_ref(&said.1));
    assert!(h.ctx.control_plane().is_err());

    token_secret(&h.kube, &h.ns).await;
    h.looked_again().await;
    let s = h.phase_is(ControlPlanePhase::Available).await;
    assert_eq!(s.endpoint.as_deref(), Some(MANAGED_TLS_ENDPOINT));
    assert_eq!(s.version.as_deref(), Some("25.10.1"));
    assert!(s.components.is_empty());
    assert_eq!(
        h.ctx.control_plane_endpoint().expect("serving"),
        MANAGED_TLS_ENDPOINT
    );
    // Nothing is installed for a managed control plane.
    let deployments = Api::<Deployment>::namespaced(h.kube.clone(), &h.ns)
        .list(&Default::default())
        .await
        .expect("deployments");
    assert!(deployments.items.is_empty());
    assert_eq!(h.occurrences("CredentialsError").await, 1);
}

#[tokio::test]
async fn a_managed_control_plane_is_sent_no_api_server_token_nor_reached_at_a_local_address() {
    let mut h = managed_harness("cp-token-audience").await;
    // The API server refuses every spelling of a local address, naming the problem.
    for local in ["https://2130706433/", "https://[::ffff:127.0.0.1]/"] {
        let refused = h
            .cps()
            .create(
                &PostParams::default(),
                &control_plane(json!({"managed": {"endpoint": local}})),
            )
            .await
            .expect_err(local);
        assert!(
            refused.to_string().contains(
                "spec.source.managed.endpoint must not be a loopback, link-local or unspecified address"
            ),
            "{local}: {refused}"
        );
    }
    // The operator's own token is one the API server issued for itself.
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "operator"}})).expect("account");
    Api::<ServiceAccount>::namespaced(h.kube.clone(), &h.ns)
        .create(&PostParams::default(), &account)
        .await
        .expect("ServiceAccount");
    let api_token = crate::support::api_server()
        .await
        .service_account_token(&h.ns, "operator")
        .await
        .expect("an API-server token");
    h.ctx = Arc::new(
        Context::resolving(crate::support::operator_kube().await, h.ns.clone())
            .watching(&h.ns)
            .with_control_plane_token(Token::Value(api_token))
            .with_control_plane_proxy(h.sim.server.addr),
    );
    let _c = h.start();
    h.create(json!({"managed": {
        "endpoint": MANAGED_TLS_ENDPOINT,
        "caBundleSecretRef": {"name": "cp-ca"},
    }}))
    .await;
    let said = until("the refusal said", async || {
        h.status()
            .await
            .message
            .filter(|m| m.starts_with("credentials: "))
    })
    .await;
    assert!(
        said.contains("the operator's own token is for the audience")
            && said.contains("credentialsSecretRef is not set")
            && said.contains("operator.controlPlaneToken.audience"),
        "{said}"
    );
    h.looked_again().await;
    assert_eq!(h.status().await.phase, ControlPlanePhase::Installing);
    assert!(h.ctx.control_plane().is_err());
    let control_plane_calls: Vec<Value> = crate::support::call_log(&h.sim.cp)
        .await
        .into_iter()
        .filter(|c| c["path"].as_str().is_some_and(|p| p.starts_with("/api/v2")))
        .collect();
    assert!(
        control_plane_calls.is_empty(),
        "the token was sent: {control_plane_calls:?}"
    );
    assert_eq!(h.events("CredentialsError").await, [said]);
}

#[tokio::test]
async fn the_finalizer_holds_while_a_storage_cluster_exists() {
    let h = managed_harness("cp-finalizer").await;
    token_secret(&h.kube, &h.ns).await;
    let _c = h.start();
    h.create(managed()).await;
    h.phase_is(ControlPlanePhase::Available).await;
    // A StorageCluster no controller serves here, held by a finalizer of the test's.
    let cluster: StorageCluster = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
        "metadata": {"name": "sc", "finalizers": ["test.simplyblock.io/hold"]},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 4, "stripe": {"dataChunks": 1, "parityChunks": 1}}
    }))
    .expect("cluster");
    let clusters: Api<StorageCluster> = Api::namespaced(h.kube.clone(), &h.ns);
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .expect("cluster");

    h.cps()
        .delete("simplyblock", &DeleteParams::default())
        .await
        .expect("delete");
    let message = until("the deletion held", async || {
        h.status()
            .await
            .message
            .filter(|m| m.contains("still use the control plane"))
    })
    .await;
    assert!(
        message.starts_with(&format!(
            "1 StorageCluster(s) still use the control plane ({}/sc)",
            h.ns
        )),
        "{message}"
    );
    passes(
        &h.ctx.metrics,
        controller::CONTROLLER,
        &h.ns,
        "simplyblock",
        2,
    )
    .await;
    assert!(
        h.cps()
            .get_opt("simplyblock")
            .await
            .expect("read")
            .is_some()
    );
    assert_eq!(h.occurrences("ClustersStillPresent").await, 1);

    clusters
        .delete("sc", &DeleteParams::default())
        .await
        .expect("delete");
    clusters
        .patch(
            "sc",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("released");
    until("the ControlPlane gone", async || {
        h.cps()
            .get_opt("simplyblock")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(h.ctx.control_plane().is_err(), "the link withdrawn");
}

#[tokio::test]
async fn a_storage_cluster_is_created_only_while_the_control_plane_serves() {
    let h = managed_harness("cp-downstream").await;
    token_secret(&h.kube, &h.ns).await;
    let _c = h.start();
    let _clusters = tokio::spawn(simplyblock_operator::cluster::controller::run(
        h.ctx.clone(),
    ));
    h.create(managed()).await;
    h.phase_is(ControlPlanePhase::Available).await;
    h.faults("error:path=/api/v2/_meta/ready,status=503").await;
    h.looked_again().await;
    h.phase_is(ControlPlanePhase::Unavailable).await;

    let cluster: StorageCluster = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageCluster",
        "metadata": {"name": "sc"},
        "spec": {"maxSubsystemCount": 10, "vcpuCount": 4, "stripe": {"dataChunks": 1, "parityChunks": 1}}
    }))
    .expect("cluster");
    let clusters: Api<StorageCluster> = Api::namespaced(h.kube.clone(), &h.ns);
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .expect("cluster");
    until("the cluster held at the control-plane check", async || {
        let s = clusters.get("sc").await.ok()?.status?;
        (s.step.state.as_deref() == Some("CheckingControlPlane")).then_some(())
    })
    .await;
    passes(&h.ctx.metrics, "storagecluster", &h.ns, "sc", 2).await;
    assert_eq!(
        crate::support::calls(&h.sim.cp, "POST", "/api/v2/clusters/").await,
        0
    );
    let held = h.ctx.metrics.sample(
        "simplyblock_reconcile_errors_total",
        &[("controller", "storagecluster"), ("kind", "held")],
    );
    assert!(held.is_some_and(|n| n >= 1.0), "{held:?}");

    let began = Instant::now();
    h.faults("").await;
    h.looked_again().await;
    h.phase_is(ControlPlanePhase::Available).await;
    let uuid = until("the cluster created", async || {
        clusters
            .get("sc")
            .await
            .ok()?
            .status?
            .uuid
            .filter(|u| !u.is_empty())
    })
    .await;
    println!(
        "created {:.2?} after the control plane served again",
        began.elapsed()
    );
    assert_eq!(
        crate::support::calls(&h.sim.cp, "POST", "/api/v2/clusters/").await,
        1
    );
    // The CSI driver is told the endpoint the ControlPlane publishes.
    use simplyblock_operator::csi_secret;
    let csi = Api::<Secret>::namespaced(h.kube.clone(), &h.ns)
        .get(csi_secret::NAME)
        .await
        .expect("CSI secret");
    let contents: csi_secret::Contents =
        serde_json::from_slice(&csi.data.expect("data")[csi_secret::KEY].0).expect("contents");
    let entry = contents
        .clusters
        .iter()
        .find(|c| c.cluster_id == uuid)
        .expect("the cluster's entry");
    assert_eq!(entry.cluster_endpoint, MANAGED_TLS_ENDPOINT);
}

/// The API server's count of server-side applies, by resource (the objects themselves,
/// not their status), from its own metrics.
async fn applies(kube: &kube::Client) -> BTreeMap<String, f64> {
    requests(kube, "APPLY").await
}

/// The API server's count of `verb` requests, by resource (the objects themselves, not
/// their status), from its own metrics.
pub async fn requests(kube: &kube::Client, verb: &str) -> BTreeMap<String, f64> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = kube
        .request_text(request)
        .await
        .expect("API server metrics");
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(labels) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        if !labels.contains(&format!("verb=\"{verb}\"")) || !labels.contains("subresource=\"\"") {
            continue;
        }
        let resource = labels
            .split("resource=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_default();
        let count: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *out.entry(resource.to_owned()).or_default() += count;
    }
    out
}

/// The ControlPlane controller's passes an operator process counts at its `/metrics`,
/// read as a scraper the chart lets in ([`crate::support::scrape`]).
async fn scraped_passes(env: &simplyblock_testenv::TestEnv, ns: &str, port: u16) -> Option<f64> {
    let text = crate::support::scrape(env, ns, port).await?;
    Some(
        text.lines()
            .filter(|l| l.starts_with("simplyblock_reconcile_total{controller=\"controlplane\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

#[tokio::test]
async fn a_kill_at_every_install_step_repeats_nothing_and_applies_each_object_once_per_pass() {
    use std::os::unix::process::ExitStatusExt;
    const SIGABRT: i32 = 6;
    let ns = "cp-crash";
    let (env, kube) = crate::support::own_api_server(ns).await;
    env.install_crds(&components_crds()).await.expect("CRDs");
    let _standin = StandIn::start(kube.clone(), Some(ns.into()));
    let sim = sbsim("", 0).await;
    let _tls = crate::support::local_control_plane_tls(&kube, ns, &sim.server);
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).expect("token");
    let operator = |crash_after: Option<String>, metrics_port: u16| {
        crate::support::operator_command(&env, sim.server.addr, &token_file, ns)
            .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
            .env(
                simplyblock_operator::runtime::crash::ENV,
                crash_after.unwrap_or_default(),
            )
            .spawn()
            .expect("the operator starts")
    };
    let cps: Api<ControlPlane> = Api::namespaced(kube.clone(), ns);
    cps.create(&PostParams::default(), &control_plane(local()))
        .await
        .expect("created");

    let mut uids: Option<BTreeMap<String, String>> = None;
    for step in [
        "ApplyingFoundationDB",
        "AwaitingFoundationDB",
        "ApplyingDatastore",
        "ApplyingAPI",
        "AwaitingAPI",
    ] {
        let point = simplyblock_operator::runtime::crash::control_plane_point(step);
        let mut child = operator(Some(point.clone()), free_port());
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("the operator process") {
                break status;
            }
            assert!(
                start.elapsed() < crate::support::PATIENCE,
                "the operator never reached {point}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        assert_eq!(status.signal(), Some(SIGABRT), "armed at {point}: {status}");
        // Killed after the step's effect, before its record: the step is still the one
        // stored (the first one has never been recorded).
        let stored = cps
            .get("simplyblock")
            .await
            .expect("cp")
            .status
            .unwrap_or_default();
        let at = stored.step.state.as_deref();
        assert!(
            at == Some(step) || (at.is_none() && step == "ApplyingFoundationDB"),
            "killed at {point}, the stored step is {at:?}"
        );
        if step == "ApplyingAPI" {
            uids = Some(
                installed_objects(&kube, ns)
                    .await
                    .into_iter()
                    .map(|(k, (uid, _, _))| (k, uid))
                    .collect(),
            );
        }
    }

    let port = free_port();
    let mut child = operator(None, port);
    until("Available after the kills", async || {
        let s = cps.get("simplyblock").await.ok()?.status?;
        (s.phase == ControlPlanePhase::Available).then_some(())
    })
    .await;
    // One pass on a converged control plane, bracketed: every pass before it has ended
    // (a pass that starts after a change ends after those before it), and none runs after.
    let nudge = async |n: u64| {
        let from = until("the operator's metrics", async || {
            scraped_passes(&env, ns, port).await
        })
        .await;
        let stamp = format!("{:?}", Instant::now());
        cps.patch(
            "simplyblock",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"test.simplyblock.io/nudge": stamp}}}),
            ),
        )
        .await
        .expect("nudged");
        until("the passes after a nudge", async || {
            let now = scraped_passes(&env, ns, port).await?;
            (now >= from + n as f64).then_some(now)
        })
        .await
    };
    nudge(2).await;
    let (from, before) = (nudge(1).await, applies(&kube).await);
    let (to, after) = (nudge(1).await, applies(&kube).await);
    child.kill().expect("kill");
    child.wait().expect("reaped");
    assert_eq!(to - from, 1.0, "one pass between the two counts");
    let delta = |resource: &str| {
        after.get(resource).copied().unwrap_or(0.0) - before.get(resource).copied().unwrap_or(0.0)
    };
    // The pass applied each object exactly once: the FoundationDBCluster, the
    // StatefulSet, five Deployments (the API, admin control, tasks, monitoring, the
    // exporter), the ConfigMap, the ServiceAccount, its Role and binding, three Services.
    for (resource, once) in [
        ("foundationdbclusters", 1.0),
        ("statefulsets", 1.0),
        ("deployments", 5.0),
        ("configmaps", 1.0),
        ("serviceaccounts", 1.0),
        ("roles", 1.0),
        ("rolebindings", 1.0),
        ("services", 3.0),
    ] {
        assert_eq!(delta(resource), once, "{resource} in one pass");
    }

    // No object was made twice or changed by a repeat: each is the one the killed runs
    // made, at its first generation, owned by the ControlPlane.
    let end = installed_objects(&kube, ns).await;
    let first = uids.expect("the objects after ApplyingAPI");
    for (object, (uid, _, generation)) in &end {
        assert_eq!(Some(uid), first.get(object), "{object} was made again");
        assert!(
            *generation <= 1,
            "{object} changed: generation {generation}"
        );
    }
    assert_owned(&kube, ns).await;
    let occurrences = |reason| crate::support::occurrences(&kube, ns, "simplyblock", reason);
    // Ready is said once however often the install was killed. (An AwaitingDependency may
    // be said too: the stand-in that reports FoundationDB and the API ready can lag a pass
    // on a loaded machine, and waiting for it is no repeat.)
    assert_eq!(occurrences("ControlPlaneReady").await, 1);
}

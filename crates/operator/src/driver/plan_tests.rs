//! Given this driver and this observation, the pass does that, and the status reads so.

use serde_json::json;
use simplyblock_api::keys::{APPLIED_DIGEST_ANNOTATION, MANAGED_BY_LABEL};

use super::*;
use crate::driver::adoption::{RESOURCE_POLICY_ANNOTATION, RESOURCE_POLICY_KEEP};
use crate::driver::names::{
    CONTROLLER_ACCOUNT, CONTROLLER_STATEFULSET, Component, GROUP_SNAPSHOT_CLASS, NODE_ACCOUNT,
    NODE_DAEMONSET, SNAPSHOT_CLASS,
};

const NS: &str = "simplyblock-system";
const OPERATOR_IMAGE: &str = "quay.io/simplyblock-io/simplyblock-operator:v26.4.0";

fn time(seconds: i64) -> Time {
    Time(jiff::Timestamp::from_second(seconds).expect("time"))
}

fn driver_in(namespace: &str, name: &str, created: i64, spec: Value) -> SimplyblockDriver {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "SimplyblockDriver",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("{name}-uid"),
                     "generation": 3,
                     "creationTimestamp": time(created)},
        "spec": spec,
    }))
    .expect("driver")
}

fn driver(spec: Value) -> SimplyblockDriver {
    driver_in(NS, "simplyblock", 100, spec)
}

fn with_status(mut d: SimplyblockDriver, status: Value) -> SimplyblockDriver {
    d.status = Some(serde_json::from_value(status).expect("status"));
    d
}

/// The chart's bindings as a release in `namespace` installed them.
fn chart_bindings(namespace: &str) -> BTreeMap<String, Seen> {
    rbac::grants()
        .into_iter()
        .map(|g| {
            let mut binding = json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": g.binding_kind(),
                "metadata": {"name": g.name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": g.role_kind(),
                            "name": g.name},
                "subjects": [{"kind": "ServiceAccount", "name": g.account,
                              "namespace": namespace}],
            });
            if g.scope == rbac::Scope::Namespace {
                binding["metadata"]["namespace"] = json!(namespace);
            }
            (g.binding_key(), Seen::Found(binding))
        })
        .collect()
}

/// What a pass of `d` sees on a cluster with the chart installed and nothing else.
fn empty(d: &SimplyblockDriver) -> Observation {
    Observation {
        bindings: chart_bindings(&d.namespace().unwrap_or_default()),
        drivers: vec![DriverRef::of(d)],
        snapshot_api: false,
        group_snapshot_api: false,
        live: BTreeMap::new(),
        helm_csi_drivers: vec![],
        operator_namespace: NS.into(),
        operator_image: OPERATOR_IMAGE.into(),
        control_plane_ca: None,
    }
}

fn converge(p: Plan) -> Converge {
    match p {
        Ok(c) => c,
        Err(h) => panic!("held: {h:?}"),
    }
}

fn hold(p: Plan) -> Hold {
    match p {
        Err(h) => h,
        Ok(c) => panic!("converges: {c:?}"),
    }
}

fn keys(list: &[(ObjectKey, Value)]) -> Vec<ObjectKey> {
    list.iter().map(|(k, _)| k.clone()).collect()
}

/// `obs` after the API server applied `c`'s bodies: each stored with what a server adds.
fn applied(obs: &Observation, c: &Converge) -> Observation {
    let mut next = obs.clone();
    for (key, body) in &c.apply {
        let mut stored = body.clone();
        stored["metadata"]["resourceVersion"] = json!("1");
        stored["metadata"]["uid"] = json!(format!("{key}-uid"));
        if let Some(live) = obs.live.get(key) {
            // The fields another writer owns stay.
            for (k, v) in live["metadata"]["labels"].as_object().into_iter().flatten() {
                stored["metadata"]["labels"][k] = v.clone();
            }
            for (k, v) in live["metadata"]["annotations"]
                .as_object()
                .into_iter()
                .flatten()
            {
                if stored["metadata"]["annotations"].get(k).is_none() {
                    stored["metadata"]["annotations"][k] = v.clone();
                }
            }
        }
        next.live.insert(key.clone(), stored);
    }
    for key in &c.strip {
        if let Some(live) = next.live.get_mut(key) {
            for l in adoption::HELM_LABELS {
                live["metadata"]["labels"]
                    .as_object_mut()
                    .map(|m| m.remove(l));
            }
            for a in adoption::HELM_ANNOTATIONS {
                live["metadata"]["annotations"]
                    .as_object_mut()
                    .map(|m| m.remove(a));
            }
        }
    }
    for key in &c.prune {
        next.live.remove(key);
    }
    next
}

/// The workloads of `obs` reporting `ready` controller replicas and `nodes` (ready, total).
fn reporting(mut obs: Observation, ready: i32, nodes: (i32, i32)) -> Observation {
    let sts = ObjectKey::new(Kind::StatefulSet, CONTROLLER_STATEFULSET);
    let ds = ObjectKey::new(Kind::DaemonSet, NODE_DAEMONSET);
    if let Some(s) = obs.live.get_mut(&sts) {
        s["status"] = json!({"observedGeneration": 1, "replicas": 1, "readyReplicas": ready});
    }
    if let Some(d) = obs.live.get_mut(&ds) {
        d["status"] = json!({"observedGeneration": 1, "numberReady": nodes.0,
                             "desiredNumberScheduled": nodes.1});
    }
    obs
}

/// A driver installed, converged and reporting.
fn installed(d: &SimplyblockDriver, snapshot_api: bool) -> Observation {
    let mut obs = empty(d);
    obs.snapshot_api = snapshot_api;
    let c = converge(plan(d, &obs));
    reporting(applied(&obs, &c), 1, (3, 3))
}

#[test]
fn a_fresh_cluster_gets_every_object_in_order_and_nothing_else() {
    let d = driver(json!({}));
    let c = converge(plan(&d, &empty(&d)));
    let applied = keys(&c.apply);
    assert_eq!(applied.first().map(|k| k.kind), Some(Kind::ServiceAccount));
    assert_eq!(
        applied[applied.len() - 2..],
        [
            ObjectKey::new(Kind::StatefulSet, CONTROLLER_STATEFULSET),
            ObjectKey::new(Kind::DaemonSet, NODE_DAEMONSET)
        ]
    );
    // No snapshot class: the API is not served; no role or binding: they are the chart's.
    let count = |kind| applied.iter().filter(|k| k.kind == kind).count();
    assert_eq!(count(Kind::VolumeSnapshotClass), 0);
    assert_eq!(applied.len(), 2 + 2 + 1 + 2);
    for (key, body) in &c.apply {
        assert!(
            body["metadata"]["annotations"][APPLIED_DIGEST_ANNOTATION].is_string(),
            "{key}"
        );
        assert!(
            body["metadata"]["annotations"][RESOURCE_POLICY_ANNOTATION].is_null(),
            "{key}"
        );
    }
    assert!(c.strip.is_empty() && c.prune.is_empty());
    assert_eq!(c.origin, Origin::Created);
    assert_eq!(c.image, "quay.io/simplyblock-io/simplyblock-csi:v26.4.0");
}

#[test]
fn a_converged_driver_writes_nothing() {
    for spec in [
        json!({}),
        json!({"enableCSIAddons": true, "controllerReplicas": 3,
               "tolerations": [{"operator": "Exists"}]}),
    ] {
        let d = driver(spec.clone());
        let obs = installed(&d, true);
        let c = converge(plan(&d, &obs));
        assert!(
            c.apply.is_empty() && c.strip.is_empty() && c.prune.is_empty(),
            "{spec}: {c:?}"
        );
    }
}

#[test]
fn an_edited_object_is_applied_again_and_only_it() {
    let d = driver(json!({}));
    let mut obs = installed(&d, false);
    let ds = ObjectKey::new(Kind::DaemonSet, NODE_DAEMONSET);
    obs.live.get_mut(&ds).expect("ds")["spec"]["template"]["spec"]["hostNetwork"] = json!(false);
    assert_eq!(keys(&converge(plan(&d, &obs)).apply), vec![ds]);
}

#[test]
fn a_changed_spec_applies_what_it_changes() {
    let d = driver(json!({}));
    let obs = installed(&d, false);
    let grown = driver(json!({"controllerReplicas": 2}));
    assert_eq!(
        keys(&converge(plan(&grown, &obs)).apply),
        vec![ObjectKey::new(Kind::StatefulSet, CONTROLLER_STATEFULSET)]
    );
}

#[test]
fn the_oldest_driver_is_the_clusters_and_the_others_are_held() {
    let first = driver_in("a", "sbd", 100, json!({}));
    let second = driver_in("b", "sbd", 200, json!({}));
    // Created in the same second: namespace, then name.
    let tie_ns = driver_in("c", "sbd", 100, json!({}));
    let tie_name = driver_in("a", "zz", 100, json!({}));
    let drivers: Vec<DriverRef> = [&first, &second, &tie_ns, &tie_name]
        .iter()
        .map(|d| DriverRef::of(d))
        .collect();
    for held in [&second, &tie_ns, &tie_name] {
        let mut obs = empty(held);
        obs.drivers = drivers.clone();
        obs.operator_namespace = held.namespace().expect("ns");
        let h = hold(plan(held, &obs));
        assert_eq!(h.reason, "DuplicateDriver");
        assert!(
            h.message.contains("SimplyblockDriver a/sbd is"),
            "{}",
            h.message
        );
    }
    let mut obs = empty(&first);
    obs.drivers = drivers;
    obs.operator_namespace = "a".into();
    converge(plan(&first, &obs));
}

#[test]
fn a_driver_outside_the_operators_namespace_is_held() {
    let d = driver_in("elsewhere", "sbd", 100, json!({}));
    let h = hold(plan(&d, &empty(&d)));
    assert_eq!(h.reason, "WrongNamespace");
    assert!(h.message.contains(NS), "{}", h.message);
}

#[test]
fn the_image_is_the_specs_else_the_operators_registry_and_tag() {
    let d = driver(json!({"image": "docker.io/simplyblock/simplyblock-csi:v1"}));
    assert_eq!(
        converge(plan(&d, &empty(&d))).image,
        "docker.io/simplyblock/simplyblock-csi:v1"
    );
    let d = driver(json!({}));
    let mut obs = empty(&d);
    obs.operator_image = "quay.io/simplyblock-io/simplyblock-operator@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".into();
    let h = hold(plan(&d, &obs));
    assert_eq!(h.reason, "ImageUnresolved");
    assert!(h.message.contains("set spec.image"), "{}", h.message);
}

#[test]
fn snapshots_follow_the_api_and_the_spec() {
    let snapshotter = |c: &Converge| {
        c.apply.iter().any(|(k, v)| {
            k.kind == Kind::StatefulSet
                && v["spec"]["template"]["spec"]["containers"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().any(|c| c["name"] == "csi-snapshotter"))
        })
    };
    let class = ObjectKey::new(Kind::VolumeSnapshotClass, SNAPSHOT_CLASS);

    let d = driver(json!({}));
    let c = converge(plan(&d, &empty(&d)));
    assert!(!snapshotter(&c) && !keys(&c.apply).contains(&class));

    let mut obs = empty(&d);
    obs.snapshot_api = true;
    let c = converge(plan(&d, &obs));
    assert!(snapshotter(&c) && keys(&c.apply).contains(&class));

    // Turned off: the class the driver wrote goes, the snapshotter with the next apply.
    let installed = installed(&d, true);
    let off = driver(json!({"enableVolumeSnapshots": false}));
    let c = converge(plan(&off, &installed));
    assert_eq!(c.prune, vec![class]);
    assert_eq!(
        keys(&c.apply),
        vec![ObjectKey::new(Kind::StatefulSet, CONTROLLER_STATEFULSET)]
    );
}

/// The snapshotter's arguments in what `c` applies, if it applies the controller.
fn snapshotter_args(c: &Converge) -> Option<Vec<String>> {
    c.apply.iter().find_map(|(k, v)| {
        (k.kind == Kind::StatefulSet)
            .then(|| {
                v["spec"]["template"]["spec"]["containers"]
                    .as_array()
                    .cloned()
            })
            .flatten()?
            .into_iter()
            .find(|c| c["name"] == "csi-snapshotter")
            .map(|c| serde_json::from_value(c["args"].clone()).expect("args"))
    })
}

const GROUP_GATE: &str = "--feature-gates=CSIVolumeGroupSnapshot=true";

#[test]
fn the_group_snapshot_gate_and_class_follow_the_group_snapshot_api() {
    let class = ObjectKey::new(Kind::VolumeGroupSnapshotClass, GROUP_SNAPSHOT_CLASS);
    let d = driver(json!({}));

    // Snapshots served, group snapshots not: the snapshotter runs without the gate (with
    // it, it would wait for the API and snapshot nothing), and status says what to add.
    let mut obs = empty(&d);
    obs.snapshot_api = true;
    let c = converge(plan(&d, &obs));
    let args = snapshotter_args(&c).expect("the snapshotter");
    assert!(!args.iter().any(|a| a == GROUP_GATE), "{args:?}");
    assert!(!keys(&c.apply).contains(&class));
    let installed = installed(&d, true);
    let message = status(&d, &installed, &plan(&d, &installed))
        .message
        .unwrap_or_default();
    assert!(
        message.contains("groupsnapshot.storage.k8s.io/v1beta1"),
        "{message}"
    );

    // The API appears: the next pass re-renders the snapshotter with the gate and writes
    // the class, and the hint goes.
    let mut served = installed.clone();
    served.group_snapshot_api = true;
    let c = converge(plan(&d, &served));
    assert_eq!(
        keys(&c.apply),
        vec![
            class.clone(),
            ObjectKey::new(Kind::StatefulSet, CONTROLLER_STATEFULSET)
        ]
    );
    assert!(
        snapshotter_args(&c)
            .expect("the snapshotter")
            .iter()
            .any(|a| a == GROUP_GATE)
    );
    let converged = reporting(applied(&served, &c), 1, (3, 3));
    assert!(converge(plan(&d, &converged)).apply.is_empty());
    let message = status(&d, &converged, &plan(&d, &converged))
        .message
        .unwrap_or_default();
    assert!(!message.contains("groupsnapshot"), "{message}");

    // Group snapshots without snapshots are nothing: no snapshot API, no gate or class.
    let mut group_only = empty(&d);
    group_only.group_snapshot_api = true;
    let c = converge(plan(&d, &group_only));
    assert_eq!(snapshotter_args(&c), None);
    assert!(!keys(&c.apply).contains(&class));

    // Snapshots turned off: the class goes with the snapshotter.
    let off = driver(json!({"enableVolumeSnapshots": false}));
    let c = converge(plan(&off, &converged));
    assert_eq!(
        c.prune,
        vec![
            ObjectKey::new(Kind::VolumeSnapshotClass, SNAPSHOT_CLASS),
            class
        ]
    );
}

#[test]
fn csi_addons_turned_off_takes_only_its_sidecar_away() {
    let d = driver(json!({"enableCSIAddons": true}));
    let obs = installed(&d, false);
    let off = driver(json!({}));
    let c = converge(plan(&off, &obs));
    // Its role is the chart's, which stays: nothing is the driver's to remove.
    assert!(c.prune.is_empty(), "{c:?}");
    assert_eq!(
        keys(&c.apply),
        vec![ObjectKey::new(Kind::StatefulSet, CONTROLLER_STATEFULSET)]
    );
}

#[test]
fn the_driver_is_held_until_the_charts_bindings_give_its_accounts_their_permissions() {
    let d = driver(json!({}));
    // All in place: installed, and no role or binding among what is written.
    let c = converge(plan(&d, &empty(&d)));
    assert!(!c.apply.is_empty());

    // One missing: held, and it is named.
    let node = format!("ClusterRoleBinding/{}", Component::Node.binding());
    let mut obs = empty(&d);
    obs.bindings.insert(node.clone(), Seen::Missing);
    let h = hold(plan(&d, &obs));
    assert_eq!(h.reason, "PermissionsMissing");
    assert!(
        h.message.contains(&format!("{node} is missing")),
        "{}",
        h.message
    );
    assert!(
        h.message.contains(
            "install or upgrade the simplyblock-operator chart in namespace simplyblock-system"
        ),
        "{}",
        h.message
    );
    assert!(
        !h.message
            .contains("RoleBinding/simplyblock-operator-csi-controller")
    );
    let s = status(&d, &obs, &Err(h.clone()));
    assert_eq!(s.phase, DriverPhase::Installing);
    assert_eq!(s.message, Some(h.message));

    // None there (a chart older than the operator): every one named at once, unread or
    // missing alike.
    let mut obs = empty(&d);
    obs.bindings.clear();
    obs.bindings.insert(
        format!("ClusterRoleBinding/{}", Component::Attacher.binding()),
        Seen::Forbidden,
    );
    let h = hold(plan(&d, &obs));
    for g in rbac::grants() {
        assert!(
            h.message.contains(&g.binding_key()),
            "{}: {}",
            g.name,
            h.message
        );
    }
    assert!(h.message.contains("cannot be read"), "{}", h.message);
    assert_eq!(
        h.message.matches(" is missing").count(),
        rbac::grants().len() - 1
    );
}

#[test]
fn a_binding_of_another_account_or_namespace_or_role_holds_the_driver() {
    let d = driver(json!({}));
    let controller = "RoleBinding/simplyblock-operator-csi-controller".to_owned();
    let node = format!("ClusterRoleBinding/{}", Component::Node.binding());
    let provisioner = format!("ClusterRoleBinding/{}", Component::Provisioner.binding());
    let mut obs = empty(&d);
    // The chart installed in another namespace binds that namespace's accounts.
    let elsewhere = chart_bindings("elsewhere");
    obs.bindings.insert(node.clone(), elsewhere[&node].clone());
    let edit = |obs: &mut Observation, key: &str, path: &str, value: Value| {
        let Some(Seen::Found(b)) = obs.bindings.get_mut(key) else {
            panic!("{key}")
        };
        b.pointer_mut(path).map(|v| *v = value).expect(path);
    };
    edit(
        &mut obs,
        &controller,
        "/subjects/0/name",
        json!(NODE_ACCOUNT),
    );
    edit(
        &mut obs,
        &provisioner,
        "/roleRef/name",
        json!("cluster-admin"),
    );
    let h = hold(plan(&d, &obs));
    assert_eq!(h.reason, "PermissionsMissing");
    let m = &h.message;
    assert!(
        m.contains(&format!(
            "{node} does not name ServiceAccount simplyblock-system/simplyblock-csi-node-sa"
        )),
        "{m}"
    );
    assert!(
        m.contains(&format!(
            "{controller} does not name ServiceAccount simplyblock-system/{CONTROLLER_ACCOUNT}"
        )),
        "{m}"
    );
    assert!(
        m.contains(&format!(
            "{provisioner} binds ClusterRole cluster-admin instead of ClusterRole {}",
            Component::Provisioner.role()
        )),
        "{m}"
    );
    // A binding that names the account beside others still gives it its permissions.
    let mut obs = empty(&d);
    let Some(Seen::Found(b)) = obs.bindings.get_mut(&node) else {
        panic!("{node}")
    };
    b["subjects"]
        .as_array_mut()
        .expect("subjects")
        .insert(0, json!({"kind": "User", "name": "someone"}));
    converge(plan(&d, &obs));
}

#[test]
fn a_duplicate_or_misplaced_driver_is_held_for_that_before_its_permissions() {
    let d = driver_in("elsewhere", "sbd", 100, json!({}));
    let mut obs = empty(&d);
    obs.bindings.clear();
    assert_eq!(hold(plan(&d, &obs)).reason, "WrongNamespace");
}

/// `body` as a Helm release `csi` in `NS` installed it, without the driver's metadata.
fn helm_installed(body: &Value) -> Value {
    let mut v = body.clone();
    v["metadata"] = json!({
        "name": v["metadata"]["name"], "namespace": v["metadata"]["namespace"],
        "labels": {"app.kubernetes.io/managed-by": "Helm", "chart": "spdk-csi-0.1.0",
                   "release": "csi", "heritage": "Helm"},
        "annotations": {"meta.helm.sh/release-name": "csi", "meta.helm.sh/release-namespace": NS},
    });
    v["metadata"]
        .as_object_mut()
        .expect("metadata")
        .retain(|_, v| !v.is_null());
    v
}

/// A cluster where the Helm release installed every object the driver would.
fn helm_cluster(d: &SimplyblockDriver) -> Observation {
    let mut obs = empty(d);
    let c = converge(plan(d, &obs));
    obs.live = c
        .apply
        .iter()
        .map(|(k, v)| (k.clone(), helm_installed(v)))
        .collect();
    obs
}

#[test]
fn a_helm_install_is_adopted_stripped_and_then_left_alone() {
    let d = driver(json!({}));
    let obs = helm_cluster(&d);
    let c = converge(plan(&d, &obs));
    assert_eq!(c.origin, Origin::Adopted);
    assert_eq!(c.strip.len(), obs.live.len());
    assert_eq!(c.apply.len(), obs.live.len());
    for (key, body) in &c.apply {
        assert_eq!(
            body["metadata"]["annotations"][RESOURCE_POLICY_ANNOTATION], RESOURCE_POLICY_KEEP,
            "{key}"
        );
        assert_eq!(
            body["metadata"]["labels"][MANAGED_BY_LABEL], "simplyblockdriver",
            "{key}"
        );
    }
    let after = applied(&obs, &c);
    for (key, live) in &after.live {
        assert_eq!(adoption::holder(live), Holder::Driver, "{key}");
        assert!(live["metadata"]["labels"].get("chart").is_none(), "{key}");
    }
    // The pass after: nothing to write, and still Adopted (a crash before the status
    // write must not make it Created).
    let c = converge(plan(&d, &after));
    assert!(
        c.apply.is_empty() && c.strip.is_empty() && c.prune.is_empty(),
        "{c:?}"
    );
    assert_eq!(c.origin, Origin::Adopted);
}

#[test]
fn a_helm_install_of_another_driver_name_is_refused_and_untouched() {
    let helm = driver(json!({"driverName": "legacy.simplyblock.io"}));
    let obs = helm_cluster(&helm);
    let d = driver(json!({}));
    let h = hold(plan(&d, &obs));
    assert_eq!(h.reason, "AdoptionRefused");
    assert!(h.message.contains("legacy.simplyblock.io"), "{}", h.message);
    let status = status(&d, &obs, &Err(h.clone()));
    assert_eq!(status.phase, DriverPhase::Installing);
    assert_eq!(status.message, Some(h.message));
    assert_eq!(status.origin, None);
}

#[test]
fn an_adopted_registration_keeps_what_cannot_change() {
    let d = driver(json!({}));
    let mut obs = helm_cluster(&d);
    let key = ObjectKey::new(Kind::CsiDriver, "csi.simplyblock.io");
    obs.live.get_mut(&key).expect("csidriver")["spec"]["attachRequired"] = json!(true);
    let c = converge(plan(&d, &obs));
    let body = &c.apply.iter().find(|(k, _)| *k == key).expect("applied").1;
    assert_eq!(body["spec"]["attachRequired"], true);
    // And the pass after it leaves it so.
    let c = converge(plan(&d, &applied(&obs, &c)));
    assert!(c.apply.is_empty(), "{c:?}");
}

#[test]
fn an_object_of_someone_elses_is_not_taken() {
    let d = driver(json!({}));
    let mut obs = empty(&d);
    obs.live.insert(
        ObjectKey::new(Kind::ServiceAccount, CONTROLLER_ACCOUNT),
        json!({"metadata": {"name": CONTROLLER_ACCOUNT, "namespace": NS}}),
    );
    let h = hold(plan(&d, &obs));
    assert_eq!(h.reason, "AdoptionRefused");
    assert!(
        h.message
            .contains("ServiceAccount/simplyblock-csi-controller-sa exists")
    );
}

/// The status of `d` after a pass over `obs`.
fn status_of(d: &SimplyblockDriver, obs: &Observation) -> SimplyblockDriverStatus {
    status(d, obs, &plan(d, obs))
}

#[test]
fn the_phase_follows_the_plugins() {
    let d = driver(json!({}));
    let fresh = empty(&d);
    let s = status_of(&d, &fresh);
    assert_eq!(
        (s.phase, s.controller_ready, s.nodes_ready, s.nodes_total),
        (DriverPhase::Installing, false, 0, 0)
    );
    let up = installed(&d, false);
    let ready = with_status(d.clone(), json!({"phase": "Ready"}));
    let installing = with_status(d.clone(), json!({"phase": "Installing"}));
    let cases = [
        // (the driver as last written, controller ready replicas, nodes, phase)
        (&installing, 0, (0, 3), DriverPhase::Installing),
        (&installing, 1, (3, 3), DriverPhase::Ready),
        (&ready, 1, (3, 3), DriverPhase::Ready),
        (&ready, 1, (2, 3), DriverPhase::Degraded),
        (&ready, 0, (3, 3), DriverPhase::Unavailable),
        (&ready, 0, (0, 3), DriverPhase::Unavailable),
        // No worker matches the node selector: nothing is missing.
        (&ready, 2, (0, 0), DriverPhase::Ready),
    ];
    for (d, controller, nodes, phase) in cases {
        let s = status_of(d, &reporting(up.clone(), controller, nodes));
        assert_eq!(s.phase, phase, "{controller} {nodes:?}: {:?}", s.message);
        assert_eq!((s.nodes_ready, s.nodes_total), nodes);
        assert_eq!(s.controller_ready, controller >= 1);
        assert_eq!(s.observed_generation, Some(3));
    }
}

#[test]
fn workloads_that_have_not_reported_are_installing() {
    let d = with_status(driver(json!({})), json!({"phase": "Ready"}));
    let mut obs = installed(&d, false);
    let ds = ObjectKey::new(Kind::DaemonSet, NODE_DAEMONSET);
    obs.live.get_mut(&ds).expect("ds")["status"] = json!({});
    assert_eq!(status_of(&d, &obs).phase, DriverPhase::Installing);
}

#[test]
fn snapshot_support_version_and_origin() {
    let d = driver(json!({"image": "quay.io/simplyblock-io/simplyblock-csi:v9.1"}));
    let s = status_of(&d, &installed(&d, false));
    assert_eq!(s.snapshot_support, Some(SnapshotSupport::Missing));
    assert!(
        s.message
            .as_deref()
            .is_some_and(|m| m.contains("snapshot.storage.k8s.io/v1"))
    );
    assert_eq!(s.version.as_deref(), Some("v9.1"));
    assert_eq!(s.origin, Some(Origin::Created));
    let s = status_of(&d, &installed(&d, true));
    assert_eq!(s.snapshot_support, Some(SnapshotSupport::Detected));
    let off = driver(json!({"enableVolumeSnapshots": false}));
    assert_eq!(
        status_of(&off, &installed(&off, true)).snapshot_support,
        None
    );
    // Origin is set once: an adopted driver stays Adopted.
    let adopted = with_status(d.clone(), json!({"origin": "Adopted"}));
    assert_eq!(
        status_of(&adopted, &installed(&d, false)).origin,
        Some(Origin::Adopted)
    );
}

#[test]
fn a_held_driver_reports_installing_and_keeps_its_origin() {
    let d = with_status(
        driver_in(NS, "second", 200, json!({})),
        json!({"phase": "Ready", "origin": "Created", "nodesReady": 3, "nodesTotal": 3}),
    );
    let first = driver(json!({}));
    let mut obs = installed(&first, false);
    obs.drivers.push(DriverRef::of(&d));
    let s = status_of(&d, &obs);
    assert_eq!(s.phase, DriverPhase::Installing);
    assert_eq!(
        (s.nodes_ready, s.nodes_total, s.controller_ready),
        (0, 0, false)
    );
    assert_eq!(s.origin, Some(Origin::Created));
    assert!(
        s.message
            .as_deref()
            .is_some_and(|m| m.contains("simplyblock-system/simplyblock"))
    );
}

fn control_plane(source: Value) -> ControlPlane {
    serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "ControlPlane",
        "metadata": {"name": "simplyblock", "namespace": NS},
        "spec": {"source": source},
    }))
    .expect("control plane")
}

#[test]
fn the_plugins_trust_the_ca_the_control_plane_is_served_from() {
    let local = |tls: Value| {
        control_plane(json!({"local": {
            "image": "quay.io/simplyblock-io/simplyblock:26.2.1", "tls": tls}}))
    };
    let secret = |name: &str, key: &str| {
        Some(CaSource::Secret {
            name: name.into(),
            key: key.into(),
        })
    };
    assert_eq!(
        ca_source(&local(json!({})), &[]),
        secret("simplyblock-webappapi-tls", "ca.crt"),
        "cert-manager by default: the CA beside the serving certificate"
    );
    assert_eq!(
        ca_source(&local(json!({"provider": "OpenShift"})), &[]),
        Some(CaSource::ConfigMap {
            name: "simplyblock-service-ca".into(),
            key: "service-ca.crt".into(),
        })
    );
    assert_eq!(ca_source(&local(json!({"enableTLS": false})), &[]), None);
    let managed = |bundle: Value| {
        control_plane(json!({"managed": {
            "endpoint": "https://cp.example.com", "caBundleSecretRef": bundle}}))
    };
    let keys = |k: &[&str]| k.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        ca_source(&managed(json!({"name": "cp-ca"})), &keys(&["tls.crt"])),
        secret("cp-ca", "tls.crt"),
        "the key the ControlPlane itself reads"
    );
    assert_eq!(
        ca_source(
            &managed(json!({"name": "cp-ca"})),
            &keys(&["tls.crt", "ca.crt"])
        ),
        secret("cp-ca", "ca.crt")
    );
    assert_eq!(
        ca_source(&managed(json!({"name": "cp-ca"})), &[]),
        secret("cp-ca", "ca.crt")
    );
    assert_eq!(
        ca_source(&managed(Value::Null), &[]),
        None,
        "no bundle: the system's CA store"
    );
}

#[test]
fn the_plugins_are_given_the_control_planes_ca_when_tls_is_asked_for() {
    let d = driver(json!({"tls": {"enableTLS": true}}));
    let mut obs = empty(&d);
    obs.control_plane_ca = Some(CaSource::Secret {
        name: "simplyblock-webappapi-tls".into(),
        key: "ca.crt".into(),
    });
    let c = converge(plan(&d, &obs));
    let (_, node) = c
        .apply
        .iter()
        .find(|(k, _)| k.kind == Kind::DaemonSet)
        .expect("the node plugin");
    let plugin = node["spec"]["template"]["spec"]["containers"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "csi-node"))
        .expect("csi-node");
    assert!(
        plugin["args"]
            .as_array()
            .expect("args")
            .iter()
            .any(|a| a == "--ca-file=/etc/simplyblock-csi/control-plane-ca/ca.crt"),
        "{plugin}"
    );
}

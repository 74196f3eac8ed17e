//! Taking over the objects a Helm release installed under the driver's names. Pure.
//!
//! A cluster that ran simplyblock before this kind existed holds the driver already, with
//! volumes attached through it, so its objects are adopted in place, never recreated: the
//! apply takes their fields over (forced), marks them `helm.sh/resource-policy: keep` so
//! a later `helm upgrade` or `uninstall` leaves them alone, makes them the driver's (owner
//! reference, managed-by label), and then the release's labels and annotations are
//! removed, since the release no longer holds them. Before any of that, what cannot
//! change in place must already agree with the spec: the driver name the kubelet knows
//! the plugin by (every volume records it), the TLS mode the plugins reach the control
//! plane with, and the workloads' selectors. Otherwise nothing is touched and the refusal
//! says why.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use simplyblock_api::keys::{MANAGED_BY_LABEL, MANAGED_BY_SIMPLYBLOCK_DRIVER};
use simplyblock_api::simplyblock_driver::SimplyblockDriver;

use super::manifests::{TLS_MODE_ENV, tls_mode};
use super::objects::{Kind, ObjectKey};

/// The labels a Helm release leaves on what it installed.
pub const HELM_LABELS: [&str; 6] = [
    "app.kubernetes.io/managed-by",
    "heritage",
    "release",
    "revision",
    "chart",
    "chartVersion",
];
/// The annotations by which Helm knows an object is its release's.
pub const HELM_ANNOTATIONS: [&str; 2] = [
    "meta.helm.sh/release-name",
    "meta.helm.sh/release-namespace",
];
/// Helm skips an object carrying `keep` on upgrade and uninstall; it stays on what was
/// adopted, since that stays true.
pub const RESOURCE_POLICY_ANNOTATION: &str = "helm.sh/resource-policy";
pub const RESOURCE_POLICY_KEEP: &str = "keep";

/// Who wrote a live object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// A SimplyblockDriver (this one or an earlier one of the same cluster).
    Driver,
    /// A Helm release that has not handed it over yet.
    Helm,
    /// Someone else: it is not taken.
    Other,
}

fn label<'a>(live: &'a Value, key: &str) -> Option<&'a str> {
    live["metadata"]["labels"][key].as_str()
}

fn annotation<'a>(live: &'a Value, key: &str) -> Option<&'a str> {
    live["metadata"]["annotations"][key].as_str()
}

/// Who wrote `live`. An object still carrying a release's metadata is Helm's until it is
/// stripped, even when the driver's apply has already marked it.
pub fn holder(live: &Value) -> Holder {
    let helm = label(live, HELM_LABELS[0]) == Some("Helm")
        || HELM_ANNOTATIONS
            .iter()
            .any(|a| annotation(live, a).is_some_and(|v| !v.is_empty()));
    if helm {
        return Holder::Helm;
    }
    let labelled = label(live, MANAGED_BY_LABEL) == Some(MANAGED_BY_SIMPLYBLOCK_DRIVER);
    let owned = live["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|owners| {
            owners.iter().any(|o| {
                o["kind"] == "SimplyblockDriver"
                    && o["apiVersion"]
                        .as_str()
                        .is_some_and(|v| v.starts_with("storage.simplyblock.io/"))
            })
        });
    if labelled || owned {
        Holder::Driver
    } else {
        Holder::Other
    }
}

/// Whether `live` came to the driver from a Helm release (or is coming now).
pub fn adopted(live: &Value) -> bool {
    holder(live) == Holder::Helm
        || annotation(live, RESOURCE_POLICY_ANNOTATION) == Some(RESOURCE_POLICY_KEEP)
}

/// `namespace/name` of the release that installed `live`.
fn release(live: &Value) -> Option<String> {
    let name = annotation(live, HELM_ANNOTATIONS[0])?;
    let namespace = annotation(live, HELM_ANNOTATIONS[1]).unwrap_or_default();
    Some(format!("{namespace}/{name}"))
}

/// `body` as it is applied onto `live`: an adopted object keeps Helm away for good.
pub fn with_resource_policy(mut body: Value, live: Option<&Value>) -> Value {
    if live.is_some_and(adopted) {
        body["metadata"]["annotations"][RESOURCE_POLICY_ANNOTATION] = json!(RESOURCE_POLICY_KEEP);
    }
    body
}

/// The merge patch that removes a release's labels and annotations and nothing else (an
/// apply cannot: those fields are Helm's, not the driver's).
pub fn strip_patch() -> Value {
    let labels: serde_json::Map<String, Value> = HELM_LABELS
        .iter()
        .map(|k| ((*k).into(), Value::Null))
        .collect();
    let annotations: serde_json::Map<String, Value> = HELM_ANNOTATIONS
        .iter()
        .map(|k| ((*k).into(), Value::Null))
        .collect();
    json!({"metadata": {"labels": labels, "annotations": annotations}})
}

/// The driver name a node plugin's registrar tells the kubelet: the directory of
/// `--kubelet-registration-path=/var/lib/kubelet/plugins/<driver>/csi.sock`.
pub fn registered_driver(daemonset: &Value) -> Option<String> {
    containers(daemonset).find_map(|c| {
        c["args"].as_array()?.iter().find_map(|a| {
            let path = a.as_str()?.strip_prefix("--kubelet-registration-path=")?;
            let (dir, _socket) = path.rsplit_once('/')?;
            let (_, name) = dir.rsplit_once('/')?;
            (!name.is_empty()).then(|| name.to_owned())
        })
    })
}

/// The TLS mode a running workload's containers were given; none is `disabled`.
pub fn running_tls_mode(workload: &Value) -> String {
    containers(workload)
        .find_map(|c| {
            c["env"].as_array()?.iter().find_map(|e| {
                (e["name"] == TLS_MODE_ENV).then(|| e["value"].as_str().unwrap_or_default())
            })
        })
        .unwrap_or("disabled")
        .to_owned()
}

fn containers(workload: &Value) -> impl Iterator<Item = &Value> {
    workload["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
}

/// Every reason the live objects cannot become `desired` as the spec describes it; empty
/// when they can. `helm_csi_drivers` are the CSIDrivers some Helm release installed.
pub fn refusals(
    driver: &SimplyblockDriver,
    desired: &BTreeMap<ObjectKey, Value>,
    live: &BTreeMap<ObjectKey, Value>,
    helm_csi_drivers: &[Value],
) -> Vec<String> {
    let mut out = Vec::new();
    let held = |holder: Holder| {
        desired.keys().filter_map(move |k| {
            live.get(k)
                .filter(|l| self::holder(l) == holder)
                .map(|l| (k, l))
        })
    };
    for (key, _) in held(Holder::Other) {
        out.push(format!(
            "{key} exists and was written neither by a SimplyblockDriver nor by a Helm release, so it is not taken over; delete it and it is created as this driver's"
        ));
    }
    let releases: BTreeSet<String> = held(Holder::Helm).filter_map(|(_, l)| release(l)).collect();
    let want = &driver.spec.driver_name;
    let mut installed: BTreeSet<String> = helm_csi_drivers
        .iter()
        .filter(|d| release(d).is_some_and(|r| releases.contains(&r)))
        .filter_map(|d| d["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    for (key, l) in held(Holder::Helm) {
        match key.kind {
            Kind::DaemonSet => installed.extend(registered_driver(l)),
            Kind::StatefulSet => {}
            _ => continue,
        }
        let running = running_tls_mode(l);
        let wanted = tls_mode(&driver.spec.tls);
        if running != wanted {
            out.push(format!(
                "{key} reaches the control plane with TLS mode {running} ({TLS_MODE_ENV}) and spec.tls asks for {wanted}; adopting it would switch TLS on a live data path, so set spec.tls to what runs"
            ));
        }
        let body = &desired[key];
        for field in ["selector", "serviceName"] {
            let ours = &body["spec"][field];
            let theirs = &l["spec"][field];
            if !ours.is_null() && theirs != ours {
                out.push(format!(
                    "{key} has spec.{field} {theirs}, which cannot change, and the driver's is {ours}; delete {key} (its pods go with it) and it is created as this driver's"
                ));
            }
        }
    }
    if !installed.is_empty() && !installed.contains(want) {
        let names: Vec<&str> = installed.iter().map(String::as_str).collect();
        out.push(format!(
            "the Helm release installed the driver as {}, and spec.driverName is {want}; every volume records the driver that provisioned it and spec.driverName cannot change, so recreate this SimplyblockDriver with driverName {}",
            names.join(", "),
            names[0]
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::names::{CONTROLLER_STATEFULSET, NODE_DAEMONSET};

    fn meta(labels: Value, annotations: Value) -> Value {
        json!({"metadata": {"name": "x", "labels": labels, "annotations": annotations}})
    }

    fn helm() -> Value {
        meta(
            json!({"app.kubernetes.io/managed-by": "Helm", "chart": "spdk-csi-1"}),
            json!({"meta.helm.sh/release-name": "csi", "meta.helm.sh/release-namespace": "sb"}),
        )
    }

    #[test]
    fn who_wrote_an_object() {
        assert_eq!(holder(&helm()), Holder::Helm);
        // Marked by the driver's apply but not stripped yet: still Helm's to strip.
        let mut marked = helm();
        marked["metadata"]["labels"][MANAGED_BY_LABEL] = json!(MANAGED_BY_SIMPLYBLOCK_DRIVER);
        assert_eq!(holder(&marked), Holder::Helm);
        assert_eq!(
            holder(&meta(
                json!({MANAGED_BY_LABEL: MANAGED_BY_SIMPLYBLOCK_DRIVER}),
                json!({})
            )),
            Holder::Driver
        );
        let owned = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "SimplyblockDriver", "name": "old", "uid": "u"}
        ]}});
        assert_eq!(holder(&owned), Holder::Driver);
        assert_eq!(holder(&meta(json!({"app": "x"}), json!({}))), Holder::Other);
        assert_eq!(
            holder(&meta(
                json!({"app.kubernetes.io/managed-by": "kustomize"}),
                json!({})
            )),
            Holder::Other
        );
    }

    #[test]
    fn an_adopted_object_keeps_its_resource_policy_after_the_strip() {
        let mut stripped = meta(
            json!({MANAGED_BY_LABEL: MANAGED_BY_SIMPLYBLOCK_DRIVER}),
            json!({RESOURCE_POLICY_ANNOTATION: RESOURCE_POLICY_KEEP}),
        );
        assert!(adopted(&stripped));
        let body = with_resource_policy(json!({"metadata": {"name": "x"}}), Some(&stripped));
        assert_eq!(
            body["metadata"]["annotations"][RESOURCE_POLICY_ANNOTATION],
            RESOURCE_POLICY_KEEP
        );
        stripped["metadata"]["annotations"] = json!({});
        assert!(!adopted(&stripped));
        let body = with_resource_policy(json!({"metadata": {"name": "x"}}), Some(&stripped));
        assert!(body["metadata"]["annotations"].is_null());
    }

    #[test]
    fn the_strip_removes_the_release_and_keeps_the_resource_policy() {
        let patch = strip_patch();
        for l in HELM_LABELS {
            assert!(patch["metadata"]["labels"][l].is_null());
            assert!(patch["metadata"]["labels"].get(l).is_some(), "{l}");
        }
        for a in HELM_ANNOTATIONS {
            assert!(patch["metadata"]["annotations"].get(a).is_some(), "{a}");
        }
        assert!(
            patch["metadata"]["annotations"]
                .get(RESOURCE_POLICY_ANNOTATION)
                .is_none()
        );
    }

    #[test]
    fn the_registered_driver_is_read_from_the_registration_path() {
        let ds = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "csi-node", "args": ["--node"]},
            {"name": "csi-registrar", "args": ["--csi-address=unix:///csi/csi.sock",
                "--kubelet-registration-path=/var/lib/kubelet/plugins/csi.simplyblock.io/csi.sock"]}
        ]}}}});
        assert_eq!(
            registered_driver(&ds).as_deref(),
            Some("csi.simplyblock.io")
        );
        assert_eq!(registered_driver(&json!({})), None);
    }

    fn driver(spec: Value) -> SimplyblockDriver {
        serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "SimplyblockDriver",
            "metadata": {"name": "sbd", "namespace": "sb", "uid": "u"},
            "spec": spec,
        }))
        .expect("driver")
    }

    /// A Helm node DaemonSet registering `driver`, with `env` on its plugin.
    fn helm_daemonset(driver: &str, env: Value) -> Value {
        let mut ds = helm();
        ds["spec"] = json!({
            "selector": {"matchLabels": {"app": "simplyblock-csi-node"}},
            "template": {"spec": {"containers": [
                {"name": "csi-registrar", "args": [
                    format!("--kubelet-registration-path=/var/lib/kubelet/plugins/{driver}/csi.sock")]},
                {"name": "csi-node", "env": env}
            ]}}
        });
        ds
    }

    fn desired_daemonset() -> BTreeMap<ObjectKey, Value> {
        BTreeMap::from([(
            ObjectKey::new(Kind::DaemonSet, NODE_DAEMONSET),
            json!({"spec": {"selector": {"matchLabels": {"app": "simplyblock-csi-node"}}}}),
        )])
    }

    fn live(ds: Value) -> BTreeMap<ObjectKey, Value> {
        BTreeMap::from([(ObjectKey::new(Kind::DaemonSet, NODE_DAEMONSET), ds)])
    }

    #[test]
    fn a_release_that_agrees_with_the_spec_is_adopted() {
        let ds = helm_daemonset("csi.simplyblock.io", json!([]));
        assert!(refusals(&driver(json!({})), &desired_daemonset(), &live(ds), &[]).is_empty());
    }

    #[test]
    fn another_driver_name_is_refused() {
        let ds = helm_daemonset("other.simplyblock.io", json!([]));
        let why = refusals(&driver(json!({})), &desired_daemonset(), &live(ds), &[]);
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(why[0].contains("other.simplyblock.io"), "{why:?}");
        assert!(
            why[0].contains("spec.driverName is csi.simplyblock.io"),
            "{why:?}"
        );
    }

    #[test]
    fn the_releases_csi_driver_counts_and_another_releases_does_not() {
        let ds = helm_daemonset("csi.simplyblock.io", json!([]));
        let mut theirs = helm();
        theirs["metadata"]["name"] = json!("legacy.simplyblock.io");
        let mut unrelated = theirs.clone();
        unrelated["metadata"]["annotations"]["meta.helm.sh/release-name"] = json!("other");
        let d = driver(json!({"driverName": "legacy.simplyblock.io"}));
        let refused = refusals(&d, &desired_daemonset(), &live(ds.clone()), &[unrelated]);
        assert_eq!(refused.len(), 1, "{refused:?}");
        // The release installed both names: the spec's is one of them.
        assert!(refusals(&d, &desired_daemonset(), &live(ds), &[theirs]).is_empty());
    }

    #[test]
    fn another_tls_mode_is_refused_both_ways() {
        let plain = helm_daemonset("csi.simplyblock.io", json!([]));
        let tls = driver(json!({"tls": {"enableTLS": true}}));
        let why = refusals(&tls, &desired_daemonset(), &live(plain), &[]);
        assert!(
            why.iter().any(|w| w.contains("TLS mode disabled")),
            "{why:?}"
        );
        let mutual = helm_daemonset(
            "csi.simplyblock.io",
            json!([{"name": TLS_MODE_ENV, "value": "authenticated"}]),
        );
        let why = refusals(
            &driver(json!({})),
            &desired_daemonset(),
            &live(mutual.clone()),
            &[],
        );
        assert!(
            why.iter().any(|w| w.contains("TLS mode authenticated")),
            "{why:?}"
        );
        let agreeing = driver(json!({"tls": {"enableTLS": true, "enableMutualTLS": true}}));
        assert!(refusals(&agreeing, &desired_daemonset(), &live(mutual), &[]).is_empty());
    }

    #[test]
    fn an_immutable_selector_that_differs_is_refused() {
        let mut ds = helm_daemonset("csi.simplyblock.io", json!([]));
        ds["spec"]["selector"] = json!({"matchLabels": {"app": "csi-node"}});
        let why = refusals(&driver(json!({})), &desired_daemonset(), &live(ds), &[]);
        assert!(why.iter().any(|w| w.contains("spec.selector")), "{why:?}");
    }

    #[test]
    fn an_object_nobody_handed_over_is_not_taken() {
        let key = ObjectKey::new(Kind::StatefulSet, CONTROLLER_STATEFULSET);
        let desired = BTreeMap::from([(key.clone(), json!({}))]);
        let live = BTreeMap::from([(key, meta(json!({}), json!({})))]);
        let why = refusals(&driver(json!({})), &desired, &live, &[]);
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(
            why[0].starts_with("StatefulSet/simplyblock-csi-controller exists"),
            "{why:?}"
        );
    }
}

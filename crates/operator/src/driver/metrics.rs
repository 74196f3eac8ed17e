//! The driver's metrics, `simplyblock_simplyblockdriver_`, each labelled `namespace, name`:
//!
//! | metric | value |
//! |---|---|
//! | `nodes_ready_count` | node plugins ready |
//! | `nodes_expected_count` | node plugins scheduled |
//! | `controller_ready_state` | 1 when a controller plugin is ready |
//! | `version_info` (and `version`) | 1, for the version the driver runs |

use simplyblock_api::simplyblock_driver::SimplyblockDriverStatus;

use crate::runtime::metrics::{Labels, Metrics};

const PREFIX: &str = "simplyblock_simplyblockdriver_";
const GAUGES: [&str; 3] = [
    "nodes_ready_count",
    "nodes_expected_count",
    "controller_ready_state",
];

fn name(item: &str) -> String {
    format!("{PREFIX}{item}")
}

fn labels(namespace: &str, driver: &str) -> Labels {
    vec![
        ("namespace", namespace.to_owned()),
        ("name", driver.to_owned()),
    ]
}

fn version_labels(namespace: &str, driver: &str, version: &str) -> Labels {
    let mut l = labels(namespace, driver);
    l.push(("version", version.to_owned()));
    l
}

/// Records `status` of `namespace/driver`, whose status before was `previous`.
pub fn record(
    m: &Metrics,
    namespace: &str,
    driver: &str,
    previous: Option<&SimplyblockDriverStatus>,
    status: &SimplyblockDriverStatus,
) {
    let l = labels(namespace, driver);
    m.set(
        &name("nodes_ready_count"),
        l.clone(),
        status.nodes_ready.into(),
    );
    m.set(
        &name("nodes_expected_count"),
        l.clone(),
        status.nodes_total.into(),
    );
    m.set(
        &name("controller_ready_state"),
        l,
        if status.controller_ready { 1.0 } else { 0.0 },
    );
    let before = previous.and_then(|p| p.version.as_deref());
    if let Some(before) = before.filter(|b| Some(*b) != status.version.as_deref()) {
        m.forget(
            &name("version_info"),
            &version_labels(namespace, driver, before),
        );
    }
    if let Some(version) = &status.version {
        m.set(
            &name("version_info"),
            version_labels(namespace, driver, version),
            1.0,
        );
    }
}

/// The driver is gone: none of its series is rendered any more.
pub fn forget(m: &Metrics, namespace: &str, driver: &str, last: Option<&SimplyblockDriverStatus>) {
    for gauge in GAUGES {
        m.forget(&name(gauge), &labels(namespace, driver));
    }
    if let Some(version) = last.and_then(|s| s.version.as_deref()) {
        m.forget(
            &name("version_info"),
            &version_labels(namespace, driver, version),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(ready: i32, total: i32, version: &str) -> SimplyblockDriverStatus {
        SimplyblockDriverStatus {
            nodes_ready: ready,
            nodes_total: total,
            controller_ready: true,
            version: Some(version.into()),
            ..SimplyblockDriverStatus::default()
        }
    }

    #[test]
    fn a_new_version_replaces_the_old_and_forgetting_removes_all() {
        let m = Metrics::new();
        let first = status(2, 3, "v1");
        record(&m, "ns", "sbd", None, &first);
        let second = status(3, 3, "v2");
        record(&m, "ns", "sbd", Some(&first), &second);
        let l = [("namespace", "ns"), ("name", "sbd")];
        assert_eq!(m.sample(&name("nodes_ready_count"), &l), Some(3.0));
        assert_eq!(m.sample(&name("nodes_expected_count"), &l), Some(3.0));
        assert_eq!(m.sample(&name("controller_ready_state"), &l), Some(1.0));
        let v = |v| [("namespace", "ns"), ("name", "sbd"), ("version", v)];
        assert_eq!(m.sample(&name("version_info"), &v("v1")), None);
        assert_eq!(m.sample(&name("version_info"), &v("v2")), Some(1.0));
        forget(&m, "ns", "sbd", Some(&second));
        assert_eq!(m.sample(&name("nodes_ready_count"), &l), None);
        assert_eq!(m.sample(&name("version_info"), &v("v2")), None);
    }
}

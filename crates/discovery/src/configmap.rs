//! How a probe report is stored: the ConfigMap's name, labels and key.
//!
//! The Job that writes a report is named like its ConfigMap, and a Job's name reaches its
//! pods as a label, so every name here fits the 63 bytes of a label value. Neither the name
//! nor the labels can be read back as the node they came from: the node name survives
//! exactly only inside the report.

use std::collections::BTreeMap;

/// The key the report is stored under.
pub const REPORT_KEY: &str = "report.json";
/// The largest report accepted: a ConfigMap holds 1 MiB, less room for its metadata.
pub const MAX_REPORT_BYTES: usize = 1024 * 1024 - 8 * 1024;
/// The longest label value Kubernetes accepts.
pub const MAX_LABEL_VALUE: usize = 63;

pub const LABEL_COMPONENT: &str = keys::COMPONENT_LABEL;
pub const LABEL_RUN: &str = keys::NODEPROBE_RUN_LABEL;
pub const LABEL_NODE: &str = keys::NODEPROBE_NODE_LABEL;
pub const COMPONENT: &str = keys::NODEPROBE_COMPONENT;
const NAME_PREFIX: &str = "sb-nodeprobe-";

use simplyblock_api::keys;
use simplyblock_api::names::{cut, digest8, sanitize};

fn sha_hex(input: &[u8]) -> String {
    // Only the first 8 digits are ever used.
    digest8(input)
}

/// A label value for `input` (see [`simplyblock_api::names::label_value`]).
pub use simplyblock_api::names::label_value;

/// The ConfigMap (and Job) name for one worker of one run:
/// `sb-nodeprobe-<stem>-<8 hex of sha256(run + "\0" + node)>`, at most 63 bytes. The
/// digest is unconditional because run and node are joined by a separator both may hold.
pub fn config_map_name(run: &str, node: &str) -> String {
    let mut joined = Vec::with_capacity(run.len() + node.len() + 1);
    joined.extend_from_slice(run.as_bytes());
    joined.push(0);
    joined.extend_from_slice(node.as_bytes());
    let digest = &sha_hex(&joined)[..8];
    let stem_source = sanitize(&format!("{run}-{node}"));
    let room = MAX_LABEL_VALUE - NAME_PREFIX.len() - 1 - digest.len();
    let stem = cut(&stem_source, room);
    if stem.is_empty() {
        format!("{NAME_PREFIX}{digest}")
    } else {
        format!("{NAME_PREFIX}{stem}-{digest}")
    }
}

/// The labels of a report's ConfigMap; the run's reports are listed by the first two.
pub fn labels(run: &str, node: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_COMPONENT.to_string(), COMPONENT.to_string()),
        (LABEL_RUN.to_string(), label_value(run)),
        (LABEL_NODE.to_string(), label_value(node)),
    ])
}

/// The selector that lists one run's reports.
pub fn run_selector(run: &str) -> String {
    format!(
        "{LABEL_COMPONENT}={COMPONENT},{LABEL_RUN}={}",
        label_value(run)
    )
}

/// The annotation holding the exact node name, which a label value may have had to cut.
pub const NODE_ANNOTATION: &str = keys::NODEPROBE_NODE_ANNOTATION;

/// The discovery run a report belongs to: its OperatorOps' name and UID.
#[derive(Debug, Clone, Copy)]
pub struct RunRef<'a> {
    pub name: &'a str,
    pub uid: &'a str,
}

/// The report ConfigMap `name` for `node` of `run`: what the probe Job writes (and what a
/// simulated fleet writes in its place). It is owned by the run, so deleting the run
/// deletes its reports.
pub fn report_config_map(
    namespace: &str,
    name: &str,
    run: RunRef<'_>,
    node: &str,
    report_json: String,
) -> k8s_openapi::api::core::v1::ConfigMap {
    let mut labels = labels(run.name, node);
    labels.insert(
        keys::MANAGED_BY_LABEL.into(),
        keys::MANAGED_BY_OPERATOR_OPS.into(),
    );
    let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: keys::API_VERSION.into(),
        kind: "OperatorOps".into(),
        name: run.name.into(),
        uid: run.uid.into(),
        controller: Some(true),
        // Blocking the run's deletion would need the probe to be allowed to write the
        // run's finalizers; the garbage collector deletes the report either way.
        block_owner_deletion: None,
    };
    k8s_openapi::api::core::v1::ConfigMap {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            annotations: Some(BTreeMap::from([(
                NODE_ANNOTATION.to_string(),
                node.to_string(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(REPORT_KEY.to_string(), report_json)])),
        ..Default::default()
    }
}

/// Whether `cm` is the report `run` asked of `node`: controlled by the run itself (its UID,
/// not only its name) and named as the run names that node's report. The probe's account
/// may create any ConfigMap, and a deleted same-named run's reports may linger until the
/// garbage collector comes, so the run's labels alone prove nothing.
pub fn is_report_of(
    cm: &k8s_openapi::api::core::v1::ConfigMap,
    run: RunRef<'_>,
    node: &str,
) -> bool {
    let controlled = cm.metadata.owner_references.iter().flatten().any(|o| {
        o.controller == Some(true)
            && o.api_version == keys::API_VERSION
            && o.kind == "OperatorOps"
            && o.name == run.name
            && o.uid == run.uid
    });
    controlled
        && !run.uid.is_empty()
        && cm.metadata.name.as_deref() == Some(config_map_name(run.name, node).as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid_label(v: &str) -> bool {
        v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
            && v.chars().next().is_none_or(|c| c.is_ascii_alphanumeric())
            && v.chars().last().is_none_or(|c| c.is_ascii_alphanumeric())
    }

    #[test]
    fn a_value_that_fits_is_kept() {
        assert_eq!(label_value("worker-1"), "worker-1");
        let exactly = "a".repeat(63);
        assert_eq!(label_value(&exactly), exactly);
    }

    #[test]
    fn one_byte_past_the_limit_is_cut_with_a_digest() {
        let long = "a".repeat(64);
        let v = label_value(&long);
        assert_eq!(v.len(), 63);
        assert!(valid_label(&v), "{v}");
        assert!(v.starts_with(&"a".repeat(54)));
        assert_ne!(
            v,
            label_value(&"a".repeat(65)),
            "digest is over the whole input"
        );
    }

    #[test]
    fn long_names_sharing_a_prefix_get_distinct_labels() {
        let a = "discovered-initial-discovery-cluster-vm03.simplyblock4.localdomain-0";
        let b = "discovered-initial-discovery-cluster-vm03.simplyblock4.localdomain-1";
        assert!(a.len() > 63);
        let (la, lb) = (label_value(a), label_value(b));
        assert!(valid_label(&la) && valid_label(&lb));
        assert_ne!(la, lb);
    }

    #[test]
    fn uppercase_and_odd_characters_become_a_valid_label() {
        let v = label_value("Worker_1.Example.COM");
        assert!(valid_label(&v), "{v}");
        assert_ne!(v, label_value("worker-1.example.com"));
        assert!(valid_label(&label_value("___")));
    }

    #[test]
    fn a_report_is_owned_by_its_run() {
        let run = RunRef {
            name: "initial-discovery",
            uid: "6f1c0c1e-0000-4000-8000-000000000001",
        };
        let name = config_map_name(run.name, "w1");
        let cm = report_config_map("ns", &name, run, "w1", "{}".into());
        assert_eq!(cm.metadata.name.as_deref(), Some(name.as_str()));
        let owners = cm.metadata.owner_references.expect("owned");
        assert_eq!(owners.len(), 1);
        let o = &owners[0];
        assert_eq!(
            (o.api_version.as_str(), o.kind.as_str(), o.name.as_str()),
            (keys::API_VERSION, "OperatorOps", run.name)
        );
        assert_eq!(o.uid, run.uid);
        assert_eq!(o.controller, Some(true));
    }

    #[test]
    fn only_a_report_the_run_itself_owns_under_its_name_is_taken() {
        let run = RunRef {
            name: "initial-discovery",
            uid: "6f1c0c1e-0000-4000-8000-000000000001",
        };
        let name = config_map_name(run.name, "w1");
        let cm = report_config_map("ns", &name, run, "w1", "{}".into());
        assert!(is_report_of(&cm, run, "w1"));
        // Another node's name for it.
        assert!(!is_report_of(&cm, run, "w2"));
        // A same-named run's, or one owned by nothing.
        let earlier = RunRef {
            uid: "6f1c0c1e-0000-4000-8000-000000000002",
            ..run
        };
        assert!(!is_report_of(&cm, earlier, "w1"));
        let mut unowned = cm.clone();
        unowned.metadata.owner_references = None;
        assert!(!is_report_of(&unowned, run, "w1"));
        let mut not_controller = cm.clone();
        if let Some(o) = not_controller.metadata.owner_references.as_mut() {
            o[0].controller = None;
        }
        assert!(!is_report_of(&not_controller, run, "w1"));
        // Under the run's labels but another name.
        let mut renamed = cm;
        renamed.metadata.name = Some("simplyblock-upgrade".into());
        assert!(!is_report_of(&renamed, run, "w1"));
    }

    #[test]
    fn config_map_names_fit_and_differ_by_node() {
        let node = "n".repeat(253);
        let a = config_map_name("initial-discovery", &node);
        assert!(a.len() <= 63 && valid_label(&a), "{a}");
        assert!(a.starts_with("sb-nodeprobe-initial-discovery-"));
        let b = config_map_name("initial-discovery", &format!("{node}x"));
        assert_ne!(a, b);
        // The separator cannot be forged: ("a-b","c") and ("a","b-c") differ.
        assert_ne!(config_map_name("a-b", "c"), config_map_name("a", "b-c"));
    }
}

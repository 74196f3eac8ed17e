//! Per-claim controls: the PersistentVolumeClaim annotations and label CreateVolume reads
//! (the external-provisioner names the claim with `--extra-create-metadata`), checked all
//! at once, and the create body they shape.
//!
//! | Key | Meaning |
//! |---|---|
//! | `…/selected-storage-node` | pins the primary to a storage node (id or hostname) |
//! | `…/placement-hint` | a one-shot placement, removed after a successful create |
//! | `…/host-id` | the legacy pin, read last |
//! | `…/lvol-id` | the id the new volume takes |
//! | `simplyblock.io/pod-affinity` | `false` opts out of placing the volume on the storage node beside the pod |
//! | `…/qos-rw-iops`, `…/qos-rw-mbps`, `…/qos-r-mbps`, `…/qos-w-mbps` | override the class's QoS ceilings |
//! | label `storage.simplyblock.io/consistency-group` | the consistency group the volume joins |
//!
//! `…/` is any of `storage.simplyblock.io/`, `simplyblock.io/` and the older `simplybk/`;
//! where a claim carries more than one, the newest spelling wins.

use std::collections::BTreeMap;

use simplyblock_controlplane::VolumeCreate;
use uuid::Uuid;

/// The prefixes an annotation is read under, newest first.
pub const PREFIXES: [&str; 3] = ["storage.simplyblock.io/", "simplyblock.io/", "simplybk/"];

/// The provisioner's parameters naming the claim (`--extra-create-metadata`).
pub const PVC_NAME_PARAM: &str = "csi.storage.k8s.io/pvc/name";
pub const PVC_NAMESPACE_PARAM: &str = "csi.storage.k8s.io/pvc/namespace";

pub const SELECTED_STORAGE_NODE: &str = "selected-storage-node";
pub const PLACEMENT_HINT: &str = "placement-hint";
pub const HOST_ID: &str = "host-id";
pub const LVOL_ID: &str = "lvol-id";
/// Read under `simplyblock.io/` only, as it always was.
pub const POD_AFFINITY_ANNOTATION: &str = "simplyblock.io/pod-affinity";
pub const CONSISTENCY_GROUP_LABEL: &str = "storage.simplyblock.io/consistency-group";

/// A QoS ceiling's annotation names: the current one and the older `simplybk/` one.
struct QosKey {
    name: &'static str,
    legacy: &'static str,
}

const QOS_RW_IOPS: QosKey = QosKey {
    name: "qos-rw-iops",
    legacy: "qos-rw-iops",
};
const QOS_RW_MBPS: QosKey = QosKey {
    name: "qos-rw-mbps",
    legacy: "qos-rw-mbytes",
};
const QOS_R_MBPS: QosKey = QosKey {
    name: "qos-r-mbps",
    legacy: "qos-r-mbytes",
};
const QOS_W_MBPS: QosKey = QosKey {
    name: "qos-w-mbps",
    legacy: "qos-w-mbytes",
};

/// Every spelling of `name`, newest first.
pub fn spellings(name: &str) -> Vec<String> {
    PREFIXES.iter().map(|p| format!("{p}{name}")).collect()
}

/// The value under the newest spelling of `name` that the claim carries, with its key.
fn newest<'a>(annotations: &'a BTreeMap<String, String>, name: &str) -> Option<(String, &'a str)> {
    spellings(name)
        .into_iter()
        .find_map(|k| annotations.get(&k).map(|v| (k, v.as_str())))
}

/// Where the volume's primary is placed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// The storage node, by id or hostname.
    pub host: String,
    /// The annotation it came from.
    pub key: String,
}

/// The controls one claim sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimControls {
    pub pin: Option<Pin>,
    /// Every spelling of the placement hint the claim carries: removed after a create.
    pub hint_keys: Vec<String>,
    pub lvol_id: Option<Uuid>,
    /// `Some(false)`: the claim opts out of co-location with its pod.
    pub pod_affinity: Option<bool>,
    pub qos_rw_iops: Option<u64>,
    pub qos_rw_mbytes: Option<u64>,
    pub qos_r_mbytes: Option<u64>,
    pub qos_w_mbytes: Option<u64>,
    pub consistency_group: Option<String>,
}

impl ClaimControls {
    /// Reads the controls of a claim with these annotations and labels; every bad value is
    /// reported at once.
    pub fn parse(
        annotations: &BTreeMap<String, String>,
        labels: &BTreeMap<String, String>,
    ) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        let mut out = ClaimControls {
            hint_keys: spellings(PLACEMENT_HINT)
                .into_iter()
                .filter(|k| annotations.contains_key(k))
                .collect(),
            ..Default::default()
        };
        for name in [SELECTED_STORAGE_NODE, PLACEMENT_HINT, HOST_ID] {
            let Some((key, value)) = newest(annotations, name) else {
                continue;
            };
            let host = value.trim();
            if host.is_empty() || host.chars().any(char::is_whitespace) {
                problems.push(format!(
                    "annotation {key}={value:?} names no storage node; set it to a storage node's id or hostname, or remove it"
                ));
            } else {
                out.pin = Some(Pin {
                    host: host.to_owned(),
                    key,
                });
            }
            // The first of the three the claim carries decides, valid or not.
            break;
        }
        if let Some((key, value)) = newest(annotations, LVOL_ID) {
            match Uuid::parse_str(value.trim()) {
                Ok(id) => out.lvol_id = Some(id),
                Err(_) => problems.push(format!(
                    "annotation {key}={value:?} is not a volume id; set it to a UUID such as 5b0c3bd1-8f3e-4a63-9a52-0f8a3c1d2e4f, or remove it"
                )),
            }
        }
        if let Some(value) = annotations.get(POD_AFFINITY_ANNOTATION) {
            match value.trim().to_ascii_lowercase().as_str() {
                "true" => out.pod_affinity = Some(true),
                "false" => out.pod_affinity = Some(false),
                _ => problems.push(format!(
                    "annotation {POD_AFFINITY_ANNOTATION}={value:?} is neither \"true\" nor \"false\""
                )),
            }
        }
        for (q, slot) in [
            (QOS_RW_IOPS, &mut out.qos_rw_iops),
            (QOS_RW_MBPS, &mut out.qos_rw_mbytes),
            (QOS_R_MBPS, &mut out.qos_r_mbytes),
            (QOS_W_MBPS, &mut out.qos_w_mbytes),
        ] {
            let found = newest(annotations, q.name).or_else(|| {
                let k = format!("simplybk/{}", q.legacy);
                annotations.get(&k).map(|v| (k, v.as_str()))
            });
            if let Some((key, value)) = found {
                match value.trim().parse::<u64>() {
                    Ok(n) => *slot = Some(n),
                    Err(_) => problems.push(format!(
                        "annotation {key}={value:?} is not a whole number; set a ceiling such as \"1000\" (0 means none), or remove it to keep the StorageClass's"
                    )),
                }
            }
        }
        if let Some(group) = labels.get(CONSISTENCY_GROUP_LABEL) {
            if group.is_empty() {
                problems.push(format!(
                    "label {CONSISTENCY_GROUP_LABEL} is empty; name the consistency group the volume joins, or remove the label"
                ));
            } else {
                out.consistency_group = Some(group.clone());
            }
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(problems)
        }
    }

    /// Applies the controls to a create body: the pin (over `co_located`, the storage node
    /// beside the pod, which counts unless the claim opts out), the id, the QoS overrides
    /// and the group.
    pub fn apply(&self, body: &mut VolumeCreate, co_located: Option<String>) {
        body.host_id = match &self.pin {
            Some(p) => Some(p.host.clone()),
            None if self.pod_affinity == Some(false) => None,
            None => co_located,
        };
        body.lvol_id = self.lvol_id;
        for (o, slot) in [
            (self.qos_rw_iops, &mut body.max_rw_iops),
            (self.qos_rw_mbytes, &mut body.max_rw_mbytes),
            (self.qos_r_mbytes, &mut body.max_r_mbytes),
            (self.qos_w_mbytes, &mut body.max_w_mbytes),
        ] {
            if let Some(v) = o {
                *slot = v;
            }
        }
        body.consistency_group = self.consistency_group.clone();
    }
}

/// One message for every refused control of claim `namespace/name`.
pub fn refusal(namespace: &str, name: &str, problems: &[String]) -> String {
    format!(
        "PersistentVolumeClaim {namespace}/{name} sets controls the driver refuses: {}",
        problems.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_pin_comes_from_the_first_of_selected_node_hint_and_host_id() {
        let c = ClaimControls::parse(
            &m(&[
                ("simplyblock.io/host-id", "n3"),
                ("storage.simplyblock.io/placement-hint", "n2"),
                ("simplyblock.io/selected-storage-node", "n1"),
            ]),
            &m(&[]),
        )
        .expect("valid");
        assert_eq!(c.pin.expect("pin").host, "n1");
        assert_eq!(c.hint_keys, vec!["storage.simplyblock.io/placement-hint"]);

        let c = ClaimControls::parse(
            &m(&[
                ("simplybk/host-id", "n3"),
                ("simplyblock.io/placement-hint", "n2"),
            ]),
            &m(&[]),
        )
        .expect("valid");
        assert_eq!(
            c.pin,
            Some(Pin {
                host: "n2".into(),
                key: "simplyblock.io/placement-hint".into()
            })
        );
    }

    #[test]
    fn the_newest_spelling_wins() {
        let c = ClaimControls::parse(
            &m(&[
                ("simplybk/selected-storage-node", "old"),
                ("storage.simplyblock.io/selected-storage-node", "new"),
                ("simplybk/qos-rw-mbytes", "5"),
                ("simplyblock.io/qos-rw-mbps", "7"),
            ]),
            &m(&[]),
        )
        .expect("valid");
        assert_eq!(c.pin.expect("pin").host, "new");
        assert_eq!(c.qos_rw_mbytes, Some(7));
    }

    #[test]
    fn every_bad_value_is_reported_at_once() {
        let problems = ClaimControls::parse(
            &m(&[
                ("storage.simplyblock.io/selected-storage-node", " "),
                ("simplyblock.io/lvol-id", "not-a-uuid"),
                ("simplyblock.io/pod-affinity", "maybe"),
                ("simplyblock.io/qos-rw-iops", "-3"),
                ("simplybk/qos-w-mbytes", "lots"),
            ]),
            &m(&[(CONSISTENCY_GROUP_LABEL, "")]),
        )
        .expect_err("refused");
        assert_eq!(problems.len(), 6, "{problems:#?}");
        for key in [
            "selected-storage-node",
            "lvol-id",
            "pod-affinity",
            "qos-rw-iops",
            "simplybk/qos-w-mbytes",
            "consistency-group",
        ] {
            assert!(
                problems.iter().any(|p| p.contains(key)),
                "{key} in {problems:#?}"
            );
        }
    }

    #[test]
    fn the_controls_shape_the_create_body() {
        let id = Uuid::from_u128(0x5b0c_3bd1_8f3e_4a63_9a52_0f8a_3c1d_2e4f);
        let c = ClaimControls::parse(
            &m(&[
                ("simplyblock.io/lvol-id", &id.to_string()),
                ("simplyblock.io/qos-rw-iops", "900"),
            ]),
            &m(&[(CONSISTENCY_GROUP_LABEL, "db")]),
        )
        .expect("valid");
        let mut body = VolumeCreate {
            max_rw_iops: 100,
            max_r_mbytes: 3,
            ..VolumeCreate::new("v", 1)
        };
        c.apply(&mut body, Some("beside-the-pod".into()));
        assert_eq!(body.lvol_id, Some(id));
        assert_eq!((body.max_rw_iops, body.max_r_mbytes), (900, 3));
        assert_eq!(body.consistency_group.as_deref(), Some("db"));
        assert_eq!(body.host_id.as_deref(), Some("beside-the-pod"));

        let opted_out =
            ClaimControls::parse(&m(&[(POD_AFFINITY_ANNOTATION, "false")]), &m(&[])).expect("ok");
        let mut body = VolumeCreate::new("v", 1);
        opted_out.apply(&mut body, Some("beside-the-pod".into()));
        assert_eq!(body.host_id, None);
    }
}

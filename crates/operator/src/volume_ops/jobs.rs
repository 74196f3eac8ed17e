//! The validation Job: on one consuming node, in the host's network, the operator's image
//! checks every target path of the migration answers a TCP connect. Nothing else: no
//! service-account token, no privileges, no writable root, a short deadline.

use k8s_openapi::api::batch::v1::Job;
use kube::{Resource, ResourceExt};
use serde_json::json;
use simplyblock_api::keys::{MANAGED_BY_LABEL, MANAGED_BY_PERSISTENT_VOLUME_OPS};
use simplyblock_api::names::derived_name;
use simplyblock_api::persistent_volume_ops::{MigrationConnection, PersistentVolumeOps};

/// A Job's name is a label value (`job-name`): 63 bytes.
const NAME_LIMIT: usize = 63;
/// How long one check may take before the Job fails.
const DEADLINE_SECONDS: i64 = 120;

/// The Job of operation `op` on `node`.
pub fn name(op: &str, node: &str) -> String {
    derived_name(&[op, "reach", node], NAME_LIMIT)
}

/// The `host:port` of each path, deduplicated.
pub fn addresses(paths: &[MigrationConnection]) -> Vec<String> {
    let mut out: Vec<String> = paths
        .iter()
        .filter_map(|c| match (&c.address, c.port) {
            (Some(a), Some(p)) if a.contains(':') => Some(format!("[{a}]:{p}")),
            (Some(a), Some(p)) => Some(format!("{a}:{p}")),
            _ => None,
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The Job checking `node` reaches `paths`, owned by the operation (its garbage collector
/// removes what the controller did not).
pub fn job(
    op: &PersistentVolumeOps,
    name: &str,
    node: &str,
    paths: &[MigrationConnection],
    image: &str,
) -> Result<Job, String> {
    let mut args = vec!["reach".to_owned()];
    for a in addresses(paths) {
        args.push("--address".into());
        args.push(a);
    }
    let owner = op.controller_owner_ref(&()).ok_or_else(|| {
        format!(
            "operation {} has no UID yet; its validation Job waits for it",
            op.name_any()
        )
    })?;
    let nonroot = json!({
        "runAsNonRoot": true, "runAsUser": 65534, "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY_PERSISTENT_VOLUME_OPS},
            "annotations": {"storage.simplyblock.io/persistentvolumeops": op.name_any()},
            "ownerReferences": [owner],
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            "template": {
                "metadata": {"labels": {MANAGED_BY_LABEL: MANAGED_BY_PERSISTENT_VOLUME_OPS}},
                "spec": {
                    "nodeName": node,
                    // The paths are connected from the host's network, so they are
                    // checked from there.
                    "hostNetwork": true,
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": false,
                    "enableServiceLinks": false,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{
                        "name": "reach",
                        "image": image,
                        "args": args,
                        "securityContext": nonroot,
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                      "limits": {"memory": "64Mi"}},
                    }],
                },
            },
        },
    }))
    .map_err(|e| format!("building validation Job {name} failed ({e}); this is a bug in the operator, please report it"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_name_fits_a_label_value_however_long_the_operation() {
        let long = "x".repeat(253);
        let n = name(&long, "worker-1");
        assert!(n.len() <= NAME_LIMIT, "{n}");
        assert_ne!(n, name(&long, "worker-2"), "one Job per node");
        assert_eq!(name("op", "w1"), "op-reach-w1");
    }

    #[test]
    fn each_path_is_checked_once() {
        let path = |a: &str, p| MigrationConnection {
            address: Some(a.into()),
            port: Some(p),
            ..Default::default()
        };
        assert_eq!(
            addresses(&[
                path("10.0.0.2", 4420),
                path("10.0.0.2", 4420),
                path("fd00::2", 4421)
            ]),
            ["10.0.0.2:4420", "[fd00::2]:4421"]
        );
    }
}

//! StorageBackupOps admission. On create: the backup exists and has a copy, the target
//! pool (when named) exists, the claim the restore creates does not, and the requester may
//! create claims in its namespace (a SubjectAccessReview, [`super::access`]): the operator
//! creates the claim, and must create only what its requester could. Every problem is said
//! at once. A record carried over from the Go operator is admitted as it is.
//!
//! On delete: an unfinished operation at Restoring, AwaitingVolume or Binding is kept. From
//! the restore call on, the operation is the only record of the volume the control plane
//! makes; Restoring can still be aborted (the volume is deleted), but not by deleting the
//! record, which would drop that account mid-way.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::core::admission::{AdmissionReview, Operation};
use simplyblock_api::StoragePool;
use simplyblock_api::common::OpsKind as _;
use simplyblock_api::storage_backup::{BackupPhase, StorageBackup};
use simplyblock_api::storage_backup_ops::{BackupOpsStep, StorageBackupOps, UNDELETABLE_STEPS};
use simplyblock_statemachine::State as _;

use super::access::Access;
use super::{WebhookContext, typed};

/// The path of the StorageBackupOps webhook.
pub const PATH: &str = "/validate-storage-simplyblock-io-v1alpha2-storagebackupops";
/// Its name in the webhook configuration.
pub const NAME: &str = "vstoragebackupops.simplyblock.io";

/// What the create check found in the world.
#[derive(Clone, Debug, Default)]
pub struct Found {
    /// The backup's phase, when it exists.
    pub backup: Option<BackupPhase>,
    /// Whether the target pool exists (true when none is named).
    pub pool: bool,
    /// Whether the claim to create exists already.
    pub claim: bool,
}

pub async fn review(
    State(ctx): State<Arc<WebhookContext>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    super::answer(review, |req| async move {
        match (&req.operation, req.object.as_ref(), req.old_object.as_ref()) {
            (Operation::Create, Some(new), _) => {
                let mut op = typed::<StorageBackupOps>(new)?;
                if op.metadata.namespace.is_none() {
                    op.metadata.namespace = req.namespace.clone();
                }
                if op.is_historical_record() {
                    return Ok(());
                }
                let namespace = op.namespace().unwrap_or_default();
                let unreadable = |what: String| {
                    move |e: kube::Error| format!("{what} could not be read ({e}); try again")
                };
                let backup = Api::<StorageBackup>::namespaced(ctx.client.clone(), &namespace)
                    .get_opt(&op.spec.backup_ref)
                    .await
                    .map_err(unreadable(format!("StorageBackup {}", op.spec.backup_ref)))?;
                let mut found = Found {
                    backup: backup.map(|b| b.phase()),
                    pool: true,
                    claim: false,
                };
                if let Some(pool) = op
                    .spec
                    .restore
                    .as_ref()
                    .and_then(|r| r.target_pool.as_ref())
                {
                    found.pool = Api::<StoragePool>::namespaced(ctx.client.clone(), &namespace)
                        .get_opt(pool)
                        .await
                        .map_err(unreadable(format!("StoragePool {pool}")))?
                        .is_some();
                }
                let mut needed = Vec::new();
                if let Some(restore) = &op.spec.restore {
                    let claim_ns = op.claim_namespace().unwrap_or_default();
                    found.claim =
                        Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &claim_ns)
                            .get_opt(&restore.claim_name)
                            .await
                            .map_err(unreadable(format!(
                                "claim {claim_ns}/{}",
                                restore.claim_name
                            )))?
                            .is_some();
                    needed.push(Access {
                        verb: "create",
                        namespace: Some(claim_ns),
                        name: None,
                        purpose: "the restore creates its claim there",
                    });
                }
                let user = req.user_info.username.clone().unwrap_or_default();
                let denied = super::access::denied(&ctx.client, &req.user_info, needed).await?;
                on_create(&op, &found, &user, &denied)
            }
            (Operation::Delete, _, Some(old)) => super::delete_verdict(old, on_delete),
            _ => Ok(()),
        }
    })
    .await
}

/// Whether `op` may be created, given what exists and the rights `denied` to `user`.
/// Every problem is said.
pub fn on_create(
    op: &StorageBackupOps,
    found: &Found,
    user: &str,
    denied: &[(Access, String)],
) -> Result<(), String> {
    let namespace = op.namespace().unwrap_or_default();
    let mut problems = Vec::new();
    match found.backup {
        None => problems.push(format!(
            "spec.backupRef {:?} does not name a StorageBackup in namespace {namespace}; name one of `kubectl get storagebackups -n {namespace}`",
            op.spec.backup_ref
        )),
        Some(BackupPhase::Failed) => problems.push(format!(
            "StorageBackup {:?} failed and has no copy to restore; pick another backup of the claim",
            op.spec.backup_ref
        )),
        Some(_) => {}
    }
    if let Some(restore) = &op.spec.restore {
        if !found.pool {
            problems.push(format!(
                "spec.restore.targetPool {:?} does not name a StoragePool in namespace {namespace}; name one of `kubectl get storagepools -n {namespace}`, or leave it out to restore into the backup's own pool",
                restore.target_pool.clone().unwrap_or_default()
            ));
        }
        if found.claim {
            problems.push(format!(
                "a PersistentVolumeClaim named {:?} already exists in namespace {}. A restore creates its claim and never adopts one, because adopting it would replace that workload's data with the backup's; name a claim that does not exist yet",
                restore.claim_name,
                op.claim_namespace().unwrap_or_default()
            ));
        }
    }
    for (access, reason) in denied {
        problems.push(access.refusal(user, reason, "a restore"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Whether `op` may be deleted now; the refusal names the step, why, and what to do.
pub fn on_delete(op: &StorageBackupOps) -> Result<(), String> {
    let status = op.status_core();
    if status.phase.is_terminal() {
        return Ok(());
    }
    let Some(step) = status
        .step
        .state
        .as_deref()
        .and_then(|s| UNDELETABLE_STEPS.into_iter().find(|u| u.name() == s))
    else {
        return Ok(());
    };
    let why = match step {
        BackupOpsStep::Restoring => {
            "the control plane may already have accepted the restore, and this object is the only record of the volume it produced"
        }
        BackupOpsStep::AwaitingVolume => "the control plane is still filling the restored volume",
        _ => "the restored volume is being bound to its claim",
    };
    let abort = if step == BackupOpsStep::Restoring {
        " Set spec.abort: true to stop it (the volume it created is deleted), and delete the record once it is terminal."
    } else {
        " Wait for it to end, then delete it."
    };
    Err(format!(
        "StorageBackupOps {}/{} is at step {}, where {why}. Deleting the record would not stop that work, it would remove the only account of it.{abort}",
        op.namespace().unwrap_or_default(),
        op.name_any(),
        step.name()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(status: serde_json::Value) -> StorageBackupOps {
        serde_json::from_value(json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "StorageBackupOps",
            "metadata": {"name": "restore-data", "namespace": "storage"},
            "spec": {"backupRef": "b1", "action": "Restore",
                     "restore": {"claimName": "data-restored", "claimNamespace": "apps", "targetPool": "fast"}},
            "status": status,
        }))
        .expect("op")
    }

    #[test]
    fn deletion_is_refused_from_the_restore_call_until_the_end() {
        for (step, kept) in [
            ("Validating", false),
            ("Restoring", true),
            ("AwaitingVolume", true),
            ("Binding", true),
        ] {
            let running = op(json!({"phase": "Running", "step": {"state": step}}));
            assert_eq!(on_delete(&running).is_err(), kept, "{step}");
            let ended = op(json!({"phase": "Failed", "step": {"state": step}}));
            assert!(on_delete(&ended).is_ok(), "a terminal one at {step} may go");
        }
        let refused = on_delete(&op(
            json!({"phase": "Running", "step": {"state": "Restoring"}}),
        ))
        .expect_err("kept");
        assert!(
            refused.contains("storage/restore-data is at step Restoring")
                && refused.contains("spec.abort"),
            "{refused}"
        );
        assert!(on_delete(&op(json!({}))).is_ok(), "a Pending one may go");
    }

    #[test]
    fn every_problem_of_a_create_is_said_at_once() {
        let found = Found {
            backup: Some(BackupPhase::Failed),
            pool: false,
            claim: true,
        };
        let denied = vec![(
            Access {
                verb: "create",
                namespace: Some("apps".into()),
                name: None,
                purpose: "the restore creates its claim there",
            },
            String::new(),
        )];
        let refused = on_create(&op(json!({})), &found, "bob", &denied).expect_err("refused");
        for part in [
            "StorageBackup \"b1\" failed",
            "spec.restore.targetPool \"fast\"",
            "\"data-restored\" already exists in namespace apps",
            "bob may not create persistentvolumeclaims in namespace apps",
        ] {
            assert!(refused.contains(part), "{part}: {refused}");
        }
        let fine = Found {
            backup: Some(BackupPhase::Available),
            pool: true,
            claim: false,
        };
        assert_eq!(on_create(&op(json!({})), &fine, "alice", &[]), Ok(()));
        let missing = Found {
            backup: None,
            ..fine
        };
        assert!(
            on_create(&op(json!({})), &missing, "alice", &[])
                .expect_err("refused")
                .contains("does not name a StorageBackup in namespace storage")
        );
    }
}

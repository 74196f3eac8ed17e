//! The StorageBackupOps controller on the shared [`crate::runtime::ops`] runtime: the lock
//! is `StorageBackup.status.activeOpsRef`; each step is a predicate over the world and at
//! most one call. Action Restore:
//!
//! | step | call, skipped when | done when |
//! |---|---|---|
//! | Validating | — (records the cluster, backup, pool and claim) | the backup is Available, the pool known, the claim free |
//! | Restoring | restore into `restore-<uid>`; a volume of that name exists | the volume exists (its id recorded) |
//! | AwaitingVolume | — | the volume is online (`restore_failed` fails) |
//! | Binding | create the PersistentVolume, then the claim; each exists | the claim is Bound |
//!
//! The volume's name is derived from the operation, so a restore whose answer was lost (a
//! crash after the call) is found by name and never asked twice. The claim is created new,
//! never adopted: one that exists without `storage.simplyblock.io/restored-by=<op>` fails
//! the operation. It has no owner and outlives the operation. An abort at Validating or
//! Restoring deletes a volume the restore created ([`Steps::unwind`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeSpec, VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use serde::Serialize;
use simplyblock_api::keys::{CSI_DRIVER_NAME, RESTORED_BY_LABEL};
use simplyblock_api::storage_backup::{BackupPhase, StorageBackup};
use simplyblock_api::storage_backup_ops::{BackupOpsStep, RestoreSpec, StorageBackupOps};
use simplyblock_api::volume_handle::{PoolRef, VolumeHandle};
use simplyblock_api::{StorageCluster, StoragePool};
use simplyblock_controlplane::types::BackupRestore;
use simplyblock_controlplane::{Uuid, Volume, VolumeStatus};
use simplyblock_statemachine::Machine;

use crate::runtime::context::Context;
use crate::runtime::ops::{self, Move, Note, Noted, OpsResource, Plan, Steps};

pub use simplyblock_api::storage_backup_ops::BACKUP_OPS_FINALIZER as FINALIZER;
const MANAGER: &str = "storagebackupops-controller";
/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "storagebackupops";
const METRIC_PREFIX: &str = "simplyblock_storagebackup_";
/// How often an awaited step looks again.
const AWAIT_POLL: Duration = Duration::from_secs(2);
/// The size of a restored claim whose backup does not say its size.
const UNKNOWN_SIZE: i64 = 1 << 30;
/// The annotation the external provisioner reads to delete a volume with its claim.
const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";

/// StorageBackupOps' own status fields, beside the common ones.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fields {
    #[serde(rename = "clusterID", skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    #[serde(rename = "backupID", skip_serializing_if = "Option::is_none")]
    pub backup_id: Option<String>,
    #[serde(rename = "poolUUID", skip_serializing_if = "Option::is_none")]
    pub pool_uuid: Option<String>,
    #[serde(rename = "restoredLvolID", skip_serializing_if = "Option::is_none")]
    pub restored_lvol_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistent_volume_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim_namespace: Option<String>,
}

impl OpsResource for StorageBackupOps {
    type Target = StorageBackup;
    const FINALIZER: &'static str = FINALIZER;
    const MANAGER: &'static str = MANAGER;
    const METRIC_PREFIX: &'static str = METRIC_PREFIX;
    const TARGET_LABEL: &'static str = "backup";

    fn target_name(&self) -> &str {
        &self.spec.backup_ref
    }
    type Fields = Fields;
    fn kind_status(&self) -> Fields {
        let Some(s) = self.status.as_ref() else {
            return Fields::default();
        };
        Fields {
            cluster_id: s.cluster_id.clone(),
            backup_id: s.backup_id.clone(),
            pool_uuid: s.pool_uuid.clone(),
            restored_lvol_id: s.restored_lvol_id.clone(),
            persistent_volume_name: s.persistent_volume_name.clone(),
            claim_name: s.claim_name.clone(),
            claim_namespace: s.claim_namespace.clone(),
        }
    }
    fn lock_holder(target: &StorageBackup) -> Option<&str> {
        target.status.as_ref()?.active_ops_ref.as_deref()
    }
}

/// The names a restore derives from its operation: the volume and its PersistentVolume.
pub fn restored_name(op: &StorageBackupOps) -> String {
    format!("restore-{}", op.uid().unwrap_or_default())
}

/// The pool a restore goes into: its UUID and the StoragePool's name.
#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    pub uuid: Uuid,
    pub name: String,
    /// The StorageClass assigned to the pool, if any (the default one first).
    pub class: Option<String>,
}

/// What the steps read.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The cluster the backup is in: its control-plane id.
    pub cluster: Option<Uuid>,
    /// The pool, when it resolves; else why not.
    pub pool: Option<Result<Pool, String>>,
    /// The claim to create, as it stands.
    pub claim: Option<PersistentVolumeClaim>,
    /// The restored volume, as the control plane reports it.
    pub volume: Option<Volume>,
    /// The PersistentVolume of the restored volume, as it stands.
    pub persistent_volume: Option<PersistentVolume>,
}

/// The one side effect a step may issue.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    Restore { cluster: Uuid, body: BackupRestore },
    CreateVolume(Box<PersistentVolume>),
    CreateClaim(Box<PersistentVolumeClaim>),
}

/// The steps of action Restore.
#[derive(Clone, Copy, Default)]
pub struct RestoreSteps;

fn uuid(s: Option<&String>) -> Option<Uuid> {
    s.and_then(|u| u.parse().ok())
}

impl Steps<StorageBackupOps> for RestoreSteps {
    type Obs = Observed;
    type Call = Call;

    async fn observe(
        &self,
        op: &StorageBackupOps,
        backup: &StorageBackup,
        machine: &Machine<'static, BackupOpsStep>,
        ctx: &Context,
    ) -> Result<Observed, ops::Error> {
        let fields = op.kind_status();
        let mut obs = Observed {
            cluster: uuid(fields.cluster_id.as_ref())
                .or_else(|| uuid(backup.status.as_ref().and_then(|s| s.cluster_id.as_ref()))),
            ..Observed::default()
        };
        let claim_ns = op.claim_namespace().unwrap_or_default();
        if let Some(restore) = &op.spec.restore {
            obs.claim = Api::<PersistentVolumeClaim>::namespaced(ctx.kube.clone(), &claim_ns)
                .get_opt(&restore.claim_name)
                .await?;
        }
        let Some(cluster) = obs.cluster else {
            return Ok(obs);
        };
        match machine.state() {
            BackupOpsStep::Validating => {
                obs.pool = Some(resolve_pool(op, backup, cluster, ctx).await?);
            }
            BackupOpsStep::Restoring | BackupOpsStep::AwaitingVolume => {
                if let Some(pool) = uuid(fields.pool_uuid.as_ref()) {
                    obs.volume = find_volume(op, cluster, pool, ctx).await?;
                }
            }
            BackupOpsStep::Binding => {
                if let Some(pool) = uuid(fields.pool_uuid.as_ref()) {
                    obs.volume = find_volume(op, cluster, pool, ctx).await?;
                    obs.pool = Some(pool_by_uuid(pool, ctx).await?);
                }
                obs.persistent_volume = Api::<PersistentVolume>::all(ctx.kube.clone())
                    .get_opt(&restored_name(op))
                    .await?;
            }
        }
        Ok(obs)
    }

    fn plan(
        &self,
        op: &StorageBackupOps,
        backup: &StorageBackup,
        machine: &Machine<'static, BackupOpsStep>,
        obs: &Observed,
        _now: Timestamp,
    ) -> Noted<BackupOpsStep, Call, Fields> {
        plan(op, backup, machine.state(), obs)
    }

    async fn execute(
        &self,
        _op: &StorageBackupOps,
        _backup: &StorageBackup,
        call: &Call,
        ctx: &Context,
    ) -> Result<(), String> {
        match call {
            Call::Restore { cluster, body } => {
                let cp = ctx.control_plane().map_err(|e| e.to_string())?;
                cp.restore_backup(*cluster, body)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
            Call::CreateVolume(pv) => Api::<PersistentVolume>::all(ctx.kube.clone())
                .create(&PostParams::default(), pv)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Call::CreateClaim(claim) => Api::<PersistentVolumeClaim>::namespaced(
                ctx.kube.clone(),
                &claim.namespace().unwrap_or_default(),
            )
            .create(&PostParams::default(), claim)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        }
    }

    async fn unwind(
        &self,
        op: &StorageBackupOps,
        _step: BackupOpsStep,
        ctx: &Context,
    ) -> Result<Option<String>, ops::Error> {
        let fields = op.kind_status();
        let (Some(cluster), Some(pool)) = (
            uuid(fields.cluster_id.as_ref()),
            uuid(fields.pool_uuid.as_ref()),
        ) else {
            // Validating records them before any call: nothing was asked.
            return Ok(None);
        };
        let Some(volume) = find_volume(op, cluster, pool, ctx).await? else {
            return Ok(None);
        };
        if volume.status == VolumeStatus::InDeletion {
            return Ok(Some(format!(
                "the control plane is deleting volume {}",
                volume.id
            )));
        }
        match ctx
            .control_plane()?
            .delete_volume(cluster, pool, volume.id)
            .await
        {
            Ok(()) => Ok(Some(format!(
                "volume {} the restore created is being deleted",
                volume.id
            ))),
            Err(e) if e.is_not_found() => Ok(None),
            // The control plane refuses while the restore fills it; the abort waits.
            Err(e) => Ok(Some(format!(
                "volume {} the restore created could not be deleted yet ({e})",
                volume.id
            ))),
        }
    }

    async fn dependents_gone(
        &self,
        op: &StorageBackupOps,
        ctx: &Context,
    ) -> Result<Option<String>, ops::Error> {
        // A restore aborted before it was bound leaves no volume behind; the unwind did it,
        // and a deleted unfinished operation is unwound here.
        if op.ops_status().phase == simplyblock_api::common::OpsPhase::Succeeded {
            return Ok(None);
        }
        let step = op.ops_status().step.state;
        match step.as_deref() {
            None | Some("Validating") => self.unwind(op, BackupOpsStep::Validating, ctx).await,
            Some("Restoring") => self.unwind(op, BackupOpsStep::Restoring, ctx).await,
            // Past Restoring the volume is filled or bound: the claim is the user's to keep.
            Some(_) => Ok(None),
        }
    }
}

/// The restored volume, by its recorded id or, before that is known, by its derived name.
async fn find_volume(
    op: &StorageBackupOps,
    cluster: Uuid,
    pool: Uuid,
    ctx: &Context,
) -> Result<Option<Volume>, ops::Error> {
    let cp = ctx.control_plane()?;
    if let Some(id) = uuid(op.kind_status().restored_lvol_id.as_ref()) {
        return match cp.get_volume(cluster, pool, id).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        };
    }
    let name = restored_name(op);
    Ok(cp
        .list_volumes(cluster, pool)
        .await?
        .into_iter()
        .find(|v| v.name == name))
}

/// The pool a restore goes into: `spec.restore.targetPool` of the backup's cluster, else
/// the pool the backup was taken from.
async fn resolve_pool(
    op: &StorageBackupOps,
    backup: &StorageBackup,
    cluster: Uuid,
    ctx: &Context,
) -> Result<Result<Pool, String>, ops::Error> {
    let clusters: Vec<StorageCluster> = ctx
        .scope
        .api::<StorageCluster>(&ctx.kube)
        .list(&ListParams::default())
        .await?
        .items;
    let Some(owner) = clusters.into_iter().find(|c| {
        c.status.as_ref().and_then(|s| s.uuid.as_deref()) == Some(cluster.to_string().as_str())
    }) else {
        return Ok(Err(format!(
            "no StorageCluster reports cluster {cluster}, which the backup is in"
        )));
    };
    let namespace = owner.namespace().unwrap_or_default();
    let pools: Vec<StoragePool> = Api::<StoragePool>::namespaced(ctx.kube.clone(), &namespace)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| p.spec.cluster_ref == owner.name_any())
        .collect();
    let target = op.spec.restore.as_ref().and_then(|r| r.target_pool.clone());
    let source = backup.status.as_ref().and_then(|s| s.source.as_ref());
    let found = match &target {
        Some(name) => pools.iter().find(|p| &p.name_any() == name),
        None => pools.iter().find(|p| {
            let uuid = p.status.as_ref().and_then(|s| s.uuid.as_deref());
            uuid.is_some() && uuid == source.and_then(|s| s.pool_uuid.as_deref())
                || Some(p.name_any().as_str()) == source.and_then(|s| s.pool_name.as_deref())
        }),
    };
    let Some(pool) = found else {
        return Ok(Err(match target {
            Some(name) => format!(
                "spec.restore.targetPool {name} is not a StoragePool of cluster {} in namespace {namespace}",
                owner.name_any()
            ),
            None => format!(
                "the pool backup {} was taken from is not a StoragePool of cluster {} any more; name one in spec.restore.targetPool",
                backup.name_any(),
                owner.name_any()
            ),
        }));
    };
    let Some(pool_uuid) = uuid(pool.status.as_ref().and_then(|s| s.uuid.as_ref())) else {
        return Ok(Err(format!(
            "StoragePool {} has no control-plane id yet",
            pool.name_any()
        )));
    };
    Ok(Ok(Pool {
        uuid: pool_uuid,
        name: pool.name_any(),
        class: pool_class(&namespace, &owner.name_any(), &pool.name_any(), ctx).await?,
    }))
}

/// The pool recorded at Validating, for Binding's StorageClass.
async fn pool_by_uuid(pool: Uuid, ctx: &Context) -> Result<Result<Pool, String>, ops::Error> {
    let pools: Vec<StoragePool> = ctx
        .scope
        .api::<StoragePool>(&ctx.kube)
        .list(&ListParams::default())
        .await?
        .items;
    let Some(found) = pools.into_iter().find(|p| {
        p.status.as_ref().and_then(|s| s.uuid.as_deref()) == Some(pool.to_string().as_str())
    }) else {
        return Ok(Ok(Pool {
            uuid: pool,
            name: String::new(),
            class: None,
        }));
    };
    let namespace = found.namespace().unwrap_or_default();
    Ok(Ok(Pool {
        uuid: pool,
        name: found.name_any(),
        class: pool_class(&namespace, &found.spec.cluster_ref, &found.name_any(), ctx).await?,
    }))
}

/// The StorageClass assigned to a pool: its default one, else the first by name.
async fn pool_class(
    namespace: &str,
    cluster: &str,
    pool: &str,
    ctx: &Context,
) -> Result<Option<String>, ops::Error> {
    let selector = crate::pool::class::assignment_selector(namespace, cluster, pool);
    let mut classes: Vec<StorageClass> = Api::<StorageClass>::all(ctx.kube.clone())
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    classes.sort_by_key(|c| {
        let default = c
            .annotations()
            .get(crate::pool::class::DEFAULT_CLASS_ANNOTATION)
            .is_some_and(|v| v == "true");
        (!default, c.name_any())
    });
    Ok(classes.first().map(|c| c.name_any()))
}

/// Runs the controller until the operator stops: a change of a claim a restore creates
/// wakes it (Binding waits on the claim being bound).
pub async fn run(ctx: Arc<Context>) {
    let controller = ops::controller::<StorageBackupOps>(&ctx);
    let store = controller.store();
    let controller = controller.watches(
        Api::<PersistentVolumeClaim>::all(ctx.kube.clone()),
        kube::runtime::watcher::Config::default().labels(RESTORED_BY_LABEL),
        move |claim| {
            let by = claim.labels().get(RESTORED_BY_LABEL).cloned();
            store
                .state()
                .into_iter()
                .filter(|op| Some(op.name_any()) == by)
                .map(|op| kube::runtime::reflector::ObjectRef::from_obj(&*op))
                .collect::<Vec<_>>()
        },
    );
    ops::run(CONTROLLER, controller, RestoreSteps, ctx).await
}

fn wait(message: String) -> Plan<BackupOpsStep, Call, Fields> {
    Plan::Wait {
        message,
        after: AWAIT_POLL,
        event: None,
    }
}

fn restored_by_me(op: &StorageBackupOps, claim: &PersistentVolumeClaim) -> bool {
    claim.labels().get(RESTORED_BY_LABEL) == Some(&op.name_any())
}

/// The next thing a step does, from one observation. Pure.
pub fn plan(
    op: &StorageBackupOps,
    backup: &StorageBackup,
    step: BackupOpsStep,
    obs: &Observed,
) -> Noted<BackupOpsStep, Call, Fields> {
    use BackupOpsStep::*;
    let Some(restore) = &op.spec.restore else {
        return Plan::Fail(format!(
            "action {} needs spec.restore and has none",
            op.action_name()
        ))
        .into();
    };
    let claim_ns = op.claim_namespace().unwrap_or_default();
    let claim_ref = format!("{claim_ns}/{}", restore.claim_name);
    let fields = op.kind_status();
    let foreign_claim = obs.claim.as_ref().is_some_and(|c| !restored_by_me(op, c));
    if foreign_claim && step != Binding {
        return Noted {
            plan: Plan::Fail(format!(
                "claim {claim_ref} already exists; a restore never adopts a claim, because doing so would replace a running workload's data with the backup's — name a claim that does not exist"
            )),
            notes: vec![Note {
                warning: true,
                reason: "ClaimExists",
                message: format!(
                    "Claim {claim_ref} already exists and was not created by this operation, so the restore was refused"
                ),
            }],
        };
    }
    match step {
        Validating => {
            match backup.phase() {
                BackupPhase::Failed => {
                    return Plan::Fail(format!(
                        "StorageBackup {} failed and has no copy to restore",
                        backup.name_any()
                    ))
                    .into();
                }
                BackupPhase::Available => {}
                other => {
                    return wait(format!(
                        "StorageBackup {} is {other:?}; waiting for it to be Available",
                        backup.name_any()
                    ))
                    .into();
                }
            }
            let Some(backup_id) = backup.backup_id() else {
                return wait(format!(
                    "StorageBackup {} has no backup id yet",
                    backup.name_any()
                ))
                .into();
            };
            let Some(cluster) = obs.cluster else {
                return wait(format!(
                    "StorageBackup {} does not say its cluster yet",
                    backup.name_any()
                ))
                .into();
            };
            let pool = match &obs.pool {
                Some(Ok(pool)) => pool,
                Some(Err(why)) => {
                    return Noted {
                        plan: Plan::Fail(why.clone()),
                        notes: vec![Note {
                            warning: true,
                            reason: "PoolNotFound",
                            message: format!("The target pool could not be resolved: {why}"),
                        }],
                    };
                }
                None => return wait("resolving the pool to restore into".into()).into(),
            };
            Plan::Advance {
                to: Move::To(Restoring),
                message: format!(
                    "restoring backup {backup_id} into pool {} as claim {claim_ref}",
                    pool.name
                ),
                kind_status: Some(Fields {
                    cluster_id: Some(cluster.to_string()),
                    backup_id: Some(backup_id.to_owned()),
                    pool_uuid: Some(pool.uuid.to_string()),
                    claim_name: Some(restore.claim_name.clone()),
                    claim_namespace: Some(claim_ns.clone()),
                    ..Fields::default()
                }),
            }
            .into()
        }
        Restoring => {
            let (Some(cluster), Some(backup_id), Some(pool)) = (
                uuid(fields.cluster_id.as_ref()),
                fields.backup_id.clone(),
                fields.pool_uuid.clone(),
            ) else {
                return Plan::Fail(
                    "the operation lost what Validating recorded (cluster, backup, pool); create it again".into(),
                )
                .into();
            };
            if let Some(volume) = &obs.volume {
                return Plan::Advance {
                    to: Move::To(AwaitingVolume),
                    message: format!(
                        "the control plane accepted the restore and is filling volume {}",
                        volume.id
                    ),
                    kind_status: Some(Fields {
                        restored_lvol_id: Some(volume.id.to_string()),
                        ..fields
                    }),
                }
                .into();
            }
            Plan::Call {
                call: Call::Restore {
                    cluster,
                    body: BackupRestore {
                        backup_id,
                        lvol_name: restored_name(op),
                        pool,
                        target_node_id: None,
                    },
                },
                message: format!("asking the control plane to restore into {}", restored_name(op)),
            }
            .into()
        }
        AwaitingVolume => match &obs.volume {
            None => Plan::Fail(format!(
                "the restored volume {} is gone from the control plane; nothing was bound",
                fields.restored_lvol_id.unwrap_or_default()
            ))
            .into(),
            Some(v) if v.status == VolumeStatus::Online => Plan::Advance {
                to: Move::To(Binding),
                message: format!("volume {} is filled; binding it to claim {claim_ref}", v.id),
                kind_status: Some(Fields {
                    persistent_volume_name: Some(restored_name(op)),
                    ..fields
                }),
            }
            .into(),
            Some(v) if v.status == VolumeStatus::RestoreFailed => Plan::Fail(format!(
                "the control plane gave up transferring backup {} into volume {}; look at its tasks (s3_backup_restore) for the store's error",
                fields.backup_id.unwrap_or_default(),
                v.id
            ))
            .into(),
            Some(v) => wait(format!(
                "the control plane is filling volume {} ({})",
                v.id,
                v.status.as_str()
            ))
            .into(),
        },
        Binding => {
            let Some(volume) = &obs.volume else {
                return Plan::Fail(format!(
                    "the restored volume {} is gone from the control plane; nothing was bound",
                    fields.restored_lvol_id.unwrap_or_default()
                ))
                .into();
            };
            let size = backup
                .status
                .as_ref()
                .and_then(|s| s.backup.as_ref())
                .and_then(|b| b.size)
                .filter(|s| *s > 0)
                .unwrap_or(UNKNOWN_SIZE);
            let class = obs
                .pool
                .as_ref()
                .and_then(|p| p.as_ref().ok())
                .and_then(|p| p.class.clone())
                .unwrap_or_default();
            let (Some(cluster), Some(pool)) = (
                uuid(fields.cluster_id.as_ref()),
                uuid(fields.pool_uuid.as_ref()),
            ) else {
                return Plan::Fail(
                    "the operation lost what Validating recorded (cluster, pool); create it again".into(),
                )
                .into();
            };
            let handle = VolumeHandle {
                cluster,
                pool: PoolRef::Id(pool),
                volume: volume.id,
            };
            match &obs.persistent_volume {
                None => {
                    let fs_type = backup
                        .status
                        .as_ref()
                        .and_then(|s| s.source.as_ref())
                        .and_then(|s| s.fs_type.clone());
                    let pv = persistent_volume(op, &handle, volume, size, &class, fs_type, &claim_ns);
                    return Plan::Call {
                        call: Call::CreateVolume(Box::new(pv)),
                        message: format!("creating PersistentVolume {}", restored_name(op)),
                    }
                    .into();
                }
                Some(pv) => {
                    let theirs = pv
                        .spec
                        .as_ref()
                        .and_then(|s| s.csi.as_ref())
                        .map(|c| c.volume_handle.as_str());
                    if theirs != Some(handle.to_string().as_str()) {
                        return Plan::Fail(format!(
                            "PersistentVolume {} already exists and names another volume ({}); nothing was bound",
                            pv.name_any(),
                            theirs.unwrap_or("none")
                        ))
                        .into();
                    }
                }
            }
            let Some(claim) = &obs.claim else {
                let claim = claim(op, restore, size, &class, &claim_ns);
                return Plan::Call {
                    call: Call::CreateClaim(Box::new(claim)),
                    message: format!("creating claim {claim_ref}"),
                }
                .into();
            };
            if !restored_by_me(op, claim) {
                return Plan::Fail(format!(
                    "claim {claim_ref} exists and was not created by this operation; the restored volume {} is left unbound",
                    volume.id
                ))
                .into();
            }
            let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
            if phase == Some("Bound") {
                return Plan::Succeed {
                    message: format!(
                        "The backup {} was restored into claim {claim_ref}",
                        fields.backup_id.unwrap_or_default()
                    ),
                    kind_status: None,
                }
                .into();
            }
            wait(format!(
                "waiting for claim {claim_ref} to bind to PersistentVolume {} (it is {})",
                restored_name(op),
                phase.unwrap_or("new")
            ))
            .into()
        }
    }
}

fn labels(op: &StorageBackupOps) -> BTreeMap<String, String> {
    BTreeMap::from([(RESTORED_BY_LABEL.to_owned(), op.name_any())])
}

fn storage(size: i64) -> BTreeMap<String, Quantity> {
    BTreeMap::from([("storage".to_owned(), Quantity(size.to_string()))])
}

/// The PersistentVolume of the restored volume: pre-bound to the claim, in the pool's
/// StorageClass, deleted with its claim as a provisioned one is.
fn persistent_volume(
    op: &StorageBackupOps,
    handle: &VolumeHandle,
    volume: &Volume,
    size: i64,
    class: &str,
    fs_type: Option<String>,
    claim_ns: &str,
) -> PersistentVolume {
    let restore = op.spec.restore.as_ref();
    let attributes = BTreeMap::from([
        ("cluster_id".to_owned(), handle.cluster.to_string()),
        ("name".to_owned(), volume.id.to_string()),
        ("uuid".to_owned(), volume.id.to_string()),
        ("model".to_owned(), volume.id.to_string()),
        ("nqn".to_owned(), volume.nqn.clone()),
        ("nsId".to_owned(), volume.ns_id.to_string()),
        ("poolID".to_owned(), handle.pool.to_string()),
        ("targetType".to_owned(), volume.fabric.to_ascii_lowercase()),
    ]);
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(restored_name(op)),
            labels: Some(labels(op)),
            annotations: Some(BTreeMap::from([(
                PROVISIONED_BY.to_owned(),
                CSI_DRIVER_NAME.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            capacity: Some(storage(size)),
            claim_ref: Some(ObjectReference {
                namespace: Some(claim_ns.to_owned()),
                name: restore.map(|r| r.claim_name.clone()),
                ..ObjectReference::default()
            }),
            csi: Some(CSIPersistentVolumeSource {
                driver: CSI_DRIVER_NAME.to_owned(),
                volume_handle: handle.to_string(),
                fs_type,
                volume_attributes: Some(attributes),
                ..CSIPersistentVolumeSource::default()
            }),
            persistent_volume_reclaim_policy: Some("Delete".to_owned()),
            storage_class_name: Some(class.to_owned()),
            ..PersistentVolumeSpec::default()
        }),
        ..PersistentVolume::default()
    }
}

/// The claim a restore creates, bound to its PersistentVolume by name.
fn claim(
    op: &StorageBackupOps,
    restore: &RestoreSpec,
    size: i64,
    class: &str,
    claim_ns: &str,
) -> PersistentVolumeClaim {
    let mut all_labels = restore.claim_labels.clone();
    all_labels.extend(labels(op));
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(restore.claim_name.clone()),
            namespace: Some(claim_ns.to_owned()),
            labels: Some(all_labels),
            annotations: (!restore.claim_annotations.is_empty())
                .then(|| restore.claim_annotations.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(storage(size)),
                ..VolumeResourceRequirements::default()
            }),
            storage_class_name: Some(class.to_owned()),
            volume_name: Some(restored_name(op)),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BackupOpsStep::*;
    use serde_json::json;

    const CLUSTER: &str = "00000000-0000-0000-0000-00000000000c";
    const POOL: &str = "00000000-0000-0000-0000-00000000000f";
    const LVOL: &str = "00000000-0000-0000-0000-0000000000aa";

    fn op(status: serde_json::Value) -> StorageBackupOps {
        serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageBackupOps",
            "metadata": {"name": "r", "namespace": "storage", "uid": "u1"},
            "spec": {"backupRef": "b1", "action": "Restore",
                     "restore": {"claimName": "orders", "claimNamespace": "apps"}},
            "status": status,
        }))
        .expect("op")
    }

    fn recorded() -> StorageBackupOps {
        op(
            json!({"clusterID": CLUSTER, "backupID": "b1", "poolUUID": POOL,
                  "claimName": "orders", "claimNamespace": "apps"}),
        )
    }

    fn backup(phase: &str) -> StorageBackup {
        serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageBackup",
            "metadata": {"name": "b1", "namespace": "storage"},
            "spec": {"clusterRef": {"name": "sb"}},
            "status": {"phase": phase, "clusterID": CLUSTER,
                       "backup": {"backupID": "b1", "size": 4096},
                       "source": {"fsType": "xfs"}},
        }))
        .expect("backup")
    }

    fn volume(status: VolumeStatus) -> Volume {
        Volume {
            id: LVOL.parse().expect("uuid"),
            name: "restore-u1".into(),
            status,
            ..Volume::default()
        }
    }

    fn claim(labelled: bool, phase: &str) -> PersistentVolumeClaim {
        let labels = if labelled {
            json!({RESTORED_BY_LABEL: "r"})
        } else {
            json!({})
        };
        serde_json::from_value(json!({
            "metadata": {"name": "orders", "namespace": "apps", "labels": labels},
            "status": {"phase": phase},
        }))
        .expect("claim")
    }

    fn seen() -> Observed {
        Observed {
            cluster: Some(CLUSTER.parse().expect("uuid")),
            pool: Some(Ok(Pool {
                uuid: POOL.parse().expect("uuid"),
                name: "data".into(),
                class: Some("simplyblock-sb".into()),
            })),
            ..Observed::default()
        }
    }

    fn kind(plan: &Plan<BackupOpsStep, Call, Fields>) -> &'static str {
        match plan {
            Plan::Advance { .. } => "advance",
            Plan::Succeed { .. } => "succeed",
            Plan::Fail(_) => "fail",
            Plan::Wait { .. } => "wait",
            Plan::Call {
                call: Call::Restore { .. },
                ..
            } => "restore",
            Plan::Call {
                call: Call::CreateVolume(_),
                ..
            } => "create volume",
            Plan::Call {
                call: Call::CreateClaim(_),
                ..
            } => "create claim",
            _ => "other",
        }
    }

    #[test]
    fn validating_waits_for_a_copy_and_refuses_what_it_cannot_restore() {
        let fresh = op(json!({}));
        assert_eq!(
            kind(&plan(&fresh, &backup("Creating"), Validating, &seen()).plan),
            "wait"
        );
        assert_eq!(
            kind(&plan(&fresh, &backup("Failed"), Validating, &seen()).plan),
            "fail"
        );
        let no_pool = Observed {
            pool: Some(Err("no such pool".into())),
            ..seen()
        };
        let refused = plan(&fresh, &backup("Available"), Validating, &no_pool);
        assert_eq!(kind(&refused.plan), "fail");
        assert_eq!(refused.notes[0].reason, "PoolNotFound");
        let taken = Observed {
            claim: Some(claim(false, "Bound")),
            ..seen()
        };
        let refused = plan(&fresh, &backup("Available"), Validating, &taken);
        assert_eq!(kind(&refused.plan), "fail");
        assert_eq!(refused.notes[0].reason, "ClaimExists");
        let Plan::Advance {
            kind_status: Some(fields),
            ..
        } = plan(&fresh, &backup("Available"), Validating, &seen()).plan
        else {
            panic!("advances")
        };
        assert_eq!(fields.pool_uuid.as_deref(), Some(POOL));
        assert_eq!(fields.backup_id.as_deref(), Some("b1"));
        assert_eq!(fields.claim_namespace.as_deref(), Some("apps"));
    }

    #[test]
    fn a_restore_is_asked_once_and_found_by_its_name_after() {
        let Plan::Call {
            call: Call::Restore { body, .. },
            ..
        } = plan(&recorded(), &backup("Available"), Restoring, &seen()).plan
        else {
            panic!("calls")
        };
        assert_eq!(body.lvol_name, "restore-u1");
        assert_eq!(body.pool, POOL);
        let there = Observed {
            volume: Some(volume(VolumeStatus::Restoring)),
            ..seen()
        };
        let Plan::Advance {
            kind_status: Some(fields),
            ..
        } = plan(&recorded(), &backup("Available"), Restoring, &there).plan
        else {
            panic!("advances without a second call")
        };
        assert_eq!(fields.restored_lvol_id.as_deref(), Some(LVOL));
    }

    #[test]
    fn the_volume_is_awaited_then_bound_to_a_new_claim() {
        let b = backup("Available");
        let with = |status| Observed {
            volume: Some(volume(status)),
            ..seen()
        };
        for (status, want) in [
            (VolumeStatus::Restoring, "wait"),
            (VolumeStatus::Online, "advance"),
            (VolumeStatus::RestoreFailed, "fail"),
        ] {
            assert_eq!(
                kind(&plan(&recorded(), &b, AwaitingVolume, &with(status)).plan),
                want,
                "{status:?}"
            );
        }
        assert_eq!(
            kind(&plan(&recorded(), &b, AwaitingVolume, &seen()).plan),
            "fail"
        );

        let online = with(VolumeStatus::Online);
        let Plan::Call {
            call: Call::CreateVolume(pv),
            ..
        } = plan(&recorded(), &b, Binding, &online).plan
        else {
            panic!("creates the volume first")
        };
        let spec = pv.spec.clone().expect("spec");
        assert_eq!(
            spec.csi.as_ref().map(|c| c.volume_handle.clone()),
            Some(format!("{CLUSTER}:{POOL}:{LVOL}"))
        );
        assert_eq!(spec.storage_class_name.as_deref(), Some("simplyblock-sb"));
        let with_pv = Observed {
            persistent_volume: Some(*pv.clone()),
            ..online.clone()
        };
        assert_eq!(
            kind(&plan(&recorded(), &b, Binding, &with_pv).plan),
            "create claim"
        );
        let pending = Observed {
            claim: Some(claim(true, "Pending")),
            ..with_pv.clone()
        };
        assert_eq!(kind(&plan(&recorded(), &b, Binding, &pending).plan), "wait");
        let bound = Observed {
            claim: Some(claim(true, "Bound")),
            ..with_pv.clone()
        };
        assert_eq!(
            kind(&plan(&recorded(), &b, Binding, &bound).plan),
            "succeed"
        );
        let foreign = Observed {
            claim: Some(claim(false, "Bound")),
            ..with_pv
        };
        assert_eq!(kind(&plan(&recorded(), &b, Binding, &foreign).plan), "fail");
        let mut other = *pv;
        if let Some(csi) = other.spec.as_mut().and_then(|s| s.csi.as_mut()) {
            csi.volume_handle = "c:p:elsewhere".into();
        }
        let elsewhere = Observed {
            persistent_volume: Some(other),
            ..online
        };
        assert_eq!(
            kind(&plan(&recorded(), &b, Binding, &elsewhere).plan),
            "fail"
        );
    }
}

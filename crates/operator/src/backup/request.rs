//! StorageBackup requests (`spec.source`): one backup of a claim, taken now.
//!
//! The claim leads to its bound PersistentVolume, its handle to the control-plane volume
//! and to the StorageCluster that reports that cluster; that cluster must have a backup
//! store. The request takes a snapshot named `sbk-<uid>` of the volume, then a backup of
//! that snapshot, each only after a listing finds none, so a pass cut short anywhere takes
//! neither twice; the backup's id is written down as soon as it is known. The request
//! then reports the backup until it is complete or failed.
//!
//! With `deletionPolicy: Delete`, deleting the request deletes the volume's backups (the
//! control plane deletes a volume's chain as one) unless a StorageBackupPolicy still
//! covers the claim: those backups are the policy's chain, and expire by it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, ListParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use simplyblock_api::StorageCluster;
use simplyblock_api::storage_backup::{
    BACKUP_FINALIZER, BackupCopy, BackupDeletionPolicy, BackupPhase, BackupSource, StorageBackup,
    StorageBackupStatus, message_of, phase_of,
};
use simplyblock_api::storage_backup_policy::StorageBackupPolicy;
use simplyblock_controlplane::{Backup, Uuid};

use super::claims::{ClaimVolume, claim_key, volume_of_pv};
use crate::runtime::context::{Context, requeue};
use crate::runtime::kit::{self, Error, Guard};

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "storagebackup-request";
const MANAGER: &str = "storagebackup-request";
/// How soon a backup under way is looked at again.
pub const PROGRESS: Duration = Duration::from_secs(3);

/// The name of the snapshot a request takes: one per request, found again by name.
pub fn snapshot_name(request: &StorageBackup) -> String {
    format!("sbk-{}", request.uid().unwrap_or_default())
}

/// Runs the controller until the operator stops.
pub async fn run(ctx: Arc<Context>) {
    let controller = Controller::new(
        ctx.scope.api::<StorageBackup>(&ctx.kube),
        watcher::Config::default(),
    );
    kit::run(CONTROLLER, controller, reconcile, ctx).await
}

pub async fn reconcile(request: Arc<StorageBackup>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Records are the mirror's.
    if !request.is_request() {
        return Ok(Action::await_change());
    }
    let ctx = &*ctx;
    let deletes = request.spec.deletion_policy == Some(BackupDeletionPolicy::Delete);
    if !deletes && !request.finalizers().iter().any(|f| f == BACKUP_FINALIZER) {
        if request.meta().deletion_timestamp.is_some() {
            return Ok(Action::await_change());
        }
        return apply(&request, ctx).await;
    }
    kit::finalized(
        &ctx.kube,
        BACKUP_FINALIZER,
        request,
        |r| async move { apply(&r, ctx).await },
        |r| async move { cleanup(&r, ctx).await },
    )
    .await
}

/// What a request backs up.
struct Subject {
    claim_namespace: String,
    claim: String,
    volume: ClaimVolume,
    pool: Uuid,
    cluster: Uuid,
}

/// Why a request cannot go on: it waits for what is missing, or it cannot ever be done.
enum Stop {
    Blocked(String),
    Refused(String),
}

fn claim_of(request: &StorageBackup) -> (String, String) {
    let source = request
        .spec
        .source
        .clone()
        .unwrap_or_else(|| unreachable!("a request"));
    let ns = source
        .claim_namespace
        .unwrap_or_else(|| request.namespace().unwrap_or_default());
    (ns, source.claim_name)
}

async fn resolve(ctx: &Context, request: &StorageBackup) -> Result<Result<Subject, Stop>, Error> {
    let (ns, claim) = claim_of(request);
    let key = claim_key(&ns, &claim);
    let Some(pvc) = Api::<PersistentVolumeClaim>::namespaced(ctx.kube.clone(), &ns)
        .get_opt(&claim)
        .await?
    else {
        return Ok(Err(Stop::Blocked(format!(
            "claim {key} does not exist; create it or correct spec.source"
        ))));
    };
    let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    let Some(pv_name) = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .filter(|_| bound)
    else {
        return Ok(Err(Stop::Blocked(format!(
            "claim {key} is not bound to a volume yet; the backup is taken once it is"
        ))));
    };
    let Some(pv) = Api::<PersistentVolume>::all(ctx.kube.clone())
        .get_opt(&pv_name)
        .await?
    else {
        return Ok(Err(Stop::Blocked(format!(
            "volume {pv_name} of claim {key} does not exist"
        ))));
    };
    let volume = match volume_of_pv(&pv) {
        Ok(v) => v,
        Err(why) => {
            return Ok(Err(Stop::Refused(format!(
                "claim {key} is not backed by a simplyblock volume: {why}"
            ))));
        }
    };
    let Some(pool) = volume.pool_id() else {
        return Ok(Err(Stop::Refused(format!(
            "volume {pv_name} names its pool {:?}, not its identifier, so its backups cannot be addressed",
            volume.handle.pool.to_string()
        ))));
    };
    let cluster_id = volume.handle.cluster;
    let clusters = ctx
        .scope
        .api::<StorageCluster>(&ctx.kube)
        .list(&ListParams::default())
        .await?;
    let Some(cluster) = clusters.items.iter().find(|c| {
        c.status.as_ref().and_then(|s| s.uuid.as_deref()) == Some(cluster_id.to_string().as_str())
    }) else {
        return Ok(Err(Stop::Blocked(format!(
            "no StorageCluster reports cluster {cluster_id}, which holds the volume of claim {key}; the backup is taken once one does"
        ))));
    };
    if cluster.spec.backup.is_none() {
        return Ok(Err(Stop::Blocked(format!(
            "StorageCluster {} has no backup store; set its spec.backup (endpoint, bucket, credentials) to take backups of claim {key}",
            cluster.name_any()
        ))));
    }
    Ok(Ok(Subject {
        claim_namespace: ns,
        claim,
        volume,
        pool,
        cluster: cluster_id,
    }))
}

async fn write_status(
    ctx: &Context,
    request: &StorageBackup,
    mut next: StorageBackupStatus,
) -> Result<(), Error> {
    next.observed_generation = request.metadata.generation;
    next.conditions = crate::runtime::conditions::for_phase(
        request.status.as_ref().map(|s| &s.conditions[..]),
        next.phase,
        next.message.as_deref(),
        next.observed_generation,
    );
    if request.status.as_ref() == Some(&next) {
        return Ok(());
    }
    kit::apply_status(&ctx.kube, request, MANAGER, &next, Guard::None).await?;
    Ok(())
}

/// Records why the request stops, with one event when the reason is new.
async fn stop(ctx: &Context, request: &StorageBackup, why: Stop) -> Result<Action, Error> {
    let (phase, reason, message) = match why {
        Stop::Blocked(m) => (BackupPhase::Pending, "BackupRequestBlocked", m),
        Stop::Refused(m) => (BackupPhase::Failed, "BackupFailed", m),
    };
    let mut next = request.status.clone().unwrap_or_default();
    if next.message.as_deref() != Some(message.as_str()) {
        ctx.event(request, true, reason, message.clone()).await;
    }
    next.phase = phase;
    next.message = Some(message);
    write_status(ctx, request, next).await?;
    Ok(Action::requeue(requeue::RETRY))
}

fn source_of(
    subject: &Subject,
    snapshot: Uuid,
    snapshot_name: &str,
    backup: Option<&Backup>,
) -> BackupSource {
    let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    BackupSource {
        claim_name: Some(subject.claim.clone()),
        claim_namespace: Some(subject.claim_namespace.clone()),
        persistent_volume_name: Some(subject.volume.persistent_volume.clone()),
        pool_name: None,
        pool_uuid: Some(subject.pool.to_string()),
        lvol_id: Some(subject.volume.handle.volume.to_string()),
        lvol_name: backup.and_then(|b| some(&b.lvol_name)),
        fs_type: subject.volume.fs_type.clone(),
        snapshot_id: Some(snapshot.to_string()),
        snapshot_name: Some(snapshot_name.to_owned()),
        node_id: backup.and_then(|b| some(&b.node_id)),
        cluster_uuid: Some(subject.cluster.to_string()),
    }
}

async fn apply(request: &StorageBackup, ctx: &Context) -> Result<Action, Error> {
    let status = request.status.clone().unwrap_or_default();
    if matches!(status.phase, BackupPhase::Available | BackupPhase::Failed)
        && request.backup_id().is_some()
    {
        return Ok(Action::await_change());
    }
    let subject = match resolve(ctx, request).await? {
        Ok(s) => s,
        Err(why) => return stop(ctx, request, why).await,
    };
    let cp = ctx.control_plane()?;
    let (cluster, pool, volume) = (subject.cluster, subject.pool, subject.volume.handle.volume);
    let name = snapshot_name(request);
    let recorded_snapshot = status
        .source
        .as_ref()
        .and_then(|s| s.snapshot_id.as_deref())
        .and_then(|s| s.parse::<Uuid>().ok());
    let snapshot = match recorded_snapshot {
        Some(id) => id,
        None => {
            let taken = cp.list_volume_snapshots(cluster, pool, volume).await?;
            match taken.iter().find(|s| s.name == name) {
                Some(s) => s.id,
                None => {
                    let id = cp.create_snapshot(cluster, pool, volume, &name).await?;
                    crate::runtime::crash::point(crate::runtime::crash::BACKUP_SNAPSHOT);
                    id
                }
            }
        }
    };
    let recorded_backup = request.backup_id().and_then(|id| id.parse::<Uuid>().ok());
    let backup = match recorded_backup {
        Some(id) => match cp.get_backup(cluster, id).await {
            Ok(b) => Some(b),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e.into()),
        },
        None => {
            let listed = cp.list_backups(cluster).await?;
            let found = listed
                .into_iter()
                .find(|b| b.snapshot_id == snapshot.to_string());
            match found {
                Some(b) => Some(b),
                None => {
                    let id = cp.create_backup(cluster, snapshot).await?;
                    crate::runtime::crash::point(crate::runtime::crash::BACKUP_CREATE);
                    // Written down before anything else: the mirror leaves it to this
                    // request, and the next pass reads it by id.
                    let ahead = StorageBackupStatus {
                        phase: BackupPhase::Creating,
                        cluster_id: Some(cluster.to_string()),
                        backup: Some(BackupCopy {
                            backup_id: id.to_string(),
                            ..BackupCopy::default()
                        }),
                        source: Some(source_of(&subject, snapshot, &name, None)),
                        message: Some(message_of("in_progress")),
                        ..status.clone()
                    };
                    write_status(ctx, request, ahead).await?;
                    return Ok(Action::requeue(requeue::NEXT_STEP));
                }
            }
        }
    };
    let key = claim_key(&subject.claim_namespace, &subject.claim);
    let Some(backup) = backup else {
        let id = recorded_backup.map(|u| u.to_string()).unwrap_or_default();
        let message = format!("Backup {id} of claim {key} left the store");
        ctx.event(request, true, "BackupGone", message.clone())
            .await;
        let next = StorageBackupStatus {
            phase: BackupPhase::Failed,
            message: Some(message),
            ..status
        };
        write_status(ctx, request, next).await?;
        return Ok(Action::await_change());
    };
    let id = backup.id.to_string();
    let word = backup.status.as_str();
    let (phase, message) = match phase_of(word) {
        Some(p) => (p, message_of(word)),
        None => (
            BackupPhase::Failed,
            "The control plane merged this copy into the next of its chain; it left the store"
                .into(),
        ),
    };
    let epoch = |s: i64| {
        (s > 0)
            .then(|| jiff::Timestamp::from_second(s).ok())
            .flatten()
            .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time)
    };
    let next = StorageBackupStatus {
        phase,
        api_status: Some(word.to_owned()),
        cluster_id: Some(cluster.to_string()),
        backup: Some(BackupCopy {
            backup_id: id.clone(),
            s3_id: Some(backup.s3_id),
            size: i64::try_from(backup.size).ok().filter(|s| *s > 0),
            previous_backup_id: (!backup.prev_backup_id.is_empty())
                .then(|| backup.prev_backup_id.clone()),
            started_at: epoch(backup.created_at),
            completed_at: epoch(backup.completed_at),
        }),
        source: Some(source_of(&subject, snapshot, &name, Some(&backup))),
        message: Some(message),
        ..status.clone()
    };
    write_status(ctx, request, next).await?;
    if phase != status.phase {
        match phase {
            BackupPhase::Available => {
                ctx.event(
                    request,
                    false,
                    "BackupAvailable",
                    format!("Backup {id} of claim {key} is complete"),
                )
                .await
            }
            BackupPhase::Failed => {
                ctx.event(
                    request,
                    true,
                    "BackupFailed",
                    format!("Backup {id} of claim {key} failed"),
                )
                .await
            }
            _ => {}
        }
    }
    Ok(match phase {
        BackupPhase::Available | BackupPhase::Failed => Action::await_change(),
        _ => Action::requeue(PROGRESS),
    })
}

/// The StorageBackupPolicy (any the operator serves) that covers claim `namespace/name`.
async fn covering_policy(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<Option<String>, Error> {
    let policies = ctx
        .scope
        .api::<StorageBackupPolicy>(&ctx.kube)
        .list(&ListParams::default())
        .await?;
    Ok(policies
        .items
        .iter()
        .find(|p| {
            p.status.as_ref().is_some_and(|s| {
                s.attached_claims
                    .iter()
                    .any(|a| a.namespace == namespace && a.name == name)
            })
        })
        .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any())))
}

async fn cleanup(request: &StorageBackup, ctx: &Context) -> Result<Action, Error> {
    if request.spec.deletion_policy != Some(BackupDeletionPolicy::Delete) {
        return Ok(Action::await_change());
    }
    let Some(id) = request.backup_id().map(str::to_owned) else {
        return Ok(Action::await_change());
    };
    let source = request
        .status
        .as_ref()
        .and_then(|s| s.source.clone())
        .unwrap_or_default();
    let uuid = |s: &Option<String>| s.as_deref().and_then(|s| s.parse::<Uuid>().ok());
    let (Some(cluster), Some(pool), Some(volume)) = (
        uuid(&source.cluster_uuid),
        uuid(&source.pool_uuid),
        uuid(&source.lvol_id),
    ) else {
        return Ok(Action::await_change());
    };
    let (ns, claim) = claim_of(request);
    let key = claim_key(&ns, &claim);
    if let Some(policy) = covering_policy(ctx, &ns, &claim).await? {
        ctx.event(
            request,
            true,
            "BackupKept",
            format!(
                "Backup {id} of claim {key} was kept: StorageBackupPolicy {policy} covers the claim, and the volume's backups are one chain that the policy keeps and expires by its limits. To delete them, stop the policy covering the claim first"
            ),
        )
        .await;
        return Ok(Action::await_change());
    }
    match ctx
        .control_plane()?
        .delete_volume_backups(cluster, pool, volume)
        .await
    {
        Ok(()) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) if e.status() == Some(400) && e.message().contains("No backups found") => {}
        Err(e) => {
            return Err(Error::Held(format!(
                "the backups of claim {key} could not be deleted: {}",
                e.message()
            )));
        }
    }
    Ok(Action::await_change())
}

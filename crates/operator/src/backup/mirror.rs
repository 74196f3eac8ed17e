//! The StorageBackup mirror: one record per backup a cluster's control plane reports,
//! kept in step with its listing (`GET /clusters/{c}/backups/`, read every [`POLL`]; the
//! listing is the only input, so a stream of it can take the poll's place).
//!
//! | what the control plane says | what the mirror does |
//! |---|---|
//! | a backup with no record | creates the record `<backup id>` in the cluster's namespace, its `source` written once from the PersistentVolume whose handle names the volume; `BackupDiscovered` on the StorageCluster |
//! | a backup whose record differs | writes its status and labels; becoming Available raises `BackupAvailable`, Failed `BackupFailed`, on the record |
//! | a record whose backup is no longer listed, or `merged` | deletes it; `BackupGone` on the StorageCluster |
//! | a backup a request (`spec.source`) took | no record: the request reports it; a record made before the request recorded it is deleted quietly |
//!
//! The plan is [`plan`], pure; the rest reads and writes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use simplyblock_api::keys::{BACKUP_POLICY_LABEL, CLAIM_LABEL, CLUSTER_LABEL};
use simplyblock_api::names::label_value;
use simplyblock_api::storage_backup::{
    BackupClusterRef, BackupCopy, BackupPhase, BackupSource, StorageBackup, StorageBackupSpec,
    StorageBackupStatus, message_of, phase_of,
};
use simplyblock_api::volume_handle::PoolRef;
use simplyblock_api::{StorageCluster, StoragePool};
use simplyblock_controlplane::{Backup, BackupStatus, Uuid};

use super::claims::volume_of_pv;
use crate::runtime::context::Context;
use crate::runtime::kit::{self, Error, Guard};
use crate::runtime::machine::plan::Note;

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "storagebackup-mirror";
/// The field manager of the records.
pub const MANAGER: &str = "storagebackup-mirror";
/// How often a cluster's backups are listed again.
pub const POLL: Duration = Duration::from_secs(15);

const COMPLETIONS: &str = "simplyblock_storagebackup_completions_total";
const SIZE: &str = "simplyblock_storagebackup_size_bytes";
const DURATION: &str = "simplyblock_storagebackup_duration_seconds";
const AGE: &str = "simplyblock_storagebackup_age_seconds";
const AVAILABLE: &str = "simplyblock_storagebackup_available_count";

/// What the cluster knows of a volume: its PersistentVolume, claim and pool.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VolumeSource {
    pub persistent_volume: String,
    pub claim_name: Option<String>,
    pub claim_namespace: Option<String>,
    pub pool_uuid: Option<String>,
    pub pool_name: Option<String>,
    pub fs_type: Option<String>,
}

/// The volumes of cluster `cluster` by their id, from the simplyblock PersistentVolumes
/// among `pvs`; a pool named by id is named by its StoragePool too (`pools`: id → name).
pub fn volumes_by_id(
    cluster: Uuid,
    pvs: &[PersistentVolume],
    pools: &BTreeMap<String, String>,
) -> BTreeMap<String, VolumeSource> {
    let mut out = BTreeMap::new();
    for pv in pvs {
        let Ok(v) = volume_of_pv(pv) else { continue };
        if v.handle.cluster != cluster {
            continue;
        }
        let claim = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        let (pool_uuid, pool_name) = match &v.handle.pool {
            PoolRef::Id(id) => (Some(id.to_string()), pools.get(&id.to_string()).cloned()),
            PoolRef::Name(n) => (None, Some(n.clone())),
        };
        out.insert(
            v.handle.volume.to_string(),
            VolumeSource {
                persistent_volume: v.persistent_volume,
                claim_name: claim.and_then(|c| c.name.clone()),
                claim_namespace: claim.and_then(|c| c.namespace.clone()),
                pool_uuid,
                pool_name,
                fs_type: v.fs_type,
            },
        );
    }
    out
}

/// One change the mirror makes.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Create the record, then write its status; `discovered` on the cluster, `phase` (a
    /// backup found complete or failed) on the record.
    Create {
        name: String,
        labels: BTreeMap<String, String>,
        status: StorageBackupStatus,
        discovered: Note,
        phase: Option<Note>,
    },
    /// Write the record's labels and status; `phase` on the record.
    Update {
        name: String,
        labels: BTreeMap<String, String>,
        status: StorageBackupStatus,
        phase: Option<Note>,
    },
    /// Delete the record; `gone` on the cluster.
    Delete { name: String, gone: Option<Note> },
}

fn epoch(seconds: i64) -> Option<Time> {
    (seconds > 0)
        .then(|| Timestamp::from_second(seconds).ok().map(Time))
        .flatten()
}

fn some(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

/// What a backup's record says, `source` kept as first written.
pub fn status_of(
    cluster: Uuid,
    b: &Backup,
    source: Option<&BackupSource>,
    volumes: &BTreeMap<String, VolumeSource>,
) -> StorageBackupStatus {
    let word = b.status.as_str();
    let source = source.cloned().unwrap_or_else(|| {
        let v = volumes.get(&b.lvol_id).cloned().unwrap_or_default();
        BackupSource {
            claim_name: v.claim_name,
            claim_namespace: v.claim_namespace,
            persistent_volume_name: some(&v.persistent_volume),
            pool_name: v.pool_name,
            pool_uuid: v.pool_uuid,
            lvol_id: some(&b.lvol_id),
            lvol_name: some(&b.lvol_name),
            fs_type: v.fs_type,
            snapshot_id: some(&b.snapshot_id),
            snapshot_name: some(&b.snapshot_name),
            node_id: some(&b.node_id),
            cluster_uuid: some(&b.source_cluster_id).or_else(|| Some(cluster.to_string())),
        }
    });
    StorageBackupStatus {
        phase: phase_of(word).unwrap_or_default(),
        api_status: Some(word.to_owned()),
        cluster_id: Some(cluster.to_string()),
        backup: Some(BackupCopy {
            backup_id: b.id.to_string(),
            s3_id: Some(b.s3_id),
            size: i64::try_from(b.size).ok().filter(|s| *s > 0),
            previous_backup_id: some(&b.prev_backup_id),
            started_at: epoch(b.created_at),
            completed_at: epoch(b.completed_at),
        }),
        source: Some(source),
        message: Some(message_of(word)),
        ..StorageBackupStatus::default()
    }
}

/// The mirror's own fields of a record's status: everything but the restore's lock and
/// the generation, and the conditions, which follow from the rest when written.
fn mirrored(status: &StorageBackupStatus) -> StorageBackupStatus {
    StorageBackupStatus {
        active_ops_ref: None,
        observed_generation: None,
        conditions: Vec::new(),
        ..status.clone()
    }
}

/// The labels of a record of cluster `cluster`: the cluster's name, and the claim's
/// while its volume's PersistentVolume names one.
fn labels_of(
    cluster: &str,
    b: &Backup,
    volumes: &BTreeMap<String, VolumeSource>,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([(CLUSTER_LABEL.to_owned(), label_value(cluster))]);
    if let Some(claim) = volumes
        .get(&b.lvol_id)
        .and_then(|v| v.claim_name.as_deref())
    {
        labels.insert(CLAIM_LABEL.to_owned(), label_value(claim));
    }
    labels
}

fn phase_note(id: &str, before: Option<BackupPhase>, after: BackupPhase) -> Option<Note> {
    if before == Some(after) {
        return None;
    }
    match after {
        BackupPhase::Available => Some(Note {
            warning: false,
            reason: "BackupAvailable",
            message: format!("Backup {id} completed and is restorable"),
        }),
        BackupPhase::Failed => Some(Note {
            warning: true,
            reason: "BackupFailed",
            message: format!("Backup {id} failed in the control plane"),
        }),
        _ => None,
    }
}

/// The changes that bring `records` (the cluster's StorageBackup records) in step with
/// `backups`, the cluster's listing; `requested` holds the ids of the backups requests
/// took, `volumes` what [`volumes_by_id`] found. Pure.
pub fn plan(
    cluster_name: &str,
    cluster: Uuid,
    records: &[StorageBackup],
    backups: &[Backup],
    requested: &BTreeSet<String>,
    volumes: &BTreeMap<String, VolumeSource>,
) -> Vec<Change> {
    let mut changes = Vec::new();
    let by_name: BTreeMap<String, &StorageBackup> =
        records.iter().map(|r| (r.name_any(), r)).collect();
    let mut listed = BTreeSet::new();
    for b in backups {
        let id = b.id.to_string();
        if b.status == BackupStatus::Merged || requested.contains(&id) {
            continue;
        }
        listed.insert(id.clone());
        let labels = labels_of(cluster_name, b, volumes);
        match by_name.get(&id) {
            None => {
                let status = status_of(cluster, b, None, volumes);
                changes.push(Change::Create {
                    phase: phase_note(&id, None, status.phase),
                    discovered: Note {
                        warning: false,
                        reason: "BackupDiscovered",
                        message: format!(
                            "Backup {id} was found in the store and recorded as StorageBackup {id}"
                        ),
                    },
                    name: id,
                    labels,
                    status,
                });
            }
            Some(record) => {
                let current = record.status.as_ref();
                let status =
                    status_of(cluster, b, current.and_then(|s| s.source.as_ref()), volumes);
                let relabel = labels
                    .iter()
                    .any(|(k, v)| record.labels().get(k) != Some(v))
                    || (record.labels().contains_key(CLAIM_LABEL)
                        && !labels.contains_key(CLAIM_LABEL));
                if relabel || current.map(mirrored).as_ref() != Some(&status) {
                    changes.push(Change::Update {
                        phase: phase_note(&id, current.map(|s| s.phase), status.phase),
                        name: id,
                        labels,
                        status,
                    });
                }
            }
        }
    }
    for (name, record) in &by_name {
        if listed.contains(name) {
            continue;
        }
        let id = record.backup_id().unwrap_or(name).to_owned();
        changes.push(Change::Delete {
            name: name.clone(),
            gone: (!requested.contains(&id)).then(|| Note {
                warning: false,
                reason: "BackupGone",
                message: format!("Backup {id} left the store, so StorageBackup {name} was removed"),
            }),
        });
    }
    changes
}

/// Runs the mirror until the operator stops, listing every [`POLL`].
pub async fn run(ctx: Arc<Context>) {
    run_every(ctx, POLL).await
}

/// Runs the mirror, listing each cluster's backups every `every`.
pub async fn run_every(ctx: Arc<Context>, every: Duration) {
    let controller = Controller::new(
        ctx.scope.api::<StorageCluster>(&ctx.kube),
        watcher::Config::default(),
    );
    let store = controller.store();
    // A request that goes leaves its backup to be recorded.
    let of_request = move |b: StorageBackup| {
        if !b.is_request() {
            return Vec::new();
        }
        store
            .state()
            .iter()
            .map(|c| ObjectRef::from_obj(&**c))
            .collect::<Vec<_>>()
    };
    let controller = controller.watches(
        ctx.scope.api::<StorageBackup>(&ctx.kube),
        watcher::Config::default(),
        of_request,
    );
    kit::run(
        CONTROLLER,
        controller,
        move |cluster, ctx| reconcile(cluster, ctx, every),
        ctx,
    )
    .await
}

/// One pass over one StorageCluster's backups.
pub async fn reconcile(
    cluster: Arc<StorageCluster>,
    ctx: Arc<Context>,
    every: Duration,
) -> Result<Action, Error> {
    let uuid = cluster.status.as_ref().and_then(|s| s.uuid.as_deref());
    let Some(cluster_id) = crate::runtime::streams::status_uuid(uuid) else {
        return Ok(Action::await_change());
    };
    if cluster.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ctx = &*ctx;
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    // Nothing is deleted unless the listing answered.
    let backups = ctx.control_plane()?.list_backups(cluster_id).await?;
    let api: Api<StorageBackup> = Api::namespaced(ctx.kube.clone(), &ns);
    let mut records = Vec::new();
    let mut requested = BTreeSet::new();
    for b in ctx
        .scope
        .api::<StorageBackup>(&ctx.kube)
        .list(&ListParams::default())
        .await?
    {
        if b.is_request() {
            requested.extend(b.backup_id().map(str::to_owned));
        } else if b.namespace().as_deref() == Some(ns.as_str())
            && b.spec
                .cluster_ref
                .as_ref()
                .is_some_and(|r| r.name == name && r.namespace.as_deref().is_none_or(|n| n == ns))
        {
            records.push(b);
        }
    }
    let pvs = Api::<PersistentVolume>::all(ctx.kube.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let pools: BTreeMap<String, String> = Api::<StoragePool>::namespaced(ctx.kube.clone(), &ns)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|p| Some((p.status.as_ref()?.uuid.clone()?, p.name_any())))
        .collect();
    let volumes = volumes_by_id(cluster_id, &pvs, &pools);
    for change in plan(&name, cluster_id, &records, &backups, &requested, &volumes) {
        carry(ctx, &cluster, &api, &records, change).await?;
    }
    gauges(ctx, &name, &backups, &requested, &volumes);
    Ok(Action::requeue(every))
}

/// Creates or relabels a record (server-side apply of its metadata and spec).
async fn apply_object(
    api: &Api<StorageBackup>,
    cluster: &StorageCluster,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> Result<StorageBackup, Error> {
    let spec = StorageBackupSpec {
        cluster_ref: Some(BackupClusterRef {
            name: cluster.name_any(),
            namespace: None,
        }),
        source: None,
        deletion_policy: None,
    };
    let body = json!({
        "apiVersion": simplyblock_api::API_VERSION,
        "kind": "StorageBackup",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    });
    Ok(api
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(body),
        )
        .await?)
}

async fn write_status(
    ctx: &Context,
    record: &StorageBackup,
    mut status: StorageBackupStatus,
) -> Result<StorageBackup, Error> {
    status.observed_generation = record.metadata.generation;
    status.conditions = crate::runtime::conditions::for_phase(
        record.status.as_ref().map(|s| &s.conditions[..]),
        status.phase,
        status.message.as_deref(),
        status.observed_generation,
    );
    kit::apply_status(&ctx.kube, record, MANAGER, &status, Guard::None).await
}

async fn carry(
    ctx: &Context,
    cluster: &StorageCluster,
    api: &Api<StorageBackup>,
    records: &[StorageBackup],
    change: Change,
) -> Result<(), Error> {
    let cluster_name = cluster.name_any();
    match change {
        Change::Create {
            name,
            labels,
            status,
            discovered,
            phase,
        } => {
            let created = apply_object(api, cluster, &name, &labels).await?;
            let written = write_status(ctx, &created, status).await?;
            ctx.event(
                cluster,
                discovered.warning,
                discovered.reason,
                discovered.message,
            )
            .await;
            if let Some(note) = phase {
                completed(ctx, &cluster_name, &written);
                ctx.event(&written, note.warning, note.reason, note.message)
                    .await;
            }
        }
        Change::Update {
            name,
            labels,
            status,
            phase,
        } => {
            let Some(current) = records.iter().find(|r| r.name_any() == name) else {
                return Ok(());
            };
            let current = if labels
                .iter()
                .any(|(k, v)| current.labels().get(k) != Some(v))
                || current.labels().len() != labels.len()
            {
                apply_object(api, cluster, &name, &labels).await?
            } else {
                current.clone()
            };
            let written = write_status(ctx, &current, status).await?;
            if let Some(note) = phase {
                completed(ctx, &cluster_name, &written);
                ctx.event(&written, note.warning, note.reason, note.message)
                    .await;
            }
        }
        Change::Delete { name, gone } => {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                Err(e) => return Err(e.into()),
            }
            if let Some(note) = gone {
                ctx.event(cluster, note.warning, note.reason, note.message)
                    .await;
            }
        }
    }
    Ok(())
}

/// Counts a backup that reached its end (Available or Failed), with its size and how
/// long it took when it completed.
fn completed(ctx: &Context, cluster: &str, record: &StorageBackup) {
    let Some(status) = &record.status else { return };
    let policy = record
        .labels()
        .get(BACKUP_POLICY_LABEL)
        .cloned()
        .unwrap_or_default();
    let labels = vec![("cluster", cluster.to_owned()), ("policy", policy)];
    let result = match status.phase {
        BackupPhase::Available => "succeeded",
        BackupPhase::Failed => "failed",
        _ => return,
    };
    let mut counted = labels.clone();
    counted.push(("result", result.to_owned()));
    ctx.metrics.count(COMPLETIONS, counted);
    let Some(copy) = status.backup.as_ref().filter(|_| result == "succeeded") else {
        return;
    };
    if let Some(size) = copy.size {
        ctx.metrics.observe_bytes(SIZE, labels.clone(), size as f64);
    }
    if let (Some(start), Some(end)) = (&copy.started_at, &copy.completed_at) {
        let took = end.0.duration_since(start.0).as_secs_f64();
        ctx.metrics.observe(DURATION, labels, took);
    }
}

/// How many Available backups each claim of the cluster has, and how old the newest is.
fn gauges(
    ctx: &Context,
    cluster: &str,
    backups: &[Backup],
    requested: &BTreeSet<String>,
    volumes: &BTreeMap<String, VolumeSource>,
) {
    let _ = requested;
    let mut per_claim: BTreeMap<String, (usize, i64)> = BTreeMap::new();
    for b in backups {
        let Some(claim) = volumes.get(&b.lvol_id).and_then(|v| v.claim_name.clone()) else {
            continue;
        };
        let entry = per_claim.entry(claim).or_default();
        if b.status == BackupStatus::Completed {
            entry.0 += 1;
            entry.1 = entry.1.max(b.completed_at);
        }
    }
    let now = Timestamp::now().as_second();
    for (claim, (count, newest)) in per_claim {
        let labels = vec![("cluster", cluster.to_owned()), ("claim", claim)];
        ctx.metrics.set(AVAILABLE, labels.clone(), count as f64);
        if newest > 0 {
            ctx.metrics.set(AGE, labels, (now - newest).max(0) as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLUSTER: u128 = 1;

    fn backup(n: u128, status: BackupStatus) -> Backup {
        Backup {
            id: Uuid::from_u128(n),
            s3_id: n as i64,
            lvol_id: Uuid::from_u128(100).to_string(),
            lvol_name: "vol".into(),
            snapshot_id: Uuid::from_u128(200 + n).to_string(),
            snapshot_name: format!("snap-{n}"),
            status,
            size: 1 << 30,
            created_at: 1_700_000_000,
            completed_at: if status == BackupStatus::Completed {
                1_700_000_060
            } else {
                0
            },
            ..Backup::default()
        }
    }

    fn volumes() -> BTreeMap<String, VolumeSource> {
        BTreeMap::from([(
            Uuid::from_u128(100).to_string(),
            VolumeSource {
                persistent_volume: "pv-data".into(),
                claim_name: Some("data".into()),
                claim_namespace: Some("apps".into()),
                pool_uuid: Some(Uuid::from_u128(300).to_string()),
                pool_name: Some("pool".into()),
                fs_type: Some("ext4".into()),
            },
        )])
    }

    fn record_of(b: &Backup, vols: &BTreeMap<String, VolumeSource>) -> StorageBackup {
        let id = b.id.to_string();
        let mut r = StorageBackup::new(
            &id,
            StorageBackupSpec {
                cluster_ref: Some(BackupClusterRef {
                    name: "sb".into(),
                    namespace: None,
                }),
                source: None,
                deletion_policy: None,
            },
        );
        r.metadata.labels = Some(labels_of("sb", b, vols));
        r.status = Some(status_of(Uuid::from_u128(CLUSTER), b, None, vols));
        r
    }

    fn kinds(changes: &[Change]) -> Vec<(&str, Option<&'static str>)> {
        changes
            .iter()
            .map(|c| match c {
                Change::Create { phase, .. } => ("create", phase.as_ref().map(|n| n.reason)),
                Change::Update { phase, .. } => ("update", phase.as_ref().map(|n| n.reason)),
                Change::Delete { gone, .. } => ("delete", gone.as_ref().map(|n| n.reason)),
            })
            .collect()
    }

    fn plan_of(records: &[StorageBackup], backups: &[Backup], requested: &[u128]) -> Vec<Change> {
        let requested = requested
            .iter()
            .map(|n| Uuid::from_u128(*n).to_string())
            .collect();
        plan(
            "sb",
            Uuid::from_u128(CLUSTER),
            records,
            backups,
            &requested,
            &volumes(),
        )
    }

    #[test]
    fn a_new_backup_is_recorded_with_its_source_and_claim_label() {
        let changes = plan_of(&[], &[backup(1, BackupStatus::InProgress)], &[]);
        let [
            Change::Create {
                name,
                labels,
                status,
                discovered,
                phase,
            },
        ] = changes.as_slice()
        else {
            panic!("{changes:?}")
        };
        assert_eq!(name, &Uuid::from_u128(1).to_string());
        assert_eq!(discovered.reason, "BackupDiscovered");
        assert_eq!(*phase, None);
        assert_eq!(labels[CLAIM_LABEL], "data");
        assert_eq!(labels[CLUSTER_LABEL], "sb");
        assert_eq!(status.phase, BackupPhase::Creating);
        let source = status.source.as_ref().expect("source");
        assert_eq!(
            (
                source.claim_name.as_deref(),
                source.claim_namespace.as_deref(),
                source.persistent_volume_name.as_deref()
            ),
            (Some("data"), Some("apps"), Some("pv-data"))
        );
        assert_eq!(
            (source.pool_name.as_deref(), source.fs_type.as_deref()),
            (Some("pool"), Some("ext4"))
        );
        assert_eq!(
            source.cluster_uuid,
            Some(Uuid::from_u128(CLUSTER).to_string())
        );
        assert_eq!(
            status.backup.as_ref().and_then(|b| b.completed_at.clone()),
            None
        );
    }

    #[test]
    fn a_completed_backup_is_announced_once_and_its_source_is_never_rewritten() {
        let vols = volumes();
        let record = record_of(&backup(1, BackupStatus::InProgress), &vols);
        let done = backup(1, BackupStatus::Completed);
        let changes = plan_of(
            std::slice::from_ref(&record),
            std::slice::from_ref(&done),
            &[],
        );
        assert_eq!(kinds(&changes), [("update", Some("BackupAvailable"))]);
        // Unchanged: nothing to write, even after the claim's volume is gone.
        let settled = record_of(&done, &vols);
        assert_eq!(
            plan_of(
                std::slice::from_ref(&settled),
                std::slice::from_ref(&done),
                &[]
            ),
            []
        );
        let forgotten = plan(
            "sb",
            Uuid::from_u128(CLUSTER),
            &[settled],
            &[done],
            &BTreeSet::new(),
            &BTreeMap::new(),
        );
        let [
            Change::Update {
                labels,
                status,
                phase: None,
                ..
            },
        ] = forgotten.as_slice()
        else {
            panic!("{forgotten:?}")
        };
        assert!(
            !labels.contains_key(CLAIM_LABEL),
            "the claim label goes with the claim"
        );
        assert_eq!(
            status.source.as_ref().and_then(|s| s.claim_name.as_deref()),
            Some("data")
        );
        let failed = plan_of(&[record], &[backup(1, BackupStatus::Failed)], &[]);
        assert_eq!(kinds(&failed), [("update", Some("BackupFailed"))]);
    }

    #[test]
    fn a_backup_gone_or_merged_takes_its_record_and_a_requested_one_gets_none() {
        let vols = volumes();
        let records = [
            record_of(&backup(1, BackupStatus::Completed), &vols),
            record_of(&backup(2, BackupStatus::Completed), &vols),
            record_of(&backup(3, BackupStatus::Completed), &vols),
        ];
        let listing = [
            backup(2, BackupStatus::Merged),
            backup(3, BackupStatus::Completed),
            backup(4, BackupStatus::Completed),
        ];
        let changes = plan_of(&records, &listing, &[3, 4]);
        assert_eq!(
            kinds(&changes),
            [
                ("delete", Some("BackupGone")),
                ("delete", Some("BackupGone")),
                ("delete", None)
            ],
            "1 is gone, 2 merged, 3 is a request's (quietly), 4 is a request's and never recorded"
        );
    }
}

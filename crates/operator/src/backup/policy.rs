//! The StorageBackupPolicy controller: the policy in the control plane, and its
//! attachment to the volume of every claim its selectors pick.
//!
//! A policy is found by the id in its status, else by its name (which adopts the policy a
//! Go operator created under the same name), and only then created. The claims it covers
//! are the bound claims of the simplyblock CSI driver, in this cluster, that
//! `claimSelector` picks in the namespaces `namespaceSelector` picks; each is attached
//! by its volume, and one that stops matching is detached (its backups stay). Deleting
//! the policy detaches every claim, then deletes the control-plane policy. The membership
//! is decided by [`membership`] and [`diff`], pure.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use simplyblock_api::StorageCluster;
use simplyblock_api::storage_backup::{BackupPhase, StorageBackup};
use simplyblock_api::storage_backup_policy::{
    AttachedClaim, BACKUP_POLICY_FINALIZER, BackupPolicyPhase, StorageBackupPolicy,
    StorageBackupPolicyStatus,
};
use simplyblock_controlplane::{BackupPolicyCreate, BackupPolicyTarget, Uuid};

use super::claims::{claim_key, selects, volume_of_claim};
use crate::runtime::context::{Context, requeue};
use crate::runtime::kit::{self, Error, Guard};

/// The name of the controller in metrics and logs.
pub const CONTROLLER: &str = "storagebackuppolicy";
const MANAGER: &str = "storagebackuppolicy-controller";
/// The gauge of the claims each policy covers.
pub const ATTACHED: &str = "simplyblock_storagebackuppolicy_attached_claims_count";

/// Runs the controller until the operator stops.
pub async fn run(ctx: Arc<Context>) {
    let controller = Controller::new(
        ctx.scope.api::<StorageBackupPolicy>(&ctx.kube),
        watcher::Config::default(),
    );
    let store = controller.store();
    // A claim in any namespace may join or leave any policy (namespaceSelector).
    let every_policy = {
        let store = store.clone();
        move |_: PersistentVolumeClaim| {
            store
                .state()
                .iter()
                .map(|p| ObjectRef::from_obj(&**p))
                .collect::<Vec<_>>()
        }
    };
    // A backup completing moves the policy's lastBackupAt.
    let of_namespace = {
        let store = store.clone();
        move |b: StorageBackup| {
            store
                .state()
                .iter()
                .filter(|p| p.namespace() == b.namespace())
                .map(|p| ObjectRef::from_obj(&**p))
                .collect::<Vec<_>>()
        }
    };
    // A cluster getting its id moves its policies on.
    let of_cluster = move |c: StorageCluster| {
        store
            .state()
            .iter()
            .filter(|p| p.namespace() == c.namespace() && p.spec.cluster_ref == c.name_any())
            .map(|p| ObjectRef::from_obj(&**p))
            .collect::<Vec<_>>()
    };
    let controller = controller
        .watches(
            Api::<PersistentVolumeClaim>::all(ctx.kube.clone()),
            watcher::Config::default(),
            every_policy,
        )
        .watches(
            ctx.scope.api::<StorageBackup>(&ctx.kube),
            watcher::Config::default(),
            of_namespace,
        )
        .watches(
            ctx.scope.api::<StorageCluster>(&ctx.kube),
            watcher::Config::default(),
            of_cluster,
        );
    kit::run(CONTROLLER, controller, reconcile, ctx).await
}

pub async fn reconcile(
    policy: Arc<StorageBackupPolicy>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let ctx = &*ctx;
    kit::finalized(
        &ctx.kube,
        BACKUP_POLICY_FINALIZER,
        policy,
        |p| async move { apply(&p, ctx).await },
        |p| async move { cleanup(&p, ctx).await },
    )
    .await
}

/// What the policy should cover, and the claims its selectors pick that it cannot.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Membership {
    /// The claims to attach or keep attached (`attachedAt` unset).
    pub desired: Vec<AttachedClaim>,
    /// `namespace/claim` and why it cannot be covered.
    pub not_eligible: Vec<(String, String)>,
}

/// Whether the policy's `namespaceSelector` picks `namespace` (labelled `labels`): absent,
/// only the policy's own namespace.
fn picks_namespace(
    policy: &StorageBackupPolicy,
    namespace: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    match &policy.spec.namespace_selector {
        None => policy.namespace().as_deref() == Some(namespace),
        Some(selector) => labels.is_some_and(|l| selects(Some(selector), l)),
    }
}

/// The claims of `claims` the policy covers in control-plane cluster `cluster`: picked by
/// both selectors (`namespaces` holds the labels of the namespaces read), not being
/// deleted, and bound to a simplyblock volume of that cluster (PersistentVolumes by name
/// in `pvs`). Pure.
pub fn membership(
    policy: &StorageBackupPolicy,
    cluster: Uuid,
    claims: &[PersistentVolumeClaim],
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    pvs: &BTreeMap<String, PersistentVolume>,
) -> Membership {
    let mut out = Membership::default();
    for claim in claims {
        let ns = claim.namespace().unwrap_or_default();
        if claim.meta().deletion_timestamp.is_some()
            || !picks_namespace(policy, &ns, namespaces.get(&ns))
            || !selects(policy.spec.claim_selector.as_ref(), claim.labels())
        {
            continue;
        }
        let volume = volume_of_claim(claim, pvs).and_then(|v| {
            if v.handle.cluster == cluster {
                Ok(v)
            } else {
                Err(format!(
                    "the volume {} belongs to cluster {}",
                    v.persistent_volume, v.handle.cluster
                ))
            }
        });
        match volume {
            Ok(v) => out.desired.push(AttachedClaim {
                name: claim.name_any(),
                namespace: ns,
                persistent_volume_name: Some(v.persistent_volume),
                lvol_id: Some(v.handle.volume.to_string()),
                attached_at: None,
            }),
            Err(why) => out
                .not_eligible
                .push((claim_key(&ns, &claim.name_any()), why)),
        }
    }
    out.desired
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

/// How the attachments change from `attached` to `desired`: a claim is the same
/// attachment while its namespace, name and volume are.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Diff {
    /// Attached already and still desired (with their `attachedAt`).
    pub keep: Vec<AttachedClaim>,
    pub attach: Vec<AttachedClaim>,
    pub detach: Vec<AttachedClaim>,
}

fn same(a: &AttachedClaim, b: &AttachedClaim) -> bool {
    a.namespace == b.namespace && a.name == b.name && a.lvol_id == b.lvol_id
}

/// Pure.
pub fn diff(attached: &[AttachedClaim], desired: &[AttachedClaim]) -> Diff {
    let mut out = Diff::default();
    for d in desired {
        match attached.iter().find(|a| same(a, d)) {
            Some(a) => out.keep.push(a.clone()),
            None => out.attach.push(d.clone()),
        }
    }
    out.detach = attached
        .iter()
        .filter(|a| !desired.iter().any(|d| same(a, d)))
        .cloned()
        .collect();
    out
}

fn target(lvol: &str) -> BackupPolicyTarget {
    BackupPolicyTarget {
        target_type: "lvol".into(),
        target_id: lvol.to_owned(),
    }
}

/// Whether a detach failed only because the policy was not attached.
fn not_attached(e: &simplyblock_controlplane::Error) -> bool {
    e.is_not_found()
        || (e.status() == Some(400) && e.message().to_lowercase().contains("attachment not found"))
}

/// Whether the control plane answered a create with a refusal rather than not at all.
fn refused(e: &simplyblock_controlplane::Error) -> bool {
    matches!(e.status(), Some(400..=499))
        || matches!(
            e,
            simplyblock_controlplane::Error::Refused { opaque: false, .. }
        )
}

async fn write_status(
    ctx: &Context,
    policy: &StorageBackupPolicy,
    mut next: StorageBackupPolicyStatus,
) -> Result<(), Error> {
    next.observed_generation = policy.metadata.generation;
    next.attached_claim_count = next.attached_claims.len() as i32;
    next.conditions = crate::runtime::conditions::for_phase(
        policy.status.as_ref().map(|s| &s.conditions[..]),
        next.phase,
        next.message.as_deref(),
        next.observed_generation,
    );
    if policy.status.as_ref() == Some(&next) {
        return Ok(());
    }
    kit::apply_status(&ctx.kube, policy, MANAGER, &next, Guard::None).await?;
    Ok(())
}

/// Records that the policy waits or was refused, with `message`.
async fn hold(
    ctx: &Context,
    policy: &StorageBackupPolicy,
    phase: BackupPolicyPhase,
    message: String,
) -> Result<Action, Error> {
    let mut next = policy.status.clone().unwrap_or_default();
    next.phase = phase;
    next.message = Some(message);
    write_status(ctx, policy, next).await?;
    Ok(Action::requeue(requeue::RETRY))
}

/// The control-plane cluster of the policy, or why there is none yet.
async fn cluster_of(
    ctx: &Context,
    policy: &StorageBackupPolicy,
) -> Result<Result<Uuid, String>, Error> {
    let ns = policy.namespace().unwrap_or_default();
    let name = &policy.spec.cluster_ref;
    let cluster = Api::<StorageCluster>::namespaced(ctx.kube.clone(), &ns)
        .get_opt(name)
        .await?;
    Ok(match cluster {
        None => Err(format!(
            "StorageCluster {name} does not exist in namespace {ns}"
        )),
        Some(c) => {
            crate::runtime::streams::status_uuid(c.status.as_ref().and_then(|s| s.uuid.as_deref()))
                .ok_or_else(|| format!("StorageCluster {name} has no control-plane id yet"))
        }
    })
}

async fn apply(cached: &StorageBackupPolicy, ctx: &Context) -> Result<Action, Error> {
    let name = cached.name_any();
    // The attachments in status decide calls: read them as last written, not as the
    // cache may still hold them from before the previous pass's write.
    let fresh = Api::<StorageBackupPolicy>::namespaced(
        ctx.kube.clone(),
        &cached.namespace().unwrap_or_default(),
    )
    .get(&name)
    .await?;
    let policy = &fresh;
    let cluster_ref = &policy.spec.cluster_ref;
    let cluster = match cluster_of(ctx, policy).await? {
        Ok(c) => c,
        Err(why) => {
            let message = format!("waiting for cluster {cluster_ref}: {why}");
            return hold(ctx, policy, BackupPolicyPhase::Pending, message).await;
        }
    };
    let cp = ctx.control_plane()?;
    let status = policy.status.clone().unwrap_or_default();
    let existing = cp.list_backup_policies(cluster).await?;
    let recorded = status
        .policy_id
        .as_deref()
        .and_then(|id| id.parse::<Uuid>().ok())
        .filter(|id| existing.iter().any(|p| p.id == *id));
    let policy_id = match recorded
        .or_else(|| existing.iter().find(|p| p.name == name).map(|p| p.id))
    {
        Some(id) => id,
        None => {
            let params = BackupPolicyCreate {
                name: name.clone(),
                versions: policy.spec.max_versions.filter(|v| *v > 0).map(i64::from),
                age: policy.spec.max_age.clone().filter(|a| !a.is_empty()),
                schedule: policy.spec.schedule.clone().filter(|s| !s.is_empty()),
            };
            match cp.create_backup_policy(cluster, &params).await {
                Ok(id) => {
                    crate::runtime::crash::point(crate::runtime::crash::BACKUP_POLICY_CREATE);
                    id
                }
                Err(e) if refused(&e) => {
                    let message = format!("the control plane refused the policy: {}", e.message());
                    return hold(ctx, policy, BackupPolicyPhase::Failed, message).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    let mut next = StorageBackupPolicyStatus {
        cluster_id: Some(cluster.to_string()),
        policy_id: Some(policy_id.to_string()),
        ..status.clone()
    };
    // The durable record first: a pass that stops after it finds the policy by id.
    if status.policy_id != next.policy_id {
        write_status(ctx, policy, next.clone()).await?;
    }

    // Every claim is read: namespaceSelector reaches any namespace.
    let claims = Api::<PersistentVolumeClaim>::all(ctx.kube.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let pvs: BTreeMap<String, PersistentVolume> = Api::<PersistentVolume>::all(ctx.kube.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|pv| (pv.name_any(), pv))
        .collect();
    let namespaces = namespace_labels(ctx, policy, &claims).await?;
    let wanted = membership(policy, cluster, &claims, &namespaces, &pvs);
    let change = diff(&status.attached_claims, &wanted.desired);

    if policy.spec.claim_selector.is_none() {
        ctx.event(
            policy,
            true,
            "SelectorEmpty",
            "The policy has no claimSelector, so it covers nothing and no backup will be taken under it".into(),
        )
        .await;
    }
    for (claim, why) in &wanted.not_eligible {
        ctx.event(
            policy,
            true,
            "ClaimNotEligible",
            format!("Claim {claim} matches the selector but cannot be backed up by cluster {cluster_ref}: {why}"),
        )
        .await;
    }
    let mut attached = change.keep;
    let mut failures = Vec::new();
    for mut claim in change.attach {
        let key = claim_key(&claim.namespace, &claim.name);
        let lvol = claim.lvol_id.clone().unwrap_or_default();
        match cp
            .attach_backup_policy(cluster, policy_id, &target(&lvol))
            .await
        {
            Ok(_) => {
                claim.attached_at = Some(Time(Timestamp::now()));
                attached.push(claim);
                ctx.event(
                    policy,
                    false,
                    "ClaimAttached",
                    format!("Claim {key} started matching and is now backed up under this policy"),
                )
                .await;
            }
            Err(e) => failures.push(format!("attach {key}: {}", e.message())),
        }
    }
    for claim in change.detach {
        let key = claim_key(&claim.namespace, &claim.name);
        let lvol = claim.lvol_id.clone().unwrap_or_default();
        match cp
            .detach_backup_policy(cluster, policy_id, &target(&lvol))
            .await
        {
            Ok(()) => {}
            // Detached already: nothing changed, nothing to announce.
            Err(e) if not_attached(&e) => continue,
            Err(e) => {
                failures.push(format!("detach {key}: {}", e.message()));
                attached.push(claim);
                continue;
            }
        }
        ctx.event(
            policy,
            false,
            "ClaimDetached",
            format!("Claim {key} stopped matching and is no longer backed up under this policy; the backups already taken are kept"),
        )
        .await;
    }
    attached.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));

    next.last_backup_at = last_backup(ctx, policy, &attached).await?;
    next.attached_claims = attached;
    if failures.is_empty() {
        next.phase = BackupPolicyPhase::Active;
        next.message = Some(format!(
            "The policy is active and covers {} claim(s)",
            next.attached_claims.len()
        ));
    } else {
        next.phase = BackupPolicyPhase::Pending;
        next.message = Some(format!(
            "the membership could not be reconciled: {} claim(s) could not be reconciled: [{}]",
            failures.len(),
            failures.join("; ")
        ));
    }
    ctx.metrics.set(
        ATTACHED,
        gauge_labels(policy),
        next.attached_claims.len() as f64,
    );
    let settled = failures.is_empty();
    write_status(ctx, policy, next).await?;
    Ok(Action::requeue(if settled {
        requeue::RESYNC
    } else {
        requeue::RETRY
    }))
}

fn gauge_labels(policy: &StorageBackupPolicy) -> crate::runtime::metrics::Labels {
    vec![
        ("cluster", policy.spec.cluster_ref.clone()),
        ("policy", policy.name_any()),
    ]
}

/// The labels of the namespaces the policy's `namespaceSelector` must be matched against:
/// each namespace of a claim, read one by one (the operator may get a namespace, not list
/// them). None are needed without a selector or with one that picks every namespace.
async fn namespace_labels(
    ctx: &Context,
    policy: &StorageBackupPolicy,
    claims: &[PersistentVolumeClaim],
) -> Result<BTreeMap<String, BTreeMap<String, String>>, Error> {
    let mut out = BTreeMap::new();
    let Some(selector) = &policy.spec.namespace_selector else {
        return Ok(out);
    };
    let every = kube::core::Selector::try_from(selector.clone()).is_ok_and(|s| s.selects_all());
    let wanted: BTreeSet<String> = claims
        .iter()
        .filter(|c| selects(policy.spec.claim_selector.as_ref(), c.labels()))
        .filter_map(|c| c.namespace())
        .collect();
    let namespaces: Api<Namespace> = Api::all(ctx.kube.clone());
    for ns in wanted {
        let labels = if every {
            BTreeMap::new()
        } else {
            match namespaces.get_opt(&ns).await? {
                Some(n) => n.labels().clone(),
                None => continue,
            }
        };
        out.insert(ns, labels);
    }
    Ok(out)
}

/// When the newest Available backup of an attached claim completed, among the
/// StorageBackups of the policy's namespace.
async fn last_backup(
    ctx: &Context,
    policy: &StorageBackupPolicy,
    attached: &[AttachedClaim],
) -> Result<Option<Time>, Error> {
    let backups =
        Api::<StorageBackup>::namespaced(ctx.kube.clone(), &policy.namespace().unwrap_or_default())
            .list(&ListParams::default())
            .await?;
    Ok(backups
        .items
        .iter()
        .filter(|b| b.phase() == BackupPhase::Available)
        .filter_map(|b| {
            let status = b.status.as_ref()?;
            let source = status.source.as_ref()?;
            let covered = attached.iter().any(|a| {
                Some(&a.name) == source.claim_name.as_ref()
                    && Some(&a.namespace) == source.claim_namespace.as_ref()
            });
            covered.then(|| status.backup.as_ref()?.completed_at.clone())?
        })
        .max_by_key(|t| t.0))
}

async fn cleanup(policy: &StorageBackupPolicy, ctx: &Context) -> Result<Action, Error> {
    ctx.metrics.forget(ATTACHED, &gauge_labels(policy));
    let status = policy.status.clone().unwrap_or_default();
    let Ok(cluster) = cluster_of(ctx, policy).await? else {
        // No cluster, no control-plane policy to delete.
        return Ok(Action::await_change());
    };
    let cp = ctx.control_plane()?;
    let existing = cp.list_backup_policies(cluster).await?;
    let recorded = status
        .policy_id
        .as_deref()
        .and_then(|id| id.parse::<Uuid>().ok());
    // A policy created by a pass that ended before recording its id is found by name.
    let Some(policy_id) = recorded
        .filter(|id| existing.iter().any(|p| p.id == *id))
        .or_else(|| {
            existing
                .iter()
                .find(|p| p.name == policy.name_any())
                .map(|p| p.id)
        })
    else {
        return Ok(Action::await_change());
    };
    for claim in &status.attached_claims {
        let Some(lvol) = &claim.lvol_id else { continue };
        match cp
            .detach_backup_policy(cluster, policy_id, &target(lvol))
            .await
        {
            Ok(()) => {}
            Err(e) if not_attached(&e) => {}
            Err(e) => {
                return Err(Error::Held(format!(
                    "claim {} could not be detached: {}",
                    claim_key(&claim.namespace, &claim.name),
                    e.message()
                )));
            }
        }
    }
    match cp.delete_backup_policy(cluster, policy_id).await {
        Ok(()) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => {
            return Err(Error::Held(format!(
                "the control plane refused to delete the policy: {}",
                e.message()
            )));
        }
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CLUSTER: u128 = 7;

    fn policy(
        claims: serde_json::Value,
        namespaces: Option<serde_json::Value>,
    ) -> StorageBackupPolicy {
        let mut spec = json!({"clusterRef": "sb", "maxVersions": 3});
        if !claims.is_null() {
            spec["claimSelector"] = claims;
        }
        if let Some(n) = namespaces {
            spec["namespaceSelector"] = n;
        }
        serde_json::from_value(json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageBackupPolicy",
            "metadata": {"name": "nightly", "namespace": "ops"},
            "spec": spec,
        }))
        .expect("policy")
    }

    fn claim(ns: &str, name: &str, app: &str, pv: Option<&str>) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
            "spec": {"volumeName": pv},
            "status": {"phase": if pv.is_some() { "Bound" } else { "Pending" }},
        }))
        .expect("claim")
    }

    fn pv(name: &str, cluster: u128, lvol: u128) -> (String, PersistentVolume) {
        let handle = format!(
            "{}:{}:{}",
            Uuid::from_u128(cluster),
            Uuid::from_u128(99),
            Uuid::from_u128(lvol)
        );
        let pv = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"csi": {"driver": "csi.simplyblock.io", "volumeHandle": handle}},
        }))
        .expect("pv");
        (name.to_owned(), pv)
    }

    fn names(m: &Membership) -> Vec<String> {
        m.desired
            .iter()
            .map(|a| claim_key(&a.namespace, &a.name))
            .collect()
    }

    #[test]
    fn claims_are_picked_by_both_selectors_and_only_when_bound_to_this_cluster() {
        let pvs: BTreeMap<_, _> = [
            pv("pv-a", CLUSTER, 1),
            pv("pv-b", CLUSTER, 2),
            pv("pv-x", 8, 3),
        ]
        .into();
        let claims = [
            claim("ops", "a", "db", Some("pv-a")),
            claim("apps", "b", "db", Some("pv-b")),
            claim("ops", "web", "web", Some("pv-b")),
            claim("ops", "unbound", "db", None),
            claim("ops", "elsewhere", "db", Some("pv-x")),
        ];
        let labels: BTreeMap<_, _> = [
            ("ops".to_owned(), BTreeMap::new()),
            (
                "apps".to_owned(),
                [("tier".to_owned(), "prod".to_owned())].into(),
            ),
        ]
        .into();
        let db = json!({"matchLabels": {"app": "db"}});
        // No namespaceSelector: the policy's namespace only.
        let own = membership(
            &policy(db.clone(), None),
            Uuid::from_u128(CLUSTER),
            &claims,
            &labels,
            &pvs,
        );
        assert_eq!(names(&own), ["ops/a"]);
        let why: BTreeMap<_, _> = own.not_eligible.iter().cloned().collect();
        assert_eq!(why["ops/unbound"], "the claim is not bound yet");
        assert!(
            why["ops/elsewhere"].contains("belongs to cluster"),
            "{why:?}"
        );
        // `{}`: every namespace; a label: those that carry it.
        let all = membership(
            &policy(db.clone(), Some(json!({}))),
            Uuid::from_u128(CLUSTER),
            &claims,
            &labels,
            &pvs,
        );
        assert_eq!(names(&all), ["apps/b", "ops/a"]);
        let prod = membership(
            &policy(db, Some(json!({"matchLabels": {"tier": "prod"}}))),
            Uuid::from_u128(CLUSTER),
            &claims,
            &labels,
            &pvs,
        );
        assert_eq!(names(&prod), ["apps/b"]);
        assert_eq!(
            prod.desired[0].lvol_id,
            Some(Uuid::from_u128(2).to_string())
        );
    }

    #[test]
    fn without_a_claim_selector_nothing_is_covered() {
        let p = policy(serde_json::Value::Null, None);
        let pvs: BTreeMap<_, _> = [pv("pv-a", CLUSTER, 1)].into();
        let got = membership(
            &p,
            Uuid::from_u128(CLUSTER),
            &[claim("ops", "a", "db", Some("pv-a"))],
            &BTreeMap::new(),
            &pvs,
        );
        assert_eq!(got, Membership::default());
    }

    fn attached(ns: &str, name: &str, lvol: u128, at: bool) -> AttachedClaim {
        AttachedClaim {
            name: name.into(),
            namespace: ns.into(),
            persistent_volume_name: Some(format!("pv-{name}")),
            lvol_id: Some(Uuid::from_u128(lvol).to_string()),
            attached_at: at.then_some(Time(Timestamp::UNIX_EPOCH)),
        }
    }

    #[test]
    fn the_diff_keeps_attachment_times_and_treats_a_new_volume_as_a_new_claim() {
        let before = [attached("ops", "a", 1, true), attached("ops", "b", 2, true)];
        let wanted = [
            attached("ops", "a", 1, false),
            attached("ops", "b", 3, false),
            attached("apps", "c", 4, false),
        ];
        let d = diff(&before, &wanted);
        assert_eq!(d.keep, [before[0].clone()], "kept with its attachedAt");
        assert_eq!(d.attach, [wanted[1].clone(), wanted[2].clone()]);
        assert_eq!(d.detach, [before[1].clone()]);
        assert_eq!(diff(&before, &[]).detach.len(), 2);
    }
}

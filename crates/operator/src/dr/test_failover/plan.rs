//! What a drill does next, decided from its object and what was read for its current
//! step. Pure: no I/O, so every rule is a table test.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;
use simplyblock_api::keys::CSI_DRIVER_NAME;
use simplyblock_api::test_failover::{
    CloneStatus, FailoverPhase, FailoverReport, FailoverScope, FailoverStep, TEST_ID_LABEL,
    TestFailover,
};
use simplyblock_api::volume_handle::{PoolRef, VolumeHandle};
use simplyblock_controlplane::{
    ConsistencyGroup, LatestGeneration, ReplicatedSnapshot, Snapshot, Uuid, Volume,
};

use crate::dr::bubble;

/// What a ManagedClusterView shows.
#[derive(Clone, Debug, PartialEq)]
pub enum View {
    /// Not created yet.
    Absent,
    /// Created; the managed cluster has not answered.
    Pending,
    /// The managed cluster could not read the object (its words).
    Failed(String),
    /// The object, as the managed cluster has it.
    Seen(Value),
}

/// What was read for the current step.
#[derive(Clone, Debug, PartialEq)]
pub enum Observation {
    /// ResolvingSource of a Volume drill: the views of the source claim and its volume.
    Source { claim: View, volume: View },
    /// ResolvingSource of a Group drill.
    Group(GroupSource),
    /// ResolvingPoint of a Group drill: the latest generation of the group's policy.
    Generation(GenerationSeen),
    /// ResolvingPoint onto another cluster: the relationship's latest replicated snapshot
    /// (`None`: nothing replicated yet).
    Replicated(Option<ReplicatedSnapshot>),
    /// ResolvingPoint in place: the source's pool id, and the snapshot the drill uses if it
    /// exists (the pinned one, or the one named for the drill).
    InPlace {
        pool: Uuid,
        snapshot: Option<Snapshot>,
    },
    /// Cloning: per slot, the clone named for it where the recovery point lives, if made,
    /// and whether the recovery point is still there.
    Clones {
        made: Vec<Option<Volume>>,
        point_present: Vec<bool>,
    },
    /// Placing: how many of the bubble's claims the work reports Bound (`None`: no work
    /// yet), the view of the source volume, and the view of the bubble namespace on the
    /// bubble cluster (read while there is no work).
    Placement {
        bound: Option<usize>,
        source_volume: View,
        bubble: View,
    },
}

/// What the control plane and the source cluster say of a consistency group.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupSource {
    /// The source cluster's control-plane id; `None` when the hub cannot tell it.
    pub cluster: Option<Uuid>,
    /// The group of that name, if any.
    pub group: Option<ConsistencyGroup>,
    /// The open members' volumes found so far, by member id.
    pub members: Vec<(Uuid, Option<Volume>)>,
    /// The views of the first member's claim and its volume (Absent when the member names
    /// no claim or the drill no namespace).
    pub claim: View,
    pub volume: View,
}

/// A group's latest replicated generation, as far as it could be read.
#[derive(Clone, Debug, PartialEq)]
pub enum GenerationSeen {
    /// The group or its policy is missing (why).
    Unavailable(String),
    /// Generations exist, none complete on the target yet.
    Incomplete,
    /// Nothing replicated yet, or the newest complete generation.
    Latest(Option<LatestGeneration>),
}

/// One side effect.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    /// Ask the source cluster for one object through a ManagedClusterView.
    View {
        suffix: &'static str,
        resource: &'static str,
        name: String,
        namespace: Option<String>,
    },
    /// Take the drill's snapshot of the source (in place, no pinned point).
    Snapshot {
        cluster: Uuid,
        pool: Uuid,
        volume: Uuid,
        name: String,
    },
    /// Clone slot `slot`'s recovery point into a volume named `name`.
    Clone {
        slot: usize,
        cluster: Uuid,
        pool: Uuid,
        snapshot: Uuid,
        name: String,
    },
    /// Create the ManifestWork that places the bubble.
    Place,
}

/// The next thing to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Hold on this step; the message says for what.
    Wait(String),
    Call(Call),
    /// The step's outcome is there: record it and move on.
    Advance {
        to: FailoverStep,
        clones: Vec<CloneStatus>,
        report: Option<FailoverReport>,
        message: String,
        event: (&'static str, String),
    },
    /// Every claim is bound and the source is untouched.
    Ready {
        report: FailoverReport,
        message: String,
    },
    /// The drill stops (event reason, message).
    Fail {
        reason: &'static str,
        message: String,
    },
}

/// The event reason of a failed drill.
pub const DRILL_FAILED: &str = "DrillFailed";
/// The event reason of a drill whose source changed under it.
pub const INVARIANT_VIOLATED: &str = "InvariantViolated";

fn fail(message: impl Into<String>) -> Decision {
    Decision::Fail {
        reason: DRILL_FAILED,
        message: message.into(),
    }
}

/// The names of a drill's objects.
pub fn name(drill: &TestFailover, suffix: &str) -> String {
    bubble::object_name(
        drill.metadata.namespace.as_deref().unwrap_or_default(),
        drill.metadata.name.as_deref().unwrap_or_default(),
        suffix,
    )
}

/// The view of the bubble namespace, on the bubble cluster; every other view is of the
/// source cluster.
pub const BUBBLE_VIEW: &str = "bubble-ns";

/// The cluster whose namespace on the hub holds the view `suffix`.
pub fn view_cluster<'d>(drill: &'d TestFailover, suffix: &str) -> &'d str {
    if suffix == BUBBLE_VIEW {
        &drill.spec.bubble_cluster
    } else {
        &drill.spec.source_cluster
    }
}

/// Whether the namespace a view shows carries this drill's label: only then did the drill
/// make it, and only then may its teardown take it away.
pub fn made_by(drill: &TestFailover, namespace: &Value) -> bool {
    let uid = drill.metadata.uid.as_deref().unwrap_or_default();
    !uid.is_empty() && namespace["metadata"]["labels"][TEST_ID_LABEL].as_str() == Some(uid)
}

/// Whether the drill places its clones on the source's own cluster.
pub fn in_place(drill: &TestFailover) -> bool {
    drill.spec.bubble_cluster == drill.spec.source_cluster
}

/// Splits a `cluster:pool:id` handle whose pool is an id.
pub fn split_handle(handle: &str) -> Option<(Uuid, Uuid, Uuid)> {
    let mut parts = handle.split(':');
    let (c, p, v) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    Some((c.parse().ok()?, p.parse().ok()?, v.parse().ok()?))
}

/// The decision for `drill`, on its current `step`, from `seen`, at `now`.
pub fn plan(
    drill: &TestFailover,
    step: FailoverStep,
    seen: &Observation,
    now: Timestamp,
) -> Decision {
    let status = drill.status.clone().unwrap_or_default();
    match (step, seen) {
        (FailoverStep::ResolvingSource, Observation::Source { claim, volume }) => {
            resolve_source(drill, claim, volume)
        }
        (FailoverStep::ResolvingSource, Observation::Group(group)) => resolve_group(drill, group),
        (FailoverStep::ResolvingPoint, Observation::Generation(seen)) => {
            resolve_generation(drill, &status.clones, seen)
        }
        (FailoverStep::ResolvingPoint, seen) => resolve_point(drill, &status.clones, seen),
        (
            FailoverStep::Cloning,
            Observation::Clones {
                made,
                point_present,
            },
        ) => clone(drill, &status.clones, made, point_present),
        (
            FailoverStep::Placing,
            Observation::Placement {
                bound,
                source_volume,
                bubble,
            },
        ) => place(drill, &status, *bound, source_volume, bubble, now),
        (step, seen) => Decision::Wait(format!(
            "internal: step {step:?} was given the observation of another step ({seen:?}); deciding again"
        )),
    }
}

fn view_wait(what: &str, cluster: &str, view: &View) -> Decision {
    match view {
        View::Failed(why) => Decision::Wait(format!(
            "cluster {cluster} cannot read {what} yet: {why}; waiting for it"
        )),
        _ => Decision::Wait(format!("waiting for cluster {cluster} to report {what}")),
    }
}

fn resolve_source(drill: &TestFailover, claim: &View, volume: &View) -> Decision {
    let spec = &drill.spec;
    let namespace = spec.source_namespace.clone().unwrap_or_default();
    let what = format!("claim {namespace}/{}", spec.source_ref);
    let claim = match claim {
        View::Absent => {
            return Decision::Call(Call::View {
                suffix: "src-pvc",
                resource: "persistentvolumeclaims",
                name: spec.source_ref.clone(),
                namespace: Some(namespace),
            });
        }
        View::Seen(claim) => claim,
        other => return view_wait(&what, &spec.source_cluster, other),
    };
    let Some(pv_name) = claim["spec"]["volumeName"]
        .as_str()
        .filter(|n| !n.is_empty())
    else {
        return fail(format!(
            "{what} on cluster {} is not bound to a PersistentVolume; a drill clones a bound claim's volume",
            spec.source_cluster
        ));
    };
    let pv = match volume {
        View::Absent => {
            return Decision::Call(Call::View {
                suffix: "src-pv",
                resource: "persistentvolumes",
                name: pv_name.to_owned(),
                namespace: None,
            });
        }
        View::Seen(pv) => pv,
        other => {
            return view_wait(
                &format!("PersistentVolume {pv_name}"),
                &spec.source_cluster,
                other,
            );
        }
    };
    let csi = &pv["spec"]["csi"];
    if csi["driver"] != CSI_DRIVER_NAME {
        return fail(format!(
            "PersistentVolume {pv_name} of {what} is not a simplyblock volume (driver {}); a drill clones only {CSI_DRIVER_NAME} volumes",
            csi["driver"].as_str().unwrap_or("none")
        ));
    }
    let handle = csi["volumeHandle"].as_str().unwrap_or_default();
    if VolumeHandle::parse(handle).is_err() {
        return fail(format!(
            "PersistentVolume {pv_name} has the volume handle {handle:?}, which is not cluster:pool:volume"
        ));
    }
    let attributes: BTreeMap<String, String> =
        serde_json::from_value(csi["volumeAttributes"].clone()).unwrap_or_default();
    let context = bubble::strip_volume_context(&attributes);
    let slot = CloneStatus {
        source_ref: spec.source_ref.clone(),
        source_handle: Some(handle.to_owned()),
        pvc_name: Some(spec.source_ref.clone()),
        source_volume_context: (!context.is_empty()).then_some(context),
        source_fs_type: csi["fsType"].as_str().map(str::to_owned),
        source_volume_mode: Some(
            pv["spec"]["volumeMode"]
                .as_str()
                .unwrap_or("Filesystem")
                .to_owned(),
        ),
        ..CloneStatus::default()
    };
    Decision::Advance {
        to: FailoverStep::ResolvingPoint,
        clones: vec![slot],
        report: None,
        message: "resolved the source volume; resolving the recovery point".into(),
        event: (
            "SourceResolved",
            format!(
                "resolved {what} on cluster {} to volume {handle}",
                spec.source_cluster
            ),
        ),
    }
}

fn resolve_point(drill: &TestFailover, clones: &[CloneStatus], seen: &Observation) -> Decision {
    let spec = &drill.spec;
    let Some(slot) = clones.first() else {
        return fail("internal: the source was not recorded before ResolvingPoint");
    };
    let Some(source) = slot
        .source_handle
        .as_deref()
        .and_then(|h| VolumeHandle::parse(h).ok())
    else {
        return fail("internal: the source handle recorded is not cluster:pool:volume");
    };
    if spec.scope == FailoverScope::Group {
        return fail("internal: a Group drill's point was not read from its generation");
    }
    if !in_place(drill) && spec.recovery_point.is_some() {
        return fail(format!(
            "recoveryPoint pins a snapshot on the source cluster {}, which a drill onto cluster {} cannot clone; leave recoveryPoint out to use the latest replicated snapshot, or drill in place",
            spec.source_cluster, spec.bubble_cluster
        ));
    }
    let advance =
        |cluster: Uuid, pool: Uuid, snapshot: Uuid, taken: bool, at: Option<&str>, size: u64| {
            let mut slot = slot.clone();
            slot.snapshot_id = Some(format!("{cluster}:{pool}:{snapshot}"));
            slot.snapshot_taken = taken;
            if size > 0 {
                slot.size_bytes = i64::try_from(size).ok();
            }
            let time = at.and_then(parse_time);
            Decision::Advance {
                to: FailoverStep::Cloning,
                clones: vec![slot],
                report: Some(FailoverReport {
                    bubble_cluster: Some(spec.bubble_cluster.clone()),
                    recovery_point: Some(snapshot.to_string()),
                    recovery_point_time: time.map(Time),
                    ..FailoverReport::default()
                }),
                message: format!(
                    "resolved the recovery point; cloning it on cluster {}",
                    spec.bubble_cluster
                ),
                event: (
                    "RecoveryPointResolved",
                    format!("recovery point {snapshot} on control-plane cluster {cluster}"),
                ),
            }
        };
    match seen {
        Observation::Replicated(None) => fail(format!(
            "volume {} of cluster {} has no replicated snapshot yet: replicate it to cluster {} and wait for a cycle to land before drilling",
            source.volume, spec.source_cluster, spec.bubble_cluster
        )),
        Observation::Replicated(Some(point)) => advance(
            point.cluster_id,
            point.pool_id,
            point.snapshot_id,
            false,
            point.created_at.as_deref(),
            point.size,
        ),
        Observation::InPlace { pool, snapshot } => match (&spec.recovery_point, snapshot) {
            (Some(pinned), None) => fail(format!(
                "recoveryPoint {pinned} is not a snapshot in pool {pool} of control-plane cluster {}; name a snapshot of the source volume",
                source.cluster
            )),
            (pinned, Some(s)) => advance(
                source.cluster,
                *pool,
                s.id,
                pinned.is_none(),
                Some(&s.created_at),
                s.size,
            ),
            (None, None) => Decision::Call(Call::Snapshot {
                cluster: source.cluster,
                pool: *pool,
                volume: source.volume,
                name: name(drill, "snap"),
            }),
        },
        other => Decision::Wait(format!(
            "internal: ResolvingPoint was given {other:?}; deciding again"
        )),
    }
}

/// What every member of a group shares, read from one member's volume: its filesystem
/// type, its attributes without the source's identity, its mode.
fn shared_class(
    pv: &Value,
) -> (
    Option<String>,
    Option<BTreeMap<String, String>>,
    Option<String>,
) {
    let csi = &pv["spec"]["csi"];
    let attributes: BTreeMap<String, String> =
        serde_json::from_value(csi["volumeAttributes"].clone()).unwrap_or_default();
    let context = bubble::strip_volume_context(&attributes);
    (
        csi["fsType"].as_str().map(str::to_owned),
        (!context.is_empty()).then_some(context),
        Some(
            pv["spec"]["volumeMode"]
                .as_str()
                .unwrap_or("Filesystem")
                .to_owned(),
        ),
    )
}

fn resolve_group(drill: &TestFailover, seen: &GroupSource) -> Decision {
    let spec = &drill.spec;
    let Some(cluster) = seen.cluster else {
        return fail(format!(
            "cluster {} is neither a control-plane cluster id nor the name of one StorageCluster with an id on this hub; name the source cluster so the group can be looked up",
            spec.source_cluster
        ));
    };
    let Some(group) = &seen.group else {
        return fail(format!(
            "control-plane cluster {cluster} ({}) has no consistency group named {}",
            spec.source_cluster, spec.source_ref
        ));
    };
    if seen.members.is_empty() {
        return fail(format!("consistency group {} has no members", group.name));
    }
    let found = seen.members.iter().filter(|(_, v)| v.is_some()).count();
    if found < seen.members.len() {
        return Decision::Wait(format!(
            "found the volumes of {found} of the {} members of consistency group {}",
            seen.members.len(),
            group.name
        ));
    }
    let members: Vec<&Volume> = seen
        .members
        .iter()
        .filter_map(|(_, v)| v.as_ref())
        .collect();
    // The first member's claim gives the class every member shares, when it names one.
    let first = members[0];
    let mut shared = (None, None, None);
    if let (false, Some(namespace)) = (first.pvc_name.is_empty(), &spec.source_namespace) {
        // Views live in the ManagedCluster's namespace on the hub: a control-plane id names
        // none, and a view there would never be answered.
        if spec.source_cluster.parse::<Uuid>().is_ok() {
            return fail(format!(
                "sourceCluster {} is a control-plane cluster id, not a ManagedCluster, so the claims of consistency group {} in sourceNamespace {namespace} cannot be read; name the source by its ManagedCluster (with a StorageCluster of that name and its id on this hub), or leave sourceNamespace out to drill the group without its claims",
                spec.source_cluster, group.name
            ));
        }
        let what = format!("claim {namespace}/{}", first.pvc_name);
        let claim = match &seen.claim {
            View::Absent => {
                return Decision::Call(Call::View {
                    suffix: "src-pvc",
                    resource: "persistentvolumeclaims",
                    name: first.pvc_name.clone(),
                    namespace: Some(namespace.clone()),
                });
            }
            View::Seen(claim) => claim,
            other => return view_wait(&what, &spec.source_cluster, other),
        };
        let Some(pv_name) = claim["spec"]["volumeName"]
            .as_str()
            .filter(|n| !n.is_empty())
        else {
            return fail(format!(
                "{what} of group member {} is not bound to a PersistentVolume",
                first.id
            ));
        };
        match &seen.volume {
            View::Absent => {
                return Decision::Call(Call::View {
                    suffix: "src-pv",
                    resource: "persistentvolumes",
                    name: pv_name.to_owned(),
                    namespace: None,
                });
            }
            View::Seen(pv) => shared = shared_class(pv),
            other => {
                return view_wait(
                    &format!("PersistentVolume {pv_name}"),
                    &spec.source_cluster,
                    other,
                );
            }
        }
    }
    let (fs_type, context, mode) = shared;
    let clones = members
        .iter()
        .map(|v| {
            let pool = v.pool_uuid.clone();
            CloneStatus {
                source_ref: v.id.to_string(),
                source_handle: Some(format!("{cluster}:{pool}:{}", v.id)),
                pvc_name: Some(if v.pvc_name.is_empty() {
                    bubble::member_object_name(
                        drill.metadata.namespace.as_deref().unwrap_or_default(),
                        drill.metadata.name.as_deref().unwrap_or_default(),
                        &v.id.to_string(),
                        "pvc",
                    )
                } else {
                    v.pvc_name.clone()
                }),
                size_bytes: i64::try_from(v.size).ok().filter(|s| *s > 0),
                source_fs_type: fs_type.clone(),
                source_volume_context: context.clone(),
                source_volume_mode: mode.clone(),
                ..CloneStatus::default()
            }
        })
        .collect::<Vec<_>>();
    Decision::Advance {
        to: FailoverStep::ResolvingPoint,
        message: format!(
            "resolved the {} members of consistency group {}; resolving the recovery point",
            clones.len(),
            group.name
        ),
        event: (
            "SourceResolved",
            format!(
                "resolved consistency group {} ({} members) on cluster {}",
                group.name,
                clones.len(),
                spec.source_cluster
            ),
        ),
        clones,
        report: None,
    }
}

fn resolve_generation(
    drill: &TestFailover,
    clones: &[CloneStatus],
    seen: &GenerationSeen,
) -> Decision {
    let spec = &drill.spec;
    if in_place(drill) {
        return fail(
            "a Group drill clones the group's latest replicated generation where it landed, so its bubble cluster must be the group's replication target, not its own cluster",
        );
    }
    if let Some(pinned) = &spec.recovery_point {
        return fail(format!(
            "recoveryPoint {pinned} pins one snapshot, but a Group drill clones a whole generation of the group; leave recoveryPoint out"
        ));
    }
    let generation = match seen {
        GenerationSeen::Unavailable(why) => return fail(why.clone()),
        GenerationSeen::Incomplete => {
            return Decision::Wait(format!(
                "no generation of consistency group {} is complete on the target yet",
                spec.source_ref
            ));
        }
        GenerationSeen::Latest(None) => {
            return fail(format!(
                "consistency group {} has no replicated generation yet: attach a replication policy to it and wait for a generation to land before drilling",
                spec.source_ref
            ));
        }
        GenerationSeen::Latest(Some(g)) => g,
    };
    if generation.members.len() != clones.len() {
        return fail(format!(
            "generation {} has {} members but the group has {}: its membership changed during the drill",
            generation.group_seq,
            generation.members.len(),
            clones.len()
        ));
    }
    let mut placed = Vec::with_capacity(clones.len());
    for slot in clones {
        let Some(member) = generation
            .members
            .iter()
            .find(|m| m.source_lvol_id.to_string() == slot.source_ref)
        else {
            return fail(format!(
                "generation {} has no snapshot of member {}: the group's membership changed during the drill",
                generation.group_seq, slot.source_ref
            ));
        };
        let mut slot = slot.clone();
        slot.snapshot_id = Some(format!(
            "{}:{}:{}",
            member.cluster_id, member.pool_id, member.snapshot_id
        ));
        slot.snapshot_taken = false;
        if member.size > 0 {
            slot.size_bytes = i64::try_from(member.size).ok();
        }
        placed.push(slot);
    }
    let point = format!("generation {}", generation.group_seq);
    Decision::Advance {
        to: FailoverStep::Cloning,
        clones: placed,
        report: Some(FailoverReport {
            bubble_cluster: Some(spec.bubble_cluster.clone()),
            recovery_point: Some(point.clone()),
            ..FailoverReport::default()
        }),
        message: format!(
            "resolved the group-consistent {point}; cloning its {} members",
            clones.len()
        ),
        event: (
            "RecoveryPointResolved",
            format!("{point} of consistency group {}", spec.source_ref),
        ),
    }
}

fn parse_time(at: &str) -> Option<Timestamp> {
    at.parse::<Timestamp>().ok().or_else(|| {
        at.parse::<jiff::civil::DateTime>()
            .ok()
            .and_then(|dt| dt.to_zoned(jiff::tz::TimeZone::UTC).ok())
            .map(|z| z.timestamp())
    })
}

/// The name of slot `slot`'s clone.
pub fn clone_name(drill: &TestFailover, slot: &CloneStatus) -> String {
    match drill.spec.scope {
        FailoverScope::Volume => name(drill, "clone"),
        FailoverScope::Group => bubble::member_object_name(
            drill.metadata.namespace.as_deref().unwrap_or_default(),
            drill.metadata.name.as_deref().unwrap_or_default(),
            &slot.source_ref,
            "clone",
        ),
    }
}

fn clone(
    drill: &TestFailover,
    clones: &[CloneStatus],
    found: &[Option<Volume>],
    point_present: &[bool],
) -> Decision {
    if clones.is_empty() || found.len() != clones.len() || point_present.len() != clones.len() {
        return fail("internal: the recovery point was not recorded before Cloning");
    }
    let mut done = Vec::with_capacity(clones.len());
    for (i, (slot, made)) in clones.iter().zip(found).enumerate() {
        let Some((cluster, pool, snapshot)) = slot.snapshot_id.as_deref().and_then(split_handle)
        else {
            return fail(format!(
                "internal: the recovery point of {} is not recorded as cluster:pool:snapshot",
                slot.source_ref
            ));
        };
        if made.is_none() && !point_present[i] {
            return point_gone(drill, clones, &slot.source_ref, snapshot);
        }
        let Some(volume) = made else {
            return Decision::Call(Call::Clone {
                slot: i,
                cluster,
                pool,
                snapshot,
                name: clone_name(drill, slot),
            });
        };
        let mut slot = slot.clone();
        slot.clone_id = Some(format!("{cluster}:{pool}:{}", volume.id));
        if volume.size > 0 {
            slot.size_bytes = i64::try_from(volume.size).ok();
        }
        done.push(slot);
    }
    let status = drill.status.clone().unwrap_or_default();
    Decision::Advance {
        to: FailoverStep::Placing,
        message: format!(
            "cloned {} recovery point(s); placing them on cluster {}",
            done.len(),
            drill.spec.bubble_cluster
        ),
        event: (
            "CloneBuilt",
            format!(
                "cloned {} recovery point(s) on cluster {}; the source was only read",
                done.len(),
                drill.spec.bubble_cluster
            ),
        ),
        clones: done,
        report: status.report,
    }
}

/// The recovery point of `source` went before its clone was made: a replication keeps only
/// its newest snapshots, so a slow pass can find the point it resolved removed. A pinned
/// point cannot be had again; otherwise the latest one is resolved again.
fn point_gone(
    drill: &TestFailover,
    clones: &[CloneStatus],
    source: &str,
    snapshot: Uuid,
) -> Decision {
    let cluster = &drill.spec.bubble_cluster;
    if let Some(pinned) = &drill.spec.recovery_point {
        return fail(format!(
            "the pinned recovery point {pinned} of {source} is no longer on cluster {cluster}: \
             it was deleted before it was cloned; pin a snapshot that exists, or leave \
             spec.recoveryPoint unset to take the latest"
        ));
    }
    let status = drill.status.clone().unwrap_or_default();
    Decision::Advance {
        to: FailoverStep::ResolvingPoint,
        clones: clones.to_vec(),
        report: status.report,
        message: format!(
            "the recovery point {snapshot} of {source} was removed before it was cloned; \
             resolving the latest again"
        ),
        event: (
            "RecoveryPointGone",
            format!(
                "the recovery point {snapshot} of {source} is no longer on cluster {cluster} \
                 (replication keeps only the newest snapshots); resolving the latest again"
            ),
        ),
    }
}

fn place(
    drill: &TestFailover,
    status: &simplyblock_api::test_failover::TestFailoverStatus,
    bound: Option<usize>,
    source_volume: &View,
    bubble: &View,
    now: Timestamp,
) -> Decision {
    let slots = status.clones.len();
    if slots == 0 || status.clones.iter().any(|c| c.clone_id.is_none()) {
        return fail("internal: the clones were not recorded before Placing");
    }
    let Some(bound) = bound else {
        return place_in_own_namespace(drill, bubble);
    };
    if bound < slots {
        return Decision::Wait(format!(
            "waiting for the bubble's claims to bind on cluster {} ({bound} of {slots} bound)",
            drill.spec.bubble_cluster
        ));
    }
    // The drill only read the source: it must still be the volume the drill started from.
    let recorded = status.clones[0].source_handle.as_deref();
    if let View::Seen(pv) = source_volume {
        let now_handle = pv["spec"]["csi"]["volumeHandle"].as_str();
        if drill.spec.scope == FailoverScope::Volume && now_handle != recorded {
            return Decision::Fail {
                reason: INVARIANT_VIOLATED,
                message: format!(
                    "the source volume changed during the drill (handle {} became {}); the drill was not free of side effects on the source",
                    recorded.unwrap_or("none"),
                    now_handle.unwrap_or("none")
                ),
            };
        }
    }
    let mut report = status.report.clone().unwrap_or_default();
    report.bubble_cluster = Some(drill.spec.bubble_cluster.clone());
    report.invariants_held = Some(true);
    report.recovery_point_age_seconds = report
        .recovery_point_time
        .as_ref()
        .map(|t| (now.as_second() - t.0.as_second()).max(0));
    Decision::Ready {
        report,
        message: format!(
            "the bubble is ready: {slots} claim(s) bound in namespace {} on cluster {}",
            drill.bubble_namespace(),
            drill.spec.bubble_cluster
        ),
    }
}

/// The work is made only once the bubble cluster says the bubble namespace is absent (or
/// already the drill's): a namespace someone else made would be taken over by the work and
/// deleted with it.
fn place_in_own_namespace(drill: &TestFailover, bubble: &View) -> Decision {
    let namespace = drill.bubble_namespace();
    let cluster = &drill.spec.bubble_cluster;
    match bubble {
        View::Absent => Decision::Call(Call::View {
            suffix: BUBBLE_VIEW,
            resource: "namespaces",
            name: namespace,
            namespace: None,
        }),
        View::Seen(found) if made_by(drill, found) => Decision::Call(Call::Place),
        View::Seen(_) => fail(format!(
            "namespace {namespace} already exists on cluster {cluster} and was not made by this drill (it lacks the drill's {TEST_ID_LABEL} label); a drill places its clones only in a namespace it creates, and deletes it with the drill; delete this drill and create one whose bubbleNamespace does not exist on cluster {cluster}, or leave bubbleNamespace out for a namespace of the drill's own"
        )),
        View::Failed(why) if why.contains("not found") => Decision::Call(Call::Place),
        other => view_wait(&format!("namespace {namespace}"), cluster, other),
    }
}

/// Whether `other` keeps `drill` from starting: a live drill of the same scope and source
/// into the same bubble cluster that started first (or, neither started, was created
/// first).
pub fn conflicts(drill: &TestFailover, other: &TestFailover) -> bool {
    if other.metadata.uid == drill.metadata.uid || other.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let (a, b) = (&drill.spec, &other.spec);
    if (a.scope, &a.source_ref, &a.bubble_cluster) != (b.scope, &b.source_ref, &b.bubble_cluster) {
        return false;
    }
    match other.status.as_ref().map(|s| s.phase).unwrap_or_default() {
        FailoverPhase::Failed | FailoverPhase::TearingDown => false,
        FailoverPhase::Provisioning | FailoverPhase::Ready => true,
        FailoverPhase::Pending => {
            let key = |d: &TestFailover| {
                (
                    d.metadata.creation_timestamp.clone().map(|t| t.0),
                    d.metadata.name.clone(),
                )
            };
            key(other) < key(drill)
        }
    }
}

/// The source pool of a recorded handle, as an id when the handle carries one.
pub fn source_pool(handle: &str) -> Option<(Uuid, PoolRef, Uuid)> {
    let h = VolumeHandle::parse(handle).ok()?;
    Some((h.cluster, h.pool, h.volume))
}

#[cfg(test)]
mod tests;

//! The replication chain walk, shared by every replication verb.
//!
//! A volume that failed over, failed back and failed over again is a chain of
//! relationships: each source record names its target, and the target may itself be the
//! source of the next move. A verb acts on one member of that chain: Enable, Disable and
//! Demote on the *local member* (the last hop on this site's clusters), Promote, Info and
//! Resync on the *active end* (the last hop). The walk is pure over [`RelationshipSource`],
//! so its rules are tested without a control plane.

use std::collections::HashSet;
use std::future::Future;

use uuid::Uuid;

use crate::error::{CsiError, Result};
use crate::handle::{PoolRef, VolumeHandle};

/// The most hops a walk follows. It guards against a cycle the control plane should never
/// form; it is not an estimate of chain length (a bound of 8 once stranded the 9th move).
pub const MAX_CHAIN_HOPS: usize = 256;

/// What the cluster-scoped relationship lookup says about one chain member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The member is the source of this relationship (the walk continues to its target).
    pub is_source: bool,
    /// The relationship's own target triple; `None` where the record lacks one.
    pub target: Option<VolumeHandle>,
    /// The volume serving the chain as the control plane sees it; `None` on an older
    /// control plane, which is followed for one hop only.
    pub active_volume: Option<Uuid>,
}

impl Link {
    /// The link a control-plane relationship record describes. The target triple is the
    /// record's own; a record missing any part of it has no target.
    pub fn from_parts(
        is_source: bool,
        target_cluster: Option<Uuid>,
        target_pool: Option<Uuid>,
        target_volume: Option<Uuid>,
        active_volume: Option<Uuid>,
    ) -> Self {
        let target = match (target_cluster, target_pool, target_volume) {
            (Some(cluster), Some(pool), Some(volume)) => Some(VolumeHandle {
                cluster,
                pool: PoolRef::Id(pool),
                volume,
            }),
            _ => None,
        };
        Self {
            is_source,
            target,
            active_volume,
        }
    }
}

/// Looks up the relationship of one chain member on that member's own cluster.
pub trait RelationshipSource {
    /// `Ok(None)` when the member has no relationship (the control plane answered 404).
    fn relationship(
        &self,
        member: &VolumeHandle,
    ) -> impl Future<Output = Result<Option<Link>>> + Send;
}

/// A resolved chain: the members from the handle the sidecar sent to the active end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// Never empty; `hops[0]` is the handle the walk started from.
    hops: Vec<VolumeHandle>,
    /// At least one relationship was found: the handle is a known chain member.
    known: bool,
}

/// Walk the chain from `start`.
///
/// Fails when a lookup fails (other than "no relationship"), when a source record names no
/// target, when the chain returns to a member it already visited, and when it has more
/// than [`MAX_CHAIN_HOPS`] members.
pub async fn resolve<S: RelationshipSource>(source: &S, start: &VolumeHandle) -> Result<Chain> {
    let mut hops = vec![start.clone()];
    let mut visited: HashSet<(Uuid, Uuid)> = HashSet::new();
    let mut known = false;
    for _ in 0..MAX_CHAIN_HOPS {
        let here = hops.last().expect("a chain has its start").clone();
        if !visited.insert((here.cluster, here.volume)) {
            return Err(CsiError::Internal(format!(
                "the replication chain of volume {start} loops at {here}; the control plane's \
                 replication relationships form a cycle and need repair before this volume \
                 can be replicated, promoted or demoted"
            )));
        }
        let Some(link) = source.relationship(&here).await? else {
            return Ok(Chain { hops, known });
        };
        known = true;
        if !link.is_source {
            return Ok(Chain { hops, known });
        }
        let Some(target) = link.target else {
            return Err(CsiError::Internal(format!(
                "the control plane says volume {here} is a replication source but names no \
                 target cluster, pool and volume for it; the relationship record is incomplete"
            )));
        };
        let end = match link.active_volume {
            None => true,
            Some(active) => active == target.volume,
        };
        hops.push(target);
        if hops.len() > MAX_CHAIN_HOPS {
            break;
        }
        if end {
            return Ok(Chain { hops, known });
        }
    }
    Err(CsiError::Internal(format!(
        "the replication chain of volume {start} did not end within {MAX_CHAIN_HOPS} members; \
         the control plane's replication relationships need repair"
    )))
}

impl Chain {
    /// Every member, from the handle the walk started from to the active end.
    pub fn hops(&self) -> &[VolumeHandle] {
        &self.hops
    }

    /// Whether the handle had a relationship at all.
    pub fn known(&self) -> bool {
        self.known
    }

    /// The member Promote, Info and Resync act on: the last hop.
    pub fn active_end(&self) -> &VolumeHandle {
        self.hops.last().expect("a chain has its start")
    }

    /// The member Enable, Disable and Demote act on: the last hop on a local cluster, or
    /// the active end when no cluster is marked local or none of the hops is.
    pub fn local_member(&self, is_local: impl Fn(Uuid) -> bool) -> &VolumeHandle {
        self.hops
            .iter()
            .rev()
            .find(|h| is_local(h.cluster))
            .unwrap_or_else(|| self.active_end())
    }

    /// The `source_cluster_id` Resync sends with the failback of the active end: the first
    /// hop on a local cluster, else the lexically first local cluster, else the class's
    /// `sourceClusterID`.
    pub fn resync_source(
        &self,
        local_clusters: &[Uuid],
        class_source: Option<Uuid>,
    ) -> Option<Uuid> {
        self.hops
            .iter()
            .map(|h| h.cluster)
            .find(|c| local_clusters.contains(c))
            .or_else(|| local_clusters.iter().min_by_key(|c| c.to_string()).copied())
            .or(class_source)
    }

    /// Whether a verb's failure is a reaped member of a known chain, which Disable and
    /// Demote count as done.
    pub fn reaped(&self, err: &CsiError) -> bool {
        self.known && is_not_found(err)
    }
}

fn is_not_found(err: &CsiError) -> bool {
    match err {
        CsiError::NotFound(_) => true,
        CsiError::ControlPlane(e) => e.is_not_found(),
        _ => false,
    }
}

/// The relationships as the control planes in the CSI secret answer them: each member is
/// looked up on its own cluster, so a cluster missing from the secret fails the walk
/// (UNAVAILABLE) rather than ending it.
impl RelationshipSource for crate::clusters::Clusters {
    async fn relationship(&self, member: &VolumeHandle) -> Result<Option<Link>> {
        let client = self.client(member.cluster)?;
        match client
            .replication_relationship(member.cluster, member.volume)
            .await
        {
            // A source whose first snapshot has not reached its target yet has no
            // replica: it is still the end of its chain.
            Ok(r) => Ok(Some(Link::from_parts(
                r.is_source && r.target_lvol_id.is_some(),
                r.target_cluster_id,
                r.target_pool_id,
                r.target_lvol_id,
                r.active_lvol_id,
            ))),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use futures::executor::block_on;
    use proptest::prelude::*;

    use super::*;

    /// Relationships by (cluster, volume), counting the lookups made.
    #[derive(Default)]
    struct Table {
        links: HashMap<(Uuid, Uuid), Link>,
        lookups: Mutex<usize>,
    }

    impl RelationshipSource for Table {
        fn relationship(
            &self,
            member: &VolumeHandle,
        ) -> impl Future<Output = Result<Option<Link>>> + Send {
            *self.lookups.lock().expect("lookups") += 1;
            let link = self.links.get(&(member.cluster, member.volume)).cloned();
            async move { Ok(link) }
        }
    }

    /// A failing lookup.
    struct Down;

    impl RelationshipSource for Down {
        async fn relationship(&self, _: &VolumeHandle) -> Result<Option<Link>> {
            Err(CsiError::UnknownCluster("c".into()))
        }
    }

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn member(site: u128, volume: u128) -> VolumeHandle {
        VolumeHandle {
            cluster: id(1000 + site),
            pool: PoolRef::Id(id(2000 + site)),
            volume: id(volume),
        }
    }

    /// A chain of `moves` failovers alternating between two sites: volume `i` lives on site
    /// `i % 2` and is the source of volume `i + 1`. Every record names the final volume as
    /// the active one when `active_known`. With `loop_to`, the last volume's record names
    /// that earlier volume (or itself) as its target instead of ending.
    fn alternating(moves: usize, active_known: bool, loop_to: Option<usize>) -> Table {
        let loop_back = loop_to.is_some();
        let last = moves as u128;
        let mut t = Table::default();
        for i in 0..moves as u128 {
            let target = member((i + 1) % 2, i + 1);
            t.links.insert(
                (id(1000 + i % 2), id(i)),
                Link {
                    is_source: true,
                    target: Some(target),
                    active_volume: active_known
                        .then(|| id(if loop_back { u128::MAX } else { last })),
                },
            );
        }
        if loop_back {
            t.links.insert(
                (id(1000 + last % 2), id(last)),
                Link {
                    is_source: true,
                    target: loop_to.map(|k| member(k as u128 % 2, k as u128)),
                    active_volume: Some(id(u128::MAX)),
                },
            );
        } else if moves > 0 {
            t.links.insert(
                (id(1000 + last % 2), id(last)),
                Link {
                    is_source: false,
                    target: None,
                    active_volume: None,
                },
            );
        }
        t
    }

    #[test]
    fn no_relationship_is_an_unknown_single_member() {
        let chain = block_on(resolve(&Table::default(), &member(0, 7))).expect("the walk succeeds");
        assert_eq!(chain.hops(), &[member(0, 7)]);
        assert!(!chain.known());
        assert_eq!(chain.active_end(), &member(0, 7));
        assert!(!chain.reaped(&CsiError::NotFound("v".into())));
    }

    #[test]
    fn a_target_member_is_known_and_its_own_end() {
        let t = alternating(1, true, None);
        let chain = block_on(resolve(&t, &member(1, 1))).expect("the walk succeeds");
        assert_eq!(chain.hops(), &[member(1, 1)]);
        assert!(chain.known());
        assert!(chain.reaped(&CsiError::NotFound("v".into())));
        assert!(!chain.reaped(&CsiError::Aborted("busy".into())));
    }

    #[test]
    fn an_older_control_plane_is_followed_one_hop() {
        let t = alternating(5, false, None);
        let chain = block_on(resolve(&t, &member(0, 0))).expect("the walk succeeds");
        assert_eq!(chain.hops(), &[member(0, 0), member(1, 1)]);
        assert_eq!(*t.lookups.lock().expect("lookups"), 1);
    }

    // Regression: a bound of 8 hops stranded the 9th move.
    #[test]
    fn nine_moves_reach_the_end() {
        let t = alternating(9, true, None);
        let chain = block_on(resolve(&t, &member(0, 0))).expect("the walk succeeds");
        assert_eq!(chain.active_end(), &member(1, 9));
        assert_eq!(chain.hops().len(), 10);
    }

    #[test]
    fn each_hop_uses_its_own_records_target() {
        // The first record's target lives on another cluster and pool than the start; the
        // walk must look the second hop up there, not on the start's cluster.
        let a = member(0, 1);
        let b = VolumeHandle {
            cluster: id(77),
            pool: PoolRef::Id(id(78)),
            volume: id(2),
        };
        let c = member(0, 3);
        let mut t = Table::default();
        t.links.insert(
            (a.cluster, a.volume),
            Link {
                is_source: true,
                target: Some(b.clone()),
                active_volume: Some(c.volume),
            },
        );
        t.links.insert(
            (b.cluster, b.volume),
            Link {
                is_source: true,
                target: Some(c.clone()),
                active_volume: Some(c.volume),
            },
        );
        let chain = block_on(resolve(&t, &a)).expect("the walk succeeds");
        assert_eq!(chain.hops(), &[a, b, c]);
    }

    #[test]
    fn a_source_without_a_target_is_an_error() {
        let mut t = Table::default();
        t.links.insert(
            (member(0, 1).cluster, id(1)),
            Link::from_parts(true, Some(id(5)), None, Some(id(2)), None),
        );
        let err = block_on(resolve(&t, &member(0, 1))).expect_err("the walk fails");
        assert!(err.to_string().contains("names no target"), "{err}");
    }

    #[test]
    fn a_failing_lookup_fails_the_walk() {
        let err = block_on(resolve(&Down, &member(0, 1))).expect_err("the walk fails");
        assert!(matches!(err, CsiError::UnknownCluster(_)), "{err:?}");
    }

    #[test]
    fn a_chain_longer_than_the_bound_does_not_converge() {
        let t = alternating(MAX_CHAIN_HOPS + 10, true, None);
        let err = block_on(resolve(&t, &member(0, 0))).expect_err("the walk fails");
        assert!(
            err.to_string().contains("did not end within 256 members"),
            "{err}"
        );
        assert_eq!(*t.lookups.lock().expect("lookups"), MAX_CHAIN_HOPS);
    }

    #[test]
    fn a_chain_of_exactly_the_bound_resolves_and_one_more_does_not() {
        let t = alternating(MAX_CHAIN_HOPS - 1, true, None);
        let chain = block_on(resolve(&t, &member(0, 0))).expect("the walk succeeds");
        assert_eq!(chain.hops().len(), MAX_CHAIN_HOPS);
        let t = alternating(MAX_CHAIN_HOPS, true, None);
        let err = block_on(resolve(&t, &member(0, 0))).expect_err("the walk fails");
        assert!(err.to_string().contains("did not end"), "{err}");
    }

    #[test]
    fn the_local_member_is_the_last_local_hop() {
        let t = alternating(4, true, None);
        let chain = block_on(resolve(&t, &member(0, 0))).expect("the walk succeeds");
        let site0 = id(1000);
        let site1 = id(1001);
        assert_eq!(chain.local_member(|c| c == site1), &member(1, 3));
        assert_eq!(chain.local_member(|c| c == site0), &member(0, 4));
        assert_eq!(chain.local_member(|_| false), &member(0, 4));
        assert_eq!(chain.local_member(|c| c == id(9)), &member(0, 4));
    }

    #[test]
    fn resync_source_prefers_a_local_hop_then_a_local_cluster_then_the_class() {
        let t = alternating(3, true, None);
        let chain = block_on(resolve(&t, &member(0, 0))).expect("the walk succeeds");
        assert_eq!(
            chain.resync_source(&[id(1001)], Some(id(5))),
            Some(id(1001))
        );
        assert_eq!(
            chain.resync_source(&[id(1001), id(1000)], None),
            Some(id(1000))
        );
        assert_eq!(chain.resync_source(&[id(9), id(8)], None), Some(id(8)));
        assert_eq!(chain.resync_source(&[], Some(id(5))), Some(id(5)));
        assert_eq!(chain.resync_source(&[], None), None);
    }

    proptest! {
        /// Any alternating chain of up to 300 moves, entered at any member: the walk ends,
        /// looks up at most 256 relationships, and either finds the last volume or says the
        /// chain is too long.
        #[test]
        fn walks_end_at_the_last_volume_or_refuse(moves in 0usize..=300, entry in 0usize..=300) {
            let entry = entry.min(moves);
            let t = alternating(moves, true, None);
            let start = member(entry as u128 % 2, entry as u128);
            let result = block_on(resolve(&t, &start));
            prop_assert!(*t.lookups.lock().expect("lookups") <= MAX_CHAIN_HOPS);
            if moves - entry < MAX_CHAIN_HOPS {
                let chain = result.expect("the walk succeeds");
                prop_assert_eq!(chain.active_end(), &member(moves as u128 % 2, moves as u128));
                prop_assert_eq!(chain.hops().len(), moves - entry + 1);
                prop_assert_eq!(chain.known(), moves > 0);
            } else {
                let err = result.expect_err("the walk fails");
                prop_assert!(err.to_string().contains("did not end"), "{}", err);
            }
        }

        /// A chain whose last record points back to an earlier volume (or itself) is reported
        /// as a loop (or, when the walk meets more members than the bound, as not
        /// converging), never walked forever.
        #[test]
        fn loops_are_errors(moves in 0usize..=300, entry in 0usize..=300, back in 0usize..=300) {
            let entry = entry.min(moves);
            let back = back.min(moves);
            let t = alternating(moves, true, Some(back));
            let start = member(entry as u128 % 2, entry as u128);
            let err = block_on(resolve(&t, &start)).expect_err("the walk fails");
            prop_assert!(*t.lookups.lock().expect("lookups") <= MAX_CHAIN_HOPS);
            let distinct = moves - entry.min(back) + 1;
            if distinct < MAX_CHAIN_HOPS {
                prop_assert!(err.to_string().contains("loops at"), "{}", err);
            } else {
                prop_assert!(err.to_string().contains("did not end"), "{}", err);
            }
        }
    }
}

//! Which Nodes may attach a pool's volumes: `spec.allowedNodes` resolved to Nodes, each
//! Node's host NQN registered with the control plane's pool (which refuses to connect the
//! pool's volumes to any other host), and the pool's access label on exactly those Nodes
//! (which the node plugin reports as topology, so volumes are scheduled there).
//!
//! Every step compares with what is there and changes only the difference, so a pass
//! interrupted anywhere is finished by the next one.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Mutex, OnceLock};

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use simplyblock_api::StoragePool;
use simplyblock_api::keys;
use simplyblock_api::volume_handle::host_nqn;
use simplyblock_controlplane::Uuid;
use simplyblock_controlplane::types::Pool;

use crate::runtime::context::Context;
use crate::runtime::kit::Error;

/// The event raised once for a name of spec.allowedNodes that matches no Node.
pub const ALLOWED_NODE_MISSING: &str = "AllowedNodeMissing";

/// The Nodes of `spec.allowedNodes` that exist, in the spec's order, and the names that
/// match none.
pub struct Resolved {
    pub nodes: Vec<Node>,
    pub missing: Vec<String>,
}

impl Resolved {
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.nodes.iter().map(|n| n.name_any()).collect();
        names.sort();
        names
    }

    /// The host NQNs the control plane should allow: one per resolved Node, from its UID.
    pub fn host_nqns(&self) -> BTreeSet<String> {
        self.nodes
            .iter()
            .filter_map(|n| n.metadata.uid.as_deref())
            .map(host_nqn)
            .collect()
    }
}

/// What to change so that `have` becomes `want`: the items to add and those to remove.
pub fn difference<'a>(
    want: &'a BTreeSet<String>,
    have: &'a BTreeSet<String>,
) -> (Vec<&'a String>, Vec<&'a String>) {
    (
        want.difference(have).collect(),
        have.difference(want).collect(),
    )
}

/// Reads the Nodes `spec.allowedNodes` names.
pub async fn resolve(ctx: &Context, pool: &StoragePool) -> Result<Resolved, Error> {
    let nodes: Api<Node> = Api::all(ctx.kube.clone());
    let mut resolved = Resolved {
        nodes: Vec::new(),
        missing: Vec::new(),
    };
    for name in &pool.spec.allowed_nodes {
        match nodes.get_opt(name).await? {
            Some(node) => resolved.nodes.push(node),
            None => resolved.missing.push(name.clone()),
        }
    }
    Ok(resolved)
}

/// The names already announced missing, per pool (by UID) and name: the spec keeps a
/// name whose Node is gone, so without this every pass would repeat the event.
fn announced() -> &'static Mutex<HashSet<String>> {
    static ANNOUNCED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    ANNOUNCED.get_or_init(Default::default)
}

/// Raises [`ALLOWED_NODE_MISSING`] once for every name that newly matches no Node, and
/// forgets the names that match one again (so a second disappearance is announced).
pub async fn announce_missing(ctx: &Context, pool: &StoragePool, resolved: &Resolved) {
    let uid = pool.uid().unwrap_or_default();
    let key = |name: &str| format!("{uid}/{name}");
    let fresh: Vec<&String> = {
        let mut seen = announced().lock().unwrap_or_else(|e| e.into_inner());
        for node in &resolved.nodes {
            seen.remove(&key(&node.name_any()));
        }
        resolved
            .missing
            .iter()
            .filter(|name| seen.insert(key(name)))
            .collect()
    };
    for name in fresh {
        ctx.event(
            pool,
            true,
            ALLOWED_NODE_MISSING,
            format!(
                "spec.allowedNodes names {name}, which is no Node; it is ignored and kept in the spec, so the Node may attach the pool's volumes again when it joins under that name; remove it from spec.allowedNodes if it is not coming back"
            ),
        )
        .await;
    }
}

/// Puts the pool's access label on the resolved Nodes and removes it from every other.
pub async fn sync_labels(ctx: &Context, pool_uuid: &str, resolved: &Resolved) -> Result<(), Error> {
    let key = keys::pool_access_label(pool_uuid);
    let nodes: Api<Node> = Api::all(ctx.kube.clone());
    let labelled: BTreeSet<String> = nodes
        .list_metadata(
            &ListParams::default().labels(&format!("{key}={}", keys::POOL_ACCESS_ALLOWED)),
        )
        .await?
        .items
        .iter()
        .map(|n| n.name_any())
        .collect();
    let want: BTreeSet<String> = resolved.names().into_iter().collect();
    let (add, remove) = difference(&want, &labelled);
    for name in add {
        let patch = json!({"metadata": {"labels": {&key: keys::POOL_ACCESS_ALLOWED}}});
        nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    for name in remove {
        let patch = json!({"metadata": {"labels": {&key: null}}});
        match nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Removes the pool's access label from every Node (the pool is going).
pub async fn remove_labels(ctx: &Context, pool_uuid: &str) -> Result<(), Error> {
    let none = Resolved {
        nodes: Vec::new(),
        missing: Vec::new(),
    };
    sync_labels(ctx, pool_uuid, &none).await
}

/// Why the control plane cannot enforce `spec.allowedNodes`, if it cannot: only a pool
/// created with host authentication keeps a host list.
pub fn unenforceable(found: &Pool, pool: &StoragePool) -> Option<String> {
    (!found.dhchap && !pool.spec.allowed_nodes.is_empty()).then(|| {
        format!(
            "spec.allowedNodes cannot be enforced: the control plane created pool {} without host authentication (the pool named no allowedNodes and no volumeDefaults.enableDHCHAP when it was created), and a pool's host list exists only for pools created with it; create a new StoragePool with allowedNodes set and move the volumes to it",
            found.id
        )
    })
}

/// The host the control plane's pool lists while spec.allowedNodes names only absent
/// Nodes: an empty host list would admit every host, so the pool lists one no Node has
/// (a Node's UID is never the nil UUID).
pub fn nobody() -> String {
    host_nqn("00000000-0000-0000-0000-000000000000")
}

/// The hosts the control plane's pool should list: none when spec.allowedNodes is empty
/// (every host), else the resolved Nodes', else [`nobody`].
pub fn wanted_hosts(pool: &StoragePool, resolved: &Resolved) -> BTreeSet<String> {
    if pool.spec.allowed_nodes.is_empty() {
        return BTreeSet::new();
    }
    let hosts = resolved.host_nqns();
    if hosts.is_empty() {
        BTreeSet::from([nobody()])
    } else {
        hosts
    }
}

/// Registers the `want`ed hosts with the control plane's pool and removes the rest; a
/// host already there is not sent again. Says whether anything was sent.
pub async fn sync_hosts(
    ctx: &Context,
    cluster: Uuid,
    found: &Pool,
    want: &BTreeSet<String>,
) -> Result<bool, Error> {
    let have: BTreeSet<String> = found.allowed_hosts.iter().cloned().collect();
    let (add, remove) = difference(want, &have);
    let changed = !add.is_empty() || !remove.is_empty();
    let cp = ctx.control_plane()?;
    for host in add {
        match cp.add_pool_host(cluster, found.id, host).await {
            Ok(()) => {}
            // A pass that read the pool before another pass's add.
            Err(e) if e.message().contains("already in the pool's allowed list") => {}
            Err(e) => return Err(e.into()),
        }
        crate::runtime::crash::point(crate::runtime::crash::POOL_HOST_ADD);
    }
    for host in remove {
        match cp.remove_pool_host(cluster, found.id, host).await {
            Ok(()) => {}
            Err(e) if e.message().contains("is not in the pool's allowed list") => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(changed)
}

/// Whether `node` is one a pool may name or has named: its changes wake the pools.
pub fn names_node(pool: &StoragePool, node: &str) -> bool {
    pool.spec.allowed_nodes.iter().any(|n| n == node)
        || pool
            .status
            .as_ref()
            .is_some_and(|s| s.allowed_nodes.iter().any(|n| n == node))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_the_difference_is_sent() {
        let want = set(&["a", "b"]);
        let have = set(&["b", "c"]);
        let (add, remove) = difference(&want, &have);
        assert_eq!(add, vec!["a"]);
        assert_eq!(remove, vec!["c"]);
        let (add, remove) = difference(&want, &want);
        assert!(add.is_empty() && remove.is_empty());
    }

    #[test]
    fn a_pool_without_host_authentication_cannot_be_restricted() {
        let pool = |nodes: &[&str]| {
            StoragePool::new(
                "p1",
                simplyblock_api::storage_pool::StoragePoolSpec {
                    cluster_ref: "sb".into(),
                    allowed_nodes: nodes.iter().map(|s| s.to_string()).collect(),
                    limits: None,
                    volume_defaults: None,
                },
            )
        };
        let plain = Pool::default();
        let why = unenforceable(&plain, &pool(&["gone"])).expect("refused");
        assert!(why.contains("create a new StoragePool"), "{why}");
        let authenticated = Pool {
            dhchap: true,
            ..Pool::default()
        };
        assert!(unenforceable(&authenticated, &pool(&["w1"])).is_none());
        assert!(unenforceable(&plain, &pool(&[])).is_none());
    }

    #[test]
    fn a_list_of_absent_nodes_admits_no_host_and_an_empty_one_every_host() {
        let node = Node {
            metadata: kube::api::ObjectMeta {
                name: Some("w1".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let pool = |nodes: &[&str]| {
            StoragePool::new(
                "p1",
                simplyblock_api::storage_pool::StoragePoolSpec {
                    cluster_ref: "sb".into(),
                    allowed_nodes: nodes.iter().map(|s| s.to_string()).collect(),
                    limits: None,
                    volume_defaults: None,
                },
            )
        };
        let none = Resolved {
            nodes: Vec::new(),
            missing: vec!["gone".into()],
        };
        assert_eq!(wanted_hosts(&pool(&["gone"]), &none), set(&[&nobody()]));
        assert!(wanted_hosts(&pool(&[]), &none).is_empty());
        let one = Resolved {
            nodes: vec![node],
            missing: vec!["gone".into()],
        };
        assert_eq!(
            wanted_hosts(&pool(&["w1", "gone"]), &one),
            set(&["nqn.2014-08.io.simplyblock:uuid:u1"])
        );
    }
}

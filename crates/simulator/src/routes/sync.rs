//! Synchronous replication between the sites of one cluster (a newer control plane): the
//! cluster is created with `sync_replication` (the routes refuse any other with 400), a
//! site is the name its storage nodes were added with (`site` in the node-add body), and a
//! volume is served on the site of its primary node. `…/replication/demote?site=` fences
//! the volume on that site; `…/replication/failover?site=&planned=` serves it there.
//! Refusals carry `{"detail": {"message": …}}`: 400 for a site the cluster does not have,
//! 409 for a gate (retry), 412 when the peer site is offline on a planned promote.

use serde_json::json;
use simplyblock_controlplane::types::*;
use uuid::Uuid;

use crate::model::*;
use crate::render;
use crate::reply::{ApiResult, Reply};
use crate::sim::St;
use crate::store::Tables;

/// A refusal in the sync routes' envelope.
fn refuse(status: u16, message: impl Into<String>) -> Reply {
    Reply::json(status, json!({ "detail": { "message": message.into() } }))
}

fn site_of(t: &Tables, node: Uuid) -> Option<String> {
    t.nodes
        .get(&node.to_string())
        .map(|n| n.site.clone())
        .filter(|s| !s.is_empty())
}

/// The site named by `?site=`, if the cluster was created for synchronous replication and
/// has a node there; else the 400.
fn known_site(t: &Tables, c: Uuid, site: Option<&str>) -> Result<String, Reply> {
    let Some(site) = site.filter(|s| !s.is_empty()) else {
        return Err(refuse(
            400,
            "The site query parameter is required for synchronous replication",
        ));
    };
    let synchronous = t
        .clusters
        .get(&c.to_string())
        .is_some_and(|x| x.params.sync_replication);
    if !synchronous {
        return Err(refuse(
            400,
            format!(
                "Cluster {c} was not created with synchronous replication (sync_replication); \
                 its volumes have no second site to move to"
            ),
        ));
    }
    if t.nodes
        .values()
        .any(|n| n.cluster_id == c && n.site == site)
    {
        Ok(site.to_string())
    } else {
        Err(refuse(
            400,
            format!("Site {site} is not a site of cluster {c}: no storage node stands there"),
        ))
    }
}

/// An online node of cluster `c` in `site`, preferring the volume's secondaries.
fn node_in(t: &Tables, v: &VolumeRec, site: &str) -> Option<Uuid> {
    let online = |n: &Uuid| {
        t.nodes.get(&n.to_string()).is_some_and(|x| {
            x.cluster_id == v.cluster_id && x.status == NodeStatus::Online && x.site == site
        })
    };
    v.secondary_ids
        .iter()
        .copied()
        .find(|n| online(n))
        .or_else(|| {
            render::sorted(
                t.nodes
                    .values()
                    .filter(|x| x.cluster_id == v.cluster_id && x.lvstore),
                |x| x.seq,
            )
            .into_iter()
            .map(|x| x.id)
            .find(online)
        })
}

/// Fence `vid` on `site`. 204 also when it is not served there (nothing to do); 409 when
/// no other site has an online node to take it over.
pub fn demote(st: &mut St<'_>, vid: Uuid, site: Option<&str>) -> ApiResult {
    Ok(demote_reply(st, vid, site))
}

fn demote_reply(st: &mut St<'_>, vid: Uuid, site: Option<&str>) -> Reply {
    let Some(v) = st.t.volumes.get(&vid.to_string()).cloned() else {
        return refuse(404, format!("Volume {vid} not found"));
    };
    let site = match known_site(st.t, v.cluster_id, site) {
        Ok(s) => s,
        Err(r) => return r,
    };
    if v.fenced || site_of(st.t, v.node_id).as_deref() != Some(site.as_str()) {
        return Reply::empty(204);
    }
    let peer_online = st.t.nodes.values().any(|n| {
        n.cluster_id == v.cluster_id
            && n.status == NodeStatus::Online
            && !n.site.is_empty()
            && n.site != site
    });
    if !peer_online {
        return refuse(
            409,
            format!(
                "Volume {vid} cannot be demoted on site {site}: no other site has an online \
                 node to take it over; retry when the peer site is back"
            ),
        );
    }
    if let Some(x) = st.t.volumes.get_mut(&vid.to_string()) {
        x.fenced = true;
    }
    Reply::empty(204)
}

/// Serve `vid` on `site`. 200 with its connection lines (also when it is served there
/// already). A planned promote needs the serving site demoted first (409) and that site's
/// node reachable (412); an unplanned one takes over regardless. 409 too while `site`
/// has no online node.
pub fn failover(st: &mut St<'_>, vid: Uuid, site: Option<&str>, planned: bool) -> ApiResult {
    Ok(failover_reply(st, vid, site, planned).unwrap_or_else(|r| r))
}

fn failover_reply(
    st: &mut St<'_>,
    vid: Uuid,
    site: Option<&str>,
    planned: bool,
) -> Result<Reply, Reply> {
    let promoted = promote(st, vid, site, planned)?;
    Ok(Reply::ok(json!(promoted)))
}

fn promote(
    st: &mut St<'_>,
    vid: Uuid,
    site: Option<&str>,
    planned: bool,
) -> Result<SyncPromoteResult, Reply> {
    let Some(v) = st.t.volumes.get(&vid.to_string()).cloned() else {
        return Err(refuse(404, format!("Volume {vid} not found")));
    };
    let site = known_site(st.t, v.cluster_id, site)?;
    let serving = site_of(st.t, v.node_id);
    if serving.as_deref() == Some(site.as_str()) && !v.fenced {
        return Ok(connection(st.t, &v));
    }
    let current = st.t.nodes.get(&v.node_id.to_string());
    let current_up = current.is_some_and(|n| n.status == NodeStatus::Online);
    let from = serving.unwrap_or_else(|| "(none)".into());
    if planned && serving_elsewhere(&v, &site, st.t) {
        if !current_up {
            return Err(refuse(
                412,
                format!(
                    "Site {from}, which serves volume {vid}, is offline; promote it unplanned \
                     to fail over without it"
                ),
            ));
        }
        if !v.fenced {
            return Err(refuse(
                409,
                format!("Volume {vid} is still served on site {from}; demote it there first"),
            ));
        }
    }
    let Some(node) = node_in(st.t, &v, &site) else {
        return Err(refuse(
            409,
            format!("Site {site} has no online node to serve volume {vid} yet; retry"),
        ));
    };
    let old = v.node_id;
    if let Some(x) = st.t.volumes.get_mut(&vid.to_string()) {
        x.node_id = node;
        x.secondary_ids.retain(|n| *n != node);
        if old != node && !x.secondary_ids.contains(&old) {
            x.secondary_ids.insert(0, old);
        }
        x.fenced = false;
    }
    let v = st.t.volumes.get(&vid.to_string()).cloned().unwrap_or(v);
    Ok(connection(st.t, &v))
}

fn serving_elsewhere(v: &VolumeRec, site: &str, t: &Tables) -> bool {
    site_of(t, v.node_id).is_some_and(|s| s != site)
}

fn connection(t: &Tables, v: &VolumeRec) -> SyncPromoteResult {
    let mut nodes = vec![v.node_id];
    nodes.extend(v.secondary_ids.iter().copied());
    SyncPromoteResult {
        lvol_id: v.id,
        connection_strings: render::connect_entries(t, v, None, &nodes, 3600, true)
            .into_iter()
            .map(|e| {
                format!(
                    "--transport={} --traddr={} --trsvcid={} --nqn={}",
                    e.transport, e.ip, e.port, e.nqn
                )
            })
            .collect(),
    }
}

/// Fence every member on `site`: 204 when each is, else the first member's refusal.
pub fn demote_group(st: &mut St<'_>, members: &[Uuid], site: Option<&str>) -> ApiResult {
    for m in members {
        let r = demote_reply(st, *m, site);
        if r.status != 204 {
            return Ok(r);
        }
    }
    Ok(Reply::empty(204))
}

/// Serve every member on `site`: 200 with one entry per member, else the first member's
/// refusal (members promoted before it stay promoted; a retry finds them served).
pub fn failover_group(
    st: &mut St<'_>,
    members: &[Uuid],
    site: Option<&str>,
    planned: bool,
) -> ApiResult {
    let mut out = Vec::new();
    for m in members {
        match promote(st, *m, site, planned) {
            Ok(p) => out.push(p),
            Err(r) => return Ok(r),
        }
    }
    Ok(Reply::ok(json!(SyncGroupPromoteResult { members: out })))
}

/// The typed status of a volume of a cluster whose nodes stand in two sites or more,
/// as synchronous replication sees it: `source` where it is served, `secondary` while
/// fenced; `in_sync` (no lag) while another site has an online node, `degraded` while
/// none does. `None` for a cluster of one site.
pub fn status(t: &Tables, v: &VolumeRec, now: i64) -> Option<ReplicationStatus> {
    let sites: std::collections::BTreeSet<&str> = t
        .nodes
        .values()
        .filter(|n| n.cluster_id == v.cluster_id && !n.site.is_empty())
        .map(|n| n.site.as_str())
        .collect();
    if sites.len() < 2 {
        return None;
    }
    let serving = site_of(t, v.node_id).unwrap_or_default();
    let mirrored = t.nodes.values().any(|n| {
        n.cluster_id == v.cluster_id
            && n.status == NodeStatus::Online
            && !n.site.is_empty()
            && n.site != serving
    });
    Some(ReplicationStatus {
        role: if v.fenced { "secondary" } else { "source" }.into(),
        state: if mirrored { "in_sync" } else { "degraded" }.into(),
        last_replicated_at: mirrored.then(|| render::iso_time(now)),
        lag_seconds: mirrored.then_some(0.0),
        lag_budget_seconds: Some(0.0),
        ..Default::default()
    })
}

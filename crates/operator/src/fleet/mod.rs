//! The fleet as the control plane reports it: capacity, health, I/O and progress per
//! StorageCluster, storage node, device, pool and PersistentVolume, exported as the
//! families of `simplyblock_telemetry::catalogue` (its `fleet` rows), and the
//! `DeviceNearlyFull` event when a drive fills past the cluster's warning threshold.
//!
//! Only the leader collects (it runs with the controllers). Every [`Settings::interval`]
//! one pass per StorageCluster that has a control-plane id observes, plans the samples
//! purely ([`plan`]) and writes them; a series the pass no longer produces (its object
//! gone from Kubernetes or from the control plane) is forgotten, and so is every series
//! of a StorageCluster that went. Nothing is written to Kubernetes but events.
//!
//! # Cost
//!
//! Lists carry the capacity samples of clusters, nodes, devices and pools; volume lists
//! carry none, so a pass visits at most [`Settings::volume_budget`] volumes (round robin,
//! each visit a detail read, its `iostats` and, for a replicated volume, its latest
//! replicated snapshot). Per cluster and pass, with `N` storage nodes, `P` pools and a
//! budget `B`:
//!
//! `calls = 5 + 2N + 2P + 3B` (cluster, its iostats, the node list, each node's iostats
//! and device list, the pool list, each pool's iostats and volume list, the task list,
//! the visits).
//!
//! At 50 workers with one pool, the default 30 s interval and budget 8, that is
//! `2 × (5 + 100 + 2 + 24) = 262` control-plane calls per minute at most, and a volume's
//! used bytes and I/O are at most `30 s × ceil(volumes / 8)` old.

mod observe;
pub mod plan;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::Api;
use simplyblock_api::{StorageCluster, StorageDevice};
use simplyblock_controlplane::Uuid;

use crate::runtime::context::Context;
use crate::runtime::metrics::Labels;

/// How often and how widely the collector reads.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Between two passes over a cluster.
    pub interval: Duration,
    /// Volumes visited per cluster and pass.
    pub volume_budget: usize,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            interval: Duration::from_secs(30),
            volume_budget: 8,
        }
    }
}

/// The capacity warning level when the StorageCluster sets none.
pub const DEFAULT_WARNING_PERCENT: i64 = 80;

/// What the collector remembers of a cluster between passes.
#[derive(Default)]
struct Memory {
    /// Every series the last pass wrote.
    written: BTreeSet<(&'static str, Labels)>,
    /// The figures of each volume's last visit.
    figures: BTreeMap<Uuid, plan::VolumeFigures>,
    /// The last volume visited: the next pass goes on after it.
    last_visit: Option<Uuid>,
    /// The devices over the warning threshold at the last pass.
    full: BTreeSet<String>,
}

/// Runs passes until shutdown.
pub async fn run(ctx: Arc<Context>, settings: Settings) {
    let mut memory: BTreeMap<(String, String), Memory> = BTreeMap::new();
    loop {
        pass(&ctx, settings, &mut memory).await;
        tokio::select! {
            _ = tokio::time::sleep(settings.interval) => {}
            _ = ctx.shutdown.clone().wait() => return,
        }
    }
}

async fn pass(ctx: &Context, settings: Settings, memory: &mut BTreeMap<(String, String), Memory>) {
    let clusters = match ctx
        .scope
        .api::<StorageCluster>(&ctx.kube)
        .list(&Default::default())
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            tracing::warn!(error = %e, "listing StorageClusters for the fleet metrics failed");
            return;
        }
    };
    let present: BTreeSet<(String, String)> = clusters
        .iter()
        .map(|c| (c.namespace().unwrap_or_default(), c.name_any()))
        .collect();
    // A StorageCluster gone: its series go with it.
    memory.retain(|key, m| {
        let keep = present.contains(key);
        if !keep {
            forget_all(ctx, &m.written);
        }
        keep
    });
    for cluster in &clusters {
        let key = (cluster.namespace().unwrap_or_default(), cluster.name_any());
        let Some(id) = cluster
            .status
            .as_ref()
            .and_then(|s| s.uuid.as_deref())
            .and_then(|u| u.parse::<Uuid>().ok())
        else {
            continue;
        };
        let m = memory.entry(key).or_default();
        match observe::observe(
            ctx,
            cluster,
            id,
            settings.volume_budget,
            &mut m.figures,
            &mut m.last_visit,
        )
        .await
        {
            Ok(o) => write(ctx, cluster, &o, m).await,
            Err(e) => tracing::warn!(
                cluster = %cluster.name_any(), error = %e,
                "reading the fleet's statistics failed; the last figures stay until the next pass"
            ),
        }
    }
}

/// Writes a pass's samples, forgets what it no longer produced, and announces devices
/// that crossed the warning threshold.
async fn write(ctx: &Context, cluster: &StorageCluster, o: &plan::Observation, m: &mut Memory) {
    let samples = plan::samples(o);
    let mut written = BTreeSet::new();
    for s in samples {
        ctx.metrics.set(s.family, s.labels.clone(), s.value);
        written.insert((s.family, s.labels));
    }
    let gone: BTreeSet<_> = m.written.difference(&written).cloned().collect();
    forget_all(ctx, &gone);
    m.written = written;

    let threshold = cluster
        .spec
        .warning_threshold
        .as_ref()
        .and_then(|t| t.capacity)
        .unwrap_or(DEFAULT_WARNING_PERCENT);
    let devices: Vec<&plan::DeviceSeen> = o.nodes.iter().flat_map(|n| &n.devices).collect();
    let (full, crossed) = plan::crossings(&devices, &m.full, threshold);
    let api: Api<StorageDevice> = Api::namespaced(ctx.kube.clone(), &o.namespace);
    let mut announced = full.clone();
    for name in crossed {
        let Some(d) = devices.iter().find(|d| d.name == name) else {
            continue;
        };
        match api.get_opt(&name).await {
            Ok(Some(object)) => {
                let percent = d.used_bytes as f64 * 100.0 / d.size as f64;
                ctx.event(
                    &object,
                    true,
                    "DeviceNearlyFull",
                    format!(
                        "{percent:.0} % of the device is used ({} of {} bytes), at or above the cluster's warning threshold of {threshold} % (spec.warningThreshold.capacity): add capacity or free space before it fills",
                        d.used_bytes, d.size
                    ),
                )
                .await;
            }
            // Not mirrored yet (or unreadable): announced by a later pass.
            _ => {
                announced.remove(&name);
            }
        }
    }
    m.full = announced;
}

fn forget_all(ctx: &Context, series: &BTreeSet<(&'static str, Labels)>) {
    for (family, labels) in series {
        ctx.metrics.forget(family, labels);
    }
}

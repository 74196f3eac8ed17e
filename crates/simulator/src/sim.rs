//! The simulator object: configuration, state, clock, faults and call log, and the
//! one way to change state ([`Sim::mutate`]), which commits before it returns.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};
use uuid::Uuid;

use crate::calllog::CallLog;
use crate::clock::SimClock;
use crate::error::SimError;
use crate::faults::{self, Faults};
use crate::fleet;
use crate::model::*;
use crate::openapi::Spec;
use crate::reply::ApiError;
use crate::rng::SimRng;
use crate::store::{Db, Tables};

/// How long things take, in sim milliseconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Timings {
    /// A new task waits this long before the runner picks it up.
    pub task_pickup_ms: i64,
    /// Between a failed attempt and the next.
    pub retry_interval_ms: i64,
    /// A worker's reboot after the CPU topology is applied.
    pub reboot_ms: i64,
    /// The longest a node add waits for a rebooting worker before charging a retry.
    pub reboot_wait_max_ms: i64,
    /// From node record (in_creation) to online.
    pub node_add_ms: i64,
    pub activate_ms: i64,
    pub expand_ms: i64,
    pub node_shutdown_ms: i64,
    pub node_restart_ms: i64,
    pub node_removal_ms: i64,
    pub volume_delete_ms: i64,
    pub migration_phase_ms: i64,
    pub rebalance_ms: i64,
    pub replication_ms: i64,
    /// A backup's upload, from its pickup to completed.
    pub backup_ms: i64,
    /// A restore's download, from the new volume to online.
    pub restore_ms: i64,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            task_pickup_ms: 1_000,
            retry_interval_ms: 5_000,
            reboot_ms: 20_000,
            reboot_wait_max_ms: 900_000,
            node_add_ms: 8_000,
            activate_ms: 5_000,
            expand_ms: 5_000,
            node_shutdown_ms: 3_000,
            node_restart_ms: 6_000,
            node_removal_ms: 5_000,
            volume_delete_ms: 1_000,
            migration_phase_ms: 3_000,
            rebalance_ms: 5_000,
            replication_ms: 2_000,
            backup_ms: 4_000,
            restore_ms: 6_000,
        }
    }
}

/// Everything `sbsim serve` is told.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub state_dir: PathBuf,
    /// Admin bearer tokens. Empty = any bearer token is accepted (open mode).
    pub tokens: Vec<String>,
    pub seed: u64,
    pub time_scale: f64,
    pub fleet: Option<PathBuf>,
    /// Where hardware profiles (host trees) live.
    pub hosts_dir: Option<PathBuf>,
    pub faults: String,
    pub timings: Timings,
    /// `KEY` or `KEY=VALUE`: the label that enrolls a worker into the storage plane.
    pub enrollment_label: String,
    /// Keep answer bodies in the call log (contract tests read them).
    pub record_bodies: bool,
    pub call_log_capacity: usize,
    /// Keep each volume's data as a sparse file `<id>.img` here (see [`crate::volfiles`]).
    pub volume_files: Option<PathBuf>,
    /// Where the object stores keep their objects (see [`crate::objstore::root`]).
    pub object_store_dir: Option<PathBuf>,
    /// The version `/_meta/version` reports at start; `None` answers 404, as a control
    /// plane without the route does. `PUT /_sim/version` changes it.
    pub version: Option<String>,
}

/// The label the storage-node DaemonSet's nodeSelector uses; its value is the
/// StorageCluster (node-set) name.
pub const DEFAULT_ENROLLMENT_LABEL: &str =
    "node-restriction.kubernetes.io/simplyblock-storage-node";

impl SimConfig {
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
            tokens: Vec::new(),
            seed: 1,
            time_scale: 1.0,
            fleet: None,
            hosts_dir: None,
            faults: String::new(),
            timings: Timings::default(),
            enrollment_label: DEFAULT_ENROLLMENT_LABEL.into(),
            record_bodies: false,
            call_log_capacity: 100_000,
            volume_files: None,
            object_store_dir: None,
            version: None,
        }
    }
}

pub struct Sim {
    pub config: SimConfig,
    pub spec: Spec,
    pub clock: SimClock,
    state: Mutex<Tables>,
    db: Db,
    pub faults: Mutex<Faults>,
    pub calls: Mutex<CallLog>,
    /// Wakes the engine when work was queued.
    pub wake: Notify,
    /// Passes the engine has finished: how a test sees that it looked again (and, with
    /// the clock frozen, that nothing moved) without sleeping.
    pub engine_passes: std::sync::atomic::AtomicU64,
    /// What `/_meta/version` reports now (see [`SimConfig::version`]).
    pub version: Mutex<Option<String>>,
    /// The change generation ([`Sim::changed`]): what the server's `?watch=true` streams
    /// wake on, kept here because every committed change bumps it.
    changes: watch::Sender<u64>,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("state_dir", &self.config.state_dir)
            .finish()
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // State is only changed through complete, committed steps; a panic mid-step leaves
    // the in-memory copy at worst ahead of the database, which a restart corrects.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn wall_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

impl Sim {
    /// Open the state directory (creating it), load or initialise state, merge the fleet.
    pub fn open(config: SimConfig) -> Result<Arc<Sim>, SimError> {
        let db = Db::open(&config.state_dir)?;
        let mut tables = db.load()?;
        if tables.meta.get("meta").is_none() {
            tables.meta.insert(
                "meta",
                Meta {
                    rng: SimRng::new(config.seed),
                    seq: 0,
                    sim_ms: wall_ms(),
                },
            );
        }
        let start = tables
            .meta
            .get("meta")
            .map(|m| m.sim_ms)
            .unwrap_or_else(wall_ms);
        if let Some(path) = &config.fleet {
            let fleet = fleet::load(path)?;
            for w in &fleet.workers {
                let fresh = fleet::worker_record(w, config.hosts_dir.as_deref())?;
                match tables.workers.get_mut(&w.hostname) {
                    // Keep what happened to it (labels, reboots); refresh the hardware.
                    Some(old) => {
                        old.addresses = fresh.addresses;
                        old.nics = fresh.nics;
                        old.profile = fresh.profile;
                        old.cpus = fresh.cpus;
                        old.memory = fresh.memory;
                        old.storage_nodes = fresh.storage_nodes;
                        old.devices = fresh.devices;
                    }
                    None => tables.workers.insert(w.hostname.clone(), fresh),
                }
            }
        }
        let rules = faults::parse(&config.faults)?;
        db.commit(&mut tables)?;
        let capacity = config.call_log_capacity;
        Ok(Arc::new(Sim {
            clock: SimClock::new(start, config.time_scale),
            faults: Mutex::new(Faults::new(rules, config.seed)),
            calls: Mutex::new(CallLog::new(capacity)),
            spec: Spec::load(),
            state: Mutex::new(tables),
            db,
            wake: Notify::new(),
            engine_passes: std::sync::atomic::AtomicU64::new(0),
            version: Mutex::new(config.version.clone()),
            changes: watch::channel(0).0,
            config,
        }))
    }

    /// Run `f` on the state and commit what it changed before returning, all or nothing:
    /// when `f` answers an error, or the commit fails, every change it made is undone, so
    /// memory never holds what the database does not. A failed commit turns the answer
    /// into an opaque 500, as a database error does on the real server.
    pub fn mutate<R>(
        &self,
        f: impl FnOnce(&mut St<'_>) -> Result<R, ApiError>,
    ) -> Result<R, ApiError> {
        let mut tables = lock(&self.state);
        let now = self.clock.now_ms();
        let mut st = St {
            t: &mut tables,
            now,
            sim: self,
        };
        let out = f(&mut st);
        if !tables.is_dirty() {
            return out;
        }
        let committed = match out {
            Ok(v) => {
                if let Some(m) = tables.meta.get_mut("meta") {
                    m.sim_ms = now;
                }
                match self.db.commit(&mut tables) {
                    Ok(()) => {
                        self.changed();
                        return Ok(v);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "state commit failed; the change is undone");
                        Err(ApiError::opaque(e.to_string()))
                    }
                }
            }
            Err(e) => Err(e),
        };
        if let Err(e) = self.db.rollback(&mut tables) {
            tracing::error!(error = %e, "undoing a failed change failed; memory may hold it");
        }
        committed
    }

    /// State changed (or the clock or the faults did): whoever watches looks again.
    pub fn changed(&self) {
        self.changes.send_modify(|g| *g += 1);
    }

    /// The change generation, to wait on [`Sim::changed`]; the counter keeps only the
    /// newest generation, so a slow watcher sees the latest state.
    pub fn watch_changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Read-only access.
    pub fn read<R>(&self, f: impl FnOnce(&Tables, i64) -> R) -> R {
        let tables = lock(&self.state);
        f(&tables, self.clock.now_ms())
    }

    pub fn timings(&self) -> &Timings {
        &self.config.timings
    }

    /// The enrollment label key and the value it must have (if any).
    pub fn enrollment(&self) -> (&str, Option<&str>) {
        match self.config.enrollment_label.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (self.config.enrollment_label.as_str(), None),
        }
    }
}

/// The state as a handler or the engine sees it during one step.
pub struct St<'a> {
    pub t: &'a mut Tables,
    pub now: i64,
    pub sim: &'a Sim,
}

impl St<'_> {
    fn meta(&mut self) -> &mut Meta {
        if !self.t.meta.contains("meta") {
            self.t.meta.insert(
                "meta",
                Meta {
                    rng: SimRng::new(self.sim.config.seed),
                    seq: 0,
                    sim_ms: self.now,
                },
            );
        }
        match self.t.meta.get_mut("meta") {
            Some(m) => m,
            None => unreachable!("meta was just inserted"),
        }
    }

    pub fn uuid(&mut self) -> Uuid {
        self.meta().rng.uuid()
    }

    pub fn seq(&mut self) -> u64 {
        let m = self.meta();
        m.seq += 1;
        m.seq
    }

    pub fn alnum(&mut self, n: usize) -> String {
        self.meta().rng.alnum(n)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.meta().rng.below(n)
    }

    /// Whether a worker's storage-node API answers now: it exists, carries the
    /// enrollment label, and is not rebooting.
    pub fn worker_reachable(&self, hostname: &str) -> Result<(), String> {
        let Some(w) = self.t.workers.get(hostname) else {
            return Err(format!("no worker {hostname} in the fleet"));
        };
        let (key, value) = self.sim.enrollment();
        match (w.labels.get(key), value) {
            (None, _) => {
                return Err(format!(
                    "worker {hostname} does not carry label {key}, so no storage-node pod runs there"
                ));
            }
            (Some(v), Some(want)) if v != want => {
                return Err(format!("worker {hostname} has {key}={v}, not {want}"));
            }
            _ => {}
        }
        if w.reboot_until_ms.is_some_and(|u| self.now < u) {
            return Err(format!("worker {hostname} is rebooting"));
        }
        Ok(())
    }

    /// The fleet worker a `node_address` names: the first DNS label of
    /// `<worker>.simplyblock-storage-node-api.<ns>.svc.cluster.local:5000`, or one of its IPs.
    pub fn worker_for_address(&self, address: &str) -> Option<String> {
        let host = address
            .trim_start_matches("http://")
            .trim_start_matches("https://");
        let host = host.rsplit_once(':').map(|(h, _)| h).unwrap_or(host);
        if self.t.workers.contains(host) {
            return Some(host.to_string());
        }
        if let Some(w) = self
            .t
            .workers
            .values()
            .find(|w| w.addresses.iter().any(|a| a == host))
        {
            return Some(w.hostname.clone());
        }
        let first = host.split('.').next().unwrap_or(host);
        self.t.workers.contains(first).then(|| first.to_string())
    }

    pub fn event(&mut self, cluster: Uuid, event: &str, message: String) {
        let now = self.now;
        if let Some(c) = self.t.clusters.get_mut(&cluster.to_string()) {
            c.events.push(Event {
                date: now / 1000,
                event: event.into(),
                message,
            });
            if c.events.len() > 200 {
                c.events.remove(0);
            }
        }
    }

    /// Queue background work.
    pub fn job(&mut self, kind: JobKind, delay_ms: i64) {
        let id = self.uuid();
        let seq = self.seq();
        let due_ms = self.now + delay_ms;
        self.t.jobs.insert(
            id.to_string(),
            JobRec {
                id,
                seq,
                kind,
                due_ms,
                step: 0,
            },
        );
        self.sim.wake.notify_one();
    }

    /// Queue a task.
    #[allow(clippy::too_many_arguments)]
    pub fn task(
        &mut self,
        cluster: Uuid,
        function_name: &str,
        node: Option<Uuid>,
        device: Option<Uuid>,
        params: serde_json::Map<String, serde_json::Value>,
        max_retry: i32,
    ) -> Uuid {
        let id = self.uuid();
        let seq = self.seq();
        let next_ms = self.now + self.sim.timings().task_pickup_ms;
        self.t.tasks.insert(
            id.to_string(),
            TaskRec {
                id,
                seq,
                cluster_id: cluster,
                node_id: node,
                device_id: device,
                function_name: function_name.into(),
                params,
                result: String::new(),
                status: simplyblock_controlplane::TaskStatus::New,
                canceled: false,
                max_retry,
                retry: 0,
                next_ms,
                step: 0,
                wait_since_ms: 0,
            },
        );
        self.sim.wake.notify_one();
        id
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::fleet::FleetWorker;

    fn worker(name: &str) -> WorkerRec {
        let w = FleetWorker {
            hostname: name.into(),
            addresses: vec!["10.0.0.1".into()],
            profile: None,
            cpus: None,
            memory_gib: None,
            storage_nodes: None,
            labels: BTreeMap::new(),
            devices: None,
        };
        fleet::worker_record(&w, None).expect("worker")
    }

    fn names(sim: &Sim) -> Vec<String> {
        sim.read(|t, _| t.workers.keys().cloned().collect())
    }

    /// Regression: a handler that changed records and then answered an error left the
    /// changes in memory, and the next successful change committed them.
    #[test]
    fn a_failed_mutation_changes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sim = Sim::open(SimConfig::new(dir.path())).expect("open");
        sim.mutate(|st| {
            st.t.workers.insert("kept", worker("kept"));
            Ok(())
        })
        .expect("first change");
        let err = sim
            .mutate(|st| -> Result<(), ApiError> {
                st.t.workers.insert("added", worker("added"));
                if let Some(w) = st.t.workers.get_mut("kept") {
                    w.labels.insert("half".into(), "done".into());
                }
                Err(ApiError::opaque("refused halfway"))
            })
            .expect_err("the handler failed");
        assert!(format!("{err:?}").contains("refused halfway"), "{err:?}");
        assert_eq!(names(&sim), ["kept"]);
        let labelled = sim.read(|t, _| t.workers.get("kept").map(|w| w.labels.clone()));
        assert_eq!(labelled, Some(BTreeMap::new()));
        sim.mutate(|st| {
            st.t.workers.insert("later", worker("later"));
            Ok(())
        })
        .expect("a later change");
        drop(sim);
        let sim = Sim::open(SimConfig::new(dir.path())).expect("reopen");
        assert_eq!(names(&sim), ["kept", "later"]);
        let labelled = sim.read(|t, _| t.workers.get("kept").map(|w| w.labels.clone()));
        assert_eq!(labelled, Some(BTreeMap::new()));
    }
}

//! The streaming informer: a cache of control-plane objects fed by the `?watch=true`
//! event streams, one stream per scope, opened while someone subscribes to the scope.
//!
//! - A scope's first `snapshot` (and the one after every reconnect) replaces its cache;
//!   ids it leaves out are deletions. `created`/`updated` put one object, `deleted` takes
//!   one out. A `deleted` without an `id` (the server's `{}` for an object removed
//!   outright) names nothing to apply, so the scope resynchronises at once instead.
//! - The cache of a scope is read only once synced; until then, and while a stream is
//!   reconnecting, [`Informer::get`] and [`Informer::list`] answer `None` and a caller
//!   asks the REST route ([`Informer::node`] and friends do that for it, and for an
//!   object the cache lacks: only the REST route says that it is gone).
//! - A stream that ends (EOF, an `error` event, a non-200 answer other than 404, or no
//!   frame nor ping for [`InformerConfig::idle_timeout`]) is reopened after a backoff
//!   from [`InformerConfig::min_backoff`] doubling to [`InformerConfig::max_backoff`],
//!   with jitter; a 404 means the scope's object is gone, and the scope closes.
//! - Subscribers learn which ids changed, coalesced: whatever happened between two reads
//!   of [`Subscription::changed`] is one answer.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::routes;
use crate::sse::Frame;
use crate::types::{Cluster, Device, Pool, StorageNode, Task, Volume};

/// One stream's worth of objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    Clusters,
    Nodes { cluster: Uuid },
    Pools { cluster: Uuid },
    Tasks { cluster: Uuid },
    Devices { cluster: Uuid, node: Uuid },
    Volumes { cluster: Uuid, pool: Uuid },
}

impl Scope {
    /// The list route the scope streams, relative to `/api/v2`.
    pub fn path(&self) -> String {
        match *self {
            Scope::Clusters => routes::CLUSTERS.into(),
            Scope::Nodes { cluster } => routes::storage_nodes(cluster),
            Scope::Pools { cluster } => routes::pools(cluster),
            Scope::Tasks { cluster } => routes::tasks(cluster),
            Scope::Devices { cluster, node } => routes::devices(cluster, node),
            Scope::Volumes { cluster, pool } => routes::volumes(cluster, pool),
        }
    }

    /// The object the scope lives under, as the scope that lists it and its id: when it
    /// is deleted, this scope closes.
    pub fn owner(&self) -> Option<(Scope, Uuid)> {
        match *self {
            Scope::Clusters => None,
            Scope::Nodes { cluster } | Scope::Pools { cluster } | Scope::Tasks { cluster } => {
                Some((Scope::Clusters, cluster))
            }
            Scope::Devices { cluster, node } => Some((Scope::Nodes { cluster }, node)),
            Scope::Volumes { cluster, pool } => Some((Scope::Pools { cluster }, pool)),
        }
    }
}

/// Reconnect timing.
#[derive(Debug, Clone)]
pub struct InformerConfig {
    pub min_backoff: Duration,
    pub max_backoff: Duration,
    /// A stream silent this long (no frame, no ping) is taken for dead.
    pub idle_timeout: Duration,
}

impl Default for InformerConfig {
    /// 3 s to 30 s; 45 s of silence (the server pings every 15 s).
    fn default() -> Self {
        Self {
            min_backoff: Duration::from_secs(3),
            max_backoff: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(45),
        }
    }
}

/// What changed in a scope since the subscriber last asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Objects created, updated or deleted (a snapshot contributes every id it changed).
    pub ids: BTreeSet<Uuid>,
    /// The scope became readable (its first snapshot, or the first after a reconnect).
    pub synced: bool,
}

#[derive(Default)]
struct Pending {
    changes: Changes,
    gone: bool,
}

#[derive(Default)]
struct Waiter {
    pending: Mutex<Pending>,
    notify: Notify,
}

impl Waiter {
    fn tell(&self, f: impl FnOnce(&mut Pending)) {
        f(&mut lock(&self.pending));
        self.notify.notify_one();
    }
}

#[derive(Default)]
struct ScopeState {
    synced: bool,
    gone: bool,
    items: BTreeMap<Uuid, Value>,
    /// The ids in the list route's order (a snapshot's, then creations appended).
    order: Vec<Uuid>,
    waiters: Vec<Weak<Waiter>>,
    task: Option<tokio::task::AbortHandle>,
}

impl ScopeState {
    fn tell(&mut self, f: impl Fn(&mut Pending)) {
        self.waiters.retain(|w| match w.upgrade() {
            Some(w) => {
                w.tell(&f);
                true
            }
            None => false,
        });
    }
}

struct Inner {
    client: Mutex<Client>,
    config: InformerConfig,
    scopes: Mutex<HashMap<Scope, ScopeState>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update leaves the maps whole; a panic elsewhere does not make them wrong.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The informer. Cheap to clone; every clone shares the streams and the cache.
#[derive(Clone)]
pub struct Informer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Informer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer")
            .field("scopes", &lock(&self.inner.scopes).len())
            .finish()
    }
}

impl Informer {
    pub fn new(client: Client, config: InformerConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                client: Mutex::new(client),
                config,
                scopes: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The client the informer streams with and falls back to.
    pub fn client(&self) -> Client {
        lock(&self.inner.client).clone()
    }

    /// Connect with `client` from now on (a new endpoint or token); open streams keep
    /// theirs until they end.
    pub fn set_client(&self, client: Client) {
        *lock(&self.inner.client) = client;
    }

    /// Follow `scope`, opening its stream if nobody follows it yet. Must be called inside
    /// a Tokio runtime. The stream closes when the last subscription is dropped.
    pub fn subscribe(&self, scope: Scope) -> Subscription {
        let waiter = Arc::new(Waiter::default());
        let mut scopes = lock(&self.inner.scopes);
        let state = scopes.entry(scope).or_default();
        state.waiters.push(Arc::downgrade(&waiter));
        if state.gone {
            waiter.tell(|p| p.gone = true);
        } else if state.synced {
            // A late subscriber starts from what is known.
            let ids: BTreeSet<Uuid> = state.items.keys().copied().collect();
            waiter.tell(|p| {
                p.changes.ids.extend(ids.iter().copied());
                p.changes.synced = true;
            });
        }
        if state.task.is_none() && !state.gone {
            let weak = Arc::downgrade(&self.inner);
            state.task = Some(tokio::spawn(run(weak, scope)).abort_handle());
        }
        Subscription {
            informer: self.clone(),
            scope,
            waiter,
        }
    }

    fn release(&self, scope: Scope, leaving: &Arc<Waiter>) {
        let leaving = Arc::downgrade(leaving);
        let mut scopes = lock(&self.inner.scopes);
        let Some(state) = scopes.get_mut(&scope) else {
            return;
        };
        state
            .waiters
            .retain(|w| w.strong_count() > 0 && !w.ptr_eq(&leaving));
        if state.waiters.is_empty() {
            if let Some(task) = state.task.take() {
                task.abort();
            }
            scopes.remove(&scope);
        }
    }

    /// Whether `scope` is synced, so its cache may be read.
    pub fn is_synced(&self, scope: Scope) -> bool {
        lock(&self.inner.scopes)
            .get(&scope)
            .is_some_and(|s| s.synced)
    }

    /// Whether `scope` closed because its object is gone.
    pub fn is_gone(&self, scope: Scope) -> bool {
        lock(&self.inner.scopes).get(&scope).is_some_and(|s| s.gone)
    }

    /// The scopes with a stream running now (or reconnecting).
    pub fn streaming(&self) -> Vec<Scope> {
        let mut v: Vec<Scope> = lock(&self.inner.scopes)
            .iter()
            .filter(|(_, s)| s.task.is_some())
            .map(|(k, _)| *k)
            .collect();
        v.sort();
        v
    }

    /// One object from a synced scope's cache: `None` when the scope is not synced (ask
    /// the REST route), `Some(None)` when the synced scope does not hold it.
    pub fn get<T: DeserializeOwned>(&self, scope: Scope, id: Uuid) -> Option<Option<T>> {
        let scopes = lock(&self.inner.scopes);
        let state = scopes.get(&scope).filter(|s| s.synced)?;
        match state.items.get(&id) {
            None => Some(None),
            Some(v) => serde_json::from_value(v.clone()).ok().map(Some),
        }
    }

    /// Every object of a synced scope in the list route's order (those created since the
    /// snapshot last); `None` when not synced.
    pub fn list<T: DeserializeOwned>(&self, scope: Scope) -> Option<Vec<T>> {
        let scopes = lock(&self.inner.scopes);
        let state = scopes.get(&scope).filter(|s| s.synced)?;
        state
            .order
            .iter()
            .filter_map(|id| state.items.get(id))
            .map(|v| serde_json::from_value(v.clone()).ok())
            .collect()
    }

    async fn cached_or<T: DeserializeOwned>(
        &self,
        scope: Scope,
        id: Uuid,
        get: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        // An object the cache lacks may be one its stream has not delivered yet: only the
        // REST route says it is gone.
        match self.get(scope, id) {
            Some(Some(v)) => Ok(v),
            _ => get.await,
        }
    }

    /// A cluster from the cache of a followed, synced [`Scope::Clusters`], else (not
    /// synced, or not in it) by GET.
    /// Stream objects carry no statistics: read capacity with a GET.
    pub async fn cluster(&self, cluster: Uuid) -> Result<Cluster> {
        let c = self.client();
        self.cached_or(Scope::Clusters, cluster, c.get_cluster(cluster))
            .await
    }

    /// A storage node from the cache (see [`Informer::cluster`]), else by GET.
    pub async fn node(&self, cluster: Uuid, node: Uuid) -> Result<StorageNode> {
        let c = self.client();
        self.cached_or(
            Scope::Nodes { cluster },
            node,
            c.get_storage_node(cluster, node),
        )
        .await
    }

    /// A pool from the cache (see [`Informer::cluster`]), else by GET.
    pub async fn pool(&self, cluster: Uuid, pool: Uuid) -> Result<Pool> {
        let c = self.client();
        self.cached_or(Scope::Pools { cluster }, pool, c.get_pool(cluster, pool))
            .await
    }

    /// A task from the cache (see [`Informer::cluster`]), else by GET.
    pub async fn task(&self, cluster: Uuid, task: Uuid) -> Result<Task> {
        let c = self.client();
        self.cached_or(Scope::Tasks { cluster }, task, c.get_task(cluster, task))
            .await
    }

    /// A cluster's tasks from the cache (in the list route's order), else by GET.
    pub async fn tasks(&self, cluster: Uuid) -> Result<Vec<Task>> {
        match self.list(Scope::Tasks { cluster }) {
            Some(v) => Ok(v),
            None => self.client().list_tasks(cluster).await,
        }
    }

    /// A node's devices from the cache, else by GET.
    pub async fn devices(&self, cluster: Uuid, node: Uuid) -> Result<Vec<Device>> {
        match self.list(Scope::Devices { cluster, node }) {
            Some(v) => Ok(v),
            None => self.client().list_devices(cluster, node).await,
        }
    }

    /// A pool's volumes from the cache, else by GET.
    pub async fn volumes(&self, cluster: Uuid, pool: Uuid) -> Result<Vec<Volume>> {
        match self.list(Scope::Volumes { cluster, pool }) {
            Some(v) => Ok(v),
            None => self.client().list_volumes(cluster, pool).await,
        }
    }

    fn with_scope<R>(&self, scope: Scope, f: impl FnOnce(&mut ScopeState) -> R) -> Option<R> {
        lock(&self.inner.scopes).get_mut(&scope).map(f)
    }
}

/// A subscriber's hold on a scope; dropping the last one closes the scope's stream.
pub struct Subscription {
    informer: Informer,
    scope: Scope,
    waiter: Arc<Waiter>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("scope", &self.scope)
            .finish()
    }
}

impl Subscription {
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// Wait for the next changes of the scope, everything since the last call in one
    /// answer; `None` once the scope's object is gone (then it stays `None`).
    pub async fn changed(&mut self) -> Option<Changes> {
        loop {
            {
                let mut p = lock(&self.waiter.pending);
                if p.gone {
                    return None;
                }
                if !p.changes.ids.is_empty() || p.changes.synced {
                    return Some(std::mem::take(&mut p.changes));
                }
            }
            self.waiter.notify.notified().await;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.informer.release(self.scope, &self.waiter);
    }
}

/// How one connection ended.
enum End {
    /// Reconnect after the backoff.
    Retry(String),
    /// A deletion the cache cannot apply: reconnect at once for a fresh snapshot.
    Resync,
    /// The scope's object is gone.
    Gone,
}

async fn run(weak: Weak<Inner>, scope: Scope) {
    let mut backoff: Option<Duration> = None;
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let informer = Informer { inner };
        let (end, synced) = connect_once(&informer, scope).await;
        informer.with_scope(scope, |s| s.synced = false);
        let config = informer.inner.config.clone();
        match end {
            End::Gone => {
                close(&informer, scope);
                return;
            }
            End::Resync if synced => {
                backoff = None;
                continue;
            }
            End::Resync => tracing::debug!(scope = %scope.path(), "resync requested"),
            End::Retry(why) => {
                tracing::info!(scope = %scope.path(), reason = %why, "event stream ended; reconnecting")
            }
        }
        drop(informer);
        let next = match backoff {
            _ if synced => config.min_backoff,
            None => config.min_backoff,
            Some(b) => (b * 2).min(config.max_backoff),
        };
        backoff = Some(next);
        tokio::time::sleep(jittered(next, config.max_backoff)).await;
    }
}

/// `d` plus up to a quarter more, at most `max`.
fn jittered(d: Duration, max: Duration) -> Duration {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.subsec_nanos())
        .unwrap_or(0);
    let extra = d.mul_f64(f64::from(seed % 1000) / 4000.0);
    (d + extra).min(max.max(d))
}

/// One connection: open, read until it ends. Answers how it ended and whether it synced.
async fn connect_once(informer: &Informer, scope: Scope) -> (End, bool) {
    let path = scope.path();
    let mut stream = match informer.client().watch(&path).await {
        Ok(s) => s,
        Err(Error::NotFound { .. }) => return (End::Gone, false),
        Err(e) => return (End::Retry(e.to_string()), false),
    };
    let idle = informer.inner.config.idle_timeout;
    let mut synced = false;
    loop {
        let frame = match tokio::time::timeout(idle, stream.next()).await {
            Err(_) => {
                return (
                    End::Retry(format!("nothing received for {}s", idle.as_secs())),
                    synced,
                );
            }
            Ok(Err(e)) => return (End::Retry(e.to_string()), synced),
            Ok(Ok(None)) => return (End::Retry("the server closed the stream".into()), synced),
            Ok(Ok(Some(f))) => f,
        };
        match apply(informer, scope, frame, &mut synced) {
            Ok(()) => {}
            Err(end) => return (end, synced),
        }
    }
}

fn id_of(v: &Value) -> Option<Uuid> {
    v.get("id")
        .and_then(Value::as_str)
        .and_then(|s| Uuid::parse_str(s).ok())
}

fn apply(
    informer: &Informer,
    scope: Scope,
    frame: Frame,
    synced: &mut bool,
) -> std::result::Result<(), End> {
    let Frame::Event { event, data } = frame else {
        return Ok(());
    };
    if event == "error" {
        return Err(End::Retry(format!("the server reported an error: {data}")));
    }
    let Ok(value) = serde_json::from_str::<Value>(&data) else {
        return Err(End::Retry(format!("a {event} event carried no JSON")));
    };
    let mut deleted = None;
    let applied = informer.with_scope(scope, |s| match event.as_str() {
        "snapshot" => {
            let Value::Array(items) = value else {
                return Err(End::Retry("the snapshot was not a list".into()));
            };
            let fresh: Vec<(Uuid, Value)> = items
                .into_iter()
                .filter_map(|v| Some((id_of(&v)?, v)))
                .collect();
            let order: Vec<Uuid> = fresh.iter().map(|(id, _)| *id).collect();
            let fresh: BTreeMap<Uuid, Value> = fresh.into_iter().collect();
            let mut ids: BTreeSet<Uuid> = s
                .items
                .keys()
                .filter(|id| !fresh.contains_key(id))
                .copied()
                .collect();
            ids.extend(
                fresh
                    .iter()
                    .filter(|(id, v)| s.items.get(id) != Some(v))
                    .map(|(id, _)| *id),
            );
            s.items = fresh;
            s.order = order;
            s.synced = true;
            *synced = true;
            s.tell(|p| {
                p.changes.ids.extend(ids.iter().copied());
                p.changes.synced = true;
            });
            Ok(())
        }
        _ if !*synced => Err(End::Retry(format!(
            "a {event} event came before the snapshot"
        ))),
        "created" | "updated" => {
            let Some(id) = id_of(&value) else {
                return Ok(());
            };
            if s.items.get(&id) != Some(&value) {
                if s.items.insert(id, value).is_none() {
                    s.order.push(id);
                }
                s.tell(|p| {
                    p.changes.ids.insert(id);
                });
            }
            Ok(())
        }
        "deleted" => match id_of(&value) {
            Some(id) => {
                if s.items.remove(&id).is_some() {
                    s.order.retain(|x| *x != id);
                    s.tell(|p| {
                        p.changes.ids.insert(id);
                    });
                }
                deleted = Some(id);
                Ok(())
            }
            None => Err(End::Resync),
        },
        _ => Ok(()),
    });
    match applied {
        // Nobody follows the scope any more; the task is being stopped.
        None => Err(End::Retry("the scope is no longer followed".into())),
        Some(Err(end)) => Err(end),
        Some(Ok(())) => {
            if let Some(id) = deleted {
                close_under(informer, scope, id);
            }
            Ok(())
        }
    }
}

/// The scopes living under object `id` of `scope` close: their object is gone.
fn close_under(informer: &Informer, scope: Scope, id: Uuid) {
    let under: Vec<Scope> = lock(&informer.inner.scopes)
        .keys()
        .filter(|s| s.owner() == Some((scope, id)))
        .copied()
        .collect();
    for s in under {
        close(informer, s);
    }
}

/// Close `scope` for good: its object is gone. Subscribers hear `None`.
fn close(informer: &Informer, scope: Scope) {
    let ids: Vec<Uuid> = informer
        .with_scope(scope, |s| {
            if let Some(task) = s.task.take() {
                task.abort();
            }
            s.gone = true;
            s.synced = false;
            s.tell(|p| p.gone = true);
            s.order.clear();
            std::mem::take(&mut s.items).into_keys().collect()
        })
        .unwrap_or_default();
    for id in ids {
        close_under(informer, scope, id);
    }
}

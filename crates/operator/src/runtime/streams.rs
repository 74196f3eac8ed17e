//! The control plane's event streams in the operator: one [`Informer`] for every
//! controller, each scope followed from the first pass that needs it, and the triggers
//! that wake a controller when a stream reports a change of one of its objects.
//!
//! Controllers read what they observe through the informer ([`Informer::node`] and its
//! kin): the synced cache, or a plain GET before the scope is synced. They keep their
//! resync backstop; the streams only wake them sooner.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::Stream;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use simplyblock_controlplane::{Client, Device, Informer, InformerConfig, Scope, Uuid};

/// The control-plane id a Kubernetes object's status records (`status.uuid`).
pub fn status_uuid(uuid: Option<&str>) -> Option<Uuid> {
    uuid?.parse().ok()
}
use tokio::sync::broadcast;

/// Changes delivered by one scope's stream, coalesced.
#[derive(Clone, Debug)]
pub struct Change {
    /// `None`: changes were missed (a slow controller); anything may have changed.
    pub scope: Option<Scope>,
    pub ids: Arc<BTreeSet<Uuid>>,
}

impl Change {
    /// Whether this change may concern the object with control-plane id `id`.
    pub fn touches(&self, id: Uuid) -> bool {
        self.scope.is_none() || self.ids.contains(&id)
    }

    /// Whether this change may concern a storage node or a task of any cluster.
    pub fn nodes_or_tasks(&self) -> bool {
        matches!(
            self.scope,
            None | Some(Scope::Nodes { .. } | Scope::Tasks { .. })
        )
    }

    /// Whether this change may concern node `node` or its devices.
    pub fn node_or_devices(&self, node: Uuid) -> bool {
        match self.scope {
            None => true,
            Some(Scope::Devices { node: n, .. }) => n == node,
            Some(_) => self.ids.contains(&node),
        }
    }

    /// Whether this change may concern the tasks of cluster `cluster`.
    pub fn tasks_of(&self, cluster: Uuid) -> bool {
        match self.scope {
            None => true,
            Some(scope) => scope == Scope::Tasks { cluster },
        }
    }
}

/// How often a node's device statistics (used bytes) are read by GET while its device
/// stream is synced: stream objects carry none.
pub const DEVICE_STATISTICS_EVERY: std::time::Duration = std::time::Duration::from_secs(300);

/// The operator's informer and the scopes it follows.
pub struct Streams {
    /// Each node's devices as last read by GET, for their statistics, and when.
    device_statistics: Mutex<HashMap<Scope, (std::time::Instant, Vec<Device>)>>,
    informer: Mutex<Option<Informer>>,
    /// The scopes followed, each with the task that forwards its changes (and holds its
    /// subscription: aborting it closes the stream).
    followed: Arc<Mutex<HashMap<Scope, tokio::task::AbortHandle>>>,
    changes: broadcast::Sender<Change>,
    config: InformerConfig,
    /// `false`: no stream is opened, every read is a GET and nothing wakes a controller
    /// but its requeues (how the operator ran before streaming; the benchmark's baseline).
    streaming: bool,
}

impl Default for Streams {
    fn default() -> Self {
        Streams::new(InformerConfig::default())
    }
}

impl std::fmt::Debug for Streams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streams")
            .field("followed", &lock(&self.followed).len())
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Streams {
    pub fn new(config: InformerConfig) -> Streams {
        Streams {
            device_statistics: Mutex::new(HashMap::new()),
            informer: Mutex::new(None),
            followed: Arc::new(Mutex::new(HashMap::new())),
            changes: broadcast::channel(1024).0,
            config,
            streaming: true,
        }
    }

    /// Streams that open nothing: controllers poll by GET on their requeues.
    pub fn polling() -> Streams {
        Streams {
            streaming: false,
            ..Streams::default()
        }
    }

    /// The informer, connecting with `client` (the control plane's client now, so a moved
    /// endpoint or a new token is used from the next connect on).
    pub fn informer(&self, client: Client) -> Informer {
        let mut slot = lock(&self.informer);
        match &*slot {
            Some(informer) => {
                informer.set_client(client);
                informer.clone()
            }
            None => {
                let informer = Informer::new(client, self.config.clone());
                *slot = Some(informer.clone());
                informer
            }
        }
    }

    /// The informer with `scope` followed: its stream opens on the first call, and its
    /// changes reach [`Streams::changes`] until the scope's object is gone.
    pub fn follow(&self, client: Client, scope: Scope) -> Informer {
        let informer = self.informer(client);
        if !self.streaming {
            return informer;
        }
        let mut followed = lock(&self.followed);
        if !followed.contains_key(&scope) {
            let mut subscription = informer.subscribe(scope);
            let changes = self.changes.clone();
            let forgotten = self.followed.clone();
            let task = tokio::spawn(async move {
                while let Some(c) = subscription.changed().await {
                    let _ = changes.send(Change {
                        scope: Some(scope),
                        ids: Arc::new(c.ids),
                    });
                }
                lock(&forgotten).remove(&scope);
            });
            followed.insert(scope, task.abort_handle());
        }
        informer
    }

    /// Stop following the scopes `which` picks: their streams close (a node removed from
    /// the control plane but still listed keeps its device scope until then).
    pub fn unfollow(&self, which: impl Fn(&Scope) -> bool) {
        lock(&self.device_statistics).retain(|scope, _| !which(scope));
        lock(&self.followed).retain(|scope, task| {
            let keep = !which(scope);
            if !keep {
                task.abort();
            }
            keep
        });
    }

    /// A node's devices, with its device scope followed (its stream opened on the first
    /// call): from the stream's cache once synced, with the statistics of the last GET,
    /// which is repeated every [`DEVICE_STATISTICS_EVERY`]; by GET before.
    pub async fn devices(
        &self,
        client: Client,
        cluster: Uuid,
        node: Uuid,
    ) -> simplyblock_controlplane::Result<Vec<Device>> {
        let scope = Scope::Devices { cluster, node };
        let informer = self.follow(client, scope);
        let recent = lock(&self.device_statistics)
            .get(&scope)
            .filter(|(at, _)| at.elapsed() < DEVICE_STATISTICS_EVERY)
            .map(|(_, read)| read.clone());
        if let (Some(mut cached), Some(read)) = (informer.list::<Device>(scope), recent) {
            for d in &mut cached {
                if let Some(r) = read.iter().find(|r| r.id == d.id) {
                    d.capacity = r.capacity.clone();
                }
            }
            return Ok(cached);
        }
        let read = informer.client().list_devices(cluster, node).await?;
        lock(&self.device_statistics).insert(scope, (std::time::Instant::now(), read.clone()));
        Ok(read)
    }

    /// Every change from now on.
    pub fn changes(&self) -> impl Stream<Item = Change> + Send + 'static {
        let receiver = self.changes.subscribe();
        futures::stream::unfold(receiver, |mut receiver| async move {
            let change = match receiver.recv().await {
                Ok(change) => change,
                Err(broadcast::error::RecvError::Lagged(_)) => Change {
                    scope: None,
                    ids: Arc::default(),
                },
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            Some((change, receiver))
        })
    }

    /// What wakes a controller: for each change, the objects of `store` that `wakes`
    /// picks for it.
    pub fn triggers<K>(
        &self,
        store: Store<K>,
        wakes: impl Fn(&K, &Change) -> bool + Send + Sync + 'static,
    ) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
    where
        K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        use futures::StreamExt;
        self.changes().flat_map(move |change| {
            let woken: Vec<ObjectRef<K>> = store
                .state()
                .iter()
                .filter(|o| wakes(o, &change))
                .map(|o| ObjectRef::from_obj(&**o))
                .collect();
            futures::stream::iter(woken)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missed_change_touches_everything() {
        let id = Uuid::from_u128(7);
        let all = Change {
            scope: None,
            ids: Arc::default(),
        };
        assert!(all.touches(id));
        let some = Change {
            scope: Some(Scope::Clusters),
            ids: Arc::new([Uuid::from_u128(8)].into_iter().collect()),
        };
        assert!(!some.touches(id));
        assert!(some.touches(Uuid::from_u128(8)));
        assert!(!some.tasks_of(id));
        let tasks = Change {
            scope: Some(Scope::Tasks { cluster: id }),
            ids: Arc::default(),
        };
        assert!(tasks.tasks_of(id));
        assert!(!tasks.tasks_of(Uuid::from_u128(8)));
    }
}

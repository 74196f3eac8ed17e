//! What every controller is built from, so that a controller's module is only its watches
//! and its machine:
//!
//! - [`run`]: runs a `kube` controller in the operator's [`Scope`], counts each pass and
//!   its duration, stops on the operator's shutdown after finishing the passes in flight;
//! - [`Error`], the one error a reconcile returns, and [`error_policy`], which records its
//!   [`Error::kind`] and picks the retry;
//! - [`finalized`]: the finalizer around apply and cleanup, where a cleanup that holds the
//!   deletion ([`Error::Held`]) is a wait, not a failure;
//! - [`apply_status`]: writes a controller's typed status with server-side apply under its
//!   field manager, optionally conditional on the resourceVersion it decided from.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Error as FinalizerError, Event, finalizer};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::Instrument;

pub use super::error::{Error, unless_stale};
pub use crate::runtime::context::Scope;
use crate::runtime::context::{Context, requeue};

/// How the API of a kind of scope `Self` is reached.
pub trait Scoped {
    /// The API of `K`, in `namespace` when `K` is namespaced.
    fn api<K: Resource<DynamicType = (), Scope = Self>>(
        client: &kube::Client,
        namespace: Option<String>,
    ) -> Api<K>;
}

impl Scoped for NamespaceResourceScope {
    fn api<K: Resource<DynamicType = (), Scope = Self>>(
        client: &kube::Client,
        namespace: Option<String>,
    ) -> Api<K> {
        Api::namespaced(client.clone(), &namespace.unwrap_or_default())
    }
}

impl Scoped for ClusterResourceScope {
    fn api<K: Resource<DynamicType = (), Scope = Self>>(
        client: &kube::Client,
        _: Option<String>,
    ) -> Api<K> {
        Api::all(client.clone())
    }
}

/// The API of `K` in `object`'s namespace (cluster-wide for a cluster-scoped `K`).
pub fn api_of<K, O>(client: &kube::Client, object: &O) -> Api<K>
where
    K: Resource<DynamicType = ()>,
    K::Scope: Scoped,
    O: Resource,
{
    <K::Scope as Scoped>::api::<K>(client, object.namespace())
}

/// Runs `controller` with `reconcile` until the operator shuts down, under the name
/// `name` (the `controller` label of its metrics and the key of its pass count). A
/// shutdown stops new passes and waits for those in flight.
pub async fn run<K, F, Fut>(
    name: &'static str,
    controller: Controller<K>,
    reconcile: F,
    ctx: Arc<Context>,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    let reconcile = Arc::new(reconcile);
    let measured = move |object: Arc<K>, ctx: Arc<Context>| {
        let reconcile = reconcile.clone();
        async move {
            let began = Instant::now();
            let namespace = object.namespace().unwrap_or_default();
            let object_name = object.name_any();
            // Every line the pass logs carries what it is about.
            let span = tracing::info_span!(
                "reconcile",
                controller = name,
                kind = %K::kind(&()),
                object = %object_path(&namespace, &object_name),
            );
            let result = reconcile(object, ctx.clone()).instrument(span).await;
            let m = &ctx.metrics;
            m.observe(
                "simplyblock_reconcile_duration_seconds",
                vec![("controller", name.to_owned())],
                began.elapsed().as_secs_f64(),
            );
            let outcome = if result.is_ok() { "success" } else { "error" };
            m.count(
                "simplyblock_reconcile_total",
                vec![
                    ("controller", name.to_owned()),
                    ("result", outcome.to_owned()),
                ],
            );
            m.pass_ended(name, &namespace, &object_name);
            result
        }
    };
    let policy = move |object: Arc<K>, error: &Error, ctx: Arc<Context>| {
        error_policy(name, &*object, error, &ctx)
    };
    let shutdown = ctx.shutdown.clone();
    let stopping = ctx.shutdown.clone();
    // A graceful shutdown lets the passes in flight finish, but kube holds the passes until
    // the cache has synced and stops feeding the cache once shutdown begins: a controller
    // stopped before its first sync would wait forever. Nothing has run before that sync,
    // so such a controller stops at once.
    let synced = Arc::new(AtomicBool::new(false));
    let store = controller.store();
    let marked = synced.clone();
    let mark_synced = async move {
        if store.wait_until_ready().await.is_ok() {
            marked.store(true, Ordering::SeqCst);
        }
        std::future::pending::<()>().await
    };
    let unsynced_stop = async move {
        stopping.wait().await;
        if synced.load(Ordering::SeqCst) {
            std::future::pending::<()>().await
        }
    };
    // A pass held for the control plane goes again as soon as it serves.
    let serving = ctx.link.changes();
    let running = controller
        .reconcile_all_on(serving)
        .graceful_shutdown_on(async move { shutdown.wait().await })
        .run(measured, policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(controller = name, error = %e, "reconcile");
            }
        });
    tokio::select! {
        () = running => {}
        () = mark_synced => {}
        () = unsynced_stop => {
            tracing::debug!(controller = name, "stopped before its cache synced");
        }
    }
}

/// `namespace/name`, or `name` for an object without a namespace: the `object` field of a
/// pass's log lines.
pub fn object_path(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_owned()
    } else {
        format!("{namespace}/{name}")
    }
}

/// Records the error's kind and picks the retry: a stale read is decided again at once,
/// anything else after [`requeue::RETRY`].
pub fn error_policy<K: Resource>(
    controller: &'static str,
    object: &K,
    error: &Error,
    ctx: &Context,
) -> Action {
    ctx.metrics.count(
        "simplyblock_reconcile_errors_total",
        vec![
            ("controller", controller.to_owned()),
            ("kind", error.kind().to_owned()),
        ],
    );
    if error.is_stale() {
        tracing::debug!(controller, object = %object.name_any(), "read a stale version; deciding again");
        return Action::requeue(requeue::NEXT_STEP);
    }
    if let Error::Held(why) = error.inner() {
        tracing::debug!(controller, object = %object.name_any(), why, "held; looking again later");
        return Action::requeue(requeue::RETRY);
    }
    tracing::warn!(controller, object = %object.name_any(), error = %error, "reconcile failed; retrying");
    Action::requeue(requeue::RETRY)
}

/// `apply` while `object` lives, `cleanup` once it is deleted, behind `finalizer`. A
/// cleanup that returns [`Error::Held`] keeps the finalizer and looks again after
/// [`requeue::RETRY`]: a wait whose reason is already in status, not an error.
pub async fn finalized<K, A, AF, C, CF>(
    client: &kube::Client,
    name: &str,
    object: Arc<K>,
    apply: A,
    cleanup: C,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + Debug
        + Send
        + Sync
        + 'static,
    A: FnOnce(Arc<K>) -> AF,
    AF: Future<Output = Result<Action, Error>> + Send,
    C: FnOnce(Arc<K>) -> CF,
    CF: Future<Output = Result<Action, Error>> + Send,
{
    let api: Api<K> = api_of(client, object.as_ref());
    let result = finalizer(&api, name, object, |event| async move {
        match event {
            Event::Apply(o) => apply(o).await,
            Event::Cleanup(o) => cleanup(o).await,
        }
    })
    .await;
    match result {
        Ok(action) => Ok(action),
        Err(FinalizerError::CleanupFailed(Error::Held(why))) => {
            tracing::debug!(why, "deletion held");
            Ok(Action::requeue(requeue::RETRY))
        }
        Err(e) => Err(Error::Finalizer(Box::new(e))),
    }
}

/// Removes the finalizer `name` from `object` as it was read: the resourceVersion makes
/// this a compare-and-swap on the finalizer list (a 409 is [`Error::Stale`]). Gone, or
/// without that finalizer, is success.
pub async fn remove_finalizer<K>(client: &kube::Client, object: &K, name: &str) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    K::Scope: Scoped,
{
    if !object.finalizers().iter().any(|f| f == name) {
        return Ok(());
    }
    let kept: Vec<&String> = object.finalizers().iter().filter(|f| *f != name).collect();
    let patch = json!({"metadata": {
        "resourceVersion": object.resource_version(),
        "finalizers": kept,
    }});
    match api_of::<K, K>(client, object)
        .patch(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Err(Error::Stale(format!(
            "{} {}",
            K::kind(&()),
            object.name_any()
        ))),
        Err(e) => Err(e.into()),
    }
}

/// Whether a status write may overwrite a newer version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// Only onto the resourceVersion read: a 409 is [`Error::Stale`].
    ResourceVersion,
    /// Whatever is stored now (the fields are this controller's alone).
    None,
}

/// Writes `status` (the fields `manager` owns, all of them: a field it owned and leaves
/// out is removed) onto `object` with server-side apply. Returns the object as stored.
pub async fn apply_status<K, S>(
    client: &kube::Client,
    object: &K,
    manager: &str,
    status: &S,
    guard: Guard,
) -> Result<K, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    K::Scope: Scoped,
    S: Serialize,
{
    let mut metadata = json!({"name": object.name_any()});
    if guard == Guard::ResourceVersion {
        metadata["resourceVersion"] = json!(object.resource_version());
    }
    let body = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": metadata,
        "status": status,
    });
    let api: Api<K> = api_of(client, object);
    match api
        .patch_status(
            &object.name_any(),
            &PatchParams::apply(manager).force(),
            &Patch::Apply(body),
        )
        .await
    {
        Ok(written) => Ok(written),
        Err(kube::Error::Api(s)) if s.code == 409 && guard == Guard::ResourceVersion => Err(
            Error::Stale(format!("{} {}", K::kind(&()), object.name_any())),
        ),
        Err(e) => Err(e.into()),
    }
}

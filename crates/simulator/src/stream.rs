//! `?watch=true`: the control plane's server-sent event streams on the list and detail
//! routes of clusters, storage nodes, devices, tasks, pools, volumes and snapshots, and
//! (as the operator's design expects, ahead of the control plane) on the lists of backups
//! and backup policies.
//!
//! A stream renders its scope with the same handler the REST GET uses, so its set
//! membership and order are the list's. Every committed change bumps the sim's generation
//! counter ([`Sim::changed`]); each stream wakes on it, renders its scope again and
//! sends what differs from what it last sent. A slow reader therefore gets the latest
//! state (the counter keeps only the newest generation) and an unchanged DTO is never sent
//! twice. Pings, the lifetime and the periodic rescan run on the sim clock.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::mpsc;

use simplyblock_controlplane::routes as api;

use crate::reply::{ApiError, Body};
use crate::routes::{self, ApiReq};
use crate::sim::{Sim, lock};

/// The list routes that stream, each with the path parameter of its detail route.
pub const LIST_ROUTES: &[(&str, &str)] = &[
    (api::CLUSTERS, "cluster_id"),
    (api::STORAGE_NODES, "storage_node_id"),
    (api::DEVICES, "device_id"),
    (api::TASKS, "task_id"),
    (api::POOLS, "pool_id"),
    (api::VOLUMES, "volume_id"),
    (api::POOL_SNAPSHOTS, "snapshot_id"),
    (api::BACKUPS, "backup_id"),
    (api::BACKUP_POLICIES, "policy_id"),
];

/// sse-starlette's `retry:` on the first event.
pub const RETRY_MS: u64 = 3000;
/// A keepalive comment this often (sim time).
pub const PING_MS: i64 = 15_000;
/// The scope is rendered again this often even without a change (sim time).
pub const RESCAN_MS: i64 = 30_000;
/// A stream is closed after this long (sim time).
pub const LIFETIME_MS: i64 = 3_600_000;

/// What a route template (without `/api/v2`) streams, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// A list route; the detail route's id parameter.
    List(&'static str),
    Detail,
}

pub fn shape(route: &str) -> Option<Shape> {
    if let Some((_, param)) = LIST_ROUTES.iter().find(|(r, _)| *r == route) {
        return Some(Shape::List(param));
    }
    LIST_ROUTES
        .iter()
        .any(|(list, param)| {
            route
                .strip_prefix(list)
                .is_some_and(|rest| rest == format!("{{{param}}}/"))
        })
        .then_some(Shape::Detail)
}

/// The open streams, counted per scope. The server keeps it beside the [`Sim`]; what the
/// streams wake on is the sim's change counter ([`Sim::watch_changes`]).
#[derive(Default)]
pub struct Streams {
    open: Mutex<BTreeMap<String, usize>>,
}

impl Streams {
    /// Open streams per scope (the request path), without the scopes that have none.
    pub fn open(&self) -> BTreeMap<String, usize> {
        lock(&self.open).clone()
    }

    pub fn open_total(&self) -> usize {
        lock(&self.open).values().sum()
    }

    fn enter(self: &Arc<Self>, scope: &str) -> OpenGuard {
        *lock(&self.open).entry(scope.to_string()).or_default() += 1;
        OpenGuard {
            streams: self.clone(),
            scope: scope.to_string(),
        }
    }
}

/// Counts a stream as open while it lives.
struct OpenGuard {
    streams: Arc<Streams>,
    scope: String,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        let mut open = lock(&self.streams.open);
        if let Some(n) = open.get_mut(&self.scope) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.scope);
            }
        }
    }
}

/// One server-sent event in sse-starlette's framing (`\r\n` line ends).
pub fn frame(event: &str, data: &str, retry: Option<u64>) -> String {
    let mut out = format!("event: {event}\r\n");
    for line in data.split('\n') {
        out.push_str("data: ");
        out.push_str(line.trim_end_matches('\r'));
        out.push_str("\r\n");
    }
    if let Some(r) = retry {
        out.push_str(&format!("retry: {r}\r\n"));
    }
    out.push_str("\r\n");
    out
}

/// sse-starlette's keepalive: a comment with Python's `str()` of the UTC time.
pub fn ping(sim_ms: i64) -> String {
    let at = jiff::Timestamp::from_millisecond(sim_ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S%.6f+00:00").to_string())
        .unwrap_or_default();
    format!(": ping - {at}\r\n\r\n")
}

/// A DTO as a stream carries it: no statistics (capacity all zero, no uptime), and no
/// `rep_info` in list streams.
fn stream_dto(mut v: Value, list: bool) -> Value {
    if let Some(o) = v.as_object_mut() {
        if let Some(Value::Object(cap)) = o.get_mut("capacity") {
            for x in cap.values_mut() {
                if x.is_number() {
                    *x = json!(0);
                }
            }
        }
        if o.get("uptime").is_some_and(|u| !u.is_null()) {
            o.insert("uptime".into(), Value::Null);
        }
        if list {
            o.remove("rep_info");
        }
    }
    v
}

fn id_of(v: &Value) -> Option<String> {
    v.get("id").and_then(Value::as_str).map(str::to_string)
}

/// The scope rendered now: the REST answer, or the error that ends the stream.
fn render(sim: &Sim, req: &ApiReq) -> Result<Value, ApiError> {
    let reply = routes::handle(sim, req)?;
    match reply.body {
        Body::Json(v) => Ok(v),
        _ => Err(ApiError::opaque("the streamed route answered no JSON")),
    }
}

/// The request a stream renders its scope with: a plain GET of the route.
pub fn scope_request(route: &str, params: &HashMap<String, String>, base: &str) -> ApiReq {
    let ids = params
        .iter()
        .filter_map(|(k, v)| uuid::Uuid::parse_str(v).ok().map(|u| (k.clone(), u)))
        .collect();
    ApiReq {
        method: "GET".into(),
        route: route.to_string(),
        ids,
        params: params.clone(),
        query: HashMap::new(),
        body: None,
        base: base.to_string(),
    }
}

/// Open a stream on `req`'s scope, counted in `streams`; `first` is the answer the
/// connecting GET already rendered. The returned channel yields the stream's bytes and ends
/// when it closes.
pub fn open(
    sim: Arc<Sim>,
    streams: &Arc<Streams>,
    req: ApiReq,
    scope: String,
    first: Value,
) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(1);
    let guard = streams.enter(&scope);
    tokio::spawn(async move {
        let _guard = guard;
        run(sim, req, first, tx).await;
    });
    rx
}

enum Seen {
    List(BTreeMap<String, String>),
    Detail(String),
}

async fn run(sim: Arc<Sim>, req: ApiReq, first: Value, tx: mpsc::Sender<String>) {
    let Some(shape) = shape(&req.route) else {
        return;
    };
    let list = matches!(shape, Shape::List(_));
    let mut changes = sim.watch_changes();
    changes.mark_unchanged();
    let opened = sim.clock.now_ms();
    let mut next_ping = opened + PING_MS;
    let mut next_rescan = opened + RESCAN_MS;
    let first = stream_dto_all(first, list);
    let mut seen = match &first {
        Value::Array(items) => Seen::List(
            items
                .iter()
                .filter_map(|v| Some((id_of(v)?, v.to_string())))
                .collect(),
        ),
        v => Seen::Detail(v.to_string()),
    };
    if tx
        .send(frame("snapshot", &first.to_string(), Some(RETRY_MS)))
        .await
        .is_err()
    {
        return;
    }
    loop {
        let now = sim.clock.now_ms();
        if now - opened >= LIFETIME_MS {
            return;
        }
        if lock(&sim.faults).unready() {
            let _ = tx
                .send(frame("error", r#"{"detail":"backend unavailable"}"#, None))
                .await;
            return;
        }
        if now >= next_ping {
            next_ping = now + PING_MS;
            if tx.send(ping(now)).await.is_err() {
                return;
            }
        }
        if now >= next_rescan {
            next_rescan = now + RESCAN_MS;
        }
        let frames = match (render(&sim, &req), &mut seen) {
            (Ok(v), Seen::List(last)) => diff_list(&sim, &req, &shape, v, last),
            (Ok(v), Seen::Detail(last)) => {
                let text = stream_dto(v, false).to_string();
                if text == *last {
                    Vec::new()
                } else {
                    *last = text.clone();
                    vec![frame("updated", &text, None)]
                }
            }
            // The entity is gone: a detail stream says so and closes.
            (Err(_), Seen::Detail(_)) => {
                let _ = tx.send(frame("deleted", "{}", None)).await;
                return;
            }
            // The parent is gone: its children's streams close.
            (Err(_), Seen::List(_)) => return,
        };
        for f in frames {
            if tx.send(f).await.is_err() {
                return;
            }
        }
        // Sleep until a change, the next sim-time deadline, or the reader leaving. A
        // frozen clock moves only by the admin route, which counts as a change.
        let deadline = next_ping.min(next_rescan).min(opened + LIFETIME_MS);
        let nap = sim
            .clock
            .real_delay(deadline - sim.clock.now_ms())
            .map_or(std::time::Duration::from_secs(1), |d| {
                d.min(std::time::Duration::from_secs(1))
            });
        tokio::select! {
            r = changes.changed() => if r.is_err() { return },
            _ = tokio::time::sleep(nap) => {}
            _ = tx.closed() => return,
        }
    }
}

fn stream_dto_all(v: Value, list: bool) -> Value {
    match v {
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|x| stream_dto(x, true)).collect())
        }
        v => stream_dto(v, list),
    }
}

/// The frames that take a list stream's reader from `last` to `now`, in the list's order
/// (created and updated), then the deletions.
fn diff_list(
    sim: &Sim,
    req: &ApiReq,
    shape: &Shape,
    now: Value,
    last: &mut BTreeMap<String, String>,
) -> Vec<String> {
    let Value::Array(items) = now else {
        return Vec::new();
    };
    let mut frames = Vec::new();
    let mut present = BTreeMap::new();
    for item in items {
        let Some(id) = id_of(&item) else { continue };
        let text = stream_dto(item, true).to_string();
        match last.get(&id) {
            None => frames.push(frame("created", &text, None)),
            Some(old) if *old != text => frames.push(frame("updated", &text, None)),
            Some(_) => {}
        }
        present.insert(id, text);
    }
    for id in last.keys().filter(|id| !present.contains_key(*id)) {
        let data = final_dto(sim, req, shape, id).unwrap_or_else(|| json!({}));
        frames.push(frame("deleted", &data.to_string(), None));
    }
    *last = present;
    frames
}

/// The detail of an entity that left a list, when it is still readable (a volume whose
/// status became `deleted`).
fn final_dto(sim: &Sim, req: &ApiReq, shape: &Shape, id: &str) -> Option<Value> {
    let Shape::List(param) = shape else {
        return None;
    };
    let mut params = req.params.clone();
    params.insert((*param).to_string(), id.to_string());
    let detail = scope_request(&format!("{}{{{param}}}/", req.route), &params, &req.base);
    render(sim, &detail).ok().map(|v| stream_dto(v, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_of_the_streamed_routes() {
        assert_eq!(
            shape(api::STORAGE_NODES),
            Some(Shape::List("storage_node_id"))
        );
        assert_eq!(shape(api::STORAGE_NODE), Some(Shape::Detail));
        assert_eq!(shape(api::CLUSTER), Some(Shape::Detail));
        assert_eq!(shape(api::STORAGE_NODE_NICS), None);
        assert_eq!(shape(api::BACKUPS), Some(Shape::List("backup_id")));
        assert_eq!(shape(api::BACKUP_POLICIES), Some(Shape::List("policy_id")));
        assert_eq!(shape(api::BACKUP_RESTORE), None);
    }

    #[test]
    fn frames_use_crlf_and_retry_after_data() {
        assert_eq!(
            frame("snapshot", "[]", Some(3000)),
            "event: snapshot\r\ndata: []\r\nretry: 3000\r\n\r\n"
        );
        assert_eq!(
            frame("deleted", "{}", None),
            "event: deleted\r\ndata: {}\r\n\r\n"
        );
        assert_eq!(ping(0), ": ping - 1970-01-01 00:00:00.000000+00:00\r\n\r\n");
    }

    #[test]
    fn stream_dtos_carry_no_statistics() {
        let v = json!({"id": "a", "uptime": "PT1S", "capacity": {"date": 5, "size_used": 9}, "rep_info": {}});
        assert_eq!(
            stream_dto(v.clone(), true),
            json!({"id": "a", "uptime": null, "capacity": {"date": 0, "size_used": 0}})
        );
        assert!(stream_dto(v, false).get("rep_info").is_some());
    }
}

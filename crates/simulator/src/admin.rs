//! `/_sim/*` admin routes. The workers' storage-node API is [`crate::routes::snode`].
//!
//! | Route | Does |
//! |---|---|
//! | `GET /_sim/calls?since=N` | the call log after sequence N |
//! | `DELETE /_sim/calls` | clear it |
//! | `GET /_sim/faults` | active rules with their counters |
//! | `PUT /_sim/faults` `{"spec": "…"}` | replace the rules |
//! | `POST /_sim/faults` `{"spec": "…"}` | add rules |
//! | `DELETE /_sim/faults` | clear the rules |
//! | `GET /_sim/workers`, `GET /_sim/workers/{host}` | the fleet, with reachability |
//! | `PUT /_sim/workers/{host}/labels` `{k: v}` | replace a worker's labels |
//! | `PATCH /_sim/workers/{host}/labels` `{k: v \| null}` | merge (null removes) |
//! | `POST /_sim/workers/{host}/reboot` `{"seconds": N}` | reboot it (sim seconds) |
//! | `GET /_sim/workers/{host}/snode/{verb}` | its storage-node API, without Host routing |
//! | `GET /_sim/clock`, `PUT /_sim/clock` `{"scale": F}` | sim time and speed |
//! | `POST /_sim/clock/advance` `{"seconds": F}` | let sim time pass: everything due on the way is carried out at its moment before the answer |
//! | `GET /_sim/streams` | the open `?watch=true` streams per scope (request path) and their total |
//! | `GET /_sim/version`, `PUT /_sim/version` `{"version": "…" \| null}` | what `/api/v2/_meta/version` reports (null: 404) |
//! | `GET /_sim/object-stores` | the object stores with their buckets, regions and keys |
//! | `POST /_sim/object-stores` `{endpoint, bucket, region?, access_key_id, secret_access_key}` | a bucket (and its store when new) open to that key; again to allow more keys |
//! | `PATCH /_sim/object-stores` `{endpoint, reachable: bool}` | take a store off the network or back |
//! | `DELETE /_sim/object-stores` `{endpoint, bucket}` | remove a bucket with every object in it |
//! | `PUT /_sim/volumes/{id}/written` `{"bytes": N}` | a workload wrote N bytes to the volume: its used bytes ([`crate::stats`]) |
//! | `POST /_sim/paths/cut` `{volume, paths?: ["ip:port"]}` | cut a loop-attached volume's paths to the node ([`crate::paths`]) |

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::faults;
use crate::reply::{ApiError, Reply};
use crate::routes::snode;
use crate::sim::{Sim, lock};
use crate::stream::Streams;

fn worker_json(sim: &Sim, host: &str) -> Option<Value> {
    sim.mutate(|st| {
        let reachable = st.worker_reachable(host);
        Ok(st.t.workers.get(host).map(|w| {
            let mut v = json!(w);
            v["reachable"] = json!(reachable.is_ok());
            if let Err(why) = reachable {
                v["unreachable_reason"] = json!(why);
            }
            v
        }))
    })
    .ok()
    .flatten()
}

pub fn handle(
    sim: &Sim,
    streams: &Streams,
    method: &str,
    path: &str,
    query: &str,
    body: Option<&Value>,
    auth: Option<&str>,
) -> Result<Reply, ApiError> {
    if !sim.config.tokens.is_empty() {
        let token = auth
            .and_then(|a| a.strip_prefix("Bearer "))
            .map(str::trim)
            .unwrap_or("");
        if !sim.config.tokens.iter().any(|t| t == token) {
            return Err(ApiError::Http(401, "Invalid token".into()));
        }
    }
    let segs: Vec<&str> = path
        .trim_start_matches("/_sim/")
        .trim_end_matches('/')
        .split('/')
        .collect();
    let q: BTreeMap<String, String> = url::form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let spec_of = |b: Option<&Value>| {
        b.and_then(|b| b.get("spec"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| ApiError::bad_request("body must be {\"spec\": \"…\"}"))
    };
    match (method, segs.as_slice()) {
        ("GET", ["health"]) => Ok(Reply::empty(204)),
        ("GET", ["streams"]) => Ok(Reply::ok(json!({
            "open": streams.open(),
            "total": streams.open_total(),
        }))),
        ("GET", ["calls"]) => {
            let since = q.get("since").and_then(|s| s.parse().ok()).unwrap_or(0);
            Ok(Reply::ok(json!(lock(&sim.calls).since(since))))
        }
        ("DELETE", ["calls"]) => {
            lock(&sim.calls).clear();
            Ok(Reply::empty(204))
        }
        ("GET", ["faults"]) => Ok(Reply::ok(json!({"rules": lock(&sim.faults).rules}))),
        ("PUT", ["faults"]) | ("POST", ["faults"]) => {
            let rules =
                faults::parse(&spec_of(body)?).map_err(|e| ApiError::bad_request(e.to_string()))?;
            let mut f = lock(&sim.faults);
            if method == "PUT" {
                f.set(rules);
            } else {
                f.rules.extend(rules);
            }
            Ok(Reply::ok(json!({"rules": f.rules})))
        }
        ("GET", ["version"]) => Ok(Reply::ok(json!({"version": *lock(&sim.version)}))),
        ("PUT", ["version"]) => {
            let version = match body.and_then(|b| b.get("version")) {
                Some(Value::String(v)) => Some(v.clone()),
                Some(Value::Null) => None,
                _ => {
                    return Err(ApiError::bad_request(
                        "body must be {\"version\": \"…\"} or {\"version\": null}",
                    ));
                }
            };
            *lock(&sim.version) = version.clone();
            Ok(Reply::ok(json!({ "version": version })))
        }
        ("DELETE", ["faults"]) => {
            lock(&sim.faults).set(Vec::new());
            Ok(Reply::empty(204))
        }
        ("GET", ["workers"]) => {
            let hosts: Vec<String> = sim.read(|t, _| t.workers.keys().cloned().collect());
            Ok(Reply::ok(json!(
                hosts
                    .iter()
                    .filter_map(|h| worker_json(sim, h))
                    .collect::<Vec<_>>()
            )))
        }
        ("GET", ["workers", host]) => worker_json(sim, host)
            .map(Reply::ok)
            .ok_or_else(|| ApiError::not_found(format!("no worker {host}"))),
        ("PUT", ["workers", host, "labels"]) | ("PATCH", ["workers", host, "labels"]) => {
            let map = body
                .and_then(Value::as_object)
                .ok_or_else(|| ApiError::bad_request("body must be an object of labels"))?
                .clone();
            set_labels(sim, host, method == "PUT", &map)?;
            worker_json(sim, host)
                .map(Reply::ok)
                .ok_or_else(|| ApiError::not_found(format!("no worker {host}")))
        }
        ("POST", ["workers", host, "reboot"]) => {
            let secs = body
                .and_then(|b| b.get("seconds"))
                .and_then(Value::as_f64)
                .unwrap_or(sim.timings().reboot_ms as f64 / 1000.0);
            let host = host.to_string();
            sim.mutate(|st| {
                let until = st.now + (secs * 1000.0) as i64;
                match st.t.workers.get_mut(&host) {
                    Some(w) => {
                        w.reboot_until_ms = Some(until);
                        Ok(())
                    }
                    None => Err(ApiError::not_found(format!("no worker {host}"))),
                }
            })?;
            Ok(Reply::empty(204))
        }
        ("GET", ["workers", host, "snode", verb]) => snode::handle(sim, host, verb),
        ("PUT", ["volumes", id, "written"]) => {
            crate::stats::set_written(sim, id, body)?;
            Ok(Reply::empty(204))
        }
        ("GET", ["clock"]) => Ok(Reply::ok(json!({
            "sim_ms": sim.clock.now_ms(),
            "sim_time": crate::render::iso_time(sim.clock.now_ms()),
            "scale": sim.clock.scale(),
        }))),
        ("PUT", ["clock"]) => {
            let scale = body
                .and_then(|b| b.get("scale"))
                .and_then(Value::as_f64)
                .ok_or_else(|| ApiError::bad_request("body must be {\"scale\": number}"))?;
            sim.clock.set_scale(scale);
            sim.wake.notify_one();
            Ok(Reply::ok(json!({"scale": sim.clock.scale()})))
        }
        ("POST", ["clock", "advance"]) => {
            let secs = body
                .and_then(|b| b.get("seconds"))
                .and_then(Value::as_f64)
                .ok_or_else(|| ApiError::bad_request("body must be {\"seconds\": number}"))?;
            crate::engine::pass_time(sim, (secs * 1000.0) as i64)?;
            sim.wake.notify_one();
            Ok(Reply::ok(json!({"sim_ms": sim.clock.now_ms()})))
        }
        ("GET", ["object-stores"]) => {
            Ok(Reply::ok(json!(sim.read(|t, _| {
                t.object_stores.values().cloned().collect::<Vec<_>>()
            }))))
        }
        ("POST", ["object-stores"])
        | ("PATCH", ["object-stores"])
        | ("DELETE", ["object-stores"]) => object_store(sim, method, body),
        ("POST", ["paths", "cut"]) => crate::paths::cut(sim, body),
        _ => Err(ApiError::not_found("Not Found")),
    }
}

/// Sets up, toggles or removes part of an object store.
fn object_store(sim: &Sim, method: &str, body: Option<&Value>) -> Result<Reply, ApiError> {
    let field = |k: &str| {
        body.and_then(|b| b.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let need = |k: &str| field(k).ok_or_else(|| ApiError::bad_request(format!("body needs {k:?}")));
    let endpoint = need("endpoint")?;
    let root = crate::objstore::root(&sim.config);
    let reply = match method {
        "POST" => {
            let (bucket, key) = (need("bucket")?, need("access_key_id")?);
            let secret = need("secret_access_key")?;
            let region = field("region");
            sim.mutate(|st| {
                crate::objstore::add_bucket(
                    st.t,
                    &endpoint,
                    &bucket,
                    region.as_deref(),
                    &key,
                    &secret,
                )
                .map(|s| Reply::json(201, json!(s)))
                .map_err(ApiError::bad_request)
            })?
        }
        "PATCH" => {
            let reachable = body
                .and_then(|b| b.get("reachable"))
                .and_then(Value::as_bool)
                .ok_or_else(|| ApiError::bad_request("body needs \"reachable\": bool"))?;
            sim.mutate(|st| match st.t.object_stores.get_mut(&endpoint) {
                Some(s) => {
                    s.unreachable = !reachable;
                    Ok(Reply::ok(json!(s.clone())))
                }
                None => Err(ApiError::not_found(format!(
                    "no object store at {endpoint}"
                ))),
            })?
        }
        _ => {
            let bucket = need("bucket")?;
            sim.mutate(|st| {
                if crate::objstore::remove_bucket(&root, st.t, &endpoint, &bucket) {
                    Ok(Reply::empty(204))
                } else {
                    Err(ApiError::not_found(format!(
                        "no bucket {bucket} at {endpoint}"
                    )))
                }
            })?
        }
    };
    sim.wake.notify_one();
    Ok(reply)
}

/// Replace (or merge into) a worker's labels. Used by the admin route and the kube watcher.
pub fn set_labels(
    sim: &Sim,
    host: &str,
    replace: bool,
    map: &serde_json::Map<String, Value>,
) -> Result<(), ApiError> {
    sim.mutate(|st| {
        let w =
            st.t.workers
                .get_mut(host)
                .ok_or_else(|| ApiError::not_found(format!("no worker {host}")))?;
        if replace {
            w.labels.clear();
        }
        for (k, v) in map {
            match v.as_str() {
                Some(s) => {
                    w.labels.insert(k.clone(), s.to_string());
                }
                None => {
                    w.labels.remove(k);
                }
            }
        }
        Ok(())
    })?;
    sim.wake.notify_one();
    Ok(())
}

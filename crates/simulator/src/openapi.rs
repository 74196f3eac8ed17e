//! The control plane's own OpenAPI document (sbcli main, v2 paths), embedded. It is the
//! route table of the simulator (which paths exist, where the trailing slash goes),
//! the source of its 422 answers (request bodies are checked against the schemas, as
//! FastAPI does), and the reference the contract tests validate answers against.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jsonschema::Validator;
use serde_json::{Value, json};
use simplyblock_controlplane::routes as api;

const DOC: &str = include_str!("../spec/openapi-v2.json");

/// One path template, split into segments.
#[derive(Debug, Clone)]
pub struct Route {
    pub template: String,
    segments: Vec<String>,
}

/// A matched path: its template and the path parameters.
#[derive(Debug, Clone)]
pub struct Matched {
    pub template: String,
    pub params: HashMap<String, String>,
}

/// One problem found by schema validation.
#[derive(Debug, Clone)]
pub struct Issue {
    /// JSON path inside the instance, e.g. `["max_subsys"]`.
    pub loc: Vec<Value>,
    pub kind: &'static str,
    pub msg: String,
    pub input: Value,
}

pub struct Spec {
    doc: Value,
    routes: Vec<Route>,
    cache: Mutex<HashMap<String, Arc<Validator>>>,
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spec")
            .field("routes", &self.routes.len())
            .finish()
    }
}

fn split(path: &str) -> Vec<String> {
    // Keep a trailing empty segment: it is how `/x/` differs from `/x`.
    path.trim_start_matches('/')
        .split('/')
        .map(str::to_string)
        .collect()
}

impl Spec {
    pub fn load() -> Self {
        // The document is compiled in; failing to parse it is a build defect.
        let mut doc: Value = serde_json::from_str(DOC).unwrap_or_else(|_| json!({"paths": {}}));
        add_newer_routes(&mut doc);
        let routes = doc["paths"]
            .as_object()
            .map(|p| {
                p.keys()
                    .map(|t| Route {
                        template: t.clone(),
                        segments: split(t),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            doc,
            routes,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub fn doc(&self) -> &Value {
        &self.doc
    }

    pub fn templates(&self) -> impl Iterator<Item = &str> {
        self.routes.iter().map(|r| r.template.as_str())
    }

    /// The template matching `path` exactly (literal segments beat parameters).
    pub fn match_path(&self, path: &str) -> Option<Matched> {
        let segs = split(path);
        let mut best: Option<(usize, Matched)> = None;
        for r in &self.routes {
            if r.segments.len() != segs.len() {
                continue;
            }
            let mut params = HashMap::new();
            let mut literals = 0;
            let mut ok = true;
            for (t, s) in r.segments.iter().zip(&segs) {
                if let Some(name) = t.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
                    if s.is_empty() {
                        ok = false;
                        break;
                    }
                    params.insert(name.to_string(), percent_decode(s));
                } else if t == s {
                    literals += 1;
                } else {
                    ok = false;
                    break;
                }
            }
            if ok && best.as_ref().is_none_or(|(l, _)| literals > *l) {
                best = Some((
                    literals,
                    Matched {
                        template: r.template.clone(),
                        params,
                    },
                ));
            }
        }
        best.map(|(_, m)| m)
    }

    /// The operation object for a method on a template.
    pub fn operation(&self, method: &str, template: &str) -> Option<&Value> {
        self.doc["paths"][template].get(method.to_ascii_lowercase())
    }

    pub fn methods(&self, template: &str) -> Vec<String> {
        self.doc["paths"][template]
            .as_object()
            .map(|o| o.keys().map(|k| k.to_ascii_uppercase()).collect())
            .unwrap_or_default()
    }

    /// The request body schema, and whether the body is required.
    pub fn request_schema(&self, method: &str, template: &str) -> Option<(Value, bool)> {
        let rb = self.operation(method, template)?.get("requestBody")?;
        let schema = rb["content"]["application/json"]["schema"].clone();
        Some((schema, rb["required"].as_bool().unwrap_or(false)))
    }

    /// The response schema for a status, `None` when the spec documents no body for it.
    /// The outer `Option` is `None` when the status is not documented at all.
    pub fn response_schema(
        &self,
        method: &str,
        template: &str,
        status: u16,
    ) -> Option<Option<Value>> {
        let r = self
            .operation(method, template)?
            .get("responses")?
            .get(status.to_string())?;
        Some(
            r["content"]["application/json"]["schema"]
                .as_object()
                .map(|_| r["content"]["application/json"]["schema"].clone()),
        )
    }

    /// A component schema by name (e.g. `_CreateParams`).
    pub fn component(&self, name: &str) -> Value {
        json!({"$ref": format!("#/components/schemas/{name}")})
    }

    fn validator(&self, schema: &Value) -> Option<Arc<Validator>> {
        let key = schema.to_string();
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = cache.get(&key) {
            return Some(v.clone());
        }
        // Component references are `#/components/schemas/X`: give the schema a root
        // that carries the components so they resolve.
        let mut root = match schema {
            Value::Object(o) => Value::Object(o.clone()),
            _ => return None,
        };
        root["components"] = self.doc["components"].clone();
        let v = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .build(&root)
            .ok()
            .map(Arc::new)?;
        cache.insert(key, v.clone());
        Some(v)
    }

    /// Validate an instance; an empty list means it conforms. An empty schema (`{}`)
    /// accepts anything.
    pub fn validate(&self, schema: &Value, instance: &Value) -> Vec<Issue> {
        if schema.as_object().is_some_and(|o| o.is_empty()) {
            return Vec::new();
        }
        let Some(v) = self.validator(schema) else {
            return vec![Issue {
                loc: vec![],
                kind: "schema",
                msg: "the schema could not be compiled".into(),
                input: Value::Null,
            }];
        };
        v.iter_errors(instance)
            .map(|e| {
                let mut loc: Vec<Value> = e
                    .instance_path()
                    .iter()
                    .map(|s| match s {
                        jsonschema::paths::LocationSegment::Property(p) => json!(p.as_ref()),
                        jsonschema::paths::LocationSegment::Index(i) => json!(i),
                    })
                    .collect();
                let kind = match e.kind() {
                    jsonschema::error::ValidationErrorKind::Required { property } => {
                        loc.push(property.clone());
                        "missing"
                    }
                    jsonschema::error::ValidationErrorKind::Type { .. } => "type_error",
                    jsonschema::error::ValidationErrorKind::Enum { .. } => "literal_error",
                    jsonschema::error::ValidationErrorKind::Minimum { .. } => "greater_than_equal",
                    jsonschema::error::ValidationErrorKind::Maximum { .. } => "less_than_equal",
                    jsonschema::error::ValidationErrorKind::ExclusiveMinimum { .. } => {
                        "greater_than"
                    }
                    jsonschema::error::ValidationErrorKind::Pattern { .. } => {
                        "string_pattern_mismatch"
                    }
                    jsonschema::error::ValidationErrorKind::Format { .. } => "format_error",
                    _ => "value_error",
                };
                let msg = if kind == "missing" {
                    "Field required".to_string()
                } else {
                    e.to_string()
                };
                Issue {
                    loc,
                    kind,
                    msg,
                    input: e.instance().clone().into_owned(),
                }
            })
            .collect()
    }
}

/// A route template as the document writes it: with the `/api/v2` prefix.
fn v2(route: &str) -> String {
    format!("/api/v2{route}")
}

/// The routes of a newer control plane the operator calls, which sbcli main's document
/// does not have. The device's `POST …/devices/{device_id}/fail` is shaped like `…/reset`.
fn add_newer_routes(doc: &mut Value) {
    let mut fail = doc["paths"][v2(api::DEVICE_RESET)].clone();
    if fail.is_null() {
        return;
    }
    fail["post"]["summary"] = json!("Clusters:Storage Nodes:Devices:Fail");
    fail["post"]["operationId"] = json!(
        "clusters_storage_nodes_devices_fail_api_v2_clusters__cluster_id__storage_nodes__storage_node_id__devices__device_id__fail_post"
    );
    if let Some(paths) = doc["paths"].as_object_mut() {
        paths.insert(v2(api::DEVICE_FAIL), fail);
    }
    add_newer_replication_routes(doc);
    add_group_routes(doc);
}

/// An operation of a newer control plane's route: path parameters (UUIDs unless named
/// `group_seq`), optional query parameters, an optional JSON body, and its success answer
/// (`None`: no body).
fn operation(
    summary: &str,
    path: &[&str],
    query: &[(&str, Value)],
    body: Option<Value>,
    ok: (u16, Option<Value>),
) -> Value {
    let mut params: Vec<Value> = path
        .iter()
        .map(|p| {
            let schema = if *p == "group_seq" {
                json!({ "type": "integer", "title": "Group Seq" })
            } else {
                json!({ "type": "string", "format": "uuid" })
            };
            json!({ "name": p, "in": "path", "required": true, "schema": schema })
        })
        .collect();
    params.extend(query.iter().map(
        |(q, schema)| json!({ "name": q, "in": "query", "required": false, "schema": schema }),
    ));
    let mut responses = json!({
        "422": {
            "description": "Validation Error",
            "content": { "application/json": { "schema": {
                "$ref": "#/components/schemas/HTTPValidationError"
            } } }
        }
    });
    responses[ok.0.to_string()] = match ok.1 {
        Some(schema) => json!({
            "description": "Successful Response",
            "content": { "application/json": { "schema": schema } }
        }),
        None => json!({ "description": "Successful Response" }),
    };
    let mut op = json!({
        "tags": ["consistency-groups"],
        "summary": summary,
        "operationId": summary.to_ascii_lowercase().replace([':', ' ', '-'], "_"),
        "security": [{ "HTTPBearer": [] }],
        "parameters": params,
        "responses": responses,
    });
    if let Some(b) = body {
        op["requestBody"] = json!({
            "required": true,
            "content": { "application/json": { "schema": b } }
        });
    }
    op
}

/// Consistency groups of a newer control plane (reference §10, inv-csi-dr §3.5): the
/// group routes, the policy's `latest-generation`, and `consistency_group` at volume create.
fn add_group_routes(doc: &mut Value) {
    let uuid = json!({ "type": "string", "format": "uuid" });
    let uuid_or_null =
        json!({ "anyOf": [{ "type": "string", "format": "uuid" }, { "type": "null" }] });
    let str_or_null = json!({ "anyOf": [{ "type": "string" }, { "type": "null" }] });
    let group = json!({
        "title": "ConsistencyGroupDTO",
        "type": "object",
        "required": ["id", "cluster_id", "name", "member_count", "lvs_name", "node_id", "policy_id"],
        "properties": {
            "id": uuid, "cluster_id": uuid, "name": { "type": "string" },
            "member_count": { "type": "integer" }, "lvs_name": { "type": "string" },
            "node_id": uuid, "policy_id": uuid_or_null
        }
    });
    let member = json!({
        "type": "object",
        "required": ["lvol_id", "added_seq", "removed_seq"],
        "properties": {
            "lvol_id": uuid, "added_seq": { "type": "integer" }, "removed_seq": { "type": "integer" }
        }
    });
    let snapshot = json!({
        "title": "GroupSnapshotDTO",
        "type": "object",
        "required": ["group_seq", "members"],
        "properties": {
            "group_seq": { "type": "integer" },
            "members": { "type": "array", "items": {
                "type": "object",
                "required": ["lvol_id", "snapshot_id"],
                "properties": { "lvol_id": uuid, "snapshot_id": uuid }
            } },
            "created_at": str_or_null,
            "name": str_or_null
        }
    });
    let snapshot_create = json!({
        "title": "GroupSnapshotCreate",
        "type": "object",
        "properties": { "name": str_or_null }
    });
    let failover =
        json!({ "type": "array", "items": { "$ref": "#/components/schemas/FailoverResultDTO" } });
    let generation = json!({
        "title": "LatestGenerationDTO",
        "type": "object",
        "required": ["group_seq", "members"],
        "properties": {
            "group_seq": { "type": "integer" },
            "members": { "type": "array", "items": {
                "type": "object",
                "required": ["snapshot_id", "cluster_id", "pool_id", "lvol_id", "size", "group_seq"],
                "properties": {
                    "snapshot_id": uuid, "cluster_id": uuid, "pool_id": uuid, "lvol_id": uuid,
                    "source_lvol_id": uuid, "size": { "type": "integer" },
                    "group_seq": { "type": "integer" }
                }
            } }
        }
    });
    let g = ["cluster_id", "group_id"];
    let routes: Vec<(String, &str, Value)> = vec![
        (
            v2(api::CONSISTENCY_GROUPS),
            "get",
            operation(
                "Clusters:Consistency Groups:List",
                &["cluster_id"],
                &[("name", str_or_null.clone())],
                None,
                (
                    200,
                    Some(json!({ "type": "array", "items": group.clone() })),
                ),
            ),
        ),
        (
            v2(api::GROUP_MEMBERS),
            "get",
            operation(
                "Clusters:Consistency Groups:Members",
                &g,
                &[],
                None,
                (200, Some(json!({ "type": "array", "items": member }))),
            ),
        ),
        (
            v2(api::GROUP_MEMBER),
            "delete",
            operation(
                "Clusters:Consistency Groups:Members:Remove",
                &["cluster_id", "group_id", "lvol_id"],
                &[],
                None,
                (204, None),
            ),
        ),
        (
            v2(api::GROUP_SNAPSHOTS),
            "get",
            operation(
                "Clusters:Consistency Groups:Snapshots:List",
                &g,
                &[],
                None,
                (
                    200,
                    Some(json!({ "type": "array", "items": snapshot.clone() })),
                ),
            ),
        ),
        (
            v2(api::GROUP_SNAPSHOTS),
            "post",
            operation(
                "Clusters:Consistency Groups:Snapshots:Create",
                &g,
                &[],
                Some(snapshot_create),
                (201, Some(snapshot.clone())),
            ),
        ),
        (
            v2(api::GROUP_SNAPSHOT),
            "get",
            operation(
                "Clusters:Consistency Groups:Snapshots:Detail",
                &["cluster_id", "group_id", "group_seq"],
                &[],
                None,
                (200, Some(snapshot)),
            ),
        ),
        (
            v2(api::GROUP_SNAPSHOT),
            "delete",
            operation(
                "Clusters:Consistency Groups:Snapshots:Delete",
                &["cluster_id", "group_id", "group_seq"],
                &[],
                None,
                (204, None),
            ),
        ),
        (
            v2(api::GROUP_REPLICATION),
            "put",
            operation(
                "Clusters:Consistency Groups:Replication:Update",
                &g,
                &[],
                Some(json!({
                    "type": "object",
                    "required": ["replication_policy_id"],
                    "properties": { "replication_policy_id": uuid_or_null }
                })),
                (204, None),
            ),
        ),
        (
            v2(api::GROUP_REPLICATION_FAILOVER),
            "post",
            operation(
                "Clusters:Consistency Groups:Replication:Failover",
                &g,
                &[],
                None,
                (200, Some(failover)),
            ),
        ),
        (
            v2(api::GROUP_REPLICATION_DEMOTE),
            "post",
            operation(
                "Clusters:Consistency Groups:Replication:Demote",
                &g,
                &[],
                None,
                (204, None),
            ),
        ),
        (
            v2(api::GROUP_REPLICATION_FAILBACK),
            "post",
            operation(
                "Clusters:Consistency Groups:Replication:Failback",
                &g,
                &[],
                Some(json!({ "$ref": "#/components/schemas/FailbackParams" })),
                (204, None),
            ),
        ),
        (
            v2(api::GROUP_REPLICATION_STATUS),
            "get",
            operation(
                "Clusters:Consistency Groups:Replication:Status",
                &g,
                &[],
                None,
                (200, Some(status_schema())),
            ),
        ),
        (
            v2(api::GROUP_RESOLUTION),
            "get",
            operation(
                "Clusters:Consistency Groups:Resolution",
                &g,
                &[],
                None,
                (
                    200,
                    Some(json!({
                        "title": "GroupResolutionDTO",
                        "type": "object",
                        "required": ["named", "active"],
                        "properties": { "named": group.clone(), "active": group }
                    })),
                ),
            ),
        ),
        (
            v2(api::REPLICATION_POLICY_LATEST_GENERATION),
            "get",
            operation(
                "Clusters:Replication:Policies:Latest Generation",
                &["cluster_id", "policy_id"],
                &[],
                None,
                (200, Some(generation)),
            ),
        ),
    ];
    if let Some(paths) = doc["paths"].as_object_mut() {
        for (path, method, op) in routes {
            let entry = paths.entry(path).or_insert_with(|| json!({}));
            entry[method] = op;
        }
    }
    add_sync_answers(doc);
    // The demote answers 202 while a member converges.
    let demote = v2(api::GROUP_REPLICATION_DEMOTE);
    doc["paths"][&demote]["post"]["responses"]["202"] = json!({ "description": "Accepted" });
    doc["components"]["schemas"]["_CreateParams"]["properties"]["consistency_group"] = json!({ "anyOf": [{ "type": "string" }, { "type": "null" }], "title": "Consistency Group" });
    // The name a group snapshot is taken under, so a retried create finds it: the body
    // is optional.
    let create = v2(api::GROUP_SNAPSHOTS);
    doc["paths"][&create]["post"]["requestBody"]["required"] = json!(false);
    // The id a new volume takes (the CSI driver's `uid`, from a claim's lvol-id).
    doc["components"]["schemas"]["_CreateParams"]["properties"]["uid"] = json!({ "anyOf": [{ "type": "string", "format": "uuid" }, { "type": "null" }], "title": "Uid" });
}

/// The replication routes of a newer control plane (reference §10): a volume's typed
/// `…/replication/status` (shaped like `GET …/replication/`), its `…/replication/demote`
/// (shaped like `POST …/replication/failover`), and the cluster-scoped relationship lookup
/// `/clusters/{c}/replication/relationships/{lvol_id}` (shaped like a target's GET).
fn add_newer_replication_routes(doc: &mut Value) {
    let paths = &doc["paths"];
    let mut status = paths[v2(api::VOLUME_REPLICATION)].clone();
    let mut demote = paths[v2(api::VOLUME_REPLICATION_FAILOVER)].clone();
    let mut lookup = json!({ "get": paths[v2(api::REPLICATION_TARGET)]["get"].clone() });
    if status.is_null() || demote.is_null() || lookup["get"].is_null() {
        return;
    }
    status["get"]["summary"] = json!("Clusters:Storage Pools:Volumes:Replication:Status");
    status["get"]["operationId"] = json!("replication_status_get");
    demote["post"]["summary"] = json!("Clusters:Storage Pools:Volumes:Replication:Demote");
    demote["post"]["operationId"] = json!("replication_demote_post");
    lookup["get"]["summary"] = json!("Clusters:Replication:Relationships:Get");
    lookup["get"]["operationId"] = json!("replication_relationship_get");
    let ok = "/responses/200/content/application~1json/schema";
    if let Some(schema) = lookup.pointer_mut(&format!("/get{ok}")) {
        *schema = paths[v2(api::VOLUME_REPLICATION)]["get"]
            .pointer(ok)
            .cloned()
            .unwrap_or(Value::Null);
    }
    if let Some(schema) = status.pointer_mut(&format!("/get{ok}")) {
        *schema = status_schema();
    }
    if let Some(params) = lookup["get"]["parameters"].as_array_mut() {
        for p in params {
            if p["name"] == "target_id" {
                p["name"] = json!("lvol_id");
                p["schema"]["title"] = json!("Lvol Id");
            }
        }
    }
    let mut latest = lookup.clone();
    latest["get"]["summary"] = json!("Clusters:Replication:Relationships:Latest Snapshot");
    latest["get"]["operationId"] = json!("replication_relationship_latest_snapshot_get");
    if let Some(schema) = latest.pointer_mut(&format!("/get{ok}")) {
        *schema = replicated_snapshot_schema();
    }
    if let Some(paths) = doc["paths"].as_object_mut() {
        paths.insert(v2(api::REPLICATION_RELATIONSHIP_LATEST_SNAPSHOT), latest);
        paths.insert(v2(api::VOLUME_REPLICATION_STATUS), status);
        paths.insert(v2(api::VOLUME_REPLICATION_DEMOTE), demote);
        paths.insert(v2(api::REPLICATION_RELATIONSHIP), lookup);
    }
}

/// `ReplicatedSnapshotDTO` of a newer control plane: a relationship's latest snapshot on
/// the receiving side.
fn replicated_snapshot_schema() -> Value {
    let uuid = json!({ "type": "string", "format": "uuid" });
    json!({
        "title": "ReplicatedSnapshotDTO",
        "type": "object",
        "required": [
            "snapshot_id", "cluster_id", "pool_id", "lvol_id", "source_lvol_id", "size",
            "created_at"
        ],
        "properties": {
            "snapshot_id": uuid,
            "cluster_id": uuid,
            "pool_id": uuid,
            "lvol_id": uuid,
            "source_lvol_id": uuid,
            "size": { "type": "integer" },
            "created_at": { "anyOf": [{ "type": "string" }, { "type": "null" }] }
        }
    })
}

/// The synchronous forms of the volume and group demote and failover (reference §10):
/// `?site=` (and `?planned=` on failover), 200 with the promoted volume's connection lines
/// (per member for a group), and the refusals 400 (unknown site), 409 (retry) and 412
/// (peer offline) in the `{"detail": {"message": …}}` envelope.
fn add_sync_answers(doc: &mut Value) {
    let promoted = json!({
        "type": "object",
        "required": ["lvol_id", "connection_strings"],
        "properties": {
            "lvol_id": { "type": "string", "format": "uuid" },
            "connection_strings": { "type": "array", "items": { "type": "string" } }
        }
    });
    let refusal = json!({
        "description": "Refused",
        "content": { "application/json": { "schema": {
            "type": "object",
            "required": ["detail"],
            "properties": { "detail": {
                "type": "object",
                "required": ["message"],
                "properties": { "message": { "type": "string" } }
            } }
        } } }
    });
    let query = |name: &str, schema: Value| json!({ "name": name, "in": "query", "required": false, "schema": schema });
    let str_or_null = json!({ "anyOf": [{ "type": "string" }, { "type": "null" }] });
    let bool_or_null = json!({ "anyOf": [{ "type": "boolean" }, { "type": "null" }] });
    for (failover, demote, ok) in [
        (
            api::VOLUME_REPLICATION_FAILOVER,
            api::VOLUME_REPLICATION_DEMOTE,
            promoted.clone(),
        ),
        (
            api::GROUP_REPLICATION_FAILOVER,
            api::GROUP_REPLICATION_DEMOTE,
            json!({
                "type": "object",
                "required": ["members"],
                "properties": { "members": { "type": "array", "items": promoted.clone() } }
            }),
        ),
    ] {
        for route in [failover, demote] {
            let op = &mut doc["paths"][v2(route)]["post"];
            if op.is_null() {
                continue;
            }
            let mut extra = vec![query("site", str_or_null.clone())];
            if route == failover {
                extra.push(query("planned", bool_or_null.clone()));
            }
            if let Some(params) = op["parameters"].as_array_mut() {
                let known: Vec<Value> = params.iter().map(|p| p["name"].clone()).collect();
                params.extend(extra.into_iter().filter(|p| !known.contains(&p["name"])));
            }
            for code in ["400", "409", "412"] {
                op["responses"][code] = refusal.clone();
            }
            if route == failover {
                // A group's asynchronous failover answers 200 too, with its results.
                let schema = match op.pointer("/responses/200/content/application~1json/schema") {
                    Some(async_answer) => json!({ "anyOf": [async_answer, ok] }),
                    None => ok.clone(),
                };
                op["responses"]["200"] = json!({
                    "description": "Served on the site",
                    "content": { "application/json": { "schema": schema } }
                });
            }
        }
    }
}

/// `ReplicationStatusDTO` of a newer control plane (reference §10).
fn status_schema() -> Value {
    let num_or_null = json!({ "anyOf": [{ "type": "number" }, { "type": "null" }] });
    json!({
        "title": "ReplicationStatusDTO",
        "type": "object",
        "required": [
            "role", "state", "last_replicated_at", "lag_seconds", "lag_budget_seconds",
            "outstanding_count", "outstanding_bytes", "failing_count", "max_retry_reached",
            "last_cycle_bytes", "last_cycle_seconds", "resyncing"
        ],
        "properties": {
            "role": { "type": "string" },
            "state": { "type": "string" },
            "last_replicated_at": { "anyOf": [{ "type": "string" }, { "type": "null" }] },
            "lag_seconds": num_or_null,
            "lag_budget_seconds": num_or_null,
            "outstanding_count": { "type": "integer" },
            "outstanding_bytes": { "type": "integer" },
            "failing_count": { "type": "integer" },
            "max_retry_reached": { "type": "boolean" },
            "last_cycle_bytes": { "type": "integer" },
            "last_cycle_seconds": { "type": "number" },
            "resyncing": { "type": "boolean" }
        }
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).and_then(|c| (*c as char).to_digit(16)),
                bytes.get(i + 2).and_then(|c| (*c as char).to_digit(16)),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_match_with_and_without_slash() {
        let s = Spec::load();
        assert!(s.templates().count() >= 80);
        let m = s
            .match_path("/api/v2/clusters/abc/storage-pools/def/volumes/")
            .expect("match");
        assert_eq!(m.template, v2(api::VOLUMES));
        assert_eq!(m.params["pool_id"], "def");
        assert!(s.match_path("/api/v2/clusters/abc").is_none());
        assert!(s.match_path("/api/v2/clusters/abc/activate").is_some());
        assert!(s.match_path("/api/v2/clusters/abc/activate/").is_none());
        // A literal segment beats a parameter.
        let m = s
            .match_path(
                "/api/v2/clusters/a/storage-pools/b/volumes/replicate_lvol_on_source_cluster",
            )
            .expect("literal");
        assert!(m.template.ends_with("replicate_lvol_on_source_cluster"));
    }

    #[test]
    fn request_bodies_are_checked() {
        let s = Spec::load();
        let (schema, required) = s
            .request_schema("POST", &v2(api::CLUSTERS))
            .expect("schema");
        assert!(required);
        let issues = s.validate(&schema, &json!({"name": "x"}));
        let missing: Vec<_> = issues
            .iter()
            .filter(|i| i.kind == "missing")
            .map(|i| i.loc.clone())
            .collect();
        assert!(missing.contains(&vec![json!("max_subsys")]), "{missing:?}");
        assert!(
            s.validate(&schema, &json!({"max_subsys": 1, "spdk_vcpu_count": 2}))
                .is_empty()
        );
        let issues = s.validate(
            &schema,
            &json!({"max_subsys": 1, "spdk_vcpu_count": 2, "blk_size": 7}),
        );
        assert_eq!(issues.len(), 1);
    }

    #[test]
    fn nqn_segments_are_decoded() {
        let s = Spec::load();
        let m = s
            .match_path("/api/v2/clusters/c/subsystems/nqn.2023-02.io.simplyblock%3Ax/migrations/")
            .expect("match");
        assert_eq!(m.params["nqn"], "nqn.2023-02.io.simplyblock:x");
    }
}

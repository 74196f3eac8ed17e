//! Conversion between `storage.simplyblock.io/v1alpha1`, the shapes the Go operator stored,
//! and the v1alpha2 hub: the pure functions behind the conversion webhook.
//!
//! Each converting kind declares its [`Rule`]s: renames, inverted toggles, enums recased by
//! table, numbers written as text, and the few mappings that need code. Everything else is
//! carried where the target version has the same path and stashed where it has none:
//!
//! - a field only v1alpha1 can say goes up as the annotation
//!   `storage.simplyblock.io/v1alpha1-<path>`, and a field only the hub can say goes down as
//!   `storage.simplyblock.io/conversion-<path>`; the value is its JSON;
//! - a rule that cannot carry a value exactly (text that is not a number, a spelling of a
//!   boolean other than the canonical one) stashes the original beside its converted value,
//!   and the way back restores it only while the other side still says the same thing;
//! - restoring deletes the annotation; a value that says nothing (null, empty) writes none.
//!
//! So v1alpha1 → hub → v1alpha1 and hub → v1alpha1 → hub are the identity on everything
//! either version can say, which the property tests check against the CRDs' own schemas.
//! Conversion never fails: an object of a kind or version it does not know comes back with
//! only its `apiVersion` changed.

mod kinds;
pub mod path;
pub mod schema;

use std::collections::BTreeMap;
use std::sync::LazyLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Map, Value};

use crate::schema::Node;

/// The key prefix of a v1alpha1-only field carried in a hub object.
pub const UP_STASH: &str = "storage.simplyblock.io/v1alpha1-";
/// The key prefix of a hub-only field carried in a v1alpha1 object.
pub const DOWN_STASH: &str = "storage.simplyblock.io/conversion-";

/// The hub's `apiVersion`.
pub const HUB: &str = simplyblock_api::API_VERSION;
/// The spoke's `apiVersion`.
pub const SPOKE: &str = simplyblock_api::v1alpha1::API_VERSION;

/// How one value maps between the versions.
#[derive(Clone, Copy)]
pub enum Mapping {
    /// The same value under another path.
    Same,
    /// A toggle said the other way round.
    Negate,
    /// An enum, recased by a table of (v1alpha1, hub) pairs; unknown values pass through.
    Enum(&'static [(&'static str, &'static str)]),
    /// A number written as text in v1alpha1 (`"10"`) and as a number in the hub.
    IntText,
    /// A toggle written as `True`/`False` text in v1alpha1 and as a boolean in the hub.
    BoolText,
    /// Anything else: `up` and `down` see the value and the whole source object.
    Code {
        up: fn(&Value, &Value) -> Option<Value>,
        down: fn(&Value, &Value) -> Option<Value>,
    },
    /// A hub value derived from the v1alpha1 object (its `v1alpha1` path is empty). Down,
    /// the value is dropped when the v1alpha1 object derives it again, else stashed.
    Derived(fn(&Value) -> Option<Value>),
}

/// One declared mapping: the field at `v1alpha1` is the field at `hub`.
#[derive(Clone, Copy)]
pub struct Rule {
    pub v1alpha1: &'static str,
    pub hub: &'static str,
    pub map: Mapping,
}

impl Rule {
    pub const fn same(v1alpha1: &'static str, hub: &'static str) -> Rule {
        Rule {
            v1alpha1,
            hub,
            map: Mapping::Same,
        }
    }
    pub const fn with(v1alpha1: &'static str, hub: &'static str, map: Mapping) -> Rule {
        Rule { v1alpha1, hub, map }
    }
}

/// Which way a conversion goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// v1alpha1 to the hub.
    Up,
    /// The hub to v1alpha1.
    Down,
}

impl Direction {
    fn source_path(self, rule: &Rule) -> &'static str {
        match self {
            Direction::Up => rule.v1alpha1,
            Direction::Down => rule.hub,
        }
    }
    fn target_path(self, rule: &Rule) -> &'static str {
        match self {
            Direction::Up => rule.hub,
            Direction::Down => rule.v1alpha1,
        }
    }
    fn stash_out(self) -> &'static str {
        match self {
            Direction::Up => UP_STASH,
            Direction::Down => DOWN_STASH,
        }
    }
    fn stash_in(self) -> &'static str {
        match self {
            Direction::Up => DOWN_STASH,
            Direction::Down => UP_STASH,
        }
    }
    fn reverse(self) -> Direction {
        match self {
            Direction::Up => Direction::Down,
            Direction::Down => Direction::Up,
        }
    }
}

/// One converting kind: its rules and the CRDs of both versions.
pub struct Kind {
    pub kind: &'static str,
    pub rules: &'static [Rule],
    pub v1alpha1: fn() -> CustomResourceDefinition,
    pub hub: fn() -> CustomResourceDefinition,
}

/// A kind with its schemas read once.
pub struct Prepared {
    pub kind: &'static Kind,
    pub v1alpha1: Value,
    pub hub: Value,
}

impl Prepared {
    /// The schema of the version a direction converts into.
    pub fn target(&self, direction: Direction) -> Node<'_> {
        Node(match direction {
            Direction::Up => &self.hub,
            Direction::Down => &self.v1alpha1,
        })
    }
}

fn open_api_schema(crd: &CustomResourceDefinition) -> Value {
    crd.spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null)
}

static KINDS: LazyLock<Vec<Prepared>> = LazyLock::new(|| {
    kinds::ALL
        .iter()
        .map(|kind| Prepared {
            kind,
            v1alpha1: open_api_schema(&(kind.v1alpha1)()),
            hub: open_api_schema(&(kind.hub)()),
        })
        .collect()
});

/// Every converting kind.
pub fn kinds() -> &'static [Prepared] {
    &KINDS
}

/// The converting kind named `kind`.
pub fn prepared(kind: &str) -> Option<&'static Prepared> {
    KINDS.iter().find(|p| p.kind.kind == kind)
}

/// Converts `object` to `api_version`. Never fails: an object already at that version, or of
/// a kind or version this does not convert, comes back with `apiVersion` set and nothing
/// else changed.
pub fn convert(object: &Value, api_version: &str) -> Value {
    let from = object.get("apiVersion").and_then(Value::as_str);
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .and_then(prepared);
    let direction = match (from, api_version) {
        (Some(SPOKE), HUB) => Some(Direction::Up),
        (Some(HUB), SPOKE) => Some(Direction::Down),
        _ => None,
    };
    match (kind, direction) {
        (Some(kind), Some(direction)) => run(kind, direction, object),
        _ => {
            let mut same = object.clone();
            path::set(
                &mut same,
                "apiVersion",
                Value::String(api_version.to_owned()),
            );
            same
        }
    }
}

/// Converts one object of `kind` in `direction`.
pub fn run(kind: &Prepared, direction: Direction, object: &Value) -> Value {
    let target = kind.target(direction);
    let mut source = object.clone();
    let mut annotations: BTreeMap<String, String> = source
        .pointer("/metadata/annotations")
        .and_then(|a| serde_json::from_value(a.clone()).ok())
        .unwrap_or_default();
    let mut out = Value::Object(Map::new());
    path::set(
        &mut out,
        "apiVersion",
        Value::String(
            match direction {
                Direction::Up => HUB,
                Direction::Down => SPOKE,
            }
            .to_owned(),
        ),
    );
    if let Some(kind) = source.get("kind") {
        path::set(&mut out, "kind", kind.clone());
    }
    if let Some(mut metadata) = source.get("metadata").cloned() {
        if let Some(m) = metadata.as_object_mut() {
            m.remove("annotations");
        }
        path::set(&mut out, "metadata", metadata);
    }
    let mut stash = BTreeMap::<String, Value>::new();

    // The declared rules, each consuming its source value.
    for rule in kind.kind.rules {
        let from = direction.source_path(rule);
        let to = direction.target_path(rule);
        if let Mapping::Derived(derive) = rule.map {
            match direction {
                Direction::Up => {
                    if let Some(value) = derive(object) {
                        path::set(&mut out, to, value);
                    }
                }
                Direction::Down => {
                    // Dropped when the v1alpha1 object says it again; else left to the stash.
                    let here = path::get(&source, from).cloned();
                    if here.is_some() && here == derive(object) {
                        path::take(&mut source, from);
                    }
                }
            }
            continue;
        }
        let Some(value) = path::take(&mut source, from) else {
            continue;
        };
        if path::is_empty(&value) {
            continue;
        }
        match map(rule.map, direction, &value, object) {
            Some(converted) => {
                let back = map(rule.map, direction.reverse(), &converted, object);
                if back.as_ref() != Some(&value) {
                    stash.insert(from.to_owned(), value.clone());
                }
                path::set(&mut out, to, converted);
            }
            None => {
                stash.insert(from.to_owned(), value);
            }
        }
    }

    // What no rule took: carried where the target has the path, stashed where it has none.
    for top in ["spec", "status"] {
        if let Some(rest) = source.get(top) {
            carry(rest, top, target.child(top), &mut out, &mut stash);
        }
    }

    // The other side's stash, restored.
    let incoming: Vec<String> = annotations
        .keys()
        .filter(|k| k.starts_with(direction.stash_in()))
        .cloned()
        .collect();
    for key in incoming {
        let Some(text) = annotations.remove(&key) else {
            continue;
        };
        let at = &key[direction.stash_in().len()..];
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if restorable(kind, direction, at, &value, object) {
            merge(&mut out, at, value);
        }
    }

    // This side's stash, written.
    for (at, value) in stash {
        if path::is_empty(&value) {
            continue;
        }
        if let Ok(text) = serde_json::to_string(&value) {
            annotations.insert(format!("{}{at}", direction.stash_out()), text);
        }
    }
    if !annotations.is_empty() {
        path::set(
            &mut out,
            "metadata.annotations",
            serde_json::to_value(annotations).unwrap_or_default(),
        );
    }
    out
}

/// Whether a stashed value at `at` goes back: always for a field only the target can say
/// (and for a derived one: the stash wins); for a value a rule converts, only while it is a
/// refinement of what the source says now, i.e. maps back to exactly the source's value.
fn restorable(
    kind: &Prepared,
    direction: Direction,
    at: &str,
    value: &Value,
    object: &Value,
) -> bool {
    let Some(rule) = kind
        .kind
        .rules
        .iter()
        .find(|r| direction.target_path(r) == at)
    else {
        return true;
    };
    if matches!(rule.map, Mapping::Derived(_)) {
        return true;
    }
    let said = path::get(object, direction.source_path(rule)).filter(|v| !path::is_empty(v));
    map(rule.map, direction.reverse(), value, object).as_ref() == said
}

/// Applies a rule's mapping in `direction`; `None` when the value cannot be carried.
fn map(map: Mapping, direction: Direction, value: &Value, object: &Value) -> Option<Value> {
    match (map, direction) {
        (Mapping::Same, _) => Some(value.clone()),
        (Mapping::Negate, _) => value.as_bool().map(|b| Value::Bool(!b)),
        (Mapping::Enum(table), _) => {
            let text = value.as_str()?;
            let found = match direction {
                Direction::Up => table.iter().find(|(v1, _)| *v1 == text).map(|(_, h)| *h),
                Direction::Down => table.iter().find(|(_, h)| *h == text).map(|(v1, _)| *v1),
            };
            Some(Value::String(found.unwrap_or(text).to_owned()))
        }
        (Mapping::IntText, Direction::Up) => {
            value.as_str()?.trim().parse::<i64>().ok().map(Value::from)
        }
        (Mapping::IntText, Direction::Down) => value.as_i64().map(|n| Value::String(n.to_string())),
        (Mapping::BoolText, Direction::Up) => match value.as_str()? {
            "True" | "true" => Some(Value::Bool(true)),
            "False" | "false" => Some(Value::Bool(false)),
            _ => None,
        },
        (Mapping::BoolText, Direction::Down) => value
            .as_bool()
            .map(|b| Value::String(if b { "True" } else { "False" }.to_owned())),
        (Mapping::Code { up, .. }, Direction::Up) => up(value, object),
        (Mapping::Code { down, .. }, Direction::Down) => down(value, object),
        (Mapping::Derived(_), _) => None,
    }
}

/// Carries `value` (at `at` in the source) into `out`: into the same path where the target's
/// schema has it, descending into structs both versions declare, and into the stash where
/// the target has no such path.
fn carry(
    value: &Value,
    at: &str,
    target: Option<Node<'_>>,
    out: &mut Value,
    stash: &mut BTreeMap<String, Value>,
) {
    let Some(target) = target else {
        stash.insert(at.to_owned(), value.clone());
        return;
    };
    match value.as_object() {
        Some(fields) if target.is_struct() => {
            for (key, field) in fields {
                carry(field, &format!("{at}.{key}"), target.child(key), out, stash);
            }
        }
        _ => {
            if path::is_empty(value) {
                return;
            }
            if path::get(out, at).is_some() {
                // A rule already wrote here: the source's own value goes to the stash.
                stash.insert(at.to_owned(), value.clone());
            } else {
                path::set(out, at, value.clone());
            }
        }
    }
}

/// Sets `value` at `at`, field by field where both it and what is there are objects: a
/// stashed block restores its fields beside those the rules wrote into the same block.
fn merge(out: &mut Value, at: &str, value: Value) {
    match (path::get(out, at).map(Value::is_object), value) {
        (Some(true), Value::Object(fields)) => {
            for (key, field) in fields {
                merge(out, &format!("{at}.{key}"), field);
            }
        }
        (_, value) => path::set(out, at, value),
    }
}

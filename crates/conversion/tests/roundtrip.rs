//! Conversion is the identity both ways round, on objects generated from the CRDs' own
//! schemas: everything v1alpha1 can say survives v1alpha1 → hub → v1alpha1, everything the
//! hub can say survives hub → v1alpha1 → hub, and every converted object holds only what its
//! version's schema declares (the API server would prune anything else), with annotation keys
//! the API server accepts.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};
use simplyblock_conversion::path::said;
use simplyblock_conversion::schema::Node;
use simplyblock_conversion::{Direction, Prepared, kinds, run};

/// Values of a schema node.
fn values(node: Node<'_>, depth: usize) -> BoxedStrategy<Value> {
    let schema = node.0;
    if schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        .unwrap_or(false)
    {
        return prop_oneof![
            (0i64..100).prop_map(Value::from),
            "[0-9]{1,2}%".prop_map(Value::from)
        ]
        .boxed();
    }
    if schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false)
        && node.kind() != Some("object")
        || depth > 8
    {
        return Just(json!({"kept": 1})).boxed();
    }
    if let Some(options) = node.enum_values() {
        return prop::sample::select(options.clone()).boxed();
    }
    match node.kind() {
        Some("boolean") => any::<bool>().prop_map(Value::from).boxed(),
        Some("integer") => {
            let min = schema.get("minimum").and_then(Value::as_i64);
            let max = schema.get("maximum").and_then(Value::as_i64);
            let (lo, hi) = match schema.get("format").and_then(Value::as_str) {
                Some("int32") => (i64::from(i32::MIN), i64::from(i32::MAX)),
                _ => (-(1 << 40), 1 << 40),
            };
            let (lo, hi) = (min.unwrap_or(lo), max.unwrap_or(hi));
            prop_oneof![
                Just(lo.max(0).min(hi)),
                Just(hi.min(lo.max(0) + 1)),
                lo..=hi
            ]
            .prop_map(Value::from)
            .boxed()
        }
        Some("number") => prop_oneof![Just(0.5f64), Just(3.0), -1000.0f64..1000.0]
            .prop_map(Value::from)
            .boxed(),
        Some("string") => strings(node),
        Some("array") => {
            let items = node
                .items()
                .map(|i| values(i, depth + 1))
                .unwrap_or_else(|| Just(Value::from("x")).boxed());
            prop::collection::vec(items, 0..3)
                .prop_map(Value::Array)
                .boxed()
        }
        _ => objects(node, depth),
    }
}

fn strings(node: Node<'_>) -> BoxedStrategy<Value> {
    let schema = node.0;
    if schema.get("format").and_then(Value::as_str) == Some("date-time") {
        return prop::sample::select(vec![
            "2026-01-02T03:04:05Z".to_owned(),
            "2025-12-31T23:59:59Z".to_owned(),
        ])
        .prop_map(Value::from)
        .boxed();
    }
    let max = schema
        .get("maxLength")
        .and_then(Value::as_u64)
        .unwrap_or(16) as usize;
    let free = prop_oneof![
        "[a-zA-Z0-9._-]{1,12}",
        prop::sample::select(vec![
            "0".to_owned(),
            "12".to_owned(),
            " 5".to_owned(),
            "-3".to_owned(),
            "007".to_owned(),
            "abc".to_owned(),
            "True".to_owned(),
            "false".to_owned(),
            "10G".to_owned(),
        ]),
    ];
    let patterned = schema
        .get("pattern")
        .and_then(Value::as_str)
        .and_then(|p| proptest::string::string_regex(p).ok());
    match patterned {
        Some(p) => p
            .prop_map(move |s: String| Value::from(s.chars().take(max.max(1)).collect::<String>()))
            .boxed(),
        None => free
            .prop_map(move |s: String| Value::from(s.chars().take(max.max(1)).collect::<String>()))
            .boxed(),
    }
}

fn objects(node: Node<'_>, depth: usize) -> BoxedStrategy<Value> {
    if !node.is_struct() {
        // A map (or an object that keeps anything): a few entries.
        let entries = match node.0.get("additionalProperties").filter(|v| v.is_object()) {
            Some(v) => values(Node(v), depth + 1),
            None => Just(Value::from(1)).boxed(),
        };
        return prop::collection::btree_map("[a-z]{1,6}", entries, 0..3)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
            .boxed();
    }
    let required: Vec<String> = node
        .0
        .get("required")
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .unwrap_or_default();
    let fields: Vec<BoxedStrategy<Option<(String, Value)>>> = node
        .fields()
        .map(|(key, child)| {
            let key = key.clone();
            let value = values(child, depth + 1);
            if required.contains(&key) {
                value.prop_map(move |v| Some((key.clone(), v))).boxed()
            } else {
                prop::option::of(value.prop_map(move |v| (key.clone(), v))).boxed()
            }
        })
        .collect();
    fields
        .prop_map(|fields| Value::Object(fields.into_iter().flatten().collect::<Map<_, _>>()))
        .boxed()
}

/// Whole objects of one version of a kind: metadata with a few annotations and owners.
fn object(
    kind: &'static str,
    api_version: &'static str,
    schema: Node<'static>,
) -> BoxedStrategy<Value> {
    let spec = schema
        .child("spec")
        .map(|s| values(s, 1))
        .unwrap_or_else(|| Just(json!({})).boxed());
    let status = schema.child("status").map(|s| values(s, 1));
    let status = match status {
        Some(s) => prop::option::of(s).boxed(),
        None => Just(None).boxed(),
    };
    let annotations =
        prop::collection::btree_map("example\\.com/[a-z]{1,6}", "[a-z0-9 ]{0,8}", 0..3);
    let owners = prop::collection::vec(
        (
            prop::sample::select(vec!["StorageCluster", "StorageNodeSet", "Deployment"]),
            "[a-z]{1,6}",
            any::<bool>(),
        ),
        0..3,
    );
    (spec, status, annotations, owners)
        .prop_map(move |(spec, status, annotations, owners)| {
            let mut metadata = json!({"name": "object", "namespace": "simplyblock"});
            if !annotations.is_empty() {
                metadata["annotations"] = json!(annotations);
            }
            if !owners.is_empty() {
                metadata["ownerReferences"] = Value::Array(
                    owners
                        .into_iter()
                        .map(|(kind, name, controller)| {
                            json!({"apiVersion": "storage.simplyblock.io/v1alpha1", "kind": kind,
                                   "name": name, "uid": format!("uid-{name}"),
                                   "controller": controller})
                        })
                        .collect(),
                );
            }
            let mut object = json!({"apiVersion": api_version, "kind": kind,
                                    "metadata": metadata, "spec": spec});
            if let Some(status) = status {
                object["status"] = status;
            }
            object
        })
        .boxed()
}

/// Every path of `value` is one `schema` declares, with its type and enum.
fn conforms(value: &Value, schema: Node<'_>, at: &str) -> Result<(), String> {
    if schema.0.is_null() {
        return Ok(());
    }
    if schema.0.get("x-kubernetes-int-or-string").is_some() {
        return Ok(());
    }
    if let Some(options) = schema.enum_values()
        && !options.contains(value)
    {
        return Err(format!("{at}: {value} is not one of {options:?}"));
    }
    let fits = match (schema.kind(), value) {
        (Some("string"), Value::String(_)) => true,
        (Some("integer"), Value::Number(n)) => n.is_i64() || n.is_u64(),
        (Some("number"), Value::Number(_)) => true,
        (Some("boolean"), Value::Bool(_)) => true,
        (Some("array"), Value::Array(items)) => {
            if let Some(item) = schema.items() {
                for (i, v) in items.iter().enumerate() {
                    conforms(v, item, &format!("{at}[{i}]"))?;
                }
            }
            true
        }
        (Some("object") | None, Value::Object(fields)) => {
            for (k, v) in fields {
                match schema.child(k) {
                    Some(child) => conforms(v, child, &format!("{at}.{k}"))?,
                    None => return Err(format!("{at}.{k} is not in the schema: {v}")),
                }
            }
            true
        }
        (None, _) => true,
        _ => false,
    };
    if fits {
        Ok(())
    } else {
        Err(format!("{at}: {value} is not a {:?}", schema.kind()))
    }
}

fn conforms_object(object: &Value, schema: Node<'_>) -> Result<(), String> {
    for top in ["spec", "status"] {
        if let Some(v) = object.get(top) {
            match schema.child(top) {
                Some(node) => conforms(v, node, top)?,
                None => return Err(format!("{top} is not in the schema")),
            }
        }
    }
    let key = regex_lite_key();
    if let Some(annotations) = object
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    {
        for k in annotations.keys() {
            let name = k.rsplit_once('/').map_or(k.as_str(), |(_, n)| n);
            if name.len() > 63 || !key(name) {
                return Err(format!(
                    "annotation key {k} is not one the API server accepts"
                ));
            }
        }
    }
    Ok(())
}

/// Whether `name` is a valid annotation key name: at most 63 characters of
/// `[A-Za-z0-9._-]`, beginning and ending alphanumeric.
fn regex_lite_key() -> impl Fn(&str) -> bool {
    |name: &str| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric())
    }
}

fn round_trip(kind: &'static Prepared, start: Direction) {
    let (schema, version, there) = match start {
        Direction::Up => (
            Node(&kind.v1alpha1),
            simplyblock_conversion::SPOKE,
            Node(&kind.hub),
        ),
        Direction::Down => (
            Node(&kind.hub),
            simplyblock_conversion::HUB,
            Node(&kind.v1alpha1),
        ),
    };
    let back = match start {
        Direction::Up => Direction::Down,
        Direction::Down => Direction::Up,
    };
    let mut runner = TestRunner::new(Config {
        cases: 512,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&object(kind.kind.kind, version, schema), |original| {
            let converted = run(kind, start, &original);
            conforms_object(&converted, there).map_err(|e| {
                TestCaseError::fail(format!(
                    "{start:?} of {original:#}\ngave {converted:#}\n{e}"
                ))
            })?;
            let again = run(kind, back, &converted);
            conforms_object(&again, schema)
                .map_err(|e| TestCaseError::fail(format!("back: {again:#}\n{e}")))?;
            prop_assert_eq!(said(&again), said(&original), "through {:#}", converted);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{}: {e}", kind.kind.kind));
}

#[test]
fn every_v1alpha1_object_survives_the_hub() {
    for kind in kinds() {
        round_trip(kind, Direction::Up);
    }
}

#[test]
fn every_hub_object_survives_v1alpha1() {
    for kind in kinds() {
        round_trip(kind, Direction::Down);
    }
}
